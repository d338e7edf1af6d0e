/* worker.c - the worker's loop, heartbeat and control threads (worker.h). */
#define _GNU_SOURCE
#include "worker.h"
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/outfile.h"
#include "core/sha256.h"
#include "server/redis.h"
#include "shared_cache.h"
#include "core/json_util.h"

#define COMMAND_TIMEOUT_S 30.0
#define READ_BLOCK_MS "1000" /* how long one XREADGROUP waits: the stop flag's latency */

typedef struct wk {
    const sd_worker_opts *o;
    const char *prefix;
    char name[128];
    double claim_timeout;
    int max_attempts;
    long ttl;
    double oom_retry;
    size_t budget;
    FILE *log;
    pthread_mutex_t log_mu;

    redisContext *c;      /* the loop's connection; also used by the sink and claims (same thread) */

    pthread_mutex_t mu;   /* guards what follows */
    char run_id[128];     /* the prompt running now ("" = none) */
    char run_entry[64];   /* its stream entry */
    unsigned long done;   /* prompts finished (recorded or not) */
    long long started_ms;
    int flag_free;        /* /free asked: empty the memo between prompts */
    volatile sig_atomic_t interrupt;
    int quit;             /* threads end */
    redisContext *ctl;    /* the control subscription (shut down to wake it) */
    char ctl_channel[SRV_REDIS_KEY_MAX];
    srv_redis_sub ctl_sub;

    pthread_t hb_thread, ctl_thread;
    int hb_started, ctl_started;

    sd_shared_cache shared; /* the Redis tier over o->cache */
    sd_cache_i shared_i;
    const sd_cache_i *cache; /* what the executor uses */
} wk;

