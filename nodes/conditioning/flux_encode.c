/* flux_encode.c - CLIPTextEncodeFlux (comfy_extras/nodes_flux.py): clip_l
 * through the CLIP-L half (pooled), t5xxl through the T5 (cond), and the
 * guidance stored in the conditioning as "guidance" for the Flux model (the
 * value FluxGuidance would set). Needs a Flux CLIP (DualCLIPLoader type
 * flux, or a Flux checkpoint's). */
#include "conditioning.h"
#include "models/checkpoint/model_paths.h"
#include "models/text/text_encode.h"
#include "nodes/loaders/loaders.h"
#include "text_cond.h"

static sd_status encode_flux_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    sd_clip_ref *clip;
    sd_status rc = sd_nodes_in_clip(in, 0, "clip", &clip, err);
    if (rc) return rc;
    const char *tl = sd_value_as_string(in[1]), *tt = sd_value_as_string(in[2]);
    double guidance = sd_value_as_float(in[3]);
    sd_text_encoder *te;
    if ((rc = sd_nodes_clip_encoder(clip, &te, err))) {
        sd_error_at(err, NULL, NULL, "clip");
        return rc;
    }
    if (sd_text_encoder_kind(te) != SD_TE_FLUX) {
        sd_error_set(err, SD_ERR_INVALID,
                     "CLIPTextEncodeFlux needs a Flux CLIP (DualCLIPLoader type flux, or a Flux "
                     "checkpoint); this CLIP is %s",
                     sd_te_kind_name(sd_text_encoder_kind(te)));
        sd_error_at(err, NULL, NULL, "clip");
        return SD_ERR_INVALID;
    }
    char *dirs[SD_NODES_MAX_EMBEDDING_DIRS];
    sd_text_encode_opts o;
    size_t nd = sd_nodes_text_opts(ctx, dirs, &o);
    sd_tensor *cond = NULL, *pooled = NULL;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err))) {
        rc = sd_text_encode_flux(te, tl ? tl : "", tt ? tt : "", clip->clip_skip, &o, &cond, &pooled,
                                 err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_model_paths_free_list(dirs, nd);
    if (rc) {
        sd_error_at(err, NULL, NULL, "t5xxl");
        return rc;
    }
    sd_nodes_cond_extra ex = {"guidance", sd_value_float(guidance)};
    return sd_nodes_text_cond(cond, pooled, &ex, 1, &out[0], err);
}

static const sd_input_def encode_flux_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "clip_l", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1, .dynamic_prompts = 1},
    {.name = "t5xxl", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1, .dynamic_prompts = 1},
    {.name = "guidance", .type = SD_T_FLOAT, .def = 3.5, .min = 0.0, .max = 100.0, .step = 0.1,
     .has_range = 1},
    {0}};
static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

const sd_node_def sd_node_CLIPTextEncodeFlux = {
    .version = 1,
    .class_type = "CLIPTextEncodeFlux",
    .python_module = "comfy_extras.nodes_flux",
    .category = "advanced/conditioning/flux",
    .help = "Encodes clip_l with Flux's CLIP-L (pooled output) and t5xxl with its T5-XXL "
            "(conditioning), and stores the guidance the Flux model is given.",
    .inputs = encode_flux_inputs,
    .outputs = conditioning_out,
    .flags = SD_NODE_TEXT_ENCODER | SD_NODE_V3,
    .run = encode_flux_run,
};
