/* zimage_config.c - the NextDiT's architecture from key names and shapes
 * (ComfyUI's model_detection for image_model "lumina2" with the Z-Image
 * branch, with heads, kv heads and FFN width read from the file instead of
 * assumed from dim 3840), and the RoPE table. */
#include "zimage_internal.h"

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

int sd_zimage_present(sd_st_file *f, const char *prefix) {
    return find(f, prefix, "cap_embedder.1.weight") != NULL;
}

/* Blocks "<what>.0.", "<what>.1.", ... present without a gap: entries are
 * sorted by name, so look for the first key at or after the block prefix. */
static int count_blocks(sd_st_file *f, const char *prefix, const char *what) {
    int n = 0;
    for (;;) {
        char p[400];
        int len = snprintf(p, sizeof p, "%s%s.%d.", prefix, what, n);
        size_t lo = 0, hi = sd_st_count(f);
        while (lo < hi) {
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
    return sd_error_set(err, code, "%s: Z-Image model%s%s%s: %s", sd_st_path(f),
                        *prefix ? " under '" : "", prefix, *prefix ? "'" : "", msg);
}

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

static sd_status vec(sd_st_file *f, const char *prefix, const char *name, int64_t *len,
                     sd_error *err) {
    const sd_st_entry *e = find(f, prefix, "%s", name);
    if (!e) return bad(f, prefix, SD_ERR_NOT_FOUND, err, "missing tensor '%s%s'", prefix, name);
    if (e->ndim != 1 || e->shape[0] <= 0)
        return bad(f, prefix, SD_ERR_FORMAT, err, "tensor '%s%s' is not a vector", prefix, name);
    *len = e->shape[0];
    return SD_OK;
}

sd_status sd_zimage_detect(sd_st_file *f, const char *prefix, sd_zimage_config *cfg,
                           sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (!prefix) prefix = "";
    if (!sd_zimage_present(f, prefix))
        return bad(f, prefix, SD_ERR_NOT_FOUND, err, "no NextDiT (no '%scap_embedder.1.weight')", prefix);
    if (find(f, prefix, "clip_text_pooled_proj.0.weight"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "NewBie layout (clip_text_pooled_proj) is not supported");
    if (find(f, prefix, "layers.0.adaLN_modulation.1.weight") || !find(f, prefix, "x_pad_token"))
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "Lumina Image 2.0 layout (SiLU before adaLN_modulation.1, no pad tokens) is "
                   "not supported; only Z-Image's NextDiT is");

    sd_status rc;
    int64_t r = 0, c = 0, len = 0;
    cfg->patch_size = 2;
    cfg->norm_eps = 1e-5f;
    cfg->rope_theta = 256.0;
    cfg->time_scale = 1000.0;
    int64_t pp = (int64_t)cfg->patch_size * cfg->patch_size;
    if ((rc = mat(f, prefix, "cap_embedder.1.weight", &r, &c, err))) return rc;
    cfg->dim = (int)r;
    cfg->cap_feat_dim = (int)c;
    int64_t dim = r;
    if ((rc = mat(f, prefix, "x_embedder.weight", &r, &c, err))) return rc;
    if (r != dim || c % pp != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err, "x_embedder.weight is [%lld, %lld], want [%lld, C*%lld]",
                   (long long)r, (long long)c, (long long)dim, (long long)pp);
    cfg->in_channels = (int)(c / pp);

    if ((rc = vec(f, prefix, "layers.0.attention.q_norm.weight", &len, err))) return rc;
    if (dim % len != 0 || len % 2 != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err,
                   "layers.0.attention.q_norm.weight has %lld values: the head width must be even "
                   "and divide the width %lld",
                   (long long)len, (long long)dim);
    cfg->head_dim = (int)len;
    cfg->n_heads = (int)(dim / len);
    if ((rc = mat(f, prefix, "layers.0.attention.qkv.weight", &r, &c, err))) return rc;
    int64_t kv2 = r / len - cfg->n_heads;
    if (c != dim || r % len != 0 || kv2 <= 0 || kv2 % 2 != 0 || cfg->n_heads % (kv2 / 2) != 0)
        return bad(f, prefix, SD_ERR_FORMAT, err,
                   "layers.0.attention.qkv.weight is [%lld, %lld]: not %d query heads and a "
                   "divisor of them as key/value heads of width %d",
                   (long long)r, (long long)c, cfg->n_heads, cfg->head_dim);
    cfg->n_kv_heads = (int)(kv2 / 2);
    cfg->out_bias = find(f, prefix, "layers.0.attention.out.bias") != NULL;
    if (cfg->head_dim == 128) {
        cfg->axes_dim[0] = 32, cfg->axes_dim[1] = 48, cfg->axes_dim[2] = 48;
    } else if (cfg->head_dim % 16 == 0) {
        cfg->axes_dim[0] = cfg->head_dim / 4;
        cfg->axes_dim[1] = cfg->axes_dim[2] = 3 * cfg->head_dim / 8;
    } else {
        return bad(f, prefix, SD_ERR_UNSUPPORTED, err,
                   "head width %d: no RoPE axes known for it (128, or a multiple of 16)", cfg->head_dim);
    }

    if ((rc = mat(f, prefix, "layers.0.feed_forward.w1.weight", &r, &c, err))) return rc;
    if (c != dim)
        return bad(f, prefix, SD_ERR_FORMAT, err, "layers.0.feed_forward.w1.weight takes %lld inputs, not %lld",
                   (long long)c, (long long)dim);
    cfg->ffn_hidden = (int)r;

    if ((rc = mat(f, prefix, "t_embedder.mlp.0.weight", &r, &c, err))) return rc;
    if (c != 256)
        return bad(f, prefix, SD_ERR_FORMAT, err, "t_embedder.mlp.0.weight takes %lld inputs, not 256",
                   (long long)c);
    cfg->t_dim = (int)r;
    if ((rc = mat(f, prefix, "t_embedder.mlp.2.weight", &r, &c, err))) return rc;
    if (c != cfg->t_dim)
        return bad(f, prefix, SD_ERR_FORMAT, err, "t_embedder.mlp.2.weight takes %lld inputs, not %d",
                   (long long)c, cfg->t_dim);
    cfg->adaln_dim = (int)r;

    cfg->n_layers = count_blocks(f, prefix, "layers");
    cfg->n_refiner_layers = count_blocks(f, prefix, "noise_refiner");
    int ctx_layers = count_blocks(f, prefix, "context_refiner");
    if (ctx_layers != cfg->n_refiner_layers)
        return bad(f, prefix, SD_ERR_FORMAT, err, "%d noise_refiner blocks but %d context_refiner blocks",
                   cfg->n_refiner_layers, ctx_layers);
    if (find(f, prefix, "cap_pad_token")) cfg->pad_tokens_multiple = 32;

    if ((rc = mat(f, prefix, "final_layer.linear.weight", &r, &c, err))) return rc;
    if (r != pp * cfg->in_channels || c != dim)
        return bad(f, prefix, SD_ERR_FORMAT, err, "final_layer.linear.weight is [%lld, %lld], want [%lld, %lld]",
                   (long long)r, (long long)c, (long long)(pp * cfg->in_channels), (long long)dim);
    return SD_OK;
}

/* torch.linspace(start, end, steps) in float64 on the CPU: the first half
 * counted up from start, the second half down from end. */
static double linspace_at(double start, double end, int64_t steps, int64_t i) {
    if (steps == 1) return start;
    double step = (end - start) / (double)(steps - 1);
    return i < steps / 2 ? start + step * (double)i : end - step * (double)(steps - i - 1);
}

void sd_zimage_rope_table(const sd_zimage_config *c, int64_t cap, int64_t h, int64_t w,
                          int64_t img_pad, float *out) {
    int half = c->head_dim / 2;
    int64_t L = cap + h * w + img_pad;
    for (int64_t l = 0; l < L; l++) {
        double pos[SD_ZIMAGE_AXES] = {0};
        if (l < cap) {
            pos[0] = (double)(l + 1);
        } else if (l < cap + h * w) {
            int64_t t = l - cap;
            pos[0] = (double)(cap + 1);
            pos[1] = (double)(t / w);
            pos[2] = (double)(t % w);
        }
        float *o = out + l * half * 2;
        int j = 0;
        for (int a = 0; a < SD_ZIMAGE_AXES; a++) {
            int d = c->axes_dim[a];
            for (int k = 0; k < d / 2; k++, j++) {
                double scale = linspace_at(0.0, (double)(d - 2) / (double)d, d / 2, k);
                double omega = 1.0 / pow(c->rope_theta, scale);
                double ang = pos[a] * omega;
                o[2 * j] = (float)cos(ang);
                o[2 * j + 1] = (float)sin(ang);
            }
        }
    }
}
