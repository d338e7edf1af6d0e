/* libFuzzer target: the GGUF reader (sd_gguf_parse, and the weights view
 * sd_gguf_open_memory). Whatever it accepts must be safe to use: every
 * key/value is read back through the typed accessors (strings of arrays
 * walked to the end), every tensor info checked against the input, and
 * every tensor of the view read in full and widened to F32 (the quantized
 * ones through core/quant.c).
 *
 * Then the file as ComfyUI-GGUF's loaders read it (models/checkpoint/
 * gguf_model.h) for each use (any, diffusion model, text encoder): the
 * architecture from general.architecture or, without one, from the keys;
 * the prefix cut; the llama.cpp names mapped back. A diffusion model's view
 * goes through the DiT detections (Flux, SD3's MMDiT, Z-Image's NextDiT:
 * the arches flux, sd3, lumina2), and a small one detected is loaded
 * (every tensor's shape checked, quantized ones kept). The seeds
 * (fuzz_seeds.c) include tiny SD3 and Z-Image files with and without the
 * architecture and prefix. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "kernels/backend.h"
#include "models/checkpoint/gguf_model.h"
#include "models/flux/flux.h"
#include "models/sd3/sd3.h"
#include "models/zimage/zimage.h"

static sd_backend *be;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    sd_error err;
    if (sd_backend_new("cpu", 1, &be, &err)) abort();
    return 0;
}

/* The DiT detections on a diffusion model's view; small models detected
 * are loaded. Detection's own invariants must hold. */
static void diffusion(sd_st_file *f) {
    sd_error err;
    sd_flux_config fc;
    if (sd_flux_detect(f, "", &fc, &err) == SD_OK) {
        if (fc.num_heads * fc.head_dim != fc.hidden_size) abort();
        if (fc.hidden_size <= 128 && fc.mlp_hidden <= 512 && fc.depth + fc.depth_single_blocks <= 4) {
            sd_flux *m = NULL;
            (void)sd_flux_load(be, f, "", SD_F32, &m, &err);
            sd_flux_free(m);
        }
    }
    sd_sd3_config sc;
    if (sd_sd3_detect(f, "", &sc, &err) == SD_OK) {
        if (sc.num_heads * sc.head_dim != sc.hidden_size || sc.depth < 1 || sc.depth > SD_SD3_MAX_DEPTH) abort();
        if (sc.hidden_size <= 128 && sc.mlp_hidden <= 512 && sc.depth <= 4 && sc.pos_embed_max_size <= 16 &&
            sc.in_channels <= 64 && sc.context_in_dim <= 256 && sc.adm_in_channels <= 256) {
            sd_sd3 *m = NULL;
            (void)sd_sd3_load(be, f, "", SD_F32, &m, &err);
            sd_sd3_free(m);
        }
    }
    sd_zimage_config zc;
    if (sd_zimage_detect(f, "", &zc, &err) == SD_OK) {
        int axes = 0;
        for (int a = 0; a < SD_ZIMAGE_AXES; a++) axes += zc.axes_dim[a];
        if (zc.n_heads * zc.head_dim != zc.dim || axes != zc.head_dim || zc.n_heads % zc.n_kv_heads) abort();
        if (zc.dim <= 128 && zc.ffn_hidden <= 512 && zc.n_layers + 2 * zc.n_refiner_layers <= 6 &&
            zc.cap_feat_dim <= 256 && zc.in_channels <= 64 && zc.t_dim <= 256 && zc.adaln_dim <= 256) {
            sd_zimage *m = NULL;
            (void)sd_zimage_load(be, f, "", SD_F32, &m, &err);
            sd_zimage_free(m);
        }
    }
    sd_backend_clear_error(be);
}

static void as_model(const uint8_t *data, size_t size) {
    static const char *const img[] = {"flux", "sd1", "sdxl", "sd3", "aura", "hidream", "cosmos",
                                      "ltxv", "hyvid", "wan", "lumina2", "qwen_image", NULL};
    for (int use = SD_GGUF_ANY; use <= SD_GGUF_TEXT_ENCODER; use++) {
        sd_st_file *f = NULL;
        sd_error err;
        char arch[32];
        if (sd_gguf_model_open_memory(data, size, "fuzz.gguf", (sd_gguf_use)use, &f, arch, sizeof arch, &err) !=
            SD_OK) {
            if (f) abort();
            continue;
        }
        if (!arch[0]) abort();
        int image = 0;
        for (int i = 0; img[i]; i++) image |= strcmp(arch, img[i]) == 0;
        if (use == SD_GGUF_DIFFUSION_MODEL && !image) abort();
        for (size_t i = 0; i < sd_st_count(f); i++)
            if (sd_st_find(f, sd_st_at(f, i)->name) != sd_st_at(f, i)) abort();
        if (use == SD_GGUF_DIFFUSION_MODEL) diffusion(f);
        sd_st_close(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_error err;
    sd_gguf *g = NULL;
    if (sd_gguf_parse(data, size, "fuzz.gguf", &g, &err) == SD_OK) {
        for (size_t i = 0; i < sd_gguf_kv_count(g); i++) {
            const sd_gguf_kv *kv = sd_gguf_kv_at(g, i);
            if (sd_gguf_find_kv(g, kv->key) != kv) abort();
            if (kv->value < data || kv->value + kv->nbytes > data + size) abort();
            int64_t iv;
            double fv;
            const char *s;
            size_t len;
            if (sd_gguf_kv_str(kv, &s, &len) && (const uint8_t *)s + len > data + size) abort();
            (void)sd_gguf_kv_int(kv, &iv);
            (void)sd_gguf_kv_float(kv, &fv);
            for (uint64_t k = 0; k < kv->count && k < 64; k++) {
                (void)sd_gguf_array_int(kv, k, &iv);
                (void)sd_gguf_array_float(kv, k, &fv);
            }
            uint64_t pos = 0, n = 0;
            while (sd_gguf_kv_str_next(kv, &pos, &s, &len)) {
                if ((const uint8_t *)s + len > data + size) abort();
                n++;
            }
            if (kv->type == SD_GGUF_ARRAY && kv->item_type == SD_GGUF_STRING && n != kv->count) abort();
        }
        for (size_t i = 0; i < sd_gguf_tensor_count(g); i++) {
            const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
            if (sd_gguf_find_tensor(g, t->name) != t) abort();
            if (t->offset > size || t->nbytes > size - t->offset) abort();
        }
        sd_gguf_free(g);
    } else if (g) {
        abort(); /* a failed parse must not hand out a file */
    }

    sd_st_file *f = NULL;
    if (sd_gguf_open_memory(data, size, "fuzz.gguf", &f, &err) != SD_OK) {
        if (f) abort();
        return 0;
    }
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        if (sd_st_find(f, e->name) != e) abort();
        if (e->offset + e->nbytes > size) abort();
        sd_tensor *t = sd_st_tensor(f, e->name, &err);
        if (!t || t->nbytes != e->nbytes) abort();
        if (t->nbytes && memcmp(t->data, data + e->offset, t->nbytes) != 0) abort();
        sd_tensor *c = sd_st_tensor_f32(f, e->name, &err);
        if (!c) abort();
        sd_tensor_unref(c);
        sd_tensor_unref(t);
    }
    for (size_t i = 0; i < sd_st_metadata_count(f); i++) {
        const char *k, *v;
        sd_st_metadata_at(f, i, &k, &v);
        if (!k || !v || sd_st_metadata(f, k) == NULL) abort();
    }
    sd_st_close(f);
    as_model(data, size);
    return 0;
}
