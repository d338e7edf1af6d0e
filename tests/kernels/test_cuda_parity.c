/* test_cuda_parity.c - every backend op on CPU and CUDA, compared.
 *
 * Random inputs (fixed seeds) on fixed odd shapes and on shapes drawn from
 * the RNG, uploaded to both backends; each op's results are downloaded and
 * compared by the largest absolute difference divided by max(1, max |cpu|).
 * The tolerance depends on the op class and, for the GEMM-based ops (linear,
 * matmul, conv2d), on the precision mode (docs/cuda.md lists them).
 * Skipped (exit 77) when the build has no CUDA backend or no GPU is found.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "testutil.h"

/* ---- tolerances (normalised max error) ---------------------------------------- */

#define TOL_EXACT 0.0   /* data movement: bit-identical */
#define TOL_POINT 2e-6  /* elementwise math: a few ulps of libm vs CUDA math */
#define TOL_NORM 1e-5   /* norms, softmax: reduction order */
#define TOL_ATTN 2e-5   /* the F32 attention kernel */

static double tol_gemm(sd_precision p) {
    switch (p) {
    case SD_PREC_BF16: return 1e-2; /* inputs rounded to 8-bit mantissas */
    case SD_PREC_F16: return 3e-3;  /* 11-bit mantissas */
    default: return 2e-5;           /* F32 FMA, summation order only */
    }
}

/* Attention in BF16/F16 runs its two products on tensor cores with q, k, v
 * and the probabilities rounded to 16 bits and F32 accumulation: the same
 * input rounding, and so the same bound, as linear/matmul; F32 mode keeps
 * the F32 kernel. */
static double tol_attn(sd_precision p) { return p == SD_PREC_F32 ? TOL_ATTN : tol_gemm(p); }

static const char *prec_name(sd_precision p) {
    return p == SD_PREC_BF16 ? "bf16" : p == SD_PREC_F16 ? "f16" : "f32";
}

/* ---- harness ------------------------------------------------------------------ */

typedef struct {
    sd_backend *be[2]; /* 0 = cpu, 1 = cuda */
    sd_precision prec;
    uint64_t rng;
} ctx;

typedef struct {
    sd_bt *t[2];
} pair;

static struct {
    char name[48];
    double worst, tol;
    int runs;
} stats[128];
static int n_stats;

