/* test_golden_sd3_dit.c - the SD3 MMDiT (models/sd3/sd3.h) against
 * ComfyUI's reference tensors: every "dit" case of the SD3 set
 * (sd3/manifest.json; SDFLOW_TESTDATA_SD3 or SDFLOW_TESTDATA/sd3).
 *
 * The model is the manifest model whose config matches the case's
 * settings (settings.mmdit, hidden_size, num_heads, context_in, adm_in);
 * sd_sd3_detect must give that config exactly (MMDiT-X blocks and qk norm
 * included). Tensors are grouped by prefix ("a.x" -> group "a."): one
 * forward per group on its x, timestep (checked against the model
 * sampling's timestep(sigma): SD3's default ModelSamplingDiscreteFlow,
 * shift 3, multiplier 1000), context and y; "out" is the raw velocity,
 * "denoised" apply_model's x - out * sigma, and every "act.<name>" an
 * activation from the model's tap. Every tensor of a case must be checked.
 * Also: edited copies of a manifest model (a wrongly shaped and a missing
 * tensor) fail with errors naming the key, a file with no MMDiT with
 * SD_ERR_NOT_FOUND, and a latent larger than the position embedding with
 * SD_ERR_INVALID naming the limit. */
#include "testutil.h"
#include "golden.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/sd3/sd3.h"
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

/* The case's settings (settings.mmdit + the widths) against a detected
 * config. */
static int config_matches(const sd_sd3_config *c, cJSON *settings, int report) {
    cJSON *mm = cJSON_GetObjectItemCaseSensitive(settings, "mmdit");
    struct {
        cJSON *o;
        const char *key;
        double got;
    } k[] = {
        {mm, "depth", c->depth},
        {mm, "patch_size", c->patch_size},
        {mm, "pos_embed_max_size", c->pos_embed_max_size},
        {settings, "hidden_size", c->hidden_size},
        {settings, "num_heads", c->num_heads},
        {settings, "context_in", c->context_in_dim},
        {settings, "adm_in", c->adm_in_channels},
        {settings, "in_channels", c->in_channels},
        {settings, "out_channels", c->out_channels},
    };
    int ok = mm != NULL;
    if (!mm && report) CHECK_MSG(0, "%s: settings.mmdit missing", case_id);
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        if (!k[i].o || !cJSON_GetObjectItemCaseSensitive(k[i].o, k[i].key)) continue;
        double w = num(k[i].o, k[i].key);
        if (w != k[i].got) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected %s = %g, the manifest says %g", case_id, k[i].key, k[i].got, w);
        }
    }
    cJSON *qk = cJSON_GetObjectItemCaseSensitive(mm, "qk_norm");
    if (qk) {
        int want = cJSON_IsString(qk) && strcmp(qk->valuestring, "rms") == 0;
        if (want != c->qk_norm) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected qk_norm %d, the manifest says %s", case_id, c->qk_norm,
                                  cJSON_IsString(qk) ? qk->valuestring : "null");
        }
    }
    cJSON *sa = cJSON_GetObjectItemCaseSensitive(mm, "x_block_self_attn_layers");
    if (sa) {
        uint64_t want = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, sa) if (e->valueint >= 0 && e->valueint < 64) want |= (uint64_t)1 << e->valueint;
        if (want != c->self_attn) {
            ok = 0;
            if (report) CHECK_MSG(0, "%s: detected MMDiT-X blocks differ from the manifest's", case_id);
        }
    }
    return ok;
}

static const char *model_for(const char *dir, cJSON *manifest, cJSON *settings) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!file) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *f = NULL;
        sd_error err;
        if (sd_st_open(path, &f, &err)) continue;
        sd_sd3_config c;
        int ok = sd_sd3_detect(f, "", &c, &err) == SD_OK && config_matches(&c, settings, 0);
        sd_st_close(f);
        if (ok) return file;
    }
    return NULL;
}

/* Longest chain of matrix ops from the inputs to the output (the bf16
 * slack, golden.h): x_embedder, t_embedder's two linears and an adaLN on
 * the c path, four per joint block (qkv, proj, fc1, fc2; the MMDiT-X
 * attention runs beside the joint one), the final adaLN and linear;
 * attention's two matmuls per block on top. */
static int depth_of(const sd_sd3_config *c) { return 1 + 3 + 6 * c->depth + 2; }

