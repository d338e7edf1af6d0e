/* sampling.h - KSampler and KSamplerAdvanced, and the pieces behind them:
 * ComfyUI's common_ksampler (noise, schedule, denoise and step ranges,
 * latent scaling, inpaint masks) and the conditioning-aware model call the
 * CFG guider drives (calc_cond_batch: areas, strengths, combined entries,
 * cond and uncond batched into one UNet forward).
 */
#ifndef SD_NODES_SAMPLING_H
#define SD_NODES_SAMPLING_H

#include "core/node.h"
#include "models/checkpoint/checkpoint.h"
#include "models/dmodel/dmodel.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/sampler.h"

extern const sd_node_def *const sd_nodes_sampling[];
/* The custom-sampling family (nodes/sampling/custom_*.c). */
extern const sd_node_def *const sd_nodes_custom_sampling[];

/* ---- the conditioned model (comfy.samplers.calc_cond_batch) -----------------
 * For conditioning list k (0 = positive, 1 = negative) every entry is run
 * on its area of x (the whole latent when it has none), its x0 prediction
 * weighted by strength times either its mask (cut to the area, times
 * mask_strength; a mask batch of 1 or one that divides the latent batch is
 * repeated over it) or, without a mask, the 8-latent-pixel edge feather of
 * areas that do not touch the border; the weighted predictions are summed
 * and divided by the summed weights (plus 1e-37, so a lone full-size entry
 * is returned exactly). Entries outside their start/end_percent window
 * (percent_to_sigma of the MODEL's schedule) are skipped. Areas and masks
 * must have been resolved to the latent first (sd_cond_resolve). Compatible entries (same area
 * size and token count, the same "control" value or none, the same
 * guidance presence) go through the diffusion model as one batch; an
 * entry's ControlNet chain ("control", see nodes/controlnet/controlnet_nodes.h,
 * UNet and MMDiT models) is evaluated on that batch and its residuals added
 * to the UNet's skip connections and middle block, or to the MMDiT's image
 * tokens after each joint block.
 *
 * What each model kind takes from an entry (ComfyUI's model_base
 * extra_conds): every kind the "cond" tokens as context (width =
 * the model's context_dim) and timestep(sigma); SDXL the adm vector made of
 * "pooled_output" (replaced by "unclip_conditioning"'s, sd_cond_unclip) and
 * the size keys; SD2.1 unCLIP its "y" (sd_cond_unclip; the other models
 * ignore "unclip_conditioning"); Flux "pooled_output" as y (required,
 * as ComfyUI's encode_adm) and "guidance" (a float; absent = 3.5, ComfyUI's
 * default; none = no guidance embedding, FluxDisableGuidance), repeated
 * over the batch; Flux also "reference_latents" (ReferenceLatent's list of
 * VAE-space latents [b, C, h, w], any size: process_latent_in, each
 * item b of the batch taking the latent's item b % b_ref, as
 * repeat_to_batch_size) and "reference_latents_method" (a string, see
 * models/flux/flux.h sd_flux_refs; entries batch together only with the
 * same reference shapes and method). The other kinds ignore both keys, as
 * their ComfyUI model_base does. */
#define SD_COND_MIDDLE 2 /* beside SD_COND_POSITIVE / SD_COND_NEGATIVE (guider.h) */
#define SD_COND_FLUX_GUIDANCE_DEFAULT 3.5 /* model_base.Flux.extra_conds */
typedef void (*sd_cond_model_tap_fn)(void *ud, int cond_index, float sigma,
                                     const sd_tensor *denoised);
/* SDXL: the adm vector y [1, adm] built for an entry of conditioning
 * cond_index (before it is repeated over the batch). */
typedef void (*sd_cond_model_adm_tap_fn)(void *ud, int cond_index, const sd_tensor *y);
/* Each network forward: its inputs (x after calculate_input, the batch's
 * timesteps, guidance or NULL) and raw output, for tests recording what the
 * model was fed (ComfyUI's unet wrapper); borrowed for the call. */
