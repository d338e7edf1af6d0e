/* libFuzzer target: the Qwen2 tokenizer's file readers
 * (sd_qwen_tokenizer_load_mem: vocab.json, merges.txt, tokenizer_config.json
 * with its added tokens) on untrusted files, and encoding with whatever
 * they accept. The input is the three files separated by the line
 * "\n#==#\n" (a missing third part: no config). A refused set must hand out
 * nothing and name its source; an accepted one must encode any text (fixed
 * hard strings and the input's own last bytes) into at most one id per
 * byte of text (every id a merge of byte tokens or an added token). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/qwen_tokenizer.h"

static const char *const texts[] = {
    "a photograph of an astronaut riding a horse",
    "  it's  WE'RE\t\tcat,  (wow)...\r\n\n  end?!  ",
    "Caf\xc3\xa9 cafe\xcc\x81 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x99\x82 \xea\xb0\x81 \xe1\x84\x80\xe1\x85\xa1 12345",
    "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think></think><|im_",
    "\xff\xfe\xc3",
    "",
};

static const char SEP[] = "\n#==#\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data, *p[3] = {s, NULL, NULL};
    size_t n[3] = {size, 0, 0}, sl = sizeof SEP - 1;
    for (int k = 1; k < 3; k++) {
        const char *b = p[k - 1];
        size_t rem = n[k - 1];
        const char *at = NULL;
        for (size_t i = 0; i + sl <= rem; i++)
            if (memcmp(b + i, SEP, sl) == 0) {
                at = b + i;
                break;
            }
        if (!at) break;
        n[k - 1] = (size_t)(at - b);
        p[k] = at + sl;
        n[k] = rem - n[k - 1] - sl;
    }
    if (!p[1]) return 0; /* vocab and merges are needed */
    sd_error err;
    sd_qwen_tokenizer *t = NULL;
    sd_status rc = sd_qwen_tokenizer_load_mem(p[0], n[0], p[1], n[1], p[2], n[2], "fuzz_dir", &t, &err);
    if (rc != SD_OK) {
        if (t || !strstr(err.msg, "fuzz_dir")) abort();
        return 0;
    }
    if (!t) abort();
    size_t nt = sizeof texts / sizeof texts[0];
    for (size_t i = 0; i <= nt; i++) {
        const char *x = i < nt ? texts[i] : s + (size > 256 ? size - 256 : 0);
        size_t len = i < nt ? strlen(x) : (size > 256 ? 256 : size);
        int32_t *ids = NULL;
        size_t k = 0;
        rc = sd_qwen_tokenizer_encode(t, x, len, &ids, &k, &err);
        if (rc == SD_OK && !ids) abort();
        if (rc != SD_OK && rc != SD_ERR_NOMEM) abort();
        /* invalid bytes become U+FFFD (3 bytes): at most 3 ids per byte */
        if (rc == SD_OK && k > 3 * len) abort();
        free(ids);
    }
    sd_qwen_tokenizer_free(t);
    return 0;
}
