/* redis.c - connections, commands and scripts of the Redis queue (redis.h). */
#define _GNU_SOURCE
#include "redis.h"
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "core/sha256.h"

/* ---- URLs ------------------------------------------------------------------- */

typedef struct redis_url {
    char host[256], path[1024], user[256], password[512];
    int port, db, is_unix;
} redis_url;

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Copies [s, s+n) percent-decoded into out[cap]; 0 on success. */
static int pct_copy(char *out, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
            i += 2;
        }
        if (o + 1 >= cap || c == 0) return -1;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return 0;
}

static int parse_int(const char *s, size_t n, int lo, int hi, int *out) {
    if (!n || n > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The URL as errors show it: a password never reaches a log. */
static void url_masked(const char *url, char *out, size_t n) {
    const char *scheme = strstr(url, "://"), *at = scheme ? strrchr(scheme, '@') : NULL;
    if (at) snprintf(out, n, "%.*s***%s", (int)(scheme + 3 - url), url, at);
    else snprintf(out, n, "%s", url);
}

static sd_status url_parse(const char *url, redis_url *u, sd_error *err) {
    memset(u, 0, sizeof *u);
    u->port = 6379;
    char shown[512];
    url_masked(url, shown, sizeof shown);
#define BAD(why) sd_error_set(err, SD_ERR_INVALID, "--redis '%s': %s (expected redis://[[user]:password@]host[:port][/db] " \
                              "or unix:///path/to/socket[?db=N])", shown, why)
    if (!strncmp(url, "rediss://", 9)) return BAD("TLS is not supported by this build; put a TLS tunnel in front");
    if (!strncmp(url, "unix://", 7)) {
        const char *p = url + 7, *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (!n || p[0] != '/' || pct_copy(u->path, sizeof u->path, p, n)) return BAD("the socket path must be absolute");
        if (q) {
            if (strncmp(q, "?db=", 4) || parse_int(q + 4, strlen(q + 4), 0, 1 << 20, &u->db)) return BAD("bad ?db=");
        }
        u->is_unix = 1;
        return SD_OK;
    }
    if (strncmp(url, "redis://", 8)) return BAD("unknown scheme");
    const char *p = url + 8, *end = p + strcspn(p, "/?#");
    const char *at = memrchr(p, '@', (size_t)(end - p));
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (pct_copy(u->user, sizeof u->user, p, (size_t)(colon - p)) ||
                pct_copy(u->password, sizeof u->password, colon + 1, (size_t)(at - colon - 1)))
                return BAD("bad user or password");
        } else if (pct_copy(u->password, sizeof u->password, p, (size_t)(at - p))) {
            return BAD("bad password");
        }
        p = at + 1;
    }
    const char *colon = memchr(p, ':', (size_t)(end - p));
    size_t hn = (size_t)((colon ? colon : end) - p);
    if (!hn || hn >= sizeof u->host) return BAD("no host");
    memcpy(u->host, p, hn);
    if (colon && parse_int(colon + 1, (size_t)(end - colon - 1), 1, 65535, &u->port)) return BAD("bad port");
    if (*end == '/' && end[1]) {
        if (parse_int(end + 1, strlen(end + 1), 0, 1 << 20, &u->db)) return BAD("bad database number");
    } else if (*end && !(*end == '/' && !end[1])) {
        return BAD("unexpected text after the host");
    }
#undef BAD
    return SD_OK;
}

/* ---- commands ------------------------------------------------------------------ */

