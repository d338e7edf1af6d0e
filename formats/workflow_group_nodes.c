/* workflow_group_nodes.c - legacy group nodes expanded (workflow_group_nodes.h).
 *
 * Follows the legacy frontend's groupNode.js: GroupNodeConfig walks the
 * inner nodes in order and makes, for each, its widgets (those not turned
 * into inputs), its inputs not linked inside, and its outputs not used only
 * inside; the inner widgets that were turned into inputs come last, after
 * every node, as both a widget and an input of the group node. Names are
 * made unique the way getInputConfig does, because a group node saved by
 * name is matched by them. */
#include "workflow_group_nodes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/node.h"
#include "workflow_ui.h"

enum { MAX_NAME = 256 };
enum { K_SKIP, K_NODE, K_PRIMITIVE, K_REROUTE };

typedef struct gwidget {
    int node;            /* inner node index */
    const char *input;   /* the inner node's input ("value" for a primitive) */
    char name[MAX_NAME]; /* the group node's widget */
    int control;         /* a control_after_generate value follows it */
} gwidget;

typedef struct gslot {
    int node, slot;
    const char *widget;  /* a group input that is a converted widget: its name (in gwidget) */
} gslot;

typedef struct gseen { char key[MAX_NAME]; int count; } gseen;

typedef struct gdef {
    const char *name;
    const cJSON *nodes, *links, *external, *config;
    int n_nodes;
    gwidget *w;
    int nw;
    gslot *in, *out;
    int nin, nout;
    gseen *seen;
    int nseen;
} gdef;

/* one inner node's inputs as the frontend's definition lists them */
typedef struct ginput { const char *name; int widget, control; } ginput;

typedef struct gx {
    const char *source;
    sd_error *err;
} gx;

int sd_workflow_is_group_node(const char *type) {
    return type && (!strncmp(type, "workflow>", 9) || !strncmp(type, "workflow/", 9));
}

static sd_status oom(gx *x) { return sd_error_set(x->err, SD_ERR_NOMEM, "out of memory"); }

static int as_int(const cJSON *j, int *v) {
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble != floor(j->valuedouble) ||
        fabs(j->valuedouble) > 1e9)
        return 0;
    *v = (int)j->valuedouble;
    return 1;
}

/* A node id (a number, sometimes a string) as text, as workflow_ui.c reads
 * it: 0 when it is neither an integer nor a non-empty string. */
static int id_text(const cJSON *j, char *out, size_t size) {
    if (cJSON_IsNumber(j) && isfinite(j->valuedouble) && j->valuedouble == floor(j->valuedouble) &&
        fabs(j->valuedouble) <= 9007199254740992.0)
        snprintf(out, size, "%lld", (long long)j->valuedouble);
    else if (cJSON_IsString(j) && j->valuestring[0])
        snprintf(out, size, "%s", j->valuestring);
    else
        return 0;
    return 1;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

/* ---- the definition's links ------------------------------------------------ */

/* [origin index, slot, target index, slot, outer origin id, type]; an origin
 * of null is a link from outside the group, which the lookups skip */
static int def_link(const cJSON *l, int *src, int *sslot, int *dst, int *dslot) {
    return cJSON_IsArray(l) && as_int(cJSON_GetArrayItem(l, 0), src) && as_int(cJSON_GetArrayItem(l, 1), sslot) &&
           as_int(cJSON_GetArrayItem(l, 2), dst) && as_int(cJSON_GetArrayItem(l, 3), dslot);
}

/* linksTo[node][slot]: the last link into it (a later one replaces it) */
static const cJSON *link_to(const gdef *g, int node, int slot) {
    const cJSON *hit = NULL;
    int s, ss, d, ds;
    for (const cJSON *l = g->links ? g->links->child : NULL; l; l = l->next)
        if (def_link(l, &s, &ss, &d, &ds) && d == node && ds == slot) hit = l;
    return hit;
}

/* linksFrom[node][slot][0], or any slot's first link when slot < 0 */
static const cJSON *link_from(const gdef *g, int node, int slot) {
    int s, ss, d, ds;
    for (const cJSON *l = g->links ? g->links->child : NULL; l; l = l->next)
        if (def_link(l, &s, &ss, &d, &ds) && s == node && (slot < 0 || ss == slot)) return l;
    return NULL;
}

/* externalFrom[node][slot]: the type recorded for an inner output linked
 * outside; NULL when none (or an empty type, which the frontend's test of
 * it also takes for none) */
static const char *external(const gdef *g, int node, int slot) {
    const char *t = NULL;
    int n, s;
    for (const cJSON *e = g->external ? g->external->child : NULL; e; e = e->next) {
        const cJSON *ty = cJSON_GetArrayItem(e, 2);
        if (as_int(cJSON_GetArrayItem(e, 0), &n) && as_int(cJSON_GetArrayItem(e, 1), &s) && n == node && s == slot)
            t = cJSON_IsString(ty) && ty->valuestring[0] ? ty->valuestring : NULL;
    }
    return t;
}

static const cJSON *inner(const gdef *g, int i) { return cJSON_GetArrayItem(g->nodes, i); }

/* nodeData.config[node].{input,output}[key] */
static const cJSON *config_of(const gdef *g, int node, const char *part, const char *key) {
    char k[16];
    snprintf(k, sizeof k, "%d", node);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(g->config, k);
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(n, part), key);
}

