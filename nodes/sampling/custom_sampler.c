/* custom_sampler.c - ComfyUI's custom-sampling nodes that make SAMPLER,
 * NOISE and GUIDER values, and the two samplers that consume them
 * (SamplerCustom, SamplerCustomAdvanced). The sampling run is KSampler's
 * (sd_nodes_sample in ksampler.c), so the same settings give the same
 * latent bit for bit. Values: see custom.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

/* ---- value helpers ------------------------------------------------------------------------- */

static sd_status nomem(sd_value *v, sd_error *err) {
    sd_value_unref(v);
    return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* Sets key to a new value (taken); on failure releases both. */
static int put(sd_value *d, const char *key, sd_value *v) {
    if (!v) return -1;
    if (sd_value_dict_set(d, key, v)) {
        sd_value_unref(v);
        return -1;
    }
    return 0;
}

/* SAMPLER input -> sampler name and options. */
static sd_status in_sampler(sd_value *v, const char *input, sd_sample_args *a, sd_error *err) {
    return sd_nodes_sampler_options(v, input, &a->sampler_name, &a->options, err);
}

static sd_status in_noise(sd_value *v, sd_sample_args *a, sd_error *err) {
    sd_value *tv = v && sd_value_kind_of(v) == SD_VAL_DICT ? sd_value_dict_get(v, "noise_type") : NULL;
    const char *t = tv ? sd_value_as_string(tv) : NULL;
    sd_value *seed = t ? sd_value_dict_get(v, "seed") : NULL;
    if (!t || !seed || (strcmp(t, "random") && strcmp(t, "empty")))
        return sd_nodes_bad_input(err, "noise", "noise must be a NOISE (from RandomNoise or DisableNoise)");
    a->add_noise = strcmp(t, "random") == 0;
    a->seed = (uint64_t)sd_value_as_int(seed);
    return SD_OK;
}

static sd_status in_guider(sd_value *v, sd_sample_args *a, sd_error *err) {
    sd_value *kv = v && sd_value_kind_of(v) == SD_VAL_DICT ? sd_value_dict_get(v, "guider") : NULL;
    const char *k = kv ? sd_value_as_string(kv) : NULL;
    sd_value *mv = k ? sd_value_dict_get(v, "model") : NULL;
    sd_model_ref *m = mv ? sd_value_as_handle(mv, &sd_handle_model) : NULL;
    if (!m) return sd_nodes_bad_input(err, "guider", "guider must be a GUIDER (from CFGGuider, BasicGuider, DualCFGGuider or PerpNegGuider)");
    sd_guide *g = &a->guide;
    if (!strcmp(k, "cfg")) g->kind = SD_GUIDE_CFG;
    else if (!strcmp(k, "basic")) g->kind = SD_GUIDE_BASIC;
    else if (!strcmp(k, "dual_cfg")) g->kind = SD_GUIDE_DUAL_CFG;
    else if (!strcmp(k, "perp_neg")) g->kind = SD_GUIDE_PERP_NEG;
    else return sd_nodes_bad_input(err, "guider", "unknown guider '%s'", k);
    g->ckpt = m->ckpt;
    g->loras = m->loras;
    g->patches = &m->patches;
    g->positive = sd_value_dict_get(v, "positive");
    g->negative = sd_value_dict_get(v, "negative");
    g->middle = sd_value_dict_get(v, "middle");
    sd_value *o;
    if ((o = sd_value_dict_get(v, "cfg"))) g->cfg = sd_value_as_float(o);
    if ((o = sd_value_dict_get(v, "cfg2"))) g->cfg2 = sd_value_as_float(o);
    if ((o = sd_value_dict_get(v, "style"))) g->nested = sd_value_as_string(o) && !strcmp(sd_value_as_string(o), "nested");
    return SD_OK;
}

static sd_status in_latent(sd_value *const *in, int i, sd_error *err) {
    if (in[i] && sd_value_kind_of(in[i]) == SD_VAL_DICT) return SD_OK;
    return sd_nodes_bad_input(err, "latent_image", "latent_image must be a LATENT");
}

/* ---- SAMPLER nodes ------------------------------------------------------------------------- */

/* A SAMPLER for `name` with the node's float options (NULL-terminated
 * names aligned with in[first...]). */
static sd_status make_sampler(const char *name, const char *const *keys, sd_value *const *in,
                              sd_value **out, sd_error *err) {
    sd_value *d = sd_value_dict();
    if (!d || put(d, "sampler_name", sd_value_string(name))) return nomem(d, err);
    for (int i = 0; keys && keys[i]; i++) {
        sd_value *v = sd_value_kind_of(in[i]) == SD_VAL_INT && strcmp(keys[i], "order") == 0
                          ? sd_value_int(sd_value_as_int(in[i]))
                      : sd_value_kind_of(in[i]) == SD_VAL_STRING ? sd_value_string(sd_value_as_string(in[i]))
                                                                 : sd_value_float(sd_value_as_float(in[i]));
        if (put(d, keys[i], v)) return nomem(d, err);
    }
    *out = d;
    return SD_OK;
}

static sd_status ksampler_select_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                     sd_error *err) {
    (void)ctx;
    const char *name = sd_value_as_string(in[0]);
    if (!name || !sd_sampler_find(name)) return sd_nodes_bad_input(err, "sampler_name", "unknown sampler '%s'", name ? name : "?");
    return make_sampler(name, NULL, in, out, err);
}

