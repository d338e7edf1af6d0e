/* samplers_multistep.c - linear multistep samplers (k_diffusion.sampling):
 * lms, ipndm, ipndm_v, deis (tab), res_multistep(_ancestral)(_cfg_pp),
 * gradient_estimation(_cfg_pp). */
#include <stdlib.h>
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)

/* ---- lms ------------------------------------------------------------------ */

/* linear_multistep_coeff: integral over [t[i], t[i+1]] of the Lagrange basis
 * polynomial of node t[i-j] among t[i], ..., t[i-order+1]. ComfyUI integrates
 * with scipy.quad (exact for these polynomials); the node differences are
 * float32 (numpy float32 arithmetic), everything else double. */
static double lms_coeff(int order, const float *t, int i, int j)
{
    double poly[8] = {1.0}; /* coefficients, low degree first */
    int deg = 0;
    for (int kk = 0; kk < order; kk++) {
        if (kk == j)
            continue;
        double den = (double)(float)(t[i - j] - t[i - kk]);
        double root = t[i - kk];
        /* poly *= (tau - root) / den */
        double np[8] = {0};
        for (int d = 0; d <= deg; d++) {
            np[d + 1] += poly[d] / den;
            np[d] -= poly[d] * root / den;
        }
        deg++;
        for (int d = 0; d <= deg; d++)
            poly[d] = np[d];
    }
    double a = t[i], b = t[i + 1], sum = 0.0;
    for (int d = deg; d >= 0; d--) {
        double pb = 1.0, pa = 1.0;
        for (int e = 0; e <= d; e++) {
            pb *= b;
            pa *= a;
        }
        sum += poly[d] * (pb - pa) / (d + 1);
    }
    return sum;
}

sd_status smp_lms(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    int order = c->p->lms_order > 0 ? c->p->lms_order : 4;
    if (order > 7)
        return sd_error_set(err, SD_ERR_INVALID, "sampler lms: order %d above 7", order);
    sd_tensor *den = smp_tmp(c, err);
    sd_tensor *ds[8];
    for (int j = 0; j <= order; j++)
        if (!(ds[j] = smp_tmp(c, err)))
            return SD_ERR_NOMEM;
    if (!den)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den);
    int nds = 0; /* ds[0] oldest ... ds[nds-1] newest */
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        if ((st = smp_denoise(c, x, sigmas[i], den, err)) != SD_OK)
            return st;
        if (nds == order + 1) { /* never more than order kept (pop(0)) */
            sd_tensor *t = ds[0];
            for (int j = 0; j < nds - 1; j++)
                ds[j] = ds[j + 1];
            ds[nds - 1] = t;
            nds--;
        }
        float *dv = smp_f(ds[nds]);
        FOR_N dv[k] = (xv[k] - denv[k]) / sigmas[i];
        nds++;
        if (nds > order) {
            sd_tensor *t = ds[0];
            for (int j = 0; j < nds - 1; j++)
                ds[j] = ds[j + 1];
            ds[nds - 1] = t;
            nds--;
        }
        smp_progress(c, i, x, den);
        if (sigmas[i + 1] == 0.0f) {
            smp_copy(c, xv, denv);
            continue;
        }
        int cur = i + 1 < order ? i + 1 : order;
        float coef[8];
        for (int j = 0; j < cur; j++)
            coef[j] = (float)lms_coeff(cur, sigmas, i, j);
        /* x + sum(coeff * d for coeff, d in zip(coeffs, reversed(ds))) */
        FOR_N {
            float acc = 0.0f;
            for (int j = 0; j < cur; j++) {
                float t = coef[j] * smp_f(ds[nds - 1 - j])[k];
                acc = j == 0 ? t : acc + t;
            }
            xv[k] = xv[k] + acc;
        }
    }
    return SD_OK;
}

/* ---- iPNDM ------------------------------------------------------------------ */

/* Shared loop of ipndm / ipndm_v / deis: x_next from d_cur and up to three
 * previous d's, the step's coefficients supplied by `coef`. */
typedef void (*ipndm_coef_fn)(const float *sigmas, int i, int order, void *ud, float *cf);

