/* test_golden_zimage_dit.c - the Z-Image NextDiT (models/zimage/zimage.h)
 * against ComfyUI's reference tensors: every "dit" case of the Z-Image set
 * (zimage/manifest.json; SDFLOW_TESTDATA_ZIMAGE or SDFLOW_TESTDATA/zimage).
 *
 * The model is the manifest model whose config matches the case's
 * settings.dit and cap_feat_dim; sd_zimage_detect must give the manifest
 * model's config exactly (axes, heads, eps, theta, time scale, padding
 * multiple included). Tensors are grouped by prefix ("a.x" -> group "a."):
 * one forward per group on its x, sigma (timestep = sigma: the flow
 * schedules' timestep(sigma)) and context; "num_tokens" must be the
 * context's length (the model attends to every token: ComfyUI passes no
 * mask then); "out" is the raw output, "denoised" apply_model's
 * x - out * sigma through Z-Image's default model sampling, and every
 * "act.<name>" an activation from the model's tap. Every tensor of a case
 * must be checked. Also: a wrongly shaped and a missing tensor (copies of
 * the manifest model edited in memory) must fail naming the key, a file
 * without the NextDiT with SD_ERR_NOT_FOUND, and a Lumina 2 layout with
 * SD_ERR_UNSUPPORTED. */
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
#include "models/zimage/zimage.h"

static const char *case_id;

static sd_tensor *input(sd_st_file *g, const char *name) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(t != NULL, "%s: input %s: %s", case_id, name, err.msg);
    return t;
}

static int has_tensor(cJSON *tensors, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(tensors, name) != NULL;
}

static double num(cJSON *o, const char *key) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    if (cJSON_IsString(v)) { /* "8/3" */
        double a = 0, b = 1;
        if (sscanf(v->valuestring, "%lf/%lf", &a, &b) == 2) return a / b;
        return atof(v->valuestring);
    }
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The FFN width NextDiT's FeedForward computes from dim, multiple_of and
 * ffn_dim_multiplier (hidden_dim = dim: int(mult * dim), rounded up to the
 * multiple). */
static double ffn_of(cJSON *want, double dim) {
    double mult = num(want, "ffn_dim_multiplier"), mo = num(want, "multiple_of");
    if (isnan(mult) || isnan(mo) || mo <= 0) return NAN;
    double hid = floor(mult * dim);
    return mo * floor((hid + mo - 1) / mo);
}

/* Every key of `want` (a manifest config or a case's settings.dit) that the
 * detected config has must be equal; descriptive keys are skipped. */
static int config_matches(const sd_zimage_config *c, cJSON *want, int report) {
    struct {
        const char *key;
        double got;
    } k[] = {
        {"dim", c->dim},
        {"n_heads", c->n_heads},
        {"n_kv_heads", c->n_kv_heads},
        {"n_layers", c->n_layers},
        {"n_refiner_layers", c->n_refiner_layers},
        {"cap_feat_dim", c->cap_feat_dim},
        {"patch_size", c->patch_size},
        {"in_channels", c->in_channels},
        {"norm_eps", c->norm_eps},
        {"qk_norm", 1},
        {"rope_theta", c->rope_theta},
        {"z_image_modulation", 1}, /* detection refuses the other NextDiTs */
        {"time_scale", c->time_scale},
        {"pad_tokens_multiple", c->pad_tokens_multiple},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        if (!cJSON_GetObjectItemCaseSensitive(want, k[i].key)) continue;
        double w = num(want, k[i].key);
        int same = strcmp(k[i].key, "norm_eps") == 0 ? fabs(w - k[i].got) <= 1e-9 : w == k[i].got;
        if (!same) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected %s = %g, the manifest says %g", case_id, k[i].key, k[i].got, w);
        }
    }
    if (cJSON_GetObjectItemCaseSensitive(want, "ffn_dim_multiplier")) {
        double f = ffn_of(want, c->dim);
        if (f != c->ffn_hidden) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: FFN width %d, the manifest's config gives %g", case_id, c->ffn_hidden, f);
        }
    }
    cJSON *axes = cJSON_GetObjectItemCaseSensitive(want, "axes_dims");
    if (axes) {
        int same = cJSON_GetArraySize(axes) == SD_ZIMAGE_AXES;
        for (int i = 0; same && i < SD_ZIMAGE_AXES; i++) same = cJSON_GetArrayItem(axes, i)->valueint == c->axes_dim[i];
        if (!same) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected axes_dims differ from the manifest's", case_id);
        }
    }
    return ok;
}

static const char *model_for(const char *dir, cJSON *manifest, cJSON *settings, cJSON **model_cfg) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!cfg || !file || !cJSON_GetObjectItemCaseSensitive(cfg, "n_refiner_layers")) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *f = NULL;
        sd_error err;
        if (sd_st_open(path, &f, &err)) continue;
        sd_zimage_config c;
        int ok = sd_zimage_detect(f, "", &c, &err) == SD_OK &&
                 config_matches(&c, cJSON_GetObjectItemCaseSensitive(settings, "dit"), 0) &&
                 num(settings, "cap_feat_dim") == c.cap_feat_dim;
        sd_st_close(f);
        if (ok) {
            *model_cfg = cfg;
            return file;
        }
    }
    return NULL;
}

