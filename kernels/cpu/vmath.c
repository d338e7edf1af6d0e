/* vmath.c - exp-heavy row kernels (softmax, SiLU, GELU) with AVX-512 and
 * AVX2 paths.
 *
 * Softmax inside attention is most of its time when the head dim is small
 * (8 x 40 heads at 4096 tokens: 2/3 of the op with libm expf). The AVX-512
 * path uses a Cephes-style exp (range reduction by ln 2 in two parts,
 * degree-6 polynomial, scaling by 2^n with scalef): within 2 ulp of expf,
 * and exactly 0 below exp(-87.3) so masked (-inf) scores stay 0. Sums are
 * accumulated in double as in the scalar path. The AVX2 path is the same
 * algorithm on 8 lanes. The choice is sd_cpu_isa() (isa.c: the CPU's
 * features, capped by SDFLOW_MAX_CPU_ISA); other CPUs take the scalar (libm)
 * loops. Every path is reachable through the *_isa entry points so tests
 * can check each one. */
#include "cpu.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#include "vexp.h"
#endif

/* GELU's tanh approximation: sqrt(2/pi) and the cubic's coefficient */
#define GELU_BETA ((float)(M_SQRT2 * M_2_SQRTPI * 0.5))
#define GELU_KAPPA 0.044715f

/* ---- scalar ---------------------------------------------------------------------- */

static double softmax_scalar(float *row, int64_t n, int norm, float *mxio) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (row[i] > mx) mx = row[i];
    if (mxio) { /* attention's running max: exp relative to max(it, row max) */
        if (*mxio > mx) mx = *mxio;
        *mxio = mx;
    }
    if (mx == -INFINITY) { /* fully masked row: PyTorch gives NaN; we give zeros */
        for (int64_t i = 0; i < n; i++) row[i] = 0.0f;
        return 0.0;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float e = expf(row[i] - mx);
        row[i] = e;
        sum += e;
    }
    if (!norm) return sum;
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) row[i] *= inv;
    return sum;
}

static void silu_scalar(const float *x, float *y, int64_t n, float beta) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-beta * x[i]));
}

static void gelu_scalar(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

/* ---- AVX-512 ----------------------------------------------------------------------- */

#ifdef HAVE_X86
__attribute__((target("avx512f"))) static double softmax_avx512(float *row, int64_t n, int norm, float *mxio) {
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(row + i));
    float mx = _mm512_reduce_max_ps(vmx);
    for (; i < n; i++)
        if (row[i] > mx) mx = row[i];
    if (mxio) { /* attention's running max: exp relative to max(it, row max) */
        if (*mxio > mx) mx = *mxio;
        *mxio = mx;
    }
    if (mx == -INFINITY) {
        for (i = 0; i < n; i++) row[i] = 0.0f;
        return 0.0;
    }
    __m512 m = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(row + i), m));
        _mm512_storeu_ps(row + i, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + i), m));
        e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(row + i, k, e);
        sum += _mm512_reduce_add_pd(_mm512_add_pd(
            _mm512_cvtps_pd(_mm512_castps512_ps256(e)),
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)))));
    }
    if (!norm) return sum;
    __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(row + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), inv));
    for (; i < n; i++) row[i] *= (float)(1.0 / sum);
    return sum;
}

__attribute__((target("avx512f"))) static void silu_avx512(const float *x, float *y, int64_t n,
                                                           float beta) {
    const __m512 one = _mm512_set1_ps(1.0f), nb = _mm512_set1_ps(-beta);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 e = exp512(_mm512_mul_ps(nb, v));
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(one, e)));
    }
    silu_scalar(x + i, y + i, n - i, beta);
}

/* GELU with the tanh approximation: torch's 0.5 x (1 + tanh(z)), z =
 * sqrt(2/pi) (x + 0.044715 x^3), computed as x / (1 + exp(-2z)) (the same
 * function: 1 + tanh(z) = 2 / (1 + exp(-2z))), which needs one exp and
 * keeps full relative accuracy where 1 + tanh(z) cancels. z itself is
 * rounded as torch computes it (no FMA). libm's tanhf was ~10 % of a Flux
 * forward. */
