/* test_transformer_ops.c - the ops the transformer families added
 * (sd_op_attention_ex, sd_op_rms_norm, sd_op_rope, sd_op_gelu_tanh) against
 * double-precision reference loops, on odd shapes, on 1 and 2 threads, plus
 * their argument checks. Tolerances are stated per op. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "testutil.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 52) - 1.0;
}

/* Random F32 tensor on be; *host keeps a copy of the values (caller frees). */
static sd_bt *rnd(sd_backend *be, int ndim, const int64_t *shape, float **host, double amp) {
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, shape);
    float *p = t->data;
    int64_t n = sd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(urand() * amp);
    *host = malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(*host, p, (size_t)n * sizeof(float));
    sd_bt *b = sd_bt_from_host(be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

static void near(const char *what, sd_bt *got, const double *ref, int64_t n, double atol,
                 double rtol) {
    CHECK_MSG(got != NULL, "%s: op returned NULL", what);
    if (!got) return;
    CHECK_MSG(sd_bt_numel(got) == n, "%s: %lld elements, want %lld", what,
              (long long)sd_bt_numel(got), (long long)n);
    if (sd_bt_numel(got) != n) return;
    sd_tensor *h = sd_bt_to_host(got);
    const float *p = h->data;
    int64_t bad = 0, wi = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(p[i] - ref[i]);
        if (!(d <= atol + rtol * fabs(ref[i]))) bad++;
        if (!(d <= worst)) { worst = d; wi = i; }
    }
    CHECK_MSG(bad == 0, "%s: %lld of %lld off, worst |d| %.3g at %lld (got %.8g want %.8g)", what,
              (long long)bad, (long long)n, worst, (long long)wi, p[wi], ref[wi]);
    sd_tensor_unref(h);
}

/* ---- attention_ex: atol 2e-6 * sqrt(D) + 2e-6, rtol 1e-5 (as sd_op_attention) ---- */

typedef struct {
    int N, Lq, Lk, H, Hkv, D, causal;
    int bias[3]; /* bias dims N, H, Lq present (1) or broadcast (0); bias[0] < 0: no bias */
    int masked;  /* some bias entries -inf, one query row fully masked */
    float scale; /* 0 = default */
} attn_case;

static void attn_one(sd_backend *be, const attn_case *c) {
    int64_t HD = (int64_t)c->H * c->D, KD = (int64_t)c->Hkv * c->D;
    int64_t qs[3] = {c->N, c->Lq, HD}, ks[3] = {c->N, c->Lk, KD};
    float *q, *k, *v, *b = NULL;
    sd_bt *Q = rnd(be, 3, qs, &q, 1.5), *K = rnd(be, 3, ks, &k, 1.5), *V = rnd(be, 3, ks, &v, 1);
    sd_bt *B = NULL;
    int64_t bs[4] = {1, 1, 1, c->Lk};
    if (c->bias[0] >= 0) {
        if (c->bias[0]) bs[0] = c->N;
        if (c->bias[1]) bs[1] = c->H;
        if (c->bias[2]) bs[2] = c->Lq;
        B = rnd(be, 4, bs, &b, 2.0);
        if (c->masked) { /* mask every third key; all keys of query row 1 */
            sd_tensor *h = sd_bt_to_host(B);
            float *p = h->data;
            int64_t n = sd_tensor_numel(h);
            for (int64_t i = 0; i < n; i++) {
                int64_t j = i % c->Lk, row = (i / c->Lk) % bs[2];
                if (j % 3 == 1 || (bs[2] > 1 && row == 1)) p[i] = b[i] = -INFINITY;
            }
            sd_bt_free(B);
            B = sd_bt_from_host(be, h, SD_F32);
            sd_tensor_unref(h);
        }
    }
    double scale = c->scale ? c->scale : 1.0 / sqrt((double)c->D);
    int64_t nout = (int64_t)c->N * c->Lq * HD;
    double *ref = calloc((size_t)nout, sizeof *ref), *s = calloc((size_t)c->Lk, sizeof *s);
    int group = c->H / c->Hkv;
    for (int n = 0; n < c->N; n++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Lq; i++) {
                int kh = h / group;
                double mx = -INFINITY, se = 0;
                int lim = c->causal ? (i + 1 < c->Lk ? i + 1 : c->Lk) : c->Lk;
                for (int j = 0; j < lim; j++) {
                    double d = 0;
                    for (int e = 0; e < c->D; e++)
                        d += (double)q[((int64_t)n * c->Lq + i) * HD + h * c->D + e] *
                             k[((int64_t)n * c->Lk + j) * KD + kh * c->D + e];
                    s[j] = d * scale;
                    if (b) {
                        int64_t bi = (((c->bias[0] ? n : 0) * bs[1] + (c->bias[1] ? h : 0)) *
                                          bs[2] + (c->bias[2] ? i : 0)) * c->Lk + j;
                        s[j] += b[bi];
                    }
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < lim; j++) se += (s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx));
                for (int e = 0; e < c->D; e++) {
                    double o = 0;
                    for (int j = 0; j < lim && se > 0; j++)
                        o += s[j] / se * v[((int64_t)n * c->Lk + j) * KD + kh * c->D + e];
                    ref[((int64_t)n * c->Lq + i) * HD + h * c->D + e] = o;
                }
            }
    sd_attn_opts o = {c->scale, c->causal, c->Hkv == c->H ? 0 : c->Hkv, B};
    sd_bt *y = sd_op_attention_ex(Q, K, V, c->H, &o);
    char what[160];
    snprintf(what, sizeof what, "attention_ex N%d Lq%d Lk%d H%d/%d D%d causal%d bias%d%d%d mask%d",
             c->N, c->Lq, c->Lk, c->H, c->Hkv, c->D, c->causal, c->bias[0], c->bias[1],
             c->bias[2], c->masked);
    near(what, y, ref, nout, 2e-6 * sqrt((double)c->D) + 2e-6, 1e-5);
    sd_bt_free(y); sd_bt_free(Q); sd_bt_free(K); sd_bt_free(V); sd_bt_free(B);
    free(q); free(k); free(v); free(b); free(ref); free(s);
}

