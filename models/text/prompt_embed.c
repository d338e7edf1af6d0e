/* prompt_embed.c - textual-inversion lookup and tensor choice, as ComfyUI's
 * comfy.sd1_clip.load_embed does it, for .safetensors files. */
#include "models/text/prompt_embed.h"
#include "formats/safetensors.h"
#include "formats/torch_ckpt.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_WALK_DEPTH 16
#define MAX_WALK_DIRS 4096

static void warnf(const sd_prompt_opts *o, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!o->warn)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->warn(o->warn_ud, msg);
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Lexically normalized relative form of name, or NULL when it is absolute,
 * empty, or climbs out with "..": ComfyUI's commonpath check. */
static char *safe_relative(const char *name)
{
    size_t len = strlen(name);
    char *out = malloc(len + 1), *copy = strdup(name);
    size_t k = 0;
    if (!out || !copy || name[0] == '/') {
        free(out);
        free(copy);
        return NULL;
    }
    char *save = NULL;
    for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            if (k == 0) {
                free(out);
                free(copy);
                return NULL;
            }
            while (k > 0 && out[k - 1] != '/')
                k--;
            if (k > 0)
                k--; /* drop the separator too */
            continue;
        }
        if (k)
            out[k++] = '/';
        memcpy(out + k, c, strlen(c));
        k += strlen(c);
    }
    free(copy);
    out[k] = '\0';
    if (k == 0) {
        free(out);
        return NULL;
    }
    return out;
}

typedef struct dirlist { char **v; size_t n, cap; } dirlist;

static int dirlist_add(dirlist *l, const char *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(p)))
        return -1;
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir and its subdirectories (symlinks followed, depth-limited), pre-order
 * with sorted names so the search order is reproducible. */
static int walk(dirlist *l, const char *dir, int depth)
{
    DIR *d;
    struct dirent *e;
    dirlist subs = {0};
    int rc = 0;
    if (l->n >= MAX_WALK_DIRS || dirlist_add(l, dir) < 0)
        return l->n >= MAX_WALK_DIRS ? 0 : -1;
    if (depth >= MAX_WALK_DEPTH || !(d = opendir(dir)))
        return 0;
    while ((e = readdir(d))) {
        char p[4096];
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (is_dir(p) && dirlist_add(&subs, p) < 0) {
            rc = -1;
            break;
        }
    }
    closedir(d);
    if (subs.n)
        qsort(subs.v, subs.n, sizeof *subs.v, cmp_str);
    for (size_t i = 0; i < subs.n && rc == 0; i++)
        rc = walk(l, subs.v[i], depth + 1);
    for (size_t i = 0; i < subs.n; i++)
        free(subs.v[i]);
    free(subs.v);
    return rc;
}

/* ComfyUI's choice of tensor inside the file: *res = new [rows, dim] F32,
 * or NULL (with a warning) when the file holds nothing usable. */
