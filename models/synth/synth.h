/* synth.h - synthesize random-weight checkpoints in the real single-file
 * key layouts.
 *
 * Used for the README demo (a txt2img run without downloading anything), for
 * benchmarks (full-size shapes), and by tests that need a model of a given
 * shape. Keys and shapes follow the LDM single-file layout exactly
 * (model.diffusion_model.*, first_stage_model.*,
 * cond_stage_model.transformer.text_model.*), so the same loaders that read
 * real checkpoints read these. Weights are drawn from a seeded generator
 * (N(0, 1/fan_in)), norms start at weight 1 / bias 0: the outputs are noise,
 * and say so in the file's metadata ("sdflow_random_weights": "true").
 */
#ifndef SD_SYNTH_H
#define SD_SYNTH_H

#include <stdint.h>
#include "core/error.h"
#include "formats/safetensors.h"

typedef struct sd_synth_config {
    const char *name;      /* preset name */
    /* UNet */
    int model_channels, in_channels, out_channels;
    int channel_mult[4], n_levels;
    int num_res_blocks;
    unsigned attn_levels;  /* bit i: SpatialTransformer at level i */
    int transformer_depth;
    int context_dim;
    /* VAE */
    int vae_ch, vae_ch_mult[4], vae_levels, vae_res_blocks, vae_z;
    /* CLIP-L text encoder (HF layout) */
    int clip_hidden, clip_layers, clip_mlp, clip_vocab, clip_positions;
} sd_synth_config;

/* Presets: "sd1-tiny" (the shapes of the reference tiny model), "sd1" (SD1.5
 * full size). NULL if unknown. */
const sd_synth_config *sd_synth_preset(const char *name);

/* Called once per tensor of the layout, in a fixed order. */
typedef void (*sd_synth_key_fn)(void *user, const char *name, sd_dtype dtype, int ndim,
                                const int64_t *shape);
/* Enumerate every key of the SD1 layout for `cfg` (the checkpoint's complete
 * key set, extras such as betas included). */
void sd_synth_sd1_keys(const sd_synth_config *cfg, sd_synth_key_fn fn, void *user);

/* Write a complete random-weight SD1 checkpoint (F16 weights) to `path`. */
sd_status sd_synth_sd1_write(const sd_synth_config *cfg, uint64_t seed, const char *path,
                             sd_error *err);

/* Write a small synthetic CLIP BPE vocabulary (vocab.json + merges.txt) into
 * `dir` (created if needed): every byte symbol, a few hundred merges of
 * common English words, and the special tokens at CLIP's ids (49406, 49407),
 * so that token ids stay inside a CLIP-L embedding table. It tokenizes any
 * text, but differently from the real CLIP vocabulary: it exists only so
 * the demo runs on a machine with no vocabulary at all. */
sd_status sd_synth_vocab_write(const char *dir, sd_error *err);

/* ---- SDXL base (sgm single-file layout: model.diffusion_model.* with
 * label_emb and linear proj_in/out, first_stage_model.*, CLIP-L under
 * conditioner.embedders.0.transformer.text_model.*, OpenCLIP bigG under
 * conditioner.embedders.1.model.*; models/synth/synth_sdxl.c) ---- */
typedef struct sd_synth_sdxl_config {
    const char *name;
    /* UNet */
    int model_channels, in_channels, out_channels;
    int channel_mult[4], n_levels;
    int num_res_blocks;
    int transformer_depth[4];     /* per level, input and output blocks; 0 = none */
    int transformer_depth_middle;
    int context_dim;              /* clip_l_hidden + clip_g_hidden */
    int adm_in_channels;          /* clip_g_hidden + 6 * 256 */
    /* VAE */
    int vae_ch, vae_ch_mult[4], vae_levels, vae_res_blocks, vae_z;
    /* text encoders */
    int clip_l_hidden, clip_l_layers, clip_l_mlp;
    int clip_g_hidden, clip_g_layers, clip_g_mlp;
    int clip_vocab, clip_positions;
} sd_synth_sdxl_config;

