/* test_golden_fp8_scaled.c - ComfyUI's scaled fp8 files (models/checkpoint/
 * fp8_scaled.h) against what ComfyUI computes from them: the "t5" cases of
 * tests/data/fp8_scaled (gen/make_fp8_scaled.py; its DiT case runs in
 * models.golden_flux_dit_fp8_scaled, the Flux DiT golden on this set).
 *
 *   t5: the manifest's T5 model (a comfy_quant file; its "plus" file gives
 *       the tensors named by "plus_keys", put together in memory as the
 *       generator did; without the shared Flux set the test runs the rest
 *       and then skips) on raw.ids: raw.embeddings, raw.block.N and
 *       raw.last_hidden. Every weight the manifest lists as scaled must be
 *       held fp8 with its scale (no widened copy).
 *   dit, again as a single-file checkpoint: the manifest's DiT model under
 *       "model.diffusion_model." (its scaled_fp8 marker with it, as
 *       CheckpointLoaderSimple's convert_old_quants(sd, diffusion prefix)
 *       reads it) on every input group of the dit case: out. */
#include "testutil.h"
#include "golden.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/flux/flux.h"
#include "models/text/t5.h"

static const char *case_id;
static const char *g_absent; /* a "plus" file of the shared data that is not there */
static char g_absent_path[1400];
static cJSON *g_tensors;
static sd_st_file *g_file;
static int *g_used;

static void cmp(const char *name, sd_tensor *t) {
    sd_golden_compare(case_id, g_tensors, g_file, name, t);
    CHECK_MSG(sd_golden_mark(g_tensors, g_used, name), "%s: %s is not in the manifest", case_id, name);
}

static cJSON *model_entry(cJSON *manifest, const char *key_with) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models"))
        if (cJSON_GetObjectItemCaseSensitive(m, key_with)) return m;
    return NULL;
}

/* The model file of entry m, with the tensors of its "plus" file named in
 * "plus_keys" added, as an in-memory file (*buf owns its bytes). */
static sd_st_file *open_model(const char *dir, cJSON *m, void **buf) {
    char path[1400], plus[1400];
    sd_error err;
    sd_error_clear(&err);
    *buf = NULL;
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
    const char *pf = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "plus"));
    CHECK_MSG(file != NULL, "%s: model without a file", case_id);
    if (!file) return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sd_st_file *a = NULL, *b = NULL, *f = NULL;
    CHECK_OK(sd_st_open(path, &a, &err), &err);
    if (!a) return NULL;
    if (!pf) return a;
    if (!sd_golden_resolve_path(dir, pf, plus, sizeof plus)) {
        /* the Flux set of the shared data, absent: a skip at the end */
        snprintf(g_absent_path, sizeof g_absent_path, "%s", plus);
        g_absent = g_absent_path;
        sd_st_close(a);
        return NULL;
    }
    CHECK_OK(sd_st_open(plus, &b, &err), &err);
    if (!b) {
        sd_st_close(a);
        return NULL;
    }
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; i < sd_st_count(a); i++) {
        sd_tensor *t = sd_st_tensor(a, sd_st_at(a, i)->name, &err);
        CHECK_OK(sd_st_writer_add(w, sd_st_at(a, i)->name, t, &err), &err);
        sd_tensor_unref(t);
    }
    cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(m, "plus_keys")) {
        sd_tensor *t = sd_st_tensor(b, cJSON_GetStringValue(k), &err);
        CHECK_MSG(t != NULL, "%s: plus file lacks %s", case_id, cJSON_GetStringValue(k));
        if (t) CHECK_OK(sd_st_writer_add(w, cJSON_GetStringValue(k), t, &err), &err);
        sd_tensor_unref(t);
    }
    size_t size = 0;
    CHECK_OK(sd_st_writer_to_memory(w, buf, &size, &err), &err);
    sd_st_writer_free(w);
    if (*buf) CHECK_OK(sd_st_open_memory(*buf, size, file, &f, &err), &err);
    sd_st_close(a);
    sd_st_close(b);
    return f;
}

/* ---- t5 ------------------------------------------------------------------------ */

