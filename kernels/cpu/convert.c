/* convert.c - F16/BF16/fp8/quantized -> F32 widening of weights kept in
 * their stored dtype (the quantized types as core/quant.h computes them,
 * here spread over the pool's threads).
 *
 * Weights stay F16/BF16/fp8 in memory (usually the checkpoint's own mmap'd
 * bytes), halving (quartering) resident weight memory; an op that reads one gets an F32
 * copy made here just before it runs and freed just after (backend.c), so
 * only one layer's weight is ever widened at a time. Widening is exact, so
 * results equal those of weights uploaded as F32. The F16 path uses the
 * F16C instruction (8 or 16 halves per instruction) when the CPU has it:
 * the scalar converter costs ~10x more and would show up in every step.
 */
#include "cpu.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define CONVERT_GRAIN ((int64_t)1 << 16) /* elements per pool task */

__attribute__((target("avx512f"))) static void f16_avx512(const uint16_t *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    for (; i < n; i++) d[i] = sd_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f16_f16c(const uint16_t *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = sd_f16_to_f32(s[i]);
}

/* fp8: a gather from the 256-entry table per 16 bytes (the table is the
 * definition, NaN payloads included); 0.29 vs 1.2 ns per element scalar. */
__attribute__((target("avx512f"))) static void f8_avx512(const uint8_t *s, float *d, int64_t n,
                                                        const float *tab) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm512_storeu_ps(d + i, _mm512_i32gather_ps(idx, tab, 4));
    }
    for (; i < n; i++) d[i] = tab[s[i]];
}

static void f16_scalar(const uint16_t *s, float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = sd_f16_to_f32(s[i]);
}

/* bf16 is the top half of an f32: a shift, which the compiler vectorises. */
static void bf16_widen(const uint16_t *s, float *d, int64_t n) {
    uint32_t *u = (uint32_t *)d;
    for (int64_t i = 0; i < n; i++) u[i] = (uint32_t)s[i] << 16;
}

/* CPUID's F16C bit, read directly: clang before 15 does not know the
 * "f16c" name of __builtin_cpu_supports (the fuzz build uses clang). */
static int has_f16c(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

void sd_cpu_widen(sd_dtype dt, const void *src, float *dst, int64_t n, int isa) {
    const uint16_t *s = src;
    if (dt == SD_BF16) {
        bf16_widen(s, dst, n);
    } else if (dt == SD_F16) {
        /* sd_cpu_isa() says AVX2 for AVX2+FMA; F16C comes with those on every
         * CPU we know of, but check it rather than assume */
        if (isa >= SD_ISA_AVX512) f16_avx512(s, dst, n);
        else if (isa >= SD_ISA_AVX2 && has_f16c()) f16_f16c(s, dst, n);
        else f16_scalar(s, dst, n);
    } else if (dt == SD_F8_E4M3 || dt == SD_F8_E5M2) {
        /* 256 values: a table lookup per byte */
        const uint8_t *b = src;
        const float *tab = dt == SD_F8_E4M3 ? sd_f8_e4m3_table() : sd_f8_e5m2_table();
        if (isa >= SD_ISA_AVX512) f8_avx512(b, dst, n, tab);
        else for (int64_t i = 0; i < n; i++) dst[i] = tab[b[i]];
    } else if (dt == SD_F32) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
    } else {
        sd_dtype_convert(dst, SD_F32, src, dt, (size_t)n);
    }
}

typedef struct {
    sd_dtype dt;
    sd_dequant_math math;
    const char *src;
    float *dst;
    int64_t n;
    int isa;
    const float *tab; /* scaled fp8: the 256 products value * scale, else NULL */
} widen_job;

/* CONVERT_GRAIN is a whole number of blocks of every quantized type. */
static void widen_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const widen_job *j = ctx;
    int64_t lo = t * CONVERT_GRAIN, hi = lo + CONVERT_GRAIN < j->n ? lo + CONVERT_GRAIN : j->n;
    const char *src = j->src + sd_dtype_nbytes(j->dt, lo);
    if (sd_dtype_is_quantized(j->dt)) sd_quant_dequant(j->dt, j->math, src, j->dst + lo, hi - lo);
    else if (j->tab && j->isa >= SD_ISA_AVX512) f8_avx512((const uint8_t *)src, j->dst + lo, hi - lo, j->tab);
    else if (j->tab) for (int64_t i = 0; i < hi - lo; i++) j->dst[lo + i] = j->tab[(uint8_t)src[i]];
    else sd_cpu_widen(j->dt, src, j->dst + lo, hi - lo, j->isa);
}

/* Below this a fresh allocation is cheap (no mmap). */
#define REUSE_MIN ((size_t)1 << 20)

static void widen_buf_done(void *owner) {
    __atomic_store_n(&((sd_cpu *)owner)->widen_busy, 0, __ATOMIC_RELEASE);
}

void *sd_cpu_weight_scratch(sd_backend *be, size_t bytes, int *reused) {
    sd_cpu *c = be->impl;
    *reused = 0;
    if (bytes >= REUSE_MIN && !__atomic_exchange_n(&c->widen_busy, 1, __ATOMIC_ACQUIRE)) {
        if (c->widen_cap < bytes) {
            free(c->widen_buf);
            c->widen_buf = sd_cpu_alloc(bytes);
            c->widen_cap = c->widen_buf ? bytes : 0;
        }
        if (c->widen_buf) {
            *reused = 1;
            return c->widen_buf;
        }
        widen_buf_done(c);
    }
    return sd_cpu_alloc(bytes ? bytes : 1);
}

void sd_cpu_weight_scratch_done(sd_backend *be, void *p, int reused) {
    if (reused) widen_buf_done(be->impl);
    else free(p);
}

sd_status sd_cpu_to_f32(sd_backend *be, sd_bt *out, const sd_bt *x) {
    sd_cpu *c = be->impl;
    int reused;
    void *data = sd_cpu_weight_scratch(be, out->nbytes, &reused);
    if (!data) return SD_ERR_NOMEM;
    void *owner = reused ? (void *)c : data;
    void (*release)(void *) = reused ? widen_buf_done : free;
    out->host = sd_tensor_new_borrowed(SD_F32, out->ndim, out->shape, data, release, owner);
    if (!out->host) {
        release(owner);
        return SD_ERR_NOMEM;
    }
    out->data = data;
    widen_job j = {x->dtype, x->dequant, x->data, sd_cpu_f32(out), sd_bt_numel(x), sd_cpu_isa(), NULL};
    /* A scaled fp8 weight: its 256 possible values times the scale, each
     * product rounded once in F32 as x.to(float32) * scale is, then the
     * same gather as plain fp8. */
    float tab[256];
    if (x->scale != 0.0f && (x->dtype == SD_F8_E4M3 || x->dtype == SD_F8_E5M2)) {
        const float *base = x->dtype == SD_F8_E4M3 ? sd_f8_e4m3_table() : sd_f8_e5m2_table();
        const float s = x->scale;
        for (int i = 0; i < 256; i++) tab[i] = base[i] * s;
        j.tab = tab;
    }
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, CONVERT_GRAIN), widen_task, &j);
    return SD_OK;
}
