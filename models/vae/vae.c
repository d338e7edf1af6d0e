/* vae.c - LDM KL autoencoder on sd_op_* (contract in vae.h). */
#include "models/vae/vae.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/weights.h"

#define MAX_RES 8
#define GN_GROUPS 32
#define GN_EPS 1e-6f

typedef struct {
    sd_bt *n1w, *n1b, *c1w, *c1b, *n2w, *n2b, *c2w, *c2b, *skw, *skb;
} resblock;

typedef struct {
    sd_bt *nw, *nb, *qw, *qb, *kw, *kb, *vw, *vb, *pw, *pb; /* q/k/v/proj as [C, C] */
} attnblock;

struct sd_vae {
    sd_backend *be;
    sd_vae_config cfg;
    /* encoder */
    sd_bt *e_in_w, *e_in_b;
    resblock e_blk[SD_VAE_MAX_LEVELS][MAX_RES];
    sd_bt *e_down_w[SD_VAE_MAX_LEVELS], *e_down_b[SD_VAE_MAX_LEVELS];
    resblock e_mid1, e_mid2;
    attnblock e_attn;
    sd_bt *e_norm_w, *e_norm_b, *e_out_w, *e_out_b, *quant_w, *quant_b;
    /* decoder */
    sd_bt *pq_w, *pq_b, *d_in_w, *d_in_b;
    resblock d_mid1, d_mid2;
    attnblock d_attn;
    resblock d_blk[SD_VAE_MAX_LEVELS][MAX_RES + 1];
    sd_bt *d_up_w[SD_VAE_MAX_LEVELS], *d_up_b[SD_VAE_MAX_LEVELS];
    sd_bt *d_norm_w, *d_norm_b, *d_out_w, *d_out_b;
    sd_vae_tap_fn tap;
    void *tap_user;
    unsigned f32_redos; /* reduced-precision decodes redone in F32 (sd_vae_f32_redos) */
};

/* ---- freeing ---------------------------------------------------------------------- */

static void res_free(resblock *r) {
    sd_bt *p[] = {r->n1w, r->n1b, r->c1w, r->c1b, r->n2w, r->n2b, r->c2w, r->c2b, r->skw, r->skb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) sd_bt_free(p[i]);
}

static void attn_free(attnblock *a) {
    sd_bt *p[] = {a->nw, a->nb, a->qw, a->qb, a->kw, a->kb, a->vw, a->vb, a->pw, a->pb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) sd_bt_free(p[i]);
}

void sd_vae_free(sd_vae *v) {
    if (!v) return;
    for (int i = 0; i < SD_VAE_MAX_LEVELS; i++) {
        for (int j = 0; j < MAX_RES; j++) res_free(&v->e_blk[i][j]);
        for (int j = 0; j < MAX_RES + 1; j++) res_free(&v->d_blk[i][j]);
        sd_bt_free(v->e_down_w[i]);
        sd_bt_free(v->e_down_b[i]);
        sd_bt_free(v->d_up_w[i]);
        sd_bt_free(v->d_up_b[i]);
    }
    res_free(&v->e_mid1);
    res_free(&v->e_mid2);
    res_free(&v->d_mid1);
    res_free(&v->d_mid2);
    attn_free(&v->e_attn);
    attn_free(&v->d_attn);
    sd_bt *p[] = {v->e_in_w, v->e_in_b, v->e_norm_w, v->e_norm_b, v->e_out_w, v->e_out_b,
                  v->quant_w, v->quant_b, v->pq_w, v->pq_b, v->d_in_w, v->d_in_b,
                  v->d_norm_w, v->d_norm_b, v->d_out_w, v->d_out_b};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) sd_bt_free(p[i]);
    free(v);
}

/* ---- loading ------------------------------------------------------------------------ */

typedef struct {
    sd_weights w;
    sd_error *err;
    int failed;
    int diffusers; /* keys in the diffusers AutoencoderKL layout */
    int old_attn;  /* diffusers < 0.17 attention names (query/key/value/proj_attn) */
    int n_levels;  /* needed to map decoder.up.N (diffusers numbers them reversed) */
} loader;

/* Rest of a resnet key with the diffusers spelling of the shortcut. */
static void res_rest(const char *rest, char *out, size_t n) {
    if (strncmp(rest, "nin_shortcut.", 13) == 0) snprintf(out, n, "conv_shortcut.%s", rest + 13);
    else snprintf(out, n, "%s", rest);
}

/* The key of an ldm-layout name in the file's layout (ComfyUI's
 * diffusers_convert table, applied in the other direction). */
static void key_in_file(const loader *L, char *name, size_t n) {
    if (!L->diffusers) return;
    char part[16], rest[200], r2[220], out[300];
    int i, j;
    if (sscanf(name, "%15[a-z].down.%d.block.%d.%199s", part, &i, &j, rest) == 4) {
        res_rest(rest, r2, sizeof r2);
        snprintf(out, sizeof out, "%s.down_blocks.%d.resnets.%d.%s", part, i, j, r2);
    } else if (sscanf(name, "%15[a-z].down.%d.downsample.%199s", part, &i, rest) == 3) {
        snprintf(out, sizeof out, "%s.down_blocks.%d.downsamplers.0.%s", part, i, rest);
    } else if (sscanf(name, "%15[a-z].up.%d.block.%d.%199s", part, &i, &j, rest) == 4) {
        res_rest(rest, r2, sizeof r2);
        snprintf(out, sizeof out, "%s.up_blocks.%d.resnets.%d.%s", part, L->n_levels - 1 - i, j, r2);
    } else if (sscanf(name, "%15[a-z].up.%d.upsample.%199s", part, &i, rest) == 3) {
        snprintf(out, sizeof out, "%s.up_blocks.%d.upsamplers.0.%s", part, L->n_levels - 1 - i, rest);
    } else if (sscanf(name, "%15[a-z].mid.block_%d.%199s", part, &i, rest) == 3) {
        res_rest(rest, r2, sizeof r2);
        snprintf(out, sizeof out, "%s.mid_block.resnets.%d.%s", part, i - 1, r2);
    } else if (sscanf(name, "%15[a-z].mid.attn_1.%199s", part, rest) == 2) {
        static const char *from[5] = {"norm.", "q.", "k.", "v.", "proj_out."};
        static const char *to_new[5] = {"group_norm.", "to_q.", "to_k.", "to_v.", "to_out.0."};
        static const char *to_old[5] = {"group_norm.", "query.", "key.", "value.", "proj_attn."};
        snprintf(r2, sizeof r2, "%s", rest);
        for (int k = 0; k < 5; k++)
            if (strncmp(rest, from[k], strlen(from[k])) == 0) {
                snprintf(r2, sizeof r2, "%s%s", (L->old_attn ? to_old : to_new)[k], rest + strlen(from[k]));
                break;
            }
        snprintf(out, sizeof out, "%s.mid_block.attentions.0.%s", part, r2);
    } else if (sscanf(name, "%15[a-z].norm_out.%199s", part, rest) == 2) {
        snprintf(out, sizeof out, "%s.conv_norm_out.%s", part, rest);
    } else {
        return;
    }
    snprintf(name, n, "%s", out);
}

