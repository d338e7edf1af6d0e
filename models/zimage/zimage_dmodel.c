/* zimage_dmodel.c - the NextDiT behind the diffusion model interface
 * (models/dmodel/dmodel.h). */
#include "zimage_internal.h"

static sd_status forward(void *net, const sd_dmodel_input *in, sd_bt **out, sd_error *err) {
    return sd_zimage_forward(net, in->x, in->timesteps, in->context, out, err);
}

static const sd_dmodel_i zimage_dmodel_i = {forward};

void sd_zimage_as_dmodel(sd_zimage *m, sd_dmodel *out) {
    const sd_zimage_config *c = &m->cfg;
    out->vt = &zimage_dmodel_i;
    out->net = m;
    out->be = m->be;
    out->info = (sd_dmodel_info){
        .kind = SD_DMODEL_ZIMAGE,
        .in_channels = c->in_channels,
        .out_channels = c->in_channels,
        .context_dim = c->cap_feat_dim,
        .y_dim = 0,
        .guidance = 0,
    };
}
