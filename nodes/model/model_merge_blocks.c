/* model_merge_blocks.c - ModelMergeBlocks and the model-specific block
 * merges ModelMergeSD1, ModelMergeSD2, ModelMergeSDXL, ModelMergeFlux1
 * (comfy_extras/nodes_model_merging.py, nodes_model_merging_model_specific.py).
 *
 * Each FLOAT input is a key prefix of the diffusion model's parameters
 * ("input", "middle", "out"; "input_blocks.3.", "double_blocks.7.", ...) and
 * its ratio. ComfyUI's ModelMergeBlocks.merge gives each of model2's weights
 * the ratio of the longest input name its key starts with (the first of
 * equal length), else the first FLOAT's, and adds it with
 * add_patches(1 - ratio, ratio): W1 * ratio + (1 - ratio) * W2 as
 * ModelMergeSimple does. Prefixes are plain string prefixes, so "out" also
 * matches "output_blocks.*" and SDXL's "input_blocks.1" would match an
 * "input_blocks.10" (SDXL has 9). ComfyUI's first FLOAT is the first of the
 * prompt's inputs in the order the workflow lists them; sdflow takes the
 * first of the node's definition (the editor's widget order, which is what
 * ComfyUI's frontend writes). ModelMergeSD2 is ComfyUI's ModelMergeSD1 class
 * under a second name (SD1 and SD2 have the same blocks). */
#include "model_nodes.h"

#include "core/value.h"

#define MAX_RATIOS 64

#define F(n) {.name = n, .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1}
#define MODELS {.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"}

static const sd_input_def blocks_in[] = {MODELS, F("input"), F("middle"), F("out"), {0}};

static const sd_input_def sd1_in[] = {
    MODELS,
    F("time_embed."),
    F("label_emb."),
    F("input_blocks.0."),
    F("input_blocks.1."),
    F("input_blocks.2."),
    F("input_blocks.3."),
    F("input_blocks.4."),
    F("input_blocks.5."),
    F("input_blocks.6."),
    F("input_blocks.7."),
    F("input_blocks.8."),
    F("input_blocks.9."),
    F("input_blocks.10."),
    F("input_blocks.11."),
    F("middle_block.0."),
    F("middle_block.1."),
    F("middle_block.2."),
    F("output_blocks.0."),
    F("output_blocks.1."),
    F("output_blocks.2."),
    F("output_blocks.3."),
    F("output_blocks.4."),
    F("output_blocks.5."),
    F("output_blocks.6."),
    F("output_blocks.7."),
    F("output_blocks.8."),
    F("output_blocks.9."),
    F("output_blocks.10."),
    F("output_blocks.11."),
    F("out."),
    {0}};

static const sd_input_def sdxl_in[] = {
    MODELS,
    F("time_embed."),
    F("label_emb."),
    F("input_blocks.0"),
    F("input_blocks.1"),
    F("input_blocks.2"),
    F("input_blocks.3"),
    F("input_blocks.4"),
    F("input_blocks.5"),
    F("input_blocks.6"),
    F("input_blocks.7"),
    F("input_blocks.8"),
    F("middle_block.0"),
    F("middle_block.1"),
    F("middle_block.2"),
    F("output_blocks.0"),
    F("output_blocks.1"),
    F("output_blocks.2"),
    F("output_blocks.3"),
    F("output_blocks.4"),
    F("output_blocks.5"),
    F("output_blocks.6"),
    F("output_blocks.7"),
    F("output_blocks.8"),
    F("out."),
    {0}};

