/* synth_flux.c - random-weight Flux.1 files in the layouts people download
 * (see synth.h): the BFL DiT, the HF T5-XXL encoder and CLIP-L, the 16-channel
 * ae, and the Comfy-Org single-file fp8 checkpoint holding all four.
 *
 * The full-size files are 10-24 GB each, so nothing is held in memory: each
 * tensor is a lazy entry of the safetensors writer, its bytes made chunk by
 * chunk while the file is written (sd_st_writer_add_lazy). A value is a
 * draw from a table of 4096 quantiles of N(0, 1) scaled to the tensor's
 * spread and rounded once to its dtype, picked by a counter-based hash of
 * (seed, tensor name, element index): any chunk can be made on its own, and
 * a tensor has the same draws in every file that holds it (the T5 of the
 * F16 file and of the fp8 checkpoint differ only by rounding). */
#include "models/synth/synth.h"
#include "models/synth/synth_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

/* ---- presets ----------------------------------------------------------------------------- */

#define FLUX_DEV_DIT .hidden = 3072, .heads = 24, .depth = 19, .depth_single = 38, .mlp_ratio = 4, \
    .in_channels = 16, .vec_in = 768, .context_in = 4096
#define T5_XXL .t5_d_model = 4096, .t5_d_kv = 64, .t5_heads = 64, .t5_d_ff = 10240, .t5_layers = 24, \
    .t5_vocab = 32128, .t5_buckets = 32
#define CLIP_L .clip_hidden = 768, .clip_layers = 12, .clip_mlp = 3072, .clip_vocab = 49408, \
    .clip_positions = 77
#define AE .vae_ch = 128, .vae_ch_mult = {1, 2, 4, 4}, .vae_levels = 4, .vae_res_blocks = 2, .vae_z = 16
/* Tiny shapes for tests: head width 16 (the RoPE axes rule of models/flux
 * needs a multiple of 16), T5 with the real vocabulary (token ids of any
 * prompt fit), CLIP-L 128 wide with width / 64 = 2 heads, so that no
 * loader option is needed. */
#define TINY_DIT .hidden = 64, .heads = 4, .depth = 2, .depth_single = 2, .mlp_ratio = 4, \
    .in_channels = 16, .vec_in = 128, .context_in = 64
#define TINY_T5 .t5_d_model = 64, .t5_d_kv = 16, .t5_heads = 4, .t5_d_ff = 128, .t5_layers = 2, \
    .t5_vocab = 32128, .t5_buckets = 32
#define TINY_CLIP .clip_hidden = 128, .clip_layers = 2, .clip_mlp = 256, .clip_vocab = 49408, \
    .clip_positions = 77
#define TINY_AE .vae_ch = 32, .vae_ch_mult = {1, 1, 2, 2}, .vae_levels = 4, .vae_res_blocks = 1, .vae_z = 16

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

typedef struct sink {
    sd_synth_key_fn fn;
    void *user;
    const char *prefix;
    sd_dtype mat, vec; /* dtype of tensors with ndim >= 2, and of 1-D ones */
} sink;

