/* workflow_ui.c - ComfyUI UI-format workflow -> API form (workflow_ui.h).
 *
 * Follows the frontend's graphToPrompt and ExecutableNodeDTO: every input
 * with a link is resolved to its real origin by walking through reroutes,
 * bypassed nodes and subgraph boundaries; a walk that ends at a primitive
 * yields that primitive's value, one that ends nowhere drops the input.
 *
 * The file is only read: every pointer into it (types, titles, widget
 * values) stays owned by the caller's cJSON tree. */
#include "workflow_ui.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/node.h"
#include "core/json_util.h"
#include "workflow_group_nodes.h"

enum { MODE_NEVER = 2, MODE_BYPASS = 4 };
/* MAX_HOPS bounds one input's walk through reroutes, bypassed nodes and
 * subgraph boundaries (a loop of them would never end). The walk recurses,
 * two frames a hop: 10,000 hops overflowed an 8 MiB stack under ASan (found by
 * fuzz.workflow_ui); no real workflow chains a thousand reroutes. */
enum { MAX_ID = 64, MAX_NESTING = 32, MAX_HOPS = 1000 };
/* Nodes the subgraph expansion may add beyond those the file holds: nested
 * subgraphs multiply (a 14 KB file of ten levels of ten instances expanded
 * to 10^7 nodes, 10 GB, before this), so the expanded count is computed
 * first and a file over it refused before anything is allocated for it. The
 * largest graphs sdflow is tested with have 100,000 nodes. */
enum { MAX_EXPANDED = 100000 };
#define SUBGRAPH_INPUT_NODE "-10" /* the id of a subgraph's input and output nodes */
#define SUBGRAPH_OUTPUT_NODE "-20"

typedef struct usub usub;

typedef struct unode {
    char id[MAX_ID];
    const char *type;
    const char *title;   /* the node's own title, NULL when it kept the default */
    int mode;
    const cJSON *inputs, *outputs, *wv; /* wv: widgets_values (array, object or NULL) */
    const sd_node_def *def;
    const usub *sub;     /* set when `type` names a subgraph definition */
} unode;

typedef struct ulink {
    long long id;
    char origin[MAX_ID];
    int origin_slot;
} ulink;

/* One graph level: the root workflow or one subgraph definition. */
typedef struct ulevel {
    unode *nodes;        /* file order */
    size_t n_nodes;
    unode **by_id;       /* sorted by id */
    ulink *links;        /* sorted by id */
    size_t n_links;
} ulevel;

struct usub {
    const char *id;
    const cJSON *outputs;
    ulevel g;
};

/* Where a level is being read: the root, or one instance of a subgraph
 * (the subgraph node `node` of level `parent`). Instances live on the stack
 * of the walk that enters them. */
typedef struct uinst {
    const ulevel *g;
    const char *prefix;        /* "" or "<outer>:" ... for the execution ids */
    const struct uinst *parent;
    const unode *node;
    int depth;
} uinst;

typedef struct emitted {
    char *id;
    cJSON *node;
    size_t seq;
} emitted;

typedef struct conv {
    const char *source;
    sd_error *err;
    ulevel root;
    usub *subs;
    size_t n_subs;
    emitted *out;
    size_t n_out, cap_out;
    int hops;
} conv;

typedef struct resolved {
    enum { R_NONE, R_LINK, R_VALUE } kind;
    char *id;            /* R_LINK: execution id of the origin (malloc'd) */
    int slot;
    const cJSON *value;  /* R_VALUE: owned by the input tree */
} resolved;

/* ---- errors ------------------------------------------------------------------ */

