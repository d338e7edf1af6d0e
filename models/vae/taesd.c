/* taesd.c - TAESD family encoder/decoder on sd_op_* (layout in taesd.h). */
#include "models/vae/taesd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/vae/vae.h"
#include "models/checkpoint/weights.h"

enum { L_CONV, L_BLOCK, L_CLAMP, L_RELU, L_UP };

#define MAX_LAYERS 24

typedef struct {
    sd_bt *w[3], *b[3];       /* conv.0 / conv.2 / conv.4 */
    sd_bt *p0, *gn_w, *gn_b, *p3; /* GroupNorm side branch, all NULL when absent */
} block;

typedef struct {
    int kind, stride;
    sd_bt *w, *b; /* L_CONV (b may be NULL) */
    block blk;    /* L_BLOCK */
} layer;

typedef struct {
    int n;
    layer l[MAX_LAYERS];
} net;

struct sd_taesd {
    sd_backend *be;
    int has_enc, has_dec, lc;
    net enc, dec;
    sd_taesd_tap_fn tap;
    void *tap_user;
};

/* Layer kinds of taesd.py's Sequentials; encoder convs 2, 6, 10 have stride 2. */
static const int enc_kinds[15] = {L_CONV, L_BLOCK, L_CONV, L_BLOCK, L_BLOCK, L_BLOCK, L_CONV, L_BLOCK,
                                  L_BLOCK, L_BLOCK, L_CONV, L_BLOCK, L_BLOCK, L_BLOCK, L_CONV};
static const int dec_kinds[20] = {L_CLAMP, L_CONV, L_RELU, L_BLOCK, L_BLOCK, L_BLOCK, L_UP,
                                  L_CONV, L_BLOCK, L_BLOCK, L_BLOCK, L_UP, L_CONV, L_BLOCK,
                                  L_BLOCK, L_BLOCK, L_UP, L_CONV, L_BLOCK, L_CONV};

static void net_free(net *n) {
    for (int i = 0; i < n->n; i++) {
        layer *l = &n->l[i];
        sd_bt_free(l->w);
        sd_bt_free(l->b);
        for (int k = 0; k < 3; k++) {
            sd_bt_free(l->blk.w[k]);
            sd_bt_free(l->blk.b[k]);
        }
        sd_bt_free(l->blk.p0);
        sd_bt_free(l->blk.gn_w);
        sd_bt_free(l->blk.gn_b);
        sd_bt_free(l->blk.p3);
    }
    memset(n, 0, sizeof *n);
}

void sd_taesd_free(sd_taesd *t) {
    if (!t) return;
    net_free(&t->enc);
    net_free(&t->dec);
    free(t);
}

/* A conv weight [O, I, k, k] with the expected in-channels (I < 0: any). */
static sd_bt *get_conv(const sd_weights *w, int64_t in_ch, int64_t *out_ch, sd_error *err,
                       const char *fmt, int idx, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, fmt, idx, suffix);
    int64_t s[SD_MAX_DIMS];
    int nd = sd_weights_shape(w, name, s);
    if (nd != 4 || (in_ch >= 0 && s[1] != in_ch)) {
        char key[512];
        sd_weights_key(w, name, key, sizeof key);
        if (nd < 0)
            sd_error_set(err, SD_ERR_NOT_FOUND, "%s: missing tensor '%s'", sd_st_path(w->file), key);
        else
            sd_error_set(err, SD_ERR_FORMAT,
                         "%s: tensor '%s' is not a conv weight with %lld input channels",
                         sd_st_path(w->file), key, (long long)in_ch);
        return NULL;
    }
    if (out_ch) *out_ch = s[0];
    return sd_weights_get(w, name, 4, s, err);
}

static sd_bt *get_vec(const sd_weights *w, int64_t n, sd_error *err, const char *fmt, int idx,
                      const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, fmt, idx, suffix);
    int64_t s[1] = {n};
    return sd_weights_get(w, name, 1, s, err);
}

static int has(const sd_weights *w, const char *fmt, int idx, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, fmt, idx, suffix);
    return sd_weights_has(w, name);
}

/* Loads one Sequential. fmt turns (index, suffix) into a key; index_shift
 * maps taesd.py indices to the file's (diffusers decoder: -1). *ch is the
 * channel count flowing in and out. */
