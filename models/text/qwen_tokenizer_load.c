/* qwen_tokenizer_load.c - reading vocab.json, merges.txt and
 * tokenizer_config.json into the Qwen2 tokenizer, refusing what the encoder
 * does not reproduce; finding the folder. */
#include "models/text/qwen_tokenizer_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_util.h"
#include "core/text.h"
#include "models/text/tokenizer.h"
#include "models/text/unicode.h"

/* Qwen's vocab.json is 2.8 MB, merges.txt 1.7 MB: anything near this is
 * not a tokenizer file. */
#define MAX_FILE_BYTES (256u << 20)
/* Ids are int32 and index id_off: a larger one is not a real vocabulary. */
#define MAX_ID (1 << 24)

uint32_t qwen_byte_char(uint8_t b) {
    /* printable Latin-1 stands for itself; the other 68 bytes take 256 + n
     * in byte order (GPT-2's bytes_to_unicode) */
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
    return 256 + n;
}

void sd_qwen_tokenizer_free(sd_qwen_tokenizer *t) {
    if (!t) return;
    free(t->source);
    free(t->arena);
    free(t->id_off);
    sd_hashmap_free(t->vocab);
    free(t->merge_pair);
    free(t->merge_result);
    sd_hashmap_free(t->merges);
    free(t->added);
    free(t);
}

const char *sd_qwen_tokenizer_source(const sd_qwen_tokenizer *t) { return t->source; }

const char *sd_qwen_tokenizer_token(const sd_qwen_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_ids || !t->id_off[id]) return NULL;
    return t->arena + t->id_off[id] - 1;
}

int32_t sd_qwen_tokenizer_token_id(const sd_qwen_tokenizer *t, const char *token) {
    for (size_t i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].s, token) == 0) return t->added[i].id;
    size_t v;
    return sd_hashmap_get(t->vocab, token, strlen(token), &v) ? (int32_t)v : -1;
}

int qwen_merge_find(const sd_qwen_tokenizer *t, int32_t a, int32_t b, size_t *rank, int32_t *result) {
    int32_t key[2] = {a, b};
    size_t r;
    if (!sd_hashmap_get(t->merges, key, sizeof key, &r)) return 0;
    *rank = r;
    *result = t->merge_result[r];
    return 1;
}

/* ---- building ------------------------------------------------------------------ */

typedef struct builder {
    sd_qwen_tokenizer *t;
    const char *source;
    sd_error *err;
    size_t arena_len, arena_cap;
} builder;

static sd_status nomem(builder *b) {
    return sd_error_set(b->err, SD_ERR_NOMEM, "%s: out of memory reading the Qwen tokenizer", b->source);
}

/* Copies s[0..n) into the arena; *off = its offset. The arena is sized
 * before any key is stored (keys are borrowed by the hash maps). */
static int arena_add(builder *b, const char *s, size_t n, size_t *off) {
    if (b->arena_len + n + 1 > b->arena_cap) return -1;
    memcpy(b->t->arena + b->arena_len, s, n);
    b->t->arena[b->arena_len + n] = 0;
    *off = b->arena_len;
    b->arena_len += n + 1;
    return 0;
}

/* Records id -> string (the first string given an id keeps it). */
static void name_id(builder *b, int32_t id, size_t off) {
    if (!b->t->id_off[id]) b->t->id_off[id] = off + 1;
}

/* An integer id in [0, MAX_ID) from a JSON number, or -1. */
static int32_t json_id(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < MAX_ID) || d != floor(d)) return -1;
    return (int32_t)d;
}

static sd_status parse(builder *b, const char *text, size_t len, const char *what, cJSON **out) {
    char *z = malloc(len + 1);
    if (!z) return nomem(b);
    memcpy(z, text, len);
    z[len] = 0;
    char src[1200];
    snprintf(src, sizeof src, "%s/%s", b->source, what);
    sd_status rc = SD_OK;
    if (memchr(text, 0, len))
        rc = sd_error_set(b->err, SD_ERR_FORMAT, "%s: not JSON (a NUL byte)", src);
    else
        rc = sd_json_parse(z, src, out, b->err);
    free(z);
    return rc;
}

