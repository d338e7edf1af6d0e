/* cuda_backend.c - the CUDA backend: device selection, handles, storage
 * (upload, download, views) on the caching allocator, and the vtable. */
#include "kernels/cuda/cuda_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SD_CUDA_DIMS == SD_MAX_DIMS, "cuda_kernels.h dims must match SD_MAX_DIMS");

/* ---- status checks ------------------------------------------------------------ */

sd_status sd_cuda_check(sd_backend *be, cudaError_t e, const char *op, const char *what) {
    if (e == cudaSuccess) return SD_OK;
    sd_status code = e == cudaErrorMemoryAllocation ? SD_ERR_NOMEM : SD_ERR_IO;
    return sd_backend_fail(be, code, "cuda %s: %s: %s (%s)", op, what, cudaGetErrorString(e),
                           cudaGetErrorName(e));
}

sd_status sd_cuda_check_blas(sd_backend *be, cublasStatus_t e, const char *op, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS) return SD_OK;
    sd_status code = e == CUBLAS_STATUS_ALLOC_FAILED ? SD_ERR_NOMEM : SD_ERR_IO;
    return sd_backend_fail(be, code, "cuda %s: %s: cuBLAS %s (%s)", op, what,
                           cublasGetStatusString(e), cublasGetStatusName(e));
}

sd_status sd_cuda_check_dnn(sd_backend *be, cudnnStatus_t e, const char *op, const char *what) {
    if (e == CUDNN_STATUS_SUCCESS) return SD_OK;
    sd_status code = e == CUDNN_STATUS_ALLOC_FAILED ? SD_ERR_NOMEM : SD_ERR_IO;
    return sd_backend_fail(be, code, "cuda %s: %s: cuDNN %s", op, what, cudnnGetErrorString(e));
}

sd_status sd_cuda_use_device(sd_backend *be) {
    sd_cuda *c = sd_cuda_of(be);
    if (c->n_devices < 2) return SD_OK;
    return sd_cuda_check(be, cudaSetDevice(c->device), "set device", c->device_name);
}

/* The out-of-memory message names the op, the purpose and the sizes, and
 * what the device had left, so a user can tell a leak from a big image. */
static void fail_alloc(sd_backend *be, cudaError_t e, size_t n, const char *op, const char *what) {
    sd_cuda *c = sd_cuda_of(be);
    size_t free_b = 0, total_b = 0, live = 0, cached = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    sd_cuda_alloc_stats(c->alloc, &live, &cached);
    size_t cap = sd_cuda_alloc_limit(c->alloc);
    char capmsg[80] = "";
    if (cap) snprintf(capmsg, sizeof capmsg, "; --gpu-memory caps it at %zu MiB", cap >> 20);
    sd_backend_fail(be, e == cudaErrorMemoryAllocation ? SD_ERR_NOMEM : SD_ERR_IO,
                    "cuda %s: cannot allocate %zu bytes for %s on %s: %s (device: %zu MiB free "
                    "of %zu MiB; this backend holds %zu MiB live, %zu MiB cached%s)",
                    op, n, what, c->device_name, cudaGetErrorString(e), free_b >> 20,
                    total_b >> 20, live >> 20, cached >> 20, capmsg);
}

void *sd_cuda_scratch(sd_backend *be, size_t n, const char *op, const char *what) {
    cudaError_t e;
    void *p = sd_cuda_alloc_get(sd_cuda_of(be)->alloc, n ? n : 1, &e);
    if (!p) fail_alloc(be, e, n, op, what);
    return p;
}

void sd_cuda_scratch_free(sd_backend *be, void *p) { sd_cuda_alloc_put(sd_cuda_of(be)->alloc, p); }

/* ---- storage ---------------------------------------------------------------------- */

static sd_status cu_alloc(sd_backend *be, sd_bt *t, int zero) {
    sd_cuda *c = sd_cuda_of(be);
    t->host = NULL;
    t->data = NULL;
    if (t->nbytes == 0) return SD_OK;
    if (sd_cuda_use_device(be) != SD_OK) return SD_ERR_IO;
    char shape[96];
    int off = snprintf(shape, sizeof shape, "a %s tensor [", sd_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && off < (int)sizeof shape; i++)
        off += snprintf(shape + off, sizeof shape - off, i ? ", %lld" : "%lld",
                        (long long)t->shape[i]);
    if (off < (int)sizeof shape) snprintf(shape + off, sizeof shape - off, "]");
    void *p = sd_cuda_scratch(be, t->nbytes, "alloc", shape);
    if (!p) return SD_ERR_NOMEM;
    /* op results are written whole by their op; sd_bt_new asks for zeros */
    if (zero && sd_cuda_check(be, cudaMemsetAsync(p, 0, t->nbytes, c->stream), "alloc",
                              "zeroing") != SD_OK) {
        sd_cuda_alloc_put(c->alloc, p);
        return SD_ERR_IO;
    }
    t->data = p;
    return SD_OK;
}