static sd_status fail(conv *c, sd_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static sd_status fail(conv *c, sd_status code, const char *fmt, ...) {
    char msg[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sd_error_set(c->err, code, "%s: %s", c->source, msg);
}

/* An error about node n (and widget or input `what`, may be NULL): the
 * error's node id is the execution id, the message carries the title. */
static sd_status node_fail(conv *c, sd_status code, const uinst *in, const unode *n, const char *what,
                           const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static sd_status node_fail(conv *c, sd_status code, const uinst *in, const unode *n, const char *what,
                           const char *fmt, ...) {
    char msg[SD_ERR_MSG_MAX], id[SD_ERR_ID_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(id, sizeof id, "%s%s", in ? in->prefix : "", n->id);
    if (n->title)
        sd_error_set(c->err, code, "%s: node titled \"%s\": %s", c->source, n->title, msg);
    else
        sd_error_set(c->err, code, "%s: %s", c->source, msg);
    sd_error_at(c->err, id, n->type, what);
    return code;
}

/* ---- reading the file -------------------------------------------------------- */

/* Node ids are numbers (sometimes strings); both become their text. */
static int id_text(const cJSON *j, char out[MAX_ID]) {
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0) return -1;
        snprintf(out, MAX_ID, "%lld", (long long)d);
        return 0;
    }
    if (cJSON_IsString(j) && j->valuestring[0] && strlen(j->valuestring) < MAX_ID) {
        snprintf(out, MAX_ID, "%s", j->valuestring);
        return 0;
    }
    return -1;
}

static int int_of(const cJSON *j, long long *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0) return -1;
    *out = (long long)d;
    return 0;
}

static int cmp_node(const void *a, const void *b) {
    return strcmp((*(unode *const *)a)->id, (*(unode *const *)b)->id);
}

static int cmp_link(const void *a, const void *b) {
    long long x = ((const ulink *)a)->id, y = ((const ulink *)b)->id;
    return x < y ? -1 : x > y;
}

static const unode *find_node(const ulevel *g, const char *id) {
    unode key, *pk = &key;
    snprintf(key.id, sizeof key.id, "%s", id);
    unode **hit = g->n_nodes ? bsearch(&pk, g->by_id, g->n_nodes, sizeof *g->by_id, cmp_node) : NULL;
    return hit ? *hit : NULL;
}

static const ulink *find_link(const ulevel *g, long long id) {
    ulink key = {.id = id};
    return g->n_links ? bsearch(&key, g->links, g->n_links, sizeof *g->links, cmp_link) : NULL;
}

/* A link is [id, origin_id, origin_slot, target_id, target_slot, type]
 * (version 0.4) or {id, origin_id, origin_slot, ...} (version 1 and
 * subgraph definitions). null entries are skipped, as the frontend does. */
static sd_status read_link(conv *c, const cJSON *j, size_t k, const char *where, ulink *l, int *skip) {
    const cJSON *id, *origin, *slot;
    *skip = 0;
    if (cJSON_IsNull(j)) { *skip = 1; return SD_OK; }
    if (cJSON_IsArray(j)) {
        id = cJSON_GetArrayItem(j, 0);
        origin = cJSON_GetArrayItem(j, 1);
        slot = cJSON_GetArrayItem(j, 2);
    } else if (cJSON_IsObject(j)) {
        id = cJSON_GetObjectItemCaseSensitive(j, "id");
        origin = cJSON_GetObjectItemCaseSensitive(j, "origin_id");
        slot = cJSON_GetObjectItemCaseSensitive(j, "origin_slot");
    } else {
        return fail(c, SD_ERR_FORMAT, "%slinks[%zu] is neither a list nor an object", where, k);
    }
    long long s;
    if (int_of(id, &l->id) || id_text(origin, l->origin) || int_of(slot, &s) || s < 0 || s > 1000000)
        return fail(c, SD_ERR_FORMAT, "%slinks[%zu] lacks a valid id, origin_id or origin_slot", where, k);
    l->origin_slot = (int)s;
    return SD_OK;
}

static sd_status read_level(conv *c, const cJSON *nodes, const cJSON *links, const char *where, ulevel *g) {
    size_t n = (size_t)cJSON_GetArraySize(nodes);
    if (!cJSON_IsArray(nodes)) return fail(c, SD_ERR_FORMAT, "%s\"nodes\" is not a list", where);
    if (links && !cJSON_IsArray(links) && !cJSON_IsNull(links))
        return fail(c, SD_ERR_FORMAT, "%s\"links\" is not a list", where);
    g->nodes = calloc(n ? n : 1, sizeof *g->nodes);
    g->by_id = calloc(n ? n : 1, sizeof *g->by_id);
    size_t nl = cJSON_IsArray(links) ? (size_t)cJSON_GetArraySize(links) : 0;
    g->links = calloc(nl ? nl : 1, sizeof *g->links);
    if (!g->nodes || !g->by_id || !g->links) return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (const cJSON *j = nodes->child; j; j = j->next, k++) {
        unode *u = &g->nodes[g->n_nodes];
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (!cJSON_IsObject(j) || id_text(cJSON_GetObjectItemCaseSensitive(j, "id"), u->id))
            return fail(c, SD_ERR_FORMAT, "%snodes[%zu] has no valid \"id\"", where, k);
        if (!cJSON_IsString(type) || !type->valuestring[0])
            return fail(c, SD_ERR_FORMAT, "%snode %s has no \"type\"", where, u->id);
        u->type = type->valuestring;
        const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
        u->title = cJSON_IsString(title) ? title->valuestring : NULL;
        long long mode = 0;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "mode");
        if (m && int_of(m, &mode)) return fail(c, SD_ERR_FORMAT, "%snode %s: \"mode\" is not a number", where, u->id);
        u->mode = mode == MODE_NEVER || mode == MODE_BYPASS ? (int)mode : 0;
        u->inputs = cJSON_GetObjectItemCaseSensitive(j, "inputs");
        u->outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
        if ((u->inputs && !cJSON_IsArray(u->inputs) && !cJSON_IsNull(u->inputs)) ||
            (u->outputs && !cJSON_IsArray(u->outputs) && !cJSON_IsNull(u->outputs)))
            return fail(c, SD_ERR_FORMAT, "%snode %s: \"inputs\"/\"outputs\" is not a list", where, u->id);
        if (!cJSON_IsArray(u->inputs)) u->inputs = NULL;
        if (!cJSON_IsArray(u->outputs)) u->outputs = NULL;
        u->wv = cJSON_GetObjectItemCaseSensitive(j, "widgets_values");
        if (!cJSON_IsArray(u->wv) && !cJSON_IsObject(u->wv)) u->wv = NULL;
        u->def = sd_registry_find(u->type);
        g->by_id[g->n_nodes] = u;
        g->n_nodes++;
    }
    qsort(g->by_id, g->n_nodes, sizeof *g->by_id, cmp_node);
    for (size_t i = 1; i < g->n_nodes; i++)
        if (!strcmp(g->by_id[i - 1]->id, g->by_id[i]->id))
            return fail(c, SD_ERR_FORMAT, "%stwo nodes have the id %s", where, g->by_id[i]->id);
    k = 0;
    for (const cJSON *j = cJSON_IsArray(links) ? links->child : NULL; j; j = j->next, k++) {
        int skip;
        sd_status rc = read_link(c, j, k, where, &g->links[g->n_links], &skip);
        if (rc) return rc;
        if (!skip) g->n_links++;
    }
    qsort(g->links, g->n_links, sizeof *g->links, cmp_link);
    for (size_t i = 1; i < g->n_links; i++)
        if (g->links[i - 1].id == g->links[i].id)
            return fail(c, SD_ERR_FORMAT, "%stwo links have the id %lld", where, g->links[i].id);
    return SD_OK;
}

