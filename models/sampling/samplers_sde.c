/* samplers_sde.c - stochastic one-step samplers on the default noise
 * (k_diffusion.sampling): ddpm, lcm, er_sde, seeds_2, seeds_3,
 * exp_heun_2_x0, exp_heun_2_x0_sde. VP models only. */
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)

/* ---- ddpm (generic_step_sampler + DDPMSampler_step) ------------------------- */

sd_status smp_ddpm(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    sd_tensor *den = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sp = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        smp_progress(c, i, x, den);
        float in_scale = sqrtf(1.0f + s * s);
        float ac = 1.0f / ((s * s) + 1.0f);
        float acp = 1.0f / ((sp * sp) + 1.0f);
        float alpha = ac / acp;
        float a = sqrtf(1.0f / alpha);
        float oma = 1.0f - alpha;
        float sq = sqrtf(1.0f - ac);
        float nscale = 0.0f;
        if (sp > 0.0f) {
            nscale = oma * (1.0f - acp);
            nscale = sqrtf(nscale / (1.0f - ac));
            if ((st = smp_noise(c, s, sp, nv, err)) != SD_OK)
                return st;
        }
        float out_scale = sqrtf(1.0f + sp * sp);
        FOR_N {
            float xin = xv[k] / in_scale;
            float eps = (xv[k] - denv[k]) / s;
            float t = oma * eps;
            t = t / sq;
            float mu = xin - t;
            mu = a * mu;
            if (sp > 0.0f) {
                float e = nscale * nv[k];
                mu = mu + e;
            }
            if (sp != 0.0f)
                mu = mu * out_scale;
            xv[k] = mu;
        }
    }
    return SD_OK;
}

/* ---- lcm ---------------------------------------------------------------------- */

sd_status smp_lcm(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
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
        if (sn > 0.0f) {
            /* model_sampling.noise_scaling(sigma_next, noise, denoised):
             * VP noise * sigma + x, flow sigma * noise + (1 - sigma) * x */
            if ((st = smp_noise(c, s, sn, nv, err)) != SD_OK)
                return st;
            if (c->p->flow) {
                float om = 1.0f - sn;
                FOR_N {
                    float e = sn * nv[k];
                    float d = om * denv[k];
                    xv[k] = e + d;
                }
            } else {
                FOR_N {
                    float e = nv[k] * sn;
                    xv[k] = e + denv[k];
                }
            }
        } else {
            smp_copy(c, xv, denv);
        }
    }
    return SD_OK;
}

/* ---- er_sde (VP ER-SDE-Solver-3) ------------------------------------------------ */

/* The noise scaler: ER-SDE's default x * (exp(x^0.3) + 10), or the
 * reverse-time SDE's x^(eta + 1) (SamplerER_SDE; pow in float32 as torch). */
static inline float er_scaler(const sd_sampler_params *p, float v)
{
    if (p->er_reverse_time)
        return powf(v, (float)(p->er_eta + 1.0));
    return v * (sd_torch_expf(powf(v, 0.3f)) + 10.0f);
}