/* noise_device "cpu" picks the plain name, "gpu" the _gpu one (the same
 * numbers here: the Brownian tree is computed on the CPU either way). */
static const char *device_name(sd_value *dev, const char *cpu, const char *gpu) {
    const char *d = sd_value_as_string(dev);
    return d && strcmp(d, "cpu") == 0 ? cpu : gpu;
}

static sd_status euler_anc_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"eta", "s_noise", NULL};
    return make_sampler("euler_ancestral", k, in, out, err);
}
static sd_status euler_anc_cfgpp_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                     sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"eta", "s_noise", NULL};
    return make_sampler("euler_ancestral_cfg_pp", k, in, out, err);
}
static sd_status dpmpp_2s_anc_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"eta", "s_noise", NULL};
    return make_sampler("dpmpp_2s_ancestral", k, in, out, err);
}
static sd_status lms_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"order", NULL};
    return make_sampler("lms", k, in, out, err);
}
static sd_status dpmpp_3m_sde_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"eta", "s_noise", NULL};
    return make_sampler(device_name(in[2], "dpmpp_3m_sde", "dpmpp_3m_sde_gpu"), k, in, out, err);
}
static sd_status dpmpp_2m_sde_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"solver_type", "eta", "s_noise", NULL};
    return make_sampler(device_name(in[3], "dpmpp_2m_sde", "dpmpp_2m_sde_gpu"), k, in, out, err);
}
static sd_status dpmpp_sde_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    static const char *const k[] = {"eta", "s_noise", "r", NULL};
    return make_sampler(device_name(in[3], "dpmpp_sde", "dpmpp_sde_gpu"), k, in, out, err);
}

/* ---- NOISE --------------------------------------------------------------------------------- */

static sd_status noise_value(const char *type, int64_t seed, sd_value **out, sd_error *err) {
    sd_value *d = sd_value_dict();
    if (!d || put(d, "noise_type", sd_value_string(type)) || put(d, "seed", sd_value_int(seed)))
        return nomem(d, err);
    *out = d;
    return SD_OK;
}
static sd_status random_noise_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    (void)ctx;
    return noise_value("random", sd_value_as_int(in[0]), out, err);
}
static sd_status disable_noise_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    (void)ctx;
    (void)in;
    return noise_value("empty", 0, out, err);
}

/* ---- GUIDER -------------------------------------------------------------------------------- */

/* A GUIDER dict; conds and model are checked and referenced. */
static sd_status guider_value(const char *kind, sd_value *const *in, int i_model,
                              const char *const *cond_keys, const int *cond_idx,
                              const char *const *cond_inputs, int ncond, sd_value **out,
                              sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, i_model, "model", &m, err);
    if (rc) return rc;
    sd_value *conds[3];
    for (int c = 0; c < ncond; c++)
        if ((rc = sd_nodes_in_conditioning(in, cond_idx[c], cond_inputs[c], &conds[c], err))) return rc;
    sd_value *d = sd_value_dict();
    if (!d || put(d, "guider", sd_value_string(kind)) || put(d, "model", sd_value_ref(in[i_model])))
        return nomem(d, err);
    for (int c = 0; c < ncond; c++)
        if (put(d, cond_keys[c], sd_value_ref(conds[c]))) return nomem(d, err);
    *out = d;
    return SD_OK;
}

