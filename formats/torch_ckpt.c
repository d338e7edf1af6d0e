/* torch_ckpt.c - torch checkpoints through the restricted unpickler,
 * presented as an sd_st_file (see torch_ckpt.h): zip archives through
 * libzip, the legacy stream format from a mapping of the file. */
#include "torch_ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>
#include <zip.h>

#include "mapguard.h"
#include "pickle.h"

/* data.pkl of a real SDXL checkpoint is ~300 KB; anything near this is not a
 * weights file. */
#define TC_MAX_PKL ((zip_uint64_t)256 << 20)
#define TC_NOT_ZIP "not a readable zip archive (a truncated or damaged PyTorch checkpoint?)"
/* Nested dicts flattened into dotted keys. */
#define TC_MAX_DEPTH 16
/* Dict entries the flattening may visit in all. The memo lets one dict be
 * referenced from many places (a dict whose 1,000 values are all the same
 * dict, 16 levels deep, would name 1000^16 tensors): the walk's total work is
 * bounded, not only its depth. A real SDXL checkpoint has ~2,600 tensors. */
#define TC_MAX_VISITS ((size_t)1 << 20)

/* Where one tensor's bytes are. */
typedef struct tc_tensor {
    uint64_t where;      /* zip: the storage's entry index; legacy: its byte offset in the file */
    uint64_t start;      /* byte offset of the tensor's first element in the entry */
    uint64_t span;       /* bytes from start to past its last element */
    int contiguous;
    int ndim;
    int64_t shape[SD_MAX_DIMS], stride[SD_MAX_DIMS];
    size_t esize;
} tc_tensor;

typedef struct tc_ctx {
    zip_t *za;           /* zip format */
    unsigned char *crc_ok; /* zip: per entry, its CRC-32 was checked (see tc_read) */
    zip_uint64_t n_entries;
    const uint8_t *base; /* legacy format: the whole file */
    size_t size;
    int mapped;          /* munmap(base) on free */
    int guard;           /* mapguard slot of the mapping (-1 none) */
    char *path;
    tc_tensor *t;
    size_t n, cap;
} tc_ctx;

/* A storage of the legacy format: its bytes in the file. */
typedef struct lg_storage {
    const char *key;
    uint64_t off, bytes;
} lg_storage;

/* Everything open_archive / open_legacy need while building the entry list. */
typedef struct tc_build {
    tc_ctx *c;
    const char *path;
    const char *prefix; /* zip: archive directory, "archive" typically */
    lg_storage *lg;     /* legacy: storages sorted by key */
    size_t n_lg;
    sd_st_entry *entries;
    size_t n, cap;
    size_t visits; /* dict entries walked, bounded by TC_MAX_VISITS */
    sd_error *err;
    /* sd_torch_open_tree: every tensor object met and the entry name (its
     * path) it was recorded under; the names belong to the entries */
    struct tc_obj *objs;
    size_t n_objs, cap_objs;
} tc_build;

typedef struct tc_obj {
    const sd_pk_obj *o;
    const char *path;
} tc_obj;

struct sd_torch_tree {
    sd_st_file *file; /* the tensors, each named by its path */
    sd_pickle *pk;    /* owns root and everything under it */
    const sd_pk_obj *root;
    tc_obj *objs;     /* sorted by object address */
    size_t n;
};

static void ctx_free(void *p) {
    tc_ctx *c = p;
    if (!c) return;
    if (c->za) zip_discard(c->za); /* read-only: nothing to write back */
    free(c->crc_ok);
    if (c->mapped) {
        sd_mapguard_remove(c->guard);
        munmap((void *)c->base, c->size);
    }
    free(c->t);
    free(c->path);
    free(c);
}

static sd_status zip_fail(sd_error *err, const char *path, const char *what, zip_error_t *ze) {
    return sd_error_set(err, SD_ERR_FORMAT, "%s: %s: %s", path, what, zip_error_strerror(ze));
}

/* libzip checks an entry's CRC-32 (and its size) in the read that meets the
 * end of the data, when everything before was read in order: the read of
 * the last byte does not meet it, so one more read must return 0. A CRC
 * mismatch makes that read fail (ZIP_ER_CRC). 0 = checked and right. */
static int read_to_end(zip_file_t *zf) {
    uint8_t extra;
    return zip_fread(zf, &extra, 1) == 0 ? 0 : -1;
}

static sd_status crc_fail(sd_error *err, const char *path, const char *name, zip_file_t *zf) {
    zip_error_t *ze = zip_file_get_error(zf);
    if (zip_error_code_zip(ze) == ZIP_ER_CRC)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: %s: CRC-32 mismatch: the file is damaged", path, name);
    return sd_error_set(err, SD_ERR_FORMAT, "%s: %s: %s", path, name,
                        zip_error_code_zip(ze) ? zip_error_strerror(ze) : "more data than its entry says (damaged?)");
}

