/* concat_cond.c - the extra input channels of 9-channel inpainting UNets
 * (comfy.model_base.BaseModel.concat_cond with concat_keys ("mask",
 * "masked_image")) and of 8-channel InstructPix2Pix UNets
 * (model_base.IP2P.concat_cond), for the whole run and per conditioning
 * entry. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "models/image/imageops.h"
#include "models/sampling/latent_format.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* comfy.utils.resize_to_batch_size on a [b, ...] tensor: a new reference. */
static sd_tensor *to_batch(sd_tensor *t, int64_t B) {
    const int64_t in = t->shape[0];
    if (in == B) return sd_tensor_ref(t);
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[0] = B;
    sd_tensor *o = sd_tensor_new(SD_F32, t->ndim, shape);
    if (!o) return NULL;
    const size_t per = (size_t)(sd_tensor_numel(t) / in);
    for (int64_t i = 0; i < B; i++) {
        int64_t j;
        if (B <= 1) j = i;
        else if (B < in) { /* min(round(i * (in - 1) / (B - 1)), in - 1) */
            double scale = (double)(in - 1) / (double)(B - 1);
            j = (int64_t)nearbyint((double)i * scale);
        } else { /* min(floor((i + 0.5) * in / B), in - 1) */
            double scale = (double)in / (double)B;
            j = (int64_t)floor(((double)i + 0.5) * scale);
        }
        if (j > in - 1) j = in - 1;
        memcpy((float *)o->data + (size_t)i * per, (const float *)t->data + (size_t)j * per, per * sizeof(float));
    }
    return o;
}

/* t [b, c, h, w] at H x W: common_upscale(t, W, H, "bilinear", "center")
 * when the size differs. A new reference. */
static sd_status to_size(sd_tensor *t, int64_t H, int64_t W, sd_tensor **out, sd_error *err) {
    if (t->shape[2] == H && t->shape[3] == W) {
        *out = sd_tensor_ref(t);
        return SD_OK;
    }
    return sd_imageops_upscale(t, W, H, SD_UPSCALE_BILINEAR, SD_CROP_CENTER, out, err);
}

/* The entry's denoise mask [B, 1, H, W], rounded: concat_mask ([.., h, w];
 * a 4-dim one's first channel) resized and batched as concat_cond does. */
