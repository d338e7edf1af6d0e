/* test_ops.c - every sd_op_* against an obviously-correct double-precision
 * reference loop, on random shapes with odd sizes, on 1 and 2 threads.
 * Tolerances (|got - ref| <= atol + rtol*|ref|) are stated per op below. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 52) - 1.0;
}

/* Random F32 backend tensor; its host values are in *host (caller frees). */
static sd_bt *rand_bt(sd_backend *be, int ndim, const int64_t *shape, float **host, double amp) {
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, shape);
    float *p = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) p[i] = (float)(urand() * amp);
    *host = malloc(t->nbytes + 4);
    memcpy(*host, p, t->nbytes);
    sd_bt *b = sd_bt_from_host(be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

/* Compare a backend result with a double reference. */
static int close_to(const char *what, sd_bt *got, const double *ref, int64_t n, double atol,
                    double rtol) {
    CHECK_MSG(got != NULL, "%s: op returned NULL", what);
    if (!got) return 0;
    CHECK_MSG(sd_bt_numel(got) == n, "%s: numel %lld, want %lld", what,
              (long long)sd_bt_numel(got), (long long)n);
    if (sd_bt_numel(got) != n) return 0;
    sd_tensor *h = sd_bt_to_host(got);
    const float *p = h->data;
    double worst = 0;
    int64_t wi = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(p[i] - ref[i]);
        if (!(d <= atol + rtol * fabs(ref[i]))) bad++;
        if (!(d <= worst)) { worst = d; wi = i; }
    }
    CHECK_MSG(bad == 0, "%s: %lld of %lld elements off, worst |d| %.3g at %lld (got %.7g want %.7g)",
              what, (long long)bad, (long long)n, worst, (long long)wi, p[wi], ref[wi]);
    sd_tensor_unref(h);
    return bad == 0;
}

static double *dalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

/* ---- GEMM ops: atol 1e-5 * sqrt(K) + rtol 1e-5 (F32 sums of K products) ------- */

static void test_linear(sd_backend *be) {
    /* the last: >= 1024 rows, few features, so the weight goes transposed (gemm.c) */
    int64_t cases[][3] = {{1, 1, 1}, {3, 7, 17}, {17, 33, 3}, {5, 64, 65}, {130, 33, 7}, {1031, 37, 45}};
    for (int c = 0; c < 6; c++) {
        int64_t M = cases[c][0], K = cases[c][1], O = cases[c][2];
        float *x, *w, *b;
        int64_t xs[3] = {1, M, K}, ws[2] = {O, K}, bs[1] = {O};
        sd_bt *X = rand_bt(be, 3, xs, &x, 1), *W = rand_bt(be, 2, ws, &w, 1), *B = rand_bt(be, 1, bs, &b, 1);
        for (int withb = 0; withb < 2; withb++) {
            double *ref = dalloc(M * O);
            for (int64_t i = 0; i < M; i++)
                for (int64_t o = 0; o < O; o++) {
                    double s = withb ? b[o] : 0;
                    for (int64_t k = 0; k < K; k++) s += (double)x[i * K + k] * w[o * K + k];
                    ref[i * O + o] = s;
                }
            sd_bt *y = sd_op_linear(X, W, withb ? B : NULL);
            char what[64];
            snprintf(what, sizeof what, "linear M%lld K%lld O%lld b%d", (long long)M, (long long)K,
                     (long long)O, withb);
            close_to(what, y, ref, M * O, 1e-5 * sqrt((double)K), 1e-5);
            CHECK(y && y->ndim == 3 && y->shape[2] == O);
            sd_bt_free(y);
            free(ref);
        }
        sd_bt_free(X); sd_bt_free(W); sd_bt_free(B);
        free(x); free(w); free(b);
    }
}

static void test_matmul(sd_backend *be) {
    int64_t cases[][4] = {{1, 1, 1, 1}, {2, 3, 7, 5}, {3, 17, 33, 9}, {1, 70, 64, 130}};
    for (int c = 0; c < 4; c++)
        for (int tb = 0; tb < 2; tb++)
            for (int bc = 0; bc < 2; bc++) { /* bc: b has batch 1 (broadcast) */
                int64_t B = cases[c][0], M = cases[c][1], K = cases[c][2], N = cases[c][3];
                int64_t Bb = bc ? 1 : B;
                int64_t as[3] = {B, M, K}, bs[3] = {Bb, tb ? N : K, tb ? K : N};
                float *a, *b;
                sd_bt *A = rand_bt(be, 3, as, &a, 1), *Bt = rand_bt(be, 3, bs, &b, 1);
                double *ref = dalloc(B * M * N);
                for (int64_t i = 0; i < B; i++)
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t n = 0; n < N; n++) {
                            double s = 0;
                            for (int64_t k = 0; k < K; k++) {
                                double bv = tb ? b[(bc ? 0 : i) * N * K + n * K + k]
                                               : b[(bc ? 0 : i) * K * N + k * N + n];
                                s += (double)a[i * M * K + m * K + k] * bv;
                            }
                            ref[(i * M + m) * N + n] = 0.5 * s;
                        }
                sd_bt *y = sd_op_matmul(A, Bt, tb, 0.5f);
                char what[80];
                snprintf(what, sizeof what, "matmul B%lld M%lld K%lld N%lld tb%d bc%d", (long long)B,
                         (long long)M, (long long)K, (long long)N, tb, bc);
                close_to(what, y, ref, B * M * N, 1e-5 * sqrt((double)K), 1e-5);
                sd_bt_free(y); sd_bt_free(A); sd_bt_free(Bt);
                free(a); free(b); free(ref);
            }
}

