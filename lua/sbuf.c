/* sbuf.c - a growable string, and values written in Lua syntax. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/json_util.h"
#include "lua_internal.h"

void sd_sbuf_addn(sd_sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->oom = 1; return; }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void sd_sbuf_add(sd_sbuf *b, const char *s) { sd_sbuf_addn(b, s, strlen(s)); }

void sd_sbuf_printf(sd_sbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof small) { sd_sbuf_addn(b, small, (size_t)k); return; }
    char *big = malloc((size_t)k + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    sd_sbuf_addn(b, big, (size_t)k);
    free(big);
}

char *sd_sbuf_take(sd_sbuf *b) {
    if (b->oom) { free(b->s); memset(b, 0, sizeof *b); return NULL; }
    char *s = b->s ? b->s : strdup("");
    memset(b, 0, sizeof *b);
    return s;
}

void sd_sbuf_lua_string(sd_sbuf *b, const char *s) {
    sd_sbuf_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': sd_sbuf_add(b, "\\\""); break;
        case '\\': sd_sbuf_add(b, "\\\\"); break;
        case '\n': sd_sbuf_add(b, "\\n"); break;
        case '\r': sd_sbuf_add(b, "\\r"); break;
        case '\t': sd_sbuf_add(b, "\\t"); break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                /* three digits so a following digit is not taken into the escape */
                snprintf(esc, sizeof esc, "\\%03u", *p);
                sd_sbuf_add(b, esc);
            } else {
                sd_sbuf_addn(b, (const char *)p, 1); /* UTF-8 bytes pass through */
            }
        }
    }
    sd_sbuf_add(b, "\"");
}

static void add_float(sd_sbuf *b, double d) {
    if (isnan(d)) { sd_sbuf_add(b, "(0/0)"); return; }
    if (isinf(d)) { sd_sbuf_add(b, d > 0 ? "math.huge" : "-math.huge"); return; }
    char buf[64];
    /* %.17g reads back to the same double; make sure Lua sees a float */
    snprintf(buf, sizeof buf, "%.17g", d);
    for (int p = 15; p <= 17; p++) { /* shortest form that reads back exactly */
        char t[64];
        snprintf(t, sizeof t, "%.*g", p, d);
        if (strtod(t, NULL) == d) { memcpy(buf, t, sizeof t); break; }
    }
    sd_sbuf_add(b, buf);
    if (!strpbrk(buf, ".eEn")) sd_sbuf_add(b, ".0");
}

void sd_sbuf_lua_input_value(sd_sbuf *b, const sd_value *v, int u64) {
    if (u64 && sd_value_kind_of(v) == SD_VAL_INT && sd_value_as_int(v) < 0) {
        /* a seed past 2^63: the hex literal is the Lua integer with the same
         * 64 bits (json_util.h); the comment gives the decimal seed */
        char dec[32];
        sd_json_format_int(sd_value_as_int(v), 1, dec);
        sd_sbuf_printf(b, "0x%016llx --[[ %s ]]", (unsigned long long)(uint64_t)sd_value_as_int(v), dec);
        return;
    }
    sd_sbuf_lua_value(b, v);
}

void sd_sbuf_lua_value(sd_sbuf *b, const sd_value *v) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_INT: sd_sbuf_printf(b, "%lld", (long long)sd_value_as_int(v)); break;
    case SD_VAL_FLOAT: add_float(b, sd_value_as_float(v)); break;
    case SD_VAL_BOOL: sd_sbuf_add(b, sd_value_as_bool(v) ? "true" : "false"); break;
    case SD_VAL_STRING: sd_sbuf_lua_string(b, sd_value_as_string(v)); break;
    case SD_VAL_LIST:
        sd_sbuf_add(b, "{");
        for (size_t i = 0; i < sd_value_list_len(v); i++) {
            if (i) sd_sbuf_add(b, ", ");
            sd_sbuf_lua_value(b, sd_value_list_get(v, i));
        }
        sd_sbuf_add(b, "}");
        break;
    case SD_VAL_DICT:
        sd_sbuf_add(b, "{");
        for (size_t i = 0; i < sd_value_dict_len(v); i++) {
            if (i) sd_sbuf_add(b, ", ");
            sd_sbuf_add(b, "[");
            sd_sbuf_lua_string(b, sd_value_dict_key(v, i));
            sd_sbuf_add(b, "] = ");
            sd_sbuf_lua_value(b, sd_value_dict_at(v, i));
        }
        sd_sbuf_add(b, "}");
        break;
    default: sd_sbuf_add(b, "nil"); break;
    }
}

int sd_lua_is_name(const char *s) {
    static const char *const kw[] = {"and", "break", "do", "else", "elseif", "end", "false",
                                     "for", "function", "goto", "if", "in", "local", "nil",
                                     "not", "or", "repeat", "return", "then", "true", "until",
                                     "while", NULL};
    if (!s || !*s || (*s >= '0' && *s <= '9')) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    for (int i = 0; kw[i]; i++)
        if (!strcmp(kw[i], s)) return 0;
    return 1;
}
