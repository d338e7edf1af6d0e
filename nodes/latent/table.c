/* table.c - the latent family's registration table. */
#include "latent.h"

extern const sd_node_def sd_node_EmptyLatentImage, sd_node_EmptySD3LatentImage, sd_node_LatentUpscale,
    sd_node_LatentUpscaleBy, sd_node_RepeatLatentBatch, sd_node_LatentComposite,
    sd_node_SetLatentNoiseMask, sd_node_SaveLatent, sd_node_LoadLatent, sd_node_LatentFromBatch,
    sd_node_LatentBlend, sd_node_LatentCrop, sd_node_LatentFlip, sd_node_LatentRotate,
    sd_node_LatentCompositeMasked, sd_node_LatentAdd, sd_node_LatentSubtract, sd_node_LatentMultiply,
    sd_node_LatentInterpolate, sd_node_LatentBatch, sd_node_LatentBatchSeedBehavior, sd_node_LatentApplyOperation,
    sd_node_LatentApplyOperationCFG, sd_node_LatentOperationSharpen, sd_node_LatentOperationTonemapReinhard,
    sd_node_RebatchLatents;

const sd_node_def *const sd_nodes_latent[] = {
    &sd_node_EmptyLatentImage,  &sd_node_LatentUpscale,   &sd_node_LatentUpscaleBy,
    &sd_node_RepeatLatentBatch, &sd_node_LatentComposite, &sd_node_SetLatentNoiseMask,
    &sd_node_SaveLatent,        &sd_node_LoadLatent,      &sd_node_LatentFromBatch,
    &sd_node_LatentBlend,       &sd_node_LatentCrop,      &sd_node_LatentFlip,
    &sd_node_LatentRotate,      &sd_node_LatentCompositeMasked,
    &sd_node_LatentAdd,         &sd_node_LatentSubtract,  &sd_node_LatentMultiply,
    &sd_node_LatentInterpolate, &sd_node_LatentBatch,     &sd_node_LatentBatchSeedBehavior,
    &sd_node_LatentApplyOperation, &sd_node_LatentApplyOperationCFG, &sd_node_LatentOperationSharpen,
    &sd_node_LatentOperationTonemapReinhard, &sd_node_EmptySD3LatentImage, &sd_node_RebatchLatents, NULL};
