/* Writes the seed corpora for the fuzz targets:
 *
 *   fuzz_seeds OUT_DIR TESTDATA_DIR [JSON_DIR...]
 *
 * OUT_DIR/safetensors: small files from our writer (every dtype incl. fp8,
 *   0-d, empty, metadata) and, when TESTDATA_DIR has them, the header of
 *   each shared .safetensors file (the SD set and flux/) with the first
 *   bytes of its data.
 * OUT_DIR/gguf: GGUF files from our writer (every dtype, orig_shape), one
 *   with key/values of every type (string arrays, nested arrays, an
 *   alignment), tiny SD3 (arch sd3) and Z-Image (arch lumina2) diffusion
 *   models in city96's typing, each also without the architecture and
 *   under model.diffusion_model. (compat mode), and the .gguf files under
 *   JSON_DIR/gguf (tests/data/gguf).
 * OUT_DIR/value_io: blobs of LATENT / CONDITIONING / scalar trees.
 * OUT_DIR/workflow_json: a few API-format workflows written here, plus any
 *   *.json found directly in each JSON_DIR.
 * OUT_DIR/png: PNGs from our writer (gray, RGB, RGBA, with text chunks) and
 *   crafted ones: a huge declared size, a huge declared tEXt chunk.
 * OUT_DIR/torch_ckpt: a zip checkpoint written here with libzip, plus the
 *   small .pt/.ckpt files of JSON_DIR/torch (tests/data/torch) and
 *   JSON_DIR/hypernetwork (tests/data/hypernetwork).
 * OUT_DIR/pickle: pickles written here, plus the data.pkl of those files.
 * OUT_DIR/lora: valid LoRA files of every kind for fuzz_lora's tiny SD1
 *   model (Kohya LoRA, LoCon, LoHa, LoHa Tucker, LoKr plain/factored/Tucker,
 *   diffusers/PEFT names, full diffs), F32 and F16.
 * OUT_DIR/workflow_ui: UI-format workflows written here (reroute, primitive,
 *   bypass, subgraph), plus any *.json in each JSON_DIR/ui and
 *   JSON_DIR/group_nodes.
 * OUT_DIR/workflow_exif: WebP and JPEG pictures with ComfyUI's EXIF entries.
 * OUT_DIR/flux: tiny valid Flux DiT files (fuzz_flux): BF16 dev, F32
 *   schnell, and single-file layouts with F8_E4M3 matrices under
 *   model.diffusion_model., plain and scaled (ComfyUI's scaled_fp8 marker
 *   and scale_weight, one comfy_quant layer).
 * OUT_DIR/t5_tokenizer: the Flux set's real tokenizer.json (TESTDATA_DIR/
 *   flux/tokenizer) and small variants written here: minimal Unigram
 *   models with each normalizer, Metaspace scheme, template, added tokens
 *   and byte_fallback, a tiny precompiled charsmap, a BPE model.
 * OUT_DIR/pyregex: regex node inputs (flags byte, pattern, replacement,
 *   subject) with groups, empty matches, Python-only syntax, bad patterns.
 * OUT_DIR/clip_tokenizer: prompt texts: weights syntax, accents and
 *   combining marks, CJK, emoji, digits, a long word, special tokens.
 * OUT_DIR/origin: request names for server/origin.c (listen, CORS origin,
 *   method, Host, Origin, Sec-Fetch-Site, Sec-Fetch-Mode, one a line).
 * OUT_DIR/qwen_tokenizer: vocab.json, merges.txt and tokenizer_config.json
 *   joined by "\n#==#\n" (fuzz_qwen_tokenizer's format): a small byte-level
 *   vocabulary written here with merges and added tokens, variants with a
 *   bad line, an unknown merge, flagged added tokens; and the Z-Image set's
 *   real files cut to their first entries (TESTDATA_DIR/zimage/tokenizer).
 * OUT_DIR/ldm_config: LDM model configs (.yaml) written here in the shape of
 *   ComfyUI's models/configs: v1 with layer_idx, v2 with parameterization
 *   "v", flow style, anchors and aliases, a null and a quoted layer_idx,
 *   and broken ones (no cond_stage_config, a tab, an unclosed flow).
 *
 * Missing test data is not an error: the corpus is just smaller. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zip.h>

#include "core/quant.h"
#include "formats/gguf.h"
#include "formats/png.h"
#include "formats/safetensors.h"
#include "core/value_io.h"

static int n_written = 0;

static void mkdir_p(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0777);
            *p = '/';
        }
    }
    mkdir(tmp, 0777);
}

static int write_seed(const char *dir, const char *name, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "fuzz_seeds: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t w = fwrite(data, 1, n, f);
    int bad = fclose(f) != 0 || w != n;
    if (bad) fprintf(stderr, "fuzz_seeds: short write to %s\n", path);
    n_written++;
    return bad ? -1 : 0;
}

/* ---- safetensors --------------------------------------------------------- */

static int st_seeds(const char *out, const char *testdata) {
    int rc = 0;
    sd_error err;
    for (int variant = 0; variant < 3; variant++) {
        sd_st_writer *w = sd_st_writer_new();
        for (int d = 0; d < SD_DTYPE_COUNT; d++) {
            if (variant == 1 && d > 2) break;
            if (sd_dtype_is_quantized((sd_dtype)d)) continue; /* GGUF's, not safetensors dtypes */
            int64_t shape[3] = {2, variant + 1, 3};
            sd_tensor *t = sd_tensor_new((sd_dtype)d, variant == 2 ? 1 : 3, shape);
            uint8_t *p = t->data;
            for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)(i * 13 + d);
            char name[64];
            snprintf(name, sizeof name, "layer.%d.%s", d, sd_dtype_name((sd_dtype)d));
            sd_st_writer_add(w, name, t, &err);
            sd_tensor_unref(t);
        }
        sd_tensor *s = sd_tensor_new(SD_F32, 0, NULL);
        sd_st_writer_add(w, "scalar", s, &err);
        sd_tensor_unref(s);
        if (variant != 1) {
            sd_st_writer_meta(w, "format", "pt", &err);
            sd_st_writer_meta(w, "note", "seed \"quoted\"", &err);
        }
        void *buf;
        size_t n;
        if (sd_st_writer_to_memory(w, &buf, &n, &err) == SD_OK) {
            char name[32];
            snprintf(name, sizeof name, "writer-%d.safetensors", variant);
            rc |= write_seed(out, name, buf, n);
            free(buf);
        }
        sd_st_writer_free(w);
    }
    /* headers of the shared files, with up to 256 data bytes */
    const char *sub[] = {"models", "golden", "flux/models", "flux/golden"};
    for (int s = 0; s < 4; s++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", testdata, sub[s]);
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            uint8_t len[8];
            if (fread(len, 1, 8, f) == 8) {
                uint64_t hl = 0;
                for (int i = 7; i >= 0; i--) hl = hl << 8 | len[i];
                if (hl <= 32768) { /* keep seeds small (libFuzzer max_len follows them) */
                    size_t n = 8 + (size_t)hl + 256;
                    uint8_t *b = malloc(n);
                    memcpy(b, len, 8);
                    size_t got = fread(b + 8, 1, n - 8, f);
                    char name[512];
                    snprintf(name, sizeof name, "%s-%s", sub[s], de->d_name);
                    for (char *c = name; *c; c++)
                        if (*c == '/') *c = '-';
                    rc |= write_seed(out, name, b, 8 + got);
                    free(b);
                }
            }
            fclose(f);
        }
        closedir(d);
    }
    return rc;
}

/* ---- gguf ------------------------------------------------------------------- */

/* Writer files with every key/value kind (arrays of strings and nested
 * arrays written by hand: the writer has no call for them), every dtype and
 * orig_shape, plus the real-shaped GGUF files of JSON_DIR/gguf (tests/data:
 * per-type dequantization files, tiny Flux and T5 models; small ones only). */
static void gguf_put(uint8_t **b, size_t *n, const void *p, size_t k) {
    *b = realloc(*b, *n + k);
    memcpy(*b + *n, p, k);
    *n += k;
}

static void gguf_le(uint8_t **b, size_t *n, uint64_t v, int k) {
    uint8_t x[8];
    for (int i = 0; i < k; i++) x[i] = (uint8_t)(v >> (8 * i));
    gguf_put(b, n, x, (size_t)k);
}

static void gguf_s(uint8_t **b, size_t *n, const char *s) {
    gguf_le(b, n, strlen(s), 8);
    gguf_put(b, n, s, strlen(s));
}

static int gguf_copy_dir(const char *out, const char *dir, const char *prefix) {
    int rc = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.' && (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0)) {
            struct stat sb;
            if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) rc |= gguf_copy_dir(out, path, de->d_name);
            continue;
        }
        if (de->d_name[0] == '.') continue;
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        /* Copied files only (the data folders' .gguf files; their models/
         * are megabytes): libFuzzer's max_len follows the largest seed. The
         * DiT seeds dit_seeds() writes are larger (80-105 KB: the real
         * layouts at the smallest width whose rows are whole Q8_0 blocks)
         * and run in full: with no -max_len, libFuzzer takes the largest
         * seed's size (up to 1 MiB) as its limit. */
        static uint8_t buf[65536];
        size_t n = fread(buf, 1, sizeof buf, f);
        int small = n < sizeof buf || fgetc(f) == EOF;
        fclose(f);
        if (!small) continue;
        char name[600];
        snprintf(name, sizeof name, "%s-%s", prefix, de->d_name);
        rc |= write_seed(out, name, buf, n);
    }
    closedir(d);
    return rc;
}

/* A tiny DiT as a GGUF diffusion model, the way city96's files are typed:
 * 2-D "*weight" tensors of the blocks (names starting with `quant`) Q8_0,
 * other matrices F16, vectors F32. arch NULL: no general.architecture
 * (ComfyUI-GGUF's compat mode); prefix: put before every name. */
typedef struct dit_seed {
    sd_gguf_writer *w;
    const char *prefix, *quant;
    unsigned k;
} dit_seed;

