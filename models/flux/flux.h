/* flux.h - the Flux.1 diffusion transformer (dev, schnell), as ComfyUI's
 * comfy.ldm.flux.model.Flux computes it.
 *
 * The architecture is read from key names and shapes (sd_flux_detect), in
 * the layout Black Forest Labs publishes ("double_blocks.N.img_attn.qkv...",
 * bare in diffusion_models/flux1-dev.safetensors, under
 * "model.diffusion_model." in single-file checkpoints):
 *   hidden_size     img_in.weight rows (= txt_in.weight rows)
 *   head_dim        double_blocks.0.img_attn.norm.query_norm.scale length
 *   num_heads       hidden_size / head_dim (ComfyUI hard-codes 24 for its
 *                   real models; this is the same for them: 3072 / 128)
 *   depth, depth_single_blocks   count of double_blocks.N / single_blocks.N
 *   mlp_ratio       img_mlp.0.weight rows / hidden_size
 *   in/out_channels img_in.weight columns / 4, final_layer.linear rows / 4
 *   vec_in_dim      vector_in.in_layer.weight columns (CLIP-L pooled: 768)
 *   context_in_dim  txt_in.weight columns (T5-XXL: 4096)
 *   guidance_embed  guidance_in.* present (dev: yes, schnell: no)
 *   qkv_bias        img_attn.qkv.bias present
 * Not in the file: patch 2, RoPE theta 10000 and the RoPE axes. The axes
 * are ComfyUI's [16, 56, 56] for head_dim 128 (every released Flux.1), and
 * [head_dim/4, 3*head_dim/8, 3*head_dim/8] for other head widths (the rule
 * sdflow's tiny reference and synthetic models follow; head_dim must then
 * be a multiple of 16). Flux variants this module does not run are
 * SD_ERR_UNSUPPORTED naming what was found: Flux.2 (global modulation),
 * Chroma (distilled guidance layer), models with a gated MLP or a text
 * norm, and Fill/Depth/Canny-style models whose input has more channels
 * than their output (concatenated image conditioning). Kontext models are
 * plain Flux dev files (16 channels in and out; ComfyUI detects them as
 * Flux): their image conditioning comes as reference latents
 * (sd_flux_forward_refs).
 *
 * Weights are kept as stored (BF16, F16, F32, F8_E4M3 or F8_E5M2) on a
 * backend that widens them per op (sd_backend_accepts_dtype), so a model
 * costs its file size, never a full F32 copy; the CPU backend reads them
 * straight from the file mapping. weight_dtype other than SD_F32 converts
 * every tensor to it at load (UNETLoader's fp8_e4m3fn / fp8_e5m2 casts,
 * torch's rounding: core/dtype.h).
 *
 * Compute goes through kernels/backend.h only, in F32 activations.
 * Ownership: sd_flux_load() returns a model owning its weight tensors (the
 * file mapping is kept alive by them on the CPU backend, so the sd_st_file
 * may be closed afterwards); sd_flux_forward() borrows its inputs and
 * returns a new tensor owned by the caller.
 */
#ifndef SD_FLUX_H
#define SD_FLUX_H

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/dmodel/dmodel.h"

#define SD_FLUX_MAX_AXES 4

typedef struct sd_flux_config {
    int hidden_size;
    int num_heads, head_dim;
    int depth, depth_single_blocks;
    int mlp_hidden;   /* int(hidden_size * mlp_ratio): the MLP width */
    double mlp_ratio;
    int in_channels, out_channels; /* latent channels (before patching) */
    int patch_size;
    int vec_in_dim;     /* 0: no vector_in */
    int context_in_dim;
    int guidance_embed; /* 1: guidance_in present (dev) */
    int qkv_bias;
    int theta;
    int n_axes;
    int axes_dim[SD_FLUX_MAX_AXES];
} sd_flux_config;

typedef struct sd_flux sd_flux;

/* 1 when prefix+"double_blocks.0.img_attn.norm.key_norm.scale" and
 * prefix+"img_in.weight" exist: the file holds a Flux-family DiT there
 * (ComfyUI's own test), which sd_flux_detect then accepts or refuses. */
int sd_flux_present(sd_st_file *f, const char *prefix);

/* Reads the architecture under `prefix` ("" or "model.diffusion_model.").
 * SD_ERR_NOT_FOUND when no Flux DiT is there, SD_ERR_UNSUPPORTED for the
 * variants above, SD_ERR_FORMAT for shapes that do not fit together; every
 * message names the file and the key. */
sd_status sd_flux_detect(sd_st_file *f, const char *prefix, sd_flux_config *cfg, sd_error *err);

/* Detect and load. weight_dtype: SD_F32 keeps every tensor in its stored
 * dtype where the backend takes it (else widens it to F32 at load); any
 * other float dtype converts every tensor to it. Missing or wrongly shaped
 * tensors: SD_ERR_NOT_FOUND / SD_ERR_FORMAT naming the key and file. */
sd_status sd_flux_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                       sd_flux **out, sd_error *err);
void sd_flux_free(sd_flux *m); /* NULL-safe */
const sd_flux_config *sd_flux_get_config(const sd_flux *m);
sd_backend *sd_flux_backend(const sd_flux *m);

/* Observation hook, called with named activations during a forward:
 * "img_in", "time_in", "guidance_in", "vector_in", "txt_in" (each module's
 * output), "pe_embedder" ([N, 1, L, D/2, 2, 2], ComfyUI's rotation
 * matrices), "double_blocks.<i>" (the image stream after block i),
 * "single_blocks.<i>" and "single_blocks.last" (the joint [txt, img]
 * stream, reference tokens after the image's), "final_layer" ([N, tokens,
 * patch^2 * out_channels], the image tokens only). Borrowed
 * for the call. For debugging and golden tests; NULL disables it. */
