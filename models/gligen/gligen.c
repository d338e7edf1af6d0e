/* gligen.c - GLIGEN's position net and gated self-attention fusers
 * (gligen.h), in the operation order of comfy/gligen.py. */
#include "models/gligen/gligen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/torch_ckpt.h"
#include "models/checkpoint/weights.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

typedef struct gligen_fuser {
    sd_bt *lin_w, *lin_b;
    sd_bt *q, *k, *v, *out_w, *out_b;
    sd_bt *ff_in_w, *ff_in_b, *ff_out_w, *ff_out_b;
    sd_bt *n1_w, *n1_b, *n2_w, *n2_b;
    float gate_attn, gate_dense; /* tanh(alpha_attn), tanh(alpha_dense) */
} gligen_fuser;

struct sd_gligen {
    sd_backend *be;
    sd_gligen_config cfg;
    gligen_fuser fusers[SD_GLIGEN_MAX_FUSERS];
    float *null_pos;  /* [in_dim] */
    float *null_xyxy; /* [64] */
    sd_bt *l0_w, *l0_b, *l2_w, *l2_b, *l4_w, *l4_b;
};

/* ---- layout ------------------------------------------------------------------------------ */

static const char *const block_kinds[3] = {"input_blocks", "middle_block", "output_blocks"};

/* The fusers as load_gligen collects them: the key of fuser (a, b) whose
 * part after the last ".fuser." is `suffix` (a later key in name order
 * wins, as the later key wins in ComfyUI's dict), or NULL. */
static const char *fuser_key(sd_st_file *f, int a, int b, const char *suffix) {
    char pat[48];
    snprintf(pat, sizeof pat, "%s.%d.", block_kinds[a], b);
    const char *found = NULL;
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const char *name = sd_st_at(f, i)->name, *last = NULL, *p = name;
        if (!strstr(name, pat)) continue;
        while ((p = strstr(p, ".fuser.")) != NULL) last = p++;
        if (last && !strcmp(last + strlen(".fuser."), suffix)) found = name;
    }
    return found;
}

/* Whether any key belongs to fuser (a, b). */
static int has_fuser(sd_st_file *f, int a, int b) {
    char pat[48];
    snprintf(pat, sizeof pat, "%s.%d.", block_kinds[a], b);
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const char *name = sd_st_at(f, i)->name;
        if (strstr(name, pat) && strstr(name, ".fuser.")) return 1;
    }
    return 0;
}

sd_status sd_gligen_probe(sd_st_file *f, sd_gligen_config *cfg, sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *path = sd_st_path(f);
    const sd_st_entry *np = sd_st_find(f, "position_net.null_positive_feature");
    int any = 0;
    for (int a = 0; a < 3 && !any; a++)
        for (int b = 0; b < 20 && !any; b++) any = has_fuser(f, a, b);
    if (!np || !any)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: not a GLIGEN model (no %s)", path,
                            !np ? "position_net.null_positive_feature" : "'.fuser.' weights of a UNet block");
    if (np->ndim != 1 || np->shape[0] < 1)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: position_net.null_positive_feature is not a vector", path);
    cfg->in_dim = (int)np->shape[0];
    const sd_st_entry *l4 = sd_st_find(f, "position_net.linears.4.weight");
    if (!l4 || l4->ndim != 2 || l4->shape[1] != SD_GLIGEN_HIDDEN || l4->shape[0] < 1)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: position_net.linears.4.weight missing or not [out, %d]", path,
                            SD_GLIGEN_HIDDEN);
    cfg->key_dim = (int)l4->shape[0];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 20; b++) {
            if (!has_fuser(f, a, b)) continue;
            const char *lk = fuser_key(f, a, b, "linear.weight");
            const sd_st_entry *lw = lk ? sd_st_find(f, lk) : NULL;
            if (!lw || lw->ndim != 2 || lw->shape[0] < 1)
                return sd_error_set(err, SD_ERR_FORMAT, "%s: the fuser of %s.%d has no linear.weight [q, context]",
                                    path, block_kinds[a], b);
            if (lw->shape[1] != cfg->key_dim)
                return sd_error_set(err, SD_ERR_FORMAT,
                                    "%s: %s is [%lld, %lld]; the position net gives %d-wide objects", path, lk,
                                    (long long)lw->shape[0], (long long)lw->shape[1], cfg->key_dim);
            int i = cfg->n_fusers++, q = (int)lw->shape[0];
            cfg->query_dim[i] = q;
            /* load_gligen: SD1.x (context 768) 8 heads, else 64-wide heads */
            if (cfg->key_dim == 768) {
                cfg->heads[i] = 8;
                cfg->head_dim[i] = q / 8;
            } else {
                cfg->head_dim[i] = 64;
                cfg->heads[i] = q / 64;
            }
            if (cfg->heads[i] < 1 || cfg->head_dim[i] < 1)
                return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                    "%s: the fuser of %s.%d is %d wide, which ComfyUI splits into no attention "
                                    "heads (%s)", path, block_kinds[a], b, q,
                                    cfg->key_dim == 768 ? "8 heads" : "64-channel heads");
        }
    return SD_OK;
}

