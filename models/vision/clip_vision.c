/* clip_vision.c - CLIP vision towers: detection, loading and the forward
 * pass (ComfyUI's clip_model.CLIPVision / CLIPVisionModelProjection). */
#include "models/vision/clip_vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/torch_ckpt.h"
#include "models/checkpoint/weights.h"
#include "models/text/clip_block.h"

struct sd_clip_vision {
    sd_backend *be;
    sd_clip_vision_config cfg;
    sd_bt *cls;       /* [W] */
    sd_bt *patch_w;   /* [W, 3, p, p], no bias */
    sd_bt *pos;       /* [positions, W] */
    sd_bt *pre_w, *pre_b, *post_w, *post_b;
    sd_clip_block *layer;
    sd_bt *proj;      /* HF [P, W] (linear) or OpenCLIP [W, P] (matmul) */
};

const char *sd_clip_vision_kind_name(sd_clip_vision_kind k) {
    switch (k) {
    case SD_CLIP_VISION_VIT_L: return "vitl";
    case SD_CLIP_VISION_VIT_H: return "h";
    case SD_CLIP_VISION_VIT_G: return "g";
    }
    return "?";
}

/* Key names of the two layouts, relative to the prefix. */
typedef struct vnames {
    const char *cls, *patch, *pos, *pre_w, *pre_b, *post_w, *post_b, *proj;
    const sd_clip_block_names *blocks;
    const char *block_base; /* what the block names hang from */
} vnames;

static const vnames hf_names = {
    "vision_model.embeddings.class_embedding", "vision_model.embeddings.patch_embedding.weight",
    "vision_model.embeddings.position_embedding.weight", "vision_model.pre_layrnorm.weight",
    "vision_model.pre_layrnorm.bias", "vision_model.post_layernorm.weight",
    "vision_model.post_layernorm.bias", "visual_projection.weight", &sd_clip_block_hf,
    "vision_model.",
};
static const vnames openclip_names = {
    "class_embedding", "conv1.weight", "positional_embedding", "ln_pre.weight", "ln_pre.bias",
    "ln_post.weight", "ln_post.bias", "proj", &sd_clip_block_openclip, "",
};

static int has_layer(const sd_weights *w, const vnames *nm, int i) {
    char name[160];
    snprintf(name, sizeof name, "%s", nm->block_base);
    size_t n = strlen(name);
    snprintf(name + n, sizeof name - n, nm->blocks->ln1_w, i);
    return sd_weights_has(w, name);
}