static void dit_t(dit_seed *d, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    sd_error err;
    int64_t sh[4] = {d0, d1, d2, d3};
    size_t l = strlen(name);
    int quant = ndim == 2 && d0 > 1 && d1 % 32 == 0 && strncmp(name, d->quant, strlen(d->quant)) == 0 &&
                l >= 6 && strcmp(name + l - 6, "weight") == 0;
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, sh);
    float *v = sd_tensor_f32(t);
    int64_t n = sd_tensor_numel(t);
    int norm = ndim == 1 && strstr(name, "norm") != NULL;
    for (int64_t i = 0; i < n; i++, d->k = d->k * 1103515245u + 12345u)
        v[i] = norm ? 1.0f : ((float)(d->k >> 16 & 0x7fff) / 32768.0f - 0.5f) * 0.1f;
    sd_tensor *o = quant ? sd_tensor_new(SD_Q8_0, ndim, sh) : sd_tensor_to_dtype(t, ndim == 1 ? SD_F32 : SD_F16);
    if (quant) sd_quant_quantize(SD_Q8_0, v, o->data, n);
    char full[256];
    snprintf(full, sizeof full, "%s%s", d->prefix, name);
    sd_gguf_writer_add(d->w, full, o, &err);
    sd_tensor_unref(o);
    sd_tensor_unref(t);
}

/* Linear "<base>.weight" [out, in] and its bias. */
static void dit_lin(dit_seed *d, const char *base, int64_t out, int64_t in) {
    char n[200];
    snprintf(n, sizeof n, "%s.weight", base);
    dit_t(d, n, 2, out, in, 0, 0);
    snprintf(n, sizeof n, "%s.bias", base);
    dit_t(d, n, 1, out, 0, 0, 0);
}

/* SD3.5 Medium's layout at hidden 32 (one head of 32 with RMS q/k norms):
 * two joint blocks, the first with MMDiT-X's attn2, the last context
 * branch pre-only; y_embedder; 4 latent channels, pos_embed 4x4. */
static void sd3_seed(dit_seed *d) {
    const int64_t h = 32, mlp = 64;
    dit_t(d, "x_embedder.proj.weight", 4, h, 4, 2, 2);
    dit_t(d, "x_embedder.proj.bias", 1, h, 0, 0, 0);
    dit_t(d, "pos_embed", 3, 1, 16, h, 0);
    dit_lin(d, "t_embedder.mlp.0", h, 256);
    dit_lin(d, "t_embedder.mlp.2", h, h);
    dit_lin(d, "y_embedder.mlp.0", h, 32);
    dit_lin(d, "y_embedder.mlp.2", h, h);
    dit_lin(d, "context_embedder", h, 32);
    for (int i = 0; i < 2; i++) {
        for (int x = 0; x < 2; x++) {
            int pre = !x && i == 1, sa = x && i == 0;
            char b[96], n[160];
            snprintf(b, sizeof b, "joint_blocks.%d.%s", i, x ? "x_block" : "context_block");
            snprintf(n, sizeof n, "%s.adaLN_modulation.1", b);
            dit_lin(d, n, (sa ? 9 : pre ? 2 : 6) * h, h);
            for (int a = 0; a < 1 + sa; a++) {
                const char *at = a ? "attn2" : "attn";
                snprintf(n, sizeof n, "%s.%s.qkv", b, at);
                dit_lin(d, n, 3 * h, h);
                if (!pre) {
                    snprintf(n, sizeof n, "%s.%s.proj", b, at);
                    dit_lin(d, n, h, h);
                }
                snprintf(n, sizeof n, "%s.%s.ln_q.weight", b, at);
                dit_t(d, n, 1, h, 0, 0, 0);
                snprintf(n, sizeof n, "%s.%s.ln_k.weight", b, at);
                dit_t(d, n, 1, h, 0, 0, 0);
            }
            if (!pre) {
                snprintf(n, sizeof n, "%s.mlp.fc1", b);
                dit_lin(d, n, mlp, h);
                snprintf(n, sizeof n, "%s.mlp.fc2", b);
                dit_lin(d, n, h, mlp);
            }
        }
    }
    dit_lin(d, "final_layer.adaLN_modulation.1", 2 * h, h);
    dit_lin(d, "final_layer.linear", 4 * 4, h);
}

/* Z-Image's NextDiT at dim 32 (2 heads of 16, 2 kv heads, FFN 32): one
 * noise and one context refiner block, one layer, pad tokens, caption
 * features of 16, 4 latent channels. */
static void zimage_block(dit_seed *d, const char *what, int i, int modulated) {
    const int64_t dim = 32, hd = 16, f = 32;
    char b[96], n[160];
    snprintf(b, sizeof b, "%s.%d", what, i);
    snprintf(n, sizeof n, "%s.attention.qkv.weight", b);
    dit_t(d, n, 2, 6 * hd, dim, 0, 0);
    snprintf(n, sizeof n, "%s.attention.out.weight", b);
    dit_t(d, n, 2, dim, 2 * hd, 0, 0);
    static const char *const norms[] = {"attention.q_norm", "attention.k_norm"};
    for (int k = 0; k < 2; k++) {
        snprintf(n, sizeof n, "%s.%s.weight", b, norms[k]);
        dit_t(d, n, 1, hd, 0, 0, 0);
    }
    static const char *const ff[] = {"w1", "w2", "w3"};
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "%s.feed_forward.%s.weight", b, ff[k]);
        dit_t(d, n, 2, k == 1 ? dim : f, k == 1 ? f : dim, 0, 0);
    }
    static const char *const dn[] = {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"};
    for (int k = 0; k < 4; k++) {
        snprintf(n, sizeof n, "%s.%s.weight", b, dn[k]);
        dit_t(d, n, 1, dim, 0, 0, 0);
    }
    if (modulated) {
        snprintf(n, sizeof n, "%s.adaLN_modulation.0", b);
        dit_lin(d, n, 4 * dim, 32);
    }
}

static void zimage_seed(dit_seed *d) {
    const int64_t dim = 32;
    dit_lin(d, "x_embedder", dim, 4 * 4);
    dit_t(d, "cap_embedder.0.weight", 1, 16, 0, 0, 0);
    dit_lin(d, "cap_embedder.1", dim, 16);
    dit_lin(d, "t_embedder.mlp.0", 32, 256);
    dit_lin(d, "t_embedder.mlp.2", 32, 32);
    zimage_block(d, "noise_refiner", 0, 1);
    zimage_block(d, "context_refiner", 0, 0);
    zimage_block(d, "layers", 0, 1);
    dit_lin(d, "final_layer.adaLN_modulation.1", dim, 32);
    dit_lin(d, "final_layer.linear", 4 * 4, dim);
    dit_t(d, "x_pad_token", 2, 1, dim, 0, 0);
    dit_t(d, "cap_pad_token", 2, 1, dim, 0, 0);
}

static int dit_seeds(const char *out) {
    int rc = 0;
    struct {
        const char *file, *arch, *prefix, *quant;
        void (*fill)(dit_seed *);
    } seeds[] = {
        {"sd3-tiny.gguf", "sd3", "", "joint_blocks.", sd3_seed},
        {"sd3-tiny-compat.gguf", NULL, "model.diffusion_model.", "joint_blocks.", sd3_seed},
        {"lumina2-tiny.gguf", "lumina2", "", "layers.", zimage_seed},
        {"lumina2-tiny-compat.gguf", NULL, "model.diffusion_model.", "layers.", zimage_seed},
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        sd_error err;
        dit_seed d = {sd_gguf_writer_new(), seeds[i].prefix, seeds[i].quant, 2601u + (unsigned)i};
        if (seeds[i].arch) sd_gguf_writer_kv_str(d.w, "general.architecture", seeds[i].arch, &err);
        sd_gguf_writer_kv_u32(d.w, "general.quantization_version", 2, &err);
        seeds[i].fill(&d);
        void *buf;
        size_t n;
        if (sd_gguf_writer_to_memory(d.w, &buf, &n, &err) == SD_OK) {
            rc |= write_seed(out, seeds[i].file, buf, n);
            free(buf);
        } else {
            fprintf(stderr, "fuzz_seeds: %s: %s\n", seeds[i].file, err.msg);
            rc = 1;
        }
        sd_gguf_writer_free(d.w);
    }
    return rc;
}

