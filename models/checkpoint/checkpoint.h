/* checkpoint.h - single-file checkpoints and model files (Stable Diffusion,
 * Flux): detection, lazy loading of the diffusion model, text encoder and
 * VAE, and the process-lifetime store of loaded models.
 *
 * A checkpoint is opened (memory-mapped, header validated, architecture
 * detected from key names and shapes) without loading any weight. Each part
 * is loaded on first request, so a workflow whose text encodes come from
 * the cache never loads the text encoder. Once every present part is loaded
 * the file mapping is dropped: weights are held once, in the backend's dtype.
 *
 * Layouts (the keys real SD1.x / SDXL / Flux files use):
 *   UNet  model.diffusion_model.*   (models/unet/unet.h detection: SD1, SD2 or
 *                                    SDXL), or bare (a diffusion_models/ file)
 *   DiT   the Flux DiT's keys (models/flux/flux.h) under model.diffusion_model.
 *         (Comfy-Org single-file checkpoints) or bare (diffusion_models/
 *         flux1-dev.safetensors); family SD_CKPT_FLUX. The SD3 MMDiT
 *         (models/sd3/sd3.h: joint_blocks.*, the same two ways:
 *         sd3.5_medium_incl_clips_t5xxlfp8.safetensors, diffusion_models/
 *         sd3.5_medium.safetensors); family SD_CKPT_SD3. Z-Image's NextDiT
 *         (models/zimage/zimage.h: cap_embedder.*, bare as in
 *         diffusion_models/z_image_turbo_bf16.safetensors, or under
 *         model.diffusion_model.); family SD_CKPT_ZIMAGE
 *   VAE   first_stage_model.*       ("" for a standalone VAE file such as
 *                                    Flux's 16-channel ae; vae.* in the
 *                                    single-file Flux checkpoints)
 *   vision embedder.model.visual.* (SD2.1 unCLIP files: an OpenCLIP ViT-H or
 *         ViT-L tower, models/vision/clip_vision.h; info.has_clip_vision).
 *         A label_emb UNet is unCLIP (family SD2, info.unclip) when the file
 *         has that tower or SD2's text encoder, or has ComfyUI's unCLIP
 *         widths (context 1024, adm 1536 / 2048); otherwise SDXL
 *   text  cond_stage_model.transformer.* (SD1), cond_stage_model.model.*
 *         (SD2.x, OpenCLIP ViT-H) or conditioner.embedders.* (SDXL; SD2.x
 *         in the SGM layout: embedders.0.model with a label_emb-less UNet),
 *         text_encoders.{t5xxl,clip_l}.transformer.* (Flux single files),
 *         text_encoders.{clip_l,clip_g,t5xxl}.transformer.* (SD3), or
 *         the bare keys of a standalone text-encoder file (a T5-XXL, a CLIP;
 *         sd_text_encoder_detect in models/text/text_encode.h)
 * A bare UNet in the diffusers layout (conv_in, down_blocks.*: a
 * diffusers folder's unet/ file) is renamed to the ldm names in memory
 * (sd_unet_diffusers_rename) when opened; a diffusers VAE is read in its
 * own names (models/vae/vae.h).
 * Extra keys (model_ema.*, betas, position_ids, ...) are ignored. The file
 * is a .safetensors, a PyTorch zip checkpoint (.ckpt, .pt, .pth) or a GGUF
 * file, told apart by its first bytes; a torch file is read weights-only,
 * through formats/torch_ckpt.h, with Lightning's "state_dict" unwrapped; a
 * GGUF file with the names ComfyUI-GGUF gives its tensors
 * (models/checkpoint/gguf_model.h: llama.cpp's T5 names mapped back),
 * quantized tensors kept quantized. SD2.x
 * (OpenCLIP cond_stage_model.model.*), v-prediction files and unknown layouts
 * are SD_ERR_UNSUPPORTED naming what was found. NaN/Inf weights are reported
 * by tensor name when the part is loaded (models/checkpoint/weights.h).
 *
 * Thread safety: a checkpoint may be shared between threads; lazy loads are
 * serialised by a mutex. The parts returned are borrowed from the checkpoint
 * and live as long as it; running them uses the backend's sticky error, so
 * one backend runs one model at a time.
 */
#ifndef SD_CHECKPOINT_H
#define SD_CHECKPOINT_H

#include "core/error.h"
#include "kernels/backend.h"
#include "models/dmodel/dmodel.h"
#include "models/flux/flux.h"
#include "models/sd3/sd3.h"
#include "models/sampling/latent_format.h"
#include "models/sampling/model_sampling.h"
#include "models/text/text_encode.h"
#include "models/unet/unet.h"
#include "models/vae/vae.h"
#include "models/zimage/zimage.h"

