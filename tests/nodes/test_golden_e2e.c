/* test_golden_e2e.c - the manifest's end-to-end txt2img cases through the
 * node functions: CheckpointLoaderSimple -> CLIPTextEncode x2 ->
 * EmptyLatentImage -> KSampler -> VAEDecode, compared with ComfyUI.
 *
 * Runs every manifest.json case whose component is "e2e". A "lora" setting
 * puts LoraLoader after the checkpoint loader, a "controlnet" setting
 * ControlNetLoader + the named apply node (hint = the case's
 * control.hint_image) before the sampler (a node missing from the registry
 * fails the case). Every case file the manifest lists must be present (an
 * absent one fails). The checkpoint is the manifest
 * model with a second text encoder ("clip_g") exactly when the case has
 * "pos.g.ids" tensors. Every non-input tensor of the case is compared at its
 * own tolerance (intermediates too); one the test cannot produce fails.
 * Data: SDFLOW_TESTDATA (default ../shared/testdata); tokenizer:
 * SDFLOW_TOKENIZER_DIR or <shared>/data/clip. Missing data: exit 77.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes_ctx.h"
#include "testutil.h"
#include "golden.h"

#define MAX_CAPTURE 128

typedef struct capture {
    char name[64];
    sd_tensor *t;
} capture;

typedef struct run_log {
    capture c[MAX_CAPTURE];
    int n;
    int step; /* sampler steps reported so far */
} run_log;

static void keep(run_log *l, const char *name, const sd_tensor *t) {
    if (l->n >= MAX_CAPTURE) return;
    snprintf(l->c[l->n].name, sizeof l->c[l->n].name, "%s", name);
    l->c[l->n].t = sd_tensor_clone(t);
    l->n++;
}

static sd_tensor *find(run_log *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->c[i].name, name) == 0) return l->c[i].t;
    return NULL;
}

static void on_start(void *ud, const float *sigmas, int n, const sd_tensor *noise,
                     const sd_tensor *x) {
    run_log *l = ud;
    sd_tensor *s = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0);
    memcpy(s->data, sigmas, (size_t)n * sizeof(float));
    keep(l, "sigmas", s);
    sd_tensor_unref(s);
    keep(l, "noise", noise);
    keep(l, "x_init", x);
}

static void on_step(void *ud, int step, int total, const sd_tensor *x, const sd_tensor *den) {
    run_log *l = ud;
    (void)total;
    char name[64];
    snprintf(name, sizeof name, "step%d.x", step);
    keep(l, name, x);
    snprintf(name, sizeof name, "step%d.denoised", step);
    keep(l, name, den);
    l->step = step + 1;
}

static void on_model(void *ud, int cond, float sigma, const sd_tensor *den) {
    run_log *l = ud;
    (void)sigma;
    char name[64];
    snprintf(name, sizeof name, "step%d.%s", l->step, cond ? "uncond_denoised" : "cond_denoised");
    if (!find(l, name)) keep(l, name, den); /* the first evaluation of a step */
}

/* y_expected_pos = the positive entry's y; y_used = the batch ComfyUI built
 * at step 0, in its order (uncond, cond). */
static void on_adm(void *ud, int cond, const sd_tensor *y) {
    run_log *l = ud;
    if (l->step != 0) return;
    if (cond == 0 && !find(l, "y_expected_pos")) keep(l, "y_expected_pos", y);
    if (cond == 1 && !find(l, "y.uncond")) keep(l, "y.uncond", y);
    sd_tensor *p = find(l, "y_expected_pos"), *u = find(l, "y.uncond");
    if (p && u && !find(l, "y_used")) {
        sd_tensor *both = sd_tensor_new4(SD_F32, 2, 2, p->shape[1], 0, 0);
        memcpy(both->data, u->data, u->nbytes);
        memcpy((char *)both->data + u->nbytes, p->data, p->nbytes);
        keep(l, "y_used", both);
        sd_tensor_unref(both);
    }
}

/* Run a node by class_type on inputs aligned with its def. */
static sd_status run_node(const sd_env *env, const char *type, sd_value *const *in, sd_value **out,
                          sd_error *err) {
    const sd_node_def *def = sd_registry_find(type);
    if (!def) return sd_error_set(err, SD_ERR_NOT_FOUND, "node %s not registered", type);
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_status rc = def->run(&ctx, in, out, err);
    sd_value_unref(ctx.ui);
    return rc;
}

/* Inputs for `type` by name (NULL-terminated name/value pairs); values are
 * borrowed. Runs the node; SD_ERR_NOT_FOUND when it is not registered. */
static sd_status run_named(const sd_env *env, const char *type, const char *const *names,
                           sd_value *const *vals, int n, sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static const cJSON *pick_model(const cJSON *models, int want_g) {
    const cJSON *m;
    cJSON_ArrayForEach(m, models) {
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        if (!cJSON_GetObjectItemCaseSensitive(cfg, "unet_config")) continue;
        if (!cJSON_GetObjectItemCaseSensitive(cfg, "clip_l")) continue;
        if (!!cJSON_GetObjectItemCaseSensitive(cfg, "clip_g") == want_g) return m;
    }
    return NULL;
}

static const char *setting_str(const cJSON *s, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, k));
}
static double setting_num(const cJSON *s, const char *k) {
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, k));
}

