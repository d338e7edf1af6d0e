/* spm_charsmap.h - SentencePiece's precompiled normalization map (the
 * "Precompiled" normalizer of a Hugging Face tokenizer.json, e.g. T5's
 * nmt_nfkc), interpreted from its own bytes.
 *
 * The blob is SentencePiece's binary format: a little-endian u32 giving the
 * byte size of a Darts double-array trie, that many bytes of u32 trie units,
 * then the replacement strings, each ended by a NUL. The trie maps UTF-8
 * byte strings to offsets into the replacement strings. Hugging Face's
 * reading of it (the spm_precompiled crate, used by tokenizers) is the
 * reference reproduced here, quirks included:
 *   - a chunk's replacement is that of the SHORTEST key that is a prefix of
 *     the chunk (the first result of the common-prefix search), and it
 *     replaces the whole chunk;
 *   - text is walked by extended grapheme clusters (unicode_grapheme.h): a
 *     cluster of fewer than 6 bytes is looked up as one chunk; otherwise, or
 *     when that finds nothing, each code point is looked up on its own and
 *     kept when it has no entry.
 * The trie is checked when parsed: every unit a lookup can reach is inside
 * the array and every replacement offset is a character boundary of the
 * strings, so lookups never read out of bounds on hostile files.
 */
#ifndef SD_SPM_CHARSMAP_H
#define SD_SPM_CHARSMAP_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct sd_spm_charsmap sd_spm_charsmap;

/* Parse a decoded (not base64) blob; `source` names it in errors. The
 * result copies what it needs. Errors: SD_ERR_FORMAT (truncated, a trie
 * unit or offset out of range, replacement strings that are not UTF-8),
 * SD_ERR_NOMEM. */
sd_status sd_spm_charsmap_parse(const uint8_t *blob, size_t n, const char *source,
                                sd_spm_charsmap **out, sd_error *err);
void sd_spm_charsmap_free(sd_spm_charsmap *m); /* NULL-safe */

/* Normalize valid UTF-8 text s[0..n) into a new malloc'd NUL-terminated
 * string (*out_n bytes). NULL when out of memory. Linear in n. */
char *sd_spm_charsmap_normalize(const sd_spm_charsmap *m, const char *s, size_t n, size_t *out_n);

/* The replacement of one chunk (the shortest key prefixing it), or NULL.
 * *len receives its byte length. For tests. */
const char *sd_spm_charsmap_lookup(const sd_spm_charsmap *m, const char *chunk, size_t n,
                                   size_t *len);

#endif
