/* taesd.h - TAESD family tiny autoencoders (TAESD, TAESDXL, TAESD3, TAEF1,
 * TAEF2): a 3-stride-2 conv encoder and a nearest-upsampling decoder of
 * residual conv Blocks (see shared/data/taesd/ARCHITECTURE.md).
 *
 * The variant is read from the weights: latent channels from the first
 * decoder / last encoder conv, GroupNorm side branches ("pool.*" keys) where
 * present. Two key layouts are accepted for each half: taesd.py's bare
 * nn.Sequential indices ("<prefix>3.conv.0.weight") and diffusers
 * AutoencoderTiny ("<prefix>encoder.layers.3..." / "<prefix>decoder.layers.N"
 * shifted down by one because its SoftClamp is not a layer).
 *
 * Ownership: sd_taesd owns its backend tensors; the sd_st_file(s) may be
 * closed after loading. Host tensors passed in are only read; results are new
 * tensors owned by the caller. The backend must outlive the model.
 */
#ifndef SD_TAESD_H
#define SD_TAESD_H

#include "formats/safetensors.h"
#include "kernels/backend.h"

typedef struct sd_taesd sd_taesd;

/* Load an encoder and/or a decoder (either file may be NULL, not both).
 * The prefixes are prepended to every key ("" for taesd.py files). Missing
 * or mis-shaped tensors fail with the key and file named. */
sd_status sd_taesd_load(sd_backend *be, sd_st_file *enc, const char *enc_prefix, sd_st_file *dec,
                        const char *dec_prefix, sd_taesd **out, sd_error *err);
void sd_taesd_free(sd_taesd *t); /* NULL-safe */

int sd_taesd_latent_channels(const sd_taesd *t);
int sd_taesd_has_encoder(const sd_taesd *t);
int sd_taesd_has_decoder(const sd_taesd *t);

/* Debug hook: called with "enc.tap.<i>" / "dec.tap.<i>" and the output of
 * every layer i of the encoder / decoder Sequential (the tensor is only
 * valid during the call). NULL disables. */
typedef void (*sd_taesd_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_taesd_set_tap(sd_taesd *t, sd_taesd_tap_fn fn, void *user);

/* The raw networks, as in taesd.py, on F32 NCHW tensors:
 * encode: image [N, 3, H, W] in [0, 1] (H, W multiples of 8) -> latent
 *         [N, LC, H/8, W/8], unscaled;
 * decode: latent -> image [N, 3, 8h, 8w], approximately [0, 1], NOT clamped. */
sd_status sd_taesd_encode(sd_taesd *t, const sd_tensor *image, sd_tensor **latent, sd_error *err);
sd_status sd_taesd_decode(sd_taesd *t, const sd_tensor *latent, sd_tensor **image, sd_error *err);

/* ComfyUI's TAESD-as-VAE conventions (comfy/taesd/taesd.py + comfy.sd.VAE):
 * decode_image: latent in VAE space [N, LC, h, w] -> decoder((z - shift) *
 *   scale) clamped to [0, 1], returned as IMAGE NHWC [N, 8h, 8w, 3];
 * encode_image: IMAGE NHWC [0, 1] (cropped to multiples of 8 around the
 *   centre as VAEEncode does) -> encoder(x) / scale + shift, NCHW.
 * scale/shift: 1/0 for plain TAESD latents; ComfyUI's VAELoader "taesd"
 * uses scale 0.18215 (SD1), "taesdxl" 0.13025 (SDXL). */
sd_status sd_taesd_decode_image(sd_taesd *t, const sd_tensor *latent, float scale, float shift,
                                sd_tensor **image, sd_error *err);
sd_status sd_taesd_encode_image(sd_taesd *t, const sd_tensor *image, float scale, float shift,
                                sd_tensor **latent, sd_error *err);

#endif
