/* custom_sigmas.c - the SIGMAS nodes of ComfyUI's custom-sampling family
 * (comfy_extras/nodes_custom_sampler.py, nodes_align_your_steps.py, nodes_gits.py,
 * nodes_optimalsteps.py):
 * schedulers that make a SIGMAS value (a 1-D F32 tensor, descending, usually
 * ending in 0) and the nodes that cut or flip one. Numbers come from
 * models/sampling/schedules.h, the code KSampler uses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "models/sampling/schedules.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

/* ---- helpers ---------------------------------------------------------------------------- */

sd_status sd_nodes_sigmas_value(const float *v, int n, sd_value **out, sd_error *err) {
    int64_t shape[1] = {n};
    sd_tensor *t = sd_tensor_new(SD_F32, 1, shape);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (n) memcpy(t->data, v, (size_t)n * sizeof(float));
    *out = sd_value_tensor(t);
    sd_tensor_unref(t);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_nodes_in_sigmas(sd_value *const *in, int i, const char *name, const float **v,
                             int *n, sd_error *err) {
    sd_tensor *t = in[i] ? sd_value_as_tensor(in[i]) : NULL;
    if (!t || t->dtype != SD_F32 || t->ndim != 1)
        return sd_nodes_bad_input(err, name, "%s must be SIGMAS (a 1-D F32 tensor)", name);
    *v = t->data;
    *n = (int)t->shape[0];
    return SD_OK;
}

/* The MODEL's sampling schedule (ModelSamplingDiscrete of its prediction
 * type); malloc'd, the caller frees. */
static sd_status model_sampling_of(sd_value *const *in, int i, sd_model_sampling **out,
                                   sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, i, "model", &m, err);
    if (rc) return rc;
    *out = malloc(sizeof **out);
    if (!*out) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_init(m, *out);
    return SD_OK;
}

/* ---- schedulers ---------------------------------------------------------------------------- */

static sd_status basic_scheduler_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                     sd_error *err) {
    (void)ctx;
    sd_model_sampling *ms;
    sd_status rc = model_sampling_of(in, 0, &ms, err);
    if (rc) return rc;
    float *sig = NULL;
    int n = 0;
    rc = sd_basic_scheduler_sigmas(ms, sd_value_as_string(in[1]), (int)sd_value_as_int(in[2]),
                                   sd_value_as_float(in[3]), &sig, &n, err);
    free(ms);
    if (rc) {
        sd_error_at(err, NULL, NULL, "scheduler");
        return rc;
    }
    rc = sd_nodes_sigmas_value(sig, n, out, err);
    free(sig);
    return rc;
}

sd_status sd_nodes_in_steps(sd_value *v, const char *name, int max, int *steps, sd_error *err) {
    int64_t s = sd_value_as_int(v);
    *steps = (int)s; /* set on both paths: callers read it only when this returns 0 */
    if (s < 1 || s > max)
        return sd_nodes_bad_input(err, name, "%s must be 1..%d, got %lld", name, max, (long long)s);
    return SD_OK;
}

typedef enum { K_KARRAS, K_EXPONENTIAL, K_POLYEXP } kd_kind;

static sd_status kd_run(kd_kind kind, sd_value *const *in, sd_value **out, sd_error *err) {
    int steps;
    sd_status rc = sd_nodes_in_steps(in[0], "steps", 10000, &steps, err);
    if (rc) return rc;
    double smax = sd_value_as_float(in[1]), smin = sd_value_as_float(in[2]);
    float *v = malloc((size_t)(steps + 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int n;
    if (kind == K_KARRAS) n = sd_sigmas_karras(steps, smin, smax, sd_value_as_float(in[3]), v);
    else if (kind == K_EXPONENTIAL) n = sd_sigmas_exponential(steps, smin, smax, v);
    else n = sd_sigmas_polyexponential(steps, smin, smax, sd_value_as_float(in[3]), v);
    rc = sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

static sd_status karras_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return kd_run(K_KARRAS, in, out, err);
}
static sd_status exponential_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    (void)ctx;
    return kd_run(K_EXPONENTIAL, in, out, err);
}
static sd_status polyexp_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return kd_run(K_POLYEXP, in, out, err);
}

