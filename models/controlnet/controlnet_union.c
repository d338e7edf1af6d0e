/* controlnet_union.c - the Union ControlNet's parts (xinsir
 * controlnet-union-sdxl-1.0 and its ProMax version), as ComfyUI's
 * comfy.cldm.cldm.ControlNet builds them when load_controlnet_state_dict
 * finds control_add_embedding.linear_1.bias in a diffusers-layout file:
 *
 *   task_embedding              [T, W]   one row per control type
 *   transformer_layes.0.*       one ResBlockUnionControlnet: pre-LN
 *                               self-attention (in_proj [3W, W], 8 heads)
 *                               and a QuickGELU MLP (4W), each residual
 *   spatial_ch_projs            Linear(W, W)
 *   control_add_embedding       Linear(T * 256, time_embed_dim), SiLU,
 *                               Linear(time_embed_dim, time_embed_dim)
 *
 * T = task_embedding's rows (8 for ProMax, 6 for the first release).
 * ComfyUI hard-codes W = 320, the SDXL model_channels the merged features
 * are added to; here W is read from the file and must equal the ControlNet's
 * model_channels (any other width cannot be added, and ComfyUI refuses such
 * a file as a shape mismatch). The 8 heads and the 256-wide per-type
 * embedding are ComfyUI's constants. */
#include "models/controlnet/controlnet_internal.h"
#include "models/checkpoint/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNION_HEADS 8
#define UNION_TYPE_DIM 256 /* control_add_embed_dim */

const char *const sd_controlnet_union_types[] = {
    "openpose", "depth", "hed/pidi/scribble/ted", "canny/lineart/anime_lineart/mlsd",
    "normal",   "segment", "tile", "repaint", NULL};

int sd_controlnet_union_type(const char *name) {
    for (int i = 0; name && sd_controlnet_union_types[i]; i++)
        if (strcmp(sd_controlnet_union_types[i], name) == 0) return i;
    return -1;
}

int sd_controlnet_union_n_types(const sd_controlnet *cn) { return cn ? cn->n_types : 0; }

int sd_cn_union_present(sd_st_file *f, const char *prefix) {
    return sd_unet_find(f, prefix, "control_add_embedding.linear_1.bias") != NULL;
}

static void refuse(unet_loader *ld, const char *msg) {
    if (ld->failed) return;
    ld->failed = 1;
    sd_error_set(ld->err, SD_ERR_FORMAT, "%s: Union ControlNet: %s", sd_st_path(ld->w.file), msg);
}

