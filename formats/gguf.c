/* gguf.c - the GGUF reader (gguf.h): parse and validate the header over the
 * file's bytes, and index it for the sd_st_file weights view.
 *
 * Every read goes through a cursor that checks the bytes are there first;
 * counts are checked against the bytes left before anything is allocated
 * for them, and the arrays of key/values and tensors grow as items are
 * actually read, so a file claiming a billion tensors fails after reading
 * what it really holds, never at a giant calloc.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/text.h"

#define GGUF_DEFAULT_ALIGNMENT 32

/* ---- ggml types ------------------------------------------------------------ */

static const struct gtype {
    uint32_t id;
    const char *name;
    uint32_t block, bytes;
    int dtype; /* sd_dtype, -1 = none */
} gtypes[] = {
    {0, "F32", 1, 4, SD_F32},          {1, "F16", 1, 2, SD_F16},
    {2, "Q4_0", 32, 18, SD_Q4_0},      {3, "Q4_1", 32, 20, SD_Q4_1},
    {6, "Q5_0", 32, 22, SD_Q5_0},      {7, "Q5_1", 32, 24, SD_Q5_1},
    {8, "Q8_0", 32, 34, SD_Q8_0},      {9, "Q8_1", 32, 36, -1},
    {10, "Q2_K", 256, 84, SD_Q2_K},    {11, "Q3_K", 256, 110, SD_Q3_K},
    {12, "Q4_K", 256, 144, SD_Q4_K},   {13, "Q5_K", 256, 176, SD_Q5_K},
    {14, "Q6_K", 256, 210, SD_Q6_K},   {15, "Q8_K", 256, 292, -1},
    {16, "IQ2_XXS", 256, 66, -1},      {17, "IQ2_XS", 256, 74, -1},
    {18, "IQ3_XXS", 256, 98, -1},      {19, "IQ1_S", 256, 50, -1},
    {20, "IQ4_NL", 32, 18, SD_IQ4_NL}, {21, "IQ3_S", 256, 110, -1},
    {22, "IQ2_S", 256, 82, -1},        {23, "IQ4_XS", 256, 136, SD_IQ4_XS},
    {24, "I8", 1, 1, SD_I8},           {25, "I16", 1, 2, SD_I16},
    {26, "I32", 1, 4, SD_I32},         {27, "I64", 1, 8, SD_I64},
    {28, "F64", 1, 8, SD_F64},         {29, "IQ1_M", 256, 56, -1},
    {30, "BF16", 1, 2, SD_BF16},       {34, "TQ1_0", 256, 54, -1},
    {35, "TQ2_0", 256, 66, -1},        {39, "MXFP4", 32, 17, -1},
};

static const struct gtype *gtype_of(uint32_t id) {
    for (size_t i = 0; i < sizeof gtypes / sizeof gtypes[0]; i++)
        if (gtypes[i].id == id) return &gtypes[i];
    return NULL;
}

const char *sd_gguf_type_name(uint32_t type) {
    const struct gtype *t = gtype_of(type);
    return t ? t->name : NULL;
}

int sd_gguf_type_block(uint32_t type, uint32_t *block, uint32_t *bytes) {
    const struct gtype *t = gtype_of(type);
    if (!t) return 0;
    if (block) *block = t->block;
    if (bytes) *bytes = t->bytes;
    return 1;
}

int sd_gguf_type_dtype(uint32_t type, sd_dtype *out) {
    const struct gtype *t = gtype_of(type);
    if (!t || t->dtype < 0) return 0;
    *out = (sd_dtype)t->dtype;
    return 1;
}

int sd_gguf_dtype_type(sd_dtype dt, uint32_t *type) {
    for (size_t i = 0; i < sizeof gtypes / sizeof gtypes[0]; i++)
        if (gtypes[i].dtype == (int)dt) {
            *type = gtypes[i].id;
            return 1;
        }
    return 0;
}

/* ---- the parsed file ------------------------------------------------------------ */

