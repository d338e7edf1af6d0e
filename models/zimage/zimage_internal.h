/* zimage_internal.h - the NextDiT's module structs, shared by the
 * zimage_*.c files. Not a public contract: use models/zimage/zimage.h. */
#ifndef SD_ZIMAGE_INTERNAL_H
#define SD_ZIMAGE_INTERNAL_H

#include "models/zimage/zimage.h"
#include "models/dit/dit_params.h"

/* A Linear layer: w [out, in], b [out] or NULL. */
typedef struct zi_lin {
    sd_bt *w, *b;
} zi_lin;

/* JointTransformerBlock; ada.w NULL for the context refiner (no
 * modulation). */
typedef struct zi_block {
    zi_lin qkv, out;
    sd_bt *q_norm, *k_norm;              /* [head_dim] */
    zi_lin w1, w2, w3;                   /* SwiGLU feed-forward */
    sd_bt *attn_norm1, *attn_norm2;      /* RMSNorm weights [dim] */
    sd_bt *ffn_norm1, *ffn_norm2;
    zi_lin ada;                          /* adaLN_modulation.0: adaln_dim -> 4 dim */
} zi_block;

struct sd_zimage {
    sd_backend *be;
    sd_zimage_config cfg;
    zi_lin x_embedder;
    sd_bt *cap_norm; /* cap_embedder.0 (RMSNorm weight) */
    zi_lin cap_lin;  /* cap_embedder.1 */
    zi_lin t_mlp0, t_mlp2;
    zi_block *noise_refiner, *context_refiner, *layers;
    zi_lin final_ada, final_linear; /* final_layer.adaLN_modulation.1, .linear */
    sd_bt *x_pad, *cap_pad;         /* [1, dim] or NULL */
    sd_dit_params params; /* every weight by its key (sd_*_param) */
    sd_bt *one; /* [1] = 1.0: the "1 +" of every modulation scale */
    sd_zimage_tap_fn tap;
    void *tap_user;
};

#endif
