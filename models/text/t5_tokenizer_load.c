/* t5_tokenizer_load.c - reading a Hugging Face tokenizer.json into the T5
 * (Unigram) tokenizer, refusing what the encoder does not reproduce. */
#include "models/text/t5_tokenizer_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_util.h"
#include "models/text/tokenizer.h"

/* A tokenizer.json this big is not a tokenizer (T5's is 2.4 MB). */
#define MAX_FILE_BYTES (512u << 20)

/* ---- the byte trie ------------------------------------------------------------- */

int t5_trie_init(t5_trie *t) {
    memset(t, 0, sizeof *t);
    t->cap_nodes = 64;
    t->cap_edges = 128;
    t->value = malloc(t->cap_nodes * sizeof *t->value);
    t->edges = calloc(t->cap_edges, sizeof *t->edges);
    if (!t->value || !t->edges) return -1;
    t->value[0] = -1;
    t->n_nodes = 1;
    return 0;
}

void t5_trie_free(t5_trie *t) {
    free(t->value);
    free(t->edges);
    memset(t, 0, sizeof *t);
}

static size_t edge_slot(uint32_t node, uint8_t byte, size_t cap) {
    uint64_t x = ((uint64_t)node << 8 | byte) * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 20) & (cap - 1);
}

int64_t t5_trie_step(const t5_trie *t, uint32_t node, uint8_t byte) {
    size_t i = edge_slot(node, byte, t->cap_edges);
    for (;;) {
        const t5_trie_edge *e = &t->edges[i];
        if (!e->used) return -1;
        if (e->node == node && e->byte == byte) return e->child;
        i = (i + 1) & (t->cap_edges - 1);
    }
}

static int grow_edges(t5_trie *t) {
    size_t cap = t->cap_edges * 2;
    t5_trie_edge *e = calloc(cap, sizeof *e);
    if (!e) return -1;
    for (size_t i = 0; i < t->cap_edges; i++) {
        if (!t->edges[i].used) continue;
        size_t j = edge_slot(t->edges[i].node, t->edges[i].byte, cap);
        while (e[j].used) j = (j + 1) & (cap - 1);
        e[j] = t->edges[i];
    }
    free(t->edges);
    t->edges = e;
    t->cap_edges = cap;
    return 0;
}

int t5_trie_put(t5_trie *t, const char *key, size_t n, int32_t value) {
    uint32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t b = (uint8_t)key[k];
        int64_t c = t5_trie_step(t, node, b);
        if (c < 0) {
            if (t->n_nodes >= UINT32_MAX - 1) return -1;
            if (t->n_nodes == t->cap_nodes) {
                int32_t *v = realloc(t->value, 2 * t->cap_nodes * sizeof *v);
                if (!v) return -1;
                t->value = v;
                t->cap_nodes *= 2;
            }
            if ((t->n_edges + 1) * 2 > t->cap_edges && grow_edges(t) < 0) return -1;
            c = (int64_t)t->n_nodes++;
            t->value[c] = -1;
            size_t i = edge_slot(node, b, t->cap_edges);
            while (t->edges[i].used) i = (i + 1) & (t->cap_edges - 1);
            t->edges[i] = (t5_trie_edge){node, (uint32_t)c, b, 1};
            t->n_edges++;
        }
        node = (uint32_t)c;
    }
    t->value[node] = value;
    if (n > t->max_depth) t->max_depth = n;
    return 0;
}

int32_t t5_trie_get(const t5_trie *t, const char *key, size_t n) {
    uint32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        int64_t c = t5_trie_step(t, node, (uint8_t)key[k]);
        if (c < 0) return -1;
        node = (uint32_t)c;
    }
    return t->value[node];
}

/* ---- lifetime ------------------------------------------------------------------- */

void sd_t5_tokenizer_free(sd_t5_tokenizer *t) {
    if (!t) return;
    free(t->source);
    free(t->arena);
    free(t->piece_off);
    free(t->score);
    t5_trie_free(&t->pieces);
    t5_trie_free(&t->added);
    for (int i = 0; i < t->n_norm; i++) {
        sd_spm_charsmap_free(t->norm[i].charsmap);
        free(t->norm[i].pattern);
        free(t->norm[i].content);
    }
    free(t->norm);
    free(t->pre_ids);
    free(t->post_ids);
    free(t);
}

