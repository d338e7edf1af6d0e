/* upscale_tiled.c - ImageUpscaleWithModel's image path: comfy.utils.
 * tiled_scale over the model's forward with ComfyUI's out-of-memory tile
 * back-off (comfy_extras/nodes_upscale_model.py). */
#include "models/upscale/upscale_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t sd_upscale_tile_count(int64_t width, int64_t height, int tile, int overlap) {
    int64_t step = tile - overlap;
    if (step < 1) return -1;
    int64_t rows = height <= tile ? 1 : (height - overlap + step - 1) / step;
    int64_t cols = width <= tile ? 1 : (width - overlap + step - 1) / step;
    return rows * cols;
}

/* Rows [y0, y0+h) x cols [x0, x0+w) of image n, first C channels, as NCHW
 * [1, C, h, w] (IMAGE is NHWC with Ci channels). */
static sd_tensor *crop_nchw(const sd_tensor *img, int64_t n, int64_t C, int64_t y0, int64_t h,
                            int64_t x0, int64_t w) {
    int64_t H = img->shape[1], W = img->shape[2], Ci = img->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, 1, C, h, w);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(img) + n * H * W * Ci;
    float *d = sd_tensor_f32(o);
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) d[(c * h + y) * w + x] = s[((y0 + y) * W + x0 + x) * Ci + c];
    return o;
}

/* Python's round() of a non-negative value (half to even). */
static int64_t pyround(double v) { return (int64_t)nearbyint(v); }

static sd_status plain_forward(void *user, sd_upscale *m, const sd_tensor *x, sd_tensor **y,
                               sd_error *err) {
    (void)user;
    return sd_upscale_forward(m, x, y, err);
}

/* What one tiling pass needs besides the image and the tile. */
typedef struct {
    sd_upscale_forward_fn fwd;
    void *fwd_user;
    sd_upscale_progress_fn progress;
    void *user;
    int64_t done, total;
} pass;

/* One image through comfy.utils.tiled_scale_multidim: acc/div hold the
 * feathered sums ([C, OH, OW]); dst gets acc / div (or the single tile). */
static sd_status tiled_one(sd_upscale *m, const sd_tensor *img, int64_t n, int tile, int overlap,
                           float *dst, float *acc, float *div, pass *ps, sd_error *err) {
    const sd_upscale_config *cfg = sd_upscale_get_config(m);
    int64_t H = img->shape[1], W = img->shape[2], C = cfg->in_ch, OC = cfg->out_ch;
    int64_t up = cfg->scale, OH = H * up, OW = W * up, plane = OH * OW;
    if (H <= tile && W <= tile) { /* the whole image fits one tile */
        sd_tensor *in = crop_nchw(img, n, C, 0, H, 0, W), *o = NULL;
        sd_status rc = in ? ps->fwd(ps->fwd_user, m, in, &o, err)
                          : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        sd_tensor_unref(in);
        if (rc) return rc;
        memcpy(dst, o->data, (size_t)(OC * plane) * sizeof(float));
        sd_tensor_unref(o);
        ps->done++;
        return ps->progress ? ps->progress(ps->user, ps->done, ps->total, err) : SD_OK;
    }
    memset(acc, 0, (size_t)(OC * plane) * sizeof(float));
    memset(div, 0, (size_t)(OC * plane) * sizeof(float));
    int64_t step = tile - overlap;
    /* positions: range(0, size - overlap, step) when size > tile, else [0] */
    int64_t yend = H > tile ? H - overlap : 1, xend = W > tile ? W - overlap : 1;
    int64_t feather = pyround((double)overlap * (double)up);
    for (int64_t py = 0; py < yend; py += H > tile ? step : 1)
        for (int64_t px = 0; px < xend; px += W > tile ? step : 1) {
            int64_t h = tile < H - py ? tile : H - py, w = tile < W - px ? tile : W - px;
            sd_tensor *in = crop_nchw(img, n, C, py, h, px, w), *o = NULL;
            sd_status rc = in ? ps->fwd(ps->fwd_user, m, in, &o, err)
                              : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            sd_tensor_unref(in);
            if (rc) return rc;
            int64_t oh = o->shape[2], ow = o->shape[3], uy = py * up, ux = px * up;
            float *my = malloc((size_t)(oh + ow) * sizeof(float));
            if (!my) {
                sd_tensor_unref(o);
                return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            }
            float *mx = my + oh;
            /* mask = ones, rows then columns scaled by (t + 1) / feather at
             * both ends (skipped when the feather spans the whole tile) */
            for (int64_t i = 0; i < oh; i++) my[i] = 1.0f;
            for (int64_t i = 0; i < ow; i++) mx[i] = 1.0f;
            for (int d = 0; d < 2; d++) {
                float *mk = d ? mx : my;
                int64_t len = d ? ow : oh;
                if (feather >= len) continue;
                for (int64_t t = 0; t < feather; t++) {
                    float a = (float)((double)(t + 1) / (double)feather);
                    mk[t] *= a;
                    mk[len - 1 - t] *= a;
                }
            }
            const float *op = o->data;
            for (int64_t c = 0; c < OC; c++)
                for (int64_t y = 0; y < oh; y++)
                    for (int64_t x = 0; x < ow; x++) {
                        float mv = my[y] * mx[x];
                        int64_t di = c * plane + (uy + y) * OW + ux + x;
                        acc[di] += op[(c * oh + y) * ow + x] * mv;
                        div[di] += mv;
                    }
            free(my);
            sd_tensor_unref(o);
            ps->done++;
            if (ps->progress && (rc = ps->progress(ps->user, ps->done, ps->total, err)) != SD_OK)
                return rc;
        }
    for (int64_t i = 0; i < OC * plane; i++) dst[i] = acc[i] / div[i];
    return SD_OK;
}

