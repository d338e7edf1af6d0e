/* vae_nodes.c - VAEDecode, VAEEncode, VAEDecodeTiled, VAEEncodeTiled,
 * VAEEncodeForInpaint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vae_nodes.h"
#include "core/membudget.h"
#include "models/image/imageops.h"
#include "models/vae/vae.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static sd_status get_vae(sd_value *const *in, int i, sd_vae **vae, sd_error *err) {
    sd_vae_ref *r;
    sd_status rc = sd_nodes_in_vae(in, i, "vae", &r, err);
    if (!rc && (rc = sd_checkpoint_vae(r->ckpt, vae, err))) sd_error_at(err, NULL, NULL, "vae");
    return rc;
}

static sd_status image_input(sd_value *const *in, int i, const char *name, sd_tensor **t,
                             sd_error *err) {
    sd_status rc = sd_nodes_in_tensor(in, i, name, 4, t, err);
    if (!rc && (*t)->shape[3] < 3) {
        sd_error_set(err, SD_ERR_INVALID, "input '%s' must be an IMAGE [B, H, W, 3]", name);
        sd_error_at(err, NULL, NULL, name);
        return SD_ERR_INVALID;
    }
    if (!rc && ((*t)->shape[1] < 8 || (*t)->shape[2] < 8)) {
        sd_error_set(err, SD_ERR_INVALID, "input '%s': image smaller than 8x8", name);
        sd_error_at(err, NULL, NULL, name);
        return SD_ERR_INVALID;
    }
    return rc;
}

/* {"samples": t} (takes t), optionally with a noise_mask (takes m). */
static sd_status latent_value(sd_tensor *t, sd_tensor *m, sd_value **out, sd_error *err) {
    sd_value *d = sd_value_dict();
    sd_value *tv = t ? sd_value_tensor(t) : NULL, *mv = m ? sd_value_tensor(m) : NULL;
    sd_tensor_unref(t);
    sd_tensor_unref(m);
    int bad = !d || !tv || (m && !mv);
    if (!bad) {
        bad = sd_value_dict_set(d, "samples", tv) != 0;
        tv = NULL;
        if (!bad && mv) bad = sd_value_dict_set(d, "noise_mask", mv) != 0;
        mv = NULL;
    }
    sd_value_unref(tv);
    sd_value_unref(mv);
    if (bad) {
        sd_value_unref(d);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}

static sd_status image_value(sd_tensor *t, sd_value **out, sd_error *err) {
    *out = sd_value_tensor(t);
    sd_tensor_unref(t);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- VAEDecode / VAEDecodeTiled ---------------------------------------------------------- */

/* Activation bytes a whole-image decode needs: about four live tensors of
 * the widest level (the channels entering a level are upsampled to its
 * resolution before its first block narrows them). Measured on the tiny
 * test VAE at 1024x1024: 0.86 GB peak RSS against 1.07 GB estimated; the
 * SD/SDXL VAE gives ~4.3 GB at 1024x1024. */
static double decode_bytes(const sd_vae_config *c, const sd_tensor *lat) {
    double pixels = 64.0 * (double)lat->shape[2] * (double)lat->shape[3], widest = 0;
    for (int i = 0; i < c->n_levels; i++) {
        int up = i + 1 < c->n_levels ? i + 1 : i;
        int ch = c->block_out[i] > c->block_out[up] ? c->block_out[i] : c->block_out[up];
        double w = (double)ch * pixels / (double)(1u << (2 * i));
        if (w > widest) widest = w;
    }
    return 4.0 * widest * sizeof(float) * (double)lat->shape[0];
}

/* Memory the decode may use: SDFLOW_VAE_DECODE_LIMIT (bytes) when set, else
 * the kernel's MemAvailable; < 0 when unknown. */
static double decode_budget(void) {
    const char *env = getenv("SDFLOW_VAE_DECODE_LIMIT");
    if (env && *env) return strtod(env, NULL);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}

/* ComfyUI's VAE.decode fallback tiles: 64x64 latents, overlap 16. */
#define FALLBACK_TILE 512
#define FALLBACK_OVERLAP 128

/* What a tiled decode of lat cannot avoid: the image [B, 8h, 8w, 3] and
 * the buffers its passes are blended and averaged in (about four image
 * sizes in all), plus one tile's activations. Checked against the memory
 * budget (core/membudget.h) before anything is decoded. */
static sd_status check_tiled_decode(sd_node_ctx *ctx, const sd_vae_config *c, const sd_tensor *lat,
                                    int tile, const char *input, sd_error *err) {
    int64_t shape[4] = {lat->shape[0], lat->shape[2] * 8, lat->shape[3] * 8, 3};
    uint64_t img = sd_mem_tensor_bytes(4, shape, sizeof(float));
    sd_tensor t = *lat; /* a latent of one tile, for decode_bytes */
    t.shape[2] = t.shape[2] < tile / 8 ? t.shape[2] : tile / 8;
    t.shape[3] = t.shape[3] < tile / 8 ? t.shape[3] : tile / 8;
    double act = decode_bytes(c, &t);
    uint64_t need = img == UINT64_MAX || img > UINT64_MAX / 8 ? UINT64_MAX : 4 * img + (uint64_t)act;
    char what[192];
    snprintf(what, sizeof what, "decoding the latent [%lld, %lld, %lld, %lld] (the image [%lld, %lld, "
             "%lld, 3] float32, its blending buffers and one %d px tile)", (long long)lat->shape[0],
             (long long)lat->shape[1], (long long)lat->shape[2], (long long)lat->shape[3],
             (long long)shape[0], (long long)shape[1], (long long)shape[2], tile);
    return sd_mem_check(ctx, input, need, what, err);
}

static sd_status decode_common(sd_node_ctx *ctx, sd_value *const *in, int tiled, sd_value **out,
                               sd_error *err) {
    sd_tensor *lat, *img = NULL;
    sd_vae *vae;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &lat, err);
    if (!rc) rc = get_vae(in, 1, &vae, err);
    if (rc) return rc;
    if (lat->ndim != 4 || lat->shape[1] != sd_vae_get_config(vae)->embed_dim) {
        sd_error_set(err, SD_ERR_INVALID, "latent must be [B, %d, h, w] for this VAE",
                     sd_vae_get_config(vae)->embed_dim);
        sd_error_at(err, NULL, NULL, "samples");
        return SD_ERR_INVALID;
    }
    if (tiled) {
        if ((rc = check_tiled_decode(ctx, sd_vae_get_config(vae), lat, (int)sd_value_as_int(in[2]),
                                     "samples", err)))
            return rc;
        rc = sd_vae_decode_tiled(vae, lat, (int)sd_value_as_int(in[2]), (int)sd_value_as_int(in[3]),
                                 &img, err);
    } else {
        /* As ComfyUI's VAEDecode: decode whole when it fits, else in tiles
         * (ComfyUI estimates up front and also retries tiled after an OOM). */
        double need = decode_bytes(sd_vae_get_config(vae), lat), have = decode_budget();
        uint64_t limit = ctx && ctx->env ? ctx->env->max_memory : 0;
        if (limit && (have < 0 || (double)limit < have)) have = (double)limit; /* --max-memory */
        int fits = have < 0 || need <= have;
        if (!fits && (rc = check_tiled_decode(ctx, sd_vae_get_config(vae), lat, FALLBACK_TILE,
                                              "samples", err)))
            return rc;
        if (fits) rc = sd_vae_decode(vae, lat, &img, err);
        if (!fits || rc == SD_ERR_NOMEM) {
            sd_node_log(ctx, SD_LOG_WARN,
                        "VAEDecode: %s (the whole %lldx%lld image needs about %.2f GB, %.2f GB "
                        "available): decoding in %d px tiles, overlap %d",
                        fits ? "out of memory" : "not enough memory",
                        (long long)lat->shape[3] * 8, (long long)lat->shape[2] * 8, need / 1e9,
                        have / 1e9, FALLBACK_TILE, FALLBACK_OVERLAP);
            sd_error_clear(err);
            rc = sd_vae_decode_tiled(vae, lat, FALLBACK_TILE, FALLBACK_OVERLAP, &img, err);
        }
    }
    if (rc) return rc;
    return image_value(img, out, err);
}

/* The node's ui result {"vae_f32_redo": [n]}: the report (sdflow run
 * --report) and the server's "executed" message carry it. */
static void note_redos(sd_node_ctx *ctx, unsigned n) {
    sd_value *d = sd_value_dict(), *l = sd_value_list(), *c = sd_value_int((int64_t)n);
    int bad = !d || !l || !c || sd_value_list_append(l, c);
    if (!bad) c = NULL;
    if (!bad && !(bad = sd_value_dict_set(d, "vae_f32_redo", l))) l = NULL;
    sd_value_unref(c);
    sd_value_unref(l);
    if (bad || !ctx) { sd_value_unref(d); return; } /* only a note: the warning was logged */
    sd_value_unref(ctx->ui);
    ctx->ui = d;
}

/* The decode in the VAE precision (--vae-precision), and the warning (and
 * ui note) when it had to be redone in f32 for NaN/Inf. */
static sd_status decode_node(sd_node_ctx *ctx, sd_value *const *in, int tiled, sd_value **out,
                             sd_error *err) {
    sd_precision prev;
    sd_status rc = sd_nodes_precision_begin(ctx, SD_NODE_VAE, &prev, err);
    if (rc) return rc;
    sd_vae *vae = NULL;
    unsigned before = get_vae(in, 1, &vae, err) == SD_OK ? sd_vae_f32_redos(vae) : 0;
    sd_error_clear(err); /* decode_common reports a bad VAE input itself */
    rc = decode_common(ctx, in, tiled, out, err);
    sd_precision used = sd_backend_precision(ctx && ctx->env ? ctx->env->backend : NULL);
    sd_nodes_precision_end(ctx, prev);
    unsigned redos = vae ? sd_vae_f32_redos(vae) - before : 0;
    if (!rc && redos) {
        sd_node_log(ctx, SD_LOG_WARN,
                    "%s: the %s decode gave NaN/Inf values; decoded again in f32 (%u time%s)",
                    ctx && ctx->class_type ? ctx->class_type : "VAEDecode", sd_precision_name(used),
                    redos, redos == 1 ? "" : "s");
        note_redos(ctx, redos);
    }
    return rc;
}

static sd_status vae_decode_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    return decode_node(ctx, in, 0, &out[0], err);
}
static sd_status vae_decode_tiled_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                      sd_error *err) {
    return decode_node(ctx, in, 1, &out[0], err);
}