static void run_case(const cJSON *cs, const cJSON *models, const char *data, sd_env *env) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "id"));
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(cs, "settings");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(cs, "tensors");
    int want_g = cJSON_GetObjectItemCaseSensitive(tensors, "pos.g.ids") != NULL;
    const cJSON *model = pick_model(models, want_g);
    CHECK_MSG(model != NULL, "%s: no manifest model fits", id);
    if (!model) return;
    char ckpt[4096], gpath[4096];
    snprintf(ckpt, sizeof ckpt, "%s/%s", data,
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, "file")));
    snprintf(gpath, sizeof gpath, "%s/%s", data,
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "file")));
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(gpath, &g, &err), &err);
    if (!g) return;

    run_log log = {0};
    sd_value *v_name = sd_value_string(ckpt), *ck[3] = {0}, *pos = NULL, *neg = NULL,
             *latent = NULL, *result = NULL, *image = NULL;
    sd_status rc = run_node(env, "CheckpointLoaderSimple", &v_name, ck, &err);
    CHECK_OK(rc, &err);
    const cJSON *lora = cJSON_GetObjectItemCaseSensitive(settings, "lora");
    if (!rc && lora) {
        char lp[4096];
        snprintf(lp, sizeof lp, "%s/%s", data, setting_str(lora, "file"));
        const char *names[] = {"model", "clip", "lora_name", "strength_model", "strength_clip"};
        sd_value *vals[] = {ck[0], ck[1], sd_value_string(lp),
                            sd_value_float(setting_num(lora, "strength_model")),
                            sd_value_float(setting_num(lora, "strength_clip"))};
        sd_value *lo[2] = {0};
        rc = run_named(env, "LoraLoader", names, vals, 5, lo, &err);
        for (int i = 2; i < 5; i++) sd_value_unref(vals[i]);
        CHECK_OK(rc, &err);
        if (!rc) {
            sd_value_unref(ck[0]);
            sd_value_unref(ck[1]);
            ck[0] = lo[0];
            ck[1] = lo[1];
        }
    }
    if (!rc) {
        sd_value *in[2] = {sd_value_string(setting_str(settings, "positive")), ck[1]};
        CHECK_OK(rc = run_node(env, "CLIPTextEncode", in, &pos, &err), &err);
        sd_value_unref(in[0]);
        in[0] = sd_value_string(setting_str(settings, "negative"));
        if (!rc) CHECK_OK(rc = run_node(env, "CLIPTextEncode", in, &neg, &err), &err);
        sd_value_unref(in[0]);
    }
    if (!rc) {
        keep(&log, "pos.cond", sd_value_dict_tensor(sd_value_list_get(pos, 0), "cond"));
        keep(&log, "neg.cond", sd_value_dict_tensor(sd_value_list_get(neg, 0), "cond"));
        keep(&log, "pos.pooled", sd_value_dict_tensor(sd_value_list_get(pos, 0), "pooled_output"));
        keep(&log, "neg.pooled", sd_value_dict_tensor(sd_value_list_get(neg, 0), "pooled_output"));
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(settings, "controlnet");
        if (cn) {
            char cp[4096];
            snprintf(cp, sizeof cp, "%s/%s", data, setting_str(cn, "file"));
            sd_value *name = sd_value_string(cp), *net = NULL, *pn[2] = {0};
            sd_tensor *hint = sd_st_tensor_f32(g, "control.hint_image", &err);
            sd_value *hv = hint ? sd_value_tensor(hint) : NULL;
            sd_tensor_unref(hint);
            const char *ln[] = {"control_net_name"};
            rc = run_named(env, "ControlNetLoader", ln, &name, 1, &net, &err);
            const char *an[] = {"positive", "negative", "control_net", "image",
                                "strength", "start_percent", "end_percent"};
            sd_value *av[] = {pos, neg, net, hv, sd_value_float(setting_num(cn, "strength")),
                              sd_value_float(setting_num(cn, "start_percent")),
                              sd_value_float(setting_num(cn, "end_percent"))};
            if (!rc) rc = run_named(env, setting_str(cn, "node"), an, av, 7, pn, &err);
            for (int i = 4; i < 7; i++) sd_value_unref(av[i]);
            sd_value_unref(name);
            sd_value_unref(net);
            sd_value_unref(hv);
            CHECK_OK(rc, &err);
            if (!rc) {
                sd_value_unref(pos);
                sd_value_unref(neg);
                pos = pn[0];
                neg = pn[1];
            }
        }
        sd_value *in[3] = {sd_value_int((int64_t)setting_num(settings, "width")),
                           sd_value_int((int64_t)setting_num(settings, "height")),
                           sd_value_int(1)};
        CHECK_OK(rc = run_node(env, "EmptyLatentImage", in, &latent, &err), &err);
        for (int i = 0; i < 3; i++) sd_value_unref(in[i]);
    }
    if (!rc) {
        sd_ksample_hooks hooks = {on_start, on_step, on_model, on_adm, &log};
        sd_ksample_args a;
        sd_ksample_args_init(&a);
        sd_model_ref *mr = sd_value_as_handle(ck[0], &sd_handle_model);
        a.ckpt = mr->ckpt;
        a.loras = mr->loras;
        a.seed = (uint64_t)setting_num(settings, "seed");
        a.steps = (int)setting_num(settings, "steps");
        a.cfg = setting_num(settings, "cfg");
        a.sampler_name = setting_str(settings, "sampler");
        a.scheduler = setting_str(settings, "scheduler");
        a.positive = pos;
        a.negative = neg;
        a.latent = latent;
        a.hooks = &hooks;
        sd_node_ctx ctx = {.env = env, .node_id = "3", .class_type = "KSampler"};
        CHECK_OK(rc = sd_nodes_common_ksampler(&ctx, &a, &result, &err), &err);
    }
    if (!rc) {
        keep(&log, "latent_out", sd_value_dict_tensor(result, "samples"));
        sd_value *in[2] = {result, ck[2]};
        CHECK_OK(rc = run_node(env, "VAEDecode", in, &image, &err), &err);
        if (!rc) keep(&log, "image", sd_value_as_tensor(image));
    }

    /* compare every tensor the case lists, except the inputs we do not feed */
    const cJSON *t;
    int compared = 0;
    cJSON_ArrayForEach(t, tensors) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "role"));
        const char *name = t->string;
        int is_input = role && strcmp(role, "input") == 0;
        sd_tensor *act = find(&log, name);
        if (is_input && (!act || strstr(name, ".ids"))) continue; /* token ids: CLIP's test */
        CHECK_MSG(act != NULL || rc, "%s: tensor %s (%s) not produced", id, name, role);
        if (!act) continue;
        sd_tensor *exp = sd_st_tensor_f32(g, name, &err);
        CHECK_OK(exp ? SD_OK : err.code, &err);
        if (!exp) continue;
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(t, "tolerance");
        if (!tol) tol = cJSON_GetObjectItemCaseSensitive(cs, "tolerance");
        double atol = setting_num(tol, "atol"), rtol = setting_num(tol, "rtol");
        CHECK_MSG(sd_tensor_numel(act) == sd_tensor_numel(exp), "%s %s: %lld values, expected %lld",
                  id, name, (long long)sd_tensor_numel(act), (long long)sd_tensor_numel(exp));
        if (sd_tensor_numel(act) == sd_tensor_numel(exp)) {
            sd_tensor *a2 = sd_tensor_reshape(act, exp->ndim, exp->shape);
            double max_abs = 0;
            long worst = 0;
            int ok = sd_test_allclose(a2, exp, atol, rtol, &max_abs, &worst);
            CHECK_MSG(ok, "%s %s: max |diff| %.3g at %ld (atol %g rtol %g)", id, name, max_abs,
                      worst, atol, rtol);
            printf("  %s %-24s max|diff| %.3g (atol %g, rtol %g)%s\n", id, name, max_abs, atol,
                   rtol, ok ? "" : "  FAIL");
            sd_tensor_unref(a2);
            compared++;
        }
        sd_tensor_unref(exp);
    }
    printf("%s: %d tensors compared\n", id, compared);
    for (int i = 0; i < log.n; i++) sd_tensor_unref(log.c[i].t);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_value_unref(v_name);
    sd_value_unref(pos);
    sd_value_unref(neg);
    sd_value_unref(latent);
    sd_value_unref(result);
    sd_value_unref(image);
    sd_st_close(g);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(void) {
    const char *data = sd_golden_dir();
    char tokdir[4096];
    snprintf(tokdir, sizeof tokdir, "%s", sd_golden_tokenizer_dir());
    if (!is_dir(tokdir)) sd_test_skip("no tokenizer directory %s", tokdir);
    cJSON *man = sd_golden_manifest(data);

    sd_error err;
    sd_error_clear(&err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    if (!sd_golden_e2e_comparable())
        sd_test_skip_unsupported("end-to-end sampling is not compared in bf16 (tests/golden.h)");
    sd_backend *be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    const cJSON *models = cJSON_GetObjectItemCaseSensitive(man, "models");
    const cJSON *cs;
    int ran = 0;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!sd_golden_case_is(cs, "e2e")) continue;
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "id"));
        char gp[4096];
        snprintf(gp, sizeof gp, "%s/%s", data,
                 cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "file")));
        struct stat st;
        if (stat(gp, &st) != 0) {
            CHECK_MSG(0, "%s: the manifest lists golden file %s, which is absent", id, gp);
            continue;
        }
        run_case(cs, models, data, &env);
        ran++;
    }
    if (!ran && !sd_golden_require_cases(man, data, "e2e"))
        sd_test_skip("the manifest under %s lists no e2e case", data);
    CHECK(sd_model_store_count(store) >= 1);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    cJSON_Delete(man);
    return sd_test_finish();
}
