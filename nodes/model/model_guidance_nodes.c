/* model_guidance_nodes.c - MODEL / CLIP patch nodes on a clone of the
 * input (which stays untouched):
 *   FreeU, FreeU_V2 (comfy_extras/nodes_freelunch.py): a patch appended to
 *     the MODEL's UNet patch list (sd_model_patches.unet, models/unet/unet.h);
 *   UNetSelfAttentionMultiply, UNetCrossAttentionMultiply,
 *     CLIPAttentionMultiply (comfy_extras/nodes_attention_multiply.py): a
 *     weight scale pushed on the handle's weight-patch stack
 *     (sd_lora_stack_push_scale), in order with LoRAs and merges. */
#include "model_nodes.h"

#include <string.h>

#include "nodes/conditioning/conditioning.h"
#include "nodes/loaders/loaders.h"
#include "nodes/lora/lora_nodes.h"

/* A new MODEL: m with patch pt appended to its UNet patches. ComfyUI's
 * patches read the UNet's config (unet_config["model_channels"]), which a
 * DiT's MODEL has not: refused here, naming the family. */
static sd_status add_unet_patch(const sd_model_ref *m, const sd_unet_patch *pt, const char *node, sd_value **out,
                                sd_error *err) {
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s patches a UNet (SD1, SD2, SDXL); %s has none", node,
                            sd_checkpoint_path(m->ckpt));
    sd_model_patches p = m->patches;
    sd_status rc = sd_unet_patches_add(&p.unet, pt, err);
    if (rc) return rc;
    *out = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status freeu_common(sd_value *const *in, sd_value **out, sd_unet_patch_kind kind, const char *node,
                              sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_unet_patch pt;
    memset(&pt, 0, sizeof pt);
    pt.kind = kind;
    for (int i = 0; i < 4; i++) pt.p[i] = sd_value_as_float(in[1 + i]); /* b1, b2, s1, s2 */
    return add_unet_patch(m, &pt, node, &out[0], err);
}

static sd_status freeu_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return freeu_common(in, out, SD_UNET_PATCH_FREEU, "FreeU", err);
}

static sd_status freeu_v2_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return freeu_common(in, out, SD_UNET_PATCH_FREEU_V2, "FreeU_V2", err);
}

/* ---- PerturbedAttentionGuidance -------------------------------------------------------- */

/* A post-CFG function (SD_CFG_POST_PAG, models/sampling/guider.h): the
 * guider adds (cond - p) * scale, p the positive prediction with the
 * middle block's self-attention replaced by v. A DiT has no such block
 * (ComfyUI's replace patch is then never called and p equals the cond
 * prediction): its MODEL passes through. */
static sd_status pag_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL) {
        out[0] = sd_value_ref(in[0]);
        return SD_OK;
    }
    sd_model_patches p = m->patches;
    if (p.cfg.n_post == SD_CFG_MAX_POST)
        return sd_error_set(err, SD_ERR_INVALID, "more than %d post-CFG functions on one MODEL", SD_CFG_MAX_POST);
    sd_cfg_slg *f = &p.cfg.post[p.cfg.n_post++];
    memset(f, 0, sizeof *f);
    f->kind = SD_CFG_POST_PAG;
    f->scale = sd_value_as_float(in[1]);
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- SelfAttentionGuidance ------------------------------------------------------------------ */

/* Two patches, as ComfyUI's node sets them: the middle block's first
 * self-attention replaced by the recording one (set_model_attn1_replace
 * "middle", 0, 0) and the post-CFG function SD_CFG_POST_SAG
 * (models/sampling/guider.h), which also turns the cfg 1 shortcut off. A
 * DiT has no such block: ComfyUI's function then fails on the scores it
 * never got, refused here. */
