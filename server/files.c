/* files.c - GET /view, confined to the input, output and temp folders, and
 * the confinement rules uploads.c shares.
 *
 * Confinement, in order: the file name may not be empty, start with '/',
 * hold a '/' or '\\' or "..", and the subfolder may not be absolute or hold
 * a ".." component (400 and 403 as ComfyUI answers); then the real path
 * (symlinks resolved) of what is read or written must lie inside the real
 * path of the folder, so a symlink planted in a folder cannot lead out of
 * it (403). */
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



int srv_bad_filename(const char *f) {
    return !f || !*f || f[0] == '/' || strchr(f, '/') || strchr(f, '\\') || strstr(f, "..") ||
           !strcmp(f, ".") || strlen(f) > 255;
}

/* Relative, no "..", no backslash; "" is fine. */
int srv_bad_subfolder(const char *sub) {
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
    srv_guard_add_headers(c);
    mg_response_header_send(c);
}

/* With --redis a file may have been made on another machine: Redis knows
 * it by name (docs/scaling.md). 0 = not there (look in the folders). */
static int view_from_redis(srv *s, struct mg_connection *c, const char *type, const char *sub, const char *filename,
                           const char *preview, const char *channel) {
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
    if (srv_view_wants_conversion(preview, channel)) {
        /* converted from a private temporary copy (formats/png.h reads files) */
        char tmp[] = "/tmp/sdflow-view-XXXXXX";
        int fd = mkstemp(tmp);
        int st = 0;
        if (fd >= 0) {
            size_t off = 0;
            while (off < n) {
                ssize_t w = write(fd, bytes + off, n - off);
                if (w <= 0) break;
                off += (size_t)w;
            }
            close(fd);
            if (off == n) st = srv_view_convert(s, c, tmp, filename, preview, channel);
            else st = srv_reply_error(c, 500, "view_failed", "converting the picture failed");
            unlink(tmp);
        } else {
            st = srv_reply_error(c, 500, "view_failed", "converting the picture failed");
        }
        if (st) { free(bytes); return st; }
    }
    send_headers(c, filename, (long long)n);
    mg_write(c, bytes, n);
    free(bytes);
    return 200;
}

int srv_view(srv *s, struct mg_connection *c) {
    char *filename = srv_query(c, "filename"), *type = srv_query(c, "type"), *sub = srv_query(c, "subfolder");
    char *preview = srv_query(c, "preview"), *channel = srv_query(c, "channel");
    int st;
    char base_real[PATH_MAX], file_real[PATH_MAX], path[PATH_MAX * 2];
    const char *base = srv_folder_of_type(s->env, type && *type ? type : "output");
    if (!filename) { st = srv_reply_error(c, 404, "not_found", "/view needs ?filename="); goto out; }
    if (srv_bad_filename(filename)) { st = srv_reply_error(c, 400, "bad_filename", "file name not allowed"); goto out; }
    if (!base) { st = srv_reply_error(c, 400, "bad_type", "type must be output, input or temp"); goto out; }
    if (srv_bad_subfolder(sub)) { st = srv_reply_error(c, 403, "forbidden", "subfolder outside the folder"); goto out; }
    if (s->rq && (st = view_from_redis(s, c, type && *type ? type : "output", sub, filename, preview, channel)))
        goto out;
    if (!realpath(base, base_real)) { st = srv_reply_error(c, 404, "not_found", "no such file"); goto out; }
    snprintf(path, sizeof path, "%s/%s%s%s", base_real, sub && *sub ? sub : "", sub && *sub ? "/" : "", filename);
    if (!realpath(path, file_real)) { st = srv_reply_error(c, 404, "not_found", "no such file"); goto out; }
    if (!inside(base_real, file_real)) {
        st = srv_reply_error(c, 403, "forbidden", "the file lies outside the folder (a symlink?)");
        goto out;
    }
    /* Regular files only. O_NONBLOCK: opening a FIFO for reading would
     * otherwise wait for a writer forever, holding this thread (60 such
     * requests stopped the server); what was opened is checked, not the
     * name, so nothing can be swapped in between. */
    int fd = open(file_real, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0) close(fd);
        st = srv_reply_error(c, 404, "not_found", "no such file");
        goto out;
    }
    if (srv_view_wants_conversion(preview, channel)) {
        /* converted from the regular file just opened and checked: its
         * /proc/self/fd name opens that same file, whatever the name now is */
        char fdpath[64];
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
        st = srv_view_convert(s, c, fdpath, filename, preview, channel);
        if (st) { close(fd); goto out; }
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
    free(preview);
    free(channel);
    return st;
}

int srv_resolve_file(const sd_env *env, const char *type, const char *sub, const char *filename, char *out,
                     size_t out_n) {
    const char *base = srv_folder_of_type(env, type && *type ? type : "output");
    char base_real[PATH_MAX], file_real[PATH_MAX], path[PATH_MAX * 2];
    if (srv_bad_filename(filename)) return 400;
    if (!base) return 400;
    if (srv_bad_subfolder(sub)) return 403;
    if (!realpath(base, base_real)) return 404;
    snprintf(path, sizeof path, "%s/%s%s%s", base_real, sub && *sub ? sub : "", sub && *sub ? "/" : "", filename);
    if (!realpath(path, file_real)) return 404;
    if (!inside(base_real, file_real)) return 403;
    struct stat sb;
    if (stat(file_real, &sb) != 0 || !S_ISREG(sb.st_mode)) return 404;
    if (strlen(file_real) >= out_n) return 404;
    snprintf(out, out_n, "%s", file_real);
    return 200;
}
