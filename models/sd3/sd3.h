/* sd3.h - the MMDiT diffusion transformer of Stable Diffusion 3 / 3.5
 * (Medium's MMDiT-X included), as ComfyUI's
 * comfy.ldm.modules.diffusionmodules.mmdit.OpenAISignatureMMDITWrapper
 * computes it.
 *
 * The architecture is read from key names and shapes (sd_sd3_detect), in
 * the layout Stability publishes ("joint_blocks.N.x_block.attn.qkv...", bare
 * in diffusion_models/sd3.5_medium.safetensors, under
 * "model.diffusion_model." in single-file checkpoints):
 *   hidden_size      x_embedder.proj.weight rows
 *   patch_size       x_embedder.proj.weight kernel (square)
 *   in_channels      x_embedder.proj.weight input channels
 *   head_dim         joint_blocks.0.x_block.attn.ln_q.weight length when
 *                    the model has qk RMSNorm, else 64 (ComfyUI's "magic"
 *                    head width: hidden = 64 * depth, heads = depth)
 *   num_heads        hidden_size / head_dim
 *   depth            count of joint_blocks.N
 *   mlp_hidden       joint_blocks.0.x_block.mlp.fc1.weight rows
 *   pos_embed_max_size  sqrt of pos_embed's token count (a square grid)
 *   adm_in_channels  y_embedder.mlp.0.weight columns (0: no y_embedder)
 *   context_in_dim   context_embedder.weight columns
 *   self_attn        block i has x_block.attn2 (MMDiT-X, SD3.5 Medium)
 *   qk_norm          joint_blocks.0.x_block.attn.ln_q.weight present
 *   qkv_bias         joint_blocks.0.x_block.attn.qkv.bias present
 *   out_channels     final_layer.linear rows / patch_size^2
 * The last joint block's context branch must be pre-only (no attn.proj, no
 * MLP: it only feeds the joint attention), as in every released model.
 * Layouts this module does not run are SD_ERR_UNSUPPORTED naming what was
 * found: register tokens ("register"), a context processor
 * ("context_processor.*"), LayerNorm q/k norms (ln_q.bias), RMSNorm block
 * norms, scale-only modulation and SwiGLU MLPs (each seen as a differently
 * shaped adaLN / MLP), and a missing pos_embed.
 *
 * Weights are kept as stored (F16, BF16, F32, F8_E4M3 or F8_E5M2) on a
 * backend that widens them per op, as models/flux/flux.h describes; a
 * weight_dtype other than SD_F32 converts every tensor to it at load.
 * Compute goes through kernels/backend.h only, in F32 activations.
 * Ownership: sd_sd3_load() returns a model owning its weight tensors (the
 * sd_st_file may be closed afterwards); sd_sd3_forward() borrows its inputs
 * and returns a new tensor owned by the caller.
 */
#ifndef SD_SD3_H
#define SD_SD3_H

#include <stdint.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/dmodel/dmodel.h"

/* Joint blocks a model may have (SD3.5 Large: 38). */
#define SD_SD3_MAX_DEPTH 64

typedef struct sd_sd3_config {
    int hidden_size;
    int num_heads, head_dim;
    int depth;
    int mlp_hidden;
    int patch_size;
    int in_channels, out_channels;
    int pos_embed_max_size;
    int adm_in_channels; /* 0: no y_embedder */
    int context_in_dim;
    int qk_norm;         /* 1: per-head RMSNorm (eps 1e-6) on q and k */
    int qkv_bias;
    int n_self_attn;     /* blocks with the MMDiT-X extra self-attention */
    uint64_t self_attn;  /* bit i: joint block i has x_block.attn2 */
} sd_sd3_config;

typedef struct sd_sd3 sd_sd3;

/* 1 when prefix+"joint_blocks.0.x_block.attn.qkv.weight" and
 * prefix+"x_embedder.proj.weight" exist: an MMDiT is there (ComfyUI's own
 * test is the joint_blocks key), which sd_sd3_detect accepts or refuses. */
int sd_sd3_present(sd_st_file *f, const char *prefix);

/* Reads the architecture under `prefix` ("" or "model.diffusion_model.").
 * SD_ERR_NOT_FOUND when no MMDiT is there, SD_ERR_UNSUPPORTED for the
 * layouts above, SD_ERR_FORMAT for shapes that do not fit together; every
 * message names the file and the key. */
sd_status sd_sd3_detect(sd_st_file *f, const char *prefix, sd_sd3_config *cfg, sd_error *err);

