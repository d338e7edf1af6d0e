/* test_golden_flux_model.c - the Flux MODEL side against the Flux set's
 * end-to-end cases (flux/manifest.json, component "e2e"), with the
 * conditioning each case recorded (its text encoder is tested elsewhere):
 *
 *   - the MODEL comes from the node a ComfyUI workflow uses: UNETLoader on
 *     the manifest's diffusion_models/ file (dev when the case sets a
 *     guidance, else schnell) or, for a case made through
 *     CheckpointLoaderSimple, that node on the checkpoints/ file; the files
 *     are linked under their comfy_name in a models folder (UNETLoader's
 *     also under the older unet/ name);
 *   - the MODEL's default model sampling is the family's (dev:
 *     ModelSamplingFlux shift 1.15; schnell: ModelSamplingDiscreteFlow
 *     shift 1) and its timestep(sigma) the recorded stepN.timestep;
 *   - each recorded step goes through the conditioned model call the
 *     samplers drive (sd_cond_model_eval): x = stepN.x at sigma =
 *     stepN.timestep, conditioning = [{cond: positive.cond, pooled_output:
 *     positive.pooled, guidance: positive.guidance when recorded}]; the
 *     network's input, timestep and guidance (the forward tap) are compared
 *     with stepN.x / .timestep / .guidance, and the call's result with
 *     stepN.model_out. That tensor is what the reference's unet wrapper
 *     (ComfyUI's model_function_wrapper around apply_model) returned:
 *     apply_model's x0 prediction x - v * sigma, not the raw velocity v the
 *     manifest's description names (at sigma 1 it equals x - v, the
 *     negative of v shifted by x; at every step it equals x - v * sigma
 *     within 4e-5 of our v);
 *   - guidance semantics: no "guidance" key feeds 3.5, a none value feeds
 *     none (FluxDisableGuidance), schnell feeds none whatever is set;
 *   - UNETLoader weight_dtype fp8_e4m3fn / fp8_e5m2 keep every tensor in
 *     that type, rounded as torch rounds (core/dtype.h), and still run;
 *   - bad files: a truncated copy of each model file given to its loader,
 *     a Flux file given to CheckpointLoaderSimple's and UNETLoader's
 *     sampler with a wrongly shaped tensor: errors naming the node input
 *     and the file, never a crash.
 * Tensors the whole workflow makes (noise, sigmas, latent_out, images) are
 * the workflow test's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* models/<rel> -> target (a symlink; folders made). */
static void link_as(const char *target, const char *models, const char *rel) {
    char src[4200], dst[4200], cmd[8600];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", models, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

/* The manifest model whose comfy_name starts with `folder`/ and, for
 * diffusion models, whose guidance_embed is `guidance` (-1: any). */
static cJSON *model_in(cJSON *manifest, const char *folder, int guidance) {
    cJSON *m;
    size_t fl = strlen(folder);
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "comfy_name"));
        if (!cn || strncmp(cn, folder, fl) != 0 || cn[fl] != '/') continue;
        cJSON *ge = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"),
                                                     "guidance_embed");
        if (guidance >= 0 && (!ge || cJSON_IsTrue(ge) != guidance)) continue;
        return m;
    }
    return NULL;
}

/* ---- recording the forwards ------------------------------------------------ */

typedef struct fwd_log {
    int n;
    sd_tensor *x, *out;
    float t, g;
    int has_g;
} fwd_log;

static void on_forward(void *ud, const sd_tensor *x, const float *ts, const float *gd, const sd_tensor *out) {
    fwd_log *l = ud;
    l->n++;
    sd_tensor_unref(l->x);
    sd_tensor_unref(l->out);
    l->x = sd_tensor_clone(x);
    l->out = sd_tensor_clone(out);
    l->t = ts[0];
    l->has_g = gd != NULL;
    l->g = gd ? gd[0] : 0;
}

/* [{cond, pooled_output[, guidance]}]; guidance_kind 0: no key, 1: value g,
 * 2: none. */
static sd_value *conditioning(sd_tensor *cond, sd_tensor *pooled, int guidance_kind, double g) {
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "cond", nt_tensor_value(sd_tensor_ref(cond)));
    sd_value_dict_set(d, "pooled_output", nt_tensor_value(sd_tensor_ref(pooled)));
    if (guidance_kind == 1) sd_value_dict_set(d, "guidance", sd_value_float(g));
    if (guidance_kind == 2) sd_value_dict_set(d, "guidance", sd_value_none());
    sd_value *l = sd_value_list();
    sd_value_list_append(l, d);
    return l;
}

