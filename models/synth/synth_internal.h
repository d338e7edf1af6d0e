/* synth_internal.h - the random fill shared by the SD1, SDXL and SD2
 * synthetic checkpoint writers (synth.c, synth_sdxl.c, synth_sd2.c). Not a public contract: use
 * models/synth/synth.h. */
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

#endif
