/* lua_internal.h - what the files of lua/ share: the Lua VM wrapper, the
 * generic node binding and a small string builder. Not a public contract. */
#ifndef SD_LUA_INTERNAL_H
#define SD_LUA_INTERNAL_H

#include <lauxlib.h>
#include <lua.h>
#include <stdarg.h>
#include "core/graph.h"
#include "core/node.h"
#include "sdlua.h"

/* ---- string builder ---------------------------------------------------------- */

/* Grows as needed; on allocation failure `oom` is set and further appends
 * are ignored, so callers check once at the end. */
typedef struct sd_sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sd_sbuf;

void sd_sbuf_add(sd_sbuf *b, const char *s);
void sd_sbuf_addn(sd_sbuf *b, const char *s, size_t n);
void sd_sbuf_printf(sd_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Lua string literal of s ("..." with escapes). */
void sd_sbuf_lua_string(sd_sbuf *b, const char *s);
/* A literal value in Lua syntax (integers, floats that read back as floats,
 * booleans, strings, lists as {...}). */
void sd_sbuf_lua_value(sd_sbuf *b, const sd_value *v);
/* The literal of input value v; u64: an unsigned 64-bit INT input (seeds,
 * core/json_util.h), printed as the hex literal Lua reads back exactly. */
void sd_sbuf_lua_input_value(sd_sbuf *b, const sd_value *v, int u64);
/* Returns the text (caller frees) or NULL after an allocation failure. */
char *sd_sbuf_take(sd_sbuf *b);

/* 1 when s is a Lua name (identifier, not a keyword). */
int sd_lua_is_name(const char *s);

/* ---- the VM ---------------------------------------------------------------------- */

typedef struct sd_lua_vm {
    lua_State *L;
    size_t used, limit;  /* heap bytes in use / allowed (our allocator) */
    /* run budget (sd_lua_vm_budget): */
    unsigned long long max_instructions, executed;
    double deadline;     /* CLOCK_MONOTONIC seconds, 0 = none */
    double max_seconds;
    volatile sig_atomic_t *interrupt;
    const char *chunkname; /* names the script in budget errors; not owned */
    int stop;            /* why the budget stopped the script (VM_STOP_*), sticky */
    sd_graph *graph;     /* where node constructors add nodes; not owned */
    void *user;          /* front end data (the REPL) */
} sd_lua_vm;

/* New state with the standard library picked by opts (see sdlua.h) and the
 * node binding installed. The graph starts as NULL: set vm->graph before
 * running code that builds nodes. */
sd_status sd_lua_vm_new(const sd_lua_opts *opts, sd_lua_vm **out, sd_error *err);
void sd_lua_vm_free(sd_lua_vm *vm);
sd_lua_vm *sd_lua_vm_of(lua_State *L);

enum { VM_STOP_NONE = 0, VM_STOP_INTERRUPT, VM_STOP_INSTRUCTIONS, VM_STOP_TIME };

/* Arms the run budget of opts (sd_lua_opts) for the code run from now on;
 * chunkname names the script in the error. A stopped script's error is
 * raised again at every instruction, so a pcall inside the script cannot
 * swallow it. */
void sd_lua_vm_budget(sd_lua_vm *vm, const sd_lua_opts *opts, const char *chunkname);

/* Run a chunk already compiled at the top of the stack with a traceback-free
 * message handler; on error fills err (SD_ERR_INVALID, or SD_ERR_NOMEM) with
 * the Lua message and pops it. nres results are left on the stack on success. */
sd_status sd_lua_vm_pcall(sd_lua_vm *vm, int nargs, int nres, sd_error *err);

/* ---- the node binding (bind.c) ----------------------------------------------- */

/* Install one constructor global per registered class_type and alias, plus
 * Node(class, inputs), link(id, index) and node(id). */
void sd_lua_bind_open(lua_State *L);
/* Push a handle to node `id` of the current graph. */
void sd_lua_push_node(lua_State *L, const char *id);
/* Node id named by the value at idx: a node handle, an output (its node), a
 * string or an integer id. Raises a Lua error otherwise. */
const char *sd_lua_check_node_id(lua_State *L, int idx);
/* Node at idx in the current graph, raising "node X does not exist". */
sd_graph_node *sd_lua_check_node(lua_State *L, int idx);
/* Set input `name` of n from the Lua value at idx (literal, list, node or
 * output handle -> link; nil -> unset). Raises a Lua error on a bad value. */
void sd_lua_set_input(lua_State *L, sd_graph_node *n, const char *name, int idx);
/* "file:line" of the innermost Lua function on the call stack, into buf. */
const char *sd_lua_where(lua_State *L, char *buf, size_t n);

#endif
