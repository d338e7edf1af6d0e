/* files.c - GET /view and POST /upload/image, confined to the input,
 * output and temp folders.
 *
 * Confinement, in order: the file name may not be empty, start with '/',
 * hold a '/' or '\\' or "..", and the subfolder may not be absolute or hold
 * a ".." component (400 and 403 as ComfyUI answers); then the real path
 * (symlinks resolved) of what is read or written must lie inside the real
 * path of the folder, so a symlink planted in a folder cannot lead out of
 * it (403). Uploads are written to a temporary file in the target folder
 * and renamed into place, so a reader never sees half a file and a symlink
 * at the target name is replaced, not followed. Multipart parsing is
 * civetweb's (mg_handle_form_request). */
#include <civetweb.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/outfile.h"
#include "internal.h"



static int bad_filename(const char *f) {
    return !f || !*f || f[0] == '/' || strchr(f, '/') || strchr(f, '\\') || strstr(f, "..") ||
           !strcmp(f, ".") || strlen(f) > 255;
}

/* Relative, no "..", no backslash; "" is fine. */
static int bad_subfolder(const char *sub) {
    if (!sub) return 0;
    if (sub[0] == '/' || strchr(sub, '\\') || strlen(sub) > 1024) return 1;
    const char *p = sub;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && !strncmp(p, "..", 2)) return 1;
        p += n;
        if (*p == '/') p++;
    }
    return 0;
}

/* 1 when `path` (resolved) lies inside `base` (resolved) or is it. */
static int inside(const char *base_real, const char *path_real) {
    size_t n = strlen(base_real);
    if (strncmp(base_real, path_real, n)) return 0;
    return path_real[n] == 0 || path_real[n] == '/' || (n == 1 && base_real[0] == '/');
}

static const char *mime_of(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    static const char *const map[][2] = {
        {".png", "image/png"}, {".jpg", "image/jpeg"}, {".jpeg", "image/jpeg"}, {".webp", "image/webp"},
        {".gif", "image/gif"}, {".json", "application/json"}, {".txt", "text/plain; charset=utf-8"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcasecmp(dot, map[i][0])) return map[i][1];
    return "application/octet-stream";
}

static void send_headers(struct mg_connection *c, const char *filename, long long size) {
    char len[32], disp[512];
    snprintf(len, sizeof len, "%lld", size);
    /* The name is checked before (no '/'), and quotes would end the header value. */
    char safe[256];
    size_t k = 0;
    for (const char *p = filename; *p && k < sizeof safe - 1; p++) safe[k++] = (*p == '"' || *p < 0x20) ? '_' : *p;
    safe[k] = 0;
    snprintf(disp, sizeof disp, "filename=\"%s\"", safe);
    mg_response_header_start(c, 200);
    mg_response_header_add(c, "Content-Type", mime_of(filename), -1);
    mg_response_header_add(c, "Content-Length", len, -1);
    mg_response_header_add(c, "Content-Disposition", disp, -1);
    mg_response_header_add(c, "X-Content-Type-Options", "nosniff", -1);
    mg_response_header_send(c);
}

/* With --redis a file may have been made on another machine: Redis knows
 * it by name (docs/scaling.md). 0 = not there (look in the folders). */
static int view_from_redis(srv *s, struct mg_connection *c, const char *type, const char *sub, const char *filename) {
    sd_error err;
    sd_error_clear(&err);
    char *bytes = NULL;
    size_t n = 0;
    sd_status rc = srv_rq_get_file(s, type, sub ? sub : "", filename, &bytes, &n, &err);
    if (rc == SD_ERR_NOT_FOUND) return 0;
    if (rc) {
        srv_log(s, "error: /view: %s", err.msg);
        return srv_reply_error(c, 503, "redis_unavailable", "%s", err.msg);
    }
    send_headers(c, filename, (long long)n);
    mg_write(c, bytes, n);
    free(bytes);
    return 200;
}

int srv_view(srv *s, struct mg_connection *c) {
    char *filename = srv_query(c, "filename"), *type = srv_query(c, "type"), *sub = srv_query(c, "subfolder");
    int st;
    char base_real[PATH_MAX], file_real[PATH_MAX], path[PATH_MAX * 2];
    const char *base = srv_folder_of_type(s->env, type && *type ? type : "output");
    if (!filename) { st = srv_reply_error(c, 404, "not_found", "/view needs ?filename="); goto out; }
    if (bad_filename(filename)) { st = srv_reply_error(c, 400, "bad_filename", "file name not allowed"); goto out; }
    if (!base) { st = srv_reply_error(c, 400, "bad_type", "type must be output, input or temp"); goto out; }
    if (bad_subfolder(sub)) { st = srv_reply_error(c, 403, "forbidden", "subfolder outside the folder"); goto out; }
    if (s->rq && (st = view_from_redis(s, c, type && *type ? type : "output", sub, filename))) goto out;
    if (!realpath(base, base_real)) { st = srv_reply_error(c, 404, "not_found", "no such file"); goto out; }
    snprintf(path, sizeof path, "%s/%s%s%s", base_real, sub && *sub ? sub : "", sub && *sub ? "/" : "", filename);
    if (!realpath(path, file_real)) { st = srv_reply_error(c, 404, "not_found", "no such file"); goto out; }
    if (!inside(base_real, file_real)) {
        st = srv_reply_error(c, 403, "forbidden", "the file lies outside the folder (a symlink?)");
        goto out;
    }
    int fd = open(file_real, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0) close(fd);
        st = srv_reply_error(c, 404, "not_found", "no such file");
        goto out;
    }
    send_headers(c, filename, (long long)sb.st_size);
    char buf[65536];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r <= 0 || mg_write(c, buf, (size_t)r) <= 0) break;
    }
    close(fd);
    st = 200;
