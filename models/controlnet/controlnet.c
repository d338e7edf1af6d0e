/* controlnet.c - ControlNet forward (cldm.ControlNet.forward), hint
 * preparation and chain evaluation (comfy.controlnet get_control /
 * control_merge). */
#include "models/controlnet/controlnet_internal.h"
#include "models/image/imageops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

static void tap(sd_controlnet *cn, const char *name, const sd_bt *t) {
    if (cn->tap && t) cn->tap(cn->tap_user, name, t);
}

void sd_controlnet_result_free(sd_controlnet_result *r) {
    if (!r) return;
    for (int i = 0; i < SD_UNET_MAX_BLOCKS; i++) sd_bt_free(r->output[i]);
    sd_bt_free(r->middle);
    memset(r, 0, sizeof *r);
}

static sd_bt *layer_forward(const unet_layer *l, sd_bt *x, sd_bt *emb_silu, sd_bt *context) {
    switch (l->kind) {
    case UL_RES: return sd_unet_res_forward(l->res, x, emb_silu);
    case UL_ST: return sd_unet_st_forward(l->st, x, context, NULL);
    case UL_CONV: return sd_op_conv2d(x, l->conv_w, l->conv_b, 1, 1, 1);
    case UL_DOWN: return sd_op_conv2d(x, l->conv_w, l->conv_b, 2, 1, 1);
    case UL_UP: return NULL; /* not in an encoder */
    }
    return NULL;
}

static sd_bt *block_forward(const unet_block *b, sd_bt *x, sd_bt *emb_silu, sd_bt *context) {
    sd_bt *h = NULL;
    for (int i = 0; i < b->n; i++)
        if (!step(&h, layer_forward(&b->layers[i], h ? h : x, emb_silu, context))) return NULL;
    return h;
}

/* SiLU(time_embed(t_emb) [+ add] [+ label_emb(y)]): what the res blocks
 * take (add: a Union ControlNet's control_add_embedding, [1, dim]). */
static sd_bt *embed(sd_controlnet *cn, const float *timesteps, int64_t n, sd_bt *add, sd_bt *y,
                    sd_error *err) {
    sd_unet *u = cn->enc;
    int mc = u->cfg.model_channels;
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, n, mc, 0, 0);
    if (!t) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory (timestep embedding)");
        return NULL;
    }
    sd_unet_timestep_embedding(timesteps, (int)n, mc, sd_tensor_f32(t));
    sd_bt *e = sd_bt_from_host(cn->be, t, SD_F32);
    sd_tensor_unref(t);
    if (!e) return NULL;
    if (!step(&e, sd_op_linear(e, u->time_w0, u->time_b0))) return NULL;
    if (!step(&e, sd_op_silu(e))) return NULL;
    if (!step(&e, sd_op_linear(e, u->time_w2, u->time_b2))) return NULL;
    if (add) {
        int64_t d[1] = {add->shape[1]};
        sd_bt *a = sd_bt_view(add, 1, d);
        if (!a || !step(&e, sd_op_add(e, a))) {
            sd_bt_free(a);
            return NULL;
        }
        sd_bt_free(a);
    }
    if (y) {
        sd_bt *l = sd_op_linear(y, u->label_w0, u->label_b0);
        if (l) step(&l, sd_op_silu(l));
        if (l) step(&l, sd_op_linear(l, u->label_w2, u->label_b2));
        if (!l) {
            sd_bt_free(e);
            return NULL;
        }
        step(&e, sd_op_add(e, l));
        sd_bt_free(l);
        if (!e) return NULL;
    }
    step(&e, sd_op_silu(e));
    return e;
}

