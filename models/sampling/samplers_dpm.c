/* samplers_dpm.c - DPM-Solver (k_diffusion.sampling.DPMSolver) as ComfyUI's
 * ksampler() wraps it: dpm_fast (fixed orders 3/2/1 over
 * len(sigmas)-1 evaluations) and dpm_adaptive (DPM-Solver-12 or -23 with
 * PID step control; SamplerDPMAdaptative sets its order, tolerances and
 * controller, and eta > 0 makes its steps ancestral). Both only use the
 * first and last non-zero sigma. dpm_fast runs at eta 0, as KSampler does. */
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)

static inline float t_of(float sigma) { return -sd_torch_logf(sigma); }
static inline float sigma_of(float t) { return sd_torch_expf(-t); }

typedef struct dpm_bufs {
    sd_tensor *eps, *eps_r1, *eps_r2, *u, *den, *out, *out2;
} dpm_bufs;

/* eps = (x - model(x, sigma(t))) / sigma(t); den receives the model output */
static sd_status dpm_eps(smp_ctx *c, dpm_bufs *b, const sd_tensor *x, float t, sd_tensor *eps,
                         sd_error *err)
{
    float s = sigma_of(t);
    sd_status st = smp_denoise(c, x, s, b->den, err);
    if (st != SD_OK)
        return st;
    const float *xv = smp_f(x), *dv = smp_f(b->den);
    float *ev = smp_f(eps);
    FOR_N ev[k] = (xv[k] - dv[k]) / s;
    return SD_OK;
}

/* u = x - sigma(s1) * expm1(r1 h) * eps, then eps_r1 at s1 */
static sd_status dpm_stage_r1(smp_ctx *c, dpm_bufs *b, const sd_tensor *x, float t, float h,
                              double r1, sd_error *err)
{
    float r1h = (float)r1 * h;
    float s1 = t + r1h;
    float a = sigma_of(s1) * smp_expm1f(r1h);
    const float *xv = smp_f(x), *ev = smp_f(b->eps);
    float *uv = smp_f(b->u);
    FOR_N {
        float q = a * ev[k];
        uv[k] = xv[k] - q;
    }
    return dpm_eps(c, b, b->u, s1, b->eps_r1, err);
}

/* x_1 into out */
static void dpm_1_step(smp_ctx *c, dpm_bufs *b, const sd_tensor *x, float t, float t_next,
                       sd_tensor *out)
{
    float h = t_next - t;
    float a = sigma_of(t_next) * smp_expm1f(h);
    const float *xv = smp_f(x), *ev = smp_f(b->eps);
    float *ov = smp_f(out);
    FOR_N {
        float q = a * ev[k];
        ov[k] = xv[k] - q;
    }
}

/* x_2 into out (eps_r1 must hold eps at t + r1 h) */
static void dpm_2_finish(smp_ctx *c, dpm_bufs *b, const sd_tensor *x, float t, float t_next,
                         double r1, sd_tensor *out)
{
    float h = t_next - t;
    float em = smp_expm1f(h);
    float stn = sigma_of(t_next);
    float a = stn * em;
    float bb = stn / (float)(2.0 * r1);
    bb = bb * em;
    const float *xv = smp_f(x), *ev = smp_f(b->eps), *e1 = smp_f(b->eps_r1);
    float *ov = smp_f(out);
    FOR_N {
        float p = a * ev[k];
        float v = xv[k] - p;
        float d = e1[k] - ev[k];
        d = bb * d;
        ov[k] = v - d;
    }
}

/* x_3 into out (eps_r1 at t + h/3 must be present); evaluates eps_r2 */
static sd_status dpm_3_finish(smp_ctx *c, dpm_bufs *b, const sd_tensor *x, float t, float t_next,
                              sd_tensor *out, sd_error *err)
{
    const double r1 = 1.0 / 3.0, r2 = 2.0 / 3.0;
    float h = t_next - t;
    float r2h = (float)r2 * h;
    float s2 = t + r2h;
    float ss2 = sigma_of(s2);
    float em2 = smp_expm1f(r2h);
    float a = ss2 * em2;
    float bb = ss2 * (float)(r2 / r1);
    bb = bb * (em2 / r2h - 1.0f);
    const float *xv = smp_f(x), *ev = smp_f(b->eps), *e1 = smp_f(b->eps_r1);
    float *uv = smp_f(b->u);
    FOR_N {
        float p = a * ev[k];
        float v = xv[k] - p;
        float d = e1[k] - ev[k];
        d = bb * d;
        uv[k] = v - d;
    }
    sd_status st = dpm_eps(c, b, b->u, s2, b->eps_r2, err);
    if (st != SD_OK)
        return st;
    float em = smp_expm1f(h);
    float stn = sigma_of(t_next);
    float a3 = stn * em;
    float b3 = stn / (float)r2;
    b3 = b3 * (em / h - 1.0f);
    const float *e2 = smp_f(b->eps_r2);
    float *ov = smp_f(out);
    FOR_N {
        float p = a3 * ev[k];
        float v = xv[k] - p;
        float d = e2[k] - ev[k];
        d = b3 * d;
        ov[k] = v - d;
    }
    return SD_OK;
}