const char *sd_t5_tokenizer_source(const sd_t5_tokenizer *t) { return t->source; }
int32_t sd_t5_tokenizer_vocab_size(const sd_t5_tokenizer *t) { return t->n_pieces; }

const char *sd_t5_tokenizer_piece(const sd_t5_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_pieces) return NULL;
    return t->arena + t->piece_off[id];
}

/* ---- reading the JSON ---------------------------------------------------------- */

typedef struct reader {
    sd_t5_tokenizer *t;
    const char *src;
    sd_error *err;
} reader;

static sd_status bad(reader *r, const char *what) {
    return sd_error_set(r->err, SD_ERR_FORMAT, "%s: malformed tokenizer.json: %s", r->src, what);
}

static sd_status unsupported(reader *r, const char *what, const char *detail) {
    return sd_error_set(r->err, SD_ERR_UNSUPPORTED,
                        "%s: %s '%s' is not supported by the T5 (SentencePiece Unigram) tokenizer",
                        r->src, what, detail);
}

static sd_status nomem(reader *r) {
    return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory reading the tokenizer", r->src);
}

static const cJSON *field(const cJSON *o, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = field(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* A JSON boolean, or dflt when absent/null; -1 when of another type. */
static int get_bool(const cJSON *o, const char *name, int dflt) {
    const cJSON *b = field(o, name);
    if (!b || cJSON_IsNull(b)) return dflt;
    if (!cJSON_IsBool(b)) return -1;
    return cJSON_IsTrue(b);
}

/* An integer id in [0, INT32_MAX). */
static int get_id(const cJSON *v, int32_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d < (double)INT32_MAX) || d != floor(d)) return 0;
    *out = (int32_t)d;
    return 1;
}

static sd_status read_model(reader *r, const cJSON *model) {
    sd_t5_tokenizer *t = r->t;
    if (!cJSON_IsObject(model)) return bad(r, "no \"model\" object");
    const char *type = type_of(model);
    if (!type || strcmp(type, "Unigram") != 0)
        return sd_error_set(r->err, SD_ERR_UNSUPPORTED,
                            "%s: model type '%s' is not a Unigram (SentencePiece) model; the T5 "
                            "tokenizer needs ComfyUI's t5_tokenizer/tokenizer.json",
                            r->src, type ? type : "(none)");
    const cJSON *vocab = field(model, "vocab");
    if (!cJSON_IsArray(vocab)) return bad(r, "model.vocab is not an array");
    size_t n = 0, bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        const cJSON *s = cJSON_GetArrayItem(e, 0), *sc = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(s) ||
            !cJSON_IsNumber(sc) || !isfinite(sc->valuedouble))
            return bad(r, "a model.vocab entry is not [piece, finite score]");
        bytes += strlen(s->valuestring) + 1;
        if (++n >= (size_t)INT32_MAX) return bad(r, "model.vocab too large");
    }
    if (n == 0) return bad(r, "model.vocab is empty");
    t->n_pieces = (int32_t)n;
    t->arena = malloc(bytes);
    t->piece_off = malloc((n + 1) * sizeof *t->piece_off);
    t->score = malloc(n * sizeof *t->score);
    if (!t->arena || !t->piece_off || !t->score || t5_trie_init(&t->pieces) < 0) return nomem(r);
    size_t off = 0, i = 0;
    t->min_score = INFINITY;
    cJSON_ArrayForEach(e, vocab) {
        const char *s = cJSON_GetArrayItem(e, 0)->valuestring;
        size_t len = strlen(s);
        memcpy(t->arena + off, s, len + 1);
        t->piece_off[i] = off;
        t->score[i] = cJSON_GetArrayItem(e, 1)->valuedouble;
        if (t->score[i] < t->min_score) t->min_score = t->score[i];
        if (t5_trie_put(&t->pieces, s, len, (int32_t)i) < 0) return nomem(r);
        off += len + 1;
        i++;
    }
    t->piece_off[n] = off;
    const cJSON *unk = field(model, "unk_id");
    t->unk_id = -1;
    if (unk && !cJSON_IsNull(unk)) {
        if (!get_id(unk, &t->unk_id) || t->unk_id >= t->n_pieces)
            return bad(r, "model.unk_id is not an id of model.vocab");
    }
    int bf = get_bool(model, "byte_fallback", 0);
    if (bf < 0) return bad(r, "model.byte_fallback is not a boolean");
    t->byte_fallback = bf;
    return SD_OK;
}

