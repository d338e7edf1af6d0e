/* prompt.c - ComfyUI weight syntax, embedding splicing and 77-token
 * chunking (comfy.sd1_clip.SDTokenizer.tokenize_with_weights). */
#include "models/text/prompt.h"
#include "models/text/prompt_embed.h"
#include "models/text/unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ComfyUI never splits a segment shorter than this across chunks. */
#define MAX_WORD_LENGTH 8
#define EMBED_ID "embedding:"
#define EMBED_ID_LEN 10

void sd_prompt_opts_clip_l(sd_prompt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_length = 77;
    o->pad_token = -1;
    o->embedding_key = "clip_l";
}

void sd_prompt_opts_clip_g(sd_prompt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_length = 77;
    o->pad_token = 0;
    o->embedding_key = "clip_g";
}

void sd_prompt_opts_t5xxl(sd_prompt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_length = 0;
    o->min_length = 256;
    o->pad_token = 0;
    o->embedding_key = "t5xxl";
}

void sd_prompt_opts_t5xxl_sd3(sd_prompt_opts *o)
{
    sd_prompt_opts_t5xxl(o);
    o->min_length = 77;
}

void sd_prompt_opts_qwen3(sd_prompt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_length = 0;
    o->min_length = 1;
    o->pad_token = 151643;
    o->embedding_key = "qwen3_4b";
    o->disable_weights = 1;
}

static sd_status clip_encode(const void *tok, const char *text, size_t len,
                             const volatile sig_atomic_t *stop, int32_t **ids, size_t *n, sd_error *err)
{
    return sd_tokenizer_encode_ex(tok, text, len, stop, ids, n, err);
}

void sd_prompt_vocab_clip(sd_prompt_vocab *v, const sd_tokenizer *tok)
{
    v->tok = tok;
    v->encode = clip_encode;
    v->start = tok ? sd_tokenizer_bos(tok) : -1;
    v->end = tok ? sd_tokenizer_eos(tok) : -1;
}

void sd_prompt_opts_clip_h(sd_prompt_opts *o)
{
    sd_prompt_opts_clip_g(o);
    o->embedding_key = "clip_h";
}

/* ---- Python float() ---------------------------------------------------------- */

/* digitpart: digit ('_'? digit)*; returns chars consumed (0 = none). */
static size_t digitpart(const uint32_t *c, size_t i, size_t n, char *buf, size_t *k)
{
    size_t s = i;
    if (i >= n || c[i] < '0' || c[i] > '9')
        return 0;
    while (i < n) {
        if (c[i] >= '0' && c[i] <= '9') {
            buf[(*k)++] = (char)c[i++];
        } else if (c[i] == '_' && i + 1 < n && c[i + 1] >= '0' && c[i + 1] <= '9' && i > s) {
            i++;
        } else {
            break;
        }
    }
    return i - s;
}

static int ci_equal(const uint32_t *c, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    if (n != l)
        return 0;
    for (size_t i = 0; i < l; i++)
        if (c[i] >= 0x80 || (char)(c[i] | 0x20) != lit[i])
            return 0;
    return 1;
}

