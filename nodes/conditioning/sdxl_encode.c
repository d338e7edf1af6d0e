/* sdxl_encode.c - CLIPTextEncodeSDXL and CLIPTextEncodeSDXLRefiner.
 *
 * Both encode like CLIPTextEncode and add the size conditioning to the
 * entry's dict under ComfyUI's names, which the sampler reads when it builds
 * the UNet's adm vector y (nodes/sampling/cond_model.c):
 *   base     width, height, crop_w, crop_h, target_width, target_height
 *   refiner  width, height, aesthetic_score
 * Integer sizes are stored as INT values, the aesthetic score as FLOAT.
 * CLIPTextEncodeSDXL needs an SDXL CLIP (text_g goes to bigG, text_l to
 * CLIP-L); the refiner node encodes `text` with whatever encoder the CLIP
 * has, as ComfyUI's does. */
#include <stdlib.h>

#include "conditioning.h"
#include "models/checkpoint/model_paths.h"
#include "models/text/text_encode.h"
#include "nodes/loaders/loaders.h"
#include "text_cond.h"

#define MAX_RESOLUTION 16384

/* The CLIP input's encoder, with `clip` named in errors. */
static sd_status get_encoder(sd_value *const *in, int i, sd_clip_ref **clip, sd_text_encoder **te,
                             sd_error *err) {
    sd_status rc = sd_nodes_in_clip(in, i, "clip", clip, err);
    if (!rc && (rc = sd_nodes_clip_encoder(*clip, te, err))) sd_error_at(err, NULL, NULL, "clip");
    return rc;
}

/* ---- CLIPTextEncodeSDXL ------------------------------------------------------------- */

/* in: clip, width, height, crop_w, crop_h, target_width, target_height, text_g, text_l */
static sd_status sdxl_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_clip_ref *clip;
    sd_text_encoder *te;
    sd_status rc = get_encoder(in, 0, &clip, &te, err);
    if (rc) return rc;
    if (sd_text_encoder_kind(te) != SD_TE_SDXL) {
        sd_error_set(err, SD_ERR_INVALID,
                     "CLIPTextEncodeSDXL needs the CLIP of an SDXL base checkpoint (CLIP-L + "
                     "bigG); this one is %s (use CLIPTextEncode%s)",
                     sd_te_kind_name(sd_text_encoder_kind(te)),
                     sd_text_encoder_kind(te) == SD_TE_SDXL_REFINER ? "SDXLRefiner" : "");
        sd_error_at(err, NULL, NULL, "clip");
        return SD_ERR_INVALID;
    }
    const char *tg = sd_value_as_string(in[7]), *tl = sd_value_as_string(in[8]);
    char *dirs[SD_NODES_MAX_EMBEDDING_DIRS];
    sd_text_encode_opts o;
    size_t nd = sd_nodes_text_opts(ctx, dirs, &o);
    sd_tensor *cond = NULL, *pooled = NULL;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err))) {
        rc = sd_text_encode_sdxl(te, tg ? tg : "", tl ? tl : "", clip->clip_skip, &o, &cond, &pooled,
                                 err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_model_paths_free_list(dirs, nd);
    if (rc) {
        sd_error_at(err, NULL, NULL, "text_g");
        return rc;
    }
    static const char *const keys[] = {"width",  "height",       "crop_w",
                                       "crop_h", "target_width", "target_height"};
    sd_nodes_cond_extra ex[6];
    for (int i = 0; i < 6; i++)
        ex[i] = (sd_nodes_cond_extra){keys[i], sd_value_int(sd_value_as_int(in[1 + i]))};
    return sd_nodes_text_cond(cond, pooled, ex, 6, &out[0], err);
}

#define SIZE_INPUT(n, d) \
    {.name = n, .type = SD_T_INT, .def = d, .min = 0, .max = MAX_RESOLUTION, .has_range = 1}

static const sd_input_def sdxl_inputs[] = {
    {.name = "clip", .type = "CLIP"},
    SIZE_INPUT("width", 1024),
    SIZE_INPUT("height", 1024),
    SIZE_INPUT("crop_w", 0),
    SIZE_INPUT("crop_h", 0),
    SIZE_INPUT("target_width", 1024),
    SIZE_INPUT("target_height", 1024),
    {.name = "text_g", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1, .dynamic_prompts = 1},
    {.name = "text_l", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1, .dynamic_prompts = 1},
    {0}};
static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

const sd_node_def sd_node_CLIPTextEncodeSDXL = {
    .version = 1,
    .class_type = "CLIPTextEncodeSDXL",
    .python_module = "comfy_extras.nodes_clip_sdxl",
    .category = "advanced/conditioning",
    .help = "SDXL text encode: text_g through OpenCLIP bigG, text_l through CLIP-L, with "
            "the original size, crop and target size the UNet is conditioned on.",
    .inputs = sdxl_inputs,
    .outputs = conditioning_out,
    .flags = SD_NODE_TEXT_ENCODER | SD_NODE_V3,
    .run = sdxl_run,
};

/* ---- CLIPTextEncodeSDXLRefiner -------------------------------------------------------- */

/* in: ascore, width, height, text, clip */
static sd_status refiner_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                             sd_error *err) {
    sd_clip_ref *clip;
    sd_text_encoder *te;
    sd_status rc = get_encoder(in, 4, &clip, &te, err);
    if (rc) return rc;
    const char *text = sd_value_as_string(in[3]);
    char *dirs[SD_NODES_MAX_EMBEDDING_DIRS];
    sd_text_encode_opts o;
    size_t nd = sd_nodes_text_opts(ctx, dirs, &o);
    sd_tensor *cond = NULL, *pooled = NULL;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err))) {
        rc = sd_text_encode(te, text ? text : "", clip->clip_skip, &o, &cond, &pooled, err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_model_paths_free_list(dirs, nd);
    if (!rc && !pooled) {
        sd_tensor_unref(cond);
        rc = sd_error_set(err, SD_ERR_INVALID, "this CLIP gives no pooled output");
    }
    if (rc) {
        sd_error_at(err, NULL, NULL, "text");
        return rc;
    }
    sd_nodes_cond_extra ex[3] = {{"aesthetic_score", sd_value_float(sd_value_as_float(in[0]))},
                   {"width", sd_value_int(sd_value_as_int(in[1]))},
                   {"height", sd_value_int(sd_value_as_int(in[2]))}};
    return sd_nodes_text_cond(cond, pooled, ex, 3, &out[0], err);
}

static const sd_input_def refiner_inputs[] = {
    {.name = "ascore", .type = SD_T_FLOAT, .def = 6.0, .min = 0.0, .max = 1000.0, .step = 0.01,
     .has_range = 1},
    SIZE_INPUT("width", 1024),
    SIZE_INPUT("height", 1024),
    {.name = "text", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1, .dynamic_prompts = 1},
    {.name = "clip", .type = "CLIP"},
    {0}};

const sd_node_def sd_node_CLIPTextEncodeSDXLRefiner = {
    .version = 1,
    .class_type = "CLIPTextEncodeSDXLRefiner",
    .python_module = "comfy_extras.nodes_clip_sdxl",
    .category = "advanced/conditioning",
    .help = "SDXL refiner text encode with the aesthetic score and image size the "
            "refiner UNet is conditioned on.",
    .inputs = refiner_inputs,
    .outputs = conditioning_out,
    .flags = SD_NODE_TEXT_ENCODER | SD_NODE_V3,
    .run = refiner_run,
};
