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
 * N / batched latents each (broadcast_image_to): within a chunk item i takes
 * image i % b (the first per-chunk items when b is larger), and the chunks
 * repeat that. */
static sd_bt *batch_hint(sd_backend *be, const sd_tensor *image, int64_t n, int batched,
                         int64_t h, int64_t w, sd_error *err) {
    sd_tensor *r = NULL;
    if (sd_controlnet_hint(image, w, h, &r, err)) return NULL;
    int64_t b = r->shape[0];
    int64_t per = batched > 0 && n % batched == 0 ? n / batched : n;
    if (b != n || per != n) {
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
    memset(out, 0, sizeof *out);
    sd_status rc = SD_OK;
    int n_out = 0;
    for (int k = 0; k < n; k++) {
        const sd_control_link *l = &links[k];
        if (!l->cn || !l->image)
            return sd_error_set(err, SD_ERR_INVALID, "control link %d has no ControlNet or image", k);
        if (unet && (rc = sd_controlnet_check_fit(l->cn, unet, err))) goto fail;
        /* timestep_range = (percent_to_sigma(start), percent_to_sigma(end)) */
        double s_hi = sd_ms_percent_to_sigma(ms, l->start_percent);
        double s_lo = sd_ms_percent_to_sigma(ms, l->end_percent);
        if (sigma > s_hi || sigma < s_lo) continue;
        sd_bt *hint = batch_hint(l->cn->be, l->image, x_in->shape[0], batched,
                                 8 * x_in->shape[2], 8 * x_in->shape[3], err);
        if (!hint) {
            rc = err && err->code ? err->code : SD_ERR_NOMEM;
            goto fail;
        }
        sd_controlnet_result r;
        rc = sd_controlnet_forward_type(l->cn, x_in, timesteps, hint, context, y, l->union_type - 1, &r, err);
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
