/* qwen_tokenizer.h - the Qwen2 byte-level BPE tokenizer (text -> token ids),
 * read from ComfyUI's comfy/text_encoders/qwen25_tokenizer/ files:
 * vocab.json, merges.txt and tokenizer_config.json (its added tokens).
 *
 * Reproduces what ComfyUI gets from transformers' Qwen2Tokenizer, i.e. the
 * pipeline transformers' Qwen2Converter builds over those files and the Rust
 * `tokenizers` library (0.22) runs:
 *   1. added tokens (tokenizer_config.json's added_tokens_decoder:
 *      "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", ...; all
 *      normalized false, no lstrip / rstrip / single_word) are cut out of
 *      the raw text first, leftmost-longest, whatever their "special" flag
 *      (split_special_tokens false);
 *   2. each piece between them is NFC-normalized (Unicode 9.0 data as the
 *      library's normalizer has it: models/text/unicode_hf.h);
 *   3. split by Qwen2's pre-tokenizer regex (behaviour "isolated")
 *        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
 *         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *      with Oniguruma's semantics (first matching alternative, greedy with
 *      backtracking; classes of Unicode 16.0; case-insensitive 's matching
 *      U+017F as Unicode case folding does), evaluated by a hand-written
 *      matcher in linear time;
 *   4. each piece's UTF-8 bytes mapped through GPT-2's bytes_to_unicode
 *      table and merged by BPE: the pair of lowest merge rank (leftmost
 *      among equal ranks) merged first until none applies; a byte whose
 *      character is not in the vocabulary is dropped (no unknown token).
 * No start or end token is added.
 *
 * The files are untrusted input: a vocab.json that is not a JSON object of
 * strings to ids, a merges.txt line that is not two tokens, a merge of
 * tokens the vocabulary lacks (or whose result it lacks), a tokenizer_config
 * whose added tokens ask for lstrip / rstrip / single_word / normalized
 * matching (not implemented, so refused rather than tokenized differently)
 * or are longer than 256 bytes, ids outside [0, 2^31): refused with an error
 * naming the file (and line). Tokenizing is linear in the text length
 * (times the longest added token, at most 256 bytes) plus n log n for BPE
 * within a piece.
 *
 * Thread safety: a loaded tokenizer is read-only and may be shared.
 */
#ifndef SD_QWEN_TOKENIZER_H
#define SD_QWEN_TOKENIZER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "models/text/prompt.h"

typedef struct sd_qwen_tokenizer sd_qwen_tokenizer;

/* ComfyUI's folder name for the vocabulary (in a --tokenizer-dir, and under
 * a ComfyUI installation), and the files it holds. */
#define SD_QWEN_TOKENIZER_SUBDIR "qwen25_tokenizer"
#define SD_QWEN_TOKENIZER_COMFY_SUBDIR "comfy/text_encoders/qwen25_tokenizer"
#define SD_QWEN_VOCAB_FILE "vocab.json"
#define SD_QWEN_MERGES_FILE "merges.txt"
#define SD_QWEN_CONFIG_FILE "tokenizer_config.json"

/* Load the three files of dir. On success *out owns the tokenizer.
 * Errors: SD_ERR_NOT_FOUND naming the missing file, SD_ERR_IO,
 * SD_ERR_FORMAT / SD_ERR_UNSUPPORTED (see above; the message names the file
 * and, for merges.txt, the line), SD_ERR_NOMEM. */
sd_status sd_qwen_tokenizer_load_dir(const char *dir, sd_qwen_tokenizer **out, sd_error *err);

/* The same from the files' bytes in memory (fuzzing, tests): each buffer
 * need not be NUL-terminated; config may be NULL (no added tokens).
 * `source` names them in errors. */
sd_status sd_qwen_tokenizer_load_mem(const char *vocab, size_t vocab_len, const char *merges,
                                     size_t merges_len, const char *config, size_t config_len,
                                     const char *source, sd_qwen_tokenizer **out, sd_error *err);

/* 1 when dir holds the three files. */
int sd_qwen_tokenizer_dir_has_files(const char *dir);

/* The resolution order (the first directory holding the three files wins):
 *   1. model_dir/qwen25_tokenizer/ (beside the model file; may be NULL);
 *   2. configured_dir/qwen25_tokenizer/ (--tokenizer-dir; may be NULL);
 *   3. $SDFLOW_TOKENIZER_DIR/qwen25_tokenizer/;
 *   4. comfyui_dir/comfy/text_encoders/qwen25_tokenizer/ (--comfyui-dir);
 * else SD_ERR_NOT_FOUND naming every place searched (and, for a folder that
 * exists but lacks a file, which file). A folder that holds all three but
 * fails to load is that error, not a fall-through. */
sd_status sd_qwen_tokenizer_resolve(const char *model_dir, const char *configured_dir,
                                    const char *comfyui_dir, sd_qwen_tokenizer **out,
                                    sd_error *err);

void sd_qwen_tokenizer_free(sd_qwen_tokenizer *t); /* NULL-safe */

const char *sd_qwen_tokenizer_source(const sd_qwen_tokenizer *t);
/* Id of a token (byte-level form, e.g. "Ġcat", or an added token's content),
 * or -1. */
int32_t sd_qwen_tokenizer_token_id(const sd_qwen_tokenizer *t, const char *token);
/* Token string of an id (NULL when no token has it); owned by t. */
const char *sd_qwen_tokenizer_token(const sd_qwen_tokenizer *t, int32_t id);

/* Tokenize UTF-8 text (len bytes; invalid UTF-8 reads as U+FFFD). *ids is
 * malloc'd, owned by the caller, non-NULL even when *n == 0.
 * Errors: SD_ERR_NOMEM. */
sd_status sd_qwen_tokenizer_encode(const sd_qwen_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, size_t *n, sd_error *err);
/* The same, stopping with SD_ERR_CANCELLED once *stop is non-zero (polled
 * between pieces and every 4096 merges inside one; stop may be NULL). */
sd_status sd_qwen_tokenizer_encode_ex(const sd_qwen_tokenizer *t, const char *text, size_t len,
                                      const volatile sig_atomic_t *stop, int32_t **ids, size_t *n,
                                      sd_error *err);

/* The prompt vocabulary ComfyUI's Qwen3Tokenizer (SDTokenizer) uses around
 * t: no start and no end token; t borrowed. */
void sd_qwen_tokenizer_prompt_vocab(const sd_qwen_tokenizer *t, sd_prompt_vocab *v);

/* ---- the pre-tokenizer alone (tests, fuzzing) -------------------------------- */

/* Splits cps[0..n) by Qwen2's regex: calls fn(ud, start, end) for each
 * piece in order; the pieces cover the text. Returns 0, or fn's first
 * non-zero return. */
typedef int (*sd_qwen_piece_fn)(void *ud, size_t start, size_t end);
int sd_qwen_pretokenize(const uint32_t *cps, size_t n, sd_qwen_piece_fn fn, void *ud);

#endif
