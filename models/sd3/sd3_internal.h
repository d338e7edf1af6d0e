/* sd3_internal.h - the MMDiT's module structs, shared by the sd3_*.c files.
 * Not a public contract: use models/sd3/sd3.h. */
#ifndef SD_SD3_INTERNAL_H
#define SD_SD3_INTERNAL_H

#include "models/sd3/sd3.h"
#include "models/dit/dit_params.h"

/* A Linear layer: w [out, in], b [out] or NULL. */
typedef struct sd3_lin {
    sd_bt *w, *b;
} sd3_lin;

/* SelfAttention: qkv, proj (w NULL when pre-only), per-head RMSNorm scales
 * [head_dim] (NULL without qk norm). */
typedef struct sd3_attn {
    sd3_lin qkv, proj;
    sd_bt *ln_q, *ln_k;
} sd3_attn;

/* DismantledBlock: one stream of a joint block. */
typedef struct sd3_stream {
    sd3_lin ada;     /* adaLN_modulation.1: hidden -> n_mods * hidden */
    sd3_attn attn;
    sd3_attn attn2;  /* MMDiT-X x_block only (qkv.w NULL otherwise) */
    sd3_lin fc1, fc2; /* Mlp (w NULL when pre-only) */
    int pre_only, self_attn;
} sd3_stream;

typedef struct sd3_joint {
    sd3_stream ctx, x;
} sd3_joint;

struct sd_sd3 {
    sd_backend *be;
    sd_sd3_config cfg;
    sd_bt *x_proj_w, *x_proj_b; /* x_embedder.proj: [hid, C, p, p], [hid] */
    sd_bt *pos_embed;           /* [1, M*M, hid] */
    sd3_lin t0, t2;             /* t_embedder.mlp.0 / .2 */
    sd3_lin y0, y2;             /* y_embedder.mlp.0 / .2 (w NULL without) */
    sd3_lin ctx_emb;            /* context_embedder */
    sd3_joint *blocks;
    sd3_lin final_ada, final_lin;
    sd_dit_params params; /* every weight by its key (sd_*_param) */
    sd_bt *one; /* [1] = 1.0: the "1 +" of every modulation scale */
    sd_sd3_tap_fn tap;
    void *tap_user;
};

/* ---- shared with the ControlNet (sd3_controlnet.c) ------------------------------ */

/* sd_sd3_detect / sd_sd3_load for an MMDiT trunk: controlnet = 1 reads a
 * ControlNet's (comfy.cldm.mmdit.ControlNet: an MMDiT built with
 * final_layer=False, so no final layer and no pre-only last block).
 * extra(ud, ld, m), when given, fetches more weights into the same table
 * before the load finishes. */
sd_status sd3_detect_ex(sd_st_file *f, const char *prefix, int controlnet, sd_sd3_config *cfg,
                        sd_error *err);
typedef void (*sd3_extra_fn)(void *ud, sd_dit_loader *ld, sd_sd3 *m);
sd_status sd3_load_ex(sd_backend *be, sd_st_file *f, const char *prefix, sd_dtype weight_dtype,
                      int controlnet, sd3_extra_fn extra, void *ud, sd_sd3 **out, sd_error *err);

/* The patch embedding PatchEmbed computes: x [B, C, H, W] padded to the
 * patch size (wrap-around) -> [B, h*w, hid] = patches @ w^T + b, w
 * [hid, C, p, p]. NULL once the backend's error is set. */
sd_bt *sd3_patch_embed(sd_bt *x, sd_bt *w, sd_bt *b, int64_t p);

/* DismantledBlock.forward(x, c) of a full block on its own (self-attention
 * over x alone; Stability's SD3.5 ControlNet blocks): x is taken (freed),
 * silu_c = SiLU(c) borrowed; the new tokens, NULL once the backend's error
 * is set. Uses m's heads, head size and hidden size. */
sd_bt *sd3_block_alone(sd_sd3 *m, const sd3_stream *s, sd_bt *x, sd_bt *silu_c);
/* t_embedder(timesteps) [N, hid] with m's t0/t2; Linear, SiLU, Linear. */
sd_bt *sd3_embed_t(sd_sd3 *m, const float *timesteps, int64_t N);
sd_bt *sd3_embed_mlp(sd_bt *x, const sd3_lin *a, const sd3_lin *b);

/* Called after joint block i (also after a skipped one, as ComfyUI adds the
 * control after a replaced block) with the image tokens *img [N, T, hid],
 * which it may replace (freeing the old); non-zero = stop (the backend's
 * error or *err says why). */
typedef int (*sd3_after_fn)(void *ud, int i, sd_bt **img, sd_error *err);

/* MMDiT.forward up to the final layer: *img = the image tokens after the
 * last joint block, *silu_c = SiLU(c) (the final layer's input); x_add
 * ([N, T, hid] or NULL) is added to the embedded patches after the position
 * embedding. Inputs checked as sd_sd3_forward documents. */
sd_status sd3_trunk(sd_sd3 *m, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y, sd_bt *x_add,
                    const int *skip, int n_skip, sd3_after_fn after, void *ud, sd_bt **img,
                    sd_bt **silu_c, sd_error *err);

/* ---- Stability's SD3.5 ControlNet (sd35_controlnet.c; sd3_controlnet.c delegates) ---- */

typedef struct sd3_stab sd3_stab;
/* Load a file with "transformer_blocks.0.adaLN_modulation.1.bias" (the
 * caller checked): config from y_embedder's weight as load_controlnet_sd35
 * infers it (hidden = rows = 64 x depth, heads = depth, double_y when
 * square). */
sd_status sd3_stab_load(sd_backend *be, sd_st_file *f, sd3_stab **out, sd_error *err);
void sd3_stab_free(sd3_stab *s);
const sd_sd3_config *sd3_stab_config(const sd3_stab *s); /* depth = its block count */
int sd3_stab_depth(const sd3_stab *s);
int sd3_stab_control_type(const sd3_stab *s);
int sd3_stab_double_y(const sd3_stab *s);
int sd3_stab_hint_channels(const sd3_stab *s);
/* ControlNetEmbedder.forward after ControlNetSD35.pre_run: main's
 * x_embedder (single y) or y_embedder (double y) stand in for the ones
 * pre_run copies. out[i] per block. */
sd_status sd3_stab_forward(sd3_stab *s, const sd_sd3 *main, sd_bt *x, const float *timesteps, sd_bt *y,
                           sd_bt *hint, sd_bt **out, sd_error *err);

#endif