static const sd_input_def flux_in[] = {
    MODELS,
    F("img_in."),
    F("time_in."),
    F("guidance_in"),
    F("vector_in."),
    F("txt_in."),
    F("double_blocks.0."),
    F("double_blocks.1."),
    F("double_blocks.2."),
    F("double_blocks.3."),
    F("double_blocks.4."),
    F("double_blocks.5."),
    F("double_blocks.6."),
    F("double_blocks.7."),
    F("double_blocks.8."),
    F("double_blocks.9."),
    F("double_blocks.10."),
    F("double_blocks.11."),
    F("double_blocks.12."),
    F("double_blocks.13."),
    F("double_blocks.14."),
    F("double_blocks.15."),
    F("double_blocks.16."),
    F("double_blocks.17."),
    F("double_blocks.18."),
    F("single_blocks.0."),
    F("single_blocks.1."),
    F("single_blocks.2."),
    F("single_blocks.3."),
    F("single_blocks.4."),
    F("single_blocks.5."),
    F("single_blocks.6."),
    F("single_blocks.7."),
    F("single_blocks.8."),
    F("single_blocks.9."),
    F("single_blocks.10."),
    F("single_blocks.11."),
    F("single_blocks.12."),
    F("single_blocks.13."),
    F("single_blocks.14."),
    F("single_blocks.15."),
    F("single_blocks.16."),
    F("single_blocks.17."),
    F("single_blocks.18."),
    F("single_blocks.19."),
    F("single_blocks.20."),
    F("single_blocks.21."),
    F("single_blocks.22."),
    F("single_blocks.23."),
    F("single_blocks.24."),
    F("single_blocks.25."),
    F("single_blocks.26."),
    F("single_blocks.27."),
    F("single_blocks.28."),
    F("single_blocks.29."),
    F("single_blocks.30."),
    F("single_blocks.31."),
    F("single_blocks.32."),
    F("single_blocks.33."),
    F("single_blocks.34."),
    F("single_blocks.35."),
    F("single_blocks.36."),
    F("single_blocks.37."),
    F("final_layer."),
    {0}};

static const sd_input_def sd3_2b_in[] = {
    MODELS,
    F("pos_embed."),
    F("x_embedder."),
    F("context_embedder."),
    F("y_embedder."),
    F("t_embedder."),
    F("joint_blocks.0."),
    F("joint_blocks.1."),
    F("joint_blocks.2."),
    F("joint_blocks.3."),
    F("joint_blocks.4."),
    F("joint_blocks.5."),
    F("joint_blocks.6."),
    F("joint_blocks.7."),
    F("joint_blocks.8."),
    F("joint_blocks.9."),
    F("joint_blocks.10."),
    F("joint_blocks.11."),
    F("joint_blocks.12."),
    F("joint_blocks.13."),
    F("joint_blocks.14."),
    F("joint_blocks.15."),
    F("joint_blocks.16."),
    F("joint_blocks.17."),
    F("joint_blocks.18."),
    F("joint_blocks.19."),
    F("joint_blocks.20."),
    F("joint_blocks.21."),
    F("joint_blocks.22."),
    F("joint_blocks.23."),
    F("final_layer."),
    {0}};

static const sd_input_def sd35_large_in[] = {
    MODELS,
    F("pos_embed."),
    F("x_embedder."),
    F("context_embedder."),
    F("y_embedder."),
    F("t_embedder."),
    F("joint_blocks.0."),
    F("joint_blocks.1."),
    F("joint_blocks.2."),
    F("joint_blocks.3."),
    F("joint_blocks.4."),
    F("joint_blocks.5."),
    F("joint_blocks.6."),
    F("joint_blocks.7."),
    F("joint_blocks.8."),
    F("joint_blocks.9."),
    F("joint_blocks.10."),
    F("joint_blocks.11."),
    F("joint_blocks.12."),
    F("joint_blocks.13."),
    F("joint_blocks.14."),
    F("joint_blocks.15."),
    F("joint_blocks.16."),
    F("joint_blocks.17."),
    F("joint_blocks.18."),
    F("joint_blocks.19."),
    F("joint_blocks.20."),
    F("joint_blocks.21."),
    F("joint_blocks.22."),
    F("joint_blocks.23."),
    F("joint_blocks.24."),
    F("joint_blocks.25."),
    F("joint_blocks.26."),
    F("joint_blocks.27."),
    F("joint_blocks.28."),
    F("joint_blocks.29."),
    F("joint_blocks.30."),
    F("joint_blocks.31."),
    F("joint_blocks.32."),
    F("joint_blocks.33."),
    F("joint_blocks.34."),
    F("joint_blocks.35."),
    F("joint_blocks.36."),
    F("joint_blocks.37."),
    F("final_layer."),
    {0}};

