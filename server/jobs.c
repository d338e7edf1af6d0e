/* jobs.c - GET /api/jobs and /api/jobs/{id}: ComfyUI's one list of every
 * prompt, running, pending and finished (server.py, comfy_execution/
 * jobs.py), built from what /queue and /history answer (in this process or
 * in Redis). Query: status (comma-separated: pending, in_progress,
 * completed, failed), workflow_id, sort_by (created_at |
 * execution_duration), sort_order (asc | desc), limit, offset; errors are
 * {"error": "..."} with 400, an unknown id 404. */
#include <civetweb.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "internal.h"

static double num_or(const cJSON *j, double dflt) {
    return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

static int bad(struct mg_connection *c, int status, const char *msg) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "error", msg);
    return srv_reply_json(c, status, e);
}

/* create_time and the workflow's id, as _extract_job_metadata. */
static void add_meta(cJSON *job, const cJSON *extra) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(extra, "create_time");
    if (cJSON_IsNumber(ct)) cJSON_AddNumberToObject(job, "create_time", ct->valuedouble);
    const cJSON *wf = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(extra, "extra_pnginfo"), "workflow");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(wf, "id");
    if (id && !cJSON_IsNull(id)) cJSON_AddItemToObject(job, "workflow_id", cJSON_Duplicate(id, 1));
}

/* [number, id, prompt, extra_data, outputs] -> {id, status, priority, create_time, outputs_count, workflow_id} */
static cJSON *queue_job(const cJSON *item, const char *status) {
    cJSON *job = cJSON_CreateObject();
    const cJSON *id = cJSON_GetArrayItem(item, 1);
    cJSON_AddStringToObject(job, "id", cJSON_IsString(id) ? id->valuestring : "");
    cJSON_AddStringToObject(job, "status", status);
    cJSON_AddNumberToObject(job, "priority", num_or(cJSON_GetArrayItem(item, 0), 0));
    add_meta(job, cJSON_GetArrayItem(item, 3));
    cJSON_AddNumberToObject(job, "outputs_count", 0);
    return job;
}

static int previewable(const char *media, const cJSON *item) {
    if (!strcmp(media, "images") || !strcmp(media, "video") || !strcmp(media, "audio")) return 1;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(item, "format");
    if (cJSON_IsString(fmt) && (!strncmp(fmt->valuestring, "video/", 6) || !strncmp(fmt->valuestring, "audio/", 6)))
        return 1;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "filename");
    const char *dot = cJSON_IsString(fn) ? strrchr(fn->valuestring, '.') : NULL;
    return dot && (!strcasecmp(dot, ".obj") || !strcasecmp(dot, ".fbx") || !strcasecmp(dot, ".gltf") ||
                   !strcasecmp(dot, ".glb"));
}

/* A history entry as a job (get_outputs_summary for the counts and the
 * preview; with full, the outputs, the status and the workflow too). */
static cJSON *history_job(const char *id, const cJSON *entry, int full) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(entry, "prompt");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(entry, "status");
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(entry, "outputs");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(status, "status_str");
    int failed = cJSON_IsString(str) && !strcmp(str->valuestring, "error");
    cJSON *job = cJSON_CreateObject();
    cJSON_AddStringToObject(job, "id", id);
    cJSON_AddStringToObject(job, "status", failed ? "failed" : "completed");
    cJSON_AddNumberToObject(job, "priority", num_or(cJSON_GetArrayItem(prompt, 0), 0));
    add_meta(job, cJSON_GetArrayItem(prompt, 3));
    const cJSON *m, *start = NULL, *end = NULL, *error = NULL;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(status, "messages")) {
        const cJSON *ev = cJSON_GetArrayItem(m, 0), *data = cJSON_GetArrayItem(m, 1);
        if (!cJSON_IsString(ev) || !cJSON_IsObject(data)) continue;
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(data, "timestamp");
        if (!strcmp(ev->valuestring, "execution_start")) start = ts;
        else if (!strcmp(ev->valuestring, "execution_success") || !strcmp(ev->valuestring, "execution_error") ||
                 !strcmp(ev->valuestring, "execution_interrupted")) {
            end = ts;
            if (!strcmp(ev->valuestring, "execution_error")) error = data;
        }
    }
    if (cJSON_IsNumber(start)) cJSON_AddNumberToObject(job, "execution_start_time", start->valuedouble);
    if (cJSON_IsNumber(end)) cJSON_AddNumberToObject(job, "execution_end_time", end->valuedouble);
    if (error) cJSON_AddItemToObject(job, "execution_error", cJSON_Duplicate(error, 1));
    int count = 0;
    cJSON *preview = NULL, *fallback = NULL;
    const cJSON *node;
    cJSON_ArrayForEach(node, outputs) {
        const cJSON *media;
        cJSON_ArrayForEach(media, node) {
            if (!strcmp(media->string, "animated") || !cJSON_IsArray(media)) continue;
            const cJSON *item;
            cJSON_ArrayForEach(item, media) {
                if (!cJSON_IsObject(item)) continue;
                count++;
                if (preview || !previewable(media->string, item)) continue;
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
                int out = cJSON_IsString(type) && !strcmp(type->valuestring, "output");
                if (!out && fallback) continue;
                cJSON *e = cJSON_Duplicate(item, 1);
                cJSON_AddStringToObject(e, "nodeId", node->string);
                cJSON_AddStringToObject(e, "mediaType", media->string);
                if (out) preview = e;
                else fallback = e;
            }
        }
    }
    cJSON_AddNumberToObject(job, "outputs_count", count);
    if (preview) cJSON_Delete(fallback);
    else preview = fallback;
    if (preview) cJSON_AddItemToObject(job, "preview_output", preview);
    const cJSON *wid = cJSON_DetachItemFromObjectCaseSensitive(job, "workflow_id");
    if (wid) cJSON_AddItemToObject(job, "workflow_id", (cJSON *)wid); /* ComfyUI's key order */
    if (full) {
        cJSON_AddItemToObject(job, "outputs", outputs ? cJSON_Duplicate(outputs, 1) : cJSON_CreateObject());
        cJSON_AddItemToObject(job, "execution_status", status ? cJSON_Duplicate(status, 1) : cJSON_CreateObject());
        cJSON *wf = cJSON_AddObjectToObject(job, "workflow");
        cJSON_AddItemToObject(wf, "prompt", cJSON_Duplicate(cJSON_GetArrayItem(prompt, 2), 1));
        cJSON_AddItemToObject(wf, "extra_data", cJSON_Duplicate(cJSON_GetArrayItem(prompt, 3), 1));
    }
    return job;
}

