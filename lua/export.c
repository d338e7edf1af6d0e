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

static int ready(const exporter *e, const sd_graph_node *n) {
    for (size_t k = 0; k < n->n_inputs; k++) {
        const sd_graph_input *in = &n->inputs[k];
        if (!in->is_link) continue;
        long pos = node_pos(e, in->src_id);
        if (pos >= 0 && !e->emitted[pos]) return 0;
    }
    return 1;
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
    size_t done = 0;
    while (done < e.n) {
        long pick = -1, any = -1;
        for (size_t i = 0; i < e.n; i++) {
            if (e.emitted[i]) continue;
            const char *id = sd_graph_at(g, i)->id;
            if (any < 0 || id_cmp(id, sd_graph_at(g, (size_t)any)->id) < 0) any = (long)i;
            if (ready(&e, sd_graph_at(g, i)) && (pick < 0 || id_cmp(id, sd_graph_at(g, (size_t)pick)->id) < 0))
                pick = (long)i;
        }
        /* in a cycle nothing is ready: the smallest remaining id goes first */
        emit_node(&b, &e, (size_t)(pick >= 0 ? pick : any));
        done++;
    }
    free(e.emitted);
    return sd_sbuf_take(&b);
}
