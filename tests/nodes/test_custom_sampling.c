/* test_custom_sampling.c - the custom-sampling family on a random-weight SD1
 * checkpoint synthesized in the real key layout (no shared data needed):
 *   - schedule nodes give exactly the schedule functions' sigmas (BasicScheduler
 *     for every scheduler, step count and denoise; KarrasScheduler at the
 *     model's sigma_min/max equals the "karras" scheduler; BetaSamplingScheduler
 *     0.6/0.6 equals "beta"), AlignYourSteps reproduces ComfyUI's published
 *     tables at 10 steps and interpolates through them at 20;
 *   - SplitSigmas / SplitSigmasDenoise / FlipSigmas follow Python's slices;
 *   - SamplerCustomAdvanced (RandomNoise + CFGGuider + KSamplerSelect +
 *     BasicScheduler) and SamplerCustom give KSampler's latent bit for bit
 *     (deterministic, ancestral and Brownian-tree samplers, denoise < 1),
 *     DisableNoise equals KSamplerAdvanced without noise, CFGGuider at cfg 1
 *     equals BasicGuider, DualCFGGuider with cond2 = negative agrees with
 *     CFG within a bound derived from the rounding of another UNet batch
 *     order (dual_vs_cfg),
 *     sampler options reach the sampler, denoised_output is the last step's
 *     denoised estimate, and errors name the input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/node.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/rng.h"
#include "models/sampling/schedules.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;
static sd_tensor *g_last_preview; /* the last preview latent (model space) */

static void on_preview(void *user, const char *node_id, int64_t step, int64_t steps,
                       const sd_tensor *latent, const char *fmt) {
    (void)user, (void)node_id, (void)step, (void)steps, (void)fmt;
    sd_tensor_unref(g_last_preview);
    g_last_preview = sd_tensor_clone(latent);
}

/* Runs `type` with inputs by name (borrowed values); out gets every output. */
static sd_status run(const char *type, const char *const *names, sd_value *const *vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type, .preview = on_preview};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

/* One-output run with owned literal inputs (released here). */
static sd_value *run1(const char *type, const char *const *names, sd_value **vals, int n,
                      const int *owned, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type, .preview = on_preview};
    return nt_run1_named(&ctx, names, vals, n, owned, err);
}

static int bit_equal(const sd_tensor *a, const sd_tensor *b) {
    return a && b && sd_tensor_numel(a) == sd_tensor_numel(b) && a->nbytes == b->nbytes &&
           memcmp(a->data, b->data, a->nbytes) == 0;
}

static int sigmas_equal(const sd_value *v, const float *s, int n) {
    sd_tensor *t = v ? sd_value_as_tensor(v) : NULL;
    return t && t->ndim == 1 && t->shape[0] == n && (n == 0 || memcmp(t->data, s, (size_t)n * 4) == 0);
}

static sd_value *sigmas_of(const float *s, int n) {
    int64_t shape[1] = {n};
    sd_tensor *t = sd_tensor_new(SD_F32, 1, shape);
    if (n) memcpy(t->data, s, (size_t)n * 4);
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    return v;
}

/* ---- schedules ----------------------------------------------------------------------------- */

