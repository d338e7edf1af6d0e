/* schedules.c - ComfyUI sigma schedulers (comfy.samplers.calculate_sigmas).
 *
 * The float32 parts follow torch's op-by-op rounding; torch.linspace is
 * reproduced with the exact FMA / vector-group structure of its CPU kernel
 * (the manifest's "linspace" note), so the normal/sgm_uniform timesteps and
 * the karras ramp come out bit-identical.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "models/sampling/schedules.h"
#include "models/sampling/step_schedule_tables.h"
#include "models/sampling/rng.h" /* torch float32 exp / tan */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform",
    "beta", "normal", "linear_quadratic", "kl_optimal", NULL,
};

const char *const *sd_schedule_names(void) { return names; }

int sd_schedule_known(const char *name)
{
    for (int i = 0; name && names[i]; i++)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return 0;
}

/* ddim_uniform's length on a table of `len` sigmas: x = 1, 1+ss, ... < len,
 * plus the leading 0 (or, when sigmas[1] is ~0, steps + 1 and no 0). */
static int ddim_count(int len, int steps)
{
    int most = 0;
    for (int lead = 0; lead < 2; lead++) {
        int ss = len / (steps + lead);
        if (ss < 1)
            ss = 1;
        int c = (1 - lead) + (len - 1 + ss - 1) / ss;
        if (c > most)
            most = c;
    }
    return most;
}

int sd_schedule_capacity(int steps)
{
    if (steps < 1)
        return 1;
    /* every table length a model sampling has: 50 (LCM), 1000, 10000 (Flux) */
    static const int lens[] = {50, SD_MS_TIMESTEPS, SD_MS_MAX_SIGMAS};
    int most = steps + 1;
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        int d = ddim_count(lens[i], steps);
        if (d > most)
            most = d;
    }
    return most;
}

/* ---- torch.linspace float32 (CPU, AVX2 build) ------------------------------ */

/* step = (end - start) / (n - 1) in float; halfway = n / 2; scalar rule
 * fma(step, i, start) below halfway, fma(-step, n-1-i, end) from there;
 * the first floor(n/16)*16 elements come from the vector loop in groups of 8:
 * base = scalar rule at the group start, element k+j = base + j*step. */
void sd_linspace_f32(float start, float end, int n, float *out)
{
    if (n <= 0)
        return;
    if (n == 1) {
        out[0] = start;
        return;
    }
    float step = (end - start) / (float)(n - 1);
    int halfway = n / 2;
    int vec_end = (n / 16) * 16;
    for (int k = 0; k < vec_end; k += 8) {
        float base = k < halfway ? fmaf(step, (float)k, start)
                                 : fmaf(-step, (float)(n - 1 - k), end);
        for (int j = 0; j < 8; j++)
            out[k + j] = base + (float)j * step;
    }
    for (int i = vec_end; i < n; i++)
        out[i] = i < halfway ? fmaf(step, (float)i, start)
                             : fmaf(-step, (float)(n - 1 - i), end);
}

/* ---- regularized incomplete beta and its inverse -------------------------- */

/* Continued fraction for I_x(a, b) (modified Lentz), valid for
 * x < (a + 1) / (a + b + 2). */
static double beta_cf(double x, double a, double b)
{
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny) d = tiny;
    d = 1.0 / d;
    double f = d;
    for (int m = 1; m <= 10000; m++) {
        double m2 = 2.0 * m;
        double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + num * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1.0 + num / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        f *= d * c;
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + num * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1.0 + num / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        double delta = d * c;
        f *= delta;
        if (fabs(delta - 1.0) < 1e-16)
            break;
    }
    return f;
}

double sd_beta_cdf(double x, double a, double b)
{
    if (!(x > 0.0))
        return 0.0;
    if (x >= 1.0)
        return 1.0;
    double lfront = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0))
        return exp(lfront) * beta_cf(x, a, b) / a;
    return 1.0 - exp(lfront) * beta_cf(1.0 - x, b, a) / b;
}

