/* value_io.c - the cache blob format (see value_io.h and docs/cache.md).
 *
 * Encoding is two passes over the tree: measure, then write into one exact
 * allocation, so large tensors are copied once. Decoding is a bounds-checked
 * cursor; nothing is allocated from a length before that length has been
 * checked against the bytes that remain.
 */
#include "value_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t MAGIC[4] = {'S', 'D', 'F', 'V'};
#define HEADER_SIZE 8

/* Kind tags in the blob. Fixed numbers, independent of enum sd_value_kind,
 * so that reordering the enum cannot silently change the format. */
enum {
    TAG_NONE = 0,
    TAG_INT = 1,
    TAG_FLOAT = 2,
    TAG_BOOL = 3,
    TAG_STRING = 4,
    TAG_TENSOR = 5,
    TAG_LIST = 6,
    TAG_DICT = 7,
};

/* dtype codes in the blob, by the same reasoning. */
static const struct { sd_dtype dt; uint8_t code; } DTYPES[] = {
    {SD_F32, 0}, {SD_F16, 1}, {SD_BF16, 2}, {SD_F64, 3}, {SD_I64, 4},
    {SD_I32, 5}, {SD_I16, 6}, {SD_I8, 7},   {SD_U8, 8},  {SD_BOOL, 9},
    {SD_F8_E4M3, 10}, {SD_F8_E5M2, 11},
};
#define N_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

static int dtype_code(sd_dtype dt, uint8_t *code) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (DTYPES[i].dt == dt) { *code = DTYPES[i].code; return 1; }
    return 0;
}

static int dtype_from_code(uint8_t code, sd_dtype *dt) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (DTYPES[i].code == code) { *dt = DTYPES[i].dt; return 1; }
    return 0;
}

/* ---- encoding ------------------------------------------------------------- */

/* Path of the value being visited ("root['samples'][2]"), for errors. */
typedef struct enc {
    uint8_t *p;   /* NULL while measuring */
    size_t n;     /* bytes written or measured */
    char path[512];
} enc;

static void put(enc *e, const void *src, size_t n) {
    if (e->p) memcpy(e->p + e->n, src, n);
    e->n += n;
}

static void put_u8(enc *e, uint8_t v) { put(e, &v, 1); }

static void put_u64(enc *e, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(e, b, 8);
}

static void put_str(enc *e, const char *s) {
    size_t l = strlen(s);
    put_u64(e, l);
    put(e, s, l);
}

/* Tensor bytes are written little-endian element by element on a
 * big-endian host; on little-endian hosts (all we build for) it is a copy. */
static void put_tensor_bytes(enc *e, const sd_tensor *t) {
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe == 1 || sd_dtype_size(t->dtype) == 1) {
        put(e, t->data, t->nbytes);
        return;
    }
    size_t es = sd_dtype_size(t->dtype);
    const uint8_t *s = t->data;
    for (size_t i = 0; i < t->nbytes; i += es) {
        uint8_t tmp[8];
        for (size_t k = 0; k < es; k++) tmp[k] = s[i + es - 1 - k];
        put(e, tmp, es);
    }
}

