/* cuda_kernels.h - launchers of our own CUDA kernels (the .cu files).
 *
 * Plain C types only, so the C side (cuda_*.c) and nvcc both include it.
 * Every launcher enqueues on `s` and returns the launch status
 * (cudaGetLastError()); faults inside a kernel surface at the next
 * synchronisation. Pointers are device memory; tensors are contiguous
 * row-major F32 unless said otherwise. The callers validate shapes.
 */
#ifndef SD_CUDA_KERNELS_H
#define SD_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SD_CUDA_DIMS 6 /* = SD_MAX_DIMS (checked in cuda_backend.c) */

/* Shapes and strides passed to kernels by value. */
typedef struct sd_cuda_dims {
    int ndim;
    int64_t shape[SD_CUDA_DIMS];
    int64_t stride[SD_CUDA_DIMS];
} sd_cuda_dims;

/* ---- elementwise.cu ---- */
/* op: enum sd_unary_op (backend_impl.h); sc is SCALE's factor, LEAKY_RELU's slope, ELU's alpha. */
cudaError_t sd_cuda_unary(cudaStream_t s, const float *x, float *y, int64_t n, int op, float sc);
/* y = a (+|*) b[off(i)], off from b's broadcast strides over a's shape. op 0 add, 1 mul. */
cudaError_t sd_cuda_binary(cudaStream_t s, const float *a, const float *b, float *y, int64_t n,
                           sd_cuda_dims bd, int op);
/* y[p, :] = x[p, :] + b[p] over `planes` planes of `plane` elements. */
cudaError_t sd_cuda_add_plane(cudaStream_t s, const float *x, const float *b, float *y,
                              int64_t planes, int64_t plane);
/* y[n, c, :] += bias[c] (in place) for C channels of `plane` elements. */
cudaError_t sd_cuda_bias_nchw(cudaStream_t s, float *y, const float *bias, int64_t n, int64_t C,
                              int64_t plane);
/* y[r, c] = bias[c]: rows x cols (the GEMM then accumulates onto it). */
cudaError_t sd_cuda_fill_rows(cudaStream_t s, float *y, const float *bias, int64_t rows,
                              int64_t cols);
/* y[r, i] = x[r, i] * gelu(x[r, F + i]). */
cudaError_t sd_cuda_geglu(cudaStream_t s, const float *x, float *y, int64_t rows, int64_t F);
/* Storage types of narrow tensors (weights kept as stored), for the kernels
 * that read them: the widening and the embedding gather. */
enum sd_cuda_elem {
    SD_CUDA_ELEM_F32 = 0,
    SD_CUDA_ELEM_F16,
    SD_CUDA_ELEM_BF16,
    SD_CUDA_ELEM_F8_E4M3, /* float8_e4m3fn: 0x7F/0xFF NaN, no inf */
    SD_CUDA_ELEM_F8_E5M2  /* float8_e5m2: the top byte of a half */
};
/* y[i] = x[i] widened exactly to F32 from storage type `elem`, then times
 * `scale` (one F32 product) unless scale is 0 (scaled fp8 weights). */
cudaError_t sd_cuda_widen(cudaStream_t s, const void *x, float *y, int64_t n, int elem, float scale);
/* GGML block-quantized types (GGUF weights; layouts in core/quant.h). */
enum sd_cuda_quant {
    SD_CUDA_Q4_0 = 1,
    SD_CUDA_Q4_1,
    SD_CUDA_Q5_0,
    SD_CUDA_Q5_1,
    SD_CUDA_Q8_0,
    SD_CUDA_Q2_K,
    SD_CUDA_Q3_K,
    SD_CUDA_Q4_K,
    SD_CUDA_Q5_K,
    SD_CUDA_Q6_K,
    SD_CUDA_IQ4_NL,
    SD_CUDA_IQ4_XS
};
/* y[i] = element i of the n (whole blocks of `block` elements in
 * `block_bytes` bytes) of quantized type `type` (enum sd_cuda_quant) at x,
 * with core/quant.c's arithmetic in `math` (sd_dequant_math: 0 float16,
 * 1 float32, 2 bfloat16). */