/* One conditioned model call; fills the log. */
static sd_status eval_step(sd_dmodel *dm, const sd_model_sampling *ms, const sd_value *cond,
                           sd_tensor *x, float sigma, fwd_log *log, sd_tensor **den, sd_error *err) {
    sd_cond_model m = {.be = dm->be, .dm = *dm, .ms = ms, .conds = {cond, NULL},
                       .image_w = x->shape[3] * 8, .image_h = x->shape[2] * 8,
                       .forward_tap = on_forward, .tap_ud = log};
    *den = sd_tensor_new(SD_F32, x->ndim, x->shape);
    int conds[1] = {SD_COND_POSITIVE};
    return sd_cond_model_eval(&m, x, sigma, conds, 1, den, err);
}

static sd_tensor *scalar(float v) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
    sd_tensor_f32(t)[0] = v;
    return t;
}

/* ---- one case ------------------------------------------------------------------ */

typedef struct model_run {
    nt_tiny_sd1 *env; /* env, backend, store, registry (no SD model used) */
    sd_value *model;  /* MODEL */
} model_run;

static sd_value *load_model(sd_env *env, cJSON *manifest, const char *dir, cJSON *c, const char *models,
                            const char *weight_dtype, int *is_ckpt) {
    const char *desc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "description"));
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    int guidance = cJSON_GetObjectItemCaseSensitive(settings, "guidance") != NULL;
    *is_ckpt = desc && strstr(desc, "CheckpointLoaderSimple") != NULL;
    cJSON *m = *is_ckpt ? model_in(manifest, "checkpoints", -1) : model_in(manifest, "diffusion_models", guidance);
    CHECK_MSG(m != NULL, "%s: no manifest model for the case", case_id);
    if (!m) return NULL;
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
    const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "comfy_name"));
    char src[2400];
    snprintf(src, sizeof src, "%s/%s", dir, file);
    link_as(src, models, cn);
    const char *base = strchr(cn, '/') + 1;
    sd_node_ctx ctx = {.env = env, .node_id = "1"};
    sd_error err;
    sd_error_clear(&err);
    sd_value *out[3] = {NULL, NULL, NULL};
    sd_status rc;
    if (*is_ckpt) {
        ctx.class_type = "CheckpointLoaderSimple";
        const char *names[1] = {"ckpt_name"};
        sd_value *vals[1] = {sd_value_string(base)};
        rc = nt_run_named(&ctx, names, vals, 1, out, &err);
        sd_value_unref(vals[0]);
    } else {
        /* also under the older unet/ folder name, which UNETLoader lists too */
        char rel[1200];
        snprintf(rel, sizeof rel, "unet/old-%s", base);
        link_as(src, models, rel);
        ctx.class_type = "UNETLoader";
        const char *names[2] = {"unet_name", "weight_dtype"};
        sd_value *vals[2] = {sd_value_string(base), sd_value_string(weight_dtype)};
        rc = nt_run_named(&ctx, names, vals, 2, out, &err);
        sd_value_unref(vals[0]);
        sd_value_unref(vals[1]);
        if (!rc) { /* the same file found through unet/ */
            sd_value *o2[1] = {NULL};
            sd_value *v2[2] = {sd_value_string(rel + 5), sd_value_string(weight_dtype)};
            CHECK_OK(nt_run_named(&ctx, names, v2, 2, o2, &err), &err);
            sd_value_unref(o2[0]);
            sd_value_unref(v2[0]);
            sd_value_unref(v2[1]);
        }
    }
    CHECK_OK(rc, &err);
    sd_value_unref(out[1]);
    sd_value_unref(out[2]);
    return out[0];
}

