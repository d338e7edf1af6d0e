/* canny_node.c - ComfyUI's Canny node (comfy_extras/nodes_canny.py). */
#include "controlnet_nodes.h"
#include "models/image/canny.h"

static sd_status canny_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img = sd_value_as_tensor(in[0]);
    sd_tensor *edges = NULL;
    sd_status rc = sd_canny(img, sd_value_as_float(in[1]), sd_value_as_float(in[2]), &edges, NULL, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, img ? "low_threshold" : "image");
        return rc;
    }
    out[0] = sd_value_tensor(edges);
    sd_tensor_unref(edges);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def canny_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "low_threshold", .type = SD_T_FLOAT, .def = 0.4, .min = 0.01, .max = 0.99, .step = 0.01,
     .has_range = 1},
    {.name = "high_threshold", .type = SD_T_FLOAT, .def = 0.8, .min = 0.01, .max = 0.99, .step = 0.01,
     .has_range = 1},
    {0}};
static const sd_output_def canny_outputs[] = {{"IMAGE", "IMAGE"}, {0}};

const sd_node_def sd_node_Canny = {
    .version = 1,
    .class_type = "Canny", .python_module = "comfy_extras.nodes_canny", .flags = SD_NODE_V3,
    .category = "image/preprocessors",
    .help = "Canny edge map (kornia semantics: 5x5 Gaussian sigma 1, Sobel, non-maximum "
            "suppression, hysteresis) as a white-on-black IMAGE.",
    .inputs = canny_inputs,
    .outputs = canny_outputs,
    .run = canny_run,
};