out:
    free(filename);
    free(type);
    free(sub);
    return st;
}

/* ---- upload ---------------------------------------------------------------- */

typedef struct upload {
    size_t limit;
    char *data;          /* the image part */
    size_t n, cap;
    char *filename;      /* as the client named it */
    char type[16], sub[1025], overwrite[16];
    char *field;         /* the text field being read (points into the above) */
    size_t field_cap, field_len;
    int has_image, too_big, bad_field;
} upload;

static int form_found(const char *key, const char *filename, char *path, size_t pathlen, void *user) {
    (void)path;
    (void)pathlen;
    upload *u = user;
    u->field = NULL;
    if (!strcmp(key, "image")) {
        if (u->has_image) return MG_FORM_FIELD_STORAGE_SKIP; /* first one counts */
        u->has_image = 1;
        free(u->filename);
        u->filename = strdup(filename ? filename : "");
        return MG_FORM_FIELD_STORAGE_GET;
    }
    struct { const char *name; char *buf; size_t cap; } text[] = {
        {"type", u->type, sizeof u->type}, {"subfolder", u->sub, sizeof u->sub},
        {"overwrite", u->overwrite, sizeof u->overwrite},
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

static int form_get(const char *key, const char *value, size_t len, void *user) {
    upload *u = user;
    if (!strcmp(key, "image") && !u->field) {
        if (u->n + len > u->limit) { u->too_big = 1; return MG_FORM_FIELD_HANDLE_ABORT; }
        if (u->n + len > u->cap) {
            size_t cap = u->cap ? u->cap : 65536;
            while (cap < u->n + len) cap *= 2;
            char *d = realloc(u->data, cap);
            if (!d) { u->too_big = 1; return MG_FORM_FIELD_HANDLE_ABORT; }
            u->data = d;
            u->cap = cap;
        }
        memcpy(u->data + u->n, value, len);
        u->n += len;
        return MG_FORM_FIELD_HANDLE_GET;
    }
    if (u->field) {
        if (u->field_len + len >= u->field_cap) { u->bad_field = 1; return MG_FORM_FIELD_HANDLE_ABORT; }
        memcpy(u->field + u->field_len, value, len);
        u->field_len += len;
        u->field[u->field_len] = 0;
        if (memchr(value, 0, len)) { u->bad_field = 1; return MG_FORM_FIELD_HANDLE_ABORT; }
    }
    return MG_FORM_FIELD_HANDLE_GET;
}

static int form_store(const char *path, long long size, void *user) {
    (void)path;
    (void)size;
    (void)user;
    return MG_FORM_FIELD_HANDLE_NEXT; /* never asked to store */
}

static int same_bytes(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[65536];
    size_t off = 0, k;
    int same = 1;
    while (same && (k = fread(buf, 1, sizeof buf, f)) > 0) {
        if (off + k > n || memcmp(buf, data + off, k)) same = 0;
        off += k;
    }
    fclose(f);
    return same && off == n;
}

/* mkdir -p of `sub` under base_real; each level must stay inside. */
static int make_subdirs(const char *base_real, const char *sub, char *out, size_t outn) {
    snprintf(out, outn, "%s", base_real);
    const char *p = sub;
    while (p && *p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && !(n == 1 && p[0] == '.')) {
            size_t len = strlen(out);
            if (len + 1 + n + 1 > outn) return -1;
            out[len] = '/';
            memcpy(out + len + 1, p, n);
            out[len + 1 + n] = 0;
            if (mkdir(out, 0755) != 0 && errno != EEXIST) return -1;
            char real[PATH_MAX];
            if (!realpath(out, real) || !inside(base_real, real)) return -2;
            snprintf(out, outn, "%s", real);
        }
        p += n;
        if (*p == '/') p++;
    }
    return 0;
}

int srv_upload_image(srv *s, struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    const char *ctype = mg_get_header(c, "Content-Type");
    if (!ctype || strncasecmp(ctype, "multipart/form-data", 19))
        return srv_reply_error(c, 400, "bad_request", "/upload/image takes multipart/form-data");
    if (ri->content_length > 0 && (unsigned long long)ri->content_length > s->max_upload + 65536)
        return srv_reply_error(c, 413, "payload_too_large", "upload of %lld bytes is over the limit of %zu",
                               ri->content_length, s->max_upload);
    upload u;
    memset(&u, 0, sizeof u);
    u.limit = s->max_upload;
    struct mg_form_data_handler h = {form_found, form_get, form_store, &u};
    int fields = mg_handle_form_request(c, &h);
    int st;
    char base_real[PATH_MAX], dir[PATH_MAX], path[PATH_MAX * 2];
    const char *type = u.type[0] ? u.type : "input";
    const char *base = srv_folder_of_type(s->env, type);
    if (u.too_big) { st = srv_reply_error(c, 413, "payload_too_large", "upload over the limit of %zu bytes", s->max_upload); goto out; }
    if (fields < 0 || u.bad_field) { st = srv_reply_error(c, 400, "bad_request", "malformed multipart body"); goto out; }
    if (!u.has_image) { st = srv_reply_error(c, 400, "bad_request", "no 'image' file field"); goto out; }
    if (bad_filename(u.filename)) { st = srv_reply_error(c, 400, "bad_filename", "file name not allowed"); goto out; }
    if (!base) { st = srv_reply_error(c, 400, "bad_type", "type must be input, output or temp"); goto out; }
    if (bad_subfolder(u.sub)) { st = srv_reply_error(c, 403, "forbidden", "subfolder outside the folder"); goto out; }
    if (mkdir(base, 0755) != 0 && errno != EEXIST) { st = srv_reply_error(c, 500, "io", "cannot create the %s folder", type); goto out; }
    if (!realpath(base, base_real)) { st = srv_reply_error(c, 500, "io", "cannot resolve the %s folder", type); goto out; }
    int m = make_subdirs(base_real, u.sub, dir, sizeof dir);
    if (m == -2) { st = srv_reply_error(c, 403, "forbidden", "subfolder leads outside the folder (a symlink?)"); goto out; }
    if (m) { st = srv_reply_error(c, 500, "io", "cannot create the subfolder"); goto out; }
    int overwrite = !strcmp(u.overwrite, "true") || !strcmp(u.overwrite, "1");
    char name[512];
    snprintf(name, sizeof name, "%s", u.filename);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int duplicate = 0;
    if (!overwrite) {
        /* ComfyUI: "name (1).ext", "name (2).ext", ... unless the same bytes are there already */
        const char *dot = strrchr(u.filename, '.');
        size_t stem = dot ? (size_t)(dot - u.filename) : strlen(u.filename);
        struct stat sb;
        for (int i = 1; lstat(path, &sb) == 0; i++) {
            if (S_ISREG(sb.st_mode) && same_bytes(path, u.data ? u.data : "", u.n)) { duplicate = 1; break; }
            snprintf(name, sizeof name, "%.*s (%d)%s", (int)stem, u.filename, i, dot ? dot : "");
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (i > 10000) { st = srv_reply_error(c, 409, "conflict", "too many files named like this"); goto out; }
        }
    }
    if (!duplicate) {
        sd_outdir od = {.fd = -1};
        sd_error err;
        sd_error_clear(&err);
        sd_status wrc = sd_outdir_open_existing(dir, &od, &err);
        if (!wrc) wrc = sd_outfile_write_replace(&od, name, u.data ? u.data : "", u.n, &err);
        sd_outdir_close(&od);
        if (wrc) {
            st = srv_reply_error(c, 500, "io", "cannot write the upload: %s", err.msg);
            goto out;
        }
    }
    if (s->rq) { /* the workers that need it may be on other machines */
        sd_error err;
        sd_error_clear(&err);
        if (srv_rq_put_file(s, type, u.sub, name, u.data ? u.data : "", u.n, &err)) {
            srv_log(s, "error: upload %s: %s", name, err.msg);
            st = srv_reply_error(c, 503, "redis_unavailable", "saved here but not in redis: %s", err.msg);
            goto out;
        }
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", name);
    cJSON_AddStringToObject(r, "subfolder", u.sub);
    cJSON_AddStringToObject(r, "type", type);
    st = srv_reply_json(c, 200, r);
out:
    free(u.data);
    free(u.filename);
    return st;
}
