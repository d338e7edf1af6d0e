/* dmodel.c - the diffusion model interface's dispatch (dmodel.h). */
#include "models/dmodel/dmodel.h"

sd_status sd_dmodel_forward(const sd_dmodel *m, const sd_dmodel_input *in, sd_bt **out,
                            sd_error *err) {
    *out = NULL;
    if (!m || !m->vt || !m->net)
        return sd_error_set(err, SD_ERR_INVALID, "no diffusion model to run");
    return m->vt->forward(m->net, in, out, err);
}

const char *sd_dmodel_kind_name(sd_dmodel_kind kind) {
    switch (kind) {
    case SD_DMODEL_UNET: return "unet";
    case SD_DMODEL_FLUX: return "flux";
    case SD_DMODEL_ZIMAGE: return "zimage";
    case SD_DMODEL_MMDIT: return "mmdit";
    default: return "?";
    }
}
