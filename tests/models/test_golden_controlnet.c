/* test_golden_controlnet.c - the ControlNet against ComfyUI's reference
 * tensors.
 *
 * Runs every manifest.json case whose component is "controlnet" with the
 * manifest's ControlNet model (the model entry whose file holds
 * control_model.* keys) on the manifest UNet it fits (sd_controlnet_check_fit).
 * Tensor groups (prefix before the first '.'):
 *   a group with "hint"        raw forward: guided_hint, output.NN, middle.0,
 *                              then the UNet with residuals * strength
 *                              (unet_out_control) and without (unet_out_base);
 *   a group with "hint_image"  apply_model through sd_control_chain_eval
 *                              (hint resizing, strength, window): the resized
 *                              hint (cond_hint_resized), denoised_control and
 *                              denoised_base.
 * Inputs a group lacks (x, sigma, context) come from the other groups, as the
 * reference ran them. Every tensor must be checked.
 * Also the "e2e" cases with a settings.controlnet: the whole txt2img
 * pipeline with the ControlNet on cond and uncond (see sd_golden_e2e_run). */
#include "testutil.h"
#include "golden.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/controlnet/controlnet.h"
#include "models/sampling/guider.h"
#include "models/lora/lora.h"
#include "models/sampling/sampler.h"
#include "models/sampling/schedules.h"
#include "models/text/text_encode.h"
#include "models/vae/vae.h"
#include "models/image/imageops.h"
#include "models/sampling/model_sampling.h"
#include "models/unet/unet.h"

static const char *case_id;
static cJSON *tensors;
static int *used;
static sd_st_file *gold;

static int mark(const char *name) { return sd_golden_mark(tensors, used, name); }

/* bf16 depth (golden.h) of a tensor of this test, from its name: the UNet's
 * outputs run after the ControlNet, the ControlNet's own outputs after its
 * hint encoder; inputs and resized hints touch no bf16 op. */
static int depth_of(const char *name) {
    if (strstr(name, "unet_out") || strstr(name, "denoised"))
        return SD_GOLDEN_DEPTH_UNET + SD_GOLDEN_DEPTH_CONTROLNET;
    if (strstr(name, "guided_hint") || strstr(name, ".output.") || strstr(name, ".middle."))
        return SD_GOLDEN_DEPTH_CONTROLNET;
    return 0;
}

static void compare(const char *name, sd_tensor *actual) {
    mark(name);
    sd_golden_set_depth(depth_of(name));
    sd_golden_compare(case_id, tensors, gold, name, actual);
}

/* Group input `name` of group pre, else of any group (the reference reused
 * it). Marks what it reads. */
static sd_tensor *input(const char *pre, const char *name) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", pre, name);
    if (!cJSON_GetObjectItemCaseSensitive(tensors, full)) {
        cJSON *t;
        full[0] = '\0';
        cJSON_ArrayForEach(t, tensors) {
            const char *dot = strchr(t->string, '.');
            cJSON *role = cJSON_GetObjectItemCaseSensitive(t, "role");
            if (dot && strcmp(dot + 1, name) == 0 && strcmp(cJSON_GetStringValue(role), "input") == 0) {
                snprintf(full, sizeof full, "%s", t->string);
                break;
            }
        }
    }
    if (!full[0]) return NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = sd_st_tensor_f32(gold, full, &err);
    CHECK_MSG(t != NULL, "%s: input %s: %s", case_id, full, err.msg);
    if (t) mark(full);
    return t;
}

typedef struct taps {
    sd_tensor *guided;
} taps;

static void on_tap(void *user, const char *name, const sd_bt *t) {
    taps *tp = user;
    if (strcmp(name, "guided_hint") == 0 && !tp->guided) tp->guided = sd_bt_to_host(t);
}

static sd_tensor *unet_eval(sd_unet *u, sd_backend *be, sd_tensor *x, const float *ts, sd_tensor *ctx,
                            const sd_unet_control *control) {
    sd_error err;
    sd_error_clear(&err);
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32), *o = NULL;
    CHECK_OK(sd_unet_forward(u, bx, ts, bc, NULL, control, &o, &err), &err);
    sd_tensor *h = o ? sd_bt_to_host(o) : NULL;
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(o);
    return h;
}

