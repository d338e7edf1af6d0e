/* bind.c - the one generic binding between Lua and the node registry.
 *
 * Every class_type becomes a global constructor closure whose upvalue is its
 * name; nothing here knows any node type. A node handle is a userdata whose
 * user value is the node id, and an output handle also carries the output
 * index: handles look their node up in the VM's current graph on every use,
 * so they stay meaningful when the REPL removes nodes or undoes a change. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/json_util.h"
#include "core/text.h"
#include "lua_internal.h"

#define NODE_MT "sdflow.node"
#define OUTPUT_MT "sdflow.output"
#define MAX_DEPTH 32

static sd_graph *graph_of(lua_State *L) {
    sd_lua_vm *vm = sd_lua_vm_of(L);
    if (!vm->graph) luaL_error(L, "no graph to add nodes to");
    return vm->graph;
}

const char *sd_lua_where(lua_State *L, char *buf, size_t n) {
    lua_Debug ar;
    buf[0] = 0;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "Sl", &ar)) break;
        if (ar.currentline > 0) {
            snprintf(buf, n, "%s:%d", ar.short_src, ar.currentline);
            break;
        }
    }
    return buf;
}

/* ---- strings that may enter the graph --------------------------------------------
 * Lua strings may hold any bytes; a NUL would silently cut an id, a name or
 * a prompt where C reads it, and bytes that are not UTF-8 cannot be saved
 * back into a workflow unchanged (core/text.h). */

/* 0, or -1 with msg = "<what> holds ... at byte N (refused...)". */
static int check_text(const char *s, size_t len, const char *what, char *msg, size_t cap) {
    size_t at = 0;
    sd_text_problem p = sd_text_check(s, len, &at);
    if (!p) return 0;
    snprintf(msg, cap, "%s holds %s at byte %zu (refused: %s)", what, sd_text_problem_describe(p), at,
             p == SD_TEXT_NUL ? "it would cut the string there" : "it could not be saved back unchanged");
    return -1;
}

/* The string at idx, raising a Lua error naming `what` when it may not
 * enter the graph. */
static const char *check_graph_string(lua_State *L, int idx, const char *what) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    char msg[256];
    if (s && check_text(s, len, what, msg, sizeof msg)) luaL_error(L, "%s", msg);
    return s;
}

/* ---- handles ------------------------------------------------------------------- */

void sd_lua_push_node(lua_State *L, const char *id) {
    lua_newuserdatauv(L, 0, 1);
    lua_pushstring(L, id);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, NODE_MT);
}

static void push_output(lua_State *L, const char *id, int index) {
    int *p = lua_newuserdatauv(L, sizeof(int), 1);
    *p = index;
    lua_pushstring(L, id);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, OUTPUT_MT);
}

/* The id string of a handle at idx (valid while the handle lives). */
static const char *handle_id(lua_State *L, int idx) {
    lua_getiuservalue(L, idx, 1);
    const char *id = lua_tostring(L, -1);
    lua_pop(L, 1); /* the handle keeps the string alive */
    return id;
}

const char *sd_lua_check_node_id(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (luaL_testudata(L, idx, NODE_MT) || luaL_testudata(L, idx, OUTPUT_MT)) return handle_id(L, idx);
    if (lua_type(L, idx) == LUA_TSTRING) return check_graph_string(L, idx, "the node id");
    if (lua_isinteger(L, idx)) return lua_tostring(L, idx); /* converts in place: fine for ids */
    luaL_error(L, "expected a node (handle or id), got %s", luaL_typename(L, idx));
    return NULL;
}

sd_graph_node *sd_lua_check_node(lua_State *L, int idx) {
    const char *id = sd_lua_check_node_id(L, idx);
    sd_graph_node *n = sd_graph_find(graph_of(L), id);
    if (!n) luaL_error(L, "node %s does not exist (removed, or undone?)", id);
    return n;
}

/* ---- Lua values -> graph inputs ---------------------------------------------------- */