static int fetch(srv *s, struct mg_connection *c, const char *id, cJSON **queue, cJSON **hist) {
    sd_error err;
    sd_error_clear(&err);
    if (s->rq) {
        *queue = srv_rq_queue_lists(s, &err);
        *hist = *queue ? srv_rq_history_json(s, id, -1, -1, &err) : NULL;
    } else {
        *queue = srv_queue_lists(s);
        *hist = srv_history_json(s, id, -1, -1);
    }
    if (*queue && *hist) return 0;
    cJSON_Delete(*queue);
    cJSON_Delete(*hist);
    srv_log(s, "error: /api/jobs: %s", err.msg);
    return srv_reply_error(c, 503, "redis_unavailable", "%s", err.msg);
}

static int one_job(srv *s, struct mg_connection *c, const char *id) {
    cJSON *queue, *hist;
    int st = fetch(s, c, id, &queue, &hist);
    if (st) return st;
    cJSON *job = NULL;
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(hist, id), *item;
    if (entry) job = history_job(id, entry, 1);
    for (int k = 0; k < 2 && !job; k++) {
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(queue, k ? "queue_pending" : "queue_running")) {
            const cJSON *pid = cJSON_GetArrayItem(item, 1);
            if (cJSON_IsString(pid) && !strcmp(pid->valuestring, id)) {
                job = queue_job(item, k ? "pending" : "in_progress");
                break;
            }
        }
    }
    cJSON_Delete(queue);
    cJSON_Delete(hist);
    if (!job) return bad(c, 404, "Job not found");
    return srv_reply_json(c, 200, job);
}

typedef struct keyed {
    double key;
    cJSON *job;
} keyed;

static int by_key_asc(const void *a, const void *b) {
    double x = ((const keyed *)a)->key, y = ((const keyed *)b)->key;
    return x < y ? -1 : x > y;
}

static int by_key_desc(const void *a, const void *b) {
    return by_key_asc(b, a);
}

