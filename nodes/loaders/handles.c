/* handles.c - MODEL / CLIP / VAE handle values over open checkpoints.
 * Each handle holds its checkpoint part (sd_checkpoint_hold), so that a
 * one-shot run frees a part once no value can use it any more. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loaders.h"
#include "models/checkpoint/model_paths.h"
#include "models/text/tokenizer.h"
#include "models/unet/hypernet.h"
#include "nodes/lora/lora_nodes.h"

static void free_model_ref(void *p) {
    sd_model_ref *r = p;
    if (r) {
        sd_lora_stack_unref(r->loras); /* its patched view first: the base outlives it */
        sd_value_unref(r->patches.perp_neg_empty);
        for (int i = 0; i < r->patches.cfg.n_pre; i++) sd_cfg_state_unref(r->patches.cfg.state[i]);
        for (int i = 0; i < r->patches.unet.n; i++) sd_hypernet_unref(r->patches.unet.list[i].hn);
        sd_checkpoint_release(r->ckpt, SD_CKPT_PART_UNET);
        sd_checkpoint_unref(r->ckpt);
    }
    free(r);
}
static void free_clip_ref(void *p) {
    sd_clip_ref *r = p;
    if (r) {
        sd_lora_stack_unref(r->loras);
        sd_text_encoder_free(r->combined); /* borrows the parts released below */
        pthread_mutex_destroy(&r->mu);
        sd_checkpoint_release(r->ckpt, SD_CKPT_PART_TEXT);
        sd_checkpoint_unref(r->ckpt);
        for (int i = 0; i < r->n_more; i++) {
            sd_checkpoint_release(r->more[i], SD_CKPT_PART_TEXT);
            sd_checkpoint_unref(r->more[i]);
        }
    }
    free(r);
}
static void free_vae_ref(void *p) {
    sd_vae_ref *r = p;
    if (r) {
        sd_checkpoint_release(r->ckpt, SD_CKPT_PART_VAE);
        sd_checkpoint_unref(r->ckpt);
    }
    free(r);
}

const sd_handle_type sd_handle_model = {"MODEL", free_model_ref};
const sd_handle_type sd_handle_clip = {"CLIP", free_clip_ref};
const sd_handle_type sd_handle_vae = {"VAE", free_vae_ref};

sd_value *sd_nodes_model_value(sd_checkpoint *c) { return sd_nodes_model_value_lora(c, NULL); }

sd_value *sd_nodes_clip_value(sd_checkpoint *c, int clip_skip) {
    return sd_nodes_clip_value_lora(c, clip_skip, NULL);
}

sd_value *sd_nodes_model_value_lora(sd_checkpoint *c, struct sd_lora_stack *loras) {
    return sd_nodes_model_value_patched(c, loras, NULL);
}

sd_value *sd_nodes_model_value_patched(sd_checkpoint *c, struct sd_lora_stack *loras,
                                       const sd_model_patches *p) {
    sd_model_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->ckpt = sd_checkpoint_ref(c);
    sd_checkpoint_hold(c, SD_CKPT_PART_UNET);
    r->loras = sd_lora_stack_ref(loras);
    if (p) r->patches = *p;
    if (r->patches.perp_neg_empty) sd_value_ref(r->patches.perp_neg_empty);
    /* the pre-CFG functions' state (APG's momentum): shared with the MODEL
     * it was copied from, as ComfyUI's clones share the function's closure */
    for (int i = 0; i < r->patches.cfg.n_pre; i++) sd_cfg_state_ref(r->patches.cfg.state[i]);
    /* the hypernetworks of the UNet patches: one reference per MODEL value */
    for (int i = 0; i < r->patches.unet.n; i++) sd_hypernet_ref(r->patches.unet.list[i].hn);
    sd_value *v = sd_value_handle(&sd_handle_model, r);
    if (!v) free_model_ref(r);
    return v;
}

static sd_value *clip_value(sd_checkpoint *const *files, int n, sd_te_kind kind, int clip_skip,
                            struct sd_lora_stack *loras) {
    if (n < 1 || n > SD_CLIP_FILES_MAX) return NULL;
    sd_clip_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    r->ckpt = sd_checkpoint_ref(files[0]);
    sd_checkpoint_hold(files[0], SD_CKPT_PART_TEXT);
    for (int i = 1; i < n; i++) {
        r->more[r->n_more++] = sd_checkpoint_ref(files[i]);
        sd_checkpoint_hold(files[i], SD_CKPT_PART_TEXT);
    }
    r->kind = kind;
    r->clip_skip = clip_skip;
    r->loras = sd_lora_stack_ref(loras);
    sd_value *v = sd_value_handle(&sd_handle_clip, r);
    if (!v) free_clip_ref(r);
    return v;
}

sd_value *sd_nodes_clip_value_lora(sd_checkpoint *c, int clip_skip, struct sd_lora_stack *loras) {
    return clip_value(&c, 1, 0, clip_skip, loras);
}

