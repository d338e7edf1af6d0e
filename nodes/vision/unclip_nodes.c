/* unclip_nodes.c - unCLIPCheckpointLoader and unCLIPConditioning (nodes.py).
 *
 * unCLIPCheckpointLoader is comfy.sd.load_checkpoint_guess_config with
 * output_clipvision=True: MODEL, CLIP and VAE as CheckpointLoaderSimple
 * gives them, and the CLIP vision tower an unCLIP checkpoint keeps under
 * embedder.model.visual. ComfyUI loads that tower only for a model whose
 * config has a clip_vision_prefix (SD2.1 unCLIP here) and otherwise hands
 * out None, which fails later in whatever node uses it; sdflow hands out a
 * CLIP_VISION that says so (sd_handle_clip_vision_absent), and that node's
 * error names the loader and the file.
 *
 * unCLIPConditioning appends {"clip_vision_output", "strength",
 * "noise_augmentation"} to every entry's "unclip_conditioning" list
 * (node_helpers.conditioning_set_values(append=True)); strength 0 returns
 * the conditioning as it came. The sampler turns the list into the unCLIP
 * UNet's ADM vector (nodes/sampling/sampling.h sd_cond_unclip); other
 * models ignore it, as their ComfyUI model_base does. */
#include "nodes/vision/vision_nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/loaders/loaders.h"

static void free_absent(void *p) { free(p); }

const sd_handle_type sd_handle_clip_vision_absent = {"CLIP_VISION", free_absent};

sd_status sd_nodes_in_clip_vision(sd_value *const *in, int i, const char *name, sd_clip_vision **out,
                                  sd_error *err) {
    *out = in[i] ? sd_value_as_handle(in[i], &sd_handle_clip_vision) : NULL;
    if (*out) return SD_OK;
    const char *why = in[i] ? sd_value_as_handle(in[i], &sd_handle_clip_vision_absent) : NULL;
    if (why) sd_error_set(err, SD_ERR_INVALID, "%s", why);
    else sd_error_set(err, SD_ERR_INVALID, "not a CLIP_VISION");
    sd_error_at(err, NULL, NULL, name);
    return SD_ERR_INVALID;
}

/* ---- unCLIPCheckpointLoader ------------------------------------------------------ */

static sd_status list_checkpoints(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_CHECKPOINTS, out, err);
}

static sd_status require_unet(const char *path, const sd_ckpt_info *info, sd_error *err) {
    if (info->has_unet) return SD_OK;
    return sd_error_set(err, SD_ERR_UNSUPPORTED,
                        "%s is not a checkpoint: no diffusion model (model.diffusion_model.*) in it", path);
}

static sd_status ckpt_probe(const char *path, sd_error *err) {
    sd_ckpt_info info;
    sd_status rc = sd_checkpoint_probe(path, &info, err);
    return rc ? rc : require_unet(path, &info, err);
}

/* The CLIP_VISION output: the tower of an unCLIP checkpoint, else the
 * marker saying why there is none. */