static int config_hidden(const cJSON *c) { return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "visible")); }

/* ---- an inner node's definition ------------------------------------------- */

static int literal_type(const char *t) { return t && sd_type_is_literal(t); }

static const char *slot_type_at(const cJSON *slots, int i) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(slots, i), "type");
    if (cJSON_IsArray(t)) return "COMBO";
    return cJSON_IsString(t) ? t->valuestring : "*";
}

/* The type a Reroute inside the group carries (GroupNodeConfig.getNodeDef). */
static const char *reroute_type(const gdef *g, int i) {
    const char *type = "*";
    int s, ss, d, ds;
    if (link_from(g, i, 0)) {
        for (const cJSON *l = g->links->child; l && !strcmp(type, "*"); l = l->next)
            if (def_link(l, &s, &ss, &d, &ds) && s == i && ss == 0)
                type = slot_type_at(cJSON_GetObjectItemCaseSensitive(inner(g, d), "inputs"), ds);
    } else if (link_to(g, i, 0)) {
        def_link(link_to(g, i, 0), &s, &ss, &d, &ds);
        type = slot_type_at(cJSON_GetObjectItemCaseSensitive(inner(g, s), "outputs"), ss);
    } else {
        for (const cJSON *l = g->links ? g->links->child : NULL; l; l = l->next) {
            const cJSON *dst = cJSON_GetArrayItem(l, 2), *t = cJSON_GetArrayItem(l, 5);
            if (as_int(dst, &d) && d == i && cJSON_IsString(t)) { type = t->valuestring; break; }
        }
        if (!strcmp(type, "*") && external(g, i, 0)) type = external(g, i, 0);
    }
    return type;
}

typedef struct gnode {
    int kind;
    const sd_node_def *def;
    ginput *inputs;   /* malloc'd */
    int n_inputs, n_outputs;
} gnode;