/* Reads a whole entry (at most max bytes) into a malloc'd buffer, its
 * CRC-32 checked. */
static sd_status read_entry(zip_t *za, zip_uint64_t idx, zip_uint64_t max, const char *path, const char *name,
                            uint8_t **out, size_t *len, sd_error *err) {
    *out = NULL;
    zip_stat_t st;
    if (zip_stat_index(za, idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        return zip_fail(err, path, name, zip_get_error(za));
    if (st.size > max)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: %s is %llu bytes (over the %llu MiB limit)", path, name,
                            (unsigned long long)st.size, (unsigned long long)(max >> 20));
    uint8_t *buf = malloc(st.size ? st.size : 1);
    if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "%s: %s: out of memory", path, name);
    zip_file_t *zf = zip_fopen_index(za, idx, 0);
    if (!zf) {
        free(buf);
        return zip_fail(err, path, name, zip_get_error(za));
    }
    zip_int64_t got = st.size ? zip_fread(zf, buf, st.size) : 0;
    sd_status rc = SD_OK;
    if (got < 0 || (zip_uint64_t)got != st.size)
        rc = got < 0 ? zip_fail(err, path, name, zip_file_get_error(zf))
                     : sd_error_set(err, SD_ERR_FORMAT, "%s: %s: short read (truncated archive?)", path, name);
    if (!rc && read_to_end(zf)) rc = crc_fail(err, path, name, zf);
    zip_fclose(zf);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = (size_t)st.size;
    return SD_OK;
}

/* ---- reading a tensor ----------------------------------------------------------- */

/* Skips n bytes of an entry that cannot seek (compressed). */
static int skip_bytes(zip_file_t *zf, uint64_t n) {
    uint8_t tmp[16384];
    while (n) {
        zip_uint64_t k = n < sizeof tmp ? n : sizeof tmp;
        if (zip_fread(zf, tmp, k) != (zip_int64_t)k) return -1;
        n -= k;
    }
    return 0;
}

/* Copies a strided view (src: the bytes from the first element) into dst in
 * row-major order. */
static void gather(const tc_tensor *t, const uint8_t *src, uint8_t *dst) {
    int64_t idx[SD_MAX_DIMS] = {0};
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) numel *= t->shape[i];
    for (int64_t k = 0; k < numel; k++) {
        int64_t off = 0;
        for (int i = 0; i < t->ndim; i++) off += idx[i] * t->stride[i];
        memcpy(dst + (size_t)k * t->esize, src + (size_t)off * t->esize, t->esize);
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (++idx[i] < t->shape[i]) break;
            idx[i] = 0;
        }
    }
}

static sd_status tc_read(void *p, const sd_st_entry *e, void *dst, sd_error *err) {
    tc_ctx *c = p;
    const tc_tensor *t = &c->t[e->offset];
    if (c->base) { /* legacy: bounds were checked at open */
        const uint8_t *src = c->base + t->where + t->start;
        if (t->contiguous) memcpy(dst, src, t->span);
        else gather(t, src, dst);
        /* a file truncated under us reads zeros (mapguard.h), never SIGBUS */
        if (c->mapped && sd_mapguard_faulted(c->guard))
            return sd_error_set(err, SD_ERR_IO, "%s: tensor '%s': the file was truncated while in use", c->path,
                                e->name);
        return SD_OK;
    }
    uint8_t *buf = t->contiguous ? dst : malloc(t->span);
    if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory", c->path, e->name);
    sd_status rc = SD_OK;
    zip_file_t *zf = zip_fopen_index(c->za, t->where, 0);
    /* The first read of a storage goes through all of it in order, so that
     * libzip checks its CRC-32 at the end (a flipped bit used to load and
     * change the picture): for a tensor that is its whole storage, the
     * usual case, that costs no extra read; a view reads the rest of its
     * storage once. Later reads of a checked storage seek. */
    int check = t->where < c->n_entries && !c->crc_ok[t->where];
    if (!zf) {
        rc = sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': %s", c->path, e->name,
                          zip_error_strerror(zip_get_error(c->za)));
    } else {
        /* zip_fseek works on stored entries (what torch writes); a
         * recompressed archive is read through. */
        if (t->start && (check || zip_fseek(zf, (zip_int64_t)t->start, SEEK_SET) != 0) && skip_bytes(zf, t->start) != 0)
            rc = sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': cannot reach its offset in the storage",
                              c->path, e->name);
        zip_int64_t got = rc ? 0 : zip_fread(zf, buf, t->span);
        if (!rc && (got < 0 || (uint64_t)got != t->span))
            rc = sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': short read from its storage (%s)", c->path,
                              e->name, got < 0 ? zip_error_strerror(zip_file_get_error(zf)) : "truncated");
        if (!rc && check) {
            char what[600];
            snprintf(what, sizeof what, "tensor '%.500s' (its storage)", e->name);
            zip_stat_t st;
            uint64_t rest = zip_stat_index(c->za, t->where, 0, &st) == 0 && (st.valid & ZIP_STAT_SIZE) &&
                                    st.size > t->start + t->span
                                ? st.size - t->start - t->span
                                : 0;
            if (skip_bytes(zf, rest) != 0 || read_to_end(zf)) rc = crc_fail(err, c->path, what, zf);
            else c->crc_ok[t->where] = 1;
        }
        zip_fclose(zf);
    }
    if (!rc && !t->contiguous) gather(t, buf, dst);
    if (!t->contiguous) free(buf);
    return rc;
}