/* ---- conv2d: atol 1e-5 * sqrt(C*kh*kw), rtol 1e-5 -------------------------------- */

static void test_conv2d(sd_backend *be) {
    /* N, C, H, W, O, k, stride, pad */
    int cases[][8] = {{1, 1, 1, 1, 1, 1, 1, 0}, {1, 3, 5, 7, 17, 3, 1, 1}, {2, 7, 9, 5, 3, 3, 2, 1},
                      {1, 33, 8, 8, 7, 1, 1, 0}, {2, 17, 6, 9, 5, 1, 2, 0}, {1, 3, 9, 9, 4, 3, 2, 0},
                      {1, 4, 7, 6, 3, 3, 1, 2}, {1, 5, 10, 11, 6, 5, 1, 2}, {1, 64, 40, 300, 4, 3, 1, 1},
                      /* small images share a GEMM on 2 threads (conv2d.c BATCH_COLS): a group
                       * of 2 and a rest of 1, all 3 in one group, a 5x5 kernel */
                      {3, 9, 10, 10, 13, 3, 1, 1}, {3, 19, 5, 7, 11, 3, 1, 1}, {2, 6, 7, 7, 5, 5, 1, 2},
                      /* 1x1 with few channels on >= 1024 pixels: the transposed weight */
                      {2, 19, 33, 35, 23, 1, 1, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int N = cases[c][0], C = cases[c][1], H = cases[c][2], W = cases[c][3], O = cases[c][4];
        int k = cases[c][5], s = cases[c][6], p = cases[c][7];
        int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
        int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, k, k}, bs[1] = {O};
        float *x, *w, *b;
        sd_bt *X = rand_bt(be, 4, xs, &x, 1), *Wt = rand_bt(be, 4, ws, &w, 1), *B = rand_bt(be, 1, bs, &b, 1);
        double *ref = dalloc((int64_t)N * O * Ho * Wo);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++)
                for (int oy = 0; oy < Ho; oy++)
                    for (int ox = 0; ox < Wo; ox++) {
                        double acc = b[o];
                        for (int ci = 0; ci < C; ci++)
                            for (int ky = 0; ky < k; ky++)
                                for (int kx = 0; kx < k; kx++) {
                                    int iy = oy * s - p + ky, ix = ox * s - p + kx;
                                    if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                    acc += (double)w[((o * C + ci) * k + ky) * k + kx] *
                                           x[((n * C + ci) * H + iy) * W + ix];
                                }
                        ref[((n * O + o) * Ho + oy) * Wo + ox] = acc;
                    }
        sd_bt *y = sd_op_conv2d(X, Wt, B, s, p, p);
        char what[96];
        snprintf(what, sizeof what, "conv2d N%d C%d %dx%d O%d k%d s%d p%d", N, C, H, W, O, k, s, p);
        close_to(what, y, ref, (int64_t)N * O * Ho * Wo, 1e-5 * sqrt((double)C * k * k), 1e-5);
        CHECK(y && y->shape[2] == Ho && y->shape[3] == Wo);
        sd_bt_free(y);
        /* without bias: subtract it from the reference */
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++)
                for (int i = 0; i < Ho * Wo; i++) ref[(n * O + o) * Ho * Wo + i] -= b[o];
        y = sd_op_conv2d(X, Wt, NULL, s, p, p);
        close_to("conv2d no bias", y, ref, (int64_t)N * O * Ho * Wo, 1e-5 * sqrt((double)C * k * k), 1e-5);
        sd_bt_free(y); sd_bt_free(X); sd_bt_free(Wt); sd_bt_free(B);
        free(x); free(w); free(b); free(ref);
    }
}

/* ---- normalisation: atol 1e-5, rtol 1e-5 ----------------------------------------- */

