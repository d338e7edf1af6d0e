/* test_golden_lora.c - LoRA patching against ComfyUI's reference tensors.
 *
 * Runs every manifest.json case whose component is "lora": the case's LoRA
 * file is matched against the manifest checkpoint holding the patched keys
 * (the one whose tensors include the first "w.<key>.patched" key), applied
 * with settings.strength_model / strength_clip as views, and compared:
 *   w.<checkpoint key>.patched   the patched parameter of the view;
 *   unet.out / unet.out_base     UNet forward with / without the LoRA;
 *   clip.cond / clip.pooled / clip.cond_base  text encoder with / without.
 * The set of patched targets must equal settings.all_patched_keys, and the
 * base model must be bit-identical after the views are gone. Every tensor
 * of a case must be checked by the test (no silent skips).
 * Also the "e2e" cases with a settings.lora: the whole txt2img pipeline on
 * the patched models (see sd_golden_e2e_run). */
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
#include "models/sampling/model_sampling.h"
#include "models/sampling/sampler.h"
#include "models/sampling/schedules.h"
#include "models/vae/vae.h"
#include "models/text/text_encode.h"
#include "models/unet/unet.h"

static const char *case_id;

static sd_tensor *input(sd_st_file *g, const char *name) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = sd_st_tensor(g, name, &err);
    CHECK_MSG(t != NULL, "%s: input %s: %s", case_id, name, err.msg);
    if (!t) return NULL;
    sd_tensor *f = sd_tensor_to_dtype(t, t->dtype == SD_I64 ? SD_I64 : SD_F32);
    sd_tensor_unref(t);
    return f;
}

/* Parameter slot of a checkpoint key in the UNet or text encoder. */
static sd_bt *param(sd_unet *u, sd_text_encoder *te, const char *key) {
    static const struct {
        const char *prefix;
        int part; /* 0 unet, 1 clip_l, 2 clip_g */
    } pre[] = {{SD_UNET_PREFIX, 0},
               {SD_TE_PREFIX_SD1, 1},
               {SD_TE_PREFIX_SDXL_L, 1},
               {SD_TE_PREFIX_SDXL_G, 2}};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) {
        size_t n = strlen(pre[i].prefix);
        if (strncmp(key, pre[i].prefix, n) != 0) continue;
        if (pre[i].part == 0) {
            sd_bt **s = u ? sd_unet_param(u, key + n) : NULL;
            return s ? *s : NULL;
        }
        sd_clip *c = (sd_clip *)(pre[i].part == 1 ? sd_text_encoder_clip_l(te) : sd_text_encoder_clip_g(te));
        sd_bt **s = c ? sd_clip_param(c, key + n, NULL, NULL) : NULL;
        return s ? *s : NULL;
    }
    return NULL;
}

static const char *part_prefix(sd_lora_part p, const sd_text_encoder *te) {
    if (p == SD_LORA_UNET) return SD_UNET_PREFIX;
    if (p == SD_LORA_CLIP_G) return SD_TE_PREFIX_SDXL_G;
    return sd_text_encoder_kind(te) == SD_TE_SD1 ? SD_TE_PREFIX_SD1 : SD_TE_PREFIX_SDXL_L;
}

/* The manifest model that holds checkpoint key `key`. */
static sd_st_file *model_with(cJSON *manifest, const char *dir, const char *key) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, NULL) != SD_OK) continue;
        if (sd_st_find(f, key) && sd_st_find(f, SD_UNET_PREFIX "input_blocks.0.0.weight")) return f;
        sd_st_close(f);
    }
    return NULL;
}

static sd_tensor *unet_run(sd_unet *u, sd_backend *be, sd_tensor *x, sd_tensor *ts, sd_tensor *ctx) {
    sd_error err;
    sd_error_clear(&err);
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32), *o = NULL;
    CHECK_OK(sd_unet_forward(u, bx, sd_tensor_f32(ts), bc, NULL, NULL, &o, &err), &err);
    sd_tensor *h = o ? sd_bt_to_host(o) : NULL;
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(o);
    return h;
}

static void clip_run(sd_text_encoder *te, sd_tensor *ids, sd_tensor **cond, sd_tensor **pooled) {
    sd_error err;
    sd_error_clear(&err);
    *cond = *pooled = NULL;
    int64_t n = sd_tensor_numel(ids);
    int32_t *i32 = malloc((size_t)n * sizeof *i32);
    const int64_t *src = ids->data;
    for (int64_t i = 0; i < n; i++) i32[i] = (int32_t)src[i];
    sd_clip_tokens tk = {.n = (int)ids->shape[0], .len = (int)ids->shape[1], .ids = i32};
    sd_clip_output o = {0};
    sd_clip *c = (sd_clip *)sd_text_encoder_clip_l(te);
    /* SD1 CLIPTextEncode: last layer with final LN; pooled unprojected */
    CHECK_OK(sd_clip_forward(c, &tk, (sd_clip_layer){-1, 1}, &o, &err), &err);
    if (o.hidden) *cond = sd_bt_to_host(o.hidden);
    if (o.pooled) *pooled = sd_bt_to_host(o.pooled);
    sd_clip_output_free(&o);
    free(i32);
}

