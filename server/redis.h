/* redis.h - the Redis side of `sdflow serve --redis` and `sdflow worker`
 * (docs/scaling.md): connecting from a URL, commands whose failures come
 * back as sd_error, the key names and the scripts that move a prompt from
 * one state to the next atomically. hiredis (Debian libhiredis-dev) speaks
 * the protocol; nothing here parses it.
 *
 * Keys, under a prefix P (default "sdflow"):
 *   P:jobs         stream, one entry {id} per accepted prompt; consumer group "workers"
 *   P:job:ID       hash: prompt, extra_data, outputs (JSON), number, state (pending|running),
 *                  worker, attempts, entry (stream entry id), queued_ms, max_history, and
 *                  cancelled = 1 once a client cancelled it while it ran
 *   P:queue        sorted set ID -> number (pending and running prompts)
 *   P:number       counter behind `number`
 *   P:history      sorted set ID -> completion order; P:hist:ID = the entry (JSON)
 *   P:hist_seq     counter behind that order
 *   P:events       channel, workers -> servers: "J<sid>\n<{type, data}>" or
 *                  "B<sid>\n<4-byte big-endian event><payload>"; sid "" = every client
 *   P:control      channel, servers -> workers: {"op": "interrupt", "prompt_id"?} or
 *                  {"op": "free", "unload_models", "free_memory"}
 *   P:blob:SHA256  a file's bytes (expires after the TTL)
 *   P:file:TYPE/PATH  SHA256 of the file a name stands for, or "claim:WORKER" while
 *                  a worker writes it (expires after the TTL)
 *
 * A redisContext is not thread-safe: each thread uses its own.
 */
#ifndef SD_SERVER_REDIS_H
#define SD_SERVER_REDIS_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stddef.h>
#include "core/error.h"

#define SRV_REDIS_GROUP "workers"

/* Connects to redis://[[user]:password@]host[:port][/db] or
 * unix:///path[?db=N], authenticates (with $SDFLOW_REDIS_PASSWORD when the
 * URL has no password) and selects the database. The
 * connect and each command time out after `timeout_s` (0 = never: for
 * blocking reads and subscriptions). SD_ERR_INVALID for a malformed URL
 * (named), SD_ERR_IO when the server cannot be reached or refuses. */
sd_status srv_redis_connect(const char *url, double timeout_s, redisContext **out, sd_error *err);

/* One command, arguments as separate strings (binary-safe with lens; lens
 * NULL = strlen). Returns the reply, or NULL with err set when the
 * connection failed (SD_ERR_IO) or Redis answered an error (SD_ERR_IO,
 * Redis's message). Caller frees with freeReplyObject. */
redisReply *srv_redis_cmd(redisContext *c, sd_error *err, int argc, const char **argv, const size_t *lens);
/* The same with the arguments as a list ended by SRV_REDIS_END:
 * srv_redis_cmdl(c, err, "GET", key, SRV_REDIS_END). At most 32. */
#define SRV_REDIS_END ((const char *)0)
redisReply *srv_redis_cmdl(redisContext *c, sd_error *err, ...) __attribute__((sentinel));

/* 1 when err is Redis refusing a write because it reached maxmemory (its
 * "OOM command not allowed ..." reply, from a command or inside a script). */
int srv_redis_is_oom(const sd_error *err);

/* EVAL script numkeys keys... args... SRV_REDIS_END, allowed to write past
 * maxmemory (Redis 7's allow-oom flag; on Redis 6.2, which cannot read the
 * flag, the script runs as it is). For the bookkeeping that moves a prompt
 * from one state to the next (start, finish, cancel): each moves data
 * rather than adds it, and refusing it would leave prompts half-way (a
 * finished prompt never recorded, rerun by another worker). New work
 * (enqueue) and file bytes stay subject to maxmemory. */
redisReply *srv_redis_eval_allow_oom(redisContext *c, sd_error *err, const char *script, ...)
    __attribute__((sentinel));

/* `cmd key args...` for each of n keys, sent together and read back in one
 * round trip (a pipeline): replies[i] answers keys[i] (caller frees each
 * with freeReplyObject; NULL where Redis answered an error). SD_ERR_IO when
 * the connection failed (then every reply is NULL). */
