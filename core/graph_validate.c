/* graph_validate.c - checks a graph against the registered node schemas and
 * collects every problem at once, with ComfyUI's error type names:
 *
 *   invalid_prompt            unknown class_type
 *   required_input_missing    a required input is absent
 *   bad_linked_input          link to a missing node or output index
 *   return_type_mismatch      linked output type not accepted by the input
 *   invalid_input_type        literal of the wrong kind (or a literal where a
 *                             link is needed)
 *   value_smaller_than_min / value_bigger_than_max
 *   value_not_in_list         combo value not among the options
 *   invalid_model_file        the file exists but its node cannot load it
 *                             (sd_input_def.file_probe: unsupported
 *                             architecture or format); sdflow's own kind
 *   dependency_cycle          the links form a cycle
 *   prompt_no_outputs         no output node
 *
 * Every required input must be there, widgets included: ComfyUI refuses a
 * prompt without one (required_input_missing) rather than guessing a value,
 * and so does sdflow (UI-format files get the frontend's defaults for widget
 * values they lack when they are converted, formats/workflow_ui.c). Only
 * optional inputs may be absent. Unknown extra inputs are ignored, as
 * ComfyUI does. */
#include "graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "env.h"
#include "hashmap.h"
#include "json_util.h"
#include "node.h"
#include "node_suggest.h"

static char *dup0(const char *s) { return s ? strdup(s) : NULL; }

static void add_problem(sd_graph_problems *p, const sd_graph_node *n, const char *input,
                        const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void add_problem(sd_graph_problems *p, const sd_graph_node *n, const char *input,
                        const char *kind, const char *fmt, ...) {
    if ((p->n & (p->n - 1)) == 0) { /* n is 0 or a power of two: double, so n problems cost O(n) */
        sd_graph_problem *items = realloc(p->items, (p->n ? 2 * p->n : 1) * sizeof *items);
        if (!items) return; /* out of memory: the problems found so far still fail the run */
        p->items = items;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Nodes built by a script say where they were defined. */
    if (n && n->origin && len >= 0 && (size_t)len < sizeof msg)
        snprintf(msg + len, sizeof msg - (size_t)len, " (defined at %s)", n->origin);
    sd_graph_problem *q = &p->items[p->n++];
    q->node_id = dup0(n ? n->id : NULL);
    q->class_type = dup0(n ? n->class_type : NULL);
    q->input = dup0(input);
    q->kind = dup0(kind);
    q->message = dup0(msg);
}

void sd_graph_problems_free(sd_graph_problems *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->items[i].node_id);
        free(p->items[i].class_type);
        free(p->items[i].input);
        free(p->items[i].kind);
        free(p->items[i].message);
    }
    free(p->items);
    p->items = NULL;
    p->n = 0;
}

/* ComfyUI accepts a link when the types are equal, when either side is "*",
 * or when every received type of a comma-separated union is accepted. */
static int type_in_list(const char *t, size_t tlen, const char *list) {
    const char *p = list;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == tlen && strncmp(p, t, len) == 0) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

static int type_accepts(const char *input_type, const char *received) {
    if (strcmp(input_type, "*") == 0 || strcmp(received, "*") == 0) return 1;
    if (strcmp(input_type, received) == 0) return 1;
    const char *p = received;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (!type_in_list(p, len, input_type)) return 0;
        if (!c) break;
        p = c + 1;
    }
    return 1;
}

static void describe_value(const sd_value *v, char *buf, size_t n) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_INT: snprintf(buf, n, "%lld", (long long)sd_value_as_int(v)); break;
    case SD_VAL_FLOAT: snprintf(buf, n, "%g", sd_value_as_float(v)); break;
    case SD_VAL_BOOL: snprintf(buf, n, "%s", sd_value_as_bool(v) ? "true" : "false"); break;
    case SD_VAL_STRING: snprintf(buf, n, "'%s'", sd_value_as_string(v)); break;
    default: snprintf(buf, n, "a %s", sd_value_kind_name(sd_value_kind_of(v))); break;
    }
}

static int is_integral(const sd_value *v) {
    if (sd_value_kind_of(v) == SD_VAL_INT) return 1;
    if (sd_value_kind_of(v) != SD_VAL_FLOAT) return 0;
    double d = sd_value_as_float(v);
    return isfinite(d) && d == floor(d) && fabs(d) < 9.2e18;
}

