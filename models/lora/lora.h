/* lora.h - LoRA / LyCORIS weight patches applied the way ComfyUI's
 * LoraLoader applies them (comfy.lora + comfy.weight_adapter), without
 * copying the model.
 *
 * Three steps, each its own object:
 *   sd_lora       an opened LoRA file (memory-mapped safetensors; nothing is
 *                 decoded until a patch is computed).
 *   sd_lora_plan  the file matched against a model's parts: for every LoRA
 *                 module name the target parameter (ComfyUI's
 *                 model_lora_keys_unet / model_lora_keys_clip key maps) and
 *                 the adapter found there, plus every LoRA tensor that
 *                 matched nothing (reported, never silently dropped).
 *   views         sd_lora_unet_view / sd_lora_text_encoder_view build a new
 *                 model whose weights are backend views of the base model's
 *                 (models/unet/unet.h sd_unet_view, clip.h sd_clip_view), with
 *                 only the touched tensors replaced by patched copies.
 *                 Several (plan, strength) pairs stack in order; the base
 *                 model is never modified, so changing a strength or
 *                 dropping a LoRA is building another view.
 *
 * Names understood (module name x, then the adapter suffixes below):
 *   UNet   lora_unet_<diffusers path, '.'->'_'>, lora_unet_<ldm path>,
 *          lycoris_<diffusers path>, diffusion_model.<ldm path>,
 *          [unet.]<diffusers path> with attention projections spelled
 *          ".processor.to_q" / ".processor.to_out" (ComfyUI maps only that
 *          spelling: plain PEFT "unet.<...>.attn1.to_q" stays unmatched).
 *   CLIP   lora_te_ / lora_te1_ / lora_te2_ text_model_encoder_layers_N_<mod>,
 *          text_encoder[_2].text_model.encoder.layers.N.<mod>,
 *          text_encoders.clip_{l,g,h}.transformer.<hf key>; lora_te_ is CLIP-L
 *          on SD1, the bigG on an SDXL refiner and the ViT-H on SD2, which
 *          also answers to lora_te1_ (ComfyUI's choices).
 *   T5     (Flux, SD3) text_encoders.t5xxl.transformer.<hf key> and Kohya /
 *          OneTrainer lora_te<i>_<hf key with _>, i = 1 + (bigG present) +
 *          (CLIP-L present): lora_te3_ on Flux (which also answers to
 *          lora_te2_) and on SD3 with both CLIPs.
 *   Qwen3  (Z-Image) text_encoders.qwen3_4b.transformer.<hf key> only.
 *   Every ".weight" of a text encoder also answers to
 *   text_encoders.<clip_l|clip_g|clip_h|t5xxl|qwen3_4b>.transformer.<key>
 *   (ComfyUI's model_lora_keys_clip; Kohya CLIP names for layers < 32).
 *   Adapters: LoRA (x.lora_up/lora_down [+ lora_mid, LoCon], _lora.up/down,
 *          .lora_B/.lora_A, .lora.up/down, .lora_linear_layer.up/down,
 *          .lora_B/A.default), LoHa (hada_w1_a/b, hada_w2_a/b [, hada_t1/t2]),
 *          LoKr (lokr_w1 | lokr_w1_a/b, lokr_w2 | lokr_w2_a/b [, lokr_t2]),
 *          full diffs (.diff, .diff_b, .w_norm, .b_norm); x.alpha scales by
 *          alpha / rank (rank = rows of the down matrix); no alpha = 1.
 *   Not supported (SD_ERR_UNSUPPORTED naming the key): DoRA (.dora_scale),
 *          GLoRA/OFT/BOFT, .set_weight.
 * Math (float32, as ComfyUI on an upcast weight):
 *   W' = W + (strength * alpha/rank) * (up.flatten(1) @ down.flatten(1)).reshape(W.shape)
 *
 * Ownership: sd_lora and sd_lora_plan are reference counted (a plan keeps
 * its sd_lora alive). Views own their patched tensors and are freed with
 * sd_unet_free / sd_text_encoder_free; the base model must outlive them.
 */
#ifndef SD_LORA_H
#define SD_LORA_H

#include <stddef.h>

#include "formats/safetensors.h"
#include "models/dmodel/dmodel.h"
#include "models/flux/flux.h"
#include "models/text/text_encode.h"
#include "models/unet/unet.h"

typedef struct sd_lora sd_lora;

/* Open a LoRA file. Errors: the safetensors reader's (naming the file),
 * SD_ERR_FORMAT when the file holds no tensor. *out has one reference. */
sd_status sd_lora_open(const char *path, sd_lora **out, sd_error *err);
/* Same over an already open file (takes no ownership of f; f must stay open
 * while the sd_lora lives). */
