/* prompt.h - ComfyUI prompt syntax -> 77-token chunks for a CLIP encoder.
 *
 * Reproduces comfy.sd1_clip.SDTokenizer.tokenize_with_weights:
 *   - "\(" and "\)" are literal parentheses;
 *   - "(text)" multiplies the weight by 1.1 per nesting level (as doubles:
 *     ((x)) = 1.2100000000000002); "(text:1.3)" REPLACES the weight with the
 *     number after the last ':' (when Python's float() accepts it; otherwise
 *     the ':' is text and the group still gets x1.1); unbalanced parentheses
 *     follow ComfyUI's parser exactly (an unclosed '(' or a stray ')' make
 *     the rest literal);
 *   - "[text]" is plain text (no de-emphasis), there is no BREAK / AND;
 *   - each weighted segment is tokenized as a whole by the CLIP tokenizer;
 *   - "embedding:NAME" (at the start or after ' ' / '\n') splices the rows of
 *     a textual-inversion file into the sequence, one slot per row; NAME runs
 *     to the next whitespace, a trailing ',' is retried without it; a missing
 *     embedding is dropped with a warning. Without embedding directories the
 *     text is tokenized literally;
 *   - chunking: [start] + up to max_length-2 tokens + [end] + padding (T5:
 *     no start token, one chunk of any length padded to min_length); a
 *     segment (or embedding) shorter than 8 tokens that does not fit is moved
 *     whole to the next chunk, longer ones are split; the last chunk gets the
 *     end token and padding. The empty prompt gives one chunk [start, end,
 *     pad...].
 *
 * Embedding files: .safetensors, and .pt/.bin read weights-only
 * (formats/torch_ckpt.h; a pickle that reader refuses is an error, not a skip,
 * since ComfyUI might read it and silently skipping would change the image).
 * The tensor is chosen as ComfyUI does: in a .pt/.bin the first tensor of
 * its 'string_to_param' dict, else the key named by embedding_key ("clip_l"/"clip_g"), else "bundle_emb.*.string_to_param.*"
 * keys, else "bundle_emb.*.<embedding_key>" keys, else the first tensor in
 * file order; [dim] is one row, [rows, dim] is rows rows. The tokenizer does
 * not check dim against the encoder: ComfyUI's encoder drops vectors whose
 * size differs from its embedding width (with a warning) and pads the chunk
 * at its end, so the encoder must do the same.
 */
#ifndef SD_PROMPT_H
#define SD_PROMPT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"
#include "models/text/tokenizer.h"

/* Receives one warning (missing embedding, unreadable embedding file). */
typedef void (*sd_prompt_warn_fn)(void *ud, const char *msg);

typedef struct sd_prompt_opts {
    /* tokens per chunk including start/end: 77. 0 = one chunk of any length,
     * not padded to a maximum (T5: ComfyUI's max_length 99999999 with
     * pad_to_max_length False) */
    int max_length;
    int min_length;     /* pad the last chunk to at least this many slots (T5: 256); 0 = none */
    int32_t pad_token;  /* padding id; -1 = the end token (CLIP-L), 0 for bigG */
    /* Directories searched (with all their subdirectories) for NAME,
     * NAME.safetensors, NAME.pt, NAME.bin. NULL/0 = embeddings disabled,
     * "embedding:" is then ordinary text. Borrowed for the call. */
    const char *const *embedding_dirs;
    size_t n_embedding_dirs;
    const char *embedding_key; /* "clip_l", "clip_g" or "clip_h" */
    int disable_weights;       /* 1: no (...) parsing, every token weight 1.0 */
    sd_prompt_warn_fn warn;    /* may be NULL */
    void *warn_ud;
    /* non-zero once the user asked to stop: tokenizing ends with
     * SD_ERR_CANCELLED (may be NULL) */
    const volatile sig_atomic_t *stop;
} sd_prompt_opts;

/* Defaults for CLIP-L (SD1, SDXL 'l'): 77, pad with end, key clip_l. */
void sd_prompt_opts_clip_l(sd_prompt_opts *o);
/* SD2's OpenCLIP-H (sd2_clip.py SD2ClipHTokenizer): 77, pad 0, key clip_h. */
void sd_prompt_opts_clip_h(sd_prompt_opts *o);
/* Defaults for OpenCLIP bigG (SDXL 'g'): 77, pad with 0, key clip_g. */
void sd_prompt_opts_clip_g(sd_prompt_opts *o);
/* T5-XXL (ComfyUI's T5XXLTokenizer for Flux): one chunk, no start token,
 * padded with 0 to min_length 256, key t5xxl. */
void sd_prompt_opts_t5xxl(sd_prompt_opts *o);
/* The same as SD3Tokenizer makes it: min_length 77. */
void sd_prompt_opts_t5xxl_sd3(sd_prompt_opts *o);
/* ComfyUI's Qwen3Tokenizer (Z-Image): one chunk of any length, no start or
 * end token, at least 1 slot (padded with 151643), weights syntax off
 * (disable_weights; "\(" escapes still apply), key qwen3_4b. */
