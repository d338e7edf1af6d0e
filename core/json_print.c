/* json_print.c - sd_json_print: cJSON's layout with numbers that read back
 * exactly (json_util.h).
 *
 * cJSON 1.7 prints a double with "%1.15g" and keeps that text when it reads
 * back within a relative DBL_EPSILON, so 0.4999999999999999 is written as
 * 0.5 and an integer above 2^31 as "1e+15"-like text: a value written and
 * read again is another value (a denoise one ulp off changes the step
 * count). Here a number is written as its integer digits when it is a whole
 * number below 2^53, else as the shortest of %.15g/%.16g/%.17g that strtod
 * turns back into the same double (%.17g always does). Everything else
 * (escapes, tabs, separators) is what cJSON_Print / cJSON_PrintUnformatted
 * write, so only numbers change. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json_util.h"

typedef struct buf {
    char *p;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

void sd_json_format_double(double d, char out[32]) {
    if (!isfinite(d)) {
        snprintf(out, 32, "null"); /* as cJSON */
        return;
    }
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        snprintf(out, 32, "%.0f", d);
        if (!strcmp(out, "-0")) snprintf(out, 32, "0"); /* as cJSON: -0.0 prints as 0 */
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, 32, "%.*g", prec, d);
        if (prec == 17 || strtod(out, NULL) == d) return;
    }
}

static void put_string(buf *b, const char *s) {
    put(b, "\"", 1);
    const char *run = s;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = NULL;
        char u[8];
        switch (*p) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (*p < 32) {
                snprintf(u, sizeof u, "\\u%04x", *p);
                esc = u;
            }
        }
        if (!esc) continue;
        put(b, run, (size_t)((const char *)p - run));
        puts_(b, esc);
        run = (const char *)p + 1;
    }
    puts_(b, run);
    put(b, "\"", 1);
}

static void indent(buf *b, int depth) {
    for (int i = 0; i < depth; i++) put(b, "\t", 1);
}

static void put_value(buf *b, const cJSON *j, int fmt, int depth) {
    char num[32];
    switch (j->type & 0xff) {
    case cJSON_NULL: puts_(b, "null"); return;
    case cJSON_False: puts_(b, "false"); return;
    case cJSON_True: puts_(b, "true"); return;
    case cJSON_Number:
        sd_json_format_double(j->valuedouble, num);
        puts_(b, num);
        return;
    case cJSON_Raw:
        if (!j->valuestring) b->failed = 1;
        else puts_(b, j->valuestring);
        return;
    case cJSON_String: put_string(b, j->valuestring ? j->valuestring : ""); return;
    case cJSON_Array:
        put(b, "[", 1);
        for (const cJSON *c = j->child; c; c = c->next) {
            put_value(b, c, fmt, depth + 1);
            if (c->next) puts_(b, fmt ? ", " : ",");
        }
        put(b, "]", 1);
        return;
    case cJSON_Object:
        put(b, "{", 1);
        if (fmt) put(b, "\n", 1);
        for (const cJSON *c = j->child; c; c = c->next) {
            if (fmt) indent(b, depth + 1);
            put_string(b, c->string ? c->string : "");
            puts_(b, fmt ? ":\t" : ":");
            put_value(b, c, fmt, depth + 1);
            if (c->next) put(b, ",", 1);
            if (fmt) put(b, "\n", 1);
        }
        if (fmt) indent(b, depth);
        put(b, "}", 1);
        return;
    default: b->failed = 1;
    }
}

char *sd_json_print(const cJSON *j, int formatted) {
    if (!j) return NULL;
    buf b = {0};
    put_value(&b, j, formatted, 0);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
