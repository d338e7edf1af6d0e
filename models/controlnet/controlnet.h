/* controlnet.h - SD1/SDXL ControlNets in the original (cldm) layout, as
 * ComfyUI's comfy.cldm.cldm.ControlNet computes them and
 * comfy.controlnet.ControlNet applies them.
 *
 * Layout (prefix "control_model." or none): the encoder half of a UNet
 * (time_embed, [label_emb], input_blocks, middle_block; detected the way the
 * UNet is, models/unet/unet.h) plus input_hint_block.{0,2,...,14} (8 convs, SiLU
 * between, stride 2 at the 3rd, 5th and 7th), zero_convs.N.0 (one 1x1 conv
 * per input block) and middle_block_out.0 (1x1). Diffusers-layout files
 * (controlnet_cond_embedding.*, down_blocks.*, mid_block.*,
 * controlnet_down_blocks.*, controlnet_mid_block) are renamed to this layout
 * in memory and loaded the same way. T2I-Adapters and Control-LoRAs are
 * SD_ERR_UNSUPPORTED naming what was found.
 *
 * Union ControlNets (xinsir controlnet-union-sdxl-1.0 and ProMax: a
 * diffusers-layout file with control_add_embedding.*, task_embedding,
 * transformer_layes.0.*, spatial_ch_projs.*; ComfyUI reads these parts only
 * in that layout) take a control type (sd_controlnet_union_types, set by
 * SetUnionControlNetType; -1 = "auto", none set): control_add_embedding of
 * the type's one-hot vector joins the time embedding (for "auto" too, all
 * zero), and with a type set the hint encoder's output gets the projected
 * token of a one-layer transformer over mean(hint features) +
 * task_embedding[type] (ComfyUI's union_controlnet_merge).
 *
 * Forward: guided_hint = input_hint_block(hint) is added to the output of
 * input_blocks[0] only; output[i] = zero_convs[i](h after input block i);
 * middle = middle_block_out(middle_block(h)). The hint is the IMAGE in
 * [0, 1] (not rescaled), NCHW, at latent size * 8. The UNet adds output[i]
 * (times strength) to the skip saved after its input block i and middle to
 * its middle-block output (sd_unet_control.skip / .middle).
 *
 * Ownership: a loaded ControlNet owns its weights; the safetensors file may
 * be closed afterwards; the backend must outlive it. Results are new
 * tensors owned by the caller. Like the UNet, one backend runs one forward
 * at a time (sticky error).
 */
#ifndef SD_CONTROLNET_H
#define SD_CONTROLNET_H

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/sampling/model_sampling.h"
#include "models/unet/unet.h"

#define SD_CONTROLNET_PREFIX "control_model."

typedef struct sd_controlnet sd_controlnet;

/* Detect (prefix "control_model.", else "") and load. Errors:
 * SD_ERR_NOT_FOUND / SD_ERR_UNSUPPORTED naming the file and the layout
 * found, SD_ERR_FORMAT for missing or wrongly shaped tensors (full key). */
sd_status sd_controlnet_load(sd_backend *be, sd_st_file *f, sd_dtype weight_dtype,
                             sd_controlnet **out, sd_error *err);
/* Open `path` and check its layout from names and shapes only (no weight
 * read): SD_OK when sd_controlnet_load would accept the layout (a
 * diffusers-layout file is checked only at load), else its refusal. For
 * validation. */
sd_status sd_controlnet_probe_file(const char *path, sd_error *err);
void sd_controlnet_free(sd_controlnet *cn); /* NULL-safe */

/* ComfyUI's UNION_CONTROLNET_TYPES in index order, NULL-terminated
 * ("openpose" = 0 ... "repaint" = 7). */
extern const char *const sd_controlnet_union_types[];
/* The index of a type name, -1 for any other name ("auto"). */
int sd_controlnet_union_type(const char *name);
/* The number of control types of a Union ControlNet; 0 for any other. */
int sd_controlnet_union_n_types(const sd_controlnet *cn);
/* ---- diff ControlNets (models/controlnet/controlnet_diff.c; DiffControlNetLoader) ---
 * A "diff" ControlNet stores each weight of its encoder as the difference
 * from the UNet it was trained from, marked by a tensor named "difference"
 * beside control_model.* keys (ComfyUI's load_controlnet_state_dict detects
 * it so; without the control_model. prefix the marker is ignored, as
 * there). */
int sd_controlnet_is_diff(const sd_st_file *f);
/* The file as ComfyUI merges it with a model: every control_model.K whose
 * "K" the UNet `base` holds becomes K's weight rounded to the file tensor's
 * dtype, added in F32 to the stored value and rounded to that dtype again
 * (PyTorch's in-place `cd += model_sd[k].type(cd.dtype)` on the CPU);
 * other tensors are kept as stored. *out is a new file view named like f
 * (tensors are copies: f may be closed). A shape that differs from the
 * UNet's is SD_ERR_FORMAT naming the key. */
sd_status sd_controlnet_diff_merge(sd_st_file *f, sd_unet *base, sd_st_file **out, sd_error *err);



