/* latent_format.h - ComfyUI's latent formats (comfy/latent_formats.py): how a
 * model family's latents are scaled between VAE space (what VAEEncode gives
 * and VAEDecode takes, what a KSampler node returns) and the model's space
 * (what the sampler integrates), and how a preview turns a model-space
 * latent into colours.
 *
 *   process_in  (z - shift) * scale      VAE space -> model space
 *   process_out x / scale + shift        model space -> VAE space
 * each a float32 torch op (the Python factors rounded to float). ComfyUI
 * applies them at sampling, as the MODEL's latent format -- never inside the
 * VAE -- and leaves an all-zero latent (an empty one) unshifted
 * (sd_latent_process_in_nonempty).
 *
 * Formats: "sd1" (SD1.x, SD2.x: scale 0.18215), "sdxl" (0.13025), "flux"
 * (16 channels, scale 0.3611, shift 0.1159) and "sd3" (16 channels, scale
 * 1.5305, shift 0.0609). The name is also what the
 * executor's preview events carry (core/node.h sd_node_preview). Plain
 * constant data: nothing to free.
 */
#ifndef SD_LATENT_FORMAT_H
#define SD_LATENT_FORMAT_H

#include <stddef.h>

#include "core/tensor.h"

typedef struct sd_latent_format {
    const char *name;               /* "sd1", "sdxl", "flux", "sd3" */
    int channels;                   /* latent_channels */
    float scale, shift;             /* scale_factor, shift_factor (0 when none) */
    /* latent_rgb_factors [channels][R, G, B] and latent_rgb_factors_bias
     * (NULL when the format has none): a preview pixel is
     * bias + sum_c latent[c] * factors[c], then (v + 1) / 2 clamped. */
    const float (*rgb_factors)[3];
    const float *rgb_bias;
    /* taesd_decoder_name: the stem of the preview decoder ComfyUI looks for
     * in models/vae_approx/ ("taesd_decoder", "taesdxl_decoder", "taef1_decoder",
     * "taesd3_decoder"). */
    const char *taesd_decoder;
} sd_latent_format;

extern const sd_latent_format sd_latent_sd1, sd_latent_sdxl, sd_latent_flux, sd_latent_sd3;

/* The format of that name; NULL for an unknown (or NULL) name. */
const sd_latent_format *sd_latent_format_named(const char *name);

/* process_in / process_out over n floats; out may be z / x. */
void sd_latent_process_in(const sd_latent_format *f, const float *z, float *out, size_t n);
void sd_latent_process_out(const sd_latent_format *f, const float *x, float *out, size_t n);

/* What the samplers do with their input latent (CFGGuider.inner_sample,
 * SamplerCustom's AddNoise): process_in unless every value is zero, in which
 * case the latent is copied as it is. Returns 1 when it was shifted. */
int sd_latent_process_in_nonempty(const sd_latent_format *f, const float *z, float *out, size_t n);

/* latent_preview.Latent2RGBPreviewer on the first image of a model-space
 * latent [N, channels, h, w] (F32): a new [h, w, 3] F32 image holding
 * (bias + sum_c latent[c] * factors[c] + 1) / 2, not yet clamped to [0, 1]
 * (writing it as 8-bit pixels clamps and truncates, as ComfyUI). NULL for a
 * latent of another shape or out of memory. */
sd_tensor *sd_latent_preview_rgb(const sd_latent_format *f, const sd_tensor *latent);

#endif
