/* cond_model.c - the diffusion model (models/dmodel/dmodel.h: the UNet,
 * Flux's DiT or Z-Image's NextDiT) as the CFG guider's model call, with
 * ComfyUI's conditioning semantics (comfy.samplers.calc_cond_batch /
 * get_area_and_mult: areas, masks, strengths, timestep ranges; and each
 * model_base's extra_conds). Float32 arithmetic in torch's order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "models/sampling/guider.h"
#include "models/flux/flux.h"
#include "models/sampling/latent_format.h"
#include "models/sampling/sag.h"
#include "models/sd3/sd3.h"
#include "models/unet/unet.h"
#include "nodes/controlnet/controlnet_nodes.h"
#include "nodes/gligen/gligen_nodes.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define MAX_GROUP 8 /* conditioning entries per model forward */

typedef struct chunk {
    int slot;                   /* index into outs */
    int cond_index;             /* SD_COND_* */
    const sd_value *entry;      /* the conditioning dict */
    sd_tensor *cond, *pooled;   /* borrowed */
    const sd_tensor *concat;    /* extra input channels [B, cc, H, W] or NULL (borrowed) */
    int64_t ah, aw, ay, ax;     /* region of x, latent units */
    float *mult;                /* [ah * aw] weights */
    int guided;                 /* guidance models: a guidance value is fed */
    float guidance;
    const sd_value *refs;       /* Flux: "reference_latents" (a list) or NULL */
    const char *ref_method;     /* "reference_latents_method" or NULL */
    const sd_gligen_ref *gligen; /* the entry's GLIGEN or NULL */
    sd_gligen_box *gboxes;      /* its boxes (owned array, borrowed tensors) */
    int n_gboxes;
} chunk;

static double dict_float(const sd_value *d, const char *key, double dflt) {
    sd_value *v = sd_value_dict_get(d, key);
    if (!v) return dflt;
    sd_value_kind k = sd_value_kind_of(v);
    return k == SD_VAL_FLOAT || k == SD_VAL_INT ? sd_value_as_float(v) : dflt;
}

/* get_area_and_mult: region, weights ([B, ah, aw]: one plane per batch
 * item), or 0 when the entry does not apply at this sigma. */
static sd_status chunk_setup(const sd_cond_model *m, chunk *c, int64_t B, int64_t H, int64_t W, float sigma,
                             int *use, sd_error *err) {
    *use = 0;
    const sd_value *e = c->entry;
    sd_value *sp = sd_value_dict_get(e, "start_percent"), *ep = sd_value_dict_get(e, "end_percent");
    if (sp && sigma > (float)sd_ms_percent_to_sigma(m->ms, sd_value_as_float(sp))) return SD_OK;
    if (ep && sigma < (float)sd_ms_percent_to_sigma(m->ms, sd_value_as_float(ep))) return SD_OK;
    c->ah = H;
    c->aw = W;
    c->ay = c->ax = 0;
    int has_area = 0;
    sd_value *area = sd_value_dict_get(e, "area");
    if (area) {
        if (sd_value_kind_of(area) != SD_VAL_LIST || sd_value_list_len(area) != 4)
            return sd_error_set(err, SD_ERR_INVALID,
                                "conditioning area must be 4 integers (height, width, y, x) in latent units");
        int64_t a[4];
        for (int i = 0; i < 4; i++) a[i] = sd_value_as_int(sd_value_list_get(area, i));
        if (a[2] < 0 || a[3] < 0)
            return sd_error_set(err, SD_ERR_INVALID, "conditioning area has a negative offset");
        has_area = 1;
        c->ay = a[2];
        c->ax = a[3];
        c->ah = a[0] < H - a[2] ? a[0] : H - a[2]; /* min(dim - offset, size) */
        c->aw = a[1] < W - a[3] ? a[1] : W - a[3];
        if (c->ah <= 0 || c->aw <= 0) return SD_OK; /* nothing of it inside the latent */
    }
    const float strength = (float)dict_float(e, "strength", 1.0);
    const sd_tensor *mask = sd_value_dict_tensor(e, "mask");
    int64_t mb = 0;
    if (mask) {
        /* resolved to the latent size before sampling (sd_cond_resolve) */
        if (mask->dtype != SD_F32 || mask->ndim != 3 || mask->shape[1] != H || mask->shape[2] != W)
            return sd_error_set(err, SD_ERR_INVALID, "conditioning mask is not [B, %lld, %lld] (not resolved "
                                "to the latent)", (long long)H, (long long)W);
        /* mask[:B], repeated B // its batch times: it must fill the batch */
        mb = mask->shape[0] < B ? mask->shape[0] : B;
        if (B % mb != 0)
            return sd_error_set(err, SD_ERR_INVALID,
                                "conditioning mask has %lld items, which do not repeat to the latent batch of %lld",
                                (long long)mask->shape[0], (long long)B);
    }
    const int64_t plane = c->ah * c->aw;
    c->mult = malloc((size_t)(B * plane) * sizeof(float));
    if (!c->mult) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (mask) {
        const float ms = (float)dict_float(e, "mask_strength", 1.0);
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < c->ah; r++)
                for (int64_t q = 0; q < c->aw; q++) {
                    float v = ((const float *)mask->data)[((b % mb) * H + c->ay + r) * W + c->ax + q] * ms;
                    c->mult[(b * c->ah + r) * c->aw + q] = v * strength;
                }
    } else {
        for (int64_t i = 0; i < plane; i++) c->mult[i] = 1.0f * strength;
    }
    if (has_area && !mask) {
        /* feather the edges that do not touch the latent border (fuzz 8) */
        int64_t size[2] = {c->ah, c->aw}, off[2] = {c->ay, c->ax}, full[2] = {H, W};
        for (int d = 0; d < 2; d++) {
            int64_t rr = size[d] / 4 < 8 ? size[d] / 4 : 8;
            for (int side = 0; side < 2; side++) {
                if (side == 0 ? off[d] == 0 : off[d] + size[d] >= full[d]) continue;
                for (int64_t t = 0; t < rr; t++) {
                    float f = (float)((1.0 / (double)rr) * (double)(t + 1));
                    int64_t line = side == 0 ? t : size[d] - 1 - t;
                    for (int64_t k = 0; k < size[1 - d]; k++) {
                        int64_t y = d == 0 ? line : k, x = d == 0 ? k : line;
                        c->mult[y * c->aw + x] *= f;
                    }
                }
            }
        }
    }
    if (!mask) /* the same weights for every batch item */
        for (int64_t b = 1; b < B; b++) memcpy(c->mult + b * plane, c->mult, (size_t)plane * sizeof(float));
    *use = 1;
    return SD_OK;
}

