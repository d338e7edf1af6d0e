/* unet_blocks.c - forward of the UNet's ResBlock and SpatialTransformer,
 * in the operation order of ComfyUI's openaimodel / attention modules.
 *
 * Every function borrows its inputs and returns a new tensor, or NULL once
 * an op failed (the backend's sticky error says why). Intermediates are
 * freed as soon as they are dead. */
#include "models/unet/unet_internal.h"

/* Replace *h by next (freeing the old value); 0 when next is NULL. */
static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

/* An owned copy of x with another shape (x is not freed). */
static sd_bt *reshaped(sd_bt *x, int ndim, const int64_t *shape) {
    sd_bt *v = sd_bt_view(x, ndim, shape);
    if (!v) return NULL;
    sd_bt *c = sd_op_copy(v);
    sd_bt_free(v);
    return c;
}

/* x: [N, Cin, H, W], emb_silu: [N, E] (SiLU already applied: emb_layers[0])
 * -> [N, Cout, H, W] = skip(x) + out_layers(in_layers(x) + emb_layers(emb)). */
sd_bt *sd_unet_res_forward(const unet_res *r, sd_bt *x, sd_bt *emb_silu) {
    sd_bt *h = NULL, *e = NULL, *s = NULL, *out = NULL;
    h = sd_op_group_norm(x, 32, r->in_norm_w, r->in_norm_b, 1e-5f, 1);
    if (!h || !step(&h, sd_op_conv2d(h, r->in_conv_w, r->in_conv_b, 1, 1, 1))) goto done;
    if (!(e = sd_op_linear(emb_silu, r->emb_w, r->emb_b))) goto done; /* [N, Cout] */
    if (!step(&h, sd_op_add_channel(h, e))) goto done;
    sd_bt_free(e);
    e = NULL;
    /* out_layers: GroupNorm, SiLU, Dropout (identity at inference), conv */
    if (!step(&h, sd_op_group_norm(h, 32, r->out_norm_w, r->out_norm_b, 1e-5f, 1))) goto done;
    if (!step(&h, sd_op_conv2d(h, r->out_conv_w, r->out_conv_b, 1, 1, 1))) goto done;
    if (r->skip_w) {
        if (!(s = sd_op_conv2d(x, r->skip_w, r->skip_b, 1, 0, 0))) goto done;
        out = sd_op_add(s, h);
    } else {
        out = sd_op_add(x, h);
    }
done:
    sd_bt_free(h);
    sd_bt_free(e);
    sd_bt_free(s);
    return out;
}

/* x: [N, L, C] normalized input; kv: [N, Lk, Ckv] -> [N, L, C] (to_out applied). */
static sd_bt *attention(const unet_attn *a, sd_bt *x, sd_bt *kv, int heads) {
    sd_bt *q = sd_op_linear(x, a->q, NULL);
    sd_bt *k = q ? sd_op_linear(kv, a->k, NULL) : NULL;
    sd_bt *v = k ? sd_op_linear(kv, a->v, NULL) : NULL;
    sd_bt *o = v ? sd_op_attention(q, k, v, heads, 0) : NULL;
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    if (o) step(&o, sd_op_linear(o, a->out_w, a->out_b));
    return o;
}

/* attn1 under a replace patch: the patch computes the attention from the
 * projections, to_out follows. ATTN1_IDENTITY returns v (to_q / to_k are
 * computed by ComfyUI and unused: left out). */
static sd_bt *attention_replaced(const unet_attn *a, const sd_unet_patch *pt, sd_bt *x) {
    (void)pt; /* SD_UNET_PATCH_ATTN1_IDENTITY, the only kind */
    sd_bt *o = sd_op_linear(x, a->v, NULL);
    if (o) step(&o, sd_op_linear(o, a->out_w, a->out_b));
    return o;
}

