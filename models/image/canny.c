/* canny.c - kornia-style Canny (see canny.h for the steps). */
#include "models/image/canny.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Reflect index (PyTorch "reflect": mirror without repeating the edge). */
static int64_t reflect(int64_t i, int64_t n) {
    if (n == 1) return 0;
    int64_t period = 2 * (n - 1);
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
}

static int64_t clampi(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* 5-tap Gaussian, sigma 1, normalised in float32 as kornia's gaussian(). */
static void gauss5(float k[5]) {
    float sum = 0;
    for (int i = 0; i < 5; i++) {
        float x = (float)(i - 2);
        k[i] = expf(-(x * x) / (2.0f * 1.0f * 1.0f));
        sum += k[i];
    }
    for (int i = 0; i < 5; i++) k[i] /= sum;
}

/* One image: gray [H*W] -> edges [H*W] (0/1) and suppressed magnitude. */
static int canny_one(const float *gray, int64_t H, int64_t W, float low, float high, float *edges,
                     float *mag_out) {
    size_t n = (size_t)(H * W);
    float *tmp = malloc(n * sizeof *tmp), *blur = malloc(n * sizeof *blur);
    float *mag = malloc(n * sizeof *mag), *ang = malloc(n * sizeof *ang);
    int64_t *stack = malloc(n * sizeof *stack);
    if (!tmp || !blur || !mag || !ang || !stack) {
        free(tmp), free(blur), free(mag), free(ang), free(stack);
        return 0;
    }
    float k[5];
    gauss5(k);
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
            float s = 0;
            for (int j = 0; j < 5; j++) s += k[j] * gray[y * W + reflect(x + j - 2, W)];
            tmp[y * W + x] = s;
        }
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
            float s = 0;
            for (int j = 0; j < 5; j++) s += k[j] * tmp[reflect(y + j - 2, H) * W + x];
            blur[y * W + x] = s;
        }
    static const float sob[3][3] = {{-1, 0, 1}, {-2, 0, 2}, {-1, 0, 1}};
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
            float gx = 0, gy = 0;
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    float v = blur[clampi(y + i - 1, H) * W + clampi(x + j - 1, W)];
                    gx += sob[i][j] * v;
                    gy += sob[j][i] * v; /* the transposed kernel */
                }
            mag[y * W + x] = sqrtf(gx * gx + gy * gy + 1e-6f);
            float a = 180.0f * atan2f(gy, gx) / (float)M_PI;
            ang[y * W + x] = nearbyintf(a / 45.0f); /* round half to even (default mode) */
        }
    /* NMS: direction d (0..7) compares with the neighbour at offs[d] and the
     * opposite one at offs[(d + 4) % 8]. */
    static const int offs[8][2] = {{0, 1}, {1, 1}, {1, 0}, {1, -1}, {0, -1}, {-1, -1}, {-1, 0}, {-1, 1}};
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
            int d = ((int)ang[y * W + x] % 8 + 8) % 8;
            float m = mag[y * W + x];
            int keep = 1;
            for (int s = 0; s < 2 && keep; s++) {
                int dd = (d + 4 * s) % 8;
                int64_t yy = y + offs[dd][0], xx = x + offs[dd][1];
                float nb = (yy < 0 || yy >= H || xx < 0 || xx >= W) ? 0.0f : mag[yy * W + xx];
                keep = m - nb > 0.0f;
            }
            tmp[y * W + x] = keep ? m : 0.0f;
        }
    /* thresholds + hysteresis (flood fill from strong pixels through weak) */
    size_t top = 0;
    for (size_t i = 0; i < n; i++) {
        float m = tmp[i];
        edges[i] = m > high ? 1.0f : m > low ? 0.5f : 0.0f;
        if (edges[i] == 1.0f) stack[top++] = (int64_t)i;
    }
    while (top) {
        int64_t i = stack[--top], y = i / W, x = i % W;
        for (int dy = -1; dy <= 1; dy++)
            for (int dx = -1; dx <= 1; dx++) {
                int64_t yy = y + dy, xx = x + dx;
                if ((!dy && !dx) || yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                if (edges[yy * W + xx] == 0.5f) {
                    edges[yy * W + xx] = 1.0f;
                    stack[top++] = yy * W + xx;
                }
            }
    }
    for (size_t i = 0; i < n; i++)
        if (edges[i] != 1.0f) edges[i] = 0.0f;
    if (mag_out) memcpy(mag_out, tmp, n * sizeof *tmp);
    free(tmp), free(blur), free(mag), free(ang), free(stack);
    return 1;
}

sd_status sd_canny(const sd_tensor *image, double low_threshold, double high_threshold,
                   sd_tensor **edges, sd_tensor **magnitude, sd_error *err) {
    *edges = NULL;
    if (magnitude) *magnitude = NULL;
    if (!image || image->dtype != SD_F32 || image->ndim != 4 ||
        (image->shape[3] != 3 && image->shape[3] != 1))
        return sd_error_set(err, SD_ERR_INVALID, "Canny needs an F32 IMAGE [B, H, W, 3] (or 1 channel)");
    int64_t B = image->shape[0], H = image->shape[1], W = image->shape[2], C = image->shape[3];
    if (H < 3 || W < 3)
        return sd_error_set(err, SD_ERR_INVALID, "Canny needs an image of at least 3x3 pixels, got %lldx%lld",
                            (long long)W, (long long)H);
    if (low_threshold > high_threshold)
        return sd_error_set(err, SD_ERR_INVALID, "Canny low_threshold %g is above high_threshold %g",
                            low_threshold, high_threshold);
    sd_tensor *out = sd_tensor_new4(SD_F32, 4, B, H, W, 3);
    sd_tensor *mag = magnitude ? sd_tensor_new4(SD_F32, 3, B, H, W, 0) : NULL;
    float *gray = malloc((size_t)(H * W) * sizeof *gray), *e = malloc((size_t)(H * W) * sizeof *e);
    if (!out || (magnitude && !mag) || !gray || !e) {
        sd_tensor_unref(out);
        sd_tensor_unref(mag);
        free(gray);
        free(e);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory in Canny");
    }
    const float *src = sd_tensor_f32(image);
    float *dst = sd_tensor_f32(out);
    for (int64_t b = 0; b < B; b++) {
        const float *im = src + b * H * W * C;
        for (int64_t i = 0; i < H * W; i++)
            gray[i] = C == 3 ? 0.299f * im[i * 3] + 0.587f * im[i * 3 + 1] + 0.114f * im[i * 3 + 2] : im[i];
        if (!canny_one(gray, H, W, (float)low_threshold, (float)high_threshold, e,
                       mag ? sd_tensor_f32(mag) + b * H * W : NULL)) {
            sd_tensor_unref(out);
            sd_tensor_unref(mag);
            free(gray);
            free(e);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory in Canny");
        }
        float *o = dst + b * H * W * 3;
        for (int64_t i = 0; i < H * W; i++) o[i * 3] = o[i * 3 + 1] = o[i * 3 + 2] = e[i];
    }
    free(gray);
    free(e);
    *edges = out;
    if (magnitude) *magnitude = mag;
    return SD_OK;
}