static sd_status read_added(reader *r, const cJSON *added) {
    sd_t5_tokenizer *t = r->t;
    if (t5_trie_init(&t->added) < 0) return nomem(r);
    if (!added || cJSON_IsNull(added)) return SD_OK;
    if (!cJSON_IsArray(added)) return bad(r, "added_tokens is not an array");
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        const cJSON *content = field(e, "content");
        int32_t id;
        if (!cJSON_IsObject(e) || !cJSON_IsString(content) || !get_id(field(e, "id"), &id))
            return bad(r, "an added_tokens entry lacks a string content or an id");
        const char *flags[] = {"single_word", "lstrip", "rstrip", "normalized"};
        for (int k = 0; k < 4; k++) {
            /* HF's default for "normalized" is !special; every T5 token says false */
            int v = get_bool(e, flags[k], k == 3 ? -2 : 0);
            if (v == -1) return bad(r, "an added_tokens flag is not a boolean");
            if (v == -2) v = !get_bool(e, "special", 0);
            if (v) {
                char what[96];
                snprintf(what, sizeof what, "added token with %s", flags[k]);
                return unsupported(r, what, content->valuestring);
            }
        }
        size_t len = strlen(content->valuestring);
        if (len == 0) continue; /* matches nothing */
        if (t5_trie_put(&t->added, content->valuestring, len, id) < 0) return nomem(r);
    }
    return SD_OK;
}

/* Standard base64 with padding, strict (as the reference's decoder). */
static uint8_t *base64_decode(const char *s, size_t *out_n) {
    size_t n = strlen(s);
    if (n % 4) return NULL;
    uint8_t *o = malloc(n / 4 * 3 + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = s[i + j];
            int d;
            if (c >= 'A' && c <= 'Z') d = c - 'A';
            else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
            else if (c >= '0' && c <= '9') d = c - '0' + 52;
            else if (c == '+') d = 62;
            else if (c == '/') d = 63;
            else if (c == '=' && i + 4 == n && j >= 2) d = 0, pad++;
            else d = -1;
            if (d < 0 || (pad && c != '=')) {
                free(o);
                return NULL;
            }
            v = v << 6 | (uint32_t)d;
        }
        o[k++] = (uint8_t)(v >> 16);
        if (pad < 2) o[k++] = (uint8_t)(v >> 8);
        if (pad < 1) o[k++] = (uint8_t)v;
    }
    *out_n = k;
    return o;
}

