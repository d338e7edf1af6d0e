/* text_encode_sd3.c - SD3's text encoder (comfy/text_encoders/sd3_clip.py
 * SD3ClipModel.encode_token_weights) and CLIPTextEncodeSD3's empty-text
 * rules (comfy_extras/nodes_sd3.py). */
#include <stdlib.h>

#include "models/text/text_encode_internal.h"

/* ComfyUI's T5XXLModel end token: an empty T5 token list encodes [</s>]. */
#define T5_END 1

/* A zeroed [d0, d1, d2] (d2 = 0: [d0, d1]) backend tensor. */
static sd_bt *zeros(sd_backend *be, int64_t d0, int64_t d1, int64_t d2) {
    return d2 ? sd_bt_new4(be, SD_F32, 3, d0, d1, d2, 0) : sd_bt_new4(be, SD_F32, 2, d0, d1, 0, 0);
}

/* concat(a, b, dim), consuming both (NULL when either is). */
static sd_bt *cat(sd_bt *a, sd_bt *b, int dim) {
    sd_bt *r = a && b ? sd_op_concat(a, b, dim) : NULL;
    sd_bt_free(a);
    sd_bt_free(b);
    return r;
}

/* x [1, T, W] consumed -> [1, T, ctx]: zeros on the right, or cut to ctx
 * (torch.nn.functional.pad with a negative amount). */
static sd_bt *pad_right(sd_backend *be, sd_bt *x, int64_t ctx) {
    if (!x) return NULL;
    int64_t T = x->shape[1], W = x->shape[2];
    if (W == ctx) return x;
    if (W > ctx) {
        sd_bt *r = sd_op_slice(x, 2, 0, ctx);
        sd_bt_free(x);
        return r;
    }
    return cat(x, zeros(be, 1, T, ctx - W), 2);
}

/* The CLIP half: *lg [1, T, ctx] and *pooled [1, Lp + Gp] (backend). */
static sd_status encode_lg(const sd_text_encoder *te, const sd_prompt_tokens *l,
                           const sd_prompt_tokens *g, int clip_skip, const sd_text_encode_opts *o,
                           sd_bt **lg, sd_bt **pooled, sd_error *err) {
    *lg = *pooled = NULL;
    sd_backend *be = sd_clip_backend(te->l.clip ? te->l.clip : te->g.clip);
    sd_bt *zl = NULL, *pl = NULL, *zg = NULL, *pg = NULL, *z = NULL;
    sd_status rc = SD_OK;
    if (te->l.clip) rc = sd_te_encode_role(&te->l, l, clip_skip, o, &zl, &pl, err);
    if (rc == SD_OK && te->g.clip) rc = sd_te_encode_role(&te->g, g, clip_skip, o, &zg, &pg, err);
    if (rc != SD_OK) goto done;
    sd_backend_clear_error(be);
    if (zl && zg) {
        int64_t cut = zl->shape[1] < zg->shape[1] ? zl->shape[1] : zg->shape[1];
        z = cat(sd_op_slice(zl, 1, 0, cut), sd_op_slice(zg, 1, 0, cut), 2);
    } else if (zg) {
        /* no CLIP-L model: g after CLIP-L's width of zeros */
        z = cat(zeros(be, 1, zg->shape[1], SD_TE_SD3_L_WIDTH), zg, 2);
        zg = NULL;
    } else {
        z = zl;
        zl = NULL;
    }
    *lg = pad_right(be, z, sd_text_encoder_cond_dim(te));
    z = NULL;
    if (!pl) pl = zeros(be, 1, SD_TE_SD3_L_WIDTH, 0);
    if (!pg) pg = zeros(be, 1, SD_TE_SD3_G_WIDTH, 0);
    *pooled = cat(pl, pg, 1);
    pl = pg = NULL;
    rc = sd_backend_take_error(be, err);
    sd_backend_clear_error(be);
    if (rc == SD_OK && (!*lg || !*pooled))
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory composing the SD3 CLIP conditioning");
done:
    sd_bt_free(zl);
    sd_bt_free(pl);
    sd_bt_free(zg);
    sd_bt_free(pg);
    if (rc != SD_OK) {
        sd_bt_free(*lg);
        sd_bt_free(*pooled);
        *lg = *pooled = NULL;
    }
    return rc;
}

