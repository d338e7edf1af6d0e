/* model_patch_nodes.c - ModelSamplingDiscrete, ModelSamplingContinuousEDM,
 * ModelSamplingContinuousV, ModelSamplingFlux,
 * ModelSamplingAuraFlow, ModelSamplingSD3, RescaleCFG and SkipLayerGuidanceSD3 (comfy_extras/nodes_model_advanced.py) as data on the MODEL
 * handle. */
#include "model_nodes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nodes/image/image.h" /* SD_MAX_RESOLUTION */
#include "nodes/loaders/loaders.h"

/* A new MODEL value: m with patches p. */
static sd_status model_with(const sd_model_ref *m, const sd_model_patches *p, sd_value **out,
                            sd_error *err) {
    *out = sd_nodes_model_value_patched(m->ckpt, m->loras, p);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status model_sampling_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                    sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const char *name = sd_value_as_string(in[1]);
    int kind = sd_prediction_parse(name);
    if (kind < 0) {
        sd_error_set(err, SD_ERR_INVALID,
                     "unknown sampling '%s' (eps, v_prediction, lcm, x0 or img_to_img)",
                     name ? name : "");
        sd_error_at(err, NULL, NULL, "sampling");
        return SD_ERR_INVALID;
    }
    /* ComfyUI replaces the whole model_sampling object: a later
     * ModelSamplingDiscrete overrides an earlier one */
    sd_model_patches p = m->patches;
    p.sampling_set = 1;
    p.sampling_base = SD_MS_DISCRETE;
    p.sampling = (sd_prediction)kind;
    p.zsnr = sd_value_as_bool(in[2]);
    return model_with(m, &p, &out[0], err);
}

/* ModelSamplingContinuousEDM (cont_v = 0) and ModelSamplingContinuousV
 * (cont_v = 1): a continuous log-spaced schedule between sigma_min and
 * sigma_max replacing the model_sampling object. EDM's choices: "eps",
 * "v_prediction" (sigma_data 1), "edm" (sigma_data 0.5), "cosmos_rflow"
 * (ModelSamplingCosmosRFlow); "edm_playground_v2.5" also swaps the latent
 * format for Playground's per-channel one, which sdflow does not have: it is
 * refused by name. */
static sd_status model_sampling_continuous(sd_value *const *in, int cont_v, sd_value **out, sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const char *name = sd_value_as_string(in[1]);
    name = name ? name : "";
    sd_model_patches p = m->patches;
    p.sampling_base = cont_v ? SD_MS_CONT_V : SD_MS_CONT_EDM;
    p.sigma_data = 1.0;
    if (!strcmp(name, "v_prediction")) p.sampling = SD_PRED_V;
    else if (!cont_v && !strcmp(name, "eps")) p.sampling = SD_PRED_EPS;
    else if (!cont_v && !strcmp(name, "edm")) p.sampling = SD_PRED_EDM, p.sigma_data = 0.5;
    else if (!cont_v && !strcmp(name, "cosmos_rflow")) p.sampling = SD_PRED_COSMOS_RFLOW, p.sampling_base = SD_MS_COSMOS;
    else if (!cont_v && !strcmp(name, "edm_playground_v2.5")) {
        sd_error_set(err, SD_ERR_UNSUPPORTED,
                     "sampling 'edm_playground_v2.5' is not supported: it needs Playground v2.5's "
                     "per-channel latent format, which sdflow does not have (use 'edm')");
        sd_error_at(err, NULL, NULL, "sampling");
        return SD_ERR_UNSUPPORTED;
    } else {
        sd_error_set(err, SD_ERR_INVALID, "unknown sampling '%s' (%s)", name,
                     cont_v ? "v_prediction" : "v_prediction, edm, edm_playground_v2.5, eps or cosmos_rflow");
        sd_error_at(err, NULL, NULL, "sampling");
        return SD_ERR_INVALID;
    }
    p.sampling_set = 1;
    p.zsnr = 0;
    p.sigma_max = sd_value_as_float(in[2]);
    p.sigma_min = sd_value_as_float(in[3]);
    /* log(0) would make every sigma 0 or inf: ComfyUI's math.log raises */
    if (!(p.sigma_min > 0.0) || !(p.sigma_max > 0.0)) {
        sd_error_set(err, SD_ERR_INVALID, "sigma_min and sigma_max must be above 0 (math domain error in ComfyUI)");
        sd_error_at(err, NULL, NULL, p.sigma_min > 0.0 ? "sigma_max" : "sigma_min");
        return SD_ERR_INVALID;
    }
    return model_with(m, &p, &out[0], err);
}

