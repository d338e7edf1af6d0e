/* conditioning.h - the conditioning node family: CLIPTextEncode (alias
 * CLIPEncode), CLIPSetLastLayer, ConditioningCombine, ConditioningSetArea,
 * ConditioningZeroOut.
 *
 * CONDITIONING = SD_VAL_LIST of SD_VAL_DICT, one per ComfyUI [cond, dict]
 * pair: {"cond": F32 [1, 77*k, D], "pooled_output"?: F32 [1, P],
 * "area"?: list of 4 INT (height, width, y, x) in latent units,
 * "strength"?: FLOAT, "set_area_to_bounds"?: BOOLEAN, ...}. Nodes build new
 * lists and dicts; tensors are shared by reference.
 */
#ifndef SD_NODES_CONDITIONING_H
#define SD_NODES_CONDITIONING_H

#include "core/node.h"

extern const sd_node_def *const sd_nodes_conditioning[];
/* FluxGuidance, FluxDisableGuidance, FluxKontextImageScale (flux_cond.c):
 * "guidance" on every entry (a FLOAT, or none = the model's guidance
 * embedding left out; absent = 3.5). */
extern const sd_node_def *const sd_nodes_flux_conditioning[];

/* Registers the family's table and the CLIPEncode alias. */
sd_status sd_nodes_conditioning_register(sd_error *err);

/* Checked accessor: input i must be a CONDITIONING list of dicts that each
 * hold an F32 "cond" tensor [1, L, D]. */
sd_status sd_nodes_in_conditioning(sd_value *const *in, int i, const char *name,
                                   sd_value **out, sd_error *err);

#endif