/* vocab.json: an object of token strings to ids. */
static sd_status read_vocab(builder *b, const cJSON *root) {
    sd_qwen_tokenizer *t = b->t;
    if (!cJSON_IsObject(root))
        return sd_error_set(b->err, SD_ERR_FORMAT, "%s/" SD_QWEN_VOCAB_FILE ": not a JSON object of "
                            "tokens to ids", b->source);
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        int32_t id = json_id(e);
        if (id < 0 || !e->string)
            return sd_error_set(b->err, SD_ERR_FORMAT,
                                "%s/" SD_QWEN_VOCAB_FILE ": token '%.60s' has no id in [0, %d)",
                                b->source, e->string ? e->string : "", MAX_ID);
        size_t n = strlen(e->string), off, prev;
        if (sd_hashmap_get(t->vocab, e->string, n, &prev))
            return sd_error_set(b->err, SD_ERR_FORMAT, "%s/" SD_QWEN_VOCAB_FILE ": token '%.60s' "
                                "appears twice", b->source, e->string);
        if (arena_add(b, e->string, n, &off) < 0 ||
            sd_hashmap_put(t->vocab, t->arena + off, n, (size_t)id) < 0)
            return nomem(b);
        name_id(b, id, off);
    }
    /* each byte's byte-level character (a missing one is dropped as the
     * library drops a character without a token) */
    for (int c = 0; c < 256; c++) {
        char u[4];
        size_t k = sd_uc_encode_utf8(qwen_byte_char((uint8_t)c), u), v;
        t->byte_id[c] = sd_hashmap_get(t->vocab, u, k, &v) ? (int32_t)v : -1;
    }
    return SD_OK;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* merges.txt: "#version..." first, then one "left right" pair per line, by
 * rank (transformers reads it so: lines stripped, empty ones skipped, a pair
 * seen again keeps its first rank). */
static sd_status read_merges(builder *b, const char *s, size_t len) {
    sd_qwen_tokenizer *t = b->t;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += s[i] == '\n';
    t->merge_pair = malloc(2 * lines * sizeof *t->merge_pair);
    t->merge_result = malloc(lines * sizeof *t->merge_result);
    if (!t->merge_pair || !t->merge_result) return nomem(b);
    char *cat = malloc(len + 1);
    if (!cat) return nomem(b);
    sd_status rc = SD_OK;
    size_t line = 0;
    for (size_t p = 0; p <= len && rc == SD_OK; line++) {
        size_t e = p;
        while (e < len && s[e] != '\n') e++;
        size_t a = p, z = e;
        p = e + 1;
        while (a < z && is_ws(s[a])) a++;
        while (z > a && is_ws(s[z - 1])) z--;
        if (a == z || (line == 0 && z - a >= 9 && memcmp(s + a, "#version:", 9) == 0)) continue;
        if (memchr(s + a, 0, z - a)) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT, "%s/" SD_QWEN_MERGES_FILE ":%zu: a NUL byte",
                              b->source, line + 1);
            break;
        }
        /* two fields separated by whitespace */
        size_t m1 = a;
        while (m1 < z && !is_ws(s[m1])) m1++;
        size_t b2 = m1;
        while (b2 < z && is_ws(s[b2])) b2++;
        size_t m2 = b2;
        while (m2 < z && !is_ws(s[m2])) m2++;
        if (m1 == a || b2 == z || m2 != z) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT,
                              "%s/" SD_QWEN_MERGES_FILE ":%zu: not a pair of tokens ('%.*s')",
                              b->source, line + 1, (int)(z - a > 60 ? 60 : z - a), s + a);
            break;
        }
        size_t id1, id2, id3, l1 = m1 - a, l2 = m2 - b2;
        memcpy(cat, s + a, l1);
        memcpy(cat + l1, s + b2, l2);
        int k1 = sd_hashmap_get(t->vocab, s + a, l1, &id1), k2 = sd_hashmap_get(t->vocab, s + b2, l2, &id2);
        int k3 = sd_hashmap_get(t->vocab, cat, l1 + l2, &id3);
        if (!k1 || !k2 || !k3) {
            rc = sd_error_set(b->err, SD_ERR_FORMAT,
                              "%s/" SD_QWEN_MERGES_FILE ":%zu: the merge '%.*s %.*s' %s not in "
                              SD_QWEN_VOCAB_FILE,
                              b->source, line + 1, (int)(l1 > 40 ? 40 : l1), s + a,
                              (int)(l2 > 40 ? 40 : l2), s + b2,
                              !k1 || !k2 ? "names a token" : "makes a token");
            break;
        }
        size_t r = t->n_merges;
        t->merge_pair[2 * r] = (int32_t)id1;
        t->merge_pair[2 * r + 1] = (int32_t)id2;
        size_t seen;
        if (sd_hashmap_get(t->merges, &t->merge_pair[2 * r], 2 * sizeof(int32_t), &seen)) continue;
        t->merge_result[r] = (int32_t)id3;
        if (sd_hashmap_put(t->merges, &t->merge_pair[2 * r], 2 * sizeof(int32_t), r) < 0) {
            rc = nomem(b);
            break;
        }
        t->n_merges++;
    }
    free(cat);
    return rc;
}

