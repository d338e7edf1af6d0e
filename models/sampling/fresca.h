/* fresca.h - FreSca's frequency scaling of the guidance, as
 * comfy_extras/nodes_fresca.py's Fourier_filter computes it: the real part
 * of the inverse 2-D FFT of the spectrum times scale_high, with the block
 * of low frequencies (fftshift's centre rows and columns
 * [n // 2 - f, n // 2 + f), f = min(freq_cutoff, n // 2) per dimension)
 * times scale_low instead.
 *
 * No FFT library: the filter is scale_high * x + (scale_low - scale_high) *
 * the projection of x on the low block, and that projection is separable
 * (one n x n complex circulant per dimension), computed directly in double:
 * O(H W (H + W)) per plane, a few million operations for a latent of
 * 128 x 128, and exact to double rounding where torch's float32 FFT rounds
 * at every butterfly stage. */
#ifndef SD_FRESCA_H
#define SD_FRESCA_H

#include <stdint.h>
#include "core/error.h"

/* Fourier_filter(x, scale_low, scale_high, freq_cutoff) in place on x
 * [shape[0], shape[1], shape[2], shape[3]] F32, each [H, W] plane on its
 * own. freq_cutoff >= 0. SD_ERR_NOMEM only. */
sd_status sd_fresca_filter(float *x, const int64_t shape[4], double scale_low, double scale_high,
                           int64_t freq_cutoff, sd_error *err);

#endif
