/* Per-block model merges (nodes/model/model_merge_blocks.c: ModelMergeBlocks,
 * ModelMergeSD1 / SD2 / SDXL / Flux1 / SD3_2B / SD35_Large) and
 * ModelMergeSimple / Add / Subtract on the DiTs (Flux, SD3, Z-Image) against
 * ComfyUI's own nodes (tests/data/merge_blocks, make_merge_blocks.py and its
 * manifest). For every family of the manifest, model1 and model2 are loaded
 * with its loader: model1 is a file of the shared data, model2 a checkpoint
 * the test synthesizes with the manifest's preset and seed ("synth"), the
 * generator's file beside the manifest ("file"), or model1 with every tensor
 * rolled by one element and negated ("derive": "negate_roll", the bytes the
 * generator gave ComfyUI: a sign-bit flip, exact in every float type). For
 * every case of the manifest:
 *   - the case's node runs with the case's inputs (every FLOAT by name);
 *   - for every key of the family's list (ComfyUI's state-dict order) the
 *     first `head` elements of the merged weight equal ComfyUI's row: the
 *     rows are W1 * r + (1 - r) * W2 in float32 with r the key's block
 *     ratio, one product and one sum per element as ComfyUI computes them,
 *     so they are compared within 1 ulp-sized bounds (atol 1e-7, rtol 1e-6:
 *     a fused multiply-add may round the sum once instead of twice);
 *   - the case is not trivial: some row differs from model1's weights.
 * Then a Flux model merged with an SD1 model, and an SD3 model with a
 * Z-Image one, are refused naming model2. */
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
#include "models/sd3/sd3.h"
#include "models/zimage/zimage.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes/lora/lora_nodes.h"
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
    if (sd_nodes_lora_on_dit(r->ckpt)) {
        sd_dmodel dm;
        if (sd_nodes_model_dmodel(r, &dm, &err) == SD_OK) {
            if (dm.info.kind == SD_DMODEL_FLUX) slot = sd_flux_param(dm.net, key);
            else if (dm.info.kind == SD_DMODEL_MMDIT) slot = sd_sd3_param(dm.net, key);
            else if (dm.info.kind == SD_DMODEL_ZIMAGE) slot = sd_zimage_param(dm.net, key);
        }
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

#define MAX_FAMILIES 8

typedef struct family {
    const char *name;
    sd_value *m1, *m2;
} family;

/* model2 of "derive": "negate_roll": every tensor of src flattened, rolled
 * by one (out[i] = in[(i + 1) mod n]) and negated, in its stored type. */
static sd_status write_negate_roll(const char *src, const char *dst, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = sd_st_open(src, &f, err);
    if (rc) return rc;
    sd_st_writer *w = sd_st_writer_new();
    if (!w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        sd_tensor *t = sd_st_tensor(f, e->name, err);
        if (!t) {
            rc = err->code ? err->code : SD_ERR_IO;
            break;
        }
        size_t es = sd_dtype_size(t->dtype), n = (size_t)sd_tensor_numel(t);
        sd_tensor *o = sd_tensor_new(t->dtype, t->ndim, t->shape);
        if (!o || !(es == 2 || es == 4)) {
            sd_tensor_unref(t), sd_tensor_unref(o);
            rc = sd_error_set(err, SD_ERR_INVALID, "%s: %s is not a 16- or 32-bit float", src, e->name);
            break;
        }
        const uint8_t *a = t->data;
        uint8_t *b = o->data;
        for (size_t j = 0; j < n; j++) {
            memcpy(b + j * es, a + ((j + 1) % n) * es, es);
            b[j * es + es - 1] ^= 0x80; /* the sign bit (little-endian) */
        }
        rc = sd_st_writer_add(w, e->name, o, err);
        sd_tensor_unref(t), sd_tensor_unref(o);
    }
    if (!rc) rc = sd_st_writer_save(w, dst, err);
    sd_st_writer_free(w);
    sd_st_close(f);
    return rc;
}

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
    const char *dir = sd_golden_topic_dir("merge_blocks");
    cJSON *man = sd_golden_manifest(dir);
    const char *td = sd_test_testdata_dir();
    cJSON *models = cJSON_GetObjectItem(man, "models");
    /* every family's model1 (shared data): absent data skips */
    cJSON *fm;
    cJSON_ArrayForEach(fm, models) {
        const char *m1 = cJSON_GetStringValue(cJSON_GetObjectItem(fm, "model1"));
        CHECK_MSG(m1 && strncmp(m1, "testdata/", 9) == 0, "manifest: %s model1", fm->string);
        if (!m1 || strncmp(m1, "testdata/", 9)) return sd_test_finish();
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", td, m1 + 9);
        if (access(p, R_OK)) sd_test_skip("no %s", p);
    }

    const char *tmp = sd_test_tmpdir("nodes_golden_model_merge_blocks");
    char models_dir[4200], cmd[9000], tok[4200];
    snprintf(models_dir, sizeof models_dir, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints' '%s/diffusion_models'", models_dir, models_dir);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    /* model1 linked, model2 made as the manifest says, under the loader's folder:
     * <family>_1 and <family>_2 */
    int nfam = 0;
    char names[MAX_FAMILIES][2][256];
    const char *loaders[MAX_FAMILIES];
    cJSON_ArrayForEach(fm, models) {
        CHECK_MSG(nfam < MAX_FAMILIES, "manifest: more than %d families", MAX_FAMILIES);
        if (nfam >= MAX_FAMILIES) break;
        const char *loader = cJSON_GetStringValue(cJSON_GetObjectItem(fm, "loader"));
        int unet = loader && strcmp(loader, "UNETLoader") == 0;
        CHECK_MSG(unet || (loader && strcmp(loader, "CheckpointLoaderSimple") == 0), "manifest: %s loader",
                  fm->string);
        loaders[nfam] = unet ? "UNETLoader" : "CheckpointLoaderSimple";
        const char *sub = unet ? "diffusion_models" : "checkpoints";
        char m1[4200], p1[4400], p2[4400];
        snprintf(m1, sizeof m1, "%s/%s", td, cJSON_GetStringValue(cJSON_GetObjectItem(fm, "model1")) + 9);
        snprintf(names[nfam][0], sizeof names[0][0], "%s_1.safetensors", fm->string);
        snprintf(names[nfam][1], sizeof names[0][1], "%s_2.safetensors", fm->string);
        snprintf(p1, sizeof p1, "%s/%s/%s", models_dir, sub, names[nfam][0]);
        snprintf(p2, sizeof p2, "%s/%s/%s", models_dir, sub, names[nfam][1]);
        link_as(m1, p1);
        cJSON *m2 = cJSON_GetObjectItem(fm, "model2");
        const char *preset = cJSON_GetStringValue(cJSON_GetObjectItem(m2, "synth"));
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(m2, "file"));
        const char *derive = cJSON_GetStringValue(cJSON_GetObjectItem(m2, "derive"));
        int seed = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(m2, "seed"));
        if (preset && sd_synth_preset(preset)) {
            CHECK_OK(sd_synth_sd1_write(sd_synth_preset(preset), (uint64_t)seed, p2, &err), &err);
        } else if (preset && sd_synth_sdxl_preset(preset)) {
            CHECK_OK(sd_synth_sdxl_write(sd_synth_sdxl_preset(preset), (uint64_t)seed, p2, &err), &err);
        } else if (file) {
            char f[4200];
            snprintf(f, sizeof f, "%s/%s", dir, file);
            CHECK_MSG(access(f, R_OK) == 0, "%s is missing", f);
            link_as(f, p2);
        } else if (derive && strcmp(derive, "negate_roll") == 0) {
            CHECK_OK(write_negate_roll(m1, p2, &err), &err);
        } else {
            CHECK_MSG(0, "manifest: %s model2: no known synth preset, file or derive", fm->string);
        }
        nfam++;
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

    family fam[MAX_FAMILIES] = {{0}};
    int i = 0;
    cJSON_ArrayForEach(fm, models) {
        if (i >= nfam) break;
        fam[i] = (family){fm->string, load(loaders[i], names[i][0]), load(loaders[i], names[i][1])};
        i++;
    }
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
        for (i = 0; i < nfam; i++)
            if (fname && strcmp(fname, fam[i].name) == 0) f = &fam[i];
        CHECK_MSG(f != NULL, "case family %s", fname ? fname : "?");
        if (!f || !f->m1 || !f->m2 || !ref || head <= 0 || head > 64) continue;
        run_case(c, f, cJSON_GetObjectItem(cJSON_GetObjectItem(man, "keys"), fname), head, ref);
        ncases++;
    }
    CHECK_MSG(ncases > 0, "no case ran");

    /* two architectures: refused naming model2 (the first UNet family with
     * the first DiT one, and two DiTs of different kinds) */
    const sd_value *unet_m = NULL, *dits[MAX_FAMILIES];
    int ndit = 0;
    for (i = 0; i < nfam; i++) {
        sd_model_ref *r = fam[i].m1 ? sd_value_as_handle(fam[i].m1, &sd_handle_model) : NULL;
        if (!r) continue;
        if (sd_nodes_lora_on_dit(r->ckpt)) dits[ndit++] = fam[i].m1;
        else if (!unet_m) unet_m = fam[i].m1;
    }
    const sd_value *pairs[2][2] = {{ndit ? dits[0] : NULL, unet_m}, {ndit > 1 ? dits[0] : NULL, ndit > 1 ? dits[ndit - 1] : NULL}};
    for (int k = 0; k < 2; k++) {
        if (!pairs[k][0] || !pairs[k][1]) continue;
        const char *n[] = {"model1", "model2", "ratio"};
        sd_value *v[] = {(sd_value *)pairs[k][0], (sd_value *)pairs[k][1], sd_value_float(0.5)};
        sd_value *m = run_node("ModelMergeSimple", n, v, 3, &err);
        CHECK_MSG(!m && err.code == SD_ERR_INVALID && strcmp(err.input, "model2") == 0,
                  "merge of two architectures (%d): %s", k, m ? "accepted" : err.msg);
        sd_value_unref(m);
        sd_value_unref(v[2]);
    }

    sd_st_close(ref);
    for (i = 0; i < nfam; i++) sd_value_unref(fam[i].m1), sd_value_unref(fam[i].m2);
    cJSON_Delete(man);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
