/* gguf.h - GGUF files (llama.cpp's container; city96's ComfyUI-GGUF models):
 * a validated reader over the file's bytes, and the sd_st_file view model
 * loaders read weights through.
 *
 * Format (version 2 and 3, little-endian): "GGUF", u32 version, u64 tensor
 * count, u64 key/value count; the key/values (string key, u32 value type,
 * value); the tensor infos (string name, u32 n_dims, u64 ne[n_dims] with
 * the innermost dimension first, u32 ggml type, u64 offset into the data
 * section); padding to the alignment (general.alignment, a u32 power of
 * two, default 32); the data section. A string is a u64 byte length and the
 * bytes; an array is a u32 item type, a u64 count and the items (arrays may
 * nest). Tensors are stored row-major in blocks of their type (GGML
 * quantization: Q4_K is 256 elements in 144 bytes), ne[0] a multiple of the
 * block size.
 *
 * sd_gguf_parse() checks everything before returning, so that nothing read
 * later can run past the file: magic and version; every count against the
 * bytes left (and at most SD_GGUF_MAX_ITEMS key/values or tensors, so a
 * hostile count cannot ask for a huge allocation); every string and array
 * inside the file; value types known; keys and tensor names unique,
 * non-empty UTF-8 without NUL; general.alignment a u32 power of two; for
 * each tensor 0..4 dims, a known type, ne[0] a multiple of its block, a byte
 * size that does not overflow, an offset that is a multiple of the
 * alignment, its bytes inside the data section and overlapping no other
 * tensor's. A bad file is SD_ERR_FORMAT naming the file and, where there is
 * one, the key or tensor (SD_ERR_UNSUPPORTED for big-endian files and
 * versions other than 2 and 3).
 *
 * Ownership: sd_gguf borrows the bytes it parsed (they must outlive it) and
 * owns copies of the keys and names; values are read in place.
 */
#ifndef SD_GGUF_H
#define SD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "formats/safetensors.h"

#define SD_GGUF_MAX_DIMS 4
/* Largest key/value or tensor count accepted (real files: ~50 key/values,
 * ~1000 tensors). */
#define SD_GGUF_MAX_ITEMS (1u << 20)
/* Deepest nesting of arrays accepted (real files: none). */
#define SD_GGUF_MAX_DEPTH 8

typedef enum sd_gguf_vtype {
    SD_GGUF_U8 = 0,
    SD_GGUF_I8 = 1,
    SD_GGUF_U16 = 2,
    SD_GGUF_I16 = 3,
    SD_GGUF_U32 = 4,
    SD_GGUF_I32 = 5,
    SD_GGUF_F32 = 6,
    SD_GGUF_BOOL = 7,
    SD_GGUF_STRING = 8,
    SD_GGUF_ARRAY = 9,
    SD_GGUF_U64 = 10,
    SD_GGUF_I64 = 11,
    SD_GGUF_F64 = 12
} sd_gguf_vtype;

typedef struct sd_gguf sd_gguf;

typedef struct sd_gguf_kv {
    const char *key;         /* NUL-terminated copy */
    sd_gguf_vtype type;
    /* arrays: the item type and count (items of a nested array are arrays) */
    sd_gguf_vtype item_type;
    uint64_t count;          /* 1 for a scalar or a string */
    const uint8_t *value;    /* the value's bytes in the file: a scalar, a
                              * string's length field, an array's first item */
    uint64_t nbytes;         /* bytes from `value` to the end of the value */
} sd_gguf_kv;

typedef struct sd_gguf_tensor {
    const char *name;        /* NUL-terminated copy */
    uint32_t type;           /* ggml type id (sd_gguf_type_name) */
    int n_dims;
    int64_t ne[SD_GGUF_MAX_DIMS]; /* as stored: ne[0] is the innermost (row) */
    uint64_t offset;         /* absolute offset of the first byte in the file */
    uint64_t nbytes;
} sd_gguf_tensor;

/* Parses and validates `size` bytes at `data`; `name` (the path) is used in
 * errors. *out is NULL on failure. */
