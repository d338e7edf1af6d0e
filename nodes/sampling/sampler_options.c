/* sampler_options.c - what a SAMPLER value carries to the sampler, and the
 * SamplerXxx nodes whose options go beyond eta / s_noise / r
 * (comfy_extras/nodes_custom_sampler.py SamplerSEEDS2, SamplerER_SDE,
 * SamplerSASolver and SamplerDPMAdaptative, nodes_advanced_samplers.py
 * SamplerEulerCFGpp).
 *
 * A SAMPLER stays plain data (see custom.h), so the options are keys of its
 * dict: "eta", "s_noise", "r" (FLOAT), "order", "max_stage" (INT),
 * "solver_type" (STRING: midpoint/heun for dpmpp_2m_sde, phi_1/phi_2 for
 * seeds_2), "noise_scaler" ("reverse_time": er_sde's x^(eta + 1)), and
 * sa_solver's "predictor_order", "corrector_order", "use_pece",
 * "simple_order_2" (INT) with "tau_start_sigma" / "tau_end_sigma" (FLOAT:
 * the node's percents through its MODEL's sampling, as ComfyUI resolves
 * them when the node runs), and dpm_adaptive's "dpm_order" (INT), "rtol",
 * "atol", "h_init", "pcoeff", "icoeff", "dcoeff", "accept_safety" (FLOAT). */
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"
#include "models/image/imageops.h"

