/* pystr.c - Python str methods on UTF-8 (pystr.h). */
#include "models/text/pystr.h"

#include <stdlib.h>
#include <string.h>

#include "models/text/pystr_internal.h"
#include "models/text/unicode.h"

/* ---- code point buffers -------------------------------------------------------------- */

typedef struct cps {
    uint32_t *v;
    size_t n;
} cps;

static int decode(const char *s, cps *c) {
    return sd_uc_decode_utf8(s, strlen(s), &c->v, &c->n);
}

typedef struct out {
    char *s;
    size_t n, cap;
    int failed;
} out;

static void put_bytes(out *o, const char *p, size_t n) {
    if (o->failed) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 64;
        while (cap < o->n + n + 1) cap *= 2;
        char *t = realloc(o->s, cap);
        if (!t) { o->failed = 1; return; }
        o->s = t;
        o->cap = cap;
    }
    memcpy(o->s + o->n, p, n);
    o->n += n;
    o->s[o->n] = 0;
}

static void put_cp(out *o, uint32_t cp) {
    char b[4];
    put_bytes(o, b, sd_uc_encode_utf8(cp, b));
}

static char *finish(out *o) {
    if (!o->failed && !o->s) put_bytes(o, "", 0);
    if (o->failed) { free(o->s); return NULL; }
    return o->s;
}

static char *encode(const uint32_t *v, size_t n) {
    out o = {0};
    for (size_t i = 0; i < n; i++) put_cp(&o, v[i]);
    return finish(&o);
}

/* ---- length and slices ------------------------------------------------------------------ */

size_t sd_pystr_len(const char *s) {
    cps c = {0};
    if (decode(s, &c)) return 0;
    free(c.v);
    return c.n;
}

/* PySlice_AdjustIndices for step 1. */
static void adjust(int64_t n, int64_t *start, int64_t *end) {
    if (*start < 0) { *start += n; if (*start < 0) *start = 0; }
    else if (*start > n) *start = n;
    if (*end < 0) { *end += n; if (*end < 0) *end = 0; }
    else if (*end > n) *end = n;
    if (*end < *start) *end = *start;
}

char *sd_pystr_slice(const char *s, int64_t start, int64_t end) {
    cps c = {0};
    if (decode(s, &c)) return NULL;
    adjust((int64_t)c.n, &start, &end);
    char *r = encode(c.v + start, (size_t)(end - start));
    free(c.v);
    return r;
}

/* ---- replace and search ----------------------------------------------------------------------- */

char *sd_pystr_replace(const char *s, const char *find, const char *rep) {
    out o = {0};
    size_t fl = strlen(find), rl = strlen(rep);
    if (fl == 0) {
        /* "abc".replace("", "-") == "-a-b-c-": before every code point and at the end */
        cps c = {0};
        if (decode(s, &c)) return NULL;
        for (size_t i = 0; i < c.n; i++) {
            put_bytes(&o, rep, rl);
            put_cp(&o, c.v[i]);
        }
        put_bytes(&o, rep, rl);
        free(c.v);
        return finish(&o);
    }
    const char *p = s, *q;
    while ((q = strstr(p, find))) {
        put_bytes(&o, p, (size_t)(q - p));
        put_bytes(&o, rep, rl);
        p = q + fl;
    }
    put_bytes(&o, p, strlen(p));
    return finish(&o);
}

int sd_pystr_contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

int sd_pystr_startswith(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

int sd_pystr_endswith(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return m <= n && memcmp(s + n - m, suffix, m) == 0;
}

/* ---- case --------------------------------------------------------------------------------------- */

/* The full mapping of cp in a sorted table: the code points it becomes into
 * to[] (count returned), cp itself when unmapped. */
static size_t map_full(const sd_pystr_map *t, size_t n, uint32_t cp, uint32_t to[3]) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < t[mid].cp) hi = mid;
        else if (cp > t[mid].cp) lo = mid + 1;
        else {
            size_t k = 0;
            while (k < 3 && (k == 0 || t[mid].to[k])) { to[k] = t[mid].to[k]; k++; }
            return k;
        }
    }
    to[0] = cp;
    return 1;
}

static int is_cased(uint32_t cp) { return sd_uc_in(sd_pystr_cased, sd_pystr_cased_count, cp); }

/* mode: 0 upper, 1 lower, 2 capitalize, 3 title */
static char *convert(const char *s, int mode) {
    cps c = {0};
    if (decode(s, &c)) return NULL;
    out o = {0};
    int prev_cased = 0;
    for (size_t i = 0; i < c.n; i++) {
        uint32_t to[3];
        size_t k;
        int titled = (mode == 2 && i == 0) || (mode == 3 && !prev_cased);
        if (mode == 0) k = map_full(sd_pystr_upper_map, sd_pystr_upper_map_count, c.v[i], to);
        else if (titled) k = map_full(sd_pystr_title_map, sd_pystr_title_map_count, c.v[i], to);
        else k = sd_uc_lower_at(c.v, c.n, i, to);
        for (size_t j = 0; j < k; j++) put_cp(&o, to[j]);
        prev_cased = is_cased(c.v[i]);
    }
    free(c.v);
    return finish(&o);
}

char *sd_pystr_upper(const char *s) { return convert(s, 0); }
char *sd_pystr_lower(const char *s) { return convert(s, 1); }
char *sd_pystr_capitalize(const char *s) { return convert(s, 2); }
char *sd_pystr_title(const char *s) { return convert(s, 3); }

/* ---- strip ------------------------------------------------------------------------------------------ */

char *sd_pystr_strip(const char *s, int left, int right) {
    cps c = {0};
    if (decode(s, &c)) return NULL;
    size_t a = 0, b = c.n;
    if (left) while (a < b && sd_uc_is_py_space(c.v[a])) a++;
    if (right) while (b > a && sd_uc_is_py_space(c.v[b - 1])) b--;
    char *r = encode(c.v + a, b - a);
    free(c.v);
    return r;
}
