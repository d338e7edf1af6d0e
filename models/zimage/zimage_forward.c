/* zimage_forward.c - one NextDiT forward over kernels/backend.h, in the
 * order of comfy/ldm/lumina/model.py (Z-Image settings): timestep and
 * caption embedders, patchify + x_embedder, pad tokens to a multiple of 32
 * on both streams, context refiner (no modulation) on the caption, noise
 * refiner (modulated) on the image, the main layers on [caption, image],
 * final adaLN layer, unpatchify, sign flip.
 *
 * Every op returns NULL once the backend's sticky error is set, so the code
 * chains ops and checks the error once per block; every intermediate is
 * freed as soon as its last reader has run. */
#include "zimage_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/unet/unet.h" /* sd_unet_timestep_embedding: the same sinusoids */

#define LN_EPS 1e-6f
/* q_norm / k_norm are RMSNorms built without an eps: ComfyUI's own RMSNorm
 * (the reference's torch has no torch.nn.RMSNorm) defaults to 1e-6. */
#define QK_EPS 1e-6f

typedef struct zctx {
    sd_zimage *m;
    int64_t N, dim;
    sd_bt *adaln; /* t_embedder output [N, adaln_dim] */
} zctx;

static void tap(const zctx *c, const char *name, const sd_bt *t) {
    if (c->m->tap && t) c->m->tap(c->m->tap_user, name, t);
}

static sd_bt *linear(sd_bt *x, const zi_lin *l) { return sd_op_linear(x, l->w, l->b); }

/* RMSNorm(x) with gamma; x kept. */
static sd_bt *rms(sd_bt *x, sd_bt *gamma, float eps) { return sd_op_rms_norm(x, gamma, eps); }

/* Chunk k of mod [N, 4 dim] as [N, 1, dim]. */
static sd_bt *chunk(const zctx *c, sd_bt *mod, int k) {
    int64_t shape[3] = {c->N, 1, c->dim};
    sd_bt *s = sd_op_slice(mod, 1, k * c->dim, (k + 1) * c->dim);
    sd_bt *v = s ? sd_bt_view(s, 3, shape) : NULL;
    sd_bt_free(s);
    return v;
}

/* Columns [c0, c0 + heads * D) of qkv as [N, L, heads*D], RMS-normed per
 * head with `scale` [D] when given. */
static sd_bt *head_part(const zctx *c, sd_bt *qkv, int64_t c0, int heads, sd_bt *scale) {
    const sd_zimage_config *cfg = &c->m->cfg;
    int64_t w = (int64_t)heads * cfg->head_dim;
    sd_bt *s = sd_op_slice(qkv, 2, c0, c0 + w);
    if (!scale || !s) return s;
    int64_t L = s->shape[1];
    int64_t s4[4] = {c->N, L, heads, cfg->head_dim}, s3[3] = {c->N, L, w};
    sd_bt *v4 = sd_bt_view(s, 4, s4);
    sd_bt_free(s);
    sd_bt *n = v4 ? sd_op_rms_norm(v4, scale, QK_EPS) : NULL;
    sd_bt_free(v4);
    sd_bt *r = n ? sd_bt_view(n, 3, s3) : NULL;
    sd_bt_free(n);
    return r;
}

/* JointAttention on xin [N, L, dim] with the rotation table rot [L, D/2, 2]. */
static sd_bt *attention(const zctx *c, const zi_block *b, sd_bt *xin, sd_bt *rot) {
    const sd_zimage_config *cfg = &c->m->cfg;
    int H = cfg->n_heads, Hkv = cfg->n_kv_heads;
    int64_t D = cfg->head_dim;
    sd_bt *qkv = linear(xin, &b->qkv);
    if (!qkv) return NULL;
    sd_bt *q = head_part(c, qkv, 0, H, b->q_norm);
    sd_bt *k = head_part(c, qkv, H * D, Hkv, b->k_norm);
    sd_bt *v = head_part(c, qkv, (H + Hkv) * D, Hkv, NULL);
    sd_bt_free(qkv);
    sd_bt *qr = q ? sd_op_rope(q, rot, H, 1) : NULL;
    sd_bt_free(q);
    sd_bt *kr = k ? sd_op_rope(k, rot, Hkv, 1) : NULL;
    sd_bt_free(k);
    sd_attn_opts o = {.kv_heads = Hkv};
    sd_bt *a = qr && kr && v ? sd_op_attention_ex(qr, kr, v, H, &o) : NULL;
    sd_bt_free(qr);
    sd_bt_free(kr);
    sd_bt_free(v);
    sd_bt *r = a ? linear(a, &b->out) : NULL;
    sd_bt_free(a);
    return r;
}

