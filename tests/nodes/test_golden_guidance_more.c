/* test_golden_guidance_more.c - SelfAttentionGuidance, PerpNeg, PerpNegGuider,
 * RenormCFG and FreSca against ComfyUI (tests/data/guidance_more,
 * gen_guidance_more_ref.py):
 *   "fresca" cases: sd_fresca_filter against ComfyUI's
 *     nodes_fresca.Fourier_filter on the stored x;
 *   "ksampler" cases: CheckpointLoaderSimple (the shared tiny SD1) ->
 *     CLIPTextEncode x2, EmptyLatentImage, the case's patch nodes in order
 *     (a CONDITIONING input is the CLIPTextEncode of its text) -> KSampler,
 *     through the node functions, the latent against ComfyUI's
 *     nodes.common_ksampler with the model its own nodes patched. Every
 *     patched case must differ from the unpatched one of its cfg and size by
 *     more than the tolerance (a patch that is not applied fails), and each
 *     node must leave its input MODEL as it was;
 *   "perpneg_guider" cases: PerpNegGuider -> SamplerCustomAdvanced with
 *     RandomNoise, KSamplerSelect and BasicScheduler, against ComfyUI's
 *     Guider_PerpNeg.sample; it must differ from the plain KSampler case of
 *     its cfg.
 * Needs the shared tiny SD1 checkpoint and a tokenizer (SDFLOW_TOKENIZER_DIR
 * or <shared>/data/clip) for the sampling cases: without them, exit 77. */
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
#include "models/sampling/fresca.h"
#include "nodes/loaders/loaders.h"
#include "nodes/lora/lora_nodes.h"
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

static void fresca_case(const cJSON *c) {
    const char *id = str(c, "id");
    sd_tensor *x0 = ref_tensor(str(c, "x")), *want = ref_tensor(str(c, "out"));
    sd_tensor *x = x0 ? sd_tensor_clone(x0) : NULL; /* the file's view is read-only */
    sd_tensor_unref(x0);
    sd_error err;
    if (x) {
        CHECK(x->ndim == 4);
        CHECK_OK(sd_fresca_filter(sd_tensor_f32(x), x->shape, num(c, "scale_low"), num(c, "scale_high"),
                                  (int64_t)num(c, "freq_cutoff"), &err),
                 &err);
    }
    compare(id, x, want, num(c, "atol"), num(c, "rtol"));
    sd_tensor_unref(x), sd_tensor_unref(want);
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

/* The patches a MODEL or CLIP carries: its own and its weight-patch stack's. */
static int patch_count(const sd_value *m) {
    sd_model_ref *r = m ? sd_value_as_handle(m, &sd_handle_model) : NULL;
    sd_clip_ref *c = m ? sd_value_as_handle(m, &sd_handle_clip) : NULL;
    if (c) return (int)sd_lora_stack_count(c->loras);
    return r ? r->patches.unet.n + r->patches.cfg.n_pre + r->patches.cfg.n_post + r->patches.cfg.rescale +
                   (r->patches.cfg.fn != SD_CFG_FN_NONE) + r->patches.diff_diff + (int)sd_lora_stack_count(r->loras)
             : -1;
}

static sd_value *encode(const sd_env *env, sd_value *clip, const char *text) {
    const char *tn[] = {"clip", "text"};
    sd_value *tv[] = {clip, sd_value_string(text)};
    sd_value *c = run(env, "CLIPTextEncode", tn, tv, 2);
    sd_value_unref(tv[1]);
    return c;
}

/* One patch node of the manifest on model: its inputs as the manifest types
 * them (a CONDITIONING is the CLIPTextEncode of its "text" with clip). */
static sd_value *patch_node(const sd_env *env, sd_value *model, sd_value *clip, const cJSON *node) {
    const char *names[16];
    sd_value *vals[16];
    int n = 0;
    names[n] = "model";
    vals[n++] = sd_value_ref(model);
    const cJSON *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(node, "inputs")) {
        if (n == 16) break;
        const char *type = str(in, "type");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, "value");
        names[n] = str(in, "name");
        vals[n++] = !strcmp(type, "INT")       ? sd_value_int((int64_t)cJSON_GetNumberValue(v))
                    : !strcmp(type, "BOOLEAN") ? sd_value_bool(cJSON_IsTrue(v))
                    : !strcmp(type, "STRING")  ? sd_value_string(cJSON_GetStringValue(v))
                    : !strcmp(type, "CONDITIONING") ? encode(env, clip, str(in, "text"))
                                               : sd_value_float(cJSON_GetNumberValue(v));
    }
    int before = patch_count(model);
    sd_value *out = run(env, str(node, "node"), names, vals, n);
    nt_free_values(vals, n);
    /* a clone: the input MODEL keeps what it had */
    CHECK_MSG(patch_count(model) == before, "%s changed its input MODEL", str(node, "node"));
    CHECK_MSG(!out || patch_count(out) > before, "%s added no patch", str(node, "node"));
    return out;
}

static sd_value *empty_latent(const sd_env *env, const cJSON *s) {
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int((int64_t)num(s, "width")), sd_value_int((int64_t)num(s, "height")), sd_value_int(1)};
    sd_value *latent = run(env, "EmptyLatentImage", ln, lv, 3);
    nt_free_values(lv, 3);
    return latent;
}