static sd_status net_load(net *n, const int *kinds, int count, const sd_weights *w,
                          const char *fmt, int index_shift, int64_t *ch, int enc, sd_error *err) {
    n->n = count;
    for (int i = 0; i < count; i++) {
        layer *l = &n->l[i];
        int k = i + index_shift;
        l->kind = kinds[i];
        l->stride = enc && (i == 2 || i == 6 || i == 10) ? 2 : 1;
        if (l->kind == L_CONV) {
            int64_t o;
            l->w = get_conv(w, *ch, &o, err, fmt, k, "weight");
            if (!l->w) return err ? err->code : SD_ERR_FORMAT;
            if (has(w, fmt, k, "bias")) {
                l->b = get_vec(w, o, err, fmt, k, "bias");
                if (!l->b) return err ? err->code : SD_ERR_FORMAT;
            }
            *ch = o;
        } else if (l->kind == L_BLOCK) {
            block *b = &l->blk;
            static const char *cw[3] = {"conv.0.weight", "conv.2.weight", "conv.4.weight"};
            static const char *cb[3] = {"conv.0.bias", "conv.2.bias", "conv.4.bias"};
            int64_t c = *ch;
            if (has(w, fmt, k, "pool.0.weight")) {
                int64_t mid;
                b->p0 = get_conv(w, c, &mid, err, fmt, k, "pool.0.weight");
                if (!b->p0) return err ? err->code : SD_ERR_FORMAT;
                b->gn_w = get_vec(w, mid, err, fmt, k, "pool.1.weight");
                if (b->gn_w) b->gn_b = get_vec(w, mid, err, fmt, k, "pool.1.bias");
                int64_t back = 0;
                if (b->gn_b) b->p3 = get_conv(w, mid, &back, err, fmt, k, "pool.3.weight");
                if (!b->p3) return err ? err->code : SD_ERR_FORMAT;
                if (back != c)
                    return sd_error_set(err, SD_ERR_FORMAT, "%s: TAESD block %d: pool.3 has %lld outputs, want %lld",
                                        sd_st_path(w->file), k, (long long)back, (long long)c);
            }
            int64_t cin = c;
            for (int j = 0; j < 3; j++) {
                int64_t o;
                b->w[j] = get_conv(w, cin, &o, err, fmt, k, cw[j]);
                if (!b->w[j]) return err ? err->code : SD_ERR_FORMAT;
                b->b[j] = get_vec(w, o, err, fmt, k, cb[j]);
                if (!b->b[j]) return err ? err->code : SD_ERR_FORMAT;
                cin = o;
            }
            if (cin != c) /* taesd.py's 1x1 skip for in != out is unused by every released model */
                return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                    "%s: TAESD block %d changes channels (%lld -> %lld)",
                                    sd_st_path(w->file), k, (long long)c, (long long)cin);
        }
    }
    return SD_OK;
}