sd_status sd_clip_vision_probe(sd_st_file *f, const char *prefix, sd_clip_vision_config *cfg,
                               sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (!prefix) prefix = "";
    const char *path = sd_st_path(f);
    sd_weights w;
    sd_weights_init(&w, NULL, f, prefix);
    const vnames *nm = NULL;
    if (sd_weights_has(&w, hf_names.cls)) nm = &hf_names;
    else if (sd_weights_has(&w, "class_embedding") &&
             sd_weights_has(&w, "transformer.resblocks.0.attn.in_proj_weight"))
        nm = &openclip_names;
    if (!nm) {
        if (sd_weights_has(&w, "vision_model.embeddings.patch_embedding.weight"))
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: a vision encoder without a class embedding (SigLIP); only "
                                "CLIP vision towers (ViT-L, ViT-H, ViT-bigG) are supported", path);
        if (sd_weights_has(&w, "embeddings.patch_embeddings.projection.weight") ||
            sd_weights_has(&w, "encoder.layer.0.layer_scale1.lambda1"))
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: a DINOv2 image encoder; only CLIP vision towers (ViT-L, "
                                "ViT-H, ViT-bigG) are supported", path);
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "%s: no CLIP vision model under '%s' (expected "
                            "vision_model.embeddings.class_embedding or visual.class_embedding)",
                            path, prefix);
    }
    cfg->openclip = nm == &openclip_names;
    if (sd_weights_has(&w, "multi_modal_projector.linear_1.bias"))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: a llava vision tower (multi_modal_projector) is not supported",
                            path);
    int want;
    if (has_layer(&w, nm, 47)) cfg->kind = SD_CLIP_VISION_VIT_G, want = 48;
    else if (has_layer(&w, nm, 30)) cfg->kind = SD_CLIP_VISION_VIT_H, want = 32;
    else if (has_layer(&w, nm, 22)) cfg->kind = SD_CLIP_VISION_VIT_L, want = 24;
    else
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: clip vision file is invalid and does not contain a valid vision "
                            "model (fewer than the 23 layers of ViT-L/14, the smallest tower "
                            "ComfyUI knows)", path);
    while (has_layer(&w, nm, cfg->layers)) cfg->layers++;
    if (cfg->layers != want)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: %d vision layers; ComfyUI's %s config has %d", path, cfg->layers,
                            sd_clip_vision_kind_name(cfg->kind), want);
    cfg->heads = 16;
    cfg->act = cfg->kind == SD_CLIP_VISION_VIT_L ? SD_CLIP_ACT_QUICK_GELU : SD_CLIP_ACT_GELU;

    int64_t s[SD_MAX_DIMS];
    char key[400];
    if (sd_weights_shape(&w, nm->cls, s) != 1 || s[0] < 1 || s[0] % cfg->heads)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' is not a [width] vector with a width "
                            "of 16 heads", path, sd_weights_key(&w, nm->cls, key, sizeof key));
    cfg->hidden = (int)s[0];
    if (sd_weights_shape(&w, nm->patch, s) != 4 || s[0] != cfg->hidden || s[1] != 3 ||
        s[2] != s[3] || s[2] < 1)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' is not a [%d, 3, p, p] convolution",
                            path, sd_weights_key(&w, nm->patch, key, sizeof key), cfg->hidden);
    cfg->patch = (int)s[2];
    if (sd_weights_shape(&w, nm->pos, s) != 2 || s[1] != cfg->hidden || s[0] < 2)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' is not [positions, %d]", path,
                            sd_weights_key(&w, nm->pos, key, sizeof key), cfg->hidden);
    cfg->positions = (int)s[0];
    int grid = (int)lround(sqrt((double)(cfg->positions - 1)));
    if ((int64_t)grid * grid != cfg->positions - 1 || (int64_t)grid * cfg->patch > 1 << 16)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: %d positions are not a square grid plus the class token", path,
                            cfg->positions);
    cfg->image_size = grid * cfg->patch;
    {
        char name[200];
        snprintf(name, sizeof name, "%s", nm->block_base);
        size_t n = strlen(name);
        snprintf(name + n, sizeof name - n, nm->blocks->fc1_w, 0);
        if (sd_weights_shape(&w, name, s) != 2 || s[1] != cfg->hidden)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' missing or not [mlp, %d]", path,
                                sd_weights_key(&w, name, key, sizeof key), cfg->hidden);
        cfg->mlp = (int)s[0];
    }
    int pnd = sd_weights_shape(&w, nm->proj, s);
    if (pnd != 2 || s[cfg->openclip ? 0 : 1] != cfg->hidden)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' missing or not a projection of width %d",
                            path, sd_weights_key(&w, nm->proj, key, sizeof key), cfg->hidden);
    cfg->proj_dim = (int)s[cfg->openclip ? 1 : 0];
    return SD_OK;
}

void sd_clip_vision_free(sd_clip_vision *m) {
    if (!m) return;
    for (int i = 0; m->layer && i < m->cfg.layers; i++) sd_clip_block_free(&m->layer[i]);
    free(m->layer);
    sd_bt *all[] = {m->cls, m->patch_w, m->pos, m->pre_w, m->pre_b, m->post_w, m->post_b, m->proj};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sd_bt_free(all[i]);
    free(m);
}

const sd_clip_vision_config *sd_clip_vision_get_config(const sd_clip_vision *m) { return &m->cfg; }