double sd_beta_ppf(double p, double a, double b)
{
    if (p != p || a <= 0.0 || b <= 0.0 || p < 0.0 || p > 1.0)
        return NAN;
    if (p == 0.0)
        return 0.0;
    if (p == 1.0)
        return 1.0;
    if (a == b && p == 0.5)
        return 0.5; /* exact by symmetry; beta schedules hit it (t = 499.5) */
    /* The CDF is monotonic: bisect down to adjacent doubles. */
    double lo = 0.0, hi = 1.0;
    for (int i = 0; i < 2000; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        if (sd_beta_cdf(mid, a, b) < p)
            lo = mid;
        else
            hi = mid;
    }
    /* Pick the endpoint whose CDF is closer to p. */
    double elo = fabs(sd_beta_cdf(lo, a, b) - p), ehi = fabs(sd_beta_cdf(hi, a, b) - p);
    return elo < ehi ? lo : hi;
}

/* ---- the schedulers ---------------------------------------------------------- */

static int sched_simple(const sd_model_sampling *ms, int steps, float *out)
{
    /* len(sigmas): 1000, or 50 on the distilled (LCM) schedule */
    double ss = (double)ms->n / steps;
    for (int x = 0; x < steps; x++)
        out[x] = ms->sigmas[ms->n - 1 - (int)(x * ss)];
    out[steps] = 0.0f;
    return steps + 1;
}

