/* cond_resolve.c - comfy.samplers.resolve_areas_and_cond_masks_multidim:
 * before sampling, percentage areas become latent-pixel areas and masks are
 * resized to the latent (bilinear), their bounding box becoming the area
 * under set_area_to_bounds ("mask bounds"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "models/image/imageops.h"
#include "nodes/image/image.h"

/* ("percentage", h, w, y, x) -> (max(1, round(h * H)), max(1, round(w * W)),
 * round(y * H), round(x * W)), Python's round (half to even). */
static sd_value *percentage_area(const sd_value *area, int64_t H, int64_t W) {
    double a[4];
    for (int i = 0; i < 4; i++) a[i] = sd_value_as_float(sd_value_list_get(area, (size_t)i + 1));
    int64_t v[4] = {sd_nodes_py_round(a[0] * (double)H), sd_nodes_py_round(a[1] * (double)W),
                    sd_nodes_py_round(a[2] * (double)H), sd_nodes_py_round(a[3] * (double)W)};
    if (v[0] < 1) v[0] = 1;
    if (v[1] < 1) v[1] = 1;
    sd_value *l = sd_value_list();
    for (int i = 0; l && i < 4; i++)
        if (sd_value_list_append(l, sd_value_int(v[i]))) {
            sd_value_unref(l);
            l = NULL;
        }
    return l;
}

static int is_percentage(const sd_value *area) {
    if (!area || sd_value_kind_of(area) != SD_VAL_LIST || sd_value_list_len(area) != 5) return 0;
    const sd_value *k = sd_value_list_get(area, 0);
    return sd_value_kind_of(k) == SD_VAL_STRING && strcmp(sd_value_as_string(k), "percentage") == 0;
}

/* get_mask_aabb over max(|mask|) of the batch: (h, w, y, x) with h, w at
 * least 8, or (8, 8, 0, 0) when the mask is all zeros. */
static void mask_bounds(const sd_tensor *m, int64_t out[4]) {
    const int64_t B = m->shape[0], H = m->shape[1], W = m->shape[2];
    int64_t y0 = H, y1 = -1, x0 = W, x1 = -1;
    const float *v = m->data;
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
            int any = 0;
            for (int64_t b = 0; b < B && !any; b++) any = v[(b * H + y) * W + x] != 0.0f;
            if (!any) continue;
            if (y < y0) y0 = y;
            if (y > y1) y1 = y;
            if (x < x0) x0 = x;
            if (x > x1) x1 = x;
        }
    if (y1 < 0) {
        out[0] = out[1] = 8;
        out[2] = out[3] = 0;
        return;
    }
    out[0] = y1 - y0 + 1 < 8 ? 8 : y1 - y0 + 1;
    out[1] = x1 - x0 + 1 < 8 ? 8 : x1 - x0 + 1;
    out[2] = y0;
    out[3] = x0;
}

/* The entry's mask at the latent size ([B, H, W]). */
static sd_status resized_mask(const sd_tensor *m, int64_t H, int64_t W, sd_tensor **out, sd_error *err) {
    *out = NULL;
    if (m->dtype != SD_F32 || m->ndim < 2 || m->ndim > 3)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'mask' must be F32 [H, W] or [B, H, W]");
    const int64_t B = m->ndim == 3 ? m->shape[0] : 1, h = m->shape[m->ndim - 2], w = m->shape[m->ndim - 1];
    if (B < 1 || h < 1 || w < 1) return sd_error_set(err, SD_ERR_INVALID, "conditioning 'mask' is empty");
    if (h == H && w == W) {
        *out = sd_tensor_reshape((sd_tensor *)m, 3, (int64_t[]){B, h, w});
        return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    /* common_upscale(mask.unsqueeze(1), W, H, "bilinear", "none").squeeze(1) */
    sd_tensor *m4 = sd_tensor_reshape((sd_tensor *)m, 4, (int64_t[]){B, 1, h, w}), *r = NULL;
    if (!m4) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = sd_imageops_upscale(m4, W, H, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &r, err);
    sd_tensor_unref(m4);
    if (rc) return rc;
    *out = sd_tensor_reshape(r, 3, (int64_t[]){B, H, W});
    sd_tensor_unref(r);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_value *area_value(const int64_t a[4]) {
    sd_value *l = sd_value_list();
    for (int i = 0; l && i < 4; i++)
        if (sd_value_list_append(l, sd_value_int(a[i]))) {
            sd_value_unref(l);
            l = NULL;
        }
    return l;
}

/* One entry: a new reference, a resolved copy or e itself. */
static sd_status resolve_entry(sd_value *e, int64_t H, int64_t W, sd_value **out, sd_error *err) {
    *out = NULL;
    sd_value *area = sd_value_dict_get(e, "area");
    sd_tensor *mask = sd_value_dict_tensor(e, "mask");
    if (sd_value_dict_get(e, "mask") && !mask)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'mask' must be a tensor");
    if (!is_percentage(area) && !mask) {
        *out = sd_value_ref(e);
        return SD_OK;
    }
    sd_value *d = sd_value_shallow_copy(e);
    if (!d) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = SD_OK;
    if (is_percentage(area)) {
        sd_value *a = percentage_area(area, H, W);
        if (!a || sd_value_dict_set(d, "area", a)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (!rc && mask) {
        sd_tensor *r = NULL;
        rc = resized_mask(mask, H, W, &r, err);
        sd_value *set = sd_value_dict_get(e, "set_area_to_bounds");
        if (!rc && set && sd_value_as_bool(set)) {
            int64_t b[4];
            mask_bounds(r, b);
            sd_value *a = area_value(b);
            if (!a || sd_value_dict_set(d, "area", a)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
        sd_value *mv = r ? sd_value_tensor(r) : NULL;
        sd_tensor_unref(r);
        if (!rc && (!mv || sd_value_dict_set(d, "mask", mv))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else if (rc) sd_value_unref(mv);
    }
    if (rc) {
        sd_value_unref(d);
        return rc;
    }
    *out = d;
    return SD_OK;
}

sd_status sd_cond_resolve(const sd_value *list, int64_t H, int64_t W, sd_value **out, sd_error *err) {
    *out = NULL;
    sd_value *o = sd_value_list();
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sd_value_list_len(list); i++) {
        sd_value *r = NULL;
        sd_status rc = resolve_entry(sd_value_list_get(list, i), H, W, &r, err);
        if (!rc && sd_value_list_append(o, r)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        if (rc) {
            sd_error_prefix(err, "conditioning entry %zu", i);
            sd_value_unref(o);
            return rc;
        }
    }
    *out = o;
    return SD_OK;
}
