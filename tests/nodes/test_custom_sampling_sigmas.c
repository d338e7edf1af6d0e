/* test_custom_sampling_sigmas.c - the smaller SIGMAS nodes of the
 * custom-sampling family (nodes/sampling/sigma_tools.c) against ComfyUI's
 * formulas (comfy_extras/nodes_custom_sampler.py, k_diffusion get_sigmas_*),
 * recomputed here step by step:
 *   - ManualSigmas follows re.findall(r"[-+]?(?:\d*\.*\d+)") + float();
 *   - SetFirstSigma, ExtendIntermediateSigmas (linear exactly; cosine/sine
 *     within 1 ulp of libm's sin/cos, torch uses Sleef's);
 *   - LaplaceScheduler / VPScheduler: length, no trailing 0 / trailing 0,
 *     the clamp ends, values within 2 ulp of the float32 formula;
 *   - SamplingPercentToSigma on a random-weight SD1 checkpoint: the MODEL's
 *     percent_to_sigma, and return_actual_sigma at 0 and 1;
 *   - AddNoise: noise * |s0 - s_last| added in model space, with DisableNoise,
 *     one sigma, an all-zero latent (not scaled) and empty sigmas;
 *   - errors name the input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/node.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;

/* Runs `type` with inputs by name (owned values, released here). */
static sd_status run(const char *type, const char *const *names, sd_value **vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    out[0] = NULL;
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 0; i < n; i++) sd_value_unref(vals[i]);
    return rc;
}

static sd_value *sigmas_of(const float *s, int n) {
    int64_t shape[1] = {n};
    sd_tensor *t = sd_tensor_new(SD_F32, 1, shape);
    if (n) memcpy(t->data, s, (size_t)n * 4);
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    return v;
}

static int sigmas_equal(const sd_value *v, const float *s, int n) {
    sd_tensor *t = v ? sd_value_as_tensor(v) : NULL;
    return t && t->ndim == 1 && t->shape[0] == n && (n == 0 || memcmp(t->data, s, (size_t)n * 4) == 0);
}

/* |a - b| in units in the last place of b (float32). */
static int ulps_close(float a, float b, int ulps) {
    if (a == b) return 1;
    return fabsf(a - b) <= (float)ulps * (nextafterf(fabsf(b), INFINITY) - fabsf(b));
}

static const float *data(const sd_value *v, int *n) {
    sd_tensor *t = v ? sd_value_as_tensor(v) : NULL;
    *n = t ? (int)t->shape[0] : -1;
    return t ? t->data : NULL;
}

/* torch.linspace(0, 1, 4) in float32: step 1/3; fma from the start below
 * n/2, from the end above. */
static void linspace4(float x[4]) {
    float step = 1.0f / 3.0f;
    x[0] = 0.0f, x[1] = fmaf(step, 1.0f, 0.0f), x[2] = fmaf(-step, 1.0f, 1.0f), x[3] = 1.0f;
}

static void test_manual(void) {
    sd_error err;
    sd_value *o;
    CHECK_OK(run("ManualSigmas", (const char *[]){"sigmas"}, (sd_value *[]){sd_value_string("1, 0.5")}, 1, &o, &err), &err);
    CHECK(sigmas_equal(o, (const float[]){1.0f, 0.5f}, 2));
    sd_value_unref(o);
    /* sign kept, words skipped, ".5" and "+2" numbers, float() then float32 */
    CHECK_OK(run("ManualSigmas", (const char *[]){"sigmas"},
                 (sd_value *[]){sd_value_string("[-3.25; x +2 .5,14.614642 0]")}, 1, &o, &err), &err);
    CHECK(sigmas_equal(o, (const float[]){-3.25f, 2.0f, 0.5f, (float)14.614642, 0.0f}, 5));
    sd_value_unref(o);
    /* the regex has no exponent: "1e-5" is 1 and -5; "7." is 7 (the dot is not taken) */
    CHECK_OK(run("ManualSigmas", (const char *[]){"sigmas"}, (sd_value *[]){sd_value_string("1e-5 7.")}, 1, &o, &err), &err);
    CHECK(sigmas_equal(o, (const float[]){1.0f, -5.0f, 7.0f}, 3));
    sd_value_unref(o);
    CHECK_OK(run("ManualSigmas", (const char *[]){"sigmas"}, (sd_value *[]){sd_value_string("none")}, 1, &o, &err), &err);
    CHECK(sigmas_equal(o, NULL, 0));
    sd_value_unref(o);
    /* float("1..5") is a ValueError in ComfyUI */
    CHECK(run("ManualSigmas", (const char *[]){"sigmas"}, (sd_value *[]){sd_value_string("2, 1..5")}, 1, &o, &err) != SD_OK);
    CHECK_MSG(strstr(err.msg, "1..5") && !strcmp(err.input, "sigmas"), "error: %s", err.msg);
    sd_value_unref(o);
}