static sd_status sag_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "SelfAttentionGuidance reads a UNet's middle-block attention (SD1, SD2, SDXL); %s "
                            "has none", sd_checkpoint_path(m->ckpt));
    sd_model_patches p = m->patches;
    if (p.cfg.n_post == SD_CFG_MAX_POST)
        return sd_error_set(err, SD_ERR_INVALID, "more than %d post-CFG functions on one MODEL", SD_CFG_MAX_POST);
    sd_unet_patch rec = {.kind = SD_UNET_PATCH_ATTN1_RECORD, .block = SD_UNET_BLOCK_MIDDLE, .block_id = 0,
                         .index = 0};
    if ((rc = sd_unet_patches_add(&p.unet, &rec, err))) return rc;
    sd_cfg_slg *f = &p.cfg.post[p.cfg.n_post++];
    memset(f, 0, sizeof *f);
    f->kind = SD_CFG_POST_SAG;
    f->scale = sd_value_as_float(in[1]);
    f->blur_sigma = sd_value_as_float(in[2]);
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- post-CFG functions that recombine the predictions ------------------------------------ */

/* A new MODEL with post-CFG function (kind, scale) appended (ComfyUI's
 * set_model_sampler_post_cfg_function). */
static sd_status add_post(sd_value *const *in, int kind, double scale, sd_value **out, sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    if (p.cfg.n_post == SD_CFG_MAX_POST)
        return sd_error_set(err, SD_ERR_INVALID, "more than %d post-CFG functions on one MODEL", SD_CFG_MAX_POST);
    sd_cfg_slg *f = &p.cfg.post[p.cfg.n_post++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->scale = scale;
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status cfg_zero_star_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return add_post(in, SD_CFG_POST_ZERO_STAR, 0.0, out, err);
}

static sd_status cfg_norm_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return add_post(in, SD_CFG_POST_NORM, sd_value_as_float(in[1]), out, err);
}

static sd_status epsilon_scaling_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    double f = sd_value_as_float(in[1]);
    if (f == 0) f = 1e-9; /* as ComfyUI guards the division */
    return add_post(in, SD_CFG_POST_EPS, f, out, err);
}

static sd_status mahiro_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return add_post(in, SD_CFG_POST_MAHIRO, 0.0, out, err);
}

/* ---- sampler CFG functions (set_model_sampler_cfg_function: the last one set wins) --------- */

static sd_status renorm_cfg_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    p.cfg.rescale = 0;
    p.cfg.fn = SD_CFG_FN_RENORM;
    p.cfg.fn_param[0] = sd_value_as_float(in[1]);
    p.cfg.fn_param[1] = sd_value_as_float(in[2]);
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* The empty conditioning rides on the MODEL (its patches hold a reference)
 * and is evaluated at every step (models/sampling/guider.h,
 * SD_CFG_FN_PERP_NEG). */
static sd_status perp_neg_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_value *empty;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 1, "empty_conditioning", &empty, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    p.cfg.rescale = 0;
    p.cfg.fn = SD_CFG_FN_PERP_NEG;
    p.cfg.fn_param[0] = sd_value_as_float(in[2]);
    p.perp_neg_empty = empty;
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- pre-CFG functions ---------------------------------------------------------------------- */

/* A new MODEL with pre-CFG function kind (parameters pm) appended (ComfyUI's
 * set_model_sampler_pre_cfg_function); with_state: the function keeps a
 * state between evaluations (sd_cfg_state), new here and shared by every
 * MODEL made from the new one. */
