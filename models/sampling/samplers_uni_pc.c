/* samplers_uni_pc.c - UniPC multistep predictor-corrector
 * (comfy.extra_samplers.uni_pc.sample_unipc): uni_pc (B(h) = h, "bh1") and
 * uni_pc_bh2 (B(h) = expm1(h)), data prediction, order min(3, steps - 1),
 * lower order at the end, no corrector on the final step. ComfyUI runs it in
 * the VP variable x / sqrt(1 + sigma^2) with SigmaConvert's float32
 * marginals, and the last sigma 0 replaced by 0.001; reproduced here op by
 * op (the b vector of the B(h) recurrence in float64, as ComfyUI does). */
#include <string.h>
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)
#define UPC_MAX_ORDER 3

/* SigmaConvert, float32 */
static float upc_lmc(float s) { return 0.5f * sd_torch_logf(1.0f / ((s * s) + 1.0f)); }
static float upc_alpha(float s) { return sd_torch_expf(upc_lmc(s)); }
static float upc_std(float s) { return sqrtf(1.0f - sd_torch_expf(2.0f * upc_lmc(s))); }
static float upc_lambda(float s)
{
    float l = upc_lmc(s);
    float ls = 0.5f * sd_torch_logf(1.0f - sd_torch_expf(2.0f * l));
    return l - ls;
}

typedef struct upc {
    smp_ctx *c;
    int bh2;
    sd_tensor *xin, *den; /* scratch for the model call */
} upc;

/* data_prediction_fn(x, t): x0 from the eps the k-diffusion model implies */
static sd_status upc_model(upc *u, const sd_tensor *x, float t, sd_tensor *out, sd_error *err)
{
    smp_ctx *c = u->c;
    float scale = sqrtf(t * t + 1.0f);
    const float *xv = smp_f(x);
    float *iv = smp_f(u->xin);
    FOR_N iv[k] = xv[k] * scale;
    sd_status st = smp_denoise(c, u->xin, t, u->den, err);
    if (st != SD_OK)
        return st;
    const float *dv = smp_f(u->den);
    float sigma_t = upc_std(t), alpha_t = upc_alpha(t);
    float *ov = smp_f(out);
    FOR_N {
        float eps = (iv[k] - dv[k]) / t;
        float q = sigma_t * eps;
        ov[k] = (xv[k] - q) / alpha_t;
    }
    return SD_OK;
}

/* Solve n x n (n <= 3) in double; returns coefficients as float32. */
static void upc_solve(int n, double A[UPC_MAX_ORDER][UPC_MAX_ORDER], const double *b, float *z)
{
    double M[UPC_MAX_ORDER][UPC_MAX_ORDER + 1], r[UPC_MAX_ORDER];
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            M[i][j] = A[i][j];
        M[i][n] = b[i];
    }
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int q = col + 1; q < n; q++)
            if (fabs(M[q][col]) > fabs(M[piv][col]))
                piv = q;
        for (int j = 0; j <= n; j++) {
            double t = M[col][j];
            M[col][j] = M[piv][j];
            M[piv][j] = t;
        }
        for (int q = col + 1; q < n; q++) {
            double f = M[q][col] / M[col][col];
            for (int j = col; j <= n; j++)
                M[q][j] -= f * M[col][j];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double v = M[i][n];
        for (int j = i + 1; j < n; j++)
            v -= M[i][j] * r[j];
        r[i] = v / M[i][i];
    }
    for (int i = 0; i < n; i++)
        z[i] = (float)r[i];
}

/* multistep_uni_pc_bh_update: x <- x_t; *model_t filled when corrected. */
static sd_status upc_update(upc *u, sd_tensor *x, sd_tensor **mprev, const float *tprev, int nprev,
                            float t, int order, int use_corrector, sd_tensor *model_t,
                            sd_tensor *d1s[UPC_MAX_ORDER], sd_error *err)
{
    smp_ctx *c = u->c;
    float tp0 = tprev[nprev - 1];
    float lp0 = upc_lambda(tp0), lt = upc_lambda(t);
    const float *m0 = smp_f(mprev[nprev - 1]);
    float sigma_p0 = upc_std(tp0), sigma_t = upc_std(t);
    float alpha_t = sd_torch_expf(upc_lmc(t));
    float h = lt - lp0;
    float rks[UPC_MAX_ORDER];
    for (int i = 1; i < order; i++) {
        float lpi = upc_lambda(tprev[nprev - 1 - i]);
        float rk = (lpi - lp0) / h;
        rks[i - 1] = rk;
        const float *mi = smp_f(mprev[nprev - 1 - i]);
        float *dv = smp_f(d1s[i - 1]);
        FOR_N dv[k] = (mi[k] - m0[k]) / rk;
    }
    rks[order - 1] = 1.0f;
    float hh = -h;
    float h_phi_1 = smp_expm1f(hh);
    float B_h = u->bh2 ? smp_expm1f(hh) : hh;
    double hh64 = hh;
    double hpk = expm1(hh64) / hh64 - 1.0;
    double B64 = u->bh2 ? expm1(hh64) : hh64;
    double R[UPC_MAX_ORDER][UPC_MAX_ORDER], bvec[UPC_MAX_ORDER];
    double fact = 1.0;
    for (int i = 1; i <= order; i++) {
        for (int j = 0; j < order; j++)
            R[i - 1][j] = (double)powf(rks[j], (float)(i - 1));
        bvec[i - 1] = (double)(float)(hpk * fact / B64);
        fact *= (i + 1);
        hpk = hpk / hh64 - 1.0 / fact;
    }
    int nd = order - 1;
    float rhos_p[UPC_MAX_ORDER] = {0}, rhos_c[UPC_MAX_ORDER] = {0};
    if (nd > 0) {
        if (order == 2)
            rhos_p[0] = 0.5f;
        else
            upc_solve(order - 1, R, bvec, rhos_p);
    }
    if (use_corrector) {
        if (order == 1)
            rhos_c[0] = 0.5f;
        else
            upc_solve(order, R, bvec, rhos_c);
    }
    float ra = sigma_t / sigma_p0;
    float rb = alpha_t * h_phi_1;
    float ab = alpha_t * B_h;
    float *xv = smp_f(x);
    /* x_t_ kept in d1s[UPC_MAX_ORDER - 1] (free: nd <= 2) */
    float *x_ = smp_f(d1s[UPC_MAX_ORDER - 1]);
    FOR_N {
        float p = ra * xv[k];
        float q = rb * m0[k];
        x_[k] = p - q;
    }
    FOR_N {
        float pr = 0.0f;
        for (int j = 0; j < nd; j++) {
            float t2 = smp_f(d1s[j])[k] * rhos_p[j];
            pr = j == 0 ? t2 : pr + t2;
        }
        float q = ab * pr;
        xv[k] = x_[k] - q;
    }
    if (!use_corrector)
        return SD_OK;
    sd_status st = upc_model(u, x, t, model_t, err);
    if (st != SD_OK)
        return st;
    const float *mt = smp_f(model_t);
    FOR_N {
        float cr = 0.0f;
        for (int j = 0; j < nd; j++) {
            float t2 = smp_f(d1s[j])[k] * rhos_c[j];
            cr = j == 0 ? t2 : cr + t2;
        }
        float d1t = mt[k] - m0[k];
        float v = rhos_c[order - 1] * d1t;
        v = cr + v;
        v = ab * v;
        xv[k] = x_[k] - v;
    }
    return SD_OK;
}