static sd_status check(sd_controlnet *cn, sd_bt *x, const float *ts, sd_bt *hint, sd_bt *context,
                       sd_bt *y, sd_error *err) {
    const sd_unet_config *c = &cn->enc->cfg;
    if (!x || x->ndim != 4 || x->shape[1] != c->in_channels)
        return sd_error_set(err, SD_ERR_INVALID, "ControlNet input x must be [N, %d, h, w]", c->in_channels);
    int64_t n = x->shape[0];
    if (!ts) return sd_error_set(err, SD_ERR_INVALID, "ControlNet forward: timesteps missing");
    if (!hint || hint->ndim != 4 || hint->shape[1] != cn->hint_ch || hint->shape[2] != 8 * x->shape[2] ||
        hint->shape[3] != 8 * x->shape[3] || hint->shape[0] != n)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ControlNet hint must be [%lld, %d, %lld, %lld] (latent size x 8)", (long long)n,
                            cn->hint_ch, (long long)(8 * x->shape[2]), (long long)(8 * x->shape[3]));
    if (!context || context->ndim != 3 || context->shape[0] != n || context->shape[2] != c->context_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "ControlNet context must be [%lld, L, %d] (a ControlNet for another model?)",
                            (long long)n, c->context_dim);
    if (c->adm_in_channels > 0 && (!y || y->ndim != 2 || y->shape[0] != n || y->shape[1] != c->adm_in_channels))
        return sd_error_set(err, SD_ERR_INVALID, "ControlNet (SDXL) needs y of shape [%lld, %d]", (long long)n,
                            c->adm_in_channels);
    if (c->adm_in_channels == 0 && y)
        return sd_error_set(err, SD_ERR_INVALID, "ControlNet has no label_emb, but a y vector was given");
    return SD_OK;
}

sd_status sd_controlnet_forward(sd_controlnet *cn, sd_bt *x, const float *timesteps, sd_bt *hint,
                                sd_bt *context, sd_bt *y, sd_controlnet_result *out,
                                sd_error *err) {
    return sd_controlnet_forward_type(cn, x, timesteps, hint, context, y, -1, out, err);
}

sd_status sd_controlnet_forward_type(sd_controlnet *cn, sd_bt *x, const float *timesteps, sd_bt *hint,
                                     sd_bt *context, sd_bt *y, int control_type,
                                     sd_controlnet_result *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    sd_error_clear(err);
    if (cn->mmdit)
        return sd_error_set(err, SD_ERR_INVALID, "an SD3 ControlNet runs through sd_sd3_cn_forward");
    sd_status rc = check(cn, x, timesteps, hint, context, y, err);
    if (rc) return rc;
    if (cn->n_types && control_type >= cn->n_types) {
        const char *name = control_type < 8 ? sd_controlnet_union_types[control_type] : "?";
        return sd_error_set(err, SD_ERR_INVALID,
                            "Control type %s(%d) is out of range for the number of control types(%d) "
                            "supported: consider the ProMax ControlNet Union model "
                            "(https://huggingface.co/xinsir/controlnet-union-sdxl-1.0)",
                            name, control_type, cn->n_types);
    }
    sd_backend_clear_error(cn->be);
    sd_unet *u = cn->enc;
    sd_bt *emb = NULL, *g = NULL, *h = NULL, *add = NULL;
    char nm[48];

    /* Union: control_add_embedding joins the time embedding (for "auto"
     * too), before label_emb, as ComfyUI adds it */
    if (cn->n_types && !(add = sd_cn_union_add_embedding(cn, control_type))) goto fail;
    emb = embed(cn, timesteps, x->shape[0], add, y, err);
    sd_bt_free(add);
    if (!emb) goto fail;
    /* guided_hint: 8 convs with SiLU between (not after the last) */
    for (int k = 0; k < cn->n_hint; k++) {
        int s = cn->hint_stride[k];
        if (!step(&g, sd_op_conv2d(g ? g : hint, cn->hint_w[k], cn->hint_b[k], s, 1, 1))) goto fail;
        if (k + 1 < cn->n_hint && !step(&g, sd_op_silu(g))) goto fail;
    }
    /* Union with a type set: union_controlnet_merge (hint encoder output +
     * the type's projected token, per batch item) */
    if (cn->n_types && control_type >= 0 && !step(&g, sd_cn_union_merge(cn, g, control_type))) goto fail;
    tap(cn, "guided_hint", g);

    for (int i = 0; i < u->n_in; i++) {
        if (!step(&h, block_forward(&u->in[i], h ? h : x, emb, context))) goto fail;
        if (i == 0) {
            if (h->shape[2] != g->shape[2] || h->shape[3] != g->shape[3]) {
                rc = sd_error_set(err, SD_ERR_INVALID, "ControlNet hint does not reach the latent size");
                goto fail_rc;
            }
            if (!step(&h, sd_op_add(h, g))) goto fail;
            sd_bt_free(g);
            g = NULL;
        }
        out->output[i] = sd_op_conv2d(h, cn->zero_w[i], cn->zero_b[i], 1, 0, 0);
        if (!out->output[i]) goto fail;
        snprintf(nm, sizeof nm, "output.%d", i);
        tap(cn, nm, out->output[i]);
    }
    out->n = u->n_in;
    if (!step(&h, block_forward(&u->middle, h, emb, context))) goto fail;
    out->middle = sd_op_conv2d(h, cn->mid_w, cn->mid_b, 1, 0, 0);
    if (!out->middle) goto fail;
    tap(cn, "middle", out->middle);
    sd_bt_free(h);
    sd_bt_free(emb);
    return SD_OK;

fail:
    rc = sd_backend_take_error(cn->be, err);
    if (rc == SD_OK)
        rc = err && err->code ? err->code
                              : sd_error_set(err, SD_ERR_INTERNAL, "ControlNet forward failed without an error");
    sd_error_prefix(err, "ControlNet forward");
fail_rc:
    sd_bt_free(h);
    sd_bt_free(g);
    sd_bt_free(emb);
    sd_controlnet_result_free(out);
    return rc;
}

