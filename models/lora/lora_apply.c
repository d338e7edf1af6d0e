/* lora_apply.c - adapter deltas (comfy.weight_adapter calculate_weight) and
 * patched model views. All math in float32 on host copies, as ComfyUI
 * patches upcast weights. */
#include "models/lora/lora_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sd_st_entry *ent(sd_lora *l, const char *name) {
    return name ? sd_st_find(l->f, name) : NULL;
}

static int64_t rest(const sd_st_entry *e) { /* numel of dims 1.. */
    int64_t n = 1;
    for (int i = 1; i < e->ndim; i++) n *= e->shape[i];
    return n;
}

static int64_t dim(const sd_st_entry *e, int i) { return e && i < e->ndim ? e->shape[i] : 1; }

static sd_status bad(sd_lora *l, const lora_patch *p, const char *what, sd_error *err) {
    return sd_error_set(err, SD_ERR_FORMAT, "%s: LoRA tensor '%s' (target '%s'): %s",
                        sd_lora_path(l), p->t[0] ? p->t[0] : "?", p->target, what);
}

/* Rank the alpha is divided by, or 0 when the adapter applies alpha as 1. */
static int64_t alpha_rank(sd_lora *l, const lora_patch *p) {
    switch (p->kind) {
    case LK_LORA: return dim(ent(l, p->t[1]), 0);
    case LK_LOHA: return dim(ent(l, p->t[1]), 0);
    case LK_LOKR: {
        int64_t d = 0;
        if (!p->t[0]) d = dim(ent(l, p->t[3]), 0);
        if (!p->t[1]) d = dim(ent(l, p->t[5]), 0);
        return d;
    }
    default: return 0;
    }
}

/* LoHa/LoKr factor shape: a@b -> [a0, b1], or Tucker t: [a1, b1, t2, t3]. */
static int64_t factor_numel(const sd_st_entry *a, const sd_st_entry *b, const sd_st_entry *t,
                            int64_t *rows) {
    if (t) {
        *rows = dim(a, 1);
        return dim(a, 1) * dim(b, 1) * dim(t, 2) * dim(t, 3);
    }
    *rows = dim(a, 0);
    return dim(a, 0) * rest(b);
}

int64_t sd_lora_patch_numel(sd_lora *l, const lora_patch *p, sd_error *err) {
    const sd_st_entry *e[LORA_MAX_T];
    for (int i = 0; i < LORA_MAX_T; i++) e[i] = ent(l, p->t[i]);
    int64_t r;
    switch (p->kind) {
    case LK_LORA: {
        const sd_st_entry *up = e[0], *down = e[1], *mid = e[2];
        if (up->ndim < 2 || down->ndim < 2) return bad(l, p, "up/down must be at least 2-D", err), -1;
        if (rest(up) != down->shape[0])
            return bad(l, p, "up's columns differ from down's rows (rank)", err), -1;
        if (mid) {
            if (mid->ndim != 4 || mid->shape[0] != down->shape[0] || mid->shape[1] != down->shape[0])
                return bad(l, p, "lora_mid is not [rank, rank, kh, kw]", err), -1;
            return up->shape[0] * down->shape[1] * mid->shape[2] * mid->shape[3];
        }
        return up->shape[0] * rest(down);
    }
    case LK_LOHA: {
        int64_t r1, r2;
        if (e[0]->ndim != 2 || e[1]->ndim != 2 || e[2]->ndim != 2 || e[3]->ndim != 2)
            return bad(l, p, "hada_w* must be 2-D", err), -1;
        if ((e[4] == NULL) != (e[5] == NULL)) return bad(l, p, "hada_t1/t2 must come together", err), -1;
        int64_t n1 = factor_numel(e[0], e[1], e[4], &r1), n2 = factor_numel(e[2], e[3], e[5], &r2);
        if (n1 != n2) return bad(l, p, "the two Hadamard factors differ in size", err), -1;
        return n1;
    }
    case LK_LOKR: {
        int64_t a = e[0] ? e[0]->shape[0] : dim(e[2], 0), b = e[0] ? rest(e[0]) : rest(e[3]);
        int64_t n2 = e[1] ? e[1]->shape[0] * rest(e[1]) : factor_numel(e[4], e[5], e[6], &r);
        return a * b * n2;
    }
    case LK_DIFF: {
        int64_t n = 1;
        for (int i = 0; i < e[0]->ndim; i++) n *= e[0]->shape[i];
        return n;
    }
    }
    return bad(l, p, "unknown adapter", err), -1;
}

