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

/* diffusers ResnetBlock2D member -> ldm ResBlock member */
static const char *const resnet_map[][2] = {
    {"norm1.", "in_layers.0."},   {"conv1.", "in_layers.2."},     {"time_emb_proj.", "emb_layers.1."},
    {"norm2.", "out_layers.0."},  {"conv2.", "out_layers.3."},    {"conv_shortcut.", "skip_connection."},
};

/* Fixed names: diffusers prefix -> ldm prefix. */
static const char *const fixed_map[][2] = {
    {"time_embedding.linear_1.", "time_embed.0."},
    {"time_embedding.linear_2.", "time_embed.2."},
    {"add_embedding.linear_1.", "label_emb.0.0."},
    {"add_embedding.linear_2.", "label_emb.0.2."},
    {"conv_in.", "input_blocks.0.0."},
    {"controlnet_cond_embedding.conv_in.", "input_hint_block.0."},
    {"controlnet_cond_embedding.conv_out.", "input_hint_block.14."},
    {"controlnet_mid_block.", "middle_block_out.0."},
};

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* A ResnetBlock2D member (rest after "resnets.N.") in ldm spelling; NULL
 * when it is none of them. */
static const char *resnet_member(const char *rest, const char **tail) {
    for (size_t i = 0; i < sizeof resnet_map / sizeof resnet_map[0]; i++)
        if (starts(rest, resnet_map[i][0])) {
            *tail = rest + strlen(resnet_map[i][0]);
            return resnet_map[i][1];
        }
    return NULL;
}

/* The ldm name of diffusers key `k` (nrb = res blocks per level) into buf;
 * 0 when the key has no ldm counterpart (it is then left out). */
static int ldm_name(const char *k, int nrb, char *buf, size_t n) {
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
    for (size_t i = 0; i < sizeof fixed_map / sizeof fixed_map[0]; i++)
        if (starts(k, fixed_map[i][0])) {
            snprintf(buf, n, "%s%s", fixed_map[i][1], k + strlen(fixed_map[i][0]));
            return 1;
        }
    int a, b, used = 0;
    const char *tail;
    if (sscanf(k, "controlnet_cond_embedding.blocks.%d.%n", &a, &used) == 1 && used) {
        snprintf(buf, n, "input_hint_block.%d.%s", 2 * a + 2, k + used);
        return 1;
    }
    used = 0;
    if (sscanf(k, "controlnet_down_blocks.%d.%n", &a, &used) == 1 && used) {
        snprintf(buf, n, "zero_convs.%d.0.%s", a, k + used);
        return 1;
    }
    used = 0;
    if (sscanf(k, "down_blocks.%d.resnets.%d.%n", &a, &b, &used) == 2 && used) {
        const char *m = resnet_member(k + used, &tail);
        if (!m) return 0;
        snprintf(buf, n, "input_blocks.%d.0.%s%s", 1 + a * (nrb + 1) + b, m, tail);
        return 1;
    }
    used = 0;
    if (sscanf(k, "down_blocks.%d.attentions.%d.%n", &a, &b, &used) == 2 && used) {
        snprintf(buf, n, "input_blocks.%d.1.%s", 1 + a * (nrb + 1) + b, k + used);
        return 1;
    }
    used = 0;
    if (sscanf(k, "down_blocks.%d.downsamplers.0.conv.%n", &a, &used) == 1 && used) {
        snprintf(buf, n, "input_blocks.%d.0.op.%s", 1 + a * (nrb + 1) + nrb, k + used);
        return 1;
    }
    used = 0;
    if (sscanf(k, "mid_block.resnets.%d.%n", &a, &used) == 1 && used) {
        const char *m = resnet_member(k + used, &tail);
        if (!m || a > 1) return 0;
        snprintf(buf, n, "middle_block.%d.%s%s", a == 0 ? 0 : 2, m, tail);
        return 1;
    }
    used = 0;
    if (sscanf(k, "mid_block.attentions.0.%n", &used) == 0 && used) {
        snprintf(buf, n, "middle_block.1.%s", k + used);
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
    const char *path = sd_st_path(f);
    /* res blocks per level: resnets of the first down block */
    int nrb = 0;
    char name[512];
    for (;;) {
        snprintf(name, sizeof name, "down_blocks.0.resnets.%d.conv1.weight", nrb);
        if (!sd_st_find(f, name)) break;
        nrb++;
    }
    if (nrb == 0)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: diffusers-layout ControlNet without down_blocks.0.resnets.0", path);
    sd_st_writer *w = sd_st_writer_new();
    if (!w) return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming %s", path);
    sd_status rc = SD_OK;
    for (size_t i = 0; !rc && i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        if (!ldm_name(e->name, nrb, name, sizeof name)) continue; /* not part of the network */
        sd_tensor *t = sd_st_tensor(f, e->name, err);
        if (!t) {
            rc = err && err->code ? err->code : SD_ERR_FORMAT;
            break;
        }
        rc = sd_st_writer_add(w, name, t, err);
        sd_tensor_unref(t);
        if (rc) sd_error_prefix(err, "%s: '%s' -> '%s'", path, e->name, name);
    }
    if (!rc) rc = sd_st_writer_to_memory(w, buf, size, err);
    sd_st_writer_free(w);
    return rc;
}
