/* upscale.c - upscale model detection, loading and the forward passes
 * (ESRGAN / RRDBNet and Compact SRVGGNet; layouts in upscale.h). */
#include "models/upscale/upscale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/torch_ckpt.h"
#include "models/checkpoint/weights.h"

#define MAX_UP 4      /* x16 through nearest x2 stages */
#define MAX_BODY 256  /* Compact body convs / ESRGAN blocks accepted */
#define LRELU 0.2f    /* RRDBNet's LeakyReLU slope (spandrel block.act) */

typedef struct {
    sd_bt *w, *b;
} conv;

typedef struct {
    conv c[3][5]; /* RDB1..3, conv1..5 */
} rrdb;

struct sd_upscale {
    sd_backend *be;
    sd_upscale_config cfg;
    conv first, body_conv, up[MAX_UP], hr, last; /* ESRGAN */
    rrdb *blocks;                                /* ESRGAN: num_block */
    conv *convs;                                 /* Compact: num_conv + 2 */
    sd_bt **prelu;                               /* Compact: num_conv + 1 */
    uint64_t bytes;
};

/* ---- freeing ----------------------------------------------------------------- */

static void conv_free(conv *c) {
    sd_bt_free(c->w);
    sd_bt_free(c->b);
    c->w = c->b = NULL;
}

void sd_upscale_free(sd_upscale *m) {
    if (!m) return;
    conv_free(&m->first);
    conv_free(&m->body_conv);
    for (int i = 0; i < MAX_UP; i++) conv_free(&m->up[i]);
    conv_free(&m->hr);
    conv_free(&m->last);
    if (m->blocks)
        for (int b = 0; b < m->cfg.num_block; b++)
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 5; c++) conv_free(&m->blocks[b].c[r][c]);
    if (m->convs)
        for (int i = 0; i < m->cfg.num_block + 2; i++) conv_free(&m->convs[i]);
    if (m->prelu)
        for (int i = 0; i < m->cfg.num_block + 1; i++) sd_bt_free(m->prelu[i]);
    free(m->blocks);
    free(m->convs);
    free(m->prelu);
    free(m);
}

const sd_upscale_config *sd_upscale_get_config(const sd_upscale *m) { return &m->cfg; }
uint64_t sd_upscale_weight_bytes(const sd_upscale *m) { return m->bytes; }

/* ---- loading ------------------------------------------------------------------ */

/* A 3x3 conv `name`.weight/.bias with `in` inputs (and `outc` outputs when
 * > 0); *got_out receives the outputs. */
static sd_status load_conv(sd_upscale *m, const sd_weights *w, const char *name, int64_t in,
                           int64_t outc, int64_t *got_out, conv *c, sd_error *err) {
    char wn[160], bn[160], key[512];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    int64_t s[SD_MAX_DIMS];
    int nd = sd_weights_shape(w, wn, s);
    if (nd < 0)
        return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: missing tensor '%s'", sd_st_path(w->file),
                            sd_weights_key(w, wn, key, sizeof key));
    if (nd != 4 || s[2] != 3 || s[3] != 3 || (in > 0 && s[1] != in) || (outc > 0 && s[0] != outc))
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld]; want a 3x3 conv "
                            "weight [%s, %lld, 3, 3]",
                            sd_st_path(w->file), sd_weights_key(w, wn, key, sizeof key),
                            (long long)s[0], (long long)(nd > 1 ? s[1] : 0),
                            (long long)(nd > 2 ? s[2] : 0), (long long)(nd > 3 ? s[3] : 0),
                            outc > 0 ? "out" : "any", (long long)in);
    c->w = sd_weights_get(w, wn, 4, s, err);
    if (!c->w) return err->code;
    int64_t bs[1] = {s[0]};
    c->b = sd_weights_get(w, bn, 1, bs, err);
    if (!c->b) return err->code;
    m->bytes += (uint64_t)(s[0] * s[1] * 9 + s[0]) * 4;
    m->cfg.n_params += s[0] * s[1] * 9 + s[0];
    if (got_out) *got_out = s[0];
    return SD_OK;
}

typedef struct {
    const char *layout;
    const char *block;  /* printf(block, b, rdb, conv) */
    const char *body;   /* old layout: printf(body, num_block) */
    const char *up;     /* printf(up, k) for k = 1..; old layout: model.%d with 3k */
    const char *hr, *last;
    int old;
} esrgan_names;

