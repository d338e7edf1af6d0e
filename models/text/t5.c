/* t5.c - the T5 encoder: configuration from shapes, weight binding and the
 * forward pass (ComfyUI's comfy/text_encoders/t5.py operation order).
 *
 * Every helper borrows its inputs and returns a new tensor, or NULL once an
 * op failed (the backend's sticky error says why). */
#include "models/text/t5.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

typedef struct t5_block {
    sd_bt *ln0, *q, *k, *v, *o, *rel_bias; /* rel_bias: block 0, or every block (UMT5) */
    sd_bt *ln1, *wi0, *wi1, *wo;           /* wi1 NULL when not gated (wi0 = wi) */
} t5_block;

struct sd_t5 {
    sd_backend *be;
    sd_t5_config cfg;
    sd_bt *shared;
    t5_block *block;
    sd_bt *final_ln;
    sd_t5_tap_fn tap;
    void *tap_user;
};

#define BLK "encoder.block.%d."
#define ATT BLK "layer.0.SelfAttention."
#define FF BLK "layer.1.DenseReluDense."

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

int sd_t5_present(const sd_st_file *f, const char *prefix) {
    sd_weights w;
    sd_weights_init(&w, NULL, (sd_st_file *)f, prefix);
    return has_fmt(&w, ATT "q.weight", 0) && has_fmt(&w, ATT "relative_attention_bias.weight", 0);
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

void sd_t5_free(sd_t5 *m) {
    if (!m) return;
    for (int i = 0; m->block && i < m->cfg.layers; i++) {
        t5_block *b = &m->block[i];
        sd_bt *all[] = {b->ln0, b->q, b->k, b->v, b->o, b->rel_bias, b->ln1, b->wi0, b->wi1, b->wo};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) sd_bt_free(all[k]);
    }
    free(m->block);
    sd_bt_free(m->shared);
    sd_bt_free(m->final_ln);
    free(m);
}

const sd_t5_config *sd_t5_get_config(const sd_t5 *m) { return &m->cfg; }
sd_backend *sd_t5_backend(const sd_t5 *m) { return m->be; }

void sd_t5_set_tap(sd_t5 *m, sd_t5_tap_fn fn, void *user) {
    m->tap = fn;
    m->tap_user = user;
}

static sd_status shape_error(const sd_weights *w, const char *name, const char *want,
                             sd_error *err) {
    char key[600];
    return sd_error_set(err, SD_ERR_FORMAT, "%s: T5 tensor '%s' %s", sd_st_path(w->file),
                        sd_weights_key(w, name, key, sizeof key), want);
}

