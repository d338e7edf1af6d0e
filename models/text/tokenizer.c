/* tokenizer.c - CLIP byte-level BPE: vocabulary loading, text clean-up,
 * pre-tokenization and merges. The behaviour contract is in tokenizer.h. */
#include "models/text/tokenizer.h"
#include "models/text/tokenizer_internal.h"
#include "models/text/unicode.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* OpenAI and transformers both keep merges[1 : 49152-256-2+1]. */
#define CLIP_MAX_MERGES 48894
#define CACHE_MAX_ENTRIES 65536

static const char BOS_STR[] = "<|startoftext|>";
static const char EOS_STR[] = "<|endoftext|>";

/* ---- hashing ------------------------------------------------------------------ */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* token string -> id, open addressing over indices into tok->strs. */
typedef struct str_map { int32_t *slots; size_t cap; } str_map;

/* (left id, right id) -> merge rank and merged id. */
typedef struct merge_slot { uint64_t key; int32_t rank, merged; } merge_slot;
typedef struct merge_map { merge_slot *slots; size_t cap; } merge_map;

/* word cache: piece bytes -> ids */
typedef struct cache_entry {
    char *key;
    size_t klen;
    int32_t *ids;
    size_t n;
    struct cache_entry *next;
} cache_entry;

struct sd_tokenizer {
    char **strs; /* id -> token string (NULL for holes) */
    int32_t n_vocab;
    str_map vocab;
    merge_map merges;
    int32_t byte_id[256];     /* symbol of byte b */
    int32_t byte_end_id[256]; /* symbol of byte b + "</w>" */
    int32_t bos, eos;
    pthread_mutex_t lock;
    cache_entry **cache;
    size_t cache_cap, cache_n;
};

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static int vocab_put(sd_tokenizer *t, int32_t id)
{
    const char *s = t->strs[id];
    size_t mask = t->vocab.cap - 1;
    size_t i = hash_bytes(s, strlen(s)) & mask;
    while (t->vocab.slots[i] >= 0) {
        if (strcmp(t->strs[t->vocab.slots[i]], s) == 0)
            return -1; /* duplicate token string */
        i = (i + 1) & mask;
    }
    t->vocab.slots[i] = id;
    return 0;
}

static int32_t vocab_get(const sd_tokenizer *t, const char *s, size_t len)
{
    size_t mask = t->vocab.cap - 1;
    size_t i = hash_bytes(s, len) & mask;
    for (;;) {
        int32_t id = t->vocab.slots[i];
        if (id < 0)
            return -1;
        const char *v = t->strs[id];
        if (strncmp(v, s, len) == 0 && v[len] == '\0')
            return id;
        i = (i + 1) & mask;
    }
}

static const merge_slot *merge_get(const merge_map *m, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = m->cap - 1;
    size_t i = hash_u64(key) & mask;
    for (;;) {
        const merge_slot *s = &m->slots[i];
        if (s->rank < 0)
            return NULL;
        if (s->key == key)
            return s;
        i = (i + 1) & mask;
    }
}

static void merge_put(merge_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = m->cap - 1;
    size_t i = hash_u64(key) & mask;
    while (m->slots[i].rank >= 0) {
        if (m->slots[i].key == key)
            return; /* a repeated merge keeps its first (lowest) rank */
        i = (i + 1) & mask;
    }
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].merged = merged;
}

/* ---- bytes_to_unicode ------------------------------------------------------------ */

/* GPT-2's reversible byte -> code point table; `order` receives the bytes
 * in the order OpenAI lists the table's values (printable ranges first). */
static void bytes_to_unicode(uint32_t map[256], int order[256])
{
    int is_direct[256] = {0};
    int k = 0, extra = 0;
    for (int b = '!'; b <= '~'; b++)
        is_direct[b] = 1;
    for (int b = 0xA1; b <= 0xAC; b++)
        is_direct[b] = 1;
    for (int b = 0xAE; b <= 0xFF; b++)
        is_direct[b] = 1;
    for (int b = 0; b < 256; b++)
        if (is_direct[b]) {
            map[b] = (uint32_t)b;
            order[k++] = b;
        }
    for (int b = 0; b < 256; b++)
        if (!is_direct[b]) {
            map[b] = (uint32_t)(256 + extra++);
            order[k++] = b;
        }
}

