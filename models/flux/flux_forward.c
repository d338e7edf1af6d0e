/* flux_forward.c - one Flux DiT forward over kernels/backend.h, in the order
 * of comfy/ldm/flux/{model,layers}.py: patchify, embedders, double-stream
 * blocks (joint attention over [txt, img]), single-stream blocks on the
 * concatenation, final adaLN layer, unpatchify.
 *
 * Every op returns NULL once the backend's sticky error is set, so the code
 * chains ops and checks the error once per block; every intermediate is
 * freed as soon as its last reader has run (a real-size block holds a few
 * hundred MB of activations). */
#include "flux_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/unet/unet.h" /* sd_unet_timestep_embedding: the same sinusoids */

#define LN_EPS 1e-6f
#define QK_EPS 1e-6f

typedef struct fctx {
    sd_flux *m;
    int64_t N, hid;
    sd_bt *silu_vec; /* SiLU(vec) [N, hid]: every Modulation's input */
    sd_bt *rot;      /* [L, D/2, 2] */
} fctx;

static void tap(const fctx *c, const char *name, const sd_bt *t) {
    if (c->m->tap && t) c->m->tap(c->m->tap_user, name, t);
}

static void free_all(sd_bt **v, int n) {
    for (int i = 0; i < n; i++) {
        sd_bt_free(v[i]);
        v[i] = NULL;
    }
}

static sd_bt *linear(sd_bt *x, const flux_lin *l) { return sd_op_linear(x, l->w, l->b); }

/* x (freed) -> x + y * gate (y freed). */
static sd_bt *add_gated(sd_bt *x, sd_bt *y, sd_bt *gate) {
    sd_bt *g = sd_op_mul(y, gate);
    sd_bt_free(y);
    sd_bt *r = sd_op_add(x, g);
    sd_bt_free(g);
    sd_bt_free(x);
    return r;
}

/* The chunks (shift, 1 + scale, gate) of a modulation output, each
 * [N, 1, hid], from chunk index k0 of mod [N, k * hid]; n = 2 leaves out
 * the gate (the final layer's adaLN has only shift and scale). */
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

/* LayerNorm (no affine, eps 1e-6) then x * (1 + scale) + shift (apply_mod:
 * torch.addcmul(shift, x, 1 + scale)). */
static sd_bt *norm_mod(sd_bt *x, const mod3 *m) {
    sd_bt *n = sd_op_layer_norm(x, NULL, NULL, LN_EPS);
    sd_bt *t = sd_op_mul(n, m->scale1p);
    sd_bt_free(n);
    sd_bt *r = sd_op_add(t, m->shift);
    sd_bt_free(t);
    return r;
}

/* Columns [k * hid, (k + 1) * hid) of qkv [N, L, >= 3 hid] as [N, L, H*D],
 * RMS-normed per head with `scale` [D] when scale is given (QKNorm). */