static int list_jobs(srv *s, struct mg_connection *c) {
    char *status = srv_query(c, "status"), *wid = srv_query(c, "workflow_id"), *sb = srv_query(c, "sort_by"),
         *so = srv_query(c, "sort_order"), *lim = srv_query(c, "limit"), *off = srv_query(c, "offset");
    int want[4] = {1, 1, 1, 1}; /* pending, in_progress, completed, failed */
    static const char *const names[4] = {"pending", "in_progress", "completed", "failed"};
    long limit = -1, offset = 0;
    int st = 0;
    char msg[512];
    if (status && *status) {
        memset(want, 0, sizeof want);
        char *save = NULL;
        for (char *t = strtok_r(status, ",", &save); t && !st; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ') t++;
            size_t n = strlen(t);
            while (n && t[n - 1] == ' ') t[--n] = 0;
            if (!n) continue;
            for (char *p = t; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
            int k = 0;
            while (k < 4 && strcmp(t, names[k])) k++;
            if (k == 4) {
                snprintf(msg, sizeof msg, "Invalid status value(s): %.100s. Valid values: pending, in_progress, completed, failed", t);
                st = bad(c, 400, msg);
            } else {
                want[k] = 1;
            }
        }
    }
    int by_duration = sb && !strcasecmp(sb, "execution_duration");
    if (!st && sb && strcasecmp(sb, "created_at") && !by_duration) st = bad(c, 400, "sort_by must be 'created_at' or 'execution_duration'");
    int asc = so && !strcasecmp(so, "asc");
    if (!st && so && strcasecmp(so, "desc") && !asc) st = bad(c, 400, "sort_order must be 'asc' or 'desc'");
    if (!st && lim) {
        char *e;
        limit = strtol(lim, &e, 10);
        if (e == lim || *e) st = bad(c, 400, "limit must be an integer");
        else if (limit <= 0) st = bad(c, 400, "limit must be a positive integer");
    }
    if (!st && off) {
        char *e;
        offset = strtol(off, &e, 10);
        if (e == off || *e) st = bad(c, 400, "offset must be an integer");
        else if (offset < 0) offset = 0;
    }
    cJSON *queue = NULL, *hist = NULL;
    if (!st) st = fetch(s, c, NULL, &queue, &hist);
    if (st) goto out;
    size_t n = 0, cap = 16;
    keyed *all = malloc(cap * sizeof *all);
    const cJSON *item;
    for (int k = 0; k < 3 && all; k++) {
        const char *list = k == 0 ? "queue_running" : k == 1 ? "queue_pending" : NULL;
        const cJSON *src = list ? cJSON_GetObjectItemCaseSensitive(queue, list) : hist;
        cJSON_ArrayForEach(item, src) {
            cJSON *job;
            if (k == 0 && want[1]) job = queue_job(item, "in_progress");
            else if (k == 1 && want[0]) job = queue_job(item, "pending");
            else if (k == 2) {
                job = history_job(item->string, item, 0);
                const cJSON *js = cJSON_GetObjectItemCaseSensitive(job, "status");
                if (!want[!strcmp(js->valuestring, "failed") ? 3 : 2]) {
                    cJSON_Delete(job);
                    job = NULL;
                }
            } else job = NULL;
            if (!job) continue;
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(job, "workflow_id");
            if (wid && *wid && !(cJSON_IsString(w) && !strcmp(w->valuestring, wid))) {
                cJSON_Delete(job);
                continue;
            }
            double key;
            if (by_duration) {
                double a = num_or(cJSON_GetObjectItemCaseSensitive(job, "execution_start_time"), 0);
                double b = num_or(cJSON_GetObjectItemCaseSensitive(job, "execution_end_time"), 0);
                key = a && b ? b - a : 0;
            } else {
                key = num_or(cJSON_GetObjectItemCaseSensitive(job, "create_time"), 0);
            }
            if (n == cap) {
                keyed *m = realloc(all, (cap *= 2) * sizeof *m);
                if (!m) { cJSON_Delete(job); break; }
                all = m;
            }
            all[n++] = (keyed){key, job};
        }
    }
    /* a stable sort, as Python's sorted: ties keep the order above */
    for (size_t i = 1; all && i < n; i++) {
        keyed x = all[i];
        size_t j = i;
        while (j > 0 && (asc ? by_key_asc : by_key_desc)(&all[j - 1], &x) > 0) {
            all[j] = all[j - 1];
            j--;
        }
        all[j] = x;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON *jobs = cJSON_AddArrayToObject(r, "jobs");
    size_t shown = 0;
    for (size_t i = 0; all && i < n; i++) {
        if ((long)i >= offset && (limit < 0 || (long)shown < limit)) {
            cJSON_AddItemToArray(jobs, all[i].job);
            shown++;
        } else {
            cJSON_Delete(all[i].job);
        }
    }
    free(all);
    cJSON *pg = cJSON_AddObjectToObject(r, "pagination");
    cJSON_AddNumberToObject(pg, "offset", (double)offset);
    if (limit < 0) cJSON_AddNullToObject(pg, "limit");
    else cJSON_AddNumberToObject(pg, "limit", (double)limit);
    cJSON_AddNumberToObject(pg, "total", (double)n);
    cJSON_AddBoolToObject(pg, "has_more", (size_t)offset + shown < n);
    st = srv_reply_json(c, 200, r);
out:
    cJSON_Delete(queue);
    cJSON_Delete(hist);
    free(status);
    free(wid);
    free(sb);
    free(so);
    free(lim);
    free(off);
    return st;
}

int srv_jobs_route(srv *s, struct mg_connection *c, const char *id) {
    return id ? one_job(s, c, id) : list_jobs(s, c);
}
