/* guider.c - CFG combination (comfy.samplers.sampling_function / cfg_function). */
#include <math.h>
#include <string.h>
#include "models/guider.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void sd_guider_init(sd_guider *g, sd_guider_model_fn model, void *model_ud, double cfg)
{
    memset(g, 0, sizeof *g);
    g->model = model;
    g->model_ud = model_ud;
    g->cfg = cfg;
}

void sd_guider_release(sd_guider *g)
{
    if (!g)
        return;
    sd_tensor_unref(g->cond_buf);
    sd_tensor_unref(g->uncond_buf);
    g->cond_buf = g->uncond_buf = NULL;
}

int sd_cfg_is_one(double cfg)
{
    /* math.isclose(a, b) with rel_tol=1e-9, abs_tol=0 */
    double diff = fabs(cfg - 1.0);
    double tol = 1e-9 * fmax(fabs(cfg), 1.0);
    return diff <= tol;
}

void sd_cfg_combine(const float *cond, const float *uncond, double scale, float *out, int64_t n)
{
    float s = (float)scale; /* torch casts the Python float to the tensor dtype */
    for (int64_t i = 0; i < n; i++) {
        float t = cond[i] - uncond[i];
        float u = t * s;
        out[i] = uncond[i] + u;
    }
}

/* scratch tensor of x's shape, reallocated when the shape changes */
static sd_tensor *scratch(sd_tensor **slot, const sd_tensor *x)
{
    if (*slot && sd_tensor_same_shape(*slot, x))
        return *slot;
    sd_tensor_unref(*slot);
    *slot = sd_tensor_new(SD_F32, x->ndim, x->shape);
    return *slot;
}

static sd_status guider_eval(void *ud, const sd_tensor *x, float sigma, sd_tensor *denoised,
                             sd_tensor *uncond_denoised, sd_error *err)
{
    sd_guider *g = ud;
    if (!g->model)
        return sd_error_set(err, SD_ERR_INVALID, "guider: no model");
    g->guider_calls++;
    int64_t n = sd_tensor_numel(x);
    if (sd_cfg_is_one(g->cfg) && !uncond_denoised) {
        /* cfg1 optimisation: uncond treated as zeros, 0 + (cond - 0) * 1 == cond */
        int conds[1] = {SD_COND_POSITIVE};
        sd_tensor *outs[1] = {denoised};
        g->model_calls++;
        return g->model(g->model_ud, x, sigma, conds, 1, outs, err);
    }
    sd_tensor *cb = denoised;
    sd_tensor *ub = uncond_denoised ? uncond_denoised : scratch(&g->uncond_buf, x);
    if (!ub)
        return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    int conds[2] = {SD_COND_POSITIVE, SD_COND_NEGATIVE};
    sd_tensor *outs[2] = {cb, ub};
    g->model_calls += 2;
    sd_status st = g->model(g->model_ud, x, sigma, conds, 2, outs, err);
    if (st != SD_OK)
        return st;
    float *dv = (float *)denoised->data;
    sd_cfg_combine(dv, (const float *)ub->data, g->cfg, dv, n);
    return SD_OK;
}

sd_denoiser sd_guider_denoiser(sd_guider *g)
{
    sd_denoiser d = {guider_eval, g};
    return d;
}

/* ---- KSamplerX0Inpaint ------------------------------------------------------ */

void sd_inpaint_init(sd_inpaint *ip, sd_denoiser inner, const float *latent, const float *noise,
                     const float *mask, int64_t n)
{
    memset(ip, 0, sizeof *ip);
    ip->inner = inner;
    ip->latent = latent;
    ip->noise = noise;
    ip->mask = mask;
    ip->n = n;
}

void sd_inpaint_release(sd_inpaint *ip)
{
    if (!ip)
        return;
    sd_tensor_unref(ip->xbuf);
    ip->xbuf = NULL;
}

static sd_status inpaint_eval(void *ud, const sd_tensor *x, float sigma, sd_tensor *denoised,
                              sd_tensor *uncond_denoised, sd_error *err)
{
    sd_inpaint *ip = ud;
    int64_t n = sd_tensor_numel(x);
    if (n != ip->n)
        return sd_error_set(err, SD_ERR_INVALID, "inpaint: latent has %lld values, mask/latent %lld",
                            (long long)n, (long long)ip->n);
    sd_tensor *xb = scratch(&ip->xbuf, x);
    if (!xb)
        return sd_error_set(err, SD_ERR_NOMEM, "inpaint: out of memory");
    const float *xv = x->data;
    float *bv = xb->data;
    for (int64_t i = 0; i < n; i++) {
        float m = ip->mask[i];
        float lm = 1.0f - m;
        float sc = ip->noise[i] * sigma; /* noise_scaling(sigma, noise, latent) */
        sc = sc + ip->latent[i];
        float a = xv[i] * m;
        float b = sc * lm;
        bv[i] = a + b;
    }
    sd_status st = ip->inner.eval(ip->inner.ud, xb, sigma, denoised, uncond_denoised, err);
    if (st != SD_OK)
        return st;
    float *dv = denoised->data;
    for (int64_t i = 0; i < n; i++) {
        float m = ip->mask[i];
        float lm = 1.0f - m;
        float a = dv[i] * m;
        float b = ip->latent[i] * lm;
        dv[i] = a + b;
    }
    return SD_OK;
}

sd_denoiser sd_inpaint_denoiser(sd_inpaint *ip)
{
    sd_denoiser d = {inpaint_eval, ip};
    return d;
}