typedef void (*sd_cond_model_forward_tap_fn)(void *ud, const sd_tensor *x, const float *timesteps,
                                             const float *guidance, const sd_tensor *out);

typedef struct sd_cond_model {
    sd_backend *be;
    sd_dmodel dm;              /* the diffusion model (borrowed network) */
    const sd_unet_config *cfg; /* UNet models: the UNet's config (SDXL adm,
                                * ControlNet fit); NULL for other kinds */
    const sd_model_sampling *ms;
    /* CONDITIONING lists (borrowed), by SD_COND_* index: positive,
     * negative, and DualCFGGuider's middle (cond2); NULL = not in use */
    const sd_value *conds[3];
    /* 9-channel inpainting UNets: [B, 5, h, w] = mask | masked-image latent
     * (model space), appended to the scaled UNet input. NULL otherwise. */
    const sd_tensor *concat;
    /* SDXL size conditioning defaults: the full latent size * 8. */
    int64_t image_w, image_h;
    sd_cond_model_tap_fn tap; /* observation (tests); may be NULL */
    sd_cond_model_adm_tap_fn adm_tap;
    sd_cond_model_forward_tap_fn forward_tap;
    void *tap_ud;
    /* joint blocks the network leaves out (skip layer guidance's extra
     * prediction; MMDiT models only, others refuse); n_skip 0 = none */
    const int *skip;
    int n_skip;
    /* the MODEL's UNet patches (FreeU, ...), handed to every UNet forward;
     * NULL or none = none; other model kinds refuse them */
    const struct sd_unet_patches *unet_patches;
    /* the run's stand-in for torch's default generator, which HyperTile
     * draws from (sd_unet_control.rng); NULL = none */
    struct sd_rng *rng;
    /* PerturbedAttentionGuidance's extra prediction: the UNet's middle-block
     * self-attention replaced by its value projection (a patch added to
     * unet_patches for this call, as ComfyUI's set_model_options_patch_replace
     * on a copy of the model options) */
    int perturb_attn;
    /* SelfAttentionGuidance's record of the uncond pass (NULL = none): a
     * forward that evaluates a negative entry records that entry's rows of
     * the middle block's attention here (the MODEL's record patch); SAG's
     * own prediction records nothing. Owned by the sampling run. */
    struct sd_unet_attn_record *record;
    /* the MODEL's latent format: Flux reference latents are brought into
     * model space with it (process_latent_in); NULL = as they are */
    const struct sd_latent_format *fmt;
    /* an SD2.1 unCLIP UNet: the ADM is each entry's "y" (sd_cond_unclip),
     * zeros for an entry without one and without unclip_conditioning */
    int unclip;
    /* the run's cache of SD3 ControlNet hints (VAE encodes), owned by the
     * sampling run; NULL = encode at every call */
    struct sd_control_hints *hints;
} sd_cond_model;

/* comfy.samplers.resolve_areas_and_cond_masks_multidim for a latent of
 * H x W: *out is a new list whose entries with a percentage area
 * (["percentage", h, w, y, x]) get (max(1, round(h H)), max(1, round(w W)),
 * round(y H), round(x W)) with Python's rounding, and whose entries with a
 * "mask" get it resized to H x W (bilinear, a 2-dim mask lifted to one
 * batch item); with set_area_to_bounds their area becomes the bounding box
 * of the mask's non-zero values over the batch, at least 8 x 8 ((8, 8, 0,
 * 0) for an empty mask). Other entries are shared. Errors name the entry. */
sd_status sd_cond_resolve(const sd_value *list, int64_t H, int64_t W, sd_value **out, sd_error *err);

