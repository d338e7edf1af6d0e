/* controlnet_nodes.c - ControlNetLoader, ControlNetApply,
 * ControlNetApplyAdvanced (nodes.py semantics) and the sampler-side reader
 * of the "control" entries they attach. */
#include "controlnet_nodes.h"

#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "formats/torch_ckpt.h"
#include "models/checkpoint/model_paths.h"
#include "models/sd3/sd3_controlnet.h"
#include "nodes/loaders/loaders.h"

/* A CONTROL_NET value's payload: the ControlNet, owned by the loader's
 * value (owner NULL) or shared from it (owner: a reference to that value,
 * as ComfyUI's ControlNet.copy() shares its control_model), and the
 * SetUnionControlNetType setting (0 = none, else 1 + the type index). */
typedef struct cn_handle {
    sd_controlnet *cn;
    sd_value *owner;
    int union_type;
} cn_handle;

static void free_cn(void *p) {
    cn_handle *h = p;
    if (!h) return;
    if (h->owner) sd_value_unref(h->owner);
    else sd_controlnet_free(h->cn);
    free(h);
}
const sd_handle_type sd_handle_control_net = {"CONTROL_NET", free_cn};

sd_controlnet *sd_nodes_control_net_of(const sd_value *v) {
    cn_handle *h = v ? sd_value_as_handle(v, &sd_handle_control_net) : NULL;
    return h ? h->cn : NULL;
}

int sd_nodes_control_union_type(const sd_value *v) {
    cn_handle *h = v ? sd_value_as_handle(v, &sd_handle_control_net) : NULL;
    return h ? h->union_type : 0;
}

/* A new CONTROL_NET value over cn: owning it when owner is NULL (cn is
 * freed on failure then), else sharing it with owner's value. */
static sd_value *cn_value(sd_controlnet *cn, sd_value *owner, int union_type) {
    cn_handle *h = calloc(1, sizeof *h);
    if (!h) {
        if (!owner) sd_controlnet_free(cn);
        return NULL;
    }
    h->cn = cn;
    h->owner = owner ? sd_value_ref(owner) : NULL;
    h->union_type = union_type;
    sd_value *v = sd_value_handle(&sd_handle_control_net, h);
    if (!v) free_cn(h);
    return v;
}

/* ---- ControlNetLoader ---------------------------------------------------------- */

static sd_status list_controlnets(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_CONTROLNET, out, err);
}

/* Loads control_net_name (input `name_input` ... index in[i]); with a MODEL
 * (DiffControlNetLoader) a diff ControlNet is merged with its UNet first. */
