/* unet_config.c - UNet architecture detection from key names and shapes,
 * following ComfyUI's model_detection.detect_unet_config. */
#include "models/unet/unet_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const sd_st_entry *sd_unet_find(sd_st_file *f, const char *prefix, const char *fmt, ...) {
    char name[512];
    size_t n = (size_t)snprintf(name, sizeof name, "%s", prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - n, fmt, ap);
    va_end(ap);
    return sd_st_find(f, name);
}

int sd_unet_count_tblocks(sd_st_file *f, const char *prefix, const char *block) {
    int k = 0;
    while (sd_unet_find(f, prefix, "%s.transformer_blocks.%d.attn1.to_q.weight", block, k)) k++;
    return k;
}

/* Record attention facts from one SpatialTransformer ("<block>" = its key
 * path); they must agree across the model. */
static sd_status note_transformer(sd_st_file *f, const char *prefix, const char *block,
                                  sd_unet_config *c, int *seen, sd_error *err) {
    const sd_st_entry *pin = sd_unet_find(f, prefix, "%s.proj_in.weight", block);
    const sd_st_entry *k = sd_unet_find(f, prefix, "%s.transformer_blocks.0.attn2.to_k.weight", block);
    if (!pin || !k || k->ndim != 2)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: transformer '%s%s' lacks proj_in or attn2.to_k (or to_k is not 2-D)",
                            sd_st_path(f), prefix, block);
    int linear = pin->ndim == 2;
    int ctx = (int)k->shape[1];
    if (!*seen) {
        c->use_linear_in_transformer = linear;
        c->context_dim = ctx;
        *seen = 1;
    } else if (c->use_linear_in_transformer != linear || c->context_dim != ctx) {
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: transformer '%s%s' differs from the others (linear proj_in %d vs %d, "
                            "context_dim %d vs %d)",
                            sd_st_path(f), prefix, block, linear, c->use_linear_in_transformer, ctx,
                            c->context_dim);
    }
    return SD_OK;
}

