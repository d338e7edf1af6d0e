/* checkpoint.c - single-file checkpoint detection, lazy part loading and
 * the model store. */
#include "models/checkpoint/checkpoint.h"

#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/torch_ckpt.h"
#include "models/checkpoint/fp8_scaled.h"
#include "models/checkpoint/gguf_model.h"
#include "models/checkpoint/model_paths.h"
#include "models/text/t5_tokenizer.h"
#include "models/text/tokenizer.h"

struct sd_checkpoint {
    int refcount;
    pthread_mutex_t mu;
    char *path;
    char *tokenizer_dir;
    char *comfyui_dir;
    int clip_l_heads, clip_g_heads, qwen3_4b_width;
    sd_dtype weight_dtype;
    sd_dequant_math dequant;
    sd_backend *be;
    sd_st_file *file; /* dropped once every present part is loaded */
    sd_ckpt_info info;
    sd_unet *unet;
    sd_flux *flux; /* the diffusion model of a FLUX file (unet stays NULL) */
    sd_zimage *zimage; /* ... of a ZIMAGE file */
    sd_sd3 *sd3;   /* the diffusion model of an SD3 file (unet stays NULL) */
    sd_text_encoder *te;
    sd_tokenizer *tok;
    sd_t5_tokenizer *t5tok;
    sd_qwen_tokenizer *qtok;
    sd_vae *vae;
    int holds[3];     /* per part (SD_CKPT_PART_* bit index): live handle holds */
    int free_unused;  /* free a part when its last hold goes */
};

void sd_checkpoint_opts_default(sd_checkpoint_opts *o) {
    memset(o, 0, sizeof *o);
    o->weight_dtype = SD_F32;
}

const char *sd_ckpt_family_name(sd_ckpt_family f) {
    switch (f) {
    case SD_CKPT_SD1: return "sd1";
    case SD_CKPT_SDXL: return "sdxl";
    case SD_CKPT_SD2: return "sd2";
    case SD_CKPT_FLUX: return "flux";
    case SD_CKPT_ZIMAGE: return "zimage";
    case SD_CKPT_SD3: return "sd3";
    default: return "none";
    }
}

/* ---- detection ------------------------------------------------------------------ */

static int has_prefix(const sd_st_file *f, const char *prefix) {
    size_t n = strlen(prefix), cnt = sd_st_count(f);
    /* entries are sorted by name: binary search for the first >= prefix */
    size_t lo = 0, hi = cnt;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(sd_st_at(f, mid)->name, prefix) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < cnt && strncmp(sd_st_at(f, lo)->name, prefix, n) == 0;
}

/* ComfyUI's supported_models.SD20.model_type: a 4-channel SD2 UNet is
 * V_PREDICTION (the 768-v models) when the population std (unbiased=False)
 * of output_blocks.11.1.transformer_blocks.0.norm1.bias exceeds 0.09, else
 * EPS (SD2-base). Inpainting (9-channel) SD2 models are always EPS. The
 * file stores no prediction type; this bias is what tells them apart. */
#define SD2_VPRED_KEY "output_blocks.11.1.transformer_blocks.0.norm1.bias"
#define SD2_VPRED_STD 0.09

static sd_status sd2_prediction(sd_st_file *f, const char *prefix, int in_channels,
                                sd_prediction *out, sd_error *err) {
    *out = SD_PRED_EPS;
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, SD2_VPRED_KEY);
    if (in_channels != 4 || !sd_st_find(f, key)) return SD_OK;
    sd_tensor *t = sd_st_tensor(f, key, err);
    sd_tensor *t32 = t ? sd_tensor_to_dtype(t, SD_F32) : NULL;
    sd_tensor_unref(t);
    if (!t32) {
        if (t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory reading '%s'", key);
        return err ? err->code : SD_ERR_FORMAT;
    }
    size_t n = (size_t)sd_tensor_numel(t32);
    const float *p = t32->data;
    double sum = 0.0, sq = 0.0;
    for (size_t i = 0; i < n; i++) sum += p[i];
    double mean = n ? sum / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) sq += ((double)p[i] - mean) * ((double)p[i] - mean);
    sd_tensor_unref(t32);
    if (n && sqrt(sq / (double)n) > SD2_VPRED_STD) *out = SD_PRED_V;
    return SD_OK;
}

