/* attn_plan.h - the arithmetic of the CUDA backend's tensor-core attention
 * (cuda_attn.c): buffer sizes, the GEMM batch and the query chunking that
 * bounds its scratch. Plain C without CUDA headers, so that the CPU-only
 * test kernels.cuda_attn_plan checks it on machines without a GPU.
 *
 * The path: q, k, v (F32 [N, L, heads*D] / [N, L, kv_heads*D]) are rounded
 * once to 16 bits and laid out per key/value head so grouped-query heads
 * fold into the GEMM rows:
 *   Q16 [N, kv_heads, Lq, group, D]  (query head h = j*group + g)
 *   K16, V16 [N, kv_heads, Lk, D]
 * Then for each chunk of qc queries, over the GEMM batch b = (n, j):
 *   S   = Q16 rows [q0*group, (q0+qc)*group) . K16^T   F32 [batch, qc*group, Lk]
 *   P16 = softmax(S * scale + bias, causal) in F32, stored 16-bit
 *   O   = P16 . V16                                    F32 [batch, qc*group, D]
 * and O is scattered into the output [N, Lq, heads*D]. */
#ifndef SD_CUDA_ATTN_PLAN_H
#define SD_CUDA_ATTN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_cuda_attn_plan {
    size_t elem;     /* bytes per element of Q16/K16/V16/P16 */
    int64_t batch;   /* GEMM batch: N * kv_heads */
    int64_t group;   /* query heads per key/value head */
    int64_t q_chunk; /* queries per chunk (the last chunk may be shorter) */
    int64_t n_chunks;
    /* bytes of the packed 16-bit inputs, each at a 256-byte aligned offset
     * of one buffer: Q16 at 0, K16 at off_k, V16 at off_v */
    size_t off_k, off_v, packed_bytes;
    /* bytes of one full chunk's scratch: S (F32) at 0, P16 at off_p, O (F32)
     * at off_o */
    size_t off_p, off_o, chunk_bytes;
} sd_cuda_attn_plan;

/* Plans attention of q [N, Lq, heads*D] against k/v [N, Lk, kv_heads*D]
 * with `elem`-byte (2) inputs to the GEMMs, keeping one chunk's scratch at
 * most `budget` bytes. The chunk is the largest multiple of 64 queries
 * that fits (of 8, then 1, when 64 do not), or all of Lq. Returns 0, or -1
 * when the path cannot take the call: a dimension is 0 or negative, heads
 * is not a multiple of kv_heads, a GEMM dimension or leading dimension
 * exceeds cuBLAS's int, or even one query's scores exceed the budget (the
 * caller then uses the F32 kernel). */
int sd_cuda_attn_plan_make(int64_t N, int64_t Lq, int64_t Lk, int64_t D, int heads, int kv_heads,
                           size_t elem, size_t budget, sd_cuda_attn_plan *p);

/* Queries [*q0, *q0 + *qc) of chunk i < p->n_chunks of Lq queries. */
void sd_cuda_attn_plan_chunk(const sd_cuda_attn_plan *p, int64_t Lq, int64_t i, int64_t *q0,
                             int64_t *qc);

/* One cublasGemmStridedBatchedEx call of a chunk, column-major as cuBLAS
 * sees it: C = alpha op(A) B for `batch` matrices, op(A) = A^T when
 * trans_a, B never transposed. Strides in elements; offsets in bytes from
 * the start of the buffers: the scores GEMM reads A (K16) and B (Q16) in
 * the packed buffer and writes C (S) in the chunk scratch; the values GEMM
 * reads A (V16) in the packed buffer, B (P16) and C (O) in the scratch. */
typedef struct sd_cuda_attn_gemm {
    int trans_a;
    int m, n, k, lda, ldb, ldc, batch;
    long long stride_a, stride_b, stride_c;
    size_t a_off, b_off, c_off;
} sd_cuda_attn_gemm;

/* The two GEMMs of chunk [q0, q0 + qc): row-major S [rows, Lk] = Q K^T is
 * column-major S^T = op(K16) Q16^T-view (A = K16 transposed, B = Q16); O
 * [rows, D] = P V is O^T = V16^T-view P16^T-view (A = V16, B = P16); rows
 * = qc * group per batch item. */
void sd_cuda_attn_plan_gemms(const sd_cuda_attn_plan *p, int64_t Lq, int64_t Lk, int64_t D,
                             int64_t q0, int64_t qc, sd_cuda_attn_gemm *scores,
                             sd_cuda_attn_gemm *values);

#ifdef __cplusplus
}
#endif

#endif
