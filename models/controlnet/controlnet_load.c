/* controlnet_load.c - ControlNet (cldm layout) detection and weight binding.
 * The encoder detection follows ComfyUI's detect_unet_config on the input
 * half only; the block widths are rebuilt the way UNetModel.__init__ does. */
#include "models/controlnet/controlnet_internal.h"
#include "models/checkpoint/weights.h"
#include "formats/torch_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sd_status note_attn(sd_st_file *f, const char *prefix, const char *block, sd_unet_config *c,
                           int *seen, sd_error *err) {
    const sd_st_entry *pin = sd_unet_find(f, prefix, "%s.proj_in.weight", block);
    const sd_st_entry *k = sd_unet_find(f, prefix, "%s.transformer_blocks.0.attn2.to_k.weight", block);
    if (!pin || !k || k->ndim != 2)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: transformer '%s%s' lacks proj_in or attn2.to_k",
                            sd_st_path(f), prefix, block);
    int linear = pin->ndim == 2, ctx = (int)k->shape[1];
    if (!*seen) {
        c->use_linear_in_transformer = linear;
        c->context_dim = ctx;
        *seen = 1;
    } else if (c->use_linear_in_transformer != linear || c->context_dim != ctx) {
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: transformer '%s%s' differs from the others",
                            sd_st_path(f), prefix, block);
    }
    return SD_OK;
}

/* The encoder half's config (same fields as sd_unet_detect fills). */
static sd_status detect(sd_st_file *f, const char *prefix, sd_unet_config *c, sd_error *err) {
    memset(c, 0, sizeof *c);
    const char *path = sd_st_path(f);
    const sd_st_entry *e = sd_unet_find(f, prefix, "input_blocks.0.0.weight");
    if (!e || e->ndim != 4)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%sinput_blocks.0.0.weight' missing or not a conv",
                            path, prefix);
    c->model_channels = (int)e->shape[0];
    c->in_channels = (int)e->shape[1];
    if (!(e = sd_unet_find(f, prefix, "time_embed.0.weight")) || e->ndim != 2 || e->shape[1] != c->model_channels)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%stime_embed.0.weight' missing or not [*, %d]", path,
                            prefix, c->model_channels);
    c->time_embed_dim = (int)e->shape[0];
    if ((e = sd_unet_find(f, prefix, "label_emb.0.0.weight"))) {
        if (e->ndim != 2) return sd_error_set(err, SD_ERR_FORMAT, "%s: label_emb is not 2-D", path);
        c->adm_in_channels = (int)e->shape[1];
    }
    int seen = 0, level = 0, count = 0, i;
    char blk[64];
    for (i = 1;; i++) {
        if (i >= SD_UNET_MAX_BLOCKS)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: more than %d input blocks", path,
                                SD_UNET_MAX_BLOCKS);
        if (sd_unet_find(f, prefix, "input_blocks.%d.0.op.weight", i)) {
            if (count == 0)
                return sd_error_set(err, SD_ERR_FORMAT, "%s: level %d has no res blocks", path, level);
            c->num_res_blocks[level] = count;
            if (++level >= SD_UNET_MAX_LEVELS)
                return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: too many levels", path);
            count = 0;
            continue;
        }
        if (!sd_unet_find(f, prefix, "input_blocks.%d.0.in_layers.0.weight", i)) break;
        e = sd_unet_find(f, prefix, "input_blocks.%d.0.out_layers.3.weight", i);
        if (!e || e->ndim != 4 || e->shape[0] % c->model_channels)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: '%sinput_blocks.%d.0.out_layers.3.weight' missing or odd",
                                path, prefix, i);
        int mult = (int)(e->shape[0] / c->model_channels);
        if (count == 0) c->channel_mult[level] = mult;
        else if (c->channel_mult[level] != mult)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: input block %d width differs within level %d",
                                path, i, level);
        count++;
        snprintf(blk, sizeof blk, "input_blocks.%d.1", i);
        int depth = sd_unet_count_tblocks(f, prefix, blk);
        if (depth > 0) {
            sd_status rc = note_attn(f, prefix, blk, c, &seen, err);
            if (rc) return rc;
        }
        if (c->n_input_res >= SD_UNET_MAX_BLOCKS)
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: too many res blocks", path);
        c->transformer_depth[c->n_input_res++] = depth;
    }
    if (count == 0) return sd_error_set(err, SD_ERR_FORMAT, "%s: the last level has no res blocks", path);
    c->num_res_blocks[level] = count;
    c->num_levels = level + 1;
    if (!sd_unet_find(f, prefix, "middle_block.0.in_layers.0.weight"))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: '%smiddle_block.0.in_layers.0.weight' missing", path,
                            prefix);
    c->transformer_depth_middle = -1;
    if (sd_unet_find(f, prefix, "middle_block.1.norm.weight")) {
        c->transformer_depth_middle = sd_unet_count_tblocks(f, prefix, "middle_block.1");
        if (c->transformer_depth_middle > 0) {
            sd_status rc = note_attn(f, prefix, "middle_block.1", c, &seen, err);
            if (rc) return rc;
        }
    }
    if (sd_unet_config_set_family(c) != 0) { /* the head layout of the UNet it controls */
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: ControlNet for an unsupported UNet (conv proj_in, adm %d): only "
                            "SD1.x, SD2.x and SDXL ControlNets are supported",
                            path, c->adm_in_channels);
    }
    c->out_channels = c->in_channels;
    return SD_OK;
}

