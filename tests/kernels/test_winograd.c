/* test_winograd.c - the Winograd F(4x4, 3x3) convolution (kernels/cpu/
 * winograd.c), every instruction-set path this CPU runs, on 1 and 2
 * threads, against a double-precision direct convolution and against the
 * im2col path, on random shapes: odd sizes, images smaller than a tile,
 * partial edge tiles, N = 1..3, padding 0..2, bias or none, channel counts
 * that are not multiples of 16, rows of tiles that are and are not
 * multiples of 16 (the AVX-512 loads and stores have two paths), blocks
 * that split an image, output channels in slices.
 *
 * Error bound (stated per output, computed in double by the test): with
 * u = 2^-24 and P = sum over c of |A^T| ((|G||g_c||G^T|) o (|B^T||d_c||B|)) |A|
 * at the output's tile position (the same transforms with every entry
 * replaced by its absolute value), first-order rounding analysis of
 * transform -> GEMM over C -> transform gives
 *     |y - y_exact| <= (C + 16) u (P + |bias|),
 * C for the GEMM's sums and 16 for the depth of the three transforms
 * (each at most 4 additions deep, plus the float weight constants 1/6,
 * 1/12, 1/24). P is typically 10-30x sum |w||x|: that is Winograd's price.
 * The test also prints the worst observed error in units of u*P, and in
 * units of the im2col path's worst error on the same shape.
 *
 * SDFLOW_WINO_BENCH=1 instead times im2col against Winograd on the SD1.5
 * VAE decoder's and UNet's 3x3 conv shapes (CPU-seconds and wall, median
 * of SDFLOW_WINO_BENCH_REPS runs, 3 by default; bench/notes/winograd.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/winograd.h"
#include "testutil.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static double urand(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 52) - 1.0;
}

static const double BT[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
static const double G[6][3] = {{1 / 4., 0, 0},          {-1 / 6., -1 / 6., -1 / 6.},
                               {-1 / 6., 1 / 6., -1 / 6.}, {1 / 24., 1 / 12., 1 / 6.},
                               {1 / 24., -1 / 12., 1 / 6.}, {0, 0, 1}};
static const double AT[4][6] = {
    {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};

typedef struct {
    int N, C, H, W, O, ph, pw, bias;
} shape_t;

/* x [N,C,H,W], w [O,C,3,3] -> direct double conv ref [N,O,Ho,Wo] and the
 * bound P of the header (bias excluded). */