static sd_status model_sampling_edm_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return model_sampling_continuous(in, 0, out, err);
}

static sd_status model_sampling_v_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return model_sampling_continuous(in, 1, out, err);
}

/* ModelSamplingFlux: ModelSamplingFlux + CONST with the shift of the
 * resolution (a line through (256, base_shift) and (4096, max_shift) over
 * the number of 2x2 latent patches), replacing the model_sampling object. */
static sd_status model_sampling_flux_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                         sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    p.sampling_set = 1;
    p.sampling_base = SD_MS_FLUX;
    p.sampling = SD_PRED_CONST;
    p.zsnr = 0;
    p.shift = sd_ms_flux_shift(sd_value_as_float(in[1]), sd_value_as_float(in[2]),
                               (int)sd_value_as_int(in[3]), (int)sd_value_as_int(in[4]));
    p.multiplier = 1.0;
    return model_with(m, &p, &out[0], err);
}

/* ModelSamplingAuraFlow: ModelSamplingSD3.patch(shift, multiplier=1.0), a
 * ModelSamplingDiscreteFlow + CONST replacing the model_sampling object
 * (Z-Image's and AuraFlow's timesteps are sigma itself). */
static sd_status model_sampling_aura_flow_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                              sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    p.sampling_set = 1;
    p.sampling_base = SD_MS_FLOW;
    p.sampling = SD_PRED_CONST;
    p.zsnr = 0;
    p.shift = sd_value_as_float(in[1]);
    p.multiplier = 1.0;
    return model_with(m, &p, &out[0], err);
}

/* ModelSamplingSD3: ModelSamplingDiscreteFlow + CONST with `shift` and
 * SD3's multiplier 1000 (timestep = sigma * 1000), replacing the
 * model_sampling object. */
static sd_status model_sampling_sd3_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                        sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    p.sampling_set = 1;
    p.sampling_base = SD_MS_FLOW;
    p.sampling = SD_PRED_CONST;
    p.zsnr = 0;
    p.shift = sd_value_as_float(in[1]);
    p.multiplier = 1000.0;
    return model_with(m, &p, &out[0], err);
}

/* SkipLayerGuidanceSD3 (comfy_extras/nodes_sd3.py, SkipLayerGuidanceDiT with
 * double_layers = layers): a post-CFG function on the MODEL. The layer
 * numbers are every run of digits in `layers` (re.findall(r'\d+')); none
 * leaves the MODEL as it is. The sigma window comes from the MODEL's
 * sampling as it is at this node (model_sampling.percent_to_sigma). */
static sd_status slg_sd3_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const char *layers = sd_value_as_string(in[1]);
    sd_cfg_slg slg;
    memset(&slg, 0, sizeof slg);
    for (const char *p = layers ? layers : ""; *p;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        /* a number too long for an int names no block: it skips nothing */
        long long v = 0;
        int big = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v > 100000000) big = 1;
            else v = v * 10 + (*p - '0');
        }
        if (slg.n_skip == SD_CFG_MAX_SKIP) {
            sd_error_set(err, SD_ERR_INVALID, "more than %d layers to skip", SD_CFG_MAX_SKIP);
            sd_error_at(err, NULL, NULL, "layers");
            return SD_ERR_INVALID;
        }
        slg.skip[slg.n_skip++] = big ? INT32_MAX : (int)v;
    }
    if (slg.n_skip == 0) {
        out[0] = sd_value_ref(in[0]);
        return SD_OK;
    }
    sd_model_patches p = m->patches;
    if (p.cfg.n_post == SD_CFG_MAX_POST)
        return sd_error_set(err, SD_ERR_INVALID, "more than %d skip layer guidance nodes on one MODEL",
                            SD_CFG_MAX_POST);
    sd_model_sampling *ms = malloc(sizeof *ms); /* ~100 KiB: not on the stack */
    if (!ms) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_of(m->ckpt, &m->patches, ms);
    slg.scale = sd_value_as_float(in[2]);
    slg.sigma_start = sd_ms_percent_to_sigma(ms, sd_value_as_float(in[3]));
    slg.sigma_end = sd_ms_percent_to_sigma(ms, sd_value_as_float(in[4]));
    free(ms);
    p.cfg.post[p.cfg.n_post++] = slg;
    return model_with(m, &p, &out[0], err);
}