sd_status sd_gguf_parse(const void *data, size_t size, const char *name, sd_gguf **out,
                        sd_error *err);
void sd_gguf_free(sd_gguf *g); /* NULL-safe */

const char *sd_gguf_name(const sd_gguf *g);
uint32_t sd_gguf_version(const sd_gguf *g);
uint32_t sd_gguf_alignment(const sd_gguf *g);
/* Absolute offset of the data section. */
uint64_t sd_gguf_data_offset(const sd_gguf *g);

/* Key/values in file order; find returns NULL for a missing key. */
size_t sd_gguf_kv_count(const sd_gguf *g);
const sd_gguf_kv *sd_gguf_kv_at(const sd_gguf *g, size_t i);
const sd_gguf_kv *sd_gguf_find_kv(const sd_gguf *g, const char *key);

/* Scalar values. Each returns 1 and sets *out when kv has a fitting type,
 * else 0: int for the integer types (U64 above INT64_MAX does not fit) and
 * BOOL, float for F32 and F64, string for STRING (bytes in the file, not
 * NUL-terminated). */
int sd_gguf_kv_int(const sd_gguf_kv *kv, int64_t *out);
int sd_gguf_kv_float(const sd_gguf_kv *kv, double *out);
int sd_gguf_kv_str(const sd_gguf_kv *kv, const char **s, size_t *len);
/* Item i of an array of integers / floats (as above), 0 when out of range
 * or of another type. Strings in an array have varying lengths: walk them
 * with sd_gguf_kv_str_next. */
int sd_gguf_array_int(const sd_gguf_kv *kv, uint64_t i, int64_t *out);
int sd_gguf_array_float(const sd_gguf_kv *kv, uint64_t i, double *out);
/* Iterates an array of strings: start with *pos = 0; each call returns 1
 * with the next string, 0 at the end (or when kv is not one). */
int sd_gguf_kv_str_next(const sd_gguf_kv *kv, uint64_t *pos, const char **s, size_t *len);

/* Tensor infos in file order; find (by name) returns NULL when missing. */
size_t sd_gguf_tensor_count(const sd_gguf *g);
const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, size_t i);
const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name);

/* ---- ggml types ------------------------------------------------------------ */

/* "Q4_K" for a known ggml type id, NULL otherwise. */
const char *sd_gguf_type_name(uint32_t type);
/* Elements per block and bytes per block of a known type: 1 on success. */
int sd_gguf_type_block(uint32_t type, uint32_t *block, uint32_t *bytes);
/* The sd_dtype a type is read as (F32, F16, BF16, the integer types and the
 * quantized types core/quant.h dequantizes): 1 on success, 0 for a type
 * sdflow does not compute with (Q8_1, IQ2_XXS, TQ1_0, ...). */
int sd_gguf_type_dtype(uint32_t type, sd_dtype *out);
/* The ggml type a dtype is stored as: 1 on success, 0 for U8/BOOL. */
int sd_gguf_dtype_type(sd_dtype dt, uint32_t *type);

/* ---- weights ------------------------------------------------------------------ */

/* Opens a GGUF file as an sd_st_file (formats/safetensors.h): memory-mapped,
 * guarded and change-checked like a safetensors file, its tensors borrowed
 * from the mapping in their stored type (quantized ones stay quantized).
 * Entry names are the tensor names as stored (sd_gguf_open_ex: renamed as
 * ComfyUI-GGUF's loader names them); shapes are PyTorch's order
 * (ne reversed), or the shape in the key `comfy.gguf.orig_shape.<name>`
 * (an array of INT32 with the same number of elements, as ComfyUI-GGUF
 * writes for tensors it reshaped to quantize them; any other type there is
 * SD_ERR_FORMAT, as in ComfyUI-GGUF). Tensors of types without an sd_dtype
 * are checked like the others, left out of the entries, and named with
 * their type in the error sd_st_tensor gives for them. Metadata: every
 * scalar and string key/value as text (integers in decimal, floats with 17
 * significant digits, booleans true/false, strings as stored: those with a
 * NUL or invalid UTF-8 are left out); arrays are left out (read them with
 * sd_gguf_parse over the same bytes). */
