/* dnnl_round.c - rounding of bf16-path inputs to bf16 (dnnl_bf16.h).
 *
 * Built with and without oneDNN (it is plain C). Memory-bound: every bf16 op
 * rounds its weight (up to 59 MB as F16 for a 1280x2560x3x3 conv) and its
 * activation, so the AVX-512 path does the RNE rounding with integer ops -
 * bit-identical to sd_bf16_from_f32, including NaN and denormals, which
 * AVX512_BF16's vcvtneps2bf16 would flush to zero.
 */
#include "dnnl_bf16.h"

#include <immintrin.h>
#include <string.h>

#define ROUND_GRAIN ((int64_t)1 << 16) /* elements per pool task */

__attribute__((target("avx512f"))) static inline __m256i rne16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, nan, qn);
    return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f"))) static void f32_avx512(const float *s, uint16_t *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i), rne16(_mm512_loadu_ps(s + i)));
    for (; i < n; i++) d[i] = sd_bf16_from_f32(s[i]);
}

__attribute__((target("avx512f"))) static void f16_avx512(const uint16_t *s, uint16_t *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            rne16(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i)))));
    for (; i < n; i++) d[i] = sd_bf16_from_f32(sd_f16_to_f32(s[i]));
}

static void round_range(sd_dtype dt, const char *src, uint16_t *dst, int64_t n, int avx512) {
    if (dt == SD_BF16) {
        memcpy(dst, src, (size_t)n * 2);
    } else if (dt == SD_F16) {
        const uint16_t *s = (const uint16_t *)src;
        if (avx512) f16_avx512(s, dst, n);
        else for (int64_t i = 0; i < n; i++) dst[i] = sd_bf16_from_f32(sd_f16_to_f32(s[i]));
    } else if (dt == SD_F8_E4M3 || dt == SD_F8_E5M2) {
        /* every fp8 value is a bf16 (fewer mantissa bits, a narrower
         * exponent): exact */
        const uint8_t *s = (const uint8_t *)src;
        const float *tab = dt == SD_F8_E4M3 ? sd_f8_e4m3_table() : sd_f8_e5m2_table();
        for (int64_t i = 0; i < n; i++) dst[i] = sd_bf16_from_f32(tab[s[i]]);
    } else {
        const float *s = (const float *)src;
        if (avx512) f32_avx512(s, dst, n);
        else for (int64_t i = 0; i < n; i++) dst[i] = sd_bf16_from_f32(s[i]);
    }
}

typedef struct {
    sd_dtype dt;
    const char *src;
    uint16_t *dst;
    int64_t n;
    int avx512;
} round_job;

static void round_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const round_job *j = ctx;
    int64_t lo = t * ROUND_GRAIN, hi = lo + ROUND_GRAIN < j->n ? lo + ROUND_GRAIN : j->n;
    round_range(j->dt, j->src + lo * (int64_t)sd_dtype_size(j->dt), j->dst + lo, hi - lo,
                j->avx512);
}

void sd_bf16_round(sd_pool *pool, sd_dtype dt, const void *src, uint16_t *dst, int64_t n) {
    round_job j = {dt, src, dst, n, sd_cpu_isa() >= SD_ISA_AVX512};
    sd_pool_run(pool, sd_cpu_chunks(n, ROUND_GRAIN), round_task, &j);
}
