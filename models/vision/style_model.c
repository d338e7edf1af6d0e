/* style_model.c - the T2I-Adapter style adapter (style_model.h). */
#include "models/vision/style_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/torch_ckpt.h"
#include "models/checkpoint/weights.h"
#include "models/text/clip_block.h"

struct sd_style_model {
    sd_backend *be;
    sd_style_model_config cfg;
    sd_bt *style;  /* [T, W] (stored [1, T, W]) */
    sd_bt *pre_w, *pre_b, *post_w, *post_b;
    sd_bt *proj;   /* [W, C] */
    sd_clip_block *layer;
};

/* ResidualAttentionBlock under transformer_layes.N (open_clip's names). */
static const sd_clip_block_names block_names = {
    "transformer_layes.%d.ln_1.weight", "transformer_layes.%d.ln_1.bias",
    "transformer_layes.%d.ln_2.weight", "transformer_layes.%d.ln_2.bias",
    "transformer_layes.%d.mlp.c_fc.weight", "transformer_layes.%d.mlp.c_fc.bias",
    "transformer_layes.%d.mlp.c_proj.weight", "transformer_layes.%d.mlp.c_proj.bias",
    "transformer_layes.%d.attn.out_proj.weight", "transformer_layes.%d.attn.out_proj.bias",
    NULL, NULL, NULL, NULL, NULL, NULL,
    "transformer_layes.%d.attn.in_proj_weight", "transformer_layes.%d.attn.in_proj_bias",
};

sd_status sd_style_model_probe(sd_st_file *f, sd_style_model_config *cfg, sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *path = sd_st_path(f);
    sd_weights w;
    sd_weights_init(&w, NULL, f, "");
    if (!sd_weights_has(&w, "style_embedding")) {
        if (sd_weights_has(&w, "redux_down.weight"))
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: a Flux Redux style model, which needs a SigLIP vision "
                                "encoder; not supported", path);
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: invalid style model (no style_embedding or redux_down.weight)",
                            path);
    }
    int64_t s[SD_MAX_DIMS];
    if (sd_weights_shape(&w, "style_embedding", s) != 3 || s[0] != 1 || s[1] < 1 || s[2] < 8 ||
        s[2] % 8)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: 'style_embedding' is not [1, tokens, width] with a width of 8 "
                            "heads", path);
    cfg->tokens = (int)s[1];
    cfg->width = (int)s[2];
    cfg->heads = 8;
    if (sd_weights_shape(&w, "proj", s) != 2 || s[0] != cfg->width || s[1] < 1)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: 'proj' is not [%d, context]", path,
                            cfg->width);
    cfg->context = (int)s[1];
    if (sd_weights_shape(&w, "transformer_layes.0.mlp.c_fc.weight", s) != 2 ||
        s[1] != cfg->width)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: 'transformer_layes.0.mlp.c_fc.weight' missing or not [mlp, %d]",
                            path, cfg->width);
    cfg->mlp = (int)s[0];
    char name[80];
    for (;;) {
        snprintf(name, sizeof name, "transformer_layes.%d.ln_1.weight", cfg->layers);
        if (!sd_weights_has(&w, name)) break;
        cfg->layers++;
    }
    return SD_OK;
}

void sd_style_model_free(sd_style_model *m) {
    if (!m) return;
    for (int i = 0; m->layer && i < m->cfg.layers; i++) sd_clip_block_free(&m->layer[i]);
    free(m->layer);
    sd_bt *all[] = {m->style, m->pre_w, m->pre_b, m->post_w, m->post_b, m->proj};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sd_bt_free(all[i]);
    free(m);
}

const sd_style_model_config *sd_style_model_get_config(const sd_style_model *m) { return &m->cfg; }

