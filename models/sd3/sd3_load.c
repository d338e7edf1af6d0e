/* sd3_load.c - binding an MMDiT checkpoint's tensors to the model, and the
 * parameter table (sd_sd3_param). Every tensor is fetched with the shape the
 * detected config implies, so a wrongly shaped one is an error naming its
 * key before any forward runs. */
#include "sd3_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

typedef struct loader {
    sd_sd3 *m;
    sd_weights w;
    sd_error *err;
    int failed;
} loader;

static int remember(loader *ld, const char *key, sd_bt **slot) {
    sd_sd3 *m = ld->m;
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? m->cap_params * 2 : 256;
        sd3_param *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p) return 0;
        m->params = p;
        m->cap_params = cap;
    }
    char *k = strdup(key);
    if (!k) return 0;
    m->params[m->n_params++] = (sd3_param){k, slot};
    return 1;
}

/* *slot = the tensor `key` of the given shape (ndim dims of d). */
static void get(loader *ld, sd_bt **slot, int ndim, const int64_t *d, const char *key) {
    if (ld->failed) return;
    *slot = sd_weights_get(&ld->w, key, ndim, d, ld->err);
    if (!*slot) {
        ld->failed = 1;
        return;
    }
    if (!remember(ld, key, slot)) {
        sd_bt_free(*slot);
        *slot = NULL;
        ld->failed = 1;
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the SD3 model");
    }
}

static void vec(loader *ld, sd_bt **slot, int64_t n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void vec(loader *ld, sd_bt **slot, int64_t n, const char *fmt, ...) {
    char key[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    get(ld, slot, 1, &n, key);
}

/* Linear "<base>.weight" [out, in] and "<base>.bias" [out] when bias. */
static void lin(loader *ld, sd3_lin *l, int64_t out, int64_t in, int bias, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void lin(loader *ld, sd3_lin *l, int64_t out, int64_t in, int bias, const char *fmt, ...) {
    char base[360], key[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    int64_t s[2] = {out, in};
    snprintf(key, sizeof key, "%s.weight", base);
    get(ld, &l->w, 2, s, key);
    if (bias) {
        snprintf(key, sizeof key, "%s.bias", base);
        get(ld, &l->b, 1, &out, key);
    }
}

static void attn(loader *ld, sd3_attn *a, int pre_only, const char *base) {
    const sd_sd3_config *c = &ld->m->cfg;
    int64_t h = c->hidden_size;
    lin(ld, &a->qkv, 3 * h, h, c->qkv_bias, "%s.qkv", base);
    if (!pre_only) lin(ld, &a->proj, h, h, 1, "%s.proj", base);
    if (c->qk_norm) {
        vec(ld, &a->ln_q, c->head_dim, "%s.ln_q.weight", base);
        vec(ld, &a->ln_k, c->head_dim, "%s.ln_k.weight", base);
    }
}

static void stream(loader *ld, sd3_stream *s, int i, const char *which, int pre_only, int self_attn) {
    const sd_sd3_config *c = &ld->m->cfg;
    int64_t h = c->hidden_size;
    char base[96];
    s->pre_only = pre_only;
    s->self_attn = self_attn;
    lin(ld, &s->ada, (self_attn ? 9 : pre_only ? 2 : 6) * h, h, 1, "joint_blocks.%d.%s.adaLN_modulation.1",
        i, which);
    snprintf(base, sizeof base, "joint_blocks.%d.%s.attn", i, which);
    attn(ld, &s->attn, pre_only, base);
    if (self_attn) {
        snprintf(base, sizeof base, "joint_blocks.%d.%s.attn2", i, which);
        attn(ld, &s->attn2, 0, base);
    }
    if (!pre_only) {
        lin(ld, &s->fc1, c->mlp_hidden, h, 1, "joint_blocks.%d.%s.mlp.fc1", i, which);
        lin(ld, &s->fc2, h, c->mlp_hidden, 1, "joint_blocks.%d.%s.mlp.fc2", i, which);
    }
}

static void build(loader *ld) {
    sd_sd3 *m = ld->m;
    const sd_sd3_config *c = &m->cfg;
    int64_t h = c->hidden_size, p = c->patch_size, pp = p * p, M = c->pos_embed_max_size;
    int64_t xs[4] = {h, c->in_channels, p, p}, ps[3] = {1, M * M, h};
    get(ld, &m->x_proj_w, 4, xs, "x_embedder.proj.weight");
    vec(ld, &m->x_proj_b, h, "x_embedder.proj.bias");
    get(ld, &m->pos_embed, 3, ps, "pos_embed");
    lin(ld, &m->t0, h, 256, 1, "t_embedder.mlp.0");
    lin(ld, &m->t2, h, h, 1, "t_embedder.mlp.2");
    if (c->adm_in_channels) {
        lin(ld, &m->y0, h, c->adm_in_channels, 1, "y_embedder.mlp.0");
        lin(ld, &m->y2, h, h, 1, "y_embedder.mlp.2");
    }
    lin(ld, &m->ctx_emb, h, c->context_in_dim, 1, "context_embedder");
    m->blocks = calloc((size_t)c->depth, sizeof *m->blocks);
    if (!m->blocks) {
        ld->failed = 1;
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the SD3 model");
        return;
    }
    for (int i = 0; i < c->depth && !ld->failed; i++) {
        stream(ld, &m->blocks[i].ctx, i, "context_block", i == c->depth - 1, 0);
        stream(ld, &m->blocks[i].x, i, "x_block", 0, (int)((c->self_attn >> i) & 1));
    }
    lin(ld, &m->final_ada, 2 * h, h, 1, "final_layer.adaLN_modulation.1");
    lin(ld, &m->final_lin, pp * c->out_channels, h, 1, "final_layer.linear");
}

sd_status sd_sd3_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                      sd_sd3 **out, sd_error *err) {
    *out = NULL;
    if (!prefix) prefix = "";
    sd_sd3_config cfg;
    sd_status rc = sd_sd3_detect(f, prefix, &cfg, err);
    if (rc) return rc;
    if (!sd_dtype_is_float(weight_dtype) || weight_dtype == SD_F64)
        return sd_error_set(err, SD_ERR_INVALID, "SD3 weights cannot be kept as %s",
                            sd_dtype_name(weight_dtype));
    sd_sd3 *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the SD3 model");
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
                sd_error_set(ld.err, SD_ERR_NOMEM, "out of memory building the SD3 model");
        }
    }
    if (ld.failed) {
        sd_sd3_free(m);
        return ld.err->code ? ld.err->code : SD_ERR_INTERNAL;
    }
    *out = m;
    return SD_OK;
}

void sd_sd3_free(sd_sd3 *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) {
        sd_bt_free(*m->params[i].slot);
        free(m->params[i].key);
    }
    free(m->params);
    free(m->blocks);
    sd_bt_free(m->one);
    free(m);
}

const sd_sd3_config *sd_sd3_get_config(const sd_sd3 *m) { return &m->cfg; }
sd_backend *sd_sd3_backend(const sd_sd3 *m) { return m->be; }

void sd_sd3_set_tap(sd_sd3 *m, sd_sd3_tap_fn fn, void *user) {
    m->tap = fn;
    m->tap_user = user;
}

void sd_sd3_param_each(sd_sd3 *m, sd_sd3_param_fn fn, void *ud) {
    for (int i = 0; i < m->n_params; i++) fn(ud, m->params[i].key, m->params[i].slot);
}

sd_bt **sd_sd3_param(sd_sd3 *m, const char *key) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].key, key) == 0) return m->params[i].slot;
    return NULL;
}