static sd_status enc_value(enc *e, const sd_value *v, int depth, sd_error *err) {
    if (depth > SD_VALUE_IO_MAX_DEPTH)
        return sd_error_set(err, SD_ERR_INVALID, "serialize: value nested deeper than %d at %s",
                            SD_VALUE_IO_MAX_DEPTH, e->path);
    switch (sd_value_kind_of(v)) {
    case SD_VAL_NONE:
        put_u8(e, TAG_NONE);
        return SD_OK;
    case SD_VAL_INT:
        put_u8(e, TAG_INT);
        put_u64(e, (uint64_t)sd_value_as_int(v));
        return SD_OK;
    case SD_VAL_FLOAT: {
        double d = sd_value_as_float(v);
        uint64_t bits;
        memcpy(&bits, &d, 8);
        put_u8(e, TAG_FLOAT);
        put_u64(e, bits);
        return SD_OK;
    }
    case SD_VAL_BOOL:
        put_u8(e, TAG_BOOL);
        put_u8(e, sd_value_as_bool(v) ? 1 : 0);
        return SD_OK;
    case SD_VAL_STRING:
        put_u8(e, TAG_STRING);
        put_str(e, sd_value_as_string(v));
        return SD_OK;
    case SD_VAL_TENSOR: {
        const sd_tensor *t = sd_value_as_tensor(v);
        uint8_t code;
        if (!dtype_code(t->dtype, &code) || t->ndim < 0 || t->ndim > SD_MAX_DIMS)
            return sd_error_set(err, SD_ERR_INVALID, "serialize: tensor at %s has an invalid dtype or rank",
                                e->path);
        put_u8(e, TAG_TENSOR);
        put_u8(e, code);
        put_u8(e, (uint8_t)t->ndim);
        for (int i = 0; i < t->ndim; i++) put_u64(e, (uint64_t)t->shape[i]);
        put_u64(e, t->nbytes);
        put_tensor_bytes(e, t);
        return SD_OK;
    }
    case SD_VAL_LIST:
    case SD_VAL_DICT: {
        int dict = sd_value_kind_of(v) == SD_VAL_DICT;
        size_t n = dict ? sd_value_dict_len(v) : sd_value_list_len(v);
        put_u8(e, dict ? TAG_DICT : TAG_LIST);
        put_u64(e, n);
        size_t plen = strlen(e->path);
        for (size_t i = 0; i < n; i++) {
            if (dict) {
                const char *k = sd_value_dict_key(v, i);
                put_str(e, k);
                snprintf(e->path + plen, sizeof e->path - plen, "['%s']", k);
            } else {
                snprintf(e->path + plen, sizeof e->path - plen, "[%zu]", i);
            }
            sd_status st = enc_value(e, dict ? sd_value_dict_at(v, i) : sd_value_list_get(v, i), depth + 1, err);
            if (st != SD_OK) return st;
            e->path[plen] = 0;
        }
        return SD_OK;
    }
    case SD_VAL_HANDLE: {
        const sd_handle_type *ht = sd_value_handle_type(v);
        return sd_error_set(err, SD_ERR_INVALID, "serialize: %s at %s is a live handle, not data",
                            ht && ht->type_name ? ht->type_name : "handle", e->path);
    }
    }
    return sd_error_set(err, SD_ERR_INTERNAL, "serialize: unknown value kind at %s", e->path);
}

sd_status sd_value_serialize(const sd_value *v, void **out, size_t *size, sd_error *err) {
    *out = NULL;
    *size = 0;
    if (!v) return sd_error_set(err, SD_ERR_INVALID, "serialize: NULL value");
    enc e = {0};
    strcpy(e.path, "root");
    e.n = HEADER_SIZE; /* measuring pass: only counts */
    sd_status st = enc_value(&e, v, 0, err);
    if (st != SD_OK) return st;
    size_t total = e.n;
    uint8_t *buf = malloc(total);
    if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "serialize: out of memory for %zu bytes", total);
    e.p = buf;
    e.n = 0;
    strcpy(e.path, "root");
    put(&e, MAGIC, 4);
    uint8_t ver[4] = {SD_VALUE_IO_VERSION & 0xff, SD_VALUE_IO_VERSION >> 8, 0, 0};
    put(&e, ver, 4);
    st = enc_value(&e, v, 0, err);
    if (st != SD_OK || e.n != total) {
        free(buf);
        return st != SD_OK ? st : sd_error_set(err, SD_ERR_INTERNAL, "serialize: size changed between passes");
    }
    *out = buf;
    *size = total;
    return SD_OK;
}

/* ---- decoding -------------------------------------------------------------- */

typedef struct dec {
    const uint8_t *p;
    size_t n, at;
    sd_error *err;
} dec;

static sd_status bad(dec *d, const char *what) {
    return sd_error_set(d->err, SD_ERR_FORMAT, "corrupt value blob: %s at byte %zu of %zu", what, d->at, d->n);
}

static int left(const dec *d, size_t k) { return d->n - d->at >= k; }

static int get_u8(dec *d, uint8_t *v) {
    if (!left(d, 1)) return 0;
    *v = d->p[d->at++];
    return 1;
}

static int get_u64(dec *d, uint64_t *v) {
    if (!left(d, 8)) return 0;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | d->p[d->at + i];
    d->at += 8;
    *v = x;
    return 1;
}

/* A length-prefixed string without NUL bytes; malloc'd copy. */
static sd_status get_str(dec *d, char **out) {
    uint64_t l;
    *out = NULL;
    if (!get_u64(d, &l)) return bad(d, "truncated string length");
    if (!left(d, l)) return bad(d, "string longer than the blob");
    if (memchr(d->p + d->at, 0, l)) return bad(d, "NUL byte inside a string");
    char *s = malloc(l + 1);
    if (!s) return sd_error_set(d->err, SD_ERR_NOMEM, "deserialize: out of memory");
    memcpy(s, d->p + d->at, l);
    s[l] = 0;
    d->at += l;
    *out = s;
    return SD_OK;
}

