/* attn_fused.c - f32 attention fused per query block, with AVX-512 and AVX2
 * paths (attention.c dispatches here; the scalar path and bf16 stay on its
 * GEMM kernel).
 *
 * SD's heads are narrow (D = 40..160), so the two products as GEMMs have a
 * tiny K (QK^T) or a narrow N (PV) that a packed BLAS GEMM runs at a third
 * of its rate, and the softmax between them streamed a 1 MiB score block
 * through L2 (38.7 GFLOP/s at 4096 tokens, 8 x 40 heads, one thread). Here:
 *
 * - K is transposed into [key block][D][keys] and V copied into contiguous
 *   rows (pack_task), so the products read them with constant offsets. Not
 *   for the whole call at once: the (batch, k/v head) pairs run in groups
 *   of about PACK_TASKS query tasks per thread (one pair when it alone has
 *   that many, as SD's and Flux's self-attention do), each group packed,
 *   then its query tasks run, then the buffer reused by the next group. A
 *   whole-call pack was N * heads * Lk * D floats twice: 21 MB at SD1.5's
 *   64x64 level (batch 2), 113 MB for Flux at 1024x1024, a step's peak RSS.
 * - Each task takes up to QUERY_BLOCK query rows of one (batch, head),
 *   transposed to Q^T [D][rows], and walks the key blocks (K and V blocks
 *   of about KEY_BYTES); per block, per group of 2 vectors of query rows:
 *   S^T = K Q^T by a register-blocked microkernel (12 keys x 32 rows on
 *   AVX-512, the key values broadcast), the online-softmax step lane-wise
 *   (each row is a lane: max, rescale and sum need no horizontal
 *   reductions; exp of vexp.h), then O^T += V^T P^T by a second microkernel
 *   (12 head dims x 32 rows, the V values broadcast). Neither product pads D
 *   or the keys to whole vectors (D = 40 runs 40 FMAs a row, not 48); only
 *   the query rows are padded, to the group.
 * - Bias (added after scaling), causal masking (whole groups skipped past
 *   the diagonal) and grouped-query heads as attention.c; padding rows never
 *   reach the output.
 *
 * Numerics: the scores and the probabilities are the same f32 quantities as
 * on the GEMM path, summed in a different order; a block's probabilities are
 * summed in float lanes, the running sum in double.
 *
 * Measured (one thread, CPU time, on a loaded 2-vCPU Cascade Lake: +-30 %
 * run to run, so best of several): 4096 tokens x 8 heads x 40 70-75 GFLOP/s
 * against the GEMM kernel's 43-46; 1536 x 24 x 128 (Flux) 70-79 against
 * 45-54; 1024 x 8 x 80 65-71. Row-major tiles with D padded to vectors and
 * horizontal reductions per row ran within the noise of this layout. */
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
#define KEY_BYTES 49152 /* 144 keys at D = 40 (L1 + L2), 96 from D = 64 (L2) */
/* query tasks per thread in one pack group at least: the pool's barrier
 * after a group leaves threads idle for at most about one task */
#define PACK_TASKS 4

typedef struct {
    const sd_cpu_attn *a;
    int64_t kv_heads, qb, qblocks, kb, kblocks, kbp, lkp;
    int64_t p0;   /* the group's first (batch, k/v head) pair, n * kv_heads + kh */
    int64_t tpp;  /* query tasks per pair: group * qblocks */
    float *kt;    /* the group's pairs: [pair - p0][kblocks][D][kbp] */
    float *vp;    /* [pair - p0][Lk][D] */
    float **qbuf, **obuf, **sbuf, **mbuf;
    double **lbuf;
} fused_job;

/* K of one (batch, k/v head, key block) of the group transposed to [D][kbp]
 * (zeros past the keys), and its V rows contiguous. */
