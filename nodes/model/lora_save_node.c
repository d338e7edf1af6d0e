/* lora_save_node.c - LoraSave, "Extract and Save Lora"
 * (comfy_extras/nodes_lora_extract.py): a weight difference (ModelSubtract's
 * MODEL, CLIPSubtract's CLIP) written as a LoRA file, as calc_lora_model
 * writes it:
 *   standard   every weight of 2 or more dims -> <k>.lora_up.weight /
 *              <k>.lora_down.weight (sd_lora_extract: SVD cut to `rank`,
 *              factors clamped at their 0.99 quantile); 1-dim weights as
 *              <k>.diff only with bias_diff
 *   full_diff  every weight as <k>.diff (the difference itself)
 *   bias_diff  every bias as <k>.diff_b
 * all float16, keys "diffusion_model.<ldm key>" for the model and
 * "text_encoders.clip_l.transformer.<HF key>" for the text encoder, saved
 * under the output folder as <prefix>_<counter:05>_.safetensors without
 * metadata. A weight whose extraction fails (ComfyUI's bare except: a
 * [1, n, 1, 1] kernel, NaN) is left out with a warning. Neither input
 * given: nothing is written, as ComfyUI returns. The difference is the
 * MODEL's patched weights as its stack made them (nothing here subtracts:
 * ModelSubtract did). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "formats/safetensors.h"
#include "model_nodes.h"
#include "nodes/image/savepath.h"
#include "nodes/loaders/loaders.h"

typedef struct extract_walk {
    sd_node_ctx *ctx;
    sd_st_writer *w;
    const char *prefix; /* of the saved keys: "diffusion_model.", "text_encoders.clip_l.transformer." */
    int rank, full_diff, bias_diff;
    size_t skipped;
    sd_error *err;
    sd_status rc;
} extract_walk;

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/* Adds t converted to float16 as prefix + stem + suffix (takes nothing). */
static void add_half(extract_walk *x, const char *stem, size_t stem_len, const char *suffix,
                     const sd_tensor *t) {
    char name[640];
    snprintf(name, sizeof name, "%s%.*s%s", x->prefix, (int)stem_len, stem, suffix);
    sd_tensor *h = sd_tensor_to_dtype(t, SD_F16);
    if (!h) {
        x->rc = sd_error_set(x->err, SD_ERR_NOMEM, "out of memory saving %s", name);
        return;
    }
    x->rc = sd_st_writer_add(x->w, name, h, x->err);
    sd_tensor_unref(h);
}

static void extract_one(void *ud, const char *key, sd_bt **slot) {
    extract_walk *x = ud;
    if (x->rc || !slot || !*slot) return;
    int weight = ends_with(key, ".weight"), bias = ends_with(key, ".bias");
    if (!weight && !(bias && x->bias_diff)) return;
    sd_tensor *t = sd_bt_to_host(*slot);
    if (!t) {
        x->rc = sd_backend_take_error((*slot)->be, x->err);
        if (!x->rc) x->rc = sd_error_set(x->err, SD_ERR_NOMEM, "out of memory reading %s", key);
        return;
    }
    size_t stem = strlen(key) - (weight ? 7 : 5);
    if (bias) {
        add_half(x, key, stem, ".diff_b", t);
    } else if (x->full_diff) {
        add_half(x, key, stem, ".diff", t);
    } else if (t->ndim < 2) {
        if (x->bias_diff) add_half(x, key, stem, ".diff", t);
    } else {
        sd_tensor *up = NULL, *down = NULL;
        sd_error e;
        sd_error_clear(&e);
        sd_status rc = sd_lora_extract(t, x->rank, &up, &down, NULL, &e);
        if (rc == SD_ERR_NOMEM) {
            x->rc = sd_error_set(x->err, rc, "%s", e.msg);
        } else if (rc) {
            /* ComfyUI: "Could not generate lora weights for key ..." */
            sd_node_log(x->ctx, SD_LOG_WARN, "could not generate LoRA weights for %s%s: %s", x->prefix, key, e.msg);
            x->skipped++;
        } else {
            add_half(x, key, stem, ".lora_up.weight", up);
            if (!x->rc) add_half(x, key, stem, ".lora_down.weight", down);
        }
        sd_tensor_unref(up);
        sd_tensor_unref(down);
    }
    sd_tensor_unref(t);
}

