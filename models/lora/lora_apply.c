/* lora_apply.c - adapter deltas (comfy.weight_adapter calculate_weight) and
 * patched model views. All math in float32 on host copies, as ComfyUI
 * patches upcast weights. */
#include "models/lora/lora_internal.h"

#include <math.h>
#include <stdarg.h>
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

/* ---- validation ---------------------------------------------------------------
 *
 * A LoRA file is untrusted input. Every factor's shape is checked here
 * against exactly the arithmetic delta() below does with it, so that delta()
 * only ever indexes within what was validated: each tensor has every
 * dimension > 0 (a rank-0 factor is a division by zero), every inner
 * dimension of a product agrees, every produced size fits in int64. The
 * size the adapter produces is then compared with its target by the caller
 * (plan time and again before the arithmetic). */

/* The error for tensor `key` of patch p. */
static sd_status bad(sd_lora *l, const lora_patch *p, const char *key, sd_error *err,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static sd_status bad(sd_lora *l, const lora_patch *p, const char *key, sd_error *err,
                     const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sd_error_set(err, SD_ERR_FORMAT, "%s: LoRA tensor '%s' (target '%s'): %s",
                        sd_lora_path(l), key ? key : "?", p->target, what);
}

static void shape_str(const sd_st_entry *e, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < e->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)e->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* a * b, or -1 when it does not fit (both >= 0). */
static int64_t mul(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

/* Tensor `i` of p: present, ndim within [lo, hi], every dimension > 0. */
static const sd_st_entry *need(sd_lora *l, const lora_patch *p, int i, int lo, int hi,
                               sd_error *err) {
    const sd_st_entry *e = ent(l, p->t[i]);
    if (!e) {
        bad(l, p, p->t[i], err, "tensor missing from the file");
        return NULL;
    }
    char s[96];
    shape_str(e, s, sizeof s);
    if (e->ndim < lo || e->ndim > hi) {
        if (lo == hi) bad(l, p, e->name, err, "shape %s, expected %d dimensions", s, lo);
        else bad(l, p, e->name, err, "shape %s, expected %d to %d dimensions", s, lo, hi);
        return NULL;
    }
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] <= 0) {
            bad(l, p, e->name, err, "shape %s has an empty dimension (rank 0?)", s);
            return NULL;
        }
    return e;
}

/* The factor a @ b (2-D, a[1] == b[0]) or the Tucker form
 * einsum('i j k l, j r, i p -> p r k l', t, b, a) (t 4-D, a [i, p], b [j, r]):
 * its shape into shape[0..*nd). Returns 0, or the error. */
static sd_status factor_shape(sd_lora *l, const lora_patch *p, int ia, int ib, int it,
                              int64_t shape[4], int *nd, sd_error *err) {
    const sd_st_entry *a = need(l, p, ia, 2, 2, err), *b = a ? need(l, p, ib, 2, 2, err) : NULL;
    if (!b) return err->code;
    char sa[96], sb[96];
    shape_str(a, sa, sizeof sa);
    shape_str(b, sb, sizeof sb);
    if (it >= 0 && p->t[it]) {
        const sd_st_entry *t = need(l, p, it, 4, 4, err);
        if (!t) return err->code;
        char st[96];
        shape_str(t, st, sizeof st);
        if (a->shape[0] != t->shape[0] || b->shape[0] != t->shape[1])
            return bad(l, p, t->name, err,
                       "Tucker core %s does not fit its factors '%s' %s and '%s' %s "
                       "(needs [%lld, %lld, kh, kw])",
                       st, a->name, sa, b->name, sb, (long long)a->shape[0], (long long)b->shape[0]);
        shape[0] = a->shape[1], shape[1] = b->shape[1], shape[2] = t->shape[2], shape[3] = t->shape[3];
        *nd = 4;
    } else {
        if (a->shape[1] != b->shape[0])
            return bad(l, p, b->name, err, "shape %s does not multiply with '%s' %s (rank %lld vs %lld)",
                       sb, a->name, sa, (long long)a->shape[1], (long long)b->shape[0]);
        shape[0] = a->shape[0], shape[1] = b->shape[1];
        *nd = 2;
    }
    return SD_OK;
}

