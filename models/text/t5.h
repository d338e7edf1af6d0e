/* t5.h - the T5 encoder (T5 v1.1 / T5-XXL as Flux and SD3 use it), as
 * ComfyUI's comfy/text_encoders/t5.py runs it.
 *
 * Keys (Hugging Face T5EncoderModel, under a caller-given prefix: "" in
 * text_encoders/t5xxl_fp16.safetensors, "text_encoders.t5xxl.transformer."
 * in the single-file Flux checkpoints):
 *   shared.weight [vocab, d_model] (or encoder.embed_tokens.weight),
 *   encoder.block.N.layer.0.layer_norm.weight,
 *   encoder.block.N.layer.0.SelfAttention.{q,k,v}.weight [inner, d_model], .o [d_model, inner],
 *   encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight [buckets, heads]
 *     (every block has its own in UMT5 files),
 *   encoder.block.N.layer.1.layer_norm.weight,
 *   encoder.block.N.layer.1.DenseReluDense.{wi_0, wi_1} [d_ff, d_model] (gated, v1.1) or
 *     .wi (original T5), .wo [d_model, d_ff],
 *   encoder.final_layer_norm.weight.
 * The configuration comes from shapes: d_model and vocab from the token
 * table, heads from the relative-attention table, d_kv = inner / heads,
 * d_ff from wi, blocks by counting. Activation: GELU (tanh) in gated files
 * (T5 v1.1's gelu_pytorch_tanh), ReLU otherwise.
 *
 * Forward, in float32 (bf16 matrix ops when the backend computes in bf16;
 * never f16: T5's activations overflow it, sd_t5_forward refuses):
 *   x = shared[ids];  bias[h, i, j] = table[bucket(j - i), h] (bidirectional,
 *   32 buckets, max distance 128, torch's float32 log), computed from block
 *   0's table and reused by every block (T5) or per block (UMT5);
 *   per block: x += o(attention(q, k, v) with the bias added to the scores
 *   and no 1/sqrt(d_kv) scaling: ComfyUI multiplies k by sqrt(d_kv) and
 *   divides the scores by it again, exactly 1 for d_kv a power of 4, else
 *   reproduced as it rounds) of RMSNorm(x); x += wo(act(wi_0 h) * wi_1 h) of
 *   h = RMSNorm(x); all positions attend to all (Flux passes no mask);
 *   RMSNorm: x / sqrt(mean(x^2) + 1e-6) * weight.
 *   Output: final_layer_norm of the last block, or of the selected block
 *   (CLIPSetLastLayer on a T5: ComfyUI's intermediate output with
 *   final_layer_norm_intermediate).
 *
 * Weights stay as stored (F32, F16, BF16, or the F8 types a backend widens
 * per op), bound over the mapping: a T5-XXL fp16 file costs its size, never
 * a float32 copy. Ownership: sd_t5_load returns a model owning its backend
 * tensors (views keep the mapping alive: the sd_st_file may be closed
 * afterwards, as for sd_clip); the backend must outlive the model. One
 * forward at a time per backend.
 */
#ifndef SD_T5_H
#define SD_T5_H

#include <stdint.h>
#include "formats/safetensors.h"
#include "kernels/backend.h"

typedef enum sd_t5_act { SD_T5_ACT_GELU_TANH = 1, SD_T5_ACT_RELU = 2 } sd_t5_act;

typedef struct sd_t5_config {
    int vocab;        /* token table rows (32128) */
    int d_model;      /* 4096 for T5-XXL */
    int d_kv;         /* 64 */
    int heads;        /* 64 */
    int layers;       /* 24 */
    int d_ff;         /* 10240 */
    int buckets;      /* 32 */
    int max_distance; /* 128 */
    int gated;        /* wi_0 / wi_1 */
    int bias_per_block; /* UMT5 */
    sd_t5_act act;
    float eps;        /* 1e-6 */
} sd_t5_config;

typedef struct sd_t5 sd_t5;

/* 1 when the file has a T5 encoder under prefix (its block 0 attention). */
int sd_t5_present(const sd_st_file *f, const char *prefix);

/* Detect the configuration under `prefix` and bind every weight as stored.
 * Errors: SD_ERR_NOT_FOUND (no T5 under the prefix), SD_ERR_FORMAT (missing
 * or wrongly shaped tensors, named by full key and file; NaN/Inf weights),
 * SD_ERR_NOMEM. */
sd_status sd_t5_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_t5 **out,
                     sd_error *err);
void sd_t5_free(sd_t5 *m); /* NULL-safe */
const sd_t5_config *sd_t5_get_config(const sd_t5 *m);
sd_backend *sd_t5_backend(const sd_t5 *m);

/* Observation hook (golden tests): "embeddings", "block.N" (residual
 * stream after block N) and "final_layer_norm". Borrowed for the call. */
typedef void (*sd_t5_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_t5_set_tap(sd_t5 *m, sd_t5_tap_fn fn, void *user);

/* n sequences of len slots; a slot is an id, or (vectors[slot] != NULL)
 * d_model floats replacing its embedding (textual inversion). */
typedef struct sd_t5_tokens {
    int n;
    int len;
    const int32_t *ids;
    const float *const *vectors;
} sd_t5_tokens;

/* Run the encoder: *out = [n, len, d_model] F32 (caller frees), the final
 * layer norm of the last block (layer 0 or -1) or of block layers + layer
 * (layer in [-layers, -1]). Errors: SD_ERR_INVALID (sizes, ids outside the
 * vocabulary, layer out of range), SD_ERR_UNSUPPORTED (the backend computes
 * in f16), backend errors. */
sd_status sd_t5_forward(sd_t5 *m, const sd_t5_tokens *in, int layer, sd_bt **out,
                        sd_error *err);

/* T5's relative position bucket of (key position - query position), as
 * ComfyUI's _relative_position_bucket computes it (bidirectional). */
int sd_t5_bucket(int64_t rel, int buckets, int max_distance);

/* ---- parameters by key, views (used by LoRA, models/lora/lora.h) ---------------- */

/* The slot holding the parameter named by its HF key (as ComfyUI's T5
 * state dict names it, relative to the encoder's prefix): "shared.weight",
 * "encoder.block.N.layer.0.SelfAttention.q.weight",
 * "encoder.block.N.layer.1.DenseReluDense.wi_0.weight",
 * "encoder.final_layer_norm.weight", ...; NULL when absent. The slot belongs
 * to m (replace tensors only on a view). */
sd_bt **sd_t5_param(sd_t5 *m, const char *key);
/* Calls fn(ud, key, slot) for every parameter m holds, in ComfyUI's
 * state-dict order (key valid during the call only). */
typedef void (*sd_t5_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_t5_param_each(sd_t5 *m, sd_t5_param_fn fn, void *ud);
/* A new encoder sharing every weight of base as backend views (no data
 * copied; tap not inherited). Free with sd_t5_free; base must outlive it. */
sd_status sd_t5_view(const sd_t5 *base, sd_t5 **out, sd_error *err);

#endif
