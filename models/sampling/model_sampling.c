/* model_sampling.c - ComfyUI's ModelSamplingDiscrete, ModelSamplingDiscreteFlow
 * and ModelSamplingFlux with torch's rounding.
 *
 * Each torch op rounds to its dtype; the only fused multiply-adds are the
 * ones torch's own linspace kernel gets from GCC, which we call explicitly.
 * Contraction is off for the rest of the file.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h" /* sd_torch_expf / sd_torch_logf */
#include "models/sampling/schedules.h" /* sd_linspace_f32 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* torch.linspace(start, end, n, dtype=float64) on an AVX2 CPU: the scalar
 * rule is fma(step, i, start) below n/2 and fma(-step, n-1-i, end) above;
 * the vectorized loop covers the first floor(n/8)*8 elements in groups of
 * 4 (two 4-double vectors per iteration) as base + j*step. */
static void linspace_f64(double start, double end, int n, double *out)
{
    if (n == 1) {
        out[0] = start;
        return;
    }
    double step = (end - start) / (double)(n - 1);
    int halfway = n / 2;
    int vec_end = (n / 8) * 8;
    for (int k = 0; k < vec_end; k += 4) {
        double base = k < halfway ? fma(step, (double)k, start)
                                  : fma(-step, (double)(n - 1 - k), end);
        for (int j = 0; j < 4; j++)
            out[k + j] = base + (double)j * step;
    }
    for (int i = vec_end; i < n; i++)
        out[i] = i < halfway ? fma(step, (double)i, start)
                             : fma(-step, (double)(n - 1 - i), end);
}

/* comfy.model_sampling.rescale_zero_terminal_snr_sigmas on the float64
 * sigmas, each torch op rounded in float64. */
static void rescale_zsnr(double *sig, int n)
{
    double *a = malloc((size_t)n * sizeof *a);
    if (!a)
        return; /* (never for 1000 doubles; the caller's schedule stays plain) */
    for (int i = 0; i < n; i++) {
        double ac = 1.0 / (sig[i] * sig[i] + 1.0);
        a[i] = sqrt(ac);
    }
    double a0 = a[0], aT = a[n - 1];
    double scale = a0 / (a0 - aT);
    for (int i = 0; i < n; i++) {
        double v = a[i] - aT;
        v = v * scale;
        a[i] = v * v;
    }
    a[n - 1] = 4.8973451890853435e-08;
    for (int i = 0; i < n; i++)
        sig[i] = sqrt((1.0 - a[i]) / a[i]);
    free(a);
}

static void init_schedule(sd_model_sampling *ms, sd_prediction prediction, int zsnr,
                          double linear_start, double linear_end)
{
    memset(ms, 0, sizeof *ms);
    ms->kind = SD_MS_DISCRETE;
    ms->prediction = prediction;
    ms->zsnr = zsnr != 0;
    ms->sigma_data = 1.0f;
    ms->n = SD_MS_TIMESTEPS;
    ms->skip = 1;
    linspace_f64(sqrt(linear_start), sqrt(linear_end), SD_MS_TIMESTEPS, ms->betas);
    double sig[SD_MS_TIMESTEPS];
    double ac = 1.0;
    for (int i = 0; i < SD_MS_TIMESTEPS; i++) {
        double b = ms->betas[i] * ms->betas[i];
        ms->betas[i] = b;
        ac = ac * (1.0 - b);
        ms->alphas_cumprod[i] = ac;
        sig[i] = sqrt((1.0 - ac) / ac);
    }
    if (ms->zsnr)
        rescale_zsnr(sig, SD_MS_TIMESTEPS);
    for (int i = 0; i < SD_MS_TIMESTEPS; i++) {
        ms->sigmas[i] = (float)sig[i];
        ms->log_sigmas[i] = (float)log(sig[i]);
    }
    if (prediction == SD_PRED_LCM) {
        /* ModelSamplingDiscreteDistilled: every 20th float32 sigma from the
         * top, their logs now taken in float32 (set_sigmas on a float tensor) */
        const int orig = 50, skip = SD_MS_TIMESTEPS / orig;
        float sub[50];
        for (int x = 0; x < orig; x++)
            sub[orig - 1 - x] = ms->sigmas[SD_MS_TIMESTEPS - 1 - x * skip];
        for (int i = 0; i < orig; i++) {
            ms->sigmas[i] = sub[i];
            ms->log_sigmas[i] = sd_torch_logf(sub[i]);
        }
        ms->n = orig;
        ms->skip = skip;
    }
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[ms->n - 1];
}

