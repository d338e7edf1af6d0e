/* executor.h - runs the part of a graph that output nodes need.
 *
 * Keys: before anything runs, every needed node output gets a 32-byte key,
 * Merkle-style: SHA-256 over class_type, node version, precision, literal
 * inputs (sorted by name; files named by file-folder inputs hashed by
 * content), and the keys of the outputs it links to. Node ids never enter a
 * key (except for SD_NODE_NOT_IDEMPOTENT nodes), so renumbered or duplicated
 * branches share entries.
 *
 * Order of work: walking back from the output nodes, a node whose every
 * consumer is satisfied from a cache is not even visited, so a loader above
 * cached results is never run.
 *
 * Output files: a cached result of an output node (SaveImage) counts as a
 * hit only while the files it records are still this run's: in this run's
 * output (or temp) folder, regular files, with the SHA-256 they were written
 * with (sd_exec_ui_files_ok in executor_internal.h). Otherwise the node
 * "delivers": it runs again on its inputs, which come from the caches, and
 * writes new files under the next free names; its record says CACHED (or
 * MEMO) with `delivered` set, and it counts as cached, not executed, unless
 * one of its inputs had to be executed in this run (then it is EXECUTED).
 *
 * Two caches: an in-process memo (all values, handles included; lives as long
 * as the sd_exec, so a REPL keeps loaded models) and an optional persistent
 * cache for data values reached through sd_cache_i (SQLite, cache/).
 *
 * Lists (ComfyUI's OUTPUT_IS_LIST / INPUT_IS_LIST, execution.py
 * _map_node_over_list): an output is a list when its def says is_list (the
 * node returns an SD_VAL_LIST of items) or when its node ran once per item.
 * A node reading a list runs once per item: N times for the longest list
 * among its inputs, input k getting item i (or the last item of a shorter
 * list; a plain value every time), and each of its outputs becomes the list
 * of the N results (an is_list output: their items concatenated). An empty
 * list runs it no time at all and its outputs are empty lists. An output
 * node's "ui" results are merged, list by list. A node with
 * SD_NODE_INPUT_IS_LIST instead runs once with each input as an SD_VAL_LIST
 * (a plain value or a literal as a list of one). Which outputs are lists is
 * part of the node's result (cached with it).
 */
#ifndef SD_EXECUTOR_H
#define SD_EXECUTOR_H

#include <signal.h>
#include <stdint.h>
#include "graph.h"
#include "node.h"
#include "tensor.h"

#define SD_KEY_SIZE 32

/* Persistent output cache interface (implemented by cache/). get returns
 * SD_OK and *out (one new reference) on a hit, SD_ERR_NOT_FOUND on a miss;
 * any other code is treated as a miss after a warning. */
typedef struct sd_cache_i {
    void *self;
    sd_status (*get)(void *self, const uint8_t key[SD_KEY_SIZE], sd_value **out,
                     sd_error *err);
    sd_status (*put)(void *self, const uint8_t key[SD_KEY_SIZE],
                     const char *class_type, const sd_value *v, sd_error *err);
    /* Optional (may be NULL): memo of file content hashes keyed by
     * (absolute path, size, mtime in ns), so that multi-GB model files are
     * hashed once, not on every run. lookup returns SD_OK with out filled on
     * a hit, SD_ERR_NOT_FOUND on a miss. */
    sd_status (*file_hash_get)(void *self, const char *path, int64_t size,
                               int64_t mtime_ns, uint8_t out[SD_KEY_SIZE]);
    void (*file_hash_put)(void *self, const char *path, int64_t size,
                          int64_t mtime_ns, const uint8_t hash[SD_KEY_SIZE]);
} sd_cache_i;

typedef enum sd_node_status {
    SD_NODE_EXECUTED = 0,
    SD_NODE_CACHED,      /* from the persistent cache */
    SD_NODE_MEMO,        /* from the in-process memo (REPL reruns) */
    SD_NODE_FAILED,
    SD_NODE_SKIPPED      /* needed but not reached (an earlier node failed) */
} sd_node_status;