static uint64_t next_u64(ctx *c) {
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

static float uniform(ctx *c) { return (float)((next_u64(c) >> 40) / 16777216.0 * 2.0 - 1.0); }
static int64_t dim(ctx *c, int64_t lo, int64_t hi) {
    return lo + (int64_t)(next_u64(c) % (uint64_t)(hi - lo + 1));
}

static pair upload(ctx *c, sd_tensor *h) {
    pair p = {{NULL, NULL}};
    for (int s = 0; s < 2; s++) p.t[s] = sd_bt_from_host(c->be[s], h, h->dtype);
    sd_tensor_unref(h);
    return p;
}

/* Uniform [-amp, amp) F32 tensor on both backends; with round16, its values
 * already representable in the mode's 16-bit type (bf16 or f16; unchanged
 * in f32), so that both backends start from the same rounded inputs. */
static pair rnd_values(ctx *c, int round16, float amp, int ndim, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3) {
    sd_tensor *h = sd_tensor_new4(SD_F32, ndim, d0, d1, d2, d3);
    if (!h) return (pair){{NULL, NULL}};
    float *v = sd_tensor_f32(h);
    for (int64_t i = 0; i < sd_tensor_numel(h); i++) {
        v[i] = amp * uniform(c);
        if (round16 && c->prec == SD_PREC_BF16) v[i] = sd_bf16_to_f32(sd_f32_to_bf16(v[i]));
        if (round16 && c->prec == SD_PREC_F16) v[i] = sd_f16_to_f32(sd_f32_to_f16(v[i]));
    }
    return upload(c, h);
}

static pair rnd(ctx *c, float amp, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return rnd_values(c, 0, amp, ndim, d0, d1, d2, d3);
}

static pair rnd_mode(ctx *c, float amp, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return rnd_values(c, 1, amp, ndim, d0, d1, d2, d3);
}

static pair rnd_shape(ctx *c, float amp, int ndim, const int64_t *shape) {
    sd_tensor *h = sd_tensor_new(SD_F32, ndim, shape);
    if (!h) return (pair){{NULL, NULL}};
    float *v = sd_tensor_f32(h);
    for (int64_t i = 0; i < sd_tensor_numel(h); i++) v[i] = amp * uniform(c);
    return upload(c, h);
}

static void release(pair *p) {
    for (int s = 0; s < 2; s++) sd_bt_free(p->t[s]);
    p->t[0] = p->t[1] = NULL;
}

static void record(const char *name, double err, double tol) {
    int i = 0;
    while (i < n_stats && strcmp(stats[i].name, name) != 0) i++;
    if (i == n_stats) {
        if (n_stats == (int)(sizeof stats / sizeof stats[0])) return;
        snprintf(stats[i].name, sizeof stats[i].name, "%s", name);
        stats[i].worst = 0;
        n_stats++;
    }
    if (err > stats[i].worst) stats[i].worst = err;
    stats[i].tol = tol;
    stats[i].runs++;
}

/* Compare the two results of one op (and free them). */
static void compare(ctx *c, const char *op, const char *what, pair r, double tol) {
    char name[48];
    snprintf(name, sizeof name, "%s/%s", op, prec_name(c->prec));
    for (int s = 0; s < 2; s++) {
        const sd_error *e = sd_backend_error(c->be[s]);
        CHECK_MSG(r.t[s] != NULL, "%s %s on %s: %s", name, what, s ? "cuda" : "cpu",
                  e ? e->msg : "NULL result");
        sd_backend_clear_error(c->be[s]);
    }
    if (!r.t[0] || !r.t[1]) {
        release(&r);
        return;
    }
    sd_tensor *h[2] = {sd_bt_to_host(r.t[0]), sd_bt_to_host(r.t[1])};
    CHECK_MSG(h[0] && h[1], "%s %s: download failed: %s", name, what,
              sd_backend_error(c->be[1]) ? sd_backend_error(c->be[1])->msg : "?");
    if (h[0] && h[1]) {
        int same = sd_tensor_same_shape(h[0], h[1]) && h[0]->dtype == h[1]->dtype;
        CHECK_MSG(same, "%s %s: shapes differ", name, what);
        if (same && h[0]->dtype == SD_F32) {
            const float *a = sd_tensor_f32(h[0]), *b = sd_tensor_f32(h[1]);
            double maxe = 0, maxa = 0;
            int64_t worst = -1, n = sd_tensor_numel(h[0]);
            for (int64_t i = 0; i < n; i++) {
                double d = fabs((double)a[i] - (double)b[i]);
                if (isnan(a[i]) != isnan(b[i]) || isinf(a[i]) != isinf(b[i])) d = INFINITY;
                else if (isnan(a[i]) || isinf(a[i])) d = a[i] == b[i] || isnan(a[i]) ? 0 : INFINITY;
                if (d > maxe) {
                    maxe = d;
                    worst = i;
                }
                if (isfinite(a[i]) && fabs(a[i]) > maxa) maxa = fabs(a[i]);
            }
            double err = maxe / (maxa > 1 ? maxa : 1);
            record(name, err, tol);
            CHECK_MSG(err <= tol, "%s %s: normalised error %.3g > %.3g (at %lld: cpu %.9g cuda %.9g)",
                      name, what, err, tol, (long long)worst, worst >= 0 ? a[worst] : 0.0,
                      worst >= 0 ? b[worst] : 0.0);
        } else if (same) {
            CHECK_MSG(memcmp(h[0]->data, h[1]->data, h[0]->nbytes) == 0, "%s %s: bytes differ",
                      name, what);
        }
    }
    sd_tensor_unref(h[0]);
    sd_tensor_unref(h[1]);
    release(&r);
}

/* r.t[s] = expr, with S(p) naming input p on side s. */
#define S(p) ((p).t[s])
#define BOTH(r, expr)                                                                         \
    do {                                                                                      \
        for (int s = 0; s < 2; s++) (r).t[s] = (expr);                                        \
    } while (0)

/* ---- ops ------------------------------------------------------------------------------ */

static void test_linear(ctx *c) {
    int64_t cases[][3] = {{7, 37, 19}, {1, 1, 1}, {300, 320, 640}, {77, 768, 31}, {5, 0, 3}};
    for (int i = 0; i < 6; i++) {
        int64_t R = i < 5 ? cases[i][0] : dim(c, 1, 200), K = i < 5 ? cases[i][1] : dim(c, 1, 300),
                O = i < 5 ? cases[i][2] : dim(c, 1, 300);
        for (int bias = 0; bias < 2; bias++) {
            pair x = rnd(c, 1, 3, 2, R, K, 0), w = rnd(c, 1, 2, O, K, 0, 0),
                 b = bias ? rnd(c, 1, 1, O, 0, 0, 0) : (pair){{NULL, NULL}}, r;
            BOTH(r, sd_op_linear(S(x), S(w), S(b)));
            char what[96];
            snprintf(what, sizeof what, "x [2,%lld,%lld] w [%lld,%lld]%s", (long long)R,
                     (long long)K, (long long)O, (long long)K, bias ? " +b" : "");
            compare(c, "linear", what, r, tol_gemm(c->prec));
            release(&x), release(&w), release(&b);
        }
    }
}

static void test_matmul(ctx *c) {
    for (int i = 0; i < 8; i++) {
        int64_t B = dim(c, 1, 4), M = dim(c, 1, 90), K = dim(c, 1, 90), N = dim(c, 1, 90);
        int tb = i & 1, shared = (i >> 1) & 1, twod = i == 6;
        float alpha = i == 4 ? 0.125f : 1.0f;
        pair a = twod ? rnd(c, 1, 2, M, K, 0, 0) : rnd(c, 1, 3, B, M, K, 0);
        int64_t Bb = shared || twod ? 1 : B;
        pair b = tb ? rnd(c, 1, 3, Bb, N, K, 0) : rnd(c, 1, 3, Bb, K, N, 0), r;
        if (twod) {
            release(&b);
            b = tb ? rnd(c, 1, 2, N, K, 0, 0) : rnd(c, 1, 2, K, N, 0, 0);
        }
        BOTH(r, sd_op_matmul(S(a), S(b), tb, alpha));
        char what[96];
        snprintf(what, sizeof what, "B %lld M %lld K %lld N %lld trans_b %d Bb %lld", (long long)B,
                 (long long)M, (long long)K, (long long)N, tb, (long long)Bb);
        compare(c, "matmul", what, r, tol_gemm(c->prec));
        release(&a), release(&b);
    }
}

static void test_conv2d(ctx *c) {
    /* N, C, H, W, O, kh, kw, stride, pad_h, pad_w */
    int64_t cases[][10] = {{2, 5, 13, 11, 7, 3, 3, 1, 1, 1}, {1, 3, 9, 9, 4, 3, 3, 2, 0, 0},
                           {1, 6, 7, 5, 3, 1, 1, 1, 0, 0},   {1, 64, 32, 32, 64, 3, 3, 1, 1, 1},
                           {2, 4, 8, 10, 4, 3, 3, 2, 1, 1},  {1, 3, 6, 7, 2, 2, 3, 1, 0, 2},
                           {0, 0, 0, 0, 0, 3, 3, 1, 1, 1}};
    for (int i = 0; i < 7; i++) {
        int64_t *k = cases[i];
        if (i == 6) { /* random */
            k[0] = dim(c, 1, 2), k[1] = dim(c, 1, 24), k[2] = dim(c, 3, 40), k[3] = dim(c, 3, 40);
            k[4] = dim(c, 1, 24);
        }
        pair x = rnd(c, 1, 4, k[0], k[1], k[2], k[3]), w = rnd(c, 0.5f, 4, k[4], k[1], k[5], k[6]);
        for (int bias = 0; bias < 2; bias++) {
            pair b = bias ? rnd(c, 1, 1, k[4], 0, 0, 0) : (pair){{NULL, NULL}}, r;
            BOTH(r, sd_op_conv2d(S(x), S(w), S(b), (int)k[7], (int)k[8], (int)k[9]));
            char what[128];
            snprintf(what, sizeof what, "x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] s%lld p%lld,%lld%s",
                     (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3],
                     (long long)k[4], (long long)k[1], (long long)k[5], (long long)k[6],
                     (long long)k[7], (long long)k[8], (long long)k[9], bias ? " +b" : "");
            compare(c, "conv2d", what, r, tol_gemm(c->prec));
            release(&b);
        }
        release(&x), release(&w);
    }
}

static void test_norms(ctx *c) {
    /* N, C, H, W, groups; the last two span several statistics blocks */
    int64_t cases[][5] = {{2, 32, 9, 7, 8}, {1, 6, 5, 3, 3}, {3, 4, 1, 1, 4},
                          {1, 64, 96, 96, 32}, {1, 4, 300, 300, 2}};
    for (int i = 0; i < 5; i++) {
        int64_t *k = cases[i];
        pair x = rnd(c, 3, 4, k[0], k[1], k[2], k[3]), g = rnd(c, 1, 1, k[1], 0, 0, 0),
             b = rnd(c, 1, 1, k[1], 0, 0, 0), r;
        /* an offset mean tests the two-pass statistics */
        sd_tensor *oh = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
        sd_tensor_f32(oh)[0] = 7.0f;
        pair off = upload(c, oh), xs;
        BOTH(xs, sd_op_add(S(x), S(off)));
        release(&off);
        for (int silu = 0; silu < 2; silu++) {
            pair none = {{NULL, NULL}};
            BOTH(r, sd_op_group_norm(S(xs), (int)k[4], S(g), S(b), 1e-5f, silu));
            compare(c, "group_norm", silu ? "silu" : "affine", r, TOL_NORM);
            BOTH(r, sd_op_group_norm(S(xs), (int)k[4], S(none), S(none), 1e-6f, silu));
            compare(c, "group_norm", silu ? "silu, no affine" : "no affine", r, TOL_NORM);
        }
        release(&x), release(&g), release(&b), release(&xs);
    }
    for (int i = 0; i < 4; i++) {
        int64_t C = i == 0 ? 77 : i == 1 ? 1 : i == 2 ? 1280 : dim(c, 2, 700);
        pair x = rnd(c, 4, 3, 3, 5, C, 0), g = rnd(c, 1, 1, C, 0, 0, 0), b = rnd(c, 1, 1, C, 0, 0, 0),
             none = {{NULL, NULL}}, r;
        BOTH(r, sd_op_layer_norm(S(x), S(g), S(b), 1e-5f));
        compare(c, "layer_norm", "affine", r, TOL_NORM);
        BOTH(r, sd_op_layer_norm(S(x), S(none), S(b), 1e-5f));
        compare(c, "layer_norm", "beta only", r, TOL_NORM);
        BOTH(r, sd_op_softmax(S(x)));
        compare(c, "softmax", "random", r, TOL_NORM);
        release(&x), release(&g), release(&b);
    }
    /* masked rows: -inf entries, and a row of only -inf (zeros on both) */
    sd_tensor *h = sd_tensor_new4(SD_F32, 2, 3, 9, 0, 0);
    float *v = sd_tensor_f32(h);
    for (int i = 0; i < 27; i++) v[i] = i < 9 ? -INFINITY : (i % 4 == 0 ? -INFINITY : uniform(c));
    pair x = upload(c, h), r;
    BOTH(r, sd_op_softmax(S(x)));
    compare(c, "softmax", "masked rows", r, TOL_NORM);
    release(&x);
}

static void test_attention(ctx *c) {
    /* N, Lq, Lk, heads, D, causal */
    int64_t cases[][6] = {{2, 37, 77, 3, 40, 0},  {1, 77, 77, 2, 64, 1}, {1, 33, 40, 1, 160, 0},
                          {1, 19, 70, 1, 512, 0}, {2, 5, 3, 2, 13, 0},   {1, 1, 1, 1, 1, 0},
                          {1, 300, 300, 2, 80, 0}, {1, 40, 20, 1, 8, 1},  {0, 0, 0, 0, 0, 0}};
    for (int i = 0; i < 9; i++) {
        int64_t *k = cases[i];
        if (i == 8) {
            k[0] = dim(c, 1, 2), k[1] = dim(c, 1, 150), k[2] = dim(c, 1, 150);
            k[3] = dim(c, 1, 4), k[4] = dim(c, 1, 100), k[5] = dim(c, 0, 1);
        }
        int64_t HD = k[3] * k[4];
        pair q = rnd(c, 2, 3, k[0], k[1], HD, 0), kk = rnd(c, 2, 3, k[0], k[2], HD, 0),
             vv = rnd(c, 1, 3, k[0], k[2], HD, 0), r;
        BOTH(r, sd_op_attention(S(q), S(kk), S(vv), (int)k[3], (int)k[5]));
        char what[96];
        snprintf(what, sizeof what, "N %lld Lq %lld Lk %lld heads %lld D %lld causal %lld",
                 (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3],
                 (long long)k[4], (long long)k[5]);
        compare(c, "attention", what, r, tol_attn(c->prec));
        release(&q), release(&kk), release(&vv);
    }
}

/* One sd_op_attention_ex case on both backends. k: N, Lq, Lk, heads,
 * kv_heads, D, causal, bias kind (0 none, 1 [1,H,Lq,Lk], 2 [N,1,1,Lk] mask
 * with every third key of batch item 1 masked). */
static void attn_case(ctx *c, const int64_t *k, const char *op, double tol) {
    int64_t HD = k[3] * k[5], KD = k[4] * k[5];
    /* q, k, v come already rounded to the mode's 16 bits. The reference is
     * the CPU in F32, and with bias kind 1 the scores are unscaled (scale 1,
     * as T5's): logits of standard deviation ~5 turn the 2^-9 relative
     * rounding of q and k into logit errors of ~0.03 and, through exp, output
     * errors of 1-3 % against exact inputs — on any correct 16-bit kernel (a
     * numpy model of the CUDA path and of the CPU's bf16 emulation both show
     * it), which test_attention's scaled cases do not. With the inputs
     * representable, what remains is what the kernel itself rounds (the
     * probabilities) and its accumulation, which tol_gemm bounds;
     * test_attention still checks the kernel's own rounding of raw inputs. */
    pair q = rnd_mode(c, 2, 3, k[0], k[1], HD, 0), kk = rnd_mode(c, 2, 3, k[0], k[2], KD, 0),
         vv = rnd_mode(c, 1, 3, k[0], k[2], KD, 0), bias = {{NULL, NULL}}, r;
    if (k[7] == 1) bias = rnd(c, 3, 4, 1, k[3], k[1], k[2]);
    if (k[7] == 2) { /* every third key of batch item 1 masked */
        sd_tensor *h = sd_tensor_new4(SD_F32, 4, k[0], 1, 1, k[2]);
        float *v = sd_tensor_f32(h);
        for (int64_t j = 0; j < k[0] * k[2]; j++)
            v[j] = j >= k[2] && j % 3 == 0 ? -INFINITY : 0.5f * uniform(c);
        bias = upload(c, h);
    }
    sd_attn_opts o[2] = {{k[7] == 1 ? 1.0f : 0.0f, (int)k[6], (int)k[4], bias.t[0]},
                         {k[7] == 1 ? 1.0f : 0.0f, (int)k[6], (int)k[4], bias.t[1]}};
    BOTH(r, sd_op_attention_ex(S(q), S(kk), S(vv), (int)k[3], &o[s]));
    char what[96];
    snprintf(what, sizeof what, "N %lld Lq %lld Lk %lld heads %lld/%lld D %lld bias %lld",
             (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3],
             (long long)k[4], (long long)k[5], (long long)k[7]);
    compare(c, op, what, r, tol);
    release(&q), release(&kk), release(&vv), release(&bias);
}

/* The transformer families' ops: attention with a bias (T5), masks and
 * grouped-query heads (Qwen3), RMSNorm, RoPE in both pair layouts, and the
 * tanh GELU. */
static void test_transformer(ctx *c) {
    /* N, Lq, Lk, heads, kv_heads, D, causal, bias kind (0 none, 1 [1,H,Lq,Lk], 2 [N,1,1,Lk] mask) */
    int64_t cases[][8] = {{2, 19, 19, 4, 4, 16, 0, 1}, {2, 9, 13, 2, 2, 64, 0, 2},
                          {1, 33, 33, 8, 2, 128, 1, 0}, {2, 40, 70, 6, 3, 40, 0, 2}};
    for (int i = 0; i < 4; i++) attn_case(c, cases[i], "attention_ex", tol_attn(c->prec));
    int64_t C = dim(c, 2, 700);
    pair x = rnd(c, 4, 3, 3, 5, C, 0), g = rnd(c, 1, 1, C, 0, 0, 0), none = {{NULL, NULL}}, r;
    BOTH(r, sd_op_rms_norm(S(x), S(g), 1e-6f));
    compare(c, "rms_norm", "gamma", r, TOL_NORM);
    BOTH(r, sd_op_rms_norm(S(x), S(none), 1e-6f));
    compare(c, "rms_norm", "no gamma", r, TOL_NORM);
    BOTH(r, sd_op_gelu_tanh(S(x)));
    compare(c, "gelu_tanh", "[3, 5, C]", r, TOL_POINT);
    release(&x), release(&g);
    for (int inter = 0; inter < 2; inter++) {
        int64_t N = 2, L = dim(c, 1, 40), H = dim(c, 1, 4), D = 2 * dim(c, 1, 32);
        pair xr = rnd(c, 2, 3, N, L, H * D, 0);
        sd_tensor *h = sd_tensor_new4(SD_F32, 4, N, L, D / 2, 2);
        float *v = sd_tensor_f32(h);
        for (int64_t j = 0; j < N * L * D / 2; j++) {
            double t = 3.0 * uniform(c);
            v[2 * j] = (float)cos(t), v[2 * j + 1] = (float)sin(t);
        }
        pair rot = upload(c, h);
        BOTH(r, sd_op_rope(S(xr), S(rot), (int)H, inter));
        compare(c, "rope", inter ? "interleaved" : "rotate_half", r, TOL_POINT);
        release(&xr), release(&rot);
    }
}

static void test_elementwise(ctx *c) {
    int64_t N = dim(c, 1, 3), C = dim(c, 1, 9), H = dim(c, 1, 17), W = dim(c, 1, 23);
    pair x = rnd(c, 6, 4, N, C, H, W), r;
    static const char *names[] = {"scale", "silu", "gelu", "quick_gelu", "tanh", "relu"};
    for (int op = 0; op < 6; op++) {
        switch (op) {
        case 0: BOTH(r, sd_op_scale(S(x), -0.37f)); break;
        case 1: BOTH(r, sd_op_silu(S(x))); break;
        case 2: BOTH(r, sd_op_gelu(S(x))); break;
        case 3: BOTH(r, sd_op_quick_gelu(S(x))); break;
        case 4: BOTH(r, sd_op_tanh(S(x))); break;
        default: BOTH(r, sd_op_relu(S(x))); break;
        }
        compare(c, names[op], "NCHW", r, TOL_POINT);
    }
    /* broadcasts: same shape, suffix [W], [C, 1, 1] (numpy), [C] (channel), [1] */
    int64_t bshapes[][4] = {{N, C, H, W}, {W, 0, 0, 0}, {C, 1, 1, 0}, {C, 0, 0, 0}, {1, 0, 0, 0},
                            {N, 1, H, 1}};
    int bnd[] = {4, 1, 3, 1, 1, 4};
    for (int i = 0; i < 6; i++) {
        pair b = rnd_shape(c, 2, bnd[i], bshapes[i]);
        BOTH(r, sd_op_add(S(x), S(b)));
        compare(c, "add", "broadcast", r, TOL_POINT);
        BOTH(r, sd_op_mul(S(x), S(b)));
        compare(c, "mul", "broadcast", r, TOL_POINT);
        release(&b);
    }
    pair nc = rnd(c, 1, 2, N, C, 0, 0);
    BOTH(r, sd_op_add_channel(S(x), S(nc)));
    compare(c, "add_channel", "[N, C]", r, TOL_POINT);
    release(&nc);
    int64_t F = dim(c, 1, 40);
    pair g = rnd(c, 3, 3, 2, 7, 2 * F, 0);
    BOTH(r, sd_op_geglu(S(g)));
    compare(c, "geglu", "[2, 7, 2F]", r, TOL_POINT);
    release(&g), release(&x);
}

static void test_layout(ctx *c) {
    int64_t N = dim(c, 1, 3), C = dim(c, 1, 7), H = dim(c, 1, 13), W = dim(c, 1, 11);
    pair x = rnd(c, 1, 4, N, C, H, W), r;
    BOTH(r, sd_op_upsample_nearest2x(S(x)));
    compare(c, "upsample2x", "NCHW", r, TOL_EXACT);
    BOTH(r, sd_op_pad2d(S(x), 1, 2, 3, 0));
    compare(c, "pad2d", "(1,2,3,0)", r, TOL_EXACT);
    BOTH(r, sd_op_pad2d(S(x), 0, 1, 0, 1));
    compare(c, "pad2d", "(0,1,0,1)", r, TOL_EXACT);
    for (int d = 0; d < 4; d++) {
        int64_t shape[4] = {N, C, H, W};
        shape[d] = dim(c, 1, 5);
        pair y = rnd_shape(c, 1, 4, shape);
        BOTH(r, sd_op_concat(S(x), S(y), d));
        compare(c, "concat", "dim", r, TOL_EXACT);
        release(&y);
        int64_t len = x.t[0] ? x.t[0]->shape[d] : 1, st = dim(c, 0, len - 1), en = dim(c, st, len);
        BOTH(r, sd_op_slice(S(x), d, st, en));
        compare(c, "slice", "dim", r, TOL_EXACT);
    }
    int perms[][4] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0}, {1, 0, 2, 3}};
    for (int i = 0; i < 4; i++) {
        BOTH(r, sd_op_permute(S(x), perms[i]));
        compare(c, "permute", "4-D", r, TOL_EXACT);
    }
    BOTH(r, sd_op_copy(S(x)));
    compare(c, "copy", "NCHW", r, TOL_EXACT);
    /* a view reads the same storage and outlives nothing */
    int64_t flat[2] = {N * C, H * W};
    pair v;
    BOTH(v, sd_bt_view(S(x), 2, flat));
    BOTH(r, sd_op_scale(S(v), 2.0f));
    compare(c, "view", "scale of a view", r, TOL_POINT);
    release(&v);
    release(&x);
    /* embedding with I32 and I64 ids */
    int64_t V = dim(c, 2, 50), Cd = dim(c, 1, 33);
    pair tab = rnd(c, 1, 2, V, Cd, 0, 0);
    for (int wide = 0; wide < 2; wide++) {
        sd_tensor *ids = sd_tensor_new4(wide ? SD_I64 : SD_I32, 2, 2, 9, 0, 0);
        for (int i = 0; i < 18; i++) {
            int64_t id = (int64_t)(next_u64(c) % (uint64_t)V);
            if (wide) ((int64_t *)ids->data)[i] = id;
            else ((int32_t *)ids->data)[i] = (int32_t)id;
        }
        pair p = upload(c, ids);
        BOTH(r, sd_op_embedding(S(tab), S(p)));
        compare(c, "embedding", wide ? "I64 ids" : "I32 ids", r, TOL_EXACT);
        pair cp;
        BOTH(cp, sd_op_copy(S(p))); /* integer copy: bytes compared */
        compare(c, "copy", "I64/I32", cp, TOL_EXACT);
        release(&p);
    }
    release(&tab);
}

