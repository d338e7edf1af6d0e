/* util.c - helpers shared by the latent nodes (latent.h). */
#include "latent.h"

sd_status sd_nodes_latent_with(const sd_value *src, const char *key, sd_tensor *t, sd_value **out,
                               sd_error *err) {
    sd_value *d = src ? sd_value_shallow_copy(src) : sd_value_dict();
    sd_value *tv = t ? sd_value_tensor(t) : NULL;
    sd_tensor_unref(t);
    if (!d || !tv || sd_value_dict_set(d, key, tv)) {
        if (!d) sd_value_unref(tv);
        sd_value_unref(d);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}
