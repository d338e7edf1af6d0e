/* The Qwen2 byte-level BPE tokenizer (models/text/qwen_tokenizer.h):
 *   - tests/data/qwen_tokenizer/cases.json: ids Hugging Face tokenizers
 *     0.22.2 gives ~760 hard strings (contractions in every case, space runs
 *     with and without newlines, punctuation runs, digits, every script,
 *     combining marks and Hangul jamo for NFC, characters newer than NFC's
 *     Unicode 9.0 or the regex's 16.0, added tokens in and around text)
 *     with the Z-Image set's qwen25_tokenizer files (make_cases.sh); the
 *     files must be the ones the cases were made from (sha256);
 *   - pieces of the pre-tokenizer regex on hand-checked strings;
 *   - hostile texts of 1 MiB (one letter run, one space run, marks with
 *     alternating combining classes, partial added tokens, quotes) finish:
 *     quadratic work would not in the test's time;
 *   - malformed files: each refused with an error naming the file (and the
 *     merges line), never a crash; a folder missing a file names it;
 *   - the resolution order and its error message. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sha256.h"
#include "models/text/qwen_tokenizer.h"
#include "models/text/unicode.h"

static void run_cases(const sd_qwen_tokenizer *t, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/data/qwen_tokenizer/cases.json",
             getenv("SDFLOW_SOURCE_DIR") ? getenv("SDFLOW_SOURCE_DIR") : "..");
    char *text = sd_test_read_file(path, NULL);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK_MSG(root != NULL, "%s: not JSON", path);
    if (!root) return;
    /* the cases belong to the files they were made from */
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "files_sha256"), *f;
    cJSON_ArrayForEach(f, sha) {
        char p[4400], hex[65];
        snprintf(p, sizeof p, "%s/%s", dir, f->string);
        size_t n = 0;
        char *data = sd_test_read_file(p, &n);
        uint8_t d[32];
        if (data) sd_sha256(data, n, d);
        for (int i = 0; data && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
        CHECK_MSG(data && strcmp(hex, cJSON_GetStringValue(f)) == 0,
                  "%s differs from the file the cases were made from", p);
        free(data);
    }
    int n = 0, bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(c, "utf8"), *ids = cJSON_GetObjectItemCaseSensitive(c, "ids");
        size_t len = (size_t)cJSON_GetArraySize(u), k = 0;
        char *s = malloc(len + 1);
        const cJSON *b;
        cJSON_ArrayForEach(b, u) s[k++] = (char)b->valueint;
        int32_t *got = NULL;
        size_t ng = 0;
        sd_error e;
        CHECK_OK(sd_qwen_tokenizer_encode(t, s, len, &got, &ng, &e), &e);
        int ok = got && ng == (size_t)cJSON_GetArraySize(ids);
        size_t i = 0;
        const cJSON *id;
        cJSON_ArrayForEach(id, ids) {
            if (ok && got[i] != id->valueint) ok = 0;
            i++;
        }
        if (!ok && bad++ < 10) {
            fprintf(stderr, "case %d differs: '%.*s' ->", n, (int)len, s);
            for (size_t j = 0; got && j < ng; j++) fprintf(stderr, " %d", got[j]);
            fprintf(stderr, " (want");
            cJSON_ArrayForEach(id, ids) fprintf(stderr, " %d", id->valueint);
            fprintf(stderr, ")\n");
        }
        CHECK(ok);
        free(got);
        free(s);
        n++;
    }
    printf("%d reference strings, %d differ\n", n, bad);
    CHECK(n > 0);
    cJSON_Delete(root);
}

/* ---- the regex ---------------------------------------------------------------------- */

typedef struct pieces { char buf[512]; size_t k; const uint32_t *cps; } pieces;

static int collect(void *ud, size_t a, size_t b) {
    pieces *p = ud;
    if (p->k + 2 < sizeof p->buf) p->buf[p->k++] = '[';
    for (size_t i = a; i < b && p->k + 6 < sizeof p->buf; i++)
        p->k += sd_uc_encode_utf8(p->cps[i], p->buf + p->k);
    if (p->k + 2 < sizeof p->buf) p->buf[p->k++] = ']';
    p->buf[p->k] = 0;
    return 0;
}

static void expect_pieces(const char *text, const char *want) {
    uint32_t *cps;
    size_t n;
    CHECK(sd_uc_decode_utf8(text, strlen(text), &cps, &n) == 0);
    pieces p = {.cps = cps};
    p.buf[0] = 0;
    CHECK(sd_qwen_pretokenize(cps, n, collect, &p) == 0);
    CHECK_MSG(strcmp(p.buf, want) == 0, "'%s' splits as %s, want %s", text, p.buf, want);
    free(cps);
}