/* The JSON rule (graph_json.c): integral numbers are INT, so that a Lua and a
 * JSON workflow with the same numbers build the same graph and cache keys. */
static sd_value *number_value(double d) {
    if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) return sd_value_int((int64_t)d);
    return sd_value_float(d);
}

static sd_value *literal_from_lua(lua_State *L, int idx, int depth, char *msg, size_t cap) {
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return sd_value_bool(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) return sd_value_int((int64_t)lua_tointeger(L, idx));
        return number_value(lua_tonumber(L, idx));
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (check_text(s, len, "the string", msg, cap)) return NULL;
        return sd_value_string(s);
    }
    case LUA_TTABLE: {
        if (depth >= MAX_DEPTH) { snprintf(msg, cap, "list nested too deeply"); return NULL; }
        if (lua_getmetatable(L, idx)) {
            lua_pop(L, 1);
            snprintf(msg, cap, "a table with a metatable cannot be an input value");
            return NULL;
        }
        lua_Integer len = luaL_len(L, idx);
        size_t count = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) { count++; lua_pop(L, 1); }
        if ((lua_Integer)count != len) {
            snprintf(msg, cap, "a table input value must be a list {a, b, ...} (no named keys or holes)");
            return NULL;
        }
        sd_value *list = sd_value_list();
        if (!list) { snprintf(msg, cap, "out of memory"); return NULL; }
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, idx, i);
            if (luaL_testudata(L, -1, NODE_MT) || luaL_testudata(L, -1, OUTPUT_MT)) {
                lua_pop(L, 1);
                sd_value_unref(list);
                snprintf(msg, cap, "a link cannot be inside a list");
                return NULL;
            }
            sd_value *item = literal_from_lua(L, -1, depth + 1, msg, cap);
            lua_pop(L, 1);
            if (!item || sd_value_list_append(list, item)) {
                if (item) snprintf(msg, cap, "out of memory");
                sd_value_unref(list);
                return NULL;
            }
        }
        return list;
    }
    default:
        snprintf(msg, cap, "a %s cannot be an input value", luaL_typename(L, idx));
        return NULL;
    }
}

/* Non-raising core of sd_lua_set_input, so callers can clean up first. */
static int input_from_lua(lua_State *L, sd_graph_node *n, const char *name, int idx, char *msg,
                          size_t cap) {
    sd_error err;
    sd_error_clear(&err);
    sd_graph *g = graph_of(L);
    idx = lua_absindex(L, idx);
    if (lua_isnil(L, idx)) {
        sd_graph_unset_input(n, name);
        return 0;
    }
    if (luaL_testudata(L, idx, NODE_MT)) {
        const char *src = handle_id(L, idx);
        const sd_graph_node *s = sd_graph_find(g, src);
        const sd_node_def *def = s ? sd_registry_find(s->class_type) : NULL;
        if (def && sd_node_output_count(def) != 1) {
            sd_sbuf b = {0};
            for (int i = 0; def->outputs[i].name; i++) sd_sbuf_printf(&b, "%s%s", i ? ", " : "", def->outputs[i].name);
            snprintf(msg, cap, "input '%s': node %s (%s) has %d outputs; pick one by name (%s) or index",
                     name, src, s->class_type, sd_node_output_count(def), b.s ? b.s : "");
            free(b.s);
            return -1;
        }
        if (sd_graph_set_link(n, name, src, 0, &err)) goto fail;
        return 0;
    }
    if (luaL_testudata(L, idx, OUTPUT_MT)) {
        int index = *(int *)lua_touserdata(L, idx);
        if (sd_graph_set_link(n, name, handle_id(L, idx), index, &err)) goto fail;
        return 0;
    }
    /* Unsigned 64-bit INT inputs (seeds up to 0xffffffffffffffff, see
     * core/json_util.h): Lua integers wrap at 2^63 exactly as the stored bit
     * pattern does, so 0xffffffffffffffff (== -1 in Lua) is 2^64-1; a string
     * of decimal digits is read exactly too. A decimal literal past 2^63 has
     * become a rounded float before we see it: say so instead of guessing. */
    int u64 = sd_json_input_is_u64_named(n->class_type, name);
    sd_value *v = NULL;
    if (u64 && lua_type(L, idx) == LUA_TSTRING) {
        uint64_t u;
        if (sd_json_parse_u64(lua_tostring(L, idx), &u) == 0) v = sd_value_int((int64_t)u);
    } else if (u64 && lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx)) {
        double d = lua_tonumber(L, idx);
        if (isfinite(d) && d == floor(d) && fabs(d) >= 9223372036854775808.0) {
            snprintf(msg, cap, "input '%s': %.0f does not fit Lua's 64-bit integers and was rounded; "
                     "write it in hex (0x...) or as a string of digits", name, d);
            return -1;
        }
    }
    if (!v) v = literal_from_lua(L, idx, 0, msg, cap);
    if (!v) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "input '%s': %s", name, msg);
        snprintf(msg, cap, "%s", tmp);
        return -1;
    }
    if (sd_graph_set_literal(n, name, v, &err)) goto fail;
    return 0;