__attribute__((target("avx512f"), optimize("fp-contract=off"))) static void
gelu_tanh_avx512(const float *x, float *y, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), m2b = _mm512_set1_ps(-2.0f * GELU_BETA),
                 kap = _mm512_set1_ps(GELU_KAPPA);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
        /* -2z = (-2 beta) (v + kappa v^3): the factor 2 is exact */
        __m512 e = exp512(_mm512_mul_ps(m2b, _mm512_add_ps(v, _mm512_mul_ps(kap, cube))));
        _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
    }
}

/* gelu(x) = 0.5 x (1 + erf(u)), u = x / sqrt(2), through erfc(|u|) with the
 * Numerical Recipes Chebyshev fit (fractional error < 1.2e-7 everywhere):
 * 1 + erf(u) = 2 - erfc(u) for u >= 0, erfc(-u) for u < 0. */
__attribute__((target("avx512f"))) static void gelu_avx512(const float *x, float *y, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f), half = _mm512_set1_ps(0.5f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 u = _mm512_mul_ps(v, _mm512_set1_ps((float)M_SQRT1_2));
        __m512 z = _mm512_abs_ps(u);
        __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(half, z, one));
        __m512 p = _mm512_set1_ps(0.17087277f);
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
        __m512 erfc = _mm512_mul_ps(t, exp512(_mm512_fnmadd_ps(z, z, p)));
        __mmask16 neg = _mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_LT_OQ);
        __m512 s = _mm512_mask_blend_ps(neg, _mm512_sub_ps(two, erfc), erfc);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(half, v), s));
    }
    gelu_scalar(x + i, y + i, n - i);
}

/* ---- AVX2 + FMA (same algorithms, 8 lanes, 2^n built in the exponent) ---------- */

#define T2 __attribute__((target("avx2,fma")))

T2 static inline double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

T2 static double softmax_avx2(float *row, int64_t n, int norm, float *mxio) {
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(row + i));
    float lanes[8];
    _mm256_storeu_ps(lanes, vmx);
    float mx = -INFINITY;
    for (int k = 0; k < 8; k++)
        if (lanes[k] > mx) mx = lanes[k];
    for (; i < n; i++)
        if (row[i] > mx) mx = row[i];
    if (mxio) { /* attention's running max: exp relative to max(it, row max) */
        if (*mxio > mx) mx = *mxio;
        *mxio = mx;
    }
    if (mx == -INFINITY) {
        for (i = 0; i < n; i++) row[i] = 0.0f;
        return 0.0;
    }
    __m256 m = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(row + i), m));
        _mm256_storeu_ps(row + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double sum = hsum_pd(_mm256_add_pd(s0, s1));
    for (; i < n; i++) { /* scalar tail with the same exp */
        float t[8] = {row[i] - mx};
        __m256 e = exp256(_mm256_loadu_ps(t));
        _mm256_storeu_ps(t, e);
        row[i] = t[0];
        sum += t[0];
    }
    if (!norm) return sum;
    __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), inv));
    for (; i < n; i++) row[i] *= (float)(1.0 / sum);
    return sum;
}

__attribute__((target("avx2,fma"), optimize("fp-contract=off"))) static void
gelu_tanh_avx2(const float *x, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), m2b = _mm256_set1_ps(-2.0f * GELU_BETA),
                 kap = _mm256_set1_ps(GELU_KAPPA);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        __m256 e = exp256(_mm256_mul_ps(m2b, _mm256_add_ps(v, _mm256_mul_ps(kap, cube))));
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
    for (; i < n; i++) { /* the same formula with libm's exp */
        float v = x[i], cube = v * v * v;
        y[i] = v / (1.0f + expf(-2.0f * GELU_BETA * (v + GELU_KAPPA * cube)));
    }
}

T2 static void silu_avx2(const float *x, float *y, int64_t n, float beta) {
    const __m256 one = _mm256_set1_ps(1.0f), nb = _mm256_set1_ps(-beta);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 e = exp256(_mm256_mul_ps(nb, v));
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
    silu_scalar(x + i, y + i, n - i, beta);
}