static sd_status describe(gx *x, const gdef *g, int i, const char *where, gnode *out) {
    const cJSON *n = inner(g, i);
    const char *type = str_of(n, "type");
    *out = (gnode){K_SKIP, NULL, NULL, 0, 0};
    if (!type) return sd_error_set(x->err, SD_ERR_FORMAT, "%s: %s: inner node %d has no type", x->source, where, i);
    if (!strcmp(type, "PrimitiveNode") || !strcmp(type, "Reroute")) {
        const char *t;
        if (!strcmp(type, "PrimitiveNode")) {
            /* a primitive that feeds nothing inside is left out */
            const cJSON *l = link_from(g, i, 0);
            if (!l) return SD_OK;
            const cJSON *lt = cJSON_GetArrayItem(l, 5);
            t = cJSON_IsString(lt) ? lt->valuestring : "*";
            out->kind = K_PRIMITIVE;
        } else {
            /* one used only inside is not part of the group's face */
            if (link_to(g, i, 0) && link_from(g, i, 0) && !external(g, i, 0)) return SD_OK;
            t = reroute_type(g, i);
            out->kind = K_REROUTE;
        }
        out->inputs = malloc(sizeof *out->inputs);
        if (!out->inputs) return oom(x);
        /* a primitive's INT or combo gets the value control, as its widget has */
        out->inputs[0] = (ginput){out->kind == K_PRIMITIVE ? "value" : t, literal_type(t),
                                  out->kind == K_PRIMITIVE && (!strcmp(t, SD_T_INT) || !strcmp(t, SD_T_COMBO))};
        out->n_inputs = 1;
        out->n_outputs = 1;
        return SD_OK;
    }
    const sd_node_def *def = sd_registry_find(type);
    if (!def) {
        if (!strcmp(type, "Note") || !strcmp(type, "MarkdownNote")) return SD_OK;
        return sd_error_set(x->err, SD_ERR_UNSUPPORTED, "%s: %s: its inner node %d is a '%s', a node type sdflow does not have",
                            x->source, where, i, type);
    }
    out->kind = K_NODE;
    out->def = def;
    out->n_outputs = sd_node_output_count(def);
    int count = sd_node_input_count(def);
    out->inputs = malloc(((size_t)count + 1) * sizeof *out->inputs);
    if (!out->inputs) return oom(x);
    /* {...required, ...optional}, the upload button added to required as
     * the frontend's image-upload extension adds it */
    for (int pass = 0; pass < 2; pass++) {
        int upload = 0;
        for (int k = 0; k < count; k++) {
            const sd_input_def *d = &def->inputs[k];
            if ((d->optional != 0) != pass) continue;
            int control = sd_input_has_control_after_generate(d) ||
                          (literal_type(d->type) && (!strcmp(d->name, "seed") || !strcmp(d->name, "noise_seed")));
            out->inputs[out->n_inputs++] = (ginput){d->name, literal_type(d->type), control};
            if (d->image_upload && !pass && !strcmp(d->name, "image")) upload = 1;
        }
        if (upload) out->inputs[out->n_inputs++] = (ginput){"upload", 1, 0};
    }
    return SD_OK;
}

/* ---- the group's face (GroupNodeConfig) ------------------------------------ */

static gseen *seen_find(gdef *g, const char *key) {
    for (int i = 0; i < g->nseen; i++)
        if (!strcmp(g->seen[i].key, key)) return &g->seen[i];
    return NULL;
}

/* getInputConfig's name: a custom name, the input's label or its name; on
 * a clash (or for a titled primitive) "<title or type> <input>", then
 * "<title or type> <count> <input>". */
static sd_status input_name(gx *x, gdef *g, int i, const char *input, char out[MAX_NAME]) {
    const cJSON *n = inner(g, i);
    const char *name = str_of(config_of(g, i, "input", input), "name");
    if (!name)
        for (const cJSON *s = cJSON_GetObjectItemCaseSensitive(n, "inputs") ? cJSON_GetObjectItemCaseSensitive(n, "inputs")->child : NULL; s; s = s->next) {
            const char *sn = str_of(s, "name");
            if (sn && !strcmp(sn, input)) { name = str_of(s, "label"); break; }
        }
    if (!name) name = input;
    const char *type = str_of(n, "type"), *title = str_of(n, "title");
    char key[MAX_NAME];
    snprintf(key, sizeof key, "%s", name);
    snprintf(out, MAX_NAME, "%s", name);
    if ((!strcmp(type, "PrimitiveNode") && title) || seen_find(g, name)) {
        const char *prefix = title ? title : type;
        snprintf(key, sizeof key, "%s %s", prefix, input);
        snprintf(out, MAX_NAME, "%s", key);
        gseen *s = seen_find(g, key);
        if (s) snprintf(out, MAX_NAME, "%s %d %s", prefix, s->count, input);
    }
    gseen *s = seen_find(g, key);
    if (s) {
        s->count++;
        return SD_OK;
    }
    gseen *grown = realloc(g->seen, ((size_t)g->nseen + 1) * sizeof *grown);
    if (!grown) return oom(x);
    g->seen = grown;
    snprintf(g->seen[g->nseen].key, MAX_NAME, "%s", key);
    g->seen[g->nseen++].count = 2;
    return SD_OK;
}

static sd_status add_widget(gx *x, gdef *g, int node, const ginput *in, const char *name, const char **name_out) {
    gwidget *w = realloc(g->w, ((size_t)g->nw + 1) * sizeof *w);
    if (!w) return oom(x);
    g->w = w;
    w[g->nw] = (gwidget){node, in->name, "", in->control};
    snprintf(w[g->nw].name, MAX_NAME, "%s", name);
    if (name_out) *name_out = w[g->nw].name;
    g->nw++;
    return SD_OK;
}

