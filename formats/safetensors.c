/* safetensors.c - validated, memory-mapped reader and atomic writer.
 *
 * Reader: the whole header is parsed and checked before sd_st_open returns,
 * so later tensor access never needs to re-check bounds. The file struct is
 * refcounted: the caller's handle is one reference and every borrowed tensor
 * holds another, so the mapping lives until the last tensor goes. When a
 * tensor of a mapped file goes, the whole pages inside its bytes are handed
 * back (madvise MADV_DONTNEED) even though the mapping stays: a model freed
 * early (a one-shot run drops the text encoder and the UNet) would otherwise
 * keep counting in the resident set while the VAE still borrows the file.
 *
 * Writer: layout of the reference library (huggingface/safetensors): data
 * ordered by (dtype size descending, name) so every tensor's offset is a
 * multiple of its element size; header JSON without spaces, "__metadata__"
 * first (insertion order), then tensors sorted by name; header padded with
 * spaces to a multiple of 8. Files it writes from a file it read are
 * byte-identical to the original when that came from the reference library.
 */
#include "safetensors.h"
#include "mapguard.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Same cap as the reference library: a larger header is a corrupt length. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

struct sd_st_file {
    int refcount;
    char *path;
    const uint8_t *base; /* whole file */
    size_t size;
    int mapped;          /* munmap(base) on free */
    /* A mapped file stays open (fd) so that its inode can be checked for a
     * change against what it was when mapped (sd_st_check), and its
     * mapping is registered with the SIGBUS guard (mapguard.h). */
    int fd;
    int guard;                 /* mapguard slot, -1 = none */
    struct stat st;            /* at open */
    struct stat seen;          /* as last reported by sd_st_check_all (files_mu) */
    int seen_faulted;
    struct sd_st_file *next, *prev; /* the list of mapped files (sd_st_check_all) */
    sd_st_entry *entries; /* sorted by name */
    size_t n;
    char **meta_keys, **meta_vals;
    size_t n_meta;
    /* Valid tensors in a safetensors dtype sdflow has no sd_dtype for (U32,
     * F8_E8M0, ...): checked like the others, left out of the entry list, and
     * named in the error sd_st_tensor gives for them. */
    char **other_names;
    const char **other_dtypes; /* static strings */
    size_t n_other;
    /* Set for files of another container (sd_st_open_source): tensors are
     * read through src, one at a time under src_mu. */
    const sd_st_source_i *src;
    void *src_ctx;
    pthread_mutex_t src_mu;
};

/* ---- lifetime ------------------------------------------------------------- */

/* Every open mapped file, for sd_st_check_all. */
static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static sd_st_file *files;

static void enlist(sd_st_file *f) {
    pthread_mutex_lock(&files_mu);
    f->prev = NULL;
    f->next = files;
    if (files) files->prev = f;
    files = f;
    pthread_mutex_unlock(&files_mu);
}

static void unlist(sd_st_file *f) {
    pthread_mutex_lock(&files_mu);
    if (f->prev) f->prev->next = f->next;
    else if (files == f) files = f->next;
    if (f->next) f->next->prev = f->prev;
    f->next = f->prev = NULL;
    pthread_mutex_unlock(&files_mu);
}

static void file_free(sd_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->entries[i].name);
    free(f->entries);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    for (size_t i = 0; i < f->n_other; i++) free(f->other_names[i]);
    free(f->other_names);
    free(f->other_dtypes);
    if (f->mapped && f->base) {
        unlist(f);
        sd_mapguard_remove(f->guard);
        munmap((void *)f->base, f->size);
    }
    if (f->mapped && f->fd >= 0) close(f->fd);
    if (f->src) {
        f->src->free(f->src_ctx);
        pthread_mutex_destroy(&f->src_mu);
    }
    free(f->path);
    free(f);
}

static void file_unref(void *p) {
    sd_st_file *f = p;
    if (f && __atomic_sub_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL) == 0) file_free(f);
}

void sd_st_close(sd_st_file *f) { file_unref(f); }

/* What a borrowed tensor holds: its file, and its bytes to hand back. */
typedef struct st_borrow {
    sd_st_file *f;
    const uint8_t *p;
    size_t n;
} st_borrow;

/* The mapping is MAP_PRIVATE and PROT_READ, so its pages are never
 * modified: after MADV_DONTNEED a later read (another tensor over the same
 * bytes, or this one loaded again) faults the file's content back in from
 * the page cache. Pages shared with a neighbouring tensor (the partial
 * pages at both ends) are left alone. A buffer from sd_st_open_memory is
 * not ours to discard. */
static void borrow_release(void *owner) {
    st_borrow *b = owner;
    if (b->f->mapped) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t lo = ((uintptr_t)b->p + page - 1) & ~(page - 1);
        uintptr_t hi = ((uintptr_t)b->p + b->n) & ~(page - 1);
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* a failure only costs memory */
    }
    file_unref(b->f);
    free(b);
}

