/* The T5 tokenizer (models/text/t5_tokenizer.h):
 *   - ids of tests/data/t5_tokenizer/cases.json (hard strings: combining
 *     marks, Hangul, Indic conjuncts, emoji sequences, CR LF, added tokens
 *     inside words, ...), made by Hugging Face tokenizers on the Flux set's
 *     tokenizer.json (make_cases.sh), must match exactly;
 *   - a huge word, a huge prompt and invalid UTF-8 tokenize (linear work);
 *   - tokenizer.json variants: not Unigram, malformed, hostile charsmaps,
 *     settings the reader does not implement: each a clear error naming the
 *     file, never a crash;
 *   - small hand-made Unigram models: Viterbi ties, fused unknowns,
 *     byte_fallback, Metaspace prepend schemes, Replace patterns;
 *   - the resolution order and its error message. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/text/t5_tokenizer.h"

static sd_t5_tokenizer *from_json(const char *json, sd_error *e) {
    sd_t5_tokenizer *t = NULL;
    sd_t5_tokenizer_load_json(json, strlen(json), "test.json", &t, e);
    return t;
}

/* Encodes text and compares with the expected ids (-1 terminated). */
static void expect_ids(const sd_t5_tokenizer *t, const char *text, int special, const int32_t *want,
                       const char *what) {
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error e;
    CHECK_OK(sd_t5_tokenizer_encode(t, text, strlen(text), special, &ids, &n, &e), &e);
    size_t k = 0;
    while (want[k] >= 0) k++;
    int ok = ids && n == k;
    for (size_t i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    CHECK_MSG(ok, "%s: '%s' gave %zu ids", what, text, n);
    if (!ok)
        for (size_t i = 0; i < n; i++) fprintf(stderr, "  id %zu = %d\n", i, ids[i]);
    free(ids);
}

static void check_cases(const sd_t5_tokenizer *t) {
    char path[4200];
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/t5_tokenizer/cases.json", src ? src : "..");
    char *text = sd_test_read_file(path, NULL);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK_MSG(root != NULL, "%s: not JSON", path);
    int n = 0, bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const cJSON *u = cJSON_GetObjectItem(c, "utf8"), *want = cJSON_GetObjectItem(c, "ids");
        size_t len = (size_t)cJSON_GetArraySize(u);
        char *s = malloc(len + 1);
        for (size_t i = 0; i < len; i++) s[i] = (char)cJSON_GetArrayItem(u, (int)i)->valueint;
        s[len] = '\0';
        int32_t *ids = NULL;
        size_t k = 0;
        sd_error e;
        int ok = sd_t5_tokenizer_encode(t, s, len, 1, &ids, &k, &e) == SD_OK &&
                 (int)k == cJSON_GetArraySize(want);
        for (size_t i = 0; ok && i < k; i++) ok = ids[i] == cJSON_GetArrayItem(want, (int)i)->valueint;
        if (!ok && bad++ < 5) fprintf(stderr, "case %d differs\n", n);
        free(ids);
        free(s);
        n++;
    }
    printf("cases.json: %d strings, %d differ\n", n, bad);
    CHECK_MSG(n > 100 && bad == 0, "%d of %d reference strings differ", bad, n);
    cJSON_Delete(root);
}

/* Linear-ish work: a 1 MiB word without spaces, a 1 MiB prompt of short
 * words, invalid UTF-8. Quadratic work would not finish in the test's time. */
static void check_big(const sd_t5_tokenizer *t) {
    size_t n = 1u << 20;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = "abcdefghij"[i % 10];
    s[n] = '\0';
    int32_t *ids = NULL;
    size_t k = 0;
    sd_error e;
    CHECK_OK(sd_t5_tokenizer_encode(t, s, n, 1, &ids, &k, &e), &e);
    CHECK(k > n / 16 && k <= n + 2);
    free(ids);
    for (size_t i = 0; i < n; i++) s[i] = i % 6 == 5 ? ' ' : "horse"[i % 6];
    CHECK_OK(sd_t5_tokenizer_encode(t, s, n, 1, &ids, &k, &e), &e);
    CHECK(k >= n / 6 && k <= n / 6 + 8); /* "▁horse" is one piece */
    free(ids);
    const char bad[] = "\xff\xfe caf\xc3 \xe2\x82";
    CHECK_OK(sd_t5_tokenizer_encode(t, bad, sizeof bad - 1, 1, &ids, &k, &e), &e);
    CHECK(k >= 2 && ids[k - 1] == 1);
    free(ids);
    free(s);
}

/* A minimal Unigram tokenizer.json around the given parts. */
static char *mini(const char *vocab, const char *model_extra, const char *normalizer,
                  const char *pre, const char *post, const char *added) {
    char *s = malloc(8192);
    snprintf(s, 8192,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":%s,"
             "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":null,"
             "\"model\":{\"type\":\"Unigram\",\"vocab\":%s%s}}",
             added, normalizer, pre, post, vocab, model_extra);
    return s;
}

#define META_FIRST "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"add_prefix_space\":true,\"prepend_scheme\":\"first\"}"

