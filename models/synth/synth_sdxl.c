/* synth_sdxl.c - key layout enumeration and random fill for SDXL base
 * checkpoints (sgm single-file layout). The UNet walk is SDXL's: per-level
 * transformer depth, linear proj_in/out, label_emb; the VAE and the CLIP-L
 * keys are the SD1 ones (sd_synth_sd1_keys, re-prefixed for CLIP-L), the
 * OpenCLIP bigG text tower has its own layout (fused in_proj, ln_1/ln_2,
 * mlp.c_fc/c_proj, text_projection, logit_scale). The linear-proj UNet walk,
 * the OpenCLIP tower and the fill are shared with SD2 (synth_internal.h). */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sd_synth_sdxl_config presets[] = {
    /* the shapes of the reference tiny model (manifest "sdxl") */
    {.name = "sdxl-tiny", .model_channels = 32, .in_channels = 4, .out_channels = 4,
     .channel_mult = {1, 2, 4}, .n_levels = 3, .num_res_blocks = 2,
     .transformer_depth = {0, 1, 2}, .transformer_depth_middle = 2, .context_dim = 320,
     .adm_in_channels = 1728, .vae_ch = 32, .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4,
     .vae_res_blocks = 2, .vae_z = 4, .clip_l_hidden = 128, .clip_l_layers = 4,
     .clip_l_mlp = 512, .clip_g_hidden = 192, .clip_g_layers = 4, .clip_g_mlp = 768,
     .clip_vocab = 49408, .clip_positions = 77},
    /* sd_xl_base_1.0 */
    {.name = "sdxl", .model_channels = 320, .in_channels = 4, .out_channels = 4,
     .channel_mult = {1, 2, 4}, .n_levels = 3, .num_res_blocks = 2,
     .transformer_depth = {0, 2, 10}, .transformer_depth_middle = 10, .context_dim = 2048,
     .adm_in_channels = 2816, .vae_ch = 128, .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4,
     .vae_res_blocks = 2, .vae_z = 4, .clip_l_hidden = 768, .clip_l_layers = 12,
     .clip_l_mlp = 3072, .clip_g_hidden = 1280, .clip_g_layers = 32, .clip_g_mlp = 5120,
     .clip_vocab = 49408, .clip_positions = 77},
};

const sd_synth_sdxl_config *sd_synth_sdxl_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

typedef struct {
    sd_synth_key_fn fn;
    void *user;
    const char *prefix;
} sink;

static void emit(sink *s, sd_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void emit(sink *s, sd_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    char name[512];
    int off = snprintf(name, sizeof name, "%s", s->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + off, sizeof name - (size_t)off, fmt, ap);
    va_end(ap);
    int64_t shape[4] = {d0, d1, 0, 0};
    s->fn(s->user, name, dt, ndim, shape);
}
static void emit4(sink *s, int64_t o, int64_t i, int k, const char *p) {
    char name[512];
    snprintf(name, sizeof name, "%s%s.weight", s->prefix, p);
    int64_t shape[4] = {o, i, k, k};
    s->fn(s->user, name, SD_F16, 4, shape);
    emit(s, SD_F16, 1, o, 0, "%s.bias", p);
}
static void linear(sink *s, const char *p, int out, int in, int bias) {
    emit(s, SD_F16, 2, out, in, "%s.weight", p);
    if (bias) emit(s, SD_F16, 1, out, 0, "%s.bias", p);
}
static void norm(sink *s, const char *p, int c) {
    emit(s, SD_F16, 1, c, 0, "%s.weight", p);
    emit(s, SD_F16, 1, c, 0, "%s.bias", p);
}

/* ---- UNet ------------------------------------------------------------------------ */

static void resblock(sink *s, const char *p, int cin, int cout, int emb) {
    char b[256];
    snprintf(b, sizeof b, "%s.in_layers.0", p), norm(s, b, cin);
    snprintf(b, sizeof b, "%s.in_layers.2", p), emit4(s, cout, cin, 3, b);
    snprintf(b, sizeof b, "%s.emb_layers.1", p), linear(s, b, cout, emb, 1);
    snprintf(b, sizeof b, "%s.out_layers.0", p), norm(s, b, cout);
    snprintf(b, sizeof b, "%s.out_layers.3", p), emit4(s, cout, cout, 3, b);
    if (cin != cout) snprintf(b, sizeof b, "%s.skip_connection", p), emit4(s, cout, cin, 1, b);
}

/* SpatialTransformer with linear proj_in/out (use_linear_in_transformer). */
static void transformer(sink *s, const char *p, int ch, int ctx, int depth) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm", p), norm(s, b, ch);
    snprintf(b, sizeof b, "%s.proj_in", p), linear(s, b, ch, ch, 1);
    for (int d = 0; d < depth; d++) {
        static const char *const attn[] = {"attn1", "attn2"};
        for (int a = 0; a < 2; a++) {
            int kv = a ? ctx : ch;
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_q", p, d, attn[a]), linear(s, b, ch, ch, 0);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_k", p, d, attn[a]), linear(s, b, ch, kv, 0);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_v", p, d, attn[a]), linear(s, b, ch, kv, 0);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_out.0", p, d, attn[a]), linear(s, b, ch, ch, 1);
        }
        snprintf(b, sizeof b, "%s.transformer_blocks.%d.ff.net.0.proj", p, d), linear(s, b, 8 * ch, ch, 1);
        snprintf(b, sizeof b, "%s.transformer_blocks.%d.ff.net.2", p, d), linear(s, b, ch, 4 * ch, 1);
        for (int n = 1; n <= 3; n++)
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.norm%d", p, d, n), norm(s, b, ch);
    }
    snprintf(b, sizeof b, "%s.proj_out", p), linear(s, b, ch, ch, 1);
}

