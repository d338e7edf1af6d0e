/* model_save_nodes.c - ModelSave, CheckpointSave, CLIPSave and VAESave
 * (comfy_extras/nodes_model_merging.py): the MODEL / CLIP / VAE, as their
 * patch stacks made them (LoRAs, merges), saved as ComfyUI saves them:
 * safetensors under the output folder named by filename_prefix with
 * ComfyUI's counter ("checkpoints/ComfyUI_00001_.safetensors").
 *
 * ModelSave / CheckpointSave (comfy_extras save_checkpoint ->
 * comfy.sd.save_checkpoint -> model_base.state_dict_for_saving):
 *   weights  model.diffusion_model.* (UNet or Flux DiT); CheckpointSave adds
 *            the CLIP in the MODEL family's checkpoint layout (the
 *            supported_models process_clip_state_dict_for_saving):
 *              SD1  cond_stage_model.transformer.text_model.* (HF)
 *              SDXL conditioner.embedders.0.transformer.text_model.* (HF,
 *                   with position_ids = arange(77) as I64 [1, 77]) and
 *                   conditioner.embedders.1.model.* (OpenCLIP, logit_scale)
 *              SD2  cond_stage_model.model.* (OpenCLIP, logit_scale)
 *            the CLIP-L's text_projection and logit_scale left out; and the
 *            VAE as first_stage_model.* (LDM names);
 *   metadata modelspec.architecture / sai_model_spec / implementation /
 *            title (SDXL: "-v1-base", InstructPix2Pix "-v1-edit", the
 *            refiner "-v1-refiner"),
 *            modelspec.predict_key "epsilon" | "v" (UNet models; "v" also
 *            writes the empty "v_pred" tensor), prompt, one entry per
 *            extra_pnginfo key (as SaveImage).
 * CLIPSave: one file per text encoder, "<prefix>_clip_l" / "_clip_g" /
 *   "_clip_h" (each with its own counter), HF keys (text_model.*,
 *   text_projection.weight, logit_scale), metadata format "pt", prompt,
 *   extra_pnginfo.
 * VAESave: the VAE's LDM state dict (encoder.*, decoder.*, quant convs),
 *   metadata prompt, extra_pnginfo.
 * logit_scale is ComfyUI's: the source file's for an OpenCLIP tower whose
 * safetensors file has one, else its initial 4.6055 (a CLIP-L never loads
 * one). Each weight keeps the dtype sdflow holds it in (the file's, F32
 * where a patch touched it; ComfyUI saves the dtype it computes in, F32 on
 * the CPU), so the saved file loads back to the same numbers.
 * Memory: a file is built in memory before it is published (as SaveLatent),
 * about twice its size in F32. Not done: SD3 / Z-Image models and T5 /
 * Qwen text encoders (refused), ComfyUI's "ztsnr" / "edm_vpred" keys of
 * ModelSamplingDiscrete zsnr / ModelSamplingContinuousEDM patches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "formats/safetensors.h"
#include "model_nodes.h"
#include "models/flux/flux.h"
#include "models/text/clip.h"
#include "models/text/text_encode.h"
#include "models/vae/vae.h"
#include "nodes/image/savepath.h"
#include "nodes/loaders/loaders.h"

/* ComfyUI's SDClipModel.logit_scale before any file sets it. */
#define COMFY_LOGIT_SCALE 4.6055f

/* One safetensors file being assembled: weights go under `prefix`. */
typedef struct save_walk {
    sd_st_writer *w;
    const char *prefix;
    sd_error *err;
    sd_status rc;
} save_walk;

static sd_status add_tensor(save_walk *s, const char *key, sd_tensor *t) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", s->prefix, key);
    return sd_st_writer_add(s->w, name, t, s->err);
}

/* A backend weight as stored: half-precision weights go back to their type
 * (exact: they were widened from it); quantized ones stay F32. ndim/shape:
 * the shape to write (NULL: the tensor's). */
