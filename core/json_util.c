/* json_util.c - JSON parsing with positions in errors. */
#include "json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sd_json_position(const char *text, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && text[i]; i++) {
        if (text[i] == '\n') { l++; c = 1; }
        else c++;
    }
    *line = l;
    *col = c;
}

/* The offending line quoted with a caret under the column, compiler-style:
 *     2 |   "inputs": {"image": "x.png",}}
 *       |                               ^
 * Long lines are cut to a window around the column. */
static void quote_line(const char *text, size_t pos, int line, char *buf, size_t n) {
    size_t start = pos;
    while (start > 0 && text[start - 1] != '\n') start--;
    size_t end = pos;
    while (text[end] && text[end] != '\n') end++;
    enum { BEFORE = 60, AFTER = 30 };
    size_t from = pos - start > BEFORE ? pos - BEFORE : start;
    size_t to = end - pos > AFTER ? pos + AFTER : end;
    char num[16];
    int w = snprintf(num, sizeof num, "%d", line);
    size_t k = (size_t)snprintf(buf, n, "\n  %s | %s", num, from > start ? "..." : "");
    for (size_t i = from; i < to && k + 2 < n; i++) buf[k++] = text[i] == '\t' ? ' ' : text[i];
    if (to < end && k + 4 < n) k += (size_t)snprintf(buf + k, n - k, "...");
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "\n  %*s | %s", w, "", from > start ? "   " : "");
    for (size_t i = from; i < pos && k + 2 < n; i++) buf[k++] = ' ';
    if (k + 2 < n) buf[k++] = '^';
    buf[k < n ? k : n - 1] = 0;
}

sd_status sd_json_parse(const char *text, const char *source, cJSON **out, sd_error *err) {
    *out = NULL;
    if (!source) source = "<json>";
    if (!text) return sd_error_set(err, SD_ERR_INVALID, "%s: no text", source);
    const char *end = NULL;
    /* require_null_terminated: trailing garbage after the value is an error too */
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t len = strlen(text);
        size_t pos = end && end >= text ? (size_t)(end - text) : 0;
        if (pos > len) pos = len;
        /* After a trailing comma ({"a": 1,}) cJSON stops one past the
         * closing bracket; point at the comma, the actual mistake. */
        const char *hint = "";
        size_t q = pos;
        while (q > 0 && (text[q - 1] == '}' || text[q - 1] == ']' || text[q - 1] == ' ' || text[q - 1] == '\n' ||
                         text[q - 1] == '\t' || text[q - 1] == '\r')) {
            q--;
            if (text[q] != '}' && text[q] != ']') continue;
            size_t c = q;
            while (c > 0 && strchr(" \t\r\n", text[c - 1])) c--;
            if (c > 0 && text[c - 1] == ',') {
                pos = c - 1;
                hint = " (a comma before a closing bracket)";
            }
            break;
        }
        int line, col;
        sd_json_position(text, pos, &line, &col);
        char near[24], quote[256];
        size_t k = 0;
        for (const char *p = text + pos; *p && *p != '\n' && k < sizeof near - 1; p++) near[k++] = *p;
        near[k] = 0;
        quote_line(text, pos, line, quote, sizeof quote);
        if (!text[pos])
            return sd_error_set(err, SD_ERR_FORMAT, "%s:%d:%d: invalid JSON (unexpected end of text)%s", source,
                                line, col, quote);
        return sd_error_set(err, SD_ERR_FORMAT, "%s:%d:%d: invalid JSON near '%s'%s%s", source, line, col, near,
                            hint, quote);
    }
    sd_json_bad_string bad;
    if (sd_json_find_bad_string(text, &bad)) {
        cJSON_Delete(root);
        int line, col;
        sd_json_position(text, bad.text_offset, &line, &col);
        char path[512];
        return sd_error_set(err, SD_ERR_FORMAT, "%s:%d:%d: the %s at %s holds %s at byte %zu%s", source, line, col,
                            bad.in_key ? "key" : "string", sd_json_bad_path(&bad, path, sizeof path),
                            sd_text_problem_describe(bad.problem), bad.string_offset,
                            bad.problem == SD_TEXT_NUL ? " (refused: it would cut the string there)"
                                                       : " (refused: it could not be written back unchanged)");
    }
    *out = root;
    return SD_OK;
}

int sd_json_input_is_u64(const sd_input_def *d) {
    return d && d->type && strcmp(d->type, SD_T_INT) == 0 && d->has_range && !d->maxsize_range &&
           d->max >= 9223372036854775808.0;
}

int sd_json_input_is_u64_named(const char *class_type, const char *input) {
    const sd_node_def *def = class_type && input ? sd_registry_find(class_type) : NULL;
    int k = def ? sd_node_input_index(def, input) : -1;
    return k >= 0 && sd_json_input_is_u64(&def->inputs[k]);
}

void sd_json_format_int(int64_t v, int u64, char buf[32]) {
    if (u64) snprintf(buf, 32, "%llu", (unsigned long long)(uint64_t)v);
    else snprintf(buf, 32, "%lld", (long long)v);
}

int sd_json_parse_u64(const char *digits, uint64_t *out) {
    if (!digits || !*digits) return -1;
    uint64_t v = 0;
    for (const char *p = digits; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1; /* overflow */
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* ---- exact integers ----------------------------------------------------------
 * cJSON keeps numbers as doubles, which rounds integers beyond 2^53, and a
 * seed must reach the sampler exactly as written (ComfyUI seeds go far past
 * 2^53). The numbers in the text appear in the same order as the number items
 * of a pre-order walk of the tree, so big integers are re-read from their
 * digits and the item is turned into a cJSON_Raw holding them. */

typedef struct { const char *text; size_t pos; } num_scan;

/* Next number token (start, length) outside strings; 0 at the end. */
static int next_number(num_scan *sc, const char **start, size_t *len) {
    const char *t = sc->text;
    size_t i = sc->pos;
    while (t[i]) {
        if (t[i] == '"') {
            for (i++; t[i] && t[i] != '"'; i++)
                if (t[i] == '\\' && t[i + 1]) i++;
            if (t[i]) i++;
            continue;
        }
        if (t[i] == '-' || (t[i] >= '0' && t[i] <= '9')) {
            size_t b = i;
            while (t[i] && strchr("0123456789+-.eE", t[i])) i++;
            *start = t + b;
            *len = i - b;
            sc->pos = i;
            return 1;
        }
        i++;
    }
    sc->pos = i;
    return 0;
}

static void exact_integers(cJSON *item, num_scan *sc) {
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item)) {
            const char *tok;
            size_t len;
            if (!next_number(sc, &tok, &len)) return;
            int integral = len < 32 && !memchr(tok, '.', len) && !memchr(tok, 'e', len) && !memchr(tok, 'E', len);
            if (integral && fabs(item->valuedouble) >= 9007199254740992.0) { /* 2^53 */
                char digits[32];
                memcpy(digits, tok, len);
                digits[len] = 0;
                char *copy = strdup(digits);
                if (copy) {
                    item->type = cJSON_Raw;
                    item->valuestring = copy; /* freed by cJSON_Delete */
                }
            }
        }
        if (item->child) exact_integers(item->child, sc);
    }
}

sd_status sd_json_parse_exact(const char *text, const char *source, cJSON **out, sd_error *err) {
    sd_status rc = sd_json_parse(text, source, out, err);
    if (rc) return rc;
    num_scan sc = {text, 0};
    exact_integers(*out, &sc);
    return SD_OK;
}
