/* lora_stack.c - LoRA stacks of MODEL/CLIP values and their cached views. */
#include "lora_nodes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"

struct sd_lora_stack {
    int refcount;
    pthread_mutex_t lock;
    size_t n;
    sd_lora_plan **plan;
    double *strength;
    sd_unet *unet;          /* built on first use */
    sd_text_encoder *te;
};

sd_status sd_lora_stack_push(const sd_lora_stack *base, sd_lora_plan *plan, double strength,
                             sd_lora_stack **out, sd_error *err) {
    *out = NULL;
    size_t n = (base ? base->n : 0) + 1;
    sd_lora_stack *s = calloc(1, sizeof *s);
    if (s) {
        s->plan = calloc(n, sizeof *s->plan);
        s->strength = calloc(n, sizeof *s->strength);
    }
    if (!s || !s->plan || !s->strength) {
        if (s) free(s->plan), free(s->strength);
        free(s);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    s->refcount = 1;
    pthread_mutex_init(&s->lock, NULL);
    for (size_t i = 0; base && i < base->n; i++) {
        s->plan[i] = sd_lora_plan_ref(base->plan[i]);
        s->strength[i] = base->strength[i];
    }
    s->plan[n - 1] = sd_lora_plan_ref(plan);
    s->strength[n - 1] = strength;
    s->n = n;
    *out = s;
    return SD_OK;
}

sd_lora_stack *sd_lora_stack_ref(sd_lora_stack *s) {
    if (s) __atomic_add_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL);
    return s;
}

void sd_lora_stack_unref(sd_lora_stack *s) {
    if (!s || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
    for (size_t i = 0; i < s->n; i++) sd_lora_plan_unref(s->plan[i]);
    free(s->plan);
    free(s->strength);
    sd_unet_free(s->unet);
    sd_text_encoder_free(s->te);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

size_t sd_lora_stack_count(const sd_lora_stack *s) { return s ? s->n : 0; }

static sd_lora_use *uses_of(const sd_lora_stack *s) {
    sd_lora_use *u = calloc(s->n ? s->n : 1, sizeof *u);
    for (size_t i = 0; u && i < s->n; i++) u[i] = (sd_lora_use){s->plan[i], s->strength[i]};
    return u;
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
        sd_lora_use *u = uses_of(s);
        rc = u ? sd_lora_unet_view(base, u, (int)s->n, &s->unet, err)
               : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        free(u);
    }
    *out = s->unet;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

sd_status sd_lora_stack_text_encoder(sd_lora_stack *s, sd_checkpoint *c, sd_text_encoder **out,
                                     sd_error *err) {
    *out = NULL;
    sd_text_encoder *base;
    sd_status rc = sd_checkpoint_text_encoder(c, &base, err);
    if (rc || !s || !s->n) {
        if (!rc) *out = base;
        return rc;
    }
    pthread_mutex_lock(&s->lock);
    if (!s->te) {
        sd_lora_use *u = uses_of(s);
        rc = u ? sd_lora_text_encoder_view(base, u, (int)s->n, &s->te, err)
               : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        free(u);
    }
    *out = s->te;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

sd_status sd_nodes_lora_load(sd_node_ctx *ctx, sd_checkpoint *c, const char *lora_name,
                             const sd_lora_stack *model_in, const sd_lora_stack *clip_in,
                             double strength_model, double strength_clip, int with_clip,
                             sd_lora_stack **model_out, sd_lora_stack **clip_out, sd_error *err) {
    return sd_nodes_lora_load_pair(ctx, c, NULL, lora_name, model_in, clip_in, strength_model,
                                   strength_clip, with_clip, model_out, clip_out, err);
}

sd_status sd_nodes_lora_load_pair(sd_node_ctx *ctx, sd_checkpoint *c, sd_checkpoint *clip_c,
                                  const char *lora_name, const sd_lora_stack *model_in,
                                  const sd_lora_stack *clip_in, double strength_model,
                                  double strength_clip, int with_clip, sd_lora_stack **model_out,
                                  sd_lora_stack **clip_out, sd_error *err) {
    if (!clip_c) clip_c = c;
    *model_out = NULL;
    if (clip_out) *clip_out = NULL;
    char *path = NULL;
    sd_lora *lora = NULL;
    sd_lora_plan *plan = NULL;
    sd_unet *unet = NULL;
    sd_text_encoder *te = NULL;
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_LORAS, lora_name, &path, err);
    if (!rc) rc = sd_lora_open(path, &lora, err);
    if (!rc) rc = sd_checkpoint_unet(c, &unet, err);
    if (!rc && with_clip) rc = sd_checkpoint_text_encoder(clip_c, &te, err);
    if (!rc) rc = sd_lora_plan_new(lora, unet, te, &plan, err);
    if (!rc) {
        size_t nm = sd_lora_plan_count(plan, SD_LORA_UNET),
               nc = sd_lora_plan_count(plan, SD_LORA_CLIP_L) + sd_lora_plan_count(plan, SD_LORA_CLIP_G);
        char buf[1024];
        sd_lora_plan_unmatched_summary(plan, 5, buf, sizeof buf);
        if (nm + nc == 0) {
            rc = sd_error_set(err, SD_ERR_INVALID,
                              "%s: no key of this LoRA matches the model (%s); a LoRA made for "
                              "another architecture?",
                              path, buf);
        } else {
            if (buf[0]) sd_node_log(ctx, SD_LOG_WARN, "LoRA %s: %s", lora_name, buf);
            sd_node_log(ctx, SD_LOG_INFO, "LoRA %s: %zu UNet and %zu text-encoder weights patched",
                        lora_name, nm, nc);
        }
    }
    if (!rc) rc = sd_lora_stack_push(model_in, plan, strength_model, model_out, err);
    if (!rc && with_clip && clip_out) rc = sd_lora_stack_push(clip_in, plan, strength_clip, clip_out, err);
    if (rc) {
        sd_lora_stack_unref(*model_out);
        *model_out = NULL;
        sd_error_at(err, NULL, NULL, "lora_name");
    }
    sd_lora_plan_unref(plan);
    sd_lora_unref(lora);
    free(path);
    return rc;
}
