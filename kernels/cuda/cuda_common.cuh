/* cuda_common.cuh - launch helpers and reductions shared by the .cu files. */
#ifndef SD_CUDA_COMMON_CUH
#define SD_CUDA_COMMON_CUH

#include <stdint.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "cuda_kernels.h"

#define SD_THREADS 256

/* Blocks for a grid-stride loop over n items: enough to fill any current
 * GPU several times over, never above the grid limit. */
static inline unsigned sd_blocks(int64_t n) {
    int64_t b = (n + SD_THREADS - 1) / SD_THREADS;
    if (b < 1) b = 1;
    if (b > 65536) b = 65536;
    return (unsigned)b;
}

#define SD_GRID_STRIDE(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
         i += (int64_t)gridDim.x * blockDim.x)

__device__ __forceinline__ double sd_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sd_warp_sumf(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sd_warp_maxf(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. `sh` holds 32 doubles. */
__device__ __forceinline__ double sd_block_sum(double v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sd_warp_sum(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return sd_warp_sum(v);
}

__device__ __forceinline__ float sd_block_maxf(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sd_warp_maxf(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return sd_warp_maxf(v);
}

__device__ __forceinline__ float sd_gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
}

__device__ __forceinline__ float sd_silu(float v) { return v / (1.0f + expf(-v)); }

/* Element i of a tensor stored as `elem` (enum sd_cuda_elem), exactly as F32. */
__device__ __forceinline__ float sd_load_elem(const void *p, int64_t i, int elem) {
    switch (elem) {
    case SD_CUDA_ELEM_F16: return __half2float(((const __half *)p)[i]);
    case SD_CUDA_ELEM_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case SD_CUDA_ELEM_F8_E4M3: {
        unsigned b = ((const uint8_t *)p)[i];
        unsigned sign = (b & 0x80u) << 24, e = (b >> 3) & 15u, m = b & 7u;
        if (e == 15u && m == 7u) return __uint_as_float(sign | 0x7fc00000u);
        if (e == 0u) {
            float v = (float)m * 0.001953125f; /* m * 2^-9 */
            return sign ? -v : v;
        }
        return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
    }
    case SD_CUDA_ELEM_F8_E5M2: {
        __half_raw r;
        r.x = (unsigned short)(((const uint8_t *)p)[i] << 8);
        return __half2float(__half(r));
    }
    default: return ((const float *)p)[i];
    }
}

#endif
