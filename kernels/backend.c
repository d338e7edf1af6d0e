/* backend.c - the backend-independent half of kernels/backend.h: creating
 * backends, the sticky error, sd_bt bookkeeping, and validation + result
 * allocation for every sd_op_* before it is dispatched through the vtable. */
#include "kernels/backend_impl.h"
#include "kernels/cpus.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <limits.h>
#include <malloc.h>
#endif

/* ---- backends and the sticky error ---------------------------------------- */

sd_status sd_backend_new(const char *name, int n_threads, sd_backend **out, sd_error *err) {
    *out = NULL;
    if (!name) return sd_error_set(err, SD_ERR_INVALID, "backend name is NULL");
    if (n_threads <= 0) {
        sd_status rc = sd_cpus_threads_default(&n_threads, err);
        if (rc != SD_OK) return rc;
    }
    const sd_backend_entry *entry = sd_backend_find(name);
    if (!entry) {
        if (strcmp(name, "cuda") == 0)
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "backend 'cuda' is not available in this build (only 'cpu')");
        return sd_error_set(err, SD_ERR_INVALID, "unknown backend '%s' (expected 'cpu' or 'cuda')",
                            name);
    }
    sd_backend *be = calloc(1, sizeof *be);
    if (!be) return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating backend");
    be->n_threads = n_threads;
    sd_error_clear(&be->err);
    sd_status rc = entry->init(be, n_threads, err);
    if (rc != SD_OK) {
        free(be);
        return rc;
    }
    *out = be;
    return SD_OK;
}

sd_status sd_backend_set_memory_limit(sd_backend *be, uint64_t bytes, sd_error *err) {
    if (!be->vt->set_memory_limit)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "the %s backend has no device memory to cap",
                            sd_backend_name(be));
    be->vt->set_memory_limit(be, bytes);
    return SD_OK;
}

void sd_backend_set_algo_store(sd_backend *be, const sd_algo_store_i *store) {
    if (!be) return;
    if (store && store->get && store->put) be->algo_store = *store;
    else memset(&be->algo_store, 0, sizeof be->algo_store);
}

const sd_algo_store_i *sd_backend_algo_store(const sd_backend *be) {
    return be && be->algo_store.get ? &be->algo_store : NULL;
}

void sd_backend_free(sd_backend *be) {
    if (!be) return;
    if (be->vt && be->vt->destroy) be->vt->destroy(be);
    free(be);
}

