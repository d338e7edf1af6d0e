/* test_golden_tome.c - TomePatchModel (issue 24, token merging) against
 * ComfyUI (tests/data/tome, gen_tome_ref.py): CheckpointLoaderSimple (the
 * shared tiny SD1) -> CLIPTextEncode x2, EmptyLatentImage, the case's
 * TomePatchModel -> KSampler through the node functions, the latent against
 * ComfyUI's nodes.common_ksampler with its own TomePatchModel (the merge's
 * destinations drawn from the seeded generator as torch's randint). Every
 * patched case must differ from the unpatched one of its settings by more
 * than the tolerance, and the node must leave its input MODEL as it was.
 * Which tokens merge is decided by comparisons of float32 scores: the
 * manifest's score_margin (the smallest gap of a case) must exceed what
 * float32 rounding of a cosine similarity can move (a dot product of two
 * unit vectors of the tiny model's 32 channels: 32 * 2^-24 = 1.9e-6; 2e-6),
 * else the case
 * could not tell a rounding from a bug. Also: ratio 0 is the unpatched run
 * bit for bit, and two ToMe patches on one MODEL are refused at the run.
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
#include "models/checkpoint/checkpoint.h"
#include "models/unet/unet.h"
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

/* The patches a MODEL carries (zeroed when it is no MODEL). */
static sd_model_patches patches_of(const sd_value *m) {
    sd_model_patches p;
    memset(&p, 0, sizeof p);
    sd_model_ref *r = m ? sd_value_as_handle(m, &sd_handle_model) : NULL;
    if (r) memcpy(&p, &r->patches, sizeof p);
    return p;
}

/* One patch node of the manifest on model (a MODEL, or a CLIP for nodes "on"
 * "clip"): its inputs as the manifest types them. */
static sd_value *patch_node(const sd_env *env, sd_value *model, const cJSON *node) {
    const char *names[16];
    sd_value *vals[16];
    int n = 0;
    const char *on = str(node, "on");
    names[n] = on && !strcmp(on, "clip") ? "clip" : "model";
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
                                               : sd_value_float(cJSON_GetNumberValue(v));
    }
    sd_model_patches before = patches_of(model);
    sd_value *out = run(env, str(node, "node"), names, vals, n);
    nt_free_values(vals, n);
    /* a clone: the input MODEL keeps what it had */
    sd_model_patches after = patches_of(model), got = patches_of(out);
    CHECK_MSG(!memcmp(&after, &before, sizeof before), "%s changed its input MODEL", str(node, "node"));
    CHECK_MSG(!out || memcmp(&got, &before, sizeof before), "%s added no patch", str(node, "node"));
    return out;
}