static sd_status add_slot(gx *x, gslot **list, int *n, gslot s) {
    gslot *l = realloc(*list, ((size_t)*n + 1) * sizeof *l);
    if (!l) return oom(x);
    *list = l;
    l[(*n)++] = s;
    return SD_OK;
}

/* index of the inner node's input that is widget `input` turned into an input */
static int converted_index(const cJSON *n, const char *input) {
    int k = 0;
    for (const cJSON *s = cJSON_GetObjectItemCaseSensitive(n, "inputs") ? cJSON_GetObjectItemCaseSensitive(n, "inputs")->child : NULL; s; s = s->next, k++) {
        const char *sn = str_of(s, "name"), *wn = str_of(cJSON_GetObjectItemCaseSensitive(s, "widget"), "name");
        if (sn && wn && !strcmp(sn, input) && !strcmp(wn, input)) return k;
    }
    return -1;
}

typedef struct gconv { int node, index, slot; const ginput *in; } gconv;

/* JavaScript's default sort of the converted inputs' indexes: as text */
static int cmp_conv(const void *a, const void *b) {
    const gconv *x = a, *y = b;
    char s[16], t[16];
    if (x->node != y->node) return x->node - y->node;
    snprintf(s, sizeof s, "%d", x->index);
    snprintf(t, sizeof t, "%d", y->index);
    return strcmp(s, t);
}

static sd_status build(gx *x, gdef *g, gnode *nodes) {
    gconv *conv = NULL;
    int nconv = 0;
    sd_status rc = SD_OK;
    for (int i = 0; !rc && i < g->n_nodes; i++) {
        gnode *gn = &nodes[i];
        if (gn->kind == K_SKIP) continue;
        const cJSON *n = inner(g, i);
        int nslots = 0;
        /* widgets, in input order; the others are slots */
        for (int k = 0; !rc && k < gn->n_inputs; k++) {
            const ginput *in = &gn->inputs[k];
            if (!in->widget) continue;
            int ci = gn->kind == K_NODE ? converted_index(n, in->name) : -1;
            if (ci >= 0) {
                gconv *c = realloc(conv, ((size_t)nconv + 1) * sizeof *c);
                if (!c) { rc = oom(x); break; }
                conv = c;
                conv[nconv++] = (gconv){i, ci, 0, in};
                continue;
            }
            char name[MAX_NAME];
            rc = input_name(x, g, i, in->name, name);
            if (!rc) rc = add_widget(x, g, i, in, name, NULL);
        }
        for (int k = 0; !rc && k < gn->n_inputs; k++) {
            const ginput *in = &gn->inputs[k];
            if (in->widget) continue;
            int slot = nslots++;
            if (link_to(g, i, slot)) continue;
            char name[MAX_NAME];
            rc = input_name(x, g, i, in->name, name);
            if (!rc && !config_hidden(config_of(g, i, "input", in->name)))
                rc = add_slot(x, &g->in, &g->nin, (gslot){i, slot, NULL});
        }
        for (int c = 0; c < nconv; c++)
            if (conv[c].node == i) conv[c].slot = nslots; /* the converted inputs follow the slots */
        for (int o = 0; !rc && o < gn->n_outputs; o++) {
            char key[16];
            snprintf(key, sizeof key, "%d", o);
            const cJSON *vis = cJSON_GetObjectItemCaseSensitive(config_of(g, i, "output", key), "visible");
            int used_inside = link_from(g, i, o) && !external(g, i, o);
            int visible = cJSON_IsBool(vis) ? cJSON_IsTrue(vis) : !used_inside;
            if (visible) rc = add_slot(x, &g->out, &g->nout, (gslot){i, o, NULL});
        }
    }
    if (!rc && nconv) qsort(conv, (size_t)nconv, sizeof *conv, cmp_conv);
    /* the widgets turned into inputs, after every node: each node's j-th
     * sits at slot (its slot count + j), as the frontend counts them */
    for (int c = 0, j = 0; !rc && c < nconv; c++) {
        j = c > 0 && conv[c - 1].node == conv[c].node ? j + 1 : 0;
        int slot = conv[c].slot + j;
        if (link_to(g, conv[c].node, slot)) continue;
        char name[MAX_NAME];
        const char *wname = NULL;
        rc = input_name(x, g, conv[c].node, conv[c].in->name, name);
        if (!rc) rc = add_widget(x, g, conv[c].node, conv[c].in, name, &wname);
        if (!rc) rc = add_slot(x, &g->in, &g->nin, (gslot){conv[c].node, slot, NULL});
        if (!rc) g->in[g->nin - 1].widget = wname;
    }
    free(conv);
    return rc;
}