static void cu_release(sd_bt *t) {
    if (t->data) sd_cuda_alloc_put(sd_cuda_of(t->be)->alloc, t->data);
    t->data = NULL;
}

/* Weights keep their stored dtype (F16/BF16 halve the device memory, fp8
 * quarters it, GGUF's quantized types take 2.6 to 8.5 bits per weight; ops
 * widen them per op through cu_to_f32); a requested
 * conversion happens on the host before the copy. */
static sd_status cu_upload(sd_backend *be, sd_bt *t, sd_tensor *src) {
    sd_cuda *c = sd_cuda_of(be);
    sd_tensor *h = src->dtype == t->dtype ? src : sd_tensor_to_dtype(src, t->dtype);
    if (!h) return SD_ERR_NOMEM;
    sd_status rc = cu_alloc(be, t, 0);
    if (rc == SD_OK && t->nbytes) {
        rc = sd_cuda_check(be, cudaMemcpyAsync(t->data, h->data, t->nbytes,
                                               cudaMemcpyHostToDevice, c->stream),
                           "upload", "host to device copy");
        /* pageable source: wait, so the caller may free or change it */
        if (rc == SD_OK)
            rc = sd_cuda_check(be, cudaStreamSynchronize(c->stream), "upload", "synchronise");
        if (rc != SD_OK) cu_release(t);
    }
    if (h != src) sd_tensor_unref(h);
    return rc;
}

static sd_tensor *cu_download(const sd_bt *t) {
    sd_backend *be = t->be;
    sd_cuda *c = sd_cuda_of(be);
    if (sd_cuda_use_device(be) != SD_OK) return NULL;
    sd_tensor *h = sd_tensor_new(t->dtype, t->ndim, t->shape);
    if (!h) return NULL;
    if (t->nbytes &&
        (sd_cuda_check(be, cudaMemcpyAsync(h->data, t->data, t->nbytes, cudaMemcpyDeviceToHost,
                                           c->stream),
                       "download", "device to host copy") != SD_OK ||
         sd_cuda_check(be, cudaStreamSynchronize(c->stream), "download",
                       "synchronise (a kernel enqueued earlier may have failed)") != SD_OK)) {
        sd_tensor_unref(h);
        return NULL;
    }
    if (sd_dtype_is_float(t->dtype) && t->dtype != SD_F32) {
        sd_tensor *f = sd_tensor_to_dtype(h, SD_F32);
        sd_tensor_unref(h);
        return f;
    }
    return h;
}

/* out (header only) = x widened to F32 in fresh device memory, released
 * with out by backend.c right after the op that needed it. */
static sd_status cu_to_f32(sd_backend *be, sd_bt *out, const sd_bt *x) {
    if (cu_alloc(be, out, 0) != SD_OK) return SD_ERR_NOMEM;
    cudaStream_t s = sd_cuda_of(be)->stream;
    cudaError_t e = sd_dtype_is_quantized(x->dtype)
                        ? sd_cuda_dequant(s, x->data, out->data, sd_bt_numel(x), sd_cuda_quant_of(x->dtype),
                                          (int)x->dequant, sd_dtype_block(x->dtype), (int)sd_dtype_size(x->dtype))
                        : sd_cuda_widen(s, x->data, out->data, sd_bt_numel(x), sd_cuda_elem_of(x->dtype), x->scale);
    sd_status rc = sd_cuda_check(be, e, "widen", "launch");
    if (rc != SD_OK) cu_release(out);
    return rc;
}

static sd_status cu_share(sd_bt *v, sd_bt *src) {
    v->host = NULL;
    v->data = src->data;
    if (v->data) sd_cuda_alloc_ref(sd_cuda_of(src->be)->alloc, v->data);
    return SD_OK;
}

/* ---- lifetime ------------------------------------------------------------------------ */

static void cu_destroy(sd_backend *be) {
    sd_cuda *c = be->impl;
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    sd_cuda_conv_cache_free(c->convs);
    if (c->cudnn) cudnnDestroy(c->cudnn);
    if (c->cublas) cublasDestroy(c->cublas);
    sd_cuda_alloc_free(c->alloc);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
    be->impl = NULL;
}

static void cuda_set_memory_limit(sd_backend *be, uint64_t bytes);

