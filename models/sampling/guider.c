/* guider.c - CFG combination (comfy.samplers.sampling_function / cfg_function). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "models/sampling/guider.h"
#include "models/sampling/fresca.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h"

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
    sd_tensor_unref(g->post_buf);
    sd_tensor_unref(g->empty_buf);
    g->cond_buf = g->uncond_buf = g->post_buf = g->empty_buf = NULL;
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

/* One RescaleCFG element: the v-space cond/uncond at x (args "cond" = x -
 * cond_pred as cfg_function passes them) and their CFG combination. */
typedef struct rescale_k {
    float s, d1, r, scale;
} rescale_k;

static inline void rescale_cu(const rescale_k *k, float x, float cp, float up, float *c, float *xc)
{
    float xs = x / k->d1;
    float ca = x - cp, ua = x - up;
    float cv = xs - (x - ca);
    cv = cv * k->r;
    cv = cv / k->s;
    float uv = xs - (x - ua);
    uv = uv * k->r;
    uv = uv / k->s;
    float d = cv - uv;
    d = d * k->scale;
    *c = cv;
    *xc = uv + d;
}

/* unbiased std of n values given their sum-pass mean, in double */
static double std_of(double m2, int64_t n)
{
    return n > 1 ? sqrt(m2 / (double)(n - 1)) : NAN;
}

void sd_cfg_function(const sd_cfg_hook *hook, const float *cond, const float *uncond, double scale,
                     const float *x, float sigma, int64_t batch, int64_t per, float *out)
{
    if (!hook || !hook->rescale) {
        sd_cfg_combine(cond, uncond, scale, out, batch * per);
        return;
    }
    rescale_k k;
    k.s = sigma;
    float s2 = sigma * sigma;
    k.d1 = s2 + 1.0f;
    k.r = sqrtf(k.d1);
    k.scale = (float)scale;
    const float m = (float)hook->multiplier, m1 = (float)(1.0 - hook->multiplier);
    for (int64_t b = 0; b < batch; b++) {
        const int64_t o = b * per;
        /* two passes for the two standard deviations, a third for the output
         * (the elements are recomputed rather than stored) */
        double sc = 0.0, sx = 0.0;
        for (int64_t i = 0; i < per; i++) {
            float c, xc;
            rescale_cu(&k, x[o + i], cond[o + i], uncond[o + i], &c, &xc);
            sc += c;
            sx += xc;
        }
        double mc = sc / (double)per, mx = sx / (double)per, qc = 0.0, qx = 0.0;
        for (int64_t i = 0; i < per; i++) {
            float c, xc;
            rescale_cu(&k, x[o + i], cond[o + i], uncond[o + i], &c, &xc);
            qc += (c - mc) * (c - mc);
            qx += (xc - mx) * (xc - mx);
        }
        float ro_pos = (float)std_of(qc, per), ro_cfg = (float)std_of(qx, per);
        float ratio = ro_pos / ro_cfg;
        for (int64_t i = 0; i < per; i++) {
            float c, xc, xv = x[o + i];
            rescale_cu(&k, xv, cond[o + i], uncond[o + i], &c, &xc);
            float xr = xc * ratio;
            float a = m * xr;
            float bb = m1 * xc;
            float xf = a + bb;
            float xs = xv / k.d1;
            float t = xf * k.s;
            t = t / k.r;
            float ret = xs - t;
            ret = xv - ret;  /* what rescale_cfg returns */
            out[o + i] = xv - ret; /* cfg_result = x - sampler_cfg_function(args) */
        }
    }
}

void sd_cfg_perp_neg(const float *cond, const float *uncond, const float *empty, double neg_scale, double scale,
                     int64_t n, float *out)
{
    double dot = 0.0, sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float p = cond[i] - empty[i], q = uncond[i] - empty[i];
        float m = q * p;
        dot += (double)m;
        sq += (double)p * (double)p;
    }
    float nrm = (float)sqrt(sq);
    float nrm2 = nrm * nrm;
    const float coef = (float)dot / nrm2, ns = (float)neg_scale, s = (float)scale;
    for (int64_t i = 0; i < n; i++) {
        float p = cond[i] - empty[i], q = uncond[i] - empty[i];
        float t = coef * p;
        float perp = q - t;
        perp = perp * ns;
        float d = p - perp;
        d = s * d;
        out[i] = empty[i] + d;
    }
}