static const sd_input_def vae_decode_inputs[] = {
    {.name = "samples", .type = "LATENT", .tooltip = "The latent to be decoded."}, {.name = "vae", .type = "VAE",
     .tooltip = "The VAE model used for decoding the latent."}, {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};

const sd_node_def sd_node_VAEDecode = {
    .version = 1,
    .class_type = "VAEDecode",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("The decoded image."),
    .description = "Decodes latent images back into pixel space images.",
    .display_name = "VAE Decode",
    .category = "latent",
    .help = "Decodes latents (VAE space) into images; in 512 px tiles (a warning says "
            "so) when the whole image would not fit in the available memory "
            "(SDFLOW_VAE_DECODE_LIMIT bytes overrides MemAvailable).",
    .inputs = vae_decode_inputs,
    .outputs = image_out,
    .flags = SD_NODE_VAE,
    .run = vae_decode_run,
};

static const sd_input_def vae_decode_tiled_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "vae", .type = "VAE"},
    {.name = "tile_size", .type = SD_T_INT, .def = 512, .min = 64, .max = 4096, .step = 32, .has_range = 1},
    {.name = "overlap", .type = SD_T_INT, .def = 64, .min = 0, .max = 4096, .step = 32, .has_range = 1},
    {.name = "temporal_size", .type = SD_T_INT, .def = 64, .min = 8, .max = 4096, .step = 4, .has_range = 1,
     .tooltip = "Only used for video VAEs: Amount of frames to decode at a time."},
    {.name = "temporal_overlap", .type = SD_T_INT, .def = 8, .min = 4, .max = 4096, .step = 4, .has_range = 1,
     .tooltip = "Only used for video VAEs: Amount of frames to overlap."},
    {0}};