static void test_set_first(void) {
    sd_error err;
    sd_value *o;
    const float s[3] = {10.0f, 5.0f, 0.0f};
    CHECK_OK(run("SetFirstSigma", (const char *[]){"sigmas", "sigma"},
                 (sd_value *[]){sigmas_of(s, 3), sd_value_float(136.0)}, 2, &o, &err), &err);
    CHECK(sigmas_equal(o, (const float[]){136.0f, 5.0f, 0.0f}, 3));
    sd_value_unref(o);
    CHECK(run("SetFirstSigma", (const char *[]){"sigmas", "sigma"},
              (sd_value *[]){sigmas_of(s, 0), sd_value_float(1.0)}, 2, &o, &err) != SD_OK);
    CHECK(!strcmp(err.input, "sigmas"));
    sd_value_unref(o);
}

static sd_value *extend(const float *s, int n, int steps, double start, double end,
                        const char *spacing, sd_error *err) {
    sd_value *o;
    CHECK_OK(run("ExtendIntermediateSigmas",
                 (const char *[]){"sigmas", "steps", "start_at_sigma", "end_at_sigma", "spacing"},
                 (sd_value *[]){sigmas_of(s, n), sd_value_int(steps), sd_value_float(start),
                                sd_value_float(end), sd_value_string(spacing)},
                 5, &o, err),
             err);
    return o;
}

static void test_extend(void) {
    sd_error err;
    const float s[4] = {14.0f, 10.0f, 5.0f, 0.0f};
    float x[4];
    linspace4(x);
    /* steps 3: x[1], x[2] inserted after 14 and 10 (>= 6); 5 is below end_at_sigma */
    sd_value *o = extend(s, 4, 3, -1.0, 6.0, "linear", &err);
    float d0 = 10.0f - 14.0f, d1 = 5.0f - 10.0f;
    const float lin[8] = {14.0f, x[1] * d0 + 14.0f, x[2] * d0 + 14.0f, 10.0f,
                          x[1] * d1 + 10.0f, x[2] * d1 + 10.0f, 5.0f, 0.0f};
    CHECK(sigmas_equal(o, lin, 8));
    sd_value_unref(o);
    /* start_at_sigma 12: only 10 (and not 14) is extended; end 0 includes 5 */
    o = extend(s, 4, 2, 12.0, 0.0, "linear", &err);
    const float part[6] = {14.0f, 10.0f, 0.5f * d1 + 10.0f, 5.0f, 0.5f * -5.0f + 5.0f, 0.0f};
    CHECK(sigmas_equal(o, part, 6));
    sd_value_unref(o);
    /* cosine: sin(x*pi/2), sine: 1 - cos(x*pi/2), in float32 */
    const char *sp[2] = {"cosine", "sine"};
    for (int k = 0; k < 2; k++) {
        o = extend(s, 4, 3, -1.0, 6.0, sp[k], &err);
        int n;
        const float *v = data(o, &n);
        CHECK_MSG(n == 8, "%s: %d sigmas", sp[k], n);
        if (n == 8) {
            for (int j = 1; j <= 2; j++) {
                float a = x[j] * (float)M_PI / 2.0f;
                float f = k == 0 ? sinf(a) : 1.0f - cosf(a);
                CHECK_MSG(ulps_close(v[j], f * d0 + 14.0f, 1) && ulps_close(v[3 + j], f * d1 + 10.0f, 1),
                          "%s spacing at %d", sp[k], j);
            }
            CHECK(v[0] == 14.0f && v[3] == 10.0f && v[6] == 5.0f && v[7] == 0.0f);
        }
        sd_value_unref(o);
    }
    o = extend(s, 0, 3, -1.0, 6.0, "linear", &err); /* empty stays empty */
    CHECK(sigmas_equal(o, NULL, 0));
    sd_value_unref(o);
}

