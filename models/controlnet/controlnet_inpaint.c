/* controlnet_inpaint.c - the inpainting ControlNets' mask (ComfyUI's
 * concat_mask / extra_concat): ControlNetInpaintingAliMamaApply's image and
 * mask arithmetic (comfy_extras/nodes_controlnet.py) and the mask channel
 * ControlNet.get_control appends to the hint latent. */
#include "models/controlnet/controlnet_internal.h"
#include "models/image/imageops.h"
#include "models/image/maskops.h"
#include "models/sd3/sd3_controlnet.h"

#include <math.h>
#include <string.h>

/* comfy.controlnet.load_controlnet_mmdit: pos_embed_input takes 17
 * channels (16 latent + the mask) */
#define CONCAT_MASK_CHANNELS 17

int sd_controlnet_concat_mask(const sd_controlnet *cn) {
    return cn && cn->mmdit && sd_sd3_cn_hint_channels(cn->mmdit) == CONCAT_MASK_CHANNELS;
}

sd_status sd_controlnet_inpaint_inputs(const sd_tensor *image, const sd_tensor *mask, sd_tensor **image_out,
                                       sd_tensor **extra_concat, sd_error *err) {
    *image_out = *extra_concat = NULL;
    if (!image || image->dtype != SD_F32 || image->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "the image must be an F32 IMAGE [B, H, W, C]");
    if (!mask || mask->dtype != SD_F32 || mask->ndim < 2 || mask->ndim > 4)
        return sd_error_set(err, SD_ERR_INVALID, "the mask must be an F32 MASK [B, H, W] or [H, W]");
    /* mask.reshape((-1, 1, H, W)) */
    int64_t mh = mask->shape[mask->ndim - 2], mw = mask->shape[mask->ndim - 1];
    if (mh < 1 || mw < 1)
        return sd_error_set(err, SD_ERR_INVALID, "the mask is empty (%lldx%lld)", (long long)mw, (long long)mh);
    int64_t bm = sd_tensor_numel(mask) / (mh * mw);
    if (bm < 1) return sd_error_set(err, SD_ERR_INVALID, "the mask batch is empty");
    int64_t bi = image->shape[0], H = image->shape[1], W = image->shape[2], C = image->shape[3];
    /* image * mask_apply broadcasts over the batch (PyTorch's rule) */
    if (bm != bi && bm != 1 && bi != 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "the mask's batch of %lld does not match the image's batch of %lld (one of them must "
                            "be 1 or both equal)",
                            (long long)bm, (long long)bi);
    sd_tensor *inv = sd_tensor_new4(SD_F32, 4, bm, 1, mh, mw);
    if (!inv) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *mv = mask->data;
    float *iv = inv->data;
    for (int64_t i = 0; i < bm * mh * mw; i++) iv[i] = 1.0f - mv[i];
    /* mask_apply = common_upscale(1 - mask, W, H, "bilinear", "center").round() */
    sd_tensor *ma = NULL;
    sd_status rc = sd_imageops_upscale(inv, W, H, SD_UPSCALE_BILINEAR, SD_CROP_CENTER, &ma, err);
    if (rc) {
        sd_tensor_unref(inv);
        return rc;
    }
    int64_t B = bm > bi ? bm : bi, plane = H * W;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, H, W, C);
    if (!o) {
        sd_tensor_unref(inv), sd_tensor_unref(ma);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    float *av = ma->data, *ov = o->data;
    for (int64_t i = 0; i < bm * plane; i++) av[i] = nearbyintf(av[i]); /* torch.round: half to even */
    const float *xv = image->data;
    for (int64_t b = 0; b < B; b++) {
        const float *x = xv + (bi == 1 ? 0 : b) * plane * C, *a = av + (bm == 1 ? 0 : b) * plane;
        float *y = ov + b * plane * C;
        for (int64_t p = 0; p < plane; p++)
            for (int64_t c = 0; c < C; c++) y[p * C + c] = x[p * C + c] * a[p];
    }
    sd_tensor_unref(ma);
    *image_out = o;
    *extra_concat = inv;
    return SD_OK;
}

sd_status sd_controlnet_mask_channel(const sd_tensor *extra_concat, int64_t batch, int64_t h, int64_t w,
                                     sd_tensor **out, sd_error *err) {
    *out = NULL;
    if (!extra_concat) {
        /* set_cond_hint's default torch.tensor([[[[1.0]]]]): ones at any size */
        sd_tensor *t = sd_tensor_new4(SD_F32, 4, batch, 1, h, w);
        if (!t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        float *v = t->data;
        for (int64_t i = 0; i < batch * h * w; i++) v[i] = 1.0f;
        *out = t;
        return SD_OK;
    }
    if (extra_concat->dtype != SD_F32 || extra_concat->ndim != 4 || extra_concat->shape[1] != 1 ||
        extra_concat->shape[0] < 1)
        return sd_error_set(err, SD_ERR_INVALID, "the ControlNet's mask must be an F32 [B, 1, H, W] tensor");
    /* common_upscale(c, w, h, "nearest-exact", "center"), repeat_to_batch_size */
    sd_tensor *r = NULL;
    sd_status rc = sd_imageops_upscale(extra_concat, w, h, SD_UPSCALE_NEAREST_EXACT, SD_CROP_CENTER, &r, err);
    if (rc) return rc;
    *out = sd_repeat_to_batch(r, batch);
    sd_tensor_unref(r);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}
