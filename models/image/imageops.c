/* imageops.c - common_upscale: PyTorch interpolate modes, Pillow Lanczos and
 * ComfyUI bislerp on NCHW float planes. See imageops.h for the semantics;
 * comments here explain where the arithmetic order is deliberate. */
#include "models/image/imageops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[SD_UPSCALE_COUNT] = {
    "nearest-exact", "bilinear", "area", "bicubic", "lanczos", "bislerp"};

int sd_upscale_method_parse(const char *name, sd_upscale_method *out) {
    for (int i = 0; name && i < SD_UPSCALE_COUNT; i++)
        if (strcmp(name, method_names[i]) == 0) { *out = (sd_upscale_method)i; return 0; }
    return -1;
}

const char *sd_upscale_method_name(sd_upscale_method m) {
    return (unsigned)m < SD_UPSCALE_COUNT ? method_names[m] : "?";
}

int sd_crop_mode_parse(const char *name, sd_crop_mode *out) {
    if (name && strcmp(name, "disabled") == 0) { *out = SD_CROP_DISABLED; return 0; }
    if (name && strcmp(name, "center") == 0) { *out = SD_CROP_CENTER; return 0; }
    return -1;
}

/* ---- layout helpers ---------------------------------------------------------- */

sd_tensor *sd_imageops_nhwc_to_nchw(const sd_tensor *x) {
    if (!x || x->dtype != SD_F32 || x->ndim != 4) return NULL;
    int64_t n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, n, c, h, w);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < h * w; i++)
            for (int64_t k = 0; k < c; k++)
                d[(b * c + k) * h * w + i] = s[(b * h * w + i) * c + k];
    return o;
}

sd_tensor *sd_imageops_nchw_to_nhwc(const sd_tensor *x) {
    if (!x || x->dtype != SD_F32 || x->ndim != 4) return NULL;
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, n, h, w, c);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < c; k++)
            for (int64_t i = 0; i < h * w; i++)
                d[(b * h * w + i) * c + k] = s[(b * c + k) * h * w + i];
    return o;
}

/* ---- per-axis index/weight tables -------------------------------------------- */

/* PyTorch nearest_neighbor_exact_compute_source_index (float scale). */
static void nearest_exact_axis(int64_t in, int64_t out, int64_t *idx) {
    float scale = (float)in / (float)out;
    for (int64_t o = 0; o < out; o++) {
        int64_t i = (int64_t)floorf(((float)o + 0.5f) * scale);
        idx[o] = i < in - 1 ? i : in - 1;
    }
}

typedef struct lin_w {
    int64_t i0, i1;
    float l0, l1;
} lin_w;

/* PyTorch compute_source_index_and_lambda (align_corners=False): the scale
 * is a float in/out ratio, but the source position and the weights are
 * computed in double (area_pixel_compute_source_index on the accumulate
 * type) and only the weights rounded to float. */
static void linear_axis(int64_t in, int64_t out, lin_w *a) {
    double scale = (double)((float)in / (float)out);
    for (int64_t o = 0; o < out; o++) {
        if (in == out) { a[o] = (lin_w){o, o, 1.0f, 0.0f}; continue; }
        double src = scale * ((double)o + 0.5) - 0.5;
        if (src < 0.0) src = 0.0;
        int64_t i0 = (int64_t)src;
        if (i0 > in - 1) i0 = in - 1;
        double l1 = fmin(fmax(src - (double)i0, 0.0), 1.0);
        a[o].i0 = i0;
        a[o].i1 = i0 + (i0 < in - 1 ? 1 : 0);
        a[o].l1 = (float)l1;
        a[o].l0 = (float)(1.0 - l1);
    }
}

typedef struct cub_w {
    int64_t i[4];
    float w[4];
} cub_w;

static float cubic1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static float cubic2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/* PyTorch HelperInterpCubic (align_corners=False, A = -0.75): the source
 * position in double from the float scale (as for linear), the fraction
 * rounded to float, the coefficients in float. */
static void cubic_axis(int64_t in, int64_t out, cub_w *a) {
    const float A = -0.75f;
    double scale = (double)((float)in / (float)out);
    for (int64_t o = 0; o < out; o++) {
        double src = scale * ((double)o + 0.5) - 0.5;
        int64_t i = (int64_t)floor(src);
        if (i > in - 1) i = in - 1;
        float t = (float)fmin(fmax(src - (double)i, 0.0), 1.0);
        a[o].w[0] = cubic2(t + 1.0f, A);
        a[o].w[1] = cubic1(t, A);
        float t2 = 1.0f - t;
        a[o].w[2] = cubic1(t2, A);
        a[o].w[3] = cubic2(t2 + 1.0f, A);
        for (int k = 0; k < 4; k++) {
            int64_t j = i - 1 + k;
            a[o].i[k] = j < 0 ? 0 : j > in - 1 ? in - 1 : j;
        }
    }
}