static void run_case(sd_env *env, const char *models, const char *dir, cJSON *manifest, cJSON *c) {
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    int is_ckpt = 0;
    sd_value *model = g ? load_model(env, manifest, dir, c, models, "default", &is_ckpt) : NULL;
    sd_model_ref *mref = NULL;
    if (!model || sd_nodes_in_model(&model, 0, "model", &mref, &err)) goto done;
    const sd_ckpt_info *info = sd_checkpoint_info(mref->ckpt);
    CHECK_MSG(info->family == SD_CKPT_FLUX, "%s: the MODEL is %s, not flux", case_id,
              sd_ckpt_family_name(info->family));
    sd_dmodel dm;
    CHECK_OK(sd_nodes_model_dmodel(mref, &dm, &err), &err);
    if (err.code) goto done;
    CHECK(dm.info.kind == SD_DMODEL_FLUX && dm.info.guidance == info->flux.guidance_embed);
    /* the fp8 checkpoint's matrices stay F8_E4M3 (default weight_dtype) */
    if (is_ckpt) {
        sd_bt **w = sd_flux_param(dm.net, "double_blocks.0.img_attn.qkv.weight");
        CHECK_MSG(w && *w && (*w)->dtype == SD_F8_E4M3, "%s: fp8 checkpoint weights not kept as stored", case_id);
    }
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_nodes_model_sampling_of(mref->ckpt, &mref->patches, ms);
    CHECK_MSG(info->flux.guidance_embed ? ms->kind == SD_MS_FLUX && ms->shift == SD_MS_FLUX_DEFAULT_SHIFT
                                        : ms->kind == SD_MS_FLOW && ms->shift == 1.0 && ms->multiplier == 1.0,
              "%s: the MODEL's default model sampling is not the family's", case_id);

    sd_tensor *cond = sd_st_tensor_f32(g, "positive.cond", &err);
    sd_tensor *pooled = sd_st_tensor_f32(g, "positive.pooled", &err);
    sd_tensor *gt = cJSON_GetObjectItemCaseSensitive(tensors, "positive.guidance")
                        ? sd_st_tensor_f32(g, "positive.guidance", &err)
                        : NULL;
    CHECK_MSG(cond && pooled, "%s: no recorded conditioning", case_id);
    cJSON *gs = cJSON_GetObjectItemCaseSensitive(settings, "guidance");
    double gval = gt ? sd_tensor_f32(gt)[0] : gs ? gs->valuedouble : 0;
    sd_value *cv = cond && pooled ? conditioning(cond, pooled, gt || gs ? 1 : 0, gval) : NULL;
    int steps = 0;
    for (int i = 0; cv; i++) {
        char nm[64], nx[64];
        snprintf(nx, sizeof nx, "step%d.x", i);
        if (!cJSON_GetObjectItemCaseSensitive(tensors, nx)) break;
        snprintf(nm, sizeof nm, "step%d.timestep", i);
        sd_tensor *x = sd_st_tensor_f32(g, nx, &err), *ts = sd_st_tensor_f32(g, nm, &err);
        if (!x || !ts) {
            CHECK_MSG(0, "%s: step %d inputs: %s", case_id, i, err.msg);
            sd_tensor_unref(x), sd_tensor_unref(ts);
            break;
        }
        float sigma = sd_tensor_f32(ts)[0]; /* timestep = sigma for the flow schedules */
        fwd_log log = {0};
        sd_tensor *den = NULL;
        CHECK_OK(eval_step(&dm, ms, cv, x, sigma, &log, &den, &err), &err);
        CHECK_MSG(log.n == 1, "%s step %d: %d forwards for one entry", case_id, i, log.n);
        sd_tensor *tt = scalar(sd_ms_timestep(ms, sigma));
        sd_golden_compare(case_id, tensors, g, nm, tt);
        sd_golden_compare(case_id, tensors, g, nx, log.x);
        snprintf(nm, sizeof nm, "step%d.model_out", i);
        sd_golden_compare(case_id, tensors, g, nm, den);
        snprintf(nm, sizeof nm, "step%d.guidance", i);
        if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) {
            CHECK_MSG(log.has_g, "%s: step %d fed no guidance", case_id, i);
            sd_tensor *gg = scalar(log.g);
            sd_golden_compare(case_id, tensors, g, nm, gg);
            sd_tensor_unref(gg);
        } else {
            CHECK_MSG(!log.has_g == !info->flux.guidance_embed, "%s: step %d guidance fed to a %s model",
                      case_id, i, info->flux.guidance_embed ? "dev" : "schnell");
        }
        sd_tensor_unref(tt), sd_tensor_unref(den), sd_tensor_unref(x), sd_tensor_unref(ts);
        sd_tensor_unref(log.x), sd_tensor_unref(log.out);
        steps++;
    }
    CHECK_MSG(steps > 0, "%s: no recorded steps", case_id);

    /* guidance semantics on the first step's x */
    sd_tensor *x0 = cv ? sd_st_tensor_f32(g, "step0.x", &err) : NULL;
    sd_tensor *t0 = cv ? sd_st_tensor_f32(g, "step0.timestep", &err) : NULL;
    for (int kind = 0; x0 && t0 && kind < 3; kind++) {
        sd_value *cg = conditioning(cond, pooled, kind, 7.25);
        fwd_log log = {0};
        sd_tensor *den = NULL;
        CHECK_OK(eval_step(&dm, ms, cg, x0, sd_tensor_f32(t0)[0], &log, &den, &err), &err);
        if (!info->flux.guidance_embed) CHECK_MSG(!log.has_g, "%s: schnell fed a guidance", case_id);
        else if (kind == 0) CHECK_MSG(log.has_g && log.g == 3.5f, "%s: no guidance key must feed 3.5", case_id);
        else if (kind == 1) CHECK_MSG(log.has_g && log.g == 7.25f, "%s: guidance 7.25 fed as %g", case_id, log.g);
        else CHECK_MSG(!log.has_g, "%s: guidance none must feed none", case_id);
        sd_tensor_unref(den), sd_tensor_unref(log.x), sd_tensor_unref(log.out);
        sd_value_unref(cg);
    }
    sd_tensor_unref(x0), sd_tensor_unref(t0);
    sd_value_unref(cv);
    sd_tensor_unref(cond), sd_tensor_unref(pooled), sd_tensor_unref(gt);
    free(ms);
