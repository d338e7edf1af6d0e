/* test_golden_sampler_nodes.c - the SamplerXxx nodes whose options reach
 * inside the sampler (SamplerSEEDS2, SamplerER_SDE, SamplerSASolver,
 * SamplerDPMAdaptative, SamplerEulerCFGpp)
 * against ComfyUI (tests/data/sampler_nodes: generator, manifest,
 * safetensors).
 *
 * For every case of the manifest: the node runs with the case's inputs, its
 * SAMPLER value gives the sampler and its options (sd_nodes_sampler_options,
 * SamplerSASolver's MODEL being a synthesized tiny SD1 checkpoint whose
 * sampling is made the config's: its own SD1 eps, or ModelSamplingFlux at
 * the config's shift;
 * what SamplerCustom / SamplerCustomAdvanced use), and sd_guider_sample runs
 * it over the stored sigmas and noise on the manifest's analytic model (an
 * SD1 eps or a Flux CONST model sampling around the function F) behind the
 * CFG guider; the result, the callback trajectory and the guider / model
 * call counts are compared with ComfyUI's KSAMPLER.sample. Cases, settings
 * and tolerances all come from the manifest. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/node.h"
#include "formats/safetensors.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/sampler.h"
#include "nodes/sampling/custom.h"
#include "nodes_ctx.h"
#include "golden.h"
#include "testutil.h"

static double K1, K2, K3, K4, K5, K6, ca[2], cphi[2];
static sd_st_file *g_file;
static nt_tiny_sd1 tiny;
static sd_value *g_models[2]; /* the tiny SD1 MODEL as it is, and with ModelSamplingFlux */

typedef struct model {
    sd_model_sampling *ms;
    double t_div;
    long model_calls;
} model;

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* BaseModel.apply_model with the analytic F, one conditioning. */
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

static sd_tensor *load(const char *a, const char *b) {
    char key[256];
    snprintf(key, sizeof key, "%s/%s", a, b);
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g_file, key, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", key);
    return t;
}

static sd_node_ctx ctx_of(const char *class_type) {
    return (sd_node_ctx){.env = &tiny.env, .node_id = "1", .class_type = class_type};
}

/* The MODEL whose sampling is the config's (NULL when it cannot be made). */
static sd_value *config_model(const char *kind, double shift) {
    sd_error err;
    if (!g_models[0]) {
        sd_value *name = sd_value_string("tiny.safetensors"), *ck[3] = {0};
        sd_node_ctx ctx = ctx_of("CheckpointLoaderSimple");
        CHECK_OK(nt_run_named(&ctx, (const char *[]){"ckpt_name"}, &name, 1, ck, &err), &err);
        sd_value_unref(name);
        sd_value_unref(ck[1]), sd_value_unref(ck[2]);
        g_models[0] = ck[0];
    }
    if (strcmp(kind, "sd1_eps") == 0) return g_models[0];
    if (strcmp(kind, "flux") != 0 || !g_models[0]) return NULL;
    sd_value_unref(g_models[1]);
    /* max_shift == base_shift: the node's shift is that value at any size */
    const char *n[] = {"model", "max_shift", "base_shift", "width", "height"};
    sd_value *v[] = {g_models[0], sd_value_float(shift), sd_value_float(shift), sd_value_int(1024), sd_value_int(1024)};
    const int own[] = {0, 1, 1, 1, 1};
    sd_node_ctx ctx = ctx_of("ModelSamplingFlux");
    g_models[1] = nt_run1_named(&ctx, n, v, 5, own, &err);
    return g_models[1];
}

/* The node's SAMPLER value for the case's inputs (NULL on failure). */
static sd_value *node_sampler(const char *id, const char *node, const cJSON *inputs, sd_value *mref) {
    const sd_node_def *def = sd_registry_find(node);
    CHECK_MSG(def != NULL, "%s: node %s is not registered", id, node);
    if (!def) return NULL;
    sd_value *in[16] = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, inputs) {
        int k = sd_node_input_index(def, it->string);
        CHECK_MSG(k >= 0 && k < 16, "%s: %s has no input %s", id, node, it->string);
        if (k < 0 || k >= 16) continue;
        const char *t = def->inputs[k].type;
        in[k] = !strcmp(t, SD_T_INT)       ? sd_value_int((int64_t)it->valuedouble)
                : !strcmp(t, SD_T_FLOAT)   ? sd_value_float(it->valuedouble)
                : !strcmp(t, SD_T_BOOLEAN) ? sd_value_bool(cJSON_IsTrue(it))
                                           : sd_value_string(it->valuestring);
    }
    int km = sd_node_input_index(def, "model");
    if (mref && km >= 0 && km < 16) in[km] = sd_value_ref(mref);
    sd_node_ctx ctx = ctx_of(node);
    sd_value *out[2] = {0};
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(def->run(&ctx, in, out, &err), &err);
    sd_value_unref(ctx.ui);
    for (int k = 0; k < 16; k++) sd_value_unref(in[k]);
    sd_value_unref(out[1]);
    return out[0];
}

