/* text_encode.h - prompt text -> CONDITIONING tensors, with ComfyUI's
 * semantics (CLIPTextEncode, CLIPSetLastLayer, CLIPTextEncodeSDXL).
 *
 * A text encoder is one or two CLIP transformers (models/text/clip.h) with the
 * role each plays in a model family:
 *   SD1          CLIP-L: hidden state of the last layer WITH final LN by
 *                default; pooled = final-LN state at the first end token,
 *                unprojected.
 *   SDXL         CLIP-L ('l', pads with 49407) and OpenCLIP bigG ('g', pads
 *                with 0): both give layer num_layers-2 WITHOUT final LN by
 *                default; cond = concat(l, g) along channels (cut to the
 *                shorter token count); pooled = g's final-LN state at the
 *                first end token times text_projection (unprojected when
 *                the bigG has no text_projection, i.e. an identity one).
 *   SDXL_REFINER bigG only, as the 'g' of SDXL.
 *   FLUX         CLIP-L + T5-XXL (comfy/text_encoders/flux.py FluxClipModel):
 *                cond = the T5's final-LN hidden state [1, L, d_model] of
 *                ComfyUI's T5XXLTokenizer tokens (one chunk, </s>, padded with
 *                0 to 256 tokens, never cut; no attention mask), pooled =
 *                CLIP-L's final-LN state at the first end token,
 *                UNprojected (return_projected_pooled=False); CLIP-L's own
 *                hidden states are discarded. T5 runs in f32 (bf16 allowed);
 *                a text encoder asked for f16 computes the T5 in f32 and
 *                warns, as T5 overflows f16.
 *   SD3          CLIP-L + bigG + T5-XXL, any of them absent
 *                (comfy/text_encoders/sd3_clip.py SD3ClipModel): l and g
 *                give layer num_layers-2 WITHOUT final LN (CLIP-L's pooled
 *                output unprojected, bigG's projected); lg = concat(l, g)
 *                along channels cut to the shorter token count (g alone is
 *                put after CLIP-L's width of zeros), zero-padded on the
 *                right to the context width; cond = concat(lg, t5) on the
 *                token axis (T5: final-LN hidden state of ComfyUI's
 *                T5XXLTokenizer tokens, min_length 77, no mask); pooled =
 *                concat(l pooled, g pooled), zeros for an absent part or
 *                when no CLIP tokens are given. Widths come from the
 *                models (ComfyUI's literals 768 / 1280 / 4096 are the real
 *                models' widths; an absent part takes its literal). No CLIP
 *                tokens and no T5: zeros [1, 77, context width]; empty T5
 *                tokens: the T5 of [</s>] (one token). CLIPTextEncodeSD3's
 *                empty-text rules: sd_text_encode_sd3.
 *   ZIMAGE       Qwen3-4B (comfy/text_encoders/z_image.py): the prompt in
 *                ComfyUI's chat template ('<|im_start|>user\n{}<|im_end|>\n
 *                <|im_start|>assistant\n'), tokenized by the Qwen2 tokenizer
 *                as one sequence (weights syntax off, "\(" escapes kept,
 *                special tokens typed in the prompt are single tokens, no
 *                textual inversion); cond = the residual stream after layer
 *                num_layers-2 (no final norm) [1, n, hidden] with the
 *                attention mask [1, n] (1 up to the first <|endoftext|>,
 *                0 from there, as ComfyUI's pad rule); no pooled output.
 *                CLIPSetLastLayer picks another layer (without the final
 *                norm; deeper than the model: the final-normed last layer).
 *                Weights as stored (BF16); f16 compute is lifted to f32.
 *   T5           a T5-XXL file alone (the part a Flux or SD3 CLIP is made of
 *                with CLIP files: sd_text_encoder_combine); encoding with it
 *                alone is SD_ERR_UNSUPPORTED (ComfyUI uses a lone T5 for
 *                families sdflow does not run; CLIPLoader type sd3 makes it
 *                an SD3 encoder).
 *   SD2          OpenCLIP ViT-H ('h', pads with 0, embedding key clip_h;
 *                held in the 'g' slot): layer num_layers-2 WITH final LN by
 *                default (ComfyUI's sd2_clip.py "penultimate" on
 *                SDClipModel's layer_norm_hidden_state=True); pooled = final-LN
 *                state at the first end token times text_projection.
 * CLIPSetLastLayer (clip_skip, -1..-24; 0 = not set): each encoder returns
 * the output of layer num_layers+clip_skip, with final LN for SD1 and SD2 and
 * without for SDXL; a clip_skip deeper than an encoder's layer count selects
 * that encoder's final-LN last layer (ComfyUI's "last"). Pooled outputs
 * always come from the final-LN last layer.
 *
 * CLIPSetLastLayer on a FLUX encoder selects the T5 block the same way
 * (ComfyUI sets the layer on both halves; the T5 output keeps its final LN).
 *
 * Per encoder, as ComfyUI's ClipTokenWeightEncoder: each 77-token chunk is
 * encoded separately and the chunks are concatenated on the token axis
 * (cond [1, 77*k, D]); pooled comes from the first chunk. When any weight of
 * the prompt differs from 1.0 the empty prompt ([start, end, pad...]) is
 * encoded in the same batch and every token with weight w != 1 becomes
 * (z - z_empty) * w + z_empty (float32, w rounded to float); for the T5 the
 * empty prompt is [</s>, pad...] of the prompt's length. Textual
 * inversion vectors replace token embeddings at their slots; a vector whose
 * width differs from the encoder's is dropped with a warning, the rest of
 * the chunk moves left and pad tokens fill its end (ComfyUI's behaviour).
 *
 * Ownership: the encoder owns its sd_clip models; the tokenizer is borrowed
 * and must outlive the encoder (it may be NULL and set later; text entry
 * points then fail with SD_ERR_INVALID). Outputs are new host tensors owned
 * by the caller. Not thread-safe per backend (see clip.h).
 */