/* RenormCFG's function on [batch, per] (see SD_CFG_FN_RENORM) */
static sd_status cfg_renorm(const double *pm, const float *cond, const float *uncond, double scale, float sigma,
                            int64_t batch, int64_t per, float *out, sd_error *err)
{
    const int64_t n = batch * per;
    if (!(sigma < (float)pm[0])) {
        if (out != cond)
            memcpy(out, cond, (size_t)n * sizeof(float));
        return SD_OK;
    }
    if (pm[1] > 0.0 && batch > 1)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "RenormCFG: ComfyUI's norm test takes a batch of one "
                            "latent (this batch has %lld)", (long long)batch);
    double cn = 0.0;
    for (int64_t i = 0; i < n; i++)
        cn += (double)cond[i] * (double)cond[i];
    const float s = (float)scale;
    double hn = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float t = cond[i] - uncond[i];
        t = s * t;
        out[i] = uncond[i] + t;
        hn += (double)out[i] * (double)out[i];
    }
    if (pm[1] > 0.0) {
        float maxn = (float)sqrt(cn) * (float)pm[1], newn = (float)sqrt(hn);
        if (newn >= maxn) {
            float f = maxn / newn;
            for (int64_t i = 0; i < n; i++)
                out[i] = out[i] * f;
        }
    }
    return SD_OK;
}

sd_status sd_cfg_apply(const sd_cfg_hook *hook, const float *cond, const float *uncond, const float *empty,
                       double scale, const float *x, float sigma, int64_t batch, int64_t per, float *out,
                       sd_error *err)
{
    if (!hook || hook->fn == SD_CFG_FN_NONE) {
        sd_cfg_function(hook, cond, uncond, scale, x, sigma, batch, per, out);
        return SD_OK;
    }
    if (hook->fn == SD_CFG_FN_RENORM) {
        sd_status rc = cfg_renorm(hook->fn_param, cond, uncond, scale, sigma, batch, per, out, err);
        if (rc != SD_OK)
            return rc;
    } else if (hook->fn == SD_CFG_FN_PERP_NEG) {
        if (!empty)
            return sd_error_set(err, SD_ERR_INVALID, "PerpNeg: no prediction of the empty conditioning");
        sd_cfg_perp_neg(cond, uncond, empty, hook->fn_param[0], scale, batch * per, out);
    } else {
        return sd_error_set(err, SD_ERR_INVALID, "unknown cfg function %d", hook->fn);
    }
    for (int64_t i = 0; i < batch * per; i++) {
        float r = x[i] - out[i]; /* what the cfg function returns */
        out[i] = x[i] - r;       /* cfg_result = x - sampler_cfg_function(args) */
    }
    return SD_OK;
}

/* ---- pre-CFG function state ------------------------------------------------------------ */

struct sd_cfg_state {
    int refcount;
    pthread_mutex_t mu; /* held for a whole evaluation's read and update */
    sd_tensor *avg;     /* running_avg; NULL = ComfyUI's 0 (none yet) */
    double prev_sigma;  /* prev_sigma, when has_prev */
    int has_prev;
};

sd_cfg_state *sd_cfg_state_new(void)
{
    sd_cfg_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->refcount = 1;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return NULL;
    }
    return st;
}

sd_cfg_state *sd_cfg_state_ref(sd_cfg_state *st)
{
    if (st)
        __atomic_add_fetch(&st->refcount, 1, __ATOMIC_RELAXED);
    return st;
}