static void wlog(wk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(wk *w, const char *fmt, ...) {
    char *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    pthread_mutex_lock(&w->log_mu);
    fprintf(w->log, "%s\n", line);
    fflush(w->log);
    pthread_mutex_unlock(&w->log_mu);
    free(line);
}

/* P:name, or P:name<id> (redis.h). */
static void key(char *buf, size_t n, const wk *w, const char *name, const char *id) {
    srv_redis_key(buf, n, w->prefix, name, id);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static int stopping(const wk *w) {
    return w->o->stop && *w->o->stop;
}

/* Waits before retry k (0.1 s doubling up to 2 s): 0 when the worker is
 * stopping or the running prompt was interrupted (give up), else 1. */
static int backoff(const wk *w, int k) {
    double s = 0.1 * (double)(1u << (k < 5 ? k : 5));
    if (s > 2) s = 2;
    for (double t = 0; t < s; t += 0.05) {
        if (stopping(w) || w->interrupt) return 0;
        sleep_s(0.05);
    }
    return !stopping(w) && !w->interrupt;
}

/* ---- messages to the servers (P:events) ------------------------------------------ */

static void publish(wk *w, char kind, const char *sid, const void *payload, size_t n) {
    size_t len = 0;
    char *msg = w->c ? srv_redis_event_pack(kind, sid, payload, n, &len) : NULL;
    if (!msg) return;
    char kev[SRV_REDIS_KEY_MAX];
    key(kev, sizeof kev, w, "events", NULL);
    const char *argv[] = {"PUBLISH", kev, msg};
    const size_t lens[] = {7, strlen(kev), len};
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmd(w->c, &err, 3, argv, lens);
    if (r) freeReplyObject(r);
    free(msg);
}

static void sink_send(void *user, const char *sid, const char *event, cJSON *data) {
    wk *w = user;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", event);
    cJSON_AddItemToObject(m, "data", data);
    char *text = sd_json_print(m, 0);
    cJSON_Delete(m);
    if (text) publish(w, 'J', sid, text, strlen(text));
    free(text);
}

static void sink_binary(void *user, const char *sid, uint32_t event, const void *p, size_t n) {
    size_t len = 0;
    char *buf = srv_binary_frame(event, p, n, &len);
    if (buf) publish(user, 'B', sid, buf, len);
    free(buf);
}

static void sink_log(void *user, const char *line) {
    wlog(user, "%s", line);
}

static void on_env_log(void *user, int level, const char *msg) {
    if (level <= SD_LOG_INFO)
        wlog(user, "%s: %s", level == SD_LOG_ERROR ? "error" : level == SD_LOG_WARN ? "warning" : "info", msg);
}

/* The queue changed: every client hears the new length, as from ComfyUI. */
static void publish_status(wk *w) {
    char kq[SRV_REDIS_KEY_MAX];
    key(kq, sizeof kq, w, "queue", NULL);
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = w->c ? srv_redis_cmdl(w->c, &err, "ZCARD", kq, SRV_REDIS_END) : NULL;
    size_t n = r && r->type == REDIS_REPLY_INTEGER && r->integer > 0 ? (size_t)r->integer : 0;
    if (r) freeReplyObject(r);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToObject(d, "status", srv_queue_info_json(n));
    sink_send(w, NULL, "status", d);
}

/* ---- output names claimed cluster-wide (core/node.h claim_name) -------------------- */

static sd_status claim_name(void *user, const char *type, const char *subfolder, const char *name, int *taken,
                            sd_error *err) {
    wk *w = user;
    char path[4096], k[4400], val[160], ttl[32];
    srv_redis_file_path(path, sizeof path, type, subfolder, name);
    snprintf(k, sizeof k, "%s:file:%s", w->prefix, path);
    snprintf(val, sizeof val, "claim:%s", w->name);
    snprintf(ttl, sizeof ttl, "%ld", w->ttl);
    if (!w->c) return sd_error_set(err, SD_ERR_IO, "redis: not connected (output name %s)", path);
    /* a name claim is bookkeeping: taken even when Redis is full (the
     * file's bytes are what waits for room) */
    static const char script[] = "local r = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])\n"
                                 "if r then return 1 end\nreturn 0\n";
    redisReply *r = srv_redis_eval_allow_oom(w->c, err, script, "1", k, val, ttl, SRV_REDIS_END);
    if (!r) return err->code;
    *taken = !(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    return SD_OK;
}

/* ---- files in and out ---------------------------------------------------------------- */

/* Relative, no "..", no backslash, not empty. */
static int safe_relpath(const char *p) {
    if (!p || !*p || p[0] == '/' || strchr(p, '\\') || strlen(p) > 1024) return 0;
    for (const char *q = p; *q;) {
        size_t n = strcspn(q, "/");
        if (n == 0 || (n == 2 && !strncmp(q, "..", 2)) || (n == 1 && q[0] == '.')) return 0;
        q += n;
        if (*q == '/') q++;
    }
    return 1;
}

/* Writes bytes to dir/rel (rel checked by safe_relpath), creating the
 * folders between, never through a link (core/outfile.h). */
static sd_status write_file(const char *dir, const char *rel, const char *bytes, size_t n, sd_error *err) {
    const char *slash = strrchr(rel, '/');
    char sub[1100];
    snprintf(sub, sizeof sub, "%.*s", slash ? (int)(slash - rel) : 0, rel);
    sd_outdir od = {.fd = -1};
    sd_status rc = sd_outdir_open(dir, sub, &od, err);
    if (!rc) rc = sd_outfile_write_replace(&od, slash ? slash + 1 : rel, bytes, n, err);
    sd_outdir_close(&od);
    return rc;
}

/* Input files the prompt names (any string input that Redis knows as an
 * input file: uploads reach the server, not this machine) are brought into
 * the input folder unless the same bytes are there. One round trip asks
 * for every name; only a file whose local copy has another hash is
 * downloaded. */
static sd_status fetch_inputs(wk *w, const srv_job *j, sd_error *err) {
    const char *dir = w->o->env->input_dir;
    size_t n = 0, cap = 0;
    char **keys = NULL;
    char **rel = NULL;
    sd_status rc = SD_OK;
    const cJSON *node;
    cJSON_ArrayForEach(node, j->prompt) {
        const cJSON *in;
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(node, "inputs")) {
            if (rc || !cJSON_IsString(in) || !safe_relpath(in->valuestring)) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                char **k2 = realloc(keys, cap * sizeof *k2);
                if (k2) keys = k2;
                char **r2 = realloc(rel, cap * sizeof *r2);
                if (r2) rel = r2;
                if (!k2 || !r2) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); continue; }
            }
            /* ComfyUI's annotated name of an input file ("clipspace/a.png
             * [input]", what its mask editor gives LoadImage) is that file */
            size_t len = strlen(in->valuestring);
            if (len > 8 && !strcmp(in->valuestring + len - 8, " [input]")) len -= 8;
            if (!(rel[n] = strndup(in->valuestring, len))) {
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                continue;
            }
            if (asprintf(&keys[n], "%s:file:input/%s", w->prefix, rel[n]) < 0) {
                free(rel[n]);
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                continue;
            }
            n++;
        }
    }
    redisReply **shas = rc || !n ? NULL : calloc(n, sizeof *shas);
    if (!rc && n && !shas) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc && n) rc = srv_redis_each_key(w->c, "GET", keys, n, NULL, 0, shas, err);
    for (size_t i = 0; !rc && i < n; i++) {
        char sha[65], local[PATH_MAX], have[65] = "";
        if (!srv_redis_file_sha(shas[i], sha)) continue; /* not an uploaded file */
        snprintf(local, sizeof local, "%s/%s", dir, rel[i]);
        uint8_t h[32];
        sd_error e;
        sd_error_clear(&e);
        if (sd_sha256_file(local, h, &e) == SD_OK) sd_sha256_hex(h, have);
        if (!strcmp(have, sha)) continue; /* the same bytes are here */
        char *bytes = NULL;
        size_t nb = 0;
        rc = srv_redis_get_blob(w->c, w->prefix, sha, &bytes, &nb, err);
        if (rc == SD_ERR_NOT_FOUND) { /* expired: the node sees what the folder has */
            sd_error_clear(err);
            rc = SD_OK;
            continue;
        }
        if (!rc) rc = write_file(dir, rel[i], bytes, nb, err);
        if (!rc) wlog(w, "prompt %s: input %s fetched from redis (%zu bytes)", j->id, rel[i], nb);
        free(bytes);
    }
    for (size_t i = 0; i < n; i++) {
        free(keys[i]);
        free(rel[i]);
        if (shas && shas[i]) freeReplyObject(shas[i]);
    }
    free(keys);
    free(rel);
    free(shas);
    return rc;
}

