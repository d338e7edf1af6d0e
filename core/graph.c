/* graph.c - the workflow graph: nodes in insertion order, named inputs that
 * are literals or links. Graphs are small (tens to hundreds of nodes), so
 * lookups are linear scans; node pointers stay valid until the node is
 * removed because the graph stores pointers, not structs. */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sd_graph {
    sd_graph_node **nodes;
    size_t n, cap;
};

sd_graph *sd_graph_new(void) { return calloc(1, sizeof(sd_graph)); }

static void input_clear(sd_graph_input *in) {
    free(in->name);
    sd_value_unref(in->literal);
    free(in->src_id);
    memset(in, 0, sizeof *in);
}

static void node_free(sd_graph_node *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_inputs; i++) input_clear(&n->inputs[i]);
    free(n->inputs);
    free(n->id);
    free(n->class_type);
    free(n->title);
    free(n->origin);
    free(n);
}

void sd_graph_free(sd_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) node_free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Literal values are immutable, so a clone shares them by reference. */
sd_graph *sd_graph_clone(const sd_graph *g) {
    sd_graph *c = sd_graph_new();
    if (!c) return NULL;
    for (size_t i = 0; i < g->n; i++) {
        const sd_graph_node *src = g->nodes[i];
        sd_graph_node *dst;
        if (sd_graph_add_node(c, src->id, src->class_type, &dst, NULL)) goto fail;
        if ((src->title && !(dst->title = strdup(src->title))) ||
            (src->origin && !(dst->origin = strdup(src->origin))))
            goto fail;
        for (size_t k = 0; k < src->n_inputs; k++) {
            const sd_graph_input *in = &src->inputs[k];
            sd_status rc = in->is_link
                ? sd_graph_set_link(dst, in->name, in->src_id, in->src_index, NULL)
                : sd_graph_set_literal(dst, in->name, sd_value_ref(in->literal), NULL);
            if (rc) goto fail;
        }
    }
    return c;
fail:
    sd_graph_free(c);
    return NULL;
}

sd_graph_node *sd_graph_find(const sd_graph *g, const char *id) {
    if (!g || !id) return NULL;
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->nodes[i]->id, id) == 0) return g->nodes[i];
    return NULL;
}

size_t sd_graph_count(const sd_graph *g) { return g ? g->n : 0; }

sd_graph_node *sd_graph_at(const sd_graph *g, size_t i) {
    return g && i < g->n ? g->nodes[i] : NULL;
}

sd_status sd_graph_add_node(sd_graph *g, const char *id, const char *class_type,
                            sd_graph_node **out, sd_error *err) {
    if (out) *out = NULL;
    if (!id || !*id) return sd_error_set(err, SD_ERR_INVALID, "node id is empty");
    if (!class_type || !*class_type) {
        sd_error_set(err, SD_ERR_INVALID, "node '%s' has no class_type", id);
        sd_error_at(err, id, NULL, NULL);
        return SD_ERR_INVALID;
    }
    if (sd_graph_find(g, id)) {
        sd_error_set(err, SD_ERR_INVALID, "node id '%s' is used twice", id);
        sd_error_at(err, id, class_type, NULL);
        return SD_ERR_INVALID;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        sd_graph_node **nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes) return sd_error_set(err, SD_ERR_NOMEM, "out of memory adding node '%s'", id);
        g->nodes = nodes;
        g->cap = cap;
    }
    sd_graph_node *n = calloc(1, sizeof *n);
    if (!n || !(n->id = strdup(id)) || !(n->class_type = strdup(class_type))) {
        node_free(n);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory adding node '%s'", id);
    }
    g->nodes[g->n++] = n;
    if (out) *out = n;
    return SD_OK;
}

sd_status sd_graph_remove_node(sd_graph *g, const char *id, sd_error *err) {
    for (size_t i = 0; i < g->n; i++) {
        if (strcmp(g->nodes[i]->id, id) != 0) continue;
        node_free(g->nodes[i]);
        memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof *g->nodes);
        g->n--;
        return SD_OK;
    }
    sd_error_set(err, SD_ERR_NOT_FOUND, "no node '%s' in the workflow", id);
    sd_error_at(err, id, NULL, NULL);
    return SD_ERR_NOT_FOUND;
}

sd_graph_input *sd_graph_node_input(const sd_graph_node *n, const char *name) {
    if (!n || !name) return NULL;
    for (size_t i = 0; i < n->n_inputs; i++)
        if (strcmp(n->inputs[i].name, name) == 0) return &n->inputs[i];
    return NULL;
}

/* Existing slot for `name`, cleared, or a new one appended (input order is
 * kept so that serialization round-trips). */
static sd_graph_input *slot_for(sd_graph_node *n, const char *name, sd_error *err) {
    sd_graph_input *in = sd_graph_node_input(n, name);
    char *nm = strdup(name);
    if (!nm) { sd_error_set(err, SD_ERR_NOMEM, "out of memory"); return NULL; }
    if (in) {
        input_clear(in);
        in->name = nm;
        return in;
    }
    sd_graph_input *inputs = realloc(n->inputs, (n->n_inputs + 1) * sizeof *inputs);
    if (!inputs) { free(nm); sd_error_set(err, SD_ERR_NOMEM, "out of memory"); return NULL; }
    n->inputs = inputs;
    in = &n->inputs[n->n_inputs++];
    memset(in, 0, sizeof *in);
    in->name = nm;
    return in;
}

sd_status sd_graph_set_literal(sd_graph_node *n, const char *name, sd_value *v,
                               sd_error *err) {
    if (!v) return sd_error_set(err, SD_ERR_INVALID, "no value for input '%s'", name);
    sd_graph_input *in = slot_for(n, name, err);
    if (!in) { sd_value_unref(v); return SD_ERR_NOMEM; }
    in->literal = v;
    return SD_OK;
}

sd_status sd_graph_set_link(sd_graph_node *n, const char *name, const char *src_id,
                            int src_index, sd_error *err) {
    char *src = strdup(src_id ? src_id : "");
    if (!src) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_graph_input *in = slot_for(n, name, err);
    if (!in) { free(src); return SD_ERR_NOMEM; }
    in->is_link = 1;
    in->src_id = src;
    in->src_index = src_index;
    return SD_OK;
}

sd_status sd_graph_unset_input(sd_graph_node *n, const char *name) {
    sd_graph_input *in = sd_graph_node_input(n, name);
    if (!in) return SD_ERR_NOT_FOUND;
    size_t i = (size_t)(in - n->inputs);
    input_clear(in);
    memmove(&n->inputs[i], &n->inputs[i + 1], (n->n_inputs - i - 1) * sizeof *n->inputs);
    n->n_inputs--;
    return SD_OK;
}

void sd_graph_node_set_origin(sd_graph_node *n, const char *origin) {
    char *o = dup_or_null(origin);
    if (origin && !o) return; /* keep the old one rather than lose both */
    free(n->origin);
    n->origin = o;
}

void sd_graph_node_set_title(sd_graph_node *n, const char *title) {
    char *t = dup_or_null(title);
    if (title && !t) return;
    free(n->title);
    n->title = t;
}

char *sd_graph_new_id(const sd_graph *g) {
    char buf[32];
    for (unsigned long k = 1;; k++) {
        snprintf(buf, sizeof buf, "%lu", k);
        if (!sd_graph_find(g, buf)) return strdup(buf);
    }
}
