/* Unit tests: the weight parser and Python float(), text clean-up, chunk
 * layout (8-token rule, long prompts, padding), embeddings (lookup rules,
 * tensor choice, errors) and tokenizer loading/resolution. Expected values
 * follow ComfyUI's tokenize_with_weights as documented in models/text/prompt.h. */
#include "testutil.h"
#include "formats/safetensors.h"
#include "models/text/prompt.h"
#include "models/text/tokenizer.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- weight parser ------------------------------------------------------------ */

typedef struct seg { const char *text; double w; } seg;

static void expect_segs(const char *prompt, const seg *exp, size_t n)
{
    sd_prompt_segment *s = NULL;
    size_t ns = 0;
    sd_error e;
    CHECK_OK(sd_prompt_parse_weights(prompt, &s, &ns, &e), &e);
    int ok = ns == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = strcmp(s[i].text, exp[i].text) == 0 &&
             (s[i].weight == exp[i].w || (isinf(exp[i].w) && s[i].weight == exp[i].w));
    if (!ok) {
        fprintf(stderr, "parse '%s' gave:", prompt);
        for (size_t i = 0; i < ns; i++)
            fprintf(stderr, " ['%s' %.17g]", s[i].text, s[i].weight);
        fputc('\n', stderr);
    }
    CHECK_MSG(ok, "parse_weights('%s')", prompt);
    sd_prompt_segments_free(s, ns);
}

#define SEGS(prompt, ...)                                                          \
    do {                                                                           \
        static const seg _e[] = {__VA_ARGS__};                                     \
        expect_segs(prompt, _e, sizeof _e / sizeof *_e);                           \
    } while (0)

static void test_parse_weights(void)
{
    expect_segs("", NULL, 0);
    expect_segs("()", NULL, 0);
    SEGS("plain text [with brackets]", {"plain text [with brackets]", 1.0});
    SEGS("(a)", {"a", 1.1});
    SEGS("((a))", {"a", 1.1 * 1.1});
    SEGS("(a:1.3)", {"a", 1.3});
    SEGS("(a:1.5:2)", {"a:1.5", 2.0});
    SEGS("((a:1.5))", {"a", 1.5});         /* inner replace wins */
    SEGS("((a):0.5)", {"a", 0.5 * 1.1});   /* inner group multiplies the replaced weight */
    SEGS("(a:b)", {"a:b", 1.1});
    SEGS("(:2)", {":2", 1.1});             /* ':' at position 0 is text */
    SEGS("(a: 1.5e1 )", {"a", 15.0});
    SEGS("(a:1_0)", {"a", 10.0});
    SEGS("(a:_1)", {"a:_1", 1.1});
    SEGS("(a:1__0)", {"a:1__0", 1.1});
    SEGS("(a:0x10)", {"a:0x10", 1.1});
    SEGS("(a:.5)", {"a", 0.5});
    SEGS("(a:5.)", {"a", 5.0});
    SEGS("(a:.)", {"a:.", 1.1});
    SEGS("(a:1e)", {"a:1e", 1.1});
    SEGS("(a:-Infinity)", {"a", -INFINITY});
    SEGS("x (a) y", {"x ", 1.0}, {"a", 1.1}, {" y", 1.0});
    SEGS("(a)(b:2)", {"a", 1.1}, {"b", 2.0});
    /* unbalanced: an unclosed '(' keeps everything literal ... */
    SEGS("x (a (b) c", {"x ", 1.0}, {"(a (b) c", 1.0});
    /* ... and a stray ')' makes the counter negative for the rest */
    SEGS("a) (b)", {"a) (b)", 1.0});
    SEGS("(a)) (b) (c)", {"a", 1.1}, {") (b) (c)", 1.0});
    SEGS("a)(b)) (c)", {"a)(b)) (c)", 1.0}); /* the counter never returns to 0 */
    /* escapes */
    SEGS("\\(a\\)", {"(a)", 1.0});
    SEGS("(a\\))", {"a)", 1.1});
    SEGS("\\((a)", {"(", 1.0}, {"a", 1.1});
    SEGS("(a\\:2)", {"a\\", 2.0}); /* '\:' is no escape */
    SEGS("back\\slash", {"back\\slash", 1.0});
}

