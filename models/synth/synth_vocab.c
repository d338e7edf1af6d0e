/* synth_vocab.c - a tiny stand-in CLIP vocabulary for the no-download demo.
 * The byte symbols follow GPT-2's bytes_to_unicode table, as CLIP's do, so
 * the regular tokenizer loads it without a special case. */
#include "models/synth/synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const words[] = {
    "the", "and", "of", "a", "in", "with", "photo", "portrait", "landscape", "nature",
    "beautiful", "scenery", "glass", "bottle", "purple", "galaxy", "text", "watermark",
    "fox", "cat", "dog", "mountain", "lake", "forest", "sky", "sunset", "city", "night",
    "red", "blue", "green", "light", "dark", "painting", "detailed", "high", "quality",
    "best", "masterpiece", "woman", "man", "house", "tree", "flower", "river", "ocean",
};

/* GPT-2's reversible byte -> printable code point table. */
static void byte_table(unsigned cp[256]) {
    int n = 0, used[256] = {0};
    for (int b = '!'; b <= '~'; b++) { cp[b] = (unsigned)b; used[b] = 1; }
    for (int b = 0xa1; b <= 0xac; b++) { cp[b] = (unsigned)b; used[b] = 1; }
    for (int b = 0xae; b <= 0xff; b++) { cp[b] = (unsigned)b; used[b] = 1; }
    for (int b = 0; b < 256; b++)
        if (!used[b]) cp[b] = 256u + (unsigned)n++;
}

static void put_utf8(FILE *f, unsigned c) {
    if (c < 0x80) fputc((int)c, f);
    else if (c < 0x800) { fputc(0xc0 | (int)(c >> 6), f); fputc(0x80 | (int)(c & 0x3f), f); }
    else { fputc(0xe0 | (int)(c >> 12), f); fputc(0x80 | (int)((c >> 6) & 0x3f), f); fputc(0x80 | (int)(c & 0x3f), f); }
}

/* A JSON string body for a symbol made of ASCII letters (merges) or one byte symbol. */
static void put_json_symbol(FILE *f, unsigned cp, const char *suffix) {
    fputc('"', f);
    if (cp == '"' || cp == '\\') fputc('\\', f);
    put_utf8(f, cp);
    fputs(suffix, f);
    fputc('"', f);
}

sd_status sd_synth_vocab_write(const char *dir, sd_error *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return sd_error_set(err, SD_ERR_IO, "%s: %s", dir, strerror(errno));
    char vpath[4096], mpath[4096];
    snprintf(vpath, sizeof vpath, "%s/vocab.json", dir);
    snprintf(mpath, sizeof mpath, "%s/merges.txt", dir);
    FILE *v = fopen(vpath, "w"), *m = fopen(mpath, "w");
    if (!v || !m) {
        if (v) fclose(v);
        if (m) fclose(m);
        return sd_error_set(err, SD_ERR_IO, "%s: cannot write vocabulary: %s", dir, strerror(errno));
    }
    unsigned cp[256];
    byte_table(cp);
    int id = 0;
    fputs("{", v);
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++) {
            fputs(id ? "," : "", v);
            put_json_symbol(v, cp[b], pass ? "</w>" : "");
            fprintf(v, ":%d", id++);
        }
    /* Each word merges left to right: "p h" -> "ph", "ph o" -> "pho", ...,
     * the last step with the end-of-word marker. A prefix shared by two words
     * is emitted once. */
    fputs("#version: 0.2\n", m);
    char seen[4096] = "";
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        const char *word = words[w];
        size_t n = strlen(word);
        for (size_t k = 2; k <= n; k++) {
            char left[64], merged[72], key[80];
            memcpy(left, word, k - 1);
            left[k - 1] = 0;
            int last = k == n;
            snprintf(merged, sizeof merged, "%.*s%s", (int)k, word, last ? "</w>" : "");
            snprintf(key, sizeof key, "|%s|", merged);
            if (strstr(seen, key)) continue;
            if (strlen(seen) + strlen(key) < sizeof seen) strcat(seen, key);
            fprintf(m, "%s %c%s\n", left, word[k - 1], last ? "</w>" : "");
            fprintf(v, ",\"%s\":%d", merged, id++);
        }
    }
    fprintf(v, ",\"<|startoftext|>\":49406,\"<|endoftext|>\":49407}\n");
    int bad = ferror(v) || ferror(m);
    bad |= fclose(v) != 0;
    bad |= fclose(m) != 0;
    if (bad) return sd_error_set(err, SD_ERR_IO, "%s: write failed", dir);
    return SD_OK;
}