static void t5_tap(void *user, const char *name, const sd_bt *t) {
    (void)user;
    char ref[64];
    if (strcmp(name, "embeddings") == 0) snprintf(ref, sizeof ref, "raw.embeddings");
    else if (strncmp(name, "block.", 6) == 0) snprintf(ref, sizeof ref, "raw.%s", name);
    else return;
    if (!cJSON_GetObjectItemCaseSensitive(g_tensors, ref)) return;
    sd_golden_set_depth(strncmp(name, "block.", 6) == 0 ? 6 * (atoi(name + 6) + 1) : 0);
    sd_tensor *h = sd_bt_to_host(t);
    cmp(ref, h);
    sd_tensor_unref(h);
}

static void run_t5(sd_backend *be, const char *dir, cJSON *manifest) {
    cJSON *m = model_entry(manifest, "plus");
    CHECK_MSG(m != NULL, "%s: no T5 model in the manifest", case_id);
    if (!m) return;
    void *buf = NULL;
    sd_st_file *f = open_model(dir, m, &buf);
    sd_t5 *t5 = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (f) CHECK_OK(sd_t5_load(be, f, "", &t5, &err), &err);
    if (t5) {
        /* scaled weights stay fp8 with their scale (a widened F32 copy would
         * double... quadruple the memory) */
        cJSON *k;
        int n = 0;
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(m, "scaled")) {
            sd_bt **slot = sd_t5_param(t5, cJSON_GetStringValue(k));
            CHECK_MSG(slot && *slot && (*slot)->dtype == SD_F8_E4M3 && (*slot)->scale != 0.0f,
                      "%s: %s is not held as scaled fp8", case_id, cJSON_GetStringValue(k));
            n++;
        }
        CHECK_MSG(n > 0, "%s: the manifest lists no scaled layer", case_id);
        sd_tensor *ids = sd_st_tensor(g_file, "raw.ids", &err);
        CHECK_MSG(ids && ids->dtype == SD_I64 && ids->ndim == 2 && sd_golden_mark(g_tensors, g_used, "raw.ids"),
                  "%s: raw.ids is not an I64 [n, L] input", case_id);
        if (ids && ids->dtype == SD_I64 && ids->ndim == 2) {
            int nseq = (int)ids->shape[0], len = (int)ids->shape[1];
            int32_t *v = malloc((size_t)nseq * len * sizeof *v);
            for (int64_t i = 0; i < (int64_t)nseq * len; i++) v[i] = (int32_t)((const int64_t *)ids->data)[i];
            sd_t5_set_tap(t5, t5_tap, NULL);
            sd_t5_tokens in = {nseq, len, v, NULL};
            sd_bt *out = NULL;
            CHECK_OK(sd_t5_forward(t5, &in, 0, &out, &err), &err);
            sd_t5_set_tap(t5, NULL, NULL);
            sd_golden_set_depth(6 * sd_t5_get_config(t5)->layers);
            sd_tensor *h = out ? sd_bt_to_host(out) : NULL;
            cmp("raw.last_hidden", h);
            sd_tensor_unref(h);
            sd_bt_free(out);
            free(v);
        }
        sd_tensor_unref(ids);
    }
    sd_t5_free(t5);
    sd_st_close(f);
    free(buf);
}

/* ---- the DiT as a single-file checkpoint --------------------------------------------- */

