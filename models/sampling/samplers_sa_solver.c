/* samplers_sa_solver.c - SA-Solver (stochastic Adams predictor-corrector,
 * comfy.k_diffusion.sa_solver + sample_sa_solver): sa_solver and
 * sa_solver_pece, predictor order 3, corrector order 4, tau = 1 inside
 * ModelSampling.percent_to_sigma(0.2) >= sigma >= percent_to_sigma(0.8) by
 * default, SamplerSASolver's orders, PECE, simple order 2 and window when
 * the params say (sd_sampler_params.sa_set).
 * The b coefficients (an exponential integral against a Lagrange basis in
 * half-logSNR) are computed in double; ComfyUI does them in float32. */
#include <string.h>
#include "models/sampling/sampler_internal.h"

#define FOR_N for (int64_t k = 0; k < c->n; k++)
#define SA_MAX_ORDER 6 /* SamplerSASolver's orders go to 6 */

/* Solve the n x n system A z = rhs (Gaussian elimination, partial pivoting). */
static void solve(int n, double A[SA_MAX_ORDER][SA_MAX_ORDER], double *rhs, double *z)
{
    double M[SA_MAX_ORDER][SA_MAX_ORDER + 1];
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            M[i][j] = A[i][j];
        M[i][n] = rhs[i];
    }
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int r = col + 1; r < n; r++)
            if (fabs(M[r][col]) > fabs(M[piv][col]))
                piv = r;
        if (piv != col)
            for (int j = 0; j <= n; j++) {
                double t = M[col][j];
                M[col][j] = M[piv][j];
                M[piv][j] = t;
            }
        for (int r = col + 1; r < n; r++) {
            double f = M[r][col] / M[col][col];
            for (int j = col; j <= n; j++)
                M[r][j] -= f * M[col][j];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double v = M[i][n];
        for (int j = i + 1; j < n; j++)
            v -= M[i][j] * z[j];
        z[i] = v / M[i][i];
    }
}

/* compute_stochastic_adams_b_coeffs: simple2 with two lambdas is the
 * paper's simple order-2 scheme (compute_simple_stochastic_adams_b_coeffs,
 * the corrector's or the predictor's), else the Lagrange-basis integrals. */
static void sa_b_coeffs(double sigma_next, const double *lambdas, int n, double lambda_s,
                        double lambda_t, double tau, int simple2, int corrector, double *b)
{
    double tau_mul = 1.0 + tau * tau;
    double h = lambda_t - lambda_s;
    if (simple2 && n == 2) {
        double alpha_t = sigma_next * exp(lambda_t), e = -expm1(-h * tau_mul);
        if (corrector) {
            b[1] = alpha_t * (0.5 * tau_mul * h);
            b[0] = alpha_t * e - b[1];
        } else {
            b[0] = alpha_t * (0.5 * tau_mul * h * h) / (lambdas[0] - lambda_s);
            b[1] = alpha_t * e - b[0];
        }
        return;
    }
    double prod[SA_MAX_ORDER], e[SA_MAX_ORDER];
    double ex = exp(-tau_mul * h);
    for (int p = 0; p < n; p++)
        prod[p] = pow(lambda_t, p) - pow(lambda_s, p) * ex;
    for (int p = 0; p < n; p++) {
        double acc = 0.0;
        for (int q = 0; q <= p; q++) {
            double lc = lgamma(p + 1.0) - lgamma(q + 1.0);
            if (tau > 0.0)
                lc -= (p - q) * log(tau_mul);
            double coef = exp(lc) * (((p - q) % 2 == 0) ? 1.0 : -1.0);
            acc += coef * prod[q];
        }
        e[p] = acc;
    }
    double V[SA_MAX_ORDER][SA_MAX_ORDER]; /* vander(lambdas, increasing).T */
    for (int p = 0; p < n; p++)
        for (int k = 0; k < n; k++)
            V[p][k] = pow(lambdas[k], p);
    double z[SA_MAX_ORDER];
    solve(n, V, e, z);
    double alpha_t = sigma_next * exp(lambda_t);
    for (int k = 0; k < n; k++)
        b[k] = alpha_t * z[k];
}

