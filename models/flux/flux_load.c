/* flux_load.c - binding a Flux checkpoint's tensors to the model, and the
 * parameter table (sd_flux_param). Every tensor is fetched with the shape
 * the detected config implies, so a wrongly shaped one is an error naming
 * its key before any forward runs. */
#include "flux_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef sd_dit_loader loader;

/* Linear "<base>.weight" [out, in] and "<base>.bias" [out] when bias. */
static void lin(loader *ld, flux_lin *l, int64_t out, int64_t in, int bias, const char *base) {
    sd_dit_lin(ld, &l->w, &l->b, out, in, bias, "%s", base);
}

static void embedder(loader *ld, flux_embedder *e, int64_t in, int64_t hid, const char *base) {
    sd_dit_lin(ld, &e->in.w, &e->in.b, hid, in, 1, "%s.in_layer", base);
    sd_dit_lin(ld, &e->out.w, &e->out.b, hid, hid, 1, "%s.out_layer", base);
}

static void stream(loader *ld, const sd_flux_config *c, flux_stream *s, int i, const char *which) {
    int64_t h = c->hidden_size, mlp = c->mlp_hidden;
    char b[128];
    snprintf(b, sizeof b, "double_blocks.%d.%s_mod.lin", i, which);
    lin(ld, &s->mod, 6 * h, h, 1, b);
    snprintf(b, sizeof b, "double_blocks.%d.%s_attn.qkv", i, which);
    lin(ld, &s->qkv, 3 * h, h, c->qkv_bias, b);
    sd_dit_vec(ld, &s->q_norm, c->head_dim, "double_blocks.%d.%s_attn.norm.query_norm.scale", i, which);
    sd_dit_vec(ld, &s->k_norm, c->head_dim, "double_blocks.%d.%s_attn.norm.key_norm.scale", i, which);
    snprintf(b, sizeof b, "double_blocks.%d.%s_attn.proj", i, which);
    lin(ld, &s->proj, h, h, 1, b);
    snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.0", i, which);
    lin(ld, &s->mlp0, mlp, h, 1, b);
    snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.2", i, which);
    lin(ld, &s->mlp2, h, mlp, 1, b);
}

static void build(loader *ld, sd_flux *m) {
    const sd_flux_config *c = &m->cfg;
    int64_t h = c->hidden_size, pp = (int64_t)c->patch_size * c->patch_size;
    lin(ld, &m->img_in, h, c->in_channels * pp, 1, "img_in");
    embedder(ld, &m->time_in, 256, h, "time_in");
    if (c->vec_in_dim) embedder(ld, &m->vector_in, c->vec_in_dim, h, "vector_in");
    if (c->guidance_embed) embedder(ld, &m->guidance_in, 256, h, "guidance_in");
    lin(ld, &m->txt_in, h, c->context_in_dim, 1, "txt_in");
    m->dbl = calloc((size_t)(c->depth ? c->depth : 1), sizeof *m->dbl);
    m->sgl = calloc((size_t)(c->depth_single_blocks ? c->depth_single_blocks : 1), sizeof *m->sgl);
    if (!m->dbl || !m->sgl) {
        sd_dit_nomem(ld);
        return;
    }
    for (int i = 0; i < c->depth && !ld->failed; i++) {
        stream(ld, c, &m->dbl[i].img, i, "img");
        stream(ld, c, &m->dbl[i].txt, i, "txt");
    }
    for (int i = 0; i < c->depth_single_blocks && !ld->failed; i++) {
        flux_single *s = &m->sgl[i];
        char b[128];
        snprintf(b, sizeof b, "single_blocks.%d.modulation.lin", i);
        lin(ld, &s->mod, 3 * h, h, 1, b);
        snprintf(b, sizeof b, "single_blocks.%d.linear1", i);
        lin(ld, &s->linear1, 3 * h + c->mlp_hidden, h, 1, b);
        snprintf(b, sizeof b, "single_blocks.%d.linear2", i);
        lin(ld, &s->linear2, h, h + c->mlp_hidden, 1, b);
        sd_dit_vec(ld, &s->q_norm, c->head_dim, "single_blocks.%d.norm.query_norm.scale", i);
        sd_dit_vec(ld, &s->k_norm, c->head_dim, "single_blocks.%d.norm.key_norm.scale", i);
    }
    lin(ld, &m->final_ada, 2 * h, h, 1, "final_layer.adaLN_modulation.1");
    lin(ld, &m->final_linear, pp * c->out_channels, h, 1, "final_layer.linear");
}