/* ---- plane resamplers (one [H, W] plane, contiguous) ------------------------- */

static void plane_nearest(const float *s, int64_t ih, int64_t iw, float *d, int64_t oh,
                          int64_t ow, const int64_t *ty, const int64_t *tx) {
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++) d[y * ow + x] = s[ty[y] * iw + tx[x]];
    (void)ih;
}

static void plane_bilinear(const float *s, int64_t iw, float *d, int64_t oh, int64_t ow,
                           const lin_w *ty, const lin_w *tx, int channels_last) {
    for (int64_t y = 0; y < oh; y++) {
        const float *r0 = s + ty[y].i0 * iw, *r1 = s + ty[y].i1 * iw;
        float h0 = ty[y].l0, h1 = ty[y].l1;
        for (int64_t x = 0; x < ow; x++) {
            const lin_w *c = &tx[x];
            if (channels_last) {
                /* cpu_upsample_linear_channels_last: products of weights first */
                d[y * ow + x] = h0 * c->l0 * r0[c->i0] + h0 * c->l1 * r0[c->i1] +
                                h1 * c->l0 * r1[c->i0] + h1 * c->l1 * r1[c->i1];
            } else {
                /* generic Nd kernel: inner (W) sums, then outer (H) */
                float t0 = r0[c->i0] * c->l0;
                t0 += r0[c->i1] * c->l1;
                float t1 = r1[c->i0] * c->l0;
                t1 += r1[c->i1] * c->l1;
                float o = t0 * h0;
                o += t1 * h1;
                d[y * ow + x] = o;
            }
        }
    }
}

static void plane_bicubic(const float *s, int64_t iw, float *d, int64_t oh, int64_t ow,
                          const cub_w *ty, const cub_w *tx) {
    for (int64_t y = 0; y < oh; y++) {
        for (int64_t x = 0; x < ow; x++) {
            const cub_w *c = &tx[x];
            float o = 0.0f;
            for (int j = 0; j < 4; j++) {
                const float *r = s + ty[y].i[j] * iw;
                float t = r[c->i[0]] * c->w[0];
                for (int k = 1; k < 4; k++) t += r[c->i[k]] * c->w[k];
                if (j == 0) o = t * ty[y].w[0];
                else o += t * ty[y].w[j];
            }
            d[y * ow + x] = o;
        }
    }
}

/* adaptive_avg_pool2d: sum in float, then / kh / kw (two divisions as in
 * PyTorch's CPU kernel). */
static void plane_area(const float *s, int64_t ih, int64_t iw, float *d, int64_t oh,
                       int64_t ow) {
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0 = (y * ih) / oh, y1 = ((y + 1) * ih + oh - 1) / oh;
        for (int64_t x = 0; x < ow; x++) {
            int64_t x0 = (x * iw) / ow, x1 = ((x + 1) * iw + ow - 1) / ow;
            float sum = 0.0f;
            for (int64_t a = y0; a < y1; a++)
                for (int64_t b = x0; b < x1; b++) sum += s[a * iw + b];
            d[y * ow + x] = sum / (float)(y1 - y0) / (float)(x1 - x0);
        }
    }
}

/* ---- Pillow LANCZOS (8-bit fixed point) --------------------------------------- */

#define PIL_PRECISION_BITS (32 - 8 - 2)

static double sinc_filter(double x) {
    if (x == 0.0) return 1.0;
    x = x * M_PI;
    return sin(x) / x;
}

static double lanczos_filter(double x) {
    if (-3.0 <= x && x < 3.0) return sinc_filter(x) * sinc_filter(x / 3.0);
    return 0.0;
}

typedef struct pil_coeffs {
    int ksize;
    int *bounds; /* [out][2]: xmin, count */
    int *kk;     /* [out][ksize] fixed-point weights */
} pil_coeffs;

