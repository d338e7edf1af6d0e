/* job.h - a prompt as the server accepts it and as a worker runs it: the
 * part of `sdflow serve` that knows nothing of HTTP, shared by the
 * in-process queue (queue.c), the Redis queue (rqueue.c) and `sdflow worker`
 * (worker/).
 *
 * Admission (srv_job_admit) is ComfyUI's /prompt: parse, validate, and when
 * some outputs are broken keep the valid ones. Running (srv_job_run) drives
 * one sd_exec over the job's graph and turns the executor's callbacks into
 * ComfyUI's WebSocket messages, handed to a sink (the in-process WebSocket
 * hub, or a Redis channel), and into the history entry.
 */
#ifndef SD_SERVER_JOB_H
#define SD_SERVER_JOB_H

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include "core/executor.h"
#include "core/graph.h"
#include "core/node.h"

struct sd_tensor;

typedef struct srv_job {
    char id[64];          /* prompt_id */
    double number;        /* queue order: lower first, ties by arrival */
    uint64_t seq;         /* arrival */
    cJSON *prompt;        /* the API graph as sent */
    cJSON *extra_data;    /* as sent, with client_id added */
    cJSON *outputs;       /* ids of the output nodes (outputs_to_execute) */
    char *client_id;      /* NULL: execution messages go to nobody (ComfyUI) */
    sd_graph *graph;      /* what runs: the prompt less the nodes no valid output needs */
} srv_job;

void srv_job_free(srv_job *j);

/* [number, prompt_id, prompt, extra_data, outputs_to_execute] (/queue, history) */
cJSON *srv_job_entry(const srv_job *j);

/* ComfyUI's POST /prompt on a parsed body. Returns the HTTP status and
 * *reply (the body to send: {error, node_errors} on refusal; on 200 only
 * {node_errors} of the outputs left out, which the caller completes with
 * prompt_id and number). On 200 *out is the job, with id (the body's
 * prompt_id or a new UUID), client_id, extra_data, outputs and graph set;
 * number is left to the queue. `note` receives a line for the log ("" when
 * nothing to say). Takes nothing from body. */
int srv_job_admit(const sd_env *env, const cJSON *body, srv_job **out, cJSON **reply, char *note, size_t note_n);

/* The job again from its stored parts (a worker's copy of a queued prompt):
 * the graph is parsed from `prompt` and cut to the ancestors of `outputs`.
 * Takes ownership of prompt, extra_data and outputs (also on failure). */
sd_status srv_job_restore(const char *id, double number, cJSON *prompt, cJSON *extra_data, cJSON *outputs,
                          srv_job **out, sd_error *err);

/* Where the messages of a running prompt go. send takes ownership of data;
 * sid NULL = every client. */
typedef struct srv_sink {
    void (*send)(void *user, const char *sid, const char *event, cJSON *data);
    void (*send_binary)(void *user, const char *sid, uint32_t event, const void *payload, size_t n);
    void (*log)(void *user, const char *line);
    void *user;
} srv_sink;

typedef sd_status (*srv_preview_fn)(void *user, const struct sd_tensor *latent, const char *latent_format, FILE *f,
                                    sd_error *err);

typedef struct srv_run_opts {
    sd_env *env;
    const sd_cache_i *cache;
    volatile sig_atomic_t *interrupt;
    srv_preview_fn preview;   /* NULL = no previews */
    void *preview_user;
    double preview_interval;  /* least seconds between two frames of a node */
    srv_sink sink;
    /* Where the outputs must go before the prompt may end (the worker: its
     * files into Redis, for a /view on another machine); NULL = nowhere.
     * Called once the run is over with the entry's outputs; when it fails
     * a successful run ends as an error with its message instead (so
     * `success` means every output can be fetched) and the entry lists no
     * outputs. */
    sd_status (*publish)(void *user, const srv_job *j, const cJSON *outputs, sd_error *err);
    void *publish_user;
} srv_run_opts;

/* Runs the job to its end (success, error or interruption), sending
 * ComfyUI's messages to the sink, and returns its history entry
 * {prompt, outputs, status, meta} (NULL only without memory). *rc_out
 * (may be NULL) gets the executor's status. */
cJSON *srv_job_run(sd_exec *ex, srv_job *j, const srv_run_opts *o, sd_status *rc_out);

/* "executing" with node null to the prompt's client: ComfyUI's prompt worker
 * sends it once the history entry is stored (main.py, after task_done), so
 * a client that waits for it finds the prompt in /history. Callers send it
 * after recording the entry srv_job_run returned. */
void srv_job_send_finished(const srv_sink *sink, const srv_job *j);

/* History entries for a job that does not run: failed (a worker gave up
 * on it: one execution_error carrying `message`) or interrupted (cancelled
 * before it could run again: one execution_interrupted). *data_out (may be
 * NULL) receives a copy of that message's data, for the prompt's client. */
cJSON *srv_job_failed_entry(const srv_job *j, const char *message, cJSON **data_out);
cJSON *srv_job_interrupted_entry(const srv_job *j, cJSON **data_out);

/* While the process's resident memory is over `budget`, the least recently
 * used memo entries go (a model part is freed with its last holder).
 * Returns how many were released. */
size_t srv_job_keep_budget(sd_exec *ex, size_t budget);

/* Resident memory of this process in bytes (0 when unknown). */
long long srv_rss_bytes(void);

/* {"exec_info": {"queue_remaining": n}} */
cJSON *srv_queue_info_json(size_t remaining);

/* ComfyUI's binary WebSocket frame: 4-byte big-endian event type, then the
 * payload. malloc'd, *len = n + 4; NULL without memory. */
char *srv_binary_frame(uint32_t event, const void *payload, size_t n, size_t *len);

/* The folder of a ComfyUI folder type in env: "output" (also NULL),
 * "input", "temp"; NULL for anything else. */
const char *srv_folder_of_type(const sd_env *env, const char *type);

/* Replaces the folders of env found in msg (as given and as real paths)
 * by "<models>", "<input>", "<output>", ...: messages a client reads name no
 * folder of the server's machine. */
void srv_scrub_paths(const sd_env *env, char *msg, size_t cap);

/* A whole regular file, malloc'd (*n its size); NULL with errno set when it
 * cannot be read or is not a regular file (a FIFO is never opened blocking). */
char *srv_read_file(const char *path, size_t *n);

double srv_now(void);            /* monotonic seconds */
long long srv_time_ms(void);     /* wall clock, ms since the epoch */
void srv_uuid4(char out[37]);

#endif
