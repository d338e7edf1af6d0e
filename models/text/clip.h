/* clip.h - CLIP text transformers: OpenAI CLIP-L (SD1, SDXL 'l') and
 * OpenCLIP bigG (SDXL 'g'), as ComfyUI's clip_model.CLIPTextModel runs them.
 *
 * Two key layouts are read, both found under a caller-given prefix:
 *   HF       (transformers CLIPTextModel; "cond_stage_model.transformer." in
 *            SD1, "conditioner.embedders.0.transformer." in SDXL):
 *            text_model.embeddings.{token,position}_embedding.weight,
 *            text_model.encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj,
 *            layer_norm2, mlp.fc1, mlp.fc2}, text_model.final_layer_norm,
 *            optional text_projection.weight ([P, W] Linear). Older files
 *            without the "text_model." level are accepted too.
 *   OpenCLIP ("conditioner.embedders.1.model." in SDXL): token_embedding.weight,
 *            positional_embedding, transformer.resblocks.N.{ln_1,
 *            attn.in_proj_weight/bias (fused, split q, k, v), attn.out_proj,
 *            ln_2, mlp.c_fc, mlp.c_proj}, ln_final, text_projection ([W, P],
 *            applied as x @ text_projection). logit_scale is ignored.
 * The configuration comes from tensor shapes: width from the token table,
 * layers by counting, MLP width from fc1/c_fc, heads = width / 64 (true of
 * every CLIP text model Stable Diffusion uses, real or the tiny test
 * models). Checkpoint position_ids are ignored: positions are 0..n-1.
 *
 * Forward (pre-LN): x = tok_emb[ids] + pos_emb; per layer
 * x += out_proj(causal_attention(ln1 x)); x += fc2(act(fc1(ln2 x))); LayerNorm
 * eps 1e-5 everywhere. Compute goes through kernels/backend.h only.
 *
 * Ownership: sd_clip_load() returns a model owning its backend weights (the
 * safetensors file may be closed afterwards); the backend must outlive it.
 * Inputs are borrowed; outputs are new tensors owned by the caller. A model
 * is read-only during sd_clip_forward but uses the backend's sticky error, so
 * one backend must not run two forwards at once.
 */
#ifndef SD_CLIP_H
#define SD_CLIP_H

#include <stdint.h>
#include "formats/safetensors.h"
#include "kernels/backend.h"

/* Vocabulary ids shared by every CLIP tokenizer. */
#define SD_CLIP_BOS 49406
#define SD_CLIP_EOS 49407

typedef enum sd_clip_layout { SD_CLIP_LAYOUT_HF = 1, SD_CLIP_LAYOUT_OPENCLIP = 2 } sd_clip_layout;

typedef enum sd_clip_act {
    SD_CLIP_ACT_AUTO = 0,   /* OpenCLIP layout or width >= 1024: GELU; else quick_gelu */
    SD_CLIP_ACT_QUICK_GELU, /* OpenAI CLIP-L */
    SD_CLIP_ACT_GELU        /* exact (erf) GELU: OpenCLIP H / bigG */
} sd_clip_act;

typedef struct sd_clip_config {
    sd_clip_layout layout;
    int vocab;      /* token table rows (49408) */
    int positions;  /* position table rows (77) */
    int hidden;     /* width */
    int heads;      /* hidden / 64 */
    int layers;
    int mlp;        /* intermediate width */
    sd_clip_act act;
    int proj_dim;   /* text_projection output width; 0 when the model has none */
} sd_clip_config;

typedef struct sd_clip_opts {
    sd_clip_act act;      /* SD_CLIP_ACT_AUTO unless the caller knows better */
    int heads;            /* attention heads; 0 = width / 64 (every real model) */
    sd_dtype weight_dtype; /* dtype weights live in on the backend (SD_F32 on the CPU) */
} sd_clip_opts;

/* Defaults: act AUTO, weights F32. */
void sd_clip_opts_default(sd_clip_opts *o);

typedef struct sd_clip sd_clip;

/* Detect the layout under `prefix` (e.g. "cond_stage_model.transformer.",
 * "conditioner.embedders.1.model.", "" for a bare text-encoder file) and
 * bind every weight. opts NULL = defaults. Errors: SD_ERR_NOT_FOUND when no
 * text encoder is under the prefix, SD_ERR_FORMAT for missing or wrongly
 * shaped tensors (named by full key) and NaN/Inf weights, SD_ERR_UNSUPPORTED
 * for a width that is not a multiple of 64, SD_ERR_NOMEM. */
sd_status sd_clip_load(sd_backend *be, sd_st_file *f, const char *prefix,
                       const sd_clip_opts *opts, sd_clip **out, sd_error *err);
void sd_clip_free(sd_clip *c); /* NULL-safe */
const sd_clip_config *sd_clip_get_config(const sd_clip *c);
sd_backend *sd_clip_backend(const sd_clip *c);