/* Pillow precompute_coeffs + normalize_coeffs_8bpc for box [0, in). */
static int pil_precompute(int in, int out, pil_coeffs *pc) {
    double scale = (double)in / out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 3.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *k = malloc(sizeof *k * (size_t)out * ksize);
    pc->bounds = malloc(sizeof *pc->bounds * (size_t)out * 2);
    pc->kk = malloc(sizeof *pc->kk * (size_t)out * ksize);
    pc->ksize = ksize;
    if (!k || !pc->bounds || !pc->kk) {
        free(k); free(pc->bounds); free(pc->kk);
        pc->bounds = NULL; pc->kk = NULL;
        return -1;
    }
    for (int xx = 0; xx < out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in) xmax = in;
        xmax -= xmin;
        double *kr = k + (size_t)xx * ksize;
        int x;
        for (x = 0; x < xmax; x++) {
            double w = lanczos_filter((x + xmin - center + 0.5) * ss);
            kr[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) kr[x] /= ww;
        for (; x < ksize; x++) kr[x] = 0;
        pc->bounds[xx * 2] = xmin;
        pc->bounds[xx * 2 + 1] = xmax;
    }
    for (size_t i = 0; i < (size_t)out * ksize; i++)
        pc->kk[i] = k[i] < 0 ? (int)(-0.5 + k[i] * (1 << PIL_PRECISION_BITS))
                             : (int)(0.5 + k[i] * (1 << PIL_PRECISION_BITS));
    free(k);
    return 0;
}