static int gguf_seeds(const char *out, int argc, char **argv) {
    int rc = 0;
    sd_error err;
    sd_gguf_writer *w = sd_gguf_writer_new();
    sd_gguf_writer_kv_str(w, "general.architecture", "flux", &err);
    sd_gguf_writer_kv_u32(w, "general.quantization_version", 2, &err);
    sd_gguf_writer_kv_f32(w, "scale", 0.5f, &err);
    int32_t orig[3] = {2, 4, 32};
    sd_gguf_writer_kv_i32s(w, "comfy.gguf.orig_shape.shaped", orig, 3, &err);
    static const sd_dtype dts[] = {SD_F32, SD_F16, SD_BF16, SD_I8, SD_I32, SD_Q4_0, SD_Q4_1, SD_Q5_0, SD_Q5_1,
                                   SD_Q8_0, SD_Q2_K, SD_Q3_K, SD_Q4_K, SD_Q5_K, SD_Q6_K, SD_IQ4_NL, SD_IQ4_XS};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        int64_t shape[2] = {2, sd_dtype_block(dts[i]) > 1 ? sd_dtype_block(dts[i]) : 3};
        sd_tensor *t = sd_tensor_new(dts[i], 2, shape);
        uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) p[k] = (uint8_t)(k * 37 + i);
        char name[64];
        snprintf(name, sizeof name, "blk.%zu.%s.weight", i, sd_dtype_name(dts[i]));
        sd_gguf_writer_add(w, name, t, &err);
        sd_tensor_unref(t);
    }
    int64_t sh[2] = {8, 32};
    sd_tensor *t = sd_tensor_new(SD_Q8_0, 2, sh);
    sd_gguf_writer_add(w, "shaped", t, &err);
    sd_tensor_unref(t);
    void *buf;
    size_t n;
    if (sd_gguf_writer_to_memory(w, &buf, &n, &err) == SD_OK) {
        rc |= write_seed(out, "writer.gguf", buf, n);
        free(buf);
    }
    sd_gguf_writer_free(w);

    /* key/values of every type, arrays of strings, nested arrays, an
     * explicit alignment, no tensors */
    uint8_t *b = NULL;
    n = 0;
    gguf_put(&b, &n, "GGUF", 4);
    gguf_le(&b, &n, 3, 4);
    gguf_le(&b, &n, 1, 8);
    gguf_le(&b, &n, 15, 8);
    for (int ty = 0; ty <= 12; ty++) {
        if (ty == 8 || ty == 9) continue;
        char key[32];
        snprintf(key, sizeof key, "scalar.%d", ty);
        gguf_s(&b, &n, key);
        gguf_le(&b, &n, (uint64_t)ty, 4);
        gguf_le(&b, &n, 0x3f800000u + (uint64_t)ty, ty == 0 || ty == 1 || ty == 7 ? 1 : ty <= 3 ? 2 : ty <= 6 ? 4 : 8);
    }
    gguf_s(&b, &n, "general.alignment");
    gguf_le(&b, &n, 4, 4);
    gguf_le(&b, &n, 64, 4);
    gguf_s(&b, &n, "tokenizer.ggml.tokens");
    gguf_le(&b, &n, 9, 4);
    gguf_le(&b, &n, 8, 4);
    gguf_le(&b, &n, 3, 8);
    gguf_s(&b, &n, "<pad>");
    gguf_s(&b, &n, "</s>");
    gguf_s(&b, &n, "\xe2\x96\x81the");
    gguf_s(&b, &n, "nested");
    gguf_le(&b, &n, 9, 4);
    gguf_le(&b, &n, 9, 4);
    gguf_le(&b, &n, 2, 8);
    for (int k = 0; k < 2; k++) {
        gguf_le(&b, &n, 5, 4);
        gguf_le(&b, &n, 2, 8);
        gguf_le(&b, &n, (uint64_t)k, 4);
        gguf_le(&b, &n, 7, 4);
    }
    gguf_s(&b, &n, "general.name");
    gguf_le(&b, &n, 8, 4);
    gguf_s(&b, &n, "seed");
    gguf_s(&b, &n, "t");
    gguf_le(&b, &n, 2, 4);
    gguf_le(&b, &n, 64, 8);
    gguf_le(&b, &n, 1, 8);
    gguf_le(&b, &n, 12 - 4, 4); /* Q8_0 */
    gguf_le(&b, &n, 0, 8);
    while (n % 64) gguf_put(&b, &n, "", 1);
    for (int k = 0; k < 68; k++) gguf_put(&b, &n, "\x01", 1);
    rc |= write_seed(out, "kinds.gguf", b, n);
    free(b);

    for (int a = 0; a < argc; a++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/gguf", argv[a]);
        rc |= gguf_copy_dir(out, dir, "data");
    }
    rc |= dit_seeds(out);
    return rc;
}

/* ---- value_io ------------------------------------------------------------- */

static sd_value *tensor_val(sd_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    sd_tensor *t = sd_tensor_new4(dt, ndim, d0, d1, d2, d3);
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)(i * 7);
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    return v;
}

static int blob_seed(const char *out, const char *name, sd_value *v) {
    void *b;
    size_t n;
    sd_error err;
    int rc = 0;
    if (sd_value_serialize(v, &b, &n, &err) == SD_OK) {
        rc = write_seed(out, name, b, n);
        free(b);
    } else {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", name, err.msg);
        rc = -1;
    }
    sd_value_unref(v);
    return rc;
}

static int value_seeds(const char *out) {
    int rc = 0;
    sd_value *lat = sd_value_dict();
    sd_value_dict_set(lat, "samples", tensor_val(SD_F32, 4, 1, 4, 2, 2));
    sd_value_dict_set(lat, "noise_mask", tensor_val(SD_F32, 3, 1, 2, 2, 0));
    sd_value *bi = sd_value_list();
    sd_value_list_append(bi, sd_value_int(0));
    sd_value_dict_set(lat, "batch_index", bi);
    rc |= blob_seed(out, "latent", lat);

    sd_value *cond = sd_value_list();
    sd_value *c = sd_value_dict();
    sd_value_dict_set(c, "cond", tensor_val(SD_F32, 3, 1, 3, 4, 0));
    sd_value_dict_set(c, "pooled_output", tensor_val(SD_F16, 2, 1, 4, 0, 0));
    sd_value_dict_set(c, "strength", sd_value_float(1.0));
    sd_value_dict_set(c, "set_area_to_bounds", sd_value_bool(0));
    sd_value_list_append(cond, c);
    rc |= blob_seed(out, "conditioning", cond);

    sd_value *sc = sd_value_list();
    sd_value_list_append(sc, sd_value_none());
    sd_value_list_append(sc, sd_value_int(-42));
    sd_value_list_append(sc, sd_value_float(0.5));
    sd_value_list_append(sc, sd_value_bool(1));
    sd_value_list_append(sc, sd_value_string("euler_ancestral"));
    sd_value_list_append(sc, tensor_val(SD_I64, 0, 0, 0, 0, 0));
    sd_value_list_append(sc, tensor_val(SD_U8, 2, 0, 3, 0, 0));
    sd_value_list_append(sc, sd_value_dict());
    rc |= blob_seed(out, "scalars", sc);
    rc |= blob_seed(out, "image", tensor_val(SD_F32, 4, 1, 2, 2, 3));
    rc |= blob_seed(out, "int", sd_value_int(7));
    return rc;
}

/* ---- workflow JSON --------------------------------------------------------- */

static const char *WORKFLOWS[] = {
    ("{\"3\":{\"class_type\":\"KSampler\",\"inputs\":{\"seed\":42,\"steps\":20,\"cfg\":7.5,"
    "\"sampler_name\":\"euler\",\"scheduler\":\"normal\",\"denoise\":1.0,\"model\":[\"4\",0],"
    "\"positive\":[\"6\",0],\"negative\":[\"7\",0],\"latent_image\":[\"5\",0]}},"
    "\"4\":{\"class_type\":\"CheckpointLoaderSimple\",\"inputs\":{\"ckpt_name\":\"tiny-sd1.safetensors\"}},"
    "\"5\":{\"class_type\":\"EmptyLatentImage\",\"inputs\":{\"width\":64,\"height\":64,\"batch_size\":1}},"
    "\"6\":{\"class_type\":\"CLIPTextEncode\",\"inputs\":{\"text\":\"a (red:1.2) cat\",\"clip\":[\"4\",1]},"
    "\"_meta\":{\"title\":\"Positive\"}},"
    "\"7\":{\"class_type\":\"CLIPTextEncode\",\"inputs\":{\"text\":\"\",\"clip\":[\"4\",1]}},"
    "\"8\":{\"class_type\":\"VAEDecode\",\"inputs\":{\"samples\":[\"3\",0],\"vae\":[\"4\",2]}},"
    "\"9\":{\"class_type\":\"SaveImage\",\"inputs\":{\"filename_prefix\":\"out\",\"images\":[\"8\",0]}}}"),
    ("{\"prompt\":{\"1\":{\"class_type\":\"LoadImage\",\"inputs\":{\"image\":\"in.png\"}},"
    "\"2\":{\"class_type\":\"PreviewImage\",\"inputs\":{\"images\":[\"1\",0]}}},\"client_id\":\"x\"}"),
    "{\"a\":{\"class_type\":\"Note\",\"inputs\":{\"list\":[1,2.5,true,null,\"s\"],\"neg\":-1e-3}}}",
    "{}",
};

static int copy_json_dir(const char *out, int a, const char *dirname);

static int json_seeds(const char *out, int argc, char **argv) {
    int rc = 0;
    for (size_t i = 0; i < sizeof WORKFLOWS / sizeof WORKFLOWS[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "builtin-%zu.json", i);
        rc |= write_seed(out, name, WORKFLOWS[i], strlen(WORKFLOWS[i]));
    }
    for (int a = 0; a < argc; a++) rc |= copy_json_dir(out, a, argv[a]);
    return rc;
}

/* ---- UI-format workflows and pictures with EXIF ------------------------------ */

static const char *UI_WORKFLOWS[] = {
    ("{\"nodes\":[{\"id\":4,\"type\":\"CheckpointLoaderSimple\",\"mode\":0,\"outputs\":[{\"name\":\"MODEL\","
     "\"type\":\"MODEL\",\"links\":[1]}],\"widgets_values\":[\"a.safetensors\"]},{\"id\":2,\"type\":\"Reroute\","
     "\"mode\":0,\"inputs\":[{\"name\":\"\",\"type\":\"*\",\"link\":1}],\"outputs\":[{\"name\":\"\",\"type\":"
     "\"MODEL\",\"links\":[2]}]},{\"id\":5,\"type\":\"PrimitiveNode\",\"mode\":0,\"outputs\":[{\"name\":\"INT\","
     "\"type\":\"INT\",\"links\":[3],\"widget\":{\"name\":\"seed\"}}],\"widgets_values\":[7,\"fixed\"]},"
     "{\"id\":6,\"type\":\"KSampler\",\"mode\":4,\"inputs\":[{\"name\":\"model\",\"type\":\"MODEL\",\"link\":2},"
     "{\"name\":\"seed\",\"type\":\"INT\",\"widget\":{\"name\":\"seed\"},\"link\":3}],\"outputs\":[{\"name\":"
     "\"LATENT\",\"type\":\"LATENT\",\"links\":[4]}],\"widgets_values\":[1,\"randomize\",20,8,\"euler\",\"normal\",1]},"
     "{\"id\":7,\"type\":\"VAEDecode\",\"mode\":2,\"inputs\":[{\"name\":\"samples\",\"type\":\"LATENT\","
     "\"link\":4}]}],\"links\":[[1,4,0,2,0,\"MODEL\"],[2,2,0,6,0,\"MODEL\"],[3,5,0,6,1,\"INT\"],"
     "[4,6,0,7,0,\"LATENT\"]],\"groups\":[],\"version\":0.4}"),
    ("{\"nodes\":[{\"id\":1,\"type\":\"sub-1\",\"mode\":0,\"inputs\":[{\"name\":\"w\",\"type\":\"INT\","
     "\"widget\":{\"name\":\"w\"},\"link\":null}],\"outputs\":[{\"name\":\"LATENT\",\"type\":\"LATENT\","
     "\"links\":[1]}],\"widgets_values\":[64]},{\"id\":2,\"type\":\"VAEDecode\",\"mode\":0,\"inputs\":"
     "[{\"name\":\"samples\",\"type\":\"LATENT\",\"link\":1}]}],\"links\":[{\"id\":1,\"origin_id\":1,"
     "\"origin_slot\":0,\"target_id\":2,\"target_slot\":0,\"type\":\"LATENT\"}],\"version\":1,\"definitions\":"
     "{\"subgraphs\":[{\"id\":\"sub-1\",\"inputs\":[{\"name\":\"w\",\"linkIds\":[5]}],\"outputs\":[{\"name\":"
     "\"LATENT\",\"linkIds\":[6]}],\"nodes\":[{\"id\":3,\"type\":\"EmptyLatentImage\",\"mode\":0,\"inputs\":"
     "[{\"name\":\"width\",\"type\":\"INT\",\"widget\":{\"name\":\"width\"},\"link\":5}],\"widgets_values\":"
     "[32,32,1]}],\"links\":[{\"id\":5,\"origin_id\":-10,\"origin_slot\":0,\"target_id\":3,\"target_slot\":0},"
     "{\"id\":6,\"origin_id\":3,\"origin_slot\":0,\"target_id\":-20,\"target_slot\":0}]}]}}"),
};