/* ---- combo lists computed from the environment --------------------------------
 * A file list (checkpoints, input images) is read once per validation, not
 * once per node, and looked up through a set: a workflow of thousands of
 * LoadImage nodes over a folder of thousands of pictures stays linear. */

typedef struct combo_list {
    sd_combo_fn fn;
    sd_value *list;     /* own reference, or NULL when listing failed */
    sd_hashmap *names;  /* the list's strings (borrowed from it); NULL: scan */
    char error[512];    /* " (could not list the options: ...)" or "" */
} combo_list;

/* One file_probe result: a file named by a thousand loaders is probed once. */
typedef struct probe_result {
    sd_status (*probe)(const char *path, sd_error *err);
    char *path;
    sd_status rc;
    char msg[SD_ERR_MSG_MAX]; /* the probe's message when rc != SD_OK */
} probe_result;

typedef struct combo_memo {
    combo_list *lists; /* one per options_fn seen: a handful */
    size_t n;
    probe_result *probes; /* one per (probe, file) seen: a handful */
    size_t n_probes;
} combo_memo;

static void combo_memo_free(combo_memo *m) {
    for (size_t i = 0; i < m->n; i++) {
        sd_hashmap_free(m->lists[i].names);
        sd_value_unref(m->lists[i].list);
    }
    free(m->lists);
    m->lists = NULL;
    m->n = 0;
    for (size_t i = 0; i < m->n_probes; i++) free(m->probes[i].path);
    free(m->probes);
    m->probes = NULL;
    m->n_probes = 0;
}

/* The probe's verdict on path, computed on first use; NULL only when out of
 * memory. */
static const probe_result *probe_lookup(combo_memo *m, const sd_input_def *d, const char *path) {
    for (size_t i = 0; i < m->n_probes; i++)
        if (m->probes[i].probe == d->file_probe && strcmp(m->probes[i].path, path) == 0)
            return &m->probes[i];
    probe_result *probes = realloc(m->probes, (m->n_probes + 1) * sizeof *probes);
    if (!probes) return NULL;
    m->probes = probes;
    probe_result *r = &probes[m->n_probes];
    memset(r, 0, sizeof *r);
    if (!(r->path = strdup(path))) return NULL;
    m->n_probes++;
    r->probe = d->file_probe;
    sd_error e;
    sd_error_clear(&e);
    r->rc = d->file_probe(path, &e);
    if (r->rc) snprintf(r->msg, sizeof r->msg, "%s", e.msg[0] ? e.msg : "the file cannot be loaded");
    return r;
}

/* A listed file whose node declares a probe: refuse what it cannot load now,
 * not halfway through the run. A name that does not resolve is left to the
 * loader (the list said it exists; a race is its error to report). */
static void check_file(sd_graph_problems *p, const sd_graph_node *n, const sd_input_def *d,
                       const char *name, const sd_env *env, combo_memo *memo) {
    char *path = NULL;
    sd_error e;
    sd_error_clear(&e);
    if (sd_env_resolve(env, d->file_folder, name, &path, &e) != SD_OK) return;
    const probe_result *r = probe_lookup(memo, d, path);
    free(path);
    if (!r) add_problem(p, n, d->name, "internal_error", "out of memory checking the file '%s'", name);
    else if (r->rc) add_problem(p, n, d->name, "invalid_model_file", "'%s' cannot be loaded: %s", name, r->msg);
}

/* The list of fn, computed on first use; NULL only when out of memory. */
static const combo_list *combo_lookup(combo_memo *m, sd_combo_fn fn, const sd_env *env) {
    for (size_t i = 0; i < m->n; i++)
        if (m->lists[i].fn == fn) return &m->lists[i];
    combo_list *lists = realloc(m->lists, (m->n + 1) * sizeof *lists);
    if (!lists) return NULL;
    m->lists = lists;
    combo_list *c = &lists[m->n++];
    memset(c, 0, sizeof *c);
    c->fn = fn;
    sd_error e;
    sd_error_clear(&e);
    if (fn(env, &c->list, &e) != SD_OK) {
        snprintf(c->error, sizeof c->error, " (could not list the options: %s)", e.msg);
        sd_value_unref(c->list);
        c->list = NULL;
        return c;
    }
    if ((c->names = sd_hashmap_new())) {
        for (size_t i = 0; i < sd_value_list_len(c->list); i++) {
            const char *o = sd_value_as_string(sd_value_list_get(c->list, i));
            if (o && sd_hashmap_put_str(c->names, o, i)) {
                sd_hashmap_free(c->names); /* out of memory: scan the list instead */
                c->names = NULL;
                break;
            }
        }
    }
    return c;
}

