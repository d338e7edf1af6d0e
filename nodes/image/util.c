/* util.c - helpers shared by the image and latent node families. */
#include <math.h>
#include <string.h>

#include "image.h"

int64_t sd_nodes_py_round(double v) { return (int64_t)nearbyint(v); }

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

sd_status sd_nodes_upscale_batched(sd_node_ctx *ctx, const sd_tensor *x, int nhwc,
                                   int64_t width, int64_t height, sd_upscale_method method,
                                   sd_crop_mode crop, sd_tensor **out, sd_error *err) {
    *out = NULL;
    if (!x || x->ndim != 4 || x->dtype != SD_F32)
        return sd_error_set(err, SD_ERR_INVALID, "upscale: expected a 4-D F32 tensor");
    int64_t n = x->shape[0];
    int64_t item_shape[4] = {1, x->shape[1], x->shape[2], x->shape[3]};
    size_t in_item = (size_t)(x->shape[1] * x->shape[2] * x->shape[3]);
    sd_tensor *res = NULL;
    size_t out_item = 0;
    for (int64_t b = 0; b < n; b++) {
        sd_tensor *item = sd_tensor_new(SD_F32, 4, item_shape);
        if (!item) { sd_tensor_unref(res); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
        memcpy(sd_tensor_f32(item), sd_tensor_f32(x) + b * in_item, in_item * sizeof(float));
        sd_tensor *r = NULL;
        sd_status rc = nhwc ? sd_imageops_upscale_nhwc(item, width, height, method, crop, &r, err)
                            : sd_imageops_upscale(item, width, height, method, crop, &r, err);
        sd_tensor_unref(item);
        if (rc) { sd_tensor_unref(res); return rc; }
        if (!res) {
            int64_t shape[4] = {n, r->shape[1], r->shape[2], r->shape[3]};
            res = sd_tensor_new(SD_F32, 4, shape);
            out_item = (size_t)(r->shape[1] * r->shape[2] * r->shape[3]);
            if (!res) { sd_tensor_unref(r); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
        }
        memcpy(sd_tensor_f32(res) + b * out_item, sd_tensor_f32(r), out_item * sizeof(float));
        sd_tensor_unref(r);
        if (ctx) {
            rc = sd_node_progress(ctx, b + 1, n, err);
            if (rc) { sd_tensor_unref(res); return rc; }
        }
    }
    *out = res;
    return SD_OK;
}
