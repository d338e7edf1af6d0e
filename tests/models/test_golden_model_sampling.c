/* test_golden_model_sampling.c - ModelSamplingDiscrete (eps, v_prediction,
 * lcm, x0, img_to_img, each with and without zsnr) and RescaleCFG against
 * numbers ComfyUI's own code computed (tests/data/sampling: the generator
 * script, its manifest and the tiny safetensors it wrote).
 *
 * The schedules (sigmas, log_sigmas, timesteps, sigma(t)) must match bit for
 * bit: they are float64 math rounded once, and timesteps index them. The
 * elementwise formulas are float32 with torch's op order, also exact; the
 * RescaleCFG standard deviations are accumulated differently from torch's
 * Welford loop, so that one gets a float tolerance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "testutil.h"

static sd_st_file *ref;

static sd_tensor *get(const char *name) {
    sd_error err = {0};
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", name);
    return t;
}

/* bitwise equality of n floats (NaN never expected) */
static int same(const float *a, const float *b, int64_t n, int64_t *at) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            *at = i;
            return 0;
        }
    return 1;
}

static void check_kind(sd_prediction kind, int zsnr) {
    char tag[64], key[128];
    snprintf(tag, sizeof tag, "%s%s", sd_prediction_name(kind), zsnr ? "_zsnr" : "");
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_model_sampling_init_ex(ms, kind, zsnr);
    int64_t at = 0;

    snprintf(key, sizeof key, "%s.sigmas", tag);
    sd_tensor *sig = get(key);
    snprintf(key, sizeof key, "%s.log_sigmas", tag);
    sd_tensor *lsig = get(key);
    if (sig && lsig) {
        CHECK_MSG(sd_tensor_numel(sig) == ms->n, "%s: %lld sigmas, we have %d", tag,
                  (long long)sd_tensor_numel(sig), ms->n);
        if (sd_tensor_numel(sig) == ms->n) {
            CHECK_MSG(same(ms->sigmas, sd_tensor_f32(sig), ms->n, &at), "%s sigmas[%lld] %.9g vs %.9g",
                      tag, (long long)at, ms->sigmas[at], sd_tensor_f32(sig)[at]);
            CHECK_MSG(same(ms->log_sigmas, sd_tensor_f32(lsig), ms->n, &at),
                      "%s log_sigmas[%lld] %.9g vs %.9g", tag, (long long)at, ms->log_sigmas[at],
                      sd_tensor_f32(lsig)[at]);
        }
    }
    snprintf(key, sizeof key, "%s.probe_sigmas", tag);
    sd_tensor *probe = get(key);
    snprintf(key, sizeof key, "%s.timestep", tag);
    sd_tensor *ts = get(key);
    snprintf(key, sizeof key, "%s.sigma_of_t", tag);
    sd_tensor *sot = get(key);
    snprintf(key, sizeof key, "%s.percent_to_sigma", tag);
    sd_tensor *p2s = get(key);
    snprintf(key, sizeof key, "%s.denoised", tag);
    sd_tensor *den = get(key);
    snprintf(key, sizeof key, "%s.input", tag);
    sd_tensor *inp = get(key);
    sd_tensor *x = get("x"), *mo = get("model_out");
    if (probe && ts && sot && p2s && den && inp && x && mo) {
        int64_t np = sd_tensor_numel(probe), n = sd_tensor_numel(x);
        for (int64_t i = 0; i < np; i++) {
            float s = sd_tensor_f32(probe)[i];
            CHECK_MSG(sd_ms_timestep(ms, s) == sd_tensor_f32(ts)[i], "%s timestep(%g) %g vs %g", tag,
                      s, sd_ms_timestep(ms, s), sd_tensor_f32(ts)[i]);
            float *o = malloc((size_t)n * sizeof *o);
            sd_ms_calculate_denoised(ms, s, sd_tensor_f32(mo), sd_tensor_f32(x), o, (size_t)n);
            CHECK_MSG(same(o, sd_tensor_f32(den) + i * n, n, &at), "%s denoised at sigma %g [%lld] %.9g vs %.9g",
                      tag, s, (long long)at, o[at], sd_tensor_f32(den)[i * n + at]);
            sd_ms_calculate_input(ms, s, sd_tensor_f32(x), o, (size_t)n);
            CHECK_MSG(same(o, sd_tensor_f32(inp) + i * n, n, &at), "%s input at sigma %g [%lld]", tag,
                      s, (long long)at);
            free(o);
        }
        static const float tp[] = {0.0f, 19.0f, 500.5f, 999.0f, 1234.0f};
        for (int i = 0; i < 5; i++)
            CHECK_MSG(sd_ms_sigma(ms, tp[i]) == sd_tensor_f32(sot)[i], "%s sigma(%g) %.9g vs %.9g", tag,
                      tp[i], sd_ms_sigma(ms, tp[i]), sd_tensor_f32(sot)[i]);
        static const double pp[] = {0.1, 0.5, 0.9};
        for (int i = 0; i < 3; i++)
            CHECK_MSG((float)sd_ms_percent_to_sigma(ms, pp[i]) == sd_tensor_f32(p2s)[i],
                      "%s percent_to_sigma(%g) %.9g vs %.9g", tag, pp[i],
                      sd_ms_percent_to_sigma(ms, pp[i]), sd_tensor_f32(p2s)[i]);
    }
    sd_tensor *all[] = {sig, lsig, probe, ts, sot, p2s, den, inp, x, mo};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_tensor_unref(all[i]);
    free(ms);
}

