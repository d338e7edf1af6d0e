/* clip_internal.h - the CLIP text encoder's structs, shared by clip_load.c
 * and clip.c. Not a public contract: use models/text/clip.h. */
#ifndef SD_CLIP_INTERNAL_H
#define SD_CLIP_INTERNAL_H

#include "models/text/clip.h"
#include "models/checkpoint/weights.h"

/* One pre-LN transformer layer. HF layouts bind q/k/v separately; OpenCLIP
 * keeps the fused in_proj ([3W, W], rows q, k, v), applied as one linear
 * whose output is sliced. */
typedef struct clip_layer_w {
    sd_bt *ln1_w, *ln1_b;
    sd_bt *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;
    sd_bt *qkv_w, *qkv_b;
    sd_bt *o_w, *o_b;
    sd_bt *ln2_w, *ln2_b;
    sd_bt *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} clip_layer_w;

struct sd_clip {
    sd_backend *be;
    sd_clip_config cfg;
    sd_bt *tok_emb;        /* [vocab, W] */
    sd_bt *pos_emb;        /* [positions, W] */
    clip_layer_w *layer;   /* cfg.layers */
    sd_bt *final_w, *final_b;
    sd_bt *proj;           /* NULL, HF [P, W] (linear) or OpenCLIP [W, P] (matmul) */
    int proj_is_linear;
    sd_clip_tap_fn tap;
    void *tap_user;
};

#endif