int sd_prompt_parse_float(const char *s, size_t len, double *out)
{
    uint32_t *c;
    size_t n, i = 0, k = 0;
    int ok = 0;
    if (sd_uc_decode_utf8(s, len, &c, &n) < 0)
        return 0;
    char *buf = malloc(n + 8);
    if (!buf) {
        free(c);
        return 0;
    }
    while (n > 0 && sd_uc_is_py_space(c[n - 1]))
        n--;
    while (i < n && sd_uc_is_py_space(c[i]))
        i++;
    if (i < n && (c[i] == '+' || c[i] == '-'))
        buf[k++] = (char)c[i++];
    if (ci_equal(c + i, n - i, "inf") || ci_equal(c + i, n - i, "infinity")) {
        *out = k > 0 && buf[0] == '-' ? -INFINITY : INFINITY;
        ok = 1;
    } else if (ci_equal(c + i, n - i, "nan")) {
        *out = NAN;
        ok = 1;
    } else {
        size_t a = digitpart(c, i, n, buf, &k), b = 0;
        i += a;
        if (i < n && c[i] == '.') {
            buf[k++] = '.';
            i++;
            b = digitpart(c, i, n, buf, &k);
            i += b;
        }
        if (a + b > 0 && i < n && (c[i] == 'e' || c[i] == 'E')) {
            buf[k++] = 'e';
            i++;
            if (i < n && (c[i] == '+' || c[i] == '-'))
                buf[k++] = (char)c[i++];
            size_t e = digitpart(c, i, n, buf, &k);
            i += e;
            if (!e)
                a = b = 0; /* "1e" is not a number */
        }
        if (a + b > 0 && i == n) {
            buf[k] = '\0';
            *out = strtod(buf, NULL);
            ok = 1;
        }
    }
    free(buf);
    free(c);
    return ok;
}

/* ---- weight syntax ------------------------------------------------------------- */

/* A byte string that may hold NULs (the escape markers "\0\1" and "\0\2"). */
typedef struct span { const char *p; size_t n; } span;

typedef struct segvec { sd_prompt_segment *v; size_t n, cap; } segvec;

/* ComfyUI's unescape_important: "\0\1" -> ')', then "\0\2" -> '('. */
static char *unescape(span s)
{
    char *o = malloc(s.n + 1);
    size_t k = 0;
    if (!o)
        return NULL;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] == '\0' && i + 1 < s.n && (s.p[i + 1] == '\1' || s.p[i + 1] == '\2')) {
            o[k++] = s.p[i + 1] == '\1' ? ')' : '(';
            i++;
        } else {
            o[k++] = s.p[i];
        }
    }
    o[k] = '\0';
    return o;
}

static int seg_push(segvec *v, span s, double w)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        sd_prompt_segment *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        v->v = nv;
        v->cap = cap;
    }
    if (!(v->v[v->n].text = unescape(s)))
        return -1;
    v->v[v->n++].weight = w;
    return 0;
}

/* token_weights(string, current_weight). parse_parentheses cuts the string
 * into consecutive items, so each item is a sub-span; they are found here
 * in one pass with ComfyUI's (possibly negative) nesting counter. */
static int token_weights(span s, double w, segvec *out, int depth)
{
    size_t start = 0;
    long level = 0;
    for (size_t i = 0; i <= s.n; i++) {
        size_t item_end = (size_t)-1; /* exclusive end of a finished item */
        size_t next_start = start;
        if (i == s.n) {
            if (i > start)
                item_end = i, next_start = i;
        } else if (s.p[i] == '(') {
            if (level == 0 && i > start)
                item_end = i, next_start = i;
            level++;
        } else if (s.p[i] == ')') {
            level--;
            if (level == 0)
                item_end = i + 1, next_start = i + 1;
        }
        if (item_end == (size_t)-1)
            continue;
        span x = {s.p + start, item_end - start};
        start = next_start;
        if (x.n >= 2 && x.p[0] == '(' && x.p[x.n - 1] == ')') {
            span in = {x.p + 1, x.n - 2};
            double nw = w * 1.1;
            size_t colon = in.n;
            while (colon > 0 && in.p[colon - 1] != ':')
                colon--;
            /* rfind(":") > 0: the ':' must not be the first character */
            if (colon >= 2) {
                double f;
                if (sd_prompt_parse_float(in.p + colon, in.n - colon, &f)) {
                    nw = f;
                    in.n = colon - 1;
                }
            }
            /* Depth is bounded by the parentheses in the text, but keep the C
             * stack safe against hostile prompts. */
            if (depth > 512) {
                if (seg_push(out, in, nw) < 0)
                    return -1;
            } else if (token_weights(in, nw, out, depth + 1) < 0) {
                return -1;
            }
        } else if (seg_push(out, x, w) < 0) {
            return -1;
        }
    }
    return 0;
}

