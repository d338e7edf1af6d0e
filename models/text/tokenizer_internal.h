/* tokenizer_internal.h - for the tokenizer's tests (models/text and
 * tests/models only). */
#ifndef SD_TOKENIZER_INTERNAL_H
#define SD_TOKENIZER_INTERNAL_H

#include "models/text/tokenizer.h"

/* sd_tokenizer_encode_ex that also adds to *work (may be NULL) the BPE's
 * heap operations (pushes and pops of (rank, position) entries): each is
 * O(log m) for a word of m bytes, and a word costs at most 3m pushes and as
 * many pops, so a test can check the work is linear in the text without
 * timing anything. Words served from the cache add nothing. */
sd_status sd_tokenizer_encode_work(const sd_tokenizer *tok, const char *text, size_t len,
                                   const volatile sig_atomic_t *stop, size_t *work, int32_t **ids,
                                   size_t *n, sd_error *err);

#endif