sd_status sd_controlnet_hint(const sd_tensor *image, int64_t width, int64_t height, sd_tensor **out,
                             sd_error *err) {
    *out = NULL;
    if (!image || image->ndim != 4 || image->dtype != SD_F32)
        return sd_error_set(err, SD_ERR_INVALID, "ControlNet hint image must be an F32 IMAGE [B, H, W, C]");
    sd_tensor *nchw = sd_imageops_nhwc_to_nchw(image);
    if (!nchw) return sd_error_set(err, SD_ERR_NOMEM, "out of memory preparing the ControlNet hint");
    if (nchw->shape[2] == height && nchw->shape[3] == width) {
        *out = nchw;
        return SD_OK;
    }
    sd_status rc = sd_imageops_upscale(nchw, width, height, SD_UPSCALE_NEAREST_EXACT, SD_CROP_CENTER, out, err);
    sd_tensor_unref(nchw);
    return rc;
}

/* ---- chains --------------------------------------------------------------------- */

void sd_control_residuals_free(sd_control_residuals *r) {
    if (!r) return;
    for (int i = 0; i < SD_UNET_MAX_BLOCKS; i++) sd_bt_free(r->skip[i]);
    sd_bt_free(r->middle);
    for (int i = 0; i < r->n_dit_own; i++) sd_bt_free(r->dit_own[i]);
    memset(r, 0, sizeof *r);
}

/* acc (+)= s * t; frees nothing of t. */
static int accumulate(sd_bt **acc, sd_bt *t, float s) {
    sd_bt *scaled = sd_op_scale(t, s);
    if (!scaled) return 0;
    if (!*acc) {
        *acc = scaled;
        return 1;
    }
    int ok = step(acc, sd_op_add(*acc, scaled));
    sd_bt_free(scaled);
    return ok;
}

/* The hint for x's batch and size: [N, C, 8h, 8w] for `batched` chunks of
 * N / batched latents each. A hint batch b equal to N is used as it is;
 * otherwise (broadcast_image_to, which get_control calls only when the
 * batches differ) within a chunk item i takes image i % b (the first
 * per-chunk items when b is larger), and the chunks repeat that. */
static sd_bt *broadcast_hint(sd_backend *be, sd_tensor *r, int64_t n, int batched, sd_error *err);

static sd_bt *batch_hint(sd_backend *be, const sd_tensor *image, int64_t n, int batched,
                         int64_t h, int64_t w, sd_error *err) {
    sd_tensor *r = NULL;
    if (sd_controlnet_hint(image, w, h, &r, err)) return NULL;
    return broadcast_hint(be, r, n, batched, err);
}

/* r [b, C, h, w] (the reference is taken) laid out for the batch and uploaded. */
static sd_bt *broadcast_hint(sd_backend *be, sd_tensor *r, int64_t n, int batched, sd_error *err) {
    int64_t b = r->shape[0], h = r->shape[2], w = r->shape[3];
    int64_t per = batched > 0 && n % batched == 0 ? n / batched : n;
    if (b != n) {
        sd_tensor *rep = sd_tensor_new4(SD_F32, 4, n, r->shape[1], h, w);
        if (!rep) {
            sd_tensor_unref(r);
            sd_error_set(err, SD_ERR_NOMEM, "out of memory preparing the ControlNet hint");
            return NULL;
        }
        size_t item = r->nbytes / (size_t)b;
        for (int64_t i = 0; i < n; i++)
            memcpy((char *)rep->data + (size_t)i * item,
                   (char *)r->data + (size_t)((i % per) % b) * item, item);
        sd_tensor_unref(r);
        r = rep;
    }
    sd_bt *bt = sd_bt_from_host(be, r, SD_F32);
    sd_tensor_unref(r);
    if (!bt) {
        sd_status rc = sd_backend_take_error(be, err);
        if (!rc) sd_error_set(err, SD_ERR_NOMEM, "out of memory uploading the ControlNet hint");
    }
    return bt;
}

