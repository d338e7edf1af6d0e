/* cuda_ops.c - the backend ops that run our own kernels (the .cu files) or
 * plain copies: argument plumbing from validated sd_bt to launchers, and
 * status checks that name the op. */
#include "kernels/cuda/cuda_impl.h"

#include <stdlib.h>
#include <string.h>

/* elementwise.cu numbers the unary ops the same way */
_Static_assert(SD_UNARY_SCALE == 0 && SD_UNARY_SILU == 1 && SD_UNARY_GELU == 2 &&
                   SD_UNARY_QUICK_GELU == 3 && SD_UNARY_TANH == 4 && SD_UNARY_RELU == 5 &&
                   SD_UNARY_LEAKY_RELU == 6 && SD_UNARY_GELU_TANH == 7 && SD_UNARY_ELU == 8 &&
                   SD_UNARY_HARDSWISH == 9 && SD_UNARY_SIGMOID == 10 && SD_UNARY_SOFTSIGN == 11 &&
                   SD_UNARY_MISH == 12,
               "sd_unary_op order changed: update elementwise.cu");

#define STREAM(be) (sd_cuda_of(be)->stream)
#define LAUNCH(be, op, call) sd_cuda_check((be), (call), (op), "kernel launch")

static int64_t prod(const int64_t *s, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= s[i];
    return n;
}

sd_status sd_cuda_op_pad2d(sd_backend *be, sd_bt *out, const sd_bt *x, int left, int top) {
    /* out is uninitialised: zero the border (all of it; the interior is
     * overwritten right after on the same stream) */
    sd_status rc = sd_cuda_check(be, cudaMemsetAsync(out->data, 0, out->nbytes, STREAM(be)),
                                 "pad2d", "zero fill");
    if (rc != SD_OK) return rc;
    return LAUNCH(be, "pad2d",
                  sd_cuda_pad2d(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out),
                                x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                                out->shape[2], out->shape[3], left, top));
}

sd_status sd_cuda_op_group_norm(sd_backend *be, sd_bt *out, const sd_bt *x, int groups,
                                const sd_bt *gamma, const sd_bt *beta, float eps, int silu) {
    int64_t N = x->shape[0], C = x->shape[1], S = prod(x->shape, 2, x->ndim);
    if (N * C * S == 0) return SD_OK;
    size_t n = sd_cuda_group_norm_scratch(N, groups, C / groups * S);
    void *scratch = sd_cuda_scratch(be, n, "group_norm", "statistics");
    if (!scratch) return SD_ERR_NOMEM;
    sd_status rc = LAUNCH(be, "group_norm",
                          sd_cuda_group_norm(STREAM(be), sd_cuda_f32(x),
                                             gamma ? sd_cuda_f32(gamma) : NULL,
                                             beta ? sd_cuda_f32(beta) : NULL, sd_cuda_f32(out),
                                             scratch, N, C, S, groups, eps, silu));
    sd_cuda_scratch_free(be, scratch);
    return rc;
}

sd_status sd_cuda_op_layer_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                                const sd_bt *beta, float eps) {
    int64_t C = x->shape[x->ndim - 1];
    if (C == 0) return SD_OK;
    return LAUNCH(be, "layer_norm",
                  sd_cuda_layer_norm(STREAM(be), sd_cuda_f32(x), gamma ? sd_cuda_f32(gamma) : NULL,
                                     beta ? sd_cuda_f32(beta) : NULL, sd_cuda_f32(out),
                                     sd_bt_numel(x) / C, C, eps));
}

sd_status sd_cuda_op_rms_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                              float eps) {
    int64_t C = x->shape[x->ndim - 1];
    if (C == 0) return SD_OK;
    return LAUNCH(be, "rms_norm",
                  sd_cuda_rms_norm(STREAM(be), sd_cuda_f32(x), gamma ? sd_cuda_f32(gamma) : NULL,
                                   sd_cuda_f32(out), sd_bt_numel(x) / C, C, eps));
}

sd_status sd_cuda_op_rope(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *rot, int heads,
                          int interleaved) {
    int64_t N = x->shape[0], L = x->shape[1], HD = x->shape[2];
    return LAUNCH(be, "rope",
                  sd_cuda_rope(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(rot), sd_cuda_f32(out), N,
                               L, heads, HD / heads, rot->ndim == 4, interleaved));
}

sd_status sd_cuda_op_binary(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                            const int64_t *b_strides, int op) {
    sd_cuda_dims d;
    memset(&d, 0, sizeof d);
    d.ndim = a->ndim;
    for (int i = 0; i < a->ndim; i++) {
        d.shape[i] = a->shape[i];
        d.stride[i] = b_strides[i];
    }
    return LAUNCH(be, "binary",
                  sd_cuda_binary(STREAM(be), sd_cuda_f32(a), sd_cuda_f32(b), sd_cuda_f32(out),
                                 sd_bt_numel(a), d, op));
}

sd_status sd_cuda_op_add_channel(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *b) {
    return LAUNCH(be, "add_channel",
                  sd_cuda_add_plane(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(b), sd_cuda_f32(out),
                                    x->shape[0] * x->shape[1], prod(x->shape, 2, x->ndim)));
}

sd_status sd_cuda_op_unary(sd_backend *be, sd_bt *out, const sd_bt *x, int op, float s) {
    return LAUNCH(be, "unary",
                  sd_cuda_unary(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out), sd_bt_numel(x), op,
                                s));
}

