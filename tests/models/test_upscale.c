/* test_upscale.c - upscale model loading and tiling beyond the goldens:
 * files of other kinds refused with the file and what was found named
 * (unknown keys, ESRGAN+, a Compact file with a broken body), a basicsr
 * "params_ema." prefixed copy giving the same output as the plain file,
 * comfy.utils.get_tiled_scale_steps' tile counts, tiled output of an image
 * that fits one tile equal to the single forward, the [0, 1] clamp, bad
 * arguments, the out-of-memory back-off (a forward that fails above a tile
 * size: the tile halves until it fits, or the error comes back below the
 * minimum) and progress / cancellation per tile. Uses the committed tiny models in tests/data/upscale. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/upscale/upscale_internal.h"
#include "testutil.h"

static char dir[4096];
static sd_backend *be;

/* An in-memory safetensors file of the given tensors (names[i] -> ts[i]);
 * *buf must be freed after the file is closed. */
static sd_st_file *mem_file(int n, const char *const *names, sd_tensor **ts, void **buf) {
    sd_error err;
    sd_st_writer *w = sd_st_writer_new();
    for (int i = 0; i < n; i++) CHECK_OK(sd_st_writer_add(w, names[i], ts[i], &err), &err);
    size_t size = 0;
    *buf = NULL;
    CHECK_OK(sd_st_writer_to_memory(w, buf, &size, &err), &err);
    sd_st_writer_free(w);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open_memory(*buf, size, "mem.safetensors", &f, &err), &err);
    return f;
}

static void refusals(void) {
    sd_error err;
    sd_upscale *m = NULL;
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, 4, 3, 3, 3);
    sd_tensor *ts[3] = {t, t, t};
    void *buf;
    /* unknown keys */
    const char *n1[2] = {"layers.0.residual_group.blocks.0.attn.qkv.weight", "conv_after_body.weight"};
    sd_st_file *f = mem_file(2, n1, ts, &buf);
    sd_status rc = sd_upscale_load(be, f, &m, &err);
    CHECK(rc == SD_ERR_UNSUPPORTED && m == NULL);
    CHECK_MSG(strstr(err.msg, "mem.safetensors") && strstr(err.msg, "unknown upscale model") &&
                  strstr(err.msg, "conv_after_body.weight"),
              "message: %s", err.msg);
    sd_st_close(f);
    free(buf);
    /* ESRGAN+ */
    const char *n2[2] = {"model.0.weight", "model.1.sub.0.RDB1.conv1x1.weight"};
    f = mem_file(2, n2, ts, &buf);
    rc = sd_upscale_load(be, f, &m, &err);
    CHECK(rc == SD_ERR_UNSUPPORTED && strstr(err.msg, "ESRGAN+"));
    sd_st_close(f);
    free(buf);
    /* a Compact whose body.2 conv is missing (body.0, body.1, body.4) */
    sd_tensor *p = sd_tensor_new4(SD_F32, 1, 4, 0, 0, 0), *b = sd_tensor_new4(SD_F32, 1, 4, 0, 0, 0);
    sd_tensor *ts3[5] = {t, b, p, t, b};
    const char *n3[5] = {"body.0.weight", "body.0.bias", "body.1.weight", "body.4.weight", "body.4.bias"};
    f = mem_file(5, n3, ts3, &buf);
    rc = sd_upscale_load(be, f, &m, &err);
    CHECK_MSG(rc == SD_ERR_NOT_FOUND && strstr(err.msg, "body.2.weight"), "Compact gap: %s", err.msg);
    sd_st_close(f);
    free(buf);
    CHECK(sd_backend_error(be) == NULL);
    sd_tensor_unref(p);
    sd_tensor_unref(b);
    sd_tensor_unref(t);
}

