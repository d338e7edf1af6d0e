/* test_golden_sd3_slg.c - SkipLayerGuidanceSD3 against ComfyUI
 * (tests/data/sd3_slg: gen_slg.py, its manifest and the safetensors it
 * wrote with ComfyUI's own nodes): for every case of that manifest,
 * UNETLoader on the SD3 set's tiny MMDiT (the sd3 manifest's diffusion
 * model, linked under its comfy_name), ModelSamplingSD3(shift),
 * SkipLayerGuidanceSD3(layers, scale, start_percent, end_percent) and
 * KSampler(seed, steps, cfg, sampler, scheduler) on EmptySD3LatentImage
 * zeros with the recorded conditioning; latent_out is compared at the
 * manifest's tolerance, and the same KSampler without the node with
 * latent_noslg (so a guidance that is not applied cannot pass where the
 * two differ). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *case_id;

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void link_as(const char *target, const char *models, const char *rel) {
    char src[4200], dst[4200], cmd[8600];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", models, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static sd_value *conditioning(sd_st_file *g, const char *which) {
    char k1[64], k2[64];
    snprintf(k1, sizeof k1, "%s.cond", which);
    snprintf(k2, sizeof k2, "%s.pooled", which);
    sd_error err;
    sd_tensor *c = sd_st_tensor_f32(g, k1, &err), *p = sd_st_tensor_f32(g, k2, &err);
    CHECK_MSG(c && p, "no recorded %s conditioning", which);
    if (!c || !p) {
        sd_tensor_unref(c), sd_tensor_unref(p);
        return NULL;
    }
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "cond", nt_tensor_value(c));
    sd_value_dict_set(d, "pooled_output", nt_tensor_value(p));
    sd_value *l = sd_value_list();
    sd_value_list_append(l, d);
    return l;
}

static double num(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    CHECK_MSG(cJSON_IsNumber(v), "%s: setting %s missing", case_id, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(cJSON *o, const char *k) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    CHECK_MSG(s != NULL, "%s: setting %s missing", case_id, k);
    return s ? s : "";
}

/* KSampler on model (borrowed) -> samples (new). */
static sd_tensor *ksample(sd_env *env, sd_value *model, cJSON *c, sd_value *pos, sd_value *neg) {
    sd_error err;
    sd_error_clear(&err);
    sd_node_ctx ctx = {.env = env, .node_id = "4", .class_type = "EmptySD3LatentImage"};
    const char *ln[3] = {"width", "height", "batch_size"};
    sd_value *lv[3] = {sd_value_int((int64_t)num(c, "width")), sd_value_int((int64_t)num(c, "height")),
                       sd_value_int(1)};
    int own3[3] = {1, 1, 1};
    sd_value *latent = nt_run1_named(&ctx, ln, lv, 3, own3, &err);
    if (!latent) return NULL;
    ctx.node_id = "5", ctx.class_type = "KSampler";
    const char *kn[10] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                          "positive", "negative", "latent_image", "denoise"};
    sd_value *kv[10] = {model, sd_value_int((int64_t)num(c, "seed")), sd_value_int((int64_t)num(c, "steps")),
                        sd_value_float(num(c, "cfg")), sd_value_string(str(c, "sampler")),
                        sd_value_string(str(c, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    int own[10] = {0, 1, 1, 1, 1, 1, 0, 0, 1, 1};
    sd_value *out = nt_run1_named(&ctx, kn, kv, 10, own, &err);
    sd_tensor *s = out ? sd_value_dict_tensor(out, "samples") : NULL;
    s = s ? sd_tensor_ref(s) : NULL;
    sd_value_unref(out);
    return s;
}

static void run_case(sd_env *env, sd_value *unet, sd_st_file *g, cJSON *tensors, cJSON *c, sd_value *pos,
                     sd_value *neg) {
    sd_error err;
    sd_error_clear(&err);
    sd_node_ctx ctx = {.env = env, .node_id = "2", .class_type = "ModelSamplingSD3"};
    const char *mn[2] = {"model", "shift"};
    sd_value *mv[2] = {unet, sd_value_float(num(c, "shift"))};
    int mo[2] = {0, 1};
    sd_value *m = nt_run1_named(&ctx, mn, mv, 2, mo, &err);
    if (!m) return;
    ctx.node_id = "3", ctx.class_type = "SkipLayerGuidanceSD3";
    const char *sn[5] = {"model", "layers", "scale", "start_percent", "end_percent"};
    sd_value *sv[5] = {m, sd_value_string(str(c, "layers")), sd_value_float(num(c, "scale")),
                       sd_value_float(num(c, "start_percent")), sd_value_float(num(c, "end_percent"))};
    int so[5] = {0, 1, 1, 1, 1};
    sd_value *slg = nt_run1_named(&ctx, sn, sv, 5, so, &err);
    char name[96];
    if (slg) {
        sd_tensor *got = ksample(env, slg, c, pos, neg);
        snprintf(name, sizeof name, "%s.latent_out", case_id);
        sd_golden_compare(case_id, tensors, g, name, got);
        sd_tensor_unref(got);
    }
    sd_tensor *plain = ksample(env, m, c, pos, neg);
    snprintf(name, sizeof name, "%s.latent_noslg", case_id);
    sd_golden_compare(case_id, tensors, g, name, plain);
    sd_tensor_unref(plain);

    sd_value_unref(slg);
    sd_value_unref(m);
}

int main(void) {
    char path[1400];
    const char *dir = sd_golden_topic_dir("sd3_slg");
    cJSON *m = sd_golden_manifest(dir);
    const char *sd3dir = sd_golden_family_dir("sd3");
    cJSON *sd3 = sd_golden_manifest(sd3dir);
    sd_backend *be = sd_golden_sampling_backend();
    if (!be) return sd_test_finish();

    sd_env env;
    sd_error err;
    char models[4200];
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("sd3_slg"));
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    cJSON *mm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sd3, "models"), "mmdit");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mm, "file"));
    const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mm, "comfy_name"));
    CHECK_MSG(file && cn && strchr(cn, '/'), "the sd3 manifest has no mmdit model");
    snprintf(path, sizeof path, "%s/%s", sd3dir, file ? file : "");
    if (file && cn && strchr(cn, '/')) link_as(path, models, cn);
    sd_node_ctx ctx = {.env = &env, .node_id = "1", .class_type = "UNETLoader"};
    const char *un[2] = {"unet_name", "weight_dtype"};
    sd_value *uv[2] = {sd_value_string(cn ? strchr(cn, '/') + 1 : ""), sd_value_string("default")};
    int uo[2] = {1, 1};
    sd_value *unet = nt_run1_named(&ctx, un, uv, 2, uo, &err);

    snprintf(path, sizeof path, "%s/%s", dir, "slg.safetensors");
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    sd_value *pos = g ? conditioning(g, "positive") : NULL, *neg = g ? conditioning(g, "negative") : NULL;
    cJSON *cases = cJSON_GetObjectItemCaseSensitive(m, "cases"), *c;
    /* the tolerance block the golden compare reads, per tensor */
    cJSON *tensors = cJSON_CreateObject(), *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    CHECK_MSG(cJSON_GetArraySize(cases) > 0 && tol, "manifest lists no case or no tolerance");
    cJSON_ArrayForEach(c, cases) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        for (int k = 0; id && k < 2; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", id, k ? "latent_noslg" : "latent_out");
            cJSON *t = cJSON_AddObjectToObject(tensors, name);
            cJSON_AddItemToObject(t, "tolerance", cJSON_Duplicate(tol, 1));
        }
    }
    if (unet && pos && neg) {
        cJSON_ArrayForEach(c, cases) {
            case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
            printf("case %s: layers '%s'\n", case_id, str(c, "layers"));
            run_case(&env, unet, g, tensors, c, pos, neg);
        }
    }
    cJSON_Delete(tensors);
    sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(unet);
    if (g) sd_st_close(g);
    sd_model_store_free(store);
    sd_backend_free(be);
    env.backend = NULL;
    env.models = NULL;
    sd_env_cleanup(&env);
    sd_registry_reset();
    cJSON_Delete(sd3);
    cJSON_Delete(m);
    return sd_test_finish();
}