/* SD2.1 unCLIP (supported_models.SD21UnclipL / SD21UnclipH): an SD2 UNet
 * with a label_emb, which the UNet's own detection files under the SDXL
 * layout. ComfyUI tells them apart by its configs' widths (context_dim
 * 1024 with adm_in_channels 1536 or 2048; SDXL's are 2048 / 2816, the
 * refiner's 1280 / 2560); a file also says it by its parts: SD2's OpenCLIP
 * text encoder (cond_stage_model.model.*) or the unCLIP vision tower
 * (embedder.model.visual.*), which no SDXL file has. */
static int is_unclip(sd_st_file *f, const sd_unet_config *u) {
    if (u->adm_in_channels <= 0 || u->adm_in_channels % 2) return 0;
    if (has_prefix(f, SD_CKPT_CLIP_VISION_PREFIX) || has_prefix(f, SD_TE_PREFIX_SD2)) return 1;
    return u->context_dim == 1024 && (u->adm_in_channels == 1536 || u->adm_in_channels == 2048);
}

/* read_tensors 0 (sd_checkpoint_probe): names and shapes only, so an SD2
 * file's prediction type is left at eps. */
static sd_status detect(sd_st_file *f, sd_ckpt_info *info, int read_tensors, sd_error *err) {
    const char *path = sd_st_path(f);
    memset(info, 0, sizeof *info);
    info->prediction = SD_PRED_EPS;
    info->latent_format = &sd_latent_sd1;
    const char *rw = sd_st_metadata(f, "sdflow_random_weights");
    info->random_weights = rw && strcmp(rw, "true") == 0;

    if (sd_st_find(f, "v_pred") || sd_st_find(f, "edm_vpred.sigma_max"))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: v-prediction checkpoint (key 'v_pred'/'edm_vpred'); only "
                            "eps-prediction models are supported",
                            path);

    /* ComfyUI's scaled-fp8 layers (fp8_scaled.h) are read with their
     * scales; a config naming a format sdflow does not read (nvfp4) is
     * refused here, before anything loads. */
    sd_status qrc = sd_fp8_scaled_check(f, err);
    if (qrc) return qrc;

    /* The diffusion model: Flux's DiT or an SD UNet, under the single-file
     * prefix or bare (a diffusion_models/ file) */
    const char *dp = NULL;
    int flux = 0, zimage = 0, sd3 = 0;
    if (sd_flux_present(f, SD_UNET_PREFIX)) dp = SD_UNET_PREFIX, flux = 1;
    else if (sd_zimage_present(f, SD_UNET_PREFIX)) dp = SD_UNET_PREFIX, zimage = 1;
    else if (sd_sd3_present(f, SD_UNET_PREFIX)) dp = SD_UNET_PREFIX, sd3 = 1;
    else if (has_prefix(f, SD_UNET_PREFIX)) dp = SD_UNET_PREFIX;
    else if (sd_flux_present(f, "")) dp = "", flux = 1;
    else if (sd_zimage_present(f, "")) dp = "", zimage = 1;
    else if (sd_sd3_present(f, "")) dp = "", sd3 = 1;
    else if (sd_st_find(f, "input_blocks.0.0.weight")) dp = "";
    if (dp && zimage) {
        sd_status rc = sd_zimage_detect(f, dp, &info->zimage, err);
        if (rc) return rc; /* the message names the file */
        info->has_unet = 1;
        info->dmodel_kind = SD_DMODEL_ZIMAGE;
        info->dmodel_prefix = dp;
        info->family = SD_CKPT_ZIMAGE;
        info->prediction = SD_PRED_CONST;
        info->latent_format = &sd_latent_flux; /* supported_models.Lumina2: latent_formats.Flux */
    } else if (dp && sd3) {
        sd_status rc = sd_sd3_detect(f, dp, &info->sd3, err);
        if (rc) return rc; /* the message names the file */
        info->has_unet = 1;
        info->dmodel_kind = SD_DMODEL_MMDIT;
        info->dmodel_prefix = dp;
        info->family = SD_CKPT_SD3;
        info->prediction = SD_PRED_CONST;
        info->latent_format = &sd_latent_sd3;
    } else if (dp && flux) {
        sd_status rc = sd_flux_detect(f, dp, &info->flux, err);
        if (rc) return rc; /* the message names the file */
        info->has_unet = 1;
        info->dmodel_kind = SD_DMODEL_FLUX;
        info->dmodel_prefix = dp;
        info->family = SD_CKPT_FLUX;
        info->prediction = SD_PRED_CONST;
        info->latent_format = &sd_latent_flux;
    } else if (dp) {
        sd_status rc = sd_unet_detect(f, dp, &info->unet, err);
        if (rc) {
            if (err && !strstr(err->msg, path)) sd_error_prefix(err, "%s", path);
            return rc;
        }
        info->has_unet = 1;
        info->dmodel_kind = SD_DMODEL_UNET;
        info->dmodel_prefix = dp;
        info->family = info->unet.kind == SD_UNET_SDXL  ? SD_CKPT_SDXL
                       : info->unet.kind == SD_UNET_SD2 ? SD_CKPT_SD2
                                                        : SD_CKPT_SD1;
        if (info->family == SD_CKPT_SDXL && is_unclip(f, &info->unet)) {
            info->family = SD_CKPT_SD2;
            info->unclip = 1;
        }
        if (info->family == SD_CKPT_SDXL) info->latent_format = &sd_latent_sdxl;
        if (info->family == SD_CKPT_SD2 && read_tensors) {
            sd_status prc = sd2_prediction(f, dp, info->unet.in_channels, &info->prediction, err);
            if (prc) return prc;
        }
        info->inpaint = info->unet.in_channels == 9;
        info->ip2p = info->unet.in_channels == 8;
        if (info->unet.in_channels != 4 && info->unet.in_channels != 9 && info->unet.in_channels != 8)
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: UNet with %d input channels (4 = regular, 9 = inpainting, "
                                "8 = InstructPix2Pix are supported)",
                                path, info->unet.in_channels);
    }
    if (sd_st_find(f, "first_stage_model.decoder.conv_in.weight")) {
        info->has_vae = 1;
        info->vae_prefix = "first_stage_model.";
    } else if (sd_st_find(f, "vae.decoder.conv_in.weight")) {
        /* the Comfy-Org single-file Flux checkpoints (supported_models
         * Flux.vae_key_prefix) */
        info->has_vae = 1;
        info->vae_prefix = "vae.";
    } else if (sd_st_find(f, "decoder.conv_in.weight")) {
        info->has_vae = 1;
        info->vae_prefix = "";
    } else if (has_prefix(f, "decoder.up_blocks.") || has_prefix(f, "first_stage_model.decoder.up_blocks.")) {
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: diffusers-layout VAE (decoder.up_blocks.*); convert it to the "
                            "single-file layout (decoder.up.N.block.M)",
                            path);
    }
    info->te_kind = sd_text_encoder_detect(f);
    info->has_text_encoder = info->te_kind != 0;
    info->has_clip_vision = has_prefix(f, SD_CKPT_CLIP_VISION_PREFIX);
    if (!info->has_unet && !info->has_vae && !info->has_text_encoder)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: no model part found (no keys under model.diffusion_model., "
                            "first_stage_model., cond_stage_model., conditioner. or "
                            "text_encoders., and not a bare UNet, Flux DiT, SD3 MMDiT, VAE, T5 or CLIP "
                            "file; %zu tensors, first '%s')",
                            path, sd_st_count(f),
                            sd_st_count(f) ? sd_st_at(f, 0)->name : "");
    return SD_OK;
}

