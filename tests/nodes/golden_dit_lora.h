/* golden_dit_lora.h - the body of the LoRA-on-DiT goldens (test_golden_sd3_lora.c,
 * test_golden_zimage_lora.c): models/lora/lora.h sd_lora_plan_new_dit /
 * sd_lora_dit_view through the nodes a workflow uses, against ComfyUI's
 * LoraLoaderModelOnly (tests/data/<topic>, gen/make_<topic>.py). For every
 * case of the manifest:
 *   - UNETLoader on the family set's model (the case's model key, placed
 *     under its comfy_name), then LoraLoaderModelOnly once per LoRA of the
 *     case, in order, with its strength (a LoRA with keys that fit nothing
 *     is applied with a warning, as ComfyUI does);
 *   - the LoRA keys matching nothing (sd_lora_plan_unmatched over the case's
 *     LoRAs) are exactly the keys ComfyUI's load_lora did not load
 *     (the case's not_loaded);
 *   - the MODEL's DiT has exactly the manifest's patched parameters changed
 *     (the others still the base model's values) and every recorded
 *     weight.<key> within its tolerance;
 *   - one forward (the diffusion-model interface) on the recorded inputs:
 *     the base model gives base_out, the patched one out, and out differs
 *     from base_out by far more than the tolerance (the comparison could
 *     fail if no patch were applied); every tensor of the case is checked.
 * Then LoraLoader with a CLIP of the family (CLIPLoader on one of the set's
 * text encoders) patches the MODEL as LoraLoaderModelOnly does and passes
 * the CLIP through, also with a text-encoder key ComfyUI leaves unloaded, and
 * with strength_clip 0. Not a test on its own:
 * each includer gives its family's names to dit_lora_main. */
#ifndef SD_TEST_GOLDEN_DIT_LORA_H
#define SD_TEST_GOLDEN_DIT_LORA_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/lora/lora.h"
#include "models/sd3/sd3.h"
#include "models/zimage/zimage.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "golden_tokdir.h"
#include "testutil.h"

typedef struct dit_lora_family {
    const char *topic;     /* tests/data/<topic> */
    const char *component; /* the manifest's component */
    const char *family;    /* the reference set (sd_golden_family_dir) */
    sd_dmodel_kind kind;
    const char *clip_key;  /* the set's text encoder for the LoraLoader check */
    const char *clip_type; /* its CLIPLoader type */
} dit_lora_family;

static const char *case_id = "setup";
static const dit_lora_family *fam;

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

static const char *jstr(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static const char *base_name(const char *comfy) {
    return strchr(comfy, '/') ? strchr(comfy, '/') + 1 : comfy;
}

/* A node's output `idx` (the others released); values borrowed. */
static sd_value *node(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                      int idx, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 0; i < 4; i++)
        if (i != idx) sd_value_unref(out[i]);
    return rc ? NULL : out[idx];
}

static sd_value *unet_loader(const sd_env *env, const char *name, sd_error *err) {
    const char *names[] = {"unet_name", "weight_dtype"};
    sd_value *v[] = {sd_value_string(name), sd_value_string("default")};
    sd_value *m = node(env, "UNETLoader", names, v, 2, 0, err);
    nt_free_values(v, 2);
    return m;
}

static sd_value *lora_model_only(const sd_env *env, sd_value *model, const char *lora, double s, sd_error *err) {
    const char *names[] = {"model", "lora_name", "strength_model"};
    sd_value *v[] = {model, sd_value_string(lora), sd_value_float(s)};
    sd_value *m = node(env, "LoraLoaderModelOnly", names, v, 3, 0, err);
    sd_value_unref(v[1]), sd_value_unref(v[2]);
    return m;
}

static int dit_of(sd_value *model, sd_dmodel *dm, sd_error *err) {
    sd_model_ref *m = NULL;
    sd_value *in[1] = {model};
    if (sd_nodes_in_model(in, 0, "model", &m, err) || sd_nodes_model_dmodel(m, dm, err)) return 0;
    CHECK_MSG(dm->info.kind == fam->kind, "%s: the MODEL is a %s, not a %s", case_id,
              sd_dmodel_kind_name(dm->info.kind), sd_dmodel_kind_name(fam->kind));
    return dm->info.kind == fam->kind;
}

