/* test_golden_schedules.c - ModelSamplingDiscrete and every scheduler
 * against ComfyUI's own numbers.
 *
 * Two sources, both iterated from their manifests (no case names here):
 *  1. manifest_math.json "schedules": model tables (betas, alphas_cumprod,
 *     sigmas, log_sigmas, sigma_min/max), timestep / sigma(t) /
 *     percent_to_sigma probes, every "cases" schedule, every "ksampler_cases"
 *     entry (denoise + discard-penultimate rules) and the non-finite cases;
 *     tolerances from its "tolerance" block (default rtol 2e-6 atol 1e-7,
 *     model tables rtol 1e-7, timesteps exact).
 *  2. manifest.json cases of component "sampling": every tensor listed, with
 *     its per-tensor tolerance.
 * The worst error of each family is printed.
 */
#include "testutil.h"
#include "formats/safetensors.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/schedules.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct family {
    const char *name;
    int checked;
    long values, not_exact;
    double worst_abs, worst_rel;
} family;

static void fam_print(const family *f)
{
    printf("%-26s %4d tensors, %5ld values, %3ld not bit-exact, worst abs err %.3g, "
           "worst rel err %.3g\n", f->name, f->checked, f->values, f->not_exact,
           f->worst_abs, f->worst_rel);
}

/* |got - exp| <= atol + rtol*|exp| elementwise; NaN must match NaN. */
static void cmp(family *fam, const char *what, const float *got, int n_got,
                const float *exp, int n_exp, double atol, double rtol)
{
    fam->checked++;
    CHECK_MSG(n_got == n_exp, "%s: length %d, expected %d", what, n_got, n_exp);
    int n = n_got < n_exp ? n_got : n_exp, bad = 0;
    for (int i = 0; i < n; i++) {
        fam->values++;
        if (memcmp(&got[i], &exp[i], sizeof got[i]) != 0 && !(isnan(got[i]) && isnan(exp[i])))
            fam->not_exact++;
        if (isnan(exp[i]) || isnan(got[i])) {
            if (isnan(exp[i]) != isnan(got[i]) && bad++ < 3)
                fprintf(stderr, "%s[%d]: got %.9g expected %.9g\n", what, i, got[i], exp[i]);
            continue;
        }
        double d = fabs((double)got[i] - (double)exp[i]);
        double rel = exp[i] != 0 ? d / fabs((double)exp[i]) : d;
        if (d > fam->worst_abs) fam->worst_abs = d;
        if (rel > fam->worst_rel) fam->worst_rel = rel;
        if (d > atol + rtol * fabs((double)exp[i]) && bad++ < 3)
            fprintf(stderr, "%s[%d]: got %.9g expected %.9g\n", what, i, got[i], exp[i]);
    }
    CHECK_MSG(bad == 0, "%s: %d values out of tolerance", what, bad);
}

