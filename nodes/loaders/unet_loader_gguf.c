/* unet_loader_gguf.c - ComfyUI-GGUF's UnetLoaderGGUF and
 * UnetLoaderGGUFAdvanced (city96/ComfyUI-GGUF nodes.py): a GGUF diffusion
 * model from diffusion_models/ (or unet/), only .gguf files listed.
 *
 * The file's architecture and names are read as ComfyUI-GGUF's loader reads
 * them (models/checkpoint/gguf_model.h); the model is detected from its keys
 * as UNETLoader's files are, as ComfyUI detects the state dict ComfyUI-GGUF
 * hands it: a Flux DiT (arch flux, bare BFL keys), an SD3 / SD3.5 MMDiT
 * (arch sd3, joint_blocks.N), Z-Image's NextDiT (arch lumina2, the arch
 * ComfyUI-GGUF's converter gives every Lumina 2 style model), or an SD UNet.
 * Quantized weights
 * stay quantized in the file's mapping and are widened per op with
 * ComfyUI-GGUF's arithmetic (core/quant.h).
 * UnetLoaderGGUFAdvanced:
 *   dequant_dtype  the arithmetic of the Linear layers' widening: default
 *                  and float16 (float16, ComfyUI-GGUF's default), float32,
 *                  bfloat16, target (the compute precision of the run:
 *                  float32 unless --precision bf16 / f16);
 *   patch_dtype    the dtype LoRA patches are computed in on quantized
 *                  weights; sdflow always patches them in float32 (the
 *                  default's arithmetic, models/lora/lora.h
 *                  sd_lora_dit_view); other values are accepted so that
 *                  workflows run, without their lower-precision patching;
 *   patch_on_device  where ComfyUI keeps LoRA patches (GPU or CPU memory):
 *                  no effect on results, accepted.
 * ComfyUI-GGUF stores dequant_dtype on a class shared by every GGUF model
 * of the process; here it belongs to the model this node loads. */
#include <string.h>

#include "formats/gguf.h"
#include "loaders.h"
#include "models/checkpoint/model_paths.h"

static const char *const gguf_exts[] = {".gguf", NULL};
static const char *const dq_types[] = {"default", "target", "float32", "float16", "bfloat16", NULL};

static sd_status list_gguf(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_env_list_files(env, SD_FOLDER_DIFFUSION_MODELS, gguf_exts, out, err);
}

/* A GGUF file holding a diffusion model (the checks UnetLoaderGGUF's loading
 * makes, without loading anything). */
static sd_status require_gguf_dmodel(const char *path, const sd_ckpt_info *info, sd_error *err) {
    if (!sd_gguf_is_gguf(path))
        return sd_error_set(err, SD_ERR_FORMAT, "%s is not a GGUF file (no GGUF magic): use UNETLoader", path);
    if (info && !info->has_unet)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s holds no diffusion model%s", path,
                            info->has_text_encoder ? ": it is a text encoder; use a GGUF CLIP loader" : "");
    return SD_OK;
}

static sd_status gguf_unet_probe(const char *path, sd_error *err) {
    sd_status rc = require_gguf_dmodel(path, NULL, err);
    if (rc) return rc;
    sd_ckpt_info info;
    rc = sd_checkpoint_probe(path, &info, err);
    return rc ? rc : require_gguf_dmodel(path, &info, err);
}

static int dq_of(const sd_env *env, const char *s, sd_dequant_math *m) {
    if (strcmp(s, "default") == 0 || strcmp(s, "float16") == 0) *m = SD_DQ_F16;
    else if (strcmp(s, "float32") == 0) *m = SD_DQ_F32;
    else if (strcmp(s, "bfloat16") == 0) *m = SD_DQ_BF16;
    else if (strcmp(s, "target") == 0) {
        const char *p = sd_env_node_precision(env, 0);
        *m = strcmp(p, "bf16") == 0 ? SD_DQ_BF16 : strcmp(p, "f16") == 0 ? SD_DQ_F16 : SD_DQ_F32;
    } else return 0;
    return 1;
}

