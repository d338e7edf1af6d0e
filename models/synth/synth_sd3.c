/* synth_sd3.c - random-weight SD3.5 files in the layouts people download
 * (see synth.h): Stability's sd3.5_medium.safetensors (MMDiT-X + SD3 VAE),
 * the CLIP-L, CLIP-G and T5-XXL files of TripleCLIPLoader, and the VAE
 * alone. The MMDiT walk is ComfyUI's comfy/ldm/modules/diffusionmodules/
 * mmdit.py (MMDiT with qk_norm "rms", x_block_self_attn_layers); CLIP-L,
 * T5-XXL and the VAE are the shared layouts of synth_stream.c (the CLIP-L
 * and T5 files are Flux's, the same shapes and names). */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- presets ----------------------------------------------------------------------------- */

/* SD3.5 Medium (diffusers' SD3Transformer2DModel config of
 * stabilityai/stable-diffusion-3.5-medium: 24 layers of 24 x 64 heads,
 * dual_attention_layers 0-12, pos_embed_max_size 384, pooled 2048, joint
 * attention 4096). CLIP-G: OpenCLIP bigG's text tower, 32 layers of 1280. */
#define SD35_MEDIUM .hidden = 1536, .head_dim = 64, .depth = 24, .mlp_ratio = 4, .in_channels = 16, .patch = 2, \
    .pos_embed_max = 384, .adm_in = 2048, .context_in = 4096, .self_attn_blocks = 13
#define CLIP_G .clip_g_hidden = 1280, .clip_g_layers = 32, .clip_g_mlp = 5120
/* Tiny: two 64-wide heads, one MMDiT-X block and one plain block (the
 * last, with its pre-only context branch); pooled = CLIP-L + CLIP-G widths,
 * context = the tiny T5's width (the CLIP-L/G features, 192 wide, are cut
 * to it as ComfyUI's pad with a negative amount does). CLIP-G 64 wide (one
 * 64-wide head, so that no --clip-g-heads is needed) with bigG's 32 layers:
 * ComfyUI tells CLIP-G from CLIP-L and CLIP-H by its layer count. */
#define TINY_MMDIT .hidden = 128, .head_dim = 64, .depth = 2, .mlp_ratio = 4, .in_channels = 16, .patch = 2, \
    .pos_embed_max = 16, .adm_in = 192, .context_in = 64, .self_attn_blocks = 1
#define TINY_CLIP_G .clip_g_hidden = 64, .clip_g_layers = 32, .clip_g_mlp = 256

static const sd_synth_sd3_config presets[] = {
    {.name = "sd35-medium", SD35_MEDIUM, SD_SYNTH_T5_XXL, SD_SYNTH_CLIP_L, CLIP_G, SD_SYNTH_AE},
    {.name = "sd35-medium-tiny", TINY_MMDIT, SD_SYNTH_TINY_T5, SD_SYNTH_TINY_CLIP_L, TINY_CLIP_G,
     SD_SYNTH_TINY_AE},
};

const sd_synth_sd3_config *sd_synth_sd3_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

const char *sd_synth_sd3_part_name(sd_synth_sd3_part part) {
    switch (part) {
    case SD_SYNTH_SD3_CKPT: return "sd3.5 checkpoint";
    case SD_SYNTH_SD3_CLIP_L: return "clip_l";
    case SD_SYNTH_SD3_CLIP_G: return "clip_g";
    case SD_SYNTH_SD3_T5: return "t5xxl_fp16";
    case SD_SYNTH_SD3_VAE: return "sd3_vae";
    }
    return "?";
}

/* ---- key enumeration --------------------------------------------------------------------- */

typedef sd_synth_sink sink;

/* SelfAttention: qkv (with bias), the RMS q/k norms, proj unless pre-only. */
static void attn(const sd_synth_sd3_config *c, const sink *s, const char *p, int pre_only) {
    char b[160];
    snprintf(b, sizeof b, "%s.qkv", p);
    sd_synth_linear(s, b, 3 * c->hidden, c->hidden);
    sd_synth_emit(s, 1, c->head_dim, 0, "%s.ln_q.weight", p);
    sd_synth_emit(s, 1, c->head_dim, 0, "%s.ln_k.weight", p);
    if (!pre_only) {
        snprintf(b, sizeof b, "%s.proj", p);
        sd_synth_linear(s, b, c->hidden, c->hidden);
    }
}

