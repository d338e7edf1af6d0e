/* cuda_conv.c - 2-D convolution on cuDNN, algorithm chosen once per shape.
 *
 * The first call for a (shape, stride, padding, precision, weight dtype)
 * chooses the algorithm, in this order:
 *   1. the choice stored by an earlier process, when the front end gave the
 *      backend an algorithm store (sd_backend_set_algo_store; the CLI keeps
 *      it in the SQLite cache) and cuDNN still accepts it for this shape;
 *   2. with a store but no stored choice: cudnnFindConvolutionForwardAlgorithmEx
 *      times the algorithms on the op's own buffers with a workspace we
 *      allocate and cap (min(256 MiB, a quarter of the free memory, what
 *      --gpu-memory leaves)), so measuring never allocates trial workspaces
 *      of its own (the non-Ex Find did, in bursts of tens of GB); the
 *      fastest deterministic result is stored;
 *   3. without a store: cuDNN's heuristics (cudnnGetConvolutionForwardAlgorithm_v7),
 *      no measuring at all: the first deterministic suggestion whose
 *      workspace fits the cap.
 * Deterministic only (the GPU path must give the same image run to run);
 * F32 never runs a tensor-op (TF32) algorithm. The choice and the
 * descriptors stay in a per-backend cache; later calls reuse them.
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
#include <stdint.h>
#include <stdio.h>
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
    int chosen; /* algo and ws are set (choose()) */
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

/* A cache entry for key k: found, or built with its descriptors (NULL on
 * error); the algorithm is chosen on first use (choose()). */
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

    e->next = c->convs->head;
    c->convs->head = e;
    return e;
fail:
    entry_free(e);
    return NULL;
}

/* ---- choosing the algorithm ------------------------------------------------------ */

#define WS_CAP_MAX ((size_t)256 << 20)

/* Workspace bytes measuring and heuristics may plan for. */
static size_t ws_cap(sd_backend *be) {
    sd_cuda *c = sd_cuda_of(be);
    size_t free_b = 0, total_b = 0, cap = WS_CAP_MAX;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b / 4 < cap) cap = free_b / 4;
    cudaGetLastError();
    size_t limit = sd_cuda_alloc_limit(c->alloc), live = 0, cached = 0;
    sd_cuda_alloc_stats(c->alloc, &live, &cached);
    if (limit) cap = live >= limit ? 0 : (limit - live < cap ? limit - live : cap);
    return cap;
}

