/* cache_key.h - the structural cache key of a node (see executor.h).
 *
 * key = SHA-256 over: a schema tag, class_type (canonical, never an alias),
 * node version, device ("cpu"/"cuda": kernels differ in rounding, so results
 * do too), precision, then every declared input sorted by name, each as
 * its name plus a type-tagged canonical encoding:
 *   literal  ints as int64, floats by their exact IEEE bits, bools, strings
 *            with length, lists and dicts recursively (defaults already filled
 *            and values coerced to the input's type by the caller, so an
 *            omitted input and its explicit default hash the same);
 *   file     the SHA-256 of the file's bytes (file_folder inputs);
 *   link     the source node's key and the output index;
 *   absent   a marker (optional input not given).
 * For SD_NODE_NOT_IDEMPOTENT nodes the node id is appended.
 */
#ifndef SD_CACHE_KEY_H
#define SD_CACHE_KEY_H

#include <stdint.h>
#include "executor.h"
#include "sha256.h"

typedef enum sd_key_kind { SD_KEY_ABSENT = 0, SD_KEY_VALUE, SD_KEY_FILE, SD_KEY_LINK } sd_key_kind;

typedef struct sd_key_input {
    sd_key_kind kind;
    const sd_value *value;   /* SD_KEY_VALUE */
    const uint8_t *hash;     /* SD_KEY_FILE: file content hash; SD_KEY_LINK: source key */
    int src_index;           /* SD_KEY_LINK */
} sd_key_input;

/* Canonical, type-tagged encoding of a value into the hash. */
void sd_key_hash_value(sd_sha256_ctx *h, const sd_value *v);

/* Key of one node (device and precision NULL = "cpu", "f32"). `inputs` is aligned with def->inputs; `node_id` is hashed
 * only when non-NULL (pass it for NOT_IDEMPOTENT nodes). */
void sd_key_node(const sd_node_def *def, const char *device, const char *precision,
                 const char *node_id, const sd_key_input *inputs, uint8_t out[SD_KEY_SIZE]);

/* SHA-256 of a file's bytes, memoized through cache->file_hash_get/put when
 * the cache provides them (keyed by absolute path, size and mtime). */
sd_status sd_key_file_hash(const sd_cache_i *cache, const char *path, uint8_t out[SD_KEY_SIZE],
                           sd_error *err);

#endif
