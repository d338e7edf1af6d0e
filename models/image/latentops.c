/* latentops.c - LatentInterpolate and the latent operations (latentops.h). */
#include "models/image/latentops.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "models/image/filters.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* vector_norm(x, dim=1) of [B, C, H, W] into m [B, H, W]: torch's x86 builds
 * (AVX2, AVX512: what ComfyUI runs on x86) accumulate the squares with fused
 * multiply-adds, channel by channel. */
static void channel_norm(const float *x, int64_t B, int64_t C, int64_t hw, float *m) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < hw; i++) {
            float s = 0.0f;
            for (int64_t c = 0; c < C; c++) {
                float v = x[(b * C + c) * hw + i];
                s = fmaf(v, v, s);
            }
            m[b * hw + i] = sqrtf(s);
        }
}

static float nan_to_num(float v) {
    if (isnan(v)) return 0.0f;
    if (isinf(v)) return v > 0 ? FLT_MAX : -FLT_MAX;
    return v;
}

/* ---- operations ---------------------------------------------------------------------- */

static sd_status sharpen(const sd_latent_op *op, const sd_tensor *x, sd_tensor **out, sd_error *err) {
    int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], hw = H * W, r = op->radius;
    if (r < 1 || r >= H || r >= W)
        return sd_error_set(err, SD_ERR_INVALID,
                            "sharpen_radius %lld needs a latent larger than %lldx%lld (reflect padding)", (long long)r,
                            (long long)W, (long long)H);
    int64_t ks = 2 * r + 1;
    float *k = malloc((size_t)(ks * ks) * sizeof(float));
    float *lum = malloc((size_t)(B * hw) * sizeof(float));
    sd_tensor *norm = sd_tensor_new(SD_F32, 4, x->shape), *o = sd_tensor_new(SD_F32, 4, x->shape);
    sd_status rc = SD_OK;
    if (!k || !lum || !norm || !o || sd_sharpen_kernel(ks, op->sigma, op->alpha, k)) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    const float *xv = sd_tensor_f32(x);
    float *nv = sd_tensor_f32(norm), *ov = sd_tensor_f32(o);
    channel_norm(xv, B, C, hw, lum);
    const float eps = (float)1e-6;
    for (int64_t i = 0; i < B * hw; i++) lum[i] = lum[i] + eps;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < hw; i++) nv[(b * C + c) * hw + i] = xv[(b * C + c) * hw + i] / lum[b * hw + i];
    if (sd_filter_reflect(nv, ov, B * C, H, W, 1, k, r)) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < hw; i++) ov[(b * C + c) * hw + i] = lum[b * hw + i] * ov[(b * C + c) * hw + i];
done:
    free(k);
    free(lum);
    sd_tensor_unref(norm);
    if (rc) sd_tensor_unref(o);
    else *out = o;
    return rc;
}