void sd_cn_union_bind(unet_loader *ld, sd_controlnet *cn) {
    const sd_unet_config *c = &cn->enc->cfg;
    int64_t s[SD_MAX_DIMS];
    int nd = sd_weights_shape(&ld->w, "task_embedding", s);
    char msg[160];
    if (nd != 2 || s[0] < 1 || s[0] > 4096) {
        refuse(ld, "task_embedding is not [control types, width]");
        return;
    }
    int t = (int)s[0], w = (int)s[1];
    if (w != c->model_channels || w % UNION_HEADS) {
        snprintf(msg, sizeof msg, "task_embedding is %d wide; it must be the model_channels %d (a multiple of %d)",
                 w, c->model_channels, UNION_HEADS);
        refuse(ld, msg);
        return;
    }
    cn->n_types = t;
    const char *l0 = "transformer_layes.0.";
    cn->task_emb = sd_unet_get(ld, 2, t, w, 0, 0, "task_embedding", "");
    char b[64];
    snprintf(b, sizeof b, "%sln_1", l0);
    cn->ln1_w = sd_unet_get(ld, 1, w, 0, 0, 0, b, ".weight");
    cn->ln1_b = sd_unet_get(ld, 1, w, 0, 0, 0, b, ".bias");
    snprintf(b, sizeof b, "%sln_2", l0);
    cn->ln2_w = sd_unet_get(ld, 1, w, 0, 0, 0, b, ".weight");
    cn->ln2_b = sd_unet_get(ld, 1, w, 0, 0, 0, b, ".bias");
    snprintf(b, sizeof b, "%sattn.in_proj", l0);
    cn->qkv_w = sd_unet_get(ld, 2, 3 * w, w, 0, 0, b, ".weight");
    cn->qkv_b = sd_unet_get(ld, 1, 3 * w, 0, 0, 0, b, ".bias");
    snprintf(b, sizeof b, "%sattn.out_proj", l0);
    cn->out_w = sd_unet_get(ld, 2, w, w, 0, 0, b, ".weight");
    cn->out_b = sd_unet_get(ld, 1, w, 0, 0, 0, b, ".bias");
    snprintf(b, sizeof b, "%smlp.c_fc", l0);
    cn->fc_w = sd_unet_get(ld, 2, 4 * w, w, 0, 0, b, ".weight");
    cn->fc_b = sd_unet_get(ld, 1, 4 * w, 0, 0, 0, b, ".bias");
    snprintf(b, sizeof b, "%smlp.c_proj", l0);
    cn->proj_w = sd_unet_get(ld, 2, w, 4 * w, 0, 0, b, ".weight");
    cn->proj_b = sd_unet_get(ld, 1, w, 0, 0, 0, b, ".bias");
    cn->sp_w = sd_unet_get(ld, 2, w, w, 0, 0, "spatial_ch_projs", ".weight");
    cn->sp_b = sd_unet_get(ld, 1, w, 0, 0, 0, "spatial_ch_projs", ".bias");
    int ted = c->time_embed_dim;
    cn->cae1_w = sd_unet_get(ld, 2, ted, (int64_t)t * UNION_TYPE_DIM, 0, 0, "control_add_embedding.linear_1", ".weight");
    cn->cae1_b = sd_unet_get(ld, 1, ted, 0, 0, 0, "control_add_embedding.linear_1", ".bias");
    cn->cae2_w = sd_unet_get(ld, 2, ted, ted, 0, 0, "control_add_embedding.linear_2", ".weight");
    cn->cae2_b = sd_unet_get(ld, 1, ted, 0, 0, 0, "control_add_embedding.linear_2", ".bias");
}

