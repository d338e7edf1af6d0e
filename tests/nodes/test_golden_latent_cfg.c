/* test_golden_latent_cfg.c - LatentApplyOperationCFG against ComfyUI
 * (tests/data/latent_cfg, gen_latent_cfg_ref.py):
 *   "pre_cfg" cases: the MODEL's pre-CFG list (sd_cfg_pre, guider.h) on the
 *     stored cond/uncond predictions, against ComfyUI's own
 *     sampler_pre_cfg_function list on them;
 *   "ksampler" cases: CheckpointLoaderSimple (the shared tiny SD1) ->
 *     CLIPTextEncode x2, EmptyLatentImage, the operation nodes ->
 *     LatentApplyOperationCFG -> KSampler through the node functions, the
 *     latent against ComfyUI's nodes.common_ksampler with the patched model;
 *     each patched case must also differ from the unpatched one by more than
 *     the tolerance, so a hook that is not applied fails.
 * Needs the shared tiny SD1 checkpoint and a tokenizer (SDFLOW_TOKENIZER_DIR
 * or <shared>/data/clip) for the ksampler cases: without them, exit 77. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/guider.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k)); }

static sd_tensor *ref_tensor(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s", name);
    return t;
}

static void compare(const char *id, const sd_tensor *got, const sd_tensor *want, double atol, double rtol) {
    double mx = 0;
    long worst = -1;
    int ok = got && want && sd_tensor_numel(got) == sd_tensor_numel(want) &&
             sd_test_allclose(got, want, atol, rtol, &mx, &worst);
    CHECK_MSG(ok, "%s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", id, mx, worst, atol, rtol);
    printf("  %s: max |diff| %g (atol %g rtol %g)\n", id, mx, atol, rtol);
}

/* The manifest's operation as the node that makes it would. */
static sd_latent_op op_of(const cJSON *o) {
    sd_latent_op op = {0};
    if (!strcmp(str(o, "node"), "LatentOperationSharpen")) {
        op.kind = SD_LATENT_OP_SHARPEN;
        op.radius = (int64_t)num(o, "sharpen_radius");
        op.sigma = num(o, "sigma");
        op.alpha = num(o, "alpha");
    } else {
        op.kind = SD_LATENT_OP_TONEMAP_REINHARD;
        op.multiplier = num(o, "multiplier");
    }
    return op;
}

static void pre_cfg_case(const cJSON *c) {
    const char *id = str(c, "id");
    sd_cfg_hook hook = {0};
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(c, "ops")) hook.pre[hook.n_pre++] = op_of(o);
    sd_tensor *cond = ref_tensor(str(c, "cond")), *uncond = ref_tensor(str(c, "uncond")), *want = ref_tensor(str(c, "out"));
    sd_tensor *work = cond ? sd_tensor_clone(cond) : NULL;
    sd_error err;
    if (work && uncond) CHECK_OK(sd_cfg_pre(&hook, work, uncond, &err), &err);
    compare(id, work, want, num(c, "atol"), num(c, "rtol"));
    sd_tensor_unref(cond), sd_tensor_unref(uncond), sd_tensor_unref(want), sd_tensor_unref(work);
}

/* ---- ksampler cases ------------------------------------------------------------------------- */

static sd_value *run(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *out[8] = {0};
    sd_error err;
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, &err);
    CHECK_MSG(rc == SD_OK, "%s failed: %s", type, err.msg);
    for (int i = 1; i < 8; i++) sd_value_unref(out[i]);
    return rc ? NULL : out[0];
}

