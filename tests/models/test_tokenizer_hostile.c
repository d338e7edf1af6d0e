/* test_tokenizer_hostile.c - the CLIP tokenizer against text made to make it
 * slow (issue 23: a 2 MB one-word prompt took the server to 3 GB and past
 * /interrupt for ~28 s; a 1 MB word took 21 s on the CLI):
 *   - the BPE equals transformers' CLIPTokenizer.bpe merge for merge: a
 *     reference written here from that algorithm (strings, the lowest-rank
 *     pair, all its occurrences left to right, repeat) on merges.txt gives
 *     the same ids for thousands of random and repetitive words;
 *   - a 1 MiB word of random letters costs at most 6 heap operations per
 *     byte (counted by the tokenizer: tokenizer_internal.h), the word twice
 *     twice that; a 256 KiB run of combining marks is sorted stably by
 *     class (counting sort; the insertion sort it replaced was quadratic);
 *   - a stop flag set before tokenizing one 1 MiB word ends it inside the
 *     word with SD_ERR_CANCELLED.
 * Data: the CLIP vocabulary in $SDFLOW_SHARED/data/clip (vocab.json +
 * merges.txt); without it the test skips. */
#include "testutil.h"
#include "models/text/tokenizer.h"
#include "models/text/tokenizer_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a reference BPE on strings, as transformers writes it -------------------- */

typedef struct merge { char *a, *b; } merge;
static merge *merges;
static size_t n_merges;
static char byte_str[256][4]; /* GPT-2's bytes_to_unicode, UTF-8 */

static void put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp, o[1] = 0;
    } else {
        o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3F)), o[2] = 0;
    }
}

static void init_bytes(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        put_utf8(byte_str[b], printable ? (unsigned)b : (unsigned)(256 + n++));
    }
}

static int load_merges(const char *path) {
    size_t size = 0;
    char *text = sd_test_read_file(path, &size);
    if (!text) return -1;
    size_t cap = 65536;
    merges = malloc(cap * sizeof *merges);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "#version", 8)) continue;
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        *sp = 0;
        if (n_merges == cap) merges = realloc(merges, (cap *= 2) * sizeof *merges);
        merges[n_merges].a = strdup(line);
        merges[n_merges].b = strdup(sp + 1);
        n_merges++;
    }
    free(text);
    return 0;
}

/* rank of the pair "a b": an open-addressed table over merges.txt's lines */
static long *slots;
static size_t n_slots;

static uint64_t pair_hash(const char *a, const char *b) {
    uint64_t h = 1469598103934665603ull;
    for (; *a; a++) h = (h ^ (unsigned char)*a) * 1099511628211ull;
    h = (h ^ ' ') * 1099511628211ull;
    for (; *b; b++) h = (h ^ (unsigned char)*b) * 1099511628211ull;
    return h;
}

static void index_merges(void) {
    n_slots = 1;
    while (n_slots < 4 * n_merges) n_slots *= 2;
    slots = malloc(n_slots * sizeof *slots);
    for (size_t i = 0; i < n_slots; i++) slots[i] = -1;
    for (size_t r = 0; r < n_merges; r++) {
        size_t i = pair_hash(merges[r].a, merges[r].b) & (n_slots - 1);
        while (slots[i] >= 0) i = (i + 1) & (n_slots - 1);
        slots[i] = (long)r; /* a repeated pair keeps its first (lowest) rank: found first */
    }
}

static long rank_of(const char *a, const char *b) {
    for (size_t i = pair_hash(a, b) & (n_slots - 1); slots[i] >= 0; i = (i + 1) & (n_slots - 1))
        if (!strcmp(merges[slots[i]].a, a) && !strcmp(merges[slots[i]].b, b)) return slots[i];
    return -1;
}

/* transformers' CLIPTokenizer.bpe on one lower-case ASCII word: the final
 * symbols' ids (via the tokenizer's vocabulary) into ids; their count. */
