/* test_golden_samplers.c - every sampler against ComfyUI on the analytic UNet.
 *
 * The references (golden/manifest_math.json "samplers") were produced by
 * ComfyUI's own sampling code with the UNet replaced by an analytic function
 * F. This test rebuilds the same denoiser (EPS wrapper from
 * models/sampling/model_sampling.h, CFG from models/sampling/guider.h) and, for every case the
 * manifest lists, runs the sampler from the stored x_start over the stored
 * sigmas and compares x_final, x_out_latent and the trajectories at the
 * manifest's tolerance, plus the guider / UNet call counts. It also checks
 * the analytic probe (F, EPS wrapper, CFG) and the cfg_function cases.
 *
 * Data: $SDFLOW_TESTDATA (or the default testdata dir) /golden; skipped (77)
 * when the manifest is absent.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "golden.h"
#include "testutil.h"
#include "formats/safetensors.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h"
#include "models/sampling/sampler.h"

/* ---- the analytic model ------------------------------------------------------ */

typedef struct analytic {
    sd_model_sampling ms;
    double K1, K2, K3, K4, K5, K6;
    double a[2], phi[2]; /* [positive, negative] */
} analytic;

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* BaseModel.apply_model for an EPS model with F as the "UNet", one cond. */
static void analytic_apply(const analytic *m, const sd_tensor *x, float sigma, int cond, float *out)
{
    int64_t n = sd_tensor_numel(x), per = n / x->shape[0];
    const float *xv = (const float *)x->data;
    float *xin = malloc((size_t)n * sizeof(float));
    float *eps = malloc((size_t)n * sizeof(float));
    sd_ms_calculate_input(&m->ms, sigma, xv, xin, (size_t)n);
    float t = sd_ms_timestep(&m->ms, sigma);
    double s = (double)t / 1000.0;
    for (int64_t i = 0; i < n; i++) {
        double idx = (double)(i % per);
        double arg = m->K5 * idx + m->phi[cond] + m->K6 * s;
        double xi = xin[i];
        double e = m->K1 * xi + m->K2 * (1.0 - s) * tanh(m->K3 * xi) + m->K4 * m->a[cond] * sin(arg);
        eps[i] = (float)e;
    }
    sd_ms_calculate_denoised(&m->ms, sigma, eps, xv, out, (size_t)n);
    free(xin);
    free(eps);
}

static sd_status analytic_model(void *ud, const sd_tensor *x, float sigma, const int *conds,
                                int n_conds, sd_tensor **outs, sd_error *err)
{
    (void)err;
    for (int j = 0; j < n_conds; j++)
        analytic_apply(ud, x, sigma, conds[j], (float *)outs[j]->data);
    return SD_OK;
}

/* ---- file helpers ---------------------------------------------------------------- */

#define MAX_FILES 16
static struct {
    char name[128];
    sd_st_file *f;
} g_files[MAX_FILES];
static int g_nfiles;
static char g_dir[1024];

static sd_st_file *open_file(const char *name)
{
    for (int i = 0; i < g_nfiles; i++)
        if (strcmp(g_files[i].name, name) == 0)
            return g_files[i].f;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    sd_error err;
    sd_st_file *f = NULL;
    if (sd_st_open(path, &f, &err) != SD_OK) {
        char b[4096];
        fprintf(stderr, "cannot open %s: %s\n", path, sd_error_format(&err, b, sizeof b));
        return NULL;
    }
    if (g_nfiles < MAX_FILES) {
        snprintf(g_files[g_nfiles].name, sizeof g_files[0].name, "%s", name);
        g_files[g_nfiles++].f = f;
    }
    return f;
}

static sd_tensor *load(sd_st_file *f, const char *key)
{
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(f, key, &err);
    if (!t) {
        char b[4096];
        fprintf(stderr, "missing tensor %s: %s\n", key, sd_error_format(&err, b, sizeof b));
    }
    return t;
}

/* max |a-e| and whether all within atol + rtol*|e| (n floats) */
static int close_arr(const float *a, const float *e, int64_t n, double atol, double rtol,
                     double *worst)
{
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)e[i]);
        if (!(d <= atol + rtol * fabs((double)e[i])))
            ok = 0;
        if (d > *worst || isnan(d))
            *worst = isnan(d) ? INFINITY : d;
    }
    return ok;
}