static void test_parse_float(void)
{
    static const struct { const char *s; int ok; double v; } cases[] = {
        {"1.3", 1, 1.3}, {" 2 ", 1, 2.0}, {"+.5", 1, 0.5}, {"-1e-2", 1, -0.01},
        {"1_000.000_1", 1, 1000.0001}, {"nan", 1, NAN}, {"INF", 1, INFINITY},
        {"", 0, 0}, {" ", 0, 0}, {"1.3)", 0, 0}, {"1,5", 0, 0}, {"_1", 0, 0},
        {"1_", 0, 0}, {"1e+", 0, 0}, {"0x1p3", 0, 0}, {"1 2", 0, 0}, {"infinit", 0, 0},
        {"\xc2\xa0" "3\xe2\x80\x83", 1, 3.0}, /* NBSP / EM SPACE are Python whitespace */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double v = 0;
        int ok = sd_prompt_parse_float(cases[i].s, strlen(cases[i].s), &v);
        CHECK_MSG(ok == cases[i].ok, "parse_float('%s') -> %d", cases[i].s, ok);
        if (ok && cases[i].ok)
            CHECK_MSG(isnan(cases[i].v) ? isnan(v) : v == cases[i].v, "parse_float('%s') = %g",
                      cases[i].s, v);
    }
}

/* ---- text clean-up ------------------------------------------------------------------ */

static void expect_clean(const char *in, const char *out)
{
    char *c = sd_tokenizer_clean_text(in, strlen(in));
    CHECK_MSG(c && strcmp(c, out) == 0, "clean('%s') = '%s', expected '%s'", in, c ? c : "(null)",
              out);
    free(c);
}

static void test_clean(void)
{
    expect_clean("  Hello\tWORLD \n ", "hello world");
    expect_clean("a\xe2\x80\x8b" "b", "ab");                       /* ZWSP (Cf) dropped */
    expect_clean("x\x07y\x7fz", "xyz");                             /* controls dropped */
    expect_clean("non\xc2\xa0" "break", "non break");               /* Zs -> space */
    expect_clean("\xe4\xb8\xad\xe6\x96\x87" "ab", "\xe4\xb8\xad \xe6\x96\x87 ab"); /* CJK spaced */
    expect_clean("e\xcc\x81", "\xc3\xa9");                          /* NFC composes */
    expect_clean("\xef\xac\x81", "\xef\xac\x81");                   /* ligature kept (NFC) */
    expect_clean("\xc3\x85NGSTR\xc3\x96M", "\xc3\xa5ngstr\xc3\xb6m");
    /* Python's final sigma: ΟΔΥΣΣΕΥΣ -> οδυσσευς */
    expect_clean("\xce\x9f\xce\x94\xce\xa5\xce\xa3\xce\xa3\xce\x95\xce\xa5\xce\xa3",
                 "\xce\xbf\xce\xb4\xcf\x85\xcf\x83\xcf\x83\xce\xb5\xcf\x85\xcf\x82");
    expect_clean("\xc4\xb0", "i\xcc\x87"); /* İ -> i + combining dot */
    expect_clean("\xff\xfe" "ok", "ok");   /* invalid UTF-8 -> U+FFFD -> dropped */
    expect_clean("", "");
}

/* ---- chunking ---------------------------------------------------------------------------- */

/* Positions of a chunk holding prompt tokens (word id != 0). */
static int count_content(const sd_prompt_tokens *t, int chunk)
{
    int n = 0;
    for (int k = 0; k < t->chunk_len; k++)
        n += t->tokens[(size_t)chunk * t->chunk_len + k].word != 0;
    return n;
}

static void check_layout(const sd_prompt_tokens *t, int32_t bos, int32_t eos, int32_t pad)
{
    for (int c = 0; c < t->n_chunks; c++) {
        const sd_prompt_token *x = &t->tokens[(size_t)c * t->chunk_len];
        CHECK(x[0].id == bos && x[0].word == 0 && x[0].weight == 1.0);
        int k = 1;
        while (k < t->chunk_len && x[k].word != 0)
            k++;
        CHECK_MSG(k < t->chunk_len && x[k].id == eos, "chunk %d: no end token after content", c);
        for (k++; k < t->chunk_len; k++)
            CHECK_MSG(x[k].id == pad && x[k].word == 0 && x[k].weight == 1.0,
                      "chunk %d pos %d not padding", c, k);
    }
}