T2 static void gelu_avx2(const float *x, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), half = _mm256_set1_ps(0.5f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 u = _mm256_mul_ps(v, _mm256_set1_ps((float)M_SQRT1_2));
        __m256 z = _mm256_andnot_ps(sign, u);
        __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(half, z, one));
        __m256 p = _mm256_set1_ps(0.17087277f);
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
        __m256 erfc = _mm256_mul_ps(t, exp256(_mm256_fnmadd_ps(z, z, p)));
        __m256 neg = _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_LT_OQ);
        __m256 s = _mm256_blendv_ps(_mm256_sub_ps(two, erfc), erfc, neg);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), s));
    }
    gelu_scalar(x + i, y + i, n - i);
}
#endif

/* ---- dispatch ------------------------------------------------------------------------ */

static double softmax_isa(float *row, int64_t n, int isa, int norm, float *mxio) {
#ifdef HAVE_X86
    if (isa == SD_ISA_AVX512) return softmax_avx512(row, n, norm, mxio);
    if (isa == SD_ISA_AVX2) return softmax_avx2(row, n, norm, mxio);
#endif
    (void)isa;
    return softmax_scalar(row, n, norm, mxio);
}

void sd_cpu_softmax_row_isa(float *row, int64_t n, int isa) { softmax_isa(row, n, isa, 1, NULL); }
double sd_cpu_exp_row_isa(float *row, int64_t n, float *max, int isa) {
    return softmax_isa(row, n, isa, 0, max);
}

void sd_cpu_silu_isa(const float *x, float *y, int64_t n, float beta, int isa) {
#ifdef HAVE_X86
    if (isa == SD_ISA_AVX512) { silu_avx512(x, y, n, beta); return; }
    if (isa == SD_ISA_AVX2) { silu_avx2(x, y, n, beta); return; }
#endif
    silu_scalar(x, y, n, beta);
}

void sd_cpu_gelu_isa(const float *x, float *y, int64_t n, int isa) {
#ifdef HAVE_X86
    if (isa == SD_ISA_AVX512) { gelu_avx512(x, y, n); return; }
    if (isa == SD_ISA_AVX2) { gelu_avx2(x, y, n); return; }
#endif
    gelu_scalar(x, y, n);
}

void sd_cpu_softmax_row(float *row, int64_t n) { sd_cpu_softmax_row_isa(row, n, sd_cpu_isa()); }
double sd_cpu_exp_row(float *row, int64_t n, float *max) { return sd_cpu_exp_row_isa(row, n, max, sd_cpu_isa()); }
void sd_cpu_silu(const float *x, float *y, int64_t n, float beta) { sd_cpu_silu_isa(x, y, n, beta, sd_cpu_isa()); }
void sd_cpu_gelu(const float *x, float *y, int64_t n) { sd_cpu_gelu_isa(x, y, n, sd_cpu_isa()); }

/* torch's gelu(approximate="tanh") in its order: inner = beta * (x + kappa *
 * x^3), y = 0.5 * x * (1 + tanh(inner)), all in float. Scalar tanhf: the
 * DiT MLPs call it once per hidden element, next to a GEMM of K times the
 * work. */
/* The scalar path: torch's formula as written, with libm's tanhf. */
static void gelu_tanh_scalar(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], cube = v * v * v;
        float inner = GELU_BETA * (v + GELU_KAPPA * cube);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

void sd_cpu_gelu_tanh_isa(const float *x, float *y, int64_t n, int isa) {
#ifdef HAVE_X86
    if (isa == SD_ISA_AVX512) { gelu_tanh_avx512(x, y, n); return; }
    if (isa == SD_ISA_AVX2) { gelu_tanh_avx2(x, y, n); return; }
#endif
    (void)isa;
    gelu_tanh_scalar(x, y, n);
}

void sd_cpu_gelu_tanh(const float *x, float *y, int64_t n) { sd_cpu_gelu_tanh_isa(x, y, n, sd_cpu_isa()); }