static void unet(const sd_synth_sdxl_config *c, sink *s) {
    int mc = c->model_channels, emb = 4 * mc, ctx = c->context_dim;
    char b[256];
    linear(s, "time_embed.0", emb, mc, 1);
    linear(s, "time_embed.2", emb, emb, 1);
    if (c->adm_in_channels > 0) { /* SDXL; SD2's walk (synth_sd2.c) has none */
        linear(s, "label_emb.0.0", emb, c->adm_in_channels, 1);
        linear(s, "label_emb.0.2", emb, emb, 1);
    }
    emit4(s, mc, c->in_channels, 3, "input_blocks.0.0");
    int chans[64], nch = 0, ch = mc, blk = 1;
    chans[nch++] = ch;
    for (int lvl = 0; lvl < c->n_levels; lvl++) {
        int out = c->channel_mult[lvl] * mc;
        for (int r = 0; r < c->num_res_blocks; r++, blk++) {
            snprintf(b, sizeof b, "input_blocks.%d.0", blk), resblock(s, b, ch, out, emb);
            ch = out;
            if (c->transformer_depth[lvl] > 0)
                snprintf(b, sizeof b, "input_blocks.%d.1", blk),
                    transformer(s, b, ch, ctx, c->transformer_depth[lvl]);
            chans[nch++] = ch;
        }
        if (lvl != c->n_levels - 1) {
            snprintf(b, sizeof b, "input_blocks.%d.0.op", blk++), emit4(s, ch, ch, 3, b);
            chans[nch++] = ch;
        }
    }
    resblock(s, "middle_block.0", ch, ch, emb);
    transformer(s, "middle_block.1", ch, ctx, c->transformer_depth_middle);
    resblock(s, "middle_block.2", ch, ch, emb);
    blk = 0;
    for (int lvl = c->n_levels - 1; lvl >= 0; lvl--) {
        int out = c->channel_mult[lvl] * mc;
        for (int r = 0; r <= c->num_res_blocks; r++, blk++) {
            int ich = chans[--nch];
            snprintf(b, sizeof b, "output_blocks.%d.0", blk), resblock(s, b, ch + ich, out, emb);
            ch = out;
            int sub = 1;
            if (c->transformer_depth[lvl] > 0) {
                snprintf(b, sizeof b, "output_blocks.%d.1", blk);
                transformer(s, b, ch, ctx, c->transformer_depth[lvl]);
                sub = 2;
            }
            if (lvl && r == c->num_res_blocks)
                snprintf(b, sizeof b, "output_blocks.%d.%d.conv", blk, sub), emit4(s, ch, ch, 3, b);
        }
    }
    norm(s, "out.0", mc);
    emit4(s, c->out_channels, mc, 3, "out.2");
}

/* ---- OpenCLIP bigG text tower -------------------------------------------------------- */

static void openclip(sink *s, int h, int layers, int mlp_w, int vocab, int positions) {
    char b[256];
    emit(s, SD_F16, 2, vocab, h, "token_embedding.weight");
    emit(s, SD_F16, 2, positions, h, "positional_embedding");
    for (int l = 0; l < layers; l++) {
        emit(s, SD_F16, 2, 3 * h, h, "transformer.resblocks.%d.attn.in_proj_weight", l);
        emit(s, SD_F16, 1, 3 * h, 0, "transformer.resblocks.%d.attn.in_proj_bias", l);
        snprintf(b, sizeof b, "transformer.resblocks.%d.attn.out_proj", l), linear(s, b, h, h, 1);
        snprintf(b, sizeof b, "transformer.resblocks.%d.ln_1", l), norm(s, b, h);
        snprintf(b, sizeof b, "transformer.resblocks.%d.ln_2", l), norm(s, b, h);
        snprintf(b, sizeof b, "transformer.resblocks.%d.mlp.c_fc", l), linear(s, b, mlp_w, h, 1);
        snprintf(b, sizeof b, "transformer.resblocks.%d.mlp.c_proj", l), linear(s, b, h, mlp_w, 1);
    }
    norm(s, "ln_final", h);
    emit(s, SD_F16, 2, h, h, "text_projection");
    emit(s, SD_F16, 0, 0, 0, "logit_scale");
}

/* ---- the VAE and CLIP-L through the SD1 enumeration ------------------------------------ */

typedef struct {
    sd_synth_key_fn fn;
    void *user;
} sd1_filter;

#define SD1_TE "cond_stage_model.transformer."