static const sd_st_source_i tc_source = {tc_read, ctx_free};

/* ---- building the entry list ------------------------------------------------------ */

static int cmp_lg(const void *a, const void *b) {
    return strcmp(((const lg_storage *)a)->key, ((const lg_storage *)b)->key);
}

/* Where storage `key` is and how many bytes it really has. */
static sd_status locate_storage(tc_build *b, const char *name, const char *key, uint64_t *where,
                                uint64_t *avail) {
    if (b->lg) {
        lg_storage k = {.key = key}, *hit = b->n_lg ? bsearch(&k, b->lg, b->n_lg, sizeof k, cmp_lg) : NULL;
        if (!hit)
            return sd_error_set(b->err, SD_ERR_FORMAT, "%s: tensor '%s': its storage '%s' is missing from the file",
                                b->path, name, key);
        *where = hit->off;
        *avail = hit->bytes;
        return SD_OK;
    }
    char ename[1024];
    if ((size_t)snprintf(ename, sizeof ename, "%s/data/%s", b->prefix, key) >= sizeof ename)
        return sd_error_set(b->err, SD_ERR_FORMAT, "%s: tensor '%s': storage key too long", b->path, name);
    zip_int64_t zi = zip_name_locate(b->c->za, ename, ZIP_FL_ENC_RAW);
    if (zi < 0)
        return sd_error_set(b->err, SD_ERR_FORMAT, "%s: tensor '%s': its storage '%s' is missing from the archive",
                            b->path, name, ename);
    zip_stat_t st;
    if (zip_stat_index(b->c->za, (zip_uint64_t)zi, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        return zip_fail(b->err, b->path, ename, zip_get_error(b->c->za));
    if (st.valid & ZIP_STAT_ENCRYPTION_METHOD && st.encryption_method != ZIP_EM_NONE)
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s: %s is encrypted", b->path, ename);
    *where = (uint64_t)zi;
    *avail = st.size;
    return SD_OK;
}

/* Checks a tensor against its storage and records it under `name`. */
static sd_status add_tensor(tc_build *b, const char *name, const sd_pk_obj *o) {
    const sd_pk_obj *s = o->u.tensor.storage;
    sd_dtype dt = s->u.storage.dtype;
    size_t es = sd_dtype_size(dt);
    int nd = o->u.tensor.ndim;
    if (nd > SD_MAX_DIMS)
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d supported)",
                            b->path, name, nd, SD_MAX_DIMS);
    /* storage size vs. the bytes the file has for it */
    uint64_t where = 0, avail = 0;
    sd_status rc = locate_storage(b, name, s->u.storage.key, &where, &avail);
    if (rc) return rc;
    uint64_t snumel = (uint64_t)s->u.storage.numel, sbytes;
    if (__builtin_mul_overflow(snumel, (uint64_t)es, &sbytes) || sbytes > avail)
        return sd_error_set(b->err, SD_ERR_FORMAT,
                            "%s: tensor '%s': storage '%s' declares %llu %s elements but the file "
                            "holds %llu bytes for it",
                            b->path, name, s->u.storage.key, (unsigned long long)snumel, sd_dtype_name(dt),
                            (unsigned long long)avail);
    /* shape and strides vs. the storage */
    tc_tensor t = {.where = where, .ndim = nd, .esize = es, .contiguous = 1};
    uint64_t numel = 1, last = (uint64_t)o->u.tensor.offset, expect = 1;
    int ovf = 0;
    for (int i = nd - 1; i >= 0; i--) {
        uint64_t d = (uint64_t)o->u.tensor.shape[i], str = (uint64_t)o->u.tensor.stride[i], step;
        t.shape[i] = o->u.tensor.shape[i];
        t.stride[i] = o->u.tensor.stride[i];
        ovf |= __builtin_mul_overflow(numel, d, &numel);
        if (d > 1 && str != expect) t.contiguous = 0;
        ovf |= __builtin_mul_overflow(expect, d, &expect);
        if (d > 0) {
            ovf |= __builtin_mul_overflow(d - 1, str, &step);
            ovf |= __builtin_add_overflow(last, step, &last);
        }
    }
    uint64_t nbytes;
    ovf |= __builtin_mul_overflow(numel, (uint64_t)es, &nbytes);
    if (ovf || (numel && last >= snumel)) {
        char sh[160];
        int k = 0;
        sh[0] = 0;
        for (int i = 0; i < nd && k < (int)sizeof sh - 48; i++)
            k += snprintf(sh + k, sizeof sh - k, "%s%lld:%lld", i ? ", " : "", (long long)t.shape[i],
                          (long long)t.stride[i]);
        return sd_error_set(b->err, SD_ERR_FORMAT,
                            "%s: tensor '%s': size:stride [%s] at offset %lld reaches past its storage '%s' of "
                            "%llu elements",
                            b->path, name, sh, (long long)o->u.tensor.offset, s->u.storage.key,
                            (unsigned long long)snumel);
    }
    if (numel == 0) t.contiguous = 1; /* nothing to read */
    t.start = (uint64_t)o->u.tensor.offset * es;
    t.span = numel ? (last - (uint64_t)o->u.tensor.offset + 1) * es : 0;
    if (t.contiguous) t.span = nbytes;

    /* record */
    tc_ctx *c = b->c;
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 64;
        tc_tensor *nt = realloc(c->t, nc * sizeof *nt);
        sd_st_entry *ne = realloc(b->entries, nc * sizeof *ne);
        if (nt) c->t = nt;
        if (ne) b->entries = ne;
        if (!nt || !ne) return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
        c->cap = b->cap = nc;
    }
    sd_st_entry *e = &b->entries[b->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
    e->dtype = dt;
    e->ndim = nd;
    memcpy(e->shape, t.shape, sizeof e->shape);
    e->offset = c->n;
    e->nbytes = nbytes;
    c->t[c->n++] = t;
    b->n++;
    return SD_OK;
}