static void test_attention_ex(sd_backend *be) {
    static const attn_case cases[] = {
        /* T5: per-head relative bias shared over the batch, scale 1 */
        {2, 19, 19, 4, 4, 16, 0, {0, 1, 1}, 0, 1.0f},
        /* a key mask per batch item [N, 1, 1, Lk] with -inf entries */
        {2, 9, 13, 2, 2, 8, 0, {1, 0, 0}, 1, 0},
        /* full bias with masked rows, causal on top */
        {2, 7, 7, 3, 3, 5, 1, {1, 1, 1}, 1, 0},
        /* grouped-query attention (Qwen3: 4 query heads per k/v head) */
        {1, 33, 33, 8, 2, 16, 1, {-1, 0, 0}, 0, 0},
        {2, 17, 40, 6, 3, 8, 0, {0, 0, 1}, 0, 0.3f},
        /* several key blocks of the CPU kernel with a bias */
        {1, 300, 2100, 2, 1, 8, 0, {0, 1, 1}, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attn_one(be, &cases[i]);
    /* sd_op_attention is attention_ex with NULL opts */
    int64_t s3[3] = {1, 5, 8};
    float *a;
    sd_bt *A = rnd(be, 3, s3, &a, 1);
    sd_bt *y1 = sd_op_attention(A, A, A, 2, 1);
    sd_attn_opts o = {0, 1, 0, NULL};
    sd_bt *y2 = sd_op_attention_ex(A, A, A, 2, &o);
    CHECK(y1 && y2 && memcmp(y1->data, y2->data, y1->nbytes) == 0);
    sd_bt_free(y1); sd_bt_free(y2); sd_bt_free(A); free(a);
}

/* ---- rms_norm: atol 1e-6, rtol 2e-6 ------------------------------------------- */

static void test_rms_norm(sd_backend *be) {
    int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 7}, {1, 77, 64}, {3, 5, 1031}};
    for (int c = 0; c < 4; c++) {
        int64_t R = shapes[c][0] * shapes[c][1], C = shapes[c][2], cs[1] = {C};
        float *x, *g;
        sd_bt *X = rnd(be, 3, shapes[c], &x, 3), *G = rnd(be, 1, cs, &g, 2);
        double *ref = calloc((size_t)(R * C), sizeof *ref), *refn = calloc((size_t)(R * C), sizeof *refn);
        for (int64_t r = 0; r < R; r++) {
            double ss = 0;
            for (int64_t i = 0; i < C; i++) ss += (double)x[r * C + i] * x[r * C + i];
            double rr = 1.0 / sqrt(ss / (double)C + 1e-6);
            for (int64_t i = 0; i < C; i++) {
                refn[r * C + i] = x[r * C + i] * rr;
                ref[r * C + i] = refn[r * C + i] * g[i];
            }
        }
        sd_bt *y = sd_op_rms_norm(X, G, 1e-6f);
        near("rms_norm", y, ref, R * C, 1e-6, 2e-6);
        sd_bt_free(y);
        y = sd_op_rms_norm(X, NULL, 1e-6f);
        near("rms_norm without gamma", y, refn, R * C, 1e-6, 2e-6);
        sd_bt_free(y); sd_bt_free(X); sd_bt_free(G);
        free(x); free(g); free(ref); free(refn);
    }
}

