/* recipe.c - locking a workflow to file hashes, and checking the lock. */
#include "recipe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/env.h"
#include "core/json_util.h"
#include "formats/png.h"
#include "core/sha256.h"
#include "lua_internal.h"

#define RECIPE_FORMAT 1

/* SHA-256 hex and size of a file; the memo (when given) avoids re-reading
 * multi-GB models whose path, size and mtime are unchanged. */
static sd_status hash_file(const char *path, const sd_cache_i *memo, char hex[65], int64_t *size,
                           sd_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return sd_error_set(err, SD_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    *size = (int64_t)st.st_size;
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    uint8_t h[32];
    if (memo && memo->file_hash_get && memo->file_hash_get(memo->self, path, *size, mtime, h) == SD_OK) {
        sd_sha256_hex(h, hex);
        return SD_OK;
    }
    sd_status rc = sd_sha256_file(path, h, err);
    if (rc) return rc;
    if (memo && memo->file_hash_put) memo->file_hash_put(memo->self, path, *size, mtime, h);
    sd_sha256_hex(h, hex);
    return SD_OK;
}

/* Array of file entries for every file-folder input of every node. */
static sd_status collect_files(const sd_graph *g, const sd_env *env, const sd_cache_i *memo, cJSON *arr,
                               sd_error *err) {
    for (size_t i = 0; i < sd_graph_count(g); i++) {
        const sd_graph_node *n = sd_graph_at(g, i);
        const sd_node_def *def = sd_registry_find(n->class_type);
        for (int k = 0; def && def->inputs[k].name; k++) {
            const sd_input_def *d = &def->inputs[k];
            if (!d->file_folder) continue;
            const sd_graph_input *in = sd_graph_node_input(n, d->name);
            const char *name = in && !in->is_link ? sd_value_as_string(in->literal) : NULL;
            if (!name) continue;
            char *path = NULL, hex[65];
            int64_t size = 0;
            sd_status rc = sd_env_resolve(env, d->file_folder, name, &path, err);
            if (!rc) rc = hash_file(path, memo, hex, &size, err);
            free(path);
            if (rc) {
                sd_error_at(err, n->id, n->class_type, d->name);
                return rc;
            }
            cJSON *f = cJSON_CreateObject();
            if (!f) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            cJSON_AddItemToArray(arr, f);
            cJSON_AddStringToObject(f, "node", n->id);
            cJSON_AddStringToObject(f, "class_type", n->class_type);
            cJSON_AddStringToObject(f, "input", d->name);
            cJSON_AddStringToObject(f, "folder", d->file_folder);
            cJSON_AddStringToObject(f, "name", name);
            cJSON_AddNumberToObject(f, "size", (double)size);
            cJSON_AddStringToObject(f, "sha256", hex);
        }
    }
    return SD_OK;
}

static void collect_seeds(const sd_graph *g, cJSON *seeds) {
    for (size_t i = 0; i < sd_graph_count(g); i++) {
        const sd_graph_node *n = sd_graph_at(g, i);
        cJSON *o = NULL;
        for (size_t k = 0; k < n->n_inputs; k++) {
            const sd_graph_input *in = &n->inputs[k];
            if (in->is_link || sd_value_kind_of(in->literal) != SD_VAL_INT) continue;
            if (strcmp(in->name, "seed") && strcmp(in->name, "noise_seed")) continue;
            if (!o) o = cJSON_AddObjectToObject(seeds, n->id);
            char digits[32]; /* every digit: seeds go beyond a double's 53 bits */
            sd_json_format_int(sd_value_as_int(in->literal), sd_json_input_is_u64_named(n->class_type, in->name),
                               digits);
            if (o) cJSON_AddRawToObject(o, in->name, digits);
        }
    }
}

sd_status sd_recipe_describe(const sd_graph *g, const sd_env *env, const sd_cache_i *memo, const char *version,
                             const char *build, char **out, sd_error *err) {
    *out = NULL;
    cJSON *m = cJSON_CreateObject();
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    cJSON_AddNumberToObject(m, "format", RECIPE_FORMAT);
    cJSON *s = cJSON_AddObjectToObject(m, "sdflow");
    cJSON_AddStringToObject(s, "version", version ? version : "");
    cJSON_AddStringToObject(s, "build", build ? build : "");
    cJSON_AddStringToObject(m, "precision", env->precision ? env->precision : "f32");
    if (env->vae_precision) cJSON_AddStringToObject(m, "vae_precision", env->vae_precision);
    if (env->clip_precision) cJSON_AddStringToObject(m, "clip_precision", env->clip_precision);
    cJSON_AddStringToObject(m, "device", env->device ? env->device : "cpu");
    cJSON *files = cJSON_AddArrayToObject(m, "files");
    sd_status rc = files ? collect_files(g, env, memo, files, err) : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    cJSON *seeds = cJSON_AddObjectToObject(m, "seeds");
    if (!rc && seeds) collect_seeds(g, seeds);
    if (!rc) {
        *out = sd_json_print(m, 0);
        if (!*out) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(m);
    return rc;
}

/* ---- verification ---------------------------------------------------------------- */

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : "";
}

static const cJSON *find_entry(const cJSON *files, const cJSON *want) {
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        if (!strcmp(str_of(f, "folder"), str_of(want, "folder")) && !strcmp(str_of(f, "name"), str_of(want, "name")))
            return f;
    }
    return NULL;
}