/* Length of the UTF-8 character at s (valid UTF-8 from cJSON/sd_json). */
static size_t utf8_len(const char *s) {
    uint8_t c = (uint8_t)s[0];
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Replace's pattern: {"String": s} or {"Regex": r} with r a literal or one
 * (possibly escaped) character repeated: "c{n,}", "c{n}", "c+". */
static sd_status read_replace(reader *r, const cJSON *o, t5_norm *nm) {
    const cJSON *pat = field(o, "pattern"), *content = field(o, "content");
    if (!cJSON_IsObject(pat) || !cJSON_IsString(content))
        return bad(r, "Replace normalizer without pattern/content");
    nm->content = strdup(content->valuestring);
    if (!nm->content) return nomem(r);
    nm->content_len = strlen(nm->content);
    const cJSON *lit = field(pat, "String"), *re = field(pat, "Regex");
    if (cJSON_IsString(lit)) {
        if (!*lit->valuestring) return unsupported(r, "Replace of the empty string", "");
        nm->pattern = strdup(lit->valuestring);
        if (!nm->pattern) return nomem(r);
        nm->pattern_len = strlen(nm->pattern);
        return SD_OK;
    }
    if (!cJSON_IsString(re)) return bad(r, "Replace pattern is neither String nor Regex");
    const char *p = re->valuestring;
    const char *ch = p;
    if (*p == '\\') {
        ch = ++p;
        if (!*p || !strchr(" .+*?()[]{}|^$\\/-", *p))
            return unsupported(r, "Replace regex", re->valuestring);
    } else if (!*p || strchr(".+*?()[]{}|^$\\", *p)) {
        return unsupported(r, "Replace regex", re->valuestring);
    }
    size_t cl = utf8_len(ch);
    p = ch + cl;
    int min = 1, exact = 1;
    if (*p == '+') {
        exact = 0;
        p++;
    } else if (*p == '{') {
        char *end;
        errno = 0;
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v < 1 || v > 1000000 || errno) return unsupported(r, "Replace regex", re->valuestring);
        min = (int)v;
        if (end[0] == ',' && end[1] == '}') exact = 0, p = end + 2;
        else if (end[0] == '}') p = end + 1;
        else return unsupported(r, "Replace regex", re->valuestring);
    }
    if (*p) return unsupported(r, "Replace regex", re->valuestring);
    nm->pattern = strndup(ch, cl);
    if (!nm->pattern) return nomem(r);
    nm->pattern_len = cl;
    nm->run_min = min;
    nm->run_exact = exact;
    return SD_OK;
}

static sd_status add_norm(reader *r, const cJSON *o, int depth) {
    sd_t5_tokenizer *t = r->t;
    const char *type = type_of(o);
    if (!cJSON_IsObject(o) || !type) return bad(r, "a normalizer without a type");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = field(o, "normalizers"), *e;
        if (!cJSON_IsArray(list)) return bad(r, "Sequence normalizer without a normalizers list");
        if (depth > 8) return unsupported(r, "normalizer nesting", "Sequence");
        cJSON_ArrayForEach(e, list) {
            sd_status rc = add_norm(r, e, depth + 1);
            if (rc) return rc;
        }
        return SD_OK;
    }
    if (strcmp(type, "Precompiled") && strcmp(type, "Strip") && strcmp(type, "Replace"))
        return unsupported(r, "normalizer", type);
    t5_norm *v = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *v);
    if (!v) return nomem(r);
    t->norm = v;
    t5_norm *nm = &t->norm[t->n_norm++];
    memset(nm, 0, sizeof *nm);
    if (strcmp(type, "Precompiled") == 0) {
        nm->kind = T5_NORM_PRECOMPILED;
        const cJSON *b = field(o, "precompiled_charsmap");
        if (!cJSON_IsString(b)) return bad(r, "Precompiled normalizer without precompiled_charsmap");
        size_t n = 0;
        uint8_t *blob = base64_decode(b->valuestring, &n);
        if (!blob) return bad(r, "precompiled_charsmap is not base64");
        sd_status rc = sd_spm_charsmap_parse(blob, n, r->src, &nm->charsmap, r->err);
        free(blob);
        return rc;
    }
    if (strcmp(type, "Strip") == 0) {
        nm->kind = T5_NORM_STRIP;
        /* HF's serialized names, with the older left/right spelling */
        int l = get_bool(o, "strip_left", get_bool(o, "left", 0));
        int rr = get_bool(o, "strip_right", get_bool(o, "right", 0));
        if (l < 0 || rr < 0) return bad(r, "Strip normalizer flags are not booleans");
        nm->strip_left = l;
        nm->strip_right = rr;
        return SD_OK;
    }
    nm->kind = T5_NORM_REPLACE;
    return read_replace(r, o, nm);
}