/* ---- construction ------------------------------------------------------------------ */

static sd_tokenizer *tok_alloc(int32_t n_vocab)
{
    sd_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_vocab = n_vocab;
    t->strs = calloc((size_t)n_vocab, sizeof *t->strs);
    t->vocab.cap = pow2_at_least((size_t)n_vocab * 2);
    t->vocab.slots = malloc(t->vocab.cap * sizeof *t->vocab.slots);
    t->cache_cap = 4096;
    t->cache = calloc(t->cache_cap, sizeof *t->cache);
    if (!t->strs || !t->vocab.slots || !t->cache) {
        free(t->strs);
        free(t->vocab.slots);
        free(t->cache);
        free(t);
        return NULL;
    }
    memset(t->vocab.slots, 0xff, t->vocab.cap * sizeof *t->vocab.slots);
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

static void cache_clear(sd_tokenizer *t)
{
    for (size_t i = 0; i < t->cache_cap; i++) {
        cache_entry *e = t->cache[i];
        while (e) {
            cache_entry *nx = e->next;
            free(e->key);
            free(e->ids);
            free(e);
            e = nx;
        }
        t->cache[i] = NULL;
    }
    t->cache_n = 0;
}

void sd_tokenizer_free(sd_tokenizer *tok)
{
    if (!tok)
        return;
    cache_clear(tok);
    free(tok->cache);
    for (int32_t i = 0; i < tok->n_vocab; i++)
        free(tok->strs[i]);
    free(tok->strs);
    free(tok->vocab.slots);
    free(tok->merges.slots);
    pthread_mutex_destroy(&tok->lock);
    free(tok);
}

/* Index the vocabulary, resolve byte symbols and specials. */
static sd_status tok_finish_vocab(sd_tokenizer *t, const char *what, sd_error *err)
{
    uint32_t map[256];
    int order[256];
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->strs[i] && vocab_put(t, i) < 0)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: token '%s' appears twice", what,
                                t->strs[i]);
    bytes_to_unicode(map, order);
    for (int b = 0; b < 256; b++) {
        char s[16];
        size_t n = sd_uc_encode_utf8(map[b], s);
        t->byte_id[b] = vocab_get(t, s, n);
        memcpy(s + n, "</w>", 5);
        t->byte_end_id[b] = vocab_get(t, s, n + 4);
        if (t->byte_id[b] < 0 || t->byte_end_id[b] < 0)
            return sd_error_set(err, SD_ERR_FORMAT,
                                "%s: byte symbol for 0x%02x missing from the vocabulary", what, b);
    }
    t->bos = vocab_get(t, BOS_STR, strlen(BOS_STR));
    t->eos = vocab_get(t, EOS_STR, strlen(EOS_STR));
    if (t->bos < 0 || t->eos < 0)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: vocabulary lacks %s / %s", what, BOS_STR,
                            EOS_STR);
    return SD_OK;
}

/* Add merges from text lines (first line is the "#version" header).
 * Stops after CLIP_MAX_MERGES merges, as the reference implementations do. */