static void run_case(const cJSON *m, const cJSON *cs, sd_model_sampling *ms) {
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(m, "settings");
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "id"));
    const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "config"));
    const char *node = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "node"));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(settings, cid ? cid : "");
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "model_sampling"));
    if (!id || !node || !st || !kind) {
        CHECK_MSG(0, "manifest case without id/config/node/settings");
        return;
    }
    if (strcmp(kind, "sd1_eps") == 0) sd_model_sampling_init(ms, SD_PRED_EPS);
    else if (strcmp(kind, "flux") == 0) sd_model_sampling_init_flux(ms, jnum(st, "shift"));
    else {
        CHECK_MSG(0, "%s: unknown model_sampling '%s'", id, kind);
        return;
    }
    sd_value *mref = NULL;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "model_input"))) {
        mref = config_model(kind, jnum(st, "shift"));
        CHECK_MSG(mref != NULL, "%s: no MODEL with the %s sampling", id, kind);
        if (!mref) return;
    }
    sd_value *sv = node_sampler(id, node, cJSON_GetObjectItemCaseSensitive(cs, "inputs"), mref);
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    const char *sname = NULL;
    sd_error err;
    if (sv) CHECK_OK(sd_nodes_sampler_options(sv, "sampler", &sname, &p, &err), &err);
    const sd_sampler *smp = sname ? sd_sampler_find(sname) : NULL;
    sd_tensor *sig = load(cid, "sigmas"), *noise = load(cid, "noise"), *xf = load(id, "x_final");
    sd_tensor *tx = load(id, "traj_x"), *td = load(id, "traj_denoised");
    if (smp && sig && noise && xf && tx && td) {
        int64_t n = sd_tensor_numel(noise);
        sd_tensor *lat = sd_tensor_new(SD_F32, noise->ndim, noise->shape);
        memset(lat->data, 0, (size_t)n * sizeof(float));
        model md = {ms, jnum(st, "t_div"), 0};
        sd_guider g;
        sd_guider_init(&g, model_fn, &md, jnum(m, "cfg"));
        traj tr = {.n = n};
        p.seed = (uint64_t)jnum(m, "seed");
        p.progress = on_progress;
        p.progress_ud = &tr;
        sd_tensor *x = NULL;
        CHECK_OK(sd_guider_sample(&g, ms, smp, sig->data, (int)sd_tensor_numel(sig), noise, lat, NULL, &p, &x, &err),
                 &err);
        sd_guider_release(&g);
        /* a node with its own tolerance in the manifest (dpm_adaptive's step control) */
        const cJSON *ntol = cJSON_GetObjectItemCaseSensitive(tol, node);
        double atol = jnum(ntol ? ntol : tol, "atol"), rtol = jnum(ntol ? ntol : tol, "rtol"), worst = 0, wtx = 0, wtd = 0;
        int ok = x && close_arr(x->data, xf->data, n, atol, rtol, &worst);
        int64_t nt = sd_tensor_numel(tx) / n;
        CHECK_MSG(tr.seen == nt, "%s (%s %s): %d callbacks, ComfyUI %lld", id, node, sname, tr.seen, (long long)nt);
        if (tr.seen == nt)
            CHECK_MSG(close_arr(tr.x, tx->data, nt * n, atol, rtol, &wtx) &&
                          close_arr(tr.den, td->data, nt * n, atol, rtol, &wtd),
                      "%s: callback x |d| %g, denoised |d| %g", id, wtx, wtd);
        CHECK_MSG(ok, "%s (%s %s): worst |d| %g (atol %g rtol %g)", id, node, sname, worst, atol, rtol);
        CHECK_MSG(g.guider_calls == (int64_t)jnum(cs, "guider_calls") && md.model_calls == (long)jnum(cs, "model_calls"),
                  "%s: %lld guider / %ld model calls, ComfyUI %g / %g", id, (long long)g.guider_calls, md.model_calls,
                  jnum(cs, "guider_calls"), jnum(cs, "model_calls"));
        printf("  %-18s %-16s %-14s result |d| %.3g, callbacks x %.3g denoised %.3g\n", id, node, sname, worst, wtx,
               wtd);
        free(tr.x);
        free(tr.den);
        sd_tensor_unref(x);
        sd_tensor_unref(lat);
    }
    sd_value_unref(sv);
    sd_tensor_unref(sig), sd_tensor_unref(noise), sd_tensor_unref(xf), sd_tensor_unref(tx), sd_tensor_unref(td);
}

int main(void) {
    char path[1400];
    const char *dir = sd_golden_topic_dir("sampler_nodes");
    cJSON *m = sd_golden_manifest(dir);
    sd_error err;
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file")));
    CHECK_OK(sd_st_open(path, &g_file, &err), &err);
    if (!g_file) return sd_test_finish();
    nt_tiny_sd1_init(&tiny, "golden_sampler_nodes");

    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(m, "model");
    const cJSON *kc = cJSON_GetObjectItemCaseSensitive(mod, "constants");
    K1 = jnum(kc, "K1"), K2 = jnum(kc, "K2"), K3 = jnum(kc, "K3"), K4 = jnum(kc, "K4"), K5 = jnum(kc, "K5"),
    K6 = jnum(kc, "K6");
    ca[0] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "cond"), "a");
    cphi[0] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "cond"), "phi");
    ca[1] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "uncond"), "a");
    cphi[1] = jnum(cJSON_GetObjectItemCaseSensitive(mod, "uncond"), "phi");
    CHECK(!isnan(K1) && !isnan(jnum(m, "cfg")));

    sd_model_sampling *ms = malloc(sizeof *ms);
    int n = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        run_case(m, cs, ms);
        n++;
    }
    printf("%d cases of ComfyUI %s\n", n, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "comfyui_commit")));
    CHECK(n > 0);
    free(ms);
    sd_st_close(g_file);
    cJSON_Delete(m);
    sd_value_unref(g_models[0]), sd_value_unref(g_models[1]);
    nt_tiny_sd1_free(&tiny);
    return sd_test_finish();
}
