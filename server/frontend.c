/* frontend.c - hosting a built web frontend (--front-end-root DIR, or the
 * page folder of --www): every file under the folder, `index.html` at `/`,
 * and ComfyUI's `/extensions` listing (server.py, middleware/
 * cache_middleware.py).
 *
 * Files: the request path (decoded once by http.c) may not hold "..",
 * a backslash or a NUL (400), and the real path of the file (links
 * resolved) must lie inside the real path of the folder (404 otherwise,
 * as aiohttp's static route without follow_symlinks); folders are not
 * listed (403). Content types are those of Python's mimetypes table that
 * ComfyUI relies on (.js as "application/javascript; charset=utf-8").
 * Caching as ComfyUI: index.html "no-cache" with Pragma and Expires;
 * .js, .css and index*.json "no-cache" (revalidated: Last-Modified and
 * If-Modified-Since answer 304); pictures "public, max-age=86400" (a missing
 * one 3600); nothing for the rest. */
#define _GNU_SOURCE
#include <civetweb.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

const char *srv_mime_of(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || strchr(dot, '/')) return "application/octet-stream";
    static const char *const map[][2] = {
        {".html", "text/html; charset=utf-8"}, {".htm", "text/html; charset=utf-8"},
        {".js", "application/javascript; charset=utf-8"}, {".mjs", "application/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"}, {".json", "application/json"}, {".map", "application/json"},
        {".webmanifest", "application/manifest+json"}, {".txt", "text/plain; charset=utf-8"},
        {".md", "text/markdown; charset=utf-8"}, {".svg", "image/svg+xml"}, {".png", "image/png"},
        {".jpg", "image/jpeg"}, {".jpeg", "image/jpeg"}, {".webp", "image/webp"}, {".gif", "image/gif"},
        {".avif", "image/avif"}, {".ico", "image/vnd.microsoft.icon"}, {".bmp", "image/bmp"},
        {".woff", "font/woff"}, {".woff2", "font/woff2"}, {".ttf", "font/ttf"}, {".otf", "font/otf"},
        {".eot", "application/vnd.ms-fontobject"}, {".wasm", "application/wasm"}, {".mp4", "video/mp4"},
        {".webm", "video/webm"}, {".mp3", "audio/mpeg"}, {".wav", "audio/x-wav"}, {".flac", "audio/flac"},
        {".ogg", "audio/ogg"}, {".glb", "model/gltf-binary"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcasecmp(dot, map[i][0])) return map[i][1];
    return "application/octet-stream";
}

static int is_picture(const char *path) {
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof ext / sizeof *ext; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

/* ComfyUI's cache_control middleware: the Cache-Control a path gets. */
static const char *cache_of(const char *path, int status) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(path), bn = strlen(base);
    int entry = !strncmp(base, "index", 5) && bn >= 5 && !strcmp(base + bn - 5, ".json");
    if ((n >= 3 && !strcmp(path + n - 3, ".js")) || (n >= 4 && !strcmp(path + n - 4, ".css")) || entry)
        return "no-cache";
    if (!is_picture(path)) return NULL;
    return status == 404 ? "public, max-age=3600" : "public, max-age=86400";
}

static void http_date(time_t t, char out[64]) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 64, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static int not_found(struct mg_connection *c, const char *path) {
    const char *cc = cache_of(path, 404);
    char extra[128] = "";
    if (cc) snprintf(extra, sizeof extra, "Cache-Control: %s\r\n", cc);
    static const char msg[] = "404: Not Found";
    mg_response_header_start(c, 404);
    mg_response_header_add(c, "Content-Type", "text/plain; charset=utf-8", -1);
    mg_response_header_add(c, "Content-Length", "14", -1);
    if (extra[0]) mg_response_header_add_lines(c, extra);
    mg_response_header_send(c);
    mg_write(c, msg, sizeof msg - 1);
    return 404;
}

/* Sends root/rel (rel without a leading '/'); `url` is the request path
 * the caching rule looks at. */