static char *repeat_word(const char *w, int n)
{
    size_t l = strlen(w);
    char *s = malloc((l + 1) * (size_t)n + 1);
    s[0] = '\0';
    for (int i = 0; i < n; i++) {
        strcat(s, w);
        if (i + 1 < n)
            strcat(s, " ");
    }
    return s;
}

static void test_chunks(const sd_tokenizer *tok)
{
    const int32_t bos = sd_tokenizer_bos(tok), eos = sd_tokenizer_eos(tok);
    sd_prompt_opts ol, og;
    sd_prompt_tokens *t = NULL;
    sd_error e;
    sd_prompt_opts_clip_l(&ol);
    sd_prompt_opts_clip_g(&og);

    /* empty prompt: [start, end, pad...] with the encoder's pad */
    CHECK_OK(sd_prompt_tokenize(tok, "", &ol, &t, &e), &e);
    CHECK(t && t->n_chunks == 1 && t->chunk_len == 77);
    if (t) {
        check_layout(t, bos, eos, eos);
        CHECK(!sd_prompt_tokens_has_weights(t));
    }
    sd_prompt_tokens_free(t);
    CHECK_OK(sd_prompt_tokenize(tok, NULL, &og, &t, &e), &e);
    if (t) {
        CHECK(t->tokens[1].id == eos && t->tokens[2].id == 0);
        check_layout(t, bos, eos, 0);
    }
    sd_prompt_tokens_free(t);

    /* 75 one-token words fill one chunk exactly; 76 need a second */
    char *s75 = repeat_word("cat", 75), *s76 = repeat_word("cat", 76);
    CHECK_OK(sd_prompt_tokenize(tok, s75, &ol, &t, &e), &e);
    CHECK(t && t->n_chunks == 1 && count_content(t, 0) == 75);
    sd_prompt_tokens_free(t);
    /* the whole text is one segment (76 tokens >= 8), so it is split 75 + 1 */
    CHECK_OK(sd_prompt_tokenize(tok, s76, &ol, &t, &e), &e);
    CHECK(t && t->n_chunks == 2);
    if (t && t->n_chunks == 2) {
        check_layout(t, bos, eos, eos);
        CHECK(count_content(t, 0) == 75 && count_content(t, 1) == 1);
    }
    sd_prompt_tokens_free(t);

    /* the 8-token rule: after 70 tokens a 7-token segment moves whole to the
     * next chunk, an 8-token one is split 5 + 3 */
    char *s70 = repeat_word("cat", 70), *g7 = repeat_word("dog", 7), *g8 = repeat_word("dog", 8);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s(%s:1.2)", s70, g7);
    CHECK_OK(sd_prompt_tokenize(tok, buf, &ol, &t, &e), &e);
    CHECK(t && t->n_chunks == 2);
    if (t && t->n_chunks == 2) {
        check_layout(t, bos, eos, eos);
        CHECK(count_content(t, 0) == 70 && count_content(t, 1) == 7);
        CHECK(t->tokens[77 + 1].weight == 1.2 && t->tokens[77 + 1].word == 2);
        CHECK(t->tokens[1].word == 1 && sd_prompt_tokens_has_weights(t));
    }
    sd_prompt_tokens_free(t);
    snprintf(buf, sizeof buf, "%s(%s:1.2)", s70, g8);
    CHECK_OK(sd_prompt_tokenize(tok, buf, &og, &t, &e), &e);
    CHECK(t && t->n_chunks == 2);
    if (t && t->n_chunks == 2) {
        check_layout(t, bos, eos, 0);
        CHECK(count_content(t, 0) == 75 && count_content(t, 1) == 3);
        CHECK(t->tokens[71].weight == 1.2 && t->tokens[76].id == eos);
    }
    sd_prompt_tokens_free(t);

    /* very long prompt: every token survives, in order, chunk after chunk */
    char *big = repeat_word("(masterpiece:1.1), a photo of a cat", 120);
    CHECK_OK(sd_prompt_tokenize(tok, big, &ol, &t, &e), &e);
    if (t) {
        check_layout(t, bos, eos, eos);
        int32_t *raw;
        size_t nraw;
        char *plain = repeat_word("masterpiece , a photo of a cat", 120);
        CHECK_OK(sd_tokenizer_encode(tok, plain, strlen(plain), &raw, &nraw, &e), &e);
        size_t k = 0;
        int same = 1;
        for (size_t i = 0; i < (size_t)t->n_chunks * 77; i++)
            if (t->tokens[i].word)
                same = same && k < nraw && raw[k++] == t->tokens[i].id;
        CHECK_MSG(same && k == nraw, "long prompt lost or reordered tokens (%zu of %zu)", k, nraw);
        CHECK(t->n_chunks >= (int)(nraw + 74) / 75);
        free(raw);
        free(plain);
        /* padding to more chunks (CLIPTextEncodeSDXL) */
        int before = t->n_chunks;
        CHECK_OK(sd_prompt_tokens_pad_chunks(tok, &ol, t, before + 2, &e), &e);
        CHECK(t->n_chunks == before + 2);
        check_layout(t, bos, eos, eos);
        CHECK(t->tokens[(size_t)(before + 1) * 77 + 1].id == eos);
    }
    sd_prompt_tokens_free(t);

    /* disable_weights: parentheses are text */
    ol.disable_weights = 1;
    CHECK_OK(sd_prompt_tokenize(tok, "(cat:1.5)", &ol, &t, &e), &e);
    if (t) {
        CHECK(!sd_prompt_tokens_has_weights(t));
        CHECK(t->tokens[1].id == sd_tokenizer_token_id(tok, "(</w>"));
    }
    sd_prompt_tokens_free(t);
    ol.disable_weights = 0;

    /* bad options */
    ol.max_length = 5;
    CHECK(sd_prompt_tokenize(tok, "cat", &ol, &t, &e) == SD_ERR_INVALID && t == NULL);
    free(s75);
    free(s76);
    free(s70);
    free(g7);
    free(g8);
    free(big);
}