sd_status sd_t5_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_t5 **out,
                     sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    if (!prefix) prefix = "";
    if (!sd_t5_present(f, prefix))
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "%s: no T5 encoder under '%s' (expected "
                            "encoder.block.0.layer.0.SelfAttention.q.weight and its "
                            "relative_attention_bias)",
                            sd_st_path(f), prefix);
    loader ld = {.err = err};
    sd_weights_init(&ld.w, be, f, prefix);
    sd_t5_config cfg = {.max_distance = 128, .eps = 1e-6f};
    int64_t s[SD_MAX_DIMS];
    const char *table = sd_weights_has(&ld.w, "shared.weight") ? "shared.weight"
                                                                : "encoder.embed_tokens.weight";
    if (sd_weights_shape(&ld.w, table, s) != 2 || s[0] < 1 || s[1] < 1)
        return shape_error(&ld.w, table, "is missing or not a [vocab, d_model] table", err);
    cfg.vocab = (int)s[0];
    cfg.d_model = (int)s[1];
    if (shape_fmt(&ld.w, ATT "relative_attention_bias.weight", 0, s) != 2 || s[0] < 2 || s[1] < 1)
        return shape_error(&ld.w, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                           "is not a [buckets, heads] table", err);
    cfg.buckets = (int)s[0];
    cfg.heads = (int)s[1];
    if (shape_fmt(&ld.w, ATT "q.weight", 0, s) != 2 || s[1] != cfg.d_model || s[0] % cfg.heads)
        return shape_error(&ld.w, "encoder.block.0.layer.0.SelfAttention.q.weight",
                           "is not [heads * d_kv, d_model]", err);
    cfg.d_kv = (int)(s[0] / cfg.heads);
    int64_t inner = s[0];
    while (cfg.layers < 100000 && has_fmt(&ld.w, BLK "layer.0.layer_norm.weight", cfg.layers)) cfg.layers++;
    cfg.gated = has_fmt(&ld.w, FF "wi_0.weight", 0);
    cfg.act = cfg.gated ? SD_T5_ACT_GELU_TANH : SD_T5_ACT_RELU;
    const char *wi_name = cfg.gated ? FF "wi_0.weight" : FF "wi.weight";
    if (shape_fmt(&ld.w, wi_name, 0, s) != 2 || s[1] != cfg.d_model || s[0] < 1)
        return shape_error(&ld.w, cfg.gated ? "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"
                                            : "encoder.block.0.layer.1.DenseReluDense.wi.weight",
                           "is missing or not [d_ff, d_model]", err);
    cfg.d_ff = (int)s[0];
    cfg.bias_per_block = cfg.layers > 1 && has_fmt(&ld.w, ATT "relative_attention_bias.weight", 1);

    sd_t5 *m = calloc(1, sizeof *m);
    if (m) m->block = calloc((size_t)cfg.layers, sizeof *m->block);
    if (!m || !m->block) {
        free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the T5 encoder");
    }
    m->be = be;
    m->cfg = cfg;
    int64_t D = cfg.d_model, F = cfg.d_ff;
    m->shared = get(&ld, 2, cfg.vocab, D, table, 0);
    for (int i = 0; i < cfg.layers; i++) {
        t5_block *b = &m->block[i];
        b->ln0 = get(&ld, 1, D, 0, BLK "layer.0.layer_norm.weight", i);
        b->q = get(&ld, 2, inner, D, ATT "q.weight", i);
        b->k = get(&ld, 2, inner, D, ATT "k.weight", i);
        b->v = get(&ld, 2, inner, D, ATT "v.weight", i);
        b->o = get(&ld, 2, D, inner, ATT "o.weight", i);
        if (i == 0 || cfg.bias_per_block)
            b->rel_bias = get(&ld, 2, cfg.buckets, cfg.heads, ATT "relative_attention_bias.weight", i);
        b->ln1 = get(&ld, 1, D, 0, BLK "layer.1.layer_norm.weight", i);
        if (cfg.gated) {
            b->wi0 = get(&ld, 2, F, D, FF "wi_0.weight", i);
            b->wi1 = get(&ld, 2, F, D, FF "wi_1.weight", i);
        } else {
            b->wi0 = get(&ld, 2, F, D, FF "wi.weight", i);
        }
        b->wo = get(&ld, 2, D, F, FF "wo.weight", i);
    }
    m->final_ln = get(&ld, 1, D, 0, "encoder.final_layer_norm.weight", 0);
    if (ld.failed) {
        sd_t5_free(m);
        return err->code;
    }
    *out = m;
    return SD_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

int sd_t5_bucket(int64_t rel, int buckets, int max_distance) {
    /* bidirectional: half the buckets for keys after the query */
    int nb = buckets / 2;
    int bucket = rel > 0 ? nb : 0;
    int64_t r = rel < 0 ? -rel : rel;
    int max_exact = nb / 2;
    if (r < max_exact) return bucket + (int)r;
    /* torch: float32 log(r / max_exact) / log(max_distance / max_exact)
     * * (nb - max_exact), truncated; each step rounded to float */
    float x = (float)r / (float)max_exact;
    float l = (float)log((double)x);
    float q = l / (float)log((double)max_distance / (double)max_exact);
    float v = q * (float)(nb - max_exact);
    int64_t large = max_exact + (int64_t)v;
    if (large > nb - 1) large = nb - 1;
    return bucket + (int)large;
}

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

static void tap(const sd_t5 *m, const char *name, const sd_bt *t) {
    if (m->tap && t) m->tap(m->tap_user, name, t);
}

