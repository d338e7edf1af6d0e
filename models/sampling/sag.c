/* sag.c - Self-Attention Guidance's blurred prediction (sag.h). */
#include "models/sampling/sag.h"

#include <math.h>
#include <stdlib.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define KSIZE 9

/* gaussian_blur_2d's 1-D kernel: pdf = exp(-0.5 (x / sigma)^2) over
 * x = linspace(-4, 4, 9), divided by its (float32) sum. */
static void blur_kernel(double sigma, float k[KSIZE]) {
    const float s = (float)sigma;
    float sum = 0.0f;
    for (int i = 0; i < KSIZE; i++) {
        float x = (float)(i - KSIZE / 2);
        float t = x / s;
        t = t * t;
        k[i] = expf(-0.5f * t);
    }
    for (int i = 0; i < KSIZE; i++) sum += k[i];
    for (int i = 0; i < KSIZE; i++) k[i] = k[i] / sum;
}

/* F.pad(mode="reflect") index: -1 -> 1, n -> n - 2 (pad < n) */
static int64_t reflect(int64_t i, int64_t n) {
    if (i < 0) return -i;
    if (i >= n) return 2 * (n - 1) - i;
    return i;
}

/* The rows of create_blur_map's layout of `total` tokens for an H x W
 * latent, or 0 when its search finds none. */
static int64_t layout_rows(int64_t total, int64_t H, int64_t W) {
    double x = nearbyint(sqrt(((double)H / (double)W) * (double)total)); /* round(): half to even */
    int64_t xi = (int64_t)x;
    int64_t tries = (int64_t)floor(sqrt((double)total) / 2.0);
    for (int64_t i = 0; i < tries; i++) {
        int64_t c[2] = {xi + i, xi - i > 1 ? xi - i : 1};
        for (int k = 0; k < 2; k++)
            if (c[k] > 0 && total % c[k] == 0) return c[k];
    }
    return 0;
}

sd_status sd_sag_degrade(const float *x0, const int64_t shape[4], const float *mass, int64_t L, double blur_sigma,
                         double threshold, float *out, sd_error *err) {
    const int64_t B = shape[0], C = shape[1], H = shape[2], W = shape[3];
    if (H <= KSIZE / 2 || W <= KSIZE / 2)
        return sd_error_set(err, SD_ERR_INVALID, "self-attention guidance: the latent (%lld x %lld) is too small "
                            "to blur", (long long)H, (long long)W);
    const int64_t rows = layout_rows(L, H, W);
    if (rows <= 0)
        return sd_error_set(err, SD_ERR_INVALID, "self-attention guidance: the middle block's %lld attention "
                            "tokens have no layout for a %lld x %lld latent", (long long)L, (long long)H,
                            (long long)W);
    const int64_t cols = L / rows;
    float k[KSIZE], k2[KSIZE][KSIZE];
    blur_kernel(blur_sigma, k);
    for (int i = 0; i < KSIZE; i++)
        for (int j = 0; j < KSIZE; j++) k2[i][j] = k[i] * k[j];
    /* F.interpolate(mode="nearest") to H x W: src = min(floor(dst * (in / out)), in - 1) in float32 */
    const float sr = (float)rows / (float)H, sc = (float)cols / (float)W;
    const float th = (float)threshold;
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < H; r++) {
            int64_t mr = (int64_t)floorf((float)r * sr);
            if (mr > rows - 1) mr = rows - 1;
            for (int64_t q = 0; q < W; q++) {
                int64_t mc = (int64_t)floorf((float)q * sc);
                if (mc > cols - 1) mc = cols - 1;
                const float m = mass[b * L + mr * cols + mc] > th ? 1.0f : 0.0f, m1 = 1.0f - m;
                for (int64_t c = 0; c < C; c++) {
                    const float *p = x0 + (b * C + c) * H * W;
                    double acc = 0.0;
                    for (int i = 0; i < KSIZE; i++) {
                        const float *row = p + reflect(r + i - KSIZE / 2, H) * W;
                        for (int j = 0; j < KSIZE; j++) acc += (double)row[reflect(q + j - KSIZE / 2, W)] * k2[i][j];
                    }
                    float bl = (float)acc * m;
                    float keep = p[r * W + q] * m1;
                    out[(b * C + c) * H * W + r * W + q] = bl + keep;
                }
            }
        }
    return SD_OK;
}
