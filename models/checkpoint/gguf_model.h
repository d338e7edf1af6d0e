/* gguf_model.h - GGUF model files read as city96's ComfyUI-GGUF reads them
 * (its loader.py): which architecture a file holds, and the tensor names a
 * model loader sees.
 *
 * Architecture: general.architecture. Diffusion models: flux, sd1, sdxl,
 * sd3, aura, hidream, cosmos, ltxv, hyvid, wan, lumina2, qwen_image. Text
 * encoders: t5, t5encoder (T5-XXL encoders, llama.cpp's naming), llama,
 * qwen2vl, qwen3, qwen3vl (and files whose general.type is clip-vision or
 * mmproj). A file without the key (stable-diffusion.cpp's), or with "pig"
 * or "cow" (older ComfyUI-GGUF conversions), is a diffusion model whose
 * architecture is read from its keys (compat mode, as tools/convert.py's
 * detect_arch); such a file is refused as a text encoder ("incompatible
 * with llama.cpp"), as ComfyUI-GGUF does.
 *
 * Names: "model.diffusion_model." is cut where any tensor has it (every
 * other tensor left out: gguf_sd_loader's handle_prefix); a text encoder's
 * llama.cpp names are mapped back to the Hugging Face ones by loader.py's
 * tables, replacing every occurrence in order:
 *   T5 (t5, t5encoder): enc. -> encoder., .blk. -> .block., token_embd ->
 *     shared, output_norm -> final_layer_norm, attn_q/k/v/o ->
 *     layer.0.SelfAttention.q/k/v/o, attn_norm -> layer.0.layer_norm,
 *     attn_rel_b -> layer.0.SelfAttention.relative_attention_bias, ffn_up ->
 *     layer.1.DenseReluDense.wi_1, ffn_down -> ...wo, ffn_gate -> ...wi_0,
 *     ffn_norm -> layer.1.layer_norm
 *   Qwen3 / Llama (qwen3, qwen3vl, llama, qwen2vl): blk. -> model.layers.,
 *     attn_norm -> input_layernorm, attn_q/k/v -> self_attn.q/k/v_proj,
 *     attn_output -> self_attn.o_proj, attn_q/k/v_norm. ->
 *     self_attn.q/k/v_norm., ffn_up/down/gate -> mlp.up/down/gate_proj,
 *     ffn_norm -> post_attention_layernorm, token_embd ->
 *     model.embed_tokens, output_norm -> model.norm, output.weight ->
 *     lm_head.weight
 * Refused (SD_ERR_UNSUPPORTED, naming the file and why): llama (its Q/K
 * rows are permuted back by ComfyUI-GGUF: HiDream's Llama 3.1, a family
 * sdflow lacks), qwen2vl (needs its mmproj file: Qwen-Image), a T5 with
 * the 256384-token UMT5 vocabulary (its tokenizer comes from the file's
 * metadata: WAN / Chroma-style encoders). Tensor values are never changed
 * here; quantized tensors stay quantized (formats/gguf.h).
 */
#ifndef SD_GGUF_MODEL_H
#define SD_GGUF_MODEL_H

#include "formats/gguf.h"

typedef enum sd_gguf_use {
    SD_GGUF_ANY = 0, /* as the architecture says */
    SD_GGUF_DIFFUSION_MODEL,
    SD_GGUF_TEXT_ENCODER
} sd_gguf_use;

/* Opens a GGUF file as a model loader reads it. *out: the named view
 * (formats/gguf.h); arch (>= 32 bytes) receives the architecture (the one
 * detected from keys in compat mode). `use` checks the architecture list
 * (SD_ERR_UNSUPPORTED naming the file and architecture otherwise); SD_GGUF_ANY
 * takes a text-encoder architecture as a text encoder, anything else as a
 * diffusion model. */
sd_status sd_gguf_model_open(const char *path, sd_gguf_use use, sd_st_file **out, char *arch, size_t n,
                             sd_error *err);
/* The same over a buffer that outlives the view, named `name` in messages
 * (fuzzing: tests/fuzz/fuzz_gguf.c). */
sd_status sd_gguf_model_open_memory(const void *data, size_t size, const char *name, sd_gguf_use use,
                                    sd_st_file **out, char *arch, size_t n, sd_error *err);

#endif