/* ---- binding ----------------------------------------------------------------- */

/* The UNet's encoder walk (sd_unet_bind_encoder), plus the zero convs (one
 * per input block, width of that block's output) and the hint block. */
static void build(unet_loader *ld, sd_controlnet *cn) {
    sd_unet *u = cn->enc;
    const sd_unet_config *c = &u->cfg;
    int mc = c->model_channels;
    char base[128];
    int chans[SD_UNET_MAX_BLOCKS];
    int ch = sd_unet_bind_encoder(ld, u, chans);
    cn->n_zero = u->n_in;
    for (int i = 0; i < u->n_in; i++) {
        snprintf(base, sizeof base, "zero_convs.%d.0", i);
        cn->zero_w[i] = sd_unet_get(ld, 4, chans[i], chans[i], 1, 1, base, ".weight");
        cn->zero_b[i] = sd_unet_get(ld, 1, chans[i], 0, 0, 0, base, ".bias");
    }
    cn->mid_w = sd_unet_get(ld, 4, ch, ch, 1, 1, "middle_block_out.0", ".weight");
    cn->mid_b = sd_unet_get(ld, 1, ch, 0, 0, 0, "middle_block_out.0", ".bias");

    /* input_hint_block: convs at even indices, the last one to model_channels */
    int cin = cn->hint_ch;
    for (int k = 0; k < cn->n_hint; k++) {
        snprintf(base, sizeof base, "input_hint_block.%d", 2 * k);
        int64_t s[SD_MAX_DIMS];
        char nm[160];
        snprintf(nm, sizeof nm, "%s.weight", base);
        int nd = sd_weights_shape(&ld->w, nm, s);
        int cout = nd == 4 ? (int)s[0] : -1;
        if (k == cn->n_hint - 1 && cout != mc && !ld->failed) {
            ld->failed = 1;
            char key[600];
            sd_error_set(ld->err, SD_ERR_FORMAT, "%s: '%s' must map to model_channels %d",
                         sd_st_path(ld->w.file), sd_weights_key(&ld->w, nm, key, sizeof key), mc);
        }
        cn->hint_w[k] = sd_unet_get(ld, 4, cout, cin, 3, 3, base, ".weight");
        cn->hint_b[k] = sd_unet_get(ld, 1, cout, 0, 0, 0, base, ".bias");
        cin = cout;
    }
}

void sd_controlnet_free(sd_controlnet *cn) {
    if (!cn) return;
    sd_sd3_cn_free(cn->mmdit);
    sd_unet_free(cn->enc);
    for (int k = 0; k < CN_MAX_HINT; k++) {
        sd_bt_free(cn->hint_w[k]);
        sd_bt_free(cn->hint_b[k]);
    }
    for (int i = 0; i < SD_UNET_MAX_BLOCKS; i++) {
        sd_bt_free(cn->zero_w[i]);
        sd_bt_free(cn->zero_b[i]);
    }
    sd_bt_free(cn->mid_w);
    sd_bt_free(cn->mid_b);
    sd_cn_union_free(cn);
    free(cn->renamed);
    free(cn);
}

/* The layout from names and shapes, no tensor read: SD_OK with *prefix set
 * and *cfg, *h0, *n_hint filled for the original layout, or with *prefix NULL
 * for a diffusers-layout file (renamed, then checked, at load) or, with
 * *mmdit set, an SD3 ControlNet; else the refusal. ComfyUI's
 * load_controlnet_state_dict looks for the DiT ControlNets first. */
