/* layout.cu - data movement kernels: pad, nearest x2 upsampling, permute,
 * embedding gather. (Concat, slice and copy are cudaMemcpy2D/cudaMemcpy on
 * the C side.) */
#include "cuda_common.cuh"

__global__ void pad2d_k(const float *x, float *y, int64_t n, int64_t H, int64_t W, int64_t Ho,
                        int64_t Wo, int left, int top) {
    SD_GRID_STRIDE(i, n) {
        int64_t c = i % W, r = (i / W) % H, p = i / (W * H);
        y[(p * Ho + r + top) * Wo + c + left] = x[i];
    }
}

cudaError_t sd_cuda_pad2d(cudaStream_t s, const float *x, float *y, int64_t P, int64_t H,
                          int64_t W, int64_t Ho, int64_t Wo, int left, int top) {
    int64_t n = P * H * W;
    if (n <= 0) return cudaSuccess;
    pad2d_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, H, W, Ho, Wo, left, top);
    return cudaGetLastError();
}

__global__ void up2x_k(const float *x, float *y, int64_t n, int64_t H, int64_t W) {
    int64_t Wo = 2 * W, Ho = 2 * H;
    SD_GRID_STRIDE(i, n) {
        int64_t c = i % Wo, r = (i / Wo) % Ho, p = i / (Wo * Ho);
        y[i] = x[(p * H + r / 2) * W + c / 2];
    }
}

cudaError_t sd_cuda_upsample2x(cudaStream_t s, const float *x, float *y, int64_t P, int64_t H,
                               int64_t W) {
    int64_t n = P * 4 * H * W;
    if (n <= 0) return cudaSuccess;
    up2x_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, H, W);
    return cudaGetLastError();
}

__global__ void permute_k(const float *x, float *y, int64_t n, sd_cuda_dims od) {
    SD_GRID_STRIDE(i, n) {
        int64_t off = 0, rem = i;
        for (int d = od.ndim - 1; d >= 0; d--) {
            off += (rem % od.shape[d]) * od.stride[d];
            rem /= od.shape[d];
        }
        y[i] = x[off];
    }
}

cudaError_t sd_cuda_permute(cudaStream_t s, const float *x, float *y, int64_t n, sd_cuda_dims od) {
    if (n <= 0) return cudaSuccess;
    permute_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, od);
    return cudaGetLastError();
}

__global__ void embedding_k(const void *table, int elem, const void *ids, int ids64, float *y,
                            int64_t n, int64_t C) {
    SD_GRID_STRIDE(i, n) {
        int64_t r = i / C, c = i - r * C;
        int64_t id = ids64 ? ((const int64_t *)ids)[r] : ((const int32_t *)ids)[r];
        y[i] = sd_load_elem(table, id * C + c, elem);
    }
}

cudaError_t sd_cuda_embedding(cudaStream_t s, const void *table, int elem, const void *ids,
                              int ids64, float *y, int64_t n, int64_t C) {
    int64_t total = n * C;
    if (total <= 0) return cudaSuccess;
    embedding_k<<<sd_blocks(total), SD_THREADS, 0, s>>>(table, elem, ids, ids64, y, total, C);
    return cudaGetLastError();
}
