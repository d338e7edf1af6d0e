/* clip.c - the CLIP text transformer forward pass (ComfyUI's
 * clip_model.CLIPTextModel_ operation order).
 *
 * Every helper borrows its inputs and returns a new tensor, or NULL once an
 * op failed (the backend's sticky error says why). */
#include "models/text/clip_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replace *h by next (freeing the old value); 0 when next is NULL. */
static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

static void tap(const sd_clip *c, const char *name, const sd_bt *t) {
    if (c->tap && t) c->tap(c->tap_user, name, t);
}

/* Token embeddings [n, len, W] with embedding vectors spliced in:
 * x * keep + vec, where keep is 1 at token slots and 0 under a vector and
 * vec holds the vectors (0 elsewhere); exact for finite embeddings. */
static sd_bt *embed(const sd_clip *c, const sd_clip_tokens *in, sd_error *err) {
    int64_t n = in->n, len = in->len, W = c->cfg.hidden, slots = n * len;
    sd_tensor *ids = sd_tensor_new4(SD_I32, 2, n, len, 0, 0);
    if (!ids) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory for %lld token ids", (long long)slots);
        return NULL;
    }
    int32_t *id = ids->data;
    int any_vec = 0;
    for (int64_t i = 0; i < slots; i++) {
        if (in->vectors && in->vectors[i]) {
            id[i] = 0;
            any_vec = 1;
            continue;
        }
        id[i] = in->ids[i];
        if (id[i] < 0 || id[i] >= c->cfg.vocab) {
            sd_error_set(err, SD_ERR_INVALID,
                         "text encoder: token id %d (sequence %lld, position %lld) outside the "
                         "vocabulary of %d",
                         (int)id[i], (long long)(i / len), (long long)(i % len), c->cfg.vocab);
            sd_tensor_unref(ids);
            return NULL;
        }
    }
    sd_bt *ids_bt = sd_bt_from_host(c->be, ids, SD_I32);
    sd_tensor_unref(ids);
    sd_bt *x = ids_bt ? sd_op_embedding(c->tok_emb, ids_bt) : NULL;
    sd_bt_free(ids_bt);
    if (!x || !any_vec) return x;

    sd_tensor *keep = sd_tensor_new4(SD_F32, 3, n, len, 1, 0);
    sd_tensor *vec = sd_tensor_new4(SD_F32, 3, n, len, W, 0);
    sd_bt *kb = NULL, *vb = NULL;
    if (keep && vec) {
        float *kp = keep->data, *vp = vec->data;
        for (int64_t i = 0; i < slots; i++) {
            const float *v = in->vectors[i];
            kp[i] = v ? 0.0f : 1.0f;
            if (v) memcpy(vp + i * W, v, (size_t)W * sizeof *vp);
        }
        kb = sd_bt_from_host(c->be, keep, SD_F32);
        vb = sd_bt_from_host(c->be, vec, SD_F32);
    } else {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory for embedding vectors");
        sd_bt_free(x);
        x = NULL;
    }
    if (x && kb && vb && step(&x, sd_op_mul(x, kb))) step(&x, sd_op_add(x, vb));
    else if (x) step(&x, NULL);
    sd_tensor_unref(keep);
    sd_tensor_unref(vec);
    sd_bt_free(kb);
    sd_bt_free(vb);
    return x;
}

/* Rows of final [n, len, W] at each sequence's pool slot -> [n, W]. */
static sd_bt *pool(const sd_clip *c, const sd_clip_tokens *in, sd_bt *final, sd_error *err) {
    int64_t n = in->n, len = in->len, W = c->cfg.hidden;
    sd_tensor *rows = sd_tensor_new4(SD_I32, 1, n, 0, 0, 0);
    if (!rows) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    int32_t *r = rows->data;
    for (int64_t b = 0; b < n; b++) {
        int64_t p = len - 1;
        for (int64_t j = 0; j < len; j++) {
            int64_t i = b * len + j;
            if (in->ids[i] == SD_CLIP_EOS && !(in->vectors && in->vectors[i])) {
                p = j;
                break;
            }
        }
        r[b] = (int32_t)(b * len + p);
    }
    int64_t flat[2] = {n * len, W};
    sd_bt *table = sd_bt_view(final, 2, flat);
    sd_bt *rb = sd_bt_from_host(c->be, rows, SD_I32);
    sd_tensor_unref(rows);
    sd_bt *out = table && rb ? sd_op_embedding(table, rb) : NULL;
    sd_bt_free(table);
    sd_bt_free(rb);
    return out;
}