/* Parses "rtol 2e-6, atol 1e-7" style strings from the manifest. */
static void parse_tol(const cJSON *s, double *atol, double *rtol)
{
    if (!cJSON_IsString(s))
        return;
    const char *p = strstr(s->valuestring, "rtol");
    if (p) *rtol = atof(p + 4);
    p = strstr(s->valuestring, "atol");
    if (p) *atol = atof(p + 4);
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* Stored tensor as float/double arrays (converted copies). */
static sd_tensor *get_f32(sd_st_file *f, const char *name)
{
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(f, name, &err);
    CHECK_MSG(t != NULL, "%s: %s", name, err.msg);
    return t;
}

/* F64 tensor copied out (the stored bytes need not be 8-byte aligned).
 * Caller frees. */
static double *get_f64(sd_st_file *f, const char *name, int64_t *n)
{
    sd_error err;
    sd_tensor *t = sd_st_tensor(f, name, &err);
    CHECK_MSG(t && t->dtype == SD_F64, "%s: missing or not F64", name);
    if (!t || t->dtype != SD_F64) {
        sd_tensor_unref(t);
        return NULL;
    }
    *n = sd_tensor_numel(t);
    double *p = malloc(t->nbytes ? t->nbytes : 1);
    if (p)
        memcpy(p, t->data, t->nbytes);
    sd_tensor_unref(t);
    return p;
}

/* ---- manifest_math.json "schedules" ----------------------------------------- */

static void run_math(const cJSON *sched, sd_st_file *f, const sd_model_sampling *ms)
{
    double atol = 1e-7, rtol = 2e-6, m_atol = 0, m_rtol = 1e-7;
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(sched, "tolerance");
    parse_tol(cJSON_GetObjectItemCaseSensitive(tol, "default"), &atol, &rtol);
    parse_tol(cJSON_GetObjectItemCaseSensitive(tol, "model_sigmas"), &m_atol, &m_rtol);

    /* Model tables. */
    family fm = {"model tables"};
    sd_tensor *t = get_f32(f, "model/sigmas");
    if (t) cmp(&fm, "model/sigmas", ms->sigmas, SD_MS_TIMESTEPS, sd_tensor_f32(t),
               (int)sd_tensor_numel(t), m_atol, m_rtol);
    sd_tensor_unref(t);
    t = get_f32(f, "model/log_sigmas");
    if (t) cmp(&fm, "model/log_sigmas", ms->log_sigmas, SD_MS_TIMESTEPS, sd_tensor_f32(t),
               (int)sd_tensor_numel(t), m_atol, m_rtol);
    sd_tensor_unref(t);
    t = get_f32(f, "model/sigma_min");
    if (t) cmp(&fm, "model/sigma_min", &ms->sigma_min, 1, sd_tensor_f32(t), 1, m_atol, m_rtol);
    sd_tensor_unref(t);
    t = get_f32(f, "model/sigma_max");
    if (t) cmp(&fm, "model/sigma_max", &ms->sigma_max, 1, sd_tensor_f32(t), 1, m_atol, m_rtol);
    sd_tensor_unref(t);
    int64_t n = 0;
    double *b = get_f64(f, "model/betas_f64", &n);
    int exact_b = 0, exact_ac = 0;
    for (int64_t i = 0; b && i < n && i < SD_MS_TIMESTEPS; i++) {
        exact_b += ms->betas[i] == b[i];
        CHECK_MSG(fabs(ms->betas[i] - b[i]) <= 1e-15 * b[i], "betas[%ld]", (long)i);
    }
    double *ac = get_f64(f, "model/alphas_cumprod_f64", &n);
    for (int64_t i = 0; ac && i < n && i < SD_MS_TIMESTEPS; i++) {
        exact_ac += ms->alphas_cumprod[i] == ac[i];
        CHECK_MSG(fabs(ms->alphas_cumprod[i] - ac[i]) <= 1e-14 * ac[i], "alphas_cumprod[%ld]", (long)i);
    }
    free(b);
    free(ac);
    printf("float64 betas bit-exact %d/1000, alphas_cumprod bit-exact %d/1000\n", exact_b, exact_ac);
    fam_print(&fm);

    /* Probes: timestep(sigma) exact, sigma(t), percent_to_sigma. */
    family fp = {"timestep/sigma(t)/percent"};
    sd_error err;
    sd_tensor *sin = get_f32(f, "timestep/sigma_in");
    sd_tensor *tout = sd_st_tensor(f, "timestep/t_out", &err);
    CHECK(tout && tout->dtype == SD_I64);
    if (sin && tout && tout->dtype == SD_I64) {
        const int64_t *tv = tout->data;
        for (int64_t i = 0; i < sd_tensor_numel(sin); i++) {
            int got = sd_ms_timestep_index(ms, sd_tensor_f32(sin)[i]);
            CHECK_MSG(got == tv[i], "timestep(%.9g) = %d, expected %ld",
                      sd_tensor_f32(sin)[i], got, (long)tv[i]);
        }
        fp.checked++;
    }
    sd_tensor_unref(sin);
    sd_tensor_unref(tout);
    sd_tensor *tin = get_f32(f, "sigma_of_t/t_in");
    sd_tensor *sout = get_f32(f, "sigma_of_t/sigma_out");
    if (tin && sout) {
        int m = (int)sd_tensor_numel(tin);
        float *got = malloc((size_t)m * sizeof *got);
        for (int i = 0; i < m; i++)
            got[i] = sd_ms_sigma(ms, sd_tensor_f32(tin)[i]);
        cmp(&fp, "sigma_of_t", got, m, sd_tensor_f32(sout), (int)sd_tensor_numel(sout), atol, rtol);
        free(got);
    }
    sd_tensor_unref(tin);
    sd_tensor_unref(sout);
    int64_t np = 0, ns = 0;
    double *pin = get_f64(f, "percent_to_sigma/percent_in_f64", &np);
    double *pout = get_f64(f, "percent_to_sigma/sigma_out_f64", &ns);
    if (pin && pout && np == ns) {
        float *got = malloc((size_t)np * sizeof *got), *exp = malloc((size_t)np * sizeof *exp);
        for (int64_t i = 0; i < np; i++) {
            got[i] = (float)sd_ms_percent_to_sigma(ms, pin[i]);
            exp[i] = (float)pout[i];
        }
        cmp(&fp, "percent_to_sigma", got, (int)np, exp, (int)np, atol, rtol);
        free(got);
        free(exp);
    }
    free(pin);
    free(pout);
    fam_print(&fp);

    /* Plain schedules. */
    family fs = {"calculate_sigmas"};
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(sched, "cases")) {
        const char *id = jstr(c, "id"), *name = jstr(c, "scheduler");
        int steps = (int)jnum(c, "steps", 0), len = (int)jnum(c, "length", -1);
        float *out = malloc((size_t)sd_schedule_capacity(steps) * sizeof *out);
        int got_n = 0;
        CHECK_OK(sd_schedule_sigmas(ms, name, steps, out, &got_n, &err), &err);
        CHECK_MSG(len < 0 || got_n == len, "%s: length %d, manifest says %d", id, got_n, len);
        t = get_f32(f, id);
        if (t)
            cmp(&fs, id, out, got_n, sd_tensor_f32(t), (int)sd_tensor_numel(t), atol, rtol);
        sd_tensor_unref(t);
        free(out);
    }
    fam_print(&fs);

    /* KSampler-level: denoise and discard-penultimate. */
    family fk = {"KSampler sigmas"};
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(sched, "ksampler_cases")) {
        const char *id = jstr(c, "id");
        int steps = (int)jnum(c, "steps", 0), len = (int)jnum(c, "length", -1);
        float *out = NULL;
        int got_n = -1;
        CHECK_OK(sd_ksampler_sigmas(ms, jstr(c, "scheduler"), jstr(c, "sampler"), steps,
                                    jnum(c, "denoise", 1.0), &out, &got_n, &err), &err);
        CHECK_MSG(len < 0 || got_n == len, "%s: length %d, manifest says %d", id, got_n, len);
        if (len == 0) {
            fk.checked++;
        } else {
            t = get_f32(f, id);
            if (t)
                cmp(&fk, id, out, got_n, sd_tensor_f32(t), (int)sd_tensor_numel(t), atol, rtol);
            sd_tensor_unref(t);
        }
        free(out);
    }
    fam_print(&fk);

    /* Non-finite cases: "scheduler/<name>/steps<N>" with literal values. */
    family fn = {"non-finite cases"};
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(sched, "nonfinite_cases")) {
        const char *id = jstr(c, "id");
        char name[64];
        int steps = 0;
        if (!id || sscanf(id, "scheduler/%63[^/]/steps%d", name, &steps) != 2) {
            CHECK_MSG(0, "cannot read non-finite case id %s", id ? id : "?");
            continue;
        }
        const cJSON *vals = cJSON_GetObjectItemCaseSensitive(c, "values");
        int nv = cJSON_GetArraySize(vals);
        float *exp = malloc((size_t)(nv + 1) * sizeof *exp);
        for (int i = 0; i < nv; i++)
            exp[i] = strtof(cJSON_GetArrayItem(vals, i)->valuestring, NULL);
        float *out = malloc((size_t)sd_schedule_capacity(steps) * sizeof *out);
        int got_n = 0;
        CHECK_OK(sd_schedule_sigmas(ms, name, steps, out, &got_n, &err), &err);
        cmp(&fn, id, out, got_n, exp, nv, atol, rtol);
        free(out);
        free(exp);
    }
    fam_print(&fn);
}

