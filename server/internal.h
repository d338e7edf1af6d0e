/* internal.h - the pieces of the server shared between its files (not a
 * public contract; server.h is).
 *
 * Threads: civetweb runs each request (and each WebSocket connection) on one
 * of its worker threads; the prompt worker (queue.c) and the WebSocket
 * sender (ws.c) are ours. `mu` guards the queue, the history and the flags;
 * `ws_mu` guards the WebSocket client list and each client's frame queue
 * (a close handler waits until the sender is no longer writing to its
 * connection); `log_mu` serializes log lines. Lock order: mu before ws_mu.
 * Nobody but the sender writes to a WebSocket, so a client that does not
 * read can delay other clients' frames but never the prompt worker.
 */
#ifndef SD_SERVER_INTERNAL_H
#define SD_SERVER_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include "core/graph.h"
#include "job.h"
#include "redis.h"
#include "server.h"

struct mg_connection;
struct mg_context;

typedef struct srv_hist {
    char id[64];
    cJSON *entry;         /* {prompt, outputs, status, meta} */
} srv_hist;

typedef struct srv_ws_frame {
    struct srv_ws_frame *next;
    int opcode;
    size_t n;
    char data[];
} srv_ws_frame;

typedef struct srv_ws {
    struct mg_connection *conn;
    char sid[64];
    double window_start;  /* flood control: messages counted per second */
    unsigned window_msgs;
    srv_ws_frame *head, *tail; /* frames waiting for the sender thread */
    size_t queued;        /* their bytes */
    int writing;          /* the sender is writing to conn right now */
    int dropped;          /* too slow or broken: nothing more is sent */
    int seen_first;       /* its first message was read (feature_flags) */
    int preview_metadata; /* it announced supports_preview_metadata: event 4 previews */
} srv_ws;

typedef struct srv {
    const sd_server_opts *o;
    sd_env *env;
    struct mg_context *mg;
    size_t max_body, max_upload, max_history, max_queue, max_ws, max_ws_queued;
    size_t memo_budget;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **pending;
    size_t n_pending;
    srv_job *running;
    uint64_t seq;
    double next_number;
    srv_hist *hist;        /* oldest first */
    size_t n_hist;
    int flag_unload, flag_free, quit;
    volatile sig_atomic_t interrupt; /* the running prompt's */
    pthread_t worker;
    int worker_started;

    pthread_mutex_t ws_mu;
    pthread_cond_t ws_cv;  /* frames queued, or a write finished */
    srv_ws **ws;
    size_t n_ws;
    pthread_t ws_sender;
    int ws_sender_started, ws_quit;

    pthread_mutex_t log_mu;
    FILE *log;

    /* guard.c: the live connections, by client address (guard_mu) */
    pthread_mutex_t guard_mu;
    int guard_ready;
    struct srv_conn *conns;
    size_t n_conns, cap_conns, max_client_conns;

    /* --redis (rqueue.c): prompts go to Redis; the subscriber thread
     * forwards the workers' messages. rq_mu guards rq_sub and rq_quit. */
    int rq;
    const char *rq_prefix; /* "sdflow" unless told */
    long rq_ttl;
    pthread_t rq_thread;
    int rq_started;
    pthread_mutex_t rq_mu;
    struct redisContext *rq_sub;
    int rq_quit;
    char rq_events[SRV_REDIS_KEY_MAX]; /* P:events */
    srv_redis_sub rq_subscription;

    /* userdata.c: the default user's folder; ud_mu serializes writes */
    char *user_root;
    pthread_mutex_t ud_mu;
    int ud_started;
} srv;

/* ---- http.c: replies and request bodies ---------------------------------- */
/* Sends `body` with status and content type; extra = more header lines
 * ("Name: value\r\n" each) or NULL. Returns the status (civetweb's handler
 * return value convention: non-zero = handled). */
int srv_reply(struct mg_connection *c, int status, const char *ctype, const void *body, size_t n,
              const char *extra);