/* Weights kept in a narrow dtype (F16, BF16, fp8, scaled fp8): the same
 * stored bytes on both backends, widened per op (CPU: convert.c, CUDA: the
 * widening kernel and the embedding gather). The widening is exact, so the tolerances are
 * the ops' own; the copy downloads the stored bytes. */
static void test_narrow_weights(ctx *c) {
    static const sd_dtype dts[4] = {SD_F16, SD_BF16, SD_F8_E4M3, SD_F8_E5M2};
    int64_t rows = dim(c, 1, 9), in = dim(c, 1, 70), out = dim(c, 1, 40);
    pair x = rnd(c, 1, 2, rows, in, 0, 0), r;
    for (int k = 0; k < 4; k++) {
        const char *nm = sd_dtype_name(dts[k]);
        sd_tensor *w = sd_tensor_new4(SD_F32, 2, out, in, 0, 0), *b = sd_tensor_new4(SD_F32, 1, out, 0, 0, 0);
        for (int64_t i = 0; i < out * in; i++) sd_tensor_f32(w)[i] = 0.3f * uniform(c);
        for (int64_t i = 0; i < out; i++) sd_tensor_f32(b)[i] = 2.0f * uniform(c);
        sd_tensor *wn = sd_tensor_to_dtype(w, dts[k]), *bn = sd_tensor_to_dtype(b, dts[k]);
        sd_tensor_unref(w);
        sd_tensor_unref(b);
        pair pw = upload(c, wn), pb = upload(c, bn);
        CHECK_MSG(pw.t[1] && pw.t[1]->dtype == dts[k], "%s weight kept as stored on cuda", nm);
        BOTH(r, sd_op_linear(S(x), S(pw), S(pb)));
        compare(c, "linear", nm, r, tol_gemm(c->prec));
        BOTH(r, sd_op_mul(S(pb), S(pb))); /* narrow operands of an elementwise op */
        compare(c, "mul", nm, r, TOL_POINT);
        BOTH(r, sd_op_copy(S(pw))); /* stored bytes, downloaded as F32 */
        compare(c, "copy", nm, r, TOL_EXACT);
        sd_tensor *ids = sd_tensor_new4(SD_I64, 1, 7, 0, 0, 0);
        for (int i = 0; i < 7; i++) ((int64_t *)ids->data)[i] = (int64_t)(next_u64(c) % (uint64_t)out);
        pair pi = upload(c, ids);
        BOTH(r, sd_op_embedding(S(pw), S(pi)));
        compare(c, "embedding", nm, r, TOL_EXACT);
        if (dts[k] == SD_F8_E4M3 || dts[k] == SD_F8_E5M2) {
            /* a scaled fp8 weight (models/checkpoint/fp8_scaled.h): one F32
             * product per value on both, so the same tolerances */
            char sn[40];
            snprintf(sn, sizeof sn, "%s scaled", nm);
            if (pw.t[0]) pw.t[0]->scale = 0.037f;
            if (pw.t[1]) pw.t[1]->scale = 0.037f;
            BOTH(r, sd_op_linear(S(x), S(pw), S(pb)));
            compare(c, "linear", sn, r, tol_gemm(c->prec));
            BOTH(r, sd_op_copy(S(pw)));
            compare(c, "copy", sn, r, TOL_EXACT);
            BOTH(r, sd_op_embedding(S(pw), S(pi)));
            compare(c, "embedding", sn, r, TOL_EXACT);
        }
        release(&pi);
        release(&pw);
        release(&pb);
    }
    release(&x);
}

