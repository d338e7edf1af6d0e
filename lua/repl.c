/* repl.c - the interactive graph REPL (repl.h): reading lines, undo
 * snapshots, and the session commands. */
#define _GNU_SOURCE /* strcasestr */
#include "repl.h"

#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <unistd.h>
#ifdef SDFLOW_HAVE_LIBEDIT
#include <editline/readline.h>
#endif
#include "core/json_util.h"
#include "lua_internal.h"

#define MAX_UNDO 200
#define PROMPT "sdflow> "
#define PROMPT2 "    >> "

typedef struct repl {
    const sd_repl_config *cfg;
    FILE *in, *out;
    int editing;          /* libedit on a terminal */
    sd_lua_vm *vm;
    sd_graph *g;          /* the session graph; vm->graph points at it */
    sd_graph **undo;      /* snapshots, oldest first */
    size_t n_undo;
    int replaced;         /* undo()/load() swapped the graph during this line */
    int quit;
    long line_no;         /* input lines read so far (node origins are "repl:N") */
    sd_exec *ex;          /* lives for the session: its memo keeps models */
} repl;

static repl *repl_of(lua_State *L) { return sd_lua_vm_of(L)->user; }

static void set_graph(repl *r, sd_graph *g) {
    r->g = g;
    r->vm->graph = g;
}

/* ---- commands -------------------------------------------------------------------- */

typedef struct command {
    const char *name;
    lua_CFunction fn;
    const char *usage, *help;
} command;

static const command *commands(void);

static void print_input_def(FILE *o, const sd_input_def *d) {
    fprintf(o, "    %-18s %s%s", d->name, d->type, d->optional ? " (optional)" : "");
    if (!strcmp(d->type, SD_T_INT) || !strcmp(d->type, SD_T_FLOAT) || !strcmp(d->type, SD_T_BOOLEAN)) {
        fprintf(o, " = %g", d->def);
        if (sd_json_input_is_u64(d)) fprintf(o, " [%g .. 18446744073709551615]", d->min); /* seeds */
        else if (d->has_range) fprintf(o, " [%g .. %g]", d->min, d->max);
    } else if (d->def_str) {
        fprintf(o, " = \"%s\"", d->def_str);
    }
    if (d->options) {
        fputs(" one of:", o);
        for (int i = 0; d->options[i] && i < 12; i++) fprintf(o, " %s", d->options[i]);
        if (d->options[0]) {
            int n = 0;
            while (d->options[n]) n++;
            if (n > 12) fprintf(o, " ... (%d in all)", n);
        }
    } else if (d->options_fn) {
        fputs(" (a file name)", o);
    }
    fputc('\n', o);
}

static int l_help(lua_State *L) {
    repl *r = repl_of(L);
    FILE *o = r->out;
    const char *what = luaL_optstring(L, 1, NULL);
    if (!what) {
        fputs("Build the graph with node constructors, e.g.\n"
              "  img = LoadImage{image = \"in.png\"}   inv = ImageInvert{image = img.IMAGE}\n"
              "Outputs by name (img.IMAGE) or index (img[1]); assign inputs with inv.image = x.\n"
              "Commands:\n",
              o);
        for (const command *c = commands(); c->name; c++) fprintf(o, "  %-28s %s\n", c->usage, c->help);
        fputs("help(\"KSampler\") describes a node type; nodes() lists them.\n", o);
        return 0;
    }
    for (const command *c = commands(); c->name; c++)
        if (!strcmp(c->name, what)) {
            fprintf(o, "%s\n    %s\n", c->usage, c->help);
            return 0;
        }
    const sd_node_def *def = sd_registry_find(what);
    if (!def) return luaL_error(L, "help: no command or node type named '%s' (nodes() lists types)", what);
    fprintf(o, "%s", def->class_type);
    if (def->display_name) fprintf(o, " - %s", def->display_name);
    if (def->category) fprintf(o, " [%s]", def->category);
    fputc('\n', o);
    if (def->description && *def->description) fprintf(o, "  %s\n", def->description);
    if (def->help && *def->help) fprintf(o, "  %s\n", def->help);
    fputs("  inputs:\n", o);
    for (int i = 0; def->inputs[i].name; i++) print_input_def(o, &def->inputs[i]);
    fputs("  outputs:\n", o);
    for (int i = 0; def->outputs[i].name; i++)
        fprintf(o, "    [%d] %-14s %s\n", i + 1, def->outputs[i].name, def->outputs[i].type);
    if (def->flags & SD_NODE_OUTPUT) fputs("  (an output node)\n", o);
    return 0;
}

