/* test_executor_keys.c - canonical key encoding and env file lookup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/cache_key.h"
#include "core/env.h"
#include "testutil.h"

static const sd_input_def in2[] = {{.name = "b", .type = SD_T_FLOAT}, {.name = "a", .type = SD_T_INT}, {NULL}};
static const sd_input_def in2_swapped[] = {{.name = "a", .type = SD_T_INT}, {.name = "b", .type = SD_T_FLOAT}, {NULL}};
static const sd_node_def def1 = {1, "K", NULL, NULL, NULL, in2, NULL, 0, NULL};
static const sd_node_def def1_swapped = {1, "K", NULL, NULL, NULL, in2_swapped, NULL, 0, NULL};
static const sd_node_def def2 = {2, "K", NULL, NULL, NULL, in2, NULL, 0, NULL};
static const sd_node_def def_other = {1, "L", NULL, NULL, NULL, in2, NULL, 0, NULL};

static void key_of(const sd_node_def *d, const char *prec, const char *id, sd_value *b, sd_value *a,
                   uint8_t out[SD_KEY_SIZE]) {
    sd_key_input ins[2] = {{SD_KEY_VALUE, b, NULL, 0}, {SD_KEY_VALUE, a, NULL, 0}};
    sd_key_node(d, "cpu", prec, id, ins, out);
}

static void test_keys(void) {
    uint8_t k0[32], k[32];
    sd_value *f = sd_value_float(1.5), *i = sd_value_int(3);
    key_of(&def1, "f32", NULL, f, i, k0);
    key_of(&def1, "f32", NULL, f, i, k);
    CHECK(memcmp(k0, k, 32) == 0); /* deterministic */
    /* Inputs are hashed sorted by name, whatever the declaration order. */
    sd_key_input swapped[2] = {{SD_KEY_VALUE, i, NULL, 0}, {SD_KEY_VALUE, f, NULL, 0}};
    sd_key_node(&def1_swapped, "cpu", "f32", NULL, swapped, k);
    CHECK(memcmp(k0, k, 32) == 0);
    key_of(&def2, "f32", NULL, f, i, k);
    CHECK(memcmp(k0, k, 32) != 0); /* node version */
    key_of(&def_other, "f32", NULL, f, i, k);
    CHECK(memcmp(k0, k, 32) != 0); /* class_type */
    key_of(&def1, "bf16", NULL, f, i, k);
    CHECK(memcmp(k0, k, 32) != 0); /* precision */
    /* the precision a node computes in: VAE / text-encoder nodes their own */
    sd_env pe = {.precision = "bf16"};
    CHECK(strcmp(sd_env_node_precision(&pe, 0), "bf16") == 0);
    CHECK(strcmp(sd_env_node_precision(&pe, SD_NODE_VAE), "bf16") == 0);
    pe.vae_precision = "f32";
    pe.clip_precision = "f16";
    CHECK(strcmp(sd_env_node_precision(&pe, 0), "bf16") == 0);
    CHECK(strcmp(sd_env_node_precision(&pe, SD_NODE_VAE), "f32") == 0);
    CHECK(strcmp(sd_env_node_precision(&pe, SD_NODE_TEXT_ENCODER), "f16") == 0);
    CHECK(strcmp(sd_env_node_precision(NULL, SD_NODE_VAE), "f32") == 0);
    /* device: CPU and CUDA kernels round differently, so they never share entries */
    sd_key_input dev_ins[2] = {{SD_KEY_VALUE, f, NULL, 0}, {SD_KEY_VALUE, i, NULL, 0}};
    sd_key_node(&def1, "cuda", "f32", NULL, dev_ins, k);
    CHECK(memcmp(k0, k, 32) != 0);
    sd_key_node(&def1, NULL, NULL, NULL, dev_ins, k); /* NULL = cpu, f32 */
    CHECK(memcmp(k0, k, 32) == 0);
    key_of(&def1, "f32", "7", f, i, k);
    CHECK(memcmp(k0, k, 32) != 0); /* node id, for NOT_IDEMPOTENT */
    sd_value *f2 = sd_value_float(1.5000000000000002);
    key_of(&def1, "f32", NULL, f2, i, k);
    CHECK(memcmp(k0, k, 32) != 0); /* floats by exact bits */
    sd_value *z = sd_value_float(0.0), *nz = sd_value_float(-0.0);
    uint8_t kz[32];
    key_of(&def1, "f32", NULL, z, i, kz);
    key_of(&def1, "f32", NULL, nz, i, k);
    CHECK(memcmp(kz, k, 32) != 0);
    /* Type tags: INT 3 and FLOAT 3.0 and STRING "3" differ. */
    sd_value *f3 = sd_value_float(3.0), *s3 = sd_value_string("3");
    uint8_t ka[32], kb[32], kc[32];
    key_of(&def1, "f32", NULL, f, i, ka);
    key_of(&def1, "f32", NULL, f, f3, kb);
    key_of(&def1, "f32", NULL, f, s3, kc);
    CHECK(memcmp(ka, kb, 32) != 0 && memcmp(kb, kc, 32) != 0 && memcmp(ka, kc, 32) != 0);
    /* Absent, link and file inputs are distinct from each other. */
    uint8_t src[32] = {1}, kl[32], kf[32], kn[32];
    sd_key_input link[2] = {{SD_KEY_VALUE, f, NULL, 0}, {SD_KEY_LINK, NULL, src, 0}};
    sd_key_input file[2] = {{SD_KEY_VALUE, f, NULL, 0}, {SD_KEY_FILE, NULL, src, 0}};
    sd_key_input absent[2] = {{SD_KEY_VALUE, f, NULL, 0}, {SD_KEY_ABSENT, NULL, NULL, 0}};
    sd_key_node(&def1, "cpu", "f32", NULL, link, kl);
    sd_key_node(&def1, "cpu", "f32", NULL, file, kf);
    sd_key_node(&def1, "cpu", "f32", NULL, absent, kn);
    CHECK(memcmp(kl, kf, 32) != 0 && memcmp(kl, kn, 32) != 0 && memcmp(kf, kn, 32) != 0);
    link[1].src_index = 1;
    sd_key_node(&def1, "cpu", "f32", NULL, link, k);
    CHECK(memcmp(kl, k, 32) != 0); /* output index */
    /* Nested lists: [1, [2]] differs from [[1], 2]. */
    sd_value *l1 = sd_value_list(), *l1i = sd_value_list();
    sd_value_list_append(l1, sd_value_int(1));
    sd_value_list_append(l1i, sd_value_int(2));
    sd_value_list_append(l1, l1i);
    sd_value *l2 = sd_value_list(), *l2i = sd_value_list();
    sd_value_list_append(l2i, sd_value_int(1));
    sd_value_list_append(l2, l2i);
    sd_value_list_append(l2, sd_value_int(2));
    key_of(&def1, "f32", NULL, l1, i, ka);
    key_of(&def1, "f32", NULL, l2, i, kb);
    CHECK(memcmp(ka, kb, 32) != 0);
    sd_value *vals[] = {f, i, f2, z, nz, f3, s3, l1, l2};
    for (size_t n = 0; n < sizeof vals / sizeof *vals; n++) sd_value_unref(vals[n]);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

