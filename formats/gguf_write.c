/* gguf_write.c - the GGUF writer (gguf.h): header built in memory, tensor
 * data streamed one tensor at a time (from memory or from a fill callback). */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN 32

typedef struct wkv {
    char *key;
    uint32_t type;
    uint8_t *val; /* encoded value */
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;
    sd_dtype dtype;
    int ndim;
    int64_t shape[SD_MAX_DIMS];
    size_t nbytes;
    uint64_t offset;
    sd_tensor *t;          /* or: */
    sd_gguf_fill_fn fill;
    void *ctx;
} wtensor;

struct sd_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

sd_gguf_writer *sd_gguf_writer_new(void) { return calloc(1, sizeof(sd_gguf_writer)); }

void sd_gguf_writer_free(sd_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        sd_tensor_unref(w->t[i].t);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static sd_status add_kv(sd_gguf_writer *w, const char *key, uint32_t type, const void *val, size_t len,
                        sd_error *err) {
    if (!key || !*key) return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: empty key");
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0)
            return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: key '%s' added twice", key);
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *n = realloc(w->kv, nc * sizeof *n);
        if (!n) return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
        w->kv = n;
        w->cap_kv = nc;
    }
    wkv *k = &w->kv[w->n_kv];
    k->key = strdup(key);
    k->val = malloc(len ? len : 1);
    if (!k->key || !k->val) {
        free(k->key);
        free(k->val);
        return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
    }
    memcpy(k->val, val, len);
    k->len = len;
    k->type = type;
    w->n_kv++;
    return SD_OK;
}

sd_status sd_gguf_writer_kv_str(sd_gguf_writer *w, const char *key, const char *value, sd_error *err) {
    size_t n = strlen(value);
    uint8_t *b = malloc(8 + n);
    if (!b) return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
    put_le(b, n, 8);
    memcpy(b + 8, value, n);
    sd_status st = add_kv(w, key, SD_GGUF_STRING, b, 8 + n, err);
    free(b);
    return st;
}

sd_status sd_gguf_writer_kv_u32(sd_gguf_writer *w, const char *key, uint32_t value, sd_error *err) {
    uint8_t b[4];
    put_le(b, value, 4);
    return add_kv(w, key, SD_GGUF_U32, b, 4, err);
}

sd_status sd_gguf_writer_kv_f32(sd_gguf_writer *w, const char *key, float value, sd_error *err) {
    uint32_t u;
    memcpy(&u, &value, 4);
    uint8_t b[4];
    put_le(b, u, 4);
    return add_kv(w, key, SD_GGUF_F32, b, 4, err);
}

sd_status sd_gguf_writer_kv_i32s(sd_gguf_writer *w, const char *key, const int32_t *v, size_t n, sd_error *err) {
    uint8_t *b = malloc(12 + 4 * n);
    if (!b) return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
    put_le(b, SD_GGUF_I32, 4);
    put_le(b + 4, n, 8);
    for (size_t i = 0; i < n; i++) put_le(b + 12 + 4 * i, (uint32_t)v[i], 4);
    sd_status st = add_kv(w, key, SD_GGUF_ARRAY, b, 12 + 4 * n, err);
    free(b);
    return st;
}

static sd_status add_tensor(sd_gguf_writer *w, const char *name, sd_dtype dt, int ndim, const int64_t *shape,
                            sd_tensor *t, sd_gguf_fill_fn fill, void *ctx, sd_error *err) {
    uint32_t gt;
    if (!name || !*name) return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: empty tensor name");
    if (!sd_gguf_dtype_type(dt, &gt))
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "GGUF writer: tensor '%s': GGUF has no %s type", name,
                            sd_dtype_name(dt));
    if (ndim < 0 || ndim > SD_GGUF_MAX_DIMS)
        return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: tensor '%s' has %d dims (at most %d)", name, ndim,
                            SD_GGUF_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if ((ndim == 0 && sd_dtype_block(dt) > 1) || (ndim > 0 && shape[ndim - 1] % sd_dtype_block(dt) != 0))
        return sd_error_set(err, SD_ERR_INVALID,
                            "GGUF writer: tensor '%s': rows of %lld elements are not whole %s blocks of %d", name,
                            (long long)(ndim ? shape[ndim - 1] : 1), sd_dtype_name(dt), sd_dtype_block(dt));
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: tensor '%s' added twice", name);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *n = realloc(w->t, nc * sizeof *n);
        if (!n) return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
        w->t = n;
        w->cap_t = nc;
    }
    wtensor *e = &w->t[w->n_t];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
    e->dtype = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = sd_dtype_nbytes(dt, numel);
    e->t = sd_tensor_ref(t);
    e->fill = fill;
    e->ctx = ctx;
    w->n_t++;
    return SD_OK;
}

sd_status sd_gguf_writer_add(sd_gguf_writer *w, const char *name, sd_tensor *t, sd_error *err) {
    if (!t) return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: tensor '%s' has no data", name ? name : "");
    return add_tensor(w, name, t->dtype, t->ndim, t->shape, t, NULL, NULL, err);
}

sd_status sd_gguf_writer_add_lazy(sd_gguf_writer *w, const char *name, sd_dtype dtype, int ndim,
                                  const int64_t *shape, sd_gguf_fill_fn fill, void *ctx, sd_error *err) {
    if (!fill) return sd_error_set(err, SD_ERR_INVALID, "GGUF writer: tensor '%s' has no fill", name ? name : "");
    return add_tensor(w, name, dtype, ndim, shape, NULL, fill, ctx, err);
}