void sd_cn_union_free(sd_controlnet *cn) {
    sd_bt *all[] = {cn->task_emb, cn->ln1_w, cn->ln1_b, cn->ln2_w, cn->ln2_b, cn->qkv_w, cn->qkv_b,
                    cn->out_w,    cn->out_b, cn->fc_w,  cn->fc_b,  cn->proj_w, cn->proj_b, cn->sp_w,
                    cn->sp_b,     cn->cae1_w, cn->cae1_b, cn->cae2_w, cn->cae2_b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sd_bt_free(all[i]);
}

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

sd_bt *sd_cn_union_add_embedding(sd_controlnet *cn, int type) {
    int t = cn->n_types;
    /* c_type: one-hot over the types (all zero for "auto"), each entry
     * through timestep_embedding(256), flattened to [1, T * 256] */
    float *onehot = calloc((size_t)t, sizeof *onehot);
    sd_tensor *e = sd_tensor_new4(SD_F32, 2, 1, (int64_t)t * UNION_TYPE_DIM, 0, 0);
    sd_bt *x = NULL;
    if (onehot && e) {
        if (type >= 0 && type < t) onehot[type] = 1.0f;
        sd_unet_timestep_embedding(onehot, t, UNION_TYPE_DIM, sd_tensor_f32(e));
        x = sd_bt_from_host(cn->be, e, SD_F32);
    }
    free(onehot);
    sd_tensor_unref(e);
    if (!x) return NULL;
    if (!step(&x, sd_op_linear(x, cn->cae1_w, cn->cae1_b))) return NULL;
    if (!step(&x, sd_op_silu(x))) return NULL;
    if (!step(&x, sd_op_linear(x, cn->cae2_w, cn->cae2_b))) return NULL;
    return x; /* [1, time_embed_dim] */
}

/* One ResBlockUnionControlnet over x [N, L, W] (new tensor). */
static sd_bt *union_block(sd_controlnet *cn, sd_bt *x) {
    int64_t w = x->shape[2];
    sd_bt *h = sd_op_layer_norm(x, cn->ln1_w, cn->ln1_b, 1e-5f), *q = NULL, *k = NULL, *v = NULL;
    if (!h || !step(&h, sd_op_linear(h, cn->qkv_w, cn->qkv_b))) return NULL;
    q = sd_op_slice(h, 2, 0, w);
    k = sd_op_slice(h, 2, w, 2 * w);
    v = sd_op_slice(h, 2, 2 * w, 3 * w);
    sd_bt *a = q && k && v ? sd_op_attention(q, k, v, UNION_HEADS, 0) : NULL;
    sd_bt_free(q), sd_bt_free(k), sd_bt_free(v), sd_bt_free(h);
    if (!a || !step(&a, sd_op_linear(a, cn->out_w, cn->out_b))) return NULL;
    sd_bt *r = sd_op_add(x, a);
    sd_bt_free(a);
    if (!r) return NULL;
    h = sd_op_layer_norm(r, cn->ln2_w, cn->ln2_b, 1e-5f);
    if (h) step(&h, sd_op_linear(h, cn->fc_w, cn->fc_b));
    if (h) step(&h, sd_op_quick_gelu(h));
    if (h) step(&h, sd_op_linear(h, cn->proj_w, cn->proj_b));
    if (h) step(&r, sd_op_add(r, h));
    else step(&r, NULL);
    sd_bt_free(h);
    return r;
}

sd_bt *sd_cn_union_merge(sd_controlnet *cn, sd_bt *g, int type) {
    int64_t n = g->shape[0], w = g->shape[1], hw = g->shape[2] * g->shape[3];
    /* feat_seq = mean over (h, w): [N, W, hw] @ ones [N, hw, 1] / hw */
    sd_tensor *ones = sd_tensor_new4(SD_F32, 3, n, hw, 1, 0);
    if (!ones) return NULL;
    for (int64_t i = 0; i < n * hw; i++) sd_tensor_f32(ones)[i] = 1.0f;
    sd_bt *o = sd_bt_from_host(cn->be, ones, SD_F32);
    sd_tensor_unref(ones);
    int64_t flat[3] = {n, w, hw};
    sd_bt *gv = o ? sd_bt_view(g, 3, flat) : NULL;
    sd_bt *feat = gv ? sd_op_matmul(gv, o, 0, 1.0f / (float)hw) : NULL;
    sd_bt_free(gv), sd_bt_free(o);
    if (!feat) return NULL;
    /* + task_embedding[type], as one token per batch item: [N, 1, W] (a
     * row gather, which widens a table kept in its stored dtype) */
    int64_t tok[3] = {n, 1, w};
    sd_tensor *ids = sd_tensor_new4(SD_I32, 2, n, 1, 0, 0);
    for (int64_t i = 0; ids && i < n; i++) ((int32_t *)ids->data)[i] = type;
    sd_bt *bid = ids ? sd_bt_from_host(cn->be, ids, SD_I32) : NULL;
    sd_tensor_unref(ids);
    sd_bt *te = bid ? sd_op_embedding(cn->task_emb, bid) : NULL;
    sd_bt *fv = sd_bt_view(feat, 3, tok);
    sd_bt *x = te && fv ? sd_op_add(fv, te) : NULL;
    sd_bt_free(bid), sd_bt_free(te), sd_bt_free(fv), sd_bt_free(feat);
    if (!x) return NULL;
    if (!step(&x, union_block(cn, x))) return NULL;
    if (!step(&x, sd_op_linear(x, cn->sp_w, cn->sp_b))) return NULL;
    int64_t nc[2] = {n, w};
    sd_bt *alpha = sd_bt_view(x, 2, nc);
    sd_bt *r = alpha ? sd_op_add_channel(g, alpha) : NULL;
    sd_bt_free(alpha), sd_bt_free(x);
    return r;
}
