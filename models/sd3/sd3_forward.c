/* sd3_forward.c - one MMDiT forward over kernels/backend.h, in the order of
 * comfy/ldm/modules/diffusionmodules/mmdit.py: patch embedding plus the
 * cropped position embedding, timestep (+ pooled) embedding, joint blocks
 * (attention over [context, x]; MMDiT-X blocks add a self-attention on x
 * alone), the final adaLN layer, unpatchify.
 *
 * Every op returns NULL once the backend's sticky error is set, so the code
 * chains ops and checks the error once per block; each intermediate is
 * freed after its last reader. */
#include "sd3_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/unet/unet.h" /* sd_unet_timestep_embedding: the same sinusoids */

#define LN_EPS 1e-6f
#define QK_EPS 1e-6f

typedef struct fctx {
    sd_sd3 *m;
    int64_t N, hid;
    sd_bt *silu_c; /* SiLU(c) [N, hid]: every adaLN's input */
} fctx;

static void tap(const fctx *c, const char *name, const sd_bt *t) {
    if (c->m->tap && t) c->m->tap(c->m->tap_user, name, t);
}

static sd_bt *linear(sd_bt *x, const sd3_lin *l) { return sd_op_linear(x, l->w, l->b); }

/* x (freed) -> x + y * gate (y freed). */
static sd_bt *add_gated(sd_bt *x, sd_bt *y, sd_bt *gate) {
    sd_bt *g = sd_op_mul(y, gate);
    sd_bt_free(y);
    sd_bt *r = sd_op_add(x, g);
    sd_bt_free(g);
    sd_bt_free(x);
    return r;
}

/* (shift, 1 + scale, gate), each [N, 1, hid], from chunks k0.. of an adaLN
 * output [N, k * hid]; n = 2 leaves out the gate. */
typedef struct mod3 {
    sd_bt *shift, *scale1p, *gate;
} mod3;

static mod3 chunks(const fctx *c, sd_bt *mod, int k0, int n) {
    mod3 r = {NULL, NULL, NULL};
    int64_t shape[3] = {c->N, 1, c->hid};
    sd_bt *s[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++) {
        sd_bt *sl = sd_op_slice(mod, 1, (k0 + i) * c->hid, (k0 + i + 1) * c->hid);
        s[i] = sd_bt_view(sl, 3, shape);
        sd_bt_free(sl);
    }
    r.shift = s[0];
    r.scale1p = sd_op_add(s[1], c->m->one);
    sd_bt_free(s[1]);
    r.gate = s[2];
    return r;
}

static void mod3_free(mod3 *m) {
    sd_bt_free(m->shift);
    sd_bt_free(m->scale1p);
    sd_bt_free(m->gate);
    memset(m, 0, sizeof *m);
}

/* modulate(x, shift, scale) = x * (1 + scale) + shift, on an already
 * normalised x (borrowed). */
static sd_bt *modulate(sd_bt *xn, const mod3 *m) {
    sd_bt *t = sd_op_mul(xn, m->scale1p);
    sd_bt *r = sd_op_add(t, m->shift);
    sd_bt_free(t);
    return r;
}

/* Columns [k * hid, (k + 1) * hid) of qkv [N, L, 3 hid] as [N, L, H*D],
 * RMS-normed per head with `scale` [D] when given (ln_q / ln_k). */
static sd_bt *head_part(const fctx *c, sd_bt *qkv, int k, sd_bt *scale) {
    sd_bt *s = sd_op_slice(qkv, 2, k * c->hid, (k + 1) * c->hid);
    if (!scale || !s) return s;
    const sd_sd3_config *cfg = &c->m->cfg;
    int64_t L = s->shape[1];
    int64_t s4[4] = {c->N, L, cfg->num_heads, cfg->head_dim}, s3[3] = {c->N, L, c->hid};
    sd_bt *v4 = sd_bt_view(s, 4, s4);
    sd_bt_free(s);
    sd_bt *n = sd_op_rms_norm(v4, scale, QK_EPS);
    sd_bt_free(v4);
    sd_bt *r = sd_bt_view(n, 3, s3);
    sd_bt_free(n);
    return r;
}

