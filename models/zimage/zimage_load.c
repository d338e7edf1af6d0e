/* zimage_load.c - binding a NextDiT checkpoint's tensors to the model, and
 * the parameter table (sd_zimage_param). Every tensor is fetched with the
 * shape the detected config implies, so a wrongly shaped one is an error
 * naming its key before any forward runs. */
#include "zimage_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

typedef struct loader {
    sd_zimage *m;
    sd_weights w;
    sd_error *err;
    int failed;
} loader;

static int remember(loader *ld, const char *key, sd_bt **slot) {
    sd_zimage *m = ld->m;
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? m->cap_params * 2 : 256;
        zi_param *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p) return 0;
        m->params = p;
        m->cap_params = cap;
    }
    char *k = strdup(key);
    if (!k) return 0;
    m->params[m->n_params++] = (zi_param){k, slot};
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
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the Z-Image model");
    }
}

static void lin(loader *ld, zi_lin *l, int64_t out, int64_t in, int bias, const char *base) {
    get(ld, &l->w, 2, out, in, "%s.weight", base);
    if (bias) get(ld, &l->b, 1, out, 0, "%s.bias", base);
}

static void block(loader *ld, zi_block *b, const char *what, int i, int modulated) {
    const sd_zimage_config *c = &ld->m->cfg;
    int64_t d = c->dim, hd = c->head_dim, f = c->ffn_hidden;
    int64_t qkv = (int64_t)(c->n_heads + 2 * c->n_kv_heads) * hd;
    char p[128], n[192];
    snprintf(p, sizeof p, "%s.%d", what, i);
    snprintf(n, sizeof n, "%s.attention.qkv", p);
    lin(ld, &b->qkv, qkv, d, 0, n);
    snprintf(n, sizeof n, "%s.attention.out", p);
    lin(ld, &b->out, d, (int64_t)c->n_heads * hd, c->out_bias, n);
    get(ld, &b->q_norm, 1, hd, 0, "%s.attention.q_norm.weight", p);
    get(ld, &b->k_norm, 1, hd, 0, "%s.attention.k_norm.weight", p);
    snprintf(n, sizeof n, "%s.feed_forward.w1", p);
    lin(ld, &b->w1, f, d, 0, n);
    snprintf(n, sizeof n, "%s.feed_forward.w2", p);
    lin(ld, &b->w2, d, f, 0, n);
    snprintf(n, sizeof n, "%s.feed_forward.w3", p);
    lin(ld, &b->w3, f, d, 0, n);
    get(ld, &b->attn_norm1, 1, d, 0, "%s.attention_norm1.weight", p);
    get(ld, &b->attn_norm2, 1, d, 0, "%s.attention_norm2.weight", p);
    get(ld, &b->ffn_norm1, 1, d, 0, "%s.ffn_norm1.weight", p);
    get(ld, &b->ffn_norm2, 1, d, 0, "%s.ffn_norm2.weight", p);
    if (modulated) {
        snprintf(n, sizeof n, "%s.adaLN_modulation.0", p);
        lin(ld, &b->ada, 4 * d, c->adaln_dim, 1, n);
    }
}

static void build(loader *ld) {
    sd_zimage *m = ld->m;
    const sd_zimage_config *c = &m->cfg;
    int64_t d = c->dim, pp = (int64_t)c->patch_size * c->patch_size;
    lin(ld, &m->x_embedder, d, pp * c->in_channels, 1, "x_embedder");
    get(ld, &m->cap_norm, 1, c->cap_feat_dim, 0, "cap_embedder.0.weight");
    lin(ld, &m->cap_lin, d, c->cap_feat_dim, 1, "cap_embedder.1");
    lin(ld, &m->t_mlp0, c->t_dim, 256, 1, "t_embedder.mlp.0");
    lin(ld, &m->t_mlp2, c->adaln_dim, c->t_dim, 1, "t_embedder.mlp.2");
    int nr = c->n_refiner_layers ? c->n_refiner_layers : 1, nl = c->n_layers ? c->n_layers : 1;
    m->noise_refiner = calloc((size_t)nr, sizeof *m->noise_refiner);
    m->context_refiner = calloc((size_t)nr, sizeof *m->context_refiner);
    m->layers = calloc((size_t)nl, sizeof *m->layers);
    if (!m->noise_refiner || !m->context_refiner || !m->layers) {
        ld->failed = 1;
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the Z-Image model");
        return;
    }
    for (int i = 0; i < c->n_refiner_layers; i++) {
        block(ld, &m->noise_refiner[i], "noise_refiner", i, 1);
        block(ld, &m->context_refiner[i], "context_refiner", i, 0);
    }
    for (int i = 0; i < c->n_layers; i++) block(ld, &m->layers[i], "layers", i, 1);
    lin(ld, &m->final_ada, d, c->adaln_dim, 1, "final_layer.adaLN_modulation.1");
    lin(ld, &m->final_linear, pp * c->in_channels, d, 1, "final_layer.linear");
    if (c->pad_tokens_multiple) {
        get(ld, &m->x_pad, 2, 1, d, "x_pad_token");
        get(ld, &m->cap_pad, 2, 1, d, "cap_pad_token");
    }
}

sd_status sd_zimage_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                         sd_zimage **out, sd_error *err) {
    *out = NULL;
    if (!prefix) prefix = "";
    sd_zimage_config cfg;
    sd_status rc = sd_zimage_detect(f, prefix, &cfg, err);
    if (rc) return rc;
    if (!sd_dtype_is_float(weight_dtype) || weight_dtype == SD_F64)
        return sd_error_set(err, SD_ERR_INVALID, "Z-Image weights cannot be kept as %s",
                            sd_dtype_name(weight_dtype));
    sd_zimage *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the Z-Image model");
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
                sd_error_set(ld.err, SD_ERR_NOMEM, "out of memory building the Z-Image model");
        }
    }
    if (ld.failed) {
        sd_zimage_free(m);
        return ld.err->code ? ld.err->code : SD_ERR_INTERNAL;
    }
    *out = m;
    return SD_OK;
}

void sd_zimage_free(sd_zimage *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) {
        sd_bt_free(*m->params[i].slot);
        free(m->params[i].key);
    }
    free(m->params);
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
    for (int i = 0; i < m->n_params; i++) fn(ud, m->params[i].key, m->params[i].slot);
}

sd_bt **sd_zimage_param(sd_zimage *m, const char *key) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].key, key) == 0) return m->params[i].slot;
    return NULL;
}