static unsigned char pil_clip8(int v) {
    v >>= PIL_PRECISION_BITS; /* arithmetic shift: floor, as Pillow's lookup */
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Resample one 8-bit plane [ih, iw] -> [oh, ow]: horizontal pass then
 * vertical, each rounding to 8 bits; a pass is skipped when its size is
 * unchanged (Pillow's need_horizontal / need_vertical). */
static int plane_lanczos_u8(const unsigned char *s, int ih, int iw, unsigned char *d, int oh,
                            int ow) {
    unsigned char *tmp = NULL;
    const unsigned char *src = s;
    if (ow != iw) {
        pil_coeffs pc;
        if (pil_precompute(iw, ow, &pc)) return -1;
        tmp = malloc((size_t)ih * ow);
        if (!tmp) { free(pc.bounds); free(pc.kk); return -1; }
        for (int y = 0; y < ih; y++) {
            for (int x = 0; x < ow; x++) {
                int xmin = pc.bounds[x * 2], n = pc.bounds[x * 2 + 1];
                const int *k = pc.kk + (size_t)x * pc.ksize;
                int ss = 1 << (PIL_PRECISION_BITS - 1);
                for (int j = 0; j < n; j++) ss += s[(size_t)y * iw + xmin + j] * k[j];
                tmp[(size_t)y * ow + x] = pil_clip8(ss);
            }
        }
        free(pc.bounds); free(pc.kk);
        src = tmp;
    }
    if (oh != ih) {
        pil_coeffs pc;
        if (pil_precompute(ih, oh, &pc)) { free(tmp); return -1; }
        for (int y = 0; y < oh; y++) {
            int ymin = pc.bounds[y * 2], n = pc.bounds[y * 2 + 1];
            const int *k = pc.kk + (size_t)y * pc.ksize;
            for (int x = 0; x < ow; x++) {
                int ss = 1 << (PIL_PRECISION_BITS - 1);
                for (int j = 0; j < n; j++) ss += src[(size_t)(ymin + j) * ow + x] * k[j];
                d[(size_t)y * ow + x] = pil_clip8(ss);
            }
        }
        free(pc.bounds); free(pc.kk);
    } else {
        memcpy(d, src, (size_t)oh * ow);
    }
    free(tmp);
    return 0;
}

static unsigned char quantize_u8(float x) {
    float v = 255.0f * x; /* np.clip(255. * x, 0, 255).astype(np.uint8) */
    if (!(v > 0.0f)) return 0;
    if (v >= 255.0f) return 255;
    return (unsigned char)v;
}

static int plane_lanczos(const float *s, int64_t ih, int64_t iw, float *d, int64_t oh,
                         int64_t ow) {
    unsigned char *a = malloc((size_t)(ih * iw)), *b = malloc((size_t)(oh * ow));
    if (!a || !b) { free(a); free(b); return -1; }
    for (int64_t i = 0; i < ih * iw; i++) a[i] = quantize_u8(s[i]);
    int rc = plane_lanczos_u8(a, (int)ih, (int)iw, b, (int)oh, (int)ow);
    if (rc == 0)
        for (int64_t i = 0; i < oh * ow; i++) d[i] = (float)b[i] / 255.0f;
    free(a);
    free(b);
    return rc;
}

/* ---- bislerp ------------------------------------------------------------------ */

/* comfy.utils.bislerp's generate_bilinear_data: bilinear interpolation of
 * the coordinate ramps 0..L-1 (and 1..L, last clamped to L-1). */
static void bislerp_axis(int64_t in, int64_t out, lin_w *lw, int64_t *c1, int64_t *c2,
                         float *ratio) {
    linear_axis(in, out, lw);
    for (int64_t o = 0; o < out; o++) {
        float a0 = (float)lw[o].i0, a1 = (float)lw[o].i1;
        float v1 = a0 * lw[o].l0;
        v1 += a1 * lw[o].l1;
        float b0 = lw[o].i0 + 1 < in ? (float)(lw[o].i0 + 1) : (float)(in - 1);
        float b1 = lw[o].i1 + 1 < in ? (float)(lw[o].i1 + 1) : (float)(in - 1);
        float v2 = b0 * lw[o].l0;
        v2 += b1 * lw[o].l1;
        ratio[o] = v1 - floorf(v1);
        c1[o] = (int64_t)v1;
        c2[o] = (int64_t)v2;
    }
}

/* slerp of channel vectors b1, b2 (stride `st` between channels) with
 * ratio r into res (stride 1). Mirrors ComfyUI's slerp including its
 * "not mathematically correct" norm interpolation and edge cases. */
static void slerp_vec(const float *b1, const float *b2, int64_t st, int64_t c, float r,
                      float *res) {
    float n1 = 0.0f, n2 = 0.0f;
    for (int64_t k = 0; k < c; k++) { n1 += b1[k * st] * b1[k * st]; n2 += b2[k * st] * b2[k * st]; }
    n1 = sqrtf(n1);
    n2 = sqrtf(n2);
    float dot = 0.0f;
    for (int64_t k = 0; k < c; k++) {
        float u = n1 == 0.0f ? 0.0f : b1[k * st] / n1;
        float v = n2 == 0.0f ? 0.0f : b2[k * st] / n2;
        dot += u * v;
    }
    if (dot > (float)(1 - 1e-5)) {
        for (int64_t k = 0; k < c; k++) res[k] = b1[k * st];
        return;
    }
    if (dot < (float)(1e-5 - 1)) {
        for (int64_t k = 0; k < c; k++) res[k] = b1[k * st] * (1.0f - r) + b2[k * st] * r;
        return;
    }
    float omega = acosf(dot), so = sinf(omega);
    float f1 = sinf((1.0f - r) * omega) / so, f2 = sinf(r * omega) / so;
    float scale = n1 * (1.0f - r) + n2 * r;
    for (int64_t k = 0; k < c; k++) {
        float u = n1 == 0.0f ? 0.0f : b1[k * st] / n1;
        float v = n2 == 0.0f ? 0.0f : b2[k * st] / n2;
        res[k] = (f1 * u + f2 * v) * scale;
    }
}

/* x [N, C, H, W] -> out [N, C, oh, ow]. */
static int do_bislerp(const float *x, int64_t n, int64_t c, int64_t h, int64_t w, float *out,
                      int64_t oh, int64_t ow) {
    int64_t mx = (oh > ow ? oh : ow);
    lin_w *lw = malloc(sizeof *lw * mx);
    int64_t *c1 = malloc(sizeof *c1 * mx), *c2 = malloc(sizeof *c2 * mx);
    float *ratio = malloc(sizeof *ratio * mx);
    float *mid = malloc(sizeof *mid * (size_t)(n * c * h * ow));
    float *vec = malloc(sizeof *vec * (size_t)c);
    int rc = -1;
    if (!lw || !c1 || !c2 || !ratio || !mid || !vec) goto done;
    /* along W */
    bislerp_axis(w, ow, lw, c1, c2, ratio);
    for (int64_t b = 0; b < n; b++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t o = 0; o < ow; o++) {
                const float *base = x + b * c * h * w + y * w;
                slerp_vec(base + c1[o], base + c2[o], h * w, c, ratio[o], vec);
                for (int64_t k = 0; k < c; k++) mid[((b * c + k) * h + y) * ow + o] = vec[k];
            }
    /* along H */
    bislerp_axis(h, oh, lw, c1, c2, ratio);
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < oh; o++)
            for (int64_t xx = 0; xx < ow; xx++) {
                const float *base = mid + b * c * h * ow + xx;
                slerp_vec(base + c1[o] * ow, base + c2[o] * ow, h * ow, c, ratio[o], vec);
                for (int64_t k = 0; k < c; k++) out[((b * c + k) * oh + o) * ow + xx] = vec[k];
            }
    rc = 0;
done:
    free(lw); free(c1); free(c2); free(ratio); free(mid); free(vec);
    return rc;
}

/* ---- driver ---------------------------------------------------------------------- */

/* x: [N, C, H, W] contiguous F32 -> new [N, C, oh, ow]. */
static sd_status resize_nchw(const sd_tensor *x, int64_t ow, int64_t oh, sd_upscale_method m,
                             int channels_last, sd_tensor **out, sd_error *err) {
    int64_t n = x->shape[0], c = x->shape[1], ih = x->shape[2], iw = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, n, c, oh, ow);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "upscale: out of memory for [%lld, %lld, %lld, %lld]",
                                (long long)n, (long long)c, (long long)oh, (long long)ow);
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    int64_t planes = n * c, isz = ih * iw, osz = oh * ow;
    int fail = 0;
    switch (m) {
    case SD_UPSCALE_NEAREST_EXACT: {
        int64_t *ty = malloc(sizeof *ty * oh), *tx = malloc(sizeof *tx * ow);
        if (ty && tx) {
            nearest_exact_axis(ih, oh, ty);
            nearest_exact_axis(iw, ow, tx);
            for (int64_t p = 0; p < planes; p++) plane_nearest(s + p * isz, ih, iw, d + p * osz, oh, ow, ty, tx);
        } else fail = 1;
        free(ty); free(tx);
        break;
    }
    case SD_UPSCALE_BILINEAR: {
        lin_w *ty = malloc(sizeof *ty * oh), *tx = malloc(sizeof *tx * ow);
        if (ty && tx) {
            linear_axis(ih, oh, ty);
            linear_axis(iw, ow, tx);
            for (int64_t p = 0; p < planes; p++)
                plane_bilinear(s + p * isz, iw, d + p * osz, oh, ow, ty, tx, channels_last);
        } else fail = 1;
        free(ty); free(tx);
        break;
    }
    case SD_UPSCALE_BICUBIC: {
        cub_w *ty = malloc(sizeof *ty * oh), *tx = malloc(sizeof *tx * ow);
        if (ty && tx) {
            cubic_axis(ih, oh, ty);
            cubic_axis(iw, ow, tx);
            for (int64_t p = 0; p < planes; p++) plane_bicubic(s + p * isz, iw, d + p * osz, oh, ow, ty, tx);
        } else fail = 1;
        free(ty); free(tx);
        break;
    }
    case SD_UPSCALE_AREA:
        for (int64_t p = 0; p < planes; p++) plane_area(s + p * isz, ih, iw, d + p * osz, oh, ow);
        break;
    case SD_UPSCALE_LANCZOS:
        if (ih > 0x7fffffff || iw > 0x7fffffff || oh > 0x7fffffff || ow > 0x7fffffff) fail = 1;
        for (int64_t p = 0; p < planes && !fail; p++)
            if (plane_lanczos(s + p * isz, ih, iw, d + p * osz, oh, ow)) fail = 1;
        break;
    case SD_UPSCALE_BISLERP:
        if (do_bislerp(s, n, c, ih, iw, d, oh, ow)) fail = 1;
        break;
    default:
        sd_tensor_unref(o);
        return sd_error_set(err, SD_ERR_INVALID, "upscale: unknown method %d", (int)m);
    }
    if (fail) {
        sd_tensor_unref(o);
        return sd_error_set(err, SD_ERR_NOMEM, "upscale (%s): out of memory", sd_upscale_method_name(m));
    }
    *out = o;
    return SD_OK;
}