/* Usable: ran, deterministic, no TF32 for F32 data, workspace within cap. */
static int usable(const cudnnConvolutionFwdAlgoPerf_t *p, int f32, size_t cap) {
    return p->status == CUDNN_STATUS_SUCCESS && p->determinism == CUDNN_DETERMINISTIC &&
           p->memory <= cap &&
           !(f32 && (p->mathType == CUDNN_TENSOR_OP_MATH ||
                     p->mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

static const char *dtype_name(int dt) {
    return dt == CUDNN_DATA_BFLOAT16 ? "bf16" : dt == CUDNN_DATA_HALF ? "f16" : "f32";
}

/* Sets e->algo, e->ws and (16-bit) the descriptor's math type. x, w, y are
 * the op's device buffers in the convolution's data type (measuring runs on
 * them; y is written, the real call overwrites it afterwards). */
static sd_status choose(sd_backend *be, conv_entry *e, const void *x, const void *w, void *y) {
    sd_cuda *c = sd_cuda_of(be);
    const conv_key *k = &e->key;
    int f32 = k->dtype == CUDNN_DATA_FLOAT;
    sd_status rc = SD_OK;
    size_t cap = ws_cap(be);
    const sd_algo_store_i *store = sd_backend_algo_store(be);

    /* the key: GPU and architecture (device_name is "cuda:N (name, sm_XY)"),
     * cuDNN version, op, shape, data type, layout */
    char dev[320], lib[32], shape[160];
    const char *open = strchr(c->device_name, '(');
    snprintf(dev, sizeof dev, "%s", open ? open + 1 : c->device_name);
    char *close = strrchr(dev, ')');
    if (close) *close = '\0';
    snprintf(lib, sizeof lib, "cudnn %zu", cudnnGetVersion());
    snprintf(shape, sizeof shape, "x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] s%d p%d,%d",
             (long long)k->n, (long long)k->c, (long long)k->h, (long long)k->w, (long long)k->o,
             (long long)k->c, (long long)k->kh, (long long)k->kw, k->stride, k->pad_h, k->pad_w);
    sd_algo_key ak = {dev, lib, "conv2d_fwd", shape, dtype_name(k->dtype), "nchw"};

    /* 1. a stored choice cuDNN still takes */
    sd_algo_choice ch;
    if (store && store->get(store->self, &ak, &ch) && ch.algo >= 0 &&
        ch.algo < CUDNN_CONVOLUTION_FWD_ALGO_COUNT && ch.math >= 0 &&
        ch.math <= CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
        !(f32 && ch.math != CUDNN_FMA_MATH && ch.math != CUDNN_DEFAULT_MATH)) {
        size_t need = 0;
        if (!f32 && cudnnSetConvolutionMathType(e->cd, (cudnnMathType_t)ch.math) != CUDNN_STATUS_SUCCESS)
            need = SIZE_MAX;
        else if (cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, e->xd, e->wd, e->cd, e->yd,
                                                         (cudnnConvolutionFwdAlgo_t)ch.algo,
                                                         &need) != CUDNN_STATUS_SUCCESS)
            need = SIZE_MAX;
        if (need != SIZE_MAX) {
            e->algo = (cudnnConvolutionFwdAlgo_t)ch.algo;
            e->ws = need;
            e->chosen = 1;
            return SD_OK;
        }
        /* cuDNN refuses it now: measure again (and store the new choice) */
        if (!f32) cudnnSetConvolutionMathType(e->cd, CUDNN_TENSOR_OP_MATH);
    }

    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0, pick = -1;
    if (store) {
        /* 2. measure, in a workspace of our own within the cap (halved
         * until the allocator grants it; its failures set no error) */
        void *ws = NULL;
        size_t wsn = cap;
        cudaError_t ae = cudaSuccess;
        while (wsn && !(ws = sd_cuda_alloc_get(c->alloc, wsn, &ae))) wsn /= 2;
        cudaGetLastError();
        rc = sd_cuda_check_dnn(be,
                               cudnnFindConvolutionForwardAlgorithmEx(
                                   c->cudnn, e->xd, x, e->wd, w, e->cd, e->yd, y,
                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, ws, wsn),
                               "conv2d", "cudnnFindConvolutionForwardAlgorithmEx");
        if (ws) sd_cuda_alloc_put(c->alloc, ws);
        if (rc != SD_OK) return rc;
        cap = wsn;
    } else {
        /* 3. heuristics only */
        rc = sd_cuda_check_dnn(be,
                               cudnnGetConvolutionForwardAlgorithm_v7(
                                   c->cudnn, e->xd, e->wd, e->cd, e->yd,
                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
                               "conv2d", "cudnnGetConvolutionForwardAlgorithm_v7");
        if (rc != SD_OK) return rc;
    }
    /* fastest (or most recommended) first */
    for (int i = 0; i < found && pick < 0; i++)
        if (usable(&perf[i], f32, cap)) pick = i;
    if (pick < 0)
        return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                               "cuda conv2d: cuDNN has no deterministic algorithm%s within a %zu MiB "
                               "workspace for x [%lld, %lld, %lld, %lld], w [%lld, %lld, %lld, %lld] "
                               "(%d %s)",
                               f32 ? " without TF32" : "", cap >> 20, (long long)k->n, (long long)k->c,
                               (long long)k->h, (long long)k->w, (long long)k->o, (long long)k->c,
                               (long long)k->kh, (long long)k->kw, found, store ? "measured" : "suggested");
    /* 16-bit: run with the math type the measurement used (cuDNN's advice);
     * F32 keeps CUDNN_FMA_MATH */
    if (!f32) {
        rc = sd_cuda_check_dnn(be, cudnnSetConvolutionMathType(e->cd, perf[pick].mathType), "conv2d",
                               "math type of the algorithm");
        if (rc != SD_OK) return rc;
    }
    e->algo = perf[pick].algo;
    e->ws = perf[pick].memory;
    e->chosen = 1;
    if (store) {
        sd_algo_choice v = {(int64_t)e->algo, (int64_t)(f32 ? CUDNN_FMA_MATH : perf[pick].mathType),
                            (int64_t)e->ws};
        store->put(store->self, &ak, &v);
    }
    return SD_OK;
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
    if (!e->chosen && (rc = choose(be, e, xp, wp, yp)) != SD_OK) goto done;
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