static sd_status add_pre(sd_value *const *in, int kind, const double pm[3], int with_state, sd_value **out,
                         sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    if (p.cfg.n_pre == SD_CFG_MAX_PRE)
        return sd_error_set(err, SD_ERR_INVALID, "more than %d pre-CFG functions on one MODEL", SD_CFG_MAX_PRE);
    int k = p.cfg.n_pre++;
    memset(&p.cfg.pre[k], 0, sizeof p.cfg.pre[k]);
    p.cfg.pre_kind[k] = kind;
    for (int i = 0; i < 3; i++) p.cfg.pre_param[k][i] = pm ? pm[i] : 0.0;
    p.cfg.state[k] = NULL;
    if (with_state && !(p.cfg.state[k] = sd_cfg_state_new()))
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    sd_cfg_state_unref(p.cfg.state[k]); /* the new MODEL holds its own reference */
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status apg_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const double pm[3] = {sd_value_as_float(in[1]), sd_value_as_float(in[2]), sd_value_as_float(in[3])};
    return add_pre(in, SD_CFG_PRE_APG, pm, 1, out, err);
}

static sd_status fresca_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const double pm[3] = {sd_value_as_float(in[1]), sd_value_as_float(in[2]), (double)sd_value_as_int(in[3])};
    return add_pre(in, SD_CFG_PRE_FRESCA, pm, 0, out, err);
}

static sd_status tcfg_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    return add_pre(in, SD_CFG_PRE_TCFG, NULL, 0, out, err);
}

/* ---- DifferentialDiffusion ------------------------------------------------------------ */

/* set_model_denoise_mask_function: one per MODEL, the last one set wins. */
static sd_status diff_diff_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_model_patches p = m->patches;
    p.diff_diff = 1;
    p.diff_diff_strength = in[1] ? sd_value_as_float(in[1]) : 1.0;
    out[0] = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- attention multipliers ------------------------------------------------------------ */

/* The four factors q, k, v, out (inputs 1..4) on the keys ending with
 * <prefix>{to_q, to_k, to_v, to_out.0}.{weight, bias} (UNet) or
 * self_attn.{q,k,v,out}_proj.{weight, bias} (CLIP). */
static void attention_scale(sd_value *const *in, int clip, const char *attn, sd_lora_scale *sc) {
    static const char *const unet1[8] = {"attn1.to_q.weight", "attn1.to_q.bias", "attn1.to_k.weight",
                                         "attn1.to_k.bias", "attn1.to_v.weight", "attn1.to_v.bias",
                                         "attn1.to_out.0.weight", "attn1.to_out.0.bias"};
    static const char *const unet2[8] = {"attn2.to_q.weight", "attn2.to_q.bias", "attn2.to_k.weight",
                                         "attn2.to_k.bias", "attn2.to_v.weight", "attn2.to_v.bias",
                                         "attn2.to_out.0.weight", "attn2.to_out.0.bias"};
    static const char *const te[8] = {"self_attn.q_proj.weight", "self_attn.q_proj.bias",
                                      "self_attn.k_proj.weight", "self_attn.k_proj.bias",
                                      "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                                      "self_attn.out_proj.weight", "self_attn.out_proj.bias"};
    const char *const *names = clip ? te : !strcmp(attn, "attn1") ? unet1 : unet2;
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < 8; i++) {
        sc->suffix[sc->n] = names[i];
        sc->factor[sc->n++] = sd_value_as_float(in[1 + i / 2]);
    }
}

static sd_status unet_attention_multiply(sd_value *const *in, sd_value **out, const char *attn, sd_error *err) {
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL) {
        /* no key of a DiT ends with attn1.to_q.weight & co: ComfyUI's clone
         * carries no patch */
        out[0] = sd_value_ref(in[0]);
        return SD_OK;
    }
    sd_lora_scale sc;
    attention_scale(in, 0, attn, &sc);
    sd_lora_stack *st = NULL;
    if ((rc = sd_lora_stack_push_scale(m->loras, &sc, &st, err))) return rc;
    out[0] = sd_nodes_model_value_patched(m->ckpt, st, &m->patches);
    sd_lora_stack_unref(st);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status unet_self_attention_multiply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                                  sd_error *err) {
    (void)ctx;
    return unet_attention_multiply(in, out, "attn1", err);
}

static sd_status unet_cross_attention_multiply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                                   sd_error *err) {
    (void)ctx;
    return unet_attention_multiply(in, out, "attn2", err);
}