typedef struct sd_exec_record {
    char *node_id;
    char *class_type;
    sd_node_status status;
    sd_node_status planned; /* decided before anything ran: SD_NODE_EXECUTED (to
                               run), SD_NODE_CACHED or SD_NODE_MEMO (a hit) */
    double seconds;
    size_t n_outputs;
    char **output_desc;  /* "LATENT samples=[1, 4, 64, 64] F32" per output */
    uint8_t key[SD_KEY_SIZE];
    sd_value *ui;        /* the node's "ui" result (output nodes), one reference
                            owned by the report; NULL when none */
    int delivered;       /* status CACHED/MEMO, but the output node wrote its
                            files again (see "Output files" above) */
    char **warnings;     /* what the node logged as warnings while it ran
                            (a LoRA's left-out patches, ...), owned */
    size_t n_warnings;
} sd_exec_record;

typedef struct sd_exec_report {
    sd_exec_record *items;  /* in execution order */
    size_t n;
    size_t n_executed, n_cached;
    double seconds;
} sd_exec_report;

/* ---- events: what a front end observes of a run --------------------------
 * One callback (sd_exec_opts.on_event) sees the whole run, in this order:
 *   RUN_START                                  once, after planning
 *   per node the run visits, in execution order, either
 *     NODE_CACHED                              result from a cache (record->status
 *                                              says SD_NODE_CACHED or SD_NODE_MEMO)
 *   or
 *     NODE_START, (NODE_STEP | NODE_PREVIEW)*, then NODE_DONE or NODE_ERROR
 *   RUN_DONE                                   once, always last, whatever happened
 *                                              (also after a validation failure,
 *                                              with no RUN_START before it)
 * Events come on the thread that called sd_exec_run(), synchronously: a slow
 * callback slows the run. Everything an event points to is valid only during
 * the call. The CLI (cli/progress.c), the REPL and a server consume the same
 * events; the older `progress` and `on_node` callbacks below still work. */
typedef enum sd_exec_event_kind {
    SD_EXEC_RUN_START = 0,
    SD_EXEC_NODE_START,   /* the node is about to execute */
    SD_EXEC_NODE_STEP,    /* progress inside the node: step of steps (1-based) */
    SD_EXEC_NODE_PREVIEW, /* a sampler's current denoised latent (only when
                             sd_exec_opts.previews is set) */
    SD_EXEC_NODE_DONE,    /* the node executed; seconds = its time. An output node
                             that only delivered a cached result's files again
                             (record->delivered) counts as cached in RUN_DONE */
    SD_EXEC_NODE_CACHED,  /* the node's result came from a cache */
    SD_EXEC_NODE_ERROR,   /* the node failed or was interrupted: status, error */
    SD_EXEC_RUN_DONE,     /* status, error (when not SD_OK), seconds = whole run */
    SD_EXEC_NODE_IMAGE    /* a finished picture the node hands out as it is
                             (sd_node_image): `latent` holds it, F32 [H, W, C]
                             in [0, 1]; step = its index, steps = the count.
                             Delivered whether or not previews are on */
} sd_exec_event_kind;

typedef struct sd_exec_event {
    sd_exec_event_kind kind;
    const char *node_id;       /* NODE_*: the node; NULL for RUN_* */
    const char *class_type;    /* NODE_* */
    size_t index;              /* NODE_*: 1-based position among the nodes this run visits */
    size_t count;              /* how many nodes this run visits (0 before planning) */
    int64_t step, steps;       /* NODE_STEP, NODE_PREVIEW */
    double seconds;            /* NODE_DONE/ERROR: the node's time; RUN_DONE: the run's;
                                  NODE_STEP/PREVIEW: since the node started */
    const sd_exec_record *record; /* NODE_*: its report record; NULL for RUN_* */
    /* NODE_PREVIEW: the sampler's denoised estimate in the model's latent space
     * (as the sampler sees it: scaled by the VAE's scale factor), F32
     * [N, C, h, w] in host memory, and the latent format it belongs to:
     * "sd1", "sdxl" or "flux" (ComfyUI's latent_formats), NULL when unknown. */
    const sd_tensor *latent;
    const char *latent_format;
    sd_status status;          /* NODE_ERROR, RUN_DONE */
    const sd_error *error;     /* NODE_ERROR; RUN_DONE when status != SD_OK (NULL after a
                                  validation failure: see the problems list) */
    size_t n_executed, n_cached; /* RUN_DONE */
    /* NODE_ERROR of a node that ran: its definition and the inputs it was
     * given, aligned with def->inputs (NULL where absent); inputs_are_lists[k]:
     * inputs[k] is an SD_VAL_LIST of the items of a list output. NULL when
     * the node failed before its inputs were gathered. */
    const sd_node_def *def;
    sd_value *const *inputs;
    const int *inputs_are_lists;
} sd_exec_event;

