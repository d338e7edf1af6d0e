/* qwen_tokenizer.c - encoding with the Qwen2 tokenizer: added tokens, NFC,
 * the pre-tokenizer regex as a linear-time matcher, byte-level BPE. */
#include "models/text/qwen_tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "models/text/unicode_hf.h"

/* ---- the pre-tokenizer ------------------------------------------------------------
 *
 * Qwen2's pattern, alternatives in order (Oniguruma tries them in order at
 * each position and takes the first that matches; the pieces cover the text
 * because every character is a letter, a number, a space or "other"):
 *   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)
 *   2 [^\r\n\p{L}\p{N}]?\p{L}+
 *   3 \p{N}
 *   4  ?[^\s\p{L}\p{N}]+[\r\n]*
 *   5 \s*[\r\n]+
 *   6 \s+(?!\S)
 *   7 \s+
 * Alternative 5 backtracks \s* to the LAST newline of the space run; 6 takes
 * the run but its last character when a non-space follows. */

enum { C_OTHER = 0, C_L = 1, C_N = 2, C_S = 4, C_NL = 8 };

static unsigned char cls(uint32_t c) {
    if (c == '\r' || c == '\n') return C_S | C_NL;
    if (sd_uc_hf_is_space(c)) return C_S;
    if (sd_uc_hf_is_letter(c)) return C_L;
    if (sd_uc_hf_is_number(c)) return C_N;
    return C_OTHER;
}

/* Case-insensitive ASCII letter test; 's' also matches U+017F (long s),
 * which Unicode case folding maps to 's'. */
static int ci(uint32_t c, char lower) {
    return c == (uint32_t)lower || c == (uint32_t)(lower - 32) || (lower == 's' && c == 0x17F);
}

static size_t contraction(const uint32_t *c, size_t i, size_t n) {
    if (c[i] != '\'' || i + 1 >= n) return 0;
    uint32_t a = c[i + 1], b = i + 2 < n ? c[i + 2] : 0;
    if (ci(a, 's') || ci(a, 't') || ci(a, 'm') || ci(a, 'd')) return 2;
    if ((ci(a, 'r') && ci(b, 'e')) || (ci(a, 'v') && ci(b, 'e')) || (ci(a, 'l') && ci(b, 'l'))) return 3;
    return 0;
}

int sd_qwen_pretokenize(const uint32_t *c, size_t n, sd_qwen_piece_fn fn, void *ud) {
    unsigned char *k = malloc(n + 1);
    if (!k) return -1;
    for (size_t i = 0; i < n; i++) k[i] = cls(c[i]);
    /* the end of the space run through i and its last newline, cached per run */
    size_t run_end = 0, run_nl = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t e = i;
        if ((e = i + contraction(c, i, n)) > i) {
        } else if (k[i] == C_L || (!(k[i] & (C_NL | C_L | C_N)) && i + 1 < n && k[i + 1] == C_L)) {
            e = i + 1;
            while (e < n && k[e] == C_L) e++;
        } else if (k[i] == C_N) {
            e = i + 1;
        } else if (k[i] == C_OTHER || (c[i] == ' ' && i + 1 < n && k[i + 1] == C_OTHER)) {
            e = i + 1;
            while (e < n && k[e] == C_OTHER) e++;
            while (e < n && (k[e] & C_NL)) e++;
        } else { /* a space: alternatives 5, 6, 7 */
            if (run_end <= i) {
                run_end = i;
                run_nl = (size_t)-1;
                while (run_end < n && (k[run_end] & C_S)) {
                    if (k[run_end] & C_NL) run_nl = run_end;
                    run_end++;
                }
            }
            if (run_nl != (size_t)-1 && run_nl >= i) e = run_nl + 1;
            else if (run_end == n || run_end - i < 2) e = run_end;
            else e = run_end - 1;
        }
        rc = fn(ud, i, e);
        i = e;
    }
    free(k);
    return rc;
}

/* ---- byte-level BPE ---------------------------------------------------------------- */

typedef struct sym { int32_t id, prev, next, alive; } sym;
typedef struct mrg { size_t rank; size_t pos; int32_t result; } mrg;