/* ---- 9-channel inpainting UNets (BaseModel.concat_cond, concat_keys
 * "mask", "masked_image") ------------------------------------------------------
 * sd_inpaint_concat: [B, 1 + C, H, W] = round(mask's first channel) | image
 * for a latent of `shape` [B, C, H, W]; mask [B, 1 or C, H, W] or NULL, then
 * ones | the latent of a neutral grey image (the image is not read). NULL
 * when out of memory.
 * sd_cond_concat: *out is a new list whose entries carrying
 * "concat_mask" (InpaintModelConditioning's, any [.., h, w]) or
 * "concat_latent_image" (VAE space [b, C, h, w]) get "c_concat": the
 * entry's mask (else denoise_mask, the run's [B, C, H, W] noise mask, or
 * none) resized (bilinear, centre crop), rounded and batched
 * (resize_to_batch_size), and the entry's latent in model space
 * (process_latent_in, else latent_in) resized and batched likewise. With
 * ip2p (8-channel InstructPix2Pix UNets, IP2P.concat_cond) only
 * "concat_latent_image" counts: c_concat is that latent as it is (not
 * scaled), resized and batched; the run's concat is zeros [B, C, H, W].
 * The sampler feeds an entry's c_concat, or the run's concat, to the model. */
sd_tensor *sd_inpaint_concat(const sd_tensor *mask, const sd_tensor *image, const int64_t *shape);
struct sd_latent_format;
sd_status sd_cond_concat(const sd_value *list, int ip2p, const sd_tensor *denoise_mask, const sd_tensor *latent_in,
                         const struct sd_latent_format *fmt, sd_value **out, sd_error *err);

/* ---- unclip_conditioning (unCLIPConditioning) at sampling -----------------------
 * sd_cond_unclip_adm: SD2.1 unCLIP (comfy.model_base.SD21UNCLIP.encode_adm):
 * *y = the entry's ADM vector [1, adm]: zeros without "unclip_conditioning"
 * (unCLIPConditioning's list of {"clip_vision_output", "strength",
 * "noise_augmentation"}), else sd_unet_unclip_adm (models/unet/unet.h) over
 * every image of every item in order, with seed - 10 (seed: the sampling
 * run's) and merge augmentation 0.05. rng is the run's stand-in for torch's
 * default generator, reseeded and drawn from as ComfyUI does. Embeddings of
 * another width than adm / 2 are SD_ERR_INVALID (ComfyUI's torch fails on
 * them too).
 * sd_cond_unclip_pooled: SDXL and its refiner (model_base.sdxl_pooled,
 * "revision"): for an entry with "unclip_conditioning", *pooled = the first
 * 1280 values of sd_unet_unclip_adm over width-1280 embeddings (ViT-bigG's),
 * merge augmentation 0, seed - 10, which replace its pooled_output; NULL for
 * an entry without (its pooled_output stays).
 * sd_cond_unclip: what process_conds' encode_model_conds does with them,
 * list by list in ComfyUI's order: *out is a new list of shallow copies,
 * for unCLIP (sdxl 0) each carrying "y" (its model_conds["y"]; the sampler
 * feeds an entry's "y" to the UNet), for SDXL (sdxl 1) those with
 * unclip_conditioning carrying the new "pooled_output". */
struct sd_rng;
sd_status sd_cond_unclip_adm(const sd_value *entry, int adm, uint64_t seed, struct sd_rng *rng, sd_tensor **y,
                             sd_error *err);
sd_status sd_cond_unclip_pooled(const sd_value *entry, uint64_t seed, struct sd_rng *rng, sd_tensor **pooled,
                                sd_error *err);
sd_status sd_cond_unclip(const sd_value *list, int sdxl, int adm, uint64_t seed, struct sd_rng *rng,
                         sd_value **out, sd_error *err);

/* sd_guider_model_fn over an sd_cond_model (ud). */
sd_status sd_cond_model_eval(void *ud, const sd_tensor *x, float sigma, const int *conds,
                             int n_conds, sd_tensor **outs, sd_error *err);
