/* gemm.c - GEMM through OpenBLAS, split over the pool; linear and matmul. */
#include "blas_threads.h"
#include "cpu.h"

#include <cblas.h>

void sd_cpu_gemm1(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* empty sum: C = beta * C, never reading C when beta is 0 */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : C[i * ldc + j] * beta;
        return;
    }
    sd_cpu_blas_one_thread(); /* OpenMP OpenBLAS would start a team here: blas_threads.h */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                (int)ldb, beta, C, (int)ldc);
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
