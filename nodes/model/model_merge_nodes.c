/* model_merge_nodes.c - ModelMergeSimple / Subtract / Add and
 * CLIPMergeSimple / Subtract / Add (comfy_extras/nodes_model_merging.py) as
 * merge entries on model1's / clip1's patch stack: model1 patched with
 * model2's weights (as model2's own stack patched them), by ComfyUI's
 *   Simple:   add_patches(kp, 1 - ratio, ratio)    W1 * ratio + (1 - ratio) * W2
 *   Subtract: add_patches(kp, -m, m)               W1 * m - m * W2
 *   Add:      add_patches(kp, 1, 1)                W1 + W2
 * Nothing is copied here; the merged weights are computed when the patched
 * view is first needed (nodes/lora/lora_stack.c). The result keeps model1's
 * checkpoint, sampling patches and clip skip, as ComfyUI's model1.clone().
 * CLIP merges leave out position_ids and logit_scale as ComfyUI does; our
 * encoders hold neither as a parameter. */
#include "model_nodes.h"

#include <stdio.h>

#include "models/lora/lora.h"
#include "nodes/loaders/loaders.h"
#include "nodes/lora/lora_nodes.h"

/* Checks that b can be merged into a (some weight in common) and logs the
 * weights left alone because their shapes differ. */
static sd_status check_pair(sd_node_ctx *ctx, sd_unet *ua, sd_unet *ub, const sd_text_encoder *ta,
                            const sd_text_encoder *tb, const char *in2, sd_error *err) {
    size_t matched = sd_lora_merge_matched(ua, ub, ta, tb);
    char names[512];
    size_t bad = sd_lora_merge_unmatched(ua, ub, ta, tb, 4, names, sizeof names);
    if (matched == 0) {
        sd_error_set(err, SD_ERR_INVALID,
                     "%s has no weight of the same name and shape as %s1 (%zu differ in shape: "
                     "%s); a model of another architecture?",
                     in2, ta ? "clip" : "model", bad, bad ? names : "none in common");
        sd_error_at(err, NULL, NULL, in2);
        return SD_ERR_INVALID;
    }
    if (bad)
        sd_node_log(ctx, SD_LOG_WARN, "%zu weights not merged (shapes differ): %s%s", bad, names,
                    bad > 4 ? ", ..." : "");
    return SD_OK;
}

/* model1's and model2's DiTs as their stacks patched them: one kind, some
 * weight in common (as check_pair). */
static sd_status check_dit_pair(sd_node_ctx *ctx, const sd_model_ref *m1, const sd_model_ref *m2,
                                sd_error *err) {
    sd_dmodel d1, d2;
    const char *at = "model1";
    sd_status rc = sd_nodes_model_dmodel(m1, &d1, err);
    if (!rc) at = "model2", rc = sd_nodes_model_dmodel(m2, &d2, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, at);
        return rc;
    }
    if (d1.info.kind != d2.info.kind) {
        sd_error_set(err, SD_ERR_INVALID, "model2 is a %s model and model1 a %s one; merging needs two "
                     "models of one architecture", sd_dmodel_kind_name(d2.info.kind),
                     sd_dmodel_kind_name(d1.info.kind));
        sd_error_at(err, NULL, NULL, "model2");
        return SD_ERR_INVALID;
    }
    char names[512];
    size_t matched = 0;
    size_t bad = sd_lora_merge_dit_unmatched(&d1, &d2, &matched, 4, names, sizeof names);
    if (matched == 0) {
        sd_error_set(err, SD_ERR_INVALID,
                     "model2 has no weight of the same name and shape as model1 (%zu differ in "
                     "shape: %s); a model of another architecture?",
                     bad, bad ? names : "none in common");
        sd_error_at(err, NULL, NULL, "model2");
        return SD_ERR_INVALID;
    }
    if (bad)
        sd_node_log(ctx, SD_LOG_WARN, "%zu weights not merged (shapes differ): %s%s", bad, names,
                    bad > 4 ? ", ..." : "");
    return SD_OK;
}

