/* attention.cu - flash-style multi-head attention in F32.
 *
 * Block = 8 warps = 8 consecutive query rows of one (batch, head). Keys and
 * values stream through shared memory in tiles of 32 rows; each lane scores
 * one key of the tile against its warp's query, the warp keeps a running
 * max and sum (online softmax), and the output row lives in registers,
 * spread over the lanes (lane owns dims lane, lane+32, ...). Nothing of
 * size Lq x Lk ever reaches device memory. Scores, softmax and accumulation
 * are F32 in every precision mode (f16 scores overflow).
 *
 * The register tile is a template over DC = ceil(D / 32) so the output
 * row stays in registers (compile-time indices); D up to 512 (the VAE's
 * single-head attention) is covered. Grouped-query attention reads k/v head
 * h / group; an additive bias (T5's positions, masks) joins each score
 * before the running max. */
#include "cuda_common.cuh"

#define AT_BK 32 /* keys per tile = lanes per warp */
#define AT_WARPS 8

template <int DC>
__global__ void __launch_bounds__(AT_WARPS * 32)
    flash_k(const float *q, const float *k, const float *v, float *o, int64_t Lq, int64_t Lk,
            int heads, int group, int D, float scale, int causal, const float *bias,
            int64_t bs0, int64_t bs1, int64_t bs2) {
    extern __shared__ float sm[];
    float *Ks = sm;                   /* [BK][D+1]: odd pitch, lanes read rows */
    float *Vs = Ks + AT_BK * (D + 1); /* [BK][D] */
    float *Qs = Vs + AT_BK * D;       /* [WARPS][D] */
    float *Ps = Qs + AT_WARPS * D;    /* [WARPS][BK] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t HD = (int64_t)heads * D, KD = (int64_t)(heads / group) * D;
    const int64_t nh = blockIdx.y, n = nh / heads, h = nh % heads;
    const int64_t q0 = (int64_t)blockIdx.x * AT_WARPS, qi = q0 + warp;
    const bool active = qi < Lq;
    const float *kb = k + n * Lk * KD + (h / group) * D;
    const float *vb = v + n * Lk * KD + (h / group) * D;
    const float *brow = bias && active ? bias + n * bs0 + h * bs1 + qi * bs2 : NULL;
    float *qs = Qs + warp * D, *ps = Ps + warp * AT_BK;

    if (active) {
        const float *qr = q + (n * Lq + qi) * HD + h * D;
        for (int d = lane; d < D; d += 32) qs[d] = qr[d];
    }
    float m = -INFINITY, l = 0.0f, acc[DC];
#pragma unroll
    for (int i = 0; i < DC; i++) acc[i] = 0.0f;

    int64_t kend = Lk;
    if (causal) { /* keys after the block's last query are masked for all */
        int64_t last = q0 + AT_WARPS;
        if (last < kend) kend = last;
    }
    for (int64_t j0 = 0; j0 < kend; j0 += AT_BK) {
        __syncthreads(); /* the previous tile is consumed (and qs written) */
        for (int idx = threadIdx.x; idx < AT_BK * D; idx += blockDim.x) {
            int r = idx / D, d = idx - r * D;
            int64_t j = j0 + r;
            float kv = 0.0f, vv = 0.0f;
            if (j < Lk) {
                kv = kb[j * KD + d];
                vv = vb[j * KD + d];
            }
            Ks[r * (D + 1) + d] = kv;
            Vs[r * D + d] = vv;
        }
        __syncthreads();
        if (!active) continue;
        int64_t j = j0 + lane;
        bool valid = j < Lk && (!causal || j <= qi);
        float sc = -INFINITY;
        if (valid) {
            const float *kr = Ks + lane * (D + 1);
            float dot = 0.0f;
            for (int d = 0; d < D; d++) dot = fmaf(qs[d], kr[d], dot);
            sc = dot * scale;
            if (brow) sc += brow[j];
        }
        float mnew = fmaxf(m, sd_warp_maxf(sc));
        if (mnew == -INFINITY) continue; /* whole tile masked (warp-uniform) */
        float p = valid ? expf(sc - mnew) : 0.0f;
        float corr = expf(m - mnew); /* 0 on the first live tile */
        l = l * corr + sd_warp_sumf(p);
        m = mnew;
        ps[lane] = p;
        __syncwarp();
#pragma unroll
        for (int i = 0; i < DC; i++) acc[i] *= corr;
        for (int r = 0; r < AT_BK; r++) {
            float pr = ps[r];
            const float *vr = Vs + r * D;
#pragma unroll
            for (int i = 0; i < DC; i++) {
                int d = lane + 32 * i;
                if (d < D) acc[i] = fmaf(pr, vr[d], acc[i]);
            }
        }
        __syncwarp();
    }
    if (!active) return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f; /* no live key: zeros, as on the CPU */
    float *orow = o + (n * Lq + qi) * HD + h * D;
#pragma unroll
    for (int i = 0; i < DC; i++) {
        int d = lane + 32 * i;
        if (d < D) orow[d] = acc[i] * inv;
    }
}

size_t sd_cuda_attention_smem(int64_t D) {
    if (D < 1 || D > 512) return 0;
    return (size_t)(AT_BK * (D + 1) + AT_BK * D + AT_WARPS * D + AT_WARPS * AT_BK) *
           sizeof(float);
}

template <int DC>
static cudaError_t launch(cudaStream_t s, const float *q, const float *k, const float *v, float *o,
                          const sd_cuda_attn_shape *a, size_t smem) {
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(flash_k<DC>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) return e;
    }
    dim3 grid((unsigned)((a->Lq + AT_WARPS - 1) / AT_WARPS), (unsigned)(a->N * a->heads));
    flash_k<DC><<<grid, AT_WARPS * 32, smem, s>>>(
        q, k, v, o, a->Lq, a->Lk, a->heads, a->heads / a->kv_heads, (int)a->D, a->scale, a->causal,
        a->bias, a->bias_stride[0], a->bias_stride[1], a->bias_stride[2]);
    return cudaGetLastError();
}

cudaError_t sd_cuda_attention(cudaStream_t s, const float *q, const float *k, const float *v,
                              float *o, const sd_cuda_attn_shape *a, size_t max_smem) {
    if (a->N == 0 || a->Lq == 0 || a->D == 0 || a->Lk == 0) return cudaSuccess; /* out stays zero */
    size_t smem = sd_cuda_attention_smem(a->D);
    if (!smem || smem > max_smem || a->N * a->heads > 65535 ||
        (a->Lq + AT_WARPS - 1) / AT_WARPS > 0x7fffffff || a->kv_heads < 1 ||
        a->heads % a->kv_heads != 0)
        return cudaErrorInvalidValue;
    if (a->D <= 64) return launch<2>(s, q, k, v, o, a, smem);
    if (a->D <= 128) return launch<4>(s, q, k, v, o, a, smem);
    if (a->D <= 160) return launch<5>(s, q, k, v, o, a, smem);
    if (a->D <= 256) return launch<8>(s, q, k, v, o, a, smem);
    return launch<16>(s, q, k, v, o, a, smem);
}
