/* test_env_folders.c - ComfyUI's folder names that cover an older one:
 * "diffusion_models" also lists and resolves files in models/unet (searched
 * first, as ComfyUI does), "text_encoders" in models/clip; both in our
 * models dir and in a ComfyUI installation's; other folders unchanged; a
 * missing file's error names every directory searched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "testutil.h"

static void touch(const char *dir, const char *sub, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(p, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", p);
    if (f) fclose(f);
}

static int list_is(const sd_env *env, const char *folder, const char *const *want) {
    sd_value *l = NULL;
    sd_error err;
    if (sd_env_list_files(env, folder, NULL, &l, &err) != SD_OK) return 0;
    size_t n = 0;
    while (want[n]) n++;
    int ok = sd_value_list_len(l) == n;
    for (size_t i = 0; ok && i < n; i++) ok = strcmp(sd_value_as_string(sd_value_list_get(l, i)), want[i]) == 0;
    sd_value_unref(l);
    return ok;
}

static void expect_at(const sd_env *env, const char *folder, const char *name, const char *suffix) {
    char *path = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_env_resolve(env, folder, name, &path, &err);
    size_t pl = path ? strlen(path) : 0, sl = strlen(suffix);
    CHECK_MSG(rc == SD_OK && pl >= sl && strcmp(path + pl - sl, suffix) == 0, "%s/%s -> %s (%s), want ...%s",
              folder, name, path ? path : "-", err.msg, suffix);
    free(path);
}

int main(void) {
    const char *tmp = sd_test_tmpdir("env_folders");
    char models[4096], comfy[4096], cm[4096];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(comfy, sizeof comfy, "%s/comfy", tmp);
    snprintf(cm, sizeof cm, "%s/comfy/models", tmp);
    mkdir(models, 0777), mkdir(comfy, 0777), mkdir(cm, 0777);
    touch(models, "unet", "a.safetensors");
    touch(models, "unet", "same.safetensors");
    touch(models, "diffusion_models", "b.safetensors");
    touch(models, "diffusion_models", "same.safetensors");
    touch(models, "clip", "c.safetensors");
    touch(models, "text_encoders", "d.safetensors");
    touch(cm, "unet", "e.safetensors");
    touch(cm, "clip", "f.safetensors");
    touch(models, "checkpoints", "g.safetensors");

    sd_env env;
    sd_error err;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.comfyui_dir, comfy, &err), &err);

    static const char *const dm[] = {"a.safetensors", "b.safetensors", "e.safetensors", "same.safetensors", NULL};
    static const char *const te[] = {"c.safetensors", "d.safetensors", "f.safetensors", NULL};
    static const char *const ck[] = {"g.safetensors", NULL};
    CHECK_MSG(list_is(&env, "diffusion_models", dm), "diffusion_models lists unet/ and diffusion_models/");
    CHECK_MSG(list_is(&env, "text_encoders", te), "text_encoders lists text_encoders/ and clip/");
    CHECK_MSG(list_is(&env, "checkpoints", ck), "checkpoints unchanged");
    expect_at(&env, "diffusion_models", "a.safetensors", "models/unet/a.safetensors");
    expect_at(&env, "diffusion_models", "b.safetensors", "models/diffusion_models/b.safetensors");
    expect_at(&env, "diffusion_models", "same.safetensors", "models/unet/same.safetensors");
    expect_at(&env, "diffusion_models", "e.safetensors", "comfy/models/unet/e.safetensors");
    expect_at(&env, "text_encoders", "c.safetensors", "models/clip/c.safetensors");
    expect_at(&env, "text_encoders", "f.safetensors", "comfy/models/clip/f.safetensors");
    char *path = NULL;
    sd_error_clear(&err);
    sd_status rc = sd_env_resolve(&env, "diffusion_models", "nope.safetensors", &path, &err);
    CHECK_MSG(rc == SD_ERR_NOT_FOUND && strstr(err.msg, "models/unet") && strstr(err.msg, "models/diffusion_models"),
              "missing file: %s", err.msg);
    free(path);
    sd_env_cleanup(&env);
    return sd_test_finish();
}