/* sd_guider_skip_fn over an sd_cond_model (ud): its positive prediction with
 * the post function's blocks left out (a copy of the model with skip set),
 * or with the UNet's middle-block self-attention perturbed (perturb_attn);
 * for SelfAttentionGuidance degraded - p: degraded = sd_sag_degrade of
 * `uncond` with the recorded attention, p the negative prediction at
 * degraded + x - uncond (recording nothing). */
struct sd_cfg_slg;
sd_status sd_cond_model_eval_skip(void *ud, const sd_tensor *x, float sigma, const struct sd_cfg_slg *post,
                                  const float *uncond, sd_tensor *out, sd_error *err);

/* ---- common_ksampler ---------------------------------------------------------
 * Before sampling the conditioning lists are completed as process_conds
 * does: an entry with an area gets an opposite entry of the same area in the
 * other list (the conditioning of the smallest entry there enclosing it),
 * and controls from ControlNetApply (control_apply_to_uncond) are copied to
 * negative entries that have none. */

/* Observation hooks for tests and debugging (all optional). */
typedef struct sd_ksample_hooks {
    /* After the schedule and noise are known: sigmas as sampled, the initial
     * noise and the start latent x (model space). */
    void (*on_start)(void *ud, const float *sigmas, int n, const sd_tensor *noise,
                     const sd_tensor *x);
    /* Each sampler step: x at its start, the guided prediction. */
    void (*on_step)(void *ud, int step, int total, const sd_tensor *x,
                    const sd_tensor *denoised);
    sd_cond_model_tap_fn on_model; /* per conditioning prediction */
    sd_cond_model_adm_tap_fn on_adm; /* SDXL adm vectors */
    void *ud;
    sd_cond_model_forward_tap_fn on_forward; /* each network forward (after ud: older
                                              * positional initialisers stay valid) */
} sd_ksample_hooks;

struct sd_lora_stack;
struct sd_model_patches; /* nodes/loaders/loaders.h */

typedef struct sd_ksample_args {
    sd_checkpoint *ckpt;     /* the MODEL's checkpoint */
    struct sd_lora_stack *loras; /* the MODEL's LoRA stack, NULL = none */
    /* the MODEL's ModelSamplingDiscrete / RescaleCFG patches, NULL = none */
    const struct sd_model_patches *patches;
    uint64_t seed;
    int steps;
    double cfg;
    const char *sampler_name;
    const char *scheduler;
    const sd_value *positive, *negative; /* CONDITIONING */
    const sd_value *latent;              /* LATENT dict */
    double denoise;
    int disable_noise;      /* KSamplerAdvanced add_noise = disable */
    int start_step;         /* -1 = not given */
    int last_step;          /* -1 = not given */
    int force_full_denoise; /* return_with_leftover_noise = disable */
    const sd_ksample_hooks *hooks;
} sd_ksample_args;

/* comfy.sample.fix_empty_latent_channels, which KSampler, KSamplerAdvanced,
 * SamplerCustom and SamplerCustomAdvanced apply to their latent first (so
 * sd_nodes_common_ksampler and sd_nodes_sample do): an all-zero latent
 * whose channel count is not the MODEL's latent channels becomes zeros of
 * the MODEL's width (EmptyLatentImage's 4 channels given to Flux: 16),
 * other keys kept; any other latent is returned as it is. *out is a new
 * reference (the input itself when nothing changes). latent may be NULL. */
sd_status sd_nodes_fix_empty_latent(sd_checkpoint *ckpt, const sd_value *latent, sd_value **out,
                                    sd_error *err);

/* Fills the KSampler node defaults (seed 0, 20 steps, cfg 8, euler, normal,
 * denoise 1, no step range). */
void sd_ksample_args_init(sd_ksample_args *a);

/* nodes.common_ksampler: *out is a new LATENT (the input dict with
 * "samples" replaced by the result in VAE space). Reports per-step progress
 * through ctx and stops with SD_ERR_CANCELLED on interrupt. */
