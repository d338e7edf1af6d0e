/* sd35_controlnet.c - Stability's SD3.5 ControlNets (comfy.cldm.dit_embedder.
 * ControlNetEmbedder as comfy.controlnet.load_controlnet_sd35 builds it and
 * ControlNetSD35 runs it): the MMDiT's own DismantledBlock, embedders and
 * patch embedding, each block on its own (self-attention over the image
 * tokens only). */
#include "sd3_internal.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

struct sd3_stab {
    sd_sd3 *m;          /* blocks (x stream), t0/t2, y0/y2, x_proj (double only); owns the weights */
    sd3_lin *cblocks;   /* controlnet_blocks.i */
    sd_bt *hint_w, *hint_b;
    int double_y, control_type, depth, adm;
};

static const char *pick(sd_st_file *f, const char *diffusers, const char *comfy) {
    char k[128];
    snprintf(k, sizeof k, "%s.weight", diffusers);
    return sd_st_find(f, k) ? diffusers : comfy;
}

static int count_blocks(sd_st_file *f) {
    char k[96];
    int n = 0;
    for (;; n++) {
        snprintf(k, sizeof k, "transformer_blocks.%d.adaLN_modulation.1.weight", n);
        if (!sd_st_find(f, k)) return n;
    }
}

/* control_type (blur 0, canny 1, depth 2; -1 without), rounded as ComfyUI's
 * round(item()). */
static sd_status read_type(sd_st_file *f, int *out, sd_error *err) {
    *out = -1;
    if (!sd_st_find(f, "control_type")) return SD_OK;
    sd_tensor *t = sd_st_tensor(f, "control_type", err);
    if (!t) return err && err->code ? err->code : SD_ERR_FORMAT;
    sd_tensor *c = sd_tensor_numel(t) == 1 ? sd_tensor_to_dtype(t, SD_F32) : NULL;
    sd_tensor_unref(t);
    if (!c) return sd_error_set(err, SD_ERR_FORMAT, "%s: control_type is not one number", sd_st_path(f));
    float v = sd_tensor_f32(c)[0];
    sd_tensor_unref(c);
    /* ComfyUI knows blur 0, canny 1, depth 2; a NaN or huge value would make
     * the int conversion undefined */
    if (!isfinite(v) || v < -1.5f || v > 2.5f)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: control_type %g is not one of 0 (blur), 1 (canny), 2 (depth)",
                            sd_st_path(f), (double)v);
    *out = (int)lroundf(v);
    return SD_OK;
}