static sd_tensor *load(sd_lora *l, const char *name, sd_error *err) {
    return sd_st_tensor_f32(l->f, name, err);
}

/* out[M, N] = a[M, K] @ b[K, N] (row-major), accumulated in k order. */
static void mm(const float *a, const float *b, float *out, int64_t M, int64_t K, int64_t N) {
    memset(out, 0, (size_t)(M * N) * sizeof *out);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            float av = a[i * K + k];
            const float *br = b + k * N;
            float *o = out + i * N;
            for (int64_t j = 0; j < N; j++) o[j] += av * br[j];
        }
}

/* einsum('i j k l, j r, i p -> p r k l', t, wb, wa): [P, R, K, L]. */
static void tucker(const sd_tensor *t, const sd_tensor *wb, const sd_tensor *wa, float *out) {
    int64_t I = t->shape[0], J = t->shape[1], KL = t->shape[2] * t->shape[3];
    int64_t R = wb->shape[1], P = wa->shape[1];
    const float *T = sd_tensor_f32(t), *B = sd_tensor_f32(wb), *A = sd_tensor_f32(wa);
    memset(out, 0, (size_t)(P * R * KL) * sizeof *out);
    for (int64_t p = 0; p < P; p++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < I; i++)
                for (int64_t j = 0; j < J; j++) {
                    float c = A[i * P + p] * B[j * R + r];
                    const float *tt = T + (i * J + j) * KL;
                    float *o = out + (p * R + r) * KL;
                    for (int64_t q = 0; q < KL; q++) o[q] += tt[q] * c;
                }
}

/* a @ b, or the Tucker form, as a new buffer; *shape gets 2 or 4 dims. */
static float *factor(sd_lora *l, const char *an, const char *bn, const char *tn, int64_t *shape,
                     int *nd, sd_error *err) {
    sd_tensor *a = load(l, an, err), *b = a ? load(l, bn, err) : NULL;
    sd_tensor *t = b && tn ? load(l, tn, err) : NULL;
    float *out = NULL;
    if (a && b && (!tn || t)) {
        if (t) {
            shape[0] = a->shape[1], shape[1] = b->shape[1], shape[2] = t->shape[2], shape[3] = t->shape[3];
            *nd = 4;
            out = malloc((size_t)(shape[0] * shape[1] * shape[2] * shape[3]) * sizeof *out);
            if (out) tucker(t, b, a, out);
        } else {
            int64_t K = a->shape[1], N = sd_tensor_numel(b) / b->shape[0];
            shape[0] = a->shape[0], shape[1] = N;
            *nd = 2;
            out = malloc((size_t)(shape[0] * N) * sizeof *out);
            if (out) mm(sd_tensor_f32(a), sd_tensor_f32(b), out, a->shape[0], K, N);
        }
        if (!out) sd_error_set(err, SD_ERR_NOMEM, "out of memory computing a LoRA patch");
    }
    sd_tensor_unref(a);
    sd_tensor_unref(b);
    sd_tensor_unref(t);
    return out;
}

