/* test_golden_lcm_upscale.c - SamplerLCMUpscale (issue 24) against ComfyUI
 * (tests/data/lcm_upscale, gen_lcm_upscale_ref.py): for each case,
 * CheckpointLoaderSimple (the shared tiny SD1) -> CLIPTextEncode x2,
 * EmptyLatentImage, BasicScheduler, SamplerLCMUpscale with the case's
 * inputs -> SamplerCustom through the node functions; its output and
 * denoised_output latents (grown to the sampler's size) against ComfyUI's
 * SamplerCustom with its own SamplerLCMUpscale. Also what sdflow refuses
 * (a noise_mask: the latent's size changes under it, where ComfyUI's
 * KSamplerX0Inpaint fails too) and that KSampler's list does not offer it.
 * Needs the shared tiny SD1 checkpoint and a tokenizer (SDFLOW_TOKENIZER_DIR
 * or <shared>/data/clip): without them, exit 77. */
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
#include "models/sampling/sampler.h"
#include "nodes/loaders/loaders.h"
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
    int ok = got && want && sd_test_allclose(got, want, atol, rtol, &mx, &worst);
    CHECK_MSG(ok, "%s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", id, mx, worst, atol, rtol);
    printf("  %s: max |diff| %g (atol %g rtol %g)\n", id, mx, atol, rtol);
}

/* Runs a node; *out (optional) gets output 0, *out1 (optional) output 1. */
static sd_status run2(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                      sd_value **out, sd_value **out1) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *o[8] = {0};
    sd_error err;
    sd_status rc = nt_run_named(&ctx, names, vals, n, o, &err);
    if (out) *out = o[0];
    else sd_value_unref(o[0]);
    if (out1) *out1 = o[1];
    else sd_value_unref(o[1]);
    for (int i = 2; i < 8; i++) sd_value_unref(o[i]);
    if (rc) printf("  %s: %s\n", type, err.msg);
    return rc;
}

static sd_value *run(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n) {
    sd_value *out = NULL;
    sd_status rc = run2(env, type, names, vals, n, &out, NULL);
    CHECK_MSG(rc == SD_OK, "%s failed", type);
    return out;
}

static sd_value *encode(const sd_env *env, sd_value *clip, const char *text) {
    const char *tn[] = {"clip", "text"};
    sd_value *tv[] = {clip, sd_value_string(text)};
    sd_value *c = run(env, "CLIPTextEncode", tn, tv, 2);
    sd_value_unref(tv[1]);
    return c;
}

static sd_value *empty_latent(const sd_env *env, int64_t w, int64_t h, int64_t b) {
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int(w), sd_value_int(h), sd_value_int(b)};
    sd_value *l = run(env, "EmptyLatentImage", ln, lv, 3);
    nt_free_values(lv, 3);
    return l;
}

static sd_value *lcm_sampler(const sd_env *env, const cJSON *in) {
    const char *sn[] = {"scale_ratio", "scale_steps", "upscale_method"};
    sd_value *sv[] = {sd_value_float(num(in, "scale_ratio")), sd_value_int((int64_t)num(in, "scale_steps")),
                      sd_value_string(str(in, "upscale_method"))};
    sd_value *s = run(env, "SamplerLCMUpscale", sn, sv, 3);
    nt_free_values(sv, 3);
    return s;
}

/* SamplerCustom(model, add_noise, seed, cfg, pos, neg, sampler, sigmas, latent). */
static sd_status sampler_custom(const sd_env *env, sd_value *model, int64_t seed, double cfg, sd_value *pos,
                                sd_value *neg, sd_value *sampler, sd_value *sigmas, sd_value *latent,
                                sd_value **out, sd_value **den) {
    const char *kn[] = {"model", "add_noise", "noise_seed", "cfg", "positive", "negative", "sampler", "sigmas",
                        "latent_image"};
    sd_value *kv[] = {model, sd_value_bool(1), sd_value_int(seed), sd_value_float(cfg), pos, neg, sampler, sigmas,
                      latent};
    sd_status rc = run2(env, "SamplerCustom", kn, kv, 9, out, den);
    sd_value_unref(kv[1]), sd_value_unref(kv[2]), sd_value_unref(kv[3]);
    return rc;
}

