/* unet_load.c - building the UNet from a detected config and binding every
 * weight by its checkpoint key (shapes checked against the config). */
#include "models/unet/unet_internal.h"
#include "models/checkpoint/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* prefix-relative name = base + suffix; shape of ndim (<= 4) dims. */
sd_bt *sd_unet_get(unet_loader *ld, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                   const char *base, const char *suffix) {
    if (ld->failed) return NULL;
    int64_t shape[4] = {d0, d1, d2, d3};
    char name[512];
    snprintf(name, sizeof name, "%s%s", base, suffix);
    sd_bt *t = sd_weights_get(&ld->w, name, ndim, shape, ld->err);
    if (!t) ld->failed = 1;
    return t;
}

static int has(unet_loader *ld, const char *base, const char *suffix) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", base, suffix);
    return sd_weights_has(&ld->w, name);
}

static void *zalloc(unet_loader *ld, size_t n) {
    void *p = calloc(1, n);
    if (!p && !ld->failed) {
        ld->failed = 1;
        sd_error_set(ld->err, SD_ERR_NOMEM, "out of memory building the %s",
                     ld->what ? ld->what : "UNet");
    }
    return p;
}

void sd_unet_bind_res(unet_loader *ld, unet_res *r, const char *base, int cin, int cout, int emb_dim) {
    r->cin = cin;
    r->cout = cout;
    r->in_norm_w = sd_unet_get(ld, 1, cin, 0, 0, 0, base, ".in_layers.0.weight");
    r->in_norm_b = sd_unet_get(ld, 1, cin, 0, 0, 0, base, ".in_layers.0.bias");
    r->in_conv_w = sd_unet_get(ld, 4, cout, cin, 3, 3, base, ".in_layers.2.weight");
    r->in_conv_b = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".in_layers.2.bias");
    r->emb_w = sd_unet_get(ld, 2, cout, emb_dim, 0, 0, base, ".emb_layers.1.weight");
    r->emb_b = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".emb_layers.1.bias");
    r->out_norm_w = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".out_layers.0.weight");
    r->out_norm_b = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".out_layers.0.bias");
    r->out_conv_w = sd_unet_get(ld, 4, cout, cout, 3, 3, base, ".out_layers.3.weight");
    r->out_conv_b = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".out_layers.3.bias");
    if (cin != cout) {
        r->skip_w = sd_unet_get(ld, 4, cout, cin, 1, 1, base, ".skip_connection.weight");
        r->skip_b = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".skip_connection.bias");
    }
}

static unet_res *load_res(unet_loader *ld, const char *base, int cin, int cout, int emb_dim) {
    unet_res *r = zalloc(ld, sizeof *r);
    if (!r) return NULL;
    sd_unet_bind_res(ld, r, base, cin, cout, emb_dim);
    if (cin == cout && !ld->failed && has(ld, base, ".skip_connection.weight")) {
        ld->failed = 1;
        char key[600];
        sd_error_set(ld->err, SD_ERR_FORMAT, "%s: unexpected tensor '%s' (res block keeps %d channels)",
                     sd_st_path(ld->w.file),
                     sd_weights_key(&ld->w, base, key, sizeof key), cin);
    }
    return r;
}

static void load_attn(unet_loader *ld, unet_attn *a, const char *base, int ch, int kv_dim) {
    a->q = sd_unet_get(ld, 2, ch, ch, 0, 0, base, ".to_q.weight");
    a->k = sd_unet_get(ld, 2, ch, kv_dim, 0, 0, base, ".to_k.weight");
    a->v = sd_unet_get(ld, 2, ch, kv_dim, 0, 0, base, ".to_v.weight");
    a->out_w = sd_unet_get(ld, 2, ch, ch, 0, 0, base, ".to_out.0.weight");
    a->out_b = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".to_out.0.bias");
}

