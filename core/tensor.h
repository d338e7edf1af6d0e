/* tensor.h - reference-counted, contiguous, row-major CPU tensors.
 *
 * A tensor owns its bytes, or borrows them from an owner (for example a
 * memory-mapped safetensors file) that it keeps alive through a reference.
 * Tensors passed between nodes are treated as immutable: a node that wants
 * to change data makes a copy (sd_tensor_clone) first.
 *
 * Ownership: every *_new / *_clone / *_to_dtype returns a tensor with one
 * reference that the caller owns; release it with sd_tensor_unref().
 */
#ifndef SD_TENSOR_H
#define SD_TENSOR_H

#include <stdint.h>
#include "dtype.h"
#include "error.h"

#define SD_MAX_DIMS 6

typedef struct sd_tensor {
    int refcount;
    sd_dtype dtype;
    int ndim;
    int64_t shape[SD_MAX_DIMS];
    void *data;    /* contiguous row-major elements */
    size_t nbytes; /* numel * dtype size (sd_dtype_nbytes: per block when quantized) */
    /* Borrowed storage: when release != NULL the bytes belong to `owner`,
     * and release(owner) is called when the last reference goes. */
    void (*release)(void *owner);
    void *owner;
} sd_tensor;

/* New zero-filled tensor. Returns NULL on bad shape (ndim > SD_MAX_DIMS,
 * negative dims, a quantized dtype with a partial block) or allocation
 * failure. */
sd_tensor *sd_tensor_new(sd_dtype dtype, int ndim, const int64_t *shape);
/* Convenience for up to 4 dims: sd_tensor_new4(SD_F32, 2, n, c, 0, 0). */
sd_tensor *sd_tensor_new4(sd_dtype dtype, int ndim, int64_t d0, int64_t d1,
                          int64_t d2, int64_t d3);
/* Tensor over bytes owned elsewhere; release(owner) runs at last unref. */
sd_tensor *sd_tensor_new_borrowed(sd_dtype dtype, int ndim, const int64_t *shape,
                                  void *data, void (*release)(void *), void *owner);

sd_tensor *sd_tensor_ref(sd_tensor *t);  /* returns t; NULL-safe */
void sd_tensor_unref(sd_tensor *t);      /* NULL-safe */

int64_t sd_tensor_numel(const sd_tensor *t);
/* Same dtype and shape. */
int sd_tensor_same_shape(const sd_tensor *a, const sd_tensor *b);
/* Deep copy (always owned storage). */
sd_tensor *sd_tensor_clone(const sd_tensor *t);
/* Copy converted to dtype (a clone when the dtype is the same). */
sd_tensor *sd_tensor_to_dtype(const sd_tensor *t, sd_dtype dtype);
/* Same bytes, new shape with equal numel; returns a new tensor that shares
 * storage with t (keeps t alive). NULL when numel differs. */
sd_tensor *sd_tensor_reshape(sd_tensor *t, int ndim, const int64_t *shape);

/* Typed element pointer; asserts dtype == SD_F32. */
float *sd_tensor_f32(const sd_tensor *t);

/* "[2, 4, 64, 64] F32" into buf; returns buf. */
const char *sd_tensor_shape_str(const sd_tensor *t, char *buf, size_t n);

#endif
