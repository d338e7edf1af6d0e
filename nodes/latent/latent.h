/* latent.h - the latent node family: EmptyLatentImage, EmptySD3LatentImage, LatentUpscale,
 * LatentUpscaleBy, RepeatLatentBatch, LatentComposite, SetLatentNoiseMask,
 * SaveLatent, LoadLatent, LatentFromBatch, LatentBlend, LatentCrop,
 * LatentFlip, LatentRotate.
 *
 * LATENT = SD_VAL_DICT {"samples": F32 [B, C, H, W] (unscaled VAE space),
 * "noise_mask"?: F32 [B, 1, h, w], "batch_index"?: list of INT}. Nodes that
 * change "samples" keep the other keys, as ComfyUI's samples.copy() does.
 */
#ifndef SD_NODES_LATENT_H
#define SD_NODES_LATENT_H

#include "core/node.h"

/* NULL-terminated table registered by nodes/nodes.c. */
extern const sd_node_def *const sd_nodes_latent[];

/* samples.copy() with `key` ("samples", "noise_mask") set to t: a new LATENT
 * sharing src's other entries (src NULL: a new dict). Takes over the
 * caller's reference to t, also on failure. */
sd_status sd_nodes_latent_with(const sd_value *src, const char *key, sd_tensor *t, sd_value **out,
                               sd_error *err);

#endif
