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
 * SD3 ControlNets (InstantX's diffusers layout, models/sd3/sd3_controlnet.h)
 * load through the same entry point and are the same handle: their kind is
 * SD_CONTROLNET_MMDIT, their hint is a VAE latent of the image (the link's
 * vae), and a chain evaluated for an MMDiT gives ComfyUI's "output" list
 * (sd_control_residuals.dit) for sd_sd3_extra.control.
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
#include "models/sd3/sd3.h"
#include "models/unet/unet.h"
#include "models/vae/vae.h"

#define SD_CONTROLNET_PREFIX "control_model."

typedef struct sd_controlnet sd_controlnet;
struct sd_sd3_cn;

typedef enum sd_controlnet_kind {
    SD_CONTROLNET_UNET = 1, /* SD1 / SD2 / SDXL (cldm) */
    SD_CONTROLNET_MMDIT = 2 /* SD3 (comfy.cldm.mmdit) */
} sd_controlnet_kind;

/* Detect (an SD3 ControlNet; else prefix "control_model.", else "") and
 * load. Other DiT ControlNets ComfyUI loads (Stability's SD3.5 ones, Flux,
 * HunyuanDiT, Qwen-Image) are SD_ERR_UNSUPPORTED naming what they are. Errors:
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



sd_controlnet_kind sd_controlnet_kind_of(const sd_controlnet *cn);
/* The SD3 ControlNet of an SD_CONTROLNET_MMDIT one, else NULL (borrowed). */
struct sd_sd3_cn *sd_controlnet_mmdit(const sd_controlnet *cn);
/* The encoder's config in UNet terms (output-block fields are zero); NULL
 * for an SD3 ControlNet. */
const sd_unet_config *sd_controlnet_config(const sd_controlnet *cn);
/* Channels of the hint IMAGE (3 for an SD3 ControlNet, whose image the VAE
 * encodes). */
int sd_controlnet_hint_channels(const sd_controlnet *cn);
/* Number of "output" residuals (one per input block, 12 for SD1; an SD3
 * ControlNet's output list). */
int sd_controlnet_n_outputs(const sd_controlnet *cn);

/* SD_OK when cn's residuals fit a UNet of config u (input channels, model
 * channels, levels and widths, context width, label_emb width); else
 * SD_ERR_INVALID saying what differs ("ControlNet context width 768, the
 * model's 2048"). */
sd_status sd_controlnet_check_fit(const sd_controlnet *cn, const sd_unet_config *u,
                                  sd_error *err);
/* The same for an MMDiT of config m (sd_sd3_cn_check_fit); a UNet
 * ControlNet is SD_ERR_INVALID. */
sd_status sd_controlnet_check_fit_mmdit(const sd_controlnet *cn, const sd_sd3_config *m, sd_error *err);

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
    /* SD3 ControlNets: the VAE that encodes the image (NULL: none given,
     * an error when the link runs, as ComfyUI's), and what identifies the
     * link to the run's hint cache (sd_control_hints; NULL: not cached) */
    sd_vae *vae;
    const void *key;
    /* an inpainting (concat_mask) ControlNet's mask channel: 1 - mask as
     * [b, 1, h, w] F32 at the mask's size (ComfyUI's extra_concat, from
     * ControlNetInpaintingAliMamaApply); NULL: a channel of ones. Part of
     * the link, so of what `key` identifies. */
    const sd_tensor *extra_concat;
} sd_control_link;

/* The hints of SD3 ControlNets (a VAE encode each) kept for one sampling
 * run, by link key and latent size, as ComfyUI keeps cond_hint until the
 * size changes. NULL when out of memory. */
typedef struct sd_control_hints sd_control_hints;
sd_control_hints *sd_control_hints_new(void);
void sd_control_hints_free(sd_control_hints *h); /* NULL-safe */

/* The latent hint of an SD3 ControlNet link for an h x w latent:
 * the image resized as sd_controlnet_hint does to 8h x 8w, VAE-encoded,
 * times 1.5305 (latent_formats.SD3, shift 0), with the mask channel
 * (sd_controlnet_mask_channel of the link's extra_concat: ones without one)
 * appended for a 17-channel (inpainting) ControlNet. *out [B, C, h, w] is a
 * new reference (also kept in hints when given). SD_ERR_INVALID when the
 * link has no VAE or the VAE's latent does not fit the ControlNet. */
sd_status sd_control_mmdit_hint(const sd_control_link *l, sd_control_hints *hints, int64_t h, int64_t w,
                                sd_tensor **out, sd_error *err);

