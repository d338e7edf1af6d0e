/* graph_prune.c - dropping the nodes no output needs (sd_graph_drop_unused).
 *
 * One walk up the links from every output node marks what the outputs need
 * (sd_graph_mark_ancestors, also the server's walk for ComfyUI's partial
 * execution); the rest goes in one sd_graph_retain pass, so the whole is
 * linear in nodes plus links. */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "node.h"

void sd_graph_mark_ancestors(const sd_graph *g, size_t from, unsigned char *mark, size_t *stack) {
    if (mark[from]) return;
    size_t top = 0;
    mark[from] = 1;
    stack[top++] = from;
    while (top) {
        const sd_graph_node *node = sd_graph_at(g, stack[--top]);
        for (size_t k = 0; k < node->n_inputs; k++) {
            if (!node->inputs[k].is_link) continue;
            size_t j = sd_graph_index_of(g, node->inputs[k].src_id);
            if (j == (size_t)-1 || mark[j]) continue;
            mark[j] = 1;
            stack[top++] = j; /* each node is pushed once: top < count */
        }
    }
}

sd_status sd_graph_drop_unused(sd_graph *g, size_t *n_removed, char *ids, size_t ids_size,
                               sd_error *err) {
    size_t n = sd_graph_count(g), outputs = 0;
    if (n_removed) *n_removed = 0;
    if (ids && ids_size) ids[0] = 0;
    if (!n) return SD_OK;
    unsigned char *keep = calloc(n, 1);
    size_t *stack = malloc(n * sizeof *stack);
    if (!keep || !stack) {
        free(keep);
        free(stack);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory pruning the workflow");
    }
    for (size_t i = 0; i < n; i++) {
        const sd_node_def *def = sd_registry_find(sd_graph_at(g, i)->class_type);
        if (def && (def->flags & SD_NODE_OUTPUT)) {
            sd_graph_mark_ancestors(g, i, keep, stack);
            outputs++;
        }
    }
    for (size_t i = 0; i < n; i++) /* unknown: left for validation to name */
        if (!sd_registry_find(sd_graph_at(g, i)->class_type)) keep[i] = 1;
    size_t removed = 0, used = 0;
    if (outputs) {
        for (size_t i = 0; i < n; i++) {
            if (keep[i]) continue;
            if (removed < 8 && ids && ids_size > used + 1) {
                int w = snprintf(ids + used, ids_size - used, "%s%s (%s)", removed ? ", " : "",
                                 sd_graph_at(g, i)->id, sd_graph_at(g, i)->class_type);
                if (w > 0) used = used + (size_t)w < ids_size ? used + (size_t)w : ids_size - 1;
            }
            removed++;
        }
        if (removed && ids && removed > 8 && ids_size > used + 1)
            snprintf(ids + used, ids_size - used, ", ... (%zu in all)", removed);
        if (removed) sd_graph_retain(g, keep);
    }
    if (n_removed) *n_removed = removed;
    free(keep);
    free(stack);
    return SD_OK;
}