static sd_status tok_add_merges(sd_tokenizer *t, char *text, const char *what, sd_error *err)
{
    char *line = text, *next;
    int lineno = 0, rank = 0;
    t->merges.cap = pow2_at_least(CLIP_MAX_MERGES * 2);
    t->merges.slots = malloc(t->merges.cap * sizeof *t->merges.slots);
    if (!t->merges.slots)
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < t->merges.cap; i++)
        t->merges.slots[i].rank = -1;
    for (; line && rank < CLIP_MAX_MERGES; line = next, lineno++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[--len] = '\0';
        if (lineno == 0)
            continue; /* "#version: 0.2" */
        if (len == 0) {
            if (!next)
                break;
            return sd_error_set(err, SD_ERR_FORMAT, "%s: line %d is empty", what, lineno + 1);
        }
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || sp[1] == '\0' || strchr(sp + 1, ' '))
            return sd_error_set(err, SD_ERR_FORMAT, "%s: line %d is not 'left right'", what,
                                lineno + 1);
        *sp = '\0';
        int32_t a = vocab_get(t, line, strlen(line));
        int32_t b = vocab_get(t, sp + 1, strlen(sp + 1));
        *sp = ' ';
        memmove(sp, sp + 1, strlen(sp + 1) + 1); /* "left right" -> "leftright" */
        int32_t m = vocab_get(t, line, strlen(line));
        if (a < 0 || b < 0 || m < 0)
            return sd_error_set(err, SD_ERR_FORMAT,
                                "%s: line %d: merge of tokens not in the vocabulary", what,
                                lineno + 1);
        merge_put(&t->merges, a, b, rank++, m);
    }
    if (rank == 0)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: no merges", what);
    return SD_OK;
}

