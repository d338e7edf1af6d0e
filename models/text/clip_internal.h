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

/* The key names of a CLIP text encoder in one file layout, shared by the
 * loader (clip_load.c) and the exporter (clip_export.c). All but proj are
 * relative to where the layer keys hang from (HF: "text_model." under the
 * encoder's prefix, which `inner` spells for the exporter; OpenCLIP: the
 * prefix itself); proj is relative to the encoder's prefix. */
typedef struct clip_names {
    const char *inner;
    const char *tok_emb, *pos_emb, *final_w, *final_b;
    const char *proj; /* HF: Linear [P, W]; OpenCLIP: matmul [W, P] */
    const sd_clip_block_names *block;
} clip_names;

extern const clip_names clip_names_hf;
extern const clip_names clip_names_openclip;

#endif