static sd_value *basic_scheduler(sd_value *model, const char *sched, int steps, double denoise,
                                 sd_error *err) {
    const char *names[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *vals[] = {model, sd_value_string(sched), sd_value_int(steps), sd_value_float(denoise)};
    const int owned[] = {0, 1, 1, 1};
    return run1("BasicScheduler", names, vals, 4, owned, err);
}

static void test_schedules(sd_value *model) {
    sd_error err;
    sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_EPS);
    const char *const *scheds = sd_schedule_names();
    const int steps[] = {1, 3, 7, 20};
    const double denoise[] = {1.0, 0.6, 0.35, 0.0};
    for (int s = 0; scheds[s]; s++)
        for (int i = 0; i < 4; i++)
            for (int d = 0; d < 4; d++) {
                float *ref = NULL;
                int n = 0;
                CHECK_OK(sd_basic_scheduler_sigmas(&ms, scheds[s], steps[i], denoise[d], &ref, &n, &err), &err);
                sd_value *v = basic_scheduler(model, scheds[s], steps[i], denoise[d], &err);
                CHECK_MSG(sigmas_equal(v, ref, n), "BasicScheduler %s steps %d denoise %g", scheds[s],
                          steps[i], denoise[d]);
                sd_value_unref(v);
                free(ref);
            }
    /* the k-diffusion schedulers at the model's sigma range equal KSampler's */
    for (int i = 0; i < 4; i++) {
        float ref[32];
        int n = 0;
        const char *kn[] = {"steps", "sigma_max", "sigma_min", "rho"};
        sd_value *kv[] = {sd_value_int(steps[i]), sd_value_float(ms.sigma_max),
                          sd_value_float(ms.sigma_min), sd_value_float(7.0)};
        const int own4[] = {1, 1, 1, 1};
        sd_value *k = run1("KarrasScheduler", kn, kv, 4, own4, &err);
        CHECK_OK(sd_schedule_sigmas(&ms, "karras", steps[i], ref, &n, &err), &err);
        CHECK_MSG(sigmas_equal(k, ref, n), "KarrasScheduler = karras at %d steps", steps[i]);
        sd_value_unref(k);
        sd_value *ev[] = {sd_value_int(steps[i]), sd_value_float(ms.sigma_max), sd_value_float(ms.sigma_min)};
        sd_value *e = run1("ExponentialScheduler", kn, ev, 3, own4, &err);
        CHECK_OK(sd_schedule_sigmas(&ms, "exponential", steps[i], ref, &n, &err), &err);
        CHECK_MSG(sigmas_equal(e, ref, n), "ExponentialScheduler = exponential at %d steps", steps[i]);
        sd_value_unref(e);
        const char *bn[] = {"model", "steps", "alpha", "beta"};
        sd_value *bv[] = {model, sd_value_int(steps[i]), sd_value_float(0.6), sd_value_float(0.6)};
        const int ownb[] = {0, 1, 1, 1};
        sd_value *b = run1("BetaSamplingScheduler", bn, bv, 4, ownb, &err);
        CHECK_OK(sd_schedule_sigmas(&ms, "beta", steps[i], ref, &n, &err), &err);
        CHECK_MSG(sigmas_equal(b, ref, n), "BetaSamplingScheduler 0.6/0.6 = beta at %d steps", steps[i]);
        sd_value_unref(b);
        /* the nodes' defaults equal the functions with the same numbers */
        sd_value *pv[] = {sd_value_int(steps[i]), sd_value_float(14.614642), sd_value_float(0.0291675),
                          sd_value_float(1.0)};
        sd_value *p = run1("PolyexponentialScheduler", kn, pv, 4, own4, &err);
        n = sd_sigmas_polyexponential(steps[i], 0.0291675, 14.614642, 1.0, ref);
        CHECK_MSG(sigmas_equal(p, ref, n), "PolyexponentialScheduler at %d steps", steps[i]);
        sd_value_unref(p);
    }
    /* SDTurbo: sigma(999), sigma(899), ... from 10 - int(10 * denoise) */
    {
        const char *tn[] = {"model", "steps", "denoise"};
        sd_value *tv[] = {model, sd_value_int(3), sd_value_float(0.8)};
        const int own[] = {0, 1, 1};
        sd_value *t = run1("SDTurboScheduler", tn, tv, 3, own, &err);
        float ref[4] = {sd_ms_sigma(&ms, 799.0f), sd_ms_sigma(&ms, 699.0f), sd_ms_sigma(&ms, 599.0f), 0.0f};
        CHECK_MSG(sigmas_equal(t, ref, 4), "SDTurboScheduler 3 steps at denoise 0.8");
        sd_value_unref(t);
        sd_value *tv2[] = {model, sd_value_int(10), sd_value_float(0.3)};
        t = run1("SDTurboScheduler", tn, tv2, 3, own, &err);
        sd_tensor *tt = sd_value_as_tensor(t);
        CHECK(tt && tt->shape[0] == 4 && ((float *)tt->data)[0] == sd_ms_sigma(&ms, 299.0f));
        sd_value_unref(t);
    }
}

/* ComfyUI's NOISE_LEVELS (nodes_align_your_steps.py), copied from its source. */
static const double ays_sd1[11] = {14.6146412293, 6.4745760956, 3.8636745985, 2.6946151520,
                                   1.8841921177,  1.3943805092, 0.9642583904, 0.6523686016,
                                   0.3977456272,  0.1515232662, 0.0291671582};
static const double ays_sdxl[11] = {14.6146412293, 6.3184485287, 3.7681790315, 2.1811480769,
                                    1.3405244945,  0.8620721141, 0.5550693289, 0.3798540708,
                                    0.2332364134,  0.1114188177, 0.0291671582};

static sd_value *ays(const char *type, int steps, double denoise, sd_error *err) {
    const char *n[] = {"model_type", "steps", "denoise"};
    sd_value *v[] = {sd_value_string(type), sd_value_int(steps), sd_value_float(denoise)};
    const int own[] = {1, 1, 1};
    return run1("AlignYourStepsScheduler", n, v, 3, own, err);
}

