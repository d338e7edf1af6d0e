/* cuda_conv.c - 2-D convolution on cuDNN, algorithm measured once per shape.
 *
 * The first call for a (shape, stride, padding, precision, weight dtype)
 * asks cudnnFind* to time the algorithms and keeps the fastest
 * deterministic one (the GPU path must give the same image run to run),
 * with its descriptors, in a per-backend cache; later calls reuse it.
 *
 * Precision: F32 mode is F32 data with FMA math (no TF32). BF16/F16 modes
 * round x and w to the 16-bit type (weights already stored in a 16-bit type
 * are used as stored), convolve on the tensor cores with F32 accumulation,
 * and widen the result to F32 before the bias is added in F32.
 *
 * We use cuDNN's legacy convolution API: cuDNN 9 marks it deprecated in
 * favour of the graph API, but it is still shipped and is a fraction of the
 * code. */
#include "kernels/cuda/cuda_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

typedef struct conv_key {
    int64_t n, c, h, w, o, kh, kw;
    int stride, pad_h, pad_w;
    int dtype; /* cudnnDataType_t of x, w, y */
} conv_key;

typedef struct conv_entry {
    conv_key key;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    struct conv_entry *next;
} conv_entry;

struct sd_cuda_conv_cache {
    conv_entry *head;
};

sd_cuda_conv_cache *sd_cuda_conv_cache_new(void) { return calloc(1, sizeof(sd_cuda_conv_cache)); }

static void entry_free(conv_entry *e) {
    if (e->xd) cudnnDestroyTensorDescriptor(e->xd);
    if (e->yd) cudnnDestroyTensorDescriptor(e->yd);
    if (e->wd) cudnnDestroyFilterDescriptor(e->wd);
    if (e->cd) cudnnDestroyConvolutionDescriptor(e->cd);
    free(e);
}