const sd_node_def sd_node_VAEDecodeTiled = {
    .version = 1,
    .class_type = "VAEDecodeTiled",
    .python_module = "nodes",
    .display_name = "VAE Decode (Tiled)",
    .category = "_for_testing",
    .help = "Decodes in overlapping tiles (pixels; overlap at most tile_size/4) to bound "
            "memory. temporal_* are for video VAEs and unused here.",
    .inputs = vae_decode_tiled_inputs,
    .outputs = image_out,
    .flags = SD_NODE_VAE,
    .run = vae_decode_tiled_run,
};

/* ---- VAEEncode / VAEEncodeTiled -------------------------------------------------------------- */

/* Activation bytes of encoding an image [B, H, W, C]: about four live
 * tensors of the widest level, as decode_bytes (the encoder runs the levels
 * the other way, narrowest channels at full resolution). */
static double encode_bytes(const sd_vae_config *c, int64_t b, int64_t h, int64_t w) {
    double pixels = (double)h * (double)w, widest = 0;
    for (int i = 0; i < c->n_levels; i++) {
        double x = (double)c->block_out[i] * pixels / (double)(1u << (2 * i));
        if (x > widest) widest = x;
    }
    return 4.0 * widest * sizeof(float) * (double)b;
}

/* The encode's estimate (whole image, or one tile of `tile` px plus the
 * latent and its blending buffers) against the memory budget. */
