/* object_info.h - the registered node types as ComfyUI's /object_info JSON:
 * {"<class>": {input {required, optional}, input_order, output,
 * output_is_list, output_name, name, display_name, description,
 * python_module, category, output_node, deprecated, experimental}}. Combo lists that depend on the
 * environment (model files, input images) are read from `env` now, so a
 * file added since the last call shows up. Used by `sdflow nodes --json` and
 * by `sdflow serve`'s GET /object_info. */
#ifndef SD_OBJECT_INFO_H
#define SD_OBJECT_INFO_H

#include <cjson/cJSON.h>
#include "node.h"

/* Every registered type and alias; NULL when out of memory. Caller deletes. */
cJSON *sd_object_info(const sd_env *env);
/* One type, described under `name` (an alias adds "alias_of"). */
cJSON *sd_object_info_node(const sd_node_def *def, const char *name, const sd_env *env);

#endif
