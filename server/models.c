/* models.c - the model folders as ComfyUI lists them: /models,
 * /models/{folder}, /embeddings (server.py), /experiment/models and
 * /experiment/models/{folder} (app/model_manager.py) and
 * /view_metadata/{folder} (a safetensors file's __metadata__).
 *
 * No path of this machine leaves the server: /experiment/models gives each
 * folder's name with an empty "folders" list (ComfyUI lists the folders'
 * absolute paths), files are named relative to their folder. */
#define _GNU_SOURCE
#include <civetweb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/env.h"
#include "core/json_util.h"
#include "internal.h"

/* Model folders listed, as ComfyUI names them. */
static const char *const model_folders[] = {
    "checkpoints", "loras", "vae", "vae_approx", "controlnet", "embeddings", "diffusion_models",
    "text_encoders", "clip", "upscale_models", "clip_vision", "style_models", "hypernetworks", "gligen", "diffusers", NULL,
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

static int list_folder(srv *s, struct mg_connection *c, const char *folder, int strip_ext, int experiment) {
    /* ComfyUI registers diffusers with the extension "folder", which no
     * file's splitext() gives: its listing is always empty (the folders
     * themselves are DiffusersLoader's combo) */
    if (!strcmp(folder, "diffusers")) return srv_reply_json(c, 200, cJSON_CreateArray());
    sd_error err;
    sd_error_clear(&err);
    sd_value *v = NULL;
    if (sd_env_list_files(s->env, folder, model_exts, &v, &err) != SD_OK) {
        srv_log(s, "error: %s", err.msg);
        return srv_reply_error(c, 500, "io", "cannot list the %s folder", folder);
    }
    cJSON *a;
    if (!experiment) {
        a = string_list(v, strip_ext);
    } else { /* [{name, pathIndex, modified, created, size}] */
        a = cJSON_CreateArray();
        for (size_t i = 0; a && i < sd_value_list_len(v); i++) {
            const char *name = sd_value_as_string(sd_value_list_get(v, i));
            char *path = NULL;
            struct stat sb;
            if (!name || sd_env_resolve(s->env, folder, name, &path, &err) || stat(path, &sb)) {
                free(path);
                continue;
            }
            free(path);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddNumberToObject(o, "pathIndex", 0);
            cJSON_AddNumberToObject(o, "modified", (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9);
            cJSON_AddNumberToObject(o, "created", (double)sb.st_ctim.tv_sec + sb.st_ctim.tv_nsec * 1e-9);
            cJSON_AddNumberToObject(o, "size", (double)sb.st_size);
            cJSON_AddItemToArray(a, o);
        }
    }
    sd_value_unref(v);
    return srv_reply_json(c, 200, a);
}

/* GET /view_metadata/{folder}?filename=x.safetensors: the header's
 * __metadata__ (404 when the file, the header (over 1 MiB, ComfyUI's
 * limit) or the key is not there). */
static int view_metadata(srv *s, struct mg_connection *c, const char *folder) {
    char *name = srv_query(c, "filename");
    char *path = NULL;
    FILE *f = NULL;
    char *hdr = NULL;
    cJSON *j = NULL;
    int st = 404;
    size_t n = name ? strlen(name) : 0;
    sd_error err;
    sd_error_clear(&err);
    if (!is_model_folder(folder) || n < 12 || strcmp(name + n - 12, ".safetensors") || srv_bad_subfolder(name) ||
        sd_env_resolve(s->env, folder, name, &path, &err) || !(f = fopen(path, "rb")))
        goto out;
    unsigned char len8[8];
    if (fread(len8, 1, 8, f) != 8) goto out;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
    if (len > (1u << 20) || !(hdr = malloc(len + 1)) || fread(hdr, 1, len, f) != len) goto out;
    hdr[len] = 0;
    if (sd_json_parse(hdr, "header", &j, &err)) goto out;
    cJSON *meta = cJSON_DetachItemFromObjectCaseSensitive(j, "__metadata__");
    if (meta) {
        st = srv_reply_json(c, 200, meta);
        goto done;
    }
out:
    st = srv_reply(c, 404, "text/plain; charset=utf-8", "404: Not Found", 14, NULL);
done:
    cJSON_Delete(j);
    free(hdr);
    if (f) fclose(f);
    free(path);
    free(name);
    return st;
}

int srv_models_route(srv *s, struct mg_connection *c, const char *path) {
    if (!strcmp(path, "/embeddings")) return list_folder(s, c, "embeddings", 1, 0); /* names without extension */
    int experiment = !strncmp(path, "/experiment/models", 18);
    const char *rest = experiment ? path + 18 : !strncmp(path, "/models", 7) ? path + 7 : NULL;
    if (!strncmp(path, "/view_metadata/", 15)) return view_metadata(s, c, path + 15);
    if (!rest) return -1;
    if (!*rest) {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; a && model_folders[i]; i++) {
            if (!experiment) {
                cJSON_AddItemToArray(a, cJSON_CreateString(model_folders[i]));
                continue;
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", model_folders[i]);
            cJSON_AddArrayToObject(o, "folders");
            cJSON_AddItemToArray(a, o);
        }
        return srv_reply_json(c, 200, a);
    }
    if (*rest != '/' || !rest[1]) return -1;
    if (!is_model_folder(rest + 1)) return srv_reply(c, 404, "text/plain; charset=utf-8", "404: Not Found", 14, NULL);
    return list_folder(s, c, rest + 1, 0, experiment);
}