/* escape_important: "\)" -> "\0\1", "\(" -> "\0\2". Result has *n bytes. */
static char *escape(const char *text, size_t *n)
{
    size_t len = strlen(text), k = 0;
    char *o = malloc(len + 1);
    if (!o)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\\' && i + 1 < len && (text[i + 1] == ')' || text[i + 1] == '(')) {
            o[k++] = '\0';
            o[k++] = text[i + 1] == ')' ? '\1' : '\2';
            i++;
        } else {
            o[k++] = text[i];
        }
    }
    *n = k;
    return o;
}

void sd_prompt_segments_free(sd_prompt_segment *segs, size_t n)
{
    for (size_t i = 0; segs && i < n; i++)
        free(segs[i].text);
    free(segs);
}

static sd_status parse_segments(const char *text, int disable_weights, segvec *v, sd_error *err)
{
    size_t n;
    char *esc = escape(text, &n);
    int rc;
    if (!esc)
        return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    span s = {esc, n};
    rc = disable_weights ? seg_push(v, s, 1.0) : token_weights(s, 1.0, v, 0);
    free(esc);
    if (rc < 0) {
        sd_prompt_segments_free(v->v, v->n);
        v->v = NULL;
        v->n = 0;
        return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    }
    return SD_OK;
}

sd_status sd_prompt_parse_weights(const char *text, sd_prompt_segment **segs, size_t *n,
                                  sd_error *err)
{
    segvec v = {0};
    sd_status st = parse_segments(text ? text : "", 0, &v, err);
    *segs = v.v;
    *n = v.n;
    return st;
}

/* ---- token groups ------------------------------------------------------------------ */

typedef struct entry { int32_t id, embed, row; double weight; } entry;
typedef struct group { size_t start, n; } group;

typedef struct builder {
    const sd_prompt_vocab *v;
    const sd_prompt_opts *o;
    entry *e;
    size_t ne, cape;
    group *g;
    size_t ng, capg;
    sd_prompt_embedding *emb;
    int nemb, capemb;
} builder;

static int add_entry(builder *b, entry x)
{
    if (b->ne == b->cape) {
        size_t cap = b->cape ? b->cape * 2 : 64;
        entry *v = realloc(b->e, cap * sizeof *v);
        if (!v)
            return -1;
        b->e = v;
        b->cape = cap;
    }
    b->e[b->ne++] = x;
    return 0;
}

static int open_group(builder *b)
{
    if (b->ng == b->capg) {
        size_t cap = b->capg ? b->capg * 2 : 16;
        group *v = realloc(b->g, cap * sizeof *v);
        if (!v)
            return -1;
        b->g = v;
        b->capg = cap;
    }
    b->g[b->ng].start = b->ne;
    b->g[b->ng++].n = 0;
    return 0;
}

static void close_group(builder *b) { b->g[b->ng - 1].n = b->ne - b->g[b->ng - 1].start; }

static sd_status add_text(builder *b, const char *text, size_t len, double w, sd_error *err)
{
    int32_t *ids;
    size_t n;
    sd_status st = b->v->encode(b->v->tok, text, len, b->o->stop, &ids, &n, err);
    if (st != SD_OK)
        return st;
    if (open_group(b) < 0)
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (add_entry(b, (entry){ids[i], -1, 0, w}) < 0)
            goto nomem;
    close_group(b);
    free(ids);
    return SD_OK;
nomem:
    free(ids);
    return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
}

static void warnf(const sd_prompt_opts *o, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!o->warn)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->warn(o->warn_ud, msg);
}

/* Index of the embedding called name in b->emb, loading it on first use;
 * -1 when it does not exist. */
