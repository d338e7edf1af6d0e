/* The tiny GGUF Flux files (tests/data/gguf) through ComfyUI-GGUF's Unet
 * loader nodes against ComfyUI + ComfyUI-GGUF's own nodes on the same
 * graphs (the manifest's "e2e" cases, from make_e2e.py):
 *   - the MODEL comes from the case's loader node (UnetLoaderGGUF or
 *     UnetLoaderGGUFAdvanced with its dequant_dtype) on the file placed
 *     under its comfy_name; its quantized tensors stay quantized (the type
 *     the manifest lists for them) with the loader's rounding on the Linear
 *     weights;
 *   - every recorded step through the conditioned model call
 *     (sd_cond_model_eval) on the recorded input, timestep and
 *     conditioning: the output equals stepN.model_out;
 *   - the whole sampling graph through the nodes a workflow uses
 *     (EmptySD3LatentImage, then RandomNoise + BasicGuider + KSamplerSelect +
 *     BasicScheduler + SamplerCustomAdvanced, or FluxGuidance + KSampler as
 *     the case says), on the recorded conditioning: sigmas, the latent and
 *     (custom graphs) the denoised latent equal ComfyUI's within the
 *     tolerances of the manifest (the Flux set's own).
 * The conditioning's T5 part through DualCLIPLoaderGGUF is
 * nodes.golden_gguf_nodes' (the tiny CLIP-L's pooled output needs a head
 * count node-loaded CLIPs do not take, so the recorded one is used here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/flux/flux.h"
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *case_id;

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

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* A node's output 0 (the others released); inputs: names/values, each value
 * borrowed. */
static sd_value *node(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                      int out_index, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    CHECK_MSG(rc == SD_OK, "%s: %s: %s", case_id, type, err->msg);
    for (int i = 0; i < 4; i++)
        if (i != out_index) sd_value_unref(out[i]);
    return rc ? NULL : out[out_index];
}

static sd_value *conditioning(sd_tensor *cond, sd_tensor *pooled) {
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "cond", nt_tensor_value(sd_tensor_ref(cond)));
    sd_value_dict_set(d, "pooled_output", nt_tensor_value(sd_tensor_ref(pooled)));
    sd_value *l = sd_value_list();
    sd_value_list_append(l, d);
    return l;
}

static sd_tensor *samples_of(sd_value *latent) {
    sd_value *s = latent ? sd_value_dict_get(latent, "samples") : NULL;
    return s ? sd_value_as_tensor(s) : NULL;
}

/* The case's MODEL from its loader node, with the manifest's inputs. */
static sd_value *load_model(const sd_env *env, const cJSON *c, sd_error *err) {
    const cJSON *ul = cJSON_GetObjectItemCaseSensitive(c, "unet_loader");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(ul, "inputs"), *it;
    const char *names[8];
    sd_value *vals[8];
    int n = 0;
    cJSON_ArrayForEach(it, in) {
        if (n == 8) break;
        names[n] = it->string;
        vals[n++] = cJSON_IsString(it) ? sd_value_string(it->valuestring)
                    : cJSON_IsBool(it) ? sd_value_bool(cJSON_IsTrue(it))
                                       : sd_value_float(it->valuedouble);
    }
    sd_value *m = node(env, jstr(ul, "node"), names, vals, n, 0, err);
    nt_free_values(vals, n);
    return m;
}

/* The quantized tensors keep the type the manifest gives them, and the
 * loader's rounding on the Linear weights. */
static void check_kept(sd_dmodel *dm, const cJSON *model, sd_dequant_math want) {
    const cJSON *t;
    int n = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(model, "tensor_types")) {
        sd_dtype dt;
        const char *tn = cJSON_GetStringValue(cJSON_GetArrayItem(t, 0));
        sd_bt **p = sd_flux_param(dm->net, t->string);
        if (!tn || sd_dtype_from_name(tn, &dt) != 0 || !sd_dtype_is_quantized(dt) || !p) continue;
        CHECK_MSG(*p && (*p)->dtype == dt, "%s: %s not kept as %s", case_id, t->string, tn);
        CHECK_MSG(*p && (*p)->dequant == want, "%s: %s widened with rounding %d, not %d", case_id, t->string,
                  *p ? (int)(*p)->dequant : -1, (int)want);
        n++;
    }
    CHECK_MSG(n > 0, "%s: no quantized tensor checked", case_id);
}