static sd_status pick_layout(sd_st_file *f, const char **out_prefix, sd_unet_config *cfg,
                             const sd_st_entry **out_h0, int *out_n_hint, int *mmdit, sd_error *err) {
    const char *path = sd_st_path(f);
    const char *prefix = NULL;
    *out_prefix = NULL;
    *mmdit = 0;
    const char *other = sd_sd3_cn_other_dit(f);
    if (other) return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: %s is not supported", path, other);
    if (sd_sd3_cn_present(f)) {
        *mmdit = 1;
        return SD_OK;
    }
    if (sd_unet_find(f, SD_CONTROLNET_PREFIX, "input_hint_block.0.weight")) prefix = SD_CONTROLNET_PREFIX;
    else if (sd_unet_find(f, "", "input_hint_block.0.weight")) prefix = "";
    if (!prefix) {
        if (sd_controlnet_is_diffusers(f)) return SD_OK;
        if (sd_unet_find(f, "", "lora_controlnet"))
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: Control-LoRA files are not supported", path);
        if (sd_unet_find(f, "", "body.0.in_conv.weight") || sd_unet_find(f, "", "conv_in.weight") ||
            sd_unet_find(f, "", "adapter.body.0.resnets.0.block1.weight"))
            return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: T2I-Adapters are not supported", path);
        if (sd_unet_find(f, "model.diffusion_model.", "input_blocks.0.0.weight"))
            return sd_error_set(err, SD_ERR_INVALID,
                                "%s: this is a checkpoint (model.diffusion_model.*), not a ControlNet",
                                path);
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "%s: no ControlNet found (expected control_model.input_hint_block.0.weight)",
                            path);
    }
    sd_status rc = detect(f, prefix, cfg, err);
    if (rc) return rc;
    const sd_st_entry *h0 = sd_unet_find(f, prefix, "input_hint_block.0.weight");
    int n_hint = 0;
    while (n_hint < CN_MAX_HINT && sd_unet_find(f, prefix, "input_hint_block.%d.weight", 2 * n_hint)) n_hint++;
    if (!h0 || h0->ndim != 4 || n_hint != 8)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: input_hint_block has %d convs, expected the standard 8", path, n_hint);
    *out_prefix = prefix;
    *out_h0 = h0;
    *out_n_hint = n_hint;
    return SD_OK;
}

sd_status sd_controlnet_probe_file(const char *path, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err);
    if (rc) return rc;
    const char *prefix;
    sd_unet_config cfg;
    const sd_st_entry *h0 = NULL;
    int n_hint = 0, mmdit = 0;
    rc = pick_layout(f, &prefix, &cfg, &h0, &n_hint, &mmdit, err);
    sd_st_close(f);
    return rc;
}

/* union_ok: the file came through the diffusers renaming, the only layout
 * whose Union parts ComfyUI builds (elsewhere they are unused keys). */
static sd_status load(sd_backend *be, sd_st_file *f, sd_dtype weight_dtype, int union_ok,
                      sd_controlnet **out, sd_error *err);

sd_status sd_controlnet_load(sd_backend *be, sd_st_file *f, sd_dtype weight_dtype,
                             sd_controlnet **out, sd_error *err) {
    return load(be, f, weight_dtype, 0, out, err);
}

static sd_status load(sd_backend *be, sd_st_file *f, sd_dtype weight_dtype, int union_ok,
                      sd_controlnet **out, sd_error *err) {
    *out = NULL;
    sd_error local;
    if (!err) err = &local;
    const char *path = sd_st_path(f);
    const char *prefix = NULL;
    sd_unet_config cfg;
    const sd_st_entry *h0 = NULL;
    int n_hint = 0, mmdit = 0;
    sd_status rc = pick_layout(f, &prefix, &cfg, &h0, &n_hint, &mmdit, err);
    if (rc) return rc;
    if (mmdit) {
        sd_controlnet *cn = calloc(1, sizeof *cn);
        if (!cn) return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the ControlNet");
        cn->be = be;
        if ((rc = sd_sd3_cn_load(be, f, &cn->mmdit, err))) {
            free(cn);
            return rc;
        }
        cn->hint_ch = 3;
        *out = cn;
        return SD_OK;
    }
    if (!prefix) {
        /* diffusers layout: rename to the original layout and load that */
        void *buf = NULL;
        size_t size = 0;
        sd_st_file *f2 = NULL;
        rc = sd_controlnet_diffusers_to_ldm(f, &buf, &size, err);
        if (!rc) rc = sd_st_open_memory(buf, size, path, &f2, err);
        if (!rc && !sd_st_find(f2, "input_hint_block.0.weight"))
            rc = sd_error_set(err, SD_ERR_FORMAT,
                              "%s: diffusers-layout ControlNet without "
                              "controlnet_cond_embedding.conv_in",
                              path);
        if (!rc) rc = load(be, f2, weight_dtype, 1, out, err);
        sd_st_close(f2);
        if (rc) {
            sd_error_prefix(err, "diffusers-layout ControlNet");
            free(buf);
            return rc;
        }
        (*out)->renamed = buf;
        return SD_OK;
    }

    sd_controlnet *cn = calloc(1, sizeof *cn);
    sd_unet *u = calloc(1, sizeof *u);
    if (!cn || !u) {
        free(cn);
        free(u);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the ControlNet");
    }
    cn->be = be;
    cn->enc = u;
    u->be = be;
    u->cfg = cfg;
    cn->hint_ch = (int)h0->shape[1];
    cn->n_hint = n_hint;
    for (int k = 0; k < n_hint; k++) cn->hint_stride[k] = (k == 2 || k == 4 || k == 6) ? 2 : 1;
    unet_loader ld = {.err = err, .what = "ControlNet"};
    sd_weights_init(&ld.w, be, f, prefix);
    ld.w.dtype = weight_dtype;
    build(&ld, cn);
    if (union_ok && !ld.failed && sd_cn_union_present(f, prefix)) sd_cn_union_bind(&ld, cn);
    if (ld.failed) {
        sd_controlnet_free(cn);
        return err->code ? err->code : SD_ERR_INTERNAL;
    }
    *out = cn;
    return SD_OK;
}

