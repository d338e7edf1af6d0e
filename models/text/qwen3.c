/* qwen3.c - the Qwen3 decoder: configuration from shapes, weight binding and
 * the forward pass (ComfyUI's comfy/text_encoders/llama.py operation order).
 *
 * Every helper borrows its inputs and returns a new tensor, or NULL once an
 * op failed (the backend's sticky error says why). */
#include "models/text/qwen3.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

typedef struct q3_layer {
    sd_bt *ln_in, *q, *k, *v, *o, *q_norm, *k_norm;
    sd_bt *ln_post, *gate, *up, *down;
} q3_layer;

struct sd_qwen3 {
    sd_backend *be;
    sd_qwen3_config cfg;
    sd_bt *embed;
    q3_layer *layer;
    sd_bt *norm;
    sd_qwen3_tap_fn tap;
    void *tap_user;
};

#define LAYER "model.layers.%d."
#define ATT LAYER "self_attn."
#define MLP LAYER "mlp."

/* ---- loading ----------------------------------------------------------------- */

static int has_fmt(const sd_weights *w, const char *fmt, int i) {
    char name[256];
    snprintf(name, sizeof name, fmt, i);
    return sd_weights_has(w, name);
}

static int shape_fmt(const sd_weights *w, const char *fmt, int i, int64_t s[SD_MAX_DIMS]) {
    char name[256];
    snprintf(name, sizeof name, fmt, i);
    return sd_weights_shape(w, name, s);
}

int sd_qwen3_present(const sd_st_file *f, const char *prefix) {
    sd_weights w;
    sd_weights_init(&w, NULL, (sd_st_file *)f, prefix ? prefix : "");
    return sd_weights_has(&w, "model.embed_tokens.weight") && has_fmt(&w, ATT "q_norm.weight", 0);
}

int sd_qwen3_width(const sd_st_file *f, const char *prefix) {
    sd_weights w;
    int64_t s[SD_MAX_DIMS];
    sd_weights_init(&w, NULL, (sd_st_file *)f, prefix ? prefix : "");
    if (!sd_qwen3_present(f, prefix) || shape_fmt(&w, LAYER "post_attention_layernorm.weight", 0, s) != 1)
        return 0;
    return s[0] > 0 && s[0] < (1 << 20) ? (int)s[0] : 0;
}

typedef struct loader {
    sd_weights w;
    sd_error *err;
    int failed;
} loader;

static sd_bt *get(loader *ld, int ndim, int64_t d0, int64_t d1, const char *fmt, int i) {
    if (ld->failed) return NULL;
    int64_t shape[2] = {d0, d1};
    sd_bt *t = sd_weights_getf(&ld->w, ld->err, ndim, shape, fmt, i);
    if (!t) ld->failed = 1;
    return t;
}

void sd_qwen3_free(sd_qwen3 *m) {
    if (!m) return;
    for (int i = 0; m->layer && i < m->cfg.layers; i++) {
        q3_layer *l = &m->layer[i];
        sd_bt *all[] = {l->ln_in, l->q, l->k, l->v, l->o, l->q_norm, l->k_norm, l->ln_post,
                        l->gate, l->up, l->down};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) sd_bt_free(all[k]);
    }
    free(m->layer);
    sd_bt_free(m->embed);
    sd_bt_free(m->norm);
    free(m);
}

const sd_qwen3_config *sd_qwen3_get_config(const sd_qwen3 *m) { return &m->cfg; }
sd_backend *sd_qwen3_backend(const sd_qwen3 *m) { return m->be; }

void sd_qwen3_set_tap(sd_qwen3 *m, sd_qwen3_tap_fn fn, void *user) {
    m->tap = fn;
    m->tap_user = user;
}

static sd_status shape_error(const sd_weights *w, const char *name, const char *want, sd_error *err) {
    char key[600];
    return sd_error_set(err, SD_ERR_FORMAT, "%s: Qwen3 tensor '%s' %s", sd_st_path(w->file),
                        sd_weights_key(w, name, key, sizeof key), want);
}

