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

#endif