static void test_ays(void) {
    sd_error err;
    const char *types[] = {"SD1", "SDXL"};
    const double *tables[] = {ays_sd1, ays_sdxl};
    for (int k = 0; k < 2; k++) {
        float want[11];
        for (int i = 0; i < 11; i++) want[i] = (float)tables[k][i];
        want[10] = 0.0f;
        sd_value *v = ays(types[k], 10, 1.0, &err);
        CHECK_MSG(sigmas_equal(v, want, 11), "AYS %s 10 steps = the published table", types[k]);
        sd_value_unref(v);
        /* denoise 0.5: the last round(10 * 0.5) + 1 values */
        v = ays(types[k], 10, 0.5, &err);
        CHECK_MSG(sigmas_equal(v, want + 5, 6), "AYS %s denoise 0.5", types[k]);
        sd_value_unref(v);
        /* 20 steps: log-linear through the table, so every other value is it */
        v = ays(types[k], 20, 1.0, &err);
        sd_tensor *t = sd_value_as_tensor(v);
        CHECK(t && t->shape[0] == 21);
        for (int i = 0; t && i < 10; i++) {
            float got = ((float *)t->data)[2 * i], mid = ((float *)t->data)[2 * i + 1];
            CHECK_MSG(fabs(got - tables[k][i]) <= 1e-6 * tables[k][i], "AYS %s 20 steps [%d] %g vs %g",
                      types[k], 2 * i, got, tables[k][i]);
            /* the midpoint is the geometric mean of its neighbours */
            double gm = sqrt(tables[k][i] * tables[k][i + 1]);
            if (i < 9) CHECK_MSG(fabs(mid - gm) <= 1e-5 * gm, "AYS %s midpoint %d", types[k], i);
        }
        CHECK(t && ((float *)t->data)[20] == 0.0f);
        sd_value_unref(v);
    }
    sd_value *v = ays("SD1", 10, 0.0, &err);
    CHECK(sigmas_equal(v, NULL, 0));
    sd_value_unref(v);
}

/* ---- sigma list operations -------------------------------------------------------------------- */

static void split(const char *type, const char *arg, sd_value *argv, const float *s, int n,
                  sd_value **out) {
    sd_error err;
    const char *names[] = {"sigmas", arg};
    sd_value *vals[] = {sigmas_of(s, n), argv};
    CHECK_OK(run(type, names, vals, 2, out, &err), &err);
    sd_value_unref(vals[0]);
    sd_value_unref(argv);
}

static void test_sigma_ops(void) {
    const float s[5] = {10.0f, 5.0f, 2.0f, 1.0f, 0.0f};
    sd_value *o[2];
    split("SplitSigmas", "step", sd_value_int(2), s, 5, o);
    CHECK(sigmas_equal(o[0], s, 3) && sigmas_equal(o[1], s + 2, 3));
    sd_value_unref(o[0]), sd_value_unref(o[1]);
    split("SplitSigmas", "step", sd_value_int(0), s, 5, o);
    CHECK(sigmas_equal(o[0], s, 1) && sigmas_equal(o[1], s, 5));
    sd_value_unref(o[0]), sd_value_unref(o[1]);
    split("SplitSigmas", "step", sd_value_int(9), s, 5, o); /* past the end: all, then none */
    CHECK(sigmas_equal(o[0], s, 5) && sigmas_equal(o[1], s, 0));
    sd_value_unref(o[0]), sd_value_unref(o[1]);
    /* 4 steps, denoise 0.5: round(2) -> [:-2], [-3:] */
    split("SplitSigmasDenoise", "denoise", sd_value_float(0.5), s, 5, o);
    CHECK(sigmas_equal(o[0], s, 3) && sigmas_equal(o[1], s + 2, 3));
    sd_value_unref(o[0]), sd_value_unref(o[1]);
    /* round half to even: 4 * 0.625 = 2.5 -> 2 */
    split("SplitSigmasDenoise", "denoise", sd_value_float(0.625), s, 5, o);
    CHECK(sigmas_equal(o[0], s, 3) && sigmas_equal(o[1], s + 2, 3));
    sd_value_unref(o[0]), sd_value_unref(o[1]);
    /* denoise 0: [:-0] is empty, [-1:] the last */
    split("SplitSigmasDenoise", "denoise", sd_value_float(0.0), s, 5, o);
    CHECK(sigmas_equal(o[0], s, 0) && sigmas_equal(o[1], s + 4, 1));
    sd_value_unref(o[0]), sd_value_unref(o[1]);
    split("SplitSigmasDenoise", "denoise", sd_value_float(1.0), s, 5, o);
    CHECK(sigmas_equal(o[0], s, 1) && sigmas_equal(o[1], s, 5));
    sd_value_unref(o[0]), sd_value_unref(o[1]);

    sd_error err;
    const char *fn[] = {"sigmas"};
    sd_value *fv[] = {sigmas_of(s, 5)};
    const int own[] = {1};
    sd_value *f = run1("FlipSigmas", fn, fv, 1, own, &err);
    const float flipped[5] = {0.0001f, 1.0f, 2.0f, 5.0f, 10.0f};
    CHECK(sigmas_equal(f, flipped, 5));
    sd_value_unref(f);
    sd_value *ev[] = {sigmas_of(s, 0)};
    f = run1("FlipSigmas", fn, ev, 1, own, &err);
    CHECK(sigmas_equal(f, s, 0));
    sd_value_unref(f);
}