static const esrgan_names NAMES_OLD = {"ESRGAN (old keys)", "model.1.sub.%d.RDB%d.conv%d.0",
                                       "model.1.sub.%d", "model.%d", NULL, NULL, 1};
static const esrgan_names NAMES_NEW = {"Real-ESRGAN", "body.%d.rdb%d.conv%d", "conv_body",
                                       "conv_up%d", "conv_hr", "conv_last", 0};
static const esrgan_names NAMES_BSR = {"BSRGAN", "RRDB_trunk.%d.RDB%d.conv%d", "trunk_conv",
                                       "upconv%d", "HRconv", "conv_last", 0};

static int hasf(const sd_weights *w, const char *fmt, int a, int b, int c) {
    char n[160];
    snprintf(n, sizeof n, fmt, a, b, c);
    return sd_weights_has(w, n);
}

static sd_status load_esrgan(sd_upscale *m, const sd_weights *w, const esrgan_names *nm,
                             sd_error *err) {
    sd_upscale_config *cfg = &m->cfg;
    char name[160], blk[160];
    int64_t nf = 0, in_nc = 0;
    int64_t s[SD_MAX_DIMS];
    const char *first = nm->old ? "model.0" : "conv_first";
    snprintf(name, sizeof name, "%s.weight", first);
    if (sd_weights_shape(w, name, s) == 4) in_nc = s[1];
    sd_status rc = load_conv(m, w, first, in_nc, 0, &nf, &m->first, err);
    if (rc) return rc;
    int nb = 0;
    while (nb < MAX_BODY && hasf(w, strcat(strcpy(blk, nm->block), ".weight"), nb, 1, 1)) nb++;
    if (nb == 0 || nb == MAX_BODY)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: %s model with %d RRDB blocks",
                            sd_st_path(w->file), nm->layout, nb);
    cfg->num_block = nb;
    cfg->num_feat = (int)nf;
    m->blocks = calloc((size_t)nb, sizeof *m->blocks);
    if (!m->blocks) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int64_t gc = 0;
    for (int b = 0; b < nb; b++)
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 5; c++) {
                snprintf(name, sizeof name, nm->block, b, r + 1, c + 1);
                int64_t got = 0;
                rc = load_conv(m, w, name, nf + c * gc, c == 4 ? nf : gc, &got,
                               &m->blocks[b].c[r][c], err);
                if (rc == SD_ERR_FORMAT && c == 0 && b == 0 && r == 0) return rc;
                if (rc) return rc;
                if (c == 0 && b == 0 && r == 0) gc = got;
            }
    cfg->num_grow_ch = (int)gc;
    if (nm->old) snprintf(name, sizeof name, nm->body, nb);
    else snprintf(name, sizeof name, "%s", nm->body);
    rc = load_conv(m, w, name, nf, nf, NULL, &m->body_conv, err);
    if (rc) return rc;
    /* x2 stages: model.3, model.6, ... (old) or conv_up1, conv_up2, ... */
    int n_up = 0;
    for (;;) {
        if (nm->old) snprintf(name, sizeof name, "model.%d.weight", 3 * (n_up + 1));
        else snprintf(name, sizeof name, nm->up, n_up + 1), strcat(name, ".weight");
        if (!sd_weights_has(w, name)) break;
        if (n_up == MAX_UP)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: more than %d x2 stages",
                                sd_st_path(w->file), MAX_UP);
        name[strlen(name) - strlen(".weight")] = '\0';
        rc = load_conv(m, w, name, nf, nf, NULL, &m->up[n_up], err);
        if (rc) return rc;
        n_up++;
    }
    cfg->n_up = n_up;
    if (nm->old) snprintf(name, sizeof name, "model.%d", 3 * n_up + 2);
    else snprintf(name, sizeof name, "%s", nm->hr);
    rc = load_conv(m, w, name, nf, nf, NULL, &m->hr, err);
    if (rc) return rc;
    int64_t out_nc = 0;
    if (nm->old) snprintf(name, sizeof name, "model.%d", 3 * n_up + 4);
    else snprintf(name, sizeof name, "%s", nm->last);
    rc = load_conv(m, w, name, nf, 0, &out_nc, &m->last, err);
    if (rc) return rc;
    /* pixel-unshuffle models (spandrel: in_nc == out_nc * 4 or * 16) */
    cfg->shuffle = 1;
    if (in_nc == out_nc * 4) cfg->shuffle = 2;
    else if (in_nc == out_nc * 16) cfg->shuffle = 4;
    cfg->in_ch = (int)(in_nc / ((int64_t)cfg->shuffle * cfg->shuffle));
    cfg->out_ch = (int)out_nc;
    int internal = 1 << n_up;
    if (internal < cfg->shuffle)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: pixel-unshuffle by %d with only %d x2 stages",
                            sd_st_path(w->file), cfg->shuffle, n_up);
    cfg->scale = internal / cfg->shuffle;
    cfg->arch = SD_UPSCALE_ESRGAN;
    cfg->layout = nm->layout;
    return SD_OK;
}