typedef void (*param_fn)(void *ud, const char *key, sd_bt **slot);

static sd_bt **dparam(const sd_dmodel *d, const char *key) {
    if (d->info.kind == SD_DMODEL_MMDIT) return sd_sd3_param(d->net, key);
    if (d->info.kind == SD_DMODEL_ZIMAGE) return sd_zimage_param(d->net, key);
    return NULL;
}

static void dparam_each(const sd_dmodel *d, param_fn fn, void *ud) {
    if (d->info.kind == SD_DMODEL_MMDIT) sd_sd3_param_each(d->net, fn, ud);
    if (d->info.kind == SD_DMODEL_ZIMAGE) sd_zimage_param_each(d->net, fn, ud);
}

/* forward of m on the case's recorded inputs (host result, caller owns) */
static sd_tensor *forward(const sd_dmodel *m, sd_st_file *g, cJSON *tensors, int *used) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *x = sd_st_tensor_f32(g, "input.x", &err), *ctx = sd_st_tensor_f32(g, "input.context", &err);
    sd_tensor *ts = sd_st_tensor_f32(g, "input.timesteps", &err);
    sd_tensor *y = cJSON_GetObjectItemCaseSensitive(tensors, "input.y") ? sd_st_tensor_f32(g, "input.y", &err)
                                                                         : NULL;
    sd_golden_mark(tensors, used, "input.x"), sd_golden_mark(tensors, used, "input.context");
    sd_golden_mark(tensors, used, "input.timesteps");
    if (y) sd_golden_mark(tensors, used, "input.y");
    sd_tensor *out = NULL;
    CHECK_MSG(x && ctx && ts, "%s: inputs: %s", case_id, err.msg);
    if (x && ctx && ts) {
        sd_bt *bx = sd_bt_from_host(m->be, x, SD_F32), *bc = sd_bt_from_host(m->be, ctx, SD_F32);
        sd_bt *by = y ? sd_bt_from_host(m->be, y, SD_F32) : NULL, *bo = NULL;
        sd_dmodel_input in = {.x = bx, .timesteps = sd_tensor_f32(ts), .context = bc, .y = by};
        CHECK_OK(sd_dmodel_forward(m, &in, &bo, &err), &err);
        out = bo ? sd_bt_to_host(bo) : NULL;
        sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(by), sd_bt_free(bo);
    }
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(ts), sd_tensor_unref(y);
    return out;
}

typedef struct walk {
    const sd_dmodel *base;
    cJSON *patched;
    int n_changed, n_same, bad;
} walk;

static int listed(cJSON *arr, const char *key) {
    cJSON *it;
    cJSON_ArrayForEach(it, arr) if (strcmp(cJSON_GetStringValue(it), key) == 0) return 1;
    return 0;
}

/* A parameter the LoRAs do not touch keeps base's values; a listed one
 * differs. */
static void check_param(void *ud, const char *key, sd_bt **slot) {
    walk *w = ud;
    sd_bt **b = dparam(w->base, key);
    if (!b || !*b || !*slot) {
        w->bad++;
        return;
    }
    sd_tensor *tv = sd_bt_to_host(*slot), *tb = sd_bt_to_host(*b);
    int same = tv && tb && sd_tensor_numel(tv) == sd_tensor_numel(tb) &&
               memcmp(sd_tensor_f32(tv), sd_tensor_f32(tb), (size_t)sd_tensor_numel(tv) * sizeof(float)) == 0;
    int want = listed(w->patched, key);
    CHECK_MSG(same != want, "%s: parameter %s is %s, the manifest says %s", case_id, key,
              same ? "unchanged" : "changed", want ? "patched" : "untouched");
    if (same) w->n_same++;
    else w->n_changed++;
    sd_tensor_unref(tv), sd_tensor_unref(tb);
}