/* JSON reply; takes ownership of j (NULL = out of memory: 500). */
int srv_reply_json(struct mg_connection *c, int status, cJSON *j);
/* {"error": {"type", "message", "details": "", "extra_info": {}}} */
int srv_reply_error(struct mg_connection *c, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The request body, NUL-terminated, at most `limit` bytes. Returns 0 and
 * *out (malloc'd) on success; otherwise it has replied already (413, 400)
 * and returns that status. */
int srv_read_body(srv *s, struct mg_connection *c, size_t limit, char **out, size_t *n);
/* The body parsed as a JSON object ({} when empty, if allow_empty). Replies
 * and returns the status on failure, 0 on success. */
int srv_read_json(srv *s, struct mg_connection *c, int allow_empty, cJSON **out);
/* A query-string variable, decoded; NULL when absent. Caller frees. */
char *srv_query(struct mg_connection *c, const char *name);
/* The bearer token rule (http.c): 1 when no token is set or the request
 * carries it (Authorization: Bearer, or ?token= for browsers' WebSockets). */
int srv_authorized(srv *s, struct mg_connection *c);
void srv_log(srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- guard.c: who may talk to the server (before any route) ---------------- */
/* Sets up the per-address connection counts (before mg_start); once the
 * server listens, srv_guard_listen(port) makes its accepted connections
 * count (-1: too many servers in this process, none counted). srv_guard_free
 * (after mg_stop) unregisters and releases; safe when never set up. */
void srv_guard_init(srv *s);
int srv_guard_listen(srv *s, int port);
void srv_guard_free(srv *s);
/* civetweb's begin_request: 0 = go on; else the refusal (400 for a NUL in
 * the query, 403 for a foreign Origin or Host without a token) or the
 * answer to a CORS preflight has been sent and its status is returned. */
int srv_guard_request(srv *s, struct mg_connection *c);
/* civetweb's connection_close: the connection no longer counts. */
void srv_guard_conn_close(srv *s, const struct mg_connection *c);
/* The CORS headers of --enable-cors-header, added to a reply being built
 * (nothing without the option). */
void srv_guard_add_headers(struct mg_connection *c);

/* ---- routes.c ---------------------------------------------------------- */
int srv_route(srv *s, struct mg_connection *c, const char *method, const char *path);

/* ---- files.c: /view, and the confinement rules of every file route ------- */
int srv_view(srv *s, struct mg_connection *c);

/* ---- imgconv.c: /view's preview= and channel= (ComfyUI's view_image) ------ */
/* 1 when the query asks for a converted picture: preview present (any
 * value), or channel rgb or a. */
int srv_view_wants_conversion(const char *preview, const char *channel);
/* Answers the PNG at `path` (already confined) converted as preview= /
 * channel= ask and returns the status; 0 when nothing is to be converted
 * (no such query, or the file is not a PNG): the caller sends the file as
 * it is. `filename` names it in Content-Disposition. */
int srv_view_convert(srv *s, struct mg_connection *c, const char *path, const char *filename, const char *preview,
                     const char *channel);
/* A file name the routes accept: not empty, no '/', '\\' or "..", at most
 * 255 bytes. 1 when refused. */
int srv_bad_filename(const char *f);
/* A subfolder: relative, no ".." component, no '\\'; NULL or "" is fine.
 * 1 when refused. */
int srv_bad_subfolder(const char *sub);
/* The real path of type/sub/filename (links resolved, which must stay inside
 * the folder's real path) into out: 200, or the status /view answers (400
 * bad name or type, 403 outside, 404 absent or not a regular file). */
int srv_resolve_file(const sd_env *env, const char *type, const char *sub, const char *filename, char *out,
                     size_t out_n);

/* ---- uploads.c: /upload/image and /upload/mask, streamed to disk ---------- */
int srv_upload_image(srv *s, struct mg_connection *c);
int srv_upload_mask(srv *s, struct mg_connection *c);

/* ---- userdata.c: /users, /settings, /userdata, /v2/userdata, /user.css --- */
/* Creates the user directory (and the default user's workflows/ and
 * subgraphs/ folders). */
sd_status srv_userdata_start(srv *s, sd_error *err);
void srv_userdata_stop(srv *s);
/* Answers the route when it is one of these: the status; -1 otherwise. */
int srv_userdata_route(srv *s, struct mg_connection *c, const char *method, const char *path);

/* ---- frontend.c: a web frontend's files ----------------------------------- */
/* --front-end-root, else --www, else NULL (the built-in page). */
const char *srv_web_root(const srv *s);
int srv_frontend_index(srv *s, struct mg_connection *c);
/* GET of `path` (decoded, from the URL) below the web root. */
int srv_frontend_file(srv *s, struct mg_connection *c, const char *path);
/* ComfyUI's /extensions: every .js file below the web root's extensions/ folder. */
int srv_frontend_extensions(srv *s, struct mg_connection *c);
/* 1 when the web root holds the regular file rel. */
int srv_frontend_has(const srv *s, const char *rel);
/* The content type of a file name (Python's mimetypes, as ComfyUI). */
const char *srv_mime_of(const char *name);

/* ---- listing.c: /internal/files/{type}, /internal/logs ------------------- */
/* The route when it is one of these (not under /api, as ComfyUI): the
 * status; -1 otherwise. */
int srv_internal_route(srv *s, struct mg_connection *c, const char *method, const char *path);

/* ---- jobs.c: /api/jobs and /api/jobs/{id} (ComfyUI's jobs.py) ------------ */
int srv_jobs_route(srv *s, struct mg_connection *c, const char *id);

/* ---- models.c: /models, /embeddings, /experiment/models, /view_metadata -- */
/* GET of one of these: the status; -1 for another path. */
int srv_models_route(srv *s, struct mg_connection *c, const char *path);

/* ---- queue.c ------------------------------------------------------------ */
int srv_queue_start(srv *s, sd_error *err);
void srv_queue_stop(srv *s);
int srv_post_prompt(srv *s, struct mg_connection *c);
/* POST /prompt's body, admitted (job.h): 0 with *body, *j and *dropped (the
 * node_errors of outputs left out) for the caller to queue and free; else
 * the refusal is replied and its status returned. Both queues use it. */
int srv_read_prompt(srv *s, struct mg_connection *c, cJSON **body, srv_job **j, cJSON **dropped);
int srv_get_queue(srv *s, struct mg_connection *c);
/* The bodies of GET /queue and GET /history (id NULL = all; max_items and
 * offset -1 = not given), for /api/jobs too. */
cJSON *srv_queue_lists(srv *s);
cJSON *srv_history_json(srv *s, const char *id, long max_items, long offset);
int srv_post_queue(srv *s, struct mg_connection *c);
int srv_get_history(srv *s, struct mg_connection *c, const char *id);
int srv_post_history(srv *s, struct mg_connection *c);
int srv_post_interrupt(srv *s, struct mg_connection *c);
int srv_post_free(srv *s, struct mg_connection *c);
/* {"exec_info": {"queue_remaining": n}} */
cJSON *srv_queue_info(srv *s);

/* ---- rqueue.c: the same endpoints when the queue is in Redis ------------- */
int srv_rq_start(srv *s, sd_error *err);
void srv_rq_stop(srv *s);
int srv_rq_post_prompt(srv *s, struct mg_connection *c);
int srv_rq_get_queue(srv *s, struct mg_connection *c);
/* The same bodies from Redis; NULL with err when Redis fails. */
cJSON *srv_rq_queue_lists(srv *s, sd_error *err);
cJSON *srv_rq_history_json(srv *s, const char *id, long max_items, long offset, sd_error *err);
int srv_rq_post_queue(srv *s, struct mg_connection *c);
int srv_rq_get_history(srv *s, struct mg_connection *c, const char *id);
int srv_rq_post_history(srv *s, struct mg_connection *c);
int srv_rq_post_interrupt(srv *s, struct mg_connection *c);
int srv_rq_post_free(srv *s, struct mg_connection *c);
size_t srv_rq_queue_remaining(srv *s);
/* The live workers: [{name, host, pid, device, index, running, prompts_done,
 * started_ms, rss_bytes}] as each last announced itself (worker.c). */
cJSON *srv_rq_workers(srv *s);
/* A file the workers made (or an upload), by ComfyUI's type/subfolder/name:
 * SD_ERR_NOT_FOUND when Redis does not know it. */
sd_status srv_rq_get_file(srv *s, const char *type, const char *subfolder, const char *name, char **bytes, size_t *n,
                          sd_error *err);
sd_status srv_rq_put_file(srv *s, const char *type, const char *subfolder, const char *name, const void *bytes,
                          size_t n, sd_error *err);

/* ---- ws.c ---------------------------------------------------------------- */
/* Sets the handlers and starts the sender thread; srv_ws_stop ends it. */
void srv_ws_register(srv *s);
void srv_ws_stop(srv *s);
/* Sends {"type": event, "data": data} to the clients with that sid, or to
 * every client when sid is NULL. Takes ownership of data. */
void srv_ws_send(srv *s, const char *sid, const char *event, cJSON *data);
/* A binary frame (4-byte big-endian event type, then payload). */
void srv_ws_send_binary(srv *s, const char *sid, uint32_t event, const void *payload, size_t n);
/* A binary frame built already (srv_binary_frame: a worker's, from Redis). */
void srv_ws_send_frame(srv *s, const char *sid, const void *frame, size_t n);
void srv_ws_broadcast_status(srv *s);
/* ComfyUI's server feature flags (/features, and the answer to a client's
 * feature_flags message). */
cJSON *srv_server_features(const srv *s);

/* ---- page.c (generated from server/www/index.html) ------------------------ */
extern const unsigned char srv_page_html[];
extern const size_t srv_page_html_len;

/* The least stack civetweb's threads get (thread_stack.c: why it must be
 * raised). Referencing it keeps that file's pthread_attr_setstacksize in the
 * executable. */
size_t srv_thread_stack_floor(void);

#endif