static sd_status load_compact(sd_upscale *m, const sd_weights *w, sd_error *err) {
    sd_upscale_config *cfg = &m->cfg;
    int hi = 0; /* highest body index with a weight */
    char name[64];
    for (int i = 0; i < 2 * MAX_BODY + 3; i++) {
        snprintf(name, sizeof name, "body.%d.weight", i);
        if (sd_weights_has(w, name)) hi = i;
    }
    if (hi < 2 || hi % 2 != 0)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: Compact (SRVGGNet) model whose last body index is %d (want an "
                            "even index >= 2: conv, PReLU, ..., conv)",
                            sd_st_path(w->file), hi);
    int num_conv = (hi - 2) / 2;
    int64_t s[SD_MAX_DIMS];
    if (sd_weights_shape(w, "body.0.weight", s) != 4)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: body.0.weight is not a conv weight",
                            sd_st_path(w->file));
    int64_t in_nc = s[1], nf = s[0], last_out = 0;
    cfg->num_block = num_conv;
    m->convs = calloc((size_t)num_conv + 2, sizeof *m->convs);
    m->prelu = calloc((size_t)num_conv + 1, sizeof *m->prelu);
    if (!m->convs || !m->prelu) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i <= num_conv + 1; i++) {
        snprintf(name, sizeof name, "body.%d", 2 * i);
        sd_status rc = load_conv(m, w, name, i == 0 ? in_nc : nf, i <= num_conv ? nf : 0,
                                 i == num_conv + 1 ? &last_out : NULL, &m->convs[i], err);
        if (rc) return rc;
        if (i <= num_conv) {
            snprintf(name, sizeof name, "body.%d.weight", 2 * i + 1);
            int64_t ps[1] = {nf};
            m->prelu[i] = sd_weights_get(w, name, 1, ps, err);
            if (!m->prelu[i]) return err->code;
            m->bytes += (uint64_t)nf * 4;
            cfg->n_params += nf;
        }
    }
    /* spandrel's get_scale_and_output_channels: out_nc from {in, 3, 4, 1} */
    const int64_t cand[4] = {in_nc, 3, 4, 1};
    int scale = 0, out_nc = 0;
    for (int i = 0; i < 4 && !scale; i++) {
        if (last_out % cand[i] != 0) continue;
        int64_t q = last_out / cand[i], r = 1;
        while (r * r < q) r++;
        if (r * r == q) scale = (int)r, out_nc = (int)cand[i];
    }
    if (!scale)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: Compact model's last conv has %lld outputs, not scale^2 x "
                            "(%lld, 3, 4 or 1) channels",
                            sd_st_path(w->file), (long long)last_out, (long long)in_nc);
    if (out_nc != in_nc)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: Compact model with %lld input and %d output channels (the "
                            "nearest-upsampled input is added to the output: they must match)",
                            sd_st_path(w->file), (long long)in_nc, out_nc);
    cfg->arch = SD_UPSCALE_COMPACT;
    cfg->layout = "Compact";
    cfg->scale = scale;
    cfg->in_ch = (int)in_nc;
    cfg->out_ch = out_nc;
    cfg->num_feat = (int)nf;
    cfg->shuffle = 1;
    return SD_OK;
}

/* Up to n keys of f, comma-separated, for the refusal message. */
static void some_keys(sd_st_file *f, char *buf, size_t n) {
    size_t off = 0, count = sd_st_count(f);
    buf[0] = '\0';
    for (size_t i = 0; i < count && i < 6 && off + 4 < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? ", " : "", sd_st_at(f, i)->name);
    if (count > 6 && off + 6 < n) snprintf(buf + off, n - off, ", ...");
}

/* The architecture from key names alone: *w gets the prefix the keys live
 * under, *nm the ESRGAN naming or *compact = 1. No tensor is read. */
