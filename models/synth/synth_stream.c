/* synth_stream.c - the streaming random-weight writer of the DiT families
 * (Flux, SD3.5, Z-Image) and the layouts they share: T5-XXL, CLIP-L/G in
 * transformers' layout, the 16-channel ae (see synth_internal.h).
 *
 * The full-size files are 1-24 GB each, so nothing is held in memory: each
 * tensor is a lazy entry of the safetensors writer (sd_st_writer_add_lazy)
 * whose bytes are made chunk by chunk while the file is written. A value is
 * picked from a table of 4096 N(0, 1) quantiles by a counter-based hash of
 * (seed, tensor name, element index), so any chunk can be made on its own
 * and a tensor has the same draws in every file that holds it (the T5 of
 * Flux's F16 file and of its fp8 checkpoint differ only by rounding; the
 * T5 written by the SD3.5 preset is Flux's, byte for byte but the preset
 * named in the metadata). */
#include "models/synth/synth_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

/* ---- key enumeration helpers --------------------------------------------------------------- */

static void vemit(const sd_synth_sink *s, int ndim, const int64_t *shape, const char *fmt, va_list ap) {
    char name[512];
    int off = snprintf(name, sizeof name, "%s", s->prefix);
    vsnprintf(name + off, sizeof name - (size_t)off, fmt, ap);
    s->fn(s->user, name, ndim >= 2 ? s->mat : s->vec, ndim, shape);
}

void sd_synth_emit(const sd_synth_sink *s, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    int64_t shape[4] = {d0, d1, 0, 0};
    va_list ap;
    va_start(ap, fmt);
    vemit(s, ndim, shape, fmt, ap);
    va_end(ap);
}

void sd_synth_emit_shape(const sd_synth_sink *s, int ndim, const int64_t *shape, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vemit(s, ndim, shape, fmt, ap);
    va_end(ap);
}

void sd_synth_linear(const sd_synth_sink *s, const char *p, int64_t out, int64_t in) {
    sd_synth_emit(s, 2, out, in, "%s.weight", p);
    sd_synth_emit(s, 1, out, 0, "%s.bias", p);
}