static char *read_all(const char *path, size_t *size, sd_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        sd_error_set(err, errno == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO, "%s: %s", path,
                     strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (!buf) {
        fclose(f);
        sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    if (ferror(f)) {
        fclose(f);
        free(buf);
        sd_error_set(err, SD_ERR_IO, "%s: read error", path);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    if (size)
        *size = n;
    return buf;
}

sd_status sd_tokenizer_load_files(const char *vocab_json, const char *merges_txt,
                                  sd_tokenizer **out, sd_error *err)
{
    sd_tokenizer *t = NULL;
    sd_status st;
    char *merges = NULL;
    char *json = read_all(vocab_json, NULL, err);
    cJSON *root = NULL;
    *out = NULL;
    if (!json)
        return err ? err->code : SD_ERR_IO;
    root = cJSON_Parse(json);
    free(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: not a JSON object", vocab_json);
    }
    int32_t max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        double v = cJSON_GetNumberValue(it);
        if (!cJSON_IsNumber(it) || v < 0 || v >= (1 << 24) || v != (int32_t)v) {
            sd_error_set(err, SD_ERR_FORMAT, "%s: token '%s' has no valid id", vocab_json,
                         it->string ? it->string : "?");
            cJSON_Delete(root);
            return SD_ERR_FORMAT;
        }
        if ((int32_t)v > max_id)
            max_id = (int32_t)v;
    }
    if (max_id < 0) {
        cJSON_Delete(root);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: empty vocabulary", vocab_json);
    }
    t = tok_alloc(max_id + 1);
    if (!t) {
        cJSON_Delete(root);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", vocab_json);
    }
    cJSON_ArrayForEach(it, root)
    {
        int32_t id = (int32_t)cJSON_GetNumberValue(it);
        if (t->strs[id]) {
            cJSON_Delete(root);
            sd_tokenizer_free(t);
            return sd_error_set(err, SD_ERR_FORMAT, "%s: id %d used twice", vocab_json, id);
        }
        t->strs[id] = strdup(it->string);
        if (!t->strs[id]) {
            cJSON_Delete(root);
            sd_tokenizer_free(t);
            return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", vocab_json);
        }
    }
    cJSON_Delete(root);
    st = tok_finish_vocab(t, vocab_json, err);
    if (st == SD_OK) {
        merges = read_all(merges_txt, NULL, err);
        st = merges ? tok_add_merges(t, merges, merges_txt, err) : (err ? err->code : SD_ERR_IO);
        free(merges);
    }
    if (st != SD_OK) {
        sd_tokenizer_free(t);
        return st;
    }
    *out = t;
    return SD_OK;
}

sd_status sd_tokenizer_load_bpe_gz(const char *path, sd_tokenizer **out, sd_error *err)
{
    *out = NULL;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return sd_error_set(err, errno == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO, "%s: %s", path,
                            errno ? strerror(errno) : "cannot open");
    /* Only the header and the first CLIP_MAX_MERGES lines are needed. */
    size_t cap = 1 << 20, n = 0;
    int lines = 0;
    char *buf = malloc(cap + 1);
    while (buf && lines <= CLIP_MAX_MERGES) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        int r = gzread(gz, buf + n, (unsigned)(cap - n));
        if (r < 0) {
            int e;
            const char *m = gzerror(gz, &e);
            sd_error_set(err, SD_ERR_FORMAT, "%s: gzip: %s", path, m);
            gzclose(gz);
            free(buf);
            return SD_ERR_FORMAT;
        }
        if (r == 0)
            break;
        for (size_t i = n; i < n + (size_t)r; i++)
            lines += buf[i] == '\n';
        n += (size_t)r;
    }
    gzclose(gz);
    if (!buf)
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    buf[n] = '\0';
    /* Cut after the last merge line we use. */
    {
        char *p = buf;
        for (int l = 0; l <= CLIP_MAX_MERGES && p; l++) {
            p = strchr(p, '\n');
            if (p)
                p++;
        }
        if (p)
            *p = '\0';
    }
    /* Count merges to size the vocabulary: 256 bytes, 256 bytes+</w>, merges, 2 specials. */
    int n_merges = 0;
    for (char *p = strchr(buf, '\n'); p && p[1]; p = strchr(p + 1, '\n'))
        n_merges++;
    sd_tokenizer *t = tok_alloc(512 + n_merges + 2);
    if (!t) {
        free(buf);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    uint32_t map[256];
    int order[256];
    int32_t id = 0;
    sd_status st = SD_OK;
    bytes_to_unicode(map, order);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 256; i++) {
            char s[16];
            size_t k = sd_uc_encode_utf8(map[order[i]], s);
            memcpy(s + k, pass ? "</w>" : "", pass ? 5 : 1);
            t->strs[id++] = strdup(s);
        }
    char *line = strchr(buf, '\n');
    while (line && line[1] && st == SD_OK) {
        line++;
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len && line[len - 1] == '\r')
            len--;
        char *s = malloc(len + 1);
        size_t k = 0;
        int spaces = 0;
        if (!s) {
            st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        for (size_t i = 0; i < len; i++) {
            if (line[i] == ' ')
                spaces++;
            else
                s[k++] = line[i];
        }
        s[k] = '\0';
        t->strs[id++] = s;
        if (spaces != 1)
            st = sd_error_set(err, SD_ERR_FORMAT, "%s: line %d is not 'left right'", path,
                              id - 512 + 1);
        line = end;
    }
    if (st == SD_OK) {
        t->strs[id++] = strdup(BOS_STR);
        t->strs[id++] = strdup(EOS_STR);
        for (int32_t i = 0; i < t->n_vocab; i++)
            if (!t->strs[i])
                st = sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    if (st == SD_OK)
        st = tok_finish_vocab(t, path, err);
    if (st == SD_OK)
        st = tok_add_merges(t, buf, path, err);
    free(buf);
    if (st != SD_OK) {
        sd_tokenizer_free(t);
        return st;
    }
    *out = t;
    return SD_OK;
}

/* ---- locating files -------------------------------------------------------------- */

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Which files dir holds: 2 = vocab.json + merges.txt, 1 = the gz, 0 = none. */
static int dir_kind(const char *dir, char *a, char *b, size_t n)
{
    snprintf(a, n, "%s/vocab.json", dir);
    snprintf(b, n, "%s/merges.txt", dir);
    if (is_file(a) && is_file(b))
        return 2;
    snprintf(a, n, "%s/bpe_simple_vocab_16e6.txt.gz", dir);
    if (is_file(a))
        return 1;
    return 0;
}

static int find_files(const char *dir, char *a, char *b, size_t n)
{
    char sub[4096];
    int k;
    if (!dir || !*dir)
        return 0;
    if ((k = dir_kind(dir, a, b, n)))
        return k;
    snprintf(sub, sizeof sub, "%s/tokenizer", dir);
    return dir_kind(sub, a, b, n);
}

int sd_tokenizer_dir_has_files(const char *dir)
{
    char a[4200], b[4200];
    return find_files(dir, a, b, sizeof a) != 0;
}

sd_status sd_tokenizer_load_dir(const char *dir, sd_tokenizer **out, sd_error *err)
{
    char a[4200], b[4200];
    *out = NULL;
    switch (find_files(dir, a, b, sizeof a)) {
    case 2:
        return sd_tokenizer_load_files(a, b, out, err);
    case 1:
        return sd_tokenizer_load_bpe_gz(a, out, err);
    default:
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "no CLIP tokenizer files in '%s' (need vocab.json + merges.txt or "
                            "bpe_simple_vocab_16e6.txt.gz)",
                            dir ? dir : "(null)");
    }
}

sd_status sd_tokenizer_resolve(const char *model_dir, const char *configured_dir,
                               sd_tokenizer **out, sd_error *err)
{
    const char *env = getenv(SD_TOKENIZER_DIR_ENV);
    *out = NULL;
    if (model_dir && sd_tokenizer_dir_has_files(model_dir))
        return sd_tokenizer_load_dir(model_dir, out, err);
    if (configured_dir && *configured_dir)
        return sd_tokenizer_load_dir(configured_dir, out, err);
    if (env && *env)
        return sd_tokenizer_load_dir(env, out, err);
    return sd_error_set(err, SD_ERR_NOT_FOUND,
                        "no CLIP tokenizer vocabulary: pass --tokenizer-dir DIR or set "
                        SD_TOKENIZER_DIR_ENV "=DIR, where DIR holds vocab.json + merges.txt "
                        "(ComfyUI's comfy/sd1_tokenizer) or bpe_simple_vocab_16e6.txt.gz");
}

/* ---- vocabulary queries ------------------------------------------------------------ */

int32_t sd_tokenizer_vocab_size(const sd_tokenizer *tok) { return tok->n_vocab; }
int32_t sd_tokenizer_bos(const sd_tokenizer *tok) { return tok->bos; }
int32_t sd_tokenizer_eos(const sd_tokenizer *tok) { return tok->eos; }

const char *sd_tokenizer_token_str(const sd_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->n_vocab ? tok->strs[id] : NULL;
}

int32_t sd_tokenizer_token_id(const sd_tokenizer *tok, const char *token)
{
    return vocab_get(tok, token, strlen(token));
}

/* ---- clean-up (transformers BasicTokenizer, no ftfy) ------------------------------- */

/* The ranges BasicTokenizer._tokenize_chinese_chars pads with spaces. */
static int is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Cleaned code points (*out, *n), tokens joined by single spaces. */
static int clean_cps(const char *text, size_t len, uint32_t **out, size_t *n)
{
    uint32_t *cps = NULL, *a = NULL, *b = NULL, *c = NULL;
    size_t n0, na = 0, nb, nc, k = 0;
    int rc = -1;
    if (sd_uc_decode_utf8(text, len, &cps, &n0) < 0)
        return -1;
    a = malloc((3 * n0 + 1) * sizeof *a);
    if (!a)
        goto done;
    for (size_t i = 0; i < n0; i++) {
        uint32_t cp = cps[i];
        if (cp == '\t' || cp == '\n' || cp == '\r' || cp == ' ' ||
            (cp >= 0x80 && sd_uc_in(sd_uc_zs, sd_uc_zs_count, cp))) {
            a[na++] = ' ';
        } else if (cp < 0x20 || cp == 0x7F ||
                   (cp >= 0x80 && sd_uc_in(sd_uc_clean_drop, sd_uc_clean_drop_count, cp))) {
            continue;
        } else if (is_cjk(cp)) {
            a[na++] = ' ';
            a[na++] = cp;
            a[na++] = ' ';
        } else {
            a[na++] = cp;
        }
    }
    if (sd_uc_nfc(a, na, &b, &nb) < 0)
        goto done;
    /* Lower-casing the whole string equals lower-casing each whitespace
     * token: whitespace is neither cased nor case-ignorable, so it bounds
     * the final-sigma context exactly like a token edge does. */
    if (sd_uc_lower_str(b, nb, &c, &nc) < 0)
        goto done;
    /* whitespace_tokenize + " ".join */
    for (size_t i = 0; i < nc; i++) {
        if (sd_uc_is_py_space(c[i])) {
            if (k && c[k - 1] != ' ')
                c[k++] = ' ';
        } else {
            c[k++] = c[i];
        }
    }
    if (k && c[k - 1] == ' ')
        k--;
    *out = c;
    *n = k;
    c = NULL;
    rc = 0;
done:
    free(cps);
    free(a);
    free(b);
    free(c);
    return rc;
}

char *sd_tokenizer_clean_text(const char *text, size_t len)
{
    uint32_t *cps;
    size_t n;
    if (clean_cps(text, len, &cps, &n) < 0)
        return NULL;
    char *s = malloc(4 * n + 1);
    size_t k = 0;
    if (s) {
        for (size_t i = 0; i < n; i++)
            k += sd_uc_encode_utf8(cps[i], s + k);
        s[k] = '\0';
    }
    free(cps);
    return s;
}

/* ---- pre-tokenizer ------------------------------------------------------------------ */

/* The pattern is compiled with IGNORECASE; after str.lower() the only
 * character left that simple case folding maps onto an ASCII letter of the
 * pattern is U+017F LONG S (folds to 's'). */
static uint32_t fold(uint32_t cp) { return cp == 0x017F ? 's' : cp; }

static size_t match_literal(const uint32_t *c, size_t n, size_t i, const char *lit)
{
    size_t k = 0;
    for (; lit[k]; k++)
        if (i + k >= n || fold(c[i + k]) != (uint32_t)(unsigned char)lit[k])
            return 0;
    return k;
}

/* Length of the regex match starting at c[i] (c[i] is not whitespace). */
static size_t piece_len(const uint32_t *c, size_t n, size_t i)
{
    static const char *const lits[] = {"<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re",
                                       "'ve", "'m", "'ll", "'d"};
    size_t k;
    for (size_t l = 0; l < sizeof lits / sizeof *lits; l++)
        if ((k = match_literal(c, n, i, lits[l])))
            return k;
    if (sd_uc_is_letter(c[i])) {
        for (k = i + 1; k < n && sd_uc_is_letter(c[k]); k++)
            ;
        return k - i;
    }
    if (sd_uc_is_number(c[i]))
        return 1;
    for (k = i + 1; k < n && !sd_uc_is_regex_space(c[k]) && !sd_uc_is_letter(c[k]) &&
                    !sd_uc_is_number(c[k]);
         k++)
        ;
    return k - i;
}

/* ---- BPE ---------------------------------------------------------------------------- */

typedef struct idbuf { int32_t *v; size_t n, cap; } idbuf;

static int idbuf_push(idbuf *b, int32_t x)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v)
            return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = x;
    return 0;
}