sd_status sd3_stab_load(sd_backend *be, sd_st_file *f, sd3_stab **out, sd_error *err) {
    *out = NULL;
    const char *path = sd_st_path(f);
    const char *yn = pick(f, "time_text_embed.text_embedder.linear_1", "y_embedder.mlp.0");
    char k[160];
    snprintf(k, sizeof k, "%s.weight", yn);
    const sd_st_entry *ye = sd_st_find(f, k);
    const sd_st_entry *pi = sd_st_find(f, "pos_embed_input.proj.weight");
    if (!ye || ye->ndim != 2)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: an SD3.5 ControlNet without a 2-d %s", path, k);
    if (!pi || pi->ndim != 4)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: pos_embed_input.proj.weight is not a conv", path);
    int depth = (int)(ye->shape[0] / 64), nb = count_blocks(f);
    if (depth < 1 || depth > SD_SD3_MAX_DEPTH || ye->shape[0] != 64 * depth)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: hidden size %lld (ComfyUI builds 64 x depth, depth at most %d)", path,
                            (long long)ye->shape[0], SD_SD3_MAX_DEPTH);
    if (nb < 1 || nb > SD_SD3_MAX_DEPTH)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: %d transformer blocks (1 to %d)", path, nb, SD_SD3_MAX_DEPTH);
    sd3_stab *s = calloc(1, sizeof *s);
    sd_sd3 *m = s ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        free(s);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the SD3.5 ControlNet");
    }
    s->m = m;
    s->depth = depth;
    s->double_y = ye->shape[0] == ye->shape[1];
    s->adm = s->double_y ? 0 : (int)ye->shape[1];
    sd_status rc = read_type(f, &s->control_type, err);
    if (rc) {
        free(m), free(s);
        return rc;
    }
    int64_t h = 64 * depth;
    m->be = be;
    m->cfg = (sd_sd3_config){.hidden_size = (int)h, .num_heads = depth, .head_dim = 64, .depth = nb,
                             .mlp_hidden = (int)(4 * h), .patch_size = 2, .in_channels = 16, .out_channels = 16,
                             .adm_in_channels = s->adm, .qkv_bias = 1};
    sd_dit_loader ld;
    sd_dit_loader_init(&ld, "SD3.5 ControlNet", be, f, "", SD_F32, &m->params, err);
    const char *t0 = pick(f, "time_text_embed.timestep_embedder.linear_1", "t_embedder.mlp.0");
    const char *t2 = pick(f, "time_text_embed.timestep_embedder.linear_2", "t_embedder.mlp.2");
    const char *y2 = pick(f, "time_text_embed.text_embedder.linear_2", "y_embedder.mlp.2");
    sd_dit_lin(&ld, &m->t0.w, &m->t0.b, h, 256, 1, "%s", t0);
    sd_dit_lin(&ld, &m->t2.w, &m->t2.b, h, h, 1, "%s", t2);
    sd_dit_lin(&ld, &m->y0.w, &m->y0.b, h, ye->shape[1], 1, "%s", yn);
    sd_dit_lin(&ld, &m->y2.w, &m->y2.b, h, h, 1, "%s", y2);
    int64_t ps[4] = {h, pi->shape[1], 2, 2}, xs[4] = {h, 16, 2, 2};
    sd_dit_get(&ld, &s->hint_w, 4, ps, "pos_embed_input.proj.weight");
    sd_dit_vec(&ld, &s->hint_b, h, "pos_embed_input.proj.bias");
    if (s->double_y) { /* single: pre_run copies the MMDiT's x_embedder, the file's is unused */
        const char *xn = pick(f, "pos_embed.proj", "x_embedder.proj");
        sd_dit_get(&ld, &m->x_proj_w, 4, xs, "%s.weight", xn);
        sd_dit_vec(&ld, &m->x_proj_b, h, "%s.bias", xn);
    }
    m->blocks = calloc((size_t)nb, sizeof *m->blocks);
    s->cblocks = calloc((size_t)nb, sizeof *s->cblocks);
    if (!m->blocks || !s->cblocks) sd_dit_nomem(&ld);
    for (int i = 0; i < nb && !ld.failed; i++) {
        sd3_stream *b = &m->blocks[i].x;
        sd_dit_lin(&ld, &b->ada.w, &b->ada.b, 6 * h, h, 1, "transformer_blocks.%d.adaLN_modulation.1", i);
        sd_dit_lin(&ld, &b->attn.qkv.w, &b->attn.qkv.b, 3 * h, h, 1, "transformer_blocks.%d.attn.qkv", i);
        sd_dit_lin(&ld, &b->attn.proj.w, &b->attn.proj.b, h, h, 1, "transformer_blocks.%d.attn.proj", i);
        sd_dit_lin(&ld, &b->fc1.w, &b->fc1.b, 4 * h, h, 1, "transformer_blocks.%d.mlp.fc1", i);
        sd_dit_lin(&ld, &b->fc2.w, &b->fc2.b, h, 4 * h, 1, "transformer_blocks.%d.mlp.fc2", i);
        sd_dit_lin(&ld, &s->cblocks[i].w, &s->cblocks[i].b, h, h, 1, "controlnet_blocks.%d", i);
    }
    if ((rc = sd_dit_loader_finish(&ld, &m->one))) {
        sd3_stab_free(s);
        return rc;
    }
    *out = s;
    return SD_OK;
}

void sd3_stab_free(sd3_stab *s) {
    if (!s) return;
    sd_sd3_free(s->m);
    free(s->cblocks);
    free(s);
}

const sd_sd3_config *sd3_stab_config(const sd3_stab *s) { return &s->m->cfg; }
int sd3_stab_depth(const sd3_stab *s) { return s->depth; }
int sd3_stab_control_type(const sd3_stab *s) { return s->control_type; }
int sd3_stab_double_y(const sd3_stab *s) { return s->double_y; }
int sd3_stab_hint_channels(const sd3_stab *s) { return (int)s->hint_w->shape[1]; }

/* get_2d_sincos_pos_embed_torch(hid, w, h) (val_center 7.5, magnitude 7.5):
 * [h*w, hid], the w half first. */