static sd_bt *head_part(const fctx *c, sd_bt *qkv, int k, sd_bt *scale) {
    sd_bt *s = sd_op_slice(qkv, 2, k * c->hid, (k + 1) * c->hid);
    if (!scale || !s) return s;
    const sd_flux_config *cfg = &c->m->cfg;
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

/* MLP: Linear, GELU(tanh), Linear. */
static sd_bt *mlp(sd_bt *x, const flux_lin *a, const flux_lin *b) {
    sd_bt *h = linear(x, a);
    sd_bt *g = sd_op_gelu_tanh(h);
    sd_bt_free(h);
    sd_bt *r = linear(g, b);
    sd_bt_free(g);
    return r;
}

/* Rotary embedding on q and k, then attention: [N, L, hid]. Frees q, k, v. */
static sd_bt *rope_attention(const fctx *c, sd_bt *q, sd_bt *k, sd_bt *v) {
    int heads = c->m->cfg.num_heads;
    sd_bt *qr = sd_op_rope(q, c->rot, heads, 1);
    sd_bt_free(q);
    sd_bt *kr = sd_op_rope(k, c->rot, heads, 1);
    sd_bt_free(k);
    sd_bt *a = sd_op_attention(qr, kr, v, heads, 0);
    sd_bt_free(qr);
    sd_bt_free(kr);
    sd_bt_free(v);
    return a;
}

/* The q, k, v of one stream of a double block, from its modulated input. */
static void stream_qkv(const fctx *c, const flux_stream *s, sd_bt *x, const mod3 *m1, sd_bt **q,
                       sd_bt **k, sd_bt **v) {
    sd_bt *xm = norm_mod(x, m1);
    sd_bt *qkv = linear(xm, &s->qkv);
    sd_bt_free(xm);
    *q = head_part(c, qkv, 0, s->q_norm);
    *k = head_part(c, qkv, 1, s->k_norm);
    *v = head_part(c, qkv, 2, NULL);
    sd_bt_free(qkv);
}

/* x + gate1 * proj(attn); then + gate2 * mlp(norm_mod(x, m2)). Frees x, attn. */
static sd_bt *stream_out(const flux_stream *s, sd_bt *x, sd_bt *attn, const mod3 *m1, const mod3 *m2) {
    sd_bt *p = linear(attn, &s->proj);
    sd_bt_free(attn);
    x = add_gated(x, p, m1->gate);
    sd_bt *xm = norm_mod(x, m2);
    sd_bt *h = mlp(xm, &s->mlp0, &s->mlp2);
    sd_bt_free(xm);
    return add_gated(x, h, m2->gate);
}

/* DoubleStreamBlock: *img, *txt replaced by the block's outputs. */
static void double_block(const fctx *c, const flux_double *b, sd_bt **img, sd_bt **txt) {
    sd_bt *imod = linear(c->silu_vec, &b->img.mod), *tmod = linear(c->silu_vec, &b->txt.mod);
    mod3 im1 = chunks(c, imod, 0, 3), im2 = chunks(c, imod, 3, 3);
    mod3 tm1 = chunks(c, tmod, 0, 3), tm2 = chunks(c, tmod, 3, 3);
    sd_bt_free(imod);
    sd_bt_free(tmod);
    sd_bt *iq, *ik, *iv, *tq, *tk, *tv;
    stream_qkv(c, &b->img, *img, &im1, &iq, &ik, &iv);
    stream_qkv(c, &b->txt, *txt, &tm1, &tq, &tk, &tv);
    /* joint attention over [txt, img] */
    sd_bt *q = sd_op_concat(tq, iq, 1), *k = sd_op_concat(tk, ik, 1), *v = sd_op_concat(tv, iv, 1);
    sd_bt *parts[6] = {iq, ik, iv, tq, tk, tv};
    free_all(parts, 6);
    int64_t Lt = (*txt)->shape[1], Li = (*img)->shape[1];
    sd_bt *a = rope_attention(c, q, k, v);
    sd_bt *ta = sd_op_slice(a, 1, 0, Lt), *ia = sd_op_slice(a, 1, Lt, Lt + Li);
    sd_bt_free(a);
    *img = stream_out(&b->img, *img, ia, &im1, &im2);
    *txt = stream_out(&b->txt, *txt, ta, &tm1, &tm2);
    mod3_free(&im1), mod3_free(&im2), mod3_free(&tm1), mod3_free(&tm2);
}

/* SingleStreamBlock on the joint stream x (replaced). */
static void single_block(const fctx *c, const flux_single *b, sd_bt **x) {
    const sd_flux_config *cfg = &c->m->cfg;
    sd_bt *mod = linear(c->silu_vec, &b->mod);
    mod3 m = chunks(c, mod, 0, 3);
    sd_bt_free(mod);
    sd_bt *xm = norm_mod(*x, &m);
    sd_bt *l1 = linear(xm, &b->linear1);
    sd_bt_free(xm);
    sd_bt *q = head_part(c, l1, 0, b->q_norm), *k = head_part(c, l1, 1, b->k_norm);
    sd_bt *v = head_part(c, l1, 2, NULL);
    sd_bt *h = l1 ? sd_op_slice(l1, 2, 3 * c->hid, 3 * c->hid + cfg->mlp_hidden) : NULL;
    sd_bt_free(l1);
    sd_bt *a = rope_attention(c, q, k, v);
    sd_bt *g = sd_op_gelu_tanh(h);
    sd_bt_free(h);
    sd_bt *cat = sd_op_concat(a, g, 2);
    sd_bt_free(a);
    sd_bt_free(g);
    sd_bt *o = linear(cat, &b->linear2);
    sd_bt_free(cat);
    *x = add_gated(*x, o, m.gate);
    mod3_free(&m);
}

/* MLPEmbedder on host values: in_layer(sinusoids(v * 1000)) -> SiLU ->
 * out_layer. */
static sd_bt *embed_values(const fctx *c, const flux_embedder *e, const float *v) {
    int64_t N = c->N;
    sd_tensor *h = sd_tensor_new4(SD_F32, 2, N, 256, 0, 0);
    float *t = malloc((size_t)N * sizeof *t);
    sd_bt *r = NULL;
    if (h && t) {
        for (int64_t i = 0; i < N; i++) t[i] = 1000.0f * v[i]; /* time_factor, in float32 */
        sd_unet_timestep_embedding(t, (int)N, 256, sd_tensor_f32(h));
        sd_bt *bh = sd_bt_from_host(c->m->be, h, SD_F32);
        sd_bt *a = linear(bh, &e->in);
        sd_bt_free(bh);
        sd_bt *s = sd_op_silu(a);
        sd_bt_free(a);
        r = linear(s, &e->out);
        sd_bt_free(s);
    }
    sd_tensor_unref(h);
    free(t);
    return r;
}

static sd_bt *embed_vec(const flux_embedder *e, sd_bt *y) {
    sd_bt *a = linear(y, &e->in);
    sd_bt *s = sd_op_silu(a);
    sd_bt_free(a);
    sd_bt *r = linear(s, &e->out);
    sd_bt_free(s);
    return r;
}

/* ---- patches ------------------------------------------------------------------------ */

/* x [B, C, H, W] -> [B, (H'/2)(W'/2), C*4] after wrap-around padding of H, W
 * to even sizes (pad_to_patch_size, mode "circular"), in einops' order
 * "b c (h ph) (w pw) -> b (h w) (c ph pw)". */
static sd_bt *patchify(sd_bt *x) {
    int64_t B = x->shape[0], C = x->shape[1];
    sd_bt *p = sd_op_copy(x);
    for (int d = 2; d < 4 && p; d++) {
        if (p->shape[d] % 2 == 0) continue;
        sd_bt *first = sd_op_slice(p, d, 0, 1);
        sd_bt *q = sd_op_concat(p, first, d);
        sd_bt_free(first);
        sd_bt_free(p);
        p = q;
    }
    if (!p) return NULL;
    int64_t Hp = p->shape[2], Wp = p->shape[3], h = Hp / 2, w = Wp / 2;
    int64_t s1[5] = {B, C, h, 2, Wp}, s2[5] = {B * h, C, 2, w, 2}, s3[3] = {B, h * w, C * 4};
    static const int perm1[5] = {0, 2, 1, 3, 4}, perm2[5] = {0, 3, 1, 2, 4};
    sd_bt *v1 = sd_bt_view(p, 5, s1);
    sd_bt_free(p);
    sd_bt *t1 = sd_op_permute(v1, perm1); /* [B, h, C, 2, Wp] */
    sd_bt_free(v1);
    sd_bt *v2 = sd_bt_view(t1, 5, s2);
    sd_bt_free(t1);
    sd_bt *t2 = sd_op_permute(v2, perm2); /* [B*h, w, C, 2, 2] */
    sd_bt_free(v2);
    sd_bt *r = sd_bt_view(t2, 3, s3);
    sd_bt_free(t2);
    return r;
}

/* The inverse for the output [B, h*w, C*4], cropped to H x W. */
static sd_bt *unpatchify(sd_bt *o, int64_t C, int64_t h, int64_t w, int64_t H, int64_t W) {
    int64_t B = o->shape[0], Hp = 2 * h, Wp = 2 * w;
    int64_t s1[5] = {B * h, w, C, 2, 2}, s2[5] = {B, h, C, 2, Wp}, s3[4] = {B, C, Hp, Wp};
    static const int perm1[5] = {0, 2, 3, 1, 4}, perm2[5] = {0, 2, 1, 3, 4};
    sd_bt *v1 = sd_bt_view(o, 5, s1);
    sd_bt *t1 = sd_op_permute(v1, perm1); /* [B*h, C, 2, w, 2] */
    sd_bt_free(v1);
    sd_bt *v2 = sd_bt_view(t1, 5, s2);
    sd_bt_free(t1);
    sd_bt *t2 = sd_op_permute(v2, perm2); /* [B, C, h, 2, Wp] */
    sd_bt_free(v2);
    sd_bt *r = sd_bt_view(t2, 4, s3);
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

/* ComfyUI's pe tensor [N, 1, L, D/2, 2, 2] ((cos, -sin), (sin, cos)) for the
 * tap, from the rotation table. */
static sd_bt *pe_for_tap(const fctx *c, const float *tab, int64_t L) {
    int64_t half = c->m->cfg.head_dim / 2;
    int64_t shape[6] = {c->N, 1, L, half, 2, 2};
    sd_tensor *t = sd_tensor_new(SD_F32, 6, shape);
    if (!t) return NULL;
    float *o = sd_tensor_f32(t);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t i = 0; i < L * half; i++) {
            float cs = tab[2 * i], sn = tab[2 * i + 1];
            float *q = o + (n * L * half + i) * 4;
            q[0] = cs, q[1] = -sn, q[2] = sn, q[3] = cs;
        }
    sd_bt *b = sd_bt_from_host(c->m->be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

/* ---- the forward ----------------------------------------------------------------------- */

static sd_status check_inputs(const sd_flux *m, sd_bt *x, sd_bt *context, sd_bt *y,
                              const float *timesteps, sd_error *err) {
    const sd_flux_config *c = &m->cfg;
    if (!x || !context || !timesteps)
        return sd_error_set(err, SD_ERR_INVALID, "Flux forward: x, context and timesteps are required");
    if (x->ndim != 4 || x->shape[0] < 1 || x->shape[1] != c->in_channels || x->shape[2] < 1 ||
        x->shape[3] < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "Flux forward: x must be [N, %d, H, W], got %d dims with %lld channels",
                            c->in_channels, x->ndim, x->ndim > 1 ? (long long)x->shape[1] : 0LL);
    if (context->ndim != 3 || context->shape[0] != x->shape[0] ||
        context->shape[2] != c->context_in_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "Flux forward: context must be [%lld, L, %d] (T5 tokens of this model's "
                            "width), got %d dims, last %lld",
                            (long long)x->shape[0], c->context_in_dim, context->ndim,
                            context->ndim ? (long long)context->shape[context->ndim - 1] : 0LL);
    if (y && c->vec_in_dim &&
        (y->ndim != 2 || y->shape[0] != x->shape[0] || y->shape[1] < c->vec_in_dim))
        return sd_error_set(err, SD_ERR_INVALID,
                            "Flux forward: pooled vector y must be [%lld, >= %d]",
                            (long long)x->shape[0], c->vec_in_dim);
    return SD_OK;
}

sd_flux_ref_method sd_flux_ref_method_from_name(const char *name) {
    /* Flux._forward: "index" and "uxo" are their own; every other name
     * (none, "offset", "index_timestep_zero") takes the offset branch */
    if (name && strcmp(name, "index") == 0) return SD_FLUX_REF_INDEX;
    if (name && strcmp(name, "uxo") == 0) return SD_FLUX_REF_UXO;
    return SD_FLUX_REF_OFFSET;
}

/* The grids of the image (g[0]) and of each reference latent (Flux._forward
 * and process_img: offsets in latent pixels, made patches as (p + 1) / 2). */
static void ref_grids(const sd_flux_refs *refs, int64_t h, int64_t w, sd_flux_grid *g) {
    g[0] = (sd_flux_grid){0.0, h, w, 0, 0};
    int64_t th = 0, tw = 0;
    double index = 0.0;
    for (int i = 0; i < refs->n; i++) {
        int64_t rh = refs->latents[i]->shape[2], rw = refs->latents[i]->shape[3], ho = 0, wo = 0;
        if (refs->method == SD_FLUX_REF_INDEX) {
            index += 1.0;
        } else if (refs->method == SD_FLUX_REF_UXO) {
            index = 0.0;
            ho = h * 2 + th;
            wo = w * 2 + tw;
            th += rh;
            tw += rw;
        } else {
            index = 1.0;
            if (rh + th > rw + tw) wo = tw;
            else ho = th;
            th = th > rh + ho ? th : rh + ho;
            tw = tw > rw + wo ? tw : rw + wo;
        }
        g[i + 1] = (sd_flux_grid){index, (rh + 1) / 2, (rw + 1) / 2, (ho + 1) / 2, (wo + 1) / 2};
    }
}

sd_status sd_flux_forward(sd_flux *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                          const float *guidance, sd_bt **out, sd_error *err) {
    return sd_flux_forward_refs(m, x, timesteps, context, y, guidance, NULL, out, err);
}

sd_status sd_flux_forward_refs(sd_flux *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                               const float *guidance, const sd_flux_refs *refs, sd_bt **out, sd_error *err) {
    *out = NULL;
    sd_status rc = check_inputs(m, x, context, y, timesteps, err);
    if (rc) return rc;
    const sd_flux_config *cfg = &m->cfg;
    sd_backend *be = m->be;
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3];
    int64_t h = (H + 1) / 2, w = (W + 1) / 2, Lt = context->shape[1], Li = h * w, L = Lt + Li;
    int nref = refs ? refs->n : 0;
    for (int i = 0; i < nref; i++) {
        const sd_bt *r = refs->latents[i];
        if (!r || r->ndim != 4 || r->shape[0] != N || r->shape[1] != cfg->in_channels || r->shape[2] < 1 ||
            r->shape[3] < 1)
            return sd_error_set(err, SD_ERR_INVALID,
                                "Flux forward: reference latent %d must be [%lld, %d, H, W] (got %d dims%s)", i,
                                (long long)N, cfg->in_channels, r ? r->ndim : 0,
                                r && r->ndim == 4 ? ", other batch or channels" : "");
    }
    sd_flux_grid *grids = malloc((size_t)(nref + 1) * sizeof *grids);
    if (!grids) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (nref) ref_grids(refs, h, w, grids);
    else grids[0] = (sd_flux_grid){0.0, h, w, 0, 0};
    for (int i = 1; i <= nref; i++) L += grids[i].h * grids[i].w;
    fctx c = {m, N, cfg->hidden_size, NULL, NULL};
    sd_bt *img = NULL, *txt = NULL, *vec = NULL, *res = NULL;
    int64_t rshape[3] = {L, cfg->head_dim / 2, 2};
    sd_tensor *rt = sd_tensor_new(SD_F32, 3, rshape);
    if (!rt) {
        free(grids);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory (RoPE table for %lld tokens)", (long long)L);
    }
    const float *tab = sd_tensor_f32(rt);

    /* img_in on the patches: the image's, then each reference's
     * (Flux._forward concatenates them before forward_orig's img_in) */
    sd_bt *patches = patchify(x);
    for (int i = 0; i < nref && patches; i++) {
        sd_bt *rp = patchify(refs->latents[i]);
        sd_bt *cat = rp ? sd_op_concat(patches, rp, 1) : NULL;
        sd_bt_free(rp);
        sd_bt_free(patches);
        patches = cat;
    }
    img = linear(patches, &m->img_in);
    sd_bt_free(patches);
    tap(&c, "img_in", img);

    /* vec = time_in + guidance_in + vector_in */
    vec = embed_values(&c, &m->time_in, timesteps);
    tap(&c, "time_in", vec);
    if (cfg->guidance_embed && guidance) {
        sd_bt *g = embed_values(&c, &m->guidance_in, guidance);
        tap(&c, "guidance_in", g);
        sd_bt *s = sd_op_add(vec, g);
        sd_bt_free(g);
        sd_bt_free(vec);
        vec = s;
    }
    if (cfg->vec_in_dim) {
        sd_bt *yy = NULL;
        if (!y) {
            yy = sd_bt_new4(be, SD_F32, 2, N, cfg->vec_in_dim, 0, 0);
        } else if (y->shape[1] != cfg->vec_in_dim) {
            yy = sd_op_slice(y, 1, 0, cfg->vec_in_dim);
        }
        sd_bt *v = embed_vec(&m->vector_in, yy ? yy : y);
        sd_bt_free(yy);
        tap(&c, "vector_in", v);
        sd_bt *s = sd_op_add(vec, v);
        sd_bt_free(v);
        sd_bt_free(vec);
        vec = s;
    }
    txt = linear(context, &m->txt_in);
    tap(&c, "txt_in", txt);

    /* positions */
    sd_flux_rope_table_grids(cfg, Lt, grids, nref + 1, sd_tensor_f32(rt));
    c.rot = sd_bt_from_host(be, rt, SD_F32);
    if (m->tap) {
        sd_bt *pe = pe_for_tap(&c, tab, L);
        tap(&c, "pe_embedder", pe);
        sd_bt_free(pe);
    }
    c.silu_vec = sd_op_silu(vec);
    if ((rc = sd_backend_take_error(be, err))) goto done;
    if (!c.rot || !img || !txt || !c.silu_vec) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory starting the Flux forward");
        goto done;
    }

    char name[48];
    for (int i = 0; i < cfg->depth; i++) {
        double_block(&c, &m->dbl[i], &img, &txt);
        if ((rc = sd_backend_take_error(be, err))) goto done;
        snprintf(name, sizeof name, "double_blocks.%d", i);
        tap(&c, name, img);
    }
    sd_bt *joint = sd_op_concat(txt, img, 1);
    sd_bt_free(txt);
    sd_bt_free(img);
    txt = img = NULL;
    for (int i = 0; i < cfg->depth_single_blocks; i++) {
        single_block(&c, &m->sgl[i], &joint);
        if ((rc = sd_backend_take_error(be, err))) {
            sd_bt_free(joint);
            goto done;
        }
        snprintf(name, sizeof name, "single_blocks.%d", i);
        tap(&c, name, joint);
        if (i == cfg->depth_single_blocks - 1) tap(&c, "single_blocks.last", joint);
    }
    /* the image tokens only (the final layer works per token, so cutting
     * before it equals ComfyUI's out[:, :img_tokens] after it) */
    img = sd_op_slice(joint, 1, Lt, Lt + Li);
    sd_bt_free(joint);

    /* final layer: adaLN (shift, scale) from SiLU(vec), then Linear */
    {
        sd_bt *ada = linear(c.silu_vec, &m->final_ada);
        mod3 fm = chunks(&c, ada, 0, 2); /* shift, 1 + scale */
        sd_bt_free(ada);
        sd_bt *xm = norm_mod(img, &fm);
        mod3_free(&fm);
        sd_bt *o = linear(xm, &m->final_linear);
        sd_bt_free(xm);
        tap(&c, "final_layer", o);
        res = o ? unpatchify(o, cfg->out_channels, h, w, H, W) : NULL;
        sd_bt_free(o);
    }
    if ((rc = sd_backend_take_error(be, err))) goto done;
    if (!res) {
        rc = sd_error_set(err, SD_ERR_INTERNAL, "Flux forward produced no output");
        goto done;
    }
    *out = res;
    res = NULL;
done:
    if (rc) sd_backend_clear_error(be);
    sd_bt_free(res);
    sd_bt_free(img);
    sd_bt_free(txt);
    sd_bt_free(vec);
    sd_bt_free(c.silu_vec);
    sd_bt_free(c.rot);
    sd_tensor_unref(rt);
    free(grids);
    return rc;
}