/* Longest chain of matrix ops (the bf16 slack, golden.h): the time MLP (2)
 * and a modulation, the caption embedder, six per block (qkv, two attention
 * matmuls, out, w1 / w3, w2) through the context refiner and the main
 * layers, the final linear. */
static int depth_of(const sd_zimage_config *c) {
    return 3 + 1 + 6 * (c->n_refiner_layers + c->n_layers) + 1;
}

static void run_group(sd_backend *be, sd_zimage *m, const sd_model_sampling *ms, sd_st_file *g,
                      cJSON *tensors, const char *pre, int *used) {
    char nm[160];
    sd_error err;
    sd_error_clear(&err);
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", pre, s), nm)
#define USE(s) sd_golden_mark(tensors, used, NAME(s))
    sd_tensor *x = input(g, NAME("x")), *ctx = input(g, NAME("context")), *sig = input(g, NAME("sigma"));
    USE("x"), USE("context"), USE("sigma");
    if (!x || !ctx || !sig) goto out;
    if (has_tensor(tensors, NAME("num_tokens"))) {
        sd_tensor *nt = sd_st_tensor(g, NAME("num_tokens"), &err);
        CHECK_MSG(nt && sd_tensor_numel(nt) == 1, "%s: %s", case_id, nm);
        if (nt && sd_tensor_numel(nt) == 1) {
            long long v = nt->dtype == SD_I64 ? (long long)((int64_t *)nt->data)[0] : -1;
            CHECK_MSG(v == ctx->shape[1], "%s: num_tokens %lld, the context has %lld tokens", case_id,
                      v, (long long)ctx->shape[1]);
        }
        sd_tensor_unref(nt);
        USE("num_tokens");
    }
    int64_t n = x->shape[0];
    CHECK_MSG(sd_tensor_numel(sig) == n, "%s: one sigma per batch item", case_id);
    if (sd_tensor_numel(sig) != n) goto out;
    float *ts = malloc((size_t)n * sizeof *ts);
    for (int64_t i = 0; i < n; i++) ts[i] = sd_ms_timestep(ms, sd_tensor_f32(sig)[i]);

    sd_golden_taps taps;
    sd_golden_taps_collect(&taps, tensors, pre, NULL, case_id);
    sd_zimage_set_tap(m, sd_golden_tap, &taps);
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32), *bo = NULL;
    CHECK_OK(sd_zimage_forward(m, bx, ts, bc, &bo, &err), &err);
    sd_zimage_set_tap(m, NULL, NULL);
    sd_tensor *out = bo ? sd_bt_to_host(bo) : NULL;
    sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(bo);

    sd_golden_taps_check(&taps, case_id, tensors, g, pre, used);
    if (has_tensor(tensors, NAME("out"))) {
        sd_golden_compare(case_id, tensors, g, NAME("out"), out);
        USE("out");
    }
    if (out && has_tensor(tensors, NAME("denoised"))) {
        sd_tensor *den = sd_tensor_clone(out);
        int64_t per = sd_tensor_numel(x) / n;
        for (int64_t i = 0; i < n; i++)
            sd_ms_calculate_denoised(ms, sd_tensor_f32(sig)[i], sd_tensor_f32(out) + i * per,
                                     sd_tensor_f32(x) + i * per, sd_tensor_f32(den) + i * per, (size_t)per);
        sd_golden_compare(case_id, tensors, g, NAME("denoised"), den);
        USE("denoised");
        sd_tensor_unref(den);
    }
    sd_tensor_unref(out);
    free(ts);
out:
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(sig);
#undef NAME
#undef USE
}

static void run_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    sd_golden_set_depth(0);
    char path[1200];
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    cJSON *mcfg = NULL;
    const char *model = model_for(dir, manifest, settings, &mcfg);
    CHECK_MSG(model && file && tensors, "%s: no manifest model fits the case's settings", case_id);
    if (!model || !file || !tensors) return;
    cJSON *note;
    cJSON_ArrayForEach(note, cJSON_GetObjectItemCaseSensitive(c, "notes"))
        printf("  note: %s\n", cJSON_GetStringValue(note));

    snprintf(path, sizeof path, "%s/%s", dir, model);
    sd_st_file *mf = NULL, *g = NULL;
    sd_zimage *m = NULL;
    CHECK_OK(sd_st_open(path, &mf, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!mf || !g) goto done;
    CHECK_OK(sd_zimage_load(be, mf, "", SD_F32, &m, &err), &err);
    if (!m) goto done;
    const sd_zimage_config *cfg = sd_zimage_get_config(m);
    config_matches(cfg, mcfg, 1);
    printf("  model %s: dim %d, %d heads (%d kv) of %d, %d refiner + %d layers, ffn %d, axes [%d, %d, %d]\n",
           model, cfg->dim, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->n_refiner_layers,
           cfg->n_layers, cfg->ffn_hidden, cfg->axes_dim[0], cfg->axes_dim[1], cfg->axes_dim[2]);
    sd_golden_set_depth(depth_of(cfg));
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_model_sampling_init_zimage(ms);

    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *s = t->string;
        size_t len = strlen(s);
        if (strcmp(s, "x") != 0 && !(len > 2 && strcmp(s + len - 2, ".x") == 0)) continue;
        char pre[64];
        snprintf(pre, sizeof pre, "%.*s", (int)(len - 1), s);
        run_group(be, m, ms, g, tensors, pre, used);
    }
    int i = 0;
    cJSON_ArrayForEach(t, tensors) {
        CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
    free(used);
    free(ms);
done:
    sd_zimage_free(m);
    sd_st_close(mf);
    sd_st_close(g);
}

