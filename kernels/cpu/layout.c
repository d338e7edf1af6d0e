/* layout.c - ops that only move data: pad, nearest upsampling, concat,
 * slice, permute, embedding gather, copy. */
#include "cpu.h"

#include <string.h>

/* ---- pad2d ---------------------------------------------------------------------- */

typedef struct {
    const float *x;
    float *y;
    int64_t H, W, Ho, Wo;
    int left, top;
} plane_job;

static void pad_task(void *ctx, int64_t t, int thread) {
    const plane_job *j = ctx;
    const float *x = j->x + t * j->H * j->W;
    float *y = j->y + t * j->Ho * j->Wo;
    /* zero the border, copy the interior rows */
    memset(y, 0, (size_t)(j->top * j->Wo) * sizeof *y);
    for (int64_t r = 0; r < j->H; r++) {
        float *d = y + (r + j->top) * j->Wo;
        memset(d, 0, (size_t)j->left * sizeof *y);
        memcpy(d + j->left, x + r * j->W, (size_t)j->W * sizeof *y);
        memset(d + j->left + j->W, 0, (size_t)(j->Wo - j->left - j->W) * sizeof *y);
    }
    memset(y + (j->top + j->H) * j->Wo, 0, (size_t)((j->Ho - j->top - j->H) * j->Wo) * sizeof *y);
}

sd_status sd_cpu_pad2d(sd_backend *be, sd_bt *out, const sd_bt *x, int left, int top) {
    plane_job j = {sd_cpu_f32(x), sd_cpu_f32(out), x->shape[2], x->shape[3], out->shape[2],
                   out->shape[3], left, top};
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * x->shape[1], pad_task, &j);
    return SD_OK;
}

/* ---- nearest x2 --------------------------------------------------------------- */

static void up_task(void *ctx, int64_t t, int thread) {
    const plane_job *j = ctx;
    const float *x = j->x + t * j->H * j->W;
    float *y = j->y + t * j->Ho * j->Wo;
    for (int64_t r = 0; r < j->H; r++) {
        float *d = y + 2 * r * j->Wo;
        const float *s = x + r * j->W;
        for (int64_t c = 0; c < j->W; c++) d[2 * c] = d[2 * c + 1] = s[c];
        memcpy(d + j->Wo, d, (size_t)j->Wo * sizeof *d);
    }
}

sd_status sd_cpu_upsample2x(sd_backend *be, sd_bt *out, const sd_bt *x) {
    plane_job j = {sd_cpu_f32(x), sd_cpu_f32(out), x->shape[2], x->shape[3], out->shape[2],
                   out->shape[3], 0, 0};
    sd_pool_run(sd_cpu_pool(be), x->shape[0] * x->shape[1], up_task, &j);
    return SD_OK;
}

/* ---- concat / slice ------------------------------------------------------------- */

static int64_t prod(const int64_t *s, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= s[i];
    return n;
}

sd_status sd_cpu_concat(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int dim) {
    size_t es = sd_dtype_size(out->dtype);
    int64_t outer = prod(a->shape, 0, dim), inner = prod(a->shape, dim + 1, a->ndim);
    size_t ca = (size_t)(a->shape[dim] * inner) * es, cb = (size_t)(b->shape[dim] * inner) * es;
    char *y = out->data;
    const char *pa = a->data, *pb = b->data;
    for (int64_t o = 0; o < outer; o++) {
        memcpy(y, pa + o * ca, ca);
        y += ca;
        memcpy(y, pb + o * cb, cb);
        y += cb;
    }
    return SD_OK;
}

sd_status sd_cpu_slice(sd_backend *be, sd_bt *out, const sd_bt *x, int dim, int64_t start) {
    size_t es = sd_dtype_size(out->dtype);
    int64_t outer = prod(x->shape, 0, dim), inner = prod(x->shape, dim + 1, x->ndim);
    size_t cin = (size_t)(x->shape[dim] * inner) * es, cout = (size_t)(out->shape[dim] * inner) * es;
    const char *src = (const char *)x->data + (size_t)(start * inner) * es;
    char *y = out->data;
    for (int64_t o = 0; o < outer; o++) memcpy(y + o * cout, src + o * cin, cout);
    return SD_OK;
}

/* ---- permute -------------------------------------------------------------------- */

typedef struct {
    const float *x;
    float *y;
    int ndim;
    int64_t oshape[SD_MAX_DIMS], ist[SD_MAX_DIMS]; /* input stride per output dim */
    int64_t inner, rows, rows_per_task;
} perm_job;

