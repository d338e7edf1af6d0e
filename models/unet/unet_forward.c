/* unet_forward.c - UNetModel.forward: embeddings, input blocks (saving
 * skips), middle block, output blocks (popping skips), out.
 *
 * Memory: only the skip stack lives across blocks; every other intermediate
 * is freed as soon as the next one exists. */
#include "models/unet/unet_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

static void tap(sd_unet *u, const char *name, const sd_bt *t) {
    if (u->tap && t) u->tap(u->tap_user, name, t);
}

/* Forward of one layer; x borrowed. target_h/w: size the Upsample must
 * reach (ComfyUI passes the next skip's shape so odd sizes round-trip). */

static sd_bt *layer_forward(const unet_layer *l, sd_bt *x, sd_bt *emb_silu, sd_bt *context,
                            int64_t target_h, int64_t target_w, const unet_block_at *at) {
    switch (l->kind) {
    case UL_RES: return sd_unet_res_forward(l->res, x, emb_silu);
    case UL_ST: {
        sd_bt *h = sd_unet_st_forward(l->st, x, context, at);
        if (at && at->tindex) (*at->tindex)++;
        return h;
    }
    case UL_CONV: return sd_op_conv2d(x, l->conv_w, l->conv_b, 1, 1, 1);
    case UL_DOWN: return sd_op_conv2d(x, l->conv_w, l->conv_b, 2, 1, 1);
    case UL_UP: {
        /* a target not within one of twice the input (a skip resized by
         * PatchModelAddDownscale): ComfyUI's interpolate to that size */
        if ((target_h > 0 && (target_h > 2 * x->shape[2] || target_h < 2 * x->shape[2] - 1)) ||
            (target_w > 0 && (target_w > 2 * x->shape[3] || target_w < 2 * x->shape[3] - 1))) {
            sd_bt *h = sd_unet_nearest_resize(x, target_h > 0 ? target_h : 2 * x->shape[2],
                                              target_w > 0 ? target_w : 2 * x->shape[3]);
            if (h) step(&h, sd_op_conv2d(h, l->conv_w, l->conv_b, 1, 1, 1));
            return h;
        }
        sd_bt *h = sd_op_upsample_nearest2x(x);
        /* Nearest resize of h to 2h-1 picks the same rows as a crop of the
         * x2 upsample (floor(i*h/(2h-1)) == floor(i/2)), so crop. */
        if (h && target_h > 0 && target_h < h->shape[2]) step(&h, sd_op_slice(h, 2, 0, target_h));
        if (h && target_w > 0 && target_w < h->shape[3]) step(&h, sd_op_slice(h, 3, 0, target_w));
        if (h) step(&h, sd_op_conv2d(h, l->conv_w, l->conv_b, 1, 1, 1));
        return h;
    }
    }
    return NULL;
}

/* Run block b on h (borrowed) -> new tensor. name: "input_blocks.3" etc.,
 * each layer is also tapped as "<name>.<layer>". */
static sd_bt *block_forward(sd_unet *u, const unet_block *b, const char *name, sd_bt *h_in,
                            sd_bt *emb_silu, sd_bt *context, int64_t th, int64_t tw, const unet_block_at *at) {
    sd_bt *h = NULL;
    char nm[96];
    for (int i = 0; i < b->n; i++) {
        sd_bt *next = layer_forward(&b->layers[i], h ? h : h_in, emb_silu, context, th, tw, at);
        if (!step(&h, next)) return NULL;
        if (u->tap) {
            snprintf(nm, sizeof nm, "%s.%d", name, i);
            tap(u, nm, h);
        }
    }
    tap(u, name, h);
    return h;
}