/* SelfAttention.pre_attention on a modulated input (borrowed). */
static void pre_attention(const fctx *c, const sd3_attn *a, sd_bt *xm, sd_bt **q, sd_bt **k, sd_bt **v) {
    sd_bt *qkv = linear(xm, &a->qkv);
    *q = head_part(c, qkv, 0, a->ln_q);
    *k = head_part(c, qkv, 1, a->ln_k);
    *v = head_part(c, qkv, 2, NULL);
    sd_bt_free(qkv);
}

static sd_bt *attention(const fctx *c, sd_bt *q, sd_bt *k, sd_bt *v) {
    return sd_op_attention(q, k, v, c->m->cfg.num_heads, 0);
}

/* Mlp: fc1, GELU(tanh), fc2. */
static sd_bt *mlp(sd_bt *x, const sd3_stream *s) {
    sd_bt *h = linear(x, &s->fc1);
    sd_bt *g = sd_op_gelu_tanh(h);
    sd_bt_free(h);
    sd_bt *r = linear(g, &s->fc2);
    sd_bt_free(g);
    return r;
}

/* post_attention: x + gate_msa * proj(attn), then + gate_mlp *
 * mlp(modulate(norm2(x), shift_mlp, scale_mlp)). Frees x and attn; attn2
 * (MMDiT-X, freed) adds gate_msa2 * attn2.proj(attn2) after the first. */
static sd_bt *post_attention(const sd3_stream *s, sd_bt *x, sd_bt *attn, sd_bt *attn2, const mod3 *m1,
                             const mod3 *m2, const mod3 *m3) {
    sd_bt *p = linear(attn, &s->attn.proj);
    sd_bt_free(attn);
    x = add_gated(x, p, m1->gate);
    if (attn2) {
        sd_bt *p2 = linear(attn2, &s->attn2.proj);
        sd_bt_free(attn2);
        x = add_gated(x, p2, m3->gate);
    }
    sd_bt *n = sd_op_layer_norm(x, NULL, NULL, LN_EPS);
    sd_bt *xm = modulate(n, m2);
    sd_bt_free(n);
    sd_bt *h = mlp(xm, s);
    sd_bt_free(xm);
    return add_gated(x, h, m2->gate);
}

/* One joint block (block_mixing): *ctx (NULL after the pre-only block) and
 * *x replaced by the block's outputs. */
static void joint_block(const fctx *c, const sd3_joint *b, sd_bt **ctx, sd_bt **x) {
    const sd3_stream *cs = &b->ctx, *xs = &b->x;
    sd_bt *cmod = linear(c->silu_c, &cs->ada), *xmod = linear(c->silu_c, &xs->ada);
    mod3 cm1 = chunks(c, cmod, 0, cs->pre_only ? 2 : 3), cm2 = {0};
    if (!cs->pre_only) cm2 = chunks(c, cmod, 3, 3);
    mod3 xm1 = chunks(c, xmod, 0, 3), xm2 = chunks(c, xmod, 3, 3), xm3 = {0};
    if (xs->self_attn) xm3 = chunks(c, xmod, 6, 3);
    sd_bt_free(cmod);
    sd_bt_free(xmod);

    sd_bt *cq, *ck, *cv, *xq, *xk, *xv, *q2 = NULL, *k2 = NULL, *v2 = NULL;
    sd_bt *n = sd_op_layer_norm(*ctx, NULL, NULL, LN_EPS);
    sd_bt *t = modulate(n, &cm1);
    sd_bt_free(n);
    pre_attention(c, &cs->attn, t, &cq, &ck, &cv);
    sd_bt_free(t);
    n = sd_op_layer_norm(*x, NULL, NULL, LN_EPS);
    t = modulate(n, &xm1);
    pre_attention(c, &xs->attn, t, &xq, &xk, &xv);
    sd_bt_free(t);
    if (xs->self_attn) {
        t = modulate(n, &xm3);
        pre_attention(c, &xs->attn2, t, &q2, &k2, &v2);
        sd_bt_free(t);
    }
    sd_bt_free(n);

    int64_t Lc = (*ctx)->shape[1], Lx = (*x)->shape[1];
    sd_bt *q = sd_op_concat(cq, xq, 1), *k = sd_op_concat(ck, xk, 1), *v = sd_op_concat(cv, xv, 1);
    sd_bt *parts[6] = {cq, ck, cv, xq, xk, xv};
    for (int i = 0; i < 6; i++) sd_bt_free(parts[i]);
    sd_bt *a = attention(c, q, k, v);
    sd_bt_free(q), sd_bt_free(k), sd_bt_free(v);
    sd_bt *ca = cs->pre_only ? NULL : sd_op_slice(a, 1, 0, Lc);
    sd_bt *xa = sd_op_slice(a, 1, Lc, Lc + Lx);
    sd_bt_free(a);
    sd_bt *a2 = NULL;
    if (xs->self_attn) {
        a2 = attention(c, q2, k2, v2);
        sd_bt_free(q2), sd_bt_free(k2), sd_bt_free(v2);
    }
    if (cs->pre_only) {
        sd_bt_free(*ctx);
        *ctx = NULL;
    } else {
        *ctx = post_attention(cs, *ctx, ca, NULL, &cm1, &cm2, NULL);
    }
    *x = post_attention(xs, *x, xa, a2, &xm1, &xm2, &xm3);
    mod3_free(&cm1), mod3_free(&cm2), mod3_free(&xm1), mod3_free(&xm2), mod3_free(&xm3);
}