static sd_status load_controlnet(sd_node_ctx *ctx, const char *name, sd_model_ref *model, sd_value **out,
                                 sd_error *err) {
    char *path = NULL;
    sd_st_file *f = NULL, *merged = NULL;
    sd_controlnet *cn = NULL;
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_CONTROLNET, name ? name : "", &path, err);
    if (!rc && !ctx->env->backend)
        rc = sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
    /* .safetensors, or a torch .pth read weights-only */
    if (!rc) rc = sd_torch_open_any(path, &f, err);
    int diff = !rc && model && sd_controlnet_is_diff(f);
    if (diff) {
        /* ComfyUI adds the model's diffusion_model.* weights where the keys
         * match: a model without a UNet matches none */
        const sd_ckpt_info *info = sd_checkpoint_info(model->ckpt);
        sd_unet *u = NULL;
        if (info->dmodel_kind == SD_DMODEL_UNET) {
            rc = sd_nodes_model_unet(model, &u, err);
            if (rc) sd_error_at(err, NULL, NULL, "model");
        }
        if (!rc && u) rc = sd_controlnet_diff_merge(f, u, &merged, err);
        if (!rc && !u) sd_node_log(ctx, SD_LOG_WARN, "diff ControlNet %s: the MODEL has no UNet to add", name);
    }
    if (!rc) rc = sd_controlnet_load((sd_backend *)ctx->env->backend, merged ? merged : f, SD_F32, &cn, err);
    sd_st_close(merged);
    sd_st_close(f);
    free(path);
    if (rc) {
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "control_net_name");
        return rc;
    }
    const sd_unet_config *c = sd_controlnet_config(cn);
    if (c)
        sd_node_log(ctx, SD_LOG_INFO, "ControlNet %s%s: %s, %d channels, context %d, %d outputs", name,
                    merged ? " (diff, merged with the model)" : "",
                    c->kind == SD_UNET_SDXL ? "SDXL" : c->kind == SD_UNET_SD2 ? "SD2" : "SD1", c->model_channels,
                    c->context_dim, sd_controlnet_n_outputs(cn));
    else {
        const sd_sd3_cn *m = sd_controlnet_mmdit(cn);
        static const char *const types[] = {"blur", "canny", "depth"};
        int t = sd_sd3_cn_control_type(m);
        if (sd_sd3_cn_is_sd35(m))
            sd_node_log(ctx, SD_LOG_INFO,
                        "ControlNet %s: SD3.5 (Stability's), %d blocks of %d, depth %d, control type %s, %d outputs",
                        name, sd_sd3_cn_n_blocks(m), sd_sd3_cn_config(m)->hidden_size, sd_sd3_cn_depth(m),
                        t >= 0 && t < 3 ? types[t] : "none", sd_sd3_cn_n_outputs(m));
        else
            sd_node_log(ctx, SD_LOG_INFO, "ControlNet %s: SD3, %d joint blocks of %d, depth %d, %d outputs", name,
                        sd_sd3_cn_n_blocks(m), sd_sd3_cn_config(m)->hidden_size, sd_sd3_cn_depth(m),
                        sd_sd3_cn_n_outputs(m));
    }
    if (sd_controlnet_union_n_types(cn))
        sd_node_log(ctx, SD_LOG_INFO, "ControlNet %s is a Union ControlNet with %d control types", name,
                    sd_controlnet_union_n_types(cn));
    out[0] = cn_value(cn, NULL, 0);
    if (!out[0]) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

static sd_status loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return load_controlnet(ctx, sd_value_as_string(in[0]), NULL, out, err);
}

/* DiffControlNetLoader (nodes.py): comfy.controlnet.load_controlnet(path,
 * model). A normal ControlNet loads as ControlNetLoader loads it. */
static sd_status diff_loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    return load_controlnet(ctx, sd_value_as_string(in[1]), m, out, err);
}

static const sd_input_def loader_inputs[] = {
    {.name = "control_net_name", .type = SD_T_COMBO, .options_fn = list_controlnets,
     .file_folder = SD_FOLDER_CONTROLNET, .file_probe = sd_controlnet_probe_file},
    {0}};
static const sd_output_def loader_outputs[] = {{"CONTROL_NET", "CONTROL_NET"}, {0}};

static const sd_node_def node_loader = {
    .version = 1,
    .class_type = "ControlNetLoader",
    .python_module = "nodes",
    .display_name = "Load ControlNet Model",
    .category = "loaders",
    .help = "Loads an SD1/SDXL ControlNet (original control_model.* or diffusers layout) or an SD3 "
            "ControlNet (InstantX's diffusers layout; its hint image is VAE-encoded: apply it with "
            "a VAE).",
    .inputs = loader_inputs,
    .outputs = loader_outputs,
    .run = loader_run,
};

static const sd_input_def diff_loader_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "control_net_name", .type = SD_T_COMBO, .options_fn = list_controlnets,
     .file_folder = SD_FOLDER_CONTROLNET, .file_probe = sd_controlnet_probe_file},
    {0}};

static const sd_node_def node_diff_loader = {
    .version = 1,
    .class_type = "DiffControlNetLoader",
    .python_module = "nodes",
    .display_name = "Load ControlNet Model (diff)",
    .category = "loaders",
    .help = "Loads a ControlNet as ControlNetLoader does; a diff ControlNet (control_model.* with a "
            "'difference' tensor) gets the MODEL's UNet weights added first, as ComfyUI does.",
    .inputs = diff_loader_inputs,
    .outputs = loader_outputs,
    .run = diff_loader_run,
};

