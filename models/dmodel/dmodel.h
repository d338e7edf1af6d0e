/* dmodel.h - the diffusion model interface: what the sampler's conditioned
 * model call (nodes/sampling/cond_model.c, ComfyUI's BaseModel.apply_model)
 * needs from any denoising network, so that the conditioning code is
 * written once for the SD UNet and for Flux's DiT (and later SD3's MMDiT and
 * Z-Image's NextDiT, each one more kind and one more adapter).
 *
 * A network keeps its own forward (models/unet/unet.h, models/flux/flux.h);
 * its adapter (sd_unet_as_dmodel, sd_flux_as_dmodel) fills an sd_dmodel
 * that borrows it, with the facts a caller checks inputs against. One
 * forward takes a batch: the caller stacks its conditioning entries along N.
 *
 * Inputs per forward, all borrowed:
 *   x          [N, in_channels, H, W], after ModelSampling.calculate_input
 *              (and the inpainting concat for 9-channel UNets)
 *   timesteps  N host floats: ModelSampling.timestep(sigma) (the discrete
 *              index for the SD schedules, sigma itself for Flux and
 *              Z-Image)
 *   context    [N, L, context_dim]: cross-attention / text tokens
 *   y          [N, y_dim] (SDXL's adm vector, Flux's pooled CLIP-L) or NULL
 *   guidance   N host floats (Flux dev's distilled guidance) or NULL: none
 *   extra      kind-specific extra inputs (UNet: const sd_unet_control *,
 *              the ControlNet residuals; MMDiT: const sd_sd3_extra *, the
 *              blocks to skip; Flux: const sd_flux_refs *, Kontext's
 *              reference latents) or NULL
 * The output is the raw network output [N, out_channels, H, W] (eps,
 * v or velocity: the ModelSampling's calculate_denoised reads it), a new
 * tensor the caller owns.
 */
#ifndef SD_DMODEL_H
#define SD_DMODEL_H

#include "kernels/backend.h"

typedef enum sd_dmodel_kind {
    SD_DMODEL_UNET = 1, /* SD1 / SD2 / SDXL */
    SD_DMODEL_FLUX = 2,   /* Flux.1 dev / schnell */
    SD_DMODEL_MMDIT = 3,  /* SD3 / SD3.5 (models/sd3/sd3.h) */
    SD_DMODEL_ZIMAGE = 4  /* Z-Image's NextDiT (models/zimage) */
} sd_dmodel_kind;

typedef struct sd_dmodel_info {
    sd_dmodel_kind kind;
    int in_channels;  /* channels of x (a 9-channel inpainting UNet: 9) */
    int out_channels; /* latent channels */
    int context_dim;  /* width of the context tokens */
    int y_dim;        /* width of y; 0 = the network takes none */
    int guidance;     /* 1: the network embeds a guidance value */
} sd_dmodel_info;

typedef struct sd_dmodel_input {
    sd_bt *x;
    const float *timesteps;
    sd_bt *context;
    sd_bt *y;
    const float *guidance;
    const void *extra;
} sd_dmodel_input;

typedef struct sd_dmodel_i {
    /* One forward; net is sd_dmodel.net. */
    sd_status (*forward)(void *net, const sd_dmodel_input *in, sd_bt **out, sd_error *err);
} sd_dmodel_i;

typedef struct sd_dmodel {
    const sd_dmodel_i *vt;
    void *net; /* borrowed: the sd_unet / sd_flux */
    sd_backend *be;
    sd_dmodel_info info;
} sd_dmodel;

/* m->vt->forward, with a NULL-model check. */
sd_status sd_dmodel_forward(const sd_dmodel *m, const sd_dmodel_input *in, sd_bt **out,
                            sd_error *err);
/* "unet", "flux", "mmdit", "zimage". */
const char *sd_dmodel_kind_name(sd_dmodel_kind kind);

#endif