sd_status sd_clip_vision_load(sd_backend *be, sd_st_file *f, const char *prefix,
                              sd_clip_vision **out, sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    if (!prefix) prefix = "";
    sd_clip_vision_config cfg;
    sd_status rc = sd_clip_vision_probe(f, prefix, &cfg, err);
    if (rc) return rc;
    const vnames *nm = cfg.openclip ? &openclip_names : &hf_names;
    sd_clip_vision *m = calloc(1, sizeof *m);
    if (m) m->layer = calloc((size_t)cfg.layers, sizeof *m->layer);
    if (!m || !m->layer) {
        free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading a CLIP vision model");
    }
    m->be = be;
    m->cfg = cfg;
    sd_weights w;
    sd_weights_init(&w, be, f, prefix);
    w.dtype = SD_F32;
    int64_t W = cfg.hidden;
    int64_t sp[4] = {W, 3, cfg.patch, cfg.patch}, spos[2] = {cfg.positions, W};
    int64_t sproj[2] = {cfg.openclip ? W : cfg.proj_dim, cfg.openclip ? cfg.proj_dim : W};
    int ok = (m->cls = sd_weights_get(&w, nm->cls, 1, &W, err)) &&
             (m->patch_w = sd_weights_get(&w, nm->patch, 4, sp, err)) &&
             (m->pos = sd_weights_get(&w, nm->pos, 2, spos, err)) &&
             (m->pre_w = sd_weights_get(&w, nm->pre_w, 1, &W, err)) &&
             (m->pre_b = sd_weights_get(&w, nm->pre_b, 1, &W, err)) &&
             (m->post_w = sd_weights_get(&w, nm->post_w, 1, &W, err)) &&
             (m->post_b = sd_weights_get(&w, nm->post_b, 1, &W, err)) &&
             (m->proj = sd_weights_get(&w, nm->proj, 2, sproj, err));
    if (ok) {
        char base[400];
        snprintf(base, sizeof base, "%s%s", prefix, nm->block_base);
        sd_weights lw;
        sd_weights_init(&lw, be, f, base);
        lw.dtype = SD_F32;
        for (int i = 0; ok && i < cfg.layers; i++)
            ok = sd_clip_block_bind(&lw, nm->blocks, W, cfg.mlp, i, &m->layer[i], err) == SD_OK;
    }
    if (!ok) {
        sd_clip_vision_free(m);
        return err->code ? err->code : SD_ERR_FORMAT;
    }
    *out = m;
    return SD_OK;
}

/* comfy.clip_vision.load: the tower at the top level, or open_clip's
 * "visual." layout. */
static const char *file_prefix(sd_st_file *f) {
    sd_weights w;
    sd_weights_init(&w, NULL, f, "visual.");
    return sd_weights_has(&w, "transformer.resblocks.0.attn.in_proj_weight") ? "visual." : "";
}

sd_status sd_clip_vision_load_file(sd_backend *be, const char *path, sd_clip_vision **out,
                                   sd_error *err) {
    *out = NULL;
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    rc = sd_clip_vision_load(be, f, file_prefix(f), out, err);
    sd_st_close(f);
    return rc;
}

sd_status sd_clip_vision_load_file_prefix(sd_backend *be, const char *path, const char *prefix,
                                          sd_clip_vision **out, sd_error *err) {
    *out = NULL;
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    rc = sd_clip_vision_load(be, f, prefix, out, err);
    sd_st_close(f);
    return rc;
}

sd_status sd_clip_vision_probe_file(const char *path, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    sd_clip_vision_config cfg;
    rc = sd_clip_vision_probe(f, file_prefix(f), &cfg, err);
    sd_st_close(f);
    return rc;
}

/* ---- forward ------------------------------------------------------------------- */

void sd_clip_vision_output_free(sd_clip_vision_output *o) {
    if (!o) return;
    sd_tensor_unref(o->last_hidden_state);
    sd_tensor_unref(o->penultimate);
    sd_tensor_unref(o->image_embeds);
    memset(o, 0, sizeof *o);
}

/* Replace *h by next (freeing the old value); 0 when next is NULL. */
static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

/* CLIPVisionEmbeddings: patches [N, g*g, W] after the class token, plus
 * the position table. */