static void test_laplace_vp(void) {
    sd_error err;
    sd_value *o;
    const double smax = 14.614642, smin = 0.0291675, mu = 0.0, beta = 0.5;
    CHECK_OK(run("LaplaceScheduler", (const char *[]){"steps", "sigma_max", "sigma_min", "mu", "beta"},
                 (sd_value *[]){sd_value_int(7), sd_value_float(smax), sd_value_float(smin),
                                sd_value_float(mu), sd_value_float(beta)},
                 5, &o, &err), &err);
    int n;
    const float *v = data(o, &n);
    CHECK_MSG(n == 7, "LaplaceScheduler: %d values (ComfyUI appends no 0)", n);
    if (n == 7) {
        /* the ends are clamped: exp(0.5 * -log(1e-5)) = 316 > sigma_max */
        CHECK(v[0] == (float)smax && v[6] == (float)smin);
        CHECK(v[3] == 1.0f); /* x = 0.5: sign 0, exp(mu) */
        for (int i = 0; i < 7; i++) {
            /* x within an ulp of torch's linspace and libm's exp/log where torch has
             * Sleef's: compared to 1e-5 relative, not bit for bit */
            float x = (float)i / 6.0f;
            float d = 0.5f - x;
            float sign = d > 0 ? 1.0f : d < 0 ? -1.0f : 0.0f;
            float e = expf((float)mu - (float)beta * sign * logf(1.0f - 2.0f * fabsf(d) + (float)1e-5));
            e = fminf(fmaxf(e, (float)smin), (float)smax);
            CHECK_MSG(fabsf(v[i] - e) <= 1e-5f * e, "Laplace[%d] %.9g vs %.9g", i, v[i], e);
            if (i) CHECK(v[i] <= v[i - 1]);
        }
    }
    sd_value_unref(o);

    CHECK_OK(run("VPScheduler", (const char *[]){"steps", "beta_d", "beta_min", "eps_s"},
                 (sd_value *[]){sd_value_int(5), sd_value_float(19.9), sd_value_float(0.1),
                                sd_value_float(0.001)},
                 4, &o, &err), &err);
    v = data(o, &n);
    CHECK_MSG(n == 6, "VPScheduler: %d values", n);
    if (n == 6) {
        CHECK(v[5] == 0.0f);
        float t0 = 1.0f, t4 = 0.001f;
        float e0 = sqrtf(expm1f(19.9f * (t0 * t0) / 2.0f + 0.1f * t0));
        float e4 = sqrtf(expm1f(19.9f * (t4 * t4) / 2.0f + 0.1f * t4));
        CHECK_MSG(ulps_close(v[0], e0, 2) && ulps_close(v[4], e4, 2), "VP ends %.9g %.9g", v[0], v[4]);
        for (int i = 1; i < 6; i++) CHECK(v[i] < v[i - 1]);
    }
    sd_value_unref(o);
    CHECK(run("VPScheduler", (const char *[]){"steps", "beta_d", "beta_min", "eps_s"},
              (sd_value *[]){sd_value_int(0), sd_value_float(19.9), sd_value_float(0.1), sd_value_float(0.001)},
              4, &o, &err) != SD_OK);
    CHECK(!strcmp(err.input, "steps"));
}

static void test_percent(sd_value *model) {
    sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_EPS);
    const double ps[] = {0.0, 0.25, 0.5, 0.9999, 1.0};
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 5; i++) {
            sd_error err;
            sd_value *o;
            sd_value_ref(model);
            CHECK_OK(run("SamplingPercentToSigma", (const char *[]){"model", "sampling_percent", "return_actual_sigma"},
                         (sd_value *[]){model, sd_value_float(ps[i]), sd_value_bool(a)}, 3, &o, &err), &err);
            double want = sd_ms_percent_to_sigma(&ms, ps[i]);
            if (a && ps[i] == 0.0) want = ms.sigma_max;
            if (a && ps[i] == 1.0) want = ms.sigma_min;
            CHECK_MSG(o && sd_value_as_float(o) == want, "percent %g actual %d: %.17g vs %.17g", ps[i], a,
                      o ? sd_value_as_float(o) : NAN, want);
            sd_value_unref(o);
        }
    /* the ends without return_actual_sigma, as ComfyUI's percent_to_sigma */
    CHECK(sd_ms_percent_to_sigma(&ms, 0.0) == 999999999.9 && sd_ms_percent_to_sigma(&ms, 1.0) == 0.0);
}

