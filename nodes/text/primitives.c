/* primitives.c - PrimitiveInt, PrimitiveFloat, PrimitiveString,
 * PrimitiveStringMultiline, PrimitiveBoolean: a widget's value as an output. */
#include "text.h"

static sd_status pass_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    (void)err;
    out[0] = sd_value_ref(in[0]);
    return SD_OK;
}

static sd_status float_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    /* a FLOAT output stays a float even for an integral value */
    out[0] = sd_value_float(sd_value_as_float(in[0]));
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

#define MAXSIZE 9223372036854775807.0

static const sd_input_def int_inputs[] = {
    {.name = "value", .type = SD_T_INT, .no_default = 1, .min = -MAXSIZE, .max = MAXSIZE, .has_range = 1,
     .maxsize_range = 1, .control_after_generate = 1},
    {0}};
static const sd_input_def float_inputs[] = {
    {.name = "value", .type = SD_T_FLOAT, .no_default = 1, .min = -MAXSIZE, .max = MAXSIZE, .step = 0.1,
     .has_range = 1, .maxsize_range = 1},
    {0}};
static const sd_input_def string_inputs[] = {{.name = "value", .type = SD_T_STRING, .no_default = 1, .def_str = ""}, {0}};
static const sd_input_def multiline_inputs[] = {
    {.name = "value", .type = SD_T_STRING, .no_default = 1, .def_str = "", .multiline = 1}, {0}};
static const sd_input_def bool_inputs[] = {{.name = "value", .type = SD_T_BOOLEAN, .no_default = 1}, {0}};

static const sd_output_def int_out[] = {{"INT", "INT"}, {0}};
static const sd_output_def float_out[] = {{"FLOAT", "FLOAT"}, {0}};
static const sd_output_def string_out[] = {{"STRING", "STRING"}, {0}};
static const sd_output_def bool_out[] = {{"BOOLEAN", "BOOLEAN"}, {0}};

const sd_node_def sd_node_PrimitiveInt = {
    .version = 1, .class_type = "PrimitiveInt", .python_module = "comfy_extras.nodes_primitive", .flags = SD_NODE_V3,
    .display_name = "Int", .category = "utils/primitive",
    .help = "The value as an INT.", .inputs = int_inputs, .outputs = int_out, .run = pass_run};
const sd_node_def sd_node_PrimitiveFloat = {
    .version = 1, .class_type = "PrimitiveFloat", .python_module = "comfy_extras.nodes_primitive",
    .flags = SD_NODE_V3, .display_name = "Float", .category = "utils/primitive",
    .help = "The value as a FLOAT.", .inputs = float_inputs, .outputs = float_out, .run = float_run};
const sd_node_def sd_node_PrimitiveString = {
    .version = 1, .class_type = "PrimitiveString", .python_module = "comfy_extras.nodes_primitive",
    .flags = SD_NODE_V3, .display_name = "String", .category = "utils/primitive",
    .help = "The value as a STRING.", .inputs = string_inputs, .outputs = string_out, .run = pass_run};
const sd_node_def sd_node_PrimitiveStringMultiline = {
    .version = 1, .class_type = "PrimitiveStringMultiline", .python_module = "comfy_extras.nodes_primitive",
    .flags = SD_NODE_V3, .display_name = "String (Multiline)",
    .category = "utils/primitive", .help = "The value as a STRING (a multi-line text box).",
    .inputs = multiline_inputs, .outputs = string_out, .run = pass_run};
const sd_node_def sd_node_PrimitiveBoolean = {
    .version = 1, .class_type = "PrimitiveBoolean", .python_module = "comfy_extras.nodes_primitive",
    .flags = SD_NODE_V3, .display_name = "Boolean", .category = "utils/primitive",
    .help = "The value as a BOOLEAN.", .inputs = bool_inputs, .outputs = bool_out, .run = pass_run};