sd_status sd_qwen3_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_qwen3 **out,
                        sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    if (!prefix) prefix = "";
    if (!sd_qwen3_present(f, prefix))
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "%s: no Qwen3 decoder under '%s' (expected model.embed_tokens.weight and "
                            "model.layers.0.self_attn.q_norm.weight)",
                            sd_st_path(f), prefix);
    loader ld = {.err = err};
    sd_weights_init(&ld.w, be, f, prefix);
    sd_qwen3_config cfg = {.eps = 1e-6f, .rope_theta = 1000000.0};
    int64_t s[SD_MAX_DIMS];
    if (sd_weights_shape(&ld.w, "model.embed_tokens.weight", s) != 2 || s[0] < 1 || s[1] < 1 ||
        s[1] > (1 << 20))
        return shape_error(&ld.w, "model.embed_tokens.weight", "is not a [vocab, hidden] table", err);
    cfg.vocab = (int)s[0];
    cfg.hidden = (int)s[1];
    if (shape_fmt(&ld.w, ATT "q_norm.weight", 0, s) != 1 || s[0] < 2 || s[0] % 2 || s[0] > 4096)
        return shape_error(&ld.w, "model.layers.0.self_attn.q_norm.weight",
                           "is not an even head width [head_dim]", err);
    cfg.head_dim = (int)s[0];
    if (shape_fmt(&ld.w, ATT "q_proj.weight", 0, s) != 2 || s[1] != cfg.hidden || s[0] % cfg.head_dim ||
        s[0] < cfg.head_dim)
        return shape_error(&ld.w, "model.layers.0.self_attn.q_proj.weight",
                           "is not [heads * head_dim, hidden]", err);
    cfg.heads = (int)(s[0] / cfg.head_dim);
    if (shape_fmt(&ld.w, ATT "k_proj.weight", 0, s) != 2 || s[1] != cfg.hidden || s[0] % cfg.head_dim ||
        s[0] < cfg.head_dim || cfg.heads % (int)(s[0] / cfg.head_dim))
        return shape_error(&ld.w, "model.layers.0.self_attn.k_proj.weight",
                           "is not [kv_heads * head_dim, hidden] with kv_heads dividing the heads", err);
    cfg.kv_heads = (int)(s[0] / cfg.head_dim);
    if (shape_fmt(&ld.w, MLP "gate_proj.weight", 0, s) != 2 || s[1] != cfg.hidden || s[0] < 1)
        return shape_error(&ld.w, "model.layers.0.mlp.gate_proj.weight", "is not [intermediate, hidden]",
                           err);
    cfg.intermediate = (int)s[0];
    while (cfg.layers < 100000 && has_fmt(&ld.w, LAYER "input_layernorm.weight", cfg.layers)) cfg.layers++;

    sd_qwen3 *m = calloc(1, sizeof *m);
    if (m) m->layer = calloc((size_t)cfg.layers, sizeof *m->layer);
    if (!m || !m->layer) {
        free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the Qwen3 decoder");
    }
    m->be = be;
    m->cfg = cfg;
    int64_t D = cfg.hidden, HD = cfg.head_dim, Q = (int64_t)cfg.heads * HD,
            KV = (int64_t)cfg.kv_heads * HD, F = cfg.intermediate;
    m->embed = get(&ld, 2, cfg.vocab, D, "model.embed_tokens.weight", 0);
    for (int i = 0; i < cfg.layers; i++) {
        q3_layer *l = &m->layer[i];
        l->ln_in = get(&ld, 1, D, 0, LAYER "input_layernorm.weight", i);
        l->q = get(&ld, 2, Q, D, ATT "q_proj.weight", i);
        l->k = get(&ld, 2, KV, D, ATT "k_proj.weight", i);
        l->v = get(&ld, 2, KV, D, ATT "v_proj.weight", i);
        l->o = get(&ld, 2, D, Q, ATT "o_proj.weight", i);
        l->q_norm = get(&ld, 1, HD, 0, ATT "q_norm.weight", i);
        l->k_norm = get(&ld, 1, HD, 0, ATT "k_norm.weight", i);
        l->ln_post = get(&ld, 1, D, 0, LAYER "post_attention_layernorm.weight", i);
        l->gate = get(&ld, 2, F, D, MLP "gate_proj.weight", i);
        l->up = get(&ld, 2, F, D, MLP "up_proj.weight", i);
        l->down = get(&ld, 2, D, F, MLP "down_proj.weight", i);
    }
    m->norm = get(&ld, 1, D, 0, "model.norm.weight", 0);
    if (ld.failed) {
        sd_qwen3_free(m);
        return err->code;
    }
    *out = m;
    return SD_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

