/* vision_nodes.h - the CLIP vision family: CLIPVisionLoader, CLIPVisionEncode
 * (and the nodes that read their outputs: StyleModelApply, unCLIPConditioning;
 * unCLIPCheckpointLoader, which also makes a CLIP_VISION).
 *
 * CLIP_VISION is a handle owning an sd_clip_vision (models/vision/clip_vision.h).
 * CLIP_VISION_OUTPUT is an SD_VAL_DICT shaped as ComfyUI's clip_vision.Output:
 * "image_embeds" [N, P], "last_hidden_state" [N, T, W],
 * "penultimate_hidden_states" [N, T, W] (tensors) and "mm_projected" (None:
 * no llava projector). */
#ifndef SD_NODES_VISION_H
#define SD_NODES_VISION_H

#include "core/node.h"
#include "models/vision/clip_vision.h"

extern const sd_handle_type sd_handle_clip_vision; /* "CLIP_VISION" */
/* StyleModelLoader / StyleModelApply (style_nodes.c): an sd_style_model
 * (models/vision/style_model.h). */
extern const sd_handle_type sd_handle_style_model; /* "STYLE_MODEL" */

/* unCLIPCheckpointLoader's CLIP_VISION for a checkpoint without one
 * (unclip_nodes.c): ComfyUI's None, carrying the message (a string the
 * handle owns) a node using it fails with. */
extern const sd_handle_type sd_handle_clip_vision_absent; /* "CLIP_VISION" */
/* The CLIP_VISION in[i] (borrowed), or an SD_ERR_INVALID naming input
 * `name` (with the absent marker's message when it is one). */
sd_status sd_nodes_in_clip_vision(sd_value *const *in, int i, const char *name, sd_clip_vision **out,
                                  sd_error *err);

/* The CLIP_VISION_OUTPUT dict for o (takes new references on its tensors);
 * NULL when out of memory. */
sd_value *sd_nodes_clip_vision_output(const sd_clip_vision_output *o);

/* Tensor `key` of the CLIP_VISION_OUTPUT in[i] (borrowed), or an
 * SD_ERR_INVALID naming input `name`. */
sd_status sd_nodes_in_clip_vision_output(sd_value *const *in, int i, const char *name,
                                         const char *key, sd_tensor **out, sd_error *err);

#endif
