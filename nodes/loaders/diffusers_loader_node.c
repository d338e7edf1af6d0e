/* diffusers_loader_node.c - DiffusersLoader (nodes.py; comfy/diffusers_load.py):
 * a diffusers pipeline folder from models/diffusers/ as MODEL, CLIP, VAE.
 *
 * The combo lists every folder under models/diffusers (and the comfyui_dir
 * fallback) holding a model_index.json, relative to the diffusers folder
 * ("." for one at its root), as ComfyUI's os.walk does. Loading takes, in
 * ComfyUI's order of preference, the first file that exists of
 *   unet/ and vae/          diffusion_pytorch_model.fp16.safetensors,
 *                           diffusion_pytorch_model.safetensors, the same .bin
 *   text_encoder/ and       model.fp16.safetensors, model.safetensors,
 *   text_encoder_2/         pytorch_model.fp16.bin, pytorch_model.bin
 * and opens each as a model file: the UNet in the diffusers layout is
 * renamed to ComfyUI's names (models/unet/unet.h, the unet_to_diffusers
 * table), the VAE read in its diffusers names (models/vae/vae.h), the text
 * encoders as standalone CLIP files: one (CLIP-L: SD1, CLIP-H: SD2) or a
 * CLIP-L and a CLIP-G (SDXL), as comfy.sd.load_clip sorts them. A folder
 * without unet/, vae/ or text_encoder/ files is an error naming what is
 * missing. model_index.json and the config.json files are not read (ComfyUI
 * reads none of them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loaders.h"
#include "models/checkpoint/model_paths.h"

static const char *const unet_files[] = {"diffusion_pytorch_model.fp16.safetensors",
                                         "diffusion_pytorch_model.safetensors",
                                         "diffusion_pytorch_model.fp16.bin", "diffusion_pytorch_model.bin", NULL};
static const char *const te_files[] = {"model.fp16.safetensors", "model.safetensors", "pytorch_model.fp16.bin",
                                       "pytorch_model.bin", NULL};

static sd_status list_folders(const sd_env *env, sd_value **out, sd_error *err) {
    static const char *const index[] = {"model_index.json", NULL};
    sd_value *files = NULL;
    sd_status rc = sd_env_list_files(env, SD_FOLDER_DIFFUSERS, index, &files, err);
    if (rc) return rc;
    sd_value *l = sd_value_list();
    int bad = !l;
    for (size_t i = 0; !bad && i < sd_value_list_len(files); i++) {
        const char *f = sd_value_as_string(sd_value_list_get(files, i));
        const char *slash = f ? strrchr(f, '/') : NULL;
        const char *base = slash ? slash + 1 : f;
        if (!base || strcmp(base, "model_index.json") != 0) continue;
        char dir[4096];
        if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - f), f);
        else snprintf(dir, sizeof dir, ".");
        bad = sd_value_list_append(l, sd_value_string(dir));
    }
    sd_value_unref(files);
    if (bad) {
        sd_value_unref(l);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = l;
    return SD_OK;
}

/* The first of names that exists in <folder>/<sub>/ as a name relative to
 * the diffusers folder (into rel); 0 when none does. */
static int first_file(const sd_env *env, const char *folder, const char *sub, const char *const *names, char *rel,
                      size_t n) {
    for (int i = 0; names[i]; i++) {
        snprintf(rel, n, "%s/%s/%s", folder, sub, names[i]);
        char *path = NULL;
        sd_error e;
        if (sd_env_resolve(env, SD_FOLDER_DIFFUSERS, rel, &path, &e) == SD_OK) {
            free(path);
            return 1;
        }
    }
    return 0;
}

static sd_status missing(const char *folder, const char *sub, const char *const *names, sd_error *err) {
    sd_error_set(err, SD_ERR_NOT_FOUND, "diffusers folder '%s' has no %s/%s (nor the other names ComfyUI takes)",
                 folder, sub, names[1]);
    sd_error_at(err, NULL, NULL, "model_path");
    return SD_ERR_NOT_FOUND;
}