static void free_level(ulevel *g) {
    free(g->nodes);
    free(g->by_id);
    free(g->links);
}

static sd_status read_subgraphs(conv *c, const cJSON *root) {
    const cJSON *defs = cJSON_GetObjectItemCaseSensitive(root, "definitions");
    const cJSON *subs = cJSON_GetObjectItemCaseSensitive(defs, "subgraphs");
    if (!cJSON_IsArray(subs)) return SD_OK;
    size_t n = (size_t)cJSON_GetArraySize(subs);
    c->subs = calloc(n ? n : 1, sizeof *c->subs);
    if (!c->subs) return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    for (const cJSON *s = subs->child; s; s = s->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "id");
        if (!cJSON_IsString(id) || !id->valuestring[0])
            return fail(c, SD_ERR_FORMAT, "definitions.subgraphs[%zu] has no \"id\"", c->n_subs);
        usub *u = &c->subs[c->n_subs++];
        u->id = id->valuestring;
        u->outputs = cJSON_GetObjectItemCaseSensitive(s, "outputs");
        char where[160];
        snprintf(where, sizeof where, "subgraph %.100s: ", u->id);
        sd_status rc = read_level(c, cJSON_GetObjectItemCaseSensitive(s, "nodes"),
                                  cJSON_GetObjectItemCaseSensitive(s, "links"), where, &u->g);
        if (rc) return rc;
    }
    return SD_OK;
}

/* (by bisection over the definitions sorted by id: a file of many nodes and
 * many definitions stays linearithmic) */
static int cmp_sub_ptr(const void *a, const void *b) {
    return strcmp((*(const usub *const *)a)->id, (*(const usub *const *)b)->id);
}

static int cmp_sub_ptr_stable(const void *a, const void *b) {
    int d = cmp_sub_ptr(a, b);
    const usub *x = *(const usub *const *)a, *y = *(const usub *const *)b;
    return d ? d : (x < y ? -1 : x > y);
}

static void link_subgraph_nodes(conv *c, usub **sorted, ulevel *g) {
    for (size_t i = 0; i < g->n_nodes && c->n_subs; i++) {
        if (g->nodes[i].def) continue;
        usub key = {.id = g->nodes[i].type}, *kp = &key;
        usub **hit = bsearch(&kp, sorted, c->n_subs, sizeof *sorted, cmp_sub_ptr);
        if (!hit) continue;
        while (hit > sorted && !strcmp(hit[-1]->id, key.id)) hit--; /* the first of equal ids, as before */
        g->nodes[i].sub = *hit;
    }
}

/* ---- slots ------------------------------------------------------------------- */

static const cJSON *slot_at(const cJSON *slots, int i) { return i < 0 ? NULL : cJSON_GetArrayItem(slots, i); }

/* The link id of an input slot; 0 when nothing is connected. */
static int slot_link(const cJSON *in, long long *id) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(in, "link");
    return int_of(l, id) == 0;
}

static const char *slot_type(const cJSON *slot) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(slot, "type");
    if (cJSON_IsString(t)) return t->valuestring;
    if (cJSON_IsArray(t)) return "COMBO"; /* old saves keep a combo's option list as its type */
    return "*";
}

/* The input's name; a widget turned into an input is named by its widget. */
static const char *slot_name(const cJSON *in) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(in, "widget");
    const cJSON *wn = cJSON_GetObjectItemCaseSensitive(w, "name");
    if (cJSON_IsString(wn) && wn->valuestring[0]) return wn->valuestring;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(in, "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

/* LiteGraph.isValidConnection: "" and "*" match anything, otherwise any
 * member of one comma-separated list equals (ignoring case) one of the other. */
static int same_type_ci(const char *a, size_t la, const char *b, size_t lb) {
    if (la != lb) return 0;
    for (size_t i = 0; i < la; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i])) return 0;
    return 1;
}

static int valid_connection(const char *a, const char *b) {
    if (!*a || !strcmp(a, "*") || !*b || !strcmp(b, "*") || !strcmp(a, b)) return 1;
    for (const char *p = a; *p;) {
        const char *pe = strchr(p, ',');
        size_t lp = pe ? (size_t)(pe - p) : strlen(p);
        for (const char *q = b; *q;) {
            const char *qe = strchr(q, ',');
            size_t lq = qe ? (size_t)(qe - q) : strlen(q);
            if ((lp == 1 && *p == '*') || (lq == 1 && *q == '*') || same_type_ci(p, lp, q, lq)) return 1;
            if (!qe) break;
            q = qe + 1;
        }
        if (!pe) break;
        p = pe + 1;
    }
    return 0;
}

/* Which input a bypassed node passes to output `slot` for a consumer of
 * type `type`: the input at the same index when its type fits, else the
 * first input of exactly that type, else the first that fits; -1 if none. */