/* ---- bad files ------------------------------------------------------------ */

/* A copy of src with `drop` left out, `flatten` reshaped to 1-D and `add`
 * (a [1] tensor) added. */
static sd_st_file *edited(sd_st_file *src, const char *drop, const char *flatten, const char *add,
                          void **buf) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; i < sd_st_count(src); i++) {
        const sd_st_entry *e = sd_st_at(src, i);
        if (drop && strcmp(e->name, drop) == 0) continue;
        sd_tensor *t = sd_st_tensor(src, e->name, &err), *r = NULL;
        if (flatten && strcmp(e->name, flatten) == 0) {
            int64_t flat = sd_tensor_numel(t);
            r = sd_tensor_reshape(t, 1, &flat);
        }
        sd_st_writer_add(w, e->name, r ? r : t, &err);
        sd_tensor_unref(r);
        sd_tensor_unref(t);
    }
    if (add) {
        sd_tensor *t = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
        sd_st_writer_add(w, add, t, &err);
        sd_tensor_unref(t);
    }
    size_t size = 0;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_writer_to_memory(w, buf, &size, &err), &err);
    sd_st_writer_free(w);
    if (*buf) CHECK_OK(sd_st_open_memory(*buf, size, "edited-zimage.safetensors", &f, &err), &err);
    return f;
}

static void expect_error(sd_backend *be, sd_st_file *src, const char *drop, const char *flatten,
                         const char *add, sd_status want, const char *mention) {
    void *buf = NULL;
    sd_st_file *f = edited(src, drop, flatten, add, &buf);
    if (f) {
        sd_error err;
        sd_error_clear(&err);
        sd_zimage *m = NULL;
        sd_status rc = sd_zimage_load(be, f, "", SD_F32, &m, &err);
        CHECK_MSG(rc == want && !m && strstr(err.msg, mention) && strstr(err.msg, "edited-zimage"),
                  "edit (drop %s, flatten %s, add %s): rc %d (%s), want %d naming '%s' and the file",
                  drop ? drop : "-", flatten ? flatten : "-", add ? add : "-", rc, err.msg, want, mention);
        printf("  bad file: %s\n", err.msg);
        sd_zimage_free(m);
        sd_st_close(f);
    }
    free(buf);
}

static void run_bad_files(sd_backend *be, const char *dir, cJSON *manifest) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!cfg || !file || !cJSON_GetObjectItemCaseSensitive(cfg, "n_refiner_layers")) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *src = NULL;
        sd_error err;
        sd_error_clear(&err);
        CHECK_OK(sd_st_open(path, &src, &err), &err);
        if (!src) return;
        case_id = "bad files";
        const char *out = "context_refiner.0.attention.out.weight";
        const char *w2 = "noise_refiner.0.feed_forward.w2.weight";
        expect_error(be, src, NULL, out, NULL, SD_ERR_FORMAT, out);
        expect_error(be, src, w2, NULL, NULL, SD_ERR_NOT_FOUND, w2);
        expect_error(be, src, "x_pad_token", NULL, NULL, SD_ERR_UNSUPPORTED, "Lumina");
        expect_error(be, src, NULL, NULL, "clip_text_pooled_proj.0.weight", SD_ERR_UNSUPPORTED, "NewBie");
        expect_error(be, src, "cap_embedder.1.weight", NULL, NULL, SD_ERR_NOT_FOUND, "no NextDiT");
        sd_st_close(src);
        return; /* one model is enough */
    }
    CHECK_MSG(0, "manifest has no Z-Image model");
}

int main(void) {
    const char *dir = sd_golden_family_dir("zimage");
    cJSON *manifest = sd_golden_manifest(dir);
    int n_cases = sd_golden_require_cases(manifest, dir, "dit");
    CHECK_MSG(n_cases > 0, "manifest lists no dit case");
    sd_backend *be = sd_golden_backend();
    if (be) {
        sd_golden_run_cases(be, dir, manifest, "dit", run_case, NULL, NULL, &case_id);
        run_bad_files(be, dir, manifest);
        sd_backend_free(be);
    }
    cJSON_Delete(manifest);
    return sd_test_finish();
}
