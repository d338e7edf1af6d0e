/* unicode.c - UTF-8 codec, property lookups, NFC and Python's str.lower(). */
#include "models/text/unicode.h"

#include <stdlib.h>
#include <string.h>

int sd_uc_in(const sd_uc_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int sd_uc_is_letter(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return sd_uc_in(sd_uc_letter, sd_uc_letter_count, cp);
}

int sd_uc_is_number(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return sd_uc_in(sd_uc_number, sd_uc_number_count, cp);
}

int sd_uc_is_regex_space(uint32_t cp)
{
    return sd_uc_in(sd_uc_regex_space, sd_uc_regex_space_count, cp);
}

int sd_uc_is_py_space(uint32_t cp)
{
    return sd_uc_in(sd_uc_py_space, sd_uc_py_space_count, cp);
}

/* ---- UTF-8 ----------------------------------------------------------------- */

int sd_uc_decode_utf8(const char *s, size_t len, uint32_t **out, size_t *n)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t *o = malloc((len + 1) * sizeof *o);
    size_t k = 0, i = 0;
    if (!o)
        return -1;
    while (i < len) {
        unsigned c = p[i];
        uint32_t cp;
        size_t need;
        uint32_t min;
        if (c < 0x80) {
            o[k++] = c;
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            o[k++] = 0xFFFD;
            i++;
            continue;
        }
        size_t j = 1;
        for (; j <= need && i + j < len && (p[i + j] & 0xC0) == 0x80; j++)
            cp = (cp << 6) | (p[i + j] & 0x3F);
        if (j <= need || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            o[k++] = 0xFFFD;
            i++;
            continue;
        }
        o[k++] = cp;
        i += need + 1;
    }
    *out = o;
    *n = k;
    return 0;
}

size_t sd_uc_encode_utf8(uint32_t cp, char *buf)
{
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- NFC --------------------------------------------------------------------- */

enum {
    S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
    L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT,
    S_COUNT = L_COUNT * N_COUNT
};

static int ccc_of(uint32_t cp)
{
    if (cp < 0x300)
        return 0;
    return sd_uc_ccc_lookup(sd_uc_ccc, sd_uc_ccc_count, cp);
}

int sd_uc_ccc_lookup(const sd_uc_class *t, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < t[mid].lo)
            hi = mid;
        else if (cp > t[mid].hi)
            lo = mid + 1;
        else
            return t[mid].ccc;
    }
    return 0;
}

uint32_t sd_uc_comp_lookup(const sd_uc_triple *t, size_t n, uint32_t a, uint32_t b)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a < t[mid].a || (a == t[mid].a && b < t[mid].b))
            hi = mid;
        else if (a > t[mid].a || b > t[mid].b)
            lo = mid + 1;
        else
            return t[mid].c;
    }
    return 0;
}

static const sd_uc_triple *decomp_of(uint32_t cp)
{
    size_t lo = 0, hi = sd_uc_decomp_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < sd_uc_decomp[mid].a)
            hi = mid;
        else if (cp > sd_uc_decomp[mid].a)
            lo = mid + 1;
        else
            return &sd_uc_decomp[mid];
    }
    return NULL;
}

/* Full decomposition from the one-level table (Python's unicodedata). */
static size_t decomp_rec(uint32_t cp, uint32_t *out, size_t k, int depth)
{
    const sd_uc_triple *d = depth < 8 ? decomp_of(cp) : NULL;
    if (!d || k + 2 > SD_UC_MAX_DECOMP) {
        out[k] = cp;
        return k + 1;
    }
    k = decomp_rec(d->b, out, k, depth + 1);
    return d->c ? decomp_rec(d->c, out, k, depth + 1) : k;
}

static size_t decompose_py(uint32_t cp, uint32_t *out)
{
    return decomp_of(cp) ? decomp_rec(cp, out, 0, 0) : 0;
}

static uint32_t compose_py(uint32_t a, uint32_t b)
{
    return sd_uc_comp_lookup(sd_uc_comp, sd_uc_comp_count, a, b);
}

typedef struct cpbuf { uint32_t *v; size_t n, cap; } cpbuf;

static int push(cpbuf *b, uint32_t cp)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v)
            return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = cp;
    return 0;
}

/* Composite of (a, b), or 0: Hangul by the algorithm, the rest by d. */
static uint32_t compose_pair(const sd_uc_norm *d, uint32_t a, uint32_t b)
{
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 &&
        b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    return d->compose(a, b);
}

static int decompose(const sd_uc_norm *d, cpbuf *b, uint32_t cp)
{
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        if (push(b, L_BASE + s / N_COUNT) || push(b, V_BASE + (s % N_COUNT) / T_COUNT))
            return -1;
        if (s % T_COUNT && push(b, T_BASE + s % T_COUNT))
            return -1;
        return 0;
    }
    uint32_t full[SD_UC_MAX_DECOMP];
    size_t k = cp < 0x80 ? 0 : d->decompose(cp, full);
    if (!k)
        return push(b, cp);
    for (size_t i = 0; i < k; i++)
        if (push(b, full[i]))
            return -1;
    return 0;
}

