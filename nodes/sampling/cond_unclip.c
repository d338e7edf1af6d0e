/* cond_unclip.c - what a conditioning entry's "unclip_conditioning" becomes
 * at sampling: SD2.1 unCLIP's ADM vector (comfy.model_base.SD21UNCLIP
 * .encode_adm) or SDXL's pooled output ("revision", model_base.sdxl_pooled),
 * made once per sampling run as process_conds makes its model_conds. */
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "models/unet/unet.h"

/* ComfyUI's SD21UNCLIP.encode_adm: kwargs.get("unclip_noise_augment_merge", 0.05) */
#define UNCLIP_MERGE_AUGMENTATION 0.05
/* sdxl_pooled: unclip_adm's default noise_augment_merge and the SDXL
 * augmentor's timestep_dim (CLIP-G's pooled width) */
#define SDXL_MERGE_AUGMENTATION 0.0
#define SDXL_POOLED 1280

static sd_status bad(sd_error *err, size_t i, const char *what) {
    return sd_error_set(err, SD_ERR_INVALID, "unclip_conditioning item %zu: %s", i, what);
}

/* 1 when the entry carries an unclip_conditioning */
static int has_unclip(const sd_value *entry) {
    const sd_value *list = sd_value_dict_get(entry, "unclip_conditioning");
    return list && sd_value_kind_of(list) != SD_VAL_NONE;
}

/* unclip_adm of the entry's list with embeddings of width dim: *y [1, 2 dim] */
static sd_status entry_unclip(const sd_value *entry, int dim, double merge, uint64_t seed, struct sd_rng *rng,
                              sd_tensor **y, sd_error *err) {
    *y = NULL;
    sd_tensor *out = sd_tensor_new4(SD_F32, 2, 1, 2 * (int64_t)dim, 0, 0);
    if (!out) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const sd_value *list = sd_value_dict_get(entry, "unclip_conditioning");
    sd_status rc = SD_OK;
    sd_unclip_item *items = NULL;
    size_t n = 0, cap = 0;
    if (sd_value_kind_of(list) != SD_VAL_LIST) {
        rc = sd_error_set(err, SD_ERR_INVALID, "conditioning 'unclip_conditioning' must be a list");
        goto done;
    }
    /* every image of every item, in order (unclip_adm's two loops) */
    for (size_t i = 0; i < sd_value_list_len(list); i++) {
        const sd_value *it = sd_value_list_get(list, i);
        const sd_value *cvo = sd_value_dict_get(it, "clip_vision_output");
        const sd_value *s = sd_value_dict_get(it, "strength"), *a = sd_value_dict_get(it, "noise_augmentation");
        const sd_tensor *e = cvo ? sd_value_dict_tensor(cvo, "image_embeds") : NULL;
        if (!e) {
            rc = bad(err, i, "no clip_vision_output with image_embeds");
            goto done;
        }
        if (!s || !a || (sd_value_kind_of(s) != SD_VAL_FLOAT && sd_value_kind_of(s) != SD_VAL_INT) ||
            (sd_value_kind_of(a) != SD_VAL_FLOAT && sd_value_kind_of(a) != SD_VAL_INT)) {
            rc = bad(err, i, "strength and noise_augmentation must be numbers");
            goto done;
        }
        if (e->dtype != SD_F32 || e->ndim != 2) {
            rc = bad(err, i, "image_embeds must be F32 [N, P]");
            goto done;
        }
        if (e->shape[1] != dim) {
            rc = sd_error_set(err, SD_ERR_INVALID,
                              "unclip_conditioning item %zu: image embeddings of width %lld, the model takes "
                              "%d (a CLIP vision output of another tower than the model's?)",
                              i, (long long)e->shape[1], dim);
            goto done;
        }
        for (int64_t k = 0; k < e->shape[0]; k++) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 4;
                sd_unclip_item *g = realloc(items, nc * sizeof *g);
                if (!g) {
                    rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                    goto done;
                }
                items = g;
                cap = nc;
            }
            items[n].embed = (const float *)e->data + k * dim;
            items[n].strength = sd_value_as_float(s);
            items[n].noise_augmentation = sd_value_as_float(a);
            n++;
        }
    }
    if (!n) {
        rc = sd_error_set(err, SD_ERR_INVALID, "conditioning 'unclip_conditioning' holds no image embedding");
        goto done;
    }
    /* seed: kwargs.get("seed", 0) - 10 as Python's int, which
     * torch.manual_seed takes as its two's complement */
    rc = sd_unet_unclip_adm(items, (int)n, dim, merge, seed - 10, rng, out->data, err);
done:
    free(items);
    if (rc) sd_tensor_unref(out);
    else *y = out;
    return rc;
}

sd_status sd_cond_unclip_adm(const sd_value *entry, int adm, uint64_t seed, struct sd_rng *rng, sd_tensor **y,
                             sd_error *err) {
    *y = NULL;
    if (adm < 2 || adm % 2) return sd_error_set(err, SD_ERR_INVALID, "unCLIP model with adm_in_channels %d", adm);
    if (has_unclip(entry)) return entry_unclip(entry, adm / 2, UNCLIP_MERGE_AUGMENTATION, seed, rng, y, err);
    *y = sd_tensor_new4(SD_F32, 2, 1, adm, 0, 0); /* encode_adm: zeros */
    if (!*y) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memset((*y)->data, 0, (size_t)adm * sizeof(float));
    return SD_OK;
}

sd_status sd_cond_unclip_pooled(const sd_value *entry, uint64_t seed, struct sd_rng *rng, sd_tensor **pooled,
                                sd_error *err) {
    *pooled = NULL;
    if (!has_unclip(entry)) return SD_OK;
    sd_tensor *y = NULL;
    sd_status rc = entry_unclip(entry, SDXL_POOLED, SDXL_MERGE_AUGMENTATION, seed, rng, &y, err);
    if (rc) return rc;
    /* unclip_adm(...)[:, :1280] */
    *pooled = sd_tensor_new4(SD_F32, 2, 1, SDXL_POOLED, 0, 0);
    if (*pooled) memcpy((*pooled)->data, y->data, SDXL_POOLED * sizeof(float));
    sd_tensor_unref(y);
    return *pooled ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_cond_unclip(const sd_value *list, int sdxl, int adm, uint64_t seed, struct sd_rng *rng,
                         sd_value **out, sd_error *err) {
    *out = NULL;
    sd_value *o = sd_value_list();
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = SD_OK;
    for (size_t i = 0; i < sd_value_list_len(list) && !rc; i++) {
        const sd_value *e = sd_value_list_get(list, i);
        sd_tensor *y = NULL;
        rc = sdxl ? sd_cond_unclip_pooled(e, seed, rng, &y, err) : sd_cond_unclip_adm(e, adm, seed, rng, &y, err);
        if (rc) {
            sd_error_prefix(err, "conditioning entry %zu", i);
            break;
        }
        if (!y) { /* SDXL without unclip_conditioning: as it is */
            if (sd_value_list_append(o, sd_value_ref((sd_value *)e)))
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            continue;
        }
        sd_value *n = sd_value_shallow_copy(e), *yv = sd_value_tensor(y);
        sd_tensor_unref(y);
        if (!n) sd_value_unref(yv);
        /* dict_set and list_append release what they are given on failure */
        if (!n || sd_value_dict_set(n, sdxl ? "pooled_output" : "y", yv)) {
            sd_value_unref(n);
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        } else if (sd_value_list_append(o, n)) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    if (rc) sd_value_unref(o);
    else *out = o;
    return rc;
}
