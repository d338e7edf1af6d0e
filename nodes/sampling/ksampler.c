/* ksampler.c - nodes.common_ksampler and the KSampler / KSamplerAdvanced
 * nodes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "core/membudget.h"
#include "models/sampling/guider.h"
#include "models/image/imageops.h"
#include "models/sampling/rng.h"
#include "models/sampling/sampler.h"
#include "models/sampling/schedules.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/controlnet/controlnet_nodes.h"
#include "nodes/gligen/gligen_nodes.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void sd_ksample_args_init(sd_ksample_args *a) {
    memset(a, 0, sizeof *a);
    a->steps = 20;
    a->cfg = 8.0;
    a->sampler_name = "euler";
    a->scheduler = "simple";
    a->denoise = 1.0;
    a->start_step = -1;
    a->last_step = -1;
}

/* The input latent with "samples" replaced (takes t; NULL keeps them). */
static sd_status latent_with(const sd_value *latent, sd_tensor *t, sd_value **out,
                             sd_error *err) {
    sd_value *d = sd_value_shallow_copy(latent);
    sd_value *tv = t ? sd_value_tensor(t) : NULL;
    sd_tensor_unref(t);
    if (!d || (t && (!tv || sd_value_dict_set(d, "samples", tv)))) {
        if (!d) sd_value_unref(tv);
        sd_value_unref(d);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}

/* comfy.utils.reshape_mask + repeat_to_batch_size: mask [.., h, w] ->
 * [B, C, H, W] (bilinear, align_corners=False). */
static sd_status prepare_mask(const sd_tensor *mask, const int64_t *shape, sd_tensor **out,
                              sd_error *err) {
    *out = NULL;
    if (mask->dtype != SD_F32 || mask->ndim < 2)
        return sd_error_set(err, SD_ERR_INVALID, "noise_mask must be an F32 tensor [.., H, W]");
    int64_t h = mask->shape[mask->ndim - 2], w = mask->shape[mask->ndim - 1];
    int64_t mb = sd_tensor_numel(mask) / (h * w);
    sd_tensor *m4 = sd_tensor_new4(SD_F32, 4, mb, 1, h, w);
    if (!m4) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy(m4->data, mask->data, m4->nbytes);
    sd_tensor *r = NULL;
    sd_status rc = SD_OK;
    if (h != shape[2] || w != shape[3])
        rc = sd_imageops_upscale(m4, shape[3], shape[2], SD_UPSCALE_BILINEAR, SD_CROP_DISABLED,
                                 &r, err);
    else
        r = sd_tensor_ref(m4);
    sd_tensor_unref(m4);
    if (rc) return rc;
    sd_tensor *o = sd_tensor_new(SD_F32, 4, shape);
    if (!o) {
        sd_tensor_unref(r);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const int64_t plane = shape[2] * shape[3];
    for (int64_t b = 0; b < shape[0]; b++) /* repeat (then cut) to the batch size */
        for (int64_t c = 0; c < shape[1]; c++)
            memcpy((float *)o->data + (b * shape[1] + c) * plane,
                   (const float *)r->data + (b % mb) * plane, (size_t)plane * sizeof(float));
    sd_tensor_unref(r);
    *out = o;
    return SD_OK;
}

/* ---- conditioning pre-processing (comfy.samplers.process_conds) ---------------- */

/* The entry's area (h, w, y, x); 0 when it has none. */
static int entry_area(const sd_value *e, int64_t a[4]) {
    sd_value *v = sd_value_dict_get(e, "area");
    if (!v || sd_value_kind_of(v) != SD_VAL_LIST || sd_value_list_len(v) != 4) return 0;
    for (int i = 0; i < 4; i++) a[i] = sd_value_as_int(sd_value_list_get(v, i));
    return 1;
}

/* comfy.samplers.create_cond_with_same_area_if_none: for an entry c with an
 * area, the other list gets a copy of c carrying the conditioning of its
 * smallest entry enclosing that area (an area-less entry counts as
 * enclosing), unless that entry has exactly c's area. */
static int same_area_if_none(sd_value *conds, const sd_value *c) {
    int64_t ca[4], xa[4], sa[4];
    if (!entry_area(c, ca)) return 0;
    const sd_value *smallest = NULL;
    int s_has = 0;
    for (size_t i = 0; i < sd_value_list_len(conds); i++) {
        const sd_value *x = sd_value_list_get(conds, i);
        if (entry_area(x, xa)) {
            int inside = ca[2] >= xa[2] && ca[3] >= xa[3] && ca[0] + ca[2] <= xa[0] + xa[2] &&
                         ca[1] + ca[3] <= xa[1] + xa[3];
            if (!inside) continue;
            if (!smallest || !s_has || sa[0] * sa[1] > xa[0] * xa[1]) {
                smallest = x;
                s_has = 1;
                memcpy(sa, xa, sizeof sa);
            }
        } else if (!smallest) {
            smallest = x;
            s_has = 0;
        }
    }
    if (!smallest || (s_has && memcmp(sa, ca, sizeof sa) == 0)) return 0;
    sd_value *out = sd_value_shallow_copy(c);
    if (!out) return -1;
    /* model_conds: the text conditioning, what SDXL's adm is built from and
     * unCLIP's adm ("y", which every entry of an unCLIP run has) */
    static const char *const keys[] = {"cond",          "pooled_output", "c_concat", "width",
                                       "height",        "crop_w",        "crop_h",
                                       "target_width",  "target_height", "aesthetic_score",
                                       "y",             NULL};
    for (int k = 0; keys[k]; k++) {
        sd_value *v = sd_value_dict_get(smallest, keys[k]);
        if (v && sd_value_dict_set(out, keys[k], sd_value_ref(v))) {
            sd_value_unref(out);
            return -1;
        }
    }
    return sd_value_list_append(conds, out);
}

/* A ControlNet made for another model would only fail at the first model
 * call, deep inside the sampler; check every attached one against the UNet
 * first so the error names the conditioning input that carries it. */
/* The same for GLIGEN models: a fuser of the right width for every
 * SpatialTransformer of the UNet (ComfyUI fails inside the first forward). */
static sd_status check_gligen(const sd_value *conds, const char *input, sd_unet *unet, sd_error *err) {
    for (size_t i = 0; i < sd_value_list_len(conds); i++) {
        const sd_gligen_ref *ref = NULL;
        sd_gligen_box *boxes = NULL;
        int n = 0;
        sd_status rc = sd_nodes_gligen_of(sd_value_list_get(conds, i), &ref, &boxes, &n, err);
        free(boxes);
        if (!rc && ref && !unet)
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "GLIGEN runs on SD1 UNet models only");
        if (!rc && ref) {
            int widths[3 * SD_UNET_MAX_BLOCKS];
            int nw = sd_unet_transformer_widths(unet, widths, 3 * SD_UNET_MAX_BLOCKS);
            rc = sd_gligen_check_fit(ref->g, widths, nw, err);
            if (rc) sd_error_prefix(err, "GLIGEN model %s", ref->name);
        }
        if (!rc && ref && n > SD_GLIGEN_MAX_OBJS)
            rc = sd_error_set(err, SD_ERR_INVALID, "%d GLIGEN boxes; ComfyUI's GLIGEN takes at most %d", n,
                              SD_GLIGEN_MAX_OBJS);
        if (rc) {
            sd_error_prefix(err, "entry %zu", i);
            sd_error_at(err, NULL, NULL, input);
            return rc;
        }
    }
    return SD_OK;
}

static sd_status check_controls(const sd_value *conds, const char *input, sd_unet *unet,
                                const sd_sd3_config *mmdit, sd_error *err) {
    for (size_t i = 0; i < sd_value_list_len(conds); i++) {
        sd_control_link *links = NULL;
        int n = 0;
        sd_status rc = sd_nodes_control_links(sd_value_list_get(conds, i), &links, &n, err);
        if (!rc && n > 0 && !unet && !mmdit)
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                              "entry %zu carries a ControlNet: ControlNets run on SD UNet and SD3 models only", i);
        for (int k = 0; !rc && (unet || mmdit) && k < n; k++) {
            rc = unet ? sd_controlnet_check_fit(links[k].cn, sd_unet_get_config(unet), err)
                      : sd_controlnet_check_fit_mmdit(links[k].cn, mmdit, err);
            /* get_control's refusal, before the first step */
            if (!rc && mmdit && !links[k].vae)
                rc = sd_error_set(err, SD_ERR_INVALID,
                                  "This Controlnet needs a VAE but none was provided, please use a "
                                  "ControlNetApply node with a VAE input and connect it.");
            if (rc) sd_error_prefix(err, "ControlNet %d of entry %zu", k + 1, i);
        }
        free(links);
        if (rc) {
            sd_error_at(err, NULL, NULL, input);
            return rc;
        }
    }
    return SD_OK;
}