/* Adds every tensor of dict d (keys joined with '.' under `prefix`). */
static sd_status walk(tc_build *b, const sd_pk_obj *d, const char *prefix, int depth) {
    if (depth > TC_MAX_DEPTH)
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s: dicts nested deeper than %d levels (at '%s')", b->path,
                            TC_MAX_DEPTH, prefix);
    for (size_t i = 0; i + 1 < d->u.seq.n; i += 2) {
        const sd_pk_obj *k = d->u.seq.items[i], *v = d->u.seq.items[i + 1];
        if (++b->visits > TC_MAX_VISITS)
            return sd_error_set(b->err, SD_ERR_UNSUPPORTED,
                                "%s: more than %zu dict entries to walk (one dict shared from many "
                                "places?): not a weights file",
                                b->path, TC_MAX_VISITS);
        if (v->kind != SD_PK_TENSOR && v->kind != SD_PK_DICT) continue;
        if (k->kind != SD_PK_STR || strlen(k->u.str.s) != k->u.str.len) continue; /* not a weight name */
        size_t pl = strlen(prefix), need = pl + 1 + k->u.str.len + 1;
        char *name = malloc(need);
        if (!name) return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
        snprintf(name, need, "%s%s%s", prefix, pl ? "." : "", k->u.str.s);
        sd_status rc = v->kind == SD_PK_TENSOR ? add_tensor(b, name, v) : walk(b, v, name, depth + 1);
        free(name);
        if (rc) return rc;
    }
    return SD_OK;
}

/* sd_torch_open_tree: every tensor under o, dicts, tuples and lists
 * descended (dict keys: strings as they are, integers in decimal, other
 * keys as <kind>; sequence items by index), recorded under its path. A
 * tensor shared from two places is recorded twice (two names, one object:
 * either is its path); two paths spelled alike (a key holding '.') are the
 * file's error, as sd_st_open_source refuses repeated names. */
