/* samplers_core.c - sd_sampler_run and the helpers every sampler uses:
 * temporaries, the model call, progress/cancel, noise sources. */
#include <stdlib.h>
#include <string.h>
#include "models/sampling/sampler_internal.h"
#include "models/sampling/brownian.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h"
#include "models/image/imageops.h"

void sd_sampler_params_init(sd_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->eta = SD_SAMPLER_DEFAULT;
    p->s_noise = SD_SAMPLER_DEFAULT;
    p->s_churn = SD_SAMPLER_DEFAULT;
    p->s_tmin = SD_SAMPLER_DEFAULT;
    p->s_tmax = SD_SAMPLER_DEFAULT;
    p->r = SD_SAMPLER_DEFAULT;
    p->ge_gamma = SD_SAMPLER_DEFAULT;
    p->sde_solver = SD_SDE_SOLVER_DEFAULT;
    p->lcm_total_upscale = 1.0; /* SamplerLCMUpscale's defaults */
    p->lcm_upscale_steps = -1;
    p->lcm_upscale_method = SD_UPSCALE_BISLERP;
}

sd_tensor *smp_tmp(smp_ctx *c, sd_error *err)
{
    if (c->ntmp >= SMP_MAX_TMP) {
        sd_error_set(err, SD_ERR_INTERNAL, "sampler %s: too many temporaries", c->s->name);
        return NULL;
    }
    sd_tensor *t = sd_tensor_new(SD_F32, c->ndim, c->shape);
    if (!t) {
        sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory for a %lld-element temporary",
                     c->s->name, (long long)c->n);
        return NULL;
    }
    c->tmp[c->ntmp++] = t;
    return t;
}

void *smp_alloc(smp_ctx *c, size_t bytes, sd_error *err)
{
    void *p = c->nmem < 8 ? calloc(1, bytes ? bytes : 1) : NULL;
    if (!p) {
        sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory (%zu bytes)", c->s->name, bytes);
        return NULL;
    }
    c->mem[c->nmem++] = p;
    return p;
}

void smp_copy(smp_ctx *c, float *dst, const float *src)
{
    if (dst != src)
        memcpy(dst, src, (size_t)c->n * sizeof(float));
}

sd_status smp_denoise(smp_ctx *c, const sd_tensor *x, float sigma, sd_tensor *denoised,
                      sd_error *err)
{
    const sd_sampler_params *p = c->p;
    if (p->cancel && p->cancel(p->cancel_ud))
        return sd_error_set(err, SD_ERR_CANCELLED, "sampler %s: cancelled", c->s->name);
    sd_status st = c->model->eval(c->model->ud, x, sigma, denoised, c->uncond, err);
    if (st != SD_OK)
        sd_error_prefix(err, "sampler %s at sigma %g", c->s->name, (double)sigma);
    return st;
}

void smp_progress(smp_ctx *c, int i, const sd_tensor *x, const sd_tensor *den)
{
    if (c->p->progress)
        c->p->progress(c->p->progress_ud, i, c->total_steps, x, den);
}

sd_status smp_noise(smp_ctx *c, float sigma, float sigma_next, float *out, sd_error *err)
{
    if (!c->has_noise)
        return sd_error_set(err, SD_ERR_INTERNAL, "sampler %s: no noise source", c->s->name);
    sd_status st = c->noise.sample(c->noise.ud, sigma, sigma_next, out, c->n, err);
    if (st != SD_OK)
        sd_error_prefix(err, "sampler %s noise", c->s->name);
    return st;
}

sd_status smp_global_randn_n(smp_ctx *c, float *out, int64_t n, int serial, sd_error *err)
{
    struct sd_rng *r = c->p->global_rng;
    if (!r) {
        /* no generator from the caller: ComfyUI's state after
         * prepare_noise seeded it with the seed and drew x's noise */
        if (!c->global_rng) {
            c->global_rng = sd_rng_new(c->p->seed);
            float *skip = c->global_rng ? malloc((size_t)c->n * sizeof(float)) : NULL;
            if (!skip)
                return sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", c->s->name);
            sd_rng_randn(c->global_rng, skip, c->n);
            free(skip);
        }
        r = c->global_rng;
    }
    if (serial)
        sd_rng_randn_serial(r, out, n);
    else
        sd_rng_randn(r, out, n);
    return SD_OK;
}