/* Detect and load (weight_dtype as sd_flux_load). Missing or wrongly shaped
 * tensors: SD_ERR_NOT_FOUND / SD_ERR_FORMAT naming the key and file. */
sd_status sd_sd3_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                      sd_sd3 **out, sd_error *err);
void sd_sd3_free(sd_sd3 *m); /* NULL-safe */
const sd_sd3_config *sd_sd3_get_config(const sd_sd3 *m);
sd_backend *sd_sd3_backend(const sd_sd3 *m);

/* Observation hook, called with named activations during a forward:
 * "x_embedder" (the patch embedding before the position embedding is
 * added), "t_embedder", "y_embedder", "context_embedder" (each module's
 * output), "joint_blocks.<i>" (the context stream after block i; none for
 * the pre-only last block), "joint_blocks.<i>.x" (the image stream after
 * block i), "final_layer" ([N, tokens, patch^2 * out_channels]). Borrowed
 * for the call; NULL disables it. */
typedef void (*sd_sd3_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_sd3_set_tap(sd_sd3 *m, sd_sd3_tap_fn fn, void *user);

/* One forward (MMDiT.forward: the raw velocity).
 *   x          [N, in_channels, H, W], any H, W >= 1 whose patch grid
 *              (ceil(H / p) x ceil(W / p)) fits pos_embed_max_size
 *              (padded to the patch size with wrap-around rows/columns, as
 *              ComfyUI's pad_to_patch_size, and the output cropped back)
 *   timesteps  N floats on the host: ModelSampling.timestep(sigma), sigma *
 *              1000 for SD3's flow sampling, embedded as given
 *   context    [N, L, context_in_dim], L >= 1 (SD3's CLIP-L/G + T5 tokens)
 *   y          [N, adm_in_channels] pooled vector, or NULL: no y_embedder
 *              term (as ComfyUI without y)
 *   skip       n_skip joint-block indices to leave out (SkipLayerGuidance's
 *              layers: the block's inputs pass through unchanged; an index
 *              the model has no block for skips nothing), or NULL
 * *out = [N, out_channels, H, W]. SD_ERR_INVALID for inputs that do not
 * fit the model, else the backend's error. */
sd_status sd_sd3_forward(sd_sd3 *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                         const int *skip, int n_skip, sd_bt **out, sd_error *err);

/* What a forward takes besides its inputs: the blocks to skip and a
 * ControlNet's residuals. */
typedef struct sd_sd3_extra {
    const int *skip; /* joint blocks to leave out (sd_sd3_forward's skip) */
    int n_skip;
    /* ComfyUI's control["output"] (models/sd3/sd3_controlnet.h): entry i,
     * [N or 1, T, hidden] (T = the patch count) or NULL, is added to the
     * image tokens after joint block i, also after a skipped block (as
     * forward_core_with_concat adds it after a replaced one); entries past
     * the model's depth are ignored. NULL / 0 = none. Borrowed. */
    sd_bt *const *control;
    int n_control;
} sd_sd3_extra;
/* sd_sd3_forward with every extra (NULL = none). A control entry of another
 * shape than the image tokens is SD_ERR_INVALID. */
sd_status sd_sd3_forward_ex(sd_sd3 *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                            const sd_sd3_extra *extra, sd_bt **out, sd_error *err);

/* The model behind the diffusion model interface (models/dmodel/dmodel.h):
 * *out borrows m. The input's extra is a const sd_sd3_extra * or NULL;
 * guidance is ignored. */
void sd_sd3_as_dmodel(sd_sd3 *m, sd_dmodel *out);

/* Parameters by key relative to the model's prefix ("x_embedder.proj.weight"),
 * for LoRA patching and merging; NULL when the model has no such parameter.
 * The slot belongs to m. */
sd_bt **sd_sd3_param(sd_sd3 *m, const char *key);
typedef void (*sd_sd3_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_sd3_param_each(sd_sd3 *m, sd_sd3_param_fn fn, void *ud);
/* A new model sharing base's weights (sd3_view.c): every slot a backend
 * view of base's tensor (sd_bt_view), so replacing a slot of the view (a
 * LoRA-patched weight) leaves base untouched. No tap. Free it with
 * sd_sd3_free; base must outlive it. SD_ERR_NOMEM, or the backend's error. */
sd_status sd_sd3_view(const sd_sd3 *base, sd_sd3 **out, sd_error *err);

#endif