sd_status sd_gguf_open(const char *path, sd_st_file **out, sd_error *err);
/* The same over a buffer that outlives the file (tests, fuzzing). */
sd_status sd_gguf_open_memory(const void *data, size_t size, const char *name, sd_st_file **out,
                              sd_error *err);

/* How sd_gguf_open_ex names the entries, as ComfyUI-GGUF's loader does. */
typedef struct sd_gguf_view_opts {
    /* gguf_sd_loader's handle_prefix: when some tensor name starts with it,
     * tensors without it are left out and it is cut from the others; NULL
     * = none. */
    const char *strip_prefix;
    /* sd_map_replace: each {from, to} pair in turn replaces every
     * occurrence of `from` in every name (Python's str.replace), after the
     * prefix; ends at a pair whose `from` is NULL. NULL = none. Names that
     * become equal are SD_ERR_FORMAT naming one. */
    const char *const (*replace)[2];
} sd_gguf_view_opts;
sd_status sd_gguf_open_ex(const char *path, const sd_gguf_view_opts *opts, sd_st_file **out, sd_error *err);
sd_status sd_gguf_open_memory_ex(const void *data, size_t size, const char *name,
                                 const sd_gguf_view_opts *opts, sd_st_file **out, sd_error *err);
/* 1 when the file at path starts with the GGUF magic. */
int sd_gguf_is_gguf(const char *path);

/* ---- writing --------------------------------------------------------------------
 *
 * Version 3, alignment 32 (general.alignment written only when another one is
 * set), key/values in the order added, tensors in the order added, each at
 * the next aligned offset. Tensor data is either an sd_tensor held until
 * saved, or produced by a callback while saving, one tensor at a time, so a
 * file larger than memory can be written. Shapes are given in PyTorch's
 * order and stored reversed (ne[0] innermost); the innermost dimension must
 * be a whole number of blocks of the dtype, and at most 4 dims. */
typedef struct sd_gguf_writer sd_gguf_writer;

/* Fills dst with the nbytes of tensor `name` as stored (blocks for a
 * quantized dtype). */
typedef sd_status (*sd_gguf_fill_fn)(void *ctx, const char *name, void *dst, size_t nbytes, sd_error *err);

sd_gguf_writer *sd_gguf_writer_new(void);
void sd_gguf_writer_free(sd_gguf_writer *w); /* NULL-safe */
/* Key/values (keys unique). */
sd_status sd_gguf_writer_kv_str(sd_gguf_writer *w, const char *key, const char *value, sd_error *err);
sd_status sd_gguf_writer_kv_u32(sd_gguf_writer *w, const char *key, uint32_t value, sd_error *err);
sd_status sd_gguf_writer_kv_f32(sd_gguf_writer *w, const char *key, float value, sd_error *err);
sd_status sd_gguf_writer_kv_i32s(sd_gguf_writer *w, const char *key, const int32_t *v, size_t n, sd_error *err);
/* A tensor from memory (takes a reference; F32, F16, BF16, the integer and
 * the quantized dtypes). */
sd_status sd_gguf_writer_add(sd_gguf_writer *w, const char *name, sd_tensor *t, sd_error *err);
/* A tensor whose bytes fill(ctx, ...) makes while saving (ctx must live
 * until then). */
sd_status sd_gguf_writer_add_lazy(sd_gguf_writer *w, const char *name, sd_dtype dtype, int ndim,
                                  const int64_t *shape, sd_gguf_fill_fn fill, void *ctx, sd_error *err);
/* Writes atomically (temporary file + rename), streaming the data. */
sd_status sd_gguf_writer_save(sd_gguf_writer *w, const char *path, sd_error *err);
/* Serializes into a malloc'd buffer (*out, *size). */
sd_status sd_gguf_writer_to_memory(sd_gguf_writer *w, void **out, size_t *size, sd_error *err);

#endif
