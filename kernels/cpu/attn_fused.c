/* attn_fused.c - f32 attention fused per query block, with AVX-512 and AVX2
 * paths (attention.c dispatches here; the scalar path and bf16 stay on its
 * GEMM kernel).
 *
 * SD's heads are narrow (D = 40..160), so the two products as GEMMs have a
 * tiny K (QK^T) or a narrow N (PV) that a packed BLAS GEMM runs at a third
 * of its rate, and the softmax between them streamed a 1 MiB score block
 * through L2 (38.7 GFLOP/s at 4096 tokens, 8 x 40 heads, one thread). Here:
 *
 * - K is transposed once per call into [key block][D][keys] and V copied
 *   into rows of D padded to whole vectors (pack_task), so both products
 *   read contiguous vectors.
 * - Each task takes up to QUERY_BLOCK query rows of one (batch, head) and
 *   walks the key blocks (about 96 KiB of packed K and V each: 256 keys at
 *   D = 40, 96 at D = 128); per block, per group of ROW_GROUP rows: the
 *   scores by a register-blocked microkernel (QK_R rows x QK_NK vectors of
 *   keys, the query values broadcast), the online-softmax step (each row's
 *   max first, O and the running sum rescaled when it rose, then the exps of
 *   the whole group in one pass: vexp.h), then O += P V by a second
 *   microkernel (PV_ACC accumulators: rows x vectors of D, V rows loaded,
 *   the probabilities broadcast). The scores of a row group stay in L1, the
 *   packed K and V block in L2, O of the query block in L2.
 * - Bias (added after scaling), causal masking and grouped-query heads as
 *   attention.c; padding keys and padding query rows never reach the output.
 *
 * Numerics: the scores and the probabilities are the same f32 quantities as
 * on the GEMM path, summed in a different order; the block sums of the
 * probabilities are accumulated in float lanes and the running sum in
 * double. */
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#include "vexp.h"
#endif

#define QUERY_BLOCK 256
#define ROW_GROUP 24 /* a multiple of each path's QK_R and of PV_ACC / nv */

typedef struct {
    const sd_cpu_attn *a;
    int64_t kv_heads, qb, qblocks, kb, kblocks, kbp, dp, lkp;
    float *kt; /* [N * kv_heads][kblocks][D][kbp] */
    float *vp; /* [N * kv_heads][Lk][dp] */
    float **qbuf, **obuf, **sbuf, **mbuf;
    double **lbuf;
} fused_job;

/* K of one (batch, k/v head, key block) transposed to [D][kbp] (zeros past
 * the keys), and its V rows padded to dp floats. */
static void pack_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const fused_job *j = ctx;
    const sd_cpu_attn *a = j->a;
    int64_t kb = t % j->kblocks, kvh = t / j->kblocks;
    int64_t n = kvh / j->kv_heads, kh = kvh % j->kv_heads, D = a->D;
    int64_t k0 = kb * j->kb, kn = a->Lk - k0 < j->kb ? a->Lk - k0 : j->kb;
    const float *k = a->k + (n * a->Lk + k0) * a->KD + kh * D;
    const float *v = a->v + (n * a->Lk + k0) * a->KD + kh * D;
    float *kt = j->kt + (kvh * j->kblocks + kb) * D * j->kbp;
    float *vp = j->vp + (kvh * j->lkp + k0) * j->dp;
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = kn; c < j->kbp; c++) kt[d * j->kbp + c] = 0.0f;
    for (int64_t c = 0; c < kn; c++) {
        const float *kr = k + c * a->KD;
        for (int64_t d = 0; d < D; d++) kt[d * j->kbp + c] = kr[d];
        memcpy(vp + c * j->dp, v + c * a->KD, (size_t)D * sizeof *vp);
        for (int64_t d = D; d < j->dp; d++) vp[c * j->dp + d] = 0.0f;
    }
}

#ifdef HAVE_X86
/* ---- AVX-512: 32 registers, 16 lanes ------------------------------------------ */
#define TGT __attribute__((target("avx512f")))
#define SFX(x) x##_avx512
typedef __m512 vec;
#define VW 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VZERO _mm512_setzero_ps
#define VFMA _mm512_fmadd_ps
#define VMUL _mm512_mul_ps
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMAX _mm512_max_ps
#define VEXP exp512
#define HMAX _mm512_reduce_max_ps
#define HADD _mm512_reduce_add_ps
#define QK_R 6
#define QK_NK 4 /* 24 accumulators */
#define PV_ACC 24
#define PV_NV 4
#include "attn_fused_isa.h"
#undef TGT
#undef SFX
#undef VW
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VZERO
#undef VFMA
#undef VMUL
#undef VADD
#undef VSUB
#undef VMAX
#undef VEXP
#undef HMAX
#undef HADD
#undef QK_R
#undef QK_NK
#undef PV_ACC
#undef PV_NV