/* ---- sampling equivalences ------------------------------------------------------------------ */

typedef struct fixture {
    sd_value *model, *pos, *neg, *latent;
} fixture;

static sd_value *ksampler(fixture *f, const char *sampler, const char *sched, int steps, double cfg,
                          double denoise, int64_t seed, sd_error *err) {
    const char *n[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                       "positive", "negative", "latent_image", "denoise"};
    sd_value *v[] = {f->model, sd_value_int(seed), sd_value_int(steps), sd_value_float(cfg),
                     sd_value_string(sampler), sd_value_string(sched), f->pos, f->neg, f->latent,
                     sd_value_float(denoise)};
    const int own[] = {0, 1, 1, 1, 1, 1, 0, 0, 0, 1};
    return run1("KSampler", n, v, 10, own, err);
}

static sd_value *select_sampler(const char *name, sd_error *err) {
    const char *n[] = {"sampler_name"};
    sd_value *v[] = {sd_value_string(name)};
    const int own[] = {1};
    return run1("KSamplerSelect", n, v, 1, own, err);
}

static sd_value *cfg_guider(fixture *f, sd_value *neg, double cfg, sd_error *err) {
    const char *n[] = {"model", "positive", "negative", "cfg"};
    sd_value *v[] = {f->model, f->pos, neg, sd_value_float(cfg)};
    const int own[] = {0, 0, 0, 1};
    return run1("CFGGuider", n, v, 4, own, err);
}

static sd_value *random_noise(int64_t seed, sd_error *err) {
    const char *n[] = {"noise_seed"};
    sd_value *v[] = {sd_value_int(seed)};
    const int own[] = {1};
    return run1("RandomNoise", n, v, 1, own, err);
}

/* SamplerCustomAdvanced: both outputs. */
static sd_status custom_adv(sd_value *noise, sd_value *guider, sd_value *sampler, sd_value *sigmas,
                            sd_value *latent, sd_value **out, sd_error *err) {
    const char *n[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
    sd_value *v[] = {noise, guider, sampler, sigmas, latent};
    return run("SamplerCustomAdvanced", n, v, 5, out, err);
}

static sd_tensor *samples(const sd_value *l) { return l ? sd_value_dict_tensor(l, "samples") : NULL; }

static double max_abs_diff(const sd_tensor *a, const sd_tensor *b) {
    double md = 0;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++)
        md = fmax(md, fabs((double)((float *)a->data)[i] - (double)((float *)b->data)[i]));
    return md;
}

/* DualCFGGuider(cond1 = positive, cond2 = negative, cfg_cond2_negative 1)
 * computes CFGGuider's formula: cfg_cond2_negative 1 skips the negative, so
 * out = middle + (positive - middle) * cfg_conds with middle = the negative,
 * the same float operations as CFGGuider's uncond + (cond - uncond) * cfg.
 * It is not the same UNet batch: CFGGuider batches [positive, negative],
 * DualCFGGuider [middle, positive] (ComfyUI too batches the two guiders'
 * conds in different orders), and a GEMM/conv kernel may sum a row in
 * another order depending on its position in the batch (OpenBLAS's Haswell
 * and Zen kernels do: max |diff| 1.2e-3 after two steps, where the SkylakeX
 * kernel gives 0). So the two agree to rounding, not bit for bit; the bound
 * below comes from the computation, not from a measured difference.
 *
 * One euler step to sigma 0 returns the guided denoised estimate
 * D = x - sigma0 * eps_guided, so the difference is sigma0 times the
 * difference of the guided eps. Per UNet evaluation, a row summed in
 * another order differs by the rounding of its reductions: ~u * sqrt(K)
 * relative to an op's output RMS for a reduction of length K (u = 2^-24,
 * float32's unit roundoff; errors of a reordered sum add as a random walk),
 * L such ops in sequence adding in quadrature (norms keep the gain ~1), and
 * 6 standard deviations covering the largest of the latent's values:
 *   rho = 6 * u * sqrt(K * L),
 * K = 2304 (the largest reduction of the sd1-tiny UNet: a 3x3 conv over the
 * 128 + 128 channels of an up block's concatenated skip), L = 128 (matrix
 * ops on its longest path: ~50 convs, ~70 transformer linears, the time MLP;
 * tests/golden.h SD_GOLDEN_DEPTH_UNET counts the same model). The guided
 * eps = cfg * pos - (cfg - 1) * neg carries independent errors of both rows:
 *   |D_dual - D_cfg| <= sqrt(cfg^2 + (cfg - 1)^2) * rho * rms(sigma0 * eps)
 *                      + 4 * u * max|x|  (the step's own rounding)
 * with rms(sigma0 * eps) over both predictions, x - D of BasicGuider on the
 * positive and on the negative. */
