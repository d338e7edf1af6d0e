/* clip_block.c - one pre-LN CLIP transformer layer (clip_block.h). */
#include "models/text/clip_block.h"

#include <stdio.h>

const sd_clip_block_names sd_clip_block_hf = {
    "encoder.layers.%d.layer_norm1.weight", "encoder.layers.%d.layer_norm1.bias",
    "encoder.layers.%d.layer_norm2.weight", "encoder.layers.%d.layer_norm2.bias",
    "encoder.layers.%d.mlp.fc1.weight", "encoder.layers.%d.mlp.fc1.bias",
    "encoder.layers.%d.mlp.fc2.weight", "encoder.layers.%d.mlp.fc2.bias",
    "encoder.layers.%d.self_attn.out_proj.weight", "encoder.layers.%d.self_attn.out_proj.bias",
    "encoder.layers.%d.self_attn.q_proj.weight", "encoder.layers.%d.self_attn.q_proj.bias",
    "encoder.layers.%d.self_attn.k_proj.weight", "encoder.layers.%d.self_attn.k_proj.bias",
    "encoder.layers.%d.self_attn.v_proj.weight", "encoder.layers.%d.self_attn.v_proj.bias",
    NULL, NULL,
};

const sd_clip_block_names sd_clip_block_openclip = {
    "transformer.resblocks.%d.ln_1.weight", "transformer.resblocks.%d.ln_1.bias",
    "transformer.resblocks.%d.ln_2.weight", "transformer.resblocks.%d.ln_2.bias",
    "transformer.resblocks.%d.mlp.c_fc.weight", "transformer.resblocks.%d.mlp.c_fc.bias",
    "transformer.resblocks.%d.mlp.c_proj.weight", "transformer.resblocks.%d.mlp.c_proj.bias",
    "transformer.resblocks.%d.attn.out_proj.weight", "transformer.resblocks.%d.attn.out_proj.bias",
    NULL, NULL, NULL, NULL, NULL, NULL,
    "transformer.resblocks.%d.attn.in_proj_weight", "transformer.resblocks.%d.attn.in_proj_bias",
};

/* The first failure stops later fetches; err keeps it. */
typedef struct binder {
    const sd_weights *w;
    sd_error *err;
    int failed;
} binder;

static sd_bt *get(binder *b, int ndim, int64_t d0, int64_t d1, const char *fmt, int i) {
    if (b->failed) return NULL;
    int64_t shape[2] = {d0, d1};
    sd_bt *t = sd_weights_getf(b->w, b->err, ndim, shape, fmt, i);
    if (!t) b->failed = 1;
    return t;
}

sd_status sd_clip_block_bind(const sd_weights *w, const sd_clip_block_names *nm, int64_t W,
                             int64_t F, int i, sd_clip_block *l, sd_error *err) {
    sd_error local;
    binder b = {w, err ? err : &local, 0};
    l->ln1_w = get(&b, 1, W, 0, nm->ln1_w, i);
    l->ln1_b = get(&b, 1, W, 0, nm->ln1_b, i);
    if (nm->qkv_w) {
        l->qkv_w = get(&b, 2, 3 * W, W, nm->qkv_w, i);
        l->qkv_b = get(&b, 1, 3 * W, 0, nm->qkv_b, i);
    } else {
        l->q_w = get(&b, 2, W, W, nm->q_w, i);
        l->q_b = get(&b, 1, W, 0, nm->q_b, i);
        l->k_w = get(&b, 2, W, W, nm->k_w, i);
        l->k_b = get(&b, 1, W, 0, nm->k_b, i);
        l->v_w = get(&b, 2, W, W, nm->v_w, i);
        l->v_b = get(&b, 1, W, 0, nm->v_b, i);
    }
    l->o_w = get(&b, 2, W, W, nm->o_w, i);
    l->o_b = get(&b, 1, W, 0, nm->o_b, i);
    l->ln2_w = get(&b, 1, W, 0, nm->ln2_w, i);
    l->ln2_b = get(&b, 1, W, 0, nm->ln2_b, i);
    l->fc1_w = get(&b, 2, F, W, nm->fc1_w, i);
    l->fc1_b = get(&b, 1, F, 0, nm->fc1_b, i);
    l->fc2_w = get(&b, 2, W, F, nm->fc2_w, i);
    l->fc2_b = get(&b, 1, W, 0, nm->fc2_b, i);
    return b.failed ? b.err->code : SD_OK;
}

void sd_clip_block_free(sd_clip_block *l) {
    if (!l) return;
    sd_bt *all[] = {l->ln1_w, l->ln1_b, l->q_w, l->q_b, l->k_w, l->k_b, l->v_w, l->v_b,
                    l->qkv_w, l->qkv_b, l->o_w, l->o_b, l->ln2_w, l->ln2_b,
                    l->fc1_w, l->fc1_b, l->fc2_w, l->fc2_b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sd_bt_free(all[i]);
}

/* Replace *h by next (freeing the old value); 0 when next is NULL. */
static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

/* Self-attention on h [N, L, W] (already layer_norm1'd) -> out_proj output. */
static sd_bt *self_attention(const sd_clip_block *l, int heads, int causal, sd_bt *h) {
    sd_bt *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    if (l->qkv_w) {
        sd_bt *qkv = sd_op_linear(h, l->qkv_w, l->qkv_b); /* [N, L, 3W]: q | k | v */
        if (qkv) {
            int64_t W = qkv->shape[2] / 3;
            q = sd_op_slice(qkv, 2, 0, W);
            k = sd_op_slice(qkv, 2, W, 2 * W);
            v = sd_op_slice(qkv, 2, 2 * W, 3 * W);
        }
        sd_bt_free(qkv);
    } else {
        q = sd_op_linear(h, l->q_w, l->q_b);
        k = sd_op_linear(h, l->k_w, l->k_b);
        v = sd_op_linear(h, l->v_w, l->v_b);
    }
    if (q && k && v) o = sd_op_attention(q, k, v, heads, causal);
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    if (o) step(&o, sd_op_linear(o, l->o_w, l->o_b));
    return o;
}

sd_bt *sd_clip_block_forward(const sd_clip_block *l, int heads, sd_clip_act act, int causal,
                             sd_bt *x) {
    sd_bt *h = NULL, *a = NULL, *y = NULL;
    if (!(h = sd_op_layer_norm(x, l->ln1_w, l->ln1_b, 1e-5f))) goto fail;
    if (!(a = self_attention(l, heads, causal, h))) goto fail;
    if (!(y = sd_op_add(x, a))) goto fail;
    if (!step(&h, sd_op_layer_norm(y, l->ln2_w, l->ln2_b, 1e-5f))) goto fail;
    if (!step(&h, sd_op_linear(h, l->fc1_w, l->fc1_b))) goto fail;
    if (!step(&h, act == SD_CLIP_ACT_GELU ? sd_op_gelu(h) : sd_op_quick_gelu(h))) goto fail;
    if (!step(&h, sd_op_linear(h, l->fc2_w, l->fc2_b))) goto fail;
    if (!step(&y, sd_op_add(y, h))) goto fail;
    sd_bt_free(h);
    sd_bt_free(a);
    return y;
fail:
    sd_bt_free(h);
    sd_bt_free(a);
    sd_bt_free(y);
    return NULL;
}
