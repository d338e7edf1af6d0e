/* loaders.h - the model loader family (CheckpointLoaderSimple alias
 * LoadCheckpoint, VAELoader) and the MODEL / CLIP / VAE handles every
 * model-using node reads.
 *
 * A handle value references an open checkpoint (models/checkpoint/checkpoint.h); the
 * weights load on first use by the node that needs them (KSampler loads the
 * UNet, CLIPTextEncode the text encoder, VAEDecode the VAE). Checkpoints
 * come from the model store in env->models (an sd_model_store, shared for
 * the process) when the front end set one, else they live as long as the
 * values that reference them.
 */
#ifndef SD_NODES_LOADERS_H
#define SD_NODES_LOADERS_H

#include <pthread.h>

#include "core/node.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/unet/unet.h"

struct sd_lora_stack; /* nodes/lora/lora_nodes.h */

/* What ModelSamplingDiscrete / ModelSamplingFlux and RescaleCFG put on a
 * MODEL: ComfyUI's "model_sampling" object patch (each such node replaces
 * the whole object: the last one wins) and its sampler_cfg_function. Plain
 * data, copied into every MODEL made from one that has it (LoRA loaders; a
 * merge keeps model1's, as ComfyUI's model1.clone() does). All zero = none. */
typedef struct sd_model_patches {
    int sampling_set;         /* a ModelSampling* node applied: */
    sd_ms_kind sampling_base; /*   SD_MS_DISCRETE (ModelSamplingDiscrete), SD_MS_FLUX
                               *   (ModelSamplingFlux), SD_MS_FLOW, or the continuous
                               *   kinds (ModelSamplingContinuousEDM / V) */
    sd_prediction sampling;   /*   discrete, continuous: its prediction type */
    int zsnr;                 /*   discrete: zsnr */
    double shift, multiplier; /*   flow kinds: their parameters (sd_model_sampling_init_flux
                               *   / _flow) */
    double sigma_min, sigma_max, sigma_data; /* continuous kinds
                                              * (sd_model_sampling_init_continuous) */
    sd_cfg_hook cfg;          /* RescaleCFG and the other CFG functions; each
                               * MODEL value holds a reference to the state of
                               * its pre-CFG functions (cfg.state[i], APG's
                               * momentum): a MODEL made from this one shares
                               * it, so it lives and carries across sampling
                               * runs as ComfyUI's closure does */
    /* PerpNeg's empty conditioning (cfg.fn == SD_CFG_FN_PERP_NEG): a
     * CONDITIONING value; each MODEL value holds a reference to it
     * (sd_nodes_model_value_patched takes one) */
    sd_value *perp_neg_empty;
    sd_unet_patches unet;     /* the UNet's patches (FreeU, ...; models/unet/unet.h);
                               * each MODEL value holds a reference to their
                               * hypernetworks (sd_unet_patch.hn) */
    int diff_diff;            /* DifferentialDiffusion's denoise_mask_function (the last */
    double diff_diff_strength; /*   one set wins), its strength (sd_inpaint.diff_diff) */
} sd_model_patches;

/* Handle payloads. Each owns one checkpoint reference and one reference on
 * its patch stack (LoRAs and merges, nodes/lora/lora_nodes.h; NULL = none). */
typedef struct sd_model_ref {
    sd_checkpoint *ckpt;
    struct sd_lora_stack *loras;
    sd_model_patches patches;
} sd_model_ref;

/* A CLIP is the text encoder of one file (a checkpoint's, or a standalone
 * text-encoder file's), or one made of several standalone files
 * (DualCLIPLoader: Flux's CLIP-L + T5-XXL). ckpt is the (first) file; more[]
 * the others. kind 0 = what the single file's own detection says; else the
 * kind the loader's `type` asked for (sd_text_encoder_combine). */
#define SD_CLIP_FILES_MAX 4
typedef struct sd_clip_ref {
    sd_checkpoint *ckpt;
    sd_checkpoint *more[SD_CLIP_FILES_MAX - 1]; /* NULL-padded */
    int n_more;
    sd_te_kind kind;
    int clip_skip; /* CLIPSetLastLayer's stop_at_clip_layer; 0 = not set */
    struct sd_lora_stack *loras;
    /* The encoder composed from the files' parts (borrowing their weights),
     * built on first use under mu and freed with the handle. */
    pthread_mutex_t mu;
    sd_text_encoder *combined;
} sd_clip_ref;

typedef struct sd_vae_ref {
    sd_checkpoint *ckpt;
} sd_vae_ref;

extern const sd_handle_type sd_handle_model; /* "MODEL" */
extern const sd_handle_type sd_handle_clip;  /* "CLIP" */
extern const sd_handle_type sd_handle_vae;   /* "VAE" */

/* New handle values (one reference for the caller); each takes a new
 * reference on `c`. NULL when out of memory. */
sd_value *sd_nodes_model_value(sd_checkpoint *c);
sd_value *sd_nodes_clip_value(sd_checkpoint *c, int clip_skip);
sd_value *sd_nodes_vae_value(sd_checkpoint *c);
/* Same with a LoRA stack (a new reference is taken; NULL = none). */
sd_value *sd_nodes_model_value_lora(sd_checkpoint *c, struct sd_lora_stack *loras);
/* Same with model patches (copied; NULL = none). */
sd_value *sd_nodes_model_value_patched(sd_checkpoint *c, struct sd_lora_stack *loras,
                                       const sd_model_patches *p);

