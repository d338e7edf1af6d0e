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

/* ---- SD3.5 (models/synth/synth_sd3.c): the files ComfyUI's SD3.5 workflows
 * load, in their published layouts:
 *   SD_SYNTH_SD3_CKPT    checkpoints/sd3.5_medium.safetensors as Stability
 *                        publishes it: the MMDiT(-X) under
 *                        model.diffusion_model.* and the SD3 VAE under
 *                        first_stage_model.* (no text encoders), BF16, the
 *                        dtype of Stability's SD3.5 checkpoints; loads with
 *                        CheckpointLoaderSimple (MODEL, VAE) and UNETLoader
 *   SD_SYNTH_SD3_CLIP_L  text_encoders/clip_l.safetensors: Flux's CLIP-L file
 *   SD_SYNTH_SD3_CLIP_G  text_encoders/clip_g.safetensors: transformers'
 *                        CLIPTextModelWithProjection bigG (text_model.*,
 *                        text_projection), F16
 *   SD_SYNTH_SD3_T5      text_encoders/t5xxl_fp16.safetensors: Flux's T5 file
 *   SD_SYNTH_SD3_VAE     vae/sd3_vae.safetensors: the checkpoint's VAE alone
 *                        (encoder.* / decoder.*, 16 latent channels, no
 *                        quant_conv), BF16 as in the checkpoint
 * Written as a stream like the Flux files (a few MiB of memory). ---- */
typedef struct sd_synth_sd3_config {
    const char *name;
    /* MMDiT: hidden width, head width (the q/k RMSNorm length), joint
     * blocks, MLP ratio, latent channels, patch, pos_embed side M (a
     * [1, M*M, hidden] table), pooled (y_embedder) and context widths, and
     * MMDiT-X: blocks 0 .. self_attn_blocks - 1 have the second attention */
    int hidden, head_dim, depth, mlp_ratio, in_channels, patch, pos_embed_max, adm_in, context_in;
    int self_attn_blocks;
    int t5_d_model, t5_d_kv, t5_heads, t5_d_ff, t5_layers, t5_vocab, t5_buckets;
    int clip_hidden, clip_layers, clip_mlp, clip_vocab, clip_positions; /* CLIP-L */
    int clip_g_hidden, clip_g_layers, clip_g_mlp;
    int vae_ch, vae_ch_mult[4], vae_levels, vae_res_blocks, vae_z;
} sd_synth_sd3_config;

typedef enum sd_synth_sd3_part {
    SD_SYNTH_SD3_CKPT = 0,
    SD_SYNTH_SD3_CLIP_L,
    SD_SYNTH_SD3_CLIP_G,
    SD_SYNTH_SD3_T5,
    SD_SYNTH_SD3_VAE
} sd_synth_sd3_part;

/* Presets: "sd35-medium" (SD3.5 Medium full size: hidden 1536, 24 heads of
 * 64, 24 joint blocks, MMDiT-X blocks 0-12, pos_embed 384 x 384, pooled
 * 2048, context 4096; CLIP-L, CLIP-G, T5-XXL, the SD3 VAE), "sd35-medium-tiny"
 * (hidden 128, 2 blocks, block 0 MMDiT-X, pos_embed 16 x 16; the tiny T5,
 * CLIP-L and ae shapes of flux-*-tiny, a CLIP-G 64 wide with bigG's 32
 * layers, its layer count being what tells CLIP-G from CLIP-L). NULL if
 * unknown. */
const sd_synth_sd3_config *sd_synth_sd3_preset(const char *name);
/* "sd3.5 checkpoint", "clip_l", "clip_g", "t5xxl_fp16", "sd3_vae". */
const char *sd_synth_sd3_part_name(sd_synth_sd3_part part);
void sd_synth_sd3_keys(const sd_synth_sd3_config *cfg, sd_synth_sd3_part part, sd_synth_key_fn fn, void *user);
sd_status sd_synth_sd3_write(const sd_synth_sd3_config *cfg, sd_synth_sd3_part part, uint64_t seed,
                             const char *path, sd_error *err);