static sd_status entry_mask(const sd_tensor *cm, const int64_t *shape, sd_tensor **out, sd_error *err) {
    *out = NULL;
    if (cm->dtype != SD_F32 || cm->ndim < 2 || cm->ndim > 4)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'concat_mask' must be F32 [.., H, W]");
    const int64_t h = cm->shape[cm->ndim - 2], w = cm->shape[cm->ndim - 1];
    int64_t b = sd_tensor_numel(cm) / (h * w);
    sd_tensor *m = NULL;
    if (cm->ndim == 4 && cm->shape[1] != 1) { /* [:, :1] */
        b = cm->shape[0];
        if ((m = sd_tensor_new4(SD_F32, 4, b, 1, h, w)))
            for (int64_t i = 0; i < b; i++)
                memcpy((float *)m->data + i * h * w, (const float *)cm->data + i * cm->shape[1] * h * w,
                       (size_t)(h * w) * sizeof(float));
    } else {
        m = sd_tensor_reshape((sd_tensor *)cm, 4, (int64_t[]){b, 1, h, w});
    }
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_tensor *r = NULL;
    sd_status rc = to_size(m, shape[2], shape[3], &r, err);
    sd_tensor_unref(m);
    if (rc) return rc;
    sd_tensor *rr = sd_tensor_clone(r);
    sd_tensor_unref(r);
    if (!rr) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    float *v = rr->data;
    for (int64_t i = 0; i < sd_tensor_numel(rr); i++) v[i] = rintf(v[i]);
    *out = to_batch(rr, shape[0]);
    sd_tensor_unref(rr);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* The entry's latent at the latent's size and batch, in model space
 * (process_latent_in) when fmt is given. */
static sd_status entry_image(const sd_tensor *cl, const sd_latent_format *fmt, const int64_t *shape, sd_tensor **out,
                             sd_error *err) {
    *out = NULL;
    if (cl->dtype != SD_F32 || cl->ndim != 4 || cl->shape[1] != shape[1])
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'concat_latent_image' must be F32 [B, %lld, H, W]",
                            (long long)shape[1]);
    sd_tensor *p = sd_tensor_new(SD_F32, 4, cl->shape), *r = NULL;
    if (!p) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (fmt) sd_latent_process_in(fmt, cl->data, p->data, (size_t)sd_tensor_numel(cl));
    else memcpy(p->data, cl->data, p->nbytes);
    sd_status rc = to_size(p, shape[2], shape[3], &r, err);
    sd_tensor_unref(p);
    if (rc) return rc;
    *out = to_batch(r, shape[0]);
    sd_tensor_unref(r);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_tensor *sd_inpaint_concat(const sd_tensor *mask, const sd_tensor *image, const int64_t *shape) {
    static const float blank[4] = {0.8223f, -0.6876f, 0.6364f, 0.1380f};
    const int64_t B = shape[0], C = shape[1], plane = shape[2] * shape[3];
    const int64_t mc = mask ? mask->shape[1] : 0; /* the mask's channels: 1, or C when broadcast */
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, C + 1, shape[2], shape[3]);
    if (!o) return NULL;
    float *ov = o->data;
    for (int64_t b = 0; b < B; b++) {
        float *dm = ov + b * (C + 1) * plane;
        for (int64_t i = 0; i < plane; i++)
            dm[i] = mask ? rintf(((const float *)mask->data)[b * mc * plane + i]) : 1.0f;
        for (int64_t c = 0; c < C; c++) {
            float *d = dm + (1 + c) * plane;
            const float *src = (const float *)image->data + (b * C + c) * plane;
            for (int64_t i = 0; i < plane; i++) d[i] = mask ? src[i] : 1.0f * (c < 4 ? blank[c] : 1.0f);
        }
    }
    return o;
}

sd_status sd_cond_concat(const sd_value *list, int ip2p, const sd_tensor *denoise_mask, const sd_tensor *latent_in,
                         const sd_latent_format *fmt, sd_value **out, sd_error *err) {
    *out = NULL;
    const int64_t *shape = latent_in->shape;
    sd_value *o = sd_value_list();
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sd_value_list_len(list); i++) {
        sd_value *e = sd_value_list_get(list, i);
        /* IP2P.concat_cond reads only the image, and as it is (SD1.5 and
         * SDXL ip2p: process_ip2p_image_in is the identity) */
        const sd_tensor *cm = ip2p ? NULL : sd_value_dict_tensor(e, "concat_mask");
        const sd_tensor *cl = sd_value_dict_tensor(e, "concat_latent_image");
        sd_status rc = SD_OK;
        sd_value *n = NULL;
        if (!cm && !cl) {
            n = sd_value_ref(e);
        } else {
            sd_tensor *m = NULL, *img = NULL, *cc = NULL;
            if (cm) rc = entry_mask(cm, shape, &m, err);
            if (!rc && cl) rc = entry_image(cl, ip2p ? NULL : fmt, shape, &img, err);
            const sd_tensor *mk = m ? m : denoise_mask;
            if (!rc && ip2p) cc = sd_tensor_ref(img);
            else if (!rc && !(cc = sd_inpaint_concat(mk, img ? img : latent_in, shape)))
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            sd_tensor_unref(m);
            sd_tensor_unref(img);
            if (!rc) {
                sd_value *cv = sd_value_tensor(cc);
                n = sd_value_shallow_copy(e);
                if (!cv || !n || sd_value_dict_set(n, "c_concat", cv)) {
                    if (!n) sd_value_unref(cv);
                    rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                }
            }
            sd_tensor_unref(cc);
        }
        if (!rc && sd_value_list_append(o, n)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else if (rc) sd_value_unref(n);
        if (rc) {
            sd_error_prefix(err, "conditioning entry %zu", i);
            sd_value_unref(o);
            return rc;
        }
    }
    *out = o;
    return SD_OK;
}
