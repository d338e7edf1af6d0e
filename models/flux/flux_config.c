/* flux_config.c - the Flux DiT's architecture from key names and shapes
 * (ComfyUI's model_detection for image_model "flux", with num_heads, MLP
 * width, qkv bias and output channels read from the file instead of
 * assumed). */
#include "flux_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const sd_st_entry *find(sd_st_file *f, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const sd_st_entry *find(sd_st_file *f, const char *prefix, const char *fmt, ...) {
    char name[400], key[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return sd_st_find(f, key);
}

int sd_flux_present(sd_st_file *f, const char *prefix) {
    return find(f, prefix, "double_blocks.0.img_attn.norm.key_norm.scale") &&
           find(f, prefix, "img_in.weight");
}

/* Blocks "<what>.0.", "<what>.1.", ... present without a gap (count_blocks):
 * entries are sorted by name, so look for any key with the block prefix. */
static int count_blocks(sd_st_file *f, const char *prefix, const char *what) {
    int n = 0;
    for (;;) {
        char p[400];
        int len = snprintf(p, sizeof p, "%s%s.%d.", prefix, what, n);
        size_t lo = 0, hi = sd_st_count(f);
        while (lo < hi) { /* first entry >= p */
            size_t mid = (lo + hi) / 2;
            if (strcmp(sd_st_at(f, mid)->name, p) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo >= sd_st_count(f) || strncmp(sd_st_at(f, lo)->name, p, (size_t)len) != 0) return n;
        n++;
    }
}

static sd_status bad(sd_st_file *f, const char *prefix, sd_status code, sd_error *err,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static sd_status bad(sd_st_file *f, const char *prefix, sd_status code, sd_error *err,
                     const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sd_error_set(err, code, "%s: Flux model%s%s%s: %s", sd_st_path(f), *prefix ? " under '" : "",
                        prefix, *prefix ? "'" : "", msg);
}

/* A 2-D entry's shape, or an error naming it. */
static sd_status mat(sd_st_file *f, const char *prefix, const char *name, int64_t *rows,
                     int64_t *cols, sd_error *err) {
    const sd_st_entry *e = find(f, prefix, "%s", name);
    if (!e) return bad(f, prefix, SD_ERR_NOT_FOUND, err, "missing tensor '%s%s'", prefix, name);
    if (e->ndim != 2 || e->shape[0] <= 0 || e->shape[1] <= 0)
        return bad(f, prefix, SD_ERR_FORMAT, err, "tensor '%s%s' is not a matrix", prefix, name);
    *rows = e->shape[0];
    *cols = e->shape[1];
    return SD_OK;
}

/* RoPE axes: ComfyUI's for the released models, the sdflow rule otherwise
 * (flux.h). */
static int axes_for(int head_dim, int *axes) {
    if (head_dim == 128) {
        axes[0] = 16, axes[1] = 56, axes[2] = 56;
        return 1;
    }
    if (head_dim <= 0 || head_dim % 16 != 0) return 0;
    axes[0] = head_dim / 4, axes[1] = axes[2] = 3 * head_dim / 8;
    return 1;
}

sd_status sd_flux_detect(sd_st_file *f, const char *prefix, sd_flux_config *cfg, sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (!prefix) prefix = "";
    if (!sd_flux_present(f, prefix))
        return bad(f, prefix, SD_ERR_NOT_FOUND, err,
                   "no Flux DiT (no '%sdouble_blocks.0.img_attn.norm.key_norm.scale' with "
                   "'%simg_in.weight')",
                   prefix, prefix);
    /* the family's other members, named rather than half-run */
    if (find(f, prefix, "double_stream_modulation_img.lin.weight"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "Flux.2 layout (global modulation, key 'double_stream_modulation_img') is not "
                   "supported");
    if (find(f, prefix, "distilled_guidance_layer.norms.0.scale") ||
        find(f, prefix, "distilled_guidance_layer.0.norms.0.scale"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "Chroma layout (distilled_guidance_layer) is not supported");
    if (find(f, prefix, "double_blocks.0.img_mlp.gate_proj.weight"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "gated-MLP layout (double_blocks.0.img_mlp.gate_proj) is not supported");
    if (find(f, prefix, "txt_norm.scale"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "text-norm layout (txt_norm) is not supported");

    sd_status rc;
    int64_t hid, in4, r, c;
    if ((rc = mat(f, prefix, "img_in.weight", &hid, &in4, err))) return rc;
    cfg->patch_size = 2;
    cfg->theta = 10000;
    int64_t pp = (int64_t)cfg->patch_size * cfg->patch_size;
    if (in4 % pp != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err, "img_in.weight has %lld inputs, not a multiple of %lld",
                   (long long)in4, (long long)pp);
    cfg->hidden_size = (int)hid;
    cfg->in_channels = (int)(in4 / pp);
    if ((rc = mat(f, prefix, "txt_in.weight", &r, &c, err))) return rc;
    if (r != hid)
        return bad(f, prefix, SD_ERR_FORMAT, err, "txt_in.weight has %lld outputs, img_in.weight %lld",
                   (long long)r, (long long)hid);
    cfg->context_in_dim = (int)c;
    const sd_st_entry *vin = find(f, prefix, "vector_in.in_layer.weight");
    if (vin) {
        if (vin->ndim != 2 || vin->shape[0] != hid)
            return bad(f, prefix, SD_ERR_FORMAT, err, "vector_in.in_layer.weight does not map to %lld",
                       (long long)hid);
        cfg->vec_in_dim = (int)vin->shape[1];
    }
    cfg->guidance_embed = find(f, prefix, "guidance_in.in_layer.weight") != NULL;
    cfg->depth = count_blocks(f, prefix, "double_blocks");
    cfg->depth_single_blocks = count_blocks(f, prefix, "single_blocks");

    const sd_st_entry *qn = find(f, prefix, "double_blocks.0.img_attn.norm.query_norm.scale");
    if (!qn || qn->ndim != 1 || qn->shape[0] <= 0 || hid % qn->shape[0] != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err,
                   "double_blocks.0.img_attn.norm.query_norm.scale must be a vector whose length "
                   "(the head width) divides the hidden size %lld",
                   (long long)hid);
    cfg->head_dim = (int)qn->shape[0];
    cfg->num_heads = (int)(hid / cfg->head_dim);
    if (cfg->head_dim % 2 != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err, "head width %d is odd (RoPE needs pairs)", cfg->head_dim);
    cfg->n_axes = 3;
    if (!axes_for(cfg->head_dim, cfg->axes_dim))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "head width %d: no RoPE axes known for it (128, or a multiple of 16)",
                   cfg->head_dim);

    if ((rc = mat(f, prefix, "double_blocks.0.img_mlp.0.weight", &r, &c, err))) return rc;
    if (c != hid)
        return bad(f, prefix, SD_ERR_FORMAT, err, "double_blocks.0.img_mlp.0.weight takes %lld inputs, not %lld",
                   (long long)c, (long long)hid);
    cfg->mlp_hidden = (int)r;
    cfg->mlp_ratio = (double)r / (double)hid;
    cfg->qkv_bias = find(f, prefix, "double_blocks.0.img_attn.qkv.bias") != NULL;

    if ((rc = mat(f, prefix, "final_layer.linear.weight", &r, &c, err))) return rc;
    if (r % pp != 0 || c != hid)
        return bad(f, prefix, SD_ERR_FORMAT, err, "final_layer.linear.weight is [%lld, %lld]", (long long)r,
                   (long long)c);
    cfg->out_channels = (int)(r / pp);
    if (cfg->in_channels != cfg->out_channels)
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "%d input channels for %d output channels: a model with concatenated image "
                   "conditioning (Flux Fill, Depth or Canny) is not supported",
                   cfg->in_channels, cfg->out_channels);
    return SD_OK;
}
