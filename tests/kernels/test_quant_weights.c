/* test_quant_weights.c - GGUF-quantized weights kept as stored and widened
 * per op (core/quant.h through the backend's to_f32).
 *
 * For every quantized dtype and each rounding mode (sd_bt.dequant): the
 * backend's widening (sd_bt_to_host) equals core/quant.c's on the host; ops
 * fed the quantized weight (linear, conv2d, matmul, an embedding table, a
 * view of it) give bit-identical results to the same ops fed the widened
 * F32 copy (the same kernel on the same values); in bf16 precision the
 * quantized weight is widened before the low-precision path, so it equals
 * that path fed the F32 copy. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "testutil.h"

static unsigned seed = 2601;
static unsigned rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
}

static const sd_dtype QTYPES[] = {SD_Q4_0, SD_Q4_1, SD_Q5_0, SD_Q5_1, SD_Q8_0, SD_Q2_K,
                                  SD_Q3_K, SD_Q4_K, SD_Q5_K, SD_Q6_K, SD_IQ4_NL, SD_IQ4_XS};

/* Random blocks whose f16 scale fields are small finite values (every
 * other byte pair cleared to an exponent below 2^-1: no inf anywhere). */
static sd_tensor *rand_quant(sd_dtype dt, int ndim, const int64_t *shape) {
    sd_tensor *t = sd_tensor_new(dt, ndim, shape);
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)rnd();
    size_t bs = sd_dtype_size(dt);
    for (size_t b = 0; b < t->nbytes / bs; b++)
        for (size_t k = 1; k < bs; k += 2) p[b * bs + k] &= 0x37; /* any f16 here is finite and < 1 */
    return t;
}

static sd_tensor *widened(const sd_tensor *q, sd_dequant_math m) {
    sd_tensor *f = sd_tensor_new(SD_F32, q->ndim, q->shape);
    sd_quant_dequant(q->dtype, m, q->data, f->data, sd_tensor_numel(q));
    return f;
}

static sd_bt *rand_f32(sd_backend *be, int ndim, const int64_t *shape) {
    sd_tensor *h = sd_tensor_new(SD_F32, ndim, shape);
    float *p = h->data;
    for (int64_t i = 0; i < sd_tensor_numel(h); i++) p[i] = (float)((int)(rnd() % 2001) - 1000) / 500.0f;
    sd_bt *b = sd_bt_from_host(be, h, SD_F32);
    sd_tensor_unref(h);
    return b;
}

static void same(const char *what, sd_dtype dt, sd_bt *a, sd_bt *b) {
    CHECK_MSG(a && b, "%s (%s): op failed", what, sd_dtype_name(dt));
    if (!a || !b) return;
    sd_tensor *x = sd_bt_to_host(a), *y = sd_bt_to_host(b);
    CHECK_MSG(x && y && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0,
              "%s (%s): results differ", what, sd_dtype_name(dt));
    sd_tensor_unref(x);
    sd_tensor_unref(y);
}