/* ---- lifetime ---------------------------------------------------------------------- */

/* The file's tensors: a GGUF file with ComfyUI-GGUF's names (gguf_model.h),
 * anything else by its first bytes (sd_torch_open_any). */
/* A diffusers-layout UNet file (what a diffusers folder's unet/ holds):
 * *f becomes a view of its tensors under the bare ldm names (read from the
 * file when loaded), renamed by the one unet_to_diffusers table as
 * comfy.sd.load_diffusion_model does. The view owns the file. */
static sd_status diffusers_unet(sd_st_file **f, sd_error *err) {
    sd_unet_config c;
    sd_status rc = sd_unet_diffusers_layout(*f, "", &c, err);
    if (rc) return rc;
    sd_st_file *src = *f;
    *f = NULL;
    return sd_unet_diffusers_view(src, "", &c, f, err);
}

static sd_status open_weights(const char *path, sd_st_file **out, sd_error *err) {
    char arch[32];
    if (sd_gguf_is_gguf(path)) return sd_gguf_model_open(path, SD_GGUF_ANY, out, arch, sizeof arch, err);
    sd_status rc = sd_torch_open_any(path, out, err);
    if (!rc && sd_unet_is_diffusers(*out, "") && !sd_st_find(*out, "input_blocks.0.0.weight") &&
        (rc = diffusers_unet(out, err))) {
        sd_st_close(*out); /* NULL once the view took it */
        *out = NULL;
    }
    return rc;
}