static void check_models(void) {
    sd_error e;
    /* ties go to the earlier split; ab beats a+b by score */
    char *j = mini("[[\"<unk>\",0],[\"a\",-1],[\"b\",-1],[\"ab\",-1.5],[\"c\",-1],[\"cd\",-2],[\"d\",-1],"
                   "[\"\\u2581\",-2]]",
                   ",\"unk_id\":0", "null", "null", "null", "[]");
    sd_t5_tokenizer *t = from_json(j, &e);
    CHECK_MSG(t != NULL, "mini model: %s", e.msg);
    if (t) {
        expect_ids(t, "ab", 1, (int32_t[]){3, -1}, "best path");
        expect_ids(t, "cd", 1, (int32_t[]){5, -1}, "tie: the piece starting earlier");
        expect_ids(t, "xyzab\xc3\xa9", 1, (int32_t[]){0, 3, 0, -1}, "fused unknowns");
        expect_ids(t, "a b", 1, (int32_t[]){1, 0, 2, -1}, "no pre-tokenizer: space unknown");
        sd_t5_tokenizer_free(t);
    }
    free(j);
    /* no unk_id: unknown text is an error, not a crash */
    j = mini("[[\"a\",-1]]", ",\"unk_id\":null", "null", "null", "null", "[]");
    t = from_json(j, &e);
    CHECK(t != NULL);
    if (t) {
        int32_t *ids = NULL;
        size_t n;
        CHECK(sd_t5_tokenizer_encode(t, "ax", 2, 1, &ids, &n, &e) == SD_ERR_INVALID);
        CHECK(strstr(e.msg, "test.json") != NULL);
        free(ids);
        sd_t5_tokenizer_free(t);
    }
    free(j);
    /* byte_fallback spells unknown text as <0xXX> pieces */
    j = mini("[[\"<unk>\",0],[\"a\",-1],[\"<0x78>\",-5],[\"<0x79>\",-5],[\"<0xC3>\",-5],[\"<0xA9>\",-5]]",
             ",\"unk_id\":0,\"byte_fallback\":true", "null", "null", "null", "[]");
    t = from_json(j, &e);
    CHECK(t != NULL);
    if (t) {
        expect_ids(t, "xya\xc3\xa9z", 0, (int32_t[]){2, 3, 1, 0, -1}, "byte fallback, all bytes or unk");
        sd_t5_tokenizer_free(t);
    }
    free(j);
    /* Metaspace schemes, Replace patterns, Strip, template, added tokens */
    j = mini("[[\"<unk>\",0],[\"\\u2581\",-2],[\"a\",-1],[\"\\u2581a\",-1],[\"b\",-1],[\"-\",-1]]",
             ",\"unk_id\":0",
             "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Strip\",\"strip_left\":true,"
             "\"strip_right\":true},{\"type\":\"Replace\",\"pattern\":{\"String\":\"bb\"},\"content\":\"-\"},"
             "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\"\\u2581\"}]}",
             META_FIRST,
             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
             "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
             "\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[7],\"tokens\":[\"<s>\"]},"
             "\"</s>\":{\"id\":\"</s>\",\"ids\":[8],\"tokens\":[\"</s>\"]}}}",
             "[{\"id\":9,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
             "\"normalized\":false,\"special\":true},{\"id\":10,\"content\":\"<xy>\",\"single_word\":false,"
             "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}]");
    t = from_json(j, &e);
    CHECK_MSG(t != NULL, "%s", e.msg);
    if (t) {
        expect_ids(t, "  a  a bbb ", 1, (int32_t[]){7, 3, 3, 1, 5, 4, 8, -1}, "pipeline");
        expect_ids(t, "a<xy>a<x>", 0, (int32_t[]){3, 10, 2, 9, -1}, "added tokens, first only");
        expect_ids(t, "", 1, (int32_t[]){7, 8, -1}, "empty");
        sd_t5_tokenizer_free(t);
    }
    free(j);
}