/* One file into Redis; a full Redis (OOM) is waited for with back-off
 * until *deadline (set at the first OOM of the prompt). */
static sd_status put_output(wk *w, const srv_job *j, const char *path, const char *bytes, size_t n, double *deadline,
                            sd_error *err) {
    for (int k = 0;; k++) {
        sd_error_clear(err);
        sd_status rc = srv_redis_put_file(w->c, w->prefix, path, bytes, n, w->ttl, NULL, err);
        if (!rc || !srv_redis_is_oom(err)) return rc;
        if (*deadline == 0) {
            *deadline = srv_now() + w->oom_retry;
            wlog(w, "prompt %s: redis is full (maxmemory): output %s waits for room (up to %gs)", j->id, path,
                 w->oom_retry);
        }
        if (srv_now() >= *deadline || !backoff(w, k)) {
            sd_error_set(err, SD_ERR_IO,
                         "Redis is full (its maxmemory is reached): output %s could not be stored in %gs, so this "
                         "prompt's pictures cannot be fetched", path, w->oom_retry);
            return SD_ERR_IO;
        }
    }
}

/* Every file the outputs name goes to Redis, so /view finds it whichever
 * machine made it (srv_run_opts.publish: the prompt is `success` only when
 * this succeeds). */
static sd_status publish_outputs(void *user, const srv_job *j, const cJSON *outputs, sd_error *err) {
    wk *w = user;
    double deadline = 0;
    const cJSON *node;
    cJSON_ArrayForEach(node, outputs) {
        const cJSON *list;
        cJSON_ArrayForEach(list, node) {
            if (!cJSON_IsArray(list)) continue;
            const cJSON *f;
            cJSON_ArrayForEach(f, list) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "filename");
                const cJSON *sub = cJSON_GetObjectItemCaseSensitive(f, "subfolder");
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
                if (!cJSON_IsString(fn) || !cJSON_IsString(type)) continue;
                const char *dir = srv_folder_of_type(w->o->env, type->valuestring);
                const char *sf = cJSON_IsString(sub) ? sub->valuestring : "";
                if (!dir) continue;
                char local[PATH_MAX], path[4096];
                snprintf(local, sizeof local, "%s/%s%s%s", dir, sf, sf[0] ? "/" : "", fn->valuestring);
                srv_redis_file_path(path, sizeof path, type->valuestring, sf, fn->valuestring);
                size_t n = 0;
                char *bytes = srv_read_file(local, &n);
                if (!bytes)
                    return sd_error_set(err, SD_ERR_IO, "cannot read the output %s/%s%s%s: %s", type->valuestring, sf,
                                        sf[0] ? "/" : "", fn->valuestring, strerror(errno));
                sd_status rc = put_output(w, j, path, bytes, n, &deadline, err);
                free(bytes);
                if (rc) return rc;
            }
        }
    }
    return SD_OK;
}

/* ---- the heartbeat and control threads ---------------------------------------------- */

/* P:worker:NAME = what /system_stats shows of this worker, expiring unless
 * renewed, so a dead worker drops out of the list by itself. */
#define PRESENCE_PERIOD_S 2.0
#define PRESENCE_TTL "10"