static int l_nodes(lua_State *L) {
    repl *r = repl_of(L);
    const char *filter = luaL_optstring(L, 1, NULL);
    size_t shown = 0;
    for (size_t i = 0; i < sd_registry_count(); i++) {
        const sd_node_def *d = sd_registry_at(i);
        if (filter && !strcasestr(d->class_type, filter) && !(d->category && strcasestr(d->category, filter)))
            continue;
        fprintf(r->out, "%-28s", d->class_type);
        for (int k = 0; d->inputs[k].name; k++) fprintf(r->out, "%s%s", k ? ", " : " ", d->inputs[k].name);
        fputs("  ->", r->out);
        for (int k = 0; d->outputs[k].name; k++) fprintf(r->out, " %s", d->outputs[k].name);
        fputc('\n', r->out);
        shown++;
    }
    fprintf(r->out, "(%zu node type%s)\n", shown, shown == 1 ? "" : "s");
    return 0;
}

/* Ids, class types, titles and input names come from a loaded workflow,
 * which may be anyone's: escaped (core/text.h) so none drives the terminal. */
static void show_node(repl *r, const sd_graph_node *n) {
    FILE *o = r->out;
    char e1[512], e2[512], e3[512];
    fprintf(o, "#%s %s", sd_text_escape(n->id, 0, e1, sizeof e1), sd_text_escape(n->class_type, 0, e2, sizeof e2));
    if (n->title) fprintf(o, " \"%s\"", sd_text_escape(n->title, 0, e1, sizeof e1));
    if (n->origin) fprintf(o, "  (%s)", sd_text_escape(n->origin, 0, e1, sizeof e1));
    fputc('\n', o);
    for (size_t k = 0; k < n->n_inputs; k++) {
        const sd_graph_input *in = &n->inputs[k];
        sd_text_escape(in->name, 0, e1, sizeof e1);
        if (in->is_link) {
            const sd_graph_node *s = sd_graph_find(r->g, in->src_id);
            const sd_node_def *def = s ? sd_registry_find(s->class_type) : NULL;
            const char *oname =
                def && in->src_index < sd_node_output_count(def) ? def->outputs[in->src_index].name : NULL;
            sd_text_escape(in->src_id, 0, e2, sizeof e2);
            if (oname) fprintf(o, "    %s <- #%s.%s\n", e1, e2, sd_text_escape(oname, 0, e3, sizeof e3));
            else fprintf(o, "    %s <- #%s[%d]%s\n", e1, e2, in->src_index + 1, s ? "" : " (missing)");
        } else {
            sd_sbuf b = {0};
            sd_sbuf_lua_input_value(&b, in->literal, sd_json_input_is_u64_named(n->class_type, in->name));
            char *val = b.s ? malloc(strlen(b.s) * 6 + 1) : NULL; /* a value may be long: no fixed buffer */
            if (val) sd_text_escape(b.s, 0, val, strlen(b.s) * 6 + 1);
            fprintf(o, "    %s = %s\n", e1, val ? val : "?");
            free(val);
            free(b.s);
        }
    }
}

static int l_show(lua_State *L) {
    repl *r = repl_of(L);
    if (!lua_isnoneornil(L, 1)) {
        show_node(r, sd_lua_check_node(L, 1));
        return 0;
    }
    size_t n = sd_graph_count(r->g);
    if (!n) fputs("(empty graph)\n", r->out);
    for (size_t i = 0; i < n; i++) show_node(r, sd_graph_at(r->g, i));
    return 0;
}

