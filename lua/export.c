/* export.c - a graph printed as a Lua workflow that rebuilds the same graph.
 *
 * The text is canonical: nodes in dependency order, the smallest id first
 * among the ready ones (numerically when ids are numbers), inputs in schema
 * order, so two equal graphs print the same text whatever order they were
 * built in. Every link can then name a Lua variable defined above it; links
 * that cannot (cycles, or a node missing from the graph) are written as
 * link("id", index) and left for validation to report, as in the JSON. */
#include <stdlib.h>
#include <string.h>
#include "core/json_util.h"
#include "lua_internal.h"

/* Lua allows 200 locals per function; bigger graphs go into a table. */
#define MAX_LOCALS 180

typedef struct exporter {
    const sd_graph *g;
    size_t n;
    int use_table;
    char *emitted; /* per node index */
} exporter;

static long node_pos(const exporter *e, const char *id) {
    size_t i = sd_graph_index_of(e->g, id);
    return i == (size_t)-1 ? -1 : (long)i;
}

static int simple_id(const char *id) {
    if (!*id) return 0;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    return 1;
}

static void add_var(sd_sbuf *b, const exporter *e, const char *id) {
    if (e->use_table) {
        sd_sbuf_add(b, "n[");
        sd_sbuf_lua_string(b, id);
        sd_sbuf_add(b, "]");
    } else {
        sd_sbuf_printf(b, "n%s", id);
    }
}

static int is_special_key(const char *s) {
    return !strcmp(s, "id") || !strcmp(s, "class_type") || !strcmp(s, "title");
}

static void add_link(sd_sbuf *b, const exporter *e, const sd_graph_input *in) {
    long pos = node_pos(e, in->src_id);
    if (pos < 0 || !e->emitted[pos]) {
        sd_sbuf_add(b, "link(");
        sd_sbuf_lua_string(b, in->src_id);
        sd_sbuf_printf(b, ", %d)", in->src_index);
        return;
    }
    add_var(b, e, in->src_id);
    const sd_node_def *def = sd_registry_find(sd_graph_at(e->g, (size_t)pos)->class_type);
    const char *name = def && in->src_index < sd_node_output_count(def) ? def->outputs[in->src_index].name : NULL;
    /* a name is only usable when it picks this output and no special field */
    if (name && sd_lua_is_name(name) && !is_special_key(name) && sd_node_output_index(def, name) == in->src_index)
        sd_sbuf_printf(b, ".%s", name);
    else
        sd_sbuf_printf(b, "[%d]", in->src_index + 1);
}

/* Id order: numbers by value, numbers before other ids, others by bytes. */
static int id_cmp(const char *a, const char *b) {
    char *ea, *eb;
    unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
    int na = *a >= '0' && *a <= '9' && !*ea, nb = *b >= '0' && *b <= '9' && !*eb;
    if (na && nb && x != y) return x < y ? -1 : 1;
    if (na != nb) return na ? -1 : 1;
    return strcmp(a, b);
}

typedef struct ranked {
    const sd_graph_input *in;
    int rank;
} ranked;

static int ranked_cmp(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return strcmp(a->in->name, b->in->name);
}

static void emit_node(sd_sbuf *b, exporter *e, size_t i) {
    const sd_graph_node *n = sd_graph_at(e->g, i);
    const sd_node_def *def = sd_registry_find(n->class_type);
    ranked *order = calloc(n->n_inputs ? n->n_inputs : 1, sizeof *order);
    if (!order) { b->oom = 1; e->emitted[i] = 1; return; }
    for (size_t k = 0; k < n->n_inputs; k++) {
        int r = def ? sd_node_input_index(def, n->inputs[k].name) : -1;
        order[k].in = &n->inputs[k];
        order[k].rank = r < 0 ? 1 << 20 : r;
    }
    qsort(order, n->n_inputs, sizeof *order, ranked_cmp);
    if (!e->use_table) sd_sbuf_add(b, "local ");
    add_var(b, e, n->id);
    sd_sbuf_add(b, " = ");
    int plain = sd_lua_is_name(n->class_type) && sd_registry_find(n->class_type);
    if (plain) {
        sd_sbuf_printf(b, "%s{\n", n->class_type);
    } else {
        sd_sbuf_add(b, "Node(");
        sd_sbuf_lua_string(b, n->class_type);
        sd_sbuf_add(b, ", {\n");
    }
    sd_sbuf_add(b, "    _id = ");
    sd_sbuf_lua_string(b, n->id);
    sd_sbuf_add(b, ",\n");
    if (n->title) {
        sd_sbuf_add(b, "    _title = ");
        sd_sbuf_lua_string(b, n->title);
        sd_sbuf_add(b, ",\n");
    }
    for (size_t k = 0; k < n->n_inputs; k++) {
        const sd_graph_input *in = order[k].in;
        sd_sbuf_add(b, "    ");
        if (sd_lua_is_name(in->name)) {
            sd_sbuf_add(b, in->name);
        } else {
            sd_sbuf_add(b, "[");
            sd_sbuf_lua_string(b, in->name);
            sd_sbuf_add(b, "]");
        }
        sd_sbuf_add(b, " = ");
        if (in->is_link) add_link(b, e, in);
        else sd_sbuf_lua_input_value(b, in->literal, sd_json_input_is_u64_named(n->class_type, in->name));
        sd_sbuf_add(b, ",\n");
    }
    sd_sbuf_add(b, plain ? "}\n" : "})\n");
    free(order);
    e->emitted[i] = 1;
}