static sd_status clip_attention_multiply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                             sd_error *err) {
    (void)ctx;
    sd_clip_ref *c;
    sd_status rc = sd_nodes_in_clip(in, 0, "clip", &c, err);
    if (rc) return rc;
    sd_lora_scale sc;
    attention_scale(in, 1, NULL, &sc);
    sd_lora_stack *st = NULL;
    if ((rc = sd_lora_stack_push_scale(c->loras, &sc, &st, err))) return rc;
    out[0] = sd_nodes_clip_value_like(c, c->clip_skip, st);
    sd_lora_stack_unref(st);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

#define FREEU_IN(nm, d)                                                                                    \
    {.name = nm, .type = SD_T_FLOAT, .def = d, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1}

static const sd_input_def freeu_inputs[] = {
    {.name = "model", .type = "MODEL"}, FREEU_IN("b1", 1.1), FREEU_IN("b2", 1.2), FREEU_IN("s1", 0.9),
    FREEU_IN("s2", 0.2), {0}};
static const sd_input_def freeu_v2_inputs[] = {
    {.name = "model", .type = "MODEL"}, FREEU_IN("b1", 1.3), FREEU_IN("b2", 1.4), FREEU_IN("s1", 0.9),
    FREEU_IN("s2", 0.2), {0}};
static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};
static const sd_output_def clip_out[] = {{"CLIP", "CLIP"}, {0}};

static const sd_input_def unet_attn_mult_inputs[] = {
    {.name = "model", .type = "MODEL"}, FREEU_IN("q", 1.0), FREEU_IN("k", 1.0), FREEU_IN("v", 1.0),
    FREEU_IN("out", 1.0), {0}};
static const sd_input_def clip_attn_mult_inputs[] = {
    {.name = "clip", .type = "CLIP"}, FREEU_IN("q", 1.0), FREEU_IN("k", 1.0), FREEU_IN("v", 1.0),
    FREEU_IN("out", 1.0), {0}};

static const sd_input_def pag_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scale", .type = SD_T_FLOAT, .def = 3.0, .min = 0.0, .max = 100.0, .step = 0.01, .round = 0.01,
     .has_range = 1},
    {0}};

static const sd_node_def node_pag = {
    .version = 1,
    .class_type = "PerturbedAttentionGuidance",
    .python_module = "comfy_extras.nodes_pag",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "Perturbed-attention guidance: after CFG, adds (cond - p) * scale, p the positive prediction with "
            "the UNet's middle-block self-attention replaced by its value projection (one more UNet pass per "
            "step). A DiT MODEL passes through.",
    .inputs = pag_inputs,
    .outputs = model_out,
    .run = pag_run,
};

static const sd_input_def sag_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scale", .type = SD_T_FLOAT, .def = 0.5, .min = -2.0, .max = 5.0, .step = 0.01, .has_range = 1},
    {.name = "blur_sigma", .type = SD_T_FLOAT, .def = 2.0, .min = 0.0, .max = 10.0, .step = 0.1, .has_range = 1},
    {0}};

static const sd_node_def node_sag = {
    .version = 1,
    .class_type = "SelfAttentionGuidance",
    .python_module = "comfy_extras.nodes_sag",
    .display_name = "Self-Attention Guidance",
    .category = "_for_testing",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "Self-attention guidance: records the UNet's middle-block self-attention of the negative pass, blurs "
            "the negative prediction (Gaussian, blur_sigma) where that attention is strong, and after CFG adds "
            "(blurred - p) * scale, p the negative prediction of the blurred image re-noised (one more UNet "
            "pass per step; the negative is evaluated at cfg 1 too). Needs a negative conditioning; UNet models "
            "only.",
    .inputs = sag_inputs,
    .outputs = model_out,
    .run = sag_run,
};

