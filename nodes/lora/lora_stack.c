/* lora_stack.c - patch stacks (LoRAs and merges) of MODEL/CLIP values and
 * their cached views. */
#include "lora_nodes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"
#include "nodes/loaders/loaders.h"

/* One entry: a LoRA plan, or a merge with the other MODEL / CLIP value. */
typedef struct stack_entry {
    sd_lora_plan *plan;
    sd_value *merge; /* a MODEL or CLIP handle value (one reference) */
    double strength, strength_model;
    int has_scale;       /* a weight scale (sd_lora_stack_push_scale) */
    sd_lora_scale scale;
    sd_lora_ratio *ratios; /* a per-block merge's (owned, prefixes too) */
    int n_ratios;
} stack_entry;

struct sd_lora_stack {
    int refcount;
    pthread_mutex_t lock;
    size_t n;
    stack_entry *e;
    sd_unet *unet;          /* built on first use */
    sd_dmodel dit;          /* (a DiT checkpoint's: Flux, SD3, Z-Image) */
    sd_text_encoder *te;
};

static void free_ratios(stack_entry *e) {
    for (int i = 0; i < e->n_ratios; i++) free((char *)e->ratios[i].prefix);
    free(e->ratios);
    e->ratios = NULL;
    e->n_ratios = 0;
}

/* e's own copy of ratios[0..n); nonzero when out of memory (e left empty). */
static int copy_ratios(stack_entry *e, const sd_lora_ratio *ratios, int n) {
    e->ratios = calloc((size_t)n, sizeof *e->ratios);
    if (!e->ratios) return 1;
    e->n_ratios = n;
    for (int i = 0; i < n; i++) {
        e->ratios[i].ratio = ratios[i].ratio;
        e->ratios[i].prefix = strdup(ratios[i].prefix);
        if (!e->ratios[i].prefix) {
            free_ratios(e);
            return 1;
        }
    }
    return 0;
}

void sd_lora_stack_unref(sd_lora_stack *s);

