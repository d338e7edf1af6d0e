/* preview.c - `--preview PATH.png`: a sampler's current denoised latent as a
 * small picture, rewritten atomically (sd_png_write renames a finished
 * temporary file over PATH), the way ComfyUI previews (comfy/latent_preview.py):
 *
 *   taesd       when models/vae_approx/taesd_decoder.safetensors (SD1) or
 *               taesdxl_decoder.safetensors (SDXL) exists: the tiny decoder
 *               on the latent as the sampler holds it, clamped to [0, 1];
 *               full resolution (8x the latent).
 *   latent2rgb  otherwise: rgb = latent . F + b, then (rgb + 1) / 2 clamped,
 *               at the latent's resolution (1/8 of the picture), with
 *               ComfyUI's factors (comfy/latent_formats.py, SD15 and SDXL).
 *
 * Only the first image of a batch is shown. */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "core/env.h"
#include "formats/png.h"
#include "formats/safetensors.h"
#include "models/vae/taesd.h"

/* comfy/latent_formats.py: latent_rgb_factors (rows: latent channels,
 * columns: R, G, B) and latent_rgb_factors_bias. */
static const float sd1_factors[4][3] = {
    {0.3512f, 0.2297f, 0.3227f},
    {0.3250f, 0.4974f, 0.2350f},
    {-0.2829f, 0.1762f, 0.2721f},
    {-0.2120f, -0.2616f, -0.7177f},
};
static const float sd1_bias[3] = {0, 0, 0};
static const float sdxl_factors[4][3] = {
    {0.3651f, 0.4232f, 0.4341f},
    {-0.2533f, -0.0042f, 0.1068f},
    {0.1076f, 0.1111f, -0.0362f},
    {-0.3165f, -0.2492f, -0.2188f},
};
static const float sdxl_bias[3] = {0.1084f, -0.0175f, -0.0011f};

struct sd_cli_preview {
    char *path;
    const sd_env *env;
    sd_taesd *taesd[2];  /* per format: sd1, sdxl (loaded on first use) */
    int tried[2];        /* the decoder file was looked for */
    const char *method;  /* of the last picture written */
};

sd_cli_preview *sd_cli_preview_new(const char *path, const sd_env *env) {
    sd_cli_preview *pv = calloc(1, sizeof *pv);
    if (!pv || !(pv->path = strdup(path))) {
        free(pv);
        return NULL;
    }
    pv->env = env;
    return pv;
}

void sd_cli_preview_free(sd_cli_preview *pv) {
    if (!pv) return;
    sd_taesd_free(pv->taesd[0]);
    sd_taesd_free(pv->taesd[1]);
    free(pv->path);
    free(pv);
}

const char *sd_cli_preview_method(const sd_cli_preview *pv) { return pv->method; }

/* The TAESD decoder for format slot k, or NULL when its file is not in
 * vae_approx/ (then latent2rgb is used; a file that is there but does not
 * load is an error, not a silent fallback). */
static sd_status taesd_for(sd_cli_preview *pv, int k, sd_taesd **out, sd_error *err) {
    *out = pv->taesd[k];
    if (pv->tried[k]) return SD_OK;
    pv->tried[k] = 1;
    static const char *const names[2] = {"taesd_decoder.safetensors", "taesdxl_decoder.safetensors"};
    char *file = NULL;
    if (sd_env_resolve(pv->env, "vae_approx", names[k], &file, NULL) != SD_OK) return SD_OK;
    if (!pv->env->backend) {
        free(file);
        return sd_error_set(err, SD_ERR_INTERNAL, "no backend to run the TAESD preview decoder on");
    }
    sd_st_file *st = NULL;
    sd_status rc = sd_st_open(file, &st, err);
    if (!rc) rc = sd_taesd_load(pv->env->backend, NULL, "", st, "", &pv->taesd[k], err);
    if (!rc && sd_taesd_latent_channels(pv->taesd[k]) != 4)
        rc = sd_error_set(err, SD_ERR_FORMAT, "%s: a %d-channel decoder, previews need 4 latent channels", file,
                          sd_taesd_latent_channels(pv->taesd[k]));
    if (rc) {
        sd_error_prefix(err, "preview decoder %s", file);
        sd_taesd_free(pv->taesd[k]);
        pv->taesd[k] = NULL;
    }
    sd_st_close(st);
    free(file);
    *out = pv->taesd[k];
    return rc;
}