static void keep_vae_and_clip_l(void *user, const char *name, sd_dtype dtype, int ndim,
                                const int64_t *shape) {
    const sd1_filter *f = user;
    if (strncmp(name, "first_stage_model.", 18) == 0) {
        f->fn(f->user, name, dtype, ndim, shape);
    } else if (strncmp(name, SD1_TE, strlen(SD1_TE)) == 0) {
        char b[512];
        snprintf(b, sizeof b, "conditioner.embedders.0.transformer.%s", name + strlen(SD1_TE));
        f->fn(f->user, b, dtype, ndim, shape);
    } /* the SD1 UNet and the schedule leftovers are not part of SDXL files */
}

void sd_synth_sdxl_keys(const sd_synth_sdxl_config *cfg, sd_synth_key_fn fn, void *user) {
    sink s = {fn, user, "model.diffusion_model."};
    unet(cfg, &s);
    /* an SD1 config carrying the SDXL VAE and CLIP-L shapes; its UNet part
     * only names keys (filtered out), so the tiny one will do */
    sd_synth_config sd1 = *sd_synth_preset("sd1-tiny");
    sd1.vae_ch = cfg->vae_ch;
    memcpy(sd1.vae_ch_mult, cfg->vae_ch_mult, sizeof sd1.vae_ch_mult);
    sd1.vae_levels = cfg->vae_levels;
    sd1.vae_res_blocks = cfg->vae_res_blocks;
    sd1.vae_z = cfg->vae_z;
    sd1.clip_hidden = cfg->clip_l_hidden;
    sd1.clip_layers = cfg->clip_l_layers;
    sd1.clip_mlp = cfg->clip_l_mlp;
    sd1.clip_vocab = cfg->clip_vocab;
    sd1.clip_positions = cfg->clip_positions;
    sd1_filter f = {fn, user};
    sd_synth_sd1_keys(&sd1, keep_vae_and_clip_l, &f);
    s.prefix = "conditioner.embedders.1.model.";
    openclip(&s, cfg->clip_g_hidden, cfg->clip_g_layers, cfg->clip_g_mlp, cfg->clip_vocab,
             cfg->clip_positions);
}

void sd_synth_linear_unet_keys(const sd_synth_sdxl_config *cfg, const char *prefix,
                               sd_synth_key_fn fn, void *user) {
    sink s = {fn, user, prefix};
    unet(cfg, &s);
}

void sd_synth_openclip_keys(int hidden, int layers, int mlp, int vocab, int positions,
                            const char *prefix, sd_synth_key_fn fn, void *user) {
    sink s = {fn, user, prefix};
    openclip(&s, hidden, layers, mlp, vocab, positions);
}

/* ---- random fill --------------------------------------------------------------------------- */

/* Norm layers by name: GroupNorm/LayerNorm modules ("norm", "ln_"), the
 * UNet's in_layers.0 / out_layers.0 / out.0. They start at weight 1, bias 0. */
static int is_norm(const char *name) {
    return strstr(name, "norm") || strstr(name, ".ln_") || strstr(name, "in_layers.0.") ||
           strstr(name, "out_layers.0.") || strstr(name, "diffusion_model.out.0.");
}

void sd_synth_fill_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    sd_synth_filler *f = user;
    if (f->rc) return;
    sd_tensor *t = sd_tensor_new(dtype, ndim, shape);
    if (!t) {
        f->rc = sd_error_set(f->err, SD_ERR_NOMEM, "out of memory synthesizing '%s'", name);
        return;
    }
    size_t n = (size_t)sd_tensor_numel(t);
    if (dtype == SD_I64) {
        int64_t *p = t->data;
        for (size_t i = 0; i < n; i++) p[i] = (int64_t)i; /* position_ids */
    } else if (ndim == 0) {
        *(uint16_t *)t->data = sd_f32_to_f16((float)log(1.0 / 0.07)); /* CLIP's logit_scale */
    } else if (is_norm(name)) {
        uint16_t v = sd_f32_to_f16(sd_synth_ends_with(name, ".weight") ? 1.0f : 0.0f);
        uint16_t *p = t->data;
        for (size_t i = 0; i < n; i++) p[i] = v;
    } else {
        double fan_in = 1;
        for (int i = 1; i < ndim; i++) fan_in *= (double)shape[i];
        double sd = sd_synth_ends_with(name, "bias") ? 0.02 : 1.0 / sqrt(fan_in);
        if (strstr(name, "embedding")) sd = 0.02;
        sd_synth_fill_gauss_f16(f, t->data, n, sd);
    }
    sd_synth_filler_add(f, name, t);
}

sd_status sd_synth_sdxl_write(const sd_synth_sdxl_config *cfg, uint64_t seed, const char *path,
                              sd_error *err) {
    sd_synth_filler f;
    sd_status rc = sd_synth_filler_open(&f, seed ^ 0x5d1e5d1eull, err);
    if (rc) return rc;
    sd_synth_sdxl_keys(cfg, sd_synth_fill_key, &f);
    return sd_synth_filler_save(&f, cfg->name, path);
}