/* ---- embeddings ------------------------------------------------------------------------- */

typedef struct warns { int n; char last[1024]; } warns;

static void on_warn(void *ud, const char *msg)
{
    warns *w = ud;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

static void write_embedding(const char *path, const char *const *keys, const int *rows,
                            const int *dims, int n, float base)
{
    sd_st_writer *w = sd_st_writer_new();
    sd_error e;
    for (int i = 0; i < n; i++) {
        sd_tensor *t = rows[i] ? sd_tensor_new4(SD_F32, 2, rows[i], dims[i], 0, 0)
                               : sd_tensor_new4(SD_F32, 1, dims[i], 0, 0, 0);
        float *f = sd_tensor_f32(t);
        for (int64_t k = 0; k < sd_tensor_numel(t); k++)
            f[k] = base + (float)i + (float)k / 1024.0f;
        CHECK_OK(sd_st_writer_add(w, keys[i], t, &e), &e);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &e), &e);
    sd_st_writer_free(w);
}

static int n_embed_slots(const sd_prompt_tokens *t)
{
    int n = 0;
    for (size_t i = 0; i < (size_t)t->n_chunks * t->chunk_len; i++)
        n += t->tokens[i].embed >= 0;
    return n;
}

static void test_embeddings(const sd_tokenizer *tok)
{
    const char *dir = sd_test_tmpdir("tokenizer_embeddings");
    char p[4096], sub[4096];
    sd_prompt_opts o;
    sd_prompt_tokens *t = NULL;
    sd_error e;
    warns w = {0};

    /* ab.safetensors: clip_l [3, 8], clip_g [2, 16] */
    const char *k2[] = {"clip_g", "clip_l"};
    snprintf(p, sizeof p, "%s/ab.safetensors", dir);
    write_embedding(p, k2, (int[]){2, 3}, (int[]){16, 8}, 2, 0.0f);
    /* sub/one.safetensors: a single 1-D vector under an unrelated key */
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(sub, 0777);
    snprintf(p, sizeof p, "%s/one.safetensors", sub);
    write_embedding(p, (const char *[]){"emb_params"}, (int[]){0}, (int[]){8}, 1, 5.0f);
    /* bundle.safetensors: LoRA-bundled embedding rows */
    snprintf(p, sizeof p, "%s/bundle.safetensors", dir);
    write_embedding(p, (const char *[]){"bundle_emb.x.clip_l", "lora_unet_foo.alpha"},
                    (int[]){2, 0}, (int[]){8, 1}, 2, 9.0f);
    /* pickled.pt */
    snprintf(p, sizeof p, "%s/pickled.pt", dir);
    FILE *f = fopen(p, "wb");
    fputs("not a safetensors file", f);
    fclose(f);
    /* broken.safetensors */
    snprintf(p, sizeof p, "%s/broken.safetensors", dir);
    f = fopen(p, "wb");
    fputs("garbage", f);
    fclose(f);

    const char *dirs[] = {dir};
    sd_prompt_opts_clip_l(&o);
    o.embedding_dirs = dirs;
    o.n_embedding_dirs = 1;
    o.warn = on_warn;
    o.warn_ud = &w;

    CHECK_OK(sd_prompt_tokenize(tok, "a embedding:ab, cat", &o, &t, &e), &e);
    if (t) {
        CHECK(t->n_embeds == 1 && n_embed_slots(t) == 3);
        CHECK(t->tokens[1].word == 1 && t->tokens[2].embed == 0 && t->tokens[2].word == 2);
        CHECK(t->tokens[4].row == 2 && t->tokens[4].id == -1);
        CHECK(t->tokens[5].id == sd_tokenizer_token_id(tok, ",</w>") && t->tokens[5].word == 3);
        int64_t dim = 0;
        const float *v = sd_prompt_token_vector(t, &t->tokens[3], &dim);
        CHECK(v && dim == 8 && v[0] == 1.0f + 8.0f / 1024.0f); /* clip_l, row 1 */
        CHECK(sd_prompt_token_vector(t, &t->tokens[1], NULL) == NULL);
    }
    sd_prompt_tokens_free(t);

    /* clip_g key for the g encoder, weights carried into embedding slots */
    sd_prompt_opts og = o;
    og.embedding_key = "clip_g";
    og.pad_token = 0;
    CHECK_OK(sd_prompt_tokenize(tok, "(embedding:ab:1.4)", &og, &t, &e), &e);
    if (t) {
        int64_t dim = 0;
        CHECK(n_embed_slots(t) == 2 && sd_prompt_token_vector(t, &t->tokens[1], &dim) && dim == 16);
        CHECK(t->tokens[1].weight == 1.4 && t->tokens[3].id == sd_tokenizer_eos(tok));
    }
    sd_prompt_tokens_free(t);

    /* found in a subdirectory; 1-D tensor = one row; no key match -> first tensor */
    CHECK_OK(sd_prompt_tokenize(tok, "embedding:one", &o, &t, &e), &e);
    if (t) {
        int64_t dim = 0;
        const float *v = sd_prompt_token_vector(t, &t->tokens[1], &dim);
        CHECK(n_embed_slots(t) == 1 && v && dim == 8 && v[0] == 5.0f);
    }
    sd_prompt_tokens_free(t);

    /* bundled LoRA embedding keys */
    CHECK_OK(sd_prompt_tokenize(tok, "embedding:bundle", &o, &t, &e), &e);
    CHECK(t && n_embed_slots(t) == 2);
    sd_prompt_tokens_free(t);

    /* only after start / ' ' / '\n': "x,embedding:ab" is text */
    int before = w.n;
    CHECK_OK(sd_prompt_tokenize(tok, "x,embedding:ab", &o, &t, &e), &e);
    CHECK(t && n_embed_slots(t) == 0 && w.n == before);
    sd_prompt_tokens_free(t);

    /* missing, bare and escaping names are dropped with a warning */
    const char *dropped[] = {"embedding:nope cat", "embedding: cat", "embedding:", "embedding:../ab"};
    for (size_t i = 0; i < sizeof dropped / sizeof *dropped; i++) {
        before = w.n;
        CHECK_OK(sd_prompt_tokenize(tok, dropped[i], &o, &t, &e), &e);
        CHECK_MSG(t && n_embed_slots(t) == 0 && w.n == before + 1, "'%s'", dropped[i]);
        sd_prompt_tokens_free(t);
    }
    /* "embedding: cat" resolves NAME = "cat" (nothing left to tokenize) */
    CHECK_OK(sd_prompt_tokenize(tok, "embedding: cat", &o, &t, &e), &e);
    CHECK(t && t->tokens[1].id == sd_tokenizer_eos(tok));
    sd_prompt_tokens_free(t);

    /* unreadable safetensors: warned twice (load error, then missing), dropped */
    before = w.n;
    CHECK_OK(sd_prompt_tokenize(tok, "embedding:broken", &o, &t, &e), &e);
    CHECK(t && n_embed_slots(t) == 0 && w.n == before + 2);
    sd_prompt_tokens_free(t);

    /* a .pt the weights-only reader refuses: an error naming the file, not a silent skip */
    CHECK(sd_prompt_tokenize(tok, "embedding:pickled", &o, &t, &e) != SD_OK && !t);
    CHECK_MSG(strstr(e.msg, "pickled.pt") && strstr(e.msg, "embedding 'pickled'"), "%s", e.msg);

    /* an A1111 textual inversion .pt (tests/data/torch, written like torch.save):
     * the rows of its string_to_param['*'], [2, 8] of i/16 */
    const char *srcdir = getenv("SDFLOW_SOURCE_DIR");
    char src[4096];
    snprintf(src, sizeof src, "%s/tests/data/torch/embedding.pt", srcdir ? srcdir : "..");
    size_t n_pt = 0;
    char *pt = sd_test_read_file(src, &n_pt);
    CHECK_MSG(pt != NULL, "%s missing", src);
    if (pt) {
        snprintf(p, sizeof p, "%s/ti.pt", dir);
        FILE *fo = fopen(p, "wb");
        fwrite(pt, 1, n_pt, fo);
        fclose(fo);
        free(pt);
        CHECK_OK(sd_prompt_tokenize(tok, "embedding:ti cat", &o, &t, &e), &e);
        if (t) {
            int64_t dim = 0;
            const float *v0 = sd_prompt_token_vector(t, &t->tokens[1], &dim);
            const float *v1 = sd_prompt_token_vector(t, &t->tokens[2], NULL);
            CHECK(n_embed_slots(t) == 2 && v0 && v1 && dim == 8);
            CHECK(v0 && v1 && v0[1] == 1.0f / 16 && v1[0] == 8.0f / 16 && v1[7] == 15.0f / 16);
        }
        sd_prompt_tokens_free(t);
        /* a malicious one is refused by name */
        snprintf(src, sizeof src, "%s/tests/data/torch/bad-reduce.pt", srcdir ? srcdir : "..");
        pt = sd_test_read_file(src, &n_pt);
        snprintf(p, sizeof p, "%s/evil.bin", dir);
        fo = fopen(p, "wb");
        if (pt) fwrite(pt, 1, n_pt, fo);
        fclose(fo);
        free(pt);
        CHECK(sd_prompt_tokenize(tok, "embedding:evil", &o, &t, &e) == SD_ERR_UNSUPPORTED && !t);
        CHECK_MSG(strstr(e.msg, "posix.system") && strstr(e.msg, "evil.bin"), "%s", e.msg);
    }

    /* no embedding directories: the text is tokenized literally */
    sd_prompt_opts plain;
    sd_prompt_opts_clip_l(&plain);
    CHECK_OK(sd_prompt_tokenize(tok, "embedding:ab cat", &plain, &t, &e), &e);
    if (t) {
        int32_t *raw;
        size_t n;
        CHECK_OK(sd_tokenizer_encode(tok, "embedding:ab cat", 16, &raw, &n, &e), &e);
        int same = n_embed_slots(t) == 0;
        for (size_t i = 0; same && i < n; i++)
            same = t->tokens[1 + i].id == raw[i];
        CHECK(same && t->tokens[1 + n].id == sd_tokenizer_eos(tok));
        free(raw);
    }
    sd_prompt_tokens_free(t);
}

