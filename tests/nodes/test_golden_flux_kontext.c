/* Flux.1 Kontext against ComfyUI (tests/data/flux_kontext,
 * gen/make_flux_kontext.py), on the Flux set's tiny dev DiT loaded by
 * UNETLoader under its ComfyUI name (a Kontext checkpoint is a Flux
 * dev-layout file: the same loader). For every case of the manifest:
 *   dit_kontext       one forward through the MODEL's diffusion model
 *                     interface with the case's reference latents and
 *                     ref_latents_method (models/flux/flux.h sd_flux_refs):
 *                     out, and out_noref without the references; the two
 *                     differ beyond the tolerance (the references matter).
 *   ksampler_kontext  ReferenceLatent once per reference (and
 *                     FluxKontextMultiReferenceLatentMethod when the case
 *                     has a method), FluxGuidance, on the recorded
 *                     conditioning; the negative gets the case's first
 *                     negative_refs references; the KSampler node on
 *                     latent_in: out; and out_noref without them.
 * Every tensor of a case is checked; settings, shapes and methods come from
 * the manifest. */
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
#include "models/flux/flux.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *case_id = "setup";

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const char *jstr(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }
static double jnum(const cJSON *o, const char *k) { return cJSON_GetNumberValue(item(o, k)); }

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

/* A node's first output (the others released); vals borrowed. */
static sd_value *node(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, &err);
    CHECK_MSG(rc == SD_OK, "%s: %s: %s", case_id, type, err.msg);
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    return rc ? NULL : out[0];
}

static sd_tensor *tensor(sd_st_file *g, const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(t != NULL, "%s: no tensor %s: %s", case_id, name, err.msg);
    return t;
}

/* max |a - b| */
static double moved(const sd_tensor *a, const sd_tensor *b) {
    double m = 0;
    for (int64_t i = 0; a && b && i < sd_tensor_numel(a) && i < sd_tensor_numel(b); i++)
        m = fmax(m, fabs(sd_tensor_f32(a)[i] - sd_tensor_f32(b)[i]));
    return m;
}

static double tol_atol(cJSON *tensors, const char *name) {
    return jnum(item(item(tensors, name), "tolerance"), "atol");
}

/* ---- dit_kontext ------------------------------------------------------------------------------ */

static sd_tensor *dit_forward(const sd_dmodel *dm, sd_st_file *g, const sd_flux_refs *refs) {
    sd_tensor *x = tensor(g, "input.x"), *ctx = tensor(g, "input.context"), *sig = tensor(g, "input.sigma");
    sd_tensor *y = tensor(g, "input.y"), *gd = tensor(g, "input.guidance"), *res = NULL;
    if (x && ctx && sig && y && gd) {
        sd_bt *bx = sd_bt_from_host(dm->be, x, SD_F32), *bc = sd_bt_from_host(dm->be, ctx, SD_F32);
        sd_bt *by = sd_bt_from_host(dm->be, y, SD_F32), *bo = NULL;
        sd_dmodel_input in = {bx, sd_tensor_f32(sig), bc, by, sd_tensor_f32(gd), refs};
        sd_error err;
        sd_error_clear(&err);
        CHECK_OK(sd_dmodel_forward(dm, &in, &bo, &err), &err);
        res = bo ? sd_bt_to_host(bo) : NULL;
        sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(by), sd_bt_free(bo);
    }
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(sig), sd_tensor_unref(y), sd_tensor_unref(gd);
    return res;
}

static void run_dit(const sd_dmodel *dm, sd_st_file *g, cJSON *c, cJSON *tensors, int *used) {
    int n = (int)jnum(c, "n_refs");
    sd_bt **refs = calloc((size_t)(n > 0 ? n : 1), sizeof *refs);
    char name[64];
    int ok = refs != NULL;
    for (int i = 0; i < n && ok; i++) {
        snprintf(name, sizeof name, "input.ref%d", i);
        sd_tensor *t = tensor(g, name);
        refs[i] = t ? sd_bt_from_host(dm->be, t, SD_F32) : NULL;
        ok = refs[i] != NULL;
        sd_tensor_unref(t);
        sd_golden_mark(tensors, used, name);
    }
    CHECK_MSG(ok, "%s: reference latents", case_id);
    if (ok) {
        sd_flux_refs fr = {refs, n, sd_flux_ref_method_from_name(jstr(c, "ref_latents_method"))};
        sd_tensor *out = dit_forward(dm, g, &fr), *out0 = dit_forward(dm, g, NULL);
        sd_golden_compare(case_id, tensors, g, "out", out);
        sd_golden_compare(case_id, tensors, g, "out_noref", out0);
        double mv = moved(out, out0);
        CHECK_MSG(mv > 100 * tol_atol(tensors, "out"), "%s: the reference latents moved the output by %g only",
                  case_id, mv);
        sd_tensor_unref(out), sd_tensor_unref(out0);
    }
    static const char *const inputs[] = {"input.x", "input.sigma", "input.context", "input.y", "input.guidance",
                                         "out", "out_noref"};
    for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) sd_golden_mark(tensors, used, inputs[i]);
    for (int i = 0; refs && i < n; i++) sd_bt_free(refs[i]);
    free(refs);
}

