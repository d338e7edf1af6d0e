/* synth.c - key layout enumeration and random fill for SD1 checkpoints.
 * The enumeration walks the architecture the same way LDM's constructors do,
 * so block numbering (input_blocks.N.M, output_blocks.N.2.conv, ...) comes out
 * exactly as in real files. */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sd_synth_config presets[] = {
    {"sd1-tiny", 32, 4, 4, {1, 2, 4, 4}, 4, 2, 0x7, 1, 128,
     32, {1, 2, 4, 4}, 4, 2, 4,
     128, 4, 512, 49408, 77},
    {"sd1", 320, 4, 4, {1, 2, 4, 4}, 4, 2, 0x7, 1, 768,
     128, {1, 2, 4, 4}, 4, 2, 4,
     768, 12, 3072, 49408, 77},
};

const sd_synth_config *sd_synth_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

typedef struct { sd_synth_key_fn fn; void *user; char prefix[128]; } sink;

static void emit(sink *s, sd_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                 const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void emit(sink *s, sd_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                 const char *fmt, ...) {
    char name[512];
    int off = snprintf(name, sizeof name, "%s", s->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + off, sizeof name - (size_t)off, fmt, ap);
    va_end(ap);
    int64_t shape[4] = {d0, d1, d2, d3};
    s->fn(s->user, name, dt, ndim, shape);
}

/* weight + bias helpers; `p` is the module path */
static void linear(sink *s, const char *p, int out, int in, int bias) {
    emit(s, SD_F16, 2, out, in, 0, 0, "%s.weight", p);
    if (bias) emit(s, SD_F16, 1, out, 0, 0, 0, "%s.bias", p);
}
static void conv(sink *s, const char *p, int out, int in, int k) {
    emit(s, SD_F16, 4, out, in, k, k, "%s.weight", p);
    emit(s, SD_F16, 1, out, 0, 0, 0, "%s.bias", p);
}
static void norm(sink *s, const char *p, int c) {
    emit(s, SD_F16, 1, c, 0, 0, 0, "%s.weight", p);
    emit(s, SD_F16, 1, c, 0, 0, 0, "%s.bias", p);
}

/* ---- UNet ------------------------------------------------------------------ */

static void resblock(sink *s, const char *p, int cin, int cout, int emb) {
    char b[256];
    snprintf(b, sizeof b, "%s.in_layers.0", p); norm(s, b, cin);
    snprintf(b, sizeof b, "%s.in_layers.2", p); conv(s, b, cout, cin, 3);
    snprintf(b, sizeof b, "%s.emb_layers.1", p); linear(s, b, cout, emb, 1);
    snprintf(b, sizeof b, "%s.out_layers.0", p); norm(s, b, cout);
    snprintf(b, sizeof b, "%s.out_layers.3", p); conv(s, b, cout, cout, 3);
    if (cin != cout) { snprintf(b, sizeof b, "%s.skip_connection", p); conv(s, b, cout, cin, 1); }
}

static void transformer(sink *s, const char *p, int ch, int ctx, int depth) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm", p); norm(s, b, ch);
    snprintf(b, sizeof b, "%s.proj_in", p); conv(s, b, ch, ch, 1);
    for (int d = 0; d < depth; d++) {
        const char *q[] = {"attn1", "attn2"};
        for (int a = 0; a < 2; a++) {
            int kv = a ? ctx : ch;
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_q", p, d, q[a]); linear(s, b, ch, ch, 0);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_k", p, d, q[a]); linear(s, b, ch, kv, 0);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_v", p, d, q[a]); linear(s, b, ch, kv, 0);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s.to_out.0", p, d, q[a]); linear(s, b, ch, ch, 1);
        }
        snprintf(b, sizeof b, "%s.transformer_blocks.%d.ff.net.0.proj", p, d); linear(s, b, 8 * ch, ch, 1);
        snprintf(b, sizeof b, "%s.transformer_blocks.%d.ff.net.2", p, d); linear(s, b, ch, 4 * ch, 1);
        for (int n = 1; n <= 3; n++) {
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.norm%d", p, d, n); norm(s, b, ch);
        }
    }
    snprintf(b, sizeof b, "%s.proj_out", p); conv(s, b, ch, ch, 1);
}

