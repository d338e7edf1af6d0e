/* clip_export.c - a loaded CLIP text encoder's weights written back in a
 * file layout, HF or OpenCLIP, whatever layout it was read from (contract
 * in clip.h, sd_clip_export). The key conversions are ComfyUI's
 * diffusers_convert.convert_text_enc_state_dict_v20 (HF -> OpenCLIP:
 * layers -> resblocks, layer_norm1/2 -> ln_1/2, fc1/fc2 -> c_fc/c_proj,
 * self_attn -> attn with q/k/v fused into in_proj, final_layer_norm ->
 * ln_final, text_projection transposed) and its inverse. */
#include "models/text/clip_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The host copy of a backend weight: half types back in their own dtype
 * (sd_bt_to_host widens them exactly), the rest F32. */
static sd_tensor *host_of(const sd_bt *b, sd_error *err) {
    sd_tensor *h = sd_bt_to_host(b);
    if (!h) {
        sd_status rc = sd_backend_take_error(b->be, err);
        if (!rc) sd_error_set(err, SD_ERR_NOMEM, "out of memory reading a CLIP weight");
        return NULL;
    }
    if (h->dtype == SD_F32 && (b->dtype == SD_F16 || b->dtype == SD_BF16)) {
        sd_tensor *t = sd_tensor_to_dtype(h, b->dtype);
        sd_tensor_unref(h);
        if (!t) sd_error_set(err, SD_ERR_NOMEM, "out of memory converting a CLIP weight");
        return t;
    }
    return h;
}

/* Rows [r0, r0 + n) of a host tensor (first dimension), as a new tensor. */
static sd_tensor *rows_of(const sd_tensor *t, int64_t r0, int64_t n) {
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = n;
    sd_tensor *o = sd_tensor_new(t->dtype, t->ndim, shape);
    if (!o) return NULL;
    size_t row = t->nbytes / (size_t)t->shape[0];
    memcpy(o->data, (const char *)t->data + (size_t)r0 * row, (size_t)n * row);
    return o;
}

/* [a, b] -> [b, a] (any element size). */
static sd_tensor *transpose2(const sd_tensor *t) {
    int64_t s[2] = {t->shape[1], t->shape[0]};
    sd_tensor *o = sd_tensor_new(t->dtype, 2, s);
    if (!o) return NULL;
    size_t es = t->nbytes / (size_t)(t->shape[0] * t->shape[1]);
    for (int64_t i = 0; i < t->shape[0]; i++)
        for (int64_t j = 0; j < t->shape[1]; j++)
            memcpy((char *)o->data + (size_t)(j * t->shape[0] + i) * es,
                   (const char *)t->data + (size_t)(i * t->shape[1] + j) * es, es);
    return o;
}

/* Two or three host tensors stacked along the first dimension. */
static sd_tensor *cat_rows(sd_tensor *const *p, int n) {
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, p[0]->shape, sizeof shape);
    shape[0] = 0;
    for (int i = 0; i < n; i++) {
        if (p[i]->dtype != p[0]->dtype || p[i]->ndim != p[0]->ndim) return NULL;
        shape[0] += p[i]->shape[0];
    }
    sd_tensor *o = sd_tensor_new(p[0]->dtype, p[0]->ndim, shape);
    if (!o) return NULL;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        memcpy((char *)o->data + off, p[i]->data, p[i]->nbytes);
        off += p[i]->nbytes;
    }
    return o;
}

typedef struct exporter {
    sd_clip_export_fn fn;
    void *ud;
    sd_error *err;
    sd_status rc;
} exporter;

/* Hands t (owned; NULL = out of memory) to fn under key, then drops it. */
static void emit(exporter *x, const char *key, sd_tensor *t) {
    if (x->rc) {
        sd_tensor_unref(t);
        return;
    }
    if (!t) {
        x->rc = sd_error_set(x->err, SD_ERR_NOMEM, "out of memory exporting %s", key);
        return;
    }
    x->rc = x->fn(x->ud, key, t, x->err);
    sd_tensor_unref(t);
}

static void emit_bt(exporter *x, const char *key, const sd_bt *b) {
    if (x->rc || !b) return;
    sd_tensor *t = host_of(b, x->err);
    if (!t) {
        x->rc = x->err->code ? x->err->code : SD_ERR_NOMEM;
        return;
    }
    emit(x, key, t);
}

/* q, k, v of one layer as `which` (0, 1, 2) of the separate tensors or rows
 * of the fused one; w selects weight or bias. New tensor or NULL. */
static sd_tensor *qkv_part(exporter *x, const sd_clip *c, const clip_layer_w *l, int which, int w) {
    const sd_bt *sep[2][3] = {{l->q_w, l->k_w, l->v_w}, {l->q_b, l->k_b, l->v_b}};
    const sd_bt *fused = w == 0 ? l->qkv_w : l->qkv_b;
    if (!fused) return sep[w][which] ? host_of(sep[w][which], x->err) : NULL;
    sd_tensor *all = host_of(fused, x->err);
    if (!all) return NULL;
    int64_t W = c->cfg.hidden;
    sd_tensor *r = rows_of(all, which * W, W);
    sd_tensor_unref(all);
    return r;
}