static sd_status pick_arch(sd_backend *be, sd_st_file *f, sd_weights *out_w, const esrgan_names **out_nm,
                           int *out_compact, sd_error *err) {
    sd_weights w;
    sd_weights_init(&w, be, f, "");
    /* basicsr training checkpoints keep the weights under params_ema / params */
    if (!sd_weights_has(&w, "conv_first.weight") && !sd_weights_has(&w, "body.0.weight")) {
        static const char *const pre[] = {"params_ema.", "params.", NULL};
        for (int i = 0; pre[i]; i++) {
            sd_weights p;
            sd_weights_init(&p, be, f, pre[i]);
            if (sd_weights_has(&p, "conv_first.weight") || sd_weights_has(&p, "body.0.weight") ||
                sd_weights_has(&p, "model.0.weight")) {
                w = p;
                break;
            }
        }
    }
    const esrgan_names *nm = NULL;
    int compact = 0;
    if (sd_weights_has(&w, "model.0.weight") &&
        sd_weights_has(&w, "model.1.sub.0.RDB1.conv1x1.weight"))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: ESRGAN+ model (RRDB blocks with conv1x1 layers) is not "
                            "supported; supported: ESRGAN/RRDBNet (old and new key layouts), "
                            "Real-ESRGAN Compact (SRVGGNet)",
                            sd_st_path(f));
    if (sd_weights_has(&w, "model.0.weight") &&
        sd_weights_has(&w, "model.1.sub.0.RDB1.conv1.0.weight"))
        nm = &NAMES_OLD;
    else if (sd_weights_has(&w, "conv_first.weight") &&
             sd_weights_has(&w, "body.0.rdb1.conv1.weight") &&
             sd_weights_has(&w, "conv_body.weight") && sd_weights_has(&w, "conv_last.weight"))
        nm = &NAMES_NEW;
    else if (sd_weights_has(&w, "conv_first.weight") &&
             sd_weights_has(&w, "RRDB_trunk.0.RDB1.conv1.weight") &&
             sd_weights_has(&w, "trunk_conv.weight") && sd_weights_has(&w, "conv_last.weight"))
        nm = &NAMES_BSR;
    else if (sd_weights_has(&w, "body.0.weight") && sd_weights_has(&w, "body.1.weight"))
        compact = 1;
    if (!nm && !compact) {
        char keys[512];
        some_keys(f, keys, sizeof keys);
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: unknown upscale model architecture (%zu tensors: %s); supported: "
                            "ESRGAN/RRDBNet (model.0 + model.1.sub.N.RDB1..., or conv_first + "
                            "body.N.rdb1... / RRDB_trunk.N...) and Real-ESRGAN Compact "
                            "(body.0 conv + body.1 PReLU ...)",
                            sd_st_path(f), sd_st_count(f), keys[0] ? keys : "none");
    }
    *out_w = w;
    *out_nm = nm;
    *out_compact = compact;
    return SD_OK;
}

sd_status sd_upscale_load(sd_backend *be, sd_st_file *f, sd_upscale **out, sd_error *err) {
    *out = NULL;
    sd_weights w;
    const esrgan_names *nm = NULL;
    int compact = 0;
    sd_status rc0 = pick_arch(be, f, &w, &nm, &compact, err);
    if (rc0) return rc0;
    sd_upscale *m = calloc(1, sizeof *m);
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    m->be = be;
    sd_status rc = compact ? load_compact(m, &w, err) : load_esrgan(m, &w, nm, err);
    if (rc == SD_OK && sd_backend_error(be)) rc = sd_backend_take_error(be, err);
    if (rc) {
        sd_backend_clear_error(be);
        sd_upscale_free(m);
        return rc;
    }
    *out = m;
    return SD_OK;
}

sd_status sd_upscale_load_file(sd_backend *be, const char *path, sd_upscale **out,
                               sd_error *err) {
    *out = NULL;
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    rc = sd_upscale_load(be, f, out, err);
    sd_st_close(f);
    return rc;
}

sd_status sd_upscale_probe_file(const char *path, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    sd_weights w;
    const esrgan_names *nm = NULL;
    int compact = 0;
    rc = pick_arch(NULL, f, &w, &nm, &compact, err); /* names only: no backend needed */
    sd_st_close(f);
    return rc;
}

/* ---- forward ------------------------------------------------------------------- */

