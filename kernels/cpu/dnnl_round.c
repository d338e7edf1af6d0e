/* dnnl_round.c - rounding of bf16-path inputs to bf16 (dnnl_bf16.h).
 *
 * Built with and without oneDNN (it is plain C). Memory-bound: every bf16 op
 * rounds its weight (up to 59 MB as F16 for a 1280x2560x3x3 conv) unless it
 * is packed already, and its activation, so the vector paths do the RNE
 * rounding with integer ops - bit-identical to sd_bf16_from_f32, including
 * NaN and denormals, which AVX512_BF16's vcvtneps2bf16 would flush to zero.
 * Two outputs: bf16 (oneDNN's inputs) and bf16 values in f32 storage (the
 * emulated path's inputs to our f32 kernels: the low 16 bits cleared).
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

/* RNE to bf16 kept as f32 bits: the 8 lanes' rounded values with the low
 * half cleared (NaN made quiet, as sd_bf16_from_f32). */
__attribute__((target("avx2"))) static inline __m256i rne8_f32(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
    /* |u| > inf as signed compares: both sides are below 2^31 */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i qn = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)),
                                  _mm256_set1_epi32((int)0xffff0000u));
    return _mm256_blendv_epi8(r, qn, nan);
}

__attribute__((target("avx512f"))) static inline __m512i rne16_f32(__m512 v) {
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(rne16(v)), 16);
}

static inline float bf16_as_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

__attribute__((target("avx512f"))) static void f32f_avx512(const float *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512((__m512i *)(d + i), rne16_f32(_mm512_loadu_ps(s + i)));
    for (; i < n; i++) d[i] = bf16_as_f32(sd_bf16_from_f32(s[i]));
}

__attribute__((target("avx512f"))) static void f16f_avx512(const uint16_t *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512((__m512i *)(d + i), rne16_f32(_mm512_cvtph_ps(
                                                    _mm256_loadu_si256((const __m256i *)(s + i)))));
    for (; i < n; i++) d[i] = bf16_as_f32(sd_bf16_from_f32(sd_f16_to_f32(s[i])));
}

/* fp8 through its decode table (a gather per 16 bytes), then the same RNE
 * as every other source: bit-identical to the scalar path, NaNs included. */
__attribute__((target("avx512f"))) static inline __m512 f8_gather(const uint8_t *s,
                                                                  const float *tab) {
    return _mm512_i32gather_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s)), tab, 4);
}

__attribute__((target("avx512f"))) static void f8f_avx512(const uint8_t *s, float *d, int64_t n,
                                                         const float *tab) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_si512((__m512i *)(d + i), rne16_f32(f8_gather(s + i, tab)));
    for (; i < n; i++) d[i] = bf16_as_f32(sd_bf16_from_f32(tab[s[i]]));
}

__attribute__((target("avx512f"))) static void f8_avx512(const uint8_t *s, uint16_t *d, int64_t n,
                                                        const float *tab) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(d + i), rne16(f8_gather(s + i, tab)));
    for (; i < n; i++) d[i] = sd_bf16_from_f32(tab[s[i]]);
}

__attribute__((target("avx2"))) static void f32f_avx2(const float *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(d + i), rne8_f32(_mm256_loadu_ps(s + i)));
    for (; i < n; i++) d[i] = bf16_as_f32(sd_bf16_from_f32(s[i]));
}

/* sd_cpu_isa() says AVX2 only with FMA and F16C (isa.c). */
__attribute__((target("avx2,f16c"))) static void f16f_avx2(const uint16_t *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(d + i),
                            rne8_f32(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)))));
    for (; i < n; i++) d[i] = bf16_as_f32(sd_bf16_from_f32(sd_f16_to_f32(s[i])));
}

static void round_range_f32(sd_dtype dt, const char *src, float *dst, int64_t n, int isa) {
    if (dt == SD_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_as_f32(s[i]);
    } else if (dt == SD_F8_E4M3 || dt == SD_F8_E5M2) {
        /* every fp8 value is a bf16: exact, NaNs made quiet as above */
        const uint8_t *s = (const uint8_t *)src;
        const float *tab = dt == SD_F8_E4M3 ? sd_f8_e4m3_table() : sd_f8_e5m2_table();
        if (isa >= SD_ISA_AVX512) f8f_avx512(s, dst, n, tab);
        else for (int64_t i = 0; i < n; i++) dst[i] = bf16_as_f32(sd_bf16_from_f32(tab[s[i]]));
    } else if (dt == SD_F16) {
        const uint16_t *s = (const uint16_t *)src;
        if (isa >= SD_ISA_AVX512) f16f_avx512(s, dst, n);
        else if (isa >= SD_ISA_AVX2) f16f_avx2(s, dst, n);
        else for (int64_t i = 0; i < n; i++) dst[i] = bf16_as_f32(sd_bf16_from_f32(sd_f16_to_f32(s[i])));
    } else {
        const float *s = (const float *)src;
        if (isa >= SD_ISA_AVX512) f32f_avx512(s, dst, n);
        else if (isa >= SD_ISA_AVX2) f32f_avx2(s, dst, n);
        else for (int64_t i = 0; i < n; i++) dst[i] = bf16_as_f32(sd_bf16_from_f32(s[i]));
    }
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
        if (avx512) f8_avx512(s, dst, n, tab);
        else for (int64_t i = 0; i < n; i++) dst[i] = sd_bf16_from_f32(tab[s[i]]);
    } else {
        const float *s = (const float *)src;
        if (avx512) f32_avx512(s, dst, n);
        else for (int64_t i = 0; i < n; i++) dst[i] = sd_bf16_from_f32(s[i]);
    }
}

typedef struct {
    sd_dtype dt;
    const char *src;
    void *dst;
    int64_t n;
    int isa, to_f32;
} round_job;

static void round_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const round_job *j = ctx;
    int64_t lo = t * ROUND_GRAIN, hi = lo + ROUND_GRAIN < j->n ? lo + ROUND_GRAIN : j->n;
    const char *src = j->src + lo * (int64_t)sd_dtype_size(j->dt);
    if (j->to_f32) round_range_f32(j->dt, src, (float *)j->dst + lo, hi - lo, j->isa);
    else round_range(j->dt, src, (uint16_t *)j->dst + lo, hi - lo, j->isa >= SD_ISA_AVX512);
}

void sd_bf16_round(sd_pool *pool, sd_dtype dt, const void *src, uint16_t *dst, int64_t n) {
    round_job j = {dt, src, dst, n, sd_cpu_isa(), 0};
    sd_pool_run(pool, sd_cpu_chunks(n, ROUND_GRAIN), round_task, &j);
}

void sd_bf16_round_row(const float *src, uint16_t *dst, int64_t n) {
    round_range(SD_F32, (const char *)src, dst, n, sd_cpu_isa() >= SD_ISA_AVX512);
}

void sd_bf16_round_f32_isa(sd_pool *pool, sd_dtype dt, const void *src, float *dst, int64_t n,
                           int isa) {
    round_job j = {dt, src, dst, n, isa, 1};
    sd_pool_run(pool, sd_cpu_chunks(n, ROUND_GRAIN), round_task, &j);
}

void sd_bf16_round_f32(sd_pool *pool, sd_dtype dt, const void *src, float *dst, int64_t n) {
    sd_bf16_round_f32_isa(pool, dt, src, dst, n, sd_cpu_isa());
}
