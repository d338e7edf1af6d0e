/* test_bf16_ops.c - the CPU backend's bf16 compute paths (dnnl_bf16.h).
 *
 * With oneDNN: linear, batched matmul and conv2d in bf16 mode, on each of
 * the two paths (oneDNN's primitives, and the emulation on our f32
 * kernels), are checked
 * against an f64 reference computed on the bf16-rounded inputs (bias not
 * rounded), on random odd shapes and F32/F16/BF16/fp8 weights. Products of two
 * bf16 values are exact in f32, so the only error left is f32 accumulation:
 * |err| <= (K + 4) * 2^-24 * sum|a*b| (K terms, the bias, alpha, the store),
 * a bound that holds whatever the summation order. Each op is also run in
 * f32 mode, which must miss that reference by more than the bound somewhere
 * (the bf16 path really rounds). The rounding kernels (to bf16, and to bf16
 * values in f32 storage on every instruction-set path this CPU runs) are
 * compared bit for bit with the scalar RNE on edge-case bit patterns.
 * Without oneDNN: the backend must say it has no bf16 path and an op in bf16
 * mode must fail with an error that says how to get one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dnnl_bf16.h"
#include "kernels/cpu/dnnl_pack.h"
#include "testutil.h"

static unsigned seed = 4242;
static float frand(void) {
    seed = seed * 1103515245u + 12345u;
    return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static double bf(float f) { /* f rounded to bf16, as a double */
    uint32_t u = (uint32_t)sd_bf16_from_f32(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

static sd_bt *rand_bt(sd_backend *be, sd_dtype dt, int ndim, const int64_t *shape, float scale) {
    sd_tensor *f = sd_tensor_new(SD_F32, ndim, shape);
    float *p = f->data;
    for (int64_t i = 0; i < sd_tensor_numel(f); i++) p[i] = frand() * scale;
    sd_bt *b = sd_bt_from_host(be, f, dt);
    sd_tensor_unref(f);
    return b;
}

/* The values a bt holds, as F32 on the host (caller frees). */
static float *host(const sd_bt *t) {
    sd_tensor *h = sd_bt_to_host(t);
    float *p = malloc(h->nbytes);
    memcpy(p, h->data, h->nbytes);
    sd_tensor_unref(h);
    return p;
}

typedef struct {
    double *ref, *bound;
    int64_t n;
} expect;

/* Checks got and again (bf16 mode, the second run from packed weights)
 * within the bound and f32 (f32 mode) outside it somewhere. Frees
 * everything. */
static void judge(const char *what, expect e, sd_bt *got, sd_bt *f32, sd_bt *again) {
    CHECK_MSG(got != NULL && again != NULL, "%s: bf16 op failed", what);
    CHECK_MSG(f32 != NULL, "%s: f32 op failed", what);
    if (got && again && f32 && sd_bt_numel(got) == e.n && sd_bt_numel(again) == e.n) {
        const float *g = got->data, *f = f32->data, *g2 = again->data;
        double worst = 0, f32_miss = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < e.n; i++) {
            double err = fabs(g[i] - e.ref[i]), fm = fabs(f[i] - e.ref[i]);
            double err2 = fabs(g2[i] - e.ref[i]);
            if (!(err <= e.bound[i]) || !(err2 <= e.bound[i])) bad++;
            if (err2 > err) err = err2;
            if (e.bound[i] > 0 && err / e.bound[i] > worst) worst = err / e.bound[i];
            if (fm > e.bound[i] && fm - e.bound[i] > f32_miss) f32_miss = fm - e.bound[i];
        }
        printf("%-34s worst err/bound %.3f, f32 op outside bound by up to %.3g\n", what, worst,
               f32_miss);
        CHECK_MSG(bad == 0, "%s: %lld of %lld elements outside the f32-accumulation bound", what,
                  (long long)bad, (long long)e.n);
        CHECK_MSG(f32_miss > 0, "%s: the f32 op meets the bf16 reference: nothing was rounded",
                  what);
    }
    free(e.ref);
    free(e.bound);
    sd_bt_free(got);
    sd_bt_free(f32);
    sd_bt_free(again);
}

static expect expect_new(int64_t n) {
    expect e = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double)), n};
    return e;
}

