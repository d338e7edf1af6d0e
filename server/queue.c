/* queue.c - POST /prompt, the queue, the history, and the worker thread
 * that runs one prompt at a time through one sd_exec (internal.h).
 *
 * The sd_exec lives as long as the server, so its in-process memo keeps
 * loaded models and every result between prompts; after each prompt the
 * least recently used memo entries are released while the process's
 * resident memory is over the budget (the model store frees a model part
 * as soon as nothing holds it). /free empties the memo between prompts.
 * Messages follow ComfyUI's execution.py: execution messages go to the
 * prompt's client_id only (nobody without one), progress to that client or
 * to everyone, the queue status to everyone. */
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

/* ---- jobs ---------------------------------------------------------------- */

static void job_free(srv_job *j) {
    if (!j) return;
    cJSON_Delete(j->prompt);
    cJSON_Delete(j->extra_data);
    cJSON_Delete(j->outputs);
    free(j->client_id);
    sd_graph_free(j->graph);
    free(j);
}

/* [number, prompt_id, prompt, extra_data, outputs_to_execute] */
static cJSON *job_entry(const srv_job *j) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    cJSON_AddItemToArray(a, cJSON_CreateNumber(j->number));
    cJSON_AddItemToArray(a, cJSON_CreateString(j->id));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->prompt, 1));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->extra_data, 1));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->outputs, 1));
    return a;
}

cJSON *srv_queue_info(srv *s) {
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_pending + (s->running ? 1 : 0);
    pthread_mutex_unlock(&s->mu);
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "exec_info");
    cJSON_AddNumberToObject(e, "queue_remaining", (double)n);
    return o;
}

/* ---- validation errors in ComfyUI's shape ---------------------------------- */

static const char *short_message(const char *kind) {
    static const char *const map[][2] = {
        {"required_input_missing", "Required input is missing"},
        {"bad_linked_input", "Bad linked input, must be a length-2 list of [node_id, slot_index]"},
        {"return_type_mismatch", "Return type mismatch between linked nodes"},
        {"invalid_input_type", "Failed to convert an input value"},
        {"value_smaller_than_min", "Value smaller than min"},
        {"value_bigger_than_max", "Value bigger than max"},
        {"value_not_in_list", "Value not in list"},
        {"dependency_cycle", "Dependency cycle detected"},
        {"invalid_model_file", "Model file cannot be loaded"}, /* sdflow's own (file_probe) */
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(kind, map[i][0])) return map[i][1];
    return kind;
}

static int is_output_node(const sd_graph_node *n) {
    const sd_node_def *d = sd_registry_find(n->class_type);
    return d && (d->flags & SD_NODE_OUTPUT);
}

/* ---- ancestry: which nodes an output needs, in O(nodes) per output ------- */

/* Work allowed for per-output ancestry (outputs x nodes): beyond it the
 * server does not compute dependent_outputs nor keep valid outputs of a
 * broken prompt, so a huge graph cannot make validation quadratic. */
#define ANCESTRY_BUDGET 20000000.0

static cJSON *top_error(const char *type, const char *message, const char *details) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "details", details ? details : "");
    cJSON_AddObjectToObject(e, "extra_info");
    return e;
}

/* node_errors[id].dependent_outputs: the output nodes that need node id. */
static void add_dependent_outputs(const sd_graph *g, cJSON *node_errors) {
    size_t n = sd_graph_count(g), n_out = 0;
    for (size_t k = 0; k < n; k++) n_out += is_output_node(sd_graph_at(g, k));
    if ((double)n_out * (double)n > ANCESTRY_BUDGET) return;
    unsigned char *mark = malloc(n ? n : 1);
    size_t *stack = malloc((n ? n : 1) * sizeof *stack);
    for (size_t k = 0; mark && stack && k < n; k++) {
        const sd_graph_node *o = sd_graph_at(g, k);
        if (!is_output_node(o)) continue;
        memset(mark, 0, n);
        sd_graph_mark_ancestors(g, k, mark, stack);
        cJSON *ne;
        cJSON_ArrayForEach(ne, node_errors) {
            size_t at = ne->string ? sd_graph_index_of(g, ne->string) : (size_t)-1;
            if (at != (size_t)-1 && mark[at])
                cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(ne, "dependent_outputs"), cJSON_CreateString(o->id));
        }
    }
    free(mark);
    free(stack);
}

