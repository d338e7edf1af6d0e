/* sd3_controlnet.h - the SD3 ControlNet of InstantX's diffusers-layout
 * files, as ComfyUI's comfy.controlnet.load_controlnet_mmdit loads it and
 * comfy.cldm.mmdit.ControlNet computes it.
 *
 * Layout (diffusers SD3ControlNetModel, bare keys): transformer_blocks.N.*,
 * pos_embed.{proj.*, pos_embed}, pos_embed_input.proj.*,
 * time_text_embed.{timestep,text}_embedder.*, context_embedder.*,
 * controlnet_blocks.N.{weight,bias}. ComfyUI's load_controlnet takes this
 * branch for "controlnet_blocks.0.weight" with "pos_embed_input.proj.weight"
 * and without "transformer_blocks.0.adaLN_modulation.1.bias" (that is
 * Stability's SD3.5 layout, load_controlnet_sd35: models/sd3/sd35_controlnet.c
 * runs it, behind the same handle, as ComfyUI's ControlNetEmbedder). The
 * file is renamed in memory to the MMDiT's own names as
 * convert_diffusers_mmdit does (to_q/to_k/to_v rows of attn.qkv, norm1 ->
 * x_block.adaLN_modulation.1, ...; the norm1_context of block depth - 1,
 * when the file has one, with its halves swapped as ComfyUI's map does) and
 * bound with the MMDiT's loader (models/sd3/sd3.h), every joint block a full
 * one (no pre-only block, no final layer).
 *
 * depth = hidden / 64 (ComfyUI's, of the model the ControlNet was made
 * for). Forward (ControlNet.forward): y is replaced by zeros (the pooled
 * vector only contributes y_embedder's biases), x_embedder(x) + the cropped
 * pos_embed + pos_embed_input(hint), the joint blocks; after block i,
 * controlnet_blocks[i](x) is ComfyUI's "output" entry repeated depth //
 * blocks times (one fewer after the last block). An MMDiT adds entry j to
 * its image tokens after its joint block j (sd_sd3_extra.control).
 *
 * The hint is a VAE latent of the hint image times the SD3 latent scale
 * 1.5305 with no shift (latent_formats.SD3 with shift_factor 0), at the
 * latent size; a ControlNet whose pos_embed_input takes 17 channels (an
 * inpainting one) gets a mask channel appended (concat_mask: ones, or the
 * mask ControlNetInpaintingAliMamaApply gives; models/controlnet/controlnet.h).
 *
 * Ownership: a loaded ControlNet owns its weights (the file may be closed);
 * the backend must outlive it. Outputs are new tensors the caller owns.
 */
#ifndef SD_SD3_CONTROLNET_H
#define SD_SD3_CONTROLNET_H

#include "models/sd3/sd3.h"

typedef struct sd_sd3_cn sd_sd3_cn;

/* 1 when f holds ComfyUI's "SD3 diffusers controlnet" keys or Stability's
 * SD3.5 layout (below). */
int sd_sd3_cn_present(sd_st_file *f);
/* Names what f is when it is another DiT ControlNet ComfyUI loads (Flux XLabs / InstantX / Mistoline, Qwen-Image InstantX,
 * HunyuanDiT) for a refusal; NULL otherwise. */
const char *sd_sd3_cn_other_dit(sd_st_file *f);

/* Load (weights kept as stored, as the MMDiT's). SD_ERR_FORMAT /
 * SD_ERR_NOT_FOUND naming the file and key for missing or misshapen
 * tensors, SD_ERR_UNSUPPORTED for layouts the MMDiT loader refuses. */
sd_status sd_sd3_cn_load(sd_backend *be, sd_st_file *f, sd_sd3_cn **out, sd_error *err);
void sd_sd3_cn_free(sd_sd3_cn *cn); /* NULL-safe */

/* The trunk's config (depth = its joint-block count), ComfyUI's depth
 * (hidden / 64), the hint's channel count (pos_embed_input's), the number
 * of controlnet blocks and of "output" entries, and the block whose output
 * entry j is (0 <= j < n_outputs). */
const sd_sd3_config *sd_sd3_cn_config(const sd_sd3_cn *cn);
int sd_sd3_cn_depth(const sd_sd3_cn *cn);
int sd_sd3_cn_hint_channels(const sd_sd3_cn *cn);
int sd_sd3_cn_n_blocks(const sd_sd3_cn *cn);
int sd_sd3_cn_n_outputs(const sd_sd3_cn *cn);
int sd_sd3_cn_output_block(const sd_sd3_cn *cn, int j);

/* Stability's SD3.5 layout: 1 / its control_type (blur 0, canny 1, depth
 * 2, -1 without; ComfyUI's preprocess_image: canny a * 255 * 0.5 + 0.5,
 * depth 1 - a, else none) / the hint latent's shift (SD3's 0.0609 for
 * SD3.5, 0 for InstantX's: "SD3 controlnet weirdness"). */
int sd_sd3_cn_is_sd35(const sd_sd3_cn *cn);
int sd_sd3_cn_control_type(const sd_sd3_cn *cn);
float sd_sd3_cn_hint_shift(const sd_sd3_cn *cn);

/* SD_OK when the outputs fit an MMDiT of config m (hidden size, patch size,
 * latent channels, context width, pooled width); else SD_ERR_INVALID saying
 * what differs. */
sd_status sd_sd3_cn_check_fit(const sd_sd3_cn *cn, const sd_sd3_config *m, sd_error *err);

/* One forward: out[i] (i < sd_sd3_cn_n_blocks) = controlnet_blocks[i] of the
 * image tokens after block i, [N, T, hidden]. model: the MMDiT being
 * sampled (an SD3.5 ControlNet uses its x_embedder or y_embedder, as
 * ControlNetSD35.pre_run copies them; InstantX's ignore it); y [N, pooled]
 * or NULL (InstantX's zero it).
 *   x          [N, in_channels, H, W] (the MMDiT's input)
 *   timesteps  N host floats (the MMDiT's)
 *   hint       [N, hint_channels, H, W]
 *   context    [N, L, context_in_dim]
 * SD_ERR_INVALID for shapes that do not fit, else the backend's error. */
sd_status sd_sd3_cn_forward(sd_sd3_cn *cn, const sd_sd3 *model, sd_bt *x, const float *timesteps, sd_bt *hint,
                            sd_bt *context, sd_bt *y, sd_bt **out, sd_error *err);

#endif
