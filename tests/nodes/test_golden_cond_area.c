/* test_golden_cond_area.c - area, mask, strength and timestep-range
 * conditioning against ComfyUI (tests/data/cond_area, gen_cond_area_ref.py).
 * Every case is a graph of conditioning nodes the manifest lists (base
 * steps, then the case's), run here through the same node types on the
 * shared tiny SD1 checkpoint; its positive and negative go to KSampler
 * (sd_nodes_common_ksampler with the case's settings). Compared: the first
 * model evaluation's positive and negative x0 predictions (ComfyUI's first
 * calc_cond_batch) and the output latent. Each case's latent must also lie
 * outside the tolerance of the "plain" case's, so a key the sampler ignores
 * fails. "node" cases run ConditioningConcat / ConditioningAverage on
 * stored conditionings and compare every output tensor.
 * Needs the tiny SD1 checkpoint and a tokenizer (SDFLOW_TOKENIZER_DIR or
 * <shared>/data/clip): without them, exit 77. */
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
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(item(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }

static sd_tensor *ref_tensor(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s", name);
    return t;
}

static int compare(const char *id, const char *what, const sd_tensor *got, const sd_tensor *want, double atol,
                   double rtol) {
    double mx = 0;
    long worst = -1;
    int ok = got && want && sd_test_allclose(got, want, atol, rtol, &mx, &worst);
    CHECK_MSG(ok, "%s %s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", id, what, mx, worst,
              atol, rtol);
    printf("  %s %-14s max |diff| %g (atol %g rtol %g)\n", id, what, mx, atol, rtol);
    return ok;
}

/* ---- the graph ------------------------------------------------------------------------------ */

typedef struct outs {
    const char *id[32];
    sd_value *v[32];
    int n;
} outs;

static sd_value *find_out(const outs *o, const char *id) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->id[i], id)) return o->v[i];
    return NULL;
}

/* An input as the manifest gives it: a new reference. */
static sd_value *input_value(const outs *o, const cJSON *v) {
    if (item(v, "ref")) {
        sd_value *r = find_out(o, str(v, "ref"));
        CHECK_MSG(r != NULL, "step %s not run", str(v, "ref"));
        return r ? sd_value_ref(r) : NULL;
    }
    if (item(v, "tensor")) {
        sd_tensor *t = ref_tensor(str(v, "tensor"));
        return t ? nt_tensor_value(t) : NULL;
    }
    const char *kind = str(v, "kind");
    const cJSON *val = item(v, "value");
    if (!strcmp(kind, "INT")) return sd_value_int((int64_t)cJSON_GetNumberValue(val));
    if (!strcmp(kind, "FLOAT")) return sd_value_float(cJSON_GetNumberValue(val));
    if (!strcmp(kind, "BOOLEAN")) return sd_value_bool(cJSON_IsTrue(val));
    return sd_value_string(cJSON_GetStringValue(val));
}

static int run_step(const sd_env *env, sd_value *clip, outs *o, const cJSON *s) {
    const char *names[8];
    sd_value *vals[8] = {0};
    int n = 0, owned[8];
    const cJSON *in;
    const char *type = str(s, "node");
    if (!strcmp(type, "CLIPTextEncode")) {
        names[n] = "clip", vals[n] = clip, owned[n++] = 0;
    }
    cJSON_ArrayForEach(in, item(s, "inputs")) {
        if (n == 8) break;
        names[n] = in->string, vals[n] = input_value(o, in), owned[n++] = 1;
    }
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_error err;
    sd_value *r = nt_run1_named(&ctx, names, vals, n, owned, &err);
    if (!r || o->n == 32) {
        sd_value_unref(r);
        return -1;
    }
    o->id[o->n] = str(s, "id");
    o->v[o->n++] = r;
    return 0;
}

/* ---- KSampler with the first evaluation recorded -------------------------------------------------- */

typedef struct first_eval {
    sd_tensor *pred[2]; /* positive, negative */
} first_eval;

static void on_model(void *ud, int cond, float sigma, const sd_tensor *den) {
    first_eval *f = ud;
    (void)sigma;
    if (cond >= 0 && cond < 2 && !f->pred[cond]) f->pred[cond] = sd_tensor_clone(den);
}