static void emit(sink *s, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void emit(sink *s, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    char name[512];
    int off = snprintf(name, sizeof name, "%s", s->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + off, sizeof name - (size_t)off, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    s->fn(s->user, name, ndim >= 2 ? s->mat : s->vec, ndim, shape);
}

static void linear(sink *s, const char *p, int out, int in) {
    emit(s, 2, out, in, "%s.weight", p);
    emit(s, 1, out, 0, "%s.bias", p);
}

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

/* transformers' T5EncoderModel state dict (encoder.*, shared). */
static void t5(const sd_synth_flux_config *c, sink *s) {
    int d = c->t5_d_model, inner = c->t5_heads * c->t5_d_kv;
    emit(s, 2, c->t5_vocab, d, "shared.weight");
    for (int i = 0; i < c->t5_layers; i++) {
        const char *qkv[3] = {"q", "k", "v"};
        for (int k = 0; k < 3; k++) emit(s, 2, inner, d, "encoder.block.%d.layer.0.SelfAttention.%s.weight", i, qkv[k]);
        emit(s, 2, d, inner, "encoder.block.%d.layer.0.SelfAttention.o.weight", i);
        if (i == 0)
            emit(s, 2, c->t5_buckets, c->t5_heads,
                 "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
        emit(s, 1, d, 0, "encoder.block.%d.layer.0.layer_norm.weight", i);
        emit(s, 2, c->t5_d_ff, d, "encoder.block.%d.layer.1.DenseReluDense.wi_0.weight", i);
        emit(s, 2, c->t5_d_ff, d, "encoder.block.%d.layer.1.DenseReluDense.wi_1.weight", i);
        emit(s, 2, d, c->t5_d_ff, "encoder.block.%d.layer.1.DenseReluDense.wo.weight", i);
        emit(s, 1, d, 0, "encoder.block.%d.layer.1.layer_norm.weight", i);
    }
    emit(s, 1, d, 0, "encoder.final_layer_norm.weight");
}

/* The ae and CLIP-L come from the SD1 enumeration (the same modules), with
 * the ae's differences: no quant_conv / post_quant_conv, 16 latent channels;
 * CLIP-L without position_ids, plus text_projection. */
typedef struct sd1_filter {
    sink *s;
    int want_vae; /* 1: keep first_stage_model.*, 0: keep the text model */
} sd1_filter;

#define SD1_VAE "first_stage_model."
#define SD1_TE "cond_stage_model.transformer."

static void from_sd1(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    (void)dtype;
    const sd1_filter *f = user;
    const char *pre = f->want_vae ? SD1_VAE : SD1_TE;
    size_t n = strlen(pre);
    if (strncmp(name, pre, n) != 0 || strstr(name, "quant_conv") || strstr(name, "position_ids")) return;
    char b[512];
    snprintf(b, sizeof b, "%s%s", f->s->prefix, name + n);
    f->s->fn(f->s->user, b, ndim >= 2 ? f->s->mat : f->s->vec, ndim, shape);
}

static void sd1_part(const sd_synth_flux_config *c, sink *s, int want_vae) {
    sd_synth_config sd1 = *sd_synth_preset("sd1-tiny"); /* its UNet names are filtered out */
    sd1.vae_ch = c->vae_ch;
    memcpy(sd1.vae_ch_mult, c->vae_ch_mult, sizeof sd1.vae_ch_mult);
    sd1.vae_levels = c->vae_levels;
    sd1.vae_res_blocks = c->vae_res_blocks;
    sd1.vae_z = c->vae_z;
    sd1.clip_hidden = c->clip_hidden;
    sd1.clip_layers = c->clip_layers;
    sd1.clip_mlp = c->clip_mlp;
    sd1.clip_vocab = c->clip_vocab;
    sd1.clip_positions = c->clip_positions;
    sd1_filter f = {s, want_vae};
    sd_synth_sd1_keys(&sd1, from_sd1, &f);
}

/* The SD1 names are cond_stage_model.transformer.text_model.*: under
 * prefix they become prefix + text_model.*. */
static void clip_l(const sd_synth_flux_config *c, sink *s) {
    sd1_part(c, s, 0);
    emit(s, 2, c->clip_hidden, c->clip_hidden, "text_projection.weight");
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
        sd1_part(cfg, &s, 1);
        break;
    case SD_SYNTH_FLUX_CKPT_FP8: /* Comfy-Org's flux1-dev-fp8.safetensors */
        s = (sink){fn, user, "model.diffusion_model.", SD_F8_E4M3, SD_BF16};
        dit(cfg, &s);
        s = (sink){fn, user, "text_encoders.t5xxl.transformer.", SD_F8_E4M3, SD_F16};
        t5(cfg, &s);
        s = (sink){fn, user, "text_encoders.clip_l.transformer.", SD_F16, SD_F16};
        clip_l(cfg, &s);
        s = (sink){fn, user, "vae.", SD_BF16, SD_BF16};
        sd1_part(cfg, &s, 1);
        break;
    }
}

/* ---- the lazy fill ------------------------------------------------------------------------ */

#define QBITS 12
#define QN (1 << QBITS)

typedef struct session session;

/* What a tensor starts as: all ones (norm scales and weights), all zeros
 * (norm biases), or N(0, sd^2): biases, embeddings and T5's position bias
 * 0.02, other weights 1 / sqrt(fan_in). */
typedef struct item {
    char *name;
    sd_dtype dtype;
    int ndim;
    int64_t shape[4];
    int ones, zeros;
    double sd;
    uint64_t seed;
    unsigned char *table; /* QN values of the dtype, made on the first chunk */
    const session *s;
} item;

struct session {
    double quantiles[QN]; /* of N(0, 1) */
    item *items;
    size_t n, cap;
    uint64_t seed;
    sd_status rc;
    sd_error *err;
};

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return mix64(h);
}

/* Phi^-1((i + 0.5) / QN) by bisection on erfc. */
static void make_quantiles(double *q) {
    for (int i = 0; i < QN; i++) {
        double p = (i + 0.5) / QN, lo = -10, hi = 10;
        for (int k = 0; k < 64; k++) {
            double mid = 0.5 * (lo + hi);
            if (0.5 * erfc(-mid / M_SQRT2) < p) lo = mid;
            else hi = mid;
        }
        q[i] = 0.5 * (lo + hi);
    }
}

static void store(sd_dtype dt, unsigned char *dst, float v) {
    uint16_t h;
    switch (dt) {
    case SD_F32: memcpy(dst, &v, 4); break;
    case SD_F16: h = sd_f32_to_f16(v), memcpy(dst, &h, 2); break;
    case SD_BF16: h = sd_f32_to_bf16(v), memcpy(dst, &h, 2); break;
    case SD_F8_E4M3: *dst = sd_f32_to_f8_e4m3(v); break;
    default: *dst = sd_f32_to_f8_e5m2(v); break;
    }
}

static sd_status fill(void *user, const char *name, uint64_t offset, void *buf, size_t n, sd_error *err) {
    item *it = user;
    size_t es = sd_dtype_size(it->dtype);
    unsigned char *out = buf;
    if (it->ones || it->zeros) {
        unsigned char v[4];
        store(it->dtype, v, it->ones ? 1.0f : 0.0f);
        for (size_t i = 0; i < n; i += es) memcpy(out + i, v, es);
        return SD_OK;
    }
    if (!it->table) {
        if (!(it->table = malloc((size_t)QN * es)))
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory synthesizing '%s'", name);
        for (int i = 0; i < QN; i++)
            store(it->dtype, it->table + (size_t)i * es, (float)(it->s->quantiles[i] * it->sd));
    }
    uint64_t first = offset / es, count = n / es;
    for (uint64_t e = first; e < first + count; e++) {
        uint64_t r = mix64(it->seed + (e >> 2) * 0x9e3779b97f4a7c15ull);
        unsigned idx = (unsigned)(r >> (16 * (e & 3))) & (QN - 1);
        memcpy(out + (e - first) * es, it->table + (size_t)idx * es, es);
    }
    return SD_OK;
}

static void collect(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    session *s = user;
    if (s->rc) return;
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 256;
        item *ni = realloc(s->items, nc * sizeof *ni);
        if (!ni) {
            s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory");
            return;
        }
        s->items = ni;
        s->cap = nc;
    }
    item *it = &s->items[s->n];
    *it = (item){.name = strdup(name), .dtype = dtype, .ndim = ndim, .s = s};
    if (!it->name) {
        s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory");
        return;
    }
    s->n++;
    for (int i = 0; i < ndim; i++) it->shape[i] = shape[i];
    int bias = sd_synth_ends_with(name, "bias") && !strstr(name, "relative_attention_bias");
    if (strstr(name, "norm")) {
        it->zeros = bias;
        it->ones = !bias;
    }
    double fan_in = 1;
    for (int i = 1; i < ndim; i++) fan_in *= (double)shape[i];
    it->sd = bias || strstr(name, "embedding") || strstr(name, "shared.weight") ||
                     strstr(name, "relative_attention_bias")
                 ? 0.02
                 : 1.0 / sqrt(fan_in);
    it->seed = s->seed ^ hash_name(name);
}