static void run_case(const sd_env *env, const char *gdir, cJSON *gm, cJSON *c) {
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", gdir, jstr(c, "file"));
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    sd_value *model = g ? load_model(env, c, &err) : NULL;
    sd_model_ref *mref = NULL;
    sd_tensor *cond = NULL, *pooled = NULL;
    sd_value *cv = NULL;
    if (!model || sd_nodes_in_model(&model, 0, "model", &mref, &err)) goto done;
    /* the model's file and its expected tensor types */
    const cJSON *ul = cJSON_GetObjectItemCaseSensitive(c, "unet_loader");
    const char *unet_name = jstr(cJSON_GetObjectItemCaseSensitive(ul, "inputs"), "unet_name");
    const cJSON *mm, *model_json = NULL;
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(gm, "models")) {
        const char *cn = jstr(mm, "comfy_name"), *b = cn ? strrchr(cn, '/') : NULL;
        if (b && unet_name && strcmp(b + 1, unet_name) == 0) model_json = mm;
    }
    CHECK_MSG(model_json != NULL, "%s: the manifest has no model %s", case_id, unet_name);
    const char *dqs = jstr(cJSON_GetObjectItemCaseSensitive(ul, "inputs"), "dequant_dtype");
    sd_dequant_math want = !dqs || strcmp(dqs, "float32") != 0 ? (dqs && strcmp(dqs, "bfloat16") == 0 ? SD_DQ_BF16 : SD_DQ_F16)
                                                                : SD_DQ_F32;
    sd_dmodel dm;
    CHECK_OK(sd_nodes_model_dmodel(mref, &dm, &err), &err);
    if (err.code) goto done;
    CHECK(dm.info.kind == SD_DMODEL_FLUX);
    if (model_json) check_kept(&dm, model_json, want);

    cond = sd_st_tensor_f32(g, "positive.cond", &err);
    pooled = sd_st_tensor_f32(g, "positive.pooled", &err);
    CHECK_MSG(cond && pooled, "%s: no recorded conditioning", case_id);
    if (!cond || !pooled) goto done;
    cv = conditioning(cond, pooled);
    int ksampler = strcmp(jstr(c, "graph_kind"), "ksampler") == 0;
    if (ksampler) { /* FluxGuidance */
        static const char *const nm[] = {"conditioning", "guidance"};
        sd_value *v[2] = {cv, sd_value_float(jnum(s, "guidance"))};
        sd_value *gcv = node(env, "FluxGuidance", nm, v, 2, 0, &err);
        sd_value_unref(v[1]);
        sd_value_unref(cv);
        cv = gcv;
        if (!cv) goto done;
    }

    /* 1. each recorded step through the conditioned model call */
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_nodes_model_sampling_of(mref->ckpt, &mref->patches, ms);
    int steps = 0;
    for (int i = 0;; i++) {
        char nx[64], nt[64], no[64];
        snprintf(nx, sizeof nx, "step%d.x", i);
        snprintf(nt, sizeof nt, "step%d.timestep", i);
        snprintf(no, sizeof no, "step%d.model_out", i);
        if (!cJSON_GetObjectItemCaseSensitive(tensors, nx)) break;
        sd_tensor *x = sd_st_tensor_f32(g, nx, &err), *ts = sd_st_tensor_f32(g, nt, &err);
        if (!x || !ts) {
            CHECK_MSG(0, "%s: step %d inputs: %s", case_id, i, err.msg);
            sd_tensor_unref(x), sd_tensor_unref(ts);
            break;
        }
        sd_cond_model m = {.be = dm.be, .dm = dm, .ms = ms, .conds = {cv, NULL},
                           .image_w = x->shape[3] * 8, .image_h = x->shape[2] * 8};
        sd_tensor *den = sd_tensor_new(SD_F32, x->ndim, x->shape);
        int conds[1] = {SD_COND_POSITIVE};
        CHECK_OK(sd_cond_model_eval(&m, x, sd_tensor_f32(ts)[0], conds, 1, &den, &err), &err);
        sd_golden_compare(case_id, tensors, g, no, den);
        sd_tensor_unref(den), sd_tensor_unref(x), sd_tensor_unref(ts);
        steps++;
    }
    free(ms);
    CHECK_MSG(steps > 0, "%s: no recorded steps", case_id);

    /* 2. the sampling graph through its nodes */
    static const char *const el[] = {"width", "height", "batch_size"};
    sd_value *ev[3] = {sd_value_int((int64_t)jnum(s, "width")), sd_value_int((int64_t)jnum(s, "height")),
                       sd_value_int((int64_t)jnum(s, "batch_size"))};
    sd_value *latent = node(env, "EmptySD3LatentImage", el, ev, 3, 0, &err);
    nt_free_values(ev, 3);
    if (!latent) goto done;
    sd_value *out = NULL, *den = NULL;
    if (ksampler) {
        static const char *const nm[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                                         "positive", "negative", "latent_image", "denoise"};
        /* cfg 1: the negative is never evaluated (ComfyUI skips the pass) */
        sd_value *v[10] = {model, sd_value_int((int64_t)jnum(s, "seed")), sd_value_int((int64_t)jnum(s, "steps")),
                           sd_value_float(jnum(s, "cfg")), sd_value_string(jstr(s, "sampler")),
                           sd_value_string(jstr(s, "scheduler")), cv, cv, latent, sd_value_float(1.0)};
        out = node(env, "KSampler", nm, v, 10, 0, &err);
        sd_value_unref(v[1]), sd_value_unref(v[2]), sd_value_unref(v[3]), sd_value_unref(v[4]);
        sd_value_unref(v[5]), sd_value_unref(v[9]);
    } else {
        static const char *const nn[] = {"noise_seed"}, *const ng[] = {"model", "conditioning"},
                                 *const nk[] = {"sampler_name"},
                                 *const nb[] = {"model", "scheduler", "steps", "denoise"},
                                 *const na[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
        sd_value *seed = sd_value_int((int64_t)jnum(s, "seed"));
        sd_value *noise = node(env, "RandomNoise", nn, &seed, 1, 0, &err);
        sd_value *guider = node(env, "BasicGuider", ng, (sd_value *const[]){model, cv}, 2, 0, &err);
        sd_value *sname = sd_value_string(jstr(s, "sampler"));
        sd_value *sampler = node(env, "KSamplerSelect", nk, &sname, 1, 0, &err);
        sd_value *bv[4] = {model, sd_value_string(jstr(s, "scheduler")), sd_value_int((int64_t)jnum(s, "steps")),
                           sd_value_float(jnum(s, "denoise"))};
        sd_value *sigmas = node(env, "BasicScheduler", nb, bv, 4, 0, &err);
        if (sigmas) sd_golden_compare(case_id, tensors, g, "sigmas", sd_value_as_tensor(sigmas));
        if (noise && guider && sampler && sigmas) {
            sd_value *av[5] = {noise, guider, sampler, sigmas, latent};
            out = node(env, "SamplerCustomAdvanced", na, av, 5, 0, &err);
            den = node(env, "SamplerCustomAdvanced", na, av, 5, 1, &err);
        }
        sd_value_unref(seed), sd_value_unref(sname), sd_value_unref(bv[1]), sd_value_unref(bv[2]);
        sd_value_unref(bv[3]);
        sd_value_unref(noise), sd_value_unref(guider), sd_value_unref(sampler), sd_value_unref(sigmas);
    }
    sd_golden_compare(case_id, tensors, g, "latent_out", samples_of(out));
    if (cJSON_GetObjectItemCaseSensitive(tensors, "denoised_out"))
        sd_golden_compare(case_id, tensors, g, "denoised_out", samples_of(den));
    sd_value_unref(out);
    sd_value_unref(den);
    sd_value_unref(latent);
done:
    if (err.code && !model) CHECK_MSG(0, "%s: %s", case_id, err.msg);
    sd_value_unref(cv);
    sd_tensor_unref(cond), sd_tensor_unref(pooled);
    sd_value_unref(model);
    if (g) sd_st_close(g);
}

int main(void) {
    char path[4400];
    const char *gdir = sd_golden_topic_dir("gguf");
    cJSON *gm = sd_golden_manifest(gdir);
    const char *tmp = sd_test_tmpdir("golden_gguf_e2e");
    char models[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    const cJSON *mm;
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(gm, "models")) {
        snprintf(path, sizeof path, "%s/%s", gdir, jstr(mm, "file"));
        link_as(path, models, jstr(mm, "comfy_name"));
    }
    sd_env env;
    sd_backend *be = NULL;
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(gm, "e2e")) {
        case_id = jstr(c, "id");
        printf("case %s\n", case_id);
        run_case(&env, gdir, gm, c);
        n++;
    }
    CHECK_MSG(n > 0, "no e2e case in %s", gdir);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(gm);
    return sd_test_finish();
}
