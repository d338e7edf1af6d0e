/* conditioning.h - the conditioning node family: CLIPTextEncode (alias
 * CLIPEncode), CLIPSetLastLayer, ConditioningCombine, ConditioningSetArea,
 * ConditioningZeroOut (cond_ops.c); ConditioningSetAreaPercentage,
 * ConditioningSetAreaStrength, ConditioningSetMask,
 * ConditioningSetTimestepRange (cond_set.c); ConditioningConcat,
 * ConditioningAverage (cond_mix.c).
 *
 * CONDITIONING = SD_VAL_LIST of SD_VAL_DICT, one per ComfyUI [cond, dict]
 * pair: {"cond": F32 [1, 77*k, D], "pooled_output"?: F32 [1, P],
 * "area"?: list of 4 INT (height, width, y, x) in latent units, or
 *   ["percentage", height, width, y, x] as fractions of the latent,
 * "strength"?: FLOAT, "set_area_to_bounds"?: BOOLEAN,
 * "mask"?: F32 [B, H, W] (any size), "mask_strength"?: FLOAT,
 * "start_percent"? / "end_percent"?: FLOAT, ...}, the keys ComfyUI's nodes
 * set; the sampler reads them as comfy.samplers does
 * (nodes/sampling/sampling.h). Nodes build new lists and dicts; tensors are
 * shared by reference.
 */
#ifndef SD_NODES_CONDITIONING_H
#define SD_NODES_CONDITIONING_H

#include "core/node.h"

extern const sd_node_def *const sd_nodes_conditioning[];
/* FluxGuidance, FluxDisableGuidance, FluxKontextImageScale (flux_cond.c):
 * "guidance" on every entry (a FLOAT, or none = the model's guidance
 * embedding left out; absent = 3.5); ReferenceLatent and
 * FluxKontextMultiReferenceLatentMethod (edit_model.c): "reference_latents"
 * (a list of latents, appended to) and "reference_latents_method" (a
 * string) on every entry. */
extern const sd_node_def *const sd_nodes_flux_conditioning[];

/* Registers the family's table and the CLIPEncode alias. */
sd_status sd_nodes_conditioning_register(sd_error *err);

/* Checked accessor: input i must be a CONDITIONING list of dicts that each
 * hold an F32 "cond" tensor [1, L, D]. */
sd_status sd_nodes_in_conditioning(sd_value *const *in, int i, const char *name,
                                   sd_value **out, sd_error *err);

/* A new list whose dicts are shallow copies of src's with fn applied to
 * each (fn returns non-zero on failure: out of memory). */
typedef int (*sd_cond_entry_fn)(sd_value *dict, const void *arg);
sd_status sd_nodes_conditioning_map(const sd_value *src, sd_cond_entry_fn fn, const void *arg,
                                    sd_value **out, sd_error *err);

#endif