/* ---- ksampler_kontext ------------------------------------------------------------------------- */

/* [[cond, {pooled_output}]] from the case's <which>.cond / .pooled */
static sd_value *conditioning(sd_st_file *g, const char *which) {
    char a[64], b[64];
    snprintf(a, sizeof a, "%s.cond", which);
    snprintf(b, sizeof b, "%s.pooled", which);
    sd_tensor *c = tensor(g, a), *p = tensor(g, b);
    sd_value *d = sd_value_dict(), *list = sd_value_list();
    int bad = !c || !p || !d || !list;
    if (!bad) bad = sd_value_dict_set(d, "cond", sd_value_tensor(c)) ||
                    sd_value_dict_set(d, "pooled_output", sd_value_tensor(p)) || sd_value_list_append(list, d);
    sd_tensor_unref(c), sd_tensor_unref(p);
    if (bad) {
        CHECK_MSG(0, "%s: building the %s conditioning", case_id, which);
        sd_value_unref(list);
        return NULL;
    }
    return list;
}

/* ReferenceLatent(ref_i) for i < n on c (released) */
static sd_value *with_refs(const sd_env *env, sd_st_file *g, sd_value *c, int n) {
    for (int i = 0; i < n && c; i++) {
        char name[32];
        snprintf(name, sizeof name, "ref%d", i);
        sd_tensor *t = tensor(g, name);
        sd_value *lat = t ? nt_latent(t) : NULL;
        const char *names[] = {"conditioning", "latent"};
        sd_value *v[] = {c, lat};
        sd_value *next = lat ? node(env, "ReferenceLatent", names, v, 2) : NULL;
        if (next) { /* the entry's list grew by exactly that latent */
            const sd_value *l = sd_value_dict_get(sd_value_list_get(next, 0), "reference_latents");
            CHECK_MSG(l && sd_value_list_len(l) == (size_t)i + 1 &&
                          sd_value_as_tensor(sd_value_list_get(l, (size_t)i)) == t,
                      "%s: ReferenceLatent did not append the latent as reference %d", case_id, i);
        }
        sd_value_unref(lat);
        sd_value_unref(c);
        c = next;
    }
    return c;
}

static sd_value *apply1(const sd_env *env, const char *type, const char *in2, sd_value *c, sd_value *arg) {
    const char *names[] = {"conditioning", in2};
    sd_value *v[] = {c, arg};
    sd_value *r = c && arg ? node(env, type, names, v, 2) : NULL;
    sd_value_unref(c), sd_value_unref(arg);
    return r;
}

static sd_tensor *ksampler(const sd_env *env, sd_value *model, const cJSON *s, sd_value *pos, sd_value *neg,
                           sd_tensor *latent) {
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                           "latent_image", "denoise"};
    sd_value *v[] = {model, sd_value_int((int64_t)jnum(s, "seed")), sd_value_int((int64_t)jnum(s, "steps")),
                     sd_value_float(jnum(s, "cfg")), sd_value_string(jstr(s, "sampler")),
                     sd_value_string(jstr(s, "scheduler")), pos, neg, nt_latent(sd_tensor_ref(latent)),
                     sd_value_float(1.0)};
    sd_value *r = pos && neg ? node(env, "KSampler", names, v, 10) : NULL;
    for (int i = 1; i < 10; i++)
        if (i != 6 && i != 7) sd_value_unref(v[i]);
    sd_tensor *t = r ? sd_tensor_ref(sd_value_dict_tensor(r, "samples")) : NULL;
    sd_value_unref(r);
    return t;
}

