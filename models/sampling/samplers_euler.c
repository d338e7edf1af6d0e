/* samplers_euler.c - Euler / Heun / DPM-2 family (k_diffusion.sampling):
 * euler (also ddim), euler_ancestral, euler_cfg_pp, euler_ancestral_cfg_pp,
 * heun, heunpp2, dpm_2, dpm_2_ancestral. */
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)

/* Karras "churn": gamma for step i (0 unless s_churn > 0). */
static double churn_gamma(smp_ctx *c, const float *sigmas, int n_sigmas, int i)
{
    double s_churn = smp_opt(c->p->s_churn, 0.0);
    double s_tmin = smp_opt(c->p->s_tmin, 0.0);
    double s_tmax = smp_opt(c->p->s_tmax, INFINITY);
    if (!(s_churn > 0.0))
        return 0.0;
    if (!(s_tmin <= sigmas[i] && sigmas[i] <= s_tmax))
        return 0.0;
    double g = s_churn / (n_sigmas - 1);
    double cap = sqrt(2.0) - 1.0;
    return g < cap ? g : cap;
}

/* x += randn_like(x) * s_noise * (sigma_hat^2 - sigma^2)^0.5 when gamma > 0. */
static sd_status churn_apply(smp_ctx *c, float *xv, float *buf, float sigma, float sigma_hat,
                             sd_error *err)
{
    sd_status st = smp_global_randn(c, buf, err);
    if (st != SD_OK)
        return st;
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    float amp = sqrtf(sigma_hat * sigma_hat - sigma * sigma);
    FOR_N {
        float e = buf[k] * s_noise;
        xv[k] = xv[k] + e * amp;
    }
    return SD_OK;
}

/* Shared body of euler / heun / dpm_2 (they differ in the second stage). */
enum { KIND_EULER, KIND_HEUN, KIND_DPM2 };

static sd_status euler_like(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                            int kind, sd_error *err)
{
    sd_tensor *den = smp_tmp(c, err), *d = smp_tmp(c, err), *x2 = smp_tmp(c, err);
    sd_tensor *den2 = smp_tmp(c, err);
    if (!den || !d || !x2 || !den2)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *dv = smp_f(d), *x2v = smp_f(x2), *den2v = smp_f(den2);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        double gamma = churn_gamma(c, sigmas, n_sigmas, i);
        float sigma_hat = kind == KIND_EULER && gamma == 0.0 ? sigmas[i]
                                                             : sigmas[i] * (float)(gamma + 1.0);
        if (gamma > 0.0 && (st = churn_apply(c, xv, x2v, sigmas[i], sigma_hat, err)) != SD_OK)
            return st;
        if ((st = smp_denoise(c, x, sigma_hat, den, err)) != SD_OK)
            return st;
        const float *denv = smp_f(den);
        FOR_N dv[k] = (xv[k] - denv[k]) / sigma_hat;
        smp_progress(c, i, x, den);
        float s_next = sigmas[i + 1];
        if (kind == KIND_EULER || s_next == 0.0f) {
            float dt = s_next - sigma_hat;
            FOR_N {
                float t = dv[k] * dt;
                xv[k] = xv[k] + t;
            }
        } else if (kind == KIND_HEUN) {
            float dt = s_next - sigma_hat;
            FOR_N {
                float t = dv[k] * dt;
                x2v[k] = xv[k] + t;
            }
            if ((st = smp_denoise(c, x2, s_next, den2, err)) != SD_OK)
                return st;
            FOR_N {
                float d2 = (x2v[k] - den2v[k]) / s_next;
                float dp = (dv[k] + d2) / 2.0f;
                float t = dp * dt;
                xv[k] = xv[k] + t;
            }
        } else { /* DPM-Solver-2 */
            float la = sd_torch_logf(sigma_hat), lb = sd_torch_logf(s_next);
            float sigma_mid = sd_torch_expf(smp_lerpf(la, lb, 0.5f));
            float dt_1 = sigma_mid - sigma_hat;
            float dt_2 = s_next - sigma_hat;
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
        }
    }
    return SD_OK;
}

sd_status smp_euler(smp_ctx *c, sd_tensor *x, const float *sigmas, int n, sd_error *err)
{
    return euler_like(c, x, sigmas, n, KIND_EULER, err);
}

sd_status smp_heun(smp_ctx *c, sd_tensor *x, const float *sigmas, int n, sd_error *err)
{
    return euler_like(c, x, sigmas, n, KIND_HEUN, err);
}