static sd_status dec_value(dec *d, int depth, sd_value **out);

static sd_status dec_tensor(dec *d, sd_value **out) {
    uint8_t code, nd;
    sd_dtype dt;
    if (!get_u8(d, &code) || !get_u8(d, &nd)) return bad(d, "truncated tensor header");
    if (!dtype_from_code(code, &dt)) return bad(d, "unknown tensor dtype code");
    if (nd > SD_MAX_DIMS) return bad(d, "tensor rank too large");
    int64_t shape[SD_MAX_DIMS];
    uint64_t bytes = sd_dtype_size(dt);
    int zero = 0;
    for (int i = 0; i < nd; i++) {
        uint64_t s;
        if (!get_u64(d, &s)) return bad(d, "truncated tensor shape");
        if (s > (uint64_t)INT64_MAX) return bad(d, "negative tensor dimension");
        shape[i] = (int64_t)s;
        if (s == 0) zero = 1;
    }
    /* numel * size must fit in what is left of the blob, so saturate there */
    size_t rest = d->n - d->at;
    if (zero) bytes = 0;
    for (int i = 0; i < nd && bytes && bytes != UINT64_MAX; i++)
        bytes = (uint64_t)shape[i] > rest / bytes ? UINT64_MAX : bytes * (uint64_t)shape[i];
    uint64_t nbytes;
    if (!get_u64(d, &nbytes)) return bad(d, "truncated tensor byte count");
    if (nbytes != bytes) return bad(d, "tensor byte count does not match its shape");
    if (!left(d, nbytes)) return bad(d, "tensor data longer than the blob");
    sd_tensor *t = sd_tensor_new(dt, nd, shape);
    if (!t) return sd_error_set(d->err, SD_ERR_NOMEM, "deserialize: out of memory for a tensor of %llu bytes",
                                (unsigned long long)nbytes);
    const uint16_t probe = 1;
    size_t es = sd_dtype_size(dt);
    if (*(const uint8_t *)&probe == 1 || es == 1) {
        memcpy(t->data, d->p + d->at, nbytes);
    } else {
        uint8_t *o = t->data;
        for (size_t i = 0; i < nbytes; i += es)
            for (size_t k = 0; k < es; k++) o[i + k] = d->p[d->at + i + es - 1 - k];
    }
    d->at += nbytes;
    *out = sd_value_tensor(t);
    sd_tensor_unref(t);
    return *out ? SD_OK : sd_error_set(d->err, SD_ERR_NOMEM, "deserialize: out of memory");
}

static sd_status dec_container(dec *d, int dict, int depth, sd_value **out) {
    uint64_t n;
    if (!get_u64(d, &n)) return bad(d, "truncated item count");
    /* every item takes at least one byte: a count beyond that is a lie */
    if (n > d->n - d->at) return bad(d, "item count larger than the blob");
    sd_value *c = dict ? sd_value_dict() : sd_value_list();
    if (!c) return sd_error_set(d->err, SD_ERR_NOMEM, "deserialize: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        char *key = NULL;
        sd_status st;
        if (dict) {
            size_t kat = d->at;
            if ((st = get_str(d, &key)) != SD_OK) goto fail;
            if (sd_value_dict_get(c, key)) {
                d->at = kat;
                st = bad(d, "duplicate dict key");
                free(key);
                goto fail;
            }
        }
        sd_value *item = NULL;
        if ((st = dec_value(d, depth + 1, &item)) != SD_OK) {
            free(key);
            goto fail;
        }
        int rc = dict ? sd_value_dict_set(c, key, item) : sd_value_list_append(c, item);
        free(key);
        if (rc != 0) {
            st = sd_error_set(d->err, SD_ERR_NOMEM, "deserialize: out of memory");
            goto fail;
        }
        continue;
    fail:
        sd_value_unref(c);
        return st;
    }
    *out = c;
    return SD_OK;
}