static void add_bt(save_walk *s, const char *key, const sd_bt *b, int ndim, const int64_t *shape) {
    if (s->rc || !b) return;
    sd_tensor *h = sd_bt_to_host(b);
    if (!h) {
        s->rc = sd_backend_take_error(b->be, s->err);
        if (!s->rc) s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory reading %s", key);
        return;
    }
    sd_tensor *t = h;
    if (h->dtype == SD_F32 && (b->dtype == SD_F16 || b->dtype == SD_BF16)) {
        t = sd_tensor_to_dtype(h, b->dtype);
        sd_tensor_unref(h);
    }
    sd_tensor *r = t && shape ? sd_tensor_reshape(t, ndim, shape) : (t ? sd_tensor_ref(t) : NULL);
    sd_tensor_unref(t);
    if (!r) {
        s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory converting %s", key);
        return;
    }
    s->rc = add_tensor(s, key, r);
    sd_tensor_unref(r);
}

static void save_param(void *ud, const char *key, sd_bt **slot) {
    if (slot) add_bt(ud, key, *slot, 0, NULL);
}

static void save_vae_param(void *ud, const char *key, const sd_bt *t, int ndim, const int64_t *shape) {
    add_bt(ud, key, t, ndim, shape);
}

/* ---- the parts ---------------------------------------------------------------------- */

static int is_unet_family(sd_ckpt_family f) {
    return f == SD_CKPT_SD1 || f == SD_CKPT_SD2 || f == SD_CKPT_SDXL;
}

/* The MODEL's diffusion model under model.diffusion_model. */
static sd_status add_model(save_walk *s, sd_model_ref *m) {
    const sd_ckpt_info *info = sd_checkpoint_info(m->ckpt);
    s->prefix = "model.diffusion_model.";
    if (is_unet_family(info->family)) {
        sd_unet *u = NULL;
        s->rc = sd_nodes_model_unet(m, &u, s->err);
        if (!s->rc) sd_unet_param_each(u, save_param, s);
    } else {
        sd_dmodel dm;
        s->rc = sd_nodes_model_dmodel(m, &dm, s->err);
        if (!s->rc) sd_flux_param_each(dm.net, save_param, s);
    }
    return s->rc;
}

static sd_status add_vae(save_walk *s, sd_vae_ref *v, const char *prefix) {
    sd_vae *vae = NULL;
    s->rc = sd_checkpoint_vae(v->ckpt, &vae, s->err);
    s->prefix = prefix;
    if (!s->rc) sd_vae_param_each(vae, save_vae_param, s);
    return s->rc;
}

/* What a CLIP export hands over, renamed and filtered for the file. */
typedef struct clip_sink {
    save_walk *s;
    int drop_projection; /* the checkpoint's CLIP-L: no text_projection */
} clip_sink;

static sd_status clip_sink_add(void *ud, const char *key, sd_tensor *t, sd_error *err) {
    (void)err;
    clip_sink *k = ud;
    if (k->drop_projection && strncmp(key, "text_projection", 15) == 0) return SD_OK;
    return add_tensor(k->s, key, t);
}

static sd_status add_clip_part(save_walk *s, const sd_clip *c, sd_clip_layout layout, const char *prefix,
                               int drop_projection) {
    clip_sink k = {s, drop_projection};
    s->prefix = prefix;
    if (!s->rc) s->rc = sd_clip_export((sd_clip *)c, layout, clip_sink_add, &k, s->err);
    return s->rc;
}

/* logit_scale of the OpenCLIP tower a CLIP holds: the value its
 * checkpoint stores under the tower's single-file prefix (ComfyUI loads it
 * only with a whole checkpoint, full_model=True: a standalone text-encoder
 * file's goes to the transformer, which has none), else ComfyUI's initial
 * value. A file sdflow cannot reopen as safetensors (a .ckpt) gives the
 * initial value too. */
static float clip_logit_scale(const sd_clip_ref *c) {
    static const char *const keys[] = {SD_TE_PREFIX_SDXL_G "logit_scale", SD_TE_PREFIX_REFINER_G "logit_scale",
                                       SD_TE_PREFIX_SD2 "logit_scale"};
    for (int i = 0; i <= c->n_more; i++) {
        sd_checkpoint *ck = i == 0 ? c->ckpt : c->more[i - 1];
        sd_st_file *f = NULL;
        sd_error e;
        sd_error_clear(&e);
        if (!ck || sd_st_open(sd_checkpoint_path(ck), &f, &e) != SD_OK) continue;
        float v = 0;
        int found = 0;
        for (size_t k = 0; k < sizeof keys / sizeof *keys && !found; k++) {
            if (!sd_st_find(f, keys[k])) continue;
            sd_tensor *t = sd_st_tensor_f32(f, keys[k], &e);
            if (t && sd_tensor_numel(t) == 1) v = sd_tensor_f32(t)[0], found = 1;
            sd_tensor_unref(t);
        }
        sd_st_close(f);
        if (found) return v;
    }
    return COMFY_LOGIT_SCALE;
}