sd_status sd_lora_from_file(sd_st_file *f, sd_lora **out, sd_error *err);
sd_lora *sd_lora_ref(sd_lora *l); /* NULL-safe */
void sd_lora_unref(sd_lora *l);   /* NULL-safe */
const char *sd_lora_path(const sd_lora *l);
/* 1 when a tensor name of the file has a prefix of ComfyUI's text-encoder
 * LoRA names (lora_te, lora_prior_te, text_encoder, text_encoders.): only
 * such a file can patch a text encoder, so a loader may skip loading one
 * for the others (their text-encoder plan is empty either way). */
int sd_lora_has_text_encoder_keys(const sd_lora *l);

/* Which model part a patch targets: the diffusion model, or one network of
 * the text encoder (CLIP_G is the OpenCLIP tower: bigG, or SD2's ViT-H). */
typedef enum sd_lora_part {
    SD_LORA_UNET = 0,
    SD_LORA_CLIP_L = 1,
    SD_LORA_CLIP_G = 2,
    SD_LORA_T5 = 3,
    SD_LORA_QWEN3 = 4
} sd_lora_part;
#define SD_LORA_PARTS 5

typedef struct sd_lora_plan sd_lora_plan;

/* Match `lora` against the parts it may patch: unet and/or te (either may be
 * NULL: LoraLoaderModelOnly passes no text encoder, whose LoRA tensors then
 * count as unmatched). Shapes are checked here: a patch whose size differs
 * from its target is left out, as ComfyUI leaves it out with a logged
 * warning, and listed by sd_lora_plan_skipped (the LoRA key, the target and
 * both shapes); the rest applies. A malformed adapter (inconsistent ranks,
 * NaN) is an error. A LoRA of which nothing matches, or which has patches
 * left out, is not an error here; callers decide (sd_lora_plan_count,
 * sd_lora_plan_skipped_count). */
sd_status sd_lora_plan_new(sd_lora *lora, sd_unet *unet, const sd_text_encoder *te,
                           sd_lora_plan **out, sd_error *err);
/* The same against a Flux DiT (part SD_LORA_UNET; targets relative to the
 * model's prefix, "double_blocks.0.img_attn.qkv.weight"). The names are
 * ComfyUI's for Flux: BFL / ComfyUI "diffusion_model.<key>", Kohya
 * "lora_unet_<key with _>", diffusers "transformer.<diffusers name>" (and
 * "lycoris_" / "lora_transformer_" spellings) whose q, k, v (and
 * proj_mlp) are row slices of the fused qkv / linear1 and whose
 * norm_out.linear is the final modulation with shift and scale swapped,
 * "diffusion_model.single_blocks.N.linear1_qkv" (linear1's first 3 * hidden
 * rows). A name whose target the model lacks (guidance_in on schnell)
 * stays unmatched. */
sd_status sd_lora_plan_new_flux(sd_lora *lora, sd_flux *flux, sd_lora_plan **out, sd_error *err);
/* The same against any DiT behind the diffusion-model interface: Flux (as
 * above), the SD3 / SD3.5 MMDiT and Z-Image's NextDiT (dm->net an sd_flux,
 * sd_sd3 or sd_zimage; targets relative to the model's prefix). The names
 * are ComfyUI's model_lora_keys_unet for the family (lora_keys_dit.c):
 * "diffusion_model.<key>" and "lora_unet_<key with _>" for every
 * parameter, then SD3's diffusers names ("transformer.", "base_model.model.",
 * "lora_transformer_", "lycoris_": q/k/v row slices of the fused qkv,
 * norm_out.linear and the last context block's modulation swapped) or
 * Z-Image's ("diffusion_model.", "transformer.", "lycoris_" with
 * attention.to_q/k/v slices of attention.qkv, to_out.0, all_x_embedder.2-1,
 * all_final_layer.2-1). SD_ERR_INVALID for a UNet. GGUF-quantized targets
 * are patched as ComfyUI-GGUF patches them (sd_lora_dit_view). */
sd_status sd_lora_plan_new_dit(sd_lora *lora, const sd_dmodel *dm, sd_lora_plan **out, sd_error *err);
/* The same with a text encoder (NULL: none, as sd_lora_plan_new_dit):
 * LoraLoader on a DiT MODEL and its CLIP. The text encoder's keys are
 * matched as sd_lora_plan_new matches them. */
sd_status sd_lora_plan_new_dit_te(sd_lora *lora, const sd_dmodel *dm, const sd_text_encoder *te,
                                  sd_lora_plan **out, sd_error *err);
sd_lora_plan *sd_lora_plan_ref(sd_lora_plan *p); /* NULL-safe */
void sd_lora_plan_unref(sd_lora_plan *p);        /* NULL-safe */

