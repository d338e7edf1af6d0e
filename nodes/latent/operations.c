/* operations.c - LATENT_OPERATION values and the nodes that make and apply
 * them (comfy_extras/nodes_latent.py): LatentOperationSharpen,
 * LatentOperationTonemapReinhard, LatentApplyOperation,
 * LatentApplyOperationCFG.
 *
 * In ComfyUI a LATENT_OPERATION is a Python closure; here it is plain data,
 * a dict {"operation": "sharpen" | "tonemap_reinhard", and its settings},
 * so that it can be cached and keyed like any other value. The arithmetic is
 * models/image/latentops.h; LatentApplyOperationCFG puts the operation on
 * the MODEL's pre-CFG list (models/sampling/guider.h, sd_cfg_hook), which
 * the samplers apply to each evaluation's predictions. */
#include <string.h>

#include "latent.h"
#include "models/image/latentops.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

static const sd_output_def op_out[] = {{"LATENT_OPERATION", "LATENT_OPERATION"}, {0}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};
static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};

/* ---- the value ------------------------------------------------------------------------- */

static sd_status op_value(const sd_latent_op *op, sd_value **out, sd_error *err) {
    sd_value *d = sd_value_dict();
    int bad = !d;
    if (!bad && op->kind == SD_LATENT_OP_SHARPEN) {
        bad = sd_value_dict_set(d, "operation", sd_value_string("sharpen")) ||
              sd_value_dict_set(d, "sharpen_radius", sd_value_int(op->radius)) ||
              sd_value_dict_set(d, "sigma", sd_value_float(op->sigma)) ||
              sd_value_dict_set(d, "alpha", sd_value_float(op->alpha));
    } else if (!bad) {
        bad = sd_value_dict_set(d, "operation", sd_value_string("tonemap_reinhard")) ||
              sd_value_dict_set(d, "multiplier", sd_value_float(op->multiplier));
    }
    if (bad) { sd_value_unref(d); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    *out = d;
    return SD_OK;
}

/* The operation input i back as an sd_latent_op. */
static sd_status in_op(sd_value *const *in, int i, sd_latent_op *op, sd_error *err) {
    const sd_value *v = in[i];
    const char *kind = v && sd_value_kind_of(v) == SD_VAL_DICT ? sd_value_as_string(sd_value_dict_get(v, "operation")) : NULL;
    memset(op, 0, sizeof *op);
    if (kind && !strcmp(kind, "sharpen")) {
        op->kind = SD_LATENT_OP_SHARPEN;
        op->radius = sd_value_as_int(sd_value_dict_get(v, "sharpen_radius"));
        op->sigma = sd_value_as_float(sd_value_dict_get(v, "sigma"));
        op->alpha = sd_value_as_float(sd_value_dict_get(v, "alpha"));
        return SD_OK;
    }
    if (kind && !strcmp(kind, "tonemap_reinhard")) {
        op->kind = SD_LATENT_OP_TONEMAP_REINHARD;
        op->multiplier = sd_value_as_float(sd_value_dict_get(v, "multiplier"));
        return SD_OK;
    }
    return sd_nodes_bad_input(err, "operation", "input 'operation': not a LATENT_OPERATION");
}

/* ---- LatentOperationSharpen / LatentOperationTonemapReinhard ------------------------------ */

static sd_status sharpen_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_latent_op op = {.kind = SD_LATENT_OP_SHARPEN, .radius = sd_value_as_int(in[0]),
                       .sigma = sd_value_as_float(in[1]), .alpha = sd_value_as_float(in[2])};
    return op_value(&op, &out[0], err);
}

static const sd_input_def sharpen_inputs[] = {
    {.name = "sharpen_radius", .type = SD_T_INT, .def = 9, .min = 1, .max = 31, .step = 1, .has_range = 1},
    {.name = "sigma", .type = SD_T_FLOAT, .def = 1.0, .min = 0.1, .max = 10.0, .step = 0.1, .has_range = 1},
    {.name = "alpha", .type = SD_T_FLOAT, .def = 0.1, .min = 0.0, .max = 5.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentOperationSharpen = {
    .version = 1, .class_type = "LatentOperationSharpen", .python_module = "comfy_extras.nodes_latent",
    .category = "latent/advanced/operations",
    .help = "An operation sharpening a latent's per-pixel direction (ImageSharpen's kernel on the "
            "latent divided by its channel norm, then scaled back).",
    .inputs = sharpen_inputs, .outputs = op_out, .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3, .run = sharpen_run};

static sd_status tonemap_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_latent_op op = {.kind = SD_LATENT_OP_TONEMAP_REINHARD, .multiplier = sd_value_as_float(in[0])};
    return op_value(&op, &out[0], err);
}

static const sd_input_def tonemap_inputs[] = {
    {.name = "multiplier", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 100.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentOperationTonemapReinhard = {
    .version = 1, .class_type = "LatentOperationTonemapReinhard", .python_module = "comfy_extras.nodes_latent",
    .category = "latent/advanced/operations",
    .help = "An operation compressing a latent's per-pixel magnitudes with Reinhard's curve (white "
            "point: mean + 5 standard deviations, times multiplier).",
    .inputs = tonemap_inputs, .outputs = op_out, .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3, .run = tonemap_run};

/* ---- LatentApplyOperation ------------------------------------------------------------------ */

static sd_status apply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *s, *o = NULL;
    sd_latent_op op;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &s, err);
    if (!rc) rc = in_op(in, 1, &op, err);
    if (!rc && (rc = sd_latent_op_apply(&op, s, &o, err))) sd_error_at(err, NULL, NULL, "samples");
    if (rc) return rc;
    return sd_nodes_latent_with(in[0], "samples", o, &out[0], err);
}

static const sd_input_def apply_inputs[] = {
    {.name = "samples", .type = "LATENT"}, {.name = "operation", .type = "LATENT_OPERATION"}, {0}};

const sd_node_def sd_node_LatentApplyOperation = {
    .version = 1, .class_type = "LatentApplyOperation", .python_module = "comfy_extras.nodes_latent",
    .category = "latent/advanced/operations", .help = "The operation applied to the latent.",
    .inputs = apply_inputs, .outputs = latent_out, .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3, .run = apply_run};

/* ---- LatentApplyOperationCFG ------------------------------------------------------------------ */

static sd_status apply_cfg_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_latent_op op;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (!rc) rc = in_op(in, 1, &op, err);
    if (rc) return rc;
    /* set_model_sampler_pre_cfg_function appends: operations stack */
    sd_model_patches p = m->patches;
    if (p.cfg.n_pre >= SD_CFG_MAX_PRE)
        return sd_nodes_bad_input(err, "model", "the model already has %d pre-CFG operations, the most sdflow keeps",
                                  SD_CFG_MAX_PRE);
    p.cfg.pre_kind[p.cfg.n_pre] = SD_CFG_PRE_OP;
    p.cfg.state[p.cfg.n_pre] = NULL; /* a latent operation keeps nothing between evaluations */
    p.cfg.pre[p.cfg.n_pre++] = op;
    *out = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def apply_cfg_inputs[] = {
    {.name = "model", .type = "MODEL"}, {.name = "operation", .type = "LATENT_OPERATION"}, {0}};

const sd_node_def sd_node_LatentApplyOperationCFG = {
    .version = 1, .class_type = "LatentApplyOperationCFG", .python_module = "comfy_extras.nodes_latent",
    .category = "latent/advanced/operations",
    .help = "A model whose sampler applies the operation to cond - uncond at every step, before CFG.",
    .inputs = apply_cfg_inputs, .outputs = model_out, .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3, .run = apply_cfg_run};