/* ---- manifest.json component "sampling" --------------------------------------- */

static void run_case(const cJSON *cs, sd_st_file *f, const sd_model_sampling *ms)
{
    const cJSON *ctol = cJSON_GetObjectItemCaseSensitive(cs, "tolerance");
    double c_atol = jnum(ctol, "atol", 0), c_rtol = jnum(ctol, "rtol", 0);
    family ft = {"tables/probes (manifest)"}, fs = {"schedules (manifest)"};
    sd_error err;
    const cJSON *tn;
    cJSON_ArrayForEach(tn, cJSON_GetObjectItemCaseSensitive(cs, "tensors")) {
        const char *key = tn->string;
        if (strcmp(jstr(tn, "role") ? jstr(tn, "role") : "", "input") == 0)
            continue;
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(tn, "tolerance");
        double atol = jnum(tt, "atol", c_atol), rtol = jnum(tt, "rtol", c_rtol);
        double jit = jnum(tn, "observed_fp32_jitter_abs", 0);
        if (50 * jit > atol)
            atol = 50 * jit;
        sd_tensor *e = get_f32(f, key);
        if (!e)
            continue;
        const float *ev = sd_tensor_f32(e);
        int ne = (int)sd_tensor_numel(e);
        char sname[64];
        int steps = 0;
        if (strcmp(key, "model_sampling.sigmas") == 0) {
            cmp(&ft, key, ms->sigmas, SD_MS_TIMESTEPS, ev, ne, atol, rtol);
        } else if (strcmp(key, "model_sampling.log_sigmas") == 0) {
            cmp(&ft, key, ms->log_sigmas, SD_MS_TIMESTEPS, ev, ne, atol, rtol);
        } else if (strcmp(key, "q.timestep") == 0 || strcmp(key, "q.sigma_of_t") == 0) {
            int ts = key[2] == 't';
            sd_tensor *in = get_f32(f, ts ? "q.sigma" : "q.t");
            if (in) {
                int m = (int)sd_tensor_numel(in);
                float *got = malloc((size_t)m * sizeof *got);
                for (int i = 0; i < m; i++)
                    got[i] = ts ? sd_ms_timestep(ms, sd_tensor_f32(in)[i])
                                : sd_ms_sigma(ms, sd_tensor_f32(in)[i]);
                cmp(&ft, key, got, m, ev, ne, atol, rtol);
                free(got);
            }
            sd_tensor_unref(in);
        } else if (sscanf(key, "sigmas.%63[^.].%d", sname, &steps) == 2) {
            float *out = malloc((size_t)sd_schedule_capacity(steps) * sizeof *out);
            int got_n = 0;
            CHECK_OK(sd_schedule_sigmas(ms, sname, steps, out, &got_n, &err), &err);
            cmp(&fs, key, out, got_n, ev, ne, atol, rtol);
            free(out);
        } else {
            CHECK_MSG(0, "%s: tensor this test does not know how to produce", key);
        }
        sd_tensor_unref(e);
    }
    fam_print(&ft);
    fam_print(&fs);
}