struct sd_gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    uint32_t version, alignment;
    uint64_t data_offset;
    sd_gguf_kv *kvs;
    size_t n_kv, cap_kv;
    size_t *kv_sorted; /* kv indices by key */
    sd_gguf_tensor *tensors;
    size_t n_t, cap_t;
    size_t *t_sorted; /* tensor indices by name */
};

void sd_gguf_free(sd_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) free((char *)g->kvs[i].key);
    for (size_t i = 0; i < g->n_t; i++) free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_sorted);
    free(g->t_sorted);
    free(g->path);
    free(g);
}

/* ---- reading ------------------------------------------------------------------ */

typedef struct rd {
    const uint8_t *p;
    size_t size, at;
    const char *path;
    sd_error *err;
} rd;

static size_t left(const rd *r) { return r->size - r->at; }

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int get_u32(rd *r, uint32_t *v) {
    if (left(r) < 4) return 0;
    *v = (uint32_t)le(r->p + r->at, 4);
    r->at += 4;
    return 1;
}

static int get_u64(rd *r, uint64_t *v) {
    if (left(r) < 8) return 0;
    *v = le(r->p + r->at, 8);
    r->at += 8;
    return 1;
}

static sd_status truncated(rd *r, const char *what, const char *name) {
    if (name)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s '%s' runs past the end of the file (%zu bytes; truncated?)",
                            r->path, what, name, r->size);
    return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s runs past the end of the file (%zu bytes; truncated?)",
                        r->path, what, r->size);
}

/* A string: *s points at its bytes in the file. */
static int get_str(rd *r, const uint8_t **s, uint64_t *len) {
    uint64_t n;
    size_t at = r->at;
    if (!get_u64(r, &n)) return 0;
    if (n > left(r)) {
        r->at = at;
        return 0;
    }
    *s = r->p + r->at;
    *len = n;
    r->at += (size_t)n;
    return 1;
}

/* A NUL-terminated copy of a key or tensor name, which must be non-empty
 * UTF-8 without NUL (they become C strings and appear in messages). NULL
 * with the error set. */
static char *name_copy(rd *r, const uint8_t *s, uint64_t len, const char *what, size_t index) {
    size_t off = 0;
    sd_text_problem p = len ? sd_text_check((const char *)s, (size_t)len, &off) : SD_TEXT_OK;
    if (!len || p != SD_TEXT_OK) {
        if (!len) sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s %zu has an empty name", r->path, what, index);
        else
            sd_error_set(r->err, SD_ERR_FORMAT, "%s: the name of %s %zu has %s at byte %zu", r->path, what, index,
                         sd_text_problem_describe(p), off);
        return NULL;
    }
    char *c = malloc((size_t)len + 1);
    if (!c) {
        sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
        return NULL;
    }
    memcpy(c, s, (size_t)len);
    c[len] = 0;
    return c;
}

static int scalar_size(uint32_t t) {
    switch (t) {
    case SD_GGUF_U8: case SD_GGUF_I8: case SD_GGUF_BOOL: return 1;
    case SD_GGUF_U16: case SD_GGUF_I16: return 2;
    case SD_GGUF_U32: case SD_GGUF_I32: case SD_GGUF_F32: return 4;
    case SD_GGUF_U64: case SD_GGUF_I64: case SD_GGUF_F64: return 8;
    default: return 0;
    }
}