static void run_dit_ckpt(sd_backend *be, const char *dir, cJSON *manifest) {
    cJSON *m = model_entry(manifest, "config");
    while (m && !cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"), "hidden_size"))
        m = m->next;
    CHECK_MSG(m != NULL, "%s: no DiT model in the manifest", case_id);
    if (!m) return;
    void *raw = NULL, *buf = NULL;
    sd_st_file *src = open_model(dir, m, &raw), *f = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (!src) return;
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; i < sd_st_count(src); i++) {
        char key[600];
        snprintf(key, sizeof key, "model.diffusion_model.%s", sd_st_at(src, i)->name);
        sd_tensor *t = sd_st_tensor(src, sd_st_at(src, i)->name, &err);
        CHECK_OK(sd_st_writer_add(w, key, t, &err), &err);
        sd_tensor_unref(t);
    }
    size_t size = 0;
    CHECK_OK(sd_st_writer_to_memory(w, &buf, &size, &err), &err);
    sd_st_writer_free(w);
    if (buf) CHECK_OK(sd_st_open_memory(buf, size, "ckpt-fp8-scaled.safetensors", &f, &err), &err);
    sd_flux *dit = NULL;
    if (f) CHECK_OK(sd_flux_load(be, f, "model.diffusion_model.", SD_F32, &dit, &err), &err);
    if (dit) {
        const sd_flux_config *cfg = sd_flux_get_config(dit);
        sd_golden_set_depth(1 + 3 + 6 * cfg->depth + 4 * cfg->depth_single_blocks + 2);
        cJSON *t;
        cJSON_ArrayForEach(t, g_tensors) {
            size_t len = strlen(t->string);
            if (len < 3 || strcmp(t->string + len - 2, ".x") != 0) continue;
            char nm[96], pre[64];
            snprintf(pre, sizeof pre, "%.*s", (int)(len - 1), t->string);
#define IN(s) (snprintf(nm, sizeof nm, "%s%s", pre, s), sd_st_tensor_f32(g_file, nm, &err))
            sd_tensor *x = IN("x"), *ctx = IN("context"), *sig = IN("sigma"), *y = IN("y"), *gd = IN("guidance");
#undef IN
            CHECK_MSG(x && ctx && sig && y && gd, "%s: group %s lacks an input", case_id, pre);
            if (x && ctx && sig && y && gd) {
                sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
                sd_bt *by = sd_bt_from_host(be, y, SD_F32), *bo = NULL;
                /* Flux's timestep(sigma) = sigma (models/sampling) */
                CHECK_OK(sd_flux_forward(dit, bx, sd_tensor_f32(sig), bc, by, sd_tensor_f32(gd), &bo, &err), &err);
                sd_tensor *o = bo ? sd_bt_to_host(bo) : NULL;
                snprintf(nm, sizeof nm, "%sout", pre);
                sd_golden_compare("checkpoint layout", g_tensors, g_file, nm, o);
                sd_tensor_unref(o);
                sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(by), sd_bt_free(bo);
            }
            sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(sig), sd_tensor_unref(y), sd_tensor_unref(gd);
        }
    }
    sd_flux_free(dit);
    sd_st_close(f);
    sd_st_close(src);
    free(buf);
    free(raw);
}

int main(void) {
    char path[1400];
    const char *dir = sd_golden_topic_dir("fp8_scaled");
    cJSON *manifest = sd_golden_manifest(dir);
    int n_t5 = sd_golden_require_cases(manifest, dir, "t5");
    int n_dit = sd_golden_require_cases(manifest, dir, "dit");
    CHECK_MSG(n_t5 > 0 && n_dit > 0, "manifest lists no t5 or dit case");
    sd_backend *be = sd_golden_backend();
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (!be) break;
        int t5 = sd_golden_case_is(c, "t5");
        if (!t5 && !sd_golden_case_is(c, "dit")) continue;
        case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        printf("case %s%s\n", case_id, t5 ? "" : " (as a checkpoint)");
        g_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
        g_used = calloc((size_t)cJSON_GetArraySize(g_tensors) + 1, sizeof *g_used);
        snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
        sd_error err;
        g_file = NULL;
        CHECK_OK(sd_st_open(path, &g_file, &err), &err);
        sd_golden_set_depth(0);
        if (g_file && t5) {
            run_t5(be, dir, manifest);
            int i = 0;
            cJSON *t;
            cJSON_ArrayForEach(t, g_tensors) {
                CHECK_MSG(g_used[i] || g_absent, "%s: tensor %s is not checked by this test", case_id, t->string);
                i++;
            }
        } else if (g_file) {
            run_dit_ckpt(be, dir, manifest);
        }
        sd_st_close(g_file);
        free(g_used);
    }
    sd_backend_free(be);
    cJSON_Delete(manifest);
    if (g_absent) sd_test_skip("no reference data (%s: the Flux set's file a model takes tensors from)", g_absent);
    return sd_test_finish();
}
