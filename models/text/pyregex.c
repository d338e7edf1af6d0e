/* pyregex.c - Python re over PCRE2 (pyregex.h). */
#include "models/text/pyregex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct sd_pyregex {
    pcre2_code *code;
    pcre2_match_data *md;
    int groups;
};

/* ---- growing buffers ------------------------------------------------------------------ */

typedef struct buf {
    char *s;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const char *p, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) { b->failed = 1; return; }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void putc_(buf *b, char c) { put(b, &c, 1); }

/* UTF-8 of code point cp. */
static void put_cp(buf *b, uint32_t cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) t[0] = (char)cp, n = 1;
    else if (cp < 0x800) t[0] = (char)(0xC0 | cp >> 6), t[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        t[0] = (char)(0xE0 | cp >> 12), t[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), t[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        t[0] = (char)(0xF0 | cp >> 18), t[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        t[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    put(b, t, n);
}

/* Bytes of the UTF-8 sequence starting with byte c (1 for a stray byte). */
static size_t seq_len(unsigned char c) {
    return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* ---- pattern rewriting ---------------------------------------------------------------------- */

/* Python's spellings PCRE2 reads otherwise (see pyregex.h). Returns 0, or -1
 * with *bad set to a message for a pattern Python accepts that PCRE2 cannot
 * express. */
static int rewrite(const char *p, buf *b, const char **bad) {
    int in_class = 0, class_start = 0;
    for (size_t i = 0; p[i]; ) {
        char c = p[i];
        if (c == '\\' && p[i + 1]) {
            char e = p[i + 1];
            if ((e == 'u' || e == 'U')) {
                int n = e == 'u' ? 4 : 8, ok = 1;
                for (int k = 0; k < n; k++) ok = ok && is_hex(p[i + 2 + k]);
                if (ok) {
                    put(b, "\\x{", 3);
                    put(b, p + i + 2, (size_t)n);
                    putc_(b, '}');
                    i += 2 + (size_t)n;
                    class_start = 0;
                    continue;
                }
            }
            if (e == 'N' && p[i + 2] == '{') { *bad = "\\N{...} character names are not supported"; return -1; }
            if (e == 'Z' && !in_class) { put(b, "\\z", 2); i += 2; continue; }
            put(b, p + i, 1);
            put(b, p + i + 1, seq_len((unsigned char)e));
            i += 1 + seq_len((unsigned char)e);
            class_start = 0;
            continue;
        }
        if (in_class) {
            if (c == ']' && !class_start) in_class = 0;
            class_start = 0;
            put(b, p + i, 1);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            class_start = 1;
            put(b, p + i, 1);
            i++;
            if (p[i] == '^') { put(b, "^", 1); i++; }
            continue;
        }
        if (c == '{' && p[i + 1] == ',') {
            /* Python reads {,n} as {0,n}; PCRE2 10.42 as the literal text */
            size_t j = i + 2;
            while (is_digit(p[j])) j++;
            if (j > i + 2 && p[j] == '}') {
                put(b, "{0", 2);
                put(b, p + i + 1, j + 1 - (i + 1));
                i = j + 1;
                continue;
            }
        }
        put(b, p + i, 1);
        i++;
    }
    return 0;
}

/* ---- compile --------------------------------------------------------------------------------- */

sd_status sd_pyregex_compile(const char *pattern, int flags, sd_pyregex **out, sd_error *err) {
    *out = NULL;
    buf b = {0};
    const char *bad = NULL;
    if (rewrite(pattern, &b, &bad)) {
        free(b.s);
        return sd_error_set(err, SD_ERR_INVALID, "bad regex pattern: %s", bad);
    }
    if (b.failed) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!b.s) put(&b, "", 0);
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_ALT_CIRCUMFLEX;
    if (flags & SD_RE_IGNORECASE) opts |= PCRE2_CASELESS;
    if (flags & SD_RE_MULTILINE) opts |= PCRE2_MULTILINE;
    if (flags & SD_RE_DOTALL) opts |= PCRE2_DOTALL;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) { free(b.s); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int code_err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)b.s, b.n, opts, &code_err, &off, cc);
    pcre2_compile_context_free(cc);
    free(b.s);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code_err, msg, sizeof msg);
        return sd_error_set(err, SD_ERR_INVALID, "bad regex pattern: %s at position %zu", (const char *)msg, (size_t)off);
    }
    sd_pyregex *re = calloc(1, sizeof *re);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(code, NULL) : NULL;
    if (!md) {
        free(re);
        pcre2_code_free(code);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    uint32_t n = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &n);
    re->code = code;
    re->md = md;
    re->groups = (int)n;
    *out = re;
    return SD_OK;
}