/* The position bias [1, heads, L, L] from a [buckets, heads] table. */
static sd_bt *position_bias(const sd_t5 *m, sd_bt *table, int64_t L, sd_error *err) {
    sd_tensor *ids = sd_tensor_new4(SD_I32, 1, L * L, 0, 0, 0);
    if (!ids) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory for a %lld-token position bias", (long long)L);
        return NULL;
    }
    int32_t *p = ids->data;
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++)
            p[i * L + j] = sd_t5_bucket(j - i, m->cfg.buckets, m->cfg.max_distance);
    sd_bt *ib = sd_bt_from_host(m->be, ids, SD_I32);
    sd_tensor_unref(ids);
    sd_bt *v = ib ? sd_op_embedding(table, ib) : NULL; /* [L*L, H] */
    sd_bt_free(ib);
    int64_t s3[3] = {L, L, m->cfg.heads};
    sd_bt *v3 = v ? sd_bt_view(v, 3, s3) : NULL;
    static const int perm[3] = {2, 0, 1};
    sd_bt *hll = v3 ? sd_op_permute(v3, perm) : NULL; /* [H, L, L] */
    sd_bt_free(v3);
    sd_bt_free(v);
    int64_t s4[4] = {1, m->cfg.heads, L, L};
    sd_bt *out = hll ? sd_bt_view(hll, 4, s4) : NULL;
    sd_bt *copy = out ? sd_op_copy(out) : NULL; /* a view must not outlive its source */
    sd_bt_free(out);
    sd_bt_free(hll);
    return copy;
}

/* Token embeddings [n, len, D], vectors spliced in as x * keep + vec. */
static sd_bt *embed(const sd_t5 *m, const sd_t5_tokens *in, sd_error *err) {
    int64_t n = in->n, len = in->len, D = m->cfg.d_model, slots = n * len;
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
                         "T5: token id %d (sequence %lld, position %lld) outside the vocabulary "
                         "of %d",
                         (int)id[i], (long long)(i / len), (long long)(i % len), m->cfg.vocab);
            sd_tensor_unref(ids);
            return NULL;
        }
    }
    sd_bt *ib = sd_bt_from_host(m->be, ids, SD_I32);
    sd_tensor_unref(ids);
    sd_bt *x = ib ? sd_op_embedding(m->shared, ib) : NULL;
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

/* 1 when sqrt(d) and 1/sqrt(d) are exact in float (d a power of 4):
 * ComfyUI's k * sqrt(d) then scores * d^-0.5 is then exactly scale 1. */
static int scale_is_exact(int d) {
    if (d < 1 || (d & (d - 1))) return 0;
    int lg = 0;
    while ((1 << lg) < d) lg++;
    return lg % 2 == 0;
}

/* Self-attention of h [N, L, D] (already normed) -> o projection. */
static sd_bt *attention(const sd_t5 *m, const t5_block *b, sd_bt *h, sd_bt *bias) {
    sd_bt *q = sd_op_linear(h, b->q, NULL);
    sd_bt *k = q ? sd_op_linear(h, b->k, NULL) : NULL;
    sd_bt *v = k ? sd_op_linear(h, b->v, NULL) : NULL;
    sd_attn_opts o = {.scale = 1.0f, .bias = bias};
    if (v && !scale_is_exact(m->cfg.d_kv)) {
        /* torch rounds both factors to float: k * float(sqrt d), scores * float(d^-0.5) */
        step(&k, sd_op_scale(k, (float)sqrt((double)m->cfg.d_kv)));
        o.scale = (float)pow((double)m->cfg.d_kv, -0.5);
    }
    sd_bt *a = k && v ? sd_op_attention_ex(q, k, v, m->cfg.heads, &o) : NULL;
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    if (a) step(&a, sd_op_linear(a, b->o, NULL));
    return a;
}