/* ---- patches ----------------------------------------------------------------------- */

/* x [B, C, H, W] -> [B, h*w, C*p*p] after wrap-around padding of H, W to
 * multiples of p (pad_to_patch_size, mode "circular"), in the order of the
 * patch convolution's weight (c, ph, pw). */
static sd_bt *patchify(sd_bt *x, int64_t p) {
    int64_t B = x->shape[0], C = x->shape[1];
    sd_bt *t = sd_op_copy(x);
    for (int d = 2; d < 4 && t; d++) {
        int64_t pad = (p - t->shape[d] % p) % p;
        if (!pad) continue;
        sd_bt *first = sd_op_slice(t, d, 0, pad);
        sd_bt *q = sd_op_concat(t, first, d);
        sd_bt_free(first);
        sd_bt_free(t);
        t = q;
    }
    if (!t) return NULL;
    int64_t h = t->shape[2] / p, w = t->shape[3] / p;
    int64_t s6[6] = {B, C, h, p, w, p}, s3[3] = {B, h * w, C * p * p};
    static const int perm[6] = {0, 2, 4, 1, 3, 5}; /* [B, h, w, C, p, p] */
    sd_bt *v = sd_bt_view(t, 6, s6);
    sd_bt_free(t);
    sd_bt *pm = sd_op_permute(v, perm);
    sd_bt_free(v);
    sd_bt *r = sd_bt_view(pm, 3, s3);
    sd_bt_free(pm);
    return r;
}

/* The final layer's [B, h*w, p*p*C] (order (p, q, c): einops
 * "nhwpqc->nchpwq") as [B, C, H, W], cropped. */
static sd_bt *unpatchify(sd_bt *o, int64_t C, int64_t p, int64_t h, int64_t w, int64_t H, int64_t W) {
    int64_t B = o->shape[0];
    int64_t s6[6] = {B, h, w, p, p, C}, s4[4] = {B, C, h * p, w * p};
    static const int perm[6] = {0, 5, 1, 3, 2, 4};
    sd_bt *v = sd_bt_view(o, 6, s6);
    sd_bt *t = sd_op_permute(v, perm);
    sd_bt_free(v);
    sd_bt *r = sd_bt_view(t, 4, s4);
    sd_bt_free(t);
    if (r && h * p != H) {
        sd_bt *cr = sd_op_slice(r, 2, 0, H);
        sd_bt_free(r);
        r = cr;
    }
    if (r && w * p != W) {
        sd_bt *cr = sd_op_slice(r, 3, 0, W);
        sd_bt_free(r);
        r = cr;
    }
    return r;
}

/* cropped_pos_embed: the centred h x w window of the M x M grid, [h*w, hid]. */
static sd_bt *cropped_pos_embed(const sd_sd3 *m, int64_t h, int64_t w) {
    int64_t M = m->cfg.pos_embed_max_size, hid = m->cfg.hidden_size;
    int64_t top = (M - h) / 2, left = (M - w) / 2;
    int64_t s3[3] = {M, M, hid}, s2[2] = {h * w, hid};
    sd_bt *g = sd_bt_view(m->pos_embed, 3, s3);
    sd_bt *rows = sd_op_slice(g, 0, top, top + h);
    sd_bt_free(g);
    sd_bt *win = sd_op_slice(rows, 1, left, left + w);
    sd_bt_free(rows);
    sd_bt *r = sd_bt_view(win, 2, s2);
    sd_bt_free(win);
    return r;
}