static const sd_input_def model_only_inputs[] = {{.name = "model", .type = "MODEL"}, {0}};
static const sd_output_def patched_model_out[] = {{"patched_model", "MODEL"}, {0}};
static const sd_input_def cfg_norm_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1},
    {0}};
static const sd_input_def eps_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scaling_factor", .type = SD_T_FLOAT, .def = 1.005, .min = 0.5, .max = 1.5, .step = 0.001,
     .has_range = 1, .display = "number"},
    {0}};

static const sd_input_def apg_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "eta", .type = SD_T_FLOAT, .def = 1.0, .min = -10.0, .max = 10.0, .step = 0.01, .has_range = 1,
     .tooltip = "Controls the scale of the parallel guidance vector. Default CFG behavior at a setting of 1."},
    {.name = "norm_threshold", .type = SD_T_FLOAT, .def = 5.0, .min = 0.0, .max = 50.0, .step = 0.1, .has_range = 1,
     .tooltip = "Normalize guidance vector to this value, normalization disable at a setting of 0."},
    {.name = "momentum", .type = SD_T_FLOAT, .def = 0.0, .min = -5.0, .max = 1.0, .step = 0.01, .has_range = 1,
     .tooltip = "Controls a running average of guidance during diffusion, disabled at a setting of 0."},
    {0}};

/* momentum 0 keeps no running average: nothing carries between runs */
static int apg_stateless(sd_value *const *lit) {
    return lit[3] && sd_value_as_float(lit[3]) == 0.0;
}

static const sd_node_def node_apg = {
    .version = 1,
    .class_type = "APG",
    .python_module = "comfy_extras.nodes_apg",
    .display_name = "Adaptive Projected Guidance",
    .category = "sampling/custom_sampling",
    /* the momentum's running average lives with the MODEL, across runs */
    .flags = SD_NODE_V3 | SD_NODE_PROCESS_STATE,
    .stateless = apg_stateless,
    .help = "Adaptive projected guidance (a pre-CFG function): the guidance cond - uncond, optionally averaged "
            "over the steps (momentum) and norm-limited, with its part along the positive prediction scaled by "
            "eta. As in ComfyUI the running average belongs to the patched MODEL: it carries into the next "
            "sampling run of that MODEL (a second sampler continuing the schedule, a rerun in the same "
            "process) and restarts when the sigma rises. With momentum != 0, the results of the samplers "
            "using it stay out of the persistent cache (docs/cache.md).",
    .inputs = apg_inputs,
    .outputs = model_out,
    .run = apg_run,
};

static const sd_node_def node_tcfg = {
    .version = 1,
    .class_type = "TCFG",
    .python_module = "comfy_extras.nodes_tcfg",
    .display_name = "Tangential Damping CFG",
    .category = "advanced/guidance",
    .description = "TCFG \u2013 Tangential Damping CFG (2503.18137)\n\nRefine the uncond (negative) to align with the "
                   "cond (positive) for improving quality.",
    .flags = SD_NODE_V3,
    .inputs = model_only_inputs,
    .outputs = patched_model_out,
    .run = tcfg_run,
};

static const sd_input_def renorm_cfg_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "cfg_trunc", .type = SD_T_FLOAT, .def = 100.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1},
    {.name = "renorm_cfg", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1},
    {0}};

static const sd_node_def node_renorm_cfg = {
    .version = 1,
    .class_type = "RenormCFG",
    .python_module = "comfy_extras.nodes_lumina2",
    .category = "advanced/model",
    .flags = SD_NODE_V3,
    .help = "Lumina 2's renormalised CFG (a sampler CFG function): below sigma cfg_trunc the CFG result, scaled "
            "down to renorm_cfg times the positive prediction's norm when larger (renorm_cfg 0: not limited); "
            "above it the positive prediction alone. Batches of one latent when renorm_cfg > 0.",
    .inputs = renorm_cfg_inputs,
    .outputs = model_out,
    .run = renorm_cfg_run,
};