static sd_status read_metaspace(reader *r, const cJSON *o) {
    sd_t5_tokenizer *t = r->t;
    const cJSON *rep = field(o, "replacement"), *ps = field(o, "prepend_scheme");
    if (!cJSON_IsString(rep) || !*rep->valuestring ||
        utf8_len(rep->valuestring) != strlen(rep->valuestring))
        return bad(r, "Metaspace replacement is not one character");
    t->has_metaspace = 1;
    t->meta_len = strlen(rep->valuestring);
    memcpy(t->meta, rep->valuestring, t->meta_len);
    t->prepend = T5_PREPEND_ALWAYS;
    if (ps && !cJSON_IsNull(ps)) {
        if (!cJSON_IsString(ps)) return bad(r, "Metaspace prepend_scheme is not a string");
        if (strcmp(ps->valuestring, "first") == 0) t->prepend = T5_PREPEND_FIRST;
        else if (strcmp(ps->valuestring, "never") == 0) t->prepend = T5_PREPEND_NEVER;
        else if (strcmp(ps->valuestring, "always") != 0)
            return bad(r, "Metaspace prepend_scheme is not first, always or never");
    }
    int aps = get_bool(o, "add_prefix_space", 1);
    if (aps < 0) return bad(r, "Metaspace add_prefix_space is not a boolean");
    if (!aps) {
        if (t->prepend != T5_PREPEND_NEVER && ps && !cJSON_IsNull(ps))
            return bad(r, "Metaspace add_prefix_space false contradicts its prepend_scheme");
        t->prepend = T5_PREPEND_NEVER;
    }
    int split = get_bool(o, "split", 1);
    if (split < 0) return bad(r, "Metaspace split is not a boolean");
    t->meta_split = split;
    return SD_OK;
}

static sd_status read_pre(reader *r, const cJSON *pre) {
    if (!pre || cJSON_IsNull(pre)) return SD_OK;
    const char *type = type_of(pre);
    if (!cJSON_IsObject(pre) || !type) return bad(r, "pre_tokenizer without a type");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = field(pre, "pretokenizers");
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != 1)
            return unsupported(r, "pre_tokenizer", "Sequence of several");
        return read_pre(r, cJSON_GetArrayItem(list, 0));
    }
    if (strcmp(type, "Metaspace") != 0) return unsupported(r, "pre_tokenizer", type);
    return read_metaspace(r, pre);
}

/* The ids of a TemplateProcessing special token by name. */
static sd_status special_ids(reader *r, const cJSON *specials, const char *name, int32_t **ids,
                             size_t *n) {
    const cJSON *s = field(specials, name), *list = s ? field(s, "ids") : NULL, *e;
    if (!cJSON_IsArray(list)) return bad(r, "post_processor names a special token it does not define");
    cJSON_ArrayForEach(e, list) {
        int32_t id;
        if (!get_id(e, &id)) return bad(r, "post_processor special token id is not an id");
        int32_t *v = realloc(*ids, (*n + 1) * sizeof *v);
        if (!v) return nomem(r);
        *ids = v;
        v[(*n)++] = id;
    }
    return SD_OK;
}

static sd_status read_post(reader *r, const cJSON *post) {
    sd_t5_tokenizer *t = r->t;
    if (!post || cJSON_IsNull(post)) return SD_OK;
    const char *type = type_of(post);
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return unsupported(r, "post_processor", type ? type : "(no type)");
    const cJSON *single = field(post, "single"), *specials = field(post, "special_tokens"), *e;
    if (!cJSON_IsArray(single) || !cJSON_IsObject(specials))
        return bad(r, "TemplateProcessing without single/special_tokens");
    int seen_a = 0;
    cJSON_ArrayForEach(e, single) {
        const cJSON *seq = field(e, "Sequence"), *sp = field(e, "SpecialToken");
        if (cJSON_IsObject(seq)) {
            const cJSON *id = field(seq, "id");
            if (!cJSON_IsString(id) || strcmp(id->valuestring, "A") || seen_a)
                return unsupported(r, "post_processor template", "other than one $A");
            seen_a = 1;
        } else if (cJSON_IsObject(sp) && cJSON_IsString(field(sp, "id"))) {
            sd_status rc = special_ids(r, specials, field(sp, "id")->valuestring,
                                       seen_a ? &t->post_ids : &t->pre_ids,
                                       seen_a ? &t->n_post : &t->n_pre);
            if (rc) return rc;
        } else {
            return bad(r, "TemplateProcessing single entry is neither Sequence nor SpecialToken");
        }
    }
    if (!seen_a) return unsupported(r, "post_processor template", "without $A");
    return SD_OK;
}