/* Number of target parameters patched in a part. */
size_t sd_lora_plan_count(const sd_lora_plan *p, sd_lora_part part);
/* Target key of patch i of a part (relative to the part's prefix:
 * "input_blocks.1.1.proj_in.weight", "text_model.encoder.layers.0.mlp.fc1.weight"). */
const char *sd_lora_plan_target(const sd_lora_plan *p, sd_lora_part part, size_t i);
/* LoRA tensors that matched no target, in file (name) order. */
size_t sd_lora_plan_unmatched_count(const sd_lora_plan *p);
const char *sd_lora_plan_unmatched(const sd_lora_plan *p, size_t i);
/* "N LoRA keys matched nothing: a, b, c, ..." (at most `show` names) into
 * buf; returns buf ("" when every key matched). */
const char *sd_lora_plan_unmatched_summary(const sd_lora_plan *p, int show, char *buf, size_t n);
/* Patches left out because they do not fit the model, each "'TENSOR' does
 * not fit: its patch has N values, UNet 'KEY' is [..]" (or "... targets
 * UNet 'KEY', which this model lacks"), in match order. */
size_t sd_lora_plan_skipped_count(const sd_lora_plan *p);
const char *sd_lora_plan_skipped(const sd_lora_plan *p, size_t i);
/* "N LoRA patches did not fit the model and were left out: a; b; ..." (at
 * most `show`) into buf; returns buf ("" when none was left out). */
const char *sd_lora_plan_skipped_summary(const sd_lora_plan *p, int show, char *buf, size_t n);

/* A block ratio of a per-block merge (ModelMergeBlocks and the
 * model-specific ModelMerge* nodes): parameters whose key starts with
 * prefix take ratio. */
typedef struct sd_lora_ratio {
    const char *prefix;
    double ratio;
} sd_lora_ratio;

/* One patch of a stack: a LoRA applied with a strength, or a model merge.
 *
 * A merge (plan NULL, merge_unet / merge_te set) is ComfyUI's
 * add_patches(model2.get_key_patches(), strength, strength_model): every
 * parameter of the view that the other model has under the same key with
 * the same shape becomes, in float32,
 *     W = W * strength_model  (skipped when strength_model == 1)
 *     W = W + strength * W2
 * where W is the weight as the earlier uses left it and W2 the other
 * model's weight as ITS patches left it (pass the other model's own view).
 * Parameters the other model lacks or has in another shape stay as they are
 * (ComfyUI: "WEIGHT NOT MERGED"; see sd_lora_merge_unmatched). merge_unet
 * serves unet views, merge_te text-encoder views (CLIP-L with CLIP-L,
 * bigG with bigG), merge_dit DiT views (the other model's network, of
 * the view's kind: an sd_flux, sd_sd3 or sd_zimage). A merge with strength
 * 0 and strength_model 1 is skipped. A DiT's parameters held by its root
 * module (no '.' in the key: SD3's pos_embed, Z-Image's x_pad_token and
 * cap_pad_token) are not merged: ComfyUI's ModelPatcher patches the
 * parameters of modules that hold no submodule's parameters only.
 *
 * With n_ratios > 0 the merge is per block, as ComfyUI's ModelMergeBlocks:
 * a parameter's ratio is that of the longest prefix of ratios[] its key
 * starts with (the first of equal length), else ratios[0]'s, and it is
 * merged with strength 1 - ratio, strength_model ratio (strength and
 * strength_model of the use are then not read). */
/* A weight scale (plan NULL, no merge model, `scale` set): ComfyUI's
 * add_patches({key: (None,)}, 0.0, factor) as the attention-multiply nodes
 * (comfy_extras/nodes_attention_multiply.py) put it on every key ending with
 * one of their suffixes: W = W * factor in float32, in the stack's order.
 * An OpenCLIP encoder's fused "self_attn.in_proj.weight/bias" (which
 * ComfyUI holds as q_proj, k_proj, v_proj) is scaled third by third as the
 * suffixes "self_attn.q_proj.weight" / k_proj / v_proj (".bias") say. */
#define SD_LORA_SCALE_MAX 8
typedef struct sd_lora_scale {
    int n;
    const char *suffix[SD_LORA_SCALE_MAX]; /* static strings */
    double factor[SD_LORA_SCALE_MAX];
} sd_lora_scale;

typedef struct sd_lora_use {
    const sd_lora_plan *plan;
    double strength;
    const sd_unet *merge_unet;
    const sd_text_encoder *merge_te;
    double strength_model;
    const sd_lora_scale *scale; /* a weight scale (above); NULL otherwise */
    const void *merge_dit;
    const sd_lora_ratio *ratios;
    int n_ratios;
} sd_lora_use;

/* The ratio ComfyUI's ModelMergeBlocks gives the parameter `key` (see
 * sd_lora_use); n must be > 0. */
double sd_lora_block_ratio(const sd_lora_ratio *ratios, int n, const char *key);