sd_status sd_taesd_load(sd_backend *be, sd_st_file *enc, const char *enc_prefix, sd_st_file *dec,
                        const char *dec_prefix, sd_taesd **out, sd_error *err) {
    *out = NULL;
    if (!enc && !dec) return sd_error_set(err, SD_ERR_INVALID, "TAESD: no encoder or decoder file");
    sd_taesd *t = calloc(1, sizeof *t);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading TAESD");
    t->be = be;
    sd_status rc = SD_OK;
    if (enc) {
        sd_weights w;
        sd_weights_init(&w, be, enc, enc_prefix);
        const char *fmt = "%d.%s";
        if (!sd_weights_has(&w, "0.weight") && sd_weights_has(&w, "encoder.layers.0.weight"))
            fmt = "encoder.layers.%d.%s";
        int64_t ch = 3;
        rc = net_load(&t->enc, enc_kinds, 15, &w, fmt, 0, &ch, 1, err);
        if (rc == SD_OK) {
            t->has_enc = 1;
            t->lc = (int)ch;
        }
    }
    if (rc == SD_OK && dec) {
        sd_weights w;
        sd_weights_init(&w, be, dec, dec_prefix);
        const char *fmt = "%d.%s";
        int shift = 0;
        if (!sd_weights_has(&w, "1.weight") && sd_weights_has(&w, "decoder.layers.0.weight")) {
            fmt = "decoder.layers.%d.%s";
            shift = -1;
        }
        int64_t s[SD_MAX_DIMS];
        char name[64];
        snprintf(name, sizeof name, fmt, 1 + shift, "weight");
        if (sd_weights_shape(&w, name, s) != 4) {
            char key[512];
            rc = sd_error_set(err, SD_ERR_NOT_FOUND, "%s: missing TAESD decoder conv '%s'",
                              sd_st_path(dec), sd_weights_key(&w, name, key, sizeof key));
        } else if (t->has_enc && s[1] != t->lc) {
            rc = sd_error_set(err, SD_ERR_FORMAT,
                              "TAESD: encoder makes %d latent channels but the decoder takes %lld",
                              t->lc, (long long)s[1]);
        } else {
            int64_t ch = s[1];
            rc = net_load(&t->dec, dec_kinds, 20, &w, fmt, shift, &ch, 0, err);
            if (rc == SD_OK && ch != 3)
                rc = sd_error_set(err, SD_ERR_FORMAT, "%s: TAESD decoder outputs %lld channels, want 3",
                                  sd_st_path(dec), (long long)ch);
            if (rc == SD_OK) {
                t->has_dec = 1;
                t->lc = (int)s[1];
            }
        }
    }
    if (rc != SD_OK) {
        sd_taesd_free(t);
        return rc;
    }
    *out = t;
    return SD_OK;
}

int sd_taesd_latent_channels(const sd_taesd *t) { return t ? t->lc : 0; }
int sd_taesd_has_encoder(const sd_taesd *t) { return t && t->has_enc; }
int sd_taesd_has_decoder(const sd_taesd *t) { return t && t->has_dec; }

void sd_taesd_set_tap(sd_taesd *t, sd_taesd_tap_fn fn, void *user) {
    t->tap = fn;
    t->tap_user = user;
}

/* ---- forward ------------------------------------------------------------------- */

/* Replace *x by f(*x), freeing the old tensor (NULL propagates). */
#define STEP(x, expr) do { sd_bt *_n = (expr); sd_bt_free(x); (x) = _n; } while (0)

/* x: [N, C, H, W] -> [N, C, H, W]; takes ownership of x. */
static sd_bt *block_forward(const block *b, sd_bt *x) {
    if (b->p0) { /* x = x + pool3(relu(gn(pool0(x)))) */
        sd_bt *p = sd_op_conv2d(x, b->p0, NULL, 1, 0, 0);
        STEP(p, sd_op_group_norm(p, 4, b->gn_w, b->gn_b, 1e-5f, 0));
        STEP(p, sd_op_relu(p));
        STEP(p, sd_op_conv2d(p, b->p3, NULL, 1, 0, 0));
        STEP(x, sd_op_add(x, p));
        sd_bt_free(p);
    }
    sd_bt *h = sd_op_conv2d(x, b->w[0], b->b[0], 1, 1, 1);
    STEP(h, sd_op_relu(h));
    STEP(h, sd_op_conv2d(h, b->w[1], b->b[1], 1, 1, 1));
    STEP(h, sd_op_relu(h));
    STEP(h, sd_op_conv2d(h, b->w[2], b->b[2], 1, 1, 1));
    STEP(h, sd_op_add(h, x));
    sd_bt_free(x);
    STEP(h, sd_op_relu(h));
    return h;
}

/* Runs a Sequential; takes ownership of x. */
static sd_bt *net_forward(const sd_taesd *t, const net *n, sd_bt *x, const char *tag) {
    for (int i = 0; i < n->n && x; i++) {
        const layer *l = &n->l[i];
        switch (l->kind) {
        case L_CONV: STEP(x, sd_op_conv2d(x, l->w, l->b, l->stride, 1, 1)); break;
        case L_BLOCK: x = block_forward(&l->blk, x); break;
        case L_RELU: STEP(x, sd_op_relu(x)); break;
        case L_UP: STEP(x, sd_op_upsample_nearest2x(x)); break;
        case L_CLAMP: /* 3 * tanh(x / 3) */
            STEP(x, sd_op_scale(x, 1.0f / 3.0f));
            STEP(x, sd_op_tanh(x));
            STEP(x, sd_op_scale(x, 3.0f));
            break;
        }
        if (t->tap && x) {
            char name[32];
            snprintf(name, sizeof name, "%s.tap.%d", tag, i);
            t->tap(t->tap_user, name, x);
        }
    }
    return x;
}