static void test_group_norm(sd_backend *be) {
    /* N, C, H, W, groups, silu, affine, offset */
    int cases[][8] = {{1, 1, 1, 1, 1, 0, 1, 0}, {2, 3, 5, 7, 3, 0, 1, 0}, {1, 33, 3, 3, 3, 1, 1, 0},
                      {2, 32, 17, 9, 32, 1, 0, 0}, {1, 64, 33, 31, 4, 0, 1, 1000}, {1, 6, 1, 1, 2, 1, 1, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int N = cases[c][0], C = cases[c][1], H = cases[c][2], W = cases[c][3], G = cases[c][4];
        int silu = cases[c][5], affine = cases[c][6];
        int64_t xs[4] = {N, C, H, W}, cs[1] = {C};
        float *x, *g, *b;
        sd_bt *X = rand_bt(be, 4, xs, &x, 2), *Gm = rand_bt(be, 1, cs, &g, 1), *Bt = rand_bt(be, 1, cs, &b, 1);
        if (cases[c][7]) { /* large mean: catches one-pass E[x^2]-E[x]^2 in F32 */
            sd_bt_free(X);
            for (int64_t i = 0; i < (int64_t)N * C * H * W; i++) x[i] += (float)cases[c][7];
            sd_tensor *t = sd_tensor_new(SD_F32, 4, xs);
            memcpy(t->data, x, t->nbytes);
            X = sd_bt_from_host(be, t, SD_F32);
            sd_tensor_unref(t);
        }
        int64_t S = (int64_t)H * W, cpg = C / G;
        double *ref = dalloc((int64_t)N * C * S);
        for (int n = 0; n < N; n++)
            for (int gi = 0; gi < G; gi++) {
                const float *xp = x + ((int64_t)n * C + gi * cpg) * S;
                double m = 0, v = 0;
                for (int64_t i = 0; i < cpg * S; i++) m += xp[i];
                m /= (double)(cpg * S);
                for (int64_t i = 0; i < cpg * S; i++) v += (xp[i] - m) * (xp[i] - m);
                v /= (double)(cpg * S);
                for (int64_t i = 0; i < cpg * S; i++) {
                    int64_t ch = gi * cpg + i / S;
                    double y = (xp[i] - m) / sqrt(v + 1e-6);
                    if (affine) y = y * g[ch] + b[ch];
                    if (silu) y = y / (1 + exp(-y));
                    ref[((int64_t)n * C + gi * cpg) * S + i] = y;
                }
            }
        sd_bt *y = sd_op_group_norm(X, G, affine ? Gm : NULL, affine ? Bt : NULL, 1e-6f, silu);
        char what[96];
        snprintf(what, sizeof what, "group_norm N%d C%d %dx%d G%d silu%d affine%d off%d", N, C, H,
                 W, G, silu, affine, cases[c][7]);
        close_to(what, y, ref, (int64_t)N * C * S, cases[c][7] ? 1e-4 : 1e-5, 1e-5);
        sd_bt_free(y); sd_bt_free(X); sd_bt_free(Gm); sd_bt_free(Bt);
        free(x); free(g); free(b); free(ref);
    }
}

static void test_layer_norm_softmax(sd_backend *be) {
    int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 7}, {1, 77, 33}, {3, 5, 1024}};
    for (int c = 0; c < 4; c++) {
        int64_t R = shapes[c][0] * shapes[c][1], C = shapes[c][2], cs[1] = {C};
        float *x, *g, *b;
        sd_bt *X = rand_bt(be, 3, shapes[c], &x, 3), *Gm = rand_bt(be, 1, cs, &g, 1), *Bt = rand_bt(be, 1, cs, &b, 1);
        double *ref = dalloc(R * C), *sm = dalloc(R * C);
        for (int64_t r = 0; r < R; r++) {
            double m = 0, v = 0, mx = -1e300, se = 0;
            for (int64_t i = 0; i < C; i++) m += x[r * C + i];
            m /= (double)C;
            for (int64_t i = 0; i < C; i++) v += (x[r * C + i] - m) * (x[r * C + i] - m);
            v /= (double)C;
            for (int64_t i = 0; i < C; i++) {
                ref[r * C + i] = (x[r * C + i] - m) / sqrt(v + 1e-5) * g[i] + b[i];
                if (x[r * C + i] > mx) mx = x[r * C + i];
            }
            for (int64_t i = 0; i < C; i++) se += exp(x[r * C + i] - mx);
            for (int64_t i = 0; i < C; i++) sm[r * C + i] = exp(x[r * C + i] - mx) / se;
        }
        sd_bt *y = sd_op_layer_norm(X, Gm, Bt, 1e-5f);
        close_to("layer_norm", y, ref, R * C, 1e-5, 1e-5);
        sd_bt_free(y);
        /* softmax: atol 1e-7, rtol 1e-5 (probabilities) */
        y = sd_op_softmax(X);
        close_to("softmax", y, sm, R * C, 1e-7, 1e-5);
        sd_bt_free(y); sd_bt_free(X); sd_bt_free(Gm); sd_bt_free(Bt);
        free(x); free(g); free(b); free(ref); free(sm);
    }
}

/* softmax with masked (-inf) entries: those are exactly 0; an all -inf row
 * is all zeros (PyTorch would give NaN; we document zeros) */
static void test_softmax_masked(sd_backend *be) {
    int64_t s[2] = {2, 37};
    sd_tensor *h = sd_tensor_new(SD_F32, 2, s);
    float *p = h->data;
    double ref[74], mx = -1e300, se = 0;
    for (int i = 0; i < 37; i++) p[i] = i % 3 == 0 ? -INFINITY : (float)(i * 0.25 - 4);
    for (int i = 0; i < 37; i++) if (p[i] > mx) mx = p[i];
    for (int i = 0; i < 37; i++) se += i % 3 ? exp(p[i] - mx) : 0;
    for (int i = 0; i < 37; i++) ref[i] = i % 3 ? exp(p[i] - mx) / se : 0;
    for (int i = 37; i < 74; i++) { p[i] = -INFINITY; ref[i] = 0; }
    sd_bt *x = sd_bt_from_host(be, h, SD_F32);
    sd_bt *y = sd_op_softmax(x);
    close_to("softmax masked", y, ref, 74, 1e-7, 1e-5);
    sd_tensor *o = y ? sd_bt_to_host(y) : NULL;
    int exact = o != NULL;
    for (int i = 0; o && i < 74; i++) if (ref[i] == 0) exact &= ((float *)o->data)[i] == 0.0f;
    CHECK(exact);
    sd_tensor_unref(o);
    sd_bt_free(y); sd_bt_free(x);
    sd_tensor_unref(h);
}

