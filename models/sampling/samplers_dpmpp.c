/* samplers_dpmpp.c - DPM-Solver++ family (k_diffusion.sampling):
 * dpmpp_2s_ancestral(_cfg_pp), dpmpp_sde(_gpu), dpmpp_2m(_cfg_pp),
 * dpmpp_2m_sde(_heun)(_gpu), dpmpp_3m_sde(_gpu).
 * dpmpp_2s_ancestral and dpmpp_2m work in lambda(sigma) = -log(sigma) for
 * every model (as ComfyUI; a flow model's dpmpp_2s_ancestral is the _RF form,
 * samplers_rf.c); the SDE ones in the model's half-logSNR (smp_half_log_snr). */
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)

static inline float t_fn(float sigma) { return -sd_torch_logf(sigma); }
static inline float sigma_fn(float t) { return sd_torch_expf(-t); }

/* ---- DPM-Solver++(2S) ancestral ------------------------------------------ */

static sd_status dpmpp_2s(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                          int cfg_pp, sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *x2 = smp_tmp(c, err), *den2 = smp_tmp(c, err);
    sd_tensor *nz = smp_tmp(c, err);
    if (!den || !x2 || !den2 || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *x2v = smp_f(x2), *den2v = smp_f(den2);
    float *nv = smp_f(nz);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        float sd, su;
        smp_ancestral_step(s, sn, eta, &sd, &su);
        smp_progress(c, i, x, den);
        if (sd == 0.0f) {
            if (cfg_pp) {
                const float *uv = smp_f(c->uncond);
                FOR_N {
                    float d = (xv[k] - uv[k]) / s;
                    float t = d * sd;
                    xv[k] = denv[k] + t;
                }
            } else {
                float dt = sd - s;
                FOR_N {
                    float d = (xv[k] - denv[k]) / s;
                    float t = d * dt;
                    xv[k] = xv[k] + t;
                }
            }
        } else {
            float t = t_fn(s), t_next = t_fn(sd);
            float h = t_next - t;
            float ss = t + 0.5f * h;
            float r1 = sigma_fn(ss) / sigma_fn(t);
            float e1 = smp_expm1f(-h * 0.5f);
            if (cfg_pp) {
                const float *uv = smp_f(c->uncond);
                FOR_N {
                    float dd = denv[k] - uv[k];
                    float xx = xv[k] + dd;
                    float a = r1 * xx;
                    float b = e1 * denv[k];
                    x2v[k] = a - b;
                }
            } else {
                FOR_N {
                    float a = r1 * xv[k];
                    float b = e1 * denv[k];
                    x2v[k] = a - b;
                }
            }
            if ((st = smp_denoise(c, x2, sigma_fn(ss), den2, err)) != SD_OK)
                return st;
            float r2 = sigma_fn(t_next) / sigma_fn(t);
            float e2 = smp_expm1f(-h);
            if (cfg_pp) {
                /* the expression is evaluated after the second model call, so
                 * the uncond it sees is the second call's */
                const float *uv = smp_f(c->uncond);
                FOR_N {
                    float dd = denv[k] - uv[k];
                    float xx = xv[k] + dd;
                    float a = r2 * xx;
                    float b = e2 * den2v[k];
                    xv[k] = a - b;
                }
            } else {
                FOR_N {
                    float a = r2 * xv[k];
                    float b = e2 * den2v[k];
                    xv[k] = a - b;
                }
            }
        }
        if (sn > 0.0f) {
            if ((st = smp_noise(c, s, sn, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float b = nv[k] * s_noise;
                b = b * su;
                xv[k] = xv[k] + b;
            }
        }
    }
    return SD_OK;
}

sd_status smp_dpmpp_2s_ancestral(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    if (c->p->flow)
        return smp_dpmpp_2s_ancestral_rf(c, x, s, n, err);
    return dpmpp_2s(c, x, s, n, 0, err);
}

sd_status smp_dpmpp_2s_ancestral_cfg_pp(smp_ctx *c, sd_tensor *x, const float *s, int n,
                                        sd_error *err)
{
    return dpmpp_2s(c, x, s, n, 1, err);
}

/* ---- DPM-Solver++ (stochastic), Brownian noise ----------------------------- */

sd_status smp_dpmpp_sde(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                        sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    double s_noise_d = smp_opt(c->p->s_noise, 1.0);
    float s_noise = (float)s_noise_d;
    double r = smp_opt(c->p->r, 0.5);
    double fac = 1.0 / (2.0 * r);
    int noisy = eta > 0.0 && s_noise_d > 0.0;
    sd_tensor *den = smp_tmp(c, err), *x2 = smp_tmp(c, err), *den2 = smp_tmp(c, err);
    sd_tensor *nz = smp_tmp(c, err);
    if (!den || !x2 || !den2 || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *x2v = smp_f(x2), *den2v = smp_f(den2);
    float *nv = smp_f(nz);
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
        float lambda_s_1 = lambda_s + (float)r * h;
        float sigma_s_1 = smp_sigma_of_half_log_snr(c, lambda_s_1);
        float alpha_s = s * sd_torch_expf(lambda_s);
        float alpha_s_1 = sigma_s_1 * sd_torch_expf(lambda_s_1);
        float alpha_t = sn * sd_torch_expf(lambda_t);

        /* step 1 */
        float sd, su;
        smp_ancestral_step(sd_torch_expf(-lambda_s), sd_torch_expf(-lambda_s_1), eta, &sd, &su);
        float h_ = -sd_torch_logf(sd) - lambda_s;
        float a1 = (alpha_s_1 / alpha_s) * sd_torch_expf(-h_);
        float b1 = alpha_s_1 * smp_expm1f(-h_);
        FOR_N {
            float a = a1 * xv[k];
            float b = b1 * denv[k];
            x2v[k] = a - b;
        }
        if (noisy) {
            if ((st = smp_noise(c, s, sigma_s_1, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float e = alpha_s_1 * nv[k];
                e = e * s_noise;
                e = e * su;
                x2v[k] = x2v[k] + e;
            }
        }
        if ((st = smp_denoise(c, x2, sigma_s_1, den2, err)) != SD_OK)
            return st;

        /* step 2 */
        smp_ancestral_step(sd_torch_expf(-lambda_s), sd_torch_expf(-lambda_t), eta, &sd, &su);
        h_ = -sd_torch_logf(sd) - lambda_s;
        float a2 = (alpha_t / alpha_s) * sd_torch_expf(-h_);
        float b2 = alpha_t * smp_expm1f(-h_);
        float f1 = (float)(1.0 - fac), f2 = (float)fac;
        FOR_N {
            float dd = f1 * denv[k];
            float de = f2 * den2v[k];
            dd = dd + de;
            float a = a2 * xv[k];
            float b = b2 * dd;
            xv[k] = a - b;
        }
        if (noisy) {
            if ((st = smp_noise(c, s, sn, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float e = alpha_t * nv[k];
                e = e * s_noise;
                e = e * su;
                xv[k] = xv[k] + e;
            }
        }
    }
    return SD_OK;
}

/* ---- DPM-Solver++(2M) -------------------------------------------------------- */

sd_status smp_dpmpp_2m(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    sd_tensor *den = smp_tmp(c, err), *old = smp_tmp(c, err);
    if (!den || !old)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *oldv = smp_f(old);
    int have_old = 0;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        smp_progress(c, i, x, den);
        float t = t_fn(s), t_next = t_fn(sn);
        float h = t_next - t;
        float ratio = sigma_fn(t_next) / sigma_fn(t);
        float e = smp_expm1f(-h);
        if (!have_old || sn == 0.0f) {
            FOR_N {
                float a = ratio * xv[k];
                float b = e * denv[k];
                xv[k] = a - b;
            }
        } else {
            float h_last = t - t_fn(sigmas[i - 1]);
            float r = h_last / h;
            float q = 1.0f / (2.0f * r);
            float p = 1.0f + q;
            FOR_N {
                float dd = p * denv[k];
                float oo = q * oldv[k];
                dd = dd - oo;
                float a = ratio * xv[k];
                float b = e * dd;
                xv[k] = a - b;
            }
        }
        smp_copy(c, oldv, denv);
        have_old = 1;
    }
    return SD_OK;
}

sd_status smp_dpmpp_2m_cfg_pp(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                              sd_error *err)
{
    sd_tensor *den = smp_tmp(c, err), *old = smp_tmp(c, err);
    if (!den || !old)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *oldv = smp_f(old);
    int have_old = 0;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        const float *uv = smp_f(c->uncond);
        smp_progress(c, i, x, den);
        float t = t_fn(s), t_next = t_fn(sn);
        float h = t_next - t;
        float eh = sd_torch_expf(-h);
        float neh = -eh;
        if (!have_old || sn == 0.0f) {
            FOR_N {
                float mix = neh * uv[k];
                float a = denv[k] + mix;
                float b = eh * xv[k];
                xv[k] = a + b;
            }
        } else {
            float h_last = t - t_fn(sigmas[i - 1]);
            float r = h_last / h;
            float q = smp_expm1f(-h) * (1.0f / (2.0f * r));
            FOR_N {
                float mix = neh * uv[k];
                float dd = denv[k] - oldv[k];
                dd = q * dd;
                mix = mix - dd;
                float a = denv[k] + mix;
                float b = eh * xv[k];
                xv[k] = a + b;
            }
        }
        smp_copy(c, oldv, uv);
        have_old = 1;
    }
    return SD_OK;
}

/* ---- DPM-Solver++(2M) SDE / (3M) SDE, Brownian noise ------------------------ */

/* x += noise * sigma_next * sqrt(-expm1(-2 h eta)) * s_noise */
static sd_status sde_noise_add(smp_ctx *c, float *xv, float *nv, float s, float sn, float h,
                               double eta, float s_noise, sd_error *err)
{
    sd_status st = smp_noise(c, s, sn, nv, err);
    if (st != SD_OK)
        return st;
    float m2h = -2.0f * h;
    m2h = m2h * (float)eta;
    float amp = sqrtf(-smp_expm1f(m2h));
    FOR_N {
        float e = nv[k] * sn;
        e = e * amp;
        e = e * s_noise;
        xv[k] = xv[k] + e;
    }
    return SD_OK;
}

static sd_status dpmpp_2m_sde(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                              int heun, sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    double s_noise_d = smp_opt(c->p->s_noise, 1.0);
    float s_noise = (float)s_noise_d;
    if (c->p->sde_solver == SD_SDE_SOLVER_HEUN)
        heun = 1;
    else if (c->p->sde_solver == SD_SDE_SOLVER_MIDPOINT)
        heun = 0;
    sd_tensor *den = smp_tmp(c, err), *old = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !old || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *oldv = smp_f(old), *nv = smp_f(nz);
    if (!(sigmas = smp_snr_sigmas(c, sigmas, n_sigmas, err)))
        return SD_ERR_NOMEM;
    int have_old = 0;
    float h = 0.0f, h_last = 0.0f;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        smp_progress(c, i, x, den);
        if (sn == 0.0f) {
            smp_copy(c, xv, denv);
        } else {
            float lambda_s = smp_half_log_snr(c, s), lambda_t = smp_half_log_snr(c, sn);
            h = lambda_t - lambda_s;
            float h_eta = h * (float)(eta + 1.0);
            float alpha_t = sn * sd_torch_expf(lambda_t);
            float mh = -h;
            float a = (sn / s) * sd_torch_expf(mh * (float)eta);
            float em = -smp_expm1f(-h_eta);
            float b = alpha_t * em;
            FOR_N {
                float p = a * xv[k];
                float q = b * denv[k];
                xv[k] = p + q;
            }
            if (have_old) {
                float r = h_last / h;
                float coef;
                if (heun) {
                    float ph = em / (-h_eta) + 1.0f;
                    coef = alpha_t * ph;
                    coef = coef * (1.0f / r);
                } else {
                    coef = 0.5f * alpha_t;
                    coef = coef * em;
                    coef = coef * (1.0f / r);
                }
                FOR_N {
                    float dd = denv[k] - oldv[k];
                    dd = coef * dd;
                    xv[k] = xv[k] + dd;
                }
            }
            if (eta > 0.0 && s_noise_d > 0.0 &&
                (st = sde_noise_add(c, xv, nv, s, sn, h, eta, s_noise, err)) != SD_OK)
                return st;
        }
        smp_copy(c, oldv, denv);
        have_old = 1;
        h_last = h;
    }
    return SD_OK;
}

sd_status smp_dpmpp_2m_sde(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return dpmpp_2m_sde(c, x, s, n, 0, err);
}

sd_status smp_dpmpp_2m_sde_heun(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return dpmpp_2m_sde(c, x, s, n, 1, err);
}

sd_status smp_dpmpp_3m_sde(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                           sd_error *err)
{
    double eta = smp_opt(c->p->eta, 1.0);
    double s_noise_d = smp_opt(c->p->s_noise, 1.0);
    float s_noise = (float)s_noise_d;
    sd_tensor *den = smp_tmp(c, err), *den1 = smp_tmp(c, err), *den2 = smp_tmp(c, err);
    sd_tensor *nz = smp_tmp(c, err);
    if (!den || !den1 || !den2 || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *nv = smp_f(nz);
    if (!(sigmas = smp_snr_sigmas(c, sigmas, n_sigmas, err)))
        return SD_ERR_NOMEM;
    float h = 0.0f, h_1 = 0.0f, h_2 = 0.0f;
    int have_h = 0, have_h1 = 0, have_h2 = 0;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        float *denv = smp_f(den), *d1v = smp_f(den1), *d2v = smp_f(den2);
        smp_progress(c, i, x, den);
        if (sn == 0.0f) {
            smp_copy(c, xv, denv);
        } else {
            float lambda_s = smp_half_log_snr(c, s), lambda_t = smp_half_log_snr(c, sn);
            h = lambda_t - lambda_s;
            have_h = 1;
            float h_eta = h * (float)(eta + 1.0);
            float alpha_t = sn * sd_torch_expf(lambda_t);
            float mh = -h;
            float a = (sn / s) * sd_torch_expf(mh * (float)eta);
            float b = alpha_t * -smp_expm1f(-h_eta);
            FOR_N {
                float p = a * xv[k];
                float q = b * denv[k];
                xv[k] = p + q;
            }
            if (have_h2) {
                float r0 = h_1 / h, r1 = h_2 / h;
                float phi_2 = smp_expm1f(-h_eta) / h_eta + 1.0f;
                float phi_3 = phi_2 / h_eta - 0.5f;
                float c2 = alpha_t * phi_2, c3 = alpha_t * phi_3;
                float r01 = r0 + r1;
                FOR_N {
                    float d1_0 = (denv[k] - d1v[k]) / r0;
                    float d1_1 = (d1v[k] - d2v[k]) / r1;
                    float diff = d1_0 - d1_1;
                    float t = diff * r0;
                    t = t / r01;
                    float d1 = d1_0 + t;
                    float d2 = diff / r01;
                    float p = c2 * d1;
                    float q = c3 * d2;
                    float v = xv[k] + p;
                    xv[k] = v - q;
                }
            } else if (have_h1) {
                float r = h_1 / h;
                float phi_2 = smp_expm1f(-h_eta) / h_eta + 1.0f;
                float c2 = alpha_t * phi_2;
                FOR_N {
                    float d = (denv[k] - d1v[k]) / r;
                    float p = c2 * d;
                    xv[k] = xv[k] + p;
                }
            }
            if (eta > 0.0 && s_noise_d > 0.0 &&
                (st = sde_noise_add(c, xv, nv, s, sn, h, eta, s_noise, err)) != SD_OK)
                return st;
        }
        /* denoised_1, denoised_2 = denoised, denoised_1 (rotate buffers) */
        sd_tensor *tmp = den2;
        den2 = den1;
        den1 = den;
        den = tmp;
        h_2 = h_1;
        have_h2 = have_h1;
        h_1 = h;
        have_h1 = have_h;
    }
    return SD_OK;
}
