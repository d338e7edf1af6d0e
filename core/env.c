/* env.c - defaults for sd_env and file lookup inside its folders. */
#include "env.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "membudget.h"
#include "formats/png.h" /* SD_PNG_MAX_PIXELS_DEFAULT */

static sd_status set_str(const char **field, const char *value, sd_error *err) {
    char *copy = NULL;
    if (value) {
        copy = strdup(value);
        if (!copy) return sd_error_set(err, SD_ERR_NOMEM, "out of memory copying '%s'", value);
    }
    free((char *)*field);
    *field = copy;
    return SD_OK;
}

sd_status sd_env_set(sd_env *env, const char **field, const char *value, sd_error *err) {
    (void)env;
    return set_str(field, value, err);
}

static const char *getenv_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

sd_status sd_env_init(sd_env *env, sd_error *err) {
    memset(env, 0, sizeof *env);
    const char *models = getenv_nonempty("SDFLOW_MODELS_DIR");
    const char *tmp = getenv_nonempty("TMPDIR");
    char temp[4096];
    snprintf(temp, sizeof temp, "%s/sdflow", tmp ? tmp : "/tmp");
    sd_status rc = SD_OK;
    if (!rc) rc = set_str(&env->models_dir, models ? models : "./models", err);
    if (!rc) rc = set_str(&env->comfyui_dir, getenv_nonempty("SDFLOW_COMFYUI_DIR"), err);
    if (!rc) rc = set_str(&env->input_dir, "./input", err);
    if (!rc) rc = set_str(&env->output_dir, "./output", err);
    if (!rc) rc = set_str(&env->temp_dir, temp, err);
    if (!rc) rc = set_str(&env->tokenizer_dir, getenv_nonempty("SDFLOW_TOKENIZER_DIR"), err);
    if (!rc) rc = set_str(&env->precision, "f32", err);
    if (!rc) rc = set_str(&env->device, "cpu", err);
    env->max_image_pixels = SD_PNG_MAX_PIXELS_DEFAULT;
    const char *maxpx = getenv_nonempty("SDFLOW_MAX_IMAGE_PIXELS");
    if (!rc && maxpx) rc = sd_env_set_max_pixels(env, maxpx, err);
    env->max_memory = sd_mem_physical();
    const char *maxmem = getenv_nonempty("SDFLOW_MAX_MEMORY");
    if (!rc && maxmem && (rc = sd_env_set_max_memory(env, maxmem, err)))
        sd_error_prefix(err, "SDFLOW_MAX_MEMORY");
    if (rc) sd_env_cleanup(env);
    return rc;
}

sd_status sd_env_set_max_pixels(sd_env *env, const char *value, sd_error *err) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-')
        return sd_error_set(err, SD_ERR_INVALID, "maximum image size '%s' is not a whole number of "
                            "pixels (0 = no limit)", value);
    env->max_image_pixels = v;
    return SD_OK;
}

sd_status sd_env_set_max_memory(sd_env *env, const char *value, sd_error *err) {
    uint64_t v;
    sd_status rc = sd_mem_parse(value, &v, err);
    if (!rc) env->max_memory = v;
    return rc;
}

const char *sd_env_node_precision(const sd_env *env, unsigned node_flags) {
    if (!env) return "f32";
    if ((node_flags & SD_NODE_VAE) && env->vae_precision) return env->vae_precision;
    if ((node_flags & SD_NODE_TEXT_ENCODER) && env->clip_precision) return env->clip_precision;
    return env->precision ? env->precision : "f32";
}

void sd_env_cleanup(sd_env *env) {
    if (!env) return;
    const char **fields[] = {&env->models_dir, &env->comfyui_dir, &env->input_dir,
                             &env->output_dir, &env->temp_dir, &env->tokenizer_dir,
                             &env->precision, &env->vae_precision, &env->clip_precision,
                             &env->device};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        free((char *)*fields[i]);
        *fields[i] = NULL;
    }
    memset(env, 0, sizeof *env);
}