static void dual_vs_cfg(fixture *f, sd_value *noise, sd_value *smp, sd_value *g_pos, sd_error *err) {
    const double cfg = 5.0, u = 0x1p-24, K = 2304, L = 128;
    sd_value *sig = basic_scheduler(f->model, "karras", 1, 1.0, err); /* [sigma_max, 0] */
    sd_tensor *st = sig ? sd_value_as_tensor(sig) : NULL;
    CHECK_MSG(st && st->ndim == 1 && st->shape[0] == 2 && ((float *)st->data)[1] == 0.0f,
              "karras, 1 step: two sigmas ending at 0");
    if (!st || st->shape[0] != 2) {
        sd_value_unref(sig);
        return;
    }
    sd_value *sig0 = sigmas_of(st->data, 1); /* no step: the noised input x itself */
    sd_value *g5 = cfg_guider(f, f->neg, cfg, err);
    const char *bn[] = {"model", "conditioning"};
    sd_value *bv[] = {f->model, f->neg};
    const int bo[] = {0, 0};
    sd_value *g_neg = run1("BasicGuider", bn, bv, 2, bo, err);
    const char *dn[] = {"model", "cond1", "cond2", "negative", "cfg_conds", "cfg_cond2_negative", "style"};
    sd_value *dv[] = {f->model, f->pos, f->neg, f->neg, sd_value_float(cfg), sd_value_float(1.0),
                      sd_value_string("regular")};
    const int dox[] = {0, 0, 0, 0, 1, 1, 1};
    sd_value *gd = run1("DualCFGGuider", dn, dv, 7, dox, err);
    sd_value *x[2] = {0}, *dc[2] = {0}, *dd[2] = {0}, *dp[2] = {0}, *dn_[2] = {0};
    CHECK_OK(custom_adv(noise, g5, smp, sig0, f->latent, x, err), err);
    CHECK_OK(custom_adv(noise, g5, smp, sig, f->latent, dc, err), err);
    CHECK_OK(custom_adv(noise, gd, smp, sig, f->latent, dd, err), err);
    CHECK_OK(custom_adv(noise, g_pos, smp, sig, f->latent, dp, err), err);
    CHECK_OK(custom_adv(noise, g_neg, smp, sig, f->latent, dn_, err), err);
    sd_tensor *tx = samples(x[0]), *tc = samples(dc[0]), *td = samples(dd[0]), *tp = samples(dp[0]),
              *tn = samples(dn_[0]);
    int ok = tx && tc && td && tp && tn && sd_tensor_same_shape(tc, td) && sd_tensor_same_shape(tx, tc) &&
             sd_tensor_same_shape(tx, tp) && sd_tensor_same_shape(tx, tn);
    CHECK_MSG(ok, "DualCFGGuider vs CFGGuider: every run gives a latent of the same shape");
    /* sigmas [sigma0] run no step: the noised input, not the latent itself */
    CHECK_MSG(ok && !bit_equal(tx, samples(f->latent)), "one sigma gives the noised input x");
    if (ok) {
        const float *xv = tx->data, *pv = tp->data, *nv = tn->data;
        double ss = 0, xmax = 0;
        int64_t n = sd_tensor_numel(tx);
        for (int64_t i = 0; i < n; i++) {
            double ep = (double)xv[i] - pv[i], en = (double)xv[i] - nv[i];
            ss += ep * ep + en * en;
            xmax = fmax(xmax, fabs(xv[i]));
        }
        double rms = sqrt(ss / (2.0 * (double)n));
        double rho = 6 * u * sqrt(K * L);
        double bound = sqrt(cfg * cfg + (cfg - 1) * (cfg - 1)) * rho * rms + 4 * u * xmax;
        double md = max_abs_diff(tc, td);
        /* a real difference in the formula is of the order of rms itself */
        CHECK_MSG(rms > 0 && md <= bound,
                  "DualCFGGuider(cond2 = negative) vs CFGGuider: max |diff| %g > bound %g "
                  "(rms(sigma*eps) %g)", md, bound, rms);
        printf("  DualCFGGuider(cond2 = negative) vs CFGGuider, one step: max |diff| %g, bound %g "
               "(rms(sigma*eps) %g)\n", md, bound, rms);
        /* ...and the check can fail: CFG at another scale is far outside it */
        sd_value *g4 = cfg_guider(f, f->neg, cfg - 1, err), *d4[2] = {0};
        CHECK_OK(custom_adv(noise, g4, smp, sig, f->latent, d4, err), err);
        sd_tensor *t4 = samples(d4[0]);
        CHECK_MSG(t4 && sd_tensor_same_shape(t4, tc) && max_abs_diff(t4, tc) > 100 * bound,
                  "CFG %g vs %g: the bound separates a different guidance", cfg, cfg - 1);
        for (int i = 0; i < 2; i++) sd_value_unref(d4[i]);
        sd_value_unref(g4);
    }
    for (int i = 0; i < 2; i++)
        sd_value_unref(x[i]), sd_value_unref(dc[i]), sd_value_unref(dd[i]), sd_value_unref(dp[i]),
            sd_value_unref(dn_[i]);
    sd_value_unref(gd), sd_value_unref(g_neg), sd_value_unref(g5), sd_value_unref(sig0), sd_value_unref(sig);
}