sd_status sd_cuda_op_geglu(sd_backend *be, sd_bt *out, const sd_bt *x) {
    int64_t F = out->shape[out->ndim - 1];
    if (F == 0) return SD_OK;
    return LAUNCH(be, "geglu",
                  sd_cuda_geglu(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out),
                                sd_bt_numel(out) / F, F));
}

sd_status sd_cuda_op_softmax(sd_backend *be, sd_bt *out, const sd_bt *x) {
    int64_t C = x->shape[x->ndim - 1];
    if (C == 0) return SD_OK;
    return LAUNCH(be, "softmax",
                  sd_cuda_softmax(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out),
                                  sd_bt_numel(x) / C, C));
}

sd_status sd_cuda_op_upsample2x(sd_backend *be, sd_bt *out, const sd_bt *x) {
    return LAUNCH(be, "upsample_nearest2x",
                  sd_cuda_upsample2x(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out),
                                     x->shape[0] * x->shape[1], x->shape[2], x->shape[3]));
}

/* `rows` rows of `width` bytes from src (pitch spitch) to dst (pitch dpitch). */
static sd_status copy_rows(sd_backend *be, const char *op, void *dst, size_t dpitch,
                           const void *src, size_t spitch, size_t width, int64_t rows) {
    if (width == 0 || rows == 0) return SD_OK;
    cudaError_t e = rows == 1 ? cudaMemcpyAsync(dst, src, width, cudaMemcpyDeviceToDevice,
                                                STREAM(be))
                              : cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, (size_t)rows,
                                                  cudaMemcpyDeviceToDevice, STREAM(be));
    return sd_cuda_check(be, e, op, "device copy");
}

sd_status sd_cuda_op_concat(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int dim) {
    size_t es = sd_dtype_size(out->dtype);
    int64_t outer = prod(a->shape, 0, dim), inner = prod(a->shape, dim + 1, a->ndim);
    size_t ca = (size_t)(a->shape[dim] * inner) * es, cb = (size_t)(b->shape[dim] * inner) * es;
    char *y = out->data;
    sd_status rc = copy_rows(be, "concat", y, ca + cb, a->data, ca, ca, outer);
    if (rc != SD_OK) return rc;
    return copy_rows(be, "concat", y + ca, ca + cb, b->data, cb, cb, outer);
}

sd_status sd_cuda_op_slice(sd_backend *be, sd_bt *out, const sd_bt *x, int dim, int64_t start) {
    size_t es = sd_dtype_size(out->dtype);
    int64_t outer = prod(x->shape, 0, dim), inner = prod(x->shape, dim + 1, x->ndim);
    size_t cin = (size_t)(x->shape[dim] * inner) * es;
    size_t cout = (size_t)(out->shape[dim] * inner) * es;
    const char *src = (const char *)x->data + (size_t)(start * inner) * es;
    return copy_rows(be, "slice", out->data, cout, src, cin, cout, outer);
}

sd_status sd_cuda_op_permute(sd_backend *be, sd_bt *out, const sd_bt *x, const int *perm) {
    int64_t st[SD_MAX_DIMS], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= x->shape[d];
    }
    sd_cuda_dims od;
    memset(&od, 0, sizeof od);
    od.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) {
        od.shape[d] = out->shape[d];
        od.stride[d] = st[perm[d]];
    }
    if (x->ndim == 0) return sd_cuda_op_copy(be, out, x);
    return LAUNCH(be, "permute",
                  sd_cuda_permute(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out), sd_bt_numel(out),
                                  od));
}

/* ids are few (prompt tokens): checked on the host, so a bad id is an
 * error naming its position instead of a device fault. */
sd_status sd_cuda_op_embedding(sd_backend *be, sd_bt *out, const sd_bt *table, const sd_bt *ids) {
    int64_t V = table->shape[0], C = table->shape[1], n = sd_bt_numel(ids);
    if (n == 0) return SD_OK;
    void *h = malloc(ids->nbytes);
    if (!h) return sd_backend_fail(be, SD_ERR_NOMEM, "cuda embedding: out of memory (ids)");
    sd_status rc = sd_cuda_check(be, cudaMemcpyAsync(h, ids->data, ids->nbytes,
                                                     cudaMemcpyDeviceToHost, STREAM(be)),
                                 "embedding", "reading ids");
    if (rc == SD_OK)
        rc = sd_cuda_check(be, cudaStreamSynchronize(STREAM(be)), "embedding", "synchronise");
    for (int64_t i = 0; rc == SD_OK && i < n; i++) {
        int64_t id = ids->dtype == SD_I64 ? ((const int64_t *)h)[i] : ((const int32_t *)h)[i];
        if (id < 0 || id >= V)
            rc = sd_backend_fail(be, SD_ERR_INVALID,
                                 "embedding: id %lld at position %lld outside table of %lld rows",
                                 (long long)id, (long long)i, (long long)V);
    }
    free(h);
    if (rc != SD_OK) return rc;
    return LAUNCH(be, "embedding",
                  sd_cuda_embedding(STREAM(be), table->data, sd_cuda_elem_of(table->dtype), ids->data,
                                    ids->dtype == SD_I64, sd_cuda_f32(out), n, C));
}

sd_status sd_cuda_op_copy(sd_backend *be, sd_bt *out, const sd_bt *x) {
    if (!x->nbytes) return SD_OK;
    return sd_cuda_check(be, cudaMemcpyAsync(out->data, x->data, x->nbytes,
                                             cudaMemcpyDeviceToDevice, STREAM(be)),
                         "copy", "device copy");
}