/* The MODEL's sampling schedule: what a ModelSampling* node set (p may be
 * NULL), else the family's: Flux dev ModelSamplingFlux at shift 1.15 (at
 * every resolution, as ComfyUI's default), Flux schnell
 * ModelSamplingDiscreteFlow shift 1, the SD families the checkpoint's
 * prediction type. */
void sd_nodes_model_sampling_of(sd_checkpoint *c, const sd_model_patches *p,
                                sd_model_sampling *ms);
sd_value *sd_nodes_clip_value_lora(sd_checkpoint *c, int clip_skip, struct sd_lora_stack *loras);
/* A CLIP made of n (1..SD_CLIP_FILES_MAX) files meant as a text encoder of
 * `kind` (0: the single file's own). New references on every file. */
sd_value *sd_nodes_clip_value_files(sd_checkpoint *const *files, int n, sd_te_kind kind);
/* A CLIP over the same files and kind as `base` with another clip_skip and
 * LoRA stack (CLIPSetLastLayer, LoRA loaders). */
sd_value *sd_nodes_clip_value_like(const sd_clip_ref *base, int clip_skip,
                                   struct sd_lora_stack *loras);

/* The networks a MODEL / CLIP stands for: the checkpoint's part, or the
 * LoRA-patched view of it when the handle has a stack; for a CLIP of several
 * files, the encoder composed from their parts (patched the same way when
 * the handle has a stack). Borrowed (valid while the handle lives); loads
 * on first use. */
sd_status sd_nodes_model_unet(const sd_model_ref *m, sd_unet **out, sd_error *err);
/* The MODEL's diffusion network behind the interface the sampler uses
 * (models/dmodel/dmodel.h): the UNet (LoRA-patched when the handle has a
 * stack) or the Flux DiT (likewise; a model merge on Flux is
 * SD_ERR_UNSUPPORTED). *out borrows the network, valid while the handle
 * lives. */
sd_status sd_nodes_model_dmodel(const sd_model_ref *m, sd_dmodel *out, sd_error *err);
sd_status sd_nodes_clip_encoder(const sd_clip_ref *c, sd_text_encoder **out, sd_error *err);
/* The CLIP's encoder without its LoRA stack (what LoraLoader matches a
 * LoRA's text-encoder keys against and its stack patches). */
sd_status sd_nodes_clip_base_encoder(const sd_clip_ref *c, sd_text_encoder **out, sd_error *err);

/* A VAE or text-encoder node computes in the precision the env sets for it
 * (sd_env_node_precision of its SD_NODE_VAE / SD_NODE_TEXT_ENCODER flag):
 * begin switches ctx->env->backend to that precision and stores the one to
 * put back in *prev; end puts it back (the backend is shared by every node,
 * so call end on every path after a successful begin). An unknown name or
 * a precision the backend cannot compute is SD_ERR_UNSUPPORTED. Without a
 * backend in the env both do nothing. */
sd_status sd_nodes_precision_begin(const sd_node_ctx *ctx, unsigned node_flags, sd_precision *prev,
                                   sd_error *err);
void sd_nodes_precision_end(const sd_node_ctx *ctx, sd_precision prev);

/* Checked accessors for input i (named `name` in errors): borrowed payloads. */
sd_status sd_nodes_in_model(sd_value *const *in, int i, const char *name, sd_model_ref **out,
                            sd_error *err);
sd_status sd_nodes_in_clip(sd_value *const *in, int i, const char *name, sd_clip_ref **out,
                           sd_error *err);
sd_status sd_nodes_in_vae(sd_value *const *in, int i, const char *name, sd_vae_ref **out,
                          sd_error *err);

/* Resolve `name` in a models sub-folder and open it through the env's model
 * store (new checkpoint reference in *out). Errors name the input. */
sd_status sd_nodes_open_model(const sd_node_ctx *ctx, const char *folder, const char *name,
                              const char *input, sd_checkpoint **out, sd_error *err);
/* The same with the diffusion model's weights kept as weight_dtype (SD_F32:
 * as stored; sd_checkpoint_opts.weight_dtype). The store keys files by it,
 * so one file opened with two weight dtypes is two models. */
sd_status sd_nodes_open_model_ex(const sd_node_ctx *ctx, const char *folder, const char *name,
                                 const char *input, sd_dtype weight_dtype, sd_checkpoint **out,
                                 sd_error *err);
/* The same with the rounding of the diffusion model's quantized (GGUF)
 * Linear weights (sd_checkpoint_opts.dequant; UnetLoaderGGUFAdvanced's
 * dequant_dtype), also part of the store's key. */
sd_status sd_nodes_open_model_dq(const sd_node_ctx *ctx, const char *folder, const char *name,
                                 const char *input, sd_dtype weight_dtype, sd_dequant_math dequant,
                                 sd_checkpoint **out, sd_error *err);

/* Registers the family's table and the LoadCheckpoint alias. */
sd_status sd_nodes_loaders_register(sd_error *err);

#endif