sd_status sd_nodes_model_merge_push(sd_node_ctx *ctx, sd_value *const *in, double strength,
                                    double strength_model, const sd_lora_ratio *ratios,
                                    int n_ratios, sd_value **out, sd_error *err) {
    sd_model_ref *m1, *m2;
    sd_status rc = sd_nodes_in_model(in, 0, "model1", &m1, err);
    if (!rc) rc = sd_nodes_in_model(in, 1, "model2", &m2, err);
    if (rc) return rc;
    int f1 = sd_nodes_lora_on_dit(m1->ckpt), f2 = sd_nodes_lora_on_dit(m2->ckpt);
    if (f1 != f2) {
        sd_error_set(err, SD_ERR_INVALID, "model2 is %s and model1 %s; merging needs two models of "
                     "one architecture", f2 ? "a DiT" : "a UNet model", f1 ? "a DiT" : "a UNet model");
        sd_error_at(err, NULL, NULL, "model2");
        return SD_ERR_INVALID;
    }
    if (f1) {
        if ((rc = check_dit_pair(ctx, m1, m2, err))) return rc;
    } else {
        sd_unet *u1 = NULL, *u2 = NULL;
        const char *at = "model1";
        rc = sd_checkpoint_unet(m1->ckpt, &u1, err);
        if (!rc) at = "model2", rc = sd_checkpoint_unet(m2->ckpt, &u2, err);
        if (rc) {
            sd_error_at(err, NULL, NULL, at);
            return rc;
        }
        if ((rc = check_pair(ctx, u1, u2, NULL, NULL, "model2", err))) return rc;
    }
    sd_lora_stack *s = NULL;
    if (n_ratios > 0)
        rc = sd_lora_stack_push_merge_blocks(m1->loras, in[1], ratios, n_ratios, &s, err);
    else
        rc = sd_lora_stack_push_merge(m1->loras, in[1], strength, strength_model, &s, err);
    if (rc) return rc;
    out[0] = sd_nodes_model_value_patched(m1->ckpt, s, &m1->patches);
    sd_lora_stack_unref(s);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status clip_merge(sd_node_ctx *ctx, sd_value *const *in, double strength,
                            double strength_model, sd_value **out, sd_error *err) {
    sd_clip_ref *c1, *c2;
    sd_status rc = sd_nodes_in_clip(in, 0, "clip1", &c1, err);
    if (!rc) rc = sd_nodes_in_clip(in, 1, "clip2", &c2, err);
    if (rc) return rc;
    for (int i = 0; i < 2; i++) {
        const sd_clip_ref *c = i ? c2 : c1;
        if (c->n_more > 0 || c->kind) {
            sd_error_set(err, SD_ERR_UNSUPPORTED,
                         "merging a CLIP loaded as a %s text encoder is not supported yet",
                         sd_te_kind_name(c->kind));
            sd_error_at(err, NULL, NULL, i ? "clip2" : "clip1");
            return SD_ERR_UNSUPPORTED;
        }
    }
    sd_text_encoder *t1 = NULL, *t2 = NULL;
    const char *at = "clip1";
    rc = sd_checkpoint_text_encoder(c1->ckpt, &t1, err);
    if (!rc) at = "clip2", rc = sd_checkpoint_text_encoder(c2->ckpt, &t2, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, at);
        return rc;
    }
    if ((rc = check_pair(ctx, NULL, NULL, t1, t2, "clip2", err))) return rc;
    sd_lora_stack *s = NULL;
    if ((rc = sd_lora_stack_push_merge(c1->loras, in[1], strength, strength_model, &s, err))) return rc;
    out[0] = sd_nodes_clip_value_like(c1, c1->clip_skip, s);
    sd_lora_stack_unref(s);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status model_simple_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    double ratio = sd_value_as_float(in[2]);
    return sd_nodes_model_merge_push(ctx, in, 1.0 - ratio, ratio, NULL, 0, out, err);
}
static sd_status model_subtract_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    double m = sd_value_as_float(in[2]);
    return sd_nodes_model_merge_push(ctx, in, -m, m, NULL, 0, out, err);
}
static sd_status model_add_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return sd_nodes_model_merge_push(ctx, in, 1.0, 1.0, NULL, 0, out, err);
}
static sd_status clip_simple_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    double ratio = sd_value_as_float(in[2]);
    return clip_merge(ctx, in, 1.0 - ratio, ratio, out, err);
}
static sd_status clip_subtract_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    double m = sd_value_as_float(in[2]);
    return clip_merge(ctx, in, -m, m, out, err);
}
static sd_status clip_add_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return clip_merge(ctx, in, 1.0, 1.0, out, err);
}

