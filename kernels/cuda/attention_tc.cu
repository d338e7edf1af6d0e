/* attention_tc.cu - the kernels around the tensor-core attention's two
 * cuBLAS GEMMs (cuda_attn.c, layout in attn_plan.h): packing q/k/v to 16
 * bits per key/value head, the softmax between the GEMMs (F32 statistics,
 * 16-bit probabilities out), and the scatter of the output rows. */
#include "cuda_common.cuh"

__device__ __forceinline__ void store16(void *p, int64_t i, float v, int elem) {
    if (elem == SD_CUDA_ELEM_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((__half *)p)[i] = __float2half_rn(v);
}

/* y[n][j][l][g][d] = x[n][l][(j*group + g)*D + d] */
__global__ void attn_pack_k(const float *x, void *y, int elem, int64_t L, int64_t Hkv,
                            int64_t group, int64_t D, int64_t n_total) {
    SD_GRID_STRIDE(i, n_total) {
        int64_t d = i % D, t = i / D;
        int64_t g = t % group;
        t /= group;
        int64_t l = t % L;
        t /= L;
        int64_t j = t % Hkv, n = t / Hkv;
        store16(y, i, x[(n * L + l) * Hkv * group * D + (j * group + g) * D + d], elem);
    }
}

cudaError_t sd_cuda_attn_pack(cudaStream_t s, const float *x, void *y, int elem, int64_t N,
                              int64_t L, int64_t Hkv, int64_t group, int64_t D) {
    int64_t n = N * L * Hkv * group * D;
    if (n == 0) return cudaSuccess;
    attn_pack_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, elem, L, Hkv, group, D, n);
    return cudaGetLastError();
}

__device__ __forceinline__ float block_sumf(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sd_warp_sumf(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return sd_warp_sumf(v);
}

/* One block per score row r of the chunk: r = (b * qc + qi) * group + g,
 * b = n * Hkv + j, query q0 + qi, head j * group + g. */
__global__ void attn_softmax_k(const float *S, void *P, int elem, int64_t Lk, int64_t qc,
                               int64_t group, int64_t Hkv, int64_t q0, int causal,
                               const float *bias, int64_t bs0, int64_t bs1, int64_t bs2) {
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    int64_t g = r % group, t = r / group;
    int64_t qi = t % qc, b = t / qc;
    int64_t n = b / Hkv, h = (b % Hkv) * group + g, q = q0 + qi;
    const float *sr = S + r * Lk;
    const float *br = bias ? bias + n * bs0 + h * bs1 + q * bs2 : NULL;
    int64_t kend = causal && q + 1 < Lk ? q + 1 : Lk; /* keys after the query are masked */
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < kend; k += blockDim.x)
        m = fmaxf(m, br ? sr[k] + br[k] : sr[k]);
    m = sd_block_maxf(m, sh);
    if (m == -INFINITY) { /* no live key: zeros, as on the CPU */
        for (int64_t k = threadIdx.x; k < Lk; k += blockDim.x) store16(P, r * Lk + k, 0.0f, elem);
        return;
    }
    float sum = 0.0f;
    for (int64_t k = threadIdx.x; k < kend; k += blockDim.x)
        sum += expf((br ? sr[k] + br[k] : sr[k]) - m);
    float inv = 1.0f / block_sumf(sum, sh);
    for (int64_t k = threadIdx.x; k < Lk; k += blockDim.x) {
        float p = k < kend ? expf((br ? sr[k] + br[k] : sr[k]) - m) * inv : 0.0f;
        store16(P, r * Lk + k, p, elem);
    }
}

cudaError_t sd_cuda_attn_softmax(cudaStream_t s, const float *S, void *P, int elem, int64_t rows,
                                 int64_t Lk, int64_t qc, int64_t group, int64_t Hkv, int64_t q0,
                                 int causal, const float *bias, const int64_t *bias_stride) {
    if (rows == 0) return cudaSuccess;
    if (rows > 0x7fffffff) return cudaErrorInvalidValue;
    attn_softmax_k<<<(unsigned)rows, SD_THREADS, 0, s>>>(
        S, P, elem, Lk, qc, group, Hkv, q0, causal, bias, bias ? bias_stride[0] : 0,
        bias ? bias_stride[1] : 0, bias ? bias_stride[2] : 0);
    return cudaGetLastError();
}

/* out[n][q0 + qi][(j*group + g)*D + d] = O[b][qi][g][d], b = n*Hkv + j */
__global__ void attn_scatter_k(const float *O, float *out, int64_t qc, int64_t group, int64_t D,
                               int64_t Hkv, int64_t Lq, int64_t q0, int64_t n_total) {
    SD_GRID_STRIDE(i, n_total) {
        int64_t d = i % D, t = i / D;
        int64_t g = t % group;
        t /= group;
        int64_t qi = t % qc, b = t / qc;
        int64_t n = b / Hkv, j = b % Hkv;
        out[(n * Lq + q0 + qi) * Hkv * group * D + (j * group + g) * D + d] = O[i];
    }
}

cudaError_t sd_cuda_attn_scatter(cudaStream_t s, const float *O, float *out, int64_t batch,
                                 int64_t qc, int64_t group, int64_t D, int64_t Hkv, int64_t Lq,
                                 int64_t q0) {
    int64_t n = batch * qc * group * D;
    if (n == 0) return cudaSuccess;
    attn_scatter_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(O, out, qc, group, D, Hkv, Lq, q0, n);
    return cudaGetLastError();
}
