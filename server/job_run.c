/* job_run.c - one prompt through the executor, with ComfyUI's messages
 * (job.h). Messages follow ComfyUI's execution.py: execution messages go
 * to the prompt's client_id only (nobody without one), progress and
 * previews to that client or to everyone. */
#define _GNU_SOURCE /* open_memstream, vasprintf */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/value.h"
#include "formats/png.h"
#include "job.h"
#include "core/json_util.h"


/* ComfyUI's progress_state: every node that started, with its state. */
typedef struct node_state {
    char id[64];
    const char *state; /* "running" | "finished" */
    double value, max;
} node_state;

typedef struct run_ctx {
    const srv_run_opts *o;
    srv_job *j;
    node_state *nodes;
    size_t n_nodes, cap_nodes;
    cJSON *cached;    /* ids of the nodes this run does not execute (execution_cached) */
    double last_preview;  /* srv_now() of the last preview frame */
    int preview_failed;   /* logged once per prompt */
    cJSON *messages;  /* history status.messages: [[event, data], ...] */
    cJSON *outputs;   /* node id -> ui */
    cJSON *meta;
    cJSON *executed;  /* ids of nodes that finished */
    cJSON *current_inputs; /* the failed node's inputs (execution_error), or NULL */
} run_ctx;

static void run_log(run_ctx *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_log(run_ctx *r, const char *fmt, ...) {
    if (!r->o->sink.log) return;
    char *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    r->o->sink.log(r->o->sink.user, line);
    free(line);
}

/* ComfyUI's execution messages: to the prompt's client, and into the history. */
static void emit(run_ctx *r, const char *event, cJSON *data, int record) {
    if (record) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(event));
        cJSON_AddItemToArray(m, cJSON_Duplicate(data, 1));
        cJSON_AddItemToArray(r->messages, m);
    }
    if (r->j->client_id) r->o->sink.send(r->o->sink.user, r->j->client_id, event, data);
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

/* ---- progress_state (ComfyUI's comfy_execution/progress.py) --------------- */

static node_state *state_of(run_ctx *r, const char *id) {
    for (size_t i = 0; i < r->n_nodes; i++)
        if (!strcmp(r->nodes[i].id, id)) return &r->nodes[i];
    if (r->n_nodes == r->cap_nodes) {
        size_t cap = r->cap_nodes ? r->cap_nodes * 2 : 16;
        node_state *n = realloc(r->nodes, cap * sizeof *n);
        if (!n) return NULL;
        r->nodes = n;
        r->cap_nodes = cap;
    }
    node_state *ns = &r->nodes[r->n_nodes++];
    snprintf(ns->id, sizeof ns->id, "%s", id);
    ns->state = "running";
    ns->value = 0;
    ns->max = 1;
    return ns;
}

/* {prompt_id, nodes: {id: {value, max, state, node_id, prompt_id,
 * display_node_id, parent_node_id, real_node_id}}}, every node that started,
 * to the prompt's client (everyone without one), after each change. */
static void send_progress_state(run_ctx *r) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", r->j->id);
    cJSON *nodes = cJSON_AddObjectToObject(d, "nodes");
    for (size_t i = 0; i < r->n_nodes; i++) {
        const node_state *ns = &r->nodes[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "value", ns->value);
        cJSON_AddNumberToObject(o, "max", ns->max);
        cJSON_AddStringToObject(o, "state", ns->state);
        cJSON_AddStringToObject(o, "node_id", ns->id);
        cJSON_AddStringToObject(o, "prompt_id", r->j->id);
        cJSON_AddStringToObject(o, "display_node_id", ns->id);
        cJSON_AddNullToObject(o, "parent_node_id");
        cJSON_AddStringToObject(o, "real_node_id", ns->id);
        cJSON_AddItemToObject(nodes, ns->id, o);
    }
    r->o->sink.send(r->o->sink.user, r->j->client_id, "progress_state", d);
}

static void set_state(run_ctx *r, const char *id, const char *state, double value, double max) {
    node_state *ns = state_of(r, id);
    if (!ns) return;
    ns->state = state;
    ns->value = value;
    ns->max = max;
    send_progress_state(r);
}