static void unet(const sd_synth_config *c, sink *s) {
    int mc = c->model_channels, emb = 4 * mc;
    char b[256];
    linear(s, "time_embed.0", emb, mc, 1);
    linear(s, "time_embed.2", emb, emb, 1);
    conv(s, "input_blocks.0.0", mc, c->in_channels, 3);
    int chans[64], nch = 0, ch = mc, blk = 1;
    chans[nch++] = ch;
    for (int lvl = 0; lvl < c->n_levels; lvl++) {
        int out = c->channel_mult[lvl] * mc;
        for (int r = 0; r < c->num_res_blocks; r++, blk++) {
            snprintf(b, sizeof b, "input_blocks.%d.0", blk); resblock(s, b, ch, out, emb);
            ch = out;
            if (c->attn_levels & (1u << lvl)) {
                snprintf(b, sizeof b, "input_blocks.%d.1", blk);
                transformer(s, b, ch, c->context_dim, c->transformer_depth);
            }
            chans[nch++] = ch;
        }
        if (lvl != c->n_levels - 1) {
            snprintf(b, sizeof b, "input_blocks.%d.0.op", blk++); conv(s, b, ch, ch, 3);
            chans[nch++] = ch;
        }
    }
    resblock(s, "middle_block.0", ch, ch, emb);
    transformer(s, "middle_block.1", ch, c->context_dim, c->transformer_depth);
    resblock(s, "middle_block.2", ch, ch, emb);
    blk = 0;
    for (int lvl = c->n_levels - 1; lvl >= 0; lvl--) {
        int out = c->channel_mult[lvl] * mc;
        for (int r = 0; r <= c->num_res_blocks; r++, blk++) {
            int ich = chans[--nch];
            snprintf(b, sizeof b, "output_blocks.%d.0", blk); resblock(s, b, ch + ich, out, emb);
            ch = out;
            int sub = 1;
            if (c->attn_levels & (1u << lvl)) {
                snprintf(b, sizeof b, "output_blocks.%d.1", blk);
                transformer(s, b, ch, c->context_dim, c->transformer_depth);
                sub = 2;
            }
            if (lvl && r == c->num_res_blocks) {
                snprintf(b, sizeof b, "output_blocks.%d.%d.conv", blk, sub); conv(s, b, ch, ch, 3);
            }
        }
    }
    norm(s, "out.0", mc);
    conv(s, "out.2", c->out_channels, mc, 3);
}

/* ---- VAE ------------------------------------------------------------------- */

static void vae_res(sink *s, const char *p, int cin, int cout) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm1", p); norm(s, b, cin);
    snprintf(b, sizeof b, "%s.conv1", p); conv(s, b, cout, cin, 3);
    snprintf(b, sizeof b, "%s.norm2", p); norm(s, b, cout);
    snprintf(b, sizeof b, "%s.conv2", p); conv(s, b, cout, cout, 3);
    if (cin != cout) { snprintf(b, sizeof b, "%s.nin_shortcut", p); conv(s, b, cout, cin, 1); }
}

static void vae_mid(sink *s, const char *p, int c) {
    char b[256];
    snprintf(b, sizeof b, "%s.mid.block_1", p); vae_res(s, b, c, c);
    snprintf(b, sizeof b, "%s.mid.attn_1.norm", p); norm(s, b, c);
    const char *qkv[] = {"q", "k", "v", "proj_out"};
    for (int i = 0; i < 4; i++) { snprintf(b, sizeof b, "%s.mid.attn_1.%s", p, qkv[i]); conv(s, b, c, c, 1); }
    snprintf(b, sizeof b, "%s.mid.block_2", p); vae_res(s, b, c, c);
}

static void vae(const sd_synth_config *c, sink *s) {
    char b[256];
    int ch = c->vae_ch, z = c->vae_z, L = c->vae_levels;
    conv(s, "encoder.conv_in", ch, 3, 3);
    int cin = ch;
    for (int i = 0; i < L; i++) {
        int out = ch * c->vae_ch_mult[i];
        for (int j = 0; j < c->vae_res_blocks; j++) {
            snprintf(b, sizeof b, "encoder.down.%d.block.%d", i, j); vae_res(s, b, cin, out);
            cin = out;
        }
        if (i != L - 1) { snprintf(b, sizeof b, "encoder.down.%d.downsample.conv", i); conv(s, b, cin, cin, 3); }
    }
    vae_mid(s, "encoder", cin);
    norm(s, "encoder.norm_out", cin);
    conv(s, "encoder.conv_out", 2 * z, cin, 3);
    conv(s, "quant_conv", 2 * z, 2 * z, 1);
    conv(s, "post_quant_conv", z, z, 1);
    cin = ch * c->vae_ch_mult[L - 1];
    conv(s, "decoder.conv_in", cin, z, 3);
    vae_mid(s, "decoder", cin);
    for (int i = L - 1; i >= 0; i--) {
        int out = ch * c->vae_ch_mult[i];
        for (int j = 0; j <= c->vae_res_blocks; j++) {
            snprintf(b, sizeof b, "decoder.up.%d.block.%d", i, j); vae_res(s, b, cin, out);
            cin = out;
        }
        if (i != 0) { snprintf(b, sizeof b, "decoder.up.%d.upsample.conv", i); conv(s, b, cin, cin, 3); }
    }
    norm(s, "decoder.norm_out", cin);
    conv(s, "decoder.conv_out", 3, cin, 3);
}

/* ---- CLIP-L (HF layout) ------------------------------------------------------ */

