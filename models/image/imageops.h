/* imageops.h - tensor resampling with ComfyUI's comfy.utils.common_upscale
 * semantics (used by LatentUpscale, ImageScale, ImageBatch, ControlNet hint
 * preparation, inpaint masks, ...).
 *
 * Every method reproduces the index and weight arithmetic of the reference so
 * that results match ComfyUI to float rounding:
 *   nearest-exact  PyTorch F.interpolate(mode="nearest-exact"):
 *                  src = min(floor((dst + 0.5) * in/out), in - 1)
 *   bilinear       F.interpolate(mode="bilinear", align_corners=False, no
 *                  antialias): src = max((dst + 0.5) * in/out - 0.5, 0)
 *   bicubic        F.interpolate(mode="bicubic", align_corners=False):
 *                  Keys cubic with A = -0.75, border samples clamped
 *   area           F.interpolate(mode="area") = adaptive_avg_pool2d:
 *                  rows [floor(o*in/out), ceil((o+1)*in/out))
 *   lanczos        ComfyUI goes through Pillow: the image is quantised to
 *                  8 bits (clip(255x).astype(uint8)), resized with Pillow's
 *                  LANCZOS (support 3, widened when shrinking, fixed-point
 *                  8-bit passes: horizontal then vertical), divided by 255.
 *                  Channels are resampled independently (Pillow's alpha
 *                  premultiplication for RGBA is not reproduced).
 *   bislerp        comfy.utils.bislerp: per-pixel spherical interpolation
 *                  of channel vectors along W then H (for latents).
 * Scales are single-precision in/out ratios, as in PyTorch's CPU kernels.
 *
 * Crop "center" first removes a centred band so the aspect ratio matches the
 * target (Python round(), half to even), then resizes.
 *
 * Ownership: results are new F32 tensors owned by the caller. Inputs are
 * never modified. Errors: SD_ERR_INVALID for bad shapes/sizes/dtype.
 */
#ifndef SD_IMAGEOPS_H
#define SD_IMAGEOPS_H

#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

typedef enum sd_upscale_method {
    SD_UPSCALE_NEAREST_EXACT = 0,
    SD_UPSCALE_BILINEAR,
    SD_UPSCALE_AREA,
    SD_UPSCALE_BICUBIC,
    SD_UPSCALE_LANCZOS,
    SD_UPSCALE_BISLERP,
    SD_UPSCALE_COUNT
} sd_upscale_method;

typedef enum sd_crop_mode {
    SD_CROP_DISABLED = 0,
    SD_CROP_CENTER
} sd_crop_mode;

/* ComfyUI names: "nearest-exact", "bilinear", "area", "bicubic", "lanczos",
 * "bislerp". parse returns 0 on success, -1 for an unknown name. */
int sd_upscale_method_parse(const char *name, sd_upscale_method *out);
const char *sd_upscale_method_name(sd_upscale_method m);
/* "disabled" / "center". */
int sd_crop_mode_parse(const char *name, sd_crop_mode *out);

/* common_upscale on an NCHW F32 tensor x [N, C, H, W]: crop, then resize to
 * [N, C, height, width]. width, height >= 1. */
sd_status sd_imageops_upscale(const sd_tensor *x, int64_t width, int64_t height,
                              sd_upscale_method method, sd_crop_mode crop,
                              sd_tensor **out, sd_error *err);

/* Same for channels-last images x [N, H, W, C] (IMAGE tensors); the result is
 * [N, height, width, C]. Bilinear follows PyTorch's kernel choice for the
 * channels-last view ComfyUI passes after image.movedim(-1, 1): the
 * channels-last kernel (weights multiplied first) when C > 3 or when the
 * output has H + W <= 128 (the latter also applies to NCHW inputs), the
 * generic separable one otherwise. */
sd_status sd_imageops_upscale_nhwc(const sd_tensor *x, int64_t width, int64_t height,
                                   sd_upscale_method method, sd_crop_mode crop,
                                   sd_tensor **out, sd_error *err);

/* PyTorch's F.interpolate(x, size=(height, width), mode="bicubic",
 * antialias=True, align_corners=False) on an NCHW F32 tensor x [N, C, H, W]
 * (PIL-style support widened when shrinking, Keys cubic a = -0.5;
 * models/image/resize_aa.c). ComfyUI's clip_preprocess resizes with it. */
sd_status sd_imageops_bicubic_aa(const sd_tensor *x, int64_t width, int64_t height,
                                 sd_tensor **out, sd_error *err);

/* Layout helpers (new tensors; NULL on bad input or no memory). */
sd_tensor *sd_imageops_nhwc_to_nchw(const sd_tensor *x);
sd_tensor *sd_imageops_nchw_to_nhwc(const sd_tensor *x);

#endif