fail:
    snprintf(msg, cap, "input '%s': %s", name, err.msg);
    return -1;
}

void sd_lua_set_input(lua_State *L, sd_graph_node *n, const char *name, int idx) {
    char msg[768];
    if (input_from_lua(L, n, name, idx, msg, sizeof msg)) luaL_error(L, "node %s (%s): %s", n->id, n->class_type, msg);
}

/* ---- constructors --------------------------------------------------------------------- */

typedef struct named_input {
    const char *name;
    int rank;
} named_input;

static int cmp_named(const void *a, const void *b) {
    const named_input *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The declared default of a required literal input (def / def_str: for an
 * input ComfyUI declares without one, what its editor fills in, core/node.h),
 * as a new value, or NULL when there is none: a combo read from the folders
 * (ckpt_name), a STRING declared without one. */
static sd_value *declared_default(const sd_input_def *d) {
    if (d->optional || !sd_type_is_literal(d->type)) return NULL;
    const char *t = d->type;
    if (!strcmp(t, SD_T_INT)) return sd_value_int((int64_t)llround(d->def));
    if (!strcmp(t, SD_T_FLOAT)) return number_value(d->def); /* as the same number in JSON */
    if (!strcmp(t, SD_T_BOOLEAN)) return sd_value_bool(d->def != 0);
    if ((!strcmp(t, SD_T_STRING) || !strcmp(t, SD_T_COMBO)) && d->def_str) return sd_value_string(d->def_str);
    return NULL;
}

/* A constructor fills each required literal input the table leaves out with
 * its declared default, as a Lua function's default arguments would (and as
 * ComfyUI's editor gives a new node's widgets their defaults): the graph it
 * makes is a complete prompt, which validation requires (ComfyUI refuses a
 * prompt without one, required_input_missing). An input without a declared
 * default stays absent and validation names it at the constructor's line. */
static sd_status fill_defaults(const sd_node_def *def, sd_graph_node *n, sd_error *err) {
    for (int i = 0; def && def->inputs && def->inputs[i].name; i++) {
        const sd_input_def *d = &def->inputs[i];
        if (sd_graph_node_input(n, d->name)) continue;
        sd_value *v = declared_default(d);
        if (!v) continue;
        sd_status rc = sd_graph_set_literal(n, d->name, v, err);
        if (rc) return rc;
    }
    return SD_OK;
}

/* Creates a node of class `ct` from the input table at tidx (may be none) and
 * pushes its handle. Inputs are set in schema order (unknown names after, by
 * name) so the graph does not depend on Lua's table order. */
static int construct(lua_State *L, const char *ct, int tidx) {
    sd_graph *g = graph_of(L);
    int has_table = !lua_isnoneornil(L, tidx);
    if (has_table) luaL_checktype(L, tidx, LUA_TTABLE);
    const sd_node_def *def = sd_registry_find(ct);

    size_t count = 0;
    if (has_table) {
        lua_pushnil(L);
        while (lua_next(L, tidx)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                return luaL_error(L, "%s: inputs are given by name (name = value), not by position", ct);
            size_t klen;
            const char *key = lua_tolstring(L, -2, &klen);
            char msg[256];
            if (check_text(key, klen, "an input name", msg, sizeof msg)) return luaL_error(L, "%s: %s", ct, msg);
            count++;
            lua_pop(L, 1);
        }
    }
    named_input *names = lua_newuserdatauv(L, (count ? count : 1) * sizeof *names, 0); /* GC-owned */
    size_t k = 0;
    const char *want_id = NULL, *title = NULL;
    if (has_table) {
        lua_pushnil(L);
        while (lua_next(L, tidx)) {
            const char *key = lua_tostring(L, -2);
            if (!strcmp(key, "_id")) {
                if (!lua_isinteger(L, -1) && lua_type(L, -1) != LUA_TSTRING)
                    return luaL_error(L, "%s: _id must be a string or an integer", ct);
            } else if (!strcmp(key, "_title")) {
                if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "%s: _title must be a string", ct);
                title = check_graph_string(L, -1, "_title"); /* kept alive by the table */
            } else {
                int r = def ? sd_node_input_index(def, key) : -1;
                names[k].name = key;
                names[k].rank = r < 0 ? 1 << 20 : r;
                k++;
            }
            lua_pop(L, 1);
        }
        lua_getfield(L, tidx, "_id"); /* stays on the stack while want_id is used */
        if (lua_isinteger(L, -1)) {
            lua_Integer v = lua_tointeger(L, -1);
            lua_pop(L, 1);
            lua_pushfstring(L, "%I", v);
        }
        want_id = check_graph_string(L, -1, "_id");
    }
    qsort(names, k, sizeof *names, cmp_named);

    char *auto_id = want_id ? NULL : sd_graph_new_id(g);
    if (!want_id && !auto_id) return luaL_error(L, "out of memory");
    sd_error err;
    sd_error_clear(&err);
    sd_graph_node *n = NULL;
    sd_status rc = sd_graph_add_node(g, want_id ? want_id : auto_id, ct, &n, &err);
    free(auto_id);
    if (rc) return luaL_error(L, "%s: %s", ct, err.msg);
    char where[512];
    sd_graph_node_set_origin(n, sd_lua_where(L, where, sizeof where)[0] ? where : NULL);
    if (title) sd_graph_node_set_title(n, title);
    char msg[768];
    for (size_t i = 0; i < k; i++) {
        lua_getfield(L, tidx, names[i].name);
        int bad = input_from_lua(L, n, names[i].name, -1, msg, sizeof msg);
        lua_pop(L, 1);
        if (bad) {
            const char *id = lua_pushstring(L, n->id); /* outlives the node */
            sd_graph_remove_node(g, id, NULL); /* a half-made node must not stay */
            return luaL_error(L, "node %s (%s): %s", id, ct, msg);
        }
    }
    if (fill_defaults(def, n, &err)) {
        const char *id = lua_pushstring(L, n->id);
        sd_graph_remove_node(g, id, NULL);
        return luaL_error(L, "node %s (%s): %s", id, ct, err.msg);
    }
    sd_lua_push_node(L, n->id);
    return 1;
}

