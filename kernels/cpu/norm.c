/* norm.c - GroupNorm, LayerNorm and softmax. Statistics are accumulated in
 * double (two passes) so results match PyTorch to ~1e-6 relative even for
 * groups of millions of elements. */
#include "cpu.h"

#include <math.h>

typedef struct {
    const float *x, *gamma, *beta;
    float *y;
    int64_t C, S, cpg, rows, n;
    int groups, silu;
    float eps;
} norm_job;

/* ---- GroupNorm statistics ----------------------------------------------------
 * Two passes in double, as before, but over independent lanes: a single
 * double accumulator is one dependent add per element, and with Winograd
 * convolutions the VAE decode's GroupNorms over 512x512 activations had
 * become ~15 % of it (perf). Lane order changes the rounding of the sums
 * only at the 1e-16 level. */

#define STAT_LANES 16

/* Written once, compiled per instruction set below: GCC vectorises the
 * STAT_LANES independent double accumulators (two zmm / four ymm). */
static inline __attribute__((always_inline)) void stats_body(const float *x, int64_t n,
                                                             double *mean, double *var) {
    double a[STAT_LANES] = {0}, s = 0.0;
    int64_t i = 0;
    for (; i + STAT_LANES <= n; i += STAT_LANES)
        for (int k = 0; k < STAT_LANES; k++) a[k] += x[i + k];
    for (; i < n; i++) s += x[i];
    for (int k = 0; k < STAT_LANES; k++) s += a[k];
    double m = n ? s / (double)n : 0.0;
    double b[STAT_LANES] = {0}, q = 0.0;
    for (i = 0; i + STAT_LANES <= n; i += STAT_LANES)
        for (int k = 0; k < STAT_LANES; k++) {
            double d = x[i + k] - m;
            b[k] += d * d;
        }
    for (; i < n; i++) q += (x[i] - m) * (x[i] - m);
    for (int k = 0; k < STAT_LANES; k++) q += b[k];
    *mean = m;
    *var = n ? q / (double)n : 0.0;
}

static void stats_scalar(const float *x, int64_t n, double *mean, double *var) {
    stats_body(x, n, mean, var);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static void stats_avx2(const float *x, int64_t n, double *mean,
                                                          double *var) {
    stats_body(x, n, mean, var);
}

__attribute__((target("avx512f"))) static void stats_avx512(const float *x, int64_t n, double *mean,
                                                           double *var) {
    stats_body(x, n, mean, var);
}

/* y = (x - m) * scale + shift, unfused (no FMA) so every path rounds alike:
 * GCC contracts even intrinsics into FMA under gnu11's default
 * -ffp-contract=fast, hence the attribute. */
__attribute__((target("avx512f"), optimize("fp-contract=off"))) static void affine_avx512(const float *x, float *y, int64_t n,
                                                            float m, float scale, float shift) {
    __m512 mv = _mm512_set1_ps(m), sv = _mm512_set1_ps(scale), hv = _mm512_set1_ps(shift);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv), sv), hv));
    for (; i < n; i++) y[i] = (x[i] - m) * scale + shift;
}
#endif

void sd_cpu_group_stats_isa(const float *x, int64_t n, double *mean, double *var, int isa) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= SD_ISA_AVX512) { stats_avx512(x, n, mean, var); return; }
    if (isa >= SD_ISA_AVX2) { stats_avx2(x, n, mean, var); return; }
#endif
    (void)isa;
    stats_scalar(x, n, mean, var);
}

static void affine_row(const float *x, float *y, int64_t n, float m, float scale, float shift, int isa) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= SD_ISA_AVX512) { affine_avx512(x, y, n, m, scale, shift); return; }
#endif
    (void)isa;
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * scale + shift;
}

static void group_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t g = t % j->groups;
    int64_t count = j->cpg * j->S;
    const float *x = j->x + t * count;
    float *y = j->y + t * count;
    int isa = sd_cpu_isa();
    double mean, var;
    sd_cpu_group_stats_isa(x, count, &mean, &var, isa);
    double rstd = 1.0 / sqrt(var + (double)j->eps);
    for (int64_t c = 0; c < j->cpg; c++) {
        int64_t ch = g * j->cpg + c;
        double ga = j->gamma ? j->gamma[ch] : 1.0, be = j->beta ? j->beta[ch] : 0.0;
        /* (x - mean) first: folding mean into the shift cancels badly when
         * the variance is tiny (rstd up to 1/sqrt(eps)) */
        float scale = (float)(rstd * ga), shift = (float)be, m = (float)mean;
        affine_row(x + c * j->S, y + c * j->S, j->S, m, scale, shift, isa);
        if (j->silu) sd_cpu_silu(y + c * j->S, y + c * j->S, j->S, 1.0f);
    }
}

sd_status sd_cpu_group_norm(sd_backend *be, sd_bt *out, const sd_bt *x, int groups,
                            const sd_bt *gamma, const sd_bt *beta, float eps, int silu_flag) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.gamma = gamma ? sd_cpu_f32(gamma) : NULL;
    j.beta = beta ? sd_cpu_f32(beta) : NULL;
    j.C = x->shape[1];
    j.S = 1;
    for (int i = 2; i < x->ndim; i++) j.S *= x->shape[i];
    j.groups = groups;
    j.cpg = j.C / groups;
    j.eps = eps;
    j.silu = silu_flag;
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * groups, group_task, &j);
    return SD_OK;
}

