/* clip_nodes.c - CLIPTextEncode (alias CLIPEncode) and CLIPSetLastLayer. */
#include <stdlib.h>

#include "conditioning.h"
#include "models/model_paths.h"
#include "models/text_encode.h"
#include "nodes/loaders/loaders.h"

static void warn_to_log(void *ud, const char *msg) {
    sd_node_log((const sd_node_ctx *)ud, SD_LOG_WARN, "%s", msg);
}

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
    char *dirs[4];
    size_t nd = sd_model_paths_embedding_dirs(ctx->env, dirs, 4);
    sd_text_encode_opts o = {.embedding_dirs = (const char *const *)dirs,
                             .n_embedding_dirs = nd,
                             .warn = warn_to_log,
                             .warn_ud = ctx};
    sd_tensor *cond = NULL, *pooled = NULL;
    rc = sd_text_encode(te, text ? text : "", clip->clip_skip, &o, &cond, &pooled, err);
    sd_model_paths_free_list(dirs, nd);
    if (rc) {
        sd_error_at(err, NULL, NULL, "text");
        return rc;
    }
    sd_value *list = sd_value_list(), *d = sd_value_dict();
    sd_value *cv = sd_value_tensor(cond), *pv = pooled ? sd_value_tensor(pooled) : NULL;
    sd_tensor_unref(cond);
    sd_tensor_unref(pooled);
    int bad = !list || !d || !cv || (pooled && !pv);
    if (!bad) {
        bad |= sd_value_dict_set(d, "cond", cv) != 0;
        cv = NULL;
        if (pv) bad |= sd_value_dict_set(d, "pooled_output", pv) != 0;
        pv = NULL;
        bad |= sd_value_list_append(list, d) != 0;
        d = NULL;
    }
    sd_value_unref(cv);
    sd_value_unref(pv);
    sd_value_unref(d);
    if (bad) {
        sd_value_unref(list);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def clip_text_encode_inputs[] = {
    {.name = "text", .type = SD_T_STRING, .multiline = 1, .def_str = ""},
    {.name = "clip", .type = "CLIP"},
    {0}};
static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

const sd_node_def sd_node_CLIPTextEncode = {
    .version = 1,
    .class_type = "CLIPTextEncode",
    .display_name = "CLIP Text Encode (Prompt)",
    .category = "conditioning",
    .description = "Encodes a prompt with the CLIP text encoder (ComfyUI weight syntax, "
                   "embedding:NAME, 77-token chunks).",
    .inputs = clip_text_encode_inputs,
    .outputs = conditioning_out,
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
    out[0] = sd_nodes_clip_value_lora(clip->ckpt, (int)layer, clip->loras);
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
    .display_name = "CLIP Set Last Layer",
    .category = "conditioning",
    .description = "Clip skip: text encodes use the output of this layer (-1 = last, "
                   "-2 = penultimate).",
    .inputs = clip_set_last_layer_inputs,
    .outputs = clip_out,
    .run = clip_set_last_layer_run,
};