static sd_status lora_save_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    if (!in[4] && !in[5]) return SD_OK; /* ComfyUI: nothing to save, nothing written */
    const char *prefix = sd_value_as_string(in[0]);
    int rank = (int)sd_value_as_int(in[1]);
    const char *type = sd_value_as_string(in[2]);
    int full_diff = type && strcmp(type, "full_diff") == 0;
    if (!type || (!full_diff && strcmp(type, "standard") != 0)) {
        sd_error_set(err, SD_ERR_INVALID, "lora_type must be standard or full_diff");
        sd_error_at(err, NULL, NULL, "lora_type");
        return SD_ERR_INVALID;
    }
    extract_walk x = {ctx, NULL, "", rank, full_diff, sd_value_as_bool(in[3]), 0, err, SD_OK};
    sd_unet *unet = NULL;
    sd_text_encoder *te = NULL;
    sd_status rc = SD_OK;
    if (in[4]) {
        sd_model_ref *m;
        rc = sd_nodes_in_model(in, 4, "model_diff", &m, err);
        if (!rc) {
            const sd_ckpt_info *info = sd_checkpoint_info(m->ckpt);
            if (info->family != SD_CKPT_SD1 && info->family != SD_CKPT_SD2 && info->family != SD_CKPT_SDXL) {
                sd_error_set(err, SD_ERR_UNSUPPORTED,
                             "extracting a LoRA from a non-UNet model (Flux, SD3, Z-Image) is not supported yet");
                rc = SD_ERR_UNSUPPORTED;
            }
        }
        if (!rc) rc = sd_nodes_model_unet(m, &unet, err);
        if (rc) {
            sd_error_at(err, NULL, NULL, "model_diff");
            return rc;
        }
    }
    const sd_clip *clips[2] = {NULL, NULL};
    if (in[5]) {
        sd_clip_ref *c;
        rc = sd_nodes_in_clip(in, 5, "text_encoder_diff", &c, err);
        if (!rc && (c->n_more > 0 || c->kind)) {
            sd_error_set(err, SD_ERR_UNSUPPORTED, "extracting a LoRA from a CLIP loaded as a %s text encoder is not "
                         "supported yet", sd_te_kind_name(c->kind));
            rc = SD_ERR_UNSUPPORTED;
        }
        if (!rc) rc = sd_nodes_clip_encoder(c, &te, err);
        if (!rc) {
            clips[0] = sd_text_encoder_clip_l(te);
            clips[1] = sd_text_encoder_clip_g(te);
            if (clips[1] || !clips[0]) {
                /* ComfyUI names OpenCLIP towers' q/k/v apart; sdflow holds
                 * them fused (in_proj), so the keys would not be ComfyUI's */
                sd_error_set(err, SD_ERR_UNSUPPORTED, "extracting a LoRA from an OpenCLIP text encoder (SD2, "
                             "SDXL) is not supported yet; CLIP-L (SD1) is");
                rc = SD_ERR_UNSUPPORTED;
            }
        }
        if (rc) {
            sd_error_at(err, NULL, NULL, "text_encoder_diff");
            return rc;
        }
    }
    sd_savepath sp;
    rc = sd_savepath_begin(ctx->env->output_dir, prefix ? prefix : "loras/ComfyUI_extracted_lora", 0, 0, &sp, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, "filename_prefix");
        return rc;
    }
    sd_savepath_claim_names(&sp, ctx->env, "output");
    x.w = sd_st_writer_new();
    if (!x.w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc && unet) {
        x.prefix = "diffusion_model.";
        sd_unet_param_each(unet, extract_one, &x);
        rc = x.rc;
    }
    if (!rc && clips[0]) {
        x.prefix = "text_encoders.clip_l.transformer.";
        sd_clip_param_each((sd_clip *)clips[0], extract_one, &x);
        rc = x.rc;
    }
    void *bytes = NULL;
    size_t size = 0;
    sd_outfile of;
    memset(&of, 0, sizeof of);
    char file[1024];
    if (!rc) rc = sd_st_writer_to_memory(x.w, &bytes, &size, err);
    if (!rc) rc = sd_outfile_create(&sp.dir, &of, err);
    if (!rc && fwrite(bytes, 1, size, of.f) != size) rc = sd_error_set(err, SD_ERR_IO, "%s: write failed", sp.folder);
    if (!rc) rc = sd_savepath_publish(&sp, &of, 0, "safetensors", file, sizeof file, err);
    char path[5200];
    if (!rc) snprintf(path, sizeof path, "%s/%s", sp.folder, file);
    /* the file for the cache's check and `run`'s list, no output for clients */
    if (!rc) rc = sd_save_ui_add(&ctx->ui, NULL, file, sp.subfolder, "output", path, of.sha256, err);
    if (!rc)
        sd_node_log(ctx, SD_LOG_INFO, "saved %s/%s%s", sp.folder, file,
                    x.skipped ? " (some weights left out, see the warnings)" : "");
    sd_outfile_discard(&of);
    free(bytes);
    sd_st_writer_free(x.w);
    sd_savepath_free(&sp);
    return rc;
}

static const char *const lora_types[] = {"standard", "full_diff", NULL};

static const sd_input_def lora_save_in[] = {
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "loras/ComfyUI_extracted_lora"},
    {.name = "rank", .type = SD_T_INT, .def = 8, .min = 1, .max = 4096, .step = 1, .has_range = 1},
    {.name = "lora_type", .type = SD_T_COMBO, .options = lora_types, .def_str = "standard", .no_default = 1},
    {.name = "bias_diff", .type = SD_T_BOOLEAN, .def = 1},
    {.name = "model_diff", .type = "MODEL", .optional = 1,
     .tooltip = "The ModelSubtract output to be converted to a lora."},
    {.name = "text_encoder_diff", .type = "CLIP", .optional = 1,
     .tooltip = "The CLIPSubtract output to be converted to a lora."},
    {0}};
static const sd_output_def no_outputs[] = {{0}};

static const sd_node_def node_lora_save = {
    .version = 1,
    .class_type = "LoraSave",
    .display_name = "Extract and Save Lora",
    .python_module = "comfy_extras.nodes_lora_extract",
    .category = "_for_testing",
    .hidden = SD_STRINGS("prompt", "extra_pnginfo"),
    .help = "Writes a weight difference (ModelSubtract / CLIPSubtract output) as a LoRA: per weight a "
            "rank-`rank` SVD (factors clamped at their 0.99 quantile) or, with full_diff, the difference "
            "itself; float16, <prefix>_<counter:05>_.safetensors under the output folder. SD1/SD2/SDXL "
            "UNets; text encoder: CLIP-L only.",
    .inputs = lora_save_in,
    .outputs = no_outputs,
    .flags = SD_NODE_OUTPUT | SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .run = lora_save_run,
};

const sd_node_def *const sd_nodes_lora_save[] = {&node_lora_save, NULL};