/* FeedForward: w2(silu(w1 x) * w3 x). */
static sd_bt *feed_forward(const zi_block *b, sd_bt *x) {
    sd_bt *h1 = linear(x, &b->w1);
    sd_bt *s = h1 ? sd_op_silu(h1) : NULL;
    sd_bt_free(h1);
    sd_bt *h3 = linear(x, &b->w3);
    sd_bt *g = s && h3 ? sd_op_mul(s, h3) : NULL;
    sd_bt_free(s);
    sd_bt_free(h3);
    sd_bt *r = g ? linear(g, &b->w2) : NULL;
    sd_bt_free(g);
    return r;
}

/* x (freed) + gate * norm2(y) (y freed); gate NULL = 1. */
static sd_bt *residual(sd_bt *x, sd_bt *y, sd_bt *norm2, float eps, sd_bt *gate) {
    sd_bt *n = y ? rms(y, norm2, eps) : NULL;
    sd_bt_free(y);
    if (n && gate) {
        sd_bt *g = sd_op_mul(n, gate);
        sd_bt_free(n);
        n = g;
    }
    sd_bt *r = n ? sd_op_add(x, n) : NULL;
    sd_bt_free(n);
    sd_bt_free(x);
    return r;
}

/* norm1(x) * (1 + scale) when scale is given (modulate). */
static sd_bt *norm_mod(const zctx *c, sd_bt *x, sd_bt *norm1, float eps, sd_bt *scale) {
    sd_bt *n = rms(x, norm1, eps);
    if (!scale || !n) return n;
    sd_bt *s1 = sd_op_add(scale, c->m->one);
    sd_bt *r = s1 ? sd_op_mul(n, s1) : NULL;
    sd_bt_free(s1);
    sd_bt_free(n);
    return r;
}

/* JointTransformerBlock on *x (replaced); modulated when b->ada is set. */
static void block(const zctx *c, const zi_block *b, sd_bt **x, sd_bt *rot) {
    float eps = c->m->cfg.norm_eps;
    sd_bt *sc_msa = NULL, *g_msa = NULL, *sc_mlp = NULL, *g_mlp = NULL;
    if (b->ada.w) {
        sd_bt *mod = linear(c->adaln, &b->ada);
        if (!mod) {
            sd_bt_free(*x);
            *x = NULL;
            return;
        }
        sd_bt *gm = chunk(c, mod, 1), *gp = chunk(c, mod, 3);
        sc_msa = chunk(c, mod, 0);
        sc_mlp = chunk(c, mod, 2);
        sd_bt_free(mod);
        g_msa = gm ? sd_op_tanh(gm) : NULL;
        g_mlp = gp ? sd_op_tanh(gp) : NULL;
        sd_bt_free(gm);
        sd_bt_free(gp);
    }
    sd_bt *h = norm_mod(c, *x, b->attn_norm1, eps, sc_msa);
    sd_bt *a = h ? attention(c, b, h, rot) : NULL;
    sd_bt_free(h);
    *x = residual(*x, a, b->attn_norm2, eps, g_msa);
    h = *x ? norm_mod(c, *x, b->ffn_norm1, eps, sc_mlp) : NULL;
    sd_bt *f = h ? feed_forward(b, h) : NULL;
    sd_bt_free(h);
    *x = residual(*x, f, b->ffn_norm2, eps, g_mlp);
    sd_bt_free(sc_msa), sd_bt_free(g_msa), sd_bt_free(sc_mlp), sd_bt_free(g_mlp);
}

/* t_embedder((1 - sigma) * time_scale): sinusoids (256) -> Linear -> SiLU
 * -> Linear, every step in float32 as torch. */
