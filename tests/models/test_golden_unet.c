/* test_golden_unet.c - the UNet against ComfyUI's reference tensors.
 *
 * Runs every manifest.json case whose component is "unet". The checkpoint is
 * the manifest model whose unet_config equals the case's settings.unet_config;
 * the detected config must equal it too. Tensors are grouped by prefix
 * ("a.x" -> group "a", plain "x" -> group ""): each group is one forward with
 * its inputs (x, timesteps or sigma, context, pooled + size.* -> y), and every
 * expected/intermediate tensor of the group is compared with its own
 * tolerance. A tensor the test does not know how to produce is a failure,
 * never silently ignored.
 * Also: the "controlnet" cases' recorded residuals are fed through the
 * UNet's control hook (UNet output with control compared), and edited
 * copies of a checkpoint check the detection/loading errors. */
#include "testutil.h"
#include "golden.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/sampling/model_sampling.h"
#include "models/unet/unet.h"

static const char *case_id;

/* Golden tensor as F32 host tensor, or NULL (with a CHECK failure). */
static sd_tensor *input(sd_st_file *g, const char *name) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(t != NULL, "%s: input %s: %s", case_id, name, err.msg);
    return t;
}

static int json_int(cJSON *o, const char *key, int *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return 1;
    }
    if (cJSON_IsNull(v) || !v) {
        *out = 0; /* null adm_in_channels = none */
        return 1;
    }
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valueint;
    return 1;
}

static int json_int_list(cJSON *o, const char *key, const int *vals, int n) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return 0;
    for (int i = 0; i < n; i++)
        if (cJSON_GetArrayItem(a, i)->valueint != vals[i]) return 0;
    return 1;
}

/* The detected config must be the one ComfyUI used. */
static void check_config(const sd_unet_config *c, cJSON *uc) {
    struct {
        const char *key;
        int got;
    } scalars[] = {
        {"in_channels", c->in_channels},
        {"out_channels", c->out_channels},
        {"model_channels", c->model_channels},
        {"transformer_depth_middle", c->transformer_depth_middle},
        {"context_dim", c->context_dim},
        {"adm_in_channels", c->adm_in_channels},
        {"use_linear_in_transformer", c->use_linear_in_transformer},
        {"num_heads", c->num_heads},
        {"num_head_channels", c->num_head_channels},
    };
    for (size_t i = 0; i < sizeof scalars / sizeof *scalars; i++) {
        int want = 0;
        int ok = json_int(uc, scalars[i].key, &want);
        CHECK_MSG(ok && want == scalars[i].got, "%s: detected %s = %d, ComfyUI config says %d", case_id,
                  scalars[i].key, scalars[i].got, want);
    }
    CHECK_MSG(json_int_list(uc, "channel_mult", c->channel_mult, c->num_levels), "%s: channel_mult differs",
              case_id);
    CHECK_MSG(json_int_list(uc, "num_res_blocks", c->num_res_blocks, c->num_levels),
              "%s: num_res_blocks differs", case_id);
    CHECK_MSG(json_int_list(uc, "transformer_depth", c->transformer_depth, c->n_input_res),
              "%s: transformer_depth differs", case_id);
    CHECK_MSG(json_int_list(uc, "transformer_depth_output", c->transformer_depth_output, c->n_output_blocks),
              "%s: transformer_depth_output differs", case_id);
}

static int has_tensor(cJSON *tensors, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(tensors, name) != NULL;
}

/* One forward for the tensors of group `pre` ("" or "a."). Marks every
 * tensor it consumed in `used` (parallel to the manifest's tensor list). */