void sd_model_sampling_init_linear(sd_model_sampling *ms, sd_prediction prediction,
                                   double linear_start, double linear_end)
{
    init_schedule(ms, prediction, 0, linear_start, linear_end);
}

void sd_model_sampling_init(sd_model_sampling *ms, sd_prediction prediction)
{
    init_schedule(ms, prediction, 0, 0.00085, 0.012);
}

void sd_model_sampling_init_ex(sd_model_sampling *ms, sd_prediction prediction, int zsnr)
{
    init_schedule(ms, prediction, zsnr, 0.00085, 0.012);
}

/* ---- the flow schedules ------------------------------------------------------ */

/* comfy.model_sampling.time_snr_shift on a float32 tensor t: the Python
 * scalars alpha and alpha - 1 (a double) meet t as float32. */
static float time_snr_shift_f(double alpha, float t)
{
    if (alpha == 1.0)
        return t;
    float a = (float)alpha * t;
    float b = (float)(alpha - 1.0) * t;
    b = 1.0f + b;
    return a / b;
}

/* flux_time_shift(mu, 1.0, t) on a float32 tensor t with E = float32(exp(mu)):
 * 1/t is reciprocal(t), "** 1.0" is exact, "E + x" adds in float32, and
 * "E / y" is torch's __rtruediv__: reciprocal(y) * E. */
static float flux_time_shift_f(float E, float t)
{
    float r = 1.0f / t;
    r = r - 1.0f;
    float d = r + E;
    return (1.0f / d) * E;
}

static void init_flow_common(sd_model_sampling *ms, sd_ms_kind kind, double shift,
                             double multiplier, int timesteps)
{
    memset(ms, 0, sizeof *ms);
    ms->kind = kind;
    ms->prediction = SD_PRED_CONST;
    ms->sigma_data = 1.0f;
    ms->shift = shift;
    ms->multiplier = multiplier;
    ms->n = timesteps;
    ms->skip = 1;
    /* torch.arange(1, timesteps + 1) / timesteps: int64 divided in float32 */
    for (int i = 0; i < timesteps; i++) {
        float t = (float)(i + 1) / (float)timesteps;
        if (kind == SD_MS_FLOW)
            t = t * (float)multiplier;
        ms->sigmas[i] = sd_ms_sigma(ms, t);
    }
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[ms->n - 1];
}

void sd_model_sampling_init_flow(sd_model_sampling *ms, double shift, double multiplier)
{
    init_flow_common(ms, SD_MS_FLOW, shift, multiplier, SD_MS_TIMESTEPS);
}

void sd_model_sampling_init_flux(sd_model_sampling *ms, double shift)
{
    init_flow_common(ms, SD_MS_FLUX, shift, 1.0, SD_MS_MAX_SIGMAS);
}

void sd_model_sampling_init_flux_dev(sd_model_sampling *ms)
{
    sd_model_sampling_init_flux(ms, SD_MS_FLUX_DEFAULT_SHIFT);
}

void sd_model_sampling_init_flux_schnell(sd_model_sampling *ms)
{
    sd_model_sampling_init_flow(ms, 1.0, 1.0);
}

void sd_model_sampling_init_zimage(sd_model_sampling *ms)
{
    sd_model_sampling_init_flow(ms, SD_MS_ZIMAGE_DEFAULT_SHIFT, 1.0);
}

void sd_model_sampling_init_sd3(sd_model_sampling *ms)
{
    sd_model_sampling_init_flow(ms, SD_MS_SD3_DEFAULT_SHIFT, 1000.0);
}