static sd_status add_scalar(save_walk *s, const char *key, float v) {
    sd_tensor *t = sd_tensor_new(SD_F32, 0, NULL);
    if (!t) return s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory");
    sd_tensor_f32(t)[0] = v;
    s->rc = add_tensor(s, key, t);
    sd_tensor_unref(t);
    return s->rc;
}

static int is_refiner(const sd_ckpt_info *info) {
    /* supported_models.SDXLRefiner: adm_in_channels 2560 */
    return info->family == SD_CKPT_SDXL && info->unet.adm_in_channels == 2560;
}

/* The CLIP in the checkpoint layout of the MODEL's family (its
 * process_clip_state_dict_for_saving applied to ComfyUI's clip_l.* /
 * clip_g.* / clip_h.* state dict). A tower the family does not rename
 * keeps ComfyUI's internal name: HF under "clip_l." / "clip_g." for SD1,
 * OpenCLIP under "clip_l." for SD2 (its conversion takes every key). */
static sd_status add_clip_checkpoint(save_walk *s, sd_clip_ref *c, const sd_ckpt_info *info) {
    sd_text_encoder *te = NULL;
    s->rc = sd_nodes_clip_encoder(c, &te, s->err);
    if (s->rc) return s->rc;
    const sd_clip *l = sd_text_encoder_clip_l(te), *g = sd_text_encoder_clip_g(te);
    if (sd_text_encoder_t5(te) || sd_text_encoder_qwen3(te))
        return s->rc = sd_error_set(s->err, SD_ERR_UNSUPPORTED,
                                    "saving a %s text encoder in a checkpoint is not supported (CLIP-L, "
                                    "bigG and OpenCLIP-H are)",
                                    sd_te_kind_name(sd_text_encoder_kind(te)));
    float g_scale = g ? clip_logit_scale(c) : 0;
    if (info->family == SD_CKPT_SD1) {
        /* supported_models.SD15: clip_l. -> cond_stage_model., CLIP-L's
         * projection and logit_scale dropped */
        if (l) add_clip_part(s, l, SD_CLIP_LAYOUT_HF, SD_TE_PREFIX_SD1, 1);
        if (g && !s->rc) add_clip_part(s, g, SD_CLIP_LAYOUT_HF, "clip_g.transformer.", 0);
        if (g && !s->rc) s->prefix = "clip_g.", add_scalar(s, "logit_scale", g_scale);
    } else if (info->family == SD_CKPT_SDXL) {
        /* SDXL / SDXLRefiner: the bigG converted to OpenCLIP, the CLIP-L
         * kept in HF without projection, with position_ids = arange(77) */
        if (l && !is_refiner(info)) {
            add_clip_part(s, l, SD_CLIP_LAYOUT_HF, SD_TE_PREFIX_SDXL_L, 1);
            int64_t shape[2] = {1, 77};
            sd_tensor *ids = s->rc ? NULL : sd_tensor_new(SD_I64, 2, shape);
            if (!s->rc && !ids) return s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory");
            for (int i = 0; ids && i < 77; i++) ((int64_t *)ids->data)[i] = i;
            if (ids) s->rc = add_tensor(s, "text_model.embeddings.position_ids", ids);
            sd_tensor_unref(ids);
        }
        if (g && !s->rc) {
            const char *pre = is_refiner(info) ? SD_TE_PREFIX_REFINER_G : SD_TE_PREFIX_SDXL_G;
            add_clip_part(s, g, SD_CLIP_LAYOUT_OPENCLIP, pre, 0);
            if (!s->rc) add_scalar(s, "logit_scale", g_scale);
        }
    } else if (info->family == SD_CKPT_SD2) {
        if (g) add_clip_part(s, g, SD_CLIP_LAYOUT_OPENCLIP, SD_TE_PREFIX_SD2, 0);
        if (g && !s->rc) add_scalar(s, "logit_scale", g_scale);
        if (l && !s->rc) add_clip_part(s, l, SD_CLIP_LAYOUT_OPENCLIP, "clip_l.", 0);
        if (l && !s->rc) add_scalar(s, "logit_scale", COMFY_LOGIT_SCALE);
    } else {
        s->rc = sd_error_set(s->err, SD_ERR_UNSUPPORTED,
                             "saving the CLIP of a %s checkpoint is not supported (SD1, SD2 and SDXL are)",
                             sd_ckpt_family_name(info->family));
    }
    return s->rc;
}