static size_t reference_bpe(const sd_tokenizer *tok, const char *word, int32_t *ids) {
    size_t n = strlen(word);
    char **sym = malloc(n * sizeof *sym);
    for (size_t i = 0; i < n; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%s%s", byte_str[(unsigned char)word[i]], i + 1 == n ? "</w>" : "");
        sym[i] = strdup(buf);
    }
    for (;;) {
        long best = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            long r = rank_of(sym[i], sym[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r;
        }
        if (best < 0) break;
        const char *a = merges[best].a, *b = merges[best].b;
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && !strcmp(sym[i], a) && !strcmp(sym[i + 1], b)) {
                char *m = malloc(strlen(a) + strlen(b) + 1);
                strcpy(m, a);
                strcat(m, b);
                free(sym[i]);
                free(sym[i + 1]);
                sym[k++] = m;
                i += 2;
            } else {
                sym[k++] = sym[i++];
            }
        }
        n = k;
        if (n == 1) break;
    }
    for (size_t i = 0; i < n; i++) {
        ids[i] = sd_tokenizer_token_id(tok, sym[i]);
        free(sym[i]);
    }
    free(sym);
    return n;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static unsigned next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

static void check_word(const sd_tokenizer *tok, const char *word) {
    int32_t ref[256], *ids = NULL;
    size_t n = 0, nr = reference_bpe(tok, word, ref);
    sd_error e;
    CHECK_OK(sd_tokenizer_encode(tok, word, strlen(word), &ids, &n, &e), &e);
    int same = n == nr;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == ref[i];
    CHECK_MSG(same, "'%s': %zu ids, the reference BPE %zu (first %d vs %d)", word, n, nr, n ? ids[0] : -1,
              nr ? ref[0] : -1);
    free(ids);
}

static void test_reference(const sd_tokenizer *tok) {
    char w[80];
    int words = 0;
    /* random words over a few alphabets (few letters: many repeated pairs) */
    static const char *const alpha[] = {"abcdefghijklmnopqrstuvwxyz", "aeiou", "ab", "thersinol"};
    for (int a = 0; a < 4; a++)
        for (int i = 0; i < 150; i++) {
            size_t len = 1 + next_rand() % 40, m = strlen(alpha[a]);
            for (size_t k = 0; k < len; k++) w[k] = alpha[a][next_rand() % m];
            w[len] = 0;
            check_word(tok, w);
            words++;
        }
    /* runs and periodic words, where occurrences of a pair overlap */
    static const char *const unit[] = {"a", "ab", "aab", "abc", "the", "ss", "ing"};
    for (int u = 0; u < 7; u++)
        for (size_t len = 1; len <= 60; len += 7) {
            size_t k = 0;
            for (; k < len; k++) w[k] = unit[u][k % strlen(unit[u])];
            w[len] = 0;
            check_word(tok, w);
            words++;
        }
    printf("the BPE equals the reference on %d words\n", words);
}

/* ---- huge inputs ------------------------------------------------------------------ */

static char *random_word(size_t n) {
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = (char)('a' + next_rand() % 26);
    s[n] = 0;
    return s;
}