static void raw_group(sd_backend *be, sd_unet *u, sd_controlnet *cn, const char *pre, double strength) {
    char nm[160];
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *x = input(pre, "x_in"), *ts = input(pre, "timesteps"), *ctx = input(pre, "context"),
              *hint = input(pre, "hint");
    if (!x || !ts || !ctx || !hint) {
        CHECK_MSG(0, "%s: group %s lacks x_in/timesteps/context/hint", case_id, pre);
        goto out;
    }
    taps tp = {0};
    sd_controlnet_set_tap(cn, on_tap, &tp);
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bh = sd_bt_from_host(be, hint, SD_F32),
          *bc = sd_bt_from_host(be, ctx, SD_F32);
    sd_controlnet_result r;
    CHECK_OK(sd_controlnet_forward(cn, bx, sd_tensor_f32(ts), bh, bc, NULL, &r, &err), &err);
    sd_controlnet_set_tap(cn, NULL, NULL);
    snprintf(nm, sizeof nm, "%s.guided_hint", pre);
    if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) compare(nm, tp.guided);
    sd_tensor_unref(tp.guided);
    if (r.middle) {
        for (int i = 0; i < r.n; i++) {
            snprintf(nm, sizeof nm, "%s.output.%02d", pre, i);
            sd_tensor *h = sd_bt_to_host(r.output[i]);
            compare(nm, h);
            sd_tensor_unref(h);
        }
        snprintf(nm, sizeof nm, "%s.middle.0", pre);
        sd_tensor *h = sd_bt_to_host(r.middle);
        compare(nm, h);
        sd_tensor_unref(h);
        /* the UNet with residuals * strength */
        sd_bt *skip[SD_UNET_MAX_BLOCKS] = {0};
        for (int i = 0; i < r.n; i++) skip[i] = sd_op_scale(r.output[i], (float)strength);
        sd_bt *mid = sd_op_scale(r.middle, (float)strength);
        sd_unet_control c = {.middle = mid, .n_skip = r.n, .skip = skip};
        snprintf(nm, sizeof nm, "%s.unet_out_control", pre);
        if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) {
            sd_tensor *o = unet_eval(u, be, x, sd_tensor_f32(ts), ctx, &c);
            compare(nm, o);
            sd_tensor_unref(o);
        }
        snprintf(nm, sizeof nm, "%s.unet_out_base", pre);
        if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) {
            sd_tensor *o = unet_eval(u, be, x, sd_tensor_f32(ts), ctx, NULL);
            compare(nm, o);
            sd_tensor_unref(o);
        }
        for (int i = 0; i < r.n; i++) sd_bt_free(skip[i]);
        sd_bt_free(mid);
    }
    sd_controlnet_result_free(&r);
    sd_bt_free(bx);
    sd_bt_free(bh);
    sd_bt_free(bc);
out:
    sd_tensor_unref(x);
    sd_tensor_unref(ts);
    sd_tensor_unref(ctx);
    sd_tensor_unref(hint);
}