/* CONDList.can_concat and CONDConstant.can_concat: the same number of
 * reference latents of the same shapes, the same method. */
static int same_refs(const chunk *a, const chunk *b) {
    size_t na = a->refs ? sd_value_list_len(a->refs) : 0, nb = b->refs ? sd_value_list_len(b->refs) : 0;
    if (na != nb) return 0;
    for (size_t i = 0; i < na; i++) {
        const sd_tensor *ta = sd_value_as_tensor(sd_value_list_get(a->refs, i));
        const sd_tensor *tb = sd_value_as_tensor(sd_value_list_get(b->refs, i));
        if (ta->ndim != tb->ndim || memcmp(ta->shape, tb->shape, (size_t)ta->ndim * sizeof ta->shape[0]))
            return 0;
    }
    if (!na) return 1;
    return (a->ref_method == NULL) == (b->ref_method == NULL) &&
           (!a->ref_method || strcmp(a->ref_method, b->ref_method) == 0);
}

/* model_base.Flux.extra_conds: an entry's "reference_latents" (checked
 * here: F32 [b, C, h, w] with the model's channels) and
 * "reference_latents_method". Other kinds ignore them. */
static sd_status entry_refs(const sd_cond_model *m, chunk *c, sd_error *err) {
    c->refs = NULL;
    c->ref_method = NULL;
    if (m->dm.info.kind != SD_DMODEL_FLUX) return SD_OK;
    const sd_value *r = sd_value_dict_get(c->entry, "reference_latents");
    if (!r || sd_value_kind_of(r) == SD_VAL_NONE) return SD_OK;
    if (sd_value_kind_of(r) != SD_VAL_LIST)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'reference_latents' must be a list of latents");
    for (size_t i = 0; i < sd_value_list_len(r); i++) {
        const sd_tensor *t = sd_value_as_tensor(sd_value_list_get(r, i));
        if (!t || t->dtype != SD_F32 || t->ndim != 4 || t->shape[0] < 1 || t->shape[1] != m->dm.info.in_channels ||
            t->shape[2] < 1 || t->shape[3] < 1)
            return sd_error_set(err, SD_ERR_INVALID,
                                "conditioning reference latent %zu must be F32 [B, %d, H, W] (a latent of this "
                                "model's VAE)",
                                i, m->dm.info.in_channels);
    }
    c->refs = sd_value_list_len(r) ? r : NULL;
    const sd_value *meth = sd_value_dict_get(c->entry, "reference_latents_method");
    if (meth && sd_value_kind_of(meth) == SD_VAL_STRING) c->ref_method = sd_value_as_string(meth);
    else if (meth && sd_value_kind_of(meth) != SD_VAL_NONE)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'reference_latents_method' must be a string");
    return SD_OK;
}