static sd_status walk_tree(tc_build *b, const sd_pk_obj *o, const char *path, int depth) {
    if (o->kind == SD_PK_TENSOR) {
        sd_status rc = add_tensor(b, path, o);
        if (rc) return rc;
        if (b->n_objs == b->cap_objs) {
            size_t nc = b->cap_objs ? b->cap_objs * 2 : 64;
            tc_obj *no = realloc(b->objs, nc * sizeof *no);
            if (!no) return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
            b->objs = no;
            b->cap_objs = nc;
        }
        b->objs[b->n_objs++] = (tc_obj){o, b->entries[b->n - 1].name};
        return SD_OK;
    }
    if (o->kind != SD_PK_DICT && o->kind != SD_PK_TUPLE && o->kind != SD_PK_LIST) return SD_OK;
    if (depth > TC_MAX_DEPTH)
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s: containers nested deeper than %d levels (at '%s')",
                            b->path, TC_MAX_DEPTH, path);
    const int dict = o->kind == SD_PK_DICT;
    for (size_t i = dict; i < o->u.seq.n; i += 1 + (size_t)dict) {
        const sd_pk_obj *v = o->u.seq.items[i];
        if (++b->visits > TC_MAX_VISITS)
            return sd_error_set(b->err, SD_ERR_UNSUPPORTED,
                                "%s: more than %zu dict entries to walk, list items included (one container "
                                "shared from many places?): not a weights file",
                                b->path, TC_MAX_VISITS);
        if (v->kind != SD_PK_TENSOR && v->kind != SD_PK_DICT && v->kind != SD_PK_TUPLE && v->kind != SD_PK_LIST)
            continue;
        char comp[48];
        const char *c = comp;
        const sd_pk_obj *k = dict ? o->u.seq.items[i - 1] : NULL;
        if (!dict) snprintf(comp, sizeof comp, "%zu", i);
        else if (k->kind == SD_PK_STR && strlen(k->u.str.s) == k->u.str.len) c = k->u.str.s;
        else if (k->kind == SD_PK_INT) snprintf(comp, sizeof comp, "%lld", (long long)k->u.i);
        else snprintf(comp, sizeof comp, "<%s>", sd_pickle_kind_name(k->kind));
        size_t pl = strlen(path), need = pl + 1 + strlen(c) + 1;
        char *name = malloc(need);
        if (!name) return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
        snprintf(name, need, "%s%s%s", path, pl ? "." : "", c);
        sd_status rc = walk_tree(b, v, name, depth + 1);
        free(name);
        if (rc) return rc;
    }
    return SD_OK;
}

/* The archive directory: the one top-level folder holding data.pkl. */
static sd_status find_prefix(zip_t *za, const char *path, char **prefix, zip_uint64_t *pkl, sd_error *err) {
    *prefix = NULL;
    zip_int64_t n = zip_get_num_entries(za, 0);
    for (zip_int64_t i = 0; i < n; i++) {
        const char *nm = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!nm) continue;
        const char *slash = strchr(nm, '/');
        if (!slash || slash == nm || strcmp(slash, "/data.pkl") != 0) continue;
        if (*prefix) {
            free(*prefix);
            *prefix = NULL;
            return sd_error_set(err, SD_ERR_FORMAT, "%s: more than one data.pkl in the archive", path);
        }
        *prefix = strndup(nm, (size_t)(slash - nm));
        if (!*prefix) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
        *pkl = (zip_uint64_t)i;
    }
    if (!*prefix)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: a zip archive without <archive>/data.pkl, so not a PyTorch checkpoint", path);
    return SD_OK;
}

static sd_status check_byteorder(tc_build *b) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s/byteorder", b->prefix);
    zip_int64_t i = zip_name_locate(b->c->za, nm, ZIP_FL_ENC_RAW);
    if (i < 0) return SD_OK; /* written since torch 1.13; before that always little */
    uint8_t *buf;
    size_t len;
    sd_status rc = read_entry(b->c->za, (zip_uint64_t)i, 64, b->path, nm, &buf, &len, b->err);
    if (rc) return rc;
    int little = len == 6 && memcmp(buf, "little", 6) == 0;
    free(buf);
    if (!little)
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s: big-endian checkpoint (%s is not \"little\")", b->path,
                            nm);
    return SD_OK;
}

/* The dict to present (Lightning's state_dict when there is one), walked. */
static sd_status walk_root(tc_build *b, const sd_pk_obj *root) {
    const sd_pk_obj *sd = sd_pickle_dict_get(root, "state_dict");
    if (sd && sd->kind == SD_PK_DICT) root = sd;
    if (root->kind != SD_PK_DICT)
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s: the checkpoint holds a %s, not a dict of tensors",
                            b->path, sd_pickle_kind_name(root->kind));
    return walk(b, root, "", 0);
}

/* Hands the entries and the context to an sd_st_file, or frees them on
 * error (rc). */
static sd_status finish(tc_build *b, sd_status rc, sd_st_file **out) {
    if (rc) {
        for (size_t i = 0; i < b->n; i++) free((char *)b->entries[i].name);
        free(b->entries);
        ctx_free(b->c);
        return rc;
    }
    return sd_st_open_source(b->path, b->entries, b->n, &tc_source, b->c, out, b->err);
}

static int cmp_obj(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const tc_obj *)a)->o, y = (uintptr_t)((const tc_obj *)b)->o;
    return x < y ? -1 : x > y;
}

/* finish() for sd_torch_open_tree: the tree takes the file, the pickle pk
 * (root's owner) and the object list; everything is freed on error. */