/* BasicTransformerBlock on h: [N, L, C] (borrowed) -> new [N, L, C]:
 * h += attn1(norm1 h); h += attn2(norm2 h, context); h += ff(norm3 h).
 * rep: attn1's replace patch or NULL. */
static sd_bt *tblock_forward(const unet_tblock *b, sd_bt *h_in, sd_bt *context, int heads,
                             const sd_unet_patch *rep) {
    sd_bt *h = NULL, *n = NULL, *a = NULL;
    if (!(n = sd_op_layer_norm(h_in, b->norm1_w, b->norm1_b, 1e-5f))) goto fail;
    if (!(a = rep ? attention_replaced(&b->attn1, rep, n) : attention(&b->attn1, n, n, heads))) goto fail;
    if (!(h = sd_op_add(a, h_in))) goto fail;
    if (!step(&n, sd_op_layer_norm(h, b->norm2_w, b->norm2_b, 1e-5f))) goto fail;
    if (!step(&a, attention(&b->attn2, n, context, heads))) goto fail;
    if (!step(&h, sd_op_add(a, h))) goto fail;
    /* FeedForward: GEGLU (Linear to 2F, a * gelu(gate)), Linear back to C */
    if (!step(&n, sd_op_layer_norm(h, b->norm3_w, b->norm3_b, 1e-5f))) goto fail;
    if (!step(&a, sd_op_linear(n, b->ff_in_w, b->ff_in_b))) goto fail;
    if (!step(&a, sd_op_geglu(a))) goto fail;
    if (!step(&a, sd_op_linear(a, b->ff_out_w, b->ff_out_b))) goto fail;
    if (!step(&h, sd_op_add(a, h))) goto fail;
    sd_bt_free(n);
    sd_bt_free(a);
    return h;
fail:
    sd_bt_free(n);
    sd_bt_free(a);
    sd_bt_free(h);
    return NULL;
}

/* x: [N, C, H, W], context: [N, L, D] -> [N, C, H, W]. */
sd_bt *sd_unet_st_forward(const unet_st *s, sd_bt *x, sd_bt *context, const sd_unet_patches *ps,
                          sd_unet_block_kind block, int block_id) {
    int64_t n = x->shape[0], c = x->shape[1], hh = x->shape[2], ww = x->shape[3];
    int64_t seq[3] = {n, hh * ww, c}, img[4] = {n, hh, ww, c};
    const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    sd_bt *h = sd_op_group_norm(x, 32, s->norm_w, s->norm_b, 1e-6f, 0), *p = NULL, *out = NULL;
    if (!h) return NULL;
    if (!s->linear && !step(&h, sd_op_conv2d(h, s->proj_in_w, s->proj_in_b, 1, 0, 0))) goto done;
    /* [N, C, H, W] -> [N, H*W, C] */
    if (!step(&h, sd_op_permute(h, to_nhwc))) goto done;
    if (!step(&h, reshaped(h, 3, seq))) goto done;
    if (s->linear && !step(&h, sd_op_linear(h, s->proj_in_w, s->proj_in_b))) goto done;
    for (int k = 0; k < s->depth; k++)
        if (!step(&h, tblock_forward(&s->blocks[k], h, context, s->heads,
                                     sd_unet_patch_attn1(ps, block, block_id, k))))
            goto done;
    if (s->linear && !step(&h, sd_op_linear(h, s->proj_out_w, s->proj_out_b))) goto done;
    /* [N, H*W, C] -> [N, C, H, W] */
    if (!(p = sd_bt_view(h, 4, img))) goto done;
    if (!step(&p, sd_op_permute(p, to_nchw))) goto done;
    if (!step(&h, p)) { p = NULL; goto done; }
    p = NULL;
    if (!s->linear && !step(&h, sd_op_conv2d(h, s->proj_out_w, s->proj_out_b, 1, 0, 0))) goto done;
    out = sd_op_add(h, x);
done:
    sd_bt_free(p);
    sd_bt_free(h);
    return out;
}