/* ---- files -------------------------------------------------------------------------- */

static sd_status begin_file(sd_node_ctx *ctx, const char *prefix, sd_savepath *sp, sd_error *err) {
    sd_status rc = sd_savepath_begin(ctx->env->output_dir, prefix, 0, 0, sp, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, "filename_prefix");
        return rc;
    }
    sd_savepath_claim_names(sp, ctx->env, "output");
    return SD_OK;
}

/* prompt and one entry per extra_pnginfo key, as every saver writes them */
static sd_status add_workflow_meta(sd_node_ctx *ctx, sd_st_writer *w, sd_error *err) {
    sd_save_meta meta;
    memset(&meta, 0, sizeof meta);
    sd_status rc = sd_save_meta_build(ctx, 1, &meta, err);
    for (size_t i = 0; !rc && i < meta.n; i++) rc = sd_st_writer_meta(w, meta.keys[i], meta.values[i], err);
    sd_save_meta_free(&meta);
    return rc;
}

/* Serialize w and publish it as the savepath's next file. */
static sd_status publish(sd_node_ctx *ctx, sd_savepath *sp, sd_st_writer *w, sd_error *err) {
    void *bytes = NULL;
    size_t size = 0;
    sd_outfile of;
    memset(&of, 0, sizeof of);
    char file[1024];
    sd_status rc = sd_st_writer_to_memory(w, &bytes, &size, err);
    if (!rc) rc = sd_outfile_create(&sp->dir, &of, err);
    if (!rc && fwrite(bytes, 1, size, of.f) != size) rc = sd_error_set(err, SD_ERR_IO, "%s: write failed", sp->folder);
    if (!rc) rc = sd_savepath_publish(sp, &of, 0, "safetensors", file, sizeof file, err);
    if (!rc) sd_node_log(ctx, SD_LOG_INFO, "saved %s/%s", sp->folder, file);
    sd_outfile_discard(&of);
    free(bytes);
    return rc;
}

/* comfy_extras save_checkpoint: the MODEL (and for CheckpointSave the CLIP
 * and VAE) in one file. */
static sd_status save_checkpoint(sd_node_ctx *ctx, sd_model_ref *m, sd_clip_ref *clip, sd_vae_ref *vae,
                                 const char *prefix, sd_error *err) {
    const sd_ckpt_info *info = sd_checkpoint_info(m->ckpt);
    int unet = is_unet_family(info->family);
    if (!unet && (info->family != SD_CKPT_FLUX || clip)) {
        sd_error_set(err, SD_ERR_UNSUPPORTED, "saving a %s %s is not supported yet (%s are)",
                     info->family == SD_CKPT_SD3      ? "SD3"
                     : info->family == SD_CKPT_ZIMAGE ? "Z-Image"
                     : info->family == SD_CKPT_FLUX   ? "Flux"
                                                      : "diffusion",
                     clip ? "checkpoint" : "model", clip ? "SD1, SD2 and SDXL" : "SD1, SD2, SDXL and Flux");
        sd_error_at(err, NULL, NULL, "model");
        return SD_ERR_UNSUPPORTED;
    }
    sd_savepath sp;
    sd_status rc = begin_file(ctx, prefix, &sp, err);
    if (rc) return rc;
    sd_st_writer *w = sd_st_writer_new();
    if (!w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* metadata in ComfyUI's order: modelspec, predict_key, prompt, extra_pnginfo */
    if (!rc && info->family == SD_CKPT_SDXL) {
        char title[1200];
        snprintf(title, sizeof title, "%s %lld", sp.filename, (long long)sp.counter);
        rc = sd_st_writer_meta(w, "modelspec.architecture",
                               is_refiner(info) ? "stable-diffusion-xl-v1-refiner"
                               : info->ip2p     ? "stable-diffusion-xl-v1-edit"
                                                : "stable-diffusion-xl-v1-base",
                               err);
        if (!rc) rc = sd_st_writer_meta(w, "modelspec.sai_model_spec", "1.0.0", err);
        if (!rc) rc = sd_st_writer_meta(w, "modelspec.implementation", "sgm", err);
        if (!rc) rc = sd_st_writer_meta(w, "modelspec.title", title, err);
    }
    if (!rc && unet)
        rc = sd_st_writer_meta(w, "modelspec.predict_key", info->prediction == SD_PRED_V ? "v" : "epsilon", err);
    save_walk s = {w, "", err, rc};
    if (!rc && unet && info->prediction == SD_PRED_V) {
        int64_t zero = 0;
        sd_tensor *vpred = sd_tensor_new(SD_F32, 1, &zero);
        rc = vpred ? add_tensor(&s, "v_pred", vpred) : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        sd_tensor_unref(vpred);
    }
    if (!rc) rc = add_workflow_meta(ctx, w, err);
    if (!rc) s.rc = SD_OK, rc = add_model(&s, m);
    if (!rc && clip) {
        rc = add_clip_checkpoint(&s, clip, info);
        if (rc) sd_error_at(err, NULL, NULL, "clip");
    }
    if (!rc && vae) {
        rc = add_vae(&s, vae, info->vae_prefix && *info->vae_prefix ? info->vae_prefix : "first_stage_model.");
        if (rc) sd_error_at(err, NULL, NULL, "vae");
    }
    if (!rc) rc = publish(ctx, &sp, w, err);
    sd_st_writer_free(w);
    sd_savepath_free(&sp);
    return rc;
}

/* ---- the nodes ---------------------------------------------------------------------- */

static sd_status model_save_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const char *prefix = sd_value_as_string(in[1]);
    return save_checkpoint(ctx, m, NULL, NULL, prefix ? prefix : "diffusion_models/ComfyUI", err);
}