static sd_status finish_tree(tc_build *b, sd_status rc, sd_pickle *pk, const sd_pk_obj *root, sd_torch_tree **out) {
    sd_st_file *f = NULL;
    rc = finish(b, rc, &f);
    sd_torch_tree *t = rc ? NULL : calloc(1, sizeof *t);
    if (!rc && !t) rc = sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
    if (rc) {
        sd_st_close(f);
        sd_pickle_free(pk);
        free(b->objs);
        return rc;
    }
    *t = (sd_torch_tree){f, pk, root, b->objs, b->n_objs};
    if (t->n) qsort(t->objs, t->n, sizeof *t->objs, cmp_obj);
    *out = t;
    return SD_OK;
}

/* Takes ownership of za. Fills *out, or *tree when tree is not NULL
 * (sd_torch_open_tree). */
static sd_status open_archive(zip_t *za, const char *path, sd_st_file **out, sd_torch_tree **tree, sd_error *err) {
    tc_ctx *c = calloc(1, sizeof *c);
    if (c) c->path = strdup(path);
    if (!c || !c->path) {
        if (c) free(c);
        zip_discard(za);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    c->za = za;
    zip_int64_t ne = zip_get_num_entries(za, 0);
    c->n_entries = ne > 0 ? (zip_uint64_t)ne : 0;
    c->crc_ok = calloc(c->n_entries ? c->n_entries : 1, 1);
    if (!c->crc_ok) {
        ctx_free(c);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    tc_build b = {.c = c, .path = path, .err = err};
    char *prefix = NULL;
    uint8_t *pkl = NULL;
    size_t pkl_len = 0;
    sd_pickle *pk = NULL;
    const sd_pk_obj *root = NULL;
    zip_uint64_t pkl_idx = 0;
    sd_status rc = find_prefix(za, path, &prefix, &pkl_idx, err);
    b.prefix = prefix;
    if (!rc) rc = check_byteorder(&b);
    char what[1024];
    snprintf(what, sizeof what, "%s: %s/data.pkl", path, prefix ? prefix : "");
    if (!rc) rc = read_entry(za, pkl_idx, TC_MAX_PKL, path, what + strlen(path) + 2, &pkl, &pkl_len, err);
    if (!rc) rc = sd_pickle_load(pkl, pkl_len, what, &pk, &root, NULL, err);
    if (!rc) rc = tree ? walk_tree(&b, root, "", 0) : walk_root(&b, root);
    free(pkl);
    free(prefix);
    if (tree) return finish_tree(&b, rc, pk, root, tree);
    sd_pickle_free(pk);
    return finish(&b, rc, out);
}

/* ---- the legacy format ------------------------------------------------------------ */

/* torch.save(..., _use_new_zipfile_serialization=False) and torch < 1.6:
 * five pickles back to back, then the raw storages:
 *   magic number 0x1950a86a20f9469cfc6c, protocol version 1001,
 *   sys_info {'protocol_version', 'little_endian', 'type_sizes'},
 *   the object (persistent ids of 6 elements),
 *   the list of storage keys,
 *   per key, in that order: int64 element count, then the elements. */
static const uint8_t LEGACY_MAGIC[15] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                          0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};

static int cmp_storage_obj(const void *a, const void *b) {
    return strcmp((*(const sd_pk_obj *const *)a)->u.storage.key, (*(const sd_pk_obj *const *)b)->u.storage.key);
}

/* Locates every storage listed in `keys` in the bytes after the pickles
 * (from *pos), using the declarations of the object pickle. */
static sd_status legacy_storages(tc_build *b, const sd_pickle *obj, const sd_pk_obj *keys, size_t *pos) {
    const uint8_t *base = b->c->base;
    size_t size = b->c->size;
    if (keys->kind != SD_PK_LIST)
        return sd_error_set(b->err, SD_ERR_FORMAT, "%s: legacy format: the storage key list is a %s", b->path,
                            sd_pickle_kind_name(keys->kind));
    /* the declared storages, sorted by key */
    size_t n = 0, cnt = sd_pickle_count(obj);
    const sd_pk_obj **decl = malloc((cnt ? cnt : 1) * sizeof *decl);
    b->lg = calloc(keys->u.seq.n + 1, sizeof *b->lg);
    if (!decl || !b->lg) {
        free(decl);
        return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory", b->path);
    }
    for (size_t i = 0; i < cnt; i++)
        if (sd_pickle_at(obj, i)->kind == SD_PK_STORAGE) decl[n++] = sd_pickle_at(obj, i);
    if (n) qsort(decl, n, sizeof *decl, cmp_storage_obj);
    sd_status rc = SD_OK;
    for (size_t i = 0; i < keys->u.seq.n && !rc; i++) {
        const sd_pk_obj *k = keys->u.seq.items[i];
        if (k->kind != SD_PK_STR) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT, "%s: legacy format: storage key %zu is a %s", b->path, i,
                              sd_pickle_kind_name(k->kind));
            break;
        }
        sd_pk_obj probe = {.kind = SD_PK_STORAGE, .u.storage.key = k->u.str.s};
        const sd_pk_obj *pp = &probe, **hit = n ? bsearch(&pp, decl, n, sizeof *decl, cmp_storage_obj) : NULL;
        if (!hit) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT, "%s: legacy format: storage '%s' is listed but never declared",
                              b->path, k->u.str.s);
            break;
        }
        uint64_t numel = 0, bytes;
        if (size - *pos < 8) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT, "%s: legacy format: truncated at storage '%s'", b->path,
                              k->u.str.s);
            break;
        }
        for (int j = 7; j >= 0; j--) numel = numel << 8 | base[*pos + (size_t)j];
        *pos += 8;
        size_t es = sd_dtype_size((*hit)->u.storage.dtype);
        if (numel != (uint64_t)(*hit)->u.storage.numel || __builtin_mul_overflow(numel, (uint64_t)es, &bytes) ||
            bytes > size - *pos) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT,
                              "%s: legacy format: storage '%s' has %llu elements in the file, %lld declared, "
                              "%zu bytes left",
                              b->path, k->u.str.s, (unsigned long long)numel, (long long)(*hit)->u.storage.numel,
                              size - *pos);
            break;
        }
        b->lg[b->n_lg++] = (lg_storage){k->u.str.s, *pos, bytes};
        *pos += (size_t)bytes;
    }
    free(decl);
    if (!rc && b->n_lg) qsort(b->lg, b->n_lg, sizeof *b->lg, cmp_lg);
    return rc;
}

