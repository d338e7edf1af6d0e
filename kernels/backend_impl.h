/* backend_impl.h - what a backend implements (internal to kernels/).
 *
 * kernels/backend.c owns everything backends share: the sticky error, argument and
 * shape validation of every sd_op_*, allocation of the result through the
 * vtable, and NULL propagation. A backend (cpu_backend.c, kernels/cuda)
 * fills an sd_backend_i whose op entries receive validated inputs (all F32
 * unless stated) and a freshly allocated `out` of the right shape whose
 * contents are UNDEFINED (every op writes all of it), and return SD_OK or a
 * failure code after calling sd_backend_fail().
 */
#ifndef SD_BACKEND_IMPL_H
#define SD_BACKEND_IMPL_H

#include "kernels/backend.h"

/* sd_op_attention(_ex) resolved for a kernel: q [N, Lq, heads*D], k/v
 * [N, Lk, kv_heads*D] (heads a multiple of kv_heads), scale never 0. bias
 * (F32, or NULL) is read at bias[n*bs[0] + h*bs[1] + i*bs[2] + j] for query
 * row i and key j: a stride of 0 broadcasts that dim. */
typedef struct sd_attn_args {
    int heads, kv_heads, causal;
    float scale;
    const sd_bt *bias;
    int64_t bias_stride[3];
} sd_attn_args;

typedef struct sd_backend_i {
    const char *name;
    void (*destroy)(sd_backend *be); /* frees be->impl */

    /* storage: fill t->data / t->host for t's dtype and shape; zeroed when
     * `zero`, else uninitialised (op results: skipping the memset saves a
     * full pass over memory for every large activation) */
    sd_status (*alloc)(sd_backend *be, sd_bt *t, int zero);
    void (*release)(sd_bt *t);
    /* t's dtype/shape are set; take src's data (sharing when dtypes match) */
    sd_status (*upload)(sd_backend *be, sd_bt *t, sd_tensor *src);
    sd_tensor *(*download)(const sd_bt *t);
    /* v's dtype/shape are set; make it share src's storage */
    sd_status (*share)(sd_bt *v, sd_bt *src);

    sd_status (*linear)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b);
    sd_status (*matmul)(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                        float alpha);
    sd_status (*conv2d)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b,
                        int stride, int pad_h, int pad_w);
    sd_status (*pad2d)(sd_backend *be, sd_bt *out, const sd_bt *x, int left, int top);
    sd_status (*group_norm)(sd_backend *be, sd_bt *out, const sd_bt *x, int groups,
                            const sd_bt *gamma, const sd_bt *beta, float eps, int silu);
    sd_status (*layer_norm)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                            const sd_bt *beta, float eps);
    sd_status (*attention)(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                           const sd_bt *v, const struct sd_attn_args *a);
    /* gamma: [C] or NULL */
    sd_status (*rms_norm)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                          float eps);
    /* rot: [L, D/2, 2] or [N, L, D/2, 2] (see sd_op_rope) */
    sd_status (*rope)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *rot, int heads,
                      int interleaved);
    /* b broadcast to a's shape via strides (0 for broadcast dims), ndim = a's */
    sd_status (*binary)(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                        const int64_t *b_strides, int op /* 0 add, 1 mul */);
    sd_status (*add_channel)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *b);
    sd_status (*unary)(sd_backend *be, sd_bt *out, const sd_bt *x, int op, float s);
    sd_status (*geglu)(sd_backend *be, sd_bt *out, const sd_bt *x);
    sd_status (*softmax)(sd_backend *be, sd_bt *out, const sd_bt *x);
    sd_status (*upsample2x)(sd_backend *be, sd_bt *out, const sd_bt *x);
    sd_status (*concat)(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int dim);
    sd_status (*slice)(sd_backend *be, sd_bt *out, const sd_bt *x, int dim, int64_t start);
    sd_status (*permute)(sd_backend *be, sd_bt *out, const sd_bt *x, const int *perm);
    sd_status (*embedding)(sd_backend *be, sd_bt *out, const sd_bt *table, const sd_bt *ids);
    sd_status (*copy)(sd_backend *be, sd_bt *out, const sd_bt *x);
    /* w: [C] (per channel) or [1] (shared slope) */
    sd_status (*prelu)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w);
    /* inverse 0: PixelShuffle (x [N, C*r*r, H, W]); 1: pixel_unshuffle */
    sd_status (*pixel_shuffle)(sd_backend *be, sd_bt *out, const sd_bt *x, int r, int inverse);
    sd_status (*upsample_nearest)(sd_backend *be, sd_bt *out, const sd_bt *x, int factor);

    /* Optional. out (F32, x's shape; header only: the backend provides the
     * storage, and may reuse it once out is released, which backend.c does
     * right after the op) = x widened from F16/BF16/F8_E4M3/F8_E5M2
     * (exactly; then times x->scale in F32 when it is not 0), or from a
     * quantized dtype as core/quant.h computes it with x->dequant's
     * rounding. A backend that sets it accepts those
     * tensors wherever an op takes an input
     * (weights kept in their stored dtype): backend.c widens each such
     * input into a temporary just for the op, except an F16/BF16 embedding
     * table, which `embedding` then receives in its stored float dtype (a
     * gather widens only the rows it reads; a quantized table is widened
     * whole first, as ComfyUI-GGUF does). NULL: ops take F32 only. */
    sd_status (*to_f32)(sd_backend *be, sd_bt *out, const sd_bt *x);

    /* Optional. 1 when the backend computes in precision p (F32: always).
     * NULL: the backend handles every precision mode inside its own kernels
     * (the CUDA one). */
    int (*supports_precision)(const sd_backend *be, sd_precision p);
    /* Optional. The three matrix ops when be->precision is not F32. Unlike
     * the slots above they receive x/w/a/b in their stored dtype (F32, F16,
     * BF16 or fp8: backend.c widens only quantized and scaled fp8 ones), so F16 weights can be
     * rounded straight to the compute type; the bias may be narrow too. They
     * report "no such path" through sd_backend_fail themselves. NULL: the
     * F32 slots run with widened inputs whatever the precision. */
    sd_status (*linear_lp)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                           const sd_bt *b);
    sd_status (*matmul_lp)(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                           int trans_b, float alpha);
    sd_status (*conv2d_lp)(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                           const sd_bt *b, int stride, int pad_h, int pad_w);

    /* Optional. Cap the device memory the backend's allocator holds (live +
     * cached) at `bytes` (0 = no cap). NULL: the backend has no device
     * memory of its own (the CPU), and sd_backend_set_memory_limit refuses. */
    void (*set_memory_limit)(sd_backend *be, uint64_t bytes);
} sd_backend_i;