/* The group's reference latents on the backend: ref i as [N, C, h, w] with
 * item k * B + b = process_latent_in(chunk k's ref i [b % its batch]). */
static sd_status group_refs(const sd_cond_model *m, chunk **g, int ng, int64_t B, sd_bt **out, int nref,
                            sd_error *err) {
    const int64_t N = (int64_t)ng * B;
    for (int i = 0; i < nref; i++) {
        const sd_tensor *t0 = sd_value_as_tensor(sd_value_list_get(g[0]->refs, (size_t)i));
        const int64_t C = t0->shape[1], item = C * t0->shape[2] * t0->shape[3];
        sd_tensor *h = sd_tensor_new4(SD_F32, 4, N, C, t0->shape[2], t0->shape[3]);
        if (!h) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        for (int k = 0; k < ng; k++) {
            const sd_tensor *t = sd_value_as_tensor(sd_value_list_get(g[k]->refs, (size_t)i));
            for (int64_t b = 0; b < B; b++) {
                const float *src = (const float *)t->data + (b % t->shape[0]) * item;
                float *dst = (float *)h->data + ((int64_t)k * B + b) * item;
                if (m->fmt) sd_latent_process_in(m->fmt, src, dst, (size_t)item);
                else memcpy(dst, src, (size_t)item * sizeof(float));
            }
        }
        out[i] = sd_bt_from_host(m->be, h, SD_F32);
        sd_tensor_unref(h);
        if (!out[i]) {
            sd_status rc = sd_backend_take_error(m->be, err);
            return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    return SD_OK;
}

static int compatible(const chunk *a, const chunk *b) {
    /* a GLIGEN entry's patches dict is made per entry (get_area_and_mult):
     * ComfyUI never batches it with another entry */
    if ((a->gligen || b->gligen) && a != b) return 0;
    /* ComfyUI batches entries only when they share the control object and
     * have the same conds (a guidance value or none) */
    if (sd_value_dict_get(a->entry, "control") != sd_value_dict_get(b->entry, "control"))
        return 0;
    if ((a->concat ? a->concat->shape[1] : 0) != (b->concat ? b->concat->shape[1] : 0)) return 0;
    if (!same_refs(a, b)) return 0;
    return a->ah == b->ah && a->aw == b->aw && a->cond->shape[1] == b->cond->shape[1] &&
           a->cond->shape[2] == b->cond->shape[2] && a->guided == b->guided;
}

/* model_base.Flux.extra_conds: "guidance" as given, 3.5 when the key is
 * absent, none when it holds None (FluxDisableGuidance). Models without a
 * guidance embedding take none. */
static sd_status entry_guidance(const sd_cond_model *m, chunk *c, sd_error *err) {
    c->guided = 0;
    if (!m->dm.info.guidance) return SD_OK;
    sd_value *g = sd_value_dict_get(c->entry, "guidance");
    if (!g) {
        c->guided = 1;
        c->guidance = (float)SD_COND_FLUX_GUIDANCE_DEFAULT;
        return SD_OK;
    }
    sd_value_kind k = sd_value_kind_of(g);
    if (k == SD_VAL_NONE) return SD_OK;
    if (k != SD_VAL_FLOAT && k != SD_VAL_INT)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'guidance' must be a number or none, not %s",
                            sd_value_kind_name(k));
    c->guided = 1;
    c->guidance = (float)sd_value_as_float(g);
    return SD_OK;
}

/* model_base.Lumina2.extra_conds passes the conditioning's attention_mask
 * to the NextDiT only when it masks a token; an all-ones mask (every
 * prompt without a typed pad token) changes nothing. The masked case is
 * not run: ComfyUI's NextDiT applies that mask to the caption refiner only,
 * against the caption padded with pad tokens the mask does not cover. */
static sd_status entry_mask(const sd_cond_model *m, const chunk *c, sd_error *err) {
    if (m->dm.info.kind != SD_DMODEL_ZIMAGE) return SD_OK;
    sd_tensor *mask = sd_value_dict_tensor(c->entry, "attention_mask");
    if (!mask) return SD_OK;
    sd_tensor *f = sd_tensor_to_dtype(mask, SD_F32);
    if (!f) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int64_t n = sd_tensor_numel(f), zeros = 0;
    for (int64_t i = 0; i < n; i++) zeros += sd_tensor_f32(f)[i] == 0.0f;
    sd_tensor_unref(f);
    if (zeros)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "the Z-Image conditioning's attention_mask masks %lld of %lld tokens "
                            "(a pad token in the prompt?); masked captions are not supported",
                            (long long)zeros, (long long)n);
    return SD_OK;
}

/* The y vector of an entry, [1, y_dim]: SDXL's adm (entry_adm) or Flux's
 * pooled CLIP-L (its first y_dim values, which is all Flux.forward reads). */