static sd_bt *embed_time(const zctx *c, const float *sigma) {
    const sd_zimage_config *cfg = &c->m->cfg;
    int64_t N = c->N;
    sd_tensor *h = sd_tensor_new4(SD_F32, 2, N, 256, 0, 0);
    float *t = malloc((size_t)N * sizeof *t);
    sd_bt *r = NULL;
    if (h && t) {
        for (int64_t i = 0; i < N; i++) {
            float u = 1.0f - sigma[i];
            t[i] = u * (float)cfg->time_scale;
        }
        sd_unet_timestep_embedding(t, (int)N, 256, sd_tensor_f32(h));
        sd_bt *bh = sd_bt_from_host(c->m->be, h, SD_F32);
        sd_bt *a = bh ? linear(bh, &c->m->t_mlp0) : NULL;
        sd_bt_free(bh);
        sd_bt *s = a ? sd_op_silu(a) : NULL;
        sd_bt_free(a);
        r = s ? linear(s, &c->m->t_mlp2) : NULL;
        sd_bt_free(s);
    }
    sd_tensor_unref(h);
    free(t);
    return r;
}

/* x [N, L, dim] (freed) followed by `extra` copies of the pad token
 * [1, dim]: zeros plus the token, broadcast (exact). */
static sd_bt *append_pad(const zctx *c, sd_bt *x, sd_bt *pad, int64_t extra) {
    if (!x || extra == 0) return x;
    int64_t s3[3] = {1, 1, c->dim};
    sd_bt *z = sd_bt_new4(c->m->be, SD_F32, 3, c->N, extra, c->dim, 0);
    sd_bt *pv = sd_bt_view(pad, 3, s3);
    sd_bt *p = z && pv ? sd_op_add(z, pv) : NULL;
    sd_bt_free(z);
    sd_bt_free(pv);
    sd_bt *r = p ? sd_op_concat(x, p, 1) : NULL;
    sd_bt_free(p);
    sd_bt_free(x);
    return r;
}

/* ---- patches ------------------------------------------------------------------------ */

/* x [B, C, H, W] -> [B, h*w, 4C] after wrap-around padding of H, W to even
 * sizes (pad_to_patch_size, "circular"), in NextDiT's order
 * x.view(B, C, h, 2, w, 2).permute(0, 2, 4, 3, 5, 1): (ph, pw, c) per token. */
static sd_bt *patchify(sd_bt *x) {
    int64_t B = x->shape[0], C = x->shape[1];
    sd_bt *p = sd_op_copy(x);
    for (int d = 2; d < 4 && p; d++) {
        if (p->shape[d] % 2 == 0) continue;
        sd_bt *first = sd_op_slice(p, d, 0, 1);
        sd_bt *q = first ? sd_op_concat(p, first, d) : NULL;
        sd_bt_free(first);
        sd_bt_free(p);
        p = q;
    }
    if (!p) return NULL;
    int64_t Hp = p->shape[2], Wp = p->shape[3], h = Hp / 2, w = Wp / 2;
    int64_t s1[5] = {B, C, h, 2, Wp}, s2[5] = {B * h, 2, w, 2, C}, s3[3] = {B, h * w, 4 * C};
    static const int perm1[5] = {0, 2, 3, 4, 1}, perm2[5] = {0, 2, 1, 3, 4};
    sd_bt *v1 = sd_bt_view(p, 5, s1);
    sd_bt_free(p);
    sd_bt *t1 = v1 ? sd_op_permute(v1, perm1) : NULL; /* [B, h, 2, Wp, C] */
    sd_bt_free(v1);
    sd_bt *v2 = t1 ? sd_bt_view(t1, 5, s2) : NULL;
    sd_bt_free(t1);
    sd_bt *t2 = v2 ? sd_op_permute(v2, perm2) : NULL; /* [B*h, w, 2, 2, C] */
    sd_bt_free(v2);
    sd_bt *r = t2 ? sd_bt_view(t2, 3, s3) : NULL;
    sd_bt_free(t2);
    return r;
}