static sd_tensor *ksample(const sd_env *env, sd_value *model, const cJSON *settings, sd_value *pos, sd_value *neg,
                          first_eval *fe) {
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int((int64_t)num(settings, "width")), sd_value_int((int64_t)num(settings, "height")),
                      sd_value_int(1)};
    int own[] = {1, 1, 1};
    sd_node_ctx lctx = {.env = env, .node_id = "5", .class_type = "EmptyLatentImage"};
    sd_error err;
    sd_value *latent = nt_run1_named(&lctx, ln, lv, 3, own, &err);
    if (!latent) return NULL;
    sd_ksample_hooks hooks = {.on_model = on_model, .ud = fe};
    sd_ksample_args a;
    sd_ksample_args_init(&a);
    sd_model_ref *mr = sd_value_as_handle(model, &sd_handle_model);
    a.ckpt = mr->ckpt;
    a.loras = mr->loras;
    a.patches = &mr->patches;
    a.seed = (uint64_t)num(settings, "seed");
    a.steps = (int)num(settings, "steps");
    a.cfg = num(settings, "cfg");
    a.sampler_name = str(settings, "sampler_name");
    a.scheduler = str(settings, "scheduler");
    a.positive = pos;
    a.negative = neg;
    a.latent = latent;
    a.hooks = &hooks;
    sd_node_ctx ctx = {.env = env, .node_id = "3", .class_type = "KSampler"};
    sd_value *res = NULL;
    sd_status rc = sd_nodes_common_ksampler(&ctx, &a, &res, &err);
    CHECK_OK(rc, &err);
    sd_value_unref(latent);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

/* ---- node cases: ConditioningConcat / ConditioningAverage on stored conditionings ---------------- */

/* {"conditioning": [{"cond", "pooled_output"?}, ...]} as a CONDITIONING list */
static sd_value *stored_conditioning(const cJSON *v) {
    sd_value *list = sd_value_list();
    const cJSON *e;
    cJSON_ArrayForEach(e, item(v, "conditioning")) {
        sd_value *d = sd_value_dict();
        const char *keys[] = {"cond", "pooled_output"};
        for (int k = 0; k < 2; k++) {
            if (!item(e, keys[k])) continue;
            sd_tensor *t = ref_tensor(str(e, keys[k]));
            if (t) sd_value_dict_set(d, keys[k], nt_tensor_value(t));
        }
        sd_value_list_append(list, d);
    }
    return list;
}

static void node_case(const sd_env *env, const cJSON *c) {
    const char *id = str(c, "id"), *names[8];
    sd_value *vals[8] = {0};
    int n = 0, owned[8];
    const cJSON *in;
    cJSON_ArrayForEach(in, item(c, "inputs")) {
        if (n == 8) break;
        names[n] = in->string;
        vals[n] = item(in, "conditioning") ? stored_conditioning(in) : input_value(NULL, in);
        owned[n++] = 1;
    }
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = str(c, "node")};
    sd_error err;
    sd_value *r = nt_run1_named(&ctx, names, vals, n, owned, &err);
    const cJSON *o;
    size_t want_entries = 0;
    cJSON_ArrayForEach(o, item(c, "outputs")) {
        size_t entry = (size_t)num(o, "entry");
        if (entry + 1 > want_entries) want_entries = entry + 1;
        sd_value *e = r && entry < sd_value_list_len(r) ? sd_value_list_get(r, entry) : NULL;
        sd_tensor *got = e ? sd_value_dict_tensor(e, str(o, "key")) : NULL, *want = ref_tensor(str(o, "tensor"));
        CHECK_MSG(got != NULL, "%s: output entry %zu has no %s", id, entry, str(o, "key"));
        if (got && want) compare(id, str(o, "tensor"), got, want, num(o, "atol"), num(o, "rtol"));
        sd_tensor_unref(want);
    }
    CHECK_MSG(r && sd_value_list_len(r) == want_entries, "%s: %zu entries, ComfyUI %zu", id,
              r ? sd_value_list_len(r) : 0, want_entries);
    sd_value_unref(r);
}

/* What ComfyUI cannot apply is refused naming the input or entry: a 4-dim
 * mask at the node, a mask batch that does not repeat to the latent batch
 * in the sampler (2 masks, 3 latents; 3 masks on 2 are cut to 2, as mask[:B]). */