static sd_status uni_pc(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, int bh2,
                        sd_error *err)
{
    float *ts = smp_alloc(c, (size_t)n_sigmas * sizeof(float), err);
    if (!ts)
        return SD_ERR_NOMEM;
    memcpy(ts, sigmas, (size_t)n_sigmas * sizeof(float));
    if (ts[n_sigmas - 1] == 0.0f)
        ts[n_sigmas - 1] = 0.001f;
    int steps = n_sigmas - 1;
    int order = n_sigmas - 2 < 3 ? n_sigmas - 2 : 3;
    upc u = {c, bh2, smp_tmp(c, err), smp_tmp(c, err)};
    sd_tensor *mprev[UPC_MAX_ORDER + 1], *d1s[UPC_MAX_ORDER], *mt = smp_tmp(c, err);
    for (int i = 0; i <= UPC_MAX_ORDER; i++)
        mprev[i] = smp_tmp(c, err);
    for (int i = 0; i < UPC_MAX_ORDER; i++)
        d1s[i] = smp_tmp(c, err);
    if (!u.xin || !u.den || !mt || !mprev[UPC_MAX_ORDER] || !d1s[UPC_MAX_ORDER - 1] ||
        !mprev[0] || !mprev[1] || !mprev[2] || !d1s[0] || !d1s[1])
        return SD_ERR_NOMEM;
    float *xv = smp_f(x);
    float s0 = sqrtf(1.0f + ts[0] * ts[0]);
    FOR_N xv[k] = xv[k] / s0;
    float tprev[UPC_MAX_ORDER + 1];
    int nprev = 0;
    sd_status st;
    for (int si = 0; si < steps; si++) {
        if (si == 0) {
            if ((st = upc_model(&u, x, ts[0], mprev[0], err)) != SD_OK)
                return st;
            tprev[0] = ts[0];
            nprev = 1;
            smp_progress(c, si, x, mprev[0]);
            continue;
        }
        if (si < order) {
            sd_tensor *slot = mprev[nprev];
            if ((st = upc_update(&u, x, mprev, tprev, nprev, ts[si], si, 1, slot, d1s, err)) != SD_OK)
                return st;
            tprev[nprev++] = ts[si];
            smp_progress(c, si, x, slot);
            continue;
        }
        int last = si == steps - 1 ? si + 1 : si;
        for (int step = si; step <= last; step++) {
            int step_order = order < steps + 1 - step ? order : steps + 1 - step;
            int corr = step != steps;
            if ((st = upc_update(&u, x, mprev, tprev, nprev, ts[step], step_order, corr, mt, d1s,
                                 err)) != SD_OK)
                return st;
            /* shift the history left by one; the newest slot gets model_t */
            sd_tensor *first = mprev[0];
            for (int i = 0; i < order - 1; i++) {
                tprev[i] = tprev[i + 1];
                mprev[i] = mprev[i + 1];
            }
            tprev[order - 1] = ts[step];
            if (step < steps) {
                /* model_prev_list[-1] = model_x: the dropped oldest buffer
                 * becomes the next model_t scratch (no copies) */
                sd_tensor *tmp = mt;
                mt = first;
                mprev[order - 1] = tmp;
            } /* else ComfyUI keeps the stale [-1]; it is never read again */
        }
        smp_progress(c, si, x, mprev[order - 1]);
    }
    float a = upc_alpha(ts[n_sigmas - 1]);
    FOR_N xv[k] = xv[k] / a;
    return SD_OK;
}

sd_status smp_uni_pc(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return uni_pc(c, x, s, n, 0, err);
}

sd_status smp_uni_pc_bh2(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return uni_pc(c, x, s, n, 1, err);
}