static int l_add(lua_State *L) {
    luaL_checkstring(L, 1);
    lua_getglobal(L, "Node");
    lua_insert(L, 1);
    lua_settop(L, 3);
    lua_call(L, 2, 1);
    return 1;
}

static int l_remove(lua_State *L) {
    repl *r = repl_of(L);
    sd_graph_node *n = sd_lua_check_node(L, 1);
    /* a copy on the Lua stack: the node's own string goes with the node */
    const char *id = lua_pushstring(L, n->id);
    int cut = 0;
    /* links into the removed node go too, as in the ComfyUI editor */
    for (size_t i = 0; i < sd_graph_count(r->g); i++) {
        sd_graph_node *m = sd_graph_at(r->g, i);
        for (size_t k = 0; k < m->n_inputs;) {
            if (m->inputs[k].is_link && !strcmp(m->inputs[k].src_id, id)) {
                sd_graph_unset_input(m, m->inputs[k].name);
                cut++;
            } else {
                k++;
            }
        }
    }
    sd_graph_remove_node(r->g, id, NULL);
    char esc[512];
    fprintf(r->out, "removed #%s", sd_text_escape(id, 0, esc, sizeof esc));
    if (cut) fprintf(r->out, " and %d link%s to it", cut, cut == 1 ? "" : "s");
    fputc('\n', r->out);
    return 0;
}

static int l_set(lua_State *L) {
    sd_graph_node *n = sd_lua_check_node(L, 1);
    const char *name = luaL_checkstring(L, 2);
    luaL_checkany(L, 3);
    sd_lua_set_input(L, n, name, 3);
    return 0;
}

static int l_connect(lua_State *L) {
    luaL_checkany(L, 1);
    sd_graph_node *n = sd_lua_check_node(L, 2);
    const char *name = luaL_checkstring(L, 3);
    if (lua_type(L, 1) != LUA_TUSERDATA) return luaL_error(L, "connect: the first argument must be a node or output");
    sd_lua_set_input(L, n, name, 1);
    return 0;
}

static int l_disconnect(lua_State *L) {
    sd_graph_node *n = sd_lua_check_node(L, 1);
    const char *name = luaL_checkstring(L, 2);
    const sd_graph_input *in = sd_graph_node_input(n, name);
    if (!in || !in->is_link) return luaL_error(L, "disconnect: input '%s' of #%s is not linked", name, n->id);
    sd_graph_unset_input(n, name);
    return 0;
}

/* Names and messages come from the graph: escaped (core/text.h). */
static void print_problems(repl *r, const sd_graph_problems *p) {
    char id[512], ct[512], in[512], msg[8192];
    for (size_t i = 0; i < p->n; i++) {
        const sd_graph_problem *q = &p->items[i];
        if (q->node_id)
            fprintf(r->out, "error: #%s %s", sd_text_escape(q->node_id, 0, id, sizeof id),
                    q->class_type ? sd_text_escape(q->class_type, 0, ct, sizeof ct) : "?");
        else fputs("error:", r->out);
        if (q->input) fprintf(r->out, " input '%s'", sd_text_escape(q->input, 0, in, sizeof in));
        /* the message names the origin already (graph_validate.c) */
        fprintf(r->out, ": %s\n", sd_text_escape(q->message, 0, msg, sizeof msg));
    }
}

static void list_status(repl *r, const sd_exec_report *rep, const char *label, int cached) {
    int any = 0;
    fprintf(r->out, "%s", label);
    for (size_t i = 0; i < rep->n; i++) {
        const sd_exec_record *rec = &rep->items[i];
        int is_cached = rec->status == SD_NODE_CACHED || rec->status == SD_NODE_MEMO;
        if (cached ? !is_cached : rec->status != SD_NODE_EXECUTED) continue;
        fprintf(r->out, "%s#%s %s", any++ ? ", " : " ", rec->node_id, rec->class_type);
    }
    fprintf(r->out, "%s\n", any ? "" : " none");
}