/* Runs op in bf16 mode, in f32 mode, and in bf16 again (its weight packed
 * by the first run, on the oneDNN path). */
#define BOTH(be, got, f32, again, call) do { \
        sd_backend_set_precision(be, SD_PREC_BF16); got = (call); \
        sd_backend_set_precision(be, SD_PREC_F32); f32 = (call); \
        sd_backend_set_precision(be, SD_PREC_BF16); again = (call); } while (0)

static const double U = 1.0 / (1 << 24); /* f32 unit roundoff */

static void test_linear(sd_backend *be, sd_dtype wdt, int with_bias) {
    int64_t M0 = 3, M1 = 37, K = 53, N = 29;
    int64_t xs[3] = {M0, M1, K}, ws[2] = {N, K}, bs[1] = {N};
    sd_bt *x = rand_bt(be, SD_F32, 3, xs, 2.0f), *w = rand_bt(be, wdt, 2, ws, 1.0f);
    sd_bt *b = with_bias ? rand_bt(be, wdt, 1, bs, 1.0f) : NULL;
    float *hx = host(x), *hw = host(w), *hb = b ? host(b) : NULL;
    expect e = expect_new(M0 * M1 * N);
    for (int64_t m = 0; m < M0 * M1; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = hb ? hb[n] : 0, a = hb ? fabs(hb[n]) : 0;
            for (int64_t k = 0; k < K; k++) {
                double p = bf(hx[m * K + k]) * bf(hw[n * K + k]);
                s += p;
                a += fabs(p);
            }
            e.ref[m * N + n] = s;
            e.bound[m * N + n] = (K + 4) * U * a;
        }
    sd_bt *got, *f32, *again;
    BOTH(be, got, f32, again, sd_op_linear(x, w, b));
    char what[96];
    snprintf(what, sizeof what, "linear %s w%s", sd_dtype_name(wdt), b ? " +bias" : "");
    judge(what, e, got, f32, again);
    free(hx), free(hw), free(hb);
    sd_bt_free(x), sd_bt_free(w), sd_bt_free(b);
}

static void test_matmul(sd_backend *be, int batched_b, int trans_b, float alpha, sd_dtype bdt) {
    int64_t B = 3, M = 19, K = 45, N = 23;
    int64_t as[3] = {B, M, K};
    int64_t Bb = batched_b ? B : 1;
    int64_t bs3[3] = {Bb, trans_b ? N : K, trans_b ? K : N};
    sd_bt *a = rand_bt(be, SD_F32, 3, as, 1.5f);
    sd_bt *b = batched_b ? rand_bt(be, bdt, 3, bs3, 1.0f) : rand_bt(be, bdt, 2, bs3 + 1, 1.0f);
    float *ha = host(a), *hb = host(b);
    expect e = expect_new(B * M * N);
    for (int64_t i = 0; i < B; i++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0, ab = 0;
                const float *bb = hb + (batched_b ? i * K * N : 0);
                for (int64_t k = 0; k < K; k++) {
                    double p = bf(ha[(i * M + m) * K + k]) *
                               bf(trans_b ? bb[n * K + k] : bb[k * N + n]);
                    s += p;
                    ab += fabs(p);
                }
                e.ref[(i * M + m) * N + n] = alpha * s;
                e.bound[(i * M + m) * N + n] = (K + 4) * U * fabs(alpha) * ab;
            }
    sd_bt *got, *f32, *again;
    BOTH(be, got, f32, again, sd_op_matmul(a, b, trans_b, alpha));
    char what[96];
    snprintf(what, sizeof what, "matmul %s%s%s alpha %g", sd_dtype_name(bdt),
             batched_b ? "" : " bcast", trans_b ? " trans_b" : "", alpha);
    judge(what, e, got, f32, again);
    free(ha), free(hb);
    sd_bt_free(a), sd_bt_free(b);
}