sd_status sd_nodes_sampler_options(const sd_value *v, const char *input, const char **name,
                                   sd_sampler_params *p, sd_error *err) {
    sd_value *nv = v && sd_value_kind_of(v) == SD_VAL_DICT ? sd_value_dict_get(v, "sampler_name") : NULL;
    const char *n = nv ? sd_value_as_string(nv) : NULL;
    if (!n) return sd_nodes_bad_input(err, input, "%s must be a SAMPLER (from KSamplerSelect or a Sampler node)", input);
    if (!sd_sampler_find(n)) return sd_nodes_bad_input(err, input, "unknown sampler '%s'", n);
    *name = n;
    sd_value *o;
    if ((o = sd_value_dict_get(v, "eta"))) p->eta = sd_value_as_float(o);
    if ((o = sd_value_dict_get(v, "s_noise"))) p->s_noise = sd_value_as_float(o);
    if ((o = sd_value_dict_get(v, "r"))) p->r = sd_value_as_float(o);
    if ((o = sd_value_dict_get(v, "order"))) p->lms_order = (int)sd_value_as_int(o);
    if ((o = sd_value_dict_get(v, "max_stage"))) p->er_max_stage = (int)sd_value_as_int(o);
    if ((o = sd_value_dict_get(v, "noise_scaler"))) {
        const char *s = sd_value_as_string(o);
        if (!s || strcmp(s, "reverse_time")) return sd_nodes_bad_input(err, input, "SAMPLER noise_scaler '%s' is not reverse_time", s ? s : "?");
        p->er_reverse_time = 1;
        p->er_eta = p->eta; /* the scaler's exponent is the node's eta */
    }
    if ((o = sd_value_dict_get(v, "tau_start_sigma"))) {
        sd_value *e = sd_value_dict_get(v, "tau_end_sigma"), *po = sd_value_dict_get(v, "predictor_order");
        sd_value *co = sd_value_dict_get(v, "corrector_order"), *pe = sd_value_dict_get(v, "use_pece");
        sd_value *s2 = sd_value_dict_get(v, "simple_order_2");
        if (!e || !po || !co || !pe || !s2)
            return sd_nodes_bad_input(err, input, "SAMPLER %s: an sa_solver option set without all its keys", n);
        p->sa_set = 1;
        p->sa_tau_start_sigma = sd_value_as_float(o);
        p->sa_tau_end_sigma = sd_value_as_float(e);
        p->sa_predictor_order = (int)sd_value_as_int(po);
        p->sa_corrector_order = (int)sd_value_as_int(co);
        p->sa_use_pece = (int)sd_value_as_int(pe);
        p->sa_simple_order_2 = (int)sd_value_as_int(s2);
        p->sa_eta = p->eta;
    }
    if ((o = sd_value_dict_get(v, "dpm_order"))) {
        static const char *const k[] = {"rtol", "atol", "h_init", "pcoeff", "icoeff", "dcoeff", "accept_safety"};
        double *dst[] = {&p->dpm_rtol, &p->dpm_atol, &p->dpm_h_init, &p->dpm_pcoeff, &p->dpm_icoeff, &p->dpm_dcoeff,
                         &p->dpm_accept_safety};
        for (int i = 0; i < 7; i++) {
            sd_value *x = sd_value_dict_get(v, k[i]);
            if (!x) return sd_nodes_bad_input(err, input, "SAMPLER %s: a dpm_adaptive option set without all its keys", n);
            *dst[i] = sd_value_as_float(x);
        }
        p->dpm_set = 1;
        p->dpm_order = (int)sd_value_as_int(o);
    }
    if ((o = sd_value_dict_get(v, "upscale_method"))) {
        sd_value *tu = sd_value_dict_get(v, "total_upscale"), *us = sd_value_dict_get(v, "upscale_steps");
        sd_upscale_method m;
        if (!tu || !us) return sd_nodes_bad_input(err, input, "SAMPLER %s: an lcm_upscale option set without all its keys", n);
        const char *ms = sd_value_as_string(o);
        if (!ms || sd_upscale_method_parse(ms, &m) || m == SD_UPSCALE_LANCZOS)
            return sd_nodes_bad_input(err, input, "SAMPLER upscale_method '%s' is not one of SamplerLCMUpscale's", ms ? ms : "?");
        p->lcm_total_upscale = sd_value_as_float(tu);
        p->lcm_upscale_steps = (int)sd_value_as_int(us);
        p->lcm_upscale_method = (int)m;
    }
    if ((o = sd_value_dict_get(v, "solver_type"))) {
        const char *st = sd_value_as_string(o);
        if (st && strcmp(st, "heun") == 0) p->sde_solver = SD_SDE_SOLVER_HEUN;
        else if (st && strcmp(st, "midpoint") == 0) p->sde_solver = SD_SDE_SOLVER_MIDPOINT;
        else if (st && strcmp(st, "phi_2") == 0) p->seeds_phi_2 = 1;
        else if (!st || strcmp(st, "phi_1"))
            return sd_nodes_bad_input(err, input, "SAMPLER solver_type '%s' is not midpoint, heun, phi_1 or phi_2", st ? st : "?");
    }
    return SD_OK;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static sd_status put_or_fail(sd_value *d, const char *key, sd_value *v) {
    if (!v) return SD_ERR_NOMEM;
    if (sd_value_dict_set(d, key, v)) {
        sd_value_unref(v);
        return SD_ERR_NOMEM;
    }
    return SD_OK;
}

/* A SAMPLER dict for `name`; the caller adds the options. */
static sd_value *sampler_dict(const char *name) {
    sd_value *d = sd_value_dict();
    if (d && put_or_fail(d, "sampler_name", sd_value_string(name))) {
        sd_value_unref(d);
        return NULL;
    }
    return d;
}

static sd_status done(sd_value *d, sd_status rc, sd_value **out, sd_error *err) {
    if (rc) {
        sd_value_unref(d);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}

/* SamplerSEEDS2: seeds_2 with solver_type, eta, s_noise, r. */
static sd_status seeds2_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *st = sd_value_as_string(in[0]);
    if (!st || (strcmp(st, "phi_1") && strcmp(st, "phi_2")))
        return sd_nodes_bad_input(err, "solver_type", "solver_type must be phi_1 or phi_2, got '%s'", st ? st : "?");
    sd_value *d = sampler_dict("seeds_2");
    sd_status rc = d ? SD_OK : SD_ERR_NOMEM;
    if (!rc) rc = put_or_fail(d, "solver_type", sd_value_string(st));
    if (!rc) rc = put_or_fail(d, "eta", sd_value_float(sd_value_as_float(in[1])));
    if (!rc) rc = put_or_fail(d, "s_noise", sd_value_float(sd_value_as_float(in[2])));
    if (!rc) rc = put_or_fail(d, "r", sd_value_float(sd_value_as_float(in[3])));
    return done(d, rc, out, err);
}

/* SamplerER_SDE: "ODE" and "Reverse-time SDE" at eta 0 run without noise
 * (eta = s_noise = 0); both non-default types use the x^(eta + 1) scaler. */
static sd_status er_sde_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *st = sd_value_as_string(in[0]);
    int er = st && strcmp(st, "ER-SDE") == 0, ode = st && strcmp(st, "ODE") == 0;
    if (!er && !ode && !(st && strcmp(st, "Reverse-time SDE") == 0))
        return sd_nodes_bad_input(err, "solver_type", "solver_type must be ER-SDE, Reverse-time SDE or ODE, got '%s'", st ? st : "?");
    int64_t max_stage = sd_value_as_int(in[1]);
    if (max_stage < 1 || max_stage > 3) return sd_nodes_bad_input(err, "max_stage", "max_stage must be 1..3");
    double eta = sd_value_as_float(in[2]), s_noise = sd_value_as_float(in[3]);
    if (ode || (!er && eta == 0.0)) eta = s_noise = 0.0;
    sd_value *d = sampler_dict("er_sde");
    sd_status rc = d ? SD_OK : SD_ERR_NOMEM;
    if (!rc) rc = put_or_fail(d, "max_stage", sd_value_int(max_stage));
    if (!rc) rc = put_or_fail(d, "s_noise", sd_value_float(s_noise));
    if (!rc && !er) rc = put_or_fail(d, "eta", sd_value_float(eta));
    if (!rc && !er) rc = put_or_fail(d, "noise_scaler", sd_value_string("reverse_time"));
    return done(d, rc, out, err);
}

