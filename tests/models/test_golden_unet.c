/* test_golden_unet.c - the UNet against ComfyUI's reference tensors.
 *
 * Runs every manifest.json case whose component is "unet". The checkpoint is
 * the manifest model whose unet_config equals the case's settings.unet_config;
 * the detected config must equal it too. Tensors are grouped by prefix
 * ("a.x" -> group "a", plain "x" -> group ""): each group is one forward with
 * its inputs (x, timesteps or sigma, context, pooled + size.* -> y), and every
 * expected/intermediate tensor of the group is compared with its own
 * tolerance. A tensor the test does not know how to produce is a failure,
 * never silently ignored. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "kernels/backend.h"
#include "models/model_sampling.h"
#include "models/unet.h"

#define MAX_TAPS 16

typedef struct tap_set {
    int n;
    char names[MAX_TAPS][96];
    sd_tensor *got[MAX_TAPS];
} tap_set;

static void on_tap(void *user, const char *name, const sd_bt *t) {
    tap_set *ts = user;
    for (int i = 0; i < ts->n; i++)
        if (!ts->got[i] && strcmp(ts->names[i], name) == 0) ts->got[i] = sd_bt_to_host(t);
}

static const char *case_id;

/* Compare actual with golden tensor `name` of the case using its tolerance. */
static void compare(cJSON *tensors, sd_st_file *g, const char *name, sd_tensor *actual) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(tensors, name);
    cJSON *tol = cJSON_GetObjectItemCaseSensitive(meta, "tolerance");
    double atol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tol, "atol"));
    double rtol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tol, "rtol"));
    CHECK_MSG(!isnan(atol) && !isnan(rtol), "%s %s: no tolerance in the manifest", case_id, name);
    sd_tensor *exp = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(exp != NULL, "%s: golden tensor %s missing: %s", case_id, name, err.msg);
    CHECK_MSG(actual != NULL, "%s %s: not produced", case_id, name);
    if (!exp || !actual) {
        sd_tensor_unref(exp);
        return;
    }
    int same = actual->ndim == exp->ndim;
    for (int i = 0; same && i < exp->ndim; i++) same = actual->shape[i] == exp->shape[i];
    char b1[96], b2[96];
    CHECK_MSG(same, "%s %s: shape %s, expected %s", case_id, name,
              sd_tensor_shape_str(actual, b1, sizeof b1), sd_tensor_shape_str(exp, b2, sizeof b2));
    if (same) {
        double max_abs = 0;
        long worst = -1;
        int ok = sd_test_allclose(actual, exp, atol, rtol, &max_abs, &worst);
        printf("  %-10s %-26s max|err| %.3g (atol %.3g rtol %.3g) %s\n", case_id, name, max_abs, atol,
               rtol, ok ? "ok" : "FAIL");
        CHECK_MSG(ok, "%s %s: max abs error %g at %ld (atol %g, rtol %g)", case_id, name, max_abs,
                  worst, atol, rtol);
    }
    sd_tensor_unref(exp);
}

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
            compare(tensors, g, NAME("timestep"), tt);
            USE("timestep");
            sd_tensor_unref(tt);
        }
        xin = sd_tensor_clone(x);
        int64_t per = sd_tensor_numel(x) / n;
        for (int64_t i = 0; i < n; i++)
            sd_ms_calculate_input(ms, sig[i], sd_tensor_f32(x) + i * per, sd_tensor_f32(xin) + i * per,
                                  (size_t)per);
        if (has_tensor(tensors, NAME("x_in"))) {
            compare(tensors, g, NAME("x_in"), xin);
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
            compare(tensors, g, NAME("y"), y);
            USE("y");
        }
    }

    /* Activations the manifest names: "t_emb" and "act.<module path>". */
    tap_set taps = {0};
    cJSON *t;
    size_t plen = strlen(pre);
    cJSON_ArrayForEach(t, tensors) {
        const char *s = t->string;
        if (strncmp(s, pre, plen) != 0) continue;
        s += plen;
        const char *tap_name = strcmp(s, "t_emb") == 0 ? s : strncmp(s, "act.", 4) == 0 ? s + 4 : NULL;
        if (!tap_name || taps.n >= MAX_TAPS) continue;
        snprintf(taps.names[taps.n++], sizeof taps.names[0], "%s", tap_name);
    }
    sd_unet_set_tap(u, on_tap, &taps);

    sd_bt *bx = sd_bt_from_host(be, xin, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
    sd_bt *by = y ? sd_bt_from_host(be, y, SD_F32) : NULL, *bout = NULL;
    CHECK_OK(sd_unet_forward(u, bx, ts, bc, by, NULL, &bout, &err), &err);
    sd_unet_set_tap(u, NULL, NULL);
    sd_tensor *out = bout ? sd_bt_to_host(bout) : NULL;
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(by);
    sd_bt_free(bout);

    for (int i = 0; i < taps.n; i++) {
        char full[128];
        snprintf(full, sizeof full, "%s%s", strcmp(taps.names[i], "t_emb") ? "act." : "", taps.names[i]);
        compare(tensors, g, NAME(full), taps.got[i]);
        USE(full);
        sd_tensor_unref(taps.got[i]);
    }

    if (ms) {
        if (has_tensor(tensors, NAME("eps"))) {
            compare(tensors, g, NAME("eps"), out);
            USE("eps");
        }
        if (out && has_tensor(tensors, NAME("denoised"))) {
            sd_tensor *den = sd_tensor_clone(out);
            int64_t per = sd_tensor_numel(x) / n;
            for (int64_t i = 0; i < n; i++)
                sd_ms_calculate_denoised(ms, sig[i], sd_tensor_f32(out) + i * per, sd_tensor_f32(x) + i * per,
                                         sd_tensor_f32(den) + i * per, (size_t)per);
            compare(tensors, g, NAME("denoised"), den);
            USE("denoised");
            sd_tensor_unref(den);
        }
    } else if (has_tensor(tensors, NAME("out"))) {
        compare(tensors, g, NAME("out"), out);
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

int main(void) {
    const char *dir = getenv("SDFLOW_TESTDATA");
    if (!dir || !*dir) dir = sd_test_testdata_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = sd_test_read_file(path, NULL);
    if (!text) sd_test_skip("no reference data (%s)", path);
    cJSON *manifest = cJSON_Parse(text);
    free(text);
    CHECK_MSG(manifest != NULL, "%s: not valid JSON", path);
    if (!manifest) return sd_test_finish();

    /* Skip (not pass) when the data files of the unet cases are absent. */
    cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        const char *comp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "component"));
        if (!comp || strcmp(comp, "unet") != 0) continue;
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
        snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            cJSON_Delete(manifest);
            sd_test_skip("reference file %s absent", path);
        }
        fclose(fp);
        n_cases++;
    }
    CHECK_MSG(n_cases > 0, "manifest lists no unet case");

    sd_backend *be = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    if (be) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
            const char *comp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "component"));
            if (!comp || strcmp(comp, "unet") != 0) continue;
            case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
            printf("case %s\n", case_id);
            run_case(be, dir, manifest, c);
        }
        sd_backend_free(be);
    }
    cJSON_Delete(manifest);
    return sd_test_finish();
}