static sd_status checkpoint_save_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_model_ref *m;
    sd_clip_ref *c;
    sd_vae_ref *v;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (!rc) rc = sd_nodes_in_clip(in, 1, "clip", &c, err);
    if (!rc) rc = sd_nodes_in_vae(in, 2, "vae", &v, err);
    if (rc) return rc;
    const char *prefix = sd_value_as_string(in[3]);
    return save_checkpoint(ctx, m, c, v, prefix ? prefix : "checkpoints/ComfyUI", err);
}

/* CLIPSave: each text encoder in its own file, ComfyUI's prefix order
 * (clip_l, clip_g, clip_h). */
static sd_status clip_save_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_clip_ref *c;
    sd_status rc = sd_nodes_in_clip(in, 0, "clip", &c, err);
    if (rc) return rc;
    const char *prefix = sd_value_as_string(in[1]);
    if (!prefix) prefix = "clip/ComfyUI";
    sd_text_encoder *te = NULL;
    rc = sd_nodes_clip_encoder(c, &te, err);
    if (rc) return sd_error_at(err, NULL, NULL, "clip"), rc;
    if (sd_text_encoder_t5(te) || sd_text_encoder_qwen3(te)) {
        sd_error_set(err, SD_ERR_UNSUPPORTED, "CLIPSave of a %s text encoder is not supported (CLIP-L, bigG and "
                     "OpenCLIP-H are)", sd_te_kind_name(sd_text_encoder_kind(te)));
        sd_error_at(err, NULL, NULL, "clip");
        return SD_ERR_UNSUPPORTED;
    }
    /* ComfyUI names an SD2 text encoder clip_h; sdflow holds it as its "g" */
    const sd_clip *l = sd_text_encoder_clip_l(te), *g = sd_text_encoder_clip_g(te);
    const char *gname = sd_text_encoder_kind(te) == SD_TE_SD2 ? "clip_h" : "clip_g";
    struct {
        const sd_clip *clip;
        const char *name;
        float logit_scale;
    } parts[2] = {{l, "clip_l", COMFY_LOGIT_SCALE}, {g, gname, g ? clip_logit_scale(c) : 0}};
    for (int i = 0; i < 2 && !rc; i++) {
        if (!parts[i].clip) continue;
        char pre[1100];
        snprintf(pre, sizeof pre, "%s_%s", prefix, parts[i].name);
        sd_savepath sp;
        rc = begin_file(ctx, pre, &sp, err);
        if (rc) return rc;
        sd_st_writer *w = sd_st_writer_new();
        if (!w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        if (!rc) rc = sd_st_writer_meta(w, "format", "pt", err);
        if (!rc) rc = add_workflow_meta(ctx, w, err);
        save_walk s = {w, "", err, rc};
        if (!rc) rc = add_clip_part(&s, parts[i].clip, SD_CLIP_LAYOUT_HF, "", 0);
        if (!rc) s.prefix = "", rc = add_scalar(&s, "logit_scale", parts[i].logit_scale);
        if (!rc) rc = publish(ctx, &sp, w, err);
        sd_st_writer_free(w);
        sd_savepath_free(&sp);
    }
    return rc;
}