/* A new stack: base's entries and room for one more (filled by the caller). */
static sd_status grow(const sd_lora_stack *base, sd_lora_stack **out, sd_error *err) {
    *out = NULL;
    size_t n = (base ? base->n : 0) + 1;
    sd_lora_stack *s = calloc(1, sizeof *s);
    if (s) s->e = calloc(n, sizeof *s->e);
    if (!s || !s->e) {
        free(s);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    s->refcount = 1;
    pthread_mutex_init(&s->lock, NULL);
    s->n = n;
    for (size_t i = 0; base && i < base->n; i++) {
        s->e[i] = base->e[i];
        s->e[i].ratios = NULL;
        s->e[i].n_ratios = 0;
        sd_lora_plan_ref(s->e[i].plan);
        sd_value_ref(s->e[i].merge);
        if (base->e[i].n_ratios &&
            copy_ratios(&s->e[i], base->e[i].ratios, base->e[i].n_ratios)) {
            sd_lora_stack_unref(s);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    *out = s;
    return SD_OK;
}

sd_status sd_lora_stack_push(const sd_lora_stack *base, sd_lora_plan *plan, double strength,
                             sd_lora_stack **out, sd_error *err) {
    sd_status rc = grow(base, out, err);
    if (rc) return rc;
    stack_entry *e = &(*out)->e[(*out)->n - 1];
    e->plan = sd_lora_plan_ref(plan);
    e->strength = strength;
    e->strength_model = 1.0;
    return SD_OK;
}

sd_status sd_lora_stack_push_merge(const sd_lora_stack *base, sd_value *other,
                                   double strength_patch, double strength_model,
                                   sd_lora_stack **out, sd_error *err) {
    sd_status rc = grow(base, out, err);
    if (rc) return rc;
    stack_entry *e = &(*out)->e[(*out)->n - 1];
    e->merge = sd_value_ref(other);
    e->strength = strength_patch;
    e->strength_model = strength_model;
    return SD_OK;
}

sd_status sd_lora_stack_push_scale(const sd_lora_stack *base, const sd_lora_scale *scale,
                                   sd_lora_stack **out, sd_error *err) {
    sd_status rc = grow(base, out, err);
    if (rc) return rc;
    stack_entry *e = &(*out)->e[(*out)->n - 1];
    e->has_scale = 1;
    e->scale = *scale;
    e->strength_model = 1.0;
    return SD_OK;
}

sd_status sd_lora_stack_push_merge_blocks(const sd_lora_stack *base, sd_value *other,
                                          const sd_lora_ratio *ratios, int n_ratios,
                                          sd_lora_stack **out, sd_error *err) {
    if (n_ratios < 1) return sd_error_set(err, SD_ERR_INVALID, "a block merge needs a ratio");
    sd_status rc = grow(base, out, err);
    if (rc) return rc;
    stack_entry *e = &(*out)->e[(*out)->n - 1];
    e->merge = sd_value_ref(other);
    if (copy_ratios(e, ratios, n_ratios)) {
        sd_lora_stack_unref(*out);
        *out = NULL;
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

sd_lora_stack *sd_lora_stack_ref(sd_lora_stack *s) {
    if (s) __atomic_add_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL);
    return s;
}

void sd_lora_stack_unref(sd_lora_stack *s) {
    if (!s || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
    /* the views first: they may share tensors with the merged models */
    sd_unet_free(s->unet);
    sd_lora_dit_free(&s->dit);
    sd_text_encoder_free(s->te);
    for (size_t i = 0; i < s->n; i++) {
        sd_lora_plan_unref(s->e[i].plan);
        sd_value_unref(s->e[i].merge);
        free_ratios(&s->e[i]);
    }
    free(s->e);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

size_t sd_lora_stack_count(const sd_lora_stack *s) { return s ? s->n : 0; }

/* The uses of s for one part (unet or text encoder): a merge entry brings
 * the other model's part as ITS stack patched it (loaded on first use). */
static sd_status uses_of(const sd_lora_stack *s, int text, sd_lora_use **out, sd_error *err) {
    sd_lora_use *u = calloc(s->n ? s->n : 1, sizeof *u);
    *out = u;
    if (!u) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < s->n; i++) {
        const stack_entry *e = &s->e[i];
        u[i] = (sd_lora_use){e->plan, e->strength, NULL, NULL, e->strength_model,
                             e->has_scale ? &e->scale : NULL, NULL, e->ratios, e->n_ratios};
        if (!e->merge) continue;
        sd_status rc = SD_OK;
        sd_model_ref *m = sd_value_as_handle(e->merge, &sd_handle_model);
        sd_clip_ref *c = sd_value_as_handle(e->merge, &sd_handle_clip);
        if (!text && m && sd_nodes_lora_on_dit(m->ckpt)) {
            sd_dmodel dm;
            rc = sd_nodes_model_dmodel(m, &dm, err);
            if (!rc) u[i].merge_dit = dm.net;
        } else if (!text && m) rc = sd_nodes_model_unet(m, (sd_unet **)&u[i].merge_unet, err);
        if (text && c) rc = sd_nodes_clip_encoder(c, (sd_text_encoder **)&u[i].merge_te, err);
        if (rc) {
            free(u);
            *out = NULL;
            return rc;
        }
    }
    return SD_OK;
}

sd_status sd_lora_stack_unet(sd_lora_stack *s, sd_checkpoint *c, sd_unet **out, sd_error *err) {
    *out = NULL;
    sd_unet *base;
    sd_status rc = sd_checkpoint_unet(c, &base, err);
    if (rc || !s || !s->n) {
        if (!rc) *out = base;
        return rc;
    }
    pthread_mutex_lock(&s->lock);
    if (!s->unet) {
        sd_lora_use *u = NULL;
        rc = uses_of(s, 0, &u, err);
        if (!rc) rc = sd_lora_unet_view(base, u, (int)s->n, &s->unet, err);
        free(u);
    }
    *out = s->unet;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sd_nodes_lora_on_dit(sd_checkpoint *c) {
    sd_ckpt_family f = sd_checkpoint_info(c)->family;
    return f == SD_CKPT_FLUX || f == SD_CKPT_SD3 || f == SD_CKPT_ZIMAGE;
}

/* The checkpoint's DiT (SD_ERR_INVALID when it holds a UNet). */
static sd_status checkpoint_dit(sd_checkpoint *c, sd_dmodel *out, sd_error *err) {
    sd_status rc = sd_checkpoint_dmodel(c, out, err);
    if (rc) return rc;
    if (out->info.kind != SD_DMODEL_FLUX && out->info.kind != SD_DMODEL_MMDIT &&
        out->info.kind != SD_DMODEL_ZIMAGE)
        return sd_error_set(err, SD_ERR_INVALID, "%s holds no DiT", sd_checkpoint_path(c));
    return SD_OK;
}

sd_status sd_lora_stack_dit(sd_lora_stack *s, sd_checkpoint *c, sd_dmodel *out, sd_error *err) {
    sd_dmodel base;
    sd_status rc = checkpoint_dit(c, &base, err);
    *out = base;
    if (rc || !s || !s->n) return rc;
    /* a merge's other model is a DiT of base's kind (sd_nodes_model_merge_push) */
    for (size_t i = 0; i < s->n; i++) {
        sd_model_ref *m = s->e[i].merge ? sd_value_as_handle(s->e[i].merge, &sd_handle_model) : NULL;
        if (s->e[i].merge && (!m || !sd_nodes_lora_on_dit(m->ckpt)))
            return sd_error_set(err, SD_ERR_INVALID, "%s: a merge of a %s model with no DiT",
                                sd_checkpoint_path(c), sd_dmodel_kind_name(base.info.kind));
    }
    pthread_mutex_lock(&s->lock);
    if (!s->dit.net) {
        sd_lora_use *u = NULL;
        rc = uses_of(s, 0, &u, err);
        if (!rc) rc = sd_lora_dit_view(&base, u, (int)s->n, &s->dit, err);
        free(u);
    }
    if (!rc) {
        /* the view keeps base's description (channels, y, guidance) */
        void *net = s->dit.net;
        const sd_dmodel_i *vt = s->dit.vt;
        *out = base;
        out->net = net;
        out->vt = vt;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

sd_status sd_lora_stack_text_encoder_on(sd_lora_stack *s, const sd_text_encoder *base,
                                        sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    if (!s || !s->n) {
        *out = (sd_text_encoder *)base;
        return SD_OK;
    }
    sd_status rc = SD_OK;
    pthread_mutex_lock(&s->lock);
    if (!s->te) {
        sd_lora_use *u = NULL;
        rc = uses_of(s, 1, &u, err);
        if (!rc) rc = sd_lora_text_encoder_view(base, u, (int)s->n, &s->te, err);
        free(u);
    }
    *out = s->te;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

sd_status sd_lora_stack_text_encoder(sd_lora_stack *s, sd_checkpoint *c, sd_text_encoder **out,
                                     sd_error *err) {
    *out = NULL;
    sd_text_encoder *base;
    sd_status rc = sd_checkpoint_text_encoder(c, &base, err);
    return rc ? rc : sd_lora_stack_text_encoder_on(s, base, out, err);
}

sd_status sd_nodes_lora_load(sd_node_ctx *ctx, sd_checkpoint *c, const char *lora_name,
                             const sd_lora_stack *model_in, const sd_lora_stack *clip_in,
                             double strength_model, double strength_clip, int with_clip,
                             sd_lora_stack **model_out, sd_lora_stack **clip_out, sd_error *err) {
    return sd_nodes_lora_load_pair(ctx, c, NULL, lora_name, model_in, clip_in, strength_model,
                                   strength_clip, with_clip, model_out, clip_out, err);
}

/* LoraLoader's work for both entry points: the text encoder is clip_ref's
 * (a CLIP handle: its files composed) or clip_c's; loaded only when the LoRA
 * has text-encoder names (a T5 or Qwen3 is large, and without such names
 * its plan part is empty). */
static sd_status lora_load(sd_node_ctx *ctx, sd_checkpoint *c, const sd_clip_ref *clip_ref,
                           sd_checkpoint *clip_c, const char *lora_name, const sd_lora_stack *model_in,
                           const sd_lora_stack *clip_in, double strength_model, double strength_clip,
                           int with_clip, sd_lora_stack **model_out, sd_lora_stack **clip_out,
                           sd_error *err);

sd_status sd_nodes_lora_load_pair(sd_node_ctx *ctx, sd_checkpoint *c, sd_checkpoint *clip_c,
                                  const char *lora_name, const sd_lora_stack *model_in,
                                  const sd_lora_stack *clip_in, double strength_model,
                                  double strength_clip, int with_clip, sd_lora_stack **model_out,
                                  sd_lora_stack **clip_out, sd_error *err) {
    return lora_load(ctx, c, NULL, clip_c ? clip_c : c, lora_name, model_in, clip_in, strength_model,
                     strength_clip, with_clip, model_out, clip_out, err);
}

sd_status sd_nodes_lora_load_clip(sd_node_ctx *ctx, sd_checkpoint *c, const sd_clip_ref *clip,
                                  const char *lora_name, const sd_lora_stack *model_in,
                                  const sd_lora_stack *clip_in, double strength_model,
                                  double strength_clip, int with_clip, sd_lora_stack **model_out,
                                  sd_lora_stack **clip_out, sd_error *err) {
    return lora_load(ctx, c, clip, NULL, lora_name, model_in, clip_in, strength_model, strength_clip,
                     with_clip && clip, model_out, clip_out, err);
}

static sd_status lora_load(sd_node_ctx *ctx, sd_checkpoint *c, const sd_clip_ref *clip_ref,
                           sd_checkpoint *clip_c, const char *lora_name, const sd_lora_stack *model_in,
                           const sd_lora_stack *clip_in, double strength_model, double strength_clip,
                           int with_clip, sd_lora_stack **model_out, sd_lora_stack **clip_out,
                           sd_error *err) {
    *model_out = NULL;
    if (clip_out) *clip_out = NULL;
    sd_text_encoder *te = NULL;
    char *path = NULL;
    sd_lora *lora = NULL;
    sd_lora_plan *plan = NULL;
    sd_unet *unet = NULL;
    sd_dmodel dit;
    int is_dit = sd_nodes_lora_on_dit(c);
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_LORAS, lora_name, &path, err);
    if (!rc) rc = sd_lora_open(path, &lora, err);
    if (!rc && with_clip && sd_lora_has_text_encoder_keys(lora)) {
        rc = clip_ref ? sd_nodes_clip_base_encoder(clip_ref, &te, err) : sd_checkpoint_text_encoder(clip_c, &te, err);
        if (rc) sd_error_at(err, NULL, NULL, "clip");
    }
    if (is_dit) {
        if (!rc) rc = checkpoint_dit(c, &dit, err);
        if (!rc) rc = sd_lora_plan_new_dit_te(lora, &dit, te, &plan, err);
    } else {
        if (!rc) rc = sd_checkpoint_unet(c, &unet, err);
        if (!rc) rc = sd_lora_plan_new(lora, unet, te, &plan, err);
    }
    size_t nc = 0;
    if (!rc) {
        size_t nm = sd_lora_plan_count(plan, SD_LORA_UNET);
        for (int part = SD_LORA_CLIP_L; part < SD_LORA_PARTS; part++)
            nc += sd_lora_plan_count(plan, (sd_lora_part)part);
        char buf[1024], skipped[1536];
        sd_lora_plan_unmatched_summary(plan, 5, buf, sizeof buf);
        sd_lora_plan_skipped_summary(plan, 3, skipped, sizeof skipped);
        size_t ns = sd_lora_plan_skipped_count(plan);
        if (nm + nc == 0 && ns) {
            rc = sd_error_set(err, SD_ERR_INVALID,
                              "%s: this LoRA does not fit this model: %s (a LoRA for another architecture?)",
                              path, skipped);
        } else if (nm + nc == 0) {
            rc = sd_error_set(err, SD_ERR_INVALID,
                              "%s: no key of this LoRA matches the model (%s); a LoRA made for "
                              "another architecture?",
                              path, buf);
        } else if (ns && ctx->env->lora_strict) {
            rc = sd_error_set(err, SD_ERR_INVALID, "%s: %s (refused under --lora-strict)", path, skipped);
        } else {
            /* ComfyUI applies the rest and logs each left-out patch */
            if (ns) sd_node_log(ctx, SD_LOG_WARN, "LoRA %s: %s", lora_name, skipped);
            if (buf[0]) sd_node_log(ctx, SD_LOG_WARN, "LoRA %s: %s", lora_name, buf);
            if (is_dit)
                sd_node_log(ctx, SD_LOG_INFO, "LoRA %s: %zu %s DiT and %zu text-encoder weights patched",
                            lora_name, nm, sd_dmodel_kind_name(dit.info.kind), nc);
            else
                sd_node_log(ctx, SD_LOG_INFO, "LoRA %s: %zu UNet and %zu text-encoder weights patched",
                            lora_name, nm, nc);
        }
    }
    if (!rc) rc = sd_lora_stack_push(model_in, plan, strength_model, model_out, err);
    /* a DiT's CLIP without text-encoder patches comes out as it went in */
    if (!rc && with_clip && clip_out && !(is_dit && nc == 0))
        rc = sd_lora_stack_push(clip_in, plan, strength_clip, clip_out, err);
    if (rc) {
        sd_lora_stack_unref(*model_out);
        *model_out = NULL;
        if (!err || !err->input[0]) sd_error_at(err, NULL, NULL, "lora_name");
    }
    sd_lora_plan_unref(plan);
    sd_lora_unref(lora);
    free(path);
    return rc;
}