typedef void (*sd_exec_event_fn)(void *user, const sd_exec_event *ev);

typedef struct sd_exec_opts {
    const sd_env *env;
    const sd_cache_i *cache;           /* NULL = no persistent cache */
    volatile sig_atomic_t *interrupt;  /* NULL = not interruptible */
    sd_progress_fn progress;           /* per-node progress inside nodes */
    void *progress_user;
    /* Called before/after each node (CLI prints its line here). */
    void (*on_node)(void *user, const sd_exec_record *rec, int finished);
    void *on_node_user;
    /* Called once after planning, before the first node: every record is
     * there with `planned` set (servers announce the cache hits up front, as
     * ComfyUI's execution_cached does). May be NULL. */
    void (*on_plan)(void *user, const sd_exec_report *planned);
    void *on_plan_user;
    const char *dump_dir;              /* --dump DIR, or NULL */
    const char *prompt_json;           /* embedded by SaveImage; NULL = derive */
    const char *extra_pnginfo_json;
    /* One-shot runs (`sdflow run`): drop each node's output values, from the
     * run and from the in-process memo, as soon as every node of this run
     * that reads them has finished (a loaded model then goes before the next
     * model loads). Output nodes' results are kept; the report, --dump and
     * the persistent cache are served before anything is dropped. 0 (the
     * REPL, Lua): everything stays in the memo for reruns. */
    int release_consumed;
    /* Events (see above); NULL = none. */
    sd_exec_event_fn on_event;
    void *on_event_user;
    /* Non-zero: samplers hand their denoised latent to on_event as
     * NODE_PREVIEW after each step (costs a callback per step, no copy). */
    int previews;
} sd_exec_opts;

typedef struct sd_exec sd_exec;

sd_exec *sd_exec_new(void);
void sd_exec_free(sd_exec *ex);
/* Drop the in-process memo (loaded models go with it). */
void sd_exec_forget(sd_exec *ex);
/* Entries in the memo, and dropping the least recently stored or found one
 * (returns 0 when the memo is empty). A long-lived front end (the server)
 * calls this between runs to keep within a memory budget. */
size_t sd_exec_memo_count(const sd_exec *ex);
int sd_exec_drop_lru(sd_exec *ex);

/* Validate (sd_graph_validate) then run. On validation failure returns
 * SD_ERR_VALIDATION with problems filled and nothing executed. On a node
 * failure returns its code with err naming the node. `report` is always
 * filled with what happened (free with sd_exec_report_free); `problems` may be
 * NULL. */
sd_status sd_exec_run(sd_exec *ex, const sd_graph *g, const sd_exec_opts *opts,
                      sd_exec_report *report, sd_graph_problems *problems,
                      sd_error *err);

void sd_exec_report_free(sd_exec_report *r);
/* Report as JSON: {"nodes": {"<id>": {"class_type", "status", "seconds",
 * "outputs", "ui"?, "delivered"?}}, "executed": n, "cached": n, "seconds": s}.
 * Caller frees. */
char *sd_exec_report_json(const sd_exec_report *r);
/* One line saying what a value is, for messages: "[1, 512, 512, 3] F32" for
 * a tensor, "<MODEL>" for a handle, "samples=[1, 4, 64, 64] F32" for a dict,
 * numbers and short strings as they are. Caller frees; NULL when out of memory. */
char *sd_exec_describe_value(const sd_value *v);
const char *sd_node_status_name(sd_node_status s);

#endif