sd_status smp_dpm_2(smp_ctx *c, sd_tensor *x, const float *sigmas, int n, sd_error *err)
{
    return euler_like(c, x, sigmas, n, KIND_DPM2, err);
}

/* ---- ancestral ---------------------------------------------------------- */

sd_status smp_euler_ancestral(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                              sd_error *err)
{
    if (c->p->flow)
        return smp_euler_ancestral_rf(c, x, sigmas, n_sigmas, err);
    double eta = smp_opt(c->p->eta, 1.0);
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        if ((st = smp_denoise(c, x, sigmas[i], den, err)) != SD_OK)
            return st;
        float sd, su;
        smp_ancestral_step(sigmas[i], sigmas[i + 1], eta, &sd, &su);
        smp_progress(c, i, x, den);
        if (sd == 0.0f) {
            smp_copy(c, xv, denv);
            continue;
        }
        float dt = sd - sigmas[i];
        if ((st = smp_noise(c, sigmas[i], sigmas[i + 1], nv, err)) != SD_OK)
            return st;
        FOR_N {
            float d = (xv[k] - denv[k]) / sigmas[i];
            float a = xv[k] + d * dt;
            float b = nv[k] * s_noise;
            b = b * su;
            xv[k] = a + b;
        }
    }
    return SD_OK;
}

sd_status smp_dpm_2_ancestral(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                              sd_error *err)
{
    if (c->p->flow)
        return smp_dpm_2_ancestral_rf(c, x, sigmas, n_sigmas, err);
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
        float s = sigmas[i];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        float sd, su;
        smp_ancestral_step(s, sigmas[i + 1], eta, &sd, &su);
        smp_progress(c, i, x, den);
        FOR_N dv[k] = (xv[k] - denv[k]) / s;
        if (sd == 0.0f) {
            float dt = sd - s;
            FOR_N {
                float t = dv[k] * dt;
                xv[k] = xv[k] + t;
            }
            continue;
        }
        float sigma_mid = sd_torch_expf(smp_lerpf(sd_torch_logf(s), sd_torch_logf(sd), 0.5f));
        float dt_1 = sigma_mid - s, dt_2 = sd - s;
        FOR_N {
            float t = dv[k] * dt_1;
            x2v[k] = xv[k] + t;
        }
        if ((st = smp_denoise(c, x2, sigma_mid, den2, err)) != SD_OK)
            return st;
        if ((st = smp_noise(c, s, sigmas[i + 1], nv, err)) != SD_OK)
            return st;
        FOR_N {
            float d2 = (x2v[k] - den2v[k]) / sigma_mid;
            float t = d2 * dt_2;
            float a = xv[k] + t;
            float b = nv[k] * s_noise;
            b = b * su;
            xv[k] = a + b;
        }
    }
    return SD_OK;
}

/* ---- CFG++ -------------------------------------------------------------- */

static sd_status euler_anc_cfg_pp(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                                  double eta, double s_noise_d, sd_error *err)
{
    float s_noise = (float)s_noise_d;
    sd_tensor *den = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        const float *uv = smp_f(c->uncond);
        smp_progress(c, i, x, den);
        if (sn == 0.0f) {
            smp_copy(c, xv, denv);
            continue;
        }
        /* alpha = sigma * exp(lambda(sigma)): ~1 for VP, 1 - sigma for flow */
        float alpha_s = s * sd_torch_expf(smp_half_log_snr(c, s));
        float alpha_t = sn * sd_torch_expf(smp_half_log_snr(c, sn));
        float sd, su;
        smp_ancestral_step(s / alpha_s, sn / alpha_t, eta, &sd, &su);
        sd = alpha_t * sd;
        int noisy = eta > 0.0 && s_noise_d > 0.0;
        if (noisy && (st = smp_noise(c, s, sn, nv, err)) != SD_OK)
            return st;
        FOR_N {
            float au = alpha_s * uv[k];
            float d = (xv[k] - au) / s;
            float a = alpha_t * denv[k];
            float b = sd * d;
            float v = a + b;
            if (noisy) {
                float e = alpha_t * nv[k];
                e = e * s_noise;
                e = e * su;
                v = v + e;
            }
            xv[k] = v;
        }
    }
    return SD_OK;
}

sd_status smp_euler_ancestral_cfg_pp(smp_ctx *c, sd_tensor *x, const float *sigmas, int n,
                                     sd_error *err)
{
    return euler_anc_cfg_pp(c, x, sigmas, n, smp_opt(c->p->eta, 1.0),
                            smp_opt(c->p->s_noise, 1.0), err);
}