static void lcm_case(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    const cJSON *sin = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "sampler"), "inputs");
    const char *id = str(c, "id");
    sd_value *pos = encode(env, ck[1], str(s, "positive")), *neg = encode(env, ck[1], str(s, "negative"));
    sd_value *latent = empty_latent(env, (int64_t)num(s, "width"), (int64_t)num(s, "height"),
                                  (int64_t)num(s, "batch_size"));
    const char *bn[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *bv[] = {ck[0], sd_value_string(str(s, "scheduler")), sd_value_int((int64_t)num(s, "steps")),
                      sd_value_float(1.0)};
    sd_value *sigmas = run(env, "BasicScheduler", bn, bv, 4);
    for (int i = 1; i < 4; i++) sd_value_unref(bv[i]);
    sd_value *smp = lcm_sampler(env, sin), *out = NULL, *den = NULL;
    if (pos && neg && latent && sigmas && smp)
        CHECK_MSG(sampler_custom(env, ck[0], (int64_t)num(s, "seed"), num(s, "cfg"), pos, neg, smp, sigmas, latent,
                                 &out, &den) == SD_OK, "%s: SamplerCustom failed", id);
    sd_tensor *want = ref_tensor(str(c, "latent")), *want_d = ref_tensor(str(c, "denoised"));
    char what[256];
    compare(id, out ? sd_value_dict_tensor(out, "samples") : NULL, want, num(c, "atol"), num(c, "rtol"));
    snprintf(what, sizeof what, "%s denoised_output", id);
    compare(what, den ? sd_value_dict_tensor(den, "samples") : NULL, want_d, num(c, "atol"), num(c, "rtol"));
    sd_tensor_unref(want), sd_tensor_unref(want_d);
    sd_value_unref(out), sd_value_unref(den), sd_value_unref(smp), sd_value_unref(sigmas);
    sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(latent);
}

/* A noise mask cannot follow the latent's growth (ComfyUI's inpainting
 * wrapper fails on the new size too): refused. Not in KSampler's list. */
static void refusals(const sd_env *env, sd_value *const ck[3]) {
    size_t n = 0;
    const char *const *names = sd_sampler_names(&n);
    for (size_t i = 0; i < n; i++) CHECK_MSG(strcmp(names[i], "lcm_upscale"), "lcm_upscale is in KSampler's list");
    CHECK(sd_sampler_find("lcm_upscale") != NULL);
    sd_value *cond = encode(env, ck[1], "x"), *lat = empty_latent(env, 64, 64, 1), *masked = NULL;
    int64_t mshape[3] = {1, 8, 8};
    sd_tensor *mask = sd_tensor_new(SD_F32, 3, mshape);
    const char *mn[] = {"samples", "mask"};
    sd_value *mv[] = {lat, mask ? sd_value_tensor(mask) : NULL};
    if (mv[1]) masked = run(env, "SetLatentNoiseMask", mn, mv, 2);
    sd_value_unref(mv[1]);
    sd_tensor_unref(mask);
    const char *sn[] = {"scale_ratio", "scale_steps", "upscale_method"};
    sd_value *sv[] = {sd_value_float(1.5), sd_value_int(-1), sd_value_string("bilinear")};
    sd_value *smp = run(env, "SamplerLCMUpscale", sn, sv, 3);
    nt_free_values(sv, 3);
    const char *bn[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *bv[] = {ck[0], sd_value_string("normal"), sd_value_int(2), sd_value_float(1.0)};
    sd_value *sigmas = run(env, "BasicScheduler", bn, bv, 4);
    for (int i = 1; i < 4; i++) sd_value_unref(bv[i]);
    CHECK(cond && masked && smp && sigmas &&
          sampler_custom(env, ck[0], 1, 2.0, cond, cond, smp, sigmas, masked, NULL, NULL) == SD_ERR_UNSUPPORTED);
    /* lanczos is not one of the node's methods */
    sd_value *sv2[] = {sd_value_float(1.5), sd_value_int(-1), sd_value_string("lanczos")};
    CHECK(run2(env, "SamplerLCMUpscale", sn, sv2, 3, NULL, NULL) == SD_ERR_INVALID);
    nt_free_values(sv2, 3);
    sd_value_unref(cond), sd_value_unref(lat), sd_value_unref(masked), sd_value_unref(smp), sd_value_unref(sigmas);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("lcm_upscale");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(man, "cases")) > 0);
    const char *tokdir = sd_golden_tokenizer_dir();
    const char *ckpt = sd_golden_tiny_sd1("the cases did not run");
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
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) if (ck[0] && ck[1]) lcm_case(&env, ck, c);
    if (ck[0] && ck[1]) refusals(&env, ck);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