static void presence(wk *w, redisContext *c) {
    char k[SRV_REDIS_KEY_MAX];
    key(k, sizeof k, w, "worker:", w->name);
    cJSON *o = cJSON_CreateObject();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *dev = w->o->env->device ? w->o->env->device : "cpu", *idx = getenv("SDFLOW_CUDA_DEVICE");
    pthread_mutex_lock(&w->mu);
    cJSON_AddStringToObject(o, "name", w->name);
    cJSON_AddStringToObject(o, "host", host);
    cJSON_AddNumberToObject(o, "pid", (double)getpid());
    cJSON_AddStringToObject(o, "device", dev);
    cJSON_AddNumberToObject(o, "index", !strcmp(dev, "cuda") && idx ? atoi(idx) : 0);
    if (w->run_id[0]) cJSON_AddStringToObject(o, "running", w->run_id);
    else cJSON_AddNullToObject(o, "running");
    cJSON_AddNumberToObject(o, "prompts_done", (double)w->done);
    cJSON_AddNumberToObject(o, "started_ms", (double)w->started_ms);
    pthread_mutex_unlock(&w->mu);
    cJSON_AddNumberToObject(o, "rss_bytes", (double)srv_rss_bytes());
    char *text = sd_json_print(o, 0);
    cJSON_Delete(o);
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = text ? srv_redis_cmdl(c, &err, "SET", k, text, "EX", PRESENCE_TTL, SRV_REDIS_END) : NULL;
    if (r) freeReplyObject(r);
    free(text);
}

static void presence_clear(wk *w, redisContext *c) {
    char k[SRV_REDIS_KEY_MAX];
    key(k, sizeof k, w, "worker:", w->name);
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmdl(c, &err, "DEL", k, SRV_REDIS_END);
    if (r) freeReplyObject(r);
}

/* Every claim_timeout/4 the running prompt's entry is claimed again (which
 * resets its idle time), every PRESENCE_PERIOD_S the worker's presence is
 * renewed, and every tick the stop flag is passed on to the running prompt,
 * whose executor only watches `interrupt`. */
static void *heartbeat_main(void *arg) {
    wk *w = arg;
    redisContext *c = NULL;
    char kjobs[SRV_REDIS_KEY_MAX];
    key(kjobs, sizeof kjobs, w, "jobs", NULL);
    double period = w->claim_timeout / 4 > 0.05 ? w->claim_timeout / 4 : 0.05, last = 0, last_presence = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int quit = w->quit;
        char entry[64];
        snprintf(entry, sizeof entry, "%s", w->run_entry);
        if (entry[0] && stopping(w)) w->interrupt = 1;
        pthread_mutex_unlock(&w->mu);
        if (quit) break;
        double now = srv_now();
        if (now - last_presence >= PRESENCE_PERIOD_S) {
            sd_error err;
            sd_error_clear(&err);
            if (!c && srv_redis_connect(w->o->redis_url, COMMAND_TIMEOUT_S, &c, &err)) c = NULL;
            if (c) presence(w, c);
            last_presence = now;
        }
        if (entry[0] && now - last >= period) {
            last = now;
            sd_error err;
            sd_error_clear(&err);
            if (!c && srv_redis_connect(w->o->redis_url, COMMAND_TIMEOUT_S, &c, &err)) c = NULL;
            redisReply *r = c ? srv_redis_cmdl(c, &err, "XCLAIM", kjobs, SRV_REDIS_GROUP, w->name, "0", entry,
                                               "JUSTID", SRV_REDIS_END)
                              : NULL;
            if (r) freeReplyObject(r);
            else if (c) {
                wlog(w, "warning: heartbeat: %s", err.msg);
                redisFree(c);
                c = NULL;
            }
        }
        sleep_s(0.05);
    }
    if (c) {
        presence_clear(w, c);
        redisFree(c);
    }
    return NULL;
}

static void on_control(wk *w, const char *msg, size_t n) {
    cJSON *m = cJSON_ParseWithLength(msg, n);
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(m, "op");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(m, "prompt_id");
    if (cJSON_IsString(op) && !strcmp(op->valuestring, "interrupt")) {
        pthread_mutex_lock(&w->mu);
        if (w->run_id[0] && (!cJSON_IsString(pid) || !strcmp(pid->valuestring, w->run_id))) {
            w->interrupt = 1;
            wlog(w, "prompt %s: interrupt asked", w->run_id);
        }
        pthread_mutex_unlock(&w->mu);
    } else if (cJSON_IsString(op) && !strcmp(op->valuestring, "free")) {
        pthread_mutex_lock(&w->mu);
        w->flag_free = 1;
        pthread_mutex_unlock(&w->mu);
    }
    cJSON_Delete(m);
}

static void on_control_message(void *user, const char *msg, size_t n) {
    on_control(user, msg, n);
}

static void *control_main(void *arg) {
    wk *w = arg;
    srv_redis_subscribe_loop(&w->ctl_sub);
    return NULL;
}

