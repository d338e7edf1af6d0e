/* userdata.c - the user's own files, as ComfyUI's app/user_manager.py and
 * app/app_settings.py serve them: /users, /settings, /settings/{id},
 * /userdata (listing), /v2/userdata, /userdata/{file} (GET, POST, DELETE),
 * /userdata/{file}/move/{dest} and /user.css.
 *
 * Storage: one user ("default", ComfyUI's single-user mode) whose files
 * live in <user directory>/default; settings are its comfy.settings.json.
 *
 * What is data stays data:
 *   - Confinement: a file path is relative, at most 1024 bytes and 32
 *     levels, with no "..", "." or empty component, no backslash, no NUL
 *     (a percent-encoded one included: names are decoded once, after the
 *     route is split) and no component that names one of our temporaries;
 *     refused paths answer 403 ("Invalid directory" 403 for a listing, as
 *     ComfyUI). Every level is opened relative to the one above with
 *     O_NOFOLLOW, so a symbolic link inside the folder (planted by anyone)
 *     leads nowhere: it is not listed, read, written through or moved.
 *   - Writes are atomic: the body goes to a temporary in the same folder,
 *     is fsync'd and renamed over the name (core/outfile.h), then the folder
 *     is fsync'd; a reader or a crash (kill -9 included) sees the old file
 *     or the new one, never a part. Concurrent saves of one file each
 *     publish a whole body; the last rename wins. overwrite=false publishes
 *     with RENAME_NOREPLACE, so two racing creators cannot both succeed.
 *   - Limits: one file is at most --max-body bytes (413 beyond).
 *   - Settings are read, changed and written under one lock, so two
 *     settings posted at once both stay.
 */
#define _GNU_SOURCE
#include <civetweb.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/json_util.h"
#include "core/outfile.h"
#include "internal.h"

#define UD_PATH_MAX 1024
#define UD_DEPTH_MAX 32
#define UD_LIST_MAX 100000 /* entries one listing returns at most */

static int reply_text(struct mg_connection *c, int status, const char *text) {
    return srv_reply(c, status, "text/plain; charset=utf-8", text, strlen(text), NULL);
}

/* ---- paths ------------------------------------------------------------------ */

/* 0 when `rel` is a path the rules above allow ("" only when allow_empty). */
static int check_rel(const char *rel, int allow_empty) {
    size_t n = strlen(rel);
    if (!n) return allow_empty ? 0 : -1;
    if (n > UD_PATH_MAX || rel[0] == '/' || strchr(rel, '\\')) return -1;
    int depth = 0;
    for (const char *p = rel; *p;) {
        const char *e = strchr(p, '/');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == 0 || k > 255 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.')) return -1;
        if (k >= 12 && !strncmp(p, ".sdflow-tmp-", 12)) return -1;
        if (++depth > UD_DEPTH_MAX) return -1;
        p += k;
        if (*p == '/') {
            p++;
            if (!*p) return -1; /* a trailing slash */
        }
    }
    return 0;
}

/* Opens the folder `rel` ("" = the user's root) level by level without
 * following links. create: make missing levels. Returns the descriptor or
 * -1 with errno (ENOENT absent, ELOOP/ENOTDIR a link or a file). */
static int open_dir(srv *s, const char *rel, int create) {
    if (create && mkdir(s->user_root, 0755) != 0 && errno != EEXIST) return -1;
    int fd = open(s->user_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char part[256];
    for (const char *p = rel; fd >= 0 && *p;) {
        const char *e = strchr(p, '/');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        memcpy(part, p, k);
        part[k] = 0;
        p += k + (e ? 1 : 0);
        int nfd = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, part, 0755) != 0 && errno != EEXIST) nfd = -1;
            else nfd = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int e2 = errno;
        close(fd);
        fd = nfd;
        errno = e2;
    }
    return fd;
}

/* "a/b/c.json" -> dir "a/b", leaf "c.json" (dir "" at the top). */
static void split_rel(const char *rel, char *dir, size_t dir_n, const char **leaf) {
    const char *slash = strrchr(rel, '/');
    if (!slash) {
        dir[0] = 0;
        *leaf = rel;
        return;
    }
    snprintf(dir, dir_n, "%.*s", (int)(slash - rel), rel);
    *leaf = slash + 1;
}

/* The raw (still percent-encoded) route tail after /userdata/, so that an
 * encoded '/' inside a name cannot be mistaken for the /move/ separator:
 * civetweb is told not to decode paths (http.c) for this reason. */
