/* upscale.h - image upscale models (ComfyUI's UPSCALE_MODEL, loaded by spandrel
 * there): the ESRGAN / RRDBNet family and Real-ESRGAN's compact SRVGGNet.
 *
 * The architecture is detected from the state dict, as spandrel does:
 *   ESRGAN, old layout   model.0 (conv_first), model.1.sub.N.RDBr.convc.0
 *                        (RRDB blocks), model.1.sub.NB (conv_body), then per
 *                        x2 stage model.3k (nearest x2 + conv + LeakyReLU),
 *                        model.3n+2 (HR conv + LeakyReLU), model.3n+4 (last)
 *   ESRGAN, new layouts  conv_first, body.N.rdbr.convc, conv_body, conv_upK,
 *                        conv_hr, conv_last (Real-ESRGAN / basicsr), or
 *                        RRDB_trunk.N.RDBr.convc, trunk_conv, upconvK,
 *                        HRconv, conv_last (BSRGAN); a "params_ema." /
 *                        "params." prefix (basicsr .pth files) is skipped
 *   Compact (SRVGGNet)   body.0 (conv), body.1 (PReLU), body.2i / 2i+1, the
 *                        last body conv with out_ch * scale^2 outputs, pixel
 *                        shuffle, plus the nearest-upsampled input
 * num_feat, num_block, the growth channels, the number of x2 stages and the
 * channels come from tensor shapes. An ESRGAN whose first conv takes 4x or
 * 16x the output channels is a pixel-unshuffle model (Real-ESRGAN x2 / x1):
 * the input is padded to a multiple of 4 (reflect, then replicate) and
 * unshuffled by 2 or 4, the result cropped back. Anything else (ESRGAN+
 * conv1x1 blocks, SwinIR, DAT, ...) is refused at load with the file and
 * what was found named.
 *
 * Numerics follow spandrel's modules: LeakyReLU 0.2 in RRDBNet, RDB/RRDB
 * residuals x * 0.2 + input, each forward's result clamped to [0, 1]
 * (spandrel's ImageModelDescriptor.__call__). Weights are kept F32.
 *
 * Ownership: sd_upscale owns its backend tensors; the sd_st_file may be
 * closed after sd_upscale_load. Host tensors passed in are only read;
 * results are new tensors the caller unrefs. The backend must outlive the
 * model. Not thread-safe per model (the backend's sticky error).
 */
#ifndef SD_UPSCALE_H
#define SD_UPSCALE_H

#include "formats/safetensors.h"
#include "kernels/backend.h"

typedef struct sd_upscale sd_upscale;

typedef enum sd_upscale_arch { SD_UPSCALE_ESRGAN = 0, SD_UPSCALE_COMPACT } sd_upscale_arch;

typedef struct sd_upscale_config {
    sd_upscale_arch arch;
    const char *layout; /* "ESRGAN (old keys)", "Real-ESRGAN", "BSRGAN", "Compact" */
    int scale;          /* output size = input size * scale */
    int in_ch, out_ch;  /* image channels (in_ch before any unshuffle) */
    int num_feat;
    int num_block;      /* ESRGAN: RRDB blocks; Compact: body convs (num_conv) */
    int num_grow_ch;    /* ESRGAN dense-block growth channels */
    int n_up;           /* ESRGAN: nearest x2 + conv stages */
    int shuffle;        /* ESRGAN: pixel-unshuffle factor, 1 = none */
    int64_t n_params;
} sd_upscale_config;

/* Detect and load from f (keys at the top level, or under "params_ema." /
 * "params."). SD_ERR_UNSUPPORTED for an unknown or unsupported architecture,
 * SD_ERR_FORMAT / SD_ERR_NOT_FOUND for a wrongly shaped or missing tensor;
 * errors name the file and the key. */
sd_status sd_upscale_load(sd_backend *be, sd_st_file *f, sd_upscale **out, sd_error *err);
/* Open `path` (.safetensors or a torch .pth/.pt/.ckpt, chosen by content)
 * and load it. */
sd_status sd_upscale_load_file(sd_backend *be, const char *path, sd_upscale **out,
                               sd_error *err);
/* Open `path` and detect the architecture from key names only (no weight is
 * read, nothing allocated on a backend): SD_OK when sd_upscale_load_file
 * would recognise it, else the refusal it would give. For validation. A
 * recognised file may still fail to load on a wrongly shaped tensor. */
sd_status sd_upscale_probe_file(const char *path, sd_error *err);
void sd_upscale_free(sd_upscale *m); /* NULL-safe */
const sd_upscale_config *sd_upscale_get_config(const sd_upscale *m);
/* Bytes of the model's weights (F32 on the backend). */
uint64_t sd_upscale_weight_bytes(const sd_upscale *m);

/* One forward as spandrel's descriptor runs it: x [1, in_ch, h, w] F32 in
 * [0, 1] -> [1, out_ch, h*scale, w*scale], clamped to [0, 1]. Out-of-memory
 * on the backend is SD_ERR_NOMEM (sd_upscale_image backs off on it). */
sd_status sd_upscale_forward(sd_upscale *m, const sd_tensor *x, sd_tensor **y, sd_error *err);

/* Estimated peak bytes of backend activations for one forward on an h x w
 * tile (F32; the widest stage: an RRDB's growing concatenation at the input
 * size, or the feature maps of the last x2 stage and the HR convs at the
 * output size). Weights are not included (sd_upscale_weight_bytes). An
 * estimate from the layer shapes, not a measurement; UINT64_MAX when it
 * overflows. */
uint64_t sd_upscale_forward_bytes(const sd_upscale *m, int64_t h, int64_t w);

/* Called after each tile; returning non-SD_OK (with err filled) stops. */
typedef sd_status (*sd_upscale_progress_fn)(void *user, int64_t done, int64_t total,
                                            sd_error *err);

/* ComfyUI's ImageUpscaleWithModel on an IMAGE [N, H, W, C] (C >= in_ch;
 * the first in_ch channels are used): comfy.utils.tiled_scale with square
 * tiles of `tile` and `overlap` pixels (an image that fits one tile is one
 * forward; otherwise tiles at steps of tile - overlap, each output blended
 * with a linear feather over overlap * scale pixels at its edges), then
 * clamped to [0, 1], as IMAGE [N, H*scale, W*scale, out_ch]. When a forward
 * runs out of memory the whole image is redone with the tile halved, as
 * ComfyUI does, until the tile would drop below min_tile: then the
 * out-of-memory error is returned. *tile_used (may be NULL) gets the tile
 * that succeeded. */
sd_status sd_upscale_image(sd_upscale *m, const sd_tensor *image, int tile, int overlap,
                           int min_tile, sd_upscale_progress_fn progress, void *user,
                           sd_tensor **out, int *tile_used, sd_error *err);
/* comfy.utils.get_tiled_scale_steps: tiles per image for a W x H image. */
int64_t sd_upscale_tile_count(int64_t width, int64_t height, int tile, int overlap);

#endif
