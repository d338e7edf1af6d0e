/* hypernet_node.c - HypernetworkLoader (comfy_extras/nodes_hypernetwork.py):
 * an A1111 hypernetwork from models/hypernetworks (models/unet/hypernet.h)
 * appended to a clone of the MODEL's UNet patches, applied to the key and
 * value inputs of every transformer block's attn1 and attn2 (ComfyUI sets
 * it as both attn1_patch and attn2_patch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"
#include "models/unet/hypernet.h"
#include "nodes/loaders/loaders.h"

static sd_status list_hypernetworks(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_HYPERNETWORKS, out, err);
}

/* "320, 640, 768, 1280" */
static void widths_text(const sd_hypernet *h, char *buf, size_t size) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < sd_hypernet_widths(h) && k + 24 < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)sd_hypernet_width_at(h, i));
}

static sd_status hypernet_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const char *name = sd_value_as_string(in[1]);
    double strength = sd_value_as_float(in[2]);
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "HypernetworkLoader patches a UNet's attention (SD1, SD2, SDXL); %s has none",
                            sd_checkpoint_path(m->ckpt));
    if (!ctx->env->backend) return sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
    char *path = NULL;
    sd_hypernet *hn = NULL;
    rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_HYPERNETWORKS, name ? name : "", &path, err);
    if (!rc) rc = sd_hypernet_load((sd_backend *)ctx->env->backend, path, &hn, err);
    free(path);
    if (rc) {
        sd_error_at(err, NULL, NULL, "hypernetwork_name");
        return rc;
    }
    if (sd_hypernet_widths(hn) == 0) {
        /* ComfyUI's patch then has no width to act on: the model as it was */
        sd_node_log(ctx, SD_LOG_WARN,
                    "hypernetwork %s has no integer widths (a .safetensors file, or not A1111's layout): it "
                    "changes nothing, as in ComfyUI",
                    name);
        sd_hypernet_unref(hn);
        out[0] = sd_value_ref(in[0]);
        return SD_OK;
    }
    char ws[256];
    widths_text(hn, ws, sizeof ws);
    sd_node_log(ctx, SD_LOG_INFO, "hypernetwork %s: widths %s, activation %s, strength %g", name, ws,
                sd_hn_act_name(sd_hypernet_activation(hn)), strength);
    sd_unet_patch pt;
    memset(&pt, 0, sizeof pt);
    pt.kind = SD_UNET_PATCH_HYPERNET;
    pt.block_id = -1;
    pt.index = -1;
    pt.p[0] = strength;
    pt.hn = hn;
    sd_model_patches p = m->patches;
    rc = sd_unet_patches_add(&p.unet, &pt, err);
    /* the new MODEL value takes its own reference on every hypernetwork */
    if (!rc && !(out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p)))
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_hypernet_unref(hn);
    return rc;
}

static const sd_input_def hypernet_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "hypernetwork_name", .type = SD_T_COMBO, .options_fn = list_hypernetworks,
     .file_folder = SD_FOLDER_HYPERNETWORKS, .file_probe = sd_hypernet_probe_file},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = -10.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {0}};
static const sd_output_def hypernet_outputs[] = {{"MODEL", "MODEL"}, {0}};

static const sd_node_def node_hypernet = {
    .version = 1,
    .class_type = "HypernetworkLoader",
    .python_module = "comfy_extras.nodes_hypernetwork",
    .category = "loaders",
    .flags = SD_NODE_V3,
    .help = "An A1111 hypernetwork (.pt) from models/hypernetworks: at every transformer block of the UNet "
            "(SD1, SD2, SDXL), the key and value inputs of the self- and cross-attention whose width the file "
            "has go through its MLPs, k + mlp(k) * strength. Dropout layers are not applied (ComfyUI leaves "
            "them in training mode: random); an unknown activation_func is an error (ComfyUI ignores the "
            "file). A .safetensors file changes nothing, as in ComfyUI. docs/models.md \"Hypernetworks\".",
    .inputs = hypernet_inputs,
    .outputs = hypernet_outputs,
    .run = hypernet_run,
};

const sd_node_def *const sd_nodes_model_hypernet[] = {&node_hypernet, NULL};
