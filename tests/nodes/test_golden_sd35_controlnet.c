/* test_golden_sd35_controlnet.c - Stability's SD3.5 ControlNets against
 * ComfyUI (tests/data/sd35_controlnet: gen/make_sd35_controlnet.py, its
 * manifest and the tensors ComfyUI's own code wrote), on the SD3 set's tiny
 * MMDiT, for every ControlNet the manifest lists:
 *   K.fwd.*  the forward (the file loaded by sd_controlnet_load, the MMDiT's
 *            embedders standing in as ControlNetSD35.pre_run copies them):
 *            every entry of ComfyUI's "output" list;
 *   K.get.*  ComfyUI's get_control from an IMAGE through the control chain
 *            (sd_control_chain_run, the link's strength and VAE): the latent
 *            hint (resize, the control_type's preprocessing, VAE encode,
 *            SD3's scale and shift) and the merged output list;
 *   K.dit.*  the MMDiT forward with that list as its control;
 *   ks_*     UNETLoader + ModelSamplingSD3 + ControlNetLoader (the case's
 *            ControlNet) + ControlNetApplySD3 + KSampler against
 *            latent_out, and KSampler without the ControlNet against
 *            latent_nocontrol (a control not applied cannot pass).
 * Then malformed files at the loader. Cases, sizes and tolerances come from
 * the manifests. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/controlnet/controlnet.h"
#include "models/sampling/model_sampling.h"
#include "models/sd3/sd3_controlnet.h"
#include "models/vae/vae.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *case_id = "";

static double num(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    CHECK_MSG(cJSON_IsNumber(v), "%s: setting %s missing", case_id, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static sd_tensor *ref(sd_st_file *g, const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", name);
    return t;
}

static sd_bt *up(sd_backend *be, sd_st_file *g, const char *name) {
    sd_tensor *t = ref(g, name);
    sd_bt *b = t ? sd_bt_from_host(be, t, SD_F32) : NULL;
    sd_tensor_unref(t);
    return b;
}

static void tol_for(cJSON *tensors, cJSON *tol, const char *group, const char *name) {
    cJSON *t = cJSON_AddObjectToObject(tensors, name);
    cJSON *g = cJSON_GetObjectItemCaseSensitive(tol, group);
    CHECK_MSG(g != NULL, "manifest has no tolerance for %s", group);
    if (g) cJSON_AddItemToObject(t, "tolerance", cJSON_Duplicate(g, 1));
}

static void compare_bt(cJSON *tensors, sd_st_file *g, const char *name, sd_bt *b) {
    sd_tensor *got = b ? sd_bt_to_host(b) : NULL;
    CHECK_MSG(got != NULL, "%s: nothing computed", name);
    sd_golden_compare(case_id, tensors, g, name, got);
    sd_tensor_unref(got);
}

/* The number of K.<what>.output.N entries in the reference. */
static int ref_outputs(sd_st_file *g, const char *k, const char *what) {
    char name[96];
    int n = 0;
    for (;; n++) {
        snprintf(name, sizeof name, "%s.%s.output.%d", k, what, n);
        if (!sd_st_find(g, name)) return n;
    }
}