static void emit_fused(exporter *x, const sd_clip *c, const clip_layer_w *l, int w, const char *key) {
    const sd_bt *fused = w == 0 ? l->qkv_w : l->qkv_b;
    if (x->rc) return;
    if (fused) {
        emit_bt(x, key, fused);
        return;
    }
    sd_tensor *p[3] = {NULL, NULL, NULL};
    int ok = 1;
    for (int i = 0; i < 3; i++) ok = ok && (p[i] = qkv_part(x, c, l, i, w)) != NULL;
    sd_tensor *cat = ok ? cat_rows(p, 3) : NULL;
    for (int i = 0; i < 3; i++) sd_tensor_unref(p[i]);
    emit(x, key, cat);
}

/* The projection in the asked form: linear [P, W] or matmul [W, P]. */
static sd_tensor *projection(exporter *x, const sd_clip *c, int linear) {
    if (!c->proj) {
        int64_t W = c->cfg.hidden;
        int64_t s[2] = {W, W};
        sd_tensor *id = sd_tensor_new(SD_F32, 2, s);
        if (id)
            for (int64_t i = 0; i < W; i++) sd_tensor_f32(id)[i * W + i] = 1.0f;
        return id;
    }
    sd_tensor *t = host_of(c->proj, x->err);
    if (!t || c->proj_is_linear == linear) return t;
    sd_tensor *o = transpose2(t);
    sd_tensor_unref(t);
    return o;
}

/* k = inner + fmt(i): a key of the layout, as the file spells it. */
static const char *key_of(char *k, size_t n, const char *inner, const char *fmt, int i) {
    size_t m = (size_t)snprintf(k, n, "%s", inner);
    if (m < n) snprintf(k + m, n - m, fmt, i);
    return k;
}

/* Every weight under the layout's names (clip_names, shared with the
 * loader), in the loader's order: HF gets q/k/v separately (rows of a fused
 * in_proj), OpenCLIP the fused in_proj (q|k|v stacked when they are
 * separate); the projection goes in the layout's form. */
static void export_layout(exporter *x, const sd_clip *c, const clip_names *nm) {
    char k[200];
    const sd_clip_block_names *b = nm->block;
    emit_bt(x, key_of(k, sizeof k, nm->inner, nm->tok_emb, 0), c->tok_emb);
    emit_bt(x, key_of(k, sizeof k, nm->inner, nm->pos_emb, 0), c->pos_emb);
    for (int i = 0; i < c->cfg.layers && !x->rc; i++) {
        const clip_layer_w *l = &c->layer[i];
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->ln1_w, i), l->ln1_w);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->ln1_b, i), l->ln1_b);
        if (b->qkv_w) {
            emit_fused(x, c, l, 0, key_of(k, sizeof k, nm->inner, b->qkv_w, i));
            emit_fused(x, c, l, 1, key_of(k, sizeof k, nm->inner, b->qkv_b, i));
        } else {
            const char *sep[3][2] = {{b->q_w, b->q_b}, {b->k_w, b->k_b}, {b->v_w, b->v_b}};
            for (int j = 0; j < 3; j++)
                for (int w = 0; w < 2; w++)
                    if (!x->rc)
                        emit(x, key_of(k, sizeof k, nm->inner, sep[j][w], i),
                             qkv_part(x, c, l, j, w));
        }
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->o_w, i), l->o_w);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->o_b, i), l->o_b);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->ln2_w, i), l->ln2_w);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->ln2_b, i), l->ln2_b);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->fc1_w, i), l->fc1_w);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->fc1_b, i), l->fc1_b);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->fc2_w, i), l->fc2_w);
        emit_bt(x, key_of(k, sizeof k, nm->inner, b->fc2_b, i), l->fc2_b);
    }
    emit_bt(x, key_of(k, sizeof k, nm->inner, nm->final_w, 0), c->final_w);
    emit_bt(x, key_of(k, sizeof k, nm->inner, nm->final_b, 0), c->final_b);
    if (!x->rc) emit(x, nm->proj, projection(x, c, nm == &clip_names_hf));
}

sd_status sd_clip_export(sd_clip *c, sd_clip_layout layout, sd_clip_export_fn fn, void *ud,
                         sd_error *err) {
    if (!c || !fn) return sd_error_set(err, SD_ERR_INVALID, "sd_clip_export: no model");
    exporter x = {fn, ud, err, SD_OK};
    export_layout(&x, c, layout == SD_CLIP_LAYOUT_OPENCLIP ? &clip_names_openclip : &clip_names_hf);
    return x.rc;
}