static sd_status dec_value(dec *d, int depth, sd_value **out) {
    *out = NULL;
    if (depth > SD_VALUE_IO_MAX_DEPTH) return bad(d, "nesting too deep");
    uint8_t tag;
    if (!get_u8(d, &tag)) return bad(d, "truncated value");
    switch (tag) {
    case TAG_NONE:
        *out = sd_value_none();
        break;
    case TAG_INT: {
        uint64_t x;
        if (!get_u64(d, &x)) return bad(d, "truncated int");
        *out = sd_value_int((int64_t)x);
        break;
    }
    case TAG_FLOAT: {
        uint64_t x;
        double f;
        if (!get_u64(d, &x)) return bad(d, "truncated float");
        memcpy(&f, &x, 8);
        *out = sd_value_float(f);
        break;
    }
    case TAG_BOOL: {
        uint8_t b;
        if (!get_u8(d, &b)) return bad(d, "truncated bool");
        if (b > 1) {
            d->at--;
            return bad(d, "bool that is neither 0 nor 1");
        }
        *out = sd_value_bool(b);
        break;
    }
    case TAG_STRING: {
        char *s;
        sd_status st = get_str(d, &s);
        if (st != SD_OK) return st;
        *out = sd_value_string(s);
        free(s);
        break;
    }
    case TAG_TENSOR:
        return dec_tensor(d, out);
    case TAG_LIST:
    case TAG_DICT:
        return dec_container(d, tag == TAG_DICT, depth, out);
    default:
        d->at--;
        return bad(d, "unknown value tag");
    }
    return *out ? SD_OK : sd_error_set(d->err, SD_ERR_NOMEM, "deserialize: out of memory");
}

sd_status sd_value_deserialize(const void *data, size_t size, sd_value **out, sd_error *err) {
    *out = NULL;
    dec d = {data, data ? size : 0, 0, err};
    if (d.n < HEADER_SIZE) return bad(&d, "blob shorter than its header");
    if (memcmp(d.p, MAGIC, 4) != 0) return bad(&d, "bad magic (not an sdflow value blob)");
    unsigned ver = d.p[4] | (unsigned)d.p[5] << 8;
    unsigned flags = d.p[6] | (unsigned)d.p[7] << 8;
    if (ver != SD_VALUE_IO_VERSION)
        return sd_error_set(err, ver > SD_VALUE_IO_VERSION ? SD_ERR_UNSUPPORTED : SD_ERR_FORMAT,
                            "value blob has format version %u; this sdflow reads version %d", ver,
                            SD_VALUE_IO_VERSION);
    d.at = HEADER_SIZE;
    if (flags != 0) {
        d.at = 6;
        return bad(&d, "unknown flags");
    }
    sd_value *v = NULL;
    sd_status st = dec_value(&d, 0, &v);
    if (st != SD_OK) return st;
    if (d.at != d.n) {
        sd_value_unref(v);
        return bad(&d, "trailing bytes after the value");
    }
    *out = v;
    return SD_OK;
}

/* ---- equality ------------------------------------------------------------- */

int sd_value_equal(const sd_value *a, const sd_value *b) {
    sd_value_kind k = sd_value_kind_of(a);
    if (k != sd_value_kind_of(b)) return 0;
    switch (k) {
    case SD_VAL_NONE: return 1;
    case SD_VAL_INT: return sd_value_as_int(a) == sd_value_as_int(b);
    case SD_VAL_FLOAT: {
        double x = sd_value_as_float(a), y = sd_value_as_float(b);
        return memcmp(&x, &y, sizeof x) == 0 || x == y;
    }
    case SD_VAL_BOOL: return sd_value_as_bool(a) == sd_value_as_bool(b);
    case SD_VAL_STRING: return strcmp(sd_value_as_string(a), sd_value_as_string(b)) == 0;
    case SD_VAL_TENSOR: {
        const sd_tensor *x = sd_value_as_tensor(a), *y = sd_value_as_tensor(b);
        if (x->dtype != y->dtype || x->ndim != y->ndim || x->nbytes != y->nbytes) return 0;
        for (int i = 0; i < x->ndim; i++)
            if (x->shape[i] != y->shape[i]) return 0;
        return x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0;
    }
    case SD_VAL_LIST: {
        size_t n = sd_value_list_len(a);
        if (n != sd_value_list_len(b)) return 0;
        for (size_t i = 0; i < n; i++)
            if (!sd_value_equal(sd_value_list_get(a, i), sd_value_list_get(b, i))) return 0;
        return 1;
    }
    case SD_VAL_DICT: {
        size_t n = sd_value_dict_len(a);
        if (n != sd_value_dict_len(b)) return 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(sd_value_dict_key(a, i), sd_value_dict_key(b, i)) != 0) return 0;
            if (!sd_value_equal(sd_value_dict_at(a, i), sd_value_dict_at(b, i))) return 0;
        }
        return 1;
    }
    case SD_VAL_HANDLE:
        return sd_value_handle_type(a) == sd_value_handle_type(b) &&
               sd_value_as_handle(a, NULL) == sd_value_as_handle(b, NULL);
    }
    return 0;
}
