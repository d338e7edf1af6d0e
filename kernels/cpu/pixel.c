/* pixel.c - the ops of the image-to-image models (upscalers): PReLU, pixel
 * (un)shuffle and nearest upsampling by an integer factor. One pool task per
 * [n, c] plane (of the channel-rich side for the shuffles). */
#include "cpu.h"

#include <string.h>

/* ---- PReLU --------------------------------------------------------------------- */

typedef struct {
    const float *x, *w;
    float *y;
    int64_t C, plane;
    int shared; /* one slope for every channel */
} prelu_job;

static void prelu_task(void *ctx, int64_t t, int thread) {
    const prelu_job *j = ctx;
    float a = j->w[j->shared ? 0 : t % j->C];
    const float *x = j->x + t * j->plane;
    float *y = j->y + t * j->plane;
    for (int64_t i = 0; i < j->plane; i++) y[i] = x[i] >= 0.0f ? x[i] : a * x[i];
}

sd_status sd_cpu_prelu(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w) {
    prelu_job j = {sd_cpu_f32(x), sd_cpu_f32(w), sd_cpu_f32(out), x->shape[1], 1,
                   sd_bt_numel(w) == 1};
    for (int i = 2; i < x->ndim; i++) j.plane *= x->shape[i];
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * x->shape[1], prelu_task, &j);
    return SD_OK;
}

/* ---- pixel shuffle / unshuffle --------------------------------------------------- */

/* Both directions walk the small side's planes: plane (n, k) of the
 * [N, C*r*r, h, w] tensor holds offsets (i, j) = ((k % rr) / r, k % r) of
 * channel k / rr of the [N, C, h*r, w*r] one. */
typedef struct {
    const float *x;
    float *y;
    int64_t h, w;
    int r, inverse;
} shuffle_job;

static void shuffle_task(void *ctx, int64_t t, int thread) {
    const shuffle_job *j = ctx;
    int64_t rr = (int64_t)j->r * j->r, k = t, /* plane index over N * C*r*r */
        big = k / rr, i = (k % rr) / j->r, jj = k % j->r, W = j->w * j->r;
    const float *small_p = j->inverse ? NULL : j->x + k * j->h * j->w;
    float *small_out = j->inverse ? j->y + k * j->h * j->w : NULL;
    for (int64_t yy = 0; yy < j->h; yy++) {
        int64_t brow = (big * j->h * j->r + yy * j->r + i) * W + jj;
        if (!j->inverse) {
            float *dst = j->y + brow;
            const float *src = small_p + yy * j->w;
            for (int64_t xx = 0; xx < j->w; xx++) dst[xx * j->r] = src[xx];
        } else {
            const float *src = j->x + brow;
            float *dst = small_out + yy * j->w;
            for (int64_t xx = 0; xx < j->w; xx++) dst[xx] = src[xx * j->r];
        }
    }
}

sd_status sd_cpu_pixel_shuffle(sd_backend *be, sd_bt *out, const sd_bt *x, int r, int inverse) {
    const sd_bt *small = inverse ? out : x;
    shuffle_job j = {sd_cpu_f32(x), sd_cpu_f32(out), small->shape[2], small->shape[3], r, inverse};
    sd_pool_run(sd_cpu_pool(be), small->shape[0] * small->shape[1], shuffle_task, &j);
    return SD_OK;
}

/* ---- nearest upsampling by an integer factor -------------------------------------- */

typedef struct {
    const float *x;
    float *y;
    int64_t H, W;
    int f;
} up_job;

static void up_task(void *ctx, int64_t t, int thread) {
    const up_job *j = ctx;
    int64_t Wo = j->W * j->f;
    const float *x = j->x + t * j->H * j->W;
    float *y = j->y + t * j->H * j->f * Wo;
    for (int64_t r = 0; r < j->H; r++) {
        float *row = y + r * j->f * Wo;
        for (int64_t c = 0; c < j->W; c++)
            for (int k = 0; k < j->f; k++) row[c * j->f + k] = x[r * j->W + c];
        for (int k = 1; k < j->f; k++) memcpy(row + k * Wo, row, (size_t)Wo * sizeof(float));
    }
}

sd_status sd_cpu_upsample_nearest(sd_backend *be, sd_bt *out, const sd_bt *x, int factor) {
    up_job j = {sd_cpu_f32(x), sd_cpu_f32(out), x->shape[2], x->shape[3], factor};
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * x->shape[1], up_task, &j);
    return SD_OK;
}
