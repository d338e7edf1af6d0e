/* routes.c - which handler answers which path, and the read-only endpoints
 * that need no queue: the page, /object_info, /system_stats, /embeddings,
 * /models. Paths arrive without the /api prefix (http.c strips it). */
#include <civetweb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include "core/env.h"
#include "core/object_info.h"
#include "internal.h"

/* Model folders /models lists, as ComfyUI names them. */
static const char *const model_folders[] = {
    "checkpoints", "loras", "vae", "vae_approx", "controlnet", "embeddings", "diffusion_models",
    "text_encoders", "clip", "upscale_models", NULL,
};
static const char *const model_exts[] = {".safetensors", ".ckpt", ".pt", ".pth", ".bin", ".sft", NULL};

static int is_model_folder(const char *f) {
    for (int i = 0; model_folders[i]; i++)
        if (!strcmp(f, model_folders[i])) return 1;
    return 0;
}

static cJSON *string_list(const sd_value *v, int strip_ext) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < sd_value_list_len(v); i++) {
        const char *name = sd_value_as_string(sd_value_list_get(v, i));
        if (!name) continue;
        char *copy = strdup(name);
        if (!copy) continue;
        char *dot = strip_ext ? strrchr(copy, '.') : NULL;
        if (dot && !strchr(dot, '/')) *dot = 0;
        cJSON_AddItemToArray(a, cJSON_CreateString(copy));
        free(copy);
    }
    return a;
}

static int get_models(srv *s, struct mg_connection *c, const char *folder) {
    if (!folder) {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; a && model_folders[i]; i++) cJSON_AddItemToArray(a, cJSON_CreateString(model_folders[i]));
        return srv_reply_json(c, 200, a);
    }
    if (!is_model_folder(folder)) return srv_reply_error(c, 404, "not_found", "no model folder '%s'", folder);
    sd_error err;
    sd_error_clear(&err);
    sd_value *v = NULL;
    if (sd_env_list_files(s->env, folder, model_exts, &v, &err) != SD_OK)
        return srv_reply_error(c, 500, "io", "%s", err.msg);
    cJSON *a = string_list(v, 0);
    sd_value_unref(v);
    return srv_reply_json(c, 200, a);
}

static int get_embeddings(srv *s, struct mg_connection *c) {
    sd_error err;
    sd_error_clear(&err);
    sd_value *v = NULL;
    if (sd_env_list_files(s->env, "embeddings", model_exts, &v, &err) != SD_OK)
        return srv_reply_error(c, 500, "io", "%s", err.msg);
    cJSON *a = string_list(v, 1); /* ComfyUI lists embedding names without extension */
    sd_value_unref(v);
    return srv_reply_json(c, 200, a);
}

static int get_object_info(srv *s, struct mg_connection *c, const char *cls) {
    if (!cls) return srv_reply_json(c, 200, sd_object_info(s->env));
    cJSON *root = cJSON_CreateObject();
    const sd_node_def *d = sd_registry_find(cls);
    if (root && d) cJSON_AddItemToObject(root, cls, sd_object_info_node(d, cls, s->env));
    return srv_reply_json(c, 200, root); /* ComfyUI: {} for an unknown class */
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
    if (s->o->www_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/index.html", s->o->www_dir);
        size_t n = 0;
        char *buf = srv_read_file(path, &n);
        if (!buf) return srv_reply_error(c, 404, "not_found", "no index.html in the page folder");
        srv_reply(c, 200, "text/html; charset=utf-8", buf, n, NULL);
        free(buf);
        return 200;
    }
    return srv_reply(c, 200, "text/html; charset=utf-8", srv_page_html, srv_page_html_len, NULL);
}

/* What the frontend asks at start (ComfyUI's feature flags): no preview
 * metadata frames (event 4) are sent; the upload limit is this server's. */
static int get_features(srv *s, struct mg_connection *c) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddBoolToObject(f, "supports_preview_metadata", 0);
    cJSON_AddNumberToObject(f, "max_upload_size", (double)s->max_upload);
    return srv_reply_json(c, 200, f);
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
    if (!strcmp(path, "/embeddings")) { ONLY(get, "GET"); return get_embeddings(s, c); }
    if (!strcmp(path, "/models")) { ONLY(get, "GET"); return get_models(s, c, NULL); }
    if ((rest = tail_of(path, "/models"))) { ONLY(get, "GET"); return get_models(s, c, rest); }
    if (!strcmp(path, "/extensions")) { ONLY(get, "GET"); return srv_reply_json(c, 200, cJSON_CreateArray()); }
    if (!strcmp(path, "/features")) { ONLY(get, "GET"); return get_features(s, c); }
    if (!strcmp(path, "/ws")) return srv_reply_error(c, 400, "bad_request", "/ws is a WebSocket endpoint");
#undef ONLY
#undef Q
    return srv_reply_error(c, 404, "not_found", "no route %s %s", method, path);
}
