/* unet_dmodel.c - the UNet behind the diffusion model interface
 * (models/dmodel/dmodel.h). extra is a const sd_unet_control * or NULL;
 * guidance is ignored (no SD UNet embeds one). */
#include "unet_internal.h"

static sd_status forward(void *net, const sd_dmodel_input *in, sd_bt **out, sd_error *err) {
    return sd_unet_forward(net, in->x, in->timesteps, in->context, in->y,
                           (const sd_unet_control *)in->extra, out, err);
}

static const sd_dmodel_i unet_dmodel_i = {forward};

void sd_unet_as_dmodel(sd_unet *u, sd_dmodel *out) {
    const sd_unet_config *c = &u->cfg;
    out->vt = &unet_dmodel_i;
    out->net = u;
    out->be = u->be;
    out->info = (sd_dmodel_info){
        .kind = SD_DMODEL_UNET,
        .in_channels = c->in_channels,
        .out_channels = c->out_channels,
        .context_dim = c->context_dim,
        .y_dim = c->adm_in_channels,
        .guidance = 0,
    };
}
