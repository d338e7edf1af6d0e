/* tokenizer.h - the CLIP byte-level BPE tokenizer (text -> token ids).
 *
 * Reproduces what ComfyUI gets from transformers' slow CLIPTokenizer without
 * ftfy (ComfyUI's configuration), which is the PRIMARY reference:
 *   1. clean-up as transformers' BasicTokenizer(strip_accents=False,
 *      do_split_on_punc=False): drop NUL, U+FFFD and control/format/
 *      unassigned characters (category C*, zero-width joiners included),
 *      \t \n \r and Zs spaces -> ' ', spaces around CJK ideographs, NFC,
 *      split on whitespace, Python str.lower() (no accent stripping),
 *      rejoin with single spaces;
 *   2. CLIP's pre-tokenizer regex
 *      <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+
 *      (no HTML unescaping, no ftfy repairs);
 *   3. each piece's UTF-8 bytes through GPT-2's bytes_to_unicode table, '</w>'
 *      on the last symbol, then merges by rank (all occurrences of the best
 *      pair, left to right) until none applies; the two special token
 *      strings map straight to their ids.
 * The vocabulary comes from vocab.json + merges.txt (the Hugging Face /
 * ComfyUI files) or from OpenAI's bpe_simple_vocab_16e6.txt.gz; both give
 * the same 49408-entry vocabulary.
 *
 * Thread safety: a loaded tokenizer may be shared between threads; its word
 * cache is guarded by a mutex.
 */
#ifndef SD_TOKENIZER_H
#define SD_TOKENIZER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct sd_tokenizer sd_tokenizer;

/* Environment variable naming the configured tokenizer directory. */
#define SD_TOKENIZER_DIR_ENV "SDFLOW_TOKENIZER_DIR"

/* Load from a directory holding vocab.json + merges.txt (preferred) or
 * bpe_simple_vocab_16e6.txt.gz. A directory whose tokenizer files sit in a
 * "tokenizer/" subfolder (diffusers layout) is accepted too.
 * On success *out owns the tokenizer (free with sd_tokenizer_free).
 * Errors: SD_ERR_NOT_FOUND (no tokenizer files; message names the dir),
 * SD_ERR_IO, SD_ERR_FORMAT (malformed vocab/merges), SD_ERR_NOMEM. */
sd_status sd_tokenizer_load_dir(const char *dir, sd_tokenizer **out, sd_error *err);

/* Load from explicit files: vocab.json + merges.txt. */
sd_status sd_tokenizer_load_files(const char *vocab_json, const char *merges_txt,
                                  sd_tokenizer **out, sd_error *err);

/* Load from OpenAI's gzipped merge list (bpe_simple_vocab_16e6.txt.gz); the
 * vocabulary is built the way OpenAI's simple_tokenizer builds it. */
sd_status sd_tokenizer_load_bpe_gz(const char *path, sd_tokenizer **out, sd_error *err);

/* 1 when dir (or dir/tokenizer) holds files sd_tokenizer_load_dir accepts. */
int sd_tokenizer_dir_has_files(const char *dir);

/* The resolution order every caller uses:
 *   1. model_dir (may be NULL), when it carries tokenizer files;
 *   2. configured_dir (from --tokenizer-dir; may be NULL);
 *   3. the SDFLOW_TOKENIZER_DIR environment variable;
 * else SD_ERR_NOT_FOUND with a message saying how to provide one. */
sd_status sd_tokenizer_resolve(const char *model_dir, const char *configured_dir,
                               sd_tokenizer **out, sd_error *err);

void sd_tokenizer_free(sd_tokenizer *tok); /* NULL-safe */

/* Vocabulary. */
int32_t sd_tokenizer_vocab_size(const sd_tokenizer *tok);
int32_t sd_tokenizer_bos(const sd_tokenizer *tok); /* <|startoftext|>, 49406 */
int32_t sd_tokenizer_eos(const sd_tokenizer *tok); /* <|endoftext|>, 49407 */
/* Token string of an id (byte-level form, e.g. "photo</w>"), NULL when out
 * of range. Owned by the tokenizer. */
const char *sd_tokenizer_token_str(const sd_tokenizer *tok, int32_t id);
/* Id of a token string, or -1. */
int32_t sd_tokenizer_token_id(const sd_tokenizer *tok, const char *token);

/* Tokenize UTF-8 text (len bytes; any bytes accepted, invalid UTF-8 counts
 * as U+FFFD) into raw ids without start/end tokens. *ids is malloc'd and
 * owned by the caller (non-NULL even when *n == 0).
 * Errors: SD_ERR_NOMEM only. */
sd_status sd_tokenizer_encode(const sd_tokenizer *tok, const char *text, size_t len,
                              int32_t **ids, size_t *n, sd_error *err);
/* The same, stopping with SD_ERR_CANCELLED once *stop is non-zero (polled
 * between words and every few thousand merges inside one; stop may be NULL).
 * The cost is O(n log n) in the text, whatever its words (a word of any
 * length is merged in O(m log m), not one pass per merge rule applied). */
sd_status sd_tokenizer_encode_ex(const sd_tokenizer *tok, const char *text, size_t len,
                                 const volatile sig_atomic_t *stop, int32_t **ids, size_t *n,
                                 sd_error *err);

/* Step 1 alone, for tests and debugging: the cleaned, lower-cased text as a
 * malloc'd NUL-terminated UTF-8 string (caller frees); NULL when out of
 * memory. */
char *sd_tokenizer_clean_text(const char *text, size_t len);

#endif