static void tap(const sd_qwen3 *m, const char *name, const sd_bt *t) {
    if (m->tap && t) m->tap(m->tap_user, name, t);
}

/* Token embeddings [n, len, D], vectors spliced in as x * keep + vec. */
static sd_bt *embed(const sd_qwen3 *m, const sd_qwen3_tokens *in, sd_error *err) {
    int64_t n = in->n, len = in->len, D = m->cfg.hidden, slots = n * len;
    sd_tensor *ids = sd_tensor_new4(SD_I32, 2, n, len, 0, 0);
    if (!ids) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory for %lld token ids", (long long)slots);
        return NULL;
    }
    int32_t *id = ids->data;
    int any_vec = 0;
    for (int64_t i = 0; i < slots; i++) {
        if (in->vectors && in->vectors[i]) {
            id[i] = 0;
            any_vec = 1;
            continue;
        }
        id[i] = in->ids[i];
        if (id[i] < 0 || id[i] >= m->cfg.vocab) {
            sd_error_set(err, SD_ERR_INVALID,
                         "Qwen3: token id %d (sequence %lld, position %lld) outside the vocabulary of %d",
                         (int)id[i], (long long)(i / len), (long long)(i % len), m->cfg.vocab);
            sd_tensor_unref(ids);
            return NULL;
        }
    }
    sd_bt *ib = sd_bt_from_host(m->be, ids, SD_I32);
    sd_tensor_unref(ids);
    sd_bt *x = ib ? sd_op_embedding(m->embed, ib) : NULL;
    sd_bt_free(ib);
    if (!x || !any_vec) return x;
    sd_tensor *keep = sd_tensor_new4(SD_F32, 3, n, len, 1, 0);
    sd_tensor *vec = sd_tensor_new4(SD_F32, 3, n, len, D, 0);
    sd_bt *kb = NULL, *vb = NULL;
    if (keep && vec) {
        float *kp = keep->data, *vp = vec->data;
        for (int64_t i = 0; i < slots; i++) {
            const float *v = in->vectors[i];
            kp[i] = v ? 0.0f : 1.0f;
            if (v) memcpy(vp + i * D, v, (size_t)D * sizeof *vp);
        }
        kb = sd_bt_from_host(m->be, keep, SD_F32);
        vb = sd_bt_from_host(m->be, vec, SD_F32);
    } else {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory for embedding vectors");
        step(&x, NULL);
    }
    if (x && kb && vb && step(&x, sd_op_mul(x, kb))) step(&x, sd_op_add(x, vb));
    else if (x) step(&x, NULL);
    sd_tensor_unref(keep);
    sd_tensor_unref(vec);
    sd_bt_free(kb);
    sd_bt_free(vb);
    return x;
}

/* (cos, sin) [len, hd/2, 2] of ComfyUI's precompute_freqs_cis: float32
 * inv_freq = 1 / theta^(2i/hd), angle = inv_freq * position. */