static int l_run(lua_State *L) {
    repl *r = repl_of(L);
    const sd_repl_config *c = r->cfg;
    if (c->interrupt) *c->interrupt = 0;
    sd_exec_opts xo = {.env = c->env, .cache = c->cache, .interrupt = c->interrupt,
                       .on_event = c->on_event, .on_event_user = c->on_event_user, .previews = c->previews};
    sd_exec_report rep = {0};
    sd_graph_problems probs = {0};
    sd_error err;
    sd_error_clear(&err);
    fflush(r->out);
    sd_status rc = sd_exec_run(r->ex, r->g, &xo, &rep, &probs, &err);
    if (rc == SD_ERR_VALIDATION && probs.n) {
        print_problems(r, &probs);
        fprintf(r->out, "not run: %zu problem%s\n", probs.n, probs.n == 1 ? "" : "s");
    } else {
        list_status(r, &rep, "executed:", 0);
        list_status(r, &rep, "cached:  ", 1);
        for (size_t i = 0; i < rep.n; i++) {
            const sd_value *files = sd_value_dict_get(rep.items[i].ui, "files");
            for (size_t k = 0; k < sd_value_list_len(files); k++) {
                const char *f = sd_value_as_string(sd_value_list_get(files, k));
                if (f) fprintf(r->out, "wrote:    %s\n", f);
            }
        }
        if (rc) {
            char buf[SD_ERR_MSG_MAX + 512];
            const sd_graph_node *n = err.node_id[0] ? sd_graph_find(r->g, err.node_id) : NULL;
            fprintf(r->out, "%s: %s", rc == SD_ERR_CANCELLED ? "interrupted" : "error",
                    sd_error_format(&err, buf, sizeof buf));
            if (n && n->origin) fprintf(r->out, " (node made at %s)", n->origin);
            fputc('\n', r->out);
        }
        fprintf(r->out, "%s: %zu executed, %zu cached, %.2fs\n", rc ? "stopped" : "done", rep.n_executed,
                rep.n_cached, rep.seconds);
    }
    sd_exec_report_free(&rep);
    sd_graph_problems_free(&probs);
    return 0; /* the report is printed; a value would be printed again */
}

static int l_undo(lua_State *L) {
    repl *r = repl_of(L);
    if (!r->n_undo) {
        fputs("nothing to undo\n", r->out);
        return 0;
    }
    sd_graph_free(r->g);
    set_graph(r, r->undo[--r->n_undo]);
    r->replaced = 1;
    fprintf(r->out, "undone (%zu node%s now)\n", sd_graph_count(r->g), sd_graph_count(r->g) == 1 ? "" : "s");
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static int l_save(lua_State *L) {
    repl *r = repl_of(L);
    const char *path = luaL_checkstring(L, 1);
    int lua = ends_with(path, ".lua");
    char *text = lua ? sd_lua_export(r->g, NULL) : sd_graph_to_json(r->g, 1);
    if (!text) return luaL_error(L, "save: out of memory");
    FILE *f = fopen(path, "wb");
    int ok = f && fputs(text, f) >= 0 && (lua || fputc('\n', f) != EOF);
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok) return luaL_error(L, "save: cannot write '%s'", path);
    fprintf(r->out, "saved %zu node%s to %s\n", sd_graph_count(r->g), sd_graph_count(r->g) == 1 ? "" : "s", path);
    return 0;
}

static int l_load(lua_State *L) {
    repl *r = repl_of(L);
    const char *path = luaL_checkstring(L, 1);
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (sd_lua_load_any(path, &r->cfg->lua, &g, &err)) return luaL_error(L, "load: %s", err.msg);
    /* the old graph becomes an undo step like any other change */
    if (r->n_undo == MAX_UNDO) {
        sd_graph_free(r->undo[0]);
        memmove(r->undo, r->undo + 1, (MAX_UNDO - 1) * sizeof *r->undo);
        r->n_undo--;
    }
    r->undo[r->n_undo++] = r->g;
    set_graph(r, g);
    r->replaced = 1;
    fprintf(r->out, "loaded %zu node%s from %s\n", sd_graph_count(g), sd_graph_count(g) == 1 ? "" : "s", path);
    return 0;
}