static int same_shape(const sd_bt *a, const sd_bt *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static void shape_str(const sd_bt *t, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

/* h + residual when residual is given; checks the shape (a mismatched
 * ControlNet is a user error, not a crash). Frees h. */
static sd_status add_control(sd_bt **h, sd_bt *res, const char *where, sd_error *err) {
    if (!res) return SD_OK;
    if (!same_shape(*h, res)) {
        char a[96], b[96];
        shape_str(res, a, sizeof a);
        shape_str(*h, b, sizeof b);
        return sd_error_set(err, SD_ERR_INVALID, "UNet control residual for %s has shape %s, expected %s",
                            where, a, b);
    }
    step(h, sd_op_add(*h, res));
    return SD_OK;
}

static sd_status check_inputs(const sd_unet *u, sd_bt *x, const float *timesteps, sd_bt *context,
                              sd_bt *y, const sd_unet_control *control, sd_error *err) {
    const sd_unet_config *c = &u->cfg;
    if (!x || x->ndim != 4 || x->shape[1] != c->in_channels)
        return sd_error_set(err, SD_ERR_INVALID, "UNet input x must be [N, %d, H, W]", c->in_channels);
    int64_t n = x->shape[0];
    if (!timesteps) return sd_error_set(err, SD_ERR_INVALID, "UNet forward: timesteps missing");
    if (c->context_dim > 0 &&
        (!context || context->ndim != 3 || context->shape[0] != n || context->shape[2] != c->context_dim))
        return sd_error_set(err, SD_ERR_INVALID, "UNet context must be [%lld, L, %d]", (long long)n,
                            c->context_dim);
    if (c->adm_in_channels > 0 &&
        (!y || y->ndim != 2 || y->shape[0] != n || y->shape[1] != c->adm_in_channels))
        return sd_error_set(err, SD_ERR_INVALID, "UNet (SDXL) needs y of shape [%lld, %d]", (long long)n,
                            c->adm_in_channels);
    if (c->adm_in_channels == 0 && y)
        return sd_error_set(err, SD_ERR_INVALID, "UNet has no label_emb, but a y vector was given");
    if (control && (control->n_skip > u->n_in || control->n_input > u->n_in))
        return sd_error_set(err, SD_ERR_INVALID, "UNet control has %d skip / %d input residuals, the model has %d input blocks",
                            control->n_skip, control->n_input, u->n_in);
    return SD_OK;
}

/* emb = time_embed(t_emb) [+ label_emb(y)]; returns SiLU(emb), which is all
 * the res blocks use (emb_layers = SiLU + Linear). */
static sd_bt *embed(sd_unet *u, const float *timesteps, int64_t n, sd_bt *y, sd_error *err) {
    int mc = u->cfg.model_channels;
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, n, mc, 0, 0);
    if (!t) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory (timestep embedding)");
        return NULL;
    }
    sd_unet_timestep_embedding(timesteps, (int)n, mc, sd_tensor_f32(t));
    sd_bt *e = sd_bt_from_host(u->be, t, SD_F32);
    sd_tensor_unref(t);
    if (!e) return NULL;
    tap(u, "t_emb", e);
    if (!step(&e, sd_op_linear(e, u->time_w0, u->time_b0))) return NULL;
    if (!step(&e, sd_op_silu(e))) return NULL;
    if (!step(&e, sd_op_linear(e, u->time_w2, u->time_b2))) return NULL;
    tap(u, "time_embed", e);
    if (y) {
        sd_bt *l = sd_op_linear(y, u->label_w0, u->label_b0);
        if (l) step(&l, sd_op_silu(l));
        if (l) step(&l, sd_op_linear(l, u->label_w2, u->label_b2));
        if (!l) {
            sd_bt_free(e);
            return NULL;
        }
        tap(u, "label_emb", l);
        step(&e, sd_op_add(e, l));
        sd_bt_free(l);
        if (!e) return NULL;
        tap(u, "emb", e);
    }
    step(&e, sd_op_silu(e));
    return e;
}