static void check_regex(void) {
    /* each line: the alternative that decides it */
    expect_pieces("it's IT'S we'Re", "[it]['s][ IT]['S][ we]['Re]");     /* 1, any case */
    expect_pieces("'sa 'x ,y", "['s][a][ '][x][ ,][y]");                  /* 1 before 2; 4 with a space */
    expect_pieces("hello,world", "[hello][,world]");                     /* 2: one non-letter prefix */
    expect_pieces("a\nb", "[a][\n][b]");                                  /* 2: never a newline prefix */
    expect_pieces("x12", "[x][1][2]");                                    /* 3: one digit each */
    expect_pieces("a !!\n\nb", "[a][ !!\n\n][b]");                        /* 4: space, run, newlines */
    expect_pieces("a  \n\n  b", "[a][  \n\n][ ][ b]");                    /* 5 to the last newline, 6 */
    expect_pieces("a   b", "[a][  ][ b]");                                /* 6: all but the last */
    expect_pieces("a ", "[a][ ]");                                        /* 6 at the end */
    expect_pieces("a\t!", "[a][\t][!]");                                  /* 7: one space before a non-letter */
    expect_pieces("a \t\n", "[a][ \t\n]");                                /* 5 */
}

/* ---- hostile texts -------------------------------------------------------------------- */

static void check_big(const sd_qwen_tokenizer *t) {
    size_t n = 1u << 20;
    char *s = malloc(4 * n + 1);
    static const char *const unit[] = {"a", " ", "e\xcc\x81\xcc\xa3", "<|im_", "'", "\r\n ", "9"};
    static const char *const what[] = {"letters", "spaces", "marks", "partial added tokens", "quotes",
                                       "newlines", "digits"};
    for (size_t u = 0; u < sizeof unit / sizeof unit[0]; u++) {
        size_t k = 0, ul = strlen(unit[u]);
        if (u == 2) { /* one base, then 1 MiB of marks of ccc 230 / 220 alternating */
            s[k++] = 'e';
            while (k + 4 <= n) {
                memcpy(s + k, (k / 2) % 2 ? "\xcc\x81" : "\xcc\xa3", 2);
                k += 2;
            }
        } else {
            while (k + ul <= n) memcpy(s + k, unit[u], ul), k += ul;
        }
        int32_t *ids = NULL;
        size_t m = 0;
        sd_error e;
        CHECK_OK(sd_qwen_tokenizer_encode(t, s, k, &ids, &m, &e), &e);
        CHECK_MSG(ids && m >= 1 && m <= k, "%s: %zu ids for %zu bytes", what[u], m, k);
        free(ids);
    }
    /* a stop request ends the work: between pieces, and inside one long
     * piece every 4096 merges */
    volatile sig_atomic_t stop = 1;
    for (int u = 0; u < 2; u++) {
        size_t k = 0;
        while (k + 2 <= n) memcpy(s + k, u ? "ab" : "a ", 2), k += 2;
        int32_t *ids = NULL;
        size_t m = 0;
        sd_error e;
        sd_status rc = sd_qwen_tokenizer_encode_ex(t, s, k, &stop, &ids, &m, &e);
        CHECK_MSG(rc == SD_ERR_CANCELLED && !ids, "stop (%s): rc %d", u ? "one piece" : "pieces", rc);
    }
    const char bad[] = "\xff\xfe caf\xc3 \xe2\x82 <|im_end|>";
    int32_t *ids = NULL;
    size_t m = 0;
    sd_error e;
    CHECK_OK(sd_qwen_tokenizer_encode(t, bad, sizeof bad - 1, &ids, &m, &e), &e);
    CHECK(m >= 2 && ids[m - 1] == sd_qwen_tokenizer_token_id(t, "<|im_end|>"));
    free(ids);
    free(s);
}

/* ---- malformed files --------------------------------------------------------------------- */

/* A vocabulary with every byte's character, "ab", "abc", and the given
 * extra entries (JSON text after a comma, or ""). */
static char *vocab_json(const char *extra) {
    char *v = malloc(16384);
    size_t k = (size_t)snprintf(v, 16384, "{");
    for (int b = 0; b < 256; b++) {
        uint32_t cp = ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) ? (uint32_t)b : 0;
        if (!cp) {
            uint32_t n = 0;
            for (int c = 0; c < b; c++)
                if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
            cp = 256 + n;
        }
        char u[8] = {0};
        sd_uc_encode_utf8(cp, u);
        if (cp == '"' || cp == '\\') snprintf(u, sizeof u, "\\%c", (char)cp);
        k += (size_t)snprintf(v + k, 16384 - k, "%s\"%s\":%d", b ? "," : "", u, b);
    }
    snprintf(v + k, 16384 - k, ",\"ab\":256,\"abc\":257%s%s}", *extra ? "," : "", extra);
    return v;
}

