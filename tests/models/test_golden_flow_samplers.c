/* test_golden_flow_samplers.c - every sampler on flow-matching (CONST) model
 * samplings against ComfyUI (tests/data/flow_samplers: the generator script,
 * its manifest and the safetensors it wrote).
 *
 * For every configuration of the manifest (ModelSamplingFlux at several
 * shifts, ModelSamplingDiscreteFlow as schnell and SD3 use it; a txt2img
 * schedule, an img2img slice with a non-zero latent, a schedule cut short
 * with noise left) and every sampler name: the model sampling is built from
 * the manifest's kind/shift/multiplier, the start latent from the stored
 * noise and latent through sd_ms_noise_scaling (compared with ComfyUI's), and
 * sd_guider_sample (noise_scaling, the sampler with the model's CONST
 * branches, a denoise mask's CONST re-noising where the config has one,
 * inverse_noise_scaling at sd_sampler_final_sigma) runs over the stored
 * sigmas on the same analytic model (CONST calculate_input/denoised around
 * the manifest's function F) behind the CFG guider; its result is compared
 * with KSAMPLER.sample's, with the callback trajectory and the guider /
 * model call counts. The samplers whose
 * default noise is the Brownian tree get the generator's stand-in noise
 * (call k: torch.randn from seed base + k), the others their own default.
 * Tolerances are the manifest's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h"
#include "models/sampling/sampler.h"
#include "golden.h"
#include "testutil.h"

static double K1, K2, K3, K4, K5, K6, ca[2], cphi[2];

typedef struct model {
    sd_model_sampling *ms;
    double t_div;
    long model_calls;
} model;

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* BaseModel.apply_model with the analytic velocity, one conditioning. */
static void apply(model *m, const sd_tensor *x, float sigma, int cond, float *out) {
    int64_t n = sd_tensor_numel(x), per = n / x->shape[0];
    float *xin = malloc((size_t)n * sizeof *xin), *v = malloc((size_t)n * sizeof *v);
    sd_ms_calculate_input(m->ms, sigma, x->data, xin, (size_t)n);
    double s = (double)sd_ms_timestep(m->ms, sigma) / m->t_div;
    for (int64_t i = 0; i < n; i++) {
        double xi = xin[i], idx = (double)(i % per);
        double arg = K5 * idx + cphi[cond] + K6 * s;
        v[i] = (float)(K1 * xi + K2 * (1.0 - s) * tanh(K3 * xi) + K4 * ca[cond] * sin(arg));
    }
    sd_ms_calculate_denoised(m->ms, sigma, v, x->data, out, (size_t)n);
    m->model_calls++;
    free(xin);
    free(v);
}

static sd_status model_fn(void *ud, const sd_tensor *x, float sigma, const int *conds, int n_conds,
                          sd_tensor **outs, sd_error *err) {
    (void)err;
    for (int j = 0; j < n_conds; j++) apply(ud, x, sigma, conds[j], outs[j]->data);
    return SD_OK;
}

/* The generator's stand-in for the Brownian tree: call k is torch.randn
 * from a generator seeded base + k. */
typedef struct stand_in {
    uint64_t base, k;
} stand_in;

static sd_status stand_in_sample(void *ud, float sigma, float sigma_next, float *out, int64_t n, sd_error *err) {
    (void)sigma, (void)sigma_next;
    stand_in *s = ud;
    sd_rng *r = sd_rng_new(s->base + s->k++);
    if (!r) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_rng_randn(r, out, n);
    sd_rng_free(r);
    return SD_OK;
}

/* Every callback in order (dpm_adaptive calls it on rejected steps too, so
 * there may be more than the sigmas' steps). */
typedef struct traj {
    float *x, *den;
    int64_t n;
    int seen, cap;
} traj;

static void on_progress(void *ud, int step, int total, const sd_tensor *x, const sd_tensor *den) {
    traj *t = ud;
    (void)step, (void)total;
    if (t->seen == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        float *nx = realloc(t->x, (size_t)cap * (size_t)t->n * sizeof(float));
        if (nx) t->x = nx;
        float *nd = realloc(t->den, (size_t)cap * (size_t)t->n * sizeof(float));
        if (nd) t->den = nd;
        if (!nx || !nd) return;
        t->cap = cap;
    }
    memcpy(t->x + (size_t)t->seen * (size_t)t->n, x->data, (size_t)t->n * sizeof(float));
    memcpy(t->den + (size_t)t->seen * (size_t)t->n, den->data, (size_t)t->n * sizeof(float));
    t->seen++;
}