/* ---- applying ----------------------------------------------------------------------- */

/* A new link dict (one reference). vae (may be NULL) is kept for the
 * ControlNets whose hint is a latent (set_cond_hint keeps it only when the
 * ControlNet has a latent_format); extra (may be NULL) is the mask channel
 * of an inpainting ControlNet (extra_concat). */
static sd_value *make_link(sd_value *cn, sd_value *image, double strength, double start, double end,
                           sd_value *vae, sd_value *extra) {
    sd_value *d = sd_value_dict();
    if (!d) return NULL;
    int bad = 0;
    if (vae && sd_value_kind_of(vae) != SD_VAL_NONE &&
        sd_controlnet_kind_of(sd_nodes_control_net_of(cn)) == SD_CONTROLNET_MMDIT)
        bad |= sd_value_dict_set(d, "vae", sd_value_ref(vae));
    bad |= sd_value_dict_set(d, "control_net", sd_value_ref(cn));
    bad |= sd_value_dict_set(d, "image", sd_value_ref(image));
    bad |= sd_value_dict_set(d, "strength", sd_value_float(strength));
    bad |= sd_value_dict_set(d, "start_percent", sd_value_float(start));
    bad |= sd_value_dict_set(d, "end_percent", sd_value_float(end));
    if (extra) bad |= sd_value_dict_set(d, "extra_concat", sd_value_ref(extra));
    if (bad) {
        sd_value_unref(d);
        return NULL;
    }
    return d;
}

/* Chains made by one node run, keyed by the chain they extend (NULL = none):
 * ComfyUI gives positive and negative entries that had the same previous
 * ControlNet the same new ControlNet object, which lets the sampler run cond
 * and uncond as one batch (calc_cond_batch batches entries whose control is
 * the same object). Borrowed pointers; the chains are owned by the entries. */
#define CHAIN_MEMO 16
typedef struct chain_memo {
    int n;
    const sd_value *prev[CHAIN_MEMO];
    sd_value *chain[CHAIN_MEMO];
} chain_memo;

