/* sd3_config.c - the MMDiT's architecture from key names and shapes
 * (ComfyUI's model_detection for "joint_blocks", with the head width, MLP
 * width, output channels and MMDiT-X blocks read from the file). */
#include "sd3_internal.h"

#include <math.h>
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

int sd_sd3_present(sd_st_file *f, const char *prefix) {
    return find(f, prefix, "joint_blocks.0.x_block.attn.qkv.weight") &&
           find(f, prefix, "x_embedder.proj.weight");
}

/* Any key starting with prefix+what (entries are sorted by name). */
static int has_keys(sd_st_file *f, const char *prefix, const char *what) {
    char p[400];
    int len = snprintf(p, sizeof p, "%s%s", prefix, what);
    size_t lo = 0, hi = sd_st_count(f);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(sd_st_at(f, mid)->name, p) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < sd_st_count(f) && strncmp(sd_st_at(f, lo)->name, p, (size_t)len) == 0;
}

static int count_blocks(sd_st_file *f, const char *prefix) {
    int n = 0;
    for (;;) {
        char what[64];
        snprintf(what, sizeof what, "joint_blocks.%d.", n);
        if (!has_keys(f, prefix, what)) return n;
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
    return sd_error_set(err, code, "%s: SD3 MMDiT%s%s%s: %s", sd_st_path(f), *prefix ? " under '" : "",
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

sd_status sd_sd3_detect(sd_st_file *f, const char *prefix, sd_sd3_config *cfg, sd_error *err) {
    return sd3_detect_ex(f, prefix, 0, cfg, err);
}

sd_status sd3_detect_ex(sd_st_file *f, const char *prefix, int controlnet, sd_sd3_config *cfg,
                        sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (!prefix) prefix = "";
    if (!sd_sd3_present(f, prefix))
        return bad(f, prefix, SD_ERR_NOT_FOUND, err,
                   "no MMDiT (no '%sjoint_blocks.0.x_block.attn.qkv.weight' with '%sx_embedder.proj.weight')",
                   prefix, prefix);
    if (find(f, prefix, "register"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "register tokens ('register') are not supported");
    if (has_keys(f, prefix, "context_processor."))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "a context processor ('context_processor.') is not supported");
    if (find(f, prefix, "joint_blocks.0.x_block.attn.ln_q.bias"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "LayerNorm q/k norms (joint_blocks.0.x_block.attn.ln_q.bias) are not supported");
    if (has_keys(f, prefix, "joint_blocks.0.x_block.mlp.w1."))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "SwiGLU MLPs (joint_blocks.0.x_block.mlp.w1) are not supported");

    const sd_st_entry *xe = find(f, prefix, "x_embedder.proj.weight");
    if (xe->ndim != 4 || xe->shape[0] <= 0 || xe->shape[1] <= 0 || xe->shape[2] <= 0 ||
        xe->shape[2] != xe->shape[3])
        return bad(f, prefix, SD_ERR_FORMAT, err, "x_embedder.proj.weight is not a square convolution kernel");
    int64_t hid = xe->shape[0];
    cfg->hidden_size = (int)hid;
    cfg->in_channels = (int)xe->shape[1];
    cfg->patch_size = (int)xe->shape[2];

    const sd_st_entry *pe = find(f, prefix, "pos_embed");
    if (!pe) return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "no pos_embed (computed position embeddings are not supported)");
    int64_t m = pe->ndim == 3 ? (int64_t)llround(sqrt((double)pe->shape[1])) : 0;
    if (pe->ndim != 3 || pe->shape[0] != 1 || pe->shape[2] != hid || m <= 0 || m * m != pe->shape[1])
        return bad(f, prefix, SD_ERR_FORMAT, err, "pos_embed is not [1, M*M, %lld]", (long long)hid);
    cfg->pos_embed_max_size = (int)m;

    sd_status rc;
    int64_t r, c;
    if ((rc = mat(f, prefix, "context_embedder.weight", &r, &c, err))) return rc;
    if (r != hid)
        return bad(f, prefix, SD_ERR_FORMAT, err, "context_embedder.weight has %lld outputs, not %lld",
                   (long long)r, (long long)hid);
    cfg->context_in_dim = (int)c;
    if (find(f, prefix, "y_embedder.mlp.0.weight")) {
        if ((rc = mat(f, prefix, "y_embedder.mlp.0.weight", &r, &c, err))) return rc;
        if (r != hid)
            return bad(f, prefix, SD_ERR_FORMAT, err, "y_embedder.mlp.0.weight has %lld outputs, not %lld",
                       (long long)r, (long long)hid);
        cfg->adm_in_channels = (int)c;
    }

    cfg->depth = count_blocks(f, prefix);
    if (cfg->depth > SD_SD3_MAX_DEPTH)
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "%d joint blocks (at most %d)", cfg->depth,
                   SD_SD3_MAX_DEPTH);
    const sd_st_entry *lq = find(f, prefix, "joint_blocks.0.x_block.attn.ln_q.weight");
    cfg->qk_norm = lq != NULL;
    if (lq && (lq->ndim != 1 || lq->shape[0] <= 0 || hid % lq->shape[0] != 0))
        return bad(f, prefix, SD_ERR_FORMAT, err,
                   "joint_blocks.0.x_block.attn.ln_q.weight must be a vector whose length (the head "
                   "width) divides the hidden size %lld",
                   (long long)hid);
    cfg->head_dim = lq ? (int)lq->shape[0] : 64;
    if (hid % cfg->head_dim != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err, "hidden size %lld is not a multiple of the head width %d",
                   (long long)hid, cfg->head_dim);
    cfg->num_heads = (int)(hid / cfg->head_dim);
    cfg->qkv_bias = find(f, prefix, "joint_blocks.0.x_block.attn.qkv.bias") != NULL;

    if ((rc = mat(f, prefix, "joint_blocks.0.x_block.mlp.fc1.weight", &r, &c, err))) return rc;
    if (c != hid)
        return bad(f, prefix, SD_ERR_FORMAT, err, "joint_blocks.0.x_block.mlp.fc1.weight takes %lld inputs, not %lld",
                   (long long)c, (long long)hid);
    cfg->mlp_hidden = (int)r;

    for (int i = 0; i < cfg->depth; i++)
        if (find(f, prefix, "joint_blocks.%d.x_block.attn2.qkv.weight", i)) {
            cfg->self_attn |= (uint64_t)1 << i;
            cfg->n_self_attn++;
        }
    /* the modulation widths tell the block kinds apart (6 or 9 x hidden for
     * an x block, 6 or 2 for a context block); scale-only modulation (4 / 1)
     * is refused here */
    for (int i = 0; i < cfg->depth; i++) {
        char name[96];
        int last = !controlnet && i == cfg->depth - 1, sa = (int)((cfg->self_attn >> i) & 1);
        snprintf(name, sizeof name, "joint_blocks.%d.x_block.adaLN_modulation.1.weight", i);
        if ((rc = mat(f, prefix, name, &r, &c, err))) return rc;
        if (r != (sa ? 9 : 6) * hid)
            return bad(f, prefix, SD_ERR_UNSUPPORTED, err, "%s has %lld outputs, not %lld (%s)", name,
                       (long long)r, (long long)((sa ? 9 : 6) * hid),
                       sa ? "MMDiT-X block" : "shift, scale and gate for attention and MLP");
        snprintf(name, sizeof name, "joint_blocks.%d.context_block.adaLN_modulation.1.weight", i);
        if ((rc = mat(f, prefix, name, &r, &c, err))) return rc;
        if (r != (last ? 2 : 6) * hid)
            return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                       "%s has %lld outputs, not %lld (%s)", name, (long long)r,
                       (long long)((last ? 2 : 6) * hid),
                       last ? "the last block's context branch is pre-only" : "a full context block");
    }

    if (cfg->depth < 1) return bad(f, prefix, SD_ERR_FORMAT, err, "no joint blocks");
    if (controlnet) { /* no final layer: the output is the image tokens */
        cfg->out_channels = cfg->in_channels;
        return SD_OK;
    }
    if ((rc = mat(f, prefix, "final_layer.linear.weight", &r, &c, err))) return rc;
    int64_t pp = (int64_t)cfg->patch_size * cfg->patch_size;
    if (r % pp != 0 || c != hid)
        return bad(f, prefix, SD_ERR_FORMAT, err, "final_layer.linear.weight is [%lld, %lld]", (long long)r,
                   (long long)c);
    cfg->out_channels = (int)(r / pp);
    if (cfg->in_channels != cfg->out_channels)
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "%d input channels for %d output channels: concatenated image conditioning is not "
                   "supported",
                   cfg->in_channels, cfg->out_channels);
    if (cfg->depth < 1)
        return bad(f, prefix, SD_ERR_FORMAT, err, "no joint blocks");
    return SD_OK;
}
