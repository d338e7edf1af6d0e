/* cuda_attn.c - the attention op: two paths, chosen by the precision mode.
 *
 * BF16 / F16: tensor cores through cuBLAS. q, k, v are rounded once to the
 * mode's 16-bit type (attn_plan.h's layout), then per chunk of queries
 * S = Q K^T (cublasGemmStridedBatchedEx, 16-bit inputs, F32 accumulation
 * and output, the scale as alpha), our softmax kernel (F32 max and sum,
 * bias and causal mask, probabilities stored 16-bit), O = P V (the same
 * GEMM, F32 out) and a scatter into the output. The chunk keeps the score
 * scratch under c->attn_scratch (default 256 MiB). Inputs rounded to 16
 * bits are what the mode means for GEMMs (docs/cuda.md); the softmax
 * statistics stay F32.
 *
 * F32, or a call the plan refuses (a single query's scores over the
 * budget, dimensions beyond cuBLAS's int, attn_scratch 0): the F32 flash
 * kernel of attention.cu, which never holds a score matrix. */
#include "kernels/cuda/attn_plan.h"
#include "kernels/cuda/cuda_impl.h"

#include <stdint.h>

/* The F32 kernel (attention.cu). */
static sd_status attention_f32(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                               const sd_bt *v, const sd_attn_args *a, int64_t N, int64_t Lq,
                               int64_t Lk, int64_t D) {
    sd_cuda *c = sd_cuda_of(be);
    size_t smem = sd_cuda_attention_smem(D);
    if (!smem || smem > c->max_smem_optin)
        return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                               "cuda attention: head dim %lld needs %zu bytes of shared memory "
                               "per block; %s allows %zu (head dims up to 512 are supported)",
                               (long long)D, smem, c->device_name, c->max_smem_optin);
    if (N * a->heads > 65535)
        return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                               "cuda attention: batch %lld x %d heads exceeds the grid limit 65535",
                               (long long)N, a->heads);
    sd_cuda_attn_shape sh = {N, Lq, Lk, a->heads, a->kv_heads, D, a->causal, a->scale,
                             a->bias ? sd_cuda_f32(a->bias) : NULL,
                             {a->bias_stride[0], a->bias_stride[1], a->bias_stride[2]}};
    return sd_cuda_check(be,
                         sd_cuda_attention(c->stream, sd_cuda_f32(q), sd_cuda_f32(k),
                                           sd_cuda_f32(v), sd_cuda_f32(out), &sh, c->max_smem_optin),
                         "attention", "kernel launch");
}

