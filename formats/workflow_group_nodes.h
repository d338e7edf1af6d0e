/* workflow_group_nodes.h - legacy group nodes of UI-format workflows.
 *
 * Before subgraphs, ComfyUI's frontend grouped nodes into "group nodes": a
 * node of type "workflow/NAME" ("workflow>NAME" since frontend 1.3) whose
 * definition is saved in the file under extra.groupNodes[NAME]: the inner
 * nodes as the clipboard copies them (each with its own widgets_values), the
 * links between them ([origin index, slot, target index, slot, outer origin
 * id, type], origin null for a link from outside) and `external`, the inner
 * outputs linked outside. The group node shows the inner nodes' widgets and
 * unlinked inputs as its own, and its outputs are the inner outputs that are
 * not only used inside.
 *
 * This module turns such a file into one without group nodes, as the
 * frontend's groupNode.js does when it makes the prompt (GroupNodeConfig
 * builds the group's widgets, inputs and outputs; getInnerNodes gives each
 * inner node the id "<group node id>:<index>" and the group node's widget
 * values): every group node instance is replaced by its inner nodes, links
 * from and to the group node are moved to the inner node slots they stand
 * for, and the rest of the UI conversion (workflow_ui.h) reads the result
 * like any file: reroutes, primitives and bypassed nodes inside a group work
 * as they do outside. A muted or bypassed group node is left as it is (the
 * conversion drops it, or routes through it by type, as the legacy frontend
 * does).
 *
 * Reference: tests/data/group_nodes (made by the legacy frontend's own code).
 */
#ifndef SD_WORKFLOW_GROUP_NODES_H
#define SD_WORKFLOW_GROUP_NODES_H

#include <cjson/cJSON.h>
#include "core/error.h"

/* 1 when `type` names a group node ("workflow/..." or "workflow>..."). */
int sd_workflow_is_group_node(const char *type);

/* Expand every group node instance of the root graph of `root`. *out is a
 * new UI-format object the caller frees with cJSON_Delete, or NULL (with
 * SD_OK) when the file has no group node instance to expand. Uses the
 * registry for the inner nodes' inputs. `source` names the file in errors.
 * SD_ERR_FORMAT for a malformed definition, SD_ERR_UNSUPPORTED for a group
 * node without a definition or an inner node type sdflow lacks (the
 * frontend refuses to load those too), each naming the group node. */
sd_status sd_workflow_group_nodes_expand(const cJSON *root, const char *source, cJSON **out, sd_error *err);

#endif