/* Presets: "sdxl-tiny" (the shapes of the reference tiny SDXL model),
 * "sdxl" (sd_xl_base_1.0 full size). NULL if unknown. */
const sd_synth_sdxl_config *sd_synth_sdxl_preset(const char *name);
/* Enumerate every key of the SDXL base layout for `cfg`. */
void sd_synth_sdxl_keys(const sd_synth_sdxl_config *cfg, sd_synth_key_fn fn, void *user);
/* Write a complete random-weight SDXL checkpoint (F16 weights) to `path`.
 * The writer holds every tensor until it saves: the full-size preset needs
 * about 7 GB of memory. */
sd_status sd_synth_sdxl_write(const sd_synth_sdxl_config *cfg, uint64_t seed, const char *path,
                              sd_error *err);

/* ---- SD2.x (LDM single-file layout: model.diffusion_model.* with linear
 * proj_in/out and no label_emb, first_stage_model.*, OpenCLIP ViT-H under
 * cond_stage_model.model.*; models/synth/synth_sd2.c) ---- */
typedef struct sd_synth_sd2_config {
    const char *name;
    /* UNet (context_dim = clip_hidden) */
    int model_channels, in_channels, out_channels;
    int channel_mult[4], n_levels;
    int num_res_blocks;
    int transformer_depth[4]; /* per level; 0 = none */
    int transformer_depth_middle;
    /* VAE */
    int vae_ch, vae_ch_mult[4], vae_levels, vae_res_blocks, vae_z;
    /* OpenCLIP ViT-H text tower */
    int clip_hidden, clip_layers, clip_mlp, clip_vocab, clip_positions;
    /* 1: a 768-v model as ComfyUI detects one: the population std of
     * output_blocks.11.1.transformer_blocks.0.norm1.bias is 0.2 (> 0.09);
     * 0: that bias is 0 like every other norm bias (SD2-base, eps). */
    int v_prediction;
} sd_synth_sd2_config;

/* Presets: "sd2-tiny" (v-prediction), "sd2-tiny-eps" (the same shapes,
 * eps), "sd2" (SD2.1 768-v full size). NULL if unknown. The tiny UNet has
 * 4 levels and attention at level 0 (64 channels: one 64-wide head) so that
 * output_blocks.11.1, the block the v-prediction guess reads, exists. */
const sd_synth_sd2_config *sd_synth_sd2_preset(const char *name);
/* Enumerate every key of the SD2 layout for `cfg`. */
void sd_synth_sd2_keys(const sd_synth_sd2_config *cfg, sd_synth_key_fn fn, void *user);
/* Write a complete random-weight SD2 checkpoint (F16 weights) to `path`. */
sd_status sd_synth_sd2_write(const sd_synth_sd2_config *cfg, uint64_t seed, const char *path,
                             sd_error *err);

/* ---- Flux.1 (models/synth/synth_flux.c): the files ComfyUI's Flux
 * workflows load, each in its published layout:
 *   SD_SYNTH_FLUX_DIT       diffusion_models/flux1-{dev,schnell}.safetensors:
 *                           bare BFL keys (double_blocks.N..., single_blocks.N...,
 *                           guidance_in for dev), BF16
 *   SD_SYNTH_FLUX_T5        text_encoders/t5xxl_fp16.safetensors: HF
 *                           T5EncoderModel keys (encoder.block.N..., shared), F16
 *   SD_SYNTH_FLUX_CLIP_L    text_encoders/clip_l.safetensors: HF CLIPTextModel
 *                           keys (text_model.*, text_projection), F16
 *   SD_SYNTH_FLUX_AE        vae/ae.safetensors: encoder.* / decoder.*, 16
 *                           latent channels, no quant_conv, F32
 *   SD_SYNTH_FLUX_CKPT_FP8  checkpoints/flux1-dev-fp8.safetensors (Comfy-Org's
 *                           single file): model.diffusion_model.* and
 *                           text_encoders.t5xxl.transformer.* with F8_E4M3
 *                           matrices (1-D tensors BF16 / F16),
 *                           text_encoders.clip_l.transformer.* F16, vae.* BF16
 * The writer streams: a full-size file (24 GB for the BF16 DiT) is written
 * chunk by chunk with a few MiB of memory. Values come from a table of 4096
 * N(0, 1) quantiles (see synth_flux.c), norms 1 / 0 as in synth.h's rule;
 * the metadata says "sdflow_random_weights": "true". ---- */