/* The adapter's difference (before strength and alpha) as n floats. */
static float *delta(sd_lora *l, const lora_patch *p, int64_t n, sd_error *err) {
    float *d = NULL;
    switch (p->kind) {
    case LK_LORA: {
        sd_tensor *up = load(l, p->t[0], err), *down = up ? load(l, p->t[1], err) : NULL;
        sd_tensor *mid = down && p->t[2] ? load(l, p->t[2], err) : NULL;
        if (up && down && (!p->t[2] || mid)) {
            int64_t r = down->shape[0];
            if (mid) {
                /* LoCon: down'[j, i, y, x] = sum_k down[k, i] * mid[j, k, y, x] */
                int64_t in = sd_tensor_numel(down) / r, kk = mid->shape[2] * mid->shape[3];
                sd_tensor *nd = sd_tensor_new4(SD_F32, 4, r, in, mid->shape[2], mid->shape[3]);
                if (nd) {
                    const float *D = sd_tensor_f32(down), *M = sd_tensor_f32(mid);
                    float *o = sd_tensor_f32(nd);
                    for (int64_t j = 0; j < r; j++)
                        for (int64_t i = 0; i < in; i++)
                            for (int64_t q = 0; q < kk; q++) {
                                float s = 0;
                                for (int64_t k = 0; k < r; k++) s += D[k * in + i] * M[(j * r + k) * kk + q];
                                o[(j * in + i) * kk + q] = s;
                            }
                }
                sd_tensor_unref(down);
                down = nd;
            }
            if (down) {
                int64_t N = sd_tensor_numel(down) / r;
                d = malloc((size_t)n * sizeof *d);
                if (d) mm(sd_tensor_f32(up), sd_tensor_f32(down), d, up->shape[0], r, N);
            }
            if (!d) sd_error_set(err, SD_ERR_NOMEM, "out of memory computing a LoRA patch");
        }
        sd_tensor_unref(up);
        sd_tensor_unref(down);
        sd_tensor_unref(mid);
        break;
    }
    case LK_LOHA: {
        int64_t s1[4], s2[4];
        int n1, n2;
        float *m1 = factor(l, p->t[0], p->t[1], p->t[4], s1, &n1, err);
        float *m2 = m1 ? factor(l, p->t[2], p->t[3], p->t[5], s2, &n2, err) : NULL;
        if (m1 && m2) {
            for (int64_t i = 0; i < n; i++) m1[i] *= m2[i];
            d = m1;
            m1 = NULL;
        }
        free(m1);
        free(m2);
        break;
    }
    case LK_LOKR: {
        int64_t s1[4] = {0}, s2[4] = {1, 1, 1, 1};
        int n1 = 2, n2 = 2;
        float *w1 = NULL, *w2 = NULL;
        if (p->t[0]) {
            sd_tensor *t = load(l, p->t[0], err);
            if (t) {
                s1[0] = t->shape[0];
                s1[1] = sd_tensor_numel(t) / t->shape[0];
                w1 = malloc((size_t)sd_tensor_numel(t) * sizeof *w1);
                if (w1) memcpy(w1, sd_tensor_f32(t), t->nbytes);
            }
            sd_tensor_unref(t);
        } else {
            w1 = factor(l, p->t[2], p->t[3], NULL, s1, &n1, err);
        }
        if (w1 && p->t[1]) {
            sd_tensor *t = load(l, p->t[1], err);
            if (t) {
                n2 = t->ndim;
                for (int i = 0; i < t->ndim && i < 4; i++) s2[i] = t->shape[i];
                w2 = malloc(t->nbytes);
                if (w2) memcpy(w2, sd_tensor_f32(t), t->nbytes);
            }
            sd_tensor_unref(t);
        } else if (w1) {
            w2 = factor(l, p->t[4], p->t[5], p->t[6], s2, &n2, err);
        }
        if (w1 && w2) {
            /* kron(w1[a, b(,1,1)], w2[c, d(, k, l)]) -> [a*c, b*d(, k, l)] */
            int64_t a = s1[0], b = s1[1], c = s2[0], dd = s2[1], kl = n2 == 4 ? s2[2] * s2[3] : 1;
            d = malloc((size_t)n * sizeof *d);
            if (d)
                for (int64_t i1 = 0; i1 < a; i1++)
                    for (int64_t i2 = 0; i2 < c; i2++)
                        for (int64_t j1 = 0; j1 < b; j1++)
                            for (int64_t j2 = 0; j2 < dd; j2++) {
                                float v = w1[i1 * b + j1];
                                const float *src = w2 + (i2 * dd + j2) * kl;
                                float *o = d + ((i1 * c + i2) * (b * dd) + j1 * dd + j2) * kl;
                                for (int64_t q = 0; q < kl; q++) o[q] = v * src[q];
                            }
        }
        if (w1 && w2 && !d) sd_error_set(err, SD_ERR_NOMEM, "out of memory computing a LoRA patch");
        free(w1);
        free(w2);
        break;
    }
    case LK_DIFF: {
        sd_tensor *t = load(l, p->t[0], err);
        if (t) {
            d = malloc(t->nbytes);
            if (d) memcpy(d, sd_tensor_f32(t), t->nbytes);
            else sd_error_set(err, SD_ERR_NOMEM, "out of memory computing a LoRA patch");
        }
        sd_tensor_unref(t);
        break;
    }
    }
    return d;
}

