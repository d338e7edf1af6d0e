/* object_info.h - the registered node types as ComfyUI's /object_info JSON:
 * {"<class>": {input {required, optional, hidden}, input_order, output,
 * output_is_list, output_name, output_tooltips, name, display_name,
 * description, python_module, category, output_node, deprecated,
 * experimental, ...}}, each node printed as ComfyUI prints it (a V1 class or
 * a V3 schema, SD_NODE_V3). Combo lists that depend on the environment
 * (model files, input images) are read from `env` now, so a file added since
 * the last call shows up. Aliases (the CLI's CLIPEncode, LoadCheckpoint, ...)
 * are not listed: ComfyUI has no such nodes. Used by `sdflow nodes --json`
 * and by `sdflow serve`'s GET /object_info. */
#ifndef SD_OBJECT_INFO_H
#define SD_OBJECT_INFO_H

#include <cjson/cJSON.h>
#include "node.h"

/* Every registered type (aliases left out); NULL when out of memory. Caller deletes. */
cJSON *sd_object_info(const sd_env *env);
/* One type's entry; NULL when out of memory. */
cJSON *sd_object_info_node(const sd_node_def *def, const sd_env *env);

#endif