/* Linear, SiLU, Linear (TimestepEmbedder / VectorEmbedder's mlp). */
static sd_bt *mlp_embed(sd_bt *x, const sd3_lin *a, const sd3_lin *b) {
    sd_bt *h = linear(x, a);
    sd_bt *s = sd_op_silu(h);
    sd_bt_free(h);
    sd_bt *r = linear(s, b);
    sd_bt_free(s);
    return r;
}

static sd_bt *embed_timesteps(const fctx *c, const float *t) {
    sd_tensor *h = sd_tensor_new4(SD_F32, 2, c->N, 256, 0, 0);
    if (!h) return NULL;
    sd_unet_timestep_embedding(t, (int)c->N, 256, sd_tensor_f32(h));
    sd_bt *bh = sd_bt_from_host(c->m->be, h, SD_F32);
    sd_tensor_unref(h);
    sd_bt *r = mlp_embed(bh, &c->m->t0, &c->m->t2);
    sd_bt_free(bh);
    return r;
}

/* ---- the forward ----------------------------------------------------------------------- */

static sd_status check_inputs(const sd_sd3 *m, sd_bt *x, sd_bt *context, sd_bt *y, const float *timesteps,
                              const int *skip, int n_skip, sd_error *err) {
    const sd_sd3_config *c = &m->cfg;
    if (!x || !context || !timesteps)
        return sd_error_set(err, SD_ERR_INVALID, "SD3 forward: x, context and timesteps are required");
    if (x->ndim != 4 || x->shape[0] < 1 || x->shape[1] != c->in_channels || x->shape[2] < 1 || x->shape[3] < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 forward: x must be [N, %d, H, W], got %d dims with %lld channels",
                            c->in_channels, x->ndim, x->ndim > 1 ? (long long)x->shape[1] : 0LL);
    int64_t p = c->patch_size, h = (x->shape[2] + p - 1) / p, w = (x->shape[3] + p - 1) / p;
    if (h > c->pos_embed_max_size || w > c->pos_embed_max_size)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 forward: a %lldx%lld latent is %lldx%lld patches; this model's position "
                            "embedding covers at most %dx%d (a latent of %lldx%lld)",
                            (long long)x->shape[2], (long long)x->shape[3], (long long)h, (long long)w,
                            c->pos_embed_max_size, c->pos_embed_max_size,
                            (long long)(c->pos_embed_max_size * p), (long long)(c->pos_embed_max_size * p));
    if (context->ndim != 3 || context->shape[0] != x->shape[0] || context->shape[1] < 1 ||
        context->shape[2] != c->context_in_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 forward: context must be [%lld, L >= 1, %d], got %d dims, last %lld",
                            (long long)x->shape[0], c->context_in_dim, context->ndim,
                            context->ndim ? (long long)context->shape[context->ndim - 1] : 0LL);
    if (y && c->adm_in_channels &&
        (y->ndim != 2 || y->shape[0] != x->shape[0] || y->shape[1] != c->adm_in_channels))
        return sd_error_set(err, SD_ERR_INVALID, "SD3 forward: pooled vector y must be [%lld, %d]",
                            (long long)x->shape[0], c->adm_in_channels);
    (void)skip, (void)n_skip; /* indices of blocks the model lacks skip nothing (ComfyUI's
                               * patch for a block that does not exist is never called) */
    return SD_OK;
}

static int skipped(const int *skip, int n_skip, int i) {
    for (int k = 0; k < n_skip; k++)
        if (skip[k] == i) return 1;
    return 0;
}

