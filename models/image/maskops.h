/* maskops.h - the mask and compositing arithmetic of ComfyUI's
 * comfy_extras/nodes_mask.py and nodes_compositing.py, on F32 tensors.
 *
 * Every function reproduces the reference's float32 operations in the same
 * order (PyTorch rounds each element-wise operation to float32; a Python
 * float operand is first rounded to float32), so that results agree bit for
 * bit; where resampling is involved it goes through imageops.h with the same
 * method ComfyUI calls.
 *
 * Layouts: a batch of masks is [B, H, W]; images are [B, H, W, C]; "planes"
 * are [B, C, H, W] (latents, or images after movedim(-1, 1)).
 *
 * Ownership: results are new tensors owned by the caller; inputs are never
 * modified. Errors: SD_ERR_INVALID (message only; the node adds its input's
 * name) for shapes the reference cannot combine either.
 */
#ifndef SD_MASKOPS_H
#define SD_MASKOPS_H

#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

/* GrowMask on one mask plane src [h, w] into dst [h, w] (may not alias):
 * |expand| applications of scipy.ndimage.grey_dilation (expand > 0) or
 * grey_erosion (expand < 0) with a 3x3 footprint, the cross
 * [[0,1,0],[1,1,1],[0,1,0]] when tapered, the full square otherwise. scipy's
 * default "reflect" border repeats the edge pixel, which never changes a max
 * or a min, so each step is the max (min) over the in-bounds footprint; the
 * square's repeated steps are computed at once as a (2n+1)^2 box, and steps
 * past the point where nothing can change any more are skipped. Both give
 * exactly the values of the step-by-step reference. Returns 0, or -1 when
 * out of memory. */
int sd_mask_grow_plane(const float *src, int64_t h, int64_t w, int64_t expand, int tapered, float *dst);

/* FeatherMask on masks m [B, H, W] (in place on a copy the caller made):
 * left/right/top/bottom are first clipped to the size; column x < left is
 * multiplied by (x + 1) / left, then for k < right the column m[..., -k]
 * (Python indexing: k = 0 is column 0) by (k + 1) / right, then rows alike
 * (top, then bottom with m[:, -k, :]). Each factor is a double rounded to
 * float32, each product rounded: ComfyUI's in-place multiplies in order. */
void sd_mask_feather(sd_tensor *m, int64_t left, int64_t top, int64_t right, int64_t bottom);

typedef enum sd_mask_op {
    SD_MASK_MULTIPLY = 0,
    SD_MASK_ADD,
    SD_MASK_SUBTRACT,
    SD_MASK_AND,
    SD_MASK_OR,
    SD_MASK_XOR
} sd_mask_op;

/* "multiply", "add", "subtract", "and", "or", "xor"; 0 or -1 when unknown. */
int sd_mask_op_parse(const char *name, sd_mask_op *out);

/* MaskComposite: out = dst [B, H, W] with the region [y, y + h) x [x, x + w)
 * replaced by op(dst region, src region) (and/or/xor on round() != 0, giving
 * 0 or 1), then every value clamped to [0, 1]. The region is what Python's
 * slices of ComfyUI give; src's batch, rows and columns broadcast as PyTorch
 * does (a size 1 spreads, otherwise sizes must match): SD_ERR_INVALID where
 * PyTorch would refuse. */
sd_status sd_mask_composite(const sd_tensor *dst, const sd_tensor *src, int64_t x, int64_t y,
                            sd_mask_op op, sd_tensor **out, sd_error *err);

/* comfy_extras/nodes_mask.py composite() on planes: dst [B, C, H, W] gets
 * src [Bs, C, h, w] pasted at (x / multiplier, y / multiplier) (Python floor
 * division, x and y first clamped to [-w*m, W*m] / [-h*m, H*m]), blended by
 * mask (NULL = ones; else any [.., mh, mw] tensor, read as
 * [-1, 1, mh, mw], bilinear-resized to (h, w) and repeated to the batch):
 *   out = mask * src + (1 - mask) * dst    (each product and sum rounded)
 * resize_source first resizes src bilinearly to (H, W); src is then repeated
 * (or cut) to B items (comfy.utils.repeat_to_batch_size). src_nhwc says src
 * is laid out [Bs, h, w, C] (an IMAGE after movedim: PyTorch then resizes it
 * as a channels-last tensor, see imageops.h). SD_ERR_INVALID when C differs. */
sd_status sd_composite(const sd_tensor *dst, const sd_tensor *src, int src_nhwc, int64_t x, int64_t y,
                       const sd_tensor *mask, int64_t multiplier, int resize_source, sd_tensor **out,
                       sd_error *err);

/* comfy.utils.repeat_to_batch_size along dim 0: the first n items, or the
 * items repeated ceil(n / B) times and cut to n. New tensor. */
sd_tensor *sd_repeat_to_batch(const sd_tensor *t, int64_t n);

typedef enum sd_porter_duff {
    SD_PD_ADD = 0, SD_PD_CLEAR, SD_PD_DARKEN, SD_PD_DST, SD_PD_DST_ATOP, SD_PD_DST_IN,
    SD_PD_DST_OUT, SD_PD_DST_OVER, SD_PD_LIGHTEN, SD_PD_MULTIPLY, SD_PD_OVERLAY, SD_PD_SCREEN,
    SD_PD_SRC, SD_PD_SRC_ATOP, SD_PD_SRC_IN, SD_PD_SRC_OUT, SD_PD_SRC_OVER, SD_PD_XOR,
    SD_PD_COUNT
} sd_porter_duff;

/* The mode names ComfyUI lists (PorterDuffMode member names, in order),
 * NULL-terminated; parse gives 0 or -1. */
extern const char *const sd_porter_duff_names[];
int sd_porter_duff_parse(const char *name, sd_porter_duff *out);

/* porter_duff_composite for one image: src, dst [H, W, C], src_alpha,
 * dst_alpha [H, W] as ComfyUI's masks (1 - alpha), all the same H and W.
 * Writes out_image [H, W, C] and out_mask [H, W] (1 - out alpha). */
void sd_porter_duff_composite(const float *src, const float *src_mask, const float *dst,
                              const float *dst_mask, int64_t hw, int64_t c, sd_porter_duff mode,
                              float *out_image, float *out_mask);

#endif