/* GGUF-quantized weights: the same random blocks (finite f16 scales) on
 * both backends, widened per op in each rounding mode (CPU: core/quant.c,
 * CUDA: dequant.cu). Both compute the same rounded operations, so the
 * widened copy must match bit for bit; linear then at the GEMM tolerance. */
static void test_quant_weights(ctx *c) {
    static const sd_dtype dts[] = {SD_Q4_0, SD_Q4_1, SD_Q5_0, SD_Q5_1, SD_Q8_0, SD_Q2_K,
                                   SD_Q3_K, SD_Q4_K, SD_Q5_K, SD_Q6_K, SD_IQ4_NL, SD_IQ4_XS};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        const char *nm = sd_dtype_name(dts[k]);
        int64_t rows = dim(c, 1, 5), out = dim(c, 1, 9), in = sd_dtype_block(dts[k]) * dim(c, 1, 3);
        sd_tensor *w = sd_tensor_new4(dts[k], 2, out, in, 0, 0);
        uint8_t *p = w->data;
        for (size_t i = 0; i < w->nbytes; i++) p[i] = (uint8_t)next_u64(c);
        size_t bs = sd_dtype_size(dts[k]);
        for (size_t b = 0; b < w->nbytes / bs; b++)
            for (size_t i = 1; i < bs; i += 2) p[b * bs + i] &= 0x37; /* every f16 finite, < 1 */
        pair x = rnd(c, 1, 2, rows, in, 0, 0), pw = upload(c, w), r;
        CHECK_MSG(pw.t[1] && pw.t[1]->dtype == dts[k], "%s weight kept as stored on cuda", nm);
        for (int m = SD_DQ_F16; m <= SD_DQ_BF16 && pw.t[0] && pw.t[1]; m++) {
            pw.t[0]->dequant = pw.t[1]->dequant = (sd_dequant_math)m;
            BOTH(r, sd_op_copy(S(pw))); /* stored blocks, widened when downloaded */
            compare(c, "dequant", nm, r, TOL_EXACT);
            BOTH(r, sd_op_linear(S(x), S(pw), NULL));
            compare(c, "linear_quant", nm, r, tol_gemm(c->prec));
        }
        release(&x);
        release(&pw);
    }
}