static int64_t shape_numel(const int64_t *s, int nd) {
    int64_t n = 1;
    for (int i = 0; i < nd && n >= 0; i++) n = mul(n, s[i]);
    return n;
}

int64_t sd_lora_patch_check(sd_lora *l, const lora_patch *p, int64_t *rank, sd_error *err) {
    sd_error local;
    if (!err) err = &local;
    int64_t n = -1, r = 0;
    switch (p->kind) {
    case LK_LORA: {
        /* diff = up.flatten(1) @ down'.flatten(1), down' = down or the
         * LoCon product with mid; alpha / rank, rank = down.shape[0]. */
        const sd_st_entry *up = need(l, p, 0, 2, 4, err), *down = up ? need(l, p, 1, 2, 4, err) : NULL;
        if (!down) return -1;
        r = down->shape[0];
        char su[96], sdn[96];
        shape_str(up, su, sizeof su);
        shape_str(down, sdn, sizeof sdn);
        if (rest(up) != r)
            return bad(l, p, up->name, err, "shape %s does not multiply with '%s' %s (rank %lld vs %lld)",
                       su, down->name, sdn, (long long)rest(up), (long long)r), -1;
        if (p->t[2]) {
            /* down'[j, i, y, x] = sum_k down[k, i] * mid[j, k, y, x] */
            const sd_st_entry *mid = need(l, p, 2, 4, 4, err);
            if (!mid) return -1;
            char sm[96];
            shape_str(mid, sm, sizeof sm);
            if (mid->shape[0] != r || mid->shape[1] != r)
                return bad(l, p, mid->name, err, "shape %s is not [rank, rank, kh, kw] with rank %lld of '%s'",
                           sm, (long long)r, down->name), -1;
            if (rest(down) != down->shape[1])
                return bad(l, p, down->name, err, "shape %s must be [rank, in(, 1, 1)] with a lora_mid", sdn), -1;
            n = mul(mul(mul(up->shape[0], down->shape[1]), mid->shape[2]), mid->shape[3]);
        } else {
            n = mul(up->shape[0], rest(down));
        }
        break;
    }
    case LK_LOHA: {
        /* (w1a @ w1b) * (w2a @ w2b), or the Tucker forms; alpha / w1b.shape[0] */
        int64_t s1[4], s2[4];
        int n1 = 0, n2 = 0;
        if ((p->t[4] == NULL) != (p->t[5] == NULL))
            return bad(l, p, p->t[4] ? p->t[4] : p->t[5], err, "hada_t1 and hada_t2 must come together"), -1;
        if (factor_shape(l, p, 0, 1, 4, s1, &n1, err) || factor_shape(l, p, 2, 3, 5, s2, &n2, err))
            return -1;
        int same = n1 == n2;
        for (int i = 0; same && i < n1; i++) same = s1[i] == s2[i];
        if (!same)
            return bad(l, p, p->t[2], err, "the two Hadamard factors differ in shape "
                       "(w1: %lld x %lld..., w2: %lld x %lld...)", (long long)s1[0], (long long)s1[1],
                       (long long)s2[0], (long long)s2[1]), -1;
        r = ent(l, p->t[1])->shape[0];
        n = shape_numel(s1, n1);
        break;
    }
    case LK_LOKR: {
        /* kron(w1 [a, b], w2 [c, d(, kh, kw)]); w1 = w1_a @ w1_b when not
         * stored; w2 = w2_a @ w2_b or its Tucker form with t2. alpha / the
         * rank of the last factored matrix (ComfyUI's `dim`). */
        int64_t s1[4], s2[4];
        int n1 = 2, n2 = 2;
        if (p->t[0]) {
            const sd_st_entry *w1 = need(l, p, 0, 2, 2, err);
            if (!w1) return -1;
            s1[0] = w1->shape[0], s1[1] = w1->shape[1];
        } else {
            if (factor_shape(l, p, 2, 3, -1, s1, &n1, err)) return -1;
            r = ent(l, p->t[3])->shape[0];
        }
        if (p->t[1]) {
            const sd_st_entry *w2 = need(l, p, 1, 2, 4, err);
            if (!w2) return -1;
            if (w2->ndim == 3) return bad(l, p, w2->name, err, "must be 2-D or 4-D"), -1;
            n2 = w2->ndim;
            for (int i = 0; i < n2; i++) s2[i] = w2->shape[i];
            if (p->t[6]) return bad(l, p, p->t[6], err, "lokr_t2 without lokr_w2_a/_b"), -1;
        } else {
            if (factor_shape(l, p, 4, 5, 6, s2, &n2, err)) return -1;
            r = ent(l, p->t[5])->shape[0];
        }
        n = mul(shape_numel(s1, n1), shape_numel(s2, n2));
        break;
    }
    case LK_DIFF: {
        const sd_st_entry *d = need(l, p, 0, 1, SD_MAX_DIMS, err);
        if (!d) return -1;
        n = 1;
        for (int i = 0; i < d->ndim && n >= 0; i++) n = mul(n, d->shape[i]);
        break;
    }
    default: return bad(l, p, p->t[0], err, "unknown adapter kind"), -1;
    }
    if (n < 0) return bad(l, p, p->t[0], err, "the patch it describes is too large"), -1;
    if (rank) *rank = r;
    return n;
}

