/* test_samplers.c - sampler registry, run contract (errors, cancel, progress,
 * noise override, determinism), guider cfg rules and Brownian tree
 * properties. Numbers against ComfyUI are in test_golden_samplers.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "models/sampling/brownian.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/sampler.h"
#include "models/sampling/schedules.h"
#include "models/sampling/sampler_internal.h" /* smp_expm1f */

/* A smooth toy model: x0 = 0.3 * x / sqrt(1 + sigma^2) + 0.1 * cond-dependent offset. */
typedef struct toy {
    int calls;
    int fail_at; /* 1-based call number that fails, 0 = never */
} toy;

static sd_status toy_model(void *ud, const sd_tensor *x, float sigma, const int *conds, int n,
                           sd_tensor **outs, sd_error *err)
{
    toy *t = ud;
    for (int j = 0; j < n; j++) {
        t->calls++;
        if (t->fail_at && t->calls == t->fail_at)
            return sd_error_set(err, SD_ERR_IO, "toy model failed");
        const float *xv = x->data;
        float *ov = outs[j]->data;
        float sc = 0.3f / sqrtf(1.0f + sigma * sigma);
        for (int64_t k = 0; k < sd_tensor_numel(x); k++)
            ov[k] = sc * xv[k] + (conds[j] == SD_COND_POSITIVE ? 0.1f : -0.1f) * (float)(k % 7);
    }
    return SD_OK;
}

static const float k_sigmas[] = {14.614642f, 6.0f, 2.5f, 1.0f, 0.4f, 0.0291675f, 0.0f};
#define N_SIG ((int)(sizeof k_sigmas / sizeof k_sigmas[0]))

static sd_tensor *start_latent(void)
{
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, 4, 4, 4);
    float *v = x->data;
    for (int i = 0; i < 64; i++)
        v[i] = 14.6f * sinf(0.7f * (float)i + 0.3f);
    return x;
}

typedef struct prog {
    int calls, max_step, bad;
} prog;

static void on_prog(void *ud, int step, int total, const sd_tensor *x, const sd_tensor *den)
{
    prog *p = ud;
    p->calls++;
    if (step > p->max_step)
        p->max_step = step;
    if (!x || !den || total != N_SIG - 1)
        p->bad++;
}

static int cancel_after(void *ud)
{
    int *n = ud;
    return --(*n) < 0;
}

static sd_status zero_noise(void *ud, float s, float sn, float *out, int64_t n, sd_error *err)
{
    (void)ud, (void)s, (void)sn, (void)err;
    memset(out, 0, (size_t)n * sizeof(float));
    return SD_OK;
}

static sd_status run(const char *name, double cfg, uint64_t seed, const sd_noise_source *noise,
                     sd_tensor *x, toy *t, sd_guider *g, prog *pg, sd_error *err)
{
    sd_guider_init(g, toy_model, t, cfg);
    sd_denoiser d = sd_guider_denoiser(g);
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    p.seed = seed;
    p.noise = noise;
    if (pg) {
        p.progress = on_prog;
        p.progress_ud = pg;
    }
    sd_status st = sd_sampler_run(sd_sampler_find(name), &d, k_sigmas, N_SIG, x, &p, err);
    sd_guider_release(g);
    return st;
}

static void test_registry(void)
{
    size_t n = 0;
    const char *const *names = sd_sampler_names(&n);
    CHECK(n == 44);
    size_t i = 0;
    for (; names[i]; i++) {
        const sd_sampler *s = sd_sampler_find(names[i]);
        CHECK_MSG(s && strcmp(s->name, names[i]) == 0, "%s", names[i]);
        int cfgpp = strstr(names[i], "cfg_pp") != NULL;
        CHECK_MSG(cfgpp == sd_sampler_needs_uncond(s), "%s uncond flag", names[i]);
        /* the schedules module's copy of the discard rule agrees */
        CHECK_MSG(sd_sampler_discards_penultimate_sigma(s) ==
                      (sd_sampler_discards_penultimate(names[i]) != 0),
                  "%s discard rule", names[i]);
        int sde = strstr(names[i], "dpmpp") && strstr(names[i], "sde");
        CHECK_MSG(sde == (s->noise == SD_SAMPLER_NOISE_BROWNIAN), "%s noise kind", names[i]);
    }
    CHECK(i == n);
    CHECK(sd_sampler_find("Euler") == NULL);
    CHECK(sd_sampler_find("") == NULL);
    CHECK(sd_sampler_find(NULL) == NULL);
    CHECK(sd_sampler_discards_penultimate_sigma(sd_sampler_find("uni_pc_bh2")));
    CHECK(!sd_sampler_discards_penultimate_sigma(sd_sampler_find("euler")));
    CHECK(!(sd_sampler_find("ddim")->flags & SD_SAMPLER_KDIFFUSION));
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    CHECK(isnan(p.eta) && isnan(p.s_noise) && p.noise == NULL && p.seed == 0);
}