/* ---- one instance --------------------------------------------------------- */

static const cJSON *find_def(const cJSON *root, const char *type) {
    const cJSON *defs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "extra"), "groupNodes");
    return cJSON_GetObjectItemCaseSensitive(defs, type + 9);
}

static char *inner_id(const char *outer, int i) {
    size_t n = strlen(outer) + 16;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s:%d", outer, i);
    return s;
}

static int set_input_link(cJSON *node, int slot, double link) {
    cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(node, "inputs"), slot);
    if (!cJSON_IsObject(in)) return 0;
    cJSON *v = cJSON_CreateNumber(link);
    if (!v) return -1;
    if (cJSON_GetObjectItemCaseSensitive(in, "link")) return cJSON_ReplaceItemInObjectCaseSensitive(in, "link", v) ? 0 : -1;
    return cJSON_AddItemToObject(in, "link", v) ? 0 : -1;
}

/* The inner node's widget values by name: its own saved ones, with the
 * group node's values for the widgets the group shows (a value the group
 * node did not save leaves the widget to its default, as the frontend's new
 * group widget has it). */
static cJSON *inner_values(const gnode *gn, const cJSON *n, const gdef *g, int i, const cJSON **vals) {
    const cJSON *wv = cJSON_GetObjectItemCaseSensitive(n, "widgets_values");
    if (gn->kind == K_PRIMITIVE) {
        cJSON *a = cJSON_IsArray(wv) ? cJSON_Duplicate(wv, 1) : cJSON_CreateArray();
        for (int k = 0; a && k < g->nw; k++) {
            if (g->w[k].node != i || !vals[k]) continue;
            cJSON *v = cJSON_Duplicate(vals[k], 1);
            if (!v) { cJSON_Delete(a); return NULL; }
            if (cJSON_GetArraySize(a) > 0) cJSON_ReplaceItemInArray(a, 0, v);
            else cJSON_AddItemToArray(a, v);
        }
        return a;
    }
    if (gn->kind != K_NODE) return wv ? cJSON_Duplicate(wv, 1) : NULL;
    cJSON *o = cJSON_IsObject(wv) ? cJSON_Duplicate(wv, 1) : cJSON_CreateObject();
    if (!o) return NULL;
    if (cJSON_IsArray(wv)) {
        sd_ui_widget *w = malloc(((size_t)sd_node_input_count(gn->def) * 2 + 2) * sizeof *w);
        if (!w) { cJSON_Delete(o); return NULL; }
        int nw = sd_workflow_ui_widgets(gn->def, w);
        const cJSON *v = wv->child;
        for (int k = 0; k < nw && v; k++, v = v->next)
            if (w[k].kind == SD_UI_WIDGET_INPUT && !cJSON_GetObjectItemCaseSensitive(o, w[k].input->name))
                cJSON_AddItemToObject(o, w[k].input->name, cJSON_Duplicate(v, 1));
        free(w);
    }
    for (int k = 0; k < g->nw; k++) {
        if (g->w[k].node != i || !strcmp(g->w[k].input, "upload")) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(o, g->w[k].input);
        if (vals[k]) cJSON_AddItemToObject(o, g->w[k].input, cJSON_Duplicate(vals[k], 1));
    }
    return o;
}

typedef struct linkid { double next; } linkid;

/* Adds the definition's inner links to `links` and points each inner
 * target input at its new link. */