static sd_status get_embedding(builder *b, const char *name, int *idx, sd_error *err)
{
    char *path;
    sd_tensor *vec;
    *idx = -1;
    for (int i = 0; i < b->nemb; i++)
        if (strcmp(b->emb[i].name, name) == 0) {
            *idx = i;
            return SD_OK;
        }
    sd_status st = sd_prompt_embed_load(b->o, name, &path, &vec, err);
    if (st != SD_OK || !vec)
        return st;
    if (b->nemb == b->capemb) {
        int cap = b->capemb ? b->capemb * 2 : 4;
        sd_prompt_embedding *v = realloc(b->emb, (size_t)cap * sizeof *v);
        if (!v)
            goto nomem;
        b->emb = v;
        b->capemb = cap;
    }
    b->emb[b->nemb].name = strdup(name);
    b->emb[b->nemb].path = path;
    b->emb[b->nemb].vectors = vec;
    if (!b->emb[b->nemb].name) {
        free(path);
        sd_tensor_unref(vec);
        return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    }
    *idx = b->nemb++;
    return SD_OK;
nomem:
    free(path);
    sd_tensor_unref(vec);
    return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static size_t utf8_skip(const char *s, size_t n, size_t chars)
{
    size_t i = 0;
    while (i < n && chars > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        chars--;
    }
    return i;
}

/* Python str.split() of s into a malloc'd array of malloc'd words. */
static char **py_split(const char *s, size_t *count)
{
    uint32_t *c;
    size_t n, k = 0;
    char **v;
    *count = 0;
    if (sd_uc_decode_utf8(s, strlen(s), &c, &n) < 0)
        return NULL;
    v = calloc(n / 2 + 2, sizeof *v);
    char *buf = malloc(4 * n + 1);
    if (!v || !buf) {
        free(c);
        free(v);
        free(buf);
        return NULL;
    }
    for (size_t i = 0; i < n;) {
        if (sd_uc_is_py_space(c[i])) {
            i++;
            continue;
        }
        size_t bl = 0;
        for (; i < n && !sd_uc_is_py_space(c[i]); i++)
            bl += sd_uc_encode_utf8(c[i], buf + bl);
        buf[bl] = '\0';
        if (!(v[k++] = strdup(buf))) {
            for (size_t j = 0; j + 1 < k; j++)
                free(v[j]);
            free(v);
            v = NULL;
            break;
        }
    }
    free(c);
    free(buf);
    *count = v ? k : 0;
    return v;
}

/* One "embedding:..." word (the identifier already removed): splices the
 * embedding and tokenizes any leftover text (SDTokenizer._try_get_embedding). */
static sd_status add_embedding_word(builder *b, const char *word, size_t len, double w,
                                    sd_error *err)
{
    /* .strip('\n') then .split() */
    char *name_all = malloc(len + 1);
    size_t nw = 0;
    char **parts;
    sd_status st = SD_OK;
    char *leftover = NULL;
    int idx = -1;
    if (!name_all)
        return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    memcpy(name_all, word, len);
    name_all[len] = '\0';
    parts = py_split(name_all, &nw);
    if (!parts) {
        free(name_all);
        return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    }
    if (nw == 0) {
        /* ComfyUI raises IndexError here; a bare "embedding:" is dropped. */
        warnf(b->o, "warning, embedding:%s does not exist, ignoring", name_all);
        goto done;
    }
    size_t lo_len = 0;
    for (size_t i = 1; i < nw; i++)
        lo_len += strlen(parts[i]) + 1;
    const char *ename = parts[0];
    size_t elen = strlen(ename);
    leftover = malloc(lo_len + elen + 2);
    if (!leftover) {
        st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
        goto done;
    }
    leftover[0] = '\0';
    for (size_t i = 1; i < nw; i++) {
        if (i > 1)
            strcat(leftover, " ");
        strcat(leftover, parts[i]);
    }
    st = get_embedding(b, ename, &idx, err);
    if (st != SD_OK)
        goto done;
    char *stripped = NULL;
    if (idx < 0) {
        size_t s0 = 0, s1 = elen;
        while (s0 < s1 && ename[s0] == ',')
            s0++;
        while (s1 > s0 && ename[s1 - 1] == ',')
            s1--;
        if (s1 - s0 < elen) {
            stripped = strndup(ename + s0, s1 - s0);
            if (!stripped) {
                st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
                goto done;
            }
            st = get_embedding(b, stripped, &idx, err);
            if (st != SD_OK) {
                free(stripped);
                goto done;
            }
            /* "{} {}".format(name[len(stripped):], leftover), len in characters */
            size_t cut = utf8_skip(ename, elen, utf8_chars(ename + s0, s1 - s0));
            char *lo = malloc(elen - cut + 1 + strlen(leftover) + 1);
            if (!lo) {
                free(stripped);
                st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
                goto done;
            }
            sprintf(lo, "%s %s", ename + cut, leftover);
            free(leftover);
            leftover = lo;
        }
    }
    if (idx < 0) {
        warnf(b->o, "warning, embedding:%s does not exist, ignoring", name_all);
    } else {
        const sd_tensor *vec = b->emb[idx].vectors;
        if (open_group(b) < 0) {
            st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
        } else {
            for (int64_t r = 0; r < vec->shape[0] && st == SD_OK; r++)
                if (add_entry(b, (entry){-1, idx, (int32_t)r, w}) < 0)
                    st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
            close_group(b);
        }
    }
    free(stripped);
    if (st == SD_OK && leftover[0])
        st = add_text(b, leftover, strlen(leftover), w, err);
done:
    for (size_t i = 0; i < nw; i++)
        free(parts[i]);
    free(parts);
    free(name_all);
    free(leftover);
    return st;
}

static int starts_embed(const char *s, size_t n)
{
    return n >= EMBED_ID_LEN && memcmp(s, EMBED_ID, EMBED_ID_LEN) == 0;
}

/* One weighted segment: re.split(' embedding:|\nembedding:'), then each
 * non-empty piece is an embedding reference or text tokenized as a whole. */
static sd_status add_segment(builder *b, const char *s, double w, sd_error *err)
{
    size_t n = strlen(s), start = 0, i = 0;
    int use_embed = b->o->n_embedding_dirs > 0 && b->o->embedding_dirs;
    sd_status st = SD_OK;
    for (;;) {
        /* find the next separator at or after i */
        size_t sep = n;
        for (size_t j = i; j + 1 + EMBED_ID_LEN <= n; j++)
            if ((s[j] == ' ' || s[j] == '\n') && starts_embed(s + j + 1, n - j - 1)) {
                sep = j;
                break;
            }
        /* piece = s[start, sep); pieces after the first regain "embedding:" */
        const char *p = s + start;
        size_t pl = sep - start;
        int first = start == 0;
        if (!first) {
            p -= EMBED_ID_LEN;
            pl += EMBED_ID_LEN;
        }
        if (pl > 0) {
            if (use_embed && starts_embed(p, pl)) {
                const char *nm = p + EMBED_ID_LEN;
                size_t nl = pl - EMBED_ID_LEN;
                while (nl && *nm == '\n')
                    nm++, nl--;
                while (nl && nm[nl - 1] == '\n')
                    nl--;
                st = add_embedding_word(b, nm, nl, w, err);
            } else {
                st = add_text(b, p, pl, w, err);
            }
            if (st != SD_OK)
                return st;
        }
        if (sep == n)
            break;
        start = sep + 1 + EMBED_ID_LEN;
        i = start;
    }
    return SD_OK;
}

/* ---- chunking ---------------------------------------------------------------------------- */

typedef struct chunker {
    sd_prompt_token *v;
    size_t n, cap;
} chunker;

static int put(chunker *c, sd_prompt_token t)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        sd_prompt_token *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = t;
    return 0;
}

