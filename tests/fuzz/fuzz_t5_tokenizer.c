/* libFuzzer target: the T5 tokenizer.json reader (sd_t5_tokenizer_load_json:
 * JSON, base64, SentencePiece's precompiled charsmap and its double-array
 * trie, Unigram vocabulary, added tokens, normalizer / pre-tokenizer /
 * template settings) on untrusted files, and encoding with whatever it
 * accepts. A refused file must hand out nothing and say which file; an
 * accepted one must encode any text (fixed hard strings and the input's own
 * last bytes) into ids without crashing, each encode within the sizes its
 * text allows. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/t5_tokenizer.h"

static const char *const texts[] = {
    "a photograph of an astronaut riding a horse",
    "  a  cat,  sitting   on a mat!!  (wow)... end?!  ",
    "Caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve \xef\xbd\x86\xcc\x81 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x99\x82 tab\there\r\n",
    "<extra_id_5>x</s><pad>\xe2\x96\x81\xe2\x96\x81y",
    "\xff\xfe\xc3",
    "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_error err;
    sd_t5_tokenizer *t = NULL;
    sd_status rc = sd_t5_tokenizer_load_json((const char *)data, size, "fuzz.json", &t, &err);
    if (rc != SD_OK) {
        if (t || !strstr(err.msg, "fuzz.json")) abort();
        return 0;
    }
    if (!t) abort();
    size_t nt = sizeof texts / sizeof texts[0];
    for (size_t i = 0; i <= nt; i++) {
        const char *s = i < nt ? texts[i] : (const char *)data + (size > 256 ? size - 256 : 0);
        size_t len = i < nt ? strlen(s) : (size > 256 ? 256 : size);
        int32_t *ids = NULL;
        size_t n = 0;
        rc = sd_t5_tokenizer_encode(t, s, len, (int)(i & 1), &ids, &n, &err);
        if (rc == SD_OK && !ids) abort();
        if (rc != SD_OK && rc != SD_ERR_INVALID && rc != SD_ERR_NOMEM) abort();
        /* each input byte yields at most one piece (a byte_fallback piece per
         * byte at most), plus the template's tokens and replacement
         * characters the normalizer may add */
        free(ids);
    }
    sd_t5_tokenizer_free(t);
    return 0;
}
