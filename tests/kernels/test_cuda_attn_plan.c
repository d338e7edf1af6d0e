/* test_cuda_attn_plan.c - the host-side arithmetic of the CUDA backend's
 * tensor-core attention (kernels/cuda/attn_plan.h), on the CPU: it runs on
 * every machine, with or without CUDA or a GPU (the file is compiled into
 * this test directly).
 *
 * Checked for fixed and seeded random shapes and budgets: the GEMM batch and
 * group, that the buffers hold what the layout needs (sizes recomputed here
 * from the layout, not copied from the plan), 256-byte alignment, no
 * overlap, a chunk's scratch within the budget and the chunk the largest of
 * its step that fits, the chunks tiling [0, Lq) in order, and the refusals
 * (bad shapes, int limits, sizes that would overflow, a budget below one
 * query's scores).
 *
 * And the layout end to end: attention computed the way cuda_attn.c does it
 * (pack per attn_plan.h, the two GEMMs exactly as sd_cuda_attn_plan_gemms
 * describes them through a column-major emulation of
 * cublasGemmStridedBatchedEx, the softmax and scatter row maps of
 * cuda_kernels.h), in bf16 storage, against plain attention in double on the
 * same bf16-rounded q, k, v. This checks the descriptors, offsets and index
 * maps the GPU code uses, not the GPU. */
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attn_plan.h"
#include "testutil.h"

static uint64_t rng = 0x243f6a8885a308d3ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

static size_t up(size_t n) { return (n + 255) / 256 * 256; }

/* What one chunk of qc queries needs (attn_plan.h's layout). */
static size_t need(int64_t batch, int64_t group, int64_t qc, int64_t Lk, int64_t D) {
    size_t rows = (size_t)(batch * group * qc);
    return up(rows * (size_t)Lk * 4) + up(rows * (size_t)Lk * 2) + rows * (size_t)D * 4;
}

