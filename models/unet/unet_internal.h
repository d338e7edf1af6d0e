/* unet_internal.h - the UNet's module structs, shared by the unet_*.c files.
 * Not a public contract: use models/unet/unet.h. */
#ifndef SD_UNET_INTERNAL_H
#define SD_UNET_INTERNAL_H

#include "models/unet/unet.h"
#include "models/checkpoint/weights.h"

/* ResBlock: GroupNorm+SiLU+conv3x3, + emb projection, GroupNorm+SiLU+conv3x3,
 * plus the input (through a 1x1 conv when the width changes). */
typedef struct unet_res {
    int cin, cout;
    sd_bt *in_norm_w, *in_norm_b, *in_conv_w, *in_conv_b;
    sd_bt *emb_w, *emb_b;
    sd_bt *out_norm_w, *out_norm_b, *out_conv_w, *out_conv_b;
    sd_bt *skip_w, *skip_b; /* NULL when cin == cout */
} unet_res;

typedef struct unet_attn {
    sd_bt *q, *k, *v, *out_w, *out_b; /* q/k/v have no bias */
} unet_attn;

typedef struct unet_tblock {
    sd_bt *norm1_w, *norm1_b, *norm2_w, *norm2_b, *norm3_w, *norm3_b;
    unet_attn attn1, attn2;
    sd_bt *ff_in_w, *ff_in_b, *ff_out_w, *ff_out_b; /* GEGLU proj, output Linear */
} unet_tblock;

/* SpatialTransformer: GroupNorm(eps 1e-6), proj_in, blocks, proj_out, + x. */
typedef struct unet_st {
    int ch, heads, depth, linear;
    sd_bt *norm_w, *norm_b, *proj_in_w, *proj_in_b, *proj_out_w, *proj_out_b;
    unet_tblock *blocks;
} unet_st;

/* UL_CONV: conv_in (3x3, stride 1); UL_DOWN: 3x3 stride 2; UL_UP: nearest x2 + 3x3. */
typedef enum unet_layer_kind { UL_RES = 1, UL_ST, UL_CONV, UL_DOWN, UL_UP } unet_layer_kind;

typedef struct unet_layer {
    unet_layer_kind kind;
    unet_res *res;
    unet_st *st;
    sd_bt *conv_w, *conv_b; /* UL_CONV / UL_DOWN / UL_UP */
} unet_layer;

/* One TimestepEmbedSequential: at most ResBlock, SpatialTransformer, resample. */
typedef struct unet_block {
    int n;
    unet_layer layers[3];
} unet_block;

struct sd_unet {
    sd_backend *be;
    sd_unet_config cfg;
    sd_bt *time_w0, *time_b0, *time_w2, *time_b2;
    sd_bt *label_w0, *label_b0, *label_w2, *label_b2; /* SDXL */
    int n_in, n_out;
    unet_block in[SD_UNET_MAX_BLOCKS];
    unet_block middle;
    unet_block out[SD_UNET_MAX_BLOCKS];
    sd_bt *out_norm_w, *out_norm_b, *out_conv_w, *out_conv_b;
    sd_unet_tap_fn tap;
    void *tap_user;
};

/* Where a block sits, for its patches: the MODEL's patches (NULL = none),
 * the block (kind, id), the UNet input's height and width
 * (transformer_options["original_shape"]), the run's generator and where a
 * patch's own error goes. */
typedef struct unet_block_at {
    const sd_unet_patches *ps;
    sd_unet_block_kind kind;
    int id;
    int64_t orig_h, orig_w;
    struct sd_rng *rng;
    sd_error *err;
    sd_unet_attn_record *rec;
    /* the entry's middle_patch (NULL = none) and the forward's
     * transformer_index counter (advanced after each SpatialTransformer) */
    const sd_unet_middle_patch *mid;
    int *tindex;
} unet_block_at;

/* Forward of single layers (unet_blocks.c). Inputs are borrowed; results
 * are new tensors, NULL on failure (the backend's sticky error is set, or
 * at->err for a patch's own failure). at: where the SpatialTransformer sits
 * (its attn1 patches; at->rec: where an attn1 record patch records,
 * sd_unet_control.record, NULL = nowhere); NULL = no patches. */
sd_bt *sd_unet_res_forward(const unet_res *r, sd_bt *x, sd_bt *emb_silu);
sd_bt *sd_unet_st_forward(const unet_st *s, sd_bt *x, sd_bt *context, const unet_block_at *at);
/* ToMe's merge of one self-attention (unet_tome.c, SD_UNET_PATCH_TOME):
 * the token partition and, per batch item, which sources were kept
 * (unm_idx, na - r each), merged (src_idx, r each) and into which
 * destination (dst_idx). Owned arrays; sd_unet_tome_release frees them. */
