/* sdlua.h - Lua 5.4 workflows: build a graph from a Lua file, and print a
 * graph as an equivalent Lua file.
 *
 * A workflow file calls node types as functions, one global per registered
 * class_type (and alias), generated from the registry schema:
 *
 *   local ckpt = CheckpointLoaderSimple{ckpt_name = "v1-5.safetensors"}
 *   local pos  = CLIPTextEncode{clip = ckpt.CLIP, text = "a fox"}
 *
 * Inputs go by name; a node's outputs are reached by name (ckpt.MODEL) or by
 * 1-based Lua index (ckpt[1]); a node with a single output can be passed as
 * the link itself. `_id` and `_title` keys set the node id (default: the
 * smallest unused integer) and _meta.title. Every node remembers the file
 * and line that created it (sd_graph_node.origin) so validation errors can
 * point there. docs/lua.md is the user-facing description.
 *
 * Sandbox: unless allow_unsafe is set the state has only base (without
 * dofile/loadfile/load), string, table, math, utf8, coroutine and a harmless
 * os subset (clock, time, date, difftime); no io, no os.execute, no require.
 * The Lua heap is allocated through our own allocator with a size limit.
 */
#ifndef SD_SDLUA_H
#define SD_SDLUA_H

#include <signal.h>
#include <stddef.h>
#include "core/error.h"
#include "core/graph.h"

/* Run budget of a workflow script (sd_lua_load_graph and friends; the REPL's
 * own input lines are stopped by Ctrl-C instead): a script that runs past
 * max_instructions Lua VM instructions or max_seconds of wall time fails with
 * an error naming the script and the line it was at, and so does one whose
 * *interrupt flag gets set (Ctrl-C), as SD_ERR_CANCELLED. The checks run
 * every few thousand instructions, so the cost is negligible. */
#define SD_LUA_DEFAULT_MAX_INSTRUCTIONS 1000000000ULL /* about 10 s of plain Lua */

typedef struct sd_lua_opts {
    int allow_unsafe;   /* open the full standard library (io, os, package, debug) */
    size_t mem_limit;   /* bytes the Lua heap may use; 0 = 1 GiB */
    unsigned long long max_instructions; /* 0 = SD_LUA_DEFAULT_MAX_INSTRUCTIONS; ULLONG_MAX = no limit */
    double max_seconds; /* wall time; 0 = no limit */
    volatile sig_atomic_t *interrupt; /* set on Ctrl-C (NULL = none): the script stops */
} sd_lua_opts;

/* Run the Lua workflow file `path` and return the graph it built (*out, owned
 * by the caller). opts may be NULL (sandboxed defaults). A Lua error (syntax,
 * runtime, bad input value) is SD_ERR_INVALID with the Lua message, which
 * starts with "path:line:". A missing file is SD_ERR_NOT_FOUND. The graph is
 * not validated here. */
sd_status sd_lua_load_graph(const char *path, const sd_lua_opts *opts, sd_graph **out,
                            sd_error *err);
/* The same for Lua source held in memory; `chunkname` names it in errors and
 * node origins ("wf.lua"). */
sd_status sd_lua_load_graph_string(const char *text, const char *chunkname,
                                   const sd_lua_opts *opts, sd_graph **out, sd_error *err);

/* Load a workflow whatever its form, chosen by content/extension: .lua (as
 * above), a PNG (its "prompt" text chunk), or API-format JSON (a recipe or a
 * {"prompt": ...} body is accepted too). */
sd_status sd_lua_load_any(const char *path, const sd_lua_opts *opts, sd_graph **out,
                          sd_error *err);

/* Print `g` as a Lua workflow (malloc'd text, caller frees; NULL when out of
 * memory). Nodes come in dependency order, each with its _id (and _title),
 * so that loading the text gives back the same graph: same ids, class types,
 * titles, literal values and links. `source` (may be NULL) is named in the
 * header comment. */
char *sd_lua_export(const sd_graph *g, const char *source);

/* Read a whole file into a NUL-terminated malloc'd buffer (*len may be NULL).
 * SD_ERR_NOT_FOUND / SD_ERR_IO name the path. */
sd_status sd_lua_read_file(const char *path, char **out, size_t *len, sd_error *err);

#endif