/* Variants that must be refused, each naming the file. */
static void check_refused(const char *real) {
    static const struct { const char *json; sd_status code; const char *says; } bad[] = {
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", SD_ERR_UNSUPPORTED, "not a Unigram"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", SD_ERR_FORMAT, "empty"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\"]]}}", SD_ERR_FORMAT, "vocab entry"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]],\"unk_id\":5}}", SD_ERR_FORMAT, "unk_id"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",1e999]]}}", SD_ERR_FORMAT, "finite"},
        {"[1,2]", SD_ERR_FORMAT, "not a JSON object"},
        {"{\"model\":", SD_ERR_FORMAT, "test.json"},
        {"{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}",
         SD_ERR_UNSUPPORTED, "NFKC"},
        {"{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"a|b\"},\"content\":\"x\"},"
         "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}", SD_ERR_UNSUPPORTED, "a|b"},
        {"{\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"!!!!\"},"
         "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}", SD_ERR_FORMAT, "base64"},
        /* a 4-unit trie (16 bytes) whose root block would need 256 units */
        {"{\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"EAAAAAAAAAAAAAAAAAAAAAAAAAA=\"},"
         "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}", SD_ERR_FORMAT, "trie"},
        /* a declared trie larger than the blob */
        {"{\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"/////w==\"},"
         "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}", SD_ERR_FORMAT, "trie"},
        {"{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}",
         SD_ERR_UNSUPPORTED, "ByteLevel"},
        {"{\"truncation\":{\"max_length\":5},\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}",
         SD_ERR_UNSUPPORTED, "truncation"},
        {"{\"added_tokens\":[{\"id\":3,\"content\":\"x\",\"lstrip\":true,\"normalized\":false}],"
         "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}", SD_ERR_UNSUPPORTED, "lstrip"},
        {"{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"q\"}}],"
         "\"special_tokens\":{}},\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}", SD_ERR_FORMAT,
         "special token"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sd_error e;
        memset(&e, 0, sizeof e);
        sd_t5_tokenizer *t = NULL;
        sd_status rc = sd_t5_tokenizer_load_json(bad[i].json, strlen(bad[i].json), "test.json", &t, &e);
        CHECK_MSG(rc == bad[i].code && !t && strstr(e.msg, "test.json") && strstr(e.msg, bad[i].says),
                  "variant %zu: rc %d, '%s'", i, rc, e.msg);
        sd_t5_tokenizer_free(t);
    }
    /* the real file, cut short anywhere, is an error, never a crash */
    size_t n = 0;
    char *text = sd_test_read_file(real, &n);
    for (size_t cut = 1; text && cut < n; cut += n / 7) {
        sd_error e;
        sd_t5_tokenizer *t = NULL;
        CHECK(sd_t5_tokenizer_load_json(text, cut, "cut.json", &t, &e) != SD_OK && !t &&
              strstr(e.msg, "cut.json"));
    }
    free(text);
    /* a missing file */
    sd_error e;
    sd_t5_tokenizer *t = NULL;
    CHECK(sd_t5_tokenizer_load("/nonexistent/tokenizer.json", &t, &e) == SD_ERR_NOT_FOUND &&
          strstr(e.msg, "/nonexistent/tokenizer.json"));
}

static void check_resolve(const char *real) {
    const char *tmp = sd_test_tmpdir("t5_tokenizer");
    char d[2200], p[2400], link[2400];
    sd_error e;
    sd_t5_tokenizer *t = NULL;
    unsetenv("SDFLOW_TOKENIZER_DIR");
    CHECK(sd_t5_tokenizer_resolve(NULL, tmp, "/no/comfy", &t, &e) == SD_ERR_NOT_FOUND);
    CHECK_MSG(strstr(e.msg, "t5_tokenizer/tokenizer.json") && strstr(e.msg, tmp) &&
                  strstr(e.msg, "/no/comfy/comfy/text_encoders/t5_tokenizer") &&
                  strstr(e.msg, "--tokenizer-dir"),
              "message: %s", e.msg);
    /* --tokenizer-dir DIR/t5_tokenizer/tokenizer.json */
    snprintf(d, sizeof d, "%s/t5_tokenizer", tmp);
    mkdir(d, 0777);
    snprintf(link, sizeof link, "%s/tokenizer.json", d);
    CHECK(symlink(real, link) == 0);
    CHECK_OK(sd_t5_tokenizer_resolve(NULL, tmp, NULL, &t, &e), &e);
    CHECK(t && strcmp(sd_t5_tokenizer_source(t), link) == 0);
    sd_t5_tokenizer_free(t);
    /* a ComfyUI installation */
    snprintf(d, sizeof d, "%s/comfy", tmp);
    mkdir(d, 0777);
    snprintf(d, sizeof d, "%s/comfy/comfy/text_encoders/t5_tokenizer", tmp);
    snprintf(p, sizeof p, "mkdir -p '%s'", d);
    CHECK(system(p) == 0);
    snprintf(link, sizeof link, "%s/tokenizer.json", d);
    CHECK(symlink(real, link) == 0);
    snprintf(d, sizeof d, "%s/comfy", tmp);
    t = NULL;
    CHECK_OK(sd_t5_tokenizer_resolve(NULL, NULL, d, &t, &e), &e);
    CHECK(t && strcmp(sd_t5_tokenizer_source(t), link) == 0);
    sd_t5_tokenizer_free(t);
}

int main(void) {
    char real[2400];
    const char *flux = getenv("SDFLOW_TESTDATA_FLUX"); /* as tests/golden.h's family dirs */
    if (flux && *flux) snprintf(real, sizeof real, "%s/tokenizer/tokenizer.json", flux);
    else snprintf(real, sizeof real, "%s/flux/tokenizer/tokenizer.json", sd_test_testdata_dir());
    check_models();
    struct stat st;
    if (stat(real, &st) != 0) sd_test_skip("no T5 tokenizer.json at %s", real);
    check_refused(real);
    sd_error e;
    sd_t5_tokenizer *t = NULL;
    CHECK_OK(sd_t5_tokenizer_load(real, &t, &e), &e);
    if (t) {
        CHECK(sd_t5_tokenizer_vocab_size(t) == 32100);
        check_cases(t);
        check_big(t);
        sd_t5_tokenizer_free(t);
    }
    check_resolve(real);
    return sd_test_finish();
}
