/* queue.c - the in-process queue: POST /prompt, the queue, the history,
 * and the worker thread that runs one prompt at a time through one sd_exec
 * (internal.h; job.h admits and runs a prompt).
 *
 * The sd_exec lives as long as the server, so its in-process memo keeps
 * loaded models and every result between prompts; after each prompt the
 * least recently used memo entries are released while the process's
 * resident memory is over the budget (the model store frees a model part
 * as soon as nothing holds it). /free empties the memo between prompts.
 * The queue status goes to every WebSocket client. */
#define _GNU_SOURCE /* open_memstream */
#include <civetweb.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/env.h"
#include "core/executor.h"
#include "core/json_util.h"
#include "internal.h"

cJSON *srv_queue_info(srv *s) {
    if (s->rq) return srv_queue_info_json(srv_rq_queue_remaining(s));
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_pending + (s->running ? 1 : 0);
    pthread_mutex_unlock(&s->mu);
    return srv_queue_info_json(n);
}

/* ---- POST /prompt -------------------------------------------------------- */

int srv_read_prompt(srv *s, struct mg_connection *c, cJSON **body, srv_job **j, cJSON **dropped) {
    int st = srv_read_json(s, c, 0, body);
    if (st) return st;
    char note[SD_ERR_MSG_MAX + 64];
    st = srv_job_admit(s->env, *body, j, dropped, note, sizeof note);
    if (note[0]) srv_log(s, "%s", note);
    if (st == 200) return 0;
    cJSON_Delete(*body);
    *body = NULL;
    return srv_reply_json(c, st, *dropped);
}

int srv_post_prompt(srv *s, struct mg_connection *c) {
    cJSON *body = NULL, *dropped = NULL;
    srv_job *j = NULL;
    int st = srv_read_prompt(s, c, &body, &j, &dropped);
    if (st) return st;
    const cJSON *num = cJSON_GetObjectItemCaseSensitive(body, "number");
    const cJSON *front = cJSON_GetObjectItemCaseSensitive(body, "front");
    char id[sizeof j->id];
    double number = 0;
    size_t n_nodes = 0;
    pthread_mutex_lock(&s->mu);
    int full = s->n_pending >= s->max_queue, dup = 0;
    for (size_t i = 0; i < s->n_pending && !dup; i++) dup = !strcmp(s->pending[i]->id, j->id);
    if (s->running && !strcmp(s->running->id, j->id)) dup = 1;
    srv_job **list = full || dup ? NULL : realloc(s->pending, (s->n_pending + 1) * sizeof *list);
    if (list) {
        if (cJSON_IsNumber(num) && isfinite(num->valuedouble)) {
            j->number = num->valuedouble;
        } else {
            j->number = s->next_number;
            if (cJSON_IsTrue(front)) j->number = -j->number;
            s->next_number += 1;
        }
        j->seq = s->seq++;
        /* the worker may take the job (and free it) as soon as mu is released */
        snprintf(id, sizeof id, "%s", j->id);
        number = j->number;
        n_nodes = sd_graph_count(j->graph);
        s->pending = list;
        s->pending[s->n_pending++] = j;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(body);
    if (!list) {
        cJSON_Delete(dropped);
        srv_job_free(j);
        if (dup) return srv_reply_error(c, 409, "duplicate_prompt_id", "a prompt with this prompt_id is queued already");
        return srv_reply_error(c, full ? 503 : 500, full ? "queue_full" : "out_of_memory",
                               full ? "the queue holds %zu prompts already" : "out of memory", s->max_queue);
    }
    srv_log(s, "prompt %s queued (number %g, %zu nodes)", id, number, n_nodes);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "prompt_id", id);
    cJSON_AddNumberToObject(r, "number", number);
    cJSON_AddItemToObject(r, "node_errors", dropped);
    srv_ws_broadcast_status(s);
    return srv_reply_json(c, 200, r);
}

/* ---- queue and history endpoints ----------------------------------------- */