static void test_all_run(void)
{
    size_t n = 0;
    const char *const *names = sd_sampler_names(&n);
    for (size_t i = 0; i < n; i++) {
        sd_tensor *x = start_latent();
        toy t = {0};
        sd_guider g;
        prog pg = {0, -1, 0};
        sd_error err;
        CHECK_OK(run(names[i], 5.0, 7, NULL, x, &t, &g, &pg, &err), &err);
        int finite = 1;
        for (int k = 0; k < 64; k++)
            finite &= isfinite(((float *)x->data)[k]) != 0;
        CHECK_MSG(finite, "%s: non-finite output", names[i]);
        int adaptive = strcmp(names[i], "dpm_adaptive") == 0; /* its own step count */
        CHECK_MSG(pg.calls >= 1 && pg.bad == 0 && (adaptive || pg.max_step <= N_SIG - 1),
                  "%s progress %d/%d",
                  names[i], pg.calls, pg.bad);
        CHECK_MSG(g.model_calls == 2 * g.guider_calls, "%s: cfg 5 evaluates both conds", names[i]);

        /* same seed: identical; the stochastic ones change with the seed */
        sd_tensor *y = start_latent(), *z = start_latent();
        CHECK_OK(run(names[i], 5.0, 7, NULL, y, &t, &g, NULL, &err), &err);
        CHECK_OK(run(names[i], 5.0, 8, NULL, z, &t, &g, NULL, &err), &err);
        CHECK_MSG(memcmp(x->data, y->data, 64 * sizeof(float)) == 0, "%s not deterministic",
                  names[i]);
        const sd_sampler *s = sd_sampler_find(names[i]);
        int stochastic = s->noise == SD_SAMPLER_NOISE_BROWNIAN ||
                         (s->noise == SD_SAMPLER_NOISE_DEFAULT &&
                          strcmp(names[i], "res_multistep") && strcmp(names[i], "res_multistep_cfg_pp") &&
                          strcmp(names[i], "euler_cfg_pp") && strcmp(names[i], "exp_heun_2_x0") &&
                          strcmp(names[i], "dpm_fast") && strcmp(names[i], "dpm_adaptive"));
        int differs = memcmp(x->data, z->data, 64 * sizeof(float)) != 0;
        CHECK_MSG(differs == stochastic, "%s: seed dependence %d, expected %d", names[i], differs,
                  stochastic);
        /* forcing zero noise makes a stochastic sampler seed-independent */
        if (stochastic) {
            sd_noise_source zn = {zero_noise, NULL};
            sd_tensor *a = start_latent(), *b = start_latent();
            CHECK_OK(run(names[i], 5.0, 1, &zn, a, &t, &g, NULL, &err), &err);
            CHECK_OK(run(names[i], 5.0, 2, &zn, b, &t, &g, NULL, &err), &err);
            CHECK_MSG(memcmp(a->data, b->data, 64 * sizeof(float)) == 0, "%s zero noise", names[i]);
            sd_tensor_unref(a);
            sd_tensor_unref(b);
        }
        sd_tensor_unref(x);
        sd_tensor_unref(y);
        sd_tensor_unref(z);

        /* short schedules (one and two steps, ending at 0 or not) stay finite */
        static const float short_s[4][3] = {{3.0f, 0.0f, 0}, {3.0f, 0.5f, 0}, {9.0f, 1.0f, 0.0f},
                                             {9.0f, 1.0f, 0.2f}};
        static const int short_n[4] = {2, 2, 3, 3};
        for (int q = 0; q < 4; q++) {
            sd_tensor *w = start_latent();
            sd_guider_init(&g, toy_model, &t, 5.0);
            sd_denoiser d = sd_guider_denoiser(&g);
            sd_sampler_params p;
            sd_sampler_params_init(&p);
            CHECK_OK(sd_sampler_run(s, &d, short_s[q], short_n[q], w, &p, &err), &err);
            int fin = 1;
            for (int k = 0; k < 64; k++)
                fin &= isfinite(((float *)w->data)[k]) != 0;
            CHECK_MSG(fin, "%s: non-finite on short schedule %d", names[i], q);
            sd_guider_release(&g);
            sd_tensor_unref(w);
        }
    }
}