redisReply *srv_redis_cmd(redisContext *c, sd_error *err, int argc, const char **argv, const size_t *lens) {
    size_t *l = NULL;
    if (!lens) {
        l = malloc((size_t)argc * sizeof *l);
        if (!l) {
            sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            return NULL;
        }
        for (int i = 0; i < argc; i++) l[i] = strlen(argv[i]);
        lens = l;
    }
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    free(l);
    if (!r) {
        sd_error_set(err, SD_ERR_IO, "redis: %s (%s)", c->errstr[0] ? c->errstr : "connection lost", argv[0]);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        int noauth = !strncmp(r->str, "NOAUTH", 6) || !strncmp(r->str, "WRONGPASS", 9);
        sd_error_set(err, SD_ERR_IO, "redis %s: %.*s%s", argv[0], (int)r->len, r->str,
                     noauth ? " (give the password in the URL, redis://:PASSWORD@host, or in $SDFLOW_REDIS_PASSWORD)" : "");
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int srv_redis_is_oom(const sd_error *err) {
    return err && err->msg[0] && strstr(err->msg, "OOM ") != NULL;
}

/* "#!lua flags=allow-oom" is Redis 7's way to let a script write past
 * maxmemory; Redis 6.2 (the oldest with XAUTOCLAIM) cannot compile it, so
 * a script it refuses to compile runs again as it is. */
#define ALLOW_OOM "#!lua flags=allow-oom\n"

redisReply *srv_redis_eval_allow_oom(redisContext *c, sd_error *err, const char *script, ...) {
    const char *argv[34];
    int argc = 2;
    va_list ap;
    va_start(ap, script);
    for (const char *a; argc < 34 && (a = va_arg(ap, const char *));) argv[argc++] = a;
    va_end(ap);
    size_t n = strlen(script);
    char *flagged = malloc(sizeof ALLOW_OOM + n);
    if (!flagged) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(flagged, ALLOW_OOM, sizeof ALLOW_OOM - 1);
    memcpy(flagged + sizeof ALLOW_OOM - 1, script, n + 1);
    argv[0] = "EVAL";
    argv[1] = flagged;
    redisReply *r = srv_redis_cmd(c, err, argc, argv, NULL);
    free(flagged);
    if (!r && !c->err && strstr(err->msg, "compiling script")) {
        argv[1] = script;
        r = srv_redis_cmd(c, err, argc, argv, NULL);
    }
    return r;
}

redisReply *srv_redis_cmdl(redisContext *c, sd_error *err, ...) {
    const char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    for (const char *a; argc < 32 && (a = va_arg(ap, const char *));) argv[argc++] = a;
    va_end(ap);
    return srv_redis_cmd(c, err, argc, argv, NULL);
}

sd_status srv_redis_each_key(redisContext *c, const char *cmd, char *const *keys, size_t n, const char *const *args,
                             int n_args, redisReply **replies, sd_error *err) {
    const char *argv[34];
    if (n_args > 32) return sd_error_set(err, SD_ERR_INVALID, "redis %s: too many arguments", cmd);
    for (size_t i = 0; i < n; i++) replies[i] = NULL;
    argv[0] = cmd;
    for (int k = 0; k < n_args; k++) argv[2 + k] = args[k];
    for (size_t i = 0; i < n; i++) {
        argv[1] = keys[i];
        if (redisAppendCommandArgv(c, 2 + n_args, argv, NULL) != REDIS_OK)
            return sd_error_set(err, SD_ERR_IO, "redis: %s (%s)", c->errstr[0] ? c->errstr : "out of memory", cmd);
    }
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK) {
            for (size_t k = 0; k < i; k++) {
                if (replies[k]) freeReplyObject(replies[k]);
                replies[k] = NULL;
            }
            return sd_error_set(err, SD_ERR_IO, "redis: %s (%s)", c->errstr[0] ? c->errstr : "connection lost", cmd);
        }
        replies[i] = r;
        if (replies[i] && replies[i]->type == REDIS_REPLY_ERROR) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
    }
    return SD_OK;
}