/* {"error": {...}, "node_errors": {...}} for a graph that failed validation. */
static cJSON *validation_body(const sd_graph *g, const sd_graph_problems *p) {
    cJSON *root = cJSON_CreateObject();
    for (size_t i = 0; i < p->n; i++) {
        const sd_graph_problem *q = &p->items[i];
        if (!strcmp(q->kind, "invalid_prompt") || !strcmp(q->kind, "prompt_no_outputs")) {
            /* the whole prompt fails; ComfyUI reports only this */
            char details[256] = "";
            if (q->node_id) snprintf(details, sizeof details, "Node ID '#%s'", q->node_id);
            cJSON_AddItemToObject(root, "error", top_error(q->kind, q->message, details));
            cJSON_AddObjectToObject(root, "node_errors");
            return root;
        }
    }
    cJSON *node_errors = cJSON_CreateObject();
    size_t cap = 1;
    for (size_t i = 0; i < p->n; i++) cap += strlen(p->items[i].message) + 64 + (p->items[i].input ? strlen(p->items[i].input) : 0);
    char *details = calloc(cap, 1);
    size_t dl = 0;
    for (size_t i = 0; i < p->n; i++) {
        const sd_graph_problem *q = &p->items[i];
        const char *id = q->node_id ? q->node_id : "";
        cJSON *ne = cJSON_GetObjectItemCaseSensitive(node_errors, id);
        if (!ne) {
            ne = cJSON_CreateObject();
            cJSON_AddItemToObject(node_errors, id, ne);
            cJSON_AddArrayToObject(ne, "errors");
            cJSON_AddArrayToObject(ne, "dependent_outputs"); /* filled below */
            cJSON_AddStringToObject(ne, "class_type", q->class_type ? q->class_type : "");
        }
        char d[1400];
        if (q->input) snprintf(d, sizeof d, "%s: %s", q->input, q->message);
        else snprintf(d, sizeof d, "%s", q->message);
        cJSON *err = cJSON_CreateObject();
        cJSON_AddStringToObject(err, "type", q->kind);
        cJSON_AddStringToObject(err, "message", short_message(q->kind));
        cJSON_AddStringToObject(err, "details", d);
        cJSON *extra = cJSON_AddObjectToObject(err, "extra_info");
        if (q->input) cJSON_AddStringToObject(extra, "input_name", q->input);
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(ne, "errors"), err);
        if (details) dl += (size_t)snprintf(details + dl, cap - dl, "%s%s: %s", dl ? "\n" : "", short_message(q->kind), d);
    }
    add_dependent_outputs(g, node_errors);
    cJSON_AddItemToObject(root, "error",
                          top_error("prompt_outputs_failed_validation", "Prompt outputs failed validation", details));
    cJSON_AddItemToObject(root, "node_errors", node_errors);
    free(details);
    return root;
}

/* ComfyUI's rule: outputs whose own node or any ancestor has a problem are
 * dropped and the others still run. Removes every node that no valid output
 * needs and validates again; SD_OK when something valid is left. A problem
 * of the whole prompt (unknown class, no outputs) leaves nothing. */
static sd_status keep_valid_outputs(sd_graph *g, const sd_graph_problems *p, const sd_env *env) {
    for (size_t i = 0; i < p->n; i++)
        if (!p->items[i].node_id || !strcmp(p->items[i].kind, "invalid_prompt")) return SD_ERR_VALIDATION;
    size_t n = sd_graph_count(g), good = 0, n_out = 0;
    for (size_t k = 0; k < n; k++) n_out += is_output_node(sd_graph_at(g, k));
    if ((double)n_out * (double)n > ANCESTRY_BUDGET) return SD_ERR_VALIDATION;
    unsigned char *keep = calloc(n ? n : 1, 1), *mark = malloc(n ? n : 1);
    size_t *stack = malloc((n ? n : 1) * sizeof *stack);
    sd_status rc = keep && mark && stack ? SD_OK : SD_ERR_NOMEM;
    for (size_t k = 0; !rc && k < n; k++) {
        if (!is_output_node(sd_graph_at(g, k))) continue;
        memset(mark, 0, n);
        sd_graph_mark_ancestors(g, k, mark, stack);
        int bad = 0;
        for (size_t i = 0; i < p->n && !bad; i++) {
            size_t at = sd_graph_index_of(g, p->items[i].node_id);
            bad = at != (size_t)-1 && mark[at];
        }
        if (bad) continue;
        good++;
        for (size_t m = 0; m < n; m++) keep[m] |= mark[m];
    }
    if (!rc && !good) rc = SD_ERR_VALIDATION;
    if (!rc) sd_graph_retain(g, keep);
    free(keep);
    free(mark);
    free(stack);
    if (rc) return rc;
    sd_graph_problems again = {0};
    sd_error e;
    sd_error_clear(&e);
    rc = sd_graph_validate(g, env, &again, &e);
    sd_graph_problems_free(&again);
    return rc;
}

