/* table.c - the image family's registration table. */
#include "image.h"

extern const sd_node_def sd_node_LoadImage, sd_node_LoadImageMask, sd_node_SaveImage,
    sd_node_PreviewImage, sd_node_ImageScale, sd_node_ImageScaleBy, sd_node_ImageInvert,
    sd_node_ImageBatch, sd_node_EmptyImage, sd_node_ImagePadForOutpaint, sd_node_ImageCompositeMasked, sd_node_GetImageSize,
    sd_node_RepeatImageBatch, sd_node_ImageFromBatch, sd_node_ImageAddNoise, sd_node_ImageCrop, sd_node_ImageFlip,
    sd_node_ImageRotate, sd_node_ImageStitch, sd_node_ImageScaleToTotalPixels, sd_node_ImageScaleToMaxDimension,
    sd_node_ResizeAndPadImage, sd_node_ImageBlend, sd_node_ImageBlur, sd_node_ImageSharpen, sd_node_Morphology,
    sd_node_SaveImageWebsocket, sd_node_RebatchImages, sd_node_ImageQuantize;

const sd_node_def *const sd_nodes_image[] = {
    &sd_node_LoadImage,  &sd_node_LoadImageMask, &sd_node_SaveImage,   &sd_node_PreviewImage,
    &sd_node_ImageScale, &sd_node_ImageScaleBy,  &sd_node_ImageInvert, &sd_node_ImageBatch,
    &sd_node_EmptyImage, &sd_node_ImagePadForOutpaint, &sd_node_ImageCompositeMasked, &sd_node_GetImageSize,
    &sd_node_RepeatImageBatch, &sd_node_ImageFromBatch, &sd_node_ImageAddNoise, &sd_node_ImageCrop, &sd_node_ImageFlip,
    &sd_node_ImageRotate, &sd_node_ImageStitch, &sd_node_ImageScaleToTotalPixels, &sd_node_ImageScaleToMaxDimension,
    &sd_node_ResizeAndPadImage, &sd_node_ImageBlend, &sd_node_ImageBlur, &sd_node_ImageSharpen, &sd_node_Morphology,
    &sd_node_SaveImageWebsocket, &sd_node_RebatchImages, &sd_node_ImageQuantize, NULL};
