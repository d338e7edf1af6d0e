/* clip_nodes.c - CLIPTextEncode (alias CLIPEncode) and CLIPSetLastLayer. */
#include <stdlib.h>

#include "conditioning.h"
#include "models/checkpoint/model_paths.h"
#include "models/text/text_encode.h"
#include "nodes/loaders/loaders.h"
#include "text_cond.h"

/* ---- CLIPTextEncode --------------------------------------------------------------- */

static sd_status clip_text_encode_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                      sd_error *err) {
    const char *text = sd_value_as_string(in[0]);
    sd_clip_ref *clip;
    sd_status rc = sd_nodes_in_clip(in, 1, "clip", &clip, err);
    if (rc) return rc;
    sd_text_encoder *te;
    if ((rc = sd_nodes_clip_encoder(clip, &te, err))) {
        sd_error_at(err, NULL, NULL, "clip");
        return rc;
    }
    char *dirs[SD_NODES_MAX_EMBEDDING_DIRS];
    sd_text_encode_opts o;
    size_t nd = sd_nodes_text_opts(ctx, dirs, &o);
    sd_tensor *cond = NULL, *pooled = NULL, *mask = NULL;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err))) {
        rc = sd_text_encode_masked(te, text ? text : "", clip->clip_skip, &o, &cond, &pooled, &mask,
                                   err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_model_paths_free_list(dirs, nd);
    if (rc) {
        sd_error_at(err, NULL, NULL, "text");
        return rc;
    }
    /* the families with a mask store it (ComfyUI's attention_mask key) */
    sd_nodes_cond_extra ex = {"attention_mask", NULL};
    if (mask) {
        ex.v = sd_value_tensor(mask);
        sd_tensor_unref(mask);
        if (!ex.v) {
            sd_tensor_unref(cond);
            sd_tensor_unref(pooled);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    return sd_nodes_text_cond(cond, pooled, &ex, mask ? 1 : 0, &out[0], err);
}

static const sd_input_def clip_text_encode_inputs[] = {
    {.name = "text", .type = SD_T_STRING, .multiline = 1, .def_str = "", .tooltip = "The text to be encoded.",
     .no_default = 1, .dynamic_prompts = 1},
    {.name = "clip", .type = "CLIP", .tooltip = "The CLIP model used for encoding the text."},
    {0}};
static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

const sd_node_def sd_node_CLIPTextEncode = {
    .version = 1,
    .class_type = "CLIPTextEncode",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("A conditioning containing the embedded text used to guide the diffusion model."),
    .description = "Encodes a text prompt using a CLIP model into an embedding that can be used to guide the "
                   "diffusion model towards generating specific images.",
    .display_name = "CLIP Text Encode (Prompt)",
    .category = "conditioning",
    .help = "Encodes a prompt with the CLIP text encoder (ComfyUI weight syntax, "
            "embedding:NAME, 77-token chunks).",
    .inputs = clip_text_encode_inputs,
    .outputs = conditioning_out,
    .flags = SD_NODE_TEXT_ENCODER,
    .run = clip_text_encode_run,
};

/* ---- CLIPSetLastLayer ---------------------------------------------------------------- */

static sd_status clip_set_last_layer_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                         sd_error *err) {
    (void)ctx;
    sd_clip_ref *clip;
    sd_status rc = sd_nodes_in_clip(in, 0, "clip", &clip, err);
    if (rc) return rc;
    int64_t layer = sd_value_as_int(in[1]);
    if (layer > -1 || layer < -24) {
        sd_error_set(err, SD_ERR_INVALID, "stop_at_clip_layer must be in -24..-1, got %lld",
                     (long long)layer);
        sd_error_at(err, NULL, NULL, "stop_at_clip_layer");
        return SD_ERR_INVALID;
    }
    out[0] = sd_nodes_clip_value_like(clip, (int)layer, clip->loras);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def clip_set_last_layer_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "stop_at_clip_layer", .type = SD_T_INT, .def = -1, .min = -24, .max = -1, .step = 1,
     .has_range = 1},
    {0}};
static const sd_output_def clip_out[] = {{"CLIP", "CLIP"}, {0}};

const sd_node_def sd_node_CLIPSetLastLayer = {
    .version = 1,
    .class_type = "CLIPSetLastLayer",
    .python_module = "nodes",
    .display_name = "CLIP Set Last Layer",
    .category = "conditioning",
    .help = "Clip skip: text encodes use the output of this layer (-1 = last, "
            "-2 = penultimate).",
    .inputs = clip_set_last_layer_inputs,
    .outputs = clip_out,
    .run = clip_set_last_layer_run,
};