static void run_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    const char *lora_file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(settings, "lora_file"));
    cJSON *sm = cJSON_GetObjectItemCaseSensitive(settings, "strength_model");
    cJSON *sc = cJSON_GetObjectItemCaseSensitive(settings, "strength_clip");
    CHECK_MSG(file && lora_file && cJSON_IsNumber(sm) && cJSON_IsNumber(sc) && tensors,
              "%s: case lacks file / lora_file / strengths / tensors", case_id);
    if (!file || !lora_file || !cJSON_IsNumber(sm) || !cJSON_IsNumber(sc) || !tensors) return;

    /* the base checkpoint: the model holding the first patched key */
    char key[512] = "";
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        size_t n = strlen(t->string);
        if (strncmp(t->string, "w.", 2) == 0 && n > 10 && strcmp(t->string + n - 8, ".patched") == 0) {
            snprintf(key, sizeof key, "%.*s", (int)(n - 10), t->string + 2);
            break;
        }
    }
    sd_st_file *mf = key[0] ? model_with(manifest, dir, key) : NULL;
    CHECK_MSG(mf != NULL, "%s: no manifest checkpoint holds '%s'", case_id, key);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, lora_file);
    sd_lora *lora = NULL;
    CHECK_OK(sd_lora_open(path, &lora, &err), &err);
    sd_unet *u = NULL, *uv = NULL;
    sd_text_encoder *te = NULL, *tev = NULL;
    sd_lora_plan *plan = NULL;
    int *used = calloc((size_t)cJSON_GetArraySize(tensors), sizeof *used);
    if (!mf || !g || !lora) goto done;
    CHECK_OK(sd_unet_load(be, mf, NULL, SD_F32, &u, &err), &err);
    CHECK_OK(sd_text_encoder_load(be, mf, NULL, &te, &err), &err);
    if (!u || !te) goto done;
    CHECK_OK(sd_lora_plan_new(lora, u, te, &plan, &err), &err);
    if (!plan) goto done;
    {
        char buf[1024];
        sd_lora_plan_unmatched_summary(plan, 5, buf, sizeof buf);
        printf("  %s: %zu UNet + %zu CLIP targets; %s\n", case_id, sd_lora_plan_count(plan, SD_LORA_UNET),
               sd_lora_plan_count(plan, SD_LORA_CLIP_L) + sd_lora_plan_count(plan, SD_LORA_CLIP_G),
               buf[0] ? buf : "every LoRA key matched");
    }
    /* the patched set is the one ComfyUI patched */
    cJSON *all = cJSON_GetObjectItemCaseSensitive(settings, "all_patched_keys");
    if (cJSON_IsArray(all)) {
        size_t total = 0;
        for (int p = 0; p < 3; p++) total += sd_lora_plan_count(plan, (sd_lora_part)p);
        CHECK_MSG(total == (size_t)cJSON_GetArraySize(all), "%s: %zu targets patched, ComfyUI patched %d",
                  case_id, total, cJSON_GetArraySize(all));
        for (int p = 0; p < 3; p++)
            for (size_t i = 0; i < sd_lora_plan_count(plan, (sd_lora_part)p); i++) {
                char full[512];
                snprintf(full, sizeof full, "%s%s", part_prefix((sd_lora_part)p, te),
                         sd_lora_plan_target(plan, (sd_lora_part)p, i));
                int found = 0;
                cJSON *k;
                cJSON_ArrayForEach(k, all) found |= strcmp(cJSON_GetStringValue(k), full) == 0;
                CHECK_MSG(found, "%s: patched '%s', which ComfyUI did not", case_id, full);
            }
    }

    /* base copy of one patched tensor, to prove the base stays untouched */
    sd_tensor *before = NULL;
    sd_bt *b0 = param(u, te, key);
    if (b0) before = sd_bt_to_host(b0);

    sd_lora_use um = {plan, sm->valuedouble}, uc = {plan, sc->valuedouble};
    CHECK_OK(sd_lora_unet_view(u, &um, 1, &uv, &err), &err);
    CHECK_OK(sd_lora_text_encoder_view(te, &uc, 1, &tev, &err), &err);
    if (!uv || !tev) {
        sd_tensor_unref(before);
        goto done;
    }

    sd_golden_set_depth(0); /* patched weights: host arithmetic, no bf16 op */
    cJSON_ArrayForEach(t, tensors) {
        size_t n = strlen(t->string);
        if (strncmp(t->string, "w.", 2) != 0 || n <= 10) continue;
        snprintf(key, sizeof key, "%.*s", (int)(n - 10), t->string + 2);
        sd_bt *w = param(uv, tev, key);
        CHECK_MSG(w != NULL, "%s: the model has no parameter '%s'", case_id, key);
        sd_tensor *h = w ? sd_bt_to_host(w) : NULL;
        sd_golden_compare(case_id, tensors, g, t->string, h);
        sd_golden_mark(tensors, used, t->string);
        sd_tensor_unref(h);
    }

    if (cJSON_GetObjectItemCaseSensitive(tensors, "unet.x")) {
        sd_tensor *x = input(g, "unet.x"), *ts = input(g, "unet.timesteps"), *ctx = input(g, "unet.context");
        sd_golden_mark(tensors, used, "unet.x");
        sd_golden_mark(tensors, used, "unet.timesteps");
        sd_golden_mark(tensors, used, "unet.context");
        sd_golden_set_depth(SD_GOLDEN_DEPTH_UNET);
        if (x && ts && ctx) {
            if (sd_golden_mark(tensors, used, "unet.out")) {
                sd_tensor *o = unet_run(uv, be, x, ts, ctx);
                sd_golden_compare(case_id, tensors, g, "unet.out", o);
                sd_tensor_unref(o);
            }
            if (sd_golden_mark(tensors, used, "unet.out_base")) {
                sd_tensor *o = unet_run(u, be, x, ts, ctx);
                sd_golden_compare(case_id, tensors, g, "unet.out_base", o);
                sd_tensor_unref(o);
            }
        }
        sd_tensor_unref(x);
        sd_tensor_unref(ts);
        sd_tensor_unref(ctx);
    }
    if (cJSON_GetObjectItemCaseSensitive(tensors, "clip.ids")) {
        sd_tensor *ids = input(g, "clip.ids");
        sd_golden_mark(tensors, used, "clip.ids");
        sd_golden_set_depth(SD_GOLDEN_DEPTH_CLIP);
        if (ids) {
            sd_tensor *cond, *pooled;
            clip_run(tev, ids, &cond, &pooled);
            if (sd_golden_mark(tensors, used, "clip.cond"))
                sd_golden_compare(case_id, tensors, g, "clip.cond", cond);
            if (sd_golden_mark(tensors, used, "clip.pooled"))
                sd_golden_compare(case_id, tensors, g, "clip.pooled", pooled);
            sd_tensor_unref(cond);
            sd_tensor_unref(pooled);
            clip_run(te, ids, &cond, &pooled);
            if (sd_golden_mark(tensors, used, "clip.cond_base"))
                sd_golden_compare(case_id, tensors, g, "clip.cond_base", cond);
            sd_tensor_unref(cond);
            sd_tensor_unref(pooled);
        }
        sd_tensor_unref(ids);
    }

    /* views gone: the base is bit-identical to what it was */
    sd_unet_free(uv);
    uv = NULL;
    sd_text_encoder_free(tev);
    tev = NULL;
    {
        int first = 1;
        cJSON_ArrayForEach(t, tensors) {
            size_t n = strlen(t->string);
            if (!first || strncmp(t->string, "w.", 2) != 0 || n <= 10) continue;
            first = 0;
            snprintf(key, sizeof key, "%.*s", (int)(n - 10), t->string + 2);
        }
        sd_bt *b1 = param(u, te, key);
        sd_tensor *after = b1 ? sd_bt_to_host(b1) : NULL;
        CHECK_MSG(before && after && before->nbytes == after->nbytes &&
                      memcmp(before->data, after->data, before->nbytes) == 0,
                  "%s: base weight '%s' changed by patching", case_id, key);
        sd_tensor_unref(after);
    }
    sd_tensor_unref(before);

    {
        int i = 0;
        cJSON_ArrayForEach(t, tensors) {
            CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
            i++;
        }
    }
