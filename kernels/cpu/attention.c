/* attention.c - multi-head attention: the op's entry point, and the kernel
 * by GEMMs that the scalar path and bf16 precision take.
 *
 * f32 on the AVX2 and AVX-512 paths goes to the fused kernel of
 * attn_fused.c (register-blocked products with the online softmax between
 * them, no BLAS): the GEMMs below ran SD's narrow heads (D = 40: a K of 40
 * for QK^T, an N of 40 for PV) at a third of OpenBLAS's rate.
 *
 * The GEMM kernel: each task takes up to 256 query rows of one (batch,
 * head) and walks the keys in blocks of 1024 with an online softmax: per
 * row a running max and sum, the output accumulated by GEMM (O += P V) and
 * rescaled when a block raises the max, divided by the sum at the end (D
 * values per row, not Lk). Scratch is one [256, 1024] score block per
 * thread whatever the sequence length: never the [Lq, Lk] matrix. Measured
 * (4096 tokens, 8 heads x 40, one thread, CPU time): whole-row softmax with
 * [256, 4096] scores 304-314 ms; key blocks of 512 / 1024 / 2048: 288-300 /
 * 275-299 / 289-297 ms; the 4 MiB score block overflowed L2. Q/K/V heads
 * are read in place through the GEMM leading dimension (H*D), so nothing is
 * transposed or copied; with grouped-query attention several query heads
 * read one k/v head. An additive bias (T5's positions, masks) is added to
 * each score block.
 *
 * In bf16 precision the two products take bf16 inputs, as the matrix ops
 * do (dnnl_bf16.h): on the oneDNN path sd_dnnl_attention computes them with
 * bf16 primitives (softmax in f32 between them); elsewhere (the emulation,
 * grouped-query attention) this kernel rounds q, k, v and each block's
 * probabilities to bf16 values and multiplies them in f32. */
#include "cpu.h"
#include "dnnl_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QUERY_BLOCK 256
#define KEY_BLOCK 1024 /* [256, 1024] scores = 1 MiB: stays in the 2 MiB L2 */

typedef struct {
    const float *q, *k, *v, *bias;
    float *o;
    int64_t Lq, Lk, D, HD, KD, bq, qblocks; /* HD, KD: row strides of q/o and of k/v */
    int heads, group, causal;               /* group: query heads per k/v head */
    int round_p;                            /* bf16: probabilities rounded before P V */
    int64_t bst[3];                         /* bias strides (sd_attn_args) */
    float scale;
    float **scores;
    double **sums; /* per-thread [bq] row sums */
    float **maxes; /* per-thread [bq] running row maxima */
    int64_t bk;    /* keys per block */
} attn_job;

static void attn_task(void *ctx, int64_t t, int thread) {
    const attn_job *j = ctx;
    int64_t qb = t % j->qblocks, nh = t / j->qblocks;
    int64_t h = nh % j->heads, n = nh / j->heads;
    int64_t q0 = qb * j->bq, rows = j->Lq - q0 < j->bq ? j->Lq - q0 : j->bq;
    float *S = j->scores[thread];
    const float *q = j->q + (n * j->Lq + q0) * j->HD + h * j->D;
    int64_t kh = h / j->group;
    const float *k = j->k + n * j->Lk * j->KD + kh * j->D;
    const float *v = j->v + n * j->Lk * j->KD + kh * j->D;
    const float *bias = j->bias ? j->bias + n * j->bst[0] + h * j->bst[1] + q0 * j->bst[2] : NULL;
    float *o = j->o + (n * j->Lq + q0) * j->HD + h * j->D;
    double *sum = j->sums[thread];
    float *mx = j->maxes[thread];
    for (int64_t i = 0; i < rows; i++) {
        sum[i] = 0.0;
        mx[i] = -INFINITY;
        memset(o + i * j->HD, 0, (size_t)j->D * sizeof *o);
    }
    /* Online softmax over key blocks: O and the row sums are kept relative
     * to the running row max; a block raising it rescales them first. */
    for (int64_t k0 = 0; k0 < j->Lk; k0 += j->bk) {
        if (j->causal && k0 > q0 + rows - 1) break; /* every key here is masked */
        int64_t kn = j->Lk - k0 < j->bk ? j->Lk - k0 : j->bk;
        /* S = scale * Q K^T */
        sd_cpu_gemm1(0, 1, rows, kn, j->D, j->scale, q, j->HD, k + k0 * j->KD, j->KD, 0.0f, S,
                     kn);
        for (int64_t i = 0; i < rows; i++) {
            float *row = S + i * kn;
            if (bias) {
                const float *br = bias + i * j->bst[2] + k0;
                for (int64_t c = 0; c < kn; c++) row[c] += br[c];
            }
            if (j->causal)
                for (int64_t c = q0 + i + 1 - k0 < 0 ? 0 : q0 + i + 1 - k0; c < kn; c++)
                    row[c] = -INFINITY;
            float m_old = mx[i];
            double s = sd_cpu_exp_row(row, kn, &mx[i]);
            if (j->round_p) sd_bf16_round_f32_isa(NULL, SD_F32, row, row, kn, sd_cpu_isa());
            if (m_old != mx[i] && m_old != -INFINITY) {
                float a = expf(m_old - mx[i]);
                float *oi = o + i * j->HD;
                for (int64_t d = 0; d < j->D; d++) oi[d] *= a;
                sum[i] *= a;
            }
            sum[i] += s;
        }
        /* O += P V */
        sd_cpu_gemm1(0, 0, rows, j->D, kn, 1.0f, S, kn, v + k0 * j->KD, j->KD, 1.0f, o, j->HD);
    }
    /* each row / its sum (a fully masked row stays zeros) */
    for (int64_t i = 0; i < rows; i++) {
        float inv = sum[i] > 0.0 ? (float)(1.0 / sum[i]) : 0.0f;
        float *oi = o + i * j->HD;
        for (int64_t d = 0; d < j->D; d++) oi[d] *= inv;
    }
}