static void run_group(sd_backend *be, sd_unet *u, sd_st_file *g, cJSON *tensors, const char *pre,
                      int *used) {
    char nm[160];
    sd_error err;
    sd_error_clear(&err);
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", pre, s), nm)
#define USE(s)                                                                  \
    do {                                                                        \
        int _i = 0;                                                             \
        cJSON *_t;                                                              \
        cJSON_ArrayForEach(_t, tensors) {                                       \
            if (strcmp(_t->string, NAME(s)) == 0) used[_i] = 1;                 \
            _i++;                                                               \
        }                                                                       \
    } while (0)

    sd_tensor *x = input(g, NAME("x")), *ctx = input(g, NAME("context"));
    USE("x");
    USE("context");
    if (!x || !ctx) goto out0;
    int64_t n = x->shape[0];
    float *ts = calloc((size_t)n, sizeof *ts);
    float *sig = NULL;
    sd_model_sampling *ms = NULL;
    sd_tensor *y = NULL, *xin = NULL;
    if (has_tensor(tensors, NAME("sigma"))) {
        /* apply_model: sigma -> discrete timestep, x / sqrt(sigma^2 + 1) */
        sd_tensor *s = input(g, NAME("sigma"));
        USE("sigma");
        if (!s || sd_tensor_numel(s) != n) {
            CHECK_MSG(0, "%s: %s must hold one sigma per batch item", case_id, nm);
            sd_tensor_unref(s);
            goto out1;
        }
        sig = malloc((size_t)n * sizeof *sig);
        memcpy(sig, sd_tensor_f32(s), (size_t)n * sizeof *sig);
        sd_tensor_unref(s);
        ms = malloc(sizeof *ms);
        sd_model_sampling_init(ms, SD_PRED_EPS);
        for (int64_t i = 0; i < n; i++) ts[i] = sd_ms_timestep(ms, sig[i]);
        if (has_tensor(tensors, NAME("timestep"))) {
            sd_tensor *tt = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0);
            memcpy(sd_tensor_f32(tt), ts, (size_t)n * sizeof *ts);
            sd_golden_compare(case_id, tensors, g, NAME("timestep"), tt);
            USE("timestep");
            sd_tensor_unref(tt);
        }
        xin = sd_tensor_clone(x);
        int64_t per = sd_tensor_numel(x) / n;
        for (int64_t i = 0; i < n; i++)
            sd_ms_calculate_input(ms, sig[i], sd_tensor_f32(x) + i * per, sd_tensor_f32(xin) + i * per,
                                  (size_t)per);
        if (has_tensor(tensors, NAME("x_in"))) {
            sd_golden_compare(case_id, tensors, g, NAME("x_in"), xin);
            USE("x_in");
        }
    } else {
        sd_tensor *tt = input(g, NAME("timesteps"));
        USE("timesteps");
        if (!tt || sd_tensor_numel(tt) != n) {
            CHECK_MSG(0, "%s: %s must hold one timestep per batch item", case_id, NAME("timesteps"));
            sd_tensor_unref(tt);
            goto out1;
        }
        memcpy(ts, sd_tensor_f32(tt), (size_t)n * sizeof *ts);
        sd_tensor_unref(tt);
        xin = sd_tensor_ref(x);
    }

    if (has_tensor(tensors, NAME("pooled"))) {
        /* SDXL: y from pooled output + size conditioning */
        sd_tensor *pooled = input(g, NAME("pooled"));
        USE("pooled");
        const char *keys[6] = {"size.width", "size.height", "size.crop_w", "size.crop_h",
                               "size.target_width", "size.target_height"};
        float v[6] = {0};
        for (int k = 0; k < 6; k++) {
            sd_tensor *t = input(g, NAME(keys[k]));
            USE(keys[k]);
            if (t) v[k] = sd_tensor_f32(t)[0];
            sd_tensor_unref(t);
        }
        sd_sdxl_size size = {v[0], v[1], v[2], v[3], v[4], v[5]};
        if (pooled) CHECK_OK(sd_unet_sdxl_adm(pooled, &size, &y, &err), &err);
        sd_tensor_unref(pooled);
        if (has_tensor(tensors, NAME("y"))) {
            sd_golden_compare(case_id, tensors, g, NAME("y"), y);
            USE("y");
        }
    }

    /* Activations the manifest names: "t_emb" and "act.<module path>". */
    static const char *const plain[] = {"t_emb", NULL};
    sd_golden_taps taps;
    sd_golden_taps_collect(&taps, tensors, pre, plain, case_id);
    sd_unet_set_tap(u, sd_golden_tap, &taps);

    sd_bt *bx = sd_bt_from_host(be, xin, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
    sd_bt *by = y ? sd_bt_from_host(be, y, SD_F32) : NULL, *bout = NULL;
    CHECK_OK(sd_unet_forward(u, bx, ts, bc, by, NULL, &bout, &err), &err);
    sd_unet_set_tap(u, NULL, NULL);
    sd_tensor *out = bout ? sd_bt_to_host(bout) : NULL;
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(by);
    sd_bt_free(bout);

    sd_golden_set_depth(SD_GOLDEN_DEPTH_UNET);
    sd_golden_taps_check(&taps, case_id, tensors, g, pre, used);

    if (ms) {
        if (has_tensor(tensors, NAME("eps"))) {
            sd_golden_compare(case_id, tensors, g, NAME("eps"), out);
            USE("eps");
        }
        if (out && has_tensor(tensors, NAME("denoised"))) {
            sd_tensor *den = sd_tensor_clone(out);
            int64_t per = sd_tensor_numel(x) / n;
            for (int64_t i = 0; i < n; i++)
                sd_ms_calculate_denoised(ms, sig[i], sd_tensor_f32(out) + i * per, sd_tensor_f32(x) + i * per,
                                         sd_tensor_f32(den) + i * per, (size_t)per);
            sd_golden_compare(case_id, tensors, g, NAME("denoised"), den);
            USE("denoised");
            sd_tensor_unref(den);
        }
    } else if (has_tensor(tensors, NAME("out"))) {
        sd_golden_compare(case_id, tensors, g, NAME("out"), out);
        USE("out");
    }
    sd_tensor_unref(out);
out1:
    sd_tensor_unref(y);
    sd_tensor_unref(xin);
    free(ts);
    free(sig);
    free(ms);
out0:
    sd_tensor_unref(x);
    sd_tensor_unref(ctx);
#undef NAME
#undef USE
}