/* ---- header validation ------------------------------------------------------ */

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const sd_st_entry *)a)->name, ((const sd_st_entry *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b) {
    const sd_st_entry *x = *(const sd_st_entry *const *)a, *y = *(const sd_st_entry *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* A JSON number that is an exact integer in [0, 2^53]. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Safetensors dtypes that have no sd_dtype. Sub-byte types (F4, F6_*) are
 * left unknown: their byte length rule differs and no checkpoint we load
 * uses them. */
static const struct { const char *name; size_t size; } other_dtypes[] = {
    {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E8M0", 1},
};
#define N_OTHER_DTYPES (sizeof other_dtypes / sizeof other_dtypes[0])

/* Element size of such a dtype, 0 if unknown. */
static size_t other_dtype_size(const char *name) {
    for (size_t i = 0; i < N_OTHER_DTYPES; i++)
        if (strcmp(name, other_dtypes[i].name) == 0) return other_dtypes[i].size;
    return 0;
}

/* Checks one header entry; *other is set when its dtype is a valid
 * safetensors dtype without an sd_dtype. */
static sd_status parse_entry(sd_st_file *f, const cJSON *item, uint64_t data_size,
                             sd_st_entry *e, int *other, sd_error *err) {
    const char *nm = item->string;
    if (!cJSON_IsObject(item))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': entry is not an object", f->path, nm);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(jd))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", f->path, nm);
    size_t esize;
    /* the quantized sd_dtypes are GGUF's, never a safetensors dtype */
    if (sd_dtype_from_name(jd->valuestring, &e->dtype) == 0 && !sd_dtype_is_quantized(e->dtype)) {
        esize = sd_dtype_size(e->dtype);
        *other = 0;
    } else if ((esize = other_dtype_size(jd->valuestring)) != 0) {
        e->dtype = SD_U8; /* placeholder; the entry is not exposed */
        *other = 1;
    } else {
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': unknown dtype \"%s\"", f->path, nm,
                            jd->valuestring);
    }
    if (!cJSON_IsArray(js))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", f->path, nm);
    int nd = cJSON_GetArraySize(js);
    if (nd > SD_MAX_DIMS)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: tensor '%s': %d dimensions (at most %d supported)",
                            f->path, nm, nd, SD_MAX_DIMS);
    e->ndim = nd;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, js) {
        uint64_t v;
        if (!json_uint(d, &v))
            return sd_error_set(err, SD_ERR_FORMAT,
                                "%s: tensor '%s': shape entry %d is not a non-negative integer", f->path, nm, k);
        e->shape[k++] = (int64_t)v;
    }
    /* Byte length; anything larger than the data section cannot be valid,
     * so saturate there (UINT64_MAX) instead of risking overflow. */
    uint64_t bytes = esize;
    for (int i = 0; i < nd; i++)
        if (e->shape[i] == 0) bytes = 0;
    for (int i = 0; i < nd && bytes && bytes != UINT64_MAX; i++) {
        uint64_t v = (uint64_t)e->shape[i];
        bytes = (v > data_size / bytes) ? UINT64_MAX : bytes * v;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be [begin, end]", f->path,
                            nm);
    uint64_t b, en;
    if (!json_uint(cJSON_GetArrayItem(jo, 0), &b) || !json_uint(cJSON_GetArrayItem(jo, 1), &en))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers",
                            f->path, nm);
    if (b > en)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] begin after end",
                            f->path, nm, (unsigned long long)b, (unsigned long long)en);
    if (en > data_size)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section of %llu bytes",
                            f->path, nm, (unsigned long long)b, (unsigned long long)en,
                            (unsigned long long)data_size);
    if (bytes != en - b) {
        char sh[160];
        int o = 0;
        sh[0] = 0;
        for (int i = 0; i < e->ndim && o < (int)sizeof sh - 24; i++)
            o += snprintf(sh + o, sizeof sh - o, "%s%lld", i ? ", " : "", (long long)e->shape[i]);
        if (bytes == UINT64_MAX)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s': shape [%s] %s is larger than the file",
                                f->path, nm, sh, jd->valuestring);
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: tensor '%s': shape [%s] %s needs %llu bytes but data_offsets span %llu", f->path,
                            nm, sh, jd->valuestring, (unsigned long long)bytes, (unsigned long long)(en - b));
    }
    e->nbytes = en - b;
    e->offset = b; /* relative for now; made absolute by the caller */
    e->name = strdup(nm);
    if (!e->name) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", f->path);
    return SD_OK;
}

