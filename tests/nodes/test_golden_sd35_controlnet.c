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
 *   K.dit.*  the MMDiT forward with that list as its control.
 * Then malformed files at the loader. Cases, sizes and tolerances come from
 * the manifests. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/controlnet/controlnet.h"
#include "models/sampling/model_sampling.h"
#include "models/sd3/sd3_controlnet.h"
#include "models/vae/vae.h"
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
                {"y_embedder.mlp.0.weight", {128, 28}, 2}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int nd = keys[i].nd;
        int64_t *s = keys[i].s;
        if (strcmp(keys[i].k, bad) == 0) {
            if (strstr(bad, "y_embedder")) s[0] = 100; /* not 64 x depth */
            else nd = 1;
        }
        sd_tensor *t = sd_tensor_new(SD_F32, nd, s);
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
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char dir[1200], path[4400], cn_path[4400];
    snprintf(dir, sizeof dir, "%s/tests/data/sd35_controlnet", src ? src : ".");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = sd_test_read_file(path, NULL);
    if (!text) sd_test_skip("no reference data (%s)", path);
    cJSON *m = cJSON_Parse(text);
    free(text);
    CHECK_MSG(m != NULL, "bad manifest %s", path);
    const char *sd3dir = sd_golden_family_dir("sd3");
    cJSON *sd3 = sd_golden_manifest(sd3dir);
    if (!m || !sd3) {
        cJSON_Delete(m);
        return sd_test_finish();
    }
    sd_backend *be = sd_golden_backend();
    if (!be) return sd_test_finish();
    sd_golden_set_depth(0);
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
    const char *tmp = sd_test_tmpdir("sd35_controlnet");
    malformed(be, tmp, "y_embedder.mlp.0.weight", "hidden size 100");
    malformed(be, tmp, "pos_embed_input.proj.weight", "not a conv");
    sd_st_close(g);
    sd_sd3_free(dit);
    sd_vae_free(vae);
    cJSON_Delete(m);
    cJSON_Delete(sd3);
    sd_backend_free(be);
    return sd_test_finish();
}