sd_status sd_lora_patch_add(sd_lora *l, const lora_patch *p, float *w, int64_t n, double strength,
                            sd_error *err) {
    sd_error local;
    if (!err) err = &local;
    sd_error_clear(err);
    int64_t have = sd_lora_patch_numel(l, p, err);
    if (have < 0) return err->code;
    if (have != n)
        return sd_error_set(err, SD_ERR_INVALID, "%s: LoRA patch '%s' has %lld values, target '%s' %lld",
                            sd_lora_path(l), p->t[0], (long long)have, p->target, (long long)n);
    float *d = delta(l, p, n, err);
    if (!d) return err->code ? err->code : SD_ERR_NOMEM;
    double alpha = 1.0;
    int64_t rank = alpha_rank(l, p);
    if (p->has_alpha && rank > 0) alpha = p->alpha / (double)rank;
    /* weight += ((strength * alpha) * diff) in float32 */
    float s = (float)(strength * alpha);
    for (int64_t i = 0; i < n; i++) w[i] += s * d[i];
    free(d);
    return SD_OK;
}

/* ---- views ------------------------------------------------------------------ */

/* A touched slot and its float32 working copy. */
typedef struct touched {
    sd_bt **slot;
    sd_tensor *acc;
} touched;

typedef struct tset {
    touched *t;
    size_t n, cap;
} tset;

static touched *touch(tset *s, sd_bt **slot, sd_error *err) {
    for (size_t i = 0; i < s->n; i++)
        if (s->t[i].slot == slot) return &s->t[i];
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        touched *t = realloc(s->t, cap * sizeof *t);
        if (!t) {
            sd_error_set(err, SD_ERR_NOMEM, "out of memory patching weights");
            return NULL;
        }
        s->t = t;
        s->cap = cap;
    }
    sd_tensor *acc = sd_bt_to_host(*slot);
    if (!acc) {
        sd_status rc = sd_backend_take_error((*slot)->be, err);
        if (!rc) sd_error_set(err, SD_ERR_NOMEM, "out of memory patching weights");
        return NULL;
    }
    s->t[s->n] = (touched){slot, acc};
    return &s->t[s->n++];
}