/* A factor as F32, refused when it holds NaN or Inf (as checkpoint weights
 * are, models/checkpoint/weights.h): one bad value would silently turn the
 * whole patched weight, and so the image, into NaN. */
static sd_tensor *load(sd_lora *l, const char *name, sd_error *err) {
    sd_tensor *t = sd_st_tensor_f32(l->f, name, err);
    if (!t) return NULL;
    const float *v = sd_tensor_f32(t);
    for (int64_t i = 0, n = sd_tensor_numel(t); i < n; i++)
        if (!isfinite(v[i])) {
            sd_tensor_unref(t);
            sd_error_set(err, SD_ERR_FORMAT, "%s: LoRA tensor '%s' contains NaN or Inf (corrupted LoRA)",
                         sd_lora_path(l), name);
            return NULL;
        }
    return t;
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
    int64_t rank = 0, have = sd_lora_patch_check(l, p, &rank, err);
    if (have < 0) return err->code;
    if (have != n)
        return sd_error_set(err, SD_ERR_INVALID, "%s: LoRA patch '%s' has %lld values, target '%s' %lld",
                            sd_lora_path(l), p->t[0], (long long)have, p->target, (long long)n);
    float *d = delta(l, p, n, err);
    if (!d) return err->code ? err->code : SD_ERR_NOMEM;
    double alpha = 1.0;
    if (p->has_alpha && rank > 0) alpha = p->alpha / (double)rank;
    /* weight += ((strength * alpha) * diff) in float32; swap_scale_shift
     * puts the second half of the (row-major) patch first */
    float s = (float)(strength * alpha);
    if (p->swap) {
        int64_t h = n / 2;
        for (int64_t i = 0; i < n; i++) w[i] += s * d[i < n - h ? i + h : i - (n - h)];
    } else {
        for (int64_t i = 0; i < n; i++) w[i] += s * d[i];
    }
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
    int gguf; /* the model holds GGUF-quantized weights (see commit) */
    int keep_half; /* patched F16 / BF16 weights are rounded back (see commit) */
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
            sd_dtype dt = old->dtype == SD_F16 || old->dtype == SD_BF16 || old->dtype == SD_F8_E4M3 ||
                                  old->dtype == SD_F8_E5M2
                              ? SD_F32
                              : old->dtype;
            /* A GGUF model (ComfyUI-GGUF's GGMLOps + GGUFModelPatcher): a
             * quantized weight (BF16 counts as one there) is widened with
             * its dequant_dtype arithmetic (sd_bt_to_host) and patched in
             * float32, as its get_weight does per forward; an F16 one is
             * patched in float32 and stored back as F16
             * (patch_weight_to_device's stochastic_rounding, a plain cast
             * for F16). */
            if (sd_dtype_is_quantized(old->dtype)) dt = SD_F32;
            else if (s->gguf && old->dtype == SD_F16) dt = SD_F16;
            /* A text encoder ComfyUI holds in its file's half type (the
             * Qwen3's dtype_llama, a T5-XXL's dtype_t5): patch_weight_to_device
             * casts base + patch back to it (round to nearest) */
            else if (s->keep_half && (old->dtype == SD_F16 || old->dtype == SD_BF16)) dt = old->dtype;
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
/* Walks every parameter of a model (sd_unet_param_each / sd_clip_param_each). */
typedef void (*each_fn)(void *m, void (*fn)(void *ud, const char *key, sd_bt **slot), void *ud);

static int same_shape(const sd_bt *a, const sd_bt *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* ---- merges ------------------------------------------------------------------- */

double sd_lora_block_ratio(const sd_lora_ratio *ratios, int n, const char *key) {
    double r = ratios[0].ratio;
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(ratios[i].prefix);
        if (len > best && strncmp(key, ratios[i].prefix, len) == 0) {
            r = ratios[i].ratio;
            best = len;
        }
    }
    return r;
}

typedef struct merge_walk {
    tset *s;
    void *src;
    lookup_fn lookup;
    float strength, strength_model;
    int scale; /* strength_model != 1 */
    const sd_lora_use *u; /* its ratios, for a per-block merge */
    sd_error *err;
    sd_status rc;
} merge_walk;

static void merge_one(void *ud, const char *key, sd_bt **slot) {
    merge_walk *w = ud;
    if (w->rc) return;
    int64_t r0 = 0, rows = 0;
    sd_bt **src = w->lookup(w->src, key, &r0, &rows);
    if (!src || !*src || rows || !same_shape(*slot, *src)) return; /* not merged */
    if (w->u->n_ratios > 0) {
        /* ComfyUI: add_patches({k: kp[k]}, 1.0 - ratio, ratio), ratio in double */
        double r = sd_lora_block_ratio(w->u->ratios, w->u->n_ratios, key);
        w->strength = (float)(1.0 - r);
        w->strength_model = (float)r;
        w->scale = r != 1.0;
    }
    touched *t = touch(w->s, slot, w->err);
    if (!t) {
        w->rc = w->err && w->err->code ? w->err->code : SD_ERR_NOMEM;
        return;
    }
    sd_tensor *o = sd_bt_to_host(*src);
    if (!o) {
        w->rc = sd_backend_take_error((*src)->be, w->err);
        if (!w->rc) w->rc = sd_error_set(w->err, SD_ERR_NOMEM, "out of memory merging weights");
        return;
    }
    float *wv = sd_tensor_f32(t->acc);
    const float *ov = sd_tensor_f32(o);
    int64_t n = sd_tensor_numel(t->acc);
    /* weight *= strength_model; weight += strength * w2 (float32, torch's order) */
    if (w->scale)
        for (int64_t i = 0; i < n; i++) wv[i] = wv[i] * w->strength_model;
    for (int64_t i = 0; i < n; i++) {
        float d = w->strength * ov[i];
        wv[i] = wv[i] + d;
    }
    sd_tensor_unref(o);
}

static sd_status apply_merge(void *m, each_fn each, void *src, lookup_fn lookup, tset *s,
                             const sd_lora_use *u, sd_error *err) {
    merge_walk w = {s,   src, lookup, (float)u->strength, (float)u->strength_model,
                    u->strength_model != 1.0, u, err, SD_OK};
    each(m, merge_one, &w);
    return w.rc;
}

/* ---- weight scales ------------------------------------------------------------ */

typedef struct scale_walk {
    tset *s;
    const sd_lora_scale *sc;
    sd_error *err;
    sd_status rc;
} scale_walk;

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* factor of the suffix key ends with; 1 when none */
static float scale_factor(const sd_lora_scale *sc, const char *key) {
    float f = 1.0f;
    int hit = 0;
    for (int i = 0; i < sc->n; i++)
        if (ends_with(key, sc->suffix[i])) {
            /* add_patches per matching suffix: each multiplies in turn */
            f = hit ? f * (float)sc->factor[i] : (float)sc->factor[i];
            hit = 1;
        }
    return f;
}

static void scale_one(void *ud, const char *key, sd_bt **slot) {
    scale_walk *w = ud;
    if (w->rc) return;
    /* an OpenCLIP fused projection: thirds as q, k, v */
    static const char *const fused[2] = {"self_attn.in_proj.weight", "self_attn.in_proj.bias"};
    float f[3] = {1.0f, 1.0f, 1.0f};
    int thirds = 0;
    for (int b = 0; b < 2; b++)
        if (ends_with(key, fused[b])) {
            static const char *const part[2][3] = {
                {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}};
            for (int j = 0; j < 3; j++) f[j] = scale_factor(w->sc, part[b][j]);
            thirds = 1;
        }
    if (!thirds) f[0] = f[1] = f[2] = scale_factor(w->sc, key);
    if (f[0] == 1.0f && f[1] == 1.0f && f[2] == 1.0f) return; /* torch: w * 1.0 is w */
    touched *t = touch(w->s, slot, w->err);
    if (!t) {
        w->rc = w->err && w->err->code ? w->err->code : SD_ERR_NOMEM;
        return;
    }
    float *wv = sd_tensor_f32(t->acc);
    int64_t n = sd_tensor_numel(t->acc), third = n / 3;
    for (int64_t i = 0; i < n; i++) {
        int j = thirds ? (int)(i / third < 2 ? i / third : 2) : 0;
        wv[i] = wv[i] * f[j];
    }
}

static sd_status apply_scale(void *m, each_fn each, tset *s, const sd_lora_scale *sc, sd_error *err) {
    scale_walk w = {s, sc, err, SD_OK};
    each(m, scale_one, &w);
    return w.rc;
}

static void find_quantized(void *ud, const char *key, sd_bt **slot) {
    (void)key;
    if (*slot && sd_dtype_is_quantized((*slot)->dtype)) *(int *)ud = 1;
}

static sd_status apply_part(void *m, lookup_fn lookup, each_fn each, sd_lora_part part,
                            const sd_lora_use *uses, int n, void *const *merge_src, int keep_half,
                            sd_error *err) {
    tset s = {0};
    s.keep_half = keep_half;
    each(m, find_quantized, &s.gguf);
    for (int u = 0; u < n; u++) {
        const sd_lora_plan *pl = uses[u].plan;
        if (!pl && uses[u].scale) {
            sd_status rc = apply_scale(m, each, &s, uses[u].scale, err);
            if (rc) {
                drop(&s);
                return rc;
            }
            continue;
        }
        if (!pl) {
            if (!merge_src[u] ||
                (!uses[u].n_ratios && uses[u].strength == 0.0 && uses[u].strength_model == 1.0))
                continue;
            sd_status rc = apply_merge(m, each, merge_src[u], lookup, &s, &uses[u], err);
            if (rc) {
                drop(&s);
                return rc;
            }
            continue;
        }
        if (uses[u].strength == 0.0) continue;
        for (size_t i = 0; i < pl->n; i++) {
            const lora_patch *p = &pl->p[i];
            if (p->part != part) continue;
            int64_t row0 = 0, rows = 0;
            sd_bt **slot = lookup(m, p->target, &row0, &rows);
            if (p->rows > 0) { /* a slice the key map gave (Flux's q, k, v) */
                row0 = p->row0;
                rows = p->rows;
            }
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
            if (!rc) rc = sd_st_check(pl->lora->f, err); /* the LoRA changed while read */
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

static sd_bt **flux_lookup(void *m, const char *key, int64_t *row0, int64_t *rows) {
    *row0 = *rows = 0;
    return sd_flux_param(m, key);
}

/* A DiT's parameters as ComfyUI's ModelPatcher patches them: those of
 * modules holding no submodule's parameters, so not the root module's own
 * (a key without '.': SD3's pos_embed, Z-Image's pad tokens), which merges
 * and weight scales leave as they are (LoRA plans drop them in lora_plan.c). */
typedef struct leaf_walk {
    void (*fn)(void *ud, const char *key, sd_bt **slot);
    void *ud;
} leaf_walk;

static void leaf_only(void *ud, const char *key, sd_bt **slot) {
    leaf_walk *w = ud;
    if (strchr(key, '.')) w->fn(w->ud, key, slot);
}

static void flux_each(void *m, void (*fn)(void *, const char *, sd_bt **), void *ud) {
    leaf_walk w = {fn, ud};
    sd_flux_param_each(m, leaf_only, &w);
}

static void unet_each(void *m, void (*fn)(void *, const char *, sd_bt **), void *ud) {
    sd_unet_param_each(m, fn, ud);
}

/* The merge sources of uses for one part (NULL where a use is a LoRA or
 * its model lacks the part); calloc'd, the caller frees. */
static void **merge_sources(const sd_lora_use *uses, int n, sd_lora_part part) {
    void **src = calloc(n > 0 ? (size_t)n : 1, sizeof *src);
    for (int i = 0; src && i < n; i++) {
        if (uses[i].plan) continue;
        if (part == SD_LORA_UNET) src[i] = (void *)uses[i].merge_unet;
        else src[i] = sd_lora_te_net(uses[i].merge_te, part);
    }
    return src;
}

/* ---- merge diagnostics -------------------------------------------------------- */

typedef struct cmp_walk {
    void *b;
    lookup_fn lookup;
    size_t matched, mismatched;
    int show;
    char *buf;
    size_t n, used;
} cmp_walk;

static void cmp_one(void *ud, const char *key, sd_bt **slot) {
    cmp_walk *w = ud;
    int64_t r0 = 0, rows = 0;
    sd_bt **o = w->lookup(w->b, key, &r0, &rows);
    if (!o || !*o || rows) return;
    if (same_shape(*slot, *o)) {
        w->matched++;
        return;
    }
    if (w->buf && w->n && (int)w->mismatched < w->show && w->used < w->n) {
        int k = snprintf(w->buf + w->used, w->n - w->used, "%s%s", w->mismatched ? ", " : "", key);
        if (k > 0) w->used += (size_t)k;
        if (w->used >= w->n) w->used = w->n - 1;
    }
    w->mismatched++;
}

static void compare(sd_unet *a, sd_unet *b, const sd_text_encoder *ta, const sd_text_encoder *tb,
                    cmp_walk *w) {
    if (a && b) {
        w->b = b;
        w->lookup = unet_lookup;
        sd_unet_param_each(a, cmp_one, w);
    }
    if (ta && tb) {
        const sd_clip *pa[2] = {sd_text_encoder_clip_l(ta), sd_text_encoder_clip_g(ta)};
        const sd_clip *pb[2] = {sd_text_encoder_clip_l(tb), sd_text_encoder_clip_g(tb)};
        for (int i = 0; i < 2; i++) {
            if (!pa[i] || !pb[i]) continue;
            w->b = (void *)pb[i];
            w->lookup = clip_lookup;
            sd_clip_param_each((sd_clip *)pa[i], cmp_one, w);
        }
    }
}

size_t sd_lora_merge_unmatched(sd_unet *a, sd_unet *b, const sd_text_encoder *ta,
                               const sd_text_encoder *tb, int show, char *buf, size_t n) {
    cmp_walk w = {0};
    w.show = show;
    w.buf = buf;
    w.n = n;
    if (buf && n) buf[0] = '\0';
    compare(a, b, ta, tb, &w);
    return w.mismatched;
}

size_t sd_lora_merge_matched(sd_unet *a, sd_unet *b, const sd_text_encoder *ta,
                             const sd_text_encoder *tb) {
    cmp_walk w = {0};
    compare(a, b, ta, tb, &w);
    return w.matched;
}


sd_status sd_lora_unet_view(const sd_unet *base, const sd_lora_use *uses, int n, sd_unet **out,
                            sd_error *err) {
    *out = NULL;
    sd_unet *v = NULL;
    void **src = merge_sources(uses, n, SD_LORA_UNET);
    if (!src) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = sd_unet_view(base, &v, err);
    if (!rc) rc = apply_part(v, unet_lookup, unet_each, SD_LORA_UNET, uses, n, src, 0, err);
    free(src);
    if (rc) {
        sd_unet_free(v);
        return rc;
    }
    *out = v;
    return SD_OK;
}

static sd_bt **sd3_lookup(void *m, const char *key, int64_t *row0, int64_t *rows) {
    *row0 = *rows = 0;
    return sd_sd3_param(m, key);
}

static void sd3_each(void *m, void (*fn)(void *, const char *, sd_bt **), void *ud) {
    leaf_walk w = {fn, ud};
    sd_sd3_param_each(m, leaf_only, &w);
}

static sd_bt **zimage_lookup(void *m, const char *key, int64_t *row0, int64_t *rows) {
    *row0 = *rows = 0;
    return sd_zimage_param(m, key);
}

static void zimage_each(void *m, void (*fn)(void *, const char *, sd_bt **), void *ud) {
    leaf_walk w = {fn, ud};
    sd_zimage_param_each(m, leaf_only, &w);
}

/* The parameter table of a DiT network of the given kind; 0 when none. */
static int dit_table(sd_dmodel_kind kind, lookup_fn *lookup, each_fn *each) {
    switch (kind) {
    case SD_DMODEL_FLUX: *lookup = flux_lookup, *each = flux_each; return 1;
    case SD_DMODEL_MMDIT: *lookup = sd3_lookup, *each = sd3_each; return 1;
    case SD_DMODEL_ZIMAGE: *lookup = zimage_lookup, *each = zimage_each; return 1;
    default: return 0;
    }
}

size_t sd_lora_merge_dit_unmatched(const sd_dmodel *a, const sd_dmodel *b, size_t *matched, int show,
                                   char *buf, size_t n) {
    cmp_walk w = {0};
    w.show = show;
    w.buf = buf;
    w.n = n;
    if (buf && n) buf[0] = '\0';
    each_fn each;
    if (a->info.kind == b->info.kind && dit_table(a->info.kind, &w.lookup, &each)) {
        w.b = b->net;
        each(a->net, cmp_one, &w);
    }
    if (matched) *matched = w.matched;
    return w.mismatched;
}

sd_status sd_lora_dit_view(const sd_dmodel *base, const sd_lora_use *uses, int n, sd_dmodel *out,
                           sd_error *err) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++)
        if (!uses[i].plan && !uses[i].scale && !uses[i].merge_dit)
            return sd_error_set(err, SD_ERR_INVALID, "a merge into a %s model without the other model",
                                sd_dmodel_kind_name(base->info.kind));
    void **src = calloc(n > 0 ? (size_t)n : 1, sizeof *src); /* the merge sources */
    if (!src) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        if (!uses[i].plan) src[i] = (void *)uses[i].merge_dit;
    sd_status rc;
    switch (base->info.kind) {
    case SD_DMODEL_FLUX: {
        sd_flux *v = NULL;
        rc = sd_flux_view(base->net, &v, err);
        if (!rc) rc = apply_part(v, flux_lookup, flux_each, SD_LORA_UNET, uses, n, src, 0, err);
        if (!rc) sd_flux_as_dmodel(v, out);
        else sd_flux_free(v);
        break;
    }
    case SD_DMODEL_MMDIT: {
        sd_sd3 *v = NULL;
        rc = sd_sd3_view(base->net, &v, err);
        if (!rc) rc = apply_part(v, sd3_lookup, sd3_each, SD_LORA_UNET, uses, n, src, 0, err);
        if (!rc) sd_sd3_as_dmodel(v, out);
        else sd_sd3_free(v);
        break;
    }
    case SD_DMODEL_ZIMAGE: {
        sd_zimage *v = NULL;
        rc = sd_zimage_view(base->net, &v, err);
        if (!rc) rc = apply_part(v, zimage_lookup, zimage_each, SD_LORA_UNET, uses, n, src, 0, err);
        if (!rc) sd_zimage_as_dmodel(v, out);
        else sd_zimage_free(v);
        break;
    }
    default:
        rc = sd_error_set(err, SD_ERR_INVALID, "a %s model is no DiT", sd_dmodel_kind_name(base->info.kind));
    }
    free(src);
    return rc;
}

void sd_lora_dit_free(sd_dmodel *view) {
    if (!view || !view->net) return;
    switch (view->info.kind) {
    case SD_DMODEL_FLUX: sd_flux_free(view->net); break;
    case SD_DMODEL_MMDIT: sd_sd3_free(view->net); break;
    case SD_DMODEL_ZIMAGE: sd_zimage_free(view->net); break;
    default: break;
    }
    memset(view, 0, sizeof *view);
}

sd_status sd_lora_flux_view(const sd_flux *base, const sd_lora_use *uses, int n, sd_flux **out,
                            sd_error *err) {
    *out = NULL;
    sd_dmodel b, v;
    sd_flux_as_dmodel((sd_flux *)base, &b);
    sd_status rc = sd_lora_dit_view(&b, uses, n, &v, err);
    if (!rc) *out = v.net;
    return rc;
}

/* A text-encoder network with its part, as the lookup / walk of apply_part
 * and of merges see it (lora_te.c does the per-part work). */
typedef struct te_net {
    sd_lora_part part;
    void *net;
} te_net;

static sd_bt **te_lookup(void *m, const char *key, int64_t *row0, int64_t *rows) {
    const te_net *t = m;
    return sd_lora_te_param(t->part, t->net, key, row0, rows);
}

static void te_each(void *m, void (*fn)(void *, const char *, sd_bt **), void *ud) {
    const te_net *t = m;
    sd_lora_te_param_each(t->part, t->net, fn, ud);
}

sd_status sd_lora_text_encoder_view(const sd_text_encoder *base, const sd_lora_use *uses, int n,
                                    sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    /* every part of the encoder, one mechanism: a view of each network
     * (sharing the base's tensors), then its patches */
    void *net[SD_LORA_PARTS] = {0};
    sd_status rc = SD_OK;
    for (int p = SD_LORA_CLIP_L; p < SD_LORA_PARTS && !rc; p++) {
        const void *b = sd_lora_te_net(base, (sd_lora_part)p);
        if (!b) continue;
        if (p == SD_LORA_CLIP_L || p == SD_LORA_CLIP_G) rc = sd_clip_view(b, (sd_clip **)&net[p], err);
        else if (p == SD_LORA_T5) rc = sd_t5_view(b, (sd_t5 **)&net[p], err);
        else rc = sd_qwen3_view(b, (sd_qwen3 **)&net[p], err);
        if (rc) break;
        /* the merge sources as te_net too (their lookup is te_lookup) */
        void **src = merge_sources(uses, n, (sd_lora_part)p);
        te_net *srcnet = calloc(n > 0 ? (size_t)n : 1, sizeof *srcnet);
        if (!src || !srcnet) {
            free(src);
            free(srcnet);
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            break;
        }
        for (int u = 0; u < n; u++)
            if (src[u]) {
                srcnet[u] = (te_net){(sd_lora_part)p, src[u]};
                src[u] = &srcnet[u];
            }
        te_net self = {(sd_lora_part)p, net[p]};
        /* ComfyUI holds a Qwen3 in its file's type (llama_detect's
         * dtype_llama) and a T5 with a block 23 in its final norm's
         * (comfy.sd.t5xxl_detect's dtype_t5), so their patched weights
         * round back to it */
        int keep_half = p == SD_LORA_QWEN3 || (p == SD_LORA_T5 && sd_t5_get_config(b)->layers >= 24);
        rc = apply_part(&self, te_lookup, te_each, (sd_lora_part)p, uses, n, src, keep_half, err);
        free(src);
        free(srcnet);
    }
    if (rc) {
        sd_clip_free(net[SD_LORA_CLIP_L]);
        sd_clip_free(net[SD_LORA_CLIP_G]);
        sd_t5_free(net[SD_LORA_T5]);
        sd_qwen3_free(net[SD_LORA_QWEN3]);
        return rc;
    }
    return sd_text_encoder_with_models(base, net[SD_LORA_CLIP_L], net[SD_LORA_CLIP_G], net[SD_LORA_T5],
                                       net[SD_LORA_QWEN3], out, err);
}