/* Checks the value of type t at the cursor and moves past it. */
static sd_status skip_value(rd *r, uint32_t t, int depth, const char *key) {
    int ss = scalar_size(t);
    if (ss) {
        if (left(r) < (size_t)ss) return truncated(r, "the value of key", key);
        r->at += (size_t)ss;
        return SD_OK;
    }
    if (t == SD_GGUF_STRING) {
        const uint8_t *s;
        uint64_t n;
        return get_str(r, &s, &n) ? SD_OK : truncated(r, "the string value of key", key);
    }
    if (t != SD_GGUF_ARRAY)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: key '%s' has unknown value type %u", r->path, key, t);
    if (depth >= SD_GGUF_MAX_DEPTH)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: key '%s' nests arrays deeper than %d", r->path, key,
                            SD_GGUF_MAX_DEPTH);
    uint32_t it;
    uint64_t count;
    if (!get_u32(r, &it) || !get_u64(r, &count)) return truncated(r, "the array header of key", key);
    int is = scalar_size(it);
    if (is) {
        if (count > left(r) / (size_t)is) return truncated(r, "the array of key", key);
        r->at += (size_t)count * (size_t)is;
        return SD_OK;
    }
    if (it != SD_GGUF_STRING && it != SD_GGUF_ARRAY)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: key '%s' is an array of unknown type %u", r->path, key, it);
    /* each string takes at least 8 bytes, each array 12 */
    if (count > left(r) / (it == SD_GGUF_STRING ? 8 : 12)) return truncated(r, "the array of key", key);
    for (uint64_t i = 0; i < count; i++) {
        sd_status st = skip_value(r, it, depth + 1, key);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

static sd_status parse_kvs(sd_gguf *g, rd *r, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *ks;
        uint64_t klen;
        uint32_t t;
        if (!get_str(r, &ks, &klen)) return truncated(r, "a key/value key", NULL);
        char *key = name_copy(r, ks, klen, "key/value", (size_t)i);
        if (!key) return r->err->code;
        if (g->n_kv == g->cap_kv) {
            size_t nc = g->cap_kv ? g->cap_kv * 2 : 16;
            sd_gguf_kv *nk = realloc(g->kvs, nc * sizeof *nk);
            if (!nk) {
                free(key);
                return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
            }
            g->kvs = nk;
            g->cap_kv = nc;
        }
        sd_gguf_kv *kv = &g->kvs[g->n_kv++];
        memset(kv, 0, sizeof *kv);
        kv->key = key;
        if (!get_u32(r, &t)) return truncated(r, "the type of key", key);
        kv->type = (sd_gguf_vtype)t;
        kv->count = 1;
        size_t start = r->at;
        if (t == SD_GGUF_ARRAY) {
            if (left(r) < 12) return truncated(r, "the array header of key", key);
            kv->item_type = (sd_gguf_vtype)le(r->p + r->at, 4);
            kv->count = le(r->p + r->at + 4, 8);
        }
        sd_status st = skip_value(r, t, 0, key);
        if (st != SD_OK) return st;
        kv->value = r->p + start + (t == SD_GGUF_ARRAY ? 12 : 0);
        kv->nbytes = r->at - start - (t == SD_GGUF_ARRAY ? 12 : 0);
    }
    return SD_OK;
}

static const char *shape_text(const sd_gguf_tensor *t, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", t->ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

/* One tensor info; offsets are checked later, once the data section is
 * known. */
static sd_status parse_tensor(sd_gguf *g, rd *r, size_t i) {
    const uint8_t *ns;
    uint64_t nlen;
    if (!get_str(r, &ns, &nlen)) return truncated(r, "a tensor name", NULL);
    char *name = name_copy(r, ns, nlen, "tensor", i);
    if (!name) return r->err->code;
    if (g->n_t == g->cap_t) {
        size_t nc = g->cap_t ? g->cap_t * 2 : 64;
        sd_gguf_tensor *nt = realloc(g->tensors, nc * sizeof *nt);
        if (!nt) {
            free(name);
            return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
        }
        g->tensors = nt;
        g->cap_t = nc;
    }
    sd_gguf_tensor *t = &g->tensors[g->n_t++];
    memset(t, 0, sizeof *t);
    t->name = name;
    uint32_t nd;
    if (!get_u32(r, &nd)) return truncated(r, "the info of tensor", name);
    if (nd > SD_GGUF_MAX_DIMS)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (GGUF allows at most %d)",
                            r->path, name, nd, SD_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v;
        if (!get_u64(r, &v)) return truncated(r, "the info of tensor", name);
        if (v > (uint64_t)INT64_MAX)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s': dimension %u is %" PRIu64 " (negative)",
                                r->path, name, d, v);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    if (!get_u32(r, &type) || !get_u64(r, &t->offset)) return truncated(r, "the info of tensor", name);
    t->type = type;
    const struct gtype *gt = gtype_of(type);
    if (!gt)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s' has unknown ggml type %u", r->path, name, type);
    char sh[128];
    if (nd > 0 && t->ne[0] % gt->block != 0)
        return sd_error_set(r->err, SD_ERR_FORMAT,
                            "%s: tensor '%s' of type %s has rows of %" PRId64 " elements, not a multiple of its "
                            "block of %u (shape %s)",
                            r->path, name, gt->name, t->ne[0], gt->block, shape_text(t, sh, sizeof sh));
    if (nd == 0 && gt->block != 1)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s' of block type %s has no dimensions", r->path,
                            name, gt->name);
    /* Byte size, saturating at anything larger than the whole file. */
    uint64_t blocks = 1, cap = (uint64_t)r->size / gt->bytes + 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v = (uint64_t)t->ne[d] / (d == 0 ? gt->block : 1);
        if (v == 0) {
            blocks = 0;
            break;
        }
        blocks = blocks > cap / v ? cap : blocks * v;
        if (blocks > cap) blocks = cap;
    }
    if (blocks >= cap)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s' of shape %s %s is larger than the file", r->path,
                            name, shape_text(t, sh, sizeof sh), gt->name);
    t->nbytes = blocks * gt->bytes;
    return SD_OK;
}