static int bypass_input(const unode *n, int slot, const char *type) {
    int count = cJSON_GetArraySize(n->inputs);
    if (!count) return -1;
    if (!*type || !strcmp(type, "*")) return count > slot ? slot : 0;
    const cJSON *out = slot_at(n->outputs, slot);
    const char *out_type = out ? slot_type(out) : "*";
    const cJSON *opposite = slot_at(n->inputs, slot);
    if (opposite && valid_connection(slot_type(opposite), out_type) && valid_connection(slot_type(opposite), type))
        return slot;
    int i = 0;
    for (const cJSON *in = n->inputs->child; in; in = in->next, i++)
        if (!strcmp(slot_type(in), type)) return i;
    i = 0;
    for (const cJSON *in = n->inputs->child; in; in = in->next, i++)
        if (valid_connection(slot_type(in), out_type) && valid_connection(slot_type(in), type)) return i;
    return -1;
}

static int is_virtual(const char *type) {
    static const char *const names[] = {"Reroute", "PrimitiveNode", "Note", "MarkdownNote", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(type, names[i])) return 1;
    return 0;
}

/* ---- resolving links ---------------------------------------------------------- */

static sd_status resolve_output(conv *c, const uinst *in, const unode *n, int slot, const char *type,
                                resolved *r);

static sd_status hop(conv *c, const uinst *in, const unode *n) {
    if (++c->hops <= MAX_HOPS) return SD_OK;
    return node_fail(c, SD_ERR_FORMAT, in, n, NULL,
                     "the links through reroutes, bypassed nodes or subgraphs form a loop "
                     "(or a chain of more than %d hops)", MAX_HOPS);
}

/* The value of an unconnected subgraph input: the widget promoted onto the
 * subgraph node for it, when there is one (the k-th widget input of the
 * subgraph node holds the k-th widget value). */
static void promoted_value(const unode *sn, int slot, resolved *r) {
    const cJSON *in = slot_at(sn->inputs, slot);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(in, "widget");
    r->kind = R_NONE;
    if (!w || !sn->wv) return;
    if (cJSON_IsObject(sn->wv)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sn->wv, slot_name(in));
        if (v) { r->kind = R_VALUE; r->value = v; }
        return;
    }
    int k = 0;
    for (int i = 0; i < slot; i++)
        if (cJSON_GetObjectItemCaseSensitive(slot_at(sn->inputs, i), "widget")) k++;
    const cJSON *v = cJSON_GetArrayItem(sn->wv, k);
    if (v) { r->kind = R_VALUE; r->value = v; }
}

/* What input `idx` of node n (in instance `in`) receives. `type` is the
 * type asked for by the final consumer, NULL to use this input's own. */
static sd_status resolve_input(conv *c, const uinst *in, const unode *n, int idx, const char *type,
                               resolved *r) {
    sd_status rc = hop(c, in, n);
    if (rc) return rc;
    r->kind = R_NONE;
    const cJSON *slot = slot_at(n->inputs, idx);
    if (!slot) return node_fail(c, SD_ERR_FORMAT, in, n, NULL, "has no input slot %d", idx);
    long long lid;
    if (!slot_link(slot, &lid)) return SD_OK;
    const char *name = slot_name(slot);
    const ulink *l = find_link(in->g, lid);
    if (!l)
        return node_fail(c, SD_ERR_FORMAT, in, n, name, "input '%s' uses link %lld, which is not in \"links\"",
                         name ? name : "?", lid);
    if (!type) type = slot_type(slot);
    if (in->parent && !strcmp(l->origin, SUBGRAPH_INPUT_NODE)) {
        /* up and out of the subgraph, through the subgraph node's input */
        const unode *sn = in->node;
        const cJSON *outer = slot_at(sn->inputs, l->origin_slot);
        if (!outer)
            return node_fail(c, SD_ERR_FORMAT, in->parent, sn, NULL, "the subgraph node has no input %d",
                             l->origin_slot);
        long long olid;
        if (!slot_link(outer, &olid)) { promoted_value(sn, l->origin_slot, r); return SD_OK; }
        return resolve_input(c, in->parent, sn, l->origin_slot, NULL, r);
    }
    const unode *o = find_node(in->g, l->origin);
    if (!o)
        return node_fail(c, SD_ERR_FORMAT, in, n, name, "link %lld comes from node %s, which is not in the workflow",
                         lid, l->origin);
    return resolve_output(c, in, o, l->origin_slot, type, r);
}

static char *join_id(const char *prefix, const char *id) {
    size_t a = strlen(prefix), b = strlen(id);
    char *s = malloc(a + b + 1);
    if (s) { memcpy(s, prefix, a); memcpy(s + a, id, b + 1); }
    return s;
}

static sd_status enter(conv *c, const uinst *in, const unode *sn, uinst *child) {
    if (in->depth + 1 > MAX_NESTING)
        return node_fail(c, SD_ERR_FORMAT, in, sn, NULL, "subgraphs nest deeper than %d levels (a subgraph inside itself?)",
                         MAX_NESTING);
    char *p = malloc(strlen(in->prefix) + strlen(sn->id) + 2);
    if (!p) return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    sprintf(p, "%s%s:", in->prefix, sn->id);
    *child = (uinst){.g = &sn->sub->g, .prefix = p, .parent = in, .node = sn, .depth = in->depth + 1};
    return SD_OK;
}

/* Output `slot` of subgraph node sn: the inner link that feeds the
 * subgraph's output `slot`, followed inside. */
