/* text_encode.c - ComfyUI's CLIPTextEncode pipeline on top of the CLIP
 * transformers: per-encoder chunk batches, the empty-prompt weighting,
 * textual-inversion splicing, SDXL's channel concatenation. */
#include "models/text/text_encode.h"
#include "models/text/text_encode_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The roles a kind gives its CLIP transformers. */
void sd_te_set_roles(sd_text_encoder *te, sd_clip *clip_l, sd_clip *clip_g) {
    sd_te_kind kind = te->kind;
    int sd1_like = kind == SD_TE_SD1 || kind == SD_TE_FLUX;
    /* SD1 and Flux's CLIP-L: "last"; SDXL's: penultimate without final LN;
     * Flux's pooled output is unprojected (return_projected_pooled=False) */
    te->l = (te_role){clip_l, sd1_like ? 0 : -2, sd1_like, SD_CLIP_EOS, 0, 'l'};
    /* SDXL's bigG: penultimate layer without final LN (sdxl_clip.py);
     * SD2's ViT-H: "penultimate" with SDClipModel's default
     * layer_norm_hidden_state=True (sd2_clip.py); both pad with 0 and
     * return the projected pooled output */
    if (kind == SD_TE_SD2) te->g = (te_role){clip_g, -2, 1, 0, 1, 'h'};
    else te->g = (te_role){clip_g, -2, 0, 0, 1, 'g'};
}

