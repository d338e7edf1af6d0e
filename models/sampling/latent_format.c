/* latent_format.c - ComfyUI's SD15, SDXL, SD3 and Flux latent formats. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "models/sampling/latent_format.h"

#include <string.h>

/* comfy/latent_formats.py, rows: latent channels, columns: R, G, B. */
static const float sd1_factors[4][3] = {
    {0.3512f, 0.2297f, 0.3227f},
    {0.3250f, 0.4974f, 0.2350f},
    {-0.2829f, 0.1762f, 0.2721f},
    {-0.2120f, -0.2616f, -0.7177f},
};
static const float sdxl_factors[4][3] = {
    {0.3651f, 0.4232f, 0.4341f},
    {-0.2533f, -0.0042f, 0.1068f},
    {0.1076f, 0.1111f, -0.0362f},
    {-0.3165f, -0.2492f, -0.2188f},
};
static const float sdxl_bias[3] = {0.1084f, -0.0175f, -0.0011f};
static const float flux_factors[16][3] = {
    {-0.0346f, 0.0244f, 0.0681f},  {0.0034f, 0.0210f, 0.0687f},   {0.0275f, -0.0668f, -0.0433f},
    {-0.0174f, 0.0160f, 0.0617f},  {0.0859f, 0.0721f, 0.0329f},   {0.0004f, 0.0383f, 0.0115f},
    {0.0405f, 0.0861f, 0.0915f},   {-0.0236f, -0.0185f, -0.0259f}, {-0.0245f, 0.0250f, 0.1180f},
    {0.1008f, 0.0755f, -0.0421f},  {-0.0515f, 0.0201f, 0.0011f},  {0.0428f, -0.0012f, -0.0036f},
    {0.0817f, 0.0765f, 0.0749f},   {-0.1264f, -0.0522f, -0.1103f}, {-0.0280f, -0.0881f, -0.0499f},
    {-0.1262f, -0.0982f, -0.0778f},
};
static const float flux_bias[3] = {-0.0329f, -0.0718f, -0.0851f};
static const float sd3_factors[16][3] = {
    {-0.0922f, -0.0175f, 0.0749f}, {0.0311f, 0.0633f, 0.0954f},   {0.1994f, 0.0927f, 0.0458f},
    {0.0856f, 0.0339f, 0.0902f},   {0.0587f, 0.0272f, -0.0496f},  {-0.0006f, 0.1104f, 0.0309f},
    {0.0978f, 0.0306f, 0.0427f},   {-0.0042f, 0.1038f, 0.1358f},  {-0.0194f, 0.0020f, 0.0669f},
    {-0.0488f, 0.0130f, -0.0268f}, {0.0922f, 0.0988f, 0.0951f},   {-0.0278f, 0.0524f, -0.0542f},
    {0.0332f, 0.0456f, 0.0895f},   {-0.0069f, -0.0030f, -0.0810f}, {-0.0596f, -0.0465f, -0.0293f},
    {-0.1448f, -0.1463f, -0.1189f},
};
static const float sd3_bias[3] = {0.2394f, 0.2135f, 0.1925f};

const sd_latent_format sd_latent_sd1 = {"sd1", 4, 0.18215f, 0.0f, sd1_factors, NULL, "taesd_decoder"};
const sd_latent_format sd_latent_sdxl = {"sdxl", 4, 0.13025f, 0.0f, sdxl_factors, sdxl_bias,
                                         "taesdxl_decoder"};
const sd_latent_format sd_latent_flux = {"flux", 16, 0.3611f, 0.1159f, flux_factors, flux_bias,
                                         "taef1_decoder"};
const sd_latent_format sd_latent_sd3 = {"sd3", 16, 1.5305f, 0.0609f, sd3_factors, sd3_bias,
                                        "taesd3_decoder"};

const sd_latent_format *sd_latent_format_named(const char *name) {
    static const sd_latent_format *const all[] = {&sd_latent_sd1, &sd_latent_sdxl, &sd_latent_flux,
                                                  &sd_latent_sd3};
    for (size_t i = 0; name && i < sizeof all / sizeof *all; i++)
        if (strcmp(name, all[i]->name) == 0) return all[i];
    return NULL;
}

/* The base class multiplies only; the SD3/Flux classes subtract the shift
 * first (a separate float32 op, so a zero shift changes nothing). */
void sd_latent_process_in(const sd_latent_format *f, const float *z, float *out, size_t n) {
    const float s = f->scale, sh = f->shift;
    if (sh == 0.0f) {
        for (size_t i = 0; i < n; i++) out[i] = z[i] * s;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float v = z[i] - sh;
        out[i] = v * s;
    }
}

void sd_latent_process_out(const sd_latent_format *f, const float *x, float *out, size_t n) {
    const float s = f->scale, sh = f->shift;
    if (sh == 0.0f) {
        for (size_t i = 0; i < n; i++) out[i] = x[i] / s;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float v = x[i] / s;
        out[i] = v + sh;
    }
}

sd_tensor *sd_latent_preview_rgb(const sd_latent_format *f, const sd_tensor *latent) {
    if (!f || !latent || latent->dtype != SD_F32 || latent->ndim != 4 || latent->shape[0] < 1 ||
        latent->shape[1] != f->channels)
        return NULL;
    const int64_t h = latent->shape[2], w = latent->shape[3], plane = h * w;
    sd_tensor *img = sd_tensor_new4(SD_F32, 3, h, w, 3, 0);
    if (!img) return NULL;
    const float *x = latent->data; /* the first image of the batch */
    float *o = img->data;
    for (int64_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            float v = f->rgb_bias ? f->rgb_bias[c] : 0.0f;
            for (int k = 0; k < f->channels; k++) v += x[k * plane + i] * f->rgb_factors[k][c];
            o[i * 3 + c] = (v + 1.0f) * 0.5f;
        }
    return img;
}

int sd_latent_process_in_nonempty(const sd_latent_format *f, const float *z, float *out, size_t n) {
    int nonzero = 0;
    for (size_t i = 0; i < n && !nonzero; i++) nonzero = z[i] != 0.0f;
    if (nonzero) {
        sd_latent_process_in(f, z, out, n);
        return 1;
    }
    if (out != z) memmove(out, z, n * sizeof *out);
    return 0;
}