/* The manifest model whose unet_config equals the case's. */
static const char *model_for(cJSON *manifest, cJSON *unet_config) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *uc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"), "unet_config");
        if (uc && cJSON_Compare(uc, unet_config, 1))
            return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
    }
    return NULL;
}

static void run_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    sd_golden_set_depth(0); /* inputs and conditioning: no bf16 op */
    char path[1024];
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    cJSON *uc = cJSON_GetObjectItemCaseSensitive(settings, "unet_config");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *model = model_for(manifest, uc);
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    CHECK_MSG(model && file && tensors, "%s: no model with this unet_config, or no file/tensors", case_id);
    if (!model || !file || !tensors) return;
    cJSON *note;
    cJSON_ArrayForEach(note, cJSON_GetObjectItemCaseSensitive(c, "notes"))
        printf("  note: %s\n", cJSON_GetStringValue(note));

    snprintf(path, sizeof path, "%s/%s", dir, model);
    sd_st_file *mf = NULL, *g = NULL;
    sd_unet *u = NULL;
    CHECK_OK(sd_st_open(path, &mf, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!mf || !g) goto done;
    CHECK_OK(sd_unet_load(be, mf, NULL, SD_F32, &u, &err), &err);
    if (!u) goto done;
    check_config(sd_unet_get_config(u), uc);

    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);
    /* Groups: every input named "x" or "<g>.x". */
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *s = t->string;
        size_t len = strlen(s);
        if (strcmp(s, "x") != 0 && !(len > 2 && strcmp(s + len - 2, ".x") == 0)) continue;
        char pre[64];
        snprintf(pre, sizeof pre, "%.*s", (int)(len - 1), s);
        run_group(be, u, g, tensors, pre, used);
    }
    int i = 0;
    cJSON_ArrayForEach(t, tensors) {
        CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
    free(used);
done:
    sd_unet_free(u);
    sd_st_close(mf);
    sd_st_close(g);
}

/* ---- ControlNet hook ---------------------------------------------------------
 * A "controlnet" case holds the ControlNet's residuals (before strength) and
 * the UNet output with them applied: feeding those residuals through
 * sd_unet_control checks where and how the UNet adds them, independently of
 * the ControlNet model itself. */

/* The manifest UNet model fitting the given context width / input channels
 * without a y vector. */