/* Sorting by name or offset without a global comparison context: each
 * index is sorted together with its key. */
typedef struct skey {
    const char *name;
    uint64_t off, len;
    size_t idx;
} skey;

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const skey *)a)->name, ((const skey *)b)->name);
}

static int cmp_off(const void *a, const void *b) {
    const skey *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* idx[0..n) = the items ordered by cmp; 0 when out of memory. */
static int sort_idx(const sd_gguf *g, int tensors, size_t *idx, size_t n, int (*cmp)(const void *, const void *)) {
    skey *k = malloc((n + 1) * sizeof *k);
    if (!k) return 0;
    for (size_t i = 0; i < n; i++) {
        k[i].idx = i;
        k[i].name = tensors ? g->tensors[i].name : g->kvs[i].key;
        k[i].off = tensors ? g->tensors[i].offset : 0;
        k[i].len = tensors ? g->tensors[i].nbytes : 0;
    }
    if (n) qsort(k, n, sizeof *k, cmp);
    for (size_t i = 0; i < n; i++) idx[i] = k[i].idx;
    free(k);
    return 1;
}

/* Alignment, the data section, and each tensor's place in it. */
static sd_status check_layout(sd_gguf *g, rd *r) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const sd_gguf_kv *a = sd_gguf_find_kv(g, "general.alignment");
    if (a) {
        if (a->type != SD_GGUF_U32)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: general.alignment has type %u, not UINT32", r->path,
                                (unsigned)a->type);
        uint32_t v = (uint32_t)le(a->value, 4);
        if (v == 0 || (v & (v - 1)) != 0)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: general.alignment %u is not a power of two", r->path, v);
        g->alignment = v;
    }
    uint64_t off = r->at, pad = off % g->alignment;
    g->data_offset = pad ? off + (g->alignment - pad) : off;
    uint64_t data_size = g->data_offset <= r->size ? r->size - g->data_offset : 0;
    for (size_t i = 0; i < g->n_t; i++) {
        sd_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s' is at offset %" PRIu64
                                ", not a multiple of the alignment %u", r->path, t->name, t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return sd_error_set(r->err, SD_ERR_FORMAT,
                                "%s: tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64
                                ") runs past the end of the data section of %" PRIu64 " bytes (truncated?)",
                                r->path, t->name, t->nbytes, t->offset, data_size);
    }
    size_t *by_off = malloc((g->n_t + 1) * sizeof *by_off);
    if (!by_off || !sort_idx(g, 1, by_off, g->n_t, cmp_off)) {
        free(by_off);
        return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
    }
    const sd_gguf_tensor *prev = NULL;
    for (size_t i = 0; i < g->n_t; i++) {
        const sd_gguf_tensor *t = &g->tensors[by_off[i]];
        if (!t->nbytes) continue;
        if (prev && t->offset < prev->offset + prev->nbytes) {
            sd_status st = sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section",
                                        r->path, prev->name, t->name);
            free(by_off);
            return st;
        }
        prev = t;
    }
    free(by_off);
    for (size_t i = 0; i < g->n_t; i++) g->tensors[i].offset += g->data_offset;
    return SD_OK;
}

