/* test_pixel_ops.c - the image-model ops (leaky_relu, prelu, pixel_shuffle,
 * pixel_unshuffle, upsample_nearest) on the CPU backend against direct
 * loops over their PyTorch definitions (index formulas written out, not the
 * kernels' plane walks), on odd shapes and 1 and 2 threads; plus the
 * argument checks each op makes. Data movement must be exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "testutil.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / 16777216.0 * 2.0 - 1.0);
}

static sd_tensor *rand_t(int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    sd_tensor *t = sd_tensor_new4(SD_F32, ndim, a, b, c, d);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = urand() * 3.0f;
    return t;
}

/* got (backend) == want (host, F32) exactly; frees got. */
static void same(const char *what, sd_bt *got, const sd_tensor *want) {
    CHECK_MSG(got != NULL, "%s: NULL result", what);
    if (!got) return;
    sd_tensor *h = sd_bt_to_host(got);
    int shape_ok = sd_tensor_same_shape(h, want);
    CHECK_MSG(shape_ok, "%s: shape differs", what);
    if (shape_ok) {
        int64_t bad = -1;
        for (int64_t i = 0; i < sd_tensor_numel(h) && bad < 0; i++)
            if (sd_tensor_f32(h)[i] != sd_tensor_f32(want)[i]) bad = i;
        CHECK_MSG(bad < 0, "%s: element %lld: %g, want %g", what, (long long)bad,
                  bad >= 0 ? sd_tensor_f32(h)[bad] : 0.0, bad >= 0 ? sd_tensor_f32(want)[bad] : 0.0);
    }
    sd_tensor_unref(h);
    sd_bt_free(got);
}