sd_status sd_unet_forward(sd_unet *u, sd_bt *x, const float *timesteps, sd_bt *context, sd_bt *y,
                          const sd_unet_control *control, sd_bt **out, sd_error *err) {
    *out = NULL;
    sd_error_clear(err);
    sd_status rc = check_inputs(u, x, timesteps, context, y, control, err);
    if (rc) return rc;
    sd_backend_clear_error(u->be);

    sd_bt *skips[SD_UNET_MAX_BLOCKS] = {0};
    int n_skips = 0;
    const sd_unet_patches *ps = control ? control->patches : NULL;
    sd_unet_attn_record *rec = control ? control->record : NULL;
    const sd_unet_middle_patch *mid = control ? control->middle_patch : NULL;
    int tindex = 0; /* transformer_options["transformer_index"] */
    sd_bt *h = NULL, *emb = NULL;
    /* after: what the next input block reads when an after-skip patch
     * changed it, else NULL (the last skip) */
    sd_bt *after = NULL;
    char nm[64];

    if (!(emb = embed(u, timesteps, x->shape[0], y, err))) goto fail;

    const float sigma = control ? control->sigma : 0.0f;
    struct sd_rng *rng = control ? control->rng : NULL;
    const int64_t oh = x->shape[2], ow = x->shape[3];
    for (int i = 0; i < u->n_in; i++) {
        snprintf(nm, sizeof nm, "input_blocks.%d", i);
        unet_block_at at = {ps, SD_UNET_BLOCK_INPUT, i, oh, ow, rng, err, rec, mid, &tindex};
        h = block_forward(u, &u->in[i], nm, after ? after : i ? skips[n_skips - 1] : x, emb, context, 0, 0, &at);
        sd_bt_free(after);
        after = NULL;
        if (!h) goto fail;
        if (control && i < control->n_input && control->input && control->input[i]) {
            if ((rc = add_control(&h, control->input[i], nm, err))) goto fail_rc;
            if (!h) goto fail;
        }
        if (ps) {
            sd_bt *np;
            if ((rc = sd_unet_patch_input_block(u, ps, SD_UNET_AT_INPUT_BLOCK, i, sigma, h, &np, err))) goto fail_rc;
            if (np) step(&h, np);
        }
        skips[n_skips++] = h; /* the stack owns it; h continues as the next input */
        h = NULL;
        if (ps && (rc = sd_unet_patch_input_block(u, ps, SD_UNET_AT_INPUT_BLOCK_AFTER_SKIP, i, sigma,
                                                  skips[n_skips - 1], &after, err)))
            goto fail_rc;
    }

    unet_block_at mat = {ps, SD_UNET_BLOCK_MIDDLE, 0, oh, ow, rng, err, rec, mid, &tindex};
    h = block_forward(u, &u->middle, "middle_block", after ? after : skips[n_skips - 1], emb, context, 0, 0, &mat);
    sd_bt_free(after);
    after = NULL;
    if (!h) goto fail;
    if (control && control->middle) {
        if ((rc = add_control(&h, control->middle, "middle_block", err))) goto fail_rc;
        if (!h) goto fail;
    }

    for (int i = 0; i < u->n_out; i++) {
        sd_bt *skip = skips[--n_skips];
        skips[n_skips] = NULL;
        if (control && n_skips < control->n_skip && control->skip && control->skip[n_skips]) {
            snprintf(nm, sizeof nm, "skip %d (input_blocks.%d)", n_skips, n_skips);
            rc = add_control(&skip, control->skip[n_skips], nm, err);
            if (rc) {
                sd_bt_free(skip);
                goto fail_rc;
            }
            if (!skip) goto fail;
        }
        if (control && control->patches) {
            rc = sd_unet_patch_output_block(u, control->patches, &h, &skip, err);
            if (rc) {
                sd_bt_free(skip);
                goto fail_rc;
            }
        }
        if (skip->shape[2] != h->shape[2] || skip->shape[3] != h->shape[3]) {
            sd_bt_free(skip);
            rc = sd_error_set(err, SD_ERR_INTERNAL, "UNet output block %d: skip and features differ in size", i);
            goto fail_rc;
        }
        int ok = step(&h, sd_op_concat(h, skip, 1));
        sd_bt_free(skip);
        if (!ok) goto fail;
        int64_t th = n_skips ? skips[n_skips - 1]->shape[2] : 0;
        int64_t tw = n_skips ? skips[n_skips - 1]->shape[3] : 0;
        snprintf(nm, sizeof nm, "output_blocks.%d", i);
        unet_block_at at = {ps, SD_UNET_BLOCK_OUTPUT, i, oh, ow, rng, err, rec, mid, &tindex};
        if (!step(&h, block_forward(u, &u->out[i], nm, h, emb, context, th, tw, &at))) goto fail;
    }
    tap(u, "output_blocks.last", h);

    if (!step(&h, sd_op_group_norm(h, 32, u->out_norm_w, u->out_norm_b, 1e-5f, 1))) goto fail;
    if (!step(&h, sd_op_conv2d(h, u->out_conv_w, u->out_conv_b, 1, 1, 1))) goto fail;
    tap(u, "out", h);
    sd_bt_free(emb);
    *out = h;
    return SD_OK;

fail:
    rc = sd_backend_take_error(u->be, err);
    if (rc == SD_OK) /* a host-side failure (embed) already filled err */
        rc = err && err->code ? err->code
                              : sd_error_set(err, SD_ERR_INTERNAL, "UNet forward failed without a backend error");
    sd_error_prefix(err, "UNet forward");
fail_rc:
    sd_bt_free(h);
    sd_bt_free(after);
    sd_bt_free(emb);
    for (int i = 0; i < n_skips; i++) sd_bt_free(skips[i]);
    return rc;
}

int sd_unet_transformer_widths(const sd_unet *u, int *widths, int max) {
    int n = 0;
    const unet_block *blocks[2 * SD_UNET_MAX_BLOCKS + 1];
    int nb = 0;
    for (int i = 0; i < u->n_in; i++) blocks[nb++] = &u->in[i];
    blocks[nb++] = &u->middle;
    for (int i = 0; i < u->n_out; i++) blocks[nb++] = &u->out[i];
    for (int b = 0; b < nb; b++)
        for (int l = 0; l < blocks[b]->n; l++)
            if (blocks[b]->layers[l].kind == UL_ST) {
                if (n < max) widths[n] = blocks[b]->layers[l].st->ch;
                n++;
            }
    return n;
}
