/* flux_cond.c - FluxGuidance, FluxDisableGuidance and FluxKontextImageScale
 * (comfy_extras/nodes_flux.py).
 *
 * FluxGuidance / FluxDisableGuidance are node_helpers.conditioning_set_values:
 * every entry's dict copied with "guidance" set (a FLOAT, or none: the Flux
 * model then leaves its guidance embedding out; a missing key means 3.5). */

#include "conditioning.h"
#include "models/flux/kontext.h"
#include "nodes/image/image.h"

static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

/* New list of copies of src's dicts with "guidance" = v (one reference per
 * entry taken; v itself is released). */
static sd_status set_guidance(const sd_value *src, sd_value *v, sd_value **out, sd_error *err) {
    sd_value *list = v ? sd_value_list() : NULL;
    int bad = !list;
    for (size_t k = 0; !bad && k < sd_value_list_len(src); k++) {
        sd_value *d = sd_value_shallow_copy(sd_value_list_get(src, k));
        bad = !d || sd_value_dict_set(d, "guidance", sd_value_ref(v)) != 0;
        if (!bad) bad = sd_value_list_append(list, d) != 0;
        else sd_value_unref(d);
    }
    sd_value_unref(v);
    if (bad) {
        sd_value_unref(list);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = list;
    return SD_OK;
}

/* ---- FluxGuidance ------------------------------------------------------------------------- */

static sd_status flux_guidance_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    (void)ctx;
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    if (rc) return rc;
    return set_guidance(c, sd_value_float(sd_value_as_float(in[1])), &out[0], err);
}

static const sd_input_def flux_guidance_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "guidance", .type = SD_T_FLOAT, .def = 3.5, .min = 0.0, .max = 100.0, .step = 0.1,
     .has_range = 1},
    {0}};

const sd_node_def sd_node_FluxGuidance = {
    .version = 1,
    .class_type = "FluxGuidance", .python_module = "comfy_extras.nodes_flux", .flags = SD_NODE_V3,
    .category = "advanced/conditioning/flux",
    .help = "Sets the guidance a guidance-distilled model (Flux dev) is conditioned on "
            "(its embedded CFG scale; the sampler's cfg stays 1).",
    .inputs = flux_guidance_inputs,
    .outputs = conditioning_out,
    .run = flux_guidance_run,
};

/* ---- FluxDisableGuidance ------------------------------------------------------------------- */

static sd_status flux_disable_guidance_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                           sd_error *err) {
    (void)ctx;
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    if (rc) return rc;
    return set_guidance(c, sd_value_none(), &out[0], err);
}

static const sd_input_def flux_disable_guidance_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"}, {0}};

const sd_node_def sd_node_FluxDisableGuidance = {
    .version = 1,
    .class_type = "FluxDisableGuidance",
    .python_module = "comfy_extras.nodes_flux",
    .description = "This node completely disables the guidance embed on Flux and Flux like models", .flags = SD_NODE_V3,
    .category = "advanced/conditioning/flux",
    .inputs = flux_disable_guidance_inputs,
    .outputs = conditioning_out,
    .run = flux_disable_guidance_run,
};

/* ---- FluxKontextImageScale -------------------------------------------------------------------- */

static sd_status kontext_scale_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t w, h;
    sd_flux_kontext_size(img->shape[2], img->shape[1], &w, &h);
    sd_tensor *res = NULL;
    rc = sd_nodes_upscale_batched(ctx, img, 1, w, h, SD_UPSCALE_LANCZOS, SD_CROP_CENTER, "image",
                                  &res, err);
    if (rc) return rc;
    out[0] = sd_value_tensor(res);
    sd_tensor_unref(res);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def kontext_scale_inputs[] = {{.name = "image", .type = "IMAGE"}, {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

const sd_node_def sd_node_FluxKontextImageScale = {
    .version = 1,
    .class_type = "FluxKontextImageScale",
    .python_module = "comfy_extras.nodes_flux",
    .description = "This node resizes the image to one that is more optimal for flux kontext.", .flags = SD_NODE_V3,
    .category = "advanced/conditioning/flux",
    .inputs = kontext_scale_inputs,
    .outputs = image_out,
    .run = kontext_scale_run,
};

extern const sd_node_def sd_node_ReferenceLatent, sd_node_FluxKontextMultiReferenceLatentMethod; /* edit_model.c */

const sd_node_def *const sd_nodes_flux_conditioning[] = {
    &sd_node_FluxGuidance, &sd_node_FluxDisableGuidance, &sd_node_FluxKontextImageScale,
    &sd_node_ReferenceLatent, &sd_node_FluxKontextMultiReferenceLatentMethod, NULL};