void sd_pyregex_free(sd_pyregex *re) {
    if (!re) return;
    pcre2_match_data_free(re->md);
    pcre2_code_free(re->code);
    free(re);
}

int sd_pyregex_groups(const sd_pyregex *re) { return re->groups; }

/* ---- matching ---------------------------------------------------------------------------------- */

sd_status sd_pyregex_next(const sd_pyregex *re, const char *s, size_t len, sd_pyscan *scan, sd_pymatch *m,
                          int *found, sd_error *err) {
    *found = 0;
    if (scan->pos > len) return SD_OK;
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, scan->pos, scan->must_advance ? PCRE2_NOTEMPTY_ATSTART : 0,
                         re->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) {
        scan->pos = len + 1;
        return SD_OK;
    }
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return sd_error_set(err, SD_ERR_INVALID, "regex match failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    int n = re->groups + 1 < SD_PYREGEX_MAX_SPANS ? re->groups + 1 : SD_PYREGEX_MAX_SPANS;
    m->n_groups = n - 1;
    for (int g = 0; g < n; g++) {
        int set = g < rc && ov[2 * g] != PCRE2_UNSET;
        m->start[g] = set ? (size_t)ov[2 * g] : (size_t)-1;
        m->end[g] = set ? (size_t)ov[2 * g + 1] : (size_t)-1;
    }
    *found = 1;
    scan->must_advance = m->end[0] == m->start[0];
    scan->pos = m->end[0];
    return SD_OK;
}

/* ---- sub ---------------------------------------------------------------------------------------- */

/* One template item: a literal (bytes) or a group reference. */
typedef struct titem {
    int group; /* -1: literal */
    size_t off, len;
} titem;

typedef struct tmpl {
    buf lit;
    titem *items;
    size_t n, cap;
} tmpl;

static int add_item(tmpl *t, int group, size_t off, size_t len) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        titem *x = realloc(t->items, cap * sizeof *x);
        if (!x) return -1;
        t->items = x;
        t->cap = cap;
    }
    t->items[t->n++] = (titem){group, off, len};
    return 0;
}

static int is_oct(char c) { return c >= '0' && c <= '7'; }

static sd_status nul_error(sd_error *err) {
    return sd_error_set(err, SD_ERR_INVALID, "the replacement writes a NUL character (\\0), which no sdflow "
                        "string can hold");
}