static sd_status check_encode(sd_node_ctx *ctx, const sd_vae_config *c, const sd_tensor *img, int tile,
                              sd_error *err) {
    int64_t b = img->shape[0], h = img->shape[1], w = img->shape[2];
    double need;
    if (tile > 0) {
        int64_t shape[4] = {b, c->embed_dim, h / 8 + 1, w / 8 + 1};
        uint64_t lat = sd_mem_tensor_bytes(4, shape, sizeof(float));
        need = encode_bytes(c, b, h < tile ? h : tile, w < tile ? w : tile) + 4.0 * (double)lat;
    } else {
        need = encode_bytes(c, b, h, w);
    }
    char what[192];
    snprintf(what, sizeof what, "encoding the image [%lld, %lld, %lld, %lld]%s", (long long)b,
             (long long)h, (long long)w, (long long)img->shape[3],
             tile > 0 ? " in tiles" : " whole (VAEEncodeTiled needs less)");
    return sd_mem_check(ctx, "pixels", need >= 1.8e19 ? UINT64_MAX : (uint64_t)need, what, err);
}

static sd_status encode_common(sd_node_ctx *ctx, sd_value *const *in, int tiled, sd_value **out,
                               sd_error *err) {
    sd_tensor *img, *lat = NULL;
    sd_vae *vae;
    sd_status rc = image_input(in, 0, "pixels", &img, err);
    if (!rc) rc = get_vae(in, 1, &vae, err);
    if (rc) return rc;
    if (img->ndim == 4 &&
        (rc = check_encode(ctx, sd_vae_get_config(vae), img, tiled ? (int)sd_value_as_int(in[2]) : 0, err)))
        return rc;
    if (tiled)
        rc = sd_vae_encode_tiled(vae, img, (int)sd_value_as_int(in[2]), (int)sd_value_as_int(in[3]),
                                 &lat, err);
    else
        rc = sd_vae_encode(vae, img, &lat, err);
    if (rc) return rc;
    return latent_value(lat, NULL, out, err);
}

/* The encode in the VAE precision (--vae-precision). */
static sd_status encode_node(sd_node_ctx *ctx, sd_value *const *in, int tiled, sd_value **out,
                             sd_error *err) {
    sd_precision prev;
    sd_status rc = sd_nodes_precision_begin(ctx, SD_NODE_VAE, &prev, err);
    if (rc) return rc;
    rc = encode_common(ctx, in, tiled, out, err);
    sd_nodes_precision_end(ctx, prev);
    return rc;
}

static sd_status vae_encode_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    return encode_node(ctx, in, 0, &out[0], err);
}
static sd_status vae_encode_tiled_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                      sd_error *err) {
    return encode_node(ctx, in, 1, &out[0], err);
}

static const sd_input_def vae_encode_inputs[] = {
    {.name = "pixels", .type = "IMAGE"}, {.name = "vae", .type = "VAE"}, {0}};

const sd_node_def sd_node_VAEEncode = {
    .version = 1,
    .class_type = "VAEEncode",
    .python_module = "nodes",
    .display_name = "VAE Encode",
    .category = "latent",
    .help = "Encodes images into latents (posterior mean, VAE space); sizes are "
            "centre-cropped to multiples of 8.",
    .inputs = vae_encode_inputs,
    .outputs = latent_out,
    .flags = SD_NODE_VAE,
    .run = vae_encode_run,
};