sd_status smp_er_sde(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    const int max_stage = c->p->er_max_stage >= 1 && c->p->er_max_stage <= 3 ? c->p->er_max_stage : 3;
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *old = smp_tmp(c, err), *dd = smp_tmp(c, err);
    sd_tensor *old_dd = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !old || !dd || !old_dd || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *oldv = smp_f(old), *ddv = smp_f(dd);
    float *oddv = smp_f(old_dd), *nv = smp_f(nz);
    sd_status st;
    /* er_lambda = exp(-half_log_snr) = exp(log(sigma)); 0 for sigma 0 */
    float *er = smp_alloc(c, (size_t)n_sigmas * sizeof(float), err);
    if (!er || !(sigmas = smp_snr_sigmas(c, sigmas, n_sigmas, err)))
        return SD_ERR_NOMEM;
    for (int i = 0; i < n_sigmas; i++)
        er[i] = sd_torch_expf(-smp_half_log_snr(c, sigmas[i]));
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        smp_progress(c, i, x, den);
        int stage = i + 1 < max_stage ? i + 1 : max_stage;
        if (sn == 0.0f) {
            smp_copy(c, xv, denv);
        } else {
            float er_s = er[i], er_t = er[i + 1];
            float alpha_s = s / er_s, alpha_t = sn / er_t;
            float r_alpha = alpha_t / alpha_s;
            float r = er_scaler(c->p, er_t) / er_scaler(c->p, er_s);
            float a = r_alpha * r, b = alpha_t * (1.0f - r);
            FOR_N {
                float p = a * xv[k];
                float q = b * denv[k];
                xv[k] = p + q;
            }
            if (stage >= 2) {
                float dt = er_t - er_s;
                float step = -dt / 200.0f;
                double s1 = 0.0, su = 0.0;
                for (int q = 0; q < 200; q++) {
                    float pos = er_t + (float)q * step;
                    float sc = er_scaler(c->p, pos);
                    s1 += (double)(1.0f / sc);
                    su += (double)((pos - er_s) / sc);
                }
                float sum1 = (float)s1 * step;
                float sumu = (float)su * step;
                float nt = er_scaler(c->p, er_t);
                float denom = er_s - er[i - 1];
                float cf2 = alpha_t * (dt + sum1 * nt);
                float cf3 = 0.0f, denom3 = 0.0f;
                if (stage >= 3) {
                    cf3 = (dt * dt) / 2.0f + sumu * nt;
                    cf3 = alpha_t * cf3;
                    denom3 = (er_s - er[i - 2]) / 2.0f;
                }
                FOR_N {
                    float d = (denv[k] - oldv[k]) / denom;
                    float t = cf2 * d;
                    xv[k] = xv[k] + t;
                    if (stage >= 3) {
                        float u = (d - oddv[k]) / denom3;
                        u = cf3 * u;
                        xv[k] = xv[k] + u;
                    }
                    ddv[k] = d;
                }
                smp_copy(c, oddv, ddv);
            }
            if (s_noise > 0.0f) {
                float v = er_t * er_t - (er_s * er_s) * (r * r);
                float amp = sqrtf(v);
                if (isnan(amp))
                    amp = 0.0f;
                if ((st = smp_noise(c, s, sn, nv, err)) != SD_OK)
                    return st;
                FOR_N {
                    float e = alpha_t * nv[k];
                    e = e * s_noise;
                    e = e * amp;
                    xv[k] = xv[k] + e;
                }
            }
        }
        smp_copy(c, oldv, denv);
    }
    return SD_OK;
}

/* ---- SEEDS-2 / SEEDS-3 / exponential Heun ------------------------------------------ */

static inline float ei_phi_1(float h) { return smp_expm1f(h); }
static inline float ei_phi_2(float h) { return (smp_expm1f(h) - h) / h; }

/* The first stage shared by the SEEDS solvers: from x at sigma s to the
 * intermediate sigma s_mid = sigma at lambda_s + r*h, a first-order
 * exponential-integrator step, plus (when injecting) fresh noise whose
 * scaled draw is kept in sdv for the later stages to correlate with. */
static sd_status seeds_first_stage(smp_ctx *c, const float *xv, const float *denv, float *outv,
                                   float *sdv, float *nv, float s, float s_mid, float alpha_mid,
                                   double r, float h, float h_eta, float fe, int inject,
                                   float s_noise, sd_error *err)
{
    float fr = (float)r;
    float a1 = (s_mid / s) * sd_torch_expf(((-fr) * h) * fe);
    float b1 = alpha_mid * ei_phi_1((-fr) * h_eta);
    FOR_N {
        float p = a1 * xv[k];
        float q = b1 * denv[k];
        outv[k] = p - q;
    }
    if (!inject)
        return SD_OK;
    float m = (float)(-2.0 * r) * h;
    m = m * fe;
    float amp = sqrtf(-smp_expm1f(m));
    sd_status st = smp_noise(c, s, s_mid, nv, err);
    if (st != SD_OK)
        return st;
    FOR_N {
        sdv[k] = amp * nv[k];
        float e = sdv[k] * s_mid;
        e = e * s_noise;
        outv[k] = outv[k] + e;
    }
    return SD_OK;
}

