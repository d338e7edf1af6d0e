/* clip_vision_nodes.c - CLIPVisionLoader and CLIPVisionEncode (nodes.py). */
#include "nodes/vision/vision_nodes.h"

#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"
#include "nodes/loaders/loaders.h"

static void free_clip_vision(void *p) { sd_clip_vision_free(p); }

const sd_handle_type sd_handle_clip_vision = {"CLIP_VISION", free_clip_vision};

sd_value *sd_nodes_clip_vision_output(const sd_clip_vision_output *o) {
    sd_value *d = sd_value_dict();
    if (!d) return NULL;
    struct { const char *key; sd_tensor *t; } items[] = {
        {"last_hidden_state", o->last_hidden_state},
        {"image_embeds", o->image_embeds},
        {"penultimate_hidden_states", o->penultimate},
    };
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        sd_value *v = sd_value_tensor(items[i].t);
        if (!v || sd_value_dict_set(d, items[i].key, v)) {
            sd_value_unref(d);
            return NULL;
        }
    }
    sd_value *none = sd_value_none();
    if (!none || sd_value_dict_set(d, "mm_projected", none)) {
        sd_value_unref(d);
        return NULL;
    }
    return d;
}

sd_status sd_nodes_in_clip_vision_output(sd_value *const *in, int i, const char *name,
                                         const char *key, sd_tensor **out, sd_error *err) {
    *out = in[i] ? sd_value_dict_tensor(in[i], key) : NULL;
    if (*out) return SD_OK;
    sd_error_set(err, SD_ERR_INVALID, "not a CLIP_VISION_OUTPUT (no '%s' tensor)", key);
    sd_error_at(err, NULL, NULL, name);
    return SD_ERR_INVALID;
}

/* ---- CLIPVisionLoader ------------------------------------------------------------- */

static sd_status list_clip_vision(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_CLIP_VISION, out, err);
}

static sd_status loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                            sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    char *path = NULL;
    sd_clip_vision *m = NULL;
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_CLIP_VISION, name ? name : "",
                                          &path, err);
    if (!rc && !ctx->env->backend)
        rc = sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
    if (!rc) rc = sd_clip_vision_load_file((sd_backend *)ctx->env->backend, path, &m, err);
    free(path);
    if (rc) {
        sd_error_at(err, NULL, NULL, "clip_name");
        return rc;
    }
    const sd_clip_vision_config *c = sd_clip_vision_get_config(m);
    sd_node_log(ctx, SD_LOG_INFO,
                "CLIP vision %s: %s config (%s keys), width %d, %d layers, %dpx in %dpx patches, "
                "projection %d",
                name, sd_clip_vision_kind_name(c->kind), c->openclip ? "OpenCLIP" : "HF", c->hidden,
                c->layers, c->image_size, c->patch, c->proj_dim);
    out[0] = sd_value_handle(&sd_handle_clip_vision, m);
    if (!out[0]) {
        sd_clip_vision_free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

static const sd_input_def loader_inputs[] = {
    {.name = "clip_name", .type = SD_T_COMBO, .options_fn = list_clip_vision,
     .file_folder = SD_FOLDER_CLIP_VISION, .file_probe = sd_clip_vision_probe_file},
    {0}};
static const sd_output_def loader_outputs[] = {{"CLIP_VISION", "CLIP_VISION"}, {0}};

static const sd_node_def node_loader = {
    .version = 1,
    .class_type = "CLIPVisionLoader",
    .python_module = "nodes",
    .display_name = "Load CLIP Vision",
    .category = "loaders",
    .help = "Loads a CLIP vision tower from models/clip_vision (.safetensors or a torch "
            "checkpoint): ViT-L/14 (clip_vision_l, 224 or 336 pixels), ViT-H/14 "
            "(CLIP-ViT-H-14-laion2B, SD2.1 unCLIP-h) and ViT-bigG/14 (clip_vision_g), in HF "
            "(vision_model.*) or open_clip (visual.*) keys, picked by layer count as ComfyUI "
            "does. SigLIP, DINOv2 and llava towers are refused.",
    .inputs = loader_inputs,
    .outputs = loader_outputs,
    .run = loader_run,
};

/* ---- CLIPVisionEncode ------------------------------------------------------------- */

static const char *const crop_modes[] = {"center", "none", NULL};

static sd_status encode_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                            sd_error *err) {
    sd_clip_vision *m;
    sd_status rc = sd_nodes_in_clip_vision(in, 0, "clip_vision", &m, err);
    if (rc) return rc;
    sd_tensor *image = sd_value_as_tensor(in[1]);
    if (!image || image->dtype != SD_F32 || image->ndim != 4 || image->shape[3] < 3) {
        sd_error_set(err, SD_ERR_INVALID, "image must be an IMAGE [B, H, W, C] with at least 3 "
                     "channels");
        sd_error_at(err, NULL, NULL, "image");
        return SD_ERR_INVALID;
    }
    const char *crop = sd_value_as_string(in[2]);
    int center = !crop || strcmp(crop, "center") == 0; /* ComfyUI: anything else is no crop */
    sd_clip_vision_output o = {0};
    sd_precision prev;
    rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err);
    if (!rc) {
        rc = sd_clip_vision_encode(m, image, center, &o, err);
        sd_nodes_precision_end(ctx, prev);
    }
    if (rc) {
        sd_error_at(err, NULL, NULL, "image");
        return rc;
    }
    out[0] = sd_nodes_clip_vision_output(&o);
    sd_clip_vision_output_free(&o);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def encode_inputs[] = {
    {.name = "clip_vision", .type = "CLIP_VISION"},
    {.name = "image", .type = "IMAGE"},
    {.name = "crop", .type = SD_T_COMBO, .options = crop_modes, .def_str = "center", .no_default = 1},
    {0}};
static const sd_output_def encode_outputs[] = {{"CLIP_VISION_OUTPUT", "CLIP_VISION_OUTPUT"}, {0}};

static const sd_node_def node_encode = {
    .version = 1,
    .class_type = "CLIPVisionEncode",
    .python_module = "nodes",
    .display_name = "CLIP Vision Encode",
    .category = "conditioning",
    .help = "Encodes images with a CLIP vision tower: clip_preprocess (crop center: the short "
            "side to the model's size, then the centre; none: stretched), an antialiased "
            "bicubic resize, 8-bit rounding, CLIP's mean/std; outputs image_embeds, "
            "last_hidden_state and penultimate_hidden_states. Runs in the text-encoder "
            "precision.",
    .inputs = encode_inputs,
    .outputs = encode_outputs,
    .flags = SD_NODE_TEXT_ENCODER,
    .run = encode_run,
};

const sd_node_def *const sd_nodes_vision[] = {&node_loader, &node_encode, NULL};