/* Every tensor of `src` under prefix "params_ema." in a new in-memory file. */
static void prefixed(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/compact_2x.safetensors", dir);
    sd_error err;
    sd_st_file *src = NULL;
    CHECK_OK(sd_st_open(path, &src, &err), &err);
    if (!src) return;
    size_t n = sd_st_count(src);
    char **names = calloc(n, sizeof *names);
    sd_tensor **ts = calloc(n, sizeof *ts);
    for (size_t i = 0; i < n; i++) {
        const char *k = sd_st_at(src, i)->name;
        names[i] = malloc(strlen(k) + 16);
        sprintf(names[i], "params_ema.%s", k);
        ts[i] = sd_st_tensor(src, k, &err);
    }
    void *buf;
    sd_st_file *f = mem_file((int)n, (const char *const *)names, ts, &buf);
    sd_upscale *a = NULL, *b = NULL;
    CHECK_OK(sd_upscale_load(be, src, &a, &err), &err);
    CHECK_OK(sd_upscale_load(be, f, &b, &err), &err);
    if (a && b) {
        sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, 9, 7, 3), *ya = NULL, *yb = NULL;
        for (int64_t i = 0; i < sd_tensor_numel(img); i++)
            sd_tensor_f32(img)[i] = (float)((i * 37) % 101) / 100.0f;
        CHECK_OK(sd_upscale_image(a, img, 512, 32, 128, NULL, NULL, &ya, NULL, &err), &err);
        CHECK_OK(sd_upscale_image(b, img, 512, 32, 128, NULL, NULL, &yb, NULL, &err), &err);
        CHECK(ya && yb && ya->nbytes == yb->nbytes && memcmp(ya->data, yb->data, ya->nbytes) == 0);
        /* output within [0, 1] and of scale x the size */
        if (ya) {
            CHECK(ya->shape[1] == 18 && ya->shape[2] == 14 && ya->shape[3] == 3);
            int inside = 1;
            for (int64_t i = 0; i < sd_tensor_numel(ya); i++)
                inside &= sd_tensor_f32(ya)[i] >= 0.0f && sd_tensor_f32(ya)[i] <= 1.0f;
            CHECK(inside);
        }
        /* an image that fits one tile: the tiled path is one forward */
        sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, 3, 9, 7), *yf = NULL;
        for (int64_t c = 0; c < 3; c++)
            for (int64_t i = 0; i < 63; i++)
                sd_tensor_f32(x)[c * 63 + i] = sd_tensor_f32(img)[i * 3 + c];
        CHECK_OK(sd_upscale_forward(a, x, &yf, &err), &err);
        if (yf && ya) {
            int same = 1;
            for (int64_t c = 0; c < 3; c++)
                for (int64_t i = 0; i < 18 * 14; i++)
                    same &= sd_tensor_f32(yf)[c * 18 * 14 + i] == sd_tensor_f32(ya)[i * 3 + c];
            CHECK(same);
        }
        /* bad arguments */
        sd_tensor *y = NULL;
        CHECK(sd_upscale_image(a, img, 16, 16, 16, NULL, NULL, &y, NULL, &err) == SD_ERR_INVALID);
        sd_tensor *gray = sd_tensor_new4(SD_F32, 4, 1, 4, 4, 1);
        CHECK(sd_upscale_image(a, gray, 512, 32, 128, NULL, NULL, &y, NULL, &err) == SD_ERR_INVALID);
        CHECK(sd_upscale_forward(a, img, &y, &err) == SD_ERR_INVALID && y == NULL);
        sd_tensor_unref(gray);
        sd_tensor_unref(x);
        sd_tensor_unref(yf);
        sd_tensor_unref(img);
        sd_tensor_unref(ya);
        sd_tensor_unref(yb);
    }
    sd_upscale_free(a);
    sd_upscale_free(b);
    sd_st_close(f);
    free(buf);
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
        sd_tensor_unref(ts[i]);
    }
    free(names);
    free(ts);
    sd_st_close(src);
}

/* A forward that runs out of memory when the tile is larger than *limit. */
typedef struct {
    int limit, calls, fails;
} oom_ctx;

static sd_status oom_forward(void *user, sd_upscale *m, const sd_tensor *x, sd_tensor **y,
                             sd_error *err) {
    oom_ctx *c = user;
    c->calls++;
    if (x->shape[2] > c->limit || x->shape[3] > c->limit) {
        c->fails++;
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory (test: tile %lldx%lld > %d)",
                            (long long)x->shape[3], (long long)x->shape[2], c->limit);
    }
    return sd_upscale_forward(m, x, y, err);
}

