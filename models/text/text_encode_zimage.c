/* text_encode_zimage.c - Z-Image's text encoder (comfy/text_encoders/
 * z_image.py: ZImageTokenizer + Qwen3_4BModel): the chat template, the
 * Qwen2 tokenizer, the Qwen3's layer -2 and ComfyUI's attention mask. */
#include <stdlib.h>
#include <string.h>

#include "models/text/text_encode_internal.h"

/* ZImageTokenizer.llama_template ("{}" is the prompt) */
static const char *const TEMPLATE_HEAD = "<|im_start|>user\n";
static const char *const TEMPLATE_TAIL = "<|im_end|>\n<|im_start|>assistant\n";

sd_status sd_text_tokenize_zimage(const sd_qwen_tokenizer *tok, const char *text,
                                  sd_prompt_tokens **out, sd_error *err) {
    return sd_text_tokenize_zimage_ex(tok, text, NULL, out, err);
}

sd_status sd_text_tokenize_zimage_ex(const sd_qwen_tokenizer *tok, const char *text,
                                     const volatile sig_atomic_t *stop, sd_prompt_tokens **out,
                                     sd_error *err) {
    *out = NULL;
    if (!tok)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder has no Qwen tokenizer (configure --tokenizer-dir DIR with "
                            "DIR/" SD_QWEN_TOKENIZER_SUBDIR "/, or --comfyui-dir)");
    if (!text) text = "";
    size_t h = strlen(TEMPLATE_HEAD), n = strlen(text), t = strlen(TEMPLATE_TAIL);
    char *s = malloc(h + n + t + 1);
    if (!s) return sd_error_set(err, SD_ERR_NOMEM, "out of memory for a %zu-byte prompt", n);
    memcpy(s, TEMPLATE_HEAD, h);
    memcpy(s + h, text, n);
    memcpy(s + h + n, TEMPLATE_TAIL, t + 1);
    sd_prompt_vocab v;
    sd_prompt_opts po;
    sd_qwen_tokenizer_prompt_vocab(tok, &v);
    sd_prompt_opts_qwen3(&po);
    po.stop = stop;
    sd_status rc = sd_prompt_tokenize_vocab(&v, s, &po, out, err);
    free(s);
    return rc;
}

sd_status sd_text_encode_zimage_tokens(const sd_text_encoder *te, const sd_prompt_tokens *t,
                                       int clip_skip, const sd_text_encode_opts *o,
                                       sd_tensor **cond, sd_tensor **mask, sd_error *err) {
    *cond = *mask = NULL;
    if (te->kind != SD_TE_ZIMAGE || !te->qwen)
        return sd_error_set(err, SD_ERR_INVALID, "Z-Image encoding needs a zimage text encoder (this "
                            "one is %s)", sd_te_kind_name(te->kind));
    if (clip_skip > 0)
        return sd_error_set(err, SD_ERR_INVALID,
                            "clip skip %d: CLIPSetLastLayer takes -1 or lower (0 = not set)", clip_skip);
    if (!t || t->n_chunks != 1 || t->chunk_len < 1)
        return sd_error_set(err, SD_ERR_INVALID, "Qwen3: %d chunks of %d tokens (want one chunk)",
                            t ? t->n_chunks : 0, t ? t->chunk_len : 0);
    const sd_qwen3_config *cfg = sd_qwen3_get_config(te->qwen);
    sd_backend *be = sd_qwen3_backend(te->qwen);
    int len = t->chunk_len;
    int32_t *ids = malloc((size_t)len * sizeof *ids);
    uint8_t *m = malloc((size_t)len);
    sd_tensor *hm = sd_tensor_new4(SD_I64, 2, 1, len, 0, 0);
    if (!ids || !m || !hm) {
        free(ids);
        free(m);
        sd_tensor_unref(hm);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory for %d tokens", len);
    }
    /* SDClipModel.process_tokens without an end token: every slot counts
     * up to the first pad token; that one and all after it are masked */
    int masked = 0;
    for (int j = 0; j < len; j++) {
        const sd_prompt_token *tk = &t->tokens[j];
        ids[j] = tk->id; /* no embedding slots: Qwen3Tokenizer reads none */
        if (ids[j] == SD_TE_QWEN3_PAD) masked = 1;
        m[j] = (uint8_t)!masked;
        ((int64_t *)hm->data)[j] = m[j];
    }
    /* ComfyUI's "hidden" layer when within the layers (no final norm), else
     * its "last": the final-normed last layer */
    int layer = clip_skip ? clip_skip : -2, final_norm = 0;
    if (-layer > cfg->layers) layer = -1, final_norm = 1;
    sd_precision prev = sd_backend_precision(be);
    if (prev == SD_PREC_F16) {
        sd_te_warnf(o, "Qwen3 overflows in f16: the text encoder computes it in f32");
        sd_backend_set_precision(be, SD_PREC_F32);
    }
    sd_qwen3_tokens in = {1, len, ids, NULL, m, o ? o->interrupt : NULL};
    sd_bt *out = NULL;
    sd_status rc = sd_qwen3_forward(te->qwen, &in, layer, final_norm, &out, err);
    sd_backend_set_precision(be, prev);
    free(ids);
    free(m);
    if (rc == SD_OK) {
        *cond = sd_te_to_host(out);
        if (!*cond) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory downloading conditioning");
    }
    if (rc == SD_OK) *mask = hm;
    else sd_tensor_unref(hm);
    return rc;
}

sd_status sd_text_encode_zimage(const sd_text_encoder *te, const char *text, int clip_skip,
                                const sd_text_encode_opts *o, sd_tensor **cond, sd_tensor **mask,
                                sd_error *err) {
    *cond = *mask = NULL;
    sd_prompt_tokens *t = NULL;
    sd_status rc = sd_text_tokenize_zimage_ex(te->qtok, text, o ? o->interrupt : NULL, &t, err);
    if (rc == SD_OK) rc = sd_text_encode_zimage_tokens(te, t, clip_skip, o, cond, mask, err);
    sd_prompt_tokens_free(t);
    return rc;
}
