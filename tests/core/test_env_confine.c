/* test_env_confine.c - sd_env_resolve keeps the user-data folders closed
 * (issue 23: LoadImage followed a symlink out of the input folder while the
 * server's /view refused the same link):
 *   - input, output and temp: a symlink to a file outside, or a linked
 *     subfolder leading outside, is SD_ERR_INVALID naming the folder (the
 *     target is not named); a link inside the folder, a plain file and a
 *     file under a real subfolder resolve; the same through comfyui_dir;
 *   - model folders still follow links anywhere (models are shared so). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/env.h"
#include "testutil.h"

static void touch(const char *path) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("x", f);
        fclose(f);
    }
}

static void expect(sd_env *env, const char *folder, const char *name, sd_status want) {
    char *path = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_env_resolve(env, folder, name, &path, &err);
    CHECK_MSG(rc == want && (rc != SD_OK) == (path == NULL), "%s/%s: %s (want %s): %s", folder, name,
              sd_status_name(rc), sd_status_name(want), err.msg);
    if (want == SD_ERR_INVALID)
        CHECK_MSG(strstr(err.msg, "outside the") && !strstr(err.msg, "/outside/"), "%s/%s: message '%s'", folder,
                  name, err.msg);
    free(path);
}

int main(void) {
    const char *t = sd_test_tmpdir("env_confine");
    char p[4096], q[4096], in[4096], out[4096], tmp[4096], models[4096], comfy[4096];
    snprintf(in, sizeof in, "%s/input", t);
    snprintf(out, sizeof out, "%s/output", t);
    snprintf(tmp, sizeof tmp, "%s/temp", t);
    snprintf(models, sizeof models, "%s/models", t);
    snprintf(comfy, sizeof comfy, "%s/comfy", t);
    const char *dirs[] = {in, out, tmp, models, "outside", "outside/dir", "models/checkpoints", "comfy",
                          "comfy/input", "input/sub"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        if (dirs[i][0] == '/') snprintf(p, sizeof p, "%s", dirs[i]);
        else snprintf(p, sizeof p, "%s/%s", t, dirs[i]);
        mkdir(p, 0777);
    }
    snprintf(q, sizeof q, "%s/outside/secret.png", t);
    touch(q);
    snprintf(p, sizeof p, "%s/outside/dir/secret.png", t);
    touch(p);
    const char *user[] = {in, out, tmp};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/plain.png", user[i]);
        touch(p);
        snprintf(p, sizeof p, "%s/out.png", user[i]);
        CHECK(symlink(q, p) == 0);
        snprintf(p, sizeof p, "%s/in.png", user[i]);
        CHECK(symlink("plain.png", p) == 0);
        snprintf(p, sizeof p, "%s/linkdir", user[i]);
        char od[4096];
        snprintf(od, sizeof od, "%s/outside/dir", t);
        CHECK(symlink(od, p) == 0);
    }
    snprintf(p, sizeof p, "%s/sub/deep.png", in);
    touch(p);
    snprintf(p, sizeof p, "%s/checkpoints/m.safetensors", models);
    CHECK(symlink(q, p) == 0);
    snprintf(p, sizeof p, "%s/input/c.png", comfy);
    CHECK(symlink(q, p) == 0);

    sd_env env;
    sd_error err;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.input_dir, in, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, out, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.temp_dir, tmp, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.comfyui_dir, comfy, &err), &err);
    const char *folders[] = {"input", "output", "temp"};
    for (int i = 0; i < 3; i++) {
        expect(&env, folders[i], "plain.png", SD_OK);
        expect(&env, folders[i], "in.png", SD_OK);
        expect(&env, folders[i], "out.png", SD_ERR_INVALID);
        expect(&env, folders[i], "linkdir/secret.png", SD_ERR_INVALID);
    }
    expect(&env, "input", "sub/deep.png", SD_OK);
    expect(&env, "input", "c.png", SD_ERR_INVALID); /* through <comfyui_dir>/input */
    expect(&env, "checkpoints", "m.safetensors", SD_OK);
    sd_env_cleanup(&env);
    return sd_test_finish();
}