static sd_prompt_token special(int32_t id) { return (sd_prompt_token){id, -1, 0, 0, 1.0}; }

static int32_t pad_of(const sd_prompt_vocab *v, const sd_prompt_opts *o)
{
    return o->pad_token < 0 ? v->end : o->pad_token;
}

/* Lays the groups out in chunks exactly like tokenize_with_weights (with
 * max_length 0 as its "never split, never pad to the maximum"). */
static int chunk_groups(const builder *b, chunker *c, int *n_chunks, int *chunk_len)
{
    const int unbounded = b->o->max_length == 0;
    const size_t L = unbounded ? (size_t)-1 / 2 : (size_t)b->o->max_length;
    const int32_t bos = b->v->start, eos = b->v->end;
    const int32_t pad = pad_of(b->v, b->o);
    const size_t has_end = eos >= 0;
    size_t batch_start = 0;
    int chunks = 1;
    if (bos >= 0 && put(c, special(bos)) < 0)
        return -1;
    for (size_t gi = 0; gi < b->ng; gi++) {
        size_t pos = b->g[gi].start, left = b->g[gi].n;
        int large = left >= MAX_WORD_LENGTH;
        while (left > 0) {
            size_t blen = c->n - batch_start;
            if (left + blen > L - has_end) {
                size_t remaining = L - blen - has_end;
                if (large) {
                    for (size_t k = 0; k < remaining; k++, pos++, left--) {
                        const entry *e = &b->e[pos];
                        if (put(c, (sd_prompt_token){e->id, e->embed, e->row, (int32_t)gi + 1,
                                                     e->weight}) < 0)
                            return -1;
                    }
                    if (has_end && put(c, special(eos)) < 0)
                        return -1;
                } else {
                    if (has_end && put(c, special(eos)) < 0)
                        return -1;
                    for (size_t k = 0; k < remaining; k++)
                        if (put(c, special(pad)) < 0)
                            return -1;
                }
                batch_start = c->n;
                chunks++;
                if (bos >= 0 && put(c, special(bos)) < 0)
                    return -1;
            } else {
                for (; left > 0; pos++, left--) {
                    const entry *e = &b->e[pos];
                    if (put(c, (sd_prompt_token){e->id, e->embed, e->row, (int32_t)gi + 1,
                                                 e->weight}) < 0)
                        return -1;
                }
            }
        }
    }
    if (has_end && put(c, special(eos)) < 0)
        return -1;
    size_t want = unbounded ? 0 : L;
    if ((size_t)b->o->min_length > want)
        want = (size_t)b->o->min_length;
    while (c->n - batch_start < want)
        if (put(c, special(pad)) < 0)
            return -1;
    if (unbounded && c->n > (size_t)INT32_MAX)
        return -1;
    *n_chunks = chunks;
    *chunk_len = unbounded ? (int)c->n : (int)L;
    return 0;
}