/* ---- attention: atol 2e-6 * sqrt(D) + 1e-5 rel ------------------------------------ */

static void test_attention(sd_backend *be) {
    /* N, Lq, Lk, heads, D, causal */
    int cases[][6] = {{1, 1, 1, 1, 1, 0}, {2, 7, 7, 3, 5, 1}, {1, 77, 77, 2, 64, 1},
                      {2, 33, 17, 2, 8, 0}, {1, 300, 300, 1, 32, 0}, {1, 517, 9001, 1, 8, 0},
                      {1, 300, 300, 2, 16, 1},
                      /* several key blocks (online softmax), causal, odd sizes */
                      {1, 1300, 2100, 2, 8, 1}, {2, 1031, 1031, 1, 12, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int N = cases[c][0], Lq = cases[c][1], Lk = cases[c][2], Hh = cases[c][3], D = cases[c][4];
        int causal = cases[c][5], HD = Hh * D;
        int64_t qs[3] = {N, Lq, HD}, ks[3] = {N, Lk, HD};
        float *q, *k, *v;
        sd_bt *Q = rand_bt(be, 3, qs, &q, 1.5), *K = rand_bt(be, 3, ks, &k, 1.5), *V = rand_bt(be, 3, ks, &v, 1);
        double *ref = dalloc((int64_t)N * Lq * HD), *s = dalloc(Lk);
        double scale = 1.0 / sqrt((double)D);
        for (int n = 0; n < N; n++)
            for (int h = 0; h < Hh; h++)
                for (int i = 0; i < Lq; i++) {
                    double mx = -1e300, se = 0;
                    int lim = causal ? (i + 1 < Lk ? i + 1 : Lk) : Lk;
                    for (int j = 0; j < lim; j++) {
                        double d = 0;
                        for (int e = 0; e < D; e++)
                            d += (double)q[((int64_t)n * Lq + i) * HD + h * D + e] *
                                 k[((int64_t)n * Lk + j) * HD + h * D + e];
                        s[j] = d * scale;
                        if (s[j] > mx) mx = s[j];
                    }
                    for (int j = 0; j < lim; j++) se += (s[j] = exp(s[j] - mx));
                    for (int e = 0; e < D; e++) {
                        double o = 0;
                        for (int j = 0; j < lim; j++)
                            o += s[j] / se * v[((int64_t)n * Lk + j) * HD + h * D + e];
                        ref[((int64_t)n * Lq + i) * HD + h * D + e] = o;
                    }
                }
        sd_bt *y = sd_op_attention(Q, K, V, Hh, causal);
        char what[96];
        snprintf(what, sizeof what, "attention N%d Lq%d Lk%d H%d D%d causal%d", N, Lq, Lk, Hh, D, causal);
        close_to(what, y, ref, (int64_t)N * Lq * HD, 2e-6 * sqrt((double)D) + 2e-6, 1e-5);
        sd_bt_free(y); sd_bt_free(Q); sd_bt_free(K); sd_bt_free(V);
        free(q); free(k); free(v); free(ref); free(s);
    }
}

/* ---- elementwise: atol 1e-6, rtol 1e-6 (activations: 2e-6) --------------------- */

static void test_binary(sd_backend *be) {
    struct { int na; int64_t a[4]; int nb; int64_t b[4]; } cases[] = {
        {3, {2, 3, 5}, 3, {2, 3, 5}}, {3, {2, 7, 17}, 1, {17}}, {4, {2, 3, 5, 7}, 1, {3}},
        {4, {2, 3, 5, 7}, 4, {2, 1, 5, 1}}, {4, {1, 33, 4, 4}, 4, {1, 33, 1, 1}}, {2, {3, 1}, 2, {3, 1}},
        {3, {2, 5, 7}, 2, {5, 7}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *a, *b;
        sd_bt *A = rand_bt(be, cases[c].na, cases[c].a, &a, 1), *B = rand_bt(be, cases[c].nb, cases[c].b, &b, 1);
        int64_t n = sd_bt_numel(A);
        double *radd = dalloc(n), *rmul = dalloc(n);
        int na = cases[c].na, nb = cases[c].nb;
        int chan = nb == 1 && na >= 3 && cases[c].b[0] == cases[c].a[1] && cases[c].b[0] != cases[c].a[na - 1];
        for (int64_t i = 0; i < n; i++) {
            int64_t idx[4], rem = i, bi = 0;
            for (int d = na - 1; d >= 0; d--) { idx[d] = rem % cases[c].a[d]; rem /= cases[c].a[d]; }
            if (chan) bi = idx[1];
            else
                for (int d = 0; d < nb; d++) {
                    int64_t ad = idx[na - nb + d];
                    bi = bi * cases[c].b[d] + (cases[c].b[d] == 1 ? 0 : ad);
                }
            radd[i] = (double)a[i] + b[bi];
            rmul[i] = (double)a[i] * b[bi];
        }
        sd_bt *y = sd_op_add(A, B);
        close_to("add", y, radd, n, 1e-6, 1e-6);
        sd_bt_free(y);
        y = sd_op_mul(A, B);
        close_to("mul", y, rmul, n, 1e-6, 1e-6);
        sd_bt_free(y); sd_bt_free(A); sd_bt_free(B);
        free(a); free(b); free(radd); free(rmul);
    }
    /* add_channel: x [N, C, H, W] + b [N, C] */
    int64_t xs[4] = {2, 3, 5, 7}, bs[2] = {2, 3};
    float *x, *b;
    sd_bt *X = rand_bt(be, 4, xs, &x, 1), *B = rand_bt(be, 2, bs, &b, 1);
    double *ref = dalloc(210);
    for (int i = 0; i < 210; i++) ref[i] = (double)x[i] + b[i / 35];
    sd_bt *y = sd_op_add_channel(X, B);
    close_to("add_channel", y, ref, 210, 1e-6, 1e-6);
    sd_bt_free(y); sd_bt_free(X); sd_bt_free(B);
    free(x); free(b); free(ref);
}

static void test_unary(sd_backend *be) {
    int64_t shape[3] = {3, 17, 4099}; /* > one 64K chunk */
    float *x;
    sd_bt *X = rand_bt(be, 3, shape, &x, 6);
    int64_t n = sd_bt_numel(X);
    double *ref = dalloc(n);
    for (int op = 0; op < 6; op++) {
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            switch (op) {
            case 0: ref[i] = v * 0.37; break;
            case 1: ref[i] = v / (1 + exp(-v)); break;
            case 2: ref[i] = 0.5 * v * (1 + erf(v / sqrt(2.0))); break;
            case 3: ref[i] = v / (1 + exp(-1.702 * v)); break;
            case 4: ref[i] = tanh(v); break;
            case 5: ref[i] = v > 0 ? v : 0; break;
            }
        }
        sd_bt *y = op == 0 ? sd_op_scale(X, 0.37f) : op == 1 ? sd_op_silu(X) : op == 2 ? sd_op_gelu(X)
                 : op == 3 ? sd_op_quick_gelu(X) : op == 4 ? sd_op_tanh(X) : sd_op_relu(X);
        const char *names[] = {"scale", "silu", "gelu", "quick_gelu", "tanh", "relu"};
        close_to(names[op], y, ref, n, 2e-6, 2e-6);
        sd_bt_free(y);
    }
    free(ref);
    sd_bt_free(X);
    free(x);
    /* extremes (vector and scalar tails both): no NaN/Inf, right limits */
    static const float ext[19] = {-1e4f, -300.f, -100.f, -88.5f, -87.f, -20.f, -5.f, -1e-3f, -1e-30f, 0.f,
                                  1e-30f, 1e-3f, 5.f, 20.f, 87.f, 88.5f, 100.f, 300.f, 1e4f};
    int64_t es[1] = {19};
    sd_tensor *eh = sd_tensor_new(SD_F32, 1, es);
    memcpy(eh->data, ext, sizeof ext);
    sd_bt *E = sd_bt_from_host(be, eh, SD_F32);
    sd_tensor_unref(eh);
    double eref[19];
    for (int op = 0; op < 3; op++) {
        for (int i = 0; i < 19; i++) {
            double v = ext[i];
            eref[i] = op == 0 ? v / (1 + exp(-v)) : op == 1 ? 0.5 * v * (1 + erf(v / sqrt(2.0)))
                                                   : v / (1 + exp(-1.702 * v));
        }
        sd_bt *y = op == 0 ? sd_op_silu(E) : op == 1 ? sd_op_gelu(E) : sd_op_quick_gelu(E);
        close_to(op == 0 ? "silu extremes" : op == 1 ? "gelu extremes" : "quick_gelu extremes", y, eref, 19, 2e-6, 2e-6);
        sd_bt_free(y);
    }
    sd_bt_free(E);
    /* GEGLU over [..., 2F] with F odd: first half * gelu(second half) */
    int64_t gs[3] = {2, 5, 2 * 33};
    float *gp;
    sd_bt *G = rand_bt(be, 3, gs, &gp, 4);
    ref = dalloc(2 * 5 * 33);
    for (int r = 0; r < 10; r++)
        for (int i = 0; i < 33; i++) {
            double a = gp[r * 66 + i], gg = gp[r * 66 + 33 + i];
            ref[r * 33 + i] = a * 0.5 * gg * (1 + erf(gg / sqrt(2.0)));
        }
    sd_bt *y = sd_op_geglu(G);
    close_to("geglu", y, ref, 330, 2e-6, 2e-6);
    CHECK(y && y->shape[2] == 33);
    sd_bt_free(y); sd_bt_free(G);
    free(ref); free(gp);
}

/* The torch.nn activations of A1111 hypernetworks, against torch's formulas
 * evaluated in double (ELU with alpha 1 and 0.5, Hardswish, Sigmoid,
 * Softsign, Mish), over random values and the extremes where exp over- or
 * underflows. Each float result is one libm call and a few roundings away
 * from the double formula: 2e-6 relative plus absolute. */
static double act_ref(int op, double v) {
    switch (op) {
    case 0: return v > 0 ? v : expm1(v);
    case 1: return v > 0 ? v : 0.5 * expm1(v);
    case 2: return v * fmin(fmax(v + 3, 0), 6) / 6;
    case 3: return 1 / (1 + exp(-v));
    case 4: return v / (fabs(v) + 1);
    default: return v * tanh(log1p(exp(v)));
    }
}

static void test_activations(sd_backend *be) {
    static const char *names[] = {"elu", "elu 0.5", "hardswish", "sigmoid", "softsign", "mish"};
    static const float ext[19] = {-1e4f, -300.f, -100.f, -88.5f, -87.f, -20.f, -5.f, -3.f, -1e-30f, 0.f,
                                  1e-30f, 1e-3f, 3.f, 5.f, 20.f, 87.f, 88.5f, 100.f, 1e4f};
    int64_t shape[2] = {7, 9377}; /* > one 64K chunk */
    float *x;
    sd_bt *X = rand_bt(be, 2, shape, &x, 8);
    int64_t es[1] = {19};
    sd_tensor *eh = sd_tensor_new(SD_F32, 1, es);
    memcpy(eh->data, ext, sizeof ext);
    sd_bt *E = sd_bt_from_host(be, eh, SD_F32);
    sd_tensor_unref(eh);
    int64_t n = sd_bt_numel(X);
    double *ref = dalloc(n);
    for (int op = 0; op < 6; op++) {
        for (int pass = 0; pass < 2; pass++) {
            sd_bt *in = pass ? E : X;
            int64_t m = pass ? 19 : n;
            for (int64_t i = 0; i < m; i++) ref[i] = act_ref(op, pass ? ext[i] : x[i]);
            sd_bt *y = op == 0 ? sd_op_elu(in, 1.0f) : op == 1 ? sd_op_elu(in, 0.5f) : op == 2 ? sd_op_hardswish(in)
                     : op == 3 ? sd_op_sigmoid(in) : op == 4 ? sd_op_softsign(in) : sd_op_mish(in);
            char what[64];
            snprintf(what, sizeof what, "%s%s", names[op], pass ? " extremes" : "");
            close_to(what, y, ref, m, 2e-6, 2e-6);
            sd_bt_free(y);
        }
    }
    free(ref);
    free(x);
    sd_bt_free(X);
    sd_bt_free(E);
}

/* ---- data movement: exact ------------------------------------------------------------ */

static void test_layout(sd_backend *be) {
    int64_t xs[4] = {2, 3, 5, 7};
    float *x;
    sd_bt *X = rand_bt(be, 4, xs, &x, 1);
    /* pad2d */
    double *ref = dalloc(2 * 3 * 8 * 10);
    for (int p = 0; p < 6; p++)
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 10; c++) {
                int iy = r - 2, ix = c - 1; /* left 1, right 2, top 2, bottom 1 */
                ref[(p * 8 + r) * 10 + c] = iy >= 0 && iy < 5 && ix >= 0 && ix < 7 ? x[(p * 5 + iy) * 7 + ix] : 0;
            }
    sd_bt *y = sd_op_pad2d(X, 1, 2, 2, 1);
    close_to("pad2d", y, ref, 480, 0, 0);
    CHECK(y && y->shape[2] == 8 && y->shape[3] == 10);
    sd_bt_free(y);
    free(ref);
    /* upsample */
    ref = dalloc(2 * 3 * 10 * 14);
    for (int p = 0; p < 6; p++)
        for (int r = 0; r < 10; r++)
            for (int c = 0; c < 14; c++) ref[(p * 10 + r) * 14 + c] = x[(p * 5 + r / 2) * 7 + c / 2];
    y = sd_op_upsample_nearest2x(X);
    close_to("upsample_nearest2x", y, ref, 840, 0, 0);
    sd_bt_free(y);
    free(ref);
    /* permute: NCHW <-> NHWC and full rotations (batched-transpose path),
     * swaps that keep the last dim and an arbitrary one (general path) */
    int perms[6][4] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {1, 2, 3, 0}, {3, 0, 1, 2}, {0, 2, 1, 3}, {3, 1, 0, 2}};
    for (int pi = 0; pi < 6; pi++) {
        const int *pm = perms[pi];
        ref = dalloc(210);
        int64_t os[4];
        for (int d = 0; d < 4; d++) os[d] = xs[pm[d]];
        for (int64_t i = 0; i < 210; i++) {
            int64_t oi[4], rem = i, ii[4];
            for (int d = 3; d >= 0; d--) { oi[d] = rem % os[d]; rem /= os[d]; }
            for (int d = 0; d < 4; d++) ii[pm[d]] = oi[d];
            ref[i] = x[((ii[0] * 3 + ii[1]) * 5 + ii[2]) * 7 + ii[3]];
        }
        y = sd_op_permute(X, pm);
        close_to("permute", y, ref, 210, 0, 0);
        CHECK(y && y->shape[0] == os[0] && y->shape[3] == os[3]);
        sd_bt_free(y);
        free(ref);
    }
    /* transpose tiles: sizes not multiples of the 32x32 tile */
    {
        int64_t bs[4] = {2, 37, 33, 5};
        float *bx;
        sd_bt *BX = rand_bt(be, 4, bs, &bx, 1);
        static const int pm[4] = {0, 2, 3, 1};
        int64_t n = 2 * 37 * 33 * 5;
        ref = dalloc(n);
        for (int64_t b = 0; b < 2; b++)
            for (int64_t c = 0; c < 37; c++)
                for (int64_t h = 0; h < 33; h++)
                    for (int64_t w = 0; w < 5; w++)
                        ref[((b * 33 + h) * 5 + w) * 37 + c] = bx[((b * 37 + c) * 33 + h) * 5 + w];
        y = sd_op_permute(BX, pm);
        close_to("permute tiles", y, ref, n, 0, 0);
        sd_bt_free(y); sd_bt_free(BX);
        free(ref); free(bx);
    }
    /* slice + concat round trip along every dim */
    for (int d = 0; d < 4; d++) {
        int64_t cut = xs[d] / 2 + (d == 1);
        sd_bt *a = sd_op_slice(X, d, 0, cut), *b = sd_op_slice(X, d, cut, xs[d]);
        y = sd_op_concat(a, b, d);
        ref = dalloc(210);
        for (int i = 0; i < 210; i++) ref[i] = x[i];
        close_to("slice+concat", y, ref, 210, 0, 0);
        CHECK(a && a->shape[d] == cut);
        sd_bt_free(a); sd_bt_free(b); sd_bt_free(y);
        free(ref);
    }
    /* a middle slice checked element by element */
    y = sd_op_slice(X, 2, 1, 4);
    ref = dalloc(2 * 3 * 3 * 7);
    for (int p = 0; p < 6; p++)
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 7; c++) ref[(p * 3 + r) * 7 + c] = x[(p * 5 + r + 1) * 7 + c];
    close_to("slice", y, ref, 126, 0, 0);
    sd_bt_free(y);
    free(ref);
    /* copy and view */
    y = sd_op_copy(X);
    ref = dalloc(210);
    for (int i = 0; i < 210; i++) ref[i] = x[i];
    close_to("copy", y, ref, 210, 0, 0);
    CHECK(y && y->data != X->data);
    int64_t vs[2] = {6, 35};
    sd_bt *v = sd_bt_view(X, 2, vs);
    CHECK(v && v->data == X->data && v->ndim == 2);
    close_to("view", v, ref, 210, 0, 0);
    sd_bt_free(v);
    sd_bt_free(y);
    free(ref);
    /* embedding with I32 and I64 ids */
    int64_t ts[2] = {11, 5}, is[2] = {2, 3};
    float *tab;
    sd_bt *T = rand_bt(be, 2, ts, &tab, 1);
    int64_t ids[6] = {0, 10, 3, 3, 7, 1};
    for (int w = 0; w < 2; w++) {
        sd_tensor *it = sd_tensor_new(w ? SD_I64 : SD_I32, 2, is);
        for (int i = 0; i < 6; i++) {
            if (w) ((int64_t *)it->data)[i] = ids[i];
            else ((int32_t *)it->data)[i] = (int32_t)ids[i];
        }
        sd_bt *I = sd_bt_from_host(be, it, it->dtype);
        sd_tensor_unref(it);
        ref = dalloc(30);
        for (int i = 0; i < 6; i++)
            for (int c = 0; c < 5; c++) ref[i * 5 + c] = tab[ids[i] * 5 + c];
        y = sd_op_embedding(T, I);
        close_to(w ? "embedding I64" : "embedding I32", y, ref, 30, 0, 0);
        CHECK(y && y->ndim == 3 && y->shape[2] == 5);
        sd_bt_free(y); sd_bt_free(I);
        free(ref);
    }
    sd_bt_free(T); sd_bt_free(X);
    free(tab); free(x);
}