/* ---- POST /prompt -------------------------------------------------------- */

int srv_post_prompt(srv *s, struct mg_connection *c) {
    cJSON *body = NULL;
    int st = srv_read_json(s, c, 0, &body);
    if (st) return st;
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!prompt) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToObject(r, "error", top_error("no_prompt", "No prompt provided", "No prompt provided"));
        cJSON_AddObjectToObject(r, "node_errors");
        cJSON_Delete(body);
        return srv_reply_json(c, 400, r);
    }
    if (!cJSON_IsObject(prompt)) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToObject(r, "error", top_error("invalid_prompt", "The prompt must be a JSON object", ""));
        cJSON_AddObjectToObject(r, "node_errors");
        cJSON_Delete(body);
        return srv_reply_json(c, 400, r);
    }
    sd_error err;
    sd_error_clear(&err);
    srv_job *j = calloc(1, sizeof *j);
    char *text = cJSON_PrintUnformatted(prompt);
    if (!j || !text) {
        free(text);
        free(j);
        cJSON_Delete(body);
        return srv_reply_error(c, 500, "out_of_memory", "out of memory");
    }
    sd_status rc = sd_graph_from_json(text, "prompt", &j->graph, &err);
    free(text);
    if (rc) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToObject(r, "error", top_error("invalid_prompt", err.msg, err.node_id[0] ? err.node_id : ""));
        cJSON_AddObjectToObject(r, "node_errors");
        job_free(j);
        cJSON_Delete(body);
        return srv_reply_json(c, 400, r);
    }
    sd_graph_problems probs = {0};
    rc = sd_graph_validate(j->graph, s->env, &probs, &err);
    cJSON *dropped = NULL; /* node_errors of outputs left out (ComfyUI: 200 with node_errors) */
    if (rc == SD_ERR_VALIDATION) {
        cJSON *r = validation_body(j->graph, &probs);
        if (keep_valid_outputs(j->graph, &probs, s->env) == SD_OK) {
            dropped = cJSON_DetachItemFromObjectCaseSensitive(r, "node_errors");
            cJSON_Delete(r);
            srv_log(s, "prompt accepted without its invalid outputs: %s", err.msg);
            rc = SD_OK;
        } else {
            sd_graph_problems_free(&probs);
            srv_log(s, "prompt refused: %s", err.msg);
            job_free(j);
            cJSON_Delete(body);
            return srv_reply_json(c, 400, r);
        }
    }
    sd_graph_problems_free(&probs);
    if (rc) {
        job_free(j);
        cJSON_Delete(body);
        return srv_reply_error(c, 500, sd_status_name(rc), "%s", err.msg);
    }
    if (!dropped) dropped = cJSON_CreateObject();
    j->prompt = cJSON_DetachItemFromObjectCaseSensitive(body, "prompt");
    cJSON *extra = cJSON_DetachItemFromObjectCaseSensitive(body, "extra_data");
    j->extra_data = cJSON_IsObject(extra) ? extra : cJSON_CreateObject();
    if (!cJSON_IsObject(extra)) cJSON_Delete(extra);
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(body, "client_id");
    if (cJSON_IsString(cid) && cid->valuestring[0] && strlen(cid->valuestring) < 64) {
        j->client_id = strdup(cid->valuestring);
        cJSON_DeleteItemFromObjectCaseSensitive(j->extra_data, "client_id");
        cJSON_AddStringToObject(j->extra_data, "client_id", cid->valuestring);
    }
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(body, "prompt_id");
    if (cJSON_IsString(pid) && pid->valuestring[0] && strlen(pid->valuestring) < sizeof j->id)
        snprintf(j->id, sizeof j->id, "%s", pid->valuestring);
    else
        srv_uuid4(j->id);
    j->outputs = cJSON_CreateArray();
    for (size_t k = 0; k < sd_graph_count(j->graph); k++) {
        const sd_graph_node *n = sd_graph_at(j->graph, k);
        if (is_output_node(n)) cJSON_AddItemToArray(j->outputs, cJSON_CreateString(n->id));
    }
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
        job_free(j);
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
    cJSON *r = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(r, "queue_running");
    cJSON *pending = cJSON_AddArrayToObject(r, "queue_pending");
    pthread_mutex_lock(&s->mu);
    if (s->running) cJSON_AddItemToArray(running, job_entry(s->running));
    if (s->n_pending > 1) qsort(s->pending, s->n_pending, sizeof *s->pending, by_number); /* (never qsort(NULL, 0)) */
    for (size_t i = 0; i < s->n_pending; i++) cJSON_AddItemToArray(pending, job_entry(s->pending[i]));
    pthread_mutex_unlock(&s->mu);
    return srv_reply_json(c, 200, r);
}

