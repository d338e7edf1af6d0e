/* job.c - a prompt's admission (ComfyUI's /prompt validation and its
 * error shape) and the job's own helpers (job.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/node.h"
#include "job.h"
#include "core/json_util.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

char *srv_binary_frame(uint32_t event, const void *payload, size_t n, size_t *len) {
    unsigned char *buf = malloc(n + 4);
    if (!buf) return NULL;
    buf[0] = (unsigned char)(event >> 24);
    buf[1] = (unsigned char)(event >> 16);
    buf[2] = (unsigned char)(event >> 8);
    buf[3] = (unsigned char)event;
    memcpy(buf + 4, payload, n);
    *len = n + 4;
    return (char *)buf;
}

const char *srv_folder_of_type(const sd_env *env, const char *type) {
    if (!type || !strcmp(type, "output")) return env->output_dir;
    if (!strcmp(type, "input")) return env->input_dir;
    if (!strcmp(type, "temp")) return env->temp_dir;
    return NULL;
}

char *srv_read_file(const char *path, size_t *n) {
    *n = 0;
    /* a regular file only: opening a FIFO would wait for a writer forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        close(fd);
        fd = -1;
        errno = EINVAL;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0;
    for (;;) {
        if (*n == cap) {
            char *b = realloc(buf, cap = cap ? cap * 2 : 1 << 16);
            if (!b) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = b;
        }
        size_t k = fread(buf + *n, 1, cap - *n, f);
        if (!k) break;
        *n += k;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    return buf;
}

long long srv_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void srv_uuid4(char out[37]) {
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t k = getrandom(b + got, sizeof b - got, 0);
        if (k > 0) got += (size_t)k;
        else if (errno != EINTR) break;
    }
    if (got < sizeof b) { /* no entropy source: still unique within this process */
        static unsigned long long counter;
        unsigned long long v = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) ^ (unsigned long long)srv_time_ms();
        for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(v >> (8 * (i % 8))) ^ (unsigned char)i;
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* ---- messages that leave the server ---------------------------------------- */

/* Replaces each occurrence of `dir` (and of its real path) in msg by `as`. */
static void scrub_one(char *msg, size_t cap, const char *dir, const char *as) {
    char real[4096];
    const char *forms[2] = {dir, dir && realpath(dir, real) ? real : NULL};
    for (int f = 0; f < 2; f++) {
        const char *d = forms[f];
        size_t dl = d ? strlen(d) : 0;
        while (dl > 1 && d[dl - 1] == '/') dl--;
        if (dl < 2) continue;
        for (char *at = msg; (at = memmem(at, strlen(at), d, dl));) {
            size_t al = strlen(as), rest = strlen(at + dl);
            if ((size_t)(at - msg) + al + rest + 1 > cap) break;
            memmove(at + al, at + dl, rest + 1);
            memcpy(at, as, al);
            at += al;
        }
    }
}

void srv_scrub_paths(const sd_env *env, char *msg, size_t cap) {
    if (!env || !msg) return;
    /* the longest first, so that a folder inside another keeps its own name */
    const char *dirs[6] = {env->models_dir, env->comfyui_dir, env->input_dir, env->output_dir, env->temp_dir,
                           env->tokenizer_dir};
    const char *names[6] = {"<models>", "<comfyui>", "<input>", "<output>", "<temp>", "<tokenizer>"};
    int order[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 0; i < 6; i++)
        for (int k = i + 1; k < 6; k++)
            if ((dirs[order[k]] ? strlen(dirs[order[k]]) : 0) > (dirs[order[i]] ? strlen(dirs[order[i]]) : 0)) {
                int t = order[i];
                order[i] = order[k];
                order[k] = t;
            }
    for (int i = 0; i < 6; i++) scrub_one(msg, cap, dirs[order[i]], names[order[i]]);
}

/* ---- the job ------------------------------------------------------------ */

void srv_job_free(srv_job *j) {
    if (!j) return;
    cJSON_Delete(j->prompt);
    cJSON_Delete(j->extra_data);
    cJSON_Delete(j->outputs);
    free(j->client_id);
    sd_graph_free(j->graph);
    free(j);
}

