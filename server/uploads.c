/* uploads.c - POST /upload/image and /upload/mask (ComfyUI's server.py
 * image_upload), streamed to disk.
 *
 * civetweb parses the multipart body and hands the file part over in chunks
 * of at most 8 KiB; each chunk goes straight into a temporary file
 * (core/outfile.h) in the input folder, so an upload of any size costs no
 * memory and the limit (--max-upload-size) is counted as the bytes arrive.
 * The fields that say where the file goes (type, subfolder, overwrite) may
 * come after the file, so the temporary is moved once the body is read:
 * renamed into the target folder, or copied when that folder is on another
 * file system. Then, as ComfyUI does, without overwrite a taken name becomes
 * "name (1).ext", "name (2).ext", ... unless the file there holds the same
 * bytes (the upload then answers with that name and writes nothing).
 *
 * Confinement: the name may not hold '/', '\\' or ".."; the subfolder is
 * relative without ".." components (both 400, as ComfyUI's commonpath
 * check); every subfolder level is opened without following links (a
 * symlinked subfolder: 403). A name is published with an operation that
 * never follows or replaces a link at the final name (overwrite replaces
 * the link itself, never its target), and the duplicate check opens an
 * existing name with O_NOFOLLOW and compares only regular files, so no
 * upload reads or writes through a link.
 *
 * /upload/mask: the same fields plus original_ref {filename, subfolder,
 * type}; the uploaded picture's alpha replaces the original's (ComfyUI's
 * mask editor), kept as a PNG with the original's text chunks. */
#define _GNU_SOURCE
#include <civetweb.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/outfile.h"
#include "core/sha256.h"
#include "core/tensor.h"
#include "formats/png.h"
#include "internal.h"

typedef struct upload_state {
    size_t limit;
    size_t n;            /* bytes of the file part so far */
    sd_outdir stage;     /* where the file part is written first */
    sd_outfile of;
    int writing;         /* of is open */
    char *filename;      /* as the client named it */
    char type[16], sub[1025], overwrite[16], original_ref[4096];
    int in_image;        /* the part being read is the file */
    char *field;         /* the text field being read (points into the above) */
    size_t field_cap, field_len;
    int has_image, too_big, bad_field, io_failed;
    int stage_errno;
} upload_state;

static int form_found(const char *key, const char *filename, char *path, size_t pathlen, void *user) {
    (void)path;
    (void)pathlen;
    upload_state *u = user;
    u->field = NULL;
    u->in_image = 0;
    if (!strcmp(key, "image")) {
        if (u->has_image) return MG_FORM_FIELD_STORAGE_SKIP; /* the first one counts */
        u->has_image = 1;
        free(u->filename);
        u->filename = strdup(filename ? filename : "");
        sd_error err;
        sd_error_clear(&err);
        if (sd_outfile_create(&u->stage, &u->of, &err)) {
            u->io_failed = 1;
            return MG_FORM_FIELD_STORAGE_ABORT;
        }
        u->writing = 1;
        u->in_image = 1;
        return MG_FORM_FIELD_STORAGE_GET;
    }
    struct { const char *name; char *buf; size_t cap; } text[] = {
        {"type", u->type, sizeof u->type}, {"subfolder", u->sub, sizeof u->sub},
        {"overwrite", u->overwrite, sizeof u->overwrite}, {"original_ref", u->original_ref, sizeof u->original_ref},
    };
    for (size_t i = 0; i < sizeof text / sizeof *text; i++) {
        if (strcmp(key, text[i].name)) continue;
        u->field = text[i].buf;
        u->field_cap = text[i].cap;
        u->field_len = 0;
        u->field[0] = 0;
        return MG_FORM_FIELD_STORAGE_GET;
    }
    return MG_FORM_FIELD_STORAGE_SKIP;
}

/* civetweb names the field only with its first chunk (later chunks of the
 * same part come with an empty key), so the part is told by what
 * form_found set up, never by `key`. */