sd_status smp_global_randn(smp_ctx *c, float *out, sd_error *err)
{
    return smp_global_randn_n(c, out, c->n, 0, err);
}

void smp_ancestral_step(float sigma_from, float sigma_to, double eta, float *sigma_down,
                        float *sigma_up)
{
    if (eta == 0.0) {
        *sigma_down = sigma_to;
        *sigma_up = 0.0f;
        return;
    }
    /* min(sigma_to, eta * (st^2 * (sf^2 - st^2) / sf^2) ** 0.5) */
    float st2 = sigma_to * sigma_to;
    float sf2 = sigma_from * sigma_from;
    float v = st2 * (sf2 - st2);
    v = v / sf2;
    v = sqrtf(v);
    v = (float)eta * v;
    float up = v < sigma_to ? v : sigma_to; /* python min keeps the first on ties */
    *sigma_up = up;
    *sigma_down = sqrtf(st2 - up * up);
}

double smp_default_percent_to_sigma(double percent)
{
    sd_model_sampling *ms = malloc(sizeof *ms);
    if (!ms)
        return NAN;
    sd_model_sampling_init(ms, SD_PRED_EPS);
    double s = sd_ms_percent_to_sigma(ms, percent);
    free(ms);
    return s;
}

float smp_half_log_snr(const smp_ctx *c, float sigma)
{
    if (!c->p->flow)
        return -sd_torch_logf(sigma);
    if (sigma == 1.0f)
        return -INFINITY; /* logit(1) = inf */
    float q = sigma / (1.0f - sigma);
    return -logf(q);
}

float smp_sigma_of_half_log_snr(const smp_ctx *c, float lambda)
{
    if (!c->p->flow)
        return sd_torch_expf(-lambda);
    float a = -lambda; /* half_log_snr.neg().sigmoid() */
    float e = expf(-a);
    return 1.0f / (1.0f + e);
}

const float *smp_snr_sigmas(smp_ctx *c, const float *sigmas, int n_sigmas, sd_error *err)
{
    if (!c->p->flow || n_sigmas <= 1 || !(sigmas[0] >= 1.0f))
        return sigmas;
    float *s = smp_alloc(c, (size_t)n_sigmas * sizeof *s, err);
    if (!s)
        return NULL;
    memcpy(s, sigmas, (size_t)n_sigmas * sizeof *s);
    s[0] = (float)c->p->percent_to_sigma(c->p->percent_to_sigma_ud, 1e-4);
    return s;
}

/* ---- default noise: torch.Generator seeded seed+1, randn(x.shape) ------- */

static sd_status default_noise_sample(void *ud, float sigma, float sigma_next, float *out,
                                      int64_t n, sd_error *err)
{
    (void)sigma;
    (void)sigma_next;
    (void)err;
    sd_rng_randn((sd_rng *)ud, out, n);
    return SD_OK;
}

static sd_status brownian_noise_sample(void *ud, float sigma, float sigma_next, float *out,
                                       int64_t n, sd_error *err)
{
    return sd_brownian_noise((sd_brownian *)ud, sigma, sigma_next, out, n, err);
}