typedef struct {
    int64_t last, total, calls, stop_at;
} prog_ctx;

static sd_status prog(void *user, int64_t done, int64_t total, sd_error *err) {
    prog_ctx *p = user;
    p->calls++;
    p->last = done;
    p->total = total;
    if (p->stop_at && done == p->stop_at) return sd_error_set(err, SD_ERR_CANCELLED, "stopped");
    return SD_OK;
}

static void backoff(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/compact_2x.safetensors", dir);
    sd_error err;
    sd_upscale *m = NULL;
    CHECK_OK(sd_upscale_load_file(be, path, &m, &err), &err);
    if (!m) return;
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, 2, 36, 40, 3);
    for (int64_t i = 0; i < sd_tensor_numel(img); i++)
        sd_tensor_f32(img)[i] = (float)((i * 53) % 97) / 96.0f;
    /* 64 (one tile: 40x36 > 20) and 32 fail, 16 fits */
    oom_ctx c = {20, 0, 0};
    prog_ctx p = {0};
    sd_tensor *got = NULL, *want = NULL;
    int used = 0;
    CHECK_OK(sd_upscale_image_with(m, img, 64, 4, 8, oom_forward, &c, prog, &p, &got, &used, &err),
             &err);
    CHECK_MSG(used == 16, "tile used %d, want 16", used);
    CHECK(c.fails == 2);
    /* the last pass's progress: every tile of both images */
    CHECK(p.total == 2 * sd_upscale_tile_count(40, 36, 16, 4) && p.last == p.total);
    CHECK_OK(sd_upscale_image(m, img, 16, 4, 16, NULL, NULL, &want, NULL, &err), &err);
    CHECK(got && want && memcmp(got->data, want->data, want->nbytes) == 0);
    sd_tensor_unref(got);
    got = NULL;
    /* minimum 32: 64 and 32 fail, 16 is below the minimum -> the error */
    oom_ctx c2 = {20, 0, 0};
    used = 0;
    sd_status rc = sd_upscale_image_with(m, img, 64, 4, 32, oom_forward, &c2, NULL, NULL, &got,
                                         &used, &err);
    CHECK_MSG(rc == SD_ERR_NOMEM && got == NULL && strstr(err.msg, "out of memory"), "rc %d: %s",
              (int)rc, err.msg);
    CHECK(c2.fails == 2 && used == 0);
    /* the activation estimate grows with the tile's pixels */
    uint64_t b16 = sd_upscale_forward_bytes(m, 16, 16), b32 = sd_upscale_forward_bytes(m, 32, 32);
    CHECK(b16 > 0 && b32 == 4 * b16);
    CHECK(sd_upscale_forward_bytes(m, (int64_t)1 << 40, 8) == UINT64_MAX);
    /* cancelled from the progress callback at the third tile */
    prog_ctx p3 = {0, 0, 0, 3};
    rc = sd_upscale_image(m, img, 16, 4, 16, prog, &p3, &got, NULL, &err);
    CHECK(rc == SD_ERR_CANCELLED && got == NULL && p3.calls == 3);
    sd_tensor_unref(want);
    sd_tensor_unref(img);
    sd_upscale_free(m);
}

static void tile_counts(void) {
    /* rows = 1 if h <= tile else ceil((h - overlap) / (tile - overlap)), cols alike */
    CHECK(sd_upscale_tile_count(512, 512, 512, 32) == 1);
    CHECK(sd_upscale_tile_count(513, 100, 512, 32) == 2);
    CHECK(sd_upscale_tile_count(1000, 600, 512, 32) == 3 * 2);
    CHECK(sd_upscale_tile_count(36, 40, 16, 4) == 3 * 3);
    CHECK(sd_upscale_tile_count(10, 10, 4, 4) == -1);
}

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s/tests/data/upscale", src ? src : "..");
    sd_error err;
    CHECK_OK(sd_backend_new("cpu", 2, &be, &err), &err);
    if (!be) return sd_test_finish();
    refusals();
    prefixed();
    tile_counts();
    backoff();
    sd_backend_free(be);
    return sd_test_finish();
}