static sd_status check_opts(const sd_prompt_opts *o, sd_error *err)
{
    if (!o)
        return sd_error_set(err, SD_ERR_INVALID, "prompt: no options");
    /* A chunk must hold start + a whole 7-token segment + end, or ComfyUI's
     * layout would never place it. */
    if (o->max_length != 0 && (o->max_length < MAX_WORD_LENGTH + 2 || o->max_length > 1 << 16))
        return sd_error_set(err, SD_ERR_INVALID, "prompt: max_length %d out of range [%d, %d]",
                            o->max_length, MAX_WORD_LENGTH + 2, 1 << 16);
    if (o->min_length < 0 || o->min_length > 1 << 20)
        return sd_error_set(err, SD_ERR_INVALID, "prompt: min_length %d out of range",
                            o->min_length);
    return SD_OK;
}

void sd_prompt_tokens_free(sd_prompt_tokens *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_embeds; i++) {
        free(t->embeds[i].name);
        free(t->embeds[i].path);
        sd_tensor_unref(t->embeds[i].vectors);
    }
    free(t->embeds);
    free(t->tokens);
    free(t);
}

sd_status sd_prompt_tokenize(const sd_tokenizer *tok, const char *text,
                             const sd_prompt_opts *opts, sd_prompt_tokens **out,
                             sd_error *err)
{
    sd_prompt_vocab v;
    *out = NULL;
    if (!tok)
        return sd_error_set(err, SD_ERR_INVALID, "prompt: no tokenizer");
    sd_prompt_vocab_clip(&v, tok);
    return sd_prompt_tokenize_vocab(&v, text, opts, out, err);
}