/* comfy.samplers.apply_empty_x_to_equal_area for `key` ("control" from the
 * positive entries with the `flag` set, "gligen" from all with flag NULL):
 * when area-less positive entries carry one and no area-less negative entry
 * does, the area-less negative entries without one get those (the x-th
 * value goes to negative entry x modulo their count: the last wins). *out
 * is a new list, or NULL when the negative stays as it is. */
static sd_status fill_uncond(const sd_value *pos, const sd_value *neg, const char *key, const char *flag,
                             sd_value **out, sd_error *err) {
    *out = NULL;
    size_t np = sd_value_list_len(pos), nn = sd_value_list_len(neg);
    sd_value **cnets = calloc(np ? np : 1, sizeof *cnets);
    size_t *other = calloc(nn ? nn : 1, sizeof *other);
    size_t nc = 0, no = 0;
    int uncond_has = 0;
    sd_status rc = SD_OK;
    if (!cnets || !other) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < np; i++) {
        sd_value *e = sd_value_list_get(pos, i), *f = flag ? sd_value_dict_get(e, flag) : NULL;
        sd_value *c = sd_value_dict_get(e, key);
        if ((flag && (!f || !sd_value_as_bool(f))) || sd_value_dict_get(e, "area")) continue;
        if (c && sd_value_kind_of(c) != SD_VAL_NONE) cnets[nc++] = c;
    }
    for (size_t i = 0; i < nn; i++) {
        sd_value *e = sd_value_list_get(neg, i), *c = sd_value_dict_get(e, key);
        if (sd_value_dict_get(e, "area")) continue;
        if (c && sd_value_kind_of(c) != SD_VAL_NONE) uncond_has = 1;
        else other[no++] = i;
    }
    if (uncond_has || nc == 0 || no == 0) goto done;
    sd_value *list = sd_value_shallow_copy(neg);
    if (!list) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t x = 0; x < nc; x++) {
        size_t idx = other[x % no];
        sd_value *n = sd_value_shallow_copy(sd_value_list_get(list, idx));
        if (!n || sd_value_dict_set(n, key, sd_value_ref(cnets[x]))) {
            sd_value_unref(n);
            sd_value_unref(list);
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            goto done;
        }
        /* replace entry idx: rebuild the list with n in its place */
        sd_value *rebuilt = sd_value_list();
        for (size_t k = 0; rebuilt && k < sd_value_list_len(list); k++)
            if (sd_value_list_append(rebuilt, k == idx ? sd_value_ref(n)
                                                      : sd_value_ref(sd_value_list_get(list, k)))) {
                sd_value_unref(rebuilt);
                rebuilt = NULL;
            }
        sd_value_unref(n);
        sd_value_unref(list);
        list = rebuilt;
        if (!list) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    *out = list;
done:
    free(cnets);
    free(other);
    return rc;
}

typedef struct run_state {
    sd_node_ctx *ctx;
    const sd_ksample_hooks *hooks;
    const char *latent_format; /* for previews: sd_latent_format.name */
    sd_tensor *x0;             /* last callback's denoised (NULL = not wanted; owned) */
    int have_x0;
    int x0_failed;             /* no memory for a resized x0 */
} run_state;

static void keep_x0(run_state *s, const sd_tensor *den);

static void on_progress(void *ud, int step, int total, const sd_tensor *x,
                        const sd_tensor *denoised) {
    run_state *s = ud;
    if (s->hooks && s->hooks->on_step) s->hooks->on_step(s->hooks->ud, step, total, x, denoised);
    keep_x0(s, denoised);
    sd_error e;
    /* the preview first, so a front end shows the step's picture with its count */
    if (denoised) sd_node_preview(s->ctx, step + 1, total, denoised, s->latent_format);
    (void)sd_node_progress(s->ctx, step + 1, total, &e); /* interrupts stop via on_cancel */
}