sd_status sd_recipe_verify(const sd_graph *g, const sd_env *env, const char *meta, sd_error *err) {
    cJSON *locked = NULL;
    sd_status rc = sd_json_parse_exact(meta, SD_RECIPE_KEY, &locked, err);
    if (rc) return rc;
    const cJSON *lfiles = cJSON_GetObjectItemCaseSensitive(locked, "files");
    if (!cJSON_IsObject(locked) || !cJSON_IsArray(lfiles)) {
        cJSON_Delete(locked);
        return sd_error_set(err, SD_ERR_FORMAT, "recipe: '%s' has no \"files\" list", SD_RECIPE_KEY);
    }
    cJSON *now = cJSON_CreateArray();
    if (!now) { cJSON_Delete(locked); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    rc = collect_files(g, env, NULL, now, err);
    if (rc) {
        sd_error_prefix(err, "recipe check");
        cJSON_Delete(now);
        cJSON_Delete(locked);
        return rc;
    }
    sd_sbuf b = {0};
    int bad = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, now) {
        const cJSON *l = find_entry(lfiles, f);
        const char *folder = str_of(f, "folder"), *name = str_of(f, "name");
        if (!l) {
            sd_sbuf_printf(&b, "%s%s/%s (node %s input '%s') is not in the recipe", bad++ ? "; " : "", folder, name,
                           str_of(f, "node"), str_of(f, "input"));
            continue;
        }
        double want_size = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(l, "size"));
        double have_size = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(f, "size"));
        if (strcmp(str_of(l, "sha256"), str_of(f, "sha256")) || want_size != have_size)
            sd_sbuf_printf(&b, "%s%s/%s differs: sha256 %.16s... size %.0f, the recipe has sha256 %.16s... size %.0f",
                           bad++ ? "; " : "", folder, name, str_of(f, "sha256"), have_size, str_of(l, "sha256"),
                           want_size);
    }
    char *msg = sd_sbuf_take(&b);
    if (bad) {
        rc = sd_error_set(err, SD_ERR_INVALID,
                          "recipe check failed (%d file%s): %s; nothing was run (--relock accepts the current files)",
                          bad, bad == 1 ? "" : "s", msg ? msg : "out of memory");
    }
    free(msg);
    cJSON_Delete(now);
    cJSON_Delete(locked);
    return rc;
}

/* ---- reading and writing ----------------------------------------------------------- */

sd_status sd_recipe_meta_of_text(const char *text, char **out, sd_error *err) {
    *out = NULL;
    cJSON *root = NULL; /* a parse error is not ours to report: the graph parser does */
    if (sd_json_parse_exact(text, SD_RECIPE_KEY, &root, NULL)) root = NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, SD_RECIPE_KEY);
    if (m) {
        if (!cJSON_IsObject(m)) {
            cJSON_Delete(root);
            return sd_error_set(err, SD_ERR_FORMAT, "recipe: \"%s\" must be an object", SD_RECIPE_KEY);
        }
        *out = sd_json_print(m, 0);
        if (!*out) { cJSON_Delete(root); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    }
    cJSON_Delete(root);
    return SD_OK;
}

sd_status sd_recipe_meta_of_png(const char *path, char **out, sd_error *err) {
    *out = NULL;
    sd_status rc = sd_png_read_text(path, SD_RECIPE_KEY, out, err);
    if (rc == SD_ERR_NOT_FOUND) { sd_error_clear(err); return SD_OK; }
    return rc;
}

sd_status sd_recipe_write(const char *path, const sd_graph *g, const char *meta, sd_error *err) {
    char *prompt = sd_graph_to_json(g, 0);
    cJSON *m = NULL, *p = NULL, *root = cJSON_CreateObject();
    sd_status rc = prompt && root ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc) rc = sd_json_parse_exact(meta, SD_RECIPE_KEY, &m, err);
    if (!rc) rc = sd_json_parse_exact(prompt, "prompt", &p, err);
    char *text = NULL;
    if (!rc) {
        cJSON_AddItemToObject(root, SD_RECIPE_KEY, m);
        cJSON_AddItemToObject(root, "prompt", p);
        m = p = NULL;
        text = sd_json_print(root, 1);
        if (!text) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(m);
    cJSON_Delete(p);
    cJSON_Delete(root);
    free(prompt);
    if (rc) return rc;
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) { free(text); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        rc = sd_error_set(err, SD_ERR_IO, "cannot write recipe '%s': %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    free(text);
    return rc;
}

char *sd_recipe_merge_pnginfo(const char *extra, const char *meta) {
    cJSON *root = NULL, *m = NULL; /* exact: seeds in both keep every digit */
    if (!(extra && *extra)) root = cJSON_CreateObject();
    else if (sd_json_parse_exact(extra, "extra_pnginfo", &root, NULL)) root = NULL;
    if (sd_json_parse_exact(meta, SD_RECIPE_KEY, &m, NULL)) m = NULL;
    if (!cJSON_IsObject(root) || !m) {
        cJSON_Delete(root);
        cJSON_Delete(m);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, SD_RECIPE_KEY);
    cJSON_AddItemToObject(root, SD_RECIPE_KEY, m);
    char *s = sd_json_print(root, 0);
    cJSON_Delete(root);
    return s;
}
