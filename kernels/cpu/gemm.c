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
#include <stdlib.h>
#include <string.h>

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

/* SDFLOW_CPU_GEMM=openblas|onednn, read once (a process-wide setting like
 * SDFLOW_MAX_CPU_ISA): for comparing the two on one binary. An unknown
 * value or an engine the build lacks keeps the default. */
static int default_engine = SD_GEMM_OPENBLAS;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void) {
    const char *v = getenv("SDFLOW_CPU_GEMM");
    if (sd_cpu_gemm_has_engine(SD_GEMM_ONEDNN)) default_engine = SD_GEMM_ONEDNN;
    if (v && !strcmp(v, "openblas")) default_engine = SD_GEMM_OPENBLAS;
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
} gemm_job;

static void gemm_task(void *ctx, int64_t t, int thread) {
    const gemm_job *g = ctx;
    int64_t lo = t * g->chunk;
    if (g->split_m) {
        int64_t m = g->M - lo < g->chunk ? g->M - lo : g->chunk;
        const float *A = g->ta ? g->A + lo : g->A + lo * g->lda;
        sd_cpu_gemm1(g->ta, g->tb, m, g->N, g->K, g->alpha, A, g->lda, g->B, g->ldb, g->beta,
                     g->C + lo * g->ldc, g->ldc);
    } else {
        int64_t n = g->N - lo < g->chunk ? g->N - lo : g->chunk;
        const float *B = g->tb ? g->B + lo * g->ldb : g->B + lo;
        sd_cpu_gemm1(g->ta, g->tb, g->M, n, g->K, g->alpha, g->A, g->lda, B, g->ldb, g->beta,
                     g->C + lo, g->ldc);
    }
}

void sd_cpu_gemm(sd_pool *pool, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float beta, float *C, int64_t ldc) {
    int nt = sd_pool_threads(pool);
    /* Below ~2 MFLOP the fork/join costs more than it saves. */
    if (nt == 1 || (double)M * N * K < 1e6) {
        sd_cpu_gemm1(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    gemm_job g = {trans_a, trans_b, M, N, K, 0, M >= N, alpha, beta, A, B, C, lda, ldb, ldc};
    int64_t n = g.split_m ? M : N;
    /* multiples of 16 keep BLAS micro-kernels full */
    int64_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + 15) / 16 * 16;
    g.chunk = chunk;
    sd_pool_run(pool, sd_cpu_chunks(n, chunk), gemm_task, &g);
}

sd_status sd_cpu_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b) {
    int64_t in = w->shape[1], outf = w->shape[0];
    int64_t rows = sd_bt_numel(x) / (in ? in : 1);
    if (in == 0) rows = sd_bt_numel(out) / (outf ? outf : 1);
    float *y = sd_cpu_f32(out);
    float beta = 0.0f;
    if (b) {
        const float *bb = sd_cpu_f32(b);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < outf; o++) y[r * outf + o] = bb[o];
        beta = 1.0f;
    }
    sd_cpu_gemm(sd_cpu_pool(be), 0, 1, rows, outf, in, 1.0f, sd_cpu_f32(x), in, sd_cpu_f32(w), in,
                beta, y, outf);
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