static sd_status entry_adm(const sd_cond_model *m, const chunk *c, sd_tensor **y, sd_error *err);
static sd_status entry_y(const sd_cond_model *m, const chunk *c, sd_tensor **y, sd_error *err) {
    *y = NULL;
    if (m->dm.info.kind == SD_DMODEL_UNET) return entry_adm(m, c, y, err);
    const int64_t yd = m->dm.info.y_dim;
    if (!c->pooled || c->pooled->dtype != SD_F32 || c->pooled->ndim != 2 || c->pooled->shape[1] < yd)
        return sd_error_set(err, SD_ERR_INVALID,
                            "%s model: conditioning needs pooled_output [1, >= %lld] (use a text "
                            "encode of this model's CLIP)",
                            sd_dmodel_kind_name(m->dm.info.kind), (long long)yd);
    *y = sd_tensor_new4(SD_F32, 2, 1, yd, 0, 0);
    if (!*y) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy((*y)->data, c->pooled->data, (size_t)yd * sizeof(float));
    return SD_OK;
}

/* SDXL base or refiner adm vector [1, adm] for an entry (sizes from the entry
 * or the latent). */
static sd_status entry_adm(const sd_cond_model *m, const chunk *c, sd_tensor **y, sd_error *err) {
    if (m->unclip) {
        sd_tensor *pre = sd_value_dict_tensor(c->entry, "y");
        if (!pre && !sd_value_dict_get(c->entry, "unclip_conditioning"))
            return sd_cond_unclip_adm(c->entry, m->cfg->adm_in_channels, 0, NULL, y, err); /* zeros */
        if (!pre || pre->dtype != SD_F32 || sd_tensor_numel(pre) != m->cfg->adm_in_channels)
            return sd_error_set(err, SD_ERR_INVALID,
                                "unCLIP model: a conditioning entry has no ADM vector of %d values (its "
                                "unclip_conditioning was not encoded before sampling)",
                                m->cfg->adm_in_channels);
        *y = sd_tensor_ref(pre);
        return SD_OK;
    }
    if (!c->pooled)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SDXL model: conditioning has no pooled_output (use a CLIPTextEncode "
                            "of the same checkpoint)");
    const int64_t n = c->pooled->shape[0], p = c->pooled->shape[1];
    if (m->cfg->adm_in_channels == p + 5 * 256) {
        /* SDXL refiner (comfy.model_base.SDXLRefiner.encode_adm): pooled,
         * emb(height, width, crop_h, crop_w, aesthetic_score); the score
         * defaults to 6 for positive and 2.5 for negative entries
         * (DualCFGGuider marks its middle conditioning negative too). */
        float v[5], emb[5 * 256];
        v[0] = (float)dict_float(c->entry, "height", (double)m->image_h);
        v[1] = (float)dict_float(c->entry, "width", (double)m->image_w);
        v[2] = (float)dict_float(c->entry, "crop_h", 0);
        v[3] = (float)dict_float(c->entry, "crop_w", 0);
        v[4] = (float)dict_float(c->entry, "aesthetic_score",
                                 c->cond_index != SD_COND_POSITIVE ? 2.5 : 6.0);
        sd_unet_timestep_embedding(v, 5, 256, emb);
        *y = sd_tensor_new4(SD_F32, 2, n, p + 5 * 256, 0, 0);
        if (!*y) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        const float *src = sd_tensor_f32(c->pooled);
        float *dst = sd_tensor_f32(*y);
        for (int64_t i = 0; i < n; i++) {
            memcpy(dst + i * (p + 5 * 256), src + i * p, (size_t)p * sizeof(float));
            memcpy(dst + i * (p + 5 * 256) + p, emb, sizeof emb);
        }
        return SD_OK;
    }
    sd_sdxl_size s;
    s.width = (float)dict_float(c->entry, "width", (double)m->image_w);
    s.height = (float)dict_float(c->entry, "height", (double)m->image_h);
    s.crop_w = (float)dict_float(c->entry, "crop_w", 0);
    s.crop_h = (float)dict_float(c->entry, "crop_h", 0);
    s.target_width = (float)dict_float(c->entry, "target_width", s.width);
    s.target_height = (float)dict_float(c->entry, "target_height", s.height);
    sd_status rc = sd_unet_sdxl_adm(c->pooled, &s, y, err);
    if (!rc && (*y)->shape[1] != m->cfg->adm_in_channels) {
        rc = sd_error_set(err, SD_ERR_INVALID, "SDXL adm has %lld values, the UNet wants %d",
                          (long long)(*y)->shape[1], m->cfg->adm_in_channels);
        sd_tensor_unref(*y);
        *y = NULL;
    }
    return rc;
}