static int ui_seeds(const char *out, int argc, char **argv) {
    int rc = 0;
    for (size_t i = 0; i < sizeof UI_WORKFLOWS / sizeof UI_WORKFLOWS[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "builtin-ui-%zu.json", i);
        rc |= write_seed(out, name, UI_WORKFLOWS[i], strlen(UI_WORKFLOWS[i]));
    }
    for (int a = 0; a < argc; a++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/ui", argv[a]);
        rc |= copy_json_dir(out, a, dir);
        /* legacy group nodes (tests/data/group_nodes) */
        snprintf(dir, sizeof dir, "%s/group_nodes", argv[a]);
        rc |= copy_json_dir(out, a, dir);
    }
    return rc;
}

/* A little-endian TIFF whose IFD0 holds "prompt:{}" and "workflow:{}", inside
 * a WebP EXIF chunk and a JPEG APP1 segment. */
static int exif_seeds(const char *out) {
    static const char *texts[] = {"prompt:{\"1\":{}}", "workflow:{\"nodes\":[],\"links\":[]}"};
    unsigned char tiff[256] = {'I', 'I', 42, 0, 8, 0, 0, 0, 2, 0};
    size_t data = 8 + 2 + 24 + 4;
    for (int i = 0; i < 2; i++) {
        unsigned char *e = tiff + 10 + 12 * i;
        size_t len = strlen(texts[i]) + 1;
        e[0] = (unsigned char)(0x10 - i), e[1] = 0x01, e[2] = 2;
        e[4] = (unsigned char)len;
        e[8] = (unsigned char)data;
        memcpy(tiff + data, texts[i], len);
        data += len;
    }
    unsigned char webp[512] = "RIFF\0\0\0\0WEBPEXIF";
    size_t n = 20;
    webp[16] = (unsigned char)(data + 6);
    memcpy(webp + n, "Exif\0\0", 6);
    memcpy(webp + n + 6, tiff, data);
    n += 6 + data;
    if (n & 1) webp[n++] = 0;
    webp[4] = (unsigned char)(n - 8);
    int rc = write_seed(out, "exif.webp", webp, n);
    unsigned char jpg[512] = {0xFF, 0xD8, 0xFF, 0xE1};
    jpg[4] = (unsigned char)((data + 8) >> 8), jpg[5] = (unsigned char)(data + 8);
    memcpy(jpg + 6, "Exif\0\0", 6);
    memcpy(jpg + 12, tiff, data);
    jpg[12 + data] = 0xFF, jpg[13 + data] = 0xD9;
    rc |= write_seed(out, "exif.jpg", jpg, 14 + data);
    return rc;
}

static int copy_json_dir(const char *out, int a, const char *dirname) {
    int rc = 0;
    DIR *d = opendir(dirname);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".json") != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dirname, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        char name[512];
        snprintf(name, sizeof name, "dir%d-%s", a, de->d_name);
        rc |= write_seed(out, name, buf, n);
    }
    closedir(d);
    return rc;
}

/* ---- diffusers_unet ---------------------------------------------------------- */

/* Small diffusers-layout UNets (names as diffusers saves them; tiny shapes:
 * the renaming reads names, not widths): two levels, attention on the
 * first, a middle block, the up blocks; one without up blocks (a
 * ControlNet's encoder, with its controlnet_* and Union names). */
static int diffusers_unet_seeds(const char *out) {
    static const char *const common[] = {
        "conv_in.weight", "time_embedding.linear_1.weight", "time_embedding.linear_2.bias",
        "down_blocks.0.resnets.0.conv1.weight", "down_blocks.0.resnets.0.norm1.weight",
        "down_blocks.0.resnets.1.conv1.weight", "down_blocks.0.attentions.0.proj_in.weight",
        "down_blocks.0.attentions.0.transformer_blocks.0.norm1.weight",
        "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight",
        "down_blocks.0.attentions.1.transformer_blocks.0.norm1.weight", "down_blocks.0.downsamplers.0.conv.weight",
        "down_blocks.1.resnets.0.conv1.weight", "down_blocks.1.resnets.0.conv_shortcut.weight",
        "down_blocks.1.resnets.1.conv1.weight", "mid_block.resnets.0.conv1.weight", "mid_block.resnets.1.conv2.bias",
        "mid_block.attentions.0.proj_in.weight", "mid_block.attentions.0.transformer_blocks.0.norm1.weight",
        "add_embedding.linear_1.weight", NULL};
    static const char *const up[] = {
        "up_blocks.0.resnets.0.conv1.weight", "up_blocks.0.resnets.1.conv1.weight", "up_blocks.0.resnets.2.conv1.weight",
        "up_blocks.0.upsamplers.0.conv.weight", "up_blocks.1.resnets.0.conv1.weight",
        "up_blocks.1.resnets.1.conv1.weight", "up_blocks.1.resnets.2.conv1.weight",
        "up_blocks.1.attentions.2.transformer_blocks.0.norm1.weight", "conv_norm_out.weight", "conv_out.bias", NULL};
    static const char *const cn[] = {
        "controlnet_cond_embedding.conv_in.weight", "controlnet_cond_embedding.blocks.0.weight",
        "controlnet_cond_embedding.conv_out.bias", "controlnet_down_blocks.0.weight", "controlnet_mid_block.bias",
        "task_embedding", "transformer_layes.0.attn.in_proj_weight", "spatial_ch_projs.bias",
        "control_add_embedding.linear_1.bias", NULL};
    int rc = 0;
    sd_error err;
    for (int variant = 0; variant < 2; variant++) {
        sd_st_writer *w = sd_st_writer_new();
        const char *const *lists[] = {common, variant ? cn : up};
        for (int l = 0; l < 2; l++)
            for (int i = 0; lists[l][i]; i++) {
                int64_t shape[2] = {2, 3};
                sd_tensor *t = sd_tensor_new(SD_F16, 2, shape);
                if (!t || sd_st_writer_add(w, lists[l][i], t, &err)) rc = -1;
                sd_tensor_unref(t);
            }
        void *buf = NULL;
        size_t n = 0;
        if (sd_st_writer_to_memory(w, &buf, &n, &err) == SD_OK)
            rc |= write_seed(out, variant ? "controlnet.safetensors" : "unet.safetensors", buf, n);
        else
            rc = -1;
        free(buf);
        sd_st_writer_free(w);
    }
    return rc;
}

/* ---- ldm_config -------------------------------------------------------------- */

static int ldm_config_seeds(const char *out) {
    static const struct {
        const char *file, *text;
    } seeds[] = {
        {"v1_clip_skip.yaml",
         "model:\n  base_learning_rate: 1.0e-04\n  target: ldm.models.diffusion.ddpm.LatentDiffusion\n"
         "  params:\n    linear_start: 0.00085\n    unet_config:\n      params:\n"
         "        attention_resolutions: [ 4, 2, 1 ]\n    cond_stage_config:\n"
         "      target: ldm.modules.encoders.modules.FrozenCLIPEmbedder\n      params:\n"
         "        layer: \"hidden\"\n        layer_idx: -2\n"},
        {"v2_v.yaml",
         "model:\n  params:\n    parameterization: \"v\"\n    cond_stage_config:\n"
         "      target: ldm.modules.encoders.modules.FrozenOpenCLIPEmbedder\n      params:\n"
         "        freeze: True\n        layer: \"penultimate\"\n"},
        {"flow.yaml", "{model: {params: {parameterization: v, cond_stage_config: {params: {layer_idx: 3}}}}}\n"},
        {"anchors.yaml",
         "base: &p {layer_idx: -1}\nmodel:\n  params:\n    cond_stage_config:\n      params: *p\n"},
        {"null_idx.yaml", "model:\n  params:\n    cond_stage_config:\n      params:\n        layer_idx: ~\n"},
        {"quoted_idx.yaml", "model:\n  params:\n    cond_stage_config:\n      params:\n        layer_idx: '-2'\n"},
        {"no_cond.yaml", "model:\n  params:\n    parameterization: eps\n"},
        {"tab.yaml", "model:\n\tparams: {}\n"},
        {"unclosed.yaml", "model: {params: [1, 2\n"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++)
        rc |= write_seed(out, seeds[i].file, seeds[i].text, strlen(seeds[i].text));
    return rc;
}

/* ---- png ------------------------------------------------------------------ */

static uint32_t crc_png(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static size_t put_u32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24); b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8); b[3] = (unsigned char)v;
    return 4;
}