/* SamplerSASolver: sa_solver with the window's sigmas from the node's MODEL
 * (get_tau_interval_func(percent_to_sigma(start), percent_to_sigma(end),
 * eta)) and its orders; use_pece runs it as sa_solver_pece. */
static sd_status sa_solver_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    int64_t po = sd_value_as_int(in[5]), co = sd_value_as_int(in[6]);
    if (po < 1 || po > 6) return sd_nodes_bad_input(err, "predictor_order", "predictor_order must be 1..6");
    if (co < 0 || co > 6) return sd_nodes_bad_input(err, "corrector_order", "corrector_order must be 0..6");
    sd_model_sampling *ms = malloc(sizeof *ms);
    if (!ms) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_init(m, ms);
    double start = sd_ms_percent_to_sigma(ms, sd_value_as_float(in[2]));
    double end = sd_ms_percent_to_sigma(ms, sd_value_as_float(in[3]));
    free(ms);
    sd_value *d = sampler_dict("sa_solver");
    rc = d ? SD_OK : SD_ERR_NOMEM;
    if (!rc) rc = put_or_fail(d, "eta", sd_value_float(sd_value_as_float(in[1])));
    if (!rc) rc = put_or_fail(d, "s_noise", sd_value_float(sd_value_as_float(in[4])));
    if (!rc) rc = put_or_fail(d, "tau_start_sigma", sd_value_float(start));
    if (!rc) rc = put_or_fail(d, "tau_end_sigma", sd_value_float(end));
    if (!rc) rc = put_or_fail(d, "predictor_order", sd_value_int(po));
    if (!rc) rc = put_or_fail(d, "corrector_order", sd_value_int(co));
    if (!rc) rc = put_or_fail(d, "use_pece", sd_value_int(sd_value_as_bool(in[7])));
    if (!rc) rc = put_or_fail(d, "simple_order_2", sd_value_int(sd_value_as_bool(in[8])));
    return done(d, rc, out, err);
}