/* conditioning with `link` appended to every entry's chain. */
static sd_status apply(const sd_value *cond, sd_value *link, int to_uncond, const char *input,
                       chain_memo *memo, sd_value **out, sd_error *err) {
    *out = NULL;
    if (sd_value_kind_of(cond) != SD_VAL_LIST) {
        sd_error_set(err, SD_ERR_INVALID, "input '%s' must be a CONDITIONING list", input);
        sd_error_at(err, NULL, NULL, input);
        return SD_ERR_INVALID;
    }
    sd_value *res = sd_value_list();
    if (!res) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sd_value_list_len(cond); i++) {
        const sd_value *e = sd_value_list_get(cond, i);
        if (sd_value_kind_of(e) != SD_VAL_DICT) {
            sd_value_unref(res);
            sd_error_set(err, SD_ERR_INVALID, "input '%s': entry %zu is not a dict", input, i);
            sd_error_at(err, NULL, NULL, input);
            return SD_ERR_INVALID;
        }
        sd_value *d = sd_value_shallow_copy(e);
        const sd_value *prev = sd_value_dict_get(e, "control");
        if (prev && sd_value_kind_of(prev) != SD_VAL_LIST) prev = NULL;
        sd_value *chain = NULL;
        for (int m = 0; memo && m < memo->n && !chain; m++)
            if (memo->prev[m] == prev) chain = sd_value_ref(memo->chain[m]);
        int bad = !d;
        if (!bad && !chain) {
            chain = prev ? sd_value_shallow_copy(prev) : sd_value_list();
            bad = !chain || sd_value_list_append(chain, sd_value_ref(link));
            if (!bad && memo && memo->n < CHAIN_MEMO) {
                memo->prev[memo->n] = prev;
                memo->chain[memo->n++] = chain;
            }
        }
        if (!bad) {
            bad = sd_value_dict_set(d, "control", chain);
            chain = NULL;
        }
        if (!bad) bad = sd_value_dict_set(d, "control_apply_to_uncond", sd_value_bool(to_uncond));
        if (!bad) {
            bad = sd_value_list_append(res, d);
            d = NULL;
        }
        sd_value_unref(chain);
        sd_value_unref(d);
        if (bad) {
            sd_value_unref(res);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    *out = res;
    return SD_OK;
}

static sd_status check_inputs(sd_value *cn, sd_value *image, sd_error *err) {
    if (!sd_nodes_control_net_of(cn)) {
        sd_error_set(err, SD_ERR_INVALID, "input 'control_net' must be a CONTROL_NET");
        sd_error_at(err, NULL, NULL, "control_net");
        return SD_ERR_INVALID;
    }
    sd_tensor *t = sd_value_as_tensor(image);
    int ch = sd_controlnet_hint_channels(sd_nodes_control_net_of(cn));
    if (!t || t->dtype != SD_F32 || t->ndim != 4 || t->shape[3] != ch) {
        sd_error_set(err, SD_ERR_INVALID, "input 'image' must be an IMAGE [B, H, W, %d] for this ControlNet",
                     ch);
        sd_error_at(err, NULL, NULL, "image");
        return SD_ERR_INVALID;
    }
    return SD_OK;
}

/* ControlNetApply: conditioning, control_net, image, strength */
static sd_status apply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    double strength = sd_value_as_float(in[3]);
    if (strength == 0.0) {
        out[0] = sd_value_ref(in[0]);
        return SD_OK;
    }
    sd_status rc = check_inputs(in[1], in[2], err);
    if (rc) return rc;
    sd_value *link = make_link(in[1], in[2], strength, 0.0, 1.0, NULL, NULL);
    if (!link) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    rc = apply(in[0], link, 1, "conditioning", NULL, &out[0], err);
    sd_value_unref(link);
    return rc;
}

/* ControlNetApplyAdvanced (nodes.py) and ControlNetApplySD3
 * (comfy_extras/nodes_sd3.py, the same with the VAE required): positive,
 * negative, control_net, image, strength, start_percent, end_percent, vae
 * (NULL when absent), extra_concat (NULL but from
 * ControlNetInpaintingAliMamaApply). */
static sd_status apply_adv(sd_value *const *io, sd_value *vae, sd_value *extra, sd_value **out, sd_error *err) {
    double strength = sd_value_as_float(io[4]);
    double start = sd_value_as_float(io[5]), end = sd_value_as_float(io[6]);
    if (strength == 0.0) {
        out[0] = sd_value_ref(io[0]);
        out[1] = sd_value_ref(io[1]);
        return SD_OK;
    }
    sd_status rc = check_inputs(io[2], io[3], err);
    if (rc) return rc;
    if (start > end) {
        sd_error_set(err, SD_ERR_INVALID, "start_percent %g is after end_percent %g", start, end);
        sd_error_at(err, NULL, NULL, "start_percent");
        return SD_ERR_INVALID;
    }
    sd_value *link = make_link(io[2], io[3], strength, start, end, vae, extra);
    if (!link) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    chain_memo memo = {0};
    rc = apply(io[0], link, 0, "positive", &memo, &out[0], err);
    if (!rc) rc = apply(io[1], link, 0, "negative", &memo, &out[1], err);
    sd_value_unref(link);
    return rc;
}

static sd_status adv_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return apply_adv(in, in[7], NULL, out, err);
}

/* ControlNetApplySD3: positive, negative, control_net, vae, image, strength,
 * start_percent, end_percent */