/* Fetch "<name>" with an exact shape (ndim 1 or 4 given as dims); records the
 * first failure and returns NULL after it. */
static sd_bt *ld(loader *L, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static sd_bt *ld(loader *L, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                 const char *fmt, ...) {
    if (L->failed) return NULL;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    key_in_file(L, name, sizeof name);
    int64_t s[4] = {d0, d1, d2, d3};
    sd_bt *t = sd_weights_get(&L->w, name, ndim, s, L->err);
    if (!t) L->failed = 1;
    return t;
}

static int64_t dim_of(const loader *L, int d, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int64_t dim_of(const loader *L, int d, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    key_in_file(L, name, sizeof name);
    int64_t s[SD_MAX_DIMS];
    int nd = sd_weights_shape(&L->w, name, s);
    return nd > d ? s[d] : -1;
}

static int exists(const loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int exists(const loader *L, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    key_in_file(L, name, sizeof name);
    return sd_weights_has(&L->w, name);
}

static void load_res(loader *L, resblock *r, int64_t cin, int64_t cout, const char *p) {
    r->n1w = ld(L, 1, cin, 0, 0, 0, "%s.norm1.weight", p);
    r->n1b = ld(L, 1, cin, 0, 0, 0, "%s.norm1.bias", p);
    r->c1w = ld(L, 4, cout, cin, 3, 3, "%s.conv1.weight", p);
    r->c1b = ld(L, 1, cout, 0, 0, 0, "%s.conv1.bias", p);
    r->n2w = ld(L, 1, cout, 0, 0, 0, "%s.norm2.weight", p);
    r->n2b = ld(L, 1, cout, 0, 0, 0, "%s.norm2.bias", p);
    r->c2w = ld(L, 4, cout, cout, 3, 3, "%s.conv2.weight", p);
    r->c2b = ld(L, 1, cout, 0, 0, 0, "%s.conv2.bias", p);
    if (cin != cout) {
        r->skw = ld(L, 4, cout, cin, 1, 1, "%s.nin_shortcut.weight", p);
        r->skb = ld(L, 1, cout, 0, 0, 0, "%s.nin_shortcut.bias", p);
    }
}

/* q/k/v/proj_out are 1x1 convs [C, C, 1, 1] in ldm files, [C, C] in some
 * converted ones; either way they are used as linear weights [C, C]. */
static sd_bt *load_proj(loader *L, int64_t C, const char *p, const char *which) {
    if (L->failed) return NULL;
    char name[256];
    snprintf(name, sizeof name, "%s.%s.weight", p, which);
    int64_t s[SD_MAX_DIMS];
    char key[256];
    snprintf(key, sizeof key, "%s", name);
    key_in_file(L, key, sizeof key);
    int nd = sd_weights_shape(&L->w, key, s);
    sd_bt *t = nd == 2 ? ld(L, 2, C, C, 0, 0, "%s", name) : ld(L, 4, C, C, 1, 1, "%s", name);
    if (!t || nd == 2) return t;
    int64_t s2[2] = {C, C};
    sd_bt *v = sd_bt_view(t, 2, s2);
    sd_bt_free(t); /* the view keeps the storage */
    if (!v) {
        sd_backend_take_error(L->w.be, L->err);
        sd_backend_clear_error(L->w.be);
        L->failed = 1;
    }
    return v;
}

static void load_attn(loader *L, attnblock *a, int64_t C, const char *p) {
    a->nw = ld(L, 1, C, 0, 0, 0, "%s.norm.weight", p);
    a->nb = ld(L, 1, C, 0, 0, 0, "%s.norm.bias", p);
    a->qw = load_proj(L, C, p, "q");
    a->qb = ld(L, 1, C, 0, 0, 0, "%s.q.bias", p);
    a->kw = load_proj(L, C, p, "k");
    a->kb = ld(L, 1, C, 0, 0, 0, "%s.k.bias", p);
    a->vw = load_proj(L, C, p, "v");
    a->vb = ld(L, 1, C, 0, 0, 0, "%s.v.bias", p);
    a->pw = load_proj(L, C, p, "proj_out");
    a->pb = ld(L, 1, C, 0, 0, 0, "%s.proj_out.bias", p);
}

/* Reads the configuration from shapes (decoder first: it is required). */
static sd_status detect(loader *L, sd_vae_config *c, sd_st_file *f) {
    memset(c, 0, sizeof *c);
    int64_t z = dim_of(L, 1, "decoder.conv_in.weight");
    if (z < 0) {
        char key[512];
        return sd_error_set(L->err, SD_ERR_NOT_FOUND, "%s: not a VAE: missing '%s'", sd_st_path(f),
                            sd_weights_key(&L->w, "decoder.conv_in.weight", key, sizeof key));
    }
    c->z_channels = (int)z;
    /* count levels by the file's own names: the diffusers up index mapping
     * needs the count first */
    const char *lvl = L->diffusers ? "decoder.up_blocks.%d.resnets.0.conv1.weight"
                                   : "decoder.up.%d.block.0.conv1.weight";
    int n = 0;
    char nm[128];
    for (;; n++) {
        snprintf(nm, sizeof nm, lvl, n);
        if (n > SD_VAE_MAX_LEVELS || !sd_weights_has(&L->w, nm)) break;
    }
    if (n == 0 || n > SD_VAE_MAX_LEVELS)
        return sd_error_set(L->err, SD_ERR_UNSUPPORTED, "%s: VAE with %d decoder levels", sd_st_path(f), n);
    c->n_levels = n;
    L->n_levels = n;
    int nb = 0;
    while (nb <= MAX_RES && exists(L, "decoder.up.0.block.%d.conv1.weight", nb)) nb++;
    if (nb < 1 || nb > MAX_RES + 1)
        return sd_error_set(L->err, SD_ERR_UNSUPPORTED, "%s: VAE with %d blocks per decoder level",
                            sd_st_path(f), nb);
    c->num_res_blocks = nb - 1;
    for (int i = 0; i < n; i++) {
        int64_t o = dim_of(L, 0, "decoder.up.%d.block.0.conv2.weight", i);
        if (o <= 0) return sd_error_set(L->err, SD_ERR_FORMAT, "%s: bad decoder.up.%d", sd_st_path(f), i);
        c->block_out[i] = (int)o;
    }
    c->ch = c->block_out[0];
    c->has_quant_conv = exists(L, "post_quant_conv.weight");
    c->embed_dim = c->has_quant_conv ? (int)dim_of(L, 1, "post_quant_conv.weight") : c->z_channels;
    c->has_encoder = exists(L, "encoder.conv_in.weight");
    if (c->has_encoder) {
        int ne = 0;
        while (ne <= MAX_RES && exists(L, "encoder.down.0.block.%d.conv1.weight", ne)) ne++;
        if (ne != c->num_res_blocks)
            return sd_error_set(L->err, SD_ERR_FORMAT,
                                "%s: encoder has %d blocks per level, decoder %d (want one more)",
                                sd_st_path(f), ne, nb);
    }
    return SD_OK;
}

sd_status sd_vae_load(sd_backend *be, sd_st_file *f, const char *prefix, sd_vae **out,
                      sd_error *err) {
    *out = NULL;
    sd_vae *v = calloc(1, sizeof *v);
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading VAE");
    v->be = be;
    loader L = {.err = err};
    sd_weights_init(&L.w, be, f, prefix);
    L.diffusers = sd_weights_has(&L.w, "decoder.up_blocks.0.resnets.0.conv1.weight");
    L.old_attn = sd_weights_has(&L.w, "decoder.mid_block.attentions.0.query.weight");
    sd_status rc = detect(&L, &v->cfg, f);
    if (rc != SD_OK) {
        sd_vae_free(v);
        return rc;
    }
    const sd_vae_config *c = &v->cfg;
    int n = c->n_levels, top = c->block_out[n - 1];
    int64_t E = c->embed_dim, Z = c->z_channels;
    char p[128];

    if (c->has_encoder) {
        v->e_in_w = ld(&L, 4, c->block_out[0], 3, 3, 3, "encoder.conv_in.weight");
        v->e_in_b = ld(&L, 1, c->block_out[0], 0, 0, 0, "encoder.conv_in.bias");
        int64_t cin = c->block_out[0];
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < c->num_res_blocks; j++) {
                snprintf(p, sizeof p, "encoder.down.%d.block.%d", i, j);
                load_res(&L, &v->e_blk[i][j], cin, c->block_out[i], p);
                cin = c->block_out[i];
            }
            if (i != n - 1) {
                v->e_down_w[i] = ld(&L, 4, cin, cin, 3, 3, "encoder.down.%d.downsample.conv.weight", i);
                v->e_down_b[i] = ld(&L, 1, cin, 0, 0, 0, "encoder.down.%d.downsample.conv.bias", i);
            }
        }
        load_res(&L, &v->e_mid1, top, top, "encoder.mid.block_1");
        load_attn(&L, &v->e_attn, top, "encoder.mid.attn_1");
        load_res(&L, &v->e_mid2, top, top, "encoder.mid.block_2");
        v->e_norm_w = ld(&L, 1, top, 0, 0, 0, "encoder.norm_out.weight");
        v->e_norm_b = ld(&L, 1, top, 0, 0, 0, "encoder.norm_out.bias");
        v->e_out_w = ld(&L, 4, 2 * Z, top, 3, 3, "encoder.conv_out.weight");
        v->e_out_b = ld(&L, 1, 2 * Z, 0, 0, 0, "encoder.conv_out.bias");
        if (c->has_quant_conv) {
            v->quant_w = ld(&L, 4, 2 * E, 2 * Z, 1, 1, "quant_conv.weight");
            v->quant_b = ld(&L, 1, 2 * E, 0, 0, 0, "quant_conv.bias");
        }
    }
    if (c->has_quant_conv) {
        v->pq_w = ld(&L, 4, Z, E, 1, 1, "post_quant_conv.weight");
        v->pq_b = ld(&L, 1, Z, 0, 0, 0, "post_quant_conv.bias");
    }
    v->d_in_w = ld(&L, 4, top, Z, 3, 3, "decoder.conv_in.weight");
    v->d_in_b = ld(&L, 1, top, 0, 0, 0, "decoder.conv_in.bias");
    load_res(&L, &v->d_mid1, top, top, "decoder.mid.block_1");
    load_attn(&L, &v->d_attn, top, "decoder.mid.attn_1");
    load_res(&L, &v->d_mid2, top, top, "decoder.mid.block_2");
    int64_t cin = top;
    for (int i = n - 1; i >= 0; i--) {
        for (int j = 0; j <= c->num_res_blocks; j++) {
            snprintf(p, sizeof p, "decoder.up.%d.block.%d", i, j);
            load_res(&L, &v->d_blk[i][j], cin, c->block_out[i], p);
            cin = c->block_out[i];
        }
        if (i != 0) {
            v->d_up_w[i] = ld(&L, 4, cin, cin, 3, 3, "decoder.up.%d.upsample.conv.weight", i);
            v->d_up_b[i] = ld(&L, 1, cin, 0, 0, 0, "decoder.up.%d.upsample.conv.bias", i);
        }
    }
    v->d_norm_w = ld(&L, 1, cin, 0, 0, 0, "decoder.norm_out.weight");
    v->d_norm_b = ld(&L, 1, cin, 0, 0, 0, "decoder.norm_out.bias");
    v->d_out_w = ld(&L, 4, 3, cin, 3, 3, "decoder.conv_out.weight");
    v->d_out_b = ld(&L, 1, 3, 0, 0, 0, "decoder.conv_out.bias");
    if (L.failed) {
        sd_vae_free(v);
        return err ? err->code : SD_ERR_FORMAT;
    }
    *out = v;
    return SD_OK;
}

const sd_vae_config *sd_vae_get_config(const sd_vae *vae) { return &vae->cfg; }

unsigned sd_vae_f32_redos(const sd_vae *vae) { return vae->f32_redos; }

void sd_vae_set_tap(sd_vae *vae, sd_vae_tap_fn fn, void *user) {
    vae->tap = fn;
    vae->tap_user = user;
}

/* ---- parameters by LDM name (sd_vae_param_each) --------------------------------- */

typedef struct {
    sd_vae_param_fn fn;
    void *ud;
} walker;

static void visit(const walker *w, const sd_bt *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void visit(const walker *w, const sd_bt *t, const char *fmt, ...) {
    if (!t) return;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    w->fn(w->ud, name, t, t->ndim, t->shape);
}

static void visit_res(const walker *w, const resblock *r, const char *p) {
    visit(w, r->n1w, "%s.norm1.weight", p);
    visit(w, r->n1b, "%s.norm1.bias", p);
    visit(w, r->c1w, "%s.conv1.weight", p);
    visit(w, r->c1b, "%s.conv1.bias", p);
    visit(w, r->n2w, "%s.norm2.weight", p);
    visit(w, r->n2b, "%s.norm2.bias", p);
    visit(w, r->c2w, "%s.conv2.weight", p);
    visit(w, r->c2b, "%s.conv2.bias", p);
    visit(w, r->skw, "%s.nin_shortcut.weight", p);
    visit(w, r->skb, "%s.nin_shortcut.bias", p);
}

static void visit_attn(const walker *w, const attnblock *a, const char *p) {
    const char *names[4] = {"q", "k", "v", "proj_out"};
    const sd_bt *ws[4] = {a->qw, a->kw, a->vw, a->pw}, *bs[4] = {a->qb, a->kb, a->vb, a->pb};
    char key[256];
    visit(w, a->nw, "%s.norm.weight", p);
    visit(w, a->nb, "%s.norm.bias", p);
    for (int i = 0; i < 4; i++) {
        if (ws[i]) {
            /* held as the linear [C, C]; stored as the 1x1 conv */
            int64_t s[4] = {ws[i]->shape[0], ws[i]->shape[1], 1, 1};
            snprintf(key, sizeof key, "%s.%s.weight", p, names[i]);
            w->fn(w->ud, key, ws[i], 4, s);
        }
        visit(w, bs[i], "%s.%s.bias", p, names[i]);
    }
}

void sd_vae_param_each(const sd_vae *v, sd_vae_param_fn fn, void *ud) {
    if (!v || !fn) return;
    const walker w = {fn, ud};
    const sd_vae_config *c = &v->cfg;
    int n = c->n_levels;
    char p[128];
    /* the order of the LDM state dict: encoder, decoder, quant convs */
    visit(&w, v->e_in_w, "encoder.conv_in.weight");
    visit(&w, v->e_in_b, "encoder.conv_in.bias");
    for (int i = 0; c->has_encoder && i < n; i++) {
        for (int j = 0; j < c->num_res_blocks; j++) {
            snprintf(p, sizeof p, "encoder.down.%d.block.%d", i, j);
            visit_res(&w, &v->e_blk[i][j], p);
        }
        visit(&w, v->e_down_w[i], "encoder.down.%d.downsample.conv.weight", i);
        visit(&w, v->e_down_b[i], "encoder.down.%d.downsample.conv.bias", i);
    }
    if (c->has_encoder) {
        visit_res(&w, &v->e_mid1, "encoder.mid.block_1");
        visit_attn(&w, &v->e_attn, "encoder.mid.attn_1");
        visit_res(&w, &v->e_mid2, "encoder.mid.block_2");
    }
    visit(&w, v->e_norm_w, "encoder.norm_out.weight");
    visit(&w, v->e_norm_b, "encoder.norm_out.bias");
    visit(&w, v->e_out_w, "encoder.conv_out.weight");
    visit(&w, v->e_out_b, "encoder.conv_out.bias");
    visit(&w, v->d_in_w, "decoder.conv_in.weight");
    visit(&w, v->d_in_b, "decoder.conv_in.bias");
    visit_res(&w, &v->d_mid1, "decoder.mid.block_1");
    visit_attn(&w, &v->d_attn, "decoder.mid.attn_1");
    visit_res(&w, &v->d_mid2, "decoder.mid.block_2");
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= c->num_res_blocks; j++) {
            snprintf(p, sizeof p, "decoder.up.%d.block.%d", i, j);
            visit_res(&w, &v->d_blk[i][j], p);
        }
        visit(&w, v->d_up_w[i], "decoder.up.%d.upsample.conv.weight", i);
        visit(&w, v->d_up_b[i], "decoder.up.%d.upsample.conv.bias", i);
    }
    visit(&w, v->d_norm_w, "decoder.norm_out.weight");
    visit(&w, v->d_norm_b, "decoder.norm_out.bias");
    visit(&w, v->d_out_w, "decoder.conv_out.weight");
    visit(&w, v->d_out_b, "decoder.conv_out.bias");
    visit(&w, v->quant_w, "quant_conv.weight");
    visit(&w, v->quant_b, "quant_conv.bias");
    visit(&w, v->pq_w, "post_quant_conv.weight");
    visit(&w, v->pq_b, "post_quant_conv.bias");
}