static sd_status inner_links(gx *x, const gdef *g, const char *outer, cJSON **nodes, cJSON *links, linkid *ids) {
    int s, ss, d, ds;
    for (const cJSON *l = g->links ? g->links->child : NULL; l; l = l->next) {
        if (!def_link(l, &s, &ss, &d, &ds) || s < 0 || s >= g->n_nodes || d < 0 || d >= g->n_nodes) continue;
        char *from = inner_id(outer, s), *to = inner_id(outer, d);
        cJSON *nl = cJSON_CreateArray();
        const cJSON *t = cJSON_GetArrayItem(l, 5);
        if (!from || !to || !nl) { free(from); free(to); cJSON_Delete(nl); return oom(x); }
        double id = ids->next++;
        cJSON_AddItemToArray(nl, cJSON_CreateNumber(id));
        cJSON_AddItemToArray(nl, cJSON_CreateString(from));
        cJSON_AddItemToArray(nl, cJSON_CreateNumber(ss));
        cJSON_AddItemToArray(nl, cJSON_CreateString(to));
        cJSON_AddItemToArray(nl, cJSON_CreateNumber(ds));
        cJSON_AddItemToArray(nl, cJSON_CreateString(cJSON_IsString(t) ? t->valuestring : "*"));
        free(from);
        free(to);
        cJSON_AddItemToArray(links, nl);
        if (nodes[d] && set_input_link(nodes[d], ds, id)) return oom(x);
    }
    return SD_OK;
}

/* The instance's input k stands for which group input? Widgets turned into
 * inputs by name, the others by their place among the group's slots. */
static const gslot *instance_input(const gdef *g, const cJSON *in, int plain_index) {
    const char *wn = str_of(cJSON_GetObjectItemCaseSensitive(in, "widget"), "name");
    int k = 0;
    for (int i = 0; i < g->nin; i++) {
        if (wn ? g->in[i].widget && !strcmp(g->in[i].widget, wn) : !g->in[i].widget && k++ == plain_index)
            return &g->in[i];
    }
    return NULL;
}

static int link_origin(cJSON *l, char *out, size_t size, int *slot) {
    const cJSON *o = cJSON_IsArray(l) ? cJSON_GetArrayItem(l, 1) : cJSON_GetObjectItemCaseSensitive(l, "origin_id");
    const cJSON *s = cJSON_IsArray(l) ? cJSON_GetArrayItem(l, 2) : cJSON_GetObjectItemCaseSensitive(l, "origin_slot");
    return as_int(s, slot) && id_text(o, out, size);
}

static int set_origin(cJSON *l, const char *id, int slot) {
    cJSON *o = cJSON_CreateString(id), *s = cJSON_CreateNumber(slot);
    if (!o || !s) { cJSON_Delete(o); cJSON_Delete(s); return -1; }
    if (cJSON_IsArray(l)) {
        cJSON_ReplaceItemInArray(l, 1, o);
        cJSON_ReplaceItemInArray(l, 2, s);
    } else {
        cJSON_ReplaceItemInObjectCaseSensitive(l, "origin_id", o);
        cJSON_ReplaceItemInObjectCaseSensitive(l, "origin_slot", s);
    }
    return 0;
}

static void gdef_free(gdef *g, gnode *nodes) {
    for (int i = 0; nodes && i < g->n_nodes; i++) free(nodes[i].inputs);
    free(nodes);
    free(g->w);
    free(g->in);
    free(g->out);
    free(g->seen);
}

