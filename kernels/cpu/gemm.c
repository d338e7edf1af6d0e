/* gemm.c - GEMM through oneDNN's sgemm (OpenBLAS without oneDNN), split
 * over the pool; linear and matmul.
 *
 * Why oneDNN's sgemm when the build has it: on the shapes the UNet's f32
 * step runs it is 5-45% faster per CPU second than OpenBLAS 0.3.21's
 * SkylakeX kernels (Xeon Cascade Lake, one thread, CPU time; best of 4;
 * docs/performance.md "oneDNN's sgemm for the f32 GEMMs"): Winograd's
 * 320x256x320 60 -> 75 GFLOP/s and 640x128x640 57 -> 73, im2col's
 * 640x256x11520 87 -> 111 and 640x64x11520 69 -> 99, linears
 * 4096x1280 -> 320 93 -> 113, attention's 256x80x1024 67 -> 79. Both
 * libraries sum in their own order, so results differ by rounding only.
 * oneDNN's threading is OpenMP: each call runs with the calling thread's
 * OpenMP thread count set to 1 (restored after), since our pool already
 * runs one GEMM per thread and a nested team would oversubscribe the cores.
 */
#include "blas_threads.h"
#include "cpu.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef SDFLOW_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

static void gemm_openblas(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
    sd_cpu_blas_one_thread(); /* OpenMP OpenBLAS would start a team here: blas_threads.h */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                (int)ldb, beta, C, (int)ldc);
}

int sd_cpu_gemm_has_engine(int engine) {
#ifdef SDFLOW_HAVE_DNNL
    return engine == SD_GEMM_OPENBLAS || engine == SD_GEMM_ONEDNN;
#else
    return engine == SD_GEMM_OPENBLAS;
#endif
}

void sd_cpu_gemm1_engine(int engine, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* empty sum: C = beta * C, never reading C when beta is 0 */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : C[i * ldc + j] * beta;
        return;
    }
#ifdef SDFLOW_HAVE_DNNL
    if (engine == SD_GEMM_ONEDNN) {
        int prev = omp_get_max_threads();
        if (prev != 1) omp_set_num_threads(1);
        dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                     lda, B, ldb, beta, C, ldc);
        if (prev != 1) omp_set_num_threads(prev);
        /* oneDNN checks its arguments and may fail for memory; OpenBLAS
         * computes the same product then (C is untouched on failure) */
        if (s == dnnl_success) return;
    }
#endif
    (void)engine;
    gemm_openblas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* SDFLOW_CPU_GEMM=auto|onednn|openblas, read once (a process-wide setting
 * like SDFLOW_MAX_CPU_ISA): for comparing the two on one binary. A value we
 * cannot honour (unknown, or onednn in a build without it) is kept as an
 * error for sd_cpu_gemm_setup, so that a comparison never silently runs the
 * engine it did not ask for. */
static int default_engine = SD_GEMM_OPENBLAS;
static char engine_err[160];
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void) {
    const char *v = getenv("SDFLOW_CPU_GEMM");
    if (sd_cpu_gemm_has_engine(SD_GEMM_ONEDNN)) default_engine = SD_GEMM_ONEDNN;
    if (!v || !*v || !strcasecmp(v, "auto")) return;
    if (!strcasecmp(v, "openblas"))
        default_engine = SD_GEMM_OPENBLAS;
    else if (strcasecmp(v, "onednn"))
        snprintf(engine_err, sizeof engine_err,
                 "SDFLOW_CPU_GEMM=%.40s: expected auto, onednn or openblas", v);
    else if (!sd_cpu_gemm_has_engine(SD_GEMM_ONEDNN))
        snprintf(engine_err, sizeof engine_err,
                 "SDFLOW_CPU_GEMM=onednn: this build has no oneDNN (reconfigure with "
                 "-DSDFLOW_DNNL=ON and libdnnl-dev installed)");
}

int sd_cpu_gemm_engine(void) {
    pthread_once(&engine_once, engine_init);
    return default_engine;
}

sd_status sd_cpu_gemm_setup(sd_error *err) {
    pthread_once(&engine_once, engine_init);
    return engine_err[0] ? sd_error_set(err, SD_ERR_INVALID, "%s", engine_err) : SD_OK;
}