/* KSampler vs SamplerCustomAdvanced vs SamplerCustom, one setting. */
static void equivalence(fixture *f, const char *sampler, const char *sched, int steps, double cfg,
                        double denoise, int64_t seed) {
    sd_error err;
    sd_value *ref = ksampler(f, sampler, sched, steps, cfg, denoise, seed, &err);
    sd_value *smp = select_sampler(sampler, &err), *sig = basic_scheduler(f->model, sched, steps, denoise, &err);
    sd_value *noise = random_noise(seed, &err), *guider = cfg_guider(f, f->neg, cfg, &err);
    sd_value *adv[2] = {0}, *cus[2] = {0};
    CHECK_OK(custom_adv(noise, guider, smp, sig, f->latent, adv, &err), &err);
    const char *n[] = {"model", "add_noise", "noise_seed", "cfg", "positive", "negative",
                       "sampler", "sigmas", "latent_image"};
    sd_value *v[] = {f->model, sd_value_bool(1), sd_value_int(seed), sd_value_float(cfg), f->pos,
                     f->neg, smp, sig, f->latent};
    CHECK_OK(run("SamplerCustom", n, v, 9, cus, &err), &err);
    for (int i = 1; i < 4; i++) sd_value_unref(v[i]);
    CHECK_MSG(bit_equal(samples(ref), samples(adv[0])),
              "SamplerCustomAdvanced = KSampler (%s, %s, %d steps, denoise %g)", sampler, sched, steps, denoise);
    CHECK_MSG(bit_equal(samples(ref), samples(cus[0])),
              "SamplerCustom = KSampler (%s, %s, %d steps, denoise %g)", sampler, sched, steps, denoise);
    CHECK(bit_equal(samples(adv[1]), samples(cus[1])));
    printf("  %s/%s/%d/denoise %g: KSampler = SamplerCustomAdvanced = SamplerCustom %s\n", sampler,
           sched, steps, denoise, bit_equal(samples(ref), samples(adv[0])) ? "(bit-identical)" : "DIFFER");
    for (int i = 0; i < 2; i++) sd_value_unref(adv[i]), sd_value_unref(cus[i]);
    sd_value_unref(ref), sd_value_unref(smp), sd_value_unref(sig), sd_value_unref(noise),
        sd_value_unref(guider);
}