static const char *good_config =
    "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<|x|>\",\"lstrip\":false,\"normalized\":false,"
    "\"rstrip\":false,\"single_word\":false,\"special\":true}}}";

static void expect_load_error(const char *vocab, const char *merges, const char *config,
                              sd_status want, const char *says, const char *what) {
    sd_qwen_tokenizer *t = NULL;
    sd_error e;
    sd_error_clear(&e);
    sd_status rc = sd_qwen_tokenizer_load_mem(vocab, strlen(vocab), merges, strlen(merges), config,
                                              config ? strlen(config) : 0, "bad_dir", &t, &e);
    CHECK_MSG(rc == want && !t && strstr(e.msg, "bad_dir") && strstr(e.msg, says),
              "%s: rc %d, message '%s'", what, rc, e.msg);
    sd_qwen_tokenizer_free(t);
}

static void check_small(void) {
    char *v = vocab_json("");
    sd_qwen_tokenizer *t = NULL;
    sd_error e;
    const char *merges = "#version: 0.2\na b\nab c\n\n";
    CHECK_OK(sd_qwen_tokenizer_load_mem(v, strlen(v), merges, strlen(merges), good_config,
                                        strlen(good_config), "small", &t, &e), &e);
    if (t) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *text = "abc<|x|>ab";
        CHECK_OK(sd_qwen_tokenizer_encode(t, text, strlen(text), &ids, &n, &e), &e);
        CHECK_MSG(n == 3 && ids[0] == 257 && ids[1] == 300 && ids[2] == 256, "small: %zu ids", n);
        free(ids);
        CHECK(sd_qwen_tokenizer_token_id(t, "<|x|>") == 300);
        CHECK(strcmp(sd_qwen_tokenizer_token(t, 257), "abc") == 0);
        sd_qwen_tokenizer_free(t);
    }
    /* the file readers refuse, naming the file */
    expect_load_error("[1,2]", merges, NULL, SD_ERR_FORMAT, "vocab.json", "vocab not an object");
    expect_load_error("{\"a\":", merges, NULL, SD_ERR_FORMAT, "vocab.json", "vocab not JSON");
    char *v2 = vocab_json("\"x\":-1");
    expect_load_error(v2, merges, NULL, SD_ERR_FORMAT, "has no id", "negative id");
    free(v2);
    v2 = vocab_json("\"x\":1.5");
    expect_load_error(v2, merges, NULL, SD_ERR_FORMAT, "has no id", "fractional id");
    free(v2);
    v2 = vocab_json("\"ab\":9");
    expect_load_error(v2, merges, NULL, SD_ERR_FORMAT, "appears twice", "duplicate token");
    free(v2);
    expect_load_error(v, "#version: 0.2\na b c\n", NULL, SD_ERR_FORMAT, "merges.txt:2", "three fields");
    expect_load_error(v, "#version: 0.2\nab\n", NULL, SD_ERR_FORMAT, "merges.txt:2", "one field");
    expect_load_error(v, "#version: 0.2\nq zz\n", NULL, SD_ERR_FORMAT, "merges.txt:2: the merge", "unknown token");
    expect_load_error(v, "a b\nb c\n", NULL, SD_ERR_FORMAT, "merges.txt:2", "result not in the vocabulary");
    expect_load_error(v, merges, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<|x|>\",\"lstrip\":true,"
                      "\"normalized\":false}}}", SD_ERR_UNSUPPORTED, "lstrip", "lstrip");
    expect_load_error(v, merges, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<|x|>\"}}}",
                      SD_ERR_UNSUPPORTED, "normalized", "normalized by default");
    expect_load_error(v, merges, "{\"added_tokens_decoder\":{\"x\":{\"content\":\"<|x|>\",\"special\":true}}}",
                      SD_ERR_FORMAT, "tokenizer_config.json", "bad id");
    expect_load_error(v, merges, "{\"split_special_tokens\":true}", SD_ERR_UNSUPPORTED,
                      "split_special_tokens", "split_special_tokens");
    char big[600];
    snprintf(big, sizeof big, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"%0300d\",\"special\":true}}}", 0);
    expect_load_error(v, merges, big, SD_ERR_UNSUPPORTED, "bytes long", "long added token");
    expect_load_error(v, merges, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<a>\",\"special\":true},"
                      "\"301\":{\"content\":\"<a>\",\"special\":true}}}", SD_ERR_FORMAT, "twice", "duplicate added");
    free(v);
}

