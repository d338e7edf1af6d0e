/* synth_zimage.c - random-weight Z-Image-Turbo files in the layouts of
 * ComfyUI's Z-Image-Turbo template (see synth.h): the NextDiT with
 * ComfyUI's names (comfy/ldm/lumina/model.py, the Z-Image branch of
 * model_detection: z_image_modulation, pad tokens), transformers' Qwen3
 * decoder, and Flux's ae (synth_stream.c's layout and file). */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- presets ----------------------------------------------------------------------------- */

/* ComfyUI's Z-Image config: dim 3840, 30 heads, 30 key/value heads, FFN
 * int(8/3 * 3840) = 10240 (a multiple of 256), cap_feat_dim 2560, the
 * timestep MLP min(dim, 1024) wide with a 256-wide output (the adaLN
 * input, min(dim, 256)). Qwen3-4B: transformers' config (151936 tokens,
 * 2560 wide, 36 layers, 32 query / 8 key-value heads of 128, MLP 9728). */
#define ZIMAGE_DIT .dim = 3840, .head_dim = 128, .heads = 30, .kv_heads = 30, .layers = 30, .refiner_layers = 2, \
    .ffn = 10240, .cap_feat = 2560, .t_dim = 1024, .adaln_dim = 256, .in_channels = 16
#define QWEN3_4B .q_vocab = 151936, .q_hidden = 2560, .q_layers = 36, .q_heads = 32, .q_kv_heads = 8, \
    .q_head_dim = 128, .q_inter = 9728
/* Tiny: head width 16 (the RoPE axes rule of models/zimage needs a
 * multiple of 16); FFN int(8/3 * 64) = 170 rounded up to 256 as
 * ComfyUI's FeedForward does; the timestep MLP and adaLN widths
 * min(64, 1024) and min(64, 256). The Qwen3 keeps 128-wide heads (the
 * class constant) and the real vocabulary; 3 layers, the output being the
 * hidden state of layer -2. */
#define TINY_DIT .dim = 64, .head_dim = 16, .heads = 4, .kv_heads = 4, .layers = 2, .refiner_layers = 1, \
    .ffn = 256, .cap_feat = 64, .t_dim = 64, .adaln_dim = 64, .in_channels = 16
#define TINY_QWEN3 .q_vocab = 151936, .q_hidden = 64, .q_layers = 3, .q_heads = 2, .q_kv_heads = 1, \
    .q_head_dim = 128, .q_inter = 128

static const sd_synth_zimage_config presets[] = {
    {.name = "zimage-turbo", ZIMAGE_DIT, QWEN3_4B, SD_SYNTH_AE},
    {.name = "zimage-turbo-tiny", TINY_DIT, TINY_QWEN3, SD_SYNTH_TINY_AE},
};

const sd_synth_zimage_config *sd_synth_zimage_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

const char *sd_synth_zimage_part_name(sd_synth_zimage_part part) {
    switch (part) {
    case SD_SYNTH_ZIMAGE_DIT: return "diffusion model";
    case SD_SYNTH_ZIMAGE_QWEN3: return "qwen_3_4b";
    case SD_SYNTH_ZIMAGE_AE: return "ae";
    }
    return "?";
}

/* ---- key enumeration --------------------------------------------------------------------- */

typedef sd_synth_sink sink;

/* JointTransformerBlock what.i: attention (fused qkv, no out bias, q/k
 * RMSNorms), SwiGLU feed_forward, four RMSNorms, and the adaLN linear
 * (z_image_modulation: no SiLU before it, index 0) when modulated. */
static void block(const sd_synth_zimage_config *c, const sink *s, const char *what, int i, int modulated) {
    int64_t d = c->dim, hd = c->head_dim;
    sd_synth_emit(s, 2, (c->heads + 2 * c->kv_heads) * hd, d, "%s.%d.attention.qkv.weight", what, i);
    sd_synth_emit(s, 2, d, c->heads * hd, "%s.%d.attention.out.weight", what, i);
    sd_synth_emit(s, 1, hd, 0, "%s.%d.attention.q_norm.weight", what, i);
    sd_synth_emit(s, 1, hd, 0, "%s.%d.attention.k_norm.weight", what, i);
    sd_synth_emit(s, 2, c->ffn, d, "%s.%d.feed_forward.w1.weight", what, i);
    sd_synth_emit(s, 2, d, c->ffn, "%s.%d.feed_forward.w2.weight", what, i);
    sd_synth_emit(s, 2, c->ffn, d, "%s.%d.feed_forward.w3.weight", what, i);
    static const char *const norms[] = {"attention_norm1", "ffn_norm1", "attention_norm2", "ffn_norm2"};
    for (int k = 0; k < 4; k++) sd_synth_emit(s, 1, d, 0, "%s.%d.%s.weight", what, i, norms[k]);
    if (modulated) {
        char b[128];
        snprintf(b, sizeof b, "%s.%d.adaLN_modulation.0", what, i);
        sd_synth_linear(s, b, 4 * d, c->adaln_dim);
    }
}