/* SamplerDPMAdaptative: dpm_adaptive with every option of
 * sample_dpm_adaptive. */
static sd_status dpm_adaptive_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"rtol", "atol", "h_init", "pcoeff", "icoeff", "dcoeff", "accept_safety",
                                    "eta", "s_noise"};
    int64_t order = sd_value_as_int(in[0]);
    if (order != 2 && order != 3) return sd_nodes_bad_input(err, "order", "order must be 2 or 3");
    sd_value *d = sampler_dict("dpm_adaptive");
    sd_status rc = d ? SD_OK : SD_ERR_NOMEM;
    if (!rc) rc = put_or_fail(d, "dpm_order", sd_value_int(order));
    for (int i = 0; i < 9 && !rc; i++) rc = put_or_fail(d, k[i], sd_value_float(sd_value_as_float(in[1 + i])));
    return done(d, rc, out, err);
}

/* SamplerEulerCFGpp: "regular" is euler_cfg_pp, "alternative" ComfyUI's
 * sample_euler_pp (a node-only sampler). */
static sd_status euler_cfgpp_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *v = sd_value_as_string(in[0]);
    int alt = v && strcmp(v, "alternative") == 0;
    if (!alt && !(v && strcmp(v, "regular") == 0))
        return sd_nodes_bad_input(err, "version", "version must be regular or alternative, got '%s'", v ? v : "?");
    sd_value *d = sampler_dict(alt ? "euler_pp" : "euler_cfg_pp");
    return done(d, d ? SD_OK : SD_ERR_NOMEM, out, err);
}

/* SamplerLCMUpscale: lcm_upscale with total_upscale = scale_ratio,
 * upscale_steps = scale_steps (-1: ComfyUI's None) and the method. */
static sd_status lcm_upscale_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    double ratio = sd_value_as_float(in[0]);
    int64_t steps = sd_value_as_int(in[1]);
    const char *m = sd_value_as_string(in[2]);
    sd_upscale_method um;
    if (!(ratio >= 0.1 && ratio <= 20.0)) return sd_nodes_bad_input(err, "scale_ratio", "scale_ratio must be 0.1..20");
    if (steps < -1 || steps > 1000) return sd_nodes_bad_input(err, "scale_steps", "scale_steps must be -1..1000");
    if (!m || sd_upscale_method_parse(m, &um) || um == SD_UPSCALE_LANCZOS)
        return sd_nodes_bad_input(err, "upscale_method", "upscale_method must be bislerp, nearest-exact, bilinear, area or "
                                  "bicubic, got '%s'", m ? m : "?");
    sd_value *d = sampler_dict("lcm_upscale");
    sd_status rc = d ? SD_OK : SD_ERR_NOMEM;
    if (!rc) rc = put_or_fail(d, "total_upscale", sd_value_float(ratio));
    if (!rc) rc = put_or_fail(d, "upscale_steps", sd_value_int(steps < 0 ? -1 : steps));
    if (!rc) rc = put_or_fail(d, "upscale_method", sd_value_string(m));
    return done(d, rc, out, err);
}

#define CAT_SAMPLERS "sampling/custom_sampling/samplers"
#define FLOAT_NR(n, d, lo, hi, st) \
    {.name = n, .type = SD_T_FLOAT, .def = d, .min = lo, .max = hi, .step = st, .has_range = 1, .round = SD_ROUND_FALSE}

static const sd_output_def sampler_out[] = {{"SAMPLER", "SAMPLER"}, {0}};