void sd_unet_bind_tblocks(unet_loader *ld, unet_tblock *blocks, const char *base, int ch, int depth,
                          const sd_unet_config *c) {
    int ff = 4 * ch; /* GEGLU inner width (mult 4) */
    for (int k = 0; k < depth; k++) {
        unet_tblock *b = &blocks[k];
        char tb[300], sub[340];
        snprintf(tb, sizeof tb, "%s.transformer_blocks.%d", base, k);
        b->norm1_w = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".norm1.weight");
        b->norm1_b = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".norm1.bias");
        b->norm2_w = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".norm2.weight");
        b->norm2_b = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".norm2.bias");
        b->norm3_w = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".norm3.weight");
        b->norm3_b = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".norm3.bias");
        snprintf(sub, sizeof sub, "%s.attn1", tb);
        load_attn(ld, &b->attn1, sub, ch, ch);
        snprintf(sub, sizeof sub, "%s.attn2", tb);
        load_attn(ld, &b->attn2, sub, ch, c->context_dim);
        b->ff_in_w = sd_unet_get(ld, 2, 2 * ff, ch, 0, 0, tb, ".ff.net.0.proj.weight");
        b->ff_in_b = sd_unet_get(ld, 1, 2 * ff, 0, 0, 0, tb, ".ff.net.0.proj.bias");
        b->ff_out_w = sd_unet_get(ld, 2, ch, ff, 0, 0, tb, ".ff.net.2.weight");
        b->ff_out_b = sd_unet_get(ld, 1, ch, 0, 0, 0, tb, ".ff.net.2.bias");
    }
}

static unet_st *load_st(unet_loader *ld, const char *base, int ch, int depth, const sd_unet_config *c) {
    unet_st *s = zalloc(ld, sizeof *s);
    if (!s) return NULL;
    s->ch = ch;
    s->depth = depth;
    s->linear = c->use_linear_in_transformer;
    if (c->num_head_channels > 0) {
        s->heads = ch / c->num_head_channels;
        if (ch % c->num_head_channels && !ld->failed) {
            ld->failed = 1;
            sd_error_set(ld->err, SD_ERR_FORMAT, "%s: transformer '%s%s' has %d channels, not a multiple of the head width %d",
                         sd_st_path(ld->w.file), ld->w.prefix, base, ch, c->num_head_channels);
        }
    } else {
        s->heads = c->num_heads;
        if (ch % c->num_heads && !ld->failed) {
            ld->failed = 1;
            sd_error_set(ld->err, SD_ERR_FORMAT, "%s: transformer '%s%s' has %d channels, not divisible into %d heads",
                         sd_st_path(ld->w.file), ld->w.prefix, base, ch, c->num_heads);
        }
    }
    s->norm_w = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".norm.weight");
    s->norm_b = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".norm.bias");
    if (s->linear) {
        s->proj_in_w = sd_unet_get(ld, 2, ch, ch, 0, 0, base, ".proj_in.weight");
        s->proj_out_w = sd_unet_get(ld, 2, ch, ch, 0, 0, base, ".proj_out.weight");
    } else {
        s->proj_in_w = sd_unet_get(ld, 4, ch, ch, 1, 1, base, ".proj_in.weight");
        s->proj_out_w = sd_unet_get(ld, 4, ch, ch, 1, 1, base, ".proj_out.weight");
    }
    s->proj_in_b = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".proj_in.bias");
    s->proj_out_b = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".proj_out.bias");
    s->blocks = zalloc(ld, sizeof *s->blocks * (size_t)(depth > 0 ? depth : 1));
    if (!s->blocks) return s;
    sd_unet_bind_tblocks(ld, s->blocks, base, ch, depth, c);
    return s;
}