done:
    free(used);
    sd_unet_free(uv);
    sd_text_encoder_free(tev);
    sd_lora_plan_unref(plan);
    sd_unet_free(u);
    sd_text_encoder_free(te);
    sd_lora_unref(lora);
    sd_st_close(mf);
    sd_st_close(g);
}

/* ---- end-to-end cases (component "e2e" with this test's setting) ------------
 * The whole txt2img pipeline through sd_golden_e2e_run (golden.c); every
 * tensor of the case is compared (intermediates included). */

/* e2e glue: the current case's tensors */
static cJSON *e2e_tensors;
static sd_st_file *e2e_g;
static int *e2e_used;

static void e2e_cmp(const char *name, sd_tensor *t) {
    sd_golden_mark(e2e_tensors, e2e_used, name);
    sd_golden_compare(case_id, e2e_tensors, e2e_g, name, t);
}

static sd_tensor *e2e_in(const char *name) {
    sd_golden_mark(e2e_tensors, e2e_used, name);
    return input(e2e_g, name);
}

static void run_e2e_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    cJSON *lo = cJSON_GetObjectItemCaseSensitive(settings, "lora");
    const char *lf = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(lo, "file"));
    cJSON *sm = cJSON_GetObjectItemCaseSensitive(lo, "strength_model");
    cJSON *sc = cJSON_GetObjectItemCaseSensitive(lo, "strength_clip");
    e2e_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    CHECK_MSG(lf && cJSON_IsNumber(sm) && cJSON_IsNumber(sc) && file && e2e_tensors,
              "%s: settings.lora needs file and strengths", case_id);
    if (!lf || !cJSON_IsNumber(sm) || !cJSON_IsNumber(sc) || !file || !e2e_tensors) return;
    /* an SD1-layout checkpoint (the case has no bigG ids) */
    sd_st_file *mf = model_with(manifest, dir, SD_TE_PREFIX_SD1 "text_model.embeddings.token_embedding.weight");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    e2e_g = NULL;
    CHECK_OK(sd_st_open(path, &e2e_g, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, lf);
    sd_lora *lora = NULL;
    CHECK_OK(sd_lora_open(path, &lora, &err), &err);
    float scale = 0.18215f;
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        cJSON *ls = cJSON_GetObjectItemCaseSensitive(cfg, "latent_scale_factor");
        if (mf && cJSON_IsNumber(ls) && !cJSON_GetObjectItemCaseSensitive(cfg, "clip_g") &&
            cJSON_GetObjectItemCaseSensitive(cfg, "unet_config"))
            scale = (float)ls->valuedouble;
    }
    sd_unet *u = NULL, *uv = NULL;
    sd_text_encoder *te = NULL, *tev = NULL;
    sd_vae *vae = NULL;
    sd_lora_plan *plan = NULL;
    e2e_used = calloc((size_t)cJSON_GetArraySize(e2e_tensors), sizeof *e2e_used);
    if (!mf || !e2e_g || !lora) goto done;
    CHECK_OK(sd_unet_load(be, mf, NULL, SD_F32, &u, &err), &err);
    CHECK_OK(sd_text_encoder_load(be, mf, NULL, &te, &err), &err);
    CHECK_OK(sd_vae_load(be, mf, "first_stage_model.", &vae, &err), &err);
    if (u && te) CHECK_OK(sd_lora_plan_new(lora, u, te, &plan, &err), &err);
    if (!plan || !vae) goto done;
    sd_lora_use um = {plan, sm->valuedouble}, uc = {plan, sc->valuedouble};
    CHECK_OK(sd_lora_unet_view(u, &um, 1, &uv, &err), &err);
    CHECK_OK(sd_lora_text_encoder_view(te, &uc, 1, &tev, &err), &err);
    if (uv && tev) sd_golden_e2e_run(be, c, uv, tev, vae, scale, NULL, e2e_cmp, e2e_in);
    {
        int i = 0;
        cJSON *t;
        cJSON_ArrayForEach(t, e2e_tensors) {
            CHECK_MSG(e2e_used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
            i++;
        }
    }
done:
    free(e2e_used);
    sd_unet_free(uv);
    sd_text_encoder_free(tev);
    sd_lora_plan_unref(plan);
    sd_unet_free(u);
    sd_text_encoder_free(te);
    sd_vae_free(vae);
    sd_lora_unref(lora);
    sd_st_close(mf);
    sd_st_close(e2e_g);
}

int main(void) {
    const char *dir = sd_golden_dir();
    cJSON *manifest = sd_golden_manifest(dir);

    int n_cases = sd_golden_require_cases(manifest, dir, "lora");
    if (n_cases == 0) {
        cJSON_Delete(manifest);
        sd_test_skip("manifest lists no lora case");
    }

    sd_backend *be = sd_golden_backend();
    if (be) {
        sd_golden_run_cases(be, dir, manifest, "lora", run_case, "lora", run_e2e_case, &case_id);
        sd_backend_free(be);
    }
    cJSON_Delete(manifest);
    return sd_test_finish();
}