/* The LoRA keys of the case that match nothing, against ComfyUI's not_loaded. */
static void check_unmatched(const char *models, const sd_dmodel *base, cJSON *c) {
    cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "not_loaded"), *l;
    CHECK_MSG(cJSON_IsArray(want), "%s: the manifest has no not_loaded list", case_id);
    int n_got = 0;
    cJSON *got = cJSON_CreateArray();
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "loras")) {
        char path[4400];
        snprintf(path, sizeof path, "%s/loras/%s.safetensors", models, jstr(l, "lora"));
        sd_error err;
        sd_error_clear(&err);
        sd_lora *lora = NULL;
        sd_lora_plan *plan = NULL;
        CHECK_OK(sd_lora_open(path, &lora, &err), &err);
        if (lora) CHECK_OK(sd_lora_plan_new_dit(lora, base, &plan, &err), &err);
        for (size_t i = 0; i < sd_lora_plan_unmatched_count(plan); i++) {
            const char *k = sd_lora_plan_unmatched(plan, i);
            if (!listed(got, k)) {
                cJSON_AddItemToArray(got, cJSON_CreateString(k));
                n_got++;
            }
            CHECK_MSG(listed(want, k), "%s: LoRA key %s matches nothing here; ComfyUI loads it", case_id, k);
        }
        sd_lora_plan_unref(plan);
        sd_lora_unref(lora);
    }
    cJSON *it;
    cJSON_ArrayForEach(it, want)
        CHECK_MSG(listed(got, cJSON_GetStringValue(it)), "%s: LoRA key %s matches a parameter here; ComfyUI "
                  "does not load it", case_id, cJSON_GetStringValue(it));
    printf("  %d LoRA keys match nothing (as in ComfyUI)\n", n_got);
    cJSON_Delete(got);
}

static void run_case(const sd_env *env, const char *dir, const char *models, cJSON *fman, cJSON *c) {
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    char path[4400];
    sd_error err;
    sd_error_clear(&err);
    snprintf(path, sizeof path, "%s/%s", dir, jstr(c, "file"));
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fman, "models"),
                                                    jstr(c, "model"));
    const char *comfy = jstr(model, "comfy_name");
    CHECK_MSG(comfy && g && tensors, "%s: the %s set has no model %s", case_id, fam->family, jstr(c, "model"));
    if (!comfy || !g || !tensors) {
        if (g) sd_st_close(g);
        return;
    }
    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);
    sd_value *base = unet_loader(env, base_name(comfy), &err);
    CHECK_MSG(base != NULL, "%s: UNETLoader: %s", case_id, err.msg);
    sd_value *m = base ? sd_value_ref(base) : NULL;
    cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "loras")) {
        char name[300];
        snprintf(name, sizeof name, "%s.safetensors", jstr(l, "lora"));
        double s = cJSON_GetObjectItemCaseSensitive(l, "strength")->valuedouble;
        sd_value *next = m ? lora_model_only(env, m, name, s, &err) : NULL;
        CHECK_MSG(next != NULL, "%s: LoraLoaderModelOnly %s %g: %s", case_id, name, s, err.msg);
        sd_value_unref(m);
        m = next;
    }
    sd_dmodel fb, fp;
    int ok = base && m && dit_of(base, &fb, &err) && dit_of(m, &fp, &err);
    CHECK_MSG(ok, "%s: %s", case_id, err.msg);
    if (ok) {
        check_unmatched(models, &fb, c);
        CHECK_MSG(fb.net != fp.net, "%s: the patched MODEL is the base DiT", case_id);
        walk w = {&fb, cJSON_GetObjectItemCaseSensitive(c, "patched_params"), 0, 0, 0};
        dparam_each(&fp, check_param, &w);
        CHECK_MSG(!w.bad && w.n_changed == cJSON_GetArraySize(w.patched),
                  "%s: %d parameters changed, the manifest lists %d", case_id, w.n_changed,
                  cJSON_GetArraySize(w.patched));
        printf("  %d parameters patched, %d untouched\n", w.n_changed, w.n_same);
        cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            if (strncmp(t->string, "weight.", 7) != 0) continue;
            sd_bt **slot = dparam(&fp, t->string + 7);
            sd_tensor *got = slot && *slot ? sd_bt_to_host(*slot) : NULL;
            sd_golden_compare(case_id, tensors, g, t->string, got);
            sd_golden_mark(tensors, used, t->string);
            sd_tensor_unref(got);
        }
        sd_tensor *bo = forward(&fb, g, tensors, used), *po = forward(&fp, g, tensors, used);
        sd_golden_compare(case_id, tensors, g, "base_out", bo);
        sd_golden_compare(case_id, tensors, g, "out", po);
        sd_golden_mark(tensors, used, "base_out"), sd_golden_mark(tensors, used, "out");
        if (bo && po) {
            /* the LoRAs move the output well past the tolerance */
            cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tensors, "out"),
                                                          "tolerance");
            double atol = cJSON_GetObjectItemCaseSensitive(tol, "atol")->valuedouble, moved = 0;
            for (int64_t i = 0; i < sd_tensor_numel(po); i++)
                moved = fmax(moved, fabs(sd_tensor_f32(po)[i] - sd_tensor_f32(bo)[i]));
            CHECK_MSG(moved > 100 * atol, "%s: the LoRAs moved the output by %g only", case_id, moved);
        }
        sd_tensor_unref(bo), sd_tensor_unref(po);
    }
    int i = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
    free(used);
    sd_value_unref(m), sd_value_unref(base);
    sd_st_close(g);
}