void sd_gligen_free(sd_gligen *g) {
    if (!g) return;
    for (int i = 0; i < g->cfg.n_fusers; i++) {
        gligen_fuser *u = &g->fusers[i];
        sd_bt *all[] = {u->lin_w, u->lin_b, u->q, u->k, u->v, u->out_w, u->out_b, u->ff_in_w,
                        u->ff_in_b, u->ff_out_w, u->ff_out_b, u->n1_w, u->n1_b, u->n2_w, u->n2_b};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) sd_bt_free(all[k]);
    }
    sd_bt *pn[] = {g->l0_w, g->l0_b, g->l2_w, g->l2_b, g->l4_w, g->l4_b};
    for (size_t k = 0; k < sizeof pn / sizeof pn[0]; k++) sd_bt_free(pn[k]);
    free(g->null_pos);
    free(g->null_xyxy);
    free(g);
}

const sd_gligen_config *sd_gligen_get_config(const sd_gligen *g) { return &g->cfg; }

/* A host vector of n floats under `key` (any float dtype; a 0-d scalar is
 * n = 1), into dst. */
static sd_status host_vec(sd_st_file *f, const char *key, int64_t n, float *dst, sd_error *err) {
    const sd_st_entry *e = sd_st_find(f, key);
    int64_t numel = 1;
    for (int d = 0; e && d < e->ndim; d++) numel *= e->shape[d];
    if (!e || numel != n || e->ndim > 1)
        return sd_error_set(err, e ? SD_ERR_FORMAT : SD_ERR_NOT_FOUND, "%s: %s %s (%lld values expected)",
                            sd_st_path(f), key, e ? "has the wrong shape" : "is missing", (long long)n);
    sd_tensor *t = sd_st_tensor_f32(f, key, err);
    if (!t) return err->code ? err->code : SD_ERR_FORMAT;
    memcpy(dst, t->data, (size_t)n * sizeof(float));
    sd_tensor_unref(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) return sd_error_set(err, SD_ERR_FORMAT, "%s: %s holds NaN or Inf", sd_st_path(f), key);
    return SD_OK;
}

/* Binds fuser i of (a, b). 0 when a fetch failed (err set). */
static int bind_fuser(const sd_weights *w, sd_st_file *f, int a, int b, const sd_gligen_config *c, int i,
                      gligen_fuser *u, sd_error *err) {
    const int64_t q = c->query_dim[i], inner = (int64_t)c->heads[i] * c->head_dim[i], kd = c->key_dim;
    struct {
        const char *suffix;
        sd_bt **slot;
        int ndim;
        int64_t d0, d1;
    } want[] = {
        {"linear.weight", &u->lin_w, 2, q, kd},        {"linear.bias", &u->lin_b, 1, q, 0},
        {"attn.to_q.weight", &u->q, 2, inner, q},      {"attn.to_k.weight", &u->k, 2, inner, q},
        {"attn.to_v.weight", &u->v, 2, inner, q},      {"attn.to_out.0.weight", &u->out_w, 2, q, inner},
        {"attn.to_out.0.bias", &u->out_b, 1, q, 0},    {"ff.net.0.proj.weight", &u->ff_in_w, 2, 8 * q, q},
        {"ff.net.0.proj.bias", &u->ff_in_b, 1, 8 * q, 0}, {"ff.net.2.weight", &u->ff_out_w, 2, q, 4 * q},
        {"ff.net.2.bias", &u->ff_out_b, 1, q, 0},      {"norm1.weight", &u->n1_w, 1, q, 0},
        {"norm1.bias", &u->n1_b, 1, q, 0},             {"norm2.weight", &u->n2_w, 1, q, 0},
        {"norm2.bias", &u->n2_b, 1, q, 0},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const char *key = fuser_key(f, a, b, want[k].suffix);
        if (!key) {
            sd_error_set(err, SD_ERR_NOT_FOUND, "%s: the fuser of %s.%d has no %s", sd_st_path(f), block_kinds[a], b,
                         want[k].suffix);
            return 0;
        }
        int64_t shape[2] = {want[k].d0, want[k].d1};
        if (!(*want[k].slot = sd_weights_get(w, key, want[k].ndim, shape, err))) return 0;
    }
    const char *alphas[2] = {"alpha_attn", "alpha_dense"};
    float *gates[2] = {&u->gate_attn, &u->gate_dense};
    for (int k = 0; k < 2; k++) {
        const char *key = fuser_key(f, a, b, alphas[k]);
        float alpha;
        if (!key) {
            sd_error_set(err, SD_ERR_NOT_FOUND, "%s: the fuser of %s.%d has no %s", sd_st_path(f), block_kinds[a], b,
                         alphas[k]);
            return 0;
        }
        if (host_vec(f, key, 1, &alpha, err)) return 0;
        *gates[k] = tanhf(alpha); /* torch.tanh on the float32 parameter */
    }
    return 1;
}