static int on_cancel(void *ud) {
    run_state *s = ud;
    return s->ctx->interrupt && *s->ctx->interrupt;
}

/* Bytes one UNet forward needs for a batch of b latents of h x w, from the
 * detected config (nothing loaded): the skip activations every input block
 * keeps for the output blocks, plus the widest level's working set (a
 * transformer block's q/k/v/out and GEGLU feed-forward, about 16 x its
 * channels per position; attention itself is computed in key blocks, never
 * as an [L, L] matrix, kernels/cpu/attention.c). A lower bound, counted in
 * float32: it is there to refuse what cannot fit, not to plan memory. */
static double unet_bytes(const sd_unet_config *c, int64_t b, int64_t h, int64_t w) {
    double hw = (double)h * (double)w, skips = c->model_channels * hw, widest = 0;
    for (int l = 0; l < c->num_levels; l++) {
        double at = hw / (double)(1ull << (2 * l)), ch = (double)c->model_channels * c->channel_mult[l];
        skips += c->num_res_blocks[l] * ch * at;
        if (l + 1 < c->num_levels) skips += ch * at / 4.0; /* the downsample's output */
        if (16.0 * ch * at > widest) widest = 16.0 * ch * at;
    }
    return (skips + widest) * sizeof(float) * (double)b;
}

/* The same for the Flux DiT on b latents of h x w: the joint stream of
 * (h/2)(w/2) image tokens plus 512 text tokens (T5's usual length), and a
 * single block's working set over it: the stream, its fused qkv + MLP
 * projection (3 + mlp_ratio widths), q/k/v after the norms and RoPE, the
 * attention output and the MLP activation, about 3 + 2 * (3 + mlp_ratio)
 * widths per token, counted in float32; weights are not counted. */
static double flux_bytes(const sd_flux_config *c, int64_t b, int64_t h, int64_t w) {
    double tokens = (double)((h + 1) / 2) * (double)((w + 1) / 2) + 512.0;
    double widths = 3.0 + 2.0 * (3.0 + c->mlp_ratio);
    return tokens * widths * c->hidden_size * sizeof(float) * (double)b;
}

/* The same for Z-Image's NextDiT: the joint stream of the image tokens and
 * 512 caption tokens (each padded to a multiple of 32) and a block's
 * working set over it: the stream, qkv, q/k/v after the norms and RoPE,
 * the attention output, and the SwiGLU's three FFN-wide activations. */
static double zimage_bytes(const sd_zimage_config *c, int64_t b, int64_t h, int64_t w) {
    double img = (double)((h + 1) / 2) * (double)((w + 1) / 2);
    double tokens = 32.0 * ceil(img / 32.0) + 512.0;
    double widths = 8.0 + 3.0 * (double)c->ffn_hidden / (double)c->dim;
    return tokens * widths * c->dim * sizeof(float) * (double)b;
}

/* The MMDiT's: the joint stream (~154 text tokens beside the patches) with
 * the same per-token widths as a Flux double block, plus a second
 * attention's q, k, v on the MMDiT-X blocks. */
static double sd3_bytes(const sd_sd3_config *c, int64_t b, int64_t h, int64_t w) {
    int64_t p = c->patch_size;
    double tokens = (double)((h + p - 1) / p) * (double)((w + p - 1) / p) + 333.0;
    double widths = 3.0 + 2.0 * (3.0 + (double)c->mlp_hidden / c->hidden_size) + (c->n_self_attn ? 3.0 : 0.0);
    return tokens * widths * c->hidden_size * sizeof(float) * (double)b;
}

/* The model's checkpoint facts every sampling entry checks first, and the
 * UNet's activations against the memory budget (core/membudget.h): cond
 * and uncond run as one batch, so 2 x the latent batch. */
static sd_status check_model_latent(sd_node_ctx *ctx, sd_checkpoint *ckpt, const sd_value *latent,
                                    const char *model_input, sd_tensor **samples_out,
                                    sd_error *err) {
    sd_tensor *samples = latent ? sd_value_dict_tensor(latent, "samples") : NULL;
    if (!samples || samples->dtype != SD_F32 || samples->ndim != 4)
        return sd_nodes_bad_input(err, "latent_image",
                                  "latent_image must be a LATENT with F32 samples [B, C, H, W]");
    const sd_ckpt_info *info = sd_checkpoint_info(ckpt);
    if (!info->has_unet)
        return sd_nodes_bad_input(err, model_input, "MODEL has no diffusion model");
    if (samples->shape[1] != sd_ckpt_info_latent_channels(info))
        return sd_nodes_bad_input(err, "latent_image", "latent has %lld channels, the %s model works on %d",
                                  (long long)samples->shape[1], sd_ckpt_family_name(info->family),
                                  sd_ckpt_info_latent_channels(info));
    int flux = info->dmodel_kind == SD_DMODEL_FLUX, zimage = info->dmodel_kind == SD_DMODEL_ZIMAGE;
    int sd3 = info->dmodel_kind == SD_DMODEL_MMDIT;
    int64_t b2 = 2 * samples->shape[0];
    double need = flux     ? flux_bytes(&info->flux, b2, samples->shape[2], samples->shape[3])
                  : zimage ? zimage_bytes(&info->zimage, b2, samples->shape[2], samples->shape[3])
                  : sd3    ? sd3_bytes(&info->sd3, b2, samples->shape[2], samples->shape[3])
                           : unet_bytes(&info->unet, b2, samples->shape[2], samples->shape[3]);
    char what[160];
    snprintf(what, sizeof what, "the %s's activations for the latent [%lld, %lld, %lld, %lld] "
             "(cond and uncond together)", flux || zimage || sd3 ? "DiT" : "UNet", (long long)samples->shape[0],
             (long long)samples->shape[1], (long long)samples->shape[2], (long long)samples->shape[3]);
    sd_status rc = sd_mem_check(ctx, "latent_image", need >= 1.8e19 ? UINT64_MAX : (uint64_t)need, what, err);
    if (rc) return rc;
    *samples_out = samples;
    return SD_OK;
}