/* ---- folders ------------------------------------------------------------------------------- */

static void put(const char *dir, const char *name, const char *text) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void check_dirs(const char *real) {
    const char *tmp = sd_test_tmpdir("qwen_tokenizer");
    char a[2400], b[2400], c[2400], sub[2600];
    snprintf(a, sizeof a, "%s/model", tmp);
    snprintf(b, sizeof b, "%s/tokdir", tmp);
    snprintf(c, sizeof c, "%s/comfy", tmp);
    mkdir(a, 0777);
    mkdir(b, 0777);
    /* tokdir/qwen25_tokenizer lacks merges.txt */
    snprintf(sub, sizeof sub, "%s/" SD_QWEN_TOKENIZER_SUBDIR, b);
    mkdir(sub, 0777);
    char *v = vocab_json("");
    put(sub, SD_QWEN_VOCAB_FILE, v);
    put(sub, SD_QWEN_CONFIG_FILE, good_config);
    unsetenv("SDFLOW_TOKENIZER_DIR");
    sd_qwen_tokenizer *t = NULL;
    sd_error e;
    sd_status rc = sd_qwen_tokenizer_resolve(a, b, c, &t, &e);
    CHECK_MSG(rc == SD_ERR_NOT_FOUND && !t && strstr(e.msg, a) && strstr(e.msg, sub) &&
                  strstr(e.msg, "(no merges.txt)") && strstr(e.msg, "comfy/text_encoders/qwen25_tokenizer") &&
                  strstr(e.msg, "--tokenizer-dir"),
              "resolve: %s", e.msg);
    rc = sd_qwen_tokenizer_load_dir(sub, &t, &e);
    CHECK_MSG(rc == SD_ERR_NOT_FOUND && strstr(e.msg, "no merges.txt") && strstr(e.msg, sub), "load_dir: %s", e.msg);
    /* a complete but broken folder is its error, not a fall-through */
    put(sub, SD_QWEN_MERGES_FILE, "#version: 0.2\nzz q\n");
    rc = sd_qwen_tokenizer_resolve(a, b, c, &t, &e);
    CHECK_MSG(rc == SD_ERR_FORMAT && strstr(e.msg, "merges.txt:2"), "broken folder: %s", e.msg);
    /* the ComfyUI installation's folder, last */
    char csub[2800], cmd[9000];
    snprintf(csub, sizeof csub, "%s/comfy/text_encoders", c);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -s '%s' '%s/qwen25_tokenizer'", csub, real, csub);
    if (real) {
        CHECK(system(cmd) == 0);
        rc = sd_qwen_tokenizer_resolve(a, NULL, c, &t, &e);
        CHECK_MSG(rc == SD_OK && t, "comfyui dir: %s", e.msg);
        sd_qwen_tokenizer_free(t);
        t = NULL;
    }
    /* beside the model wins */
    snprintf(sub, sizeof sub, "%s/" SD_QWEN_TOKENIZER_SUBDIR, a);
    mkdir(sub, 0777);
    put(sub, SD_QWEN_VOCAB_FILE, v);
    put(sub, SD_QWEN_MERGES_FILE, "#version: 0.2\na b\n");
    put(sub, SD_QWEN_CONFIG_FILE, "{}");
    CHECK_OK(sd_qwen_tokenizer_resolve(a, b, c, &t, &e), &e);
    CHECK(t && strstr(sd_qwen_tokenizer_source(t), a) && sd_qwen_tokenizer_token_id(t, "<|x|>") < 0);
    sd_qwen_tokenizer_free(t);
    free(v);
}

int main(void) {
    check_regex();
    check_small();
    char dir[2400];
    snprintf(dir, sizeof dir, "%s/zimage/tokenizer", sd_test_testdata_dir());
    int have = sd_qwen_tokenizer_dir_has_files(dir);
    check_dirs(have ? dir : NULL);
    if (!have) sd_test_skip("no Qwen tokenizer files in %s", dir);
    sd_qwen_tokenizer *t = NULL;
    sd_error e;
    CHECK_OK(sd_qwen_tokenizer_load_dir(dir, &t, &e), &e);
    if (t) {
        run_cases(t, dir);
        check_big(t);
    }
    sd_qwen_tokenizer_free(t);
    return sd_test_finish();
}