/* ---- forward ------------------------------------------------------------------------ */

#define STEP(x, expr) do { sd_bt *_n = (expr); sd_bt_free(x); (x) = _n; } while (0)

static void tap(const sd_vae *v, const char *side, const char *name, const sd_bt *x) {
    if (!v->tap || !x) return;
    char full[160];
    snprintf(full, sizeof full, "%s.act.%s", side, name);
    v->tap(v->tap_user, full, x);
}

/* x: [N, Cin, H, W] -> [N, Cout, H, W]; takes ownership of x. */
static sd_bt *res_forward(const resblock *r, sd_bt *x) {
    sd_bt *h = sd_op_group_norm(x, GN_GROUPS, r->n1w, r->n1b, GN_EPS, 1);
    STEP(h, sd_op_conv2d(h, r->c1w, r->c1b, 1, 1, 1));
    STEP(h, sd_op_group_norm(h, GN_GROUPS, r->n2w, r->n2b, GN_EPS, 1));
    STEP(h, sd_op_conv2d(h, r->c2w, r->c2b, 1, 1, 1));
    if (r->skw) STEP(x, sd_op_conv2d(x, r->skw, r->skb, 1, 0, 0));
    STEP(h, sd_op_add(x, h));
    sd_bt_free(x);
    return h;
}