static sd_bt *embed(sd_clip_vision *m, sd_bt *px) {
    const sd_clip_vision_config *c = &m->cfg;
    int64_t N = px->shape[0], W = c->hidden, P = c->positions - 1;
    sd_bt *x = sd_op_conv2d(px, m->patch_w, NULL, c->patch, 0, 0), *cls = NULL;
    if (!x) return NULL;
    int64_t flat[3] = {N, W, P};
    int perm[3] = {0, 2, 1};
    sd_bt *v = sd_bt_view(x, 3, flat);
    sd_bt *seq = v ? sd_op_permute(v, perm) : NULL; /* [N, P, W] */
    sd_bt_free(v);
    sd_bt_free(x);
    x = NULL;
    sd_bt *zeros = seq ? sd_bt_new4(m->be, SD_F32, 3, N, 1, W, 0) : NULL;
    if (zeros) cls = sd_op_add(zeros, m->cls); /* the class token per item */
    if (cls) x = sd_op_concat(cls, seq, 1);
    if (x) step(&x, sd_op_add(x, m->pos));
    sd_bt_free(zeros);
    sd_bt_free(cls);
    sd_bt_free(seq);
    return x;
}

static sd_tensor *host(sd_bt *t) { return t ? sd_bt_to_host(t) : NULL; }

sd_status sd_clip_vision_forward(sd_clip_vision *m, const sd_tensor *pixels,
                                 sd_clip_vision_output *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    const sd_clip_vision_config *c = &m->cfg;
    if (!pixels || pixels->dtype != SD_F32 || pixels->ndim != 4 || pixels->shape[0] < 1 ||
        pixels->shape[1] != 3 || pixels->shape[2] != c->image_size ||
        pixels->shape[3] != c->image_size)
        return sd_error_set(err, SD_ERR_INVALID, "CLIP vision: pixels must be F32 [N, 3, %d, %d]",
                            c->image_size, c->image_size);
    sd_backend_clear_error(m->be);
    int64_t N = pixels->shape[0], W = c->hidden;
    sd_bt *px = sd_bt_from_host(m->be, (sd_tensor *)pixels, SD_F32);
    sd_bt *x = px ? embed(m, px) : NULL, *pen = NULL, *pooled = NULL, *emb = NULL;
    sd_bt_free(px);
    if (x) step(&x, sd_op_layer_norm(x, m->pre_w, m->pre_b, 1e-5f));
    for (int i = 0; x && i < c->layers; i++) {
        step(&x, sd_clip_block_forward(&m->layer[i], c->heads, c->act, 0, x));
        if (x && i == c->layers - 2 && !(pen = sd_op_copy(x))) step(&x, NULL);
    }
    if (x && pen) {
        sd_bt *first = sd_op_slice(x, 1, 0, 1); /* the class token: [N, 1, W] */
        int64_t nw[2] = {N, W};
        sd_bt *v = first ? sd_bt_view(first, 2, nw) : NULL;
        pooled = v ? sd_op_layer_norm(v, m->post_w, m->post_b, 1e-5f) : NULL;
        sd_bt_free(v);
        sd_bt_free(first);
        if (pooled)
            emb = c->openclip ? sd_op_matmul(pooled, m->proj, 0, 1.0f)
                              : sd_op_linear(pooled, m->proj, NULL);
    }
    if (emb) {
        out->last_hidden_state = host(x);
        out->penultimate = host(pen);
        out->image_embeds = host(emb);
    }
    sd_bt_free(x);
    sd_bt_free(pen);
    sd_bt_free(pooled);
    sd_bt_free(emb);
    sd_status rc = sd_backend_take_error(m->be, err);
    sd_backend_clear_error(m->be);
    if (rc == SD_OK && (!out->last_hidden_state || !out->penultimate || !out->image_embeds))
        rc = sd_error_set(err, SD_ERR_NOMEM, "CLIP vision: out of memory");
    if (rc) sd_clip_vision_output_free(out);
    return rc;
}

sd_status sd_clip_vision_encode(sd_clip_vision *m, const sd_tensor *image, int crop,
                                sd_clip_vision_output *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    sd_tensor *px = NULL;
    sd_status rc = sd_clip_vision_preprocess(image, m->cfg.image_size, crop, sd_clip_vision_mean,
                                             sd_clip_vision_std, &px, err);
    if (rc) return rc;
    rc = sd_clip_vision_forward(m, px, out, err);
    sd_tensor_unref(px);
    return rc;
}