/* ---- one prompt ------------------------------------------------------------------- */

static const char *str_of(const redisReply *r) {
    return r && r->type == REDIS_REPLY_STRING ? r->str : "";
}

/* The finish script: history entry, ack. Returns 1 recorded, 0 another
 * worker's run was recorded first, -1 error (the entry stays pending). */
static int finish(wk *w, const char *id, const char *entry_id, const cJSON *entry, long long max_history) {
    char kjob[SRV_REDIS_KEY_MAX], kq[SRV_REDIS_KEY_MAX], kjobs[SRV_REDIS_KEY_MAX], kh[SRV_REDIS_KEY_MAX], khist[SRV_REDIS_KEY_MAX], kseq[SRV_REDIS_KEY_MAX], hpre[SRV_REDIS_KEY_MAX], maxh[32];
    key(kjob, sizeof kjob, w, "job:", id);
    key(kh, sizeof kh, w, "hist:", id);
    key(kq, sizeof kq, w, "queue", NULL);
    key(kjobs, sizeof kjobs, w, "jobs", NULL);
    key(khist, sizeof khist, w, "history", NULL);
    key(kseq, sizeof kseq, w, "hist_seq", NULL);
    key(hpre, sizeof hpre, w, "hist:", NULL);
    snprintf(maxh, sizeof maxh, "%lld", max_history > 0 ? max_history : 1000);
    char *text = sd_json_print(entry, 0);
    if (!text) return -1;
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_eval_allow_oom(w->c, &err, srv_redis_lua_finish, "6", kjob, kq, kjobs, kh, khist, kseq,
                                             id, text, SRV_REDIS_GROUP, entry_id, maxh, hpre, SRV_REDIS_END);
    free(text);
    if (!r) {
        wlog(w, "error: prompt %s: cannot record it: %s", id, err.msg);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return ok;
}

/* finish, until it is recorded (or another worker's run was): a lost
 * connection is reconnected and retried with back-off. -1 only when the
 * worker is stopping: the entry stays pending and another worker takes
 * the prompt over after the claim timeout. */
static int finish_retry(wk *w, const char *id, const char *entry_id, const cJSON *entry, long long max_history) {
    for (int k = 0;; k++) {
        if (!w->c) {
            sd_error e;
            sd_error_clear(&e);
            if (srv_redis_connect(w->o->redis_url, COMMAND_TIMEOUT_S, &w->c, &e)) w->c = NULL;
        }
        int rec = w->c ? finish(w, id, entry_id, entry, max_history) : -1;
        if (rec >= 0) return rec;
        if (w->c && w->c->err) {
            redisFree(w->c);
            w->c = NULL;
        }
        if (stopping(w)) return -1;
        sleep_s(k < 5 ? 0.1 * (double)(1u << k) : 2.0);
    }
}

static void ack_only(wk *w, const char *entry_id) {
    char kjobs[SRV_REDIS_KEY_MAX];
    key(kjobs, sizeof kjobs, w, "jobs", NULL);
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmdl(w->c, &err, "XACK", kjobs, SRV_REDIS_GROUP, entry_id, SRV_REDIS_END);
    if (r) freeReplyObject(r);
    if (r && (r = srv_redis_cmdl(w->c, &err, "XDEL", kjobs, entry_id, SRV_REDIS_END))) freeReplyObject(r);
}

/* 1 when a client cancelled the job while it ran (the cancel script's mark). */
static int job_cancelled(wk *w, const char *kjob) {
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmdl(w->c, &err, "HGET", kjob, "cancelled", SRV_REDIS_END);
    int yes = r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "1");
    if (r) freeReplyObject(r);
    return yes;
}

static void set_running(wk *w, const char *id, const char *entry) {
    pthread_mutex_lock(&w->mu);
    snprintf(w->run_id, sizeof w->run_id, "%s", id ? id : "");
    snprintf(w->run_entry, sizeof w->run_entry, "%s", entry ? entry : "");
    if (id) w->interrupt = 0;
    pthread_mutex_unlock(&w->mu);
}

