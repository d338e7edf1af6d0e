/* synth_flux.c - random-weight Flux.1 files in the layouts people download
 * (see synth.h): the BFL DiT, the HF T5-XXL encoder and CLIP-L, the 16-channel
 * ae, and the Comfy-Org single-file fp8 checkpoint holding all four. The
 * encoders' and the ae's layouts and the streaming writer (full-size files
 * are 10-24 GB, written with a few MiB of memory) are synth_stream.c's,
 * shared with the SD3.5 and Z-Image writers. */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- presets ----------------------------------------------------------------------------- */

#define FLUX_DEV_DIT .hidden = 3072, .heads = 24, .depth = 19, .depth_single = 38, .mlp_ratio = 4, \
    .in_channels = 16, .vec_in = 768, .context_in = 4096
/* Tiny shapes for tests: head width 16 (the RoPE axes rule of models/flux
 * needs a multiple of 16); the encoders' tiny shapes are synth_internal.h's. */
#define TINY_DIT .hidden = 64, .heads = 4, .depth = 2, .depth_single = 2, .mlp_ratio = 4, \
    .in_channels = 16, .vec_in = 128, .context_in = 64
#define T5_XXL SD_SYNTH_T5_XXL
#define CLIP_L SD_SYNTH_CLIP_L
#define AE SD_SYNTH_AE
#define TINY_T5 SD_SYNTH_TINY_T5
#define TINY_CLIP SD_SYNTH_TINY_CLIP_L
#define TINY_AE SD_SYNTH_TINY_AE

static const sd_synth_flux_config presets[] = {
    {.name = "flux-dev", FLUX_DEV_DIT, .guidance_embed = 1, T5_XXL, CLIP_L, AE},
    {.name = "flux-schnell", FLUX_DEV_DIT, .guidance_embed = 0, T5_XXL, CLIP_L, AE},
    {.name = "flux-dev-tiny", TINY_DIT, .guidance_embed = 1, TINY_T5, TINY_CLIP, TINY_AE},
    {.name = "flux-schnell-tiny", TINY_DIT, .guidance_embed = 0, TINY_T5, TINY_CLIP, TINY_AE},
};

const sd_synth_flux_config *sd_synth_flux_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

const char *sd_synth_flux_part_name(sd_synth_flux_part part) {
    switch (part) {
    case SD_SYNTH_FLUX_DIT: return "diffusion model";
    case SD_SYNTH_FLUX_T5: return "t5xxl_fp16";
    case SD_SYNTH_FLUX_CLIP_L: return "clip_l";
    case SD_SYNTH_FLUX_AE: return "ae";
    case SD_SYNTH_FLUX_CKPT_FP8: return "fp8 checkpoint";
    }
    return "?";
}

/* ---- key enumeration --------------------------------------------------------------------- */

typedef sd_synth_sink sink;
#define emit sd_synth_emit

static void linear(sink *s, const char *p, int out, int in) { sd_synth_linear(s, p, out, in); }

static void mlp_embedder(sink *s, const char *p, int in, int hidden) {
    char b[128];
    snprintf(b, sizeof b, "%s.in_layer", p);
    linear(s, b, hidden, in);
    snprintf(b, sizeof b, "%s.out_layer", p);
    linear(s, b, hidden, hidden);
}

