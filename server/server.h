/* server.h - `sdflow serve`: ComfyUI's HTTP and WebSocket API over the
 * executor (docs/server.md).
 *
 * HTTP and WebSocket framing, multipart parsing and the listening sockets
 * are civetweb's (Debian libcivetweb-dev); this module routes requests,
 * keeps the prompt queue and the history, and runs one prompt at a time on
 * a worker thread with one sd_exec whose in-process memo (loaded models
 * included) lives from prompt to prompt.
 *
 * Ownership: the caller owns everything the options point to (the env with
 * its backend and model store, the cache) and keeps it alive until
 * sd_server_run returns. The server replaces env->models only through
 * POST /free {"unload_models": true}, between prompts, with a new store it
 * hands back in env->models (the caller frees whatever is there at the end).
 */
#ifndef SD_SERVER_H
#define SD_SERVER_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include "core/error.h"
#include "core/executor.h"
#include "core/node.h"

struct sd_tensor;

typedef struct sd_server_opts {
    const char *listen;       /* address to bind; "127.0.0.1" when NULL */
    int port;                 /* 0 = any free port (the CLI's default is 8188) */
    const char *token;        /* Bearer token every request must carry, or NULL */
    int insecure;             /* allow a non-local listen address without a token */
    /* Browsers (guard.c, docs/server.md "Threat model"): without a token only
     * the server's own pages (same origin) and loopback Host names are
     * served. cors_origin opens the origin check on purpose: "*" = any
     * origin, else that one, with CORS headers on every reply; NULL = off. */
    const char *cors_origin;
    size_t max_client_conns;  /* connections at once from one client address; 0 = 32 */
    double request_timeout;   /* seconds a client has to send its request line and
                                 headers, and the longest wait for each later read or
                                 write; 0 = 10 */
    size_t max_body;          /* JSON request bodies (bytes); 0 = 16 MiB */
    size_t max_upload;        /* one multipart upload (bytes); 0 = 100 MiB */
    size_t max_history;       /* history entries kept (oldest dropped); 0 = 1000 */
    size_t max_queue;         /* pending prompts accepted; 0 = 1000 */
    size_t max_ws_clients;    /* WebSocket connections at once; 0 = 32 */
    size_t max_ws_queued;     /* bytes waiting for one WebSocket client before it is
                                 dropped as not reading; 0 = 8 MiB */
    size_t memo_budget;       /* bytes of tensors the memo keeps between prompts;
                                 0 = 4 GiB (least recently used released first) */
    const char *www_dir;      /* serve the page from here; NULL = the built-in page */
    const char *front_end_root; /* a built web frontend (ComfyUI's) to host at /; NULL = the page */
    const char *user_dir;     /* users' saved files and settings; NULL = "user" beside the output folder */
    sd_env *env;              /* directories, backend, model store (see above) */
    const sd_cache_i *cache;  /* persistent cache, or NULL */
    const char *const *argv;  /* reported by /system_stats (NULL-terminated) */
    const char *version;      /* reported as comfyui_version, e.g. "sdflow 0.1.0" */
    FILE *log;                /* one line per request and per prompt; NULL = stderr */
    volatile sig_atomic_t *stop; /* the server returns once this becomes non-zero */
    /* Latent previews: encodes a sampler's denoised latent (executor.h
     * NODE_PREVIEW: F32 [N, 4, h, w], format "sd1"/"sdxl") as a PNG into f;
     * sent as ComfyUI's binary preview frames. NULL = no previews. Called on
     * the worker thread only. */
    sd_status (*preview)(void *user, const struct sd_tensor *latent, const char *latent_format, FILE *f,
                         sd_error *err);
    void *preview_user;
    double preview_interval;  /* least seconds between two frames of a node (the
                                 last step always goes); 0 = every step */
    /* Past one machine (docs/scaling.md): with a URL, accepted prompts go
     * to Redis and `sdflow worker` processes run them; nothing runs here. */
    const char *redis_url;    /* redis://... or unix://...; NULL = run prompts in this process */
    const char *redis_prefix; /* key prefix; NULL = "sdflow" */
    long redis_ttl;           /* seconds uploads stay in Redis; 0 = 86400 */
    /* Called once the socket listens, with the port bound (tests, scripts). */
    void (*on_listen)(void *user, int port);
    void *on_listen_user;
} sd_server_opts;

/* Checks the options (a non-local address needs a token or `insecure`),
 * starts listening, serves until *opts->stop, then stops accepting, cancels
 * the running prompt and returns. SD_ERR_INVALID for refused options,
 * SD_ERR_IO when the address cannot be bound. */
sd_status sd_server_run(const sd_server_opts *opts, sd_error *err);

/* 1 when `addr` is a loopback address (127.0.0.0/8, ::1, "localhost"). */
int sd_server_addr_is_local(const char *addr);

#endif