/* The image-model ops (models/upscale): activations and data movement. */
static void test_pixel(ctx *c) {
    int64_t N = dim(c, 1, 2), C = dim(c, 1, 9), H = dim(c, 1, 17), W = dim(c, 1, 19);
    pair x = rnd(c, 4, 4, N, C, H, W), r;
    BOTH(r, sd_op_leaky_relu(S(x), 0.2f));
    compare(c, "leaky_relu", "0.2", r, TOL_EXACT);
    /* the hypernetworks' activations (libm vs CUDA's expf/tanhf: pointwise) */
    BOTH(r, sd_op_elu(S(x), 1.0f));
    compare(c, "elu", "1.0", r, TOL_POINT);
    BOTH(r, sd_op_hardswish(S(x)));
    compare(c, "hardswish", "NCHW", r, TOL_POINT);
    BOTH(r, sd_op_sigmoid(S(x)));
    compare(c, "sigmoid", "NCHW", r, TOL_POINT);
    BOTH(r, sd_op_softsign(S(x)));
    compare(c, "softsign", "NCHW", r, TOL_POINT);
    BOTH(r, sd_op_mish(S(x)));
    compare(c, "mish", "NCHW", r, TOL_POINT);
    pair w = rnd(c, 1, 1, C, 0, 0, 0), w1 = rnd(c, 1, 1, 1, 0, 0, 0);
    BOTH(r, sd_op_prelu(S(x), S(w)));
    compare(c, "prelu", "[C]", r, TOL_EXACT);
    BOTH(r, sd_op_prelu(S(x), S(w1)));
    compare(c, "prelu", "[1]", r, TOL_EXACT);
    release(&w), release(&w1);
    for (int f = 1; f <= 4; f++) {
        BOTH(r, sd_op_upsample_nearest(S(x), f));
        compare(c, "upsample_nearest", "factor 1..4", r, TOL_EXACT);
    }
    release(&x);
    for (int rr = 2; rr <= 4; rr++) {
        int64_t Cs = dim(c, 1, 4);
        pair sm = rnd(c, 1, 4, N, Cs * rr * rr, H, W), b;
        BOTH(r, sd_op_pixel_shuffle(S(sm), rr));
        compare(c, "pixel_shuffle", "r 2..4", r, TOL_EXACT);
        b = rnd(c, 1, 4, N, Cs, H * rr, W * rr);
        BOTH(r, sd_op_pixel_unshuffle(S(b), rr));
        compare(c, "pixel_unshuffle", "r 2..4", r, TOL_EXACT);
        release(&sm), release(&b);
    }
}