static sd_status ipndm_like(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                            int variable, sd_error *err)
{
    const int max_order = 4;
    sd_tensor *den = smp_tmp(c, err), *buf[3], *dcur = smp_tmp(c, err);
    for (int j = 0; j < 3; j++)
        if (!(buf[j] = smp_tmp(c, err)))
            return SD_ERR_NOMEM;
    if (!den || !dcur)
        return SD_ERR_NOMEM;
    /* ComfyUI's callback gets the x the sampler was called with, every step */
    sd_tensor *x_start = c->p->progress ? smp_tmp(c, err) : NULL;
    if (c->p->progress && !x_start)
        return SD_ERR_NOMEM;
    if (x_start)
        smp_copy(c, smp_f(x_start), smp_f(x));
    float *xv = smp_f(x), *denv = smp_f(den);
    int nbuf = 0; /* buf[nbuf-1] is buffer_model[-1] */
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float t_cur = sigmas[i], t_next = sigmas[i + 1];
        if ((st = smp_denoise(c, x, t_cur, den, err)) != SD_OK)
            return st;
        smp_progress(c, i, x_start, den);
        float *dv = smp_f(dcur);
        FOR_N dv[k] = (xv[k] - denv[k]) / t_cur;
        int order = i + 1 < max_order ? i + 1 : max_order;
        float dt = t_next - t_cur;
        const float *b1 = nbuf >= 1 ? smp_f(buf[nbuf - 1]) : NULL;
        const float *b2 = nbuf >= 2 ? smp_f(buf[nbuf - 2]) : NULL;
        const float *b3 = nbuf >= 3 ? smp_f(buf[nbuf - 3]) : NULL;
        if (t_next == 0.0f) {
            smp_copy(c, xv, denv);
        } else if (order == 1) {
            FOR_N {
                float t = dt * dv[k];
                xv[k] = xv[k] + t;
            }
        } else if (!variable) {
            if (order == 2) {
                FOR_N {
                    float v = 3.0f * dv[k];
                    v = v - b1[k];
                    v = dt * v;
                    v = v / 2.0f;
                    xv[k] = xv[k] + v;
                }
            } else if (order == 3) {
                FOR_N {
                    float v = 23.0f * dv[k];
                    float w = 16.0f * b1[k];
                    v = v - w;
                    w = 5.0f * b2[k];
                    v = v + w;
                    v = dt * v;
                    v = v / 12.0f;
                    xv[k] = xv[k] + v;
                }
            } else {
                FOR_N {
                    float v = 55.0f * dv[k];
                    float w = 59.0f * b1[k];
                    v = v - w;
                    w = 37.0f * b2[k];
                    v = v + w;
                    w = 9.0f * b3[k];
                    v = v - w;
                    v = dt * v;
                    v = v / 24.0f;
                    xv[k] = xv[k] + v;
                }
            }
        } else {
            /* ipndm_v: variable-step coefficients, float32 0-d tensor math */
            float h_n = t_next - t_cur;
            float h_n_1 = t_cur - sigmas[i - 1];
            float c1, c2, c3 = 0.0f, c4 = 0.0f;
            if (order == 2) {
                c1 = (2.0f + (h_n / h_n_1)) / 2.0f;
                c2 = -(h_n / h_n_1) / 2.0f;
            } else {
                float h_n_2 = sigmas[i - 1] - sigmas[i - 2];
                /* temp = (1 - h_n / (3 (h_n + h_n_1)) * (h_n (h_n + h_n_1)) / (h_n_1 (h_n_1 + h_n_2))) / 2 */
                float s01 = h_n + h_n_1;
                float q = h_n / (3.0f * s01);
                float num = h_n * s01;
                float den12 = h_n_1 * (h_n_1 + h_n_2);
                float temp1 = q * num;
                temp1 = temp1 / den12;
                temp1 = (1.0f - temp1) / 2.0f;
                if (order == 3) {
                    c1 = (2.0f + (h_n / h_n_1)) / 2.0f + temp1;
                    c2 = -(h_n / h_n_1) / 2.0f - (1.0f + h_n_1 / h_n_2) * temp1;
                    c3 = temp1 * h_n_1 / h_n_2;
                } else {
                    float h_n_3 = sigmas[i - 2] - sigmas[i - 3];
                    float s012 = s01 + h_n_2;
                    float ta = (1.0f - q) / 2.0f;
                    float tb = 1.0f - h_n / (2.0f * s01);
                    tb = tb * h_n / (6.0f * s012);
                    float temp2 = ta + tb;
                    float nn = h_n * s01 * s012;
                    float dd = h_n_1 * (h_n_1 + h_n_2) * (h_n_1 + h_n_2 + h_n_3);
                    temp2 = temp2 * nn / dd;
                    float g = h_n_1 * (h_n_1 + h_n_2) / (h_n_2 * (h_n_2 + h_n_3));
                    c1 = (2.0f + (h_n / h_n_1)) / 2.0f + temp1 + temp2;
                    c2 = -(h_n / h_n_1) / 2.0f - (1.0f + h_n_1 / h_n_2) * temp1 -
                         (1.0f + (h_n_1 / h_n_2) + g) * temp2;
                    c3 = temp1 * h_n_1 / h_n_2 + ((h_n_1 / h_n_2) + g * (1.0f + h_n_2 / h_n_3)) * temp2;
                    c4 = -temp2 * g * h_n_1 / h_n_2;
                }
            }
            FOR_N {
                float v = c1 * dv[k];
                float w = c2 * b1[k];
                v = v + w;
                if (order >= 3) {
                    w = c3 * b2[k];
                    v = v + w;
                }
                if (order >= 4) {
                    w = c4 * b3[k];
                    v = v + w;
                }
                v = dt * v;
                xv[k] = xv[k] + v;
            }
        }
        /* buffer_model: keep the last max_order - 1 d's */
        if (nbuf == max_order - 1) {
            sd_tensor *t = buf[0];
            buf[0] = buf[1];
            buf[1] = buf[2];
            buf[2] = t;
            smp_copy(c, smp_f(buf[2]), dv);
        } else {
            smp_copy(c, smp_f(buf[nbuf]), dv);
            nbuf++;
        }
    }
    return SD_OK;
}