static size_t put_chunk(unsigned char *b, const char *type, const void *data, uint32_t n) {
    size_t o = put_u32(b, n);
    memcpy(b + o, type, 4);
    if (n) memcpy(b + o + 4, data, n);
    o += 4 + n;
    return o + put_u32(b + o, crc_png(b + 4, 4 + (size_t)n));
}

static size_t put_ihdr(unsigned char *b, uint32_t w, uint32_t h, int depth, int ctype) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    unsigned char d[13] = {0};
    put_u32(d, w);
    put_u32(d + 4, h);
    d[8] = (unsigned char)depth;
    d[9] = (unsigned char)ctype;
    memcpy(b, sig, 8);
    return 8 + put_chunk(b + 8, "IHDR", d, 13);
}

static int png_seeds(const char *out) {
    int rc = 0;
    sd_error err;
    static const int channels[4] = {1, 2, 3, 4};
    for (int k = 0; k < 4; k++) {
        sd_tensor *t = sd_tensor_new4(SD_F32, 3, 5 + k, 7, channels[k], 0);
        if (!t) return -1;
        float *p = sd_tensor_f32(t);
        for (int64_t i = 0; i < (int64_t)(t->nbytes / sizeof(float)); i++) p[i] = (float)((i * 37) % 256) / 255.0f;
        sd_png_text texts[2] = {{"prompt", "{\"1\": {\"class_type\": \"EmptyImage\"}}"},
                                {"workflow", "caf\xc3\xa9 \xe2\x9c\x93"}}; /* iTXt */
        char path[4096];
        snprintf(path, sizeof path, "%s/writer_c%d.png", out, channels[k]);
        if (sd_png_write(path, t, k & 1 ? texts : NULL, k & 1 ? 2 : 0, k * 3, &err) != SD_OK) {
            fprintf(stderr, "fuzz_seeds: %s\n", err.msg);
            rc = -1;
        } else {
            n_written++;
        }
        sd_tensor_unref(t);
    }
    unsigned char b[256];
    static const unsigned char idat[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
    size_t n = put_ihdr(b, 16384, 16384, 8, 0);
    n += put_chunk(b + n, "IDAT", idat, sizeof idat);
    n += put_chunk(b + n, "IEND", NULL, 0);
    rc |= write_seed(out, "huge_size.png", b, n);
    n = put_ihdr(b, 1, 1, 8, 0);
    n += put_u32(b + n, 0x7fffffffu);
    memcpy(b + n, "tEXtprompt", 11);
    rc |= write_seed(out, "huge_text.png", b, n + 11);
    static const char kv[] = "prompt\0{}";
    n = put_ihdr(b, 1, 1, 8, 0);
    n += put_chunk(b + n, "tEXt", kv, sizeof kv - 1);
    n += put_chunk(b + n, "IDAT", idat, sizeof idat);
    n += put_chunk(b + n, "IEND", NULL, 0);
    rc |= write_seed(out, "text_first.png", b, n);
    return rc;
}

/* ---- pickle / torch_ckpt --------------------------------------------------------- */

/* {'state_dict': OrderedDict(a=tensor(FloatStorage '0', [2])), 'x': 1} as
 * torch.save pickles it (protocol 2). */
static const char TENSOR_PKL[] =
    "\x80\x02\x7d\x71\x00\x28\x58\x0a\x00\x00\x00\x73\x74\x61\x74\x65\x5f\x64\x69\x63\x74\x71\x01\x63"
    "\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x0a"
    "\x71\x02\x29\x52\x71\x03\x58\x01\x00\x00\x00\x61\x71\x04\x63\x74\x6f\x72\x63\x68\x2e\x5f\x75\x74"
    "\x69\x6c\x73\x0a\x5f\x72\x65\x62\x75\x69\x6c\x64\x5f\x74\x65\x6e\x73\x6f\x72\x5f\x76\x32\x0a\x71"
    "\x05\x28\x28\x58\x07\x00\x00\x00\x73\x74\x6f\x72\x61\x67\x65\x71\x06\x63\x74\x6f\x72\x63\x68\x0a"
    "\x46\x6c\x6f\x61\x74\x53\x74\x6f\x72\x61\x67\x65\x0a\x71\x07\x58\x01\x00\x00\x00\x30\x71\x08\x58"
    "\x03\x00\x00\x00\x63\x70\x75\x71\x09\x4b\x02\x74\x71\x0a\x51\x4b\x00\x4b\x02\x85\x71\x0b\x4b\x01"
    "\x85\x71\x0c\x89\x68\x02\x29\x52\x71\x0d\x74\x71\x0e\x52\x71\x0f\x73\x58\x01\x00\x00\x00\x78\x71"
    "\x10\x4b\x01\x75\x2e";

/* Plain containers, every int width, floats, bytes, memo, MARK forms. */
static const char PLAIN_PKL[] =
    "\x80\x02}q\x00(X\x01\x00\x00\x00" "a]q\x01(K\x01M\x02\x01J\xff\xff\xff\xff"
    "\x8a\x01\xff\x88\x89NG?\xf0\x00\x00\x00\x00\x00\x00" "eX\x01\x00\x00\x00" "b(C\x02hi\x8c\x01sU\x01t"
    "\x85\x86th\x01" "2\x94" "0Nu.";

static int zip_seed(const char *path, const char *pkl, size_t n, const void *st, size_t st_n) {
    int ze = 0;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    if (!za) return -1;
    zip_source_t *s1 = zip_source_buffer(za, pkl, n, 0);
    zip_source_t *s2 = zip_source_buffer(za, st, st_n, 0);
    zip_source_t *s3 = zip_source_buffer(za, "little", 6, 0);
    int bad = !s1 || zip_file_add(za, "archive/data.pkl", s1, 0) < 0 ||
              !s2 || zip_file_add(za, "archive/data/0", s2, 0) < 0 ||
              !s3 || zip_file_add(za, "archive/byteorder", s3, 0) < 0;
    for (zip_int64_t i = 0; !bad && i < 3; i++) /* stored, as torch writes */
        bad = zip_set_file_compression(za, (zip_uint64_t)i, ZIP_CM_STORE, 0) != 0;
    if (bad) {
        zip_discard(za);
        return -1;
    }
    n_written++;
    return zip_close(za) == 0 ? 0 : -1;
}

/* data.pkl of a torch zip file, when it has one. */
static int pkl_of(const char *out, const char *path, const char *name) {
    int ze = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY, &ze);
    if (!za) return 0;
    int rc = 0;
    for (zip_int64_t i = 0; i < zip_get_num_entries(za, 0); i++) {
        const char *nm = zip_get_name(za, (zip_uint64_t)i, 0);
        zip_stat_t st;
        size_t l = nm ? strlen(nm) : 0;
        if (l < 9 || strcmp(nm + l - 9, "/data.pkl") != 0 || zip_stat_index(za, (zip_uint64_t)i, 0, &st) != 0 ||
            st.size > 65536)
            continue;
        uint8_t *b = malloc(st.size + 1);
        zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
        if (b && zf && zip_fread(zf, b, st.size) == (zip_int64_t)st.size) rc |= write_seed(out, name, b, st.size);
        if (zf) zip_fclose(zf);
        free(b);
    }
    zip_discard(za);
    return rc;
}

static int torch_seeds(const char *pk_out, const char *zip_out, int argc, char **argv) {
    int rc = 0;
    rc |= write_seed(pk_out, "tensor.pkl", TENSOR_PKL, sizeof TENSOR_PKL - 1);
    rc |= write_seed(pk_out, "plain.pkl", PLAIN_PKL, sizeof PLAIN_PKL - 1);
    char path[4096];
    static const float two[2] = {1.5f, -2.0f};
    snprintf(path, sizeof path, "%s/builtin.ckpt", zip_out);
    rc |= zip_seed(path, TENSOR_PKL, sizeof TENSOR_PKL - 1, two, sizeof two);
    /* the torch files of the data folders: tests/data/torch, and the A1111
     * hypernetworks of tests/data/hypernetwork (integer keys, tuples of
     * dicts, scalars, a legacy-format file) */
    for (int a = 0; a < 2 * argc; a++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", argv[a / 2], a % 2 ? "hypernetwork" : "torch");
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (!(l > 3 && strcmp(de->d_name + l - 3, ".pt") == 0) &&
                !(l > 5 && strcmp(de->d_name + l - 5, ".ckpt") == 0))
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            static uint8_t buf[16384]; /* small seeds only: libFuzzer's max_len follows them */
            size_t n = fread(buf, 1, sizeof buf, f);
            int small = n < sizeof buf || fgetc(f) == EOF;
            fclose(f);
            if (!small) continue;
            rc |= write_seed(zip_out, de->d_name, buf, n);
            char name[600];
            snprintf(name, sizeof name, "%s.pkl", de->d_name);
            rc |= pkl_of(pk_out, path, name);
        }
        closedir(d);
    }
    return rc;
}

/* ---- LoRA ------------------------------------------------------------------ */

/* Module names of the tiny SD1 model (models/synth sd1-tiny). */
#define SQ "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q" /* [32, 32] */
#define SC "lora_unet_down_blocks_0_resnets_0_conv1"                              /* [32, 32, 3, 3] */
#define SF "diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2"     /* [32, 128] */
#define SO "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_out.0"
#define ST "lora_te_text_model_encoder_layers_0_self_attn_q_proj"                /* [128, 128] */

typedef struct lt {
    const char *name;
    int ndim;
    int64_t d[4];
} lt;

typedef struct lseed {
    const char *file;
    lt t[8];
} lseed;