static sd_status common_ksampler(sd_node_ctx *ctx, const sd_ksample_args *a, sd_value **out,
                                 sd_error *err);

sd_status sd_nodes_common_ksampler(sd_node_ctx *ctx, const sd_ksample_args *a, sd_value **out,
                                   sd_error *err) {
    *out = NULL;
    sd_ksample_args fixed = *a;
    sd_value *latent = NULL;
    sd_status rc = sd_nodes_fix_empty_latent(a->ckpt, a->latent, &latent, err);
    if (rc) return rc;
    fixed.latent = latent;
    rc = common_ksampler(ctx, &fixed, out, err);
    sd_value_unref(latent);
    return rc;
}

static sd_status common_ksampler(sd_node_ctx *ctx, const sd_ksample_args *a, sd_value **out,
                                 sd_error *err) {
    sd_tensor *samples;
    sd_status rc = check_model_latent(ctx, a->ckpt, a->latent, "model", &samples, err);
    if (rc) return rc;
    if (!sd_sampler_find(a->sampler_name))
        return sd_nodes_bad_input(err, "sampler_name", "unknown sampler '%s'", a->sampler_name);
    if (!a->positive || !a->negative)
        return sd_error_set(err, SD_ERR_INVALID, "KSampler needs positive and negative conditioning");

    sd_model_sampling *ms = malloc(sizeof *ms);
    if (!ms) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_of(a->ckpt, a->patches, ms);
    float *sig = NULL;
    int nsig = 0, first = 0, nrun = 0, skip = 0;
    rc = sd_ksampler_sigmas(ms, a->scheduler, a->sampler_name, a->steps, a->denoise, &sig, &nsig,
                            err);
    free(ms);
    if (rc) {
        sd_error_at(err, NULL, NULL, "scheduler");
        return rc;
    }
    if (nsig > 0)
        sd_sigmas_step_range(sig, nsig, a->start_step, a->last_step, a->force_full_denoise,
                             &first, &nrun, &skip);
    if (nsig == 0 || skip) { /* nothing to sample: ComfyUI returns the latent as it is */
        free(sig);
        return latent_with(a->latent, NULL, out, err);
    }
    sd_sample_args s;
    sd_sample_args_init(&s);
    s.guide.kind = SD_GUIDE_CFG;
    s.guide.ckpt = a->ckpt;
    s.guide.loras = a->loras;
    s.guide.patches = a->patches;
    s.guide.positive = a->positive;
    s.guide.negative = a->negative;
    s.guide.cfg = a->cfg;
    s.sampler_name = a->sampler_name;
    s.sigmas = sig + first;
    s.n_sigmas = nrun;
    s.add_noise = !a->disable_noise;
    s.seed = a->seed;
    s.latent = a->latent;
    s.hooks = a->hooks;
    rc = sd_nodes_sample(ctx, &s, out, NULL, err);
    free(sig);
    return rc;
}

void sd_nodes_model_sampling_init(const sd_model_ref *m, sd_model_sampling *ms) {
    sd_nodes_model_sampling_of(m->ckpt, &m->patches, ms);
}

void sd_sample_args_init(sd_sample_args *a) {
    memset(a, 0, sizeof *a);
    a->guide.cfg = 1.0;
    a->guide.cfg2 = 1.0;
    a->add_noise = 1;
    sd_sampler_params_init(&a->options);
}

static double ms_percent_to_sigma(void *ud, double percent) {
    return sd_ms_percent_to_sigma(ud, percent);
}

/* x0 of the last sampler callback (ComfyUI's x0_output), for denoised_output. */
static void keep_x0(run_state *s, const sd_tensor *den) {
    if (!s->x0 || !den) return;
    if (!sd_tensor_same_shape(den, s->x0)) { /* a resizing sampler's step */
        sd_tensor *t = sd_tensor_new(SD_F32, den->ndim, den->shape);
        if (!t) {
            s->x0_failed = 1;
            return;
        }
        sd_tensor_unref(s->x0);
        s->x0 = t;
    }
    memcpy(s->x0->data, den->data, den->nbytes);
    s->have_x0 = 1;
}

/* comfy.samplers.process_conds for the lists in use: every entry with an
 * area gets an opposite entry in each other list (lists in ComfyUI's dict
 * order, each walked to its current end, so entries added by an earlier
 * list are seen), then ControlNetApply's controls go to the other lists. */
