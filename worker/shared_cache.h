/* shared_cache.h - Redis as a second tier of the node-output cache, shared
 * by every worker (docs/scaling.md).
 *
 * A lookup tries the worker's own cache (SQLite, may be absent) first, then
 * Redis; a value found in Redis is copied into the local cache. A stored
 * value goes to the local cache, and to Redis when its serialized form
 * (core/value_io.h) is at most `max_bytes`: conditioning and latents, not
 * images or anything large. In Redis it is P:cache:<key hex> = SHA-256 of
 * the blob, then the blob, expiring after `ttl_s`; a blob whose hash does
 * not match is a miss. Keys are the executor's (they hash model file
 * contents, not paths), so workers with the same files share results.
 *
 * Everything runs on the thread that runs the executor (the worker's loop),
 * with that thread's connection.
 */
#ifndef SD_WORKER_SHARED_CACHE_H
#define SD_WORKER_SHARED_CACHE_H

#include <hiredis/hiredis.h>
#include "core/executor.h"

typedef struct sd_shared_cache {
    redisContext **conn;       /* the loop's connection (it may be replaced after an outage) */
    const char *prefix;
    const sd_cache_i *local;   /* may be NULL, and so may its get and put (--no-cache keeps
                                  only the file-hash memo) */
    size_t max_bytes;
    long ttl_s;
    unsigned long hits, stores; /* counted for the log */
} sd_shared_cache;

/* The sd_cache_i over `sc` (which must outlive it). */
sd_cache_i sd_shared_cache_iface(sd_shared_cache *sc);

#endif