const char *sd_backend_name(const sd_backend *be) { return be ? be->vt->name : "(null)"; }
void sd_backend_tune_allocator(void) {
#ifdef __GLIBC__
    /* A fixed threshold also stops glibc's dynamic one from moving; blocks
     * above it (the largest activations) stay mmap'd and are returned. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

int sd_precision_parse(const char *name, sd_precision *out) {
    static const struct { const char *name; sd_precision p; } k[] = {
        {"f32", SD_PREC_F32}, {"bf16", SD_PREC_BF16}, {"f16", SD_PREC_F16}};
    for (size_t i = 0; name && i < sizeof k / sizeof k[0]; i++)
        if (strcmp(name, k[i].name) == 0) { *out = k[i].p; return 1; }
    return 0;
}

const char *sd_precision_name(sd_precision p) {
    return p == SD_PREC_BF16 ? "bf16" : p == SD_PREC_F16 ? "f16" : "f32";
}

void sd_backend_set_precision(sd_backend *be, sd_precision p) { if (be) be->precision = p; }
sd_precision sd_backend_precision(const sd_backend *be) { return be ? be->precision : SD_PREC_F32; }

int sd_backend_supports_precision(const sd_backend *be, sd_precision p) {
    if (!be) return 0;
    if (p == SD_PREC_F32) return 1;
    return be->vt->supports_precision ? be->vt->supports_precision(be, p) : 1;
}

int sd_backend_accepts_dtype(const sd_backend *be, sd_dtype dt) {
    if (!be) return 0;
    return dt == SD_F32 ||
           ((sd_dtype_is_narrow_float(dt) || sd_dtype_is_quantized(dt)) && be->vt->to_f32 != NULL);
}

const sd_error *sd_backend_error(const sd_backend *be) {
    return be && be->err.code != SD_OK ? &be->err : NULL;
}

void sd_backend_clear_error(sd_backend *be) { if (be) sd_error_clear(&be->err); }

sd_status sd_backend_take_error(sd_backend *be, sd_error *err) {
    if (!be) return SD_OK;
    sd_status rc = be->err.code;
    if (rc != SD_OK && err) *err = be->err;
    return rc;
}

sd_status sd_backend_fail(sd_backend *be, sd_status code, const char *fmt, ...) {
    if (!be || be->err.code != SD_OK) return code;
    va_list ap;
    va_start(ap, fmt);
    char msg[SD_ERR_MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sd_error_set(&be->err, code, "%s", msg);
    return code;
}

/* ---- tensors ---------------------------------------------------------------- */

static void shape_str(int ndim, const int64_t *s, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)s[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

#define SHAPE(t, buf) (shape_str((t)->ndim, (t)->shape, buf, sizeof buf), buf)

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* A header with dtype and shape set, no storage; NULL (error set) on bad shape. */
static sd_bt *bt_header(sd_backend *be, sd_dtype dtype, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > SD_MAX_DIMS || (unsigned)dtype >= SD_DTYPE_COUNT) {
        sd_backend_fail(be, SD_ERR_INVALID, "bad tensor: ndim %d, dtype %d", ndim, (int)dtype);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            sd_backend_fail(be, SD_ERR_INVALID, "negative dimension %lld", (long long)shape[i]);
            return NULL;
        }
    if (numel_of(ndim, shape) % sd_dtype_block(dtype) != 0) {
        sd_backend_fail(be, SD_ERR_INVALID, "bad tensor: %lld elements are not whole %s blocks",
                        (long long)numel_of(ndim, shape), sd_dtype_name(dtype));
        return NULL;
    }
    sd_bt *t = calloc(1, sizeof *t);
    if (!t) {
        sd_backend_fail(be, SD_ERR_NOMEM, "out of memory (tensor header)");
        return NULL;
    }
    t->be = be;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = sd_dtype_nbytes(dtype, numel_of(ndim, shape));
    return t;
}

/* New tensor (zeroed or not); NULL when an error is already set or
 * allocation fails. */
static sd_bt *bt_alloc_z(sd_backend *be, sd_dtype dtype, int ndim, const int64_t *shape, int zero) {
    if (be->err.code != SD_OK) return NULL;
    sd_bt *t = bt_header(be, dtype, ndim, shape);
    if (!t) return NULL;
    if (be->vt->alloc(be, t, zero) != SD_OK) {
        char b[128];
        sd_backend_fail(be, SD_ERR_NOMEM, "out of memory allocating tensor %s (%zu bytes)",
                        SHAPE(t, b), t->nbytes);
        free(t);
        return NULL;
    }
    return t;
}

/* Op results: the op writes every element. */
static sd_bt *bt_alloc(sd_backend *be, sd_dtype dtype, int ndim, const int64_t *shape) {
    return bt_alloc_z(be, dtype, ndim, shape, 0);
}

sd_bt *sd_bt_new(sd_backend *be, sd_dtype dtype, int ndim, const int64_t *shape) {
    if (!be) return NULL;
    return bt_alloc_z(be, dtype, ndim, shape, 1);
}

sd_bt *sd_bt_new4(sd_backend *be, sd_dtype dtype, int ndim, int64_t d0, int64_t d1,
                  int64_t d2, int64_t d3) {
    int64_t s[4] = {d0, d1, d2, d3};
    if (ndim > 4) {
        if (be) sd_backend_fail(be, SD_ERR_INVALID, "sd_bt_new4: ndim %d > 4", ndim);
        return NULL;
    }
    return sd_bt_new(be, dtype, ndim, s);
}

sd_bt *sd_bt_from_host(sd_backend *be, sd_tensor *t, sd_dtype dtype) {
    if (!be) return NULL;
    if (be->err.code != SD_OK) return NULL;
    if (!t) {
        sd_backend_fail(be, SD_ERR_INVALID, "sd_bt_from_host: NULL tensor");
        return NULL;
    }
    if (dtype != t->dtype && !(sd_dtype_is_float(dtype) && sd_dtype_is_float(t->dtype)) &&
        !(sd_dtype_is_float(dtype) && sd_dtype_is_quantized(t->dtype)) &&
        !(dtype == SD_I32 || dtype == SD_I64)) {
        sd_backend_fail(be, SD_ERR_UNSUPPORTED, "sd_bt_from_host: cannot convert %s to %s",
                        sd_dtype_name(t->dtype), sd_dtype_name(dtype));
        return NULL;
    }
    sd_bt *b = bt_header(be, dtype, t->ndim, t->shape);
    if (!b) return NULL;
    if (be->vt->upload(be, b, t) != SD_OK) {
        sd_backend_fail(be, SD_ERR_NOMEM, "out of memory uploading tensor (%zu bytes)", b->nbytes);
        free(b);
        return NULL;
    }
    return b;
}

sd_tensor *sd_bt_to_host(const sd_bt *t) {
    if (!t) return NULL;
    if ((sd_dtype_is_quantized(t->dtype) || t->scale != 0.0f) && t->be->vt->to_f32) {
        /* widened on the backend, with the tensor's own rounding or scale */
        sd_backend *be = t->be;
        sd_bt *w = bt_header(be, SD_F32, t->ndim, t->shape);
        if (w && be->vt->to_f32(be, w, t) != SD_OK) {
            free(w);
            w = NULL;
        }
        if (!w) {
            sd_backend_fail(be, SD_ERR_NOMEM, "out of memory widening a %s tensor", sd_dtype_name(t->dtype));
            return NULL;
        }
        sd_tensor *h = sd_bt_to_host(w);
        sd_bt_free(w);
        return h;
    }
    sd_tensor *h = t->be->vt->download(t);
    if (!h) sd_backend_fail(t->be, SD_ERR_NOMEM, "out of memory downloading tensor");
    return h;
}

void sd_bt_free(sd_bt *t) {
    if (!t) return;
    t->be->vt->release(t);
    free(t);
}

int64_t sd_bt_numel(const sd_bt *t) { return t ? numel_of(t->ndim, t->shape) : 0; }

sd_bt *sd_bt_view(sd_bt *t, int ndim, const int64_t *shape) {
    if (!t) return NULL;
    sd_backend *be = t->be;
    if (be->err.code != SD_OK) return NULL;
    if (ndim < 0 || ndim > SD_MAX_DIMS || numel_of(ndim, shape) != sd_bt_numel(t)) {
        char a[128], b[128];
        shape_str(ndim < 0 || ndim > SD_MAX_DIMS ? 0 : ndim, shape, b, sizeof b);
        sd_backend_fail(be, SD_ERR_INVALID, "sd_bt_view: cannot view %s as %s", SHAPE(t, a), b);
        return NULL;
    }
    sd_bt *v = bt_header(be, t->dtype, ndim, shape);
    if (!v) return NULL;
    v->dequant = t->dequant;
    v->scale = t->scale;
    if (be->vt->share(v, t) != SD_OK) {
        sd_backend_fail(be, SD_ERR_NOMEM, "out of memory (view)");
        free(v);
        return NULL;
    }
    return v;
}

/* ---- op validation helpers --------------------------------------------------- */

/* The backend of an op, or NULL when the op must return NULL at once: a NULL
 * input (an earlier op failed), or an error already set. n inputs, any of
 * which may be optional (opt bitmask: bit i set = input i may be NULL). */
static sd_backend *op_begin(const char *op, int n, const sd_bt *const *in, unsigned opt) {
    sd_backend *be = NULL;
    for (int i = 0; i < n; i++)
        if (in[i]) { be = in[i]->be; break; }
    if (!be) return NULL;
    if (be->err.code != SD_OK) return NULL;
    for (int i = 0; i < n; i++) {
        if (!in[i]) {
            if (opt & (1u << i)) continue;
            sd_backend_fail(be, SD_ERR_INVALID, "%s: input %d is NULL", op, i);
            return NULL;
        }
        if (in[i]->be != be) {
            sd_backend_fail(be, SD_ERR_INVALID, "%s: inputs live on different backends", op);
            return NULL;
        }
        int narrow = sd_dtype_is_narrow_float(in[i]->dtype) || sd_dtype_is_quantized(in[i]->dtype);
        if (in[i]->dtype != SD_F32 && !(narrow && be->vt->to_f32)) {
            sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                            "%s: input %d is %s; ops take F32 (upload weights with dtype F32)", op,
                            i, sd_dtype_name(in[i]->dtype));
            return NULL;
        }
    }
    return be;
}

