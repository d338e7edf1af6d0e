/* spm_charsmap.c - SentencePiece's precompiled charsmap: the Darts
 * double-array trie and its replacement strings. */
#include "models/text/spm_charsmap.h"

#include <stdlib.h>
#include <string.h>

#include "models/text/unicode.h"
#include "models/text/unicode_grapheme.h"

struct sd_spm_charsmap {
    uint32_t *units;
    size_t n_units;
    char *norm;      /* replacement strings (NUL-separated), plus a final NUL */
    size_t norm_len; /* bytes of the blob's string part */
};

/* Darts-clone unit fields, as spm_precompiled reads them. */
static int unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static uint32_t unit_label(uint32_t u) { return u & (0x80000000u | 0xFFu); }
static size_t unit_offset(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

void sd_spm_charsmap_free(sd_spm_charsmap *m) {
    if (!m) return;
    free(m->units);
    free(m->norm);
    free(m);
}

static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) k = 1, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) k = 2, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) k = 3, cp = c & 0x07;
        else return 0;
        if (i + k >= n) return 0; /* truncated sequence */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* Every node a lookup can reach, from the root: its whole block of 256
 * children is inside the array (a lookup probes base ^ byte for any byte),
 * and every leaf's value unit is inside it and points at a character
 * boundary of the strings. Iterative, each node once (a hostile trie may
 * have cycles). */
static sd_status check_trie(const sd_spm_charsmap *m, const char *source, sd_error *err) {
    size_t n = m->n_units;
    uint8_t *seen = calloc(n, 1);
    size_t *stack = malloc(n * sizeof *stack);
    sd_status rc = SD_OK;
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory checking the charsmap", source);
    }
    size_t top = 0;
    size_t root = unit_offset(m->units[0]); /* node_pos after the root unit */
    stack[top++] = root;
    while (top > 0 && !rc) {
        size_t base = stack[--top];
        if ((base | 0xFF) >= n) {
            rc = sd_error_set(err, SD_ERR_FORMAT,
                              "%s: precompiled_charsmap trie reaches unit %zu of %zu", source,
                              base | 0xFF, n);
            break;
        }
        for (unsigned c = 1; c < 256 && !rc; c++) {
            size_t p = base ^ c;
            uint32_t u = m->units[p];
            if (unit_label(u) != c) continue;
            size_t next = p ^ unit_offset(u);
            if (unit_has_leaf(u)) {
                if (next >= n) {
                    rc = sd_error_set(err, SD_ERR_FORMAT,
                                      "%s: precompiled_charsmap leaf unit %zu out of %zu", source,
                                      next, n);
                    break;
                }
                uint32_t v = unit_value(m->units[next]);
                if (v > m->norm_len || (v < m->norm_len && ((uint8_t)m->norm[v] & 0xC0) == 0x80)) {
                    rc = sd_error_set(err, SD_ERR_FORMAT,
                                      "%s: precompiled_charsmap replacement offset %u is not a "
                                      "character of its %zu-byte strings",
                                      source, v, m->norm_len);
                    break;
                }
            }
            if (next < n && !seen[next]) {
                seen[next] = 1;
                stack[top++] = next;
            } else if (next >= n) {
                /* a further byte would probe next ^ c: out of range */
                rc = sd_error_set(err, SD_ERR_FORMAT,
                                  "%s: precompiled_charsmap trie reaches unit %zu of %zu", source,
                                  next, n);
            }
        }
    }
    free(seen);
    free(stack);
    return rc;
}

sd_status sd_spm_charsmap_parse(const uint8_t *blob, size_t n, const char *source,
                                sd_spm_charsmap **out, sd_error *err) {
    *out = NULL;
    if (n < 4)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: precompiled_charsmap of %zu bytes is truncated",
                            source, n);
    uint32_t trie_size = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
                         (uint32_t)blob[3] << 24;
    size_t n_units = trie_size / 4;
    if (n_units == 0 || n_units > (n - 4) / 4)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: precompiled_charsmap declares a %u-byte trie in %zu bytes", source,
                            trie_size, n);
    const uint8_t *strs = blob + 4 + 4 * n_units;
    size_t norm_len = n - 4 - 4 * n_units;
    if (!utf8_valid(strs, norm_len))
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: precompiled_charsmap replacement strings are not UTF-8", source);
    sd_spm_charsmap *m = calloc(1, sizeof *m);
    if (m) {
        m->units = malloc(n_units * sizeof *m->units);
        m->norm = malloc(norm_len + 1);
    }
    if (!m || !m->units || !m->norm) {
        sd_spm_charsmap_free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory for the charsmap", source);
    }
    m->n_units = n_units;
    for (size_t i = 0; i < n_units; i++) {
        const uint8_t *p = blob + 4 + 4 * i;
        m->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                      (uint32_t)p[3] << 24;
    }
    memcpy(m->norm, strs, norm_len);
    m->norm[norm_len] = '\0';
    m->norm_len = norm_len;
    sd_status rc = check_trie(m, source, err);
    if (rc) {
        sd_spm_charsmap_free(m);
        return rc;
    }
    *out = m;
    return SD_OK;
}

const char *sd_spm_charsmap_lookup(const sd_spm_charsmap *m, const char *chunk, size_t n,
                                   size_t *len) {
    size_t pos = unit_offset(m->units[0]);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)chunk[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= m->n_units) return NULL; /* unreachable after check_trie */
        uint32_t u = m->units[pos];
        if (unit_label(u) != c) return NULL;
        pos ^= unit_offset(u);
        if (unit_has_leaf(u)) {
            if (pos >= m->n_units) return NULL;
            size_t v = unit_value(m->units[pos]);
            if (v > m->norm_len) return NULL;
            const char *r = m->norm + v;
            *len = strlen(r); /* the strings end in NUL (one is appended) */
            return r;
        }
    }
    return NULL;
}

typedef struct sbuf { char *p; size_t n, cap; } sbuf;

static int put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

char *sd_spm_charsmap_normalize(const sd_spm_charsmap *m, const char *s, size_t n, size_t *out_n) {
    uint32_t *cps = NULL;
    size_t ncp = 0;
    sbuf b = {0};
    *out_n = 0;
    if (sd_uc_decode_utf8(s, n, &cps, &ncp) < 0) return NULL;
    int ok = put(&b, "", 0) == 0;
    size_t byte = 0; /* byte offset of cps[i] in s (s is valid UTF-8) */
    for (size_t i = 0; ok && i < ncp;) {
        size_t g = sd_uc_grapheme_len(cps + i, ncp - i);
        size_t gbytes = 0;
        for (size_t j = 0; j < g; j++) {
            char tmp[4];
            gbytes += sd_uc_encode_utf8(cps[i + j], tmp);
        }
        const char *r;
        size_t rl;
        if (gbytes < 6 && (r = sd_spm_charsmap_lookup(m, s + byte, gbytes, &rl))) {
            ok = put(&b, r, rl) == 0;
        } else {
            size_t at = byte;
            for (size_t j = 0; ok && j < g; j++) {
                char tmp[4];
                size_t cl = sd_uc_encode_utf8(cps[i + j], tmp);
                if ((r = sd_spm_charsmap_lookup(m, s + at, cl, &rl))) ok = put(&b, r, rl) == 0;
                else ok = put(&b, s + at, cl) == 0;
                at += cl;
            }
        }
        byte += gbytes;
        i += g;
    }
    free(cps);
    if (!ok) {
        free(b.p);
        return NULL;
    }
    b.p[b.n] = '\0';
    *out_n = b.n;
    return b.p;
}
