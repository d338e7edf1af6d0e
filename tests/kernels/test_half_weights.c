/* test_half_weights.c - weights kept in their stored F16/BF16/fp8 dtype.
 *
 * Widening F16/BF16/fp8 to F32 is exact, so every op fed such a weight must
 * give bit-identical results to the same op fed the widened F32 copy (on
 * random shapes, odd sizes included). Also checks each widening path the CPU
 * runs against the scalar converter of core/dtype.h, and that the backend
 * says it accepts those dtypes. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "testutil.h"

static unsigned seed = 777;
static float frand(void) {
    seed = seed * 1103515245u + 12345u;
    return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Host tensor of random values, rounded through dt so the F32 twin holds
 * exactly the widened values. */
static sd_tensor *rand_host(sd_dtype dt, int ndim, const int64_t *shape) {
    sd_tensor *f = sd_tensor_new(SD_F32, ndim, shape);
    float *p = f->data;
    for (int64_t i = 0; i < sd_tensor_numel(f); i++) p[i] = frand() * 3.0f;
    sd_tensor *h = sd_tensor_to_dtype(f, dt);
    sd_tensor_unref(f);
    return h;
}

typedef struct {
    sd_bt *half, *wide; /* the same values, stored dt and F32 */
} pair;

static pair make_pair(sd_backend *be, sd_dtype dt, int ndim, const int64_t *shape) {
    sd_tensor *h = rand_host(dt, ndim, shape);
    pair p = {sd_bt_from_host(be, h, dt), sd_bt_from_host(be, h, SD_F32)};
    sd_tensor_unref(h);
    return p;
}

static void free_pair(pair p) {
    sd_bt_free(p.half);
    sd_bt_free(p.wide);
}

static sd_bt *rand_f32(sd_backend *be, int ndim, const int64_t *shape) {
    sd_tensor *h = rand_host(SD_F32, ndim, shape);
    sd_bt *b = sd_bt_from_host(be, h, SD_F32);
    sd_tensor_unref(h);
    return b;
}

/* Bitwise equality of two op results (both must exist). */
static void same(const char *what, sd_dtype dt, sd_bt *a, sd_bt *b) {
    CHECK_MSG(a && b, "%s (%s): op failed", what, sd_dtype_name(dt));
    if (a && b) {
        CHECK_MSG(a->dtype == SD_F32 && b->dtype == SD_F32 && a->nbytes == b->nbytes,
                  "%s (%s): result dtype/size", what, sd_dtype_name(dt));
        if (a->nbytes == b->nbytes)
            CHECK_MSG(memcmp(a->data, b->data, a->nbytes) == 0, "%s (%s): results differ", what,
                      sd_dtype_name(dt));
    }
    sd_bt_free(a);
    sd_bt_free(b);
}

static void test_widen_paths(void) {
    static const int64_t sizes[] = {1, 7, 8, 15, 16, 17, 31, 100, 1000};
    for (int isa = SD_ISA_SCALAR; isa <= sd_cpu_isa(); isa++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int64_t n = sizes[si];
            uint16_t *h = malloc((size_t)n * 2);
            float *got = malloc((size_t)n * 4);
            for (int dt = SD_F16; dt <= SD_BF16; dt++) {
                for (int64_t i = 0; i < n; i++) {
                    /* all bit patterns incl. subnormals, inf, nan */
                    seed = seed * 1103515245u + 12345u;
                    h[i] = (uint16_t)(seed >> 12);
                }
                sd_cpu_widen((sd_dtype)dt, h, got, n, isa);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    float want = dt == SD_F16 ? sd_f16_to_f32(h[i]) : sd_bf16_to_f32(h[i]);
                    if (memcmp(&want, &got[i], 4) != 0 && !(want != want && got[i] != got[i]))
                        bad++;
                }
                CHECK_MSG(bad == 0, "widen %s isa %d n %lld: %d values differ",
                          sd_dtype_name((sd_dtype)dt), isa, (long long)n, bad);
            }
            free(h);
            free(got);
        }
    /* fp8: every one of the 256 codes, in runs of odd lengths */
    uint8_t codes[300];
    float got[300];
    for (int i = 0; i < 300; i++) codes[i] = (uint8_t)(i * 7);
    for (int dt = SD_F8_E4M3; dt <= SD_F8_E5M2; dt++)
        for (int isa = SD_ISA_SCALAR; isa <= sd_cpu_isa(); isa++) {
            sd_cpu_widen((sd_dtype)dt, codes, got, 300, isa);
            int bad = 0;
            for (int i = 0; i < 300; i++) {
                float want = dt == SD_F8_E4M3 ? sd_f8_e4m3_to_f32(codes[i]) : sd_f8_e5m2_to_f32(codes[i]);
                if (memcmp(&want, &got[i], 4) != 0 && !(want != want && got[i] != got[i])) bad++;
            }
            CHECK_MSG(bad == 0, "widen %s isa %d: %d values differ", sd_dtype_name((sd_dtype)dt), isa, bad);
        }
}