static sd_status basic_guider_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    (void)ctx;
    static const char *const keys[] = {"positive"}, *const inputs[] = {"conditioning"};
    static const int idx[] = {1};
    return guider_value("basic", in, 0, keys, idx, inputs, 1, out, err);
}

static sd_status cfg_guider_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    static const char *const keys[] = {"positive", "negative"}, *const inputs[] = {"positive", "negative"};
    static const int idx[] = {1, 2};
    sd_status rc = guider_value("cfg", in, 0, keys, idx, inputs, 2, out, err);
    if (!rc && put(*out, "cfg", sd_value_float(sd_value_as_float(in[3])))) rc = nomem(*out, err);
    return rc;
}

static sd_status dual_guider_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    (void)ctx;
    static const char *const keys[] = {"positive", "middle", "negative"},
                             *const inputs[] = {"cond1", "cond2", "negative"};
    static const int idx[] = {1, 2, 3};
    sd_status rc = guider_value("dual_cfg", in, 0, keys, idx, inputs, 3, out, err);
    const char *style = sd_value_as_string(in[6]);
    if (!rc && (put(*out, "cfg", sd_value_float(sd_value_as_float(in[4]))) ||
                put(*out, "cfg2", sd_value_float(sd_value_as_float(in[5]))) ||
                put(*out, "style", sd_value_string(style ? style : "regular"))))
        rc = nomem(*out, err);
    return rc;
}

/* Guider_PerpNeg (comfy_extras/nodes_perpneg.py): the empty conditioning
 * rides in the middle slot, neg_scale in cfg2 (sd_guide). */
static sd_status perp_neg_guider_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    static const char *const keys[] = {"positive", "negative", "middle"},
                             *const inputs[] = {"positive", "negative", "empty_conditioning"};
    static const int idx[] = {1, 2, 3};
    sd_status rc = guider_value("perp_neg", in, 0, keys, idx, inputs, 3, out, err);
    if (!rc && (put(*out, "cfg", sd_value_float(sd_value_as_float(in[4]))) ||
                put(*out, "cfg2", sd_value_float(sd_value_as_float(in[5])))))
        rc = nomem(*out, err);
    return rc;
}

/* ---- the samplers ---------------------------------------------------------------------------- */

static sd_status sampler_custom_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                    sd_error *err) {
    sd_sample_args a;
    sd_sample_args_init(&a);
    sd_model_ref *m;
    sd_value *pos, *neg;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 4, "positive", &pos, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 5, "negative", &neg, err);
    if (!rc) rc = in_sampler(in[6], "sampler", &a, err);
    if (!rc) rc = sd_nodes_in_sigmas(in, 7, "sigmas", &a.sigmas, &a.n_sigmas, err);
    if (!rc) rc = in_latent(in, 8, err);
    if (rc) return rc;
    a.guide.kind = SD_GUIDE_CFG;
    a.guide.ckpt = m->ckpt;
    a.guide.loras = m->loras;
    a.guide.patches = &m->patches;
    a.guide.positive = pos;
    a.guide.negative = neg;
    a.guide.cfg = sd_value_as_float(in[3]);
    a.add_noise = sd_value_as_bool(in[1]);
    a.seed = (uint64_t)sd_value_as_int(in[2]); /* seeds the sampler even without noise */
    a.latent = in[8];
    return sd_nodes_sample(ctx, &a, &out[0], &out[1], err);
}

static sd_status sampler_custom_adv_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                        sd_error *err) {
    sd_sample_args a;
    sd_sample_args_init(&a);
    sd_status rc = in_noise(in[0], &a, err);
    if (!rc) rc = in_guider(in[1], &a, err);
    if (!rc) rc = in_sampler(in[2], "sampler", &a, err);
    if (!rc) rc = sd_nodes_in_sigmas(in, 3, "sigmas", &a.sigmas, &a.n_sigmas, err);
    if (!rc) rc = in_latent(in, 4, err);
    if (rc) return rc;
    a.latent = in[4];
    return sd_nodes_sample(ctx, &a, &out[0], &out[1], err);
}

/* ---- definitions ---------------------------------------------------------------------------- */