/* The inverse for the image tokens o [B, h*w, 4C], cropped to H x W. */
static sd_bt *unpatchify(sd_bt *o, int64_t C, int64_t h, int64_t w, int64_t H, int64_t W) {
    int64_t B = o->shape[0], Hp = 2 * h, Wp = 2 * w;
    int64_t s1[5] = {B * h, w, 2, 2, C}, s2[5] = {B, h, 2, Wp, C}, s3[4] = {B, C, Hp, Wp};
    static const int perm1[5] = {0, 2, 1, 3, 4}, perm2[5] = {0, 4, 1, 2, 3};
    sd_bt *v1 = sd_bt_view(o, 5, s1);
    sd_bt *t1 = v1 ? sd_op_permute(v1, perm1) : NULL; /* [B*h, 2, w, 2, C] */
    sd_bt_free(v1);
    sd_bt *v2 = t1 ? sd_bt_view(t1, 5, s2) : NULL;
    sd_bt_free(t1);
    sd_bt *t2 = v2 ? sd_op_permute(v2, perm2) : NULL; /* [B, C, h, 2, Wp] */
    sd_bt_free(v2);
    sd_bt *r = t2 ? sd_bt_view(t2, 4, s3) : NULL;
    sd_bt_free(t2);
    if (r && Hp != H) {
        sd_bt *c = sd_op_slice(r, 2, 0, H);
        sd_bt_free(r);
        r = c;
    }
    if (r && Wp != W) {
        sd_bt *c = sd_op_slice(r, 3, 0, W);
        sd_bt_free(r);
        r = c;
    }
    return r;
}

/* ---- the forward ----------------------------------------------------------------------- */

static sd_status check_inputs(const sd_zimage *m, sd_bt *x, sd_bt *context, const float *timesteps,
                              sd_error *err) {
    const sd_zimage_config *c = &m->cfg;
    if (!x || !context || !timesteps)
        return sd_error_set(err, SD_ERR_INVALID, "Z-Image forward: x, context and timesteps are required");
    if (x->ndim != 4 || x->shape[0] < 1 || x->shape[1] != c->in_channels || x->shape[2] < 1 ||
        x->shape[3] < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "Z-Image forward: x must be [N, %d, H, W], got %d dims with %lld channels",
                            c->in_channels, x->ndim, x->ndim > 1 ? (long long)x->shape[1] : 0LL);
    if (context->ndim != 3 || context->shape[0] != x->shape[0] || context->shape[1] < 1 ||
        context->shape[2] != c->cap_feat_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "Z-Image forward: context must be [%lld, L >= 1, %d] (Qwen3 hidden states "
                            "of this model's width), got %d dims, last %lld",
                            (long long)x->shape[0], c->cap_feat_dim, context->ndim,
                            context->ndim ? (long long)context->shape[context->ndim - 1] : 0LL);
    return SD_OK;
}

