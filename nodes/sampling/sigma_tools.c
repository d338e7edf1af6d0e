/* sigma_tools.c - the smaller SIGMAS nodes of ComfyUI's custom-sampling
 * family (comfy_extras/nodes_custom_sampler.py): LaplaceScheduler and
 * VPScheduler (model-free schedules), ManualSigmas, SetFirstSigma,
 * ExtendIntermediateSigmas and SamplingPercentToSigma. Each computes what
 * ComfyUI's torch code computes in float32 (python floats cast to float
 * where torch casts them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "models/sampling/schedules.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

/* ---- schedulers --------------------------------------------------------------------------- */

static sd_status laplace_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    int steps;
    sd_status rc = sd_nodes_in_steps(in[0], "steps", 10000, &steps, err);
    if (rc) return rc;
    float *v = malloc((size_t)steps * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int n = sd_sigmas_laplace(steps, sd_value_as_float(in[2]), sd_value_as_float(in[1]),
                              sd_value_as_float(in[3]), sd_value_as_float(in[4]), v);
    rc = sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

static sd_status vp_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    int steps;
    sd_status rc = sd_nodes_in_steps(in[0], "steps", 10000, &steps, err);
    if (rc) return rc;
    float *v = malloc((size_t)(steps + 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int n = sd_sigmas_vp(steps, sd_value_as_float(in[1]), sd_value_as_float(in[2]),
                         sd_value_as_float(in[3]), v);
    rc = sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

/* ---- ManualSigmas --------------------------------------------------------------------------- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* re.findall(r"[-+]?(?:\d*\.*\d+)", s), each through float(): a match is
 * sign?, digits, dots, digits (at least one final digit); without a final
 * digit after the dots the regex backtracks to the leading digits alone.
 * float() refuses two or more dots ("1..5"), as ComfyUI does with a
 * ValueError. Returns the count, or -1 with err set; v may be NULL (count). */
static int parse_manual(const char *s, float *v, sd_error *err) {
    int n = 0;
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t p = i;
        if (s[p] == '-' || s[p] == '+') p++;
        size_t a = 0, b = 0, c = 0;
        while (is_digit(s[p + a])) a++;
        while (s[p + a + b] == '.') b++;
        while (is_digit(s[p + a + b + c])) c++;
        size_t end;
        if (c > 0) end = p + a + b + c;
        else if (a > 0) end = p + a, b = 0;
        else {
            i++;
            continue;
        }
        if (b > 1) {
            sd_error_set(err, SD_ERR_INVALID, "could not convert '%.*s' to a number",
                         (int)(end - i), s + i);
            sd_error_at(err, NULL, NULL, "sigmas");
            return -1;
        }
        if (v) {
            char buf[512];
            size_t k = end - i < sizeof buf - 1 ? end - i : sizeof buf - 1;
            memcpy(buf, s + i, k);
            buf[k] = 0;
            v[n] = (float)strtod(buf, NULL); /* python float, then FloatTensor */
        }
        n++;
        i = end;
    }
    return n;
}

static sd_status manual_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s = sd_value_as_string(in[0]);
    if (!s) return sd_nodes_bad_input(err, "sigmas", "sigmas must be a STRING of numbers");
    int n = parse_manual(s, NULL, err);
    if (n < 0) return SD_ERR_INVALID;
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    parse_manual(s, v, err);
    sd_status rc = sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

/* ---- sigma list operations ------------------------------------------------------------------- */

static sd_status set_first_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                               sd_error *err) {
    (void)ctx;
    const float *s;
    int n;
    sd_status rc = sd_nodes_in_sigmas(in, 0, "sigmas", &s, &n, err);
    if (rc) return rc;
    if (n == 0) return sd_nodes_bad_input(err, "sigmas", "sigmas is empty: there is no first sigma to set");
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy(v, s, (size_t)n * sizeof *v);
    v[0] = (float)sd_value_as_float(in[1]);
    rc = sd_nodes_sigmas_value(v, n, out, err);
    free(v);
    return rc;
}

/* After each sigma in [end_at_sigma, start_at_sigma] (start < 0: no upper
 * bound) but the last, steps - 1 values spaced by x = linspace(0, 1,
 * steps + 1)[1:-1]: linear x, cosine sin(x*pi/2), sine 1 - cos(x*pi/2),
 * each cur + f(x) * (next - cur) in float32. sinf/cosf are libm's where
 * torch uses Sleef's: cosine/sine spacing may differ by 1 ulp. */
static sd_status extend_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const float *s;
    int n;
    sd_status rc = sd_nodes_in_sigmas(in, 0, "sigmas", &s, &n, err);
    if (rc) return rc;
    int steps;
    if ((rc = sd_nodes_in_steps(in[1], "steps", 100, &steps, err))) return rc;
    double start = sd_value_as_float(in[2]), end = sd_value_as_float(in[3]);
    const char *spacing = sd_value_as_string(in[4]);
    int kind = !spacing ? -1 : !strcmp(spacing, "linear") ? 0 : !strcmp(spacing, "cosine") ? 1
             : !strcmp(spacing, "sine") ? 2 : -1;
    if (kind < 0) return sd_nodes_bad_input(err, "spacing", "spacing must be linear, cosine or sine");
    /* the comparisons are float32 tensor vs python float: the float is cast */
    float fstart = start < 0 ? INFINITY : (float)start, fend = (float)end;
    float x[101];
    sd_linspace_f32(0.0f, 1.0f, steps + 1, x);
    int m = steps - 1; /* x[1 .. steps - 1] */
    float f[100];
    const float fpi = (float)M_PI; /* python math.pi times a float32 tensor */
    for (int j = 0; j < m; j++) {
        float t = x[j + 1];
        f[j] = kind == 0 ? t : kind == 1 ? sinf(t * fpi / 2.0f) : 1.0f - cosf(t * fpi / 2.0f);
    }
    float *v = malloc(((size_t)n * (size_t)(m + 1) + 1) * sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i + 1 < n; i++) {
        float cur = s[i], next = s[i + 1];
        v[k++] = cur;
        if (fend <= cur && cur <= fstart) {
            float d = next - cur;
            for (int j = 0; j < m; j++) v[k++] = f[j] * d + cur;
        }
    }
    if (n > 0) v[k++] = s[n - 1];
    rc = sd_nodes_sigmas_value(v, k, out, err);
    free(v);
    return rc;
}

