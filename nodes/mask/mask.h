/* mask.h - the mask node family (comfy_extras/nodes_mask.py and
 * nodes_compositing.py): InvertMask, SolidMask, ThresholdMask, CropMask,
 * ImageToMask, MaskToImage, ImageColorToMask (convert.c); GrowMask,
 * FeatherMask, MaskComposite (shape.c); JoinImageWithAlpha,
 * SplitImageWithAlpha, PorterDuffImageComposite (compositing.c); MaskPreview
 * (preview.c).
 *
 * MASK = F32 [B, H, W] in [0, 1] (1 = selected); nodes accept any 2- to
 * 4-dim mask as ComfyUI's reshape((-1, H, W)) does (sd_nodes_in_mask,
 * nodes/image/image.h). The arithmetic is in models/image/maskops.h.
 */
#ifndef SD_NODES_MASK_H
#define SD_NODES_MASK_H

#include "core/node.h"

/* NULL-terminated table registered by nodes/nodes.c. */
extern const sd_node_def *const sd_nodes_mask[];

#endif
