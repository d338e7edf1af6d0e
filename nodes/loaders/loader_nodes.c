/* loader_nodes.c - CheckpointLoaderSimple (alias LoadCheckpoint), CheckpointLoader
 * (deprecated, with a .yaml config), VAELoader.
 *
 * Running a loader opens and inspects the file (architecture detection, no
 * weights read); the parts load when a node first uses them. Validation runs
 * the same detection (file_probe), so a file the loader would refuse stops
 * the workflow before any node runs. */
#include "loaders.h"

#include <stdlib.h>

#include "formats/ldm_config.h"
#include "models/checkpoint/model_paths.h"

static sd_status list_checkpoints(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_CHECKPOINTS, out, err);
}
static sd_status list_vaes(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_VAE, out, err);
}

/* ---- CheckpointLoaderSimple ------------------------------------------------------- */

/* What the loader needs beyond detection: a diffusion model. Shared by the
 * node and its validation probe, so both refuse with the same words. */
static sd_status require_unet(const char *path, const sd_ckpt_info *info, sd_error *err) {
    if (info->has_unet) return SD_OK;
    return sd_error_set(err, SD_ERR_UNSUPPORTED,
                        "%s is not a checkpoint: no diffusion model (model.diffusion_model.*) in it",
                        path);
}

/* sd_input_def.file_probe: detection on names and shapes, no weights read. */
static sd_status ckpt_probe(const char *path, sd_error *err) {
    sd_ckpt_info info;
    sd_status rc = sd_checkpoint_probe(path, &info, err);
    return rc ? rc : require_unet(path, &info, err);
}

static sd_status ckpt_loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    sd_checkpoint *c = NULL;
    sd_status rc = sd_nodes_open_model(ctx, SD_FOLDER_CHECKPOINTS, name, "ckpt_name", &c, err);
    if (rc) return rc;
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    if ((rc = require_unet(sd_checkpoint_path(c), info, err))) {
        sd_error_at(err, NULL, NULL, "ckpt_name");
        sd_checkpoint_unref(c);
        return rc;
    }
    if (info->random_weights)
        sd_node_log(ctx, SD_LOG_WARN,
                    "%s has RANDOM weights (made by sdflow synth): images will be noise",
                    name);
    if (info->dmodel_kind == SD_DMODEL_FLUX)
        sd_node_log(ctx, SD_LOG_INFO, "checkpoint %s: flux %s, DiT width %d, %d + %d blocks", name,
                    info->flux.guidance_embed ? "dev" : "schnell", info->flux.hidden_size, info->flux.depth,
                    info->flux.depth_single_blocks);
    else if (info->dmodel_kind == SD_DMODEL_ZIMAGE)
        sd_node_log(ctx, SD_LOG_INFO, "checkpoint %s: zimage NextDiT, dim %d, %d+%d layers", name,
                    info->zimage.dim, info->zimage.n_refiner_layers, info->zimage.n_layers);
    else if (info->dmodel_kind == SD_DMODEL_MMDIT)
        sd_node_log(ctx, SD_LOG_INFO, "checkpoint %s: sd3 MMDiT, width %d, %d joint blocks (%d MMDiT-X)", name,
                    info->sd3.hidden_size, info->sd3.depth, info->sd3.n_self_attn);
    else
        sd_node_log(ctx, SD_LOG_INFO, "checkpoint %s: %s%s%s, UNet %d channels", name,
                    sd_ckpt_family_name(info->family),
                    info->inpaint ? " inpainting" : info->ip2p ? " InstructPix2Pix" : "",
                    info->prediction == SD_PRED_V ? " v-prediction" : "", info->unet.model_channels);
    out[0] = sd_nodes_model_value(c);
    out[1] = sd_nodes_clip_value(c, 0);
    out[2] = sd_nodes_vae_value(c);
    sd_checkpoint_unref(c);
    if (!out[0] || !out[1] || !out[2]) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

static const sd_input_def ckpt_loader_inputs[] = {
    {.name = "ckpt_name", .type = SD_T_COMBO, .options_fn = list_checkpoints,
     .file_folder = SD_FOLDER_CHECKPOINTS, .file_probe = ckpt_probe,
     .tooltip = "The name of the checkpoint (model) to load."},
    {0}};