/* apply_model(x, sigma) with an optional control chain: x - eps * sigma. */
static sd_tensor *denoise(sd_backend *be, sd_unet *u, const sd_model_sampling *ms, sd_tensor *x, float sigma,
                          sd_tensor *ctx, const sd_control_link *link) {
    sd_error err;
    sd_error_clear(&err);
    int64_t n = x->shape[0];
    sd_tensor *xin = sd_tensor_clone(x);
    sd_ms_calculate_input(ms, sigma, sd_tensor_f32(x), sd_tensor_f32(xin), (size_t)sd_tensor_numel(x));
    float *ts = malloc((size_t)n * sizeof *ts);
    for (int64_t i = 0; i < n; i++) ts[i] = sd_ms_timestep(ms, sigma);
    sd_bt *bx = sd_bt_from_host(be, xin, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32), *o = NULL;
    sd_control_residuals res = {0};
    sd_tensor *out = NULL;
    if (link) {
        CHECK_OK(sd_control_chain_eval(link, 1, ms, sd_unet_get_config(u), sigma, bx, ts, bc, NULL, &res, &err),
                 &err);
        CHECK_MSG(res.active == 1, "%s: the ControlNet was not active at sigma %g", case_id, sigma);
    }
    CHECK_OK(sd_unet_forward(u, bx, ts, bc, NULL, link ? &res.control : NULL, &o, &err), &err);
    if (o) {
        out = sd_bt_to_host(o);
        sd_ms_calculate_denoised(ms, sigma, sd_tensor_f32(out), sd_tensor_f32(x), sd_tensor_f32(out),
                                 (size_t)sd_tensor_numel(out));
    }
    sd_control_residuals_free(&res);
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(o);
    sd_tensor_unref(xin);
    free(ts);
    return out;
}

static void image_group(sd_backend *be, sd_unet *u, sd_controlnet *cn, const char *pre, double strength) {
    char nm[160];
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *x = input(pre, "x"), *sig = input(pre, "sigma"), *ctx = input(pre, "context"),
              *img = input(pre, "hint_image");
    if (!x || !sig || !ctx || !img) {
        CHECK_MSG(0, "%s: group %s lacks x/sigma/context/hint_image", case_id, pre);
        goto out;
    }
    sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_EPS);
    float sigma = sd_tensor_f32(sig)[0];
    snprintf(nm, sizeof nm, "%s.cond_hint_resized", pre);
    if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) {
        sd_tensor *h = NULL;
        CHECK_OK(sd_controlnet_hint(img, 8 * x->shape[3], 8 * x->shape[2], &h, &err), &err);
        compare(nm, h);
        sd_tensor_unref(h);
    }
    sd_control_link link = {cn, img, strength, 0.0, 1.0};
    snprintf(nm, sizeof nm, "%s.denoised_control", pre);
    if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) {
        sd_tensor *d = denoise(be, u, &ms, x, sigma, ctx, &link);
        compare(nm, d);
        sd_tensor_unref(d);
    }
    snprintf(nm, sizeof nm, "%s.denoised_base", pre);
    if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) {
        sd_tensor *d = denoise(be, u, &ms, x, sigma, ctx, NULL);
        compare(nm, d);
        sd_tensor_unref(d);
    }
    /* outside the start/end window the chain contributes nothing */
    {
        sd_control_link off = {cn, img, strength, 0.5, 1.0};
        float hi = (float)sd_ms_percent_to_sigma(&ms, 0.5);
        if (sigma > hi) {
            sd_tensor *xin = sd_tensor_clone(x);
            sd_bt *bx = sd_bt_from_host(be, xin, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
            float t = sd_ms_timestep(&ms, sigma);
            sd_control_residuals res;
            CHECK_OK(sd_control_chain_eval(&off, 1, &ms, NULL, sigma, bx, &t, bc, NULL, &res, &err), &err);
            CHECK_MSG(res.active == 0 && res.control.middle == NULL,
                      "%s: a ControlNet starting at 50%% ran at sigma %g (> %g)", case_id, sigma, hi);
            sd_control_residuals_free(&res);
            sd_bt_free(bx);
            sd_bt_free(bc);
            sd_tensor_unref(xin);
        }
    }
out:
    sd_tensor_unref(x);
    sd_tensor_unref(sig);
    sd_tensor_unref(ctx);
    sd_tensor_unref(img);
}

static sd_st_file *model_file(cJSON *manifest, const char *dir, const char *key) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, NULL) != SD_OK) continue;
        if (sd_st_find(f, key)) return f;
        sd_st_close(f);
    }
    return NULL;
}

