/* Per-block model merges (nodes/model/model_merge_blocks.c: ModelMergeBlocks,
 * ModelMergeSD1 / SD2 / SDXL / Flux1) and ModelMergeSimple on Flux against
 * ComfyUI's own nodes (tests/data/merge_blocks, make_merge_blocks.py and its
 * manifest). For every case of the manifest:
 *   - model1 and model2 of the case's family are loaded as the manifest says
 *     (CheckpointLoaderSimple on the shared tiny SD1 / SDXL and a checkpoint
 *     the test synthesizes with the manifest's preset and seed, which is the
 *     file the generator gave ComfyUI; UNETLoader on the Flux set's dev DiT and
 *     the generator's noisy copy);
 *   - the case's node runs with the case's inputs (every FLOAT by name);
 *   - for every key of the family's list (ComfyUI's state-dict order) the
 *     first `head` elements of the merged weight equal ComfyUI's row: the
 *     rows are W1 * r + (1 - r) * W2 in float32 with r the key's block
 *     ratio, one product and one sum per element as ComfyUI computes them,
 *     so they are compared within 1 ulp-sized bounds (atol 1e-7, rtol 1e-6:
 *     a fused multiply-add may round the sum once instead of twice);
 *   - the case is not trivial: some row differs from model1's weights.
 * Then a Flux model merged with an SD1 model is refused naming model2. */
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
#include "models/flux/flux.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;