sd_value *sd_nodes_clip_value_files(sd_checkpoint *const *files, int n, sd_te_kind kind) {
    return clip_value(files, n, kind, 0, NULL);
}

sd_value *sd_nodes_clip_value_like(const sd_clip_ref *base, int clip_skip,
                                   struct sd_lora_stack *loras) {
    sd_checkpoint *files[SD_CLIP_FILES_MAX];
    files[0] = base->ckpt;
    for (int i = 0; i < base->n_more; i++) files[1 + i] = base->more[i];
    return clip_value(files, 1 + base->n_more, base->kind, clip_skip, loras);
}

sd_value *sd_nodes_vae_value(sd_checkpoint *c) {
    sd_vae_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->ckpt = sd_checkpoint_ref(c);
    sd_checkpoint_hold(c, SD_CKPT_PART_VAE);
    sd_value *v = sd_value_handle(&sd_handle_vae, r);
    if (!v) free_vae_ref(r);
    return v;
}

static sd_status in_handle(sd_value *const *in, int i, const char *name,
                           const sd_handle_type *type, void **out, sd_error *err) {
    *out = in[i] ? sd_value_as_handle(in[i], type) : NULL;
    if (*out) return SD_OK;
    const sd_handle_type *got = in[i] ? sd_value_handle_type(in[i]) : NULL;
    sd_error_set(err, SD_ERR_INVALID, "input '%s' must be a %s, got %s", name, type->type_name,
                 got ? got->type_name
                     : in[i] ? sd_value_kind_name(sd_value_kind_of(in[i])) : "nothing");
    sd_error_at(err, NULL, NULL, name);
    return SD_ERR_INVALID;
}

sd_status sd_nodes_in_model(sd_value *const *in, int i, const char *name, sd_model_ref **out,
                            sd_error *err) {
    return in_handle(in, i, name, &sd_handle_model, (void **)out, err);
}
sd_status sd_nodes_in_clip(sd_value *const *in, int i, const char *name, sd_clip_ref **out,
                           sd_error *err) {
    return in_handle(in, i, name, &sd_handle_clip, (void **)out, err);
}
sd_status sd_nodes_in_vae(sd_value *const *in, int i, const char *name, sd_vae_ref **out,
                          sd_error *err) {
    return in_handle(in, i, name, &sd_handle_vae, (void **)out, err);
}

sd_status sd_nodes_open_model(const sd_node_ctx *ctx, const char *folder, const char *name,
                              const char *input, sd_checkpoint **out, sd_error *err) {
    return sd_nodes_open_model_ex(ctx, folder, name, input, SD_F32, out, err);
}

sd_status sd_nodes_open_model_ex(const sd_node_ctx *ctx, const char *folder, const char *name,
                                 const char *input, sd_dtype weight_dtype, sd_checkpoint **out,
                                 sd_error *err) {
    return sd_nodes_open_model_dq(ctx, folder, name, input, weight_dtype, SD_DQ_F16, out, err);
}

sd_status sd_nodes_open_model_dq(const sd_node_ctx *ctx, const char *folder, const char *name,
                                 const char *input, sd_dtype weight_dtype, sd_dequant_math dequant,
                                 sd_checkpoint **out, sd_error *err) {
    *out = NULL;
    const sd_env *env = ctx->env;
    char *path = NULL;
    sd_status rc = sd_model_paths_resolve(env, folder, name, &path, err);
    if (!rc) {
        sd_checkpoint_opts o;
        sd_checkpoint_opts_default(&o);
        o.weight_dtype = weight_dtype;
        o.dequant = dequant;
        o.clip_l_heads = env->clip_l_heads;
        o.clip_g_heads = env->clip_g_heads;
        o.qwen3_4b_width = env->qwen3_4b_width;
        o.tokenizer_dir = env->tokenizer_dir;
        o.comfyui_dir = env->comfyui_dir; /* its comfy/text_encoders/t5_tokenizer */
        /* A ComfyUI installation ships the CLIP vocabulary in
         * comfy/sd1_tokenizer: --comfyui-dir alone is enough for a picture. */
        char comfy_tok[4200];
        if (!o.tokenizer_dir && env->comfyui_dir) {
            snprintf(comfy_tok, sizeof comfy_tok, "%s/comfy/sd1_tokenizer", env->comfyui_dir);
            if (sd_tokenizer_dir_has_files(comfy_tok)) o.tokenizer_dir = comfy_tok;
        }
        rc = sd_model_store_open((sd_model_store *)env->models, (sd_backend *)env->backend, path,
                                 &o, out, err);
    }
    free(path);
    if (rc) sd_error_at(err, NULL, NULL, input);
    return rc;
}

sd_status sd_nodes_model_unet(const sd_model_ref *m, sd_unet **out, sd_error *err) {
    if (m->loras && sd_lora_stack_count(m->loras) > 0)
        return sd_lora_stack_unet(m->loras, m->ckpt, out, err);
    return sd_checkpoint_unet(m->ckpt, out, err);
}