/* lower rank first, then leftmost (the library's merge order) */
static int before(const mrg *a, const mrg *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

typedef struct heap { mrg *v; size_t n, cap; } heap;

static int heap_push(heap *h, mrg m) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        mrg *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && before(&m, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = m;
    return 0;
}

static mrg heap_pop(heap *h) {
    mrg top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const mrg *best = &last;
        if (l < h->n && before(&h->v[l], best)) m = l, best = &h->v[l];
        if (r < h->n && before(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

typedef struct idvec { int32_t *v; size_t n, cap; } idvec;

static int id_push(idvec *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

static int push_pair(const sd_qwen_tokenizer *t, heap *h, const sym *s, size_t pos) {
    int32_t nx = s[pos].next;
    size_t rank;
    int32_t result;
    if (nx < 0 || !qwen_merge_find(t, s[pos].id, s[nx].id, &rank, &result)) return 0;
    return heap_push(h, (mrg){rank, pos, result});
}

/* The ids of one piece's UTF-8 bytes, appended to out: 0, -1 out of
 * memory, -2 when *stop became non-zero (polled every 4096 merges). */
static int bpe(const sd_qwen_tokenizer *t, const unsigned char *b, size_t n, sym *s, heap *h,
               idvec *out, const volatile sig_atomic_t *stop) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[b[i]];
        if (id < 0) continue; /* no token for this byte: dropped */
        s[m] = (sym){id, (int32_t)m - 1, (int32_t)m + 1, 1};
        m++;
    }
    if (!m) return 0;
    s[m - 1].next = -1;
    h->n = 0;
    for (size_t i = 0; i + 1 < m; i++)
        if (push_pair(t, h, s, i) < 0) return -1;
    unsigned polls = 0;
    while (h->n) {
        if (stop && (++polls & 4095) == 0 && *stop) return -2;
        mrg top = heap_pop(h);
        sym *a = &s[top.pos];
        if (!a->alive || a->next < 0) continue;
        size_t rank;
        int32_t result;
        sym *bn = &s[a->next];
        /* a stale entry: the pair here changed since it was queued */
        if (!qwen_merge_find(t, a->id, bn->id, &rank, &result) || result != top.result) continue;
        a->id = result;
        bn->alive = 0;
        a->next = bn->next;
        if (a->next >= 0) s[a->next].prev = (int32_t)top.pos;
        if (a->prev >= 0 && push_pair(t, h, s, (size_t)a->prev) < 0) return -1;
        if (push_pair(t, h, s, top.pos) < 0) return -1;
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (id_push(out, s[i].id) < 0) return -1;
    return 0;
}

/* ---- encoding ------------------------------------------------------------------------ */

typedef struct piece_ctx {
    const sd_qwen_tokenizer *t;
    const uint32_t *cps;
    unsigned char *buf; /* room for 4 bytes per code point of the segment */
    sym *s;
    heap h;
    idvec out;
    const volatile sig_atomic_t *stop;
} piece_ctx;

static int on_piece(void *ud, size_t start, size_t end) {
    piece_ctx *p = ud;
    size_t k = 0;
    for (size_t i = start; i < end; i++) k += sd_uc_encode_utf8(p->cps[i], (char *)p->buf + k);
    if (p->stop && *p->stop) return -2;
    return bpe(p->t, p->buf, k, p->s, &p->h, &p->out, p->stop);
}

/* One stretch of text between added tokens: NFC, split, BPE. */
static int encode_segment(const sd_qwen_tokenizer *t, const uint32_t *cps, size_t n, piece_ctx *p) {
    if (!n) return 0;
    uint32_t *nfc;
    size_t m;
    if (sd_uc_hf_nfc(cps, n, &nfc, &m) < 0) return -1;
    p->t = t;
    p->cps = nfc;
    p->buf = malloc(4 * m + 1);
    p->s = malloc((4 * m + 1) * sizeof *p->s);
    int rc = p->buf && p->s ? sd_qwen_pretokenize(nfc, m, on_piece, p) : -1;
    free(p->buf);
    free(p->s);
    free(nfc);
    return rc;
}

/* The longest added token starting at text[i..n) (its index in t->added),
 * or -1: narrowing the sorted list byte by byte. */
static long added_at(const sd_qwen_tokenizer *t, const char *text, size_t i, size_t n) {
    size_t lo = 0, hi = t->n_added;
    long best = -1;
    for (size_t d = 0; i + d < n && lo < hi && d < QWEN_MAX_ADDED_BYTES; d++) {
        unsigned char c = (unsigned char)text[i + d];
        /* [lo, hi) share text[i..i+d); keep those whose byte d is c */
        size_t a = lo, b = hi;
        while (a < b) { /* first with byte d >= c (a token of length d sorts first) */
            size_t mid = a + (b - a) / 2;
            const qwen_added *e = &t->added[mid];
            if (e->n <= d || (unsigned char)e->s[d] < c) a = mid + 1;
            else b = mid;
        }
        size_t z = a;
        b = hi;
        while (z < b) {
            size_t mid = z + (b - z) / 2;
            if ((unsigned char)t->added[mid].s[d] <= c) z = mid + 1;
            else b = mid;
        }
        lo = a;
        hi = z;
        if (lo < hi && t->added[lo].n == d + 1) best = (long)lo;
    }
    return best;
}

sd_status sd_qwen_tokenizer_encode(const sd_qwen_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, size_t *n, sd_error *err) {
    return sd_qwen_tokenizer_encode_ex(t, text, len, NULL, ids, n, err);
}

sd_status sd_qwen_tokenizer_encode_ex(const sd_qwen_tokenizer *t, const char *text, size_t len,
                                      const volatile sig_atomic_t *stop, int32_t **ids, size_t *n,
                                      sd_error *err) {
    *ids = NULL;
    *n = 0;
    uint32_t *cps = NULL;
    size_t ncp = 0;
    char *utf8 = NULL;
    size_t *cp_at = NULL; /* code point index of each byte of utf8 */
    piece_ctx p = {.stop = stop};
    int rc = sd_uc_decode_utf8(text ? text : "", text ? len : 0, &cps, &ncp);
    /* the text as the library holds it: valid UTF-8 (U+FFFD for bad bytes) */
    if (!rc) {
        utf8 = malloc(4 * ncp + 1);
        cp_at = malloc((4 * ncp + 1) * sizeof *cp_at);
        rc = utf8 && cp_at ? 0 : -1;
    }
    size_t nb = 0;
    for (size_t i = 0; !rc && i < ncp; i++) {
        size_t k = sd_uc_encode_utf8(cps[i], utf8 + nb);
        for (size_t j = 0; j < k; j++) cp_at[nb + j] = i;
        nb += k;
    }
    /* added tokens, leftmost-longest in the raw text; the stretches between
     * them go through the model */
    size_t seg = 0; /* code point where the current stretch starts */
    for (size_t i = 0; !rc && i < nb;) {
        long a = t->n_added ? added_at(t, utf8, i, nb) : -1;
        if (a < 0) {
            i++;
            continue;
        }
        size_t at = cp_at[i];
        rc = encode_segment(t, cps + seg, at - seg, &p);
        if (!rc) rc = id_push(&p.out, t->added[a].id);
        i += t->added[a].n;
        seg = i < nb ? cp_at[i] : ncp;
    }
    if (!rc) rc = encode_segment(t, cps + seg, ncp - seg, &p);
    if (!rc && !p.out.v) rc = (p.out.v = malloc(sizeof *p.out.v)) ? 0 : -1;
    free(cps);
    free(utf8);
    free(cp_at);
    free(p.h.v);
    if (rc) {
        free(p.out.v);
        if (rc == -2) return sd_error_set(err, SD_ERR_CANCELLED, "interrupted");
        return sd_error_set(err, SD_ERR_NOMEM, "Qwen tokenizer: out of memory for %zu bytes of text", len);
    }
    *ids = p.out.v;
    *n = p.out.n;
    return SD_OK;
}

static sd_status vocab_encode(const void *tok, const char *text, size_t len,
                              const volatile sig_atomic_t *stop, int32_t **ids, size_t *n,
                              sd_error *err) {
    return sd_qwen_tokenizer_encode_ex(tok, text, len, stop, ids, n, err);
}

void sd_qwen_tokenizer_prompt_vocab(const sd_qwen_tokenizer *t, sd_prompt_vocab *v) {
    v->tok = t;
    v->encode = vocab_encode;
    v->start = -1;
    v->end = -1;
}