enum sd_unary_op {
    SD_UNARY_SCALE = 0,
    SD_UNARY_SILU,
    SD_UNARY_GELU,
    SD_UNARY_QUICK_GELU,
    SD_UNARY_TANH,
    SD_UNARY_RELU,
    SD_UNARY_LEAKY_RELU, /* s = negative slope */
    SD_UNARY_GELU_TANH,
    SD_UNARY_ELU,        /* s = alpha */
    SD_UNARY_HARDSWISH,
    SD_UNARY_SIGMOID,
    SD_UNARY_SOFTSIGN,
    SD_UNARY_MISH
};

struct sd_backend {
    const sd_backend_i *vt;
    void *impl;
    int n_threads;
    sd_precision precision;
    sd_error err; /* sticky: err.code != SD_OK once something failed */
    sd_algo_store_i algo_store; /* get == NULL: none (sd_backend_set_algo_store) */
};

/* Set the sticky error unless one is already set (the first error is the
 * one worth reporting). Returns the code. */
sd_status sd_backend_fail(sd_backend *be, sd_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Backend constructors (one per backend folder, kernels/cpu and
 * kernels/cuda): fill be->vt and be->impl. Each backend defines only its own;
 * kernels/backends.c lists the ones this build has (the CUDA one when the
 * build defines SDFLOW_HAVE_CUDA, cmake/cuda.cmake). */
sd_status sd_cpu_backend_init(sd_backend *be, int n_threads, sd_error *err);
sd_status sd_cuda_backend_init(sd_backend *be, int n_threads, sd_error *err);
/* Usable CUDA devices (cudaGetDeviceCount; 0 when the driver or a device is
 * missing). Never fails loudly: it only decides the default device. */
int sd_cuda_device_count(void);

/* The backends compiled into this build, by the name sd_backend_new takes. */
typedef struct sd_backend_entry {
    const char *name;
    sd_status (*init)(sd_backend *be, int n_threads, sd_error *err);
    int (*device_count)(void); /* NULL: always one (the CPU) */
} sd_backend_entry;

/* The entry named `name`, or NULL when this build has no such backend. */
const sd_backend_entry *sd_backend_find(const char *name);

#endif