static int cmp_added(const void *x, const void *y) {
    const qwen_added *a = x, *b = y;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->s, b->s, n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

/* A flag of an added token: 1, 0, or -1 when present and not a boolean. */
static int flag(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return dflt;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

/* tokenizer_config.json: added_tokens_decoder {"id": {"content", flags}}. */
static sd_status read_config(builder *b, const cJSON *root) {
    sd_qwen_tokenizer *t = b->t;
    const char *f = SD_QWEN_CONFIG_FILE;
    if (!cJSON_IsObject(root))
        return sd_error_set(b->err, SD_ERR_FORMAT, "%s/%s: not a JSON object", b->source, f);
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(root, "split_special_tokens");
    if (split && !cJSON_IsFalse(split))
        return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s/%s: split_special_tokens other than "
                            "false is not supported", b->source, f);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder"), *e;
    if (!dec) return SD_OK;
    if (!cJSON_IsObject(dec))
        return sd_error_set(b->err, SD_ERR_FORMAT, "%s/%s: added_tokens_decoder is not an object",
                            b->source, f);
    t->added = calloc((size_t)cJSON_GetArraySize(dec) + 1, sizeof *t->added);
    if (!t->added) return nomem(b);
    cJSON_ArrayForEach(e, dec) {
        char *end = NULL;
        long id = e->string ? strtol(e->string, &end, 10) : -1;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        const char *s = cJSON_GetStringValue(content);
        if (!end || *end || end == e->string || id < 0 || id >= MAX_ID || !s || !*s)
            return sd_error_set(b->err, SD_ERR_FORMAT, "%s/%s: added token '%.40s' needs an id in "
                                "[0, %d) and a non-empty content", b->source, f,
                                e->string ? e->string : "", MAX_ID);
        size_t n = strlen(s);
        if (sd_text_check(s, n, NULL) != SD_TEXT_OK)
            return sd_error_set(b->err, SD_ERR_FORMAT, "%s/%s: added token %ld is not UTF-8",
                                b->source, f, id);
        if (n > QWEN_MAX_ADDED_BYTES)
            return sd_error_set(b->err, SD_ERR_UNSUPPORTED, "%s/%s: added token %ld is %zu bytes long "
                                "(at most %d supported)", b->source, f, id, n, QWEN_MAX_ADDED_BYTES);
        int special = flag(e, "special", 0);
        int lstrip = flag(e, "lstrip", 0), rstrip = flag(e, "rstrip", 0), sw = flag(e, "single_word", 0);
        int norm = flag(e, "normalized", special == 1 ? 0 : 1);
        if (special < 0 || lstrip < 0 || rstrip < 0 || sw < 0 || norm < 0)
            return sd_error_set(b->err, SD_ERR_FORMAT, "%s/%s: added token %ld has a flag that is "
                                "not a boolean", b->source, f, id);
        if (lstrip || rstrip || sw || norm)
            return sd_error_set(b->err, SD_ERR_UNSUPPORTED,
                                "%s/%s: added token %ld ('%.40s') asks for %s matching, which is not "
                                "supported", b->source, f, id, s,
                                lstrip ? "lstrip" : rstrip ? "rstrip" : sw ? "single_word" : "normalized");
        size_t off;
        if (arena_add(b, s, n, &off) < 0) return nomem(b);
        t->added[t->n_added++] = (qwen_added){t->arena + off, n, (int32_t)id};
        name_id(b, (int32_t)id, off);
    }
    qsort(t->added, t->n_added, sizeof *t->added, cmp_added);
    for (size_t i = 1; i < t->n_added; i++)
        if (cmp_added(&t->added[i - 1], &t->added[i]) == 0)
            return sd_error_set(b->err, SD_ERR_FORMAT, "%s/%s: added token '%.40s' appears twice",
                                b->source, f, t->added[i].s);
    return SD_OK;
}

/* The largest id the files name (vocab values, added-token keys). */
static int32_t max_id(const cJSON *vocab, const cJSON *config) {
    int32_t m = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = json_id(e);
        if (id > m) m = id;
    }
    const cJSON *dec = cJSON_IsObject(config) ? cJSON_GetObjectItemCaseSensitive(config, "added_tokens_decoder") : NULL;
    if (!cJSON_IsObject(dec)) return m;
    cJSON_ArrayForEach(e, dec) {
        char *end = NULL;
        long id = e->string ? strtol(e->string, &end, 10) : -1;
        if (end && !*end && id >= 0 && id < MAX_ID && id > m) m = (int32_t)id;
    }
    return m;
}

