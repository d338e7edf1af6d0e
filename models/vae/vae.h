/* vae.h - the Stable Diffusion KL autoencoder (LDM "first_stage_model").
 *
 * Layout of the single-file checkpoints: encoder.conv_in, encoder.down.N.
 * block.M (ResnetBlocks, nin_shortcut when channels change), encoder.down.N.
 * downsample.conv (pad right/bottom by one, then stride-2 3x3 conv), encoder.
 * mid.{block_1, attn_1, block_2}, encoder.norm_out/conv_out, quant_conv,
 * post_quant_conv, decoder.conv_in, decoder.mid.*, decoder.up.N.block.M
 * (num_res_blocks + 1 per level), decoder.up.N.upsample.conv (nearest x2 +
 * conv), decoder.norm_out/conv_out. GroupNorm 32 groups, eps 1e-6; the mid
 * attention is single-head over H*W. The configuration (channels per level,
 * num_res_blocks, z_channels, embed_dim) is read from tensor shapes; quant
 * convs are optional (absent in some VAEs). Files in the diffusers
 * AutoencoderKL layout (encoder.down_blocks.N.resnets.M, mid_block.
 * attentions.0.to_q / query, decoder.up_blocks numbered in reverse, Linear
 * attention weights) load too, as ComfyUI converts them; error messages
 * then name the file's own keys.
 *
 * Value conventions follow ComfyUI's VAEDecode / VAEEncode: latents are VAE
 * space (unscaled: what KSampler outputs), images are IMAGE tensors NHWC in
 * [0, 1]. Decoding clamps (x + 1) / 2 to [0, 1]; encoding crops H and W to
 * multiples of 8 around the centre (offset (d % 8) / 2), maps 2x - 1, and
 * returns the posterior mean.
 *
 * Ownership: sd_vae owns its backend tensors; the sd_st_file may be closed
 * after sd_vae_load. Inputs are only read; every output is a new tensor the
 * caller unrefs. The backend must outlive the model. Not thread-safe per
 * model (it uses the backend's sticky error).
 */
#ifndef SD_VAE_H
#define SD_VAE_H

#include "formats/safetensors.h"
#include "kernels/backend.h"

#define SD_VAE_MAX_LEVELS 8

typedef struct sd_vae sd_vae;

typedef struct sd_vae_config {
    int n_levels;                        /* len(ch_mult) */
    int block_out[SD_VAE_MAX_LEVELS];    /* ch * ch_mult[i] */
    int ch;                              /* block_out[0] / ch_mult[0], assumed ch_mult[0] = 1 */
    int num_res_blocks;
    int z_channels;
    int embed_dim;                       /* latent channels */
    int has_encoder;
    int has_quant_conv;
} sd_vae_config;

/* Load from `f` under `prefix` ("first_stage_model." for checkpoints, ""
 * for standalone VAE files). The decoder is required; a missing encoder
 * leaves has_encoder = 0 (encode then fails with SD_ERR_UNSUPPORTED). */
sd_status sd_vae_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_vae **out,
                      sd_error *err);
void sd_vae_free(sd_vae *vae); /* NULL-safe */
const sd_vae_config *sd_vae_get_config(const sd_vae *vae);

/* Debug hook called with "dec.act.<module>" / "enc.act.<module>" (module
 * names as in the checkpoint: post_quant_conv, decoder.conv_in,
 * decoder.mid.block_1, decoder.mid.attn_1, decoder.mid.block_2,
 * decoder.up.N, decoder.norm_out (before the SiLU), quant_conv, ...) and
 * the module's output, valid only during the call. */
typedef void (*sd_vae_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_vae_set_tap(sd_vae *vae, sd_vae_tap_fn fn, void *user);
unsigned sd_vae_f32_redos(const sd_vae *vae);

/* Calls fn(ud, key, t, ndim, shape) for every weight the VAE holds, keyed
 * by its LDM name ("decoder.mid.attn_1.q.weight", "post_quant_conv.bias")
 * whatever layout the file had, with the shape the LDM layout stores
 * (the mid attention's q/k/v/proj_out as 1x1 convs [C, C, 1, 1], held as
 * [C, C]). What VAESave / CheckpointSave write, as ComfyUI's vae.get_sd()
 * gives its LDM state dict. t is borrowed for the call; key likewise. */
typedef void (*sd_vae_param_fn)(void *ud, const char *key, const sd_bt *t, int ndim,
                                const int64_t *shape);
void sd_vae_param_each(const sd_vae *vae, sd_vae_param_fn fn, void *ud);

/* latent [N, E, h, w] F32 -> IMAGE [N, 8h, 8w, 3] in [0, 1].
 * Every decode (also raw and tiled) computes in the backend's precision;
 * when that is not F32 and the decoder's output holds a NaN or Inf, that
 * decode (that tile, when tiled) is run again in F32, and the backend is
 * left in the precision it had. sd_vae_f32_redos counts these redos since
 * the VAE was loaded, so a caller can say that one happened. */
sd_status sd_vae_decode(sd_vae *vae, const sd_tensor *latent, sd_tensor **image, sd_error *err);
/* IMAGE [N, H, W, C >= 3] -> latent mean [N, E, H/8, W/8] (after cropping). */
sd_status sd_vae_encode(sd_vae *vae, const sd_tensor *image, sd_tensor **latent, sd_error *err);
/* Both posterior halves: mean and logvar clamped to [-30, 20]. */
sd_status sd_vae_encode_posterior(sd_vae *vae, const sd_tensor *image, sd_tensor **mean,
                                  sd_tensor **logvar, sd_error *err);
/* The raw decoder: post_quant_conv + decoder, NCHW in, NCHW out (~[-1, 1]). */
sd_status sd_vae_decode_raw(sd_vae *vae, const sd_tensor *latent, sd_tensor **x, sd_error *err);

/* ComfyUI VAEDecodeTiled / VAEEncodeTiled: tile_size and overlap in pixels
 * (decode: overlap clamped to tile_size / 4 as the node does). Three passes
 * with tiles (t/2 x 2t), (2t x t/2) and (t x t) (width x height), each
 * blended with linear feathering over the overlap (comfy.utils.tiled_scale),
 * then averaged. */
sd_status sd_vae_decode_tiled(sd_vae *vae, const sd_tensor *latent, int tile_size, int overlap,
                              sd_tensor **image, sd_error *err);
sd_status sd_vae_encode_tiled(sd_vae *vae, const sd_tensor *image, int tile_size, int overlap,
                              sd_tensor **latent, sd_error *err);

/* ---- IMAGE <-> NCHW conversions shared with the other autoencoders ---------- */

/* IMAGE NHWC [N, H, W, C >= 3] -> NCHW [N, 3, H', W'] with H', W' cropped
 * to multiples of 8 around the centre, values v * mul + add. NULL with err
 * set on a bad shape or dtype. */
sd_tensor *sd_vae_pixels_to_nchw(const sd_tensor *image, float mul, float add, sd_error *err);
/* NCHW [N, C, H, W] -> NHWC, values clamp(v * mul + add, 0, 1). */
sd_tensor *sd_vae_nchw_to_pixels(const sd_tensor *x, float mul, float add, sd_error *err);

#endif