const char *sd_env_folder_dir(const sd_env *env, const char *folder, char *buf, size_t n) {
    if (strcmp(folder, "input") == 0) snprintf(buf, n, "%s", env->input_dir ? env->input_dir : "./input");
    else if (strcmp(folder, "output") == 0) snprintf(buf, n, "%s", env->output_dir ? env->output_dir : "./output");
    else if (strcmp(folder, "temp") == 0) snprintf(buf, n, "%s", env->temp_dir ? env->temp_dir : "/tmp/sdflow");
    else snprintf(buf, n, "%s/%s", env->models_dir ? env->models_dir : "./models", folder);
    return buf;
}

/* The ComfyUI install keeps models in models/<folder> and inputs in input/. */
static int comfy_dir(const sd_env *env, const char *folder, char *buf, size_t n) {
    if (!env->comfyui_dir) return 0;
    if (strcmp(folder, "input") == 0 || strcmp(folder, "output") == 0 || strcmp(folder, "temp") == 0)
        snprintf(buf, n, "%s/%s", env->comfyui_dir, folder);
    else
        snprintf(buf, n, "%s/models/%s", env->comfyui_dir, folder);
    return 1;
}

static int climbs_out(const char *name) {
    const char *p = name;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return 1;
        if (!slash) break;
        p = slash + 1;
    }
    return 0;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directories a model folder name stands for, in ComfyUI's search order
 * (folder_paths.folder_names_and_paths: a newer folder name also covers the
 * one it replaced). NULL-terminated. */
static const char *const *folder_names(const char *folder, const char **one) {
    static const char *const diffusion[] = {"unet", "diffusion_models", NULL};
    static const char *const text[] = {"text_encoders", "clip", NULL};
    if (strcmp(folder, "diffusion_models") == 0) return diffusion;
    if (strcmp(folder, "text_encoders") == 0) return text;
    one[0] = folder;
    one[1] = NULL;
    return one;
}

/* ComfyUI's annotated names for the input folder: "a.png [output]" is
 * a.png of the output folder (folder_paths.annotated_filepath). Returns the
 * folder's own env field, or NULL for a name without an annotation; *len
 * gets the name's length without it. */
static const char *annotated_dir(const sd_env *env, const char *name, size_t *len) {
    static const char *const tags[] = {" [input]", " [output]", " [temp]"};
    size_t n = strlen(name);
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(tags[i]);
        if (n > k && !strcmp(name + n - k, tags[i])) {
            *len = n - k;
            return i == 0 ? env->input_dir : i == 1 ? env->output_dir : env->temp_dir;
        }
    }
    return NULL;
}

/* The user-data folders (what LoadImage reads, what /view serves) keep
 * their files inside: a symlink planted there may not lead out. Model
 * folders may link to models anywhere (the usual way to share them). */
static int confined(const char *folder) {
    return !strcmp(folder, "input") || !strcmp(folder, "output") || !strcmp(folder, "temp");
}

/* *out = path when its real path lies inside dir's real path; else an
 * error (the link target is not named: it is outside what may be shown). */
