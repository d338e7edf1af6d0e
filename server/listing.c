/* listing.c - ComfyUI's /internal routes the frontend uses
 * (api_server/routes/internal/internal_routes.py): /internal/files/{type},
 * the names of the regular files of the input, output or temp folder
 * (dot files left out), newest first; /internal/logs and /internal/logs/raw,
 * which answer an empty log (sdflow's log goes to its own stream, not to
 * the page); PATCH /internal/logs/subscribe, accepted. /internal/folder_paths
 * is not served: it would show the machine's folders. */
#define _GNU_SOURCE
#include <civetweb.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "internal.h"

typedef struct entry {
    char *name;
    double mtime;
} entry;

static int newest_first(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->mtime != y->mtime) return x->mtime < y->mtime ? 1 : -1;
    return strcmp(x->name, y->name);
}

static int files_of(srv *s, struct mg_connection *c, const char *type) {
    if (strcmp(type, "input") && strcmp(type, "output") && strcmp(type, "temp")) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "error", "Invalid directory type");
        return srv_reply_json(c, 400, e);
    }
    const char *dir = srv_folder_of_type(s->env, type);
    DIR *d = dir ? opendir(dir) : NULL;
    entry *list = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) && n < 100000) {
        struct stat sb;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            entry *l = realloc(list, (cap = cap ? cap * 2 : 64) * sizeof *l);
            if (!l) break;
            list = l;
        }
        if (!(list[n].name = strdup(de->d_name))) break;
        list[n++].mtime = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
    }
    if (d) closedir(d);
    if (n > 1) qsort(list, n, sizeof *list, newest_first);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateString(list[i].name));
        free(list[i].name);
    }
    free(list);
    return srv_reply_json(c, 200, a);
}

int srv_internal_route(srv *s, struct mg_connection *c, const char *method, const char *path) {
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (get && !strncmp(path, "/internal/files/", 16) && path[16] && !strchr(path + 16, '/'))
        return files_of(s, c, path + 16);
    if (get && !strcmp(path, "/internal/logs")) return srv_reply_json(c, 200, cJSON_CreateString(""));
    if (get && !strcmp(path, "/internal/logs/raw")) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddArrayToObject(r, "entries");
        cJSON *size = cJSON_AddObjectToObject(r, "size");
        cJSON_AddNumberToObject(size, "cols", 80);
        cJSON_AddNumberToObject(size, "rows", 24);
        return srv_reply_json(c, 200, r);
    }
    if (!strcmp(method, "PATCH") && !strcmp(path, "/internal/logs/subscribe")) {
        char *body = NULL;
        size_t n = 0;
        int st = srv_read_body(s, c, s->max_body, &body, &n);
        free(body);
        return st ? st : srv_reply(c, 200, "text/plain", "", 0, NULL);
    }
    return -1;
}