/* Python round(): half to even. */
static int64_t round_half_even(double v) { return (int64_t)nearbyint(v); }

/* Center-crop band of common_upscale, computed on (old_w, old_h). */
static void center_crop_box(int64_t ow_old, int64_t oh_old, int64_t width, int64_t height,
                            int64_t *x, int64_t *y) {
    double old_aspect = (double)ow_old / (double)oh_old, new_aspect = (double)width / (double)height;
    *x = 0;
    *y = 0;
    if (old_aspect > new_aspect)
        *x = round_half_even((ow_old - ow_old * (new_aspect / old_aspect)) / 2);
    else if (old_aspect < new_aspect)
        *y = round_half_even((oh_old - oh_old * (old_aspect / new_aspect)) / 2);
}

static sd_tensor *crop_nchw(const sd_tensor *x, int64_t cx, int64_t cy) {
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    int64_t nh = h - 2 * cy, nw = w - 2 * cx;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, n, c, nh, nw);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    for (int64_t p = 0; p < n * c; p++)
        for (int64_t yy = 0; yy < nh; yy++)
            memcpy(d + (p * nh + yy) * nw, s + (p * h + yy + cy) * w + cx, sizeof(float) * nw);
    return o;
}

static sd_status upscale_impl(const sd_tensor *x, int64_t width, int64_t height,
                              sd_upscale_method method, sd_crop_mode crop, int channels_last,
                              sd_tensor **out, sd_error *err) {
    int64_t w = x->shape[3], h = x->shape[2];
    sd_tensor *src = NULL;
    if (crop == SD_CROP_CENTER) {
        int64_t cx, cy;
        center_crop_box(w, h, width, height, &cx, &cy);
        if (w - 2 * cx < 1 || h - 2 * cy < 1)
            return sd_error_set(err, SD_ERR_INVALID, "upscale: center crop of %lldx%lld to aspect "
                                "%lld:%lld leaves nothing", (long long)w, (long long)h,
                                (long long)width, (long long)height);
        if (cx || cy) {
            src = crop_nchw(x, cx, cy);
            if (!src) return sd_error_set(err, SD_ERR_NOMEM, "upscale: out of memory");
        }
    }
    /* PyTorch's CPU bilinear picks its channels-last kernel (weights
     * multiplied first) for channels-last inputs with C > 3 and for any
     * output with H + W <= 128; a cropped view is not channels-last
     * contiguous any more. */
    int cl = (channels_last && !src && x->shape[1] > 3) || (width + height <= 128);
    sd_status rc = resize_nchw(src ? src : x, width, height, method, cl, out, err);
    sd_tensor_unref(src);
    return rc;
}