/* Takes ownership of the mapping when `mapped`. Fills *out, or *tree when
 * tree is not NULL. */
static sd_status open_legacy(const uint8_t *base, size_t size, int mapped, const char *path, sd_st_file **out,
                             sd_torch_tree **tree, sd_error *err) {
    tc_ctx *c = calloc(1, sizeof *c);
    if (c) c->path = strdup(path);
    if (!c || !c->path) {
        free(c);
        if (mapped) munmap((void *)base, size);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    c->base = base;
    c->size = size;
    c->mapped = mapped;
    c->guard = mapped ? sd_mapguard_add(base, size) : -1;
    tc_build b = {.c = c, .path = path, .err = err};
    if (size < sizeof LEGACY_MAGIC || memcmp(base, LEGACY_MAGIC, sizeof LEGACY_MAGIC) != 0) {
        sd_status rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                                    "%s: a bare pickle stream without PyTorch's magic number, so not a "
                                    "torch checkpoint",
                                    path);
        return tree ? finish_tree(&b, rc, NULL, NULL, tree) : finish(&b, rc, out);
    }
    sd_pickle *pk[4] = {0};
    const sd_pk_obj *o[4] = {0};
    static const char *const part[4] = {"protocol version", "sys_info", "object", "storage keys"};
    size_t pos = sizeof LEGACY_MAGIC, used = 0;
    sd_status rc = SD_OK;
    for (int i = 0; i < 4 && !rc; i++) {
        char what[1024];
        snprintf(what, sizeof what, "%s: legacy %s pickle", path, part[i]);
        rc = sd_pickle_load(base + pos, size - pos, what, &pk[i], &o[i], &used, err);
        pos += used;
    }
    if (!rc && (o[0]->kind != SD_PK_INT || o[0]->u.i != 1001))
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: legacy format protocol version is not 1001", path);
    if (!rc) {
        const sd_pk_obj *le = sd_pickle_dict_get(o[1], "little_endian");
        if (o[1]->kind != SD_PK_DICT || (le && !(le->kind == SD_PK_BOOL && le->u.b)))
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: big-endian (or unreadable sys_info) legacy checkpoint",
                              path);
    }
    if (!rc) rc = legacy_storages(&b, pk[2], o[3], &pos);
    if (!rc) rc = tree ? walk_tree(&b, o[2], "", 0) : walk_root(&b, o[2]);
    for (int i = 0; i < 4; i++)
        if (i != 2 || !tree) sd_pickle_free(pk[i]);
    free(b.lg);
    b.lg = NULL;
    if (tree) return finish_tree(&b, rc, pk[2], o[2], tree);
    return finish(&b, rc, out);
}

/* ---- public ------------------------------------------------------------------------- */

int sd_torch_sniff(const void *head, size_t n) {
    const uint8_t *b = head;
    if (n >= 4 && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4) return 1;
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return 2;
    return 0;
}