/* The whole batch at one tile size into NCHW `res`. */
static sd_status tiled_all(sd_upscale *m, const sd_tensor *image, int tile, int overlap,
                           sd_tensor *res, pass *ps, sd_error *err) {
    int64_t N = image->shape[0], H = image->shape[1], W = image->shape[2];
    int64_t per = res->shape[1] * res->shape[2] * res->shape[3];
    float *acc = malloc((size_t)per * sizeof(float)), *div = malloc((size_t)per * sizeof(float));
    if (!acc || !div) {
        free(acc);
        free(div);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory (tile blending buffers)");
    }
    ps->done = 0;
    ps->total = N * sd_upscale_tile_count(W, H, tile, overlap);
    sd_status rc = SD_OK;
    for (int64_t n = 0; n < N && rc == SD_OK; n++)
        rc = tiled_one(m, image, n, tile, overlap, sd_tensor_f32(res) + n * per, acc, div, ps, err);
    free(acc);
    free(div);
    return rc;
}

sd_status sd_upscale_image(sd_upscale *m, const sd_tensor *image, int tile, int overlap,
                           int min_tile, sd_upscale_progress_fn progress, void *user,
                           sd_tensor **out, int *tile_used, sd_error *err) {
    return sd_upscale_image_with(m, image, tile, overlap, min_tile, plain_forward, NULL, progress,
                                 user, out, tile_used, err);
}

sd_status sd_upscale_image_with(sd_upscale *m, const sd_tensor *image, int tile, int overlap,
                                int min_tile, sd_upscale_forward_fn fwd, void *fwd_user,
                                sd_upscale_progress_fn progress, void *user, sd_tensor **out,
                                int *tile_used, sd_error *err) {
    *out = NULL;
    pass ps = {fwd, fwd_user, progress, user, 0, 0};
    const sd_upscale_config *cfg = sd_upscale_get_config(m);
    if (image->dtype != SD_F32 || image->ndim != 4 || image->shape[3] < cfg->in_ch ||
        image->shape[1] < 1 || image->shape[2] < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "image must be an F32 IMAGE [N, H, W, C] with at least %d channels",
                            cfg->in_ch);
    if (tile < 1 || overlap < 0 || overlap >= tile || min_tile < 1)
        return sd_error_set(err, SD_ERR_INVALID, "upscale tiling: tile %d, overlap %d, minimum %d",
                            tile, overlap, min_tile);
    int64_t N = image->shape[0], H = image->shape[1], W = image->shape[2];
    int64_t OC = cfg->out_ch, OH = H * cfg->scale, OW = W * cfg->scale;
    sd_tensor *res = sd_tensor_new4(SD_F32, 4, N, OC, OH, OW);
    if (!res) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (upscaled image)");
    sd_status rc;
    for (;;) {
        rc = tiled_all(m, image, tile, overlap, res, &ps, err);
        /* ComfyUI: on OOM, tile //= 2 and redo everything; below 128 re-raise */
        if (rc != SD_ERR_NOMEM || tile / 2 < min_tile || tile / 2 <= overlap) break;
        tile /= 2;
    }
    if (rc) {
        sd_tensor_unref(res);
        return rc;
    }
    if (tile_used) *tile_used = tile;
    /* NCHW -> IMAGE NHWC, clamped to [0, 1] as the node does */
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, N, OH, OW, OC);
    if (!img) {
        sd_tensor_unref(res);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory (upscaled image)");
    }
    const float *s = sd_tensor_f32(res);
    float *d = sd_tensor_f32(img);
    int64_t plane = OH * OW;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < OC; c++)
            for (int64_t i = 0; i < plane; i++) {
                float v = s[(n * OC + c) * plane + i];
                d[(n * plane + i) * OC + c] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
    sd_tensor_unref(res);
    *out = img;
    return SD_OK;
}