static sd_tensor *ksampler_case(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    sd_value *model = sd_value_ref(ck[0]), *clip = sd_value_ref(ck[1]);
    const cJSON *node;
    cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(c, "nodes")) {
        const char *on = str(node, "on");
        sd_value **h = on && !strcmp(on, "clip") ? &clip : &model;
        sd_value *m2 = patch_node(env, *h, node);
        sd_value_unref(*h);
        *h = m2;
        if (!m2) {
            sd_value_unref(model), sd_value_unref(clip);
            return NULL;
        }
    }
    const char *tn[] = {"clip", "text"};
    sd_value *tp[] = {clip, sd_value_string(str(s, "positive"))}, *tg[] = {clip, sd_value_string(str(s, "negative"))};
    sd_value *pos = run(env, "CLIPTextEncode", tn, tp, 2), *neg = run(env, "CLIPTextEncode", tn, tg, 2);
    sd_value_unref(tp[1]), sd_value_unref(tg[1]);
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int((int64_t)num(s, "width")), sd_value_int((int64_t)num(s, "height")), sd_value_int(1)};
    sd_value *latent = run(env, "EmptyLatentImage", ln, lv, 3);
    nt_free_values(lv, 3);
    const char *mask_name = str(c, "noise_mask");
    if (mask_name && latent) { /* SetLatentNoiseMask with the stored mask */
        sd_tensor *mk = ref_tensor(mask_name);
        const char *mn[] = {"samples", "mask"};
        sd_value *mv[] = {latent, mk ? sd_value_tensor(mk) : NULL};
        sd_value *masked = mv[1] ? run(env, "SetLatentNoiseMask", mn, mv, 2) : NULL;
        sd_value_unref(mv[1]);
        sd_tensor_unref(mk);
        sd_value_unref(latent);
        latent = masked;
    }
    const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                        "latent_image", "denoise"};
    sd_value *kv[] = {model, sd_value_int((int64_t)num(s, "seed")), sd_value_int((int64_t)num(s, "steps")),
                      sd_value_float(num(s, "cfg")), sd_value_string(str(s, "sampler_name")),
                      sd_value_string(str(s, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    sd_value *res = pos && neg && latent ? run(env, "KSampler", kn, kv, 10) : NULL;
    for (int i = 1; i < 6; i++) sd_value_unref(kv[i]);
    sd_value_unref(kv[9]);
    sd_value_unref(model), sd_value_unref(clip), sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(latent);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

/* What sdflow refuses where ComfyUI's chained attn1 patches would not give
 * one ToMe's result: ToMe twice, or beside HyperTile, on one attention. */
static sd_status run_status(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals,
                            int n, sd_value **out) {
    sd_node_ctx ctx = {.env = env, .node_id = "9", .class_type = type};
    sd_value *o[8] = {0};
    sd_error err;
    sd_status rc = nt_run_named(&ctx, names, vals, n, o, &err);
    for (int i = 1; i < 8; i++) sd_value_unref(o[i]);
    if (out) *out = o[0];
    else sd_value_unref(o[0]);
    return rc;
}

static void refusals(const sd_env *env, sd_value *const ck[3]) {
    const char *tn[] = {"model", "ratio"};
    sd_value *tv[] = {ck[0], sd_value_float(0.5)}, *m1 = NULL, *m2 = NULL;
    CHECK(run_status(env, "TomePatchModel", tn, tv, 2, &m1) == SD_OK);
    sd_value *tv2[] = {m1, tv[1]};
    CHECK(m1 && run_status(env, "TomePatchModel", tn, tv2, 2, &m2) == SD_OK);
    sd_value_unref(tv[1]);
    sd_value *bad[] = {ck[0], sd_value_float(1.5)};
    CHECK(run_status(env, "TomePatchModel", tn, bad, 2, NULL) == SD_ERR_INVALID);
    sd_value_unref(bad[1]);
    const char *cn[] = {"clip", "text"};
    sd_value *cv[] = {ck[1], sd_value_string("x")}, *cond = NULL;
    CHECK(run_status(env, "CLIPTextEncode", cn, cv, 2, &cond) == SD_OK);
    sd_value_unref(cv[1]);
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int(64), sd_value_int(64), sd_value_int(1)}, *lat = NULL;
    CHECK(run_status(env, "EmptyLatentImage", ln, lv, 3, &lat) == SD_OK);
    nt_free_values(lv, 3);
    const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                        "latent_image", "denoise"};
    sd_value *kv[] = {m2, sd_value_int(1), sd_value_int(1), sd_value_float(1.0), sd_value_string("euler"),
                      sd_value_string("normal"), cond, cond, lat, sd_value_float(1.0)};
    CHECK(m2 && cond && lat && run_status(env, "KSampler", kn, kv, 10, NULL) == SD_ERR_UNSUPPORTED);
    /* ratio 0 merges nothing: the unpatched latent, bit for bit (the same computation) */
    sd_value *z[] = {ck[0], sd_value_float(0.0)}, *m0 = NULL, *a = NULL, *b = NULL;
    CHECK(run_status(env, "TomePatchModel", tn, z, 2, &m0) == SD_OK);
    sd_value_unref(z[1]);
    kv[0] = ck[0];
    CHECK(cond && lat && run_status(env, "KSampler", kn, kv, 10, &a) == SD_OK);
    kv[0] = m0;
    CHECK(m0 && cond && lat && run_status(env, "KSampler", kn, kv, 10, &b) == SD_OK);
    sd_tensor *ta = a ? sd_value_dict_tensor(a, "samples") : NULL, *tb = b ? sd_value_dict_tensor(b, "samples") : NULL;
    CHECK(ta && tb && ta->nbytes == tb->nbytes && !memcmp(ta->data, tb->data, ta->nbytes));
    for (int i = 1; i < 6; i++) sd_value_unref(kv[i]);
    sd_value_unref(kv[9]);
    sd_value_unref(m0), sd_value_unref(a), sd_value_unref(b);
    sd_value_unref(m1), sd_value_unref(m2), sd_value_unref(cond), sd_value_unref(lat);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("tome");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const cJSON *c;
    int n_ks = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) n_ks++;
    CHECK(n_ks > 0);

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
    /* the unpatched latents, by settings (the manifest lists each before
     * the patched cases with the same settings) */
    sd_tensor *plains[8] = {0};
    const cJSON *plain_settings[8];
    int n_plain = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!ck[0]) continue;
        const char *id = str(c, "id");
        const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
        sd_tensor *want = ref_tensor(str(c, "latent")), *got = ksampler_case(&env, ck, c);
        compare(id, got, want, num(c, "atol"), num(c, "rtol"));
        if (cJSON_GetObjectItemCaseSensitive(c, "score_margin"))
            CHECK_MSG(num(c, "score_margin") > 2e-6, "%s: score margin %g is within float32 rounding", id,
                      num(c, "score_margin"));
        sd_tensor *plain = NULL;
        for (int i = 0; i < n_plain; i++)
            if (cJSON_Compare(plain_settings[i], settings, 1)) plain = plains[i];
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "nodes")) == 0) {
            CHECK_MSG(!plain && n_plain < 8, "%s: a second unpatched case with the same settings", id);
            if (!plain && n_plain < 8 && got) {
                plain_settings[n_plain] = settings;
                plains[n_plain++] = sd_tensor_ref(got);
            }
        } else {
            CHECK_MSG(plain != NULL, "%s: no unpatched case with its settings before it", id);
        }
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "nodes")) > 0 && plain && want) {
            /* the patch must show: the unpatched latent lies outside the tolerance */
            double mx = 0;
            long worst = -1;
            CHECK_MSG(!sd_test_allclose(plain, want, num(c, "atol"), num(c, "rtol"), &mx, &worst),
                      "%s: the unpatched latent is within the tolerance too", id);
        }
        sd_tensor_unref(want), sd_tensor_unref(got);
    }
    for (int i = 0; i < n_plain; i++) sd_tensor_unref(plains[i]);
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