/* One model forward over g chunks, each on the full batch B. The x0
 * predictions are accumulated into acc/cnt of each chunk's slot. */
static sd_status run_group(const sd_cond_model *m, const sd_tensor *x, float sigma, chunk **g,
                           int ng, float **acc, float **cnt, sd_error *err) {
    const int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t ah = g[0]->ah, aw = g[0]->aw, L = g[0]->cond->shape[1],
                  D = g[0]->cond->shape[2];
    const int64_t cc = g[0]->concat ? g[0]->concat->shape[1] : 0, cin = C + cc;
    const int64_t plane = ah * aw, N = (int64_t)ng * B;
    sd_status rc = SD_OK;
    sd_tensor *xin = sd_tensor_new4(SD_F32, 4, N, cin, ah, aw);
    sd_tensor *raw = sd_tensor_new4(SD_F32, 4, N, C, ah, aw); /* unscaled crop */
    int64_t cshape[3] = {N, L, D};
    sd_tensor *ctx = sd_tensor_new(SD_F32, 3, cshape);
    sd_tensor *yv = NULL;
    float *ts = malloc((size_t)N * sizeof(float));
    float *gd = g[0]->guided ? malloc((size_t)N * sizeof(float)) : NULL;
    sd_bt *bx = NULL, *bc = NULL, *by = NULL, *bo = NULL, **brefs = NULL, *gobjs = NULL;
    int nref = 0;
    sd_tensor *eps = NULL;
    sd_control_residuals res;
    memset(&res, 0, sizeof res);
    if (!xin || !raw || !ctx || !ts || (g[0]->guided && !gd)) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* the y width: the UNet config's adm (the caller's, which may differ
     * from the loaded network's), else the model's */
    const int64_t ydim = m->cfg ? m->cfg->adm_in_channels : m->dm.info.y_dim;
    if (ydim > 0) {
        yv = sd_tensor_new4(SD_F32, 2, N, ydim, 0, 0);
        if (!yv) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    const float t = sd_ms_timestep(m->ms, sigma);
    const float *xv = x->data;
    float *xi = xin->data, *rv = raw->data, *cv = ctx->data;
    for (int k = 0; k < ng; k++) {
        const chunk *c = g[k];
        sd_tensor *y1 = NULL;
        if (yv && (rc = entry_y(m, c, &y1, err))) goto done;
        if (y1 && m->adm_tap && m->dm.info.kind == SD_DMODEL_UNET) m->adm_tap(m->tap_ud, c->cond_index, y1);
        for (int64_t b = 0; b < B; b++) {
            int64_t n = (int64_t)k * B + b;
            ts[n] = t;
            if (gd) gd[n] = c->guidance;
            memcpy(cv + n * L * D, c->cond->data, (size_t)(L * D) * sizeof(float));
            if (y1)
                memcpy((float *)yv->data + n * yv->shape[1], y1->data,
                       (size_t)yv->shape[1] * sizeof(float));
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t r = 0; r < ah; r++)
                    memcpy(rv + ((n * C + ch) * ah + r) * aw,
                           xv + ((b * C + ch) * H + c->ay + r) * W + c->ax,
                           (size_t)aw * sizeof(float));
            float *dst = xi + n * cin * plane;
            sd_ms_calculate_input(m->ms, sigma, rv + n * C * plane, dst, (size_t)(C * plane));
            for (int64_t ch = 0; ch < cc; ch++) /* c_concat, cropped to the area */
                for (int64_t r = 0; r < ah; r++)
                    memcpy(dst + ((C + ch) * ah + r) * aw,
                           (const float *)c->concat->data +
                               ((b * cc + ch) * H + c->ay + r) * W + c->ax,
                           (size_t)aw * sizeof(float));
        }
        sd_tensor_unref(y1);
    }
    bx = sd_bt_from_host(m->be, xin, SD_F32);
    bc = sd_bt_from_host(m->be, ctx, SD_F32);
    if (yv) by = sd_bt_from_host(m->be, yv, SD_F32);
    if (!bx || !bc || (yv && !by)) {
        rc = sd_backend_take_error(m->be, err);
        if (!rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    const sd_sd3_config *mmdit = m->dm.info.kind == SD_DMODEL_MMDIT ? sd_sd3_get_config(m->dm.net) : NULL;
    if (sd_value_dict_get(g[0]->entry, "control")) {
        if (!m->cfg && !mmdit) {
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                              "ControlNet conditioning is not supported on a %s model",
                              sd_dmodel_kind_name(m->dm.info.kind));
            goto done;
        }
        sd_control_call call = {.ms = m->ms, .unet = m->cfg, .mmdit = mmdit, .hints = m->hints,
                                .sigma = sigma, .x_in = bx, .batched = ng, .timesteps = ts,
                                .context = bc, .y = by, .mmdit_net = mmdit ? m->dm.net : NULL};
        if ((rc = sd_nodes_control_eval(g[0]->entry, &call, &res, err))) goto done;
    }
    /* the MMDiT's extras: SkipLayerGuidance's blocks, the ControlNet's
     * output list */
    sd_sd3_extra skip = {m->skip, m->n_skip, res.n_dit ? res.dit : NULL, res.n_dit};
    const void *extra = res.active && !mmdit ? (const void *)&res.control : NULL;
    if (mmdit && res.n_dit) extra = &skip;
    sd_unet_control patched;
    sd_unet_patches perturbed; /* the MODEL's patches + PAG's, for this call */
    sd_unet_attn_record *rec = NULL; /* SAG: the first negative entry's rows are recorded */
    for (int k = 0; m->record && k < ng && !rec; k++)
        if (g[k]->cond_index == SD_COND_NEGATIVE) {
            rec = m->record;
            rec->item0 = (int64_t)k * B;
            rec->n_items = B;
            rec->failed = 0;
        }
    if ((m->unet_patches && m->unet_patches->n > 0) || m->perturb_attn) {
        if (m->dm.info.kind != SD_DMODEL_UNET) {
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                              "UNet model patches (FreeU, PerturbedAttentionGuidance, ...) are not supported on a %s model",
                              sd_dmodel_kind_name(m->dm.info.kind));
            goto done;
        }
        if (res.active) patched = res.control;
        else memset(&patched, 0, sizeof patched);
        patched.patches = m->unet_patches;
        patched.sigma = sigma;
        patched.rng = m->rng;
        patched.record = rec;
        if (m->perturb_attn) {
            if (m->unet_patches) perturbed = *m->unet_patches;
            else memset(&perturbed, 0, sizeof perturbed);
            sd_unet_patch pag = {.kind = SD_UNET_PATCH_ATTN1_IDENTITY, .block = SD_UNET_BLOCK_MIDDLE,
                                 .block_id = 0, .index = -1};
            if ((rc = sd_unet_patches_add(&perturbed, &pag, err))) goto done;
            patched.patches = &perturbed;
        }
        extra = &patched;
    }
    /* the entry's GLIGEN (Gligen.set_position on this input's shape) as the
     * UNet's middle_patch */
    sd_unet_middle_patch gmid;
    sd_gligen_call gcall = {NULL, NULL};
    if (g[0]->gligen) {
        if (m->dm.info.kind != SD_DMODEL_UNET) {
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "GLIGEN is not supported on a %s model",
                              sd_dmodel_kind_name(m->dm.info.kind));
            goto done;
        }
        if ((rc = sd_gligen_set_position(g[0]->gligen->g, g[0]->gboxes, g[0]->n_gboxes, B, ah, aw, &gobjs, err))) {
            sd_error_prefix(err, "GLIGEN model %s", g[0]->gligen->name);
            goto done;
        }
        if (extra != &patched) {
            if (res.active) patched = res.control;
            else memset(&patched, 0, sizeof patched);
            patched.sigma = sigma;
            patched.rng = m->rng;
            patched.record = rec;
            extra = &patched;
        }
        gcall = (sd_gligen_call){g[0]->gligen->g, gobjs};
        sd_gligen_middle_patch(&gcall, &gmid);
        patched.middle_patch = &gmid;
    }
    nref = g[0]->refs ? (int)sd_value_list_len(g[0]->refs) : 0;
    sd_flux_refs frefs = {NULL, 0, SD_FLUX_REF_OFFSET};
    if (nref) {
        if (!(brefs = calloc((size_t)nref, sizeof *brefs))) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            goto done;
        }
        if ((rc = group_refs(m, g, ng, B, brefs, nref, err))) goto done;
        frefs = (sd_flux_refs){brefs, nref, sd_flux_ref_method_from_name(g[0]->ref_method)};
        extra = &frefs;
    }
    if (m->n_skip > 0) {
        if (m->dm.info.kind != SD_DMODEL_MMDIT) {
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "skip layer guidance is not supported on a %s model",
                              sd_dmodel_kind_name(m->dm.info.kind));
            goto done;
        }
        extra = &skip;
    }
    sd_dmodel_input in = {bx, ts, bc, by, gd, extra};
    rc = sd_dmodel_forward(&m->dm, &in, &bo, err);
    if (!rc && rec && rec->failed) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory (self-attention guidance)");
    if (rc) goto done;
    eps = sd_bt_to_host(bo);
    if (!eps || sd_tensor_numel(eps) != sd_tensor_numel(raw)) {
        rc = sd_error_set(err, eps ? SD_ERR_INTERNAL : SD_ERR_NOMEM,
                          "the diffusion model's output has an unexpected size");
        goto done;
    }
    if (m->forward_tap) m->forward_tap(m->tap_ud, xin, ts, gd, eps);
    /* denoised = x - eps * sigma on the unscaled crop, then weighted sums */
    float *ev = eps->data;
    sd_ms_calculate_denoised(m->ms, sigma, ev, rv, ev, (size_t)sd_tensor_numel(eps));
    for (int k = 0; k < ng; k++) {
        const chunk *c = g[k];
        float *oa = acc[c->slot], *oc = cnt[c->slot];
        for (int64_t b = 0; b < B; b++) {
            int64_t n = (int64_t)k * B + b;
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t r = 0; r < ah; r++) {
                    const float *src = ev + ((n * C + ch) * ah + r) * aw;
                    const float *mu = c->mult + (b * ah + r) * aw;
                    int64_t o = ((b * C + ch) * H + c->ay + r) * W + c->ax;
                    for (int64_t q = 0; q < aw; q++) {
                        float w = src[q] * mu[q];
                        oa[o + q] = oa[o + q] + w;
                        oc[o + q] = oc[o + q] + mu[q];
                    }
                }
        }
    }