static sd_status open_memory(const void *data, size_t size, const char *name, sd_st_file **out,
                             sd_torch_tree **tree, sd_error *err) {
    if (!name) name = "<memory>";
    if (sd_torch_sniff(data, size) == 2) return open_legacy(data, size, 0, name, out, tree, err);
    zip_error_t ze;
    zip_error_init(&ze);
    static const char nothing[1];
    zip_source_t *src = zip_source_buffer_create(size ? data : nothing, size, 0, &ze);
    if (!src) {
        sd_status rc = zip_fail(err, name, "not a zip archive", &ze);
        zip_error_fini(&ze);
        return rc;
    }
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        zip_source_free(src);
        sd_status rc = zip_fail(err, name, TC_NOT_ZIP, &ze);
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    return open_archive(za, name, out, tree, err);
}

sd_status sd_torch_open_memory(const void *data, size_t size, const char *name, sd_st_file **out,
                               sd_error *err) {
    *out = NULL;
    return open_memory(data, size, name, out, NULL, err);
}

static sd_status open_path(const char *path, sd_st_file **out, sd_torch_tree **tree, sd_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sd_error_set(err, e == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO, "%s: cannot open: %s", path,
                            strerror(e));
    }
    uint8_t head[4];
    ssize_t n = read(fd, head, sizeof head);
    struct stat sb;
    if (n > 0 && sd_torch_sniff(head, (size_t)n) == 2) {
        /* legacy: the storages lie in the stream itself; map it */
        void *m = fstat(fd, &sb) == 0 && sb.st_size > 0
                      ? mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        int e = errno;
        close(fd);
        if (m == MAP_FAILED) return sd_error_set(err, SD_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        return open_legacy(m, (size_t)sb.st_size, 1, path, out, tree, err);
    }
    close(fd);
    int zerr = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        sd_status rc = zip_fail(err, path, TC_NOT_ZIP, &ze);
        zip_error_fini(&ze);
        return rc;
    }
    return open_archive(za, path, out, tree, err);
}

sd_status sd_torch_open(const char *path, sd_st_file **out, sd_error *err) {
    *out = NULL;
    return open_path(path, out, NULL, err);
}

sd_status sd_torch_open_tree(const char *path, sd_torch_tree **out, sd_error *err) {
    *out = NULL;
    return open_path(path, NULL, out, err);
}

sd_status sd_torch_open_tree_memory(const void *data, size_t size, const char *name, sd_torch_tree **out,
                                    sd_error *err) {
    *out = NULL;
    return open_memory(data, size, name, NULL, out, err);
}

void sd_torch_tree_free(sd_torch_tree *t) {
    if (!t) return;
    sd_st_close(t->file);
    sd_pickle_free(t->pk);
    free(t->objs);
    free(t);
}

const sd_pk_obj *sd_torch_tree_root(const sd_torch_tree *t) { return t->root; }

static const tc_obj *find_obj(const sd_torch_tree *t, const sd_pk_obj *o) {
    tc_obj k = {o, NULL};
    return t->n ? bsearch(&k, t->objs, t->n, sizeof k, cmp_obj) : NULL;
}

const char *sd_torch_tree_path(const sd_torch_tree *t, const sd_pk_obj *o) {
    const tc_obj *hit = find_obj(t, o);
    return hit ? hit->path : "?";
}

sd_tensor *sd_torch_tree_tensor(sd_torch_tree *t, const sd_pk_obj *o, sd_error *err) {
    const tc_obj *hit = find_obj(t, o);
    if (!hit) {
        sd_error_set(err, SD_ERR_INVALID, "%s: a %s that is no tensor of the file", sd_st_path(t->file),
                     o ? sd_pickle_kind_name(o->kind) : "NULL");
        return NULL;
    }
    return sd_st_tensor(t->file, hit->path, err);
}

sd_status sd_torch_open_any(const char *path, sd_st_file **out, sd_error *err) {
    *out = NULL;
    uint8_t head[sizeof LEGACY_MAGIC] = {0};
    FILE *fp = fopen(path, "rb");
    size_t n = 0;
    if (fp) {
        n = fread(head, 1, sizeof head, fp);
        fclose(fp);
    }
    /* The first 8 bytes of a safetensors file are its header length, which
     * can start 0x80 0x02..0x05 (a header of 640..1535 bytes, common for
     * small files): so only torch's whole legacy magic number selects the
     * legacy reader. "PK\3\4" would be a header over 2 GB; still, a file
     * that is no readable zip after all is tried as safetensors, and the
     * torch error is reported when that fails too. */
    if (n == sizeof LEGACY_MAGIC && memcmp(head, LEGACY_MAGIC, sizeof LEGACY_MAGIC) == 0)
        return sd_torch_open(path, out, err);
    if (sd_torch_sniff(head, n) == 1) {
        sd_status rc = sd_torch_open(path, out, err);
        if (rc != SD_ERR_FORMAT) return rc;
        sd_error e2;
        sd_error_clear(&e2);
        if (sd_st_open(path, out, &e2) == SD_OK) return SD_OK;
        return rc;
    }
    return sd_st_open(path, out, err);
}
