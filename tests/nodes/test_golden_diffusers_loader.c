/* test_golden_diffusers_loader.c - DiffusersLoader against ComfyUI's
 * (tests/data/diffusers_loader, gen/make_diffusers_loader.py).
 *
 * The diffusers folder is written here from the manifest: every name of
 * each part file takes the shared tiny SD1 checkpoint's tensor as stored
 * (the "squeeze" names as 2-D [C, C], diffusers' Linear attention weights),
 * the json files are copied; that is the folder the generator gave
 * ComfyUI. Checked:
 *   - the combo lists the folder (model_index.json), and only it;
 *   - DiffusersLoader's MODEL: one UNet forward on the stored inputs;
 *   - its VAE: VAEDecode of the stored latent;
 *   - its CLIP: CLIPTextEncode of the manifest's prompt (cond, pooled);
 *   - UNETLoader reads the same diffusers unet/ file (ComfyUI's
 *     load_diffusion_model converts it too): the same forward, bit for bit
 *     (the same computation on the same weights);
 *   - a listed folder without unet/ fails naming model_path.
 * Without the shared tiny SD1 or the CLIP vocabulary: 77. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;
static sd_st_file *gold;
static sd_backend *g_be;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(item(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }

static sd_tensor *ref(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(gold, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s: %s", name, err.msg);
    return t;
}

static void compare(const char *name, const sd_tensor *got, const cJSON *tol) {
    sd_tensor *want = ref(name);
    double mx = 0;
    long worst = -1;
    int ok = got && want && sd_golden_allclose(got, want, num(tol, "atol"), num(tol, "rtol"), &mx, &worst);
    CHECK_MSG(ok, "%s differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", name, mx, worst,
              num(tol, "atol"), num(tol, "rtol"));
    printf("  %-14s max |diff| %g\n", name, mx);
    sd_tensor_unref(want);
}

static int in_list(const cJSON *arr, const char *s) {
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (strcmp(cJSON_GetStringValue(e), s) == 0) return 1;
    return 0;
}

/* The folder at dir from the manifest's "files" and the stored json files. */
static int write_folder(const cJSON *man, const char *data, const char *ckpt, const char *dir) {
    sd_error err;
    char cmd[13000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s/folder/.' '%s/'", dir, data, dir);
    CHECK(system(cmd) == 0);
    sd_st_file *c = NULL;
    CHECK_OK(sd_st_open(ckpt, &c, &err), &err);
    if (!c) return -1;
    int bad = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, item(man, "files")) {
        sd_st_writer *w = sd_st_writer_new();
        const cJSON *k;
        cJSON_ArrayForEach(k, item(f, "keys")) {
            sd_tensor *t = sd_st_tensor(c, cJSON_GetStringValue(k), &err), *u = NULL;
            if (t && in_list(item(f, "squeeze"), k->string)) {
                int64_t s2[2] = {t->shape[0], sd_tensor_numel(t) / t->shape[0]};
                u = sd_tensor_reshape(t, 2, s2);
            }
            bad |= !t || sd_st_writer_add(w, k->string, u ? u : t, &err);
            sd_tensor_unref(t), sd_tensor_unref(u);
        }
        char path[4600], mk[9300];
        snprintf(path, sizeof path, "%s/%s", dir, f->string);
        snprintf(mk, sizeof mk, "mkdir -p \"$(dirname '%s')\"", path);
        CHECK(system(mk) == 0);
        if (!bad) bad |= sd_st_writer_save(w, path, &err) != SD_OK;
        sd_st_writer_free(w);
    }
    CHECK_MSG(!bad, "writing the diffusers folder: %s", err.msg);
    sd_st_close(c);
    return bad ? -1 : 0;
}

static sd_value *node1(const char *type, const char *const *names, sd_value *const *vals, int n, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "5", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    if (rc) sd_value_unref(out[0]);
    return rc ? NULL : out[0];
}

/* The UNet forward of a MODEL value on the stored inputs, as a host tensor. */
static sd_tensor *unet_forward(sd_value *model) {
    sd_error err;
    sd_unet *u = NULL;
    sd_model_ref *m = model ? sd_value_as_handle(model, &sd_handle_model) : NULL;
    if (m) CHECK_OK(sd_nodes_model_unet(m, &u, &err), &err);
    if (!u) return NULL;
    sd_tensor *x = ref("unet.x"), *ctx = ref("unet.context"), *ts = ref("unet.timesteps");
    if (!x || !ctx || !ts) {
        sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(ts);
        return NULL;
    }
    sd_bt *bx = sd_bt_from_host(g_be, x, SD_F32), *bc = sd_bt_from_host(g_be, ctx, SD_F32), *o = NULL;
    CHECK_OK(sd_unet_forward(u, bx, sd_tensor_f32(ts), bc, NULL, NULL, &o, &err), &err);
    sd_tensor *h = o ? sd_bt_to_host(o) : NULL;
    sd_bt_free(o), sd_bt_free(bx), sd_bt_free(bc);
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(ts);
    return h;
}