static sd_status pick_tensor(sd_st_file *f, const char *key, const char *path, int pickle,
                             const sd_prompt_opts *o, sd_tensor **res, sd_error *err)
{
    sd_status st = SD_OK;
    size_t n = sd_st_count(f);
    const sd_st_entry **by_off = malloc((n ? n : 1) * sizeof *by_off);
    const sd_st_entry **sel = malloc((n ? n : 1) * sizeof *sel);
    size_t ns = 0;
    sd_tensor *out = NULL;
    if (!by_off || !sel) {
        st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* safetensors.torch.load_file returns keys in data-offset order */
    for (size_t i = 0; i < n; i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        size_t j = i;
        while (j > 0 && by_off[j - 1]->offset > e->offset) {
            by_off[j] = by_off[j - 1];
            j--;
        }
        by_off[j] = e;
    }
    /* A torch file (A1111's format, keys flattened by formats/torch_ckpt.h):
     * ComfyUI takes the first value of its 'string_to_param' dict before
     * looking at the key. Entries of such a file are in pickle order. */
    if (pickle)
        for (size_t i = 0; i < n && ns == 0; i++)
            if (strncmp(by_off[i]->name, "string_to_param.", 16) == 0)
                sel[ns++] = by_off[i];
    if (ns) {
        /* chosen above */
    } else if (key && sd_st_find(f, key)) {
        sel[ns++] = sd_st_find(f, key);
    } else {
        char suffix[256];
        for (int pass = 0; pass < 2 && ns == 0; pass++) {
            if (pass == 0)
                snprintf(suffix, sizeof suffix, ".string_to_param.*");
            else if (key)
                snprintf(suffix, sizeof suffix, ".%s", key);
            else
                break;
            size_t sl = strlen(suffix);
            for (size_t i = 0; i < n; i++) {
                const char *nm = by_off[i]->name;
                size_t l = strlen(nm);
                if (strncmp(nm, "bundle_emb.", 11) == 0 && l >= sl &&
                    strcmp(nm + l - sl, suffix) == 0)
                    sel[ns++] = by_off[i];
            }
        }
        if (ns == 0 && n > 0)
            sel[ns++] = by_off[0];
    }
    if (ns == 0) {
        warnf(o, "embedding file %s holds no tensors, ignoring it", path);
        goto done;
    }
    int64_t rows = 0, dim = -1;
    for (size_t i = 0; i < ns; i++) {
        const sd_st_entry *e = sel[i];
        int64_t d = e->ndim ? e->shape[e->ndim - 1] : -1;
        if (e->ndim < 1 || e->ndim > 2 || !sd_dtype_is_float(e->dtype) || (dim >= 0 && d != dim)) {
            warnf(o, "embedding tensor '%s' in %s is not [rows, dim] floats, ignoring it",
                  e->name, path);
            goto done;
        }
        dim = d;
        rows += e->ndim == 2 ? e->shape[0] : 1;
    }
    out = sd_tensor_new4(SD_F32, 2, rows, dim, 0, 0);
    if (!out) {
        st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    float *dst = sd_tensor_f32(out);
    for (size_t i = 0; i < ns; i++) {
        sd_tensor *t = sd_st_tensor_f32(f, sel[i]->name, err);
        if (!t) {
            st = err ? err->code : SD_ERR_FORMAT;
            sd_tensor_unref(out);
            out = NULL;
            goto done;
        }
        int64_t cnt = sd_tensor_numel(t);
        if (cnt)
            memcpy(dst, sd_tensor_f32(t), (size_t)cnt * sizeof *dst);
        dst += cnt;
        sd_tensor_unref(t);
    }
done:
    free(by_off);
    free(sel);
    *res = out;
    return st;
}

static int has_suffix_ci(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

sd_status sd_prompt_embed_load(const sd_prompt_opts *o, const char *name, char **path,
                               sd_tensor **vectors, sd_error *err)
{
    static const char *const exts[] = {".safetensors", ".pt", ".bin"};
    dirlist dirs = {0};
    char *rel = safe_relative(name), *found = NULL;
    sd_status st = SD_OK;
    *path = NULL;
    *vectors = NULL;
    if (!rel)
        return SD_OK; /* empty, absolute or escaping name: never found */
    for (size_t i = 0; i < o->n_embedding_dirs; i++)
        if (o->embedding_dirs[i] && walk(&dirs, o->embedding_dirs[i], 0) < 0) {
            st = sd_error_set(err, SD_ERR_NOMEM, "embedding search: out of memory");
            goto done;
        }
    for (size_t i = 0; i < dirs.n && !found; i++) {
        size_t cap = strlen(dirs.v[i]) + strlen(rel) + 16;
        char *p = malloc(cap);
        if (!p) {
            st = sd_error_set(err, SD_ERR_NOMEM, "embedding search: out of memory");
            goto done;
        }
        snprintf(p, cap, "%s/%s", dirs.v[i], rel);
        if (is_file(p)) {
            found = p;
            break;
        }
        size_t base = strlen(p);
        for (size_t k = 0; k < 3 && !found; k++) {
            strcpy(p + base, exts[k]);
            if (is_file(p))
                found = p;
        }
        if (!found)
            free(p);
    }
    if (!found)
        goto done;
    /* ComfyUI picks the reader by extension: safetensors for .safetensors,
     * torch.load(weights_only=True) for anything else. */
    int pickle = !has_suffix_ci(found, ".safetensors");
    sd_st_file *f = NULL;
    sd_error e2;
    sd_error_clear(&e2);
    if (pickle) {
        /* A .pt/.bin the weights-only reader refuses is an error, not a
         * skip: ComfyUI may well read it, and silently dropping the
         * embedding would change the image. */
        if ((st = sd_torch_open(found, &f, err)) != SD_OK) {
            sd_error_prefix(err, "embedding '%s'", name);
            goto done;
        }
    } else if (sd_st_open(found, &f, &e2) != SD_OK) {
        warnf(o, "error loading embedding %s, skipping it: %s", found, e2.msg);
        goto done;
    }
    st = pick_tensor(f, o->embedding_key, found, pickle, o, vectors, err);
    sd_st_close(f);
    if (*vectors) {
        *path = found;
        found = NULL;
    }
done:
    for (size_t i = 0; i < dirs.n; i++)
        free(dirs.v[i]);
    free(dirs.v);
    free(found);
    free(rel);
    return st;
}