static const sd_input_def perp_neg_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "empty_conditioning", .type = "CONDITIONING"},
    {.name = "neg_scale", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1},
    {0}};

static const sd_node_def node_perp_neg = {
    .version = 1,
    .class_type = "PerpNeg",
    .python_module = "comfy_extras.nodes_perpneg",
    .display_name = "Perp-Neg (DEPRECATED by PerpNegGuider)",
    .category = "_for_testing",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL | SD_NODE_DEPRECATED,
    .help = "Perp-Neg as a sampler CFG function: one more model call per step on empty_conditioning; the "
            "guidance is the positive minus the part of the negative perpendicular to it (times neg_scale), "
            "both against the empty prediction. Replaced by PerpNegGuider.",
    .inputs = perp_neg_inputs,
    .outputs = model_out,
    .run = perp_neg_run,
};

static const sd_input_def fresca_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scale_low", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1,
     .tooltip = "Scaling factor for low-frequency components"},
    {.name = "scale_high", .type = SD_T_FLOAT, .def = 1.25, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1,
     .tooltip = "Scaling factor for high-frequency components"},
    {.name = "freq_cutoff", .type = SD_T_INT, .def = 20, .min = 1, .max = 10000, .step = 1, .has_range = 1,
     .tooltip = "Number of frequency indices around center to consider as low-frequency"},
    {0}};

static const sd_node_def node_fresca = {
    .version = 1,
    .class_type = "FreSca",
    .python_module = "comfy_extras.nodes_fresca",
    .display_name = "FreSca",
    .category = "_for_testing",
    .description = "Applies frequency-dependent scaling to the guidance",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "A pre-CFG function: the guidance cond - uncond through a 2-D Fourier filter, its low frequencies "
            "(freq_cutoff around the centre of each spatial dimension) times scale_low, the rest times "
            "scale_high. Nothing without a negative prediction.",
    .inputs = fresca_inputs,
    .outputs = model_out,
    .run = fresca_run,
};

static const sd_input_def diff_diff_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1,
     .optional = 1},
    {0}};

static const sd_node_def node_diff_diff = {
    .version = 1,
    .class_type = "DifferentialDiffusion",
    .python_module = "comfy_extras.nodes_differential_diffusion",
    .display_name = "Differential Diffusion",
    .category = "_for_testing",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "With a noise mask, each step regenerates only where the mask reaches the step's threshold (the "
            "timestep's position in the run), blended with the soft mask by strength < 1.",
    .inputs = diff_diff_inputs,
    .outputs = model_out,
    .run = diff_diff_run,
};

static const sd_node_def node_cfg_zero_star = {
    .version = 1,
    .class_type = "CFGZeroStar",
    .python_module = "comfy_extras.nodes_cfg",
    .category = "advanced/guidance",
    .flags = SD_NODE_V3,
    .help = "CFG-Zero*: after CFG, rescales the unconditional part by the per-item projection of the "
            "positive on the negative prediction (in noise space).",
    .inputs = model_only_inputs,
    .outputs = patched_model_out,
    .run = cfg_zero_star_run,
};

static const sd_node_def node_cfg_norm = {
    .version = 1,
    .class_type = "CFGNorm",
    .python_module = "comfy_extras.nodes_cfg",
    .category = "advanced/guidance",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "After CFG, scales each pixel's prediction down to at most the positive prediction's channel norm, "
            "times strength.",
    .inputs = cfg_norm_inputs,
    .outputs = patched_model_out,
    .run = cfg_norm_run,
};

static const sd_node_def node_epsilon_scaling = {
    .version = 1,
    .class_type = "Epsilon Scaling",
    .python_module = "comfy_extras.nodes_eps",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "Epsilon scaling (exposure bias): after CFG, the predicted noise x - denoised divided by "
            "scaling_factor.",
    .inputs = eps_inputs,
    .outputs = model_out,
    .run = epsilon_scaling_run,
};