static sd_status run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *folder = sd_value_as_string(in[0]);
    if (!folder || !*folder) {
        sd_error_set(err, SD_ERR_INVALID, "model_path is empty");
        sd_error_at(err, NULL, NULL, "model_path");
        return SD_ERR_INVALID;
    }
    char index[4200], unet[4300], vae[4300], te[2][4300];
    snprintf(index, sizeof index, "%s/model_index.json", folder);
    char *p = NULL;
    sd_status rc = sd_env_resolve(ctx->env, SD_FOLDER_DIFFUSERS, index, &p, err);
    free(p);
    if (rc) {
        sd_error_at(err, NULL, NULL, "model_path");
        return rc;
    }
    if (!first_file(ctx->env, folder, "unet", unet_files, unet, sizeof unet))
        return missing(folder, "unet", unet_files, err);
    if (!first_file(ctx->env, folder, "vae", unet_files, vae, sizeof vae))
        return missing(folder, "vae", unet_files, err);
    if (!first_file(ctx->env, folder, "text_encoder", te_files, te[0], sizeof te[0]))
        return missing(folder, "text_encoder", te_files, err);
    int n_te = 1 + first_file(ctx->env, folder, "text_encoder_2", te_files, te[1], sizeof te[1]);

    sd_checkpoint *cu = NULL, *cv = NULL, *ct[2] = {NULL, NULL};
    rc = sd_nodes_open_model(ctx, SD_FOLDER_DIFFUSERS, unet, "model_path", &cu, err);
    if (!rc && !sd_checkpoint_info(cu)->has_unet)
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s holds no UNet", unet);
    if (!rc) rc = sd_nodes_open_model(ctx, SD_FOLDER_DIFFUSERS, vae, "model_path", &cv, err);
    if (!rc && !sd_checkpoint_info(cv)->has_vae) rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s holds no VAE", vae);
    for (int i = 0; !rc && i < n_te; i++) {
        rc = sd_nodes_open_model(ctx, SD_FOLDER_DIFFUSERS, te[i], "model_path", &ct[i], err);
        if (!rc && !sd_checkpoint_info(ct[i])->has_text_encoder)
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s holds no text encoder", te[i]);
    }
    if (!rc && n_te == 2) {
        /* SDXLClipModel: a CLIP-L and a CLIP-G, in either folder */
        sd_te_kind k0 = sd_checkpoint_info(ct[0])->te_kind, k1 = sd_checkpoint_info(ct[1])->te_kind;
        if (!((k0 == SD_TE_SD1 && k1 == SD_TE_SDXL_REFINER) || (k1 == SD_TE_SD1 && k0 == SD_TE_SDXL_REFINER)))
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                              "diffusers folder '%s': text_encoder and text_encoder_2 must be a CLIP-L and a "
                              "CLIP-G (SDXL); other pairs belong to families sdflow does not load this way",
                              folder);
    } else if (!rc) {
        sd_te_kind k = sd_checkpoint_info(ct[0])->te_kind;
        if (k != SD_TE_SD1 && k != SD_TE_SD2 && k != SD_TE_SDXL_REFINER)
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "diffusers folder '%s': text_encoder is not a CLIP", folder);
    }
    if (rc) {
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "model_path");
    } else {
        out[0] = sd_nodes_model_value(cu);
        out[1] = n_te == 2 ? sd_nodes_clip_value_files(ct, 2, SD_TE_SDXL) : sd_nodes_clip_value(ct[0], 0);
        out[2] = sd_nodes_vae_value(cv);
        if (!out[0] || !out[1] || !out[2]) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    sd_checkpoint_unref(cu);
    sd_checkpoint_unref(cv);
    sd_checkpoint_unref(ct[0]);
    sd_checkpoint_unref(ct[1]);
    return rc;
}

static const sd_input_def inputs[] = {
    {.name = "model_path", .type = SD_T_COMBO, .options_fn = list_folders},
    {0}};
static const sd_output_def outputs[] = {{"MODEL", "MODEL"}, {"CLIP", "CLIP"}, {"VAE", "VAE"}, {0}};

const sd_node_def sd_node_DiffusersLoader = {
    .version = 1,
    .class_type = "DiffusersLoader",
    .python_module = "nodes",
    .category = "advanced/loaders/deprecated",
    .help = "Loads a diffusers pipeline folder (models/diffusers/<name> with model_index.json): the UNet, "
            "the text encoder(s) and the VAE, each converted to ComfyUI's layout.",
    .inputs = inputs,
    .outputs = outputs,
    .run = run,
};