typedef enum sd_ckpt_family {
    SD_CKPT_NONE = 0, /* no UNet (a standalone VAE or text-encoder file) */
    SD_CKPT_SD1 = 1,
    SD_CKPT_SDXL = 2,
    SD_CKPT_SD2 = 3,  /* SD2.x: OpenCLIP-H text encoder, linear proj_in, eps or v */
    SD_CKPT_FLUX = 4,  /* Flux.1 DiT (dev: guidance_embed; schnell) */
    SD_CKPT_SD3 = 5,   /* SD3 / SD3.5 MMDiT (Medium's MMDiT-X, Large) */
    SD_CKPT_ZIMAGE = 6 /* Z-Image's NextDiT (models/zimage) */
} sd_ckpt_family;

/* Where unCLIP checkpoints keep their CLIP vision tower (OpenCLIP layout;
 * supported_models.SD21UnclipL/H clip_vision_prefix). */
#define SD_CKPT_CLIP_VISION_PREFIX "embedder.model.visual."

typedef struct sd_ckpt_info {
    sd_ckpt_family family;
    /* has_unet: a diffusion model of any kind (the UNet, or the DiT of the
     * FLUX / SD3 families); dmodel_kind says which */
    int has_unet, has_text_encoder, has_vae;
    sd_te_kind te_kind;      /* what the text-encoder keys make (0: none; sd_text_encoder_detect) */
    sd_dmodel_kind dmodel_kind;
    const char *dmodel_prefix; /* "model.diffusion_model." or "" (a bare model file) */
    sd_unet_config unet;     /* valid when dmodel_kind is SD_DMODEL_UNET */
    sd_flux_config flux;     /* valid when dmodel_kind is SD_DMODEL_FLUX */
    sd_sd3_config sd3;       /* valid when dmodel_kind is SD_DMODEL_MMDIT */
    sd_zimage_config zimage; /* valid when dmodel_kind is SD_DMODEL_ZIMAGE */
    const char *vae_prefix;  /* "first_stage_model.", "vae." or "" */
    /* the MODEL's latent format (process_latent_in/out at sampling, previews):
     * SD1's for SD1/SD2 and a bare VAE, SDXL's for SDXL, Flux's for FLUX and
     * ZIMAGE, SD3's for SD3 */
    const sd_latent_format *latent_format;
    sd_prediction prediction;
    int inpaint;             /* UNet in_channels == 9: latent | mask | masked image */
    int ip2p;                /* UNet in_channels == 8: latent | image latent (InstructPix2Pix) */
    /* SD2.1 unCLIP (family SD2, comfy.model_base.SD21UNCLIP): the UNet's
     * label_emb takes the noise-augmented image embedding and its noise
     * level's embedding, adm_in_channels = 2 x the embedding width
     * (models/unet/unet.h sd_unet_unclip_adm) */
    int unclip;
    /* a CLIP vision tower under SD_CKPT_CLIP_VISION_PREFIX (unCLIP files;
     * unCLIPCheckpointLoader's CLIP_VISION) */
    int has_clip_vision;
    int random_weights;      /* metadata "sdflow_random_weights" == "true" */
} sd_ckpt_info;

typedef struct sd_checkpoint_opts {
    /* --tokenizer-dir; NULL = only SDFLOW_TOKENIZER_DIR and the checkpoint's
     * own directory (models/text/tokenizer.h resolution order). Copied. */
    const char *tokenizer_dir;
    /* --comfyui-dir, where a T5 vocabulary may be found
     * (models/text/t5_tokenizer.h resolution order); NULL = none. Copied. */
    const char *comfyui_dir;
    /* CLIP-L / bigG attention heads when not width / 64 (tiny test models;
     * see sd_te_load_opts); 0 = width / 64. */
    int clip_l_heads;
    int clip_g_heads;
    /* The width that makes a Qwen3 Qwen3-4B (tiny test models; see
     * sd_te_load_opts); 0 = 2560. */
    int qwen3_4b_width;
    /* dtype of the diffusion model's weights on the backend: SD_F32 keeps
     * narrow (F16/BF16/fp8) weights as stored where the backend widens them
     * per op; F8_E4M3 / F8_E5M2 convert every diffusion-model tensor to it at
     * load (UNETLoader's weight_dtype). Text encoders and VAEs keep theirs. */
    sd_dtype weight_dtype;
    /* The rounding of the diffusion model's quantized Linear weights (GGUF;
     * ComfyUI-GGUF's dequant_dtype, which it applies to Linear layers only:
     * every 2-D weight and its bias here). 0 = SD_DQ_F16, its default. */
    sd_dequant_math dequant;
} sd_checkpoint_opts;

void sd_checkpoint_opts_default(sd_checkpoint_opts *o);

typedef struct sd_checkpoint sd_checkpoint;

/* Open and detect. *out holds one reference (sd_checkpoint_unref). The
 * backend is borrowed and must outlive the checkpoint. Errors:
 * SD_ERR_UNSUPPORTED (a pickle the weights-only reader refuses, SDXL
 * v-prediction keys, no part we can use), SD_ERR_NOT_FOUND / SD_ERR_IO / SD_ERR_FORMAT from
 * opening the file; messages name the file. */
sd_status sd_checkpoint_open(sd_backend *be, const char *path, const sd_checkpoint_opts *opts,
                             sd_checkpoint **out, sd_error *err);