static int dpm_bufs_init(smp_ctx *c, dpm_bufs *b, sd_error *err)
{
    b->eps = smp_tmp(c, err);
    b->eps_r1 = smp_tmp(c, err);
    b->eps_r2 = smp_tmp(c, err);
    b->u = smp_tmp(c, err);
    b->den = smp_tmp(c, err);
    b->out = smp_tmp(c, err);
    b->out2 = smp_tmp(c, err);
    return b->eps && b->eps_r1 && b->eps_r2 && b->u && b->den && b->out && b->out2;
}

/* ComfyUI's ksampler() wrapper: sigma_min = last sigma, or the one before it
 * when the last is 0. */
static float dpm_sigma_min(const float *sigmas, int n)
{
    float m = sigmas[n - 1];
    return m == 0.0f ? sigmas[n - 2] : m;
}

sd_status smp_dpm_fast(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                       sd_error *err)
{
    float sigma_min = dpm_sigma_min(sigmas, n_sigmas), sigma_max = sigmas[0];
    if (!(sigma_min > 0.0f) || !(sigma_max > 0.0f))
        return sd_error_set(err, SD_ERR_INVALID, "sampler dpm_fast: sigma_min and sigma_max must "
                            "not be 0");
    int nfe = n_sigmas - 1;
    dpm_bufs b;
    if (!dpm_bufs_init(c, &b, err))
        return SD_ERR_NOMEM;
    float t_start = t_of(sigma_max), t_end = t_of(sigma_min);
    int m = nfe / 3 + 1;
    int npts = m + 1;
    int *orders = smp_alloc(c, (size_t)(m + 2) * sizeof(int), err), n_orders = 0;
    float *ts = smp_alloc(c, (size_t)(npts + 1) * sizeof(float), err);
    if (!orders || !ts)
        return SD_ERR_NOMEM;
    if (nfe % 3 == 0) {
        for (int i = 0; i < m - 2; i++)
            orders[n_orders++] = 3;
        orders[n_orders++] = 2;
        orders[n_orders++] = 1;
    } else {
        for (int i = 0; i < m - 1; i++)
            orders[n_orders++] = 3;
        orders[n_orders++] = nfe % 3;
    }
    /* torch.linspace(t_start, t_end, m + 1) in float32 (both-ends form) */
    float step = (t_end - t_start) / (float)(npts - 1);
    for (int i = 0; i < npts; i++)
        ts[i] = i < npts / 2 ? t_start + step * (float)i : t_end - step * (float)(npts - 1 - i);
    float *xv = smp_f(x);
    sd_status st;
    for (int i = 0; i < n_orders; i++) {
        float t = ts[i], t_next = ts[i + 1];
        if ((st = dpm_eps(c, &b, x, t, b.eps, err)) != SD_OK)
            return st;
        /* info callback: denoised = x - sigma(t) * eps */
        if (c->p->progress) {
            float s = sigma_of(t);
            const float *ev = smp_f(b.eps);
            float *dv = smp_f(b.out2);
            FOR_N {
                float q = s * ev[k];
                dv[k] = xv[k] - q;
            }
            smp_progress(c, i, x, b.out2);
        }
        if (orders[i] == 1) {
            dpm_1_step(c, &b, x, t, t_next, b.out);
        } else if (orders[i] == 2) {
            float h = t_next - t;
            if ((st = dpm_stage_r1(c, &b, x, t, h, 0.5, err)) != SD_OK)
                return st;
            dpm_2_finish(c, &b, x, t, t_next, 0.5, b.out);
        } else {
            float h = t_next - t;
            if ((st = dpm_stage_r1(c, &b, x, t, h, 1.0 / 3.0, err)) != SD_OK)
                return st;
            if ((st = dpm_3_finish(c, &b, x, t, t_next, b.out, err)) != SD_OK)
                return st;
        }
        smp_copy(c, xv, smp_f(b.out));
    }
    return SD_OK;
}