static int by_number(const void *a, const void *b) {
    const srv_job *x = *(srv_job *const *)a, *y = *(srv_job *const *)b;
    if (x->number != y->number) return x->number < y->number ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int srv_get_queue(srv *s, struct mg_connection *c) {
    return srv_reply_json(c, 200, srv_queue_lists(s));
}

cJSON *srv_queue_lists(srv *s) {
    cJSON *r = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(r, "queue_running");
    cJSON *pending = cJSON_AddArrayToObject(r, "queue_pending");
    pthread_mutex_lock(&s->mu);
    if (s->running) cJSON_AddItemToArray(running, srv_job_entry(s->running));
    if (s->n_pending > 1) qsort(s->pending, s->n_pending, sizeof *s->pending, by_number); /* (never qsort(NULL, 0)) */
    for (size_t i = 0; i < s->n_pending; i++) cJSON_AddItemToArray(pending, srv_job_entry(s->pending[i]));
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Removes the pending prompt `id`; interrupts it when it is running (an
 * extension: ComfyUI's delete only touches the pending list). Caller holds mu. */
static int cancel_locked(srv *s, const char *id) {
    for (size_t i = 0; i < s->n_pending; i++) {
        if (strcmp(s->pending[i]->id, id)) continue;
        srv_job_free(s->pending[i]);
        memmove(s->pending + i, s->pending + i + 1, (s->n_pending - i - 1) * sizeof *s->pending);
        s->n_pending--;
        return 1;
    }
    if (s->running && !strcmp(s->running->id, id)) {
        s->interrupt = 1;
        return 2;
    }
    return 0;
}

int srv_post_queue(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    int st = srv_read_json(s, c, 0, &body);
    if (st) return st;
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(body, "delete");
    if (del && !cJSON_IsArray(del)) {
        cJSON_Delete(body);
        return srv_reply_error(c, 400, "bad_request", "'delete' must be a list of prompt ids");
    }
    pthread_mutex_lock(&s->mu);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "clear"))) {
        for (size_t i = 0; i < s->n_pending; i++) srv_job_free(s->pending[i]);
        s->n_pending = 0;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, del) {
        if (cJSON_IsString(it)) cancel_locked(s, it->valuestring);
    }
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(body);
    srv_ws_broadcast_status(s);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

int srv_post_interrupt(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    int st = srv_read_json(s, c, 1, &body);
    if (st) return st;
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(body, "prompt_id");
    pthread_mutex_lock(&s->mu);
    /* With a prompt_id, only that prompt: running, it stops; queued, it goes. */
    if (cJSON_IsString(pid)) cancel_locked(s, pid->valuestring);
    else if (s->running) s->interrupt = 1;
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(body);
    srv_ws_broadcast_status(s);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

int srv_post_free(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    int st = srv_read_json(s, c, 1, &body);
    if (st) return st;
    pthread_mutex_lock(&s->mu);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "unload_models"))) s->flag_unload = 1;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "free_memory"))) s->flag_free = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(body);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

int srv_get_history(srv *s, struct mg_connection *c, const char *id) {
    long max_items = -1, offset = -1;
    char *mi = id ? NULL : srv_query(c, "max_items"), *of = id ? NULL : srv_query(c, "offset");
    if (mi) max_items = strtol(mi, NULL, 10);
    if (of) offset = strtol(of, NULL, 10);
    free(mi);
    free(of);
    return srv_reply_json(c, 200, srv_history_json(s, id, max_items, offset));
}

