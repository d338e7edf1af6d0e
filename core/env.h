/* env.h - filling an sd_env (node.h) from defaults, environment variables and
 * command-line options, and resolving the files that nodes name.
 *
 * Defaults: models ./models, input ./input, output ./output, temp
 * $TMPDIR/sdflow (/tmp/sdflow), precision f32, device cpu. SDFLOW_MODELS_DIR,
 * SDFLOW_TOKENIZER_DIR and SDFLOW_COMFYUI_DIR override the defaults.
 *
 * Ownership: every string field set through this module (the directories,
 * precision, vae_precision, clip_precision, device) is a malloc'd copy owned by the env and released by
 * sd_env_cleanup(). Do not assign those fields directly when using
 * sd_env_cleanup(); use sd_env_set(). `models`, `backend` and `log` are left
 * to the front end.
 */
#ifndef SD_ENV_H
#define SD_ENV_H

#include "error.h"
#include "node.h"
#include "value.h"

/* Zero *env and fill the defaults (reads the environment variables above,
 * and SDFLOW_MAX_IMAGE_PIXELS for max_image_pixels, default
 * SD_PNG_MAX_PIXELS_DEFAULT). SD_ERR_NOMEM, or SD_ERR_INVALID for a bad
 * SDFLOW_MAX_IMAGE_PIXELS. */
sd_status sd_env_init(sd_env *env, sd_error *err);
/* max_image_pixels from a decimal string ("0" = no limit); SD_ERR_INVALID
 * names the value when it is not a whole number. */
sd_status sd_env_set_max_pixels(sd_env *env, const char *value, sd_error *err);
/* max_memory (core/membudget.h) from "16G", "512MiB", bytes ("0" = no
 * limit); SD_ERR_INVALID names the value otherwise. sd_env_init sets the
 * default (physical RAM) and reads SDFLOW_MAX_MEMORY. */
sd_status sd_env_set_max_memory(sd_env *env, const char *value, sd_error *err);
/* The precision a node of these flags (SD_NODE_VAE, SD_NODE_TEXT_ENCODER)
 * computes in: vae_precision / clip_precision when set, else precision,
 * else "f32". The executor hashes it into the node's cache key. */
const char *sd_env_node_precision(const sd_env *env, unsigned node_flags);
/* Free the strings the env owns and zero it. */
void sd_env_cleanup(sd_env *env);
/* Replace one string field (e.g. &env->models_dir) with a copy of `value`
 * (NULL clears it). */
sd_status sd_env_set(sd_env *env, const char **field, const char *value, sd_error *err);

/* Directory a file-folder input refers to: "input" -> input_dir, "output" ->
 * output_dir, "temp" -> temp_dir, anything else -> models_dir/<folder>.
 * Writes into buf; returns buf. */
const char *sd_env_folder_dir(const sd_env *env, const char *folder, char *buf, size_t n);

/* Path of `name` inside `folder` (see sd_env_folder_dir), falling back to
 * <comfyui_dir>/models/<folder> (or <comfyui_dir>/input) when the file is not
 * in the primary directory. As in ComfyUI, "diffusion_models" also covers
 * the older "unet" folder (searched first: models/unet, then
 * models/diffusion_models) and "text_encoders" the older "clip" (after
 * text_encoders); sd_env_list_files merges them the same way. For the input folder,
 * ComfyUI's annotated names name another folder: "a.png [output]",
 * "a.png [temp]", "a.png [input]" (what its frontend's mask editor and "open
 * in input" produce). Names that climb out of the folder ("..") are
 * rejected; absolute names are taken as they are. In the input, output and
 * temp folders (annotated names included) a name whose real path (symlinks
 * resolved) leaves the folder is SD_ERR_INVALID, as the server's /view
 * refuses it; model folders may link anywhere. On success *out is a
 * malloc'd path of an existing regular file; SD_ERR_NOT_FOUND otherwise. */
sd_status sd_env_resolve(const sd_env *env, const char *folder, const char *name,
                         char **out, sd_error *err);

/* Regular files under `folder` (recursively, names relative to the folder with
 * '/' separators, sorted) whose name ends with one of the NULL-terminated
 * `exts` (case-insensitive; NULL = any), merged with the comfyui_dir fallback.
 * *out is a new SD_VAL_LIST of strings (empty when the folder is missing). */
sd_status sd_env_list_files(const sd_env *env, const char *folder,
                            const char *const *exts, sd_value **out, sd_error *err);

#endif
