/* unicode_hf.h - Unicode as the Hugging Face tokenizers library (Rust) sees
 * it, for the tokenizers whose reference it is (Qwen2's byte-level BPE):
 *   - the classes of its pre-tokenizer regexes (the Oniguruma engine):
 *     \p{L}, \p{N} and \s, Unicode 16.0 as Oniguruma 94877ac (vendored by
 *     the onig_sys 69.9 crate tokenizers 0.22 links) defines them;
 *   - NFC as its normalizer computes it: the crate
 *     unicode-normalization-alignments 0.1.12, Unicode 9.0 data (characters
 *     assigned later neither decompose, compose nor reorder).
 * The tables (unicode_hf_tables.c) are generated from those two sources by
 * scripts/gen_hf_unicode_tables.py; they differ from Python's unicodedata
 * (models/text/unicode.h) on purpose.
 */
#ifndef SD_UNICODE_HF_H
#define SD_UNICODE_HF_H

#include <stddef.h>
#include <stdint.h>
#include "models/text/unicode.h"

typedef struct sd_uc_hf_decomp {
    uint32_t cp;
    uint32_t d[4];
    uint8_t n;
} sd_uc_hf_decomp;

/* Generated tables (sorted). */
extern const sd_uc_range sd_uc_hf_letter[]; /* \p{L} */
extern const size_t sd_uc_hf_letter_count;
extern const sd_uc_range sd_uc_hf_number[]; /* \p{N} */
extern const size_t sd_uc_hf_number_count;
extern const sd_uc_range sd_uc_hf_space[];  /* \s */
extern const size_t sd_uc_hf_space_count;
extern const sd_uc_class sd_uc_hf_ccc[];
extern const size_t sd_uc_hf_ccc_count;
extern const sd_uc_hf_decomp sd_uc_hf_decomps[]; /* full canonical decompositions */
extern const size_t sd_uc_hf_decomps_count;
extern const sd_uc_triple sd_uc_hf_comp[];       /* primary composites */
extern const size_t sd_uc_hf_comp_count;

int sd_uc_hf_is_letter(uint32_t cp); /* \p{L} */
int sd_uc_hf_is_number(uint32_t cp); /* \p{N} */
int sd_uc_hf_is_space(uint32_t cp);  /* \s */

/* NFC of cps[0..n) (sd_uc_nfc's contract) with the Unicode 9.0 data. */
int sd_uc_hf_nfc(const uint32_t *cps, size_t n, uint32_t **out, size_t *out_n);

#endif
