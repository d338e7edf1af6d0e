/* canny.h - the Canny edge detector of ComfyUI's Canny node
 * (comfy_extras/nodes_canny.py -> kornia.filters.canny, default kernel 5x5,
 * sigma 1, hysteresis on, eps 1e-6).
 *
 * Steps, in float32 as kornia runs them:
 *   1. RGB -> gray 0.299 R + 0.587 G + 0.114 B (a 1-channel image is used as is);
 *   2. Gaussian blur, 5-tap sigma 1 kernel normalised to sum 1, separable
 *      (horizontal pass, then vertical), reflect padding;
 *   3. Sobel gradients (unnormalised, replicate padding): gx right - left,
 *      gy bottom - top; magnitude sqrt(gx^2 + gy^2 + 1e-6);
 *   4. direction atan2(gy, gx) in degrees rounded (half to even) to a
 *      multiple of 45; non-maximum suppression keeps a pixel whose magnitude
 *      is strictly above both neighbours along that direction (outside the
 *      image counts as 0);
 *   5. weak = magnitude > low, strong = magnitude > high; hysteresis keeps
 *      strong pixels and weak pixels 8-connected to them through weak ones
 *      (kornia's iterated dilation reaches the same fixed point).
 * Thresholds are on the gradient magnitude of a [0, 1] image (ComfyUI's
 * sliders: low 0.4, high 0.8 by default, 0.01..0.99).
 */
#ifndef SD_CANNY_H
#define SD_CANNY_H

#include "core/error.h"
#include "core/tensor.h"

/* image: F32 IMAGE [B, H, W, C] with C = 3 (RGB) or 1. *edges: new
 * [B, H, W, 3] IMAGE of 0/1 (the edge map repeated over RGB, as the node
 * returns it). magnitude: NULL, or receives a new [B, H, W] tensor of the
 * suppressed magnitude (tests). Errors: SD_ERR_INVALID (shape, dtype,
 * H or W < 3, low > high), SD_ERR_NOMEM. */
sd_status sd_canny(const sd_tensor *image, double low_threshold, double high_threshold,
                   sd_tensor **edges, sd_tensor **magnitude, sd_error *err);

#endif