/* Removes the pending prompt `id`; interrupts it when it is running (an
 * extension: ComfyUI's delete only touches the pending list). Caller holds mu. */
static int cancel_locked(srv *s, const char *id) {
    for (size_t i = 0; i < s->n_pending; i++) {
        if (strcmp(s->pending[i]->id, id)) continue;
        job_free(s->pending[i]);
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
        for (size_t i = 0; i < s->n_pending; i++) job_free(s->pending[i]);
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
    cJSON *r = cJSON_CreateObject();
    long max_items = -1, offset = -1;
    char *mi = id ? NULL : srv_query(c, "max_items"), *of = id ? NULL : srv_query(c, "offset");
    if (mi) max_items = strtol(mi, NULL, 10);
    if (of) offset = strtol(of, NULL, 10);
    free(mi);
    free(of);
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
    return srv_reply_json(c, 200, r);
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

/* ---- the worker -------------------------------------------------------------- */

typedef struct run_ctx {
    srv *s;
    srv_job *j;
    double last_preview;  /* srv_now() of the last preview frame */
    int preview_failed;   /* logged once per prompt */
    cJSON *messages;  /* history status.messages: [[event, data], ...] */
    cJSON *outputs;   /* node id -> ui */
    cJSON *meta;
    cJSON *executed;  /* ids of nodes that finished */
} run_ctx;

/* ComfyUI's execution messages: to the prompt's client, and into the history. */
static void emit(run_ctx *r, const char *event, cJSON *data, int record) {
    if (record) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(event));
        cJSON_AddItemToArray(m, cJSON_Duplicate(data, 1));
        cJSON_AddItemToArray(r->messages, m);
    }
    if (r->j->client_id) srv_ws_send(r->s, r->j->client_id, event, data);
    else cJSON_Delete(data);
}

static cJSON *value_json(const sd_value *v) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_INT: return cJSON_CreateNumber((double)sd_value_as_int(v));
    case SD_VAL_FLOAT: return cJSON_CreateNumber(sd_value_as_float(v));
    case SD_VAL_BOOL: return cJSON_CreateBool(sd_value_as_bool(v));
    case SD_VAL_STRING: return cJSON_CreateString(sd_value_as_string(v));
    case SD_VAL_LIST: {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < sd_value_list_len(v); i++) cJSON_AddItemToArray(a, value_json(sd_value_list_get(v, i)));
        return a;
    }
    case SD_VAL_DICT: {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < sd_value_dict_len(v); i++) {
            const char *k = sd_value_dict_key(v, i);
            /* absolute paths stay on the server; the hashes are the cache's
             * (core/executor.h "Output files"), not part of ComfyUI's outputs */
            if (!strcmp(k, "files") || !strcmp(k, "sha256")) continue;
            cJSON_AddItemToObject(o, k, value_json(sd_value_dict_at(v, i)));
        }
        return o;
    }
    default: return cJSON_CreateNull();
    }
}

static cJSON *base_data(run_ctx *r) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", r->j->id);
    return d;
}

static void on_plan(void *user, const sd_exec_report *rep) {
    run_ctx *r = user;
    cJSON *d = cJSON_CreateObject();
    cJSON *nodes = cJSON_AddArrayToObject(d, "nodes");
    for (size_t i = 0; i < rep->n; i++)
        if (rep->items[i].planned != SD_NODE_EXECUTED) cJSON_AddItemToArray(nodes, cJSON_CreateString(rep->items[i].node_id));
    cJSON_AddStringToObject(d, "prompt_id", r->j->id);
    cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
    emit(r, "execution_cached", d, 1);
}

