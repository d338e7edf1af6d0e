/* clip_block.h - one pre-LN CLIP transformer layer, shared by the CLIP text
 * encoder (models/text/clip.h) and the CLIP vision tower
 * (models/vision/clip_vision.h): ComfyUI's clip_model.CLIPLayer,
 *   x += out_proj(attention(layer_norm1 x)); x += fc2(act(fc1(layer_norm2 x)))
 * with LayerNorm eps 1e-5, causal attention for text, full for vision.
 *
 * Two key layouts per layer N (printf formats in sd_clip_block_names):
 *   HF        encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj,
 *             layer_norm2, mlp.fc1, mlp.fc2}
 *   OpenCLIP  transformer.resblocks.N.{ln_1, attn.in_proj_weight/bias (fused
 *             q|k|v rows, applied as one linear and sliced), attn.out_proj,
 *             ln_2, mlp.c_fc, mlp.c_proj}
 *
 * Ownership: a bound block owns its backend tensors (sd_clip_block_free).
 * Forward borrows x and returns a new tensor, or NULL once a backend op
 * failed (the backend's sticky error says why). */
#ifndef SD_CLIP_BLOCK_H
#define SD_CLIP_BLOCK_H

#include "models/checkpoint/weights.h"
#include "models/text/clip.h"

typedef struct sd_clip_block {
    sd_bt *ln1_w, *ln1_b;
    sd_bt *q_w, *q_b, *k_w, *k_b, *v_w, *v_b; /* HF: separate projections */
    sd_bt *qkv_w, *qkv_b;                     /* OpenCLIP: fused [3W, W] */
    sd_bt *o_w, *o_b;
    sd_bt *ln2_w, *ln2_b;
    sd_bt *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} sd_clip_block;

/* Key formats of one layer (each takes the layer index). */
typedef struct sd_clip_block_names {
    const char *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const char *fc1_w, *fc1_b, *fc2_w, *fc2_b, *o_w, *o_b;
    const char *q_w, *q_b, *k_w, *k_b, *v_w, *v_b; /* NULL in the OpenCLIP layout */
    const char *qkv_w, *qkv_b;                     /* NULL in the HF layout */
} sd_clip_block_names;

extern const sd_clip_block_names sd_clip_block_hf;
extern const sd_clip_block_names sd_clip_block_openclip;

/* Bind layer i of width W and MLP width F from w (names relative to w's
 * prefix), shapes checked. On failure the tensors bound so far stay in *l
 * (free them with sd_clip_block_free) and err names the key. */
sd_status sd_clip_block_bind(const sd_weights *w, const sd_clip_block_names *nm, int64_t W,
                             int64_t F, int i, sd_clip_block *l, sd_error *err);
void sd_clip_block_free(sd_clip_block *l); /* frees the tensors, NULL-safe */

/* One layer on x [N, L, W]: heads attention heads (W % heads == 0),
 * act SD_CLIP_ACT_GELU or _QUICK_GELU, causal 1 for text. */
sd_bt *sd_clip_block_forward(const sd_clip_block *l, int heads, sd_clip_act act, int causal,
                             sd_bt *x);

#endif