/* [number, prompt_id, prompt, extra_data, outputs_to_execute] */
cJSON *srv_job_entry(const srv_job *j) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    cJSON_AddItemToArray(a, cJSON_CreateNumber(j->number));
    cJSON_AddItemToArray(a, cJSON_CreateString(j->id));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->prompt, 1));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->extra_data, 1));
    cJSON_AddItemToArray(a, cJSON_Duplicate(j->outputs, 1));
    return a;
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
static cJSON *validation_body(const sd_env *env, const sd_graph *g, const sd_graph_problems *p) {
    cJSON *root = cJSON_CreateObject();
    for (size_t i = 0; i < p->n; i++) {
        const sd_graph_problem *q = &p->items[i];
        if (!strcmp(q->kind, "invalid_prompt") || !strcmp(q->kind, "prompt_no_outputs")) {
            /* the whole prompt fails; ComfyUI reports only this */
            char details[256] = "", msg[SD_ERR_MSG_MAX];
            if (q->node_id) snprintf(details, sizeof details, "Node ID '#%s'", q->node_id);
            snprintf(msg, sizeof msg, "%s", q->message);
            srv_scrub_paths(env, msg, sizeof msg);
            cJSON_AddItemToObject(root, "error", top_error(q->kind, msg, details));
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
        srv_scrub_paths(env, d, sizeof d); /* no folder of this machine in what clients read */
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


/* ---- admission ------------------------------------------------------------ */

static cJSON *refusal(const char *type, const char *message, const char *details) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "error", top_error(type, message, details));
    cJSON_AddObjectToObject(r, "node_errors");
    return r;
}

static cJSON *output_ids(const sd_graph *g) {
    cJSON *a = cJSON_CreateArray();
    for (size_t k = 0; a && k < sd_graph_count(g); k++) {
        const sd_graph_node *n = sd_graph_at(g, k);
        if (is_output_node(n)) cJSON_AddItemToArray(a, cJSON_CreateString(n->id));
    }
    return a;
}

/* The client's prompt_id as ComfyUI keeps it (str(json_data.get("prompt_id"))):
 * a string as it is, a whole number in decimal; absent or null: a new
 * uuid4. What sdflow cannot keep is refused rather than silently replaced
 * (it was): an empty or over-long (> n-1 bytes) string, control characters,
 * a fraction, any other JSON type. NULL when kept, else why not. */
static const char *take_prompt_id(const cJSON *pid, char *id, size_t n) {
    if (!pid || cJSON_IsNull(pid)) {
        srv_uuid4(id);
        return NULL;
    }
    if (cJSON_IsString(pid)) {
        const char *s = pid->valuestring;
        size_t len = strlen(s);
        if (len == 0) return "prompt_id is empty";
        if (len >= n) return "prompt_id is too long (at most 63 bytes)";
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
            if (*p < 0x20 || *p == 0x7f) return "prompt_id holds a control character";
        snprintf(id, n, "%s", s);
        return NULL;
    }
    if (cJSON_IsRaw(pid) && pid->valuestring) { /* an integer beyond 2^53, digits kept by the exact parser */
        const char *s = pid->valuestring + (pid->valuestring[0] == '-');
        if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(pid->valuestring) >= n)
            return "prompt_id must be a string or a whole number";
        snprintf(id, n, "%s", pid->valuestring);
        return NULL;
    }
    if (cJSON_IsNumber(pid) && isfinite(pid->valuedouble) && pid->valuedouble == floor(pid->valuedouble) &&
        fabs(pid->valuedouble) <= 9007199254740992.0) {
        snprintf(id, n, "%.0f", pid->valuedouble);
        return NULL;
    }
    return "prompt_id must be a string or a whole number";
}

int srv_job_admit(const sd_env *env, const cJSON *body, srv_job **out, cJSON **reply, char *note, size_t note_n) {
    *out = NULL;
    *reply = NULL;
    if (note_n) note[0] = 0;
    char pid_buf[sizeof((srv_job *)0)->id];
    const char *bad_id = take_prompt_id(cJSON_GetObjectItemCaseSensitive(body, "prompt_id"), pid_buf, sizeof pid_buf);
    if (bad_id) {
        *reply = refusal("invalid_prompt_id", bad_id, "");
        return 400;
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!prompt) {
        *reply = refusal("no_prompt", "No prompt provided", "No prompt provided");
        return 400;
    }
    if (!cJSON_IsObject(prompt)) {
        *reply = refusal("invalid_prompt", "The prompt must be a JSON object", "");
        return 400;
    }
    sd_error err;
    sd_error_clear(&err);
    srv_job *j = calloc(1, sizeof *j);
    char *text = sd_json_print(prompt, 0);
    if (!j || !text) {
        free(text);
        free(j);
        *reply = refusal("out_of_memory", "out of memory", "");
        return 500;
    }
    sd_status rc = sd_graph_from_json(text, "prompt", &j->graph, &err);
    free(text);
    if (rc) {
        srv_scrub_paths(env, err.msg, sizeof err.msg);
        *reply = refusal("invalid_prompt", err.msg, err.node_id[0] ? err.node_id : "");
        srv_job_free(j);
        return 400;
    }
    sd_graph_problems probs = {0};
    rc = sd_graph_validate(j->graph, env, &probs, &err);
    cJSON *dropped = NULL; /* node_errors of outputs left out (ComfyUI: 200 with node_errors) */
    if (rc == SD_ERR_VALIDATION) {
        cJSON *r = validation_body(env, j->graph, &probs);
        if (keep_valid_outputs(j->graph, &probs, env) == SD_OK) {
            dropped = cJSON_DetachItemFromObjectCaseSensitive(r, "node_errors");
            cJSON_Delete(r);
            snprintf(note, note_n, "prompt accepted without its invalid outputs: %s", err.msg);
            rc = SD_OK;
        } else {
            sd_graph_problems_free(&probs);
            snprintf(note, note_n, "prompt refused: %s", err.msg);
            srv_job_free(j);
            *reply = r;
            return 400;
        }
    }
    sd_graph_problems_free(&probs);
    if (rc) {
        srv_job_free(j);
        srv_scrub_paths(env, err.msg, sizeof err.msg);
        *reply = refusal(sd_status_name(rc), err.msg, "");
        return 500;
    }
    j->prompt = cJSON_Duplicate(prompt, 1);
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(body, "extra_data");
    j->extra_data = cJSON_IsObject(extra) ? cJSON_Duplicate(extra, 1) : cJSON_CreateObject();
    /* ComfyUI keeps these credentials out of /queue and /history; sdflow
     * has no node that needs them, so they are not kept at all */
    cJSON_DeleteItemFromObjectCaseSensitive(j->extra_data, "auth_token_comfy_org");
    cJSON_DeleteItemFromObjectCaseSensitive(j->extra_data, "api_key_comfy_org");
    /* ComfyUI's stamp (ms), which /api/jobs sorts by */
    cJSON_DeleteItemFromObjectCaseSensitive(j->extra_data, "create_time");
    if (j->extra_data) cJSON_AddNumberToObject(j->extra_data, "create_time", (double)srv_time_ms());
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(body, "client_id");
    if (cJSON_IsString(cid) && cid->valuestring[0] && strlen(cid->valuestring) < 64) {
        j->client_id = strdup(cid->valuestring);
        cJSON_DeleteItemFromObjectCaseSensitive(j->extra_data, "client_id");
        cJSON_AddStringToObject(j->extra_data, "client_id", cid->valuestring);
    }
    snprintf(j->id, sizeof j->id, "%s", pid_buf);
    j->outputs = output_ids(j->graph);
    if (!j->prompt || !j->extra_data || !j->outputs) {
        srv_job_free(j);
        cJSON_Delete(dropped);
        *reply = refusal("out_of_memory", "out of memory", "");
        return 500;
    }
    *reply = dropped ? dropped : cJSON_CreateObject();
    *out = j;
    return 200;
}