static void test_conv(sd_backend *be, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                      int64_t kh, int64_t kw, int stride, int ph, int pw, sd_dtype wdt,
                      int with_bias) {
    int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, kh, kw}, bs[1] = {O};
    sd_bt *x = rand_bt(be, SD_F32, 4, xs, 2.0f), *w = rand_bt(be, wdt, 4, ws, 0.5f);
    sd_bt *b = with_bias ? rand_bt(be, wdt, 1, bs, 1.0f) : NULL;
    float *hx = host(x), *hw = host(w), *hb = b ? host(b) : NULL;
    int64_t OH = (H + 2 * ph - kh) / stride + 1, OW = (W + 2 * pw - kw) / stride + 1;
    expect e = expect_new(N * O * OH * OW);
    int64_t K = C * kh * kw;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double s = hb ? hb[o] : 0, a = hb ? fabs(hb[o]) : 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t ky = 0; ky < kh; ky++)
                            for (int64_t kx = 0; kx < kw; kx++) {
                                int64_t iy = oy * stride - ph + ky, ix = ox * stride - pw + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                double p = bf(hx[((n * C + c) * H + iy) * W + ix]) *
                                           bf(hw[((o * C + c) * kh + ky) * kw + kx]);
                                s += p;
                                a += fabs(p);
                            }
                    int64_t i = ((n * O + o) * OH + oy) * OW + ox;
                    e.ref[i] = s;
                    e.bound[i] = (K + 4) * U * a;
                }
    sd_bt *got, *f32, *again;
    BOTH(be, got, f32, again, sd_op_conv2d(x, w, b, stride, ph, pw));
    char what[96];
    snprintf(what, sizeof what, "conv %lldx%lld s%d p%d,%d C%lld O%lld %s%s", (long long)kh,
             (long long)kw, stride, ph, pw, (long long)C, (long long)O, sd_dtype_name(wdt),
             b ? " +bias" : "");
    judge(what, e, got, f32, again);
    free(hx), free(hw), free(hb);
    sd_bt_free(x), sd_bt_free(w), sd_bt_free(b);
}

/* Attention in bf16 (q, k, v and the probabilities rounded, f32 softmax)
 * against a double reference on the bf16-rounded q, k, v. Per output, with
 * u = 2^-24, A = sum_j p_j |v_j| and E the largest error of a score (f32
 * sums of D exact products, the scale, the bias: (D + 4) u scale sum|q k| +
 * u |bias|): the probabilities move by at most e^{2E} - 1 relatively (their
 * numerator and denominator by e^{+-E}), the f32 softmax adds ~6u, rounding
 * them to bf16 at most 2^-8 (bf16's unit roundoff: 8 significant bits), and
 * P V's f32 sums (Lk + 4) u, so
 *     |o - o_ref| <= 1.01 A ((e^{2E} - 1) + 2^-8 + (Lk + 16) u).
 * The same op in f32 mode must differ from the bf16 one (it rounds nothing).
 * Cases: causal, an additive bias broadcast over heads, grouped-query k/v
 * (the oneDNN path hands that to the f32 kernel), key blocks past 1024 and
 * query blocks past 256. */