sd_bt *sd3_block_alone(sd_sd3 *m, const sd3_stream *s, sd_bt *x, sd_bt *silu_c) {
    if (!x || !silu_c) return NULL;
    fctx c = {m, x->shape[0], m->cfg.hidden_size, silu_c};
    sd_bt *mod = linear(silu_c, &s->ada);
    mod3 m1 = chunks(&c, mod, 0, 3), m2 = chunks(&c, mod, 3, 3);
    sd_bt_free(mod);
    sd_bt *n = sd_op_layer_norm(x, NULL, NULL, LN_EPS);
    sd_bt *t = modulate(n, &m1);
    sd_bt_free(n);
    sd_bt *q, *k, *v;
    pre_attention(&c, &s->attn, t, &q, &k, &v);
    sd_bt_free(t);
    sd_bt *a = attention(&c, q, k, v);
    sd_bt_free(q), sd_bt_free(k), sd_bt_free(v);
    sd_bt *r = post_attention(s, x, a, NULL, &m1, &m2, NULL);
    mod3_free(&m1), mod3_free(&m2);
    return r;
}

sd_bt *sd3_embed_t(sd_sd3 *m, const float *timesteps, int64_t N) {
    fctx c = {m, N, m->cfg.hidden_size, NULL};
    return embed_timesteps(&c, timesteps);
}

sd_bt *sd3_embed_mlp(sd_bt *x, const sd3_lin *a, const sd3_lin *b) { return mlp_embed(x, a, b); }

sd_bt *sd3_patch_embed(sd_bt *x, sd_bt *w, sd_bt *b, int64_t p) {
    if (!x || !w) return NULL;
    int64_t ws[2] = {w->shape[0], w->shape[1] * p * p};
    sd_bt *w2 = sd_bt_view(w, 2, ws);
    sd_bt *patches = patchify(x, p);
    sd_bt *e = sd_op_linear(patches, w2, b);
    sd_bt_free(patches);
    sd_bt_free(w2);
    return e;
}

