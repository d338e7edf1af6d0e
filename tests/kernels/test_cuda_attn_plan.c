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
 * query's scores). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

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
    return sd_test_finish();
}
