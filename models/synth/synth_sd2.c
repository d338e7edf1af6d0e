/* synth_sd2.c - key layout enumeration and random fill for SD2.x
 * checkpoints (LDM single-file layout). The UNet is the linear-proj walk
 * SDXL uses, without label_emb; the VAE keys are the SD1 ones; the text
 * tower is OpenCLIP (ViT-H in the real files) under cond_stage_model.model.
 * The v-prediction variant differs from the eps one in a single tensor: the
 * norm bias ComfyUI's detection reads (models/checkpoint/checkpoint.h). */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <string.h>

#include "core/dtype.h"

static const sd_synth_sd2_config presets[] = {
    {.name = "sd2-tiny", .model_channels = 64, .in_channels = 4, .out_channels = 4,
     .channel_mult = {1, 1, 2, 2}, .n_levels = 4, .num_res_blocks = 2,
     .transformer_depth = {1, 1, 1, 0}, .transformer_depth_middle = 1, .vae_ch = 32,
     .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4, .vae_res_blocks = 2, .vae_z = 4,
     .clip_hidden = 128, .clip_layers = 4, .clip_mlp = 512, .clip_vocab = 49408,
     .clip_positions = 77, .v_prediction = 1},
    {.name = "sd2-tiny-eps", .model_channels = 64, .in_channels = 4, .out_channels = 4,
     .channel_mult = {1, 1, 2, 2}, .n_levels = 4, .num_res_blocks = 2,
     .transformer_depth = {1, 1, 1, 0}, .transformer_depth_middle = 1, .vae_ch = 32,
     .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4, .vae_res_blocks = 2, .vae_z = 4,
     .clip_hidden = 128, .clip_layers = 4, .clip_mlp = 512, .clip_vocab = 49408,
     .clip_positions = 77, .v_prediction = 0},
    /* v2-1_768-ema-pruned */
    {.name = "sd2", .model_channels = 320, .in_channels = 4, .out_channels = 4,
     .channel_mult = {1, 2, 4, 4}, .n_levels = 4, .num_res_blocks = 2,
     .transformer_depth = {1, 1, 1, 0}, .transformer_depth_middle = 1, .vae_ch = 128,
     .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4, .vae_res_blocks = 2, .vae_z = 4,
     .clip_hidden = 1024, .clip_layers = 24, .clip_mlp = 4096, .clip_vocab = 49408,
     .clip_positions = 77, .v_prediction = 1},
};

const sd_synth_sd2_config *sd_synth_sd2_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

typedef struct {
    sd_synth_key_fn fn;
    void *user;
} vae_filter;

static void keep_vae(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    const vae_filter *f = user;
    if (strncmp(name, "first_stage_model.", 18) == 0) f->fn(f->user, name, dtype, ndim, shape);
}

void sd_synth_sd2_keys(const sd_synth_sd2_config *cfg, sd_synth_key_fn fn, void *user) {
    sd_synth_sdxl_config u = {.name = cfg->name, .model_channels = cfg->model_channels,
                              .in_channels = cfg->in_channels, .out_channels = cfg->out_channels,
                              .n_levels = cfg->n_levels, .num_res_blocks = cfg->num_res_blocks,
                              .transformer_depth_middle = cfg->transformer_depth_middle,
                              .context_dim = cfg->clip_hidden, .adm_in_channels = 0};
    memcpy(u.channel_mult, cfg->channel_mult, sizeof u.channel_mult);
    memcpy(u.transformer_depth, cfg->transformer_depth, sizeof u.transformer_depth);
    sd_synth_linear_unet_keys(&u, "model.diffusion_model.", fn, user);
    /* the VAE through an SD1 config carrying its shapes (the rest is filtered out) */
    sd_synth_config sd1 = *sd_synth_preset("sd1-tiny");
    sd1.vae_ch = cfg->vae_ch;
    memcpy(sd1.vae_ch_mult, cfg->vae_ch_mult, sizeof sd1.vae_ch_mult);
    sd1.vae_levels = cfg->vae_levels;
    sd1.vae_res_blocks = cfg->vae_res_blocks;
    sd1.vae_z = cfg->vae_z;
    vae_filter f = {fn, user};
    sd_synth_sd1_keys(&sd1, keep_vae, &f);
    sd_synth_openclip_keys(cfg->clip_hidden, cfg->clip_layers, cfg->clip_mlp, cfg->clip_vocab,
                           cfg->clip_positions, "cond_stage_model.model.", fn, user);
}

#define VPRED_BIAS "model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias"

typedef struct {
    sd_synth_filler *f;
    int v_prediction;
} sd2_fill;

/* The ordinary fill, except the v-prediction marker: alternating +-0.2
 * (population std exactly 0.2, far from ComfyUI's 0.09 threshold). */
static void fill_sd2(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    sd2_fill *s = user;
    if (!s->v_prediction || strcmp(name, VPRED_BIAS) != 0) {
        sd_synth_fill_key(s->f, name, dtype, ndim, shape);
        return;
    }
    if (s->f->rc) return;
    sd_tensor *t = sd_tensor_new(dtype, ndim, shape);
    if (!t) {
        s->f->rc = sd_error_set(s->f->err, SD_ERR_NOMEM, "out of memory synthesizing '%s'", name);
        return;
    }
    uint16_t *p = t->data, hi = sd_f32_to_f16(0.2f), lo = sd_f32_to_f16(-0.2f);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) p[i] = i % 2 ? lo : hi;
    sd_synth_filler_add(s->f, name, t);
}

sd_status sd_synth_sd2_write(const sd_synth_sd2_config *cfg, uint64_t seed, const char *path,
                             sd_error *err) {
    sd_synth_filler f;
    sd_status rc = sd_synth_filler_open(&f, seed ^ 0x5d25d25dull, err);
    if (rc) return rc;
    sd2_fill s = {&f, cfg->v_prediction};
    sd_synth_sd2_keys(cfg, fill_sd2, &s);
    return sd_synth_filler_save(&f, cfg->name, path);
}