sd_status sd_gligen_load(sd_backend *be, sd_st_file *f, sd_gligen **out, sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    sd_gligen_config cfg;
    sd_status rc = sd_gligen_probe(f, &cfg, err);
    if (rc) return rc;
    sd_gligen *g = calloc(1, sizeof *g);
    if (g) {
        g->null_pos = malloc((size_t)cfg.in_dim * sizeof(float));
        g->null_xyxy = malloc(SD_GLIGEN_POSITION_DIM * sizeof(float));
    }
    if (!g || !g->null_pos || !g->null_xyxy) {
        sd_gligen_free(g);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading a GLIGEN model");
    }
    g->be = be;
    g->cfg = cfg;
    sd_weights w;
    sd_weights_init(&w, be, f, "");
    w.dtype = SD_F32;
    int ok = 1, n = 0;
    for (int a = 0; a < 3 && ok; a++)
        for (int b = 0; b < 20 && ok; b++)
            if (has_fuser(f, a, b)) {
                ok = bind_fuser(&w, f, a, b, &cfg, n, &g->fusers[n], err);
                n++;
            }
    const int64_t in0 = cfg.in_dim + SD_GLIGEN_POSITION_DIM, H = SD_GLIGEN_HIDDEN, kd = cfg.key_dim;
    int64_t s0[2] = {H, in0}, s2[2] = {H, H}, s4[2] = {kd, H};
    ok = ok && !host_vec(f, "position_net.null_positive_feature", cfg.in_dim, g->null_pos, err) &&
         !host_vec(f, "position_net.null_position_feature", SD_GLIGEN_POSITION_DIM, g->null_xyxy, err) &&
         (g->l0_w = sd_weights_get(&w, "position_net.linears.0.weight", 2, s0, err)) &&
         (g->l0_b = sd_weights_get(&w, "position_net.linears.0.bias", 1, &H, err)) &&
         (g->l2_w = sd_weights_get(&w, "position_net.linears.2.weight", 2, s2, err)) &&
         (g->l2_b = sd_weights_get(&w, "position_net.linears.2.bias", 1, &H, err)) &&
         (g->l4_w = sd_weights_get(&w, "position_net.linears.4.weight", 2, s4, err)) &&
         (g->l4_b = sd_weights_get(&w, "position_net.linears.4.bias", 1, &kd, err));
    if (!ok) {
        sd_gligen_free(g);
        return err->code ? err->code : SD_ERR_NOMEM;
    }
    *out = g;
    return SD_OK;
}

sd_status sd_gligen_load_file(sd_backend *be, const char *path, sd_gligen **out, sd_error *err) {
    *out = NULL;
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    rc = sd_gligen_load(be, f, out, err);
    sd_st_close(f);
    return rc;
}

sd_status sd_gligen_probe_file(const char *path, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    sd_gligen_config cfg;
    rc = sd_gligen_probe(f, &cfg, err);
    sd_st_close(f);
    return rc;
}

/* ---- forward ------------------------------------------------------------------------------ */

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