sd_status sd_checkpoint_open(sd_backend *be, const char *path, const sd_checkpoint_opts *opts,
                             sd_checkpoint **out, sd_error *err) {
    *out = NULL;
    sd_checkpoint_opts dflt;
    if (!opts) {
        sd_checkpoint_opts_default(&dflt);
        opts = &dflt;
    }
    if (!be) return sd_error_set(err, SD_ERR_INVALID, "%s: no compute backend", path);
    /* .ckpt/.pt/.pth: the weights-only reader, chosen by content */
    sd_st_file *f = NULL;
    sd_status rc = open_weights(path, &f, err);
    if (rc) return rc;
    sd_checkpoint *c = calloc(1, sizeof *c);
    if (!c) {
        sd_st_close(f);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    c->refcount = 1;
    pthread_mutex_init(&c->mu, NULL);
    c->be = be;
    c->file = f;
    c->weight_dtype = opts->weight_dtype;
    c->dequant = opts->dequant;
    c->path = strdup(path);
    c->tokenizer_dir = opts->tokenizer_dir ? strdup(opts->tokenizer_dir) : NULL;
    c->comfyui_dir = opts->comfyui_dir ? strdup(opts->comfyui_dir) : NULL;
    c->clip_l_heads = opts->clip_l_heads;
    c->clip_g_heads = opts->clip_g_heads;
    c->qwen3_4b_width = opts->qwen3_4b_width;
    if (!c->path || (opts->tokenizer_dir && !c->tokenizer_dir) ||
        (opts->comfyui_dir && !c->comfyui_dir)) {
        sd_checkpoint_unref(c);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if ((rc = detect(f, &c->info, 1, err))) {
        sd_checkpoint_unref(c);
        return rc;
    }
    *out = c;
    return SD_OK;
}

sd_status sd_checkpoint_probe(const char *path, sd_ckpt_info *info, sd_error *err) {
    sd_st_file *f = NULL;
    sd_status rc = open_weights(path, &f, err);
    if (rc) return rc;
    rc = detect(f, info, 0, err);
    sd_st_close(f);
    return rc;
}

sd_checkpoint *sd_checkpoint_ref(sd_checkpoint *c) {
    if (c) __atomic_add_fetch(&c->refcount, 1, __ATOMIC_SEQ_CST);
    return c;
}

void sd_checkpoint_unref(sd_checkpoint *c) {
    if (!c || __atomic_sub_fetch(&c->refcount, 1, __ATOMIC_SEQ_CST) > 0) return;
    sd_unet_free(c->unet);
    sd_flux_free(c->flux);
    sd_zimage_free(c->zimage);
    sd_sd3_free(c->sd3);
    sd_text_encoder_free(c->te);
    sd_tokenizer_free(c->tok);
    sd_t5_tokenizer_free(c->t5tok);
    sd_qwen_tokenizer_free(c->qtok);
    sd_vae_free(c->vae);
    sd_st_close(c->file);
    pthread_mutex_destroy(&c->mu);
    free(c->path);
    free(c->tokenizer_dir);
    free(c->comfyui_dir);
    free(c);
}

const sd_ckpt_info *sd_checkpoint_info(const sd_checkpoint *c) { return &c->info; }
const char *sd_checkpoint_path(const sd_checkpoint *c) { return c->path; }
sd_backend *sd_checkpoint_backend(const sd_checkpoint *c) { return c->be; }

/* Drop the mapping once nothing is left to load from it (called locked). */
static void maybe_close_file(sd_checkpoint *c) {
    if (!c->file) return;
    if (c->info.has_unet && !c->unet && !c->flux && !c->zimage && !c->sd3) return;
    if (c->info.has_text_encoder && !c->te) return;
    if (c->info.has_vae && !c->vae) return;
    sd_st_close(c->file);
    c->file = NULL;
}

/* A part freed early (sd_checkpoint_release) may be asked for again after
 * the mapping was dropped: map the file again (called locked). */
static sd_status ensure_file(sd_checkpoint *c, sd_error *err) {
    if (c->file) return SD_OK;
    return open_weights(c->path, &c->file, err); /* the format is the file's, as at open */
}

/* Context for a load error; the path only when the message lacks it. */
static void prefix_part(const sd_checkpoint *c, sd_error *err, const char *what) {
    if (!err) return;
    if (strstr(err->msg, c->path)) sd_error_prefix(err, "loading the %s", what);
    else sd_error_prefix(err, "loading the %s of %s", what, c->path);
}

/* ---- non-finite weights ---------------------------------------------------------- */

/* 1 when every stored value of the entry is finite (checked on the raw
 * bits, before any conversion); non-float dtypes count as finite. */
static int entry_finite(sd_st_file *f, const sd_st_entry *e) {
    if (!sd_dtype_is_float(e->dtype)) return 1;
    sd_error ignore;
    sd_tensor *t = sd_st_tensor(f, e->name, &ignore);
    if (!t) return 1; /* unreadable: the loader reports that itself */
    int ok = sd_dtype_all_finite(t->dtype, t->data, (size_t)sd_tensor_numel(t));
    sd_tensor_unref(t);
    return ok;
}

/* A part failed to load because of a NaN/Inf weight (models/checkpoint/weights.h stops
 * at the first one). Real corrupted checkpoints usually have several bad
 * layers, and the user needs all of them to judge the file, so scan every
 * tensor under the part's prefixes and name them all (the first
 * SHOW_NONFINITE, then a count). Called locked, with the file still open. */
#define SHOW_NONFINITE 8
static void name_nonfinite(sd_checkpoint *c, const char *const *prefixes, const char *what,
                           sd_error *err) {
    if (!err || !c->file || err->code != SD_ERR_FORMAT || !strstr(err->msg, "NaN or Inf")) return;
    char list[1400];
    size_t used = 0, nbad = 0;
    list[0] = '\0';
    for (size_t i = 0; i < sd_st_count(c->file); i++) {
        const sd_st_entry *e = sd_st_at(c->file, i);
        int under = 0;
        for (int k = 0; prefixes[k] && !under; k++)
            under = strncmp(e->name, prefixes[k], strlen(prefixes[k])) == 0;
        if (!under || entry_finite(c->file, e)) continue;
        if (nbad++ < SHOW_NONFINITE && used < sizeof list) {
            int w = snprintf(list + used, sizeof list - used, "%s'%s'", used ? ", " : "", e->name);
            if (w > 0) used += (size_t)w;
        }
    }
    if (nbad < 2) return; /* the message already names the only one */
    char first[SD_ERR_MSG_MAX];
    snprintf(first, sizeof first, "%s", err->msg);
    char more[64] = "";
    if (nbad > SHOW_NONFINITE)
        snprintf(more, sizeof more, " and %zu more", nbad - SHOW_NONFINITE);
    sd_error_set(err, SD_ERR_FORMAT, "%s; %zu tensors of the %s contain NaN or Inf: %s%s", first,
                 nbad, what, list, more);
}

static sd_status missing(const sd_checkpoint *c, const char *what, const char *where,
                         sd_error *err) {
    return sd_error_set(err, SD_ERR_NOT_FOUND, "%s has no %s (no keys under %s)", c->path, what,
                        where);
}

/* ComfyUI-GGUF's dequant_dtype on the Linear layers: each 2-D weight, and
 * the bias beside it. */
typedef struct dq_walk {
    sd_dequant_math math;
    void *model;
    sd_dmodel_kind kind;
} dq_walk;

static void set_dequant(void *ud, const char *key, sd_bt **slot) {
    dq_walk *w = ud;
    size_t n = strlen(key);
    sd_bt *weight = NULL;
    if (n > 7 && strcmp(key + n - 7, ".weight") == 0) {
        weight = *slot;
    } else if (n > 5 && strcmp(key + n - 5, ".bias") == 0 && n < 400) {
        char wk[410];
        snprintf(wk, sizeof wk, "%.*s.weight", (int)(n - 5), key);
        sd_bt **ws = w->kind == SD_DMODEL_FLUX     ? sd_flux_param(w->model, wk)
                     : w->kind == SD_DMODEL_ZIMAGE ? sd_zimage_param(w->model, wk)
                     : w->kind == SD_DMODEL_MMDIT  ? sd_sd3_param(w->model, wk)
                                                   : sd_unet_param(w->model, wk);
        weight = ws ? *ws : NULL;
    }
    if (weight && weight->ndim == 2 && *slot) (*slot)->dequant = w->math;
}

/* Loads the diffusion model part (called locked). */
static sd_status load_dmodel(sd_checkpoint *c, sd_error *err) {
    if (c->unet || c->flux || c->zimage || c->sd3) return SD_OK;
    sd_status rc = ensure_file(c, err);
    if (rc) return rc;
    const char *dp = c->info.dmodel_prefix ? c->info.dmodel_prefix : SD_UNET_PREFIX;
    sd_dmodel_kind kind = c->info.dmodel_kind;
    int flux = kind == SD_DMODEL_FLUX, zimage = kind == SD_DMODEL_ZIMAGE, sd3 = kind == SD_DMODEL_MMDIT;
    if (flux) rc = sd_flux_load(c->be, c->file, dp, c->weight_dtype, &c->flux, err);
    else if (zimage) rc = sd_zimage_load(c->be, c->file, dp, c->weight_dtype, &c->zimage, err);
    else if (sd3) rc = sd_sd3_load(c->be, c->file, dp, c->weight_dtype, &c->sd3, err);
    else rc = sd_unet_load(c->be, c->file, dp, c->weight_dtype, &c->unet, err);
    if (rc) {
        const char *const pre[] = {dp, NULL};
        name_nonfinite(c, pre, flux || zimage || sd3 ? "diffusion model" : "UNet", err);
        prefix_part(c, err, flux ? "Flux diffusion model" : zimage ? "Z-Image diffusion model"
                            : sd3 ? "SD3 diffusion model" : "UNet");
    } else {
        if (c->dequant != SD_DQ_F16) {
            void *model = flux ? (void *)c->flux : zimage ? (void *)c->zimage : sd3 ? (void *)c->sd3 : (void *)c->unet;
            dq_walk w = {c->dequant, model, kind};
            if (flux) sd_flux_param_each(c->flux, set_dequant, &w);
            else if (zimage) sd_zimage_param_each(c->zimage, set_dequant, &w);
            else if (sd3) sd_sd3_param_each(c->sd3, set_dequant, &w);
            else sd_unet_param_each(c->unet, set_dequant, &w);
        }
        maybe_close_file(c);
    }
    return rc;
}

sd_status sd_checkpoint_unet(sd_checkpoint *c, sd_unet **out, sd_error *err) {
    *out = NULL;
    if (!c->info.has_unet) return missing(c, "diffusion model", SD_UNET_PREFIX, err);
    if (c->info.dmodel_kind != SD_DMODEL_UNET)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s is a %s model, not a Stable Diffusion UNet",
                            c->path, sd_ckpt_family_name(c->info.family));
    pthread_mutex_lock(&c->mu);
    sd_status rc = load_dmodel(c, err);
    *out = c->unet;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

sd_status sd_checkpoint_dmodel(sd_checkpoint *c, sd_dmodel *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    if (!c->info.has_unet) return missing(c, "diffusion model", SD_UNET_PREFIX, err);
    pthread_mutex_lock(&c->mu);
    sd_status rc = load_dmodel(c, err);
    if (!rc && c->flux) sd_flux_as_dmodel(c->flux, out);
    else if (!rc && c->zimage) sd_zimage_as_dmodel(c->zimage, out);
    else if (!rc && c->sd3) sd_sd3_as_dmodel(c->sd3, out);
    else if (!rc) sd_unet_as_dmodel(c->unet, out);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int sd_ckpt_info_latent_channels(const sd_ckpt_info *info) {
    if (!info->has_unet) return 0;
    if (info->dmodel_kind == SD_DMODEL_FLUX) return info->flux.out_channels;
    if (info->dmodel_kind == SD_DMODEL_ZIMAGE) return info->zimage.in_channels;
    if (info->dmodel_kind == SD_DMODEL_MMDIT) return info->sd3.out_channels;
    return info->unet.out_channels;
}

sd_status sd_checkpoint_text_encoder(sd_checkpoint *c, sd_text_encoder **out, sd_error *err) {
    *out = NULL;
    if (!c->info.has_text_encoder)
        return missing(c, "text encoder", "cond_stage_model., conditioner. or text_encoders.", err);
    pthread_mutex_lock(&c->mu);
    sd_status rc = SD_OK;
    if (!c->te) rc = ensure_file(c, err);
    unsigned vocabs = !rc && c->file ? sd_text_encoder_file_vocabs(c->file) : 0;
    int need_clip = !c->tok && (vocabs & SD_TE_VOCAB_CLIP), need_t5 = !c->t5tok && (vocabs & SD_TE_VOCAB_T5);
    int need_qwen = !c->qtok && (vocabs & SD_TE_VOCAB_QWEN);
    /* a tokenizer beside the model wins, as with ComfyUI's bundled one */
    char *tmp = NULL;
    if (!rc && (need_clip || need_t5 || need_qwen) && !(tmp = strdup(c->path)))
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const char *dir = tmp ? dirname(tmp) : NULL;
    if (!rc && need_clip) rc = sd_tokenizer_resolve(dir, c->tokenizer_dir, &c->tok, err);
    if (!rc && need_t5)
        rc = sd_t5_tokenizer_resolve(dir, c->tokenizer_dir, c->comfyui_dir, &c->t5tok, err);
    if (!rc && need_qwen)
        rc = sd_qwen_tokenizer_resolve(dir, c->tokenizer_dir, c->comfyui_dir, &c->qtok, err);
    free(tmp);
    if (!rc && !c->te) {
        sd_te_load_opts o = {.tok = c->tok, .t5tok = c->t5tok, .qtok = c->qtok,
                             .clip_l_heads = c->clip_l_heads, .clip_g_heads = c->clip_g_heads,
                             .qwen3_4b_width = c->qwen3_4b_width};
        rc = sd_text_encoder_load_ex(c->be, c->file, &o, &c->te, err);
        if (rc) {
            static const char *const pre[] = {"cond_stage_model.", "conditioner.", "text_encoders.",
                                              "text_model.", "encoder.", "shared.", "model.embed_tokens.",
                                              "model.layers.", "model.norm.", NULL};
            name_nonfinite(c, pre, "text encoder", err);
            prefix_part(c, err, "text encoder");
        }
        else maybe_close_file(c);
    }
    *out = rc ? NULL : c->te;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

sd_status sd_checkpoint_vae(sd_checkpoint *c, sd_vae **out, sd_error *err) {
    *out = NULL;
    if (!c->info.has_vae) return missing(c, "VAE", "first_stage_model.", err);
    pthread_mutex_lock(&c->mu);
    sd_status rc = SD_OK;
    if (!c->vae) rc = ensure_file(c, err);
    if (!rc && !c->vae) {
        rc = sd_vae_load(c->be, c->file, c->info.vae_prefix, &c->vae, err);
        if (rc) {
            const char *const pre[] = {c->info.vae_prefix ? c->info.vae_prefix : "", NULL};
            name_nonfinite(c, pre, "VAE", err);
            prefix_part(c, err, "VAE");
        }
        else maybe_close_file(c);
    }
    *out = c->vae;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void sd_checkpoint_loaded(sd_checkpoint *c, int *unet, int *text_encoder, int *vae) {
    pthread_mutex_lock(&c->mu);
    if (unet) *unet = c->unet != NULL || c->flux != NULL || c->zimage != NULL || c->sd3 != NULL;
    if (text_encoder) *text_encoder = c->te != NULL;
    if (vae) *vae = c->vae != NULL;
    pthread_mutex_unlock(&c->mu);
}

static int part_index(unsigned bit) {
    return bit == SD_CKPT_PART_UNET ? 0 : bit == SD_CKPT_PART_TEXT ? 1 : 2;
}

void sd_checkpoint_hold(sd_checkpoint *c, unsigned parts) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    for (unsigned bit = 1; bit <= SD_CKPT_PART_VAE; bit <<= 1)
        if (parts & bit) c->holds[part_index(bit)]++;
    pthread_mutex_unlock(&c->mu);
}

void sd_checkpoint_release(sd_checkpoint *c, unsigned parts) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    for (unsigned bit = 1; bit <= SD_CKPT_PART_VAE; bit <<= 1) {
        if (!(parts & bit)) continue;
        int *h = &c->holds[part_index(bit)];
        if (*h == 0) continue; /* an unbalanced release frees nothing */
        if (--*h > 0 || !c->free_unused) continue;
        /* F16 weights are views of the mapping: freeing them also hands
         * their pages back (formats/safetensors.c), although the mapping stays
         * for the parts still in use. */
        if (bit == SD_CKPT_PART_UNET) {
            sd_unet_free(c->unet), c->unet = NULL;
            sd_flux_free(c->flux), c->flux = NULL;
            sd_zimage_free(c->zimage), c->zimage = NULL;
            sd_sd3_free(c->sd3), c->sd3 = NULL;
        }
        if (bit == SD_CKPT_PART_TEXT) sd_text_encoder_free(c->te), c->te = NULL;
        if (bit == SD_CKPT_PART_VAE) sd_vae_free(c->vae), c->vae = NULL;
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---- the store ---------------------------------------------------------------------- */

typedef struct store_entry {
    char *path;
    char *tokenizer_dir;
    char *comfyui_dir;
    int clip_l_heads, clip_g_heads, qwen3_4b_width;
    sd_backend *be;
    sd_dtype weight_dtype;
    sd_dequant_math dequant;
    long long size, mtime_ns;
    sd_checkpoint *ckpt;
} store_entry;

struct sd_model_store {
    pthread_mutex_t mu;
    store_entry *v;
    size_t n, cap;
    int free_unused; /* sd_model_store_free_unused */
    sd_checkpoint_opts dflt; /* sd_model_store_set_defaults (directories unused) */
};

sd_model_store *sd_model_store_new(void) {
    sd_model_store *s = calloc(1, sizeof *s);
    if (s) pthread_mutex_init(&s->mu, NULL);
    return s;
}

static void entry_clear(store_entry *e) {
    sd_checkpoint_unref(e->ckpt);
    free(e->path);
    free(e->tokenizer_dir);
    free(e->comfyui_dir);
    memset(e, 0, sizeof *e);
}

void sd_model_store_free(sd_model_store *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) entry_clear(&s->v[i]);
    free(s->v);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

size_t sd_model_store_count(const sd_model_store *s) { return s ? s->n : 0; }

void sd_model_store_set_defaults(sd_model_store *s, const sd_checkpoint_opts *o) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (o) s->dflt = *o;
    else memset(&s->dflt, 0, sizeof s->dflt);
    s->dflt.tokenizer_dir = s->dflt.comfyui_dir = NULL;
    pthread_mutex_unlock(&s->mu);
}

void sd_model_store_free_unused(sd_model_store *s, int on) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->free_unused = on != 0;
    pthread_mutex_unlock(&s->mu);
}

static void set_free_unused(sd_checkpoint *c, int on) {
    pthread_mutex_lock(&c->mu);
    c->free_unused = on;
    pthread_mutex_unlock(&c->mu);
}

static int str_eq(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

sd_status sd_model_store_open(sd_model_store *s, sd_backend *be, const char *path,
                              const sd_checkpoint_opts *opts, sd_checkpoint **out,
                              sd_error *err) {
    *out = NULL;
    sd_checkpoint_opts dflt;
    if (!opts) {
        sd_checkpoint_opts_default(&dflt);
        opts = &dflt;
    }
    if (!s) return sd_checkpoint_open(be, path, opts, out, err);
    /* the store's model options fill what the caller leaves unset */
    sd_checkpoint_opts merged = *opts;
    pthread_mutex_lock(&s->mu);
    if (!merged.clip_l_heads) merged.clip_l_heads = s->dflt.clip_l_heads;
    if (!merged.clip_g_heads) merged.clip_g_heads = s->dflt.clip_g_heads;
    if (!merged.qwen3_4b_width) merged.qwen3_4b_width = s->dflt.qwen3_4b_width;
    pthread_mutex_unlock(&s->mu);
    opts = &merged;
    struct stat st;
    if (stat(path, &st) != 0)
        return sd_error_set(err, SD_ERR_NOT_FOUND, "model file '%s' not found", path);
    long long size = (long long)st.st_size;
    long long mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    pthread_mutex_lock(&s->mu);
    store_entry *slot = NULL;
    for (size_t i = 0; i < s->n; i++) {
        store_entry *e = &s->v[i];
        if (e->path && e->be == be && e->weight_dtype == opts->weight_dtype && e->dequant == opts->dequant &&
            strcmp(e->path, path) == 0 &&
            str_eq(e->tokenizer_dir, opts->tokenizer_dir) &&
            str_eq(e->comfyui_dir, opts->comfyui_dir) && e->clip_l_heads == opts->clip_l_heads &&
            e->clip_g_heads == opts->clip_g_heads && e->qwen3_4b_width == opts->qwen3_4b_width) {
            if (e->size == size && e->mtime_ns == mtime) {
                set_free_unused(e->ckpt, s->free_unused);
                *out = sd_checkpoint_ref(e->ckpt);
                pthread_mutex_unlock(&s->mu);
                return SD_OK;
            }
            slot = e; /* the file changed on disk: reopen into this entry */
            break;
        }
    }
    sd_checkpoint *c = NULL;
    sd_status rc = sd_checkpoint_open(be, path, opts, &c, err);
    if (rc) {
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    set_free_unused(c, s->free_unused);
    if (!slot) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 4;
            store_entry *v = realloc(s->v, cap * sizeof *v);
            if (!v) {
                pthread_mutex_unlock(&s->mu);
                *out = c; /* still usable, just not remembered */
                return SD_OK;
            }
            s->v = v;
            s->cap = cap;
        }
        slot = &s->v[s->n++];
        memset(slot, 0, sizeof *slot);
    } else {
        entry_clear(slot);
    }
    slot->path = strdup(path);
    slot->tokenizer_dir = opts->tokenizer_dir ? strdup(opts->tokenizer_dir) : NULL;
    slot->comfyui_dir = opts->comfyui_dir ? strdup(opts->comfyui_dir) : NULL;
    slot->clip_l_heads = opts->clip_l_heads;
    slot->clip_g_heads = opts->clip_g_heads;
    slot->qwen3_4b_width = opts->qwen3_4b_width;
    slot->be = be;
    slot->weight_dtype = opts->weight_dtype;
    slot->dequant = opts->dequant;
    slot->size = size;
    slot->mtime_ns = mtime;
    slot->ckpt = sd_checkpoint_ref(c);
    pthread_mutex_unlock(&s->mu);
    *out = c;
    return SD_OK;
}