static void one(sd_backend *be, sd_st_file *g, cJSON *m, cJSON *tol, const char *k, cJSON *c, const char *cn_path,
                sd_sd3 *dit, sd_vae *vae) {
    sd_error err;
    sd_st_file *f = NULL;
    sd_controlnet *cn = NULL;
    cJSON *tensors = cJSON_CreateObject();
    case_id = k;
    CHECK_OK(sd_st_open(cn_path, &f, &err), &err);
    if (f) CHECK_OK(sd_controlnet_load(be, f, SD_F32, &cn, &err), &err);
    sd_st_close(f);
    if (!cn) goto done;
    CHECK(sd_controlnet_kind_of(cn) == SD_CONTROLNET_MMDIT);
    sd_sd3_cn *s = sd_controlnet_mmdit(cn);
    const sd_sd3_config *mc = sd_sd3_get_config(dit);
    CHECK_MSG(sd_sd3_cn_is_sd35(s) && sd_sd3_cn_n_blocks(s) == (int)num(c, "blocks") &&
                  sd_sd3_cn_control_type(s) == (int)num(c, "control_type"),
              "%s: blocks %d control_type %d", k, sd_sd3_cn_n_blocks(s), sd_sd3_cn_control_type(s));
    CHECK_OK(sd_controlnet_check_fit_mmdit(cn, mc, &err), &err);
    /* ComfyUI's list, past the model's depth, is never read: ours stops there */
    int n_ref = ref_outputs(g, k, "fwd"), n_out = sd_sd3_cn_n_outputs(s);
    CHECK_MSG(n_ref > 0 && n_out == (n_ref < mc->depth ? n_ref : mc->depth), "%s: %d outputs, ComfyUI's %d", k,
              n_out, n_ref);

    char name[96];
    sd_bt *x = up(be, g, "fwd.x"), *ctx = up(be, g, "fwd.context"), *y = up(be, g, "fwd.y");
    snprintf(name, sizeof name, "%s.fwd.hint", k);
    sd_bt *hint = up(be, g, name);
    sd_tensor *ts = ref(g, "fwd.timesteps");
    sd_bt *outs[SD_SD3_MAX_DEPTH] = {0};
    if (x && ctx && y && hint && ts) {
        CHECK_OK(sd_sd3_cn_forward(s, dit, x, sd_tensor_f32(ts), hint, ctx, y, outs, &err), &err);
        for (int j = 0; j < n_out && outs[0]; j++) {
            snprintf(name, sizeof name, "%s.fwd.output.%d", k, j);
            tol_for(tensors, tol, "fwd", name);
            compare_bt(tensors, g, name, outs[sd_sd3_cn_output_block(s, j)]);
        }
    }
    for (int i = 0; i < SD_SD3_MAX_DEPTH; i++) sd_bt_free(outs[i]);
    sd_bt_free(x), sd_bt_free(ctx), sd_bt_free(y), sd_bt_free(hint);
    sd_tensor_unref(ts);

    /* get_control through the chain: hint, strength, merged list, the MMDiT */
    cJSON *gc = cJSON_GetObjectItemCaseSensitive(m, "get_control");
    sd_tensor *img = ref(g, "get.image"), *sig = ref(g, "get.sigma");
    sd_bt *gx = up(be, g, "get.x"), *gctx = up(be, g, "get.context"), *gy = up(be, g, "get.y");
    if (img && sig && gx && gctx && gy && vae) {
        sd_control_link l = {.cn = cn, .image = img, .strength = num(c, "strength"), .end_percent = 1, .vae = vae};
        sd_tensor *h = NULL;
        snprintf(name, sizeof name, "%s.get.hint", k);
        tol_for(tensors, tol, "hint", name);
        CHECK_OK(sd_control_mmdit_hint(&l, NULL, (int64_t)num(gc, "latent_height"), (int64_t)num(gc, "latent_width"),
                                       &h, &err),
                 &err);
        sd_golden_compare(case_id, tensors, g, name, h);
        sd_tensor_unref(h);
        sd_model_sampling ms;
        sd_model_sampling_init_sd3(&ms);
        float sigma = sd_tensor_f32(sig)[0], t = sigma * 1000.0f; /* ModelSamplingDiscreteFlow.timestep */
        sd_control_call call = {.ms = &ms, .mmdit = mc, .mmdit_net = dit, .sigma = sigma, .x_in = gx,
                                .batched = 1, .timesteps = &t, .context = gctx, .y = gy};
        sd_control_residuals res;
        CHECK_OK(sd_control_chain_run(&l, 1, &call, &res, &err), &err);
        CHECK_MSG(res.n_dit == n_out, "%s: chain gives %d entries, %d expected", k, res.n_dit, n_out);
        for (int j = 0; j < res.n_dit; j++) {
            snprintf(name, sizeof name, "%s.get.output.%d", k, j);
            tol_for(tensors, tol, "get", name);
            compare_bt(tensors, g, name, res.dit[j]);
        }
        if (res.n_dit) {
            sd_sd3_extra e = {NULL, 0, res.dit, res.n_dit};
            sd_bt *o = NULL;
            snprintf(name, sizeof name, "%s.dit.out", k);
            tol_for(tensors, tol, "dit", name);
            CHECK_OK(sd_sd3_forward_ex(dit, gx, &t, gctx, gy, &e, &o, &err), &err);
            compare_bt(tensors, g, name, o);
            sd_bt_free(o);
        }
        sd_control_residuals_free(&res);
    }
    sd_tensor_unref(img), sd_tensor_unref(sig);
    sd_bt_free(gx), sd_bt_free(gctx), sd_bt_free(gy);
done:
    sd_controlnet_free(cn);
    cJSON_Delete(tensors);
}

