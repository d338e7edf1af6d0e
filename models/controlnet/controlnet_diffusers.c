/* controlnet_diffusers.c - diffusers-layout ControlNet files
 * (controlnet_cond_embedding.*, down_blocks.*, controlnet_down_blocks.*)
 * renamed to the original control_model layout, as ComfyUI's
 * load_controlnet does through unet_to_diffusers before it builds the
 * network. The renamed file is an in-memory safetensors that the regular
 * loader reads, so both layouts share one detection and one build. */
#include "models/controlnet/controlnet_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The names outside the UNet's table (sd_unet_diffusers_names): the hint
 * encoder, the zero convs and the Union parts, as ComfyUI's
 * load_controlnet_state_dict renames them; 0 leaves a key out. */
static int controlnet_name(void *ud, const char *k, char *buf, size_t n) {
    (void)ud;
    int a, used = 0;
    if (starts(k, "controlnet_cond_embedding.conv_in.")) {
        snprintf(buf, n, "input_hint_block.0.%s", k + strlen("controlnet_cond_embedding.conv_in."));
        return 1;
    }
    if (starts(k, "controlnet_cond_embedding.conv_out.")) {
        snprintf(buf, n, "input_hint_block.14.%s", k + strlen("controlnet_cond_embedding.conv_out."));
        return 1;
    }
    if (starts(k, "controlnet_mid_block.")) {
        snprintf(buf, n, "middle_block_out.0.%s", k + strlen("controlnet_mid_block."));
        return 1;
    }
    if (sscanf(k, "controlnet_cond_embedding.blocks.%d.%n", &a, &used) == 1 && used) {
        /* (in long long: a is any int a hostile key spells) */
        snprintf(buf, n, "input_hint_block.%lld.%s", 2LL * a + 2, k + used);
        return 1;
    }
    used = 0;
    if (sscanf(k, "controlnet_down_blocks.%d.%n", &a, &used) == 1 && used) {
        snprintf(buf, n, "zero_convs.%d.0.%s", a, k + used);
        return 1;
    }
    /* Union parts keep their names; nn.MultiheadAttention's in_proj_weight
     * becomes in_proj.weight, as ComfyUI renames it */
    static const char *const union_parts[] = {"task_embedding", "transformer_layes.", "spatial_ch_projs.",
                                              "control_add_embedding."};
    for (size_t i = 0; i < sizeof union_parts / sizeof union_parts[0]; i++)
        if (starts(k, union_parts[i])) {
            const char *p = strstr(k, ".attn.in_proj_");
            if (p) snprintf(buf, n, "%.*s.attn.in_proj.%s", (int)(p - k), k, p + strlen(".attn.in_proj_"));
            else snprintf(buf, n, "%s", k);
            return 1;
        }
    return 0;
}

int sd_controlnet_is_diffusers(sd_st_file *f) {
    return sd_st_find(f, "controlnet_cond_embedding.conv_in.weight") != NULL;
}

sd_status sd_controlnet_diffusers_to_ldm(sd_st_file *f, void **buf, size_t *size, sd_error *err) {
    *buf = NULL;
    *size = 0;
    /* the encoder's structure from the file's own blocks, then ComfyUI's
     * unet_to_diffusers names for it (no up blocks) */
    sd_unet_config c;
    sd_status rc = sd_unet_diffusers_layout(f, "", &c, err);
    if (rc) return rc;
    sd_st_writer *w = sd_st_writer_new();
    if (!w) return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming %s", sd_st_path(f));
    rc = sd_unet_diffusers_rename(f, "", &c, "", controlnet_name, NULL, w, err);
    if (!rc) rc = sd_st_writer_to_memory(w, buf, size, err);
    sd_st_writer_free(w);
    return rc;
}
