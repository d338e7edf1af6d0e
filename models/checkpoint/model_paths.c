/* model_paths.c - ComfyUI model folder names and extensions over core/env. */
#include "models/checkpoint/model_paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const model_exts[] = {".ckpt", ".pt", ".pt2", ".bin", ".pth",
                                         ".safetensors", ".pkl", ".sft", NULL};

const char *const *sd_model_extensions(void) { return model_exts; }

sd_status sd_model_paths_list(const sd_env *env, const char *folder, sd_value **out,
                              sd_error *err) {
    return sd_env_list_files(env, folder, model_exts, out, err);
}

sd_status sd_model_paths_resolve(const sd_env *env, const char *folder, const char *name,
                                 char **out, sd_error *err) {
    sd_status rc = sd_env_resolve(env, folder, name, out, err);
    if (rc == SD_ERR_NOT_FOUND && env->comfyui_dir)
        sd_error_prefix(err, "(also searched %s/models/%s)", env->comfyui_dir, folder);
    if (!rc && env->on_model_file) env->on_model_file(env->model_file_user, folder, *out);
    return rc;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

size_t sd_model_paths_embedding_dirs(const sd_env *env, char **dirs, size_t max) {
    size_t n = 0;
    char buf[4096];
    sd_env_folder_dir(env, SD_FOLDER_EMBEDDINGS, buf, sizeof buf);
    if (n < max && is_dir(buf) && (dirs[n] = strdup(buf))) n++;
    if (env->comfyui_dir) {
        snprintf(buf, sizeof buf, "%s/models/%s", env->comfyui_dir, SD_FOLDER_EMBEDDINGS);
        if (n < max && is_dir(buf) && (dirs[n] = strdup(buf))) n++;
    }
    return n;
}

void sd_model_paths_free_list(char **dirs, size_t n) {
    for (size_t i = 0; i < n; i++) free(dirs[i]);
}