static sd_tensor *latent2rgb(const sd_tensor *latent, int xl) {
    const int64_t h = latent->shape[2], w = latent->shape[3], plane = h * w;
    const float (*f)[3] = xl ? sdxl_factors : sd1_factors;
    const float *b = xl ? sdxl_bias : sd1_bias;
    sd_tensor *img = sd_tensor_new4(SD_F32, 3, h, w, 3, 0);
    if (!img) return NULL;
    const float *x = latent->data; /* first image of the batch */
    float *o = img->data;
    for (int64_t i = 0; i < plane; i++) {
        for (int c = 0; c < 3; c++) {
            float v = b[c];
            for (int k = 0; k < 4; k++) v += x[k * plane + i] * f[k][c];
            o[i * 3 + c] = (v + 1.0f) * 0.5f; /* sd_png_write clamps to [0, 1] */
        }
    }
    return img;
}

static void borrowed_keep(void *owner) { (void)owner; } /* the sampler owns the bytes */

/* The picture of the first image of `latent`, new reference in *out. */
static sd_status preview_image(sd_cli_preview *pv, const sd_tensor *latent, const char *format, sd_tensor **out,
                               sd_error *err) {
    if (!format || (strcmp(format, "sd1") && strcmp(format, "sdxl")))
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "no preview for latents of format '%s' (sd1 and sdxl have one)",
                            format ? format : "unknown");
    if (!latent || latent->dtype != SD_F32 || latent->ndim != 4 || latent->shape[1] != 4 || latent->shape[0] < 1)
        return sd_error_set(err, SD_ERR_INVALID, "preview: expected an F32 latent [N, 4, h, w]");
    int xl = strcmp(format, "sdxl") == 0;
    sd_taesd *taesd = NULL;
    sd_status rc = taesd_for(pv, xl, &taesd, err);
    if (rc) return rc;
    sd_tensor *img = NULL;
    if (taesd) {
        /* one image: a view of the batch's first item */
        int64_t shape[4] = {1, 4, latent->shape[2], latent->shape[3]};
        sd_tensor *first = sd_tensor_new_borrowed(SD_F32, 4, shape, latent->data, borrowed_keep, NULL);
        if (!first) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        rc = sd_taesd_decode_image(taesd, first, 1.0f, 0.0f, &img, err);
        sd_tensor_unref(first);
        if (rc) return rc;
        pv->method = "taesd";
    } else {
        if (!(img = latent2rgb(latent, xl))) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        pv->method = "latent2rgb";
    }
    *out = img;
    return SD_OK;
}

sd_status sd_cli_preview_write(sd_cli_preview *pv, const sd_tensor *latent, const char *format, sd_error *err) {
    sd_tensor *img = NULL;
    sd_status rc = preview_image(pv, latent, format, &img, err);
    if (rc) return rc;
    rc = sd_png_write(pv->path, img, NULL, 0, 1, err);
    sd_tensor_unref(img);
    return rc;
}

sd_status sd_cli_preview_encode(sd_cli_preview *pv, const sd_tensor *latent, const char *format, FILE *f,
                                sd_error *err) {
    sd_tensor *img = NULL;
    sd_status rc = preview_image(pv, latent, format, &img, err);
    if (rc) return rc;
    rc = sd_png_write_stream(f, "preview", img, NULL, 0, 1, err);
    sd_tensor_unref(img);
    return rc;
}
