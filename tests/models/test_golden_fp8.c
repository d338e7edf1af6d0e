/* test_golden_fp8.c - F8_E4M3 weights against the reference set's
 * "weights" cases (flux/manifest.json: fp8_e4m3fn_decode).
 *
 * "code"/"is_nan"/"value": every byte decoded by core/dtype.h (NaN codes
 * compared through is_nan, their value recorded as 0). Tensors named
 * "ckpt.<key>.codes|decoded|loaded": the key is looked up in the manifest's
 * model files; its stored dtype must be F8_E4M3, its raw bytes the codes,
 * sd_st_tensor_f32 the decoded values, and the weight as the model loader
 * keeps it (models/checkpoint/weights.h on the golden backend: fp8 as
 * stored, widened by the backend) downloaded to F32 the "loaded" values
 * (what ComfyUI holds after CheckpointLoaderSimple). Every tensor of the
 * case must be checked. */
#include "testutil.h"
#include "golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

static const char *case_id;

/* The manifest model file holding `key` (opened; caller closes), or NULL. */
static sd_st_file *model_with(const char *dir, cJSON *manifest, const char *key) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
        if (!file) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_error err;
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, &err) != SD_OK) continue;
        if (sd_st_find(f, key)) return f;
        sd_st_close(f);
    }
    return NULL;
}

/* Checks the three tensors of one checkpoint key. */
static void check_ckpt_key(sd_backend *be, const char *dir, cJSON *manifest, cJSON *tensors,
                           sd_st_file *g, const char *key, int *used) {
    char name[600];
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = model_with(dir, manifest, key);
    CHECK_MSG(f != NULL, "%s: no manifest model holds '%s'", case_id, key);
    if (!f) return;
    const sd_st_entry *e = sd_st_find(f, key);
    CHECK_MSG(e->dtype == SD_F8_E4M3, "%s: '%s' is %s in %s, not F8_E4M3", case_id, key,
              sd_dtype_name(e->dtype), sd_st_path(f));

    snprintf(name, sizeof name, "ckpt.%s.codes", key);
    if (sd_golden_mark(tensors, used, name)) {
        sd_tensor *codes = sd_st_tensor(g, name, &err), *raw = sd_st_tensor(f, key, &err);
        int ok = codes && raw && codes->dtype == SD_I64 && sd_tensor_numel(codes) == (int64_t)e->nbytes &&
                 raw->nbytes == e->nbytes;
        int64_t bad = 0;
        for (int64_t i = 0; ok && i < sd_tensor_numel(codes); i++)
            if (((const int64_t *)codes->data)[i] != ((const uint8_t *)raw->data)[i]) bad++;
        CHECK_MSG(ok && bad == 0, "%s %s: %lld of the file's bytes differ from the recorded codes", case_id,
                  name, (long long)bad);
        printf("  %-18s %-60s %s\n", case_id, name, ok && bad == 0 ? "ok" : "FAIL");
        sd_tensor_unref(codes);
        sd_tensor_unref(raw);
    }
    snprintf(name, sizeof name, "ckpt.%s.decoded", key);
    if (sd_golden_mark(tensors, used, name)) {
        sd_tensor *dec = sd_st_tensor_f32(f, key, &err);
        sd_golden_compare(case_id, tensors, g, name, dec);
        sd_tensor_unref(dec);
    }
    snprintf(name, sizeof name, "ckpt.%s.loaded", key);
    if (sd_golden_mark(tensors, used, name)) {
        sd_weights w;
        sd_weights_init(&w, be, f, "");
        sd_bt *b = sd_weights_get(&w, key, 0, NULL, &err);
        CHECK_MSG(b != NULL, "%s: loading '%s': %s", case_id, key, err.msg);
        /* the backend keeps fp8 as stored and widens per op: an op (a copy
         * through a scale by 1) must see exactly the decoded values */
        CHECK_MSG(!b || b->dtype == SD_F8_E4M3 || !sd_backend_accepts_dtype(be, SD_F8_E4M3),
                  "%s: '%s' not kept as F8_E4M3 on a backend that takes it", case_id, key);
        sd_bt *one = b ? sd_op_scale(b, 1.0f) : NULL;
        sd_tensor *h = one ? sd_bt_to_host(one) : NULL;
        sd_golden_compare(case_id, tensors, g, name, h);
        sd_tensor_unref(h);
        sd_bt_free(one);
        sd_bt_free(b);
    }
    sd_st_close(f);
}

static void run_case(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c) {
    char path[1200];
    sd_error err;
    sd_error_clear(&err);
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!g || !tensors) return;
    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);

    /* the byte table */
    if (sd_golden_mark(tensors, used, "code")) {
        sd_tensor *code = sd_st_tensor(g, "code", &err);
        CHECK_MSG(code && code->dtype == SD_I64, "%s: 'code' must be I64", case_id);
        int64_t n = code ? sd_tensor_numel(code) : 0;
        sd_tensor *value = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0), *is_nan = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0);
        for (int64_t i = 0; i < n; i++) {
            int64_t b = ((const int64_t *)code->data)[i];
            CHECK_MSG(b >= 0 && b < 256, "%s: code %lld is no byte", case_id, (long long)b);
            float v = sd_f8_e4m3_to_f32((uint8_t)b);
            sd_tensor_f32(is_nan)[i] = isnan(v) ? 1.0f : 0.0f;
            sd_tensor_f32(value)[i] = isnan(v) ? 0.0f : v;
        }
        if (sd_golden_mark(tensors, used, "value")) sd_golden_compare(case_id, tensors, g, "value", value);
        if (sd_golden_mark(tensors, used, "is_nan")) sd_golden_compare(case_id, tensors, g, "is_nan", is_nan);
        sd_tensor_unref(value);
        sd_tensor_unref(is_nan);
        sd_tensor_unref(code);
    }
    /* checkpoint keys: ckpt.<key>.codes */
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *s = t->string;
        size_t len = strlen(s);
        if (strncmp(s, "ckpt.", 5) != 0 || len < 11 || strcmp(s + len - 6, ".codes") != 0) continue;
        char key[512];
        snprintf(key, sizeof key, "%.*s", (int)(len - 11), s + 5);
        check_ckpt_key(be, dir, manifest, tensors, g, key, used);
    }
    int i = 0;
    cJSON_ArrayForEach(t, tensors) {
        CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
    free(used);
    sd_st_close(g);
}

int main(void) {
    const char *dir = sd_golden_family_dir("flux");
    cJSON *manifest = sd_golden_manifest(dir);
    int n_cases = sd_golden_require_cases(manifest, dir, "weights");
    CHECK_MSG(n_cases > 0, "manifest lists no weights case");
    sd_backend *be = sd_golden_backend();
    if (be) {
        sd_golden_run_cases(be, dir, manifest, "weights", run_case, NULL, NULL, &case_id);
        sd_backend_free(be);
    }
    cJSON_Delete(manifest);
    return sd_test_finish();
}
