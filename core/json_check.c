/* json_check.c - finds JSON strings that cannot pass unchanged (json_util.h):
 * a "\u0000" escape, or bytes that are not UTF-8, in a value or a key.
 *
 * A small lexer over the text, since cJSON's tree has already lost both (it
 * cuts at the NUL and keeps no positions): it follows object and array
 * nesting to name the path of the string ("/6/inputs/text") and decodes each
 * string to count the byte offset inside it. */
#include <stdio.h>
#include <string.h>
#include "json_util.h"

#define MAX_NEST 1100 /* cJSON refuses deeper nesting (CJSON_NESTING_LIMIT 1000) */

typedef struct level {
    char is_obj, expect_key;
    size_t index; /* arrays: position of the current element */
} level;

typedef struct scan {
    const char *t;
    level lv[MAX_NEST];
    int depth;                                   /* may exceed MAX_NEST: then untracked */
    char keys[SD_JSON_PATH_MAX][SD_ERR_ID_MAX];  /* current key of the first levels */
} scan;

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The code unit of "\uXXXX" at p (p points at the backslash), or -1. */
static long hex4(const char *p) {
    if (p[0] != '\\' || p[1] != 'u') return -1;
    long v = 0;
    for (int i = 2; i < 6; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t utf8_encode(unsigned long cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static void fill_path(const scan *s, sd_json_bad_string *bad) {
    bad->depth = s->depth;
    for (int l = 0; l < s->depth && l < SD_JSON_PATH_MAX; l++) {
        if (l < MAX_NEST && !s->lv[l].is_obj)
            snprintf(bad->path[l], SD_ERR_ID_MAX, "[%zu]", s->lv[l].index);
        else
            memcpy(bad->path[l], s->keys[l], SD_ERR_ID_MAX);
    }
}

/* Decodes the string whose opening quote is at t[*pos], leaving *pos past
 * its closing quote. A key of a kept level is decoded into s->keys. Returns 1
 * with *bad filled at the first problem. */
static int check_string(scan *s, size_t *pos, int is_key, sd_json_bad_string *bad) {
    const char *t = s->t;
    size_t j = *pos + 1, out = 0;
    int level = s->depth - 1;
    char *key = is_key && level < SD_JSON_PATH_MAX ? s->keys[level] : NULL;
    size_t key_len = 0;
    sd_text_problem problem = SD_TEXT_OK;
    size_t at_text = 0, at_out = 0;
    while (t[j] && t[j] != '"') {
        char enc[4];
        size_t n = 0, adv;
        if (t[j] == '\\' && t[j + 1] == 'u') {
            long cp = hex4(t + j);
            adv = 6;
            if (cp < 0) { /* malformed: cJSON refuses it; step over */
                adv = 2;
            } else if (cp == 0) {
                if (!problem) problem = SD_TEXT_NUL, at_text = j, at_out = out;
            } else if (cp >= 0xD800 && cp <= 0xDBFF && hex4(t + j + 6) >= 0xDC00 && hex4(t + j + 6) <= 0xDFFF) {
                unsigned long full = 0x10000 + (((unsigned long)cp - 0xD800) << 10) + (unsigned long)(hex4(t + j + 6) - 0xDC00);
                n = utf8_encode(full, enc);
                adv = 12;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) { /* an unpaired surrogate */
                if (!problem) problem = SD_TEXT_BAD_UTF8, at_text = j, at_out = out;
            } else {
                n = utf8_encode((unsigned long)cp, enc);
            }
        } else if (t[j] == '\\' && t[j + 1]) {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *e = strchr(from, t[j + 1]);
            enc[0] = e ? to[e - from] : t[j + 1];
            n = 1;
            adv = 2;
        } else {
            size_t len = sd_text_utf8_len((const unsigned char *)t + j, strnlen(t + j, 4));
            if (!len) {
                if (!problem) problem = SD_TEXT_BAD_UTF8, at_text = j, at_out = out;
                adv = 1;
            } else {
                memcpy(enc, t + j, len);
                n = len;
                adv = len;
            }
        }
        if (key && !problem)
            for (size_t k = 0; k < n && key_len + 1 < SD_ERR_ID_MAX; k++) key[key_len++] = enc[k];
        out += n;
        j += adv;
    }
    if (key) key[key_len] = 0;
    *pos = t[j] ? j + 1 : j;
    if (!problem) return 0;
    bad->problem = problem;
    bad->text_offset = at_text;
    bad->string_offset = at_out;
    bad->in_key = is_key;
    return 1;
}

int sd_json_find_bad_string(const char *text, sd_json_bad_string *bad) {
    scan s; /* about 18 KB */
    memset(bad, 0, sizeof *bad);
    if (!text) return 0;
    s.t = text;
    s.depth = 0;
    for (size_t i = 0; text[i];) {
        level *top = s.depth > 0 && s.depth <= MAX_NEST ? &s.lv[s.depth - 1] : NULL;
        switch (text[i]) {
        case '{':
        case '[':
            if (s.depth < MAX_NEST) s.lv[s.depth] = (level){text[i] == '{', text[i] == '{', 0};
            if (s.depth < SD_JSON_PATH_MAX) s.keys[s.depth][0] = 0;
            s.depth++;
            i++;
            break;
        case '}':
        case ']':
            if (s.depth > 0) s.depth--;
            i++;
            break;
        case ':':
            if (top && top->is_obj) top->expect_key = 0;
            i++;
            break;
        case ',':
            if (top && top->is_obj) top->expect_key = 1;
            else if (top) top->index++;
            i++;
            break;
        case '"': {
            int is_key = top && top->is_obj && top->expect_key;
            if (check_string(&s, &i, is_key, bad)) {
                fill_path(&s, bad);
                return 1;
            }
            break;
        }
        default:
            i++;
            break;
        }
    }
    return 0;
}

const char *sd_json_bad_path(const sd_json_bad_string *bad, char *buf, size_t n) {
    size_t off = 0;
    if (n) buf[0] = 0;
    for (int l = 0; l < bad->depth && off + 1 < n; l++) {
        char esc[SD_ERR_ID_MAX * 4];
        const char *piece = l < SD_JSON_PATH_MAX ? sd_text_escape(bad->path[l], 0, esc, sizeof esc) : "...";
        off += (size_t)snprintf(buf + off, n - off, "/%s", piece);
        if (l >= SD_JSON_PATH_MAX) break;
    }
    if (n && !buf[0]) snprintf(buf, n, "(the top level)");
    return buf;
}
