/* filters.h - the image filters of ComfyUI's comfy_extras/nodes_post_processing.py
 * and nodes_morphology.py: gaussian blur and sharpen kernels, their
 * reflect-padded depthwise correlation, blend modes, and flat morphology.
 *
 * Planes: a filter runs on `n` planes of h x w values whose element (y, x)
 * lies at p[y * w * c + x * c] from the plane's start, so one function serves
 * images [B, H, W, C] (n = B * C planes interleaved by channel: pass c = C
 * and let plane k start at (k / C) * H * W * C + k % C) and latents
 * [B, C, H, W] (c = 1, consecutive planes). sd_plane_at gives the start.
 *
 * Exactness: the kernels are built with ComfyUI's float32 operations
 * (torch.linspace's formula, Sleef's expf as torch computes exp on x86);
 * only their normalising sum is summed in plain order (PyTorch's reduction
 * order is its own). Correlations accumulate in double and round once, so
 * the result is the exactly rounded value of what ComfyUI approximates with
 * float32 sums in its convolution's own order; the golden test allows the
 * error of float32 sums of k*k terms (tests/data/node_ops/manifest.json).
 * Morphology and blend modes are exact.
 */
#ifndef SD_FILTERS_H
#define SD_FILTERS_H

#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

/* Start of plane k of a [B, H, W, C] (c = C) or [B*C, H, W] (c = 1) buffer. */
static inline int64_t sd_plane_at(int64_t k, int64_t h, int64_t w, int64_t c) {
    return (k / c) * h * w * c + k % c;
}

/* gaussian_kernel(ks, sigma): ks*ks float32 values into out (row-major; x
 * along rows, y along columns as torch.meshgrid(indexing="ij") makes them):
 * g = exp(-(d*d) / (2 sigma^2)) over d = sqrt(x*x + y*y) on linspace(-1, 1,
 * ks), then g / sum(g). ks >= 1. Returns 0, or -1 when out of memory. */
int sd_gaussian_kernel(int64_t ks, double sigma, float *out);

/* ImageSharpen's (and LatentOperationSharpen's) kernel: the gaussian times
 * -(alpha * 10), then the centre set to centre - sum + 1. 0 or -1 (memory). */
int sd_sharpen_kernel(int64_t ks, double sigma, double alpha, float *out);

/* F.pad(x, (r, r, r, r), "reflect") then F.conv2d with the ks x ks kernel
 * (ks = 2r + 1) and the result cropped back to h x w: for each of n planes,
 * out(y, x) = sum_ij k[i, j] * in(refl(y + i - r), refl(x + j - r)) with
 * reflection without repeating the edge. Needs r < h and r < w (PyTorch's
 * reflect padding does). in and out use the plane layout above and may not
 * alias. Returns 0, or -1 when out of memory. */
int sd_filter_reflect(const float *in, float *out, int64_t n, int64_t h, int64_t w, int64_t c,
                      const float *kernel, int64_t r);

/* kornia.morphology with a flat ks x ks structuring element and its default
 * "geodesic" border (outside pixels never win): erosion = the minimum,
 * dilation = the maximum over the window rows [y - ks/2, y + ks - ks/2 - 1]
 * (and columns likewise) clipped to the image. is_max chooses. Planes as
 * above; out may not alias in. Returns 0, or -1 when out of memory. */
int sd_morph_flat(const float *in, float *out, int64_t n, int64_t h, int64_t w, int64_t c, int64_t ks,
                  int is_max);

typedef enum sd_blend_mode {
    SD_BLEND_NORMAL = 0,
    SD_BLEND_MULTIPLY,
    SD_BLEND_SCREEN,
    SD_BLEND_OVERLAY,
    SD_BLEND_SOFT_LIGHT,
    SD_BLEND_DIFFERENCE
} sd_blend_mode;

/* "normal", "multiply", "screen", "overlay", "soft_light", "difference"
 * (ImageBlend's list, NULL-terminated) and their parsing (0 or -1). */
extern const char *const sd_blend_mode_names[];
int sd_blend_mode_parse(const char *name, sd_blend_mode *out);

/* ImageBlend for n values: out = clamp(a * (1 - f) + mode(a, b) * f, 0, 1)
 * with (1 - f) and f rounded to float32, each operation rounded as PyTorch
 * does. out may alias a or b. */
void sd_blend(const float *a, const float *b, int64_t n, sd_blend_mode mode, double factor, float *out);

#endif
