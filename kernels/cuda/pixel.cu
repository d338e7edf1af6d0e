/* pixel.cu - the kernels of the image-to-image models: PReLU, pixel
 * (un)shuffle, nearest upsampling by an integer factor. Grid-stride loops
 * over the output, each thread computing its source index. */
#include "cuda_common.cuh"

__global__ void prelu_k(const float *x, const float *w, float *y, int64_t n, int64_t C,
                        int64_t plane, int shared) {
    SD_GRID_STRIDE(i, n) {
        float v = x[i], a = w[shared ? 0 : (i / plane) % C];
        y[i] = v >= 0.0f ? v : a * v;
    }
}

cudaError_t sd_cuda_prelu(cudaStream_t s, const float *x, const float *w, float *y, int64_t P,
                          int64_t C, int64_t plane, int shared) {
    int64_t n = P * plane;
    if (n <= 0) return cudaSuccess;
    prelu_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, w, y, n, C, plane, shared);
    return cudaGetLastError();
}

/* i runs over the big side [NC, h*r, w*r]; its small-side element is
 * [(nc*r + yy % r)*r + xx % r, yy / r, xx / r]. */
__global__ void shuffle_k(const float *x, float *y, int64_t n, int64_t h, int64_t w, int r,
                          int inverse) {
    int64_t W = w * r, H = h * r;
    SD_GRID_STRIDE(i, n) {
        int64_t xx = i % W, yy = (i / W) % H, nc = i / (W * H);
        int64_t k = (nc * r + yy % r) * r + xx % r;
        int64_t si = (k * h + yy / r) * w + xx / r;
        if (inverse) y[si] = x[i];
        else y[i] = x[si];
    }
}

cudaError_t sd_cuda_pixel_shuffle(cudaStream_t s, const float *x, float *y, int64_t NC,
                                  int64_t h, int64_t w, int r, int inverse) {
    int64_t n = NC * h * w * r * r;
    if (n <= 0) return cudaSuccess;
    shuffle_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, h, w, r, inverse);
    return cudaGetLastError();
}

__global__ void upnearest_k(const float *x, float *y, int64_t n, int64_t H, int64_t W, int f) {
    int64_t Wo = W * f, Ho = H * f;
    SD_GRID_STRIDE(i, n) {
        int64_t c = i % Wo, r = (i / Wo) % Ho, p = i / (Wo * Ho);
        y[i] = x[(p * H + r / f) * W + c / f];
    }
}

cudaError_t sd_cuda_upsample_nearest(cudaStream_t s, const float *x, float *y, int64_t P,
                                     int64_t H, int64_t W, int f) {
    int64_t n = P * H * f * W * f;
    if (n <= 0) return cudaSuccess;
    upnearest_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, H, W, f);
    return cudaGetLastError();
}