static int l_clear(lua_State *L) {
    repl *r = repl_of(L);
    while (sd_graph_count(r->g)) {
        const char *id = lua_pushstring(L, sd_graph_at(r->g, 0)->id); /* outlives the node */
        sd_graph_remove_node(r->g, id, NULL);
        lua_pop(L, 1);
    }
    return 0;
}

static int l_quit(lua_State *L) {
    repl_of(L)->quit = 1;
    return 0;
}

static const command *commands(void) {
    static const command list[] = {
        {"nodes", l_nodes, "nodes([filter])", "list node types (with their inputs and outputs)"},
        {"help", l_help, "help([name])", "this list, or a node type's inputs and outputs"},
        {"show", l_show, "show([node])", "the graph: ids, types, values and links"},
        {"add", l_add, "add(type, {inputs})", "add a node (same as Type{inputs})"},
        {"remove", l_remove, "remove(node)", "remove a node and the links to it"},
        {"set", l_set, "set(node, input, value)", "set an input (same as node.input = value)"},
        {"connect", l_connect, "connect(output, node, input)", "link an output (or a node) to an input"},
        {"disconnect", l_disconnect, "disconnect(node, input)", "remove the link into an input"},
        {"node", NULL, "node(id)", "the node with this id"},
        {"run", l_run, "run()", "run the graph; reports executed and cached nodes"},
        {"undo", l_undo, "undo()", "take back the last line that changed the graph"},
        {"save", l_save, "save(\"x.json\"|\"x.lua\")", "write the graph as API JSON or Lua"},
        {"load", l_load, "load(\"x.json\"|\"x.lua\"|\"x.png\")", "replace the graph by a workflow file"},
        {"clear", l_clear, "clear()", "remove every node"},
        {"quit", l_quit, "quit()", "leave (also exit() or Ctrl-D)"},
        {NULL, NULL, NULL, NULL}};
    return list;
}

/* ---- reading and evaluating lines ------------------------------------------------------- */

#ifdef SDFLOW_HAVE_LIBEDIT
/* Tab completion of commands and node types. Builds the whole answer at once
 * (readline's [0] = common prefix, then the matches) so that no iteration
 * state has to outlive a call. */
static char **complete(const char *text, int start, int end) {
    (void)start;
    (void)end;
    rl_attempted_completion_over = 1; /* no file-name fallback */
    size_t len = strlen(text), cap = 16, n = 1;
    char **m = calloc(cap, sizeof *m);
    if (!m) return NULL;
    static const char *const extra[] = {"Node", "link", "node", "exit", NULL};
    size_t nreg = sd_registry_count(), nalias = sd_registry_alias_count();
    const command *cmds = commands();
    size_t ncmd = 0, nextra = 0;
    while (cmds[ncmd].name) ncmd++;
    while (extra[nextra]) nextra++;
    for (size_t i = 0; i < nreg + nalias + ncmd + nextra; i++) {
        const char *name = NULL, *target;
        if (i < nreg) name = sd_registry_at(i)->class_type;
        else if (i < nreg + nalias) sd_registry_alias_at(i - nreg, &name, &target);
        else if (i < nreg + nalias + ncmd) name = cmds[i - nreg - nalias].name;
        else name = extra[i - nreg - nalias - ncmd];
        if (strncmp(name, text, len)) continue;
        if (n + 2 > cap) {
            char **g = realloc(m, (cap *= 2) * sizeof *m);
            if (!g) break;
            m = g;
        }
        if (!(m[n] = strdup(name))) break;
        n++;
    }
    m[n] = NULL;
    if (n == 1) { free(m); return NULL; }
    size_t common = strlen(m[1]);
    for (size_t i = 2; i < n; i++) {
        size_t k = 0;
        while (k < common && m[i][k] == m[1][k]) k++;
        common = k;
    }
    m[0] = strndup(m[1], common);
    if (!m[0]) { for (size_t i = 1; i < n; i++) free(m[i]); free(m); return NULL; }
    return m;
}
#endif

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    repl *r = repl_of(L);
    if (r->cfg->interrupt && *r->cfg->interrupt) {
        *r->cfg->interrupt = 0;
        luaL_error(L, "interrupted");
    }
}