static void test_ops(sd_backend *be, sd_dtype dt) {
    for (int round = 0; round < 4; round++) {
        int64_t in = 1 + round * 37 + (round == 3 ? 300 : 0), out = 3 + round * 29;
        int64_t rows = 1 + round * 53;
        int64_t xs[2] = {rows, in}, ws[2] = {out, in}, bs[1] = {out};
        sd_bt *x = rand_f32(be, 2, xs);
        pair w = make_pair(be, dt, 2, ws), b = make_pair(be, dt, 1, bs);
        same("linear", dt, sd_op_linear(x, w.half, b.half), sd_op_linear(x, w.wide, b.wide));
        same("matmul trans_b", dt, sd_op_matmul(x, w.half, 1, 0.5f),
             sd_op_matmul(x, w.wide, 1, 0.5f));
        /* x + bias row broadcast, half on the right */
        pair rowb = make_pair(be, dt, 1, xs + 1);
        same("add", dt, sd_op_add(x, rowb.half), sd_op_add(x, rowb.wide));
        same("layer_norm", dt, sd_op_layer_norm(x, rowb.half, rowb.half, 1e-5f),
             sd_op_layer_norm(x, rowb.wide, rowb.wide, 1e-5f));
        free_pair(rowb);
        free_pair(w);
        free_pair(b);
        sd_bt_free(x);

        /* conv2d with odd image sizes, 3x3 pad 1 and 1x1, stride 1 and 2 */
        int64_t C = 2 + round * 3, O = 4 + round * 5, H = 5 + round * 7, W = 3 + round * 11;
        int64_t cxs[4] = {2, C, H, W}, cws[4] = {O, C, 3, 3}, c1s[4] = {O, C, 1, 1}, cbs[1] = {O};
        sd_bt *cx = rand_f32(be, 4, cxs);
        pair cw = make_pair(be, dt, 4, cws), cw1 = make_pair(be, dt, 4, c1s),
             cb = make_pair(be, dt, 1, cbs);
        for (int stride = 1; stride <= 2; stride++)
            same("conv2d 3x3", dt, sd_op_conv2d(cx, cw.half, cb.half, stride, 1, 1),
                 sd_op_conv2d(cx, cw.wide, cb.wide, stride, 1, 1));
        same("conv2d 1x1", dt, sd_op_conv2d(cx, cw1.half, NULL, 1, 0, 0),
             sd_op_conv2d(cx, cw1.wide, NULL, 1, 0, 0));
        pair g = make_pair(be, dt, 1, cxs + 1);
        int groups = C % 2 == 0 ? 2 : 1;
        same("group_norm", dt, sd_op_group_norm(cx, groups, g.half, g.half, 1e-5f, 1),
             sd_op_group_norm(cx, groups, g.wide, g.wide, 1e-5f, 1));
        free_pair(g);
        free_pair(cw);
        free_pair(cw1);
        free_pair(cb);
        sd_bt_free(cx);

        /* embedding gathers rows of a half table */
        int64_t V = 5 + round * 13, E = 1 + round * 9, ts[2] = {V, E};
        pair tab = make_pair(be, dt, 2, ts);
        int64_t is[2] = {1, 6};
        sd_tensor *ids = sd_tensor_new(SD_I32, 2, is);
        for (int i = 0; i < 6; i++) ((int32_t *)ids->data)[i] = (int32_t)((i * 7 + round) % V);
        sd_bt *bids = sd_bt_from_host(be, ids, SD_I32);
        same("embedding", dt, sd_op_embedding(tab.half, bids), sd_op_embedding(tab.wide, bids));
        sd_bt_free(bids);
        sd_tensor_unref(ids);
        free_pair(tab);
    }
    CHECK_MSG(sd_backend_error(be) == NULL, "backend error: %s",
              sd_backend_error(be) ? sd_backend_error(be)->msg : "");
}

/* Weights of 1 MiB and more go through the backend's reusable widen buffer:
 * back-to-back ops, a growing size, and two big inputs widened at once (one
 * takes the buffer, the other fresh memory). */
static void test_big(sd_backend *be, sd_dtype dt) {
    int64_t xs[2] = {5, 640}, w1s[2] = {512, 640}, w2s[2] = {700, 640};
    sd_bt *x = rand_f32(be, 2, xs);
    pair w1 = make_pair(be, dt, 2, w1s), w2 = make_pair(be, dt, 2, w2s);
    for (int rep = 0; rep < 2; rep++) {
        same("big linear", dt, sd_op_linear(x, w1.half, NULL), sd_op_linear(x, w1.wide, NULL));
        same("bigger linear", dt, sd_op_linear(x, w2.half, NULL), sd_op_linear(x, w2.wide, NULL));
    }
    same("two big inputs", dt, sd_op_matmul(w1.half, w2.half, 1, 1.0f),
         sd_op_matmul(w1.wide, w2.wide, 1, 1.0f));
    free_pair(w1);
    free_pair(w2);
    sd_bt_free(x);
}

int main(void) {
    test_widen_paths();
    for (int threads = 1; threads <= 2; threads++) {
        sd_backend *be = NULL;
        sd_error err;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (!be) return sd_test_finish();
        CHECK(sd_backend_accepts_dtype(be, SD_F32));
        CHECK(sd_backend_accepts_dtype(be, SD_F16));
        CHECK(sd_backend_accepts_dtype(be, SD_BF16));
        CHECK(sd_backend_accepts_dtype(be, SD_F8_E4M3));
        CHECK(sd_backend_accepts_dtype(be, SD_F8_E5M2));
        CHECK(!sd_backend_accepts_dtype(be, SD_I32));
        static const sd_dtype dts[4] = {SD_F16, SD_BF16, SD_F8_E4M3, SD_F8_E5M2};
        for (int k = 0; k < 4; k++) {
            test_ops(be, dts[k]);
            test_big(be, dts[k]);
        }
        sd_backend_free(be);
    }
    return sd_test_finish();
}