void sd_cfg_state_unref(sd_cfg_state *st)
{
    if (!st || __atomic_sub_fetch(&st->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    sd_tensor_unref(st->avg);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* APG's pre_cfg_function on [B, per] (pm = {eta, norm_threshold, momentum}) */
static sd_status pre_apg_locked(const double *pm, sd_cfg_state *st, float sigma, double cfg, sd_tensor *cond,
                                const sd_tensor *uncond, sd_error *err)
{
    const int64_t n = sd_tensor_numel(cond), B = cond->ndim > 0 && cond->shape[0] > 0 ? cond->shape[0] : 1;
    const int64_t per = n / B;
    float *c = cond->data;
    const float *u = uncond->data;
    const float eta = (float)pm[0], thr = (float)pm[1], mom = (float)pm[2], cs = (float)cfg;
    sd_tensor *gt = sd_tensor_new(SD_F32, cond->ndim, cond->shape);
    if (!gt)
        return sd_error_set(err, SD_ERR_NOMEM, "APG: out of memory");
    float *g = gt->data;
    for (int64_t i = 0; i < n; i++)
        g[i] = c[i] - u[i];
    if (st) {
        if (st->has_prev && (double)sigma > st->prev_sigma) { /* a schedule from the top: running_avg = 0 */
            sd_tensor_unref(st->avg);
            st->avg = NULL;
        }
        st->prev_sigma = sigma;
        st->has_prev = 1;
    }
    if (pm[2] != 0 && st) {
        /* (a running average of another size, left by a run on another
         * latent size, cannot be broadcast: ComfyUI raises there; it is
         * started again from this guidance instead) */
        if (!st->avg || sd_tensor_numel(st->avg) != n) {
            sd_tensor_unref(st->avg);
            st->avg = sd_tensor_clone(gt);
            if (!st->avg) {
                sd_tensor_unref(gt);
                return sd_error_set(err, SD_ERR_NOMEM, "APG: out of memory");
            }
        } else {
            float *a = st->avg->data;
            for (int64_t i = 0; i < n; i++) {
                float t = mom * a[i];
                a[i] = t + g[i];
            }
        }
        memcpy(g, st->avg->data, (size_t)n * sizeof(float));
    }
    for (int64_t b = 0; b < B; b++) {
        float *gb = g + b * per, *cb = c + b * per;
        const float *ub = u + b * per;
        if (pm[1] > 0) {
            double sq = 0.0;
            for (int64_t i = 0; i < per; i++)
                sq += (double)gb[i] * gb[i];
            float gn = (float)sqrt(sq);
            float sc = thr / gn;
            sc = sc < 1.0f ? sc : 1.0f; /* torch.minimum(ones, threshold / norm) */
            for (int64_t i = 0; i < per; i++)
                gb[i] = gb[i] * sc;
        }
        /* v1 = normalize(cond) (eps 1e-12), parallel = (g . v1) v1 */
        double cn = 0.0;
        for (int64_t i = 0; i < per; i++)
            cn += (double)cb[i] * cb[i];
        float cnf = (float)sqrt(cn);
        if (cnf < 1e-12f)
            cnf = 1e-12f;
        double dot = 0.0;
        for (int64_t i = 0; i < per; i++) {
            float v1 = cb[i] / cnf;
            dot += (double)(gb[i] * v1);
        }
        const float d = (float)dot;
        for (int64_t i = 0; i < per; i++) {
            float v1 = cb[i] / cnf;
            float par = d * v1;
            float orth = gb[i] - par;
            float mg = eta * par;
            mg = orth + mg;
            float r = ub[i] + mg;
            float t = cb[i] - ub[i];
            t = t / cs;
            cb[i] = r + t;
        }
    }
    sd_tensor_unref(gt);
    return SD_OK;
}

/* APG on the state st (NULL: none kept, only with momentum 0), one
 * evaluation at a time */
static sd_status pre_apg(const double *pm, sd_cfg_state *st, float sigma, double cfg, sd_tensor *cond,
                         const sd_tensor *uncond, sd_error *err)
{
    if (!st && pm[2] != 0)
        return sd_error_set(err, SD_ERR_INVALID, "APG: momentum %g without a state to keep it in", pm[2]);
    if (st)
        pthread_mutex_lock(&st->mu);
    sd_status rc = pre_apg_locked(pm, st, sigma, cfg, cond, uncond, err);
    if (st)
        pthread_mutex_unlock(&st->mu);
    return rc;
}

/* TCFG's tangential damping of the uncond prediction */
static void pre_tcfg(const sd_tensor *x, const sd_tensor *cond, sd_tensor *uncond)
{
    const int64_t n = sd_tensor_numel(cond), B = cond->ndim > 0 && cond->shape[0] > 0 ? cond->shape[0] : 1;
    const int64_t per = n / B;
    const float *xv = x->data, *c = cond->data;
    float *u = uncond->data;
    for (int64_t b = 0; b < B; b++) {
        const int64_t o = b * per;
        double a = 0.0, bb = 0.0, d = 0.0; /* Gram matrix [[u.u, u.c], [u.c, c.c]] */
        for (int64_t i = o; i < o + per; i++) {
            double us = (double)(xv[i] - u[i]), cs = (double)(xv[i] - c[i]);
            a += us * us;
            bb += us * cs;
            d += cs * cs;
        }
        double l1 = 0.5 * (a + d) + sqrt(0.25 * (a - d) * (a - d) + bb * bb);
        /* its eigenvector (e0, e1): the better conditioned of the two forms */
        double e0 = bb, e1 = l1 - a, f0 = l1 - d, f1 = bb;
        if (e0 * e0 + e1 * e1 < f0 * f0 + f1 * f1)
            e0 = f0, e1 = f1;
        double en = sqrt(e0 * e0 + e1 * e1);
        if (en == 0.0 || l1 <= 0.0) /* u and c both zero: nothing to project on */
            e0 = 1.0, e1 = 0.0, en = 1.0;
        e0 /= en;
        e1 /= en;
        /* v1 = (e0 u + e1 c) / sigma1, sigma1^2 = l1; (u . v1) v1 */
        double uv = (e0 * a + e1 * bb) / (l1 > 0.0 ? l1 : 1.0);
        for (int64_t i = o; i < o + per; i++) {
            double us = (double)(xv[i] - u[i]), cs = (double)(xv[i] - c[i]);
            float td = (float)(uv * (e0 * us + e1 * cs));
            u[i] = xv[i] - td;
        }
    }
}

/* FreSca: cond = Fourier_filter(cond - uncond) + uncond (pm = {low, high, cutoff}) */
static sd_status pre_fresca(const double *pm, sd_tensor *cond, const sd_tensor *uncond, sd_error *err)
{
    if (cond->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "FreSca: the prediction is not [B, C, H, W]");
    const int64_t n = sd_tensor_numel(cond);
    float *c = cond->data;
    const float *u = uncond->data;
    for (int64_t i = 0; i < n; i++)
        c[i] = c[i] - u[i];
    sd_status rc = sd_fresca_filter(c, cond->shape, pm[0], pm[1], (int64_t)pm[2], err);
    if (rc != SD_OK)
        return rc;
    for (int64_t i = 0; i < n; i++)
        c[i] = c[i] + u[i];
    return SD_OK;
}

sd_status sd_cfg_pre_ex(const sd_cfg_hook *hook, const sd_tensor *x, float sigma, double cfg,
                        int have_uncond, sd_tensor *cond, sd_tensor *uncond, sd_error *err)
{
    if (!hook || hook->n_pre <= 0)
        return SD_OK;
    for (int k = 0; k < hook->n_pre; k++) {
        sd_status rc = SD_OK;
        switch (hook->pre_kind[k]) {
        case SD_CFG_PRE_APG:
            rc = pre_apg(hook->pre_param[k], hook->state[k], sigma, cfg, cond, uncond, err);
            break;
        case SD_CFG_PRE_FRESCA:
            if (have_uncond)
                rc = pre_fresca(hook->pre_param[k], cond, uncond, err);
            break;
        case SD_CFG_PRE_TCFG:
            if (!x)
                return sd_error_set(err, SD_ERR_INVALID, "TCFG needs the sampler's x");
            if (have_uncond)
                pre_tcfg(x, cond, uncond);
            break;
        default: {
            sd_cfg_hook one = *hook;
            one.n_pre = 1;
            one.pre[0] = hook->pre[k];
            one.pre_kind[0] = SD_CFG_PRE_OP;
            rc = sd_cfg_pre(&one, cond, uncond, err);
        }
        }
        if (rc)
            return rc;
    }
    return SD_OK;
}

sd_status sd_cfg_pre(const sd_cfg_hook *hook, sd_tensor *cond, const sd_tensor *uncond, sd_error *err)
{
    if (!hook || hook->n_pre <= 0)
        return SD_OK;
    for (int k = 0; k < hook->n_pre; k++)
        if (hook->pre_kind[k] != SD_CFG_PRE_OP)
            return sd_error_set(err, SD_ERR_INVALID, "sd_cfg_pre runs latent operations only");
    int64_t n = sd_tensor_numel(cond);
    sd_tensor *d = sd_tensor_new(SD_F32, cond->ndim, cond->shape);
    if (!d)
        return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    float *c = cond->data, *dv = d->data;
    const float *u = uncond->data;
    sd_status rc = SD_OK;
    for (int k = 0; k < hook->n_pre && !rc; k++) {
        /* conds_out[0] = operation(latent=(conds_out[0] - conds_out[1])) + conds_out[1] */
        for (int64_t i = 0; i < n; i++)
            dv[i] = c[i] - u[i];
        sd_tensor *r = NULL;
        rc = sd_latent_op_apply(&hook->pre[k], d, &r, err);
        if (rc)
            break;
        const float *rv = r->data;
        for (int64_t i = 0; i < n; i++)
            c[i] = rv[i] + u[i];
        sd_tensor_unref(r);
    }
    sd_tensor_unref(d);
    return rc;
}

/* whether post function p runs at sigma */
static int post_applies(const sd_cfg_slg *p, float sigma)
{
    if (p->kind == SD_CFG_POST_PAG) /* if scale == 0: return cfg_result */
        return p->scale != 0;
    if (p->kind != SD_CFG_POST_SLG)
        return 1;
    /* sigma_ = sigma[0].item(); scale > 0 and sigma_end <= sigma_ <= sigma_start */
    return p->scale > 0 && p->n_skip > 0 && (double)sigma >= p->sigma_end && (double)sigma <= p->sigma_start;
}

int sd_cfg_hook_needs_uncond(const sd_cfg_hook *hook)
{
    for (int k = 0; hook && k < hook->n_post; k++)
        if (hook->post[k].kind == SD_CFG_POST_SAG)
            return 1;
    return 0;
}

int sd_cfg_post_active(const sd_cfg_hook *hook, float sigma)
{
    if (!hook)
        return 0;
    for (int k = 0; k < hook->n_post; k++)
        if (post_applies(&hook->post[k], sigma))
            return 1;
    return 0;
}

/* ---- post-CFG functions that recombine the predictions ---------------------- */

static void post_zero_star(const float *xv, const float *c, const float *u, double cfg, float *o, int64_t B,
                           int64_t per)
{
    const float s = (float)cfg;
    for (int64_t b = 0; b < B; b++) {
        const int64_t off = b * per;
        double dot = 0.0, sq = 0.0;
        for (int64_t i = 0; i < per; i++) {
            float pf = xv[off + i] - c[off + i], nf = xv[off + i] - u[off + i];
            dot += (double)(pf * nf);
            sq += (double)(nf * nf);
        }
        float sqf = (float)sq + 1e-8f;
        float alpha = (float)dot / sqf;
        float am1 = alpha - 1.0f, oma = 1.0f - alpha;
        for (int64_t i = off; i < off + per; i++) {
            float t1 = u[i] * am1;
            float t2 = s * u[i];
            t2 = t2 * oma;
            float r = o[i] + t1;
            o[i] = r + t2;
        }
    }
}

/* per pixel over the C channels of [B, C, P] */
static void post_norm(const float *c, float strength, float *o, int64_t B, int64_t C, int64_t P)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t q = 0; q < P; q++) {
            double sc = 0.0, so = 0.0;
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t i = (b * C + ch) * P + q;
                sc += (double)c[i] * c[i];
                so += (double)o[i] * o[i];
            }
            float nc = (float)sqrt(sc), no = (float)sqrt(so);
            float r = nc / (no + 1e-8f);
            r = r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t i = (b * C + ch) * P + q;
                float t = o[i] * r;
                o[i] = t * strength;
            }
        }
}