/* comfy.ldm.lumina.model.NextDiT's parameters, Z-Image configuration. */
static void dit(const sd_synth_zimage_config *c, const sink *s) {
    int64_t d = c->dim, pp = 4;
    sd_synth_linear(s, "x_embedder", d, pp * c->in_channels);
    for (int i = 0; i < c->refiner_layers; i++) block(c, s, "noise_refiner", i, 1);
    for (int i = 0; i < c->refiner_layers; i++) block(c, s, "context_refiner", i, 0);
    sd_synth_linear(s, "t_embedder.mlp.0", c->t_dim, 256);
    sd_synth_linear(s, "t_embedder.mlp.2", c->adaln_dim, c->t_dim);
    sd_synth_emit(s, 1, c->cap_feat, 0, "cap_embedder.0.weight");
    sd_synth_linear(s, "cap_embedder.1", d, c->cap_feat);
    for (int i = 0; i < c->layers; i++) block(c, s, "layers", i, 1);
    sd_synth_linear(s, "final_layer.linear", pp * c->in_channels, d);
    sd_synth_linear(s, "final_layer.adaLN_modulation.1", d, c->adaln_dim);
    sd_synth_emit(s, 2, 1, d, "x_pad_token");
    sd_synth_emit(s, 2, 1, d, "cap_pad_token");
}

/* transformers' Qwen3ForCausalLM without lm_head (tied embeddings). */
static void qwen3(const sd_synth_zimage_config *c, const sink *s) {
    int64_t h = c->q_hidden, hd = c->q_head_dim, q = c->q_heads * hd, kv = c->q_kv_heads * hd;
    sd_synth_emit(s, 2, c->q_vocab, h, "model.embed_tokens.weight");
    for (int i = 0; i < c->q_layers; i++) {
        sd_synth_emit(s, 1, h, 0, "model.layers.%d.input_layernorm.weight", i);
        sd_synth_emit(s, 2, q, h, "model.layers.%d.self_attn.q_proj.weight", i);
        sd_synth_emit(s, 2, kv, h, "model.layers.%d.self_attn.k_proj.weight", i);
        sd_synth_emit(s, 2, kv, h, "model.layers.%d.self_attn.v_proj.weight", i);
        sd_synth_emit(s, 1, hd, 0, "model.layers.%d.self_attn.q_norm.weight", i);
        sd_synth_emit(s, 1, hd, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        sd_synth_emit(s, 2, h, q, "model.layers.%d.self_attn.o_proj.weight", i);
        sd_synth_emit(s, 1, h, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        sd_synth_emit(s, 2, c->q_inter, h, "model.layers.%d.mlp.gate_proj.weight", i);
        sd_synth_emit(s, 2, c->q_inter, h, "model.layers.%d.mlp.up_proj.weight", i);
        sd_synth_emit(s, 2, h, c->q_inter, "model.layers.%d.mlp.down_proj.weight", i);
    }
    sd_synth_emit(s, 1, h, 0, "model.norm.weight");
}

void sd_synth_zimage_keys(const sd_synth_zimage_config *c, sd_synth_zimage_part part, sd_synth_key_fn fn,
                          void *user) {
    sink s = {fn, user, "", SD_BF16, SD_BF16};
    switch (part) {
    case SD_SYNTH_ZIMAGE_DIT: dit(c, &s); break;
    case SD_SYNTH_ZIMAGE_QWEN3: qwen3(c, &s); break;
    case SD_SYNTH_ZIMAGE_AE: /* Flux's ae file: F32 */
        s.mat = s.vec = SD_F32;
        sd_synth_ae_keys(&s, c->vae_ch, c->vae_ch_mult, c->vae_levels, c->vae_res_blocks, c->vae_z);
        break;
    }
}

static void keys_of(const void *cfg, int part, sd_synth_key_fn fn, void *user) {
    sd_synth_zimage_keys(cfg, (sd_synth_zimage_part)part, fn, user);
}

sd_status sd_synth_zimage_write(const sd_synth_zimage_config *cfg, sd_synth_zimage_part part, uint64_t seed,
                                const char *path, sd_error *err) {
    return sd_synth_stream_write(cfg, (int)part, keys_of, seed, cfg->name, sd_synth_zimage_part_name(part),
                                 path, err);
}
