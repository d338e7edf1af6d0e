/* libFuzzer target: a diffusers-layout UNet file renamed to ComfyUI's names
 * (models/unet/unet_diffusers.c, what UNETLoader and DiffusersLoader do with
 * a diffusers folder's unet/ file): the structure counted from hostile key
 * names, the unet_to_diffusers table applied, the renamed view built. What
 * it accepts must be safe to use: every renamed tensor is read in full, has
 * its source entry's bytes, and a name the view lists is found. Also the
 * diffusers-layout ControlNet renaming over the same input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/controlnet/controlnet_internal.h"
#include "models/unet/unet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_st_file *f = NULL;
    sd_error err;
    if (sd_st_open_memory(data, size, "fuzz.safetensors", &f, &err) != SD_OK) return 0;
    if (!sd_unet_is_diffusers(f, "")) {
        sd_st_close(f);
        return 0;
    }
    void *buf = NULL;
    size_t n = 0;
    if (sd_controlnet_diffusers_to_ldm(f, &buf, &n, &err) == SD_OK) {
        sd_st_file *r = NULL;
        if (sd_st_open_memory(buf, n, "renamed", &r, &err) != SD_OK) abort(); /* our own writer's bytes */
        sd_st_close(r);
    }
    free(buf);
    sd_unet_config c;
    if (sd_unet_diffusers_layout(f, "", &c, &err) != SD_OK) {
        sd_st_close(f);
        return 0;
    }
    if (c.num_levels < 1 || c.num_levels > SD_UNET_MAX_LEVELS || c.n_input_res > SD_UNET_MAX_BLOCKS ||
        c.n_output_blocks > SD_UNET_MAX_BLOCKS)
        abort();
    sd_st_file *v = NULL;
    if (sd_unet_diffusers_view(f, "", &c, &v, &err) != SD_OK) return 0; /* the view took f */
    for (size_t i = 0; i < sd_st_count(v); i++) {
        const sd_st_entry *e = sd_st_at(v, i);
        if (sd_st_find(v, e->name) != e) abort();
        sd_tensor *t = sd_st_tensor(v, e->name, &err);
        if (!t || t->nbytes != e->nbytes) abort();
        sd_tensor_unref(t);
    }
    sd_st_close(v);
    return 0;
}
