/* test_golden_hypernetwork.c - HypernetworkLoader against ComfyUI
 * (tests/data/hypernetwork, gen_hypernetwork_ref.py), on the shared tiny SD1
 * checkpoint:
 *   "unet" cases: the MODEL patched by the case's hypernetworks in order
 *     (HypernetworkLoader through the node function), the UNet forward with
 *     its patches on the stored x, timesteps and context, against ComfyUI's
 *     diffusion_model forward with its transformer_options. Every patched
 *     case must differ from the unpatched one by more than the tolerance
 *     (a patch that is not applied fails), except a "noop" case (a
 *     .safetensors file: no widths in ComfyUI), whose MODEL must come back
 *     unpatched;
 *   "ksampler" cases: CLIPTextEncode x2, EmptyLatentImage, the patched MODEL
 *     -> KSampler, against ComfyUI's nodes.common_ksampler (one with
 *     PerturbedAttentionGuidance after the hypernetwork: PAG's replaced
 *     self-attention reads the patched value input);
 *   "error" cases: the files the node refuses, each with its code, the
 *     file's name and what the manifest says the message holds, on the
 *     hypernetwork_name input;
 * and: the probe validation calls takes every listed file and refuses the
 * error cases as the node does; the node leaves its input MODEL as it was, a truncated file and a
 * missing one are errors naming the file, the hypernetwork outlives the
 * node's own reference (MODEL values hold it).
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
#include "models/unet/hypernet.h"
#include "models/unet/unet.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;
static char dir[4096];

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k)); }

static sd_tensor *ref_tensor(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s", name);
    return t;
}

static int compare(const char *id, const sd_tensor *got, const sd_tensor *want, double atol, double rtol) {
    double mx = 0;
    long worst = -1;
    int ok = got && want && sd_test_allclose(got, want, atol, rtol, &mx, &worst);
    CHECK_MSG(ok, "%s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", id, mx, worst, atol, rtol);
    printf("  %s: max |diff| %g (atol %g rtol %g)\n", id, mx, atol, rtol);
    return ok;
}

static sd_status run_node(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                          sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "5", .class_type = type};
    sd_value *o[8] = {0};
    sd_status rc = nt_run_named(&ctx, names, vals, n, o, err);
    for (int i = 1; i < 8; i++) sd_value_unref(o[i]);
    *out = o[0];
    return rc;
}

static sd_value *run(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n) {
    sd_error err;
    sd_value *out = NULL;
    sd_status rc = run_node(env, type, names, vals, n, &out, &err);
    CHECK_MSG(rc == SD_OK, "%s failed: %s", type, err.msg);
    return out;
}

/* HypernetworkLoader on model with <dir>/file at strength. */
static sd_status hypernet(const sd_env *env, sd_value *model, const char *file, double strength, sd_value **out,
                          sd_error *err) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    const char *names[] = {"model", "hypernetwork_name", "strength"};
    sd_value *vals[] = {model, sd_value_string(path), sd_value_float(strength)};
    sd_status rc = run_node(env, "HypernetworkLoader", names, vals, 3, out, err);
    sd_value_unref(vals[1]), sd_value_unref(vals[2]);
    return rc;
}

static sd_model_patches patches_of(const sd_value *m) {
    sd_model_patches p;
    memset(&p, 0, sizeof p);
    sd_model_ref *r = m ? sd_value_as_handle(m, &sd_handle_model) : NULL;
    if (r) memcpy(&p, &r->patches, sizeof p);
    return p;
}