static sd_bt *pos_sincos(sd_backend *be, int64_t hid, int64_t h, int64_t w) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, h * w, hid, 0, 0);
    if (!t) return NULL;
    float *o = sd_tensor_f32(t);
    double small = h < w ? (double)h : (double)w;
    float vh = (float)(h / small * 7.5), vw = (float)(w / small * 7.5);
    int64_t D = hid / 2, Q = D / 2;
    for (int64_t i = 0; i < h; i++)
        for (int64_t j = 0; j < w; j++) {
            float ph = h > 1 ? (-vh + 7.5f) + (float)i * ((2 * vh) / (float)(h - 1)) : -vh + 7.5f;
            float pw = w > 1 ? (-vw + 7.5f) + (float)j * ((2 * vw) / (float)(w - 1)) : -vw + 7.5f;
            float *r = o + (i * w + j) * hid;
            for (int64_t d = 0; d < Q; d++) {
                float om = 1.0f / powf(10000.0f, (float)d / (float)Q);
                r[d] = sinf(pw * om), r[Q + d] = cosf(pw * om);
                r[D + d] = sinf(ph * om), r[D + Q + d] = cosf(ph * om);
            }
        }
    sd_bt *b = sd_bt_from_host(be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

static sd_bt *add_free(sd_bt *a, sd_bt *b) {
    sd_bt *r = sd_op_add(a, b);
    sd_bt_free(a);
    sd_bt_free(b);
    return r;
}

sd_status sd3_stab_forward(sd3_stab *s, const sd_sd3 *main, sd_bt *x, const float *timesteps, sd_bt *y,
                           sd_bt *hint, sd_bt **out, sd_error *err) {
    sd_sd3 *m = s->m;
    sd_backend *be = m->be;
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3], hid = m->cfg.hidden_size;
    int nb = m->cfg.depth;
    for (int i = 0; i < nb; i++) out[i] = NULL;
    if (x->shape[1] != 16)
        return sd_error_set(err, SD_ERR_INVALID, "SD3.5 ControlNet: x must have 16 channels");
    if (!main || main->cfg.hidden_size != hid || main->cfg.patch_size != 2 || main->cfg.in_channels != 16)
        return sd_error_set(err, SD_ERR_INVALID, "SD3.5 ControlNet: the model is not an MMDiT of hidden size %lld",
                            (long long)hid);
    if (y && (y->ndim != 2 || y->shape[0] != N ||
              y->shape[1] != (s->double_y ? main->cfg.adm_in_channels : s->adm)))
        return sd_error_set(err, SD_ERR_INVALID, "SD3.5 ControlNet: the pooled vector y does not fit");
    /* x_embedder (the MMDiT's unless double_y) [+ sincos] + pos_embed_input(hint) */
    sd_bt *e = s->double_y ? sd3_patch_embed(x, m->x_proj_w, m->x_proj_b, 2)
                           : sd3_patch_embed(x, main->x_proj_w, main->x_proj_b, 2);
    if (!s->double_y) e = add_free(e, pos_sincos(be, hid, (H + 1) / 2, (W + 1) / 2));
    sd_bt *img = add_free(e, sd3_patch_embed(hint, s->hint_w, s->hint_b, 2));
    sd_bt *c = sd3_embed_t(m, timesteps, N);
    if (y) {
        sd_bt *ye;
        if (s->double_y) { /* orig_y_embedder = the MMDiT's y_embedder */
            sd_bt *y1 = sd3_embed_mlp(y, &main->y0, &main->y2);
            ye = sd3_embed_mlp(y1, &m->y0, &m->y2);
            sd_bt_free(y1);
        } else {
            ye = sd3_embed_mlp(y, &m->y0, &m->y2);
        }
        c = add_free(c, ye);
    }
    sd_bt *silu = sd_op_silu(c);
    sd_bt_free(c);
    sd_status rc = sd_backend_take_error(be, err);
    for (int i = 0; i < nb && !rc; i++) {
        sd_bt *in = s->double_y ? sd_op_scale(img, 1.0f) : img; /* double_y: every block sees the same x */
        sd_bt *o = sd3_block_alone(m, &m->blocks[i].x, in, silu);
        if (!s->double_y) img = o;
        out[i] = sd_op_linear(o, s->cblocks[i].w, s->cblocks[i].b);
        if (s->double_y) sd_bt_free(o);
        rc = sd_backend_take_error(be, err);
    }
    if (!rc && (!img || !silu)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory (SD3.5 ControlNet)");
    if (rc) {
        sd_backend_clear_error(be);
        for (int i = 0; i < nb; i++) sd_bt_free(out[i]), out[i] = NULL;
        sd_error_prefix(err, "SD3.5 ControlNet forward");
    }
    sd_bt_free(img);
    sd_bt_free(silu);
    return rc;
}