static sd_status parse_metadata(sd_st_file *f, const cJSON *m, sd_error *err) {
    if (!cJSON_IsObject(m))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: \"__metadata__\" is not an object", f->path);
    int n = cJSON_GetArraySize(m);
    f->meta_keys = calloc((size_t)n + 1, sizeof *f->meta_keys);
    f->meta_vals = calloc((size_t)n + 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", f->path);
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsString(it))
            return sd_error_set(err, SD_ERR_FORMAT, "%s: \"__metadata__\" value of '%s' is not a string",
                                f->path, it->string);
        for (size_t i = 0; i < f->n_meta; i++)
            if (strcmp(f->meta_keys[i], it->string) == 0)
                return sd_error_set(err, SD_ERR_FORMAT, "%s: \"__metadata__\" key '%s' appears twice", f->path,
                                    it->string);
        char *k = strdup(it->string), *v = strdup(it->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", f->path);
        }
        f->meta_keys[f->n_meta] = k;
        f->meta_vals[f->n_meta] = v;
        f->n_meta++;
    }
    return SD_OK;
}

/* Moves the entries whose dtype has no sd_dtype out of the entry list
 * (after the overlap check, which must see them). */
static sd_status split_other(sd_st_file *f, const cJSON *root, sd_error *err) {
    f->other_names = calloc(f->n, sizeof *f->other_names);
    f->other_dtypes = calloc(f->n, sizeof *f->other_dtypes);
    if (!f->other_names || !f->other_dtypes) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", f->path);
    size_t keep = 0;
    for (size_t i = 0; i < f->n; i++) {
        sd_st_entry *e = &f->entries[i];
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, e->name), "dtype");
        sd_dtype dt;
        if (sd_dtype_from_name(jd->valuestring, &dt) == 0 && !sd_dtype_is_quantized(dt)) {
            f->entries[keep++] = *e;
            continue;
        }
        const char *dn = "?";
        for (size_t k = 0; k < N_OTHER_DTYPES; k++)
            if (strcmp(jd->valuestring, other_dtypes[k].name) == 0) dn = other_dtypes[k].name;
        f->other_names[f->n_other] = (char *)e->name;
        f->other_dtypes[f->n_other] = dn;
        f->n_other++;
    }
    f->n = keep;
    return SD_OK;
}

/* Checks everything about f->base/f->size and fills entries and metadata. */
static sd_status parse_header(sd_st_file *f, sd_error *err) {
    if (f->size < 8)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file", f->path,
                            f->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->base[i];
    if (hlen > ST_MAX_HEADER)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: header length %llu is implausibly large (corrupt file?)",
                            f->path, (unsigned long long)hlen);
    if (hlen > f->size - 8)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: header length %llu runs past the end of the file (%zu bytes; truncated?)",
                            f->path, (unsigned long long)hlen, f->size);
    if (hlen < 2 || f->base[8] != '{')
        return sd_error_set(err, SD_ERR_FORMAT, "%s: header is not a JSON object", f->path);
    uint64_t data_size = f->size - 8 - hlen;

    /* Parse a NUL-terminated copy: cJSON then cannot read past the header
     * whatever the bytes are, and embedded NULs end the text early, which
     * the trailing check below reports. */
    char *txt = malloc(hlen + 1);
    if (!txt) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory for header", f->path);
    memcpy(txt, f->base + 8, hlen);
    txt[hlen] = 0;
    /* return_parse_end gives the error position without cJSON's global. */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(txt, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = end ? (size_t)(end - txt) : 0;
        cJSON_Delete(root);
        free(txt);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: header is not well-formed JSON (near byte %zu of %llu)",
                            f->path, at, (unsigned long long)hlen);
    }
    for (const char *p = end; p < txt + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            size_t at = (size_t)(p - txt);
            cJSON_Delete(root);
            free(txt);
            return sd_error_set(err, SD_ERR_FORMAT, "%s: unexpected bytes after the header JSON (at byte %zu)",
                                f->path, at);
        }
    }

    sd_status st = SD_OK;
    int count = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)count + 1, sizeof *f->entries);
    sd_st_entry **by_off = calloc((size_t)count + 1, sizeof *by_off);
    if (!f->entries || !by_off) {
        st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", f->path);
        goto done;
    }
    int seen_meta = 0;
    size_t n_other = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (seen_meta++) {
                st = sd_error_set(err, SD_ERR_FORMAT, "%s: \"__metadata__\" appears twice", f->path);
                goto done;
            }
            if ((st = parse_metadata(f, it, err)) != SD_OK) goto done;
            continue;
        }
        int other = 0;
        if ((st = parse_entry(f, it, data_size, &f->entries[f->n], &other, err)) != SD_OK) goto done;
        f->n++;
        if (other) n_other++;
    }
    qsort(f->entries, f->n, sizeof *f->entries, cmp_entry_name);
    for (size_t i = 1; i < f->n; i++) {
        if (strcmp(f->entries[i - 1].name, f->entries[i].name) == 0) {
            st = sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", f->path,
                              f->entries[i].name);
            goto done;
        }
    }
    /* Overlap check in offset order; empty tensors own no bytes. */
    size_t nb = 0;
    for (size_t i = 0; i < f->n; i++)
        if (f->entries[i].nbytes) by_off[nb++] = &f->entries[i];
    qsort(by_off, nb, sizeof *by_off, cmp_entry_offset);
    for (size_t i = 1; i < nb; i++) {
        const sd_st_entry *a = by_off[i - 1], *b = by_off[i];
        if (b->offset < a->offset + a->nbytes) {
            st = sd_error_set(err, SD_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section",
                              f->path, a->name, b->name);
            goto done;
        }
    }
    for (size_t i = 0; i < f->n; i++) f->entries[i].offset += 8 + hlen;
    if (n_other && (st = split_other(f, root, err)) != SD_OK) goto done;
