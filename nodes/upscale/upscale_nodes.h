/* upscale_nodes.h - the upscale-model node family (ComfyUI's
 * comfy_extras/nodes_upscale_model.py): UpscaleModelLoader and
 * ImageUpscaleWithModel, and the UPSCALE_MODEL handle between them.
 *
 * UpscaleModelLoader reads the file (models/upscale_models, .safetensors or
 * a torch .pth read weights-only) and loads the network at once, so an
 * unknown architecture fails in the loader, naming the file and what was
 * found. ImageUpscaleWithModel runs models/upscale/upscale.h's
 * sd_upscale_image with ComfyUI's tile 512, overlap 32 and out-of-memory
 * back-off down to 128, and reports one progress step per tile.
 */
#ifndef SD_NODES_UPSCALE_H
#define SD_NODES_UPSCALE_H

#include "core/node.h"
#include "models/upscale/upscale.h"

/* NULL-terminated table registered by nodes/nodes.c. */
extern const sd_node_def *const sd_nodes_upscale[];

/* The UPSCALE_MODEL handle; its payload is an sd_upscale the value owns. */
extern const sd_handle_type sd_handle_upscale_model;

/* ImageUpscaleWithModel's tiling (comfy_extras/nodes_upscale_model.py). */
#define SD_UPSCALE_TILE 512
#define SD_UPSCALE_OVERLAP 32
#define SD_UPSCALE_MIN_TILE 128

#endif