/* Upload every working copy into its slot (F32 for half-precision slots). */
static sd_status commit(tset *s, sd_error *err) {
    sd_status rc = SD_OK;
    for (size_t i = 0; i < s->n; i++) {
        sd_bt *old = *s->t[i].slot;
        if (!rc) {
            /* A patched weight stays in F32, as ComfyUI keeps it on the CPU:
             * rounding base + delta back to F16 would move results past the
             * reference tolerance. Only touched weights pay the 2x. */
            sd_dtype dt = old->dtype == SD_F16 || old->dtype == SD_BF16 ? SD_F32 : old->dtype;
            sd_bt *nw = sd_bt_from_host(old->be, s->t[i].acc, dt);
            if (!nw) {
                rc = sd_backend_take_error(old->be, err);
                if (!rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory patching weights");
            } else {
                sd_bt_free(old);
                *s->t[i].slot = nw;
            }
        }
        sd_tensor_unref(s->t[i].acc);
    }
    free(s->t);
    s->t = NULL;
    s->n = s->cap = 0;
    return rc;
}

static void drop(tset *s) {
    for (size_t i = 0; i < s->n; i++) sd_tensor_unref(s->t[i].acc);
    free(s->t);
}

/* Applies the patches of `part` from every use into the slots `lookup`
 * finds in model m. */
typedef sd_bt **(*lookup_fn)(void *m, const char *key, int64_t *row0, int64_t *rows);

static sd_status apply_part(void *m, lookup_fn lookup, sd_lora_part part, const sd_lora_use *uses,
                            int n, sd_error *err) {
    tset s = {0};
    for (int u = 0; u < n; u++) {
        const sd_lora_plan *pl = uses[u].plan;
        if (!pl || uses[u].strength == 0.0) continue;
        for (size_t i = 0; i < pl->n; i++) {
            const lora_patch *p = &pl->p[i];
            if (p->part != part) continue;
            int64_t row0 = 0, rows = 0;
            sd_bt **slot = lookup(m, p->target, &row0, &rows);
            if (!slot || !*slot) {
                drop(&s);
                return sd_error_set(err, SD_ERR_INVALID, "%s: LoRA target '%s' is not in this model",
                                    sd_lora_path(pl->lora), p->target);
            }
            touched *t = touch(&s, slot, err);
            if (!t) {
                drop(&s);
                return err ? err->code : SD_ERR_NOMEM;
            }
            int64_t per = sd_tensor_numel(t->acc) / t->acc->shape[0];
            float *w = sd_tensor_f32(t->acc) + row0 * per;
            int64_t cnt = rows > 0 ? rows * per : sd_tensor_numel(t->acc);
            sd_status rc = sd_lora_patch_add(pl->lora, p, w, cnt, uses[u].strength, err);
            if (rc) {
                drop(&s);
                return rc;
            }
        }
    }
    return commit(&s, err);
}

static sd_bt **unet_lookup(void *m, const char *key, int64_t *row0, int64_t *rows) {
    *row0 = *rows = 0;
    return sd_unet_param(m, key);
}

static sd_bt **clip_lookup(void *m, const char *key, int64_t *row0, int64_t *rows) {
    return sd_clip_param(m, key, row0, rows);
}

sd_status sd_lora_unet_view(const sd_unet *base, const sd_lora_use *uses, int n, sd_unet **out,
                            sd_error *err) {
    *out = NULL;
    sd_unet *v = NULL;
    sd_status rc = sd_unet_view(base, &v, err);
    if (rc) return rc;
    rc = apply_part(v, unet_lookup, SD_LORA_UNET, uses, n, err);
    if (rc) {
        sd_unet_free(v);
        return rc;
    }
    *out = v;
    return SD_OK;
}

sd_status sd_lora_text_encoder_view(const sd_text_encoder *base, const sd_lora_use *uses, int n,
                                    sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    const sd_clip *bl = sd_text_encoder_clip_l(base), *bg = sd_text_encoder_clip_g(base);
    sd_clip *l = NULL, *g = NULL;
    sd_status rc = SD_OK;
    if (bl) rc = sd_clip_view(bl, &l, err);
    if (!rc && bg) rc = sd_clip_view(bg, &g, err);
    if (!rc && l) rc = apply_part(l, clip_lookup, SD_LORA_CLIP_L, uses, n, err);
    if (!rc && g) rc = apply_part(g, clip_lookup, SD_LORA_CLIP_G, uses, n, err);
    if (rc) {
        sd_clip_free(l);
        sd_clip_free(g);
        return rc;
    }
    return sd_text_encoder_new(sd_text_encoder_kind(base), l, g, sd_text_encoder_tokenizer(base), out,
                               err);
}