static const char *model_for_shapes(cJSON *manifest, int64_t context_dim, int64_t in_ch) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *uc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"), "unet_config");
        int cd = 0, ic = 0, adm = 0;
        if (!uc || !json_int(uc, "context_dim", &cd) || !json_int(uc, "in_channels", &ic) ||
            !json_int(uc, "adm_in_channels", &adm))
            continue;
        if (cd == context_dim && ic == in_ch && adm == 0)
            return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
    }
    return NULL;
}

static void run_control_group(sd_backend *be, const char *dir, cJSON *manifest, cJSON *tensors,
                              sd_st_file *g, const char *pre, float strength) {
    char nm[160], path[1024];
    sd_error err;
    sd_error_clear(&err);
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", pre, s), nm)
    sd_tensor *x = input(g, NAME("x_in")), *ctx = input(g, NAME("context")), *tt = input(g, NAME("timesteps"));
    sd_tensor *res[SD_UNET_MAX_BLOCKS] = {0}, *mid = input(g, NAME("middle.0"));
    sd_bt *bres[SD_UNET_MAX_BLOCKS] = {0}, *bmid = NULL, *bx = NULL, *bc = NULL, *base = NULL, *ctl = NULL;
    sd_st_file *mf = NULL;
    sd_unet *u = NULL;
    int n_res = 0;
    char key[32];
    for (; n_res < SD_UNET_MAX_BLOCKS; n_res++) {
        snprintf(key, sizeof key, "output.%02d", n_res);
        if (!has_tensor(tensors, NAME(key))) break;
        res[n_res] = input(g, nm);
    }
    if (!x || !ctx || !tt || !mid || n_res == 0) goto done;
    const char *model = model_for_shapes(manifest, ctx->shape[2], x->shape[1]);
    CHECK_MSG(model != NULL, "%s: no manifest UNet fits context %lld / %lld channels", case_id,
              (long long)ctx->shape[2], (long long)x->shape[1]);
    if (!model) goto done;
    snprintf(path, sizeof path, "%s/%s", dir, model);
    CHECK_OK(sd_st_open(path, &mf, &err), &err);
    if (mf) CHECK_OK(sd_unet_load(be, mf, NULL, SD_F32, &u, &err), &err);
    if (!u) goto done;
    /* residual * strength, as ComfyUI's control_merge does, in float32 (on
     * owned copies: golden tensors may borrow a read-only mapping) */
    for (int i = 0; i < n_res; i++) {
        sd_tensor *own = sd_tensor_clone(res[i]);
        sd_tensor_unref(res[i]);
        res[i] = own;
        float *p = sd_tensor_f32(res[i]);
        for (int64_t k = 0; k < sd_tensor_numel(res[i]); k++) p[k] *= strength;
        bres[i] = sd_bt_from_host(be, res[i], SD_F32);
    }
    sd_tensor *own = sd_tensor_clone(mid);
    sd_tensor_unref(mid);
    mid = own;
    for (int64_t k = 0; k < sd_tensor_numel(mid); k++) sd_tensor_f32(mid)[k] *= strength;
    bmid = sd_bt_from_host(be, mid, SD_F32);
    bx = sd_bt_from_host(be, x, SD_F32);
    bc = sd_bt_from_host(be, ctx, SD_F32);
    sd_unet_control control = {.middle = bmid, .n_skip = n_res, .skip = bres};
    CHECK_OK(sd_unet_forward(u, bx, sd_tensor_f32(tt), bc, NULL, NULL, &base, &err), &err);
    CHECK_OK(sd_unet_forward(u, bx, sd_tensor_f32(tt), bc, NULL, &control, &ctl, &err), &err);
    sd_tensor *hb = base ? sd_bt_to_host(base) : NULL, *hc = ctl ? sd_bt_to_host(ctl) : NULL;
    sd_golden_set_depth(SD_GOLDEN_DEPTH_UNET);
    if (has_tensor(tensors, NAME("unet_out_base"))) sd_golden_compare(case_id, tensors, g, nm, hb);
    sd_golden_compare(case_id, tensors, g, NAME("unet_out_control"), hc);
    sd_tensor_unref(hb);
    sd_tensor_unref(hc);

    /* A residual of the wrong shape is an error naming the skip, not a crash. */
    sd_bt *bad_list[SD_UNET_MAX_BLOCKS] = {0};
    bad_list[1] = bres[0] && bres[3] && bres[3]->shape[2] != bres[1]->shape[2] ? bres[3] : NULL;
    if (bad_list[1]) {
        sd_unet_control bad = {.n_skip = n_res, .skip = bad_list};
        sd_bt *o = NULL;
        sd_status rc = sd_unet_forward(u, bx, sd_tensor_f32(tt), bc, NULL, &bad, &o, &err);
        CHECK_MSG(rc == SD_ERR_INVALID && o == NULL && strstr(err.msg, "skip 1"),
                  "%s: mis-shaped residual gave rc %d: %s", case_id, rc, err.msg);
        sd_bt_free(o);
    }
done:
    sd_bt_free(base);
    sd_bt_free(ctl);
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(bmid);
    for (int i = 0; i < n_res; i++) {
        sd_bt_free(bres[i]);
        sd_tensor_unref(res[i]);
    }
    sd_unet_free(u);
    sd_st_close(mf);
    sd_tensor_unref(x);
    sd_tensor_unref(ctx);
    sd_tensor_unref(tt);
    sd_tensor_unref(mid);
#undef NAME
}

