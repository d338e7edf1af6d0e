/* clip_internal.h - the CLIP text encoder's structs, shared by clip_load.c
 * and clip.c. Not a public contract: use models/text/clip.h. */
#ifndef SD_CLIP_INTERNAL_H
#define SD_CLIP_INTERNAL_H

#include "models/text/clip.h"
#include "models/checkpoint/weights.h"
#include "models/text/clip_block.h"

/* One pre-LN transformer layer (models/text/clip_block.h). */
typedef sd_clip_block clip_layer_w;

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