/* Detection alone, for validation: opens the file, runs sd_checkpoint_open's
 * architecture detection on names and shapes (no tensor is read, so an SD2
 * file reports eps prediction) and closes it. The same errors, same messages. */
sd_status sd_checkpoint_probe(const char *path, sd_ckpt_info *info, sd_error *err);
sd_checkpoint *sd_checkpoint_ref(sd_checkpoint *c); /* NULL-safe, returns c */
void sd_checkpoint_unref(sd_checkpoint *c);         /* NULL-safe */

const sd_ckpt_info *sd_checkpoint_info(const sd_checkpoint *c);
const char *sd_checkpoint_path(const sd_checkpoint *c);
sd_backend *sd_checkpoint_backend(const sd_checkpoint *c);
/* "sd1", "sd2", "sdxl", "flux", "sd3", "zimage" or "none". */
const char *sd_ckpt_family_name(sd_ckpt_family f);

/* The parts, loaded on first call (borrowed; NULL never returned on SD_OK).
 * SD_ERR_NOT_FOUND when the file has no such part; load errors name the
 * file and tensor. A failed load is retried on the next call. The text
 * encoder also needs its tokenizers (resolved then: the CLIP vocabulary, and
 * for a T5 the T5 tokenizer.json; SD_ERR_NOT_FOUND says how to configure
 * them). */
sd_status sd_checkpoint_unet(sd_checkpoint *c, sd_unet **out, sd_error *err);
/* The diffusion model of any kind behind the interface the sampler uses
 * (models/dmodel/dmodel.h), loaded on first call: the UNet (as
 * sd_checkpoint_unet), the Flux DiT or the SD3 MMDiT, weights in the checkpoint's
 * weight_dtype (sd_checkpoint_opts). sd_checkpoint_unet on a DiT file is
 * SD_ERR_UNSUPPORTED naming the family. *out borrows the network. */
sd_status sd_checkpoint_dmodel(sd_checkpoint *c, sd_dmodel *out, sd_error *err);
/* Latent channels of the diffusion model (4 for the SD families, the DiT's
 * out_channels for Flux and SD3), 0 without one. From detection: nothing loads. */
int sd_ckpt_info_latent_channels(const sd_ckpt_info *info);
sd_status sd_checkpoint_text_encoder(sd_checkpoint *c, sd_text_encoder **out, sd_error *err);
sd_status sd_checkpoint_vae(sd_checkpoint *c, sd_vae **out, sd_error *err);

/* Which parts are loaded already (1/0 each; NULL pointers skipped; unet:
 * the diffusion model of any kind). For
 * tests and status displays: loading is lazy. */
void sd_checkpoint_loaded(sd_checkpoint *c, int *unet, int *text_encoder, int *vae);

/* Part holds: a value that may use a part (a MODEL, CLIP or VAE handle)
 * holds it for its lifetime. When the last hold on a part is dropped and the
 * checkpoint frees unused parts (sd_model_store_free_unused), the part is
 * freed there and then, and loads again if asked for later; otherwise holds
 * change nothing. Parts obtained without a hold (tests, the benchmark) are
 * never freed early. */
enum { SD_CKPT_PART_UNET = 1, SD_CKPT_PART_TEXT = 2, SD_CKPT_PART_VAE = 4 };
void sd_checkpoint_hold(sd_checkpoint *c, unsigned parts);    /* NULL-safe */
void sd_checkpoint_release(sd_checkpoint *c, unsigned parts); /* NULL-safe */

/* ---- the process-lifetime model store (sd_env.models) ----------------------
 * Maps a file (path, size, mtime, backend, tokenizer dir) to its open
 * checkpoint, so a REPL or a second run reuses loaded weights. A file
 * replaced on disk opens afresh. The store holds one reference per entry;
 * free it before the backend. */
typedef struct sd_model_store sd_model_store;

sd_model_store *sd_model_store_new(void); /* NULL when out of memory */
void sd_model_store_free(sd_model_store *s); /* NULL-safe */
/* Open through the store (s may be NULL: a plain sd_checkpoint_open). *out
 * receives a new reference. */
sd_status sd_model_store_open(sd_model_store *s, sd_backend *be, const char *path,
                              const sd_checkpoint_opts *opts, sd_checkpoint **out,
                              sd_error *err);
/* ComfyUI's model_options for text encoders whose configuration the
 * shapes do not give (clip_l_heads, clip_g_heads, qwen3_4b_width: tiny
 * test models, as the reference's *_model_config and detection overrides): every later open through the store
 * whose opts leave one of them 0 takes the store's. Directories in o are
 * ignored; NULL clears. */
void sd_model_store_set_defaults(sd_model_store *s, const sd_checkpoint_opts *o);
/* Number of entries (tests). */
size_t sd_model_store_count(const sd_model_store *s);
/* One-shot runs (`sdflow run`): checkpoints opened through the store from
 * now on free each part when its last hold goes (sd_checkpoint_release), so
 * the text encoder is gone before the UNet runs and the UNet before the VAE
 * decodes. Off by default: a REPL keeps loaded parts for reruns. */
void sd_model_store_free_unused(sd_model_store *s, int on);

#endif