static sd_status keep_inside(const char *dir, const char *path, const char *name, const char *folder,
                             char **out, sd_error *err) {
    char rd[PATH_MAX], rp[PATH_MAX];
    if (!realpath(dir, rd) || !realpath(path, rp))
        return sd_error_set(err, SD_ERR_NOT_FOUND, "file '%s' not found in %s", name, dir);
    size_t n = strlen(rd);
    if (strncmp(rd, rp, n) || (rp[n] != '/' && !(n == 1 && rd[0] == '/')))
        return sd_error_set(err, SD_ERR_INVALID,
                            "file '%s' leads outside the '%s' folder (a symlink?); it is not read", name, folder);
    *out = strdup(path);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_env_resolve(const sd_env *env, const char *folder, const char *name,
                         char **out, sd_error *err) {
    *out = NULL;
    if (!name || !*name) return sd_error_set(err, SD_ERR_INVALID, "empty file name for folder '%s'", folder);
    size_t alen = 0;
    const char *adir = !strcmp(folder, "input") ? annotated_dir(env, name, &alen) : NULL;
    if (adir && alen && name[0] != '/') {
        char bare[4096], apath[8192];
        snprintf(bare, sizeof bare, "%.*s", (int)alen, name);
        if (climbs_out(bare))
            return sd_error_set(err, SD_ERR_INVALID, "file name '%s' leaves the '%s' folder", name, folder);
        snprintf(apath, sizeof apath, "%s/%s", adir, bare);
        if (!is_file(apath)) return sd_error_set(err, SD_ERR_NOT_FOUND, "file '%s' not found in %s", bare, adir);
        return keep_inside(adir, apath, name, folder, out, err);
    }
    if (name[0] == '/') {
        if (!is_file(name)) return sd_error_set(err, SD_ERR_NOT_FOUND, "file '%s' not found", name);
        *out = strdup(name);
        return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (climbs_out(name))
        return sd_error_set(err, SD_ERR_INVALID, "file name '%s' leaves the '%s' folder", name, folder);
    const char *one[2];
    const char *const *names = folder_names(folder, one);
    char dir[4096], path[8192], searched[8192] = "";
    size_t used = 0;
    for (int pass = 0; pass < 2; pass++) /* ours, then the ComfyUI install's */
        for (int i = 0; names[i]; i++) {
            if (pass == 0) sd_env_folder_dir(env, names[i], dir, sizeof dir);
            else if (!comfy_dir(env, names[i], dir, sizeof dir)) continue;
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (is_file(path)) {
                if (confined(folder)) return keep_inside(dir, path, name, folder, out, err);
                *out = strdup(path);
                return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            }
            if (pass == 0 && used < sizeof searched) {
                int w = snprintf(searched + used, sizeof searched - used, "%s%s", used ? " or " : "", dir);
                if (w > 0) used += (size_t)w;
            }
        }
    return sd_error_set(err, SD_ERR_NOT_FOUND, "file '%s' not found in %s", name, searched);
}

/* ---- listing ----------------------------------------------------------------- */

typedef struct { char **v; size_t n, cap; } strvec;

static int strvec_push(strvec *s, const char *x) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], x) == 0) return 0; /* merged lists: no duplicates */
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(x))) return -1;
    s->n++;
    return 0;
}

static int has_ext(const char *name, const char *const *exts) {
    if (!exts) return 1;
    size_t len = strlen(name);
    for (size_t i = 0; exts[i]; i++) {
        size_t el = strlen(exts[i]);
        if (len >= el && strcasecmp(name + len - el, exts[i]) == 0) return 1;
    }
    return 0;
}

/* Depth-limited so that a symlink loop cannot recurse forever. */
static int walk(const char *root, const char *rel, int depth, const char *const *exts, strvec *out) {
    if (depth > 8) return 0;
    char dir[8192];
    if (*rel) snprintf(dir, sizeof dir, "%s/%s", root, rel);
    else snprintf(dir, sizeof dir, "%s", root);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[8192], full[16384];
        if (*rel) snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        else snprintf(sub, sizeof sub, "%s", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) rc = walk(root, sub, depth + 1, exts, out);
        else if (S_ISREG(st.st_mode) && has_ext(e->d_name, exts)) rc = strvec_push(out, sub);
    }
    closedir(d);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

sd_status sd_env_list_files(const sd_env *env, const char *folder,
                            const char *const *exts, sd_value **out, sd_error *err) {
    *out = NULL;
    strvec names = {0};
    char dir[4096];
    const char *one[2];
    const char *const *fn = folder_names(folder, one);
    int rc = 0;
    for (int i = 0; !rc && fn[i]; i++) rc = walk(sd_env_folder_dir(env, fn[i], dir, sizeof dir), "", 0, exts, &names);
    for (int i = 0; !rc && fn[i]; i++)
        if (comfy_dir(env, fn[i], dir, sizeof dir)) rc = walk(dir, "", 0, exts, &names);
    sd_value *list = rc ? NULL : sd_value_list();
    if (list) {
        if (names.n) qsort(names.v, names.n, sizeof *names.v, cmp_str);
        for (size_t i = 0; i < names.n; i++) {
            sd_value *s = sd_value_string(names.v[i]);
            if (sd_value_list_append(list, s) != 0) { /* append released s */
                sd_value_unref(list);
                list = NULL;
                break;
            }
        }
    }
    for (size_t i = 0; i < names.n; i++) free(names.v[i]);
    free(names.v);
    if (!list) return sd_error_set(err, SD_ERR_NOMEM, "out of memory listing folder '%s'", folder);
    *out = list;
    return SD_OK;
}