static void check_type(sd_backend *be, sd_dtype dt) {
    int blk = sd_dtype_block(dt);
    CHECK(sd_backend_accepts_dtype(be, dt));
    int64_t wshape[2] = {6, 2 * (int64_t)(blk > 32 ? blk : 64)};
    sd_tensor *wq = rand_quant(dt, 2, wshape);
    for (int m = SD_DQ_F16; m <= SD_DQ_BF16; m++) {
        sd_tensor *wf = widened(wq, (sd_dequant_math)m);
        sd_bt *q = sd_bt_from_host(be, wq, dt);
        CHECK(q && q->dtype == dt && q->nbytes == wq->nbytes);
        if (!q) continue;
        q->dequant = (sd_dequant_math)m;
        sd_bt *f = sd_bt_from_host(be, wf, SD_F32);
        /* the backend's widening is core/quant.c's */
        sd_tensor *h = sd_bt_to_host(q);
        CHECK_MSG(h && h->dtype == SD_F32 && memcmp(h->data, wf->data, wf->nbytes) == 0, "%s mode %d: widening",
                  sd_dtype_name(dt), m);
        sd_tensor_unref(h);
        /* ops */
        int64_t xs[3] = {2, 3, wshape[1]};
        sd_bt *x = rand_f32(be, 3, xs), *bias = rand_f32(be, 1, wshape);
        sd_bt *r1 = sd_op_linear(x, q, bias), *r2 = sd_op_linear(x, f, bias);
        same("linear", dt, r1, r2);
        sd_bt_free(r1);
        sd_bt_free(r2);
        int64_t as[3] = {1, 4, wshape[0]};
        sd_bt *a = rand_f32(be, 3, as);
        int64_t w3[3] = {1, wshape[0], wshape[1]};
        sd_bt *qv = sd_bt_view(q, 3, w3), *fv = sd_bt_view(f, 3, w3);
        CHECK(qv && qv->dequant == (sd_dequant_math)m);
        r1 = sd_op_matmul(a, qv, 0, 0.5f);
        r2 = sd_op_matmul(a, fv, 0, 0.5f);
        same("matmul of a view", dt, r1, r2);
        sd_bt_free(r1);
        sd_bt_free(r2);
        int64_t c4[4] = {wshape[0], wshape[1] / 4, 2, 2};
        sd_bt *qc = sd_bt_view(q, 4, c4), *fc = sd_bt_view(f, 4, c4);
        int64_t is[4] = {1, wshape[1] / 4, 5, 4};
        sd_bt *img = rand_f32(be, 4, is);
        r1 = sd_op_conv2d(img, qc, NULL, 1, 1, 0);
        r2 = sd_op_conv2d(img, fc, NULL, 1, 1, 0);
        same("conv2d", dt, r1, r2);
        sd_bt_free(r1);
        sd_bt_free(r2);
        int32_t idv[5] = {5, 0, 3, 3, 1};
        int64_t ids_shape[2] = {1, 5};
        sd_tensor *ih = sd_tensor_new(SD_I32, 2, ids_shape);
        memcpy(ih->data, idv, sizeof idv);
        sd_bt *ids = sd_bt_from_host(be, ih, SD_I32);
        sd_tensor_unref(ih);
        r1 = sd_op_embedding(q, ids);
        r2 = sd_op_embedding(f, ids);
        same("embedding", dt, r1, r2);
        sd_bt_free(r1);
        sd_bt_free(r2);
        if (sd_backend_supports_precision(be, SD_PREC_BF16)) {
            sd_backend_set_precision(be, SD_PREC_BF16);
            r1 = sd_op_linear(x, q, bias);
            r2 = sd_op_linear(x, f, bias);
            same("linear in bf16", dt, r1, r2);
            sd_bt_free(r1);
            sd_bt_free(r2);
            sd_backend_set_precision(be, SD_PREC_F32);
        }
        sd_bt *all[] = {x, bias, a, qv, fv, qc, fc, img, ids, q, f};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_bt_free(all[i]);
        sd_tensor_unref(wf);
        sd_error err = {0};
        CHECK_OK(sd_backend_take_error(be, &err), &err);
        sd_backend_clear_error(be);
    }
    /* a quantized tensor must be whole blocks */
    int64_t partial[1] = {blk + 1};
    CHECK(sd_bt_new(be, dt, 1, partial) == NULL && sd_backend_error(be) != NULL);
    sd_backend_clear_error(be);
    sd_tensor_unref(wq);
}

int main(void) {
    sd_backend *be = NULL;
    sd_error err = {0};
    const char *name = getenv("SDFLOW_TEST_BACKEND");
    if (!name) name = "cpu";
    if (sd_backend_new(name, 2, &be, &err) != SD_OK) sd_test_skip("backend %s: %s", name, err.msg);
    for (size_t i = 0; i < sizeof QTYPES / sizeof QTYPES[0]; i++) check_type(be, QTYPES[i]);
    sd_backend_free(be);
    return sd_test_finish();
}