static int send_static(srv *s, struct mg_connection *c, const char *root, const char *rel, const char *url,
                       int index_page) {
    (void)s;
    char root_real[PATH_MAX], file_real[PATH_MAX], path[PATH_MAX * 2];
    if (!realpath(root, root_real)) return not_found(c, url);
    snprintf(path, sizeof path, "%s/%s", root_real, rel);
    if (!realpath(path, file_real)) return not_found(c, url);
    size_t n = strlen(root_real);
    if (strncmp(root_real, file_real, n) || (file_real[n] && file_real[n] != '/')) return not_found(c, url);
    int fd = open(file_real, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return not_found(c, url);
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return srv_reply(c, 403, "text/plain; charset=utf-8", "403: Forbidden", 14, NULL);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return not_found(c, url);
    }
    char modified[64], len[32];
    http_date(sb.st_mtime, modified);
    const char *since = mg_get_header(c, "If-Modified-Since");
    int fresh = !index_page && since && !strcmp(since, modified);
    const char *cc = index_page ? "no-cache" : cache_of(url, fresh ? 304 : 200);
    mg_response_header_start(c, fresh ? 304 : 200);
    mg_response_header_add(c, "Content-Type", srv_mime_of(file_real), -1);
    mg_response_header_add(c, "Last-Modified", modified, -1);
    if (cc) mg_response_header_add(c, "Cache-Control", cc, -1);
    if (index_page) {
        mg_response_header_add(c, "Pragma", "no-cache", -1);
        mg_response_header_add(c, "Expires", "0", -1);
    }
    if (fresh) {
        mg_response_header_add(c, "Content-Length", "0", -1);
        mg_response_header_send(c);
        close(fd);
        return 304;
    }
    snprintf(len, sizeof len, "%lld", (long long)sb.st_size);
    mg_response_header_add(c, "Content-Length", len, -1);
    mg_response_header_send(c);
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (strcmp(ri->request_method, "HEAD")) {
        char buf[65536];
        long long left = sb.st_size;
        while (left > 0) {
            ssize_t r = read(fd, buf, sizeof buf < (size_t)left ? sizeof buf : (size_t)left);
            if (r <= 0 || mg_write(c, buf, (size_t)r) <= 0) break;
            left -= r;
        }
    }
    close(fd);
    return 200;
}

const char *srv_web_root(const srv *s) {
    return s->o->front_end_root ? s->o->front_end_root : s->o->www_dir;
}

int srv_frontend_has(const srv *s, const char *rel) {
    const char *root = srv_web_root(s);
    char path[PATH_MAX];
    struct stat sb;
    if (!root) return 0;
    snprintf(path, sizeof path, "%s/%s", root, rel);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int srv_frontend_index(srv *s, struct mg_connection *c) {
    return send_static(s, c, srv_web_root(s), "index.html", "/index.html", 1);
}

int srv_frontend_file(srv *s, struct mg_connection *c, const char *path) {
    if (strstr(path, "..") || strchr(path, '\\'))
        return srv_reply(c, 400, "text/plain; charset=utf-8", "400: Bad Request", 16, NULL);
    const char *rel = path;
    while (*rel == '/') rel++;
    if (!*rel) return srv_frontend_index(s, c);
    return send_static(s, c, srv_web_root(s), rel, path, 0);
}

/* ---- /extensions ------------------------------------------------------------------- */

static int by_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.js below root/rel (links to folders are not followed), as
 * "/rel/...". */
static void find_js(const char *root, const char *rel, int depth, char ***list, size_t *n, size_t *cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && *n < 10000) {
        if (e->d_name[0] == '.') continue;
        char sub[PATH_MAX], full[PATH_MAX * 2];
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat sb;
        if (lstat(full, &sb) != 0) continue;
        size_t len = strlen(e->d_name);
        if (S_ISDIR(sb.st_mode) && depth < 16) {
            find_js(root, sub, depth + 1, list, n, cap);
        } else if ((S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) && len > 3 && !strcmp(e->d_name + len - 3, ".js")) {
            if (*n == *cap) {
                char **l = realloc(*list, (*cap = *cap ? *cap * 2 : 64) * sizeof *l);
                if (!l) break;
                *list = l;
            }
            if (asprintf(&(*list)[*n], "/%s", sub) >= 0) (*n)++;
        }
    }
    closedir(d);
}

int srv_frontend_extensions(srv *s, struct mg_connection *c) {
    cJSON *a = cJSON_CreateArray();
    const char *root = srv_web_root(s);
    if (root) {
        char **list = NULL;
        size_t n = 0, cap = 0;
        find_js(root, "extensions", 0, &list, &n, &cap);
        if (n > 1) qsort(list, n, sizeof *list, by_str);
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(a, cJSON_CreateString(list[i]));
            free(list[i]);
        }
        free(list);
    }
    return srv_reply_json(c, 200, a);
}
