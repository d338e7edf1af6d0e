/* flux_dmodel.c - the Flux DiT behind the diffusion model interface
 * (models/dmodel/dmodel.h). */
#include "flux_internal.h"

static sd_status forward(void *net, const sd_dmodel_input *in, sd_bt **out, sd_error *err) {
    return sd_flux_forward_refs(net, in->x, in->timesteps, in->context, in->y, in->guidance, in->extra, out, err);
}

static const sd_dmodel_i flux_dmodel_i = {forward};

void sd_flux_as_dmodel(sd_flux *m, sd_dmodel *out) {
    const sd_flux_config *c = &m->cfg;
    out->vt = &flux_dmodel_i;
    out->net = m;
    out->be = m->be;
    out->info = (sd_dmodel_info){
        .kind = SD_DMODEL_FLUX,
        .in_channels = c->in_channels,
        .out_channels = c->out_channels,
        .context_dim = c->context_in_dim,
        .y_dim = c->vec_in_dim,
        .guidance = c->guidance_embed,
    };
}