static void test_sampling(fixture *f) {
    sd_error err;
    equivalence(f, "euler", "normal", 3, 5.0, 1.0, 7);
    equivalence(f, "euler_ancestral", "karras", 3, 5.0, 1.0, 8);  /* default noise sampler */
    equivalence(f, "dpmpp_2m_sde", "exponential", 3, 4.0, 1.0, 9); /* Brownian tree */
    equivalence(f, "dpmpp_2m", "simple", 4, 6.0, 0.6, 10);         /* denoise < 1 */
    equivalence(f, "euler_cfg_pp", "normal", 2, 1.0, 1.0, 11);     /* uncond at cfg 1 */

    /* DisableNoise = KSamplerAdvanced(add_noise disable); the sampler noise seed is 0 */
    {
        const char *n[] = {"model", "add_noise", "noise_seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "start_at_step", "end_at_step",
                           "return_with_leftover_noise"};
        sd_value *v[] = {f->model, sd_value_string("disable"), sd_value_int(0), sd_value_int(2),
                         sd_value_float(5.0), sd_value_string("euler_ancestral"), sd_value_string("normal"),
                         f->pos, f->neg, f->latent, sd_value_int(0), sd_value_int(10000), sd_value_string("disable")};
        const int own[] = {0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1};
        sd_value *ref = run1("KSamplerAdvanced", n, v, 13, own, &err);
        sd_value *dn[1];
        CHECK_OK(run("DisableNoise", NULL, NULL, 0, dn, &err), &err);
        sd_value *smp = select_sampler("euler_ancestral", &err), *sig = basic_scheduler(f->model, "normal", 2, 1.0, &err);
        sd_value *g = cfg_guider(f, f->neg, 5.0, &err), *out[2] = {0};
        CHECK_OK(custom_adv(dn[0], g, smp, sig, f->latent, out, &err), &err);
        CHECK_MSG(bit_equal(samples(ref), samples(out[0])), "DisableNoise = KSamplerAdvanced add_noise disable");
        for (int i = 0; i < 2; i++) sd_value_unref(out[i]);
        /* the denoised output is the last step's denoised estimate, in VAE space */
        g_last_preview = (sd_tensor_unref(g_last_preview), NULL);
        sd_value *s1 = select_sampler("euler", &err);
        CHECK_OK(custom_adv(dn[0], g, s1, sig, f->latent, out, &err), &err);
        sd_tensor *d = samples(out[1]);
        CHECK(g_last_preview && d && sd_tensor_numel(d) == sd_tensor_numel(g_last_preview));
        int same = 1;
        for (int64_t i = 0; d && g_last_preview && i < sd_tensor_numel(d); i++)
            same &= ((float *)d->data)[i] == ((float *)g_last_preview->data)[i] / SD_LATENT_SCALE_SD1;
        CHECK_MSG(same, "denoised_output = last denoised / latent scale");
        for (int i = 0; i < 2; i++) sd_value_unref(out[i]);
        /* one sigma: no step, the same latent twice */
        float one = 5.0f;
        sd_value *sig1 = sigmas_of(&one, 1);
        CHECK_OK(custom_adv(dn[0], g, s1, sig1, f->latent, out, &err), &err);
        CHECK(out[0] && out[0] == out[1]);
        for (int i = 0; i < 2; i++) sd_value_unref(out[i]);
        /* no sigmas: the input latent as it is */
        sd_value *sig0 = sigmas_of(NULL, 0);
        CHECK_OK(custom_adv(dn[0], g, s1, sig0, f->latent, out, &err), &err);
        CHECK(bit_equal(samples(out[0]), samples(f->latent)) && out[0] == out[1]);
        for (int i = 0; i < 2; i++) sd_value_unref(out[i]);
        sd_value_unref(sig1), sd_value_unref(sig0), sd_value_unref(s1);
        sd_value_unref(ref), sd_value_unref(dn[0]), sd_value_unref(smp), sd_value_unref(sig), sd_value_unref(g);
    }

    /* CFGGuider at cfg 1 evaluates only the positive: = BasicGuider (the same
     * batch of one, bit for bit); DualCFGGuider with cond2 = negative is plain
     * CFG at cfg_conds (to rounding: dual_vs_cfg) */
    {
        sd_value *smp = select_sampler("euler", &err), *sig = basic_scheduler(f->model, "karras", 2, 1.0, &err);
        sd_value *noise = random_noise(5, &err);
        sd_value *g1 = cfg_guider(f, f->neg, 1.0, &err);
        const char *bn[] = {"model", "conditioning"};
        sd_value *bv[] = {f->model, f->pos};
        const int bo[] = {0, 0};
        sd_value *gb = run1("BasicGuider", bn, bv, 2, bo, &err);
        sd_value *a[2] = {0}, *b[2] = {0};
        CHECK_OK(custom_adv(noise, g1, smp, sig, f->latent, a, &err), &err);
        CHECK_OK(custom_adv(noise, gb, smp, sig, f->latent, b, &err), &err);
        CHECK_MSG(bit_equal(samples(a[0]), samples(b[0])), "CFGGuider cfg 1 = BasicGuider");
        for (int i = 0; i < 2; i++) sd_value_unref(a[i]), sd_value_unref(b[i]);

        dual_vs_cfg(f, noise, smp, gb, &err);
        sd_value *g5 = cfg_guider(f, f->neg, 5.0, &err);

        /* sampler options reach the sampler: eta 0 makes euler_ancestral euler */
        const char *en[] = {"eta", "s_noise"};
        sd_value *ev[] = {sd_value_float(0.0), sd_value_float(1.0)};
        const int eo[] = {1, 1};
        sd_value *anc0 = run1("SamplerEulerAncestral", en, ev, 2, eo, &err);
        CHECK_OK(custom_adv(noise, g5, anc0, sig, f->latent, a, &err), &err);
        CHECK_OK(custom_adv(noise, g5, smp, sig, f->latent, b, &err), &err);
        CHECK_MSG(bit_equal(samples(a[0]), samples(b[0])), "SamplerEulerAncestral eta 0 = euler");
        for (int i = 0; i < 2; i++) sd_value_unref(a[i]), sd_value_unref(b[i]);
        sd_value *ev2[] = {sd_value_float(1.0), sd_value_float(1.0)};
        sd_value *anc1 = run1("SamplerEulerAncestral", en, ev2, 2, eo, &err);
        sd_value *ancs = select_sampler("euler_ancestral", &err);
        CHECK_OK(custom_adv(noise, g5, anc1, sig, f->latent, a, &err), &err);
        CHECK_OK(custom_adv(noise, g5, ancs, sig, f->latent, b, &err), &err);
        CHECK_MSG(bit_equal(samples(a[0]), samples(b[0])), "SamplerEulerAncestral defaults = euler_ancestral");
        for (int i = 0; i < 2; i++) sd_value_unref(a[i]), sd_value_unref(b[i]);

        /* errors name the input */
        sd_value *bogus = sd_value_string("not a sampler");
        CHECK(custom_adv(noise, g5, bogus, sig, f->latent, a, &err) == SD_ERR_INVALID &&
              strcmp(err.input, "sampler") == 0);
        CHECK(custom_adv(noise, bogus, smp, sig, f->latent, a, &err) == SD_ERR_INVALID &&
              strcmp(err.input, "guider") == 0);
        CHECK(custom_adv(bogus, g5, smp, sig, f->latent, a, &err) == SD_ERR_INVALID &&
              strcmp(err.input, "noise") == 0);
        CHECK(custom_adv(noise, g5, smp, bogus, f->latent, a, &err) == SD_ERR_INVALID &&
              strcmp(err.input, "sigmas") == 0);
        sd_value_unref(bogus);
        sd_value_unref(anc0), sd_value_unref(anc1), sd_value_unref(ancs);
        sd_value_unref(g1), sd_value_unref(gb), sd_value_unref(g5);
        sd_value_unref(smp), sd_value_unref(sig), sd_value_unref(noise);
    }
}