/* The tensor-core attention (BF16/F16) over many query chunks: a second
 * CUDA backend with a 64 KiB chunk budget (SDFLOW_CUDA_ATTN_SCRATCH) runs
 * these in chunks of 8 or 24 queries with a shorter last one, grouped heads,
 * bias and causal mask included; with a budget of 0 the op must fall back to
 * the F32 kernel, at the F32 kernel's tolerance. */
static void test_attention_chunks(ctx *c) {
    static const char *budgets[2] = {"65536", "0"};
    /* N, Lq, Lk, heads, kv_heads, D, causal, bias kind (attn_case) */
    int64_t cases[][8] = {{2, 300, 77, 4, 2, 40, 0, 1}, {1, 150, 150, 2, 2, 64, 1, 0},
                          {2, 97, 61, 6, 3, 24, 1, 2}};
    for (int b = 0; b < 2; b++) {
        sd_backend *small = NULL, *keep = c->be[1];
        sd_error err;
        setenv("SDFLOW_CUDA_ATTN_SCRATCH", budgets[b], 1);
        sd_status rc = sd_backend_new("cuda", 0, &small, &err);
        unsetenv("SDFLOW_CUDA_ATTN_SCRATCH");
        CHECK_OK(rc, &err);
        if (rc != SD_OK) return;
        sd_backend_set_precision(small, c->prec);
        c->be[1] = small;
        for (int i = 0; i < 3; i++)
            attn_case(c, cases[i], b ? "attention_fallback" : "attention_chunks",
                      b ? TOL_ATTN : tol_attn(c->prec));
        c->be[1] = keep;
        sd_backend_free(small);
    }
}