static sd_status clip_vision_of(sd_node_ctx *ctx, sd_checkpoint *c, const char *name, sd_value **out,
                                sd_error *err) {
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    if (info->unclip && info->has_clip_vision) {
        if (!ctx->env->backend) return sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
        sd_clip_vision *m = NULL;
        sd_status rc = sd_clip_vision_load_file_prefix((sd_backend *)ctx->env->backend, sd_checkpoint_path(c),
                                                       SD_CKPT_CLIP_VISION_PREFIX, &m, err);
        if (rc) return rc;
        const sd_clip_vision_config *cv = sd_clip_vision_get_config(m);
        sd_node_log(ctx, SD_LOG_INFO, "unCLIP checkpoint %s: CLIP vision %s (width %d, %d layers, projection %d)",
                    name, sd_clip_vision_kind_name(cv->kind), cv->hidden, cv->layers, cv->proj_dim);
        *out = sd_value_handle(&sd_handle_clip_vision, m);
        if (!*out) sd_clip_vision_free(m);
    } else {
        char *why = malloc(1024);
        if (why)
            snprintf(why, 1024,
                     info->unclip ? "the unCLIP checkpoint '%s' (unCLIPCheckpointLoader's ckpt_name) has no CLIP "
                                    "vision tower (no " SD_CKPT_CLIP_VISION_PREFIX "* keys); ComfyUI's CLIP_VISION "
                                    "is None for it: load one with CLIPVisionLoader"
                                  : "'%s' (unCLIPCheckpointLoader's ckpt_name) is not an unCLIP checkpoint, so it "
                                    "gives no CLIP vision model (ComfyUI's CLIP_VISION is None for it): load one "
                                    "with CLIPVisionLoader",
                     name);
        sd_node_log(ctx, SD_LOG_WARN, "%s", why ? why : "no CLIP vision model in the checkpoint");
        *out = why ? sd_value_handle(&sd_handle_clip_vision_absent, why) : NULL;
        if (!*out) free(why);
    }
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    sd_checkpoint *c = NULL;
    sd_status rc = sd_nodes_open_model(ctx, SD_FOLDER_CHECKPOINTS, name, "ckpt_name", &c, err);
    if (rc) return rc;
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    if (!(rc = require_unet(sd_checkpoint_path(c), info, err))) {
        if (info->random_weights)
            sd_node_log(ctx, SD_LOG_WARN, "%s has RANDOM weights (made by sdflow synth): images will be noise",
                        name);
        rc = clip_vision_of(ctx, c, name, &out[3], err);
    }
    if (rc) {
        sd_error_at(err, NULL, NULL, "ckpt_name");
        sd_checkpoint_unref(c);
        return rc;
    }
    sd_node_log(ctx, SD_LOG_INFO, "checkpoint %s: %s%s%s", name, sd_ckpt_family_name(info->family),
                info->unclip ? " unCLIP" : "", info->prediction == SD_PRED_V ? " v-prediction" : "");
    out[0] = sd_nodes_model_value(c);
    out[1] = sd_nodes_clip_value(c, 0);
    out[2] = sd_nodes_vae_value(c);
    sd_checkpoint_unref(c);
    if (!out[0] || !out[1] || !out[2]) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

static const sd_input_def loader_inputs[] = {
    {.name = "ckpt_name", .type = SD_T_COMBO, .options_fn = list_checkpoints,
     .file_folder = SD_FOLDER_CHECKPOINTS, .file_probe = ckpt_probe},
    {0}};
static const sd_output_def loader_outputs[] = {
    {"MODEL", "MODEL"}, {"CLIP", "CLIP"}, {"VAE", "VAE"}, {"CLIP_VISION", "CLIP_VISION"}, {0}};

static const sd_node_def node_loader = {
    .version = 1,
    .class_type = "unCLIPCheckpointLoader",
    .python_module = "nodes",
    .category = "loaders",
    .help = "Loads a checkpoint as CheckpointLoaderSimple does, plus the CLIP vision tower an SD2.1 unCLIP "
            "checkpoint (sd21-unclip-h / -l) keeps under embedder.model.visual.; the MODEL then builds its "
            "ADM from unCLIPConditioning. For any other checkpoint the CLIP_VISION output is ComfyUI's None: "
            "a node that uses it fails, naming the file.",
    .inputs = loader_inputs,
    .outputs = loader_outputs,
    .run = loader_run,
};

/* ---- unCLIPConditioning --------------------------------------------------------------- */

/* d's "unclip_conditioning" with `item` appended (a new list). */
static int append_unclip(sd_value *d, const void *arg) {
    sd_value *item = (sd_value *)arg;
    const sd_value *old = sd_value_dict_get(d, "unclip_conditioning");
    sd_value *list = sd_value_list();
    if (!list) return 1;
    if (old && sd_value_kind_of(old) == SD_VAL_LIST)
        for (size_t i = 0; i < sd_value_list_len(old); i++)
            if (sd_value_list_append(list, sd_value_ref(sd_value_list_get(old, i)))) {
                sd_value_unref(list);
                return 1;
            }
    if (sd_value_list_append(list, sd_value_ref(item))) {
        sd_value_unref(list);
        return 1;
    }
    return sd_value_dict_set(d, "unclip_conditioning", list) != 0;
}

static int set_value(sd_value *d, const char *key, sd_value *v) {
    return !v || sd_value_dict_set(d, key, v) != 0;
}

static sd_status cond_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_value *conds;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &conds, err);
    if (rc) return rc;
    sd_tensor *embeds;
    if ((rc = sd_nodes_in_clip_vision_output(in, 1, "clip_vision_output", "image_embeds", &embeds, err)))
        return rc;
    if (embeds->dtype != SD_F32 || embeds->ndim != 2 || embeds->shape[0] < 1) {
        sd_error_set(err, SD_ERR_INVALID, "image_embeds must be F32 [N, P]");
        sd_error_at(err, NULL, NULL, "clip_vision_output");
        return SD_ERR_INVALID;
    }
    const double strength = sd_value_as_float(in[2]);
    if (strength == 0) { /* ComfyUI returns the conditioning as it came */
        out[0] = sd_value_ref(conds);
        return SD_OK;
    }
    sd_value *item = sd_value_dict();
    if (!item || set_value(item, "clip_vision_output", sd_value_ref(in[1])) ||
        set_value(item, "strength", sd_value_float(strength)) ||
        set_value(item, "noise_augmentation", sd_value_float(sd_value_as_float(in[3])))) {
        sd_value_unref(item);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    rc = sd_nodes_conditioning_map(conds, append_unclip, item, &out[0], err);
    sd_value_unref(item);
    return rc;
}

static const sd_input_def cond_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "clip_vision_output", .type = "CLIP_VISION_OUTPUT"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = -10.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {.name = "noise_augmentation", .type = SD_T_FLOAT, .def = 0.0, .min = 0.0, .max = 1.0, .step = 0.01,
     .has_range = 1},
    {0}};
static const sd_output_def cond_outputs[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

static const sd_node_def node_cond = {
    .version = 1,
    .class_type = "unCLIPConditioning",
    .python_module = "nodes",
    .category = "conditioning",
    .help = "Adds a CLIP vision output (each of its images), a strength and a noise augmentation to the "
            "conditioning's unclip_conditioning list. An SD2.1 unCLIP model turns the list into its ADM input: "
            "each image embedding noised to level round(999 x noise_augmentation) (the noise from the sampling "
            "seed - 10, as ComfyUI's), with that level's embedding, times strength; several are summed and "
            "noised again at 0.05. Other models ignore it, as ComfyUI's.",
    .inputs = cond_inputs,
    .outputs = cond_outputs,
    .run = cond_run,
};

const sd_node_def *const sd_nodes_unclip[] = {&node_loader, &node_cond, NULL};
