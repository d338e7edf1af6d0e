/* clip_params.c - reaching CLIP text-encoder parameters by their HF
 * (transformers) key, and cheap views of a loaded encoder (LoRA patching,
 * models/lora/lora.h). Additive to clip_load.c.
 *
 * Keys are the HF names relative to the encoder's prefix, as ComfyUI names
 * every CLIP internally (it converts OpenCLIP checkpoints to them):
 * "text_model.encoder.layers.N.self_attn.q_proj.weight". On an OpenCLIP
 * model the q/k/v projections live in the fused in_proj ([3W, W], rows q, k,
 * v): the slot is the fused tensor and *row0, *rows say which rows. */
#include "models/text/clip_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *eat(const char *s, const char *want) {
    size_t n = strlen(want);
    if (strncmp(s, want, n) != 0) return NULL;
    if (s[n] == '.') return s + n + 1;
    if (s[n] == '\0') return s + n;
    return NULL;
}

static sd_bt **wb(sd_bt **w, sd_bt **b, const char *rest) {
    if (strcmp(rest, "weight") == 0) return w;
    if (strcmp(rest, "bias") == 0) return b;
    return NULL;
}

/* q/k/v of layer l: separate tensors (HF) or rows of the fused one. */
static sd_bt **qkv(sd_clip *c, clip_layer_w *l, int which, const char *rest, int64_t *row0,
                   int64_t *rows) {
    if (!l->qkv_w) {
        sd_bt **w[3] = {&l->q_w, &l->k_w, &l->v_w}, **b[3] = {&l->q_b, &l->k_b, &l->v_b};
        return wb(w[which], b[which], rest);
    }
    int64_t W = c->cfg.hidden;
    *row0 = which * W;
    *rows = W;
    return wb(&l->qkv_w, &l->qkv_b, rest);
}

sd_bt **sd_clip_param(sd_clip *c, const char *key, int64_t *row0, int64_t *rows) {
    int64_t r0 = 0, rn = 0;
    sd_bt **slot = NULL;
    const char *s, *k = key;
    if (!c || !key) return NULL;
    if ((s = eat(k, "text_projection"))) {
        /* "text_projection.weight": the HF Linear form; bare
         * "text_projection": OpenCLIP's matmul form (for merges) */
        if (c->proj_is_linear) slot = strcmp(s, "weight") == 0 ? &c->proj : NULL;
        else slot = *s == '\0' ? &c->proj : NULL;
        goto done;
    }
    if ((s = eat(k, "text_model"))) k = s;
    if ((s = eat(k, "embeddings.token_embedding"))) {
        slot = strcmp(s, "weight") == 0 ? &c->tok_emb : NULL;
    } else if ((s = eat(k, "embeddings.position_embedding"))) {
        slot = strcmp(s, "weight") == 0 ? &c->pos_emb : NULL;
    } else if ((s = eat(k, "final_layer_norm"))) {
        slot = wb(&c->final_w, &c->final_b, s);
    } else if ((s = eat(k, "encoder.layers"))) {
        char *end;
        long i = strtol(s, &end, 10);
        if (end == s || *end != '.' || i < 0 || i >= c->cfg.layers) return NULL;
        clip_layer_w *l = &c->layer[i];
        s = end + 1;
        const char *t;
        if ((t = eat(s, "self_attn.q_proj"))) slot = qkv(c, l, 0, t, &r0, &rn);
        else if ((t = eat(s, "self_attn.k_proj"))) slot = qkv(c, l, 1, t, &r0, &rn);
        else if ((t = eat(s, "self_attn.v_proj"))) slot = qkv(c, l, 2, t, &r0, &rn);
        else if ((t = eat(s, "self_attn.out_proj"))) slot = wb(&l->o_w, &l->o_b, t);
        else if (l->qkv_w && (t = eat(s, "self_attn.in_proj"))) slot = wb(&l->qkv_w, &l->qkv_b, t);
        else if ((t = eat(s, "layer_norm1"))) slot = wb(&l->ln1_w, &l->ln1_b, t);
        else if ((t = eat(s, "layer_norm2"))) slot = wb(&l->ln2_w, &l->ln2_b, t);
        else if ((t = eat(s, "mlp.fc1"))) slot = wb(&l->fc1_w, &l->fc1_b, t);
        else if ((t = eat(s, "mlp.fc2"))) slot = wb(&l->fc2_w, &l->fc2_b, t);
    }
done:
    if (!slot || !*slot) return NULL;
    if (row0) *row0 = r0;
    if (rows) *rows = rn;
    return slot;
}

