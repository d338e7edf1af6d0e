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

#endif