static void test_cfg_rules(void)
{
    sd_error err;
    toy t = {0};
    sd_guider g;
    sd_tensor *x = start_latent();
    CHECK_OK(run("euler", 1.0, 0, NULL, x, &t, &g, NULL, &err), &err);
    CHECK(g.guider_calls == N_SIG - 1 && g.model_calls == g.guider_calls); /* cfg1 shortcut */
    sd_tensor_unref(x);
    x = start_latent();
    CHECK_OK(run("euler_cfg_pp", 1.0, 0, NULL, x, &t, &g, NULL, &err), &err);
    CHECK(g.model_calls == 2 * g.guider_calls); /* disable_cfg1_optimization */
    sd_tensor_unref(x);
    CHECK(sd_cfg_is_one(1.0) && sd_cfg_is_one(1.0 + 1e-12) && !sd_cfg_is_one(1.0001));
    float c[3] = {1.0f, -2.0f, 0.5f}, u[3] = {0.25f, 1.0f, 0.5f}, o[3];
    sd_cfg_combine(c, u, 2.0, o, 3);
    CHECK(o[0] == 1.75f && o[1] == -5.0f && o[2] == 0.5f);
}

static void test_errors(void)
{
    sd_error err;
    toy t = {0};
    sd_guider g;
    sd_tensor *x = start_latent();
    float before[64];
    memcpy(before, x->data, sizeof before);

    /* one sigma: nothing to do, no model call */
    sd_guider_init(&g, toy_model, &t, 3.0);
    sd_denoiser d = sd_guider_denoiser(&g);
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    CHECK_OK(sd_sampler_run(sd_sampler_find("heun"), &d, k_sigmas, 1, x, &p, &err), &err);
    CHECK(g.guider_calls == 0 && memcmp(before, x->data, sizeof before) == 0);

    float bad[3] = {3.0f, -1.0f, 0.0f};
    CHECK(sd_sampler_run(sd_sampler_find("heun"), &d, bad, 3, x, &p, &err) == SD_ERR_INVALID);
    CHECK(strstr(err.msg, "heun") != NULL);
    float nan_s[2] = {NAN, 0.0f};
    CHECK(sd_sampler_run(sd_sampler_find("euler"), &d, nan_s, 2, x, &p, &err) == SD_ERR_INVALID);
    CHECK(sd_sampler_run(NULL, &d, k_sigmas, N_SIG, x, &p, &err) == SD_ERR_INVALID);
    sd_tensor *xi = sd_tensor_new4(SD_I32, 1, 4, 0, 0, 0);
    CHECK(sd_sampler_run(sd_sampler_find("euler"), &d, k_sigmas, N_SIG, xi, &p, &err) ==
          SD_ERR_INVALID);
    sd_tensor_unref(xi);
    float zeros[3] = {0, 0, 0};
    CHECK(sd_sampler_run(sd_sampler_find("dpmpp_2m_sde"), &d, zeros, 3, x, &p, &err) ==
          SD_ERR_INVALID);
    CHECK(sd_sampler_run(sd_sampler_find("dpm_fast"), &d, zeros, 3, x, &p, &err) == SD_ERR_INVALID);

    /* the model's error comes back with the sampler named */
    t.calls = 0;
    t.fail_at = 3;
    CHECK(sd_sampler_run(sd_sampler_find("dpmpp_2m"), &d, k_sigmas, N_SIG, x, &p, &err) == SD_ERR_IO);
    CHECK(strstr(err.msg, "dpmpp_2m") && strstr(err.msg, "toy model failed"));
    t.fail_at = 0;

    /* cancellation between model evaluations */
    int budget = 2;
    sd_guider_release(&g);
    sd_guider_init(&g, toy_model, &t, 3.0);
    p.cancel = cancel_after;
    p.cancel_ud = &budget;
    CHECK(sd_sampler_run(sd_sampler_find("uni_pc"), &d, k_sigmas, N_SIG, x, &p, &err) ==
          SD_ERR_CANCELLED);
    CHECK(g.guider_calls == 2); /* the third evaluation is refused */
    sd_guider_release(&g);
    sd_tensor_unref(x);
}

