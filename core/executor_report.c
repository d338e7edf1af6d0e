/* executor_report.c - describing outputs and rendering the run report. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "executor_internal.h"
#include "sha256.h"
#include "core/json_util.h"

const char *sd_node_status_name(sd_node_status s) {
    switch (s) {
    case SD_NODE_EXECUTED: return "executed";
    case SD_NODE_CACHED: return "cached";
    case SD_NODE_MEMO: return "memo";
    case SD_NODE_FAILED: return "failed";
    case SD_NODE_SKIPPED: return "skipped";
    }
    return "unknown";
}

typedef struct { char *buf; size_t n, cap; } sbuf;

static void sb_add(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *s, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if ((size_t)len >= sizeof tmp) len = sizeof tmp - 1;
    if (s->n + (size_t)len + 1 > s->cap) {
        size_t cap = (s->cap + (size_t)len + 1) * 2;
        char *b = realloc(s->buf, cap);
        if (!b) return;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->n, tmp, (size_t)len + 1);
    s->n += (size_t)len;
}

/* Short description, at most two levels deep so a long conditioning list
 * stays one line. */
static void describe(sbuf *s, const sd_value *v, int depth) {
    char shape[256];
    switch (sd_value_kind_of(v)) {
    case SD_VAL_NONE: sb_add(s, "none"); break;
    case SD_VAL_INT: sb_add(s, "%lld", (long long)sd_value_as_int(v)); break;
    case SD_VAL_FLOAT: sb_add(s, "%g", sd_value_as_float(v)); break;
    case SD_VAL_BOOL: sb_add(s, "%s", sd_value_as_bool(v) ? "true" : "false"); break;
    case SD_VAL_STRING: {
        const char *str = sd_value_as_string(v);
        sb_add(s, "\"%.40s%s\"", str, strlen(str) > 40 ? "..." : "");
        break;
    }
    case SD_VAL_TENSOR: sb_add(s, "%s", sd_tensor_shape_str(sd_value_as_tensor(v), shape, sizeof shape)); break;
    case SD_VAL_HANDLE: {
        const sd_handle_type *t = sd_value_handle_type(v);
        sb_add(s, "<%s>", t && t->type_name ? t->type_name : "handle");
        break;
    }
    case SD_VAL_LIST: {
        size_t n = sd_value_list_len(v);
        if (depth >= 2) { sb_add(s, "[%zu items]", n); break; }
        sb_add(s, "[");
        for (size_t i = 0; i < n && i < 4; i++) {
            if (i) sb_add(s, ", ");
            describe(s, sd_value_list_get(v, i), depth + 1);
        }
        if (n > 4) sb_add(s, ", ... %zu items", n);
        sb_add(s, "]");
        break;
    }
    case SD_VAL_DICT: {
        size_t n = sd_value_dict_len(v);
        if (depth >= 2) { sb_add(s, "{%zu keys}", n); break; }
        if (depth) sb_add(s, "{");
        for (size_t i = 0; i < n; i++) {
            sb_add(s, "%s%s=", i ? " " : "", sd_value_dict_key(v, i));
            describe(s, sd_value_dict_at(v, i), depth + 1);
        }
        if (depth) sb_add(s, "}");
        break;
    }
    }
}

char *sd_exec_describe_value(const sd_value *v) {
    sbuf s = {0};
    describe(&s, v, 0);
    return s.buf ? s.buf : strdup("");
}

char *sd_exec_describe_output(const char *type, const sd_value *v) {
    sbuf s = {0};
    sb_add(&s, "%s ", type ? type : "?");
    describe(&s, v, 0);
    return s.buf ? s.buf : strdup("?");
}

/* Whether `path` lies below the folder `dir` (compared as real paths). */
static int inside(const char *dir, const char *path) {
    if (!dir) return 0;
    char *real = realpath(dir, NULL);
    if (!real) return 0;
    size_t n = strlen(real);
    int ok = strncmp(path, real, n) == 0 && (path[n] == '/' || (n == 1 && real[0] == '/'));
    free(real);
    return ok;
}

