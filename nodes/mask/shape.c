/* shape.c - GrowMask, FeatherMask, MaskComposite (models/image/maskops.h). */
#include "mask.h"
#include "models/image/maskops.h"
#include "nodes/image/image.h"

static const sd_output_def mask_out[] = {{"MASK", "MASK"}, {0}};

#define RANGE_INT(n, d, lo, hi) \
    {.name = n, .type = SD_T_INT, .def = d, .min = lo, .max = hi, .step = 1, .has_range = 1}

/* ---- GrowMask ------------------------------------------------------------------------- */

static sd_status grow_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    int64_t expand = sd_value_as_int(in[1]);
    int tapered = sd_value_as_bool(in[2]);
    sd_tensor *o = sd_tensor_new(SD_F32, 3, m->shape);
    if (!o) { sd_tensor_unref(m); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    int64_t B = m->shape[0], plane = m->shape[1] * m->shape[2];
    for (int64_t b = 0; b < B && !rc; b++) {
        if (sd_mask_grow_plane(sd_tensor_f32(m) + b * plane, m->shape[1], m->shape[2], expand, tapered,
                               sd_tensor_f32(o) + b * plane))
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else
            rc = sd_node_progress(ctx, b + 1, B, err);
    }
    sd_tensor_unref(m);
    if (rc) { sd_tensor_unref(o); return rc; }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def grow_inputs[] = {
    {.name = "mask", .type = "MASK"},
    RANGE_INT("expand", 0, -SD_MAX_RESOLUTION, SD_MAX_RESOLUTION),
    {.name = "tapered_corners", .type = SD_T_BOOLEAN, .def = 1}, {0}};

const sd_node_def sd_node_GrowMask = {
    .version = 1, .class_type = "GrowMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .display_name = "Grow Mask", .category = "mask",
    .help = "Dilates (expand > 0) or erodes (expand < 0) each mask by |expand| pixels "
            "(3x3 steps; tapered corners use a cross).",
    .inputs = grow_inputs, .outputs = mask_out, .run = grow_run};

/* ---- FeatherMask ---------------------------------------------------------------------- */

static sd_status feather_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    sd_tensor *o = sd_tensor_clone(m);
    sd_tensor_unref(m);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_mask_feather(o, sd_value_as_int(in[1]), sd_value_as_int(in[2]), sd_value_as_int(in[3]),
                    sd_value_as_int(in[4]));
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def feather_inputs[] = {
    {.name = "mask", .type = "MASK"},
    RANGE_INT("left", 0, 0, SD_MAX_RESOLUTION), RANGE_INT("top", 0, 0, SD_MAX_RESOLUTION),
    RANGE_INT("right", 0, 0, SD_MAX_RESOLUTION), RANGE_INT("bottom", 0, 0, SD_MAX_RESOLUTION), {0}};

const sd_node_def sd_node_FeatherMask = {
    .version = 1, .class_type = "FeatherMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "Fades each mask linearly to 0 over the given number of pixels at each edge "
            "(ComfyUI's ramps, including its Python indexing of the right and bottom "
            "edges, where the first step lands on column / row 0).",
    .inputs = feather_inputs, .outputs = mask_out, .run = feather_run};

/* ---- MaskComposite -------------------------------------------------------------------- */

static const char *const operations[] = {"multiply", "add", "subtract", "and", "or", "xor", NULL};

static sd_status composite_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *dst, *src = NULL;
    sd_status rc = sd_nodes_in_mask(in, 0, "destination", &dst, err);
    if (!rc) rc = sd_nodes_in_mask(in, 1, "source", &src, err);
    if (rc) { sd_tensor_unref(dst); return rc; }
    sd_mask_op op;
    const char *name = sd_value_as_string(in[4]);
    sd_tensor *o = NULL;
    if (sd_mask_op_parse(name, &op))
        rc = sd_nodes_bad_input(err, "operation", "unknown operation '%s'", name ? name : "");
    else if ((rc = sd_mask_composite(dst, src, sd_value_as_int(in[2]), sd_value_as_int(in[3]), op, &o, err)))
        sd_error_at(err, NULL, NULL, "source");
    sd_tensor_unref(dst);
    sd_tensor_unref(src);
    if (rc) return rc;
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def composite_inputs[] = {
    {.name = "destination", .type = "MASK"}, {.name = "source", .type = "MASK"},
    RANGE_INT("x", 0, 0, SD_MAX_RESOLUTION), RANGE_INT("y", 0, 0, SD_MAX_RESOLUTION),
    {.name = "operation", .type = SD_T_COMBO, .options = operations, .def_str = "multiply", .no_default = 1}, {0}};

const sd_node_def sd_node_MaskComposite = {
    .version = 1, .class_type = "MaskComposite", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "Combines source into destination at (x, y) (multiply, add, subtract, or the "
            "logical and/or/xor of the rounded values), clamped to [0, 1].",
    .inputs = composite_inputs, .outputs = mask_out, .run = composite_run};