sd_status sd_style_model_load(sd_backend *be, sd_st_file *f, sd_style_model **out,
                              sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    sd_style_model_config cfg;
    sd_status rc = sd_style_model_probe(f, &cfg, err);
    if (rc) return rc;
    sd_style_model *m = calloc(1, sizeof *m);
    if (m && cfg.layers) m->layer = calloc((size_t)cfg.layers, sizeof *m->layer);
    if (!m || (cfg.layers && !m->layer)) {
        free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading a style model");
    }
    m->be = be;
    m->cfg = cfg;
    sd_weights w;
    sd_weights_init(&w, be, f, "");
    w.dtype = SD_F32;
    int64_t W = cfg.width, se[3] = {1, cfg.tokens, W}, pj[2] = {W, cfg.context};
    sd_bt *se_bt = NULL;
    int ok = (se_bt = sd_weights_get(&w, "style_embedding", 3, se, err)) &&
             (m->pre_w = sd_weights_get(&w, "ln_pre.weight", 1, &W, err)) &&
             (m->pre_b = sd_weights_get(&w, "ln_pre.bias", 1, &W, err)) &&
             (m->post_w = sd_weights_get(&w, "ln_post.weight", 1, &W, err)) &&
             (m->post_b = sd_weights_get(&w, "ln_post.bias", 1, &W, err)) &&
             (m->proj = sd_weights_get(&w, "proj", 2, pj, err));
    if (ok) {
        int64_t tw[2] = {cfg.tokens, W};
        sd_bt *v = sd_bt_view(se_bt, 2, tw);
        m->style = v ? sd_op_copy(v) : NULL;
        sd_bt_free(v);
        if (!m->style) ok = 0, sd_backend_take_error(be, err), sd_backend_clear_error(be);
    }
    sd_bt_free(se_bt);
    for (int i = 0; ok && i < cfg.layers; i++)
        ok = sd_clip_block_bind(&w, &block_names, W, cfg.mlp, i, &m->layer[i], err) == SD_OK;
    if (!ok) {
        sd_style_model_free(m);
        return err->code ? err->code : SD_ERR_NOMEM;
    }
    *out = m;
    return SD_OK;
}

sd_status sd_style_model_load_file(sd_backend *be, const char *path, sd_style_model **out,
                                   sd_error *err) {
    *out = NULL;
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    rc = sd_style_model_load(be, f, out, err);
    sd_st_close(f);
    return rc;
}

sd_status sd_style_model_probe_file(const char *path, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    sd_style_model_config cfg;
    rc = sd_style_model_probe(f, &cfg, err);
    sd_st_close(f);
    return rc;
}

/* Replace *h by next (freeing the old value); 0 when next is NULL. */
static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

sd_status sd_style_model_forward(sd_style_model *m, const sd_tensor *hidden, sd_tensor **out,
                                 sd_error *err) {
    *out = NULL;
    const sd_style_model_config *c = &m->cfg;
    if (!hidden || hidden->dtype != SD_F32 || hidden->ndim != 3 || hidden->shape[0] < 1 ||
        hidden->shape[2] != c->width)
        return sd_error_set(err, SD_ERR_INVALID,
                            "style model: the CLIP vision output's last_hidden_state must be "
                            "[N, L, %d] (this style model's width)", c->width);
    sd_backend_clear_error(m->be);
    int64_t N = hidden->shape[0], L = hidden->shape[1], T = c->tokens;
    sd_bt *x = sd_bt_from_host(m->be, (sd_tensor *)hidden, SD_F32), *zeros = NULL, *se = NULL;
    if (x) zeros = sd_bt_new4(m->be, SD_F32, 3, N, T, c->width, 0);
    if (zeros) se = sd_op_add(zeros, m->style); /* the style tokens per item */
    if (se) step(&x, sd_op_concat(x, se, 1));
    else step(&x, NULL);
    sd_bt_free(zeros);
    sd_bt_free(se);
    if (x) step(&x, sd_op_layer_norm(x, m->pre_w, m->pre_b, 1e-5f));
    for (int i = 0; x && i < c->layers; i++)
        step(&x, sd_clip_block_forward(&m->layer[i], c->heads, SD_CLIP_ACT_QUICK_GELU, 0, x));
    if (x) step(&x, sd_op_slice(x, 1, L, L + T));
    if (x) step(&x, sd_op_layer_norm(x, m->post_w, m->post_b, 1e-5f));
    if (x) {
        int64_t flat[2] = {N * T, c->width};
        sd_bt *v = sd_bt_view(x, 2, flat);
        step(&x, v ? sd_op_matmul(v, m->proj, 0, 1.0f) : NULL);
        sd_bt_free(v);
    }
    if (x) {
        sd_tensor *h = sd_bt_to_host(x);
        if (h) {
            int64_t shape[3] = {N, T, c->context};
            *out = sd_tensor_reshape(h, 3, shape);
            sd_tensor_unref(h);
        }
    }
    sd_bt_free(x);
    sd_status rc = sd_backend_take_error(m->be, err);
    sd_backend_clear_error(m->be);
    if (rc == SD_OK && !*out) rc = sd_error_set(err, SD_ERR_NOMEM, "style model: out of memory");
    if (rc) {
        sd_tensor_unref(*out);
        *out = NULL;
    }
    return rc;
}