done:
    sd_bt_free(gobjs);
    sd_control_residuals_free(&res);
    for (int i = 0; brefs && i < nref; i++) sd_bt_free(brefs[i]);
    free(brefs);
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(by);
    sd_bt_free(bo);
    sd_tensor_unref(eps);
    sd_tensor_unref(xin);
    sd_tensor_unref(raw);
    sd_tensor_unref(ctx);
    sd_tensor_unref(yv);
    free(ts);
    free(gd);
    return rc;
}

sd_status sd_cond_model_eval(void *ud, const sd_tensor *x, float sigma, const int *conds,
                             int n_conds, sd_tensor **outs, sd_error *err) {
    const sd_cond_model *m = ud;
    if (x->ndim != 4 || x->dtype != SD_F32)
        return sd_error_set(err, SD_ERR_INVALID, "sampler latent must be F32 [B, C, H, W]");
    const int64_t H = x->shape[2], W = x->shape[3], n = sd_tensor_numel(x);
    size_t total = 0;
    for (int j = 0; j < n_conds; j++) {
        if (conds[j] < 0 || conds[j] > 2 || !m->conds[conds[j]])
            return sd_error_set(err, SD_ERR_INVALID, "no conditioning #%d", conds[j]);
        total += sd_value_list_len(m->conds[conds[j]]);
    }
    chunk *all = calloc(total ? total : 1, sizeof *all);
    chunk **order = calloc(total ? total : 1, sizeof *order);
    float **acc = calloc((size_t)n_conds, sizeof *acc), **cnt = calloc((size_t)n_conds, sizeof *cnt);
    sd_status rc = SD_OK;
    if (!all || !order || !acc || !cnt) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t nc = 0;
    for (int j = 0; j < n_conds && !rc; j++) {
        acc[j] = outs[j]->data;
        cnt[j] = malloc((size_t)n * sizeof(float));
        if (!cnt[j]) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            acc[j][i] = 0.0f;
            cnt[j][i] = 1e-37f;
        }
        const sd_value *list = m->conds[conds[j]];
        for (size_t k = 0; k < sd_value_list_len(list) && !rc; k++) {
            chunk *c = &all[nc];
            c->slot = j;
            c->cond_index = conds[j];
            c->entry = sd_value_list_get(list, k);
            c->cond = sd_value_dict_tensor(c->entry, "cond");
            c->pooled = sd_value_dict_tensor(c->entry, "pooled_output");
            c->concat = sd_value_dict_tensor(c->entry, "c_concat");
            if (!c->concat) c->concat = m->concat;
            const char *which = conds[j] == SD_COND_MIDDLE ? "middle"
                                : conds[j]                 ? "negative"
                                                           : "positive";
            if (!c->cond || c->cond->dtype != SD_F32 || c->cond->ndim != 3 ||
                c->cond->shape[2] != m->dm.info.context_dim) {
                rc = sd_error_set(err, SD_ERR_INVALID,
                                  "%s conditioning entry %zu: 'cond' must be F32 [1, L, %d] "
                                  "(does the text encoder belong to this model?)",
                                  which, k, m->dm.info.context_dim);
                break;
            }
            if ((rc = entry_mask(m, c, err))) {
                sd_error_prefix(err, "%s conditioning entry %zu", which, k);
                break;
            }
            if ((rc = entry_refs(m, c, err))) {
                sd_error_prefix(err, "%s conditioning entry %zu", which, k);
                break;
            }
            if ((rc = entry_guidance(m, c, err))) {
                sd_error_prefix(err, "%s conditioning entry %zu", which, k);
                break;
            }
            if ((rc = sd_nodes_gligen_of(c->entry, &c->gligen, &c->gboxes, &c->n_gboxes, err))) {
                sd_error_prefix(err, "%s conditioning entry %zu", which, k);
                break;
            }
            int use = 0;
            rc = chunk_setup(m, c, x->shape[0], H, W, sigma, &use, err);
            if (rc) sd_error_prefix(err, "%s conditioning entry %zu", which, k);
            if (use) order[nc++] = c;
        }
    }
    /* group compatible entries into batched forwards. ComfyUI's
     * calc_cond_batch reverses the list of compatible entries
     * (to_batch_temp.reverse()): a batch holds them last first, which
     * decides what a batch-sized input meets by position (a ControlNet
     * hint batch equal to the call's, SAG's first negative item) and the
     * order of the area sums. */
    for (size_t i = 0; i < nc && !rc; i++) {
        if (!order[i]) continue;
        chunk *g[MAX_GROUP];
        int ng = 0;
        for (size_t k = i; k < nc && ng < MAX_GROUP; k++)
            if (order[k] && compatible(order[i], order[k])) {
                g[ng++] = order[k];
                if (k != i) order[k] = NULL;
            }
        for (int a = 0, b = ng - 1; a < b; a++, b--) {
            chunk *t = g[a];
            g[a] = g[b];
            g[b] = t;
        }
        order[i] = NULL;
        rc = run_group(m, x, sigma, g, ng, acc, cnt, err);
    }
    for (int j = 0; j < n_conds && !rc; j++) {
        for (int64_t i = 0; i < n; i++) acc[j][i] = acc[j][i] / cnt[j][i];
        if (m->tap) m->tap(m->tap_ud, conds[j], sigma, outs[j]);
    }