/* Bytes every key of the arena may need: the files' sizes bound them. */
sd_status sd_qwen_tokenizer_load_mem(const char *vocab, size_t vocab_len, const char *merges,
                                     size_t merges_len, const char *config, size_t config_len,
                                     const char *source, sd_qwen_tokenizer **out, sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    if (!source) source = "(memory)";
    sd_qwen_tokenizer *t = calloc(1, sizeof *t);
    builder b = {.t = t, .source = source, .err = err};
    if (!t) return nomem(&b);
    cJSON *vj = NULL, *cj = NULL;
    sd_status rc = SD_OK;
    t->source = strdup(source);
    t->vocab = sd_hashmap_new();
    t->merges = sd_hashmap_new();
    if (!t->source || !t->vocab || !t->merges) rc = nomem(&b);
    if (!rc) rc = parse(&b, vocab, vocab_len, SD_QWEN_VOCAB_FILE, &vj);
    if (!rc && config) rc = parse(&b, config, config_len, SD_QWEN_CONFIG_FILE, &cj);
    if (!rc) {
        /* JSON strings never grow when decoded: the files bound the arena */
        b.arena_cap = vocab_len + config_len + 16;
        int32_t m = max_id(vj, cj);
        t->n_ids = m + 1;
        t->arena = malloc(b.arena_cap);
        t->id_off = calloc((size_t)t->n_ids + 1, sizeof *t->id_off);
        if (!t->arena || !t->id_off) rc = nomem(&b);
    }
    if (!rc) rc = read_vocab(&b, vj);
    if (!rc && cj) rc = read_config(&b, cj);
    if (!rc) rc = read_merges(&b, merges, merges_len);
    cJSON_Delete(vj);
    cJSON_Delete(cj);
    if (rc) {
        sd_qwen_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return SD_OK;
}

/* ---- files --------------------------------------------------------------------------- */

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static sd_status slurp(const char *path, char **buf, size_t *n, sd_error *err) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sd_error_set(err, errno == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO,
                            "%s: cannot open the Qwen tokenizer file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: not a tokenizer file (not a regular file of at "
                                                "most %u MiB)", path, MAX_FILE_BYTES >> 20);
    }
    *n = (size_t)st.st_size;
    *buf = malloc(*n + 1);
    if (!*buf) {
        fclose(f);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(*buf, 1, *n, f);
    int bad = ferror(f) || got != *n;
    fclose(f);
    if (bad) {
        free(*buf);
        *buf = NULL;
        return sd_error_set(err, SD_ERR_IO, "%s: read error", path);
    }
    return SD_OK;
}