static void test_brownian(void)
{
    const int64_t shape[4] = {1, 4, 32, 32};
    const int64_t n = 4096;
    sd_brownian *b = NULL;
    sd_error err;
    CHECK_OK(sd_brownian_new(42, 0.0291675f, 14.614642f, 4, shape, &b, &err), &err);
    if (!b)
        return;
    float *w1 = malloc(n * sizeof(float)), *w2 = malloc(n * sizeof(float));
    float *w3 = malloc(n * sizeof(float)), *w4 = malloc(n * sizeof(float));
    /* additivity over a split point, and query-order independence */
    CHECK_OK(sd_brownian_increment(b, 0.5, 3.25, w1, n, &err), &err);
    CHECK_OK(sd_brownian_increment(b, 3.25, 9.0, w2, n, &err), &err);
    CHECK_OK(sd_brownian_increment(b, 0.5, 9.0, w3, n, &err), &err);
    double maxd = 0.0;
    for (int64_t i = 0; i < n; i++)
        maxd = fmax(maxd, fabs((double)w1[i] + w2[i] - w3[i]));
    CHECK_MSG(maxd < 1e-4, "additivity %g", maxd);
    CHECK_OK(sd_brownian_increment(b, 0.5, 3.25, w4, n, &err), &err);
    CHECK(memcmp(w1, w4, n * sizeof(float)) == 0);
    /* the same seed gives the same tree, with or without worker threads */
    sd_brownian *b2 = NULL;
    CHECK_OK(sd_brownian_new(42, 0.0291675f, 14.614642f, 4, shape, &b2, &err), &err);
    CHECK_OK(sd_brownian_increment(b2, 0.5, 3.25, w4, n, &err), &err);
    CHECK(memcmp(w1, w4, n * sizeof(float)) == 0);
    sd_brownian_free(b2);
    /* its worker count follows SDFLOW_THREADS like the backends', so a bad
     * value is the same error here */
    const char *env = getenv("SDFLOW_THREADS");
    char *saved = env ? strdup(env) : NULL;
    setenv("SDFLOW_THREADS", "two", 1);
    b2 = NULL;
    sd_error_clear(&err);
    CHECK(sd_brownian_new(42, 0.0291675f, 14.614642f, 4, shape, &b2, &err) == SD_ERR_INVALID &&
          !b2 && strstr(err.msg, "SDFLOW_THREADS=two"));
    if (saved)
        setenv("SDFLOW_THREADS", saved, 1);
    else
        unsetenv("SDFLOW_THREADS");
    free(saved);
    sd_brownian *bs = NULL, *bp = NULL;
    CHECK_OK(sd_brownian_new(7, 0.03f, 14.6f, 4, shape, &bs, &err), &err);
    CHECK_OK(sd_brownian_new(7, 0.03f, 14.6f, 4, shape, &bp, &err), &err);
    sd_brownian_set_threads(bs, 1);
    sd_brownian_set_threads(bp, 4);
    static const double qs[6][2] = {{0.03, 14.6}, {0.7, 0.9}, {0.123456, 0.123457},
                                    {2.0, 11.0}, {0.05, 0.0500011}, {1.5, 1.7}};
    int same_par = 1;
    for (int q = 0; q < 6; q++) {
        CHECK_OK(sd_brownian_increment(bs, qs[q][0], qs[q][1], w2, n, &err), &err);
        CHECK_OK(sd_brownian_increment(bp, qs[q][0], qs[q][1], w3, n, &err), &err);
        same_par &= memcmp(w2, w3, n * sizeof(float)) == 0;
    }
    CHECK_MSG(same_par, "threaded prefetch changed Brownian increments");
    sd_brownian_free(bs);
    sd_brownian_free(bp);
    /* increments scale like sqrt(dt): unit variance after normalising */
    CHECK_OK(sd_brownian_noise(b, 2.0f, 1.5f, w1, n, &err), &err);
    double m = 0.0, v = 0.0;
    for (int64_t i = 0; i < n; i++)
        m += w1[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++)
        v += (w1[i] - m) * (w1[i] - m);
    v /= (double)(n - 1);
    CHECK_MSG(fabs(m) < 0.1 && fabs(v - 1.0) < 0.1, "noise mean %g var %g", m, v);
    /* noise(s, sn) = -W(sn, s) / sqrt(s - sn) */
    CHECK_OK(sd_brownian_increment(b, 1.5, 2.0, w2, n, &err), &err);
    float den = sqrtf(fabsf(1.5f - 2.0f));
    int same = 1;
    for (int64_t i = 0; i < n; i++)
        same &= w1[i] == -w2[i] / den;
    CHECK(same);
    /* empty interval and clamping outside [t0, t1] */
    CHECK_OK(sd_brownian_increment(b, 1.0, 1.0, w1, n, &err), &err);
    CHECK(w1[0] == 0.0f && w1[n - 1] == 0.0f);
    CHECK_OK(sd_brownian_increment(b, 0.0, 100.0, w1, n, &err), &err);
    CHECK_OK(sd_brownian_increment(b, 0.0291675, 14.614642, w2, n, &err), &err);
    CHECK(memcmp(w1, w2, n * sizeof(float)) == 0);
    CHECK(sd_brownian_increment(b, 2.0, 1.0, w1, n, &err) == SD_ERR_INVALID);
    CHECK(sd_brownian_increment(b, 1.0, 2.0, w1, n - 1, &err) == SD_ERR_INVALID);
    sd_brownian *bad = NULL;
    CHECK(sd_brownian_new(1, 2.0f, 1.0f, 4, shape, &bad, &err) == SD_ERR_INVALID && !bad);
    sd_brownian_free(b);
    free(w1);
    free(w2);
    free(w3);
    free(w4);

    /* SeedSequence: spawned children differ from each other and the parent */
    uint32_t a[4], c[4], d[4];
    uint64_t k0[2] = {0, 1}, k1[2] = {1, 1};
    sd_seed_sequence_state(42, NULL, 0, 24, a, 4);
    sd_seed_sequence_state(42, k0, 2, 24, c, 4);
    sd_seed_sequence_state(42, k1, 2, 24, d, 4);
    CHECK(memcmp(a, c, sizeof a) != 0 && memcmp(c, d, sizeof c) != 0);
    uint32_t big[4];
    sd_seed_sequence_state(42ull | (1ull << 40), NULL, 0, 24, big, 4);
    CHECK(memcmp(a, big, sizeof a) != 0); /* high words of a 64-bit seed matter */
}

