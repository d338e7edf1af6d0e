/* routes.c - which handler answers which path, and the read-only endpoints
 * that need no queue: the page, /object_info, /system_stats, /features and
 * what a ComfyUI with nothing installed answers. Paths arrive decoded and
 * without the /api prefix (http.c strips it). */
#include <civetweb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include "core/env.h"
#include "core/object_info.h"
#include "internal.h"

static int get_object_info(srv *s, struct mg_connection *c, const char *cls) {
    if (!cls) return srv_reply_json(c, 200, sd_object_info(s->env));
    cJSON *root = cJSON_CreateObject();
    const sd_node_def *d = sd_registry_find(cls);
    /* ComfyUI: {} for an unknown class; an alias (CLIPEncode) is no class of its */
    if (root && d && !strcmp(d->class_type, cls)) cJSON_AddItemToObject(root, cls, sd_object_info_node(d, s->env));
    return srv_reply_json(c, 200, root);
}

static int get_system_stats(srv *s, struct mg_connection *c) {
    struct sysinfo si;
    long long total = 0, avail = 0;
    if (sysinfo(&si) == 0) {
        total = (long long)si.totalram * si.mem_unit;
        avail = (long long)(si.freeram + si.bufferram) * si.mem_unit;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *sys = cJSON_AddObjectToObject(root, "system");
    cJSON_AddStringToObject(sys, "os", "posix");
    cJSON_AddNumberToObject(sys, "ram_total", (double)total);
    cJSON_AddNumberToObject(sys, "ram_free", (double)avail);
    cJSON_AddStringToObject(sys, "comfyui_version", s->o->version ? s->o->version : "sdflow");
    cJSON_AddStringToObject(sys, "python_version", "");
    cJSON_AddStringToObject(sys, "pytorch_version", "");
    cJSON_AddBoolToObject(sys, "embedded_python", 0);
    cJSON *argv = cJSON_AddArrayToObject(sys, "argv");
    /* secrets on the command line (the token, a Redis password) are not shown */
    for (int i = 0; s->o->argv && s->o->argv[i]; i++) {
        const char *a = s->o->argv[i], *prev = i ? s->o->argv[i - 1] : "";
        char shown[1024];
        const char *at = strchr(a, '@'), *scheme = strstr(a, "://");
        if (!strcmp(prev, "--token") || !strncmp(a, "--token=", 8))
            snprintf(shown, sizeof shown, "%s", strncmp(a, "--token=", 8) ? "***" : "--token=***");
        else if (scheme && at && at > scheme)
            snprintf(shown, sizeof shown, "%.*s***%s", (int)(scheme + 3 - a), a, at);
        else
            snprintf(shown, sizeof shown, "%s", a);
        cJSON_AddItemToArray(argv, cJSON_CreateString(shown));
    }
    cJSON *devs = cJSON_AddArrayToObject(root, "devices");
    if (s->rq) {
        /* With --redis the devices are the workers' (each announces itself
         * every 2 s and drops out 10 s after it stops); "workers" is
         * sdflow's own, with what each is doing. */
        cJSON *workers = srv_rq_workers(s);
        const cJSON *w;
        cJSON_ArrayForEach(w, workers) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(w, "name"), *dev = cJSON_GetObjectItemCaseSensitive(w, "device");
            const cJSON *idx = cJSON_GetObjectItemCaseSensitive(w, "index");
            char label[320];
            snprintf(label, sizeof label, "%s (%s)", cJSON_IsString(name) ? name->valuestring : "?",
                     cJSON_IsString(dev) ? dev->valuestring : "?");
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "name", label);
            cJSON_AddStringToObject(d, "type", cJSON_IsString(dev) ? dev->valuestring : "cpu");
            cJSON_AddNumberToObject(d, "index", cJSON_IsNumber(idx) ? idx->valuedouble : 0);
            cJSON_AddNumberToObject(d, "vram_total", 0);
            cJSON_AddNumberToObject(d, "vram_free", 0);
            cJSON_AddNumberToObject(d, "torch_vram_total", 0);
            cJSON_AddNumberToObject(d, "torch_vram_free", 0);
            cJSON_AddItemToArray(devs, d);
        }
        cJSON_AddItemToObject(root, "workers", workers);
        return srv_reply_json(c, 200, root);
    }
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToArray(devs, d);
    const char *dev = s->env->device ? s->env->device : "cpu";
    cJSON_AddStringToObject(d, "name", dev);
    cJSON_AddStringToObject(d, "type", dev);
    cJSON_AddNumberToObject(d, "index", 0);
    /* A CPU device's memory is the RAM; a CUDA device's is not measured here. */
    int cpu = !strcmp(dev, "cpu");
    cJSON_AddNumberToObject(d, "vram_total", cpu ? (double)total : 0);
    cJSON_AddNumberToObject(d, "vram_free", cpu ? (double)avail : 0);
    cJSON_AddNumberToObject(d, "torch_vram_total", 0);
    cJSON_AddNumberToObject(d, "torch_vram_free", 0);
    return srv_reply_json(c, 200, root);
}

