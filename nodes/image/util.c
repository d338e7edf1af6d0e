/* util.c - helpers shared by the image and latent node families. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/membudget.h"

#include "image.h"

int64_t sd_nodes_py_round(double v) { return (int64_t)nearbyint(v); }

sd_status sd_nodes_set_tensor(sd_value **out, sd_tensor *t, sd_error *err) {
    *out = t ? sd_value_tensor(t) : NULL;
    sd_tensor_unref(t);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_nodes_bad_input(sd_error *err, const char *name, const char *fmt, ...) {
    char msg[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sd_error_set(err, SD_ERR_INVALID, "%s", msg);
    sd_error_at(err, NULL, NULL, name);
    return SD_ERR_INVALID;
}

sd_status sd_nodes_mem_check(sd_node_ctx *ctx, const char *input, const char *what, int ndim,
                             const int64_t *shape, sd_error *err) {
    char desc[160];
    int n = snprintf(desc, sizeof desc, "%s [", what);
    for (int k = 0; k < ndim && n > 0 && (size_t)n < sizeof desc; k++)
        n += snprintf(desc + n, sizeof desc - (size_t)n, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (n > 0 && (size_t)n < sizeof desc) snprintf(desc + n, sizeof desc - (size_t)n, "] float32");
    return sd_mem_check(ctx, input, sd_mem_tensor_bytes(ndim, shape, sizeof(float)), desc, err);
}

static sd_status mask_in(sd_value *const *in, int i, const char *name, int optional, sd_tensor **out,
                         sd_error *err) {
    *out = NULL;
    if (optional && (!in[i] || sd_value_kind_of(in[i]) == SD_VAL_NONE)) return SD_OK;
    sd_tensor *t = in[i] ? sd_value_as_tensor(in[i]) : NULL;
    if (!t || t->dtype != SD_F32 || t->ndim < 2 || t->ndim > 4) {
        char sh[96] = "none";
        if (t) sd_tensor_shape_str(t, sh, sizeof sh);
        return sd_nodes_bad_input(err, name, "input '%s': expected a MASK (an F32 tensor [B, H, W]), got %s",
                                  name, sh);
    }
    int64_t h = t->shape[t->ndim - 2], w = t->shape[t->ndim - 1];
    int64_t n = sd_tensor_numel(t);
    if (h < 1 || w < 1 || n < 1)
        return sd_nodes_bad_input(err, name, "input '%s': empty mask", name);
    int64_t shape[3] = {n / (h * w), h, w};
    *out = sd_tensor_reshape(t, 3, shape);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_nodes_in_mask(sd_value *const *in, int i, const char *name, sd_tensor **out,
                           sd_error *err) {
    return mask_in(in, i, name, 0, out, err);
}

sd_status sd_nodes_in_mask_opt(sd_value *const *in, int i, const char *name, sd_tensor **out,
                               sd_error *err) {
    return mask_in(in, i, name, 1, out, err);
}

sd_status sd_nodes_in_tensor(sd_value *const *in, int i, const char *name, int ndim,
                             sd_tensor **out, sd_error *err) {
    sd_tensor *t = in[i] ? sd_value_as_tensor(in[i]) : NULL;
    if (!t || t->dtype != SD_F32 || (ndim > 0 && t->ndim != ndim)) {
        char sh[96] = "none";
        if (t) sd_tensor_shape_str(t, sh, sizeof sh);
        sd_error_set(err, SD_ERR_INVALID, "input '%s': expected an F32 tensor with %d dims, got %s",
                     name, ndim, sh);
        sd_error_at(err, NULL, NULL, name);
        return SD_ERR_INVALID;
    }
    for (int k = 0; k < t->ndim; k++)
        if (t->shape[k] < 1) {
            sd_error_set(err, SD_ERR_INVALID, "input '%s': empty tensor", name);
            sd_error_at(err, NULL, NULL, name);
            return SD_ERR_INVALID;
        }
    *out = t;
    return SD_OK;
}

sd_status sd_nodes_in_latent(sd_value *const *in, int i, const char *name,
                             sd_tensor **samples, sd_error *err) {
    sd_tensor *t = in[i] && sd_value_kind_of(in[i]) == SD_VAL_DICT
                       ? sd_value_dict_tensor(in[i], "samples") : NULL;
    if (!t || t->dtype != SD_F32 || t->ndim != 4) {
        char sh[96] = "none";
        if (t) sd_tensor_shape_str(t, sh, sizeof sh);
        sd_error_set(err, SD_ERR_INVALID, "input '%s': expected a LATENT with F32 samples "
                     "[B, C, H, W], got %s", name, sh);
        sd_error_at(err, NULL, NULL, name);
        return SD_ERR_INVALID;
    }
    *samples = t;
    return SD_OK;
}

/* Resampling is per channel plane for every method but bislerp (which mixes
 * channels) and bilinear on channels-last C > 3 (PyTorch's kernel choice
 * depends on C there), so a large item can be resized one channel at a time
 * with identical results: an interrupt is then noticed after each plane
 * instead of after a whole 16384x16384 image (about 27 s on two cores). */