/* ---- rope: atol 1e-6, rtol 1e-6 (two rounded products and a sum) -------------- */

static void test_rope(sd_backend *be) {
    /* N, L, H, D, batched rot, interleaved */
    int cases[][6] = {{1, 1, 1, 2, 0, 1}, {2, 7, 3, 8, 0, 1}, {2, 7, 3, 8, 1, 1},
                      {2, 9, 2, 16, 0, 0}, {1, 33, 4, 64, 1, 0}};
    for (int c = 0; c < 5; c++) {
        int N = cases[c][0], L = cases[c][1], H = cases[c][2], D = cases[c][3];
        int batched = cases[c][4], inter = cases[c][5];
        int64_t xs[3] = {N, L, (int64_t)H * D};
        int64_t rs[4] = {N, L, D / 2, 2};
        float *x, *ang;
        sd_bt *X = rnd(be, 3, xs, &x, 2);
        int rn = batched ? 4 : 3;
        sd_bt *A = rnd(be, rn, batched ? rs : rs + 1, &ang, 3.0);
        /* turn the random angles into (cos, sin) pairs */
        sd_tensor *rh = sd_bt_to_host(A);
        float *rp = rh->data;
        int64_t pairs = sd_tensor_numel(rh) / 2;
        for (int64_t i = 0; i < pairs; i++) {
            double t = ang[2 * i];
            rp[2 * i] = (float)cos(t);
            rp[2 * i + 1] = (float)sin(t);
        }
        sd_bt *R = sd_bt_from_host(be, rh, SD_F32);
        int64_t n = (int64_t)N * L * H * D;
        double *ref = calloc((size_t)n, sizeof *ref);
        for (int b = 0; b < N; b++)
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < D / 2; i++) {
                        const float *cs = rp + ((batched ? (int64_t)b * L : 0) + l) * D + 2 * i;
                        int64_t base = ((int64_t)b * L + l) * H * D + (int64_t)h * D;
                        int64_t ia = base + (inter ? 2 * i : i), ib = ia + (inter ? 1 : D / 2);
                        double av = x[ia], bv = x[ib];
                        ref[ia] = av * cs[0] - bv * cs[1];
                        ref[ib] = av * cs[1] + bv * cs[0];
                    }
        sd_bt *y = sd_op_rope(X, R, H, inter);
        char what[96];
        snprintf(what, sizeof what, "rope N%d L%d H%d D%d batched%d interleaved%d", N, L, H, D,
                 batched, inter);
        near(what, y, ref, n, 1e-6, 1e-6);
        sd_bt_free(y); sd_bt_free(X); sd_bt_free(A); sd_bt_free(R);
        sd_tensor_unref(rh);
        free(x); free(ang); free(ref);
    }
}

/* ---- the CPU backend's instruction-set paths of rope and rms_norm ------------
 * rope's contract is torch's rounding (each product rounded, then the sum):
 * every path (scalar, AVX2, AVX-512: whatever this CPU runs) must give
 * exactly the float expression below, which this file computes without FMA
 * (it is built for the baseline x86-64, which has none). rms_norm's paths
 * share one summation order (double lanes), so they must agree with the
 * scalar path to the last bit too; the scalar path itself is checked
 * against double above. Head widths cover the vector bodies and their
 * scalar tails. */

static void test_cpu_paths(void) {
    static const int Ds[] = {2, 8, 16, 30, 32, 48, 128};
    for (size_t c = 0; c < sizeof Ds / sizeof *Ds; c++)
        for (int inter = 0; inter <= 1; inter++) {
            int H = 3;
            int64_t D = Ds[c], n = H * D;
            float *x = malloc(n * sizeof *x), *cs = malloc(D * sizeof *cs);
            float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
            for (int64_t i = 0; i < n; i++) x[i] = (float)(urand() * 4);
            for (int64_t i = 0; i < D / 2; i++) {
                double t = urand() * 10;
                cs[2 * i] = (float)cos(t), cs[2 * i + 1] = (float)sin(t);
            }
            for (int h = 0; h < H; h++)
                for (int64_t i = 0; i < D / 2; i++) {
                    int64_t ia = h * D + (inter ? 2 * i : i), ib = ia + (inter ? 1 : D / 2);
                    volatile float ac = x[ia] * cs[2 * i], bs = x[ib] * cs[2 * i + 1];
                    volatile float as = x[ia] * cs[2 * i + 1], bc = x[ib] * cs[2 * i];
                    want[ia] = ac - bs;
                    want[ib] = as + bc;
                }
            for (int isa = SD_ISA_SCALAR; isa <= sd_cpu_isa(); isa++) {
                sd_cpu_rope_row_isa(x, got, cs, H, D, inter, isa);
                CHECK_MSG(memcmp(got, want, n * sizeof *got) == 0,
                          "rope D%lld interleaved%d isa %d: not torch's rounding", (long long)D,
                          inter, isa);
            }
            free(x), free(cs), free(want), free(got);
        }
    static const int Cs[] = {1, 15, 16, 33, 3072};
    for (size_t c = 0; c < sizeof Cs / sizeof *Cs; c++) {
        int64_t C = Cs[c];
        float *x = malloc(C * sizeof *x), *g = malloc(C * sizeof *g);
        float *want = malloc(C * sizeof *want), *got = malloc(C * sizeof *got);
        for (int64_t i = 0; i < C; i++) x[i] = (float)(urand() * 3), g[i] = (float)urand();
        for (int gm = 0; gm <= 1; gm++) {
            sd_cpu_rms_row_isa(x, want, gm ? g : NULL, C, 1e-6f, SD_ISA_SCALAR);
            for (int isa = SD_ISA_AVX2; isa <= sd_cpu_isa(); isa++) {
                sd_cpu_rms_row_isa(x, got, gm ? g : NULL, C, 1e-6f, isa);
                CHECK_MSG(memcmp(got, want, C * sizeof *got) == 0,
                          "rms_norm C%lld isa %d differs from the scalar path", (long long)C, isa);
            }
        }
        free(x), free(g), free(want), free(got);
    }
}