static void reference(const shape_t *s, const float *x, const float *w, double *ref, double *P) {
    int Ho = s->H + 2 * s->ph - 2, Wo = s->W + 2 * s->pw - 2;
    for (int n = 0; n < s->N; n++)
        for (int o = 0; o < s->O; o++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double acc = 0;
                    for (int c = 0; c < s->C; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = oy - s->ph + ky, ix = ox - s->pw + kx;
                                if (iy < 0 || iy >= s->H || ix < 0 || ix >= s->W) continue;
                                acc += (double)w[((o * s->C + c) * 3 + ky) * 3 + kx] *
                                       x[((n * s->C + c) * s->H + iy) * s->W + ix];
                            }
                    ref[((n * s->O + o) * Ho + oy) * Wo + ox] = acc;
                }
    /* |G||g||G^T| per (o, c) */
    double *ug = malloc(sizeof(double) * 36 * s->O * s->C);
    for (int o = 0; o < s->O; o++)
        for (int c = 0; c < s->C; c++) {
            const float *g = w + (o * s->C + c) * 9;
            double t[6][3];
            for (int r = 0; r < 6; r++)
                for (int k = 0; k < 3; k++) {
                    t[r][k] = 0;
                    for (int i = 0; i < 3; i++) t[r][k] += fabs(G[r][i]) * fabs(g[i * 3 + k]);
                }
            for (int r = 0; r < 6; r++)
                for (int k = 0; k < 6; k++) {
                    double a = 0;
                    for (int i = 0; i < 3; i++) a += t[r][i] * fabs(G[k][i]);
                    ug[(o * s->C + c) * 36 + r * 6 + k] = a;
                }
        }
    int th = (Ho + 3) / 4, tw = (Wo + 3) / 4;
    double *vd = malloc(sizeof(double) * 36 * s->C);
    for (int n = 0; n < s->N; n++)
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++) {
                for (int c = 0; c < s->C; c++) { /* |B^T||d||B| */
                    double d[6][6], t[6][6];
                    for (int r = 0; r < 6; r++)
                        for (int k = 0; k < 6; k++) {
                            int iy = 4 * ty - s->ph + r, ix = 4 * tx - s->pw + k;
                            d[r][k] = iy < 0 || iy >= s->H || ix < 0 || ix >= s->W
                                          ? 0
                                          : fabs(x[((n * s->C + c) * s->H + iy) * s->W + ix]);
                        }
                    for (int r = 0; r < 6; r++)
                        for (int k = 0; k < 6; k++) {
                            t[r][k] = 0;
                            for (int i = 0; i < 6; i++) t[r][k] += fabs(BT[r][i]) * d[i][k];
                        }
                    for (int r = 0; r < 6; r++)
                        for (int k = 0; k < 6; k++) {
                            double a = 0;
                            for (int i = 0; i < 6; i++) a += t[r][i] * fabs(BT[k][i]);
                            vd[c * 36 + r * 6 + k] = a;
                        }
                }
                for (int o = 0; o < s->O; o++) {
                    double m[36] = {0}, t[4][6];
                    for (int c = 0; c < s->C; c++)
                        for (int i = 0; i < 36; i++) m[i] += ug[(o * s->C + c) * 36 + i] * vd[c * 36 + i];
                    for (int i = 0; i < 4; i++)
                        for (int k = 0; k < 6; k++) {
                            t[i][k] = 0;
                            for (int r = 0; r < 6; r++) t[i][k] += fabs(AT[i][r]) * m[r * 6 + k];
                        }
                    for (int i = 0; i < 4; i++)
                        for (int k = 0; k < 4; k++) {
                            int oy = 4 * ty + i, ox = 4 * tx + k;
                            if (oy >= Ho || ox >= Wo) continue;
                            double a = 0;
                            for (int r = 0; r < 6; r++) a += t[i][r] * fabs(AT[k][r]);
                            P[((n * s->O + o) * Ho + oy) * Wo + ox] = a;
                        }
                }
            }
    free(vd);
    free(ug);
}

static sd_bt *bt_from(sd_backend *be, int ndim, const int64_t *shape, const float *src) {
    sd_bt *t = sd_bt_new(be, SD_F32, ndim, shape);
    if (t && src) memcpy(t->data, src, t->nbytes);
    return t;
}

