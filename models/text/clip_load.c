/* clip_load.c - detecting a CLIP text encoder's layout and configuration
 * from key names and shapes, and binding its weights. */
#include "models/text/clip_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sd_clip_opts_default(sd_clip_opts *o) {
    memset(o, 0, sizeof *o);
    o->act = SD_CLIP_ACT_AUTO;
    o->weight_dtype = SD_F32;
}

/* Loader: the first failure is kept in err and later gets are skipped, so
 * the binding code reads straight through and checks once. */
typedef struct loader {
    sd_weights w;
    sd_error *err;
    int failed;
} loader;

static sd_bt *get(loader *ld, int ndim, int64_t d0, int64_t d1, const char *fmt, int i) {
    if (ld->failed) return NULL;
    int64_t shape[2] = {d0, d1};
    sd_bt *t = sd_weights_getf(&ld->w, ld->err, ndim, shape, fmt, i);
    if (!t) ld->failed = 1;
    return t;
}

typedef sd_clip_block_names layer_names;

const clip_names clip_names_hf = {
    "text_model.",
    "embeddings.token_embedding.weight", "embeddings.position_embedding.weight",
    "final_layer_norm.weight", "final_layer_norm.bias",
    "text_projection.weight", &sd_clip_block_hf,
};

const clip_names clip_names_openclip = {
    "",
    "token_embedding.weight", "positional_embedding",
    "ln_final.weight", "ln_final.bias",
    "text_projection", &sd_clip_block_openclip,
};

static int has_fmt(const sd_weights *w, const char *fmt, int i) {
    char name[256];
    snprintf(name, sizeof name, fmt, i);
    return sd_weights_has(w, name);
}

static void bind_layer(loader *ld, const layer_names *nm, const sd_clip_config *cfg, int i,
                       clip_layer_w *l) {
    if (!ld->failed && sd_clip_block_bind(&ld->w, nm, cfg->hidden, cfg->mlp, i, l, ld->err))
        ld->failed = 1;
}

void sd_clip_free(sd_clip *c) {
    if (!c) return;
    for (int i = 0; c->layer && i < c->cfg.layers; i++) sd_clip_block_free(&c->layer[i]);
    free(c->layer);
    sd_bt_free(c->tok_emb);
    sd_bt_free(c->pos_emb);
    sd_bt_free(c->final_w);
    sd_bt_free(c->final_b);
    sd_bt_free(c->proj);
    free(c);
}

const sd_clip_config *sd_clip_get_config(const sd_clip *c) { return &c->cfg; }
sd_backend *sd_clip_backend(const sd_clip *c) { return c->be; }

void sd_clip_set_tap(sd_clip *c, sd_clip_tap_fn fn, void *user) {
    c->tap = fn;
    c->tap_user = user;
}

/* Layout detection: sets *layout and the prefix the layer keys hang from
 * (HF adds "text_model." when present). 0 when nothing matches. */
static int detect(sd_st_file *f, const char *prefix, sd_clip_layout *layout, char *base,
                  size_t n) {
    sd_weights w;
    sd_weights_init(&w, NULL, f, prefix);
    if (sd_weights_has(&w, "text_model.embeddings.token_embedding.weight")) {
        *layout = SD_CLIP_LAYOUT_HF;
        snprintf(base, n, "%stext_model.", prefix);
        return 1;
    }
    if (sd_weights_has(&w, "embeddings.token_embedding.weight")) {
        *layout = SD_CLIP_LAYOUT_HF;
        snprintf(base, n, "%s", prefix);
        return 1;
    }
    if (sd_weights_has(&w, "token_embedding.weight") &&
        sd_weights_has(&w, "transformer.resblocks.0.ln_1.weight")) {
        *layout = SD_CLIP_LAYOUT_OPENCLIP;
        snprintf(base, n, "%s", prefix);
        return 1;
    }
    return 0;
}