static void clip(const sd_synth_config *c, sink *s) {
    char b[256];
    int h = c->clip_hidden;
    emit(s, SD_F16, 2, c->clip_vocab, h, 0, 0, "embeddings.token_embedding.weight");
    emit(s, SD_F16, 2, c->clip_positions, h, 0, 0, "embeddings.position_embedding.weight");
    emit(s, SD_I64, 2, 1, c->clip_positions, 0, 0, "embeddings.position_ids");
    for (int l = 0; l < c->clip_layers; l++) {
        const char *pr[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int i = 0; i < 4; i++) {
            snprintf(b, sizeof b, "encoder.layers.%d.self_attn.%s", l, pr[i]); linear(s, b, h, h, 1);
        }
        snprintf(b, sizeof b, "encoder.layers.%d.layer_norm1", l); norm(s, b, h);
        snprintf(b, sizeof b, "encoder.layers.%d.layer_norm2", l); norm(s, b, h);
        snprintf(b, sizeof b, "encoder.layers.%d.mlp.fc1", l); linear(s, b, c->clip_mlp, h, 1);
        snprintf(b, sizeof b, "encoder.layers.%d.mlp.fc2", l); linear(s, b, h, c->clip_mlp, 1);
    }
    norm(s, "final_layer_norm", h);
}

void sd_synth_sd1_keys(const sd_synth_config *cfg, sd_synth_key_fn fn, void *user) {
    sink s = {fn, user, ""};
    strcpy(s.prefix, "model.diffusion_model.");
    unet(cfg, &s);
    strcpy(s.prefix, "first_stage_model.");
    vae(cfg, &s);
    strcpy(s.prefix, "cond_stage_model.transformer.text_model.");
    clip(cfg, &s);
    /* Leftovers real SD1 files carry; loaders must ignore them. */
    s.prefix[0] = 0;
    emit(&s, SD_F32, 1, 1000, 0, 0, 0, "betas");
    emit(&s, SD_F32, 1, 1000, 0, 0, 0, "alphas_cumprod");
    emit(&s, SD_F32, 1, 1000, 0, 0, 0, "alphas_cumprod_prev");
    emit(&s, SD_F32, 0, 0, 0, 0, 0, "model_ema.decay");
    emit(&s, SD_I32, 0, 0, 0, 0, 0, "model_ema.num_updates");
}

/* ---- random fill --------------------------------------------------------------- */

/* Norm layers are recognised by name, as in the layout: ".norm", "norm1".."norm3",
 * "norm_out", "layer_norm", "in_layers.0", "out_layers.0", "out.0". */
static int is_norm(const char *name) {
    return strstr(name, "norm") || strstr(name, "in_layers.0.") || strstr(name, "out_layers.0.") ||
           strstr(name, "diffusion_model.out.0.");
}

static void fill_one(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    sd_synth_filler *f = user;
    if (f->rc) return;
    sd_tensor *t = sd_tensor_new(dtype, ndim, shape);
    if (!t) { f->rc = sd_error_set(f->err, SD_ERR_NOMEM, "out of memory synthesizing '%s'", name); return; }
    size_t n = (size_t)sd_tensor_numel(t);
    if (dtype == SD_F16) {
        uint16_t *p = t->data;
        if (is_norm(name)) {
            uint16_t one = sd_f32_to_f16(1.0f);
            for (size_t i = 0; i < n; i++) p[i] = sd_synth_ends_with(name, ".weight") ? one : 0;
        } else {
            double fan_in = 1;
            for (int i = 1; i < ndim; i++) fan_in *= (double)shape[i];
            double sd = sd_synth_ends_with(name, ".bias") ? 0.02 : 1.0 / sqrt(fan_in);
            if (strstr(name, "embedding")) sd = 0.02;
            sd_synth_fill_gauss_f16(f, p, n, sd);
        }
    } else if (dtype == SD_F32 && ndim == 1 && shape[0] == 1000) {
        /* scaled_linear betas, the schedule SD1 was trained with */
        float *p = t->data;
        double ac = 1.0, prev = 1.0;
        for (int i = 0; i < 1000; i++) {
            double b = pow(sqrt(0.00085) + (sqrt(0.012) - sqrt(0.00085)) * i / 999.0, 2);
            prev = ac;
            ac *= 1.0 - b;
            p[i] = strcmp(name, "betas") == 0 ? (float)b
                 : strcmp(name, "alphas_cumprod") == 0 ? (float)ac : (float)prev;
        }
    } else if (dtype == SD_F32 && ndim == 0) {
        *(float *)t->data = 0.9999f;
    } else if (dtype == SD_I64) {
        int64_t *p = t->data;
        for (size_t i = 0; i < n; i++) p[i] = (int64_t)i;
    }
    sd_synth_filler_add(f, name, t);
}

sd_status sd_synth_sd1_write(const sd_synth_config *cfg, uint64_t seed, const char *path,
                             sd_error *err) {
    sd_synth_filler f;
    sd_status rc = sd_synth_filler_open(&f, seed ^ 0x5d5d5d5dull, err);
    if (rc) return rc;
    sd_synth_sd1_keys(cfg, fill_one, &f);
    return sd_synth_filler_save(&f, cfg->name, path);
}