/* The encoder's config in UNet terms (output-block fields are zero). */
const sd_unet_config *sd_controlnet_config(const sd_controlnet *cn);
int sd_controlnet_hint_channels(const sd_controlnet *cn);
/* Number of "output" residuals (one per input block; 12 for SD1). */
int sd_controlnet_n_outputs(const sd_controlnet *cn);

/* SD_OK when cn's residuals fit a UNet of config u (input channels, model
 * channels, levels and widths, context width, label_emb width); else
 * SD_ERR_INVALID saying what differs ("ControlNet context width 768, the
 * model's 2048"). */
sd_status sd_controlnet_check_fit(const sd_controlnet *cn, const sd_unet_config *u,
                                  sd_error *err);

/* Observation hook ("guided_hint", "output.N", "middle"); NULL disables. */
void sd_controlnet_set_tap(sd_controlnet *cn, sd_unet_tap_fn fn, void *user);

typedef struct sd_controlnet_result {
    int n;                                /* = sd_controlnet_n_outputs */
    sd_bt *output[SD_UNET_MAX_BLOCKS];
    sd_bt *middle;
} sd_controlnet_result;
void sd_controlnet_result_free(sd_controlnet_result *r); /* NULL-safe, zeroes */

/* One raw forward (no strength).
 *   x          [N, in_channels, h, w]  the UNet's scaled input
 *   timesteps  N host floats (as for the UNet)
 *   hint       [N or 1, hint_channels, 8h, 8w] in [0, 1]
 *   context    [N, L, context_dim]; y [N, adm] or NULL (SD1)
 * Errors: SD_ERR_INVALID for shapes that do not fit (naming the input),
 * backend errors. */
sd_status sd_controlnet_forward(sd_controlnet *cn, sd_bt *x, const float *timesteps, sd_bt *hint,
                                sd_bt *context, sd_bt *y, sd_controlnet_result *out,
                                sd_error *err);
/* The same with a Union control type (-1 = "auto"; ignored by a ControlNet
 * that is not a Union one, as ComfyUI passes it as an unused keyword). A
 * type at or past sd_controlnet_union_n_types is SD_ERR_INVALID naming it
 * (ComfyUI's "out of range ... consider the ProMax" error). */
sd_status sd_controlnet_forward_type(sd_controlnet *cn, sd_bt *x, const float *timesteps, sd_bt *hint,
                                     sd_bt *context, sd_bt *y, int control_type,
                                     sd_controlnet_result *out, sd_error *err);

/* The hint ComfyUI feeds: IMAGE [B, H, W, C] (NHWC, [0, 1]) moved to NCHW,
 * resized with common_upscale(nearest-exact, crop center) to width x height
 * when its size differs. New [B, C, height, width] F32 tensor. */
sd_status sd_controlnet_hint(const sd_tensor *image, int64_t width, int64_t height,
                             sd_tensor **out, sd_error *err);

/* ---- applying chains (ControlNetApply / ControlNetApplyAdvanced) ----------- */

/* One applied ControlNet. A chain is an array in application order: links[0]
 * was applied first (ComfyUI's deepest previous_controlnet). */
typedef struct sd_control_link {
    sd_controlnet *cn;
    const sd_tensor *image; /* IMAGE [B, H, W, C] in [0, 1] */
    double strength;
    double start_percent, end_percent;
    int union_type; /* SetUnionControlNetType: 0 = none set ("auto"), else 1 + the type index */
} sd_control_link;

/* Summed residuals of a chain for one model call, ready for the UNet. */
typedef struct sd_control_residuals {
    sd_bt *skip[SD_UNET_MAX_BLOCKS];
    sd_bt *middle;
    sd_unet_control control; /* points into the arrays above */
    int active;              /* number of links that contributed */
} sd_control_residuals;
void sd_control_residuals_free(sd_control_residuals *r); /* NULL-safe, zeroes */

/* ComfyUI get_control for a chain at noise level sigma: a link is active
 * when percent_to_sigma(end) <= sigma <= percent_to_sigma(start); each
 * active link runs its ControlNet on (x_in, timesteps, hint resized to
 * x's size * 8 and repeated over the batch, context, y), scales the outputs
 * by its strength, and the outputs of all links are summed. With no active
 * link out->active is 0 and out->control holds nothing. unet (may be NULL)
 * is checked with sd_controlnet_check_fit first. */
sd_status sd_control_chain_eval(const sd_control_link *links, int n, const sd_model_sampling *ms,
                                const sd_unet_config *unet, float sigma, sd_bt *x_in,
                                const float *timesteps, sd_bt *context, sd_bt *y,
                                sd_control_residuals *out, sd_error *err);

/* The same for a model call that batches `batched` conditioning chunks
 * (cond and uncond, or several entries), each of x_in->shape[0] / batched
 * latents: the hint batch is laid out per chunk as ComfyUI's
 * broadcast_image_to does (item i of a chunk takes hint[i % hint batch],
 * a hint batch larger than the chunk is cut to its first items, and every
 * chunk gets the same hints). sd_control_chain_eval is batched = 1. */
sd_status sd_control_chain_eval_batched(const sd_control_link *links, int n,
                                        const sd_model_sampling *ms, const sd_unet_config *unet,
                                        float sigma, sd_bt *x_in, int batched,
                                        const float *timesteps, sd_bt *context, sd_bt *y,
                                        sd_control_residuals *out, sd_error *err);

#endif