/* in[2..] are the FLOAT inputs of defs[2..], in order. */
static sd_status blocks_merge(sd_node_ctx *ctx, const sd_input_def *defs, sd_value *const *in,
                              sd_value **out, sd_error *err) {
    sd_lora_ratio r[MAX_RATIOS];
    int n = 0;
    for (int i = 2; defs[i].name && n < MAX_RATIOS; i++, n++)
        r[n] = (sd_lora_ratio){defs[i].name, sd_value_as_float(in[i])};
    return sd_nodes_model_merge_push(ctx, in, 0.0, 1.0, r, n, out, err);
}

static sd_status blocks_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return blocks_merge(ctx, blocks_in, in, out, err);
}
static sd_status sd1_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return blocks_merge(ctx, sd1_in, in, out, err);
}
static sd_status sdxl_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return blocks_merge(ctx, sdxl_in, in, out, err);
}
static sd_status flux_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return blocks_merge(ctx, flux_in, in, out, err);
}

static sd_status sd3_2b_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return blocks_merge(ctx, sd3_2b_in, in, out, err);
}
static sd_status sd35_large_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return blocks_merge(ctx, sd35_large_in, in, out, err);
}

static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};

static const sd_node_def node_blocks = {
    .version = 1, .class_type = "ModelMergeBlocks", .display_name = "ModelMergeBlocks",
    .python_module = "comfy_extras.nodes_model_merging", .category = "advanced/model_merging",
    .help = "model1 * r + model2 * (1 - r) weight by weight, r the ratio of the longest of "
            "input / middle / out that the weight's key starts with (\"out\" also covers "
            "output_blocks), else input's.",
    .inputs = blocks_in, .outputs = model_out, .run = blocks_run};

#define SPECIFIC(var, type, ins, fn, desc) \
    static const sd_node_def var = {.version = 1, .class_type = type, .display_name = type, \
                                    .python_module = "comfy_extras.nodes_model_merging_model_specific", \
                                    .category = "advanced/model_merging/model_specific", \
                                    .help = desc, .inputs = ins, .outputs = model_out, .run = fn}

SPECIFIC(node_sd1, "ModelMergeSD1", sd1_in, sd1_run,
         "model1 * r + model2 * (1 - r) with one ratio r per UNet block of SD1 (input_blocks.0-11, "
         "middle_block.0-2, output_blocks.0-11, time_embed, label_emb, out).");
SPECIFIC(node_sd2, "ModelMergeSD2", sd1_in, sd1_run,
         "ModelMergeSD1 under ComfyUI's second name (SD2 has SD1's blocks).");
SPECIFIC(node_sdxl, "ModelMergeSDXL", sdxl_in, sdxl_run,
         "model1 * r + model2 * (1 - r) with one ratio r per UNet block of SDXL (input_blocks.0-8, "
         "middle_block.0-2, output_blocks.0-8, time_embed, label_emb, out).");
SPECIFIC(node_flux1, "ModelMergeFlux1", flux_in, flux_run,
         "model1 * r + model2 * (1 - r) with one ratio r per part of a Flux.1 DiT (img_in, time_in, "
         "guidance_in, vector_in, txt_in, double_blocks.0-18, single_blocks.0-37, final_layer).");

SPECIFIC(node_sd3_2b, "ModelMergeSD3_2B", sd3_2b_in, sd3_2b_run,
         "model1 * r + model2 * (1 - r) with one ratio r per part of an SD3 / SD3.5 MMDiT "
         "(x_embedder, context_embedder, y_embedder, t_embedder, joint_blocks.0-23, final_layer; "
         "pos_embed is the model's own parameter, which ComfyUI leaves as model1's).");
SPECIFIC(node_sd35_large, "ModelMergeSD35_Large", sd35_large_in, sd35_large_run,
         "ModelMergeSD3_2B with SD3.5 Large's 38 joint blocks (joint_blocks.0-37).");

const sd_node_def *const sd_nodes_model_merge_blocks[] = {&node_blocks, &node_sd1, &node_sd2,
                                                          &node_sdxl, &node_flux1, &node_sd3_2b,
                                                          &node_sd35_large, NULL};
