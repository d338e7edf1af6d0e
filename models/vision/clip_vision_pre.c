/* clip_vision_pre.c - ComfyUI's clip_preprocess (comfy/clip_model.py). */
#include "models/vision/clip_vision.h"

#include <math.h>
#include <stdlib.h>

#include "models/image/imageops.h"

const float sd_clip_vision_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
const float sd_clip_vision_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};

sd_status sd_clip_vision_preprocess(const sd_tensor *image, int size, int crop,
                                    const float mean[3], const float std[3], sd_tensor **out,
                                    sd_error *err) {
    *out = NULL;
    if (!image || image->dtype != SD_F32 || image->ndim != 4 || image->shape[0] < 1 ||
        image->shape[1] < 1 || image->shape[2] < 1 || image->shape[3] < 3 || size < 1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "CLIP vision: the image must be an IMAGE [B, H, W, C] with at least 3 "
                            "channels");
    int64_t N = image->shape[0], H = image->shape[1], W = image->shape[2], C = image->shape[3];
    /* image[..., :3].movedim(-1, 1) */
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, N, 3, H, W);
    if (!x) return sd_error_set(err, SD_ERR_NOMEM, "out of memory preprocessing an image");
    const float *s = image->data;
    float *d = x->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t p = 0; p < H * W; p++) d[((n * 3 + c) * H * W) + p] = s[(n * H * W + p) * C + c];
    if (!(H == size && W == size)) {
        int64_t sh = size, sw = size;
        if (crop) {
            double scale = (double)size / (double)(H < W ? H : W);
            sh = (int64_t)nearbyint(scale * (double)H); /* Python round: half to even */
            sw = (int64_t)nearbyint(scale * (double)W);
        }
        sd_tensor *r = NULL;
        sd_status rc = sd_imageops_bicubic_aa(x, sw, sh, &r, err);
        sd_tensor_unref(x);
        if (rc) return rc;
        x = r;
        H = sh;
        W = sw;
    }
    int64_t h0 = (H - size) / 2, w0 = (W - size) / 2; /* both >= 0 here */
    sd_tensor *y = sd_tensor_new4(SD_F32, 4, N, 3, size, size);
    if (!y) {
        sd_tensor_unref(x);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory preprocessing an image");
    }
    const float *xs = x->data;
    float *yd = y->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t i = 0; i < size; i++)
                for (int64_t j = 0; j < size; j++) {
                    float v = 255.0f * xs[((n * 3 + c) * H + h0 + i) * W + w0 + j];
                    v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v; /* torch.clip (NaN stays) */
                    v = nearbyintf(v) / 255.0f;                    /* torch.round: half to even */
                    yd[((n * 3 + c) * size + i) * size + j] = (v - mean[c]) / std[c];
                }
    sd_tensor_unref(x);
    *out = y;
    return SD_OK;
}