cudaError_t sd_cuda_dequant(cudaStream_t s, const void *x, float *y, int64_t n, int type, int math,
                            int block, int block_bytes);
/* F32 <-> F16 (bf16 = 0) or BF16 (bf16 = 1), round to nearest even. */
cudaError_t sd_cuda_f32_to_half(cudaStream_t s, const float *x, void *y, int64_t n, int bf16);
cudaError_t sd_cuda_half_to_f32(cudaStream_t s, const void *x, float *y, int64_t n, int bf16);

/* ---- norm.cu ---- */
/* Bytes of device scratch sd_cuda_group_norm needs. */
size_t sd_cuda_group_norm_scratch(int64_t N, int groups, int64_t count);
/* GroupNorm of x [N, C, S] (S = product of the spatial dims), statistics in
 * double (per-block two-pass, merged with Chan's formula); gamma/beta may be
 * NULL; silu fuses SiLU. scratch: sd_cuda_group_norm_scratch bytes. */
cudaError_t sd_cuda_group_norm(cudaStream_t s, const float *x, const float *gamma,
                               const float *beta, float *y, void *scratch, int64_t N, int64_t C,
                               int64_t S, int groups, float eps, int silu);
/* LayerNorm over rows of C (statistics in double); gamma/beta may be NULL. */
cudaError_t sd_cuda_layer_norm(cudaStream_t s, const float *x, const float *gamma,
                               const float *beta, float *y, int64_t rows, int64_t C, float eps);
/* RMSNorm over rows of C (mean of squares in double); gamma may be NULL. */
cudaError_t sd_cuda_rms_norm(cudaStream_t s, const float *x, const float *gamma, float *y,
                             int64_t rows, int64_t C, float eps);
/* Softmax over rows of C; a row of all -inf becomes zeros. */
cudaError_t sd_cuda_softmax(cudaStream_t s, const float *x, float *y, int64_t rows, int64_t C);

/* ---- attention.cu ---- */
/* Dynamic shared memory the attention kernel needs for head dim D, or 0
 * when D is larger than the kernel supports (512). */
size_t sd_cuda_attention_smem(int64_t D);
/* One attention call's shapes (sd_attn_args, kernels/backend_impl.h): q
 * [N, Lq, heads*D], k/v [N, Lk, kv_heads*D]; query head h reads k/v head
 * h / (heads / kv_heads). bias (or NULL): added to the scaled scores at
 * bias[n*bs[0] + h*bs[1] + i*bs[2] + j] (stride 0 broadcasts). */
typedef struct sd_cuda_attn_shape {
    int64_t N, Lq, Lk;
    int heads, kv_heads;
    int64_t D;
    int causal;
    float scale;
    const float *bias;
    int64_t bias_stride[3];
} sd_cuda_attn_shape;
/* o = softmax(q k^T * scale + bias [causal mask]) v per head. Online
 * softmax in F32 over 32-key tiles staged in shared memory; no score matrix
 * in device memory. max_smem: the device's opt-in shared memory per block. */
cudaError_t sd_cuda_attention(cudaStream_t s, const float *q, const float *k, const float *v,
                              float *o, const sd_cuda_attn_shape *sh, size_t max_smem);

/* ---- attention_tc.cu: around the tensor-core attention's GEMMs (attn_plan.h) ---- */
/* y (elem: SD_CUDA_ELEM_BF16 or _F16) [N, Hkv, L, group, D] = x [N, L, Hkv*group*D]
 * rounded to nearest even; head j*group + g of x goes to (j, g). */
cudaError_t sd_cuda_attn_pack(cudaStream_t s, const float *x, void *y, int elem, int64_t N,
                              int64_t L, int64_t Hkv, int64_t group, int64_t D);
