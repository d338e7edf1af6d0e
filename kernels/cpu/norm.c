/* norm.c - GroupNorm, LayerNorm and softmax. Statistics are accumulated in
 * double (two passes) so results match PyTorch to ~1e-6 relative even for
 * groups of millions of elements. */
#include "cpu.h"

#include <math.h>

typedef struct {
    const float *x, *gamma, *beta;
    float *y;
    int64_t C, S, cpg, rows, n;
    int groups, silu;
    float eps;
} norm_job;

static void group_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t g = t % j->groups;
    int64_t count = j->cpg * j->S;
    const float *x = j->x + t * count;
    float *y = j->y + t * count;
    double sum = 0.0;
    for (int64_t i = 0; i < count; i++) sum += x[i];
    double mean = count ? sum / (double)count : 0.0;
    double ss = 0.0;
    for (int64_t i = 0; i < count; i++) {
        double d = x[i] - mean;
        ss += d * d;
    }
    double var = count ? ss / (double)count : 0.0;
    double rstd = 1.0 / sqrt(var + (double)j->eps);
    for (int64_t c = 0; c < j->cpg; c++) {
        int64_t ch = g * j->cpg + c;
        double ga = j->gamma ? j->gamma[ch] : 1.0, be = j->beta ? j->beta[ch] : 0.0;
        /* (x - mean) first: folding mean into the shift cancels badly when
         * the variance is tiny (rstd up to 1/sqrt(eps)) */
        float scale = (float)(rstd * ga), shift = (float)be, m = (float)mean;
        const float *xc = x + c * j->S;
        float *yc = y + c * j->S;
        for (int64_t i = 0; i < j->S; i++) yc[i] = (xc[i] - m) * scale + shift;
        if (j->silu) sd_cpu_silu(yc, yc, j->S, 1.0f);
    }
}

sd_status sd_cpu_group_norm(sd_backend *be, sd_bt *out, const sd_bt *x, int groups,
                            const sd_bt *gamma, const sd_bt *beta, float eps, int silu_flag) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.gamma = gamma ? sd_cpu_f32(gamma) : NULL;
    j.beta = beta ? sd_cpu_f32(beta) : NULL;
    j.C = x->shape[1];
    j.S = 1;
    for (int i = 2; i < x->ndim; i++) j.S *= x->shape[i];
    j.groups = groups;
    j.cpg = j.C / groups;
    j.eps = eps;
    j.silu = silu_flag;
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * groups, group_task, &j);
    return SD_OK;
}

/* ---- LayerNorm over the last dim ------------------------------------------- */

static void layer_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t r0 = t * j->rows, r1 = r0 + j->rows;
    if (r1 > j->n) r1 = j->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->C;
        float *y = j->y + r * j->C;
        double sum = 0.0;
        for (int64_t i = 0; i < j->C; i++) sum += x[i];
        double mean = sum / (double)j->C, ss = 0.0;
        for (int64_t i = 0; i < j->C; i++) {
            double d = x[i] - mean;
            ss += d * d;
        }
        double rstd = 1.0 / sqrt(ss / (double)j->C + (double)j->eps);
        for (int64_t i = 0; i < j->C; i++) {
            float v = (float)((x[i] - mean) * rstd);
            if (j->gamma) v *= j->gamma[i];
            if (j->beta) v += j->beta[i];
            y[i] = v;
        }
    }
}

sd_status sd_cpu_layer_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                            const sd_bt *beta, float eps) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.gamma = gamma ? sd_cpu_f32(gamma) : NULL;
    j.beta = beta ? sd_cpu_f32(beta) : NULL;
    j.C = x->shape[x->ndim - 1];
    j.eps = eps;
    if (j.C == 0) return SD_OK;
    j.n = sd_bt_numel(x) / j.C;
    j.rows = 1 + 16384 / j.C;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, j.rows), layer_task, &j);
    return SD_OK;
}

/* ---- softmax over the last dim ----------------------------------------------- */

static void softmax_task(void *ctx, int64_t t, int thread) {
    const norm_job *j = ctx;
    int64_t r0 = t * j->rows, r1 = r0 + j->rows;
    if (r1 > j->n) r1 = j->n;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->C;
        const float *x = j->x + r * j->C;
        for (int64_t i = 0; i < j->C; i++) y[i] = x[i];
        sd_cpu_softmax_row(y, j->C);
    }
}

sd_status sd_cpu_softmax(sd_backend *be, sd_bt *out, const sd_bt *x) {
    norm_job j = {0};
    j.x = sd_cpu_f32(x);
    j.y = sd_cpu_f32(out);
    j.C = x->shape[x->ndim - 1];
    if (j.C == 0) return SD_OK;
    j.n = sd_bt_numel(x) / j.C;
    j.rows = 1 + 16384 / j.C;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, j.rows), softmax_task, &j);
    return SD_OK;
}