sd_status sd3_trunk(sd_sd3 *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y, sd_bt *x_add,
                    const int *skip, int n_skip, sd3_after_fn after, void *ud, sd_bt **img_out,
                    sd_bt **silu_out, sd_error *err) {
    *img_out = *silu_out = NULL;
    sd_status rc = check_inputs(m, x, context, y, timesteps, skip, n_skip, err);
    if (rc) return rc;
    const sd_sd3_config *cfg = &m->cfg;
    sd_backend *be = m->be;
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3], p = cfg->patch_size;
    int64_t h = (H + p - 1) / p, w = (W + p - 1) / p;
    fctx c = {m, N, cfg->hidden_size, NULL};
    sd_bt *img = NULL, *ctx = NULL, *cvec = NULL;

    /* x_embedder (the patch convolution as a Linear on the patches) + pos */
    {
        sd_bt *e = sd3_patch_embed(x, m->x_proj_w, m->x_proj_b, p);
        tap(&c, "x_embedder", e);
        sd_bt *pos = cropped_pos_embed(m, h, w);
        img = sd_op_add(e, pos);
        sd_bt_free(e);
        sd_bt_free(pos);
        if (x_add) { /* the ControlNet's hint embedding: x += pos_embed_input(hint) */
            sd_bt *s = sd_op_add(img, x_add);
            sd_bt_free(img);
            img = s;
        }
    }
    cvec = embed_timesteps(&c, timesteps);
    tap(&c, "t_embedder", cvec);
    if (y && cfg->adm_in_channels) {
        sd_bt *ye = mlp_embed(y, &m->y0, &m->y2);
        tap(&c, "y_embedder", ye);
        sd_bt *s = sd_op_add(cvec, ye);
        sd_bt_free(ye);
        sd_bt_free(cvec);
        cvec = s;
    }
    ctx = linear(context, &m->ctx_emb);
    tap(&c, "context_embedder", ctx);
    c.silu_c = sd_op_silu(cvec);
    if ((rc = sd_backend_take_error(be, err))) goto done;
    if (!img || !ctx || !c.silu_c) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory starting the SD3 forward");
        goto done;
    }

    char name[48];
    for (int i = 0; i < cfg->depth; i++) {
        /* a skipped block (SkipLayerGuidance) passes its inputs on; a
         * skipped pre-only block still ends the context stream */
        if (skipped(skip, n_skip, i)) {
            if (m->blocks[i].ctx.pre_only) sd_bt_free(ctx), ctx = NULL;
        } else {
            joint_block(&c, &m->blocks[i], &ctx, &img);
            if ((rc = sd_backend_take_error(be, err))) goto done;
            snprintf(name, sizeof name, "joint_blocks.%d", i);
            tap(&c, name, ctx);
            snprintf(name, sizeof name, "joint_blocks.%d.x", i);
            tap(&c, name, img);
        }
        if (after && after(ud, i, &img, err)) {
            rc = sd_backend_take_error(be, err);
            if (!rc) rc = err && err->code ? err->code : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    *img_out = img;
    *silu_out = c.silu_c;
    img = NULL;
    c.silu_c = NULL;
done:
    if (rc) sd_backend_clear_error(be);
    sd_bt_free(img);
    sd_bt_free(ctx);
    sd_bt_free(cvec);
    sd_bt_free(c.silu_c);
    return rc;
}

/* ComfyUI's control["output"]: entry i added to the image tokens after
 * joint block i (forward_core_with_concat). */
typedef struct control_add {
    sd_bt *const *add;
    int n;
} control_add;

static int add_control(void *ud, int i, sd_bt **img, sd_error *err) {
    const control_add *a = ud;
    if (i >= a->n || !a->add[i]) return 0;
    const sd_bt *t = a->add[i];
    if (t->ndim != 3 || t->shape[1] != (*img)->shape[1] || t->shape[2] != (*img)->shape[2] ||
        (t->shape[0] != (*img)->shape[0] && t->shape[0] != 1)) {
        sd_error_set(err, SD_ERR_INVALID,
                     "SD3 forward: control output %d is [%lld, %lld, %lld], the image tokens [%lld, %lld, %lld]",
                     i, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                     (long long)(t->ndim > 2 ? t->shape[2] : 0), (long long)(*img)->shape[0],
                     (long long)(*img)->shape[1], (long long)(*img)->shape[2]);
        return 1;
    }
    sd_bt *s = sd_op_add(*img, a->add[i]);
    sd_bt_free(*img);
    *img = s;
    return s == NULL;
}

sd_status sd_sd3_forward(sd_sd3 *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                         const int *skip, int n_skip, sd_bt **out, sd_error *err) {
    sd_sd3_extra e = {skip, n_skip, NULL, 0};
    return sd_sd3_forward_ex(m, x, timesteps, context, y, &e, out, err);
}

sd_status sd_sd3_forward_ex(sd_sd3 *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                            const sd_sd3_extra *extra, sd_bt **out, sd_error *err) {
    *out = NULL;
    sd_bt *img = NULL, *silu_c = NULL, *res = NULL;
    control_add ca = {extra ? extra->control : NULL, extra && extra->control ? extra->n_control : 0};
    sd_status rc = sd3_trunk(m, x, timesteps, context, y, NULL, extra ? extra->skip : NULL,
                             extra ? extra->n_skip : 0, ca.n ? add_control : NULL, &ca, &img, &silu_c, err);
    if (rc) return rc;
    const sd_sd3_config *cfg = &m->cfg;
    int64_t H = x->shape[2], W = x->shape[3], p = cfg->patch_size;
    int64_t h = (H + p - 1) / p, w = (W + p - 1) / p;
    fctx c = {m, x->shape[0], cfg->hidden_size, silu_c};

    /* final layer: adaLN (shift, scale) from SiLU(c), then Linear */
    {
        sd_bt *ada = linear(c.silu_c, &m->final_ada);
        mod3 fm = chunks(&c, ada, 0, 2);
        sd_bt_free(ada);
        sd_bt *n = sd_op_layer_norm(img, NULL, NULL, LN_EPS);
        sd_bt *xm = modulate(n, &fm);
        sd_bt_free(n);
        mod3_free(&fm);
        sd_bt *o = linear(xm, &m->final_lin);
        sd_bt_free(xm);
        tap(&c, "final_layer", o);
        res = o ? unpatchify(o, cfg->out_channels, p, h, w, H, W) : NULL;
        sd_bt_free(o);
    }
    if ((rc = sd_backend_take_error(m->be, err))) goto done;
    if (!res) {
        rc = sd_error_set(err, SD_ERR_INTERNAL, "SD3 forward produced no output");
        goto done;
    }
    *out = res;
    res = NULL;
done:
    if (rc) sd_backend_clear_error(m->be);
    sd_bt_free(res);
    sd_bt_free(img);
    sd_bt_free(silu_c);
    return rc;
}