sd_status sd_control_chain_eval(const sd_control_link *links, int n, const sd_model_sampling *ms,
                                const sd_unet_config *unet, float sigma, sd_bt *x_in,
                                const float *timesteps, sd_bt *context, sd_bt *y,
                                sd_control_residuals *out, sd_error *err) {
    return sd_control_chain_eval_batched(links, n, ms, unet, sigma, x_in, 1, timesteps, context,
                                         y, out, err);
}

sd_status sd_control_chain_eval_batched(const sd_control_link *links, int n,
                                        const sd_model_sampling *ms, const sd_unet_config *unet,
                                        float sigma, sd_bt *x_in, int batched,
                                        const float *timesteps, sd_bt *context, sd_bt *y,
                                        sd_control_residuals *out, sd_error *err) {
    sd_control_call call = {.ms = ms, .unet = unet, .sigma = sigma, .x_in = x_in, .batched = batched,
                            .timesteps = timesteps, .context = context, .y = y};
    return sd_control_chain_run(links, n, &call, out, err);
}

/* ---- SD3 ControlNets ---------------------------------------------------------------- */

typedef struct hint_entry {
    const void *key;
    int64_t h, w;
    sd_tensor *t;
} hint_entry;

struct sd_control_hints {
    int n, cap;
    hint_entry *e;
};

sd_control_hints *sd_control_hints_new(void) { return calloc(1, sizeof(sd_control_hints)); }

void sd_control_hints_free(sd_control_hints *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) sd_tensor_unref(h->e[i].t);
    free(h->e);
    free(h);
}

/* latent_formats.SD3().scale_factor; InstantX's copy has shift 0, SD3.5's 0.0609 */
#define SD3_HINT_SCALE 1.5305f

sd_status sd_control_mmdit_hint(const sd_control_link *l, sd_control_hints *hints, int64_t h, int64_t w,
                                sd_tensor **out, sd_error *err) {
    *out = NULL;
    for (int i = 0; hints && l->key && i < hints->n; i++)
        if (hints->e[i].key == l->key && hints->e[i].h == h && hints->e[i].w == w) {
            *out = sd_tensor_ref(hints->e[i].t);
            return SD_OK;
        }
    if (!l->vae)
        return sd_error_set(err, SD_ERR_INVALID,
                            "This Controlnet needs a VAE but none was provided, please use a ControlNetApply "
                            "node with a VAE input and connect it.");
    int ch = sd_sd3_cn_hint_channels(l->cn->mmdit);
    int E = sd_vae_get_config(l->vae)->embed_dim;
    int ones = sd_controlnet_concat_mask(l->cn); /* the mask channel after the latent */
    if (E + ones != ch)
        return sd_error_set(err, SD_ERR_INVALID,
                            "the VAE's latent has %d channels, the SD3 ControlNet's hint %d (a VAE for another "
                            "model?)",
                            E, ch);
    /* common_upscale to latent size x compression (1 x the VAE's 8), encode */
    sd_tensor *px = NULL, *nhwc = NULL, *lat = NULL;
    sd_status rc = sd_controlnet_hint(l->image, 8 * w, 8 * h, &px, err);
    int ctype = sd_sd3_cn_control_type(l->cn->mmdit);
    if (!rc && (ctype == 1 || ctype == 2)) { /* ComfyUI's preprocess_image: canny / depth */
        float *pv = sd_tensor_f32(px);
        for (int64_t i = 0, n = sd_tensor_numel(px); i < n; i++)
            pv[i] = ctype == 1 ? pv[i] * 255.0f * 0.5f + 0.5f : 1.0f - pv[i];
    }
    if (!rc && !(nhwc = sd_imageops_nchw_to_nhwc(px))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_tensor_unref(px);
    if (!rc) rc = sd_vae_encode(l->vae, nhwc, &lat, err);
    sd_tensor_unref(nhwc);
    if (rc) {
        sd_error_prefix(err, "encoding the ControlNet hint");
        return rc;
    }
    if (lat->ndim != 4 || lat->shape[2] != h || lat->shape[3] != w) {
        sd_tensor_unref(lat);
        return sd_error_set(err, SD_ERR_INVALID, "the VAE's latent of the hint is not %lldx%lld", (long long)h,
                            (long long)w);
    }
    int64_t B = lat->shape[0], plane = h * w;
    float shift = sd_sd3_cn_hint_shift(l->cn->mmdit);
    sd_tensor *mc = NULL;
    if (ones && (rc = sd_controlnet_mask_channel(l->extra_concat, B, h, w, &mc, err))) {
        sd_tensor_unref(lat);
        sd_error_prefix(err, "the ControlNet's mask channel");
        return rc;
    }
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, B, ch, h, w);
    if (!t) {
        sd_tensor_unref(lat), sd_tensor_unref(mc);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    const float *lv = lat->data, *mv = mc ? mc->data : NULL;
    float *tv = t->data;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < E * plane; i++)
            tv[b * ch * plane + i] = (lv[b * E * plane + i] - shift) * SD3_HINT_SCALE;
        if (mv) memcpy(tv + (b * ch + E) * plane, mv + b * plane, (size_t)plane * sizeof *tv);
    }
    sd_tensor_unref(lat), sd_tensor_unref(mc);
    if (hints && l->key) {
        if (hints->n == hints->cap) {
            int cap = hints->cap ? 2 * hints->cap : 4;
            hint_entry *e = realloc(hints->e, (size_t)cap * sizeof *e);
            if (!e) {
                sd_tensor_unref(t);
                return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            }
            hints->e = e;
            hints->cap = cap;
        }
        hints->e[hints->n++] = (hint_entry){l->key, h, w, sd_tensor_ref(t)};
    }
    *out = t;
    return SD_OK;
}

