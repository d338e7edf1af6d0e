/* samplers_rf.c - the rectified-flow forms of the ancestral samplers that
 * k_diffusion.sampling switches to when the model sampling is CONST (Flux,
 * SD3): sample_euler_ancestral_RF, sample_dpm_2_ancestral_RF and
 * sample_dpmpp_2s_ancestral_RF. The step goes down to
 *   sigma_down = sigma_next * (1 + (sigma_next / sigma - 1) * eta)
 * by interpolating between x and the denoised estimate (x = sigma * noise +
 * (1 - sigma) * x0 on a straight path), then renoises with
 *   renoise = sqrt(sigma_next^2 - sigma_down^2 * (1 - sigma_next)^2 / (1 - sigma_down)^2)
 * after rescaling x by (1 - sigma_next) / (1 - sigma_down). Scalars are 0-d
 * float32 tensors in torch, one rounding per op in its order. */
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)

/* The step's sigma_down, alpha_{i+1} = 1 - sigma_next, alpha_down and
 * renoise_coeff. */
typedef struct rf_step {
    float sigma_down, alpha_ip1, alpha_down, renoise;
} rf_step;

static rf_step rf_step_of(float s, float sn, double eta)
{
    rf_step r;
    float ratio = sn / s;
    ratio = ratio - 1.0f;
    ratio = ratio * (float)eta;
    ratio = 1.0f + ratio;
    r.sigma_down = sn * ratio;
    r.alpha_ip1 = 1.0f - sn;
    r.alpha_down = 1.0f - r.sigma_down;
    float a = sn * sn;
    float b = r.sigma_down * r.sigma_down;
    b = b * (r.alpha_ip1 * r.alpha_ip1);
    b = b / (r.alpha_down * r.alpha_down);
    r.renoise = sqrtf(a - b);
    return r;
}

/* x = (alpha_ip1 / alpha_down) * x + noise * s_noise * renoise */
static sd_status rf_renoise(smp_ctx *c, float *xv, float *nv, float s, float sn, const rf_step *r,
                            float s_noise, sd_error *err)
{
    sd_status st = smp_noise(c, s, sn, nv, err);
    if (st != SD_OK)
        return st;
    float scale = r->alpha_ip1 / r->alpha_down;
    FOR_N {
        float a = scale * xv[k];
        float b = nv[k] * s_noise;
        b = b * r->renoise;
        xv[k] = a + b;
    }
    return SD_OK;
}

/* x = ratio * x + (1 - ratio) * d */
static void rf_lerp(smp_ctx *c, float *out, const float *xv, const float *dv, float ratio)
{
    float om = 1.0f - ratio;
    FOR_N {
        float a = ratio * xv[k];
        float b = om * dv[k];
        out[k] = a + b;
    }
}

sd_status smp_euler_ancestral_rf(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                                 sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        smp_progress(c, i, x, den);
        if (sn == 0.0f) {
            smp_copy(c, xv, denv);
            continue;
        }
        rf_step r = rf_step_of(s, sn, eta);
        rf_lerp(c, xv, xv, denv, r.sigma_down / s);
        if (eta > 0.0 && (st = rf_renoise(c, xv, nv, s, sn, &r, s_noise, err)) != SD_OK)
            return st;
    }
    return SD_OK;
}

sd_status smp_dpm_2_ancestral_rf(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                                 sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *d = smp_tmp(c, err), *x2 = smp_tmp(c, err);
    sd_tensor *den2 = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !d || !x2 || !den2 || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *dv = smp_f(d), *x2v = smp_f(x2);
    float *den2v = smp_f(den2), *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        rf_step r = rf_step_of(s, sn, eta);
        smp_progress(c, i, x, den);
        FOR_N dv[k] = (xv[k] - denv[k]) / s;
        if (r.sigma_down == 0.0f) { /* Euler */
            float dt = r.sigma_down - s;
            FOR_N {
                float t = dv[k] * dt;
                xv[k] = xv[k] + t;
            }
            continue;
        }
        /* DPM-Solver-2 to sigma_down through the log-midpoint */
        float sigma_mid = sd_torch_expf(smp_lerpf(sd_torch_logf(s), sd_torch_logf(r.sigma_down), 0.5f));
        float dt_1 = sigma_mid - s, dt_2 = r.sigma_down - s;
        FOR_N {
            float t = dv[k] * dt_1;
            x2v[k] = xv[k] + t;
        }
        if ((st = smp_denoise(c, x2, sigma_mid, den2, err)) != SD_OK)
            return st;
        FOR_N {
            float d2 = (x2v[k] - den2v[k]) / sigma_mid;
            float t = d2 * dt_2;
            xv[k] = xv[k] + t;
        }
        if ((st = rf_renoise(c, xv, nv, s, sn, &r, s_noise, err)) != SD_OK)
            return st;
    }
    return SD_OK;
}

sd_status smp_dpmpp_2s_ancestral_rf(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                                    sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *u = smp_tmp(c, err), *den2 = smp_tmp(c, err);
    sd_tensor *nz = smp_tmp(c, err);
    if (!den || !u || !den2 || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *uv = smp_f(u), *den2v = smp_f(den2);
    float *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        rf_step r = rf_step_of(s, sn, eta);
        smp_progress(c, i, x, den);
        if (sn == 0.0f) { /* Euler */
            float dt = r.sigma_down - s;
            FOR_N {
                float d = (xv[k] - denv[k]) / s;
                float t = d * dt;
                xv[k] = xv[k] + t;
            }
        } else {
            /* DPM-Solver++(2S) in lambda = log((1 - sigma) / sigma), whose
             * inverse is sigma = 1 / (exp(lambda) + 1); sigma 1 has no
             * lambda, ComfyUI takes 0.9999 for the midpoint then */
            float sigma_s;
            if (s == 1.0f) {
                sigma_s = (float)0.9999;
            } else {
                float t_i = sd_torch_logf((1.0f - s) / s);
                float t_down = sd_torch_logf((1.0f - r.sigma_down) / r.sigma_down);
                float h = t_down - t_i;
                float mid = t_i + 0.5f * h;
                sigma_s = 1.0f / (sd_torch_expf(mid) + 1.0f);
            }
            rf_lerp(c, uv, xv, denv, sigma_s / s);
            if ((st = smp_denoise(c, u, sigma_s, den2, err)) != SD_OK)
                return st;
            rf_lerp(c, xv, xv, den2v, r.sigma_down / s);
        }
        if (sn > 0.0f && eta > 0.0 && (st = rf_renoise(c, xv, nv, s, sn, &r, s_noise, err)) != SD_OK)
            return st;
    }
    return SD_OK;
}
