/* pickle.h - a restricted, weights-only unpickler for PyTorch checkpoints.
 *
 * Python's pickle format is a small stack machine whose GLOBAL and REDUCE
 * opcodes import and call arbitrary Python callables; a .ckpt/.pt file can
 * therefore run any code when loaded with plain pickle. This reader runs no
 * code at all: it understands only the opcodes that build plain data (None,
 * bools, ints, floats, strings, bytes, tuples, lists, dicts, memo) and a
 * fixed list of globals, each of which it interprets itself:
 *
 *   collections.OrderedDict            -> a dict (BUILD with its __dict__ ignored)
 *   torch._utils._rebuild_tensor_v2    -> a tensor (storage, offset, size, stride)
 *   torch._utils._rebuild_tensor       -> same, older signature
 *   torch._utils._rebuild_parameter(_with_state) -> the tensor it wraps
 *   torch._tensor._rebuild_from_type_v2 with torch.Tensor / torch.nn.Parameter
 *   torch.<Type>Storage (Float, Half, BFloat16, Double, Long, Int, Short,
 *   Char, Byte, Bool)                 -> storage dtypes in persistent ids
 *
 * and torch's persistent id ('storage', <Storage type>, key, location,
 * numel[, view_metadata]) — the legacy format's sixth element must be None
 * (storage views are refused). Any other global (named in the error, e.g. "posix.system"), a REDUCE
 * of anything but the functions above, BUILD on anything but a dict or a
 * tensor, INST/OBJ/NEWOBJ/EXT*, sets, out-of-band buffers and protocol-0
 * text opcodes are refused with SD_ERR_UNSUPPORTED.
 *
 * Every length, memo index and count is checked against the input and the
 * limits below; malformed input is SD_ERR_FORMAT naming the opcode and its
 * byte offset. No recursion: nesting depth costs only stack entries.
 *
 * Ownership: sd_pickle_load returns an sd_pickle that owns every object
 * reachable from its root; sd_pickle_free releases them all at once. Objects
 * may be shared (memo) and containers may contain themselves, so walkers
 * must bound their depth.
 */
#ifndef SD_PICKLE_H
#define SD_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include "core/dtype.h"
#include "core/error.h"

/* Limits (a real SDXL checkpoint's data.pkl needs ~1% of each). */
#define SD_PK_MAX_STACK (1u << 20)      /* stack entries */
#define SD_PK_MAX_MARKS (1u << 16)      /* open MARKs */
#define SD_PK_MAX_MEMO (1u << 22)       /* memo index */
#define SD_PK_MAX_BYTES ((size_t)1 << 30) /* total allocation for objects */
#define SD_PK_MAX_DIMS 8                /* tensor rank accepted by the parser */

typedef enum sd_pk_kind {
    SD_PK_NONE,
    SD_PK_BOOL,
    SD_PK_INT,
    SD_PK_FLOAT,
    SD_PK_STR,     /* text (BINUNICODE, or a protocol-2 byte string) */
    SD_PK_BYTES,
    SD_PK_TUPLE,
    SD_PK_LIST,
    SD_PK_DICT,    /* insertion-ordered; keys at items[2i], values at items[2i+1] */
    SD_PK_GLOBAL,  /* one of the allowed globals, not applied */
    SD_PK_STORAGE, /* persistent id ('storage', type, key, location, numel) */
    SD_PK_TENSOR,
} sd_pk_kind;

/* The allowed globals. */
typedef enum sd_pk_global {
    SD_PKG_ORDERED_DICT,
    SD_PKG_REBUILD_TENSOR,
    SD_PKG_REBUILD_TENSOR_V2,
    SD_PKG_REBUILD_PARAMETER,
    SD_PKG_REBUILD_PARAMETER_STATE,
    SD_PKG_REBUILD_FROM_TYPE_V2,
    SD_PKG_TENSOR_TYPE,    /* torch.Tensor */
    SD_PKG_PARAMETER_TYPE, /* torch.nn.parameter.Parameter */
    SD_PKG_STORAGE_TYPE,   /* torch.<X>Storage; dtype in sd_pk_obj.u.global.dtype */
} sd_pk_global;

typedef struct sd_pk_obj sd_pk_obj;
struct sd_pk_obj {
    sd_pk_kind kind;
    union {
        int b;
        int64_t i;
        double f;
        struct {
            char *s;    /* NUL-terminated (may also contain NULs: use len) */
            size_t len;
        } str;          /* STR, BYTES */
        struct {
            sd_pk_obj **items;
            size_t n, cap;
        } seq;          /* TUPLE, LIST, DICT (2 slots per entry) */
        struct {
            sd_pk_global id;
            sd_dtype dtype; /* SD_PKG_STORAGE_TYPE */
        } global;
        struct {
            sd_dtype dtype;
            const char *key;  /* points into the key string object */
            int64_t numel;    /* declared element count */
        } storage;
        struct {
            sd_pk_obj *storage; /* SD_PK_STORAGE */
            int64_t offset;     /* in elements */
            int ndim;
            int64_t shape[SD_PK_MAX_DIMS];
            int64_t stride[SD_PK_MAX_DIMS]; /* in elements */
        } tensor;
    } u;
};

typedef struct sd_pickle sd_pickle;

/* Unpickles data[0..size) up to its STOP opcode. `what` names the stream in
 * errors ("model.ckpt: archive/data.pkl"). On success *out owns the objects,
 * *root is the top object and *used (when not NULL) the bytes consumed
 * (streams may hold several pickles back to back). */
sd_status sd_pickle_load(const void *data, size_t size, const char *what, sd_pickle **out,
                         const sd_pk_obj **root, size_t *used, sd_error *err);
void sd_pickle_free(sd_pickle *p); /* NULL-safe */

/* Every object of the load, in creation order (e.g. to find all storages
 * a stream declares, referenced or not). */
size_t sd_pickle_count(const sd_pickle *p);
const sd_pk_obj *sd_pickle_at(const sd_pickle *p, size_t i);

/* Value of key `key` (a STR) in dict d, or NULL. Linear. */
const sd_pk_obj *sd_pickle_dict_get(const sd_pk_obj *d, const char *key);
/* "dict", "tensor", ... for messages. */
const char *sd_pickle_kind_name(sd_pk_kind k);

#endif