static void test_env(void) {
    const char *root = sd_test_tmpdir("executor_keys_env");
    char models[4096], comfy[4096], p[8192];
    snprintf(models, sizeof models, "%s/models", root);
    snprintf(comfy, sizeof comfy, "%s/comfy", root);
    snprintf(p, sizeof p, "%s/checkpoints/sub", models);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/models/checkpoints' '%s/input'", p, comfy, comfy);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/checkpoints/b.safetensors", models);
    write_file(p, "b");
    snprintf(p, sizeof p, "%s/checkpoints/sub/a.safetensors", models);
    write_file(p, "a");
    snprintf(p, sizeof p, "%s/checkpoints/notes.txt", models);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/models/checkpoints/c.SAFETENSORS", comfy);
    write_file(p, "c");
    snprintf(p, sizeof p, "%s/models/checkpoints/b.safetensors", comfy);
    write_file(p, "b2");

    sd_env env;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK(env.models_dir && env.input_dir && env.output_dir && env.temp_dir && env.precision && env.device);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.comfyui_dir, comfy, &err), &err);

    static const char *const exts[] = {".safetensors", ".ckpt", NULL};
    sd_value *list = NULL;
    CHECK_OK(sd_env_list_files(&env, "checkpoints", exts, &list, &err), &err);
    CHECK_MSG(sd_value_list_len(list) == 3, "%zu files", sd_value_list_len(list));
    const char *want[] = {"b.safetensors", "c.SAFETENSORS", "sub/a.safetensors"};
    for (size_t k = 0; k < 3 && k < sd_value_list_len(list); k++)
        CHECK_MSG(strcmp(sd_value_as_string(sd_value_list_get(list, k)), want[k]) == 0, "%s",
                  sd_value_as_string(sd_value_list_get(list, k)));
    sd_value_unref(list);
    CHECK_OK(sd_env_list_files(&env, "loras", exts, &list, &err), &err); /* missing folder */
    CHECK(list && sd_value_list_len(list) == 0);
    sd_value_unref(list);

    char *path = NULL;
    CHECK_OK(sd_env_resolve(&env, "checkpoints", "sub/a.safetensors", &path, &err), &err);
    CHECK(path && strstr(path, "/models/checkpoints/sub/a.safetensors"));
    free(path);
    CHECK_OK(sd_env_resolve(&env, "checkpoints", "b.safetensors", &path, &err), &err);
    CHECK(path && strncmp(path, models, strlen(models)) == 0); /* ours before ComfyUI's */
    free(path);
    CHECK_OK(sd_env_resolve(&env, "checkpoints", "c.SAFETENSORS", &path, &err), &err);
    CHECK(path && strncmp(path, comfy, strlen(comfy)) == 0);
    free(path);
    path = NULL;
    CHECK(sd_env_resolve(&env, "checkpoints", "nope.safetensors", &path, &err) == SD_ERR_NOT_FOUND && !path);
    CHECK(sd_env_resolve(&env, "checkpoints", "../checkpoints/b.safetensors", &path, &err) == SD_ERR_INVALID);
    CHECK(sd_env_resolve(&env, "checkpoints", "", &path, &err) == SD_ERR_INVALID);

    /* File hashes: content, not name or path. */
    uint8_t h1[32], h2[32], h3[32];
    snprintf(p, sizeof p, "%s/checkpoints/b.safetensors", models);
    CHECK_OK(sd_key_file_hash(NULL, p, h1, &err), &err);
    snprintf(p, sizeof p, "%s/checkpoints/sub/a.safetensors", models);
    CHECK_OK(sd_key_file_hash(NULL, p, h2, &err), &err);
    snprintf(p, sizeof p, "%s/copy", root);
    write_file(p, "b");
    CHECK_OK(sd_key_file_hash(NULL, p, h3, &err), &err);
    CHECK(memcmp(h1, h2, 32) != 0 && memcmp(h1, h3, 32) == 0);
    uint8_t expect[32];
    sd_sha256("b", 1, expect);
    CHECK(memcmp(h1, expect, 32) == 0);
    sd_env_cleanup(&env);
}

int main(void) {
    test_keys();
    test_env();
    return sd_test_finish();
}
