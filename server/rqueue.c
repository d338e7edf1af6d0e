/* rqueue.c - `sdflow serve --redis`: the queue and the history live in
 * Redis and prompts run on `sdflow worker` processes (docs/scaling.md,
 * redis.h for the keys). The server validates and enqueues, answers /queue
 * and /history from Redis, forwards the workers' messages (P:events) to its
 * WebSocket clients and asks workers to interrupt or free (P:control).
 *
 * Each request opens its own connection (a redisContext is not
 * thread-safe and civetweb runs requests on many threads); the subscriber
 * thread holds one more. The server keeps no prompt state of its own, so a
 * restarted server serves the same queue and history. */
#define _GNU_SOURCE
#include <civetweb.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "redis.h"
#include "core/json_util.h"

#define CONNECT_TIMEOUT_S 5.0

static redisContext *rq_connect(srv *s, sd_error *err) {
    redisContext *c = NULL;
    if (srv_redis_connect(s->o->redis_url, CONNECT_TIMEOUT_S, &c, err)) return NULL;
    return c;
}

static int reply_redis_down(srv *s, struct mg_connection *c, const sd_error *err) {
    srv_log(s, "error: %s", err->msg);
    if (srv_redis_is_oom(err))
        return srv_reply_error(c, 503, "redis_full",
                               "Redis is full (its maxmemory is reached): nothing was queued or stored; try again "
                               "once the prompts running now have finished (%s)", err->msg);
    return srv_reply_error(c, 503, "redis_unavailable", "%s", err->msg);
}

/* The JSON body and a connection for a POST handler: 0 with both (the
 * caller frees them), else the status already replied. */
static int rq_request(srv *s, struct mg_connection *c, int allow_empty, cJSON **body, redisContext **rc) {
    int st = srv_read_json(s, c, allow_empty, body);
    if (st) return st;
    sd_error err;
    sd_error_clear(&err);
    if ((*rc = rq_connect(s, &err))) return 0;
    cJSON_Delete(*body);
    *body = NULL;
    return reply_redis_down(s, c, &err);
}

static void key(char *buf, size_t n, srv *s, const char *name, const char *id) {
    srv_redis_key(buf, n, s->rq_prefix, name, id);
}

/* ---- POST /prompt -------------------------------------------------------------- */

int srv_rq_post_prompt(srv *s, struct mg_connection *c) {
    cJSON *body = NULL, *dropped = NULL;
    srv_job *j = NULL;
    int st = srv_read_prompt(s, c, &body, &j, &dropped);
    if (st) return st;
    char number[64] = "";
    const cJSON *num = cJSON_GetObjectItemCaseSensitive(body, "number");
    if (cJSON_IsNumber(num) && isfinite(num->valuedouble)) snprintf(number, sizeof number, "%.17g", num->valuedouble);
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "front"))) snprintf(number, sizeof number, "-");
    cJSON_Delete(body);
    char *prompt = sd_json_print(j->prompt, 0), *extra = sd_json_print(j->extra_data, 0),
         *outputs = sd_json_print(j->outputs, 0);
    char kjob[SRV_REDIS_KEY_MAX], kqueue[SRV_REDIS_KEY_MAX], kjobs[SRV_REDIS_KEY_MAX], knum[SRV_REDIS_KEY_MAX], maxq[32], now[32], maxh[32];
    key(kjob, sizeof kjob, s, "job:", j->id);
    key(kqueue, sizeof kqueue, s, "queue", NULL);
    key(kjobs, sizeof kjobs, s, "jobs", NULL);
    key(knum, sizeof knum, s, "number", NULL);
    snprintf(maxq, sizeof maxq, "%zu", s->max_queue);
    snprintf(now, sizeof now, "%lld", srv_time_ms());
    snprintf(maxh, sizeof maxh, "%zu", s->max_history);
    sd_error err;
    sd_error_clear(&err);
    redisContext *rc = prompt && extra && outputs ? rq_connect(s, &err) : NULL;
    redisReply *r = NULL;
    if (rc) {
        const char *argv[] = {"EVAL", srv_redis_lua_enqueue, "4", kjob, kqueue, kjobs, knum, j->id, number,
                              prompt, extra, outputs, maxq, now, maxh};
        r = srv_redis_cmd(rc, &err, (int)(sizeof argv / sizeof *argv), argv, NULL);
    }
    free(prompt);
    free(extra);
    free(outputs);
    if (!r) {
        cJSON_Delete(dropped);
        srv_job_free(j);
        if (rc) redisFree(rc);
        if (!err.msg[0]) return srv_reply_error(c, 500, "out_of_memory", "out of memory");
        return reply_redis_down(s, c, &err);
    }
    redisFree(rc);
    if (r->type == REDIS_REPLY_INTEGER) {
        long long code = r->integer;
        freeReplyObject(r);
        cJSON_Delete(dropped);
        srv_job_free(j);
        if (code == -1) return srv_reply_error(c, 409, "duplicate_prompt_id", "a prompt with this prompt_id is queued already");
        return srv_reply_error(c, 503, "queue_full", "the queue holds %zu prompts already", s->max_queue);
    }
    double n = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
        n = strtod(r->element[1]->str, NULL);
    freeReplyObject(r);
    srv_log(s, "prompt %s queued on redis (number %g, %zu nodes)", j->id, n, sd_graph_count(j->graph));
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "prompt_id", j->id);
    cJSON_AddNumberToObject(out, "number", n);
    cJSON_AddItemToObject(out, "node_errors", dropped);
    srv_job_free(j);
    srv_ws_broadcast_status(s);
    return srv_reply_json(c, 200, out);
}