#ifndef SD_TEXT_ENCODE_H
#define SD_TEXT_ENCODE_H

#include "formats/safetensors.h"
#include "models/text/clip.h"
#include "models/text/prompt.h"
#include "models/text/qwen3.h"
#include "models/text/qwen_tokenizer.h"
#include "models/text/t5.h"
#include "models/text/t5_tokenizer.h"
#include "models/text/tokenizer.h"

typedef enum sd_te_kind {
    SD_TE_SD1 = 1,
    SD_TE_SDXL = 2,
    SD_TE_SDXL_REFINER = 3,
    SD_TE_SD2 = 4,
    SD_TE_FLUX = 5, /* CLIP-L (pooled) + T5-XXL (cond) */
    SD_TE_T5 = 6,   /* a T5 alone (standalone t5xxl file) */
    SD_TE_SD3 = 7,  /* CLIP-L + bigG + T5-XXL, each optional */
    SD_TE_ZIMAGE = 8 /* Qwen3-4B (Z-Image) */
} sd_te_kind;

typedef struct sd_text_encoder sd_text_encoder;

/* ComfyUI's SD3ClipModel literals: the context width lg is padded to and
 * the widths an absent CLIP-L / bigG takes (their real widths). */
#define SD_TE_SD3_CONTEXT 4096
#define SD_TE_SD3_L_WIDTH 768
#define SD_TE_SD3_G_WIDTH 1280

/* Single-file checkpoint key prefixes. */
#define SD_TE_PREFIX_SD1 "cond_stage_model.transformer."
#define SD_TE_PREFIX_SDXL_L "conditioner.embedders.0.transformer."
#define SD_TE_PREFIX_SDXL_G "conditioner.embedders.1.model."
#define SD_TE_PREFIX_REFINER_G "conditioner.embedders.0.model."
#define SD_TE_PREFIX_SD2 "cond_stage_model.model."
/* The Comfy-Org single-file Flux checkpoints (flux1-dev-fp8.safetensors). */
#define SD_TE_PREFIX_FLUX_T5 "text_encoders.t5xxl.transformer."
#define SD_TE_PREFIX_FLUX_L "text_encoders.clip_l.transformer."
/* SD3 / SD3.5 single files (sd3.5_medium_incl_clips_t5xxlfp8): the same
 * CLIP-L and T5 prefixes as Flux's, plus the bigG. */
#define SD_TE_PREFIX_SD3_L SD_TE_PREFIX_FLUX_L
#define SD_TE_PREFIX_SD3_G "text_encoders.clip_g.transformer."
#define SD_TE_PREFIX_SD3_T5 SD_TE_PREFIX_FLUX_T5
/* Z-Image single files (ComfyUI's ZImage clip_target). */
#define SD_TE_PREFIX_ZIMAGE "text_encoders.qwen3_4b.transformer."
/* ComfyUI's Qwen3-4B width (detect_te_model: a Qwen3 2560 wide is
 * Z-Image's; 2048 is Ovis's Qwen3-2B), and its pad token. */
#define SD_TE_QWEN3_4B_WIDTH 2560
#define SD_TE_QWEN3_PAD 151643