static sd_status load(sd_node_ctx *ctx, const char *name, sd_dequant_math dq, sd_value **out, sd_error *err) {
    sd_checkpoint *c = NULL;
    sd_status rc = sd_nodes_open_model_dq(ctx, SD_FOLDER_DIFFUSION_MODELS, name, "unet_name", SD_F32, dq, &c, err);
    if (rc) return rc;
    if ((rc = require_gguf_dmodel(sd_checkpoint_path(c), sd_checkpoint_info(c), err))) {
        sd_error_at(err, NULL, NULL, "unet_name");
        sd_checkpoint_unref(c);
        return rc;
    }
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    if (info->family == SD_CKPT_FLUX)
        sd_node_log(ctx, SD_LOG_INFO, "GGUF diffusion model %s: flux %s, hidden %d, %d+%d blocks", name,
                    info->flux.guidance_embed ? "dev" : "schnell", info->flux.hidden_size, info->flux.depth,
                    info->flux.depth_single_blocks);
    else if (info->family == SD_CKPT_ZIMAGE)
        sd_node_log(ctx, SD_LOG_INFO, "GGUF diffusion model %s: zimage NextDiT, dim %d", name, info->zimage.dim);
    else if (info->family == SD_CKPT_SD3)
        sd_node_log(ctx, SD_LOG_INFO, "GGUF diffusion model %s: sd3 MMDiT, hidden %d, %d blocks", name,
                    info->sd3.hidden_size, info->sd3.depth);
    else
        sd_node_log(ctx, SD_LOG_INFO, "GGUF diffusion model %s: %s UNet", name, sd_ckpt_family_name(info->family));
    out[0] = sd_nodes_model_value(c);
    sd_checkpoint_unref(c);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status run_basic(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return load(ctx, sd_value_as_string(in[0]), SD_DQ_F16, out, err);
}

static sd_status run_advanced(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *names[2] = {"dequant_dtype", "patch_dtype"};
    sd_dequant_math dq = SD_DQ_F16, ignored;
    for (int i = 0; i < 2; i++) {
        if (!dq_of(ctx->env, sd_value_as_string(in[1 + i]), i ? &ignored : &dq)) {
            sd_error_set(err, SD_ERR_INVALID, "unknown %s '%s'", names[i], sd_value_as_string(in[1 + i]));
            sd_error_at(err, NULL, NULL, names[i]);
            return SD_ERR_INVALID;
        }
    }
    return load(ctx, sd_value_as_string(in[0]), dq, out, err);
}

static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};

static const sd_input_def basic_inputs[] = {
    {.name = "unet_name", .type = SD_T_COMBO, .options_fn = list_gguf,
     .file_folder = SD_FOLDER_DIFFUSION_MODELS, .file_probe = gguf_unet_probe},
    {0}};

const sd_node_def sd_node_UnetLoaderGGUF = {
    .version = 1,
    .class_type = "UnetLoaderGGUF",
    .python_module = "custom_nodes.ComfyUI-GGUF",
    .display_name = "Unet Loader (GGUF)",
    .category = "bootleg",
    .help = "ComfyUI-GGUF's Unet loader: a GGUF diffusion model (Flux, SD3 / SD3.5, Z-Image) "
            "from diffusion_models/ or unet/, its quantized weights kept quantized and widened "
            "per op as ComfyUI-GGUF does.",
    .inputs = basic_inputs,
    .outputs = model_out,
    .run = run_basic,
};

static const sd_input_def advanced_inputs[] = {
    {.name = "unet_name", .type = SD_T_COMBO, .options_fn = list_gguf,
     .file_folder = SD_FOLDER_DIFFUSION_MODELS, .file_probe = gguf_unet_probe},
    {.name = "dequant_dtype", .type = SD_T_COMBO, .options = dq_types, .def_str = "default"},
    {.name = "patch_dtype", .type = SD_T_COMBO, .options = dq_types, .def_str = "default"},
    {.name = "patch_on_device", .type = SD_T_BOOLEAN, .def = 0},
    {0}};

const sd_node_def sd_node_UnetLoaderGGUFAdvanced = {
    .version = 1,
    .class_type = "UnetLoaderGGUFAdvanced",
    .python_module = "custom_nodes.ComfyUI-GGUF",
    .display_name = "Unet Loader (GGUF/Advanced)",
    .category = "bootleg",
    .help = "UnetLoaderGGUF with ComfyUI-GGUF's dequant_dtype (the arithmetic of the Linear "
            "weights' widening: default/float16, float32, bfloat16, target); patch_dtype and "
            "patch_on_device only concern LoRA patches (computed in float32 whatever patch_dtype says).",
    .inputs = advanced_inputs,
    .outputs = model_out,
    .run = run_advanced,
};