static void perm_task(void *ctx, int64_t t, int thread) {
    const perm_job *j = ctx;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->rows) r1 = j->rows;
    int64_t sl = j->ist[j->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = 0, rem = r;
        for (int d = j->ndim - 2; d >= 0; d--) {
            off += (rem % j->oshape[d]) * j->ist[d];
            rem /= j->oshape[d];
        }
        const float *x = j->x + off;
        float *y = j->y + r * j->inner;
        for (int64_t i = 0; i < j->inner; i++) y[i] = x[i * sl];
    }
}

/* Batched 2-D transpose: in [batch, A, B] -> out [batch, B, A], in square
 * tiles so both sides stay in cache (NCHW <-> NHWC in the UNet). */
#define TT 32

typedef struct {
    const float *x;
    float *y;
    int64_t A, B, ablocks;
} tr_job;

static void tr_task(void *ctx, int64_t t, int thread) {
    const tr_job *j = ctx;
    int64_t b = t / j->ablocks, i0 = (t % j->ablocks) * TT;
    int64_t i1 = i0 + TT < j->A ? i0 + TT : j->A;
    const float *x = j->x + b * j->A * j->B;
    float *y = j->y + b * j->A * j->B;
    for (int64_t j0 = 0; j0 < j->B; j0 += TT) {
        int64_t j1 = j0 + TT < j->B ? j0 + TT : j->B;
        for (int64_t jj = j0; jj < j1; jj++)
            for (int64_t ii = i0; ii < i1; ii++) y[jj * j->A + ii] = x[ii * j->B + jj];
    }
}

/* When perm keeps k leading dims and rotates the rest by s, the permute is
 * a batched transpose; fills the job and returns 1. */
static int as_transpose(const sd_bt *x, const int *perm, tr_job *j, int64_t *batch) {
    int nd = x->ndim, k = 0;
    while (k < nd && perm[k] == k) k++;
    int r = nd - k;
    if (r < 2) return 0;
    int s = perm[k] - k;
    if (s <= 0) return 0;
    for (int i = 0; i < r; i++)
        if (perm[k + i] != k + (i + s) % r) return 0;
    *batch = prod(x->shape, 0, k);
    j->A = prod(x->shape, k, k + s);
    j->B = prod(x->shape, k + s, nd);
    return 1;
}

sd_status sd_cpu_permute(sd_backend *be, sd_bt *out, const sd_bt *x, const int *perm) {
    if (x->ndim == 0 || sd_bt_numel(x) == 0) return sd_cpu_copy(be, out, x);
    tr_job tj = {sd_cpu_f32(x), sd_cpu_f32(out), 0, 0, 0};
    int64_t batch;
    if (as_transpose(x, perm, &tj, &batch) && tj.A > 1 && tj.B > 1) {
        tj.ablocks = (tj.A + TT - 1) / TT;
        sd_pool_run(sd_cpu_pool(be), batch * tj.ablocks, tr_task, &tj);
        return SD_OK;
    }
    perm_job j = {sd_cpu_f32(x), sd_cpu_f32(out), x->ndim, {0}, {0}, 0, 0, 0};
    int64_t st[SD_MAX_DIMS], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= x->shape[d];
    }
    for (int d = 0; d < x->ndim; d++) {
        j.oshape[d] = out->shape[d];
        j.ist[d] = st[perm[d]];
    }
    j.inner = out->shape[x->ndim - 1];
    j.rows = sd_bt_numel(out) / j.inner;
    j.rows_per_task = 1 + 65536 / j.inner;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.rows, j.rows_per_task), perm_task, &j);
    return SD_OK;
}

/* ---- embedding ------------------------------------------------------------------- */

sd_status sd_cpu_embedding(sd_backend *be, sd_bt *out, const sd_bt *table, const sd_bt *ids) {
    int64_t V = table->shape[0], C = table->shape[1], n = sd_bt_numel(ids);
    const char *tab = table->data;
    size_t row = (size_t)C * sd_dtype_size(table->dtype);
    int isa = sd_cpu_isa();
    float *y = sd_cpu_f32(out);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids->dtype == SD_I64 ? ((const int64_t *)ids->data)[i]
                                          : ((const int32_t *)ids->data)[i];
        if (id < 0 || id >= V)
            return sd_backend_fail(be, SD_ERR_INVALID,
                                   "embedding: id %lld at position %lld outside table of %lld rows",
                                   (long long)id, (long long)i, (long long)V);
        /* an F16/BF16 table (kept as stored) widens only the rows it reads */
        sd_cpu_widen(table->dtype, tab + (size_t)id * row, y + i * C, C, isa);
    }
    return SD_OK;
}

sd_status sd_cpu_copy(sd_backend *be, sd_bt *out, const sd_bt *x) {
    if (x->nbytes) memcpy(out->data, x->data, x->nbytes);
    return SD_OK;
}