/* Assemble an encoder from loaded models. Takes ownership of clip_l and
 * clip_g (also on failure). SD1 needs clip_l only, SDXL both, SDXL_REFINER
 * clip_g only, SD2 its OpenCLIP-H as clip_g only. Errors: SD_ERR_INVALID (wrong parts for the kind),
 * SD_ERR_NOMEM. */
sd_status sd_text_encoder_new(sd_te_kind kind, sd_clip *clip_l, sd_clip *clip_g,
                              const sd_tokenizer *tok, sd_text_encoder **out, sd_error *err);

/* What a file's text-encoder keys make (0 when it has none): the
 * single-file layouts below (text_encoders.clip_g.* makes SD3, else
 * text_encoders.t5xxl.* Flux), or a standalone text-encoder file with bare
 * keys: an HF T5 encoder (encoder.block.N..., shared.weight) is T5; an HF
 * CLIP (text_model.*) or an OpenCLIP text tower (transformer.resblocks.N) is
 * told apart by ComfyUI's detect_te_model layer counts: a layer 30 makes a
 * bigG (SDXL_REFINER, the lone-G encoder), a layer 22 a ViT-H (SD2), else a
 * CLIP-L (SD1); a Qwen3 decoder (model.layers.N.self_attn.q_norm) is
 * ZIMAGE whatever its width (loading checks the width). Names and shapes
 * only. */
sd_te_kind sd_text_encoder_detect(const sd_st_file *f);

/* The vocabularies encoding with a file's text encoder needs (0 when it
 * has none): SD_TE_VOCAB_* bits, by the parts the file holds (an SD3 file
 * without its T5 needs no T5 vocabulary). */
enum { SD_TE_VOCAB_CLIP = 1, SD_TE_VOCAB_T5 = 2, SD_TE_VOCAB_QWEN = 4 };
unsigned sd_text_encoder_file_vocabs(const sd_st_file *f);

/* What loading needs beyond the file. */
typedef struct sd_te_load_opts {
    const sd_tokenizer *tok;         /* CLIP vocabulary (borrowed; may be NULL, set later) */
    const sd_t5_tokenizer *t5tok;    /* T5 vocabulary for T5 / FLUX (borrowed; may be NULL) */
    /* CLIP-L / bigG attention heads when not width / 64: tiny test models,
     * as ComfyUI's clip_l_model_config / clip_g_model_config
     * (model_options); 0 = width / 64 */
    int clip_l_heads;
    int clip_g_heads;
    /* The width a Qwen3 must have to be taken for Qwen3-4B (Z-Image's): 0 =
     * SD_TE_QWEN3_4B_WIDTH. Tiny test models, as the reference's
     * detect_te_model override; another width is refused naming the file. */
    int qwen3_4b_width;
    const sd_qwen_tokenizer *qtok; /* Qwen2 vocabulary for ZIMAGE (borrowed; may be NULL) */
} sd_te_load_opts;

/* sd_text_encoder_load with those options (NULL = none). */
sd_status sd_text_encoder_load_ex(sd_backend *be, sd_st_file *f, const sd_te_load_opts *o,
                                  sd_text_encoder **out, sd_error *err);

/* Detect the family from a single-file checkpoint's text-encoder keys
 * (SDXL: conditioner.embedders.0.transformer + .1.model; refiner:
 * conditioner.embedders.0.model; SD1: cond_stage_model.transformer; SD2:
 * cond_stage_model.model, or conditioner.embedders.0.model in a file whose
 * UNet has no label_emb, the SGM layout of SD2; Flux and SD3 single files:
 * text_encoders.{clip_l,clip_g,t5xxl}.transformer.*, each part present or
 * not as ComfyUI's SD3 clip_target finds them) and load it. Errors:
 * SD_ERR_NOT_FOUND (no text encoder), sd_clip_load's errors. */
sd_status sd_text_encoder_load(sd_backend *be, sd_st_file *f, const sd_tokenizer *tok,
                               sd_text_encoder **out, sd_error *err);
void sd_text_encoder_free(sd_text_encoder *te); /* NULL-safe */

/* A text encoder of `kind` made of the models of several loaded encoders
 * (the parts of standalone text-encoder files: DualCLIPLoader's type), which
 * it borrows, tokenizers included: the parts must outlive it. FLUX takes a
 * CLIP-L part (SD1) and a T5 part, SDXL a CLIP-L part and a bigG part
 * (SDXL_REFINER), in any order, as ComfyUI's FluxClipModel / SDXLClipModel
 * sort files by their keys; SD3 any non-empty set of distinct CLIP-L, bigG
 * and T5 parts (TripleCLIPLoader: all three; DualCLIPLoader / CLIPLoader
 * type sd3: two / one); a single part of another kind may also be taken
 * as itself (CLIPLoader: kind = the part's own). Errors: SD_ERR_UNSUPPORTED
 * (a kind that is not made this way, or parts that do not make it; the
 * message names what was given and what is needed), SD_ERR_NOMEM. */