/* ---- LoraLoader ------------------------------------------------------------------ */

/* LoraLoader(model, clip, lora, sm, sc) into out[0..1]; the status */
static sd_status lora_loader(const sd_env *env, sd_value *model, sd_value *clip, const char *lora, double sm,
                             double sc, sd_value **out, sd_error *err) {
    const char *ln[] = {"model", "clip", "lora_name", "strength_model", "strength_clip"};
    sd_value *lv[] = {model, clip, sd_value_string(lora), sd_value_float(sm), sd_value_float(sc)};
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = "LoraLoader"};
    out[0] = out[1] = out[2] = out[3] = NULL;
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, ln, lv, 5, out, err);
    sd_value_unref(lv[2]), sd_value_unref(lv[3]), sd_value_unref(lv[4]);
    return rc;
}

/* The first LoRA of the manifest without a text-encoder key, and one with. */
static void run_loaders(const sd_env *env, cJSON *man, cJSON *fman) {
    case_id = "loaders";
    printf("case loaders\n");
    sd_error err;
    cJSON *models = cJSON_GetObjectItemCaseSensitive(fman, "models");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(man, "cases"), 0);
    const char *mcomfy = jstr(cJSON_GetObjectItemCaseSensitive(models, jstr(c0, "model")), "comfy_name");
    const char *ccomfy = jstr(cJSON_GetObjectItemCaseSensitive(models, fam->clip_key), "comfy_name");
    CHECK_MSG(mcomfy && ccomfy, "loaders: the %s set lacks %s or %s", fam->family, jstr(c0, "model"), fam->clip_key);
    if (!mcomfy || !ccomfy) return;
    /* the LoRAs of the data, by whether ComfyUI left a text-encoder key unloaded */
    const char *plain = NULL, *with_te = NULL, *te_key = NULL;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "loras")) != 1) continue;
        const char *l = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "loras"), 0), "lora");
        const char *te = NULL;
        cJSON *k;
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(c, "not_loaded"))
            if (strncmp(cJSON_GetStringValue(k), "lora_te", 7) == 0) te = cJSON_GetStringValue(k);
        if (te && !with_te) with_te = l, te_key = te;
        if (!te && !plain) plain = l;
    }
    CHECK_MSG(plain && with_te, "loaders: the manifest needs a LoRA with and one without text-encoder keys");
    if (!plain || !with_te) return;
    sd_value *base = unet_loader(env, base_name(mcomfy), &err);
    const char *cn[] = {"clip_name", "type"};
    sd_value *cv[] = {sd_value_string(base_name(ccomfy)), sd_value_string(fam->clip_type)};
    sd_value *clip = node(env, "CLIPLoader", cn, cv, 2, 0, &err);
    nt_free_values(cv, 2);
    CHECK_MSG(base && clip, "loaders: %s", err.msg);
    if (base && clip) {
        char name[300];
        snprintf(name, sizeof name, "%s.safetensors", plain);
        sd_value *out[4];
        CHECK_OK(lora_loader(env, base, clip, name, 0.8, 1.0, out, &err), &err);
        CHECK_MSG(out[1] == clip, "LoraLoader: the CLIP is not passed through");
        sd_value *only = lora_model_only(env, base, name, 0.8, &err);
        sd_dmodel a, b;
        int ok = out[0] && only && dit_of(out[0], &a, &err) && dit_of(only, &b, &err);
        CHECK_MSG(ok, "loaders: %s", err.msg);
        int compared = 0;
        for (size_t i = 0; ok; i++) {
            /* the first parameter the LoRA patches */
            cJSON *pp = NULL;
            cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases"))
                if (!strcmp(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "loras"), 0), "lora"),
                            plain))
                    pp = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "patched_params"), (int)i);
            if (!pp) break;
            sd_bt **pa = dparam(&a, cJSON_GetStringValue(pp)), **pb = dparam(&b, cJSON_GetStringValue(pp));
            sd_tensor *ta = pa ? sd_bt_to_host(*pa) : NULL, *tb = pb ? sd_bt_to_host(*pb) : NULL;
            CHECK_MSG(ta && tb && memcmp(ta->data, tb->data, (size_t)sd_tensor_numel(ta) * sizeof(float)) == 0,
                      "LoraLoader and LoraLoaderModelOnly patch %s differently", cJSON_GetStringValue(pp));
            sd_tensor_unref(ta), sd_tensor_unref(tb);
            compared++;
            break;
        }
        CHECK_MSG(compared == 1, "loaders: no patched parameter compared");
        for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
        sd_value_unref(only);

        snprintf(name, sizeof name, "%s.safetensors", with_te);
        /* a text-encoder key ComfyUI leaves unloaded (its adapter is
         * incomplete, or its name maps to nothing of this CLIP): the MODEL
         * patched, the CLIP as it came (text-encoder LoRAs themselves:
         * nodes.golden_te_lora) */
        sd_status rc = lora_loader(env, base, clip, name, 1.0, 1.0, out, &err);
        CHECK_MSG(rc == SD_OK && out[0] && out[1] == clip,
                  "LoraLoader with an unloaded text-encoder key (%s) on a %s CLIP: rc %d: %s", te_key, fam->family,
                  rc, err.msg);
        for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
        CHECK_OK(lora_loader(env, base, clip, name, 1.0, 0.0, out, &err), &err);
        CHECK_MSG(out[0] && out[1] == clip, "LoraLoader strength_clip 0: MODEL and the CLIP as it came");
        for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
    }
    sd_value_unref(base);
    sd_value_unref(clip);
}