static sd_value *latent_of(const float *v, const int64_t *shape) {
    sd_tensor *t = sd_tensor_new(SD_F32, 4, shape);
    memcpy(t->data, v, (size_t)sd_tensor_numel(t) * 4);
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "samples", sd_value_tensor(t));
    sd_tensor_unref(t);
    return d;
}

/* AddNoise in ComfyUI's float32 order: scale = |s0 - s_last| (one sigma:
 * s0); samples * 0.18215 (SD1's latent_format scale_factor) unless all are
 * 0; noise * scale + that; / 0.18215. */
static void test_add_noise(sd_value *model) {
    sd_error err;
    const int64_t shape[4] = {1, 4, 8, 8};
    enum { N = 256 };
    float zeros[N] = {0}, lat[N];
    for (int i = 0; i < N; i++) lat[i] = (float)((i % 17) - 8) * 0.125f;
    sd_tensor *noise = sd_noise_prepare(7, 4, shape, NULL, 0);
    const float k = 0.18215f;
    const float s3[3] = {14.614642f, 1.5f, 0.0291675f};
    for (int c = 0; c < 4; c++) {
        int ns = c == 2 ? 1 : 3, use_lat = c & 1, empty_noise = c == 3;
        sd_value *nz, *o;
        if (empty_noise) CHECK_OK(run("DisableNoise", NULL, NULL, 0, &nz, &err), &err);
        else CHECK_OK(run("RandomNoise", (const char *[]){"noise_seed"}, (sd_value *[]){sd_value_int(7)}, 1, &nz, &err), &err);
        sd_value_ref(model);
        CHECK_OK(run("AddNoise", (const char *[]){"model", "noise", "sigmas", "latent_image"},
                     (sd_value *[]){model, nz, sigmas_of(s3, ns), latent_of(use_lat ? lat : zeros, shape)},
                     4, &o, &err), &err);
        sd_tensor *t = o ? sd_value_dict_tensor(o, "samples") : NULL;
        CHECK(t && sd_tensor_numel(t) == N);
        float scale = ns > 1 ? fabsf(s3[0] - s3[2]) : s3[0];
        int bad = 0;
        for (int i = 0; t && noise && i < N; i++) {
            float nv = empty_noise ? 0.0f : ((const float *)noise->data)[i];
            float want = (nv * scale + (use_lat ? lat[i] * k : 0.0f)) / k;
            bad += ((const float *)t->data)[i] != want;
        }
        CHECK_MSG(bad == 0, "AddNoise case %d: %d values differ", c, bad);
        sd_value_unref(o);
    }
    sd_tensor_unref(noise);
    /* empty sigmas: the latent as it is */
    sd_value *nz, *o, *l = latent_of(lat, shape);
    CHECK_OK(run("DisableNoise", NULL, NULL, 0, &nz, &err), &err);
    sd_value_ref(model), sd_value_ref(l);
    CHECK_OK(run("AddNoise", (const char *[]){"model", "noise", "sigmas", "latent_image"},
                 (sd_value *[]){model, nz, sigmas_of(s3, 0), l}, 4, &o, &err), &err);
    CHECK(o == l);
    sd_value_unref(o), sd_value_unref(l);
    /* a NOISE input that is not one names the input */
    sd_value_ref(model);
    CHECK(run("AddNoise", (const char *[]){"model", "noise", "sigmas", "latent_image"},
              (sd_value *[]){model, sd_value_int(3), sigmas_of(s3, 3), latent_of(lat, shape)}, 4, &o, &err) != SD_OK);
    CHECK(!strcmp(err.input, "noise"));
}

int main(void) {
    nt_tiny_sd1 t;
    nt_tiny_sd1_init(&t, "nodes_custom_sampling_sigmas");
    g_env = &t.env;
    sd_error err;
    sd_error_clear(&err);

    test_manual();
    test_set_first();
    test_extend();
    test_laplace_vp();
    sd_value *ck[3] = {0};
    const sd_node_def *loader = sd_registry_find("CheckpointLoaderSimple");
    sd_value *name[1] = {sd_value_string("tiny.safetensors")};
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = "CheckpointLoaderSimple"};
    CHECK_OK(loader->run(&ctx, name, ck, &err), &err);
    sd_value_unref(name[0]);
    if (ck[0]) test_percent(ck[0]);
    if (ck[0]) test_add_noise(ck[0]);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    nt_tiny_sd1_free(&t);
    return sd_test_finish();
}