static int form_get(const char *key, const char *value, size_t len, void *user) {
    (void)key;
    upload_state *u = user;
    if (u->in_image) {
        if (u->n + len > u->limit) { u->too_big = 1; return MG_FORM_FIELD_HANDLE_ABORT; }
        if (len && fwrite(value, 1, len, u->of.f) != len) { u->io_failed = 1; return MG_FORM_FIELD_HANDLE_ABORT; }
        u->n += len;
        return MG_FORM_FIELD_HANDLE_GET;
    }
    if (u->field) {
        if (u->field_len + len >= u->field_cap || memchr(value, 0, len)) {
            u->bad_field = 1;
            return MG_FORM_FIELD_HANDLE_ABORT;
        }
        memcpy(u->field + u->field_len, value, len);
        u->field_len += len;
        u->field[u->field_len] = 0;
    }
    return MG_FORM_FIELD_HANDLE_GET;
}

static int form_store(const char *path, long long size, void *user) {
    (void)path;
    (void)size;
    (void)user;
    return MG_FORM_FIELD_HANDLE_NEXT; /* never asked to store */
}

/* 1 when the regular file `name` in dirfd holds exactly the bytes of fd
 * (read from the start). A link, a folder or anything not a regular file
 * at `name` is never opened for reading (O_NOFOLLOW | O_NONBLOCK, then
 * fstat), so the check cannot read through a link. */
static int same_file_bytes(int dirfd, const char *name, int fd) {
    int other = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (other < 0) return 0;
    struct stat a, b;
    int same = fstat(other, &a) == 0 && fstat(fd, &b) == 0 && S_ISREG(a.st_mode) && a.st_size == b.st_size;
    char x[65536], y[65536];
    off_t off = 0;
    while (same) {
        ssize_t k = pread(fd, x, sizeof x, off);
        if (k < 0) { same = 0; break; }
        if (k == 0) break;
        ssize_t got = 0;
        while (got < k) {
            ssize_t r = pread(other, y + got, (size_t)(k - got), off + got);
            if (r <= 0) break;
            got += r;
        }
        same = got == k && !memcmp(x, y, (size_t)k);
        off += k;
    }
    close(other);
    return same;
}

/* Moves the staged temporary into `to` under the same temporary name:
 * rename when both folders share a file system, else a copy. Afterwards
 * the outfile belongs to `to`. */
static sd_status move_stage(upload_state *u, const sd_outdir *to, sd_error *err) {
    if (fflush(u->of.f)) return sd_error_set(err, SD_ERR_IO, "cannot write the upload: %s", strerror(errno));
    if (renameat(u->stage.fd, u->of.tmp, to->fd, u->of.tmp) == 0) {
        u->of.dirfd = to->fd;
        return SD_OK;
    }
    if (errno != EXDEV) return sd_error_set(err, SD_ERR_IO, "cannot move the upload: %s", strerror(errno));
    sd_outfile copy;
    memset(&copy, 0, sizeof copy);
    sd_status rc = sd_outfile_create(to, &copy, err);
    if (rc) return rc;
    rewind(u->of.f);
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, u->of.f)) > 0)
        if (fwrite(buf, 1, k, copy.f) != k) break;
    if (ferror(u->of.f) || ferror(copy.f)) {
        sd_outfile_discard(&copy);
        return sd_error_set(err, SD_ERR_IO, "cannot copy the upload into its folder");
    }
    sd_outfile_discard(&u->of);
    u->of = copy;
    return SD_OK;
}

/* The mask editor's result: the original (original_ref, confined like
 * /view) with the uploaded picture's alpha channel, written over the staged
 * temporary. HTTP status on refusal (and *msg), 0 when done. */