static void check_shape(sd_backend *be, int threads, const shape_t *s) {
    int Ho = s->H + 2 * s->ph - 2, Wo = s->W + 2 * s->pw - 2;
    int64_t nx = (int64_t)s->N * s->C * s->H * s->W, nw = (int64_t)s->O * s->C * 9;
    int64_t ny = (int64_t)s->N * s->O * Ho * Wo;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
    float *b = malloc(sizeof(float) * s->O), *y = malloc(sizeof(float) * (ny + 1));
    double *ref = malloc(sizeof(double) * ny), *P = malloc(sizeof(double) * ny);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)urand();
    for (int64_t i = 0; i < nw; i++) w[i] = (float)(urand() / sqrt(9.0 * s->C));
    for (int o = 0; o < s->O; o++) b[o] = (float)urand();
    reference(s, x, w, ref, P);
    if (s->bias)
        for (int64_t i = 0; i < ny; i++) ref[i] += b[(i / ((int64_t)Ho * Wo)) % s->O];

    /* the im2col path on the same data */
    int64_t xs[4] = {s->N, s->C, s->H, s->W}, ws[4] = {s->O, s->C, 3, 3}, bs[1] = {s->O};
    int64_t ys[4] = {s->N, s->O, Ho, Wo};
    sd_bt *X = bt_from(be, 4, xs, x), *Wt = bt_from(be, 4, ws, w), *B = bt_from(be, 1, bs, b);
    sd_bt *Y = bt_from(be, 4, ys, NULL);
    CHECK(sd_cpu_conv2d_im2col(be, Y, X, Wt, s->bias ? B : NULL, 1, s->ph, s->pw) == SD_OK);
    const float *yi = Y->data;
    double worst_im2col = 0;
    for (int64_t i = 0; i < ny; i++)
        if (fabs(yi[i] - ref[i]) > worst_im2col) worst_im2col = fabs(yi[i] - ref[i]);

    const double u = ldexp(1.0, -24);
    sd_wino_shape ws_ = {s->N, s->C, s->H, s->W, s->O, s->ph, s->pw};
    for (int isa = SD_ISA_SCALAR; isa <= sd_cpu_isa(); isa++) {
        for (int64_t i = 0; i <= ny; i++) y[i] = NAN; /* every output must be written */
        y[ny] = 12345.0f;                                /* and nothing past the end */
        CHECK(sd_cpu_winograd_conv3x3(be, x, w, s->bias ? b : NULL, y, &ws_, isa) == SD_OK);
        int64_t bad = 0, bad_im = 0, wi = 0;
        double worst = 0, worst_rel = 0, worst_im = 0;
        for (int64_t i = 0; i < ny; i++) {
            double bound = (s->C + 16) * u * (P[i] + (s->bias ? fabs(b[(i / ((int64_t)Ho * Wo)) % s->O]) : 0));
            double d = fabs(y[i] - ref[i]), di = fabs(y[i] - yi[i]);
            if (!(d <= bound)) bad++;
            if (!(d <= worst)) { worst = d; wi = i; }
            if (P[i] > 0 && d / (u * P[i]) > worst_rel) worst_rel = d / (u * P[i]);
            if (!(di <= worst_im)) worst_im = di;
            /* im2col's own tolerance (test_ops.c) plus ours */
            if (!(di <= bound + 1e-5 * sqrt(9.0 * s->C) + 1e-5 * fabs(ref[i]))) bad_im++;
        }
        CHECK_MSG(bad == 0,
                  "N%d C%d %dx%d O%d pad %d,%d bias %d isa %d threads %d: %lld of %lld outside the "
                  "bound, worst |d| %.3g at %lld (got %.8g want %.8g, bound %.3g)",
                  s->N, s->C, s->H, s->W, s->O, s->ph, s->pw, s->bias, isa, threads,
                  (long long)bad, (long long)ny, worst, (long long)wi, y[wi], ref[wi],
                  (s->C + 16) * u * P[wi]);
        CHECK_MSG(y[ny] == 12345.0f, "wrote past the output");
        CHECK_MSG(bad_im == 0, "N%d C%d %dx%d O%d isa %d: %lld outputs differ from im2col by more "
                  "than both tolerances (worst %.3g)", s->N, s->C, s->H, s->W, s->O, isa,
                  (long long)bad_im, worst_im);
        if (isa == sd_cpu_isa() && threads == 1)
            printf("N%d C%3d %3dx%-3d O%3d pad %d,%d bias %d: worst |err| %.3g = %.2f u*P; "
                   "im2col %.3g (ratio %.1f)\n",
                   s->N, s->C, s->H, s->W, s->O, s->ph, s->pw, s->bias, worst, worst_rel,
                   worst_im2col, worst_im2col > 0 ? worst / worst_im2col : 0);
    }
    sd_bt_free(X); sd_bt_free(Wt); sd_bt_free(B); sd_bt_free(Y);
    free(x); free(w); free(b); free(y); free(ref); free(P);
}

/* sd_op_conv2d's dispatch (conv2d.c): a shape above the Winograd threshold
 * (>= 32 channels, >= 64 tiles) gives exactly the Winograd result (the
 * computation does not depend on the thread count), one below it exactly
 * the im2col result. */
