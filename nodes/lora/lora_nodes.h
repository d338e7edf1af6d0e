/* lora_nodes.h - what LoraLoader / LoraLoaderModelOnly (alias LoRA) and the
 * model-merging nodes (nodes/model) need on the node side: a MODEL's or
 * CLIP's list of applied weight patches (a "stack": LoRAs and merges, in
 * order) and the patched views built from it (models/lora/lora.h).
 *
 * A stack is immutable once made: LoraLoader makes a new one (the input's
 * entries + one more), so the MODEL/CLIP it received keep theirs and every
 * strength or LoRA change is a new stack over the same loaded checkpoint
 * (nothing reloaded, the base weights never modified). The view a stack
 * patches is built on first use and kept while the stack lives.
 *
 * MODEL / CLIP handles (nodes/loaders/loaders.h) carry a stack in their
 * `loras` field; KSampler and the text-encode nodes take the patched views
 * through sd_nodes_model_unet / sd_nodes_clip_encoder. The node table
 * (LoraLoader, alias LoRA, and LoraLoaderModelOnly) is lora_node_defs.c.
 *
 * Thread safety: views are built under the stack's mutex.
 */
#ifndef SD_NODES_LORA_H
#define SD_NODES_LORA_H

#include "core/node.h"
#include "models/checkpoint/checkpoint.h"
#include "models/lora/lora.h"

typedef struct sd_lora_stack sd_lora_stack;

/* New stack: base's entries (base may be NULL) followed by (plan, strength).
 * Takes a new reference on plan. */
sd_status sd_lora_stack_push(const sd_lora_stack *base, sd_lora_plan *plan, double strength,
                             sd_lora_stack **out, sd_error *err);
/* New stack: base's entries followed by a merge with `other` (a MODEL or
 * CLIP handle value, referenced until the stack goes): ComfyUI's
 * add_patches(other.get_key_patches(), strength_patch, strength_model).
 * The other model's weights are taken as its own stack patched them. */
sd_status sd_lora_stack_push_merge(const sd_lora_stack *base, sd_value *other,
                                   double strength_patch, double strength_model,
                                   sd_lora_stack **out, sd_error *err);
/* New stack: base's entries followed by a weight scale (copied; its
 * suffixes are static strings): the attention-multiply nodes' patches. */
sd_status sd_lora_stack_push_scale(const sd_lora_stack *base, const sd_lora_scale *scale,
                                   sd_lora_stack **out, sd_error *err);
/* The same as a per-block merge (ModelMergeBlocks, ModelMergeSD1, ...): each
 * weight with its own ratio (sd_lora_use's rule over ratios[0..n_ratios),
 * copied). SD_ERR_INVALID when n_ratios < 1. */
sd_status sd_lora_stack_push_merge_blocks(const sd_lora_stack *base, sd_value *other,
                                          const sd_lora_ratio *ratios, int n_ratios,
                                          sd_lora_stack **out, sd_error *err);
sd_lora_stack *sd_lora_stack_ref(sd_lora_stack *s); /* NULL-safe */
void sd_lora_stack_unref(sd_lora_stack *s);         /* NULL-safe */
size_t sd_lora_stack_count(const sd_lora_stack *s);

/* The checkpoint's UNet / text encoder with the stack applied (borrowed,
 * valid while the stack lives). A NULL or empty stack gives the base part.
 * c must be the checkpoint the stack's plans were made for. */
sd_status sd_lora_stack_unet(sd_lora_stack *s, sd_checkpoint *c, sd_unet **out, sd_error *err);
/* The same for a DiT checkpoint's network (Flux, SD3, Z-Image; its stack
 * holds LoRAs): *out is the checkpoint's diffusion model with the
 * patched view as its net. A Flux stack may also hold merges with other Flux
 * MODELs. */
sd_status sd_lora_stack_dit(sd_lora_stack *s, sd_checkpoint *c, sd_dmodel *out, sd_error *err);
/* 1 when c's diffusion model is a DiT (Flux, SD3, Z-Image): its MODEL stack
 * patches the DiT (sd_lora_stack_dit). */
int sd_nodes_lora_on_dit(sd_checkpoint *c);
sd_status sd_lora_stack_text_encoder(sd_lora_stack *s, sd_checkpoint *c, sd_text_encoder **out,
                                     sd_error *err);
/* The same over a given base encoder (a CLIP of several files: the encoder
 * composed from them; sd_lora_stack_text_encoder passes c's). The stack's
 * plans must have been matched against an encoder of base's parts; the
 * view is built on first use against the first base given and kept. */
sd_status sd_lora_stack_text_encoder_on(sd_lora_stack *s, const sd_text_encoder *base,
                                        sd_text_encoder **out, sd_error *err);

/* LoraLoader's work. Opens `lora_name` from the loras folder, matches it
 * against c's UNet and (with_clip) text encoder, logs a warning naming the
 * first unmatched keys (count + names), and pushes it on model_in / clip_in.
 * A LoRA of which nothing matches is SD_ERR_INVALID ("made for another
 * architecture?"), as is one whose shapes do not fit. Errors name the input
 * (lora_name). *clip_out stays NULL when !with_clip. */
sd_status sd_nodes_lora_load(sd_node_ctx *ctx, sd_checkpoint *c, const char *lora_name,
                             const sd_lora_stack *model_in, const sd_lora_stack *clip_in,
                             double strength_model, double strength_clip, int with_clip,
                             sd_lora_stack **model_out, sd_lora_stack **clip_out, sd_error *err);

/* The same when MODEL and CLIP come from different checkpoints (two
 * loaders): UNet keys are matched against c's UNet and text-encoder keys
 * against clip_c's encoder, as ComfyUI maps each against its own model.
 * clip_c NULL = c. */
/* The same with the CLIP as a handle (NULL when !with_clip): a CLIP of
 * several files (DualCLIPLoader, TripleCLIPLoader, CLIPLoader with a type)
 * is matched as the encoder composed from them, loaded only when the LoRA
 * has text-encoder names. On a DiT (Flux, SD3, Z-Image) the text-encoder
 * keys patch CLIP-L, bigG, T5 and Qwen3 (lora.h); a LoRA that patches no
 * text-encoder weight there leaves *clip_out NULL (the caller passes the
 * CLIP through, as ComfyUI's CLIP comes out unchanged). */
struct sd_clip_ref;
sd_status sd_nodes_lora_load_clip(sd_node_ctx *ctx, sd_checkpoint *c, const struct sd_clip_ref *clip,
                                  const char *lora_name, const sd_lora_stack *model_in,
                                  const sd_lora_stack *clip_in, double strength_model,
                                  double strength_clip, int with_clip, sd_lora_stack **model_out,
                                  sd_lora_stack **clip_out, sd_error *err);

sd_status sd_nodes_lora_load_pair(sd_node_ctx *ctx, sd_checkpoint *c, sd_checkpoint *clip_c,
                                  const char *lora_name, const sd_lora_stack *model_in,
                                  const sd_lora_stack *clip_in, double strength_model,
                                  double strength_clip, int with_clip, sd_lora_stack **model_out,
                                  sd_lora_stack **clip_out, sd_error *err);

#endif