static void test_inpaint(void)
{
    sd_error err;
    toy t = {0};
    sd_guider g;
    float latent[64], noise[64], ones[64], zeros[64];
    for (int i = 0; i < 64; i++) {
        latent[i] = 0.5f * cosf((float)i);
        noise[i] = sinf(1.3f * (float)i);
        ones[i] = 1.0f;
        zeros[i] = 0.0f;
    }
    const sd_sampler *s = sd_sampler_find("euler");
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    /* mask 1 everywhere: exactly the unmasked run */
    sd_tensor *a = start_latent(), *b = start_latent();
    sd_guider_init(&g, toy_model, &t, 4.0);
    sd_denoiser d = sd_guider_denoiser(&g);
    CHECK_OK(sd_sampler_run(s, &d, k_sigmas, N_SIG, a, &p, &err), &err);
    sd_inpaint ip;
    sd_inpaint_init(&ip, d, latent, noise, ones, 64);
    sd_denoiser di = sd_inpaint_denoiser(&ip);
    CHECK_OK(sd_sampler_run(s, &di, k_sigmas, N_SIG, b, &p, &err), &err);
    CHECK(memcmp(a->data, b->data, 64 * sizeof(float)) == 0);
    sd_inpaint_release(&ip);
    /* mask 0 everywhere: the latent comes back */
    sd_tensor_unref(b);
    b = start_latent();
    sd_inpaint_init(&ip, d, latent, noise, zeros, 64);
    di = sd_inpaint_denoiser(&ip);
    CHECK_OK(sd_sampler_run(s, &di, k_sigmas, N_SIG, b, &p, &err), &err);
    double w = 0.0;
    for (int i = 0; i < 64; i++)
        w = fmax(w, fabs(((float *)b->data)[i] - latent[i]));
    CHECK_MSG(w < 1e-5, "kept region drifts by %g", w);
    sd_inpaint_release(&ip);
    /* wrong size is an error */
    sd_inpaint_init(&ip, d, latent, noise, zeros, 32);
    di = sd_inpaint_denoiser(&ip);
    CHECK(sd_sampler_run(s, &di, k_sigmas, N_SIG, b, &p, &err) == SD_ERR_INVALID);
    sd_inpaint_release(&ip);
    sd_guider_release(&g);
    sd_tensor_unref(a);
    sd_tensor_unref(b);
}