sd_status srv_redis_each_key(redisContext *c, const char *cmd, char *const *keys, size_t n, const char *const *args,
                             int n_args, redisReply **replies, sd_error *err);

/* The longest key prefix: with ids under 128 bytes every key fits the
 * callers' buffers (SRV_REDIS_KEY_MAX), so none is ever cut short. */
#define SRV_REDIS_PREFIX_MAX 64
#define SRV_REDIS_KEY_MAX 512
/* SD_ERR_INVALID naming the option when a prefix is empty or too long. */
sd_status srv_redis_check_prefix(const char *prefix, sd_error *err);
/* "P:name", or "P:name<id>" ("job:" + id) when id is not NULL. */
void srv_redis_key(char *buf, size_t n, const char *prefix, const char *name, const char *id);

/* Creates the stream and the consumer group when missing. */
sd_status srv_redis_ensure_group(redisContext *c, const char *prefix, sd_error *err);

/* "TYPE/SUBFOLDER/NAME" or "TYPE/NAME" (the key of a file, after P:file:). */
void srv_redis_file_path(char *buf, size_t n, const char *type, const char *subfolder, const char *name);

/* Stores bytes as P:blob:SHA and P:file:TYPE/PATH -> SHA, both expiring
 * after ttl_s seconds; *sha_hex (may be NULL) receives the hash. */
sd_status srv_redis_put_file(redisContext *c, const char *prefix, const char *file_path, const void *bytes,
                             size_t n, long ttl_s, char sha_hex[65], sd_error *err);
/* The bytes P:file:TYPE/PATH stands for: SD_OK with *bytes (malloc'd) and
 * *n, SD_ERR_NOT_FOUND when the name is unknown, expired or only claimed. */
sd_status srv_redis_get_file(redisContext *c, const char *prefix, const char *file_path, char **bytes, size_t *n,
                             sd_error *err);

/* A subscription kept alive: each message's payload goes to on_message; a
 * lost connection is retried every second, reported once through
 * on_state(user, 0, why) and its return through on_state(user, 1, NULL)
 * (on_state may be NULL). While subscribed, *live holds the connection
 * (under mu), so srv_redis_subscribe_stop, from another thread, can wake
 * the blocked read by shutting its socket. Runs until *quit (read under
 * mu). */
typedef struct srv_redis_sub {
    const char *url, *channel;
    pthread_mutex_t *mu;
    int *quit;
    redisContext **live;
    void (*on_message)(void *user, const char *msg, size_t n);
    void (*on_state)(void *user, int up, const char *why);
    void *user;
} srv_redis_sub;
void srv_redis_subscribe_loop(const srv_redis_sub *sub);
/* Sets *quit and wakes the loop. */
void srv_redis_subscribe_stop(const srv_redis_sub *sub);

/* The parts of srv_redis_get_file: whether a reply to GET P:file:... names
 * finished bytes (their SHA-256 into sha_hex), and the bytes of P:blob:SHA
 * (SD_ERR_NOT_FOUND once expired). */
int srv_redis_file_sha(const redisReply *r, char sha_hex[65]);
sd_status srv_redis_get_blob(redisContext *c, const char *prefix, const char *sha_hex, char **bytes, size_t *n,
                             sd_error *err);

/* P:events messages (see the keys above): kind 'J' (a {type, data} JSON
 * text) or 'B' (a binary frame, job.h srv_binary_frame) for the client
 * `sid` (NULL or "" = every client). pack: malloc'd, *len its size; NULL
 * without memory. unpack: 1 with the kind, the sid copied into sid[sid_n]
 * and the payload's place in msg; 0 for a message not in this shape. */
char *srv_redis_event_pack(char kind, const char *sid, const void *payload, size_t n, size_t *len);
int srv_redis_event_unpack(const char *msg, size_t n, char *kind, char *sid, size_t sid_n, const char **payload,
                           size_t *pn);

/* Scripts (EVAL). Keys and arguments are documented where they are used. */
extern const char srv_redis_lua_enqueue[];
extern const char srv_redis_lua_cancel[];
extern const char srv_redis_lua_start[];
extern const char srv_redis_lua_finish[];
extern const char srv_redis_lua_history_clear[];

#endif