static sd_status run(sd_taesd *t, const net *n, const char *tag, const sd_tensor *in,
                     sd_tensor **out, sd_error *err) {
    *out = NULL;
    sd_bt *x = sd_bt_from_host(t->be, (sd_tensor *)in, SD_F32);
    x = net_forward(t, n, x, tag);
    if (x) *out = sd_bt_to_host(x);
    sd_bt_free(x);
    sd_status rc = sd_backend_take_error(t->be, err);
    sd_backend_clear_error(t->be);
    if (rc == SD_OK && !*out) rc = sd_error_set(err, SD_ERR_NOMEM, "TAESD: out of memory");
    if (rc != SD_OK) {
        sd_error_prefix(err, "TAESD %s", tag);
        sd_tensor_unref(*out);
        *out = NULL;
    }
    return rc;
}

sd_status sd_taesd_encode(sd_taesd *t, const sd_tensor *image, sd_tensor **latent, sd_error *err) {
    *latent = NULL;
    if (!t->has_enc) return sd_error_set(err, SD_ERR_UNSUPPORTED, "TAESD: no encoder loaded");
    if (image->dtype != SD_F32 || image->ndim != 4 || image->shape[1] != 3 ||
        image->shape[2] % 8 || image->shape[3] % 8) {
        char b[96];
        return sd_error_set(err, SD_ERR_INVALID,
                            "TAESD encode: image %s must be F32 [N, 3, H, W] with H, W multiples of 8",
                            sd_tensor_shape_str(image, b, sizeof b));
    }
    return run(t, &t->enc, "enc", image, latent, err);
}

sd_status sd_taesd_decode(sd_taesd *t, const sd_tensor *latent, sd_tensor **image, sd_error *err) {
    *image = NULL;
    if (!t->has_dec) return sd_error_set(err, SD_ERR_UNSUPPORTED, "TAESD: no decoder loaded");
    if (latent->dtype != SD_F32 || latent->ndim != 4 || latent->shape[1] != t->lc) {
        char b[96];
        return sd_error_set(err, SD_ERR_INVALID, "TAESD decode: latent %s must be F32 [N, %d, h, w]",
                            sd_tensor_shape_str(latent, b, sizeof b), t->lc);
    }
    return run(t, &t->dec, "dec", latent, image, err);
}

sd_status sd_taesd_decode_image(sd_taesd *t, const sd_tensor *latent, float scale, float shift,
                                sd_tensor **image, sd_error *err) {
    *image = NULL;
    if (latent->dtype != SD_F32 || latent->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "TAESD decode: latent must be F32 NCHW");
    sd_tensor *z = sd_tensor_clone(latent);
    if (!z) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    float *p = z->data;
    for (int64_t i = 0; i < sd_tensor_numel(z); i++) p[i] = (p[i] - shift) * scale;
    sd_tensor *raw = NULL;
    sd_status rc = sd_taesd_decode(t, z, &raw, err);
    sd_tensor_unref(z);
    if (rc != SD_OK) return rc;
    /* ComfyUI maps the [0,1] output to [-1,1] and back: only the clamp remains */
    *image = sd_vae_nchw_to_pixels(raw, 1.0f, 0.0f, err);
    sd_tensor_unref(raw);
    return *image ? SD_OK : (err ? err->code : SD_ERR_NOMEM);
}

sd_status sd_taesd_encode_image(sd_taesd *t, const sd_tensor *image, float scale, float shift,
                                sd_tensor **latent, sd_error *err) {
    *latent = NULL;
    sd_tensor *x = sd_vae_pixels_to_nchw(image, 1.0f, 0.0f, err);
    if (!x) return err ? err->code : SD_ERR_INVALID;
    sd_status rc = sd_taesd_encode(t, x, latent, err);
    sd_tensor_unref(x);
    if (rc != SD_OK) return rc;
    float *p = (*latent)->data;
    for (int64_t i = 0; i < sd_tensor_numel(*latent); i++) p[i] = p[i] / scale + shift;
    return SD_OK;
}
