/* dequant.cu - GGUF block-quantized weights widened to F32 on the GPU, the
 * same arithmetic as core/quant.c (ComfyUI-GGUF's dequant.py): every
 * product and sum rounded to the math type (float16 with __float2half_rn,
 * bfloat16 with __float2bfloat16_rn, or float32), never fused (__fmul_rn,
 * __fadd_rn). One thread per element; each reads its block's scales. The
 * block layouts are documented in core/quant.h and core/quant.c. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_common.cuh"

__device__ __forceinline__ float rnd(float x, int m) {
    if (m == 0) return __half2float(__float2half_rn(x));
    if (m == 2) return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

__device__ __forceinline__ float mul(float a, float b, int m) { return rnd(__fmul_rn(a, b), m); }
__device__ __forceinline__ float add(float a, float b, int m) { return rnd(__fadd_rn(a, b), m); }

__device__ __forceinline__ float f16at(const uint8_t *p, int m) {
    __half_raw r;
    r.x = (unsigned short)(p[0] | p[1] << 8);
    return rnd(__half2float(__half(r)), m);
}

__device__ __forceinline__ int nib32(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

__device__ __forceinline__ unsigned le32(const uint8_t *p) {
    return (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
}

__constant__ int8_t kv_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

__device__ __forceinline__ void scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Element i of block b of type t in math m. */
__device__ float element(const uint8_t *b, int i, int t, int m) {
    switch (t) {
    case SD_CUDA_Q4_0: return mul(f16at(b, m), (float)(nib32(b + 2, i) - 8), m);
    case SD_CUDA_Q4_1: return add(mul(f16at(b, m), (float)nib32(b + 4, i), m), f16at(b + 2, m), m);
    case SD_CUDA_Q5_0: {
        int q = (nib32(b + 6, i) | (int)((le32(b + 2) >> i) & 1u) << 4) - 16;
        return mul(f16at(b, m), (float)q, m);
    }
    case SD_CUDA_Q5_1: {
        int q = nib32(b + 8, i) | (int)((le32(b + 4) >> i) & 1u) << 4;
        return add(mul(f16at(b, m), (float)q, m), f16at(b + 2, m), m);
    }
    case SD_CUDA_Q8_0: return mul(f16at(b, m), (float)(int8_t)b[2 + i], m);
    case SD_CUDA_IQ4_NL: return mul(f16at(b, m), (float)kv_iq4nl[nib32(b + 2, i)], m);
    case SD_CUDA_Q2_K: {
        int g = i / 16, sc = b[g];
        float dl = mul(f16at(b + 80, m), (float)(sc & 15), m), ml = mul(f16at(b + 82, m), (float)(sc >> 4), m);
        int q = (b[16 + (i / 128) * 32 + i % 32] >> (2 * ((i / 32) % 4))) & 3;
        return rnd(__fsub_rn(mul(dl, (float)q, m), ml), m);
    }
    case SD_CUDA_Q3_K: {
        const uint8_t *s = b + 96;
        int g = i / 16;
        int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        float dl = mul(f16at(b + 108, m), (float)((lo | hi << 4) - 32), m);
        int ql = (b[32 + (i / 128) * 32 + i % 32] >> (2 * ((i / 32) % 4))) & 3;
        int h = (b[i % 32] >> (i / 32)) & 1;
        return mul(dl, (float)(ql - 4 * (1 - h)), m);
    }
    case SD_CUDA_Q4_K:
    case SD_CUDA_Q5_K: {
        int j = i / 32, l = i % 32, sc, mn;
        scale_min(b + 4, j, &sc, &mn);
        float dl = mul(f16at(b, m), (float)sc, m), ml = mul(f16at(b + 2, m), (float)mn, m);
        int q;
        if (t == SD_CUDA_Q4_K) q = (b[16 + (j / 2) * 32 + l] >> (4 * (j % 2))) & 15;
        else q = ((b[48 + (j / 2) * 32 + l] >> (4 * (j % 2))) & 15) | ((b[16 + l] >> j) & 1) << 4;
        return rnd(__fsub_rn(mul(dl, (float)q, m), ml), m);
    }
    case SD_CUDA_Q6_K: {
        float ds = mul(f16at(b + 208, m), (float)(int8_t)b[192 + i / 16], m);
        int lo = (b[(i / 128) * 64 + i % 64] >> (4 * ((i / 64) % 2))) & 15;
        int hi = (b[128 + (i / 128) * 32 + i % 32] >> (2 * ((i / 32) % 4))) & 3;
        return mul(ds, (float)((lo | hi << 4) - 32), m);
    }
    case SD_CUDA_IQ4_XS: {
        int j = i / 32, l = i % 32;
        unsigned sh = (unsigned)(b[2] | b[3] << 8);
        int s = (((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (int)((sh >> (2 * j)) & 3u) << 4) - 32;
        float dl = mul(f16at(b, m), (float)s, m);
        return mul(dl, (float)kv_iq4nl[nib32(b + 8 + 16 * j, l)], m);
    }
    default: return 0.0f;
    }
}

__global__ void dequant_k(const uint8_t *x, float *y, int64_t n, int t, int m, int blk, int bs) {
    SD_GRID_STRIDE(e, n) {
        int64_t b = e / blk;
        y[e] = element(x + b * bs, (int)(e - b * blk), t, m);
    }
}

cudaError_t sd_cuda_dequant(cudaStream_t s, const void *x, float *y, int64_t n, int type, int math, int block,
                            int block_bytes) {
    if (n <= 0) return cudaSuccess;
    dequant_k<<<sd_blocks(n), SD_THREADS, 0, s>>>((const uint8_t *)x, y, n, type, math, block, block_bytes);
    return cudaGetLastError();
}