int main(void) {
    char path[4300], ckpt[4300], tokdir[4300];
    const char *data = sd_golden_topic_dir("diffusers_loader");
    cJSON *man = sd_golden_manifest(data);
    const char *ck = str(man, "checkpoint"), *name = str(man, "name");
    CHECK_MSG(ck && name && item(man, "files"), "manifest");
    if (!ck || !name) return sd_test_finish();
    snprintf(ckpt, sizeof ckpt, "%s/%s", sd_golden_dir(), strncmp(ck, "testdata/", 9) == 0 ? ck + 9 : ck);
    snprintf(tokdir, sizeof tokdir, "%s", sd_golden_tokenizer_dir());
    snprintf(path, sizeof path, "%s/vocab.json", tokdir);
    if (access(ckpt, R_OK) || access(path, R_OK)) sd_test_skip("no %s or no CLIP vocabulary in %s", ckpt, tokdir);
    snprintf(path, sizeof path, "%s/golden/diffusers_loader.safetensors", data);
    sd_error err;
    CHECK_OK(sd_st_open(path, &gold, &err), &err);
    if (!gold) return sd_test_finish();

    const char *tmp = sd_test_tmpdir("nodes_golden_diffusers_loader");
    char models[4200], dir[4600], cmd[9000];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/diffusers/broken' '%s/diffusion_models'", models, models,
             models);
    CHECK(system(cmd) == 0);
    snprintf(dir, sizeof dir, "%s/diffusers/%s", models, name);
    write_folder(man, data, ckpt, dir);
    /* a listed folder without its parts */
    snprintf(cmd, sizeof cmd, "cp '%s/folder/model_index.json' '%s/diffusers/broken/'", data, models);
    CHECK(system(cmd) == 0);
    /* the unet/ file as a diffusion model for UNETLoader */
    snprintf(cmd, sizeof cmd, "ln -s '%s/unet/diffusion_pytorch_model.safetensors' '%s/diffusion_models/unet.safetensors'",
             dir, models);
    CHECK(system(cmd) == 0);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    g_be = sd_golden_backend();
    if (!g_be) {
        sd_env_cleanup(&env);
        return sd_test_finish();
    }
    sd_model_store *store = sd_model_store_new();
    env.backend = g_be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const cJSON *tol = item(man, "tolerance");

    /* the combo: the folders holding a model_index.json */
    const sd_node_def *def = def_of("DiffusersLoader");
    sd_value *opts = NULL;
    CHECK_OK(def->inputs[0].options_fn(&env, &opts, &err), &err);
    CHECK_MSG(opts && sd_value_list_len(opts) == 2 &&
                  strcmp(sd_value_as_string(sd_value_list_get(opts, 0)), "broken") == 0 &&
                  strcmp(sd_value_as_string(sd_value_list_get(opts, 1)), name) == 0,
              "DiffusersLoader lists %zu folders", opts ? sd_value_list_len(opts) : 0);
    sd_value_unref(opts);

    sd_value *nm = sd_value_string(name), *out[4] = {0};
    sd_node_ctx lctx = {.env = g_env, .node_id = "4", .class_type = "DiffusersLoader"};
    CHECK_OK(nt_run_named(&lctx, (const char *[]){"model_path"}, &nm, 1, out, &err), &err);
    sd_value_unref(nm);

    sd_golden_set_depth(SD_GOLDEN_DEPTH_UNET);
    sd_tensor *u = unet_forward(out[0]);
    compare("unet.out", u, item(tol, "unet"));

    sd_golden_set_depth(SD_GOLDEN_DEPTH_VAE);
    sd_value *vin[] = {nt_latent(ref("vae.latent")), out[2]};
    sd_value *img = out[2] ? node1("VAEDecode", (const char *[]){"samples", "vae"}, vin, 2, &err) : NULL;
    CHECK_MSG(img != NULL, "VAEDecode: %s", err.msg);
    compare("vae.image", img ? sd_value_as_tensor(img) : NULL, item(tol, "vae"));
    sd_value_unref(img), sd_value_unref(vin[0]);

    sd_golden_set_depth(SD_GOLDEN_DEPTH_CLIP);
    sd_value *cin[] = {out[1], sd_value_string(str(man, "prompt"))};
    sd_value *cond = out[1] ? node1("CLIPTextEncode", (const char *[]){"clip", "text"}, cin, 2, &err) : NULL;
    CHECK_MSG(cond != NULL, "CLIPTextEncode: %s", err.msg);
    const sd_value *e0 = cond && sd_value_list_len(cond) ? sd_value_list_get(cond, 0) : NULL;
    compare("clip.cond", e0 ? sd_value_dict_tensor(e0, "cond") : NULL, item(tol, "clip"));
    compare("clip.pooled", e0 ? sd_value_dict_tensor(e0, "pooled_output") : NULL, item(tol, "clip"));
    sd_value_unref(cond), sd_value_unref(cin[1]);

    /* UNETLoader on the diffusers unet/ file: the same model */
    sd_value *uin[] = {sd_value_string("unet.safetensors"), sd_value_string("default")};
    sd_value *um = node1("UNETLoader", (const char *[]){"unet_name", "weight_dtype"}, uin, 2, &err);
    CHECK_MSG(um != NULL, "UNETLoader on a diffusers UNet: %s", err.msg);
    sd_tensor *u2 = um ? unet_forward(um) : NULL;
    CHECK_MSG(u && u2 && u->nbytes == u2->nbytes && memcmp(u->data, u2->data, u->nbytes) == 0,
              "UNETLoader's diffusers UNet differs from DiffusersLoader's");
    sd_tensor_unref(u), sd_tensor_unref(u2), sd_value_unref(um);
    sd_value_unref(uin[0]), sd_value_unref(uin[1]);

    /* a folder without unet/ */
    sd_value *bn = sd_value_string("broken"), *bo[4] = {0};
    sd_status rc = nt_run_named(&lctx, (const char *[]){"model_path"}, &bn, 1, bo, &err);
    CHECK_MSG(rc == SD_ERR_NOT_FOUND && strstr(err.msg, "unet") && strcmp(err.input, "model_path") == 0,
              "a folder without unet/: rc %d, %s", (int)rc, err.msg);
    nt_free_values(bo, 4);
    sd_value_unref(bn);

    nt_free_values(out, 4);
    sd_st_close(gold);
    cJSON_Delete(man);
    sd_model_store_free(store);
    sd_backend_free(g_be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