sd_status sd_nodes_common_ksampler(sd_node_ctx *ctx, const sd_ksample_args *a, sd_value **out,
                                   sd_error *err);

/* ---- one sampling run (comfy.samplers.CFGGuider.sample and its kin) --------------
 * What KSampler, SamplerCustom and SamplerCustomAdvanced share: the noise
 * (prepare_noise(seed, batch_index) or zeros), process_latent_in, the
 * inpaint mask and 9-channel concat, noise_scaling at sigmas[0],
 * process_conds over the guider's conditioning lists, the guided denoiser
 * (KSamplerX0Inpaint around it when the latent has a noise_mask; "ddim"
 * re-noises with seed + 1), the sampler, process_latent_out. */

typedef enum sd_guide_kind {
    SD_GUIDE_CFG = 0, /* CFGGuider (KSampler): positive, negative, cfg */
    SD_GUIDE_BASIC,   /* BasicGuider: positive only, cfg 1 */
    SD_GUIDE_DUAL_CFG, /* DualCFGGuider: positive (cond1), middle (cond2), negative */
    SD_GUIDE_PERP_NEG  /* PerpNegGuider: positive, negative, middle (the empty conditioning) */
} sd_guide_kind;

/* A guider: the MODEL and what drives it. Borrowed pointers. */
typedef struct sd_guide {
    sd_guide_kind kind;
    sd_checkpoint *ckpt;
    struct sd_lora_stack *loras;
    const struct sd_model_patches *patches; /* NULL = none */
    const sd_value *positive, *negative, *middle;
    double cfg;  /* CFG: cfg; DUAL_CFG: cfg_conds (cond1 against cond2) */
    double cfg2; /* DUAL_CFG: cfg_cond2_negative; PERP_NEG: neg_scale */
    int nested;  /* DUAL_CFG: style "nested" */
} sd_guide;

typedef struct sd_sample_args {
    sd_guide guide;
    const char *sampler_name;    /* a sd_sampler_find() name */
    sd_sampler_params options;   /* eta, s_noise, r, lms_order, sde_solver (rest ignored) */
    const float *sigmas;         /* n_sigmas values, used as given */
    int n_sigmas;
    int add_noise;               /* 0: zero noise (DisableNoise, add_noise off) */
    uint64_t seed;               /* noise seed; also seeds the sampler's own noise */
    const sd_value *latent;      /* LATENT dict */
    const sd_ksample_hooks *hooks;
} sd_sample_args;

/* CFG guider without conditioning, sampler options at their defaults,
 * add_noise on, seed 0. */
void sd_sample_args_init(sd_sample_args *a);

/* Runs the sampler. *out: a new LATENT (the input dict, "samples" replaced).
 * out_denoised (may be NULL): a new LATENT with the denoised estimate of
 * the last sampler callback (ComfyUI's x0_output, process_latent_out), or
 * another reference to *out when no step ran. n_sigmas == 0 returns the
 * input latent unchanged, as ComfyUI. Progress, previews and interrupts go
 * through ctx; errors name the input concerned. */
sd_status sd_nodes_sample(sd_node_ctx *ctx, const sd_sample_args *a, sd_value **out,
                          sd_value **out_denoised, sd_error *err);

/* The BasicGuider / DualCFGGuider / PerpNegGuider denoisers
 * (nodes/sampling/guide.c), as Guider_Basic, Guider_DualCFG and
 * Guider_PerpNeg.predict_noise compute them in float32. */
typedef struct sd_guide_state {
    const sd_guide *g;
    sd_cond_model *cm;
    sd_tensor *buf[4]; /* scratch for three predictions and a CFG result, allocated on first use */
} sd_guide_state;

void sd_guide_state_init(sd_guide_state *s, const sd_guide *g, sd_cond_model *cm);
void sd_guide_state_release(sd_guide_state *s);
sd_denoiser sd_guide_state_denoiser(sd_guide_state *s);

#endif
