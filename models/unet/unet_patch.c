/* unet_patch.c - the functions behind the UNet's model patches (unet.h,
 * sd_unet_patches): what ComfyUI's patch callbacks compute, each applied
 * where openaimodel calls its patch list.
 *
 * FreeU's channel scaling and Fourier filter, and PatchModelAddDownscale's
 * resizes (comfy.utils.common_upscale, models/image/imageops.h) run on the host, as ComfyUI
 * runs Fourier_filter on the CPU for devices without torch.fft: the
 * activations are downloaded, changed and uploaded in their dtype. */
#include "models/unet/unet_internal.h"
#include "models/image/imageops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

sd_unet_patch_at sd_unet_patch_point(sd_unet_patch_kind kind) {
    switch (kind) {
    case SD_UNET_PATCH_FREEU:
    case SD_UNET_PATCH_FREEU_V2: return SD_UNET_AT_OUTPUT_BLOCK;
    case SD_UNET_PATCH_ATTN1_IDENTITY:
    case SD_UNET_PATCH_ATTN1_RECORD: return SD_UNET_AT_ATTN1_REPLACE;
    case SD_UNET_PATCH_DOWNSCALE: return SD_UNET_AT_INPUT_BLOCK;
    case SD_UNET_PATCH_DOWNSCALE_AFTER_SKIP: return SD_UNET_AT_INPUT_BLOCK_AFTER_SKIP;
    case SD_UNET_PATCH_UPSCALE_TO_SKIP: return SD_UNET_AT_OUTPUT_BLOCK;
    case SD_UNET_PATCH_HYPERTILE:
    case SD_UNET_PATCH_TOME: return SD_UNET_AT_ATTN1_PATCH;
    case SD_UNET_PATCH_HYPERNET: return SD_UNET_AT_ATTN_KV;
    }
    return 0;
}

void sd_unet_attn_record_clear(sd_unet_attn_record *r) {
    if (!r) return;
    sd_tensor_unref(r->mass);
    r->mass = NULL;
    r->failed = 0;
}

sd_status sd_unet_patches_add(sd_unet_patches *ps, const sd_unet_patch *p, sd_error *err) {
    if (ps->n >= SD_UNET_MAX_PATCHES)
        return sd_error_set(err, SD_ERR_INVALID, "more than %d UNet patches on one MODEL", SD_UNET_MAX_PATCHES);
    ps->list[ps->n++] = *p;
    return SD_OK;
}

/* The rows a Python slice [c - t : c + t] of a dimension of n selects
 * (negative start counted from the end, both ends clipped), as
 * frequencies: fftshift puts frequency (p - n // 2) mod n at position p. */
static int fourier_rows(int64_t n, int64_t *freq) {
    int64_t c = n / 2, start = c - 1, end = c + 1, k = 0;
    if (start < 0) start += n;
    if (start < 0) start = 0;
    if (end > n) end = n;
    for (int64_t p = start; p < end; p++) freq[k++] = ((p - c) % n + n) % n;
    return (int)k;
}

/* comfy_extras/nodes_freelunch.Fourier_filter(x, threshold=1, scale) on
 * one [H, W] plane: the inverse FFT of the spectrum with the (at most) 2x2
 * centre block of the shifted spectrum times scale, real part. Only those
 * four frequencies change, so x + (scale - 1) * their inverse transform,
 * summed directly in double. */
static void fourier_filter_plane(float *x, int64_t H, int64_t W, double scale, double *tmp) {
    int64_t fr[2], fc[2];
    int nr = fourier_rows(H, fr), nc = fourier_rows(W, fc);
    double *re = tmp, *im = tmp + H; /* per row: sum over w of x e^{-2 pi i l w / W} */
    double xr[2][2], xi[2][2];       /* X[fr[a], fc[b]] of the unchanged plane */
    const double two_pi = 6.283185307179586476925286766559;
    for (int b = 0; b < nc; b++) {
        const int64_t l = fc[b];
        for (int64_t h = 0; h < H; h++) {
            double sr = 0.0, si = 0.0;
            for (int64_t w = 0; w < W; w++) {
                double a = two_pi * (double)((l * w) % W) / (double)W;
                sr += (double)x[h * W + w] * cos(a);
                si -= (double)x[h * W + w] * sin(a);
            }
            re[h] = sr;
            im[h] = si;
        }
        for (int a = 0; a < nr; a++) {
            const int64_t k = fr[a];
            double sr = 0.0, si = 0.0;
            for (int64_t h = 0; h < H; h++) {
                double t = two_pi * (double)((k * h) % H) / (double)H, c = cos(t), s = -sin(t);
                sr += re[h] * c - im[h] * s;
                si += re[h] * s + im[h] * c;
            }
            xr[a][b] = sr;
            xi[a][b] = si;
        }
    }
    const double f = (scale - 1.0) / (double)(H * W);
    for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
            double d = 0.0;
            for (int a = 0; a < nr; a++)
                for (int b = 0; b < nc; b++) {
                    double t = two_pi * ((double)((fr[a] * h) % H) / (double)H +
                                         (double)((fc[b] * w) % W) / (double)W);
                    d += xr[a][b] * cos(t) - xi[a][b] * sin(t); /* Re(X e^{i t}) */
                }
            x[h * W + w] = (float)((double)x[h * W + w] + f * d);
        }
}