static sd_status parse(sd_gguf *g, rd *r) {
    if (r->size < 24)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %zu bytes is too short for a GGUF file", r->path, r->size);
    if (memcmp(r->p, "GGUF", 4) != 0) {
        if (memcmp(r->p, "FUGG", 4) == 0)
            return sd_error_set(r->err, SD_ERR_UNSUPPORTED, "%s: a big-endian GGUF file (not supported)", r->path);
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: not a GGUF file (no GGUF magic)", r->path);
    }
    r->at = 4;
    uint64_t nt, nkv;
    get_u32(r, &g->version);
    if ((g->version & 0xffffu) == 0 && g->version)
        return sd_error_set(r->err, SD_ERR_UNSUPPORTED, "%s: a big-endian GGUF file (not supported)", r->path);
    if (g->version != 2 && g->version != 3)
        return sd_error_set(r->err, SD_ERR_UNSUPPORTED, "%s: GGUF version %u (versions 2 and 3 are supported)",
                            r->path, g->version);
    get_u64(r, &nt);
    get_u64(r, &nkv);
    /* a key/value takes at least 13 bytes, a tensor info 24 */
    if (nkv > SD_GGUF_MAX_ITEMS || nkv > left(r) / 13)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %" PRIu64 " key/values cannot fit in %zu bytes%s", r->path,
                            nkv, r->size, nkv > SD_GGUF_MAX_ITEMS ? " (or exceed the limit)" : "");
    if (nt > SD_GGUF_MAX_ITEMS || nt > left(r) / 24)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %" PRIu64 " tensors cannot fit in %zu bytes%s", r->path, nt,
                            r->size, nt > SD_GGUF_MAX_ITEMS ? " (or exceed the limit)" : "");
    sd_status st = parse_kvs(g, r, nkv);
    if (st != SD_OK) return st;
    g->kv_sorted = malloc((g->n_kv + 1) * sizeof *g->kv_sorted);
    if (!g->kv_sorted || !sort_idx(g, 0, g->kv_sorted, g->n_kv, cmp_name))
        return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
    for (size_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->kvs[g->kv_sorted[i - 1]].key, g->kvs[g->kv_sorted[i]].key) == 0)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: key '%s' appears twice", r->path,
                                g->kvs[g->kv_sorted[i]].key);
    for (uint64_t i = 0; i < nt; i++)
        if ((st = parse_tensor(g, r, (size_t)i)) != SD_OK) return st;
    g->t_sorted = malloc((g->n_t + 1) * sizeof *g->t_sorted);
    if (!g->t_sorted || !sort_idx(g, 1, g->t_sorted, g->n_t, cmp_name))
        return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
    for (size_t i = 1; i < g->n_t; i++)
        if (strcmp(g->tensors[g->t_sorted[i - 1]].name, g->tensors[g->t_sorted[i]].name) == 0)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: tensor '%s' appears twice", r->path,
                                g->tensors[g->t_sorted[i]].name);
    return check_layout(g, r);
}

sd_status sd_gguf_parse(const void *data, size_t size, const char *name, sd_gguf **out, sd_error *err) {
    *out = NULL;
    sd_gguf *g = calloc(1, sizeof *g);
    if (g) g->path = strdup(name ? name : "<memory>");
    if (!g || !g->path) {
        sd_gguf_free(g);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", name ? name : "<memory>");
    }
    g->base = data;
    g->size = data ? size : 0;
    rd r = {data, g->size, 0, g->path, err};
    sd_error local;
    if (!err) r.err = &local; /* the parser reads the code back from it */
    sd_status st = parse(g, &r);
    if (st != SD_OK) {
        sd_gguf_free(g);
        return st;
    }
    *out = g;
    return SD_OK;
}

