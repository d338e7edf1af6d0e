/* cuda_impl.h - internals of the CUDA backend shared by its C files.
 *
 * One backend = one device, one non-blocking stream, one cuBLAS and one
 * cuDNN handle bound to that stream, a caching allocator, and the cache of
 * convolution algorithms. Everything is enqueued on the one stream, so a
 * block returned to the allocator may be handed out again at once: the
 * next user's work is ordered after the last reader's.
 *
 * Error handling: every CUDA/cuBLAS/cuDNN status is checked; a failure sets
 * the backend's sticky error through sd_backend_fail with the op name and,
 * for allocations, the byte count (sd_cuda_check*). Kernel faults that only
 * surface at a synchronisation are reported by the download that syncs.
 */
#ifndef SD_CUDA_IMPL_H
#define SD_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "kernels/backend_impl.h"
#include "kernels/cuda/cuda_kernels.h"

/* ---- caching allocator (cuda_alloc.c) ---------------------------------- */

typedef struct sd_cuda_alloc sd_cuda_alloc;

sd_cuda_alloc *sd_cuda_alloc_new(void);
/* Frees every cached and live block (the stream must be idle). */
void sd_cuda_alloc_free(sd_cuda_alloc *a);
/* A block of at least n bytes (n > 0) with one reference, from the cache
 * of its size class or cudaMalloc; when cudaMalloc fails the cache is
 * released and the allocation retried once. NULL on failure, *cerr set. */
void *sd_cuda_alloc_get(sd_cuda_alloc *a, size_t n, cudaError_t *cerr);
/* One more reference to a block returned by sd_cuda_alloc_get (views). */
void sd_cuda_alloc_ref(sd_cuda_alloc *a, void *p);
/* Drop a reference; at zero the block goes back to its size class. */
void sd_cuda_alloc_put(sd_cuda_alloc *a, void *p);
/* Bytes held in live blocks and in the cache. */
void sd_cuda_alloc_stats(const sd_cuda_alloc *a, size_t *live, size_t *cached);
/* Cap on the bytes held (live + cached; 0 = none): an allocation that
 * would pass it releases the cache, then fails with
 * cudaErrorMemoryAllocation without asking the device (--gpu-memory). */
void sd_cuda_alloc_set_limit(sd_cuda_alloc *a, size_t bytes);
size_t sd_cuda_alloc_limit(const sd_cuda_alloc *a);
/* cudaFree every cached block (after an out-of-memory). */
void sd_cuda_alloc_trim(sd_cuda_alloc *a);

/* ---- the backend state ------------------------------------------------------ */

typedef struct sd_cuda_conv_cache sd_cuda_conv_cache;

typedef struct sd_cuda {
    int device;
    char device_name[320];
    int n_devices;
    size_t max_smem_optin; /* shared memory per block after opting in */
    /* scratch bound of one query chunk of the tensor-core attention
     * (cuda_attn.c); 0 = always the F32 kernel. SDFLOW_CUDA_ATTN_SCRATCH */
    size_t attn_scratch;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    sd_cuda_alloc *alloc;
    sd_cuda_conv_cache *convs;
} sd_cuda;

static inline sd_cuda *sd_cuda_of(sd_backend *be) { return (sd_cuda *)be->impl; }
static inline float *sd_cuda_f32(const sd_bt *t) { return (float *)t->data; }

/* Make the backend's device current on the calling thread (a no-op on
 * one-GPU machines); storage entry points call it, so a backend created on
 * one thread can be used from another. */
sd_status sd_cuda_use_device(sd_backend *be);

/* Status checks: SD_OK, or the sticky error "cuda <op>: <what>: <reason>". */
sd_status sd_cuda_check(sd_backend *be, cudaError_t e, const char *op, const char *what);
sd_status sd_cuda_check_blas(sd_backend *be, cublasStatus_t e, const char *op, const char *what);
sd_status sd_cuda_check_dnn(sd_backend *be, cudnnStatus_t e, const char *op, const char *what);

/* Scratch device memory for op `op` (freed with sd_cuda_scratch_free);
 * NULL with the sticky error naming op, purpose and bytes on failure. */
void *sd_cuda_scratch(sd_backend *be, size_t n, const char *op, const char *what);
void sd_cuda_scratch_free(sd_backend *be, void *p);