static int close_arr(const float *a, const float *e, int64_t n, double atol, double rtol, double *worst) {
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)e[i]);
        if (!(d <= atol + rtol * fabs((double)e[i]))) ok = 0;
        if (d > *worst || isnan(d)) *worst = isnan(d) ? INFINITY : d;
    }
    return ok;
}

static sd_st_file *g_file;

static sd_tensor *load(const char *fmt, const char *a, const char *b) {
    char key[256];
    snprintf(key, sizeof key, fmt, a, b);
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g_file, key, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", key);
    return t;
}

static int in_list(const cJSON *list, const char *name) {
    const cJSON *e;
    cJSON_ArrayForEach(e, list) if (cJSON_IsString(e) && strcmp(e->valuestring, name) == 0) return 1;
    return 0;
}

int main(void) {
    char path[1400];
    const char *dir = sd_golden_topic_dir("flow_samplers");
    cJSON *m = sd_golden_manifest(dir);
    sd_error err;
    snprintf(path, sizeof path, "%s/%s", dir,
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file")));
    CHECK_OK(sd_st_open(path, &g_file, &err), &err);
    if (!g_file) return sd_test_finish();

    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(m, "model");
    const cJSON *kc = cJSON_GetObjectItemCaseSensitive(mod, "constants");
    K1 = jnum(kc, "K1"), K2 = jnum(kc, "K2"), K3 = jnum(kc, "K3"), K4 = jnum(kc, "K4"), K5 = jnum(kc, "K5"),
    K6 = jnum(kc, "K6");
    ca[0] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "cond"), "a");
    cphi[0] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "cond"), "phi");
    ca[1] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "uncond"), "a");
    cphi[1] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "uncond"), "phi");
    const double cfg = jnum(m, "cfg");
    const uint64_t seed = (uint64_t)jnum(m, "seed");
    const uint64_t nbase = (uint64_t)jnum(m, "brownian_noise_base");
    const cJSON *brownian = cJSON_GetObjectItemCaseSensitive(m, "brownian_samplers");
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(m, "settings");
    CHECK(!isnan(K1) && !isnan(cfg) && cJSON_IsArray(brownian) && tol && settings);

    sd_model_sampling *ms = malloc(sizeof *ms);
    int ncases = 0, nfail = 0;
    double worst_all = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "id"));
        const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "config"));
        const char *sname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "sampler"));
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(settings, cid ? cid : "");
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "model_sampling"));
        if (!id || !sname || !st || !kind) {
            CHECK_MSG(0, "manifest case without id/config/sampler/settings");
            continue;
        }
        if (strcmp(kind, "flux") == 0) sd_model_sampling_init_flux(ms, jnum(st, "shift"));
        else if (strcmp(kind, "flow") == 0) sd_model_sampling_init_flow(ms, jnum(st, "shift"), jnum(st, "multiplier"));
        else {
            CHECK_MSG(0, "%s: unknown model_sampling '%s'", id, kind);
            continue;
        }
        const sd_sampler *smp = sd_sampler_find(sname);
        CHECK_MSG(smp != NULL, "%s: sampler %s unknown here", id, sname);
        sd_tensor *sig = load("%s/%s", cid, "sigmas"), *noise = load("%s/%s", cid, "noise");
        sd_tensor *lat = load("%s/%s", cid, "latent"), *xs_ref = load("%s/%s", cid, "x_start");
        char key[256];
        snprintf(key, sizeof key, "%s/x_final", id);
        sd_tensor *xf = load("%s%s", key, "");
        snprintf(key, sizeof key, "%s/traj_x", id);
        sd_tensor *tx = sd_st_find(g_file, key) ? load("%s%s", key, "") : NULL;
        snprintf(key, sizeof key, "%s/traj_denoised", id);
        sd_tensor *td = sd_st_find(g_file, key) ? load("%s%s", key, "") : NULL;
        if (!smp || !sig || !noise || !lat || !xs_ref || !xf) {
            sd_tensor_unref(sig), sd_tensor_unref(noise), sd_tensor_unref(lat), sd_tensor_unref(xs_ref);
            sd_tensor_unref(xf), sd_tensor_unref(tx), sd_tensor_unref(td);
            continue;
        }
        const float *sv = sig->data;
        int n_sig = (int)sd_tensor_numel(sig);
        int64_t n = sd_tensor_numel(noise);
        /* KSAMPLER.sample: the start latent */
        sd_tensor *x = sd_tensor_new(SD_F32, noise->ndim, noise->shape);
        sd_ms_noise_scaling(ms, sv[0], noise->data, lat->data, sd_ms_is_max_denoise(ms, sv[0]), x->data, (size_t)n);
        double wx = 0;
        CHECK_MSG(close_arr(x->data, xs_ref->data, n, 0, 0, &wx), "%s: x_start differs (%g)", id, wx);

        snprintf(key, sizeof key, "%s/mask", cid);
        sd_tensor *mask = sd_st_find(g_file, key) ? load("%s%s", key, "") : NULL;
        model md = {ms, jnum(st, "t_div"), 0};
        sd_guider g;
        sd_guider_init(&g, model_fn, &md, cfg);
        traj tr = {0};
        tr.n = n;
        stand_in si = {nbase, 0};
        sd_noise_source ns = {stand_in_sample, &si};
        /* CFGGuider.sample + KSAMPLER.sample: noise_scaling, the sampler with
         * the model's CONST branches (sd_guider_sample sets params.flow and
         * percent_to_sigma from ms), inverse_noise_scaling */
        sd_sampler_params p;
        sd_sampler_params_init(&p);
        p.seed = seed;
        p.progress = on_progress;
        p.progress_ud = &tr;
        if (in_list(brownian, sname)) p.noise = &ns;
        sd_tensor_unref(x);
        x = NULL;
        CHECK_OK(sd_guider_sample(&g, ms, smp, sv, n_sig, noise, lat, mask, &p, &x, &err), &err);
        sd_guider_release(&g); /* its scratch tensors; the call counts stay */
        if (!x) {
            free(tr.x), free(tr.den);
            sd_tensor_unref(sig), sd_tensor_unref(noise), sd_tensor_unref(lat), sd_tensor_unref(xs_ref);
            sd_tensor_unref(xf), sd_tensor_unref(tx), sd_tensor_unref(td), sd_tensor_unref(mask);
            continue;
        }

        const cJSON *ad = cJSON_GetObjectItemCaseSensitive(tol, "dpm_adaptive");
        int adaptive = strcmp(sname, "dpm_adaptive") == 0;
        double atol = adaptive ? jnum(ad, "atol") : jnum(tol, "atol");
        double rtol = adaptive ? jnum(ad, "rtol") : jnum(tol, "rtol");
        double worst = 0, wtx = 0, wtd = 0;
        int ok = close_arr(x->data, xf->data, n, atol, rtol, &worst);
        if (tx && td) {
            int64_t nt = sd_tensor_numel(tx) / n;
            CHECK_MSG(tr.seen == nt, "%s: %d callbacks, ComfyUI %lld", id, tr.seen, (long long)nt);
            if (tr.seen == nt) {
                int okx = close_arr(tr.x, tx->data, nt * n, atol, rtol, &wtx);
                int okd = close_arr(tr.den, td->data, nt * n, atol, rtol, &wtd);
                CHECK_MSG(okx && okd, "%s: callback x |d| %g, denoised |d| %g", id, wtx, wtd);
            }
        } else {
            CHECK_MSG(tr.seen == 0, "%s: %d callbacks, ComfyUI none", id, tr.seen);
        }
        CHECK_MSG(ok, "%s: worst |d| %g (atol %g rtol %g)", id, worst, atol, rtol);
        CHECK_MSG(g.guider_calls == (int64_t)jnum(cs, "guider_calls") && md.model_calls == (long)jnum(cs, "model_calls"),
                  "%s: %lld guider / %ld model calls, ComfyUI %g / %g", id, (long long)g.guider_calls, md.model_calls,
                  jnum(cs, "guider_calls"), jnum(cs, "model_calls"));
        printf("  %-40s result |d| %.3g, callbacks x %.3g denoised %.3g%s\n", id, worst, wtx, wtd, ok ? "" : "  FAIL");
        ncases++;
        nfail += !ok;
        if (worst > worst_all) worst_all = worst;
        free(tr.x);
        free(tr.den);
        sd_tensor_unref(x);
        sd_tensor_unref(sig), sd_tensor_unref(noise), sd_tensor_unref(lat), sd_tensor_unref(xs_ref);
        sd_tensor_unref(xf), sd_tensor_unref(tx), sd_tensor_unref(td), sd_tensor_unref(mask);
    }
    printf("%d cases, %d outside the tolerance, worst |d| %.3g\n", ncases, nfail, worst_all);
    CHECK(ncases > 0);
    free(ms);
    sd_st_close(g_file);
    cJSON_Delete(m);
    return sd_test_finish();
}