static const sd_output_def ckpt_loader_outputs[] = {
    {"MODEL", "MODEL"}, {"CLIP", "CLIP"}, {"VAE", "VAE"}, {0}};

const sd_node_def sd_node_CheckpointLoaderSimple = {
    .version = 1,
    .class_type = "CheckpointLoaderSimple",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("The model used for denoising latents.",
                                  "The CLIP model used for encoding text prompts.",
                                  "The VAE model used for encoding and decoding images to and from latent space."),
    .description = "Loads a diffusion model checkpoint, diffusion models are used to denoise latents.",
    .display_name = "Load Checkpoint",
    .category = "loaders",
    .help = "Loads a single-file .safetensors checkpoint (SD1.x, SDXL, Flux, SD3): the diffusion "
            "model, its text encoder and its VAE. Weights load when first used.",
    .inputs = ckpt_loader_inputs,
    .outputs = ckpt_loader_outputs,
    .run = ckpt_loader_run,
};

/* ---- CheckpointLoader (deprecated) --------------------------------------------------- */

/* ComfyUI's "configs" folder lists .yaml files only (folder_paths). */
static sd_status list_configs(const sd_env *env, sd_value **out, sd_error *err) {
    static const char *const exts[] = {".yaml", NULL};
    return sd_env_list_files(env, "configs", exts, out, err);
}

/* comfy.sd.load_checkpoint(config_path, ckpt_path): the checkpoint loads as
 * CheckpointLoaderSimple loads it (the weights decide the model, whatever
 * the config says); of the config only parameterization "v" (v-prediction
 * sampling on the model's discrete schedule) and cond_stage_config's
 * layer_idx (clip.clip_layer) are applied (formats/ldm_config.h). */
static sd_status ckpt_config_loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                        sd_error *err) {
    sd_status rc = ckpt_loader_run(ctx, &in[1], out, err);
    if (rc) {
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "ckpt_name");
        return rc;
    }
    const char *cname = sd_value_as_string(in[0]);
    char *path = NULL;
    sd_ldm_config cfg;
    rc = sd_model_paths_resolve(ctx->env, "configs", cname ? cname : "", &path, err);
    if (!rc) rc = sd_ldm_config_read(path, &cfg, err);
    free(path);
    sd_model_ref *m = rc ? NULL : sd_value_as_handle(out[0], &sd_handle_model);
    sd_clip_ref *c = rc ? NULL : sd_value_as_handle(out[1], &sd_handle_clip);
    if (!rc && cfg.v_prediction) {
        sd_model_patches p = m->patches;
        p.sampling_set = 1;
        p.sampling_base = SD_MS_DISCRETE;
        p.sampling = SD_PRED_V;
        p.zsnr = 0;
        sd_value *v = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
        if (!v) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else sd_value_unref(out[0]), out[0] = v;
    }
    if (!rc && cfg.has_layer_idx && cfg.layer_idx >= 0)
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                          "%s: layer_idx %d: only a layer counted from the end (negative, as "
                          "CLIPSetLastLayer's) is supported",
                          cname, cfg.layer_idx);
    if (!rc && cfg.has_layer_idx) {
        sd_value *v = sd_nodes_clip_value_like(c, cfg.layer_idx, c->loras);
        if (!v) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else sd_value_unref(out[1]), out[1] = v;
    }
    if (rc) {
        for (int i = 0; i < 3; i++) sd_value_unref(out[i]), out[i] = NULL;
        sd_error_at(err, NULL, NULL, "config_name");
        return rc;
    }
    sd_node_log(ctx, SD_LOG_INFO, "config %s:%s%s", cname, cfg.v_prediction ? " v-prediction" : "",
                cfg.has_layer_idx ? " CLIP layer set" : " nothing to apply");
    return SD_OK;
}

static const sd_input_def ckpt_config_loader_inputs[] = {
    {.name = "config_name", .type = SD_T_COMBO, .options_fn = list_configs, .file_folder = "configs"},
    {.name = "ckpt_name", .type = SD_T_COMBO, .options_fn = list_checkpoints,
     .file_folder = SD_FOLDER_CHECKPOINTS, .file_probe = ckpt_probe},
    {0}};

