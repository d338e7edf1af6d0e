/* test_golden_flux_dit.c - the Flux DiT (models/flux/flux.h) against
 * ComfyUI's reference tensors: every "dit" case of the Flux set
 * (flux/manifest.json; SDFLOW_TESTDATA_FLUX or SDFLOW_TESTDATA/flux).
 *
 * The model is the manifest model whose config matches the case's
 * settings.dit (+ vec_in_dim, context_in_dim) and whose guidance_embed says
 * whether the case feeds a guidance input; sd_flux_detect must give that
 * config exactly (axes included). Tensors are grouped by prefix ("a.x" ->
 * group "a."): one forward per group on its x, sigma (timestep = sigma:
 * the flow schedules' timestep(sigma)), context, y and guidance; "out" is
 * the raw velocity, "denoised" apply_model's x - out * sigma through the
 * model's sampling (models/sampling/model_sampling.h), and every
 * "act.<name>" an activation from the model's tap. Every tensor of a case
 * must be checked. Also: a file with one wrongly shaped
 * and one missing tensor (copies of a manifest model edited in memory) must
 * fail with errors naming the key, and a file with no Flux DiT with
 * SD_ERR_NOT_FOUND. */
#include "testutil.h"
#include "golden.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/flux/flux.h"
#include "models/sampling/model_sampling.h"

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
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Every key of `want` (a manifest config or the case's settings.dit) that
 * the detected config has must be equal; keys the detection does not know
 * (latent_format, model_sampling) are descriptive text. */
static int config_matches(const sd_flux_config *c, cJSON *want, int report) {
    struct {
        const char *key;
        double got;
    } k[] = {
        {"hidden_size", c->hidden_size},       {"num_heads", c->num_heads},
        {"depth", c->depth},                   {"depth_single_blocks", c->depth_single_blocks},
        {"mlp_ratio", c->mlp_ratio},           {"in_channels", c->in_channels},
        {"patch_size", c->patch_size},         {"theta", c->theta},
        {"qkv_bias", c->qkv_bias},             {"vec_in_dim", c->vec_in_dim},
        {"context_in_dim", c->context_in_dim}, {"out_channels", c->out_channels},
        {"guidance_embed", c->guidance_embed},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        if (!cJSON_GetObjectItemCaseSensitive(want, k[i].key)) continue;
        double w = num(want, k[i].key);
        if (w != k[i].got) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected %s = %g, the manifest says %g", case_id, k[i].key, k[i].got, w);
        }
    }
    cJSON *axes = cJSON_GetObjectItemCaseSensitive(want, "axes_dim");
    if (axes) {
        int same = cJSON_GetArraySize(axes) == c->n_axes;
        for (int i = 0; same && i < c->n_axes; i++) same = cJSON_GetArrayItem(axes, i)->valueint == c->axes_dim[i];
        if (!same) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected axes_dim differs from the manifest's", case_id);
        }
    }
    return ok;
}

/* The manifest model for a case: its config matches settings.dit and the
 * case's widths, and it has guidance_in exactly when the case feeds one. */
static const char *model_for(const char *dir, cJSON *manifest, cJSON *settings, int guidance,
                             cJSON **model_cfg) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!cfg || !file || !cJSON_GetObjectItemCaseSensitive(cfg, "hidden_size")) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *f = NULL;
        sd_error err;
        if (sd_st_open(path, &f, &err)) continue;
        sd_flux_config c;
        int ok = sd_flux_detect(f, "", &c, &err) == SD_OK &&
                 config_matches(&c, cJSON_GetObjectItemCaseSensitive(settings, "dit"), 0) &&
                 num(settings, "vec_in_dim") == c.vec_in_dim &&
                 num(settings, "context_in_dim") == c.context_in_dim && c.guidance_embed == guidance &&
                 num(cfg, "guidance_embed") == guidance;
        sd_st_close(f);
        if (ok) {
            *model_cfg = cfg;
            return file;
        }
    }
    return NULL;
}

/* Longest chain of matrix ops from the inputs to the output (the bf16
 * slack, golden.h): img_in, time_in's two linears and a modulation on the
 * vec path, four per double block (qkv, proj, mlp in, mlp out), two per
 * single block (linear1, linear2), the final adaLN and linear; attention's
 * two matmuls per block on top. */
static int depth_of(const sd_flux_config *c) {
    return 1 + 3 + 6 * c->depth + 4 * c->depth_single_blocks + 2;
}