sd_status smp_euler_cfg_pp(smp_ctx *c, sd_tensor *x, const float *sigmas, int n, sd_error *err)
{
    return euler_anc_cfg_pp(c, x, sigmas, n, 0.0, 0.0, err);
}

/* SamplerEulerCFGpp's "alternative" version (comfy_extras/
 * nodes_advanced_samplers.py sample_euler_pp): Euler along
 * d = (x - denoised + uncond_denoised - denoised) / sigma, no noise. */
sd_status smp_euler_pp(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    sd_tensor *den = smp_tmp(c, err);
    if (!den)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        const float *uv = smp_f(c->uncond);
        smp_progress(c, i, x, den);
        float dt = sigmas[i + 1] - s;
        FOR_N {
            float a = xv[k] - denv[k];
            a = a + uv[k];
            float d = (a - denv[k]) / s;
            xv[k] = xv[k] + d * dt;
        }
    }
    return SD_OK;
}

/* ---- Heun++ (sample_heunpp2) ---------------------------------------------- */

sd_status smp_heunpp2(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    sd_tensor *den = smp_tmp(c, err), *d = smp_tmp(c, err), *x2 = smp_tmp(c, err);
    sd_tensor *den2 = smp_tmp(c, err), *d2 = smp_tmp(c, err), *x3 = smp_tmp(c, err);
    sd_tensor *den3 = smp_tmp(c, err), *eps = smp_tmp(c, err);
    if (!den || !d || !x2 || !den2 || !d2 || !x3 || !den3 || !eps)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *dv = smp_f(d), *x2v = smp_f(x2);
    float *den2v = smp_f(den2), *d2v = smp_f(d2), *x3v = smp_f(x3), *den3v = smp_f(den3);
    float s_end = sigmas[n_sigmas - 1];
    int churn = smp_opt(c->p->s_churn, 0.0) > 0.0;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        double gamma = churn_gamma(c, sigmas, n_sigmas, i);
        float sigma_hat = sigmas[i] * (float)(gamma + 1.0);
        /* ComfyUI draws randn_like(x) every step (global generator); it only
         * matters when churn is on, so only then is the stream emulated. */
        if (churn && (st = smp_global_randn(c, smp_f(eps), err)) != SD_OK)
            return st;
        if (gamma > 0.0) {
            float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
            float amp = sqrtf(sigma_hat * sigma_hat - sigmas[i] * sigmas[i]);
            const float *ev = smp_f(eps);
            FOR_N {
                float e = ev[k] * s_noise;
                xv[k] = xv[k] + e * amp;
            }
        }
        if ((st = smp_denoise(c, x, sigma_hat, den, err)) != SD_OK)
            return st;
        FOR_N dv[k] = (xv[k] - denv[k]) / sigma_hat;
        smp_progress(c, i, x, den);
        float s1 = sigmas[i + 1];
        float dt = s1 - sigma_hat;
        if (s1 == s_end) {
            FOR_N {
                float t = dv[k] * dt;
                xv[k] = xv[k] + t;
            }
            continue;
        }
        FOR_N {
            float t = dv[k] * dt;
            x2v[k] = xv[k] + t;
        }
        if ((st = smp_denoise(c, x2, s1, den2, err)) != SD_OK)
            return st;
        FOR_N d2v[k] = (x2v[k] - den2v[k]) / s1;
        if (sigmas[i + 2] == s_end) {
            float w = 2.0f * sigmas[0];
            float w2 = s1 / w;
            float w1 = 1.0f - w2;
            FOR_N {
                float a = dv[k] * w1;
                float b = d2v[k] * w2;
                float dp = a + b;
                float t = dp * dt;
                xv[k] = xv[k] + t;
            }
            continue;
        }
        float s2 = sigmas[i + 2];
        float dt_2 = s2 - s1;
        FOR_N {
            float t = d2v[k] * dt_2;
            x3v[k] = x2v[k] + t;
        }
        if ((st = smp_denoise(c, x3, s2, den3, err)) != SD_OK)
            return st;
        float w = 3.0f * sigmas[0];
        float w2 = s1 / w, w3 = s2 / w;
        float w1 = 1.0f - w2;
        w1 = w1 - w3;
        FOR_N {
            float d3 = (x3v[k] - den3v[k]) / s2;
            float a = w1 * dv[k];
            float b = w2 * d2v[k];
            float e = w3 * d3;
            float dp = a + b;
            dp = dp + e;
            float t = dp * dt;
            xv[k] = xv[k] + t;
        }
    }
    return SD_OK;
}