static void link_as(const char *target, const char *dst) {
    char cwd[2048], src[4200];
    if (target[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(src, sizeof src, "%s", target);
    else snprintf(src, sizeof src, "%s/%s", cwd, target);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static sd_value *run_node(const char *type, const char *const *names, sd_value *const *vals, int n,
                          sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    return rc ? NULL : out[0];
}

static sd_value *load(const char *loader, const char *file) {
    sd_error err;
    int unet = strcmp(loader, "UNETLoader") == 0;
    const char *names[] = {unet ? "unet_name" : "ckpt_name", "weight_dtype"};
    sd_value *v[] = {sd_value_string(file), sd_value_string("default")};
    sd_value *m = run_node(loader, names, v, unet ? 2 : 1, &err);
    CHECK_MSG(m != NULL, "%s %s: %s", loader, file, err.msg);
    nt_free_values(v, 2);
    return m;
}

/* The merged weight's first `head` elements of `key` into row (F32). */
static int weight_head(const sd_value *model, const char *key, int head, float *row) {
    sd_error err;
    sd_model_ref *r = sd_value_as_handle(model, &sd_handle_model);
    sd_bt **slot = NULL;
    if (sd_checkpoint_info(r->ckpt)->family == SD_CKPT_FLUX) {
        sd_dmodel dm;
        if (sd_nodes_model_dmodel(r, &dm, &err) == SD_OK) slot = sd_flux_param(dm.net, key);
    } else {
        sd_unet *u = NULL;
        if (sd_nodes_model_unet(r, &u, &err) == SD_OK) slot = sd_unet_param(u, key);
    }
    if (!slot || !*slot) return 0;
    sd_tensor *t = sd_bt_to_host(*slot);
    if (!t || sd_tensor_numel(t) < head) {
        sd_tensor_unref(t);
        return 0;
    }
    memcpy(row, sd_tensor_f32(t), (size_t)head * sizeof *row);
    sd_tensor_unref(t);
    return 1;
}

typedef struct family {
    const char *name;
    sd_value *m1, *m2;
} family;

static void run_case(cJSON *c, family *fam, cJSON *keys, int head, sd_st_file *ref) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(c, "node"));
    cJSON *inputs = cJSON_GetObjectItem(c, "inputs");
    int n = cJSON_GetArraySize(inputs);
    const char **names = calloc((size_t)n + 2, sizeof *names);
    sd_value **vals = calloc((size_t)n + 2, sizeof *vals);
    names[0] = "model1", names[1] = "model2";
    vals[0] = fam->m1, vals[1] = fam->m2;
    int i = 2;
    cJSON *it;
    cJSON_ArrayForEach(it, inputs) {
        names[i] = it->string;
        vals[i++] = sd_value_float(it->valuedouble);
    }
    sd_error err;
    sd_value *merged = run_node(type, names, vals, n + 2, &err);
    CHECK_MSG(merged != NULL, "%s: %s: %s", id, type, err.msg);
    for (i = 2; i < n + 2; i++) sd_value_unref(vals[i]);
    free(names);
    free(vals);
    sd_tensor *want = sd_st_tensor_f32(ref, id, &err);
    int nk = cJSON_GetArraySize(keys);
    CHECK_MSG(want && want->ndim == 2 && want->shape[0] == nk && want->shape[1] == head,
              "%s: reference rows: %s", id, want ? "shape" : err.msg);
    if (merged && want && want->ndim == 2 && want->shape[0] == nk && want->shape[1] == head) {
        sd_tensor *got = sd_tensor_new(SD_F32, 2, want->shape);
        int k = 0, missing = 0, changed = 0;
        float *g = sd_tensor_f32(got), base[64];
        cJSON_ArrayForEach(it, keys) {
            const char *key = cJSON_GetStringValue(it);
            if (!weight_head(merged, key, head, g + (size_t)k * head)) {
                if (missing++ < 3) CHECK_MSG(0, "%s: the merged model has no weight '%s'", id, key);
            } else if (weight_head(fam->m1, key, head, base) &&
                       memcmp(base, g + (size_t)k * head, (size_t)head * sizeof *base) != 0) {
                changed++;
            }
            k++;
        }
        CHECK_MSG(missing == 0, "%s: %d of %d weights missing", id, missing, nk);
        CHECK_MSG(changed > 0, "%s: the merge left every weight as model1's", id);
        double max_abs = 0;
        long worst = -1;
        int ok = sd_test_allclose(got, want, 1e-7, 1e-6, &max_abs, &worst);
        CHECK_MSG(ok, "%s: merged weights differ from ComfyUI's: max |d| %g at row %ld (%s)", id, max_abs,
                  worst < 0 ? -1L : worst / head,
                  worst < 0 ? "" : cJSON_GetStringValue(cJSON_GetArrayItem(keys, (int)(worst / head))));
        sd_tensor_unref(got);
    }
    sd_tensor_unref(want);
    sd_value_unref(merged);
}

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/data/merge_blocks", src ? src : "..");
    cJSON *man = sd_golden_manifest(dir);
    if (!man) sd_test_skip("no manifest in %s", dir);
    const char *td = sd_test_testdata_dir();
    char sd1[4200], sdxl[4200], fluxd[4200];
    snprintf(sd1, sizeof sd1, "%s/models/tiny-sd1.safetensors", td);
    snprintf(sdxl, sizeof sdxl, "%s/models/tiny-sdxl.safetensors", td);
    cJSON *models = cJSON_GetObjectItem(man, "models");
    const char *fm1 = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(models, "flux"), "model1"));
    CHECK_MSG(fm1 && strncmp(fm1, "testdata/", 9) == 0, "manifest: flux model1");
    if (!fm1) return sd_test_finish();
    snprintf(fluxd, sizeof fluxd, "%s/%s", td, fm1 + 9);
    if (access(sd1, R_OK) || access(sdxl, R_OK) || access(fluxd, R_OK)) sd_test_skip("no %s", sd1);

    const char *tmp = sd_test_tmpdir("nodes_golden_model_merge_blocks");
    char models_dir[4200], cmd[9000], p[4400], tok[4200];
    snprintf(models_dir, sizeof models_dir, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints' '%s/diffusion_models'", models_dir, models_dir);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    snprintf(p, sizeof p, "%s/checkpoints/sd1_1.safetensors", models_dir), link_as(sd1, p);
    snprintf(p, sizeof p, "%s/checkpoints/sdxl_1.safetensors", models_dir), link_as(sdxl, p);
    snprintf(p, sizeof p, "%s/diffusion_models/flux_1.safetensors", models_dir), link_as(fluxd, p);
    /* model2s: synthesized as the manifest says, or the generator's file */
    const char *fams[] = {"sd1", "sdxl", "flux"};
    for (int i = 0; i < 3; i++) {
        cJSON *m2 = cJSON_GetObjectItem(cJSON_GetObjectItem(models, fams[i]), "model2");
        const char *preset = cJSON_GetStringValue(cJSON_GetObjectItem(m2, "synth"));
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(m2, "file"));
        int seed = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(m2, "seed"));
        if (i < 2) {
            snprintf(p, sizeof p, "%s/checkpoints/%s_2.safetensors", models_dir, fams[i]);
            CHECK_MSG(preset != NULL, "manifest: %s model2", fams[i]);
            if (preset && i == 0) {
                const sd_synth_config *c = sd_synth_preset(preset);
                CHECK_MSG(c != NULL, "synth preset %s", preset);
                if (c) CHECK_OK(sd_synth_sd1_write(c, (uint64_t)seed, p, &err), &err);
            } else if (preset) {
                const sd_synth_sdxl_config *c = sd_synth_sdxl_preset(preset);
                CHECK_MSG(c != NULL, "synth preset %s", preset);
                if (c) CHECK_OK(sd_synth_sdxl_write(c, (uint64_t)seed, p, &err), &err);
            }
        } else {
            char f[4200];
            CHECK_MSG(file != NULL, "manifest: flux model2");
            snprintf(f, sizeof f, "%s/%s", dir, file ? file : "");
            CHECK_MSG(access(f, R_OK) == 0, "%s is missing", f);
            snprintf(p, sizeof p, "%s/diffusion_models/flux_2.safetensors", models_dir), link_as(f, p);
        }
    }
    snprintf(tok, sizeof tok, "%s/tokenizer", tmp);
    CHECK_OK(sd_synth_vocab_write(tok, &err), &err);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models_dir, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    family fam[3] = {{"sd1", load("CheckpointLoaderSimple", "sd1_1.safetensors"),
                      load("CheckpointLoaderSimple", "sd1_2.safetensors")},
                     {"sdxl", load("CheckpointLoaderSimple", "sdxl_1.safetensors"),
                      load("CheckpointLoaderSimple", "sdxl_2.safetensors")},
                     {"flux", load("UNETLoader", "flux_1.safetensors"), load("UNETLoader", "flux_2.safetensors")}};
    char refp[4400];
    snprintf(refp, sizeof refp, "%s/%s", dir,
             cJSON_GetStringValue(cJSON_GetObjectItem(man, "file")) ? cJSON_GetStringValue(cJSON_GetObjectItem(man, "file")) : "");
    sd_st_file *ref = NULL;
    CHECK_OK(sd_st_open(refp, &ref, &err), &err);
    int head = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(man, "head"));
    CHECK_MSG(head > 0 && head <= 64, "manifest: head %d", head);
    int ncases = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(man, "cases")) {
        const char *fname = cJSON_GetStringValue(cJSON_GetObjectItem(c, "family"));
        family *f = NULL;
        for (int i = 0; i < 3; i++)
            if (fname && strcmp(fname, fam[i].name) == 0) f = &fam[i];
        CHECK_MSG(f != NULL, "case family %s", fname ? fname : "?");
        if (!f || !f->m1 || !f->m2 || !ref || head <= 0 || head > 64) continue;
        run_case(c, f, cJSON_GetObjectItem(cJSON_GetObjectItem(man, "keys"), fname), head, ref);
        ncases++;
    }
    CHECK_MSG(ncases > 0, "no case ran");

    /* two architectures: refused naming model2 */
    if (fam[0].m1 && fam[2].m1) {
        const char *n[] = {"model1", "model2", "ratio"};
        sd_value *v[] = {fam[2].m1, fam[0].m1, sd_value_float(0.5)};
        sd_value *m = run_node("ModelMergeSimple", n, v, 3, &err);
        CHECK_MSG(!m && err.code == SD_ERR_INVALID && strcmp(err.input, "model2") == 0,
                  "Flux + SD1 merge: %s", m ? "accepted" : err.msg);
        sd_value_unref(m);
        sd_value_unref(v[2]);
    }

    sd_st_close(ref);
    for (int i = 0; i < 3; i++) sd_value_unref(fam[i].m1), sd_value_unref(fam[i].m2);
    cJSON_Delete(man);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