/* Observation hook, called during forward with "embeddings" (token +
 * position embeddings), "layers.N" (residual stream after layer N, no final
 * LN) and "final_layer_norm" (final LN of the last layer). The tensor is
 * borrowed for the call. For golden tests and debugging; NULL disables. */
typedef void (*sd_clip_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_clip_set_tap(sd_clip *c, sd_clip_tap_fn fn, void *user);

/* The input of one forward: n sequences of len slots (len <= positions).
 * A slot is a vocabulary id, or, when vectors is not NULL and
 * vectors[slot] is not NULL, `hidden` floats that replace the token
 * embedding there (textual inversion). */
typedef struct sd_clip_tokens {
    int n;
    int len;
    const int32_t *ids;           /* n * len, row-major; ignored under a vector */
    const float *const *vectors;  /* NULL, or n * len pointers (NULL = use the id) */
} sd_clip_tokens;

/* Which hidden state sd_clip_forward returns, in ComfyUI's terms: the output
 * of layer `layers + layer` (layer in [-layers, -1]; -1 = the last layer),
 * passed through final_layer_norm when final_ln is set. ComfyUI's "last"
 * is {-1, 1}. */
typedef struct sd_clip_layer {
    int layer;
    int final_ln;
} sd_clip_layer;

typedef struct sd_clip_output {
    sd_bt *hidden;    /* [n, len, hidden]: the selected layer */
    sd_bt *pooled;    /* [n, hidden]: final-LN last layer at the pool slot */
    sd_bt *projected; /* [n, proj_dim]: pooled @ text_projection; NULL without one */
} sd_clip_output;

/* Run the transformer. The pool slot of a sequence is its first slot holding
 * SD_CLIP_EOS (not under a vector), else its last slot (ComfyUI takes the
 * token count up to and including the first end token). On success *out is
 * filled (release with sd_clip_output_free). Errors: SD_ERR_INVALID (bad
 * sizes, layer out of range, id outside the vocabulary), backend errors. */
sd_status sd_clip_forward(sd_clip *c, const sd_clip_tokens *in, sd_clip_layer layer,
                          sd_clip_output *out, sd_error *err);
void sd_clip_output_free(sd_clip_output *o); /* frees the tensors, NULL-safe */

/* ---- parameters by key, views (models/text/clip_params.c; used by LoRA) --------- */

/* The slot holding the parameter named by its HF key relative to the
 * encoder's prefix ("text_model.encoder.layers.3.mlp.fc1.weight",
 * "text_projection.weight"), or NULL when absent. On an OpenCLIP model the
 * q/k/v projection names reach the fused in_proj tensor: *row0 / *rows give
 * the rows that belong to the name (*rows = 0: the whole tensor), and
 * "...self_attn.in_proj.weight/bias" the whole fused tensor. row0/rows
 * may be NULL. The slot belongs to c (replace tensors only on a view). */
sd_bt **sd_clip_param(sd_clip *c, const char *key, int64_t *row0, int64_t *rows);

/* Calls fn(ud, key, slot) for every parameter c holds, each tensor once,
 * keyed so that sd_clip_param finds it again as a whole tensor: HF names,
 * except an OpenCLIP model's fused "...self_attn.in_proj.weight/bias" and
 * matmul-form "text_projection" (key valid during the call only). */
typedef void (*sd_clip_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_clip_param_each(sd_clip *c, sd_clip_param_fn fn, void *ud);

/* ---- export in a file layout (models/text/clip_export.c; CLIPSave, CheckpointSave) ---- */

/* Calls fn(ud, key, t, err) for every weight of c as a host tensor in the
 * file layout `layout` (keys relative to the encoder's prefix), stopping at
 * the first non-OK return:
 *   HF:       text_model.* with q/k/v apart (an OpenCLIP model's fused
 *             in_proj split by rows), text_projection.weight [P, W];
 *   OpenCLIP: token_embedding.weight, positional_embedding,
 *             transformer.resblocks.N.{ln_1, attn.in_proj_weight/_bias (q, k,
 *             v fused), attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_final,
 *             text_projection [W, P] (ComfyUI's
 *             diffusers_convert.convert_text_enc_state_dict_v20).
 * A model without a projection gives the identity [W, W]: ComfyUI's
 * CLIPTextModel always has the Linear and saves it, holding torch.empty's
 * memory when the file had none. Half-precision weights come in the dtype
 * held (exact: they were widened from it), others F32. t is lent for the
 * call (take a reference to keep it). Errors: SD_ERR_NOMEM, backend errors,
 * or fn's. */
typedef sd_status (*sd_clip_export_fn)(void *ud, const char *key, sd_tensor *t, sd_error *err);
sd_status sd_clip_export(sd_clip *c, sd_clip_layout layout, sd_clip_export_fn fn, void *ud,
                         sd_error *err);

/* A new encoder sharing every weight of `base` as backend views (no data
 * copied; tap not inherited). Free with sd_clip_free. */
sd_status sd_clip_view(const sd_clip *base, sd_clip **out, sd_error *err);

#endif