done:
    for (size_t i = 0; all && i < total; i++) {
        free(all[i].mult);
        free(all[i].gboxes);
    }
    for (int j = 0; cnt && j < n_conds; j++) free(cnt[j]);
    free(all);
    free(order);
    free(acc);
    free(cnt);
    return rc;
}

/* SAG's term degraded - p (sd_cond_model_eval_skip). */
static sd_status sag_term(sd_cond_model m, const sd_tensor *x, float sigma, const sd_cfg_slg *post,
                          const float *uncond, sd_tensor *out, sd_error *err) {
    const sd_unet_attn_record *rec = m.record;
    const int64_t n = sd_tensor_numel(x);
    if (!rec || !rec->mass || !uncond || x->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "SelfAttentionGuidance: no attention of a negative prediction "
                            "was recorded (it needs a negative conditioning and a UNet model)");
    if (rec->mass->shape[0] != x->shape[0])
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "SelfAttentionGuidance: the recorded attention has %lld "
                            "items, the latent batch %lld", (long long)rec->mass->shape[0], (long long)x->shape[0]);
    sd_tensor *deg = sd_tensor_new(SD_F32, x->ndim, x->shape), *xn = sd_tensor_new(SD_F32, x->ndim, x->shape);
    sd_status rc = SD_OK;
    if (!deg || !xn) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory (self-attention guidance)");
    if (!rc)
        rc = sd_sag_degrade(uncond, x->shape, rec->mass->data, rec->mass->shape[1], post->blur_sigma, 1.0,
                            deg->data, err);
    if (!rc) {
        const float *dv = deg->data, *xv = x->data;
        float *nv = xn->data;
        for (int64_t i = 0; i < n; i++) {
            float t = dv[i] + xv[i];
            nv[i] = t - uncond[i]; /* degraded + x - uncond_pred */
        }
        m.record = NULL; /* ComfyUI's call passes [uncond] as index 0: nothing recorded */
        int c = SD_COND_NEGATIVE;
        rc = sd_cond_model_eval(&m, xn, sigma, &c, 1, &out, err);
    }
    if (!rc) {
        float *ov = out->data;
        const float *dv = deg->data;
        for (int64_t i = 0; i < n; i++) ov[i] = dv[i] - ov[i];
    }
    sd_tensor_unref(deg);
    sd_tensor_unref(xn);
    return rc;
}

sd_status sd_cond_model_eval_skip(void *ud, const sd_tensor *x, float sigma, const sd_cfg_slg *post,
                                  const float *uncond, sd_tensor *out, sd_error *err) {
    sd_cond_model m = *(const sd_cond_model *)ud;
    if (post->kind == SD_CFG_POST_SAG) return sag_term(m, x, sigma, post, uncond, out, err);
    if (post->kind == SD_CFG_POST_PAG) {
        m.perturb_attn = 1;
    } else {
        m.skip = post->skip;
        m.n_skip = post->n_skip;
    }
    int c = SD_COND_POSITIVE;
    return sd_cond_model_eval(&m, x, sigma, &c, 1, &out, err);
}
