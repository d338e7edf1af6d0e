/* unet_embed.c - sinusoidal embeddings of scalars (timesteps, SDXL sizes),
 * computed on the host in float32 in PyTorch's operation order. */
#include "models/unet/unet.h"

#include <math.h>
#include <string.h>

void sd_unet_timestep_embedding(const float *t, int n, int dim, float *out) {
    int half = dim / 2;
    /* freqs = exp(-ln(10000) * arange(half) / half), each op rounded to f32 */
    const float neg_log_period = (float)-log(10000.0);
    for (int i = 0; i < n; i++) {
        float *row = out + (size_t)i * (size_t)dim;
        for (int j = 0; j < half; j++) {
            float f = expf((neg_log_period * (float)j) / (float)half);
            float arg = t[i] * f;
            row[j] = cosf(arg);
            row[half + j] = sinf(arg);
        }
        if (dim % 2) row[dim - 1] = 0.0f; /* odd dim: zero pad, as ComfyUI */
    }
}

sd_status sd_unet_sdxl_adm(const sd_tensor *pooled, const sd_sdxl_size *size, sd_tensor **out,
                           sd_error *err) {
    *out = NULL;
    if (!pooled || pooled->dtype != SD_F32 || pooled->ndim != 2)
        return sd_error_set(err, SD_ERR_INVALID, "SDXL adm: pooled output must be an F32 [N, P] tensor");
    int64_t n = pooled->shape[0], p = pooled->shape[1], width = p + 6 * 256;
    sd_tensor *y = sd_tensor_new4(SD_F32, 2, n, width, 0, 0);
    if (!y) return sd_error_set(err, SD_ERR_NOMEM, "SDXL adm: out of memory");
    /* Order as comfy.model_base.SDXL.encode_adm: height before width. */
    const float vals[6] = {size->height, size->width, size->crop_h, size->crop_w,
                           size->target_height, size->target_width};
    float emb[6 * 256];
    sd_unet_timestep_embedding(vals, 6, 256, emb);
    const float *src = sd_tensor_f32(pooled);
    float *dst = sd_tensor_f32(y);
    for (int64_t i = 0; i < n; i++) {
        memcpy(dst + i * width, src + i * p, (size_t)p * sizeof(float));
        memcpy(dst + i * width + p, emb, sizeof emb);
    }
    *out = y;
    return SD_OK;
}