/* ---- error semantics and uploads --------------------------------------------------- */

static void test_errors(sd_backend *be) {
    sd_error err;
    int64_t s34[2] = {3, 4}, s5[1] = {5}, s23[2] = {2, 3};
    float *a, *b;
    sd_bt *A = rand_bt(be, 2, s34, &a, 1), *B = rand_bt(be, 1, s5, &b, 1);
    CHECK(sd_backend_error(be) == NULL);
    sd_bt *y = sd_op_add(A, B); /* [5] does not broadcast to [3, 4] */
    CHECK(y == NULL);
    CHECK(sd_backend_error(be) != NULL && sd_backend_error(be)->code == SD_ERR_INVALID);
    const char *first = sd_backend_error(be) ? sd_backend_error(be)->msg : "";
    CHECK_MSG(strstr(first, "add") != NULL, "message names the op: %s", first);
    /* sticky: a valid op now returns NULL and the first message stays */
    y = sd_op_relu(A);
    CHECK(y == NULL);
    CHECK(sd_backend_take_error(be, &err) == SD_ERR_INVALID && strstr(err.msg, "add"));
    sd_backend_clear_error(be);
    CHECK(sd_backend_error(be) == NULL && sd_backend_take_error(be, &err) == SD_OK);
    y = sd_op_relu(A);
    CHECK(y != NULL);
    sd_bt_free(y);
    /* NULL input propagates: NULL result, error set naming the op */
    y = sd_op_add(A, NULL);
    CHECK(y == NULL && sd_backend_error(be) != NULL);
    sd_backend_clear_error(be);
    y = sd_op_silu(NULL);
    CHECK(y == NULL);
    CHECK(sd_op_linear(NULL, NULL, NULL) == NULL);
    /* shape checks */
    CHECK(sd_op_linear(A, B, NULL) == NULL);
    sd_backend_clear_error(be);
    CHECK(sd_op_attention(A, A, A, 1, 0) == NULL); /* not 3-D */
    sd_backend_clear_error(be);
    CHECK(sd_op_group_norm(A, 3, NULL, NULL, 1e-5f, 0) == NULL); /* 4 channels, 3 groups */
    sd_backend_clear_error(be);
    CHECK(sd_bt_view(A, 2, s23) == NULL);
    sd_backend_clear_error(be);
    /* embedding id out of range */
    sd_tensor *it = sd_tensor_new(SD_I64, 1, s5);
    ((int64_t *)it->data)[2] = 3;
    sd_bt *I = sd_bt_from_host(be, it, SD_I64);
    sd_tensor_unref(it);
    y = sd_op_embedding(A, I);
    CHECK(y == NULL && sd_backend_error(be) && strstr(sd_backend_error(be)->msg, "outside"));
    sd_backend_clear_error(be);
    sd_bt_free(I);
    sd_bt_free(A); sd_bt_free(B);
    free(a); free(b);
}