static const char *const seeds_types[] = {"phi_1", "phi_2", NULL};
static const sd_input_def seeds2_inputs[] = {
    {.name = "solver_type", .type = SD_T_COMBO, .options = seeds_types, .def_str = "phi_1", .no_default = 1},
    {.name = "eta", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1,
     .round = SD_ROUND_FALSE, .tooltip = "Stochastic strength"},
    {.name = "s_noise", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1,
     .round = SD_ROUND_FALSE, .tooltip = "SDE noise multiplier"},
    {.name = "r", .type = SD_T_FLOAT, .def = 0.5, .min = 0.01, .max = 1.0, .step = 0.01, .has_range = 1,
     .round = SD_ROUND_FALSE, .tooltip = "Relative step size for the intermediate stage (c2 node)"},
    {0}};
const sd_node_def sd_node_SamplerSEEDS2 = {
    .version = 1, .class_type = "SamplerSEEDS2", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3, .category = CAT_SAMPLERS,
    .description = "This sampler node can represent multiple samplers:\n\n"
            "seeds_2\n"
            "- default setting\n\n"
            "exp_heun_2_x0\n"
            "- solver_type=phi_2, r=1.0, eta=0.0\n\n"
            "exp_heun_2_x0_sde\n"
            "- solver_type=phi_2, r=1.0, eta=1.0, s_noise=1.0",
    .help = "seeds_2 with its solver type (phi_1 / phi_2), eta, s_noise and r.",
    .inputs = seeds2_inputs, .outputs = sampler_out, .run = seeds2_run};

static const char *const er_types[] = {"ER-SDE", "Reverse-time SDE", "ODE", NULL};
static const sd_input_def er_sde_inputs[] = {
    {.name = "solver_type", .type = SD_T_COMBO, .options = er_types, .def_str = "ER-SDE", .no_default = 1},
    {.name = "max_stage", .type = SD_T_INT, .def = 3, .min = 1, .max = 3, .has_range = 1},
    {.name = "eta", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1,
     .round = SD_ROUND_FALSE,
     .tooltip = "Stochastic strength of reverse-time SDE.\nWhen eta=0, it reduces to deterministic ODE. "
                "This setting doesn't apply to ER-SDE solver type."},
    FLOAT_NR("s_noise", 1.0, 0.0, 100.0, 0.01), {0}};
const sd_node_def sd_node_SamplerER_SDE = {
    .version = 1, .class_type = "SamplerER_SDE", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3, .category = CAT_SAMPLERS,
    .help = "er_sde with its solver type (ER-SDE's noise scaler, or the reverse-time SDE's x^(eta + 1); "
            "ODE without noise) and max_stage.",
    .inputs = er_sde_inputs, .outputs = sampler_out, .run = er_sde_run};

static const sd_input_def sa_solver_inputs[] = {
    {.name = "model", .type = "MODEL"},
    FLOAT_NR("eta", 1.0, 0.0, 10.0, 0.01),
    {.name = "sde_start_percent", .type = SD_T_FLOAT, .def = 0.2, .min = 0.0, .max = 1.0, .step = 0.001, .has_range = 1},
    {.name = "sde_end_percent", .type = SD_T_FLOAT, .def = 0.8, .min = 0.0, .max = 1.0, .step = 0.001, .has_range = 1},
    FLOAT_NR("s_noise", 1.0, 0.0, 100.0, 0.01),
    {.name = "predictor_order", .type = SD_T_INT, .def = 3, .min = 1, .max = 6, .has_range = 1},
    {.name = "corrector_order", .type = SD_T_INT, .def = 4, .min = 0, .max = 6, .has_range = 1},
    {.name = "use_pece", .type = SD_T_BOOLEAN, .no_default = 1},
    {.name = "simple_order_2", .type = SD_T_BOOLEAN, .no_default = 1},
    {0}};