double sd_ms_flux_shift(double max_shift, double base_shift, int width, int height)
{
    const double x1 = 256, x2 = 4096;
    double mm = (max_shift - base_shift) / (x2 - x1);
    double b = base_shift - mm * x1;
    /* width * height / (8 * 8 * 2 * 2): Python's true division of ints */
    return ((double)width * (double)height / 256.0) * mm + b;
}

#define SD_PI 3.14159265358979323846 /* math.pi */

/* ---- the continuous schedules ------------------------------------------------ */

void sd_model_sampling_init_continuous(sd_model_sampling *ms, sd_ms_kind kind, sd_prediction prediction,
                                       double sigma_min, double sigma_max, double sigma_data)
{
    memset(ms, 0, sizeof *ms);
    ms->kind = kind;
    ms->prediction = prediction;
    ms->sigma_data = (float)sigma_data;
    ms->n = SD_MS_TIMESTEPS;
    ms->skip = 1;
    /* torch.linspace(math.log(sigma_min), math.log(sigma_max), 1000).exp():
     * the Python logs rounded to float32, torch's float32 linspace and exp;
     * log_sigmas = sigmas.log() */
    sd_linspace_f32((float)log(sigma_min), (float)log(sigma_max), SD_MS_TIMESTEPS, ms->sigmas);
    for (int i = 0; i < SD_MS_TIMESTEPS; i++) {
        ms->sigmas[i] = sd_torch_expf(ms->sigmas[i]);
        ms->log_sigmas[i] = sd_torch_logf(ms->sigmas[i]);
    }
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[ms->n - 1];
}

static int is_continuous(const sd_model_sampling *ms)
{
    return ms->kind == SD_MS_CONT_EDM || ms->kind == SD_MS_CONT_V || ms->kind == SD_MS_COSMOS;
}

static const char *const pred_names[] = {"eps", "v_prediction", "lcm", "x0", "img_to_img"};

const char *sd_prediction_name(sd_prediction p)
{
    if (p == SD_PRED_CONST)
        return "const";
    if (p == SD_PRED_EDM)
        return "edm";
    if (p == SD_PRED_COSMOS_RFLOW)
        return "cosmos_rflow";
    return (unsigned)p < sizeof pred_names / sizeof *pred_names ? pred_names[p] : "?";
}

int sd_prediction_parse(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof pred_names / sizeof *pred_names); i++)
        if (strcmp(name, pred_names[i]) == 0)
            return i;
    return -1;
}

int sd_ms_timestep_index(const sd_model_sampling *ms, float sigma)
{
    if (ms->kind != SD_MS_DISCRETE) { /* (the continuous kinds: their table too) */
        int best = 0;
        float best_d = INFINITY;
        for (int k = 0; k < ms->n; k++) {
            float d = fabsf(sigma - ms->sigmas[k]);
            if (d < best_d) {
                best_d = d;
                best = k;
            }
        }
        return best;
    }
    float ls = sd_torch_logf(sigma);
    int best = 0;
    float best_d = INFINITY;
    for (int k = 0; k < ms->n; k++) {
        float d = fabsf(ls - ms->log_sigmas[k]);
        if (d < best_d) { /* strict: first index wins ties, as argmin */
            best_d = d;
            best = k;
        }
    }
    return best;
}

float sd_ms_timestep(const sd_model_sampling *ms, float sigma)
{
    if (ms->kind == SD_MS_CONT_EDM) /* 0.25 * sigma.log() */
        return 0.25f * sd_torch_logf(sigma);
    if (ms->kind == SD_MS_CONT_V) { /* sigma.atan() / math.pi * 2 (glibc's atanf:
                                     * torch's Sleef atanf may differ by an ulp) */
        float t = atanf(sigma) / (float)SD_PI;
        return t * 2.0f;
    }
    if (ms->kind == SD_MS_COSMOS)
        return sigma / (sigma + 1.0f);
    if (ms->kind == SD_MS_FLUX)
        return sigma;
    if (ms->kind == SD_MS_FLOW)
        return sigma * (float)ms->multiplier;
    int i = sd_ms_timestep_index(ms, sigma);
    return (float)(ms->skip > 1 ? i * ms->skip + (ms->skip - 1) : i);
}