const sd_node_def sd_node_CheckpointLoader = {
    .version = 1,
    .class_type = "CheckpointLoader",
    .python_module = "nodes",
    .display_name = "Load Checkpoint With Config (DEPRECATED)",
    .category = "advanced/loaders",
    .flags = SD_NODE_DEPRECATED,
    .help = "Loads a checkpoint as CheckpointLoaderSimple does, then applies what ComfyUI still reads "
            "from the .yaml config in models/configs: parameterization \"v\" (v-prediction) and "
            "cond_stage_config's layer_idx (the CLIP's last layer). The rest of the config is ignored.",
    .inputs = ckpt_config_loader_inputs,
    .outputs = ckpt_loader_outputs,
    .run = ckpt_config_loader_run,
};

/* ---- VAELoader ------------------------------------------------------------------------ */

static sd_status require_vae(const char *path, const sd_ckpt_info *info, sd_error *err) {
    if (info->has_vae) return SD_OK;
    return sd_error_set(err, SD_ERR_UNSUPPORTED,
                        "%s holds no VAE (looked for decoder.conv_in.weight, with or without the "
                        "first_stage_model. prefix)",
                        path);
}

static sd_status vae_probe(const char *path, sd_error *err) {
    sd_ckpt_info info;
    sd_status rc = sd_checkpoint_probe(path, &info, err);
    return rc ? rc : require_vae(path, &info, err);
}

static sd_status vae_loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    sd_checkpoint *c = NULL;
    sd_status rc = sd_nodes_open_model(ctx, SD_FOLDER_VAE, name, "vae_name", &c, err);
    if (rc) return rc;
    if ((rc = require_vae(sd_checkpoint_path(c), sd_checkpoint_info(c), err))) {
        sd_error_at(err, NULL, NULL, "vae_name");
        sd_checkpoint_unref(c);
        return rc;
    }
    out[0] = sd_nodes_vae_value(c);
    sd_checkpoint_unref(c);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def vae_loader_inputs[] = {
    {.name = "vae_name", .type = SD_T_COMBO, .options_fn = list_vaes,
     .file_folder = SD_FOLDER_VAE, .file_probe = vae_probe},
    {0}};
static const sd_output_def vae_loader_outputs[] = {{"VAE", "VAE"}, {0}};

const sd_node_def sd_node_VAELoader = {
    .version = 1,
    .class_type = "VAELoader",
    .python_module = "nodes",
    .display_name = "Load VAE",
    .category = "loaders",
    .help = "Loads a standalone VAE file (.safetensors, or a .ckpt/.pt read weights-only; "
            "single-file key layout).",
    .inputs = vae_loader_inputs,
    .outputs = vae_loader_outputs,
    .run = vae_loader_run,
};

/* ---- registration ------------------------------------------------------------------ */

extern const sd_node_def sd_node_CLIPLoader, sd_node_DualCLIPLoader, sd_node_CLIPLoaderGGUF,
    sd_node_DualCLIPLoaderGGUF, sd_node_TripleCLIPLoader, sd_node_TripleCLIPLoaderGGUF; /* clip_loader_nodes.c */
extern const sd_node_def sd_node_UNETLoader; /* unet_loader_node.c */
extern const sd_node_def sd_node_DiffusersLoader; /* diffusers_loader_node.c */
extern const sd_node_def sd_node_UnetLoaderGGUF, sd_node_UnetLoaderGGUFAdvanced; /* unet_loader_gguf.c */

const sd_node_def *const sd_nodes_loaders[] = {&sd_node_CheckpointLoaderSimple, &sd_node_CheckpointLoader,
                                               &sd_node_VAELoader,
                                               &sd_node_CLIPLoader, &sd_node_DualCLIPLoader,
                                               &sd_node_UNETLoader, &sd_node_CLIPLoaderGGUF,
                                               &sd_node_DualCLIPLoaderGGUF, &sd_node_UnetLoaderGGUF,
                                               &sd_node_UnetLoaderGGUFAdvanced, &sd_node_TripleCLIPLoader,
                                               &sd_node_TripleCLIPLoaderGGUF, &sd_node_DiffusersLoader,
                                               NULL};

sd_status sd_nodes_loaders_register(sd_error *err) {
    sd_status rc = sd_registry_add(sd_nodes_loaders, err);
    if (!rc) rc = sd_registry_alias("LoadCheckpoint", "CheckpointLoaderSimple", err);
    return rc;
}