static sd_status sd3_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    if (!sd_value_as_handle(in[3], &sd_handle_vae)) {
        sd_error_set(err, SD_ERR_INVALID, "input 'vae' must be a VAE");
        sd_error_at(err, NULL, NULL, "vae");
        return SD_ERR_INVALID;
    }
    sd_value *io[7] = {in[0], in[1], in[2], in[4], in[5], in[6], in[7]};
    return apply_adv(io, in[3], NULL, out, err);
}

/* ControlNetInpaintingAliMamaApply (comfy_extras/nodes_controlnet.py):
 * positive, negative, control_net, vae, image, mask, strength,
 * start_percent, end_percent. For an inpainting ControlNet (concat_mask)
 * the image is masked and 1 - mask becomes the hint's mask channel
 * (sd_controlnet_inpaint_inputs); any other ControlNet is applied as
 * ControlNetApplyAdvanced with the VAE, the mask unused, as ComfyUI does. */
static sd_status alimama_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_controlnet *cn = sd_nodes_control_net_of(in[2]);
    if (!cn) {
        sd_error_set(err, SD_ERR_INVALID, "input 'control_net' must be a CONTROL_NET");
        sd_error_at(err, NULL, NULL, "control_net");
        return SD_ERR_INVALID;
    }
    if (!sd_value_as_handle(in[3], &sd_handle_vae)) {
        sd_error_set(err, SD_ERR_INVALID, "input 'vae' must be a VAE");
        sd_error_at(err, NULL, NULL, "vae");
        return SD_ERR_INVALID;
    }
    sd_value *io[7] = {in[0], in[1], in[2], in[4], in[6], in[7], in[8]};
    if (!sd_controlnet_concat_mask(cn)) return apply_adv(io, in[3], NULL, out, err);
    sd_status rc = check_inputs(in[2], in[4], err);
    if (rc) return rc;
    sd_tensor *mask = sd_value_as_tensor(in[5]);
    if (!mask) {
        sd_error_set(err, SD_ERR_INVALID, "input 'mask' must be a MASK");
        sd_error_at(err, NULL, NULL, "mask");
        return SD_ERR_INVALID;
    }
    sd_tensor *img = NULL, *inv = NULL;
    rc = sd_controlnet_inpaint_inputs(sd_value_as_tensor(in[4]), mask, &img, &inv, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, "mask");
        return rc;
    }
    sd_value *image = sd_value_tensor(img), *extra = sd_value_tensor(inv);
    sd_tensor_unref(img), sd_tensor_unref(inv);
    if (!image || !extra) {
        sd_value_unref(image), sd_value_unref(extra);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    io[3] = image;
    rc = apply_adv(io, in[3], extra, out, err);
    sd_value_unref(image), sd_value_unref(extra);
    return rc;
}

static const sd_input_def apply_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "image", .type = "IMAGE"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01,
     .has_range = 1},
    {0}};