uint64_t sd_upscale_forward_bytes(const sd_upscale *m, int64_t h, int64_t w) {
    const sd_upscale_config *c = &m->cfg;
    if (h < 1 || w < 1 || h > (1 << 20) || w > (1 << 20)) return UINT64_MAX;
    double nf = c->num_feat, px = (double)h * (double)w, peak;
    if (c->arch == SD_UPSCALE_ESRGAN) {
        double s = c->shuffle, lo = px / (s * s), gc = c->num_grow_ch;
        /* RDB: the block input, fea and trunk, the old and the new concat, one output */
        double rdb = (4 * nf + 2 * (nf + 4 * gc) + gc) * lo;
        /* an x2 stage at 4x the pixels: its input, the upsampled copy, the conv out */
        double hi = lo * (double)(1u << (2 * c->n_up));
        double up = 3 * nf * hi + c->out_ch * hi;
        peak = rdb > up ? rdb : up;
    } else {
        double s2 = (double)c->scale * c->scale;
        peak = (2 * nf + 3 * c->out_ch * s2) * px;
    }
    peak *= sizeof(float);
    return peak >= 1.8e19 ? UINT64_MAX : (uint64_t)peak;
}

static sd_bt *cv(sd_bt *x, const conv *c) { return sd_op_conv2d(x, c->w, c->b, 1, 1, 1); }

/* Replace *acc by op(*acc) (frees the old one). */
#define STEP(acc, expr)                                                                        \
    do {                                                                                       \
        sd_bt *_n = (expr);                                                                    \
        sd_bt_free(acc);                                                                       \
        (acc) = _n;                                                                            \
    } while (0)

/* ResidualDenseBlock_5C: x1..x4 = lrelu(conv_k(cat(x, x1.., x_{k-1}))),
 * x5 = conv5(cat(x, x1..x4)); returns x5 * 0.2 + x. */
static sd_bt *rdb(sd_bt *x, const conv *c) {
    sd_bt *cat = sd_op_copy(x);
    for (int k = 0; k < 4; k++) {
        sd_bt *y = cv(cat, &c[k]);
        STEP(y, sd_op_leaky_relu(y, LRELU));
        STEP(cat, sd_op_concat(cat, y, 1));
        sd_bt_free(y);
    }
    sd_bt *x5 = cv(cat, &c[4]);
    sd_bt_free(cat);
    STEP(x5, sd_op_scale(x5, 0.2f));
    STEP(x5, sd_op_add(x5, x));
    return x5;
}

/* RRDB: rdb3(rdb2(rdb1(x))) * 0.2 + x. */
static sd_bt *rrdb_fwd(sd_bt *x, const rrdb *b) {
    sd_bt *h = rdb(x, b->c[0]);
    STEP(h, rdb(h, b->c[1]));
    STEP(h, rdb(h, b->c[2]));
    STEP(h, sd_op_scale(h, 0.2f));
    STEP(h, sd_op_add(h, x));
    return h;
}

/* x: [1, in_nc (after unshuffle), h, w] -> [1, out_nc, h * 2^n_up, ...] */
static sd_bt *esrgan_fwd(sd_upscale *m, sd_bt *x) {
    sd_bt *fea = cv(x, &m->first);
    sd_bt *t = sd_op_copy(fea);
    for (int b = 0; b < m->cfg.num_block; b++) STEP(t, rrdb_fwd(t, &m->blocks[b]));
    STEP(t, cv(t, &m->body_conv));
    STEP(fea, sd_op_add(fea, t));
    sd_bt_free(t);
    for (int k = 0; k < m->cfg.n_up; k++) {
        STEP(fea, sd_op_upsample_nearest2x(fea));
        STEP(fea, cv(fea, &m->up[k]));
        STEP(fea, sd_op_leaky_relu(fea, LRELU));
    }
    STEP(fea, cv(fea, &m->hr));
    STEP(fea, sd_op_leaky_relu(fea, LRELU));
    STEP(fea, cv(fea, &m->last));
    return fea;
}

/* SRVGGNetCompact.forward: body convs with PReLU, pixel shuffle, plus the
 * nearest-upsampled input. */