static const char *raw_tail(struct mg_connection *c) {
    const char *p = mg_get_request_info(c)->local_uri;
    if (!p) return NULL;
    if (!strncmp(p, "/api/", 5)) p += 4;
    if (strncmp(p, "/userdata/", 10)) return NULL;
    return p + 10;
}

/* Decodes n bytes of a percent-encoded name into a fresh string; NULL when
 * it decodes to a NUL byte or is not valid. */
static char *decode(const char *s, size_t n) {
    char *out = malloc(n + 1);
    if (!out) return NULL;
    int k = mg_url_decode(s, (int)n, out, (int)n + 1, 0);
    if (k < 0 || (size_t)k != strlen(out)) {
        free(out);
        return NULL;
    }
    return out;
}

static cJSON *file_info(const char *rel, const struct stat *sb) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", rel);
    cJSON_AddNumberToObject(o, "size", (double)sb->st_size);
    cJSON_AddNumberToObject(o, "modified", (double)sb->st_mtim.tv_sec + sb->st_mtim.tv_nsec * 1e-9);
    cJSON_AddNumberToObject(o, "created", (double)sb->st_ctim.tv_sec + sb->st_ctim.tv_nsec * 1e-9);
    return o;
}

/* ---- listing ------------------------------------------------------------------ */

typedef struct walk {
    cJSON *out;
    size_t n;
    int recurse, full_info, split, v2;
    char rel[UD_PATH_MAX + 300]; /* relative to the listed folder (v2: to the user's root) */
} walk;

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists dirfd (takes it). Dot files and our temporaries are skipped, as
 * ComfyUI's glob skips dot files; links are never followed. */