/* A host table [rows of `from`, D/2, 2] uploaded: rows [r0, r1). */
static sd_bt *rot_rows(sd_backend *be, const float *tab, int64_t r0, int64_t r1, int half) {
    int64_t shape[3] = {r1 - r0, half, 2};
    sd_tensor *t = sd_tensor_new(SD_F32, 3, shape);
    if (!t) return NULL;
    memcpy(sd_tensor_f32(t), tab + r0 * half * 2, (size_t)((r1 - r0) * half * 2) * sizeof(float));
    sd_bt *b = sd_bt_from_host(be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

sd_status sd_zimage_forward(sd_zimage *m, sd_bt *x, const float *timesteps, sd_bt *context,
                            sd_bt **out, sd_error *err) {
    *out = NULL;
    sd_status rc = check_inputs(m, x, context, timesteps, err);
    if (rc) return rc;
    const sd_zimage_config *cfg = &m->cfg;
    sd_backend *be = m->be;
    const int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3], C = cfg->in_channels;
    const int64_t h = (H + 1) / 2, w = (W + 1) / 2, Li = h * w, L = context->shape[1];
    const int64_t mult = cfg->pad_tokens_multiple;
    const int64_t cap_pad = mult ? (mult - L % mult) % mult : 0;
    const int64_t img_pad = mult ? (mult - Li % mult) % mult : 0;
    const int64_t Lc = L + cap_pad, Lx = Li + img_pad, Lall = Lc + Lx;
    const int half = cfg->head_dim / 2;
    zctx c = {m, N, cfg->dim, NULL};
    sd_bt *cap = NULL, *img = NULL, *res = NULL, *rot_cap = NULL, *rot_img = NULL, *rot_all = NULL;
    float *tab = malloc((size_t)(Lall * half * 2) * sizeof *tab);
    if (!tab) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (RoPE table for %lld tokens)", (long long)Lall);
    sd_zimage_rope_table(cfg, Lc, h, w, img_pad, tab);
    rot_cap = rot_rows(be, tab, 0, Lc, half);
    rot_img = rot_rows(be, tab, Lc, Lall, half);
    rot_all = rot_rows(be, tab, 0, Lall, half);
    free(tab);

    c.adaln = embed_time(&c, timesteps);
    tap(&c, "t_embedder", c.adaln);
    {
        sd_bt *n = rms(context, m->cap_norm, cfg->norm_eps);
        cap = n ? linear(n, &m->cap_lin) : NULL;
        sd_bt_free(n);
    }
    tap(&c, "cap_embedder", cap);
    {
        sd_bt *p = patchify(x);
        img = p ? linear(p, &m->x_embedder) : NULL;
        sd_bt_free(p);
    }
    tap(&c, "x_embedder", img);
    cap = append_pad(&c, cap, m->cap_pad, cap_pad);
    img = append_pad(&c, img, m->x_pad, img_pad);
    if ((rc = sd_backend_take_error(be, err))) goto done;
    if (!rot_cap || !rot_img || !rot_all || !c.adaln || !cap || !img) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory starting the Z-Image forward");
        goto done;
    }

    char name[48];
    for (int i = 0; i < cfg->n_refiner_layers; i++) {
        block(&c, &m->context_refiner[i], &cap, rot_cap);
        if ((rc = sd_backend_take_error(be, err))) goto done;
        snprintf(name, sizeof name, "context_refiner.%d", i);
        tap(&c, name, cap);
    }
    for (int i = 0; i < cfg->n_refiner_layers; i++) {
        block(&c, &m->noise_refiner[i], &img, rot_img);
        if ((rc = sd_backend_take_error(be, err))) goto done;
        snprintf(name, sizeof name, "noise_refiner.%d", i);
        tap(&c, name, img);
    }
    sd_bt *joint = sd_op_concat(cap, img, 1);
    sd_bt_free(cap);
    sd_bt_free(img);
    cap = img = NULL;
    for (int i = 0; i < cfg->n_layers && joint; i++) {
        block(&c, &m->layers[i], &joint, rot_all);
        if ((rc = sd_backend_take_error(be, err))) {
            sd_bt_free(joint);
            goto done;
        }
        snprintf(name, sizeof name, "layers.%d", i);
        tap(&c, name, joint);
        if (i == cfg->n_layers - 1) tap(&c, "layers.last", joint);
    }

    /* final layer: LayerNorm (no affine) * (1 + Linear(SiLU(t))), Linear */
    {
        sd_bt *st = sd_op_silu(c.adaln);
        sd_bt *scale = st ? linear(st, &m->final_ada) : NULL;
        sd_bt_free(st);
        int64_t s3[3] = {N, 1, cfg->dim};
        sd_bt *sv = scale ? sd_bt_view(scale, 3, s3) : NULL;
        sd_bt_free(scale);
        sd_bt *s1 = sv ? sd_op_add(sv, m->one) : NULL;
        sd_bt_free(sv);
        sd_bt *n = joint ? sd_op_layer_norm(joint, NULL, NULL, LN_EPS) : NULL;
        sd_bt_free(joint);
        sd_bt *xm = n && s1 ? sd_op_mul(n, s1) : NULL;
        sd_bt_free(n);
        sd_bt_free(s1);
        sd_bt *o = xm ? linear(xm, &m->final_linear) : NULL;
        sd_bt_free(xm);
        tap(&c, "final_layer", o);
        sd_bt *ot = o ? sd_op_slice(o, 1, Lc, Lc + Li) : NULL;
        sd_bt_free(o);
        sd_bt *u = ot ? unpatchify(ot, C, h, w, H, W) : NULL;
        sd_bt_free(ot);
        res = u ? sd_op_scale(u, -1.0f) : NULL;
        sd_bt_free(u);
    }
    if ((rc = sd_backend_take_error(be, err))) goto done;
    if (!res) {
        rc = sd_error_set(err, SD_ERR_INTERNAL, "Z-Image forward produced no output");
        goto done;
    }
    *out = res;
    res = NULL;
done:
    if (rc) sd_backend_clear_error(be);
    sd_bt_free(res);
    sd_bt_free(cap);
    sd_bt_free(img);
    sd_bt_free(c.adaln);
    sd_bt_free(rot_cap);
    sd_bt_free(rot_img);
    sd_bt_free(rot_all);
    return rc;
}