/* Replaces *t by a host-computed copy: fn(data, shape) on the F32 host
 * tensor, uploaded in t's dtype. */
static sd_status host_edit(sd_bt **t, sd_status (*fn)(float *, const int64_t *, const double *, sd_error *),
                           const double *p, sd_error *err) {
    sd_tensor *h = sd_bt_to_host(*t);
    if (!h) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (UNet patch)");
    sd_status rc = fn(h->data, (*t)->shape, p, err);
    if (!rc) {
        sd_bt *n = sd_bt_from_host((*t)->be, h, (*t)->dtype);
        if (!n) rc = sd_backend_take_error((*t)->be, err);
        if (!n && !rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory (UNet patch)");
        if (n) {
            sd_bt_free(*t);
            *t = n;
        }
    }
    sd_tensor_unref(h);
    return rc;
}

sd_status sd_unet_fourier_filter(float *x, const int64_t shape[4], double scale, sd_error *err) {
    const int64_t planes = shape[0] * shape[1], H = shape[2], W = shape[3];
    double *tmp = malloc((size_t)(2 * H) * sizeof(double));
    if (!tmp) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (FreeU)");
    for (int64_t i = 0; i < planes; i++) fourier_filter_plane(x + i * H * W, H, W, scale, tmp);
    free(tmp);
    return SD_OK;
}

/* p = {scale} */
static sd_status fourier_filter(float *x, const int64_t *shape, const double *p, sd_error *err) {
    return sd_unet_fourier_filter(x, shape, p[0], err);
}

/* FreeU: h[:, :C // 2] = h[:, :C // 2] * b (float32). p = {b} */
static sd_status freeu_backbone(float *x, const int64_t *shape, const double *p, sd_error *err) {
    (void)err;
    const int64_t N = shape[0], C = shape[1], hw = shape[2] * shape[3];
    const float b = (float)p[0];
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < C / 2 * hw; i++) x[n * C * hw + i] = x[n * C * hw + i] * b;
    return SD_OK;
}

/* FreeU_V2: m = h.mean(1), min-max normalised per item over the pixels;
 * h[:, :C // 2] *= (b - 1) * m + 1 (float32, torch's op order). p = {b} */
static sd_status freeu_v2_backbone(float *x, const int64_t *shape, const double *p, sd_error *err) {
    const int64_t N = shape[0], C = shape[1], hw = shape[2] * shape[3];
    float *m = malloc((size_t)hw * sizeof(float));
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (FreeU_V2)");
    const float b1 = (float)(p[0] - 1.0);
    for (int64_t n = 0; n < N; n++) {
        float *xn = x + n * C * hw;
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t i = 0; i < hw; i++) {
            double s = 0.0;
            for (int64_t c = 0; c < C; c++) s += xn[c * hw + i];
            m[i] = (float)(s / (double)C);
            if (m[i] < lo) lo = m[i];
            if (m[i] > hi) hi = m[i];
        }
        const float range = hi - lo;
        for (int64_t i = 0; i < hw; i++) {
            float t = m[i] - lo;
            t = t / range;
            t = b1 * t;
            m[i] = t + 1.0f;
        }
        for (int64_t c = 0; c < C / 2; c++)
            for (int64_t i = 0; i < hw; i++) xn[c * hw + i] = xn[c * hw + i] * m[i];
    }
    free(m);
    return SD_OK;
}

/* FreeU / FreeU_V2's output_block_patch: the (b, s) pair of h's width. */
static sd_status freeu(const sd_unet *u, const sd_unet_patch *pt, sd_bt **h, sd_bt **hsp, sd_error *err) {
    const int64_t ch = (*h)->shape[1], mc = u->cfg.model_channels;
    double b, s;
    if (ch == mc * 4) b = pt->p[0], s = pt->p[2];
    else if (ch == mc * 2) b = pt->p[1], s = pt->p[3];
    else return SD_OK;
    sd_status rc = host_edit(h, pt->kind == SD_UNET_PATCH_FREEU_V2 ? freeu_v2_backbone : freeu_backbone, &b, err);
    if (!rc) rc = host_edit(hsp, fourier_filter, &s, err);
    return rc;
}

/* PyTorch's nearest_idx for one dimension. */
static int64_t nearest_src(int64_t dst, int64_t in, int64_t out) {
    if (out == in) return dst;
    if (out == 2 * in) return dst >> 1;
    float scale = (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)dst * scale);
    return s < in - 1 ? s : in - 1;
}