/* ---- node level: KSampler with ControlNetApplySD3 ------------------------------------ */

static const char *str(cJSON *o, const char *k) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    CHECK_MSG(v != NULL, "%s: setting %s missing", case_id, k);
    return v ? v : "";
}

static void link_as(const char *target, const char *models, const char *rel) {
    char src[4200], cwd[2048], dst[4200], cmd[8600];
    if (target[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(src, sizeof src, "%s", target);
    else snprintf(src, sizeof src, "%s/%s", cwd, target);
    snprintf(dst, sizeof dst, "%s/%s", models, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static sd_value *conditioning(sd_st_file *g, const char *which) {
    char k1[64], k2[64];
    snprintf(k1, sizeof k1, "%s.cond", which);
    snprintf(k2, sizeof k2, "%s.pooled", which);
    sd_tensor *c = ref(g, k1), *p = ref(g, k2);
    if (!c || !p) {
        sd_tensor_unref(c), sd_tensor_unref(p);
        return NULL;
    }
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "cond", nt_tensor_value(c));
    sd_value_dict_set(d, "pooled_output", nt_tensor_value(p));
    sd_value *l = sd_value_list();
    sd_value_list_append(l, d);
    return l;
}

static sd_value *run1(sd_env *env, const char *cls, const char **names, sd_value **vals, int *own, int n,
                      sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = cls};
    return nt_run1_named(&ctx, names, vals, n, own, err);
}

static sd_tensor *ksample(sd_env *env, sd_value *model, cJSON *c, sd_value *pos, sd_value *neg, sd_error *err) {
    const char *ln[3] = {"width", "height", "batch_size"};
    sd_value *lv[3] = {sd_value_int((int64_t)num(c, "width")), sd_value_int((int64_t)num(c, "height")),
                       sd_value_int(1)};
    int own3[3] = {1, 1, 1};
    sd_value *latent = run1(env, "EmptySD3LatentImage", ln, lv, own3, 3, err);
    if (!latent) return NULL;
    sd_node_ctx ctx = {.env = env, .node_id = "5", .class_type = "KSampler"};
    const char *kn[10] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                          "positive", "negative", "latent_image", "denoise"};
    sd_value *kv[10] = {model, sd_value_int((int64_t)num(c, "seed")), sd_value_int((int64_t)num(c, "steps")),
                        sd_value_float(num(c, "cfg")), sd_value_string(str(c, "sampler")),
                        sd_value_string(str(c, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    sd_value *out[1] = {NULL};
    sd_status rc = nt_run_named(&ctx, kn, kv, 10, out, err);
    for (int i = 1; i < 10; i++)
        if (i != 6 && i != 7) sd_value_unref(kv[i]);
    if (rc) return NULL;
    sd_tensor *s = sd_value_dict_tensor(out[0], "samples");
    s = s ? sd_tensor_ref(s) : NULL;
    sd_value_unref(out[0]);
    return s;
}

static void ks_cases(sd_backend *be, sd_st_file *g, cJSON *m, cJSON *tol, const char *dir, const char *sd3dir,
                     const char *mfile, const char *cfile) {
    sd_error err;
    sd_error_clear(&err);
    sd_env env;
    char models[4200], p[4400];
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("sd35_controlnet_ks"));
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    snprintf(p, sizeof p, "%s/%s", sd3dir, mfile);
    link_as(p, models, "diffusion_models/sd3.5_tiny.safetensors");
    snprintf(p, sizeof p, "%s/%s", sd3dir, cfile);
    link_as(p, models, "checkpoints/sd3.5_tiny_ckpt.safetensors");
    cJSON *cns = cJSON_GetObjectItemCaseSensitive(m, "controlnets"), *c;
    cJSON_ArrayForEach(c, cns) {
        snprintf(p, sizeof p, "%s/%s", dir, str(c, "file"));
        char rel[256];
        snprintf(rel, sizeof rel, "controlnet/sd3.5_large_controlnet_%s.safetensors", c->string);
        link_as(p, models, rel);
    }
    const char *un[2] = {"unet_name", "weight_dtype"};
    sd_value *uv[2] = {sd_value_string("sd3.5_tiny.safetensors"), sd_value_string("default")};
    int uo[2] = {1, 1};
    sd_value *unet = run1(&env, "UNETLoader", un, uv, uo, 2, &err);
    sd_node_ctx cctx = {.env = &env, .node_id = "9", .class_type = "CheckpointLoaderSimple"};
    const char *ckn[1] = {"ckpt_name"};
    sd_value *ckv[1] = {sd_value_string("sd3.5_tiny_ckpt.safetensors")};
    sd_value *outs[3] = {NULL, NULL, NULL};
    CHECK_OK(nt_run_named(&cctx, ckn, ckv, 1, outs, &err), &err);
    sd_value_unref(ckv[0]);
    sd_value *vae = outs[2];
    outs[2] = NULL;
    nt_free_values(outs, 3);
    sd_value *pos = conditioning(g, "positive"), *neg = conditioning(g, "negative");
    cJSON *tensors = cJSON_CreateObject();
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        case_id = str(c, "id");
        n++;
        if (!unet || !vae || !pos || !neg) break;
        char name[96], cname[256];
        snprintf(cname, sizeof cname, "sd3.5_large_controlnet_%s.safetensors", str(c, "controlnet"));
        const char *cn_n[1] = {"control_net_name"};
        sd_value *cnv[1] = {sd_value_string(cname)};
        int co[1] = {1};
        sd_value *cn = run1(&env, "ControlNetLoader", cn_n, cnv, co, 1, &err);
        CHECK_MSG(cn != NULL, "%s: ControlNetLoader: %s", case_id, err.msg);
        const char *mn[2] = {"model", "shift"};
        sd_value *mv[2] = {unet, sd_value_float(num(c, "shift"))};
        int mo[2] = {0, 1};
        sd_value *ms = run1(&env, "ModelSamplingSD3", mn, mv, mo, 2, &err);
        snprintf(name, sizeof name, "%s.image", case_id);
        sd_value *image = nt_tensor_value(ref(g, name));
        sd_value *pn[2] = {NULL, NULL};
        if (cn && ms && image) {
            sd_node_ctx actx = {.env = &env, .node_id = "6", .class_type = "ControlNetApplySD3"};
            const char *an[8] = {"positive", "negative", "control_net", "image", "strength", "start_percent",
                                 "end_percent", "vae"};
            sd_value *av[8] = {pos, neg, cn, image, sd_value_float(num(c, "strength")),
                               sd_value_float(num(c, "start_percent")), sd_value_float(num(c, "end_percent")), vae};
            CHECK_OK(nt_run_named(&actx, an, av, 8, pn, &err), &err);
            for (int i = 4; i < 7; i++) sd_value_unref(av[i]);
        }
        snprintf(name, sizeof name, "%s.latent_out", case_id);
        tol_for(tensors, tol, "ks", name);
        if (pn[0] && pn[1]) {
            sd_tensor *got = ksample(&env, ms, c, pn[0], pn[1], &err);
            CHECK_MSG(got != NULL, "KSampler: %s (input %s)", err.msg, err.input);
            sd_golden_compare(case_id, tensors, g, name, got);
            sd_tensor_unref(got);
        }
        snprintf(name, sizeof name, "%s.latent_nocontrol", case_id);
        tol_for(tensors, tol, "ks", name);
        if (ms) {
            sd_tensor *plain = ksample(&env, ms, c, pos, neg, &err);
            CHECK_MSG(plain != NULL, "KSampler: %s", err.msg);
            sd_golden_compare(case_id, tensors, g, name, plain);
            sd_tensor_unref(plain);
        }
        nt_free_values(pn, 2);
        sd_value_unref(ms), sd_value_unref(image), sd_value_unref(cn);
    }
    CHECK_MSG(n > 0, "the manifest lists no KSampler case");
    cJSON_Delete(tensors);
    sd_value_unref(pos), sd_value_unref(neg), sd_value_unref(unet), sd_value_unref(vae);
    sd_model_store_free(store);
    env.backend = NULL;
    env.models = NULL;
    sd_env_cleanup(&env);
    sd_registry_reset();
}

/* A file with the SD3.5 keys but `bad` wrong: the loader says what. */
static void malformed(sd_backend *be, const char *dir, const char *bad, const char *want) {
    char path[4400];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    sd_error err;
    sd_st_writer *w = sd_st_writer_new();
    struct {
        const char *k;
        int64_t s[4];
        int nd;
    } keys[] = {{"controlnet_blocks.0.weight", {128, 128}, 2},
                {"controlnet_blocks.0.bias", {128}, 1},
                {"pos_embed_input.proj.weight", {128, 16, 2, 2}, 4},
                {"transformer_blocks.0.adaLN_modulation.1.bias", {768}, 1},
                {"transformer_blocks.0.adaLN_modulation.1.weight", {768, 128}, 2},
                {"y_embedder.mlp.0.weight", {128, 28}, 2},
                {"control_type", {1}, 1}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int nd = keys[i].nd;
        int64_t *s = keys[i].s;
        if (strcmp(keys[i].k, bad) == 0) {
            if (strstr(bad, "y_embedder")) s[0] = 100; /* not 64 x depth */
            else nd = 1;
        }
        sd_tensor *t = sd_tensor_new(SD_F32, nd, s);
        /* blur (0) is valid; 7 is no type ComfyUI knows */
        if (t && strcmp(keys[i].k, "control_type") == 0) sd_tensor_f32(t)[0] = strcmp(bad, "control_type") == 0 ? 7.0f : 0.0f;
        CHECK_OK(sd_st_writer_add(w, keys[i].k, t, &err), &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_st_file *f = NULL;
    sd_controlnet *cn = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    sd_status rc = f ? sd_controlnet_load(be, f, SD_F32, &cn, &err) : SD_OK;
    CHECK_MSG(f && rc != SD_OK && cn == NULL && strstr(err.msg, want), "%s wrong: %d %s", bad, rc, err.msg);
    sd_controlnet_free(cn);
    sd_st_close(f);
}

int main(void) {
    char path[4400], cn_path[4400];
    const char *dir = sd_golden_topic_dir("sd35_controlnet");
    cJSON *m = sd_golden_manifest(dir);
    const char *sd3dir = sd_golden_family_dir("sd3");
    cJSON *sd3 = sd_golden_manifest(sd3dir);
    sd_backend *be = sd_golden_sampling_backend();
    if (!be) return sd_test_finish();
    cJSON *models_m = cJSON_GetObjectItemCaseSensitive(sd3, "models");
    const char *mfile = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(models_m, "mmdit"), "file"));
    const char *cfile = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(models_m, "sd35_ckpt"), "file"));
    CHECK_MSG(mfile && cfile, "the sd3 manifest lacks mmdit / sd35_ckpt");
    sd_error err;
    sd_sd3 *dit = NULL;
    sd_vae *vae = NULL;
    sd_st_file *f = NULL, *g = NULL;
    if (mfile && cfile) {
        snprintf(path, sizeof path, "%s/%s", sd3dir, mfile);
        CHECK_OK(sd_st_open(path, &f, &err), &err);
        if (f) CHECK_OK(sd_sd3_load(be, f, "", SD_F32, &dit, &err), &err);
        sd_st_close(f), f = NULL;
        snprintf(path, sizeof path, "%s/%s", sd3dir, cfile);
        CHECK_OK(sd_st_open(path, &f, &err), &err);
        if (f) CHECK_OK(sd_vae_load(be, f, "first_stage_model.", &vae, &err), &err);
        sd_st_close(f);
    }
    snprintf(path, sizeof path, "%s/golden/sd35_controlnet.safetensors", dir);
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    cJSON *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    cJSON *cns = cJSON_GetObjectItemCaseSensitive(m, "controlnets");
    int n = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cns) {
        if (!g || !tol || !dit) break;
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
        CHECK_MSG(file != NULL, "controlnet %s has no file", c->string);
        if (!file) continue;
        snprintf(cn_path, sizeof cn_path, "%s/%s", dir, file);
        one(be, g, m, tol, c->string, c, cn_path, dit, vae);
        n++;
    }
    CHECK_MSG(n > 0, "the manifest lists no ControlNet");
    if (g && tol && dit && vae) ks_cases(be, g, m, tol, dir, sd3dir, mfile, cfile);
    const char *tmp = sd_test_tmpdir("sd35_controlnet");
    malformed(be, tmp, "y_embedder.mlp.0.weight", "hidden size 100");
    malformed(be, tmp, "pos_embed_input.proj.weight", "not a conv");
    malformed(be, tmp, "control_type", "control_type 7 is not one of");
    sd_st_close(g);
    sd_sd3_free(dit);
    sd_vae_free(vae);
    cJSON_Delete(m);
    cJSON_Delete(sd3);
    sd_backend_free(be);
    return sd_test_finish();
}