static void post_eps(const float *xv, float factor, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float noise = xv[i] - o[i];
        noise = noise / factor;
        o[i] = xv[i] - noise;
    }
}

static float signed_sqrt(float v)
{
    float r = sqrtf(fabsf(v));
    return v > 0 ? r : v < 0 ? -r : 0.0f * r;
}

static void post_mahiro(const float *c, const float *u, double cfg, float *o, int64_t B, int64_t C, int64_t P)
{
    const float s = (float)cfg;
    /* sim: mean over B x P of the channel cosine similarity (eps 1e-8) */
    double sum = 0.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t q = 0; q < P; q++) {
            double w12 = 0.0, w1 = 0.0, w2 = 0.0;
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t i = (b * C + ch) * P + q;
                float leap = c[i] * s, ul = u[i] * s;
                float m = leap + o[i];
                m = m / 2.0f;
                float nu = signed_sqrt(ul), nm = signed_sqrt(m);
                w12 += (double)nu * nm;
                w1 += (double)nu * nu;
                w2 += (double)nm * nm;
            }
            double den = sqrt(w1 * w2);
            sum += w12 / (den > 1e-8 ? den : 1e-8);
        }
    float sim = (float)(sum / (double)(B * P));
    float simsc = sim + 1.0f;
    simsc = 2.0f * simsc;
    float rest = 4.0f - simsc;
    for (int64_t i = 0; i < B * C * P; i++) {
        float leap = c[i] * s;
        float a = simsc * o[i], bb = rest * leap;
        float wm = a + bb;
        o[i] = wm / 4.0f;
    }
}