/* P (16-bit, `elem`) = softmax over each of `rows` rows of S [rows, Lk]
 * (scores already scaled), F32 max and sum. Row r = (b*qc + qi)*group + g
 * is query q0 + qi of head (b % Hkv)*group + g, batch item b / Hkv: its bias
 * row bias[n*bs[0] + h*bs[1] + q*bs[2]] (NULL: none) is added first; causal
 * masks keys > q; a row with no live key is zeros. */
cudaError_t sd_cuda_attn_softmax(cudaStream_t s, const float *S, void *P, int elem, int64_t rows,
                                 int64_t Lk, int64_t qc, int64_t group, int64_t Hkv, int64_t q0,
                                 int causal, const float *bias, const int64_t *bias_stride);
/* out [N, Lq, Hkv*group*D] rows q0 .. q0+qc-1 = O [batch = N*Hkv, qc, group, D]. */
cudaError_t sd_cuda_attn_scatter(cudaStream_t s, const float *O, float *out, int64_t batch,
                                 int64_t qc, int64_t group, int64_t D, int64_t Hkv, int64_t Lq,
                                 int64_t q0);

/* ---- rope.cu ---- */
/* sd_op_rope on x [N, L, heads*D]; rot [L, D/2, 2] (rot_batched 0) or
 * [N, L, D/2, 2]. */
cudaError_t sd_cuda_rope(cudaStream_t s, const float *x, const float *rot, float *y, int64_t N,
                         int64_t L, int heads, int64_t D, int rot_batched, int interleaved);

/* ---- layout.cu ---- */
/* out [P, Ho, Wo] (zeroed) <- x [P, H, W] at (top, left). */
cudaError_t sd_cuda_pad2d(cudaStream_t s, const float *x, float *y, int64_t P, int64_t H,
                          int64_t W, int64_t Ho, int64_t Wo, int left, int top);
/* Nearest x2: y [P, 2H, 2W] from x [P, H, W]. */
cudaError_t sd_cuda_upsample2x(cudaStream_t s, const float *x, float *y, int64_t P, int64_t H,
                               int64_t W);
/* y (shape od.shape, contiguous) [i] = x[sum idx_d * od.stride[d]], where
 * od.stride are x's strides permuted to y's dim order. */
cudaError_t sd_cuda_permute(cudaStream_t s, const float *x, float *y, int64_t n, sd_cuda_dims od);
/* y[i, :] = table[ids[i], :] widened from the table's storage type `elem`
 * (enum sd_cuda_elem); ids already range-checked; ids64 picks I64 vs I32. */
cudaError_t sd_cuda_embedding(cudaStream_t s, const void *table, int elem, const void *ids,
                              int ids64, float *y, int64_t n, int64_t C);

/* ---- pixel.cu ---- */
/* y = x >= 0 ? x : w[c] * x over P = N*C planes of `plane` elements, c =
 * plane index % C; shared != 0: w[0] for every channel. */
cudaError_t sd_cuda_prelu(cudaStream_t s, const float *x, const float *w, float *y, int64_t P,
                          int64_t C, int64_t plane, int shared);
/* PixelShuffle(r) (inverse 0) or pixel_unshuffle(r) (inverse 1) between
 * small [NC*r*r, h, w] and big [NC, h*r, w*r] (x is small when inverse is
 * 0, big when 1); NC = N * C of the big side. */
cudaError_t sd_cuda_pixel_shuffle(cudaStream_t s, const float *x, float *y, int64_t NC,
                                  int64_t h, int64_t w, int r, int inverse);
/* Nearest upsampling: y [P, H*f, W*f] from x [P, H, W]. */
cudaError_t sd_cuda_upsample_nearest(cudaStream_t s, const float *x, float *y, int64_t P,
                                     int64_t H, int64_t W, int f);

#ifdef __cplusplus
}
#endif

#endif