typedef void (*sd_flux_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_flux_set_tap(sd_flux *m, sd_flux_tap_fn fn, void *user);

/* Flux Kontext's reference latents (model_base.Flux.extra_conds
 * "ref_latents", already in model space: process_latent_in applied), each
 * [N, in_channels, Hr, Wr] with any Hr, Wr >= 1. Their patches are appended
 * to the image tokens (through img_in as the image's are), with RoPE ids per
 * `method` (ComfyUI's ref_latents_method; positions in latent pixels turned
 * to patches as (p + 1) / 2), and the output is cut back to the image
 * tokens:
 *   OFFSET (Flux's default_ref_method "offset", and every name ComfyUI does
 *          not treat otherwise) index 1; a reference goes right of the ones
 *          before it (w offset = their total width) when its height plus
 *          theirs exceeds its width plus theirs, else below them;
 *   INDEX  ("index") index 1, 2, ... (ref_index_scale 1), no offset;
 *   UXO    ("uxo"; FluxKontextMultiReferenceLatentMethod's "uxo/uno")
 *          index 0, offsets H + the heights and W + the widths of the ones
 *          before it (H, W: x's size rounded up to the patch). */
typedef enum sd_flux_ref_method {
    SD_FLUX_REF_OFFSET = 0,
    SD_FLUX_REF_INDEX = 1,
    SD_FLUX_REF_UXO = 2
} sd_flux_ref_method;

typedef struct sd_flux_refs {
    sd_bt *const *latents; /* borrowed */
    int n;
    sd_flux_ref_method method;
} sd_flux_refs;

/* ComfyUI's ref_latents_method string -> method (NULL: OFFSET). */
sd_flux_ref_method sd_flux_ref_method_from_name(const char *name);

/* One forward (Flux.forward: the raw velocity).
 *   x          [N, in_channels, H, W], any H, W >= 1 (padded to the patch
 *              size with wrap-around rows/columns, as ComfyUI's
 *              pad_to_patch_size, and the output cropped back)
 *   timesteps  N floats on the host: sigma for Flux (ModelSampling's
 *              timestep(sigma) = sigma); embedded as sigma * 1000
 *   context    [N, L, context_in_dim], any L >= 0 (T5 tokens)
 *   y          [N, >= vec_in_dim] pooled CLIP vector (its first vec_in_dim
 *              columns are used), or NULL for zeros
 *   guidance   N floats (distilled guidance, dev) or NULL: none added. A
 *              model without guidance_in ignores it.
 * *out = [N, out_channels, H, W]. SD_ERR_INVALID for inputs that do not
 * fit the model, else the backend's error. */
sd_status sd_flux_forward(sd_flux *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                          const float *guidance, sd_bt **out, sd_error *err);
/* The same with reference latents (refs NULL or n 0: sd_flux_forward).
 * SD_ERR_INVALID for a reference that is not [N, in_channels, Hr, Wr]. */
sd_status sd_flux_forward_refs(sd_flux *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                               const float *guidance, const sd_flux_refs *refs, sd_bt **out, sd_error *err);

/* The model behind the diffusion model interface (models/dmodel/dmodel.h):
 * *out borrows m (extra inputs: const sd_flux_refs *, or NULL). */
void sd_flux_as_dmodel(sd_flux *m, sd_dmodel *out);

/* ---- host-side helpers ------------------------------------------------------- */

/* The rotation table of ComfyUI's EmbedND for `txt` text tokens (position
 * ids 0) followed by an h x w grid of image tokens (ids (0, row, col)), as
 * sd_op_rope takes it: out[(l * D/2 + j) * 2 + {0, 1}] = cos, sin of
 * pos_axis(l) * theta^-scale_j, computed in float64 (torch.linspace
 * scales, float64 frequencies) and rounded to float32. D = head_dim. */
void sd_flux_rope_table(const sd_flux_config *c, int64_t txt, int64_t h, int64_t w, float *out);
/* One grid of image tokens: h x w patches with ids (index, row + h_off,
 * col + w_off), rows and offsets in patches. */
typedef struct sd_flux_grid {
    double index;
    int64_t h, w, h_off, w_off;
} sd_flux_grid;
/* The table for `txt` text tokens followed by each grid's tokens in order
 * (row-major), as sd_flux_rope_table. */
void sd_flux_rope_table_grids(const sd_flux_config *c, int64_t txt, const sd_flux_grid *g, int n, float *out);

/* Parameters by key relative to the model's prefix ("img_in.weight"), for
 * LoRA patching and merging; NULL when the model has no such parameter. The
 * slot belongs to m. */
sd_bt **sd_flux_param(sd_flux *m, const char *key);
/* A new model sharing base's weights: every slot a backend view of base's
 * tensor (sd_bt_view), so replacing a slot of the view (a LoRA-patched
 * weight) leaves base untouched. No tap. Free it with sd_flux_free; base
 * must outlive it. SD_ERR_NOMEM, or the backend's error. */
sd_status sd_flux_view(const sd_flux *base, sd_flux **out, sd_error *err);

/* Calls fn(ud, key, slot) for every parameter, keyed as sd_flux_param
 * reaches it (`key` valid during the call only). */
typedef void (*sd_flux_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_flux_param_each(sd_flux *m, sd_flux_param_fn fn, void *ud);

#endif