/* Single-head self-attention over H*W; x: [N, C, H, W], ownership taken. */
static sd_bt *attn_forward(const attnblock *a, sd_bt *x) {
    if (!x) return NULL;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    sd_bt *h = sd_op_group_norm(x, GN_GROUPS, a->nw, a->nb, GN_EPS, 0);
    STEP(h, sd_op_permute(h, to_nhwc));
    int64_t seq[3] = {N, H * W, C}, img[4] = {N, H, W, C};
    sd_bt *t = sd_bt_view(h, 3, seq);
    sd_bt_free(h);
    sd_bt *q = sd_op_linear(t, a->qw, a->qb);
    sd_bt *k = sd_op_linear(t, a->kw, a->kb);
    sd_bt *v = sd_op_linear(t, a->vw, a->vb);
    sd_bt_free(t);
    sd_bt *o = sd_op_attention(q, k, v, 1, 0);
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    STEP(o, sd_op_linear(o, a->pw, a->pb));
    sd_bt *o4 = sd_bt_view(o, 4, img);
    sd_bt_free(o);
    STEP(o4, sd_op_permute(o4, to_nchw));
    STEP(o4, sd_op_add(x, o4));
    sd_bt_free(x);
    return o4;
}

/* GroupNorm + SiLU, unfused when a tap wants the norm output itself. */
static sd_bt *norm_out(const sd_vae *v, const char *side, const char *name, sd_bt *x, sd_bt *w,
                       sd_bt *b) {
    if (!v->tap) return sd_op_group_norm(x, GN_GROUPS, w, b, GN_EPS, 1);
    sd_bt *h = sd_op_group_norm(x, GN_GROUPS, w, b, GN_EPS, 0);
    tap(v, side, name, h);
    STEP(h, sd_op_silu(h));
    return h;
}