done:
    sd_value_unref(model);
    sd_st_close(g);
}

/* UNETLoader's fp8 weight dtypes: every tensor of the MODEL in that type,
 * each value torch's rounding of the stored one, and a forward still runs. */
static void run_fp8_casts(sd_env *env, const char *models, const char *dir, cJSON *manifest, cJSON *c) {
    static const char *const names[2] = {"fp8_e4m3fn", "fp8_e5m2"};
    static const sd_dtype dts[2] = {SD_F8_E4M3, SD_F8_E5M2};
    for (int k = 0; k < 2; k++) {
        int is_ckpt = 0;
        sd_value *model = load_model(env, manifest, dir, c, models, names[k], &is_ckpt);
        sd_model_ref *mref = NULL;
        sd_error err;
        sd_error_clear(&err);
        if (!model || sd_nodes_in_model(&model, 0, "model", &mref, &err)) {
            sd_value_unref(model);
            continue;
        }
        sd_dmodel dm;
        CHECK_OK(sd_nodes_model_dmodel(mref, &dm, &err), &err);
        if (!err.code) {
            const char *key = "double_blocks.0.img_mlp.0.weight", *bkey = "final_layer.linear.bias";
            sd_bt **w = sd_flux_param(dm.net, key), **b = sd_flux_param(dm.net, bkey);
            CHECK_MSG(w && *w && (*w)->dtype == dts[k] && b && *b && (*b)->dtype == dts[k],
                      "weight_dtype %s: tensors not kept as %s", names[k], sd_dtype_name(dts[k]));
            /* each value: the stored value rounded as torch rounds */
            sd_st_file *f = NULL;
            CHECK_OK(sd_st_open(sd_checkpoint_path(mref->ckpt), &f, &err), &err);
            sd_tensor *src = f ? sd_st_tensor_f32(f, key, &err) : NULL;
            sd_tensor *got = w && *w ? sd_bt_to_host(*w) : NULL;
            int64_t bad = 0;
            for (int64_t i = 0; src && got && i < sd_tensor_numel(src); i++) {
                float v = sd_tensor_f32(src)[i];
                float want = k == 0 ? sd_f8_e4m3_to_f32(sd_f32_to_f8_e4m3(v)) : sd_f8_e5m2_to_f32(sd_f32_to_f8_e5m2(v));
                if (sd_tensor_f32(got)[i] != want) bad++;
            }
            CHECK_MSG(src && got && bad == 0, "weight_dtype %s: %lld values not torch's rounding", names[k],
                      (long long)bad);
            sd_tensor_unref(src), sd_tensor_unref(got);
            sd_st_close(f);
            printf("  %s: UNETLoader weight_dtype %s keeps %s weights, rounded as torch\n", case_id, names[k],
                   sd_dtype_name(dts[k]));
        }
        sd_value_unref(model);
    }
}

/* ---- bad files -------------------------------------------------------------- */

