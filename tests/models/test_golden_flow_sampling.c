/* test_golden_flow_sampling.c - the flow-matching model samplings
 * (ModelSamplingFlux, ModelSamplingDiscreteFlow; CONST) and every scheduler
 * on their tables against ComfyUI (tests/data/flow_sampling: the generator
 * script, its manifest and the safetensors it wrote), bit for bit (karras's
 * vectorised torch.pow excepted, one ulp: see run_config): the sigma
 * tables and their ends, timestep(sigma), sigma(t), percent_to_sigma (in
 * double), calculate_sigmas for every scheduler and step count of the
 * manifest, KSampler's sigma rules (discard-penultimate samplers, the
 * denoise slice), and the CONST calculate_input / calculate_denoised /
 * noise_scaling / inverse_noise_scaling. Configurations (kind, shift,
 * multiplier) come from the manifest. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/schedules.h"
#include "golden.h"
#include "testutil.h"

static sd_st_file *g;

static sd_tensor *get(const char *cid, const char *what) {
    char key[256];
    snprintf(key, sizeof key, cid ? "%s/%s" : "%s%s", cid ? cid : "", what);
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g, key, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", key);
    return t;
}

/* Distance in float32 ulps (same sign assumed; NaN against NaN is 0). */
static int64_t ulps(float a, float b) {
    if (isnan(a) && isnan(b)) return 0;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* n floats against the reference (its length too): bit for bit (any NaN
 * matches a NaN: 0/0's sign is the FPU's), except that the first
 * `ulp_prefix` values may be one ulp apart. */
static int same_ulp(const char *what, const float *a, int64_t n, const sd_tensor *e, int64_t ulp_prefix) {
    int ok = e && sd_tensor_numel(e) == n;
    int64_t at = -1;
    for (int64_t i = 0; ok && i < n; i++)
        if (ulps(a[i], ((const float *)e->data)[i]) > (i < ulp_prefix ? 1 : 0)) ok = 0, at = i;
    CHECK_MSG(ok, "%s: %s (n %lld vs %lld, first difference at %lld: %.9g vs %.9g)", what, e ? "differs" : "missing",
              (long long)n, e ? (long long)sd_tensor_numel(e) : -1LL, (long long)at, at >= 0 ? a[at] : 0.0,
              at >= 0 ? ((const float *)e->data)[at] : 0.0);
    return ok;
}

static int same(const char *what, const float *a, int64_t n, const sd_tensor *e) {
    return same_ulp(what, a, n, e, 0);
}

static int g_values;

static void run_config(const char *cid, const cJSON *st, const cJSON *m, sd_model_sampling *ms) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "model_sampling"));
    double shift = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "shift"));
    double mult = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "multiplier"));
    if (kind && strcmp(kind, "flux") == 0) sd_model_sampling_init_flux(ms, shift);
    else if (kind && strcmp(kind, "flow") == 0) sd_model_sampling_init_flow(ms, shift, mult);
    else {
        CHECK_MSG(0, "%s: unknown model_sampling", cid);
        return;
    }
    char what[256];
    sd_tensor *t = get(cid, "sigmas");
    snprintf(what, sizeof what, "%s sigmas", cid);
    same(what, ms->sigmas, ms->n, t);
    sd_tensor_unref(t);
    float mm[2] = {ms->sigma_min, ms->sigma_max};
    t = get(cid, "sigma_min_max");
    snprintf(what, sizeof what, "%s sigma_min/max", cid);
    same(what, mm, 2, t);
    sd_tensor_unref(t);

    sd_tensor *probe = get(cid, "probe_sigmas"), *pt = get(cid, "probe_t");
    if (probe && pt) {
        int64_t n = sd_tensor_numel(probe);
        float *o = malloc((size_t)n * sizeof *o);
        for (int64_t i = 0; i < n; i++) o[i] = sd_ms_timestep(ms, ((float *)probe->data)[i]);
        t = get(cid, "timestep");
        snprintf(what, sizeof what, "%s timestep", cid);
        same(what, o, n, t);
        sd_tensor_unref(t);
        for (int64_t i = 0; i < n; i++) o[i] = sd_ms_sigma(ms, ((float *)pt->data)[i]);
        t = get(cid, "sigma_of_t");
        snprintf(what, sizeof what, "%s sigma(t)", cid);
        same(what, o, n, t);
        sd_tensor_unref(t);
        free(o);
        g_values += 2 * (int)n;
    }
    sd_tensor_unref(probe);
    sd_tensor_unref(pt);

    /* percent_to_sigma: F64 reference, compared as doubles */
    sd_error err;
    char key[256];
    snprintf(key, sizeof key, "%s/percent_to_sigma", cid);
    sd_tensor *p64 = sd_st_tensor(g, key, &err);
    const cJSON *percents = cJSON_GetObjectItemCaseSensitive(m, "percents");
    CHECK_MSG(p64 && p64->dtype == SD_F64 && sd_tensor_numel(p64) == cJSON_GetArraySize(percents), "%s", key);
    for (int i = 0; p64 && p64->dtype == SD_F64 && i < cJSON_GetArraySize(percents); i++) {
        double p = cJSON_GetArrayItem(percents, i)->valuedouble;
        double got = sd_ms_percent_to_sigma(ms, p), want = ((double *)p64->data)[i];
        CHECK_MSG(got == want, "%s percent_to_sigma(%g) = %.17g, ComfyUI %.17g", cid, p, got, want);
        g_values++;
    }
    sd_tensor_unref(p64);

    const cJSON *sc, *stp;
    cJSON_ArrayForEach(sc, cJSON_GetObjectItemCaseSensitive(m, "schedulers")) {
        cJSON_ArrayForEach(stp, cJSON_GetObjectItemCaseSensitive(m, "steps")) {
            int steps = stp->valueint;
            float *out = malloc((size_t)sd_schedule_capacity(steps) * sizeof *out);
            int n = 0;
            CHECK_OK(sd_schedule_sigmas(ms, sc->valuestring, steps, out, &n, &err), &err);
            snprintf(what, sizeof what, "%s/%d", sc->valuestring, steps);
            t = get(cid, what);
            snprintf(what, sizeof what, "%s %s %d steps", cid, sc->valuestring, steps);
            /* kl_optimal at 1 step divides by 0 in ComfyUI too (NaN). karras
             * raises to the 7th power with torch.pow, which an AVX2 build
             * computes with Sleef's 1-ulp powf over each whole group of 16
             * values (libm's correctly rounded pow for the rest, as here):
             * those may be an ulp apart (models/sampling/schedules.c) */
            int64_t vec = strcmp(sc->valuestring, "karras") == 0 ? (int64_t)steps / 16 * 16 : 0;
            same_ulp(what, out, n, t, vec);
            g_values += n;
            sd_tensor_unref(t);
            free(out);
        }
    }
    const cJSON *kc;
    cJSON_ArrayForEach(kc, cJSON_GetObjectItemCaseSensitive(m, "ksampler")) {
        const char *sampler = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(kc, "sampler"));
        int steps = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(kc, "steps"));
        double denoise = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(kc, "denoise"));
        float *out = NULL;
        int n = 0;
        CHECK_OK(sd_ksampler_sigmas(ms, "simple", sampler, steps, denoise, &out, &n, &err), &err);
        snprintf(what, sizeof what, "ksampler/%s/%d/%g", sampler, steps, denoise);
        t = get(cid, what);
        snprintf(what, sizeof what, "%s KSampler %s %d steps denoise %g", cid, sampler, steps, denoise);
        same(what, out, n, t);
        g_values += n;
        sd_tensor_unref(t);
        free(out);
    }

    /* CONST arithmetic at sigma [0.8, 0.3], one per batch item */
    sd_tensor *x = get(NULL, "x"), *mo = get(NULL, "model_out"), *nz = get(NULL, "noise");
    if (x && mo && nz) {
        int64_t n = sd_tensor_numel(x), per = n / x->shape[0];
        const float sig[2] = {0.8f, 0.3f};
        float *o = malloc((size_t)n * sizeof *o);
        for (int b = 0; b < 2; b++)
            sd_ms_calculate_input(ms, sig[b], (float *)x->data + b * per, o + b * per, (size_t)per);
        t = get(cid, "input");
        snprintf(what, sizeof what, "%s calculate_input", cid);
        same(what, o, n, t);
        sd_tensor_unref(t);
        for (int b = 0; b < 2; b++)
            sd_ms_calculate_denoised(ms, sig[b], (float *)mo->data + b * per, (float *)x->data + b * per, o + b * per,
                                     (size_t)per);
        t = get(cid, "denoised");
        snprintf(what, sizeof what, "%s calculate_denoised", cid);
        same(what, o, n, t);
        sd_tensor_unref(t);
        sd_ms_noise_scaling(ms, sig[0], nz->data, x->data, 0, o, (size_t)n);
        t = get(cid, "noise_scaling");
        snprintf(what, sizeof what, "%s noise_scaling", cid);
        same(what, o, n, t);
        sd_tensor_unref(t);
        sd_ms_inverse_noise_scaling(ms, sig[1], x->data, o, (size_t)n);
        t = get(cid, "inverse_noise_scaling");
        snprintf(what, sizeof what, "%s inverse_noise_scaling", cid);
        same(what, o, n, t);
        sd_tensor_unref(t);
        g_values += 4 * (int)n;
        free(o);
    }
    sd_tensor_unref(x), sd_tensor_unref(mo), sd_tensor_unref(nz);
}

int main(void) {
    char path[1400];
    const char *dir = sd_golden_topic_dir("flow_sampling");
    cJSON *m = sd_golden_manifest(dir);
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file")));
    sd_error err;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    sd_model_sampling *ms = malloc(sizeof *ms);
    int configs = 0;
    const cJSON *st;
    cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(m, "settings")) {
        if (!g) break;
        run_config(st->string, st, m, ms);
        configs++;
    }
    printf("%d configurations, %d values compared bit for bit\n", configs, g_values);
    CHECK(configs > 0);
    free(ms);
    sd_st_close(g);
    cJSON_Delete(m);
    return sd_test_finish();
}