/* z: [N, E, h, w] -> [N, 3, 8h, 8w] raw; ownership of z taken. */
static sd_bt *decoder_forward(const sd_vae *v, sd_bt *z) {
    const sd_vae_config *c = &v->cfg;
    if (c->has_quant_conv) {
        STEP(z, sd_op_conv2d(z, v->pq_w, v->pq_b, 1, 0, 0));
        tap(v, "dec", "post_quant_conv", z);
    }
    sd_bt *h = sd_op_conv2d(z, v->d_in_w, v->d_in_b, 1, 1, 1);
    sd_bt_free(z);
    tap(v, "dec", "decoder.conv_in", h);
    h = res_forward(&v->d_mid1, h);
    tap(v, "dec", "decoder.mid.block_1", h);
    h = attn_forward(&v->d_attn, h);
    tap(v, "dec", "decoder.mid.attn_1", h);
    h = res_forward(&v->d_mid2, h);
    tap(v, "dec", "decoder.mid.block_2", h);
    for (int i = c->n_levels - 1; i >= 0; i--) {
        for (int j = 0; j <= c->num_res_blocks; j++) h = res_forward(&v->d_blk[i][j], h);
        if (i != 0) {
            STEP(h, sd_op_upsample_nearest2x(h));
            STEP(h, sd_op_conv2d(h, v->d_up_w[i], v->d_up_b[i], 1, 1, 1));
        }
        char name[32];
        snprintf(name, sizeof name, "decoder.up.%d", i);
        tap(v, "dec", name, h);
    }
    STEP(h, norm_out(v, "dec", "decoder.norm_out", h, v->d_norm_w, v->d_norm_b));
    STEP(h, sd_op_conv2d(h, v->d_out_w, v->d_out_b, 1, 1, 1));
    tap(v, "dec", "decoder.conv_out", h);
    return h;
}

/* x: [N, 3, H, W] in [-1, 1] -> moments [N, 2E, H/8, W/8]; ownership taken. */
static sd_bt *encoder_forward(const sd_vae *v, sd_bt *x) {
    const sd_vae_config *c = &v->cfg;
    sd_bt *h = sd_op_conv2d(x, v->e_in_w, v->e_in_b, 1, 1, 1);
    sd_bt_free(x);
    tap(v, "enc", "encoder.conv_in", h);
    for (int i = 0; i < c->n_levels; i++) {
        for (int j = 0; j < c->num_res_blocks; j++) h = res_forward(&v->e_blk[i][j], h);
        if (i != c->n_levels - 1) { /* pad right/bottom, stride-2 conv without padding */
            STEP(h, sd_op_pad2d(h, 0, 1, 0, 1));
            STEP(h, sd_op_conv2d(h, v->e_down_w[i], v->e_down_b[i], 2, 0, 0));
        }
        char name[32];
        snprintf(name, sizeof name, "encoder.down.%d", i);
        tap(v, "enc", name, h);
    }
    h = res_forward(&v->e_mid1, h);
    tap(v, "enc", "encoder.mid.block_1", h);
    h = attn_forward(&v->e_attn, h);
    tap(v, "enc", "encoder.mid.attn_1", h);
    h = res_forward(&v->e_mid2, h);
    tap(v, "enc", "encoder.mid.block_2", h);
    STEP(h, norm_out(v, "enc", "encoder.norm_out", h, v->e_norm_w, v->e_norm_b));
    STEP(h, sd_op_conv2d(h, v->e_out_w, v->e_out_b, 1, 1, 1));
    tap(v, "enc", "encoder.conv_out", h);
    if (c->has_quant_conv) {
        STEP(h, sd_op_conv2d(h, v->quant_w, v->quant_b, 1, 0, 0));
        tap(v, "enc", "quant_conv", h);
    }
    return h;
}