static const lseed LORA_SEEDS[] = {
    {"kohya", {{SQ ".lora_up.weight", 2, {32, 4}}, {SQ ".lora_down.weight", 2, {4, 32}},
               {SQ ".alpha", 0, {0}}, {ST ".lora_up.weight", 2, {128, 2}},
               {ST ".lora_down.weight", 2, {2, 128}}}},
    {"locon", {{SC ".lora_up.weight", 4, {32, 2, 1, 1}}, {SC ".lora_down.weight", 4, {2, 32, 1, 1}},
               {SC ".lora_mid.weight", 4, {2, 2, 3, 3}}, {SC ".alpha", 0, {0}}}},
    {"locon_conv", {{SC ".lora_up.weight", 4, {32, 2, 1, 1}}, {SC ".lora_down.weight", 4, {2, 32, 3, 3}}}},
    {"loha", {{SQ ".hada_w1_a", 2, {32, 2}}, {SQ ".hada_w1_b", 2, {2, 32}}, {SQ ".hada_w2_a", 2, {32, 2}},
              {SQ ".hada_w2_b", 2, {2, 32}}, {SQ ".alpha", 0, {0}}}},
    {"loha_tucker", {{SC ".hada_w1_a", 2, {2, 32}}, {SC ".hada_w1_b", 2, {2, 32}},
                     {SC ".hada_w2_a", 2, {2, 32}}, {SC ".hada_w2_b", 2, {2, 32}},
                     {SC ".hada_t1", 4, {2, 2, 3, 3}}, {SC ".hada_t2", 4, {2, 2, 3, 3}}}},
    {"lokr", {{SF ".lokr_w1", 2, {4, 8}}, {SF ".lokr_w2", 2, {8, 16}}}},
    {"lokr_factored", {{SF ".lokr_w1_a", 2, {4, 2}}, {SF ".lokr_w1_b", 2, {2, 8}},
                       {SF ".lokr_w2_a", 2, {8, 2}}, {SF ".lokr_w2_b", 2, {2, 16}}, {SF ".alpha", 0, {0}}}},
    {"lokr_tucker", {{SC ".lokr_w1", 2, {4, 4}}, {SC ".lokr_w2_a", 2, {2, 8}}, {SC ".lokr_w2_b", 2, {2, 8}},
                     {SC ".lokr_t2", 4, {2, 2, 3, 3}}, {SC ".alpha", 0, {0}}}},
    {"diffusers", {{"unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out.lora_A.weight", 2, {4, 32}},
                   {"unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out.lora_B.weight", 2, {32, 4}},
                   {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_linear_layer.down.weight", 2, {4, 128}},
                   {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_linear_layer.up.weight", 2, {128, 4}}}},
    {"diff", {{SO ".diff", 2, {32, 32}}, {SO ".diff_b", 1, {32}}}},
    /* the DiTs of fuzz_lora: flux-dev-tiny (hidden 64, MLP 256), its SD3
     * (hidden 64, MMDiT-X block 0) and Z-Image (dim 64, FFN 128) */
    {"flux_bfl", {{"diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight", 2, {4, 64}},
                  {"diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight", 2, {192, 4}},
                  {"diffusion_model.double_blocks.0.img_attn.qkv.alpha", 0, {0}},
                  {"diffusion_model.single_blocks.0.linear1_qkv.lora_A.weight", 2, {4, 64}},
                  {"diffusion_model.single_blocks.0.linear1_qkv.lora_B.weight", 2, {192, 4}}}},
    {"flux_diffusers", {{"transformer.transformer_blocks.0.attn.to_k.lora_A.weight", 2, {4, 64}},
                        {"transformer.transformer_blocks.0.attn.to_k.lora_B.weight", 2, {64, 4}},
                        {"transformer.norm_out.linear.lora_A.weight", 2, {4, 64}},
                        {"transformer.norm_out.linear.lora_B.weight", 2, {128, 4}},
                        {"transformer.single_transformer_blocks.0.proj_mlp.lora_A.weight", 2, {4, 64}},
                        {"transformer.single_transformer_blocks.0.proj_mlp.lora_B.weight", 2, {256, 4}}}},
    {"sd3_diffusers", {{"transformer.transformer_blocks.0.attn2.to_v.lora_A.weight", 2, {4, 64}},
                       {"transformer.transformer_blocks.0.attn2.to_v.lora_B.weight", 2, {64, 4}},
                       {"transformer.transformer_blocks.0.norm1_context.linear.lora_A.weight", 2, {4, 64}},
                       {"transformer.transformer_blocks.0.norm1_context.linear.lora_B.weight", 2, {384, 4}},
                       {"lora_unet_joint_blocks_1_x_block_attn_qkv.lora_down.weight", 2, {4, 64}},
                       {"lora_unet_joint_blocks_1_x_block_attn_qkv.lora_up.weight", 2, {192, 4}},
                       {"diffusion_model.pos_embed.diff", 3, {1, 16, 64}}}},
    {"zimage", {{"diffusion_model.layers.0.attention.to_q.lora_A.weight", 2, {4, 64}},
                {"diffusion_model.layers.0.attention.to_q.lora_B.weight", 2, {64, 4}},
                {"transformer.all_final_layer.2-1.adaLN_modulation.1.lora_A.weight", 2, {4, 64}},
                {"transformer.all_final_layer.2-1.adaLN_modulation.1.lora_B.weight", 2, {64, 4}},
                {"lycoris_context_refiner_1_feed_forward_w2.lora_down.weight", 2, {4, 128}},
                {"lycoris_context_refiner_1_feed_forward_w2.lora_up.weight", 2, {64, 4}},
                {"diffusion_model.x_pad_token.diff", 2, {1, 64}}}},
    /* the text encoders of fuzz_lora: the Flux CLIP (the SD1 CLIP-L + a T5 of
     * d_model 16, d_ff 32) and Z-Image's Qwen3 (hidden 8, MLP 16) */
    {"flux_te", {{"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_down.weight", 2, {4, 16}},
                 {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_up.weight", 2, {16, 4}},
                 {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.alpha", 0, {0}},
                 {"lora_te2_encoder_block_1_layer_1_DenseReluDense_wo.lora_down.weight", 2, {4, 32}},
                 {"lora_te2_encoder_block_1_layer_1_DenseReluDense_wo.lora_up.weight", 2, {16, 4}},
                 {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", 2, {4, 128}},
                 {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", 2, {128, 4}},
                 {"text_encoders.t5xxl.transformer.encoder.final_layer_norm.diff", 1, {16}}}},
    {"zimage_te", {{"text_encoders.qwen3_4b.transformer.model.layers.0.self_attn.q_proj.lora_A.weight", 2, {4, 8}},
                   {"text_encoders.qwen3_4b.transformer.model.layers.0.self_attn.q_proj.lora_B.weight", 2, {8, 4}},
                   {"text_encoders.qwen3_4b.transformer.model.layers.1.mlp.down_proj.lora_A.weight", 2, {4, 16}},
                   {"text_encoders.qwen3_4b.transformer.model.layers.1.mlp.down_proj.lora_B.weight", 2, {8, 4}},
                   {"text_encoders.qwen3_4b.transformer.model.norm.diff", 1, {8}}}},
};

static int lora_seeds(const char *out) {
    int rc = 0;
    sd_error err;
    uint32_t x = 1;
    for (size_t i = 0; i < sizeof LORA_SEEDS / sizeof *LORA_SEEDS; i++)
        for (int half = 0; half < 2; half++) {
            const lseed *ls = &LORA_SEEDS[i];
            sd_st_writer *w = sd_st_writer_new();
            for (int j = 0; j < 8 && ls->t[j].name; j++) {
                sd_tensor *t = sd_tensor_new(SD_F32, ls->t[j].ndim, ls->t[j].d);
                for (int64_t k = 0; k < sd_tensor_numel(t); k++) {
                    x = x * 1664525u + 1013904223u;
                    sd_tensor_f32(t)[k] = ls->t[j].ndim ? (float)(x >> 8) / 16777216.0f - 0.5f : 2.0f;
                }
                sd_tensor *c = half ? sd_tensor_to_dtype(t, SD_F16) : sd_tensor_ref(t);
                if (!c || sd_st_writer_add(w, ls->t[j].name, c, &err)) rc = -1;
                sd_tensor_unref(c);
                sd_tensor_unref(t);
            }
            void *buf = NULL;
            size_t n = 0;
            if (sd_st_writer_to_memory(w, &buf, &n, &err) == SD_OK) {
                char name[64];
                snprintf(name, sizeof name, "%s%s.safetensors", ls->file, half ? "-f16" : "");
                rc |= write_seed(out, name, buf, n);
            } else {
                rc = -1;
            }
            free(buf);
            sd_st_writer_free(w);
        }
    return rc;
}

/* ---- T5 tokenizer.json ------------------------------------------------------- */

static int t5_seeds(const char *out, const char *testdata) {
    int rc = 0;
    char src[4096], dst[64];
    snprintf(src, sizeof src, "%s/flux/tokenizer/tokenizer.json", testdata);
    FILE *f = fopen(src, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        char *buf = n > 0 ? malloc((size_t)n) : NULL;
        if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
            rc |= write_seed(out, "real.json", buf, (size_t)n);
        }
        free(buf);
        fclose(f);
    }
    static const char *const variants[] = {
        "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"a\",-1],[\"b\",-1],"
        "[\"ab\",-1.5],[\"\\u2581\",-2],[\"\\u2581a\",-1]]}}",
        "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Strip\",\"strip_left\":true,"
        "\"strip_right\":true},{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\"\\u2581\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\"bb\"},\"content\":\"-\"}]},"
        "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\"}},"
        "{\"SpecialToken\":{\"id\":\"</s>\"}}],\"special_tokens\":{\"</s>\":{\"id\":\"</s>\",\"ids\":[1]}}},"
        "\"added_tokens\":[{\"id\":1,\"content\":\"</s>\",\"normalized\":false,\"special\":true}],"
        "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"</s>\",0],[\"a\",-1],"
        "[\"\\u2581\",-2],[\"\\u2581a\",-1],[\"-\",-3]]}}",
        "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"_\",\"add_prefix_space\":false},"
        "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":true,\"vocab\":[[\"<unk>\",0],"
        "[\"<0x41>\",-5],[\"<0xC3>\",-5],[\"a\",-1]]}}",
        /* a 256-unit charsmap whose root maps 'x' to "y" */
        "{\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"@CHARSMAP@\"},"
        "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"y\",-1]]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
    };
    /* The charsmap: 512 units (blocks of 256), root offset 256: 'x' (0x78)
     * at 256 ^ 0x78 with label 0x78, a leaf whose value unit (at its own
     * offset) points at string 0 ("y"). */
    uint32_t units[512] = {0};
    units[0] = (uint32_t)(256 >> 0) << 10;        /* root: offset 256 */
    size_t xpos = 256 ^ 0x78;
    units[xpos] = 0x78 | (1u << 8) | ((uint32_t)(xpos ^ 300) << 10); /* label x, leaf, offset -> 300 */
    units[300] = 0;                                                   /* value 0 */
    uint8_t blob[4 + sizeof units + 2];
    uint32_t tsize = sizeof units;
    memcpy(blob, &tsize, 4);
    memcpy(blob + 4, units, sizeof units);
    blob[4 + sizeof units] = 'y';
    blob[5 + sizeof units] = 0;
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t bn = sizeof blob, en = (bn + 2) / 3 * 4;
    char *enc = malloc(en + 1);
    for (size_t i = 0, k = 0; enc && i < bn; i += 3) {
        uint32_t v = (uint32_t)blob[i] << 16 | (i + 1 < bn ? (uint32_t)blob[i + 1] << 8 : 0) |
                     (i + 2 < bn ? blob[i + 2] : 0);
        enc[k++] = b64[v >> 18 & 63];
        enc[k++] = b64[v >> 12 & 63];
        enc[k++] = i + 1 < bn ? b64[v >> 6 & 63] : '=';
        enc[k++] = i + 2 < bn ? b64[v & 63] : '=';
        enc[k] = 0;
    }
    for (size_t i = 0; enc && i < sizeof variants / sizeof variants[0]; i++) {
        const char *v = variants[i], *at = strstr(v, "@CHARSMAP@");
        size_t n = strlen(v) + (at ? en : 0) + 1;
        char *s = malloc(n);
        if (!s) continue;
        if (at) snprintf(s, n, "%.*s%s%s", (int)(at - v), v, enc, at + 10);
        else snprintf(s, n, "%s", v);
        snprintf(dst, sizeof dst, "variant%zu.json", i);
        rc |= write_seed(out, dst, s, strlen(s));
        free(s);
    }
    free(enc);
    return rc;
}

/* ---- regex nodes: flags byte, pattern NUL replacement NUL subject ------------- */

static int clip_seeds(const char *out) {
    static const char *const seeds[] = {
        "a photograph of an astronaut riding a horse, (masterpiece:1.2), 4k",
        "Caf\xc3\xa9 na\xc3\xafve a\xcc\x81\xcc\x96\xcc\x81 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x99\x82 \xce\xa3\xce\xa3",
        "<|startoftext|>don't stop<|endoftext|> 1234567 \t\r\n !!!???",
        "supercalifragilisticexpialidocioussupercalifragilisticexpialidocious",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaabababababababababababab",
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "seed%zu", i);
        rc |= write_seed(out, name, seeds[i], strlen(seeds[i]));
    }
    return rc;
}

static int origin_seeds(const char *out) {
    static const char *const seeds[] = {
        "127.0.0.1\n\nPOST\n127.0.0.1:8188\nhttp://127.0.0.1:8188\n-\n-",
        "127.0.0.1\n\nPOST\nlocalhost:8188\nhttp://evil.example\ncross-site\ncors",
        "0.0.0.0\n*\nOPTIONS\ngpu-box.lan:8188\nhttps://app.example:3000\nsame-site\ncors",
        "127.0.0.1\n\nGET\n[::1]:8188\nnull\ncross-site\nnavigate",
        "10.0.0.5\nhttp://a.example\nGET\n10.0.0.5\nhttp://a.example\n-\nwebsocket",
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "seed%zu", i);
        rc |= write_seed(out, name, seeds[i], strlen(seeds[i]));
    }
    return rc;
}

static int pyregex_seeds(const char *out) {
    static const char *const seeds[][3] = {
        {"(\\w+)@(?P<dom>\\w+)", "\\2 at \\g<dom>/\\g<1>", "Write to ann@example.org or BOB@test.io."},
        {"x*", "-", "abxd"},
        {"^s\\w+$", "\\n\\t\\101\\.", "first\nsecond\nsz\n"},
        {"caf\\u00e9 (\\d+){,2}\\Z", "[\\0]", "caf\xc3\xa9 42"},
        {"[^]a-]+|(?<=a)b|\\N{DASH}", "\\g<0>", "\xc3\x9f\xef\xac\x81 \xc4\xb0 \xce\xa3"},
        {"(", "\\q", ""},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char buf[512], name[32];
        size_t n = 0;
        buf[n++] = (char)(i & 7);
        for (int k = 0; k < 3; k++) {
            size_t l = strlen(seeds[i][k]);
            memcpy(buf + n, seeds[i][k], l);
            n += l;
            if (k < 2) buf[n++] = 0;
        }
        snprintf(name, sizeof name, "seed%zu", i);
        rc |= write_seed(out, name, buf, n);
    }
    return rc;
}

/* ---- flux ---------------------------------------------------------------- */

/* Adds one tensor of the given shape and dtype with small deterministic
 * values (fp8 and 16-bit types by conversion from F32). */
static void flux_add(sd_st_writer *w, const char *prefix, const char *name, sd_dtype dt, int ndim,
                     int64_t d0, int64_t d1, unsigned *seed) {
    int64_t shape[2] = {d0, d1};
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, shape);
    float *v = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) {
        *seed = *seed * 1103515245u + 12345u;
        v[i] = (float)((int)((*seed >> 16) & 0xff) - 128) / 512.0f;
    }
    sd_tensor *c = sd_tensor_to_dtype(t, dt);
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    sd_error err;
    sd_st_writer_add(w, key, c, &err);
    sd_tensor_unref(c);
    sd_tensor_unref(t);
}

/* A matrix; sc > 0: as a legacy scaled-fp8 layer ("<layer>.scale_weight",
 * models/checkpoint/fp8_scaled.h), the last one as a "comfy_quant" one. */
static void flux_mat(sd_st_writer *w, const char *prefix, const char *name, sd_dtype dt, int64_t d0,
                     int64_t d1, unsigned *seed, float sc) {
    flux_add(w, prefix, name, dt, 2, d0, d1, seed);
    if (sc <= 0.0f) return;
    size_t n = strlen(name) - strlen(".weight");
    int quant = strcmp(name, "final_layer.linear.weight") == 0;
    char key[256];
    snprintf(key, sizeof key, "%s%.*s.%s", prefix, (int)n, name, quant ? "weight_scale" : "scale_weight");
    sd_tensor *t = sd_tensor_new(SD_F32, 0, NULL);
    sd_tensor_f32(t)[0] = sc;
    sd_error err;
    sd_st_writer_add(w, key, t, &err);
    sd_tensor_unref(t);
    if (!quant) return;
    static const char conf[] = "{\"format\": \"float8_e4m3fn\"}";
    int64_t len = (int64_t)sizeof conf - 1;
    t = sd_tensor_new(SD_U8, 1, &len);
    memcpy(t->data, conf, (size_t)len);
    snprintf(key, sizeof key, "%s%.*s.comfy_quant", prefix, (int)n, name);
    sd_st_writer_add(w, key, t, &err);
    sd_tensor_unref(t);
}

static int flux_seeds(const char *out) {
    /* hidden 32 = 2 heads of 16, MLP 64, 4 latent channels, widths 8 */
    const int64_t H = 32, M = 64, C = 4, V = 8, T = 8, HD = 16;
    static const struct { const char *prefix; sd_dtype mat, vec; int guidance; float sc; const char *name; } v[4] = {
        {"", SD_BF16, SD_BF16, 1, 0.0f, "flux-dev-bf16.safetensors"},
        {"", SD_F32, SD_F32, 0, 0.0f, "flux-schnell-f32.safetensors"},
        {"model.diffusion_model.", SD_F8_E4M3, SD_BF16, 1, 0.0f, "flux-dev-fp8-ckpt.safetensors"},
        {"model.diffusion_model.", SD_F8_E4M3, SD_BF16, 1, 0.0625f, "flux-dev-fp8-scaled-ckpt.safetensors"},
    };
    int rc = 0;
    for (int k = 0; k < 4; k++) {
        unsigned seed = 99 + (unsigned)k;
        sd_st_writer *w = sd_st_writer_new();
        const char *p = v[k].prefix;
        sd_dtype m = v[k].mat, b = v[k].vec;
        char n[128];
        flux_mat(w, p, "img_in.weight", m, H, C * 4, &seed, v[k].sc);
        flux_add(w, p, "img_in.bias", b, 1, H, 0, &seed);
        flux_mat(w, p, "txt_in.weight", m, H, T, &seed, v[k].sc);
        flux_add(w, p, "txt_in.bias", b, 1, H, 0, &seed);
        const char *emb[3] = {"time_in", "vector_in", v[k].guidance ? "guidance_in" : NULL};
        for (int e = 0; e < 3 && emb[e]; e++) {
            snprintf(n, sizeof n, "%s.in_layer.weight", emb[e]);
            flux_mat(w, p, n, m, H, e == 1 ? V : 256, &seed, v[k].sc);
            snprintf(n, sizeof n, "%s.in_layer.bias", emb[e]);
            flux_add(w, p, n, b, 1, H, 0, &seed);
            snprintf(n, sizeof n, "%s.out_layer.weight", emb[e]);
            flux_mat(w, p, n, m, H, H, &seed, v[k].sc);
            snprintf(n, sizeof n, "%s.out_layer.bias", emb[e]);
            flux_add(w, p, n, b, 1, H, 0, &seed);
        }
        const char *st[2] = {"img", "txt"};
        for (int s2 = 0; s2 < 2; s2++) {
            struct { const char *fmt; int64_t r, c; } l[] = {
                {"double_blocks.0.%s_mod.lin", 6 * H, H}, {"double_blocks.0.%s_attn.qkv", 3 * H, H},
                {"double_blocks.0.%s_attn.proj", H, H},   {"double_blocks.0.%s_mlp.0", M, H},
                {"double_blocks.0.%s_mlp.2", H, M}};
            for (size_t j = 0; j < sizeof l / sizeof l[0]; j++) {
                char base[128];
                snprintf(base, sizeof base, l[j].fmt, st[s2]);
                snprintf(n, sizeof n, "%s.weight", base);
                flux_mat(w, p, n, m, l[j].r, l[j].c, &seed, v[k].sc);
                snprintf(n, sizeof n, "%s.bias", base);
                flux_add(w, p, n, b, 1, l[j].r, 0, &seed);
            }
            snprintf(n, sizeof n, "double_blocks.0.%s_attn.norm.query_norm.scale", st[s2]);
            flux_add(w, p, n, b, 1, HD, 0, &seed);
            snprintf(n, sizeof n, "double_blocks.0.%s_attn.norm.key_norm.scale", st[s2]);
            flux_add(w, p, n, b, 1, HD, 0, &seed);
        }
        struct { const char *name; int64_t r, c; } sl[] = {
            {"single_blocks.0.modulation.lin", 3 * H, H}, {"single_blocks.0.linear1", 3 * H + M, H},
            {"single_blocks.0.linear2", H, H + M},         {"final_layer.adaLN_modulation.1", 2 * H, H},
            {"final_layer.linear", 4 * C, H}};
        for (size_t j = 0; j < sizeof sl / sizeof sl[0]; j++) {
            snprintf(n, sizeof n, "%s.weight", sl[j].name);
            flux_mat(w, p, n, m, sl[j].r, sl[j].c, &seed, v[k].sc);
            snprintf(n, sizeof n, "%s.bias", sl[j].name);
            flux_add(w, p, n, b, 1, sl[j].r, 0, &seed);
        }
        flux_add(w, p, "single_blocks.0.norm.query_norm.scale", b, 1, HD, 0, &seed);
        flux_add(w, p, "single_blocks.0.norm.key_norm.scale", b, 1, HD, 0, &seed);
        if (v[k].sc > 0.0f) {
            sd_tensor *mk = sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0);
            snprintf(n, sizeof n, "%sscaled_fp8", p);
            sd_error e2;
            sd_st_writer_add(w, n, mk, &e2);
            sd_tensor_unref(mk);
        }
        void *buf;
        size_t size;
        sd_error err;
        if (sd_st_writer_to_memory(w, &buf, &size, &err) == SD_OK) {
            rc |= write_seed(out, v[k].name, buf, size);
            free(buf);
        }
        sd_st_writer_free(w);
    }
    return rc;
}

/* ---- Qwen2 tokenizer files ------------------------------------------------------ */

/* The byte-level character of byte b as JSON string text. */
static size_t byte_key(int b, char *out) {
    uint32_t cp = ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) ? (uint32_t)b : 0;
    if (!cp) {
        uint32_t n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
        cp = 256 + n;
    }
    if (cp == '"' || cp == '\\') return (size_t)sprintf(out, "\\%c", (char)cp);
    if (cp < 0x80) return (size_t)sprintf(out, "%c", (char)cp);
    return (size_t)sprintf(out, "%c%c", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F)));
}

