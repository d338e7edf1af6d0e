/* table.c - the mask family's registration table. */
#include "mask.h"

extern const sd_node_def sd_node_InvertMask, sd_node_SolidMask, sd_node_ThresholdMask, sd_node_CropMask,
    sd_node_ImageToMask, sd_node_MaskToImage, sd_node_ImageColorToMask, sd_node_GrowMask,
    sd_node_FeatherMask, sd_node_MaskComposite, sd_node_JoinImageWithAlpha, sd_node_SplitImageWithAlpha,
    sd_node_PorterDuffImageComposite, sd_node_MaskPreview;

const sd_node_def *const sd_nodes_mask[] = {
    &sd_node_InvertMask,         &sd_node_SolidMask,          &sd_node_ThresholdMask,
    &sd_node_CropMask,           &sd_node_ImageToMask,        &sd_node_MaskToImage,
    &sd_node_ImageColorToMask,   &sd_node_GrowMask,           &sd_node_FeatherMask,
    &sd_node_MaskComposite,      &sd_node_JoinImageWithAlpha, &sd_node_SplitImageWithAlpha,
    &sd_node_PorterDuffImageComposite, &sd_node_MaskPreview,  NULL};