sd_status smp_dpm_adaptive(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas,
                           sd_error *err)
{
    /* sample_dpm_adaptive's defaults unless SamplerDPMAdaptative set them */
    const sd_sampler_params *P = c->p;
    const int set = P->dpm_set;
    const double rtol = set ? P->dpm_rtol : 0.05, atol = set ? P->dpm_atol : 0.0078;
    const double h_init = set ? fabs(P->dpm_h_init) : 0.05;
    const double pcoeff = set ? P->dpm_pcoeff : 0.0, icoeff = set ? P->dpm_icoeff : 1.0;
    const double dcoeff = set ? P->dpm_dcoeff : 0.0, accept_safety = set ? P->dpm_accept_safety : 0.81;
    const int order = set ? P->dpm_order : 3;
    const double eta = smp_opt(P->eta, 0.0), s_noise_d = smp_opt(P->s_noise, 1.0);
    if (order != 2 && order != 3)
        return sd_error_set(err, SD_ERR_INVALID, "sampler dpm_adaptive: order must be 2 or 3");
    float sigma_min = dpm_sigma_min(sigmas, n_sigmas), sigma_max = sigmas[0];
    if (!(sigma_min > 0.0f) || !(sigma_max > 0.0f))
        return sd_error_set(err, SD_ERR_INVALID, "sampler dpm_adaptive: sigma_min and sigma_max "
                            "must not be 0");
    dpm_bufs b;
    sd_tensor *x_prev = smp_tmp(c, err), *xh = smp_tmp(c, err);
    if (!dpm_bufs_init(c, &b, err) || !x_prev || !xh)
        return SD_ERR_NOMEM;
    float t_start = t_of(sigma_max), t_end = t_of(sigma_min);
    float *xv = smp_f(x), *xpv = smp_f(x_prev);
    smp_copy(c, xpv, xv);
    /* PIDStepSizeController */
    double ph = h_init;
    /* PIDStepSizeController(h, pcoeff, icoeff, dcoeff, 1.5 if eta else order) */
    double ctl_order = eta != 0.0 ? 1.5 : (double)order;
    double b1 = (pcoeff + icoeff + dcoeff) / ctl_order;
    double b2 = -(pcoeff + 2.0 * dcoeff) / ctl_order;
    double b3 = dcoeff / ctl_order;
    sd_tensor *nz = eta != 0.0 ? smp_tmp(c, err) : NULL;
    if (eta != 0.0 && !nz)
        return SD_ERR_NOMEM;
    double errs[3] = {0};
    int have_errs = 0;
    float f_atol = (float)atol, f_rtol = (float)rtol;
    float s = t_start;
    int steps = 0;
    sd_status st;
    while (s < t_end - 1e-5f) {
        if (steps > 100000)
            return sd_error_set(err, SD_ERR_INTERNAL, "sampler dpm_adaptive: no convergence");
        float t = s + (float)ph;
        if (t_end < t)
            t = t_end;
        /* the ancestral split: step to t_ = t(sigma_down), add su of noise */
        float t_ = t, su = 0.0f;
        if (eta != 0.0) {
            float sdn, sup;
            smp_ancestral_step(sigma_of(s), sigma_of(t), eta, &sdn, &sup);
            t_ = t_of(sdn);
            if (t_end < t_)
                t_ = t_end;
            float a = sigma_of(t), b = sigma_of(t_);
            su = sqrtf(a * a - b * b);
        }
        if ((st = dpm_eps(c, &b, x, s, b.eps, err)) != SD_OK)
            return st;
        float ss = sigma_of(s);
        /* denoised = x - sigma(s) * eps, kept in out2 for the progress callback
         * (den is overwritten by the stage evaluations) */
        {
            const float *ev = smp_f(b.eps);
            float *keep = smp_f(b.out2);
            FOR_N {
                float q = ss * ev[k];
                keep[k] = xv[k] - q;
            }
        }
        float h = t_ - s;
        if (order == 2) {
            dpm_1_step(c, &b, x, s, t_, b.out); /* x_low */
            if ((st = dpm_stage_r1(c, &b, x, s, h, 0.5, err)) != SD_OK)
                return st;
            dpm_2_finish(c, &b, x, s, t_, 0.5, xh); /* x_high */
        } else {
            if ((st = dpm_stage_r1(c, &b, x, s, h, 1.0 / 3.0, err)) != SD_OK)
                return st;
            dpm_2_finish(c, &b, x, s, t_, 1.0 / 3.0, b.out); /* x_low */
            if ((st = dpm_3_finish(c, &b, x, s, t_, xh, err)) != SD_OK) /* x_high */
                return st;
        }
        const float *lo = smp_f(b.out), *hi = smp_f(xh);
        double sum = 0.0;
        FOR_N {
            float al = fabsf(lo[k]), ap = fabsf(xpv[k]);
            float mx = al > ap ? al : ap;
            float dl = f_rtol * mx;
            float delta = f_atol > dl ? f_atol : dl;
            float q = (lo[k] - hi[k]) / delta;
            sum += (double)q * q;
        }
        double error = sqrt(sum) / sqrt((double)c->n);
        /* propose_step */
        double inv = 1.0 / ((double)(float)error + 1e-8);
        if (!have_errs) {
            errs[0] = errs[1] = errs[2] = inv;
            have_errs = 1;
        }
        errs[0] = inv;
        double factor = pow(errs[0], b1) * pow(errs[1], b2) * pow(errs[2], b3);
        factor = 1.0 + atan(factor - 1.0);
        int accept = factor >= accept_safety;
        if (accept) {
            errs[2] = errs[1];
            errs[1] = errs[0];
        }
        ph *= factor;
        if (accept) {
            smp_copy(c, xpv, lo);
            smp_copy(c, xv, hi);
            if (eta != 0.0) { /* x_high + su * s_noise * noise (ComfyUI draws it at eta 0 too, times 0) */
                float *nv = smp_f(nz), amp = su * (float)s_noise_d;
                if ((st = smp_noise(c, sigma_of(s), sigma_of(t), nv, err)) != SD_OK)
                    return st;
                FOR_N xv[k] = xv[k] + amp * nv[k];
            }
            s = t;
        }
        steps++;
        smp_progress(c, steps - 1, x, b.out2);
    }
    return SD_OK;
}