static void test_attention(sd_backend *be, int64_t N, int64_t Lq, int64_t Lk, int H, int Hkv,
                           int64_t D, int causal, int with_bias) {
    int64_t qs[3] = {N, Lq, H * D}, ks[3] = {N, Lk, Hkv * D}, bs[4] = {N, 1, Lq, Lk};
    sd_bt *q = rand_bt(be, SD_F32, 3, qs, 1.5f), *k = rand_bt(be, SD_F32, 3, ks, 1.5f);
    sd_bt *v = rand_bt(be, SD_F32, 3, ks, 1.0f);
    sd_bt *bias = with_bias ? rand_bt(be, SD_F32, 4, bs, 2.0f) : NULL;
    float *hq = host(q), *hk = host(k), *hv = host(v), *hb = bias ? host(bias) : NULL;
    double scale = 1.0 / sqrt((double)D);
    int64_t n_out = N * Lq * H * D;
    double *ref = calloc((size_t)n_out, sizeof *ref), *bound = calloc((size_t)n_out, sizeof *bound);
    double *sc = malloc((size_t)Lk * sizeof *sc), *ab = malloc((size_t)Lk * sizeof *ab);
    for (int64_t n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                int kh = h / (H / Hkv);
                double mx = -INFINITY, E = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    double s = 0, a = 0;
                    for (int64_t d = 0; d < D; d++) {
                        double p = bf(hq[(n * Lq + i) * H * D + h * D + d]) *
                                   bf(hk[(n * Lk + j) * Hkv * D + kh * D + d]);
                        s += p, a += fabs(p);
                    }
                    double b = hb ? hb[(n * Lq + i) * Lk + j] : 0;
                    sc[j] = causal && j > i ? -INFINITY : s * scale + b;
                    double e = (D + 4) * U * scale * a + U * fabs(b) + 2 * U * fabs(sc[j]);
                    if (!(causal && j > i) && e > E) E = e;
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0;
                for (int64_t j = 0; j < Lk; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t d = 0; d < D; d++) {
                    double o = 0, A = 0;
                    for (int64_t j = 0; j < Lk; j++) {
                        double vv = bf(hv[(n * Lk + j) * Hkv * D + kh * D + d]);
                        o += sc[j] / sum * vv;
                        A += sc[j] / sum * fabs(vv);
                    }
                    int64_t at = (n * Lq + i) * H * D + h * D + d;
                    ref[at] = o;
                    bound[at] = 1.01 * A * (expm1(2 * E) + 1.0 / 256 + (Lk + 16) * U);
                }
            }
    sd_attn_opts o = {0, causal, Hkv, bias};
    sd_backend_set_precision(be, SD_PREC_BF16);
    sd_bt *got = sd_op_attention_ex(q, k, v, H, &o);
    sd_backend_set_precision(be, SD_PREC_F32);
    sd_bt *f32 = sd_op_attention_ex(q, k, v, H, &o);
    sd_backend_set_precision(be, SD_PREC_BF16);
    char what[128];
    snprintf(what, sizeof what, "attention N%lld Lq%lld Lk%lld H%d/%d D%lld%s%s", (long long)N,
             (long long)Lq, (long long)Lk, H, Hkv, (long long)D, causal ? " causal" : "",
             bias ? " +bias" : "");
    CHECK_MSG(got && f32, "%s: op failed", what);
    if (got && f32) {
        const float *g = got->data, *f = f32->data;
        double worst = 0, diff = 0, big = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < n_out; i++) {
            double err = fabs(g[i] - ref[i]);
            if (!(err <= bound[i])) bad++;
            if (bound[i] > 0 && err / bound[i] > worst) worst = err / bound[i];
            if (fabs(g[i] - f[i]) > diff) diff = fabs(g[i] - f[i]);
            if (fabs(ref[i]) > big) big = fabs(ref[i]);
        }
        printf("%-34s worst err/bound %.3f, bf16 vs f32 op up to %.3g\n", what, worst, diff);
        CHECK_MSG(bad == 0, "%s: %lld of %lld outputs outside the bound", what, (long long)bad,
                  (long long)n_out);
        CHECK_MSG(diff > 1e-4 * big, "%s: bf16 and f32 results agree: nothing was rounded", what);
    }
    sd_bt_free(got), sd_bt_free(f32);
    sd_bt_free(q), sd_bt_free(k), sd_bt_free(v), sd_bt_free(bias);
    free(hq), free(hk), free(hv), free(hb), free(ref), free(bound), free(sc), free(ab);
}

/* The pooled rounding kernel against the scalar RNE on awkward bit patterns:
 * ties, NaN, inf, denormals, values that round up into the exponent. */