/* ---- AVX2 + FMA: 16 registers, 8 lanes ------------------------------------------ */
#define TGT __attribute__((target("avx2,fma")))
TGT static inline float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
TGT static inline float hadd256(__m256 v) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
}
#define SFX(x) x##_avx2
typedef __m256 vec2;
#define vec vec2
#define VW 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VZERO _mm256_setzero_ps
#define VFMA _mm256_fmadd_ps
#define VMUL _mm256_mul_ps
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMAX _mm256_max_ps
#define VEXP exp256
#define HMAX hmax256
#define HADD hadd256
#define QK_R 6
#define QK_NK 2 /* 12 accumulators */
#define PV_ACC 12
#define PV_NV 3
#include "attn_fused_isa.h"
#undef vec
#endif

int sd_cpu_attention_fused(sd_pool *pool, const sd_cpu_attn *a, int isa) {
#ifdef HAVE_X86
    if (isa != SD_ISA_AVX512 && isa != SD_ISA_AVX2) return 0;
    int vw = isa == SD_ISA_AVX512 ? 16 : 8;
    fused_job j = {0};
    j.a = a;
    j.kv_heads = a->heads / a->group;
    j.qb = a->Lq < QUERY_BLOCK ? a->Lq : QUERY_BLOCK;
    j.qblocks = (a->Lq + j.qb - 1) / j.qb;
    j.dp = (a->D + vw - 1) / vw * vw;
    /* keys per block: the packed K and V blocks about 96 KiB together */
    int64_t kb = 24576 / (2 * j.dp) / 32 * 32;
    if (kb < 32) kb = 32;
    if (kb > 512) kb = 512;
    j.kb = a->Lk < kb ? a->Lk : kb;
    j.kblocks = (a->Lk + j.kb - 1) / j.kb;
    j.kbp = (j.kb + vw - 1) / vw * vw;
    j.lkp = a->Lk;
    int64_t nkv = a->N * j.kv_heads, rpad = (j.qb + ROW_GROUP - 1) / ROW_GROUP * ROW_GROUP;
    int nt = sd_pool_threads(pool);
    j.kt = sd_cpu_alloc((size_t)(nkv * j.kblocks * a->D * j.kbp) * sizeof(float));
    j.vp = sd_cpu_alloc((size_t)(nkv * j.lkp * j.dp) * sizeof(float));
    j.qbuf = calloc((size_t)nt, sizeof *j.qbuf);
    j.obuf = calloc((size_t)nt, sizeof *j.obuf);
    j.sbuf = calloc((size_t)nt, sizeof *j.sbuf);
    j.mbuf = calloc((size_t)nt, sizeof *j.mbuf);
    j.lbuf = calloc((size_t)nt, sizeof *j.lbuf);
    int ok = j.kt && j.vp && j.qbuf && j.obuf && j.sbuf && j.mbuf && j.lbuf;
    for (int i = 0; ok && i < nt; i++)
        ok = (j.qbuf[i] = sd_cpu_alloc((size_t)(rpad * a->D) * sizeof(float))) &&
             (j.obuf[i] = sd_cpu_alloc((size_t)(rpad * j.dp) * sizeof(float))) &&
             (j.sbuf[i] = sd_cpu_alloc((size_t)(ROW_GROUP * j.kbp) * sizeof(float))) &&
             (j.mbuf[i] = malloc((size_t)rpad * sizeof(float))) &&
             (j.lbuf[i] = malloc((size_t)rpad * sizeof(double)));
    if (ok) {
        sd_pool_run(pool, nkv * j.kblocks, pack_task, &j);
        sd_pool_run(pool, a->N * a->heads * j.qblocks,
                    isa == SD_ISA_AVX512 ? task_avx512 : task_avx2, &j);
    }
    for (int i = 0; i < nt; i++) {
        if (j.qbuf) free(j.qbuf[i]);
        if (j.obuf) free(j.obuf[i]);
        if (j.sbuf) free(j.sbuf[i]);
        if (j.mbuf) free(j.mbuf[i]);
        if (j.lbuf) free(j.lbuf[i]);
    }
    free(j.qbuf), free(j.obuf), free(j.sbuf), free(j.mbuf), free(j.lbuf);
    free(j.kt), free(j.vp);
    return ok ? 1 : -1;
#else
    (void)pool, (void)a, (void)isa;
    return 0;
#endif
}