typedef struct sd_synth_flux_config {
    const char *name;
    /* DiT: hidden width, heads, double / single blocks, MLP ratio, latent
     * channels (before the 2x2 patch), pooled (vector_in) and T5 widths */
    int hidden, heads, depth, depth_single, mlp_ratio, in_channels, vec_in, context_in;
    int guidance_embed; /* dev: 1 */
    int t5_d_model, t5_d_kv, t5_heads, t5_d_ff, t5_layers, t5_vocab, t5_buckets;
    int clip_hidden, clip_layers, clip_mlp, clip_vocab, clip_positions;
    int vae_ch, vae_ch_mult[4], vae_levels, vae_res_blocks, vae_z;
} sd_synth_flux_config;

typedef enum sd_synth_flux_part {
    SD_SYNTH_FLUX_DIT = 0,
    SD_SYNTH_FLUX_T5,
    SD_SYNTH_FLUX_CLIP_L,
    SD_SYNTH_FLUX_AE,
    SD_SYNTH_FLUX_CKPT_FP8
} sd_synth_flux_part;

/* Presets: "flux-dev", "flux-schnell" (FLUX.1 full size: hidden 3072, 24
 * heads, 19 + 38 blocks; T5-XXL; CLIP-L; ae), "flux-dev-tiny",
 * "flux-schnell-tiny" (hidden 64, 4 heads, 2 + 2 blocks, a 2-layer T5 of
 * width 64 with the real vocabulary, a 2-layer CLIP-L of width 128, a small
 * ae: each file a few MB, for tests). NULL if unknown. */
const sd_synth_flux_config *sd_synth_flux_preset(const char *name);
/* "diffusion model", "t5xxl_fp16", "clip_l", "ae", "fp8 checkpoint". */
const char *sd_synth_flux_part_name(sd_synth_flux_part part);
/* Enumerate every key of one file of the layout. */
void sd_synth_flux_keys(const sd_synth_flux_config *cfg, sd_synth_flux_part part, sd_synth_key_fn fn,
                        void *user);
/* Write one file (atomically: temporary file + rename). */
sd_status sd_synth_flux_write(const sd_synth_flux_config *cfg, sd_synth_flux_part part, uint64_t seed,
                              const char *path, sd_error *err);

/* ---- GGUF (models/synth/synth_gguf.c): the DiT and the T5 as the files
 * people run Flux from on small machines:
 *   SD_SYNTH_FLUX_DIT  city96's DiT files (arch flux, BFL keys): ComfyUI-GGUF's
 *                      convert.py (1-D and <= 1024-element tensors F32), then
 *                      llama-quantize with its image-model rules (the blocks'
 *                      2-D weights in the type, F16 where rows are not whole
 *                      blocks of it; txt_in., img_in., time_in., vector_in.,
 *                      guidance_in., final_layer. kept BF16);
 *   SD_SYNTH_FLUX_T5   a llama.cpp T5 encoder (arch t5encoder, enc.blk.N.attn_q
 *                      ... names; 1-D F32, the relative position bias F16,
 *                      the matrices in the type).
 * quant: llama.cpp's type names F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K_S (Q4_K),
 * Q5_K_S (Q5_K), Q6_K, quantized by core/quantize.c. Each tensor is made
 * while the file is written (memory: one layer). SD_ERR_INVALID for another
 * type or part. */
sd_status sd_synth_flux_gguf_write(const sd_synth_flux_config *cfg, sd_synth_flux_part part, const char *quant,
                                   uint64_t seed, const char *path, sd_error *err);
/* 1 when name is one of those types (*dt, when not NULL: its tensor type). */
int sd_synth_gguf_type(const char *name, sd_dtype *dt);

#endif
