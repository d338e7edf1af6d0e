/* controlnet_internal.h - shared by the controlnet*.c files. Not a contract. */
#ifndef SD_CONTROLNET_INTERNAL_H
#define SD_CONTROLNET_INTERNAL_H

#include "models/controlnet/controlnet.h"
#include "models/unet/unet_internal.h"

#define CN_MAX_HINT 16

struct sd_controlnet {
    sd_backend *be;
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
    /* the renamed in-memory file of a diffusers-layout ControlNet; weights
     * may borrow from it, so it is freed last */
    void *renamed;
};

/* controlnet_diffusers.c: 1 when f is a diffusers-layout ControlNet, and
 * its tensors renamed to the control_model layout (no prefix) as a
 * malloc'd safetensors image (*buf, *size). */
int sd_controlnet_is_diffusers(sd_st_file *f);
sd_status sd_controlnet_diffusers_to_ldm(sd_st_file *f, void **buf, size_t *size, sd_error *err);

#endif