static void check_dispatch(sd_backend *be) {
    static const shape_t cases[] = {{1, 40, 30, 34, 36, 1, 1, 1}, {1, 8, 30, 34, 36, 1, 1, 1}};
    for (int ci = 0; ci < 2; ci++) {
        const shape_t *s = &cases[ci];
        int Ho = s->H + 2 * s->ph - 2, Wo = s->W + 2 * s->pw - 2;
        int64_t xs[4] = {s->N, s->C, s->H, s->W}, ws[4] = {s->O, s->C, 3, 3}, bs[1] = {s->O};
        int64_t ys[4] = {s->N, s->O, Ho, Wo};
        sd_bt *X = bt_from(be, 4, xs, NULL), *Wt = bt_from(be, 4, ws, NULL), *B = bt_from(be, 1, bs, NULL);
        sd_bt *Y = bt_from(be, 4, ys, NULL);
        float *xp = X->data, *wp = Wt->data, *bp = B->data;
        for (int64_t i = 0; i < sd_bt_numel(X); i++) xp[i] = (float)urand();
        for (int64_t i = 0; i < sd_bt_numel(Wt); i++) wp[i] = (float)(urand() * 0.1);
        for (int64_t i = 0; i < s->O; i++) bp[i] = (float)urand();
        sd_wino_shape ws_ = {s->N, s->C, s->H, s->W, s->O, s->ph, s->pw};
        if (ci == 0)
            CHECK(sd_cpu_winograd_conv3x3(be, xp, wp, bp, Y->data, &ws_, sd_cpu_isa()) == SD_OK);
        else
            CHECK(sd_cpu_conv2d_im2col(be, Y, X, Wt, B, 1, s->ph, s->pw) == SD_OK);
        sd_bt *Z = sd_op_conv2d(X, Wt, B, 1, s->ph, s->pw);
        CHECK_MSG(Z && Z->nbytes == Y->nbytes && memcmp(Z->data, Y->data, Y->nbytes) == 0,
                  "sd_op_conv2d C%d: not the %s result", s->C, ci == 0 ? "Winograd" : "im2col");
        sd_bt_free(Z); sd_bt_free(X); sd_bt_free(Wt); sd_bt_free(B); sd_bt_free(Y);
    }
}

/* ---- SDFLOW_WINO_BENCH: per-layer timings ----------------------------------------- */

static double now(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench(sd_backend *be) {
    /* N, C, H(=W), O: VAE decoder at 512x512 output, then UNet at 512x512 (batch 2) */
    static const int shapes[][4] = {
        {1, 512, 64, 512},  {1, 512, 128, 512}, {1, 512, 256, 512}, {1, 256, 256, 256},
        {1, 256, 512, 256}, {1, 256, 512, 128}, {1, 128, 512, 128}, {2, 320, 64, 320},
        {2, 640, 32, 640},  {2, 1280, 16, 1280}, {2, 1280, 8, 1280}, {2, 640, 64, 320},
        {2, 320, 32, 640},  {2, 1280, 32, 640}, {2, 640, 16, 1280}, {2, 2560, 8, 1280},
        {2, 2560, 16, 1280}, {2, 1920, 32, 640}, {1, 320, 64, 320}, {1, 640, 32, 640},
        {1, 1280, 16, 1280}, {1, 320, 32, 320}, {1, 640, 24, 640}, {2, 640, 24, 640}};
    const char *only = getenv("SDFLOW_WINO_BENCH_ONLY"); /* index of one shape */
    const char *path = getenv("SDFLOW_WINO_BENCH_PATH");  /* "wino" or "im2col": one path only (profiling) */
    /* runs per path (alternating), the median reported; more on a loaded machine */
    int reps = getenv("SDFLOW_WINO_BENCH_REPS") ? atoi(getenv("SDFLOW_WINO_BENCH_REPS")) : 3;
    if (reps < 1) reps = 1;
    if (reps > 31) reps = 31;
    printf("%-22s %12s %12s %12s %12s %7s\n", "N C HxW O", "im2col cpu", "im2col wall",
           "wino cpu", "wino wall", "cpu x");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        if (only && atoi(only) != (int)si) continue;
        int N = shapes[si][0], C = shapes[si][1], H = shapes[si][2], O = shapes[si][3];
        int64_t xs[4] = {N, C, H, H}, ws[4] = {O, C, 3, 3}, bs[1] = {O}, ys[4] = {N, O, H, H};
        sd_bt *X = bt_from(be, 4, xs, NULL), *Wt = bt_from(be, 4, ws, NULL);
        sd_bt *B = bt_from(be, 1, bs, NULL), *Y = bt_from(be, 4, ys, NULL);
        float *xp = X->data, *wp = Wt->data;
        for (int64_t i = 0; i < sd_bt_numel(X); i++) xp[i] = (float)urand();
        for (int64_t i = 0; i < sd_bt_numel(Wt); i++) wp[i] = (float)urand() * 0.05f;
        sd_wino_shape s = {N, C, H, H, O, 1, 1};
        double t[2][2][31];
        for (int rep = 0; rep < reps; rep++)
            for (int m = 0; m < 2; m++) {
                if (path && strcmp(path, m ? "wino" : "im2col") != 0) {
                    t[m][0][rep] = t[m][1][rep] = 0;
                    continue;
                }
                double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
                if (m == 0) sd_cpu_conv2d_im2col(be, Y, X, Wt, B, 1, 1, 1);
                else sd_cpu_winograd_conv3x3(be, X->data, Wt->data, B->data, Y->data, &s, sd_cpu_isa());
                t[m][0][rep] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                t[m][1][rep] = now(CLOCK_MONOTONIC) - w0;
            }
        for (int m = 0; m < 2; m++)
            for (int k = 0; k < 2; k++) qsort(t[m][k], (size_t)reps, sizeof(double), cmp_d);
        char name[40];
        snprintf(name, sizeof name, "%d %d %dx%d %d", N, C, H, H, O);
        int md = reps / 2;
        printf("%-22s %12.4f %12.4f %12.4f %12.4f %7.2f\n", name, t[0][0][md], t[0][1][md], t[1][0][md],
               t[1][1][md], t[0][0][md] / t[1][0][md]);
        fflush(stdout);
        sd_bt_free(X); sd_bt_free(Wt); sd_bt_free(B); sd_bt_free(Y);
    }
}

