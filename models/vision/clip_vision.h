/* clip_vision.h - CLIP vision towers (ComfyUI's CLIP_VISION: clip_vision.py's
 * ClipVisionModel over clip_model.CLIPVisionModelProjection): OpenAI ViT-L/14,
 * OpenCLIP ViT-H/14 and ViT-bigG/14, as CLIPVisionLoader / CLIPVisionEncode
 * and unCLIP checkpoints use them.
 *
 * Key layouts, found under a caller-given prefix:
 *   HF       (CLIPVisionModelWithProjection: clip_vision_g.safetensors,
 *            CLIP-ViT-H-14-laion2B, clip_vision_l): vision_model.embeddings.
 *            {class_embedding, patch_embedding.weight, position_embedding.weight},
 *            vision_model.pre_layrnorm, vision_model.encoder.layers.N.*,
 *            vision_model.post_layernorm, visual_projection.weight ([P, W]).
 *   OpenCLIP (unCLIP checkpoints' "embedder.model.visual.", open_clip files'
 *            "visual."): class_embedding, conv1.weight, positional_embedding,
 *            ln_pre, transformer.resblocks.N.*, ln_post, proj ([W, P], x @ proj).
 * ComfyUI converts the second to the first (clip_vision.convert_to_transformers);
 * the numbers are the same.
 *
 * Configuration, as comfy.clip_vision.load_clipvision_from_sd picks its
 * config file by the layers present: layer 47 -> clip_vision_config_g
 * (bigG: GELU), layer 30 -> _h (GELU), layer 22 -> _vitl (quick_gelu; 577
 * positions: the 336-pixel ViT-L); fewer layers: not a CLIP vision model
 * (ComfyUI's "clip vision file is invalid"). Every one of those configs has
 * 16 heads. Widths come from the shapes (hidden from the class embedding,
 * MLP from fc1, projection from visual_projection), the patch size from the
 * patch convolution and the image size from the positions: (size / patch)^2
 * + 1 = positions. SigLIP and DINOv2 encoders are refused
 * (SD_ERR_UNSUPPORTED), as is a file with a multi_modal_projector (llava).
 *
 * Ownership: the model owns its backend weights (the file may be closed after
 * loading); the backend must outlive it. Inputs are borrowed, outputs are new
 * tensors owned by the caller. One backend must not run two forwards at once
 * (its sticky error).
 */
#ifndef SD_CLIP_VISION_H
#define SD_CLIP_VISION_H

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/text/clip.h"

typedef enum sd_clip_vision_kind {
    SD_CLIP_VISION_VIT_L = 1, /* clip_vision_config_vitl(_336).json */
    SD_CLIP_VISION_VIT_H,     /* clip_vision_config_h.json */
    SD_CLIP_VISION_VIT_G      /* clip_vision_config_g.json */
} sd_clip_vision_kind;

typedef struct sd_clip_vision_config {
    sd_clip_vision_kind kind;
    int openclip;        /* the OpenCLIP key layout */
    int hidden, heads, layers, mlp;
    sd_clip_act act;
    int patch, image_size, positions; /* positions = (image_size / patch)^2 + 1 */
    int proj_dim;        /* visual projection width */
} sd_clip_vision_config;

typedef struct sd_clip_vision sd_clip_vision;

/* Name of a kind as ComfyUI's config file: "vitl", "h", "g". */
const char *sd_clip_vision_kind_name(sd_clip_vision_kind k);

/* Find a vision tower under `prefix` ("" for a standalone file, "visual." or
 * "embedder.model.visual." in checkpoints): SD_OK with *cfg filled when one
 * is there (no weight read, be may be NULL), SD_ERR_NOT_FOUND when none,
 * SD_ERR_UNSUPPORTED for a kind ComfyUI loads and sdflow does not, or too few
 * layers for any of ComfyUI's configs. */
sd_status sd_clip_vision_probe(sd_st_file *f, const char *prefix, sd_clip_vision_config *cfg,
                               sd_error *err);
/* Probe, then bind every weight as F32 on be. Errors name the file and key. */
sd_status sd_clip_vision_load(sd_backend *be, sd_st_file *f, const char *prefix,
                              sd_clip_vision **out, sd_error *err);
/* Open a file (.safetensors or a torch checkpoint) and load the tower at its
 * top level, or under "visual." (open_clip's layout), as comfy.clip_vision.load. */
sd_status sd_clip_vision_load_file(sd_backend *be, const char *path, sd_clip_vision **out,
                                   sd_error *err);
/* Open a file and load the tower under `prefix` (unCLIP checkpoints:
 * "embedder.model.visual."). */
sd_status sd_clip_vision_load_file_prefix(sd_backend *be, const char *path, const char *prefix,
                                          sd_clip_vision **out, sd_error *err);
/* The same check without a backend (validation of the loader's combo). */
sd_status sd_clip_vision_probe_file(const char *path, sd_error *err);
void sd_clip_vision_free(sd_clip_vision *m); /* NULL-safe */
const sd_clip_vision_config *sd_clip_vision_get_config(const sd_clip_vision *m);

/* comfy.clip_model.clip_preprocess: image [N, H, W, C>=3] F32 (IMAGE; only
 * the first three channels are used) -> pixel values [N, 3, size, size]:
 * unless already size x size, resized with the antialiased bicubic
 * (crop: the short side to size, aspect kept with Python's round, then the
 * centre cut; no crop: stretched to size x size), quantized to 8 bits
 * (round(clip(255 x, 0, 255)) / 255, half to even) and normalised per
 * channel with mean / std (float32). */
sd_status sd_clip_vision_preprocess(const sd_tensor *image, int size, int crop,
                                    const float mean[3], const float std[3], sd_tensor **out,
                                    sd_error *err);
/* ComfyUI's default CLIP mean and std (every config it ships). */
extern const float sd_clip_vision_mean[3], sd_clip_vision_std[3];

/* ComfyUI's encode_image output (CLIP_VISION_OUTPUT). */
typedef struct sd_clip_vision_output {
    sd_tensor *last_hidden_state;  /* [N, positions, W]: the last layer, no post LN */
    sd_tensor *penultimate;        /* [N, positions, W]: layer -2's output */
    sd_tensor *image_embeds;       /* [N, P]: visual_projection(post_layernorm(x[:, 0])) */
} sd_clip_vision_output;
void sd_clip_vision_output_free(sd_clip_vision_output *o); /* NULL-safe */

/* Preprocess image at the model's size (crop: "center" = 1, "none" = 0) and
 * run the tower: embeddings (patch conv, class token, positions),
 * pre_layrnorm, the layers (full attention), as CLIPVision.forward with
 * intermediate_output -2. */
sd_status sd_clip_vision_encode(sd_clip_vision *m, const sd_tensor *image, int crop,
                                sd_clip_vision_output *out, sd_error *err);
/* The tower on already preprocessed pixels [N, 3, S, S] (S = image_size). */
sd_status sd_clip_vision_forward(sd_clip_vision *m, const sd_tensor *pixels,
                                 sd_clip_vision_output *out, sd_error *err);

#endif