static void test_rounding(sd_backend *be) {
    int64_t n = 4099;
    uint32_t *f = malloc((size_t)n * 4);
    uint16_t *h = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    static const uint32_t edge[] = {0x00000000, 0x80000000, 0x3f808000, 0x3f818000, 0x3f80ffff,
                                    0x7f7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
                                    0xffbfffff, 0x00000001, 0x007fffff, 0x00008000, 0x3fffffff};
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        f[i] = i < (int64_t)(sizeof edge / sizeof edge[0]) ? edge[i] : seed ^ (seed << 13);
        h[i] = (uint16_t)(seed >> 9);
    }
    sd_cpu *c = be->impl;
    sd_bf16_round(c->pool, SD_F32, f, got, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, &f[i], 4);
        bad += got[i] != sd_bf16_from_f32(v);
    }
    CHECK_MSG(bad == 0, "f32 -> bf16 rounding: %d of %lld differ from the scalar RNE", bad,
              (long long)n);
    sd_bf16_round(c->pool, SD_F16, h, got, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != sd_bf16_from_f32(sd_f16_to_f32(h[i]));
    CHECK_MSG(bad == 0, "f16 -> bf16 rounding: %d of %lld differ from the scalar RNE", bad,
              (long long)n);
    for (int e5 = 0; e5 <= 1; e5++) { /* fp8: the bytes of h, every code */
        const uint8_t *h8 = (const uint8_t *)h;
        const float *tab = e5 ? sd_f8_e5m2_table() : sd_f8_e4m3_table();
        sd_bf16_round(c->pool, e5 ? SD_F8_E5M2 : SD_F8_E4M3, h8, got, n);
        bad = 0;
        for (int64_t i = 0; i < n; i++) bad += got[i] != sd_bf16_from_f32(tab[h8[i]]);
        CHECK_MSG(bad == 0, "%s -> bf16 rounding: %d of %lld differ", e5 ? "e5m2" : "e4m3", bad,
                  (long long)n);
    }
    /* the emulated path's rounding into f32 storage, every ISA path */
    uint32_t *g32 = malloc((size_t)n * 4);
    for (int isa = SD_ISA_SCALAR; isa <= sd_cpu_isa(); isa++) {
        static const sd_dtype dts[] = {SD_F32, SD_F16, SD_BF16, SD_F8_E4M3, SD_F8_E5M2};
        for (int k = 0; k < 5; k++) {
            const void *src = dts[k] == SD_F32 ? (const void *)f : (const void *)h;
            const uint8_t *h8 = (const uint8_t *)h; /* fp8: the bytes of h */
            sd_bf16_round_f32_isa(c->pool, dts[k], src, (float *)g32, n, isa);
            bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float v;
                memcpy(&v, &f[i], 4);
                uint16_t want = dts[k] == SD_F32   ? sd_bf16_from_f32(v)
                                : dts[k] == SD_F16 ? sd_bf16_from_f32(sd_f16_to_f32(h[i]))
                                : dts[k] == SD_BF16
                                    ? h[i]
                                    : sd_bf16_from_f32((dts[k] == SD_F8_E4M3 ? sd_f8_e4m3_table()
                                                                             : sd_f8_e5m2_table())[h8[i]]);
                bad += g32[i] != (uint32_t)want << 16;
            }
            CHECK_MSG(bad == 0, "%s -> bf16-in-f32 rounding (isa %d): %d of %lld differ",
                      sd_dtype_name(dts[k]), isa, bad, (long long)n);
        }
    }
    free(g32);
    /* a tie rounds to even, NaN stays NaN */
    CHECK(sd_bf16_from_f32(1.00390625f) == 0x3f80);     /* 1 + 2^-8: tie, down to 1 */
    CHECK(sd_bf16_from_f32(1.01171875f) == 0x3f82);     /* 1 + 3*2^-8: tie, up */
    float qnan;
    uint32_t nb = 0x7f800001;
    memcpy(&qnan, &nb, 4);
    CHECK((sd_bf16_from_f32(qnan) & 0x7fff) > 0x7f80);
    free(f), free(h), free(got);
}

static void test_no_path(sd_backend *be) {
    CHECK(!sd_backend_supports_precision(be, SD_PREC_BF16));
    int64_t xs[2] = {4, 8}, ws[2] = {3, 8};
    sd_bt *x = rand_bt(be, SD_F32, 2, xs, 1.0f), *w = rand_bt(be, SD_F32, 2, ws, 1.0f);
    sd_backend_set_precision(be, SD_PREC_BF16);
    sd_bt *y = sd_op_linear(x, w, NULL);
    CHECK_MSG(y == NULL, "linear in bf16 mode without oneDNN must fail, not compute f32");
    const sd_error *e = sd_backend_error(be);
    CHECK(e && e->code == SD_ERR_UNSUPPORTED);
    CHECK_MSG(e && strstr(e->msg, "no bf16 CPU path") && strstr(e->msg, "SDFLOW_DNNL"),
              "error should say how to get a bf16 path: %s", e ? e->msg : "(none)");
    sd_backend_clear_error(be);
    sd_bt_free(y), sd_bt_free(x), sd_bt_free(w);
}

/* Every op and dtype on the backend's current bf16 path. The shapes are
 * all below the Winograd crossover (conv2d.c), so the emulated convs run
 * im2col, whose summation the bound covers; Winograd's own error bound is
 * checked on f32 data by test_winograd (bf16-rounded values are f32
 * values), and the golden tests run the emulated path through it. */