/* sre's parse_template. */
static sd_status parse_template(const sd_pyregex *re, const char *s, tmpl *t, sd_error *err) {
    size_t i = 0, lit_start = 0;
#define FLUSH()                                                                 \
    do {                                                                        \
        if (t->lit.n > lit_start && add_item(t, -1, lit_start, t->lit.n - lit_start)) goto nomem; \
        lit_start = t->lit.n;                                                   \
    } while (0)
    while (s[i]) {
        if (s[i] != '\\') {
            put(&t->lit, s + i, 1);
            i++;
            continue;
        }
        char c = s[i + 1];
        if (!c) return sd_error_set(err, SD_ERR_INVALID, "bad escape (end of pattern) in the replacement");
        if (c == 'g') {
            if (s[i + 2] != '<') return sd_error_set(err, SD_ERR_INVALID, "missing < in the replacement's \\g");
            const char *name = s + i + 3, *close = strchr(name, '>');
            if (!close || close == name)
                return sd_error_set(err, SD_ERR_INVALID, "missing group name in the replacement's \\g<...>");
            size_t nl = (size_t)(close - name);
            int all_digits = 1;
            for (size_t k = 0; k < nl; k++) all_digits = all_digits && is_digit(name[k]);
            long index;
            if (all_digits) {
                index = nl > 9 ? 1000000000L : strtol(name, NULL, 10);
            } else {
                char nm[256];
                if (nl >= sizeof nm) return sd_error_set(err, SD_ERR_INVALID, "unknown group name in the replacement");
                memcpy(nm, name, nl);
                nm[nl] = 0;
                int r = pcre2_substring_number_from_name(re->code, (PCRE2_SPTR)nm);
                if (r < 0) return sd_error_set(err, SD_ERR_INVALID, "unknown group name '%s' in the replacement", nm);
                index = r;
            }
            if (index > re->groups)
                return sd_error_set(err, SD_ERR_INVALID, "invalid group reference %ld in the replacement", index);
            FLUSH();
            if (add_item(t, (int)index, 0, 0)) goto nomem;
            i = (size_t)(close - s) + 1;
            continue;
        }
        if (c == '0') {
            /* \0, \0o, \0oo: an octal character */
            int v = 0;
            size_t j = i + 2;
            for (int k = 0; k < 2 && is_oct(s[j]); k++, j++) v = v * 8 + (s[j] - '0');
            if ((v & 0xff) == 0) return nul_error(err);
            put_cp(&t->lit, (uint32_t)(v & 0xff));
            i = j;
            continue;
        }
        if (is_digit(c)) {
            if (is_digit(s[i + 2])) {
                if (is_oct(c) && is_oct(s[i + 2]) && is_oct(s[i + 3])) {
                    int v = (c - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
                    if (v > 0377)
                        return sd_error_set(err, SD_ERR_INVALID, "octal escape value \\%c%c%c outside of range 0-0o377",
                                            c, s[i + 2], s[i + 3]);
                    if (v == 0) return nul_error(err);
                    put_cp(&t->lit, (uint32_t)v);
                    i += 4;
                    continue;
                }
                int index = (c - '0') * 10 + (s[i + 2] - '0');
                if (index > re->groups)
                    return sd_error_set(err, SD_ERR_INVALID, "invalid group reference %d in the replacement", index);
                FLUSH();
                if (add_item(t, index, 0, 0)) goto nomem;
                i += 3;
                continue;
            }
            int index = c - '0';
            if (index > re->groups)
                return sd_error_set(err, SD_ERR_INVALID, "invalid group reference %d in the replacement", index);
            FLUSH();
            if (add_item(t, index, 0, 0)) goto nomem;
            i += 2;
            continue;
        }
        const char *esc = strchr("abfnrtv\\", c);
        if (esc && c) {
            static const char vals[] = {7, 8, 12, 10, 13, 9, 11, '\\'};
            putc_(&t->lit, vals[esc - "abfnrtv\\"]);
            i += 2;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return sd_error_set(err, SD_ERR_INVALID, "bad escape \\%c in the replacement", c);
        /* any other escape keeps its backslash */
        size_t n = seq_len((unsigned char)c);
        put(&t->lit, s + i, 1 + n);
        i += 1 + n;
    }
    FLUSH();
#undef FLUSH
    return t->lit.failed ? sd_error_set(err, SD_ERR_NOMEM, "out of memory") : SD_OK;
nomem:
    return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_pyregex_sub(const sd_pyregex *re, const char *s, const char *template_, int count, char **out,
                         sd_error *err) {
    *out = NULL;
    tmpl t = {0};
    sd_status rc = parse_template(re, template_, &t, err);
    buf o = {0};
    size_t len = strlen(s), last = 0;
    sd_pyscan scan = {0};
    sd_pymatch m;
    int n = 0, found = 1;
    while (!rc && (count <= 0 || n < count)) {
        rc = sd_pyregex_next(re, s, len, &scan, &m, &found, err);
        if (rc || !found) break;
        put(&o, s + last, m.start[0] - last);
        for (size_t k = 0; k < t.n; k++) {
            const titem *it = &t.items[k];
            if (it->group < 0) put(&o, t.lit.s + it->off, it->len);
            else if (it->group <= m.n_groups && m.start[it->group] != (size_t)-1)
                put(&o, s + m.start[it->group], m.end[it->group] - m.start[it->group]);
        }
        last = m.end[0];
        n++;
    }
    if (!rc) put(&o, s + last, len - last);
    free(t.lit.s);
    free(t.items);
    if (!rc && o.failed) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (rc) { free(o.s); return rc; }
    if (!o.s) put(&o, "", 0);
    if (o.failed) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    *out = o.s;
    return SD_OK;
}