static sd_status vae_save_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_vae_ref *v;
    sd_status rc = sd_nodes_in_vae(in, 0, "vae", &v, err);
    if (rc) return rc;
    const char *prefix = sd_value_as_string(in[1]);
    sd_savepath sp;
    rc = begin_file(ctx, prefix ? prefix : "vae/ComfyUI_vae", &sp, err);
    if (rc) return rc;
    sd_st_writer *w = sd_st_writer_new();
    if (!w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc) rc = add_workflow_meta(ctx, w, err);
    save_walk s = {w, "", err, rc};
    if (!rc) {
        rc = add_vae(&s, v, "");
        if (rc) sd_error_at(err, NULL, NULL, "vae");
    }
    if (!rc) rc = publish(ctx, &sp, w, err);
    sd_st_writer_free(w);
    sd_savepath_free(&sp);
    return rc;
}

static const sd_input_def model_save_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "diffusion_models/ComfyUI"},
    {0}};
static const sd_input_def checkpoint_save_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "clip", .type = "CLIP"},
    {.name = "vae", .type = "VAE"},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "checkpoints/ComfyUI"},
    {0}};
static const sd_input_def clip_save_in[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "clip/ComfyUI"},
    {0}};
static const sd_input_def vae_save_in[] = {
    {.name = "vae", .type = "VAE"},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "vae/ComfyUI_vae"},
    {0}};
static const sd_output_def no_outputs[] = {{0}};

#define SAVER(var, name, display, ins, fn, helptext)                                                                    \
    static const sd_node_def var = {                                                                           \
        .version = 1,                                                                                          \
        .class_type = name,                                                                                    \
        .display_name = display,                                                                               \
        .python_module = "comfy_extras.nodes_model_merging",                                                   \
        .category = "advanced/model_merging",                                                                  \
        .hidden = SD_STRINGS("prompt", "extra_pnginfo"),                                                       \
        .help = helptext,                                                                                      \
        .inputs = ins,                                                                                         \
        .outputs = no_outputs,                                                                                 \
        .flags = SD_NODE_OUTPUT,                                                                               \
        .run = fn,                                                                                             \
    }

SAVER(node_model_save, "ModelSave", "ModelSave", model_save_in, model_save_run,
      "Saves the MODEL's diffusion model (with its LoRAs and merges applied) to the output folder as "
      "<prefix>_<counter:05>_.safetensors, keys model.diffusion_model.*, ComfyUI's metadata.");
SAVER(node_checkpoint_save, "CheckpointSave", "Save Checkpoint", checkpoint_save_in, checkpoint_save_run,
      "Saves MODEL, CLIP and VAE (LoRAs and merges applied) as one SD1/SD2/SDXL checkpoint in the output "
      "folder, <prefix>_<counter:05>_.safetensors in ComfyUI's layout and metadata; "
      "CheckpointLoaderSimple loads it back.");
SAVER(node_clip_save, "CLIPSave", "CLIPSave", clip_save_in, clip_save_run,
      "Saves each text encoder of the CLIP (LoRAs applied) to the output folder as "
      "<prefix>_clip_l/_clip_g/_clip_h_<counter:05>_.safetensors, HF keys; CLIP-L, bigG and OpenCLIP-H.");
SAVER(node_vae_save, "VAESave", "VAESave", vae_save_in, vae_save_run,
      "Saves the VAE to the output folder as <prefix>_<counter:05>_.safetensors in the LDM layout "
      "(encoder.*, decoder.*), whatever layout it was loaded from.");

const sd_node_def *const sd_nodes_model_save[] = {&node_model_save, &node_checkpoint_save, &node_clip_save,
                                                  &node_vae_save, NULL};