static void view_slot(sd_bt **slot, int *failed) {
    if (!*slot) return;
    sd_bt *v = sd_bt_view(*slot, (*slot)->ndim, (*slot)->shape);
    if (!v) (*failed)++;
    *slot = v;
}

sd_status sd_clip_view(const sd_clip *base, sd_clip **out, sd_error *err) {
    *out = NULL;
    sd_clip *c = malloc(sizeof *c);
    if (!c) return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a CLIP view");
    *c = *base;
    c->tap = NULL;
    c->tap_user = NULL;
    int failed = 0;
    c->layer = calloc((size_t)base->cfg.layers, sizeof *c->layer);
    if (!c->layer) {
        free(c);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a CLIP view");
    }
    for (int i = 0; i < base->cfg.layers; i++) {
        clip_layer_w *l = &c->layer[i];
        *l = base->layer[i];
        sd_bt **all[] = {&l->ln1_w, &l->ln1_b, &l->q_w,  &l->q_b,   &l->k_w,   &l->k_b,
                         &l->v_w,   &l->v_b,   &l->qkv_w, &l->qkv_b, &l->o_w,   &l->o_b,
                         &l->ln2_w, &l->ln2_b, &l->fc1_w, &l->fc1_b, &l->fc2_w, &l->fc2_b};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) view_slot(all[j], &failed);
    }
    sd_bt **top[] = {&c->tok_emb, &c->pos_emb, &c->final_w, &c->final_b, &c->proj};
    for (size_t j = 0; j < sizeof top / sizeof *top; j++) view_slot(top[j], &failed);
    if (failed) {
        sd_clip_free(c);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a CLIP view");
    }
    *out = c;
    return SD_OK;
}

/* ---- enumeration ---------------------------------------------------------------- */

static void visit(sd_clip_param_fn fn, void *ud, const char *key, sd_bt **slot) {
    if (*slot) fn(ud, key, slot);
}

void sd_clip_param_each(sd_clip *c, sd_clip_param_fn fn, void *ud) {
    if (!c || !fn) return;
    char k[160];
    visit(fn, ud, "text_model.embeddings.token_embedding.weight", &c->tok_emb);
    visit(fn, ud, "text_model.embeddings.position_embedding.weight", &c->pos_emb);
    for (int i = 0; i < c->cfg.layers; i++) {
        clip_layer_w *l = &c->layer[i];
        static const char *const mods[] = {"layer_norm1", "self_attn.q_proj", "self_attn.k_proj",
                                           "self_attn.v_proj", "self_attn.in_proj",
                                           "self_attn.out_proj", "layer_norm2", "mlp.fc1",
                                           "mlp.fc2"};
        sd_bt **slots[][2] = {{&l->ln1_w, &l->ln1_b}, {&l->q_w, &l->q_b},     {&l->k_w, &l->k_b},
                              {&l->v_w, &l->v_b},     {&l->qkv_w, &l->qkv_b}, {&l->o_w, &l->o_b},
                              {&l->ln2_w, &l->ln2_b}, {&l->fc1_w, &l->fc1_b}, {&l->fc2_w, &l->fc2_b}};
        for (size_t m = 0; m < sizeof mods / sizeof *mods; m++) {
            snprintf(k, sizeof k, "text_model.encoder.layers.%d.%s.weight", i, mods[m]);
            visit(fn, ud, k, slots[m][0]);
            snprintf(k, sizeof k, "text_model.encoder.layers.%d.%s.bias", i, mods[m]);
            visit(fn, ud, k, slots[m][1]);
        }
    }
    visit(fn, ud, "text_model.final_layer_norm.weight", &c->final_w);
    visit(fn, ud, "text_model.final_layer_norm.bias", &c->final_b);
    visit(fn, ud, c->proj_is_linear ? "text_projection.weight" : "text_projection", &c->proj);
}