/* ---- run to run: the same inputs give the same bytes on the GPU ------------------ */

static int same_bytes(sd_bt *a, sd_bt *b) {
    sd_tensor *x = sd_bt_to_host(a), *y = sd_bt_to_host(b);
    int ok = x && y && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
    sd_tensor_unref(x);
    sd_tensor_unref(y);
    return ok;
}

static void test_determinism(ctx *c) {
    sd_backend *g = c->be[1];
    pair x = rnd(c, 1, 4, 1, 32, 24, 24), w = rnd(c, 0.2f, 4, 48, 32, 3, 3),
         b = rnd(c, 1, 1, 48, 0, 0, 0), q = rnd(c, 1, 3, 2, 100, 2 * 64, 0),
         lw = rnd(c, 0.1f, 2, 96, 128, 0, 0);
    sd_bt *r[2][4];
    for (int run = 0; run < 2; run++) {
        r[run][0] = sd_op_conv2d(x.t[1], w.t[1], b.t[1], 1, 1, 1);
        r[run][1] = sd_op_group_norm(r[run][0], 16, NULL, NULL, 1e-5f, 1);
        r[run][2] = sd_op_attention(q.t[1], q.t[1], q.t[1], 2, 0);
        r[run][3] = sd_op_linear(q.t[1], lw.t[1], NULL);
    }
    static const char *names[4] = {"conv2d", "group_norm", "attention", "linear"};
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(r[0][i] && r[1][i] && same_bytes(r[0][i], r[1][i]),
                  "%s/%s: two runs differ (or failed: %s)", names[i], prec_name(c->prec),
                  sd_backend_error(g) ? sd_backend_error(g)->msg : "no error");
        sd_bt_free(r[0][i]);
        sd_bt_free(r[1][i]);
    }
    sd_backend_clear_error(g);
    release(&x), release(&w), release(&b), release(&q), release(&lw);
}