#define SEED_MAX 18446744073709551615.0
#define CAT_SAMPLERS "sampling/custom_sampling/samplers"
/* rnd: ComfyUI's round (SD_ROUND_FALSE for its sampler settings, 0.01 for cfg) */
#define FLOAT_IN(n, d, lo, hi, st, rnd) \
    {.name = n, .type = SD_T_FLOAT, .def = d, .min = lo, .max = hi, .step = st, .has_range = 1, .round = rnd}
#define DEF(ct, dn, cat, desc, ins, outs, fn) \
    const sd_node_def sd_node_##ct = {.version = 1, .class_type = #ct, .display_name = dn, \
                                      .python_module = "comfy_extras.nodes_custom_sampler", \
                                      .flags = SD_NODE_V3, .category = cat, .help = desc, \
                                      .inputs = ins, .outputs = outs, .run = fn}

static const char *const gpu_cpu[] = {"gpu", "cpu", NULL};
static const char *const midpoint_heun[] = {"midpoint", "heun", NULL};
static const char *const regular_nested[] = {"regular", "nested", NULL};

static const sd_output_def sampler_out[] = {{"SAMPLER", "SAMPLER"}, {0}};
static const sd_output_def noise_out[] = {{"NOISE", "NOISE"}, {0}};
static const sd_output_def guider_out[] = {{"GUIDER", "GUIDER"}, {0}};
static const sd_output_def two_latents[] = {{"output", "LATENT"}, {"denoised_output", "LATENT"}, {0}};

static const sd_input_def select_inputs[] = {
    {.name = "sampler_name", .type = SD_T_COMBO, .options_fn = sd_nodes_sampler_names, .def_str = "euler",
     .no_default = 1}, {0}};
DEF(KSamplerSelect, NULL, CAT_SAMPLERS, "One of KSampler's samplers, with its default options.",
    select_inputs, sampler_out, ksampler_select_run);

static const sd_input_def eta_snoise[] = {
    FLOAT_IN("eta", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE), FLOAT_IN("s_noise", 1.0, 0.0, 100.0, 0.01,
    SD_ROUND_FALSE), {0}};
DEF(SamplerEulerAncestral, NULL, CAT_SAMPLERS, "euler_ancestral with eta and s_noise.",
    eta_snoise, sampler_out, euler_anc_run);
DEF(SamplerDPMPP_2S_Ancestral, NULL, CAT_SAMPLERS,
    "dpmpp_2s_ancestral with eta and s_noise.", eta_snoise, sampler_out, dpmpp_2s_anc_run);

static const sd_input_def cfgpp_inputs[] = {
    FLOAT_IN("eta", 1.0, 0.0, 1.0, 0.01, SD_ROUND_FALSE), FLOAT_IN("s_noise", 1.0, 0.0, 10.0, 0.01, SD_ROUND_FALSE),
    {0}};
DEF(SamplerEulerAncestralCFGPP, "SamplerEulerAncestralCFG++", CAT_SAMPLERS,
    "euler_ancestral_cfg_pp with eta and s_noise.", cfgpp_inputs, sampler_out, euler_anc_cfgpp_run);

static const sd_input_def lms_inputs[] = {
    {.name = "order", .type = SD_T_INT, .def = 4, .min = 1, .max = 100, .has_range = 1}, {0}};
DEF(SamplerLMS, NULL, CAT_SAMPLERS, "lms with its order.", lms_inputs, sampler_out, lms_run);

static const sd_input_def sde3_inputs[] = {
    FLOAT_IN("eta", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE), FLOAT_IN("s_noise", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE),
    {.name = "noise_device", .type = SD_T_COMBO, .options = gpu_cpu, .def_str = "gpu", .no_default = 1}, {0}};
DEF(SamplerDPMPP_3M_SDE, NULL, CAT_SAMPLERS,
    "dpmpp_3m_sde (noise_device gpu: dpmpp_3m_sde_gpu) with eta and s_noise.", sde3_inputs,
    sampler_out, dpmpp_3m_sde_run);

static const sd_input_def sde2_inputs[] = {
    {.name = "solver_type", .type = SD_T_COMBO, .options = midpoint_heun, .def_str = "midpoint", .no_default = 1},
    FLOAT_IN("eta", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE), FLOAT_IN("s_noise", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE),
    {.name = "noise_device", .type = SD_T_COMBO, .options = gpu_cpu, .def_str = "gpu", .no_default = 1}, {0}};