sd_bt *sd_unet_nearest_resize(const sd_bt *x, int64_t th, int64_t tw) {
    sd_tensor *h = sd_bt_to_host(x);
    if (!h) return NULL;
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, N, C, th, tw);
    int64_t *cols = malloc((size_t)tw * sizeof *cols);
    sd_bt *r = NULL;
    if (o && cols) {
        const float *src = h->data;
        float *dst = o->data;
        for (int64_t j = 0; j < tw; j++) cols[j] = nearest_src(j, W, tw);
        for (int64_t p = 0; p < N * C; p++)
            for (int64_t i = 0; i < th; i++) {
                const float *row = src + (p * H + nearest_src(i, H, th)) * W;
                for (int64_t j = 0; j < tw; j++) dst[(p * th + i) * tw + j] = row[cols[j]];
            }
        r = sd_bt_from_host(x->be, o, x->dtype);
    }
    free(cols);
    sd_tensor_unref(o);
    sd_tensor_unref(h);
    return r;
}

/* comfy.utils.common_upscale(h, width, height, method, "disabled") on the
 * host (sd_imageops_upscale), the result uploaded in h's dtype: a new
 * tensor. */
static sd_status resize(const sd_bt *h, int64_t width, int64_t height, double method, sd_bt **out, sd_error *err) {
    *out = NULL;
    if (width < 1 || height < 1)
        return sd_error_set(err, SD_ERR_INVALID, "PatchModelAddDownscale: the features would be resized to %lldx%lld",
                            (long long)width, (long long)height);
    sd_tensor *x = sd_bt_to_host(h), *y = NULL;
    if (!x) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (UNet patch)");
    sd_status rc = sd_imageops_upscale(x, width, height, (sd_upscale_method)(int)method, SD_CROP_DISABLED, &y, err);
    sd_tensor_unref(x);
    if (rc) return rc;
    *out = sd_bt_from_host(h->be, y, h->dtype);
    sd_tensor_unref(y);
    if (!*out) {
        rc = sd_backend_take_error(h->be, err);
        if (!rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory (UNet patch)");
    }
    return rc;
}

sd_status sd_unet_patch_input_block(const sd_unet *u, const sd_unet_patches *ps, sd_unet_patch_at at, int block_id,
                                    float sigma, const sd_bt *h, sd_bt **out, sd_error *err) {
    (void)u;
    *out = NULL;
    for (int i = 0; ps && i < ps->n; i++) {
        const sd_unet_patch *pt = &ps->list[i];
        if (sd_unet_patch_point(pt->kind) != at || pt->block_id != block_id) continue;
        /* sigma <= sigma_start and sigma >= sigma_end, in Python floats */
        if (!((double)sigma <= pt->p[1] && (double)sigma >= pt->p[2])) continue;
        const sd_bt *cur = *out ? *out : h;
        double f = 1.0 / pt->p[0];
        /* round(h.shape[-1] * (1.0 / downscale_factor)): half to even */
        int64_t w = (int64_t)nearbyint((double)cur->shape[3] * f), hh = (int64_t)nearbyint((double)cur->shape[2] * f);
        sd_bt *next;
        sd_status rc = resize(cur, w, hh, pt->p[3], &next, err);
        if (rc) {
            sd_bt_free(*out);
            *out = NULL;
            return rc;
        }
        sd_bt_free(*out);
        *out = next;
    }
    return SD_OK;
}

sd_status sd_unet_patch_output_block(const sd_unet *u, const sd_unet_patches *ps, sd_bt **h, sd_bt **hsp,
                                     sd_error *err) {
    for (int i = 0; ps && i < ps->n; i++) {
        const sd_unet_patch *pt = &ps->list[i];
        if (sd_unet_patch_point(pt->kind) != SD_UNET_AT_OUTPUT_BLOCK) continue;
        sd_status rc = SD_OK;
        switch (pt->kind) {
        case SD_UNET_PATCH_FREEU:
        case SD_UNET_PATCH_FREEU_V2: rc = freeu(u, pt, h, hsp, err); break;
        case SD_UNET_PATCH_UPSCALE_TO_SKIP:
            /* if h.shape[2] != hsp.shape[2]: h to hsp's (width, height) */
            if ((*h)->shape[2] != (*hsp)->shape[2]) {
                sd_bt *n;
                rc = resize(*h, (*hsp)->shape[3], (*hsp)->shape[2], pt->p[0], &n, err);
                if (!rc) {
                    sd_bt_free(*h);
                    *h = n;
                }
            }
            break;
        default: break;
        }
        if (rc) return rc;
    }
    return SD_OK;
}

const sd_unet_patch *sd_unet_patch_attn1(const sd_unet_patches *ps, sd_unet_block_kind block, int block_id,
                                         int index) {
    /* ComfyUI looks the (block, id, index) key up first, then (block, id) */
    for (int pass = 0; ps && pass < 2; pass++)
        for (int i = 0; i < ps->n; i++) {
            const sd_unet_patch *pt = &ps->list[i];
            if (sd_unet_patch_point(pt->kind) != SD_UNET_AT_ATTN1_REPLACE || pt->block != block ||
                pt->block_id != block_id)
                continue;
            if (pass == 0 ? pt->index == index : pt->index < 0) return pt;
        }
    return NULL;
}