static void run_entry(wk *w, sd_exec *ex, const char *entry_id, const char *id) {
    char kjob[SRV_REDIS_KEY_MAX];
    key(kjob, sizeof kjob, w, "job:", id);
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_eval_allow_oom(w->c, &err, srv_redis_lua_start, "1", kjob, entry_id, w->name, SRV_REDIS_END);
    if (!r) {
        wlog(w, "error: prompt %s: %s", id, err.msg);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 7) { /* cancelled, or done by another worker */
        freeReplyObject(r);
        ack_only(w, entry_id);
        return;
    }
    int attempts = atoi(str_of(r->element[4]));
    char prev[128]; /* the reply is freed below */
    snprintf(prev, sizeof prev, "%s", str_of(r->element[5]));
    long long max_history = atoll(str_of(r->element[6]));
    if (prev[0] && strcmp(prev, w->name)) wlog(w, "prompt %s reclaimed from %s (attempt %d)", id, prev, attempts);
    srv_job *j = NULL;
    sd_status rc = srv_job_restore(id, strtod(str_of(r->element[3]), NULL), cJSON_Parse(str_of(r->element[0])),
                                   cJSON_Parse(str_of(r->element[1])), cJSON_Parse(str_of(r->element[2])), &j, &err);
    freeReplyObject(r);
    set_running(w, id, entry_id);
    cJSON *entry = NULL, *note = NULL; /* note: the message the client gets when the job does not run */
    const char *note_event = "execution_error";
    sd_status run_rc = SD_OK;
    if (rc) {
        /* a stored prompt that no longer parses cannot run anywhere: record why */
        srv_job stub;
        memset(&stub, 0, sizeof stub);
        snprintf(stub.id, sizeof stub.id, "%s", id);
        char msg[SD_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "the queued prompt cannot be read: %s", err.msg);
        entry = srv_job_failed_entry(&stub, msg, NULL);
        run_rc = rc;
    } else if (job_cancelled(w, kjob)) {
        /* cancelled while it ran on a worker that died since, or between the
         * start script and set_running (the interrupt message found no
         * running prompt): the mark in the job stops it before it runs */
        wlog(w, "prompt %s was cancelled: recorded as interrupted, not run", id);
        entry = srv_job_interrupted_entry(j, &note);
        note_event = "execution_interrupted";
        run_rc = SD_ERR_CANCELLED;
    } else if (attempts > w->max_attempts) {
        char msg[512];
        snprintf(msg, sizeof msg, "gave up after %d attempts: the workers running it (last: %s) stopped without "
                 "finishing", attempts - 1, prev[0] ? prev : "?");
        wlog(w, "prompt %s: %s", id, msg);
        entry = srv_job_failed_entry(j, msg, &note);
        run_rc = SD_ERR_INTERNAL;
    } else if ((rc = fetch_inputs(w, j, &err))) {
        char msg[SD_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "input files: %s", err.msg);
        wlog(w, "error: prompt %s: %s", id, msg);
        entry = srv_job_failed_entry(j, msg, &note);
        run_rc = rc;
    } else {
        wlog(w, "prompt %s: attempt %d on %s", id, attempts, w->name);
        publish_status(w);
        srv_run_opts ro = {
            .env = w->o->env,
            .cache = w->cache,
            .interrupt = &w->interrupt,
            .preview = w->o->preview,
            .preview_user = w->o->preview_user,
            .preview_interval = w->o->preview_interval,
            .sink = {sink_send, sink_binary, sink_log, w},
            .publish = publish_outputs,
            .publish_user = w,
        };
        entry = srv_job_run(ex, j, &ro, &run_rc);
    }
    if (note && j && j->client_id) sink_send(w, j->client_id, note_event, note);
    else cJSON_Delete(note);
    if (run_rc == SD_ERR_CANCELLED && stopping(w) && !job_cancelled(w, kjob)) {
        /* shutting down: not this prompt's fault; another worker takes it after the claim timeout */
        wlog(w, "prompt %s left for another worker (this one is stopping)", id);
    } else if (entry) {
        int rec = finish_retry(w, id, entry_id, entry, max_history);
        if (rec == 0) wlog(w, "prompt %s: another worker recorded it first; this run is not kept", id);
        publish_status(w); /* ComfyUI's order: the queue status, then executing null */
        if (rec >= 0 && j) {
            srv_sink sink = {sink_send, sink_binary, sink_log, w};
            srv_job_send_finished(&sink, j);
        }
    }
    set_running(w, NULL, NULL);
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_mutex_unlock(&w->mu);
    cJSON_Delete(entry);
    srv_job_free(j);
}

/* XAUTOCLAIM first (prompts of workers that went silent), then new ones.
 * Returns 1 with the entry and prompt id, 0 when none came, -1 on a
 * connection error. */