DEF(SamplerDPMPP_2M_SDE, NULL, CAT_SAMPLERS,
    "dpmpp_2m_sde (noise_device gpu: dpmpp_2m_sde_gpu) with solver_type, eta and s_noise.",
    sde2_inputs, sampler_out, dpmpp_2m_sde_run);

static const sd_input_def sde_inputs[] = {
    FLOAT_IN("eta", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE), FLOAT_IN("s_noise", 1.0, 0.0, 100.0, 0.01, SD_ROUND_FALSE),
    FLOAT_IN("r", 0.5, 0.0, 100.0, 0.01, SD_ROUND_FALSE),
    {.name = "noise_device", .type = SD_T_COMBO, .options = gpu_cpu, .def_str = "gpu", .no_default = 1}, {0}};
DEF(SamplerDPMPP_SDE, NULL, CAT_SAMPLERS,
    "dpmpp_sde (noise_device gpu: dpmpp_sde_gpu) with eta, s_noise and r.", sde_inputs, sampler_out,
    dpmpp_sde_run);

static const sd_input_def random_noise_inputs[] = {
    {.name = "noise_seed", .type = SD_T_INT, .def = 0, .min = 0, .max = SEED_MAX, .has_range = 1}, {0}};
static const sd_input_def no_inputs[] = {{0}};
DEF(RandomNoise, NULL, "sampling/custom_sampling/noise",
    "The initial noise KSampler makes from a seed (prepare_noise over the whole batch).",
    random_noise_inputs, noise_out, random_noise_run);
DEF(DisableNoise, NULL, "sampling/custom_sampling/noise",
    "Zero initial noise (for a latent that is already noisy).", no_inputs, noise_out, disable_noise_run);

#define CAT_GUIDERS "sampling/custom_sampling/guiders"
static const sd_input_def basic_guider_inputs[] = {
    {.name = "model", .type = "MODEL"}, {.name = "conditioning", .type = "CONDITIONING"}, {0}};
DEF(BasicGuider, NULL, CAT_GUIDERS, "The model on one conditioning, without CFG.",
    basic_guider_inputs, guider_out, basic_guider_run);
static const sd_input_def cfg_guider_inputs[] = {
    {.name = "model", .type = "MODEL"}, {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"}, FLOAT_IN("cfg", 8.0, 0.0, 100.0, 0.1, 0.01), {0}};
DEF(CFGGuider, NULL, CAT_GUIDERS, "Classifier-free guidance, as KSampler's.", cfg_guider_inputs,
    guider_out, cfg_guider_run);
static const sd_input_def dual_guider_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "cond1", .type = "CONDITIONING"},
    {.name = "cond2", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    FLOAT_IN("cfg_conds", 8.0, 0.0, 100.0, 0.1, 0.01),
    FLOAT_IN("cfg_cond2_negative", 8.0, 0.0, 100.0, 0.1, 0.01),
    {.name = "style", .type = SD_T_COMBO, .options = regular_nested, .def_str = "regular", .no_default = 1},
    {0}};
DEF(DualCFGGuider, NULL, CAT_GUIDERS,
    "Two CFG scales: cond1 against cond2 (cfg_conds) and cond2 against negative "
    "(cfg_cond2_negative); nested applies one inside the other.",
    dual_guider_inputs, guider_out, dual_guider_run);

static const sd_input_def perp_neg_guider_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "empty_conditioning", .type = "CONDITIONING"},
    FLOAT_IN("cfg", 8.0, 0.0, 100.0, 0.1, 0.01),
    FLOAT_IN("neg_scale", 1.0, 0.0, 100.0, 0.01, 0.0),
    {0}};
static const sd_node_def sd_node_PerpNegGuider = {
    .version = 1,
    .class_type = "PerpNegGuider",
    .python_module = "comfy_extras.nodes_perpneg",
    .category = "_for_testing",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "Perp-Neg guidance: the positive, negative and empty conditioning evaluated together; the guidance "
            "is the positive minus the part of the negative perpendicular to it (times neg_scale), both taken "
            "against the empty prediction, scaled by cfg.",
    .inputs = perp_neg_guider_inputs,
    .outputs = guider_out,
    .run = perp_neg_guider_run,
};