static void check_plan(int64_t N, int64_t Lq, int64_t Lk, int64_t D, int H, int Hkv, size_t budget,
                       int expect_ok) {
    sd_cuda_attn_plan p;
    int rc = sd_cuda_attn_plan_make(N, Lq, Lk, D, H, Hkv, 2, budget, &p);
    char what[160];
    snprintf(what, sizeof what, "N %lld Lq %lld Lk %lld D %lld heads %d/%d budget %zu",
             (long long)N, (long long)Lq, (long long)Lk, (long long)D, H, Hkv, budget);
    if (expect_ok >= 0) CHECK_MSG((rc == 0) == expect_ok, "%s: plan %s", what, rc ? "refused" : "made");
    if (rc != 0) {
        /* a refusal for lack of budget only when one query does not fit */
        if (expect_ok < 0 && H % Hkv == 0)
            CHECK_MSG(need(N * Hkv, H / Hkv, 1, Lk, D) > budget, "%s: refused though one query fits", what);
        return;
    }
    int64_t G = H / Hkv;
    CHECK_MSG(p.batch == N * Hkv && p.group == G, "%s: batch %lld group %lld", what,
              (long long)p.batch, (long long)p.group);
    /* packed inputs: Q16 [N, Hkv, Lq, G, D], K16 and V16 [N, Hkv, Lk, D], 2 bytes each */
    size_t q16 = (size_t)(N * Lq * H * D) * 2, k16 = (size_t)(N * Hkv * Lk * D) * 2;
    CHECK_MSG(p.off_k % 256 == 0 && p.off_v % 256 == 0, "%s: packed offsets unaligned", what);
    CHECK_MSG(p.off_k >= q16 && p.off_v >= p.off_k + k16 && p.packed_bytes >= p.off_v + k16,
              "%s: packed buffers overlap or are short (%zu %zu %zu for %zu %zu)", what, p.off_k,
              p.off_v, p.packed_bytes, q16, k16);
    CHECK_MSG(p.packed_bytes <= up(q16) + up(k16) + k16, "%s: packed buffer larger than needed", what);
    /* the chunk scratch: S F32, P 16-bit, O F32 for q_chunk * G rows per batch item */
    size_t rows = (size_t)(p.batch * G * p.q_chunk);
    CHECK_MSG(p.off_p % 256 == 0 && p.off_o % 256 == 0, "%s: chunk offsets unaligned", what);
    CHECK_MSG(p.off_p >= rows * (size_t)Lk * 4 && p.off_o >= p.off_p + rows * (size_t)Lk * 2 &&
                  p.chunk_bytes >= p.off_o + rows * (size_t)D * 4,
              "%s: chunk buffers overlap or are short", what);
    CHECK_MSG(p.chunk_bytes == need(p.batch, G, p.q_chunk, Lk, D), "%s: chunk bytes %zu, layout %zu",
              what, p.chunk_bytes, need(p.batch, G, p.q_chunk, Lk, D));
    CHECK_MSG(p.chunk_bytes <= budget, "%s: chunk %zu bytes over the budget", what, p.chunk_bytes);
    CHECK_MSG(p.q_chunk >= 1 && p.q_chunk <= Lq, "%s: q_chunk %lld", what, (long long)p.q_chunk);
    /* the largest chunk of its step: all of Lq, else a multiple of 64 (8, 1)
     * such that one more step does not fit */
    if (p.q_chunk < Lq) {
        int64_t step = p.q_chunk >= 64 ? 64 : p.q_chunk >= 8 ? 8 : 1;
        CHECK_MSG(p.q_chunk % step == 0, "%s: q_chunk %lld not a multiple of %lld", what,
                  (long long)p.q_chunk, (long long)step);
        int64_t more = p.q_chunk + step;
        CHECK_MSG(more >= Lq || need(p.batch, G, more, Lk, D) > budget,
                  "%s: q_chunk %lld, but %lld queries fit", what, (long long)p.q_chunk, (long long)more);
        if (step > 1 && p.q_chunk < 64)
            CHECK_MSG(need(p.batch, G, 64, Lk, D) > budget, "%s: 64 queries fit, chunk %lld", what,
                      (long long)p.q_chunk);
    } else {
        CHECK_MSG(p.n_chunks == 1, "%s: all of Lq in %lld chunks", what, (long long)p.n_chunks);
    }
    /* the chunks tile [0, Lq) in order */
    int64_t next_q = 0;
    for (int64_t i = 0; i < p.n_chunks; i++) {
        int64_t q0, qc;
        sd_cuda_attn_plan_chunk(&p, Lq, i, &q0, &qc);
        if (q0 != next_q || qc < 1 || qc > p.q_chunk) {
            CHECK_MSG(0, "%s: chunk %lld is [%lld, +%lld), expected start %lld", what, (long long)i,
                      (long long)q0, (long long)qc, (long long)next_q);
            return;
        }
        next_q = q0 + qc;
    }
    CHECK_MSG(next_q == Lq, "%s: chunks end at %lld", what, (long long)next_q);
}


/* ---- the layout end to end (see the top) ---------------------------------------- */

static uint16_t to_bf16(float f) { /* round to nearest even (finite values) */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)(u >> 16);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float frand(void) { return (float)((next() >> 40) / 16777216.0 * 2.0 - 1.0); }

/* cublasGemmStridedBatchedEx, column-major, bf16 A and B, f32 C, beta 0 */
static void emu_gemm(const sd_cuda_attn_gemm *g, float alpha, const char *abuf, const char *bbuf,
                     char *cbuf) {
    for (int bi = 0; bi < g->batch; bi++) {
        const uint16_t *A = (const uint16_t *)(abuf + g->a_off) + bi * g->stride_a;
        const uint16_t *B = (const uint16_t *)(bbuf + g->b_off) + bi * g->stride_b;
        float *C = (float *)(cbuf + g->c_off) + bi * g->stride_c;
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) {
                float acc = 0.0f;
                for (int l = 0; l < g->k; l++) {
                    float a = from_bf16(g->trans_a ? A[l + (int64_t)i * g->lda] : A[i + (int64_t)l * g->lda]);
                    acc += a * from_bf16(B[l + (int64_t)j * g->ldb]);
                }
                C[i + (int64_t)j * g->ldc] = alpha * acc;
            }
    }
}