static void test_ops(sd_backend *be) {
    static const sd_dtype wdts[] = {SD_F32, SD_F16, SD_BF16, SD_F8_E4M3, SD_F8_E5M2};
    for (int i = 0; i < (int)(sizeof wdts / sizeof wdts[0]); i++) {
        test_linear(be, wdts[i], 1);
        test_linear(be, wdts[i], 0);
        test_matmul(be, 1, 0, 1.0f, wdts[i]);
        test_matmul(be, 1, 1, 0.125f, wdts[i]);
        test_matmul(be, 0, 1, 1.0f, wdts[i]);
        test_matmul(be, 0, 0, 0.5f, wdts[i]);
        test_conv(be, 2, 5, 11, 13, 7, 3, 3, 1, 1, 1, wdts[i], 1);
    }
    test_conv(be, 1, 32, 9, 10, 48, 3, 3, 1, 1, 1, SD_F16, 1);
    test_conv(be, 2, 19, 12, 9, 21, 3, 3, 2, 1, 1, SD_F32, 1);
    test_conv(be, 1, 20, 7, 8, 36, 1, 1, 1, 0, 0, SD_F16, 1);
    test_conv(be, 1, 3, 15, 14, 17, 3, 3, 2, 0, 0, SD_F32, 0);
    test_conv(be, 1, 33, 6, 5, 16, 3, 1, 1, 1, 0, SD_BF16, 1);
    /* first-layer and stride-2 shapes of the tiny autoencoders (an RGB
     * input, 64 channels, no bias on the downsampling conv) */
    test_conv(be, 1, 3, 40, 36, 64, 3, 3, 1, 1, 1, SD_F16, 1);
    test_conv(be, 1, 64, 20, 18, 64, 3, 3, 2, 1, 1, SD_F16, 0);
    test_conv(be, 1, 64, 10, 9, 64, 3, 3, 1, 1, 1, SD_F16, 1);
    test_attention(be, 2, 37, 29, 3, 3, 16, 0, 0);
    test_attention(be, 1, 21, 21, 2, 2, 24, 1, 1);
    test_attention(be, 1, 9, 13, 4, 2, 8, 0, 1);
    test_attention(be, 1, 300, 1100, 2, 2, 8, 0, 0);
}

/* The oneDNN path's packed weights (dnnl_pack.h): a linear's and a conv's
 * weight are packed on first use and kept (their results are judged by
 * test_ops, whose second run of every op reads them), freed with the
 * weight; an fp8 weight (it would double) and anything past the budget are
 * packed per op and not kept. */
static void test_packing(sd_backend *be) {
    sd_cpu *c = be->impl;
    size_t n0, b0 = sd_dnnl_packed_bytes(c->dnnl, &n0);
    int64_t xs[2] = {8, 128}, ws[2] = {64, 128};
    int64_t cx[4] = {1, 16, 8, 8}, cw[4] = {32, 16, 3, 3};
    sd_bt *x = rand_bt(be, SD_F32, 2, xs, 1.0f), *xi = rand_bt(be, SD_F32, 4, cx, 1.0f);
    static const sd_dtype wdts[] = {SD_F32, SD_F16, SD_BF16};
    for (int i = 0; i < 3; i++) {
        sd_bt *w = rand_bt(be, wdts[i], 2, ws, 1.0f), *cwt = rand_bt(be, wdts[i], 4, cw, 1.0f);
        sd_bt *y = sd_op_linear(x, w, NULL), *yc = sd_op_conv2d(xi, cwt, NULL, 1, 1, 1);
        size_t n1, b1 = sd_dnnl_packed_bytes(c->dnnl, &n1);
        CHECK_MSG(y && yc && n1 == n0 + 2 && b1 >= b0 + (size_t)(64 * 128 + 32 * 16 * 9) * 2,
                  "%s weights: %zu packed copies (%zu bytes), want %zu more",
                  sd_dtype_name(wdts[i]), n1, b1, n0 + 2);
        sd_bt *y2 = sd_op_linear(x, w, NULL);
        size_t n2, b2 = sd_dnnl_packed_bytes(c->dnnl, &n2);
        CHECK_MSG(y2 && n2 == n1 && b2 == b1, "a second use must not pack again");
        sd_bt_free(w), sd_bt_free(cwt);
        size_t n3, b3 = sd_dnnl_packed_bytes(c->dnnl, &n3);
        CHECK_MSG(n3 == n0 && b3 == b0, "freeing the weights leaves %zu packed copies", n3 - n0);
        sd_bt_free(y), sd_bt_free(yc), sd_bt_free(y2);
    }
    sd_bt *w8 = rand_bt(be, SD_F8_E4M3, 2, ws, 1.0f);
    sd_bt *y8 = sd_op_linear(x, w8, NULL);
    size_t n8;
    sd_dnnl_packed_bytes(c->dnnl, &n8);
    CHECK_MSG(y8 && n8 == n0, "an fp8 weight must be packed per op, not kept");
    sd_bt_free(w8), sd_bt_free(y8);
    sd_dnnl_set_pack_budget(be, 0);
    sd_bt *w = rand_bt(be, SD_F16, 2, ws, 1.0f);
    sd_bt *y = sd_op_linear(x, w, NULL);
    size_t nb;
    sd_dnnl_packed_bytes(c->dnnl, &nb);
    CHECK_MSG(y && nb == n0, "with a zero budget nothing may be kept");
    sd_bt_free(w), sd_bt_free(y), sd_bt_free(x), sd_bt_free(xi);
}