/* ---- /queue ------------------------------------------------------------------------ */

static cJSON *parse_or_null(const redisReply *r) {
    if (!r || r->type != REDIS_REPLY_STRING) return cJSON_CreateNull();
    cJSON *j = cJSON_ParseWithLength(r->str, r->len);
    return j ? j : cJSON_CreateNull();
}

size_t srv_rq_queue_remaining(srv *s) {
    sd_error err;
    sd_error_clear(&err);
    redisContext *rc = rq_connect(s, &err);
    if (!rc) return 0;
    char kqueue[SRV_REDIS_KEY_MAX];
    key(kqueue, sizeof kqueue, s, "queue", NULL);
    redisReply *r = srv_redis_cmdl(rc, &err, "ZCARD", kqueue, SRV_REDIS_END);
    size_t n = r && r->type == REDIS_REPLY_INTEGER && r->integer > 0 ? (size_t)r->integer : 0;
    if (r) freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* P:<prefix><id> for each id of a ZRANGE reply (an id that is not a string
 * gets a key nothing has); NULL without memory. */
static char **id_keys(srv *s, const char *prefix, const redisReply *ids, size_t n) {
    char **keys = calloc(n ? n : 1, sizeof *keys);
    for (size_t i = 0; keys && i < n; i++) {
        const redisReply *id = ids->element[i];
        if (asprintf(&keys[i], "%s:%s%s", s->rq_prefix, prefix, id->type == REDIS_REPLY_STRING ? id->str : "") < 0) {
            keys[i] = NULL;
            for (size_t k = 0; k < i; k++) free(keys[k]);
            free(keys);
            return NULL;
        }
    }
    return keys;
}

static void free_keys(char **keys, size_t n) {
    for (size_t i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
}

int srv_rq_get_queue(srv *s, struct mg_connection *c) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *out = srv_rq_queue_lists(s, &err);
    if (!out) return reply_redis_down(s, c, &err);
    return srv_reply_json(c, 200, out);
}

cJSON *srv_rq_queue_lists(srv *s, sd_error *errp) {
    sd_error err;
    sd_error_clear(&err);
    redisContext *rc = rq_connect(s, &err);
    if (!rc) { *errp = err; return NULL; }
    char kqueue[SRV_REDIS_KEY_MAX];
    key(kqueue, sizeof kqueue, s, "queue", NULL);
    redisReply *ids = srv_redis_cmdl(rc, &err, "ZRANGE", kqueue, "0", "-1", SRV_REDIS_END);
    if (!ids) {
        redisFree(rc);
        *errp = err;
        return NULL;
    }
    cJSON *out = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(out, "queue_running");
    cJSON *pending = cJSON_AddArrayToObject(out, "queue_pending");
    size_t n = ids->type == REDIS_REPLY_ARRAY ? ids->elements : 0;
    char **keys = id_keys(s, "job:", ids, n);
    redisReply **f = calloc(n ? n : 1, sizeof *f);
    static const char *const fields[] = {"state", "number", "prompt", "extra_data", "outputs"};
    if (!keys || !f) sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
    else srv_redis_each_key(rc, "HMGET", keys, n, fields, 5, f, &err);
    for (size_t i = 0; !err.msg[0] && i < n; i++) {
        const redisReply *id = ids->element[i];
        if (!f[i] || f[i]->type != REDIS_REPLY_ARRAY || f[i]->elements != 5 || f[i]->element[0]->type != REDIS_REPLY_STRING)
            continue; /* finished since the ZRANGE */
        const redisReply *const *v = (const redisReply *const *)f[i]->element;
        /* [number, prompt_id, prompt, extra_data, outputs_to_execute] */
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(v[1]->type == REDIS_REPLY_STRING ? strtod(v[1]->str, NULL) : 0));
        cJSON_AddItemToArray(e, cJSON_CreateString(id->str));
        cJSON_AddItemToArray(e, parse_or_null(v[2]));
        cJSON_AddItemToArray(e, parse_or_null(v[3]));
        cJSON_AddItemToArray(e, parse_or_null(v[4]));
        cJSON_AddItemToArray(strcmp(v[0]->str, "running") ? pending : running, e);
    }
    for (size_t i = 0; f && i < n; i++)
        if (f[i]) freeReplyObject(f[i]);
    free(f);
    free_keys(keys, n);
    freeReplyObject(ids);
    redisFree(rc);
    if (err.msg[0]) {
        cJSON_Delete(out);
        *errp = err;
        return NULL;
    }
    return out;
}