static int l_construct(lua_State *L) {
    return construct(L, lua_tostring(L, lua_upvalueindex(1)), 1);
}

/* Node(class_type, inputs): any class, also one the registry does not know
 * (validation then reports it at this line). */
static int l_node_generic(lua_State *L) {
    luaL_checkstring(L, 1);
    const char *ct = check_graph_string(L, 1, "the class_type");
    return construct(L, ct, 2);
}

/* link(id, index): an output by node id and 0-based index, as in JSON; the
 * node may be defined later (exported cycles use this). */
static int l_link(lua_State *L) {
    const char *id = sd_lua_check_node_id(L, 1);
    lua_Integer index = luaL_optinteger(L, 2, 0);
    if (index < 0 || index > 1000000) return luaL_error(L, "link: bad output index %d", (int)index);
    push_output(L, id, (int)index);
    return 1;
}

/* node(id): handle of an existing node. */
static int l_node(lua_State *L) {
    sd_graph_node *n = sd_lua_check_node(L, 1);
    sd_lua_push_node(L, n->id);
    return 1;
}

/* ---- node handle metamethods --------------------------------------------------------- */

static void push_literal(lua_State *L, const sd_value *v, int depth) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_INT: lua_pushinteger(L, (lua_Integer)sd_value_as_int(v)); break;
    case SD_VAL_FLOAT: lua_pushnumber(L, sd_value_as_float(v)); break;
    case SD_VAL_BOOL: lua_pushboolean(L, sd_value_as_bool(v)); break;
    case SD_VAL_STRING: lua_pushstring(L, sd_value_as_string(v)); break;
    case SD_VAL_LIST:
        lua_createtable(L, (int)sd_value_list_len(v), 0);
        for (size_t i = 0; depth < MAX_DEPTH && i < sd_value_list_len(v); i++) {
            push_literal(L, sd_value_list_get(v, i), depth + 1);
            lua_seti(L, -2, (lua_Integer)i + 1);
        }
        break;
    default: lua_pushnil(L); break;
    }
}