sd_status sd_cfg_post(const sd_cfg_hook *hook, sd_guider_skip_fn skip_model, void *skip_ud,
                      const sd_tensor *x, float sigma, const float *cond, const float *uncond, double cfg,
                      sd_tensor *out, sd_tensor *scratch, sd_error *err)
{
    if (!hook)
        return SD_OK;
    int64_t n = sd_tensor_numel(x);
    int64_t B = x->ndim > 0 && x->shape[0] > 0 ? x->shape[0] : 1;
    int64_t C = x->ndim > 1 ? x->shape[1] : 1;
    int64_t P = n / (B * C > 0 ? B * C : 1);
    for (int k = 0; k < hook->n_post; k++) {
        const sd_cfg_slg *p = &hook->post[k];
        if (!post_applies(p, sigma))
            continue;
        float *ov = out->data;
        switch (p->kind) {
        case SD_CFG_POST_ZERO_STAR:
            post_zero_star(x->data, cond, uncond, cfg, ov, B, n / B);
            continue;
        case SD_CFG_POST_NORM:
            post_norm(cond, (float)p->scale, ov, B, C, P);
            continue;
        case SD_CFG_POST_EPS:
            post_eps(x->data, (float)p->scale, ov, n);
            continue;
        case SD_CFG_POST_MAHIRO:
            post_mahiro(cond, uncond, cfg, ov, B, C, P);
            continue;
        default:
            break;
        }
        if (!skip_model)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: this sampler has no model call for it",
                                p->kind == SD_CFG_POST_PAG   ? "perturbed attention guidance"
                                : p->kind == SD_CFG_POST_SAG ? "self-attention guidance"
                                                             : "skip layer guidance");
        const float s = (float)p->scale;
        if (p->kind == SD_CFG_POST_SAG) {
            /* if min(cfg_result.shape[2:]) <= 4: return cfg_result */
            int small = x->ndim < 3;
            for (int d = 2; d < x->ndim; d++)
                small |= x->shape[d] <= 4;
            if (small)
                continue;
            sd_status st = skip_model(skip_ud, x, sigma, p, uncond, scratch, err);
            if (st != SD_OK)
                return st;
            const float *sv = scratch->data;
            for (int64_t i = 0; i < n; i++) {
                float d = sv[i] * s;
                ov[i] = ov[i] + d; /* cfg_result + (degraded - sag) * sag_scale */
            }
            continue;
        }
        sd_status st = skip_model(skip_ud, x, sigma, p, uncond, scratch, err);
        if (st != SD_OK)
            return st;
        const float *sv = scratch->data;
        for (int64_t i = 0; i < n; i++) {
            float d = cond[i] - sv[i];
            d = d * s;
            ov[i] = ov[i] + d; /* cfg_result + (cond_pred - slg) * scale */
        }
    }
    return SD_OK;
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