static sd_status tonemap_reinhard(const sd_latent_op *op, const sd_tensor *x, sd_tensor **out, sd_error *err) {
    int64_t B = x->shape[0], C = x->shape[1], hw = x->shape[2] * x->shape[3];
    float *m = malloc((size_t)(B * hw) * sizeof(float));
    sd_tensor *o = sd_tensor_new(SD_F32, 4, x->shape);
    if (!m || !o) {
        free(m);
        sd_tensor_unref(o);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const float *xv = sd_tensor_f32(x);
    float *ov = sd_tensor_f32(o);
    channel_norm(xv, B, C, hw, m);
    const float eps = (float)0.0000000001, mult = (float)op->multiplier;
    for (int64_t i = 0; i < B * hw; i++) m[i] = m[i] + eps;
    for (int64_t b = 0; b < B; b++) {
        float *mb = m + b * hw;
        /* torch.mean: a float32 sum divided by the count; torch.std: Welford in
         * double, unbiased. Both reductions in double here, rounded once. */
        double sum = 0.0;
        for (int64_t i = 0; i < hw; i++) sum += mb[i];
        float mean = (float)sum / (float)hw;
        double dm = sum / (double)hw, q = 0.0;
        for (int64_t i = 0; i < hw; i++) q += ((double)mb[i] - dm) * ((double)mb[i] - dm);
        float sd = hw > 1 ? (float)sqrt(q / (double)(hw - 1)) : NAN;
        float top = sd * 5.0f;
        top = top + mean;
        top = top * mult;
        float inv = 1.0f / top;
        for (int64_t i = 0; i < hw; i++) {
            float s = mb[i] * inv;
            float nm = s / (s + 1.0f);
            nm = nm * top;
            for (int64_t c = 0; c < C; c++) {
                int64_t at = (b * C + c) * hw + i;
                float n = xv[at] / mb[i];
                ov[at] = n * nm;
            }
        }
    }
    free(m);
    *out = o;
    return SD_OK;
}

sd_status sd_latent_op_apply(const sd_latent_op *op, const sd_tensor *x, sd_tensor **out, sd_error *err) {
    *out = NULL;
    if (!x || x->dtype != SD_F32 || x->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "a latent operation needs an F32 latent [B, C, H, W]");
    switch (op->kind) {
    case SD_LATENT_OP_SHARPEN: return sharpen(op, x, out, err);
    case SD_LATENT_OP_TONEMAP_REINHARD: return tonemap_reinhard(op, x, out, err);
    }
    return sd_error_set(err, SD_ERR_INVALID, "unknown latent operation %d", (int)op->kind);
}

/* ---- LatentInterpolate ------------------------------------------------------------------ */

sd_status sd_latent_interpolate(const sd_tensor *a, const sd_tensor *b, double ratio, sd_tensor **out,
                                sd_error *err) {
    *out = NULL;
    int64_t B = a->shape[0], C = a->shape[1], hw = a->shape[2] * a->shape[3];
    /* x / norm with x [B, C, H, W] and norm [B, H, W] aligned from the right:
     * the norm's batch meets the channels */
    if (B != 1 && B != C)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ComfyUI's LatentInterpolate divides by per-pixel norms that PyTorch can only "
                            "broadcast for a batch of 1 (or of as many latents as channels), not %lld latents of "
                            "%lld channels", (long long)B, (long long)C);
    float *ma = malloc((size_t)(B * hw) * sizeof(float)), *mb = malloc((size_t)(B * hw) * sizeof(float));
    float *mt = malloc((size_t)(B * hw) * sizeof(float));
    sd_tensor *t = sd_tensor_new(SD_F32, 4, a->shape), *o = sd_tensor_new(SD_F32, 4, a->shape);
    if (!ma || !mb || !mt || !t || !o) {
        free(ma), free(mb), free(mt);
        sd_tensor_unref(t), sd_tensor_unref(o);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const float *av = sd_tensor_f32(a), *bv = sd_tensor_f32(b);
    float *tv = sd_tensor_f32(t), *ov = sd_tensor_f32(o);
    const float r = (float)ratio, r1 = (float)(1.0 - ratio);
    channel_norm(av, B, C, hw, ma);
    channel_norm(bv, B, C, hw, mb);
    /* the norm element a value at (batch i, channel c) meets: channel c's when B == C */
#define NORM(m, c, p) (m)[(B == 1 ? 0 : (c)) * hw + (p)]
    for (int64_t i = 0; i < B; i++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t at = (i * C + c) * hw + p;
                float na = nan_to_num(av[at] / NORM(ma, c, p)), nb = nan_to_num(bv[at] / NORM(mb, c, p));
                float x = na * r, y = nb * r1;
                tv[at] = x + y;
            }
    channel_norm(tv, B, C, hw, mt);
    for (int64_t i = 0; i < B; i++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t at = (i * C + c) * hw + p;
                float st = nan_to_num(tv[at] / NORM(mt, c, p));
                float x = NORM(ma, c, p) * r, y = NORM(mb, c, p) * r1;
                ov[at] = st * (x + y);
            }
#undef NORM
    free(ma), free(mb), free(mt);
    sd_tensor_unref(t);
    *out = o;
    return SD_OK;
}