static sd_status rescale_cfg_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    /* set_model_sampler_cfg_function: one cfg function per MODEL, the last
     * one set wins */
    sd_model_patches p = m->patches;
    p.cfg.rescale = 1;
    p.cfg.fn = SD_CFG_FN_NONE;
    p.cfg.multiplier = sd_value_as_float(in[1]);
    return model_with(m, &p, &out[0], err);
}

static const char *const sampling_kinds[] = {"eps", "v_prediction", "lcm", "x0", "img_to_img",
                                             NULL};

static const sd_input_def model_sampling_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "sampling", .type = SD_T_COMBO, .options = sampling_kinds, .def_str = "eps", .no_default = 1},
    {.name = "zsnr", .type = SD_T_BOOLEAN, .def = 0},
    {0}};
static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};

static const sd_node_def node_model_sampling_discrete = {
    .version = 1,
    .class_type = "ModelSamplingDiscrete",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "ModelSamplingDiscrete",
    .category = "advanced/model",
    .help = "Overrides how the model's output is read (eps, v_prediction, lcm, x0, "
            "img_to_img) and optionally rescales the noise schedule to zero terminal "
            "SNR (zsnr).",
    .inputs = model_sampling_inputs,
    .outputs = model_out,
    .run = model_sampling_run,
};

static const char *const edm_kinds[] = {"v_prediction", "edm", "edm_playground_v2.5", "eps", "cosmos_rflow",
                                        NULL};
static const sd_input_def model_sampling_edm_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "sampling", .type = SD_T_COMBO, .options = edm_kinds, .def_str = "v_prediction", .no_default = 1},
    {.name = "sigma_max", .type = SD_T_FLOAT, .def = 120.0, .min = 0.0, .max = 1000.0, .step = 0.001,
     .round = SD_ROUND_FALSE, .has_range = 1},
    {.name = "sigma_min", .type = SD_T_FLOAT, .def = 0.002, .min = 0.0, .max = 1000.0, .step = 0.001,
     .round = SD_ROUND_FALSE, .has_range = 1},
    {0}};

static const sd_node_def node_model_sampling_edm = {
    .version = 1,
    .class_type = "ModelSamplingContinuousEDM",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "ModelSamplingContinuousEDM",
    .category = "advanced/model",
    .help = "A continuous noise schedule: 1000 sigmas log-spaced from sigma_min to sigma_max, "
            "timestep 0.25 ln(sigma), read as eps, v_prediction, edm (sigma_data 0.5, the model "
            "term added) or cosmos_rflow (timestep sigma/(sigma+1)); for EDM-trained models "
            "(SDXL EDM2 / CosXL, Stable Cascade-style). edm_playground_v2.5 is refused: it needs "
            "Playground's latent format.",
    .inputs = model_sampling_edm_inputs,
    .outputs = model_out,
    .run = model_sampling_edm_run,
};

static const char *const v_kinds[] = {"v_prediction", NULL};
static const sd_input_def model_sampling_v_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "sampling", .type = SD_T_COMBO, .options = v_kinds, .def_str = "v_prediction", .no_default = 1},
    {.name = "sigma_max", .type = SD_T_FLOAT, .def = 500.0, .min = 0.0, .max = 1000.0, .step = 0.001,
     .round = SD_ROUND_FALSE, .has_range = 1},
    {.name = "sigma_min", .type = SD_T_FLOAT, .def = 0.03, .min = 0.0, .max = 1000.0, .step = 0.001,
     .round = SD_ROUND_FALSE, .has_range = 1},
    {0}};

static const sd_node_def node_model_sampling_v = {
    .version = 1,
    .class_type = "ModelSamplingContinuousV",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "ModelSamplingContinuousV",
    .category = "advanced/model",
    .help = "A continuous v-prediction noise schedule: 1000 sigmas log-spaced from sigma_min to "
            "sigma_max, timestep atan(sigma) * 2 / pi.",
    .inputs = model_sampling_v_inputs,
    .outputs = model_out,
    .run = model_sampling_v_run,
};