/* model with the case's "patches" applied in order (a new reference). */
static sd_value *patched(const sd_env *env, sd_value *model0, const cJSON *c) {
    sd_value *model = sd_value_ref(model0);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(c, "patches")) {
        sd_model_patches before = patches_of(model);
        sd_value *m2 = NULL;
        sd_error err;
        if (str(p, "node")) { /* another patch node in the chain (PerturbedAttentionGuidance, scale) */
            const char *names[] = {"model", "scale"};
            sd_value *vals[] = {model, sd_value_float(num(p, "scale"))};
            m2 = run(env, str(p, "node"), names, vals, 2);
            sd_value_unref(vals[1]);
            sd_value_unref(model);
            model = m2;
            if (!model) return NULL;
            continue;
        }
        sd_status rc = hypernet(env, model, str(p, "file"), num(p, "strength"), &m2, &err);
        CHECK_MSG(rc == SD_OK, "%s: HypernetworkLoader %s: %s", str(c, "id"), str(p, "file"), err.msg);
        sd_model_patches after = patches_of(model), got = patches_of(m2);
        CHECK_MSG(!memcmp(&after, &before, sizeof before), "HypernetworkLoader changed its input MODEL");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "noop")))
            CHECK_MSG(m2 && !memcmp(&got, &before, sizeof before), "%s: a file without widths patched the MODEL",
                      str(c, "id"));
        else
            CHECK_MSG(m2 && got.unet.n == before.unet.n + 1, "%s: HypernetworkLoader added no patch", str(c, "id"));
        sd_value_unref(model);
        model = m2;
        if (!model) return NULL;
    }
    return model;
}

static sd_bt *upload(sd_backend *be, const char *name) {
    sd_tensor *t = ref_tensor(name);
    sd_bt *b = t ? sd_bt_from_host(be, t, SD_F32) : NULL;
    sd_tensor_unref(t);
    return b;
}

static sd_tensor *unet_case(const sd_env *env, sd_value *model0, const cJSON *c) {
    sd_value *model = patched(env, model0, c);
    sd_model_ref *r = model ? sd_value_as_handle(model, &sd_handle_model) : NULL;
    sd_unet *u = NULL;
    sd_error err;
    sd_tensor *res = NULL;
    if (r) CHECK_OK(sd_nodes_model_unet(r, &u, &err), &err);
    sd_backend *be = (sd_backend *)env->backend;
    sd_bt *x = upload(be, str(c, "x")), *ctx = upload(be, str(c, "context")), *out = NULL;
    sd_tensor *ts = ref_tensor(str(c, "timesteps"));
    if (u && x && ctx && ts) {
        sd_unet_control control = {.patches = &r->patches.unet};
        CHECK_OK(sd_unet_forward(u, x, sd_tensor_f32(ts), ctx, NULL, &control, &out, &err), &err);
        if (out) res = sd_bt_to_host(out);
    }
    sd_bt_free(out), sd_bt_free(x), sd_bt_free(ctx);
    sd_tensor_unref(ts);
    sd_value_unref(model);
    return res;
}