/* ---- output ---------------------------------------------------------------------- */

/* Where bytes go: a file descriptor, or a growing buffer. */
typedef struct sink {
    int fd;
    uint8_t *buf;
    size_t n, cap;
} sink;

static int emit(sink *s, const void *p, size_t n) {
    if (s->fd >= 0) {
        const uint8_t *c = p;
        while (n) {
            ssize_t k = write(s->fd, c, n > (1u << 30) ? (1u << 30) : n);
            if (k < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            c += k;
            n -= (size_t)k;
        }
        return 0;
    }
    if (s->n + n > s->cap) {
        size_t nc = s->cap ? s->cap : 4096;
        while (nc < s->n + n) nc *= 2;
        uint8_t *b = realloc(s->buf, nc);
        if (!b) return -1;
        s->buf = b;
        s->cap = nc;
    }
    memcpy(s->buf + s->n, p, n);
    s->n += n;
    return 0;
}

static int emit_le(sink *s, uint64_t v, int n) {
    uint8_t b[8];
    put_le(b, v, n);
    return emit(s, b, (size_t)n);
}

static int emit_str(sink *s, const char *str) {
    size_t n = strlen(str);
    return emit_le(s, n, 8) || emit(s, str, n);
}

static int emit_pad(sink *s, uint64_t *at) {
    static const uint8_t zeros[ALIGN];
    uint64_t pad = (ALIGN - *at % ALIGN) % ALIGN;
    *at += pad;
    return emit(s, zeros, (size_t)pad);
}

static sd_status write_all(sd_gguf_writer *w, sink *s, sd_error *err) {
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += w->t[i].nbytes;
        off = (off + ALIGN - 1) / ALIGN * ALIGN;
    }
    uint64_t at = 0;
    int bad = emit(s, "GGUF", 4) || emit_le(s, 3, 4) || emit_le(s, w->n_t, 8) || emit_le(s, w->n_kv, 8);
    at += 24;
    for (size_t i = 0; i < w->n_kv && !bad; i++) {
        bad = emit_str(s, w->kv[i].key) || emit_le(s, w->kv[i].type, 4) || emit(s, w->kv[i].val, w->kv[i].len);
        at += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].len;
    }
    for (size_t i = 0; i < w->n_t && !bad; i++) {
        const wtensor *e = &w->t[i];
        uint32_t gt = 0;
        sd_gguf_dtype_type(e->dtype, &gt);
        bad = emit_str(s, e->name) || emit_le(s, (uint64_t)e->ndim, 4);
        for (int d = e->ndim - 1; d >= 0 && !bad; d--) bad = emit_le(s, (uint64_t)e->shape[d], 8);
        bad = bad || emit_le(s, gt, 4) || emit_le(s, e->offset, 8);
        at += 8 + strlen(e->name) + 4 + 8 * (uint64_t)e->ndim + 4 + 8;
    }
    bad = bad || emit_pad(s, &at);
    for (size_t i = 0; i < w->n_t && !bad; i++) {
        wtensor *e = &w->t[i];
        if (e->t) {
            bad = emit(s, e->t->data, e->nbytes);
        } else if (e->nbytes) {
            void *buf = malloc(e->nbytes);
            if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: tensor '%s': out of memory (%zu bytes)",
                                          e->name, e->nbytes);
            sd_status st = e->fill(e->ctx, e->name, buf, e->nbytes, err);
            if (st != SD_OK) {
                free(buf);
                return st;
            }
            bad = emit(s, buf, e->nbytes);
            free(buf);
        }
        at += e->nbytes;
        if (i + 1 < w->n_t) bad = bad || emit_pad(s, &at);
    }
    return bad ? SD_ERR_IO : SD_OK;
}

sd_status sd_gguf_writer_to_memory(sd_gguf_writer *w, void **out, size_t *size, sd_error *err) {
    *out = NULL;
    *size = 0;
    sink s = {-1, NULL, 0, 0};
    sd_status st = write_all(w, &s, err);
    if (st == SD_ERR_IO) st = sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
    if (st != SD_OK) {
        free(s.buf);
        return st;
    }
    *out = s.buf ? s.buf : malloc(1);
    *size = s.n;
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "GGUF writer: out of memory");
}

sd_status sd_gguf_writer_save(sd_gguf_writer *w, const char *path, sd_error *err) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return sd_error_set(err, SD_ERR_IO, "%s: cannot create temporary file: %s", path, strerror(e));
    }
    sink s = {fd, NULL, 0, 0};
    sd_status st = write_all(w, &s, err);
    int e = errno;
    if (st == SD_ERR_IO) st = sd_error_set(err, SD_ERR_IO, "%s: write failed: %s", path, strerror(e));
    if (st == SD_OK && fsync(fd) != 0) st = sd_error_set(err, SD_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == SD_OK) st = sd_error_set(err, SD_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (st == SD_OK && rename(tmp, path) != 0)
        st = sd_error_set(err, SD_ERR_IO, "%s: cannot rename temporary file into place: %s", path, strerror(errno));
    if (st != SD_OK) unlink(tmp);
    free(tmp);
    return st;
}