/* percent_to_sigma of the MODEL's schedule; return_actual_sigma gives
 * sigma_max / sigma_min at exactly 0 / 1 instead of 999999999.9 / 0. */
static sd_status percent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_sampling *ms = malloc(sizeof *ms);
    if (!ms) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_init(m, ms);
    double p = sd_value_as_float(in[1]);
    double sigma = sd_ms_percent_to_sigma(ms, p);
    if (sd_value_as_bool(in[2])) {
        if (p == 0.0) sigma = ms->sigma_max;
        else if (p == 1.0) sigma = ms->sigma_min;
    }
    free(ms);
    *out = sd_value_float(sigma);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
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
#define DEF(sym, cat, desc, ins, outs, fn)                                                  \
    const sd_node_def sd_node_##sym = {.version = 1, .class_type = #sym,                   \
                                       .python_module = "comfy_extras.nodes_custom_sampler", \
                                       .flags = SD_NODE_V3, .category = cat, .help = desc,    \
                                       .inputs = ins, .outputs = outs, .run = fn}

static const sd_output_def sigmas_out[] = {{"SIGMAS", "SIGMAS"}, {0}};
static const sd_output_def float_out[] = {{"sigma_value", "FLOAT"}, {0}};

static const sd_input_def laplace_inputs[] = {
    INT_IN("steps", 20, 1, 10000), FLOAT_NR("sigma_max", 14.614642, 0.0, 5000.0, 0.01),
    FLOAT_NR("sigma_min", 0.0291675, 0.0, 5000.0, 0.01), FLOAT_NR("mu", 0.0, -10.0, 10.0, 0.1),
    FLOAT_NR("beta", 0.5, 0.0, 10.0, 0.1), {0}};
DEF(LaplaceScheduler, CAT_SCHED,
    "Tiankai et al.'s Laplace schedule, clamped to [sigma_min, sigma_max]; steps values with no "
    "trailing 0 (as ComfyUI).",
    laplace_inputs, sigmas_out, laplace_run);

static const sd_input_def vp_inputs[] = {
    INT_IN("steps", 20, 1, 10000), FLOAT_NR("beta_d", 19.9, 0.0, 5000.0, 0.01),
    FLOAT_NR("beta_min", 0.1, 0.0, 5000.0, 0.01), FLOAT_NR("eps_s", 0.001, 0.0, 1.0, 0.0001), {0}};
DEF(VPScheduler, CAT_SCHED, "The continuous VP schedule sqrt(expm1(beta_d t^2/2 + beta_min t)), then 0.",
    vp_inputs, sigmas_out, vp_run);

static const sd_input_def manual_inputs[] = {
    {.name = "sigmas", .type = SD_T_STRING, .def_str = "1, 0.5"}, {0}};
const sd_node_def sd_node_ManualSigmas = {
    .version = 1, .class_type = "ManualSigmas", .python_module = "comfy_extras.nodes_custom_sampler",
    .category = "_for_testing/custom_sampling",
    .help = "SIGMAS from the numbers in a string (\"1, 0.5\"), as ComfyUI's regex finds them.",
    .inputs = manual_inputs, .outputs = sigmas_out, .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3, .run = manual_run};

static const sd_input_def set_first_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"}, FLOAT_NR("sigma", 136.0, 0.0, 20000.0, 0.001), {0}};
DEF(SetFirstSigma, CAT_SIGMAS, "The sigmas with the first one replaced.", set_first_inputs,
    sigmas_out, set_first_run);

static const char *const spacings[] = {"linear", "cosine", "sine", NULL};
static const sd_input_def extend_inputs[] = {
    {.name = "sigmas", .type = "SIGMAS"}, INT_IN("steps", 2, 1, 100),
    FLOAT_NR("start_at_sigma", -1.0, -1.0, 20000.0, 0.01),
    FLOAT_NR("end_at_sigma", 12.0, 0.0, 20000.0, 0.01),
    {.name = "spacing", .type = SD_T_COMBO, .options = spacings, .def_str = "linear", .no_default = 1}, {0}};
DEF(ExtendIntermediateSigmas, CAT_SIGMAS,
    "Inserts steps - 1 sigmas after each sigma between end_at_sigma and start_at_sigma "
    "(-1: no upper bound).",
    extend_inputs, sigmas_out, extend_run);

static const sd_input_def percent_inputs[] = {
    {.name = "model", .type = "MODEL"}, FLOAT_IN("sampling_percent", 0.0, 0.0, 1.0, 0.0001),
    {.name = "return_actual_sigma", .type = SD_T_BOOLEAN, .def = 0,
     .tooltip = "Return the actual sigma value instead of the value used for interval checks.\nThis only affects "
                "results at 0.0 and 1.0."}, {0}};
DEF(SamplingPercentToSigma, CAT_SIGMAS,
    "The MODEL's sigma at a sampling percent (0 -> 999999999.9, 1 -> 0 unless "
    "return_actual_sigma gives sigma_max / sigma_min).",
    percent_inputs, float_out, percent_run);