sd_status sd_text_encoder_new(sd_te_kind kind, sd_clip *clip_l, sd_clip *clip_g,
                              const sd_tokenizer *tok, sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    if (kind == SD_TE_FLUX || kind == SD_TE_T5 || kind == SD_TE_SD3 || kind == SD_TE_ZIMAGE) {
        sd_clip_free(clip_l);
        sd_clip_free(clip_g);
        return sd_error_set(err, SD_ERR_INVALID,
                            "a %s text encoder holds a T5 or Qwen3: it is made by loading or by "
                            "sd_text_encoder_with_models, not from CLIP models alone",
                            sd_te_kind_name(kind));
    }
    int ok = (kind == SD_TE_SD1 && clip_l && !clip_g) || (kind == SD_TE_SDXL && clip_l && clip_g) ||
             ((kind == SD_TE_SDXL_REFINER || kind == SD_TE_SD2) && !clip_l && clip_g);
    sd_text_encoder *te = ok ? calloc(1, sizeof *te) : NULL;
    if (!te) {
        sd_clip_free(clip_l);
        sd_clip_free(clip_g);
        if (!ok)
            return sd_error_set(err, SD_ERR_INVALID,
                                "text encoder %s needs %s (got clip_l %s, clip_g %s)",
                                sd_te_kind_name(kind),
                                kind == SD_TE_SD1    ? "CLIP-L only"
                                : kind == SD_TE_SDXL ? "CLIP-L and bigG"
                                : kind == SD_TE_SD2  ? "OpenCLIP-H only"
                                                     : "bigG only",
                                clip_l ? "yes" : "no", clip_g ? "yes" : "no");
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    te->kind = kind;
    te->tok = tok;
    sd_te_set_roles(te, clip_l, clip_g);
    *out = te;
    return SD_OK;
}

static int has_key(sd_st_file *f, const char *prefix, const char *name) {
    char key[300];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return sd_st_find(f, key) != NULL;
}

/* Any key starting with prefix. */
static int has_prefix(sd_st_file *f, const char *prefix) {
    size_t n = strlen(prefix);
    for (size_t i = 0; i < sd_st_count(f); i++)
        if (strncmp(sd_st_at(f, i)->name, prefix, n) == 0) return 1;
    return 0;
}

/* ComfyUI's detect_te_model on bare CLIP keys: by layer count. */
static sd_te_kind bare_clip_kind(const sd_st_file *f) {
    sd_st_file *ff = (sd_st_file *)f;
    if (has_key(ff, "", "text_model.encoder.layers.30.mlp.fc1.weight") ||
        has_key(ff, "", "transformer.resblocks.30.mlp.c_fc.weight"))
        return SD_TE_SDXL_REFINER;
    if (has_key(ff, "", "text_model.encoder.layers.22.mlp.fc1.weight") ||
        has_key(ff, "", "transformer.resblocks.22.mlp.c_fc.weight"))
        return SD_TE_SD2;
    return SD_TE_SD1;
}

/* ComfyUI's SD3 clip_target: which parts a single file holds. */
static int sd3_has_l(sd_st_file *f) {
    return has_key(f, SD_TE_PREFIX_SD3_L, "text_model.final_layer_norm.weight");
}
static int sd3_has_g(sd_st_file *f) {
    return has_key(f, SD_TE_PREFIX_SD3_G, "text_model.final_layer_norm.weight");
}

sd_te_kind sd_text_encoder_detect(const sd_st_file *f) {
    sd_st_file *ff = (sd_st_file *)f;
    if (sd_qwen3_present(f, SD_TE_PREFIX_ZIMAGE) || sd_qwen3_present(f, "")) return SD_TE_ZIMAGE;
    /* the bigG, or the MMDiT beside the text encoders, makes it SD3 */
    if (has_prefix(ff, SD_TE_PREFIX_SD3_G) ||
        (has_prefix(ff, "text_encoders.") && has_prefix(ff, "model.diffusion_model.joint_blocks.")))
        return SD_TE_SD3;
    if (sd_t5_present(f, SD_TE_PREFIX_FLUX_T5)) return SD_TE_FLUX;
    if (has_prefix(ff, "conditioner.embedders.1.")) return SD_TE_SDXL;
    if (has_prefix(ff, SD_TE_PREFIX_REFINER_G)) {
        int sd2 = has_key(ff, "model.diffusion_model.", "input_blocks.0.0.weight") &&
                  !has_key(ff, "model.diffusion_model.", "label_emb.0.0.weight");
        return sd2 ? SD_TE_SD2 : SD_TE_SDXL_REFINER;
    }
    if (has_prefix(ff, SD_TE_PREFIX_SD1)) return SD_TE_SD1;
    if (has_key(ff, SD_TE_PREFIX_SD2, "token_embedding.weight")) return SD_TE_SD2;
    if (sd_t5_present(f, "")) return SD_TE_T5;
    if (has_key(ff, "", "text_model.embeddings.token_embedding.weight") ||
        (has_key(ff, "", "token_embedding.weight") &&
         has_key(ff, "", "transformer.resblocks.0.ln_1.weight")))
        return bare_clip_kind(f);
    return 0;
}

unsigned sd_text_encoder_file_vocabs(const sd_st_file *f) {
    sd_st_file *ff = (sd_st_file *)f;
    sd_te_kind k = sd_text_encoder_detect(f);
    if (!k) return 0;
    switch (k) {
    case SD_TE_T5: return SD_TE_VOCAB_T5;
    case SD_TE_FLUX: return SD_TE_VOCAB_CLIP | SD_TE_VOCAB_T5;
    case SD_TE_ZIMAGE: return SD_TE_VOCAB_QWEN;
    case SD_TE_SD3:
        return (sd3_has_l(ff) || sd3_has_g(ff) ? SD_TE_VOCAB_CLIP : 0) |
               (sd_t5_present(f, SD_TE_PREFIX_SD3_T5) ? SD_TE_VOCAB_T5 : 0);
    default: return SD_TE_VOCAB_CLIP;
    }
}

/* A CLIP under prefix with the caller's head count for a CLIP-L. */
static sd_status load_clip(sd_backend *be, sd_st_file *f, const char *prefix, int heads,
                           sd_clip **out, sd_error *err) {
    sd_clip_opts co;
    sd_clip_opts_default(&co);
    co.heads = heads;
    return sd_clip_load(be, f, prefix, &co, out, err);
}

/* A bigG: exact GELU whatever its width (ComfyUI's clip_config_bigg.json;
 * the HF layout would otherwise pick by width) and the caller's heads. */
static sd_status load_g(sd_backend *be, sd_st_file *f, const char *prefix, int heads,
                        sd_clip **out, sd_error *err) {
    sd_clip_opts co;
    sd_clip_opts_default(&co);
    co.act = SD_CLIP_ACT_GELU;
    co.heads = heads;
    return sd_clip_load(be, f, prefix, &co, out, err);
}

/* An encoder owning l, g and t5 (each may be NULL; freed on failure). */
static sd_status new_t5_encoder(sd_te_kind kind, sd_clip *l, sd_clip *g, sd_t5 *t5,
                                const sd_te_load_opts *o, sd_text_encoder **out, sd_error *err) {
    sd_text_encoder *te = calloc(1, sizeof *te);
    if (!te) {
        sd_clip_free(l);
        sd_clip_free(g);
        sd_t5_free(t5);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    te->kind = kind;
    te->tok = o->tok;
    te->t5tok = o->t5tok;
    te->t5 = t5;
    sd_te_set_roles(te, l, g);
    *out = te;
    return SD_OK;
}

/* Z-Image's Qwen3-4B, bare or under the single-file prefix; another
 * Qwen3 width is another family (ComfyUI: 2048 Ovis, else HiDream's). */
static sd_status load_zimage(sd_backend *be, sd_st_file *f, const sd_te_load_opts *o,
                             sd_text_encoder **out, sd_error *err) {
    const char *pre = sd_qwen3_present(f, SD_TE_PREFIX_ZIMAGE) ? SD_TE_PREFIX_ZIMAGE : "";
    int want = o->qwen3_4b_width ? o->qwen3_4b_width : SD_TE_QWEN3_4B_WIDTH;
    int w = sd_qwen3_width(f, pre);
    if (w != want)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: a Qwen3 text encoder %d wide is not Qwen3-4B (Z-Image's, %d wide)%s; "
                            "sdflow does not run that family",
                            sd_st_path(f), w, want, w == 2048 ? ": it is Qwen3-2B (Ovis)" : "");
    sd_qwen3 *q = NULL;
    sd_status rc = sd_qwen3_load(be, f, pre, &q, err);
    if (rc) return rc;
    sd_text_encoder *te = calloc(1, sizeof *te);
    if (!te) {
        sd_qwen3_free(q);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    te->kind = SD_TE_ZIMAGE;
    te->qwen = q;
    te->qtok = o->qtok;
    sd_te_set_roles(te, NULL, NULL);
    *out = te;
    return SD_OK;
}

/* The parts of an SD3 single file, as ComfyUI's SD3 clip_target finds them. */
static sd_status load_sd3(sd_backend *be, sd_st_file *f, const sd_te_load_opts *o,
                          sd_text_encoder **out, sd_error *err) {
    sd_clip *l = NULL, *g = NULL;
    sd_t5 *t5 = NULL;
    sd_status rc = SD_OK;
    if (sd3_has_l(f)) rc = load_clip(be, f, SD_TE_PREFIX_SD3_L, o->clip_l_heads, &l, err);
    if (!rc && sd3_has_g(f)) rc = load_g(be, f, SD_TE_PREFIX_SD3_G, o->clip_g_heads, &g, err);
    if (!rc && sd_t5_present(f, SD_TE_PREFIX_SD3_T5)) rc = sd_t5_load(be, f, SD_TE_PREFIX_SD3_T5, &t5, err);
    if (!rc && !l && !g && !t5)
        rc = sd_error_set(err, SD_ERR_NOT_FOUND,
                          "%s: no SD3 text encoder (looked for %stext_model.*, %stext_model.*, "
                          "%sencoder.*)",
                          sd_st_path(f), SD_TE_PREFIX_SD3_L, SD_TE_PREFIX_SD3_G, SD_TE_PREFIX_SD3_T5);
    if (rc) {
        sd_clip_free(l);
        sd_clip_free(g);
        sd_t5_free(t5);
        return rc;
    }
    return new_t5_encoder(SD_TE_SD3, l, g, t5, o, out, err);
}

sd_status sd_text_encoder_load_ex(sd_backend *be, sd_st_file *f, const sd_te_load_opts *o,
                                  sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    sd_te_load_opts none = {0};
    if (!o) o = &none;
    const sd_tokenizer *tok = o->tok;
    sd_clip *l = NULL, *g = NULL;
    sd_t5 *t5 = NULL;
    sd_status rc;
    sd_te_kind kind = sd_text_encoder_detect(f);
    int bare = !has_prefix(f, "cond_stage_model.") && !has_prefix(f, "conditioner.") &&
               !has_prefix(f, "text_encoders.");
    switch (kind) {
    case SD_TE_FLUX:
        if ((rc = sd_t5_load(be, f, SD_TE_PREFIX_FLUX_T5, &t5, err))) return rc;
        if ((rc = load_clip(be, f, SD_TE_PREFIX_FLUX_L, o->clip_l_heads, &l, err))) {
            sd_t5_free(t5);
            return rc;
        }
        return new_t5_encoder(SD_TE_FLUX, l, NULL, t5, o, out, err);
    case SD_TE_T5:
        if ((rc = sd_t5_load(be, f, "", &t5, err))) return rc;
        return new_t5_encoder(SD_TE_T5, NULL, NULL, t5, o, out, err);
    case SD_TE_SD3:
        return load_sd3(be, f, o, out, err);
    case SD_TE_ZIMAGE:
        return load_zimage(be, f, o, out, err);
    case SD_TE_SDXL:
        if ((rc = load_clip(be, f, SD_TE_PREFIX_SDXL_L, o->clip_l_heads, &l, err))) return rc;
        if ((rc = load_g(be, f, SD_TE_PREFIX_SDXL_G, o->clip_g_heads, &g, err)) != SD_OK) {
            sd_clip_free(l);
            return rc;
        }
        return sd_text_encoder_new(SD_TE_SDXL, l, g, tok, out, err);
    case SD_TE_SDXL_REFINER:
        if (bare) rc = load_g(be, f, "", o->clip_g_heads, &g, err);
        else rc = load_g(be, f, SD_TE_PREFIX_REFINER_G, o->clip_g_heads, &g, err);
        if (rc) return rc;
        return sd_text_encoder_new(kind, NULL, g, tok, out, err);
    case SD_TE_SD2:
        if (bare) rc = sd_clip_load(be, f, "", NULL, &g, err);
        else if (has_prefix(f, SD_TE_PREFIX_REFINER_G))
            rc = sd_clip_load(be, f, SD_TE_PREFIX_REFINER_G, NULL, &g, err);
        else rc = sd_clip_load(be, f, SD_TE_PREFIX_SD2, NULL, &g, err);
        if (rc) return rc;
        return sd_text_encoder_new(kind, NULL, g, tok, out, err);
    case SD_TE_SD1:
        if ((rc = load_clip(be, f, bare ? "" : SD_TE_PREFIX_SD1, o->clip_l_heads, &l, err))) return rc;
        return sd_text_encoder_new(SD_TE_SD1, l, NULL, tok, out, err);
    }
    return sd_error_set(err, SD_ERR_NOT_FOUND,
                        "%s: no text encoder found (looked for %s, %s + %s, %s, %s, %s, and bare "
                        "text_model.* / encoder.block.* keys)",
                        sd_st_path(f), SD_TE_PREFIX_SD1, SD_TE_PREFIX_SDXL_L, SD_TE_PREFIX_SDXL_G,
                        SD_TE_PREFIX_REFINER_G, SD_TE_PREFIX_SD2, SD_TE_PREFIX_FLUX_T5);
}

sd_status sd_text_encoder_load(sd_backend *be, sd_st_file *f, const sd_tokenizer *tok,
                               sd_text_encoder **out, sd_error *err) {
    sd_te_load_opts o = {.tok = tok};
    return sd_text_encoder_load_ex(be, f, &o, out, err);
}

/* ---- composing parts -------------------------------------------------------------- */

static const char *part_label(sd_te_kind k) {
    return k == SD_TE_SD1 ? "CLIP-L" : k == SD_TE_T5 ? "T5-XXL" : k == SD_TE_SDXL_REFINER ? "CLIP-G"
         : k == SD_TE_SD2 ? "CLIP-H" : sd_te_kind_name(k);
}

sd_status sd_text_encoder_combine(sd_te_kind kind, const sd_text_encoder *const *parts, int n,
                                  sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    const sd_text_encoder *lp = NULL, *gp = NULL, *tp = NULL;
    char got[160] = "";
    size_t used = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        sd_te_kind k = parts[i]->kind;
        if (used < sizeof got) {
            int w = snprintf(got + used, sizeof got - used, "%s%s", i ? ", " : "", part_label(k));
            if (w > 0) used += (size_t)w;
        }
        if (k == SD_TE_SD1 && !lp) lp = parts[i];
        else if (k == SD_TE_T5 && !tp) tp = parts[i];
        else if (k == SD_TE_SDXL_REFINER && !gp) gp = parts[i];
        else bad = 1; /* a part this kind cannot use, or one twice */
    }
    int ok = 0;
    if (kind == SD_TE_FLUX) ok = n == 2 && lp && tp && !bad;
    else if (kind == SD_TE_SDXL) ok = n == 2 && lp && gp && !bad;
    else if (kind == SD_TE_SD3) ok = n >= 1 && !bad;
    if (!ok)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "a %s text encoder is made of %s files; got %s",
                            sd_te_kind_name(kind),
                            kind == SD_TE_FLUX   ? "a CLIP-L and a T5-XXL"
                            : kind == SD_TE_SDXL ? "a CLIP-L and a CLIP-G (bigG)"
                            : kind == SD_TE_SD3  ? "distinct CLIP-L, CLIP-G (bigG) and T5-XXL"
                                                 : "no separate",
                            got);
    sd_text_encoder *te = calloc(1, sizeof *te);
    if (!te) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    te->kind = kind;
    te->borrowed = 1;
    te->tok = lp ? lp->tok : gp ? gp->tok : NULL;
    if (tp) {
        te->t5 = tp->t5;
        te->t5tok = tp->t5tok;
    }
    sd_te_set_roles(te, lp ? lp->l.clip : NULL, gp ? gp->g.clip : NULL);
    *out = te;
    return SD_OK;
}

sd_status sd_text_encoder_with_models(const sd_text_encoder *base, sd_clip *l, sd_clip *g, sd_t5 *t5,
                                      sd_qwen3 *qwen, sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    int same = !l == !base->l.clip && !g == !base->g.clip && !t5 == !base->t5 && !qwen == !base->qwen;
    sd_text_encoder *te = same ? malloc(sizeof *te) : NULL;
    if (!te) {
        sd_clip_free(l);
        sd_clip_free(g);
        sd_t5_free(t5);
        sd_qwen3_free(qwen);
        return same ? sd_error_set(err, SD_ERR_NOMEM, "out of memory")
                    : sd_error_set(err, SD_ERR_INVALID, "the models given are not the %s encoder's parts",
                                   sd_te_kind_name(base->kind));
    }
    *te = *base; /* roles, tokenizers, kind */
    te->l.clip = l;
    te->g.clip = g;
    te->t5 = t5;
    te->qwen = qwen;
    te->borrowed = 0;
    *out = te;
    return SD_OK;
}

void sd_text_encoder_free(sd_text_encoder *te) {
    if (!te) return;
    if (!te->borrowed) {
        sd_clip_free(te->l.clip);
        sd_clip_free(te->g.clip);
        sd_t5_free(te->t5);
        sd_qwen3_free(te->qwen);
    }
    free(te);
}

sd_te_kind sd_text_encoder_kind(const sd_text_encoder *te) { return te->kind; }

const char *sd_te_kind_name(sd_te_kind kind) {
    switch (kind) {
    case SD_TE_SD1: return "sd1";
    case SD_TE_SDXL: return "sdxl";
    case SD_TE_SDXL_REFINER: return "sdxl_refiner";
    case SD_TE_SD2: return "sd2";
    case SD_TE_FLUX: return "flux";
    case SD_TE_T5: return "t5xxl";
    case SD_TE_SD3: return "sd3";
    case SD_TE_ZIMAGE: return "zimage";
    }
    return "unknown";
}

const sd_clip *sd_text_encoder_clip_l(const sd_text_encoder *te) { return te->l.clip; }
const sd_clip *sd_text_encoder_clip_g(const sd_text_encoder *te) { return te->g.clip; }
void sd_text_encoder_set_tokenizer(sd_text_encoder *te, const sd_tokenizer *tok) { te->tok = tok; }
const sd_tokenizer *sd_text_encoder_tokenizer(const sd_text_encoder *te) { return te->tok; }
const sd_t5 *sd_text_encoder_t5(const sd_text_encoder *te) { return te->t5; }
const sd_qwen3 *sd_text_encoder_qwen3(const sd_text_encoder *te) { return te->qwen; }
void sd_text_encoder_set_qwen_tokenizer(sd_text_encoder *te, const sd_qwen_tokenizer *tok) {
    te->qtok = tok;
}
const sd_qwen_tokenizer *sd_text_encoder_qwen_tokenizer(const sd_text_encoder *te) { return te->qtok; }
void sd_text_encoder_set_t5_tokenizer(sd_text_encoder *te, const sd_t5_tokenizer *tok) {
    te->t5tok = tok;
}
const sd_t5_tokenizer *sd_text_encoder_t5_tokenizer(const sd_text_encoder *te) { return te->t5tok; }

int sd_text_encoder_cond_dim(const sd_text_encoder *te) {
    if (te->qwen) return sd_qwen3_get_config(te->qwen)->hidden;
    if (te->t5) return sd_t5_get_config(te->t5)->d_model;
    if (te->kind == SD_TE_SD3) return SD_TE_SD3_CONTEXT;
    int d = 0;
    if (te->l.clip) d += sd_clip_get_config(te->l.clip)->hidden;
    if (te->g.clip) d += sd_clip_get_config(te->g.clip)->hidden;
    return d;
}

/* The width of a role's pooled output. */
static int pooled_width(const te_role *r) {
    const sd_clip_config *c = sd_clip_get_config(r->clip);
    return r->projected && c->proj_dim ? c->proj_dim : c->hidden;
}

int sd_text_encoder_pooled_dim(const sd_text_encoder *te) {
    if (te->kind == SD_TE_SD3)
        return (te->l.clip ? pooled_width(&te->l) : SD_TE_SD3_L_WIDTH) +
               (te->g.clip ? pooled_width(&te->g) : SD_TE_SD3_G_WIDTH);
    if (!te->g.clip && !te->l.clip) return 0;
    return pooled_width(te->g.clip ? &te->g : &te->l);
}

/* ---- one encoder ------------------------------------------------------------ */

/* CLIPSetLastLayer -> the layer this encoder returns. */
static sd_clip_layer pick_layer(const te_role *r, int clip_skip) {
    int layers = sd_clip_get_config(r->clip)->layers;
    int idx = clip_skip ? clip_skip : r->default_layer;
    if (idx == 0 || -idx > layers) return (sd_clip_layer){-1, 1}; /* "last" */
    return (sd_clip_layer){idx, r->ln_hidden};
}

void sd_te_warnf(const sd_text_encode_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sd_te_warnf(const sd_text_encode_opts *o, const char *fmt, ...) {
    if (!o || !o->warn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->warn(o->warn_ud, msg);
}

/* Slots of the batch: every chunk of t, then (when weighted) the empty
 * prompt. Embedding vectors of the wrong width are dropped, the chunk's
 * remaining slots move left and pads fill its end. ids/vecs have
 * n_seq * len entries. */
/* W: the encoder's width; pad: its pad id; the empty prompt is e0, e1
 * (e1 < 0: none), then pads. */
static void build_slots(int W, int32_t pad, int32_t e0, int32_t e1, const sd_prompt_tokens *t,
                        int with_empty, int32_t *ids, const float **vecs, int *any_vec,
                        const sd_text_encode_opts *o) {
    int len = t->chunk_len;
    *any_vec = 0;
    for (int c = 0; c < t->n_chunks; c++) {
        int m = 0;
        for (int j = 0; j < len; j++) {
            const sd_prompt_token *tk = &t->tokens[(size_t)c * len + j];
            size_t at = (size_t)c * len + m;
            if (tk->embed >= 0) {
                int64_t dim = 0;
                const float *v = sd_prompt_token_vector(t, tk, &dim);
                if (!v || dim != W) {
                    sd_te_warnf(o, "embedding '%s' row %d has width %lld, the text encoder %d: ignored",
                          t->embeds[tk->embed].name, tk->row, (long long)dim, W);
                    continue;
                }
                ids[at] = 0;
                vecs[at] = v;
                *any_vec = 1;
            } else {
                ids[at] = tk->id;
                vecs[at] = NULL;
            }
            m++;
        }
        for (; m < len; m++) {
            ids[(size_t)c * len + m] = pad;
            vecs[(size_t)c * len + m] = NULL;
        }
    }
    if (with_empty) {
        size_t at = (size_t)t->n_chunks * len;
        for (int j = 0; j < len; j++) {
            ids[at + j] = j == 0 ? e0 : j == 1 && e1 >= 0 ? e1 : pad;
            vecs[at + j] = NULL;
        }
    }
}

/* Host tensor [k, len, 1] from the token weights: (float)w, or the 0/1
 * masks of tokens whose weight is (keep = 1) or is not (keep = 0) 1.0. */
typedef enum { W_VALUE, W_KEEP, W_CHANGE } wkind;
static sd_tensor *weight_tensor(const sd_prompt_tokens *t, wkind kind) {
    sd_tensor *w = sd_tensor_new4(SD_F32, 3, t->n_chunks, t->chunk_len, 1, 0);
    if (!w) return NULL;
    float *p = w->data;
    for (int64_t i = 0; i < (int64_t)t->n_chunks * t->chunk_len; i++) {
        double v = t->tokens[i].weight;
        p[i] = kind == W_VALUE ? (float)v : (kind == W_KEEP) == (v == 1.0) ? 1.0f : 0.0f;
    }
    return w;
}

/* z [k, len, W] (borrowed) weighted against e [1, len, W]:
 * z * keep + ((z - e) * w + e) * change. Exact where w == 1. *oom is set
 * when a host tensor could not be allocated. */
static sd_bt *apply_weights(sd_backend *be, const sd_prompt_tokens *t, sd_bt *z, sd_bt *e,
                            int *oom) {
    sd_tensor *hw = weight_tensor(t, W_VALUE), *hk = weight_tensor(t, W_KEEP),
              *hc = weight_tensor(t, W_CHANGE);
    sd_bt *w = hw ? sd_bt_from_host(be, hw, SD_F32) : NULL;
    sd_bt *keep = hk ? sd_bt_from_host(be, hk, SD_F32) : NULL;
    sd_bt *change = hc ? sd_bt_from_host(be, hc, SD_F32) : NULL;
    sd_tensor_unref(hw);
    sd_tensor_unref(hk);
    sd_tensor_unref(hc);
    if (!hw || !hk || !hc) *oom = 1;
    sd_bt *neg = NULL, *d = NULL, *a = NULL, *out = NULL;
    if (w && keep && change && (neg = sd_op_scale(e, -1.0f)) && (d = sd_op_add(z, neg))) {
        sd_bt *dw = sd_op_mul(d, w);
        sd_bt *r = dw ? sd_op_add(dw, e) : NULL;
        sd_bt *rc = r ? sd_op_mul(r, change) : NULL;
        a = rc ? sd_op_mul(z, keep) : NULL;
        if (a) out = sd_op_add(a, rc);
        sd_bt_free(dw);
        sd_bt_free(r);
        sd_bt_free(rc);
    }
    sd_bt_free(w);
    sd_bt_free(keep);
    sd_bt_free(change);
    sd_bt_free(neg);
    sd_bt_free(d);
    sd_bt_free(a);
    return out;
}

/* Chunks one CLIP forward takes at most. A prompt of k chunks needs
 * activations for all of them at once in one batch (a 1 MB word is ~4000
 * chunks: gigabytes); in batches of this many the memory is that of one
 * batch plus the output, and an interrupt is seen between batches. Prompts
 * of up to this many chunks (~1200 tokens) run in one batch as before. */
#define CLIP_CHUNK_BATCH 16

/* sd_clip_forward over in->n chunks in batches of CLIP_CHUNK_BATCH: the
 * hidden states of every chunk, in order; pooled/projected of the first
 * batch only (the caller uses the first chunk's). */
static sd_status clip_forward_batched(sd_clip *clip, const sd_clip_tokens *in, sd_clip_layer layer,
                                      const volatile sig_atomic_t *stop, sd_clip_output *out,
                                      sd_error *err) {
    memset(out, 0, sizeof *out);
    if (stop && *stop) return sd_error_set(err, SD_ERR_CANCELLED, "interrupted");
    if (in->n <= CLIP_CHUNK_BATCH) return sd_clip_forward(clip, in, layer, out, err);
    int nb = (in->n + CLIP_CHUNK_BATCH - 1) / CLIP_CHUNK_BATCH;
    sd_bt **parts = calloc((size_t)nb, sizeof *parts);
    if (!parts) return sd_error_set(err, SD_ERR_NOMEM, "out of memory for %d chunk batches", nb);
    sd_status rc = SD_OK;
    for (int b = 0; b < nb && rc == SD_OK; b++) {
        if (stop && *stop) {
            rc = sd_error_set(err, SD_ERR_CANCELLED, "interrupted");
            break;
        }
        int s = b * CLIP_CHUNK_BATCH, m = in->n - s < CLIP_CHUNK_BATCH ? in->n - s : CLIP_CHUNK_BATCH;
        size_t at = (size_t)s * (size_t)in->len;
        sd_clip_tokens part = {m, in->len, in->ids + at, in->vectors ? in->vectors + at : NULL};
        sd_clip_output o;
        rc = sd_clip_forward(clip, &part, layer, &o, err);
        if (rc != SD_OK) break;
        parts[b] = o.hidden;
        o.hidden = NULL;
        if (b == 0) {
            out->pooled = o.pooled;
            out->projected = o.projected;
            o.pooled = o.projected = NULL;
        }
        sd_clip_output_free(&o);
    }
    /* join in a balanced tree: each value is copied O(log nb) times */
    sd_backend *be = sd_clip_backend(clip);
    for (int w = 1; rc == SD_OK && w < nb; w *= 2)
        for (int i = 0; i + w < nb; i += 2 * w) {
            sd_bt *j = sd_op_concat(parts[i], parts[i + w], 0);
            sd_bt_free(parts[i]);
            sd_bt_free(parts[i + w]);
            parts[i] = j;
            parts[i + w] = NULL;
            if (!j) {
                rc = sd_backend_take_error(be, err);
                if (rc == SD_OK) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory joining chunk batches");
                break;
            }
        }
    if (rc == SD_OK) {
        out->hidden = parts[0];
        parts[0] = NULL;
    }
    for (int b = 0; b < nb; b++) sd_bt_free(parts[b]);
    free(parts);
    if (rc != SD_OK) sd_clip_output_free(out);
    return rc;
}

/* One encoder over all chunks of t: *cond [1, len*k, W] and *pooled [1, P]
 * (backend tensors owned by the caller). */
sd_status sd_te_encode_role(const te_role *r, const sd_prompt_tokens *t, int clip_skip,
                             const sd_text_encode_opts *o, sd_bt **cond, sd_bt **pooled,
                             sd_error *err) {
    *cond = *pooled = NULL;
    const sd_clip_config *cfg = sd_clip_get_config(r->clip);
    sd_backend *be = sd_clip_backend(r->clip);
    if (t->n_chunks < 1 || t->chunk_len != cfg->positions)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder: %d chunks of %d tokens (want >= 1 chunk of %d)",
                            t->n_chunks, t->chunk_len, cfg->positions);
    int k = t->n_chunks, weighted = sd_prompt_tokens_has_weights(t), n = k + weighted;
    size_t slots = (size_t)n * t->chunk_len;
    int32_t *ids = malloc(slots * sizeof *ids);
    const float **vecs = malloc(slots * sizeof *vecs);
    if (!ids || !vecs) {
        free(ids);
        free(vecs);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory for %zu token slots", slots);
    }
    int any_vec = 0;
    build_slots(cfg->hidden, r->pad, SD_CLIP_BOS, SD_CLIP_EOS, t, weighted, ids, vecs, &any_vec, o);
    sd_clip_tokens in = {n, t->chunk_len, ids, any_vec ? (const float *const *)vecs : NULL};
    sd_clip_output out;
    sd_status rc = clip_forward_batched(r->clip, &in, pick_layer(r, clip_skip), o ? o->interrupt : NULL, &out, err);
    free(ids);
    free(vecs);
    if (rc != SD_OK) return rc;

    sd_backend_clear_error(be);
    sd_bt *src_pool = r->projected && out.projected ? out.projected : out.pooled;
    sd_bt *z = NULL, *e = NULL;
    int oom = 0;
    *pooled = sd_op_slice(src_pool, 0, 0, 1); /* the first chunk's */
    if (weighted) {
        z = sd_op_slice(out.hidden, 0, 0, k);
        e = z ? sd_op_slice(out.hidden, 0, k, k + 1) : NULL;
        if (e) {
            sd_bt *wz = apply_weights(be, t, z, e, &oom);
            sd_bt_free(z);
            z = wz;
        }
    } else {
        z = out.hidden;
        out.hidden = NULL;
    }
    if (z) {
        /* chunks are consecutive rows: [k, len, W] is [1, k*len, W] */
        int64_t shape[3] = {1, (int64_t)k * t->chunk_len, cfg->hidden};
        sd_bt *v = sd_bt_view(z, 3, shape);
        *cond = v ? sd_op_copy(v) : NULL;
        sd_bt_free(v);
    }
    sd_bt_free(z);
    sd_bt_free(e);
    sd_clip_output_free(&out);
    rc = sd_backend_take_error(be, err);
    sd_backend_clear_error(be);
    if (rc == SD_OK && oom) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory for token weights");
    if (rc == SD_OK && (!*cond || !*pooled))
        rc = sd_error_set(err, SD_ERR_INTERNAL, "text encoder: no output");
    if (rc != SD_OK) {
        sd_bt_free(*cond);
        sd_bt_free(*pooled);
        *cond = *pooled = NULL;
    }
    return rc;
}

/* Download and free a backend tensor. */
sd_tensor *sd_te_to_host(sd_bt *t) {
    sd_tensor *h = t ? sd_bt_to_host(t) : NULL;
    sd_bt_free(t);
    return h;
}

/* ---- FLUX: T5 cond, CLIP-L pooled ------------------------------------------------- */

/* ComfyUI's T5XXLModel special tokens: the empty prompt is [end, pad...]. */
#define T5_END 1
#define T5_PAD 0

/* The T5 over the one chunk of t: *cond [1, len, d_model] (backend). */
sd_status sd_te_encode_t5(const sd_text_encoder *te, const sd_prompt_tokens *t, int clip_skip,
                           const sd_text_encode_opts *o, sd_bt **cond, sd_error *err) {
    *cond = NULL;
    const sd_t5_config *cfg = sd_t5_get_config(te->t5);
    sd_backend *be = sd_t5_backend(te->t5);
    if (t->n_chunks != 1 || t->chunk_len < 1)
        return sd_error_set(err, SD_ERR_INVALID, "T5: %d chunks of %d tokens (want one chunk)",
                            t->n_chunks, t->chunk_len);
    int weighted = sd_prompt_tokens_has_weights(t), n = 1 + weighted;
    size_t slots = (size_t)n * t->chunk_len;
    int32_t *ids = malloc(slots * sizeof *ids);
    const float **vecs = malloc(slots * sizeof *vecs);
    if (!ids || !vecs) {
        free(ids);
        free(vecs);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory for %zu token slots", slots);
    }
    int any_vec = 0;
    build_slots(cfg->d_model, T5_PAD, T5_END, -1, t, weighted, ids, vecs, &any_vec, o);
    sd_t5_tokens in = {n, t->chunk_len, ids, any_vec ? (const float *const *)vecs : NULL};
    /* CLIPSetLastLayer: ComfyUI's "hidden" layer when within the blocks */
    int layer = clip_skip < 0 && -clip_skip <= cfg->layers ? clip_skip : 0;
    sd_precision prev = sd_backend_precision(be);
    if (prev == SD_PREC_F16) {
        sd_te_warnf(o, "T5-XXL overflows in f16: the text encoder computes it in f32");
        sd_backend_set_precision(be, SD_PREC_F32);
    }
    sd_bt *out = NULL;
    sd_status rc = sd_t5_forward(te->t5, &in, layer, &out, err);
    sd_backend_set_precision(be, prev);
    free(ids);
    free(vecs);
    if (rc != SD_OK) return rc;
    if (!weighted) {
        *cond = out;
        return SD_OK;
    }
    sd_backend_clear_error(be);
    int oom = 0;
    sd_bt *z = sd_op_slice(out, 0, 0, 1), *e = z ? sd_op_slice(out, 0, 1, 2) : NULL;
    *cond = e ? apply_weights(be, t, z, e, &oom) : NULL;
    sd_bt_free(z);
    sd_bt_free(e);
    sd_bt_free(out);
    rc = sd_backend_take_error(be, err);
    sd_backend_clear_error(be);
    if (rc == SD_OK && oom) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory for token weights");
    if (rc == SD_OK && !*cond) rc = sd_error_set(err, SD_ERR_INTERNAL, "T5: no output");
    if (rc != SD_OK) {
        sd_bt_free(*cond);
        *cond = NULL;
    }
    return rc;
}

sd_status sd_text_encode_flux_tokens(const sd_text_encoder *te, const sd_prompt_tokens *l,
                                     const sd_prompt_tokens *t5, int clip_skip,
                                     const sd_text_encode_opts *opts, sd_tensor **cond,
                                     sd_tensor **pooled, sd_error *err) {
    *cond = *pooled = NULL;
    if (te->kind != SD_TE_FLUX || !l || !t5)
        return sd_error_set(err, SD_ERR_INVALID,
                            "Flux encoding needs a flux text encoder and CLIP-L + T5 tokens (this "
                            "encoder is %s)",
                            sd_te_kind_name(te->kind));
    if (clip_skip > 0)
        return sd_error_set(err, SD_ERR_INVALID,
                            "clip skip %d: CLIPSetLastLayer takes -1 or lower (0 = not set)",
                            clip_skip);
    sd_bt *zl = NULL, *pl = NULL, *z = NULL;
    sd_status rc = sd_te_encode_role(&te->l, l, clip_skip, opts, &zl, &pl, err);
    sd_bt_free(zl); /* FluxClipModel keeps only CLIP-L's pooled output */
    if (rc == SD_OK) rc = sd_te_encode_t5(te, t5, clip_skip, opts, &z, err);
    if (rc == SD_OK) {
        *cond = sd_te_to_host(z);
        *pooled = sd_te_to_host(pl);
        z = pl = NULL;
        if (!*cond || !*pooled) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory downloading conditioning");
    }
    sd_bt_free(z);
    sd_bt_free(pl);
    if (rc != SD_OK) {
        sd_tensor_unref(*cond);
        sd_tensor_unref(*pooled);
        *cond = *pooled = NULL;
    }
    return rc;
}

sd_status sd_text_encode_tokens(const sd_text_encoder *te, const sd_prompt_tokens *l,
                                const sd_prompt_tokens *g, int clip_skip,
                                const sd_text_encode_opts *opts, sd_tensor **cond,
                                sd_tensor **pooled, sd_error *err) {
    *cond = *pooled = NULL;
    if (clip_skip > 0)
        return sd_error_set(err, SD_ERR_INVALID,
                            "clip skip %d: CLIPSetLastLayer takes -1 or lower (0 = not set)",
                            clip_skip);
    if (te->t5)
        return sd_error_set(err, SD_ERR_INVALID,
                            "a %s text encoder encodes through sd_text_encode_flux_tokens",
                            sd_te_kind_name(te->kind));
    if (!te->l.clip != !l || !te->g.clip != !g)
        return sd_error_set(err, SD_ERR_INVALID,
                            "%s text encoder: tokens for %s%s%s expected",
                            sd_te_kind_name(te->kind), te->l.clip ? "'l'" : "",
                            te->l.clip && te->g.clip ? " and " : "", te->g.clip ? "'g'" : "");
    sd_bt *zl = NULL, *pl = NULL, *zg = NULL, *pg = NULL, *z = NULL;
    sd_status rc = SD_OK;
    if (l) rc = sd_te_encode_role(&te->l, l, clip_skip, opts, &zl, &pl, err);
    if (rc == SD_OK && g) rc = sd_te_encode_role(&te->g, g, clip_skip, opts, &zg, &pg, err);
    if (rc != SD_OK) goto done;
    if (zl && zg) {
        /* SDXL: cut both to the shorter token count, l's channels first */
        sd_backend *be = sd_clip_backend(te->l.clip);
        int64_t cut = zl->shape[1] < zg->shape[1] ? zl->shape[1] : zg->shape[1];
        sd_bt *a = sd_op_slice(zl, 1, 0, cut), *b = a ? sd_op_slice(zg, 1, 0, cut) : NULL;
        z = b ? sd_op_concat(a, b, 2) : NULL;
        sd_bt_free(a);
        sd_bt_free(b);
        rc = sd_backend_take_error(be, err);
        sd_backend_clear_error(be);
        if (rc != SD_OK) goto done;
        *pooled = sd_te_to_host(pg);
        pg = NULL;
    } else if (zl) {
        z = zl;
        zl = NULL;
        *pooled = sd_te_to_host(pl);
        pl = NULL;
    } else {
        z = zg;
        zg = NULL;
        *pooled = sd_te_to_host(pg);
        pg = NULL;
    }
    *cond = sd_te_to_host(z);
    z = NULL;
    if (!*cond || !*pooled) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory downloading conditioning");
done:
    sd_bt_free(zl);
    sd_bt_free(pl);
    sd_bt_free(zg);
    sd_bt_free(pg);
    sd_bt_free(z);
    if (rc != SD_OK) {
        sd_tensor_unref(*cond);
        sd_tensor_unref(*pooled);
        *cond = *pooled = NULL;
    }
    return rc;
}

/* ---- from text ---------------------------------------------------------------- */

void sd_te_prompt_opts(const te_role *r, const sd_text_encode_opts *o, sd_prompt_opts *po) {
    if (r->name == 'h') sd_prompt_opts_clip_h(po);
    else if (r->name == 'g') sd_prompt_opts_clip_g(po);
    else sd_prompt_opts_clip_l(po);
    if (o) {
        po->embedding_dirs = o->embedding_dirs;
        po->n_embedding_dirs = o->n_embedding_dirs;
        po->warn = o->warn;
        po->warn_ud = o->warn_ud;
        po->stop = o->interrupt;
    }
}

sd_status sd_te_tokenize(const sd_text_encoder *te, const te_role *r, const char *text,
                          const sd_text_encode_opts *o, sd_prompt_tokens **t, sd_error *err) {
    *t = NULL;
    if (!r->clip) return SD_OK;
    sd_prompt_opts po;
    sd_te_prompt_opts(r, o, &po);
    po.max_length = sd_clip_get_config(r->clip)->positions;
    return sd_prompt_tokenize(te->tok, text ? text : "", &po, t, err);
}

sd_status sd_te_tokenize_t5(const sd_text_encoder *te, const char *text, int sd3,
                            const sd_text_encode_opts *o, sd_prompt_tokens **t, sd_error *err) {
    *t = NULL;
    if (!te->t5tok)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder has no T5 tokenizer (configure --tokenizer-dir DIR with "
                            "DIR/" SD_T5_TOKENIZER_SUBDIR "/tokenizer.json, or --comfyui-dir)");
    sd_prompt_vocab v5;
    sd_status rc = sd_t5_tokenizer_prompt_vocab(te->t5tok, &v5, err);
    if (rc != SD_OK) return rc;
    sd_prompt_opts po;
    if (sd3) sd_prompt_opts_t5xxl_sd3(&po);
    else sd_prompt_opts_t5xxl(&po);
    if (o) {
        po.embedding_dirs = o->embedding_dirs;
        po.n_embedding_dirs = o->n_embedding_dirs;
        po.warn = o->warn;
        po.warn_ud = o->warn_ud;
        po.stop = o->interrupt;
    }
    return sd_prompt_tokenize_vocab(&v5, text ? text : "", &po, t, err);
}

static sd_status encode_texts(const sd_text_encoder *te, const char *text_l, const char *text_g,
                              int pad_equal, int clip_skip, const sd_text_encode_opts *o,
                              sd_tensor **cond, sd_tensor **pooled, sd_error *err) {
    *cond = *pooled = NULL;
    if (!te->tok)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder has no tokenizer (configure --tokenizer-dir or %s)",
                            SD_TOKENIZER_DIR_ENV);
    sd_prompt_tokens *l = NULL, *g = NULL;
    sd_status rc = sd_te_tokenize(te, &te->l, text_l, o, &l, err);
    if (rc == SD_OK) rc = sd_te_tokenize(te, &te->g, text_g, o, &g, err);
    if (rc == SD_OK && pad_equal && l && g && l->n_chunks != g->n_chunks) {
        sd_prompt_opts po;
        if (l->n_chunks < g->n_chunks) {
            sd_te_prompt_opts(&te->l, o, &po);
            rc = sd_prompt_tokens_pad_chunks(te->tok, &po, l, g->n_chunks, err);
        } else {
            sd_te_prompt_opts(&te->g, o, &po);
            rc = sd_prompt_tokens_pad_chunks(te->tok, &po, g, l->n_chunks, err);
        }
    }
    if (rc == SD_OK) rc = sd_text_encode_tokens(te, l, g, clip_skip, o, cond, pooled, err);
    sd_prompt_tokens_free(l);
    sd_prompt_tokens_free(g);
    return rc;
}

sd_status sd_text_encode_flux(const sd_text_encoder *te, const char *clip_l, const char *t5xxl,
                              int clip_skip, const sd_text_encode_opts *opts, sd_tensor **cond,
                              sd_tensor **pooled, sd_error *err) {
    *cond = *pooled = NULL;
    if (te->kind != SD_TE_FLUX)
        return sd_error_set(err, SD_ERR_INVALID,
                            "CLIPTextEncodeFlux needs a flux text encoder (DualCLIPLoader type "
                            "flux, or a Flux checkpoint), this one is %s",
                            sd_te_kind_name(te->kind));
    if (!te->tok)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder has no CLIP tokenizer (configure --tokenizer-dir or %s)",
                            SD_TOKENIZER_DIR_ENV);
    if (!te->t5tok)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder has no T5 tokenizer (configure --tokenizer-dir DIR with "
                            "DIR/" SD_T5_TOKENIZER_SUBDIR "/tokenizer.json, or --comfyui-dir)");
    sd_prompt_tokens *l = NULL, *t = NULL;
    sd_status rc = sd_te_tokenize(te, &te->l, clip_l, opts, &l, err);
    if (rc == SD_OK) rc = sd_te_tokenize_t5(te, t5xxl, 0, opts, &t, err);
    if (rc == SD_OK) rc = sd_text_encode_flux_tokens(te, l, t, clip_skip, opts, cond, pooled, err);
    sd_prompt_tokens_free(l);
    sd_prompt_tokens_free(t);
    return rc;
}