/* ---- loading and resolution ------------------------------------------------------------- */

static void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    fputs(s, f);
    fclose(f);
}

static void test_loading(const char *clipdir)
{
    const char *dir = sd_test_tmpdir("tokenizer_loading");
    char p[4096], q[4096], model[4096];
    sd_tokenizer *t = NULL;
    sd_error e;

    CHECK(sd_tokenizer_load_dir(dir, &t, &e) == SD_ERR_NOT_FOUND && !t);
    CHECK(strstr(e.msg, dir) != NULL);
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    snprintf(q, sizeof q, "%s/merges.txt", dir);
    write_text(p, "[1, 2]");
    write_text(q, "#version: 0.2\n");
    CHECK(sd_tokenizer_load_files(p, q, &t, &e) == SD_ERR_FORMAT && !t);
    write_text(p, "{\"a\": 0, \"b\": \"x\"}");
    CHECK(sd_tokenizer_load_files(p, q, &t, &e) == SD_ERR_FORMAT && !t);
    write_text(p, "{\"a\": 0}");
    CHECK(sd_tokenizer_load_files(p, q, &t, &e) == SD_ERR_FORMAT && !t); /* no byte symbols */

    /* resolution: model dir with files > configured dir > environment > error */
    unsetenv(SD_TOKENIZER_DIR_ENV);
    CHECK(sd_tokenizer_resolve(NULL, NULL, &t, &e) == SD_ERR_NOT_FOUND && !t);
    CHECK(strstr(e.msg, "--tokenizer-dir") && strstr(e.msg, SD_TOKENIZER_DIR_ENV));
    CHECK_OK(sd_tokenizer_resolve(NULL, clipdir, &t, &e), &e);
    sd_tokenizer_free(t);
    t = NULL;
    setenv(SD_TOKENIZER_DIR_ENV, clipdir, 1);
    CHECK_OK(sd_tokenizer_resolve("/nonexistent-model-dir", NULL, &t, &e), &e);
    sd_tokenizer_free(t);
    t = NULL;
    /* a model dir carrying broken tokenizer files wins and reports them */
    snprintf(model, sizeof model, "%s/model", dir);
    mkdir(model, 0777);
    snprintf(p, sizeof p, "%s/tokenizer", model);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/tokenizer/vocab.json", model);
    write_text(p, "{}");
    snprintf(p, sizeof p, "%s/tokenizer/merges.txt", model);
    write_text(p, "#version: 0.2\n");
    CHECK(sd_tokenizer_dir_has_files(model));
    CHECK(sd_tokenizer_resolve(model, clipdir, &t, &e) == SD_ERR_FORMAT && !t);
    unsetenv(SD_TOKENIZER_DIR_ENV);
}