sd_status sd_text_encoder_combine(sd_te_kind kind, const sd_text_encoder *const *parts, int n,
                                  sd_text_encoder **out, sd_error *err);

/* A new encoder like base (kind, roles, tokenizers, settings) over other
 * models of the same parts, which it owns (also on failure): l, g, t5 and
 * qwen replace base's CLIP-L, OpenCLIP tower, T5 and Qwen3; each must be
 * given exactly where base has that part (LoRA views:
 * sd_lora_text_encoder_view). Errors: SD_ERR_INVALID (parts that differ
 * from base's), SD_ERR_NOMEM. */
sd_status sd_text_encoder_with_models(const sd_text_encoder *base, sd_clip *l, sd_clip *g, sd_t5 *t5,
                                      sd_qwen3 *qwen, sd_text_encoder **out, sd_error *err);

sd_te_kind sd_text_encoder_kind(const sd_text_encoder *te);
/* "sd1", "sdxl", "sdxl_refiner", "sd2", "flux", "t5xxl", "sd3", "zimage" */
const char *sd_te_kind_name(sd_te_kind kind);
const sd_clip *sd_text_encoder_clip_l(const sd_text_encoder *te); /* NULL when absent */
const sd_clip *sd_text_encoder_clip_g(const sd_text_encoder *te);
const sd_t5 *sd_text_encoder_t5(const sd_text_encoder *te);       /* NULL when absent */
const sd_qwen3 *sd_text_encoder_qwen3(const sd_text_encoder *te); /* NULL when absent */
void sd_text_encoder_set_qwen_tokenizer(sd_text_encoder *te, const sd_qwen_tokenizer *tok);
const sd_qwen_tokenizer *sd_text_encoder_qwen_tokenizer(const sd_text_encoder *te);
void sd_text_encoder_set_tokenizer(sd_text_encoder *te, const sd_tokenizer *tok);
const sd_tokenizer *sd_text_encoder_tokenizer(const sd_text_encoder *te);
void sd_text_encoder_set_t5_tokenizer(sd_text_encoder *te, const sd_t5_tokenizer *tok);
const sd_t5_tokenizer *sd_text_encoder_t5_tokenizer(const sd_text_encoder *te);
/* Channel width of cond (768 SD1, 2048 SDXL, 1280 refiner, 1024 SD2, 4096
 * Flux/T5/SD3, 2560 Z-Image) and of pooled (0 for T5 alone and Z-Image,
 * 2048 SD3). */
int sd_text_encoder_cond_dim(const sd_text_encoder *te);
int sd_text_encoder_pooled_dim(const sd_text_encoder *te);

typedef struct sd_text_encode_opts {
    /* Textual-inversion directories (see prompt.h); NULL/0 = "embedding:"
     * is plain text. Borrowed for the call. */
    const char *const *embedding_dirs;
    size_t n_embedding_dirs;
    sd_prompt_warn_fn warn; /* missing/ignored embeddings; may be NULL */
    void *warn_ud;
    /* non-zero once the user asked to stop: tokenizing and encoding end
     * with SD_ERR_CANCELLED (checked between words and chunk batches; may
     * be NULL) */
    const volatile sig_atomic_t *interrupt;
} sd_text_encode_opts;

/* CLIPTextEncode: tokenize `text` for every encoder of the model and encode.
 * opts may be NULL. *cond = [1, 77*k, cond_dim], *pooled = [1, pooled_dim]
 * (F32, host). Errors: SD_ERR_INVALID (clip_skip > 0, no tokenizer), the
 * tokenizer's and the model's errors. */
sd_status sd_text_encode(const sd_text_encoder *te, const char *text, int clip_skip,
                         const sd_text_encode_opts *opts, sd_tensor **cond, sd_tensor **pooled,
                         sd_error *err);

/* sd_text_encode plus the attention mask a family stores in the
 * conditioning (*mask [1, n] I64, host; NULL for the families without one:
 * all but ZIMAGE); *pooled is NULL for ZIMAGE. mask may be NULL when the
 * caller does not want it. */
sd_status sd_text_encode_masked(const sd_text_encoder *te, const char *text, int clip_skip,
                                const sd_text_encode_opts *opts, sd_tensor **cond,
                                sd_tensor **pooled, sd_tensor **mask, sd_error *err);