static void check_rescale(const char *name, int zero_uncond) {
    char key[128];
    snprintf(key, sizeof key, "%s.params", name);
    sd_tensor *prm = get(key), *want = get(name), *x = get("x"), *c = get("model_out"),
              *u = get("uncond");
    if (prm && want && x && c && u) {
        const float *pv = sd_tensor_f32(prm);
        int64_t n = sd_tensor_numel(x), batch = x->shape[0];
        float *zeros = calloc((size_t)n, sizeof *zeros), *o = malloc((size_t)n * sizeof *o);
        sd_cfg_hook hook = {1, (double)pv[2]};
        /* the parameters are stored as float64 in the file; read back exact */
        sd_cfg_function(&hook, sd_tensor_f32(c), zero_uncond ? zeros : sd_tensor_f32(u),
                        (double)pv[1], sd_tensor_f32(x), pv[0], batch, n / batch, o);
        sd_tensor *ot = sd_tensor_new(SD_F32, x->ndim, x->shape);
        memcpy(ot->data, o, (size_t)n * sizeof *o);
        double mx = 0;
        long worst = 0;
        CHECK_MSG(sd_test_allclose(ot, want, 1e-5, 1e-5, &mx, &worst), "%s: max abs error %g at %ld",
                  name, mx, worst);
        /* and it is not the plain CFG result (the test could not pass by accident) */
        if (!zero_uncond) {
            sd_cfg_combine(sd_tensor_f32(c), sd_tensor_f32(u), (double)pv[1], o, n);
            memcpy(ot->data, o, (size_t)n * sizeof *o);
            if (pv[2] != 0.0f) CHECK(!sd_test_allclose(ot, want, 1e-4, 1e-4, &mx, &worst));
        }
        sd_tensor_unref(ot);
        free(zeros);
        free(o);
    }
    sd_tensor *all[] = {prm, want, x, c, u};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_tensor_unref(all[i]);
}

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/sampling/model_sampling_ref.safetensors",
             src ? src : "..");
    sd_error err = {0};
    if (sd_st_open(path, &ref, &err) != SD_OK) sd_test_skip("no %s", path);
    for (int k = SD_PRED_EPS; k <= SD_PRED_IMG_TO_IMG; k++)
        for (int z = 0; z < 2; z++) check_kind((sd_prediction)k, z);
    check_rescale("rescale_cfg", 0);
    check_rescale("rescale_cfg1", 1);
    check_rescale("rescale_cfg_m0", 0);

    /* names round-trip; unknown names are refused */
    for (int k = SD_PRED_EPS; k <= SD_PRED_IMG_TO_IMG; k++)
        CHECK(sd_prediction_parse(sd_prediction_name((sd_prediction)k)) == k);
    CHECK(sd_prediction_parse("v") == -1);
    sd_st_close(ref);
    return sd_test_finish();
}
