/* t5_tokenizer.h - the SentencePiece-Unigram tokenizer of T5 (text -> token
 * ids), read from a Hugging Face tokenizer.json.
 *
 * Reproduces what ComfyUI gets from transformers' T5TokenizerFast, i.e. the
 * Rust `tokenizers` library (0.22) running ComfyUI's
 * comfy/text_encoders/t5_tokenizer/tokenizer.json:
 *   1. added tokens ("<pad>", "</s>", "<unk>", "<extra_id_N>", all with
 *      normalized: false) are cut out of the raw text first, leftmost-longest;
 *   2. each remaining piece is normalized by the file's normalizer: here a
 *      Sequence of Precompiled (SentencePiece's nmt_nfkc charsmap, read from
 *      the file: models/text/spm_charsmap.h), Strip (right) and Replace
 *      (regex ' {2,}' -> U+2581);
 *   3. the Metaspace pre-tokenizer replaces ' ' by its replacement U+2581,
 *      prepends one to the piece that starts the text (prepend_scheme
 *      "first"; "always" and "never" are read too) and splits before every
 *      replacement character;
 *   4. each word is segmented by the Unigram model: the best-scoring path
 *      (sum of piece scores in double, ties to the earlier split) over the
 *      pieces that match, a character no piece starts with becoming the
 *      unknown piece (score min_score - 10), consecutive unknown pieces fused
 *      into one; byte_fallback models spell unknown text as <0xXX> pieces;
 *   5. with add_special, the TemplateProcessing's tokens around $A ('$A </s>').
 * Tokenizing is linear in the text length (times the longest piece).
 *
 * The file is untrusted input: a model that is not Unigram, or any part this
 * reader does not implement exactly (another normalizer, a regex other than a
 * repeated character, added tokens that strip or match normalized text,
 * truncation or padding settings), is refused with an error naming the file
 * rather than tokenized differently from the reference.
 *
 * Thread safety: a loaded tokenizer is read-only and may be shared.
 */
#ifndef SD_T5_TOKENIZER_H
#define SD_T5_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "models/text/prompt.h"

typedef struct sd_t5_tokenizer sd_t5_tokenizer;

/* Where a tokenizer directory keeps it (ComfyUI's folder name), and where a
 * ComfyUI installation ships it. */
#define SD_T5_TOKENIZER_SUBDIR "t5_tokenizer"
#define SD_T5_TOKENIZER_COMFY_SUBDIR "comfy/text_encoders/t5_tokenizer"
#define SD_T5_TOKENIZER_FILE "tokenizer.json"

/* Load a tokenizer.json. On success *out owns the tokenizer.
 * Errors: SD_ERR_NOT_FOUND / SD_ERR_IO (the file), SD_ERR_FORMAT (not JSON,
 * malformed fields), SD_ERR_UNSUPPORTED (not a Unigram model, or settings
 * this reader does not implement), SD_ERR_NOMEM; messages name the file. */
sd_status sd_t5_tokenizer_load(const char *path, sd_t5_tokenizer **out, sd_error *err);

/* The same from JSON text in memory (len bytes, need not be NUL-terminated);
 * `source` names it in errors. */
sd_status sd_t5_tokenizer_load_json(const char *json, size_t len, const char *source,
                                    sd_t5_tokenizer **out, sd_error *err);

/* The resolution order (the first place holding tokenizer.json wins):
 *   1. model_dir/t5_tokenizer/ (beside the model file; may be NULL);
 *   2. configured_dir/t5_tokenizer/ (--tokenizer-dir; may be NULL);
 *   3. $SDFLOW_TOKENIZER_DIR/t5_tokenizer/;
 *   4. comfyui_dir/comfy/text_encoders/t5_tokenizer/ (--comfyui-dir; may be NULL);
 * else SD_ERR_NOT_FOUND with a message naming every place searched. */
sd_status sd_t5_tokenizer_resolve(const char *model_dir, const char *configured_dir,
                                  const char *comfyui_dir, sd_t5_tokenizer **out,
                                  sd_error *err);

void sd_t5_tokenizer_free(sd_t5_tokenizer *t); /* NULL-safe */

const char *sd_t5_tokenizer_source(const sd_t5_tokenizer *t); /* the file it came from */
int32_t sd_t5_tokenizer_vocab_size(const sd_t5_tokenizer *t); /* model pieces (32100 for T5) */
/* Piece string of a model id (NULL when out of range); owned by t. */
const char *sd_t5_tokenizer_piece(const sd_t5_tokenizer *t, int32_t id);

/* Tokenize UTF-8 text (len bytes; invalid UTF-8 reads as U+FFFD). With
 * add_special the post-processor's tokens are added (T5: a final </s>).
 * *ids is malloc'd, owned by the caller, non-NULL even when *n == 0.
 * Errors: SD_ERR_NOMEM; SD_ERR_INVALID when the text needs the unknown
 * piece and the model has none (unk_id null). */
sd_status sd_t5_tokenizer_encode(const sd_t5_tokenizer *t, const char *text, size_t len,
                                 int add_special, int32_t **ids, size_t *n, sd_error *err);

/* The prompt vocabulary ComfyUI's T5XXLTokenizer uses around t (prompt.h):
 * no start token; end = the first id the tokenizer gives the empty text
 * (SDTokenizer's tokenizer('')["input_ids"][0]: </s> = 1); t borrowed. */
sd_status sd_t5_tokenizer_prompt_vocab(const sd_t5_tokenizer *t, sd_prompt_vocab *v,
                                       sd_error *err);

#endif