static sd_status complete_conds(sd_value **lists, int n, sd_error *err) {
    for (int k = 0; k < n; k++) {
        if (!lists[k]) continue;
        size_t len = sd_value_list_len(lists[k]);
        for (size_t i = 0; i < len; i++)
            for (int kk = 0; kk < n; kk++)
                if (kk != k && lists[kk] &&
                    same_area_if_none(lists[kk], sd_value_list_get(lists[k], i)) != 0)
                    return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    for (int k = 1; k < n; k++) {
        if (!lists[k] || !lists[0]) continue;
        static const char *const keys[2] = {"control", "gligen"}, *const flags[2] = {"control_apply_to_uncond", NULL};
        for (int j = 0; j < 2; j++) {
            sd_value *repl = NULL;
            sd_status rc = fill_uncond(lists[0], lists[k], keys[j], flags[j], &repl, err);
            if (rc) return rc;
            if (repl) {
                sd_value_unref(lists[k]);
                lists[k] = repl;
            }
        }
    }
    return SD_OK;
}

static sd_status sample(sd_node_ctx *ctx, const sd_sample_args *a, sd_value **out,
                        sd_value **out_denoised, sd_error *err);

sd_status sd_nodes_sample(sd_node_ctx *ctx, const sd_sample_args *a, sd_value **out,
                          sd_value **out_denoised, sd_error *err) {
    *out = NULL;
    if (out_denoised) *out_denoised = NULL;
    sd_sample_args fixed = *a;
    sd_value *latent = NULL;
    sd_status rc = sd_nodes_fix_empty_latent(a->guide.ckpt, a->latent, &latent, err);
    if (rc) return rc;
    fixed.latent = latent;
    rc = sample(ctx, &fixed, out, out_denoised, err);
    sd_value_unref(latent);
    return rc;
}

static sd_status sample(sd_node_ctx *ctx, const sd_sample_args *a, sd_value **out,
                        sd_value **out_denoised, sd_error *err) {
    const sd_guide *g = &a->guide;
    sd_tensor *samples;
    sd_status rc = check_model_latent(ctx, g->ckpt, a->latent, "model", &samples, err);
    if (rc) return rc;
    const sd_ckpt_info *info = sd_checkpoint_info(g->ckpt);
    const int64_t *shape = samples->shape;
    const int64_t n = sd_tensor_numel(samples);
    const sd_sampler *smp = sd_sampler_find(a->sampler_name);
    if (!smp)
        return sd_nodes_bad_input(err, "sampler", "unknown sampler '%s'", a->sampler_name);
    if (!g->positive || (g->kind != SD_GUIDE_BASIC && !g->negative) ||
        ((g->kind == SD_GUIDE_DUAL_CFG || g->kind == SD_GUIDE_PERP_NEG) && !g->middle))
        return sd_error_set(err, SD_ERR_INVALID, "the guider lacks a conditioning");
    if (a->n_sigmas < 0 || (a->n_sigmas > 0 && !a->sigmas))
        return sd_error_set(err, SD_ERR_INVALID, "bad sigmas");
    if (a->n_sigmas == 0) { /* CFGGuider.sample returns the latent as it is */
        rc = latent_with(a->latent, NULL, out, err);
        if (!rc && out_denoised) *out_denoised = sd_value_ref(*out);
        return rc;
    }

    sd_model_sampling *ms = malloc(sizeof *ms);
    if (!ms) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_of(g->ckpt, g->patches, ms);

    int64_t *bidx = NULL;
    sd_tensor *noise = NULL, *latent_in = NULL, *mask = NULL, *concat = NULL, *x = NULL,
              *rnoise = NULL, *x0 = NULL;
    /* torch's default generator as the run leaves it: prepare_noise seeds it
     * (torch.manual_seed) and draws the noise; without noise ComfyUI's is in
     * whatever state earlier work left it, here the seed's */
    sd_rng *rng = NULL;
    sd_value *lists[3] = {NULL, NULL, NULL};
    sd_guider guider;
    sd_guide_state gs;
    sd_inpaint ip;
    int have_guider = 0, have_gs = 0, have_ip = 0;
    sd_unet_attn_record sag_rec = {0};
    /* SD3 ControlNets' VAE-encoded hints, kept for the run (cond_hint) */
    sd_control_hints *hints = sd_control_hints_new();
    if (!hints) {
        free(ms);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }

    /* noise: prepare_noise(latent, seed, batch_index), or zeros */
    if (!a->add_noise) {
        noise = sd_tensor_new(SD_F32, 4, shape);
    } else {
        sd_value *bi = sd_value_dict_get(a->latent, "batch_index");
        size_t nbi = bi && sd_value_kind_of(bi) == SD_VAL_LIST ? sd_value_list_len(bi) : 0;
        if (nbi) {
            bidx = malloc(nbi * sizeof *bidx);
            if (!bidx) {
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
                goto done;
            }
            for (size_t i = 0; i < nbi; i++) bidx[i] = sd_value_as_int(sd_value_list_get(bi, i));
        }
        rc = sd_noise_prepare_rng(a->seed, SD_RNG_PATH_AVX2, 4, shape, bidx, nbi, &noise, &rng, err);
        if (rc) {
            sd_error_at(err, NULL, NULL, "latent_image");
            goto done;
        }
    }
    if (!noise) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }

    if (!rng && !(rng = sd_rng_new(a->seed))) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }

    sd_dmodel dm;
    sd_model_ref mref = {.ckpt = g->ckpt, .loras = g->loras};
    if ((rc = sd_nodes_model_dmodel(&mref, &dm, err))) {
        sd_error_at(err, NULL, NULL, "model");
        goto done;
    }
    sd_unet *unet = dm.info.kind == SD_DMODEL_UNET ? dm.net : NULL;
    const int unclip_adm = unet ? sd_unet_get_config(unet)->adm_in_channels : 0;
    const char *const cond_names[3] = {"positive", "negative",
                                       g->kind == SD_GUIDE_PERP_NEG ? "empty_conditioning" : "middle"};
    const sd_value *given[3] = {g->positive, g->kind == SD_GUIDE_BASIC ? NULL : g->negative,
                                g->kind == SD_GUIDE_DUAL_CFG || g->kind == SD_GUIDE_PERP_NEG ? g->middle : NULL};
    const sd_sd3_config *mmdit = dm.info.kind == SD_DMODEL_MMDIT ? sd_sd3_get_config(dm.net) : NULL;
    for (int k = 0; k < 3; k++) {
        if (given[k] && (rc = check_controls(given[k], cond_names[k], unet, mmdit, err))) goto done;
        if (given[k] && (rc = check_gligen(given[k], cond_names[k], unet, err))) goto done;
    }

    /* process_latent_in */
    latent_in = sd_tensor_new(SD_F32, 4, shape);
    x = sd_tensor_new(SD_F32, 4, shape);
    if (!latent_in || !x) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    sd_latent_process_in_nonempty(info->latent_format, samples->data, latent_in->data, (size_t)n);
    sd_tensor *nm = sd_value_dict_tensor(a->latent, "noise_mask");
    if (nm && (rc = prepare_mask(nm, shape, &mask, err))) {
        sd_error_at(err, NULL, NULL, "latent_image");
        goto done;
    }
    if (info->ip2p) /* IP2P.concat_cond without an image: zeros */
        concat = sd_tensor_new(SD_F32, 4, shape);
    if ((info->inpaint && !(concat = sd_inpaint_concat(mask, latent_in, shape))) || (info->ip2p && !concat)) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }

    const float *sigmas = a->sigmas;
    int max_denoise = sd_ms_is_max_denoise(ms, sigmas[0]);
    sd_ms_noise_scaling(ms, sigmas[0], noise->data, latent_in->data, max_denoise, x->data,
                        (size_t)n);
    if (a->hooks && a->hooks->on_start)
        a->hooks->on_start(a->hooks->ud, sigmas, a->n_sigmas, noise, x);

    /* process_conds over the guider's lists: ComfyUI's dict order is
     * positive, negative (CFGGuider) or positive, middle, negative (DualCFG) */
    {
        int order[3] = {0, 1, 2}, nl = 0;
        if (g->kind == SD_GUIDE_DUAL_CFG || g->kind == SD_GUIDE_PERP_NEG) order[1] = 2, order[2] = 1;
        sd_value *ordered[3] = {NULL, NULL, NULL};
        for (int k = 0; k < 3; k++) {
            if (!given[order[k]]) continue;
            if ((rc = sd_cond_resolve(given[order[k]], shape[2], shape[3], &lists[order[k]], err))) {
                sd_error_at(err, NULL, NULL, cond_names[order[k]]);
                goto done;
            }
        }
        /* encode_model_conds: an inpainting UNet's entries with their own
         * masked image or mask get their extra channels */
        for (int k = 0; k < 3 && (info->inpaint || info->ip2p); k++) {
            sd_value *withc = NULL;
            if (!lists[k]) continue;
            if ((rc = sd_cond_concat(lists[k], info->ip2p, mask, latent_in, info->latent_format, &withc, err))) {
                sd_error_at(err, NULL, NULL, cond_names[k]);
                goto done;
            }
            sd_value_unref(lists[k]);
            lists[k] = withc;
        }
        /* encode_model_conds: an unCLIP UNet's ADM, SDXL's unCLIP pooled
         * output, entry by entry in the dict's order (each reseeds torch's
         * default generator) */
        for (int k = 0; k < 3 && (info->unclip || info->family == SD_CKPT_SDXL); k++) {
            sd_value *withy = NULL;
            if (!lists[order[k]]) continue;
            if ((rc = sd_cond_unclip(lists[order[k]], !info->unclip, unclip_adm, a->seed, rng, &withy, err))) {
                sd_error_at(err, NULL, NULL, cond_names[order[k]]);
                goto done;
            }
            sd_value_unref(lists[order[k]]);
            lists[order[k]] = withy;
        }
        for (int k = 0; k < 3; k++)
            if (lists[order[k]]) ordered[nl++] = lists[order[k]];
        rc = complete_conds(ordered, nl, err);
        /* complete_conds may have replaced lists: map them back */
        nl = 0;
        for (int k = 0; k < 3; k++)
            if (lists[order[k]]) lists[order[k]] = ordered[nl++];
        if (rc) goto done;
    }
    /* the PerpNeg node's empty conditioning: convert_cond + encode_model_conds
     * at each step in ComfyUI, outside process_conds (no area completion) */
    if (g->patches && g->patches->cfg.fn == SD_CFG_FN_PERP_NEG && !lists[2]) {
        if (g->kind != SD_GUIDE_CFG && g->kind != SD_GUIDE_BASIC) {
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "a PerpNeg MODEL with a %s guider is not supported",
                              g->kind == SD_GUIDE_DUAL_CFG ? "DualCFGGuider" : "PerpNegGuider");
            goto done;
        }
        if (!g->patches->perp_neg_empty) {
            rc = sd_error_set(err, SD_ERR_INVALID, "the PerpNeg MODEL lost its empty conditioning");
            goto done;
        }
        if ((rc = sd_cond_resolve(g->patches->perp_neg_empty, shape[2], shape[3], &lists[2], err))) {
            sd_error_at(err, NULL, NULL, "model");
            goto done;
        }
        if (info->inpaint || info->ip2p) {
            sd_value *withc = NULL;
            if ((rc = sd_cond_concat(lists[2], info->ip2p, mask, latent_in, info->latent_format, &withc, err))) {
                sd_error_at(err, NULL, NULL, "model");
                goto done;
            }
            sd_value_unref(lists[2]);
            lists[2] = withc;
        }
        if (info->unclip || info->family == SD_CKPT_SDXL) {
            sd_value *withy = NULL;
            if ((rc = sd_cond_unclip(lists[2], !info->unclip, unclip_adm, a->seed, rng, &withy, err))) {
                sd_error_at(err, NULL, NULL, "model");
                goto done;
            }
            sd_value_unref(lists[2]);
            lists[2] = withy;
        }
    }
    sd_cond_model cm = {.be = sd_checkpoint_backend(g->ckpt),
                        .dm = dm,
                        .cfg = unet ? sd_unet_get_config(unet) : NULL,
                        .ms = ms,
                        .conds = {lists[0], lists[1], lists[2]},
                        .concat = concat,
                        .image_w = shape[3] * 8,
                        .image_h = shape[2] * 8,
                        .tap = a->hooks ? a->hooks->on_model : NULL,
                        .adm_tap = a->hooks ? a->hooks->on_adm : NULL,
                        .forward_tap = a->hooks ? a->hooks->on_forward : NULL,
                        .tap_ud = a->hooks ? a->hooks->ud : NULL,
                        .unet_patches = g->patches ? &g->patches->unet : NULL,
                        .fmt = info->latent_format,
                        .unclip = info->unclip,
                        .hints = hints};
    /* SelfAttentionGuidance's record of the uncond pass, for this run */
    if (g->patches && sd_cfg_hook_needs_uncond(&g->patches->cfg)) cm.record = &sag_rec;
    sd_denoiser den;
    if (g->kind == SD_GUIDE_CFG) {
        sd_guider_init(&guider, sd_cond_model_eval, &cm, g->cfg);
        if (g->patches) guider.hook = g->patches->cfg;
        guider.skip_model = sd_cond_model_eval_skip;
        guider.skip_ud = &cm;
        have_guider = 1;
        den = sd_guider_denoiser(&guider);
    } else {
        sd_guide_state_init(&gs, g, &cm);
        have_gs = 1;
        den = sd_guide_state_denoiser(&gs);
    }
    if (mask) {
        /* ddim uses fresh noise from seed + 1 for the kept region */
        const float *inoise = noise->data;
        if (strcmp(a->sampler_name, "ddim") == 0) {
            /* inpaint_options {"random": True}: torch.manual_seed(seed + 1),
             * which the default generator continues from */
            sd_rng *r1 = NULL;
            if ((rc = sd_noise_prepare_rng(a->seed + 1, SD_RNG_PATH_AVX2, 4, shape, NULL, 0, &rnoise, &r1, err)))
                goto done;
            sd_rng_free(rng);
            rng = r1;
            inoise = rnoise->data;
        }
        sd_inpaint_init(&ip, den, latent_in->data, inoise, mask->data, n);
        ip.flow = ms->prediction == SD_PRED_CONST;
        if (g->patches && g->patches->diff_diff && a->n_sigmas > 0) {
            /* DifferentialDiffusion.forward's step range */
            float sigma_to = ms->sigma_min;
            if (sigmas[a->n_sigmas - 1] > sigma_to) sigma_to = sigmas[a->n_sigmas - 1];
            ip.diff_diff = 1;
            ip.dd_strength = g->patches->diff_diff_strength;
            ip.dd_ms = ms;
            ip.dd_ts_from = sd_ms_timestep(ms, sigmas[0]);
            ip.dd_ts_to = sd_ms_timestep(ms, sigma_to);
        }
        have_ip = 1;
        den = sd_inpaint_denoiser(&ip);
    }
    if (sd_sampler_resizes(smp) && (mask || concat)) {
        /* ComfyUI's KSamplerX0Inpaint / concat_cond fail on the new size too */
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "sampler %s changes the latent's size, which %s does not allow",
                          a->sampler_name, mask ? "a noise_mask (inpainting)" : "an inpainting or InstructPix2Pix model");
        sd_error_at(err, NULL, NULL, mask ? "latent_image" : "model");
        goto done;
    }
    if (out_denoised && !(x0 = sd_tensor_new(SD_F32, 4, shape))) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    cm.rng = rng;
    run_state st = {ctx, a->hooks, info->latent_format->name, x0, 0, 0};
    x0 = NULL; /* st owns it now */
    sd_sampler_params p = a->options;
    p.seed = a->seed;
    if (!p.percent_to_sigma) { /* the MODEL's schedule (sa_solver's tau window) */
        p.percent_to_sigma = ms_percent_to_sigma;
        p.percent_to_sigma_ud = ms;
    }
    p.flow = ms->prediction == SD_PRED_CONST; /* the samplers' CONST branches */
    p.progress = on_progress;
    p.progress_ud = &st;
    p.cancel = on_cancel;
    p.cancel_ud = &st;
    p.global_rng = rng; /* randn_like in a sampler continues prepare_noise's generator */
    rc = sd_sampler_run_resizing(smp, &den, sigmas, a->n_sigmas, &x, &p, err);
    x0 = st.x0;
    if (!rc && st.x0_failed) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (rc) goto done;

    /* the result's size (a resizing sampler's may differ from the latent's) */
    const int64_t nx = sd_tensor_numel(x);
    sd_ms_inverse_noise_scaling(ms, sd_sampler_final_sigma(smp, sigmas, a->n_sigmas), x->data, x->data,
                                (size_t)nx);
    sd_latent_process_out(info->latent_format, x->data, x->data, (size_t)nx);
    rc = latent_with(a->latent, sd_tensor_ref(x), out, err);
    if (!rc && out_denoised) {
        if (st.have_x0) {
            sd_latent_process_out(info->latent_format, x0->data, x0->data, (size_t)sd_tensor_numel(x0));
            rc = latent_with(a->latent, sd_tensor_ref(x0), out_denoised, err);
        } else { /* no step ran: ComfyUI hands out the same latent twice */
            *out_denoised = sd_value_ref(*out);
        }
        if (rc) {
            sd_value_unref(*out);
            *out = NULL;
        }
    }

