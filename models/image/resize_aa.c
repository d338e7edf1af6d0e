/* resize_aa.c - PyTorch's antialiased bicubic resize
 * (F.interpolate(mode="bicubic", antialias=True, align_corners=False), the
 * CPU kernel of torch 1.13's UpSampleKernel.cpp), which ComfyUI's
 * clip_preprocess uses.
 *
 * Separable, as PyTorch runs it: the width pass first into a temporary,
 * then the height pass. Per axis, PIL-style weights: scale = in / out
 * (float); support = 2 * scale when shrinking, else 2; output o gathers
 * input [xmin, xmin + xsize) around center = scale * (o + 0.5) with
 * weights filter((j + xmin - center + 0.5) * invscale) normalised by their
 * sum, filter = Keys cubic with a = -0.5 (PIL's, not the -0.75 of the
 * non-antialiased mode). The float/double mix below follows PyTorch's
 * expressions (scalar_t float with double literals); torch's weights still
 * differ from these in the last bits (up to ~1e-5 relative where the cubic's
 * outer branch cancels), which moves a result by a few float roundings.
 * Each output is t0*w0 + t1*w1 + ... accumulated left to right with fused
 * multiply-adds, as torch's AVX2 / AVX-512 kernels are compiled (checked
 * bit-exact on torch's own weights). */
#include "models/image/imageops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* HelperInterpCubic::aa_filter: x float, the a = -0.5 polynomial in double
 * for |x| < 1, float then double for |x| < 2. */
static float aa_cubic(float x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return (float)(((a + 2.0) * x - (a + 3.0)) * x * x + 1);
    if (x < 2.0) return (float)((double)((((x - 5) * x + 8) * x - 4)) * a);
    return 0.0f;
}

typedef struct aa_axis {
    int64_t *xmin, *xsize;
    float *w; /* out * taps */
    int64_t taps;
} aa_axis;

static void aa_axis_free(aa_axis *a) {
    free(a->xmin);
    free(a->xsize);
    free(a->w);
}

static int aa_axis_init(aa_axis *a, int64_t in, int64_t out) {
    memset(a, 0, sizeof *a);
    float scale = (float)in / (float)out;
    float support = scale >= 1.0 ? (float)((4 * 0.5) * scale) : (float)(4 * 0.5);
    a->taps = (int64_t)ceil(support) * 2 + 1;
    a->xmin = malloc((size_t)out * sizeof *a->xmin);
    a->xsize = malloc((size_t)out * sizeof *a->xsize);
    a->w = calloc((size_t)(out * a->taps), sizeof *a->w);
    if (!a->xmin || !a->xsize || !a->w) {
        aa_axis_free(a);
        return -1;
    }
    float invscale = scale >= 1.0 ? (float)(1.0 / scale) : 1.0f;
    for (int64_t i = 0; i < out; i++) {
        float center = (float)(scale * (i + 0.5));
        float total = 0.0f;
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in) xmax = in;
        int64_t xsize = xmax - xmin;
        float *w = a->w + i * a->taps;
        for (int64_t j = 0; j < xsize; j++) {
            float v = aa_cubic((float)(((float)(j + xmin) - center + 0.5) * invscale));
            w[j] = v;
            total += v;
        }
        for (int64_t j = 0; j < xsize; j++)
            if (total != 0.0f) w[j] /= total;
        a->xmin[i] = xmin;
        a->xsize[i] = xsize;
    }
    return 0;
}

sd_status sd_imageops_bicubic_aa(const sd_tensor *x, int64_t width, int64_t height,
                                 sd_tensor **out, sd_error *err) {
    *out = NULL;
    if (!x || x->dtype != SD_F32 || x->ndim != 4 || width < 1 || height < 1 ||
        x->shape[2] < 1 || x->shape[3] < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "antialiased bicubic resize: want an F32 [N, C, H, W] tensor and a "
                            "size >= 1");
    int64_t planes = x->shape[0] * x->shape[1], ih = x->shape[2], iw = x->shape[3];
    sd_tensor *tmp = sd_tensor_new4(SD_F32, 4, x->shape[0], x->shape[1], ih, width);
    sd_tensor *res = sd_tensor_new4(SD_F32, 4, x->shape[0], x->shape[1], height, width);
    aa_axis ax, ay;
    int ok_x = aa_axis_init(&ax, iw, width) == 0, ok_y = aa_axis_init(&ay, ih, height) == 0;
    if (!tmp || !res || !ok_x || !ok_y) {
        if (ok_x) aa_axis_free(&ax);
        if (ok_y) aa_axis_free(&ay);
        sd_tensor_unref(tmp);
        sd_tensor_unref(res);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory resizing an image");
    }
    const float *s = x->data;
    float *t = tmp->data, *d = res->data;
    for (int64_t p = 0; p < planes; p++) /* width pass: [ih, iw] -> [ih, width] */
        for (int64_t r = 0; r < ih; r++) {
            const float *src = s + (p * ih + r) * iw;
            float *dst = t + (p * ih + r) * width;
            for (int64_t o = 0; o < width; o++) {
                const float *w = ax.w + o * ax.taps, *v = src + ax.xmin[o];
                float acc = v[0] * w[0];
                for (int64_t j = 1; j < ax.xsize[o]; j++) acc = fmaf(v[j], w[j], acc);
                dst[o] = acc;
            }
        }
    for (int64_t p = 0; p < planes; p++) /* height pass: [ih, width] -> [height, width] */
        for (int64_t o = 0; o < height; o++) {
            const float *w = ay.w + o * ay.taps;
            const float *src = t + (p * ih + ay.xmin[o]) * width;
            float *dst = d + (p * height + o) * width;
            for (int64_t c = 0; c < width; c++) {
                float acc = src[c] * w[0];
                for (int64_t j = 1; j < ay.xsize[o]; j++) acc = fmaf(src[j * width + c], w[j], acc);
                dst[c] = acc;
            }
        }
    aa_axis_free(&ax);
    aa_axis_free(&ay);
    sd_tensor_unref(tmp);
    *out = res;
    return SD_OK;
}
