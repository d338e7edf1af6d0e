/* latent_channels.c - comfy.sample.fix_empty_latent_channels: an empty
 * latent made for another family is widened (or narrowed) to the MODEL's
 * latent channels before sampling, so ComfyUI's own Flux schnell example
 * (EmptyLatentImage, 4 channels, into a 16-channel DiT) runs as it does
 * there. Only an all-zero latent is touched: ComfyUI repeats its channels
 * (comfy.utils.repeat_to_batch_size on dim 1) or keeps the first ones, and
 * repeating or cutting zeros is zeros of the new width. A latent holding
 * anything else keeps its channels and the sampler refuses it by name. */
#include <stdlib.h>

#include "sampling.h"

sd_status sd_nodes_fix_empty_latent(sd_checkpoint *ckpt, const sd_value *latent, sd_value **out,
                                    sd_error *err) {
    *out = NULL;
    sd_tensor *s = latent ? sd_value_dict_tensor(latent, "samples") : NULL;
    int want = ckpt ? sd_ckpt_info_latent_channels(sd_checkpoint_info(ckpt)) : 0;
    int fix = s && s->dtype == SD_F32 && s->ndim == 4 && want > 0 && s->shape[1] != want;
    for (int64_t i = 0, n = fix ? sd_tensor_numel(s) : 0; i < n && fix; i++)
        fix = sd_tensor_f32(s)[i] == 0.0f; /* count_nonzero: -0.0 counts as zero too */
    if (!fix) {
        *out = sd_value_ref((sd_value *)latent);
        return SD_OK;
    }
    sd_tensor *z = sd_tensor_new4(SD_F32, 4, s->shape[0], want, s->shape[2], s->shape[3]);
    sd_value *d = sd_value_shallow_copy(latent);
    sd_value *tv = z ? sd_value_tensor(z) : NULL;
    sd_tensor_unref(z);
    if (!d || !tv || sd_value_dict_set(d, "samples", tv)) {
        if (!d) sd_value_unref(tv);
        sd_value_unref(d);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}
