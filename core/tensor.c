#include "tensor.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int shape_ok(int ndim, const int64_t *shape, size_t *numel) {
    if (ndim < 0 || ndim > SD_MAX_DIMS) return 0;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return 0;
        if (shape[i] && n > SIZE_MAX / (size_t)shape[i]) return 0;
        n *= (size_t)shape[i];
    }
    *numel = n;
    return 1;
}

/* Whole blocks of a quantized dtype, and a byte size that fits. */
static int dtype_ok(sd_dtype dtype, size_t numel) {
    if ((unsigned)dtype >= SD_DTYPE_COUNT) return 0;
    size_t blk = (size_t)sd_dtype_block(dtype);
    return numel % blk == 0 && numel / blk <= SIZE_MAX / sd_dtype_size(dtype);
}

static sd_tensor *alloc_header(sd_dtype dtype, int ndim, const int64_t *shape, size_t numel) {
    sd_tensor *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->refcount = 1;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = sd_dtype_nbytes(dtype, (int64_t)numel);
    return t;
}

sd_tensor *sd_tensor_new(sd_dtype dtype, int ndim, const int64_t *shape) {
    size_t numel;
    if (!shape_ok(ndim, shape, &numel) || !dtype_ok(dtype, numel)) return NULL;
    sd_tensor *t = alloc_header(dtype, ndim, shape, numel);
    if (!t) return NULL;
    /* Always allocate at least one byte so data is never NULL; 64-byte
     * alignment lets SIMD kernels use aligned loads. */
    size_t bytes = (t->nbytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    t->data = aligned_alloc(64, bytes);
    if (!t->data) { free(t); return NULL; }
    memset(t->data, 0, bytes);
    return t;
}

sd_tensor *sd_tensor_new4(sd_dtype dtype, int ndim, int64_t d0, int64_t d1, int64_t d2,
                          int64_t d3) {
    int64_t s[4] = {d0, d1, d2, d3};
    return sd_tensor_new(dtype, ndim, s);
}

sd_tensor *sd_tensor_new_borrowed(sd_dtype dtype, int ndim, const int64_t *shape, void *data,
                                  void (*release)(void *), void *owner) {
    size_t numel;
    if (!shape_ok(ndim, shape, &numel) || !dtype_ok(dtype, numel)) return NULL;
    sd_tensor *t = alloc_header(dtype, ndim, shape, numel);
    if (!t) return NULL;
    t->data = data;
    t->release = release;
    t->owner = owner;
    return t;
}

sd_tensor *sd_tensor_ref(sd_tensor *t) {
    if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
    return t;
}

void sd_tensor_unref(sd_tensor *t) {
    if (!t) return;
    if (__atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (t->release) t->release(t->owner);
    else free(t->data);
    free(t);
}

int64_t sd_tensor_numel(const sd_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int sd_tensor_same_shape(const sd_tensor *a, const sd_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

sd_tensor *sd_tensor_clone(const sd_tensor *t) {
    sd_tensor *c = sd_tensor_new(t->dtype, t->ndim, t->shape);
    if (c) memcpy(c->data, t->data, t->nbytes);
    return c;
}

sd_tensor *sd_tensor_to_dtype(const sd_tensor *t, sd_dtype dtype) {
    if (t->dtype == dtype) return sd_tensor_clone(t);
    sd_tensor *c = sd_tensor_new(dtype, t->ndim, t->shape);
    if (c) sd_dtype_convert(c->data, dtype, t->data, t->dtype, (size_t)sd_tensor_numel(t));
    return c;
}

static void release_parent(void *owner) { sd_tensor_unref(owner); }

sd_tensor *sd_tensor_reshape(sd_tensor *t, int ndim, const int64_t *shape) {
    size_t numel;
    if (!shape_ok(ndim, shape, &numel) || (int64_t)numel != sd_tensor_numel(t)) return NULL;
    sd_tensor *v = sd_tensor_new_borrowed(t->dtype, ndim, shape, t->data, release_parent, t);
    if (v) sd_tensor_ref(t);
    return v;
}

float *sd_tensor_f32(const sd_tensor *t) {
    assert(t && t->dtype == SD_F32);
    return (float *)t->data;
}

const char *sd_tensor_shape_str(const sd_tensor *t, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (off < n) snprintf(buf + off, n - off, "] %s", sd_dtype_name(t->dtype));
    return buf;
}