static void test_huge(const sd_tokenizer *tok) {
    size_t n = (size_t)1 << 20;
    char *s = random_word(n);
    int32_t *ids = NULL;
    size_t k = 0, work = 0;
    sd_error e;
    CHECK_OK(sd_tokenizer_encode_work(tok, s, n, NULL, &work, &ids, &k, &e), &e);
    CHECK_MSG(k >= n / 8 && k <= n, "1 MiB word: %zu tokens", k);
    /* linear: at most 3 pushes and 3 pops of the heap per byte (the
     * transformers loop's pass per merge is ~n^2/2 pair looks here) */
    CHECK_MSG(work > 0 && work <= 6 * n, "1 MiB word: %zu heap operations for %zu bytes", work, n);
    free(ids);
    /* the same word twice (one piece, so no cache: 2x the work), and a
     * text of 65536 short words: linear too */
    char *two = malloc(2 * n + 2);
    memcpy(two, s, n);
    two[n] = ' ';
    memcpy(two + n + 1, s, n);
    size_t w2 = 0;
    CHECK_OK(sd_tokenizer_encode_work(tok, two, 2 * n + 1, NULL, &w2, &ids, &k, &e), &e);
    CHECK_MSG(w2 <= 2 * work, "two copies of the word: %zu heap operations, one: %zu", w2, work);
    free(ids);
    free(two);
    free(s);
    printf("1 MiB word: %zu tokens, %zu heap operations\n", k / 2, work);

    /* 'a' then 256 KiB of combining marks of classes 230 and 220 in turn:
     * canonical reordering must sort the whole run (stably; the insertion
     * sort it replaced needed ~2x10^9 swaps for it) */
    size_t marks = (size_t)1 << 17; /* 2 bytes each */
    char *m = malloc(1 + 2 * marks + 1);
    m[0] = 'a';
    for (size_t i = 0; i < marks; i++) {
        /* U+0301 COMBINING ACUTE (230), U+0316 COMBINING GRAVE BELOW (220) */
        m[1 + 2 * i] = '\xCC';
        m[2 + 2 * i] = i % 2 ? '\x96' : '\x81';
    }
    m[1 + 2 * marks] = 0;
    CHECK_OK(sd_tokenizer_encode(tok, m, 1 + 2 * marks, &ids, &k, &e), &e);
    CHECK_MSG(k > 0, "1 MiB of combining marks: %zu tokens", k);
    free(ids);
    /* the reordering is the stable sort by class: all 220s, then all 230s */
    char *clean = sd_tokenizer_clean_text(m, 1 + 2 * marks);
    CHECK(clean != NULL);
    if (clean) {
        /* sorted: 'a', the 220s, the 230s; then 'a' + U+0301 compose to
         * U+00E1 (a 220 between them does not block a 230; Python's
         * unicodedata.normalize('NFC') agrees): U+00E1, 2^18 x U+0316,
         * 2^18 - 1 x U+0301 */
        size_t half = marks / 2, at = 0;
        int ok = !strncmp(clean, "\xC3\xA1", 2);
        at = 2;
        for (size_t i = 0; ok && i < half; i++, at += 2) ok = clean[at] == '\xCC' && clean[at + 1] == '\x96';
        for (size_t i = 0; ok && i + 1 < half; i++, at += 2) ok = clean[at] == '\xCC' && clean[at + 1] == '\x81';
        CHECK_MSG(ok && clean[at] == 0, "combining marks: sorted stably by class and composed (NFC)");
    }
    free(clean);
    free(m);
}

static void test_stop(const sd_tokenizer *tok) {
    size_t n = (size_t)1 << 20;
    char *s = random_word(n);
    volatile sig_atomic_t stop = 1;
    int32_t *ids = (int32_t *)&stop; /* must be reset */
    size_t k = 99;
    sd_error e;
    sd_error_clear(&e);
    sd_status rc = sd_tokenizer_encode_ex(tok, s, n, &stop, &ids, &k, &e);
    CHECK_MSG(rc == SD_ERR_CANCELLED && ids == NULL && k == 0, "a set stop ends one huge word: rc %d", rc);
    stop = 0;
    rc = sd_tokenizer_encode_ex(tok, "a photo of a cat", 16, &stop, &ids, &k, &e);
    CHECK(rc == SD_OK && k == 5);
    free(ids);
    free(s);
}

int main(void) {
    char clipdir[4096], path[4200];
    snprintf(clipdir, sizeof clipdir, "%s/data/clip", sd_test_shared_dir());
    snprintf(path, sizeof path, "%s/merges.txt", clipdir);
    sd_tokenizer *tok = NULL;
    sd_error e;
    if (!sd_tokenizer_dir_has_files(clipdir) || load_merges(path) < 0)
        sd_test_skip("no CLIP vocabulary (vocab.json + merges.txt) in %s", clipdir);
    init_bytes();
    index_merges();
    CHECK_OK(sd_tokenizer_load_dir(clipdir, &tok, &e), &e);
    if (tok) {
        test_reference(tok);
        test_huge(tok);
        test_stop(tok);
    }
    sd_tokenizer_free(tok);
    for (size_t i = 0; i < n_merges; i++) free(merges[i].a), free(merges[i].b);
    free(merges);
    free(slots);
    return sd_test_finish();
}