static void refusals(const sd_env *env, sd_value *const ck[3]) {
    sd_error err;
    const char *en[] = {"clip", "text"};
    sd_value *ev[] = {ck[1], sd_value_string("a cat")};
    int eo[] = {0, 1};
    sd_node_ctx ectx = {.env = env, .node_id = "1", .class_type = "CLIPTextEncode"};
    sd_value *cond = nt_run1_named(&ectx, en, ev, 2, eo, &err);
    if (!cond) return;
    const char *mn[] = {"conditioning", "mask", "strength", "set_cond_area"};
    sd_node_ctx mctx = {.env = env, .node_id = "2", .class_type = "ConditioningSetMask"};
    sd_value *mv[] = {cond, nt_tensor_value(sd_tensor_new4(SD_F32, 4, 1, 1, 8, 8)), sd_value_float(1.0),
                      sd_value_string("default")}, *out[8] = {0};
    sd_status rc = nt_run_named(&mctx, mn, mv, 4, out, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && !strcmp(err.input, "mask"), "a 4-dim mask: %d %s", rc, err.msg);
    nt_free_values(out, 8);
    sd_value_unref(mv[1]);
    mv[1] = nt_tensor_value(sd_tensor_new4(SD_F32, 3, 2, 8, 8, 0));
    rc = nt_run_named(&mctx, mn, mv, 4, out, &err);
    CHECK_OK(rc, &err);
    sd_value *masked = out[0];
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int(64), sd_value_int(64), sd_value_int(3)};
    int lo[] = {1, 1, 1};
    sd_node_ctx lctx = {.env = env, .node_id = "5", .class_type = "EmptyLatentImage"};
    sd_value *latent = nt_run1_named(&lctx, ln, lv, 3, lo, &err);
    sd_ksample_args a;
    sd_ksample_args_init(&a);
    sd_model_ref *mr = sd_value_as_handle(ck[0], &sd_handle_model);
    a.ckpt = mr->ckpt;
    a.steps = 1;
    a.positive = masked;
    a.negative = cond;
    a.latent = latent;
    sd_node_ctx ctx = {.env = env, .node_id = "3", .class_type = "KSampler"};
    sd_value *res = NULL;
    rc = masked && latent ? sd_nodes_common_ksampler(&ctx, &a, &res, &err) : SD_ERR_INVALID;
    CHECK_MSG(rc == SD_ERR_INVALID && strstr(err.msg, "do not repeat to the latent batch") &&
                  strstr(err.msg, "entry 0"),
              "a mask batch of 2 on 3 latents: %d %s", rc, err.msg);
    sd_value_unref(res);
    sd_value_unref(latent);
    for (int i = 1; i < 4; i++) sd_value_unref(mv[i]);
    sd_value_unref(masked);
    sd_value_unref(cond);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("cond_area");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const char *tokdir = sd_golden_tokenizer_dir();
    const char *ckpt = sd_golden_tiny_sd1(NULL);
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

    const cJSON *settings = item(man, "settings"), *c;
    sd_tensor *plain = NULL;
    int ran = 0;
    int nodes_run = 0;
    cJSON_ArrayForEach(c, item(man, "cases"))
        if (!strcmp(str(c, "kind"), "node")) node_case(&env, c), nodes_run++;
    CHECK_MSG(nodes_run > 0, "the manifest has no node case");
    cJSON_ArrayForEach(c, item(man, "cases")) {
        if (!ck[0]) break;
        if (strcmp(str(c, "kind"), "ksampler")) continue;
        const char *id = str(c, "id");
        outs o = {.n = 0};
        const cJSON *s;
        int bad = 0;
        cJSON_ArrayForEach(s, item(man, "base_steps")) bad |= run_step(&env, ck[1], &o, s);
        cJSON_ArrayForEach(s, item(c, "steps")) if (!bad) bad |= run_step(&env, ck[1], &o, s);
        CHECK_MSG(!bad, "%s: a conditioning node failed", id);
        if (!bad) {
            first_eval fe = {{NULL, NULL}};
            sd_tensor *lat = ksample(&env, ck[0], settings, find_out(&o, str(c, "positive")),
                                     find_out(&o, str(c, "negative")), &fe);
            const cJSON *out;
            cJSON_ArrayForEach(out, item(c, "outputs")) {
                const char *what = str(out, "what");
                const sd_tensor *got = !strcmp(what, "latent") ? lat : !strcmp(what, "step0 cond") ? fe.pred[0] : fe.pred[1];
                sd_tensor *want = ref_tensor(str(out, "tensor"));
                compare(id, what, got, want, num(out, "atol"), num(out, "rtol"));
                if (!strcmp(what, "latent") && strcmp(id, "plain") && plain && want) {
                    double mx = 0;
                    long worst = -1;
                    CHECK_MSG(!sd_test_allclose(plain, want, num(out, "atol"), num(out, "rtol"), &mx, &worst),
                              "%s: the plain case's latent is within this case's tolerance", id);
                }
                sd_tensor_unref(want);
            }
            if (!strcmp(id, "plain")) plain = sd_tensor_ref(lat);
            sd_tensor_unref(lat);
            sd_tensor_unref(fe.pred[0]), sd_tensor_unref(fe.pred[1]);
            ran++;
        }
        for (int i = 0; i < o.n; i++) sd_value_unref(o.v[i]);
    }
    CHECK_MSG(ran > 1 && plain, "the manifest has no plain case or no other case");
    if (ck[0]) refusals(&env, ck);
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
