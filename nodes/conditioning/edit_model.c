/* edit_model.c - ReferenceLatent (comfy_extras/nodes_edit_model.py) and
 * FluxKontextMultiReferenceLatentMethod (comfy_extras/nodes_flux.py): the
 * conditioning keys of edit models such as Flux Kontext.
 *
 * ReferenceLatent is node_helpers.conditioning_set_values(..., append=True)
 * with {"reference_latents": [latent["samples"]]}: every entry's dict copied
 * with the latent appended to its list (a new list; the tensors are shared),
 * or the conditioning as it came when no latent is connected. The sampler
 * reads the list (nodes/sampling/sampling.h). */
#include <string.h>

#include "conditioning.h"
#include "nodes/image/image.h"

static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

/* ---- ReferenceLatent ------------------------------------------------------------------------- */

/* d's "reference_latents" with `lat` appended (a new list). */
static int append_ref(sd_value *d, const void *arg) {
    sd_value *lat = (sd_value *)arg;
    const sd_value *old = sd_value_dict_get(d, "reference_latents");
    sd_value *list = sd_value_list();
    if (!list) return 1;
    if (old && sd_value_kind_of(old) == SD_VAL_LIST)
        for (size_t i = 0; i < sd_value_list_len(old); i++)
            if (sd_value_list_append(list, sd_value_ref(sd_value_list_get(old, i)))) {
                sd_value_unref(list);
                return 1;
            }
    if (sd_value_list_append(list, sd_value_ref(lat))) {
        sd_value_unref(list);
        return 1;
    }
    return sd_value_dict_set(d, "reference_latents", list) != 0;
}

static sd_status reference_latent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    if (rc) return rc;
    if (!in[1]) {
        out[0] = sd_value_ref(c);
        return SD_OK;
    }
    sd_tensor *samples;
    if ((rc = sd_nodes_in_latent(in, 1, "latent", &samples, err))) return rc;
    if (samples->ndim != 4) {
        rc = sd_error_set(err, SD_ERR_INVALID, "the reference latent must be [B, C, H, W], got %d dims",
                          samples->ndim);
        sd_error_at(err, NULL, NULL, "latent");
        return rc;
    }
    sd_value *t = sd_value_tensor(samples);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    rc = sd_nodes_conditioning_map(c, append_ref, t, &out[0], err);
    sd_value_unref(t);
    return rc;
}

static const sd_input_def reference_latent_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "latent", .type = "LATENT", .optional = 1},
    {0}};

const sd_node_def sd_node_ReferenceLatent = {
    .version = 1,
    .class_type = "ReferenceLatent",
    .python_module = "comfy_extras.nodes_edit_model",
    .category = "advanced/conditioning/edit_models",
    .description = "This node sets the guiding latent for an edit model. If the model supports it you can chain "
                   "multiple to set multiple reference images.",
    .help = "Flux Kontext: the latent's tokens join the image tokens the DiT attends to, with their own "
            "RoPE positions; other model families ignore it.",
    .flags = SD_NODE_V3,
    .inputs = reference_latent_inputs,
    .outputs = conditioning_out,
    .run = reference_latent_run,
};

/* ---- FluxKontextMultiReferenceLatentMethod ----------------------------------------------------- */

static const char *const ref_methods[] = {"offset", "index", "uxo/uno", "index_timestep_zero", NULL};

static int set_method(sd_value *d, const void *arg) {
    sd_value *s = sd_value_string(arg);
    return !s || sd_value_dict_set(d, "reference_latents_method", s) != 0;
}

static sd_status ref_method_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    if (rc) return rc;
    const char *m = sd_value_as_string(in[1]);
    if (!m) {
        rc = sd_error_set(err, SD_ERR_INVALID, "reference_latents_method must be a string");
        sd_error_at(err, NULL, NULL, "reference_latents_method");
        return rc;
    }
    /* ComfyUI: any name containing "uxo" or "uso" is stored as "uxo" */
    if (strstr(m, "uxo") || strstr(m, "uso")) m = "uxo";
    return sd_nodes_conditioning_map(c, set_method, m, &out[0], err);
}

static const sd_input_def ref_method_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "reference_latents_method", .type = SD_T_COMBO, .options = ref_methods},
    {0}};

const sd_node_def sd_node_FluxKontextMultiReferenceLatentMethod = {
    .version = 1,
    .class_type = "FluxKontextMultiReferenceLatentMethod",
    .python_module = "comfy_extras.nodes_flux",
    .display_name = "Edit Model Reference Method",
    .category = "advanced/conditioning/flux",
    .help = "How Flux places reference latents in RoPE space: offset (Kontext's default: each beside or below "
            "the ones before), index (each its own index), uxo/uno (beyond the image, index 0). "
            "index_timestep_zero behaves as offset on Flux.",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .inputs = ref_method_inputs,
    .outputs = conditioning_out,
    .run = ref_method_run,
};