static void run_ksampler(const sd_env *env, sd_value *model, sd_st_file *g, cJSON *c, cJSON *tensors, int *used) {
    const cJSON *s = item(c, "settings");
    int n = (int)jnum(c, "n_refs"), nneg = (int)jnum(c, "negative_refs");
    const char *method = jstr(c, "ref_latents_method");
    sd_tensor *latent = tensor(g, "latent_in");
    sd_value *pos = with_refs(env, g, conditioning(g, "positive"), n);
    if (method) pos = apply1(env, "FluxKontextMultiReferenceLatentMethod", "reference_latents_method", pos,
                             sd_value_string(method));
    pos = apply1(env, "FluxGuidance", "guidance", pos, sd_value_float(jnum(s, "guidance")));
    sd_value *neg = with_refs(env, g, conditioning(g, "negative"), nneg);
    sd_value *pos0 = apply1(env, "FluxGuidance", "guidance", conditioning(g, "positive"),
                            sd_value_float(jnum(s, "guidance")));
    sd_value *neg0 = conditioning(g, "negative");
    sd_tensor *out = latent ? ksampler(env, model, s, pos, neg, latent) : NULL;
    sd_tensor *out0 = latent ? ksampler(env, model, s, pos0, neg0, latent) : NULL;
    sd_golden_compare(case_id, tensors, g, "out", out);
    sd_golden_compare(case_id, tensors, g, "out_noref", out0);
    double mv = moved(out, out0);
    CHECK_MSG(mv > 100 * tol_atol(tensors, "out"), "%s: the reference latents moved the latent by %g only", case_id,
              mv);
    static const char *const read[] = {"positive.cond", "positive.pooled", "negative.cond", "negative.pooled",
                                       "latent_in", "out", "out_noref"};
    for (size_t i = 0; i < sizeof read / sizeof *read; i++) sd_golden_mark(tensors, used, read[i]);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "ref%d", i);
        sd_golden_mark(tensors, used, name);
    }
    sd_tensor_unref(out), sd_tensor_unref(out0), sd_tensor_unref(latent);
    sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(pos0), sd_value_unref(neg0);
}

int main(void) {
    char path[4400];
    const char *dir = sd_golden_topic_dir("flux_kontext");
    cJSON *man = sd_golden_manifest(dir);
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir("flux"));
    cJSON *fman = sd_golden_manifest(fdir); /* skips without the Flux set */
    int n_dit = sd_golden_require_cases(man, dir, "dit_kontext");
    int n_ks = sd_golden_require_cases(man, dir, "ksampler_kontext");
    CHECK_MSG(n_dit > 0 && n_ks > 0, "the manifest lists %d dit_kontext and %d ksampler_kontext cases", n_dit, n_ks);
    sd_backend *be = sd_golden_backend();
    const cJSON *mm = item(item(fman, "models"), jstr(man, "model"));
    const char *file = jstr(mm, "file"), *comfy = jstr(mm, "comfy_name");
    CHECK_MSG(file && comfy && strncmp(comfy, "diffusion_models/", 17) == 0,
              "the Flux set has no diffusion model %s", jstr(man, "model"));
    if (!be || !file || !comfy || strncmp(comfy, "diffusion_models/", 17)) {
        sd_backend_free(be);
        cJSON_Delete(man), cJSON_Delete(fman);
        return sd_test_finish();
    }
    const char *tmp = sd_test_tmpdir("golden_flux_kontext");
    char models[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(path, sizeof path, "%s/%s", fdir, file);
    link_as(path, models, comfy);
    sd_env env;
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *un[] = {"unet_name", "weight_dtype"};
    sd_value *uv[] = {sd_value_string(comfy + 17), sd_value_string("default")};
    sd_value *model = node(&env, "UNETLoader", un, uv, 2);
    nt_free_values(uv, 2);
    sd_model_ref *mr = NULL;
    sd_dmodel dm;
    sd_value *min[1] = {model};
    int have = model && !sd_nodes_in_model(min, 0, "model", &mr, &err) && !sd_nodes_model_dmodel(mr, &dm, &err);
    CHECK_MSG(have && dm.info.kind == SD_DMODEL_FLUX, "UNETLoader gave no Flux DiT: %s", err.msg);
    cJSON *c;
    cJSON_ArrayForEach(c, item(man, "cases")) {
        int dit = sd_golden_case_is(c, "dit_kontext"), ks = sd_golden_case_is(c, "ksampler_kontext");
        if (!have || (!dit && !ks)) continue;
        case_id = jstr(c, "id");
        printf("case %s\n", case_id);
        if (ks && !sd_golden_e2e_comparable()) {
            printf("  (sampling is compared in f32 only)\n");
            continue;
        }
        cJSON *tensors = (cJSON *)item(c, "tensors");
        snprintf(path, sizeof path, "%s/%s", dir, jstr(c, "file"));
        sd_st_file *g = NULL;
        sd_error_clear(&err);
        CHECK_OK(sd_st_open(path, &g, &err), &err);
        if (!g || !tensors) continue;
        int n_t = cJSON_GetArraySize(tensors);
        int *used = calloc((size_t)n_t, sizeof *used);
        if (dit) run_dit(&dm, g, c, tensors, used);
        else run_ksampler(&env, model, g, c, tensors, used);
        int i = 0;
        cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
            i++;
        }
        free(used);
        sd_st_close(g);
    }
    sd_value_unref(model);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(man), cJSON_Delete(fman);
    return sd_test_finish();
}