static sd_status resolve_subgraph_output(conv *c, const uinst *in, const unode *sn, int slot, const char *type,
                                         resolved *r) {
    const cJSON *out = cJSON_GetArrayItem(sn->sub->outputs, slot);
    if (!out) return node_fail(c, SD_ERR_FORMAT, in, sn, NULL, "the subgraph has no output %d", slot);
    long long lid;
    if (int_of(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(out, "linkIds"), 0), &lid)) {
        r->kind = R_NONE; /* nothing connected inside */
        return SD_OK;
    }
    uinst child;
    sd_status rc = enter(c, in, sn, &child);
    if (rc) return rc;
    const ulink *l = find_link(child.g, lid);
    if (!l) {
        rc = node_fail(c, SD_ERR_FORMAT, in, sn, NULL, "subgraph output %d uses link %lld, which the subgraph lacks", slot, lid);
    } else if (!strcmp(l->origin, SUBGRAPH_INPUT_NODE)) { /* an input wired straight to an output */
        long long olid;
        const cJSON *outer = slot_at(sn->inputs, l->origin_slot);
        if (outer && !slot_link(outer, &olid)) promoted_value(sn, l->origin_slot, r);
        else rc = resolve_input(c, in, sn, l->origin_slot, NULL, r);
    } else {
        const unode *o = find_node(child.g, l->origin);
        rc = o ? resolve_output(c, &child, o, l->origin_slot, type, r)
               : node_fail(c, SD_ERR_FORMAT, in, sn, NULL, "subgraph link %lld comes from node %s, which the subgraph lacks",
                           lid, l->origin);
    }
    free((char *)child.prefix);
    return rc;
}

static sd_status resolve_output(conv *c, const uinst *in, const unode *n, int slot, const char *type,
                                resolved *r) {
    sd_status rc = hop(c, in, n);
    if (rc) return rc;
    r->kind = R_NONE;
    if (n->mode == MODE_BYPASS) {
        int k = bypass_input(n, slot, type);
        return k < 0 ? SD_OK : resolve_input(c, in, n, k, NULL, r);
    }
    if (n->sub) return resolve_subgraph_output(c, in, n, slot, type, r);
    if (!strcmp(n->type, "PrimitiveNode")) {
        /* the primitive's value is what its widgets receive */
        const cJSON *v = cJSON_IsArray(n->wv) ? n->wv->child : NULL;
        if (v) { r->kind = R_VALUE; r->value = v; }
        return SD_OK;
    }
    if (is_virtual(n->type)) /* Reroute: input i passes to output i */
        return slot_at(n->inputs, slot) ? resolve_input(c, in, n, slot, type, r) : SD_OK;
    r->kind = R_LINK;
    r->slot = slot;
    r->id = join_id(in->prefix, n->id);
    return r->id ? SD_OK : sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
}

/* ---- widgets -------------------------------------------------------------------- */

int sd_workflow_ui_widgets(const sd_node_def *def, sd_ui_widget *w) {
    int k = 0;
    for (int pass = 0; pass < 2; pass++) {
        int upload = 0;
        for (int i = 0; def->inputs && def->inputs[i].name; i++) {
            const sd_input_def *d = &def->inputs[i];
            if ((d->optional != 0) != pass || !sd_type_is_literal(d->type)) continue;
            w[k++] = (sd_ui_widget){d, SD_UI_WIDGET_INPUT};
            if (sd_input_has_control_after_generate(d)) w[k++] = (sd_ui_widget){d, SD_UI_WIDGET_CONTROL};
            if (d->image_upload) upload = 1;
        }
        if (upload) w[k++] = (sd_ui_widget){NULL, SD_UI_WIDGET_UPLOAD};
    }
    return k;
}

static void widget_names(const sd_ui_widget *w, int n, char *buf, size_t size) {
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n && off < size; i++) {
        const char *name = w[i].kind == SD_UI_WIDGET_CONTROL ? "control_after_generate" : w[i].kind == SD_UI_WIDGET_UPLOAD ? "upload" : w[i].input->name;
        off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", name);
    }
}

/* Does a saved value fit a widget of this type? Only a clear mismatch (a
 * text where a number belongs, a number where a text belongs) counts: that
 * is how misaligned widgets_values show. */
static int value_fits(const sd_input_def *d, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return 1;
    if (!strcmp(d->type, SD_T_INT) || !strcmp(d->type, SD_T_FLOAT)) return cJSON_IsNumber(v) || cJSON_IsRaw(v);
    if (!strcmp(d->type, SD_T_STRING) || !strcmp(d->type, SD_T_COMBO))
        return !cJSON_IsNumber(v) && !cJSON_IsRaw(v) && !cJSON_IsBool(v);
    return 1;
}

/* Old saves (and the frontend's default graph) keep a boolean there. */
static int is_control_value(const cJSON *v) {
    static const char *const ok[] = {"fixed", "increment", "decrement", "randomize", NULL};
    if (!v || cJSON_IsNull(v) || cJSON_IsBool(v)) return 1;
    if (!cJSON_IsString(v)) return 0;
    for (int i = 0; ok[i]; i++)
        if (!strcmp(v->valuestring, ok[i])) return 1;
    return 0;
}

/* A literal input value: lists are wrapped as {"__value__": [...]} so they
 * cannot be taken for links (graph_json.c unwraps them). */
static cJSON *literal(const cJSON *v) {
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d || !cJSON_IsArray(d)) return d;
    cJSON *w = cJSON_CreateObject();
    if (!w) { cJSON_Delete(d); return NULL; }
    cJSON_AddItemToObject(w, "__value__", d);
    return w;
}

/* inputs[name] = item, keeping the place of an existing entry (JavaScript
 * object order, which the frontend's output has). Takes ownership. */