/* F32 temporaries standing in for an op's F16/BF16/fp8 inputs (weights kept in
 * their stored dtype): made just before the kernel runs, freed right after,
 * so at most one layer's weights are widened at any time. */
typedef struct widened {
    sd_bt *tmp[4];
} widened;

/* Replaces every narrow-float or quantized *vars[i] (only the quantized
 * and scaled fp8 ones when quant_only) by a widened F32 temporary recorded
 * in wd. Returns 0
 * (error set, nothing left allocated) on failure. */
static int widen_some(sd_backend *be, widened *wd, int n, sd_bt **const *vars, int quant_only) {
    memset(wd, 0, sizeof *wd);
    for (int i = 0; i < n; i++) {
        sd_bt *x = *vars[i];
        if (!x || x->dtype == SD_F32 || (quant_only && !sd_dtype_is_quantized(x->dtype) && x->scale == 0.0f))
            continue;
        sd_bt *t = bt_header(be, SD_F32, x->ndim, x->shape);
        if (t && be->vt->to_f32(be, t, x) != SD_OK) {
            char b[128];
            sd_backend_fail(be, SD_ERR_NOMEM, "out of memory widening a %s input %s to F32",
                            sd_dtype_name(x->dtype), SHAPE(x, b));
            free(t); /* no storage attached */
            t = NULL;
        }
        if (!t) {
            for (int k = 0; k < i; k++) sd_bt_free(wd->tmp[k]);
            return 0;
        }
        wd->tmp[i] = t;
        *vars[i] = t;
    }
    return 1;
}

static int widen(sd_backend *be, widened *wd, int n, sd_bt **const *vars) {
    return widen_some(be, wd, n, vars, 0);
}

static sd_bt *op_finish(sd_backend *be, sd_bt *out, sd_status rc, widened *wd) {
    for (int i = 0; wd && i < 4; i++) sd_bt_free(wd->tmp[i]);
    if (rc != SD_OK) {
        sd_backend_fail(be, rc, "op failed");
        sd_bt_free(out);
        return NULL;
    }
    return out;
}

/* widen() failed after out was allocated. */
static sd_bt *op_drop(sd_bt *out) {
    sd_bt_free(out);
    return NULL;
}