float sd_ms_sigma(const sd_model_sampling *ms, float t)
{
    if (ms->kind == SD_MS_CONT_EDM) /* (timestep / 0.25).exp() */
        return sd_torch_expf(t / 0.25f);
    if (ms->kind == SD_MS_CONT_V) { /* (timestep * math.pi / 2).tan() */
        float a = t * (float)SD_PI;
        return sd_torch_tanf(a / 2.0f);
    }
    if (ms->kind == SD_MS_COSMOS) {
        float smax = ms->sigma_max;
        if (t >= smax / (smax + 1.0f))
            return smax;
        return t / (1.0f - t);
    }
    if (ms->kind == SD_MS_FLUX)
        return flux_time_shift_f((float)exp(ms->shift), t);
    if (ms->kind == SD_MS_FLOW)
        return time_snr_shift_f(ms->shift, t / (float)ms->multiplier);
    if (t != t)
        return NAN;
    if (ms->skip > 1) { /* distilled: ((t - (skip - 1)) / skip), float32 */
        t = t - (float)(ms->skip - 1);
        t = t / (float)ms->skip;
    }
    float top = (float)(ms->n - 1);
    float tc = t < 0.0f ? 0.0f : t > top ? top : t;
    int lo = (int)floorf(tc);
    int hi = (int)ceilf(tc);
    float w = tc - truncf(tc);
    float ls = (1.0f - w) * ms->log_sigmas[lo] + w * ms->log_sigmas[hi];
    return sd_torch_expf(ls);
}

double sd_ms_percent_to_sigma(const sd_model_sampling *ms, double percent)
{
    if (is_continuous(ms)) { /* log-linear in Python floats */
        if (percent <= 0.0)
            return 999999999.9;
        if (percent >= 1.0)
            return 0.0;
        percent = 1.0 - percent;
        double lmin = log((double)ms->sigma_min);
        return exp((log((double)ms->sigma_max) - lmin) * percent + lmin);
    }
    if (ms->kind != SD_MS_DISCRETE) {
        if (percent <= 0.0)
            return 1.0;
        if (percent >= 1.0)
            return 0.0;
        double t = 1.0 - percent;
        if (ms->kind == SD_MS_FLUX) { /* flux_time_shift(mu, 1.0, t), Python floats */
            double e = exp(ms->shift);
            return e / (e + (1.0 / t - 1.0));
        }
        if (ms->shift == 1.0) /* time_snr_shift(alpha, t) */
            return t;
        return ms->shift * t / (1.0 + (ms->shift - 1.0) * t);
    }
    if (percent <= 0.0)
        return 999999999.9;
    if (percent >= 1.0)
        return 0.0;
    percent = 1.0 - percent;
    return (double)sd_ms_sigma(ms, (float)(percent * 999.0));
}

int sd_ms_is_max_denoise(const sd_model_sampling *ms, float sigma0)
{
    double a = ms->sigma_max, b = sigma0;
    double tol = 1e-5 * fmax(fabs(a), fabs(b));
    return fabs(a - b) <= tol || b > a;
}

void sd_ms_calculate_input(const sd_model_sampling *ms, float sigma,
                           const float *x, float *out, size_t n)
{
    if (ms->prediction == SD_PRED_IMG_TO_IMG || ms->prediction == SD_PRED_CONST) {
        if (out != x)
            memcpy(out, x, n * sizeof *out);
        return;
    }
    if (ms->prediction == SD_PRED_COSMOS_RFLOW) { /* noise * (1.0 - sigma / (sigma + 1)) */
        float s = sigma / (sigma + 1.0f);
        float k = 1.0f - s;
        for (size_t i = 0; i < n; i++)
            out[i] = x[i] * k;
        return;
    }
    float sd2 = (float)((double)ms->sigma_data * ms->sigma_data);
    float s = sqrtf(sigma * sigma + sd2);
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] / s;
}