static void publish_control(redisContext *rc, srv *s, cJSON *msg) {
    char kctl[SRV_REDIS_KEY_MAX];
    key(kctl, sizeof kctl, s, "control", NULL);
    char *text = sd_json_print(msg, 0);
    cJSON_Delete(msg);
    if (!text) return;
    sd_error err;
    sd_error_clear(&err);
    redisReply *r = srv_redis_cmdl(rc, &err, "PUBLISH", kctl, text, SRV_REDIS_END);
    if (r) freeReplyObject(r);
    else srv_log(s, "error: %s", err.msg);
    free(text);
}

/* Pending: removed. Running: its worker is told to interrupt it. */
static sd_status cancel(srv *s, redisContext *rc, const char *id, sd_error *err) {
    char kjob[SRV_REDIS_KEY_MAX], kqueue[SRV_REDIS_KEY_MAX], kjobs[SRV_REDIS_KEY_MAX];
    key(kjob, sizeof kjob, s, "job:", id);
    key(kqueue, sizeof kqueue, s, "queue", NULL);
    key(kjobs, sizeof kjobs, s, "jobs", NULL);
    redisReply *r = srv_redis_eval_allow_oom(rc, err, srv_redis_lua_cancel, "3", kjob, kqueue, kjobs, id, SRV_REDIS_END);
    if (!r) return err->code;
    long long what = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    if (what == 1) srv_log(s, "prompt %s removed from the queue", id);
    if (what == 2) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "op", "interrupt");
        cJSON_AddStringToObject(m, "prompt_id", id);
        publish_control(rc, s, m);
        srv_log(s, "prompt %s: interrupt sent to its worker", id);
    }
    return SD_OK;
}