typedef struct unet_tome {
    int active;
    int64_t B, N, C, r, na, nd;
    int64_t *a_idx, *b_idx;            /* source / destination tokens */
    int64_t *unm_idx, *src_idx, *dst_idx;
} unet_tome;
/* n [B, N, C] (borrowed): *merged = the merged queries [B, N - r, C] and t
 * filled (t->active), or *merged = NULL when ToMe leaves this attention
 * alone (draws nothing then). Draws from at->rng. Errors in at->err. */
sd_status sd_unet_tome_merge(const unet_block_at *at, double ratio, sd_bt *n, unet_tome *t, sd_bt **merged);
/* The attention's output o [B, N - r, C] (borrowed) spread back to
 * [B, N, C]: a new tensor, NULL with err set. */
sd_bt *sd_unet_tome_unmerge(const unet_tome *t, sd_bt *o, sd_error *err);
void sd_unet_tome_release(unet_tome *t);

/* The attn1 replace patch for the transformer block (block, block_id,
 * index), or NULL (unet_patch.c). */
const sd_unet_patch *sd_unet_patch_attn1(const sd_unet_patches *ps, sd_unet_block_kind block, int block_id,
                                         int index);

/* F.interpolate(x, size=(th, tw), mode="nearest") on x [N, C, H, W]
 * (PyTorch's legacy nearest: src = min(floor(dst * float(in / out)), in - 1),
 * exact halving / copy when out is 2 in / in), computed on the host and
 * uploaded in x's dtype: a new tensor, NULL with the backend's error set or
 * out of memory. For the Upsample layers whose target is not about twice
 * their input (only after PatchModelAddDownscale changed a size). */
sd_bt *sd_unet_nearest_resize(const sd_bt *x, int64_t th, int64_t tw);

/* The input block patches at `at` (SD_UNET_AT_INPUT_BLOCK or _AFTER_SKIP)
 * after input block block_id, in list order, on h (borrowed): *out is a new
 * tensor when one of them changed h, else NULL. */
sd_status sd_unet_patch_input_block(const sd_unet *u, const sd_unet_patches *ps, sd_unet_patch_at at, int block_id,
                                    float sigma, const sd_bt *h, sd_bt **out, sd_error *err);
/* The MODEL's output_block_patch functions (unet_patch.c) in order on the
 * output block's h and popped skip hsp: each may replace *h / *hsp (the
 * old tensor freed). */
sd_status sd_unet_patch_output_block(const sd_unet *u, const sd_unet_patches *ps, sd_bt **h, sd_bt **hsp,
                                     sd_error *err);

/* ---- detection helpers (unet_config.c), shared with the ControlNet ---- */

/* Entry for prefix + printf(fmt), or NULL. */
const sd_st_entry *sd_unet_find(sd_st_file *f, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Number of transformer_blocks.K under "<block>.transformer_blocks.". */
int sd_unet_count_tblocks(sd_st_file *f, const char *prefix, const char *block);

/* ---- weight binding (unet_load.c), shared with the ControlNet loader ---- */

/* Loader: the first failure is kept in err and later gets are skipped, so
 * the build code reads straight through and checks once. */
typedef struct unet_loader {
    sd_weights w;
    sd_error *err;
    int failed;
    const char *what; /* "UNet", "ControlNet": names the model in messages */
} unet_loader;

/* The weight base + suffix with a shape of ndim (<= 4) dims; NULL (and
 * ld->failed set) when missing or misshapen, or after an earlier failure. */
sd_bt *sd_unet_get(unet_loader *ld, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                   const char *base, const char *suffix);
/* Binds a ResBlock's weights under base into r (cin -> cout channels, emb_dim
 * wide embedding; the 1x1 skip conv only when cin != cout). */
void sd_unet_bind_res(unet_loader *ld, unet_res *r, const char *base, int cin, int cout, int emb_dim);
/* Sets c->kind and the attention head layout from the detected widths
 * (SD1: 8 heads; SD2/SDXL: 64-wide heads), as ComfyUI's supported_models
 * do; -1 (c untouched) for a layout none of them has. Shared by the UNet and
 * ControlNet detectors, which each name what they refuse. */
int sd_unet_config_set_family(sd_unet_config *c);
/* UNetModel.__init__'s encoder walk, shared by the UNet and the ControlNet
 * loaders: time (and label) embeddings, input blocks and the middle block,
 * bound into u from u->cfg. chans[i] receives the width of input block i's
 * output (u->n_in entries: the UNet's skips, the ControlNet's zero convs);
 * returns the width after the middle block. */
int sd_unet_bind_encoder(unet_loader *ld, sd_unet *u, int chans[SD_UNET_MAX_BLOCKS]);
/* Binds depth BasicTransformerBlocks "<base>.transformer_blocks.K" of width
 * ch (cross-attention from c->context_dim) into blocks[0 .. depth). */
void sd_unet_bind_tblocks(unet_loader *ld, unet_tblock *blocks, const char *base, int ch, int depth,
                          const sd_unet_config *c);

#endif
