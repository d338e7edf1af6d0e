/* filters.c - blur/sharpen kernels and correlation, flat morphology, blend
 * modes (filters.h). Float expressions keep PyTorch's operation order. */
#include "models/image/filters.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/sampling/rng.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ---- kernels ---------------------------------------------------------------------- */

/* torch.linspace(-1, 1, n) in float32 (the scalar kernel's formula: from the
 * start below the middle, from the end above it). */
static void linspace_pm1(int64_t n, float *v) {
    if (n == 1) { v[0] = -1.0f; return; }
    const float start = -1.0f, end = 1.0f, step = (end - start) / (float)(n - 1);
    int64_t half = n / 2;
    for (int64_t i = 0; i < n; i++) v[i] = i < half ? start + step * (float)i : end - step * (float)(n - i - 1);
}

int sd_gaussian_kernel(int64_t ks, double sigma, float *out) {
    float *l = malloc((size_t)ks * sizeof(float));
    if (!l) return -1;
    linspace_pm1(ks, l);
    const float den = (float)(2.0 * sigma * sigma);
    float sum = 0.0f;
    for (int64_t i = 0; i < ks; i++)
        for (int64_t j = 0; j < ks; j++) {
            float x = l[i], y = l[j];
            float d = sqrtf(x * x + y * y);
            float dd = d * d;
            float g = sd_torch_expf(-dd / den);
            out[i * ks + j] = g;
            sum += g;
        }
    for (int64_t i = 0; i < ks * ks; i++) out[i] = out[i] / sum;
    free(l);
    return 0;
}

int sd_sharpen_kernel(int64_t ks, double sigma, double alpha, float *out) {
    if (sd_gaussian_kernel(ks, sigma, out)) return -1;
    const float f = (float)(-(alpha * 10.0));
    float sum = 0.0f;
    for (int64_t i = 0; i < ks * ks; i++) {
        out[i] = out[i] * f;
        sum += out[i];
    }
    int64_t c = (ks / 2) * ks + ks / 2;
    float t = out[c] - sum;
    out[c] = t + 1.0f;
    return 0;
}

/* ---- reflect-padded correlation ---------------------------------------------------------- */

static int64_t reflect(int64_t i, int64_t n) {
    if (i < 0) return -i;
    if (i >= n) return 2 * (n - 1) - i;
    return i;
}

int sd_filter_reflect(const float *in, float *out, int64_t n, int64_t h, int64_t w, int64_t c,
                      const float *kernel, int64_t r) {
    const int64_t ks = 2 * r + 1;
    int64_t *cols = malloc((size_t)(w + 2 * r) * sizeof *cols);
    if (!cols) return -1;
    for (int64_t x = -r; x < w + r; x++) cols[x + r] = reflect(x, w);
    for (int64_t k = 0; k < n; k++) {
        const float *p = in + sd_plane_at(k, h, w, c);
        float *q = out + sd_plane_at(k, h, w, c);
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                double acc = 0.0;
                for (int64_t i = 0; i < ks; i++) {
                    const float *row = p + reflect(y + i - r, h) * w * c;
                    const float *kr = kernel + i * ks;
                    for (int64_t j = 0; j < ks; j++) acc += (double)kr[j] * (double)row[cols[x + j] * c];
                }
                q[(y * w + x) * c] = (float)acc;
            }
    }
    free(cols);
    return 0;
}

/* ---- flat morphology --------------------------------------------------------------------- */

/* Running max (min) over [i - lo, i + hi] clipped to [0, len), reading s
 * with stride ss and writing d with stride ds; q: scratch of len indices. */
static void run_window(const float *s, int64_t ss, float *d, int64_t ds, int64_t len, int64_t lo, int64_t hi,
                       int is_max, int64_t *q) {
    int64_t head = 0, tail = 0, next = 0;
    for (int64_t i = 0; i < len; i++) {
        int64_t end = i + hi < len - 1 ? i + hi : len - 1;
        for (; next <= end; next++) {
            float v = s[next * ss];
            while (tail > head && (is_max ? s[q[tail - 1] * ss] <= v : s[q[tail - 1] * ss] >= v)) tail--;
            q[tail++] = next;
        }
        while (q[head] < i - lo) head++;
        d[i * ds] = s[q[head] * ss];
    }
}

int sd_morph_flat(const float *in, float *out, int64_t n, int64_t h, int64_t w, int64_t c, int64_t ks,
                  int is_max) {
    int64_t lo = ks / 2, hi = ks - ks / 2 - 1;
    int64_t *q = malloc((size_t)(h > w ? h : w) * sizeof *q);
    float *tmp = malloc((size_t)(h * w) * sizeof(float));
    if (!q || !tmp) { free(q); free(tmp); return -1; }
    for (int64_t k = 0; k < n; k++) {
        const float *p = in + sd_plane_at(k, h, w, c);
        float *o = out + sd_plane_at(k, h, w, c);
        for (int64_t y = 0; y < h; y++) run_window(p + y * w * c, c, tmp + y * w, 1, w, lo, hi, is_max, q);
        for (int64_t x = 0; x < w; x++) run_window(tmp + x, w, o + x * c, w * c, h, lo, hi, is_max, q);
    }
    free(q);
    free(tmp);
    return 0;
}

/* ---- blend modes -------------------------------------------------------------------------- */

const char *const sd_blend_mode_names[] = {"normal", "multiply", "screen", "overlay", "soft_light", "difference",
                                           NULL};

int sd_blend_mode_parse(const char *name, sd_blend_mode *out) {
    for (int i = 0; name && sd_blend_mode_names[i]; i++)
        if (!strcmp(name, sd_blend_mode_names[i])) { *out = (sd_blend_mode)i; return 0; }
    return -1;
}

/* Blend.g: ((16x - 12)x + 4)x below 0.25, else sqrt(x). */
static float soft_g(float x) {
    if (x <= 0.25f) {
        float t = 16.0f * x;
        t = t - 12.0f;
        t = t * x;
        t = t + 4.0f;
        return t * x;
    }
    return sqrtf(x);
}

static float mode_value(sd_blend_mode m, float a, float b) {
    switch (m) {
    case SD_BLEND_NORMAL: return b;
    case SD_BLEND_MULTIPLY: return a * b;
    case SD_BLEND_SCREEN: { float t = (1.0f - a) * (1.0f - b); return 1.0f - t; }
    case SD_BLEND_OVERLAY:
        if (a <= 0.5f) { float t = 2.0f * a; return t * b; }
        else { float t = 2.0f * (1.0f - a); t = t * (1.0f - b); return 1.0f - t; }
    case SD_BLEND_SOFT_LIGHT:
        if (b <= 0.5f) {
            float t = 1.0f - 2.0f * b;
            t = t * a;
            t = t * (1.0f - a);
            return a - t;
        } else {
            float t = 2.0f * b - 1.0f;
            float u = soft_g(a) - a;
            t = t * u;
            return a + t;
        }
    case SD_BLEND_DIFFERENCE: return a - b;
    }
    return b;
}

void sd_blend(const float *a, const float *b, int64_t n, sd_blend_mode mode, double factor, float *out) {
    const float keep = (float)(1.0 - factor), f = (float)factor;
    for (int64_t i = 0; i < n; i++) {
        float m = mode_value(mode, a[i], b[i]);
        float x = a[i] * keep;
        float y = m * f;
        float v = x + y;
        out[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    }
}
