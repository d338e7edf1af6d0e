/* workflow_ui.h - ComfyUI UI-format workflows converted to the API form.
 *
 * The UI format is what ComfyUI's ordinary "Save" writes and what a PNG's
 * "workflow" chunk holds: {nodes: [...], links: [...], groups, extra,
 * version, definitions?}. The server never runs it; ComfyUI's frontend turns
 * it into the API form (graphToPrompt) with the live node definitions. This
 * module does the same offline with the registry's schemas:
 *
 *   - widgets_values is positional over the node's widgets: the literal
 *     inputs (INT/FLOAT/STRING/BOOLEAN/COMBO), required then optional, in
 *     schema order, plus the frontend-only widgets that are never sent: a
 *     `control_after_generate` combo after an INT named seed or noise_seed,
 *     and an image-upload button after the required widgets of a node with
 *     an image-upload combo (LoadImage). An object widgets_values is by name.
 *   - a widget converted to an input (an input with a `widget` field and a
 *     link) takes the link, at the widget's place among the inputs;
 *   - Reroute nodes pass their one input through; a PrimitiveNode's first
 *     widget value becomes the value of the widgets it feeds;
 *   - muted nodes (mode 2) are dropped, and so are links to them; bypassed
 *     nodes (mode 4) route each output to the first input whose type
 *     matches, preferring the input at the output's index (the frontend's
 *     rule);
 *   - Note, MarkdownNote and groups are ignored;
 *   - subgraphs (definitions.subgraphs, a node whose type is a subgraph id)
 *     are expanded into their inner nodes with ids "<outer>:<inner>";
 *   - legacy group nodes are expanded first (workflow_group_nodes.h).
 *
 * The API form lists integer ids in ascending order, as JSON.stringify of
 * the frontend's object does, and the inputs of each node widgets first,
 * then links, so a converted UI file serializes exactly as ComfyUI's "Save
 * (API format)" of the same graph. Node types the registry lacks keep their
 * links (their widget values cannot be named); validation then reports them.
 */
#ifndef SD_WORKFLOW_UI_H
#define SD_WORKFLOW_UI_H

#include <cjson/cJSON.h>
#include "core/error.h"
#include "core/node.h"

/* 1 when `root` is a UI-format workflow: an object with a "links" member and
 * a "nodes" member that is not an API node (one whose "nodes" is not a list
 * is a malformed UI file: the conversion refuses it). */
int sd_workflow_ui_detect(const cJSON *root);

/* Convert a UI-format workflow (parsed with sd_json_parse_exact, so that big
 * seeds keep their digits) to a new API-format object the caller frees with
 * cJSON_Delete. Uses the registry (sd_nodes_register_all first). `source`
 * names the file in errors. On failure *api is NULL and err names the node
 * (id, class_type and title), and the widget or input when one is concerned:
 * SD_ERR_FORMAT for a malformed file, SD_ERR_UNSUPPORTED for what is not
 * handled (a group node without its definition, or inside a subgraph),
 * SD_ERR_INVALID for widget values that do not line up with our schema, or
 * subgraphs that expand to more than 100,000
 * nodes beyond those the file holds (checked before expanding). */
sd_status sd_workflow_ui_to_api(const cJSON *root, const char *source, cJSON **api,
                                sd_error *err);

/* The frontend's widgets of a node type, in the order widgets_values lists
 * them (see above): each literal input, required then optional, followed by
 * its control_after_generate combo where it has one, and the upload button
 * after the widgets of the section holding an image-upload input. `w` has
 * room for 2 * sd_node_input_count(def) + 2 entries; returns the count. */
typedef enum { SD_UI_WIDGET_INPUT, SD_UI_WIDGET_CONTROL, SD_UI_WIDGET_UPLOAD } sd_ui_widget_kind;
typedef struct sd_ui_widget {
    const sd_input_def *input; /* NULL for the upload button */
    sd_ui_widget_kind kind;
} sd_ui_widget;
int sd_workflow_ui_widgets(const sd_node_def *def, sd_ui_widget *w);

#endif