/* execution_cached: as ComfyUI, every node of the prompt whose result is
 * there already, in prompt order. A node the plan serves from a cache is
 * one; so is every node that only such nodes need (the run does not reach
 * it: its result is in the memo, or not needed). Nodes no output needs are
 * not listed. */
static cJSON *cached_nodes(run_ctx *r, const sd_exec_report *rep) {
    const sd_graph *g = r->j->graph;
    size_t n = sd_graph_count(g);
    cJSON *a = cJSON_CreateArray();
    unsigned char *need = calloc(n ? n : 1, 1), *mark = malloc(n ? n : 1), *runs = calloc(n ? n : 1, 1);
    size_t *stack = malloc((n ? n : 1) * sizeof *stack);
    const cJSON *o;
    const cJSON *outs = need && mark && runs && stack ? r->j->outputs : NULL;
    cJSON_ArrayForEach(o, outs) {
        size_t at = cJSON_IsString(o) ? sd_graph_index_of(g, o->valuestring) : (size_t)-1;
        if (at == (size_t)-1) continue;
        memset(mark, 0, n);
        sd_graph_mark_ancestors(g, at, mark, stack);
        for (size_t k = 0; k < n; k++) need[k] |= mark[k];
    }
    for (size_t i = 0; runs && i < rep->n; i++) {
        if (rep->items[i].planned != SD_NODE_EXECUTED) continue;
        size_t at = sd_graph_index_of(g, rep->items[i].node_id);
        if (at != (size_t)-1) runs[at] = 1;
    }
    for (size_t k = 0; need && runs && k < n; k++)
        if (need[k] && !runs[k]) cJSON_AddItemToArray(a, cJSON_CreateString(sd_graph_at(g, k)->id));
    free(need);
    free(mark);
    free(runs);
    free(stack);
    return a;
}

static void on_plan(void *user, const sd_exec_report *rep) {
    run_ctx *r = user;
    cJSON *d = cJSON_CreateObject();
    cJSON_Delete(r->cached);
    r->cached = cached_nodes(r, rep);
    cJSON_AddItemToObject(d, "nodes", cJSON_Duplicate(r->cached, 1));
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
        set_state(r, rec->node_id, "running", 0, 1);
        return;
    }
    if (rec->status == SD_NODE_FAILED || rec->status == SD_NODE_SKIPPED) return;
    node_state *ns = state_of(r, rec->node_id);
    if (ns) set_state(r, rec->node_id, "finished", ns->max, ns->max);
    cJSON_AddItemToArray(r->executed, cJSON_CreateString(rec->node_id));
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "node_id", rec->node_id);
    cJSON_AddStringToObject(m, "display_node", rec->node_id);
    cJSON_AddNullToObject(m, "parent_node");
    cJSON_AddStringToObject(m, "real_node_id", rec->node_id);
    cJSON_AddItemToObject(r->meta, rec->node_id, m);
    if (!rec->ui) return;
    cJSON *ui = value_json(rec->ui);
    if (!ui->child) {
        /* only the cache's file records (LoraSave): ComfyUI reports nothing */
        cJSON_Delete(ui);
        return;
    }
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
    r->o->sink.send(r->o->sink.user, r->j->client_id, "progress", d); /* NULL client: everyone, as ComfyUI */
    set_state(r, node_id, "running", (double)value, (double)max);
}

/* NODE_PREVIEW: ComfyUI's PREVIEW_IMAGE_WITH_METADATA frame, event 4: a
 * 4-byte big-endian length, the metadata JSON {node_id, prompt_id,
 * display_node_id, parent_node_id, real_node_id, image_type}, then the PNG.
 * The WebSocket hub (ws.c) turns it into the older event 1 (a 4-byte image
 * type, 2 = PNG, then the PNG) for each client that did not announce
 * supports_preview_metadata, as ComfyUI sends one or the other. */
/* One input value in execution_error's current_inputs, as ComfyUI's
 * format_value: numbers, booleans, strings and none as they are, anything
 * else as text (ComfyUI's str(); here a line saying what it is). Strings are
 * scrubbed of the server's paths like the error message. */
