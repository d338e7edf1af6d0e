/* recipe.h - reproducible recipes: a workflow locked to the exact files it
 * reads.
 *
 * A recipe file is API-format JSON with one extra top-level key:
 *
 *   {"sdflow_recipe": {"format": 1,
 *                      "sdflow": {"version": "0.1.0", "build": "..."},
 *                      "precision": "f32", "device": "cpu",
 *                      "files": [{"node": "4", "class_type": "CheckpointLoaderSimple",
 *                                 "input": "ckpt_name", "folder": "checkpoints",
 *                                 "name": "v1-5.safetensors", "size": 123,
 *                                 "sha256": "<64 hex>"}, ...],
 *                      "seeds": {"3": {"seed": 42}}},
 *    "prompt": { ...the API-format workflow... }}
 *
 * Because the graph parser accepts a {"prompt": ...} body, a recipe runs like
 * any workflow; the "sdflow_recipe" object (the "meta" below) is what gets
 * verified. SaveImage PNGs carry the same meta in a text chunk named
 * "sdflow_recipe" (through extra_pnginfo), next to "prompt".
 *
 * "files" lists every file named by a file-folder input (node.h
 * sd_input_def.file_folder: models, input images) of every node, once per
 * node input, in graph order. Nothing in the meta depends on the time or the
 * machine, so locking the same workflow twice gives the same bytes.
 */
#ifndef SD_RECIPE_H
#define SD_RECIPE_H

#include "core/error.h"
#include "core/executor.h"
#include "core/graph.h"
#include "core/node.h"

#define SD_RECIPE_KEY "sdflow_recipe"

/* Describe the files and seeds of `g` as a meta object (JSON text, caller
 * frees). Files are resolved through env (sd_env_resolve) and hashed; `memo`
 * (may be NULL) supplies/stores content hashes by path, size and mtime.
 * A file that cannot be resolved is an error naming node, input and file. */
sd_status sd_recipe_describe(const sd_graph *g, const sd_env *env, const sd_cache_i *memo,
                             const char *version, const char *build, char **out,
                             sd_error *err);

/* Check `g` against a recipe meta: every file the graph names must be in the
 * recipe with the same size and SHA-256 (hashed afresh, no memo). On any
 * difference returns SD_ERR_INVALID with a message listing every differing,
 * missing or unlisted file. A meta that is not an object with a "files"
 * array is SD_ERR_FORMAT. */
sd_status sd_recipe_verify(const sd_graph *g, const sd_env *env, const char *meta,
                           sd_error *err);

/* The meta carried by a workflow source: the "sdflow_recipe" object of JSON
 * text, or the "sdflow_recipe" chunk of a PNG file (pass path, text NULL).
 * *out is NULL (and SD_OK returned) when there is none. */
sd_status sd_recipe_meta_of_text(const char *text, char **out, sd_error *err);
sd_status sd_recipe_meta_of_png(const char *path, char **out, sd_error *err);

/* Write a recipe file for `g` with `meta` (atomic: temp file + rename). */
sd_status sd_recipe_write(const char *path, const sd_graph *g, const char *meta,
                          sd_error *err);

/* Return a copy of the JSON object `extra` (may be NULL: {}) with
 * "sdflow_recipe" set to `meta`; caller frees. NULL when out of memory or
 * when extra/meta do not parse. */
char *sd_recipe_merge_pnginfo(const char *extra, const char *meta);

#endif