sd_status srv_job_restore(const char *id, double number, cJSON *prompt, cJSON *extra_data, cJSON *outputs,
                          srv_job **out, sd_error *err) {
    *out = NULL;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        cJSON_Delete(prompt);
        cJSON_Delete(extra_data);
        cJSON_Delete(outputs);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    snprintf(j->id, sizeof j->id, "%s", id);
    j->number = number;
    j->prompt = prompt;
    j->extra_data = cJSON_IsObject(extra_data) ? extra_data : cJSON_CreateObject();
    if (extra_data != j->extra_data) cJSON_Delete(extra_data);
    j->outputs = cJSON_IsArray(outputs) ? outputs : cJSON_CreateArray();
    if (outputs != j->outputs) cJSON_Delete(outputs);
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(j->extra_data, "client_id");
    if (cJSON_IsString(cid) && cid->valuestring[0]) j->client_id = strdup(cid->valuestring);
    char *text = cJSON_IsObject(prompt) ? sd_json_print(prompt, 0) : NULL;
    if (!text) {
        srv_job_free(j);
        return sd_error_set(err, SD_ERR_FORMAT, "prompt %s: the stored prompt is not a JSON object", id);
    }
    sd_status rc = sd_graph_from_json(text, "prompt", &j->graph, err);
    free(text);
    if (rc) {
        srv_job_free(j);
        return rc;
    }
    /* only what the accepted outputs need, as the server admitted it */
    size_t n = sd_graph_count(j->graph);
    unsigned char *keep = calloc(n ? n : 1, 1), *mark = malloc(n ? n : 1);
    size_t *stack = malloc((n ? n : 1) * sizeof *stack);
    rc = keep && mark && stack ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const cJSON *o;
    cJSON_ArrayForEach(o, j->outputs) {
        if (rc || !cJSON_IsString(o)) continue;
        size_t at = sd_graph_index_of(j->graph, o->valuestring);
        if (at == (size_t)-1) continue;
        memset(mark, 0, n);
        sd_graph_mark_ancestors(j->graph, at, mark, stack);
        for (size_t m = 0; m < n; m++) keep[m] |= mark[m];
    }
    if (!rc && cJSON_GetArraySize(j->outputs) > 0) sd_graph_retain(j->graph, keep);
    free(keep);
    free(mark);
    free(stack);
    if (rc) {
        srv_job_free(j);
        return rc;
    }
    *out = j;
    return SD_OK;
}

cJSON *srv_queue_info_json(size_t remaining) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "exec_info");
    cJSON_AddNumberToObject(e, "queue_remaining", (double)remaining);
    return o;
}

long long srv_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &pages, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

size_t srv_job_keep_budget(sd_exec *ex, size_t budget) {
    size_t dropped = 0;
    while ((size_t)srv_rss_bytes() > budget && sd_exec_drop_lru(ex)) {
        dropped++;
        malloc_trim(0);
    }
    return dropped;
}
