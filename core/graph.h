/* graph.h - a workflow as a graph of nodes with literal and linked inputs.
 *
 * The graph is the in-memory form of a ComfyUI API-format workflow: node ids
 * are strings, each node has a class_type and named inputs; an input is
 * either a literal value or a link to output `index` of another node. The
 * graph itself knows nothing about the registry; sd_graph_validate() checks
 * it against the registered schemas.
 *
 * Ownership: the graph owns its nodes, their strings and literal values.
 */
#ifndef SD_GRAPH_H
#define SD_GRAPH_H

#include <stddef.h>
#include "error.h"
#include "value.h"

typedef struct sd_graph sd_graph;
struct sd_env; /* node.h; declared here so the prototype below sees one type */

typedef struct sd_graph_input {
    char *name;
    int is_link;
    sd_value *literal;  /* when !is_link (INT, FLOAT, BOOL, STRING, or a list) */
    char *src_id;       /* when is_link */
    int src_index;
} sd_graph_input;

typedef struct sd_graph_node {
    char *id;
    char *class_type;
    char *title;        /* _meta.title, or NULL */
    char *origin;       /* where it was defined ("wf.lua:12"), or NULL */
    sd_graph_input *inputs;
    size_t n_inputs;
} sd_graph_node;

sd_graph *sd_graph_new(void);
void sd_graph_free(sd_graph *g);
sd_graph *sd_graph_clone(const sd_graph *g);

/* Add a node; fails with SD_ERR_INVALID if the id exists. Returns the node
 * (owned by the graph) through *out when out != NULL. */
sd_status sd_graph_add_node(sd_graph *g, const char *id, const char *class_type,
                            sd_graph_node **out, sd_error *err);
sd_status sd_graph_remove_node(sd_graph *g, const char *id, sd_error *err);
/* Keeps the nodes at positions i with keep[i] != 0 (keep has
 * sd_graph_count(g) entries) and frees the others, in one pass: removing many
 * nodes one by one would cost O(n) each. Links to removed nodes stay as they
 * are (validation reports them). */
void sd_graph_retain(sd_graph *g, const unsigned char *keep);
/* Sets mark[i] = 1 for the node at position `from` and every node it links
 * to, transitively (marks already set are kept and stop the walk). `mark`
 * and `stack` have room for sd_graph_count(g) entries. */
void sd_graph_mark_ancestors(const sd_graph *g, size_t from, unsigned char *mark, size_t *stack);
/* Removes the nodes no output node needs, as ComfyUI validates and runs only
 * its outputs and their ancestors: a leftover node in a saved workflow (an
 * unconnected loader, a half-edited branch) neither runs nor stops the run.
 * Nodes of an unknown class_type are kept (ComfyUI refuses those wherever
 * they are), and a graph without any output node is left whole (validation
 * reports that). *n_removed (may be NULL) receives the count; the ids of the
 * first few removed nodes, comma-separated, go into `ids` (may be NULL). */
sd_status sd_graph_drop_unused(sd_graph *g, size_t *n_removed, char *ids, size_t ids_size,
                               sd_error *err);
sd_graph_node *sd_graph_find(const sd_graph *g, const char *id);
/* Position of node `id` in insertion order (what sd_graph_at takes), or
 * (size_t)-1 when there is none. Expected O(1), as sd_graph_find. */
size_t sd_graph_index_of(const sd_graph *g, const char *id);
size_t sd_graph_count(const sd_graph *g);
sd_graph_node *sd_graph_at(const sd_graph *g, size_t i); /* insertion order */

/* Set (or replace) an input. set_literal takes ownership of `v`. */
sd_status sd_graph_set_literal(sd_graph_node *n, const char *name, sd_value *v,
                               sd_error *err);
sd_status sd_graph_set_link(sd_graph_node *n, const char *name, const char *src_id,
                            int src_index, sd_error *err);
sd_status sd_graph_unset_input(sd_graph_node *n, const char *name);
sd_graph_input *sd_graph_node_input(const sd_graph_node *n, const char *name);
void sd_graph_node_set_origin(sd_graph_node *n, const char *origin);
void sd_graph_node_set_title(sd_graph_node *n, const char *title);

/* An unused id (smallest integer string not taken). Caller frees; NULL when
 * out of memory. Amortized O(1): the graph remembers where free ids start. */
char *sd_graph_new_id(sd_graph *g);

/* ---- validation ------------------------------------------------------------ */

typedef struct sd_graph_problem {
    char *node_id, *class_type, *input; /* input may be NULL */
    char *kind;    /* ComfyUI error type: "required_input_missing", ... */
    char *message;
} sd_graph_problem;

typedef struct sd_graph_problems {
    sd_graph_problem *items;
    size_t n;
} sd_graph_problems;

/* Check the whole graph against the registry and report every problem at
 * once: unknown class_type, missing required input, link to a missing node or
 * output index, output type not accepted, value of the wrong kind, out of
 * range, not in the combo list, cycles, and no output node. Returns SD_OK when
 * there are none, else SD_ERR_VALIDATION with `*problems` filled (the caller
 * frees it with sd_graph_problems_free) and err set to the first problem.
 * `env` supplies environment-dependent combo lists (may be NULL). */
sd_status sd_graph_validate(const sd_graph *g, const struct sd_env *env,
                            sd_graph_problems *problems, sd_error *err);
void sd_graph_problems_free(sd_graph_problems *p);

/* ---- ComfyUI API-format JSON ---------------------------------------------- */

/* Parse API-format JSON text. Unknown top-level keys and _meta other than
 * title are ignored. A top-level {"prompt": {...}} wrapper (the /prompt body)
 * is accepted too, and so is a UI-format workflow ("nodes" and "links"),
 * converted with the registry's schemas (workflow_ui.h). `source` names the
 * text in errors (file name). */
sd_status sd_graph_from_json(const char *text, const char *source, sd_graph **out,
                             sd_error *err);
/* Serialize to API-format JSON (malloc'd string, caller frees). */
char *sd_graph_to_json(const sd_graph *g, int pretty);

/* Apply `--set ID.INPUT=VALUE`: VALUE is parsed as JSON when it parses
 * (numbers, true/false, "strings"), else taken as a plain string. ID may also
 * be the title or class_type of exactly one node. */
sd_status sd_graph_apply_set(sd_graph *g, const char *assignment, sd_error *err);

#endif