static void run(sd_backend *be) {
    int64_t N = 2, C = 5, H = 7, W = 9;
    sd_tensor *xh = rand_t(4, N, C, H, W);
    sd_bt *x = sd_bt_from_host(be, xh, SD_F32);
    const float *xv = sd_tensor_f32(xh);

    /* leaky_relu: x >= 0 ? x : slope * x */
    sd_tensor *want = sd_tensor_new4(SD_F32, 4, N, C, H, W);
    for (int64_t i = 0; i < sd_tensor_numel(xh); i++)
        sd_tensor_f32(want)[i] = xv[i] >= 0 ? xv[i] : xv[i] * 0.2f;
    same("leaky_relu 0.2", sd_op_leaky_relu(x, 0.2f), want);

    /* prelu, per channel and shared */
    sd_tensor *wh = rand_t(1, C, 0, 0, 0);
    sd_bt *w = sd_bt_from_host(be, wh, SD_F32);
    for (int64_t i = 0; i < sd_tensor_numel(xh); i++) {
        float a = sd_tensor_f32(wh)[(i / (H * W)) % C];
        sd_tensor_f32(want)[i] = xv[i] >= 0 ? xv[i] : a * xv[i];
    }
    same("prelu [C]", sd_op_prelu(x, w), want);
    sd_tensor *w1h = rand_t(1, 1, 0, 0, 0);
    sd_bt *w1 = sd_bt_from_host(be, w1h, SD_F32);
    for (int64_t i = 0; i < sd_tensor_numel(xh); i++)
        sd_tensor_f32(want)[i] = xv[i] >= 0 ? xv[i] : sd_tensor_f32(w1h)[0] * xv[i];
    same("prelu [1]", sd_op_prelu(x, w1), want);
    sd_tensor_unref(want);

    /* pixel_shuffle r = 2 and 3: y[n, c, h*r+i, w*r+j] = x[n, c*r*r + i*r + j, h, w] */
    for (int r = 2; r <= 3; r++) {
        int64_t Cs = 2;
        sd_tensor *sh = rand_t(4, N, Cs * r * r, H, W);
        sd_bt *s = sd_bt_from_host(be, sh, SD_F32);
        sd_tensor *big = sd_tensor_new4(SD_F32, 4, N, Cs, H * r, W * r);
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < Cs; c++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t ww = 0; ww < W; ww++)
                        for (int i = 0; i < r; i++)
                            for (int j = 0; j < r; j++)
                                sd_tensor_f32(big)[((n * Cs + c) * H * r + h * r + i) * W * r +
                                                   ww * r + j] =
                                    sd_tensor_f32(sh)[((n * Cs * r * r + c * r * r + i * r + j) * H +
                                                       h) * W + ww];
        same(r == 2 ? "pixel_shuffle 2" : "pixel_shuffle 3", sd_op_pixel_shuffle(s, r), big);
        /* unshuffle inverts it */
        sd_bt *bb = sd_bt_from_host(be, big, SD_F32);
        same(r == 2 ? "pixel_unshuffle 2" : "pixel_unshuffle 3", sd_op_pixel_unshuffle(bb, r), sh);
        sd_bt_free(bb);
        sd_bt_free(s);
        sd_tensor_unref(sh);
        sd_tensor_unref(big);
    }

    /* upsample_nearest f = 1, 2, 3, 4: y[.., h, w] = x[.., h / f, w / f] */
    for (int f = 1; f <= 4; f++) {
        sd_tensor *up = sd_tensor_new4(SD_F32, 4, N, C, H * f, W * f);
        for (int64_t p = 0; p < N * C; p++)
            for (int64_t h = 0; h < H * f; h++)
                for (int64_t ww = 0; ww < W * f; ww++)
                    sd_tensor_f32(up)[(p * H * f + h) * W * f + ww] = xv[(p * H + h / f) * W + ww / f];
        char what[64];
        snprintf(what, sizeof what, "upsample_nearest %d", f);
        same(what, sd_op_upsample_nearest(x, f), up);
        if (f == 2) same("upsample_nearest2x agrees", sd_op_upsample_nearest2x(x), up);
        sd_tensor_unref(up);
    }

    /* argument checks: each fails with the op named, then clears */
    struct {
        const char *name;
        sd_bt *r;
    } bad[4];
    sd_tensor *c3h = rand_t(4, 1, 3, 4, 4);
    sd_bt *c3 = sd_bt_from_host(be, c3h, SD_F32);
    bad[0].name = "prelu";
    bad[0].r = sd_op_prelu(c3, w); /* 5 slopes for 3 channels */
    sd_backend_clear_error(be);
    bad[1].name = "pixel_shuffle";
    bad[1].r = sd_op_pixel_shuffle(c3, 2); /* 3 channels not divisible by 4 */
    const sd_error *e1 = sd_backend_error(be);
    CHECK(e1 && strstr(e1->msg, "pixel_shuffle"));
    sd_backend_clear_error(be);
    bad[2].name = "pixel_unshuffle";
    bad[2].r = sd_op_pixel_unshuffle(x, 2); /* H 7 odd */
    const sd_error *e2 = sd_backend_error(be);
    CHECK(e2 && strstr(e2->msg, "pixel_unshuffle"));
    sd_backend_clear_error(be);
    bad[3].name = "upsample_nearest";
    bad[3].r = sd_op_upsample_nearest(x, 0);
    const sd_error *e3 = sd_backend_error(be);
    CHECK(e3 && strstr(e3->msg, "upsample_nearest"));
    sd_backend_clear_error(be);
    for (int i = 0; i < 4; i++) CHECK_MSG(bad[i].r == NULL, "%s accepted bad arguments", bad[i].name);

    sd_bt_free(c3);
    sd_tensor_unref(c3h);
    sd_bt_free(w);
    sd_bt_free(w1);
    sd_tensor_unref(wh);
    sd_tensor_unref(w1h);
    sd_bt_free(x);
    sd_tensor_unref(xh);
}

int main(void) {
    for (int threads = 1; threads <= 2; threads++) {
        sd_backend *be = NULL;
        sd_error err;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (!be) break;
        run(be);
        CHECK(sd_backend_error(be) == NULL);
        sd_backend_free(be);
    }
    return sd_test_finish();
}