/* Replaces instance `inst` (in `out_nodes`, at its place) by its inner nodes. */
static sd_status expand_one(gx *x, const cJSON *root, cJSON *out_nodes, cJSON *inst, cJSON *links, linkid *ids) {
    const char *type = str_of(inst, "type");
    char outer[64], where[192];
    const cJSON *idj = cJSON_GetObjectItemCaseSensitive(inst, "id");
    if (!id_text(idj, outer, sizeof outer))
        return sd_error_set(x->err, SD_ERR_FORMAT, "%s: a node of type '%s' has no valid id", x->source, type);
    snprintf(where, sizeof where, "group node %s ('%s')", outer, type);
    const cJSON *d = find_def(root, type);
    if (!cJSON_IsObject(d))
        return sd_error_set(x->err, SD_ERR_UNSUPPORTED, "%s: %s: the file has no definition of '%s' under "
                            "extra.groupNodes", x->source, where, type + 9);
    gdef g = {.name = type + 9,
              .nodes = cJSON_GetObjectItemCaseSensitive(d, "nodes"),
              .links = cJSON_GetObjectItemCaseSensitive(d, "links"),
              .external = cJSON_GetObjectItemCaseSensitive(d, "external"),
              .config = cJSON_GetObjectItemCaseSensitive(d, "config")};
    if (!cJSON_IsArray(g.nodes) || (g.links && !cJSON_IsArray(g.links)) || (g.external && !cJSON_IsArray(g.external)))
        return sd_error_set(x->err, SD_ERR_FORMAT, "%s: %s: its definition's nodes, links or external is not a list",
                            x->source, where);
    g.n_nodes = cJSON_GetArraySize(g.nodes);
    gnode *gn = calloc((size_t)(g.n_nodes ? g.n_nodes : 1), sizeof *gn);
    cJSON **made = calloc((size_t)(g.n_nodes ? g.n_nodes : 1), sizeof *made);
    const cJSON **vals = NULL;
    if (!gn || !made) { free(made); gdef_free(&g, gn); return oom(x); }
    sd_status rc = SD_OK;
    for (int i = 0; !rc && i < g.n_nodes; i++) {
        if (!cJSON_IsObject(inner(&g, i)))
            rc = sd_error_set(x->err, SD_ERR_FORMAT, "%s: %s: inner node %d is not an object", x->source, where, i);
        else
            rc = describe(x, &g, i, where, &gn[i]);
    }
    if (!rc) rc = build(x, &g, gn);
    /* the instance's values, over the group's widgets */
    if (!rc && !(vals = calloc((size_t)g.nw + 1, sizeof *vals))) rc = oom(x);
    const cJSON *wv = cJSON_GetObjectItemCaseSensitive(inst, "widgets_values");
    const cJSON *v = cJSON_IsArray(wv) ? wv->child : NULL;
    for (int k = 0; !rc && k < g.nw; k++) {
        if (cJSON_IsObject(wv)) { vals[k] = cJSON_GetObjectItemCaseSensitive(wv, g.w[k].name); continue; }
        vals[k] = v;
        v = v ? v->next : NULL;
        if (g.w[k].control) v = v ? v->next : NULL;
    }
    /* the inner nodes (a node the frontend leaves out, a note, stays out) */
    for (int i = 0; !rc && i < g.n_nodes; i++) {
        const cJSON *n = inner(&g, i);
        cJSON *m = cJSON_Duplicate(n, 1);
        char *id = inner_id(outer, i);
        cJSON *values = inner_values(&gn[i], n, &g, i, vals);
        if (!m || !id || (!values && cJSON_GetObjectItemCaseSensitive(n, "widgets_values"))) {
            cJSON_Delete(m); free(id); cJSON_Delete(values); rc = oom(x); break;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(m, "id");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "index");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "widgets_values");
        cJSON_AddItemToObject(m, "id", cJSON_CreateString(id));
        if (values) cJSON_AddItemToObject(m, "widgets_values", values);
        free(id);
        for (cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "inputs") ? cJSON_GetObjectItemCaseSensitive(m, "inputs")->child : NULL; s; s = s->next)
            if (cJSON_IsObject(s)) {
                cJSON_DeleteItemFromObjectCaseSensitive(s, "link");
                cJSON_AddNullToObject(s, "link");
            }
        made[i] = m;
    }
    if (!rc) rc = inner_links(x, &g, outer, made, links, ids);
    /* links into the group node go to the inner inputs they stand for */
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(inst, "inputs");
    int plain = 0;
    for (const cJSON *s = cJSON_IsArray(ins) ? ins->child : NULL; !rc && s; s = s->next) {
        int is_widget = cJSON_GetObjectItemCaseSensitive(s, "widget") != NULL;
        const gslot *gs = instance_input(&g, s, plain);
        if (!is_widget) plain++;
        const cJSON *lk = cJSON_GetObjectItemCaseSensitive(s, "link");
        if (!cJSON_IsNumber(lk)) continue;
        if (gs && made[gs->node]) {
            if (set_input_link(made[gs->node], gs->slot, lk->valuedouble)) rc = oom(x);
            continue;
        }
        /* a group widget turned into an input on the group node itself: the
         * inner widget it shows takes the link (a primitive's value) */
        const char *wn = str_of(cJSON_GetObjectItemCaseSensitive(s, "widget"), "name");
        for (int k = 0; wn && k < g.nw; k++) {
            if (strcmp(g.w[k].name, wn) || !made[g.w[k].node]) continue;
            cJSON *mi = cJSON_GetObjectItemCaseSensitive(made[g.w[k].node], "inputs");
            if (!mi && !(mi = cJSON_AddArrayToObject(made[g.w[k].node], "inputs"))) { rc = oom(x); break; }
            cJSON *e = cJSON_CreateObject();
            cJSON *w = e ? cJSON_AddObjectToObject(e, "widget") : NULL;
            if (!w || !cJSON_AddStringToObject(w, "name", g.w[k].input) || !cJSON_AddStringToObject(e, "name", g.w[k].input) ||
                !cJSON_AddStringToObject(e, "type", str_of(s, "type") ? str_of(s, "type") : "*") ||
                !cJSON_AddNumberToObject(e, "link", lk->valuedouble)) {
                cJSON_Delete(e); rc = oom(x); break;
            }
            cJSON_AddItemToArray(mi, e);
            break;
        }
    }
    /* links out of the group node leave from the inner outputs */
    char o[64];
    int slot;
    for (cJSON *l = links->child; !rc && l; l = l->next)
        if (link_origin(l, o, sizeof o, &slot) && !strcmp(o, outer) && slot >= 0 && slot < g.nout) {
            char *id = inner_id(outer, g.out[slot].node);
            if (!id || set_origin(l, id, g.out[slot].slot)) rc = oom(x);
            free(id);
        }
    /* the inner nodes take the group node's place */
    if (!rc) {
        for (int i = 0; i < g.n_nodes; i++)
            if (made[i]) { cJSON_AddItemToArray(out_nodes, made[i]); made[i] = NULL; }
        cJSON_Delete(inst);
    }
    for (int i = 0; i < g.n_nodes; i++) cJSON_Delete(made[i]);
    free(made);
    free(vals);
    gdef_free(&g, gn);
    return rc;
}