static sd_status gemm(sd_backend *be, const sd_cuda_attn_gemm *g, float alpha, const char *a,
                      const char *b, char *c, cudaDataType dt, cudaDataType ct, const char *what) {
    float zero = 0.0f;
    return sd_cuda_check_blas(
        be,
        cublasGemmStridedBatchedEx(sd_cuda_of(be)->cublas, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   CUBLAS_OP_N, g->m, g->n, g->k, &alpha, a + g->a_off, dt, g->lda,
                                   g->stride_a, b + g->b_off, dt, g->ldb, g->stride_b, &zero,
                                   c + g->c_off, ct, g->ldc, g->stride_c, g->batch,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "attention", what);
}

/* One chunk: queries [q0, q0 + qc) of every (batch item, head), with the
 * GEMMs attn_plan.c describes (kernels.cuda_attn_plan runs the same
 * descriptors through a CPU emulation of cuBLAS). */
static sd_status chunk(sd_backend *be, sd_bt *out, const sd_attn_args *a,
                       const sd_cuda_attn_plan *p, char *packed, char *scratch, cudaDataType dt,
                       int elem, int64_t Lq, int64_t Lk, int64_t D, int64_t q0, int64_t qc) {
    sd_cuda *c = sd_cuda_of(be);
    sd_cuda_attn_gemm gs, gv;
    sd_cuda_attn_plan_gemms(p, Lq, Lk, D, q0, qc, &gs, &gv);
    sd_status rc = gemm(be, &gs, a->scale, packed, packed, scratch, dt, CUDA_R_32F,
                        "scores: cublasGemmStridedBatchedEx");
    if (rc != SD_OK) return rc;
    rc = sd_cuda_check(be,
                       sd_cuda_attn_softmax(c->stream, (const float *)scratch, scratch + p->off_p,
                                            elem, p->batch * qc * p->group, Lk, qc, p->group,
                                            a->kv_heads, q0, a->causal,
                                            a->bias ? sd_cuda_f32(a->bias) : NULL, a->bias_stride),
                       "attention", "softmax kernel launch");
    if (rc != SD_OK) return rc;
    rc = gemm(be, &gv, 1.0f, packed, scratch, scratch, dt, CUDA_R_32F,
              "values: cublasGemmStridedBatchedEx");
    if (rc != SD_OK) return rc;
    return sd_cuda_check(be,
                         sd_cuda_attn_scatter(c->stream, (const float *)(scratch + p->off_o),
                                              sd_cuda_f32(out), p->batch, qc, p->group, D,
                                              a->kv_heads, Lq, q0),
                         "attention", "scatter kernel launch");
}

sd_status sd_cuda_op_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                               const sd_bt *v, const sd_attn_args *a) {
    sd_cuda *c = sd_cuda_of(be);
    int64_t N = q->shape[0], Lq = q->shape[1], Lk = k->shape[1], D = q->shape[2] / a->heads;
    if (sd_bt_numel(out) == 0) return SD_OK;
    if (Lk == 0) /* no keys: zeros, as on the CPU */
        return sd_cuda_check(be, cudaMemsetAsync(out->data, 0, out->nbytes, c->stream),
                             "attention", "zero fill");
    if (be->precision != SD_PREC_BF16 && be->precision != SD_PREC_F16)
        return attention_f32(be, out, q, k, v, a, N, Lq, Lk, D);
    sd_cuda_attn_plan p;
    if (sd_cuda_attn_plan_make(N, Lq, Lk, D, a->heads, a->kv_heads, 2, c->attn_scratch, &p) != 0)
        return attention_f32(be, out, q, k, v, a, N, Lq, Lk, D);
    int bf = be->precision == SD_PREC_BF16;
    cudaDataType dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    int elem = bf ? SD_CUDA_ELEM_BF16 : SD_CUDA_ELEM_F16;
    char *packed = sd_cuda_scratch(be, p.packed_bytes, "attention", "q, k, v in 16 bits");
    if (!packed) return SD_ERR_NOMEM;
    char *scratch = sd_cuda_scratch(be, p.chunk_bytes, "attention", "scores of a query chunk");
    if (!scratch) {
        sd_cuda_scratch_free(be, packed);
        return SD_ERR_NOMEM;
    }
    int64_t Hkv = a->kv_heads;
    sd_status rc = sd_cuda_check(
        be, sd_cuda_attn_pack(c->stream, sd_cuda_f32(q), packed, elem, N, Lq, Hkv, p.group, D),
        "attention", "pack q");
    if (rc == SD_OK)
        rc = sd_cuda_check(
            be, sd_cuda_attn_pack(c->stream, sd_cuda_f32(k), packed + p.off_k, elem, N, Lk, Hkv, 1, D),
            "attention", "pack k");
    if (rc == SD_OK)
        rc = sd_cuda_check(
            be, sd_cuda_attn_pack(c->stream, sd_cuda_f32(v), packed + p.off_v, elem, N, Lk, Hkv, 1, D),
            "attention", "pack v");
    for (int64_t i = 0; rc == SD_OK && i < p.n_chunks; i++) {
        int64_t q0, qc;
        sd_cuda_attn_plan_chunk(&p, Lq, i, &q0, &qc);
        rc = chunk(be, out, a, &p, packed, scratch, dt, elem, Lq, Lk, D, q0, qc);
    }
    /* the stream orders the next user of these blocks after this op */
    sd_cuda_scratch_free(be, scratch);
    sd_cuda_scratch_free(be, packed);
    return rc;
}