/* ---- concurrency: the word cache is shared ------------------------------------------- */

typedef struct job { const sd_tokenizer *tok; int ok; } job;

static void *encode_many(void *arg)
{
    job *j = arg;
    sd_error e;
    j->ok = 1;
    for (int i = 0; i < 200 && j->ok; i++) {
        char s[64];
        snprintf(s, sizeof s, "word%d photograph%d of cats", i % 37, i);
        int32_t *a, *b;
        size_t na, nb;
        j->ok = sd_tokenizer_encode(j->tok, s, strlen(s), &a, &na, &e) == SD_OK &&
                sd_tokenizer_encode(j->tok, s, strlen(s), &b, &nb, &e) == SD_OK && na == nb &&
                memcmp(a, b, na * sizeof *a) == 0;
        free(a);
        free(b);
    }
    return NULL;
}

static void test_threads(const sd_tokenizer *tok)
{
    pthread_t th[4];
    job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].tok = tok;
        pthread_create(&th[i], NULL, encode_many, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].ok);
    }
}

int main(void)
{
    char clipdir[4096];
    sd_tokenizer *tok = NULL;
    sd_error e;
    test_parse_weights();
    test_parse_float();
    test_clean();
    snprintf(clipdir, sizeof clipdir, "%s/data/clip", sd_test_shared_dir());
    if (!sd_tokenizer_dir_has_files(clipdir)) {
        if (sd_test_failures)
            return sd_test_finish();
        sd_test_skip("parser tests passed; no CLIP vocabulary in %s for the rest", clipdir);
    }
    CHECK_OK(sd_tokenizer_load_dir(clipdir, &tok, &e), &e);
    if (tok) {
        CHECK(sd_tokenizer_vocab_size(tok) == 49408);
        CHECK(sd_tokenizer_bos(tok) == 49406 && sd_tokenizer_eos(tok) == 49407);
        CHECK(strcmp(sd_tokenizer_token_str(tok, sd_tokenizer_token_id(tok, "photo</w>")),
                     "photo</w>") == 0);
        CHECK(sd_tokenizer_token_str(tok, -1) == NULL && sd_tokenizer_token_str(tok, 49408) == NULL);
        test_chunks(tok);
        test_embeddings(tok);
        test_threads(tok);
    }
    test_loading(clipdir);
    sd_tokenizer_free(tok);
    return sd_test_finish();
}