/* cfg_function's combination for g (the hook's cfg function, with the
 * empty conditioning's prediction for PerpNeg) */
static sd_status guider_cfg(sd_guider *g, const sd_tensor *x, float sigma, const float *cond, const float *uncond,
                            float *out, sd_error *err)
{
    int64_t n = sd_tensor_numel(x);
    int64_t batch = x->ndim > 0 && x->shape[0] > 0 ? x->shape[0] : 1;
    const float *empty = NULL;
    if (g->hook.fn == SD_CFG_FN_PERP_NEG) {
        sd_tensor *eb = scratch(&g->empty_buf, x);
        if (!eb)
            return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
        int c = SD_COND_EMPTY;
        g->model_calls++;
        sd_status st = g->model(g->model_ud, x, sigma, &c, 1, &eb, err);
        if (st != SD_OK)
            return st;
        empty = eb->data;
    }
    return sd_cfg_apply(&g->hook, cond, uncond, empty, g->cfg, x->data, sigma, batch, n / batch, out, err);
}

static sd_status guider_eval(void *ud, const sd_tensor *x, float sigma, sd_tensor *denoised,
                             sd_tensor *uncond_denoised, sd_error *err)
{
    sd_guider *g = ud;
    if (!g->model)
        return sd_error_set(err, SD_ERR_INVALID, "guider: no model");
    g->guider_calls++;
    int64_t n = sd_tensor_numel(x);
    if (sd_cfg_is_one(g->cfg) && !uncond_denoised && !sd_cfg_hook_needs_uncond(&g->hook)) {
        /* cfg1 optimisation: uncond treated as zeros, 0 + (cond - 0) * 1 == cond */
        int conds[1] = {SD_COND_POSITIVE};
        sd_tensor *outs[1] = {denoised};
        g->model_calls++;
        sd_status st = g->model(g->model_ud, x, sigma, conds, 1, outs, err);
        int post = sd_cfg_post_active(&g->hook, sigma);
        if (st != SD_OK || (!g->hook.rescale && g->hook.fn == SD_CFG_FN_NONE && g->hook.n_pre <= 0 && !post))
            return st;
        /* a cfg function still sees the (zero) uncond prediction */
        sd_tensor *zb = scratch(&g->uncond_buf, x);
        if (!zb)
            return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
        memset(zb->data, 0, zb->nbytes);
        if ((st = sd_cfg_pre_ex(&g->hook, x, sigma, g->cfg, 0, denoised, zb, err)) != SD_OK)
            return st;
        sd_tensor *cc = NULL;
        if (post) { /* the post functions read the cond prediction */
            if (!(cc = scratch(&g->cond_buf, x)))
                return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
            memcpy(cc->data, denoised->data, (size_t)n * sizeof(float));
        }
        float *dv = (float *)denoised->data;
        if ((g->hook.rescale || g->hook.fn != SD_CFG_FN_NONE) &&
            (st = guider_cfg(g, x, sigma, dv, zb->data, dv, err)) != SD_OK)
            return st;
        if (!post)
            return SD_OK;
        sd_tensor *pb = scratch(&g->post_buf, x);
        if (!pb)
            return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
        g->model_calls++;
        return sd_cfg_post(&g->hook, g->skip_model, g->skip_ud, x, sigma, cc->data, zb->data, g->cfg, denoised, pb,
                           err);
    }
    sd_tensor *cb = denoised;
    sd_tensor *ub = uncond_denoised ? uncond_denoised : scratch(&g->uncond_buf, x);
    if (!ub)
        return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    int conds[2] = {SD_COND_POSITIVE, SD_COND_NEGATIVE};
    sd_tensor *outs[2] = {cb, ub};
    g->model_calls += 2;
    sd_status st = g->model(g->model_ud, x, sigma, conds, 2, outs, err);
    if (st == SD_OK)
        st = sd_cfg_pre_ex(&g->hook, x, sigma, g->cfg, 1, cb, ub, err);
    if (st != SD_OK)
        return st;
    int post = sd_cfg_post_active(&g->hook, sigma);
    sd_tensor *cc = NULL;
    if (post) { /* the post functions read the cond prediction */
        if (!(cc = scratch(&g->cond_buf, x)))
            return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
        memcpy(cc->data, cb->data, (size_t)n * sizeof(float));
    }
    float *dv = (float *)denoised->data;
    if ((st = guider_cfg(g, x, sigma, dv, (const float *)ub->data, dv, err)) != SD_OK)
        return st;
    if (!post)
        return SD_OK;
    sd_tensor *pb = scratch(&g->post_buf, x);
    if (!pb)
        return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    g->model_calls++;
    return sd_cfg_post(&g->hook, g->skip_model, g->skip_ud, x, sigma, cc->data, ub->data, g->cfg, denoised, pb, err);
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
    sd_tensor_unref(ip->mbuf);
    ip->xbuf = ip->mbuf = NULL;
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
    const float *mask = ip->mask;
    if (ip->diff_diff) {
        sd_tensor *mb = scratch(&ip->mbuf, x);
        if (!mb)
            return sd_error_set(err, SD_ERR_NOMEM, "inpaint: out of memory");
        float cur = sd_ms_timestep(ip->dd_ms, sigma);
        float num = cur - ip->dd_ts_to, den = ip->dd_ts_from - ip->dd_ts_to;
        float thr = num / den;
        const int blend = ip->dd_strength != 0 && ip->dd_strength < 1;
        const float s = (float)ip->dd_strength, s1 = (float)(1.0 - ip->dd_strength);
        float *mv = mb->data;
        for (int64_t i = 0; i < n; i++) {
            float b = ip->mask[i] >= thr ? 1.0f : 0.0f;
            if (blend) {
                float a = s * b, c = s1 * ip->mask[i];
                b = a + c;
            }
            mv[i] = b;
        }
        mask = mv;
    }
    const float *xv = x->data;
    float *bv = xb->data;
    for (int64_t i = 0; i < n; i++) {
        float m = mask[i];
        float lm = 1.0f - m;
        float sc; /* model_sampling.noise_scaling(sigma, noise, latent) */
        if (ip->flow) {
            float a = sigma * ip->noise[i];
            float b = (1.0f - sigma) * ip->latent[i];
            sc = a + b;
        } else {
            sc = ip->noise[i] * sigma;
            sc = sc + ip->latent[i];
        }
        float a = xv[i] * m;
        float b = sc * lm;
        bv[i] = a + b;
    }
    sd_status st = ip->inner.eval(ip->inner.ud, xb, sigma, denoised, uncond_denoised, err);
    if (st != SD_OK)
        return st;
    float *dv = denoised->data;
    for (int64_t i = 0; i < n; i++) {
        float m = mask[i];
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

/* ---- CFGGuider.sample ----------------------------------------------------------- */

static double ms_percent_to_sigma(void *ud, double p)
{
    return sd_ms_percent_to_sigma(ud, p);
}

sd_status sd_guider_sample(sd_guider *g, const sd_model_sampling *ms, const sd_sampler *s,
                           const float *sigmas, int n_sigmas, const sd_tensor *noise,
                           const sd_tensor *latent, const sd_tensor *mask,
                           const sd_sampler_params *params, sd_tensor **out, sd_error *err)
{
    *out = NULL;
    if (!g || !ms || !s || !noise || !params || (n_sigmas > 0 && !sigmas))
        return sd_error_set(err, SD_ERR_INVALID, "sd_guider_sample: NULL argument");
    if (noise->dtype != SD_F32)
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: noise must be F32", s->name);
    int64_t n = sd_tensor_numel(noise);
    if ((latent && (latent->dtype != SD_F32 || sd_tensor_numel(latent) != n)) ||
        (mask && (mask->dtype != SD_F32 || sd_tensor_numel(mask) != n)))
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: latent/mask do not match the noise "
                            "shape", s->name);
    sd_tensor *x = sd_tensor_new(SD_F32, noise->ndim, noise->shape);
    if (!x)
        return sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", s->name);
    if (n_sigmas == 0) { /* CFGGuider.sample: nothing to do */
        if (latent)
            memcpy(x->data, latent->data, (size_t)n * sizeof(float));
        *out = x;
        return SD_OK;
    }
    const float *lat = latent ? (const float *)latent->data : NULL;
    sd_ms_noise_scaling(ms, sigmas[0], noise->data, lat, sd_ms_is_max_denoise(ms, sigmas[0]),
                        x->data, (size_t)n);

    sd_sampler_params p = *params;
    if (!p.percent_to_sigma) {
        p.percent_to_sigma = ms_percent_to_sigma;
        p.percent_to_sigma_ud = (void *)ms;
    }
    p.flow = ms->prediction == SD_PRED_CONST;
    sd_denoiser d = sd_guider_denoiser(g);
    sd_inpaint ip;
    memset(&ip, 0, sizeof ip);
    sd_tensor *zeros = NULL, *rnoise = NULL;
    sd_status st = SD_OK;
    if (mask) {
        if (!lat) {
            zeros = sd_tensor_new(SD_F32, noise->ndim, noise->shape);
            if (!zeros) {
                st = sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", s->name);
                goto done;
            }
            lat = zeros->data;
        }
        const float *nz = noise->data;
        if (strcmp(s->name, "ddim") == 0) {
            /* inpaint_options {"random": True}: torch.manual_seed(seed + 1) */
            rnoise = sd_noise_prepare(params->seed + 1, noise->ndim, noise->shape, NULL, 0);
            if (!rnoise) {
                st = sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", s->name);
                goto done;
            }
            nz = rnoise->data;
        }
        sd_inpaint_init(&ip, d, lat, nz, mask->data, n);
        ip.flow = p.flow;
        d = sd_inpaint_denoiser(&ip);
    }
    st = sd_sampler_run(s, &d, sigmas, n_sigmas, x, &p, err);
    if (st == SD_OK)
        sd_ms_inverse_noise_scaling(ms, sd_sampler_final_sigma(s, sigmas, n_sigmas), x->data, x->data,
                                    (size_t)n);
done:
    sd_inpaint_release(&ip);
    sd_tensor_unref(zeros);
    sd_tensor_unref(rnoise);
    if (st != SD_OK) {
        sd_tensor_unref(x);
        return st;
    }
    *out = x;
    return SD_OK;
}
