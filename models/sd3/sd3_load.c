/* sd3_load.c - binding an MMDiT checkpoint's tensors to the model, and the
 * parameter table (sd_sd3_param). Every tensor is fetched with the shape the
 * detected config implies, so a wrongly shaped one is an error naming its
 * key before any forward runs. */
#include "sd3_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef sd_dit_loader loader;

static void attn(loader *ld, const sd_sd3_config *c, sd3_attn *a, int pre_only, const char *base) {
    int64_t h = c->hidden_size;
    sd_dit_lin(ld, &a->qkv.w, &a->qkv.b, 3 * h, h, c->qkv_bias, "%s.qkv", base);
    if (!pre_only) sd_dit_lin(ld, &a->proj.w, &a->proj.b, h, h, 1, "%s.proj", base);
    if (c->qk_norm) {
        sd_dit_vec(ld, &a->ln_q, c->head_dim, "%s.ln_q.weight", base);
        sd_dit_vec(ld, &a->ln_k, c->head_dim, "%s.ln_k.weight", base);
    }
}

static void stream(loader *ld, const sd_sd3_config *c, sd3_stream *s, int i, const char *which, int pre_only,
                   int self_attn) {
    int64_t h = c->hidden_size;
    char base[96];
    s->pre_only = pre_only;
    s->self_attn = self_attn;
    sd_dit_lin(ld, &s->ada.w, &s->ada.b, (self_attn ? 9 : pre_only ? 2 : 6) * h, h, 1,
               "joint_blocks.%d.%s.adaLN_modulation.1", i, which);
    snprintf(base, sizeof base, "joint_blocks.%d.%s.attn", i, which);
    attn(ld, c, &s->attn, pre_only, base);
    if (self_attn) {
        snprintf(base, sizeof base, "joint_blocks.%d.%s.attn2", i, which);
        attn(ld, c, &s->attn2, 0, base);
    }
    if (!pre_only) {
        sd_dit_lin(ld, &s->fc1.w, &s->fc1.b, c->mlp_hidden, h, 1, "joint_blocks.%d.%s.mlp.fc1", i, which);
        sd_dit_lin(ld, &s->fc2.w, &s->fc2.b, h, c->mlp_hidden, 1, "joint_blocks.%d.%s.mlp.fc2", i, which);
    }
}

/* Linear "<name>.weight" [out, in] and "<name>.bias" [out]. */
static void lin(loader *ld, sd3_lin *l, int64_t out, int64_t in, const char *name) {
    sd_dit_lin(ld, &l->w, &l->b, out, in, 1, "%s", name);
}

static void build(loader *ld, sd_sd3 *m, int controlnet) {
    const sd_sd3_config *c = &m->cfg;
    int64_t h = c->hidden_size, p = c->patch_size, pp = p * p, M = c->pos_embed_max_size;
    int64_t xs[4] = {h, c->in_channels, p, p}, ps[3] = {1, M * M, h};
    sd_dit_get(ld, &m->x_proj_w, 4, xs, "x_embedder.proj.weight");
    sd_dit_vec(ld, &m->x_proj_b, h, "x_embedder.proj.bias");
    sd_dit_get(ld, &m->pos_embed, 3, ps, "pos_embed");
    lin(ld, &m->t0, h, 256, "t_embedder.mlp.0");
    lin(ld, &m->t2, h, h, "t_embedder.mlp.2");
    if (c->adm_in_channels) {
        lin(ld, &m->y0, h, c->adm_in_channels, "y_embedder.mlp.0");
        lin(ld, &m->y2, h, h, "y_embedder.mlp.2");
    }
    lin(ld, &m->ctx_emb, h, c->context_in_dim, "context_embedder");
    m->blocks = calloc((size_t)c->depth, sizeof *m->blocks);
    if (!m->blocks) {
        sd_dit_nomem(ld);
        return;
    }
    for (int i = 0; i < c->depth && !ld->failed; i++) {
        stream(ld, c, &m->blocks[i].ctx, i, "context_block", !controlnet && i == c->depth - 1, 0);
        stream(ld, c, &m->blocks[i].x, i, "x_block", 0, (int)((c->self_attn >> i) & 1));
    }
    if (controlnet) return;
    lin(ld, &m->final_ada, 2 * h, h, "final_layer.adaLN_modulation.1");
    lin(ld, &m->final_lin, pp * c->out_channels, h, "final_layer.linear");
}

sd_status sd_sd3_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                      sd_sd3 **out, sd_error *err) {
    return sd3_load_ex(be, f, prefix, weight_dtype, 0, NULL, NULL, out, err);
}

sd_status sd3_load_ex(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                      int controlnet, sd3_extra_fn extra, void *ud, sd_sd3 **out, sd_error *err) {
    *out = NULL;
    if (!prefix) prefix = "";
    sd_sd3_config cfg;
    sd_status rc = sd3_detect_ex(f, prefix, controlnet, &cfg, err);
    if (!rc) rc = sd_dit_check_dtype("SD3", weight_dtype, err);
    if (rc) return rc;
    sd_sd3 *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the SD3 model");
    m->be = be;
    m->cfg = cfg;
    loader ld;
    sd_dit_loader_init(&ld, controlnet ? "SD3 ControlNet" : "SD3", be, f, prefix, weight_dtype, &m->params, err);
    build(&ld, m, controlnet);
    if (extra && !ld.failed) extra(ud, &ld, m);
    if ((rc = sd_dit_loader_finish(&ld, &m->one))) {
        sd_sd3_free(m);
        return rc;
    }
    *out = m;
    return SD_OK;
}

void sd_sd3_free(sd_sd3 *m) {
    if (!m) return;
    sd_dit_params_free(&m->params);
    free(m->blocks);
    sd_bt_free(m->one);
    free(m);
}

const sd_sd3_config *sd_sd3_get_config(const sd_sd3 *m) { return &m->cfg; }
sd_backend *sd_sd3_backend(const sd_sd3 *m) { return m->be; }

void sd_sd3_set_tap(sd_sd3 *m, sd_sd3_tap_fn fn, void *user) {
    m->tap = fn;
    m->tap_user = user;
}

void sd_sd3_param_each(sd_sd3 *m, sd_sd3_param_fn fn, void *ud) {
    for (int i = 0; i < m->params.n; i++) fn(ud, m->params.p[i].key, m->params.p[i].slot);
}

sd_bt **sd_sd3_param(sd_sd3 *m, const char *key) { return sd_dit_params_find(&m->params, key); }
