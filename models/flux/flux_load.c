/* flux_load.c - binding a Flux checkpoint's tensors to the model, and the
 * parameter table (sd_flux_param). Every tensor is fetched with the shape
 * the detected config implies, so a wrongly shaped one is an error naming
 * its key before any forward runs. */
#include "flux_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

typedef struct loader {
    sd_flux *m;
    sd_weights w;
    sd_error *err;
    int failed;
} loader;

static int remember(loader *ld, const char *key, sd_bt **slot) {
    sd_flux *m = ld->m;
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? m->cap_params * 2 : 256;
        flux_param *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p) return 0;
        m->params = p;
        m->cap_params = cap;
    }
    char *k = strdup(key);
    if (!k) return 0;
    m->params[m->n_params++] = (flux_param){k, slot};
    return 1;
}

/* *slot = the tensor key (printf) of the given shape (ndim 1 or 2). */
static void get(loader *ld, sd_bt **slot, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void get(loader *ld, sd_bt **slot, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    if (ld->failed) return;
    char key[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    *slot = sd_weights_get(&ld->w, key, ndim, shape, ld->err);
    if (!*slot) {
        ld->failed = 1;
        return;
    }
    if (!remember(ld, key, slot)) {
        sd_bt_free(*slot);
        *slot = NULL;
        ld->failed = 1;
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the Flux model");
    }
}

/* Linear "<base>.weight" [out, in] and "<base>.bias" [out] when bias. */
static void lin(loader *ld, flux_lin *l, int64_t out, int64_t in, int bias, const char *base) {
    get(ld, &l->w, 2, out, in, "%s.weight", base);
    if (bias) get(ld, &l->b, 1, out, 0, "%s.bias", base);
}

static void embedder(loader *ld, flux_embedder *e, int64_t in, int64_t hid, const char *base) {
    char b[128];
    snprintf(b, sizeof b, "%s.in_layer", base);
    lin(ld, &e->in, hid, in, 1, b);
    snprintf(b, sizeof b, "%s.out_layer", base);
    lin(ld, &e->out, hid, hid, 1, b);
}

static void stream(loader *ld, flux_stream *s, int i, const char *which) {
    const sd_flux_config *c = &ld->m->cfg;
    int64_t h = c->hidden_size, mlp = c->mlp_hidden;
    char b[128];
    snprintf(b, sizeof b, "double_blocks.%d.%s_mod.lin", i, which);
    lin(ld, &s->mod, 6 * h, h, 1, b);
    snprintf(b, sizeof b, "double_blocks.%d.%s_attn.qkv", i, which);
    lin(ld, &s->qkv, 3 * h, h, c->qkv_bias, b);
    get(ld, &s->q_norm, 1, c->head_dim, 0, "double_blocks.%d.%s_attn.norm.query_norm.scale", i, which);
    get(ld, &s->k_norm, 1, c->head_dim, 0, "double_blocks.%d.%s_attn.norm.key_norm.scale", i, which);
    snprintf(b, sizeof b, "double_blocks.%d.%s_attn.proj", i, which);
    lin(ld, &s->proj, h, h, 1, b);
    snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.0", i, which);
    lin(ld, &s->mlp0, mlp, h, 1, b);
    snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.2", i, which);
    lin(ld, &s->mlp2, h, mlp, 1, b);
}

static void build(loader *ld) {
    sd_flux *m = ld->m;
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
        ld->failed = 1;
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the Flux model");
        return;
    }
    for (int i = 0; i < c->depth && !ld->failed; i++) {
        stream(ld, &m->dbl[i].img, i, "img");
        stream(ld, &m->dbl[i].txt, i, "txt");
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
        get(ld, &s->q_norm, 1, c->head_dim, 0, "single_blocks.%d.norm.query_norm.scale", i);
        get(ld, &s->k_norm, 1, c->head_dim, 0, "single_blocks.%d.norm.key_norm.scale", i);
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
    if (rc) return rc;
    if (!sd_dtype_is_float(weight_dtype) || weight_dtype == SD_F64)
        return sd_error_set(err, SD_ERR_INVALID, "Flux weights cannot be kept as %s",
                            sd_dtype_name(weight_dtype));
    sd_flux *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the Flux model");
    m->be = be;
    m->cfg = cfg;
    sd_error local;
    sd_error_clear(&local);
    loader ld = {.m = m, .err = err ? err : &local};
    sd_weights_init(&ld.w, be, f, prefix);
    ld.w.dtype = weight_dtype;
    build(&ld);
    if (!ld.failed) {
        sd_tensor *one = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
        if (one) sd_tensor_f32(one)[0] = 1.0f;
        m->one = one ? sd_bt_from_host(be, one, SD_F32) : NULL;
        sd_tensor_unref(one);
        if (!m->one) {
            ld.failed = 1;
            if (!sd_backend_take_error(be, ld.err))
                sd_error_set(ld.err, SD_ERR_NOMEM, "out of memory building the Flux model");
        }
    }
    if (ld.failed) {
        sd_flux_free(m);
        return ld.err->code ? ld.err->code : SD_ERR_INTERNAL;
    }
    *out = m;
    return SD_OK;
}

void sd_flux_free(sd_flux *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) {
        sd_bt_free(*m->params[i].slot);
        free(m->params[i].key);
    }
    free(m->params);
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
    for (int i = 0; i < m->n_params; i++) fn(ud, m->params[i].key, m->params[i].slot);
}

sd_bt **sd_flux_param(sd_flux *m, const char *key) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].key, key) == 0) return m->params[i].slot;
    return NULL;
}

/* base's slot pointer moved into v: slots live in the model struct or in
 * its dbl / sgl arrays */
static sd_bt **moved(const sd_flux *base, sd_flux *v, sd_bt **slot) {
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
        v->params = calloc((size_t)(base->n_params ? base->n_params : 1), sizeof *v->params);
        v->n_params = v->cap_params = 0;
        v->one = NULL;
        v->tap = NULL;
        v->tap_user = NULL;
    }
    if (!v || !v->dbl || !v->sgl || !v->params) {
        if (v) {
            free(v->dbl);
            free(v->sgl);
            free(v->params);
        }
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Flux view");
    }
    memcpy(v->dbl, base->dbl, nd * sizeof *v->dbl);
    memcpy(v->sgl, base->sgl, ng * sizeof *v->sgl);
    v->cap_params = base->n_params;
    int failed = 0;
    /* every slot of v still points at base's tensor: each becomes a view
     * (owned by v) before anything can free it */
    for (int i = 0; i < base->n_params; i++) {
        sd_bt **slot = moved(base, v, base->params[i].slot);
        char *key = strdup(base->params[i].key);
        if (!slot || !key) {
            free(key);
            failed = 1;
            break;
        }
        sd_bt *t = *slot;
        *slot = sd_bt_view(t, t->ndim, t->shape);
        v->params[v->n_params++] = (flux_param){key, slot};
        if (!*slot) {
            failed = 1;
            break;
        }
    }
    if (!failed) v->one = sd_bt_view(base->one, base->one->ndim, base->one->shape);
    if (failed || !v->one) {
        /* slots not yet viewed still borrow base's tensors: clear them */
        for (int i = v->n_params; i < base->n_params; i++) {
            sd_bt **slot = moved(base, v, base->params[i].slot);
            if (slot) *slot = NULL;
        }
        sd_flux_free(v);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Flux view");
    }
    *out = v;
    return SD_OK;
}