static int next_entry(wk *w, char *cursor, size_t cn, char entry[64], char id[128]) {
    char kjobs[SRV_REDIS_KEY_MAX], idle[32];
    key(kjobs, sizeof kjobs, w, "jobs", NULL);
    snprintf(idle, sizeof idle, "%lld", (long long)(w->claim_timeout * 1000));
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmdl(w->c, &err, "XAUTOCLAIM", kjobs, SRV_REDIS_GROUP, w->name, idle, cursor,
                                   "COUNT", "1", SRV_REDIS_END);
    if (!r) {
        wlog(w, "error: %s", err.msg);
        if (strstr(err.msg, "NOGROUP")) { /* the stream was deleted under us: make it again */
            sd_error_clear(&err);
            srv_redis_ensure_group(w->c, w->prefix, &err);
            return 0;
        }
        return w->c->err ? -1 : 0;
    }
    const redisReply *list = NULL;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING) snprintf(cursor, cn, "%s", r->element[0]->str);
        list = r->element[1];
    }
    redisReply *rr = NULL;
    if (!list || list->type != REDIS_REPLY_ARRAY || !list->elements) {
        freeReplyObject(r);
        r = NULL;
        rr = srv_redis_cmdl(w->c, &err, "XREADGROUP", "GROUP", SRV_REDIS_GROUP, w->name, "COUNT", "1", "BLOCK",
                            READ_BLOCK_MS, "STREAMS", kjobs, ">", SRV_REDIS_END);
        if (!rr) {
            wlog(w, "error: %s", err.msg);
            return w->c->err ? -1 : 0;
        }
        /* [[stream, [[entry, [field, value, ...]]]]] or nil */
        if (rr->type == REDIS_REPLY_ARRAY && rr->elements == 1 && rr->element[0]->elements == 2)
            list = rr->element[0]->element[1];
        else
            list = NULL;
    }
    int got = 0;
    if (list && list->type == REDIS_REPLY_ARRAY && list->elements) {
        const redisReply *e = list->element[0];
        if (e->type == REDIS_REPLY_ARRAY && e->elements == 2 && e->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(entry, 64, "%s", e->element[0]->str);
            const redisReply *f = e->element[1];
            for (size_t i = 0; f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2)
                if (!strcmp(str_of(f->element[i]), "id")) snprintf(id, 128, "%s", str_of(f->element[i + 1]));
            got = 1;
        }
    }
    if (r) freeReplyObject(r);
    if (rr) freeReplyObject(rr);
    return got;
}

/* A worker that stops with nothing pending leaves the consumer group, so
 * the group lists only workers that may still come back for a prompt. One
 * with a prompt left pending stays: deleting it would drop that prompt. */
static void leave_group(wk *w) {
    char kjobs[SRV_REDIS_KEY_MAX];
    key(kjobs, sizeof kjobs, w, "jobs", NULL);
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmdl(w->c, &err, "XPENDING", kjobs, SRV_REDIS_GROUP, "-", "+", "1", w->name, SRV_REDIS_END);
    int none = r && r->type == REDIS_REPLY_ARRAY && r->elements == 0;
    if (r) freeReplyObject(r);
    if (none && (r = srv_redis_cmdl(w->c, &err, "XGROUP", "DELCONSUMER", kjobs, SRV_REDIS_GROUP, w->name, SRV_REDIS_END)))
        freeReplyObject(r);
}

/* ---- the loop ----------------------------------------------------------------------- */