sd_status sd_text_encode(const sd_text_encoder *te, const char *text, int clip_skip,
                         const sd_text_encode_opts *opts, sd_tensor **cond, sd_tensor **pooled,
                         sd_error *err) {
    return sd_text_encode_masked(te, text, clip_skip, opts, cond, pooled, NULL, err);
}

sd_status sd_text_encode_masked(const sd_text_encoder *te, const char *text, int clip_skip,
                                const sd_text_encode_opts *opts, sd_tensor **cond,
                                sd_tensor **pooled, sd_tensor **mask, sd_error *err) {
    if (mask) *mask = NULL;
    if (te->kind == SD_TE_ZIMAGE) {
        sd_tensor *m = NULL;
        *pooled = NULL;
        sd_status rc = sd_text_encode_zimage(te, text, clip_skip, opts, cond, &m, err);
        if (mask) *mask = m;
        else sd_tensor_unref(m);
        return rc;
    }
    if (te->kind == SD_TE_FLUX)
        return sd_text_encode_flux(te, text, text, clip_skip, opts, cond, pooled, err);
    if (te->kind == SD_TE_SD3)
        return sd_text_encode_sd3(te, text, text, text, 1, clip_skip, opts, cond, pooled, err);
    if (te->kind == SD_TE_T5) {
        *cond = *pooled = NULL;
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "a T5-XXL file alone is the text encoder of families sdflow does not "
                            "run (Mochi, ...); load it with a CLIP-L through DualCLIPLoader type "
                            "flux for Flux, or as an SD3 text encoder (CLIPLoader type sd3, "
                            "TripleCLIPLoader)");
    }
    return encode_texts(te, text, text, 0, clip_skip, opts, cond, pooled, err);
}

sd_status sd_text_encode_sdxl(const sd_text_encoder *te, const char *text_g, const char *text_l,
                              int clip_skip, const sd_text_encode_opts *opts, sd_tensor **cond,
                              sd_tensor **pooled, sd_error *err) {
    *cond = *pooled = NULL;
    if (te->kind != SD_TE_SDXL)
        return sd_error_set(err, SD_ERR_INVALID,
                            "CLIPTextEncodeSDXL needs an SDXL text encoder, this one is %s",
                            sd_te_kind_name(te->kind));
    return encode_texts(te, text_l, text_g, 1, clip_skip, opts, cond, pooled, err);
}