static void free_items(session *s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->items[i].name);
        free(s->items[i].table);
    }
    free(s->items);
}

sd_status sd_synth_flux_write(const sd_synth_flux_config *cfg, sd_synth_flux_part part, uint64_t seed,
                              const char *path, sd_error *err) {
    session *s = calloc(1, sizeof *s);
    if (!s) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    s->seed = mix64(seed ^ 0xf1f1f1f1ull);
    s->err = err;
    make_quantiles(s->quantiles);
    sd_synth_flux_keys(cfg, part, collect, s);
    sd_status rc = s->rc;
    sd_st_writer *w = rc ? NULL : sd_st_writer_new();
    if (!rc && !w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < s->n; i++)
        rc = sd_st_writer_add_lazy(w, s->items[i].name, s->items[i].dtype, s->items[i].ndim, s->items[i].shape,
                                   fill, &s->items[i], err);
    if (!rc) rc = sd_st_writer_meta(w, "sdflow_random_weights", "true", err);
    if (!rc) rc = sd_st_writer_meta(w, "sdflow_preset", cfg->name, err);
    if (!rc) rc = sd_st_writer_meta(w, "sdflow_part", sd_synth_flux_part_name(part), err);
    if (!rc) rc = sd_st_writer_save(w, path, err);
    sd_st_writer_free(w);
    free_items(s);
    free(s);
    return rc;
}
