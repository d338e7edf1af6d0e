/* unet_loader_node.c - UNETLoader ("Load Diffusion Model"): a diffusion
 * model file from diffusion_models/ (or the older unet/ folder), with
 * ComfyUI's weight_dtype choices:
 *   default          weights as stored (BF16/F16/F32/fp8, read through the
 *                    file mapping, widened per op);
 *   fp8_e4m3fn       every tensor converted to float8_e4m3fn at load, with
 *                    torch's rounding (core/dtype.h: round to nearest even,
 *                    no saturation), as ComfyUI's dtype=torch.float8_e4m3fn;
 *   fp8_e4m3fn_fast  the same fp8 weights: ComfyUI's fp8 matrix products need
 *                    a GPU with fp8 compute and otherwise (the CPU) compute
 *                    from the fp8 weights as fp8_e4m3fn does; sdflow always
 *                    does the latter;
 *   fp8_e5m2         float8_e5m2, likewise.
 * The file may be a bare model (Flux's BFL keys, an SD UNet) or a whole
 * checkpoint, whose model.diffusion_model.* is used (ComfyUI strips that
 * prefix too). The weights load when a sampler first uses the MODEL. */
#include <string.h>

#include "loaders.h"
#include "models/checkpoint/model_paths.h"

static const char *const dtypes[] = {"default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2", NULL};

static sd_status list_models(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_DIFFUSION_MODELS, out, err);
}

static sd_status require_dmodel(const char *path, const sd_ckpt_info *info, sd_error *err) {
    if (info->has_unet) return SD_OK;
    return sd_error_set(err, SD_ERR_UNSUPPORTED,
                        "%s holds no diffusion model (no Flux DiT, Z-Image NextDiT or UNet keys, bare or under "
                        "model.diffusion_model.)%s",
                        path, info->has_vae || info->has_text_encoder
                                  ? ": it is a VAE or text encoder file; use VAELoader or a CLIP loader"
                                  : "");
}

static sd_status unet_probe(const char *path, sd_error *err) {
    sd_ckpt_info info;
    sd_status rc = sd_checkpoint_probe(path, &info, err);
    return rc ? rc : require_dmodel(path, &info, err);
}

static sd_status unet_loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *name = sd_value_as_string(in[0]), *wd = sd_value_as_string(in[1]);
    sd_dtype dt = SD_F32;
    if (strcmp(wd, "fp8_e4m3fn") == 0 || strcmp(wd, "fp8_e4m3fn_fast") == 0) dt = SD_F8_E4M3;
    else if (strcmp(wd, "fp8_e5m2") == 0) dt = SD_F8_E5M2;
    else if (strcmp(wd, "default") != 0) {
        sd_error_set(err, SD_ERR_INVALID, "unknown weight_dtype '%s'", wd);
        sd_error_at(err, NULL, NULL, "weight_dtype");
        return SD_ERR_INVALID;
    }
    sd_checkpoint *c = NULL;
    sd_status rc = sd_nodes_open_model_ex(ctx, SD_FOLDER_DIFFUSION_MODELS, name, "unet_name", dt, &c, err);
    if (rc) return rc;
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    if ((rc = require_dmodel(sd_checkpoint_path(c), info, err))) {
        sd_error_at(err, NULL, NULL, "unet_name");
        sd_checkpoint_unref(c);
        return rc;
    }
    if (info->random_weights)
        sd_node_log(ctx, SD_LOG_WARN, "%s has RANDOM weights (made by sdflow synth): images will be noise",
                    name);
    if (info->family == SD_CKPT_FLUX)
        sd_node_log(ctx, SD_LOG_INFO, "diffusion model %s: flux %s, hidden %d, %d+%d blocks, weights %s", name,
                    info->flux.guidance_embed ? "dev" : "schnell", info->flux.hidden_size, info->flux.depth,
                    info->flux.depth_single_blocks, wd);
    else if (info->family == SD_CKPT_ZIMAGE)
        sd_node_log(ctx, SD_LOG_INFO, "diffusion model %s: zimage NextDiT, dim %d, %d+%d layers, weights %s",
                    name, info->zimage.dim, info->zimage.n_refiner_layers, info->zimage.n_layers, wd);
    else if (info->family == SD_CKPT_SD3)
        sd_node_log(ctx, SD_LOG_INFO, "diffusion model %s: sd3 MMDiT, hidden %d, %d joint blocks (%d MMDiT-X), weights %s",
                    name, info->sd3.hidden_size, info->sd3.depth, info->sd3.n_self_attn, wd);
    else
        sd_node_log(ctx, SD_LOG_INFO, "diffusion model %s: %s UNet, %d channels, weights %s", name,
                    sd_ckpt_family_name(info->family), info->unet.model_channels, wd);
    out[0] = sd_nodes_model_value(c);
    sd_checkpoint_unref(c);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def unet_loader_inputs[] = {
    {.name = "unet_name", .type = SD_T_COMBO, .options_fn = list_models,
     .file_folder = SD_FOLDER_DIFFUSION_MODELS, .file_probe = unet_probe},
    {.name = "weight_dtype", .type = SD_T_COMBO, .options = dtypes},
    {0}};
static const sd_output_def unet_loader_outputs[] = {{"MODEL", "MODEL"}, {0}};

const sd_node_def sd_node_UNETLoader = {
    .version = 1,
    .class_type = "UNETLoader",
    .python_module = "nodes",
    .display_name = "Load Diffusion Model",
    .category = "advanced/loaders",
    .help = "Loads a diffusion model file (Flux DiT, SD3 MMDiT or SD UNet, bare or in a checkpoint) from "
            "diffusion_models/ or unet/; weight_dtype converts its weights to fp8 at load.",
    .inputs = unet_loader_inputs,
    .outputs = unet_loader_outputs,
    .run = unet_loader_run,
};