sd_controlnet_kind sd_controlnet_kind_of(const sd_controlnet *cn) {
    return cn->mmdit ? SD_CONTROLNET_MMDIT : SD_CONTROLNET_UNET;
}
struct sd_sd3_cn *sd_controlnet_mmdit(const sd_controlnet *cn) { return cn->mmdit; }
const sd_unet_config *sd_controlnet_config(const sd_controlnet *cn) { return cn->enc ? &cn->enc->cfg : NULL; }
int sd_controlnet_hint_channels(const sd_controlnet *cn) { return cn->hint_ch; }
int sd_controlnet_n_outputs(const sd_controlnet *cn) {
    return cn->mmdit ? sd_sd3_cn_n_outputs(cn->mmdit) : cn->n_zero;
}

sd_status sd_controlnet_check_fit_mmdit(const sd_controlnet *cn, const sd_sd3_config *m, sd_error *err) {
    if (!cn->mmdit)
        return sd_error_set(err, SD_ERR_INVALID,
                            "an SD1/SD2/SDXL ControlNet does not fit an SD3 model (it adds to a UNet's skip "
                            "connections; use an SD3 ControlNet)");
    return sd_sd3_cn_check_fit(cn->mmdit, m, err);
}

void sd_controlnet_set_tap(sd_controlnet *cn, sd_unet_tap_fn fn, void *user) {
    cn->tap = fn;
    cn->tap_user = user;
}

sd_status sd_controlnet_check_fit(const sd_controlnet *cn, const sd_unet_config *u, sd_error *err) {
    if (cn->mmdit)
        return sd_error_set(err, SD_ERR_INVALID,
                            "an SD3 ControlNet does not fit an SD UNet model (it adds to an MMDiT's joint "
                            "blocks; use an SD1/SD2/SDXL ControlNet)");
    const sd_unet_config *c = &cn->enc->cfg;
    if (c->context_dim != u->context_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ControlNet does not fit the model: its context width is %d, the model's %d "
                            "(a ControlNet for another model family?)",
                            c->context_dim, u->context_dim);
    if (c->in_channels != u->in_channels)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ControlNet does not fit the model: it takes %d latent channels, the model %d",
                            c->in_channels, u->in_channels);
    if (c->model_channels != u->model_channels || c->num_levels != u->num_levels)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ControlNet does not fit the model: %d channels x %d levels, the model has "
                            "%d x %d",
                            c->model_channels, c->num_levels, u->model_channels, u->num_levels);
    for (int i = 0; i < c->num_levels; i++)
        if (c->channel_mult[i] != u->channel_mult[i] || c->num_res_blocks[i] != u->num_res_blocks[i])
            return sd_error_set(err, SD_ERR_INVALID,
                                "ControlNet does not fit the model: level %d has %d res blocks of width "
                                "%d, the model %d of width %d",
                                i, c->num_res_blocks[i], c->channel_mult[i] * c->model_channels,
                                u->num_res_blocks[i], u->channel_mult[i] * u->model_channels);
    if (c->adm_in_channels != u->adm_in_channels)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ControlNet does not fit the model: label_emb width %d, the model's %d",
                            c->adm_in_channels, u->adm_in_channels);
    return SD_OK;
}