/* Parameters of `a` that `b` holds under the same key but in another shape
 * (a merge of b into a leaves them alone): the count, and "k1, k2, ..." (at
 * most `show` names) into buf. Either pair (unets, or text encoders) may be
 * given; the other pair NULL. */
size_t sd_lora_merge_unmatched(sd_unet *a, sd_unet *b, const sd_text_encoder *ta,
                               const sd_text_encoder *tb, int show, char *buf, size_t n);
/* Parameters of `a` that `b` has with the same key and shape. */
size_t sd_lora_merge_matched(sd_unet *a, sd_unet *b, const sd_text_encoder *ta,
                             const sd_text_encoder *tb);

/* The same for two DiTs of one kind (a->info.kind == b->info.kind): the
 * count of parameters of a that b holds in another shape (names into buf as
 * above), and in *matched (when not NULL) those of the same key and shape. */
size_t sd_lora_merge_dit_unmatched(const sd_dmodel *a, const sd_dmodel *b, size_t *matched, int show,
                                   char *buf, size_t n);

/* A view of base with the UNet patches of uses[0..n) applied in order.
 * LoRA uses with strength 0 are skipped. Errors: SD_ERR_NOMEM, the adapter
 * errors (SD_ERR_FORMAT for a malformed adapter, naming the LoRA key). */
sd_status sd_lora_unet_view(const sd_unet *base, const sd_lora_use *uses, int n, sd_unet **out,
                            sd_error *err);
/* A view of a Flux DiT with the patches of uses[0..n) applied in order (the
 * plans made by sd_lora_plan_new_flux; merges with merge_dit).
 * Patched weights are kept in F32 whatever the stored type (BF16, F16, fp8):
 * ComfyUI computes base + patch in float32 on its float32 CPU weights.
 * Free with sd_flux_free; base must outlive the view. */
sd_status sd_lora_flux_view(const sd_flux *base, const sd_lora_use *uses, int n, sd_flux **out,
                            sd_error *err);
/* The same for any DiT (plans from sd_lora_plan_new_dit on base's network):
 * *out describes a new network of base's kind (an sd_flux, sd_sd3 or
 * sd_zimage view, patched weights F32) that sd_lora_dit_free frees; base's
 * network must outlive it. A merge use brings merge_dit, a network of
 * base's kind (SD_ERR_INVALID without one).
 * On a GGUF model (one holding quantized weights) a quantized target is
 * widened with its dequant rounding and patched in F32 (ComfyUI-GGUF's
 * get_weight with patch_dtype default, its result kept), and an F16 target
 * is patched in F32 and rounded back to F16 (GGUFModelPatcher). */
sd_status sd_lora_dit_view(const sd_dmodel *base, const sd_lora_use *uses, int n, sd_dmodel *out,
                           sd_error *err);
void sd_lora_dit_free(sd_dmodel *view); /* NULL-safe, and on a zeroed sd_dmodel */
/* The same for a text encoder: a new encoder over views of base's CLIP
 * models sharing its tokenizer. */
sd_status sd_lora_text_encoder_view(const sd_text_encoder *base, const sd_lora_use *uses, int n,
                                    sd_text_encoder **out, sd_error *err);

/* ---- extraction (LoraSave) ------------------------------------------------ */

/* ComfyUI's extract_lora(diff, rank): diff (F32, [out, in] or a conv kernel
 * [out, in, kh, kw], flattened to [out, in*kh*kw]) decomposed by LAPACK's
 * SVD (lora_extract.c), cut to r = min(rank, in, out) components,
 *   up = U[:, :r] * S[:r]   ([out, r] or [out, r, 1, 1])
 *   down = Vh[:r, :]        ([r, in] or [r, in, kh, kw])
 * both clamped to [-q, q], q the 0.99 quantile (torch.quantile, linear) of
 * their values together. F32 results, one reference each; sv (optional,
 * room for r values) receives S[:r]. SD_ERR_INVALID for what ComfyUI's
 * extraction raises on and skips (a 1x1 kernel with one in or out channel,
 * a difference holding NaN, an SVD that does not converge) and for other
 * ranks; SD_ERR_NOMEM. Up to a sign per component (see lora_extract.c) the
 * factors are those of the rank-r truncation. */
sd_status sd_lora_extract(const sd_tensor *diff, int rank, sd_tensor **up, sd_tensor **down,
                          float *sv, sd_error *err);
/* The thin SVD of the row-major m x n matrix a: s[min(m,n)] descending,
 * u [m, min(m,n)] and vt [min(m,n), n] row-major (LAPACK sgesdd on a
 * column-major copy, as torch.linalg.svd calls it). a is not modified. */
sd_status sd_lora_svd(const float *a, int m, int n, float *s, float *u, float *vt, sd_error *err);

#endif
