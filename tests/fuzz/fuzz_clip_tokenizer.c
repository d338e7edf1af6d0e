/* libFuzzer target: the CLIP BPE tokenizer (models/text/tokenizer.h) on
 * untrusted prompt text: the clean-up (NFC with its canonical reordering,
 * lower-casing, whitespace), the pre-tokenizer pattern and the heap-based
 * BPE. Any bytes must encode to ids inside the vocabulary without crashing,
 * the same ids twice (the second time partly from the word cache), and a
 * stop flag set beforehand must end it with SD_ERR_CANCELLED or, for text
 * with no word, SD_OK. The vocabulary is the real one
 * ($SDFLOW_SHARED/data/clip at build time, or $SDFLOW_CLIP_DIR); without it
 * every input is a no-op. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/tokenizer.h"

#ifndef SD_FUZZ_CLIP_DIR
#define SD_FUZZ_CLIP_DIR "../shared/data/clip"
#endif

static sd_tokenizer *tok;
static int loaded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        loaded = 1;
        const char *dir = getenv("SDFLOW_CLIP_DIR");
        sd_error e;
        if (sd_tokenizer_load_dir(dir && *dir ? dir : SD_FUZZ_CLIP_DIR, &tok, &e) != SD_OK) tok = NULL;
    }
    if (!tok || size > (1u << 16)) return 0;
    sd_error err;
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (sd_tokenizer_encode(tok, (const char *)data, size, &a, &na, &err) != SD_OK) abort();
    for (size_t i = 0; i < na; i++)
        if (a[i] < 0 || a[i] >= sd_tokenizer_vocab_size(tok)) abort();
    if (sd_tokenizer_encode(tok, (const char *)data, size, &b, &nb, &err) != SD_OK) abort();
    if (na != nb || (na && memcmp(a, b, na * sizeof *a))) abort();
    free(b);
    volatile sig_atomic_t stop = 1;
    b = NULL;
    sd_status rc = sd_tokenizer_encode_ex(tok, (const char *)data, size, &stop, &b, &nb, &err);
    if (rc != SD_ERR_CANCELLED && !(rc == SD_OK && na == 0)) abort();
    if (rc == SD_ERR_CANCELLED && b) abort();
    free(b);
    free(a);
    return 0;
}
