/* bf16_emul.c - bf16 precision on the f32 kernels (dnnl_bf16.h).
 *
 * The inputs of linear, matmul and conv2d are rounded to bf16 values kept
 * in f32 storage, then the ordinary f32 op runs on them: the products are
 * those of bf16 inputs exactly, the accumulation is f32 as in oneDNN's bf16
 * kernels, and convolutions keep Winograd. The weight goes through the
 * backend's reusable weight buffer (one layer at a time, as the f32 path's
 * widening does); activations through fresh scratch freed after the op.
 * Biases are widened, not rounded (oneDNN adds them in f32 too).
 */
#include "dnnl_bf16.h"

#include <stdlib.h>

/* A header for an F32 tensor at data with t's shape: the f32 kernels read
 * only dtype, shape and data. */
static sd_bt f32_like(const sd_bt *t, float *data) {
    sd_bt v = *t;
    v.dtype = SD_F32;
    v.data = data;
    v.nbytes = (size_t)sd_bt_numel(t) * sizeof(float);
    v.host = NULL;
    return v;
}

typedef struct {
    float *p;
    int reused; /* the backend's weight buffer */
    int owned;  /* p is ours to give back */
} held;

/* t as bf16-rounded f32 values; weight: from the reusable weight buffer. */
static int rounded(sd_backend *be, const sd_bt *t, int weight, held *h, const char *op) {
    int64_t n = sd_bt_numel(t);
    size_t bytes = (size_t)n * sizeof(float);
    h->owned = 1;
    h->reused = 0;
    h->p = weight ? sd_cpu_weight_scratch(be, bytes, &h->reused) : sd_cpu_alloc(bytes ? bytes : 1);
    if (!h->p) {
        h->owned = 0;
        sd_backend_fail(be, SD_ERR_NOMEM, "%s (bf16): out of memory rounding a %s (%zu bytes)",
                        op, weight ? "weight" : "input", bytes);
        return 0;
    }
    sd_bf16_round_f32(sd_cpu_pool(be), t->dtype, t->data, h->p, n);
    return 1;
}

/* The bias as F32: its own data when it is F32. */
static int widened(sd_backend *be, const sd_bt *b, held *h, const char *op) {
    h->reused = 0;
    h->owned = 0;
    h->p = NULL;
    if (!b) return 1;
    if (b->dtype == SD_F32) {
        h->p = b->data;
        return 1;
    }
    int64_t n = sd_bt_numel(b);
    if (!(h->p = sd_cpu_alloc((size_t)n * sizeof(float) + 1))) {
        sd_backend_fail(be, SD_ERR_NOMEM, "%s (bf16): out of memory widening the bias", op);
        return 0;
    }
    h->owned = 1;
    sd_cpu_widen(b->dtype, b->data, h->p, n, sd_cpu_isa());
    return 1;
}

static void drop(sd_backend *be, held *h) {
    if (!h->owned) return;
    if (h->reused) sd_cpu_weight_scratch_done(be, h->p, 1);
    else free(h->p);
    h->owned = 0;
}

sd_status sd_bf16e_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                          const sd_bt *b) {
    held hx = {0}, hw = {0}, hb = {0};
    sd_status rc = SD_ERR_NOMEM;
    if (rounded(be, x, 0, &hx, "linear") && rounded(be, w, 1, &hw, "linear") &&
        widened(be, b, &hb, "linear")) {
        sd_bt X = f32_like(x, hx.p), W = f32_like(w, hw.p), B = {0};
        if (b) B = f32_like(b, hb.p);
        rc = sd_cpu_linear(be, out, &X, &W, b ? &B : NULL);
    }
    drop(be, &hx), drop(be, &hw), drop(be, &hb);
    return rc;
}

sd_status sd_bf16e_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                          int trans_b, float alpha) {
    held ha = {0}, hb = {0};
    sd_status rc = SD_ERR_NOMEM;
    /* b is a weight when the model passes one; either way it is one operand
     * of this op only, so it may take the reusable buffer */
    if (rounded(be, a, 0, &ha, "matmul") && rounded(be, b, 1, &hb, "matmul")) {
        sd_bt A = f32_like(a, ha.p), B = f32_like(b, hb.p);
        rc = sd_cpu_matmul(be, out, &A, &B, trans_b, alpha);
    }
    drop(be, &ha), drop(be, &hb);
    return rc;
}

sd_status sd_bf16e_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                          const sd_bt *b, int stride, int pad_h, int pad_w) {
    held hx = {0}, hw = {0}, hb = {0};
    sd_status rc = SD_ERR_NOMEM;
    if (rounded(be, x, 0, &hx, "conv2d") && rounded(be, w, 1, &hw, "conv2d") &&
        widened(be, b, &hb, "conv2d")) {
        sd_bt X = f32_like(x, hx.p), W = f32_like(w, hw.p), B = {0};
        if (b) B = f32_like(b, hb.p);
        rc = sd_cpu_conv2d(be, out, &X, &W, b ? &B : NULL, stride, pad_h, pad_w);
    }
    drop(be, &hx), drop(be, &hw), drop(be, &hb);
    return rc;
}