static sd_status sa_solver(smp_ctx *c, sd_tensor *x, const float *sigmas, int n_sigmas, int pece,
                           sd_error *err)
{
    const sd_sampler_params *P = c->p;
    const int predictor_order = P->sa_set ? P->sa_predictor_order : 3;
    const int corrector_order = P->sa_set ? P->sa_corrector_order : 4;
    const int simple2 = P->sa_set && P->sa_simple_order_2;
    if (P->sa_set && P->sa_use_pece)
        pece = 1;
    if (predictor_order < 1 || predictor_order > SA_MAX_ORDER || corrector_order < 0 ||
        corrector_order > SA_MAX_ORDER)
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: predictor_order must be 1..%d and "
                            "corrector_order 0..%d", c->s->name, SA_MAX_ORDER, SA_MAX_ORDER);
    const int max_used = predictor_order > corrector_order ? predictor_order : corrector_order;
    double s_noise_d = smp_opt(c->p->s_noise, 1.0);
    float s_noise = (float)s_noise_d;
    double start_sigma, end_sigma;
    if (P->sa_set) {
        start_sigma = P->sa_tau_start_sigma;
        end_sigma = P->sa_tau_end_sigma;
    } else if (c->p->percent_to_sigma) {
        start_sigma = c->p->percent_to_sigma(c->p->percent_to_sigma_ud, 0.2);
        end_sigma = c->p->percent_to_sigma(c->p->percent_to_sigma_ud, 0.8);
    } else {
        start_sigma = smp_default_percent_to_sigma(0.2);
        end_sigma = smp_default_percent_to_sigma(0.8);
    }
    const double tau_eta = P->sa_set ? P->sa_eta : 1.0; /* get_tau_interval_func's eta */

    double *lambdas = smp_alloc(c, (size_t)n_sigmas * sizeof(double), err);
    if (!lambdas || !(sigmas = smp_snr_sigmas(c, sigmas, n_sigmas, err)))
        return SD_ERR_NOMEM;
    for (int i = 0; i < n_sigmas; i++)
        lambdas[i] = (double)smp_half_log_snr(c, sigmas[i]); /* float32 as in torch */

    sd_tensor *pred[SA_MAX_ORDER + 1], *xp = smp_tmp(c, err), *nz = smp_tmp(c, err);
    sd_tensor *noise = smp_tmp(c, err);
    for (int j = 0; j <= max_used; j++)
        if (!(pred[j] = smp_tmp(c, err)))
            return SD_ERR_NOMEM;
    if (!xp || !nz || !noise)
        return SD_ERR_NOMEM;
    /* x is the corrected state, xp the predicted one (x_pred) */
    float *xv = smp_f(x), *xpv = smp_f(xp), *nv = smp_f(nz), *noisev = smp_f(noise);
    smp_copy(c, xpv, xv);
    int npred = 0;
    double h = 0.0, tau_t = 0.0;
    int lower_order_to_end = sigmas[n_sigmas - 1] == 0.0f;
    sd_status st;
    for (int i = 0; i < n_sigmas - 1; i++) {
        float s = sigmas[i], sn = sigmas[i + 1];
        /* pred_list.append(model(x_pred)); keep the last max_used */
        if (npred == max_used) {
            sd_tensor *t = pred[0];
            memmove(pred, pred + 1, (size_t)(max_used - 1) * sizeof pred[0]);
            pred[max_used - 1] = t;
            npred--;
        }
        sd_tensor *den = pred[npred];
        if ((st = smp_denoise(c, xp, s, den, err)) != SD_OK)
            return st;
        npred++;
        smp_progress(c, i, xp, den);
        int p_order = predictor_order < npred ? predictor_order : npred;
        int c_order = (i == 0 || (sn == 0.0f && !pece)) ? 0
                      : (corrector_order < npred ? corrector_order : npred);
        if (lower_order_to_end) {
            int lim = n_sigmas - 2 - i;
            if (p_order > lim)
                p_order = lim;
            lim = n_sigmas - 1 - i;
            if (c_order > lim)
                c_order = lim;
        }
        /* corrector */
        if (c_order == 0) {
            smp_copy(c, xv, xpv);
        } else {
            double b[SA_MAX_ORDER];
            sa_b_coeffs(s, lambdas + i - c_order + 1, c_order, lambdas[i - 1], lambdas[i], tau_t, simple2, 1,
                        b);
            float a = (s / sigmas[i - 1]) * sd_torch_expf((float)(-(tau_t * tau_t)) * (float)h);
            int add_noise = tau_t > 0.0 && s_noise_d > 0.0;
            FOR_N {
                double acc = 0.0;
                for (int j = 0; j < c_order; j++)
                    acc += (double)smp_f(pred[npred - c_order + j])[k] * b[j];
                float v = a * xv[k];
                v = v + (float)acc;
                if (add_noise)
                    v = v + noisev[k];
                xv[k] = v;
            }
            if (pece) {
                if ((st = smp_denoise(c, x, s, pred[npred - 1], err)) != SD_OK)
                    return st;
            }
        }
        /* predictor */
        if (sn == 0.0f) {
            smp_copy(c, xpv, smp_f(pred[npred - 1]));
            continue;
        }
        tau_t = (tau_eta > 0.0 && start_sigma >= (double)sn && (double)sn >= end_sigma) ? tau_eta : 0.0;
        double b[SA_MAX_ORDER];
        sa_b_coeffs(sn, lambdas + i - p_order + 1, p_order, lambdas[i], lambdas[i + 1], tau_t, simple2, 0, b);
        h = (double)((float)lambdas[i + 1] - (float)lambdas[i]);
        float a = (sn / s) * sd_torch_expf((float)(-(tau_t * tau_t)) * (float)h);
        int add_noise = tau_t > 0.0 && s_noise_d > 0.0;
        float amp = 0.0f;
        if (add_noise) {
            float m = (float)(-2.0 * tau_t * tau_t) * (float)h;
            amp = sqrtf(-smp_expm1f(m));
            if ((st = smp_noise(c, s, sn, nv, err)) != SD_OK)
                return st;
        }
        FOR_N {
            double acc = 0.0;
            for (int j = 0; j < p_order; j++)
                acc += (double)smp_f(pred[npred - p_order + j])[k] * b[j];
            float v = a * xv[k];
            v = v + (float)acc;
            if (add_noise) {
                float e = nv[k] * sn;
                e = e * amp;
                e = e * s_noise;
                noisev[k] = e;
                v = v + e;
            }
            xpv[k] = v;
        }
    }
    smp_copy(c, xv, xpv);
    return SD_OK;
}

sd_status smp_sa_solver(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return sa_solver(c, x, s, n, 0, err);
}

sd_status smp_sa_solver_pece(smp_ctx *c, sd_tensor *x, const float *s, int n, sd_error *err)
{
    return sa_solver(c, x, s, n, 1, err);
}