static int all_finite(const sd_tensor *t) {
    const float *p = t->data;
    int64_t n = sd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return 0;
    return 1;
}

/* Upload, run, download; turns the backend's sticky error into err. A
 * decode in a reduced precision whose output holds NaN or Inf (an f16
 * overflow in the up blocks, typically) is run again in F32: the clamp to
 * [0, 1] afterwards would otherwise hide it as black or white pixels. */
static sd_status run_net(sd_vae *v, int enc, const sd_tensor *in, sd_tensor **out, sd_error *err) {
    *out = NULL;
    sd_bt *x = sd_bt_from_host(v->be, (sd_tensor *)in, SD_F32);
    x = enc ? encoder_forward(v, x) : decoder_forward(v, x);
    if (x) *out = sd_bt_to_host(x);
    sd_bt_free(x);
    sd_precision p = sd_backend_precision(v->be);
    if (!enc && *out && p != SD_PREC_F32 && !sd_backend_error(v->be) && !all_finite(*out)) {
        sd_tensor_unref(*out);
        *out = NULL;
        sd_backend_set_precision(v->be, SD_PREC_F32);
        x = decoder_forward(v, sd_bt_from_host(v->be, (sd_tensor *)in, SD_F32));
        if (x) *out = sd_bt_to_host(x);
        sd_bt_free(x);
        sd_backend_set_precision(v->be, p);
        v->f32_redos++;
    }
    sd_status rc = sd_backend_take_error(v->be, err);
    sd_backend_clear_error(v->be);
    if (rc == SD_OK && !*out) rc = sd_error_set(err, SD_ERR_NOMEM, "VAE: out of memory");
    if (rc != SD_OK) {
        sd_error_prefix(err, "VAE %s", enc ? "encode" : "decode");
        sd_tensor_unref(*out);
        *out = NULL;
    }
    return rc;
}

sd_status sd_vae_decode_raw(sd_vae *v, const sd_tensor *latent, sd_tensor **x, sd_error *err) {
    *x = NULL;
    if (latent->dtype != SD_F32 || latent->ndim != 4 || latent->shape[1] != v->cfg.embed_dim ||
        latent->shape[2] < 1 || latent->shape[3] < 1) {
        char b[96];
        return sd_error_set(err, SD_ERR_INVALID, "VAE decode: latent %s must be F32 [N, %d, h, w]",
                            sd_tensor_shape_str(latent, b, sizeof b), v->cfg.embed_dim);
    }
    return run_net(v, 0, latent, x, err);
}

sd_status sd_vae_decode(sd_vae *v, const sd_tensor *latent, sd_tensor **image, sd_error *err) {
    *image = NULL;
    sd_tensor *raw = NULL;
    sd_status rc = sd_vae_decode_raw(v, latent, &raw, err);
    if (rc != SD_OK) return rc;
    *image = sd_vae_nchw_to_pixels(raw, 0.5f, 0.5f, err); /* clamp((x + 1) / 2) */
    sd_tensor_unref(raw);
    return *image ? SD_OK : (err ? err->code : SD_ERR_NOMEM);
}

/* NCHW in [-1, 1] (already cropped) -> moments. */
static sd_status encode_moments(sd_vae *v, const sd_tensor *x, sd_tensor **moments, sd_error *err) {
    *moments = NULL;
    if (!v->cfg.has_encoder)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "VAE encode: this VAE has no encoder weights");
    if (x->shape[2] < 8 || x->shape[3] < 8) {
        char b[96];
        return sd_error_set(err, SD_ERR_INVALID, "VAE encode: image %s is smaller than 8x8",
                            sd_tensor_shape_str(x, b, sizeof b));
    }
    return run_net(v, 1, x, moments, err);
}

/* Channels [c0, c0 + n) of an NCHW host tensor. */
static sd_tensor *channels(const sd_tensor *t, int64_t c0, int64_t n) {
    int64_t N = t->shape[0], C = t->shape[1], S = t->shape[2] * t->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, N, n, t->shape[2], t->shape[3]);
    if (!o) return NULL;
    for (int64_t b = 0; b < N; b++)
        memcpy((float *)o->data + b * n * S, (const float *)t->data + (b * C + c0) * S,
               (size_t)(n * S) * sizeof(float));
    return o;
}

sd_status sd_vae_encode_posterior(sd_vae *v, const sd_tensor *image, sd_tensor **mean,
                                  sd_tensor **logvar, sd_error *err) {
    *mean = NULL;
    if (logvar) *logvar = NULL;
    sd_tensor *x = sd_vae_pixels_to_nchw(image, 2.0f, -1.0f, err);
    if (!x) return err ? err->code : SD_ERR_INVALID;
    sd_tensor *m = NULL;
    sd_status rc = encode_moments(v, x, &m, err);
    sd_tensor_unref(x);
    if (rc != SD_OK) return rc;
    int64_t E = m->shape[1] / 2;
    *mean = channels(m, 0, E);
    if (logvar) {
        *logvar = channels(m, E, E);
        if (*logvar) {
            float *p = (*logvar)->data;
            for (int64_t i = 0; i < sd_tensor_numel(*logvar); i++)
                p[i] = p[i] < -30.0f ? -30.0f : p[i] > 20.0f ? 20.0f : p[i];
        }
    }
    sd_tensor_unref(m);
    if (!*mean || (logvar && !*logvar)) {
        sd_tensor_unref(*mean);
        *mean = NULL;
        if (logvar) { sd_tensor_unref(*logvar); *logvar = NULL; }
        return sd_error_set(err, SD_ERR_NOMEM, "VAE encode: out of memory");
    }
    return SD_OK;
}

sd_status sd_vae_encode(sd_vae *v, const sd_tensor *image, sd_tensor **latent, sd_error *err) {
    return sd_vae_encode_posterior(v, image, latent, NULL, err);
}

/* ---- IMAGE <-> NCHW ---------------------------------------------------------------- */