/* ---- gelu_tanh: atol 2e-6, rtol 2e-6 ------------------------------------------- */

static void test_gelu_tanh(sd_backend *be) {
    int64_t s[2] = {3, 1000};
    float *x;
    sd_bt *X = rnd(be, 2, s, &x, 8);
    double ref[3000];
    for (int i = 0; i < 3000; i++) {
        double v = x[i];
        ref[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    sd_bt *y = sd_op_gelu_tanh(X);
    near("gelu_tanh", y, ref, 3000, 2e-6, 2e-6);
    sd_bt_free(y); sd_bt_free(X); free(x);
}

/* ---- argument checks: NULL result, SD_ERR_INVALID naming the op -------------- */

static void expect_invalid(sd_backend *be, sd_bt *y, const char *op) {
    CHECK_MSG(y == NULL, "%s: bad arguments accepted", op);
    sd_bt_free(y);
    const sd_error *e = sd_backend_error(be);
    CHECK_MSG(e && e->code == SD_ERR_INVALID && strstr(e->msg, op), "%s: error %s", op,
              e ? e->msg : "(none)");
    sd_backend_clear_error(be);
}

static void test_errors(sd_backend *be) {
    int64_t s3[3] = {2, 5, 8}, kv[3] = {2, 5, 6}, b4[4] = {3, 1, 1, 5}, r3[3] = {5, 3, 2};
    float *a, *k, *b, *r;
    sd_bt *A = rnd(be, 3, s3, &a, 1), *K = rnd(be, 3, kv, &k, 1), *B = rnd(be, 4, b4, &b, 1);
    sd_bt *R = rnd(be, 3, r3, &r, 1);
    sd_attn_opts o = {0, 0, 0, NULL};
    expect_invalid(be, sd_op_attention_ex(A, K, K, 2, &o), "attention"); /* k width */
    o.kv_heads = 3; /* 2 heads are no multiple of 3 */
    expect_invalid(be, sd_op_attention_ex(A, A, A, 2, &o), "attention");
    o.kv_heads = 0;
    o.bias = B; /* batch 3 against N = 2 */
    expect_invalid(be, sd_op_attention_ex(A, A, A, 2, &o), "attention");
    expect_invalid(be, sd_op_rope(A, R, 3, 1), "rope"); /* 8 channels are not 3 heads */
    expect_invalid(be, sd_op_rope(A, R, 4, 1), "rope"); /* D 2 needs rot [5, 1, 2] */
    expect_invalid(be, sd_op_rope(A, R, 2, 0), "rope"); /* D 4 needs rot [5, 2, 2] */
    expect_invalid(be, sd_op_rms_norm(A, R, 1e-6f), "rms_norm"); /* gamma of 30, not 8 */
    sd_bt_free(A); sd_bt_free(K); sd_bt_free(B); sd_bt_free(R);
    free(a); free(k); free(b); free(r);
}

int main(void) {
    test_cpu_paths();
    for (int threads = 1; threads <= 2; threads++) {
        sd_backend *be = NULL;
        sd_error err;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (!be) break;
        test_attention_ex(be);
        test_rms_norm(be);
        test_rope(be);
        test_gelu_tanh(be);
        test_errors(be);
        CHECK(sd_backend_error(be) == NULL);
        sd_backend_free(be);
    }
    return sd_test_finish();
}