/* ---- the order: Kahn's algorithm by id -------------------------------------------
 * Among the nodes whose sources are all written, the smallest id goes next;
 * when none is (a cycle), the smallest remaining id. A heap of ready nodes
 * keyed by their rank in id order keeps this O((n + links) log n): a
 * 100,000-node graph used to take hours here. */

typedef struct id_at {
    const char *id;
    size_t index;
} id_at;

static int cmp_id_at(const void *a, const void *b) {
    return id_cmp(((const id_at *)a)->id, ((const id_at *)b)->id);
}

static void heap_push(size_t *h, size_t *n, const size_t *rank, size_t v) {
    size_t i = (*n)++;
    while (i && rank[h[(i - 1) / 2]] > rank[v]) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static size_t heap_pop(size_t *h, size_t *n, const size_t *rank) {
    size_t top = h[0], v = h[--*n], i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && rank[h[c + 1]] < rank[h[c]]) c++;
        if (rank[h[c]] >= rank[v]) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* Writes every node in order; -1 when out of memory. */
static int emit_all(sd_sbuf *b, exporter *e) {
    size_t n = e->n, n_links = 0;
    for (size_t i = 0; i < n; i++) {
        const sd_graph_node *nd = sd_graph_at(e->g, i);
        for (size_t k = 0; k < nd->n_inputs; k++) n_links += nd->inputs[k].is_link;
    }
    id_at *by_id = malloc((n ? n : 1) * sizeof *by_id);
    size_t *rank = malloc((n ? n : 1) * sizeof *rank);
    size_t *indeg = calloc(n ? n : 1, sizeof *indeg), *start = calloc(n + 1, sizeof *start);
    size_t *cons = malloc((n_links ? n_links : 1) * sizeof *cons), *heap = malloc((n ? n : 1) * sizeof *heap);
    int rc = -1;
    if (!by_id || !rank || !indeg || !start || !cons || !heap) goto done;
    for (size_t i = 0; i < n; i++) by_id[i] = (id_at){sd_graph_at(e->g, i)->id, i};
    qsort(by_id, n, sizeof *by_id, cmp_id_at);
    for (size_t r = 0; r < n; r++) rank[by_id[r].index] = r;
    /* consumers of node s: cons[start[s] .. start[s+1]), one per link */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            const sd_graph_node *nd = sd_graph_at(e->g, i);
            for (size_t k = 0; k < nd->n_inputs; k++) {
                if (!nd->inputs[k].is_link) continue;
                long s = node_pos(e, nd->inputs[k].src_id);
                if (s < 0) continue; /* a missing node: never waited for */
                if (pass == 0) {
                    indeg[i]++;
                    start[s + 1]++;
                } else {
                    cons[heap[s]++] = i;
                }
            }
        }
        if (pass == 0) {
            for (size_t i = 0; i < n; i++) start[i + 1] += start[i];
            memcpy(heap, start, n * sizeof *heap); /* fill cursors until the heap is used */
        }
    }
    size_t n_heap = 0, cursor = 0;
    for (size_t i = 0; i < n; i++)
        if (!indeg[i]) heap_push(heap, &n_heap, rank, i);
    for (size_t done = 0; done < n;) {
        size_t pick;
        if (n_heap) {
            pick = heap_pop(heap, &n_heap, rank);
            if (e->emitted[pick]) continue; /* written earlier to break a cycle */
        } else { /* in a cycle nothing is ready: the smallest remaining id goes first */
            while (e->emitted[by_id[cursor].index]) cursor++;
            pick = by_id[cursor].index;
        }
        emit_node(b, e, pick);
        done++;
        for (size_t c = start[pick]; c < start[pick + 1]; c++)
            if (--indeg[cons[c]] == 0 && !e->emitted[cons[c]]) heap_push(heap, &n_heap, rank, cons[c]);
    }
    rc = 0;
done:
    free(by_id);
    free(rank);
    free(indeg);
    free(start);
    free(cons);
    free(heap);
    return rc;
}

char *sd_lua_export(const sd_graph *g, const char *source) {
    exporter e = {.g = g, .n = sd_graph_count(g)};
    e.emitted = calloc(e.n ? e.n : 1, 1);
    if (!e.emitted) return NULL;
    e.use_table = e.n > MAX_LOCALS;
    for (size_t i = 0; !e.use_table && i < e.n; i++)
        if (!simple_id(sd_graph_at(g, i)->id)) e.use_table = 1;

    sd_sbuf b = {0};
    sd_sbuf_add(&b, "-- sdflow Lua workflow");
    if (source) {
        sd_sbuf_add(&b, " (exported from ");
        /* a newline in the name must not end the comment */
        for (const char *p = source; *p; p++) sd_sbuf_addn(&b, *p == '\n' ? " " : p, 1);
        sd_sbuf_add(&b, ")");
    }
    sd_sbuf_add(&b, "\n-- run: sdflow run this.lua   (docs/lua.md)\n\n");
    if (e.use_table) sd_sbuf_add(&b, "local n = {}\n");
    if (emit_all(&b, &e)) b.oom = 1;
    free(e.emitted);
    return sd_sbuf_take(&b);
}