static sd_tensor *ksampler_case(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    sd_value *model = sd_value_ref(ck[0]);
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(c, "ops")) {
        sd_value *opv = NULL;
        if (!strcmp(str(o, "node"), "LatentOperationSharpen")) {
            const char *n[] = {"sharpen_radius", "sigma", "alpha"};
            sd_value *v[] = {sd_value_int((int64_t)num(o, "sharpen_radius")), sd_value_float(num(o, "sigma")),
                             sd_value_float(num(o, "alpha"))};
            opv = run(env, "LatentOperationSharpen", n, v, 3);
            nt_free_values(v, 3);
        } else {
            const char *n[] = {"multiplier"};
            sd_value *v[] = {sd_value_float(num(o, "multiplier"))};
            opv = run(env, "LatentOperationTonemapReinhard", n, v, 1);
            nt_free_values(v, 1);
        }
        const char *n[] = {"model", "operation"};
        sd_value *v[] = {model, opv};
        sd_value *m2 = opv ? run(env, "LatentApplyOperationCFG", n, v, 2) : NULL;
        sd_value_unref(opv);
        sd_value_unref(model);
        model = m2;
        if (!model) return NULL;
    }
    const char *tn[] = {"clip", "text"};
    sd_value *tp[] = {ck[1], sd_value_string(str(s, "positive"))}, *tg[] = {ck[1], sd_value_string(str(s, "negative"))};
    sd_value *pos = run(env, "CLIPTextEncode", tn, tp, 2), *neg = run(env, "CLIPTextEncode", tn, tg, 2);
    sd_value_unref(tp[1]), sd_value_unref(tg[1]);
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int((int64_t)num(s, "width")), sd_value_int((int64_t)num(s, "height")), sd_value_int(1)};
    sd_value *latent = run(env, "EmptyLatentImage", ln, lv, 3);
    nt_free_values(lv, 3);
    const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                        "latent_image", "denoise"};
    sd_value *kv[] = {model, sd_value_int((int64_t)num(s, "seed")), sd_value_int((int64_t)num(s, "steps")),
                      sd_value_float(num(c, "cfg")), sd_value_string(str(s, "sampler_name")),
                      sd_value_string(str(s, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    sd_value *res = pos && neg && latent ? run(env, "KSampler", kn, kv, 10) : NULL;
    for (int i = 1; i < 6; i++) sd_value_unref(kv[i]);
    sd_value_unref(kv[9]);
    sd_value_unref(model), sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(latent);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

int main(void) {
    const char *dir = sd_golden_topic_dir("latent_cfg");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const cJSON *c;
    int n_pre = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases"))
        if (!strcmp(str(c, "kind"), "pre_cfg")) { pre_cfg_case(c); n_pre++; }
    CHECK(n_pre > 0);

    const char *tokdir = sd_golden_tokenizer_dir();
    const char *ckpt = sd_golden_tiny_sd1("the ksampler cases did not run");
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    sd_backend *be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *cn[] = {"ckpt_name"};
    sd_value *cv[] = {sd_value_string(ckpt)}, *ck[3] = {0};
    sd_node_ctx ctx = {.env = &env, .node_id = "4", .class_type = "CheckpointLoaderSimple"};
    CHECK_OK(nt_run_named(&ctx, cn, cv, 1, ck, &err), &err);
    sd_value_unref(cv[0]);
    sd_tensor *plain = NULL;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (strcmp(str(c, "kind"), "ksampler") || !ck[0]) continue;
        const char *id = str(c, "id");
        sd_tensor *want = ref_tensor(str(c, "latent")), *got = ksampler_case(&env, ck, c);
        compare(id, got, want, num(c, "atol"), num(c, "rtol"));
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "ops")) == 0) {
            sd_tensor_unref(plain);
            plain = sd_tensor_ref(got);
        } else if (plain && got && num(c, "cfg") == 6.0) {
            /* the patch must show: the unpatched latent lies outside the tolerance */
            double mx = 0;
            long worst = -1;
            CHECK_MSG(!sd_test_allclose(plain, want, num(c, "atol"), num(c, "rtol"), &mx, &worst),
                      "%s: the unpatched latent is within the tolerance too", id);
        }
        sd_tensor_unref(want), sd_tensor_unref(got);
    }
    sd_tensor_unref(plain);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