/* One block; x borrowed. */
static sd_bt *block_forward(const sd_t5 *m, const t5_block *b, sd_bt *x, sd_bt *bias) {
    sd_bt *h = NULL, *a = NULL, *y = NULL, *g = NULL;
    if (!(h = sd_op_rms_norm(x, b->ln0, m->cfg.eps))) goto fail;
    if (!(a = attention(m, b, h, bias))) goto fail;
    if (!(y = sd_op_add(x, a))) goto fail;
    if (!step(&h, sd_op_rms_norm(y, b->ln1, m->cfg.eps))) goto fail;
    if (m->cfg.gated) {
        if (!(g = sd_op_linear(h, b->wi0, NULL))) goto fail;
        if (!step(&g, sd_op_gelu_tanh(g))) goto fail;
        if (!step(&h, sd_op_linear(h, b->wi1, NULL))) goto fail;
        if (!step(&h, sd_op_mul(g, h))) goto fail;
    } else {
        if (!step(&h, sd_op_linear(h, b->wi0, NULL))) goto fail;
        if (!step(&h, m->cfg.act == SD_T5_ACT_RELU ? sd_op_relu(h) : sd_op_gelu_tanh(h))) goto fail;
    }
    if (!step(&h, sd_op_linear(h, b->wo, NULL))) goto fail;
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

sd_status sd_t5_forward(sd_t5 *m, const sd_t5_tokens *in, int layer, sd_bt **out,
                        sd_error *err) {
    *out = NULL;
    const sd_t5_config *cfg = &m->cfg;
    if (!in || in->n < 1 || in->len < 1 || !in->ids || (int64_t)in->len * in->len > (1ll << 31))
        return sd_error_set(err, SD_ERR_INVALID, "T5: %d sequences of %d tokens", in ? in->n : 0,
                            in ? in->len : 0);
    if (layer < -cfg->layers || layer > 0)
        return sd_error_set(err, SD_ERR_INVALID, "T5: layer %d outside -%d..-1", layer,
                            cfg->layers);
    if (sd_backend_precision(m->be) == SD_PREC_F16)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "T5 cannot compute in f16 (its activations overflow it); use f32 or "
                            "bf16 for the text encoder");
    int sel = layer == 0 ? cfg->layers - 1 : cfg->layers + layer;
    sd_backend_clear_error(m->be);
    sd_error local;
    sd_error_clear(&local);
    sd_bt *x = NULL, *bias = NULL, *hid = NULL;
    if (!(x = embed(m, in, &local))) goto done;
    tap(m, "embeddings", x);
    for (int i = 0; i < cfg->layers; i++) {
        const t5_block *b = &m->block[i];
        if (b->rel_bias && !step(&bias, position_bias(m, b->rel_bias, in->len, &local))) goto done;
        if (!step(&x, block_forward(m, b, x, bias))) goto done;
        char name[32];
        snprintf(name, sizeof name, "block.%d", i);
        tap(m, name, x);
        if (i == sel && i != cfg->layers - 1 && !(hid = sd_op_copy(x))) goto done;
    }
    sd_bt *fin = sd_op_rms_norm(hid ? hid : x, m->final_ln, cfg->eps);
    if (fin && !hid) tap(m, "final_layer_norm", fin);
    *out = fin;
done:
    sd_bt_free(x);
    sd_bt_free(bias);
    sd_bt_free(hid);
    sd_status rc = local.code;
    if (rc != SD_OK) {
        if (err) *err = local;
    } else {
        rc = sd_backend_take_error(m->be, err);
        if (rc == SD_OK && !*out) rc = sd_error_set(err, SD_ERR_INTERNAL, "T5: no output");
    }
    sd_backend_clear_error(m->be);
    if (rc != SD_OK) {
        sd_bt_free(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- parameters by key, views (LoRA patching, models/lora/lora.h) ----------------- */

/* The slot of block b's parameter `rest` (after "encoder.block.N."), or NULL. */
static sd_bt **block_param(t5_block *b, const char *rest) {
    static const struct {
        const char *name;
        size_t off;
    } map[] = {
        {"layer.0.layer_norm.weight", offsetof(t5_block, ln0)},
        {"layer.0.SelfAttention.q.weight", offsetof(t5_block, q)},
        {"layer.0.SelfAttention.k.weight", offsetof(t5_block, k)},
        {"layer.0.SelfAttention.v.weight", offsetof(t5_block, v)},
        {"layer.0.SelfAttention.o.weight", offsetof(t5_block, o)},
        {"layer.0.SelfAttention.relative_attention_bias.weight", offsetof(t5_block, rel_bias)},
        {"layer.1.layer_norm.weight", offsetof(t5_block, ln1)},
        {"layer.1.DenseReluDense.wo.weight", offsetof(t5_block, wo)},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strcmp(rest, map[i].name) == 0) return (sd_bt **)((char *)b + map[i].off);
    /* gated files name the two input projections wi_0 / wi_1, others wi */
    if (b->wi1 && strcmp(rest, "layer.1.DenseReluDense.wi_0.weight") == 0) return &b->wi0;
    if (b->wi1 && strcmp(rest, "layer.1.DenseReluDense.wi_1.weight") == 0) return &b->wi1;
    if (!b->wi1 && strcmp(rest, "layer.1.DenseReluDense.wi.weight") == 0) return &b->wi0;
    return NULL;
}

sd_bt **sd_t5_param(sd_t5 *m, const char *key) {
    if (!m || !key) return NULL;
    sd_bt **slot = NULL;
    if (strcmp(key, "shared.weight") == 0 || strcmp(key, "encoder.embed_tokens.weight") == 0) {
        slot = &m->shared;
    } else if (strcmp(key, "encoder.final_layer_norm.weight") == 0) {
        slot = &m->final_ln;
    } else if (strncmp(key, "encoder.block.", 14) == 0) {
        char *end;
        long i = strtol(key + 14, &end, 10);
        if (end == key + 14 || *end != '.' || i < 0 || i >= m->cfg.layers) return NULL;
        slot = block_param(&m->block[i], end + 1);
    }
    return slot && *slot ? slot : NULL;
}

void sd_t5_param_each(sd_t5 *m, sd_t5_param_fn fn, void *ud) {
    if (!m || !fn) return;
    char k[160];
    /* ComfyUI's state-dict order: shared, then the blocks, then the final norm */
    fn(ud, "shared.weight", &m->shared);
    for (int i = 0; i < m->cfg.layers; i++) {
        t5_block *b = &m->block[i];
        static const char *const names[] = {
            "layer.0.layer_norm.weight",      "layer.0.SelfAttention.q.weight",
            "layer.0.SelfAttention.k.weight", "layer.0.SelfAttention.v.weight",
            "layer.0.SelfAttention.o.weight", "layer.0.SelfAttention.relative_attention_bias.weight",
            "layer.1.layer_norm.weight",      "layer.1.DenseReluDense.wi_0.weight",
            "layer.1.DenseReluDense.wi_1.weight", "layer.1.DenseReluDense.wi.weight",
            "layer.1.DenseReluDense.wo.weight"};
        for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
            sd_bt **slot = block_param(b, names[j]);
            if (!slot || !*slot) continue;
            snprintf(k, sizeof k, "encoder.block.%d.%s", i, names[j]);
            fn(ud, k, slot);
        }
    }
    fn(ud, "encoder.final_layer_norm.weight", &m->final_ln);
}

static void t5_view_slot(sd_bt **slot, int *failed) {
    if (!*slot) return;
    sd_bt *v = sd_bt_view(*slot, (*slot)->ndim, (*slot)->shape);
    if (!v) (*failed)++;
    *slot = v;
}

sd_status sd_t5_view(const sd_t5 *base, sd_t5 **out, sd_error *err) {
    *out = NULL;
    sd_t5 *m = malloc(sizeof *m);
    if (m) {
        *m = *base;
        m->block = calloc((size_t)base->cfg.layers, sizeof *m->block);
    }
    if (!m || !m->block) {
        free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a T5 view");
    }
    m->tap = NULL;
    m->tap_user = NULL;
    int failed = 0;
    t5_view_slot(&m->shared, &failed);
    t5_view_slot(&m->final_ln, &failed);
    for (int i = 0; i < base->cfg.layers; i++) {
        t5_block *b = &m->block[i];
        *b = base->block[i];
        sd_bt **all[] = {&b->ln0, &b->q, &b->k, &b->v, &b->o, &b->rel_bias, &b->ln1, &b->wi0, &b->wi1, &b->wo};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) t5_view_slot(all[k], &failed);
    }
    if (failed) {
        sd_t5_free(m);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a T5 view");
    }
    *out = m;
    return SD_OK;
}