/* attn_plan.h: y [N, Hkv, L, group, D] <- x [N, L, Hkv*group*D] */
static void emu_pack(const float *x, uint16_t *y, int64_t N, int64_t L, int64_t Hkv, int64_t G,
                     int64_t D) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < Hkv; j++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t g = 0; g < G; g++)
                    for (int64_t d = 0; d < D; d++)
                        y[(((n * Hkv + j) * L + l) * G + g) * D + d] =
                            to_bf16(x[(n * L + l) * Hkv * G * D + (j * G + g) * D + d]);
}

/* bias kind: 0 none, 1 [N, H, Lq, Lk], 2 [1, 1, 1, Lk] with keys masked */
static void emulate(int64_t N, int64_t Lq, int64_t Lk, int64_t D, int H, int Hkv, int causal,
                    int bias_kind, size_t budget) {
    char what[160];
    snprintf(what, sizeof what, "emulated N %lld Lq %lld Lk %lld D %lld heads %d/%d causal %d bias %d",
             (long long)N, (long long)Lq, (long long)Lk, (long long)D, H, Hkv, causal, bias_kind);
    sd_cuda_attn_plan p;
    if (sd_cuda_attn_plan_make(N, Lq, Lk, D, H, Hkv, 2, budget, &p) != 0) {
        CHECK_MSG(0, "%s: no plan", what);
        return;
    }
    int64_t G = H / Hkv, HD = H * D, KD = Hkv * D;
    float scale = 1.0f / sqrtf((float)D);
    float *q = malloc(sizeof(float) * N * Lq * HD), *k = malloc(sizeof(float) * N * Lk * KD),
          *v = malloc(sizeof(float) * N * Lk * KD), *out = malloc(sizeof(float) * N * Lq * HD),
          *bias = NULL;
    char *packed = calloc(1, p.packed_bytes), *scratch = calloc(1, p.chunk_bytes);
    int64_t bs[3] = {0, 0, 0};
    if (bias_kind == 1) {
        bias = malloc(sizeof(float) * N * H * Lq * Lk);
        for (int64_t i = 0; i < N * H * Lq * Lk; i++) bias[i] = frand();
        bs[0] = H * Lq * Lk, bs[1] = Lq * Lk, bs[2] = Lk;
    } else if (bias_kind == 2) {
        bias = malloc(sizeof(float) * Lk);
        for (int64_t i = 0; i < Lk; i++) bias[i] = i % 3 == 1 ? -INFINITY : 0.5f * frand();
    }
    for (int64_t i = 0; i < N * Lq * HD; i++) q[i] = 2 * frand(), out[i] = NAN;
    for (int64_t i = 0; i < N * Lk * KD; i++) k[i] = 2 * frand(), v[i] = frand();
    emu_pack(q, (uint16_t *)packed, N, Lq, Hkv, G, D);
    emu_pack(k, (uint16_t *)(packed + p.off_k), N, Lk, Hkv, 1, D);
    emu_pack(v, (uint16_t *)(packed + p.off_v), N, Lk, Hkv, 1, D);
    for (int64_t c = 0; c < p.n_chunks; c++) {
        int64_t q0, qc;
        sd_cuda_attn_plan_chunk(&p, Lq, c, &q0, &qc);
        sd_cuda_attn_gemm gs, gv;
        sd_cuda_attn_plan_gemms(&p, Lq, Lk, D, q0, qc, &gs, &gv);
        emu_gemm(&gs, scale, packed, packed, scratch);
        /* cuda_kernels.h's softmax rows: r = (b*qc + qi)*group + g */
        const float *S = (const float *)scratch;
        uint16_t *P = (uint16_t *)(scratch + p.off_p);
        for (int64_t r = 0; r < p.batch * qc * G; r++) {
            int64_t g = r % G, t = r / G, qi = t % qc, b = t / qc;
            int64_t n = b / Hkv, h = (b % Hkv) * G + g, qq = q0 + qi;
            const float *br = bias ? bias + n * bs[0] + h * bs[1] + qq * bs[2] : NULL;
            float m = -INFINITY, sum = 0.0f;
            for (int64_t j = 0; j < Lk; j++)
                if (!(causal && j > qq)) m = fmaxf(m, S[r * Lk + j] + (br ? br[j] : 0.0f));
            for (int64_t j = 0; j < Lk; j++)
                if (!(causal && j > qq) && m > -INFINITY) sum += expf(S[r * Lk + j] + (br ? br[j] : 0.0f) - m);
            for (int64_t j = 0; j < Lk; j++)
                P[r * Lk + j] = to_bf16((causal && j > qq) || m == -INFINITY ? 0.0f
                                        : expf(S[r * Lk + j] + (br ? br[j] : 0.0f) - m) / sum);
        }
        emu_gemm(&gv, 1.0f, packed, scratch, scratch);
        /* scatter: out[n][q0+qi][(j*group+g)*D + d] = O[b][qi][g][d] */
        const float *O = (const float *)(scratch + p.off_o);
        for (int64_t i = 0; i < p.batch * qc * G * D; i++) {
            int64_t d = i % D, t = i / D, g = t % G;
            t /= G;
            int64_t qi = t % qc, b = t / qc, n = b / Hkv, j = b % Hkv;
            out[(n * Lq + q0 + qi) * HD + (j * G + g) * D + d] = O[i];
        }
    }
    /* plain attention in double on the bf16-rounded inputs; the probabilities
     * are rounded to bf16 before P V (2^-9 relative, |v| <= 1): 2^-8 bounds it */
    double worst = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                int64_t kh = h / G;
                double m = -INFINITY, sum = 0, *sc = malloc(sizeof(double) * Lk);
                for (int64_t j = 0; j < Lk; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)from_bf16(to_bf16(q[(n * Lq + i) * HD + h * D + d])) *
                               from_bf16(to_bf16(k[(n * Lk + j) * KD + kh * D + d]));
                    sc[j] = causal && j > i ? -INFINITY
                            : dot * scale + (bias ? bias[n * bs[0] + h * bs[1] + i * bs[2] + j] : 0.0);
                    if (sc[j] > m) m = sc[j];
                }
                for (int64_t j = 0; j < Lk; j++) sum += m == -INFINITY ? 0 : exp(sc[j] - m);
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < Lk && m > -INFINITY; j++)
                        o += exp(sc[j] - m) / sum * from_bf16(to_bf16(v[(n * Lk + j) * KD + kh * D + d]));
                    double e = fabs(o - out[(n * Lq + i) * HD + h * D + d]);
                    if (!(e <= worst)) worst = e; /* NaN: an output never written */
                }
                free(sc);
            }
    CHECK_MSG(worst <= 1.0 / 256, "%s: %lld chunks of %lld, max error %.3g", what,
              (long long)p.n_chunks, (long long)p.q_chunk, worst);
    free(q), free(k), free(v), free(out), free(bias), free(packed), free(scratch);
}

