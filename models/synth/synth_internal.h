/* synth_internal.h - what the synthetic checkpoint writers share: the
 * in-memory random fill of the SD1, SDXL and SD2 writers (synth.c,
 * synth_sdxl.c, synth_sd2.c) and the streaming writer with the text-encoder
 * and VAE layouts of the DiT families (synth_stream.c: Flux, SD3.5,
 * Z-Image). Not a public contract: use models/synth/synth.h. */
#ifndef SD_SYNTH_INTERNAL_H
#define SD_SYNTH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"
#include "models/synth/synth.h"

/* A writer being filled: the first error is kept in rc (err filled) and
 * later tensors are skipped. */
typedef struct sd_synth_filler {
    sd_st_writer *w;
    uint64_t state; /* splitmix64 state */
    sd_status rc;
    sd_error *err;
} sd_synth_filler;

/* Opens f with a new writer and the given random state; SD_ERR_NOMEM. */
sd_status sd_synth_filler_open(sd_synth_filler *f, uint64_t state, sd_error *err);

/* Adds t under name (unless an error came first) and drops the caller's
 * reference to t. */
void sd_synth_filler_add(sd_synth_filler *f, const char *name, sd_tensor *t);

/* Tags the file as random weights of preset, saves it to path and frees the
 * writer. Returns the first error of the whole fill. */
sd_status sd_synth_filler_save(sd_synth_filler *f, const char *preset, const char *path);

/* n F16 values of N(0, sd^2) from f's state (Box-Muller, pairwise). */
void sd_synth_fill_gauss_f16(sd_synth_filler *f, uint16_t *p, size_t n, double sd);

/* 1 when s ends with suf. */
int sd_synth_ends_with(const char *s, const char *suf);

/* ---- shared by the SDXL and SD2 writers (synth_sdxl.c) ---- */

/* The linear-proj UNet walk (use_linear_in_transformer) of cfg's UNet
 * fields under prefix; label_emb only when adm_in_channels > 0. */
void sd_synth_linear_unet_keys(const sd_synth_sdxl_config *cfg, const char *prefix,
                               sd_synth_key_fn fn, void *user);
/* An OpenCLIP text tower (fused in_proj, ln_1/ln_2, mlp.c_fc/c_proj,
 * ln_final, text_projection [hidden, hidden], logit_scale) under prefix. */
void sd_synth_openclip_keys(int hidden, int layers, int mlp, int vocab, int positions,
                            const char *prefix, sd_synth_key_fn fn, void *user);
/* An sd_synth_key_fn filling one tensor into the sd_synth_filler `user`:
 * norms weight 1 / bias 0, logit_scale log(1/0.07), embeddings and biases
 * N(0, 0.02^2), other weights N(0, 1/fan_in). */
void sd_synth_fill_key(void *user, const char *name, sd_dtype dtype, int ndim,
                       const int64_t *shape);

/* ---- the streaming writer and shared layouts of the DiT families
 * (synth_stream.c) ---- */

/* The shapes the DiT presets share, as designated initializers of any
 * config struct with these field names (sd_synth_flux_config,
 * sd_synth_sd3_config): the T5-XXL encoder, CLIP-L and the 16-channel ae of
 * the real files, and the tiny shapes of the -tiny presets (head width 16,
 * T5 with the real vocabulary so that token ids of any prompt fit, CLIP-L
 * 128 wide with width / 64 = 2 heads so that no loader option is needed).
 * Every preset that writes a file of a shared name (text_encoders/
 * sdflow-random-[tiny-]t5xxl_fp16, ...) uses the same macro, so one copy
 * serves every family. */
#define SD_SYNTH_T5_XXL .t5_d_model = 4096, .t5_d_kv = 64, .t5_heads = 64, .t5_d_ff = 10240, \
    .t5_layers = 24, .t5_vocab = 32128, .t5_buckets = 32
#define SD_SYNTH_CLIP_L .clip_hidden = 768, .clip_layers = 12, .clip_mlp = 3072, .clip_vocab = 49408, \
    .clip_positions = 77
#define SD_SYNTH_AE .vae_ch = 128, .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4, .vae_res_blocks = 2, \
    .vae_z = 16
#define SD_SYNTH_TINY_T5 .t5_d_model = 64, .t5_d_kv = 16, .t5_heads = 4, .t5_d_ff = 128, .t5_layers = 2, \
    .t5_vocab = 32128, .t5_buckets = 32
#define SD_SYNTH_TINY_CLIP_L .clip_hidden = 128, .clip_layers = 2, .clip_mlp = 256, .clip_vocab = 49408, \
    .clip_positions = 77
#define SD_SYNTH_TINY_AE .vae_ch = 32, .vae_ch_mult = {1, 1, 2, 2}, .vae_levels = 4, .vae_res_blocks = 1, \
    .vae_z = 16

/* Where enumerated keys go: every name gets prefix, tensors of ndim >= 2
 * the dtype mat, 1-D ones vec. */
typedef struct sd_synth_sink {
    sd_synth_key_fn fn;
    void *user;
    const char *prefix;
    sd_dtype mat, vec;
} sd_synth_sink;

/* One key: prefix + the formatted name, shape {d0, d1} cut to ndim (<= 2). */
void sd_synth_emit(const sd_synth_sink *s, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* One key of any rank (ndim <= 4). */
void sd_synth_emit_shape(const sd_synth_sink *s, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A linear layer p.weight [out, in] and p.bias [out]. */
void sd_synth_linear(const sd_synth_sink *s, const char *p, int64_t out, int64_t in);

/* transformers' T5EncoderModel state dict (shared, encoder.*). */
void sd_synth_t5_keys(const sd_synth_sink *s, int d_model, int d_kv, int heads, int d_ff, int layers, int vocab,
                      int buckets);
/* transformers' CLIPTextModel(WithProjection) state dict: text_model.*
 * without position_ids, plus text_projection.weight [hidden, hidden] (the
 * clip_l / clip_g files of Flux and SD3). */
void sd_synth_hf_clip_keys(const sd_synth_sink *s, int hidden, int layers, int mlp, int vocab, int positions);
/* The LDM autoencoder's encoder.* / decoder.* without quant_conv /
 * post_quant_conv (BFL's ae, the SD3 VAE). */
void sd_synth_ae_keys(const sd_synth_sink *s, int ch, const int *ch_mult, int levels, int res_blocks, int z);

/* Enumerates one file's keys (part: the family's part enum) into fn. */
typedef void (*sd_synth_layout_fn)(const void *cfg, int part, sd_synth_key_fn fn, void *user);

/* Writes the file keys(cfg, part) enumerates to path, streaming (atomically:
 * temporary file + rename): each tensor is a lazy entry whose bytes are made
 * chunk by chunk while the file is written, so memory stays at a few MiB
 * whatever the file's size. A value is a draw from a table of 4096
 * quantiles of N(0, 1) scaled to the tensor's spread and rounded once to its
 * dtype, picked by a counter-based hash of (seed, tensor name, element
 * index): a tensor has the same values in every file that holds it, at any
 * preset. Spread: norm weights (a name with "norm" or a 1-D weight) 1, norm
 * biases 0; biases, embeddings, pos_embed and T5's shared / position bias
 * N(0, 0.02^2); other weights N(0, 1/fan_in). Metadata:
 * sdflow_random_weights "true", sdflow_preset, sdflow_part. */
sd_status sd_synth_stream_write(const void *cfg, int part, sd_synth_layout_fn keys, uint64_t seed,
                                const char *preset, const char *part_name, const char *path, sd_error *err);

#endif
