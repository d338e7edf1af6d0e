/* qwen3.h - the Qwen3 decoder as a text encoder (Z-Image's Qwen3-4B), as
 * ComfyUI's comfy/text_encoders/llama.py (Llama2_ with Qwen3_4BConfig) runs
 * it.
 *
 * Keys (Hugging Face Qwen3ForCausalLM, under a caller-given prefix: "" in
 * text_encoders/qwen_3_4b.safetensors):
 *   model.embed_tokens.weight [vocab, hidden],
 *   model.layers.N.input_layernorm.weight [hidden],
 *   model.layers.N.self_attn.{q,k,v}_proj.weight [heads*hd | kv*hd, hidden] (no bias),
 *   model.layers.N.self_attn.{q,k}_norm.weight [hd],
 *   model.layers.N.self_attn.o_proj.weight [hidden, heads*hd],
 *   model.layers.N.post_attention_layernorm.weight [hidden],
 *   model.layers.N.mlp.{gate,up}_proj.weight [inter, hidden], .down_proj [hidden, inter],
 *   model.norm.weight [hidden] (lm_head, when present, is ignored).
 * The configuration comes from shapes: hidden and vocab from the token
 * table, the head width from q_norm (128 in every Qwen3, the class constant
 * ComfyUI uses), heads and key/value heads from the q / k projections, the
 * MLP width from gate_proj, layers by counting. rms_norm_eps 1e-6 and
 * rope_theta 1e6 are Qwen3_4BConfig's constants (files do not carry them).
 *
 * Forward, float32 (bf16 matrix ops when the backend computes in bf16;
 * f16 is refused: the residual stream of the real model overflows it):
 *   x = embed[ids]; per layer: h = RMSNorm(x); q, k, v projections; q and k
 *   RMS-normed per head over the head width; RoPE rotate_half on q and k
 *   (positions 0..n-1, inv_freq = 1 / theta^(2i/hd) in float32, cos / sin
 *   of float32 angles); attention softmax(q k^T / sqrt(hd)) v with k / v
 *   heads shared by heads / kv_heads query heads (GQA), causal, keys of
 *   masked positions excluded; x += o(attn); x += down(silu(gate(h')) *
 *   up(h')) of h' = RMSNorm(x). RMSNorm: x / sqrt(mean(x^2) + eps) * w.
 *   Output: the residual stream after layer `layers + layer` (ComfyUI's
 *   intermediate_output), through model.norm when asked; layers after it
 *   are not run.
 *
 * Weights stay as stored (BF16 in the real file: a Qwen3-4B costs its 8 GB,
 * mapped, never a float32 copy), widened per op. Ownership: sd_qwen3_load
 * returns a model owning its backend tensors (views keep the mapping alive:
 * the sd_st_file may be closed afterwards); the backend must outlive the
 * model. One forward at a time per backend.
 */
#ifndef SD_QWEN3_H
#define SD_QWEN3_H

#include <signal.h>
#include <stdint.h>
#include "formats/safetensors.h"
#include "kernels/backend.h"

typedef struct sd_qwen3_config {
    int vocab;        /* 151936 */
    int hidden;       /* 2560 for Qwen3-4B */
    int layers;       /* 36 */
    int heads;        /* 32 */
    int kv_heads;     /* 8 */
    int head_dim;     /* 128 */
    int intermediate; /* 9728 */
    float eps;        /* 1e-6 */
    double rope_theta; /* 1e6 */
} sd_qwen3_config;

typedef struct sd_qwen3 sd_qwen3;

/* 1 when the file has a Qwen3 decoder under prefix (embed_tokens and layer
 * 0's q_norm: what tells Qwen3 from other Llama-family decoders). */
int sd_qwen3_present(const sd_st_file *f, const char *prefix);

/* The hidden width of the decoder under prefix (0 when absent): what
 * ComfyUI's detect_te_model tells Qwen3 sizes apart by. */
int sd_qwen3_width(const sd_st_file *f, const char *prefix);

/* Detect the configuration under `prefix` and bind every weight as stored.
 * Errors: SD_ERR_NOT_FOUND (no Qwen3 under the prefix), SD_ERR_FORMAT
 * (missing or wrongly shaped tensors, named by full key and file; NaN/Inf
 * weights; shapes that make no configuration), SD_ERR_NOMEM. */
sd_status sd_qwen3_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_qwen3 **out,
                        sd_error *err);
void sd_qwen3_free(sd_qwen3 *m); /* NULL-safe */
const sd_qwen3_config *sd_qwen3_get_config(const sd_qwen3 *m);
sd_backend *sd_qwen3_backend(const sd_qwen3 *m);

/* Observation hook (golden tests): "embeddings", "layers.N" (residual
 * stream after layer N) and "norm" (model.norm of the last layer run).
 * Borrowed for the call. */
typedef void (*sd_qwen3_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_qwen3_set_tap(sd_qwen3 *m, sd_qwen3_tap_fn fn, void *user);

/* n sequences of len slots. A slot is an id, or (vectors and vectors[slot]
 * != NULL) hidden floats replacing its embedding. mask: NULL (every slot
 * attended) or n * len entries, 0 = a key no query attends to. */
typedef struct sd_qwen3_tokens {
    int n;
    int len;
    const int32_t *ids;
    const float *const *vectors;
    const uint8_t *mask;
    /* non-zero once the user asked to stop: the forward ends with
     * SD_ERR_CANCELLED between layers (may be NULL) */
    const volatile sig_atomic_t *stop;
} sd_qwen3_tokens;

/* Run the decoder: *out = [n, len, hidden] F32 (caller frees), the residual
 * stream after layer `layers + layer` (layer in [-layers, -1]; -1 = the
 * last), through model.norm when final_norm. Errors: SD_ERR_INVALID (sizes,
 * ids outside the vocabulary, layer out of range), SD_ERR_UNSUPPORTED (the
 * backend computes in f16), SD_ERR_CANCELLED, backend errors. */
sd_status sd_qwen3_forward(sd_qwen3 *m, const sd_qwen3_tokens *in, int layer, int final_norm,
                           sd_bt **out, sd_error *err);

/* ---- parameters by key, views (used by LoRA, models/lora/lora.h) ---------------- */

/* The slot holding the parameter named by its HF key relative to the
 * prefix ("model.embed_tokens.weight", "model.layers.N.self_attn.q_proj.weight",
 * "model.layers.N.mlp.down_proj.weight", "model.norm.weight", ...), NULL
 * when absent. The slot belongs to m (replace tensors only on a view). */
sd_bt **sd_qwen3_param(sd_qwen3 *m, const char *key);
/* Calls fn(ud, key, slot) for every parameter, in ComfyUI's state-dict
 * order (key valid during the call only). */
typedef void (*sd_qwen3_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_qwen3_param_each(sd_qwen3 *m, sd_qwen3_param_fn fn, void *ud);
/* A new decoder sharing every weight of base as backend views (tap not
 * inherited). Free with sd_qwen3_free; base must outlive it. */
sd_status sd_qwen3_view(const sd_qwen3 *base, sd_qwen3 **out, sd_error *err);

#endif