static const char *const files[3] = {SD_QWEN_VOCAB_FILE, SD_QWEN_MERGES_FILE, SD_QWEN_CONFIG_FILE};

/* The first of the three files dir lacks, or NULL. */
static const char *missing_file(const char *dir) {
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (!is_file(p)) return files[i];
    }
    return NULL;
}

int sd_qwen_tokenizer_dir_has_files(const char *dir) { return dir && !missing_file(dir); }

sd_status sd_qwen_tokenizer_load_dir(const char *dir, sd_qwen_tokenizer **out, sd_error *err) {
    *out = NULL;
    char *buf[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    sd_status rc = SD_OK;
    const char *miss = missing_file(dir);
    if (miss)
        return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: no %s (a Qwen tokenizer folder holds %s, %s "
                            "and %s)", dir, miss, files[0], files[1], files[2]);
    for (int i = 0; i < 3 && !rc; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        rc = slurp(p, &buf[i], &n[i], err);
    }
    if (!rc) rc = sd_qwen_tokenizer_load_mem(buf[0], n[0], buf[1], n[1], buf[2], n[2], dir, out, err);
    for (int i = 0; i < 3; i++) free(buf[i]);
    return rc;
}

sd_status sd_qwen_tokenizer_resolve(const char *model_dir, const char *configured_dir,
                                    const char *comfyui_dir, sd_qwen_tokenizer **out,
                                    sd_error *err) {
    *out = NULL;
    const char *env = getenv(SD_TOKENIZER_DIR_ENV);
    const char *dirs[4] = {model_dir, configured_dir, env, comfyui_dir};
    const char *subs[4] = {SD_QWEN_TOKENIZER_SUBDIR, SD_QWEN_TOKENIZER_SUBDIR, SD_QWEN_TOKENIZER_SUBDIR,
                           SD_QWEN_TOKENIZER_COMFY_SUBDIR};
    char tried[1600] = "";
    size_t used = 0;
    for (int i = 0; i < 4; i++) {
        if (!dirs[i] || !*dirs[i]) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dirs[i], subs[i]);
        const char *miss = missing_file(path);
        if (!miss) return sd_qwen_tokenizer_load_dir(path, out, err);
        struct stat st;
        int exists = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        if (used < sizeof tried) {
            int w = exists ? snprintf(tried + used, sizeof tried - used, "%s%s/ (no %s)",
                                      used ? ", " : "", path, miss)
                           : snprintf(tried + used, sizeof tried - used, "%s%s/", used ? ", " : "", path);
            if (w > 0) used += (size_t)w;
        }
    }
    return sd_error_set(err, SD_ERR_NOT_FOUND,
                        "no Qwen tokenizer (" SD_QWEN_VOCAB_FILE ", " SD_QWEN_MERGES_FILE ", "
                        SD_QWEN_CONFIG_FILE ")%s%s; put ComfyUI's "
                        "comfy/text_encoders/" SD_QWEN_TOKENIZER_SUBDIR "/ in DIR/" SD_QWEN_TOKENIZER_SUBDIR
                        "/ and pass --tokenizer-dir DIR (or set " SD_TOKENIZER_DIR_ENV
                        "=DIR), or pass --comfyui-dir with a ComfyUI installation",
                        used ? ": looked in " : "", tried);
}
