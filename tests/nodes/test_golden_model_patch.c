/* test_golden_model_patch.c - the MODEL / CLIP patch nodes (FreeU, FreeU_V2,
 * UNetSelfAttentionMultiply, UNetCrossAttentionMultiply, CLIPAttentionMultiply, ...)
 * against ComfyUI (tests/data/model_patch, gen_model_patch_ref.py):
 *   "fourier" cases: sd_unet_fourier_filter against ComfyUI's
 *     nodes_freelunch.Fourier_filter on the stored x;
 *   "ksampler" cases: CheckpointLoaderSimple (the shared tiny SD1) ->
 *     CLIPTextEncode x2, EmptyLatentImage, the case's patch nodes in order
 *     (on the MODEL, or on the CLIP before the prompts are encoded) ->
 *     KSampler (on a SetLatentNoiseMask latent for cases with a "noise_mask")
 *     through the node functions, the latent against ComfyUI's
 *     nodes.common_ksampler with the model its own nodes patched. Every
 *     patched case must differ from the unpatched one by more than the
 *     tolerance (a patch that is not applied fails), and each node must
 *     leave its input as it was (one more patch on the output only).
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
#include "models/unet/unet.h"
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

static void fourier_case(const cJSON *c) {
    const char *id = str(c, "id");
    sd_tensor *x0 = ref_tensor(str(c, "x")), *want = ref_tensor(str(c, "out"));
    sd_tensor *x = x0 ? sd_tensor_clone(x0) : NULL; /* the file's view is read-only */
    sd_tensor_unref(x0);
    sd_error err;
    if (x) {
        CHECK(x->ndim == 4);
        CHECK_OK(sd_unet_fourier_filter(sd_tensor_f32(x), x->shape, num(c, "scale"), &err), &err);
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
                   r->patches.diff_diff +
                   (int)sd_lora_stack_count(r->loras)
             : -1;
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
    int before = patch_count(model);
    sd_value *out = run(env, str(node, "node"), names, vals, n);
    nt_free_values(vals, n);
    /* a clone: the input MODEL keeps what it had */
    CHECK_MSG(patch_count(model) == before, "%s changed its input MODEL", str(node, "node"));
    CHECK_MSG(!out || patch_count(out) > before, "%s added no patch", str(node, "node"));
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

int main(void) {
    const char *dir = sd_golden_topic_dir("model_patch");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const cJSON *c;
    int n_fourier = 0, n_ks = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!strcmp(str(c, "kind"), "fourier")) { fourier_case(c); n_fourier++; }
        else n_ks++;
    }
    CHECK(n_fourier > 0 && n_ks > 0);

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
    /* the unpatched latents, by cfg (the manifest lists each before the
     * patched cases at that cfg) */
    sd_tensor *plains[8] = {0};
    double plain_cfg[8];
    int n_plain = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (strcmp(str(c, "kind"), "ksampler") || !ck[0]) continue;
        const char *id = str(c, "id");
        /* the plain case of the same cfg and masking */
        double cfg = num(cJSON_GetObjectItemCaseSensitive(c, "settings"), "cfg") + (str(c, "noise_mask") ? 1000.0 : 0.0);
        sd_tensor *want = ref_tensor(str(c, "latent")), *got = ksampler_case(&env, ck, c);
        compare(id, got, want, num(c, "atol"), num(c, "rtol"));
        sd_tensor *plain = NULL;
        for (int i = 0; i < n_plain; i++)
            if (plain_cfg[i] == cfg) plain = plains[i];
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "nodes")) == 0) {
            CHECK_MSG(!plain && n_plain < 8, "%s: a second unpatched case at cfg %g", id, cfg);
            if (!plain && n_plain < 8) {
                plain_cfg[n_plain] = cfg;
                plains[n_plain++] = sd_tensor_ref(got);
            }
        } else {
            CHECK_MSG(plain != NULL, "%s: no unpatched case at cfg %g before it", id, cfg);
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
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
