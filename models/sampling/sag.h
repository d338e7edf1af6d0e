/* sag.h - the blurred prediction of Self-Attention Guidance, as
 * comfy_extras/nodes_sag.py's create_blur_map and gaussian_blur_2d compute
 * it (float32 in torch's order; the 9 x 9 convolution sums in double).
 *
 * The guider's SAG post-CFG function (guider.h, SD_CFG_POST_SAG) blurs the
 * uncond prediction where the UNet's middle-block self-attention of the
 * uncond pass is strong, then asks the model for the uncond prediction of
 * that blurred image re-noised. This module is the host-side arithmetic in
 * between; the attention itself is recorded by the UNet
 * (models/unet/unet.h, SD_UNET_PATCH_ATTN1_RECORD). */
#ifndef SD_SAG_H
#define SD_SAG_H

#include <stdint.h>
#include "core/error.h"

/* create_blur_map(x0, attn, sigma, threshold):
 *   x0: [B, C, H, W] F32 (shape[4]); mass: [B, L] the recorded attention
 *   mass of each key token (sd_unet_attn_record), L the middle block's
 *   tokens;
 *   the mask (mass > threshold) laid out as rows x cols, rows the divisor
 *   of L nearest round(sqrt(H / W * L)) (ComfyUI's search), resized to
 *   H x W (nearest), selects the Gaussian blur of x0 (9 x 9 kernel of
 *   blur_sigma, reflect padding), elsewhere x0:
 *   out = blurred * mask + x0 * (1 - mask).
 * SD_ERR_INVALID when H or W <= 4 (no reflect padding of 4) or when no
 * layout of L is found (ComfyUI fails there too). out: B*C*H*W floats,
 * not aliasing x0. */
sd_status sd_sag_degrade(const float *x0, const int64_t shape[4], const float *mass, int64_t L, double blur_sigma,
                         double threshold, float *out, sd_error *err);

#endif