/* The backend's error after a failed op (or out of memory when it has none). */
static sd_status op_error(sd_backend *be, sd_error *err, const char *what) {
    sd_status rc = sd_backend_take_error(be, err);
    if (!rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_error_prefix(err, "%s", what);
    return rc;
}

sd_status sd_gligen_position_net(sd_gligen *g, const sd_tensor *boxes, const sd_tensor *masks,
                                 const sd_tensor *embeddings, sd_bt **objs, sd_error *err) {
    *objs = NULL;
    const int64_t in = g->cfg.in_dim;
    if (!boxes || !masks || !embeddings || boxes->dtype != SD_F32 || masks->dtype != SD_F32 ||
        embeddings->dtype != SD_F32 || boxes->ndim != 3 || boxes->shape[2] != 4 || masks->ndim != 2 ||
        masks->shape[0] != boxes->shape[0] || masks->shape[1] != boxes->shape[1] || embeddings->ndim != 3 ||
        embeddings->shape[0] != boxes->shape[0] || embeddings->shape[1] != boxes->shape[1] ||
        embeddings->shape[2] != in)
        return sd_error_set(err, SD_ERR_INVALID,
                            "GLIGEN position net: boxes must be F32 [B, N, 4], masks [B, N], embeddings "
                            "[B, N, %lld]", (long long)in);
    const int64_t B = boxes->shape[0], N = boxes->shape[1], W = in + SD_GLIGEN_POSITION_DIM;
    sd_tensor *h = sd_tensor_new4(SD_F32, 3, B, N, W, 0);
    if (!h) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* FourierEmbedder(num_freqs=8, temperature=100): 100 ** (arange(8) / 8) in float32 */
    float freq[8];
    for (int k = 0; k < 8; k++) freq[k] = (float)pow(100.0, (double)((float)k / 8.0f));
    const float *bv = boxes->data, *mv = masks->data, *ev = embeddings->data;
    float *hv = h->data;
    for (int64_t r = 0; r < B * N; r++) {
        const float m = mv[r], nm = 1.0f - m;
        float *row = hv + r * W;
        /* positive_embeddings * masks + (1 - masks) * null_positive_feature */
        for (int64_t c = 0; c < in; c++) {
            float a = ev[r * in + c] * m, b = nm * g->null_pos[c];
            row[c] = a + b;
        }
        for (int k = 0; k < 8; k++)
            for (int c = 0; c < 4; c++) {
                float fx = freq[k] * bv[r * 4 + c];
                float s = sinf(fx), co = cosf(fx);
                int is = k * 8 + c, ic = k * 8 + 4 + c;
                float a = s * m, b = nm * g->null_xyxy[is];
                row[in + is] = a + b;
                a = co * m, b = nm * g->null_xyxy[ic];
                row[in + ic] = a + b;
            }
    }
    sd_backend_clear_error(g->be);
    sd_bt *x = sd_bt_from_host(g->be, h, SD_F32);
    sd_tensor_unref(h);
    if (x) step(&x, sd_op_linear(x, g->l0_w, g->l0_b));
    if (x) step(&x, sd_op_silu(x));
    if (x) step(&x, sd_op_linear(x, g->l2_w, g->l2_b));
    if (x) step(&x, sd_op_silu(x));
    if (x) step(&x, sd_op_linear(x, g->l4_w, g->l4_b));
    if (!x) return op_error(g->be, err, "GLIGEN position net");
    *objs = x;
    return SD_OK;
}

sd_status sd_gligen_set_position(sd_gligen *g, const sd_gligen_box *boxes, int n, int64_t B, int64_t lh,
                                 int64_t lw, sd_bt **objs, sd_error *err) {
    *objs = NULL;
    const int64_t in = g->cfg.in_dim, M = SD_GLIGEN_MAX_OBJS;
    if (n < 0 || n > M)
        return sd_error_set(err, SD_ERR_INVALID, "GLIGEN takes at most %d boxes, the conditioning has %d", (int)M, n);
    if (B < 1 || lh < 1 || lw < 1) return sd_error_set(err, SD_ERR_INVALID, "GLIGEN: empty latent");
    for (int i = 0; i < n; i++) {
        const sd_tensor *p = boxes[i].pooled;
        if (!p || p->dtype != SD_F32 || sd_tensor_numel(p) != in || p->ndim < 1 || p->shape[p->ndim - 1] != in)
            return sd_error_set(err, SD_ERR_INVALID,
                                "GLIGEN box %d: its text's pooled output is not [1, %lld] (the GLIGEN model's "
                                "position net takes %lld-wide embeddings: a CLIP of another model?)",
                                i, (long long)in, (long long)in);
    }
    sd_tensor *bx = sd_tensor_new4(SD_F32, 3, B, M, 4, 0), *mk = sd_tensor_new4(SD_F32, 2, B, M, 0, 0);
    sd_tensor *em = sd_tensor_new4(SD_F32, 3, B, M, in, 0);
    sd_status rc = SD_OK;
    if (!bx || !mk || !em) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const sd_gligen_box *p = &boxes[i];
            /* Python true division in double, stored as float32 */
            float *d = (float *)bx->data + (b * M + i) * 4;
            d[0] = (float)((double)p->x / (double)lw);
            d[1] = (float)((double)p->y / (double)lh);
            d[2] = (float)((double)(p->x + p->w) / (double)lw);
            d[3] = (float)((double)(p->y + p->h) / (double)lh);
            ((float *)mk->data)[b * M + i] = 1.0f;
            memcpy((float *)em->data + (b * M + i) * in, p->pooled->data, (size_t)in * sizeof(float));
        }
    rc = sd_gligen_position_net(g, bx, mk, em, objs, err);
done:
    sd_tensor_unref(bx);
    sd_tensor_unref(mk);
    sd_tensor_unref(em);
    return rc;
}