/* ---- queries ---------------------------------------------------------------------- */

const char *sd_gguf_name(const sd_gguf *g) { return g->path; }
uint32_t sd_gguf_version(const sd_gguf *g) { return g->version; }
uint32_t sd_gguf_alignment(const sd_gguf *g) { return g->alignment; }
uint64_t sd_gguf_data_offset(const sd_gguf *g) { return g->data_offset; }
size_t sd_gguf_kv_count(const sd_gguf *g) { return g->n_kv; }
const sd_gguf_kv *sd_gguf_kv_at(const sd_gguf *g, size_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }
size_t sd_gguf_tensor_count(const sd_gguf *g) { return g->n_t; }

const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, size_t i) {
    return i < g->n_t ? &g->tensors[i] : NULL;
}

const sd_gguf_kv *sd_gguf_find_kv(const sd_gguf *g, const char *key) {
    size_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, g->kvs[g->kv_sorted[mid]].key);
        if (c == 0) return &g->kvs[g->kv_sorted[mid]];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name) {
    size_t lo = 0, hi = g->n_t;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, g->tensors[g->t_sorted[mid]].name);
        if (c == 0) return &g->tensors[g->t_sorted[mid]];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

/* A scalar of type t at p as an integer / a float. */
static int scalar_int(uint32_t t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case SD_GGUF_U8: case SD_GGUF_BOOL: *out = p[0]; return 1;
    case SD_GGUF_I8: *out = (int8_t)p[0]; return 1;
    case SD_GGUF_U16: *out = (int64_t)le(p, 2); return 1;
    case SD_GGUF_I16: *out = (int16_t)le(p, 2); return 1;
    case SD_GGUF_U32: *out = (int64_t)le(p, 4); return 1;
    case SD_GGUF_I32: *out = (int32_t)le(p, 4); return 1;
    case SD_GGUF_I64: *out = (int64_t)le(p, 8); return 1;
    case SD_GGUF_U64: {
        uint64_t v = le(p, 8);
        if (v > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)v;
        return 1;
    }
    default: return 0;
    }
}

static int scalar_float(uint32_t t, const uint8_t *p, double *out) {
    if (t == SD_GGUF_F32) {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return 1;
    }
    if (t == SD_GGUF_F64) {
        uint64_t u = le(p, 8);
        memcpy(out, &u, 8);
        return 1;
    }
    return 0;
}

int sd_gguf_kv_int(const sd_gguf_kv *kv, int64_t *out) {
    return kv && kv->type != SD_GGUF_ARRAY && scalar_int(kv->type, kv->value, out);
}

int sd_gguf_kv_float(const sd_gguf_kv *kv, double *out) {
    return kv && kv->type != SD_GGUF_ARRAY && scalar_float(kv->type, kv->value, out);
}

int sd_gguf_kv_str(const sd_gguf_kv *kv, const char **s, size_t *len) {
    if (!kv || kv->type != SD_GGUF_STRING) return 0;
    *len = (size_t)le(kv->value, 8);
    *s = (const char *)kv->value + 8;
    return 1;
}

int sd_gguf_array_int(const sd_gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != SD_GGUF_ARRAY || i >= kv->count) return 0;
    int ss = scalar_size(kv->item_type);
    return ss && scalar_int(kv->item_type, kv->value + i * (uint64_t)ss, out);
}

int sd_gguf_array_float(const sd_gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || kv->type != SD_GGUF_ARRAY || i >= kv->count) return 0;
    int ss = scalar_size(kv->item_type);
    return ss && scalar_float(kv->item_type, kv->value + i * (uint64_t)ss, out);
}

int sd_gguf_kv_str_next(const sd_gguf_kv *kv, uint64_t *pos, const char **s, size_t *len) {
    if (!kv || kv->type != SD_GGUF_ARRAY || kv->item_type != SD_GGUF_STRING || *pos + 8 > kv->nbytes) return 0;
    uint64_t n = le(kv->value + *pos, 8); /* validated when parsed */
    *s = (const char *)kv->value + *pos + 8;
    *len = (size_t)n;
    *pos += 8 + n;
    return 1;
}