done:
    sd_control_hints_free(hints);
    sd_unet_attn_record_clear(&sag_rec);
    if (have_ip) sd_inpaint_release(&ip);
    if (have_guider) sd_guider_release(&guider);
    if (have_gs) sd_guide_state_release(&gs);
    for (int k = 0; k < 3; k++) sd_value_unref(lists[k]);
    free(ms);
    free(bidx);
    sd_tensor_unref(noise);
    sd_tensor_unref(rnoise);
    sd_rng_free(rng);
    sd_tensor_unref(latent_in);
    sd_tensor_unref(mask);
    sd_tensor_unref(concat);
    sd_tensor_unref(x);
    sd_tensor_unref(x0);
    return rc;
}

/* ---- the nodes ------------------------------------------------------------------------ */

static sd_status common_inputs(sd_value *const *in, int i_model, int i_pos, int i_neg,
                               int i_latent, sd_ksample_args *a, sd_error *err) {
    sd_model_ref *model;
    sd_value *pos, *neg;
    sd_status rc = sd_nodes_in_model(in, i_model, "model", &model, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, i_pos, "positive", &pos, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, i_neg, "negative", &neg, err);
    if (rc) return rc;
    if (!in[i_latent] || sd_value_kind_of(in[i_latent]) != SD_VAL_DICT)
        return sd_nodes_bad_input(err, "latent_image", "latent_image must be a LATENT");
    a->ckpt = model->ckpt;
    a->loras = model->loras;
    a->patches = &model->patches;
    a->positive = pos;
    a->negative = neg;
    a->latent = in[i_latent];
    return SD_OK;
}