/* a CONDITIONING of one random entry [1, 77, dim] */
static sd_value *random_cond(uint64_t seed, int dim) {
    int64_t cs[3] = {1, 77, dim};
    sd_tensor *c = sd_noise_prepare(seed, 3, cs, NULL, 0);
    sd_value *d = sd_value_dict(), *l = sd_value_list();
    sd_value_dict_set(d, "cond", sd_value_tensor(c));
    sd_value_list_append(l, d);
    sd_tensor_unref(c);
    return l;
}

int main(void) {
    nt_tiny_sd1 t;
    nt_tiny_sd1_init(&t, "nodes_custom_sampling");
    g_env = &t.env;
    sd_error err;
    sd_error_clear(&err);

    fixture f = {0};
    sd_value *name = sd_value_string("tiny.safetensors"), *ck[3] = {0};
    CHECK_OK(run("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &name, 1, ck, &err), &err);
    sd_value_unref(name);
    f.model = ck[0];
    if (f.model) {
        test_schedules(f.model);
        test_ays();
        test_sigma_ops();
        f.pos = random_cond(1, t.cfg.context_dim);
        f.neg = random_cond(2, t.cfg.context_dim);
        const char *ln[] = {"width", "height", "batch_size"};
        sd_value *lv[] = {sd_value_int(64), sd_value_int(64), sd_value_int(2)};
        const int lo[] = {1, 1, 1};
        f.latent = run1("EmptyLatentImage", ln, lv, 3, lo, &err);
        test_sampling(&f);
    }
    sd_value_unref(f.pos), sd_value_unref(f.neg), sd_value_unref(f.latent);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_tensor_unref(g_last_preview);
    nt_tiny_sd1_free(&t);
    return sd_test_finish();
}