void sd_clip_output_free(sd_clip_output *o) {
    if (!o) return;
    sd_bt_free(o->hidden);
    sd_bt_free(o->pooled);
    sd_bt_free(o->projected);
    memset(o, 0, sizeof *o);
}

sd_status sd_clip_forward(sd_clip *c, const sd_clip_tokens *in, sd_clip_layer layer,
                          sd_clip_output *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    const sd_clip_config *cfg = &c->cfg;
    if (!in || in->n < 1 || in->len < 1 || in->len > cfg->positions || !in->ids)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder: %d sequences of %d tokens (want >= 1 of 1..%d)",
                            in ? in->n : 0, in ? in->len : 0, cfg->positions);
    if (layer.layer < -cfg->layers || layer.layer > -1)
        return sd_error_set(err, SD_ERR_INVALID,
                            "text encoder: layer %d outside -%d..-1", layer.layer, cfg->layers);
    sd_backend_clear_error(c->be);
    int sel = cfg->layers + layer.layer; /* 0-based index of the selected layer */
    sd_bt *x = NULL, *pos = NULL, *hid = NULL, *final = NULL;
    sd_error local;
    sd_error_clear(&local);

    x = embed(c, in, &local);
    if (local.code != SD_OK) goto done;
    if (!x) goto done;
    /* positions 0..len-1 regardless of any stored position_ids */
    pos = in->len == cfg->positions ? NULL : sd_op_slice(c->pos_emb, 0, 0, in->len);
    if (in->len != cfg->positions && !pos) goto done;
    if (!step(&x, sd_op_add(x, pos ? pos : c->pos_emb))) goto done;
    tap(c, "embeddings", x);
    for (int i = 0; i < cfg->layers; i++) {
        if (!step(&x, sd_clip_block_forward(&c->layer[i], c->cfg.heads, c->cfg.act, 1, x))) goto done;
        char name[32];
        snprintf(name, sizeof name, "layers.%d", i);
        tap(c, name, x);
        if (i == sel && i != cfg->layers - 1 && !(hid = sd_op_copy(x))) goto done;
    }
    if (!(final = sd_op_layer_norm(x, c->final_w, c->final_b, 1e-5f))) goto done;
    tap(c, "final_layer_norm", final);
    if (sel == cfg->layers - 1) {
        out->hidden = layer.final_ln ? sd_op_copy(final) : x;
        if (!layer.final_ln) x = NULL;
    } else {
        out->hidden = layer.final_ln ? sd_op_layer_norm(hid, c->final_w, c->final_b, 1e-5f) : hid;
        if (!layer.final_ln) hid = NULL;
    }
    if (!out->hidden) goto done;
    if (!(out->pooled = pool(c, in, final, &local))) goto done;
    if (c->proj) {
        /* HF: Linear [P, W]; OpenCLIP: x @ text_projection [W, P] */
        out->projected = c->proj_is_linear ? sd_op_linear(out->pooled, c->proj, NULL)
                                           : sd_op_matmul(out->pooled, c->proj, 0, 1.0f);
        if (!out->projected) goto done;
    }
done:
    sd_bt_free(x);
    sd_bt_free(pos);
    sd_bt_free(hid);
    sd_bt_free(final);
    sd_status rc = local.code;
    if (rc != SD_OK) {
        if (err) *err = local;
    } else {
        rc = sd_backend_take_error(c->be, err);
        if (rc == SD_OK && (!out->hidden || !out->pooled))
            rc = sd_error_set(err, SD_ERR_INTERNAL, "text encoder: forward produced no output");
    }
    sd_backend_clear_error(c->be);
    if (rc != SD_OK) sd_clip_output_free(out);
    return rc;
}