sd_status sd_text_encode_sd3_tokens(const sd_text_encoder *te, const sd_prompt_tokens *l,
                                    const sd_prompt_tokens *g, const sd_prompt_tokens *t5,
                                    int clip_skip, const sd_text_encode_opts *opts,
                                    sd_tensor **cond, sd_tensor **pooled, sd_error *err) {
    *cond = *pooled = NULL;
    if (te->kind != SD_TE_SD3)
        return sd_error_set(err, SD_ERR_INVALID, "SD3 encoding needs an sd3 text encoder (this one is %s)",
                            sd_te_kind_name(te->kind));
    if (clip_skip > 0)
        return sd_error_set(err, SD_ERR_INVALID,
                            "clip skip %d: CLIPSetLastLayer takes -1 or lower (0 = not set)",
                            clip_skip);
    /* CLIP tokens without a CLIP model still make the (zero) pooled part */
    int any_tokens = l || g, any_clip = any_tokens && (te->l.clip || te->g.clip);
    if (any_tokens && ((te->l.clip && !l) || (te->g.clip && !g)))
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3: tokens for %s but none for %s (CLIPTextEncodeSD3 gives both "
                            "or neither)",
                            l ? "CLIP-L" : "CLIP-G", l ? "CLIP-G" : "CLIP-L");
    sd_backend *be = te->t5 ? sd_t5_backend(te->t5)
                   : sd_clip_backend(te->l.clip ? te->l.clip : te->g.clip);
    sd_bt *lg = NULL, *pb = NULL, *zt = NULL, *z = NULL;
    sd_status rc = SD_OK;
    if (any_clip) rc = encode_lg(te, l, g, clip_skip, opts, &lg, &pb, err);
    if (rc == SD_OK && te->t5) {
        /* no T5 tokens: ComfyUI's empty token list encodes [</s>] */
        sd_prompt_token end = {T5_END, -1, 0, 0, 1.0};
        sd_prompt_tokens one = {1, 1, &end, 0, NULL};
        rc = sd_te_encode_t5(te, t5 ? t5 : &one, clip_skip, opts, &zt, err);
    }
    if (rc != SD_OK) goto done;
    sd_backend_clear_error(be);
    if (lg && zt) {
        z = cat(lg, zt, 1);
        lg = zt = NULL;
    } else if (lg) {
        z = lg;
        lg = NULL;
    } else if (zt) {
        z = zt;
        zt = NULL;
    } else {
        z = zeros(be, 1, 77, sd_text_encoder_cond_dim(te));
    }
    if (!pb) pb = zeros(be, 1, sd_text_encoder_pooled_dim(te), 0);
    rc = sd_backend_take_error(be, err);
    sd_backend_clear_error(be);
    if (rc == SD_OK) {
        *cond = sd_te_to_host(z);
        *pooled = sd_te_to_host(pb);
        z = pb = NULL;
        if (!*cond || !*pooled)
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory downloading conditioning");
    }
done:
    sd_bt_free(lg);
    sd_bt_free(pb);
    sd_bt_free(zt);
    sd_bt_free(z);
    if (rc != SD_OK) {
        sd_tensor_unref(*cond);
        sd_tensor_unref(*pooled);
        *cond = *pooled = NULL;
    }
    return rc;
}

/* SD3Tokenizer tokenizes for CLIP-L and bigG whether or not the model has
 * them (the chunk counts decide the empty-prompt padding): a role without
 * a model takes the CLIP position count, 77. */
static sd_status tokenize_role(const sd_text_encoder *te, const te_role *r, const char *text,
                               const sd_text_encode_opts *o, sd_prompt_tokens **t, sd_error *err) {
    if (r->clip) return sd_te_tokenize(te, r, text, o, t, err);
    sd_prompt_opts po;
    sd_te_prompt_opts(r, o, &po);
    po.max_length = 77;
    return sd_prompt_tokenize(te->tok, text, &po, t, err);
}

/* Extends t (a role's tokens, or none yet: *t NULL) with empty-prompt
 * chunks to n chunks, as CLIPTextEncodeSD3 does with clip.tokenize(""). */
static sd_status extend(const sd_text_encoder *te, const te_role *r, const sd_text_encode_opts *o,
                        sd_prompt_tokens **t, int n, sd_error *err) {
    sd_status rc = SD_OK;
    if (!*t) rc = tokenize_role(te, r, "", o, t, err);
    if (rc != SD_OK) return rc;
    sd_prompt_opts po;
    sd_te_prompt_opts(r, o, &po);
    po.max_length = (*t)->chunk_len;
    return sd_prompt_tokens_pad_chunks(te->tok, &po, *t, n, err);
}

sd_status sd_text_encode_sd3(const sd_text_encoder *te, const char *clip_l, const char *clip_g,
                             const char *t5xxl, int empty_prompt_padding, int clip_skip,
                             const sd_text_encode_opts *opts, sd_tensor **cond, sd_tensor **pooled,
                             sd_error *err) {
    *cond = *pooled = NULL;
    if (te->kind != SD_TE_SD3)
        return sd_error_set(err, SD_ERR_INVALID,
                            "CLIPTextEncodeSD3 needs an SD3 text encoder (TripleCLIPLoader, "
                            "DualCLIPLoader / CLIPLoader type sd3, or an SD3 checkpoint), this one "
                            "is %s",
                            sd_te_kind_name(te->kind));
    if ((te->l.clip || te->g.clip) && !te->tok)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder has no CLIP tokenizer (configure --tokenizer-dir or %s)",
                            SD_TOKENIZER_DIR_ENV);
    if (!clip_l) clip_l = "";
    if (!clip_g) clip_g = "";
    if (!t5xxl) t5xxl = "";
    int none = !empty_prompt_padding;
    sd_prompt_tokens *l = NULL, *g = NULL, *t = NULL;
    sd_status rc = SD_OK;
    int clip = te->tok != NULL; /* a T5-only encoder may have no CLIP vocabulary */
    if (clip && !(none && !clip_g[0])) rc = tokenize_role(te, &te->g, clip_g, opts, &g, err);
    if (rc == SD_OK && clip && !(none && !clip_l[0]))
        rc = tokenize_role(te, &te->l, clip_l, opts, &l, err);
    if (rc == SD_OK && te->t5 && !(none && !t5xxl[0]))
        rc = sd_te_tokenize_t5(te, t5xxl, 1, opts, &t, err);
    /* differing chunk counts: the shorter side gets empty-prompt chunks */
    int nl = l ? l->n_chunks : 0, ng = g ? g->n_chunks : 0;
    if (rc == SD_OK && nl != ng) {
        if (nl < ng) rc = extend(te, &te->l, opts, &l, ng, err);
        else rc = extend(te, &te->g, opts, &g, nl, err);
    }
    if (rc == SD_OK)
        rc = sd_text_encode_sd3_tokens(te, l, g, t, clip_skip, opts, cond, pooled, err);
    sd_prompt_tokens_free(l);
    sd_prompt_tokens_free(g);
    sd_prompt_tokens_free(t);
    return rc;
}
