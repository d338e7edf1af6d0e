/* composite_masked.c - LatentCompositeMasked (comfy_extras/nodes_mask.py):
 * ImageCompositeMasked's composite on latents, positions in pixels (/ 8). */
#include "latent.h"
#include "models/image/maskops.h"
#include "nodes/image/image.h"

static sd_status composite_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *dst, *src, *mask = NULL, *o = NULL;
    sd_status rc = sd_nodes_in_latent(in, 0, "destination", &dst, err);
    if (!rc) rc = sd_nodes_in_latent(in, 1, "source", &src, err);
    if (!rc) rc = sd_nodes_in_mask_opt(in, 5, "mask", &mask, err);
    if (rc) return rc;
    rc = sd_composite(dst, src, 0, sd_value_as_int(in[2]), sd_value_as_int(in[3]), mask, 8,
                      sd_value_as_bool(in[4]), &o, err);
    sd_tensor_unref(mask);
    if (rc) {
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "source");
        return rc;
    }
    return sd_nodes_latent_with(in[0], "samples", o, &out[0], err);
}

static const sd_input_def composite_inputs[] = {
    {.name = "destination", .type = "LATENT"},
    {.name = "source", .type = "LATENT"},
    {.name = "x", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "y", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "resize_source", .type = SD_T_BOOLEAN, .def = 0},
    {.name = "mask", .type = "MASK", .optional = 1},
    {0}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};

const sd_node_def sd_node_LatentCompositeMasked = {
    .version = 1, .class_type = "LatentCompositeMasked", .python_module = "comfy_extras.nodes_mask",
    .flags = SD_NODE_V3,
    .category = "latent",
    .help = "Pastes source into destination at (x/8, y/8) in latent pixels, blended by mask "
            "(resized to the source); keeps the destination's other keys.",
    .inputs = composite_inputs, .outputs = latent_out, .run = composite_run};