static const sd_input_def vae_encode_tiled_inputs[] = {
    {.name = "pixels", .type = "IMAGE"},
    {.name = "vae", .type = "VAE"},
    {.name = "tile_size", .type = SD_T_INT, .def = 512, .min = 64, .max = 4096, .step = 64, .has_range = 1},
    {.name = "overlap", .type = SD_T_INT, .def = 64, .min = 0, .max = 4096, .step = 32, .has_range = 1},
    {.name = "temporal_size", .type = SD_T_INT, .def = 64, .min = 8, .max = 4096, .step = 4, .has_range = 1,
     .tooltip = "Only used for video VAEs: Amount of frames to encode at a time."},
    {.name = "temporal_overlap", .type = SD_T_INT, .def = 8, .min = 4, .max = 4096, .step = 4, .has_range = 1,
     .tooltip = "Only used for video VAEs: Amount of frames to overlap."},
    {0}};

const sd_node_def sd_node_VAEEncodeTiled = {
    .version = 1,
    .class_type = "VAEEncodeTiled",
    .python_module = "nodes",
    .display_name = "VAE Encode (Tiled)",
    .category = "_for_testing",
    .help = "Encodes in overlapping tiles (pixels) to bound memory. temporal_* are for "
            "video VAEs and unused here.",
    .inputs = vae_encode_tiled_inputs,
    .outputs = latent_out,
    .flags = SD_NODE_VAE,
    .run = vae_encode_tiled_run,
};

/* ---- VAEEncodeForInpaint ---------------------------------------------------------------------- */

sd_status sd_nodes_inpaint_prepare(const sd_tensor *pixels, const sd_tensor *mask, int grow,
                                   sd_tensor **pixels_out, sd_tensor **mask_out, sd_error *err) {
    *pixels_out = *mask_out = NULL;
    if (pixels->dtype != SD_F32 || pixels->ndim != 4 || pixels->shape[3] < 3)
        return sd_error_set(err, SD_ERR_INVALID, "pixels must be an IMAGE [B, H, W, 3]");
    if (mask->dtype != SD_F32 || mask->ndim < 2)
        return sd_error_set(err, SD_ERR_INVALID, "mask must be a MASK [B, H, W]");
    if (grow < 0) return sd_error_set(err, SD_ERR_INVALID, "grow_mask_by must be >= 0");
    const int64_t B = pixels->shape[0], H = pixels->shape[1], W = pixels->shape[2],
                  C = pixels->shape[3];
    const int64_t H8 = H / 8 * 8, W8 = W / 8 * 8;
    if (H8 < 8 || W8 < 8) return sd_error_set(err, SD_ERR_INVALID, "image smaller than 8x8");
    const int64_t oy = (H % 8) / 2, ox = (W % 8) / 2;
    const int64_t mh = mask->shape[mask->ndim - 2], mw = mask->shape[mask->ndim - 1];
    const int64_t MB = sd_tensor_numel(mask) / (mh * mw);

    /* mask.reshape(-1, 1, h, w) resized (bilinear) to the image size */
    sd_tensor *m4 = sd_tensor_new4(SD_F32, 4, MB, 1, mh, mw), *mr = NULL;
    if (!m4) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy(m4->data, mask->data, m4->nbytes);
    sd_status rc = sd_imageops_upscale(m4, W, H, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &mr, err);
    sd_tensor_unref(m4);
    if (rc) return rc;

    sd_tensor *px = sd_tensor_new4(SD_F32, 4, B, H8, W8, 3);
    sd_tensor *mround = sd_tensor_new4(SD_F32, 4, MB, 1, H8, W8);
    sd_tensor *mo = sd_tensor_new4(SD_F32, 4, MB, 1, H8, W8);
    if (!px || !mround || !mo) {
        sd_tensor_unref(mr);
        sd_tensor_unref(px);
        sd_tensor_unref(mround);
        sd_tensor_unref(mo);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const float *mv = mr->data;
    float *rv = mround->data;
    for (int64_t b = 0; b < MB; b++) /* crop, round (half to even as torch.round) */
        for (int64_t y = 0; y < H8; y++)
            for (int64_t x = 0; x < W8; x++)
                rv[(b * H8 + y) * W8 + x] = rintf(mv[(b * H + y + oy) * W + x + ox]);
    sd_tensor_unref(mr);

    /* masked pixels to grey: (p - 0.5) * (1 - m) + 0.5 */
    const float *pv = pixels->data;
    float *ov = px->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H8; y++)
            for (int64_t x = 0; x < W8; x++) {
                float keep = 1.0f - rv[((b % MB) * H8 + y) * W8 + x];
                const float *src = pv + ((b * H + y + oy) * W + x + ox) * C;
                float *dst = ov + ((b * H8 + y) * W8 + x) * 3;
                for (int c = 0; c < 3; c++) {
                    float v = src[c] - 0.5f;
                    v = v * keep;
                    dst[c] = v + 0.5f;
                }
            }

    /* grow: clamp(conv2d(m, ones(k, k), padding=ceil((k-1)/2)), 0, 1)[:H8, :W8], round */
    float *gv = mo->data;
    const int64_t pad = grow > 0 ? (grow) / 2 : 0; /* ceil((k - 1) / 2) */
    for (int64_t b = 0; b < MB; b++)
        for (int64_t y = 0; y < H8; y++)
            for (int64_t x = 0; x < W8; x++) {
                float s;
                if (grow == 0) {
                    s = rv[(b * H8 + y) * W8 + x];
                } else {
                    s = 0.0f;
                    for (int64_t dy = 0; dy < grow; dy++) {
                        int64_t yy = y - pad + dy;
                        if (yy < 0 || yy >= H8) continue;
                        for (int64_t dx = 0; dx < grow; dx++) {
                            int64_t xx = x - pad + dx;
                            if (xx >= 0 && xx < W8) s += rv[(b * H8 + yy) * W8 + xx];
                        }
                    }
                    s = s < 0.0f ? 0.0f : s > 1.0f ? 1.0f : s;
                }
                gv[(b * H8 + y) * W8 + x] = rintf(s);
            }
    sd_tensor_unref(mround);
    *pixels_out = px;
    *mask_out = mo;
    return SD_OK;
}