static const sd_backend_i cuda_vtable = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .release = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .share = cu_share,
    .linear = sd_cuda_linear,
    .matmul = sd_cuda_matmul,
    .conv2d = sd_cuda_conv2d,
    .pad2d = sd_cuda_op_pad2d,
    .group_norm = sd_cuda_op_group_norm,
    .layer_norm = sd_cuda_op_layer_norm,
    .attention = sd_cuda_op_attention,
    .rms_norm = sd_cuda_op_rms_norm,
    .rope = sd_cuda_op_rope,
    .binary = sd_cuda_op_binary,
    .add_channel = sd_cuda_op_add_channel,
    .unary = sd_cuda_op_unary,
    .geglu = sd_cuda_op_geglu,
    .softmax = sd_cuda_op_softmax,
    .upsample2x = sd_cuda_op_upsample2x,
    .concat = sd_cuda_op_concat,
    .slice = sd_cuda_op_slice,
    .permute = sd_cuda_op_permute,
    .embedding = sd_cuda_op_embedding,
    .copy = sd_cuda_op_copy,
    .prelu = sd_cuda_op_prelu,
    .pixel_shuffle = sd_cuda_op_pixel_shuffle,
    .upsample_nearest = sd_cuda_op_upsample_nearest,
    .to_f32 = cu_to_f32,
    .set_memory_limit = cuda_set_memory_limit,
};

int sd_cuda_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

static void cuda_set_memory_limit(sd_backend *be, uint64_t bytes) {
    sd_cuda_alloc_set_limit(sd_cuda_of(be)->alloc, bytes > SIZE_MAX ? SIZE_MAX : (size_t)bytes);
}

/* Device: SDFLOW_CUDA_DEVICE=<index> when set, else device 0. n_threads is
 * the CPU backend's knob and has no meaning here. */
sd_status sd_cuda_backend_init(sd_backend *be, int n_threads, sd_error *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "backend 'cuda': no usable CUDA device (%s)",
                            e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    }
    int dev = 0;
    const char *env = getenv("SDFLOW_CUDA_DEVICE");
    if (env && *env) {
        char *end;
        long d = strtol(env, &end, 10);
        if (*end || d < 0 || d >= count)
            return sd_error_set(err, SD_ERR_INVALID,
                                "SDFLOW_CUDA_DEVICE='%s': expected a device index below %d", env,
                                count);
        dev = (int)d;
    }
    /* the tensor-core attention's scratch per query chunk (cuda_attn.c) */
    size_t attn_scratch = (size_t)256 << 20;
    if ((env = getenv("SDFLOW_CUDA_ATTN_SCRATCH")) && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end || *env == '-')
            return sd_error_set(err, SD_ERR_INVALID,
                                "SDFLOW_CUDA_ATTN_SCRATCH='%s': expected a byte count", env);
        attn_scratch = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    }
    sd_cuda *c = calloc(1, sizeof *c);
    if (!c) return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating the CUDA backend");
    c->device = dev;
    c->n_devices = count;
    be->impl = c; /* cu_destroy cleans up whatever was created */
    struct cudaDeviceProp prop;
    int smem = 0;
    const char *step = "cudaSetDevice";
    if ((e = cudaSetDevice(dev)) != cudaSuccess) goto cuda_fail;
    step = "cudaGetDeviceProperties";
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) goto cuda_fail;
    snprintf(c->device_name, sizeof c->device_name, "cuda:%d (%s, sm_%d%d)", dev, prop.name,
             prop.major, prop.minor);
    step = "shared memory limit";
    if ((e = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) !=
        cudaSuccess)
        goto cuda_fail;
    c->max_smem_optin = (size_t)smem;
    c->attn_scratch = attn_scratch;
    step = "cudaStreamCreate";
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        goto cuda_fail;
    c->alloc = sd_cuda_alloc_new();
    c->convs = sd_cuda_conv_cache_new();
    if (!c->alloc || !c->convs) {
        cu_destroy(be);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating the CUDA backend");
    }
    cublasStatus_t bs = cublasCreate(&c->cublas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->cublas, c->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu_destroy(be);
        return sd_error_set(err, SD_ERR_IO, "backend 'cuda': cuBLAS initialisation failed: %s",
                            cublasGetStatusString(bs));
    }
    cudnnStatus_t ds = cudnnCreate(&c->cudnn);
    if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(c->cudnn, c->stream);
    if (ds != CUDNN_STATUS_SUCCESS) {
        cu_destroy(be);
        return sd_error_set(err, SD_ERR_IO, "backend 'cuda': cuDNN initialisation failed: %s",
                            cudnnGetErrorString(ds));
    }
    be->vt = &cuda_vtable;
    return SD_OK;

cuda_fail:
    cudaGetLastError();
    cu_destroy(be);
    return sd_error_set(err, SD_ERR_IO, "backend 'cuda': %s on device %d failed: %s", step, dev,
                        cudaGetErrorString(e));
}