static int bad(sd_backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(sd_backend *be, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sd_backend_fail(be, SD_ERR_INVALID, "%s", msg);
    return 1;
}

/* ---- ops ---------------------------------------------------------------------- */

sd_bt *sd_op_linear(sd_bt *x, sd_bt *w, sd_bt *b) {
    const sd_bt *in[3] = {x, w, b};
    sd_backend *be = op_begin("linear", 3, in, 4u);
    if (!be) return NULL;
    char s1[128], s2[128];
    if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        bad(be, "linear: x %s, w %s%s", SHAPE(x, s1), SHAPE(w, s2),
            b ? " and bias do not match" : " do not match");
        return NULL;
    }
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, shape);
    if (!out) return NULL;
    widened wd;
    if (be->precision != SD_PREC_F32 && be->vt->linear_lp) {
        if (!widen_some(be, &wd, 3, (sd_bt **const[]){&x, &w, &b}, 1)) return op_drop(out);
        return op_finish(be, out, be->vt->linear_lp(be, out, x, w, b), &wd);
    }
    if (!widen(be, &wd, 3, (sd_bt **const[]){&x, &w, &b})) return op_drop(out);
    return op_finish(be, out, be->vt->linear(be, out, x, w, b), &wd);
}

sd_bt *sd_op_matmul(sd_bt *a, sd_bt *b, int trans_b, float alpha) {
    const sd_bt *in[2] = {a, b};
    sd_backend *be = op_begin("matmul", 2, in, 0);
    if (!be) return NULL;
    char s1[128], s2[128];
    if (a->ndim < 2 || a->ndim > 3 || b->ndim < 2 || b->ndim > 3) {
        bad(be, "matmul: a %s, b %s must be 2-D or 3-D", SHAPE(a, s1), SHAPE(b, s2));
        return NULL;
    }
    int64_t Ba = a->ndim == 3 ? a->shape[0] : 1, Bb = b->ndim == 3 ? b->shape[0] : 1;
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t Kb = trans_b ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    int64_t N = trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (K != Kb || (Bb != Ba && Bb != 1)) {
        bad(be, "matmul: a %s, b %s (trans_b %d) do not match", SHAPE(a, s1), SHAPE(b, s2),
            trans_b);
        return NULL;
    }
    int64_t shape[3] = {Ba, M, N};
    sd_bt *out = a->ndim == 3 ? bt_alloc(be, SD_F32, 3, shape) : bt_alloc(be, SD_F32, 2, shape + 1);
    if (!out) return NULL;
    widened wd;
    if (be->precision != SD_PREC_F32 && be->vt->matmul_lp) {
        if (!widen_some(be, &wd, 2, (sd_bt **const[]){&a, &b}, 1)) return op_drop(out);
        return op_finish(be, out, be->vt->matmul_lp(be, out, a, b, trans_b, alpha), &wd);
    }
    if (!widen(be, &wd, 2, (sd_bt **const[]){&a, &b})) return op_drop(out);
    return op_finish(be, out, be->vt->matmul(be, out, a, b, trans_b, alpha), &wd);
}

sd_bt *sd_op_conv2d(sd_bt *x, sd_bt *w, sd_bt *b, int stride, int pad_h, int pad_w) {
    const sd_bt *in[3] = {x, w, b};
    sd_backend *be = op_begin("conv2d", 3, in, 4u);
    if (!be) return NULL;
    char s1[128], s2[128];
    if (x->ndim != 4 || w->ndim != 4 || w->shape[1] != x->shape[1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        bad(be, "conv2d: x %s, w %s%s do not match", SHAPE(x, s1), SHAPE(w, s2),
            b ? ", bias" : "");
        return NULL;
    }
    if (stride < 1 || pad_h < 0 || pad_w < 0) {
        bad(be, "conv2d: bad stride %d / padding %d,%d", stride, pad_h, pad_w);
        return NULL;
    }
    int64_t Hp = x->shape[2] + 2 * pad_h, Wp = x->shape[3] + 2 * pad_w;
    if (Hp < w->shape[2] || Wp < w->shape[3]) {
        bad(be, "conv2d: input %s (padding %d,%d) smaller than kernel %s", SHAPE(x, s1), pad_h,
            pad_w, SHAPE(w, s2));
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], w->shape[0], (Hp - w->shape[2]) / stride + 1,
                        (Wp - w->shape[3]) / stride + 1};
    sd_bt *out = bt_alloc(be, SD_F32, 4, shape);
    if (!out) return NULL;
    widened wd;
    if (be->precision != SD_PREC_F32 && be->vt->conv2d_lp) {
        if (!widen_some(be, &wd, 3, (sd_bt **const[]){&x, &w, &b}, 1)) return op_drop(out);
        return op_finish(be, out, be->vt->conv2d_lp(be, out, x, w, b, stride, pad_h, pad_w), &wd);
    }
    if (!widen(be, &wd, 3, (sd_bt **const[]){&x, &w, &b})) return op_drop(out);
    return op_finish(be, out, be->vt->conv2d(be, out, x, w, b, stride, pad_h, pad_w), &wd);
}

sd_bt *sd_op_pad2d(sd_bt *x, int left, int right, int top, int bottom) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("pad2d", 1, in, 0);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim != 4 || left < 0 || right < 0 || top < 0 || bottom < 0) {
        bad(be, "pad2d: x %s must be NCHW and padding (%d,%d,%d,%d) non-negative", SHAPE(x, s1),
            left, right, top, bottom);
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], x->shape[1], x->shape[2] + top + bottom,
                        x->shape[3] + left + right};
    sd_bt *out = bt_alloc(be, SD_F32, 4, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->pad2d(be, out, x, left, top), &wd);
}

