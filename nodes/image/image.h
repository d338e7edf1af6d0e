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

#endif
