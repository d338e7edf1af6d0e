/* prompt_embed.h - finding and reading textual-inversion embeddings for
 * prompt.c (ComfyUI's load_embed). Internal to the models layer. */
#ifndef SD_PROMPT_EMBED_H
#define SD_PROMPT_EMBED_H

#include "core/error.h"
#include "core/tensor.h"
#include "models/text/prompt.h"

/* Looks NAME up in o->embedding_dirs (each with all its subdirectories, in
 * sorted pre-order) as NAME, NAME.safetensors, NAME.pt, NAME.bin; names
 * that would leave the directory are skipped. On success with *vectors set,
 * *path (malloc'd) names the file and *vectors is a new [rows, dim] F32
 * tensor; both owned by the caller. When nothing usable is found *vectors
 * is NULL and SD_OK is returned (an unreadable file is reported through
 * o->warn). Errors: a .pt/.bin the weights-only reader refuses
 * (SD_ERR_UNSUPPORTED / SD_ERR_FORMAT naming the embedding and file),
 * SD_ERR_NOMEM. */
sd_status sd_prompt_embed_load(const sd_prompt_opts *o, const char *name, char **path,
                               sd_tensor **vectors, sd_error *err);

#endif