void sd_cuda_conv_cache_free(sd_cuda_conv_cache *c) {
    if (!c) return;
    for (conv_entry *e = c->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    free(c);
}

#define DNN(call, what)                                                                        \
    do {                                                                                       \
        if ((rc = sd_cuda_check_dnn(be, (call), "conv2d", what)) != SD_OK) goto fail;         \
    } while (0)

/* A cache entry for key k: found, or built and measured (NULL on error). */
static conv_entry *entry_for(sd_backend *be, const conv_key *k, int64_t Ho, int64_t Wo) {
    sd_cuda *c = sd_cuda_of(be);
    for (conv_entry *e = c->convs->head; e; e = e->next)
        if (memcmp(&e->key, k, sizeof *k) == 0) return e;
    conv_entry *e = calloc(1, sizeof *e);
    if (!e) {
        sd_backend_fail(be, SD_ERR_NOMEM, "cuda conv2d: out of memory (algorithm cache)");
        return NULL;
    }
    e->key = *k;
    sd_status rc;
    cudnnDataType_t dt = (cudnnDataType_t)k->dtype;
    DNN(cudnnCreateTensorDescriptor(&e->xd), "tensor descriptor");
    DNN(cudnnCreateTensorDescriptor(&e->yd), "tensor descriptor");
    DNN(cudnnCreateFilterDescriptor(&e->wd), "filter descriptor");
    DNN(cudnnCreateConvolutionDescriptor(&e->cd), "convolution descriptor");
    DNN(cudnnSetTensor4dDescriptor(e->xd, CUDNN_TENSOR_NCHW, dt, (int)k->n, (int)k->c, (int)k->h,
                                   (int)k->w),
        "input descriptor");
    DNN(cudnnSetFilter4dDescriptor(e->wd, dt, CUDNN_TENSOR_NCHW, (int)k->o, (int)k->c, (int)k->kh,
                                   (int)k->kw),
        "filter descriptor");
    DNN(cudnnSetConvolution2dDescriptor(e->cd, k->pad_h, k->pad_w, k->stride, k->stride, 1, 1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "convolution descriptor");
    DNN(cudnnSetConvolutionMathType(e->cd, dt == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH
                                                                  : CUDNN_TENSOR_OP_MATH),
        "math type");
    int n, ch, h, w;
    DNN(cudnnGetConvolution2dForwardOutputDim(e->cd, e->xd, e->wd, &n, &ch, &h, &w),
        "output shape");
    if (n != k->n || ch != k->o || h != Ho || w != Wo) {
        sd_backend_fail(be, SD_ERR_INVALID,
                        "cuda conv2d: cuDNN output [%d, %d, %d, %d] differs from [%lld, %lld, "
                        "%lld, %lld]",
                        n, ch, h, w, (long long)k->n, (long long)k->o, (long long)Ho,
                        (long long)Wo);
        goto fail;
    }
    DNN(cudnnSetTensor4dDescriptor(e->yd, CUDNN_TENSOR_NCHW, dt, n, ch, h, w), "output descriptor");

    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    DNN(cudnnFindConvolutionForwardAlgorithm(c->cudnn, e->xd, e->wd, e->cd, e->yd,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
        "cudnnFindConvolutionForwardAlgorithm");
    /* fastest first; F32 must stay off the TF32 tensor cores (results
     * measured with tensor-op math are skipped, and the descriptor keeps
     * CUDNN_FMA_MATH below: CUDNN_DEFAULT_MATH would permit TF32) */
    int pick = -1, f32 = dt == CUDNN_DATA_FLOAT;
    for (int i = 0; i < found && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
            !(f32 && (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                      perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)))
            pick = i;
    if (pick < 0) {
        sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                        "cuda conv2d: cuDNN has no deterministic algorithm%s for x [%lld, %lld, "
                        "%lld, %lld], w [%lld, %lld, %lld, %lld] (%d tried)",
                        f32 ? " without TF32" : "", (long long)k->n,
                        (long long)k->c, (long long)k->h, (long long)k->w,
                        (long long)k->o, (long long)k->c, (long long)k->kh, (long long)k->kw,
                        found);
        goto fail;
    }
    /* 16-bit: run with the math type the measurement used (cuDNN's advice) */
    if (!f32)
        DNN(cudnnSetConvolutionMathType(e->cd, perf[pick].mathType), "math type of the algorithm");
    e->algo = perf[pick].algo;
    e->ws = perf[pick].memory;
    e->next = c->convs->head;
    c->convs->head = e;
    return e;
fail:
    entry_free(e);
    return NULL;
}

sd_status sd_cuda_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b, int stride, int pad_h, int pad_w) {
    sd_cuda *c = sd_cuda_of(be);
    int64_t N = x->shape[0], O = w->shape[0], Ho = out->shape[2], Wo = out->shape[3];
    if (sd_bt_numel(out) == 0) return SD_OK;
    if (sd_bt_numel(x) == 0 || sd_bt_numel(w) == 0) { /* empty reduction: bias only */
        sd_status z = sd_cuda_check(be, cudaMemsetAsync(out->data, 0, out->nbytes, c->stream),
                                    "conv2d", "zero fill");
        if (z == SD_OK && b)
            z = sd_cuda_check(be, sd_cuda_bias_nchw(c->stream, sd_cuda_f32(out), sd_cuda_f32(b),
                                                    N, O, Ho * Wo),
                              "conv2d", "bias");
        return z;
    }
    if (sd_bt_numel(x) > INT_MAX || sd_bt_numel(out) > INT_MAX || sd_bt_numel(w) > INT_MAX)
        return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                               "cuda conv2d: a tensor of more than 2^31 elements (x %lld, out "
                               "%lld); split the batch",
                               (long long)sd_bt_numel(x), (long long)sd_bt_numel(out));

    /* the data type of the convolution and whether x / w / y need rounding */
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    if (w->dtype == SD_BF16) dt = CUDNN_DATA_BFLOAT16;
    else if (w->dtype == SD_F16) dt = CUDNN_DATA_HALF;
    else if (be->precision == SD_PREC_BF16) dt = CUDNN_DATA_BFLOAT16;
    else if (be->precision == SD_PREC_F16) dt = CUDNN_DATA_HALF;
    int half = dt != CUDNN_DATA_FLOAT, bf = dt == CUDNN_DATA_BFLOAT16;

    conv_key k;
    memset(&k, 0, sizeof k); /* padding bytes take part in memcmp */
    k.n = N;
    k.c = x->shape[1];
    k.h = x->shape[2];
    k.w = x->shape[3];
    k.o = O;
    k.kh = w->shape[2];
    k.kw = w->shape[3];
    k.stride = stride;
    k.pad_h = pad_h;
    k.pad_w = pad_w;
    k.dtype = (int)dt;
    conv_entry *e = entry_for(be, &k, Ho, Wo);
    if (!e) return be->err.code ? be->err.code : SD_ERR_IO;

    sd_status rc = SD_OK;
    void *xh = NULL, *wh = NULL, *yh = NULL, *ws = NULL;
    const void *xp = x->data, *wp = w->data;
    void *yp = out->data;
    if (half) {
        int64_t nx = sd_bt_numel(x), nw = sd_bt_numel(w), ny = sd_bt_numel(out);
        xh = sd_cuda_scratch(be, (size_t)nx * 2, "conv2d", "input in 16 bits");
        yh = xh ? sd_cuda_scratch(be, (size_t)ny * 2, "conv2d", "output in 16 bits") : NULL;
        if (!yh) goto done_nomem;
        rc = sd_cuda_check(be, sd_cuda_f32_to_half(c->stream, sd_cuda_f32(x), xh, nx, bf),
                           "conv2d", "rounding the input");
        if (rc != SD_OK) goto done;
        xp = xh;
        yp = yh;
        if (w->dtype == SD_F32) {
            wh = sd_cuda_scratch(be, (size_t)nw * 2, "conv2d", "weights in 16 bits");
            if (!wh) goto done_nomem;
            rc = sd_cuda_check(be, sd_cuda_f32_to_half(c->stream, sd_cuda_f32(w), wh, nw, bf),
                               "conv2d", "rounding the weights");
            if (rc != SD_OK) goto done;
            wp = wh;
        }
    }
    if (e->ws && !(ws = sd_cuda_scratch(be, e->ws, "conv2d", "cuDNN workspace"))) goto done_nomem;
    float one = 1.0f, zero = 0.0f;
    rc = sd_cuda_check_dnn(be,
                           cudnnConvolutionForward(c->cudnn, &one, e->xd, xp, e->wd, wp, e->cd,
                                                   e->algo, ws, e->ws, &zero, e->yd, yp),
                           "conv2d", "cudnnConvolutionForward");
    if (rc == SD_OK && half)
        rc = sd_cuda_check(be, sd_cuda_half_to_f32(c->stream, yh, sd_cuda_f32(out),
                                                   sd_bt_numel(out), bf),
                           "conv2d", "widening the output");
    if (rc == SD_OK && b)
        rc = sd_cuda_check(be, sd_cuda_bias_nchw(c->stream, sd_cuda_f32(out), sd_cuda_f32(b), N, O,
                                                 Ho * Wo),
                           "conv2d", "bias");
    goto done;
done_nomem:
    rc = SD_ERR_NOMEM;
done:
    sd_cuda_scratch_free(be, ws);
    sd_cuda_scratch_free(be, wh);
    sd_cuda_scratch_free(be, yh);
    sd_cuda_scratch_free(be, xh);
    return rc;
}