static const sd_output_def apply_outputs[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

static const sd_node_def node_apply = {
    .version = 1,
    .class_type = "ControlNetApply",
    .python_module = "nodes",
    .display_name = "Apply ControlNet (OLD)",
    .category = "conditioning/controlnet",
    .help = "Deprecated: attaches a ControlNet with a hint image to the conditioning "
            "(also used for the negative prompt).",
    .inputs = apply_inputs,
    .outputs = apply_outputs,
    .flags = SD_NODE_DEPRECATED,
    .run = apply_run,
};

static const sd_input_def adv_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "image", .type = "IMAGE"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01,
     .has_range = 1},
    {.name = "start_percent", .type = SD_T_FLOAT, .def = 0.0, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {.name = "end_percent", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {.name = "vae", .type = "VAE", .optional = 1},
    {0}};
static const sd_output_def adv_outputs[] = {{"positive", "CONDITIONING"},
                                            {"negative", "CONDITIONING"},
                                            {0}};

static const sd_node_def node_adv = {
    .version = 1,
    .class_type = "ControlNetApplyAdvanced",
    .python_module = "nodes",
    .display_name = "Apply ControlNet",
    .category = "conditioning/controlnet",
    .help = "Attaches a ControlNet with a hint image to the positive and negative "
            "conditioning, active between start_percent and end_percent of sampling.",
    .inputs = adv_inputs,
    .outputs = adv_outputs,
    .run = adv_run,
};

/* ---- SetUnionControlNetType (comfy_extras/nodes_controlnet.py) ---------------------- */

static sd_status list_union_types(const sd_env *env, sd_value **out, sd_error *err) {
    (void)env;
    sd_value *l = sd_value_list();
    int bad = !l || sd_value_list_append(l, sd_value_string("auto"));
    for (int i = 0; !bad && sd_controlnet_union_types[i]; i++)
        bad = sd_value_list_append(l, sd_value_string(sd_controlnet_union_types[i]));
    if (bad) {
        sd_value_unref(l);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = l;
    return SD_OK;
}

/* A copy of the CONTROL_NET with control_type [n] ("auto": []). The
 * ControlNet is shared; a type a Union ControlNet lacks (or any type on
 * another ControlNet) is not an error here: ComfyUI raises the first at
 * sampling and ignores the second, and so does sdflow. */
static sd_status union_type_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    cn_handle *h = sd_value_as_handle(in[0], &sd_handle_control_net);
    if (!h) {
        sd_error_set(err, SD_ERR_INVALID, "input 'control_net' must be a CONTROL_NET");
        sd_error_at(err, NULL, NULL, "control_net");
        return SD_ERR_INVALID;
    }
    const char *type = sd_value_as_string(in[1]);
    int n = sd_controlnet_union_type(type);
    if (n < 0 && (!type || strcmp(type, "auto") != 0)) {
        sd_error_set(err, SD_ERR_INVALID, "unknown Union control type '%s'", type ? type : "");
        sd_error_at(err, NULL, NULL, "type");
        return SD_ERR_INVALID;
    }
    out[0] = cn_value(h->cn, h->owner ? h->owner : in[0], n + 1);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def union_type_inputs[] = {
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "type", .type = SD_T_COMBO, .options_fn = list_union_types},
    {0}};

static const sd_node_def node_union_type = {
    .version = 1,
    .class_type = "SetUnionControlNetType",
    .python_module = "comfy_extras.nodes_controlnet",
    .category = "conditioning/controlnet",
    .flags = SD_NODE_V3,
    .help = "Sets the control type a Union ControlNet (xinsir controlnet-union-sdxl-1.0, ProMax) is "
            "told its hint is; \"auto\" sets none. Other ControlNets ignore it.",
    .inputs = union_type_inputs,
    .outputs = loader_outputs,
    .run = union_type_run,
};

static const sd_input_def sd3_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "vae", .type = "VAE"},
    {.name = "image", .type = "IMAGE"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01,
     .has_range = 1},
    {.name = "start_percent", .type = SD_T_FLOAT, .def = 0.0, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {.name = "end_percent", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {0}};

static const sd_input_def alimama_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "vae", .type = "VAE"},
    {.name = "image", .type = "IMAGE"},
    {.name = "mask", .type = "MASK"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01,
     .has_range = 1},
    {.name = "start_percent", .type = SD_T_FLOAT, .def = 0.0, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {.name = "end_percent", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {0}};

static const sd_node_def node_alimama = {
    .version = 1,
    .class_type = "ControlNetInpaintingAliMamaApply",
    .python_module = "comfy_extras.nodes_controlnet",
    .category = "conditioning/controlnet",
    .flags = SD_NODE_V3,
    .help = "Applies an inpainting ControlNet (AliMama's SD3-Controlnet-Inpainting: 17 hint channels) "
            "with the VAE: the image is blanked where the mask is set and 1 - mask joins the hint "
            "latent as its last channel. Any other ControlNet is applied as by ControlNetApplyAdvanced "
            "with the VAE (the mask unused), as ComfyUI does. Flux inpainting ControlNets are refused "
            "by ControlNetLoader.",
    .inputs = alimama_inputs,
    .outputs = adv_outputs,
    .run = alimama_run,
};

static const sd_node_def node_sd3 = {
    .version = 1,
    .class_type = "ControlNetApplySD3",
    .python_module = "comfy_extras.nodes_sd3",
    .display_name = "Apply Controlnet with VAE",
    .category = "conditioning/controlnet",
    .help = "ControlNetApplyAdvanced with the VAE required: an SD3 ControlNet's hint image is "
            "VAE-encoded (at the latent size) before the ControlNet sees it.",
    .inputs = sd3_inputs,
    .outputs = adv_outputs,
    .flags = SD_NODE_DEPRECATED | SD_NODE_V3,
    .run = sd3_run,
};

/* ---- the sampler side -------------------------------------------------------------- */

sd_status sd_nodes_control_links(const sd_value *entry, sd_control_link **links, int *n,
                                 sd_error *err) {
    *links = NULL;
    *n = 0;
    const sd_value *chain = entry ? sd_value_dict_get(entry, "control") : NULL;
    if (!chain || sd_value_kind_of(chain) == SD_VAL_NONE) return SD_OK;
    if (sd_value_kind_of(chain) != SD_VAL_LIST)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'control' is not a list");
    size_t len = sd_value_list_len(chain);
    if (!len) return SD_OK;
    sd_control_link *l = calloc(len, sizeof *l);
    if (!l) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) {
        const sd_value *d = sd_value_list_get(chain, i);
        sd_controlnet *cn = sd_nodes_control_net_of(sd_value_dict_get(d, "control_net"));
        sd_tensor *img = sd_value_dict_tensor(d, "image");
        const sd_value *s = sd_value_dict_get(d, "strength"), *a = sd_value_dict_get(d, "start_percent"),
                       *b = sd_value_dict_get(d, "end_percent");
        if (!cn || !img || !s || !a || !b) {
            free(l);
            return sd_error_set(err, SD_ERR_INVALID, "conditioning control link %zu is malformed", i);
        }
        l[i] = (sd_control_link){cn, img, sd_value_as_float(s), sd_value_as_float(a), sd_value_as_float(b),
                                 sd_nodes_control_union_type(sd_value_dict_get(d, "control_net")), NULL, d,
                                 sd_value_dict_tensor(d, "extra_concat")};
        sd_value *vae = sd_value_dict_get(d, "vae");
        if (vae && sd_controlnet_kind_of(cn) == SD_CONTROLNET_MMDIT) {
            sd_vae_ref *r = sd_value_as_handle(vae, &sd_handle_vae);
            sd_status rc = r ? sd_checkpoint_vae(r->ckpt, &l[i].vae, err)
                             : sd_error_set(err, SD_ERR_INVALID, "conditioning control link %zu: 'vae' is not a VAE", i);
            if (rc) {
                free(l);
                return rc;
            }
        }
    }
    *links = l;
    *n = (int)len;
    return SD_OK;
}

sd_status sd_nodes_control_eval(const sd_value *entry, const sd_control_call *call,
                                sd_control_residuals *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    sd_control_link *links = NULL;
    int n = 0;
    sd_status rc = sd_nodes_control_links(entry, &links, &n, err);
    if (rc || !n) return rc;
    rc = sd_control_chain_run(links, n, call, out, err);
    free(links);
    return rc;
}

/* ---- registration ---------------------------------------------------------------- */

extern const sd_node_def sd_node_Canny;

const sd_node_def *const sd_nodes_controlnet[] = {&node_loader, &node_diff_loader, &node_apply, &node_adv,
                                                  &node_sd3, &sd_node_Canny, &node_union_type,
                                                  &node_alimama, NULL};

sd_status sd_nodes_controlnet_register(sd_error *err) {
    sd_status rc = sd_registry_add(sd_nodes_controlnet, err);
    if (!rc) rc = sd_registry_alias("ControlNet", "ControlNetApplyAdvanced", err);
    return rc;
}
