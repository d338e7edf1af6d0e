/* model_nodes.h - the "advanced/model" and "advanced/model_merging" node
 * families: MODEL / CLIP patches that change no input value, only what a
 * MODEL or CLIP stands for.
 *
 *   ModelSamplingDiscrete, ModelSamplingFlux, RescaleCFG (model_patch_nodes.c): plain data on
 *     the MODEL handle (sd_model_patches, nodes/loaders/loaders.h) that the
 *     sampling nodes read (sd_nodes_model_sampling_of, the guider's cfg hook).
 *   ModelMergeSimple / Subtract / Add, CLIPMergeSimple / Subtract / Add
 *     (model_merge_nodes.c): a merge entry pushed on model1's / clip1's patch
 *     stack (nodes/lora/lora_nodes.h), applied with the LoRAs when the
 *     patched view is built; nothing is copied at the node.
 *
 * Every node returns a new handle value over the same loaded checkpoint, so
 * the cache key of anything downstream changes with the patch (the
 * executor's keys are structural) while the weights are shared.
 */
#ifndef SD_NODES_MODEL_H
#define SD_NODES_MODEL_H

#include "core/node.h"

extern const sd_node_def *const sd_nodes_model_patch[];
extern const sd_node_def *const sd_nodes_model_merge[];
/* FreeU, FreeU_V2 (model_guidance_nodes.c): a patch appended to the
 * MODEL's UNet patch list (sd_model_patches.unet). */
extern const sd_node_def *const sd_nodes_model_guidance[];

#endif