const sd_node_def sd_node_SamplerSASolver = {
    .version = 1, .class_type = "SamplerSASolver", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3, .category = CAT_SAMPLERS,
    .help = "sa_solver (SA-Solver) with its orders, PECE, the simple order-2 scheme and its stochastic "
            "window (sde_start/end_percent through the MODEL's sampling, strength eta).",
    .inputs = sa_solver_inputs, .outputs = sampler_out, .run = sa_solver_run};

static const sd_input_def dpm_adaptive_inputs[] = {
    {.name = "order", .type = SD_T_INT, .def = 3, .min = 2, .max = 3, .has_range = 1},
    FLOAT_NR("rtol", 0.05, 0.0, 100.0, 0.01), FLOAT_NR("atol", 0.0078, 0.0, 100.0, 0.01),
    FLOAT_NR("h_init", 0.05, 0.0, 100.0, 0.01), FLOAT_NR("pcoeff", 0.0, 0.0, 100.0, 0.01),
    FLOAT_NR("icoeff", 1.0, 0.0, 100.0, 0.01), FLOAT_NR("dcoeff", 0.0, 0.0, 100.0, 0.01),
    FLOAT_NR("accept_safety", 0.81, 0.0, 100.0, 0.01), FLOAT_NR("eta", 0.0, 0.0, 100.0, 0.01),
    FLOAT_NR("s_noise", 1.0, 0.0, 100.0, 0.01), {0}};
const sd_node_def sd_node_SamplerDPMAdaptative = {
    .version = 1, .class_type = "SamplerDPMAdaptative", .python_module = "comfy_extras.nodes_custom_sampler",
    .flags = SD_NODE_V3, .category = CAT_SAMPLERS,
    .help = "dpm_adaptive (DPM-Solver-12/23 with PID step control) with its order, tolerances, controller "
            "coefficients, and eta / s_noise for ancestral steps.",
    .inputs = dpm_adaptive_inputs, .outputs = sampler_out, .run = dpm_adaptive_run};

static const char *const cfgpp_versions[] = {"regular", "alternative", NULL};
static const sd_input_def euler_cfgpp_inputs[] = {
    {.name = "version", .type = SD_T_COMBO, .options = cfgpp_versions, .def_str = "regular", .no_default = 1}, {0}};
const sd_node_def sd_node_SamplerEulerCFGpp = {
    .version = 1, .class_type = "SamplerEulerCFGpp", .display_name = "SamplerEulerCFG++",
    .python_module = "comfy_extras.nodes_advanced_samplers", .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .category = "_for_testing",
    .help = "Euler CFG++: regular is euler_cfg_pp; alternative steps along x - 2 denoised + uncond_denoised.",
    .inputs = euler_cfgpp_inputs, .outputs = sampler_out, .run = euler_cfgpp_run};

static const char *const lcm_upscale_methods[] = {"bislerp", "nearest-exact", "bilinear", "area", "bicubic", NULL};
static const sd_input_def lcm_upscale_inputs[] = {
    {.name = "scale_ratio", .type = SD_T_FLOAT, .def = 1.0, .min = 0.1, .max = 20.0, .step = 0.01, .has_range = 1},
    {.name = "scale_steps", .type = SD_T_INT, .def = -1, .min = -1, .max = 1000, .step = 1, .has_range = 1},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = lcm_upscale_methods, .def_str = "bislerp",
     .no_default = 1},
    {0}};
const sd_node_def sd_node_SamplerLCMUpscale = {
    .version = 1, .class_type = "SamplerLCMUpscale", .python_module = "comfy_extras.nodes_advanced_samplers",
    .flags = SD_NODE_V3, .category = CAT_SAMPLERS,
    .help = "LCM steps whose prediction is resized (common_upscale with the method) on the first scale_steps "
            "steps (-1: half of them), growing the latent to scale_ratio times its size; its noise continues "
            "the seed's generator after the initial noise, as ComfyUI's randn_like on torch's default one.",
    .inputs = lcm_upscale_inputs, .outputs = sampler_out, .run = lcm_upscale_run};