/* ---- rules that need no reference data --------------------------------------- */

static void unit_rules(const sd_model_sampling *ms)
{
    sd_error err;
    float full[32];
    int n = 0;
    CHECK_OK(sd_schedule_sigmas(ms, "karras", 10, full, &n, &err), &err);
    CHECK(n == 11 && full[10] == 0.0f && full[0] > full[9]);

    /* KSamplerAdvanced step windows. */
    float s[11];
    int first, m, skip;
    memcpy(s, full, sizeof s);
    sd_sigmas_step_range(s, 11, 0, 5, 0, &first, &m, &skip);
    CHECK(first == 0 && m == 6 && !skip && s[5] == full[5]);
    sd_sigmas_step_range(s, 11, 0, 5, 1, &first, &m, &skip);
    CHECK(first == 0 && m == 6 && !skip && s[5] == 0.0f);
    memcpy(s, full, sizeof s);
    sd_sigmas_step_range(s, 11, 5, 10000, 1, &first, &m, &skip);
    CHECK(first == 5 && m == 6 && !skip && s[10] == 0.0f);
    sd_sigmas_step_range(s, 11, 10, 10000, 0, &first, &m, &skip);
    CHECK(skip);
    sd_sigmas_step_range(s, 11, 3, 3, 0, &first, &m, &skip);
    CHECK(skip); /* window cut to 4 sigmas, start 3 leaves nothing to do */
    sd_sigmas_step_range(s, 11, -1, -1, 1, &first, &m, &skip);
    CHECK(first == 0 && m == 11 && !skip);

    /* denoise: the tail of a longer schedule; <= 0 is empty. */
    float *out = NULL, twenty[32];
    CHECK_OK(sd_ksampler_sigmas(ms, "normal", "euler", 10, 0.5, &out, &n, &err), &err);
    int n20 = 0;
    CHECK_OK(sd_schedule_sigmas(ms, "normal", 20, twenty, &n20, &err), &err);
    CHECK(out && n == 11 && n20 == 21 && memcmp(out, twenty + 10, 11 * sizeof *out) == 0);
    free(out);
    CHECK_OK(sd_ksampler_sigmas(ms, "normal", "euler", 10, 0.0, &out, &n, &err), &err);
    CHECK(n == 0 && out == NULL);
    CHECK_OK(sd_basic_scheduler_sigmas(ms, "normal", 10, 0.5, &out, &n, &err), &err);
    CHECK(out && n == 11 && memcmp(out, twenty + 10, 11 * sizeof *out) == 0);
    free(out);

    /* discard penultimate: steps+1 sigmas minus the second to last. */
    float five[8];
    CHECK_OK(sd_schedule_sigmas(ms, "karras", 5, five, &n, &err), &err);
    CHECK_OK(sd_ksampler_sigmas(ms, "karras", "dpm_2", 4, 1.0, &out, &m, &err), &err);
    CHECK(out && m == 5 && memcmp(out, five, 4 * sizeof *out) == 0 && out[4] == 0.0f);
    free(out);
    CHECK(sd_sampler_discards_penultimate("uni_pc_bh2") && !sd_sampler_discards_penultimate("euler"));

    /* Errors name the problem. */
    CHECK(sd_schedule_sigmas(ms, "nope", 10, full, &n, &err) == SD_ERR_INVALID);
    CHECK(strstr(err.msg, "nope") != NULL);
    CHECK(sd_schedule_sigmas(ms, "simple", 0, full, &n, &err) == SD_ERR_INVALID);
    CHECK(sd_ksampler_sigmas(ms, "nope", "euler", 10, 0.5, &out, &n, &err) == SD_ERR_INVALID);
    int k = 0;
    for (const char *const *p = sd_schedule_names(); *p; p++, k++)
        CHECK(sd_schedule_known(*p));
    CHECK(k == 9);
    CHECK(sd_schedule_capacity(30) >= 32); /* ddim_uniform: 32 values on 1000 sigmas */
    /* Every scheduler stays within the capacity on every table length a
     * model sampling has (LCM's 50: ddim_uniform gives 50 values for 30
     * steps; 1000; Flux's 10000; the flow table of 1000). */
    {
        sd_model_sampling *tab = malloc(4 * sizeof *tab);
        sd_model_sampling_init_ex(&tab[0], SD_PRED_LCM, 0);
        sd_model_sampling_init(&tab[1], SD_PRED_EPS);
        sd_model_sampling_init_flux_dev(&tab[2]);
        sd_model_sampling_init_flux_schnell(&tab[3]);
        float *buf = malloc((SD_MS_MAX_SIGMAS + 16) * sizeof *buf);
        static const int steps_list[] = {1, 2, 3, 7, 30, 49, 50, 51, 333, 999, 1000, 4000};
        for (int t = 0; t < 4; t++)
            for (size_t si = 0; si < sizeof steps_list / sizeof *steps_list; si++)
                for (const char *const *p = sd_schedule_names(); *p; p++) {
                    int st = steps_list[si], got = 0;
                    CHECK_OK(sd_schedule_sigmas(&tab[t], *p, st, buf, &got, &err), &err);
                    CHECK_MSG(got <= sd_schedule_capacity(st), "%s on a %d-sigma table, %d steps: %d values, capacity %d",
                              *p, tab[t].n, st, got, sd_schedule_capacity(st));
                }
        free(buf);
        free(tab);
    }

    /* beta ppf inverts the cdf. */
    for (double p = 0.05; p < 1.0; p += 0.1) {
        double x = sd_beta_ppf(p, 0.6, 0.6);
        CHECK_MSG(fabs(sd_beta_cdf(x, 0.6, 0.6) - p) < 1e-13, "ppf(%g)", p);
    }

    /* Prediction arithmetic: eps and v recover x0 from x = x0 + sigma*eps. */
    float x0[4] = {0.5f, -1.0f, 2.0f, 0.0f}, eps[4] = {1.0f, 0.25f, -0.5f, 2.0f};
    float x[4], den[4], v[4], in[4];
    float sg = 3.0f;
    sd_ms_noise_scaling(ms, sg, eps, x0, 0, x, 4);
    sd_ms_calculate_denoised(ms, sg, eps, x, den, 4);
    for (int i = 0; i < 4; i++)
        CHECK(fabsf(den[i] - x0[i]) < 1e-5f);
    sd_model_sampling vms = *ms;
    vms.prediction = SD_PRED_V;
    for (int i = 0; i < 4; i++)
        v[i] = (eps[i] - sg * x0[i]) / sqrtf(1.0f + sg * sg);
    sd_ms_calculate_denoised(&vms, sg, v, x, den, 4);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(fabsf(den[i] - x0[i]) < 1e-5f, "v denoised[%d] = %g", i, den[i]);
    sd_ms_calculate_input(ms, sg, x, in, 4);
    for (int i = 0; i < 4; i++)
        CHECK(fabsf(in[i] - x[i] / sqrtf(10.0f)) < 1e-6f);
    sd_ms_noise_scaling(ms, ms->sigma_max, eps, NULL, 1, x, 4);
    CHECK(x[0] == eps[0] * sqrtf(1.0f + ms->sigma_max * ms->sigma_max));
    CHECK(sd_ms_is_max_denoise(ms, ms->sigma_max) && !sd_ms_is_max_denoise(ms, full[1]));
    CHECK(sd_ms_percent_to_sigma(ms, 0.0) == 999999999.9 && sd_ms_percent_to_sigma(ms, 1.0) == 0.0);
    CHECK(sd_ms_timestep(ms, ms->sigma_max) == 999.0f && sd_ms_timestep(ms, ms->sigma_min) == 0.0f);
    CHECK(sd_ms_sigma(ms, 0.0f) == expf(ms->log_sigmas[0]));
    CHECK(sd_ms_sigma(ms, 2000.0f) == sd_ms_sigma(ms, 999.0f));
}