done:
    free(by_off);
    cJSON_Delete(root);
    free(txt);
    return st;
}

static void index_free(sd_st_index *x) {
    for (size_t i = 0; i < x->n; i++) free((char *)x->entries[i].name);
    free(x->entries);
    for (size_t i = 0; i < x->n_meta; i++) {
        free(x->meta_keys[i]);
        free(x->meta_vals[i]);
    }
    free(x->meta_keys);
    free(x->meta_vals);
    for (size_t i = 0; i < x->n_other; i++) free(x->other_names[i]);
    free(x->other_names);
    free(x->other_dtypes);
    memset(x, 0, sizeof *x);
}

/* Runs another container's indexer over f's bytes and takes its index,
 * checking each entry again: the file's safety must not rest on every
 * indexer being right. */
static sd_status parse_indexed(sd_st_file *f, sd_st_indexer fn, void *ctx, sd_error *err) {
    sd_st_index x;
    memset(&x, 0, sizeof x);
    sd_status st = fn(ctx, f->base, f->size, f->path, &x, err);
    if (st != SD_OK) {
        index_free(&x);
        return st;
    }
    f->entries = x.entries;
    f->n = x.n;
    f->meta_keys = x.meta_keys;
    f->meta_vals = x.meta_vals;
    f->n_meta = x.n_meta;
    f->other_names = x.other_names;
    f->other_dtypes = x.other_dtypes;
    f->n_other = x.n_other;
    for (size_t i = 0; i < f->n; i++) {
        const sd_st_entry *e = &f->entries[i];
        size_t numel = 1;
        int ok = e->name && e->ndim >= 0 && e->ndim <= SD_MAX_DIMS && (unsigned)e->dtype < SD_DTYPE_COUNT;
        for (int d = 0; ok && d < e->ndim; d++) {
            ok = e->shape[d] >= 0 && (e->shape[d] == 0 || numel <= SIZE_MAX / (size_t)e->shape[d]);
            if (ok) numel *= (size_t)e->shape[d];
        }
        ok = ok && numel % (size_t)sd_dtype_block(e->dtype) == 0 && numel / (size_t)sd_dtype_block(e->dtype) <= SIZE_MAX / sd_dtype_size(e->dtype) &&
             e->nbytes == sd_dtype_nbytes(e->dtype, (int64_t)numel) && e->offset <= f->size &&
             e->nbytes <= f->size - e->offset;
        if (!ok)
            return sd_error_set(err, SD_ERR_INTERNAL, "%s: tensor '%s': the index of this file is inconsistent",
                                f->path, e->name ? e->name : "?");
    }
    if (f->n) qsort(f->entries, f->n, sizeof *f->entries, cmp_entry_name);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(f->entries[i - 1].name, f->entries[i].name) == 0)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s' appears twice", f->path, f->entries[i].name);
    return SD_OK;
}

static sd_status open_common(sd_st_file *f, sd_st_indexer fn, void *ctx, sd_st_file **out, sd_error *err) {
    sd_status st = fn ? parse_indexed(f, fn, ctx, err) : parse_header(f, err);
    if (st != SD_OK) {
        file_free(f);
        *out = NULL;
        return st;
    }
    *out = f;
    return SD_OK;
}

static sd_st_file *file_alloc(const char *path, sd_error *err) {
    sd_st_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(path ? path : "<memory>");
    if (!f || !f->path) {
        free(f);
        sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path ? path : "<memory>");
        return NULL;
    }
    f->refcount = 1;
    return f;
}

static sd_status open_path(const char *path, sd_st_indexer fn, void *ctx, sd_st_file **out, sd_error *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sd_error_set(err, e == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO, "%s: cannot open: %s", path,
                            strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        close(fd);
        return sd_error_set(err, SD_ERR_IO, "%s: not a regular file%s%s", path, e ? ": " : "",
                            e ? strerror(e) : "");
    }
    sd_st_file *f = file_alloc(path, err);
    if (!f) {
        close(fd);
        return SD_ERR_NOMEM;
    }
    f->size = (size_t)sb.st_size;
    f->fd = -1;
    f->guard = -1;
    if (f->size >= 8) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            file_free(f);
            return sd_error_set(err, SD_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        f->base = m;
        f->mapped = 1;
        f->fd = fd; /* kept for sd_st_check */
        f->st = f->seen = sb;
        f->guard = sd_mapguard_add(m, f->size);
        enlist(f);
    } else {
        static const uint8_t nothing[8];
        f->base = nothing; /* too short for any format: rejected on size alone */
        close(fd);
    }
    return open_common(f, fn, ctx, out, err);
}

