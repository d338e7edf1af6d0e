/* sd3_dmodel.c - the MMDiT behind the diffusion model interface
 * (models/dmodel/dmodel.h). */
#include "sd3_internal.h"

static sd_status forward(void *net, const sd_dmodel_input *in, sd_bt **out, sd_error *err) {
    return sd_sd3_forward_ex(net, in->x, in->timesteps, in->context, in->y, in->extra, out, err);
}

static const sd_dmodel_i sd3_dmodel_i = {forward};

void sd_sd3_as_dmodel(sd_sd3 *m, sd_dmodel *out) {
    const sd_sd3_config *c = &m->cfg;
    out->vt = &sd3_dmodel_i;
    out->net = m;
    out->be = m->be;
    out->info = (sd_dmodel_info){
        .kind = SD_DMODEL_MMDIT,
        .in_channels = c->in_channels,
        .out_channels = c->out_channels,
        .context_dim = c->context_in_dim,
        .y_dim = c->adm_in_channels,
        .guidance = 0,
    };
}