/* ---- LayerNorm over the last dim ------------------------------------------- */

static void layer_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t r0 = t * j->rows, r1 = r0 + j->rows;
    if (r1 > j->n) r1 = j->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->C;
        float *y = j->y + r * j->C;
        double sum = 0.0;
        for (int64_t i = 0; i < j->C; i++) sum += x[i];
        double mean = sum / (double)j->C, ss = 0.0;
        for (int64_t i = 0; i < j->C; i++) {
            double d = x[i] - mean;
            ss += d * d;
        }
        double rstd = 1.0 / sqrt(ss / (double)j->C + (double)j->eps);
        for (int64_t i = 0; i < j->C; i++) {
            float v = (float)((x[i] - mean) * rstd);
            if (j->gamma) v *= j->gamma[i];
            if (j->beta) v += j->beta[i];
            y[i] = v;
        }
    }
}

sd_status sd_cpu_layer_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                            const sd_bt *beta, float eps) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.gamma = gamma ? sd_cpu_f32(gamma) : NULL;
    j.beta = beta ? sd_cpu_f32(beta) : NULL;
    j.C = x->shape[x->ndim - 1];
    j.eps = eps;
    if (j.C == 0) return SD_OK;
    j.n = sd_bt_numel(x) / j.C;
    j.rows = 1 + 16384 / j.C;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, j.rows), layer_task, &j);
    return SD_OK;
}

/* ---- RMSNorm over the last dim ------------------------------------------------
 * y = (x * r) * gamma with r = 1 / sqrt(mean(x^2) + eps): the mean in double,
 * r and the two products rounded to float as torch's unfused
 * x * torch.rsqrt(x.pow(2).mean(-1) + eps) * weight computes them. */

/* One row: the sum of squares over STAT_LANES independent double lanes
 * (each square of a float is exact in double, so only the sums' order
 * differs from a single accumulator, at the 1e-16 level), then the two
 * float products. Written once, compiled per instruction set. */
static inline __attribute__((always_inline)) void rms_body(const float *x, float *y,
                                                           const float *gamma, int64_t C,
                                                           float eps) {
    double a[STAT_LANES] = {0}, ss = 0.0;
    int64_t i = 0;
    for (; i + STAT_LANES <= C; i += STAT_LANES)
        for (int k = 0; k < STAT_LANES; k++) a[k] += (double)x[i + k] * x[i + k];
    for (; i < C; i++) ss += (double)x[i] * x[i];
    for (int k = 0; k < STAT_LANES; k++) ss += a[k];
    float ms = (float)(ss / (double)C);
    float rr = (float)(1.0 / sqrt((double)(ms + eps)));
    if (gamma)
        for (i = 0; i < C; i++) y[i] = (x[i] * rr) * gamma[i];
    else
        for (i = 0; i < C; i++) y[i] = x[i] * rr;
}

static void rms_scalar(const float *x, float *y, const float *g, int64_t C, float eps) {
    rms_body(x, y, g, C, eps);
}
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) static void rms_avx2(const float *x, float *y, const float *g,
                                                        int64_t C, float eps) {
    rms_body(x, y, g, C, eps);
}
__attribute__((target("avx512f"))) static void rms_avx512(const float *x, float *y, const float *g,
                                                         int64_t C, float eps) {
    rms_body(x, y, g, C, eps);
}
#endif

void sd_cpu_rms_row_isa(const float *x, float *y, const float *gamma, int64_t C, float eps,
                        int isa) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= SD_ISA_AVX512) { rms_avx512(x, y, gamma, C, eps); return; }
    if (isa >= SD_ISA_AVX2) { rms_avx2(x, y, gamma, C, eps); return; }
#endif
    (void)isa;
    rms_scalar(x, y, gamma, C, eps);
}

static void rms_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t r0 = t * j->rows, r1 = r0 + j->rows;
    if (r1 > j->n) r1 = j->n;
    int isa = sd_cpu_isa();
    for (int64_t r = r0; r < r1; r++)
        sd_cpu_rms_row_isa(j->x + r * j->C, j->y + r * j->C, j->gamma, j->C, j->eps, isa);
}

sd_status sd_cpu_rms_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                          float eps) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.gamma = gamma ? sd_cpu_f32(gamma) : NULL;
    j.C = x->shape[x->ndim - 1];
    j.eps = eps;
    if (j.C == 0) return SD_OK;
    j.n = sd_bt_numel(x) / j.C;
    j.rows = 1 + 16384 / j.C;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, j.rows), rms_task, &j);
    return SD_OK;
}

/* ---- softmax over the last dim ----------------------------------------------- */

static void softmax_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t r0 = t * j->rows, r1 = r0 + j->rows;
    if (r1 > j->n) r1 = j->n;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->C;
        const float *x = j->x + r * j->C;
        for (int64_t i = 0; i < j->C; i++) y[i] = x[i];
        sd_cpu_softmax_row(y, j->C);
    }
}

sd_status sd_cpu_softmax(sd_backend *be, sd_bt *out, const sd_bt *x) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.C = x->shape[x->ndim - 1];
    if (j.C == 0) return SD_OK;
    j.n = sd_bt_numel(x) / j.C;
    j.rows = 1 + 16384 / j.C;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, j.rows), softmax_task, &j);
    return SD_OK;
}