static const sd_input_def model_sampling_flux_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "max_shift", .type = SD_T_FLOAT, .def = 1.15, .min = 0.0, .max = 100.0, .step = 0.01,
     .has_range = 1},
    {.name = "base_shift", .type = SD_T_FLOAT, .def = 0.5, .min = 0.0, .max = 100.0, .step = 0.01,
     .has_range = 1},
    {.name = "width", .type = SD_T_INT, .def = 1024, .min = 16, .max = SD_MAX_RESOLUTION, .step = 8,
     .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 1024, .min = 16, .max = SD_MAX_RESOLUTION, .step = 8,
     .has_range = 1},
    {0}};

static const sd_node_def node_model_sampling_flux = {
    .version = 1,
    .class_type = "ModelSamplingFlux",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "ModelSamplingFlux",
    .category = "advanced/model",
    .help = "Flow-matching sampling with Flux's resolution-dependent shift: "
            "shift = base_shift + (max_shift - base_shift) * (width*height/256 - 256) / 3840.",
    .inputs = model_sampling_flux_inputs,
    .outputs = model_out,
    .run = model_sampling_flux_run,
};

static const sd_input_def model_sampling_aura_flow_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "shift", .type = SD_T_FLOAT, .def = 1.73, .min = 0.0, .max = 100.0, .step = 0.01,
     .has_range = 1},
    {0}};

static const sd_node_def node_model_sampling_aura_flow = {
    .version = 1,
    .class_type = "ModelSamplingAuraFlow",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "ModelSamplingAuraFlow",
    .category = "advanced/model",
    .help = "Flow-matching sampling with a fixed shift (Z-Image, AuraFlow): "
            "sigma(t) = shift*t / (1 + (shift-1)*t), timestep = sigma.",
    .inputs = model_sampling_aura_flow_inputs,
    .outputs = model_out,
    .run = model_sampling_aura_flow_run,
};

static const sd_input_def model_sampling_sd3_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "shift", .type = SD_T_FLOAT, .def = 3.0, .min = 0.0, .max = 100.0, .step = 0.01,
     .has_range = 1},
    {0}};

static const sd_node_def node_model_sampling_sd3 = {
    .version = 1,
    .class_type = "ModelSamplingSD3",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "ModelSamplingSD3",
    .category = "advanced/model",
    .help = "Flow-matching sampling with SD3's shifted schedule: sigma(t) = shift*t / "
            "(1 + (shift - 1)*t), timestep = sigma * 1000.",
    .inputs = model_sampling_sd3_inputs,
    .outputs = model_out,
    .run = model_sampling_sd3_run,
};

static const sd_input_def slg_sd3_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "layers", .type = SD_T_STRING, .multiline = 0, .def_str = "7, 8, 9"},
    {.name = "scale", .type = SD_T_FLOAT, .def = 3.0, .min = 0.0, .max = 10.0, .step = 0.1, .has_range = 1},
    {.name = "start_percent", .type = SD_T_FLOAT, .def = 0.01, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {.name = "end_percent", .type = SD_T_FLOAT, .def = 0.15, .min = 0.0, .max = 1.0, .step = 0.001,
     .has_range = 1},
    {0}};

static const sd_node_def node_slg_sd3 = {
    .version = 1,
    .class_type = "SkipLayerGuidanceSD3",
    .python_module = "comfy_extras.nodes_sd3",
    .category = "advanced/guidance",
    .description = "Generic version of SkipLayerGuidance node that can be used on every DiT model.",
    .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3,
    .inputs = slg_sd3_inputs,
    .outputs = model_out,
    .run = slg_sd3_run,
};

static const sd_input_def rescale_cfg_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "multiplier", .type = SD_T_FLOAT, .def = 0.7, .min = 0.0, .max = 1.0, .step = 0.01,
     .has_range = 1},
    {0}};

static const sd_node_def node_rescale_cfg = {
    .version = 1,
    .class_type = "RescaleCFG",
    .python_module = "comfy_extras.nodes_model_advanced",
    .display_name = "RescaleCFG",
    .category = "advanced/model",
    .help = "Rescales the CFG result (in v space) to the standard deviation of the "
            "positive prediction, mixed by multiplier (for v-prediction / zsnr models).",
    .inputs = rescale_cfg_inputs,
    .outputs = model_out,
    .run = rescale_cfg_run,
};

const sd_node_def *const sd_nodes_model_patch[] = {&node_model_sampling_discrete,
                                                   &node_model_sampling_edm, &node_model_sampling_v,
                                                   &node_model_sampling_flux,
                                                   &node_model_sampling_aura_flow, &node_model_sampling_sd3,
                                                   &node_rescale_cfg, &node_slg_sd3, NULL};