int main(void)
{
    const char *dir = getenv("SDFLOW_TESTDATA");
    if (!dir || !*dir)
        dir = sd_test_testdata_dir();
    char path[4096];
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_model_sampling_init(ms, SD_PRED_EPS);
    unit_rules(ms);
    int ran = 0;
    sd_error err;

    snprintf(path, sizeof path, "%s/golden/manifest_math.json", dir);
    char *text = sd_test_read_file(path, NULL);
    cJSON *man = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *sched = cJSON_GetObjectItemCaseSensitive(man, "schedules");
    const cJSON *fl;
    cJSON_ArrayForEach(fl, cJSON_GetObjectItemCaseSensitive(sched, "files")) {
        snprintf(path, sizeof path, "%s/golden/%s", dir, fl->valuestring);
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, &err) != SD_OK) {
            CHECK_MSG(0, "manifest_math.json lists %s: %s", path, err.msg);
            continue;
        }
        run_math(sched, f, ms);
        sd_st_close(f);
        ran++;
    }
    cJSON_Delete(man);

    snprintf(path, sizeof path, "%s/manifest.json", dir);
    text = sd_test_read_file(path, NULL);
    man = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        const char *comp = jstr(cs, "component"), *file = jstr(cs, "file");
        if (!comp || strcmp(comp, "sampling") != 0 || !file)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        sd_st_file *f = NULL;
        if (sd_st_open(path, &f, &err) != SD_OK) {
            CHECK_MSG(0, "manifest.json lists %s: %s", path, err.msg);
            continue;
        }
        printf("case %s:\n", jstr(cs, "id") ? jstr(cs, "id") : "?");
        run_case(cs, f, ms);
        sd_st_close(f);
        ran++;
    }
    cJSON_Delete(man);
    free(ms);
    if (!ran)
        sd_test_skip("no schedule goldens under %s", dir);
    return sd_test_finish();
}