static int node_index(lua_State *L) {
    sd_graph_node *n = sd_lua_check_node(L, 1);
    const sd_node_def *def = sd_registry_find(n->class_type);
    int nout = def ? sd_node_output_count(def) : -1;
    if (lua_isinteger(L, 2)) {
        lua_Integer k = lua_tointeger(L, 2);
        if (k < 1 || (nout >= 0 && k > nout))
            return luaL_error(L, "node %s (%s) has no output [%d] (it has %d; Lua indices start at 1)", n->id,
                              n->class_type, (int)k, nout);
        push_output(L, n->id, (int)k - 1);
        return 1;
    }
    const char *key = luaL_checkstring(L, 2);
    if (!strcmp(key, "id")) { lua_pushstring(L, n->id); return 1; }
    if (!strcmp(key, "class_type")) { lua_pushstring(L, n->class_type); return 1; }
    if (!strcmp(key, "title")) { if (n->title) lua_pushstring(L, n->title); else lua_pushnil(L); return 1; }
    int oi = def ? sd_node_output_index(def, key) : -1;
    if (oi >= 0) { push_output(L, n->id, oi); return 1; }
    const sd_graph_input *in = sd_graph_node_input(n, key);
    if (in) {
        if (in->is_link) push_output(L, in->src_id, in->src_index);
        else push_literal(L, in->literal, 0);
        return 1;
    }
    if (def && sd_node_input_index(def, key) >= 0) { lua_pushnil(L); return 1; } /* an unset input */
    sd_sbuf b = {0};
    for (int i = 0; def && def->outputs[i].name; i++) sd_sbuf_printf(&b, "%s%s", i ? ", " : "", def->outputs[i].name);
    luaL_where(L, 1);
    lua_pushfstring(L, "node %s (%s) has no output or input '%s' (outputs: %s)", n->id, n->class_type, key,
                    b.s ? b.s : "none known");
    free(b.s);
    lua_concat(L, 2);
    return lua_error(L);
}

static int node_newindex(lua_State *L) {
    sd_graph_node *n = sd_lua_check_node(L, 1);
    luaL_checkstring(L, 2);
    const char *key = check_graph_string(L, 2, "an input name");
    if (!strcmp(key, "_title")) {
        if (!lua_isnil(L, 3)) luaL_checkstring(L, 3);
        sd_graph_node_set_title(n, lua_isnil(L, 3) ? NULL : check_graph_string(L, 3, "_title"));
        return 0;
    }
    sd_lua_set_input(L, n, key, 3);
    return 0;
}