int main(void) {
    sd_backend *be = NULL;
    sd_error err;
    CHECK_OK(sd_backend_new("cpu", 2, &be, &err), &err);
    if (!be) return sd_test_finish();
    test_rounding(be);
    if (!sd_dnnl_compiled()) {
        printf("built without oneDNN: checking that bf16 mode refuses to run\n");
        test_no_path(be);
        sd_backend_free(be);
        return sd_test_finish();
    }
    CHECK(sd_backend_supports_precision(be, SD_PREC_BF16));
    CHECK(sd_backend_supports_precision(be, SD_PREC_F32));
    CHECK(!sd_backend_supports_precision(be, SD_PREC_F16));
    printf("oneDNN ISA: %s (native bf16: %d); our level: %s; default bf16 path: %s\n",
           sd_dnnl_isa_name(), sd_dnnl_native_bf16(), sd_cpu_level_name(sd_cpu_level()),
           sd_cpu_bf16_default_path() == SD_BF16_PATH_ONEDNN ? "onednn" : "emulate");
    sd_backend_set_precision(be, SD_PREC_BF16);
    static const int paths[] = {SD_BF16_PATH_ONEDNN, SD_BF16_PATH_EMULATE};
    for (int p = 0; p < 2; p++) {
        if (paths[p] == SD_BF16_PATH_ONEDNN && !sd_dnnl_has_bf16()) {
            /* oneDNN 2.6 has no bf16 primitives below AVX-512: the backend
             * must not pick them */
            printf("-- oneDNN has no bf16 primitives on this CPU (%s): its path is not run\n",
                   sd_dnnl_isa_name());
            CHECK(sd_cpu_bf16_default_path() == SD_BF16_PATH_EMULATE);
            continue;
        }
        ((sd_cpu *)be->impl)->bf16_path = paths[p];
        printf("-- %s path\n", paths[p] == SD_BF16_PATH_ONEDNN ? "oneDNN" : "emulated");
        test_ops(be);
        if (paths[p] == SD_BF16_PATH_ONEDNN) {
            test_packing(be);
            printf("-- oneDNN path, nothing kept packed (budget 0)\n");
            test_ops(be); /* sd_dnnl_set_pack_budget(be, 0) by test_packing */
        }
    }
    CHECK(sd_backend_error(be) == NULL);
    /* f16 compute has no CPU path: it must fail, not compute f32 */
    int64_t xs[2] = {4, 8}, ws[2] = {3, 8};
    sd_bt *x = rand_bt(be, SD_F32, 2, xs, 1.0f), *w = rand_bt(be, SD_F32, 2, ws, 1.0f);
    sd_backend_set_precision(be, SD_PREC_F16);
    sd_bt *y = sd_op_linear(x, w, NULL);
    CHECK(y == NULL && sd_backend_error(be) && sd_backend_error(be)->code == SD_ERR_UNSUPPORTED);
    sd_bt_free(y), sd_bt_free(x), sd_bt_free(w);
    sd_backend_free(be);
    return sd_test_finish();
}
