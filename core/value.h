/* value.h - the values that flow along graph edges.
 *
 * A value is a small reference-counted tree, shaped like the Python objects
 * ComfyUI passes between nodes, so every node type maps onto it without a
 * special case:
 *
 *   INT, FLOAT, BOOLEAN, STRING      scalars (literal inputs, primitive outputs)
 *   IMAGE, MASK, SIGMAS              SD_VAL_TENSOR
 *   LATENT                           SD_VAL_DICT {"samples": tensor,
 *                                      "noise_mask"?: tensor, "batch_index"?: list of int}
 *   CONDITIONING                     SD_VAL_LIST of SD_VAL_DICT {"cond": tensor,
 *                                      "pooled_output"?: tensor, "area"?: ..., ...}
 *   MODEL, CLIP, VAE, CONTROL_NET    SD_VAL_HANDLE (live objects in RAM)
 *
 * A value without handles is "data": it can be serialized (value_io.h), stored
 * in the output cache and dumped. Values are immutable once a node has
 * returned them; build a new one to change anything (the tensors inside can
 * be shared by reference).
 *
 * Ownership: constructors return one reference owned by the caller.
 * sd_value_dict_set / sd_value_list_append TAKE ownership of the value passed.
 * Getters return borrowed pointers valid while the container lives.
 */
#ifndef SD_VALUE_H
#define SD_VALUE_H

#include <stdint.h>
#include "tensor.h"

typedef enum sd_value_kind {
    SD_VAL_NONE = 0,
    SD_VAL_INT,
    SD_VAL_FLOAT,
    SD_VAL_BOOL,
    SD_VAL_STRING,
    SD_VAL_TENSOR,
    SD_VAL_LIST,
    SD_VAL_DICT,
    SD_VAL_HANDLE
} sd_value_kind;

/* A live object (a loaded model, a ControlNet, ...). `type_name` names the
 * graph type ("MODEL"); `free` releases `ptr` when the last reference goes.
 * `key` is a stable identity (the cache key of the node output that made it,
 * filled by the executor) used when a handle's identity must enter a hash. */
typedef struct sd_handle_type {
    const char *type_name;
    void (*free)(void *ptr);
} sd_handle_type;

typedef struct sd_value sd_value;

sd_value *sd_value_none(void);
sd_value *sd_value_int(int64_t v);
sd_value *sd_value_float(double v);
sd_value *sd_value_bool(int v);
sd_value *sd_value_string(const char *s);           /* copies s */
sd_value *sd_value_tensor(sd_tensor *t);            /* takes a new ref to t */
sd_value *sd_value_list(void);
sd_value *sd_value_dict(void);
sd_value *sd_value_handle(const sd_handle_type *type, void *ptr); /* owns ptr */

sd_value *sd_value_ref(sd_value *v);  /* NULL-safe, returns v */
void sd_value_unref(sd_value *v);     /* NULL-safe */

sd_value_kind sd_value_kind_of(const sd_value *v);
const char *sd_value_kind_name(sd_value_kind k);

/* Scalar access. as_float accepts INT too; as_int accepts an integral FLOAT. */
int64_t sd_value_as_int(const sd_value *v);
double sd_value_as_float(const sd_value *v);
int sd_value_as_bool(const sd_value *v);
const char *sd_value_as_string(const sd_value *v);  /* NULL unless STRING */
sd_tensor *sd_value_as_tensor(const sd_value *v);   /* borrowed; NULL unless TENSOR */
void *sd_value_as_handle(const sd_value *v, const sd_handle_type *type); /* NULL on type mismatch */
const sd_handle_type *sd_value_handle_type(const sd_value *v);

/* Lists. */
size_t sd_value_list_len(const sd_value *v);
sd_value *sd_value_list_get(const sd_value *v, size_t i);       /* borrowed */
int sd_value_list_append(sd_value *list, sd_value *item);       /* takes item */

/* Dicts keep insertion order; setting an existing key replaces it. */
size_t sd_value_dict_len(const sd_value *v);
const char *sd_value_dict_key(const sd_value *v, size_t i);
sd_value *sd_value_dict_at(const sd_value *v, size_t i);        /* borrowed */
sd_value *sd_value_dict_get(const sd_value *v, const char *key); /* borrowed or NULL */
int sd_value_dict_set(sd_value *dict, const char *key, sd_value *item); /* takes item */
/* Shallow copy of a dict or list (children shared by reference), for
 * building a modified value from an input without touching the input. */
sd_value *sd_value_shallow_copy(const sd_value *v);

/* Convenience: dict_get + as_tensor. */
sd_tensor *sd_value_dict_tensor(const sd_value *dict, const char *key);

/* 1 when the tree holds no handle (so it can be cached and dumped). */
int sd_value_is_data(const sd_value *v);

#endif