sd_bt *sd_op_group_norm(sd_bt *x, int groups, sd_bt *gamma, sd_bt *beta, float eps, int silu) {
    const sd_bt *in[3] = {x, gamma, beta};
    sd_backend *be = op_begin("group_norm", 3, in, 6u);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim < 2 || groups < 1 || x->shape[1] % groups != 0) {
        bad(be, "group_norm: x %s cannot be split into %d groups", SHAPE(x, s1), groups);
        return NULL;
    }
    if ((gamma && sd_bt_numel(gamma) != x->shape[1]) || (beta && sd_bt_numel(beta) != x->shape[1])) {
        bad(be, "group_norm: gamma/beta must have %lld elements", (long long)x->shape[1]);
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 3, (sd_bt **const[]){&x, &gamma, &beta})) return op_drop(out);
    return op_finish(be, out, be->vt->group_norm(be, out, x, groups, gamma, beta, eps, silu), &wd);
}

sd_bt *sd_op_layer_norm(sd_bt *x, sd_bt *gamma, sd_bt *beta, float eps) {
    const sd_bt *in[3] = {x, gamma, beta};
    sd_backend *be = op_begin("layer_norm", 3, in, 6u);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim < 1) {
        bad(be, "layer_norm: x is a scalar");
        return NULL;
    }
    int64_t C = x->shape[x->ndim - 1];
    if ((gamma && sd_bt_numel(gamma) != C) || (beta && sd_bt_numel(beta) != C)) {
        bad(be, "layer_norm: x %s: gamma/beta must have %lld elements", SHAPE(x, s1),
            (long long)C);
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 3, (sd_bt **const[]){&x, &gamma, &beta})) return op_drop(out);
    return op_finish(be, out, be->vt->layer_norm(be, out, x, gamma, beta, eps), &wd);
}

sd_bt *sd_op_attention(sd_bt *q, sd_bt *k, sd_bt *v, int heads, int causal) {
    sd_attn_opts o = {0};
    o.causal = causal;
    return sd_op_attention_ex(q, k, v, heads, &o);
}

sd_bt *sd_op_attention_ex(sd_bt *q, sd_bt *k, sd_bt *v, int heads, const sd_attn_opts *opts) {
    sd_attn_opts o = {0};
    if (opts) o = *opts;
    sd_bt *bias = o.bias;
    const sd_bt *in[4] = {q, k, v, bias};
    sd_backend *be = op_begin("attention", 4, in, 8u);
    if (!be) return NULL;
    char s1[128], s2[128], s3[128];
    int kvh = o.kv_heads ? o.kv_heads : heads;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || heads < 1 || kvh < 1 ||
        heads % kvh != 0 || q->shape[0] != k->shape[0] || k->shape[0] != v->shape[0] ||
        k->shape[1] != v->shape[1] || k->shape[2] != v->shape[2] || q->shape[2] % heads != 0 ||
        k->shape[2] * heads != q->shape[2] * kvh) {
        bad(be, "attention: q %s, k %s, v %s with %d heads (%d for k/v) do not match",
            SHAPE(q, s1), SHAPE(k, s2), SHAPE(v, s3), heads, kvh);
        return NULL;
    }
    int64_t N = q->shape[0], Lq = q->shape[1], Lk = k->shape[1];
    sd_attn_args a = {heads, kvh, o.causal != 0, o.scale, NULL, {0, 0, 0}};
    if (a.scale == 0.0f) a.scale = (float)(1.0 / sqrt((double)(q->shape[2] / heads)));
    if (bias) {
        const int64_t *b = bias->shape;
        if (bias->ndim != 4 || (b[0] != 1 && b[0] != N) || (b[1] != 1 && b[1] != heads) ||
            (b[2] != 1 && b[2] != Lq) || b[3] != Lk) {
            bad(be, "attention: bias %s does not broadcast to [%lld, %d, %lld, %lld]",
                SHAPE(bias, s1), (long long)N, heads, (long long)Lq, (long long)Lk);
            return NULL;
        }
        a.bias_stride[2] = b[2] == 1 ? 0 : Lk;
        a.bias_stride[1] = b[1] == 1 ? 0 : b[2] * Lk;
        a.bias_stride[0] = b[0] == 1 ? 0 : b[1] * b[2] * Lk;
    }
    sd_bt *out = bt_alloc(be, SD_F32, 3, q->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 4, (sd_bt **const[]){&q, &k, &v, &bias})) return op_drop(out);
    a.bias = bias;
    return op_finish(be, out, be->vt->attention(be, out, q, k, v, &a), &wd);
}