static int composite_mask(srv *s, upload_state *u, const char **msg, char *why, size_t why_n) {
    cJSON *ref = cJSON_Parse(u->original_ref);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(ref, "filename");
    const cJSON *sub = cJSON_GetObjectItemCaseSensitive(ref, "subfolder");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ref, "type");
    char path[8192], ref_name[512] = "";
    const char *ref_type = cJSON_IsString(type) ? type->valuestring : "output";
    int st = 0;
    /* ComfyUI's annotated names: "name.png [input]" names its folder */
    static const char *const notes[] = {"input", "output", "temp"};
    if (cJSON_IsString(fn) && strlen(fn->valuestring) < sizeof ref_name) {
        snprintf(ref_name, sizeof ref_name, "%s", fn->valuestring);
        size_t len = strlen(ref_name);
        for (int i = 0; i < 3; i++) {
            size_t k = strlen(notes[i]) + 3;
            if (len > k && ref_name[len - k] == ' ' && ref_name[len - k + 1] == '[' && ref_name[len - 1] == ']' &&
                !strncmp(ref_name + len - k + 2, notes[i], k - 3)) {
                ref_name[len - k] = 0;
                ref_type = notes[i];
                break;
            }
        }
    }
    if (!ref_name[0] || srv_bad_filename(ref_name)) {
        *msg = "original_ref must name a file ({filename, subfolder, type})";
        st = 400;
    } else if (sub && (!cJSON_IsString(sub) || srv_bad_subfolder(sub->valuestring))) {
        *msg = "original_ref.subfolder lies outside the folder";
        st = 403;
    } else if (srv_resolve_file(s->env, ref_type, cJSON_IsString(sub) ? sub->valuestring : "", ref_name, path,
                                sizeof path) != 200) {
        *msg = "original_ref names no file";
        st = 404;
    }
    sd_tensor *orig = NULL, *mask = NULL;
    sd_png_text *texts = NULL;
    size_t n_texts = 0;
    sd_error err;
    sd_error_clear(&err);
    if (!st && fflush(u->of.f)) st = 500, *msg = "cannot write the upload";
    char stage_path[8192];
    snprintf(stage_path, sizeof stage_path, "/proc/self/fd/%d", fileno(u->of.f));
    if (!st && sd_png_read(path, SD_PNG_RGBA, &orig, NULL, &err)) st = 400, *msg = "the original is not a PNG picture";
    if (!st && sd_png_read(stage_path, SD_PNG_RGBA, &mask, NULL, &err)) st = 400, *msg = "the mask is not a PNG picture";
    if (!st && (orig->shape[0] != mask->shape[0] || orig->shape[1] != mask->shape[1]))
        st = 400, *msg = "the mask's size differs from the original's";
    if (st == 400 && err.msg[0]) snprintf(why, why_n, "%s", err.msg);
    if (!st) {
        float *o = orig->data;
        const float *m = mask->data;
        size_t px = (size_t)orig->shape[0] * (size_t)orig->shape[1];
        for (size_t i = 0; i < px; i++) o[i * 4 + 3] = m[i * 4 + 3];
        sd_png_read_texts(path, &texts, &n_texts, &err); /* none is fine */
        /* the composite replaces the staged bytes */
        if (ftruncate(fileno(u->of.f), 0) || fseek(u->of.f, 0, SEEK_SET) ||
            sd_png_write_stream(u->of.f, "mask", orig, texts, n_texts, 4, &err))
            st = 500, *msg = "cannot write the composite";
        else
            u->n = (size_t)ftello(u->of.f);
    }
    sd_png_texts_free(texts, n_texts);
    sd_tensor_unref(orig);
    sd_tensor_unref(mask);
    cJSON_Delete(ref);
    return st;
}