void sd_synth_t5_keys(const sd_synth_sink *s, int d, int d_kv, int heads, int d_ff, int layers, int vocab,
                      int buckets) {
    int inner = heads * d_kv;
    sd_synth_emit(s, 2, vocab, d, "shared.weight");
    for (int i = 0; i < layers; i++) {
        const char *qkv[3] = {"q", "k", "v"};
        for (int k = 0; k < 3; k++)
            sd_synth_emit(s, 2, inner, d, "encoder.block.%d.layer.0.SelfAttention.%s.weight", i, qkv[k]);
        sd_synth_emit(s, 2, d, inner, "encoder.block.%d.layer.0.SelfAttention.o.weight", i);
        if (i == 0)
            sd_synth_emit(s, 2, buckets, heads, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
        sd_synth_emit(s, 1, d, 0, "encoder.block.%d.layer.0.layer_norm.weight", i);
        sd_synth_emit(s, 2, d_ff, d, "encoder.block.%d.layer.1.DenseReluDense.wi_0.weight", i);
        sd_synth_emit(s, 2, d_ff, d, "encoder.block.%d.layer.1.DenseReluDense.wi_1.weight", i);
        sd_synth_emit(s, 2, d, d_ff, "encoder.block.%d.layer.1.DenseReluDense.wo.weight", i);
        sd_synth_emit(s, 1, d, 0, "encoder.block.%d.layer.1.layer_norm.weight", i);
    }
    sd_synth_emit(s, 1, d, 0, "encoder.final_layer_norm.weight");
}

/* The ae and the CLIP text model come from the SD1 enumeration (the same
 * modules), re-prefixed, with the differences of these files: no
 * quant_conv / post_quant_conv, no position_ids. */
typedef struct sd1_filter {
    const sd_synth_sink *s;
    const char *keep; /* the SD1 prefix kept (and cut) */
} sd1_filter;

static void from_sd1(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    (void)dtype;
    const sd1_filter *f = user;
    size_t n = strlen(f->keep);
    if (strncmp(name, f->keep, n) != 0 || strstr(name, "quant_conv") || strstr(name, "position_ids")) return;
    char b[512];
    snprintf(b, sizeof b, "%s%s", f->s->prefix, name + n);
    f->s->fn(f->s->user, b, ndim >= 2 ? f->s->mat : f->s->vec, ndim, shape);
}

void sd_synth_hf_clip_keys(const sd_synth_sink *s, int hidden, int layers, int mlp, int vocab, int positions) {
    sd_synth_config sd1 = *sd_synth_preset("sd1-tiny"); /* its UNet and VAE names are filtered out */
    sd1.clip_hidden = hidden;
    sd1.clip_layers = layers;
    sd1.clip_mlp = mlp;
    sd1.clip_vocab = vocab;
    sd1.clip_positions = positions;
    sd1_filter f = {s, "cond_stage_model.transformer."}; /* -> text_model.* */
    sd_synth_sd1_keys(&sd1, from_sd1, &f);
    sd_synth_emit(s, 2, hidden, hidden, "text_projection.weight");
}

void sd_synth_ae_keys(const sd_synth_sink *s, int ch, const int *ch_mult, int levels, int res_blocks, int z) {
    sd_synth_config sd1 = *sd_synth_preset("sd1-tiny");
    sd1.vae_ch = ch;
    memcpy(sd1.vae_ch_mult, ch_mult, sizeof sd1.vae_ch_mult);
    sd1.vae_levels = levels;
    sd1.vae_res_blocks = res_blocks;
    sd1.vae_z = z;
    sd1_filter f = {s, "first_stage_model."};
    sd_synth_sd1_keys(&sd1, from_sd1, &f);
}

/* ---- the lazy fill ------------------------------------------------------------------------ */

#define QBITS 12
#define QN (1 << QBITS)

typedef struct session session;

/* What a tensor starts as: all ones, all zeros, or N(0, sd^2). */
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
    /* a 1-D weight is a norm's scale (SD3's ln_q / ln_k, Z-Image's
     * cap_embedder.0: RMSNorms whose names say no "norm") */
    if (strstr(name, "norm") || (ndim == 1 && sd_synth_ends_with(name, ".weight"))) {
        it->zeros = bias;
        it->ones = !bias;
    }
    double fan_in = 1;
    for (int i = 1; i < ndim; i++) fan_in *= (double)shape[i];
    it->sd = bias || strstr(name, "embedding") || strstr(name, "shared.weight") || strstr(name, "pos_embed") ||
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

sd_status sd_synth_stream_write(const void *cfg, int part, sd_synth_layout_fn keys, uint64_t seed,
                                const char *preset, const char *part_name, const char *path, sd_error *err) {
    session *s = calloc(1, sizeof *s);
    if (!s) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    s->seed = mix64(seed ^ 0xf1f1f1f1ull);
    s->err = err;
    make_quantiles(s->quantiles);
    keys(cfg, part, collect, s);
    sd_status rc = s->rc;
    sd_st_writer *w = rc ? NULL : sd_st_writer_new();
    if (!rc && !w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < s->n; i++)
        rc = sd_st_writer_add_lazy(w, s->items[i].name, s->items[i].dtype, s->items[i].ndim, s->items[i].shape,
                                   fill, &s->items[i], err);
    if (!rc) rc = sd_st_writer_meta(w, "sdflow_random_weights", "true", err);
    if (!rc) rc = sd_st_writer_meta(w, "sdflow_preset", preset, err);
    if (!rc) rc = sd_st_writer_meta(w, "sdflow_part", part_name, err);
    if (!rc) rc = sd_st_writer_save(w, path, err);
    sd_st_writer_free(w);
    free_items(s);
    free(s);
    return rc;
}
