/* text_encode_internal.h - what the text-encoder family files share
 * (text_encode.c: loading, composing, the CLIP / T5 / Flux encodings;
 * text_encode_sd3.c: SD3's three encoders; text_encode_zimage.c: Z-Image's
 * Qwen3). Private to models/text. */
#ifndef SD_TEXT_ENCODE_INTERNAL_H
#define SD_TEXT_ENCODE_INTERNAL_H

#include "models/text/text_encode.h"

/* How one transformer is used within a family. */
typedef struct te_role {
    sd_clip *clip;
    int default_layer; /* 0 = "last" (final-LN last layer), else hidden index < 0 */
    int ln_hidden;     /* final LN on a selected hidden layer */
    int32_t pad;       /* pad token of the tokenizer for this encoder */
    int projected;     /* pooled output is text_projection'd */
    char name;         /* tokenized as 'l' (pad with end, key clip_l), 'g' or 'h'
                        * (pad 0, embedding key clip_g / clip_h) */
} te_role;

struct sd_text_encoder {
    sd_te_kind kind;
    te_role l, g; /* CLIP-L and the OpenCLIP tower (bigG, or H for SD2); clip == NULL when absent */
    sd_t5 *t5;    /* FLUX, SD3, T5 */
    sd_qwen3 *qwen; /* ZIMAGE */
    const sd_tokenizer *tok;
    const sd_t5_tokenizer *t5tok;
    const sd_qwen_tokenizer *qtok;
    int borrowed; /* the models belong to other encoders (sd_text_encoder_combine) */
};

/* The roles te->kind gives its CLIP transformers (either may be NULL). */
void sd_te_set_roles(sd_text_encoder *te, sd_clip *clip_l, sd_clip *clip_g);

/* A warning through o->warn (nothing when o or o->warn is NULL). */
void sd_te_warnf(const sd_text_encode_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One CLIP role over all chunks of t: *cond [1, 77*k, W] and *pooled [1, P]
 * (the first chunk's), backend tensors owned by the caller; ComfyUI's token
 * weighting against the empty prompt. */
sd_status sd_te_encode_role(const te_role *r, const sd_prompt_tokens *t, int clip_skip,
                            const sd_text_encode_opts *o, sd_bt **cond, sd_bt **pooled,
                            sd_error *err);

/* te's T5 over the one chunk of t: *cond [1, len, d_model] (backend; f16
 * compute is lifted to f32 with a warning). */
sd_status sd_te_encode_t5(const sd_text_encoder *te, const sd_prompt_tokens *t, int clip_skip,
                          const sd_text_encode_opts *o, sd_bt **cond, sd_error *err);

/* Download and free a backend tensor (NULL in, or out of memory: NULL). */
sd_tensor *sd_te_to_host(sd_bt *t);

/* The prompt options of role r with o's embedding dirs and warnings. */
void sd_te_prompt_opts(const te_role *r, const sd_text_encode_opts *o, sd_prompt_opts *po);

/* Tokenize text for role r (nothing when the role has no model: *t NULL). */
sd_status sd_te_tokenize(const sd_text_encoder *te, const te_role *r, const char *text,
                         const sd_text_encode_opts *o, sd_prompt_tokens **t, sd_error *err);

/* Tokenize text with te's T5 vocabulary as ComfyUI's T5XXLTokenizer for
 * Flux (sd3 0: sd_prompt_opts_t5xxl) or SD3 (sd_prompt_opts_t5xxl_sd3). */
sd_status sd_te_tokenize_t5(const sd_text_encoder *te, const char *text, int sd3,
                            const sd_text_encode_opts *o, sd_prompt_tokens **t, sd_error *err);

/* ZIMAGE from text: the chat template, the Qwen2 tokenizer, the Qwen3. */
sd_status sd_text_encode_zimage(const sd_text_encoder *te, const char *text, int clip_skip,
                                const sd_text_encode_opts *o, sd_tensor **cond, sd_tensor **mask,
                                sd_error *err);

#endif
