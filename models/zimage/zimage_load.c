/* zimage_load.c - binding a NextDiT checkpoint's tensors to the model, and
 * the parameter table (sd_zimage_param). Every tensor is fetched with the
 * shape the detected config implies, so a wrongly shaped one is an error
 * naming its key before any forward runs. */
#include "zimage_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef sd_dit_loader loader;

/* Linear "<p>.<name>.weight" [out, in] and its bias [out] when bias. */
static void lin(loader *ld, zi_lin *l, int64_t out, int64_t in, int bias, const char *p, const char *name) {
    sd_dit_lin(ld, &l->w, &l->b, out, in, bias, "%s.%s", p, name);
}

/* Linear "<name>.weight" [out, in] and "<name>.bias" [out]. */
static void top(loader *ld, zi_lin *l, int64_t out, int64_t in, const char *name) {
    sd_dit_lin(ld, &l->w, &l->b, out, in, 1, "%s", name);
}

static void block(loader *ld, const sd_zimage_config *c, zi_block *b, const char *what, int i, int modulated) {
    int64_t d = c->dim, hd = c->head_dim, f = c->ffn_hidden;
    int64_t qkv = (int64_t)(c->n_heads + 2 * c->n_kv_heads) * hd;
    char p[128];
    snprintf(p, sizeof p, "%s.%d", what, i);
    lin(ld, &b->qkv, qkv, d, 0, p, "attention.qkv");
    lin(ld, &b->out, d, (int64_t)c->n_heads * hd, c->out_bias, p, "attention.out");
    sd_dit_vec(ld, &b->q_norm, hd, "%s.attention.q_norm.weight", p);
    sd_dit_vec(ld, &b->k_norm, hd, "%s.attention.k_norm.weight", p);
    lin(ld, &b->w1, f, d, 0, p, "feed_forward.w1");
    lin(ld, &b->w2, d, f, 0, p, "feed_forward.w2");
    lin(ld, &b->w3, f, d, 0, p, "feed_forward.w3");
    sd_dit_vec(ld, &b->attn_norm1, d, "%s.attention_norm1.weight", p);
    sd_dit_vec(ld, &b->attn_norm2, d, "%s.attention_norm2.weight", p);
    sd_dit_vec(ld, &b->ffn_norm1, d, "%s.ffn_norm1.weight", p);
    sd_dit_vec(ld, &b->ffn_norm2, d, "%s.ffn_norm2.weight", p);
    if (modulated) lin(ld, &b->ada, 4 * d, c->adaln_dim, 1, p, "adaLN_modulation.0");
}

static void build(loader *ld, sd_zimage *m) {
    const sd_zimage_config *c = &m->cfg;
    int64_t d = c->dim, pp = (int64_t)c->patch_size * c->patch_size;
    top(ld, &m->x_embedder, d, pp * c->in_channels, "x_embedder");
    sd_dit_vec(ld, &m->cap_norm, c->cap_feat_dim, "cap_embedder.0.weight");
    top(ld, &m->cap_lin, d, c->cap_feat_dim, "cap_embedder.1");
    top(ld, &m->t_mlp0, c->t_dim, 256, "t_embedder.mlp.0");
    top(ld, &m->t_mlp2, c->adaln_dim, c->t_dim, "t_embedder.mlp.2");
    int nr = c->n_refiner_layers ? c->n_refiner_layers : 1, nl = c->n_layers ? c->n_layers : 1;
    m->noise_refiner = calloc((size_t)nr, sizeof *m->noise_refiner);
    m->context_refiner = calloc((size_t)nr, sizeof *m->context_refiner);
    m->layers = calloc((size_t)nl, sizeof *m->layers);
    if (!m->noise_refiner || !m->context_refiner || !m->layers) {
        sd_dit_nomem(ld);
        return;
    }
    for (int i = 0; i < c->n_refiner_layers; i++) {
        block(ld, c, &m->noise_refiner[i], "noise_refiner", i, 1);
        block(ld, c, &m->context_refiner[i], "context_refiner", i, 0);
    }
    for (int i = 0; i < c->n_layers; i++) block(ld, c, &m->layers[i], "layers", i, 1);
    top(ld, &m->final_ada, d, c->adaln_dim, "final_layer.adaLN_modulation.1");
    top(ld, &m->final_linear, pp * c->in_channels, d, "final_layer.linear");
    if (c->pad_tokens_multiple) {
        int64_t pad[2] = {1, d};
        sd_dit_get(ld, &m->x_pad, 2, pad, "x_pad_token");
        sd_dit_get(ld, &m->cap_pad, 2, pad, "cap_pad_token");
    }
}

sd_status sd_zimage_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                         sd_zimage **out, sd_error *err) {
    *out = NULL;
    if (!prefix) prefix = "";
    sd_zimage_config cfg;
    sd_status rc = sd_zimage_detect(f, prefix, &cfg, err);
    if (!rc) rc = sd_dit_check_dtype("Z-Image", weight_dtype, err);
    if (rc) return rc;
    sd_zimage *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the Z-Image model");
    m->be = be;
    m->cfg = cfg;
    loader ld;
    sd_dit_loader_init(&ld, "Z-Image", be, f, prefix, weight_dtype, &m->params, err);
    build(&ld, m);
    if ((rc = sd_dit_loader_finish(&ld, &m->one))) {
        sd_zimage_free(m);
        return rc;
    }
    *out = m;
    return SD_OK;
}

void sd_zimage_free(sd_zimage *m) {
    if (!m) return;
    sd_dit_params_free(&m->params);
    free(m->noise_refiner);
    free(m->context_refiner);
    free(m->layers);
    sd_bt_free(m->one);
    free(m);
}

const sd_zimage_config *sd_zimage_get_config(const sd_zimage *m) { return &m->cfg; }

void sd_zimage_set_tap(sd_zimage *m, sd_zimage_tap_fn fn, void *user) {
    m->tap = fn;
    m->tap_user = user;
}

void sd_zimage_param_each(sd_zimage *m, sd_zimage_param_fn fn, void *ud) {
    for (int i = 0; i < m->params.n; i++) fn(ud, m->params.p[i].key, m->params.p[i].slot);
}

sd_bt **sd_zimage_param(sd_zimage *m, const char *key) { return sd_dit_params_find(&m->params, key); }