sd_status sd_st_open(const char *path, sd_st_file **out, sd_error *err) {
    return open_path(path, NULL, NULL, out, err);
}

sd_status sd_st_open_indexed(const char *path, sd_st_indexer fn, void *ctx, sd_st_file **out,
                             sd_error *err) {
    return open_path(path, fn, ctx, out, err);
}

static sd_status open_mem(const void *data, size_t size, const char *name, sd_st_indexer fn, void *ctx,
                          sd_st_file **out, sd_error *err) {
    *out = NULL;
    sd_st_file *f = file_alloc(name, err);
    if (!f) return SD_ERR_NOMEM;
    static const uint8_t nothing[8];
    f->base = data ? data : nothing;
    f->size = data ? size : 0;
    return open_common(f, fn, ctx, out, err);
}

sd_status sd_st_open_memory(const void *data, size_t size, const char *name, sd_st_file **out,
                            sd_error *err) {
    return open_mem(data, size, name, NULL, NULL, out, err);
}

sd_status sd_st_open_memory_indexed(const void *data, size_t size, const char *name,
                                    sd_st_indexer fn, void *ctx, sd_st_file **out, sd_error *err) {
    return open_mem(data, size, name, fn, ctx, out, err);
}

sd_status sd_st_open_source(const char *path, sd_st_entry *entries, size_t n, const sd_st_source_i *src,
                            void *ctx, sd_st_file **out, sd_error *err) {
    *out = NULL;
    sd_st_file *f = file_alloc(path, err);
    if (!f) {
        for (size_t i = 0; i < n; i++) free((char *)entries[i].name);
        free(entries);
        src->free(ctx);
        return SD_ERR_NOMEM;
    }
    f->entries = entries;
    f->n = n;
    f->src = src;
    f->src_ctx = ctx;
    pthread_mutex_init(&f->src_mu, NULL);
    if (f->n) qsort(f->entries, f->n, sizeof *f->entries, cmp_entry_name); /* entries may be NULL when n is 0 */
    for (size_t i = 1; i < f->n; i++) {
        if (strcmp(f->entries[i - 1].name, f->entries[i].name) == 0) {
            sd_status st = sd_error_set(err, SD_ERR_FORMAT, "%s: tensor '%s' appears twice", f->path,
                                        f->entries[i].name);
            file_free(f);
            return st;
        }
    }
    *out = f;
    return SD_OK;
}

/* A tensor of a source-backed file: a copy read by the source. */
static sd_tensor *source_tensor(sd_st_file *f, const sd_st_entry *e, sd_error *err) {
    sd_tensor *t = sd_tensor_new(e->dtype, e->ndim, e->shape);
    if (!t) {
        sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory", f->path, e->name);
        return NULL;
    }
    if (t->nbytes != e->nbytes) {
        sd_tensor_unref(t);
        sd_error_set(err, SD_ERR_INTERNAL, "%s: tensor '%s': entry size does not match its shape", f->path,
                     e->name);
        return NULL;
    }
    pthread_mutex_lock(&f->src_mu);
    sd_status rc = t->nbytes ? f->src->read(f->src_ctx, e, t->data, err) : SD_OK;
    pthread_mutex_unlock(&f->src_mu);
    if (rc) {
        sd_tensor_unref(t);
        return NULL;
    }
    return t;
}

/* ---- queries ---------------------------------------------------------------- */

const char *sd_st_path(const sd_st_file *f) { return f->path; }
size_t sd_st_count(const sd_st_file *f) { return f->n; }

const sd_st_entry *sd_st_at(const sd_st_file *f, size_t i) {
    return i < f->n ? &f->entries[i] : NULL;
}