static void pack_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const fused_job *j = ctx;
    const sd_cpu_attn *a = j->a;
    int64_t kb = t % j->kblocks, lp = t / j->kblocks, kvh = j->p0 + lp;
    int64_t n = kvh / j->kv_heads, kh = kvh % j->kv_heads, D = a->D;
    int64_t k0 = kb * j->kb, kn = a->Lk - k0 < j->kb ? a->Lk - k0 : j->kb;
    const float *k = a->k + (n * a->Lk + k0) * a->KD + kh * D;
    const float *v = a->v + (n * a->Lk + k0) * a->KD + kh * D;
    float *kt = j->kt + (lp * j->kblocks + kb) * D * j->kbp;
    float *vp = j->vp + (lp * j->lkp + k0) * D;
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = kn; c < j->kbp; c++) kt[d * j->kbp + c] = 0.0f;
    for (int64_t c = 0; c < kn; c++) {
        const float *kr = k + c * a->KD;
        for (int64_t d = 0; d < D; d++) kt[d * j->kbp + c] = kr[d];
        memcpy(vp + c * D, v + c * a->KD, (size_t)D * sizeof *vp);
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
#define VNOTINF0(m)                                                                            \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), m,      \
                         _mm512_setzero_ps())
#define NKEY 12 /* 24 accumulators */
#define ND 12
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
#undef VNOTINF0
#undef NKEY
#undef ND

/* ---- AVX2 + FMA: 16 registers, 8 lanes ------------------------------------------ */
#define TGT __attribute__((target("avx2,fma")))
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
#define VNOTINF0(m)                                                                            \
    _mm256_blendv_ps(m, _mm256_setzero_ps(),                                                   \
                     _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ))
#define NKEY 6 /* 12 accumulators */
#define ND 6
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
    /* keys per block: the packed K and V blocks about KEY_BYTES together,
     * a multiple of the scores tile's keys */
    int64_t kb = KEY_BYTES / (int64_t)(2 * sizeof(float) * a->D) / 12 * 12;
    if (kb < 96) kb = 96;
    if (kb > 516) kb = 516;
    j.kb = a->Lk < kb ? a->Lk : kb;
    j.kblocks = (a->Lk + j.kb - 1) / j.kb;
    j.kbp = (j.kb + 15) / 16 * 16;
    j.lkp = a->Lk;
    int64_t nkv = a->N * j.kv_heads, rpad = (j.qb + 2 * vw - 1) / (2 * vw) * (2 * vw);
    int nt = sd_pool_threads(pool);
    /* pairs per pack group: enough query tasks for every thread, then the
     * groups evened out (12 pairs by 8 run as 6 + 6, not 8 + 4) */
    j.tpp = a->group * j.qblocks;
    int64_t gp = (PACK_TASKS * (int64_t)nt + j.tpp - 1) / j.tpp;
    if (gp > nkv) gp = nkv;
    int64_t ngroups = (nkv + gp - 1) / gp;
    gp = (nkv + ngroups - 1) / ngroups;
    j.kt = sd_cpu_alloc((size_t)(gp * j.kblocks * a->D * j.kbp) * sizeof(float));
    j.vp = sd_cpu_alloc((size_t)(gp * j.lkp * a->D) * sizeof(float));
    j.qbuf = calloc((size_t)nt, sizeof *j.qbuf);
    j.obuf = calloc((size_t)nt, sizeof *j.obuf);
    j.sbuf = calloc((size_t)nt, sizeof *j.sbuf);
    j.mbuf = calloc((size_t)nt, sizeof *j.mbuf);
    j.lbuf = calloc((size_t)nt, sizeof *j.lbuf);
    int ok = j.kt && j.vp && j.qbuf && j.obuf && j.sbuf && j.mbuf && j.lbuf;
    for (int i = 0; ok && i < nt; i++)
        ok = (j.qbuf[i] = sd_cpu_alloc((size_t)(rpad * a->D) * sizeof(float))) &&
             (j.obuf[i] = sd_cpu_alloc((size_t)(rpad * a->D) * sizeof(float))) &&
             (j.sbuf[i] = sd_cpu_alloc((size_t)(2 * vw * j.kb) * sizeof(float))) &&
             (j.mbuf[i] = malloc((size_t)rpad * sizeof(float))) &&
             (j.lbuf[i] = malloc((size_t)rpad * sizeof(double)));
    for (j.p0 = 0; ok && j.p0 < nkv; j.p0 += gp) {
        int64_t np = nkv - j.p0 < gp ? nkv - j.p0 : gp;
        sd_pool_run(pool, np * j.kblocks, pack_task, &j);
        sd_pool_run(pool, np * j.tpp, isa == SD_ISA_AVX512 ? task_avx512 : task_avx2, &j);
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
