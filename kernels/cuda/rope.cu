/* rope.cu - rotary position embedding (sd_op_rope), one thread per pair.
 * Products rounded before the sum (no FMA), as the CPU and torch do. */
#include "cuda_common.cuh"

__global__ void rope_k(const float *x, const float *rot, float *y, int64_t pairs, int64_t L,
                       int heads, int64_t D, int rot_batched, int interleaved) {
    int64_t half = D / 2;
    SD_GRID_STRIDE(p, pairs) {
        int64_t i = p % half, t = p / half; /* t: (n, l, h) */
        int64_t h = t % heads, nl = t / heads, l = nl % L;
        const float *cs = rot + (rot_batched ? nl : l) * D + 2 * i;
        int64_t base = nl * heads * D + h * D;
        int64_t ia = base + (interleaved ? 2 * i : i), ib = ia + (interleaved ? 1 : half);
        float c = cs[0], s = cs[1], a = x[ia], b = x[ib];
        y[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        y[ib] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}

cudaError_t sd_cuda_rope(cudaStream_t s, const float *x, const float *rot, float *y, int64_t N,
                         int64_t L, int heads, int64_t D, int rot_batched, int interleaved) {
    int64_t pairs = N * L * heads * (D / 2);
    if (pairs <= 0) return cudaSuccess;
    rope_k<<<sd_blocks(pairs), SD_THREADS, 0, s>>>(x, rot, y, pairs, L, heads, D, rot_batched,
                                                   interleaved);
    return cudaGetLastError();
}
