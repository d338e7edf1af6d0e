/* t5_tokenizer.c - encoding with the T5 (Unigram) tokenizer: added-token
 * split, normalizer, Metaspace, Viterbi segmentation, template. The
 * behaviour contract is in t5_tokenizer.h. */
#include "models/text/t5_tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "models/text/unicode.h"

/* SentencePiece's penalty on the unknown piece (kUnkPenalty). */
#define UNK_PENALTY 10.0

/* ---- growable buffers ------------------------------------------------------------ */

typedef struct buf { char *p; size_t n, cap; } buf;
typedef struct idvec { int32_t *v; size_t n, cap; } idvec;

static int buf_put(buf *b, const char *s, size_t n) {
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
    b->p[b->n] = '\0';
    return 0;
}

static int ids_put(idvec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->v, cap * sizeof *p);
        if (!p) return -1;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return 0;
}

static size_t utf8_len(uint8_t c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* ---- normalizer ------------------------------------------------------------------- */

/* Rust's char::is_whitespace (White_Space). */
static int is_white(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint32_t decode_at(const char *s, size_t n, size_t i, size_t *len) {
    uint32_t *cp;
    size_t k, l = utf8_len((uint8_t)s[i]);
    if (i + l > n) l = n - i;
    *len = l;
    if (sd_uc_decode_utf8(s + i, l, &cp, &k) < 0 || k == 0) return 0xFFFD;
    uint32_t c = cp[0];
    free(cp);
    return c;
}

/* Strip in place (b holds valid UTF-8). */
static void strip(buf *b, int left, int right) {
    size_t start = 0, end = b->n, l;
    if (left)
        while (start < end && is_white(decode_at(b->p, b->n, start, &l))) start += l;
    if (right)
        while (end > start) {
            size_t k = end - 1;
            while (k > start && ((uint8_t)b->p[k] & 0xC0) == 0x80) k--;
            if (!is_white(decode_at(b->p, b->n, k, &l))) break;
            end = k;
        }
    memmove(b->p, b->p + start, end - start);
    b->n = end - start;
    b->p[b->n] = '\0';
}

/* Replace into out (out is reset). */
static int replace(const t5_norm *nm, const buf *in, buf *out) {
    out->n = 0;
    if (buf_put(out, "", 0) < 0) return -1;
    size_t i = 0, pl = nm->pattern_len;
    while (i < in->n) {
        if (nm->run_min == 0) { /* literal */
            if (i + pl <= in->n && memcmp(in->p + i, nm->pattern, pl) == 0) {
                if (buf_put(out, nm->content, nm->content_len) < 0) return -1;
                i += pl;
                continue;
            }
        } else {
            size_t k = 0, j = i;
            while (j + pl <= in->n && memcmp(in->p + j, nm->pattern, pl) == 0 &&
                   (!nm->run_exact || k < (size_t)nm->run_min))
                j += pl, k++;
            if (k >= (size_t)nm->run_min) {
                if (buf_put(out, nm->content, nm->content_len) < 0) return -1;
                i = j;
                continue;
            }
        }
        size_t l = utf8_len((uint8_t)in->p[i]);
        if (i + l > in->n) l = in->n - i;
        if (buf_put(out, in->p + i, l) < 0) return -1;
        i += l;
    }
    return 0;
}

/* Run the normalizer steps over b (in place). */
static int normalize(const sd_t5_tokenizer *t, buf *b) {
    buf tmp = {0};
    for (int s = 0; s < t->n_norm; s++) {
        const t5_norm *nm = &t->norm[s];
        if (nm->kind == T5_NORM_STRIP) {
            strip(b, nm->strip_left, nm->strip_right);
            continue;
        }
        if (nm->kind == T5_NORM_PRECOMPILED) {
            size_t n;
            char *p = sd_spm_charsmap_normalize(nm->charsmap, b->p, b->n, &n);
            if (!p) goto nomem;
            free(b->p);
            b->p = p;
            b->n = n;
            b->cap = n + 1;
        } else {
            if (replace(nm, b, &tmp) < 0) goto nomem;
            buf x = *b;
            *b = tmp;
            tmp = x;
        }
    }
    free(tmp.p);
    return 0;
nomem:
    free(tmp.p);
    return -1;
}

/* ---- Unigram ------------------------------------------------------------------------ */

typedef struct node { double score; int64_t start; int32_t id; } node;

/* The byte_fallback piece "<0xXX>" of a byte, or -1. */
static int32_t byte_piece(const sd_t5_tokenizer *t, uint8_t v) {
    static const char hex[] = "0123456789ABCDEF";
    char name[6] = {'<', '0', 'x', hex[v >> 4], hex[v & 15], '>'};
    return t5_trie_get(&t->pieces, name, 6);
}

/* Ids of one word (UTF-8 w[0..n), n > 0) appended to out. 1 when the word
 * needs the unknown piece and the model has none. */
static int unigram(const sd_t5_tokenizer *t, const char *w, size_t n, node *best, idvec *out,
                   int *nomem) {
    const double unk_score = t->min_score - UNK_PENALTY;
    for (size_t i = 0; i <= n; i++) best[i] = (node){0.0, -1, -1};
    for (size_t at = 0; at < n;) {
        double here = best[at].score;
        size_t mblen = utf8_len((uint8_t)w[at]);
        if (at + mblen > n) mblen = n - at;
        int single = 0;
        uint32_t nd = 0;
        for (size_t k = at; k < n; k++) {
            int64_t c = t5_trie_step(&t->pieces, nd, (uint8_t)w[k]);
            if (c < 0) break;
            nd = (uint32_t)c;
            int32_t id = t->pieces.value[nd];
            if (id < 0) continue;
            size_t end = k + 1;
            double cand = t->score[id] + here;
            if (best[end].start < 0 || cand > best[end].score)
                best[end] = (node){cand, (int64_t)at, id};
            if (end - at == mblen) single = 1;
        }
        if (!single) {
            if (t->unk_id < 0) return 1;
            double cand = unk_score + here;
            if (best[at + mblen].start < 0 || cand > best[at + mblen].score)
                best[at + mblen] = (node){cand, (int64_t)at, t->unk_id};
        }
        at += mblen;
    }
    /* Back from the end; runs of unknown pieces fuse into one string, which
     * is then looked up like any other (as the reference's token_to_ids). */
    size_t first = out->n;
    size_t end = n;
    while (end > 0) {
        size_t start = (size_t)best[end].start;
        int32_t id = best[end].id;
        if (id == t->unk_id) {
            while (start > 0 && best[start].id == t->unk_id) start = (size_t)best[start].start;
            id = t5_trie_get(&t->pieces, w + start, end - start);
            if (id < 0 && t->byte_fallback) {
                /* <0xXX> per byte, all or none; pushed back to front like the rest */
                size_t nb = end - start, k = 0;
                while (k < nb && byte_piece(t, (uint8_t)w[start + k]) >= 0) k++;
                if (k == nb) {
                    for (k = nb; k-- > 0;)
                        if (ids_put(out, byte_piece(t, (uint8_t)w[start + k])) < 0)
                            return *nomem = 1, 0;
                    end = start;
                    continue;
                }
            }
            if (id < 0) id = t->unk_id;
        }
        if (ids_put(out, id) < 0) return *nomem = 1, 0;
        end = start;
    }
    /* pushed back to front */
    for (size_t a = first, b = out->n; a + 1 < b; a++, b--) {
        int32_t x = out->v[a];
        out->v[a] = out->v[b - 1];
        out->v[b - 1] = x;
    }
    return 0;
}

/* ---- the pipeline ---------------------------------------------------------------------- */

/* One piece of text between added tokens: normalize, pre-tokenize,
 * segment. `first`: the piece starts the text (prepend scheme "first"). */
static sd_status encode_piece(const sd_t5_tokenizer *t, const char *s, size_t n, int first,
                              idvec *out, sd_error *err) {
    buf b = {0}, m = {0};
    node *best = NULL;
    int nomem = 0, no_unk = 0;
    if (buf_put(&b, s, n) < 0 || normalize(t, &b) < 0) goto nomem;
    if (b.n == 0) goto done;
    if (t->has_metaspace) {
        if (buf_put(&m, "", 0) < 0) goto nomem;
        /* after ' ' -> replacement, as the reference checks it */
        int starts = b.p[0] == ' ' || (b.n >= t->meta_len && memcmp(b.p, t->meta, t->meta_len) == 0);
        if ((t->prepend == T5_PREPEND_ALWAYS || (t->prepend == T5_PREPEND_FIRST && first)) &&
            !starts && buf_put(&m, t->meta, t->meta_len) < 0)
            goto nomem;
        for (size_t i = 0; i < b.n; i++) {
            if (b.p[i] == ' ') {
                if (buf_put(&m, t->meta, t->meta_len) < 0) goto nomem;
            } else if (buf_put(&m, b.p + i, 1) < 0) {
                goto nomem;
            }
        }
        buf x = b;
        b = m;
        m = x;
    }
    best = malloc((b.n + 1) * sizeof *best);
    if (!best) goto nomem;
    /* split before every replacement character (MergedWithNext) */
    size_t start = 0;
    for (size_t i = 0; i <= b.n && !no_unk && !nomem; i++) {
        int cut = i == b.n || (t->has_metaspace && t->meta_split && i > start &&
                               i + t->meta_len <= b.n && memcmp(b.p + i, t->meta, t->meta_len) == 0);
        if (!cut) continue;
        if (i > start) no_unk = unigram(t, b.p + start, i - start, best, out, &nomem);
        start = i;
    }
    if (nomem) goto nomem;
    if (no_unk) {
        free(b.p);
        free(m.p);
        free(best);
        return sd_error_set(err, SD_ERR_INVALID,
                            "%s: the text has characters no piece covers and the model has no "
                            "unknown piece (unk_id)",
                            t->source);
    }
done:
    free(b.p);
    free(m.p);
    free(best);
    return SD_OK;
nomem:
    free(b.p);
    free(m.p);
    free(best);
    return sd_error_set(err, SD_ERR_NOMEM, "T5 tokenizer: out of memory");
}

sd_status sd_t5_tokenizer_encode(const sd_t5_tokenizer *t, const char *text, size_t len,
                                 int add_special, int32_t **ids, size_t *n, sd_error *err) {
    *ids = NULL;
    *n = 0;
    idvec out = {0};
    buf clean = {0};
    sd_status rc = SD_OK;
    /* the reference sees a Rust string: make the bytes valid UTF-8 */
    uint32_t *cps = NULL;
    size_t ncp = 0;
    if (sd_uc_decode_utf8(text ? text : "", text ? len : 0, &cps, &ncp) < 0) goto nomem;
    if (buf_put(&clean, "", 0) < 0) goto nomem;
    for (size_t i = 0; i < ncp; i++) {
        char u[4];
        if (buf_put(&clean, u, sd_uc_encode_utf8(cps[i], u)) < 0) goto nomem;
    }
    free(cps);
    cps = NULL;
    if (add_special)
        for (size_t i = 0; i < t->n_pre; i++)
            if (ids_put(&out, t->pre_ids[i]) < 0) goto nomem;
    /* added tokens, leftmost-longest, in the raw text */
    size_t piece = 0, i = 0;
    while (i <= clean.n && !rc) {
        size_t match = 0;
        int32_t id = -1;
        if (i < clean.n && t->added.n_nodes > 1) {
            uint32_t nd = 0;
            for (size_t k = i; k < clean.n; k++) {
                int64_t c = t5_trie_step(&t->added, nd, (uint8_t)clean.p[k]);
                if (c < 0) break;
                nd = (uint32_t)c;
                if (t->added.value[nd] >= 0) match = k + 1 - i, id = t->added.value[nd];
            }
        }
        if (match == 0 && i < clean.n) {
            i++;
            continue;
        }
        if (i > piece) rc = encode_piece(t, clean.p + piece, i - piece, piece == 0, &out, err);
        if (!rc && match > 0 && ids_put(&out, id) < 0) goto nomem;
        i += match ? match : 1;
        piece = i;
    }
    if (!rc && add_special)
        for (size_t k = 0; k < t->n_post; k++)
            if (ids_put(&out, t->post_ids[k]) < 0) goto nomem;
    free(clean.p);
    if (rc) {
        free(out.v);
        return rc;
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v))) goto nomem;
    *ids = out.v;
    *n = out.n;
    return SD_OK;
nomem:
    free(cps);
    free(clean.p);
    free(out.v);
    return sd_error_set(err, SD_ERR_NOMEM, "T5 tokenizer: out of memory");
}

static sd_status encode_plain(const void *tok, const char *text, size_t len,
                              const volatile sig_atomic_t *stop, int32_t **ids, size_t *n, sd_error *err) {
    if (stop && *stop) return sd_error_set(err, SD_ERR_CANCELLED, "interrupted");
    return sd_t5_tokenizer_encode(tok, text, len, 0, ids, n, err);
}

sd_status sd_t5_tokenizer_prompt_vocab(const sd_t5_tokenizer *t, sd_prompt_vocab *v,
                                       sd_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    sd_status rc = sd_t5_tokenizer_encode(t, "", 0, 1, &ids, &n, err);
    if (rc) return rc;
    v->tok = t;
    v->encode = encode_plain;
    v->start = -1;
    v->end = n ? ids[0] : -1;
    free(ids);
    return SD_OK;
}