static void check_combo(sd_graph_problems *p, const sd_graph_node *n, const sd_input_def *d,
                        const sd_value *v, const sd_env *env, combo_memo *memo) {
    const char *s = sd_value_as_string(v);
    if (!s) {
        char got[256];
        describe_value(v, got, sizeof got);
        add_problem(p, n, d->name, "invalid_input_type", "expects one of a list of strings, got %s", got);
        return;
    }
    const sd_value *dyn = NULL;
    const char *fn_error = "";
    const combo_list *cl = NULL;
    if (!d->options && d->options_fn) {
        cl = combo_lookup(memo, d->options_fn, env);
        if (!cl) {
            add_problem(p, n, d->name, "internal_error", "out of memory listing the options");
            return;
        }
        dyn = cl->list;
        fn_error = cl->error;
    }
    size_t count = 0;
    int found = 0;
    if (d->options) {
        for (; d->options[count]; count++)
            if (strcmp(d->options[count], s) == 0) found = 1;
    } else if (dyn) {
        count = sd_value_list_len(dyn);
        if (cl->names) {
            found = sd_hashmap_get_str(cl->names, s, NULL);
        } else {
            for (size_t i = 0; i < count && !found; i++) {
                const char *o = sd_value_as_string(sd_value_list_get(dyn, i));
                if (o && strcmp(o, s) == 0) found = 1;
            }
        }
    } else if (!d->options_fn) {
        return; /* a COMBO without a list accepts any string */
    }
    if (!found && d->file_folder && !strcmp(d->file_folder, "input")) {
        /* an annotated name ("clipspace/a.png [input]", "b.png [output]"),
         * which ComfyUI's LoadImage accepts when the file is there */
        size_t sl = strlen(s);
        if (sl > 7 && s[sl - 1] == ']' && strstr(s, " [")) {
            char *path = NULL;
            sd_error e;
            sd_error_clear(&e);
            found = sd_env_resolve(env, d->file_folder, s, &path, &e) == SD_OK;
            free(path);
        }
    }
    if (!found) {
        /* ComfyUI summarizes long lists; so do we. */
        char list[1024] = "";
        size_t off = 0;
        if (d->file_folder) {
            /* The #1 user error is a missing model or image: say where we
             * looked and how to add a folder, not the folder's contents. */
            char dir[1024], comfy[1100] = "", there[64] = "no files there";
            sd_env_folder_dir(env, d->file_folder, dir, sizeof dir);
            int input = strcmp(d->file_folder, "input") == 0;
            if (env->comfyui_dir)
                snprintf(comfy, sizeof comfy, " or %s/%s%s", env->comfyui_dir, input ? "" : "models/",
                         d->file_folder);
            if (count) snprintf(there, sizeof there, "%zu file%s there", count, count == 1 ? "" : "s");
            add_problem(p, n, d->name, "value_not_in_list",
                        "value '%s' not in list: no such file in %s%s (%s; %s)%s", s, dir, comfy, there,
                        input ? "--input-dir DIR sets the input folder"
                              : "--models-dir DIR or --comfyui-dir DIR adds a models folder",
                        fn_error);
            return;
        }
        if (count > 20 || count == 0) {
            snprintf(list, sizeof list, "list of length %zu", count);
        } else {
            for (size_t i = 0; i < count && off < sizeof list; i++) {
                const char *o = d->options ? d->options[i] : sd_value_as_string(sd_value_list_get(dyn, i));
                off += (size_t)snprintf(list + off, sizeof list - off, "%s'%s'", i ? ", " : "", o ? o : "?");
            }
        }
        add_problem(p, n, d->name, "value_not_in_list", "value '%s' not in list [%s]%s", s, list, fn_error);
        return;
    }
    if (d->file_folder && d->file_probe) check_file(p, n, d, s, env, memo);
}

/* An unsigned 64-bit INT input (seeds, json_util.h): INT values are read as
 * uint64; what the parsers kept as a FLOAT is negative or past 2^64-1. The
 * limits are printed with every digit (a double would show 1.84467e+19). */