static void free_res(unet_res *r) {
    if (!r) return;
    sd_bt *all[] = {r->in_norm_w, r->in_norm_b, r->in_conv_w, r->in_conv_b, r->emb_w, r->emb_b,
                    r->out_norm_w, r->out_norm_b, r->out_conv_w, r->out_conv_b, r->skip_w, r->skip_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_bt_free(all[i]);
    free(r);
}

static void free_attn(unet_attn *a) {
    sd_bt_free(a->q);
    sd_bt_free(a->k);
    sd_bt_free(a->v);
    sd_bt_free(a->out_w);
    sd_bt_free(a->out_b);
}

static void free_st(unet_st *s) {
    if (!s) return;
    if (s->blocks) {
        for (int k = 0; k < s->depth; k++) {
            unet_tblock *b = &s->blocks[k];
            sd_bt *all[] = {b->norm1_w, b->norm1_b, b->norm2_w, b->norm2_b, b->norm3_w, b->norm3_b,
                            b->ff_in_w, b->ff_in_b, b->ff_out_w, b->ff_out_b};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_bt_free(all[i]);
            free_attn(&b->attn1);
            free_attn(&b->attn2);
        }
        free(s->blocks);
    }
    sd_bt *all[] = {s->norm_w, s->norm_b, s->proj_in_w, s->proj_in_b, s->proj_out_w, s->proj_out_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_bt_free(all[i]);
    free(s);
}

static void free_block(unet_block *b) {
    for (int i = 0; i < b->n; i++) {
        free_res(b->layers[i].res);
        free_st(b->layers[i].st);
        sd_bt_free(b->layers[i].conv_w);
        sd_bt_free(b->layers[i].conv_b);
    }
    memset(b, 0, sizeof *b);
}

void sd_unet_free(sd_unet *u) {
    if (!u) return;
    sd_bt *all[] = {u->time_w0, u->time_b0, u->time_w2, u->time_b2, u->label_w0, u->label_b0,
                    u->label_w2, u->label_b2, u->out_norm_w, u->out_norm_b, u->out_conv_w,
                    u->out_conv_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_bt_free(all[i]);
    for (int i = 0; i < u->n_in; i++) free_block(&u->in[i]);
    free_block(&u->middle);
    for (int i = 0; i < u->n_out; i++) free_block(&u->out[i]);
    free(u);
}

static unet_layer *add_layer(unet_block *b, unet_layer_kind kind) {
    unet_layer *l = &b->layers[b->n++];
    l->kind = kind;
    return l;
}

int sd_unet_bind_encoder(unet_loader *ld, sd_unet *u, int chans[SD_UNET_MAX_BLOCKS]) {
    const sd_unet_config *c = &u->cfg;
    int mc = c->model_channels, ted = c->time_embed_dim;
    char base[128];

    u->time_w0 = sd_unet_get(ld, 2, ted, mc, 0, 0, "time_embed.0", ".weight");
    u->time_b0 = sd_unet_get(ld, 1, ted, 0, 0, 0, "time_embed.0", ".bias");
    u->time_w2 = sd_unet_get(ld, 2, ted, ted, 0, 0, "time_embed.2", ".weight");
    u->time_b2 = sd_unet_get(ld, 1, ted, 0, 0, 0, "time_embed.2", ".bias");
    if (c->adm_in_channels > 0) {
        u->label_w0 = sd_unet_get(ld, 2, ted, c->adm_in_channels, 0, 0, "label_emb.0.0", ".weight");
        u->label_b0 = sd_unet_get(ld, 1, ted, 0, 0, 0, "label_emb.0.0", ".bias");
        u->label_w2 = sd_unet_get(ld, 2, ted, ted, 0, 0, "label_emb.0.2", ".weight");
        u->label_b2 = sd_unet_get(ld, 1, ted, 0, 0, 0, "label_emb.0.2", ".bias");
    }

    unet_layer *l = add_layer(&u->in[0], UL_CONV); /* input_blocks.0: conv_in */
    l->conv_w = sd_unet_get(ld, 4, mc, c->in_channels, 3, 3, "input_blocks.0.0", ".weight");
    l->conv_b = sd_unet_get(ld, 1, mc, 0, 0, 0, "input_blocks.0.0", ".bias");
    chans[0] = mc;
    u->n_in = 1;
    int ch = mc, res_i = 0;
    for (int lev = 0; lev < c->num_levels; lev++) {
        for (int r = 0; r < c->num_res_blocks[lev]; r++) {
            unet_block *b = &u->in[u->n_in];
            snprintf(base, sizeof base, "input_blocks.%d.0", u->n_in);
            int out = c->channel_mult[lev] * mc;
            add_layer(b, UL_RES)->res = load_res(ld, base, ch, out, ted);
            ch = out;
            int depth = c->transformer_depth[res_i++];
            if (depth > 0) {
                snprintf(base, sizeof base, "input_blocks.%d.1", u->n_in);
                add_layer(b, UL_ST)->st = load_st(ld, base, ch, depth, c);
            }
            chans[u->n_in++] = ch;
        }
        if (lev != c->num_levels - 1) {
            snprintf(base, sizeof base, "input_blocks.%d.0.op", u->n_in);
            l = add_layer(&u->in[u->n_in], UL_DOWN);
            l->conv_w = sd_unet_get(ld, 4, ch, ch, 3, 3, base, ".weight");
            l->conv_b = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".bias");
            chans[u->n_in++] = ch;
        }
    }

    add_layer(&u->middle, UL_RES)->res = load_res(ld, "middle_block.0", ch, ch, ted);
    if (c->transformer_depth_middle >= 0) {
        add_layer(&u->middle, UL_ST)->st = load_st(ld, "middle_block.1", ch, c->transformer_depth_middle, c);
        add_layer(&u->middle, UL_RES)->res = load_res(ld, "middle_block.2", ch, ch, ted);
    }
    return ch;
}

/* Mirrors UNetModel.__init__: the same walk over levels decides every
 * block's widths, so a checkpoint that disagrees fails on a named key. */
static void build(unet_loader *ld, sd_unet *u) {
    const sd_unet_config *c = &u->cfg;
    int mc = c->model_channels, ted = c->time_embed_dim;
    char base[128];
    unet_layer *l;
    int chans[SD_UNET_MAX_BLOCKS];
    int ch = sd_unet_bind_encoder(ld, u, chans);
    int n_chans = u->n_in;

    for (int lev = c->num_levels - 1; lev >= 0; lev--) {
        for (int i = 0; i <= c->num_res_blocks[lev]; i++) {
            unet_block *b = &u->out[u->n_out];
            int skip = chans[--n_chans];
            int out = c->channel_mult[lev] * mc;
            snprintf(base, sizeof base, "output_blocks.%d.0", u->n_out);
            add_layer(b, UL_RES)->res = load_res(ld, base, ch + skip, out, ted);
            ch = out;
            int depth = c->transformer_depth_output[c->n_output_blocks - 1 - u->n_out];
            if (depth > 0) {
                snprintf(base, sizeof base, "output_blocks.%d.1", u->n_out);
                add_layer(b, UL_ST)->st = load_st(ld, base, ch, depth, c);
            }
            if (lev > 0 && i == c->num_res_blocks[lev]) {
                snprintf(base, sizeof base, "output_blocks.%d.%d.conv", u->n_out, b->n);
                l = add_layer(b, UL_UP);
                l->conv_w = sd_unet_get(ld, 4, ch, ch, 3, 3, base, ".weight");
                l->conv_b = sd_unet_get(ld, 1, ch, 0, 0, 0, base, ".bias");
            }
            u->n_out++;
        }
    }

    u->out_norm_w = sd_unet_get(ld, 1, ch, 0, 0, 0, "out.0", ".weight");
    u->out_norm_b = sd_unet_get(ld, 1, ch, 0, 0, 0, "out.0", ".bias");
    u->out_conv_w = sd_unet_get(ld, 4, c->out_channels, ch, 3, 3, "out.2", ".weight");
    u->out_conv_b = sd_unet_get(ld, 1, c->out_channels, 0, 0, 0, "out.2", ".bias");
}

sd_status sd_unet_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                       sd_unet **out, sd_error *err) {
    *out = NULL;
    sd_unet_config cfg;
    sd_status rc;
    if (!prefix) {
        rc = sd_unet_detect(f, SD_UNET_PREFIX, &cfg, err);
        if (rc == SD_ERR_NOT_FOUND) {
            sd_error err2;
            sd_error_clear(&err2);
            if (sd_unet_detect(f, "", &cfg, &err2) != SD_ERR_NOT_FOUND) {
                prefix = "";
                rc = err2.code;
                if (err) *err = err2;
            }
        }
        if (!prefix) prefix = SD_UNET_PREFIX;
    } else {
        rc = sd_unet_detect(f, prefix, &cfg, err);
    }
    if (rc) return rc;

    sd_unet *u = calloc(1, sizeof *u);
    if (!u) return sd_error_set(err, SD_ERR_NOMEM, "out of memory allocating the UNet");
    u->be = be;
    u->cfg = cfg;
    sd_error local;
    sd_error_clear(&local);
    unet_loader ld = {.err = err ? err : &local};
    sd_weights_init(&ld.w, be, f, prefix);
    ld.w.dtype = weight_dtype;
    build(&ld, u);
    if (ld.failed) {
        sd_unet_free(u);
        return ld.err->code ? ld.err->code : SD_ERR_INTERNAL;
    }
    *out = u;
    return SD_OK;
}

const sd_unet_config *sd_unet_get_config(const sd_unet *u) { return &u->cfg; }

void sd_unet_set_tap(sd_unet *u, sd_unet_tap_fn fn, void *user) {
    u->tap = fn;
    u->tap_user = user;
}