static int qwen_seeds(const char *out, const char *testdata) {
    int rc = 0;
    char *v = malloc(8192);
    if (!v) return -1;
    size_t k = (size_t)sprintf(v, "{");
    for (int b = 0; b < 256; b++) {
        char key[8];
        byte_key(b, key);
        k += (size_t)sprintf(v + k, "%s\"%s\":%d", b ? "," : "", key, b);
    }
    k += (size_t)sprintf(v + k, ",\"he\":256,\"ll\":257,\"hell\":258,\"\u0120t\":259,\"'s\":260}");
    static const char *const merges[] = {
        "#version: 0.2\nh e\nl l\nhe ll\n\u0120 t\n' s\n",
        "#version: 0.2\nh e x\n",
        "#version: 0.2\nq zz\n",
        "h e\nh e\n\n\r\nl l\r\n",
    };
    static const char *const configs[] = {
        "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<|im_end|>\",\"lstrip\":false,"
        "\"normalized\":false,\"rstrip\":false,\"single_word\":false,\"special\":true},"
        "\"301\":{\"content\":\"<|im\",\"normalized\":false,\"special\":false}}}",
        "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<x>\",\"lstrip\":true,\"normalized\":false}}}",
        "{\"split_special_tokens\":true}",
        "",
    };
    for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++)
        for (size_t j = 0; j < sizeof configs / sizeof configs[0]; j++) {
            if (i && j) continue;
            size_t n = k + strlen(merges[i]) + strlen(configs[j]) + 16;
            char *s = malloc(n);
            if (!s) continue;
            int w = *configs[j] ? snprintf(s, n, "%s\n#==#\n%s\n#==#\n%s", v, merges[i], configs[j])
                                : snprintf(s, n, "%s\n#==#\n%s", v, merges[i]);
            char name[64];
            snprintf(name, sizeof name, "small%zu-%zu.txt", i, j);
            if (w > 0) rc |= write_seed(out, name, s, (size_t)w);
            free(s);
        }
    free(v);
    /* the real files cut short, the vocabulary closed after its last whole
     * entry: real bytes for the readers (the merges naming tokens the cut
     * dropped make the loader refuse at that line) */
    static const char *const real[3] = {"vocab.json", "merges.txt", "tokenizer_config.json"};
    size_t cut[3] = {24000, 8000, 1u << 20};
    char *part[3] = {NULL, NULL, NULL};
    size_t pn[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        char src[4096];
        snprintf(src, sizeof src, "%s/zimage/tokenizer/%s", testdata, real[i]);
        FILE *f = fopen(src, "rb");
        if (!f) continue;
        part[i] = malloc(cut[i]);
        pn[i] = part[i] ? fread(part[i], 1, cut[i], f) : 0;
        fclose(f);
    }
    if (part[0] && part[1] && part[2]) {
        /* close the cut vocabulary after its last complete entry */
        size_t e = pn[0];
        while (e > 0 && part[0][e - 1] != ',') e--;
        if (e > 0) part[0][e - 1] = '}';
        size_t m = pn[1];
        while (m > 0 && part[1][m - 1] != '\n') m--;
        size_t n = e + m + pn[2] + 16;
        char *s = malloc(n);
        if (s) {
            size_t w = 0;
            memcpy(s + w, part[0], e), w += e;
            memcpy(s + w, "\n#==#\n", 6), w += 6;
            memcpy(s + w, part[1], m), w += m;
            memcpy(s + w, "\n#==#\n", 6), w += 6;
            memcpy(s + w, part[2], pn[2]), w += pn[2];
            rc |= write_seed(out, "real-cut.txt", s, w);
            free(s);
        }
    }
    for (int i = 0; i < 3; i++) free(part[i]);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_seeds OUT_DIR TESTDATA_DIR [JSON_DIR...]\n");
        return 2;
    }
    char dir[4096];
    int rc = 0;
    snprintf(dir, sizeof dir, "%s/safetensors", argv[1]);
    mkdir_p(dir);
    rc |= st_seeds(dir, argv[2]);
    snprintf(dir, sizeof dir, "%s/gguf", argv[1]);
    mkdir_p(dir);
    rc |= gguf_seeds(dir, argc - 3, argv + 3);
    snprintf(dir, sizeof dir, "%s/value_io", argv[1]);
    mkdir_p(dir);
    rc |= value_seeds(dir);
    snprintf(dir, sizeof dir, "%s/workflow_json", argv[1]);
    mkdir_p(dir);
    rc |= json_seeds(dir, argc - 3, argv + 3);
    snprintf(dir, sizeof dir, "%s/png", argv[1]);
    mkdir_p(dir);
    rc |= png_seeds(dir);
    char pk[4096];
    snprintf(pk, sizeof pk, "%s/pickle", argv[1]);
    mkdir_p(pk);
    snprintf(dir, sizeof dir, "%s/torch_ckpt", argv[1]);
    mkdir_p(dir);
    rc |= torch_seeds(pk, dir, argc - 3, argv + 3);
    snprintf(dir, sizeof dir, "%s/lora", argv[1]);
    mkdir_p(dir);
    rc |= lora_seeds(dir);
    snprintf(dir, sizeof dir, "%s/workflow_ui", argv[1]);
    mkdir_p(dir);
    rc |= ui_seeds(dir, argc - 3, argv + 3);
    snprintf(dir, sizeof dir, "%s/workflow_exif", argv[1]);
    mkdir_p(dir);
    rc |= exif_seeds(dir);
    snprintf(dir, sizeof dir, "%s/t5_tokenizer", argv[1]);
    mkdir_p(dir);
    rc |= t5_seeds(dir, argv[2]);
    snprintf(dir, sizeof dir, "%s/pyregex", argv[1]);
    mkdir_p(dir);
    rc |= pyregex_seeds(dir);
    snprintf(dir, sizeof dir, "%s/flux", argv[1]);
    mkdir_p(dir);
    rc |= flux_seeds(dir);
    snprintf(dir, sizeof dir, "%s/clip_tokenizer", argv[1]);
    mkdir_p(dir);
    rc |= clip_seeds(dir);
    snprintf(dir, sizeof dir, "%s/origin", argv[1]);
    mkdir_p(dir);
    rc |= origin_seeds(dir);
    snprintf(dir, sizeof dir, "%s/qwen_tokenizer", argv[1]);
    mkdir_p(dir);
    rc |= qwen_seeds(dir, argv[2]);
    snprintf(dir, sizeof dir, "%s/ldm_config", argv[1]);
    mkdir_p(dir);
    rc |= ldm_config_seeds(dir);
    snprintf(dir, sizeof dir, "%s/diffusers_unet", argv[1]);
    mkdir_p(dir);
    rc |= diffusers_unet_seeds(dir);
    printf("fuzz_seeds: wrote %d seeds under %s\n", n_written, argv[1]);
    return rc ? 1 : 0;
}