int srv_rq_post_queue(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    redisContext *rc = NULL;
    int st = rq_request(s, c, 0, &body, &rc);
    if (st) return st;
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(body, "delete");
    if (del && !cJSON_IsArray(del)) {
        cJSON_Delete(body);
        redisFree(rc);
        return srv_reply_error(c, 400, "bad_request", "'delete' must be a list of prompt ids");
    }
    sd_error err;
    sd_error_clear(&err);
    sd_status status = SD_OK;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "clear"))) {
        /* every pending prompt; the running ones go on (ComfyUI's clear) */
        char kqueue[SRV_REDIS_KEY_MAX];
        key(kqueue, sizeof kqueue, s, "queue", NULL);
        redisReply *ids = srv_redis_cmdl(rc, &err, "ZRANGE", kqueue, "0", "-1", SRV_REDIS_END);
        if (!ids) status = err.code;
        for (size_t i = 0; ids && i < ids->elements && !status; i++) {
            if (ids->element[i]->type != REDIS_REPLY_STRING) continue;
            char kjob[SRV_REDIS_KEY_MAX];
            key(kjob, sizeof kjob, s, "job:", ids->element[i]->str);
            redisReply *f = srv_redis_cmdl(rc, &err, "HGET", kjob, "state", SRV_REDIS_END);
            int pend = f && f->type == REDIS_REPLY_STRING && !strcmp(f->str, "pending");
            if (f) freeReplyObject(f);
            if (pend) status = cancel(s, rc, ids->element[i]->str, &err);
        }
        if (ids) freeReplyObject(ids);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, del) {
        if (!status && cJSON_IsString(it) && strlen(it->valuestring) < 128) status = cancel(s, rc, it->valuestring, &err);
    }
    redisFree(rc);
    cJSON_Delete(body);
    if (status) return reply_redis_down(s, c, &err);
    srv_ws_broadcast_status(s);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

int srv_rq_post_interrupt(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    redisContext *rc = NULL;
    int st = rq_request(s, c, 1, &body, &rc);
    if (st) return st;
    sd_error err;
    sd_error_clear(&err);
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(body, "prompt_id");
    sd_status status = SD_OK;
    if (cJSON_IsString(pid) && strlen(pid->valuestring) < 128) {
        status = cancel(s, rc, pid->valuestring, &err);
    } else { /* no id: every running prompt (ComfyUI's "the" running prompt) */
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "op", "interrupt");
        publish_control(rc, s, m);
    }
    redisFree(rc);
    cJSON_Delete(body);
    if (status) return reply_redis_down(s, c, &err);
    srv_ws_broadcast_status(s);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

int srv_rq_post_free(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    redisContext *rc = NULL;
    int st = rq_request(s, c, 1, &body, &rc);
    if (st) return st;
    sd_error err;
    sd_error_clear(&err);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "op", "free");
    cJSON_AddBoolToObject(m, "unload_models", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "unload_models")));
    cJSON_AddBoolToObject(m, "free_memory", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "free_memory")));
    publish_control(rc, s, m);
    redisFree(rc);
    cJSON_Delete(body);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

/* ---- /history ------------------------------------------------------------------------- */

int srv_rq_get_history(srv *s, struct mg_connection *c, const char *id) {
    long max_items = -1, offset = -1;
    if (!id) {
        char *mi = srv_query(c, "max_items"), *of = srv_query(c, "offset");
        if (mi) max_items = strtol(mi, NULL, 10);
        if (of) offset = strtol(of, NULL, 10);
        free(mi);
        free(of);
    }
    sd_error err;
    sd_error_clear(&err);
    cJSON *out = srv_rq_history_json(s, id, max_items, offset, &err);
    if (!out) return reply_redis_down(s, c, &err);
    return srv_reply_json(c, 200, out);
}