static int put(cJSON *inputs, const char *name, cJSON *item) {
    if (!item) return -1;
    if (cJSON_GetObjectItemCaseSensitive(inputs, name))
        return cJSON_ReplaceItemInObjectCaseSensitive(inputs, name, item) ? 0 : -1;
    return cJSON_AddItemToObject(inputs, name, item) ? 0 : -1;
}

static int input_linked(const unode *n, const char *name) {
    for (const cJSON *in = n->inputs ? n->inputs->child : NULL; in; in = in->next) {
        long long lid;
        const char *s = slot_name(in);
        if (s && !strcmp(s, name) && slot_link(in, &lid)) return 1;
    }
    return 0;
}

/* The value the frontend gives a new widget: the input's default, else 0,
 * "" or the first choice (the frontend's rules for a node definition
 * without a default); NULL for a list read from the folders (its first
 * entry depends on the machine: validation then says the value is missing). */
static cJSON *widget_default(const sd_input_def *d) {
    if (!strcmp(d->type, SD_T_INT) || !strcmp(d->type, SD_T_FLOAT)) return cJSON_CreateNumber(d->def);
    if (!strcmp(d->type, SD_T_BOOLEAN)) return cJSON_CreateBool(d->def != 0);
    if (!strcmp(d->type, SD_T_STRING)) return cJSON_CreateString(d->def_str ? d->def_str : "");
    if (!strcmp(d->type, SD_T_COMBO)) {
        if (d->def_str) return cJSON_CreateString(d->def_str);
        if (d->options && d->options[0]) return cJSON_CreateString(d->options[0]);
    }
    return NULL;
}

static sd_status put_widgets(conv *c, const uinst *in, const unode *n, cJSON *inputs) {
    const sd_node_def *def = n->def;
    if (!def) {
        /* an unknown type: only widgets saved by name can be kept */
        if (cJSON_IsObject(n->wv))
            for (const cJSON *v = n->wv->child; v; v = v->next)
                if (put(inputs, v->string, literal(v))) return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
        return SD_OK;
    }
    int count = sd_node_input_count(def);
    sd_ui_widget *w = malloc(((size_t)count * 2 + 2) * sizeof *w);
    if (!w) return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    int nw = sd_workflow_ui_widgets(def, w);
    char names[1024];
    sd_status rc = SD_OK;
    int by_name = cJSON_IsObject(n->wv), nv = n->wv ? cJSON_GetArraySize(n->wv) : 0;
    if (!by_name && nv > nw) {
        widget_names(w, nw, names, sizeof names);
        rc = node_fail(c, SD_ERR_INVALID, in, n, NULL,
                       "widgets_values has %d values but sdflow's %s has %d widget%s (%s): saved by a different "
                       "version of this node?", nv, def->class_type, nw, nw == 1 ? "" : "s", names);
    }
    const cJSON *v = by_name || !n->wv ? NULL : n->wv->child;
    for (int i = 0; !rc && i < nw; i++, v = v ? v->next : NULL) {
        const cJSON *val = by_name ? (w[i].input ? cJSON_GetObjectItemCaseSensitive(n->wv, w[i].input->name) : NULL) : v;
        if (w[i].kind == SD_UI_WIDGET_UPLOAD) continue;
        if (w[i].kind == SD_UI_WIDGET_CONTROL) {
            if (!by_name && !is_control_value(val)) {
                widget_names(w, nw, names, sizeof names);
                char *s = sd_json_print(val, 0);
                rc = node_fail(c, SD_ERR_INVALID, in, n, w[i].input->name,
                               "widgets_values[%d] is %.64s, not the control_after_generate choice (fixed, increment, "
                               "decrement, randomize) that follows '%s'; the values do not line up with sdflow's %s "
                               "widgets (%s)", i, s ? s : "?", w[i].input->name, def->class_type, names);
                free(s);
            }
            continue;
        }
        if (!val) {
            /* not saved (an older save, or a widget added since): the
             * frontend gives a new widget its default, so does this */
            if (input_linked(n, w[i].input->name)) continue;
            cJSON *dv = widget_default(w[i].input);
            if (dv && put(inputs, w[i].input->name, dv)) rc = sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
            continue;
        }
        if (!value_fits(w[i].input, val) && !input_linked(n, w[i].input->name)) {
            widget_names(w, nw, names, sizeof names);
            char *s = sd_json_print(val, 0);
            rc = node_fail(c, SD_ERR_INVALID, in, n, w[i].input->name,
                           "widget '%s' (%s) gets widgets_values[%d] = %.64s; the values do not line up with "
                           "sdflow's %s widgets (%s)", w[i].input->name, w[i].input->type, i, s ? s : "?",
                           def->class_type, names);
            free(s);
            break;
        }
        if (put(inputs, w[i].input->name, literal(val))) rc = sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    }
    free(w);
    return rc;
}

/* ---- emitting nodes ---------------------------------------------------------------- */