sd_tensor *sd_vae_pixels_to_nchw(const sd_tensor *image, float mul, float add, sd_error *err) {
    if (!image || image->dtype != SD_F32 || image->ndim != 4 || image->shape[3] < 3) {
        char b[96];
        sd_error_set(err, SD_ERR_INVALID, "IMAGE %s must be F32 [N, H, W, C>=3]",
                     image ? sd_tensor_shape_str(image, b, sizeof b) : "(null)");
        return NULL;
    }
    int64_t N = image->shape[0], H = image->shape[1], W = image->shape[2], C = image->shape[3];
    int64_t H8 = H / 8 * 8, W8 = W / 8 * 8, oy = (H % 8) / 2, ox = (W % 8) / 2;
    if (H8 == 0 || W8 == 0) {
        sd_error_set(err, SD_ERR_INVALID, "IMAGE %lldx%lld is smaller than 8x8", (long long)W,
                     (long long)H);
        return NULL;
    }
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, N, 3, H8, W8);
    if (!o) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const float *s = image->data;
    float *d = o->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t y = 0; y < H8; y++)
                for (int64_t x = 0; x < W8; x++)
                    d[((n * 3 + c) * H8 + y) * W8 + x] =
                        s[((n * H + y + oy) * W + x + ox) * C + c] * mul + add;
    return o;
}

sd_tensor *sd_vae_nchw_to_pixels(const sd_tensor *x, float mul, float add, sd_error *err) {
    if (!x || x->dtype != SD_F32 || x->ndim != 4) {
        sd_error_set(err, SD_ERR_INVALID, "expected an F32 NCHW tensor");
        return NULL;
    }
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, N, H, W, C);
    if (!o) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const float *s = x->data;
    float *d = o->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < H * W; i++) {
                float v = s[(n * C + c) * H * W + i] * mul + add;
                d[(n * H * W + i) * C + c] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
    return o;
}

/* ---- tiling (comfy.utils.tiled_scale) ------------------------------------------------- */

typedef sd_status (*tile_fn)(sd_vae *v, const sd_tensor *in, sd_tensor **out, sd_error *err);

static sd_status decode_tile(sd_vae *v, const sd_tensor *in, sd_tensor **out, sd_error *err) {
    return sd_vae_decode_raw(v, in, out, err);
}

static sd_status encode_tile(sd_vae *v, const sd_tensor *in, sd_tensor **out, sd_error *err) {
    /* in is [0,1] NCHW; the encoder sees 2x - 1 and we keep the mean */
    sd_tensor *x = sd_tensor_clone(in);
    if (!x) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    float *p = x->data;
    for (int64_t i = 0; i < sd_tensor_numel(x); i++) p[i] = p[i] * 2.0f - 1.0f;
    sd_tensor *m = NULL;
    sd_status rc = encode_moments(v, x, &m, err);
    sd_tensor_unref(x);
    if (rc != SD_OK) return rc;
    *out = channels(m, 0, m->shape[1] / 2);
    sd_tensor_unref(m);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* Sub-rectangle [y0, y0+h) x [x0, x0+w) of sample n of an NCHW tensor. */
static sd_tensor *crop(const sd_tensor *t, int64_t n, int64_t y0, int64_t h, int64_t x0, int64_t w) {
    int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, 1, C, h, w);
    if (!o) return NULL;
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < h; y++)
            memcpy((float *)o->data + (c * h + y) * w,
                   (const float *)t->data + ((n * C + c) * H + y0 + y) * W + x0,
                   (size_t)w * sizeof(float));
    return o;
}

/* Python round() (half to even) of a non-negative value. */
static int64_t pyround(double v) { return (int64_t)nearbyint(v); }

/* One tiled pass: tile (th, tw) and overlap in input units, output scaled by
 * `up`; writes [N, out_c, round(H*up), round(W*up)] into *out. */
static sd_status tiled_scale(sd_vae *v, const sd_tensor *s, tile_fn fn, int64_t tw, int64_t th,
                             int64_t overlap, double up, int64_t out_c, sd_tensor **out,
                             sd_error *err) {
    int64_t N = s->shape[0], H = s->shape[2], W = s->shape[3];
    int64_t OH = pyround(H * up), OW = pyround(W * up);
    *out = NULL;
    if (th < 1 || tw < 1 || overlap < 0 || ((H > th && th - overlap <= 0) || (W > tw && tw - overlap <= 0)))
        return sd_error_set(err, SD_ERR_INVALID, "VAE tiling: tile %lldx%lld with overlap %lld",
                            (long long)tw, (long long)th, (long long)overlap);
    sd_tensor *res = sd_tensor_new4(SD_F32, 4, N, out_c, OH, OW);
    float *acc = malloc((size_t)(out_c * OH * OW) * sizeof(float));
    float *div = malloc((size_t)(out_c * OH * OW) * sizeof(float));
    if (!res || !acc || !div) {
        sd_tensor_unref(res);
        free(acc);
        free(div);
        return sd_error_set(err, SD_ERR_NOMEM, "VAE tiling: out of memory");
    }
    sd_status rc = SD_OK;
    int64_t plane = OH * OW;
    for (int64_t n = 0; n < N && rc == SD_OK; n++) {
        float *dst = (float *)res->data + n * out_c * plane;
        if (H <= th && W <= tw) { /* fits in one tile: no blending */
            sd_tensor *in = crop(s, n, 0, H, 0, W), *o = NULL;
            rc = in ? fn(v, in, &o, err) : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            if (rc == SD_OK) memcpy(dst, o->data, (size_t)(out_c * plane) * sizeof(float));
            sd_tensor_unref(in);
            sd_tensor_unref(o);
            continue;
        }
        memset(acc, 0, (size_t)(out_c * plane) * sizeof(float));
        memset(div, 0, (size_t)(out_c * plane) * sizeof(float));
        int64_t ystep = H > th ? th - overlap : 1, xstep = W > tw ? tw - overlap : 1;
        int64_t yend = H > th ? H - overlap : 1, xend = W > tw ? W - overlap : 1;
        for (int64_t py = 0; py < yend && rc == SD_OK; py += ystep)
            for (int64_t px = 0; px < xend && rc == SD_OK; px += xstep) {
                int64_t y0 = py, x0 = px;
                int64_t h = th < H - y0 ? th : H - y0, w = tw < W - x0 ? tw : W - x0;
                sd_tensor *in = crop(s, n, y0, h, x0, w), *o = NULL;
                rc = in ? fn(v, in, &o, err) : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                sd_tensor_unref(in);
                if (rc != SD_OK) break;
                int64_t oh = o->shape[2], ow = o->shape[3];
                int64_t uy = pyround(y0 * up), ux = pyround(x0 * up);
                /* linear feather over `overlap` (scaled) at both ends of each dim */
                int64_t feather = pyround(overlap * up);
                float *my = malloc((size_t)oh * sizeof(float)), *mx = malloc((size_t)ow * sizeof(float));
                if (!my || !mx) {
                    free(my);
                    free(mx);
                    sd_tensor_unref(o);
                    rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                    break;
                }
                for (int64_t i = 0; i < oh; i++) my[i] = 1.0f;
                for (int64_t i = 0; i < ow; i++) mx[i] = 1.0f;
                if (feather < oh)
                    for (int64_t t = 0; t < feather; t++) {
                        float a = (float)(t + 1) / (float)feather;
                        my[t] *= a;
                        my[oh - 1 - t] *= a;
                    }
                if (feather < ow)
                    for (int64_t t = 0; t < feather; t++) {
                        float a = (float)(t + 1) / (float)feather;
                        mx[t] *= a;
                        mx[ow - 1 - t] *= a;
                    }
                const float *op = o->data;
                for (int64_t c = 0; c < out_c; c++)
                    for (int64_t y = 0; y < oh && uy + y < OH; y++)
                        for (int64_t x = 0; x < ow && ux + x < OW; x++) {
                            float m = my[y] * mx[x];
                            int64_t di = c * plane + (uy + y) * OW + ux + x;
                            acc[di] += op[(c * oh + y) * ow + x] * m;
                            div[di] += m;
                        }
                free(my);
                free(mx);
                sd_tensor_unref(o);
            }
        if (rc == SD_OK)
            for (int64_t i = 0; i < out_c * plane; i++) dst[i] = acc[i] / div[i];
    }
    free(acc);
    free(div);
    if (rc != SD_OK) {
        sd_tensor_unref(res);
        return rc;
    }
    *out = res;
    return SD_OK;
}