/* The list of entries after adding link l's block outputs r[] (strength
 * s): entry j = prev[j] + s * r[block(j)]; consecutive entries with the
 * same previous tensor and the same block share one tensor. out->dit and
 * dit_own are replaced; tensors no entry keeps are freed. */
static int merge_dit(sd_control_residuals *out, const sd_sd3_cn *cn, sd_bt **r, float s) {
    int nb = sd_sd3_cn_n_blocks(cn), nk = sd_sd3_cn_n_outputs(cn);
    int n = out->n_dit > nk ? out->n_dit : nk;
    sd_bt *scaled[SD_CONTROL_MAX_DIT] = {0}, *next[SD_CONTROL_MAX_DIT] = {0};
    int ok = 1;
    /* strength once per block output (control_merge's applied_to set) */
    for (int i = 0; i < nb && ok; i++) ok = (scaled[i] = sd_op_scale(r[i], s)) != NULL;
    for (int j = 0; j < n && ok; j++) {
        sd_bt *a = j < out->n_dit ? out->dit[j] : NULL;
        int b = j < nk ? sd_sd3_cn_output_block(cn, j) : -1;
        if (j > 0 && a == (j - 1 < out->n_dit ? out->dit[j - 1] : NULL) &&
            b == (j - 1 < nk ? sd_sd3_cn_output_block(cn, j - 1) : -1)) {
            next[j] = next[j - 1];
        } else if (b < 0) {
            next[j] = a;
        } else if (!a) {
            next[j] = scaled[b];
        } else {
            ok = (next[j] = sd_op_add(a, scaled[b])) != NULL;
        }
    }
    /* what the new list keeps: every distinct tensor of next[] */
    sd_bt *own[SD_CONTROL_MAX_DIT];
    int n_own = 0;
    for (int j = 0; j < n && ok; j++)
        if (next[j] && (n_own == 0 || own[n_own - 1] != next[j])) own[n_own++] = next[j];
    /* free what nothing keeps: old entries, scaled outputs, and on failure
     * the new sums */
    sd_bt *cand[3 * SD_CONTROL_MAX_DIT];
    int nc = 0;
    for (int i = 0; i < out->n_dit_own; i++) cand[nc++] = out->dit_own[i];
    for (int i = 0; i < nb; i++) cand[nc++] = scaled[i];
    for (int j = 0; j < n; j++) {
        int seen = 0;
        for (int k = 0; k < nc && !seen; k++) seen = cand[k] == next[j];
        if (next[j] && !seen) cand[nc++] = next[j];
    }
    for (int k = 0; k < nc; k++) {
        int kept = 0;
        for (int i = 0; ok && i < n_own && !kept; i++) kept = own[i] == cand[k];
        if (!kept && (ok || k >= out->n_dit_own)) sd_bt_free(cand[k]);
    }
    if (!ok) return 0; /* out still holds its old entries */
    memcpy(out->dit, next, sizeof next);
    out->n_dit = n;
    memcpy(out->dit_own, own, (size_t)n_own * sizeof *own);
    out->n_dit_own = n_own;
    return 1;
}