static sd_tensor *samples_of(sd_value *res) {
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

static sd_tensor *ksampler_case(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    sd_value *model = sd_value_ref(ck[0]), *clip = ck[1];
    const cJSON *node;
    cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(c, "nodes")) {
        sd_value *m2 = patch_node(env, model, clip, node);
        sd_value_unref(model);
        model = m2;
        if (!m2) return NULL;
    }
    sd_value *pos = encode(env, clip, str(s, "positive")), *neg = encode(env, clip, str(s, "negative"));
    sd_value *latent = empty_latent(env, s);
    const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                        "latent_image", "denoise"};
    sd_value *kv[] = {model, sd_value_int((int64_t)num(s, "seed")), sd_value_int((int64_t)num(s, "steps")),
                      sd_value_float(num(s, "cfg")), sd_value_string(str(s, "sampler_name")),
                      sd_value_string(str(s, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    sd_value *res = pos && neg && latent ? run(env, "KSampler", kn, kv, 10) : NULL;
    for (int i = 1; i < 6; i++) sd_value_unref(kv[i]);
    sd_value_unref(kv[9]);
    sd_value_unref(model), sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(latent);
    return samples_of(res);
}

static sd_tensor *perpneg_guider_case(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings"), *g = cJSON_GetObjectItemCaseSensitive(c, "guider");
    sd_value *clip = ck[1];
    sd_value *pos = encode(env, clip, str(s, "positive")), *neg = encode(env, clip, str(s, "negative"));
    sd_value *empty = encode(env, clip, str(g, "empty"));
    const char *gn[] = {"model", "positive", "negative", "empty_conditioning", "cfg", "neg_scale"};
    sd_value *gv[] = {ck[0], pos, neg, empty, sd_value_float(num(g, "cfg")), sd_value_float(num(g, "neg_scale"))};
    sd_value *guider = pos && neg && empty ? run(env, "PerpNegGuider", gn, gv, 6) : NULL;
    sd_value_unref(gv[4]), sd_value_unref(gv[5]);
    sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(empty);
    const char *nn[] = {"noise_seed"};
    sd_value *nv[] = {sd_value_int((int64_t)num(s, "seed"))};
    sd_value *noise = run(env, "RandomNoise", nn, nv, 1);
    sd_value_unref(nv[0]);
    const char *sn[] = {"sampler_name"};
    sd_value *sv[] = {sd_value_string(str(s, "sampler_name"))};
    sd_value *sampler = run(env, "KSamplerSelect", sn, sv, 1);
    sd_value_unref(sv[0]);
    const char *bn[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *bv[] = {ck[0], sd_value_string(str(s, "scheduler")), sd_value_int((int64_t)num(s, "steps")),
                      sd_value_float(1.0)};
    sd_value *sigmas = run(env, "BasicScheduler", bn, bv, 4);
    sd_value_unref(bv[1]), sd_value_unref(bv[2]), sd_value_unref(bv[3]);
    sd_value *latent = empty_latent(env, s);
    const char *an[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
    sd_value *av[] = {noise, guider, sampler, sigmas, latent};
    sd_value *res = noise && guider && sampler && sigmas && latent ? run(env, "SamplerCustomAdvanced", an, av, 5) : NULL;
    nt_free_values(av, 5);
    return samples_of(res);
}

/* The key of a case's unpatched twin: its cfg and size. */
static double plain_key(const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    return num(s, "cfg") + 1000.0 * num(s, "width") + 1e6 * num(s, "height");
}

int main(void) {
    const char *dir = sd_golden_topic_dir("guidance_more");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const cJSON *c;
    int n_fresca = 0, n_run = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!strcmp(str(c, "kind"), "fresca")) { fresca_case(c); n_fresca++; }
        else n_run++;
    }
    CHECK(n_fresca > 0 && n_run > 0);

    const char *tokdir = sd_golden_tokenizer_dir();
    const char *ckpt = sd_golden_tiny_sd1("the sampling cases did not run");
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
    /* the unpatched latents, by cfg and size (the manifest lists each
     * before the cases that compare with it) */
    sd_tensor *plains[8] = {0};
    double plain_keys[8];
    int n_plain = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        const char *kind = str(c, "kind");
        if (!strcmp(kind, "fresca") || !ck[0]) continue;
        const char *id = str(c, "id");
        const double key = plain_key(c);
        const int guider = !strcmp(kind, "perpneg_guider");
        CHECK_MSG(guider || !strcmp(kind, "ksampler"), "%s: unknown case kind %s", id, kind);
        sd_tensor *want = ref_tensor(str(c, "latent"));
        sd_tensor *got = guider ? perpneg_guider_case(&env, ck, c) : ksampler_case(&env, ck, c);
        compare(id, got, want, num(c, "atol"), num(c, "rtol"));
        sd_tensor *plain = NULL;
        for (int i = 0; i < n_plain; i++)
            if (plain_keys[i] == key) plain = plains[i];
        const int patched = guider || cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "nodes")) > 0;
        if (!patched) {
            CHECK_MSG(!plain && n_plain < 8, "%s: a second unpatched case of its cfg and size", id);
            if (!plain && n_plain < 8) {
                plain_keys[n_plain] = key;
                plains[n_plain++] = sd_tensor_ref(got);
            }
        } else {
            CHECK_MSG(plain != NULL, "%s: no unpatched case of its cfg and size before it", id);
        }
        if (patched && plain && want) {
            /* the patch must show: the unpatched latent lies outside the tolerance */
            double mx = 0;
            long worst = -1;
            CHECK_MSG(!sd_test_allclose(plain, want, num(c, "atol"), num(c, "rtol"), &mx, &worst),
                      "%s: the unpatched latent is within the tolerance too", id);
        }
        sd_tensor_unref(want), sd_tensor_unref(got);
    }
    for (int i = 0; i < n_plain; i++) sd_tensor_unref(plains[i]);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
