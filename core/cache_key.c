/* cache_key.c - canonical serialization of node inputs into SHA-256 keys. */
#include "cache_key.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void put_u8(sd_sha256_ctx *h, uint8_t x) { sd_sha256_update(h, &x, 1); }

/* Little-endian regardless of the host, so keys are portable. */
static void put_u64(sd_sha256_ctx *h, uint64_t x) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(x >> (8 * i));
    sd_sha256_update(h, b, 8);
}

static void put_str(sd_sha256_ctx *h, const char *s) {
    size_t n = s ? strlen(s) : 0;
    put_u64(h, n);
    sd_sha256_update(h, s ? s : "", n);
}

void sd_key_hash_value(sd_sha256_ctx *h, const sd_value *v) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_NONE: put_u8(h, 'U'); break;
    case SD_VAL_INT: put_u8(h, 'I'); put_u64(h, (uint64_t)sd_value_as_int(v)); break;
    case SD_VAL_FLOAT: {
        double d = sd_value_as_float(v);
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        put_u8(h, 'F');
        put_u64(h, bits);
        break;
    }
    case SD_VAL_BOOL: put_u8(h, 'B'); put_u8(h, (uint8_t)(sd_value_as_bool(v) != 0)); break;
    case SD_VAL_STRING: put_u8(h, 'S'); put_str(h, sd_value_as_string(v)); break;
    case SD_VAL_LIST: {
        size_t n = sd_value_list_len(v);
        put_u8(h, 'A');
        put_u64(h, n);
        for (size_t i = 0; i < n; i++) sd_key_hash_value(h, sd_value_list_get(v, i));
        break;
    }
    case SD_VAL_DICT: {
        size_t n = sd_value_dict_len(v);
        put_u8(h, 'D');
        put_u64(h, n);
        for (size_t i = 0; i < n; i++) {
            put_str(h, sd_value_dict_key(v, i));
            sd_key_hash_value(h, sd_value_dict_at(v, i));
        }
        break;
    }
    case SD_VAL_TENSOR: {
        const sd_tensor *t = sd_value_as_tensor(v);
        put_u8(h, 'T');
        put_str(h, sd_dtype_name(t->dtype));
        put_u64(h, (uint64_t)t->ndim);
        for (int i = 0; i < t->ndim; i++) put_u64(h, (uint64_t)t->shape[i]);
        sd_sha256_update(h, t->data, t->nbytes);
        break;
    }
    case SD_VAL_HANDLE:
        /* Handles only reach a key through links (by their node's key). */
        put_u8(h, 'H');
        put_str(h, sd_value_handle_type(v) ? sd_value_handle_type(v)->type_name : "?");
        break;
    }
}

typedef struct { const char *name; int index; } named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

void sd_key_node(const sd_node_def *def, const char *device, const char *precision,
                 const char *node_id, const sd_key_input *inputs, uint8_t out[SD_KEY_SIZE]) {
    sd_sha256_ctx h;
    sd_sha256_init(&h);
    put_str(&h, "sdflow-node-key-2");
    put_str(&h, def->class_type);
    put_u64(&h, (uint64_t)(int64_t)def->version);
    put_str(&h, device ? device : "cpu");
    put_str(&h, precision ? precision : "f32");
    int n = sd_node_input_count(def);
    named small[64];
    named *order = n <= 64 ? small : malloc((size_t)n * sizeof *order);
    if (!order) { /* cannot sort: fall back to declaration order, still deterministic */
        order = small;
        n = n > 64 ? 64 : n;
    }
    for (int i = 0; i < n; i++) order[i] = (named){def->inputs[i].name, i};
    qsort(order, (size_t)n, sizeof *order, cmp_named);
    for (int k = 0; k < n; k++) {
        const sd_key_input *in = &inputs[order[k].index];
        put_str(&h, order[k].name);
        switch (in->kind) {
        case SD_KEY_ABSENT: put_u8(&h, 'N'); break;
        case SD_KEY_VALUE: sd_key_hash_value(&h, in->value); break;
        case SD_KEY_FILE: put_u8(&h, 'C'); sd_sha256_update(&h, in->hash, SD_KEY_SIZE); break;
        case SD_KEY_LINK:
            put_u8(&h, 'L');
            sd_sha256_update(&h, in->hash, SD_KEY_SIZE);
            put_u64(&h, (uint64_t)in->src_index);
            break;
        }
    }
    if (order != small) free(order);
    if (node_id) {
        put_u8(&h, 'X');
        put_str(&h, node_id);
    }
    sd_sha256_final(&h, out);
}

sd_status sd_key_file_hash(const sd_cache_i *cache, const char *path, uint8_t out[SD_KEY_SIZE],
                           sd_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return sd_error_set(err, SD_ERR_NOT_FOUND, "cannot stat '%s'", path);
    char abs[PATH_MAX];
    const char *key_path = realpath(path, abs) ? abs : path;
    int64_t size = (int64_t)st.st_size;
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (cache && cache->file_hash_get &&
        cache->file_hash_get(cache->self, key_path, size, mtime, out) == SD_OK)
        return SD_OK;
    sd_status rc = sd_sha256_file(path, out, err);
    if (rc) return rc;
    if (cache && cache->file_hash_put) cache->file_hash_put(cache->self, key_path, size, mtime, out);
    return SD_OK;
}