sd_status smp_ipndm(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return ipndm_like(c, x, s, n, 0, err);
}

sd_status smp_ipndm_v(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return ipndm_like(c, x, s, n, 1, err);
}

/* ---- DEIS (tab mode) ------------------------------------------------------------ */

/* comfy.k_diffusion.deis.edm2t with its EDM defaults (sigma_min 0.002,
 * sigma_max 80, epsilon_s 1e-3), in float32 as torch computes it. */
static void deis_edm2t(const float *sigmas, int n, float *t, float *beta_0, float *beta_1)
{
    const double eps_s = 1e-3;
    float smin = 0.002f, smax = 80.0f;
    float lmin = sd_torch_logf(smin * smin + 1.0f), lmax = sd_torch_logf(smax * smax + 1.0f);
    float a = lmin / (float)eps_s; /* float32 tensor / python float */
    a = a - lmax;
    float beta_d = 2.0f * a;
    beta_d = beta_d / (float)(eps_s - 1.0);
    float beta_min = lmax - 0.5f * beta_d;
    for (int i = 0; i < n; i++) {
        float s = sigmas[i];
        float l = sd_torch_logf(s * s + 1.0f);
        float v = beta_min * beta_min + 2.0f * beta_d * l;
        t[i] = (sqrtf(v) - beta_min) / beta_d;
    }
    *beta_0 = beta_min;
    *beta_1 = beta_d + beta_min;
}

/* get_deis_coeff_list(tab): Riemann sums over N=10000 float32 linspace
 * points (both ends included, times dtau = (t_next - t_cur) / N), as ComfyUI
 * does -- not the exact integral. */
static void deis_coeffs(const float *ts, int i, int order, float beta_0, float beta_1,
                        float *cf)
{
    const int N = 10000;
    float t_cur = ts[i], t_next = ts[i + 1];
    float step = (t_next - t_cur) / (float)(N - 1);
    float dtau = (t_next - t_cur) / (float)N;
    double acc[4] = {0};
    double db = (double)beta_1 - (double)beta_0;
    for (int q = 0; q < N; q++) {
        float tau = q < N / 2 ? t_cur + step * (float)q : t_next - step * (float)(N - 1 - q);
        double tt = tau;
        double alpha = exp(-0.5 * tt * tt * db - tt * beta_0);
        double dlog = -(tt * db) - beta_0;
        double integrand = -0.5 * dlog / sqrt(alpha * (1.0 - alpha));
        for (int j = 0; j < order; j++) {
            double poly = 1.0;
            for (int kk = 0; kk < order; kk++) {
                if (kk == j)
                    continue;
                poly *= (tt - ts[i - kk]) / ((double)ts[i - j] - ts[i - kk]);
            }
            acc[j] += integrand * poly;
        }
    }
    for (int j = 0; j < order; j++)
        cf[j] = (float)(acc[j] * dtau);
}