/* DismantledBlock (x_block or context_block) of joint block i. */
static void stream(const sd_synth_sd3_config *c, const sink *s, int i, const char *which, int pre_only,
                   int self_attn) {
    int h = c->hidden;
    char b[160];
    snprintf(b, sizeof b, "joint_blocks.%d.%s.adaLN_modulation.1", i, which);
    sd_synth_linear(s, b, (self_attn ? 9 : pre_only ? 2 : 6) * h, h);
    snprintf(b, sizeof b, "joint_blocks.%d.%s.attn", i, which);
    attn(c, s, b, pre_only);
    if (self_attn) {
        snprintf(b, sizeof b, "joint_blocks.%d.%s.attn2", i, which);
        attn(c, s, b, 0);
    }
    if (!pre_only) {
        snprintf(b, sizeof b, "joint_blocks.%d.%s.mlp.fc1", i, which);
        sd_synth_linear(s, b, c->mlp_ratio * h, h);
        snprintf(b, sizeof b, "joint_blocks.%d.%s.mlp.fc2", i, which);
        sd_synth_linear(s, b, h, c->mlp_ratio * h);
    }
}

/* comfy.ldm.modules.diffusionmodules.mmdit.MMDiT's parameters. */
static void mmdit(const sd_synth_sd3_config *c, const sink *s) {
    int64_t h = c->hidden, p = c->patch, m = c->pos_embed_max;
    int64_t xs[4] = {h, c->in_channels, p, p}, ps[3] = {1, m * m, h};
    sd_synth_emit_shape(s, 4, xs, "x_embedder.proj.weight");
    sd_synth_emit(s, 1, h, 0, "x_embedder.proj.bias");
    sd_synth_emit_shape(s, 3, ps, "pos_embed");
    sd_synth_linear(s, "t_embedder.mlp.0", h, 256);
    sd_synth_linear(s, "t_embedder.mlp.2", h, h);
    sd_synth_linear(s, "y_embedder.mlp.0", h, c->adm_in);
    sd_synth_linear(s, "y_embedder.mlp.2", h, h);
    sd_synth_linear(s, "context_embedder", h, c->context_in);
    for (int i = 0; i < c->depth; i++) {
        stream(c, s, i, "context_block", i == c->depth - 1, 0);
        stream(c, s, i, "x_block", 0, i < c->self_attn_blocks);
    }
    sd_synth_linear(s, "final_layer.linear", p * p * c->in_channels, h);
    sd_synth_linear(s, "final_layer.adaLN_modulation.1", 2 * h, h);
}

static void vae(const sd_synth_sd3_config *c, const sink *s) {
    sd_synth_ae_keys(s, c->vae_ch, c->vae_ch_mult, c->vae_levels, c->vae_res_blocks, c->vae_z);
}

void sd_synth_sd3_keys(const sd_synth_sd3_config *c, sd_synth_sd3_part part, sd_synth_key_fn fn, void *user) {
    sink s = {fn, user, "", SD_F16, SD_F16};
    switch (part) {
    case SD_SYNTH_SD3_CKPT:
        s = (sink){fn, user, "model.diffusion_model.", SD_BF16, SD_BF16};
        mmdit(c, &s);
        s.prefix = "first_stage_model.";
        vae(c, &s);
        break;
    case SD_SYNTH_SD3_CLIP_L:
        sd_synth_hf_clip_keys(&s, c->clip_hidden, c->clip_layers, c->clip_mlp, c->clip_vocab, c->clip_positions);
        break;
    case SD_SYNTH_SD3_CLIP_G:
        sd_synth_hf_clip_keys(&s, c->clip_g_hidden, c->clip_g_layers, c->clip_g_mlp, c->clip_vocab,
                              c->clip_positions);
        break;
    case SD_SYNTH_SD3_T5:
        sd_synth_t5_keys(&s, c->t5_d_model, c->t5_d_kv, c->t5_heads, c->t5_d_ff, c->t5_layers, c->t5_vocab,
                         c->t5_buckets);
        break;
    case SD_SYNTH_SD3_VAE:
        s.mat = s.vec = SD_BF16;
        vae(c, &s);
        break;
    }
}

static void keys_of(const void *cfg, int part, sd_synth_key_fn fn, void *user) {
    sd_synth_sd3_keys(cfg, (sd_synth_sd3_part)part, fn, user);
}

sd_status sd_synth_sd3_write(const sd_synth_sd3_config *cfg, sd_synth_sd3_part part, uint64_t seed,
                             const char *path, sd_error *err) {
    return sd_synth_stream_write(cfg, (int)part, keys_of, seed, cfg->name, sd_synth_sd3_part_name(part), path,
                                 err);
}