static sd_status check_args(const sd_tensor *x, int64_t width, int64_t height,
                            sd_upscale_method method, sd_crop_mode crop, sd_error *err) {
    if (!x || x->dtype != SD_F32 || x->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "upscale: expected a 4-D F32 tensor");
    for (int i = 0; i < 4; i++)
        if (x->shape[i] < 1)
            return sd_error_set(err, SD_ERR_INVALID, "upscale: empty input tensor");
    if (width < 1 || height < 1)
        return sd_error_set(err, SD_ERR_INVALID, "upscale: target size %lldx%lld must be positive",
                            (long long)width, (long long)height);
    if ((unsigned)method >= SD_UPSCALE_COUNT)
        return sd_error_set(err, SD_ERR_INVALID, "upscale: unknown method %d", (int)method);
    if (crop != SD_CROP_DISABLED && crop != SD_CROP_CENTER)
        return sd_error_set(err, SD_ERR_INVALID, "upscale: unknown crop mode %d", (int)crop);
    return SD_OK;
}

sd_status sd_imageops_upscale(const sd_tensor *x, int64_t width, int64_t height,
                              sd_upscale_method method, sd_crop_mode crop, sd_tensor **out,
                              sd_error *err) {
    *out = NULL;
    sd_status rc = check_args(x, width, height, method, crop, err);
    if (rc) return rc;
    return upscale_impl(x, width, height, method, crop, 0, out, err);
}

sd_status sd_imageops_upscale_nhwc(const sd_tensor *x, int64_t width, int64_t height,
                                   sd_upscale_method method, sd_crop_mode crop, sd_tensor **out,
                                   sd_error *err) {
    *out = NULL;
    sd_status rc = check_args(x, width, height, method, crop, err);
    if (rc) return rc;
    sd_tensor *nchw = sd_imageops_nhwc_to_nchw(x);
    if (!nchw) return sd_error_set(err, SD_ERR_NOMEM, "upscale: out of memory");
    sd_tensor *r = NULL;
    rc = upscale_impl(nchw, width, height, method, crop, 1, &r, err);
    sd_tensor_unref(nchw);
    if (rc) return rc;
    *out = sd_imageops_nchw_to_nhwc(r);
    sd_tensor_unref(r);
    if (!*out) return sd_error_set(err, SD_ERR_NOMEM, "upscale: out of memory");
    return SD_OK;
}