/* ---- CUDA-only behaviour: zeroed new tensors, dtype round trips, errors -------------- */

static void test_cuda_specifics(sd_backend *g) {
    sd_bt *z = sd_bt_new4(g, SD_F32, 3, 3, 5, 7, 0);
    sd_tensor *h = sd_bt_to_host(z);
    CHECK(h != NULL);
    for (int64_t i = 0; h && i < sd_tensor_numel(h); i++) CHECK(sd_tensor_f32(h)[i] == 0.0f);
    sd_tensor_unref(h);
    sd_bt_free(z);
    /* weights stay in their stored 16-bit type and come back as F32 */
    sd_tensor *w = sd_tensor_new4(SD_F32, 1, 5, 0, 0, 0);
    float vals[5] = {1.0f, -2.5f, 0.1f, 65504.0f, 3.14159f};
    memcpy(w->data, vals, sizeof vals);
    for (int bf = 0; bf < 2; bf++) {
        sd_dtype dt = bf ? SD_BF16 : SD_F16;
        sd_bt *b = sd_bt_from_host(g, w, dt);
        CHECK(b && b->dtype == dt && b->nbytes == 10);
        sd_tensor *back = sd_bt_to_host(b);
        CHECK(back && back->dtype == SD_F32);
        for (int i = 0; back && i < 5; i++) {
            float e = bf ? sd_bf16_to_f32(sd_f32_to_bf16(vals[i])) : sd_f16_to_f32(sd_f32_to_f16(vals[i]));
            CHECK_MSG(sd_tensor_f32(back)[i] == e, "%s round trip of %g: %g", sd_dtype_name(dt),
                      vals[i], back ? sd_tensor_f32(back)[i] : 0.0);
        }
        sd_tensor_unref(back);
        sd_bt_free(b);
    }
    sd_tensor_unref(w);
    /* a bad embedding id is an error naming it, not a device fault */
    sd_tensor *tab = sd_tensor_new4(SD_F32, 2, 4, 3, 0, 0), *ids = sd_tensor_new4(SD_I32, 1, 2, 0, 0, 0);
    ((int32_t *)ids->data)[1] = 4;
    sd_bt *bt = sd_bt_from_host(g, tab, SD_F32), *bi = sd_bt_from_host(g, ids, SD_I32);
    sd_bt *r = sd_op_embedding(bt, bi);
    CHECK(r == NULL && sd_backend_error(g) && strstr(sd_backend_error(g)->msg, "position 1"));
    sd_backend_clear_error(g);
    sd_bt_free(bt), sd_bt_free(bi);
    sd_tensor_unref(tab), sd_tensor_unref(ids);
    /* an impossible allocation fails with a message naming the bytes */
    int64_t huge[2] = {(int64_t)1 << 40, 64};
    sd_bt *big = sd_bt_new(g, SD_F32, 2, huge);
    CHECK(big == NULL && sd_backend_error(g) && sd_backend_error(g)->code == SD_ERR_NOMEM &&
          strstr(sd_backend_error(g)->msg, "bytes"));
    if (sd_backend_error(g)) printf("expected OOM message: %s\n", sd_backend_error(g)->msg);
    sd_backend_clear_error(g);
    /* and the backend still works afterwards */
    sd_bt *ok = sd_bt_new4(g, SD_F32, 1, 8, 0, 0, 0);
    CHECK(ok != NULL);
    sd_bt_free(ok);
}

int main(void) {
    ctx c = {{NULL, NULL}, SD_PREC_F32, 0x9e3779b97f4a7c15ULL};
    sd_error err;
    sd_status rc = sd_backend_new("cuda", 0, &c.be[1], &err);
    if (rc != SD_OK) {
#ifdef SDFLOW_HAVE_CUDA
        sd_test_skip_unsupported("CUDA backend built, but no usable GPU: %s", err.msg);
#else
        sd_test_skip_unsupported("this build has no CUDA backend (SDFLOW_CUDA=OFF or nvcc/cuBLAS/cuDNN "
                     "missing): %s", err.msg);
#endif
    }
    CHECK_OK(sd_backend_new("cpu", 0, &c.be[0], &err), &err);
    if (!c.be[0]) return sd_test_finish();

    test_cuda_specifics(c.be[1]);
    sd_precision modes[3] = {SD_PREC_F32, SD_PREC_BF16, SD_PREC_F16};
    for (int m = 0; m < 3; m++) {
        c.prec = modes[m];
        sd_backend_set_precision(c.be[0], SD_PREC_F32); /* the reference stays F32 */
        sd_backend_set_precision(c.be[1], c.prec);
        test_determinism(&c);
        for (int round = 0; round < 2; round++) {
            test_linear(&c);
            test_matmul(&c);
            test_conv2d(&c);
            test_norms(&c);
            test_attention(&c);
            test_transformer(&c);
            test_attention_chunks(&c);
            test_elementwise(&c);
            test_layout(&c);
            test_pixel(&c);
            test_narrow_weights(&c);
            test_quant_weights(&c);
        }
    }
    printf("%-24s %6s %12s %12s\n", "op/precision", "runs", "worst", "tolerance");
    for (int i = 0; i < n_stats; i++)
        printf("%-24s %6d %12.3g %12.3g\n", stats[i].name, stats[i].runs, stats[i].worst,
               stats[i].tol);
    sd_backend_free(c.be[0]);
    sd_backend_free(c.be[1]);
    return sd_test_finish();
}