static sd_status ksampler_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                              sd_error *err) {
    sd_ksample_args a;
    sd_ksample_args_init(&a);
    sd_status rc = common_inputs(in, 0, 6, 7, 8, &a, err);
    if (rc) return rc;
    a.seed = (uint64_t)sd_value_as_int(in[1]);
    a.steps = (int)sd_value_as_int(in[2]);
    a.cfg = sd_value_as_float(in[3]);
    a.sampler_name = sd_value_as_string(in[4]);
    a.scheduler = sd_value_as_string(in[5]);
    a.denoise = sd_value_as_float(in[9]);
    return sd_nodes_common_ksampler(ctx, &a, &out[0], err);
}

static sd_status ksampler_adv_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    sd_ksample_args a;
    sd_ksample_args_init(&a);
    sd_status rc = common_inputs(in, 0, 7, 8, 9, &a, err);
    if (rc) return rc;
    const char *add_noise = sd_value_as_string(in[1]);
    const char *leftover = sd_value_as_string(in[12]);
    a.disable_noise = add_noise && strcmp(add_noise, "disable") == 0;
    a.seed = (uint64_t)sd_value_as_int(in[2]);
    a.steps = (int)sd_value_as_int(in[3]);
    a.cfg = sd_value_as_float(in[4]);
    a.sampler_name = sd_value_as_string(in[5]);
    a.scheduler = sd_value_as_string(in[6]);
    a.start_step = (int)sd_value_as_int(in[10]);
    a.last_step = (int)sd_value_as_int(in[11]);
    a.force_full_denoise = !(leftover && strcmp(leftover, "enable") == 0);
    a.denoise = 1.0;
    return sd_nodes_common_ksampler(ctx, &a, &out[0], err);
}

