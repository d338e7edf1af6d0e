/* model_nodes.h - the "advanced/model" and "advanced/model_merging" node
 * families: MODEL / CLIP patches that change no input value, only what a
 * MODEL or CLIP stands for.
 *
 *   ModelSamplingDiscrete, ModelSamplingContinuousEDM / V, ModelSamplingFlux, RescaleCFG (model_patch_nodes.c): plain data on
 *     the MODEL handle (sd_model_patches, nodes/loaders/loaders.h) that the
 *     sampling nodes read (sd_nodes_model_sampling_of, the guider's cfg hook).
 *   ModelMergeSimple / Subtract / Add, CLIPMergeSimple / Subtract / Add
 *     (model_merge_nodes.c): a merge entry pushed on model1's / clip1's patch
 *     stack (nodes/lora/lora_nodes.h), applied with the LoRAs when the
 *     patched view is built; nothing is copied at the node.
 *
 *   ModelMergeBlocks, ModelMergeSD1 / SD2 / SDXL / Flux1
 *     (model_merge_blocks.c): the same with one ratio per block prefix.
 *
 * Every node returns a new handle value over the same loaded checkpoint, so
 * the cache key of anything downstream changes with the patch (the
 * executor's keys are structural) while the weights are shared.
 */
#ifndef SD_NODES_MODEL_H
#define SD_NODES_MODEL_H

#include "core/node.h"
#include "models/lora/lora.h"

extern const sd_node_def *const sd_nodes_model_patch[];
extern const sd_node_def *const sd_nodes_model_merge[];
/* FreeU, FreeU_V2 (model_guidance_nodes.c): a patch appended to the
 * MODEL's UNet patch list (sd_model_patches.unet). */
extern const sd_node_def *const sd_nodes_model_guidance[];
/* PatchModelAddDownscale, ... (model_unet_nodes.c): UNet patches as
 * FreeU's, at the UNet's input / output block points. */
extern const sd_node_def *const sd_nodes_model_unet_patch[];
extern const sd_node_def *const sd_nodes_model_merge_blocks[];

/* A merge node's work: in[0] model1, in[1] model2 (UNet models, or two Flux
 * models), checked to share weights (a warning names those whose shapes
 * differ), then model1 with a merge entry on its patch stack: ratios[0..n)
 * per block when n_ratios > 0 (sd_lora_stack_push_merge_blocks), else
 * add_patches(strength, strength_model). Errors name model1 / model2. */
sd_status sd_nodes_model_merge_push(sd_node_ctx *ctx, sd_value *const *in, double strength,
                                    double strength_model, const sd_lora_ratio *ratios,
                                    int n_ratios, sd_value **out, sd_error *err);

#endif