int main(void) {
    const size_t MiB = (size_t)1 << 20;
    /* the families' attention shapes at the default budget (cuda_backend.c: 256 MiB) */
    check_plan(2, 4096, 4096, 40, 8, 8, 256 * MiB, 1);   /* SD1.5 512x512, CFG batch */
    check_plan(2, 4096, 77, 40, 8, 8, 256 * MiB, 1);     /* its cross-attention */
    check_plan(2, 4096, 4096, 64, 10, 10, 256 * MiB, 1); /* SDXL 1024x1024 level 1 */
    check_plan(1, 4608, 4608, 128, 24, 24, 256 * MiB, 1); /* Flux 1024x1024 + 512 tokens */
    check_plan(1, 16384, 16384, 512, 1, 1, 256 * MiB, 1); /* the VAE's mid attention at 1024 */
    check_plan(2, 77, 77, 64, 12, 12, 256 * MiB, 1);      /* CLIP-L */
    check_plan(1, 512, 512, 128, 32, 8, 256 * MiB, 1);    /* Qwen3 GQA */
    /* one chunk when everything fits; small budgets: steps of 8 and 1 */
    check_plan(1, 100, 50, 16, 2, 2, 256 * MiB, 1);
    check_plan(2, 300, 77, 40, 4, 2, 65536, 1);
    check_plan(1, 150, 150, 64, 2, 2, 100000, 1);
    check_plan(1, 1000, 1000, 8, 1, 1, need(1, 1, 5, 1000, 8), 1);
    /* refusals */
    check_plan(1, 10, 10, 8, 3, 2, 256 * MiB, 0);                     /* heads % kv_heads */
    check_plan(0, 10, 10, 8, 1, 1, 256 * MiB, 0);                     /* empty */
    check_plan(1, 10, 0, 8, 1, 1, 256 * MiB, 0);
    check_plan(1, 10, 10, 8, 1, 1, need(1, 1, 1, 10, 8) - 1, 0);      /* not one query */
    check_plan(1, 10, 10, 8, 1, 1, 0, 0);                             /* budget 0: the F32 kernel */
    check_plan(1, 10, (int64_t)INT_MAX + 1, 8, 1, 1, SIZE_MAX, 0);    /* cuBLAS's int */
    check_plan(1, (int64_t)1 << 40, 4, 4, 1 << 20, 1, SIZE_MAX, 0);   /* size overflow */
    check_plan(1, 1 << 20, 4, 1 << 30, 1 << 20, 1 << 20, SIZE_MAX, 0);
    check_plan(1, 1 << 30, 1 << 30, 1 << 20, 8, 8, 256 * MiB, 0);    /* one query: 48 GiB */
    sd_cuda_attn_plan p;
    CHECK(sd_cuda_attn_plan_make(1, 4, 4, 4, 1, 1, 0, 1 << 20, &p) != 0); /* element size 0 */
    /* seeded random shapes and budgets */
    for (int i = 0; i < 3000; i++) {
        int Hkv = (int)pick(1, 6), G = (int)pick(1, 4);
        int64_t N = pick(1, 3), Lq = pick(1, 3000), Lk = pick(1, 3000), D = pick(1, 160);
        size_t one = need(N * Hkv, G, 1, Lk, D);
        size_t budget = i % 4 == 0 ? one - 1 : one + (size_t)(next() % (64 * one + 1));
        check_plan(N, Lq, Lk, D, Hkv * G, Hkv, budget, i % 4 == 0 ? 0 : 1);
    }
    for (int i = 0; i < 300; i++) /* budgets around the boundary: refused only below one query */
        check_plan(1, pick(1, 64), pick(1, 64), pick(1, 64), 1, 1, (size_t)pick(0, 4096), -1);
    /* the layout end to end: one chunk, many chunks with a short last one,
     * grouped heads, batch items, causal, both bias kinds */
    emulate(1, 5, 7, 3, 1, 1, 0, 0, 256 * MiB);
    emulate(2, 37, 29, 16, 4, 2, 0, 1, 256 * MiB);
    emulate(2, 70, 29, 16, 4, 2, 1, 1, 20000);
    emulate(1, 45, 45, 8, 6, 2, 1, 0, 6000);
    emulate(3, 33, 50, 24, 2, 1, 0, 2, 9000);
    emulate(2, 19, 19, 40, 3, 3, 1, 2, 3000);
    return sd_test_finish();
}