/* One SD3 ControlNet link on the call. */
static sd_status run_mmdit(const sd_control_link *l, const sd_control_call *c, sd_control_residuals *out,
                           sd_error *err) {
    sd_sd3_cn *cn = l->cn->mmdit;
    sd_backend *be = l->cn->be;
    sd_tensor *lat = NULL;
    sd_status rc = sd_control_mmdit_hint(l, c->hints, c->x_in->shape[2], c->x_in->shape[3], &lat, err);
    if (rc) return rc;
    sd_bt *hint = broadcast_hint(be, lat, c->x_in->shape[0], c->batched, err);
    if (!hint) return err && err->code ? err->code : SD_ERR_NOMEM;
    sd_bt *r[SD_SD3_MAX_DEPTH] = {0};
    rc = sd_sd3_cn_forward(cn, c->mmdit_net, c->x_in, c->timesteps, hint, c->context, c->y, r, err);
    sd_bt_free(hint);
    if (rc) return rc;
    int ok = merge_dit(out, cn, r, (float)l->strength);
    for (int i = 0; i < sd_sd3_cn_n_blocks(cn); i++) sd_bt_free(r[i]);
    if (!ok) {
        rc = sd_backend_take_error(be, err);
        if (!rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory summing ControlNet outputs");
    }
    return rc;
}

sd_status sd_control_chain_run(const sd_control_link *links, int n, const sd_control_call *call,
                               sd_control_residuals *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    sd_status rc = SD_OK;
    int n_out = 0;
    for (int k = 0; k < n; k++) {
        const sd_control_link *l = &links[k];
        if (!l->cn || !l->image)
            return sd_error_set(err, SD_ERR_INVALID, "control link %d has no ControlNet or image", k);
        if (call->unet && (rc = sd_controlnet_check_fit(l->cn, call->unet, err))) goto fail;
        if (call->mmdit && (rc = sd_controlnet_check_fit_mmdit(l->cn, call->mmdit, err))) goto fail;
        /* timestep_range = (percent_to_sigma(start), percent_to_sigma(end)) */
        double s_hi = sd_ms_percent_to_sigma(call->ms, l->start_percent);
        double s_lo = sd_ms_percent_to_sigma(call->ms, l->end_percent);
        if (call->sigma > s_hi || call->sigma < s_lo) continue;
        if (l->cn->mmdit) {
            if ((rc = run_mmdit(l, call, out, err))) goto fail;
            out->active++;
            continue;
        }
        sd_bt *hint = batch_hint(l->cn->be, l->image, call->x_in->shape[0], call->batched,
                                 8 * call->x_in->shape[2], 8 * call->x_in->shape[3], err);
        if (!hint) {
            rc = err && err->code ? err->code : SD_ERR_NOMEM;
            goto fail;
        }
        sd_controlnet_result r;
        rc = sd_controlnet_forward_type(l->cn, call->x_in, call->timesteps, hint, call->context, call->y,
                                        l->union_type - 1, &r, err);
        sd_bt_free(hint);
        if (rc) goto fail;
        float s = (float)l->strength;
        int ok = 1;
        for (int i = 0; ok && i < r.n; i++) ok = accumulate(&out->skip[i], r.output[i], s);
        if (ok) ok = accumulate(&out->middle, r.middle, s);
        if (r.n > n_out) n_out = r.n;
        sd_controlnet_result_free(&r);
        if (!ok) {
            rc = sd_backend_take_error(l->cn->be, err);
            if (!rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory summing ControlNet residuals");
            goto fail;
        }
        out->active++;
    }
    out->control.middle = out->middle;
    out->control.n_skip = n_out;
    out->control.skip = out->skip;
    return SD_OK;
fail:
    sd_control_residuals_free(out);
    return rc;
}