/* Takes a pending Ctrl-C: 1 when there was one. */
static int interrupted(repl *r) {
    if (!r->cfg->interrupt || !*r->cfg->interrupt) return 0;
    *r->cfg->interrupt = 0;
    return 1;
}

/* One line of input without its newline (malloc'd), or NULL at end of input.
 * Ctrl-C while reading gives an empty line. */
static char *read_line(repl *r, const char *prompt) {
#ifdef SDFLOW_HAVE_LIBEDIT
    if (r->editing) {
        char *line = readline(prompt);
        if (!line && interrupted(r)) { /* Ctrl-C at the prompt drops the line, not the session */
            fputs("^C\n", r->out);
            return strdup("");
        }
        if (line && *line) add_history(line);
        return line;
    }
#endif
    fputs(prompt, r->out);
    fflush(r->out);
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    int c;
    while (buf && (c = fgetc(r->in)) != EOF && c != '\n') {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) { free(buf); return NULL; }
            buf = b;
        }
        buf[n++] = (char)c;
    }
    if (buf && c == EOF && ferror(r->in) && interrupted(r)) {
        clearerr(r->in);
        fputc('\n', r->out);
        buf[0] = 0;
        return buf;
    }
    if (!buf || (c == EOF && n == 0)) { free(buf); return NULL; }
    buf[n] = 0;
    return buf;
}

static int incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    return len >= 5 && !strcmp(msg + len - 5, "<eof>");
}

/* Compile `code` as it would sit at line `first_line` of the session, so node
 * origins and error messages name that line. Tries "return <code>" first so
 * that expressions print their value. */
static int compile(lua_State *L, const char *code, long first_line) {
    sd_sbuf b = {0};
    for (long i = 1; i < first_line; i++) sd_sbuf_add(&b, "\n");
    size_t pad = b.n;
    sd_sbuf_add(&b, "return ");
    sd_sbuf_add(&b, code);
    sd_sbuf_add(&b, ";");
    if (b.oom) { free(b.s); lua_pushstring(L, "out of memory"); return LUA_ERRMEM; }
    int st = luaL_loadbufferx(L, b.s, b.n, "=repl", "t");
    if (st != LUA_OK) {
        lua_pop(L, 1);
        b.n = pad;
        b.s[pad] = 0;
        sd_sbuf_add(&b, code);
        st = b.oom ? LUA_ERRMEM : luaL_loadbufferx(L, b.s, b.n, "=repl", "t");
    }
    free(b.s);
    return st;
}

static void print_results(repl *r, int base) {
    lua_State *L = r->vm->L;
    int top = lua_gettop(L);
    for (int i = base; i <= top; i++) {
        const char *s = luaL_tolstring(L, i, NULL);
        fprintf(r->out, "%s%s", i > base ? "\t" : "", s);
        lua_pop(L, 1);
    }
    if (top >= base) fputc('\n', r->out);
}

static void push_undo(repl *r, sd_graph *snap) {
    if (r->n_undo == MAX_UNDO) {
        sd_graph_free(r->undo[0]);
        memmove(r->undo, r->undo + 1, (MAX_UNDO - 1) * sizeof *r->undo);
        r->n_undo--;
    }
    r->undo[r->n_undo++] = snap;
}

/* Run one complete chunk (compiled at the top of the stack) as one undo step. */
static void eval(repl *r) {
    lua_State *L = r->vm->L;
    int base = lua_gettop(L); /* the function's slot */
    sd_graph *snap = sd_graph_clone(r->g);
    char *before = sd_graph_to_json(r->g, 0);
    r->replaced = 0;
    lua_sethook(L, interrupt_hook, LUA_MASKCOUNT, 1000);
    if (r->cfg->interrupt) *r->cfg->interrupt = 0;
    sd_error err;
    sd_error_clear(&err);
    if (sd_lua_vm_pcall(r->vm, 0, LUA_MULTRET, &err)) fprintf(r->out, "error: %s\n", err.msg);
    else print_results(r, base);
    lua_sethook(L, NULL, 0, 0);
    lua_settop(L, base - 1);
    char *after = r->replaced ? NULL : sd_graph_to_json(r->g, 0);
    if (!r->replaced && snap && before && after && strcmp(before, after)) push_undo(r, snap);
    else sd_graph_free(snap);
    free(before);
    free(after);
}