static const sd_node_def node_mahiro = {
    .version = 1,
    .class_type = "Mahiro",
    .python_module = "comfy_extras.nodes_mahiro",
    .display_name = "Mahiro CFG",
    .category = "_for_testing",
    .description = "Modify the guidance to scale more on the 'direction' of the positive prompt rather than the "
                   "difference between the negative prompt.",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .inputs = model_only_inputs,
    .outputs = patched_model_out,
    .run = mahiro_run,
};

static const sd_node_def node_unet_self_attention_multiply = {
    .version = 1,
    .class_type = "UNetSelfAttentionMultiply",
    .python_module = "comfy_extras.nodes_attention_multiply",
    .category = "_for_testing/attention_experiments",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "Multiplies the UNet's self-attention (attn1) q, k, v and output projection weights and biases "
            "(a weight patch, in order with LoRAs and merges). A DiT MODEL passes through.",
    .inputs = unet_attn_mult_inputs,
    .outputs = model_out,
    .run = unet_self_attention_multiply_run,
};

static const sd_node_def node_unet_cross_attention_multiply = {
    .version = 1,
    .class_type = "UNetCrossAttentionMultiply",
    .python_module = "comfy_extras.nodes_attention_multiply",
    .category = "_for_testing/attention_experiments",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "Multiplies the UNet's cross-attention (attn2) q, k, v and output projection weights and biases "
            "(a weight patch, in order with LoRAs and merges). A DiT MODEL passes through.",
    .inputs = unet_attn_mult_inputs,
    .outputs = model_out,
    .run = unet_cross_attention_multiply_run,
};

static const sd_node_def node_clip_attention_multiply = {
    .version = 1,
    .class_type = "CLIPAttentionMultiply",
    .python_module = "comfy_extras.nodes_attention_multiply",
    .category = "_for_testing/attention_experiments",
    .flags = SD_NODE_V3 | SD_NODE_EXPERIMENTAL,
    .help = "Multiplies the text encoder's self-attention q, k, v and output projection weights and biases "
            "(a weight patch on the CLIP, in order with LoRAs).",
    .inputs = clip_attn_mult_inputs,
    .outputs = clip_out,
    .run = clip_attention_multiply_run,
};

static const sd_node_def node_freeu = {
    .version = 1,
    .class_type = "FreeU",
    .python_module = "comfy_extras.nodes_freelunch",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "FreeU: in the UNet's output blocks of model_channels*4 (b1, s1) and *2 (b2, s2) channels, the "
            "first half of the backbone features times b and the skip's lowest frequencies times s.",
    .inputs = freeu_inputs,
    .outputs = model_out,
    .run = freeu_run,
};

static const sd_node_def node_freeu_v2 = {
    .version = 1,
    .class_type = "FreeU_V2",
    .python_module = "comfy_extras.nodes_freelunch",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "FreeU v2: as FreeU, the backbone scaled by (b - 1) * m + 1 with m the normalised channel mean.",
    .inputs = freeu_v2_inputs,
    .outputs = model_out,
    .run = freeu_v2_run,
};

const sd_node_def *const sd_nodes_model_guidance[] = {&node_freeu,
                                                      &node_freeu_v2,
                                                      &node_pag,
                                                      &node_sag,
                                                      &node_cfg_zero_star,
                                                      &node_cfg_norm,
                                                      &node_epsilon_scaling,
                                                      &node_mahiro,
                                                      &node_apg,
                                                      &node_tcfg,
                                                      &node_fresca,
                                                      &node_renorm_cfg,
                                                      &node_perp_neg,
                                                      &node_diff_diff,
                                                      &node_unet_self_attention_multiply,
                                                      &node_unet_cross_attention_multiply,
                                                      &node_clip_attention_multiply,
                                                      NULL};