/* ---- the weights view ------------------------------------------------------------- */

/* The shape ComfyUI-GGUF gives tensor t: comfy.gguf.orig_shape.<name> when
 * present, else ne reversed. */
static sd_status torch_shape(const sd_gguf *g, const sd_gguf_tensor *t, int *ndim, int64_t *shape, sd_error *err) {
    char key[1024];
    snprintf(key, sizeof key, "comfy.gguf.orig_shape.%s", t->name);
    const sd_gguf_kv *kv = strlen(t->name) < sizeof key - 24 ? sd_gguf_find_kv(g, key) : NULL;
    if (!kv) {
        *ndim = t->n_dims;
        for (int i = 0; i < t->n_dims; i++) shape[i] = t->ne[t->n_dims - 1 - i];
        return SD_OK;
    }
    if (kv->type != SD_GGUF_ARRAY || kv->item_type != SD_GGUF_I32)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: bad original shape metadata for %s: expected an array of INT32",
                            g->path, key);
    if (kv->count > SD_MAX_DIMS)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: %s has %" PRIu64 " dimensions (at most %d supported)",
                            g->path, key, kv->count, SD_MAX_DIMS);
    uint64_t n = 1, numel = 1;
    for (int i = 0; i < t->n_dims; i++) numel *= (uint64_t)t->ne[i]; /* fits: checked against the file */
    for (uint64_t i = 0; i < kv->count; i++) {
        int64_t v;
        sd_gguf_array_int(kv, i, &v);
        if (v < 0)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: %s has a negative dimension", g->path, key);
        shape[i] = v;
        /* past numel it cannot match: stop growing (no overflow) */
        n = v == 0 ? 0 : n > numel / (uint64_t)v ? numel + 1 : n * (uint64_t)v;
    }
    if (n != numel)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: tensor '%s': %s does not hold the tensor's %" PRIu64 " elements", g->path, t->name,
                            key, numel);
    *ndim = (int)kv->count;
    return SD_OK;
}

/* Metadata as text: scalars and valid strings. */
static sd_status index_meta(const sd_gguf *g, sd_st_index *x, sd_error *err) {
    x->meta_keys = calloc(g->n_kv + 1, sizeof *x->meta_keys);
    x->meta_vals = calloc(g->n_kv + 1, sizeof *x->meta_vals);
    if (!x->meta_keys || !x->meta_vals) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", g->path);
    for (size_t i = 0; i < g->n_kv; i++) {
        const sd_gguf_kv *kv = &g->kvs[i];
        char buf[64], *val = NULL;
        int64_t iv;
        double fv;
        const char *s;
        size_t len;
        if (kv->type == SD_GGUF_BOOL) val = strdup(kv->value[0] ? "true" : "false");
        else if (sd_gguf_kv_int(kv, &iv)) val = (snprintf(buf, sizeof buf, "%" PRId64, iv), strdup(buf));
        else if (kv->type == SD_GGUF_U64) val = (snprintf(buf, sizeof buf, "%" PRIu64, le(kv->value, 8)), strdup(buf));
        else if (sd_gguf_kv_float(kv, &fv)) val = (snprintf(buf, sizeof buf, "%.17g", fv), strdup(buf));
        else if (sd_gguf_kv_str(kv, &s, &len) && sd_text_check(s, len, NULL) == SD_TEXT_OK) {
            val = malloc(len + 1);
            if (val) {
                memcpy(val, s, len);
                val[len] = 0;
            }
        } else continue;
        char *k = strdup(kv->key);
        if (!val || !k) {
            free(val);
            free(k);
            return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", g->path);
        }
        x->meta_keys[x->n_meta] = k;
        x->meta_vals[x->n_meta] = val;
        x->n_meta++;
    }
    return SD_OK;
}

/* Every occurrence of `from` in s replaced by `to` (malloc'd; NULL when
 * out of memory). */