sd_bt *sd_op_rms_norm(sd_bt *x, sd_bt *gamma, float eps) {
    const sd_bt *in[2] = {x, gamma};
    sd_backend *be = op_begin("rms_norm", 2, in, 2u);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim < 1) {
        bad(be, "rms_norm: x is a scalar");
        return NULL;
    }
    int64_t C = x->shape[x->ndim - 1];
    if (gamma && sd_bt_numel(gamma) != C) {
        bad(be, "rms_norm: x %s: gamma must have %lld elements", SHAPE(x, s1), (long long)C);
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 2, (sd_bt **const[]){&x, &gamma})) return op_drop(out);
    return op_finish(be, out, be->vt->rms_norm(be, out, x, gamma, eps), &wd);
}

sd_bt *sd_op_rope(sd_bt *x, sd_bt *rot, int heads, int interleaved) {
    const sd_bt *in[2] = {x, rot};
    sd_backend *be = op_begin("rope", 2, in, 0);
    if (!be) return NULL;
    char s1[128], s2[128];
    int ok = x->ndim == 3 && heads >= 1 && x->shape[2] % heads == 0 &&
             (x->shape[2] / heads) % 2 == 0 && (rot->ndim == 3 || rot->ndim == 4);
    if (ok) {
        int o = rot->ndim - 3; /* rot's [L, D/2, 2] start */
        ok = (o == 0 || rot->shape[0] == x->shape[0]) && rot->shape[o] == x->shape[1] &&
             rot->shape[o + 1] * 2 == x->shape[2] / heads && rot->shape[o + 2] == 2;
    }
    if (!ok) {
        bad(be, "rope: x %s with %d heads and rot %s do not match ([N, L, H*D] with even D, "
                "[L, D/2, 2] or [N, L, D/2, 2])",
            SHAPE(x, s1), heads, SHAPE(rot, s2));
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, 3, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 2, (sd_bt **const[]){&x, &rot})) return op_drop(out);
    return op_finish(be, out, be->vt->rope(be, out, x, rot, heads, interleaved != 0), &wd);
}

/* Strides of b broadcast to a's shape: numpy rules (b right-aligned, each dim
 * equal or 1), or b = [C] against a = [N, C, ...] (channel broadcast). */
static int broadcast_strides(const sd_bt *a, const sd_bt *b, int64_t *st) {
    int off = a->ndim - b->ndim;
    if (off >= 0) {
        int ok = 1;
        int64_t s = 1;
        for (int i = a->ndim - 1; i >= 0; i--) {
            int j = i - off;
            if (j < 0) { st[i] = 0; continue; }
            if (b->shape[j] == a->shape[i]) st[i] = b->shape[j] == 1 ? 0 : s;
            else if (b->shape[j] == 1) st[i] = 0;
            else { ok = 0; break; }
            s *= b->shape[j];
        }
        if (ok) return 1;
    }
    if (b->ndim == 1 && a->ndim >= 3 && a->shape[1] == b->shape[0]) {
        for (int i = 0; i < a->ndim; i++) st[i] = i == 1 ? 1 : 0;
        return 1;
    }
    return 0;
}

static sd_bt *binary(const char *name, sd_bt *a, sd_bt *b, int op) {
    const sd_bt *in[2] = {a, b};
    sd_backend *be = op_begin(name, 2, in, 0);
    if (!be) return NULL;
    int64_t st[SD_MAX_DIMS];
    char s1[128], s2[128];
    if (!broadcast_strides(a, b, st)) {
        bad(be, "%s: cannot broadcast %s to %s", name, SHAPE(b, s2), SHAPE(a, s1));
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, a->ndim, a->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 2, (sd_bt **const[]){&a, &b})) return op_drop(out);
    return op_finish(be, out, be->vt->binary(be, out, a, b, st, op), &wd);
}

sd_bt *sd_op_add(sd_bt *a, sd_bt *b) { return binary("add", a, b, 0); }
sd_bt *sd_op_mul(sd_bt *a, sd_bt *b) { return binary("mul", a, b, 1); }

sd_bt *sd_op_add_channel(sd_bt *x, sd_bt *b) {
    const sd_bt *in[2] = {x, b};
    sd_backend *be = op_begin("add_channel", 2, in, 0);
    if (!be) return NULL;
    char s1[128], s2[128];
    if (x->ndim < 2 || b->ndim != 2 || b->shape[0] != x->shape[0] || b->shape[1] != x->shape[1]) {
        bad(be, "add_channel: x %s, b %s (want [N, C])", SHAPE(x, s1), SHAPE(b, s2));
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 2, (sd_bt **const[]){&x, &b})) return op_drop(out);
    return op_finish(be, out, be->vt->add_channel(be, out, x, b), &wd);
}

static sd_bt *unary(const char *name, sd_bt *x, int op, float s) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin(name, 1, in, 0);
    if (!be) return NULL;
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->unary(be, out, x, op, s), &wd);
}