#define RATIO {.name = "ratio", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1}
#define MULT {.name = "multiplier", .type = SD_T_FLOAT, .def = 1.0, .min = -10.0, .max = 10.0, .step = 0.01, .has_range = 1}

static const sd_input_def mm_simple_in[] = {{.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"}, RATIO, {0}};
static const sd_input_def mm_sub_in[] = {{.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"}, MULT, {0}};
static const sd_input_def mm_add_in[] = {{.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"}, {0}};
static const sd_input_def cm_simple_in[] = {{.name = "clip1", .type = "CLIP"}, {.name = "clip2", .type = "CLIP"}, RATIO, {0}};
static const sd_input_def cm_sub_in[] = {{.name = "clip1", .type = "CLIP"}, {.name = "clip2", .type = "CLIP"}, MULT, {0}};
static const sd_input_def cm_add_in[] = {{.name = "clip1", .type = "CLIP"}, {.name = "clip2", .type = "CLIP"}, {0}};
static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};
static const sd_output_def clip_out[] = {{"CLIP", "CLIP"}, {0}};

#define MERGE_NODE(var, type, in, outs, fn, desc) \
    static const sd_node_def var = {.version = 1, .class_type = type, .display_name = type, \
                                    .python_module = "comfy_extras.nodes_model_merging", \
                                    .category = "advanced/model_merging", .help = desc, \
                                    .inputs = in, .outputs = outs, .run = fn}

MERGE_NODE(node_mm_simple, "ModelMergeSimple", mm_simple_in, model_out, model_simple_run,
           "model1 * ratio + model2 * (1 - ratio), weight by weight (ratio 1 = model1); "
           "model1's LoRAs before, model2's own LoRAs inside.");
MERGE_NODE(node_mm_sub, "ModelMergeSubtract", mm_sub_in, model_out, model_subtract_run,
           "(model1 - model2) * multiplier, weight by weight (a difference to add elsewhere).");
MERGE_NODE(node_mm_add, "ModelMergeAdd", mm_add_in, model_out, model_add_run,
           "model1 + model2, weight by weight (adds a difference from ModelMergeSubtract).");
MERGE_NODE(node_cm_simple, "CLIPMergeSimple", cm_simple_in, clip_out, clip_simple_run,
           "clip1 * ratio + clip2 * (1 - ratio), weight by weight (ratio 1 = clip1).");
MERGE_NODE(node_cm_sub, "CLIPMergeSubtract", cm_sub_in, clip_out, clip_subtract_run,
           "(clip1 - clip2) * multiplier, weight by weight.");
MERGE_NODE(node_cm_add, "CLIPMergeAdd", cm_add_in, clip_out, clip_add_run,
           "clip1 + clip2, weight by weight.");

const sd_node_def *const sd_nodes_model_merge[] = {&node_mm_simple, &node_mm_sub, &node_mm_add,
                                                   &node_cm_simple, &node_cm_sub, &node_cm_add,
                                                   NULL};