/* COMBO lists built from the model layer's registries. */
sd_status sd_nodes_sampler_names(const sd_env *env, sd_value **out, sd_error *err) {
    (void)env;
    sd_value *l = sd_value_list();
    const char *const *names = sd_sampler_names(NULL);
    for (size_t i = 0; l && names[i]; i++)
        if (sd_value_list_append(l, sd_value_string(names[i]))) {
            sd_value_unref(l);
            l = NULL;
        }
    if (!l) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    *out = l;
    return SD_OK;
}
sd_status sd_nodes_scheduler_names(const sd_env *env, sd_value **out, sd_error *err) {
    (void)env;
    sd_value *l = sd_value_list();
    const char *const *names = sd_schedule_names();
    for (size_t i = 0; l && names[i]; i++)
        if (sd_value_list_append(l, sd_value_string(names[i]))) {
            sd_value_unref(l);
            l = NULL;
        }
    if (!l) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    *out = l;
    return SD_OK;
}

#define SEED_MAX 18446744073709551615.0 /* 0xffffffffffffffff */

static const sd_input_def ksampler_inputs[] = {
    {.name = "model", .type = "MODEL", .tooltip = "The model used for denoising the input latent."},
    {.name = "seed", .type = SD_T_INT, .def = 0, .min = 0, .max = SEED_MAX, .has_range = 1,
     .tooltip = "The random seed used for creating the noise."},
    {.name = "steps", .type = SD_T_INT, .def = 20, .min = 1, .max = 10000, .has_range = 1,
     .tooltip = "The number of steps used in the denoising process."},
    {.name = "cfg", .type = SD_T_FLOAT, .def = 8.0, .min = 0.0, .max = 100.0, .step = 0.1, .has_range = 1,
     .tooltip = "The Classifier-Free Guidance scale balances creativity and adherence to the prompt. Higher values "
                "result in images more closely matching the prompt however too high values will negatively impact "
                "quality.", .round = 0.01},
    {.name = "sampler_name", .type = SD_T_COMBO, .options_fn = sd_nodes_sampler_names, .def_str = "euler",
     .tooltip = "The algorithm used when sampling, this can affect the quality, speed, and style of the generated "
                "output.", .no_default = 1},
    {.name = "scheduler", .type = SD_T_COMBO, .options_fn = sd_nodes_scheduler_names, .def_str = "simple",
     .tooltip = "The scheduler controls how noise is gradually removed to form the image.", .no_default = 1},
    {.name = "positive", .type = "CONDITIONING",
     .tooltip = "The conditioning describing the attributes you want to include in the image."},
    {.name = "negative", .type = "CONDITIONING",
     .tooltip = "The conditioning describing the attributes you want to exclude from the image."},
    {.name = "latent_image", .type = "LATENT", .tooltip = "The latent image to denoise."},
    {.name = "denoise", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1,
     .tooltip = "The amount of denoising applied, lower values will maintain the structure of the initial image "
                "allowing for image to image sampling."},
    {0}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};

const sd_node_def sd_node_KSampler = {
    .version = 1,
    .class_type = "KSampler",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("The denoised latent."),
    .description = "Uses the provided model, positive and negative conditioning to denoise the latent image.",
    .display_name = "KSampler",
    .category = "sampling",
    .help = "Denoises a latent with the model, guided by positive and negative "
            "conditioning (CFG); denoise < 1 keeps part of the input latent.",
    .inputs = ksampler_inputs,
    .outputs = latent_out,
    .run = ksampler_run,
};

static const char *const enable_disable[] = {"enable", "disable", NULL};
static const char *const disable_enable[] = {"disable", "enable", NULL};

static const sd_input_def ksampler_adv_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "add_noise", .type = SD_T_COMBO, .options = enable_disable, .def_str = "enable", .no_default = 1},
    {.name = "noise_seed", .type = SD_T_INT, .def = 0, .min = 0, .max = SEED_MAX, .has_range = 1},
    {.name = "steps", .type = SD_T_INT, .def = 20, .min = 1, .max = 10000, .has_range = 1},
    {.name = "cfg", .type = SD_T_FLOAT, .def = 8.0, .min = 0.0, .max = 100.0, .step = 0.1, .has_range = 1,
     .round = 0.01},
    {.name = "sampler_name", .type = SD_T_COMBO, .options_fn = sd_nodes_sampler_names, .def_str = "euler",
     .no_default = 1},
    {.name = "scheduler", .type = SD_T_COMBO, .options_fn = sd_nodes_scheduler_names, .def_str = "simple",
     .no_default = 1},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "latent_image", .type = "LATENT"},
    {.name = "start_at_step", .type = SD_T_INT, .def = 0, .min = 0, .max = 10000, .has_range = 1},
    {.name = "end_at_step", .type = SD_T_INT, .def = 10000, .min = 0, .max = 10000, .has_range = 1},
    {.name = "return_with_leftover_noise", .type = SD_T_COMBO, .options = disable_enable, .def_str = "disable",
     .no_default = 1},
    {0}};

const sd_node_def sd_node_KSamplerAdvanced = {
    .version = 1,
    .class_type = "KSamplerAdvanced",
    .python_module = "nodes",
    .display_name = "KSampler (Advanced)",
    .category = "sampling",
    .help = "KSampler with a step range (start_at_step, end_at_step), optional noise "
            "and leftover noise, for base + refiner chains.",
    .inputs = ksampler_adv_inputs,
    .outputs = latent_out,
    .run = ksampler_adv_run,
};

const sd_node_def *const sd_nodes_sampling[] = {&sd_node_KSampler, &sd_node_KSamplerAdvanced,
                                                NULL};
