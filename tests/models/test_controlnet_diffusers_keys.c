/* A diffusers-layout ControlNet whose key names carry hostile block indices
 * (models/controlnet/controlnet_diffusers.c): the renaming computes ComfyUI's
 * input_hint_block index 2 * a + 2 from any int a key spells, which must not
 * overflow (UBSan aborts the sanitized build on it; the name must be
 * "input_hint_block.2147483650.*" for a = 2^30 everywhere). fuzz_diffusers_unet
 * reaches the same code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/controlnet/controlnet_internal.h"
#include "testutil.h"

int main(void) {
    /* the smallest file the diffusers layout reader takes (conv_in and one
     * down block's resnet), plus hint-encoder blocks at both ends of int */
    static const char *const keys[] = {"conv_in.weight",
                                       "down_blocks.0.resnets.0.conv1.weight",
                                       "controlnet_cond_embedding.conv_in.weight",
                                       "controlnet_cond_embedding.blocks.1073741824.weight",
                                       "controlnet_cond_embedding.blocks.2147483647.bias",
                                       NULL};
    sd_error err;
    sd_error_clear(&err);
    sd_st_writer *w = sd_st_writer_new();
    CHECK(w != NULL);
    for (int i = 0; w && keys[i]; i++) {
        int64_t shape[2] = {2, 3};
        sd_tensor *t = sd_tensor_new(SD_F32, 2, shape);
        CHECK(t != NULL);
        if (t) memset(t->data, 0, t->nbytes);
        if (t) CHECK_OK(sd_st_writer_add(w, keys[i], t, &err), &err);
        sd_tensor_unref(t);
    }
    void *file = NULL;
    size_t file_n = 0;
    if (w) CHECK_OK(sd_st_writer_to_memory(w, &file, &file_n, &err), &err);
    sd_st_writer_free(w);
    sd_st_file *f = NULL;
    if (file) CHECK_OK(sd_st_open_memory(file, file_n, "hostile-controlnet.safetensors", &f, &err), &err);
    void *out = NULL;
    size_t out_n = 0;
    if (f) CHECK_OK(sd_controlnet_diffusers_to_ldm(f, &out, &out_n, &err), &err);
    sd_st_file *r = NULL;
    if (out) CHECK_OK(sd_st_open_memory(out, out_n, "renamed", &r, &err), &err);
    if (r) {
        CHECK_MSG(sd_st_find(r, "input_hint_block.2147483650.weight") != NULL,
                  "blocks.1073741824 is not renamed to input_hint_block.2147483650 (2 * a + 2)");
        CHECK_MSG(sd_st_find(r, "input_hint_block.4294967296.bias") != NULL,
                  "blocks.2147483647 is not renamed to input_hint_block.4294967296 (2 * a + 2)");
        CHECK_MSG(sd_st_find(r, "input_hint_block.0.weight") != NULL, "conv_in is not input_hint_block.0");
    }
    sd_st_close(r);
    free(out);
    sd_st_close(f);
    free(file);
    return sd_test_finish();
}