static int split_channels(const sd_node_ctx *ctx, int nhwc, int64_t c, int64_t width, int64_t height,
                          sd_upscale_method method) {
    if (!ctx || c < 2 || width * height < (1 << 20) || method == SD_UPSCALE_BISLERP) return 0;
    return !(nhwc && c > 3 && method == SD_UPSCALE_BILINEAR);
}

/* Resizes channel `ch` (or every channel when ch < 0) of batch item b. *r is
 * the new [1, oh, ow, C'] (nhwc) or [1, C', oh, ow] tensor. */
static sd_status upscale_part(const sd_tensor *x, int nhwc, int64_t b, int64_t ch, int64_t width,
                              int64_t height, sd_upscale_method method, sd_crop_mode crop, sd_tensor **r,
                              sd_error *err) {
    int64_t c = nhwc ? x->shape[3] : x->shape[1];
    int64_t hw = x->shape[1] * x->shape[2] * x->shape[3] / c; /* H*W whatever the layout */
    int64_t item_shape[4] = {1, x->shape[1], x->shape[2], x->shape[3]};
    if (ch >= 0) item_shape[nhwc ? 3 : 1] = 1;
    sd_tensor *item = sd_tensor_new(SD_F32, 4, item_shape);
    if (!item) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *src = sd_tensor_f32(x) + b * hw * c;
    float *dst = sd_tensor_f32(item);
    if (ch < 0) memcpy(dst, src, (size_t)(hw * c) * sizeof(float));
    else if (!nhwc) memcpy(dst, src + ch * hw, (size_t)hw * sizeof(float));
    else for (int64_t i = 0; i < hw; i++) dst[i] = src[i * c + ch];
    sd_status rc = nhwc ? sd_imageops_upscale_nhwc(item, width, height, method, crop, r, err)
                        : sd_imageops_upscale(item, width, height, method, crop, r, err);
    sd_tensor_unref(item);
    return rc;
}

sd_status sd_nodes_upscale_batched(sd_node_ctx *ctx, const sd_tensor *x, int nhwc,
                                   int64_t width, int64_t height, sd_upscale_method method,
                                   sd_crop_mode crop, const char *size_input, sd_tensor **out,
                                   sd_error *err) {
    *out = NULL;
    if (!x || x->ndim != 4 || x->dtype != SD_F32)
        return sd_error_set(err, SD_ERR_INVALID, "upscale: expected a 4-D F32 tensor");
    int64_t n = x->shape[0], c = nhwc ? x->shape[3] : x->shape[1];
    {
        /* the result, plus one resized item (or channel) at a time */
        int64_t shape[4] = {n, c, height, width};
        uint64_t bytes = sd_mem_tensor_bytes(4, shape, sizeof(float)), one = n > 0 ? bytes / (uint64_t)n : 0;
        char what[160];
        snprintf(what, sizeof what, "the resized %s [%lld, %lld, %lld, %lld] float32",
                 nhwc ? "image" : "latent", (long long)n, (long long)(nhwc ? height : c),
                 (long long)(nhwc ? width : height), (long long)(nhwc ? c : width));
        sd_status rc = sd_mem_check(ctx, size_input, bytes == UINT64_MAX ? bytes : bytes + one, what, err);
        if (rc) return rc;
    }
    int split = split_channels(ctx, nhwc, c, width, height, method);
    int64_t parts = split ? c : 1;
    sd_tensor *res = NULL;
    int64_t ohw = 0; /* output H*W */
    for (int64_t b = 0; b < n; b++) {
        for (int64_t k = 0; k < parts; k++) {
            sd_tensor *r = NULL;
            sd_status rc = upscale_part(x, nhwc, b, split ? k : -1, width, height, method, crop, &r, err);
            if (rc) { sd_tensor_unref(res); return rc; }
            if (!res) {
                int64_t shape[4] = {n, r->shape[1], r->shape[2], r->shape[3]};
                shape[nhwc ? 3 : 1] = c;
                ohw = nhwc ? r->shape[1] * r->shape[2] : r->shape[2] * r->shape[3];
                res = sd_tensor_new(SD_F32, 4, shape);
                if (!res) { sd_tensor_unref(r); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
            }
            float *dst = sd_tensor_f32(res) + b * ohw * c;
            const float *rs = sd_tensor_f32(r);
            if (!split) memcpy(dst, rs, (size_t)(ohw * c) * sizeof(float));
            else if (!nhwc) memcpy(dst + k * ohw, rs, (size_t)ohw * sizeof(float));
            else for (int64_t i = 0; i < ohw; i++) dst[i * c + k] = rs[i];
            sd_tensor_unref(r);
            if (ctx) {
                rc = sd_node_progress(ctx, b * parts + k + 1, n * parts, err);
                if (rc) { sd_tensor_unref(res); return rc; }
            }
        }
    }
    *out = res;
    return SD_OK;
}