static void check_u64(sd_graph_problems *p, const sd_graph_node *n, const sd_input_def *d,
                      const sd_value *v) {
    char got[256], lim[32];
    sd_value_kind k = sd_value_kind_of(v);
    if (k == SD_VAL_INT) {
        sd_json_format_int(sd_value_as_int(v), 1, got);
        uint64_t u = (uint64_t)sd_value_as_int(v);
        if (d->min > 0 && (double)u < d->min) {
            snprintf(lim, sizeof lim, "%.0f", d->min);
            add_problem(p, n, d->name, "value_smaller_than_min", "value %s smaller than min of %s", got, lim);
        } else if (d->max < 18446744073709551615.0 && (double)u > d->max) {
            snprintf(lim, sizeof lim, "%.0f", d->max);
            add_problem(p, n, d->name, "value_bigger_than_max", "value %s bigger than max of %s", got, lim);
        }
        return;
    }
    describe_value(v, got, sizeof got);
    double x = sd_value_as_float(v);
    if (k != SD_VAL_FLOAT || !isfinite(x) || x != floor(x)) {
        add_problem(p, n, d->name, "invalid_input_type", "expects an INT, got %s", got);
    } else if (x < 0 && x < d->min) {
        snprintf(lim, sizeof lim, "%.0f", d->min);
        add_problem(p, n, d->name, "value_smaller_than_min", "value %.0f smaller than min of %s", x, lim);
    } else if (x > 0 && x < 18446744073709551616.0) {
        /* only a number that went through a double lands here (1e19, or a
         * Lua decimal literal past 2^63): its low digits are already lost */
        add_problem(p, n, d->name, "invalid_input_type",
                    "expects an INT, got %s, a rounded number: write every digit (in Lua: hex 0x... or a string of digits)",
                    got);
    } else if (x > 0) {
        if (d->max >= 18446744073709551615.0) snprintf(lim, sizeof lim, "18446744073709551615");
        else snprintf(lim, sizeof lim, "%.0f", d->max);
        add_problem(p, n, d->name, "value_bigger_than_max", "value %.0f bigger than max of %s", x, lim);
    }
}

static void check_literal(sd_graph_problems *p, const sd_graph_node *n, const sd_input_def *d,
                          const sd_value *v, const sd_env *env, combo_memo *memo) {
    char got[256];
    describe_value(v, got, sizeof got);
    sd_value_kind k = sd_value_kind_of(v);
    const char *t = d->type;
    if (strcmp(t, "*") == 0) return; /* ComfyUI's any type takes any value (PreviewAny) */
    if (!sd_type_is_literal(t)) {
        /* A common hand-editing slip: [5, 0] instead of ["5", 0]. */
        const sd_value *first = sd_value_list_get(v, 0);
        int numeric_id = sd_value_list_len(v) == 2 && sd_value_kind_of(first) == SD_VAL_INT;
        add_problem(p, n, d->name, "invalid_input_type", "expects a link to an output of type %s, got %s%s",
                    t, got, numeric_id ? " (a link is [\"<node id as a string>\", <output index>])" : "");
        return;
    }
    if (strcmp(t, SD_T_COMBO) == 0) { check_combo(p, n, d, v, env, memo); return; }
    if (strcmp(t, SD_T_STRING) == 0) {
        if (k != SD_VAL_STRING) add_problem(p, n, d->name, "invalid_input_type", "expects a STRING, got %s", got);
        return;
    }
    if (strcmp(t, SD_T_BOOLEAN) == 0) {
        if (k != SD_VAL_BOOL) add_problem(p, n, d->name, "invalid_input_type", "expects a BOOLEAN, got %s", got);
        return;
    }
    int is_int = strcmp(t, SD_T_INT) == 0;
    if (sd_json_input_is_u64(d)) { check_u64(p, n, d, v); return; }
    if (is_int ? !is_integral(v) : (k != SD_VAL_INT && k != SD_VAL_FLOAT)) {
        add_problem(p, n, d->name, "invalid_input_type", "expects %s, got %s",
                    is_int ? "an INT" : "a FLOAT", got);
        return;
    }
    if (!d->has_range) return;
    if (is_int && d->maxsize_range && k == SD_VAL_INT) {
        /* -sys.maxsize .. sys.maxsize: every int64 but the most negative */
        if (sd_value_as_int(v) == INT64_MIN)
            add_problem(p, n, d->name, "value_smaller_than_min", "value %s smaller than min of -9223372036854775807", got);
        return;
    }
    double x = sd_value_as_float(v);
    if (x < d->min)
        add_problem(p, n, d->name, "value_smaller_than_min", "value %s smaller than min of %g", got, d->min);
    else if (x > d->max)
        add_problem(p, n, d->name, "value_bigger_than_max", "value %s bigger than max of %g", got, d->max);
}

