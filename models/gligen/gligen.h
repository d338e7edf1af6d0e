/* gligen.h - GLIGEN grounding models (ComfyUI's GLIGEN, comfy/gligen.py and
 * comfy.sd.load_gligen; gligen_sd14_textbox_pruned and its kin).
 *
 * A GLIGEN file holds
 *   - a position net (position_net.*): each box (x1, y1, x2, y2 in [0, 1])
 *     through a Fourier embedding (8 frequencies 100^(k/8), sin and cos of
 *     each coordinate: 64 values), concatenated with the box's pooled text
 *     embedding, through Linear(in + 64, 512), SiLU, Linear(512, 512), SiLU,
 *     Linear(512, key_dim): the grounding tokens "objs" [B, 30, key_dim].
 *     Unused slots (mask 0) take the learned null_positive_feature /
 *     null_position_feature instead;
 *   - one gated self-attention fuser (GatedSelfAttentionDense) per
 *     transformer block of the UNet, keyed "<block>.<i>. ... .fuser.*": x
 *     [B, L, q] becomes x + tanh(alpha_attn) * attn(norm1([x, linear(objs)]))
 *     [:, :L] and then x + tanh(alpha_dense) * ff(norm2(x)) (GEGLU
 *     feed-forward, 4q inner; LayerNorm eps 1e-5).
 * Fusers are listed as ComfyUI's load_gligen lists them: for input_blocks,
 * middle_block, output_blocks and b = 0..19, the keys holding "<a>.<b>." and
 * ".fuser." form one fuser; fuser i serves the UNet's i-th
 * SpatialTransformer (transformer_index). Widths come from the shapes;
 * what ComfyUI hard-codes is kept: 8 heads of q/8 channels when the
 * fuser's context width (linear.weight's columns) is 768 (SD1.x), else
 * 64-channel heads (q/64 of them), a 512-wide position MLP, 8 frequencies,
 * 30 boxes. Every tensor ComfyUI reads must be present with its shape
 * (ComfyUI's strict=False load would leave a missing one random).
 *
 * Ownership: sd_gligen_load returns a model owning its weights on the
 * backend (sd_gligen_free); the file may be closed afterwards. */
#ifndef SD_GLIGEN_H
#define SD_GLIGEN_H

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/unet/unet.h"

#define SD_GLIGEN_MAX_OBJS 30   /* Gligen.max_objs */
#define SD_GLIGEN_MAX_FUSERS 60 /* 3 block kinds x 20 block ids */
#define SD_GLIGEN_POSITION_DIM 64 /* 8 frequencies x sin/cos x 4 coordinates */
#define SD_GLIGEN_HIDDEN 512

typedef struct sd_gligen sd_gligen;

typedef struct sd_gligen_config {
    int n_fusers;
    int key_dim;  /* the fusers' context width = the position net's output */
    int in_dim;   /* the pooled text embedding width the position net takes */
    int query_dim[SD_GLIGEN_MAX_FUSERS]; /* each fuser's (its transformer's) width */
    int heads[SD_GLIGEN_MAX_FUSERS], head_dim[SD_GLIGEN_MAX_FUSERS];
} sd_gligen_config;

/* Reads the layout from key names and shapes. A file without
 * position_net.null_positive_feature or without any fuser is not a GLIGEN
 * file (SD_ERR_UNSUPPORTED naming the file); shapes that do not fit
 * ComfyUI's modules are SD_ERR_FORMAT naming the key. */
sd_status sd_gligen_probe(sd_st_file *f, sd_gligen_config *cfg, sd_error *err);
sd_status sd_gligen_load(sd_backend *be, sd_st_file *f, sd_gligen **out, sd_error *err);
/* Open (.safetensors or a torch checkpoint), probe / load. */
sd_status sd_gligen_load_file(sd_backend *be, const char *path, sd_gligen **out, sd_error *err);
sd_status sd_gligen_probe_file(const char *path, sd_error *err);
void sd_gligen_free(sd_gligen *g); /* NULL-safe */
const sd_gligen_config *sd_gligen_get_config(const sd_gligen *g);

/* PositionNet.forward: boxes [B, N, 4], masks [B, N], embeddings [B, N, in]
 * (F32, host) -> *objs [B, N, key_dim] on the backend (new). */
sd_status sd_gligen_position_net(sd_gligen *g, const sd_tensor *boxes, const sd_tensor *masks,
                                 const sd_tensor *embeddings, sd_bt **objs, sd_error *err);

/* One box of GLIGENTextBoxApply: the text's pooled output [1, in] (borrowed)
 * and the box in latent pixels (height // 8, width // 8, y // 8, x // 8). */
typedef struct sd_gligen_box {
    const sd_tensor *pooled;
    int64_t h, w, y, x;
} sd_gligen_box;

/* Gligen.set_position for a model input of batch B and lh x lw latent
 * pixels: box i becomes (x / lw, y / lh, (x + w) / lw, (y + h) / lh) with
 * mask 1, the other slots up to 30 zeros with mask 0; the same for every
 * item. n > 30 is SD_ERR_INVALID (ComfyUI's masks have 30 slots). n = 0 is
 * Gligen.set_empty. *objs: the position net's output [B, 30, key_dim]. */
sd_status sd_gligen_set_position(sd_gligen *g, const sd_gligen_box *boxes, int n, int64_t B, int64_t lh,
                                 int64_t lw, sd_bt **objs, sd_error *err);

/* GatedSelfAttentionDense number `index` on x [B, L, q] with objs
 * [B, 30, key_dim] (both borrowed): *out new [B, L, q]. An index past the
 * file's fusers or a width that is not the fuser's is SD_ERR_INVALID. */
sd_status sd_gligen_fuse(const sd_gligen *g, int index, sd_bt *x, sd_bt *objs, sd_bt **out, sd_error *err);

/* The middle_patch ComfyUI's _set_position closure is: fuser
 * transformer_index on x with these objs. `call` must outlive the forward
 * that uses *out. */
typedef struct sd_gligen_call {
    const sd_gligen *g;
    sd_bt *objs; /* borrowed */
} sd_gligen_call;
void sd_gligen_middle_patch(sd_gligen_call *call, sd_unet_middle_patch *out);

/* Whether g fits a UNet with the given SpatialTransformer widths (in
 * transformer_index order, sd_unet_transformer_widths): a fuser for each,
 * of its width. SD_ERR_INVALID saying which does not. */
sd_status sd_gligen_check_fit(const sd_gligen *g, const int *widths, int n, sd_error *err);

#endif
