/* model_paths.h - where model files live, the way ComfyUI's folder_paths
 * finds them.
 *
 * A models directory (--models-dir DIR, SDFLOW_MODELS_DIR, default ./models)
 * holds ComfyUI's sub-folders: checkpoints/, loras/, vae/, controlnet/,
 * embeddings/. With --comfyui-dir DIR (SDFLOW_COMFYUI_DIR) the folders of an
 * existing installation (DIR/models/<folder>) are searched after ours, and
 * their files are listed in the combos too. File names are relative to the
 * folder ('/' separators, sub-folders allowed, no ".."), as ComfyUI's combo
 * values are; absolute paths are taken as they are.
 *
 * This module only names folders and extensions; the search itself is
 * core/env.h's (the executor hashes the same resolved file for cache keys).
 * Ownership: strings returned through `char **` are malloc'd for the caller.
 */
#ifndef SD_MODEL_PATHS_H
#define SD_MODEL_PATHS_H

#include <stddef.h>
#include "core/env.h"

/* ComfyUI folder names (the `file_folder` of loader inputs). */
#define SD_FOLDER_CHECKPOINTS "checkpoints"
#define SD_FOLDER_LORAS "loras"
#define SD_FOLDER_VAE "vae"
#define SD_FOLDER_CONTROLNET "controlnet"
#define SD_FOLDER_EMBEDDINGS "embeddings"
#define SD_FOLDER_UPSCALE_MODELS "upscale_models"
#define SD_FOLDER_DIFFUSION_MODELS "diffusion_models" /* also models/unet (core/env.h) */
#define SD_FOLDER_CLIP_VISION "clip_vision"
#define SD_FOLDER_STYLE_MODELS "style_models"
#define SD_FOLDER_DIFFUSERS "diffusers" /* pipeline folders (DiffusersLoader) */
#define SD_FOLDER_HYPERNETWORKS "hypernetworks"
#define SD_FOLDER_GLIGEN "gligen"

/* Extensions ComfyUI lists for model folders (supported_pt_extensions):
 * .ckpt .pt .pt2 .bin .pth .safetensors .pkl .sft. Torch zip checkpoints
 * (.ckpt .pt .pth .bin) are read weights-only (formats/torch_ckpt.h); the other
 * formats are listed so that a user who picks one gets a clear refusal
 * rather than a missing entry. NULL-terminated. */
const char *const *sd_model_extensions(void);

/* The combo values of a model folder: every model file under models_dir/
 * <folder> and <comfyui_dir>/models/<folder>, sorted. *out is a new
 * SD_VAL_LIST of strings (empty when the folders are missing). */
sd_status sd_model_paths_list(const sd_env *env, const char *folder, sd_value **out,
                              sd_error *err);

/* Resolve a combo value to the path of an existing file (see
 * sd_env_resolve). Errors name the folder(s) searched: SD_ERR_NOT_FOUND,
 * SD_ERR_INVALID for names that leave the folder. Every model loader opens
 * its file through here, so a resolved path is also told to
 * env->on_model_file when it is set (core/node.h). */
sd_status sd_model_paths_resolve(const sd_env *env, const char *folder, const char *name,
                                 char **out, sd_error *err);

/* The textual-inversion directories to search, in order: models_dir/
 * embeddings, then <comfyui_dir>/models/embeddings when set. Writes up to
 * `max` malloc'd paths into dirs (existing directories only) and returns how
 * many; free them with sd_model_paths_free_list. */
size_t sd_model_paths_embedding_dirs(const sd_env *env, char **dirs, size_t max);
void sd_model_paths_free_list(char **dirs, size_t n);

#endif