cJSON *srv_history_json(srv *s, const char *id, long max_items, long offset) {
    cJSON *r = cJSON_CreateObject();
    pthread_mutex_lock(&s->mu);
    if (id) {
        for (size_t i = 0; i < s->n_hist; i++)
            if (!strcmp(s->hist[i].id, id)) cJSON_AddItemToObject(r, id, cJSON_Duplicate(s->hist[i].entry, 1));
    } else {
        /* ComfyUI: max_items alone = the newest that many; offset counts from the oldest */
        if (offset < 0 && max_items >= 0) offset = (long)s->n_hist - max_items;
        if (offset < 0) offset = 0;
        long added = 0;
        for (size_t i = (size_t)offset; i < s->n_hist && (max_items < 0 || added < max_items); i++, added++)
            cJSON_AddItemToObject(r, s->hist[i].id, cJSON_Duplicate(s->hist[i].entry, 1));
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

int srv_post_history(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    int st = srv_read_json(s, c, 0, &body);
    if (st) return st;
    pthread_mutex_lock(&s->mu);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "clear"))) {
        for (size_t i = 0; i < s->n_hist; i++) cJSON_Delete(s->hist[i].entry);
        s->n_hist = 0;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(body, "delete")) {
        if (!cJSON_IsString(it)) continue;
        for (size_t i = 0; i < s->n_hist; i++) {
            if (strcmp(s->hist[i].id, it->valuestring)) continue;
            cJSON_Delete(s->hist[i].entry);
            memmove(s->hist + i, s->hist + i + 1, (s->n_hist - i - 1) * sizeof *s->hist);
            s->n_hist--;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(body);
    return srv_reply(c, 200, "text/plain", "", 0, NULL);
}

/* ---- the worker thread ----------------------------------------------------- */

static void sink_send(void *user, const char *sid, const char *event, cJSON *data) {
    srv_ws_send(user, sid, event, data);
}

static void sink_binary(void *user, const char *sid, uint32_t event, const void *p, size_t n) {
    srv_ws_send_binary(user, sid, event, p, n);
}

static void sink_log(void *user, const char *line) {
    srv_log(user, "%s", line);
}

static void on_log(void *user, int level, const char *msg) {
    srv *s = user;
    if (level <= SD_LOG_INFO) srv_log(s, "%s: %s", level == SD_LOG_ERROR ? "error" : level == SD_LOG_WARN ? "warning" : "info", msg);
}

static void run_job(srv *s, sd_exec *ex, srv_job *j) {
    srv_run_opts ro = {
        .env = s->env,
        .cache = s->o->cache,
        .interrupt = &s->interrupt,
        .preview = s->o->preview,
        .preview_user = s->o->preview_user,
        .preview_interval = s->o->preview_interval,
        .sink = {sink_send, sink_binary, sink_log, s},
    };
    cJSON *entry = srv_job_run(ex, j, &ro, NULL);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_hist; i++) { /* a prompt_id sent again replaces its entry */
        if (strcmp(s->hist[i].id, j->id)) continue;
        cJSON_Delete(s->hist[i].entry);
        memmove(s->hist + i, s->hist + i + 1, (s->n_hist - i - 1) * sizeof *s->hist);
        s->n_hist--;
        break;
    }
    if (s->n_hist >= s->max_history) { /* bounded: the oldest goes */
        cJSON_Delete(s->hist[0].entry);
        memmove(s->hist, s->hist + 1, (s->n_hist - 1) * sizeof *s->hist);
        s->n_hist--;
    }
    srv_hist *h = entry ? realloc(s->hist, (s->n_hist + 1) * sizeof *h) : NULL;
    if (h) {
        s->hist = h;
        snprintf(h[s->n_hist].id, sizeof h[s->n_hist].id, "%s", j->id);
        h[s->n_hist++].entry = entry;
    } else {
        cJSON_Delete(entry);
    }
    s->running = NULL;
    pthread_mutex_unlock(&s->mu);
    /* ComfyUI's order: the queue status (task_done), then executing null */
    srv_ws_broadcast_status(s);
    srv_job_send_finished(&ro.sink, j);
}

static void keep_budget(srv *s, sd_exec *ex) {
    size_t dropped = srv_job_keep_budget(ex, s->memo_budget);
    if (dropped) srv_log(s, "memory: released %zu cached results (resident %.0f MiB, budget %.0f MiB)", dropped,
                         srv_rss_bytes() / 1048576.0, s->memo_budget / 1048576.0);
}

static void *worker_main(void *arg) {
    srv *s = arg;
    sd_exec *ex = sd_exec_new();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && !s->n_pending && !s->flag_unload && !s->flag_free) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) { pthread_mutex_unlock(&s->mu); break; }
        int unload = s->flag_unload || s->flag_free;
        s->flag_unload = s->flag_free = 0;
        srv_job *j = NULL;
        if (s->n_pending) {
            size_t best = 0;
            for (size_t i = 1; i < s->n_pending; i++)
                if (by_number(&s->pending[i], &s->pending[best]) < 0) best = i;
            j = s->pending[best];
            s->pending[best] = s->pending[--s->n_pending];
            s->running = j;
            s->interrupt = 0;
        }
        pthread_mutex_unlock(&s->mu);
        if (unload) { /* between prompts, as ComfyUI does */
            sd_exec_forget(ex);
            malloc_trim(0);
            srv_log(s, "memory: models and cached results released (/free)");
        }
        if (!j) continue;
        if (!ex) {
            ex = sd_exec_new();
            if (!ex) { srv_log(s, "error: out of memory"); }
        }
        srv_ws_broadcast_status(s);
        if (ex) run_job(s, ex, j); /* sends the status once the entry is stored */
        else srv_ws_broadcast_status(s);
        srv_job_free(j);
        if (ex) keep_budget(s, ex);
    }
    sd_exec_free(ex);
    return NULL;
}

int srv_queue_start(srv *s, sd_error *err) {
    s->next_number = 0;
    s->env->log = on_log;
    s->env->log_user = s;
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        sd_error_set(err, SD_ERR_INTERNAL, "cannot start the worker thread");
        return -1;
    }
    s->worker_started = 1;
    return 0;
}

void srv_queue_stop(srv *s) {
    if (!s->worker_started) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    s->interrupt = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    s->worker_started = 0;
    for (size_t i = 0; i < s->n_pending; i++) srv_job_free(s->pending[i]);
    free(s->pending);
    s->pending = NULL;
    s->n_pending = 0;
}