void sd_prompt_opts_qwen3(sd_prompt_opts *o);

/* The vocabulary a prompt is tokenized with: an encoder of plain text (no
 * start/end tokens added) and the special tokens ComfyUI's SDTokenizer puts
 * around each chunk. */
typedef struct sd_prompt_vocab {
    const void *tok;
    /* text[0..len) -> *ids (malloc'd, owned by the caller, non-NULL);
     * SD_ERR_CANCELLED once *stop is non-zero (stop may be NULL) */
    sd_status (*encode)(const void *tok, const char *text, size_t len,
                        const volatile sig_atomic_t *stop, int32_t **ids, size_t *n, sd_error *err);
    int32_t start; /* start token, -1 = none (T5) */
    int32_t end;   /* end token, -1 = none */
} sd_prompt_vocab;

/* The CLIP BPE vocabulary (start <|startoftext|>, end <|endoftext|>). */
void sd_prompt_vocab_clip(sd_prompt_vocab *v, const sd_tokenizer *tok);

/* One position of a chunk. */
typedef struct sd_prompt_token {
    int32_t id;     /* vocabulary id; -1 when the slot is an embedding vector */
    int32_t embed;  /* index into sd_prompt_tokens.embeds, or -1 */
    int32_t row;    /* row of that embedding's vectors (0 when embed == -1) */
    int32_t word;   /* ComfyUI word id: 1-based segment/embedding group, 0 for start/end/pad */
    double weight;  /* 1.0 for start/end/pad */
} sd_prompt_token;

/* A textual-inversion embedding used by the prompt. */
typedef struct sd_prompt_embedding {
    char *name;          /* name as resolved (trailing commas stripped) */
    char *path;          /* file it was read from */
    sd_tensor *vectors;  /* [rows, dim] F32, owned */
} sd_prompt_embedding;

typedef struct sd_prompt_tokens {
    int n_chunks;
    int chunk_len;               /* = opts.max_length (max_length 0: the one chunk's length) */
    sd_prompt_token *tokens;     /* n_chunks * chunk_len, chunk-major */
    int n_embeds;
    sd_prompt_embedding *embeds;
} sd_prompt_tokens;

/* Tokenize a prompt. On success *out is owned by the caller
 * (sd_prompt_tokens_free). Errors: SD_ERR_INVALID (bad opts),
 * SD_ERR_UNSUPPORTED (a .pt/.bin embedding), SD_ERR_NOMEM. */
sd_status sd_prompt_tokenize(const sd_tokenizer *tok, const char *text,
                             const sd_prompt_opts *opts, sd_prompt_tokens **out,
                             sd_error *err);
/* The same over any vocabulary (pad_token -1 = v->end). */
sd_status sd_prompt_tokenize_vocab(const sd_prompt_vocab *v, const char *text,
                                   const sd_prompt_opts *opts, sd_prompt_tokens **out,
                                   sd_error *err);

void sd_prompt_tokens_free(sd_prompt_tokens *t); /* NULL-safe */

/* Append empty chunks ([start, end, pad...]) until t has n_chunks chunks, as
 * CLIPTextEncodeSDXL does to give 'l' and 'g' equal chunk counts. */
sd_status sd_prompt_tokens_pad_chunks(const sd_tokenizer *tok, const sd_prompt_opts *opts,
                                      sd_prompt_tokens *t, int n_chunks, sd_error *err);

/* 1 when any position has weight != 1.0 (ComfyUI then also encodes the
 * empty prompt and interpolates: z = z_empty + w * (z - z_empty)). */
int sd_prompt_tokens_has_weights(const sd_prompt_tokens *t);

/* Embedding vector of a slot (dim floats), or NULL for an ordinary token. */
const float *sd_prompt_token_vector(const sd_prompt_tokens *t, const sd_prompt_token *tk,
                                    int64_t *dim);

/* ---- the weight parser alone (tests, debugging, UIs) ---------------------- */

typedef struct sd_prompt_segment {
    char *text;     /* unescaped segment text, owned */
    double weight;
} sd_prompt_segment;

/* ComfyUI's token_weights(escape_important(text), 1.0) with each segment
 * unescaped. *segs is malloc'd (free with sd_prompt_segments_free); *n may
 * be 0. Errors: SD_ERR_NOMEM. */
sd_status sd_prompt_parse_weights(const char *text, sd_prompt_segment **segs, size_t *n,
                                  sd_error *err);
void sd_prompt_segments_free(sd_prompt_segment *segs, size_t n);

/* Python float(): 1 and *out when s[0..len) is accepted (surrounding
 * whitespace, sign, digits with '_' separators, exponent, inf/nan). */
int sd_prompt_parse_float(const char *s, size_t len, double *out);

#endif
