/* latentops.h - the latent arithmetic of ComfyUI's comfy_extras/nodes_latent.py:
 * LatentInterpolate, and the LATENT_OPERATION functions (LatentOperationSharpen,
 * LatentOperationTonemapReinhard) that LatentApplyOperation applies to a
 * latent and LatentApplyOperationCFG to a sampler's predictions
 * (models/sampling/guider.h).
 *
 * Latents are F32 [B, C, H, W]. "The norm" below is
 * torch.linalg.vector_norm(x, dim=1): per pixel sqrt(sum_c x^2), the
 * squares summed in float32 channel by channel with fused multiply-adds, as
 * torch's x86 builds (AVX2, AVX512) compute it (a torch built without FMA
 * differs in the last bit).
 *
 * Exactness: element-wise steps keep PyTorch's float32 order. Three steps
 * are reductions whose float32 order PyTorch chooses per CPU build (the
 * reinhard tonemap's mean and standard deviation over a latent, the
 * sharpen's convolution): those are computed in double and rounded once,
 * and the golden test allows float32 reduction error for them
 * (tests/data/node_ops/manifest.json).
 *
 * Ownership: results are new tensors owned by the caller; inputs are never
 * modified.
 */
#ifndef SD_LATENTOPS_H
#define SD_LATENTOPS_H

#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

typedef enum sd_latent_op_kind {
    SD_LATENT_OP_SHARPEN = 1,      /* LatentOperationSharpen */
    SD_LATENT_OP_TONEMAP_REINHARD  /* LatentOperationTonemapReinhard */
} sd_latent_op_kind;

/* One LATENT_OPERATION: plain data (copied into MODEL patches). */
typedef struct sd_latent_op {
    sd_latent_op_kind kind;
    int64_t radius;    /* sharpen_radius */
    double sigma;      /* sharpen */
    double alpha;      /* sharpen */
    double multiplier; /* tonemap */
} sd_latent_op;

/* op(latent=x):
 *   sharpen: l = norm + 1e-6; x / l reflect-filtered per channel with the
 *     sharpen kernel (filters.h), times l. Needs radius < H and < W.
 *   tonemap_reinhard: m = norm + 1e-10; top = (5 std(m) + mean(m)) *
 *     multiplier per batch item (std unbiased); x / m * top * s / (s + 1)
 *     with s = m * (1 / top).
 * SD_ERR_INVALID (message only) for a shape the operation cannot take. */
sd_status sd_latent_op_apply(const sd_latent_op *op, const sd_tensor *x, sd_tensor **out, sd_error *err);

/* LatentInterpolate: a, b [B, C, H, W] (b already reshaped to a), ratio r:
 *   na = nan_to_num(a / |a|), nb likewise; t = na r + nb (1 - r);
 *   out = nan_to_num(t / |t|) * (|a| r + |b| (1 - r))
 * with ComfyUI's broadcasting of the [B, H, W] norms against [B, C, H, W]
 * (aligned from the right: a norm is indexed by the channel, which is right
 * only for one latent; B == C also broadcasts, anything else is refused, as
 * PyTorch refuses it). */
sd_status sd_latent_interpolate(const sd_tensor *a, const sd_tensor *b, double ratio, sd_tensor **out,
                                sd_error *err);

#endif
