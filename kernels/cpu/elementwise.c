/* elementwise.c - broadcasting add/mul, per-channel add, unary activations
 * and GEGLU. Work is cut into rows (last dim) or flat chunks for the pool. */
#include "cpu.h"

#include <math.h>

#define CHUNK 65536

/* ---- binary with broadcasting ----------------------------------------------- */

typedef struct {
    const float *a, *b;
    float *y;
    int64_t inner, rows, rows_per_task;
    int ndim, op;
    const int64_t *shape, *bst;
} bin_job;

static void bin_task(void *ctx, int64_t t, int thread) {
    const bin_job *j = ctx;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->rows) r1 = j->rows;
    int64_t sl = j->bst[j->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        /* b offset of row r: decompose r over dims 0..ndim-2 */
        int64_t off = 0, rem = r;
        for (int d = j->ndim - 2; d >= 0; d--) {
            off += (rem % j->shape[d]) * j->bst[d];
            rem /= j->shape[d];
        }
        const float *a = j->a + r * j->inner, *b = j->b + off;
        float *y = j->y + r * j->inner;
        if (j->op == 0) {
            if (sl) for (int64_t i = 0; i < j->inner; i++) y[i] = a[i] + b[i];
            else for (int64_t i = 0; i < j->inner; i++) y[i] = a[i] + b[0];
        } else {
            if (sl) for (int64_t i = 0; i < j->inner; i++) y[i] = a[i] * b[i];
            else for (int64_t i = 0; i < j->inner; i++) y[i] = a[i] * b[0];
        }
    }
}

sd_status sd_cpu_binary(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                        const int64_t *b_strides, int op) {
    int64_t n = sd_bt_numel(a);
    if (n == 0) return SD_OK;
    if (a->ndim == 0) {
        float *y = sd_cpu_f32(out);
        y[0] = op == 0 ? sd_cpu_f32(a)[0] + sd_cpu_f32(b)[0] : sd_cpu_f32(a)[0] * sd_cpu_f32(b)[0];
        return SD_OK;
    }
    bin_job j = {sd_cpu_f32(a), sd_cpu_f32(b), sd_cpu_f32(out), a->shape[a->ndim - 1], 0, 0,
                 a->ndim, op, a->shape, b_strides};
    j.rows = n / j.inner;
    j.rows_per_task = 1 + CHUNK / j.inner;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.rows, j.rows_per_task), bin_task, &j);
    return SD_OK;
}

/* ---- x[n, c, ...] + b[n, c] -------------------------------------------------- */

typedef struct {
    const float *x, *b;
    float *y;
    int64_t plane;
} chan_job;

static void chan_task(void *ctx, int64_t t, int thread) {
    const chan_job *j = ctx;
    const float *x = j->x + t * j->plane;
    float *y = j->y + t * j->plane;
    float v = j->b[t];
    for (int64_t i = 0; i < j->plane; i++) y[i] = x[i] + v;
}

sd_status sd_cpu_add_channel(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *b) {
    chan_job j = {sd_cpu_f32(x), sd_cpu_f32(b), sd_cpu_f32(out), 1};
    for (int i = 2; i < x->ndim; i++) j.plane *= x->shape[i];
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * x->shape[1], chan_task, &j);
    return SD_OK;
}

/* ---- unary --------------------------------------------------------------------- */

typedef struct {
    const float *x;
    float *y;
    int64_t n;
    int op;
    float s;
} un_job;

static void un_task(void *ctx, int64_t t, int thread) {
    const un_job *j = ctx;
    int64_t i0 = t * CHUNK, i1 = i0 + CHUNK;
    if (i1 > j->n) i1 = j->n;
    const float *x = j->x;
    float *y = j->y;
    switch (j->op) {
    case SD_UNARY_SCALE: for (int64_t i = i0; i < i1; i++) y[i] = x[i] * j->s; break;
    case SD_UNARY_SILU: sd_cpu_silu(x + i0, y + i0, i1 - i0, 1.0f); break;
    case SD_UNARY_GELU: sd_cpu_gelu(x + i0, y + i0, i1 - i0); break;
    case SD_UNARY_GELU_TANH: sd_cpu_gelu_tanh(x + i0, y + i0, i1 - i0); break;
    case SD_UNARY_QUICK_GELU: sd_cpu_silu(x + i0, y + i0, i1 - i0, 1.702f); break;
    case SD_UNARY_TANH: for (int64_t i = i0; i < i1; i++) y[i] = tanhf(x[i]); break;
    case SD_UNARY_RELU: for (int64_t i = i0; i < i1; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f; break;
    case SD_UNARY_LEAKY_RELU:
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] >= 0.0f ? x[i] : x[i] * j->s;
        break;
    /* the rest in torch's scalar formulas (ATen's Activation kernels) */
    case SD_UNARY_ELU:
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]) * j->s;
        break;
    case SD_UNARY_HARDSWISH:
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] * fminf(fmaxf(x[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
        break;
    case SD_UNARY_SIGMOID:
        for (int64_t i = i0; i < i1; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case SD_UNARY_SOFTSIGN:
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] / (fabsf(x[i]) + 1.0f);
        break;
    case SD_UNARY_MISH:
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] * tanhf(log1pf(expf(x[i])));
        break;
    }
}

sd_status sd_cpu_unary(sd_backend *be, sd_bt *out, const sd_bt *x, int op, float s) {
    un_job j = {sd_cpu_f32(x), sd_cpu_f32(out), sd_bt_numel(x), op, s};
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.n, CHUNK), un_task, &j);
    return SD_OK;
}

/* ---- GEGLU: x [..., 2F] -> x[..., :F] * gelu(x[..., F:]) ------------------------- */

typedef struct {
    const float *x;
    float *y;
    int64_t F, rows, rows_per_task;
} geglu_job;

static void geglu_task(void *ctx, int64_t t, int thread) {
    const geglu_job *j = ctx;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->rows) r1 = j->rows;
    for (int64_t r = r0; r < r1; r++) {
        const float *a = j->x + r * 2 * j->F, *g = a + j->F;
        float *y = j->y + r * j->F;
        sd_cpu_gelu(g, y, j->F);
        for (int64_t i = 0; i < j->F; i++) y[i] *= a[i];
    }
}

sd_status sd_cpu_geglu(sd_backend *be, sd_bt *out, const sd_bt *x) {
    geglu_job j = {sd_cpu_f32(x), sd_cpu_f32(out), out->shape[out->ndim - 1], 0, 0};
    if (j.F == 0) return SD_OK;
    j.rows = sd_bt_numel(out) / j.F;
    j.rows_per_task = 1 + CHUNK / j.F;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.rows, j.rows_per_task), geglu_task, &j);
    return SD_OK;
}