static void walk_dir(walk *w, int fd, int depth) {
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < UD_LIST_MAX) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *nn);
            if (!nn) break;
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    if (n > 1) qsort(names, n, sizeof *names, by_name);
    size_t base = strlen(w->rel);
    /* v2 lists folders first, then files (ComfyUI sorts them so per level) */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n && w->n < UD_LIST_MAX; i++) {
            struct stat sb;
            if (fstatat(dirfd(d), names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
            int is_dir = S_ISDIR(sb.st_mode);
            if (!is_dir && !S_ISREG(sb.st_mode)) continue;
            if (w->v2 ? (pass == 0) != is_dir : pass == 1) continue;
            snprintf(w->rel + base, sizeof w->rel - base, "%s%s", base ? "/" : "", names[i]);
            if (is_dir) {
                if (w->v2) {
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddStringToObject(o, "name", names[i]);
                    cJSON_AddStringToObject(o, "path", w->rel);
                    cJSON_AddStringToObject(o, "type", "directory");
                    cJSON_AddItemToArray(w->out, o);
                    w->n++;
                }
                if ((w->recurse || w->v2) && depth < UD_DEPTH_MAX) {
                    int sub = openat(dirfd(d), names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                    if (sub >= 0) walk_dir(w, sub, depth + 1);
                }
            } else if (w->v2) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", names[i]);
                cJSON_AddStringToObject(o, "path", w->rel);
                cJSON_AddStringToObject(o, "type", "file");
                cJSON_AddNumberToObject(o, "size", (double)sb.st_size);
                cJSON_AddNumberToObject(o, "modified", (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9);
                cJSON_AddItemToArray(w->out, o);
                w->n++;
            } else if (w->full_info) {
                cJSON_AddItemToArray(w->out, file_info(w->rel, &sb));
                w->n++;
            } else if (w->split) {
                cJSON *a = cJSON_CreateArray();
                cJSON_AddItemToArray(a, cJSON_CreateString(w->rel));
                for (const char *p = w->rel; *p;) {
                    const char *slash = strchr(p, '/');
                    size_t k = slash ? (size_t)(slash - p) : strlen(p);
                    char part[256];
                    snprintf(part, sizeof part, "%.*s", (int)k, p);
                    cJSON_AddItemToArray(a, cJSON_CreateString(part));
                    p += k + (slash ? 1 : 0);
                }
                cJSON_AddItemToArray(w->out, a);
                w->n++;
            } else {
                cJSON_AddItemToArray(w->out, cJSON_CreateString(w->rel));
                w->n++;
            }
            w->rel[base] = 0;
        }
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
}

static int query_true(struct mg_connection *c, const char *name) {
    char *v = srv_query(c, name);
    int yes = v && !strcasecmp(v, "true");
    free(v);
    return yes;
}

/* GET /userdata?dir=&recurse=&full_info=&split= */
static int list_v1(srv *s, struct mg_connection *c) {
    char *dir = srv_query(c, "dir");
    int st;
    if (!dir || !*dir) {
        st = reply_text(c, 400, "Directory not provided");
    } else if (check_rel(dir, 0)) {
        st = reply_text(c, 403, "Invalid directory");
    } else {
        int fd = open_dir(s, dir, 0);
        if (fd < 0) {
            st = errno == ENOENT ? reply_text(c, 404, "Directory not found") : reply_text(c, 403, "Invalid directory");
        } else {
            walk w = {.out = cJSON_CreateArray(), .recurse = query_true(c, "recurse"),
                      .full_info = query_true(c, "full_info"), .split = query_true(c, "split")};
            walk_dir(&w, fd, 0);
            st = srv_reply_json(c, 200, w.out);
        }
    }
    free(dir);
    return st;
}

/* GET /v2/userdata?path= */
static int list_v2(srv *s, struct mg_connection *c) {
    char *path = srv_query(c, "path");
    const char *rel = path ? path : "";
    int st;
    if (check_rel(rel, 1)) {
        st = reply_text(c, 400, "Invalid path requested");
    } else {
        int fd = open_dir(s, rel, 0);
        if (fd < 0 && errno == ENOENT && !*rel) {
            st = srv_reply_json(c, 200, cJSON_CreateArray()); /* a new user: nothing yet */
        } else if (fd < 0) {
            st = errno == ENOENT ? reply_text(c, 404, "Requested path not found")
                                 : reply_text(c, 400, "Requested path is not a directory");
        } else {
            walk w = {.out = cJSON_CreateArray(), .v2 = 1};
            snprintf(w.rel, sizeof w.rel, "%s", rel);
            walk_dir(&w, fd, 0);
            st = srv_reply_json(c, 200, w.out);
        }
    }
    free(path);
    return st;
}

/* ---- one file ---------------------------------------------------------------------- */

/* Opens an existing regular file for reading: fd, or -1 (404). */
static int open_file(srv *s, const char *rel, struct stat *sb) {
    char dir[UD_PATH_MAX + 1];
    const char *leaf;
    split_rel(rel, dir, sizeof dir, &leaf);
    int dfd = open_dir(s, dir, 0);
    if (dfd < 0) return -1;
    int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd >= 0 && (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int send_file(struct mg_connection *c, int fd, const struct stat *sb, const char *name) {
    char len[32];
    snprintf(len, sizeof len, "%lld", (long long)sb->st_size);
    mg_response_header_start(c, 200);
    mg_response_header_add(c, "Content-Type", srv_mime_of(name), -1);
    mg_response_header_add(c, "Content-Length", len, -1);
    mg_response_header_add(c, "Cache-Control", "no-cache", -1);
    mg_response_header_add(c, "X-Content-Type-Options", "nosniff", -1);
    mg_response_header_send(c);
    char buf[65536];
    long long left = sb->st_size;
    while (left > 0) {
        ssize_t r = read(fd, buf, sizeof buf < (size_t)left ? sizeof buf : (size_t)left);
        if (r <= 0 || mg_write(c, buf, (size_t)r) <= 0) break;
        left -= r;
    }
    return 200;
}

/* The JSON a write or move answers: the path, or its file info. */
static int reply_written(srv *s, struct mg_connection *c, const char *rel, int full_info) {
    if (!full_info) return srv_reply_json(c, 200, cJSON_CreateString(rel));
    struct stat sb;
    int fd = open_file(s, rel, &sb);
    if (fd < 0) return reply_text(c, 404, "Not found");
    close(fd);
    return srv_reply_json(c, 200, file_info(rel, &sb));
}

/* Writes n bytes as rel atomically (overwrite: replace; else 409 when the
 * name is taken). Returns 0 or the HTTP status of the refusal (msg set). */
static int write_file(srv *s, const char *rel, const void *data, size_t n, int overwrite, const char **msg) {
    char dir[UD_PATH_MAX + 1];
    const char *leaf;
    split_rel(rel, dir, sizeof dir, &leaf);
    sd_outdir od = {.fd = -1};
    sd_outfile of;
    memset(&of, 0, sizeof of);
    sd_error err;
    sd_error_clear(&err);
    if (mkdir(s->user_root, 0755) != 0 && errno != EEXIST) {
        *msg = "cannot create the user folder";
        return 500;
    }
    sd_status rc = sd_outdir_open(s->user_root, dir, &od, &err);
    if (rc) {
        *msg = rc == SD_ERR_INVALID ? "Invalid path" : "cannot create the folder";
        srv_log(s, "userdata: %s", err.msg);
        return rc == SD_ERR_INVALID ? 403 : 500;
    }
    sd_outdir_scan(&od, NULL, NULL, NULL, &err); /* temporaries of a killed writer go */
    int st = 0, taken = 0;
    rc = sd_outfile_create(&od, &of, &err);
    if (!rc && n && fwrite(data, 1, n, of.f) != n) rc = sd_error_set(&err, SD_ERR_IO, "write failed");
    if (!rc) rc = overwrite ? sd_outfile_replace(&of, leaf, &err) : sd_outfile_publish(&of, leaf, &taken, &err);
    if (rc) {
        srv_log(s, "userdata: %s: %s", rel, err.msg);
        *msg = "Invalid filename. Please avoid special characters like :\\/*?\"<>|";
        st = 400; /* ComfyUI's answer to an OSError (a folder at the name, ...) */
    } else if (taken) {
        *msg = "File already exists";
        st = 409;
    }
    sd_outfile_discard(&of);
    sd_outdir_close(&od);
    return st;
}

static int get_file(srv *s, struct mg_connection *c, const char *rel) {
    struct stat sb;
    int fd = open_file(s, rel, &sb);
    if (fd < 0) {
        /* the page always links user.css; without one it is empty (ComfyUI: 404) */
        if (!strcmp(rel, "user.css")) return srv_reply(c, 200, "text/css; charset=utf-8", "", 0, NULL);
        return reply_text(c, 404, "Not found");
    }
    int st = send_file(c, fd, &sb, rel);
    close(fd);
    return st;
}

static int post_file(srv *s, struct mg_connection *c, const char *rel) {
    char *ow = srv_query(c, "overwrite");
    int overwrite = !ow || strcmp(ow, "false"); /* ComfyUI: only "false" keeps a file */
    free(ow);
    char *fi = srv_query(c, "full_info");
    int full_info = fi && !strcasecmp(fi, "true");
    free(fi);
    char *body = NULL;
    size_t n = 0;
    int st = srv_read_body(s, c, s->max_body, &body, &n);
    if (st) return st;
    const char *msg = NULL;
    pthread_mutex_lock(&s->ud_mu); /* settings are read-modify-write under this lock */
    st = write_file(s, rel, body, n, overwrite, &msg);
    pthread_mutex_unlock(&s->ud_mu);
    free(body);
    if (st) return reply_text(c, st, msg);
    return reply_written(s, c, rel, full_info);
}

static int delete_file(srv *s, struct mg_connection *c, const char *rel) {
    char dir[UD_PATH_MAX + 1];
    const char *leaf;
    split_rel(rel, dir, sizeof dir, &leaf);
    int dfd = open_dir(s, dir, 0);
    struct stat sb;
    if (dfd < 0 || fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(sb.st_mode)) {
        if (dfd >= 0) close(dfd);
        return reply_text(c, 404, "Not found");
    }
    int ok = unlinkat(dfd, leaf, 0) == 0; /* a link itself goes, never its target */
    if (ok) fsync(dfd);
    close(dfd);
    if (!ok) return reply_text(c, 500, "cannot delete the file");
    return srv_reply(c, 204, "text/plain", "", 0, NULL);
}

static int move_file(srv *s, struct mg_connection *c, const char *from, const char *to) {
    char *ow = srv_query(c, "overwrite");
    int overwrite = !ow || strcmp(ow, "false");
    free(ow);
    char *fi = srv_query(c, "full_info");
    int full_info = fi && !strcasecmp(fi, "true");
    free(fi);
    char sdir[UD_PATH_MAX + 1], ddir[UD_PATH_MAX + 1];
    const char *sleaf, *dleaf;
    split_rel(from, sdir, sizeof sdir, &sleaf);
    split_rel(to, ddir, sizeof ddir, &dleaf);
    int sfd = open_dir(s, sdir, 0), dfd = -1, st = 0;
    struct stat sb;
    pthread_mutex_lock(&s->ud_mu);
    if (sfd < 0 || fstatat(sfd, sleaf, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode)) {
        st = reply_text(c, 404, "Not found");
    } else if ((dfd = open_dir(s, ddir, 1)) < 0) {
        st = reply_text(c, 403, "Invalid destination");
    } else if (renameat2(sfd, sleaf, dfd, dleaf, overwrite ? 0 : RENAME_NOREPLACE) != 0) {
        if (errno == EEXIST) st = reply_text(c, 409, "File already exists");
        else st = reply_text(c, 400, "cannot move the file");
    } else {
        fsync(dfd);
        if (sfd != dfd) fsync(sfd);
    }
    pthread_mutex_unlock(&s->ud_mu);
    if (sfd >= 0) close(sfd);
    if (dfd >= 0) close(dfd);
    if (st) return st;
    srv_log(s, "userdata: moved %s -> %s", from, to);
    return reply_written(s, c, to, full_info);
}

/* /userdata/{file} and /userdata/{file}/move/{dest}: the parts are split on
 * the raw path, then each is decoded once and checked. */
static int file_route(srv *s, struct mg_connection *c, const char *method) {
    const char *tail = raw_tail(c);
    if (!tail || !*tail) return reply_text(c, 400, "no file named");
    const char *mv = strstr(tail, "/move/");
    char *from = decode(tail, mv ? (size_t)(mv - tail) : strlen(tail));
    char *to = mv ? decode(mv + 6, strlen(mv + 6)) : NULL;
    int st;
    if (!from || (mv && !to)) st = reply_text(c, 400, "invalid file name");
    else if (check_rel(from, 0) || (to && check_rel(to, 0))) st = reply_text(c, 403, "Invalid path");
    else if (mv && strcmp(method, "POST")) st = srv_reply_error(c, 405, "method_not_allowed", "use POST to move");
    else if (mv) st = move_file(s, c, from, to);
    else if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) st = get_file(s, c, from);
    else if (!strcmp(method, "POST")) st = post_file(s, c, from);
    else if (!strcmp(method, "DELETE")) st = delete_file(s, c, from);
    else st = srv_reply_error(c, 405, "method_not_allowed", "use GET, POST or DELETE");
    free(from);
    free(to);
    return st;
}

/* ---- settings ----------------------------------------------------------------------- */

#define SETTINGS "comfy.settings.json"

/* The settings object ({} when absent or unreadable, as ComfyUI). Caller
 * holds ud_mu when it writes them back. */
static cJSON *read_settings(srv *s) {
    struct stat sb;
    int fd = open_file(s, SETTINGS, &sb);
    cJSON *j = NULL;
    if (fd >= 0) {
        char *buf = (size_t)sb.st_size <= s->max_body ? malloc((size_t)sb.st_size + 1) : NULL;
        size_t got = 0;
        while (buf && got < (size_t)sb.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
        close(fd);
        if (buf) {
            buf[got] = 0;
            sd_error err;
            sd_error_clear(&err);
            if (sd_json_parse_exact(buf, SETTINGS, &j, &err) != SD_OK || !cJSON_IsObject(j)) {
                srv_log(s, "warning: the user settings file is corrupted; answering {}");
                cJSON_Delete(j);
                j = NULL;
            }
        }
        free(buf);
    }
    return j ? j : cJSON_CreateObject();
}

static int write_settings(srv *s, cJSON *settings, struct mg_connection *c) {
    char *text = sd_json_print(settings, 1);
    if (!text) return srv_reply_error(c, 500, "out_of_memory", "out of memory");
    const char *msg = NULL;
    int st = write_file(s, SETTINGS, text, strlen(text), 1, &msg);
    free(text);
    if (st) return reply_text(c, st, msg);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

static int settings_route(srv *s, struct mg_connection *c, const char *method, const char *id) {
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!get && strcmp(method, "POST")) return srv_reply_error(c, 405, "method_not_allowed", "use GET or POST");
    if (get) {
        cJSON *all = read_settings(s);
        if (!id) return srv_reply_json(c, 200, all);
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(all, id);
        cJSON_Delete(all);
        return srv_reply_json(c, 200, v ? v : cJSON_CreateNull());
    }
    cJSON *body = NULL;
    char *text = NULL;
    size_t n = 0;
    int st = srv_read_body(s, c, s->max_body, &text, &n);
    if (st) return st;
    sd_error err;
    sd_error_clear(&err);
    if (strlen(text) != n || sd_json_parse_exact(text, "request body", &body, &err) != SD_OK) {
        free(text);
        return srv_reply_error(c, 400, "invalid_json", "%s", err.msg[0] ? err.msg : "the body holds a NUL byte");
    }
    free(text);
    if (!id && !cJSON_IsObject(body)) {
        cJSON_Delete(body);
        return srv_reply_error(c, 400, "invalid_json", "POST /settings takes a JSON object");
    }
    pthread_mutex_lock(&s->ud_mu);
    cJSON *all = read_settings(s);
    if (id) {
        cJSON_DeleteItemFromObjectCaseSensitive(all, id);
        cJSON_AddItemToObject(all, id, body);
    } else { /* {**settings, **new} */
        cJSON *it;
        while ((it = body->child)) {
            cJSON_DetachItemViaPointer(body, it);
            cJSON_DeleteItemFromObjectCaseSensitive(all, it->string);
            cJSON_AddItemToObject(all, it->string, it);
        }
        cJSON_Delete(body);
    }
    st = write_settings(s, all, c);
    pthread_mutex_unlock(&s->ud_mu);
    cJSON_Delete(all);
    return st;
}

/* ---- users ----------------------------------------------------------------------------- */

static int users_route(srv *s, struct mg_connection *c, const char *method) {
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
        /* single-user mode: whether the default user's folder exists */
        struct stat sb;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "storage", "server");
        cJSON_AddBoolToObject(r, "migrated", stat(s->user_root, &sb) == 0 && S_ISDIR(sb.st_mode));
        return srv_reply_json(c, 200, r);
    }
    if (strcmp(method, "POST")) return srv_reply_error(c, 405, "method_not_allowed", "use GET or POST");
    cJSON *body = NULL;
    int st = srv_read_json(s, c, 0, &body);
    if (st) return st;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(body, "username");
    cJSON *r = cJSON_CreateObject();
    /* One user ("default") is all this server has: ComfyUI's single-user
     * mode, where another name could be added but never used. */
    if (!cJSON_IsString(name) || !name->valuestring[0]) cJSON_AddStringToObject(r, "error", "username not provided");
    else if (!strcmp(name->valuestring, "default")) cJSON_AddStringToObject(r, "error", "Duplicate username.");
    else cJSON_AddStringToObject(r, "error", "this server has a single user (ComfyUI's single-user mode)");
    cJSON_Delete(body);
    return srv_reply_json(c, 400, r);
}

/* ---- set-up and routing ------------------------------------------------------------------ */

sd_status srv_userdata_start(srv *s, sd_error *err) {
    const char *dir = s->o->user_dir;
    char *made = NULL;
    if (!dir) { /* beside the output folder, as ComfyUI's <base>/user */
        const char *out = s->env->output_dir ? s->env->output_dir : "output";
        size_t n = strlen(out);
        while (n > 1 && out[n - 1] == '/') n--;
        size_t k = n;
        while (k > 0 && out[k - 1] != '/') k--;
        if (asprintf(&made, "%.*suser", (int)k, out) < 0) made = NULL;
        dir = made;
    }
    if (!dir) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        sd_error_set(err, SD_ERR_IO, "--user-directory %s: cannot create it: %s", dir, strerror(errno));
        free(made);
        return err->code;
    }
    if (asprintf(&s->user_root, "%s/default", dir) < 0) s->user_root = NULL;
    free(made);
    if (!s->user_root) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* the lists the frontend asks for at start exist (empty) from the first start */
    int fd = open_dir(s, "workflows", 1);
    if (fd >= 0) close(fd);
    fd = open_dir(s, "subgraphs", 1);
    if (fd >= 0) close(fd);
    pthread_mutex_init(&s->ud_mu, NULL);
    s->ud_started = 1;
    return SD_OK;
}

void srv_userdata_stop(srv *s) {
    if (s->ud_started) pthread_mutex_destroy(&s->ud_mu);
    s->ud_started = 0;
    free(s->user_root);
    s->user_root = NULL;
}

int srv_userdata_route(srv *s, struct mg_connection *c, const char *method, const char *path) {
    if (!strcmp(path, "/users")) return users_route(s, c, method);
    if (!strcmp(path, "/settings")) return settings_route(s, c, method, NULL);
    if (!strncmp(path, "/settings/", 10) && path[10]) return settings_route(s, c, method, path + 10);
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!strcmp(path, "/userdata")) {
        if (!get) return srv_reply_error(c, 405, "method_not_allowed", "use GET");
        return list_v1(s, c);
    }
    if (!strcmp(path, "/v2/userdata")) {
        if (!get) return srv_reply_error(c, 405, "method_not_allowed", "use GET");
        return list_v2(s, c);
    }
    if (!strncmp(path, "/userdata/", 10)) return file_route(s, c, method);
    if (!strcmp(path, "/user.css")) {
        if (!get) return srv_reply_error(c, 405, "method_not_allowed", "use GET");
        return get_file(s, c, "user.css");
    }
    return -1;
}