const sd_st_entry *sd_st_find(const sd_st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->entries[mid].name);
        if (c == 0) return &f->entries[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const char *sd_st_metadata(const sd_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

size_t sd_st_metadata_count(const sd_st_file *f) { return f->n_meta; }

void sd_st_metadata_at(const sd_st_file *f, size_t i, const char **key, const char **value) {
    if (i >= f->n_meta) {
        if (key) *key = NULL;
        if (value) *value = NULL;
        return;
    }
    if (key) *key = f->meta_keys[i];
    if (value) *value = f->meta_vals[i];
}

sd_tensor *sd_st_tensor(sd_st_file *f, const char *name, sd_error *err) {
    const sd_st_entry *e = sd_st_find(f, name);
    if (!e) {
        for (size_t i = 0; i < f->n_other; i++) {
            if (strcmp(f->other_names[i], name) == 0) {
                sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which sdflow does not support",
                             f->path, name, f->other_dtypes[i]);
                return NULL;
            }
        }
        sd_error_set(err, SD_ERR_NOT_FOUND, "%s: no tensor named '%s'", f->path, name);
        return NULL;
    }
    if (f->src) return source_tensor(f, e, err);
    void *p = (void *)(f->base + e->offset);
    /* Files from writers that do not align data would give misaligned
     * element pointers; copy those into owned (aligned) storage. Blocks of
     * the quantized types are read bytewise: any address will do. */
    size_t es = sd_dtype_is_quantized(e->dtype) ? 1 : sd_dtype_size(e->dtype);
    if ((uintptr_t)p % es != 0) {
        sd_tensor *t = sd_tensor_new(e->dtype, e->ndim, e->shape);
        if (!t) {
            sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory", f->path, name);
            return NULL;
        }
        memcpy(t->data, p, e->nbytes);
        return t;
    }
    st_borrow *b = malloc(sizeof *b);
    sd_tensor *t = b ? sd_tensor_new_borrowed(e->dtype, e->ndim, e->shape, p, borrow_release, b) : NULL;
    if (!t) {
        free(b);
        sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory", f->path, name);
        return NULL;
    }
    __atomic_add_fetch(&f->refcount, 1, __ATOMIC_RELAXED);
    *b = (st_borrow){f, p, (size_t)e->nbytes};
    return t;
}

sd_tensor *sd_st_tensor_f32(sd_st_file *f, const char *name, sd_error *err) {
    sd_tensor *t = sd_st_tensor(f, name, err);
    if (!t || t->dtype == SD_F32) return t;
    sd_tensor *c = sd_tensor_to_dtype(t, SD_F32);
    sd_tensor_unref(t);
    if (!c) sd_error_set(err, SD_ERR_NOMEM, "%s: tensor '%s': out of memory converting to F32", f->path, name);
    return c;
}

/* ---- writing ---------------------------------------------------------------- */

typedef struct wr_item {
    char *name;
    sd_tensor *t;    /* lazy items: dtype and shape only (data NULL) */
    sd_st_fill_fn fill; /* lazy items: makes the bytes at save time */
    void *user;
    uint64_t offset; /* in the data section; set while building the header */
} wr_item;

struct sd_st_writer {
    wr_item *items;
    size_t n, cap;
    char **mkeys, **mvals;
    size_t n_meta, cap_meta;
};

sd_st_writer *sd_st_writer_new(void) { return calloc(1, sizeof(sd_st_writer)); }

void sd_st_writer_free(sd_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->items[i].name);
        sd_tensor_unref(w->items[i].t);
    }
    free(w->items);
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->mkeys[i]);
        free(w->mvals[i]);
    }
    free(w->mkeys);
    free(w->mvals);
    free(w);
}

static sd_status writer_add(sd_st_writer *w, const char *name, sd_tensor *t, sd_st_fill_fn fill,
                            void *user, sd_error *err) {
    if (!name || !*name || !t)
        return sd_error_set(err, SD_ERR_INVALID, "safetensors writer: tensor needs a non-empty name and data");
    if (strcmp(name, "__metadata__") == 0)
        return sd_error_set(err, SD_ERR_INVALID, "safetensors writer: '__metadata__' is reserved");
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->items[i].name, name) == 0)
            return sd_error_set(err, SD_ERR_INVALID, "safetensors writer: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 16;
        wr_item *ni = realloc(w->items, nc * sizeof *ni);
        if (!ni) return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
        w->items = ni;
        w->cap = nc;
    }
    char *nm = strdup(name);
    if (!nm) return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
    w->items[w->n] = (wr_item){.name = nm, .t = sd_tensor_ref(t), .fill = fill, .user = user};
    w->n++;
    return SD_OK;
}

sd_status sd_st_writer_add(sd_st_writer *w, const char *name, sd_tensor *t, sd_error *err) {
    return writer_add(w, name, t, NULL, NULL, err);
}

sd_status sd_st_writer_add_lazy(sd_st_writer *w, const char *name, sd_dtype dtype, int ndim,
                                const int64_t *shape, sd_st_fill_fn fill, void *user,
                                sd_error *err) {
    if (!fill) return sd_error_set(err, SD_ERR_INVALID, "safetensors writer: lazy tensor '%s' without a fill", name);
    sd_tensor *t = sd_tensor_new_borrowed(dtype, ndim, shape, NULL, NULL, NULL);
    if (!t)
        return sd_error_set(err, SD_ERR_INVALID, "safetensors writer: tensor '%s': bad dtype or shape", name);
    sd_status rc = writer_add(w, name, t, fill, user, err);
    sd_tensor_unref(t);
    return rc;
}

/* A lazy item's bytes in chunks of this size (a multiple of every element size). */
#define LAZY_CHUNK ((size_t)8 << 20)

