/* attn_plan.c - buffer sizes and query chunking of the tensor-core
 * attention (attn_plan.h). Every size is computed with overflow checks: the
 * shapes come from models, and a wrapped size would under-allocate. */
#include "kernels/cuda/attn_plan.h"

#include <limits.h>

#define ALIGN 256 /* cuBLAS wants 16-byte aligned matrices; 256 is cudaMalloc's */

static int mul3(size_t a, size_t b, size_t c, size_t *r) {
    size_t t;
    return __builtin_mul_overflow(a, b, &t) || __builtin_mul_overflow(t, c, r);
}

static int add_aligned(size_t *off, size_t n) { /* *off = align(*off) + n */
    size_t a = (*off + ALIGN - 1) / ALIGN * ALIGN;
    if (a < *off) return 1;
    return __builtin_add_overflow(a, n, off);
}

/* Scratch bytes of a chunk of qc queries in *bytes; 1 when they overflow. */
static int chunk_bytes(const sd_cuda_attn_plan *p, int64_t qc, int64_t Lk, int64_t D, size_t elem,
                       size_t *off_p, size_t *off_o, size_t *bytes) {
    size_t rows, s, pb, o, off;
    if (__builtin_mul_overflow((size_t)p->batch, (size_t)qc, &rows) ||
        __builtin_mul_overflow(rows, (size_t)p->group, &rows) ||
        mul3(rows, (size_t)Lk, sizeof(float), &s) || mul3(rows, (size_t)Lk, elem, &pb) ||
        mul3(rows, (size_t)D, sizeof(float), &o))
        return 1;
    off = s;
    if (add_aligned(&off, 0)) return 1;
    *off_p = off;
    if (add_aligned(&off, pb) || add_aligned(&off, 0)) return 1;
    *off_o = off;
    if (add_aligned(&off, o)) return 1;
    *bytes = off;
    return 0;
}

static int fits(const sd_cuda_attn_plan *p, int64_t qc, int64_t Lk, int64_t D, size_t elem,
                size_t budget) {
    size_t op, oo, n;
    return !chunk_bytes(p, qc, Lk, D, elem, &op, &oo, &n) && n <= budget;
}

int sd_cuda_attn_plan_make(int64_t N, int64_t Lq, int64_t Lk, int64_t D, int heads, int kv_heads,
                           size_t elem, size_t budget, sd_cuda_attn_plan *p) {
    *p = (sd_cuda_attn_plan){0};
    if (N < 1 || Lq < 1 || Lk < 1 || D < 1 || heads < 1 || kv_heads < 1 || elem < 1 ||
        heads % kv_heads != 0)
        return -1;
    p->elem = elem;
    p->batch = N * kv_heads;
    p->group = heads / kv_heads;
    /* cuBLAS's int arguments: m, n, k, leading dimensions and the batch;
     * the largest row count is a whole chunk of Lq queries */
    if (p->batch > INT_MAX || Lk > INT_MAX || D > INT_MAX || Lq > INT_MAX / p->group) return -1;
    /* the packed inputs */
    size_t q16, k16, off = 0;
    if (mul3((size_t)N, (size_t)Lq, (size_t)heads, &q16) || mul3(q16, (size_t)D, elem, &q16) ||
        mul3((size_t)p->batch, (size_t)Lk, (size_t)D, &k16) || __builtin_mul_overflow(k16, elem, &k16))
        return -1;
    off = q16;
    if (add_aligned(&off, 0)) return -1;
    p->off_k = off;
    if (add_aligned(&off, k16) || add_aligned(&off, 0)) return -1;
    p->off_v = off;
    if (add_aligned(&off, k16)) return -1;
    p->packed_bytes = off;
    /* the chunk: all of Lq if it fits, else the largest multiple of 64 (of
     * 8, of 1 when 64 do not fit) queries that does; the steps keep GEMM row
     * counts tile-friendly. The bytes grow with qc: bisect for the most that
     * fit, then round down to the step. */
    int64_t qc = Lq;
    if (!fits(p, qc, Lk, D, elem, budget)) {
        if (!fits(p, 1, Lk, D, elem, budget)) return -1;
        int64_t lo = 1, hi = Lq - 1; /* fits(lo); the answer is in [lo, hi] */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo + 1) / 2;
            if (fits(p, mid, Lk, D, elem, budget)) lo = mid;
            else hi = mid - 1;
        }
        qc = lo >= 64 ? lo / 64 * 64 : lo >= 8 ? lo / 8 * 8 : lo;
    }
    p->q_chunk = qc;
    p->n_chunks = (Lq + qc - 1) / qc;
    if (chunk_bytes(p, qc, Lk, D, elem, &p->off_p, &p->off_o, &p->chunk_bytes)) return -1;
    return 0;
}

void sd_cuda_attn_plan_chunk(const sd_cuda_attn_plan *p, int64_t Lq, int64_t i, int64_t *q0,
                             int64_t *qc) {
    *q0 = i * p->q_chunk;
    *qc = Lq - *q0 < p->q_chunk ? Lq - *q0 : p->q_chunk;
}

void sd_cuda_attn_plan_gemms(const sd_cuda_attn_plan *p, int64_t Lq, int64_t Lk, int64_t D,
                             int64_t q0, int64_t qc, sd_cuda_attn_gemm *scores,
                             sd_cuda_attn_gemm *values) {
    int64_t rows = qc * p->group;
    *scores = (sd_cuda_attn_gemm){.trans_a = 1,
                                  .m = (int)Lk,
                                  .n = (int)rows,
                                  .k = (int)D,
                                  .lda = (int)D,
                                  .ldb = (int)D,
                                  .ldc = (int)Lk,
                                  .batch = (int)p->batch,
                                  .stride_a = (long long)(Lk * D),
                                  .stride_b = (long long)(Lq * p->group * D),
                                  .stride_c = (long long)(rows * Lk),
                                  .a_off = p->off_k,
                                  .b_off = (size_t)(q0 * p->group * D) * p->elem,
                                  .c_off = 0};
    *values = (sd_cuda_attn_gemm){.trans_a = 0,
                                  .m = (int)D,
                                  .n = (int)rows,
                                  .k = (int)Lk,
                                  .lda = (int)D,
                                  .ldb = (int)Lk,
                                  .ldc = (int)D,
                                  .batch = (int)p->batch,
                                  .stride_a = (long long)(Lk * D),
                                  .stride_b = (long long)(rows * Lk),
                                  .stride_c = (long long)(rows * D),
                                  .a_off = p->off_v,
                                  .b_off = p->off_p,
                                  .c_off = p->off_o};
}
