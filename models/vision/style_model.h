/* style_model.h - style models (ComfyUI's STYLE_MODEL, comfy.sd.load_style_model):
 * the T2I-Adapter style adapter (comfy/t2i_adapter/adapter.py StyleAdapter,
 * coadapter-style / t2iadapter_style_sd14v1).
 *
 * The adapter appends num_token learned style tokens to a CLIP vision
 * output's last_hidden_state [N, L, W], runs ln_pre, n pre-LN transformer
 * layers (nn.MultiheadAttention with a fused in_proj, full attention, 8
 * heads as ComfyUI builds it, quick_gelu MLP), ln_post on the style tokens
 * and projects them with proj [W, C] (x @ proj): [N, num_token, C].
 * Keys: style_embedding [1, T, W], ln_pre, ln_post, proj,
 * transformer_layes.N.{ln_1, attn.in_proj_weight/bias, attn.out_proj,
 * ln_2, mlp.c_fc, mlp.c_proj}. ComfyUI builds it with width 1024, context
 * 768, 8 heads, 3 layers, 8 tokens (the real file's shapes); sdflow reads
 * the widths, token count and layers from the shapes and keeps the 8 heads.
 * Flux Redux files (redux_up / redux_down: an MLP over SigLIP embeddings)
 * are refused (SD_ERR_UNSUPPORTED): sdflow has no SigLIP tower.
 *
 * Ownership as models/vision/clip_vision.h. */
#ifndef SD_STYLE_MODEL_H
#define SD_STYLE_MODEL_H

#include "formats/safetensors.h"
#include "kernels/backend.h"

typedef struct sd_style_model sd_style_model;

typedef struct sd_style_model_config {
    int width, context, heads, layers, tokens, mlp;
} sd_style_model_config;

sd_status sd_style_model_probe(sd_st_file *f, sd_style_model_config *cfg, sd_error *err);
sd_status sd_style_model_load(sd_backend *be, sd_st_file *f, sd_style_model **out,
                              sd_error *err);
/* Open (.safetensors or a torch checkpoint), probe / load. */
sd_status sd_style_model_load_file(sd_backend *be, const char *path, sd_style_model **out,
                                   sd_error *err);
sd_status sd_style_model_probe_file(const char *path, sd_error *err);
void sd_style_model_free(sd_style_model *m); /* NULL-safe */
const sd_style_model_config *sd_style_model_get_config(const sd_style_model *m);

/* StyleModel.get_cond: hidden [N, L, width] F32 (a CLIP_VISION_OUTPUT's
 * last_hidden_state) -> *out [N, tokens, context] F32 (new). */
sd_status sd_style_model_forward(sd_style_model *m, const sd_tensor *hidden, sd_tensor **out,
                                 sd_error *err);

#endif
