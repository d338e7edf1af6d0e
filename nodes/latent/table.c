/* table.c - the latent family's registration table. */
#include "latent.h"

extern const sd_node_def sd_node_EmptyLatentImage, sd_node_LatentUpscale,
    sd_node_LatentUpscaleBy, sd_node_RepeatLatentBatch, sd_node_LatentComposite,
    sd_node_SetLatentNoiseMask, sd_node_SaveLatent, sd_node_LoadLatent, sd_node_LatentFromBatch,
    sd_node_LatentBlend, sd_node_LatentCrop, sd_node_LatentFlip, sd_node_LatentRotate,
    sd_node_LatentCompositeMasked;

const sd_node_def *const sd_nodes_latent[] = {
    &sd_node_EmptyLatentImage,  &sd_node_LatentUpscale,   &sd_node_LatentUpscaleBy,
    &sd_node_RepeatLatentBatch, &sd_node_LatentComposite, &sd_node_SetLatentNoiseMask,
    &sd_node_SaveLatent,        &sd_node_LoadLatent,      &sd_node_LatentFromBatch,
    &sd_node_LatentBlend,       &sd_node_LatentCrop,      &sd_node_LatentFlip,
    &sd_node_LatentRotate,      &sd_node_LatentCompositeMasked,
    NULL};