sd_status sd_worker_run(const sd_worker_opts *o, sd_error *err) {
    wk w;
    memset(&w, 0, sizeof w);
    w.o = o;
    w.prefix = o->prefix && *o->prefix ? o->prefix : "sdflow";
    w.claim_timeout = o->claim_timeout > 0 ? o->claim_timeout : 60;
    w.max_attempts = o->max_attempts > 0 ? o->max_attempts : 3;
    w.ttl = o->ttl > 0 ? o->ttl : 86400;
    w.budget = o->memo_budget ? o->memo_budget : (size_t)4 << 30;
    w.log = o->log ? o->log : stderr;
    if (o->name && *o->name) {
        snprintf(w.name, sizeof w.name, "%s", o->name);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(w.name, sizeof w.name, "%s:%ld", host, (long)getpid());
    }
    if (!o->env) return sd_error_set(err, SD_ERR_INVALID, "sd_worker_run: no environment");
    if (srv_redis_check_prefix(w.prefix, err)) return err->code;
    w.oom_retry = o->oom_retry > 0 ? o->oom_retry : 30;
    pthread_mutex_init(&w.mu, NULL);
    pthread_mutex_init(&w.log_mu, NULL);
    sd_status rc = srv_redis_connect(o->redis_url, COMMAND_TIMEOUT_S, &w.c, err);
    /* a full Redis refuses to create the stream and group: wait for room
     * (an outage of hours must not need someone to restart the workers) */
    for (int k = 0; !rc; k++) {
        rc = srv_redis_ensure_group(w.c, w.prefix, err);
        if (!rc || !srv_redis_is_oom(err) || stopping(&w)) break;
        if (!k) wlog(&w, "redis is full (maxmemory): waiting for room to join the queue (%s)", err->msg);
        sleep_s(k < 4 ? 0.25 * (double)(1u << k) : 2.0);
        sd_error_clear(err);
        rc = SD_OK;
    }
    if (rc) {
        if (w.c) redisFree(w.c);
        pthread_mutex_destroy(&w.mu);
        pthread_mutex_destroy(&w.log_mu);
        return rc;
    }
    w.started_ms = srv_time_ms();
    w.cache = o->cache;
    if (o->shared_cache_max) {
        w.shared = (sd_shared_cache){.conn = &w.c, .prefix = w.prefix, .local = o->cache,
                                     .max_bytes = o->shared_cache_max, .ttl_s = w.ttl};
        w.shared_i = sd_shared_cache_iface(&w.shared);
        w.cache = &w.shared_i;
    }
    sd_exec *ex = sd_exec_new();
    if (!ex) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc && pthread_create(&w.hb_thread, NULL, heartbeat_main, &w) == 0) w.hb_started = 1;
    key(w.ctl_channel, sizeof w.ctl_channel, &w, "control", NULL);
    w.ctl_sub = (srv_redis_sub){.url = o->redis_url, .channel = w.ctl_channel, .mu = &w.mu, .quit = &w.quit,
                                .live = &w.ctl, .on_message = on_control_message, .user = &w};
    if (!rc && pthread_create(&w.ctl_thread, NULL, control_main, &w) == 0) w.ctl_started = 1;
    if (!rc && (!w.hb_started || !w.ctl_started)) rc = sd_error_set(err, SD_ERR_INTERNAL, "cannot start the worker's threads");
    sd_log_fn old_log = o->env->log;
    void *old_log_user = o->env->log_user;
    if (!rc) {
        o->env->claim_name = claim_name;
        o->env->claim_user = &w;
        o->env->log = on_env_log;
        o->env->log_user = &w;
        wlog(&w, "sdflow worker %s: ready (redis prefix %s, claim timeout %gs, shared cache %s)", w.name, w.prefix,
             w.claim_timeout, o->shared_cache_max ? "on" : "off");
    }
    char cursor[64] = "0-0";
    int down = 0;
    while (!rc && !stopping(&w)) {
        if (!w.c) {
            sd_error e;
            sd_error_clear(&e);
            if (srv_redis_connect(o->redis_url, COMMAND_TIMEOUT_S, &w.c, &e)) {
                w.c = NULL;
                if (!down++) wlog(&w, "error: %s (retrying every second)", e.msg);
                sleep_s(1);
                continue;
            }
            if (down) wlog(&w, "redis: connected again");
            down = 0;
        }
        pthread_mutex_lock(&w.mu);
        int do_free = w.flag_free;
        w.flag_free = 0;
        pthread_mutex_unlock(&w.mu);
        if (do_free) {
            sd_exec_forget(ex);
            malloc_trim(0);
            wlog(&w, "memory: models and cached results released (/free)");
        }
        char entry[64] = "", id[128] = "";
        int got = next_entry(&w, cursor, sizeof cursor, entry, id);
        if (got < 0) {
            redisFree(w.c);
            w.c = NULL;
            continue;
        }
        if (!got) continue;
        if (stopping(&w)) { /* taken while the stop came: another worker claims it after the timeout */
            wlog(&w, "prompt %s left for another worker (this one is stopping)", id);
            break;
        }
        if (!id[0]) { /* not one of ours */
            ack_only(&w, entry);
            continue;
        }
        run_entry(&w, ex, entry, id);
        size_t dropped = srv_job_keep_budget(ex, w.budget);
        if (dropped) wlog(&w, "memory: released %zu cached results (resident %.0f MiB)", dropped,
                          srv_rss_bytes() / 1048576.0);
    }
    if (!rc) wlog(&w, "sdflow worker %s: stopping (shared cache: %lu hits, %lu stored)", w.name, w.shared.hits,
                  w.shared.stores);
    if (!rc && w.c) leave_group(&w);
    srv_redis_subscribe_stop(&w.ctl_sub); /* also ends the heartbeat (w.quit) */
    if (w.hb_started) pthread_join(w.hb_thread, NULL);
    if (w.ctl_started) pthread_join(w.ctl_thread, NULL);
    o->env->claim_name = NULL;
    o->env->claim_user = NULL;
    o->env->log = old_log;
    o->env->log_user = old_log_user;
    sd_exec_free(ex);
    if (w.c) redisFree(w.c);
    pthread_mutex_destroy(&w.mu);
    pthread_mutex_destroy(&w.log_mu);
    return rc;
}