static void copy_truncated(const char *src, const char *dst, double keep) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    CHECK_MSG(in && out, "copy %s -> %s", src, dst);
    if (in && out) {
        fseek(in, 0, SEEK_END);
        long n = ftell(in), want = (long)((double)n * keep);
        fseek(in, 0, SEEK_SET);
        char buf[65536];
        long done = 0;
        while (done < want) {
            size_t k = fread(buf, 1, (size_t)(want - done < (long)sizeof buf ? want - done : (long)sizeof buf), in);
            if (k == 0) break;
            fwrite(buf, 1, k, out);
            done += (long)k;
        }
    }
    if (in) fclose(in);
    if (out) fclose(out);
}

static void expect_load_error(sd_env *env, const char *cls, const char *input, const char *name,
                              const char *mention) {
    sd_node_ctx ctx = {.env = env, .node_id = "9", .class_type = cls};
    const char *names[2] = {input, "weight_dtype"};
    sd_value *vals[2] = {sd_value_string(name), sd_value_string("default")};
    sd_value *out[3] = {NULL, NULL, NULL};
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = nt_run_named(&ctx, names, vals, strcmp(cls, "UNETLoader") == 0 ? 2 : 1, out, &err);
    char msg[4096];
    sd_error_format(&err, msg, sizeof msg);
    CHECK_MSG(rc != SD_OK && strstr(msg, input) && strstr(msg, mention), "%s(%s): rc %d: %s (want '%s')", cls,
              name, rc, msg, mention);
    printf("  bad file, %s: %s\n", cls, msg);
    nt_free_values(out, 3);
    sd_value_unref(vals[0]);
    sd_value_unref(vals[1]);
}

static void run_bad_files(sd_env *env, const char *models, const char *dir, cJSON *manifest) {
    case_id = "bad files";
    cJSON *ck = model_in(manifest, "checkpoints", -1), *dm = model_in(manifest, "diffusion_models", -1);
    char src[2400], dst[4400];
    if (ck) {
        snprintf(src, sizeof src, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ck, "file")));
        snprintf(dst, sizeof dst, "%s/checkpoints/truncated-fp8.safetensors", models);
        copy_truncated(src, dst, 0.5);
        expect_load_error(env, "CheckpointLoaderSimple", "ckpt_name", "truncated-fp8.safetensors",
                          "truncated-fp8.safetensors");
    }
    if (dm) {
        snprintf(src, sizeof src, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(dm, "file")));
        snprintf(dst, sizeof dst, "%s/diffusion_models/truncated.safetensors", models);
        copy_truncated(src, dst, 0.8);
        expect_load_error(env, "UNETLoader", "unet_name", "truncated.safetensors", "truncated.safetensors");
        /* the header alone, cut inside its JSON */
        snprintf(dst, sizeof dst, "%s/diffusion_models/header-cut.safetensors", models);
        copy_truncated(src, dst, 0.001);
        expect_load_error(env, "UNETLoader", "unet_name", "header-cut.safetensors", "header-cut.safetensors");
    }
    CHECK_MSG(ck && dm, "manifest lacks a checkpoint or a diffusion model");
}

int main(void) {
    const char *dir = sd_golden_family_dir("flux");
    cJSON *manifest = sd_golden_manifest(dir);
    int n = sd_golden_require_cases(manifest, dir, "e2e");
    CHECK_MSG(n > 0, "manifest lists no e2e case");
    sd_backend *be = sd_golden_backend();
    if (!be) return sd_test_finish();
    nt_tiny_sd1 t;
    memset(&t, 0, sizeof t);
    sd_error err;
    char models[4200];
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("flux_model"));
    CHECK_OK(sd_env_init(&t.env, &err), &err);
    CHECK_OK(sd_env_set(&t.env, &t.env.models_dir, models, &err), &err);
    t.backend = be;
    t.store = sd_model_store_new();
    t.env.backend = be;
    t.env.models = t.store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    int fp8_done = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (!sd_golden_case_is(c, "e2e")) continue;
        case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        printf("case %s\n", case_id);
        sd_golden_set_depth(0);
        run_case(&t.env, models, dir, manifest, c);
        const char *desc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "description"));
        if (!fp8_done && desc && !strstr(desc, "CheckpointLoaderSimple")) {
            run_fp8_casts(&t.env, models, dir, manifest, c);
            fp8_done = 1;
        }
    }
    run_bad_files(&t.env, models, dir, manifest);
    sd_model_store_free(t.store);
    sd_backend_free(be);
    sd_env_cleanup(&t.env);
    sd_registry_reset();
    cJSON_Delete(manifest);
    return sd_test_finish();
}