sd_status sd_cpu_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                           const sd_bt *v, const sd_attn_args *a) {
    return sd_cpu_attention_isa(be, out, q, k, v, a, sd_cpu_isa());
}

sd_status sd_cpu_attention_isa(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                               const sd_bt *v, const sd_attn_args *a, int isa) {
    int bf16 = be->precision == SD_PREC_BF16;
    if (bf16 && sd_dnnl_compiled() && ((sd_cpu *)be->impl)->bf16_path == SD_BF16_PATH_ONEDNN &&
        a->kv_heads == a->heads)
        return sd_dnnl_attention(be, out, q, k, v, a);
    sd_pool *pool = sd_cpu_pool(be);
    attn_job j = {0};
    j.q = sd_cpu_f32(q);
    j.k = sd_cpu_f32(k);
    j.v = sd_cpu_f32(v);
    j.o = sd_cpu_f32(out);
    j.Lq = q->shape[1];
    j.Lk = k->shape[1];
    j.HD = q->shape[2];
    j.KD = k->shape[2];
    j.heads = a->heads;
    j.group = a->heads / a->kv_heads;
    j.D = j.HD / a->heads;
    j.causal = a->causal;
    j.bias = a->bias ? sd_cpu_f32(a->bias) : NULL;
    for (int i = 0; i < 3; i++) j.bst[i] = a->bias_stride[i];
    if (j.Lq == 0 || j.D == 0) return SD_OK;
    if (j.Lk == 0) { /* no keys: zeros */
        memset(j.o, 0, out->nbytes);
        return SD_OK;
    }
    if (!bf16) {
        sd_cpu_attn fa = {j.q, j.k, j.v, j.bias, j.o, q->shape[0], j.Lq, j.Lk, j.D, j.HD, j.KD,
                          j.heads, j.group, j.causal, {j.bst[0], j.bst[1], j.bst[2]}, a->scale};
        int r = sd_cpu_attention_fused(pool, &fa, isa);
        if (r < 0) return sd_backend_fail(be, SD_ERR_NOMEM, "attention: out of memory");
        if (r > 0) return SD_OK;
    }
    /* bf16 inputs as f32 values (the products of two are exact in f32) */
    float *rq = NULL, *rk = NULL, *rv = NULL;
    if (bf16) {
        int64_t nq = sd_bt_numel(q), nk = sd_bt_numel(k);
        rq = sd_cpu_alloc((size_t)(nq ? nq : 1) * sizeof *rq);
        rk = sd_cpu_alloc((size_t)(nk ? nk : 1) * sizeof *rk);
        rv = sd_cpu_alloc((size_t)(nk ? nk : 1) * sizeof *rv);
        if (!rq || !rk || !rv) {
            free(rq), free(rk), free(rv);
            return sd_backend_fail(be, SD_ERR_NOMEM, "attention (bf16): out of memory rounding "
                                   "q, k, v");
        }
        sd_bf16_round_f32(pool, SD_F32, j.q, rq, nq);
        sd_bf16_round_f32(pool, SD_F32, j.k, rk, nk);
        sd_bf16_round_f32(pool, SD_F32, j.v, rv, nk);
        j.q = rq, j.k = rk, j.v = rv, j.round_p = 1;
    }
    j.scale = a->scale;
    int64_t bq = j.Lq < QUERY_BLOCK ? j.Lq : QUERY_BLOCK;
    j.bq = bq;
    j.bk = j.Lk < KEY_BLOCK ? j.Lk : KEY_BLOCK;
    j.qblocks = (j.Lq + bq - 1) / bq;

    int nt = sd_pool_threads(pool);
    size_t bytes = (size_t)(bq * j.bk) * sizeof(float);
    float **bufs = calloc((size_t)nt, sizeof *bufs);
    double **sums = calloc((size_t)nt, sizeof *sums);
    float **maxes = calloc((size_t)nt, sizeof *maxes);
    int ok = bufs && sums && maxes;
    for (int i = 0; ok && i < nt; i++)
        ok = (bufs[i] = sd_cpu_alloc(bytes)) && (sums[i] = malloc((size_t)bq * sizeof **sums)) &&
             (maxes[i] = malloc((size_t)bq * sizeof **maxes));
    if (ok) {
        j.scores = bufs;
        j.sums = sums;
        j.maxes = maxes;
        sd_pool_run(pool, q->shape[0] * a->heads * j.qblocks, attn_task, &j);
    }
    for (int i = 0; bufs && i < nt; i++) free(bufs[i]);
    for (int i = 0; sums && i < nt; i++) free(sums[i]);
    for (int i = 0; maxes && i < nt; i++) free(maxes[i]);
    free(bufs);
    free(sums);
    free(maxes);
    free(rq), free(rk), free(rv);
    if (!ok)
        return sd_backend_fail(be, SD_ERR_NOMEM, "attention: out of memory for scores (%zu bytes)",
                               bytes);
    return SD_OK;
}
