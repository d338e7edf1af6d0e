/* zimage.h - the Z-Image NextDiT diffusion transformer (Z-Image-Turbo), as
 * ComfyUI's comfy.ldm.lumina.model.NextDiT computes it with the Z-Image
 * settings (z_image_modulation, pad tokens, time_scale 1000, RoPE theta
 * 256).
 *
 * The architecture is read from key names and shapes (sd_zimage_detect), in
 * the layout of diffusion_models/z_image_turbo_bf16.safetensors (bare keys:
 * x_embedder, cap_embedder, t_embedder, noise_refiner.N, context_refiner.N,
 * layers.N, final_layer, x_pad_token, cap_pad_token), or the same keys
 * under "model.diffusion_model." in a single-file checkpoint:
 *   dim             cap_embedder.1.weight rows
 *   cap_feat_dim    cap_embedder.1.weight columns (Qwen3-4B: 2560)
 *   head_dim        layers.0.attention.q_norm.weight length
 *   n_heads         dim / head_dim (ComfyUI hard-codes 30 for the real
 *                   3840-wide model: the same, 3840 / 128)
 *   n_kv_heads      (qkv rows / head_dim - n_heads) / 2
 *   n_layers, n_refiner_layers   count of layers.N / noise_refiner.N
 *                   (context_refiner must have as many)
 *   ffn_hidden      feed_forward.w1.weight rows
 *   in_channels     x_embedder.weight columns / patch^2 (patch 2)
 *   t_dim, adaln_dim  t_embedder.mlp.0 rows (min(dim, 1024)) and
 *                   t_embedder.mlp.2 rows (256: the modulation input)
 * Not in the file: patch 2, norm eps 1e-5, RoPE theta 256, time scale 1000,
 * the RoPE axes (ComfyUI's [32, 48, 48] for head_dim 128; the rule
 * [head_dim/4, 3*head_dim/8, 3*head_dim/8] for other widths, which the tiny
 * reference models follow; head_dim must be a multiple of 16) and the token
 * padding multiple (32, when x_pad_token / cap_pad_token are present).
 * Lumina Image 2.0 (the NextDiT with SiLU before each adaLN and no pad
 * tokens) and NewBie (clip_text_pooled_proj) are SD_ERR_UNSUPPORTED naming
 * what was found.
 *
 * Weights are kept as stored (BF16, F16, F32, fp8) on a backend that widens
 * them per op, as models/flux does; weight_dtype other than SD_F32 converts
 * every tensor at load. Compute goes through kernels/backend.h only, in F32
 * activations. Ownership: sd_zimage_load() returns a model owning its
 * weights (the file may be closed afterwards); sd_zimage_forward() borrows
 * its inputs and returns a new tensor owned by the caller.
 */
#ifndef SD_ZIMAGE_H
#define SD_ZIMAGE_H

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/dmodel/dmodel.h"

#define SD_ZIMAGE_AXES 3

typedef struct sd_zimage_config {
    int dim;
    int n_heads, n_kv_heads, head_dim;
    int n_layers, n_refiner_layers;
    int ffn_hidden;
    int in_channels, patch_size;
    int cap_feat_dim;
    int t_dim, adaln_dim;
    int out_bias;            /* attention.out.bias present */
    int pad_tokens_multiple; /* 32; 0 = no pad tokens */
    float norm_eps;
    double rope_theta, time_scale;
    int axes_dim[SD_ZIMAGE_AXES];
} sd_zimage_config;

typedef struct sd_zimage sd_zimage;

/* 1 when prefix+"cap_embedder.1.weight" exists: a NextDiT (Lumina 2 family)
 * is there (ComfyUI's own test), which sd_zimage_detect accepts or refuses. */
int sd_zimage_present(sd_st_file *f, const char *prefix);

/* Reads the architecture under `prefix` ("" or "model.diffusion_model.").
 * SD_ERR_NOT_FOUND when no NextDiT is there, SD_ERR_UNSUPPORTED for the
 * variants above, SD_ERR_FORMAT for shapes that do not fit together; every
 * message names the file and the key. */
sd_status sd_zimage_detect(sd_st_file *f, const char *prefix, sd_zimage_config *cfg, sd_error *err);

/* Detect and load (weight_dtype as sd_flux_load's). Missing or wrongly
 * shaped tensors: SD_ERR_NOT_FOUND / SD_ERR_FORMAT naming the key and file. */
sd_status sd_zimage_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                         sd_zimage **out, sd_error *err);
void sd_zimage_free(sd_zimage *m); /* NULL-safe */
const sd_zimage_config *sd_zimage_get_config(const sd_zimage *m);

/* Observation hook, called with named activations during a forward:
 * "t_embedder" [N, adaln_dim], "cap_embedder" [N, L, dim] (before the pad
 * tokens), "x_embedder" [N, h*w, dim] (before the pad tokens),
 * "context_refiner.<i>" and "noise_refiner.<i>" (the padded caption and
 * image streams after block i), "layers.<i>" and "layers.last" (the joint
 * [caption, image] stream), "final_layer" [N, tokens, patch^2 * C].
 * Borrowed for the call. For debugging and golden tests; NULL disables it. */
typedef void (*sd_zimage_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_zimage_set_tap(sd_zimage *m, sd_zimage_tap_fn fn, void *user);

/* One forward (NextDiT.forward: the raw output, sign included).
 *   x          [N, in_channels, H, W], any H, W >= 1 (padded to the patch
 *              size with wrap-around rows/columns, as ComfyUI's
 *              pad_to_patch_size, and the output cropped back)
 *   timesteps  N floats on the host: sigma (ModelSamplingDiscreteFlow with
 *              multiplier 1); the model embeds (1 - sigma) * 1000
 *   context    [N, L, cap_feat_dim], L >= 1 (Qwen3 hidden states); every
 *              token attends to every other (ComfyUI passes no mask when
 *              the conditioning's attention mask is all ones)
 * *out = [N, in_channels, H, W]. SD_ERR_INVALID for inputs that do not fit
 * the model, else the backend's error. */
sd_status sd_zimage_forward(sd_zimage *m, sd_bt *x, const float *timesteps, sd_bt *context,
                            sd_bt **out, sd_error *err);

/* The model behind the diffusion model interface (models/dmodel/dmodel.h):
 * *out borrows m (no y, no guidance, no extra inputs). */
void sd_zimage_as_dmodel(sd_zimage *m, sd_dmodel *out);

/* The rotation table of ComfyUI's EmbedND for the padded sequence
 * [caption (cap tokens), image (an h x w grid, then img_pad pad tokens)]:
 * caption token j at (j + 1, 0, 0), image token r*w + c at (cap + 1, r, c),
 * image pad tokens at (0, 0, 0); out[(l * D/2 + j) * 2 + {0, 1}] = cos, sin
 * of pos_axis(l) * theta^-scale_j in float64, rounded to float32. */
void sd_zimage_rope_table(const sd_zimage_config *c, int64_t cap, int64_t h, int64_t w,
                          int64_t img_pad, float *out);

/* Parameters by key relative to the model's prefix, for LoRA patching;
 * NULL when there is no such parameter. The slot belongs to m. */
sd_bt **sd_zimage_param(sd_zimage *m, const char *key);
typedef void (*sd_zimage_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_zimage_param_each(sd_zimage *m, sd_zimage_param_fn fn, void *ud);
/* A new model sharing base's weights (zimage_view.c), as sd_sd3_view: free
 * it with sd_zimage_free; base must outlive it. */
sd_status sd_zimage_view(const sd_zimage *base, sd_zimage **out, sd_error *err);

#endif