static void run_control_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    char path[1024];
    sd_error err;
    sd_error_clear(&err);
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "settings"), "strength");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    CHECK_MSG(cJSON_IsNumber(st) && file && tensors, "%s: no strength/file/tensors", case_id);
    if (!cJSON_IsNumber(st) || !file || !tensors) return;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!g) return;
    /* Groups whose UNet output with control is recorded: "<g>.unet_out_control"
     * next to the residuals "<g>.output.NN" and "<g>.middle.0". */
    int groups = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *s = t->string;
        const char *suffix = "unet_out_control";
        size_t len = strlen(s), sl = strlen(suffix);
        if (len < sl || strcmp(s + len - sl, suffix) != 0) continue;
        char pre[64];
        snprintf(pre, sizeof pre, "%.*s", (int)(len - sl), s);
        run_control_group(be, dir, manifest, tensors, g, pre, (float)st->valuedouble);
        groups++;
    }
    CHECK_MSG(groups > 0, "%s: no group with unet_out_control", case_id);
    sd_st_close(g);
}

/* ---- detection errors --------------------------------------------------------
 * Variants of a manifest checkpoint's UNet, rewritten in memory: each must
 * fail with the right code and a message naming what was found. */

typedef enum { EDIT_DROP, EDIT_RESHAPE, EDIT_FLATTEN_PROJ, EDIT_RENAME_ALL } edit_kind;

/* Copy of the UNet tensors of `src` (under SD_UNET_PREFIX) with one edit. */
static sd_st_file *edited(sd_st_file *src, edit_kind kind, const char *target, void **buf) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_writer *w = sd_st_writer_new();
    size_t plen = strlen(SD_UNET_PREFIX);
    for (size_t i = 0; i < sd_st_count(src); i++) {
        const sd_st_entry *e = sd_st_at(src, i);
        if (strncmp(e->name, SD_UNET_PREFIX, plen) != 0) continue;
        if (kind == EDIT_DROP && strcmp(e->name + plen, target) == 0) continue;
        sd_tensor *t = sd_st_tensor(src, e->name, &err), *r = NULL;
        char name[512];
        snprintf(name, sizeof name, "%s", e->name);
        if (kind == EDIT_RESHAPE && strcmp(e->name + plen, target) == 0) {
            int64_t flat = sd_tensor_numel(t);
            r = sd_tensor_reshape(t, 1, &flat);
        } else if (kind == EDIT_FLATTEN_PROJ && t->ndim == 4 && t->shape[2] == 1 && t->shape[3] == 1 &&
                   (strstr(e->name, ".proj_in.") || strstr(e->name, ".proj_out."))) {
            r = sd_tensor_reshape(t, 2, t->shape);
        } else if (kind == EDIT_RENAME_ALL) {
            snprintf(name, sizeof name, "first_stage_model.%s", e->name + plen);
        }
        sd_st_writer_add(w, name, r ? r : t, &err);
        sd_tensor_unref(r);
        sd_tensor_unref(t);
    }
    size_t size = 0;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_writer_to_memory(w, buf, &size, &err), &err);
    sd_st_writer_free(w);
    if (*buf) CHECK_OK(sd_st_open_memory(*buf, size, "edited.safetensors", &f, &err), &err);
    return f;
}