sd_bt *sd_op_scale(sd_bt *x, float s) { return unary("scale", x, SD_UNARY_SCALE, s); }
sd_bt *sd_op_silu(sd_bt *x) { return unary("silu", x, SD_UNARY_SILU, 0); }
sd_bt *sd_op_gelu(sd_bt *x) { return unary("gelu", x, SD_UNARY_GELU, 0); }
sd_bt *sd_op_gelu_tanh(sd_bt *x) { return unary("gelu_tanh", x, SD_UNARY_GELU_TANH, 0); }
sd_bt *sd_op_quick_gelu(sd_bt *x) { return unary("quick_gelu", x, SD_UNARY_QUICK_GELU, 0); }
sd_bt *sd_op_tanh(sd_bt *x) { return unary("tanh", x, SD_UNARY_TANH, 0); }
sd_bt *sd_op_relu(sd_bt *x) { return unary("relu", x, SD_UNARY_RELU, 0); }
sd_bt *sd_op_leaky_relu(sd_bt *x, float slope) {
    return unary("leaky_relu", x, SD_UNARY_LEAKY_RELU, slope);
}
sd_bt *sd_op_elu(sd_bt *x, float alpha) { return unary("elu", x, SD_UNARY_ELU, alpha); }
sd_bt *sd_op_hardswish(sd_bt *x) { return unary("hardswish", x, SD_UNARY_HARDSWISH, 0); }
sd_bt *sd_op_sigmoid(sd_bt *x) { return unary("sigmoid", x, SD_UNARY_SIGMOID, 0); }
sd_bt *sd_op_softsign(sd_bt *x) { return unary("softsign", x, SD_UNARY_SOFTSIGN, 0); }
sd_bt *sd_op_mish(sd_bt *x) { return unary("mish", x, SD_UNARY_MISH, 0); }

sd_bt *sd_op_geglu(sd_bt *x) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("geglu", 1, in, 0);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim < 1 || x->shape[x->ndim - 1] % 2 != 0) {
        bad(be, "geglu: last dim of %s must be even", SHAPE(x, s1));
        return NULL;
    }
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] /= 2;
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->geglu(be, out, x), &wd);
}

sd_bt *sd_op_softmax(sd_bt *x) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("softmax", 1, in, 0);
    if (!be) return NULL;
    if (x->ndim < 1) {
        bad(be, "softmax: x is a scalar");
        return NULL;
    }
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->softmax(be, out, x), &wd);
}

sd_bt *sd_op_upsample_nearest2x(sd_bt *x) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("upsample_nearest2x", 1, in, 0);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim != 4) {
        bad(be, "upsample_nearest2x: x %s is not NCHW", SHAPE(x, s1));
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], x->shape[1], x->shape[2] * 2, x->shape[3] * 2};
    sd_bt *out = bt_alloc(be, SD_F32, 4, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->upsample2x(be, out, x), &wd);
}

sd_bt *sd_op_concat(sd_bt *a, sd_bt *b, int dim) {
    const sd_bt *in[2] = {a, b};
    sd_backend *be = op_begin("concat", 2, in, 0);
    if (!be) return NULL;
    char s1[128], s2[128];
    int ok = a->ndim == b->ndim && dim >= 0 && dim < a->ndim;
    for (int i = 0; ok && i < a->ndim; i++) ok = i == dim || a->shape[i] == b->shape[i];
    if (!ok) {
        bad(be, "concat: %s and %s along dim %d", SHAPE(a, s1), SHAPE(b, s2), dim);
        return NULL;
    }
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[dim] += b->shape[dim];
    sd_bt *out = bt_alloc(be, SD_F32, a->ndim, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 2, (sd_bt **const[]){&a, &b})) return op_drop(out);
    return op_finish(be, out, be->vt->concat(be, out, a, b, dim), &wd);
}

sd_bt *sd_op_slice(sd_bt *x, int dim, int64_t start, int64_t end) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("slice", 1, in, 0);
    if (!be) return NULL;
    char s1[128];
    if (dim < 0 || dim >= x->ndim || start < 0 || end < start || end > x->shape[dim]) {
        bad(be, "slice: [%lld, %lld) along dim %d of %s", (long long)start, (long long)end, dim,
            SHAPE(x, s1));
        return NULL;
    }
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[dim] = end - start;
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->slice(be, out, x, dim, start), &wd);
}

sd_bt *sd_op_permute(sd_bt *x, const int *perm) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("permute", 1, in, 0);
    if (!be) return NULL;
    int seen[SD_MAX_DIMS] = {0};
    int64_t shape[SD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        if (!perm || perm[i] < 0 || perm[i] >= x->ndim || seen[perm[i]]) {
            bad(be, "permute: not a permutation of %d dims", x->ndim);
            return NULL;
        }
        seen[perm[i]] = 1;
        shape[i] = x->shape[perm[i]];
    }
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->permute(be, out, x, perm), &wd);
}

