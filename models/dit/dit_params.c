/* dit_params.c - the DiT loaders' weight table and fetches (dit_params.h). */
#include "models/dit/dit_params.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sd_dit_params_add(sd_dit_params *t, const char *key, sd_bt **slot) {
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 256;
        sd_dit_param *p = realloc(t->p, (size_t)cap * sizeof *p);
        if (!p) return 0;
        t->p = p;
        t->cap = cap;
    }
    char *k = strdup(key);
    if (!k) return 0;
    t->p[t->n++] = (sd_dit_param){k, slot};
    return 1;
}

sd_bt **sd_dit_params_find(const sd_dit_params *t, const char *key) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].key, key) == 0) return t->p[i].slot;
    return NULL;
}

void sd_dit_params_free(sd_dit_params *t) {
    for (int i = 0; i < t->n; i++) {
        sd_bt_free(*t->p[i].slot);
        free(t->p[i].key);
    }
    free(t->p);
    *t = (sd_dit_params){0};
}

sd_status sd_dit_check_dtype(const char *what, sd_dtype weight_dtype, sd_error *err) {
    if (!sd_dtype_is_float(weight_dtype) || weight_dtype == SD_F64)
        return sd_error_set(err, SD_ERR_INVALID, "%s weights cannot be kept as %s", what,
                            sd_dtype_name(weight_dtype));
    return SD_OK;
}

void sd_dit_loader_init(sd_dit_loader *ld, const char *what, sd_backend *be, sd_st_file *f, const char *prefix,
                        sd_dtype weight_dtype, sd_dit_params *params, sd_error *err) {
    memset(ld, 0, sizeof *ld);
    sd_error_clear(&ld->local);
    ld->err = err ? err : &ld->local;
    ld->what = what;
    ld->params = params;
    sd_weights_init(&ld->w, be, f, prefix ? prefix : "");
    ld->w.dtype = weight_dtype;
}

void sd_dit_nomem(sd_dit_loader *ld) {
    ld->failed = 1;
    sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the %s model", ld->what);
}

static void get(sd_dit_loader *ld, sd_bt **slot, int ndim, const int64_t *shape, const char *key) {
    if (ld->failed) return;
    *slot = sd_weights_get(&ld->w, key, ndim, shape, ld->err);
    if (!*slot) {
        ld->failed = 1;
        return;
    }
    if (!sd_dit_params_add(ld->params, key, slot)) {
        sd_bt_free(*slot);
        *slot = NULL;
        sd_dit_nomem(ld);
    }
}

void sd_dit_get(sd_dit_loader *ld, sd_bt **slot, int ndim, const int64_t *shape, const char *fmt, ...) {
    char key[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    get(ld, slot, ndim, shape, key);
}

void sd_dit_vec(sd_dit_loader *ld, sd_bt **slot, int64_t n, const char *fmt, ...) {
    char key[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    get(ld, slot, 1, &n, key);
}

void sd_dit_lin(sd_dit_loader *ld, sd_bt **w, sd_bt **b, int64_t out, int64_t in, int bias, const char *fmt, ...) {
    char base[360], key[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    int64_t s[2] = {out, in};
    snprintf(key, sizeof key, "%s.weight", base);
    get(ld, w, 2, s, key);
    if (bias) {
        snprintf(key, sizeof key, "%s.bias", base);
        get(ld, b, 1, &out, key);
    }
}

sd_status sd_dit_loader_finish(sd_dit_loader *ld, sd_bt **one) {
    if (!ld->failed) {
        sd_backend *be = ld->w.be;
        sd_tensor *t = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
        if (t) sd_tensor_f32(t)[0] = 1.0f;
        *one = t ? sd_bt_from_host(be, t, SD_F32) : NULL;
        sd_tensor_unref(t);
        if (!*one && !sd_backend_take_error(be, ld->err)) sd_dit_nomem(ld);
        if (!*one) ld->failed = 1;
    }
    if (!ld->failed) return SD_OK;
    return ld->err->code ? ld->err->code : SD_ERR_INTERNAL;
}

sd_status sd_dit_params_rebind(const sd_dit_params *bt, sd_dit_params *vt, const void *base, void *view,
                               sd_dit_slot_fn moved, sd_bt *base_one, sd_bt **vone, sd_backend *be,
                               const char *what, sd_error *err) {
    int failed = 0;
    *vone = NULL;
    /* every slot of the view still points at base's tensor: each becomes a
     * view (owned by the view's table) before anything can free it */
    for (int i = 0; i < bt->n; i++) {
        sd_bt **slot = moved(base, view, bt->p[i].slot);
        if (!slot || !sd_dit_params_add(vt, bt->p[i].key, slot)) {
            failed = 1;
            break;
        }
        sd_bt *t = *slot;
        *slot = sd_bt_view(t, t->ndim, t->shape);
        if (!*slot) {
            failed = 1;
            break;
        }
    }
    if (!failed) *vone = sd_bt_view(base_one, base_one->ndim, base_one->shape);
    if (!failed && *vone) return SD_OK;
    /* slots not yet viewed still borrow base's tensors: clear them */
    for (int i = vt->n; i < bt->n; i++) {
        sd_bt **slot = moved(base, view, bt->p[i].slot);
        if (slot) *slot = NULL;
    }
    sd_status rc = sd_backend_take_error(be, err);
    return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating %s", what);
}