void sd_ms_calculate_denoised(const sd_model_sampling *ms, float sigma,
                              const float *model_out, const float *x,
                              float *denoised, size_t n)
{
    if (ms->prediction == SD_PRED_EPS || ms->prediction == SD_PRED_CONST) {
        for (size_t i = 0; i < n; i++) {
            float e = model_out[i] * sigma;
            denoised[i] = x[i] - e;
        }
        return;
    }
    if (ms->prediction == SD_PRED_X0 || ms->prediction == SD_PRED_IMG_TO_IMG) {
        if (denoised != model_out)
            memmove(denoised, model_out, n * sizeof *denoised);
        return;
    }
    if (ms->prediction == SD_PRED_LCM) {
        /* T = timestep * 10.0 (a long times a Python float: float32);
         * c_skip = 0.25 / (T^2 + 0.25) is reciprocal() * 0.25 in torch */
        float T = sd_ms_timestep(ms, sigma) * 10.0f;
        float den = T * T + 0.25f;
        float c_skip = (1.0f / den) * 0.25f;
        float c_out = T / sqrtf(den);
        for (size_t i = 0; i < n; i++) {
            float e = model_out[i] * sigma;
            float x0 = x[i] - e;
            float a = c_out * x0;
            float b = c_skip * x[i];
            denoised[i] = a + b;
        }
        return;
    }
    if (ms->prediction == SD_PRED_COSMOS_RFLOW) {
        /* s = sigma / (sigma + 1): model_input * (1.0 - s) - model_output * s */
        float s = sigma / (sigma + 1.0f);
        float k = 1.0f - s;
        for (size_t i = 0; i < n; i++) {
            float a = x[i] * k;
            float b = model_out[i] * s;
            denoised[i] = a - b;
        }
        return;
    }
    /* v: model_input * sd^2 / (sigma^2 + sd^2)
     *    - model_output * sigma * sd / (sigma^2 + sd^2)^0.5
     * edm: the same with + */
    int edm = ms->prediction == SD_PRED_EDM;
    float sd = ms->sigma_data;
    float sd2 = (float)((double)sd * sd);
    float den = sigma * sigma + sd2;
    float root = sqrtf(den);
    for (size_t i = 0; i < n; i++) {
        float a = x[i] * sd2;
        a = a / den;
        float b = model_out[i] * sigma;
        b = b * sd;
        b = b / root;
        denoised[i] = edm ? a + b : a - b;
    }
}

void sd_ms_noise_scaling(const sd_model_sampling *ms, float sigma, const float *noise,
                         const float *latent, int max_denoise, float *out, size_t n)
{
    if (ms->prediction == SD_PRED_CONST) {
        /* sigma * noise + (1.0 - sigma) * latent_image */
        float om = 1.0f - sigma;
        for (size_t i = 0; i < n; i++) {
            float a = sigma * noise[i];
            float b = om * (latent ? latent[i] : 0.0f);
            out[i] = a + b;
        }
        return;
    }
    /* COSMOS_RFLOW: noise * sigma + latent, whatever max_denoise */
    float s = max_denoise && ms->prediction != SD_PRED_COSMOS_RFLOW ? sqrtf(1.0f + sigma * sigma) : sigma;
    for (size_t i = 0; i < n; i++) {
        float v = noise[i] * s;
        out[i] = v + (latent ? latent[i] : 0.0f); /* += zeros, as ComfyUI */
    }
}

void sd_ms_inverse_noise_scaling(const sd_model_sampling *ms, float sigma,
                                 const float *x, float *out, size_t n)
{
    if (ms->prediction == SD_PRED_CONST) {
        float d = 1.0f - sigma;
        for (size_t i = 0; i < n; i++)
            out[i] = x[i] / d;
        return;
    }
    if (out != x)
        for (size_t i = 0; i < n; i++)
            out[i] = x[i];
}