sd_status smp_deis(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, sd_error *err)
{
    const int max_order = 3;
    float *ts = malloc((size_t)n_sigmas * sizeof(float));
    if (!ts)
        return sd_error_set(err, SD_ERR_NOMEM, "sampler deis: out of memory");
    float beta_0, beta_1;
    deis_edm2t(sigmas, n_sigmas, ts, &beta_0, &beta_1);
    sd_status st = SD_OK;
    sd_tensor *den = smp_tmp(c, err), *buf[2], *dcur = smp_tmp(c, err);
    buf[0] = smp_tmp(c, err);
    buf[1] = smp_tmp(c, err);
    if (!den || !dcur || !buf[0] || !buf[1]) {
        free(ts);
        return SD_ERR_NOMEM;
    }
    /* ComfyUI's callback gets the x the sampler was called with, every step */
    sd_tensor *x_start = c->p->progress ? smp_tmp(c, err) : NULL;
    if (c->p->progress && !x_start) {
        free(ts);
        return SD_ERR_NOMEM;
    }
    if (x_start)
        smp_copy(c, smp_f(x_start), smp_f(x));
    float *xv = smp_f(x), *denv = smp_f(den), *dv = smp_f(dcur);
    int nbuf = 0;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float t_cur = sigmas[i], t_next = sigmas[i + 1];
        if ((st = smp_denoise(c, x, t_cur, den, err)) != SD_OK)
            break;
        smp_progress(c, i, x_start, den);
        FOR_N dv[k] = (xv[k] - denv[k]) / t_cur;
        int order = i + 1 < max_order ? i + 1 : max_order;
        if (t_next <= 0.0f)
            order = 1;
        if (order == 1) {
            float dt = t_next - t_cur;
            FOR_N {
                float t = dt * dv[k];
                xv[k] = xv[k] + t;
            }
        } else {
            float cf[4];
            int co = i + 1 < max_order ? i + 1 : max_order; /* the list's own order */
            deis_coeffs(ts, i, co, beta_0, beta_1, cf);
            const float *b1 = smp_f(buf[nbuf - 1]);
            const float *b2 = nbuf >= 2 ? smp_f(buf[nbuf - 2]) : NULL;
            FOR_N {
                float v = cf[0] * dv[k];
                v = xv[k] + v;
                float w = cf[1] * b1[k];
                v = v + w;
                if (order == 3) {
                    w = cf[2] * b2[k];
                    v = v + w;
                }
                xv[k] = v;
            }
        }
        if (nbuf == max_order - 1) {
            sd_tensor *t = buf[0];
            buf[0] = buf[1];
            buf[1] = t;
            smp_copy(c, smp_f(buf[1]), dv);
        } else {
            smp_copy(c, smp_f(buf[nbuf]), dv);
            nbuf++;
        }
    }
    free(ts);
    return st;
}

/* ---- res_multistep ------------------------------------------------------------- */

static inline float t_fn(float sigma) { return -sd_torch_logf(sigma); }