int sd_uc_nfc_with(const sd_uc_norm *d, const uint32_t *cps, size_t n, uint32_t **out,
                   size_t *out_n)
{
    cpbuf b = {0};
    size_t i;
    int ascii = 1;
    for (i = 0; i < n && ascii; i++)
        ascii = cps[i] < 0x80;
    if (ascii) { /* the common case: nothing to do */
        b.v = malloc((n + 1) * sizeof *b.v);
        if (!b.v)
            return -1;
        if (n)
            memcpy(b.v, cps, n * sizeof *b.v);
        *out = b.v;
        *out_n = n;
        return 0;
    }
    for (i = 0; i < n; i++)
        if (decompose(d, &b, cps[i]) < 0) {
            free(b.v);
            return -1;
        }
    /* Canonical ordering: a stable sort of each run of non-starters by ccc;
     * insertion sort for short runs, a counting sort for long ones, so a
     * hostile run of marks costs linear time. */
    uint8_t *cc = malloc(b.n + 1);
    uint32_t *tmp = NULL;
    if (!cc) {
        free(b.v);
        return -1;
    }
    for (i = 0; i < b.n; i++)
        cc[i] = (uint8_t)d->ccc(b.v[i]);
    for (i = 0; i < b.n;) {
        if (!cc[i]) {
            i++;
            continue;
        }
        size_t e = i;
        while (e < b.n && cc[e])
            e++;
        if (e - i <= 32) {
            for (size_t k = i + 1; k < e; k++)
                for (size_t j = k; j > i && cc[j - 1] > cc[j]; j--) {
                    uint32_t t = b.v[j - 1];
                    uint8_t tc = cc[j - 1];
                    b.v[j - 1] = b.v[j], cc[j - 1] = cc[j];
                    b.v[j] = t, cc[j] = tc;
                }
        } else {
            size_t start[257] = {0};
            if (!tmp && !(tmp = malloc(b.n * sizeof *tmp))) {
                free(cc);
                free(b.v);
                return -1;
            }
            for (size_t k = i; k < e; k++)
                start[cc[k] + 1]++;
            for (int c = 1; c <= 256; c++)
                start[c] += start[c - 1];
            for (size_t k = i; k < e; k++)
                tmp[start[cc[k]]++] = b.v[k];
            for (size_t k = i; k < e; k++) {
                b.v[k] = tmp[k - i];
                cc[k] = (uint8_t)d->ccc(b.v[k]);
            }
        }
        i = e;
    }
    free(tmp);
    /* Canonical composition (UAX #15). */
    if (b.n) {
        size_t starter = 0, w = 1;
        int last = cc[0] ? 256 : 0;
        for (i = 1; i < b.n; i++) {
            uint32_t ch = b.v[i];
            int c = cc[i];
            uint32_t comp = compose_pair(d, b.v[starter], ch);
            if (comp && (last < c || last == 0)) {
                b.v[starter] = comp;
                continue;
            }
            if (c == 0)
                starter = w;
            last = c;
            b.v[w++] = ch;
        }
        b.n = w;
    }
    free(cc);
    if (!b.v && !(b.v = malloc(sizeof *b.v)))
        return -1;
    *out = b.v;
    *out_n = b.n;
    return 0;
}

int sd_uc_nfc(const uint32_t *cps, size_t n, uint32_t **out, size_t *out_n)
{
    static const sd_uc_norm py = {ccc_of, decompose_py, compose_py};
    return sd_uc_nfc_with(&py, cps, n, out, out_n);
}

/* ---- lowercase ------------------------------------------------------------------ */

static uint32_t lower_1(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    size_t lo = 0, hi = sd_uc_lower_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < sd_uc_lower[mid].cp)
            hi = mid;
        else if (cp > sd_uc_lower[mid].cp)
            lo = mid + 1;
        else
            return sd_uc_lower[mid].to;
    }
    return cp;
}

static int is_ignorable(uint32_t cp)
{
    return sd_uc_in(sd_uc_case_ignorable, sd_uc_case_ignorable_count, cp);
}

static int is_cased(uint32_t cp)
{
    return cp == 0x03A3 || sd_uc_in(sd_uc_cased, sd_uc_cased_count, cp);
}

/* CPython's Final_Sigma test for the capital sigma at cps[i]. */
static int final_sigma(const uint32_t *cps, size_t n, size_t i)
{
    size_t j = i;
    while (j > 0 && is_ignorable(cps[j - 1]))
        j--;
    if (j == 0 || !is_cased(cps[j - 1]))
        return 0;
    for (j = i + 1; j < n && is_ignorable(cps[j]); j++)
        ;
    return j == n || !is_cased(cps[j]);
}

size_t sd_uc_lower_at(const uint32_t *cps, size_t n, size_t i, uint32_t out[2])
{
    uint32_t cp = cps[i];
    if (cp == 0x0130) {
        out[0] = 'i';
        out[1] = 0x0307;
        return 2;
    }
    out[0] = cp == 0x03A3 ? (final_sigma(cps, n, i) ? 0x03C2 : 0x03C3) : lower_1(cp);
    return 1;
}

int sd_uc_lower_str(const uint32_t *cps, size_t n, uint32_t **out, size_t *out_n)
{
    cpbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cps[i];
        int rc;
        if (cp == 0x0130) /* the only multi-code-point lowercase */
            rc = push(&b, 'i') || push(&b, 0x0307);
        else if (cp == 0x03A3)
            rc = push(&b, final_sigma(cps, n, i) ? 0x03C2 : 0x03C3);
        else
            rc = push(&b, lower_1(cp));
        if (rc) {
            free(b.v);
            return -1;
        }
    }
    if (!b.v && !(b.v = malloc(sizeof *b.v)))
        return -1;
    *out = b.v;
    *out_n = b.n;
    return 0;
}