cJSON *srv_rq_history_json(srv *s, const char *id, long max_items, long offset, sd_error *errp) {
    sd_error err;
    sd_error_clear(&err);
    redisContext *rc = rq_connect(s, &err);
    if (!rc) { *errp = err; return NULL; }
    cJSON *out = cJSON_CreateObject();
    if (id) {
        char kh[SRV_REDIS_KEY_MAX];
        key(kh, sizeof kh, s, "hist:", id);
        redisReply *r = strlen(id) < 128 ? srv_redis_cmdl(rc, &err, "GET", kh, SRV_REDIS_END) : NULL;
        if (r && r->type == REDIS_REPLY_STRING) {
            cJSON *e = cJSON_ParseWithLength(r->str, r->len);
            if (e) cJSON_AddItemToObject(out, id, e);
        }
        if (r) freeReplyObject(r);
    } else {
        char khist[SRV_REDIS_KEY_MAX];
        key(khist, sizeof khist, s, "history", NULL);
        redisReply *ids = srv_redis_cmdl(rc, &err, "ZRANGE", khist, "0", "-1", SRV_REDIS_END); /* oldest first */
        size_t n = ids && ids->type == REDIS_REPLY_ARRAY ? ids->elements : 0;
        /* ComfyUI: max_items alone = the newest that many; offset counts from the oldest */
        if (offset < 0 && max_items >= 0) offset = (long)n - max_items;
        if (offset < 0) offset = 0;
        size_t from = (size_t)offset < n ? (size_t)offset : n;
        size_t count = max_items >= 0 && (size_t)max_items < n - from ? (size_t)max_items : n - from;
        char **keys = count ? id_keys(s, "hist:", ids, n) : NULL;
        redisReply **r = calloc(count ? count : 1, sizeof *r);
        if (count && (!keys || !r)) sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        else if (count) srv_redis_each_key(rc, "GET", keys + from, count, NULL, 0, r, &err);
        for (size_t i = 0; !err.msg[0] && i < count; i++) {
            const redisReply *e = ids->element[from + i];
            cJSON *entry = r[i] && r[i]->type == REDIS_REPLY_STRING ? cJSON_ParseWithLength(r[i]->str, r[i]->len) : NULL;
            if (entry && e->type == REDIS_REPLY_STRING) cJSON_AddItemToObject(out, e->str, entry);
            else cJSON_Delete(entry); /* deleted since the ZRANGE */
        }
        for (size_t i = 0; i < count; i++)
            if (r[i]) freeReplyObject(r[i]);
        free(r);
        free_keys(keys, n);
        if (ids) freeReplyObject(ids);
    }
    redisFree(rc);
    if (err.msg[0]) {
        cJSON_Delete(out);
        *errp = err;
        return NULL;
    }
    return out;
}

int srv_rq_post_history(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    redisContext *rc = NULL;
    int st = rq_request(s, c, 0, &body, &rc);
    if (st) return st;
    sd_error err;
    sd_error_clear(&err);
    char khist[SRV_REDIS_KEY_MAX], hprefix[SRV_REDIS_KEY_MAX];
    key(khist, sizeof khist, s, "history", NULL);
    key(hprefix, sizeof hprefix, s, "hist:", NULL);
    redisReply *r = NULL;
    int ok = 1;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "clear"))) {
        r = srv_redis_cmdl(rc, &err, "EVAL", srv_redis_lua_history_clear, "1", khist, hprefix, SRV_REDIS_END);
        ok = r != NULL;
        if (r) freeReplyObject(r);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(body, "delete")) {
        if (!ok || !cJSON_IsString(it) || strlen(it->valuestring) >= 128) continue;
        char kh[SRV_REDIS_KEY_MAX];
        key(kh, sizeof kh, s, "hist:", it->valuestring);
        if ((r = srv_redis_cmdl(rc, &err, "ZREM", khist, it->valuestring, SRV_REDIS_END))) freeReplyObject(r);
        if (r && (r = srv_redis_cmdl(rc, &err, "DEL", kh, SRV_REDIS_END))) freeReplyObject(r);
        ok = r != NULL;
    }
    redisFree(rc);
    cJSON_Delete(body);
    if (!ok) return reply_redis_down(s, c, &err);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

/* ---- workers ------------------------------------------------------------------------------ */

cJSON *srv_rq_workers(srv *s) {
    cJSON *a = cJSON_CreateArray();
    sd_error err;
    sd_error_clear(&err);
    redisContext *rc = rq_connect(s, &err);
    if (!rc) return a;
    char pattern[SRV_REDIS_KEY_MAX];
    key(pattern, sizeof pattern, s, "worker:*", NULL);
    char cursor[32] = "0";
    int rounds = 0;
    do { /* SCAN, not KEYS: a large shared Redis is not blocked */
        redisReply *r = srv_redis_cmdl(rc, &err, "SCAN", cursor, "MATCH", pattern, "COUNT", "100", SRV_REDIS_END);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r) freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->type == REDIS_REPLY_STRING ? r->element[0]->str : "0");
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *k = r->element[1]->element[i];
            if (k->type != REDIS_REPLY_STRING) continue;
            redisReply *v = srv_redis_cmdl(rc, &err, "GET", k->str, SRV_REDIS_END);
            cJSON *o = v && v->type == REDIS_REPLY_STRING ? cJSON_ParseWithLength(v->str, v->len) : NULL;
            if (cJSON_IsObject(o)) cJSON_AddItemToArray(a, o);
            else cJSON_Delete(o);
            if (v) freeReplyObject(v);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") && ++rounds < 10000);
    redisFree(rc);
    return a;
}

