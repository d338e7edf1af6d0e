/* dit_params.h - the weight table of the DiT loaders (Flux, SD3's MMDiT,
 * Z-Image's NextDiT): each parameter bound by its checkpoint key to a slot
 * in the model's structs, so that LoRA, the model patches and the tests
 * reach a weight by the key ComfyUI names it with (sd_flux_param and
 * friends), and so that freeing a model is one walk of its table.
 *
 * A family's loader detects its config, checks the weight dtype
 * (sd_dit_check_dtype), then walks its modules with an sd_dit_loader: every
 * sd_dit_get / sd_dit_vec / sd_dit_lin fetches a tensor with the shape the
 * config implies (a missing or wrongly shaped one is an error naming its
 * key, before any forward runs) and records it in the table. The first
 * failure is sticky: later fetches do nothing, so a loader's walk needs no
 * error checks of its own. sd_dit_loader_finish makes the model's constant
 * "one" and returns the walk's status.
 *
 * A view model (sd_flux_view, sd_sd3_view, sd_zimage_view: the model a
 * LoRA patches) is a copy of the loaded one's struct and block arrays whose
 * slots sd_dit_params_rebind turns into views of the loaded tensors, each
 * recorded in the view's own table.
 *
 * Ownership: the table owns its keys and the tensors its slots point at
 * (sd_dit_params_free frees both and sets nothing: the slots' memory is
 * the model's). A slot recorded once must not be recorded again.
 */
#ifndef SD_DIT_PARAMS_H
#define SD_DIT_PARAMS_H

#include "models/checkpoint/weights.h"

/* A parameter by its key relative to the checkpoint prefix. */
typedef struct sd_dit_param {
    char *key;
    sd_bt **slot;
} sd_dit_param;

/* Zero-initialised: empty. */
typedef struct sd_dit_params {
    sd_dit_param *p;
    int n, cap;
} sd_dit_params;

/* Appends (a copy of key, slot); 0 when out of memory (nothing added). */
int sd_dit_params_add(sd_dit_params *t, const char *key, sd_bt **slot);
/* The slot recorded under key, or NULL. */
sd_bt **sd_dit_params_find(const sd_dit_params *t, const char *key);
/* Frees every recorded slot's tensor, the keys and the array; t is empty
 * after. */
void sd_dit_params_free(sd_dit_params *t);

/* SD_OK when a DiT's weights can be kept as weight_dtype (a float type
 * other than F64); SD_ERR_INVALID "<what> weights cannot be kept as X"
 * otherwise. */
sd_status sd_dit_check_dtype(const char *what, sd_dtype weight_dtype, sd_error *err);

/* One load's state. `what` names the model in messages ("Flux"). */
typedef struct sd_dit_loader {
    sd_weights w;
    sd_dit_params *params;
    const char *what;
    sd_error *err; /* the caller's, or `local` when it passed none */
    sd_error local;
    int failed;
} sd_dit_loader;

/* Starts a load of f's tensors under prefix, kept as weight_dtype, recorded
 * in *params. The loader must not be copied after (err may point into it). */
void sd_dit_loader_init(sd_dit_loader *ld, const char *what, sd_backend *be, sd_st_file *f, const char *prefix,
                        sd_dtype weight_dtype, sd_dit_params *params, sd_error *err);

/* *slot = the tensor named by fmt, of shape (ndim entries of shape). */
void sd_dit_get(sd_dit_loader *ld, sd_bt **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* *slot = the 1-D tensor named by fmt, of n elements. */
void sd_dit_vec(sd_dit_loader *ld, sd_bt **slot, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A Linear layer named by fmt: "<name>.weight" [out, in] into *w and, when
 * bias, "<name>.bias" [out] into *b. */
void sd_dit_lin(sd_dit_loader *ld, sd_bt **w, sd_bt **b, int64_t out, int64_t in, int bias, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Marks the load failed with "out of memory building the <what> model"
 * (a loader's own allocation failed). */
void sd_dit_nomem(sd_dit_loader *ld);

/* Ends the walk: when it did not fail, *one = a [1] F32 tensor holding 1.0
 * (the "1 +" of the DiTs' modulation scales). Returns SD_OK, or the first
 * error's code (the error filled); the caller then frees its model, whose
 * table holds whatever was fetched. */
sd_status sd_dit_loader_finish(sd_dit_loader *ld, sd_bt **one);

/* The view model's slot for a slot of the base model (the same field of
 * the copied struct or block array), or NULL. */
typedef sd_bt **(*sd_dit_slot_fn)(const void *base, void *view, sd_bt **slot);

/* Rebinds a view model: `view` is a copy of `base` (struct and block
 * arrays) whose slots still point at base's tensors, and *vt (its table) is
 * empty. Each slot of base's table bt, found in the view by `moved`,
 * becomes a backend view of base's tensor (sd_bt_view) recorded in vt, and
 * *vone a view of base_one. On failure the view's slots not yet rebound are
 * cleared (they borrowed base's tensors) and the backend's error, or "out of
 * memory creating <what>" ("a Flux view"), is returned; the caller then
 * frees the view model, whose table holds what was made. */
sd_status sd_dit_params_rebind(const sd_dit_params *bt, sd_dit_params *vt, const void *base, void *view,
                               sd_dit_slot_fn moved, sd_bt *base_one, sd_bt **vone, sd_backend *be,
                               const char *what, sd_error *err);

#endif
