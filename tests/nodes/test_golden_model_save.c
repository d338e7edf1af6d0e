/* ModelSave (nodes/model/model_save_nodes.c) against what ComfyUI's own
 * ModelSave writes for the same checkpoint (tests/data/model_save,
 * make_model_save.py: file names, keys with shapes, metadata). For every
 * ModelSave case of the manifest:
 *   - CheckpointLoaderSimple on the case's tiny checkpoint, then ModelSave
 *     with the case's filename_prefix and the manifest's prompt and
 *     extra_pnginfo;
 *   - the file is where ComfyUI put it (prefix folder, counter 00001), its
 *     keys and shapes are ComfyUI's (dtypes are not compared: ComfyUI saves
 *     the F32 it computes in on the CPU, sdflow the dtype it holds), and its
 *     metadata equals ComfyUI's key for key;
 *   - the saved file loads back (UNETLoader) with every weight bit-equal to
 *     the MODEL's (the same stored values, read back);
 *   - a second save takes the next counter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;
static char *g_prompt, *g_extra;

static sd_value *run_node(const char *type, const char *const *names, sd_value *const *vals, int n,
                          sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "9", .class_type = type, .prompt_json = g_prompt,
                       .extra_pnginfo_json = g_extra};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    if (rc) sd_value_unref(out[0]), out[0] = NULL;
    return rc ? NULL : (out[0] ? out[0] : sd_value_none());
}

static sd_unet *unet_of(sd_value *m) {
    sd_error err;
    sd_model_ref *r = sd_value_as_handle(m, &sd_handle_model);
    sd_unet *u = NULL;
    if (r) CHECK_OK(sd_nodes_model_unet(r, &u, &err), &err);
    return u;
}

typedef struct cmp_walk {
    sd_unet *other;
    int n, differ, missing;
} cmp_walk;

static void cmp_one(void *ud, const char *key, sd_bt **slot) {
    cmp_walk *w = ud;
    sd_bt **o = sd_unet_param(w->other, key);
    w->n++;
    if (!o || !*o) {
        w->missing++;
        return;
    }
    sd_tensor *a = sd_bt_to_host(*slot), *b = sd_bt_to_host(*o);
    if (!a || !b || sd_tensor_numel(a) != sd_tensor_numel(b) ||
        memcmp(sd_tensor_f32(a), sd_tensor_f32(b), (size_t)sd_tensor_numel(a) * 4) != 0)
        w->differ++;
    sd_tensor_unref(a), sd_tensor_unref(b);
}

static void check_file(const char *id, const char *path, cJSON *want) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_MSG(sd_st_open(path, &f, &err) == SD_OK, "%s: %s: %s", id, path, err.msg);
    if (!f) return;
    cJSON *tensors = cJSON_GetObjectItem(want, "tensors");
    CHECK_MSG((int)sd_st_count(f) == cJSON_GetArraySize(tensors), "%s: %zu tensors, ComfyUI wrote %d", id,
              sd_st_count(f), cJSON_GetArraySize(tensors));
    int bad = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const sd_st_entry *st = sd_st_find(f, t->string);
        cJSON *shape = cJSON_GetArrayItem(t, 1);
        int ok = st && st->ndim == cJSON_GetArraySize(shape);
        for (int d = 0; ok && d < st->ndim; d++)
            ok = st->shape[d] == (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(shape, d));
        if (!ok && bad++ < 3) CHECK_MSG(0, "%s: key %s missing or of another shape", id, t->string);
    }
    CHECK_MSG(bad == 0, "%s: %d keys differ from ComfyUI's", id, bad);
    cJSON *meta = cJSON_GetObjectItem(want, "metadata"), *m;
    int nmeta = 0;
    cJSON_ArrayForEach(m, meta) {
        const char *v = sd_st_metadata(f, m->string);
        CHECK_MSG(v && strcmp(v, cJSON_GetStringValue(m)) == 0, "%s: metadata %s = %s, ComfyUI: %s", id, m->string,
                  v ? v : "(none)", cJSON_GetStringValue(m));
        nmeta++;
    }
    CHECK_MSG(nmeta > 0, "%s: the manifest lists no metadata", id);
    sd_st_close(f);
}

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/data/model_save", src ? src : "..");
    cJSON *man = sd_golden_manifest(dir);
    if (!man) sd_test_skip("no manifest in %s", dir);
    const char *td = sd_test_testdata_dir();
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/models/tiny-sd1.safetensors", td);
    if (access(probe, R_OK)) sd_test_skip("no %s", probe);
    g_prompt = cJSON_PrintUnformatted(cJSON_GetObjectItem(man, "prompt"));
    g_extra = cJSON_PrintUnformatted(cJSON_GetObjectItem(man, "extra_pnginfo"));

    const char *tmp = sd_test_tmpdir("nodes_golden_model_save");
    char models[4200], output[4200], tok[4200], cmd[9000];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(output, sizeof output, "%s/output", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/checkpoints' '%s/diffusion_models' '%s'", output, models,
             models, output);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    snprintf(tok, sizeof tok, "%s/tokenizer", tmp);
    CHECK_OK(sd_synth_vocab_write(tok, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, output, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    int ran = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(man, "cases")) {
        const char *node = cJSON_GetStringValue(cJSON_GetObjectItem(c, "node"));
        if (!node || strcmp(node, "ModelSave") != 0) continue;
        const char *fam = cJSON_GetStringValue(cJSON_GetObjectItem(c, "family"));
        const char *ck = cJSON_GetStringValue(cJSON_GetObjectItem(c, "checkpoint"));
        const char *prefix = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "inputs"), "filename_prefix"));
        cJSON *files = cJSON_GetObjectItem(c, "files");
        CHECK_MSG(fam && ck && prefix && cJSON_GetArraySize(files) == 1, "manifest case");
        if (!fam || !ck || !prefix || cJSON_GetArraySize(files) != 1) continue;
        char cpath[4400], link[4400], name[256];
        snprintf(cpath, sizeof cpath, "%s/%s", td, strncmp(ck, "testdata/", 9) == 0 ? ck + 9 : ck);
        snprintf(name, sizeof name, "%s.safetensors", fam);
        snprintf(link, sizeof link, "%s/checkpoints/%s", models, name);
        unlink(link);
        CHECK(symlink(cpath, link) == 0);
        sd_value *nm = sd_value_string(name);
        sd_value *model = run_node("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &nm, 1, &err);
        sd_value_unref(nm);
        CHECK_MSG(model != NULL, "%s: load: %s", fam, err.msg);
        if (!model) continue;
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", output);
        CHECK(system(cmd) == 0);
        sd_value *v[] = {model, sd_value_string(prefix)};
        sd_value *r = run_node("ModelSave", (const char *[]){"model", "filename_prefix"}, v, 2, &err);
        CHECK_MSG(r != NULL, "%s: ModelSave: %s", fam, err.msg);
        sd_value_unref(r);
        cJSON *want = cJSON_GetArrayItem(files, 0);
        const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(want, "file"));
        char saved[4400];
        snprintf(saved, sizeof saved, "%s/%s", output, rel ? rel : "");
        CHECK_MSG(nt_file_exists(saved), "%s: ModelSave wrote no %s", fam, saved);
        if (nt_file_exists(saved)) {
            char id[64];
            snprintf(id, sizeof id, "%s ModelSave", fam);
            check_file(id, saved, want);
            /* loads back with the same weights */
            char back[4400], bname[256];
            snprintf(bname, sizeof bname, "saved_%s.safetensors", fam);
            snprintf(back, sizeof back, "%s/diffusion_models/%s", models, bname);
            unlink(back);
            CHECK(symlink(saved, back) == 0);
            const char *un[] = {"unet_name", "weight_dtype"};
            sd_value *uv[] = {sd_value_string(bname), sd_value_string("default")};
            sd_value *m2 = run_node("UNETLoader", un, uv, 2, &err);
            nt_free_values(uv, 2);
            CHECK_MSG(m2 != NULL, "%s: the saved file does not load: %s", fam, err.msg);
            sd_unet *a = unet_of(model), *b = m2 ? unet_of(m2) : NULL;
            if (a && b) {
                cmp_walk w = {b, 0, 0, 0};
                sd_unet_param_each(a, cmp_one, &w);
                CHECK_MSG(w.n > 0 && w.missing == 0 && w.differ == 0,
                          "%s: reloaded weights: %d of %d missing, %d differ", fam, w.missing, w.n, w.differ);
            }
            sd_value_unref(m2);
            /* the next save takes the next counter */
            r = run_node("ModelSave", (const char *[]){"model", "filename_prefix"}, v, 2, &err);
            sd_value_unref(r);
            char next[4400];
            snprintf(next, sizeof next, "%s", saved);
            char *p = strstr(next, "_00001_.safetensors");
            if (p) memcpy(p, "_00002_", 7);
            CHECK_MSG(p && nt_file_exists(next), "%s: a second save did not write %s", fam, next);
        }
        sd_value_unref(v[1]);
        sd_value_unref(model);
        ran++;
    }
    CHECK_MSG(ran > 0, "no ModelSave case ran");
    cJSON_Delete(man);
    free(g_prompt), free(g_extra);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