sd_status srv_redis_connect(const char *url, double timeout_s, redisContext **out, sd_error *err) {
    *out = NULL;
    redis_url u;
    sd_status rc = url_parse(url, &u, err);
    if (rc) return rc;
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    struct timeval ctv = timeout_s > 0 ? tv : (struct timeval){5, 0};
    redisContext *c = u.is_unix ? redisConnectUnixWithTimeout(u.path, ctv) : redisConnectWithTimeout(u.host, u.port, ctv);
    if (!c || c->err) {
        sd_error_set(err, SD_ERR_IO, "redis %s: cannot connect: %s", u.is_unix ? u.path : u.host,
                     c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return SD_ERR_IO;
    }
    if (timeout_s > 0) redisSetTimeout(c, tv);
    redisEnableKeepAlive(c);
    redisReply *r = NULL;
    /* a password kept out of the command line (ps shows it) */
    const char *envpw = getenv("SDFLOW_REDIS_PASSWORD");
    if (!u.password[0] && envpw && *envpw) snprintf(u.password, sizeof u.password, "%s", envpw);
    if (u.password[0]) {
        r = u.user[0] ? srv_redis_cmdl(c, err, "AUTH", u.user, u.password, SRV_REDIS_END)
                      : srv_redis_cmdl(c, err, "AUTH", u.password, SRV_REDIS_END);
        if (!r) goto fail;
        freeReplyObject(r);
    }
    if (u.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", u.db);
        if (!(r = srv_redis_cmdl(c, err, "SELECT", db, SRV_REDIS_END))) goto fail;
        freeReplyObject(r);
    }
    *out = c;
    return SD_OK;
fail:
    redisFree(c);
    return err->code ? err->code : SD_ERR_IO;
}

sd_status srv_redis_check_prefix(const char *prefix, sd_error *err) {
    if (!prefix || !*prefix || strlen(prefix) > SRV_REDIS_PREFIX_MAX)
        return sd_error_set(err, SD_ERR_INVALID, "--redis-prefix must be 1 to %d bytes long", SRV_REDIS_PREFIX_MAX);
    return SD_OK;
}

void srv_redis_key(char *buf, size_t n, const char *prefix, const char *name, const char *id) {
    snprintf(buf, n, "%s:%s%s", prefix, name, id ? id : "");
}

sd_status srv_redis_ensure_group(redisContext *c, const char *prefix, sd_error *err) {
    char key[SRV_REDIS_KEY_MAX];
    srv_redis_key(key, sizeof key, prefix, "jobs", NULL);
    redisReply *r = srv_redis_cmdl(c, err, "XGROUP", "CREATE", key, SRV_REDIS_GROUP, "0", "MKSTREAM", SRV_REDIS_END);
    if (r) {
        freeReplyObject(r);
        return SD_OK;
    }
    if (strstr(err->msg, "BUSYGROUP")) { /* there already: fine */
        sd_error_clear(err);
        return SD_OK;
    }
    return err->code;
}

void srv_redis_file_path(char *buf, size_t n, const char *type, const char *subfolder, const char *name) {
    if (subfolder && subfolder[0]) snprintf(buf, n, "%s/%s/%s", type, subfolder, name);
    else snprintf(buf, n, "%s/%s", type, name);
}

sd_status srv_redis_put_file(redisContext *c, const char *prefix, const char *file_path, const void *bytes,
                             size_t n, long ttl_s, char sha_hex[65], sd_error *err) {
    uint8_t h[32];
    char hex[65], bkey[600], fkey[4200], ttl[32];
    sd_sha256(bytes, n, h);
    sd_sha256_hex(h, hex);
    snprintf(ttl, sizeof ttl, "%ld", ttl_s > 0 ? ttl_s : 86400);
    snprintf(bkey, sizeof bkey, "%s:blob:%s", prefix, hex);
    int k = snprintf(fkey, sizeof fkey, "%s:file:%s", prefix, file_path);
    if (k < 0 || (size_t)k >= sizeof fkey) return sd_error_set(err, SD_ERR_INVALID, "file name too long: %.80s...", file_path);
    /* the blob first: a name never points at bytes that are not there */
    const char *a1[] = {"SET", bkey, bytes, "EX", ttl};
    const size_t l1[] = {3, strlen(bkey), n, 2, strlen(ttl)};
    redisReply *r = srv_redis_cmd(c, err, 5, a1, l1);
    if (!r) return err->code;
    freeReplyObject(r);
    if (!(r = srv_redis_cmdl(c, err, "SET", fkey, hex, "EX", ttl, SRV_REDIS_END))) return err->code;
    freeReplyObject(r);
    if (sha_hex) memcpy(sha_hex, hex, 65);
    return SD_OK;
}

sd_status srv_redis_get_blob(redisContext *c, const char *prefix, const char *sha_hex, char **bytes, size_t *n,
                             sd_error *err) {
    *bytes = NULL;
    *n = 0;
    char bkey[600];
    snprintf(bkey, sizeof bkey, "%s:blob:%s", prefix, sha_hex);
    redisReply *r = srv_redis_cmdl(c, err, "GET", bkey, SRV_REDIS_END);
    if (!r) return err->code;
    if (r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return sd_error_set(err, SD_ERR_NOT_FOUND, "blob %.16s...: expired from redis", sha_hex);
    }
    *bytes = malloc(r->len ? r->len : 1);
    if (!*bytes) {
        freeReplyObject(r);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    memcpy(*bytes, r->str, r->len);
    *n = r->len;
    freeReplyObject(r);
    return SD_OK;
}

sd_status srv_redis_get_file(redisContext *c, const char *prefix, const char *file_path, char **bytes, size_t *n,
                             sd_error *err) {
    *bytes = NULL;
    *n = 0;
    char fkey[4200], sha[65];
    int k = snprintf(fkey, sizeof fkey, "%s:file:%s", prefix, file_path);
    if (k < 0 || (size_t)k >= sizeof fkey) return sd_error_set(err, SD_ERR_NOT_FOUND, "file name too long");
    redisReply *r = srv_redis_cmdl(c, err, "GET", fkey, SRV_REDIS_END);
    if (!r) return err->code;
    int known = srv_redis_file_sha(r, sha);
    freeReplyObject(r);
    if (!known) return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: not in redis", file_path);
    sd_status rc = srv_redis_get_blob(c, prefix, sha, bytes, n, err);
    if (rc == SD_ERR_NOT_FOUND) sd_error_set(err, SD_ERR_NOT_FOUND, "%s: its bytes expired from redis", file_path);
    return rc;
}

int srv_redis_file_sha(const redisReply *r, char sha_hex[65]) {
    /* absent, or "claim:WORKER" while a worker still writes it */
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 64) return 0;
    memcpy(sha_hex, r->str, 64);
    sha_hex[64] = 0;
    return 1;
}

/* ---- event messages ------------------------------------------------------------------ */

char *srv_redis_event_pack(char kind, const char *sid, const void *payload, size_t n, size_t *len) {
    size_t sl = sid ? strlen(sid) : 0;
    char *msg = malloc(2 + sl + n);
    if (!msg) return NULL;
    msg[0] = kind;
    memcpy(msg + 1, sid ? sid : "", sl);
    msg[1 + sl] = '\n';
    memcpy(msg + 2 + sl, payload, n);
    *len = 2 + sl + n;
    return msg;
}

int srv_redis_event_unpack(const char *msg, size_t n, char *kind, char *sid, size_t sid_n, const char **payload,
                           size_t *pn) {
    const char *nl = n >= 2 ? memchr(msg, '\n', n) : NULL;
    if (!nl) return 0;
    size_t sl = (size_t)(nl - msg - 1);
    if (sl >= sid_n) return 0;
    memcpy(sid, msg + 1, sl);
    sid[sl] = 0;
    *kind = msg[0];
    *payload = nl + 1;
    *pn = n - (size_t)(*payload - msg);
    return 1;
}

/* ---- subscriptions ------------------------------------------------------------------- */

static int sub_quit(const srv_redis_sub *sub) {
    pthread_mutex_lock(sub->mu);
    int q = *sub->quit;
    pthread_mutex_unlock(sub->mu);
    return q;
}

void srv_redis_subscribe_loop(const srv_redis_sub *sub) {
    int down = 0;
    while (!sub_quit(sub)) {
        sd_error err;
        sd_error_clear(&err);
        redisContext *c = NULL;
        redisReply *r = NULL;
        if (srv_redis_connect(sub->url, 0, &c, &err) || !(r = srv_redis_cmdl(c, &err, "SUBSCRIBE", sub->channel, SRV_REDIS_END))) {
            if (c) redisFree(c);
            if (!down++ && sub->on_state) sub->on_state(sub->user, 0, err.msg);
            sleep(1);
            continue;
        }
        freeReplyObject(r);
        pthread_mutex_lock(sub->mu);
        int quit = *sub->quit;
        if (!quit) *sub->live = c;
        pthread_mutex_unlock(sub->mu);
        if (quit) {
            redisFree(c);
            break;
        }
        if (down && sub->on_state) sub->on_state(sub->user, 1, NULL);
        down = 0;
        void *reply = NULL;
        while (redisGetReply(c, &reply) == REDIS_OK) {
            redisReply *m = reply;
            /* ["message", channel, payload] */
            if (m && m->type == REDIS_REPLY_ARRAY && m->elements == 3 && m->element[2]->type == REDIS_REPLY_STRING)
                sub->on_message(sub->user, m->element[2]->str, m->element[2]->len);
            if (m) freeReplyObject(m);
            reply = NULL;
        }
        pthread_mutex_lock(sub->mu);
        *sub->live = NULL;
        quit = *sub->quit;
        pthread_mutex_unlock(sub->mu);
        if (!quit && sub->on_state) sub->on_state(sub->user, 0, c->errstr[0] ? c->errstr : "connection lost");
        down = !quit;
        redisFree(c);
        if (!quit) sleep(1);
    }
}

void srv_redis_subscribe_stop(const srv_redis_sub *sub) {
    pthread_mutex_lock(sub->mu);
    *sub->quit = 1;
    if (*sub->live) shutdown((*sub->live)->fd, SHUT_RDWR);
    pthread_mutex_unlock(sub->mu);
}

/* ---- scripts ------------------------------------------------------------------------ */

/* KEYS: job, queue, jobs, number. ARGV: id, number ("" = next; "-" = next, at
 * the front), prompt, extra_data, outputs, max_queue, now_ms, max_history.
 * Returns {entry, number}, or -1 (id queued already), -2 (queue full). */
const char srv_redis_lua_enqueue[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end\n"
    "if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then return -2 end\n"
    "local num = ARGV[2]\n"
    "if num == '' or num == '-' then\n"
    "  local k = redis.call('INCR', KEYS[4]) - 1\n"
    "  if num == '-' then k = -k end\n"
    "  num = tostring(k)\n"
    "end\n"
    "local e = redis.call('XADD', KEYS[3], '*', 'id', ARGV[1])\n"
    "redis.call('HSET', KEYS[1], 'prompt', ARGV[3], 'extra_data', ARGV[4], 'outputs', ARGV[5], 'number', num,\n"
    "  'state', 'pending', 'attempts', '0', 'entry', e, 'queued_ms', ARGV[7], 'max_history', ARGV[8], 'worker', '')\n"
    "redis.call('ZADD', KEYS[2], num, ARGV[1])\n"
    "return {e, num}\n";

/* KEYS: job, queue, jobs. ARGV: id. A pending prompt is removed (1); a
 * running one is marked cancelled and left to an interrupt (2): the mark
 * outlives its worker, so whoever runs the prompt next (a worker taking
 * over from a dead one) stops it at once instead of running it; unknown: 0. */
const char srv_redis_lua_cancel[] =
    "local st = redis.call('HGET', KEYS[1], 'state')\n"
    "if not st then return 0 end\n"
    "if st == 'running' then redis.call('HSET', KEYS[1], 'cancelled', '1') return 2 end\n"
    "local e = redis.call('HGET', KEYS[1], 'entry')\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "if e then redis.call('XDEL', KEYS[3], e) end\n"
    "return 1\n";

/* KEYS: job. ARGV: entry, worker. The job of this stream entry is marked
 * running on this worker: returns {prompt, extra_data, outputs, number,
 * attempts, previous worker}; false when the job is gone (cancelled,
 * finished) or belongs to another entry (its id was queued again). */
const char srv_redis_lua_start[] =
    "if redis.call('HGET', KEYS[1], 'entry') ~= ARGV[1] then return false end\n"
    "local prev = redis.call('HGET', KEYS[1], 'worker') or ''\n"
    "redis.call('HSET', KEYS[1], 'state', 'running', 'worker', ARGV[2])\n"
    "local a = redis.call('HINCRBY', KEYS[1], 'attempts', 1)\n"
    "local f = redis.call('HMGET', KEYS[1], 'prompt', 'extra_data', 'outputs', 'number', 'max_history')\n"
    "return {f[1], f[2], f[3], f[4], tostring(a), prev, f[5] or ''}\n";

/* KEYS: job, queue, jobs, hist:ID, history, hist_seq. ARGV: id, entry JSON,
 * group, stream entry, max_history, "P:hist:". Records the history entry only
 * while the job is still this entry's (a second finisher of a reclaimed
 * prompt records nothing), then acknowledges and deletes the stream entry.
 * Returns 1 when recorded. */
const char srv_redis_lua_finish[] =
    "local ok = 0\n"
    "if redis.call('HGET', KEYS[1], 'entry') == ARGV[4] then\n"
    "  redis.call('SET', KEYS[4], ARGV[2])\n"
    "  redis.call('ZADD', KEYS[5], redis.call('INCR', KEYS[6]), ARGV[1])\n"
    "  local over = redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[5])\n"
    "  if over > 0 then\n"
    "    for _, old in ipairs(redis.call('ZRANGE', KEYS[5], 0, over - 1)) do redis.call('DEL', ARGV[6] .. old) end\n"
    "    redis.call('ZREMRANGEBYRANK', KEYS[5], 0, over - 1)\n"
    "  end\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "  ok = 1\n"
    "end\n"
    "redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])\n"
    "redis.call('XDEL', KEYS[3], ARGV[4])\n"
    "return ok\n";

/* KEYS: history. ARGV: "P:hist:". */
const char srv_redis_lua_history_clear[] =
    "for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do redis.call('DEL', ARGV[1] .. id) end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n";
