/* weights.h - binding checkpoint tensors to a model, by dotted key name.
 *
 * A model loader opens a view of a safetensors file under a key prefix
 * ("model.diffusion_model.") and asks for each parameter by its name relative
 * to that prefix, with the shape it expects. Errors name the full key and
 * the file, so a missing or wrongly shaped tensor is reported precisely.
 * Every tensor fetched is checked for NaN/Inf (real checkpoints exist with
 * corrupted layers).
 *
 * Ownership: the view keeps a reference to nothing; the sd_st_file must stay
 * open while the view is used. Tensors returned belong to the caller.
 */
#ifndef SD_WEIGHTS_H
#define SD_WEIGHTS_H

#include "formats/safetensors.h"
#include "kernels/backend.h"

typedef struct sd_weights {
    sd_backend *be;
    sd_st_file *file;
    char prefix[256];
    sd_dtype dtype; /* SD_F32 (default): F32 compute; F16/BF16/fp8 weights stay
                     * as stored when the backend accepts them
                     * (sd_backend_accepts_dtype), quantized (GGUF) ones too.
                     * Another dtype: every float tensor is converted to it
                     * (UNETLoader's fp8 casts). */
    /* Rounding of quantized weights' widening (core/quant.h; ComfyUI-GGUF's
     * dequant_dtype): given to every quantized tensor fetched. */
    sd_dequant_math dequant;
} sd_weights;

/* Initialise a view (no allocation). */
void sd_weights_init(sd_weights *w, sd_backend *be, sd_st_file *f, const char *prefix);

/* Full key "prefix + name" into buf. */
const char *sd_weights_key(const sd_weights *w, const char *name, char *buf, size_t n);
/* 1 when prefix+name exists. */
int sd_weights_has(const sd_weights *w, const char *name);

/* Fetch prefix+name as a backend tensor in w->dtype. When `shape` is not
 * NULL the stored shape must equal it (ndim entries) or the call fails with
 * SD_ERR_FORMAT naming the key, the expected and the found shape. Missing key:
 * SD_ERR_NOT_FOUND. NaN/Inf in the data: SD_ERR_FORMAT naming the key. */
sd_bt *sd_weights_get(const sd_weights *w, const char *name, int ndim,
                      const int64_t *shape, sd_error *err);
/* printf-style name: sd_weights_getf(w, err, 4, shape, "input_blocks.%d.0.in_layers.0.weight", i) */
sd_bt *sd_weights_getf(const sd_weights *w, sd_error *err, int ndim, const int64_t *shape,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Shape of prefix+name without loading it; returns ndim or -1 if missing. */
int sd_weights_shape(const sd_weights *w, const char *name, int64_t shape[SD_MAX_DIMS]);

#endif
