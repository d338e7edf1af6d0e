/* preview.c - `--preview PATH.png`: a sampler's current denoised latent as a
 * small picture, rewritten atomically (sd_png_write renames a finished
 * temporary file over PATH), the way ComfyUI previews (comfy/latent_preview.py),
 * for every latent format of models/sampling/latent_format.h (sd1, sdxl,
 * flux):
 *
 *   taesd       when models/vae_approx/ holds the format's tiny decoder
 *               (ComfyUI's rule: the first file of the folder's model list
 *               whose name starts with taesd_decoder / taesdxl_decoder /
 *               taef1_decoder; .safetensors or a torch .pth): the decoder on
 *               the latent as the sampler holds it, clamped to [0, 1]; full
 *               resolution (8x the latent).
 *   latent2rgb  otherwise: rgb = latent . F + b, then (rgb + 1) / 2 clamped,
 *               at the latent's resolution (1/8 of the picture), with
 *               ComfyUI's latent_rgb_factors and bias.
 *
 * Only the first image of a batch is shown. */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "core/env.h"
#include "formats/png.h"
#include "formats/torch_ckpt.h"
#include "models/checkpoint/model_paths.h"
#include "models/sampling/latent_format.h"
#include "models/vae/taesd.h"

#define N_FORMATS 4 /* sd1, sdxl, flux, sd3 */

static const sd_latent_format *const formats[N_FORMATS] = {&sd_latent_sd1, &sd_latent_sdxl,
                                                           &sd_latent_flux, &sd_latent_sd3};

struct sd_cli_preview {
    char *path;
    const sd_env *env;
    sd_taesd *taesd[N_FORMATS]; /* per format (loaded on first use) */
    int tried[N_FORMATS];       /* the decoder file was looked for */
    const char *method;         /* of the last picture written */
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
    for (int k = 0; k < N_FORMATS; k++) sd_taesd_free(pv->taesd[k]);
    free(pv->path);
    free(pv);
}

const char *sd_cli_preview_method(const sd_cli_preview *pv) { return pv->method; }

/* The vae_approx/ file ComfyUI would pick for `stem` (malloc'd path), or
 * NULL when there is none. */
static char *decoder_file(const sd_env *env, const char *stem) {
    sd_value *list = NULL;
    sd_error err;
    if (sd_model_paths_list(env, "vae_approx", &list, &err) != SD_OK) return NULL;
    char *file = NULL;
    size_t n = strlen(stem);
    for (size_t i = 0; !file && i < sd_value_list_len(list); i++) {
        const char *name = sd_value_as_string(sd_value_list_get(list, i));
        if (name && strncmp(name, stem, n) == 0 && sd_env_resolve(env, "vae_approx", name, &file, NULL) != SD_OK)
            file = NULL;
    }
    sd_value_unref(list);
    return file;
}

/* The TAESD decoder for format slot k, or NULL when its file is not in
 * vae_approx/ (then latent2rgb is used; a file that is there but does not
 * load is an error, not a silent fallback). */
static sd_status taesd_for(sd_cli_preview *pv, int k, sd_taesd **out, sd_error *err) {
    *out = pv->taesd[k];
    if (pv->tried[k]) return SD_OK;
    pv->tried[k] = 1;
    char *file = decoder_file(pv->env, formats[k]->taesd_decoder);
    if (!file) return SD_OK;
    if (!pv->env->backend) {
        free(file);
        return sd_error_set(err, SD_ERR_INTERNAL, "no backend to run the TAESD preview decoder on");
    }
    sd_st_file *st = NULL;
    sd_status rc = sd_torch_open_any(file, &st, err);
    if (!rc) rc = sd_taesd_load(pv->env->backend, NULL, "", st, "", &pv->taesd[k], err);
    if (!rc && sd_taesd_latent_channels(pv->taesd[k]) != formats[k]->channels)
        rc = sd_error_set(err, SD_ERR_FORMAT, "%s: a %d-channel decoder, %s previews need %d latent channels",
                          file, sd_taesd_latent_channels(pv->taesd[k]), formats[k]->name, formats[k]->channels);
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

static void borrowed_keep(void *owner) { (void)owner; } /* the sampler owns the bytes */

/* The picture of the first image of `latent`, new reference in *out. */
static sd_status preview_image(sd_cli_preview *pv, const sd_tensor *latent, const char *format, sd_tensor **out,
                               sd_error *err) {
    int k = 0;
    while (k < N_FORMATS && !(format && strcmp(format, formats[k]->name) == 0)) k++;
    if (k == N_FORMATS)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "no preview for latents of format '%s' (sd1, sdxl and flux have one)",
                            format ? format : "unknown");
    const sd_latent_format *lf = formats[k];
    if (!latent || latent->dtype != SD_F32 || latent->ndim != 4 || latent->shape[1] != lf->channels ||
        latent->shape[0] < 1)
        return sd_error_set(err, SD_ERR_INVALID, "preview: expected an F32 %s latent [N, %d, h, w]", lf->name,
                            lf->channels);
    sd_taesd *taesd = NULL;
    sd_status rc = taesd_for(pv, k, &taesd, err);
    if (rc) return rc;
    sd_tensor *img = NULL;
    if (taesd) {
        /* one image: a view of the batch's first item */
        int64_t shape[4] = {1, lf->channels, latent->shape[2], latent->shape[3]};
        sd_tensor *first = sd_tensor_new_borrowed(SD_F32, 4, shape, latent->data, borrowed_keep, NULL);
        if (!first) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        rc = sd_taesd_decode_image(taesd, first, 1.0f, 0.0f, &img, err);
        sd_tensor_unref(first);
        if (rc) return rc;
        pv->method = "taesd";
    } else {
        /* sd_png_write clamps to [0, 1] and truncates to 8 bits, as ComfyUI */
        if (!(img = sd_latent_preview_rgb(lf, latent))) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
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