static sd_bt *rope_table(const sd_qwen3 *m, int64_t len, sd_error *err) {
    int half = m->cfg.head_dim / 2;
    sd_tensor *t = sd_tensor_new4(SD_F32, 3, len, half, 2, 0);
    if (!t) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory for a %lld-token rotary table", (long long)len);
        return NULL;
    }
    float *p = t->data;
    float theta = (float)m->cfg.rope_theta;
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)m->cfg.head_dim;
        float inv = 1.0f / powf(theta, e);
        for (int64_t pos = 0; pos < len; pos++) {
            float a = inv * (float)pos;
            p[(pos * half + i) * 2] = cosf(a);
            p[(pos * half + i) * 2 + 1] = sinf(a);
        }
    }
    sd_bt *b = sd_bt_from_host(m->be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

/* The padding mask as an additive bias [n, 1, 1, len] (-inf on masked keys),
 * or NULL (no mask given, or every key attended). */
static sd_bt *mask_bias(const sd_qwen3 *m, const sd_qwen3_tokens *in, int *oom) {
    *oom = 0;
    int64_t slots = (int64_t)in->n * in->len;
    int any = 0;
    for (int64_t i = 0; in->mask && i < slots; i++) any |= !in->mask[i];
    if (!any) return NULL;
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, in->n, 1, 1, in->len);
    if (!t) {
        *oom = 1;
        return NULL;
    }
    for (int64_t i = 0; i < slots; i++) ((float *)t->data)[i] = in->mask[i] ? 0.0f : -INFINITY;
    sd_bt *b = sd_bt_from_host(m->be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

/* RMSNorm of each head of x [N, L, heads*hd] over hd with gamma [hd]. */
static sd_bt *head_norm(const sd_qwen3 *m, sd_bt *x, int heads, sd_bt *gamma) {
    int64_t s4[4] = {x->shape[0], x->shape[1], heads, m->cfg.head_dim};
    sd_bt *v = sd_bt_view(x, 4, s4);
    sd_bt *n = v ? sd_op_rms_norm(v, gamma, m->cfg.eps) : NULL;
    sd_bt_free(v);
    if (!n) return NULL;
    int64_t s3[3] = {x->shape[0], x->shape[1], (int64_t)heads * m->cfg.head_dim};
    sd_bt *r = sd_bt_view(n, 3, s3);
    sd_bt *c = r ? sd_op_copy(r) : NULL; /* a view must not outlive its source */
    sd_bt_free(r);
    sd_bt_free(n);
    return c;
}

static sd_bt *attention(const sd_qwen3 *m, const q3_layer *l, sd_bt *h, sd_bt *rot, sd_bt *bias) {
    const sd_qwen3_config *c = &m->cfg;
    sd_bt *q = sd_op_linear(h, l->q, NULL);
    sd_bt *k = q ? sd_op_linear(h, l->k, NULL) : NULL;
    sd_bt *v = k ? sd_op_linear(h, l->v, NULL) : NULL;
    sd_bt *a = NULL;
    if (v && step(&q, head_norm(m, q, c->heads, l->q_norm)) && step(&k, head_norm(m, k, c->kv_heads, l->k_norm)) &&
        step(&q, sd_op_rope(q, rot, c->heads, 0)) && step(&k, sd_op_rope(k, rot, c->kv_heads, 0))) {
        sd_attn_opts o = {.scale = (float)pow((double)c->head_dim, -0.5), .causal = 1,
                          .kv_heads = c->kv_heads, .bias = bias};
        a = sd_op_attention_ex(q, k, v, c->heads, &o);
    }
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    if (a) step(&a, sd_op_linear(a, l->o, NULL));
    return a;
}

/* One decoder layer; x borrowed. */
static sd_bt *layer_forward(const sd_qwen3 *m, const q3_layer *l, sd_bt *x, sd_bt *rot, sd_bt *bias) {
    sd_bt *h = NULL, *a = NULL, *y = NULL, *g = NULL;
    if (!(h = sd_op_rms_norm(x, l->ln_in, m->cfg.eps))) goto fail;
    if (!(a = attention(m, l, h, rot, bias))) goto fail;
    if (!(y = sd_op_add(x, a))) goto fail;
    if (!step(&h, sd_op_rms_norm(y, l->ln_post, m->cfg.eps))) goto fail;
    if (!(g = sd_op_linear(h, l->gate, NULL))) goto fail;
    if (!step(&g, sd_op_silu(g))) goto fail;
    if (!step(&h, sd_op_linear(h, l->up, NULL))) goto fail;
    if (!step(&h, sd_op_mul(g, h))) goto fail;
    if (!step(&h, sd_op_linear(h, l->down, NULL))) goto fail;
    if (!step(&y, sd_op_add(y, h))) goto fail;
    sd_bt_free(h);
    sd_bt_free(a);
    sd_bt_free(g);
    return y;
fail:
    sd_bt_free(h);
    sd_bt_free(a);
    sd_bt_free(g);
    sd_bt_free(y);
    return NULL;
}

sd_status sd_qwen3_forward(sd_qwen3 *m, const sd_qwen3_tokens *in, int layer, int final_norm,
                           sd_bt **out, sd_error *err) {
    *out = NULL;
    const sd_qwen3_config *cfg = &m->cfg;
    if (!in || in->n < 1 || in->len < 1 || !in->ids || (int64_t)in->len * in->len > (1ll << 31))
        return sd_error_set(err, SD_ERR_INVALID, "Qwen3: %d sequences of %d tokens", in ? in->n : 0,
                            in ? in->len : 0);
    if (layer < -cfg->layers || layer > -1)
        return sd_error_set(err, SD_ERR_INVALID, "Qwen3: layer %d outside -%d..-1", layer, cfg->layers);
    if (sd_backend_precision(m->be) == SD_PREC_F16)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "Qwen3 cannot compute in f16 (its activations overflow it); use f32 or "
                            "bf16 for the text encoder");
    int sel = cfg->layers + layer;
    sd_backend_clear_error(m->be);
    sd_error local;
    sd_error_clear(&local);
    int oom = 0;
    sd_bt *x = NULL, *rot = NULL, *bias = mask_bias(m, in, &oom);
    if (oom) {
        sd_error_set(&local, SD_ERR_NOMEM, "out of memory for the attention mask");
        goto done;
    }
    if (!(rot = rope_table(m, in->len, &local))) goto done;
    if (!(x = embed(m, in, &local))) goto done;
    tap(m, "embeddings", x);
    for (int i = 0; i <= sel; i++) {
        if (in->stop && *in->stop) {
            sd_error_set(&local, SD_ERR_CANCELLED, "interrupted");
            goto done;
        }
        if (!step(&x, layer_forward(m, &m->layer[i], x, rot, bias))) goto done;
        char name[32];
        snprintf(name, sizeof name, "layers.%d", i);
        tap(m, name, x);
    }
    if (final_norm) {
        sd_bt *n = sd_op_rms_norm(x, m->norm, cfg->eps);
        tap(m, "norm", n);
        *out = n;
    } else {
        *out = x;
        x = NULL;
    }
done:
    sd_bt_free(x);
    sd_bt_free(rot);
    sd_bt_free(bias);
    sd_status rc = local.code;
    if (rc != SD_OK) {
        if (err) *err = local;
    } else {
        rc = sd_backend_take_error(m->be, err);
        if (rc == SD_OK && !*out) rc = sd_error_set(err, SD_ERR_INTERNAL, "Qwen3: no output");
    }
    sd_backend_clear_error(m->be);
    if (rc != SD_OK) {
        sd_bt_free(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- parameters by key, views (LoRA patching, models/lora/lora.h) ----------------- */

/* Layer parameters in ComfyUI's state-dict order (llama.py TransformerBlock:
 * self_attn, mlp, input_layernorm, post_attention_layernorm). */
static const struct {
    const char *name;
    size_t off;
} q3_map[] = {
    {"self_attn.q_proj.weight", offsetof(q3_layer, q)},
    {"self_attn.k_proj.weight", offsetof(q3_layer, k)},
    {"self_attn.v_proj.weight", offsetof(q3_layer, v)},
    {"self_attn.o_proj.weight", offsetof(q3_layer, o)},
    {"self_attn.q_norm.weight", offsetof(q3_layer, q_norm)},
    {"self_attn.k_norm.weight", offsetof(q3_layer, k_norm)},
    {"mlp.gate_proj.weight", offsetof(q3_layer, gate)},
    {"mlp.up_proj.weight", offsetof(q3_layer, up)},
    {"mlp.down_proj.weight", offsetof(q3_layer, down)},
    {"input_layernorm.weight", offsetof(q3_layer, ln_in)},
    {"post_attention_layernorm.weight", offsetof(q3_layer, ln_post)},
};

sd_bt **sd_qwen3_param(sd_qwen3 *m, const char *key) {
    if (!m || !key) return NULL;
    sd_bt **slot = NULL;
    if (strcmp(key, "model.embed_tokens.weight") == 0) {
        slot = &m->embed;
    } else if (strcmp(key, "model.norm.weight") == 0) {
        slot = &m->norm;
    } else if (strncmp(key, "model.layers.", 13) == 0) {
        char *end;
        long i = strtol(key + 13, &end, 10);
        if (end == key + 13 || *end != '.' || i < 0 || i >= m->cfg.layers) return NULL;
        for (size_t j = 0; j < sizeof q3_map / sizeof *q3_map; j++)
            if (strcmp(end + 1, q3_map[j].name) == 0) slot = (sd_bt **)((char *)&m->layer[i] + q3_map[j].off);
    }
    return slot && *slot ? slot : NULL;
}

void sd_qwen3_param_each(sd_qwen3 *m, sd_qwen3_param_fn fn, void *ud) {
    if (!m || !fn) return;
    char k[160];
    fn(ud, "model.embed_tokens.weight", &m->embed);
    for (int i = 0; i < m->cfg.layers; i++)
        for (size_t j = 0; j < sizeof q3_map / sizeof *q3_map; j++) {
            snprintf(k, sizeof k, "model.layers.%d.%s", i, q3_map[j].name);
            fn(ud, k, (sd_bt **)((char *)&m->layer[i] + q3_map[j].off));
        }
    fn(ud, "model.norm.weight", &m->norm);
}

sd_status sd_qwen3_view(const sd_qwen3 *base, sd_qwen3 **out, sd_error *err) {
    *out = NULL;
    sd_qwen3 *m = malloc(sizeof *m);
    if (m) {
        *m = *base;
        m->layer = calloc((size_t)base->cfg.layers, sizeof *m->layer);
    }
    if (!m || !m->layer) {
        free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Qwen3 view");
    }
    m->tap = NULL;
    m->tap_user = NULL;
    int failed = 0;
    sd_bt **top[] = {&m->embed, &m->norm};
    for (int i = 0; i < base->cfg.layers; i++) m->layer[i] = base->layer[i];
    for (int i = -1; i < base->cfg.layers; i++) {
        sd_bt **all[11];
        int n = 0;
        if (i < 0) {
            all[n++] = top[0];
            all[n++] = top[1];
        } else {
            for (size_t j = 0; j < sizeof q3_map / sizeof *q3_map; j++)
                all[n++] = (sd_bt **)((char *)&m->layer[i] + q3_map[j].off);
        }
        for (int j = 0; j < n; j++) {
            if (!*all[j]) continue;
            sd_bt *v = sd_bt_view(*all[j], (*all[j])->ndim, (*all[j])->shape);
            if (!v) failed++;
            *all[j] = v;
        }
    }
    if (failed) {
        sd_qwen3_free(m);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Qwen3 view");
    }
    *out = m;
    return SD_OK;
}
