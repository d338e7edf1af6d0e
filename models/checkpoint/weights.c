#include "models/checkpoint/weights.h"

#include "models/checkpoint/fp8_scaled.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void sd_weights_init(sd_weights *w, sd_backend *be, sd_st_file *f, const char *prefix) {
    memset(w, 0, sizeof *w);
    w->be = be;
    w->file = f;
    w->dtype = SD_F32;
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix ? prefix : "");
}

const char *sd_weights_key(const sd_weights *w, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s%s", w->prefix, name);
    return buf;
}

int sd_weights_has(const sd_weights *w, const char *name) {
    char key[512];
    return sd_st_find(w->file, sd_weights_key(w, name, key, sizeof key)) != NULL;
}

int sd_weights_shape(const sd_weights *w, const char *name, int64_t shape[SD_MAX_DIMS]) {
    char key[512];
    const sd_st_entry *e = sd_st_find(w->file, sd_weights_key(w, name, key, sizeof key));
    if (!e) return -1;
    for (int i = 0; i < e->ndim; i++) shape[i] = e->shape[i];
    return e->ndim;
}

static void shape_str(int ndim, const int64_t *s, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)s[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

/* A scaled fp8 layer's weight (fp8_scaled.h): kept fp8 (converted to its
 * format's type when stored otherwise, as ComfyUI's .to(storage_t)) with
 * its scale on the backend tensor, widened with it per op; whatever
 * w->dtype asks, as ComfyUI keeps such layers quantized. A backend that
 * cannot widen fp8 gets float(q) * scale in F32 once. Takes t. */
static sd_bt *get_scaled(const sd_weights *w, const char *key, sd_tensor *t, const sd_fp8_layer *q,
                         sd_error *err) {
    if (t->dtype != q->dtype) {
        sd_tensor *c = sd_tensor_to_dtype(t, q->dtype);
        sd_tensor_unref(t);
        if (!c) goto nomem;
        t = c;
    }
    sd_bt *b;
    if (sd_backend_accepts_dtype(w->be, q->dtype)) {
        b = sd_bt_from_host(w->be, t, q->dtype);
        if (b) b->scale = q->scale;
    } else {
        sd_tensor *f = sd_tensor_to_dtype(t, SD_F32);
        sd_tensor_unref(t);
        if (!f) goto nomem;
        t = f;
        float *p = t->data;
        for (int64_t i = 0, n = sd_tensor_numel(t); i < n; i++) p[i] *= q->scale;
        b = sd_bt_from_host(w->be, t, SD_F32);
    }
    sd_tensor_unref(t);
    if (!b) sd_backend_take_error(w->be, err);
    return b;
nomem:
    sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory converting it", sd_st_path(w->file), key);
    return NULL;
}

sd_bt *sd_weights_get(const sd_weights *w, const char *name, int ndim, const int64_t *shape,
                      sd_error *err) {
    char key[512];
    sd_weights_key(w, name, key, sizeof key);
    const sd_st_entry *e = sd_st_find(w->file, key);
    if (!e) {
        sd_error_set(err, SD_ERR_NOT_FOUND, "%s: missing tensor '%s'", sd_st_path(w->file), key);
        return NULL;
    }
    if (shape) {
        int same = e->ndim == ndim;
        for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
        if (!same) {
            char want[128], got[128];
            shape_str(ndim, shape, want, sizeof want);
            shape_str(e->ndim, e->shape, got, sizeof got);
            sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s",
                         sd_st_path(w->file), key, got, want);
            return NULL;
        }
    }
    sd_tensor *t = sd_st_tensor(w->file, key, err);
    if (!t) return NULL;
    if (!sd_dtype_all_finite(t->dtype, t->data, (size_t)sd_tensor_numel(t))) {
        sd_tensor_unref(t);
        sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s' contains NaN or Inf (corrupted checkpoint)",
                     sd_st_path(w->file), key);
        return NULL;
    }
    sd_fp8_layer q;
    if (sd_fp8_layer_of(w->file, w->prefix, key, &q, err)) {
        sd_tensor_unref(t);
        return NULL;
    }
    if (q.scaled) {
        sd_bt *b = get_scaled(w, key, t, &q, err);
        if (b && sd_st_check(w->file, err)) {
            sd_bt_free(b);
            return NULL;
        }
        return b;
    }
    /* Keep narrow weights (F16, BF16, fp8) as stored (mapped, not copied)
     * when the backend computes with them directly: an F16 SD1.5 checkpoint
     * then costs its file size in RAM, not twice that, and an fp8 one a
     * quarter of its F32 size. */
    sd_dtype up = w->dtype;
    if (up == SD_F32 && (sd_dtype_is_narrow_float(t->dtype) || sd_dtype_is_quantized(t->dtype)) &&
        sd_backend_accepts_dtype(w->be, t->dtype))
        up = t->dtype;
    if (sd_dtype_is_quantized(t->dtype) && up == SD_F32) {
        /* a backend that cannot widen it per op gets it widened here, once,
         * with the requested rounding */
        sd_tensor *f = sd_tensor_new(SD_F32, t->ndim, t->shape);
        if (f) sd_quant_dequant(t->dtype, w->dequant, t->data, f->data, sd_tensor_numel(t));
        sd_tensor_unref(t);
        if (!f) {
            sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory widening it", sd_st_path(w->file), key);
            return NULL;
        }
        t = f;
    }
    sd_bt *b = sd_bt_from_host(w->be, t, up);
    sd_tensor_unref(t);
    if (b) b->dequant = w->dequant;
    if (!b) sd_backend_take_error(w->be, err);
    /* After the bytes were read (finite check, conversion, upload): a file
     * truncated or rewritten meanwhile gave zeros or mixed bytes, not a
     * signal (formats/mapguard.h); refuse what was read. */
    if (b && sd_st_check(w->file, err)) {
        sd_bt_free(b);
        return NULL;
    }
    return b;
}

sd_bt *sd_weights_getf(const sd_weights *w, sd_error *err, int ndim, const int64_t *shape,
                       const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return sd_weights_get(w, name, ndim, shape, err);
}