/* ---- inpainting ControlNets (controlnet_inpaint.c) ------------------------
 * AliMama's SD3-Controlnet-Inpainting (17 hint channels: the image latent
 * and a mask channel; ComfyUI's concat_mask). Flux inpainting ControlNets
 * are refused at load with the other Flux ControlNets. */

/* 1 when cn takes a mask channel after its hint latent (concat_mask). */
int sd_controlnet_concat_mask(const sd_controlnet *cn);

/* ControlNetInpaintingAliMamaApply's preparation (comfy_extras/
 * nodes_controlnet.py, for a concat_mask ControlNet):
 *   inv        = 1 - mask as [Bm, 1, Hm, Wm] (mask [Bm, Hm, Wm] or [Hm, Wm])
 *   mask_apply = round(common_upscale(inv, W, H, bilinear, center)), half to even
 *   image_out  = image * mask_apply, broadcast over the batch: [max(Bi, Bm), H, W, C]
 *   extra_concat = inv (the ControlNet's extra_concat, resized at sampling)
 * Both outputs are new tensors the caller owns. SD_ERR_INVALID when the
 * batches differ and neither is 1 (PyTorch's broadcast error) or for bad
 * shapes. */
sd_status sd_controlnet_inpaint_inputs(const sd_tensor *image, const sd_tensor *mask, sd_tensor **image_out,
                                       sd_tensor **extra_concat, sd_error *err);

/* The mask channel ControlNet.get_control appends for a batch-`batch`,
 * h x w hint latent: extra_concat [b, 1, H, W] resized by common_upscale
 * (nearest-exact, center) and repeat_to_batch_size'd to batch; NULL
 * extra_concat gives ones. New [batch, 1, h, w] tensor. */
sd_status sd_controlnet_mask_channel(const sd_tensor *extra_concat, int64_t batch, int64_t h, int64_t w,
                                     sd_tensor **out, sd_error *err);

#define SD_CONTROL_MAX_DIT SD_SD3_MAX_DEPTH

/* Summed residuals of a chain for one model call, ready for the UNet (skip,
 * middle, control) or the MMDiT (dit). */
typedef struct sd_control_residuals {
    sd_bt *skip[SD_UNET_MAX_BLOCKS];
    sd_bt *middle;
    sd_unet_control control; /* points into the arrays above */
    int active;              /* number of links that contributed */
    /* SD3 ControlNets: ComfyUI's "output" list (sd_sd3_extra.control), n_dit
     * entries borrowed from dit_own; consecutive entries that ComfyUI
     * shares (one controlnet block's output repeated) share a tensor */
    int n_dit;
    sd_bt *dit[SD_CONTROL_MAX_DIT];
    int n_dit_own;
    sd_bt *dit_own[SD_CONTROL_MAX_DIT];
} sd_control_residuals;
void sd_control_residuals_free(sd_control_residuals *r); /* NULL-safe, zeroes */

/* One model call's chain evaluation. */
typedef struct sd_control_call {
    const sd_model_sampling *ms;
    const sd_unet_config *unet;  /* a UNet model: links checked against it (NULL: unchecked) */
    const sd_sd3_config *mmdit;  /* an MMDiT model: likewise */
    const struct sd_sd3 *mmdit_net; /* that MMDiT (an SD3.5 ControlNet borrows its embedders) */
    sd_control_hints *hints;     /* the run's hint cache, or NULL */
    float sigma;
    sd_bt *x_in;                 /* the model's input, `batched` chunks */
    int batched;
    const float *timesteps;
    sd_bt *context, *y;
} sd_control_call;

/* sd_control_chain_eval_batched for any ControlNet kind: UNet links fill
 * skip / middle / control, SD3 links dit (each scaled by its strength once
 * per block output, as control_merge; chains summed entry by entry, the
 * earlier link first). */
sd_status sd_control_chain_run(const sd_control_link *links, int n, const sd_control_call *call,
                               sd_control_residuals *out, sd_error *err);

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
 * latents: a hint batch equal to x_in's is used as it is (get_control's
 * `x_noisy.shape[0] != cond_hint.shape[0]` test), another is laid out per
 * chunk as ComfyUI's broadcast_image_to does (item i of a chunk takes
 * hint[i % hint batch], a hint batch larger than the chunk is cut to its
 * first items, and every chunk gets the same hints). sd_control_chain_eval
 * is batched = 1. */
sd_status sd_control_chain_eval_batched(const sd_control_link *links, int n,
                                        const sd_model_sampling *ms, const sd_unet_config *unet,
                                        float sigma, sd_bt *x_in, int batched,
                                        const float *timesteps, sd_bt *context, sd_bt *y,
                                        sd_control_residuals *out, sd_error *err);

#endif