static sd_bt *compact_fwd(sd_upscale *m, sd_bt *x) {
    int n = m->cfg.num_block;
    sd_bt *h = cv(x, &m->convs[0]);
    STEP(h, sd_op_prelu(h, m->prelu[0]));
    for (int i = 1; i <= n; i++) {
        STEP(h, cv(h, &m->convs[i]));
        STEP(h, sd_op_prelu(h, m->prelu[i]));
    }
    STEP(h, cv(h, &m->convs[n + 1]));
    STEP(h, sd_op_pixel_shuffle(h, m->cfg.scale));
    sd_bt *base = sd_op_upsample_nearest(x, m->cfg.scale);
    STEP(h, sd_op_add(h, base));
    sd_bt_free(base);
    return h;
}

/* Right/bottom padding of [1, C, h, w] to (H, W): torch "reflect" for up to
 * size - 1 pixels, then "replicate" (spandrel's pad_tensor). */
static sd_tensor *pad_rb(const sd_tensor *x, int64_t H, int64_t W) {
    int64_t C = x->shape[1], h = x->shape[2], w = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, 1, C, H, W);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    int64_t rw = W - w < w - 1 ? W - w : w - 1, rh = H - h < h - 1 ? H - h : h - 1;
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < H; y++) {
            /* reflect index over the first h + rh rows, then clamp to the last one */
            int64_t yy = y < h ? y : y < h + rh ? 2 * (h - 1) - y : 2 * (h - 1) - (h + rh - 1);
            for (int64_t xx = 0; xx < W; xx++) {
                int64_t sx = xx < w ? xx : xx < w + rw ? 2 * (w - 1) - xx : 2 * (w - 1) - (w + rw - 1);
                d[(c * H + y) * W + xx] = s[(c * h + yy) * w + sx];
            }
        }
    return o;
}

sd_status sd_upscale_forward(sd_upscale *m, const sd_tensor *x, sd_tensor **y, sd_error *err) {
    *y = NULL;
    const sd_upscale_config *cfg = &m->cfg;
    if (x->dtype != SD_F32 || x->ndim != 4 || x->shape[0] != 1 || x->shape[1] != cfg->in_ch ||
        x->shape[2] < 1 || x->shape[3] < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "upscale model: input must be F32 [1, %d, h, w] (h, w >= 1)",
                            cfg->in_ch);
    int64_t h = x->shape[2], w = x->shape[3];
    /* spandrel's size requirements: ESRGAN at least 2 pixels, unshuffle
     * models multiples of 4; padded right/bottom and cropped afterwards */
    int64_t mult = cfg->shuffle > 1 ? 4 : 1, minimum = cfg->arch == SD_UPSCALE_ESRGAN ? 2 : 0;
    int64_t H = h < minimum ? minimum : h, W = w < minimum ? minimum : w;
    H = (H + mult - 1) / mult * mult;
    W = (W + mult - 1) / mult * mult;
    sd_tensor *in = H != h || W != w ? pad_rb(x, H, W) : sd_tensor_ref((sd_tensor *)x);
    if (!in) return sd_error_set(err, SD_ERR_NOMEM, "out of memory padding the input");
    sd_bt *xb = sd_bt_from_host(m->be, in, SD_F32);
    sd_tensor_unref(in);
    sd_bt *r = NULL;
    if (cfg->arch == SD_UPSCALE_ESRGAN) {
        if (cfg->shuffle > 1) STEP(xb, sd_op_pixel_unshuffle(xb, cfg->shuffle));
        r = esrgan_fwd(m, xb);
    } else {
        r = compact_fwd(m, xb);
    }
    sd_bt_free(xb);
    sd_tensor *o = r ? sd_bt_to_host(r) : NULL;
    sd_bt_free(r);
    if (!o) {
        sd_status rc = sd_backend_take_error(m->be, err);
        sd_backend_clear_error(m->be);
        sd_tensor_unref(o);
        return rc != SD_OK ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    /* crop to h*scale x w*scale and clamp (the descriptor's clamp_) */
    int64_t C = o->shape[1], OH = h * cfg->scale, OW = w * cfg->scale;
    sd_tensor *res = sd_tensor_new4(SD_F32, 4, 1, C, OH, OW);
    if (!res) {
        sd_tensor_unref(o);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const float *s = sd_tensor_f32(o);
    float *d = sd_tensor_f32(res);
    for (int64_t c = 0; c < C; c++)
        for (int64_t yy = 0; yy < OH; yy++)
            for (int64_t xx = 0; xx < OW; xx++) {
                float v = s[(c * o->shape[2] + yy) * o->shape[3] + xx];
                d[(c * OH + yy) * OW + xx] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
    sd_tensor_unref(o);
    *y = res;
    return SD_OK;
}
