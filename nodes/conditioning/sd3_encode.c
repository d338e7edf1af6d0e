/* sd3_encode.c - CLIPTextEncodeSD3 (comfy_extras/nodes_sd3.py): clip_l,
 * clip_g and t5xxl each for its encoder of an SD3 CLIP, with the node's
 * empty_padding rule ("none": an empty text gives its encoder no tokens;
 * "empty_prompt": it is tokenized as the empty prompt). Needs an SD3 CLIP
 * (TripleCLIPLoader, DualCLIPLoader / CLIPLoader type sd3, an SD3
 * checkpoint's). */
#include <string.h>

#include "conditioning.h"
#include "models/checkpoint/model_paths.h"
#include "models/text/text_encode.h"
#include "nodes/loaders/loaders.h"
#include "text_cond.h"

static const char *const paddings[] = {"none", "empty_prompt", NULL};

static sd_status encode_sd3_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    sd_clip_ref *clip;
    sd_status rc = sd_nodes_in_clip(in, 0, "clip", &clip, err);
    if (rc) return rc;
    const char *tl = sd_value_as_string(in[1]), *tg = sd_value_as_string(in[2]),
               *tt = sd_value_as_string(in[3]), *pad = sd_value_as_string(in[4]);
    int empty_prompt = pad && strcmp(pad, "empty_prompt") == 0;
    if (!pad || (!empty_prompt && strcmp(pad, "none") != 0)) {
        sd_error_set(err, SD_ERR_INVALID, "empty_padding must be none or empty_prompt, got '%s'",
                     pad ? pad : "");
        sd_error_at(err, NULL, NULL, "empty_padding");
        return SD_ERR_INVALID;
    }
    sd_text_encoder *te;
    if ((rc = sd_nodes_clip_encoder(clip, &te, err))) {
        sd_error_at(err, NULL, NULL, "clip");
        return rc;
    }
    if (sd_text_encoder_kind(te) != SD_TE_SD3) {
        sd_error_set(err, SD_ERR_INVALID,
                     "CLIPTextEncodeSD3 needs an SD3 CLIP (TripleCLIPLoader, DualCLIPLoader or "
                     "CLIPLoader type sd3, or an SD3 checkpoint); this CLIP is %s",
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
        rc = sd_text_encode_sd3(te, tl ? tl : "", tg ? tg : "", tt ? tt : "", empty_prompt,
                                clip->clip_skip, &o, &cond, &pooled, err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_model_paths_free_list(dirs, nd);
    if (rc) {
        sd_error_at(err, NULL, NULL, "clip");
        return rc;
    }
    return sd_nodes_text_cond(cond, pooled, NULL, 0, &out[0], err);
}

static const sd_input_def encode_sd3_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "clip_l", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1,
     .dynamic_prompts = 1},
    {.name = "clip_g", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1,
     .dynamic_prompts = 1},
    {.name = "t5xxl", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1,
     .dynamic_prompts = 1},
    {.name = "empty_padding", .type = SD_T_COMBO, .options = paddings, .def_str = "none", .no_default = 1},
    {0}};
static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

const sd_node_def sd_node_CLIPTextEncodeSD3 = {
    .version = 1,
    .class_type = "CLIPTextEncodeSD3",
    .python_module = "comfy_extras.nodes_sd3",
    .category = "advanced/conditioning",
    .help = "Encodes clip_l, clip_g and t5xxl with SD3's CLIP-L, bigG and T5-XXL; "
            "empty_padding none leaves an empty text out, empty_prompt encodes it as the "
            "empty prompt.",
    .inputs = encode_sd3_inputs,
    .outputs = conditioning_out,
    .flags = SD_NODE_TEXT_ENCODER | SD_NODE_V3,
    .run = encode_sd3_run,
};