static void check_node(sd_graph_problems *p, const sd_graph *g, const sd_graph_node *n,
                       const sd_node_def *def, const sd_env *env, combo_memo *memo) {
    for (int i = 0; def->inputs && def->inputs[i].name; i++) {
        const sd_input_def *d = &def->inputs[i];
        const sd_graph_input *in = sd_graph_node_input(n, d->name);
        if (!in) {
            if (!d->optional)
                add_problem(p, n, d->name, "required_input_missing", "required input is missing (%s)", d->type);
            continue;
        }
        if (!in->is_link) {
            /* null for an optional input means "not given". */
            if (d->optional && sd_value_kind_of(in->literal) == SD_VAL_NONE) continue;
            check_literal(p, n, d, in->literal, env, memo);
            continue;
        }
        const sd_graph_node *src = sd_graph_find(g, in->src_id);
        if (!src) {
            add_problem(p, n, d->name, "bad_linked_input", "links to node '%s', which does not exist", in->src_id);
            continue;
        }
        const sd_node_def *sdef = sd_registry_find(src->class_type);
        if (!sdef) continue; /* reported on the source node itself */
        int n_out = sd_node_output_count(sdef);
        if (in->src_index < 0 || in->src_index >= n_out) {
            add_problem(p, n, d->name, "bad_linked_input",
                        "links to output %d of node '%s' (%s), which has %d output%s", in->src_index,
                        src->id, src->class_type, n_out, n_out == 1 ? "" : "s");
            continue;
        }
        const char *received = sdef->outputs[in->src_index].type;
        if (!type_accepts(d->type, received))
            add_problem(p, n, d->name, "return_type_mismatch",
                        "received_type(%s) mismatch input_type(%s) from node '%s' (%s) output %d",
                        received, d->type, src->id, src->class_type, in->src_index);
    }
}

/* ---- cycles ------------------------------------------------------------------
 * A depth-first walk with an explicit stack: a generated chain of 100,000
 * nodes must not overflow the C stack, and node ids are found through the
 * graph's id map, so the walk is linear in nodes + links. */

/* Reports beyond this many cycles add nothing but time: each report costs the
 * length of its cycle, and a hostile graph can have as many cycles as links. */
#define MAX_CYCLE_REPORTS 32

typedef struct {
    const sd_graph *g;
    int *state;     /* 0 new, 1 on the DFS stack, 2 done */
    size_t *stack;  /* node indices on the current path */
    size_t *next;   /* per stack level: the next input of that node to follow */
    size_t *pos;    /* per node on the path: its level in stack */
    size_t depth;
    int cycles;
    sd_graph_problems *p;
} cycle_walk;

/* The cycle is stack[to_pos..depth-1], each node linking to the next and the
 * last back to the first. It is reported on its earliest node in workflow
 * order, naming the input that links into the cycle, so the report does not
 * depend on where the walk started. */
static void report_cycle(cycle_walk *w, size_t to_pos) {
    if (w->cycles++ >= MAX_CYCLE_REPORTS) return;
    size_t len = w->depth - to_pos, first = 0;
    for (size_t k = 1; k < len; k++)
        if (w->stack[to_pos + k] < w->stack[to_pos + first]) first = k;
    char path[1024] = "";
    size_t off = 0;
    for (size_t k = 0; k <= len && off < sizeof path; k++) {
        const sd_graph_node *c = sd_graph_at(w->g, w->stack[to_pos + (first + k) % len]);
        off += (size_t)snprintf(path + off, sizeof path - off, k < len ? "%s (%s) -> " : "%s",
                                c->id, c->class_type);
    }
    const sd_graph_node *n = sd_graph_at(w->g, w->stack[to_pos + first]);
    const sd_graph_node *next = sd_graph_at(w->g, w->stack[to_pos + (first + 1) % len]);
    const char *input = NULL;
    for (size_t k = 0; k < n->n_inputs && !input; k++)
        if (n->inputs[k].is_link && strcmp(n->inputs[k].src_id, next->id) == 0) input = n->inputs[k].name;
    add_problem(w->p, n, input, "dependency_cycle", "dependency cycle through nodes %s", path);
}