static void on_node(void *user, const sd_exec_record *rec, int finished) {
    run_ctx *r = user;
    if (!finished) {
        if (rec->planned != SD_NODE_EXECUTED) return; /* hits were announced by execution_cached */
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "node", rec->node_id);
        cJSON_AddStringToObject(d, "display_node", rec->node_id);
        cJSON_AddStringToObject(d, "prompt_id", r->j->id);
        emit(r, "executing", d, 0);
        return;
    }
    if (rec->status == SD_NODE_FAILED || rec->status == SD_NODE_SKIPPED) return;
    cJSON_AddItemToArray(r->executed, cJSON_CreateString(rec->node_id));
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "node_id", rec->node_id);
    cJSON_AddStringToObject(m, "display_node", rec->node_id);
    cJSON_AddNullToObject(m, "parent_node");
    cJSON_AddStringToObject(m, "real_node_id", rec->node_id);
    cJSON_AddItemToObject(r->meta, rec->node_id, m);
    if (!rec->ui) return;
    cJSON *ui = value_json(rec->ui);
    cJSON_DeleteItemFromObjectCaseSensitive(r->outputs, rec->node_id);
    cJSON_AddItemToObject(r->outputs, rec->node_id, cJSON_Duplicate(ui, 1));
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "node", rec->node_id);
    cJSON_AddStringToObject(d, "display_node", rec->node_id);
    cJSON_AddItemToObject(d, "output", ui);
    cJSON_AddStringToObject(d, "prompt_id", r->j->id);
    emit(r, "executed", d, 0);
}

static void on_progress(void *user, const char *node_id, int64_t value, int64_t max) {
    run_ctx *r = user;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "value", (double)value);
    cJSON_AddNumberToObject(d, "max", (double)max);
    cJSON_AddStringToObject(d, "prompt_id", r->j->id);
    cJSON_AddStringToObject(d, "node", node_id);
    srv_ws_send(r->s, r->j->client_id, "progress", d); /* NULL client: everyone, as ComfyUI */
}

/* NODE_PREVIEW: ComfyUI's binary frame, event 1 (PREVIEW_IMAGE), then a
 * 4-byte big-endian image type (2 = PNG), then the image. */
static void on_event(void *user, const sd_exec_event *ev) {
    run_ctx *r = user;
    srv *s = r->s;
    if (ev->kind != SD_EXEC_NODE_PREVIEW || !s->o->preview || r->preview_failed) return;
    double now = srv_now();
    if (ev->step < ev->steps && r->last_preview > 0 && now - r->last_preview < s->o->preview_interval) return;
    r->last_preview = now;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return;
    static const unsigned char png_type[4] = {0, 0, 0, 2};
    fwrite(png_type, 1, 4, f);
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = s->o->preview(s->o->preview_user, ev->latent, ev->latent_format, f, &err);
    fclose(f);
    if (rc) {
        r->preview_failed = 1;
        srv_log(s, "warning: prompt %s: no previews: %s", r->j->id, err.msg);
    } else {
        srv_ws_send_binary(s, r->j->client_id, 1, buf, n); /* NULL client: everyone, as ComfyUI */
    }
    free(buf);
}

static void on_log(void *user, int level, const char *msg) {
    srv *s = user;
    if (level <= SD_LOG_INFO) srv_log(s, "%s: %s", level == SD_LOG_ERROR ? "error" : level == SD_LOG_WARN ? "warning" : "info", msg);
}