sd_status sd_workflow_group_nodes_expand(const cJSON *root, const char *source, cJSON **out, sd_error *err) {
    gx x = {source ? source : "<workflow>", err};
    *out = NULL;
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    int any = 0;
    for (const cJSON *n = cJSON_IsArray(nodes) ? nodes->child : NULL; n; n = n->next) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(n, "mode");
        if (sd_workflow_is_group_node(str_of(n, "type")) && !(cJSON_IsNumber(m) && (m->valueint == 2 || m->valueint == 4)))
            any = 1;
    }
    if (!any) return SD_OK;
    cJSON *copy = cJSON_Duplicate(root, 1);
    if (!copy) return oom(&x);
    cJSON *links = cJSON_GetObjectItemCaseSensitive(copy, "links");
    if (!cJSON_IsArray(links)) {
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "links");
        links = cJSON_AddArrayToObject(copy, "links");
    }
    /* new links get ids after every id in the file */
    linkid ids = {1};
    for (const cJSON *l = links ? links->child : NULL; l; l = l->next) {
        const cJSON *id = cJSON_IsArray(l) ? cJSON_GetArrayItem(l, 0) : cJSON_GetObjectItemCaseSensitive(l, "id");
        if (cJSON_IsNumber(id) && id->valuedouble >= ids.next) ids.next = floor(id->valuedouble) + 1;
    }
    /* rebuild the node list: instances replaced in place */
    cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(copy, "nodes");
    cJSON *fresh = cJSON_AddArrayToObject(copy, "nodes");
    sd_status rc = links && fresh ? SD_OK : oom(&x);
    while (!rc && old && old->child) {
        cJSON *n = cJSON_DetachItemViaPointer(old, old->child);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(n, "mode");
        if (sd_workflow_is_group_node(str_of(n, "type")) && !(cJSON_IsNumber(m) && (m->valueint == 2 || m->valueint == 4))) {
            rc = expand_one(&x, root, fresh, n, links, &ids);
            if (rc) {
                /* every refusal is about this group node */
                char text[64];
                int has_id = id_text(cJSON_GetObjectItemCaseSensitive(n, "id"), text, sizeof text);
                sd_error_at(err, has_id ? text : NULL, str_of(n, "type"), NULL);
                cJSON_Delete(n);
            }
        } else {
            cJSON_AddItemToArray(fresh, n);
        }
    }
    cJSON_Delete(old);
    if (rc) { cJSON_Delete(copy); return rc; }
    *out = copy;
    return SD_OK;
}