static sd_status vae_encode_inpaint_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                        sd_error *err) {
    sd_tensor *img, *mask, *px = NULL, *m = NULL, *lat = NULL;
    sd_vae *vae;
    sd_status rc = image_input(in, 0, "pixels", &img, err);
    if (!rc) rc = get_vae(in, 1, &vae, err);
    if (!rc) rc = sd_nodes_in_tensor(in, 2, "mask", 0, &mask, err);
    if (rc) return rc;
    if ((rc = sd_nodes_inpaint_prepare(img, mask, (int)sd_value_as_int(in[3]), &px, &m, err))) {
        sd_error_at(err, NULL, NULL, "mask");
        return rc;
    }
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_VAE, &prev, err))) {
        rc = sd_vae_encode(vae, px, &lat, err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_tensor_unref(px);
    if (rc) {
        sd_tensor_unref(m);
        return rc;
    }
    return latent_value(lat, m, &out[0], err);
}

static const sd_input_def vae_encode_inpaint_inputs[] = {
    {.name = "pixels", .type = "IMAGE"},
    {.name = "vae", .type = "VAE"},
    {.name = "mask", .type = "MASK"},
    {.name = "grow_mask_by", .type = SD_T_INT, .def = 6, .min = 0, .max = 64, .step = 1, .has_range = 1},
    {0}};

const sd_node_def sd_node_VAEEncodeForInpaint = {
    .version = 1,
    .class_type = "VAEEncodeForInpaint",
    .python_module = "nodes",
    .display_name = "VAE Encode (for Inpainting)",
    .category = "latent/inpaint",
    .help = "Encodes the image with the masked region set to grey and attaches the mask "
            "(grown by grow_mask_by pixels) as the latent's noise_mask.",
    .inputs = vae_encode_inpaint_inputs,
    .outputs = latent_out,
    .flags = SD_NODE_VAE,
    .run = vae_encode_inpaint_run,
};

extern const sd_node_def sd_node_InpaintModelConditioning; /* inpaint_cond.c */
extern const sd_node_def sd_node_InstructPixToPixConditioning; /* ip2p_cond.c */

const sd_node_def *const sd_nodes_vae[] = {&sd_node_VAEDecode,     &sd_node_VAEEncode,
                                           &sd_node_VAEDecodeTiled, &sd_node_VAEEncodeTiled,
                                           &sd_node_VAEEncodeForInpaint, &sd_node_InpaintModelConditioning,
                                           &sd_node_InstructPixToPixConditioning, NULL};