static void test_upload(sd_backend *be) {
    int64_t s[2] = {3, 7};
    for (int w = 0; w < 2; w++) {
        sd_dtype dt = w ? SD_BF16 : SD_F16;
        sd_tensor *h = sd_tensor_new(dt, 2, s);
        uint16_t *p = h->data;
        double *ref = dalloc(21);
        for (int i = 0; i < 21; i++) {
            float v = (float)urand() * 100.0f;
            p[i] = w ? sd_f32_to_bf16(v) : sd_f32_to_f16(v);
            ref[i] = w ? sd_bf16_to_f32(p[i]) : sd_f16_to_f32(p[i]);
        }
        sd_bt *f = sd_bt_from_host(be, h, SD_F32); /* converted at upload */
        CHECK(f && f->dtype == SD_F32 && f->data != h->data);
        close_to(w ? "BF16 upload" : "F16 upload", f, ref, 21, 0, 0);
        sd_bt *k = sd_bt_from_host(be, h, dt); /* kept: shares storage */
        CHECK(k && k->dtype == dt && k->data == h->data);
        close_to("16-bit download", k, ref, 21, 0, 0);
        /* the CPU backend widens a 16-bit input for the op (weights kept as
         * stored): same result as on the F32 upload */
        sd_bt *y = sd_op_relu(k), *yf = sd_op_relu(f);
        CHECK(y && yf && y->dtype == SD_F32 && memcmp(y->data, yf->data, y->nbytes) == 0);
        sd_bt_free(y); sd_bt_free(yf);
        /* an integer input is a clear error, not garbage */
        sd_tensor *ih = sd_tensor_new(SD_I32, 2, s);
        sd_bt *ib = sd_bt_from_host(be, ih, SD_I32);
        y = sd_op_relu(ib);
        CHECK(y == NULL && sd_backend_error(be) && sd_backend_error(be)->code == SD_ERR_UNSUPPORTED);
        sd_backend_clear_error(be);
        sd_bt_free(ib); sd_tensor_unref(ih);
        /* the storage outlives the host reference we drop */
        sd_tensor_unref(h);
        close_to("16-bit after unref", k, ref, 21, 0, 0);
        sd_bt_free(f); sd_bt_free(k);
        free(ref);
    }
    sd_bt *z = sd_bt_new4(be, SD_F32, 2, 4, 5, 0, 0);
    double zero[20] = {0};
    close_to("sd_bt_new4 zeroed", z, zero, 20, 0, 0);
    sd_bt_free(z);
}

