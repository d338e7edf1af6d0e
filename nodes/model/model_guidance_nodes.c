/* model_guidance_nodes.c - the "model_patches" nodes that patch the UNet's
 * forward (ComfyUI's set_model_*_patch on a model clone): FreeU and
 * FreeU_V2 (comfy_extras/nodes_freelunch.py). Each returns a new MODEL
 * whose patch list (sd_model_patches.unet, models/unet/unet.h) is the
 * input's with one more patch; the input MODEL is untouched. */
#include "model_nodes.h"

#include <string.h>

#include "nodes/loaders/loaders.h"

/* A new MODEL: m with patch pt appended to its UNet patches. ComfyUI's
 * patches read the UNet's config (unet_config["model_channels"]), which a
 * DiT's MODEL has not: refused here, naming the family. */
static sd_status add_unet_patch(const sd_model_ref *m, const sd_unet_patch *pt, const char *node, sd_value **out,
                                sd_error *err) {
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s patches a UNet (SD1, SD2, SDXL); %s has none", node,
                            sd_checkpoint_path(m->ckpt));
    sd_model_patches p = m->patches;
    sd_status rc = sd_unet_patches_add(&p.unet, pt, err);
    if (rc) return rc;
    *out = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status freeu_common(sd_value *const *in, sd_value **out, sd_unet_patch_kind kind, const char *node,
                              sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_unet_patch pt;
    memset(&pt, 0, sizeof pt);
    pt.kind = kind;
    for (int i = 0; i < 4; i++) pt.p[i] = sd_value_as_float(in[1 + i]); /* b1, b2, s1, s2 */
    return add_unet_patch(m, &pt, node, &out[0], err);
}

static sd_status freeu_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return freeu_common(in, out, SD_UNET_PATCH_FREEU, "FreeU", err);
}

static sd_status freeu_v2_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return freeu_common(in, out, SD_UNET_PATCH_FREEU_V2, "FreeU_V2", err);
}

#define FREEU_IN(nm, d)                                                                                    \
    {.name = nm, .type = SD_T_FLOAT, .def = d, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1}

static const sd_input_def freeu_inputs[] = {
    {.name = "model", .type = "MODEL"}, FREEU_IN("b1", 1.1), FREEU_IN("b2", 1.2), FREEU_IN("s1", 0.9),
    FREEU_IN("s2", 0.2), {0}};
static const sd_input_def freeu_v2_inputs[] = {
    {.name = "model", .type = "MODEL"}, FREEU_IN("b1", 1.3), FREEU_IN("b2", 1.4), FREEU_IN("s1", 0.9),
    FREEU_IN("s2", 0.2), {0}};
static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};

static const sd_node_def node_freeu = {
    .version = 1,
    .class_type = "FreeU",
    .python_module = "comfy_extras.nodes_freelunch",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "FreeU: in the UNet's output blocks of model_channels*4 (b1, s1) and *2 (b2, s2) channels, the "
            "first half of the backbone features times b and the skip's lowest frequencies times s.",
    .inputs = freeu_inputs,
    .outputs = model_out,
    .run = freeu_run,
};

static const sd_node_def node_freeu_v2 = {
    .version = 1,
    .class_type = "FreeU_V2",
    .python_module = "comfy_extras.nodes_freelunch",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "FreeU v2: as FreeU, the backbone scaled by (b - 1) * m + 1 with m the normalised channel mean.",
    .inputs = freeu_v2_inputs,
    .outputs = model_out,
    .run = freeu_v2_run,
};

const sd_node_def *const sd_nodes_model_guidance[] = {&node_freeu, &node_freeu_v2, NULL};