static sd_status push(conv *c, char *id, cJSON *node) {
    if (c->n_out == c->cap_out) {
        size_t cap = c->cap_out ? c->cap_out * 2 : 32;
        emitted *e = realloc(c->out, cap * sizeof *e);
        if (!e) { free(id); cJSON_Delete(node); return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory"); }
        c->out = e;
        c->cap_out = cap;
    }
    c->out[c->n_out] = (emitted){id, node, c->n_out};
    c->n_out++;
    return SD_OK;
}

static sd_status emit_node(conv *c, const uinst *in, const unode *n) {
    cJSON *node = cJSON_CreateObject();
    cJSON *inputs = node ? cJSON_AddObjectToObject(node, "inputs") : NULL;
    char *id = join_id(in->prefix, n->id);
    if (!inputs || !id) { cJSON_Delete(node); free(id); return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory"); }
    sd_status rc = put_widgets(c, in, n, inputs);
    int i = 0;
    for (const cJSON *s = n->inputs ? n->inputs->child : NULL; !rc && s; s = s->next, i++) {
        long long lid;
        if (!slot_link(s, &lid)) continue;
        const char *name = slot_name(s);
        if (!name || !*name) {
            rc = node_fail(c, SD_ERR_FORMAT, in, n, NULL, "input slot %d has a link but no name", i);
            break;
        }
        resolved r = {0};
        c->hops = 0;
        rc = resolve_input(c, in, n, i, NULL, &r);
        if (!rc && r.kind == R_VALUE && put(inputs, name, literal(r.value)))
            rc = sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
        if (!rc && r.kind == R_LINK) {
            cJSON *link = cJSON_CreateArray();
            if (link) {
                cJSON_AddItemToArray(link, cJSON_CreateString(r.id));
                cJSON_AddItemToArray(link, cJSON_CreateNumber(r.slot));
            }
            if (put(inputs, name, link)) rc = sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
        }
        free(r.id);
    }
    const char *title = n->title ? n->title : n->def && n->def->display_name ? n->def->display_name : n->type;
    cJSON_AddStringToObject(node, "class_type", n->type);
    cJSON *meta = cJSON_AddObjectToObject(node, "_meta");
    if (meta) cJSON_AddStringToObject(meta, "title", title);
    if (rc) { cJSON_Delete(node); free(id); return rc; }
    return push(c, id, node);
}

/* ---- expansion size ------------------------------------------------------------------ */

enum { COUNT_NEW, COUNT_BUSY, COUNT_DONE };

typedef struct counter {
    unsigned char *state; /* per subgraph definition */
    size_t *nodes;        /* its expanded node count, saturated at `cap` */
    size_t cap;
    const usub *over;     /* the first (innermost) definition found over the cap */
} counter;

static size_t sat_add(size_t a, size_t b, size_t cap) { return a >= cap || b >= cap - a ? cap : a + b; }

/* The nodes emit_level would emit for level g, saturating at k->cap. A
 * definition that contains itself is left to emit_level's nesting check
 * (counted as 0 here). */
static size_t count_level(conv *c, counter *k, const ulevel *g) {
    size_t total = 0;
    for (size_t i = 0; i < g->n_nodes && total < k->cap; i++) {
        const unode *n = &g->nodes[i];
        if (n->mode == MODE_NEVER || n->mode == MODE_BYPASS || is_virtual(n->type)) continue;
        if (!n->sub) {
            total = sat_add(total, 1, k->cap);
            continue;
        }
        size_t s = (size_t)(n->sub - c->subs);
        if (k->state[s] == COUNT_NEW) {
            k->state[s] = COUNT_BUSY;
            k->nodes[s] = count_level(c, k, &n->sub->g);
            k->state[s] = COUNT_DONE;
            if (k->nodes[s] >= k->cap && !k->over) k->over = n->sub;
        }
        if (k->state[s] == COUNT_DONE) total = sat_add(total, k->nodes[s], k->cap);
    }
    return total;
}

/* Refuses a workflow whose subgraphs expand to more than MAX_EXPANDED nodes
 * beyond the file's own, naming the subgraph. */
static sd_status check_expansion(conv *c) {
    size_t own = c->root.n_nodes;
    for (size_t i = 0; i < c->n_subs; i++) own += c->subs[i].g.n_nodes;
    counter k = {calloc(c->n_subs ? c->n_subs : 1, 1), calloc(c->n_subs ? c->n_subs : 1, sizeof(size_t)),
                 own + MAX_EXPANDED, NULL};
    if (!k.state || !k.nodes) {
        free(k.state);
        free(k.nodes);
        return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    }
    size_t total = count_level(c, &k, &c->root);
    sd_status rc = SD_OK;
    if (total >= k.cap) {
        const usub *big = k.over;
        if (!big) /* none alone is over: the root's largest */
            for (size_t i = 0; i < c->root.n_nodes; i++) {
                const unode *n = &c->root.nodes[i];
                if (n->sub && k.state[n->sub - c->subs] == COUNT_DONE &&
                    (!big || k.nodes[n->sub - c->subs] > k.nodes[big - c->subs]))
                    big = n->sub;
            }
        size_t bn = big ? k.nodes[big - c->subs] : 0;
        rc = fail(c, SD_ERR_INVALID,
                  "the subgraphs expand to more than %zu nodes (the file holds %zu; at most %d more are "
                  "allowed): subgraph %.100s alone expands to %s%zu nodes",
                  k.cap, own, MAX_EXPANDED, big ? big->id : "?", bn >= k.cap ? "more than " : "", bn >= k.cap ? k.cap : bn);
    }
    free(k.state);
    free(k.nodes);
    return rc;
}

static sd_status emit_level(conv *c, const uinst *in) {
    for (size_t i = 0; i < in->g->n_nodes; i++) {
        const unode *n = &in->g->nodes[i];
        if (n->mode == MODE_NEVER || n->mode == MODE_BYPASS || is_virtual(n->type)) continue;
        sd_status rc;
        if (n->sub) {
            uinst child = {.prefix = NULL};
            rc = enter(c, in, n, &child);
            if (!rc) rc = emit_level(c, &child);
            free((char *)child.prefix);
        } else if (sd_workflow_is_group_node(n->type) && !n->def) {
            /* the root's group nodes were expanded before; these are inside
             * a subgraph definition, where the frontend has none either */
            rc = node_fail(c, SD_ERR_UNSUPPORTED, in, n, NULL,
                           "'%s' is a legacy group node inside a subgraph, which sdflow does not expand; in "
                           "ComfyUI, convert it to nodes and save again", n->type);
        } else {
            rc = emit_node(c, in, n);
        }
        if (rc) return rc;
    }
    return SD_OK;
}

/* ---- output order ------------------------------------------------------------------ */

/* A JavaScript array index ("0", "17", not "07" or "-1"): such keys come
 * first in a JS object, in numeric order. */
static int js_index(const char *s, unsigned long long *v) {
    if (!*s || (s[0] == '0' && s[1]) || strlen(s) > 10) return 0;
    unsigned long long x = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        x = x * 10 + (unsigned)(*p - '0');
    }
    if (x >= 4294967295ULL) return 0;
    *v = x;
    return 1;
}

static int cmp_emitted(const void *a, const void *b) {
    const emitted *x = a, *y = b;
    unsigned long long u, v;
    int xi = js_index(x->id, &u), yi = js_index(y->id, &v);
    if (xi && yi) return u < v ? -1 : u > v;
    if (xi != yi) return xi ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_id_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Links to nodes that were not emitted (muted) are dropped, as the
 * frontend drops them. */
static sd_status drop_dangling(conv *c) {
    char **ids = malloc((c->n_out ? c->n_out : 1) * sizeof *ids);
    if (!ids) return sd_error_set(c->err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < c->n_out; i++) ids[i] = c->out[i].id;
    qsort(ids, c->n_out, sizeof *ids, cmp_id_str);
    for (size_t i = 0; i < c->n_out; i++) {
        cJSON *inputs = cJSON_GetObjectItemCaseSensitive(c->out[i].node, "inputs");
        cJSON *v = inputs ? inputs->child : NULL;
        while (v) {
            cJSON *next = v->next;
            if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(v->child)) {
                const char *key = v->child->valuestring;
                if (!c->n_out || !bsearch(&key, ids, c->n_out, sizeof *ids, cmp_id_str))
                    cJSON_Delete(cJSON_DetachItemViaPointer(inputs, v));
            }
            v = next;
        }
    }
    free(ids);
    return SD_OK;
}

/* ---- entry points ------------------------------------------------------------------ */

int sd_workflow_ui_detect(const cJSON *root) {
    /* "nodes" of any kind but an API node (an API node could be named
     * "nodes"): a UI file whose nodes are not a list is a malformed UI file,
     * refused by the conversion, not an empty API workflow */
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    return cJSON_IsObject(root) && nodes && !cJSON_GetObjectItemCaseSensitive(nodes, "class_type") &&
           cJSON_GetObjectItemCaseSensitive(root, "links") != NULL;
}

sd_status sd_workflow_ui_to_api(const cJSON *root, const char *source, cJSON **api, sd_error *err) {
    *api = NULL;
    conv c = {.source = source ? source : "<workflow>", .err = err};
    cJSON *expanded = NULL; /* the file with its group nodes expanded; read in its place */
    sd_status rc;
    if (!sd_workflow_ui_detect(root)) {
        rc = fail(&c, SD_ERR_FORMAT, "not a UI-format workflow (no \"nodes\" list and \"links\")");
        goto done;
    }
    rc = sd_workflow_group_nodes_expand(root, c.source, &expanded, err);
    if (rc) goto done;
    if (expanded) root = expanded;
    rc = read_level(&c, cJSON_GetObjectItemCaseSensitive(root, "nodes"),
                    cJSON_GetObjectItemCaseSensitive(root, "links"), "", &c.root);
    if (!rc) rc = read_subgraphs(&c, root);
    if (rc) goto done;
    usub **sorted = malloc((c.n_subs ? c.n_subs : 1) * sizeof *sorted);
    if (!sorted) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t k = 0; k < c.n_subs; k++) sorted[k] = &c.subs[k];
    /* stable by file order for equal ids: qsort is not stable, so ties break on the address */
    qsort(sorted, c.n_subs, sizeof *sorted, cmp_sub_ptr_stable);
    link_subgraph_nodes(&c, sorted, &c.root);
    for (size_t k = 0; k < c.n_subs; k++) link_subgraph_nodes(&c, sorted, &c.subs[k].g);
    free(sorted);
    uinst top = {.g = &c.root, .prefix = ""};
    rc = check_expansion(&c);
    if (!rc) rc = emit_level(&c, &top);
    if (!rc) rc = drop_dangling(&c);
    if (rc) goto done;
    if (c.n_out) qsort(c.out, c.n_out, sizeof *c.out, cmp_emitted);
    cJSON *o = cJSON_CreateObject();
    if (!o) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < c.n_out; i++) {
        cJSON_AddItemToObject(o, c.out[i].id, c.out[i].node);
        c.out[i].node = NULL;
    }
    *api = o;
done:
    for (size_t i = 0; i < c.n_out; i++) {
        free(c.out[i].id);
        cJSON_Delete(c.out[i].node);
    }
    free(c.out);
    free_level(&c.root);
    for (size_t k = 0; k < c.n_subs; k++) free_level(&c.subs[k].g);
    free(c.subs);
    cJSON_Delete(expanded);
    return rc;
}