sd_status sd_t5_tokenizer_load_json(const char *json, size_t len, const char *source,
                                    sd_t5_tokenizer **out, sd_error *err) {
    *out = NULL;
    if (!source) source = "tokenizer.json";
    /* sd_json_parse needs a NUL-terminated text without inner NULs */
    if (memchr(json, '\0', len))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: not a tokenizer.json (NUL byte)", source);
    char *text = malloc(len + 1);
    sd_t5_tokenizer *t = calloc(1, sizeof *t);
    if (!text || !t || !(t->source = strdup(source))) {
        free(text);
        sd_t5_tokenizer_free(t);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", source);
    }
    memcpy(text, json, len);
    text[len] = '\0';
    cJSON *root = NULL;
    sd_status rc = sd_json_parse(text, source, &root, err);
    free(text);
    reader r = {t, source, err};
    if (!rc && !cJSON_IsObject(root)) rc = bad(&r, "not a JSON object");
    if (!rc) {
        const char *keys[] = {"truncation", "padding"};
        for (int k = 0; k < 2 && !rc; k++) {
            const cJSON *v = field(root, keys[k]);
            if (v && !cJSON_IsNull(v)) rc = unsupported(&r, "setting", keys[k]);
        }
    }
    if (!rc) rc = read_model(&r, field(root, "model"));
    if (!rc) rc = read_added(&r, field(root, "added_tokens"));
    if (!rc) {
        const cJSON *nm = field(root, "normalizer");
        if (nm && !cJSON_IsNull(nm)) rc = add_norm(&r, nm, 0);
    }
    if (!rc) rc = read_pre(&r, field(root, "pre_tokenizer"));
    if (!rc) rc = read_post(&r, field(root, "post_processor"));
    cJSON_Delete(root);
    if (rc) {
        sd_t5_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return SD_OK;
}

sd_status sd_t5_tokenizer_load(const char *path, sd_t5_tokenizer **out, sd_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sd_error_set(err, errno == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO,
                            "%s: cannot open the T5 tokenizer: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: not a tokenizer.json (not a regular file of at "
                                                "most %u MiB)", path, MAX_FILE_BYTES >> 20);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, n, f);
    int bad_read = ferror(f) || got != n;
    fclose(f);
    if (bad_read) {
        free(buf);
        return sd_error_set(err, SD_ERR_IO, "%s: read error", path);
    }
    sd_status rc = sd_t5_tokenizer_load_json(buf, n, path, out, err);
    free(buf);
    return rc;
}

/* ---- finding the file ------------------------------------------------------------- */

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

sd_status sd_t5_tokenizer_resolve(const char *model_dir, const char *configured_dir,
                                  const char *comfyui_dir, sd_t5_tokenizer **out,
                                  sd_error *err) {
    *out = NULL;
    const char *env = getenv(SD_TOKENIZER_DIR_ENV);
    const char *dirs[4] = {model_dir, configured_dir, env, comfyui_dir};
    const char *subs[4] = {SD_T5_TOKENIZER_SUBDIR, SD_T5_TOKENIZER_SUBDIR, SD_T5_TOKENIZER_SUBDIR,
                           SD_T5_TOKENIZER_COMFY_SUBDIR};
    char tried[1200] = "";
    size_t used = 0;
    for (int i = 0; i < 4; i++) {
        if (!dirs[i] || !*dirs[i]) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s/%s", dirs[i], subs[i], SD_T5_TOKENIZER_FILE);
        if (is_file(path)) return sd_t5_tokenizer_load(path, out, err);
        if (used < sizeof tried) {
            int w = snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", path);
            if (w > 0) used += (size_t)w;
        }
    }
    return sd_error_set(err, SD_ERR_NOT_FOUND,
                        "no T5 tokenizer (tokenizer.json)%s%s; put ComfyUI's "
                        "comfy/text_encoders/t5_tokenizer/tokenizer.json in DIR/" SD_T5_TOKENIZER_SUBDIR
                        "/ and pass --tokenizer-dir DIR (or set " SD_TOKENIZER_DIR_ENV
                        "=DIR), or pass --comfyui-dir with a ComfyUI installation",
                        used ? ": looked for " : "", tried);
}
