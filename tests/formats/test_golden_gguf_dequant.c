/* GGUF dequantization against ComfyUI-GGUF's dequant.py: for every case of
 * tests/data/gguf/manifest.json ("dequant"), every tensor of its GGUF file
 * is read through sd_gguf_open and widened by sd_quant_dequant in each
 * rounding mode the golden file has ("<tensor>.<f16|f32|bf16>"), and must
 * equal ComfyUI-GGUF's result bit for bit (NaN equals NaN), with the shape
 * ComfyUI-GGUF gives it (comfy.gguf.orig_shape included). Cases, tensors and
 * modes all come from the manifest and the files. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "formats/gguf.h"
#include "testutil.h"

static const char *data_dir(char *buf, size_t n) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(buf, n, "%s/tests/data/gguf", src ? src : "..");
    return buf;
}

static int mode_of(const char *s, sd_dequant_math *m) {
    if (strcmp(s, "f16") == 0) *m = SD_DQ_F16;
    else if (strcmp(s, "f32") == 0) *m = SD_DQ_F32;
    else if (strcmp(s, "bf16") == 0) *m = SD_DQ_BF16;
    else return 0;
    return 1;
}

static int same_bits(float a, float b) {
    if (isnan(a) && isnan(b)) return 1;
    return memcmp(&a, &b, sizeof a) == 0;
}

static void run_case(const char *dir, const cJSON *c) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(c, "id"));
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(c, "file"));
    const char *gold = cJSON_GetStringValue(cJSON_GetObjectItem(c, "golden"));
    CHECK(id && file && gold);
    if (!id || !file || !gold) return;
    char p1[4096], p2[4096];
    snprintf(p1, sizeof p1, "%s/%s", dir, file);
    snprintf(p2, sizeof p2, "%s/%s", dir, gold);
    sd_error err = {0};
    sd_st_file *g = NULL, *want = NULL;
    CHECK_OK(sd_gguf_open(p1, &g, &err), &err);
    CHECK_OK(sd_st_open(p2, &want, &err), &err);
    if (!g || !want) {
        sd_st_close(g);
        sd_st_close(want);
        return;
    }
    size_t compared = 0;
    for (size_t i = 0; i < sd_st_count(want); i++) {
        const sd_st_entry *we = sd_st_at(want, i);
        char tname[256];
        snprintf(tname, sizeof tname, "%s", we->name);
        char *dot = strrchr(tname, '.');
        sd_dequant_math m;
        CHECK_MSG(dot && mode_of(dot + 1, &m), "%s: golden key '%s' has no known mode", id, we->name);
        if (!dot || !mode_of(dot + 1, &m)) continue;
        *dot = 0;
        const sd_st_entry *e = sd_st_find(g, tname);
        CHECK_MSG(e != NULL, "%s: tensor '%s' missing from %s", id, tname, file);
        if (!e) continue;
        int same_shape = e->ndim == we->ndim;
        for (int d = 0; same_shape && d < e->ndim; d++) same_shape = e->shape[d] == we->shape[d];
        CHECK_MSG(same_shape, "%s: tensor '%s' has another shape than ComfyUI-GGUF gives it", id, tname);
        sd_tensor *q = sd_st_tensor(g, tname, &err);
        sd_tensor *ref = sd_st_tensor(want, we->name, &err);
        CHECK(q && ref && ref->dtype == SD_F32);
        if (q && ref && ref->dtype == SD_F32 && same_shape) {
            int64_t n = sd_tensor_numel(q);
            float *y = malloc((size_t)n * sizeof *y);
            sd_quant_dequant(q->dtype, m, q->data, y, n);
            const float *r = ref->data;
            int64_t bad = 0, first = -1;
            for (int64_t k = 0; k < n; k++)
                if (!same_bits(y[k], r[k])) {
                    if (first < 0) first = k;
                    bad++;
                }
            CHECK_MSG(bad == 0, "%s: %s: %lld of %lld values differ (first at %lld: %.9g, ComfyUI-GGUF %.9g)", id,
                      we->name, (long long)bad, (long long)n, (long long)first, first >= 0 ? y[first] : 0.0,
                      first >= 0 ? r[first] : 0.0);
            free(y);
            compared++;
        }
        sd_tensor_unref(q);
        sd_tensor_unref(ref);
    }
    CHECK_MSG(compared > 0, "%s: nothing compared", id);
    sd_st_close(g);
    sd_st_close(want);
}

int main(void) {
    char dir[4096], mpath[4200];
    data_dir(dir, sizeof dir);
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *txt = sd_test_read_file(mpath, NULL);
    if (!txt) sd_test_skip("no %s", mpath);
    cJSON *m = cJSON_Parse(txt);
    free(txt);
    CHECK(m != NULL);
    const cJSON *cases = cJSON_GetObjectItem(m, "dequant"), *c;
    CHECK(cJSON_GetArraySize(cases) > 0);
    cJSON_ArrayForEach(c, cases) run_case(dir, c);
    cJSON_Delete(m);
    return sd_test_finish();
}