static char *replace_all(const char *s, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = s; fl && (p = strstr(p, from)); p += fl) n++;
    char *out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1), *o = out;
    if (!out) return NULL;
    const char *p = s, *q;
    while (fl && (q = strstr(p, from))) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, tl);
        o += tl;
        p = q + fl;
    }
    strcpy(o, p);
    return out;
}

/* The entry name of stored tensor `name` (malloc'd), or NULL with *skip set
 * when the prefix rule leaves it out. */
static char *view_name(const sd_gguf_view_opts *o, int has_prefix, const char *name, int *skip) {
    *skip = 0;
    if (has_prefix) {
        size_t pl = strlen(o->strip_prefix);
        if (strncmp(name, o->strip_prefix, pl) != 0) {
            *skip = 1;
            return NULL;
        }
        name += pl;
    }
    char *cur = strdup(name);
    for (size_t i = 0; cur && o && o->replace && o->replace[i][0]; i++) {
        char *next = replace_all(cur, o->replace[i][0], o->replace[i][1]);
        free(cur);
        cur = next;
    }
    return cur;
}

static sd_status index_gguf(void *ctx, const uint8_t *base, size_t size, const char *path, sd_st_index *x,
                            sd_error *err) {
    const sd_gguf_view_opts *opts = ctx;
    sd_gguf *g;
    sd_status st = sd_gguf_parse(base, size, path, &g, err);
    if (st != SD_OK) return st;
    int has_prefix = 0;
    if (opts && opts->strip_prefix && *opts->strip_prefix)
        for (size_t i = 0; i < g->n_t && !has_prefix; i++)
            has_prefix = strncmp(g->tensors[i].name, opts->strip_prefix, strlen(opts->strip_prefix)) == 0;
    x->entries = calloc(g->n_t + 1, sizeof *x->entries);
    x->other_names = calloc(g->n_t + 1, sizeof *x->other_names);
    x->other_dtypes = calloc(g->n_t + 1, sizeof *x->other_dtypes);
    if (!x->entries || !x->other_names || !x->other_dtypes) {
        st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < g->n_t; i++) {
        const sd_gguf_tensor *t = &g->tensors[i];
        int skip;
        char *name = view_name(opts, has_prefix, t->name, &skip);
        if (skip) continue;
        if (!name) {
            st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        sd_dtype dt;
        if (!sd_gguf_type_dtype(t->type, &dt)) {
            x->other_names[x->n_other] = name;
            x->other_dtypes[x->n_other++] = sd_gguf_type_name(t->type);
            continue;
        }
        sd_st_entry *e = &x->entries[x->n];
        if ((st = torch_shape(g, t, &e->ndim, e->shape, err)) != SD_OK) {
            free(name);
            goto out;
        }
        e->name = name;
        e->dtype = dt;
        e->offset = t->offset;
        e->nbytes = t->nbytes;
        x->n++;
    }
    st = index_meta(g, x, err);
out:
    sd_gguf_free(g);
    return st;
}

sd_status sd_gguf_open(const char *path, sd_st_file **out, sd_error *err) {
    return sd_st_open_indexed(path, index_gguf, NULL, out, err);
}

sd_status sd_gguf_open_memory(const void *data, size_t size, const char *name, sd_st_file **out, sd_error *err) {
    return sd_st_open_memory_indexed(data, size, name, index_gguf, NULL, out, err);
}

sd_status sd_gguf_open_ex(const char *path, const sd_gguf_view_opts *opts, sd_st_file **out, sd_error *err) {
    return sd_st_open_indexed(path, index_gguf, (void *)opts, out, err);
}

sd_status sd_gguf_open_memory_ex(const void *data, size_t size, const char *name, const sd_gguf_view_opts *opts,
                                 sd_st_file **out, sd_error *err) {
    return sd_st_open_memory_indexed(data, size, name, index_gguf, (void *)opts, out, err);
}

int sd_gguf_is_gguf(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char m[4];
    ssize_t n = read(fd, m, 4);
    close(fd);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}
