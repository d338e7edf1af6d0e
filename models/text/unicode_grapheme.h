/* unicode_grapheme.h - extended grapheme cluster boundaries (UAX #29).
 *
 * The T5 tokenizer's Precompiled normalizer (models/text/t5_tokenizer.h)
 * rewrites text one extended grapheme cluster at a time, as Hugging Face
 * tokenizers does through the Rust crate unicode-segmentation 1.12.0, so the
 * cluster boundaries must be that crate's: Unicode 16.0 rules GB3-GB13
 * including GB9c (Indic conjunct clusters) and GB11 (emoji ZWJ sequences).
 * The classes come from unicode_grapheme_tables.c, generated from the
 * crate's own tables (scripts/gen_grapheme_tables.py).
 */
#ifndef SD_UNICODE_GRAPHEME_H
#define SD_UNICODE_GRAPHEME_H

#include <stddef.h>
#include <stdint.h>
#include "models/text/unicode.h"

/* Grapheme_Cluster_Break, with InCB=Consonant and Extended_Pictographic as
 * classes of their own (each of those code points is GCB=Other otherwise). */
typedef enum sd_gcb {
    SD_GCB_ANY = 0,
    SD_GCB_CR,
    SD_GCB_CONTROL,
    SD_GCB_EXTEND,
    SD_GCB_EXTENDED_PICTOGRAPHIC,
    SD_GCB_INCB_CONSONANT,
    SD_GCB_L,
    SD_GCB_LF,
    SD_GCB_LV,
    SD_GCB_LVT,
    SD_GCB_PREPEND,
    SD_GCB_REGIONAL_INDICATOR,
    SD_GCB_SPACINGMARK,
    SD_GCB_T,
    SD_GCB_V,
    SD_GCB_ZWJ
} sd_gcb;

typedef struct sd_uc_gcb_range { uint32_t lo, hi; uint8_t cls; } sd_uc_gcb_range;

extern const sd_uc_gcb_range sd_uc_gcb[]; /* sorted; code points not listed are ANY */
extern const size_t sd_uc_gcb_count;
extern const sd_uc_range sd_uc_incb_extend[];
extern const size_t sd_uc_incb_extend_count;
extern const uint32_t sd_uc_incb_linker[];
extern const size_t sd_uc_incb_linker_count;

sd_gcb sd_uc_gcb_of(uint32_t cp);

/* Length (in code points, >= 1) of the extended grapheme cluster starting
 * at cps[0] within cps[0..n), n >= 1. Linear in the cluster's length. */
size_t sd_uc_grapheme_len(const uint32_t *cps, size_t n);

#endif