static void install_commands(repl *r) {
    lua_State *L = r->vm->L;
    for (const command *c = commands(); c->name; c++) {
        if (!c->fn) continue;
        lua_pushcfunction(L, c->fn);
        lua_setglobal(L, c->name);
    }
    lua_pushcfunction(L, l_quit);
    lua_setglobal(L, "exit");
}

int sd_repl_main(const sd_repl_config *cfg) {
    repl r = {.cfg = cfg, .in = cfg->in ? cfg->in : stdin, .out = cfg->out ? cfg->out : stdout};
    sd_error err;
    sd_error_clear(&err);
    int code = 1;
    r.undo = calloc(MAX_UNDO, sizeof *r.undo);
    r.ex = sd_exec_new();
    r.g = sd_graph_new();
    if (!r.undo || !r.ex || !r.g) { fprintf(stderr, "error: out of memory\n"); goto done; }
    if (cfg->workflow) {
        sd_graph *g = NULL;
        if (sd_lua_load_any(cfg->workflow, &cfg->lua, &g, &err)) {
            char buf[SD_ERR_MSG_MAX + 512];
            fprintf(stderr, "error: %s\n", sd_error_format(&err, buf, sizeof buf));
            goto done;
        }
        sd_graph_free(r.g);
        r.g = g;
    }
    if (sd_lua_vm_new(&cfg->lua, &r.vm, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    r.vm->user = &r;
    set_graph(&r, r.g);
    install_commands(&r);
#ifdef SDFLOW_HAVE_LIBEDIT
    r.editing = r.in == stdin && isatty(STDIN_FILENO);
    if (r.editing) {
        using_history();
        rl_attempted_completion_function = complete;
        if (cfg->history) read_history(cfg->history);
    }
#endif
    fprintf(r.out, "sdflow repl: Lua %s.%s; help() lists the commands, quit() or Ctrl-D leaves.\n", LUA_VERSION_MAJOR,
            LUA_VERSION_MINOR);
    if (cfg->workflow) fprintf(r.out, "loaded %zu nodes from %s; show() prints them\n", sd_graph_count(r.g), cfg->workflow);
    while (!r.quit) {
        char *line = read_line(&r, PROMPT);
        if (!line) break;
        long first = ++r.line_no;
        sd_sbuf code = {0};
        sd_sbuf_add(&code, line);
        free(line);
        lua_State *L = r.vm->L;
        int st;
        while ((st = compile(L, code.s ? code.s : "", first)) != LUA_OK && incomplete(L, st)) {
            lua_pop(L, 1);
            char *more = read_line(&r, PROMPT2);
            if (!more) break;
            r.line_no++;
            sd_sbuf_add(&code, "\n");
            sd_sbuf_add(&code, more);
            free(more);
        }
        free(code.s);
        if (st != LUA_OK) {
            fprintf(r.out, "error: %s\n", lua_tostring(L, -1) ? lua_tostring(L, -1) : "cannot compile");
            lua_pop(L, 1);
            continue;
        }
        eval(&r);
        fflush(r.out);
    }
    if (!r.quit) fputc('\n', r.out);
#ifdef SDFLOW_HAVE_LIBEDIT
    if (r.editing && cfg->history) write_history(cfg->history);
#endif
    code = 0;
done:
    sd_lua_vm_free(r.vm);
    for (size_t i = 0; i < r.n_undo; i++) sd_graph_free(r.undo[i]);
    free(r.undo);
    sd_graph_free(r.g);
    sd_exec_free(r.ex);
    return code;
}