static void test_backends(void) {
    sd_backend *be = NULL;
    sd_error err;
#ifndef SDFLOW_HAVE_CUDA
    CHECK(sd_backend_new("cuda", 1, &be, &err) == SD_ERR_UNSUPPORTED && be == NULL);
    CHECK(strstr(err.msg, "cuda") != NULL);
#endif
    CHECK(sd_backend_new("tpu", 1, &be, &err) == SD_ERR_INVALID && be == NULL);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    CHECK(be && strcmp(sd_backend_name(be), "cpu") == 0);
    sd_backend_set_precision(be, SD_PREC_BF16);
    CHECK(sd_backend_precision(be) == SD_PREC_BF16);
    sd_backend_free(be);
    sd_backend_free(NULL);
}

int main(void) {
    test_backends();
    for (int threads = 1; threads <= 2; threads++) {
        sd_backend *be = NULL;
        sd_error err;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (!be) break;
        test_linear(be);
        test_matmul(be);
        test_conv2d(be);
        test_group_norm(be);
        test_layer_norm_softmax(be);
        test_softmax_masked(be);
        test_attention(be);
        test_binary(be);
        test_unary(be);
        test_activations(be);
        test_layout(be);
        test_errors(be);
        test_upload(be);
        CHECK(sd_backend_error(be) == NULL);
        sd_backend_free(be);
    }
    return sd_test_finish();
}
