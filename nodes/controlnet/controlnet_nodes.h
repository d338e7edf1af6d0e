/* controlnet_nodes.h - ControlNetLoader, DiffControlNetLoader, ControlNetApply,
 * ControlNetApplyAdvanced (alias ControlNet), ControlNetApplySD3,
 * SetUnionControlNetType and Canny, and how the sampler
 * reads what they attach to CONDITIONING.
 *
 * CONTROL_NET is a handle over a loaded ControlNet (models/controlnet/controlnet.h)
 * and the Union control type SetUnionControlNetType set on it (its copy
 * shares the ControlNet, as ComfyUI's ControlNet.copy() does).
 * Applying one adds to every entry of a CONDITIONING (a new dict; the input
 * is not modified):
 *   "control"                  SD_VAL_LIST of link dicts in application
 *                              order (the first applied first, ComfyUI's
 *                              deepest previous_controlnet):
 *                              {"control_net": CONTROL_NET, "image": IMAGE,
 *                               "strength": FLOAT, "start_percent": FLOAT,
 *                               "end_percent": FLOAT[, "vae": VAE]}
 *                              ("vae" only for SD3 ControlNets, which
 *                              VAE-encode the image; ControlNetApplySD3
 *                              and ControlNetApplyAdvanced's vae input)
 *   "control_apply_to_uncond"  BOOLEAN: true from the deprecated
 *                              ControlNetApply (ComfyUI then gives the
 *                              negative entries without a control the
 *                              positive's), false from ControlNetApplyAdvanced.
 * Strength 0 returns the conditioning unchanged, as ComfyUI does.
 *
 * The sampler turns an entry's "control" into UNet residuals with
 * sd_nodes_control_eval for every model call (see docs/lora-controlnet.md).
 */
#ifndef SD_NODES_CONTROLNET_H
#define SD_NODES_CONTROLNET_H

#include "core/node.h"
#include "models/controlnet/controlnet.h"

extern const sd_handle_type sd_handle_control_net; /* "CONTROL_NET" */
extern const sd_node_def *const sd_nodes_controlnet[];

/* The ControlNet of a CONTROL_NET value (borrowed) or NULL. */
sd_controlnet *sd_nodes_control_net_of(const sd_value *v);
/* What SetUnionControlNetType set on a CONTROL_NET value: 0 = none
 * ("auto"), else 1 + the index in sd_controlnet_union_types. */
int sd_nodes_control_union_type(const sd_value *v);

/* The links of a conditioning entry's "control" (NULL/absent = none): *links
 * is a malloc'd array (free() it) of *n links borrowing from the entry.
 * SD_ERR_INVALID when the value is malformed. */
sd_status sd_nodes_control_links(const sd_value *entry, sd_control_link **links, int *n,
                                 sd_error *err);

/* Residuals of the entry's control chain for one model call
 * (sd_control_chain_run; call->x_in = the scaled model input of the
 * `batched` conditioning chunks that share this entry's control).
 * out->active == 0 (and nothing to add) when the entry has no control or
 * none is active at sigma. */
sd_status sd_nodes_control_eval(const sd_value *entry, const sd_control_call *call,
                                sd_control_residuals *out, sd_error *err);

/* Registers the table and the ControlNet alias. */
sd_status sd_nodes_controlnet_register(sd_error *err);

#endif