/* ComfyUI's ZImageTokenizer: text in the chat template, tokenized as one
 * sequence (prompt.h's sd_prompt_opts_qwen3). */
sd_status sd_text_tokenize_zimage(const sd_qwen_tokenizer *tok, const char *text,
                                  sd_prompt_tokens **out, sd_error *err);
/* The same, stopping with SD_ERR_CANCELLED once *stop is non-zero. */
sd_status sd_text_tokenize_zimage_ex(const sd_qwen_tokenizer *tok, const char *text,
                                     const volatile sig_atomic_t *stop, sd_prompt_tokens **out,
                                     sd_error *err);

/* The ZIMAGE encoding of tokens (one chunk, as sd_text_tokenize_zimage
 * makes): *cond [1, n, hidden], *mask [1, n] I64 (both host). */
sd_status sd_text_encode_zimage_tokens(const sd_text_encoder *te, const sd_prompt_tokens *t,
                                       int clip_skip, const sd_text_encode_opts *opts,
                                       sd_tensor **cond, sd_tensor **mask, sd_error *err);

/* CLIPTextEncodeSDXL's text part: text_g for bigG, text_l for CLIP-L, the
 * shorter one padded with empty chunks to the other's chunk count. Needs an
 * SDXL encoder (SD_ERR_INVALID otherwise). */
sd_status sd_text_encode_sdxl(const sd_text_encoder *te, const char *text_g, const char *text_l,
                              int clip_skip, const sd_text_encode_opts *opts, sd_tensor **cond,
                              sd_tensor **pooled, sd_error *err);

/* CLIPTextEncodeFlux's text part: clip_l for CLIP-L (pooled), t5xxl for the
 * T5 (cond). Needs a FLUX encoder (SD_ERR_INVALID otherwise). */
sd_status sd_text_encode_flux(const sd_text_encoder *te, const char *clip_l, const char *t5xxl,
                              int clip_skip, const sd_text_encode_opts *opts, sd_tensor **cond,
                              sd_tensor **pooled, sd_error *err);

/* CLIPTextEncodeSD3's text part (comfy_extras/nodes_sd3.py): each text
 * for its encoder; with empty_prompt_padding 0 (empty_padding "none") an
 * empty text gives that encoder no tokens at all (empty l and g: no CLIP
 * conditioning and zero pooled; empty t5xxl: the T5 of [</s>]), with 1
 * ("empty_prompt") the empty text is tokenized as any other; when l and g
 * then have different chunk counts the shorter is extended with empty
 * chunks. Needs an SD3 encoder (SD_ERR_INVALID otherwise). */
sd_status sd_text_encode_sd3(const sd_text_encoder *te, const char *clip_l, const char *clip_g,
                             const char *t5xxl, int empty_prompt_padding, int clip_skip,
                             const sd_text_encode_opts *opts, sd_tensor **cond, sd_tensor **pooled,
                             sd_error *err);

/* The SD3 encoding of tokenized prompts; NULL = an empty token list (no
 * tokens for that encoder). l and g must both be given or both be NULL
 * when the encoder has both CLIPs (what the nodes produce); tokens of an
 * encoder the model lacks are ignored. t5: one chunk of any length. Only
 * opts->warn is used. */
sd_status sd_text_encode_sd3_tokens(const sd_text_encoder *te, const sd_prompt_tokens *l,
                                    const sd_prompt_tokens *g, const sd_prompt_tokens *t5,
                                    int clip_skip, const sd_text_encode_opts *opts,
                                    sd_tensor **cond, sd_tensor **pooled, sd_error *err);

/* The FLUX encoding of tokenized prompts: l as for CLIP-L (77-token chunks),
 * t5 one chunk of any length (sd_prompt_opts_t5xxl). Only opts->warn is used. */
sd_status sd_text_encode_flux_tokens(const sd_text_encoder *te, const sd_prompt_tokens *l,
                                     const sd_prompt_tokens *t5, int clip_skip,
                                     const sd_text_encode_opts *opts, sd_tensor **cond,
                                     sd_tensor **pooled, sd_error *err);

/* Encode already tokenized prompts (the tokens carry weights and embedding
 * vectors): l for CLIP-L (NULL for the refiner and SD2), g for bigG or
 * SD2's ViT-H (NULL for SD1).
 * Only opts->warn is used. Chunks must be 77 slots long (the model's
 * position count). */
sd_status sd_text_encode_tokens(const sd_text_encoder *te, const sd_prompt_tokens *l,
                                const sd_prompt_tokens *g, int clip_skip,
                                const sd_text_encode_opts *opts, sd_tensor **cond,
                                sd_tensor **pooled, sd_error *err);

#endif