static sd_status res_multistep(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                               double eta, int cfg_pp, sd_error *err)
{
    float s_noise = (float)smp_opt(c->p->s_noise, 1.0);
    sd_tensor *den = smp_tmp(c, err), *old = smp_tmp(c, err), *nz = smp_tmp(c, err);
    if (!den || !old || !nz)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den), *oldv = smp_f(old), *nv = smp_f(nz);
    int have_old = 0;
    float old_sigma_down = 0.0f;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        const float *uv = cfg_pp ? smp_f(c->uncond) : NULL;
        float sd, su;
        smp_ancestral_step(s, sn, eta, &sd, &su);
        smp_progress(c, i, x, den);
        if (sd == 0.0f || !have_old) {
            if (cfg_pp) {
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
            float t = t_fn(s), t_old = t_fn(old_sigma_down), t_next = t_fn(sd);
            float t_prev = t_fn(sigmas[i - 1]);
            float h = t_next - t;
            float c2 = (t_prev - t_old) / h;
            float mh = -h;
            float phi1 = smp_expm1f(mh) / mh;
            float phi2 = (phi1 - 1.0f) / mh;
            float b1 = phi1 - phi2 / c2;
            float b2 = phi2 / c2;
            if (isnan(b1))
                b1 = 0.0f;
            if (isnan(b2))
                b2 = 0.0f;
            float eh = sd_torch_expf(-h); /* sigma_fn(h) */
            const float *cur = cfg_pp ? uv : denv;
            FOR_N {
                float xx = xv[k];
                if (cfg_pp) {
                    float dd = denv[k] - uv[k];
                    xx = xx + dd;
                }
                float a = eh * xx;
                float p = b1 * cur[k];
                float q = b2 * oldv[k];
                p = p + q;
                p = h * p;
                xv[k] = a + p;
            }
        }
        if (sn > 0.0f && su != 0.0f) { /* su == 0 adds exactly 0 */
            if ((st = smp_noise(c, s, sn, nv, err)) != SD_OK)
                return st;
            FOR_N {
                float e = nv[k] * s_noise;
                e = e * su;
                xv[k] = xv[k] + e;
            }
        }
        smp_copy(c, oldv, cfg_pp ? uv : denv);
        have_old = 1;
        old_sigma_down = sd;
    }
    return SD_OK;
}

sd_status smp_res_multistep(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return res_multistep(c, x, s, n, 0.0, 0, err);
}

sd_status smp_res_multistep_cfg_pp(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return res_multistep(c, x, s, n, 0.0, 1, err);
}

sd_status smp_res_multistep_ancestral(smp_ctx *c, sd_tensor *x, const float *s, int n,
                                      sd_error *err)
{
    return res_multistep(c, x, s, n, smp_opt(c->p->eta, 1.0), 0, err);
}

sd_status smp_res_multistep_ancestral_cfg_pp(smp_ctx *c, sd_tensor *x, const float *s, int n,
                                             sd_error *err)
{
    return res_multistep(c, x, s, n, smp_opt(c->p->eta, 1.0), 1, err);
}

/* ---- gradient estimation ----------------------------------------------------------- */

static sd_status gradient_estimation(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                                     int cfg_pp, sd_error *err)
{
    float gm1 = (float)(smp_opt(c->p->ge_gamma, 2.0) - 1.0);
    sd_tensor *den = smp_tmp(c, err), *d = smp_tmp(c, err), *old_d = smp_tmp(c, err);
    if (!den || !d || !old_d)
        return SD_ERR_NOMEM;
    float *xv = smp_f(x), *denv = smp_f(den);
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        if ((st = smp_denoise(c, x, s, den, err)) != SD_OK)
            return st;
        const float *ref = cfg_pp ? smp_f(c->uncond) : denv;
        float *dv = smp_f(d), *odv = smp_f(old_d);
        FOR_N dv[k] = (xv[k] - ref[k]) / s;
        smp_progress(c, i, x, den);
        float dt = sn - s;
        if (sn == 0.0f) {
            smp_copy(c, xv, denv);
        } else {
            FOR_N {
                float v;
                if (cfg_pp) {
                    float t = dv[k] * sn;
                    v = denv[k] + t;
                } else {
                    float t = dv[k] * dt;
                    v = xv[k] + t;
                }
                if (i >= 1) {
                    float db = dv[k] - odv[k];
                    db = gm1 * db;
                    db = db * dt;
                    v = v + db;
                }
                xv[k] = v;
            }
        }
        sd_tensor *t = old_d; /* old_d = d */
        old_d = d;
        d = t;
    }
    return SD_OK;
}

sd_status smp_gradient_estimation(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return gradient_estimation(c, x, s, n, 0, err);
}

sd_status smp_gradient_estimation_cfg_pp(smp_ctx *c, sd_tensor *x, const float *s, int n,
                                         sd_error *err)
{
    return gradient_estimation(c, x, s, n, 1, err);
}
