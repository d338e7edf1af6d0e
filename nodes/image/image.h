/* image.h - the image node family (LoadImage, LoadImageMask, SaveImage,
 * PreviewImage, ImageScale, ImageScaleBy, ImageInvert, ImageBatch,
 * EmptyImage, ImagePadForOutpaint) and
 * helpers shared with the latent family.
 *
 * Tensors: IMAGE = F32 [B, H, W, C] in [0, 1] (channels last), MASK = F32
 * [B, H, W], LATENT = dict {"samples": F32 [B, C, H, W], "noise_mask"?,
 * "batch_index"?}.
 */
#ifndef SD_NODES_IMAGE_H
#define SD_NODES_IMAGE_H

#include "core/node.h"
#include "models/image/imageops.h"

/* NULL-terminated table registered by nodes/nodes.c. */
extern const sd_node_def *const sd_nodes_image[];

/* ComfyUI's MAX_RESOLUTION. */
#define SD_MAX_RESOLUTION 16384

/* common_upscale over a batch, one item at a time so that progress is
 * reported and an interrupt stops between items. x is NCHW (nhwc = 0) or
 * NHWC (nhwc = 1); *out has the same layout. The result's size is checked
 * against the memory budget first (core/membudget.h), an error naming
 * size_input (the input that set width/height) when it does not fit. */
sd_status sd_nodes_upscale_batched(sd_node_ctx *ctx, const sd_tensor *x, int nhwc,
                                   int64_t width, int64_t height, sd_upscale_method method,
                                   sd_crop_mode crop, const char *size_input, sd_tensor **out,
                                   sd_error *err);

/* Python round() (half to even) of a double, as ComfyUI uses for sizes. */
int64_t sd_nodes_py_round(double v);

/* Checked accessors for a node's inputs: a required tensor input (F32, with
 * `ndim` dims when ndim > 0) or the "samples" tensor of a LATENT. They fill
 * err naming the input when the value is not what the node needs. */
sd_status sd_nodes_in_tensor(sd_value *const *in, int i, const char *name, int ndim,
                             sd_tensor **out, sd_error *err);
sd_status sd_nodes_in_latent(sd_value *const *in, int i, const char *name,
                             sd_tensor **samples, sd_error *err);
/* A MASK input as ComfyUI's mask.reshape((-1, H, W)): any F32 tensor of 2 to
 * 4 dims, as a new [B, H, W] reference sharing its storage. Errors name the
 * input. */
sd_status sd_nodes_in_mask(sd_value *const *in, int i, const char *name, sd_tensor **out,
                           sd_error *err);
/* The same for an optional input: *out = NULL when it is absent. */
sd_status sd_nodes_in_mask_opt(sd_value *const *in, int i, const char *name, sd_tensor **out,
                               sd_error *err);

/* *out = a tensor value over t, taking over the caller's reference to t
 * (released on failure). */
sd_status sd_nodes_set_tensor(sd_value **out, sd_tensor *t, sd_error *err);
/* An error about input `name` (SD_ERR_INVALID, printf-style message). */
sd_status sd_nodes_bad_input(sd_error *err, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The big allocation check (core/membudget.h) for an F32 tensor of `shape`,
 * described as `what` ("the image", "the mask") with its shape. */
sd_status sd_nodes_mem_check(sd_node_ctx *ctx, const char *input, const char *what, int ndim,
                             const int64_t *shape, sd_error *err);

/* Previews images [B, H, W, C] as PreviewImage does: PNGs named
 * ComfyUI_temp_<5 random letters>_<counter>_.png in the temp directory,
 * compress level 1, recorded in ctx->ui under "images" (type "temp"). */
sd_status sd_nodes_preview_images(sd_node_ctx *ctx, const sd_tensor *images, sd_error *err);

#endif