sd_bt *sd_op_embedding(sd_bt *table, sd_bt *ids) {
    if (!table || !ids) {
        if (table || ids) {
            sd_backend *be = (table ? table : ids)->be;
            sd_backend_fail(be, SD_ERR_INVALID, "embedding: NULL input");
        }
        return NULL;
    }
    sd_backend *be = table->be;
    if (be->err.code != SD_OK) return NULL;
    char s1[128], s2[128];
    int table_ok = table->dtype == SD_F32 ||
                   ((sd_dtype_is_narrow_float(table->dtype) || sd_dtype_is_quantized(table->dtype)) && be->vt->to_f32);
    if (ids->be != be || !table_ok || table->ndim != 2 ||
        (ids->dtype != SD_I32 && ids->dtype != SD_I64) || ids->ndim < 1 ||
        ids->ndim >= SD_MAX_DIMS) {
        bad(be, "embedding: table %s %s (want F32 [V, C]), ids %s %s (want I32/I64)",
            SHAPE(table, s1), sd_dtype_name(table->dtype), SHAPE(ids, s2),
            sd_dtype_name(ids->dtype));
        return NULL;
    }
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof shape);
    shape[ids->ndim] = table->shape[1];
    sd_bt *out = bt_alloc(be, SD_F32, ids->ndim + 1, shape);
    if (!out) return NULL;
    /* a quantized table is widened whole, as ComfyUI-GGUF's Embedding does
     * (a scaled fp8 one too: the gather kernels know no scale) */
    widened wd;
    if (!widen_some(be, &wd, 1, (sd_bt **const[]){&table}, 1)) return op_drop(out);
    return op_finish(be, out, be->vt->embedding(be, out, table, ids), &wd);
}

sd_bt *sd_op_copy(sd_bt *x) {
    if (!x) return NULL;
    sd_backend *be = x->be;
    if (be->err.code != SD_OK) return NULL;
    sd_bt *out = bt_alloc(be, x->dtype, x->ndim, x->shape);
    if (!out) return NULL;
    out->dequant = x->dequant;
    out->scale = x->scale;
    return op_finish(be, out, be->vt->copy(be, out, x), NULL);
}

/* ---- ops of the image-to-image models ------------------------------------------ */

/* These slots came after the first backends; one that lacks a slot says so
 * instead of crashing. */
static int has_slot(sd_backend *be, int present, const char *op) {
    if (present) return 1;
    sd_backend_fail(be, SD_ERR_UNSUPPORTED, "%s: not implemented by the %s backend", op,
                    be->vt->name);
    return 0;
}

sd_bt *sd_op_prelu(sd_bt *x, sd_bt *w) {
    const sd_bt *in[2] = {x, w};
    sd_backend *be = op_begin("prelu", 2, in, 0);
    if (!be) return NULL;
    char s1[128], s2[128];
    if (x->ndim < 2 || (sd_bt_numel(w) != x->shape[1] && sd_bt_numel(w) != 1)) {
        bad(be, "prelu: x %s, w %s (want x [N, C, ...] and w [C] or [1])", SHAPE(x, s1),
            SHAPE(w, s2));
        return NULL;
    }
    if (!has_slot(be, be->vt->prelu != NULL, "prelu")) return NULL;
    sd_bt *out = bt_alloc(be, SD_F32, x->ndim, x->shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 2, (sd_bt **const[]){&x, &w})) return op_drop(out);
    return op_finish(be, out, be->vt->prelu(be, out, x, w), &wd);
}

static sd_bt *pixel_shuffle(const char *name, sd_bt *x, int r, int inverse) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin(name, 1, in, 0);
    if (!be) return NULL;
    char s1[128];
    int64_t rr = (int64_t)r * r;
    if (x->ndim != 4 || r < 1 ||
        (!inverse && x->shape[1] % rr != 0) ||
        (inverse && (x->shape[2] % r != 0 || x->shape[3] % r != 0))) {
        bad(be, "%s: x %s is not NCHW with %s divisible by %d", name, SHAPE(x, s1),
            inverse ? "H and W" : "C by r*r, r =", r);
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], x->shape[1] / rr, x->shape[2] * r, x->shape[3] * r};
    if (inverse) {
        shape[1] = x->shape[1] * rr;
        shape[2] = x->shape[2] / r;
        shape[3] = x->shape[3] / r;
    }
    if (!has_slot(be, be->vt->pixel_shuffle != NULL, name)) return NULL;
    sd_bt *out = bt_alloc(be, SD_F32, 4, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->pixel_shuffle(be, out, x, r, inverse), &wd);
}

sd_bt *sd_op_pixel_shuffle(sd_bt *x, int r) { return pixel_shuffle("pixel_shuffle", x, r, 0); }
sd_bt *sd_op_pixel_unshuffle(sd_bt *x, int r) { return pixel_shuffle("pixel_unshuffle", x, r, 1); }

sd_bt *sd_op_upsample_nearest(sd_bt *x, int factor) {
    const sd_bt *in[1] = {x};
    sd_backend *be = op_begin("upsample_nearest", 1, in, 0);
    if (!be) return NULL;
    char s1[128];
    if (x->ndim != 4 || factor < 1) {
        bad(be, "upsample_nearest: x %s is not NCHW or factor %d < 1", SHAPE(x, s1), factor);
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], x->shape[1], x->shape[2] * factor, x->shape[3] * factor};
    if (!has_slot(be, be->vt->upsample_nearest != NULL, "upsample_nearest")) return NULL;
    sd_bt *out = bt_alloc(be, SD_F32, 4, shape);
    if (!out) return NULL;
    widened wd;
    if (!widen(be, &wd, 1, (sd_bt **const[]){&x})) return op_drop(out);
    return op_finish(be, out, be->vt->upsample_nearest(be, out, x, factor), &wd);
}