sd_status sd_clip_load(sd_backend *be, sd_st_file *f, const char *prefix,
                       const sd_clip_opts *opts, sd_clip **out, sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local; /* the loader reads its code back */
    sd_clip_opts defaults;
    if (!opts) {
        sd_clip_opts_default(&defaults);
        opts = &defaults;
    }
    if (!prefix) prefix = "";
    char base[300];
    sd_clip_config cfg = {0};
    if (!detect(f, prefix, &cfg.layout, base, sizeof base))
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "%s: no CLIP text encoder under '%s' (expected "
                            "text_model.embeddings.token_embedding.weight or "
                            "token_embedding.weight + transformer.resblocks.N)",
                            sd_st_path(f), prefix);
    int hf = cfg.layout == SD_CLIP_LAYOUT_HF;
    const clip_names *names = hf ? &clip_names_hf : &clip_names_openclip;
    const layer_names *nm = names->block;

    loader ld = {.err = err};
    sd_weights_init(&ld.w, be, f, base);
    ld.w.dtype = opts->weight_dtype;

    int64_t s[SD_MAX_DIMS];
    const char *tok_name = names->tok_emb;
    const char *pos_name = names->pos_emb;
    char key[600];
    if (sd_weights_shape(&ld.w, tok_name, s) != 2)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' is not a 2-D [vocab, width] table",
                            sd_st_path(f), sd_weights_key(&ld.w, tok_name, key, sizeof key));
    cfg.vocab = (int)s[0];
    cfg.hidden = (int)s[1];
    if (opts->heads > 0) {
        if (cfg.hidden <= 0 || cfg.hidden % opts->heads != 0)
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: text encoder width %d under '%s' does not split into %d heads",
                                sd_st_path(f), cfg.hidden, prefix, opts->heads);
        cfg.heads = opts->heads;
    } else {
        if (cfg.hidden <= 0 || cfg.hidden % 64 != 0)
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: text encoder width %d under '%s' is not a multiple of the "
                                "64-wide heads CLIP uses",
                                sd_st_path(f), cfg.hidden, prefix);
        cfg.heads = cfg.hidden / 64;
    }
    if (sd_weights_shape(&ld.w, pos_name, s) != 2 || s[1] != cfg.hidden || s[0] < 1)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' missing or not [positions, %d]",
                            sd_st_path(f), sd_weights_key(&ld.w, pos_name, key, sizeof key),
                            cfg.hidden);
    cfg.positions = (int)s[0];
    while (has_fmt(&ld.w, nm->ln1_w, cfg.layers)) cfg.layers++;
    if (cfg.layers == 0)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: text encoder under '%s' has no layers",
                            sd_st_path(f), prefix);
    {
        char name[256];
        snprintf(name, sizeof name, nm->fc1_w, 0);
        if (sd_weights_shape(&ld.w, name, s) != 2)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: missing tensor '%s'", sd_st_path(f),
                                sd_weights_key(&ld.w, name, key, sizeof key));
        cfg.mlp = (int)s[0];
    }
    cfg.act = opts->act;
    if (cfg.act == SD_CLIP_ACT_AUTO)
        cfg.act = (!hf || cfg.hidden >= 1024) ? SD_CLIP_ACT_GELU : SD_CLIP_ACT_QUICK_GELU;

    /* text projection: HF keeps it beside text_model as a Linear [P, W];
     * OpenCLIP stores the matrix applied as x @ P, i.e. [W, P] */
    sd_weights outer;
    sd_weights_init(&outer, be, f, hf ? prefix : base);
    outer.dtype = opts->weight_dtype;
    const char *proj_name = names->proj;
    int proj_nd = sd_weights_shape(&outer, proj_name, s);
    if (proj_nd >= 0 && (proj_nd != 2 || s[hf ? 1 : 0] != cfg.hidden))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' does not map width %d",
                            sd_st_path(f), sd_weights_key(&outer, proj_name, key, sizeof key),
                            cfg.hidden);
    if (proj_nd == 2) cfg.proj_dim = (int)s[hf ? 0 : 1];

    sd_clip *c = calloc(1, sizeof *c);
    if (!c) return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the text encoder");
    c->be = be;
    c->cfg = cfg;
    c->proj_is_linear = hf;
    c->layer = calloc((size_t)cfg.layers, sizeof *c->layer);
    if (!c->layer) {
        free(c);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the text encoder");
    }
    c->tok_emb = get(&ld, 2, cfg.vocab, cfg.hidden, tok_name, 0);
    c->pos_emb = get(&ld, 2, cfg.positions, cfg.hidden, pos_name, 0);
    for (int i = 0; i < cfg.layers; i++) bind_layer(&ld, nm, &cfg, i, &c->layer[i]);
    c->final_w = get(&ld, 1, cfg.hidden, 0, names->final_w, 0);
    c->final_b = get(&ld, 1, cfg.hidden, 0, names->final_b, 0);
    if (!ld.failed && cfg.proj_dim) {
        int64_t ps[2] = {hf ? cfg.proj_dim : cfg.hidden, hf ? cfg.hidden : cfg.proj_dim};
        c->proj = sd_weights_get(&outer, proj_name, 2, ps, err);
        if (!c->proj) ld.failed = 1;
    }
    if (ld.failed) {
        sd_clip_free(c);
        return err->code;
    }
    *out = c;
    return SD_OK;
}