static long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &pages, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static void run_job(srv *s, sd_exec *ex, srv_job *j) {
    run_ctx r = {.s = s, .j = j, .messages = cJSON_CreateArray(), .outputs = cJSON_CreateObject(),
                 .meta = cJSON_CreateObject(), .executed = cJSON_CreateArray()};
    double t0 = srv_now();
    srv_log(s, "prompt %s started", j->id);
    cJSON *d = base_data(&r);
    cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
    emit(&r, "execution_start", d, 1);

    const cJSON *info = cJSON_GetObjectItemCaseSensitive(j->extra_data, "extra_pnginfo");
    /* an empty object adds no PNG chunk: the bytes stay those of `sdflow run` */
    char *extra = cJSON_IsObject(info) && info->child ? cJSON_PrintUnformatted(info) : NULL;
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(j->extra_data, "preview_method");
    int no_previews = cJSON_IsString(pm) && !strcmp(pm->valuestring, "none"); /* ComfyUI's per-prompt switch */
    sd_exec_opts xo = {
        .env = s->env,
        .cache = s->o->cache,
        .interrupt = &s->interrupt,
        .progress = on_progress,
        .progress_user = &r,
        .on_node = on_node,
        .on_node_user = &r,
        .on_plan = on_plan,
        .on_plan_user = &r,
        .on_event = on_event,
        .on_event_user = &r,
        .previews = s->o->preview && !no_previews,
        .prompt_json = NULL, /* derived from the graph, exactly as `sdflow run` embeds it */
        .extra_pnginfo_json = extra,
        .release_consumed = 0, /* everything stays in the memo for the next prompt */
    };
    sd_exec_report rep = {0};
    sd_graph_problems probs = {0};
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_exec_run(ex, j->graph, &xo, &rep, &probs, &err);
    free(extra);
    const char *status_str = "success";
    if (rc == SD_OK) {
        d = base_data(&r);
        cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
        emit(&r, "execution_success", d, 1);
    } else if (rc == SD_ERR_CANCELLED) {
        status_str = "error";
        d = base_data(&r);
        cJSON_AddStringToObject(d, "node_id", err.node_id);
        cJSON_AddStringToObject(d, "node_type", err.class_type);
        cJSON_AddItemToObject(d, "executed", cJSON_Duplicate(r.executed, 1));
        cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
        emit(&r, "execution_interrupted", d, 1);
    } else {
        status_str = "error";
        char msg[SD_ERR_MSG_MAX + 512];
        d = base_data(&r);
        cJSON_AddStringToObject(d, "node_id", err.node_id);
        cJSON_AddStringToObject(d, "node_type", err.class_type);
        cJSON_AddItemToObject(d, "executed", cJSON_Duplicate(r.executed, 1));
        cJSON_AddStringToObject(d, "exception_message", sd_error_format(&err, msg, sizeof msg));
        cJSON_AddStringToObject(d, "exception_type", sd_status_name(rc));
        cJSON_AddArrayToObject(d, "traceback");
        cJSON_AddObjectToObject(d, "current_inputs");
        cJSON_AddObjectToObject(d, "current_outputs");
        cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
        emit(&r, "execution_error", d, 1);
    }
    /* ComfyUI's prompt worker ends every prompt with "executing" node=null. */
    d = base_data(&r);
    cJSON_AddNullToObject(d, "node");
    cJSON_AddNullToObject(d, "display_node");
    emit(&r, "executing", d, 0);

    cJSON *entry = cJSON_CreateObject();
    cJSON_AddItemToObject(entry, "prompt", job_entry(j));
    cJSON_AddItemToObject(entry, "outputs", r.outputs);
    cJSON *status = cJSON_AddObjectToObject(entry, "status");
    cJSON_AddStringToObject(status, "status_str", status_str);
    cJSON_AddBoolToObject(status, "completed", rc == SD_OK);
    cJSON_AddItemToObject(status, "messages", r.messages);
    cJSON_AddItemToObject(entry, "meta", r.meta);
    cJSON_Delete(r.executed);
    srv_log(s, "prompt %s %s: %zu executed, %zu cached, %.2fs%s%s", j->id,
            rc == SD_OK ? "done" : rc == SD_ERR_CANCELLED ? "interrupted" : "failed", rep.n_executed, rep.n_cached,
            srv_now() - t0, rc && rc != SD_ERR_CANCELLED ? ": " : "", rc && rc != SD_ERR_CANCELLED ? err.msg : "");
    sd_exec_report_free(&rep);
    sd_graph_problems_free(&probs);

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
    srv_hist *h = realloc(s->hist, (s->n_hist + 1) * sizeof *h);
    if (h) {
        s->hist = h;
        snprintf(h[s->n_hist].id, sizeof h[s->n_hist].id, "%s", j->id);
        h[s->n_hist++].entry = entry;
    } else {
        cJSON_Delete(entry);
    }
    s->running = NULL;
    pthread_mutex_unlock(&s->mu);
}

/* While the process holds more than the budget, the least recently used
 * memo entries go (a model part is freed with its last holder). */
static void keep_budget(srv *s, sd_exec *ex) {
    size_t dropped = 0;
    while ((size_t)rss_bytes() > s->memo_budget && sd_exec_drop_lru(ex)) {
        dropped++;
        malloc_trim(0);
    }
    if (dropped) srv_log(s, "memory: released %zu cached results (resident %.0f MiB, budget %.0f MiB)", dropped,
                         rss_bytes() / 1048576.0, s->memo_budget / 1048576.0);
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
        if (ex) run_job(s, ex, j);
        job_free(j);
        srv_ws_broadcast_status(s);
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
    for (size_t i = 0; i < s->n_pending; i++) job_free(s->pending[i]);
    free(s->pending);
    s->pending = NULL;
    s->n_pending = 0;
}
