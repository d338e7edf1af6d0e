/* repl.h - the interactive graph REPL (`sdflow repl`).
 *
 * A Lua prompt on one graph that lives for the whole session, next to one
 * executor whose in-process memo keeps loaded models and results, so a rerun
 * after changing one input only executes what is downstream of it. The
 * commands are Lua functions (help() lists them): nodes, help, show, add,
 * remove, set, connect, disconnect, node, run, undo, save, load, clear, quit;
 * every node type is also a constructor (KSampler{...}) as in workflow files
 * (sdlua.h). Every input line is one undo step.
 *
 * Errors (Lua errors, validation problems, node failures) are printed and
 * never end the session nor change the graph behind the user's back.
 */
#ifndef SD_REPL_H
#define SD_REPL_H

#include <signal.h>
#include <stdio.h>
#include "core/executor.h"
#include "core/node.h"
#include "sdlua.h"

typedef struct sd_repl_config {
    const sd_env *env;                 /* for running nodes; not owned */
    const sd_cache_i *cache;           /* persistent cache, or NULL */
    volatile sig_atomic_t *interrupt;  /* set by the front end on Ctrl-C, or NULL */
    const char *workflow;              /* loaded at start (.json/.lua/.png), or NULL */
    sd_lua_opts lua;                   /* sandbox settings */
    const char *history;               /* history file (line editing only), or NULL */
    FILE *in, *out;                    /* NULL = stdin / stdout */
    /* Progress of run(): the executor's events (core/executor.h), or NULL. */
    sd_exec_event_fn on_event;
    void *on_event_user;
    int previews;                      /* sd_exec_opts.previews */
} sd_repl_config;

/* Run the session until quit() or end of input. Returns the process exit
 * code: 0, or 1 when the session could not start (bad workflow, no memory). */
int sd_repl_main(const sd_repl_config *cfg);

#endif