sd_status sd_flux_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                       sd_flux **out, sd_error *err) {
    *out = NULL;
    if (!prefix) prefix = "";
    sd_flux_config cfg;
    sd_status rc = sd_flux_detect(f, prefix, &cfg, err);
    if (!rc) rc = sd_dit_check_dtype("Flux", weight_dtype, err);
    if (rc) return rc;
    sd_flux *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the Flux model");
    m->be = be;
    m->cfg = cfg;
    loader ld;
    sd_dit_loader_init(&ld, "Flux", be, f, prefix, weight_dtype, &m->params, err);
    build(&ld, m);
    if ((rc = sd_dit_loader_finish(&ld, &m->one))) {
        sd_flux_free(m);
        return rc;
    }
    *out = m;
    return SD_OK;
}

void sd_flux_free(sd_flux *m) {
    if (!m) return;
    sd_dit_params_free(&m->params);
    free(m->dbl);
    free(m->sgl);
    sd_bt_free(m->one);
    free(m);
}

const sd_flux_config *sd_flux_get_config(const sd_flux *m) { return &m->cfg; }
sd_backend *sd_flux_backend(const sd_flux *m) { return m->be; }

void sd_flux_set_tap(sd_flux *m, sd_flux_tap_fn fn, void *user) {
    m->tap = fn;
    m->tap_user = user;
}

void sd_flux_param_each(sd_flux *m, sd_flux_param_fn fn, void *ud) {
    for (int i = 0; i < m->params.n; i++) fn(ud, m->params.p[i].key, m->params.p[i].slot);
}

sd_bt **sd_flux_param(sd_flux *m, const char *key) { return sd_dit_params_find(&m->params, key); }

/* base's slot pointer moved into v: slots live in the model struct or in
 * its dbl / sgl arrays */
static sd_bt **moved(const void *basep, void *vp, sd_bt **slot) {
    const sd_flux *base = basep;
    sd_flux *v = vp;
    const char *p = (const char *)slot;
    const char *b = (const char *)base, *d = (const char *)base->dbl, *g = (const char *)base->sgl;
    size_t nd = (size_t)(base->cfg.depth ? base->cfg.depth : 1) * sizeof *base->dbl;
    size_t ng = (size_t)(base->cfg.depth_single_blocks ? base->cfg.depth_single_blocks : 1) * sizeof *base->sgl;
    if (p >= b && p < b + sizeof *base) return (sd_bt **)((char *)v + (p - b));
    if (p >= d && p < d + nd) return (sd_bt **)((char *)v->dbl + (p - d));
    if (p >= g && p < g + ng) return (sd_bt **)((char *)v->sgl + (p - g));
    return NULL;
}

sd_status sd_flux_view(const sd_flux *base, sd_flux **out, sd_error *err) {
    *out = NULL;
    size_t nd = (size_t)(base->cfg.depth ? base->cfg.depth : 1);
    size_t ng = (size_t)(base->cfg.depth_single_blocks ? base->cfg.depth_single_blocks : 1);
    sd_flux *v = calloc(1, sizeof *v);
    if (v) {
        *v = *base;
        v->dbl = malloc(nd * sizeof *v->dbl);
        v->sgl = malloc(ng * sizeof *v->sgl);
        v->params = (sd_dit_params){0};
        v->one = NULL;
        v->tap = NULL;
        v->tap_user = NULL;
    }
    if (!v || !v->dbl || !v->sgl) {
        if (v) {
            free(v->dbl);
            free(v->sgl);
        }
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Flux view");
    }
    memcpy(v->dbl, base->dbl, nd * sizeof *v->dbl);
    memcpy(v->sgl, base->sgl, ng * sizeof *v->sgl);
    sd_status rc =
        sd_dit_params_rebind(&base->params, &v->params, base, v, moved, base->one, &v->one, base->be, "a Flux view", err);
    if (rc) {
        sd_flux_free(v);
        return rc;
    }
    *out = v;
    return SD_OK;
}