static int upload(srv *s, struct mg_connection *c, int mask) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    const char *ctype = mg_get_header(c, "Content-Type");
    if (!ctype || strncasecmp(ctype, "multipart/form-data", 19))
        return srv_reply_error(c, 400, "bad_request", "uploads take multipart/form-data");
    if (ri->content_length > 0 && (unsigned long long)ri->content_length > s->max_upload + 65536)
        return srv_reply_error(c, 413, "payload_too_large", "upload of %lld bytes is over the limit of %zu",
                               ri->content_length, s->max_upload);
    upload_state u;
    memset(&u, 0, sizeof u);
    u.stage.fd = -1;
    u.limit = s->max_upload;
    sd_outdir to = {.fd = -1};
    sd_error err;
    sd_error_clear(&err);
    int st;
    if (sd_outdir_open(s->env->input_dir, "", &u.stage, &err)) {
        srv_log(s, "error: upload: %s", err.msg);
        return srv_reply_error(c, 500, "io", "cannot open the input folder");
    }
    struct mg_form_data_handler h = {form_found, form_get, form_store, &u};
    int fields = mg_handle_form_request(c, &h);
    const char *type = u.type[0] ? u.type : "input";
    const char *base = srv_folder_of_type(s->env, type);
    char name[600];
    if (u.too_big) { st = srv_reply_error(c, 413, "payload_too_large", "upload over the limit of %zu bytes", s->max_upload); goto out; }
    if (u.io_failed) { st = srv_reply_error(c, 500, "io", "cannot store the upload"); goto out; }
    if (fields < 0 || u.bad_field) { st = srv_reply_error(c, 400, "bad_request", "malformed multipart body"); goto out; }
    if (!u.has_image) { st = srv_reply_error(c, 400, "bad_request", "no 'image' file field"); goto out; }
    if (srv_bad_filename(u.filename)) { st = srv_reply_error(c, 400, "bad_filename", "file name not allowed"); goto out; }
    if (!base) { st = srv_reply_error(c, 400, "bad_type", "type must be input, output or temp"); goto out; }
    if (srv_bad_subfolder(u.sub)) { st = srv_reply_error(c, 400, "bad_subfolder", "subfolder outside the folder"); goto out; }
    if (mask) {
        const char *msg = NULL;
        char why[SD_ERR_MSG_MAX] = "";
        if (!u.original_ref[0]) { st = srv_reply_error(c, 400, "bad_request", "no original_ref field"); goto out; }
        if ((st = composite_mask(s, &u, &msg, why, sizeof why))) {
            if (why[0]) srv_log(s, "upload/mask: %s", why);
            st = srv_reply_error(c, st, "bad_request", "%s", msg);
            goto out;
        }
    }
    sd_status orc = sd_outdir_open(base, u.sub, &to, &err);
    if (orc == SD_ERR_INVALID) { st = srv_reply_error(c, 403, "forbidden", "subfolder leads outside the folder (a symlink?)"); goto out; }
    if (orc) { srv_log(s, "error: upload: %s", err.msg); st = srv_reply_error(c, 500, "io", "cannot create the subfolder"); goto out; }
    if (move_stage(&u, &to, &err)) { srv_log(s, "error: upload: %s", err.msg); st = srv_reply_error(c, 500, "io", "cannot store the upload"); goto out; }
    int overwrite = !strcmp(u.overwrite, "true") || !strcmp(u.overwrite, "1");
    snprintf(name, sizeof name, "%s", u.filename);
    sd_status wrc = SD_OK;
    if (overwrite) {
        wrc = sd_outfile_replace(&u.of, name, &err);
    } else {
        /* ComfyUI: "name (1).ext", "name (2).ext", ... unless the same bytes are there already */
        const char *dot = strrchr(u.filename, '.');
        size_t stem = dot ? (size_t)(dot - u.filename) : strlen(u.filename);
        if (fflush(u.of.f)) wrc = sd_error_set(&err, SD_ERR_IO, "cannot write the upload");
        for (int i = 1; !wrc; i++) {
            if (same_file_bytes(to.fd, name, fileno(u.of.f))) {
                sd_outfile_discard(&u.of); /* the same bytes are there: nothing written */
                break;
            }
            int taken = 0;
            wrc = sd_outfile_publish(&u.of, name, &taken, &err);
            if (!wrc && !taken) break;
            if (i > 10000) { st = srv_reply_error(c, 409, "conflict", "too many files named like this"); goto out; }
            snprintf(name, sizeof name, "%.*s (%d)%s", (int)stem, u.filename, i, dot ? dot : "");
        }
    }
    if (wrc) {
        srv_log(s, "error: upload: %s", err.msg);
        st = srv_reply_error(c, 500, "io", "cannot write the upload");
        goto out;
    }
    if (s->rq) { /* the workers that need it may be on other machines */
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", to.path, name);
        size_t n = 0;
        char *bytes = srv_read_file(path, &n);
        sd_status prc = bytes ? srv_rq_put_file(s, type, u.sub, name, bytes, n, &err)
                              : sd_error_set(&err, SD_ERR_IO, "cannot read the upload back");
        free(bytes);
        if (prc) {
            srv_log(s, "error: upload %s: %s", name, err.msg);
            st = srv_reply_error(c, 503, "redis_unavailable", "saved here but not in redis: %s", err.msg);
            goto out;
        }
    }
    srv_log(s, "upload: %s%s%s (%zu bytes) into %s", u.sub, u.sub[0] ? "/" : "", name, u.n, type);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", name);
    cJSON_AddStringToObject(r, "subfolder", u.sub);
    cJSON_AddStringToObject(r, "type", type);
    st = srv_reply_json(c, 200, r);
out:
    sd_outfile_discard(&u.of);
    sd_outdir_close(&to);
    sd_outdir_close(&u.stage);
    free(u.filename);
    return st;
}

int srv_upload_image(srv *s, struct mg_connection *c) {
    return upload(s, c, 0);
}

int srv_upload_mask(srv *s, struct mg_connection *c) {
    return upload(s, c, 1);
}