int sd_exec_ui_files_ok(const sd_env *env, const sd_value *ui) {
    const sd_value *files = sd_value_dict_get(ui, "files");
    const sd_value *hashes = sd_value_dict_get(ui, "sha256");
    size_t n = sd_value_list_len(files);
    if (n && sd_value_list_len(hashes) != n) return 0; /* written before hashes were kept */
    for (size_t i = 0; i < n; i++) {
        const char *p = sd_value_as_string(sd_value_list_get(files, i));
        const char *want = sd_value_as_string(sd_value_list_get(hashes, i));
        struct stat st;
        if (!p || !want || lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
        if (env && (env->output_dir || env->temp_dir) && !inside(env->output_dir, p) &&
            !inside(env->temp_dir, p))
            return 0;
        uint8_t h[32];
        char hex[65];
        if (sd_sha256_file(p, h, NULL) != SD_OK) return 0;
        sd_sha256_hex(h, hex);
        if (strcmp(hex, want) != 0) return 0;
    }
    return 1;
}

void sd_exec_report_free(sd_exec_report *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        sd_exec_record *rec = &r->items[i];
        free(rec->node_id);
        free(rec->class_type);
        for (size_t k = 0; k < rec->n_outputs; k++) free(rec->output_desc[k]);
        free(rec->output_desc);
        for (size_t k = 0; k < rec->n_warnings; k++) free(rec->warnings[k]);
        free(rec->warnings);
        sd_value_unref(rec->ui);
    }
    free(r->items);
    memset(r, 0, sizeof *r);
}

/* The ui result as JSON; tensors and handles (never expected there) become
 * their description. */
static cJSON *ui_json(const sd_value *v) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_NONE: return cJSON_CreateNull();
    case SD_VAL_INT: return cJSON_CreateNumber((double)sd_value_as_int(v));
    case SD_VAL_FLOAT: return cJSON_CreateNumber(sd_value_as_float(v));
    case SD_VAL_BOOL: return cJSON_CreateBool(sd_value_as_bool(v));
    case SD_VAL_STRING: return cJSON_CreateString(sd_value_as_string(v));
    case SD_VAL_LIST: {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; a && i < sd_value_list_len(v); i++)
            cJSON_AddItemToArray(a, ui_json(sd_value_list_get(v, i)));
        return a;
    }
    case SD_VAL_DICT: {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; o && i < sd_value_dict_len(v); i++)
            cJSON_AddItemToObject(o, sd_value_dict_key(v, i), ui_json(sd_value_dict_at(v, i)));
        return o;
    }
    default: {
        char *d = sd_exec_describe_output("", v);
        cJSON *s = cJSON_CreateString(d ? d + 1 : "");
        free(d);
        return s;
    }
    }
}

char *sd_exec_report_json(const sd_exec_report *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON *nodes = cJSON_AddObjectToObject(root, "nodes");
    if (!root || !nodes) { cJSON_Delete(root); return NULL; }
    for (size_t i = 0; i < r->n; i++) {
        const sd_exec_record *rec = &r->items[i];
        cJSON *o = cJSON_AddObjectToObject(nodes, rec->node_id);
        if (!o) continue;
        cJSON_AddStringToObject(o, "class_type", rec->class_type);
        cJSON_AddStringToObject(o, "status", sd_node_status_name(rec->status));
        if (rec->delivered) cJSON_AddTrueToObject(o, "delivered");
        cJSON_AddNumberToObject(o, "seconds", rec->seconds);
        cJSON *outs = cJSON_AddArrayToObject(o, "outputs");
        for (size_t k = 0; outs && k < rec->n_outputs; k++)
            cJSON_AddItemToArray(outs, cJSON_CreateString(rec->output_desc[k] ? rec->output_desc[k] : ""));
        if (rec->ui) cJSON_AddItemToObject(o, "ui", ui_json(rec->ui));
        if (rec->n_warnings) {
            cJSON *w = cJSON_AddArrayToObject(o, "warnings");
            for (size_t k = 0; w && k < rec->n_warnings; k++) cJSON_AddItemToArray(w, cJSON_CreateString(rec->warnings[k]));
        }
        char hex[65];
        sd_sha256_hex(rec->key, hex);
        cJSON_AddStringToObject(o, "key", hex);
        cJSON_AddNumberToObject(o, "order", (double)i);
    }
    cJSON_AddNumberToObject(root, "executed", (double)r->n_executed);
    cJSON_AddNumberToObject(root, "cached", (double)r->n_cached);
    cJSON_AddNumberToObject(root, "seconds", r->seconds);
    char *s = sd_json_print(root, 1);
    cJSON_Delete(root);
    return s;
}