void sd_cpu_gemm1(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
    pthread_once(&engine_once, engine_init);
    const int engine = default_engine;
    sd_cpu_gemm1_engine(engine, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

typedef struct {
    int ta, tb;
    int64_t M, N, K, chunk;
    int split_m;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t lda, ldb, ldc;
    const float *bias_n, *bias_m; /* sd_cpu_gemm_bias; NULL for none */
} gemm_job;

/* C[m0..m0+m) x [n0..n0+n) = the bias (per column or per row), so the GEMM
 * accumulates onto it: filled by the task that computes those elements,
 * on its own thread and just before its GEMM reads them. */
static void bias_fill(const gemm_job *g, int64_t m0, int64_t m, int64_t n0, int64_t n) {
    for (int64_t i = m0; i < m0 + m; i++) {
        float *c = g->C + i * g->ldc;
        if (g->bias_n) memcpy(c + n0, g->bias_n + n0, (size_t)n * sizeof *c);
        else for (int64_t k = n0; k < n0 + n; k++) c[k] = g->bias_m[i];
    }
}

static void gemm_task(void *ctx, int64_t t, int thread) {
    const gemm_job *g = ctx;
    int64_t lo = t * g->chunk;
    if (g->split_m) {
        int64_t m = g->M - lo < g->chunk ? g->M - lo : g->chunk;
        const float *A = g->ta ? g->A + lo : g->A + lo * g->lda;
        if (g->bias_n || g->bias_m) bias_fill(g, lo, m, 0, g->N);
        sd_cpu_gemm1(g->ta, g->tb, m, g->N, g->K, g->alpha, A, g->lda, g->B, g->ldb, g->beta,
                     g->C + lo * g->ldc, g->ldc);
    } else {
        int64_t n = g->N - lo < g->chunk ? g->N - lo : g->chunk;
        const float *B = g->tb ? g->B + lo * g->ldb : g->B + lo;
        if (g->bias_n || g->bias_m) bias_fill(g, 0, g->M, lo, n);
        sd_cpu_gemm1(g->ta, g->tb, g->M, n, g->K, g->alpha, g->A, g->lda, B, g->ldb, g->beta,
                     g->C + lo, g->ldc);
    }
}

void sd_cpu_gemm_bias(sd_pool *pool, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc, const float *bias_n,
                      const float *bias_m) {
    int nt = sd_pool_threads(pool);
    gemm_job g = {trans_a, trans_b, M, N, K, 0, M >= N, alpha, beta, A, B, C, lda, ldb, ldc,
                  bias_n, bias_m};
    if (bias_n || bias_m) g.beta = 1.0f;
    /* Below ~2 MFLOP the fork/join costs more than it saves. */
    if (nt == 1 || (double)M * N * K < 1e6) {
        if (M > 0 && N > 0 && (bias_n || bias_m)) bias_fill(&g, 0, M, 0, N);
        sd_cpu_gemm1(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, g.beta, C, ldc);
        return;
    }
    int64_t n = g.split_m ? M : N;
    /* multiples of 16 keep BLAS micro-kernels full */
    int64_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + 15) / 16 * 16;
    g.chunk = chunk;
    sd_pool_run(pool, sd_cpu_chunks(n, chunk), gemm_task, &g);
}

void sd_cpu_gemm(sd_pool *pool, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float beta, float *C, int64_t ldc) {
    sd_cpu_gemm_bias(pool, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL,
                     NULL);
}

/* Linears with few features both ways on many rows run the weight
 * transposed once per call (a plain B instead of a transposed one): oneDNN
 * 2.6's sgemm runs 4096 x 320 x 320 at 127-130 GFLOP per CPU s that way
 * against 102-103 with B transposed, 1024 x 640 x 640 at 117-118 against
 * 96-97 (one thread, Cascade Lake, min of 7-15; docs/performance.md); from
 * 1280 features either way the two are even or the transposed B wins, and
 * below ~1024 rows the copy would cost a large part of the gain. OpenBLAS
 * runs both alike. The copy is at most 1.6 MB, made per call. */
#define TLIN_MAX 640
#define TLIN_MIN_ROWS 1024

float *sd_cpu_transposed(const float *src, int64_t rows, int64_t cols) {
    float *dst = sd_cpu_alloc((size_t)(rows * cols) * sizeof(float));
    if (!dst) return NULL;
    for (int64_t r0 = 0; r0 < rows; r0 += 16) /* 16x16 tiles: both sides stay in cache */
        for (int64_t c0 = 0; c0 < cols; c0 += 16)
            for (int64_t r = r0; r < r0 + 16 && r < rows; r++)
                for (int64_t c = c0; c < c0 + 16 && c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    return dst;
}

sd_status sd_cpu_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b) {
    int64_t in = w->shape[1], outf = w->shape[0];
    int64_t rows = sd_bt_numel(x) / (in ? in : 1);
    if (in == 0) rows = sd_bt_numel(out) / (outf ? outf : 1);
    if (in > 0 && in <= TLIN_MAX && outf <= TLIN_MAX && rows >= TLIN_MIN_ROWS) {
        float *wt = sd_cpu_transposed(sd_cpu_f32(w), outf, in); /* [in][out] */
        if (!wt)
            return sd_backend_fail(be, SD_ERR_NOMEM, "linear: out of memory (%zu bytes)",
                                   (size_t)(in * outf) * sizeof(float));
        sd_cpu_gemm_bias(sd_cpu_pool(be), 0, 0, rows, outf, in, 1.0f, sd_cpu_f32(x), in, wt,
                         outf, 0.0f, sd_cpu_f32(out), outf, b ? sd_cpu_f32(b) : NULL, NULL);
        free(wt);
        return SD_OK;
    }
    /* the bias is written by the pool's tasks, each into its own part of y
     * just before its GEMM: filled here on the calling thread it was a
     * single-threaded pass (with the page faults of a fresh 84 MB GEGLU
     * output) while the other threads waited */
    sd_cpu_gemm_bias(sd_cpu_pool(be), 0, 1, rows, outf, in, 1.0f, sd_cpu_f32(x), in, sd_cpu_f32(w),
                     in, 0.0f, sd_cpu_f32(out), outf, b ? sd_cpu_f32(b) : NULL, NULL);
    return SD_OK;
}

sd_status sd_cpu_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                        float alpha) {
    int64_t B = a->ndim == 3 ? a->shape[0] : 1;
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t N = out->shape[out->ndim - 1];
    int64_t Bb = b->ndim == 3 ? b->shape[0] : 1;
    int64_t bstride = Bb == 1 ? 0 : K * N;
    for (int64_t i = 0; i < B; i++)
        sd_cpu_gemm(sd_cpu_pool(be), 0, trans_b, M, N, K, alpha, sd_cpu_f32(a) + i * M * K, K,
                    sd_cpu_f32(b) + i * bstride, trans_b ? K : N, 0.0f,
                    sd_cpu_f32(out) + i * M * N, N);
    return SD_OK;
}