static cJSON *input_value_json(const sd_env *env, const sd_value *v) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_NONE: return cJSON_CreateNull();
    case SD_VAL_INT: return cJSON_CreateNumber((double)sd_value_as_int(v));
    case SD_VAL_FLOAT: return cJSON_CreateNumber(sd_value_as_float(v));
    case SD_VAL_BOOL: return cJSON_CreateBool(sd_value_as_bool(v));
    default: break;
    }
    char *text = sd_value_kind_of(v) == SD_VAL_STRING ? strdup(sd_value_as_string(v)) : sd_exec_describe_value(v);
    if (!text) return cJSON_CreateNull();
    /* room for every folder named in it to become a longer "<models>" */
    size_t len = strlen(text), cap = 4 * len + 64;
    char *scrubbed = malloc(cap);
    if (scrubbed) {
        memcpy(scrubbed, text, len + 1);
        srv_scrub_paths(env, scrubbed, cap);
    }
    cJSON *s = cJSON_CreateString(scrubbed ? scrubbed : "");
    free(scrubbed);
    free(text);
    return s;
}

/* ComfyUI's current_inputs: {input: [value, ...]} for every input the node
 * was given, in the node's input order; a list output's items one by one,
 * any other value as a list of one. */
static cJSON *current_inputs_json(const sd_env *env, const sd_exec_event *ev) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !ev->def || !ev->inputs) return o;
    for (int k = 0; ev->def->inputs && ev->def->inputs[k].name; k++) {
        const sd_value *v = ev->inputs[k];
        if (!v) continue;
        cJSON *a = cJSON_AddArrayToObject(o, ev->def->inputs[k].name);
        if (ev->inputs_are_lists[k])
            for (size_t i = 0; i < sd_value_list_len(v); i++)
                cJSON_AddItemToArray(a, input_value_json(env, sd_value_list_get(v, i)));
        else
            cJSON_AddItemToArray(a, input_value_json(env, v));
    }
    return o;
}

static void on_event(void *user, const sd_exec_event *ev) {
    run_ctx *r = user;
    const srv_run_opts *o = r->o;
    if (ev->kind == SD_EXEC_NODE_ERROR) {
        cJSON_Delete(r->current_inputs);
        r->current_inputs = current_inputs_json(o->env, ev);
        return;
    }
    /* a finished picture (SaveImageWebsocket) goes out whole, every time */
    int image = ev->kind == SD_EXEC_NODE_IMAGE;
    if (!image && (ev->kind != SD_EXEC_NODE_PREVIEW || !o->preview || r->preview_failed)) return;
    double now = srv_now();
    if (!image) {
        if (ev->step < ev->steps && r->last_preview > 0 && now - r->last_preview < o->preview_interval) return;
        r->last_preview = now;
    }
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return;
    cJSON *meta = cJSON_CreateObject();
    const char *node = ev->node_id ? ev->node_id : "";
    cJSON_AddStringToObject(meta, "node_id", node);
    cJSON_AddStringToObject(meta, "prompt_id", r->j->id);
    cJSON_AddStringToObject(meta, "display_node_id", node);
    cJSON_AddNullToObject(meta, "parent_node_id");
    cJSON_AddStringToObject(meta, "real_node_id", node);
    cJSON_AddStringToObject(meta, "image_type", "image/png");
    char *mj = sd_json_print(meta, 0);
    cJSON_Delete(meta);
    if (!mj) {
        fclose(f);
        free(buf);
        return;
    }
    size_t ml = strlen(mj);
    unsigned char len[4] = {(unsigned char)(ml >> 24), (unsigned char)(ml >> 16), (unsigned char)(ml >> 8), (unsigned char)ml};
    fwrite(len, 1, 4, f);
    fwrite(mj, 1, ml, f);
    free(mj);
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = image ? sd_png_write_stream(f, "SaveImageWebsocket", ev->latent, NULL, 0, 1, &err)
                         : o->preview(o->preview_user, ev->latent, ev->latent_format, f, &err);
    fclose(f);
    if (rc && image) {
        run_log(r, "warning: prompt %s: node %s: cannot encode the picture: %s", r->j->id, ev->node_id, err.msg);
    } else if (rc) {
        r->preview_failed = 1;
        run_log(r, "warning: prompt %s: no previews: %s", r->j->id, err.msg);
    } else {
        o->sink.send_binary(o->sink.user, r->j->client_id, 4, buf, n); /* NULL client: everyone, as ComfyUI */
    }
    free(buf);
}

