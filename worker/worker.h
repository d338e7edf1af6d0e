/* worker.h - `sdflow worker`: runs the prompts `sdflow serve --redis`
 * queued, as one member of a Redis consumer group (docs/scaling.md; the
 * keys are in server/redis.h).
 *
 * One worker runs one prompt at a time with one sd_exec whose memo (loaded
 * models included) lives from prompt to prompt, like the server's own
 * queue. It acknowledges a prompt only once its history entry is written
 * (and its output files are in Redis), so a worker that dies mid-prompt
 * leaves it pending: once it has been idle longer than the claim timeout,
 * another worker claims it (XAUTOCLAIM) and runs it again. While a prompt
 * runs a heartbeat thread keeps its entry fresh, so a slow live worker is
 * never mistaken for a dead one.
 *
 * Ownership: the caller owns what the options point to and keeps it alive
 * until sd_worker_run returns; the worker sets env->claim_name while it
 * runs and clears it before returning.
 */
#ifndef SD_WORKER_H
#define SD_WORKER_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include "core/error.h"
#include "core/executor.h"
#include "core/node.h"
#include "server/job.h"

typedef struct sd_worker_opts {
    const char *redis_url;    /* redis://... or unix://... (server/redis.h) */
    const char *prefix;       /* key prefix; NULL = "sdflow" */
    const char *name;         /* consumer name, unique per worker; NULL = host:pid */
    double claim_timeout;     /* seconds a prompt's entry may stay idle before another worker
                                 takes it; 0 = 60 */
    int max_attempts;         /* runs of one prompt before it is recorded as failed; 0 = 3 */
    long ttl;                 /* seconds output files stay in Redis; 0 = 86400 */
    double oom_retry;         /* seconds a prompt waits for room when Redis is full (its
                                 maxmemory reached) before it fails saying so; 0 = 30 */
    size_t memo_budget;       /* resident bytes above which cached results go; 0 = 4 GiB */
    sd_env *env;              /* directories, backend, model store */
    const sd_cache_i *cache;  /* persistent cache, or NULL */
    size_t shared_cache_max;  /* node outputs up to this many bytes (serialized) are also
                                 shared with every worker through Redis (shared_cache.h);
                                 0 = none */
    srv_preview_fn preview;   /* latent previews (job.h); NULL = none */
    void *preview_user;
    double preview_interval;
    FILE *log;                /* NULL = stderr */
    volatile sig_atomic_t *stop; /* returns once non-zero (the running prompt is interrupted and
                                    left for another worker) */
} sd_worker_opts;

/* Serves until *opts->stop. SD_ERR_INVALID for a bad URL, SD_ERR_IO when
 * Redis cannot be reached at start (later outages are waited out; a Redis
 * that is full at start is waited for too).
 *
 * A full Redis (maxmemory, noeviction) refuses writes that add data. Every
 * prompt still ends in exactly one recorded outcome: the bookkeeping that
 * moves a prompt between states (start, finish, cancel, output-name
 * claims) may write past the limit (redis.h srv_redis_eval_allow_oom), the
 * heartbeat (XCLAIM) is never refused, so no live worker's prompt is taken
 * over; the output files are stored with back-off and retry for up to
 * oom_retry seconds, and a prompt whose files cannot be stored in that time
 * fails, saying so: `success` always means its files can be fetched. */
sd_status sd_worker_run(const sd_worker_opts *opts, sd_error *err);

#endif
