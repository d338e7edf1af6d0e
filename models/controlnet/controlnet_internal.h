/* controlnet_internal.h - shared by the controlnet*.c files. Not a contract. */
#ifndef SD_CONTROLNET_INTERNAL_H
#define SD_CONTROLNET_INTERNAL_H

#include "models/controlnet/controlnet.h"
#include "models/sd3/sd3_controlnet.h"
#include "models/unet/unet_internal.h"

#define CN_MAX_HINT 16

struct sd_controlnet {
    sd_backend *be;
    /* an SD3 ControlNet: everything else is unused (enc NULL) */
    sd_sd3_cn *mmdit;
    /* The encoder half held in a UNet struct (n_out = 0, no out.* weights),
     * so sd_unet_free releases it and the UNet's layer code runs it. */
    sd_unet *enc;
    int hint_ch;
    int n_hint;
    sd_bt *hint_w[CN_MAX_HINT], *hint_b[CN_MAX_HINT];
    int hint_stride[CN_MAX_HINT];
    int n_zero;
    sd_bt *zero_w[SD_UNET_MAX_BLOCKS], *zero_b[SD_UNET_MAX_BLOCKS];
    sd_bt *mid_w, *mid_b;
    sd_unet_tap_fn tap;
    void *tap_user;
    /* Union ControlNet (xinsir controlnet-union-sdxl / ProMax) parts;
     * n_types = 0 for any other ControlNet (controlnet_union.c) */
    int n_types;
    sd_bt *task_emb;                 /* [n_types, model_channels] */
    sd_bt *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    sd_bt *qkv_w, *qkv_b, *out_w, *out_b; /* attn.in_proj [3W, W], out_proj */
    sd_bt *fc_w, *fc_b, *proj_w, *proj_b; /* mlp.c_fc [4W, W], mlp.c_proj */
    sd_bt *sp_w, *sp_b;              /* spatial_ch_projs [W, W] */
    sd_bt *cae1_w, *cae1_b, *cae2_w, *cae2_b; /* control_add_embedding */
    /* the renamed in-memory file of a diffusers-layout ControlNet; weights
     * may borrow from it, so it is freed last */
    void *renamed;
};

/* controlnet_union.c: 1 when the (renamed) file has the Union parts. */
int sd_cn_union_present(sd_st_file *f, const char *prefix);
/* Binds the Union parts (after the encoder, whose widths they follow). */
void sd_cn_union_bind(unet_loader *ld, sd_controlnet *cn);
void sd_cn_union_free(sd_controlnet *cn);
/* control_add_embedding(control_type): [time_embed_dim] to add to the time
 * embedding (type -1 = none set: every one-hot entry 0). */
sd_bt *sd_cn_union_add_embedding(sd_controlnet *cn, int type);
/* union_controlnet_merge for one type: g [N, W, h, w] (the hint encoder's
 * output) plus spatial_ch_projs(transformer(mean(g) + task_embedding[type]))
 * broadcast over h, w. New tensor; NULL on a backend error. */
sd_bt *sd_cn_union_merge(sd_controlnet *cn, sd_bt *g, int type);

/* controlnet_diffusers.c: 1 when f is a diffusers-layout ControlNet, and
 * its tensors renamed to the control_model layout (no prefix) as a
 * malloc'd safetensors image (*buf, *size). */
int sd_controlnet_is_diffusers(sd_st_file *f);
sd_status sd_controlnet_diffusers_to_ldm(sd_st_file *f, void **buf, size_t *size, sd_error *err);

#endif
