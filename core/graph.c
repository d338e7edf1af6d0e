/* graph.c - the workflow graph: nodes in insertion order, named inputs that
 * are literals or links. Node pointers stay valid until the node is removed
 * because the graph stores pointers, not structs. Ids are found through a
 * hash map (id -> position), so building, copying and checking a graph is
 * linear in its size even for generated workflows of 100,000 nodes; the
 * inputs of one node stay a short array. */
#include "graph.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hashmap.h"

struct sd_graph {
    sd_graph_node **nodes;
    size_t n, cap;
    sd_hashmap *ids;          /* node id (borrowed from the node) -> index in nodes */
    unsigned long free_from;  /* no integer id below this is free (sd_graph_new_id) */
};

sd_graph *sd_graph_new(void) {
    sd_graph *g = calloc(1, sizeof(sd_graph));
    if (!g) return NULL;
    g->free_from = 1;
    if (!(g->ids = sd_hashmap_new())) {
        free(g);
        return NULL;
    }
    return g;
}

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
    sd_hashmap_free(g->ids);
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

size_t sd_graph_index_of(const sd_graph *g, const char *id) {
    size_t i;
    if (!g || !id || !sd_hashmap_get_str(g->ids, id, &i)) return (size_t)-1;
    return i;
}

sd_graph_node *sd_graph_find(const sd_graph *g, const char *id) {
    size_t i = sd_graph_index_of(g, id);
    return i == (size_t)-1 ? NULL : g->nodes[i];
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
    if (!n || !(n->id = strdup(id)) || !(n->class_type = strdup(class_type)) ||
        sd_hashmap_put_str(g->ids, n->id, g->n)) {
        node_free(n);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory adding node '%s'", id);
    }
    g->nodes[g->n++] = n;
    if (out) *out = n;
    return SD_OK;
}

/* The integer k when s is its canonical decimal text ("12", not "012"). */
static int canonical_uint(const char *s, unsigned long *k) {
    if (s[0] < '1' || s[0] > '9') return 0;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end) return 0;
    *k = v;
    return 1;
}

/* Removal keeps insertion order, so the nodes after the removed one move
 * down and their positions in the id map are updated: O(n), as the move is. */
sd_status sd_graph_remove_node(sd_graph *g, const char *id, sd_error *err) {
    size_t i = sd_graph_index_of(g, id);
    if (i == (size_t)-1) {
        sd_error_set(err, SD_ERR_NOT_FOUND, "no node '%s' in the workflow", id);
        sd_error_at(err, id, NULL, NULL);
        return SD_ERR_NOT_FOUND;
    }
    unsigned long k;
    if (canonical_uint(g->nodes[i]->id, &k) && k < g->free_from) g->free_from = k;
    sd_hashmap_remove_str(g->ids, g->nodes[i]->id); /* before the key's bytes are freed */
    node_free(g->nodes[i]);
    memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof *g->nodes);
    g->n--;
    for (size_t j = i; j < g->n; j++) sd_hashmap_put_str(g->ids, g->nodes[j]->id, j); /* replaces: no allocation */
    return SD_OK;
}

void sd_graph_retain(sd_graph *g, const unsigned char *keep) {
    size_t w = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (keep[i]) {
            g->nodes[w++] = g->nodes[i];
            continue;
        }
        unsigned long k;
        if (canonical_uint(g->nodes[i]->id, &k) && k < g->free_from) g->free_from = k;
        sd_hashmap_remove_str(g->ids, g->nodes[i]->id); /* before the key's bytes are freed */
        node_free(g->nodes[i]);
    }
    g->n = w;
    for (size_t j = 0; j < w; j++) sd_hashmap_put_str(g->ids, g->nodes[j]->id, j); /* replaces */
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

/* free_from only moves up past ids found taken and back down when a node
 * with a smaller integer id is removed, so n calls cost O(n) lookups in all,
 * not O(n^2) (a 10,000-node Lua workflow used to take minutes here). */
char *sd_graph_new_id(sd_graph *g) {
    char buf[32];
    for (unsigned long k = g->free_from;; k++) {
        snprintf(buf, sizeof buf, "%lu", k);
        if (!sd_graph_find(g, buf)) {
            g->free_from = k;
            return strdup(buf);
        }
    }
}