/* The manifest UNet the ControlNet fits. */
static sd_unet *fitting_unet(sd_backend *be, cJSON *manifest, const char *dir, sd_controlnet *cn) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, NULL) != SD_OK) continue;
        sd_unet_config cfg;
        sd_unet *u = NULL;
        if (sd_unet_detect(f, SD_UNET_PREFIX, &cfg, NULL) == SD_OK &&
            sd_controlnet_check_fit(cn, &cfg, NULL) == SD_OK)
            sd_unet_load(be, f, SD_UNET_PREFIX, SD_F32, &u, NULL);
        sd_st_close(f);
        if (u) return u;
    }
    return NULL;
}

/* A ControlNet on a UNet it does not fit is a clear error. */
static void misfit(sd_backend *be, cJSON *manifest, const char *dir, sd_controlnet *cn) {
    cJSON *m;
    int checked = 0;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, NULL) != SD_OK) continue;
        sd_unet_config cfg;
        sd_error err;
        sd_error_clear(&err);
        if (sd_unet_detect(f, SD_UNET_PREFIX, &cfg, NULL) == SD_OK &&
            sd_controlnet_check_fit(cn, &cfg, &err) != SD_OK) {
            CHECK_MSG(err.code == SD_ERR_INVALID && strstr(err.msg, "does not fit"),
                      "misfit message: %s", err.msg);
            printf("  misfit on %s: %s\n", file, err.msg);
            checked++;
        }
        sd_st_close(f);
    }
    (void)be;
    if (!checked) printf("  (no manifest UNet the ControlNet does not fit)\n");
}

static void run_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    cJSON *st = cJSON_GetObjectItemCaseSensitive(settings, "strength");
    CHECK_MSG(file && tensors && cJSON_IsNumber(st), "%s: case lacks file / tensors / strength", case_id);
    if (!file || !tensors || !cJSON_IsNumber(st)) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gold = NULL;
    CHECK_OK(sd_st_open(path, &gold, &err), &err);
    sd_st_file *cf = model_file(manifest, dir, SD_CONTROLNET_PREFIX "input_hint_block.0.weight");
    CHECK_MSG(cf != NULL, "%s: no manifest model is a ControlNet", case_id);
    sd_controlnet *cn = NULL;
    sd_unet *u = NULL;
    used = calloc((size_t)cJSON_GetArraySize(tensors), sizeof *used);
    if (!gold || !cf) goto done;
    CHECK_OK(sd_controlnet_load(be, cf, SD_F32, &cn, &err), &err);
    if (!cn) goto done;
    u = fitting_unet(be, manifest, dir, cn);
    CHECK_MSG(u != NULL, "%s: no manifest UNet fits the ControlNet", case_id);
    if (!u) goto done;
    misfit(be, manifest, dir, cn);

    /* groups, in manifest order */
    char groups[8][32];
    int ng = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *dot = strchr(t->string, '.');
        if (!dot) continue;
        char g[32];
        snprintf(g, sizeof g, "%.*s", (int)(dot - t->string), t->string);
        int seen = 0;
        for (int i = 0; i < ng; i++) seen |= strcmp(groups[i], g) == 0;
        if (!seen && ng < 8) snprintf(groups[ng++], sizeof groups[0], "%s", g);
    }
    for (int i = 0; i < ng; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s.hint", groups[i]);
        if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) raw_group(be, u, cn, groups[i], st->valuedouble);
        snprintf(nm, sizeof nm, "%s.hint_image", groups[i]);
        if (cJSON_GetObjectItemCaseSensitive(tensors, nm)) image_group(be, u, cn, groups[i], st->valuedouble);
    }
    int i = 0;
    cJSON_ArrayForEach(t, tensors) {
        CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
done:
    free(used);
    sd_unet_free(u);
    sd_controlnet_free(cn);
    sd_st_close(cf);
    sd_st_close(gold);
}

/* ---- end-to-end cases (component "e2e" with this test's setting) ------------
 * The whole txt2img pipeline through sd_golden_e2e_run (golden.c); every
 * tensor of the case is compared (intermediates included). */

static void e2e_cmp(const char *name, sd_tensor *t) { compare(name, t); }