sd_status sd_unet_detect(sd_st_file *f, const char *prefix, sd_unet_config *c, sd_error *err) {
    memset(c, 0, sizeof *c);
    if (!prefix) prefix = "";
    const char *path = sd_st_path(f);

    const sd_st_entry *e = sd_unet_find(f, prefix, "input_blocks.0.0.weight");
    if (!e)
        return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: no UNet under '%s' (missing '%sinput_blocks.0.0.weight')",
                            path, prefix, prefix);
    if (e->ndim != 4)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: '%sinput_blocks.0.0.weight' is %d-D, expected a 2-D conv (4-D weight); "
                            "video/3-D UNets are not supported",
                            path, prefix, e->ndim);
    c->model_channels = (int)e->shape[0];
    c->in_channels = (int)e->shape[1];
    if (sd_unet_find(f, prefix, "input_blocks.1.0.time_mixer.mix_factor") ||
        sd_unet_find(f, prefix, "input_blocks.1.0.time_stack.in_layers.0.weight"))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: UNet has temporal layers (time_mixer/time_stack: SVD-style video model), not supported",
                            path);
    if (!(e = sd_unet_find(f, prefix, "out.2.weight")) || e->ndim != 4)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: missing or malformed '%sout.2.weight'", path, prefix);
    c->out_channels = (int)e->shape[0];
    if (!(e = sd_unet_find(f, prefix, "time_embed.0.weight")) || e->ndim != 2 ||
        e->shape[1] != c->model_channels)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: missing '%stime_embed.0.weight' or it is not [*, %d]", path, prefix,
                            c->model_channels);
    c->time_embed_dim = (int)e->shape[0];
    if ((e = sd_unet_find(f, prefix, "label_emb.0.0.weight"))) {
        if (e->ndim != 2)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: '%slabel_emb.0.0.weight' is not 2-D", path, prefix);
        c->adm_in_channels = (int)e->shape[1];
    } else if (sd_unet_find(f, prefix, "label_emb.weight")) {
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: class-label UNet ('%slabel_emb.weight', an embedding table) is not supported",
                            path, prefix);
    }

    /* Input blocks: res blocks grouped into levels, split by downsamplers. */
    int seen_attn = 0, level = 0, count = 0, i;
    char blk[64];
    for (i = 1;; i++) {
        if (i >= SD_UNET_MAX_BLOCKS)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: more than %d input blocks", path,
                                SD_UNET_MAX_BLOCKS);
        if (sd_unet_find(f, prefix, "input_blocks.%d.0.op.weight", i)) {
            c->num_res_blocks[level] = count;
            if (count == 0)
                return sd_error_set(err, SD_ERR_FORMAT, "%s: level %d of the UNet has no res blocks",
                                    path, level);
            if (++level >= SD_UNET_MAX_LEVELS)
                return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: more than %d UNet levels", path,
                                    SD_UNET_MAX_LEVELS);
            count = 0;
            continue;
        }
        if (!sd_unet_find(f, prefix, "input_blocks.%d.0.in_layers.0.weight", i)) {
            if (sd_unet_find(f, prefix, "input_blocks.%d.0.op.bias", i) ||
                sd_unet_find(f, prefix, "input_blocks.%d.1.proj_in.weight", i))
                return sd_error_set(err, SD_ERR_FORMAT,
                                    "%s: input block %d is neither a ResBlock nor a Downsample "
                                    "(no '%sinput_blocks.%d.0.in_layers.0.weight' / '.0.op.weight')",
                                    path, i, prefix, i);
            break;
        }
        e = sd_unet_find(f, prefix, "input_blocks.%d.0.out_layers.3.weight", i);
        if (!e || e->ndim != 4 || e->shape[0] % c->model_channels)
            return sd_error_set(err, SD_ERR_FORMAT,
                                "%s: '%sinput_blocks.%d.0.out_layers.3.weight' missing or its width is not "
                                "a multiple of model_channels %d",
                                path, prefix, i, c->model_channels);
        int mult = (int)(e->shape[0] / c->model_channels);
        if (count == 0) c->channel_mult[level] = mult;
        else if (c->channel_mult[level] != mult)
            return sd_error_set(err, SD_ERR_FORMAT,
                                "%s: input block %d has width %d, other res blocks of level %d have %d",
                                path, i, (int)e->shape[0], level, c->channel_mult[level] * c->model_channels);
        count++;
        snprintf(blk, sizeof blk, "input_blocks.%d.1", i);
        int depth = sd_unet_count_tblocks(f, prefix, blk);
        if (depth > 0) {
            sd_status rc = note_transformer(f, prefix, blk, c, &seen_attn, err);
            if (rc) return rc;
        }
        if (c->n_input_res >= SD_UNET_MAX_BLOCKS)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: too many res blocks", path);
        c->transformer_depth[c->n_input_res++] = depth;
    }
    if (count == 0)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: the last UNet level has no res blocks", path);
    c->num_res_blocks[level] = count;
    c->num_levels = level + 1;
    int n_input_blocks = i;

    /* Middle block: ResBlock [, SpatialTransformer, ResBlock]. */
    if (!sd_unet_find(f, prefix, "middle_block.0.in_layers.0.weight"))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: UNet without a middle block ('%smiddle_block.0.in_layers.0.weight' "
                            "missing; distilled variants are not supported)",
                            path, prefix);
    c->transformer_depth_middle = -1;
    if (sd_unet_find(f, prefix, "middle_block.1.norm.weight")) {
        c->transformer_depth_middle = sd_unet_count_tblocks(f, prefix, "middle_block.1");
        if (c->transformer_depth_middle > 0) {
            sd_status rc = note_transformer(f, prefix, "middle_block.1", c, &seen_attn, err);
            if (rc) return rc;
        }
    }

    /* Output blocks: num_res_blocks + 1 per level, deepest level first. */
    int expect = 0;
    for (int l = 0; l < c->num_levels; l++) expect += c->num_res_blocks[l] + 1;
    for (i = 0; sd_unet_find(f, prefix, "output_blocks.%d.0.in_layers.0.weight", i); i++) {
        if (i >= SD_UNET_MAX_BLOCKS)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: too many output blocks", path);
        snprintf(blk, sizeof blk, "output_blocks.%d.1", i);
        int depth = sd_unet_count_tblocks(f, prefix, blk);
        if (depth > 0) {
            sd_status rc = note_transformer(f, prefix, blk, c, &seen_attn, err);
            if (rc) return rc;
        }
        c->transformer_depth_output[i] = depth;
    }
    c->n_output_blocks = i;
    for (int a = 0, b = i - 1; a < b; a++, b--) { /* to ComfyUI's (popped) order */
        int t = c->transformer_depth_output[a];
        c->transformer_depth_output[a] = c->transformer_depth_output[b];
        c->transformer_depth_output[b] = t;
    }
    if (c->n_output_blocks != expect || n_input_blocks != expect)
        return sd_error_set(err, SD_ERR_FORMAT,
                            "%s: UNet has %d input and %d output blocks, the detected levels "
                            "(%d levels) need %d of each",
                            path, n_input_blocks, c->n_output_blocks, c->num_levels, expect);

    if (sd_unet_config_set_family(c) != 0) {
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: unsupported UNet layout: conv proj_in with adm_in_channels %d, "
                            "context_dim %d (a class-conditioned conv-proj UNet; only SD1.x, SD2.x "
                            "and SDXL UNets are supported)",
                            path, c->adm_in_channels, c->context_dim);
    }
    return SD_OK;
}

int sd_unet_config_set_family(sd_unet_config *c) {
    if (!c->use_linear_in_transformer && c->adm_in_channels == 0) {
        c->kind = SD_UNET_SD1;
        c->num_heads = 8;
        c->num_head_channels = -1;
    } else if (c->use_linear_in_transformer) {
        /* SD2.x (no label_emb) and SDXL: head width 64 (SD20 / SDXL unet_extra_config) */
        c->kind = c->adm_in_channels > 0 ? SD_UNET_SDXL : SD_UNET_SD2;
        c->num_heads = -1;
        c->num_head_channels = 64;
    } else {
        return -1;
    }
    return 0;
}