/* execution_error's exception_type: ComfyUI sends the Python exception's
 * class; sdflow's errors are status codes, named by the built-in exception
 * Python code raises for that kind of failure. */
static const char *exception_type(sd_status rc) {
    switch (rc) {
    case SD_ERR_NOMEM: return "MemoryError";
    case SD_ERR_IO: return "OSError";
    case SD_ERR_NOT_FOUND: return "FileNotFoundError";
    case SD_ERR_UNSUPPORTED: return "NotImplementedError";
    case SD_ERR_INVALID:
    case SD_ERR_FORMAT:
    case SD_ERR_VALIDATION: return "ValueError";
    default: return "RuntimeError";
    }
}

/* execution_error's current_outputs: ComfyUI's caches.outputs.all_node_ids()
 * as the run began, which (with its default caches) is every node of the
 * prompt; here in prompt order. */
static cJSON *prompt_node_ids(const sd_graph *g) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < sd_graph_count(g); i++) cJSON_AddItemToArray(a, cJSON_CreateString(sd_graph_at(g, i)->id));
    return a;
}

cJSON *srv_job_run(sd_exec *ex, srv_job *j, const srv_run_opts *o, sd_status *rc_out) {
    run_ctx r = {.o = o, .j = j, .messages = cJSON_CreateArray(), .outputs = cJSON_CreateObject(),
                 .meta = cJSON_CreateObject(), .executed = cJSON_CreateArray()};
    double t0 = srv_now();
    run_log(&r, "prompt %s started", j->id);
    cJSON *d = base_data(&r);
    cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
    emit(&r, "execution_start", d, 1);

    const cJSON *info = cJSON_GetObjectItemCaseSensitive(j->extra_data, "extra_pnginfo");
    /* an empty object adds no PNG chunk: the bytes stay those of `sdflow run` */
    char *extra = cJSON_IsObject(info) && info->child ? sd_json_print(info, 0) : NULL;
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(j->extra_data, "preview_method");
    int no_previews = cJSON_IsString(pm) && !strcmp(pm->valuestring, "none"); /* ComfyUI's per-prompt switch */
    sd_exec_opts xo = {
        .env = o->env,
        .cache = o->cache,
        .interrupt = o->interrupt,
        .progress = on_progress,
        .progress_user = &r,
        .on_node = on_node,
        .on_node_user = &r,
        .on_plan = on_plan,
        .on_plan_user = &r,
        .on_event = on_event,
        .on_event_user = &r,
        .previews = o->preview && !no_previews,
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
    if (o->publish && r.outputs && r.outputs->child) {
        /* before execution_success: a client told "success" can fetch them */
        sd_error perr;
        sd_error_clear(&perr);
        if (o->publish(o->publish_user, j, r.outputs, &perr)) {
            run_log(&r, "error: prompt %s: %s", j->id, perr.msg);
            cJSON_Delete(r.outputs);
            r.outputs = cJSON_CreateObject(); /* nothing listed that cannot be fetched */
            if (rc == SD_OK) {
                rc = perr.code ? perr.code : SD_ERR_IO;
                err = perr;
            }
        }
    }
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
        /* ComfyUI broadcasts this one when the prompt has no client */
        if (!j->client_id) o->sink.send(o->sink.user, NULL, "execution_interrupted", cJSON_Duplicate(d, 1));
        emit(&r, "execution_interrupted", d, 1);
    } else {
        status_str = "error";
        char msg[SD_ERR_MSG_MAX + 512];
        d = base_data(&r);
        cJSON_AddStringToObject(d, "node_id", err.node_id);
        cJSON_AddStringToObject(d, "node_type", err.class_type);
        cJSON_AddItemToObject(d, "executed", cJSON_Duplicate(r.executed, 1));
        sd_error_format(&err, msg, sizeof msg);
        srv_scrub_paths(o->env, msg, sizeof msg);
        cJSON_AddStringToObject(d, "exception_message", msg);
        cJSON_AddStringToObject(d, "exception_type", exception_type(rc));
        cJSON_AddArrayToObject(d, "traceback"); /* no Python frames to list */
        cJSON_AddItemToObject(d, "current_inputs", r.current_inputs ? r.current_inputs : cJSON_CreateObject());
        r.current_inputs = NULL;
        cJSON_AddItemToObject(d, "current_outputs", prompt_node_ids(j->graph));
        cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
        emit(&r, "execution_error", d, 1);
    }
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddItemToObject(entry, "prompt", srv_job_entry(j));
    cJSON_AddItemToObject(entry, "outputs", r.outputs);
    cJSON *status = cJSON_AddObjectToObject(entry, "status");
    cJSON_AddStringToObject(status, "status_str", status_str);
    cJSON_AddBoolToObject(status, "completed", rc == SD_OK);
    cJSON_AddItemToObject(status, "messages", r.messages);
    cJSON_AddItemToObject(entry, "meta", r.meta);
    cJSON_Delete(r.executed);
    cJSON_Delete(r.cached);
    cJSON_Delete(r.current_inputs);
    free(r.nodes);
    run_log(&r, "prompt %s %s: %zu executed, %zu cached, %.2fs%s%s", j->id,
            rc == SD_OK ? "done" : rc == SD_ERR_CANCELLED ? "interrupted" : "failed", rep.n_executed, rep.n_cached,
            srv_now() - t0, rc && rc != SD_ERR_CANCELLED ? ": " : "", rc && rc != SD_ERR_CANCELLED ? err.msg : "");
    sd_exec_report_free(&rep);
    sd_graph_problems_free(&probs);

    if (rc_out) *rc_out = rc;
    return entry;
}