static void run_group(sd_backend *be, sd_sd3 *m, const sd_model_sampling *ms, sd_st_file *g,
                      cJSON *tensors, const char *pre, int *used) {
    char nm[160];
    sd_error err;
    sd_error_clear(&err);
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", pre, s), nm)
#define USE(s) sd_golden_mark(tensors, used, NAME(s))
    sd_tensor *x = input(g, NAME("x")), *ctx = input(g, NAME("context")), *sig = input(g, NAME("sigma"));
    USE("x"), USE("context"), USE("sigma");
    sd_tensor *y = NULL, *tst = NULL;
    if (has_tensor(tensors, NAME("y"))) y = input(g, NAME("y")), USE("y");
    if (has_tensor(tensors, NAME("timestep"))) tst = input(g, NAME("timestep")), USE("timestep");
    if (!x || !ctx || !sig) goto out;
    int64_t n = x->shape[0];
    CHECK_MSG(sd_tensor_numel(sig) == n && (!tst || sd_tensor_numel(tst) == n),
              "%s: one sigma (and timestep) per batch item", case_id);
    if (sd_tensor_numel(sig) != n || (tst && sd_tensor_numel(tst) != n)) goto out;
    float *ts = malloc((size_t)n * sizeof *ts);
    for (int64_t i = 0; i < n; i++) {
        ts[i] = sd_ms_timestep(ms, sd_tensor_f32(sig)[i]);
        /* the model sampling's timestep(sigma) is what the MMDiT is fed */
        if (tst)
            CHECK_MSG(fabsf(ts[i] - sd_tensor_f32(tst)[i]) <= 1e-6f * fabsf(sd_tensor_f32(tst)[i]),
                      "%s: timestep(%g) = %.9g, the reference fed %.9g", case_id, sd_tensor_f32(sig)[i], ts[i],
                      sd_tensor_f32(tst)[i]);
    }

    sd_golden_taps taps;
    sd_golden_taps_collect(&taps, tensors, pre, NULL, case_id);
    sd_sd3_set_tap(m, sd_golden_tap, &taps);
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
    sd_bt *by = y ? sd_bt_from_host(be, y, SD_F32) : NULL, *bo = NULL;
    CHECK_OK(sd_sd3_forward(m, bx, ts, bc, by, NULL, 0, &bo, &err), &err);
    sd_sd3_set_tap(m, NULL, NULL);
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
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(sig), sd_tensor_unref(y), sd_tensor_unref(tst);
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
    const char *model = model_for(dir, manifest, settings);
    CHECK_MSG(model && file && tensors, "%s: no manifest model fits the case's settings", case_id);
    if (!model || !file || !tensors) return;
    cJSON *note;
    cJSON_ArrayForEach(note, cJSON_GetObjectItemCaseSensitive(c, "notes"))
        printf("  note: %s\n", cJSON_GetStringValue(note));

    snprintf(path, sizeof path, "%s/%s", dir, model);
    sd_st_file *mf = NULL, *g = NULL;
    sd_sd3 *m = NULL;
    CHECK_OK(sd_st_open(path, &mf, &err), &err);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!mf || !g) goto done;
    CHECK_OK(sd_sd3_load(be, mf, "", SD_F32, &m, &err), &err);
    if (!m) goto done;
    const sd_sd3_config *cfg = sd_sd3_get_config(m);
    config_matches(cfg, settings, 1);
    printf("  model %s: hidden %d, %d heads of %d, %d joint blocks (%d MMDiT-X), patch %d, pos grid %d\n",
           model, cfg->hidden_size, cfg->num_heads, cfg->head_dim, cfg->depth, cfg->n_self_attn,
           cfg->patch_size, cfg->pos_embed_max_size);
    sd_golden_set_depth(depth_of(cfg));
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_model_sampling_init_sd3(ms);

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

    /* a latent whose patch grid exceeds the position embedding */
    {
        int64_t big = (int64_t)(cfg->pos_embed_max_size + 1) * cfg->patch_size;
        sd_bt *bx = sd_bt_new4(be, SD_F32, 4, 1, cfg->in_channels, big, 2);
        sd_bt *bc = sd_bt_new4(be, SD_F32, 3, 1, 1, cfg->context_in_dim, 0), *bo = NULL;
        float ts1 = 500.0f;
        sd_error_clear(&err);
        sd_status rc = sd_sd3_forward(m, bx, &ts1, bc, NULL, NULL, 0, &bo, &err);
        char lim[32];
        snprintf(lim, sizeof lim, "%dx%d", cfg->pos_embed_max_size, cfg->pos_embed_max_size);
        CHECK_MSG(rc == SD_ERR_INVALID && !bo && strstr(err.msg, lim),
                  "oversized latent: rc %d (%s), want SD_ERR_INVALID naming %s", rc, err.msg, lim);
        sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(bo);
    }
done:
    sd_sd3_free(m);
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
    if (*buf) CHECK_OK(sd_st_open_memory(*buf, size, "edited-sd3.safetensors", &f, &err), &err);
    return f;
}

static void expect_error(sd_backend *be, sd_st_file *src, const char *drop, const char *flatten,
                         sd_status want, const char *mention) {
    void *buf = NULL;
    sd_st_file *f = edited(src, drop, flatten, &buf);
    if (f) {
        sd_error err;
        sd_error_clear(&err);
        sd_sd3 *m = NULL;
        sd_status rc = sd_sd3_load(be, f, "", SD_F32, &m, &err);
        CHECK_MSG(rc == want && !m && strstr(err.msg, mention) && strstr(err.msg, "edited-sd3"),
                  "edit (drop %s, flatten %s): rc %d (%s), want %d naming '%s' and the file",
                  drop ? drop : "-", flatten ? flatten : "-", rc, err.msg, want, mention);
        printf("  bad file: %s\n", err.msg);
        sd_sd3_free(m);
        sd_st_close(f);
    }
    free(buf);
}

static void run_bad_files(sd_backend *be, const char *dir, cJSON *manifest) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!file) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *src = NULL;
        sd_error err;
        sd_error_clear(&err);
        if (sd_st_open(path, &src, &err)) continue;
        sd_sd3_config c;
        if (sd_sd3_detect(src, "", &c, &err) != SD_OK) {
            sd_st_close(src);
            continue;
        }
        case_id = "bad files";
        const char *proj = "joint_blocks.0.context_block.attn.proj.weight";
        const char *fc2 = "joint_blocks.0.x_block.mlp.fc2.weight";
        expect_error(be, src, NULL, proj, SD_ERR_FORMAT, proj);
        expect_error(be, src, fc2, NULL, SD_ERR_NOT_FOUND, fc2);
        expect_error(be, src, "context_embedder.weight", NULL, SD_ERR_NOT_FOUND, "context_embedder.weight");
        expect_error(be, src, "x_embedder.proj.weight", NULL, SD_ERR_NOT_FOUND, "no MMDiT");
        sd_st_close(src);
        return; /* one model is enough */
    }
    CHECK_MSG(0, "manifest has no bare SD3 MMDiT model");
}

int main(void) {
    const char *dir = sd_golden_family_dir("sd3");
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