/* Sum of three passes with (w, h) tiles (a), (b), (c), divided by 3. */
static sd_status three_passes(sd_vae *v, const sd_tensor *s, tile_fn fn, const int64_t tiles[3][2],
                              int64_t overlap, double up, int64_t out_c, sd_tensor **out,
                              sd_error *err) {
    *out = NULL;
    sd_tensor *sum = NULL;
    for (int p = 0; p < 3; p++) {
        sd_tensor *r = NULL;
        sd_status rc = tiled_scale(v, s, fn, tiles[p][0], tiles[p][1], overlap, up, out_c, &r, err);
        if (rc != SD_OK) {
            sd_tensor_unref(sum);
            return rc;
        }
        if (!sum) {
            sum = r;
            continue;
        }
        float *a = sum->data;
        const float *b = r->data;
        for (int64_t i = 0; i < sd_tensor_numel(sum); i++) a[i] += b[i];
        sd_tensor_unref(r);
    }
    float *a = sum->data;
    for (int64_t i = 0; i < sd_tensor_numel(sum); i++) a[i] /= 3.0f;
    *out = sum;
    return SD_OK;
}

sd_status sd_vae_decode_tiled(sd_vae *v, const sd_tensor *latent, int tile_size, int overlap,
                              sd_tensor **image, sd_error *err) {
    *image = NULL;
    if (latent->dtype != SD_F32 || latent->ndim != 4 || latent->shape[1] != v->cfg.embed_dim) {
        char b[96];
        return sd_error_set(err, SD_ERR_INVALID, "VAE decode: latent %s must be F32 [N, %d, h, w]",
                            sd_tensor_shape_str(latent, b, sizeof b), v->cfg.embed_dim);
    }
    if (tile_size < 64 || overlap < 0)
        return sd_error_set(err, SD_ERR_INVALID, "VAEDecodeTiled: tile_size %d / overlap %d",
                            tile_size, overlap);
    if (tile_size < overlap * 4) overlap = tile_size / 4; /* as the node does */
    int64_t t = tile_size / 8, o = overlap / 8;
    /* decode_tiled_: (t/2 wide, 2t high), (2t wide, t/2 high), (t, t) */
    const int64_t tiles[3][2] = {{t / 2, t * 2}, {t * 2, t / 2}, {t, t}};
    sd_tensor *raw = NULL;
    sd_status rc = three_passes(v, latent, decode_tile, tiles, o, 8.0, 3, &raw, err);
    if (rc != SD_OK) return rc;
    *image = sd_vae_nchw_to_pixels(raw, 0.5f, 0.5f, err);
    sd_tensor_unref(raw);
    return *image ? SD_OK : (err ? err->code : SD_ERR_NOMEM);
}

sd_status sd_vae_encode_tiled(sd_vae *v, const sd_tensor *image, int tile_size, int overlap,
                              sd_tensor **latent, sd_error *err) {
    *latent = NULL;
    if (!v->cfg.has_encoder)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "VAE encode: this VAE has no encoder weights");
    if (tile_size < 64 || overlap < 0)
        return sd_error_set(err, SD_ERR_INVALID, "VAEEncodeTiled: tile_size %d / overlap %d",
                            tile_size, overlap);
    sd_tensor *x = sd_vae_pixels_to_nchw(image, 1.0f, 0.0f, err); /* [0,1], cropped */
    if (!x) return err ? err->code : SD_ERR_INVALID;
    int64_t t = tile_size;
    /* encode_tiled_: (t, t), (2t wide, t/2 high), (t/2 wide, 2t high) */
    const int64_t tiles[3][2] = {{t, t}, {t * 2, t / 2}, {t / 2, t * 2}};
    sd_status rc = three_passes(v, x, encode_tile, tiles, overlap, 1.0 / 8.0, v->cfg.embed_dim,
                                latent, err);
    sd_tensor_unref(x);
    return rc;
}