/* ---- per-sampler result table -------------------------------------------------------- */

typedef struct result {
    char name[64];
    int cases, failed;
    double worst;
    double tol;
} result;
static result g_res[64];
static int g_nres;

static result *res_for(const char *name)
{
    for (int i = 0; i < g_nres; i++)
        if (strcmp(g_res[i].name, name) == 0)
            return &g_res[i];
    result *r = &g_res[g_nres++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* ---- trajectory capture ---------------------------------------------------------------- */

typedef struct traj {
    float *x, *den;
    int64_t n;
    int steps, seen;
} traj;

static void on_progress(void *ud, int step, int total, const sd_tensor *x, const sd_tensor *den)
{
    traj *t = ud;
    (void)total;
    if (step < 0 || step >= t->steps)
        return;
    memcpy(t->x + (size_t)step * t->n, x->data, (size_t)t->n * sizeof(float));
    memcpy(t->den + (size_t)step * t->n, den->data, (size_t)t->n * sizeof(float));
    t->seen++;
}

/* ---- checks ------------------------------------------------------------------------------ */

static void check_probe(analytic *m, const char *probe_desc)
{
    /* "sampler_analytic_probe.safetensors: probeK/{...}" */
    char fname[256] = "";
    if (probe_desc)
        sscanf(probe_desc, "%255[^:]", fname);
    CHECK_MSG(fname[0] != 0, "manifest: samplers.analytic.probe_file");
    if (!fname[0])
        return;
    /* the CFG scale of cfg_out, as the description names it ("... with cfg=7.5") */
    const char *cfg_at = strstr(probe_desc, "cfg=");
    double cfg_scale = 0.0;
    CHECK_MSG(cfg_at && sscanf(cfg_at + 4, "%lf", &cfg_scale) == 1,
              "manifest: samplers.analytic.probe_file names no cfg=<scale>: %s", probe_desc);
    if (!cfg_at)
        return;
    sd_st_file *f = open_file(fname);
    CHECK(f != NULL);
    if (!f)
        return;
    double worst = 0.0;
    for (int p = 0;; p++) {
        char key[128];
        snprintf(key, sizeof key, "probe%d/x", p);
        if (!sd_st_find(f, key))
            break;
        sd_tensor *x = load(f, key);
        snprintf(key, sizeof key, "probe%d/sigma", p);
        sd_tensor *sg = load(f, key);
        float sigma = ((float *)sg->data)[0];
        int64_t n = sd_tensor_numel(x);
        float *buf = malloc((size_t)n * sizeof(float)), *ub = malloc((size_t)n * sizeof(float));
        static const char *names[2] = {"denoised_cond", "denoised_uncond"};
        for (int cnd = 0; cnd < 2; cnd++) {
            analytic_apply(m, x, sigma, cnd, cnd ? ub : buf);
            snprintf(key, sizeof key, "probe%d/%s", p, names[cnd]);
            sd_tensor *e = load(f, key);
            double w = 0.0;
            int ok = close_arr(cnd ? ub : buf, (float *)e->data, n, 2e-6, 2e-6, &w);
            CHECK_MSG(ok, "probe %d %s: max err %g", p, names[cnd], w);
            if (w > worst)
                worst = w;
            sd_tensor_unref(e);
        }
        snprintf(key, sizeof key, "probe%d/t", p);
        sd_tensor *te = load(f, key);
        CHECK_MSG(sd_ms_timestep(&m->ms, sigma) == ((float *)te->data)[0], "probe %d timestep", p);
        sd_tensor_unref(te);
        /* CFG at the manifest's scale on the reference predictions must be bit exact */
        snprintf(key, sizeof key, "probe%d/cfg_out", p);
        sd_tensor *co = load(f, key);
        sd_cfg_combine(buf, ub, cfg_scale, buf, n);
        double w = 0.0;
        CHECK_MSG(close_arr(buf, (float *)co->data, n, 1e-6, 1e-6, &w), "probe %d cfg_out %g", p, w);
        sd_tensor_unref(co);
        free(buf);
        free(ub);
        sd_tensor_unref(x);
        sd_tensor_unref(sg);
    }
    printf("analytic probe: worst denoised error %.3g\n", worst);
}

static void check_cfg(const cJSON *cfgcase)
{
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(cfgcase, "file");
    sd_st_file *f = open_file(cJSON_IsString(file) ? file->valuestring : "sampler_cfg.safetensors");
    CHECK(f != NULL);
    if (!f)
        return;
    sd_tensor *cond = load(f, "cond_pred"), *unc = load(f, "uncond_pred");
    if (!cond || !unc)
        return;
    int64_t n = sd_tensor_numel(cond);
    float *out = malloc((size_t)n * sizeof(float));
    const cJSON *sc;
    cJSON_ArrayForEach(sc, cJSON_GetObjectItemCaseSensitive(cfgcase, "scales"))
    {
        double scale = sc->valuedouble;
        char key[64];
        snprintf(key, sizeof key, "cfg%.1f/out", scale);
        if (!sd_st_find(f, key))
            snprintf(key, sizeof key, "cfg%g/out", scale);
        sd_tensor *e = load(f, key);
        CHECK(e != NULL);
        if (!e)
            continue;
        sd_cfg_combine((float *)cond->data, (float *)unc->data, scale, out, n);
        int exact = memcmp(out, e->data, (size_t)n * sizeof(float)) == 0;
        double w = 0.0;
        close_arr(out, (float *)e->data, n, 0, 0, &w);
        CHECK_MSG(exact, "cfg_function scale %g: max err %g (must be bit exact)", scale, w);
        printf("cfg_function scale %-5g: %s\n", scale, exact ? "bit exact" : "MISMATCH");
        sd_tensor_unref(e);
    }
    free(out);
    sd_tensor_unref(cond);
    sd_tensor_unref(unc);
}

/* Tolerances from the manifest's prose ("... atol 2e-4 + rtol 2e-4 ..."). */
static double g_atol = NAN, g_rtol = NAN, g_atol_adaptive = NAN;

static double num_after(const char *text, const char *word)
{
    const char *p = text ? strstr(text, word) : NULL;
    if (!p)
        return NAN;
    p += strlen(word);
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

static int g_pipeline_cases;
static double g_pipeline_worst;

static int is_brownian(const sd_sampler *s) { return s->noise == SD_SAMPLER_NOISE_BROWNIAN; }

static void run_case(analytic *m, const cJSON *cs, const cJSON *model_calls)
{
    const char *file = cJSON_GetObjectItemCaseSensitive(cs, "file")->valuestring;
    const char *sname = cJSON_GetObjectItemCaseSensitive(cs, "sampler")->valuestring;
    const char *id = cJSON_GetObjectItemCaseSensitive(cs, "id")->valuestring;
    double cfg = jnum(cs, "cfg");
    double seed = jnum(cs, "seed");
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(cs, "tensor_keys");
    const cJSON *k0 = cJSON_GetArrayItem(keys, 0);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s", k0->valuestring);
    char *slash = strrchr(prefix, '/');
    if (slash)
        *slash = 0;
    sd_st_file *f = open_file(file);
    CHECK_MSG(f != NULL, "case %s: file %s", id, file);
    if (!f)
        return;
    const sd_sampler *s = sd_sampler_find(sname);
    CHECK_MSG(s != NULL, "case %s: unknown sampler %s", id, sname);
    if (!s)
        return;
    char key[512];
    snprintf(key, sizeof key, "%s/sigmas", prefix);
    sd_tensor *sig = load(f, key);
    snprintf(key, sizeof key, "%s/x_start", prefix);
    sd_tensor *x0 = load(f, key);
    snprintf(key, sizeof key, "%s/x_final", prefix);
    sd_tensor *xf = load(f, key);
    snprintf(key, sizeof key, "%s/x_out_latent", prefix);
    sd_tensor *xo = load(f, key);
    CHECK_MSG(sig && x0 && xf && xo, "case %s: tensors", id);
    if (!sig || !x0 || !xf || !xo)
        return;
    snprintf(key, sizeof key, "%s/traj_x", prefix);
    sd_tensor *tx = sd_st_find(f, key) ? load(f, key) : NULL;
    snprintf(key, sizeof key, "%s/traj_denoised", prefix);
    sd_tensor *td = sd_st_find(f, key) ? load(f, key) : NULL;

    int n_sig = (int)sd_tensor_numel(sig);
    sd_tensor *x = sd_tensor_clone(x0);
    int64_t n = sd_tensor_numel(x);
    traj tr = {0};
    tr.n = n;
    tr.steps = n_sig - 1;
    tr.x = calloc((size_t)(tr.steps + 1) * n, sizeof(float));
    tr.den = calloc((size_t)(tr.steps + 1) * n, sizeof(float));

    sd_guider g;
    sd_guider_init(&g, analytic_model, m, cfg);
    sd_denoiser d = sd_guider_denoiser(&g);
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    p.seed = (uint64_t)seed;
    p.progress = on_progress;
    p.progress_ud = &tr;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_sampler_run(s, &d, (float *)sig->data, n_sig, x, &p, &err), &err);

    int adaptive = strcmp(sname, "dpm_adaptive") == 0;
    double atol = adaptive ? g_atol_adaptive : g_atol, rtol = adaptive ? 0.0 : g_rtol;
    result *r = res_for(sname);
    r->tol = atol;
    r->cases++;
    double worst = 0.0;
    int ok = close_arr((float *)x->data, (float *)xf->data, n, atol, rtol, &worst);
    /* KSampler LATENT = x_final / 0.18215 */
    float *lat = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        lat[i] = ((float *)x->data)[i] / SD_LATENT_SCALE_SD1;
    double wl = 0.0;
    ok &= close_arr(lat, (float *)xo->data, n, atol / SD_LATENT_SCALE_SD1, rtol, &wl);
    free(lat);
    if (tx && td) {
        memcpy(tr.x + (size_t)tr.steps * n, x->data, (size_t)n * sizeof(float));
        double wt = 0.0;
        ok &= close_arr(tr.x, (float *)tx->data, (int64_t)(tr.steps + 1) * n, atol, rtol, &wt);
        ok &= close_arr(tr.den, (float *)td->data, (int64_t)tr.steps * n, atol, rtol, &wt);
        if (wt > worst)
            worst = wt;
        CHECK_MSG(tr.seen == tr.steps, "case %s: %d progress calls for %d steps", id, tr.seen,
                  tr.steps);
    }
    /* call counts: the case's own, else the model_calls table */
    double gc = jnum(cs, "guider_calls"), uc = jnum(cs, "unet_calls");
    if (isnan(gc) && model_calls) {
        const cJSON *mc = cJSON_GetObjectItemCaseSensitive(model_calls, sname);
        char ck[64];
        const char *fn = strrchr(id, '/');
        (void)fn;
        char sched[64] = "";
        sscanf(id, "%63[^/]", sched);
        snprintf(ck, sizeof ck, "%s_cfg%g", sched, cfg);
        if (strchr(ck, '.') == NULL) { /* the table writes 1.0, 7.5 */
            snprintf(ck, sizeof ck, "%s_cfg%.1f", sched, cfg);
        }
        const cJSON *e = mc ? cJSON_GetObjectItemCaseSensitive(mc, ck) : NULL;
        if (e) {
            gc = jnum(e, "guider_calls");
            uc = jnum(e, "unet_calls");
        }
    }
    if (!isnan(gc))
        CHECK_MSG(g.guider_calls == (int64_t)gc, "case %s: %lld guider calls, ComfyUI %g", id,
                  (long long)g.guider_calls, gc);
    if (!isnan(uc))
        CHECK_MSG(g.model_calls == (int64_t)uc, "case %s: %lld unet calls, ComfyUI %g", id,
                  (long long)g.model_calls, uc);
    if (!ok) {
        r->failed++;
        fprintf(stderr, "case %s: max err %.3g (final latent err %.3g) over tolerance%s\n", id,
                worst, wl, is_brownian(s) ? " [Brownian tree noise]" : "");
    }
    CHECK_MSG(ok, "case %s", id);
    if (worst > r->worst)
        r->worst = worst;

    sd_guider_release(&g);
    free(tr.x);
    free(tr.den);
    sd_tensor_unref(x);
    sd_tensor_unref(sig);
    sd_tensor_unref(x0);
    sd_tensor_unref(xf);
    sd_tensor_unref(xo);
    sd_tensor_unref(tx);
    sd_tensor_unref(td);
}

/* The start latent the KSampler would build: prepare_noise(seed) then
 * noise_scaling(sigma0, noise, 0, max_denoise). */
static void check_start(analytic *m, const cJSON *cs)
{
    const char *file = cJSON_GetObjectItemCaseSensitive(cs, "file")->valuestring;
    sd_st_file *f = open_file(file);
    if (!f || !sd_st_find(f, "common/noise") || cJSON_GetObjectItemCaseSensitive(cs, "denoise"))
        return;
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(cs, "tensor_keys");
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s", cJSON_GetArrayItem(keys, 0)->valuestring);
    *strrchr(prefix, '/') = 0;
    char key[512];
    snprintf(key, sizeof key, "%s/sigmas", prefix);
    sd_tensor *sig = load(f, key);
    snprintf(key, sizeof key, "%s/x_start", prefix);
    sd_tensor *xs = load(f, key);
    sd_tensor *noise = load(f, "common/noise");
    if (!sig || !xs || !noise)
        return;
    int64_t n = sd_tensor_numel(noise);
    sd_tensor *ours = sd_noise_prepare((uint64_t)jnum(cs, "seed"), noise->ndim, noise->shape, NULL, 0);
    CHECK(ours != NULL);
    if (ours) {
        double w = 0.0;
        CHECK_MSG(close_arr((float *)ours->data, (float *)noise->data, n, 1e-6, 0, &w),
                  "prepare_noise(seed) vs common/noise: %g", w);
        sd_tensor_unref(ours);
    }
    float s0 = ((float *)sig->data)[0];
    float *buf = malloc((size_t)n * sizeof(float));
    sd_ms_noise_scaling(&m->ms, s0, (float *)noise->data, NULL, sd_ms_is_max_denoise(&m->ms, s0),
                        buf, (size_t)n);
    double w = 0.0;
    CHECK_MSG(close_arr(buf, (float *)xs->data, n, 1e-6, 1e-6, &w), "x_start of %s: %g", prefix, w);
    free(buf);
    sd_tensor_unref(sig);
    sd_tensor_unref(xs);
    sd_tensor_unref(noise);
}

/* The whole KSampler path (sd_guider_sample): start latent from the stored
 * prepare_noise output (and the img2img latent * 0.18215), sampler, result. */
static void check_pipeline(analytic *m, const cJSON *cs)
{
    const char *file = cJSON_GetObjectItemCaseSensitive(cs, "file")->valuestring;
    const char *sname = cJSON_GetObjectItemCaseSensitive(cs, "sampler")->valuestring;
    const char *id = cJSON_GetObjectItemCaseSensitive(cs, "id")->valuestring;
    sd_st_file *f = open_file(file);
    if (!f || !sd_st_find(f, "common/noise"))
        return;
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(cs, "tensor_keys");
    char prefix[256], key[512];
    snprintf(prefix, sizeof prefix, "%s", cJSON_GetArrayItem(keys, 0)->valuestring);
    *strrchr(prefix, '/') = 0;
    snprintf(key, sizeof key, "%s/sigmas", prefix);
    sd_tensor *sig = load(f, key);
    snprintf(key, sizeof key, "%s/x_final", prefix);
    sd_tensor *xf = load(f, key);
    sd_tensor *noise = load(f, "common/noise");
    sd_tensor *lat = NULL;
    if (sd_st_find(f, "common/latent_image")) {
        sd_tensor *li = load(f, "common/latent_image");
        lat = sd_tensor_clone(li);
        float *lv = lat->data;
        for (int64_t i = 0; i < sd_tensor_numel(lat); i++)
            lv[i] = lv[i] * SD_LATENT_SCALE_SD1; /* process_latent_in */
        sd_tensor_unref(li);
    }
    if (!sig || !xf || !noise)
        return;
    sd_guider g;
    sd_guider_init(&g, analytic_model, m, jnum(cs, "cfg"));
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    p.seed = (uint64_t)jnum(cs, "seed");
    sd_tensor *out = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_guider_sample(&g, &m->ms, sd_sampler_find(sname), (float *)sig->data,
                              (int)sd_tensor_numel(sig), noise, lat, NULL, &p, &out, &err), &err);
    if (out) {
        int adaptive = strcmp(sname, "dpm_adaptive") == 0;
        double w = 0.0;
        CHECK_MSG(close_arr((float *)out->data, (float *)xf->data, sd_tensor_numel(xf),
                            adaptive ? g_atol_adaptive : g_atol, adaptive ? 0 : g_rtol, &w),
                  "pipeline %s: %g", id, w);
        g_pipeline_cases++;
        if (w > g_pipeline_worst)
            g_pipeline_worst = w;
    }
    sd_guider_release(&g);
    sd_tensor_unref(out);
    sd_tensor_unref(sig);
    sd_tensor_unref(xf);
    sd_tensor_unref(noise);
    sd_tensor_unref(lat);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/golden", sd_golden_dir());
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/manifest_math.json", g_dir);
    cJSON *man = sd_golden_json(mpath);
    const cJSON *smp = cJSON_GetObjectItemCaseSensitive(man, "samplers");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(smp, "analytic");
    const cJSON *cons = cJSON_GetObjectItemCaseSensitive(an, "constants");
    CHECK(smp && an && cons);
    if (!cons)
        return sd_test_finish();

    analytic *m = calloc(1, sizeof *m);
    sd_model_sampling_init(&m->ms, SD_PRED_EPS);
    m->K1 = jnum(cons, "K1");
    m->K2 = jnum(cons, "K2");
    m->K3 = jnum(cons, "K3");
    m->K4 = jnum(cons, "K4");
    m->K5 = jnum(cons, "K5");
    m->K6 = jnum(cons, "K6");
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(cons, "cond");
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(cons, "uncond");
    m->a[0] = jnum(cp, "a");
    m->phi[0] = jnum(cp, "phi");
    m->a[1] = jnum(cu, "a");
    m->phi[1] = jnum(cu, "phi");

    /* every listed sampler name is registered, in ComfyUI's order */
    size_t nn = 0;
    const char *const *names = sd_sampler_names(&nn);
    const cJSON *mnames = cJSON_GetObjectItemCaseSensitive(smp, "sampler_names");
    CHECK((int)nn == cJSON_GetArraySize(mnames));
    int idx = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, mnames)
    {
        CHECK_MSG(sd_sampler_find(it->valuestring) != NULL, "sampler %s missing", it->valuestring);
        CHECK_MSG(idx < (int)nn && strcmp(names[idx], it->valuestring) == 0, "name order at %d",
                  idx);
        idx++;
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(smp, "discard_penultimate_sigma_samplers"))
    {
        const sd_sampler *s = sd_sampler_find(it->valuestring);
        CHECK_MSG(s && sd_sampler_discards_penultimate_sigma(s), "%s discards", it->valuestring);
    }

    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(smp, "tolerance");
    const cJSON *td_det = cJSON_GetObjectItemCaseSensitive(tol, "deterministic_samplers");
    const cJSON *td_ad = cJSON_GetObjectItemCaseSensitive(tol, "dpm_adaptive");
    g_atol = num_after(cJSON_GetStringValue(td_det), "atol ");
    g_rtol = num_after(cJSON_GetStringValue(td_det), "rtol ");
    g_atol_adaptive = num_after(cJSON_GetStringValue(td_ad), "atol ");
    CHECK_MSG(g_atol > 0 && g_rtol > 0 && g_atol_adaptive > 0, "manifest tolerances unreadable");
    printf("tolerance: atol %g + rtol %g (dpm_adaptive atol %g)\n", g_atol, g_rtol, g_atol_adaptive);

    check_probe(m, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(an, "probe_file")));
    check_cfg(cJSON_GetObjectItemCaseSensitive(smp, "cfg_cases"));

    const cJSON *model_calls = cJSON_GetObjectItemCaseSensitive(smp, "model_calls");
    const cJSON *cs;
    int ncase = 0;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(smp, "cases"))
    {
        run_case(m, cs, model_calls);
        check_start(m, cs);
        check_pipeline(m, cs);
        ncase++;
    }
    printf("%d sampler cases; %d also through sd_guider_sample from the stored noise "
           "(worst %.3g)\n", ncase, g_pipeline_cases, g_pipeline_worst);
    printf("%-32s %6s %6s %12s %10s\n", "sampler", "cases", "failed", "worst_abs", "atol");
    for (int i = 0; i < g_nres; i++)
        printf("%-32s %6d %6d %12.3g %10.1g%s\n", g_res[i].name, g_res[i].cases, g_res[i].failed,
               g_res[i].worst, g_res[i].tol,
               is_brownian(sd_sampler_find(g_res[i].name)) ? "  (Brownian tree)" : "");

    for (int i = 0; i < g_nfiles; i++)
        sd_st_close(g_files[i].f);
    cJSON_Delete(man);
    free(m);
    return sd_test_finish();
}
