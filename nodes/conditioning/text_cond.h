/* text_cond.h - what the text-encode nodes (CLIPTextEncode,
 * CLIPTextEncodeSDXL, CLIPTextEncodeSDXLRefiner) share: the prompt options a
 * node context gives, and building the CONDITIONING value. Internal to
 * nodes/conditioning. */
#ifndef SD_NODES_TEXT_COND_H
#define SD_NODES_TEXT_COND_H

#include "core/node.h"
#include "models/text/text_encode.h"

#define SD_NODES_MAX_EMBEDDING_DIRS 4

/* Fills *o for a prompt encoded by the node of ctx: the env's embedding
 * dirs (into dirs[], freed by the caller with sd_model_paths_free_list(dirs,
 * n)) and warnings to the node's log (ctx is borrowed by *o). Returns n. */
size_t sd_nodes_text_opts(sd_node_ctx *ctx, char *dirs[SD_NODES_MAX_EMBEDDING_DIRS],
                          sd_text_encode_opts *o);

/* One extra key of the conditioning dict; v is owned. */
typedef struct sd_nodes_cond_extra {
    const char *key;
    sd_value *v;
} sd_nodes_cond_extra;

/* [{"cond", "pooled_output" (when pooled is not NULL), extras...}] into
 * *out; consumes cond, pooled and the extras' values (also on failure).
 * Errors: SD_ERR_NOMEM (also when an extra's value is NULL). */
sd_status sd_nodes_text_cond(sd_tensor *cond, sd_tensor *pooled, sd_nodes_cond_extra *ex, int n,
                             sd_value **out, sd_error *err);

#endif