/* The kernels' storage type (enum sd_cuda_elem) of a float dtype. */
static inline int sd_cuda_elem_of(sd_dtype dt) {
    switch (dt) {
    case SD_F16: return SD_CUDA_ELEM_F16;
    case SD_BF16: return SD_CUDA_ELEM_BF16;
    case SD_F8_E4M3: return SD_CUDA_ELEM_F8_E4M3;
    case SD_F8_E5M2: return SD_CUDA_ELEM_F8_E5M2;
    default: return SD_CUDA_ELEM_F32;
    }
}

/* The kernels' quantized type (enum sd_cuda_quant) of a dtype, 0 if none. */
static inline int sd_cuda_quant_of(sd_dtype dt) {
    switch (dt) {
    case SD_Q4_0: return SD_CUDA_Q4_0;
    case SD_Q4_1: return SD_CUDA_Q4_1;
    case SD_Q5_0: return SD_CUDA_Q5_0;
    case SD_Q5_1: return SD_CUDA_Q5_1;
    case SD_Q8_0: return SD_CUDA_Q8_0;
    case SD_Q2_K: return SD_CUDA_Q2_K;
    case SD_Q3_K: return SD_CUDA_Q3_K;
    case SD_Q4_K: return SD_CUDA_Q4_K;
    case SD_Q5_K: return SD_CUDA_Q5_K;
    case SD_Q6_K: return SD_CUDA_Q6_K;
    case SD_IQ4_NL: return SD_CUDA_IQ4_NL;
    case SD_IQ4_XS: return SD_CUDA_IQ4_XS;
    default: return 0;
    }
}

/* ---- cuda_blas.c / cuda_conv.c --------------------------------------------- */

sd_status sd_cuda_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b);
sd_status sd_cuda_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                         float alpha);
sd_status sd_cuda_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b, int stride, int pad_h, int pad_w);
sd_cuda_conv_cache *sd_cuda_conv_cache_new(void);
void sd_cuda_conv_cache_free(sd_cuda_conv_cache *c);

/* ---- cuda_ops.c: the ops on our own kernels ---------------------------------- */

sd_status sd_cuda_op_pad2d(sd_backend *be, sd_bt *out, const sd_bt *x, int left, int top);
sd_status sd_cuda_op_group_norm(sd_backend *be, sd_bt *out, const sd_bt *x, int groups,
                                const sd_bt *gamma, const sd_bt *beta, float eps, int silu);
sd_status sd_cuda_op_layer_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                                const sd_bt *beta, float eps);
/* cuda_attn.c: tensor-core GEMMs in BF16/F16 modes, else the F32 kernel */
sd_status sd_cuda_op_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                               const sd_bt *v, const sd_attn_args *a);
sd_status sd_cuda_op_rms_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                              float eps);
sd_status sd_cuda_op_rope(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *rot, int heads,
                          int interleaved);
sd_status sd_cuda_op_binary(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                            const int64_t *b_strides, int op);
sd_status sd_cuda_op_add_channel(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *b);
sd_status sd_cuda_op_unary(sd_backend *be, sd_bt *out, const sd_bt *x, int op, float s);
sd_status sd_cuda_op_geglu(sd_backend *be, sd_bt *out, const sd_bt *x);
sd_status sd_cuda_op_softmax(sd_backend *be, sd_bt *out, const sd_bt *x);
sd_status sd_cuda_op_upsample2x(sd_backend *be, sd_bt *out, const sd_bt *x);
sd_status sd_cuda_op_concat(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int dim);
sd_status sd_cuda_op_slice(sd_backend *be, sd_bt *out, const sd_bt *x, int dim, int64_t start);
sd_status sd_cuda_op_permute(sd_backend *be, sd_bt *out, const sd_bt *x, const int *perm);
sd_status sd_cuda_op_embedding(sd_backend *be, sd_bt *out, const sd_bt *table, const sd_bt *ids);
sd_status sd_cuda_op_copy(sd_backend *be, sd_bt *out, const sd_bt *x);

/* ---- cuda_pixel.c: the ops of the image-to-image models ------------------------ */

sd_status sd_cuda_op_prelu(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w);
sd_status sd_cuda_op_pixel_shuffle(sd_backend *be, sd_bt *out, const sd_bt *x, int r,
                                   int inverse);
sd_status sd_cuda_op_upsample_nearest(sd_backend *be, sd_bt *out, const sd_bt *x, int factor);

#endif