/* ---- Z-Image-Turbo (models/synth/synth_zimage.c): the files of ComfyUI's
 * Z-Image-Turbo template, in Comfy-Org's layouts:
 *   SD_SYNTH_ZIMAGE_DIT    diffusion_models/z_image_turbo_bf16.safetensors:
 *                          the NextDiT with ComfyUI's names (x_embedder,
 *                          noise_refiner / context_refiner / layers with a
 *                          fused attention.qkv, cap_embedder, t_embedder,
 *                          final_layer, x_pad_token, cap_pad_token), BF16
 *   SD_SYNTH_ZIMAGE_QWEN3  text_encoders/qwen_3_4b.safetensors: transformers'
 *                          Qwen3 decoder (model.embed_tokens,
 *                          model.layers.N.*, model.norm; tied embeddings:
 *                          no lm_head), BF16
 *   SD_SYNTH_ZIMAGE_AE     vae/ae.safetensors: Flux's ae file
 * Written as a stream like the Flux files. ---- */
typedef struct sd_synth_zimage_config {
    const char *name;
    /* NextDiT: width, head width, query and key/value heads, main layers,
     * refiner layers (each of noise_refiner and context_refiner), FFN width,
     * caption width (the Qwen3 width), timestep MLP width and the adaLN
     * input width, latent channels */
    int dim, head_dim, heads, kv_heads, layers, refiner_layers, ffn, cap_feat, t_dim, adaln_dim, in_channels;
    /* Qwen3 */
    int q_vocab, q_hidden, q_layers, q_heads, q_kv_heads, q_head_dim, q_inter;
    int vae_ch, vae_ch_mult[4], vae_levels, vae_res_blocks, vae_z;
} sd_synth_zimage_config;

typedef enum sd_synth_zimage_part {
    SD_SYNTH_ZIMAGE_DIT = 0,
    SD_SYNTH_ZIMAGE_QWEN3,
    SD_SYNTH_ZIMAGE_AE
} sd_synth_zimage_part;

/* Presets: "zimage-turbo" (Z-Image-Turbo full size: dim 3840, 30 heads of
 * 128, 30 layers + 2 + 2 refiners, FFN 10240; Qwen3-4B: 2560 wide, 36
 * layers, 32 / 8 heads, MLP 9728; the ae), "zimage-turbo-tiny" (dim 64, 4
 * heads of 16, 2 layers + 1 + 1 refiners; a 3-layer Qwen3 64 wide with
 * 128-wide heads (2 / 1) and the real vocabulary; the tiny ae of
 * flux-*-tiny). NULL if unknown. */
const sd_synth_zimage_config *sd_synth_zimage_preset(const char *name);
/* "diffusion model", "qwen_3_4b", "ae". */
const char *sd_synth_zimage_part_name(sd_synth_zimage_part part);
void sd_synth_zimage_keys(const sd_synth_zimage_config *cfg, sd_synth_zimage_part part, sd_synth_key_fn fn,
                          void *user);
sd_status sd_synth_zimage_write(const sd_synth_zimage_config *cfg, sd_synth_zimage_part part, uint64_t seed,
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
 * while the file is written (memory: one layer's stored bytes plus a chunk
 * of floats per thread), its rows split between `threads` threads (<= 0:
 * every CPU this process may use, sd_backend_default_threads); the file's
 * bytes are the same for every thread count.
 * SD_ERR_INVALID for another type or part. */
sd_status sd_synth_flux_gguf_write(const sd_synth_flux_config *cfg, sd_synth_flux_part part, const char *quant,
                                   uint64_t seed, int threads, const char *path, sd_error *err);
/* 1 when name is one of those types (*dt, when not NULL: its tensor type). */
int sd_synth_gguf_type(const char *name, sd_dtype *dt);

#endif