/* ---- files ------------------------------------------------------------------------------ */

sd_status srv_rq_get_file(srv *s, const char *type, const char *subfolder, const char *name, char **bytes, size_t *n,
                          sd_error *err) {
    redisContext *rc = rq_connect(s, err);
    if (!rc) return err->code;
    char path[4096];
    srv_redis_file_path(path, sizeof path, type, subfolder, name);
    sd_status st = srv_redis_get_file(rc, s->rq_prefix, path, bytes, n, err);
    redisFree(rc);
    return st;
}

sd_status srv_rq_put_file(srv *s, const char *type, const char *subfolder, const char *name, const void *bytes,
                          size_t n, sd_error *err) {
    redisContext *rc = rq_connect(s, err);
    if (!rc) return err->code;
    char path[4096];
    srv_redis_file_path(path, sizeof path, type, subfolder, name);
    sd_status st = srv_redis_put_file(rc, s->rq_prefix, path, bytes, n, s->rq_ttl, NULL, err);
    redisFree(rc);
    return st;
}

/* ---- the workers' messages ------------------------------------------------------------------ */

static void forward(srv *s, const char *msg, size_t n) {
    char kind, sid[128];
    const char *payload;
    size_t pn;
    if (!srv_redis_event_unpack(msg, n, &kind, sid, sizeof sid, &payload, &pn)) return;
    if (kind == 'J') {
        cJSON *m = cJSON_ParseWithLength(payload, pn);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
        if (cJSON_IsString(type)) {
            cJSON *data = cJSON_DetachItemFromObjectCaseSensitive(m, "data");
            srv_ws_send(s, sid[0] ? sid : NULL, type->valuestring, data ? data : cJSON_CreateObject());
        }
        cJSON_Delete(m);
    } else if (kind == 'B' && pn >= 4) { /* the worker's frame as it is */
        srv_ws_send_frame(s, sid[0] ? sid : NULL, payload, pn);
    }
}

static void on_event_message(void *user, const char *msg, size_t n) {
    forward(user, msg, n);
}

static void on_sub_state(void *user, int up, const char *why) {
    if (up) srv_log(user, "redis: connected again");
    else srv_log(user, "error: redis subscription: %s (retrying every second)", why);
}

static void *subscriber_main(void *arg) {
    srv *s = arg;
    srv_redis_subscribe_loop(&s->rq_subscription);
    return NULL;
}

int srv_rq_start(srv *s, sd_error *err) {
    redisContext *rc = rq_connect(s, err);
    if (!rc) return -1;
    sd_status st = srv_redis_ensure_group(rc, s->rq_prefix, err);
    redisFree(rc);
    if (st) return -1;
    pthread_mutex_init(&s->rq_mu, NULL);
    key(s->rq_events, sizeof s->rq_events, s, "events", NULL);
    s->rq_subscription = (srv_redis_sub){.url = s->o->redis_url, .channel = s->rq_events, .mu = &s->rq_mu,
                                         .quit = &s->rq_quit, .live = &s->rq_sub, .on_message = on_event_message,
                                         .on_state = on_sub_state, .user = s};
    if (pthread_create(&s->rq_thread, NULL, subscriber_main, s) != 0) {
        pthread_mutex_destroy(&s->rq_mu);
        sd_error_set(err, SD_ERR_INTERNAL, "cannot start the redis subscriber thread");
        return -1;
    }
    s->rq_started = 1;
    return 0;
}

void srv_rq_stop(srv *s) {
    if (!s->rq_started) return;
    srv_redis_subscribe_stop(&s->rq_subscription);
    pthread_join(s->rq_thread, NULL);
    pthread_mutex_destroy(&s->rq_mu);
    s->rq_started = 0;
}
