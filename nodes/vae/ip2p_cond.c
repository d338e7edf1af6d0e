/* ip2p_cond.c - InstructPixToPixConditioning (comfy_extras/nodes_ip2p.py):
 * the image's latent on both conditionings ("concat_latent_image", the
 * extra input channels of InstructPix2Pix UNets; read by the sampler,
 * nodes/sampling/sampling.h) and a zero latent of its size to sample. */
#include <string.h>

#include "vae_nodes.h"
#include "models/vae/vae.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

static int set_image(sd_value *d, const void *arg) {
    return sd_value_dict_set(d, "concat_latent_image", sd_value_ref((sd_value *)arg));
}

static sd_status ip2p_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_value *pos, *neg;
    sd_vae_ref *vr;
    sd_vae *vae;
    sd_tensor *img, *lat = NULL;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "positive", &pos, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 1, "negative", &neg, err);
    if (!rc && !(rc = sd_nodes_in_vae(in, 2, "vae", &vr, err)) && (rc = sd_checkpoint_vae(vr->ckpt, &vae, err)))
        sd_error_at(err, NULL, NULL, "vae");
    if (!rc) rc = sd_nodes_in_tensor(in, 3, "pixels", 4, &img, err);
    if (!rc && (img->shape[3] < 3 || img->shape[1] < 8 || img->shape[2] < 8))
        rc = sd_nodes_bad_input(err, "pixels", "input 'pixels' must be an IMAGE [B, H, W, 3] of at least 8x8");
    if (rc) return rc;
    /* the node's centred cut to multiples of 8 is the one VAE.encode makes */
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_VAE, &prev, err))) {
        rc = sd_vae_encode(vae, img, &lat, err);
        sd_nodes_precision_end(ctx, prev);
    }
    if (rc) return rc;
    sd_tensor *zeros = sd_tensor_new(SD_F32, lat->ndim, lat->shape);
    sd_value *lv = sd_value_tensor(lat), *latent = sd_value_dict(), *zv = zeros ? sd_value_tensor(zeros) : NULL;
    sd_tensor_unref(lat);
    sd_tensor_unref(zeros);
    if (!lv || !latent || !zv) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc) {
        int bad = sd_value_dict_set(latent, "samples", zv);
        zv = NULL;
        if (bad) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (!rc) rc = sd_nodes_conditioning_map(pos, set_image, lv, &out[0], err);
    if (!rc) rc = sd_nodes_conditioning_map(neg, set_image, lv, &out[1], err);
    if (!rc) {
        out[2] = latent;
        latent = NULL;
    }
    sd_value_unref(lv);
    sd_value_unref(zv);
    sd_value_unref(latent);
    return rc;
}

static const sd_input_def ip2p_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "vae", .type = "VAE"},
    {.name = "pixels", .type = "IMAGE"},
    {0}};

static const sd_output_def ip2p_outputs[] = {
    {"positive", "CONDITIONING"}, {"negative", "CONDITIONING"}, {"latent", "LATENT"}, {0}};

const sd_node_def sd_node_InstructPixToPixConditioning = {
    .version = 1,
    .class_type = "InstructPixToPixConditioning",
    .python_module = "comfy_extras.nodes_ip2p",
    .category = "conditioning/instructpix2pix",
    .help = "For InstructPix2Pix checkpoints (8-channel UNets): both conditionings carry the "
                   "image's latent; the latent to sample is zeros of its size.",
    .inputs = ip2p_inputs,
    .outputs = ip2p_outputs,
    .flags = SD_NODE_VAE | SD_NODE_V3,
    .run = ip2p_run,
};