static int get_page(srv *s, struct mg_connection *c) {
    if (srv_web_root(s)) return srv_frontend_index(s, c);
    return srv_reply(c, 200, "text/html; charset=utf-8", srv_page_html, srv_page_html_len, NULL);
}

static int get_features(srv *s, struct mg_connection *c) {
    return srv_reply_json(c, 200, srv_server_features(s));
}

/* "/history/abc" with prefix "/history" -> "abc"; NULL when path is not
 * prefix + "/" + a non-empty rest. */
static const char *tail_of(const char *path, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) || path[n] != '/' || !path[n + 1]) return NULL;
    return path + n + 1;
}

int srv_route(srv *s, struct mg_connection *c, const char *method, const char *path) {
    /* the queue's endpoints: in this process, or in Redis */
#define Q(fn, ...) (s->rq ? srv_rq_##fn(__VA_ARGS__) : srv_##fn(__VA_ARGS__))
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    const char *rest;
#define ONLY(cond, allowed) \
    if (!(cond)) return srv_reply_error(c, 405, "method_not_allowed", "%s %s: use %s", method, path, allowed)
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) { ONLY(get, "GET"); return get_page(s, c); }
    if (!strcmp(path, "/prompt")) {
        if (get) return srv_reply_json(c, 200, srv_queue_info(s));
        ONLY(post, "GET or POST");
        return Q(post_prompt, s, c);
    }
    if (!strcmp(path, "/queue")) {
        if (get) return Q(get_queue, s, c);
        ONLY(post, "GET or POST");
        return Q(post_queue, s, c);
    }
    if (!strcmp(path, "/history")) {
        if (get) return Q(get_history, s, c, NULL);
        ONLY(post, "GET or POST");
        return Q(post_history, s, c);
    }
    if ((rest = tail_of(path, "/history"))) { ONLY(get, "GET"); return Q(get_history, s, c, rest); }
    if (!strcmp(path, "/interrupt")) { ONLY(post, "POST"); return Q(post_interrupt, s, c); }
    if (!strcmp(path, "/free")) { ONLY(post, "POST"); return Q(post_free, s, c); }
    if (!strcmp(path, "/view")) { ONLY(get, "GET"); return srv_view(s, c); }
    if (!strcmp(path, "/upload/image")) { ONLY(post, "POST"); return srv_upload_image(s, c); }
    if (!strcmp(path, "/upload/mask")) { ONLY(post, "POST"); return srv_upload_mask(s, c); }
    if (!strcmp(path, "/object_info")) { ONLY(get, "GET"); return get_object_info(s, c, NULL); }
    if ((rest = tail_of(path, "/object_info"))) { ONLY(get, "GET"); return get_object_info(s, c, rest); }
    if (!strcmp(path, "/system_stats")) { ONLY(get, "GET"); return get_system_stats(s, c); }
    if (!strcmp(path, "/extensions")) { ONLY(get, "GET"); return srv_frontend_extensions(s, c); }
    if (!strcmp(path, "/features")) { ONLY(get, "GET"); return get_features(s, c); }
    if (!strcmp(path, "/ws")) return srv_reply_error(c, 400, "bad_request", "/ws is a WebSocket endpoint");
    int st;
    const char *raw = mg_get_request_info(c)->local_uri;
    int api = raw && !strncmp(raw, "/api/", 5);
    /* ComfyUI's route is /api/jobs (and, with every route's /api twin, /api/api/jobs) */
    const char *jobs = api && !strncmp(path, "/jobs", 5) ? path + 5 : !strncmp(path, "/api/jobs", 9) ? path + 9 : NULL;
    if (jobs && (!*jobs || (jobs[0] == '/' && jobs[1] && !strchr(jobs + 1, '/')))) {
        ONLY(get, "GET");
        return srv_jobs_route(s, c, *jobs ? jobs + 1 : NULL);
    }
    if (!api && !strncmp(path, "/internal/", 10) && (st = srv_internal_route(s, c, method, path)) >= 0) return st;
    if (get && (st = srv_models_route(s, c, path)) >= 0) return st;
    if ((st = srv_userdata_route(s, c, method, path)) >= 0) return st;
    /* What ComfyUI answers with no custom nodes, translations, subgraphs or
     * template package installed. */
    if (get && (!strcmp(path, "/i18n") || !strcmp(path, "/workflow_templates") || !strcmp(path, "/global_subgraphs")))
        return srv_reply_json(c, 200, cJSON_CreateObject());
    if (get && tail_of(path, "/global_subgraphs")) return srv_reply_json(c, 200, cJSON_CreateNull());

    /* the frontend reads its template list at start: none here (a web root
     * of its own may bring one) */
    if (get && !api && !strcmp(path, "/templates/index.json") && !srv_frontend_has(s, "templates/index.json"))
        return srv_reply_json(c, 200, cJSON_CreateArray());
    if (get && !api && srv_web_root(s)) return srv_frontend_file(s, c, path);
#undef ONLY
#undef Q
    return srv_reply_error(c, 404, "not_found", "no route %s %s", method, path);
}