static sd_status run(const sd_sampler *s, const sd_denoiser *model, const float *sigmas,
                     int n_sigmas, sd_tensor *x, const sd_sampler_params *params,
                     sd_tensor **result, sd_error *err)
{
    if (!s || !model || !model->eval || !x || !params)
        return sd_error_set(err, SD_ERR_INVALID, "sd_sampler_run: NULL argument");
    if (x->dtype != SD_F32 || x->ndim < 1)
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: x must be an F32 tensor", s->name);
    if (n_sigmas < 1 || !sigmas)
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: empty sigmas", s->name);
    for (int i = 0; i < n_sigmas; i++)
        if (!(sigmas[i] >= 0.0f) || isinf(sigmas[i]))
            return sd_error_set(err, SD_ERR_INVALID, "sampler %s: sigmas[%d] = %g is not a finite "
                                "non-negative value", s->name, i, (double)sigmas[i]);
    if (params->flow && !params->percent_to_sigma)
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: a flow model needs its percent_to_sigma",
                            s->name);
    if (n_sigmas == 1)
        return SD_OK; /* KSAMPLER on one sigma: nothing to integrate */

    smp_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.model = model;
    c.p = params;
    c.n = sd_tensor_numel(x);
    c.ndim = x->ndim;
    memcpy(c.shape, x->shape, sizeof c.shape);
    c.total_steps = n_sigmas - 1;

    sd_status st = SD_OK;
    sd_rng *rng = NULL;
    sd_brownian *bt = NULL;
    if (params->noise) {
        c.noise = *params->noise;
        c.has_noise = 1;
    } else if (s->noise == SD_SAMPLER_NOISE_DEFAULT) {
        rng = sd_rng_new(params->seed + 1); /* CPU default_noise_sampler: seed + 1 */
        if (!rng) {
            st = sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", s->name);
            goto done;
        }
        c.noise.sample = default_noise_sample;
        c.noise.ud = rng;
        c.has_noise = 1;
    } else if (s->noise == SD_SAMPLER_NOISE_BROWNIAN) {
        /* sigma_min = smallest non-zero sigma, sigma_max = largest */
        float lo = INFINITY, hi = 0.0f;
        for (int i = 0; i < n_sigmas; i++) {
            if (sigmas[i] > 0.0f && sigmas[i] < lo)
                lo = sigmas[i];
            if (sigmas[i] > hi)
                hi = sigmas[i];
        }
        if (isinf(lo)) {
            st = sd_error_set(err, SD_ERR_INVALID, "sampler %s: all sigmas are zero", s->name);
            goto done;
        }
        st = sd_brownian_new(params->seed, lo, hi, x->ndim, x->shape, &bt, err);
        if (st != SD_OK) {
            sd_error_prefix(err, "sampler %s", s->name);
            goto done;
        }
        c.noise.sample = brownian_noise_sample;
        c.noise.ud = bt;
        c.has_noise = 1;
    }
    if (s->flags & SD_SAMPLER_NEEDS_UNCOND) {
        c.uncond = smp_tmp(&c, err);
        if (!c.uncond) {
            st = SD_ERR_NOMEM;
            goto done;
        }
    }

    st = s->run(&c, x, sigmas, n_sigmas, err);
    if (st == SD_OK && c.result) {
        *result = c.result;
        c.result = NULL;
    }

done:
    sd_tensor_unref(c.result);
    for (int i = 0; i < c.ntmp; i++)
        sd_tensor_unref(c.tmp[i]);
    for (int i = 0; i < c.nmem; i++)
        free(c.mem[i]);
    sd_rng_free(rng);
    sd_rng_free(c.global_rng);
    sd_brownian_free(bt);
    return st;
}

sd_status sd_sampler_run(const sd_sampler *s, const sd_denoiser *model, const float *sigmas,
                         int n_sigmas, sd_tensor *x, const sd_sampler_params *params,
                         sd_error *err)
{
    if (s && sd_sampler_resizes(s))
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s changes the latent's size "
                            "(sd_sampler_run_resizing runs it)", s->name);
    sd_tensor *result = NULL;
    return run(s, model, sigmas, n_sigmas, x, params, &result, err);
}

sd_status sd_sampler_run_resizing(const sd_sampler *s, const sd_denoiser *model,
                                  const float *sigmas, int n_sigmas, sd_tensor **x,
                                  const sd_sampler_params *params, sd_error *err)
{
    if (!x)
        return sd_error_set(err, SD_ERR_INVALID, "sd_sampler_run_resizing: NULL argument");
    sd_tensor *result = NULL;
    sd_status st = run(s, model, sigmas, n_sigmas, *x, params, &result, err);
    if (result) {
        sd_tensor_unref(*x);
        *x = result;
    }
    return st;
}

float sd_sampler_final_sigma(const sd_sampler *s, const float *sigmas, int n_sigmas)
{
    float last = sigmas[n_sigmas - 1];
    if (last == 0.0f && n_sigmas > 1 && s &&
        (strcmp(s->name, "uni_pc") == 0 || strcmp(s->name, "uni_pc_bh2") == 0))
        return 0.001f; /* sample_unipc: timesteps = sigmas[:]; timesteps[-1] = 0.001 */
    return last;
}