sd_status sd_prompt_tokenize_vocab(const sd_prompt_vocab *v, const char *text,
                                   const sd_prompt_opts *opts, sd_prompt_tokens **out,
                                   sd_error *err)
{
    builder b = {0};
    segvec segs = {0};
    chunker c = {0};
    sd_prompt_tokens *res = NULL;
    int n_chunks = 0, chunk_len = 0;
    sd_status st;
    *out = NULL;
    if ((st = check_opts(opts, err)) != SD_OK)
        return st;
    if (!v || !v->encode)
        return sd_error_set(err, SD_ERR_INVALID, "prompt: no tokenizer");
    b.v = v;
    b.o = opts;
    st = parse_segments(text ? text : "", opts->disable_weights, &segs, err);
    for (size_t i = 0; st == SD_OK && i < segs.n; i++)
        st = add_segment(&b, segs.v[i].text, segs.v[i].weight, err);
    if (st == SD_OK && chunk_groups(&b, &c, &n_chunks, &chunk_len) < 0)
        st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    if (st == SD_OK && !(res = calloc(1, sizeof *res)))
        st = sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    if (st == SD_OK) {
        res->n_chunks = n_chunks;
        res->chunk_len = chunk_len;
        res->tokens = c.v;
        res->n_embeds = b.nemb;
        res->embeds = b.emb;
        c.v = NULL;
        b.emb = NULL;
        b.nemb = 0;
        *out = res;
    }
    sd_prompt_segments_free(segs.v, segs.n);
    free(c.v);
    free(b.e);
    free(b.g);
    for (int i = 0; i < b.nemb; i++) {
        free(b.emb[i].name);
        free(b.emb[i].path);
        sd_tensor_unref(b.emb[i].vectors);
    }
    free(b.emb);
    return st;
}

sd_status sd_prompt_tokens_pad_chunks(const sd_tokenizer *tok, const sd_prompt_opts *opts,
                                      sd_prompt_tokens *t, int n_chunks, sd_error *err)
{
    sd_status st = check_opts(opts, err);
    if (st != SD_OK)
        return st;
    if (t->chunk_len != opts->max_length)
        return sd_error_set(err, SD_ERR_INVALID, "prompt: chunk length %d differs from %d",
                            t->chunk_len, opts->max_length);
    if (n_chunks <= t->n_chunks)
        return SD_OK;
    size_t L = (size_t)t->chunk_len;
    sd_prompt_token *v = realloc(t->tokens, (size_t)n_chunks * L * sizeof *v);
    if (!v)
        return sd_error_set(err, SD_ERR_NOMEM, "prompt: out of memory");
    t->tokens = v;
    sd_prompt_vocab voc;
    sd_prompt_vocab_clip(&voc, tok);
    int32_t pad = pad_of(&voc, opts);
    for (int ch = t->n_chunks; ch < n_chunks; ch++) {
        sd_prompt_token *p = v + (size_t)ch * L;
        p[0] = special(sd_tokenizer_bos(tok));
        p[1] = special(sd_tokenizer_eos(tok));
        for (size_t k = 2; k < L; k++)
            p[k] = special(pad);
    }
    t->n_chunks = n_chunks;
    return SD_OK;
}

int sd_prompt_tokens_has_weights(const sd_prompt_tokens *t)
{
    size_t n = (size_t)t->n_chunks * (size_t)t->chunk_len;
    for (size_t i = 0; i < n; i++)
        if (t->tokens[i].weight != 1.0)
            return 1;
    return 0;
}

const float *sd_prompt_token_vector(const sd_prompt_tokens *t, const sd_prompt_token *tk,
                                    int64_t *dim)
{
    if (tk->embed < 0 || tk->embed >= t->n_embeds)
        return NULL;
    const sd_tensor *v = t->embeds[tk->embed].vectors;
    if (tk->row < 0 || tk->row >= v->shape[0])
        return NULL;
    if (dim)
        *dim = v->shape[1];
    return sd_tensor_f32(v) + (size_t)tk->row * (size_t)v->shape[1];
}