/* comfy.ldm.flux.model.Flux's parameters, BFL names. */
static void dit(const sd_synth_flux_config *c, sink *s) {
    int h = c->hidden, hd = c->hidden / c->heads, mlp = c->hidden * c->mlp_ratio, p2 = 4;
    char b[128];
    linear(s, "img_in", h, c->in_channels * p2);
    mlp_embedder(s, "time_in", 256, h);
    mlp_embedder(s, "vector_in", c->vec_in, h);
    if (c->guidance_embed) mlp_embedder(s, "guidance_in", 256, h);
    linear(s, "txt_in", h, c->context_in);
    for (int i = 0; i < c->depth; i++) {
        const char *st[2] = {"img", "txt"};
        for (int k = 0; k < 2; k++) {
            snprintf(b, sizeof b, "double_blocks.%d.%s_mod.lin", i, st[k]);
            linear(s, b, 6 * h, h);
            snprintf(b, sizeof b, "double_blocks.%d.%s_attn.qkv", i, st[k]);
            linear(s, b, 3 * h, h);
            emit(s, 1, hd, 0, "double_blocks.%d.%s_attn.norm.query_norm.scale", i, st[k]);
            emit(s, 1, hd, 0, "double_blocks.%d.%s_attn.norm.key_norm.scale", i, st[k]);
            snprintf(b, sizeof b, "double_blocks.%d.%s_attn.proj", i, st[k]);
            linear(s, b, h, h);
            snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.0", i, st[k]);
            linear(s, b, mlp, h);
            snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.2", i, st[k]);
            linear(s, b, h, mlp);
        }
    }
    for (int i = 0; i < c->depth_single; i++) {
        snprintf(b, sizeof b, "single_blocks.%d.linear1", i);
        linear(s, b, 3 * h + mlp, h);
        snprintf(b, sizeof b, "single_blocks.%d.linear2", i);
        linear(s, b, h, h + mlp);
        emit(s, 1, hd, 0, "single_blocks.%d.norm.query_norm.scale", i);
        emit(s, 1, hd, 0, "single_blocks.%d.norm.key_norm.scale", i);
        snprintf(b, sizeof b, "single_blocks.%d.modulation.lin", i);
        linear(s, b, 3 * h, h);
    }
    linear(s, "final_layer.linear", p2 * c->in_channels, h);
    linear(s, "final_layer.adaLN_modulation.1", 2 * h, h);
}

static void t5(const sd_synth_flux_config *c, sink *s) {
    sd_synth_t5_keys(s, c->t5_d_model, c->t5_d_kv, c->t5_heads, c->t5_d_ff, c->t5_layers, c->t5_vocab,
                     c->t5_buckets);
}

static void clip_l(const sd_synth_flux_config *c, sink *s) {
    sd_synth_hf_clip_keys(s, c->clip_hidden, c->clip_layers, c->clip_mlp, c->clip_vocab, c->clip_positions);
}

static void ae(const sd_synth_flux_config *c, sink *s) {
    sd_synth_ae_keys(s, c->vae_ch, c->vae_ch_mult, c->vae_levels, c->vae_res_blocks, c->vae_z);
}

void sd_synth_flux_keys(const sd_synth_flux_config *cfg, sd_synth_flux_part part, sd_synth_key_fn fn,
                        void *user) {
    sink s = {fn, user, "", SD_BF16, SD_BF16};
    switch (part) {
    case SD_SYNTH_FLUX_DIT: dit(cfg, &s); break;
    case SD_SYNTH_FLUX_T5:
        s.mat = s.vec = SD_F16;
        t5(cfg, &s);
        break;
    case SD_SYNTH_FLUX_CLIP_L:
        s.mat = s.vec = SD_F16;
        clip_l(cfg, &s);
        break;
    case SD_SYNTH_FLUX_AE:
        s.mat = s.vec = SD_F32;
        ae(cfg, &s);
        break;
    case SD_SYNTH_FLUX_CKPT_FP8: /* Comfy-Org's flux1-dev-fp8.safetensors */
        s = (sink){fn, user, "model.diffusion_model.", SD_F8_E4M3, SD_BF16};
        dit(cfg, &s);
        s = (sink){fn, user, "text_encoders.t5xxl.transformer.", SD_F8_E4M3, SD_F16};
        t5(cfg, &s);
        s = (sink){fn, user, "text_encoders.clip_l.transformer.", SD_F16, SD_F16};
        clip_l(cfg, &s);
        s = (sink){fn, user, "vae.", SD_BF16, SD_BF16};
        ae(cfg, &s);
        break;
    }
}

/* ---- writing ------------------------------------------------------------------------------- */

static void keys_of(const void *cfg, int part, sd_synth_key_fn fn, void *user) {
    sd_synth_flux_keys(cfg, (sd_synth_flux_part)part, fn, user);
}

sd_status sd_synth_flux_write(const sd_synth_flux_config *cfg, sd_synth_flux_part part, uint64_t seed,
                              const char *path, sd_error *err) {
    return sd_synth_stream_write(cfg, (int)part, keys_of, seed, cfg->name, sd_synth_flux_part_name(part), path,
                                 err);
}