static sd_status seeds_2(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, double eta,
                         double s_noise_d, double r, int phi_2, sd_error *err)
{
    float s_noise = (float)s_noise_d;
    int inject = eta > 0.0 && s_noise_d > 0.0;
    double fac = 1.0 / (2.0 * r);
    sd_tensor *den = smp_tmp(c, err), *x2 = smp_tmp(c, err), *den2 = smp_tmp(c, err);
    sd_tensor *sde = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !x2 || !den2 || !sde || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *x2v = smp_f(x2), *den2v = smp_f(den2);
    float *sdv = smp_f(sde), *nv = smp_f(nz);
    float fe = (float)eta, fr = (float)r;
    if (!(sigmas = smp_snr_sigmas(c, sigmas, n_sigmas, err)))
        return SD_ERR_NOMEM;
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
        float lambda_s = smp_half_log_snr(c, s), lambda_t = smp_half_log_snr(c, sn);
        float h = lambda_t - lambda_s;
        float h_eta = h * (float)(eta + 1.0);
        float lambda_s_1 = smp_lerpf(lambda_s, lambda_t, fr);
        float sigma_s_1 = smp_sigma_of_half_log_snr(c, lambda_s_1);
        float alpha_s_1 = sigma_s_1 * sd_torch_expf(lambda_s_1);
        float alpha_t = sn * sd_torch_expf(lambda_t);

        /* step 1 */
        if ((st = seeds_first_stage(c, xv, denv, x2v, sdv, nv, s, sigma_s_1, alpha_s_1, r, h,
                                    h_eta, fe, inject, s_noise, err)) != SD_OK)
            return st;
        if ((st = smp_denoise(c, x2, sigma_s_1, den2, err)) != SD_OK)
            return st;

        /* step 2 */
        float a2 = (sn / s) * sd_torch_expf((-h) * fe);
        if (!phi_2) {
            float e1 = ei_phi_1(-h_eta);
            float w = (float)fac;
            float b = alpha_t * e1;
            FOR_N {
                float dd = fabsf(w) < 0.5f ? denv[k] + w * (den2v[k] - denv[k])
                                           : den2v[k] - (den2v[k] - denv[k]) * (1.0f - w);
                float p = a2 * xv[k];
                float q = b * dd;
                xv[k] = p - q;
            }
        } else {
            float bb2 = ei_phi_2(-h_eta) / fr;
            float bb1 = ei_phi_1(-h_eta) - bb2;
            FOR_N {
                float p = bb1 * denv[k];
                float q = bb2 * den2v[k];
                p = p + q;
                p = alpha_t * p;
                float a = a2 * xv[k];
                xv[k] = a - p;
            }
        }
        if (inject) {
            float sf = (float)(r - 1.0) * h;
            sf = sf * fe;
            float esf = sd_torch_expf(sf);
            float amp = sqrtf(-smp_expm1f(sf * 2.0f));
            if ((st = smp_noise(c, sigma_s_1, sn, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float v = sdv[k] * esf;
                float t = amp * nv[k];
                v = v + t;
                v = v * sn;
                v = v * s_noise;
                xv[k] = xv[k] + v;
            }
        }
    }
    return SD_OK;
}

sd_status smp_seeds_2(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return seeds_2(c, x, s, n, smp_opt(c->p->eta, 1.0), smp_opt(c->p->s_noise, 1.0),
                   smp_opt(c->p->r, 0.5), c->p->seeds_phi_2, err);
}

sd_status smp_exp_heun_2_x0(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return seeds_2(c, x, s, n, 0.0, 0.0, 1.0, 1, err);
}

sd_status smp_exp_heun_2_x0_sde(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return seeds_2(c, x, s, n, smp_opt(c->p->eta, 1.0), smp_opt(c->p->s_noise, 1.0), 1.0, 1, err);
}

sd_status smp_seeds_3(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    double s_noise_d = smp_opt(c->p->s_noise, 1.0);
    float s_noise = (float)s_noise_d, fe = (float)eta;
    int inject = eta > 0.0 && s_noise_d > 0.0;
    const double r_1 = 1.0 / 3.0, r_2 = 2.0 / 3.0;
    float fr1 = (float)r_1, fr2 = (float)r_2;
    sd_tensor *den = smp_tmp(c, err), *xs = smp_tmp(c, err), *den2 = smp_tmp(c, err);
    sd_tensor *den3 = smp_tmp(c, err), *sde = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !xs || !den2 || !den3 || !sde || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *xsv = smp_f(xs), *den2v = smp_f(den2);
    float *den3v = smp_f(den3), *sdv = smp_f(sde), *nv = smp_f(nz);
    if (!(sigmas = smp_snr_sigmas(c, sigmas, n_sigmas, err)))
        return SD_ERR_NOMEM;
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
        float lambda_s = smp_half_log_snr(c, s), lambda_t = smp_half_log_snr(c, sn);
        float h = lambda_t - lambda_s;
        float h_eta = h * (float)(eta + 1.0);
        float l1 = smp_lerpf(lambda_s, lambda_t, fr1), l2 = smp_lerpf(lambda_s, lambda_t, fr2);
        float s1 = smp_sigma_of_half_log_snr(c, l1), s2 = smp_sigma_of_half_log_snr(c, l2);
        float alpha_s_1 = s1 * sd_torch_expf(l1), alpha_s_2 = s2 * sd_torch_expf(l2);
        float alpha_t = sn * sd_torch_expf(lambda_t);

        /* step 1 */
        if ((st = seeds_first_stage(c, xv, denv, xsv, sdv, nv, s, s1, alpha_s_1, r_1, h, h_eta,
                                    fe, inject, s_noise, err)) != SD_OK)
            return st;
        if ((st = smp_denoise(c, xs, s1, den2, err)) != SD_OK)
            return st;

        /* step 2 */
        float a3_2 = (float)(r_2 / r_1) * ei_phi_2((-fr2) * h_eta);
        float a3_1 = ei_phi_1((-fr2) * h_eta) - a3_2;
        float a2 = (s2 / s) * sd_torch_expf(((-fr2) * h) * fe);
        FOR_N {
            float p = a3_1 * denv[k];
            float q = a3_2 * den2v[k];
            p = p + q;
            p = alpha_s_2 * p;
            float a = a2 * xv[k];
            xsv[k] = a - p;
        }
        if (inject) {
            float sf = (float)(r_1 - r_2) * h;
            sf = sf * fe;
            float esf = sd_torch_expf(sf), amp = sqrtf(-smp_expm1f(sf * 2.0f));
            if ((st = smp_noise(c, s1, s2, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float v = sdv[k] * esf;
                float t = amp * nv[k];
                sdv[k] = v + t;
                float e = sdv[k] * s2;
                e = e * s_noise;
                xsv[k] = xsv[k] + e;
            }
        }
        if ((st = smp_denoise(c, xs, s2, den3, err)) != SD_OK)
            return st;

        /* step 3 */
        float b3 = ei_phi_2(-h_eta) / fr2;
        float bb1 = ei_phi_1(-h_eta) - b3;
        float a3 = (sn / s) * sd_torch_expf((-h) * fe);
        FOR_N {
            float p = bb1 * denv[k];
            float q = b3 * den3v[k];
            p = p + q;
            p = alpha_t * p;
            float a = a3 * xv[k];
            xv[k] = a - p;
        }
        if (inject) {
            float sf = (float)(r_2 - 1.0) * h;
            sf = sf * fe;
            float esf = sd_torch_expf(sf), amp = sqrtf(-smp_expm1f(sf * 2.0f));
            if ((st = smp_noise(c, s2, sn, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float v = sdv[k] * esf;
                float t = amp * nv[k];
                v = v + t;
                v = v * sn;
                v = v * s_noise;
                xv[k] = xv[k] + v;
            }
        }
    }
    return SD_OK;
}
