/* KSampler on an SD2 v-prediction model against ComfyUI: the tiny sd2-tiny
 * checkpoint (`sdflow synth --preset sd2-tiny --seed 1`, sha256 in
 * tests/data/sd2/manifest.json) through CheckpointLoaderSimple,
 * CLIPTextEncode (positive, negative), EmptyLatentImage and KSampler with the
 * manifest's settings must give the LATENT that nodes.common_ksampler gives
 * in ComfyUI (tensor ksampler_v of tests/data/sd2/sd2_ref.safetensors, made
 * by tests/data/sd2/gen_sd2_ref.py). Needs the real CLIP vocabulary
 * (shared/data/clip); skipped without it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/node.h"
#include "core/sha256.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "golden.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_status run_named(const sd_env *env, const char *type, const char *const *names,
                           sd_value *const *vals, int n, sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

int main(void) {
    char p[4200], tok[4200];
    const char *dir = sd_golden_topic_dir("sd2");
    cJSON *man = sd_golden_manifest(dir);
    snprintf(tok, sizeof tok, "%s/data/clip", sd_test_shared_dir());
    snprintf(p, sizeof p, "%s/vocab.json", tok);
    char *vocab = sd_test_read_file(p, NULL);
    if (!vocab) sd_test_skip("the CLIP vocabulary is absent (%s)", p);
    free(vocab);
    const cJSON *k = get(man, "ksampler");
    CHECK(man && k && cJSON_IsString(get(man, "prompt")) && cJSON_IsString(get(man, "negative")));
    if (!man || !k) return sd_test_finish();

    sd_error err = {0};
    sd_st_file *ref = NULL;
    snprintf(p, sizeof p, "%s/sd2_ref.safetensors", dir);
    CHECK_OK(sd_st_open(p, &ref, &err), &err);
    sd_tensor *want = ref ? sd_st_tensor(ref, "ksampler_v", &err) : NULL;
    CHECK_MSG(want != NULL, "ksampler_v: %s", err.msg);

    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/sd2-tiny.safetensors", sd_test_tmpdir("golden_sd2_ksampler"));
    CHECK_OK(sd_synth_sd2_write(sd_synth_sd2_preset("sd2-tiny"), 1, ckpt, &err), &err);
    uint8_t d[32];
    char hex[65] = "";
    CHECK_OK(sd_sha256_file(ckpt, d, &err), &err);
    sd_sha256_hex(d, hex);
    const char *sha = cJSON_GetStringValue(get(get(get(man, "checkpoints"), "sd2-tiny"), "sha256"));
    CHECK_MSG(sha && strcmp(sha, hex) == 0,
              "sdflow synth --seed 1 writes sha256 %s, the reference was made from %s: "
              "regenerate tests/data/sd2 with gen_sd2_ref.py", hex, sha ? sha : "(none)");

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 2, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_value *name = sd_value_string(ckpt), *ck[3] = {0}, *pos = NULL, *neg = NULL, *lat = NULL,
             *out = NULL;
    const char *n_ck[] = {"ckpt_name"};
    sd_status rc = run_named(&env, "CheckpointLoaderSimple", n_ck, &name, 1, ck, &err);
    CHECK_OK(rc, &err);
    const char *n_te[] = {"text", "clip"};
    if (!rc) {
        sd_value *v[2] = {sd_value_string(cJSON_GetStringValue(get(man, "prompt"))), ck[1]};
        CHECK_OK(rc = run_named(&env, "CLIPTextEncode", n_te, v, 2, &pos, &err), &err);
        sd_value_unref(v[0]);
    }
    if (!rc) {
        sd_value *v[2] = {sd_value_string(cJSON_GetStringValue(get(man, "negative"))), ck[1]};
        CHECK_OK(rc = run_named(&env, "CLIPTextEncode", n_te, v, 2, &neg, &err), &err);
        sd_value_unref(v[0]);
    }
    if (!rc) {
        const char *n[] = {"width", "height", "batch_size"};
        sd_value *v[3] = {sd_value_int(get(k, "width")->valueint), sd_value_int(get(k, "height")->valueint),
                          sd_value_int(1)};
        CHECK_OK(rc = run_named(&env, "EmptyLatentImage", n, v, 3, &lat, &err), &err);
        for (int i = 0; i < 3; i++) sd_value_unref(v[i]);
    }
    if (!rc) {
        const char *n[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
        sd_value *v[10] = {ck[0],
                           sd_value_int((int64_t)get(k, "seed")->valuedouble),
                           sd_value_int(get(k, "steps")->valueint),
                           sd_value_float(get(k, "cfg")->valuedouble),
                           sd_value_string(cJSON_GetStringValue(get(k, "sampler_name"))),
                           sd_value_string(cJSON_GetStringValue(get(k, "scheduler"))),
                           pos, neg, lat,
                           sd_value_float(get(k, "denoise")->valuedouble)};
        CHECK_OK(rc = run_named(&env, "KSampler", n, v, 10, &out, &err), &err);
        for (int i = 1; i < 6; i++) sd_value_unref(v[i]);
        sd_value_unref(v[9]);
    }
    if (!rc && out && want) {
        sd_tensor *got = sd_value_dict_tensor(out, "samples");
        const cJSON *t = get(get(man, "tolerance"), "ksampler");
        double max_abs = 0;
        long worst = 0;
        CHECK(got && sd_tensor_numel(got) == sd_tensor_numel(want));
        if (got && sd_tensor_numel(got) == sd_tensor_numel(want)) {
            int ok = sd_test_allclose(got, want, get(t, "atol")->valuedouble,
                                      get(t, "rtol")->valuedouble, &max_abs, &worst);
            CHECK_MSG(ok, "KSampler latent: max abs error %g at %ld", max_abs, worst);
            printf("  ksampler_v: max abs error %.3g\n", max_abs);
        }
    }
    sd_value_unref(name);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_value_unref(pos);
    sd_value_unref(neg);
    sd_value_unref(lat);
    sd_value_unref(out);
    sd_tensor_unref(want);
    sd_st_close(ref);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    cJSON_Delete(man);
    return sd_test_finish();
}