static int dit_lora_main(const dit_lora_family *f) {
    fam = f;
    char dir[4096], path[4400];
    snprintf(dir, sizeof dir, "%s", sd_golden_topic_dir(f->topic));
    cJSON *man = sd_golden_manifest(dir);
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir(f->family));
    cJSON *fman = sd_golden_manifest(fdir); /* skips without the family set */
    sd_golden_require_cases(man, dir, f->component);
    char tname[200];
    snprintf(tname, sizeof tname, "golden_%s", f->topic);
    const char *tmp = sd_test_tmpdir(tname);
    char models[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    const cJSON *mm;
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(fman, "models")) {
        const char *file = jstr(mm, "file"), *comfy = jstr(mm, "comfy_name");
        if (!file || !comfy) continue;
        snprintf(path, sizeof path, "%s/%s", fdir, file);
        link_as(path, models, comfy);
    }
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(man, "loras")) {
        snprintf(path, sizeof path, "%s/%s", dir, jstr(mm, "file"));
        link_as(path, models, jstr(mm, "comfy_name"));
    }
    sd_env env;
    sd_backend *be = sd_golden_backend();
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    gt_model_defaults(fman, &mo);
    sd_model_store_set_defaults(store, &mo);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    /* the text encoders a LoRA with text-encoder names loads need their vocabularies */
    char tokdir[2600];
    snprintf(tokdir, sizeof tokdir, "%s/tok", models);
    gt_tokenizer_dir(tokdir);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!sd_golden_case_is(c, f->component)) continue;
        case_id = jstr(c, "id");
        printf("case %s\n", case_id);
        run_case(&env, dir, models, fman, c);
        n++;
    }
    CHECK_MSG(n > 0, "no %s case in %s", f->component, dir);
    run_loaders(&env, man, fman);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(fman);
    cJSON_Delete(man);
    return sd_test_finish();
}

#endif