static void expect_load_error(sd_backend *be, sd_st_file *src, edit_kind kind, const char *target,
                              sd_status want, const char *must_mention) {
    void *buf = NULL;
    sd_st_file *f = edited(src, kind, target, &buf);
    if (f) {
        sd_error err;
        sd_error_clear(&err);
        sd_unet *u = NULL;
        sd_status rc = sd_unet_load(be, f, NULL, SD_F32, &u, &err);
        CHECK_MSG(rc == want && u == NULL && strstr(err.msg, must_mention),
                  "edit %d of %s: got rc %d (%s), want %d mentioning '%s'", (int)kind, target ? target : "-",
                  rc, err.msg, want, must_mention);
        printf("  edit %d: %s\n", (int)kind, err.msg);
        sd_unet_free(u);
        sd_st_close(f);
    }
    free(buf);
}

/* An SD1 UNet whose proj_in/proj_out are flattened to linear layers has
 * SD2.x's layout (linear proj, no label_emb): detected as SD2, 64-wide heads. */
static void expect_sd2_layout(sd_st_file *src) {
    void *buf = NULL;
    sd_st_file *f = edited(src, EDIT_FLATTEN_PROJ, NULL, &buf);
    if (f) {
        sd_error err;
        sd_error_clear(&err);
        sd_unet_config cfg;
        sd_status rc = sd_unet_detect(f, SD_UNET_PREFIX, &cfg, &err);
        CHECK_MSG(rc == SD_OK && cfg.kind == SD_UNET_SD2 && cfg.use_linear_in_transformer &&
                      cfg.num_heads == -1 && cfg.num_head_channels == 64 && cfg.adm_in_channels == 0,
                  "flattened proj: rc %d (%s), kind %d", rc, err.msg, (int)cfg.kind);
        sd_st_close(f);
    }
    free(buf);
}

static void run_detection_errors(sd_backend *be, const char *dir, cJSON *manifest) {
    /* the first model with a conv-proj (SD1-style) UNet */
    cJSON *m;
    const char *file = NULL;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *uc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"), "unet_config");
        if (uc && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(uc, "use_linear_in_transformer"))) {
            file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
            break;
        }
    }
    CHECK_MSG(file != NULL, "manifest has no SD1-style UNet model");
    if (!file) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *src = NULL;
    CHECK_OK(sd_st_open(path, &src, &err), &err);
    if (!src) return;
    case_id = "detect";
    const char *to_v = "input_blocks.4.1.transformer_blocks.0.attn2.to_v.weight";
    const char *conv = "middle_block.0.out_layers.3.weight";
    expect_load_error(be, src, EDIT_DROP, to_v, SD_ERR_NOT_FOUND, to_v);
    expect_load_error(be, src, EDIT_RESHAPE, conv, SD_ERR_FORMAT, conv);
    expect_sd2_layout(src);
    expect_load_error(be, src, EDIT_RENAME_ALL, NULL, SD_ERR_NOT_FOUND, "input_blocks.0.0.weight");
    sd_st_close(src);
}

int main(void) {
    const char *dir = sd_golden_dir();
    cJSON *manifest = sd_golden_manifest(dir);

    /* Every unet case the manifest lists must have its file. */
    cJSON *c;
    int n_cases = sd_golden_require_cases(manifest, dir, "unet");
    CHECK_MSG(n_cases > 0, "manifest lists no unet case");

    sd_backend *be = sd_golden_backend();
    if (be) {
        sd_golden_run_cases(be, dir, manifest, "unet", run_case, NULL, NULL, &case_id);
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
            if (!sd_golden_case_is(c, "controlnet")) continue;
            case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
            printf("case %s (UNet control hook)\n", case_id);
            run_control_case(be, dir, manifest, c);
        }
        run_detection_errors(be, dir, manifest);
        sd_backend_free(be);
    }
    cJSON_Delete(manifest);
    return sd_test_finish();
}