/* BPE of one piece's bytes into w (an array the caller sized to len).
 *
 * transformers' CLIPTokenizer.bpe, merge for merge: take the adjacent pair
 * of lowest rank, merge all its occurrences left to right (an occurrence
 * overlapping a merged one is skipped), repeat. Done literally that costs a
 * pass over the word per rank applied: quadratic, and a 1 MB word took 20 s
 * (issue 23). Here the pairs wait in a heap ordered by (rank, position):
 * popping a rank's entries in position order is the left-to-right pass;
 * entries made stale by a merge are recognised by looking the pair up
 * again; the pairs a merge creates wait until the rank's round is over, as
 * in the literal loop, where they only count from the next pass on. So the
 * result is the same for any merge table, in O(n log n).
 *
 * Returns the symbol count, -1 when out of memory, -2 when *stop became
 * non-zero (polled every few thousand merges). */
typedef struct bpe_entry { int32_t rank, pos; } bpe_entry;

static int entry_less(bpe_entry a, bpe_entry b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(bpe_entry *h, size_t *n, bpe_entry e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!entry_less(e, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static bpe_entry heap_pop(bpe_entry *h, size_t *n)
{
    bpe_entry top = h[0], e = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && entry_less(h[c + 1], h[c]))
            c++;
        if (!entry_less(h[c], e))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = e;
    return top;
}

static long bpe_piece(const sd_tokenizer *t, const unsigned char *s, size_t len, int32_t *w,
                      const volatile sig_atomic_t *stop, size_t *work)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        w[i] = i + 1 < len ? t->byte_id[s[i]] : t->byte_end_id[s[i]];
    if (len == 1)
        return 1;
    /* symbols as a list over w (merged-away ones get id -1) */
    int32_t *nx = malloc(len * sizeof *nx);
    /* at most len - 1 initial pairs, and 2 more per merge (len - 1 merges) */
    bpe_entry *heap = malloc(3 * len * sizeof *heap), *pend = malloc(2 * len * sizeof *pend);
    int32_t *pv = malloc(len * sizeof *pv);
    long rc = -1;
    if (!nx || !heap || !pend || !pv)
        goto done;
    size_t nh = 0, np = 0;
    for (size_t i = 0; i < len; i++) {
        nx[i] = i + 1 < len ? (int32_t)(i + 1) : -1;
        pv[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < len; i++) {
        const merge_slot *ms = merge_get(&t->merges, w[i], w[i + 1]);
        if (ms)
            heap_push(heap, &nh, (bpe_entry){ms->rank, (int32_t)i});
    }
    if (work)
        *work += nh;
    int32_t round = -1;
    unsigned long polls = 0;
    for (;;) {
        if (nh == 0 || heap[0].rank != round) {
            /* the round of `round` is over: its new pairs join */
            for (size_t k = 0; k < np; k++)
                heap_push(heap, &nh, pend[k]);
            if (work)
                *work += np;
            np = 0;
            if (nh == 0)
                break;
            round = heap[0].rank;
        }
        if (stop && (++polls & 4095) == 0 && *stop) {
            rc = -2;
            goto done;
        }
        bpe_entry e = heap_pop(heap, &nh);
        if (work)
            ++*work;
        int32_t p = e.pos, q = nx[p];
        if (w[p] < 0 || q < 0)
            continue;
        const merge_slot *ms = merge_get(&t->merges, w[p], w[q]);
        if (!ms || ms->rank != e.rank)
            continue; /* stale: a merge changed one of its symbols */
        w[p] = ms->merged;
        w[q] = -1;
        nx[p] = nx[q];
        if (nx[q] >= 0)
            pv[nx[q]] = p;
        if (pv[p] >= 0 && (ms = merge_get(&t->merges, w[pv[p]], w[p])))
            pend[np++] = (bpe_entry){ms->rank, pv[p]};
        if (nx[p] >= 0 && (ms = merge_get(&t->merges, w[p], w[nx[p]])))
            pend[np++] = (bpe_entry){ms->rank, p};
    }
    long n = 0;
    for (int32_t i = 0; i >= 0; i = nx[i])
        w[n++] = w[i];
    rc = n;
done:
    free(nx);
    free(heap);
    free(pend);
    free(pv);
    return rc;
}

/* Looks the piece up in the cache; on a miss runs BPE and stores it (only
 * pieces of up to CACHE_MAX_PIECE bytes: words are short, and the cache's
 * memory stays bounded whatever a prompt holds). -1 out of memory, -2
 * stopped. */
#define CACHE_MAX_PIECE 256
static int encode_piece(sd_tokenizer *t, const char *s, size_t len, idbuf *out,
                        const volatile sig_atomic_t *stop, size_t *work)
{
    if (len == strlen(BOS_STR) && memcmp(s, BOS_STR, len) == 0)
        return idbuf_push(out, t->bos);
    if (len == strlen(EOS_STR) && memcmp(s, EOS_STR, len) == 0)
        return idbuf_push(out, t->eos);
    uint64_t h = hash_bytes(s, len);
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    for (cache_entry *e = t->cache[h & (t->cache_cap - 1)]; e; e = e->next)
        if (e->klen == len && memcmp(e->key, s, len) == 0) {
            for (size_t i = 0; i < e->n && !rc; i++)
                rc = idbuf_push(out, e->ids[i]);
            pthread_mutex_unlock(&t->lock);
            return rc;
        }
    pthread_mutex_unlock(&t->lock);

    int32_t *w = malloc((len ? len : 1) * sizeof *w);
    if (!w)
        return -1;
    long got = bpe_piece(t, (const unsigned char *)s, len, w, stop, work);
    if (got < 0) {
        free(w);
        return (int)got;
    }
    size_t n = (size_t)got;
    for (size_t i = 0; i < n && !rc; i++)
        rc = idbuf_push(out, w[i]);
    if (len > CACHE_MAX_PIECE) {
        free(w);
        return rc;
    }

    cache_entry *e = malloc(sizeof *e);
    char *key = malloc(len + 1);
    if (rc || !e || !key) {
        free(e);
        free(key);
        free(w);
        return rc; /* a failed cache insert is not an error */
    }
    memcpy(key, s, len);
    e->key = key;
    e->klen = len;
    e->ids = w;
    e->n = n;
    pthread_mutex_lock(&t->lock);
    if (t->cache_n >= CACHE_MAX_ENTRIES)
        cache_clear(t); /* bound memory for long-running processes */
    size_t slot = h & (t->cache_cap - 1);
    e->next = t->cache[slot];
    t->cache[slot] = e;
    t->cache_n++;
    pthread_mutex_unlock(&t->lock);
    return 0;
}

sd_status sd_tokenizer_encode(const sd_tokenizer *tok, const char *text, size_t len,
                              int32_t **ids, size_t *n, sd_error *err)
{
    return sd_tokenizer_encode_ex(tok, text, len, NULL, ids, n, err);
}

sd_status sd_tokenizer_encode_ex(const sd_tokenizer *tok, const char *text, size_t len,
                                 const volatile sig_atomic_t *stop, int32_t **ids, size_t *n,
                                 sd_error *err)
{
    return sd_tokenizer_encode_work(tok, text, len, stop, NULL, ids, n, err);
}

sd_status sd_tokenizer_encode_work(const sd_tokenizer *tok, const char *text, size_t len,
                                   const volatile sig_atomic_t *stop, size_t *work, int32_t **ids,
                                   size_t *n, sd_error *err)
{
    /* The cache is the only mutable state and is mutex-guarded. */
    sd_tokenizer *t = (sd_tokenizer *)tok;
    uint32_t *c = NULL;
    size_t nc;
    idbuf out = {0};
    char *piece = NULL;
    *ids = NULL;
    *n = 0;
    if (clean_cps(text, len, &c, &nc) < 0)
        return sd_error_set(err, SD_ERR_NOMEM, "tokenizer: out of memory");
    piece = malloc(4 * nc + 1);
    if (!piece)
        goto nomem;
    for (size_t i = 0; i < nc;) {
        if (sd_uc_is_regex_space(c[i])) {
            i++;
            continue;
        }
        size_t pl = piece_len(c, nc, i), bl = 0;
        for (size_t k = 0; k < pl; k++)
            bl += sd_uc_encode_utf8(c[i + k], piece + bl);
        int rc = encode_piece(t, piece, bl, &out, stop, work);
        if (rc == -2 || (stop && *stop))
            goto stopped;
        if (rc < 0)
            goto nomem;
        i += pl;
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v)))
        goto nomem;
    free(c);
    free(piece);
    *ids = out.v;
    *n = out.n;
    return SD_OK;
nomem:
    free(c);
    free(piece);
    free(out.v);
    return sd_error_set(err, SD_ERR_NOMEM, "tokenizer: out of memory");
stopped:
    free(c);
    free(piece);
    free(out.v);
    return sd_error_set(err, SD_ERR_CANCELLED, "interrupted");
}
