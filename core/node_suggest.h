/* node_suggest.h - what to tell a user whose workflow names a node type we
 * do not have: the closest registered names (edit distance, case ignored),
 * whether it is one of ComfyUI's own nodes that sdflow lacks, or which
 * well-known custom-node pack it comes from (ComfyUI-Manager names). */
#ifndef SD_NODE_SUGGEST_H
#define SD_NODE_SUGGEST_H

#include <stddef.h>

/* ComfyUI's own node types (node_suggest_names.c), NULL-terminated, sorted. */
extern const char *const sd_comfyui_core_nodes[];

/* The custom-node pack `class_type` belongs to ("ComfyUI-Impact-Pack"), by
 * the pack's known names, prefixes and suffixes; NULL when none matches. */
const char *sd_node_pack_of(const char *class_type);

/* 1 when class_type is a node of ComfyUI itself. */
int sd_node_is_comfyui_core(const char *class_type);

/* A sentence about an unknown class_type for error messages, written into
 * buf (always NUL-terminated, "" when there is nothing to say), e.g.
 *   "it comes from the custom node pack ComfyUI-Impact-Pack, which sdflow does not implement"
 *   "it is a ComfyUI node that sdflow does not implement yet; did you mean CheckpointLoaderSimple?"
 *   "did you mean KSampler or KSamplerAdvanced?"
 * Uses the registry for the closest names. Returns buf. */
const char *sd_node_suggest(const char *class_type, char *buf, size_t n);

#endif
