/* table.c - the image family's registration table. */
#include "image.h"

extern const sd_node_def sd_node_LoadImage, sd_node_LoadImageMask, sd_node_SaveImage,
    sd_node_PreviewImage, sd_node_ImageScale, sd_node_ImageScaleBy, sd_node_ImageInvert,
    sd_node_ImageBatch, sd_node_EmptyImage, sd_node_ImagePadForOutpaint, sd_node_ImageCompositeMasked;

const sd_node_def *const sd_nodes_image[] = {
    &sd_node_LoadImage,  &sd_node_LoadImageMask, &sd_node_SaveImage,   &sd_node_PreviewImage,
    &sd_node_ImageScale, &sd_node_ImageScaleBy,  &sd_node_ImageInvert, &sd_node_ImageBatch,
    &sd_node_EmptyImage, &sd_node_ImagePadForOutpaint, &sd_node_ImageCompositeMasked, NULL};