static sd_tensor *e2e_in(const char *name) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = sd_st_tensor(gold, name, &err);
    CHECK_MSG(t != NULL, "%s: input %s: %s", case_id, name, err.msg);
    if (!t) return NULL;
    mark(name);
    sd_tensor *f = sd_tensor_to_dtype(t, t->dtype == SD_I64 ? SD_I64 : SD_F32);
    sd_tensor_unref(t);
    return f;
}

static void run_e2e_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    cJSON *cs = cJSON_GetObjectItemCaseSensitive(settings, "controlnet");
    const char *cf_name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "file"));
    cJSON *st = cJSON_GetObjectItemCaseSensitive(cs, "strength");
    cJSON *sp = cJSON_GetObjectItemCaseSensitive(cs, "start_percent");
    cJSON *ep = cJSON_GetObjectItemCaseSensitive(cs, "end_percent");
    tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    CHECK_MSG(cf_name && cJSON_IsNumber(st) && cJSON_IsNumber(sp) && cJSON_IsNumber(ep) && file && tensors,
              "%s: settings.controlnet needs file, strength, start/end_percent", case_id);
    if (!cf_name || !cJSON_IsNumber(st) || !cJSON_IsNumber(sp) || !cJSON_IsNumber(ep) || !file || !tensors)
        return;
    sd_st_file *mf = model_file(manifest, dir, SD_TE_PREFIX_SD1 "text_model.embeddings.token_embedding.weight");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gold = NULL;
    CHECK_OK(sd_st_open(path, &gold, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, cf_name);
    sd_st_file *cf = NULL;
    CHECK_OK(sd_st_open(path, &cf, &err), &err);
    float scale = 0.18215f;
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        cJSON *ls = cJSON_GetObjectItemCaseSensitive(cfg, "latent_scale_factor");
        if (cJSON_IsNumber(ls) && !cJSON_GetObjectItemCaseSensitive(cfg, "clip_g") &&
            cJSON_GetObjectItemCaseSensitive(cfg, "unet_config"))
            scale = (float)ls->valuedouble;
    }
    sd_unet *u = NULL;
    sd_text_encoder *te = NULL;
    sd_vae *vae = NULL;
    sd_controlnet *cn = NULL;
    sd_tensor *hint = NULL;
    used = calloc((size_t)cJSON_GetArraySize(tensors), sizeof *used);
    if (!mf || !gold || !cf) goto done;
    CHECK_OK(sd_unet_load(be, mf, NULL, SD_F32, &u, &err), &err);
    CHECK_OK(sd_text_encoder_load(be, mf, NULL, &te, &err), &err);
    CHECK_OK(sd_vae_load(be, mf, "first_stage_model.", &vae, &err), &err);
    CHECK_OK(sd_controlnet_load(be, cf, SD_F32, &cn, &err), &err);
    hint = e2e_in("control.hint_image");
    if (u && te && vae && cn && hint) {
        sd_control_link link = {cn, hint, st->valuedouble, sp->valuedouble, ep->valuedouble};
        sd_golden_e2e_run(be, c, u, te, vae, scale, &link, e2e_cmp, e2e_in);
    }
    {
        int i = 0;
        cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
            i++;
        }
    }
done:
    free(used);
    sd_tensor_unref(hint);
    sd_controlnet_free(cn);
    sd_unet_free(u);
    sd_text_encoder_free(te);
    sd_vae_free(vae);
    sd_st_close(cf);
    sd_st_close(mf);
    sd_st_close(gold);
}

int main(void) {
    const char *dir = sd_golden_dir();
    cJSON *manifest = sd_golden_manifest(dir);
    int n_cases = sd_golden_require_cases(manifest, dir, "controlnet");
    if (!n_cases) {
        cJSON_Delete(manifest);
        sd_test_skip("manifest lists no controlnet case");
    }
    sd_backend *be = sd_golden_backend();
    if (be) {
        sd_golden_run_cases(be, dir, manifest, "controlnet", run_case, "controlnet", run_e2e_case, &case_id);
        sd_backend_free(be);
    }
    cJSON_Delete(manifest);
    return sd_test_finish();
}