static const sd_input_def sampler_custom_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "add_noise", .type = SD_T_BOOLEAN, .def = 1},
    {.name = "noise_seed", .type = SD_T_INT, .def = 0, .min = 0, .max = SEED_MAX, .has_range = 1},
    FLOAT_IN("cfg", 8.0, 0.0, 100.0, 0.1, 0.01),
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "sampler", .type = "SAMPLER"},
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "latent_image", .type = "LATENT"},
    {0}};
DEF(SamplerCustom, NULL, "sampling/custom_sampling",
    "KSampler with the sampler and sigmas given as inputs; also returns the last denoised estimate.",
    sampler_custom_inputs, two_latents, sampler_custom_run);
static const sd_input_def sampler_custom_adv_inputs[] = {
    {.name = "noise", .type = "NOISE"},   {.name = "guider", .type = "GUIDER"},
    {.name = "sampler", .type = "SAMPLER"}, {.name = "sigmas", .type = "SIGMAS"},
    {.name = "latent_image", .type = "LATENT"}, {0}};
DEF(SamplerCustomAdvanced, NULL, "sampling/custom_sampling",
    "Samples with a NOISE, GUIDER, SAMPLER and SIGMAS; also returns the last denoised estimate.",
    sampler_custom_adv_inputs, two_latents, sampler_custom_adv_run);

extern const sd_node_def sd_node_BasicScheduler, sd_node_KarrasScheduler, sd_node_ExponentialScheduler,
    sd_node_PolyexponentialScheduler, sd_node_SDTurboScheduler, sd_node_BetaSamplingScheduler,
    sd_node_AlignYourStepsScheduler, sd_node_GITSScheduler, sd_node_OptimalStepsScheduler,
    sd_node_SplitSigmas, sd_node_SplitSigmasDenoise,
    sd_node_FlipSigmas, sd_node_LaplaceScheduler, sd_node_VPScheduler, sd_node_ManualSigmas,
    sd_node_SetFirstSigma, sd_node_ExtendIntermediateSigmas, sd_node_SamplingPercentToSigma, sd_node_AddNoise,
    sd_node_SamplerSEEDS2, sd_node_SamplerER_SDE, sd_node_SamplerEulerCFGpp, sd_node_SamplerSASolver,
    sd_node_SamplerDPMAdaptative, sd_node_SamplerLCMUpscale;

const sd_node_def *const sd_nodes_custom_sampling[] = {
    &sd_node_SamplerCustom, &sd_node_SamplerCustomAdvanced, &sd_node_KSamplerSelect,
    &sd_node_SamplerEulerAncestral, &sd_node_SamplerEulerAncestralCFGPP, &sd_node_SamplerLMS,
    &sd_node_SamplerDPMPP_3M_SDE, &sd_node_SamplerDPMPP_2M_SDE, &sd_node_SamplerDPMPP_SDE,
    &sd_node_SamplerDPMPP_2S_Ancestral, &sd_node_RandomNoise, &sd_node_DisableNoise,
    &sd_node_BasicGuider, &sd_node_CFGGuider, &sd_node_DualCFGGuider, &sd_node_PerpNegGuider,
    &sd_node_BasicScheduler,
    &sd_node_KarrasScheduler, &sd_node_ExponentialScheduler, &sd_node_PolyexponentialScheduler,
    &sd_node_SDTurboScheduler, &sd_node_BetaSamplingScheduler, &sd_node_AlignYourStepsScheduler,
    &sd_node_GITSScheduler, &sd_node_OptimalStepsScheduler,
    &sd_node_SplitSigmas, &sd_node_SplitSigmasDenoise, &sd_node_FlipSigmas,
    &sd_node_LaplaceScheduler, &sd_node_VPScheduler, &sd_node_ManualSigmas, &sd_node_SetFirstSigma,
    &sd_node_ExtendIntermediateSigmas, &sd_node_SamplingPercentToSigma, &sd_node_AddNoise,
    &sd_node_SamplerSEEDS2, &sd_node_SamplerER_SDE, &sd_node_SamplerEulerCFGpp, &sd_node_SamplerSASolver,
    &sd_node_SamplerDPMAdaptative, &sd_node_SamplerLCMUpscale, NULL};
