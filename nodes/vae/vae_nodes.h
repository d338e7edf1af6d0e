/* vae_nodes.h - the VAE node family: VAEDecode, VAEEncode, VAEDecodeTiled,
 * VAEEncodeTiled, VAEEncodeForInpaint, InpaintModelConditioning
 * (inpaint_cond.c), InstructPixToPixConditioning (ip2p_cond.c). Latents are VAE space (unscaled) as
 * in ComfyUI; IMAGE tensors NHWC in [0, 1]. */
#ifndef SD_NODES_VAE_H
#define SD_NODES_VAE_H

#include "core/node.h"

extern const sd_node_def *const sd_nodes_vae[];

/* VAEEncodeForInpaint's pixel and mask preparation, without the encode:
 * pixels [B, H, W, C] (C >= 3) and mask [.., h, w] ->
 *   *pixels_out [B, H8, W8, 3]: centre crop to multiples of 8, masked
 *               pixels (round(mask) == 1) set to 0.5;
 *   *mask_out   [B', 1, H8, W8]: the mask resized (bilinear) to the image,
 *               cropped like it, rounded, grown by a grow x grow box
 *               (0: not grown), clamped to [0, 1] and rounded again: the
 *               LATENT's noise_mask.
 * New tensors for the caller. */
sd_status sd_nodes_inpaint_prepare(const sd_tensor *pixels, const sd_tensor *mask, int grow,
                                   sd_tensor **pixels_out, sd_tensor **mask_out, sd_error *err);

#endif