sd_status sd_st_writer_meta(sd_st_writer *w, const char *key, const char *value, sd_error *err) {
    if (!key || !value) return sd_error_set(err, SD_ERR_INVALID, "safetensors writer: metadata needs key and value");
    for (size_t i = 0; i < w->n_meta; i++) {
        if (strcmp(w->mkeys[i], key) == 0) {
            char *v = strdup(value);
            if (!v) return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
            free(w->mvals[i]);
            w->mvals[i] = v;
            return SD_OK;
        }
    }
    if (w->n_meta == w->cap_meta) {
        size_t nc = w->cap_meta ? w->cap_meta * 2 : 8;
        char **nk = realloc(w->mkeys, nc * sizeof *nk);
        if (!nk) return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
        w->mkeys = nk;
        char **nv = realloc(w->mvals, nc * sizeof *nv);
        if (!nv) return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
        w->mvals = nv;
        w->cap_meta = nc;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
    }
    w->mkeys[w->n_meta] = k;
    w->mvals[w->n_meta] = v;
    w->n_meta++;
    return SD_OK;
}

/* Growable text buffer for the header. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* JSON string with the escapes serde_json uses. */
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char tmp[8];
        switch (*p) {
        case '"': sb_str(b, "\\\""); break;
        case '\\': sb_str(b, "\\\\"); break;
        case '\n': sb_str(b, "\\n"); break;
        case '\r': sb_str(b, "\\r"); break;
        case '\t': sb_str(b, "\\t"); break;
        case '\b': sb_str(b, "\\b"); break;
        case '\f': sb_str(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", *p);
                sb_str(b, tmp);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_item_layout(const void *a, const void *b) {
    const wr_item *x = *(const wr_item *const *)a, *y = *(const wr_item *const *)b;
    size_t sx = sd_dtype_size(x->t->dtype), sy = sd_dtype_size(y->t->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_item_name(const void *a, const void *b) {
    return strcmp((*(const wr_item *const *)a)->name, (*(const wr_item *const *)b)->name);
}

/* Builds the padded header (8-byte length included) and the data order. */
static sd_status build_header(sd_st_writer *w, sbuf *hb, wr_item ***order_out, sd_error *err) {
    wr_item **order = malloc((w->n + 1) * sizeof *order);
    if (!order) return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
    for (size_t i = 0; i < w->n; i++) order[i] = &w->items[i];
    qsort(order, w->n, sizeof *order, cmp_item_layout);
    sb_put(hb, "\0\0\0\0\0\0\0\0", 8);
    sb_str(hb, "{");
    int first = 1;
    if (w->n_meta) {
        sb_str(hb, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i) sb_str(hb, ",");
            sb_json_str(hb, w->mkeys[i]);
            sb_str(hb, ":");
            sb_json_str(hb, w->mvals[i]);
        }
        sb_str(hb, "}");
        first = 0;
    }
    /* Offsets follow the data order; the header lists tensors by name. */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        order[i]->offset = off;
        off += order[i]->t->nbytes;
    }
    wr_item **by_name = malloc((w->n + 1) * sizeof *by_name);
    if (!by_name) {
        free(order);
        return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory");
    }
    memcpy(by_name, order, w->n * sizeof *by_name);
    qsort(by_name, w->n, sizeof *by_name, cmp_item_name);
    for (size_t i = 0; i < w->n; i++) {
        const sd_tensor *t = by_name[i]->t;
        char tmp[64];
        if (!first) sb_str(hb, ",");
        first = 0;
        sb_json_str(hb, by_name[i]->name);
        sb_str(hb, ":{\"dtype\":\"");
        sb_str(hb, sd_dtype_name(t->dtype));
        sb_str(hb, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(tmp, sizeof tmp, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_str(hb, tmp);
        }
        snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)by_name[i]->offset,
                 (unsigned long long)(by_name[i]->offset + t->nbytes));
        sb_str(hb, tmp);
    }
    free(by_name);
    sb_str(hb, "}");
    while ((hb->n - 8) % 8) sb_str(hb, " ");
    if (hb->oom) {
        free(order);
        return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory for header");
    }
    uint64_t hlen = hb->n - 8;
    for (int i = 0; i < 8; i++) hb->p[i] = (char)(uint8_t)(hlen >> (8 * i));
    *order_out = order;
    return SD_OK;
}

sd_status sd_st_writer_to_memory(sd_st_writer *w, void **out, size_t *size, sd_error *err) {
    *out = NULL;
    *size = 0;
    sbuf hb = {0};
    wr_item **order = NULL;
    sd_status st = build_header(w, &hb, &order, err);
    if (st != SD_OK) {
        free(hb.p);
        return st;
    }
    size_t total = hb.n;
    for (size_t i = 0; i < w->n; i++) total += order[i]->t->nbytes;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf) {
        free(hb.p);
        free(order);
        return sd_error_set(err, SD_ERR_NOMEM, "safetensors writer: out of memory (%zu bytes)", total);
    }
    memcpy(buf, hb.p, hb.n);
    size_t o = hb.n;
    for (size_t i = 0; i < w->n && !st; i++) {
        const wr_item *it = order[i];
        for (size_t k = 0; it->fill && k < it->t->nbytes && !st; k += LAZY_CHUNK) {
            size_t n = it->t->nbytes - k < LAZY_CHUNK ? it->t->nbytes - k : LAZY_CHUNK;
            st = it->fill(it->user, it->name, k, buf + o + k, n, err);
        }
        if (!it->fill) memcpy(buf + o, it->t->data, it->t->nbytes);
        o += it->t->nbytes;
    }
    free(hb.p);
    free(order);
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *size = total;
    return SD_OK;
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *c = p;
    while (n) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

sd_status sd_st_writer_save(sd_st_writer *w, const char *path, sd_error *err) {
    sbuf hb = {0};
    wr_item **order = NULL;
    sd_status st = build_header(w, &hb, &order, err);
    if (st != SD_OK) {
        free(hb.p);
        return st;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) {
        free(hb.p);
        free(order);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        st = sd_error_set(err, SD_ERR_IO, "%s: cannot create temporary file %s: %s", path, tmp, strerror(e));
        goto out;
    }
    int bad = write_all(fd, hb.p, hb.n);
    int e = errno;
    uint8_t *chunk = NULL;
    for (size_t i = 0; i < w->n && !bad && !st; i++) {
        const wr_item *it = order[i];
        if (!it->fill) {
            bad = write_all(fd, it->t->data, it->t->nbytes);
            e = errno;
            continue;
        }
        if (!chunk && !(chunk = malloc(LAZY_CHUNK))) {
            st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        for (size_t k = 0; k < it->t->nbytes && !bad && !st; k += LAZY_CHUNK) {
            size_t n = it->t->nbytes - k < LAZY_CHUNK ? it->t->nbytes - k : LAZY_CHUNK;
            st = it->fill(it->user, it->name, k, chunk, n, err);
            if (!st) bad = write_all(fd, chunk, n);
            e = errno;
        }
    }
    free(chunk);
    if (st) {
        close(fd);
        unlink(tmp);
        goto out;
    }
    if (!bad && fsync(fd) != 0) {
        bad = 1;
        e = errno;
    }
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        st = sd_error_set(err, SD_ERR_IO, "%s: write failed: %s", path, strerror(e));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        st = sd_error_set(err, SD_ERR_IO, "%s: cannot rename temporary file into place: %s", path, strerror(e));
    }
out:
    free(tmp);
    free(hb.p);
    free(order);
    return st;
}

/* ---- change detection ---------------------------------------------------------- */

/* The file against a reference state (its stat and whether a read had been
 * stopped): SD_OK when unchanged, else the error; *now and *faulted get
 * the current state. */
static sd_status check_against(sd_st_file *f, const struct stat *ref, int ref_faulted, struct stat *now,
                               int *faulted, sd_error *err) {
    *faulted = sd_mapguard_faulted(f->guard);
    int st_ok = fstat(f->fd, now) == 0;
    if (*faulted == ref_faulted && st_ok && now->st_size == ref->st_size &&
        now->st_mtim.tv_sec == ref->st_mtim.tv_sec && now->st_mtim.tv_nsec == ref->st_mtim.tv_nsec)
        return SD_OK;
    char what[160];
    if (!st_ok) snprintf(what, sizeof what, "cannot be checked any more: %s", strerror(errno));
    else if (now->st_size != f->st.st_size)
        snprintf(what, sizeof what, "was %s to %lld bytes (was %lld)",
                 now->st_size < f->st.st_size ? "truncated" : "resized", (long long)now->st_size,
                 (long long)f->st.st_size);
    else if (*faulted) snprintf(what, sizeof what, "was truncated (and its size restored)");
    else snprintf(what, sizeof what, "was modified (its modification time changed)");
    if (!st_ok) *now = *ref;
    return sd_error_set(err, SD_ERR_IO,
                        "%s: the file %s while in use%s; its tensors can no longer be trusted "
                        "(replace model files by renaming a new file over them; run again to reload it)",
                        f->path, what, *faulted ? " (a read past its new end was stopped)" : "");
}

sd_status sd_st_check(sd_st_file *f, sd_error *err) {
    if (!f || !f->mapped) return SD_OK;
    struct stat now;
    int faulted;
    return check_against(f, &f->st, 0, &now, &faulted, err);
}

/* Each change is reported once here (the node running when it is found
 * fails): a REPL or server may keep an old model of a changed file in its
 * memo, unused, and must not fail every later node for it. Binding from the
 * file (sd_st_check) keeps failing. */
sd_status sd_st_check_all(sd_error *err) {
    sd_status rc = SD_OK;
    pthread_mutex_lock(&files_mu);
    for (sd_st_file *f = files; f && !rc; f = f->next) {
        struct stat now;
        int faulted;
        rc = check_against(f, &f->seen, f->seen_faulted, &now, &faulted, err);
        if (rc) {
            f->seen = now;
            f->seen_faulted = faulted;
        }
    }
    pthread_mutex_unlock(&files_mu);
    return rc;
}