sd_status sd_gligen_fuse(const sd_gligen *g, int index, sd_bt *x, sd_bt *objs, sd_bt **out, sd_error *err) {
    *out = NULL;
    const sd_gligen_config *c = &g->cfg;
    if (index < 0 || index >= c->n_fusers)
        return sd_error_set(err, SD_ERR_INVALID,
                            "GLIGEN has %d fusers; the UNet's transformer %d has none (a GLIGEN model of "
                            "another UNet?)", c->n_fusers, index);
    if (x->ndim != 3 || x->shape[2] != c->query_dim[index] || objs->ndim != 3 || objs->shape[0] != x->shape[0] ||
        objs->shape[2] != c->key_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "GLIGEN fuser %d is %d wide; the UNet's transformer %d is %lld wide (a GLIGEN "
                            "model of another UNet?)", index, c->query_dim[index], index,
                            (long long)(x->ndim == 3 ? x->shape[2] : -1));
    const gligen_fuser *u = &g->fusers[index];
    const int64_t L = x->shape[1];
    /* x + tanh(alpha_attn) * attn(norm1(cat([x, linear(objs)], 1)))[:, :L] */
    sd_bt *o = sd_op_linear(objs, u->lin_w, u->lin_b), *n = NULL, *q = NULL, *k = NULL, *v = NULL, *a = NULL,
          *h = NULL;
    if (o) n = sd_op_concat(x, o, 1);
    if (n) step(&n, sd_op_layer_norm(n, u->n1_w, u->n1_b, 1e-5f));
    /* only the first L queries are kept: the others are not computed */
    if (n) q = sd_op_slice(n, 1, 0, L);
    if (q) step(&q, sd_op_linear(q, u->q, NULL));
    if (q) k = sd_op_linear(n, u->k, NULL);
    if (k) v = sd_op_linear(n, u->v, NULL);
    if (v) a = sd_op_attention(q, k, v, c->heads[index], 0);
    if (a) step(&a, sd_op_linear(a, u->out_w, u->out_b));
    if (a) step(&a, sd_op_scale(a, u->gate_attn));
    if (a) h = sd_op_add(x, a);
    /* h + tanh(alpha_dense) * ff(norm2(h)) */
    if (h) step(&a, sd_op_layer_norm(h, u->n2_w, u->n2_b, 1e-5f));
    else step(&a, NULL);
    if (a) step(&a, sd_op_linear(a, u->ff_in_w, u->ff_in_b));
    if (a) step(&a, sd_op_geglu(a));
    if (a) step(&a, sd_op_linear(a, u->ff_out_w, u->ff_out_b));
    if (a) step(&a, sd_op_scale(a, u->gate_dense));
    if (a) *out = sd_op_add(h, a);
    sd_bt *all[] = {o, n, q, k, v, a, h};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sd_bt_free(all[i]);
    if (!*out) return op_error(g->be, err, "GLIGEN fuser");
    return SD_OK;
}

static sd_status middle_fn(void *ud, int transformer_index, sd_bt *x, sd_bt **out, sd_error *err) {
    const sd_gligen_call *call = ud;
    return sd_gligen_fuse(call->g, transformer_index, x, call->objs, out, err);
}

void sd_gligen_middle_patch(sd_gligen_call *call, sd_unet_middle_patch *out) {
    out->fn = middle_fn;
    out->ud = call;
}

sd_status sd_gligen_check_fit(const sd_gligen *g, const int *widths, int n, sd_error *err) {
    const sd_gligen_config *c = &g->cfg;
    if (n > c->n_fusers)
        return sd_error_set(err, SD_ERR_INVALID,
                            "the GLIGEN model has %d fusers, the UNet %d transformer blocks (a GLIGEN model "
                            "of another UNet)", c->n_fusers, n);
    for (int i = 0; i < n; i++)
        if (widths[i] != c->query_dim[i])
            return sd_error_set(err, SD_ERR_INVALID,
                                "the GLIGEN model's fuser %d is %d wide, the UNet's transformer %d is %d wide "
                                "(a GLIGEN model of another UNet)", i, c->query_dim[i], i, widths[i]);
    return SD_OK;
}
