/* inpaint_cond.c - InpaintModelConditioning (nodes.py): the masked image's
 * latent and the mask for inpainting models' extra input channels, set on
 * both conditionings ("concat_latent_image", "concat_mask"; read by the
 * sampler, nodes/sampling/sampling.h), and the whole image's latent with the
 * mask as noise_mask. Float32 in torch's order. */
#include <math.h>
#include <string.h>

#include "vae_nodes.h"
#include "models/image/imageops.h"
#include "models/vae/vae.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* The mask [Bm, 1, H, W] at the image size (F.interpolate bilinear) and cut
 * as the pixels are to multiples of 8 (offsets (H % 8) / 2, (W % 8) / 2);
 * the pixels cut likewise with (p - 0.5) * (1 - round(mask)) + 0.5 in their
 * first three channels. */
static sd_status prepare(const sd_tensor *img, const sd_tensor *mask, sd_tensor **px_out, sd_tensor **m_out,
                         sd_error *err) {
    const int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    const int64_t h = mask->shape[mask->ndim - 2], w = mask->shape[mask->ndim - 1];
    const int64_t mb = sd_tensor_numel(mask) / (h * w);
    if (mb != 1 && mb != B)
        return sd_nodes_bad_input(err, "mask", "input 'mask' has %lld masks for %lld images (1 or as many are needed)",
                                  (long long)mb, (long long)B);
    sd_tensor *m4 = sd_tensor_reshape((sd_tensor *)mask, 4, (int64_t[]){mb, 1, h, w}), *r = NULL;
    if (!m4) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = sd_imageops_upscale(m4, W, H, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &r, err);
    sd_tensor_unref(m4);
    if (rc) return rc;
    const int64_t H8 = H / 8 * 8, W8 = W / 8 * 8, oy = (H % 8) / 2, ox = (W % 8) / 2;
    sd_tensor *mo = sd_tensor_new4(SD_F32, 4, mb, 1, H8, W8), *px = sd_tensor_new4(SD_F32, 4, B, H8, W8, C);
    if (!mo || !px) {
        sd_tensor_unref(r), sd_tensor_unref(mo), sd_tensor_unref(px);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const float *rv = r->data, *iv = img->data;
    float *mv = mo->data, *pv = px->data;
    for (int64_t b = 0; b < mb; b++)
        for (int64_t y = 0; y < H8; y++)
            memcpy(mv + (b * H8 + y) * W8, rv + (b * H + y + oy) * W + ox, (size_t)W8 * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H8; y++)
            for (int64_t x = 0; x < W8; x++) {
                const float keep = 1.0f - rintf(mv[((b % mb) * H8 + y) * W8 + x]);
                const float *src = iv + ((b * H + y + oy) * W + x + ox) * C;
                float *dst = pv + ((b * H8 + y) * W8 + x) * C;
                for (int64_t c = 0; c < C; c++) {
                    float v = src[c];
                    if (c < 3) {
                        v = v - 0.5f;
                        v = v * keep;
                        v = v + 0.5f;
                    }
                    dst[c] = v;
                }
            }
    sd_tensor_unref(r);
    *px_out = px;
    *m_out = mo;
    return SD_OK;
}

typedef struct concat_keys {
    sd_value *latent, *mask;
} concat_keys;

static int set_concat(sd_value *d, const void *arg) {
    const concat_keys *k = arg;
    if (sd_value_dict_set(d, "concat_latent_image", sd_value_ref(k->latent))) return -1;
    return sd_value_dict_set(d, "concat_mask", sd_value_ref(k->mask));
}

static sd_status inpaint_cond_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_value *pos, *neg;
    sd_vae_ref *vr;
    sd_vae *vae;
    sd_tensor *img, *mask, *px = NULL, *m = NULL, *concat = NULL, *orig = NULL;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "positive", &pos, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 1, "negative", &neg, err);
    if (!rc && !(rc = sd_nodes_in_vae(in, 2, "vae", &vr, err)) && (rc = sd_checkpoint_vae(vr->ckpt, &vae, err)))
        sd_error_at(err, NULL, NULL, "vae");
    if (!rc) rc = sd_nodes_in_tensor(in, 3, "pixels", 4, &img, err);
    if (!rc && (img->shape[3] < 3 || img->shape[1] < 8 || img->shape[2] < 8))
        rc = sd_nodes_bad_input(err, "pixels", "input 'pixels' must be an IMAGE [B, H, W, 3] of at least 8x8");
    if (!rc) rc = sd_nodes_in_mask(in, 4, "mask", &mask, err);
    if (rc) return rc;
    rc = prepare(img, mask, &px, &m, err);
    sd_tensor_unref(mask);
    if (rc) return rc;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_VAE, &prev, err))) {
        rc = sd_vae_encode(vae, px, &concat, err);
        if (!rc) rc = sd_vae_encode(vae, img, &orig, err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_tensor_unref(px);
    concat_keys k = {concat ? sd_value_tensor(concat) : NULL, sd_value_tensor(m)};
    sd_value *latent = sd_value_dict(), *ov = orig ? sd_value_tensor(orig) : NULL;
    sd_tensor_unref(concat);
    sd_tensor_unref(orig);
    if (!rc && (!k.latent || !k.mask || !latent || !ov)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc) {
        int bad = sd_value_dict_set(latent, "samples", ov);
        ov = NULL;
        if (!bad && sd_value_as_bool(in[5])) bad = sd_value_dict_set(latent, "noise_mask", sd_value_ref(k.mask));
        if (bad) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (!rc) rc = sd_nodes_conditioning_map(pos, set_concat, &k, &out[0], err);
    if (!rc) rc = sd_nodes_conditioning_map(neg, set_concat, &k, &out[1], err);
    if (!rc) {
        out[2] = latent;
        latent = NULL;
    }
    sd_tensor_unref(m);
    sd_value_unref(k.latent);
    sd_value_unref(k.mask);
    sd_value_unref(latent);
    sd_value_unref(ov);
    return rc;
}

static const sd_input_def inpaint_cond_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "vae", .type = "VAE"},
    {.name = "pixels", .type = "IMAGE"},
    {.name = "mask", .type = "MASK"},
    {.name = "noise_mask", .type = SD_T_BOOLEAN, .def = 1,
     .tooltip = "Add a noise mask to the latent so sampling will only happen within the mask. Might improve "
                "results or completely break things depending on the model."},
    {0}};

static const sd_output_def inpaint_cond_outputs[] = {
    {"positive", "CONDITIONING"}, {"negative", "CONDITIONING"}, {"latent", "LATENT"}, {0}};

const sd_node_def sd_node_InpaintModelConditioning = {
    .version = 1,
    .class_type = "InpaintModelConditioning",
    .python_module = "nodes",
    .display_name = "InpaintModelConditioning",
    .category = "conditioning/inpaint",
    .help = "For inpainting models: both conditionings carry the latent of the image with the "
                   "masked part grey and the mask (the model's extra input channels); the latent is "
                   "the whole image's, with the mask as noise_mask when noise_mask is on.",
    .inputs = inpaint_cond_inputs,
    .outputs = inpaint_cond_outputs,
    .flags = SD_NODE_VAE,
    .run = inpaint_cond_run,
};