void srv_job_send_finished(const srv_sink *sink, const srv_job *j) {
    if (!j->client_id) return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNullToObject(d, "node");
    cJSON_AddNullToObject(d, "display_node");
    cJSON_AddStringToObject(d, "prompt_id", j->id);
    sink->send(sink->user, j->client_id, "executing", d);
}

/* {prompt, outputs: {}, status: error with one message, meta: {}} */
static cJSON *unrun_entry(const srv_job *j, const char *event, cJSON *data, cJSON **data_out) {
    if (data_out) *data_out = cJSON_Duplicate(data, 1);
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddItemToObject(entry, "prompt", srv_job_entry(j));
    cJSON_AddObjectToObject(entry, "outputs");
    cJSON *status = cJSON_AddObjectToObject(entry, "status");
    cJSON_AddStringToObject(status, "status_str", "error");
    cJSON_AddBoolToObject(status, "completed", 0);
    cJSON *m = cJSON_CreateArray();
    cJSON_AddItemToArray(m, cJSON_CreateString(event));
    cJSON_AddItemToArray(m, data);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(status, "messages"), m);
    cJSON_AddObjectToObject(entry, "meta");
    return entry;
}

cJSON *srv_job_failed_entry(const srv_job *j, const char *message, cJSON **data_out) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", j->id);
    cJSON_AddStringToObject(d, "node_id", "");
    cJSON_AddStringToObject(d, "node_type", "");
    cJSON_AddArrayToObject(d, "executed");
    cJSON_AddStringToObject(d, "exception_message", message);
    cJSON_AddStringToObject(d, "exception_type", "RuntimeError");
    cJSON_AddArrayToObject(d, "traceback");
    cJSON_AddObjectToObject(d, "current_inputs");
    cJSON_AddArrayToObject(d, "current_outputs");
    cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
    return unrun_entry(j, "execution_error", d, data_out);
}

cJSON *srv_job_interrupted_entry(const srv_job *j, cJSON **data_out) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", j->id);
    cJSON_AddStringToObject(d, "node_id", "");
    cJSON_AddStringToObject(d, "node_type", "");
    cJSON_AddArrayToObject(d, "executed");
    cJSON_AddNumberToObject(d, "timestamp", (double)srv_time_ms());
    return unrun_entry(j, "execution_interrupted", d, data_out);
}