static void run_group(sd_backend *be, sd_flux *m, const sd_model_sampling *ms, sd_st_file *g,
                      cJSON *tensors, const char *pre, int *used) {
    char nm[160];
    sd_error err;
    sd_error_clear(&err);
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", pre, s), nm)
#define USE(s) sd_golden_mark(tensors, used, NAME(s))
    sd_tensor *x = input(g, NAME("x")), *ctx = input(g, NAME("context")), *sig = input(g, NAME("sigma"));
    USE("x"), USE("context"), USE("sigma");
    sd_tensor *y = NULL, *gd = NULL;
    if (has_tensor(tensors, NAME("y"))) y = input(g, NAME("y")), USE("y");
    if (has_tensor(tensors, NAME("guidance"))) gd = input(g, NAME("guidance")), USE("guidance");
    if (!x || !ctx || !sig) goto out;
    int64_t n = x->shape[0];
    CHECK_MSG(sd_tensor_numel(sig) == n && (!gd || sd_tensor_numel(gd) == n),
              "%s: one sigma (and guidance) per batch item", case_id);
    if (sd_tensor_numel(sig) != n) goto out;
    float *ts = malloc((size_t)n * sizeof *ts);
    for (int64_t i = 0; i < n; i++) ts[i] = sd_ms_timestep(ms, sd_tensor_f32(sig)[i]);

    sd_golden_taps taps;
    sd_golden_taps_collect(&taps, tensors, pre, NULL, case_id);
    sd_flux_set_tap(m, sd_golden_tap, &taps);
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
    sd_bt *by = y ? sd_bt_from_host(be, y, SD_F32) : NULL, *bo = NULL;
    CHECK_OK(sd_flux_forward(m, bx, ts, bc, by, gd ? sd_tensor_f32(gd) : NULL, &bo, &err), &err);
    sd_flux_set_tap(m, NULL, NULL);
    sd_tensor *out = bo ? sd_bt_to_host(bo) : NULL;
    sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(by), sd_bt_free(bo);

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
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(sig), sd_tensor_unref(y), sd_tensor_unref(gd);
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
    int guidance = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        size_t len = strlen(t->string);
        if (len >= 8 && strcmp(t->string + len - 8, "guidance") == 0) guidance = 1;
    }
    cJSON *mcfg = NULL;
    const char *model = model_for(dir, manifest, settings, guidance, &mcfg);
    CHECK_MSG(model && file && tensors, "%s: no manifest model fits the case's settings", case_id);
    if (!model || !file || !tensors) return;
    cJSON *note;
    cJSON_ArrayForEach(note, cJSON_GetObjectItemCaseSensitive(c, "notes"))
        printf("  note: %s\n", cJSON_GetStringValue(note));

    snprintf(path, sizeof path, "%s/%s", dir, model);
    sd_st_file *mf = NULL, *g = NULL;
    sd_flux *m = NULL;
    CHECK_OK(sd_st_open(path, &mf, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!mf || !g) goto done;
    CHECK_OK(sd_flux_load(be, mf, "", SD_F32, &m, &err), &err);
    if (!m) goto done;
    const sd_flux_config *cfg = sd_flux_get_config(m);
    config_matches(cfg, mcfg, 1);
    printf("  model %s: hidden %d, %d heads of %d, %d+%d blocks, axes [%d, %d, %d]\n", model,
           cfg->hidden_size, cfg->num_heads, cfg->head_dim, cfg->depth, cfg->depth_single_blocks,
           cfg->axes_dim[0], cfg->axes_dim[1], cfg->axes_dim[2]);
    sd_golden_set_depth(depth_of(cfg));
    sd_model_sampling *ms = malloc(sizeof *ms);
    if (cfg->guidance_embed) sd_model_sampling_init_flux_dev(ms);
    else sd_model_sampling_init_flux_schnell(ms);

    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);
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
    sd_flux_free(m);
    sd_st_close(mf);
    sd_st_close(g);
}

/* ---- bad files ------------------------------------------------------------ */

/* A copy of src with `drop` left out and `flatten` reshaped to 1-D. */
static sd_st_file *edited(sd_st_file *src, const char *drop, const char *flatten, void **buf) {
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
    size_t size = 0;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_writer_to_memory(w, buf, &size, &err), &err);
    sd_st_writer_free(w);
    if (*buf) CHECK_OK(sd_st_open_memory(*buf, size, "edited-flux.safetensors", &f, &err), &err);
    return f;
}

static void expect_error(sd_backend *be, sd_st_file *src, const char *drop, const char *flatten,
                         sd_status want, const char *mention) {
    void *buf = NULL;
    sd_st_file *f = edited(src, drop, flatten, &buf);
    if (f) {
        sd_error err;
        sd_error_clear(&err);
        sd_flux *m = NULL;
        sd_status rc = sd_flux_load(be, f, "", SD_F32, &m, &err);
        CHECK_MSG(rc == want && !m && strstr(err.msg, mention) && strstr(err.msg, "edited-flux"),
                  "edit (drop %s, flatten %s): rc %d (%s), want %d naming '%s' and the file",
                  drop ? drop : "-", flatten ? flatten : "-", rc, err.msg, want, mention);
        printf("  bad file: %s\n", err.msg);
        sd_flux_free(m);
        sd_st_close(f);
    }
    free(buf);
}

static void run_bad_files(sd_backend *be, const char *dir, cJSON *manifest) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!cfg || !file || !cJSON_GetObjectItemCaseSensitive(cfg, "hidden_size")) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *src = NULL;
        sd_error err;
        sd_error_clear(&err);
        CHECK_OK(sd_st_open(path, &src, &err), &err);
        if (!src) return;
        case_id = "bad files";
        const char *proj = "double_blocks.0.txt_attn.proj.weight";
        const char *lin2 = "single_blocks.0.linear2.weight";
        expect_error(be, src, NULL, proj, SD_ERR_FORMAT, proj);
        expect_error(be, src, lin2, NULL, SD_ERR_NOT_FOUND, lin2);
        expect_error(be, src, "txt_in.weight", NULL, SD_ERR_NOT_FOUND, "txt_in.weight");
        expect_error(be, src, "img_in.weight", NULL, SD_ERR_NOT_FOUND, "no Flux DiT");
        sd_st_close(src);
        return; /* one model is enough */
    }
    CHECK_MSG(0, "manifest has no Flux model");
}

int main(void) {
    const char *dir = sd_golden_family_dir("flux");
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