static int node_tostring(lua_State *L) {
    const char *id = handle_id(L, 1);
    sd_graph_node *n = sd_lua_vm_of(L)->graph ? sd_graph_find(sd_lua_vm_of(L)->graph, id) : NULL;
    lua_pushfstring(L, "#%s %s", id, n ? n->class_type : "(removed)");
    return 1;
}

static int handle_eq(lua_State *L) {
    const char *a = handle_id(L, 1), *b = handle_id(L, 2);
    int same = a && b && !strcmp(a, b);
    if (same && luaL_testudata(L, 1, OUTPUT_MT))
        same = luaL_testudata(L, 2, OUTPUT_MT) && *(int *)lua_touserdata(L, 1) == *(int *)lua_touserdata(L, 2);
    lua_pushboolean(L, same);
    return 1;
}

/* ---- output handle metamethods ------------------------------------------------------- */

static const char *output_name(lua_State *L, const char *id, int index) {
    sd_graph *g = sd_lua_vm_of(L)->graph;
    const sd_graph_node *n = g ? sd_graph_find(g, id) : NULL;
    const sd_node_def *def = n ? sd_registry_find(n->class_type) : NULL;
    if (def && index < sd_node_output_count(def)) return def->outputs[index].name;
    return NULL;
}

static int output_index(lua_State *L) {
    luaL_checkudata(L, 1, OUTPUT_MT);
    const char *id = handle_id(L, 1);
    int index = *(int *)lua_touserdata(L, 1);
    const char *key = luaL_checkstring(L, 2);
    if (!strcmp(key, "node")) sd_lua_push_node(L, id);
    else if (!strcmp(key, "index")) lua_pushinteger(L, index);
    else if (!strcmp(key, "name")) {
        const char *name = output_name(L, id, index);
        if (name) lua_pushstring(L, name); else lua_pushnil(L);
    } else return luaL_error(L, "an output has no field '%s' (node, index, name)", key);
    return 1;
}

static int output_tostring(lua_State *L) {
    const char *id = handle_id(L, 1);
    int index = *(int *)lua_touserdata(L, 1);
    const char *name = output_name(L, id, index);
    if (name) lua_pushfstring(L, "#%s.%s", id, name);
    else lua_pushfstring(L, "#%s[%d]", id, index + 1);
    return 1;
}

void sd_lua_bind_open(lua_State *L) {
    luaL_newmetatable(L, NODE_MT);
    static const luaL_Reg node_mt[] = {{"__index", node_index}, {"__newindex", node_newindex},
                                       {"__tostring", node_tostring}, {"__eq", handle_eq}, {NULL, NULL}};
    luaL_setfuncs(L, node_mt, 0);
    lua_pop(L, 1);
    luaL_newmetatable(L, OUTPUT_MT);
    static const luaL_Reg out_mt[] = {{"__index", output_index}, {"__tostring", output_tostring},
                                      {"__eq", handle_eq}, {NULL, NULL}};
    luaL_setfuncs(L, out_mt, 0);
    lua_pop(L, 1);

    lua_register(L, "Node", l_node_generic);
    lua_register(L, "link", l_link);
    lua_register(L, "node", l_node);
    size_t n = sd_registry_count(), na = sd_registry_alias_count();
    for (size_t i = 0; i < n + na; i++) {
        const char *name;
        if (i < n) {
            name = sd_registry_at(i)->class_type;
        } else {
            const char *target;
            sd_registry_alias_at(i - n, &name, &target);
        }
        if (!sd_lua_is_name(name)) continue; /* reachable through Node("...") */
        if (lua_getglobal(L, name) != LUA_TNIL) { lua_pop(L, 1); continue; } /* never shadow Lua's own */
        lua_pop(L, 1);
        lua_pushstring(L, name);
        lua_pushcclosure(L, l_construct, 1);
        lua_setglobal(L, name);
    }
}