static void push(cycle_walk *w, size_t i) {
    w->state[i] = 1;
    w->pos[i] = w->depth;
    w->next[w->depth] = 0;
    w->stack[w->depth++] = i;
}

/* Edges go from a node to the nodes its inputs link to. */
static void dfs(cycle_walk *w, size_t root) {
    push(w, root);
    while (w->depth) {
        size_t i = w->stack[w->depth - 1];
        const sd_graph_node *n = sd_graph_at(w->g, i);
        size_t *k = &w->next[w->depth - 1];
        if (*k == n->n_inputs) {
            w->state[i] = 2;
            w->depth--;
            continue;
        }
        const sd_graph_input *in = &n->inputs[(*k)++];
        if (!in->is_link) continue;
        size_t j = sd_graph_index_of(w->g, in->src_id);
        if (j == (size_t)-1) continue;
        if (w->state[j] == 1) report_cycle(w, w->pos[j]);
        else if (w->state[j] == 0) push(w, j);
    }
}

/* ---- entry point ------------------------------------------------------------- */

sd_status sd_graph_validate(const sd_graph *g, const struct sd_env *env,
                            sd_graph_problems *problems, sd_error *err) {
    sd_graph_problems local = {0};
    sd_graph_problems *p = problems ? problems : &local;
    p->items = NULL;
    p->n = 0;
    /* Environment-dependent combo lists need an env: the defaults serve. */
    sd_env default_env;
    int own_env = 0;
    if (!env) {
        if (sd_env_init(&default_env, err)) return err ? err->code : SD_ERR_NOMEM;
        env = &default_env;
        own_env = 1;
    }
    size_t count = sd_graph_count(g);
    int outputs = 0, unknown = 0;
    combo_memo memo = {0};
    for (size_t i = 0; i < count; i++) {
        const sd_graph_node *n = sd_graph_at(g, i);
        const sd_node_def *def = sd_registry_find(n->class_type);
        if (!def) {
            char hint[512] = "";
            /* hints cost a pass over the registry: the first few unknown nodes get them */
            if (++unknown <= 16) sd_node_suggest(n->class_type, hint, sizeof hint);
            add_problem(p, n, NULL, "invalid_prompt",
                        "Cannot execute because node %s does not exist (unknown class_type)%s%s", n->class_type,
                        hint[0] ? "; " : "", hint);
            continue;
        }
        if (def->flags & SD_NODE_OUTPUT) outputs++;
        check_node(p, g, n, def, env, &memo);
    }
    if (count) {
        cycle_walk w = {.g = g, .state = calloc(count, sizeof(int)), .stack = calloc(count, sizeof(size_t)),
                        .next = calloc(count, sizeof(size_t)), .pos = calloc(count, sizeof(size_t)), .p = p};
        if (w.state && w.stack && w.next && w.pos) {
            for (size_t i = 0; i < count; i++)
                if (!w.state[i]) dfs(&w, i);
        } else {
            add_problem(p, NULL, NULL, "internal_error", "out of memory checking the workflow for cycles");
        }
        free(w.state);
        free(w.stack);
        free(w.next);
        free(w.pos);
    }
    combo_memo_free(&memo);
    if (own_env) sd_env_cleanup(&default_env);
    if (!outputs)
        add_problem(p, NULL, NULL, "prompt_no_outputs",
                    "Prompt has no outputs (the workflow needs at least one output node such as SaveImage)");
    if (!p->n) return SD_OK;
    const sd_graph_problem *first = &p->items[0];
    sd_error_clear(err);
    if (p->n == 1)
        sd_error_set(err, SD_ERR_VALIDATION, "%s: %s", first->kind, first->message);
    else
        sd_error_set(err, SD_ERR_VALIDATION, "%s: %s (and %zu more problem%s)", first->kind,
                     first->message, p->n - 1, p->n == 2 ? "" : "s");
    sd_error_at(err, first->node_id, first->class_type, first->input);
    if (p == &local) sd_graph_problems_free(&local);
    return SD_ERR_VALIDATION;
}