int main(void) {
    if (getenv("SDFLOW_WINO_BENCH")) {
        sd_backend *be = NULL;
        sd_error err;
        int threads = getenv("SDFLOW_WINO_THREADS") ? atoi(getenv("SDFLOW_WINO_THREADS")) : 2;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (be) bench(be);
        sd_backend_free(be);
        return sd_test_finish();
    }
    /* N, C, H, W, O, pad_h, pad_w, bias */
    static const shape_t shapes[] = {
        {1, 1, 3, 3, 1, 0, 0, 1},    /* one output pixel */
        {1, 3, 1, 1, 5, 1, 1, 0},    /* 1x1 image, padded */
        {2, 5, 2, 3, 7, 1, 1, 1},    /* smaller than a tile */
        {1, 7, 5, 9, 3, 2, 2, 1},    /* pad 2: 7x11 output */
        {3, 17, 13, 11, 19, 1, 1, 0}, /* odd sizes, partial tiles */
        {1, 33, 10, 7, 17, 0, 1, 1}, /* mixed padding */
        {2, 20, 64, 64, 24, 1, 1, 1}, /* 16 tiles per row: AVX-512 row stores */
        {1, 24, 70, 131, 9, 1, 1, 1}, /* 33 tiles per row: groups across rows, several blocks */
        {1, 96, 23, 200, 40, 1, 1, 0}, /* 50 tiles per row, right-edge masks */
        {1, 130, 12, 12, 48, 1, 1, 1}, /* larger C: bound grows with it */
        {3, 8, 80, 80, 8, 1, 1, 1},  /* 1200 tiles: two blocks, split inside an image's tile row */
        {1, 700, 6, 6, 700, 1, 1, 1}, /* U of 17.6 M floats: two output-channel slices */
        {2, 1200, 5, 7, 150, 1, 1, 1}, /* one block: input transformed once, slices of 96 + 54 */
    };
    for (int threads = 1; threads <= 2; threads++) {
        sd_backend *be = NULL;
        sd_error err;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (!be) break;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(be, threads, &shapes[i]);
        check_dispatch(be);
        CHECK(sd_backend_error(be) == NULL);
        sd_backend_free(be);
    }
    return sd_test_finish();
}
