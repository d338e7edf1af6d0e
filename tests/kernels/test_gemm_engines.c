/* test_gemm_engines.c - every GEMM library the CPU backend can call
 * (kernels/cpu/gemm.c: oneDNN's sgemm when built with it, OpenBLAS) against
 * a double-precision reference: both transposes, leading dimensions wider
 * than the matrix, alpha and beta (beta 0 must not read C: it starts NaN),
 * K = 0, and the shapes the UNet step runs (Winograd's, attention's, a
 * linear's). Under SDFLOW_MAX_CPU_ISA (ctest runs it capped at avx2 and
 * scalar too) the capped kernels of each library are the ones checked.
 *
 * Bound per element: 1e-5 * sum_k |alpha a_ik b_kj| + 1e-5 |beta c_ij|:
 * f32 sums in any order stay far inside it (K * 2^-24 relative is the
 * worst case of a serial sum), while a wrong operand, transpose or stride
 * breaks it by orders of magnitude. sd_cpu_gemm_bias (the bias written by
 * the pool's tasks) is checked the same way on 1 and 3 threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/threadpool.h"
#include "testutil.h"

static unsigned seed = 12345u;
static float rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static const char *engine_name(int e) { return e == SD_GEMM_ONEDNN ? "onednn" : "openblas"; }

static void check_case(int engine, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad,
                       float alpha, float beta) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    float *A = malloc(sizeof(float) * (size_t)(ar * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(br * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    float *C0 = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    if (!A || !B || !C || !C0) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < ar * lda; i++) A[i] = rnd();
    for (int64_t i = 0; i < br * ldb; i++) B[i] = rnd();
    for (int64_t i = 0; i < M * ldc; i++) C0[i] = beta == 0.0f ? NAN : rnd();
    memcpy(C, C0, sizeof(float) * (size_t)(M * ldc));
    sd_cpu_gemm1_engine(engine, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst = 0.0;
    int bad = 0, pad_ok = 1;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            double ref = alpha * s, bound = 1e-5 * fabs(alpha) * mag;
            if (beta != 0.0f) {
                ref += (double)beta * C0[i * ldc + j];
                bound += 1e-5 * fabs((double)beta * C0[i * ldc + j]);
            }
            double err = fabs((double)C[i * ldc + j] - ref);
            if (!(err <= bound + 1e-30)) bad++;
            if (err > worst || err != err) worst = err;
        }
        /* the columns between N and ldc are not C's: left as they were */
        for (int64_t j = N; j < ldc; j++)
            pad_ok &= memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) == 0;
    }
    CHECK_MSG(bad == 0 && pad_ok,
              "%s ta=%d tb=%d M=%lld N=%lld K=%lld pad=%lld alpha=%g beta=%g: %d elements off "
              "(worst abs error %g), padding %s",
              engine_name(engine), ta, tb, (long long)M, (long long)N, (long long)K, (long long)pad,
              alpha, beta, bad, worst, pad_ok ? "kept" : "overwritten");
done:
    free(A), free(B), free(C), free(C0);
}

/* sd_cpu_gemm_bias on a pool of `threads`: C = A B^T (tb) or A B, plus a
 * bias per column or per row, against the double reference; big enough
 * (M*N*K >= 1e6) that the pool splits along M (M >= N) or N. */
static void check_bias(int threads, int64_t M, int64_t N, int64_t K, int tb, int per_row) {
    sd_pool *pool = sd_pool_new(threads);
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    float *bias = malloc(sizeof(float) * (size_t)(per_row ? M : N));
    if (!pool || !A || !B || !C || !bias) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < M * K; i++) A[i] = rnd();
    for (int64_t i = 0; i < K * N; i++) B[i] = rnd();
    for (int64_t i = 0; i < (per_row ? M : N); i++) bias[i] = 4.0f * rnd();
    for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* every element must be written */
    sd_cpu_gemm_bias(pool, 0, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, C, N,
                     per_row ? NULL : bias, per_row ? bias : NULL);
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = per_row ? bias[i] : bias[j], mag = fabs(s);
            for (int64_t k = 0; k < K; k++) {
                double p = (double)A[i * K + k] * (tb ? B[j * K + k] : B[k * N + j]);
                s += p;
                mag += fabs(p);
            }
            if (!(fabs((double)C[i * N + j] - s) <= 1e-5 * mag)) bad++;
        }
    CHECK_MSG(bad == 0, "gemm_bias threads=%d M=%lld N=%lld K=%lld tb=%d per_row=%d: %d off",
              threads, (long long)M, (long long)N, (long long)K, tb, per_row, bad);
done:
    sd_pool_free(pool);
    free(A), free(B), free(C), free(bias);
}

int main(void) {
    sd_error err = {0};
    CHECK_OK(sd_cpu_isa_setup(&err), &err);
    int engines = 0;
    for (int e = SD_GEMM_OPENBLAS; e <= SD_GEMM_ONEDNN; e++) {
        if (!sd_cpu_gemm_has_engine(e)) continue;
        engines++;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_case(e, ta, tb, 17, 33, 45, 0, 1.0f, 0.0f);
                check_case(e, ta, tb, 31, 20, 64, 3, 0.5f, 1.0f);
                check_case(e, ta, tb, 1, 7, 300, 5, -2.0f, 0.25f);
                check_case(e, ta, tb, 9, 1, 3, 1, 1.0f, 0.0f);
            }
        check_case(e, 0, 0, 5, 6, 0, 2, 1.0f, 0.0f); /* empty sum, beta 0: zeros */
        check_case(e, 0, 1, 4, 3, 0, 0, 1.0f, 0.5f); /* empty sum: beta * C */
        /* the step's shapes, scaled down where the reference would be slow */
        check_case(e, 0, 0, 64, 48, 320, 0, 1.0f, 0.0f);    /* Winograd [O x C] x [C x T] */
        check_case(e, 0, 1, 64, 96, 40, 280, 0.158f, 0.0f); /* attention Q K^T, heads interleaved */
        check_case(e, 0, 0, 64, 40, 96, 280, 1.0f, 1.0f);   /* attention P V accumulated */
        check_case(e, 0, 1, 96, 80, 160, 0, 1.0f, 1.0f);    /* linear x W^T + bias in C */
    }
    CHECK(engines >= 1);
    for (int threads = 1; threads <= 3; threads += 2) {
        check_bias(threads, 300, 70, 64, 1, 0); /* linear: split along M */
        check_bias(threads, 70, 300, 64, 0, 1); /* 1x1 conv: split along N */
        check_bias(threads, 300, 70, 64, 0, 1);
        check_bias(threads, 70, 300, 64, 1, 0);
        check_bias(threads, 5, 6, 7, 1, 0);     /* below the pool's threshold */
    }
    return sd_test_finish();
}