static sd_status sd_turbo_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                              sd_error *err) {
    (void)ctx;
    int steps;
    sd_status rc = sd_nodes_in_steps(in[1], "steps", 10, &steps, err);
    if (rc) return rc;
    sd_model_sampling *ms;
    if ((rc = model_sampling_of(in, 0, &ms, err))) return rc;
    float v[11];
    int n = sd_sigmas_sd_turbo(ms, steps, sd_value_as_float(in[2]), v);
    free(ms);
    return sd_nodes_sigmas_value(v, n, out, err);
}

static sd_status beta_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    int steps;
    sd_status rc = sd_nodes_in_steps(in[1], "steps", 10000, &steps, err);
    if (rc) return rc;
    double alpha = sd_value_as_float(in[2]), beta = sd_value_as_float(in[3]);
    if (!(alpha > 0.0)) return sd_nodes_bad_input(err, "alpha", "alpha must be > 0 (the beta quantile is undefined at 0)");
    if (!(beta > 0.0)) return sd_nodes_bad_input(err, "beta", "beta must be > 0 (the beta quantile is undefined at 0)");
    sd_model_sampling *ms;
    if ((rc = model_sampling_of(in, 0, &ms, err))) return rc;
    float *v = malloc((size_t)(steps + 1) * sizeof *v);
    if (!v) {
        free(ms);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    int n = sd_sigmas_beta(ms, steps, alpha, beta, v);
    free(ms);
    rc = n < 0 ? sd_nodes_bad_input(err, "alpha", "the beta quantile is undefined for this alpha and beta")
               : sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

static sd_status ays_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *type = sd_value_as_string(in[0]);
    if (!sd_ays_table(type)) return sd_nodes_bad_input(err, "model_type", "model_type must be SD1, SDXL or SVD");
    int steps;
    sd_status rc = sd_nodes_in_steps(in[1], "steps", 10000, &steps, err);
    if (rc) return rc;
    float *v = malloc((size_t)(steps + 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int n = sd_sigmas_ays(type, steps, sd_value_as_float(in[2]), v);
    rc = n < 0 ? sd_error_set(err, SD_ERR_NOMEM, "out of memory") : sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

/* GITS and OptimalSteps: published tables (models/sampling/step_schedule_tables.c). */
static sd_status table_sigmas_out(int n, float *v, sd_value **out, sd_error *err) {
    sd_status rc = n < 0 ? sd_error_set(err, SD_ERR_NOMEM, "out of memory") : sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

static sd_status gits_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    double coeff = sd_value_as_float(in[0]);
    if (!sd_gits_coeff_known(coeff))
        return sd_nodes_bad_input(err, "coeff",
                                  "coeff %g has no GITS table: the tables are for 0.80 to 1.50 in "
                                  "steps of 0.05 (coeff is rounded to 2 decimals first)", coeff);
    int steps;
    sd_status rc = sd_nodes_in_steps(in[1], "steps", 1000, &steps, err);
    if (rc) return rc;
    if (steps < 2) return sd_nodes_bad_input(err, "steps", "steps must be 2..1000 (GITS has no 1-step table)");
    float *v = malloc((size_t)(steps + 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return table_sigmas_out(sd_sigmas_gits(coeff, steps, sd_value_as_float(in[2]), v), v, out, err);
}

static sd_status optimal_steps_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    (void)ctx;
    const char *type = sd_value_as_string(in[0]);
    if (!sd_optimal_steps_known(type))
        return sd_nodes_bad_input(err, "model_type", "model_type must be FLUX, Wan or Chroma");
    int steps;
    sd_status rc = sd_nodes_in_steps(in[1], "steps", 1000, &steps, err);
    if (rc) return rc;
    float *v = malloc((size_t)(steps + 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return table_sigmas_out(sd_sigmas_optimal_steps(type, steps, sd_value_as_float(in[2]), v), v, out,
                            err);
}

/* ---- sigma list operations -------------------------------------------------------------------- */

/* sigmas[:step + 1], sigmas[step:] (python slices: clamped, maybe empty). */
static sd_status split_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const float *s;
    int n;
    sd_status rc = sd_nodes_in_sigmas(in, 0, "sigmas", &s, &n, err);
    if (rc) return rc;
    int64_t step = sd_value_as_int(in[1]);
    if (step < 0) return sd_nodes_bad_input(err, "step", "step must be >= 0");
    int hi = step + 1 < n ? (int)step + 1 : n;
    int lo_from = step < n ? (int)step : n;
    rc = sd_nodes_sigmas_value(s, hi, &out[0], err);
    if (!rc) rc = sd_nodes_sigmas_value(s + lo_from, n - lo_from, &out[1], err);
    return rc;
}

/* total = round(steps * denoise); sigmas[:-total], sigmas[-(total + 1):].
 * Python's slices: [:-0] is empty, and -(total + 1) past the start is 0. */
static sd_status split_denoise_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    (void)ctx;
    const float *s;
    int n;
    sd_status rc = sd_nodes_in_sigmas(in, 0, "sigmas", &s, &n, err);
    if (rc) return rc;
    double denoise = sd_value_as_float(in[1]);
    if (!(denoise >= 0.0 && denoise <= 1.0)) return sd_nodes_bad_input(err, "denoise", "denoise must be 0..1");
    int steps = n - 1 > 0 ? n - 1 : 0;
    int total = (int)nearbyint((double)steps * denoise); /* round half to even */
    int hi = total == 0 ? 0 : (n - total > 0 ? n - total : 0);
    int lo_from = n - (total + 1) > 0 ? n - (total + 1) : 0;
    rc = sd_nodes_sigmas_value(s, hi, &out[0], err);
    if (!rc) rc = sd_nodes_sigmas_value(s + lo_from, n - lo_from, &out[1], err);
    return rc;
}

/* Reversed; a leading 0 becomes 0.0001 (so the first step has a sigma). */
static sd_status flip_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const float *s;
    int n;
    sd_status rc = sd_nodes_in_sigmas(in, 0, "sigmas", &s, &n, err);
    if (rc) return rc;
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) v[i] = s[n - 1 - i];
    if (n && v[0] == 0.0f) v[0] = 0.0001f;
    rc = sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

/* ---- definitions ---------------------------------------------------------------------------- */

#define CAT_SCHED "sampling/custom_sampling/schedulers"
#define CAT_SIGMAS "sampling/custom_sampling/sigmas"
#define FLOAT_IN(n, d, lo, hi, st) \
    {.name = n, .type = SD_T_FLOAT, .def = d, .min = lo, .max = hi, .step = st, .has_range = 1}
#define INT_IN(n, d, lo, hi) {.name = n, .type = SD_T_INT, .def = d, .min = lo, .max = hi, .has_range = 1}
/* a FLOAT ComfyUI declares with round=False (its sigma and noise settings) */
#define FLOAT_NR(n, d, lo, hi, st) \
    {.name = n, .type = SD_T_FLOAT, .def = d, .min = lo, .max = hi, .step = st, .has_range = 1, .round = SD_ROUND_FALSE}

static const sd_output_def sigmas_out[] = {{"SIGMAS", "SIGMAS"}, {0}};
static const sd_output_def split_out[] = {{"high_sigmas", "SIGMAS"}, {"low_sigmas", "SIGMAS"}, {0}};

static const sd_input_def basic_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scheduler", .type = SD_T_COMBO, .options_fn = sd_nodes_scheduler_names, .def_str = "simple",
     .no_default = 1},
    INT_IN("steps", 20, 1, 10000),
    FLOAT_IN("denoise", 1.0, 0.0, 1.0, 0.01),
    {0}};
const sd_node_def sd_node_BasicScheduler = {
    .version = 1, .class_type = "BasicScheduler", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED,
    .help = "The MODEL's sigmas for a KSampler scheduler; denoise < 1 keeps the last steps + 1 "
            "of int(steps / denoise) (no sampler-specific rule, unlike KSampler).",
    .inputs = basic_inputs, .outputs = sigmas_out, .run = basic_scheduler_run};

static const sd_input_def karras_inputs[] = {
    INT_IN("steps", 20, 1, 10000), FLOAT_NR("sigma_max", 14.614642, 0.0, 5000.0, 0.01),
    FLOAT_NR("sigma_min", 0.0291675, 0.0, 5000.0, 0.01), FLOAT_NR("rho", 7.0, 0.0, 100.0, 0.01), {0}};
const sd_node_def sd_node_KarrasScheduler = {
    .version = 1, .class_type = "KarrasScheduler", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED, .help = "Karras et al. sigmas between sigma_max and sigma_min.",
    .inputs = karras_inputs, .outputs = sigmas_out, .run = karras_run};

static const sd_input_def exp_inputs[] = {
    INT_IN("steps", 20, 1, 10000), FLOAT_NR("sigma_max", 14.614642, 0.0, 5000.0, 0.01),
    FLOAT_NR("sigma_min", 0.0291675, 0.0, 5000.0, 0.01), {0}};
const sd_node_def sd_node_ExponentialScheduler = {
    .version = 1, .class_type = "ExponentialScheduler", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED, .help = "Sigmas evenly spaced in log between sigma_max and sigma_min.",
    .inputs = exp_inputs, .outputs = sigmas_out, .run = exponential_run};

static const sd_input_def polyexp_inputs[] = {
    INT_IN("steps", 20, 1, 10000), FLOAT_NR("sigma_max", 14.614642, 0.0, 5000.0, 0.01),
    FLOAT_NR("sigma_min", 0.0291675, 0.0, 5000.0, 0.01), FLOAT_NR("rho", 1.0, 0.0, 100.0, 0.01), {0}};
const sd_node_def sd_node_PolyexponentialScheduler = {
    .version = 1, .class_type = "PolyexponentialScheduler", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED, .help = "Log-sigmas on a polynomial ramp (rho 1 = exponential).",
    .inputs = polyexp_inputs, .outputs = sigmas_out, .run = polyexp_run};

static const sd_input_def turbo_inputs[] = {
    {.name = "model", .type = "MODEL"}, INT_IN("steps", 1, 1, 10), FLOAT_IN("denoise", 1.0, 0.0, 1.0, 0.01), {0}};
const sd_node_def sd_node_SDTurboScheduler = {
    .version = 1, .class_type = "SDTurboScheduler", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED,
    .help = "SD-Turbo's sigmas: timesteps 999, 899, ... from 10 - int(10 * denoise), then 0.",
    .inputs = turbo_inputs, .outputs = sigmas_out, .run = sd_turbo_run};

static const sd_input_def beta_inputs[] = {
    {.name = "model", .type = "MODEL"}, INT_IN("steps", 20, 1, 10000),
    FLOAT_NR("alpha", 0.6, 0.0, 50.0, 0.01), FLOAT_NR("beta", 0.6, 0.0, 50.0, 0.01), {0}};
const sd_node_def sd_node_BetaSamplingScheduler = {
    .version = 1, .class_type = "BetaSamplingScheduler", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED,
    .help = "The beta scheduler with its distribution's alpha and beta (0.6, 0.6 = \"beta\").",
    .inputs = beta_inputs, .outputs = sigmas_out, .run = beta_run};

static const char *const ays_types[] = {"SD1", "SDXL", "SVD", NULL};
static const sd_input_def ays_inputs[] = {
    {.name = "model_type", .type = SD_T_COMBO, .options = ays_types, .def_str = "SD1", .no_default = 1},
    INT_IN("steps", 10, 1, 10000), FLOAT_IN("denoise", 1.0, 0.0, 1.0, 0.01), {0}};
const sd_node_def sd_node_AlignYourStepsScheduler = {
    .version = 1, .class_type = "AlignYourStepsScheduler", .python_module = "comfy_extras.nodes_align_your_steps",
    .flags = SD_NODE_V3,
    .category = CAT_SCHED,
    .help = "NVIDIA's Align Your Steps noise levels for SD1/SDXL/SVD, log-linearly "
            "interpolated to other step counts.",
    .inputs = ays_inputs, .outputs = sigmas_out, .run = ays_run};

static const sd_input_def gits_inputs[] = {
    FLOAT_IN("coeff", 1.20, 0.80, 1.50, 0.05), INT_IN("steps", 10, 2, 1000), FLOAT_IN("denoise", 1.0, 0.0, 1.0, 0.01), {0}};
const sd_node_def sd_node_GITSScheduler = {
    .version = 1, .class_type = "GITSScheduler", .python_module = "comfy_extras.nodes_gits",
    .flags = SD_NODE_V3, .category = CAT_SCHED,
    .help = "GITS noise levels (Chen et al.) for SD1-range models: the coefficient's table up to "
            "20 steps, log-linearly interpolated beyond.",
    .inputs = gits_inputs, .outputs = sigmas_out, .run = gits_run};

static const char *const optimal_steps_types[] = {"FLUX", "Wan", "Chroma", NULL};
static const sd_input_def optimal_steps_inputs[] = {
    {.name = "model_type", .type = SD_T_COMBO, .options = optimal_steps_types, .def_str = "FLUX", .no_default = 1},
    INT_IN("steps", 20, 3, 1000), FLOAT_IN("denoise", 1.0, 0.0, 1.0, 0.01), {0}};
const sd_node_def sd_node_OptimalStepsScheduler = {
    .version = 1, .class_type = "OptimalStepsScheduler", .python_module = "comfy_extras.nodes_optimalsteps",
    .flags = SD_NODE_V3, .category = CAT_SCHED,
    .help = "Optimal Steps noise levels (flow models: FLUX, Wan, Chroma), log-linearly "
            "interpolated to the step count.",
    .inputs = optimal_steps_inputs, .outputs = sigmas_out, .run = optimal_steps_run};

static const sd_input_def split_inputs[] = {{.name = "sigmas", .type = "SIGMAS"}, INT_IN("step", 0, 0, 10000), {0}};
const sd_node_def sd_node_SplitSigmas = {
    .version = 1, .class_type = "SplitSigmas", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3, .category = CAT_SIGMAS,
    .help = "sigmas[:step + 1] and sigmas[step:] (they share sigmas[step]).",
    .inputs = split_inputs, .outputs = split_out, .run = split_run};

static const sd_input_def split_denoise_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"}, FLOAT_IN("denoise", 1.0, 0.0, 1.0, 0.01), {0}};
const sd_node_def sd_node_SplitSigmasDenoise = {
    .version = 1, .class_type = "SplitSigmasDenoise", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3,
    .category = CAT_SIGMAS,
    .help = "Splits off the last round(steps * denoise) steps as low_sigmas.",
    .inputs = split_denoise_inputs, .outputs = split_out, .run = split_denoise_run};

static const sd_input_def flip_inputs[] = {{.name = "sigmas", .type = "SIGMAS"}, {0}};
const sd_node_def sd_node_FlipSigmas = {
    .version = 1, .class_type = "FlipSigmas", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3, .category = CAT_SIGMAS,
    .help = "The sigmas reversed (ascending); a first 0 becomes 0.0001.",
    .inputs = flip_inputs, .outputs = sigmas_out, .run = flip_run};