static void test_guider_sample(void)
{
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_model_sampling_init(ms, SD_PRED_EPS);
    sd_error err;
    toy t = {0};
    sd_guider g;
    sd_guider_init(&g, toy_model, &t, 6.0);
    sd_tensor *noise = start_latent(), *lat = start_latent(), *ones = start_latent();
    sd_tensor *zeros = sd_tensor_new4(SD_F32, 4, 1, 4, 4, 4);
    for (int i = 0; i < 64; i++) {
        ((float *)noise->data)[i] = cosf(0.9f * (float)i);
        ((float *)lat->data)[i] = 0.2f * sinf((float)i);
        ((float *)ones->data)[i] = 1.0f;
    }
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    p.seed = 5;
    sd_tensor *a = NULL, *b = NULL;
    /* no sigmas: the latent comes back */
    CHECK_OK(sd_guider_sample(&g, ms, sd_sampler_find("euler"), k_sigmas, 0, noise, lat, NULL, &p,
                              &a, &err), &err);
    CHECK(a && memcmp(a->data, lat->data, 64 * sizeof(float)) == 0);
    sd_tensor_unref(a);
    /* an all-ones mask changes nothing (sa_solver also exercises percent_to_sigma) */
    const char *names[3] = {"sa_solver", "ddim", "dpmpp_2m_sde"};
    for (int k = 0; k < 3; k++) {
        a = b = NULL;
        const sd_sampler *s = sd_sampler_find(names[k]);
        CHECK_OK(sd_guider_sample(&g, ms, s, k_sigmas, N_SIG, noise, lat, NULL, &p, &a, &err), &err);
        CHECK_OK(sd_guider_sample(&g, ms, s, k_sigmas, N_SIG, noise, lat, ones, &p, &b, &err), &err);
        CHECK_MSG(a && b && memcmp(a->data, b->data, 64 * sizeof(float)) == 0, "%s mask 1", names[k]);
        sd_tensor_unref(b);
        /* an all-zero mask keeps the latent */
        b = NULL;
        CHECK_OK(sd_guider_sample(&g, ms, s, k_sigmas, N_SIG, noise, lat, zeros, &p, &b, &err), &err);
        double w = 0.0;
        for (int i = 0; b && i < 64; i++)
            w = fmax(w, fabs(((float *)b->data)[i] - ((float *)lat->data)[i]));
        CHECK_MSG(b && w < 1e-5, "%s mask 0 drift %g", names[k], w);
        sd_tensor_unref(a);
        sd_tensor_unref(b);
    }
    a = NULL;
    CHECK(sd_guider_sample(&g, ms, sd_sampler_find("euler"), k_sigmas, N_SIG, noise, zeros, NULL,
                           &p, &a, &err) == SD_OK);
    sd_tensor_unref(a);
    sd_tensor *small = sd_tensor_new4(SD_F32, 1, 3, 0, 0, 0);
    a = NULL;
    CHECK(sd_guider_sample(&g, ms, sd_sampler_find("euler"), k_sigmas, N_SIG, noise, small, NULL,
                           &p, &a, &err) == SD_ERR_INVALID && a == NULL);
    sd_tensor_unref(small);
    sd_guider_release(&g);
    sd_tensor_unref(noise);
    sd_tensor_unref(lat);
    sd_tensor_unref(ones);
    sd_tensor_unref(zeros);
    free(ms);
}

/* Sleef's expm1f is a 1-ulp function: stay within 1 ulp of the double result. */
static void test_expm1(void)
{
    int bad = 0;
    for (int i = -40000; i <= 40000; i++) {
        float a = (float)i * 5e-4f;
        double ref = expm1((double)a);
        float got = smp_expm1f(a);
        double ulp = fabs(ref) > 0 ? fabs(nextafterf((float)ref, INFINITY) - (float)ref) : 1e-45;
        if (fabs((double)got - ref) > 1.0 * ulp)
            bad++;
    }
    CHECK_MSG(bad == 0, "%d expm1f values off by more than 1 ulp", bad);
    CHECK(smp_expm1f(0.0f) == 0.0f && signbit(smp_expm1f(-0.0f)));
    CHECK(smp_expm1f(-30.0f) == -1.0f && isinf(smp_expm1f(100.0f)) && isnan(smp_expm1f(NAN)));
}

int main(void)
{
    test_expm1();
    test_registry();
    test_cfg_rules();
    test_errors();
    test_brownian();
    test_inpaint();
    test_guider_sample();
    test_all_run();
    return sd_test_finish();
}