/* The parts of a CLIP of several files (or of one file used as another
 * kind), composed once per handle. */
static sd_status combined_encoder(sd_clip_ref *c, sd_text_encoder **out, sd_error *err) {
    pthread_mutex_lock(&c->mu);
    sd_status rc = SD_OK;
    if (!c->combined) {
        const sd_text_encoder *parts[SD_CLIP_FILES_MAX];
        sd_checkpoint *files[SD_CLIP_FILES_MAX];
        files[0] = c->ckpt;
        for (int i = 0; i < c->n_more; i++) files[1 + i] = c->more[i];
        int n = 1 + c->n_more;
        for (int i = 0; i < n && !rc; i++) {
            sd_text_encoder *te = NULL;
            rc = sd_checkpoint_text_encoder(files[i], &te, err);
            parts[i] = te;
        }
        if (!rc) rc = sd_text_encoder_combine(c->kind, parts, n, &c->combined, err);
    }
    *out = rc ? NULL : c->combined;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

sd_status sd_nodes_model_dmodel(const sd_model_ref *m, sd_dmodel *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    if (m->loras && sd_lora_stack_count(m->loras) > 0) {
        if (sd_nodes_lora_on_dit(m->ckpt)) return sd_lora_stack_dit(m->loras, m->ckpt, out, err);
        sd_unet *u = NULL;
        sd_status rc = sd_lora_stack_unet(m->loras, m->ckpt, &u, err);
        if (!rc) sd_unet_as_dmodel(u, out);
        return rc;
    }
    return sd_checkpoint_dmodel(m->ckpt, out, err);
}

sd_status sd_nodes_clip_base_encoder(const sd_clip_ref *c, sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    /* the handle's composition cache is its own business: values stay
     * immutable to their users */
    if (c->n_more > 0 || c->kind) return combined_encoder((sd_clip_ref *)c, out, err);
    return sd_checkpoint_text_encoder(c->ckpt, out, err);
}

sd_status sd_nodes_clip_encoder(const sd_clip_ref *c, sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    sd_text_encoder *base;
    sd_status rc = sd_nodes_clip_base_encoder(c, &base, err);
    if (rc || !c->loras || sd_lora_stack_count(c->loras) == 0) {
        if (!rc) *out = base;
        return rc;
    }
    return sd_lora_stack_text_encoder_on(c->loras, base, out, err);
}

void sd_nodes_model_sampling_of(sd_checkpoint *c, const sd_model_patches *p,
                                sd_model_sampling *ms) {
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    if (p && p->sampling_set && p->sampling_base == SD_MS_FLUX) sd_model_sampling_init_flux(ms, p->shift);
    else if (p && p->sampling_set && p->sampling_base == SD_MS_FLOW)
        sd_model_sampling_init_flow(ms, p->shift, p->multiplier);
    else if (p && p->sampling_set && (p->sampling_base == SD_MS_CONT_EDM || p->sampling_base == SD_MS_CONT_V ||
                                      p->sampling_base == SD_MS_COSMOS))
        sd_model_sampling_init_continuous(ms, p->sampling_base, p->sampling, p->sigma_min, p->sigma_max,
                                          p->sigma_data);
    else if (p && p->sampling_set) sd_model_sampling_init_ex(ms, p->sampling, p->zsnr);
    else if (info->family == SD_CKPT_FLUX && info->flux.guidance_embed) sd_model_sampling_init_flux_dev(ms);
    else if (info->family == SD_CKPT_FLUX) sd_model_sampling_init_flux_schnell(ms);
    else if (info->family == SD_CKPT_ZIMAGE) sd_model_sampling_init_zimage(ms);
    else if (info->family == SD_CKPT_SD3) sd_model_sampling_init_sd3(ms);
    else sd_model_sampling_init(ms, info->prediction);
}

/* ---- per-node precision ------------------------------------------------------------ */

sd_status sd_nodes_precision_begin(const sd_node_ctx *ctx, unsigned node_flags, sd_precision *prev,
                                   sd_error *err) {
    sd_backend *be = ctx && ctx->env ? ctx->env->backend : NULL;
    *prev = sd_backend_precision(be);
    if (!be) return SD_OK;
    const char *name = sd_env_node_precision(ctx->env, node_flags);
    sd_precision p;
    if (!sd_precision_parse(name, &p))
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "unknown precision '%s' (f32, bf16 or f16)", name);
    if (!sd_backend_supports_precision(be, p))
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "the %s backend of this build cannot compute in %s",
                            sd_backend_name(be), name);
    sd_backend_set_precision(be, p);
    return SD_OK;
}

void sd_nodes_precision_end(const sd_node_ctx *ctx, sd_precision prev) {
    sd_backend *be = ctx && ctx->env ? ctx->env->backend : NULL;
    if (be) sd_backend_set_precision(be, prev);
}
