/* cuda_blas.c - linear and batched matmul on cuBLAS.
 *
 * Row-major Y = X W^T is column-major Y^T = W X^T, so W goes in as op(A) =
 * transposed and X as B, with no copies. Accumulation is F32 in every mode;
 * the precision mode picks how the inputs may be rounded on the tensor
 * cores: F32 = plain F32 (no TF32), BF16/F16 = cuBLAS's FAST_16BF/FAST_16F
 * compute types, which round the F32 inputs to 16 bits inside the GEMM.
 * Weights kept narrow (F16/BF16/fp8) arrive here widened to F32 by
 * backend.c (the backend's to_f32), so every input is F32. */
#include "kernels/cuda/cuda_impl.h"

#include <limits.h>

static cublasComputeType_t compute_for(const sd_backend *be) {
    switch (be->precision) {
    case SD_PREC_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case SD_PREC_F16: return CUBLAS_COMPUTE_32F_FAST_16F;
    default: return CUBLAS_COMPUTE_32F;
    }
}

static int fits_int(int64_t a, int64_t b, int64_t c) {
    return a <= INT_MAX && b <= INT_MAX && c <= INT_MAX;
}

sd_status sd_cuda_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b) {
    sd_cuda *c = sd_cuda_of(be);
    int64_t in = w->shape[1], outf = w->shape[0];
    int64_t rows = in ? sd_bt_numel(x) / in : sd_bt_numel(out) / (outf ? outf : 1);
    float *y = sd_cuda_f32(out);
    if (rows == 0 || outf == 0) return SD_OK;
    if (!fits_int(rows, outf, in))
        return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                               "cuda linear: %lld x %lld x %lld exceeds cuBLAS's int dimensions",
                               (long long)rows, (long long)in, (long long)outf);
    float beta = 0.0f, alpha = 1.0f;
    sd_status rc;
    if (b) {
        rc = sd_cuda_check(be, sd_cuda_fill_rows(c->stream, y, sd_cuda_f32(b), rows, outf),
                           "linear", "bias fill");
        if (rc != SD_OK) return rc;
        beta = 1.0f;
    } else if (in == 0) {
        return sd_cuda_check(be, cudaMemsetAsync(y, 0, out->nbytes, c->stream), "linear",
                             "zero fill");
    }
    if (in == 0) return SD_OK;

    return sd_cuda_check_blas(be,
                              cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)outf, (int)rows,
                                           (int)in, &alpha, w->data, CUDA_R_32F, (int)in, x->data,
                                           CUDA_R_32F, (int)in, &beta, y, CUDA_R_32F, (int)outf,
                                           compute_for(be), CUBLAS_GEMM_DEFAULT),
                              "linear", "cublasGemmEx");
}

/* out^T (N x M, column-major) = op(b)^T-view x a^T-view per batch; b's batch
 * stride is 0 when it is shared by every batch. */
sd_status sd_cuda_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                         float alpha) {
    sd_cuda *c = sd_cuda_of(be);
    int64_t B = a->ndim == 3 ? a->shape[0] : 1;
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t N = out->shape[out->ndim - 1];
    int64_t Bb = b->ndim == 3 ? b->shape[0] : 1;
    if (B == 0 || M == 0 || N == 0) return SD_OK;
    if (K == 0)
        return sd_cuda_check(be, cudaMemsetAsync(out->data, 0, out->nbytes, c->stream), "matmul",
                             "zero fill");
    if (!fits_int(M, N, K) || B > INT_MAX)
        return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                               "cuda matmul: %lld x [%lld x %lld x %lld] exceeds cuBLAS's int "
                               "dimensions",
                               (long long)B, (long long)M, (long long)K, (long long)N);
    float beta = 0.0f;
    long long sb = Bb == 1 ? 0 : (long long)(K * N);
    return sd_cuda_check_blas(
        be,
        cublasGemmStridedBatchedEx(c->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                                   (int)N, (int)M, (int)K, &alpha, b->data, CUDA_R_32F,
                                   trans_b ? (int)K : (int)N, sb, a->data, CUDA_R_32F, (int)K,
                                   (long long)(M * K), &beta, out->data, CUDA_R_32F, (int)N,
                                   (long long)(M * N), (int)B, compute_for(be),
                                   CUBLAS_GEMM_DEFAULT),
        "matmul", "cublasGemmStridedBatchedEx");
}