static int sched_ddim(const sd_model_sampling *ms, int steps, float *out)
{
    int x = 1, n = 0;
    if (fabs((double)ms->sigmas[x]) <= 1e-5)
        steps += 1; /* no leading zero then (never for SD) */
    else
        out[n++] = 0.0f;
    int ss = ms->n / steps;
    if (ss < 1)
        ss = 1;
    for (; x < ms->n; x += ss)
        out[n++] = ms->sigmas[x];
    for (int i = 0, j = n - 1; i < j; i++, j--) { /* reverse */
        float t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
    return n;
}

/* normal_scheduler (sgm = 0) and sgm_uniform (sgm = 1). */
static int sched_normal(const sd_model_sampling *ms, int steps, int sgm, float *out)
{
    float start = sd_ms_timestep(ms, ms->sigma_max);
    float end = sd_ms_timestep(ms, ms->sigma_min);
    int append_zero = 1, n;
    if (sgm) {
        float *tmp = malloc((size_t)(steps + 1) * sizeof *tmp);
        if (!tmp)
            return -1;
        sd_linspace_f32(start, end, steps + 1, tmp);
        n = steps;
        for (int i = 0; i < n; i++)
            out[i] = sd_ms_sigma(ms, tmp[i]);
        free(tmp);
    } else {
        if (fabs((double)sd_ms_sigma(ms, end)) <= 1e-5) {
            steps += 1;
            append_zero = 0;
        }
        n = steps;
        sd_linspace_f32(start, end, n, out);
        for (int i = 0; i < n; i++)
            out[i] = sd_ms_sigma(ms, out[i]);
    }
    if (append_zero)
        out[n++] = 0.0f;
    return n;
}

int sd_sigmas_beta(const sd_model_sampling *ms, int steps, double alpha, double beta,
                   float *out)
{
    const double total = ms->n - 1;
    double step = 1.0 / steps; /* numpy.linspace(0, 1, steps, endpoint=False) */
    double last_t = -1.0;
    int n = 0;
    for (int i = 0; i < steps; i++) {
        double ts = 1.0 - (double)i * step;
        double t = rint(sd_beta_ppf(ts, alpha, beta) * total);
        if (t != t) /* alpha or beta 0: scipy gives NaN, and int(nan) raises */
            return -1;
        if (t != last_t)
            out[n++] = ms->sigmas[(int)t];
        last_t = t;
    }
    out[n++] = 0.0f;
    return n;
}

static int sched_beta(const sd_model_sampling *ms, int steps, float *out)
{
    return sd_sigmas_beta(ms, steps, 0.6, 0.6, out);
}

/* torch.pow(float32 tensor, python float) on CPU: the exponents ATen
 * special-cases (copy, fill, sqrt, rsqrt, reciprocal, square, cube) and
 * otherwise std::pow(float, double) rounded to float. */
static float torch_pow_scalar(float base, double e)
{
    if (e == 0.0)
        return 1.0f;
    if (e == 1.0)
        return base;
    if (e == 0.5)
        return sqrtf(base);
    if (e == -0.5)
        return 1.0f / sqrtf(base);
    if (e == -1.0)
        return 1.0f / base;
    if (e == 2.0)
        return base * base;
    if (e == 3.0)
        return base * base * base;
    if (e == -2.0)
        return 1.0f / (base * base);
    return (float)pow((double)base, e);
}

int sd_sigmas_karras(int n, double sigma_min, double sigma_max, double rho, float *out)
{
    double min_inv = pow(sigma_min, 1.0 / rho);
    double max_inv = pow(sigma_max, 1.0 / rho);
    float diff = (float)(min_inv - max_inv); /* python float, cast by torch */
    float maxf = (float)max_inv;
    sd_linspace_f32(0.0f, 1.0f, n, out);
    for (int i = 0; i < n; i++) {
        float v = out[i] * diff;
        v = maxf + v;
        out[i] = torch_pow_scalar(v, rho);
    }
    out[n] = 0.0f;
    return n + 1;
}

int sd_sigmas_exponential(int n, double sigma_min, double sigma_max, float *out)
{
    sd_linspace_f32((float)log(sigma_max), (float)log(sigma_min), n, out);
    for (int i = 0; i < n; i++)
        out[i] = sd_torch_expf(out[i]);
    out[n] = 0.0f;
    return n + 1;
}

/* Each op a float32 tensor op with the python scalars cast to float, as
 * torch does; exp/log are torch's (Sleef) ones. No appended 0, as in k_diffusion. */
int sd_sigmas_laplace(int n, double sigma_min, double sigma_max, double mu, double beta,
                      float *out)
{
    sd_linspace_f32(0.0f, 1.0f, n, out);
    const float fmu = (float)mu, fbeta = (float)beta, eps = (float)1e-5;
    const float lo = (float)sigma_min, hi = (float)sigma_max;
    for (int i = 0; i < n; i++) {
        float d = 0.5f - out[i];
        float sign = d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f;
        float l = sd_torch_logf(1.0f - 2.0f * fabsf(d) + eps);
        float lmb = fmu - fbeta * sign * l;
        float v = sd_torch_expf(lmb);
        /* torch.clamp: min first, then max (max wins when min > max) */
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
        out[i] = v;
    }
    return n;
}

/* torch's float expm1 is Sleef's (1 ulp); expm1 in double rounded to float
 * is the correctly rounded value, which Sleef's agrees with almost always. */
int sd_sigmas_vp(int n, double beta_d, double beta_min, double eps_s, float *out)
{
    sd_linspace_f32(1.0f, (float)eps_s, n, out);
    const float bd = (float)beta_d, bm = (float)beta_min;
    for (int i = 0; i < n; i++) {
        float t = out[i];
        float a = bd * (t * t) / 2.0f + bm * t;
        out[i] = sqrtf((float)expm1((double)a));
    }
    out[n] = 0.0f;
    return n + 1;
}

int sd_sigmas_polyexponential(int n, double sigma_min, double sigma_max, double rho,
                              float *out)
{
    float span = (float)(log(sigma_max) - log(sigma_min));
    float lmin = (float)log(sigma_min);
    sd_linspace_f32(1.0f, 0.0f, n, out);
    for (int i = 0; i < n; i++) {
        float v = torch_pow_scalar(out[i], rho) * span;
        out[i] = sd_torch_expf(v + lmin);
    }
    out[n] = 0.0f;
    return n + 1;
}

static int sched_karras(const sd_model_sampling *ms, int steps, float *out)
{
    return sd_sigmas_karras(steps, (double)ms->sigma_min, (double)ms->sigma_max, 7.0, out);
}

static int sched_exponential(const sd_model_sampling *ms, int steps, float *out)
{
    return sd_sigmas_exponential(steps, (double)ms->sigma_min, (double)ms->sigma_max, out);
}

static int sched_linear_quadratic(const sd_model_sampling *ms, int steps, float *out)
{
    const double threshold_noise = 0.025;
    if (steps == 1) {
        out[0] = 1.0f * ms->sigma_max;
        out[1] = 0.0f * ms->sigma_max;
        return 2;
    }
    int linear_steps = steps / 2;
    int n = 0;
    for (int i = 0; i < linear_steps; i++)
        out[n++] = (float)(1.0 - i * threshold_noise / linear_steps);
    double diff = linear_steps - threshold_noise * steps;
    int quadratic_steps = steps - linear_steps;
    double quadratic_coef = diff / (linear_steps * pow((double)quadratic_steps, 2));
    double linear_coef = threshold_noise / linear_steps - 2 * diff / pow((double)quadratic_steps, 2);
    double cst = quadratic_coef * pow((double)linear_steps, 2);
    for (int i = linear_steps; i < steps; i++) {
        double v = quadratic_coef * pow((double)i, 2) + linear_coef * i + cst;
        out[n++] = (float)(1.0 - v);
    }
    out[n++] = (float)(1.0 - 1.0);
    for (int i = 0; i < n; i++)
        out[i] = out[i] * ms->sigma_max;
    return n;
}

static int sched_kl_optimal(const sd_model_sampling *ms, int steps, float *out)
{
    float amin = (float)atan((double)ms->sigma_min);
    float amax = (float)atan((double)ms->sigma_max);
    float div = (float)(steps - 1); /* 0 for steps == 1: NaN, as ComfyUI */
    for (int i = 0; i < steps; i++) {
        float adj = (float)i / div;
        float a = adj * amin;
        float b = (1.0f - adj) * amax;
        out[i] = sd_torch_tanf(a + b);
    }
    out[steps] = 0.0f;
    return steps + 1;
}

sd_status sd_schedule_sigmas(const sd_model_sampling *ms, const char *scheduler,
                             int steps, float *out, int *n_out, sd_error *err)
{
    *n_out = 0;
    if (!scheduler || !sd_schedule_known(scheduler))
        return sd_error_set(err, SD_ERR_INVALID,
                            "unknown scheduler '%s' (expected one of simple, "
                            "sgm_uniform, karras, exponential, ddim_uniform, beta, "
                            "normal, linear_quadratic, kl_optimal)",
                            scheduler ? scheduler : "(null)");
    if (steps < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "scheduler '%s': steps must be >= 1, got %d", scheduler, steps);
    int n;
    if (strcmp(scheduler, "simple") == 0)
        n = sched_simple(ms, steps, out);
    else if (strcmp(scheduler, "sgm_uniform") == 0)
        n = sched_normal(ms, steps, 1, out);
    else if (strcmp(scheduler, "karras") == 0)
        n = sched_karras(ms, steps, out);
    else if (strcmp(scheduler, "exponential") == 0)
        n = sched_exponential(ms, steps, out);
    else if (strcmp(scheduler, "ddim_uniform") == 0)
        n = sched_ddim(ms, steps, out);
    else if (strcmp(scheduler, "beta") == 0)
        n = sched_beta(ms, steps, out);
    else if (strcmp(scheduler, "normal") == 0)
        n = sched_normal(ms, steps, 0, out);
    else if (strcmp(scheduler, "linear_quadratic") == 0)
        n = sched_linear_quadratic(ms, steps, out);
    else
        n = sched_kl_optimal(ms, steps, out);
    if (n < 0)
        return sd_error_set(err, SD_ERR_NOMEM, "scheduler '%s': out of memory", scheduler);
    *n_out = n;
    return SD_OK;
}

/* ---- KSampler-level rules -------------------------------------------------- */

int sd_sampler_discards_penultimate(const char *sampler)
{
    static const char *const discard[] = {"dpm_2", "dpm_2_ancestral", "uni_pc",
                                          "uni_pc_bh2", NULL};
    for (int i = 0; sampler && discard[i]; i++)
        if (strcmp(sampler, discard[i]) == 0)
            return 1;
    return 0;
}

/* KSampler.calculate_sigmas: the scheduler plus the discard rule, malloc'd. */
static sd_status calc_sigmas(const sd_model_sampling *ms, const char *scheduler,
                             const char *sampler, int steps, float **out, int *n_out,
                             sd_error *err)
{
    int discard = sd_sampler_discards_penultimate(sampler);
    if (discard)
        steps += 1;
    if (steps < 1 || steps > 1000000)
        return sd_error_set(err, SD_ERR_INVALID, "scheduler '%s': bad step count %d",
                            scheduler ? scheduler : "(null)", steps);
    float *buf = malloc((size_t)sd_schedule_capacity(steps) * sizeof *buf);
    if (!buf)
        return sd_error_set(err, SD_ERR_NOMEM, "scheduler: out of memory");
    int n = 0;
    sd_status st = sd_schedule_sigmas(ms, scheduler, steps, buf, &n, err);
    if (st != SD_OK) {
        free(buf);
        return st;
    }
    if (discard && n >= 2) {
        buf[n - 2] = buf[n - 1];
        n -= 1;
    }
    *out = buf;
    *n_out = n;
    return SD_OK;
}

/* Keep the last `keep` values of buf[0..n) (python's sigmas[-keep:]). */
static int keep_last(float *buf, int n, int keep)
{
    if (keep >= n)
        return n;
    memmove(buf, buf + (n - keep), (size_t)keep * sizeof *buf);
    return keep;
}

sd_status sd_ksampler_sigmas(const sd_model_sampling *ms, const char *scheduler,
                             const char *sampler, int steps, double denoise,
                             float **out, int *n_out, sd_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (steps < 1)
        return sd_error_set(err, SD_ERR_INVALID, "KSampler: steps must be >= 1, got %d", steps);
    if (denoise != denoise)
        return sd_error_set(err, SD_ERR_INVALID, "KSampler: denoise is NaN");
    if (denoise > 0.9999)
        return calc_sigmas(ms, scheduler, sampler, steps, out, n_out, err);
    if (!sd_schedule_known(scheduler)) /* same error even when nothing is built */
        return sd_schedule_sigmas(ms, scheduler, 1, NULL, n_out, err);
    if (denoise <= 0.0)
        return SD_OK;
    double ns = (double)steps / denoise;
    if (ns > 1000000.0)
        return sd_error_set(err, SD_ERR_INVALID,
                            "KSampler: steps/denoise = %g is too many steps", ns);
    int n = 0;
    float *buf = NULL;
    sd_status st = calc_sigmas(ms, scheduler, sampler, (int)ns, &buf, &n, err);
    if (st != SD_OK)
        return st;
    *n_out = keep_last(buf, n, steps + 1);
    *out = buf;
    return SD_OK;
}

sd_status sd_basic_scheduler_sigmas(const sd_model_sampling *ms, const char *scheduler,
                                    int steps, double denoise, float **out,
                                    int *n_out, sd_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (steps < 1)
        return sd_error_set(err, SD_ERR_INVALID, "BasicScheduler: steps must be >= 1, got %d", steps);
    if (denoise != denoise)
        return sd_error_set(err, SD_ERR_INVALID, "BasicScheduler: denoise is NaN");
    int total = steps;
    if (denoise < 1.0) {
        if (!sd_schedule_known(scheduler))
            return sd_schedule_sigmas(ms, scheduler, 1, NULL, n_out, err);
        if (denoise <= 0.0)
            return SD_OK;
        double ns = (double)steps / denoise;
        if (ns > 1000000.0)
            return sd_error_set(err, SD_ERR_INVALID,
                                "BasicScheduler: steps/denoise = %g is too many steps", ns);
        total = (int)ns;
    }
    int n = 0;
    float *buf = NULL;
    sd_status st = calc_sigmas(ms, scheduler, NULL, total, &buf, &n, err);
    if (st != SD_OK)
        return st;
    *n_out = keep_last(buf, n, steps + 1);
    *out = buf;
    return SD_OK;
}

void sd_sigmas_step_range(float *sigmas, int n, int start_step, int last_step,
                          int force_full_denoise, int *first, int *n_out, int *skip)
{
    *first = 0;
    *skip = 0;
    if (last_step >= 0 && last_step < n - 1) {
        n = last_step + 1;
        if (force_full_denoise)
            sigmas[n - 1] = 0.0f;
    }
    if (start_step >= 0) {
        if (start_step < n - 1) {
            *first = start_step;
            n -= start_step;
        } else {
            *skip = 1;
        }
    }
    *n_out = n;
}

/* ---- schedules of the custom-sampling nodes ------------------------------------ */

int sd_sigmas_sd_turbo(const sd_model_sampling *ms, int steps, double denoise, float *out)
{
    /* timesteps 999, 899, ..., 99 from start_step = 10 - int(10 * denoise) */
    int start = 10 - (int)(10.0 * denoise), n = 0;
    if (start < 0)
        start = 0;
    for (int i = start; i < 10 && i < start + steps; i++)
        out[n++] = sd_ms_sigma(ms, (float)(999 - 100 * i));
    out[n++] = 0.0f;
    return n;
}

/* NVIDIA's Align Your Steps noise levels, as ComfyUI ships them (11 values,
 * i.e. 10 steps, descending). */
static const double ays_sd1[11] = {14.6146412293, 6.4745760956, 3.8636745985, 2.6946151520,
                                   1.8841921177,  1.3943805092, 0.9642583904, 0.6523686016,
                                   0.3977456272,  0.1515232662, 0.0291671582};
static const double ays_sdxl[11] = {14.6146412293, 6.3184485287, 3.7681790315, 2.1811480769,
                                    1.3405244945,  0.8620721141, 0.5550693289, 0.3798540708,
                                    0.2332364134,  0.1114188177, 0.0291671582};
static const double ays_svd[11] = {700.00, 54.5,  15.886, 7.977, 4.248, 1.789,
                                   0.981,  0.403, 0.173,  0.034, 0.002};

const double *sd_ays_table(const char *model_type)
{
    if (!model_type)
        return NULL;
    if (strcmp(model_type, "SD1") == 0)
        return ays_sd1;
    if (strcmp(model_type, "SDXL") == 0)
        return ays_sdxl;
    if (strcmp(model_type, "SVD") == 0)
        return ays_svd;
    return NULL;
}

/* numpy.linspace(0, 1, n)[i]: i * (1 / (n - 1)), the last exactly 1. */
static double np_linspace01(int i, int n)
{
    if (n == 1)
        return 0.0;
    if (i == n - 1)
        return 1.0;
    double step = 1.0 / (double)(n - 1);
    return (double)i * step + 0.0;
}

/* The loglinear_interp the table schedulers share (AYS, GITS, OptimalSteps):
 * numpy.interp over the reversed log table at linspace(0, 1, num), exp,
 * reversed again; all in double as numpy computes it (np.interp's
 * x == xp[j] shortcut included). t: 2 <= len <= 64 descending values. */
static void loglinear_interp(const double *t, int len, int num, double *out)
{
    double ys[64]; /* the longest table (OptimalSteps Chroma) has 41 */
    for (int k = 0; k < len; k++)
        ys[k] = log(t[len - 1 - k]);
    for (int i = 0; i < num; i++) {
        double x = np_linspace01(i, num), y;
        if (x >= 1.0) {
            y = ys[len - 1];
        } else {
            int j = 0;
            while (j < len - 2 && np_linspace01(j + 1, len) <= x) /* x < 1: j <= len - 2 */
                j++;
            double xj = np_linspace01(j, len);
            if (xj == x) {
                y = ys[j];
            } else {
                double slope = (ys[j + 1] - ys[j]) / (np_linspace01(j + 1, len) - xj);
                y = slope * (x - xj) + ys[j];
            }
        }
        out[num - 1 - i] = exp(y);
    }
}

/* What the table schedulers (AYS, GITS, OptimalSteps) share: the table t
 * (len descending values) as it is when it has steps + 1 values, else
 * log-linearly interpolated to steps + 1; denoise < 1 keeps the last
 * round(steps * denoise) + 1 (Python: half to even); the last value becomes
 * 0; float32. Returns the count (0 for denoise <= 0), -2 when out of memory. */
static int table_sigmas(const double *t, int len, int steps, double denoise, float *out)
{
    if (denoise <= 0.0)
        return 0;
    int total = denoise >= 1.0 ? steps : (int)nearbyint((double)steps * denoise);
    int num = steps + 1;
    double *s = malloc((size_t)num * sizeof *s);
    if (!s)
        return -2;
    if (num == len)
        memcpy(s, t, (size_t)num * sizeof *s);
    else
        loglinear_interp(t, len, num, s);
    /* sigmas[-(total + 1):] */
    int keep = total + 1 < num ? total + 1 : num;
    for (int i = 0; i < keep; i++)
        out[i] = (float)s[num - keep + i];
    out[keep - 1] = 0.0f;
    free(s);
    return keep;
}

int sd_sigmas_ays(const char *model_type, int steps, double denoise, float *out)
{
    const double *t = sd_ays_table(model_type);
    if (!t || steps < 1)
        return -1;
    return table_sigmas(t, 11, steps, denoise, out);
}

static const sd_gits_table *gits_table(double coeff)
{
    /* Python's round(coeff, 2) is the correctly rounded decimal, as glibc's
     * %.2f; no double lies exactly halfway between two table keys. */
    char key[32];
    snprintf(key, sizeof key, "%.2f", coeff);
    for (int i = 0; i < sd_gits_table_count; i++)
        if (strcmp(sd_gits_tables[i].coeff, key) == 0)
            return &sd_gits_tables[i];
    return NULL;
}

int sd_gits_coeff_known(double coeff)
{
    return gits_table(coeff) != NULL;
}

int sd_sigmas_gits(double coeff, int steps, double denoise, float *out)
{
    const sd_gits_table *g = gits_table(coeff);
    if (!g || steps < 2)
        return -1;
    /* up to 20 steps the step count's own row, beyond it the 20-step row */
    if (steps <= SD_GITS_ROWS + 1)
        return table_sigmas(g->rows[steps - 2], steps + 1, steps, denoise, out);
    return table_sigmas(g->rows[SD_GITS_ROWS - 1], SD_GITS_ROWS + 2, steps, denoise, out);
}

static const sd_optimal_steps_table *optimal_steps_table(const char *model_type)
{
    for (int i = 0; model_type && i < sd_optimal_steps_table_count; i++)
        if (strcmp(sd_optimal_steps_tables[i].model_type, model_type) == 0)
            return &sd_optimal_steps_tables[i];
    return NULL;
}

int sd_optimal_steps_known(const char *model_type)
{
    return optimal_steps_table(model_type) != NULL;
}

int sd_sigmas_optimal_steps(const char *model_type, int steps, double denoise, float *out)
{
    const sd_optimal_steps_table *o = optimal_steps_table(model_type);
    if (!o || steps < 1)
        return -1;
    return table_sigmas(o->sigmas, o->len, steps, denoise, out);
}