static sd_tensor *ksampler_case(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    sd_value *model = patched(env, ck[0], c);
    if (!model) return NULL;
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
                      sd_value_float(num(s, "cfg")), sd_value_string(str(s, "sampler_name")),
                      sd_value_string(str(s, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    sd_value *res = pos && neg && latent ? run(env, "KSampler", kn, kv, 10) : NULL;
    for (int i = 1; i < 6; i++) sd_value_unref(kv[i]);
    sd_value_unref(kv[9]);
    sd_value_unref(model), sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(latent);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

static sd_status code_of(const char *name) {
    return !strcmp(name, "UNSUPPORTED") ? SD_ERR_UNSUPPORTED
           : !strcmp(name, "FORMAT")    ? SD_ERR_FORMAT
           : !strcmp(name, "NOT_FOUND") ? SD_ERR_NOT_FOUND
                                        : SD_ERR_INVALID;
}

/* The node refuses file with `code`, its message naming the file and each
 * of `has`, on the hypernetwork_name input. */
static void refused(const sd_env *env, sd_value *model, const char *id, const char *file, sd_status code,
                    const cJSON *has) {
    sd_value *out = NULL;
    sd_error err;
    sd_status rc = hypernet(env, model, file, 1.0, &out, &err);
    CHECK_MSG(rc == code, "%s: code %d, want %d (%s)", id, rc, code, rc ? err.msg : "accepted");
    CHECK_MSG(out == NULL, "%s: an output despite the error", id);
    sd_value_unref(out);
    if (!rc) return;
    /* the node's file_probe (validation) refuses it the same way */
    if (code != SD_ERR_NOT_FOUND) {
        char path[4400];
        sd_error perr;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        CHECK_MSG(sd_hypernet_probe_file(path, &perr) == code && !strcmp(perr.msg, err.msg),
                  "%s: the probe says %s", id, perr.msg);
    }
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    CHECK_MSG(strstr(err.msg, base) != NULL, "%s: the message does not name the file: %s", id, err.msg);
    CHECK_MSG(!strcmp(err.input, "hypernetwork_name"), "%s: error on input '%s'", id, err.input);
    const cJSON *h;
    cJSON_ArrayForEach(h, has)
        CHECK_MSG(strstr(err.msg, cJSON_GetStringValue(h)) != NULL, "%s: '%s' not in the message: %s", id,
                  cJSON_GetStringValue(h), err.msg);
    printf("  %s: %s\n", id, err.msg);
}

/* A truncated copy of a hypernetwork and a missing file. */
static void damaged(const sd_env *env, sd_value *model, const char *file) {
    char src[4400], tmp[4400];
    snprintf(src, sizeof src, "%s/%s", dir, file);
    snprintf(tmp, sizeof tmp, "%s/truncated.pt", sd_test_tmpdir("golden_hypernetwork"));
    FILE *in = fopen(src, "rb"), *o = fopen(tmp, "wb");
    CHECK(in && o);
    if (in && o) {
        char buf[65536];
        size_t n = fread(buf, 1, sizeof buf, in);
        fwrite(buf, 1, n * 2 / 3, o);
    }
    if (in) fclose(in);
    if (o) fclose(o);
    sd_value *out = NULL;
    sd_error err;
    const char *names[] = {"model", "hypernetwork_name", "strength"};
    sd_value *vals[] = {model, sd_value_string(tmp), sd_value_float(1.0)};
    sd_status rc = run_node(env, "HypernetworkLoader", names, vals, 3, &out, &err);
    CHECK_MSG(rc == SD_ERR_FORMAT && strstr(err.msg, "truncated.pt"), "truncated file: %d %s", rc, err.msg);
    sd_value_unref(out);
    sd_value_unref(vals[1]);
    refused(env, model, "missing", "no-such-hypernetwork.pt", SD_ERR_NOT_FOUND, NULL);
    sd_value_unref(vals[2]);
}

int main(void) {
    char path[4300];
    snprintf(dir, sizeof dir, "%s", sd_golden_topic_dir("hypernetwork"));
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) n_cases++;
    CHECK(n_cases > 0);
    /* every file the manifest lists is there */
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "hypernetworks")) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, str(c, "file"));
        CHECK_MSG(stat(path, &st) == 0, "missing %s", path);
        CHECK_OK(sd_hypernet_probe_file(path, &err), &err); /* validation takes it */
    }

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

    sd_tensor *plain[2] = {0}; /* the unpatched unet and ksampler results */
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        const char *id = str(c, "id"), *kind = str(c, "kind");
        if (!ck[0]) break;
        if (!strcmp(kind, "error")) {
            refused(&env, ck[0], id, str(c, "file"), code_of(str(c, "code")),
                    cJSON_GetObjectItemCaseSensitive(c, "message_has"));
            continue;
        }
        int k = !strcmp(kind, "ksampler");
        CHECK_MSG(k || !strcmp(kind, "unet"), "%s: unknown kind %s", id, kind);
        sd_tensor *want = ref_tensor(str(c, k ? "latent" : "out"));
        sd_tensor *got = k ? ksampler_case(&env, ck, c) : unet_case(&env, ck[0], c);
        compare(id, got, want, num(c, "atol"), num(c, "rtol"));
        int n_patches = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "patches"));
        if (n_patches == 0) {
            CHECK_MSG(!plain[k], "%s: a second unpatched %s case", id, kind);
            if (!plain[k]) plain[k] = sd_tensor_ref(got);
        } else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "noop"))) {
            /* the patch must show: the unpatched result lies outside the tolerance */
            double mx = 0;
            long worst = -1;
            CHECK_MSG(plain[k] != NULL, "%s: no unpatched case before it", id);
            CHECK_MSG(!plain[k] || !sd_test_allclose(plain[k], want, num(c, "atol"), num(c, "rtol"), &mx, &worst),
                      "%s: the unpatched result is within the tolerance too", id);
        }
        sd_tensor_unref(want), sd_tensor_unref(got);
    }
    sd_tensor_unref(plain[0]), sd_tensor_unref(plain[1]);
    if (ck[0]) damaged(&env, ck[0], "relu_ln.pt");
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
