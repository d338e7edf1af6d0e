/* backend.h - the one compute interface models are written against.
 *
 * Models (models/) never touch raw loops or a BLAS: they call sd_op_*()
 * functions on backend tensors (sd_bt). An sd_backend is a vtable
 * (sd_backend_i) plus state; kernels/cpu implements it now, kernels/cuda
 * later, so a model is written once. Ops are eager: each returns a new
 * tensor owned by the caller (release with sd_bt_free), or NULL on failure
 * with the backend's sticky error set (sd_backend_error), so a forward pass
 * can chain ops and check once per block.
 *
 * Layouts: activations are contiguous row-major, images NCHW, sequences
 * [N, L, C]. Linear weights are [out, in] as in PyTorch; conv weights
 * [out, in, kh, kw]. Compute is F32 unless the backend's precision says
 * otherwise; weights may be stored F32, F16, BF16 or fp8 (F8_E4M3, F8_E5M2)
 * and are read as stored.
 */
#ifndef SD_BACKEND_H
#define SD_BACKEND_H

#include <stdint.h>
#include "core/error.h"
#include "core/quant.h"
#include "core/tensor.h"

typedef struct sd_backend sd_backend;

/* A tensor living on a backend. `data` is device memory (host memory on the
 * CPU backend). Treat fields as read-only outside kernels/. */
typedef struct sd_bt {
    sd_dtype dtype;
    int ndim;
    int64_t shape[SD_MAX_DIMS];
    void *data;
    size_t nbytes;
    sd_backend *be;
    sd_tensor *host; /* CPU backend: the tensor owning data (may borrow an mmap) */
    /* Quantized dtypes (GGUF weights, core/quant.h): the arithmetic an op's
     * widening of this tensor rounds in, as ComfyUI-GGUF's dequant_dtype.
     * Set by the loader after upload (0, SD_DQ_F16, is ComfyUI-GGUF's
     * default); views keep it; ignored for other dtypes. */
    sd_dequant_math dequant;
    /* fp8 weights of ComfyUI's scaled-fp8 formats (models/checkpoint/
     * fp8_scaled.h): the per-tensor factor every widening multiplies in,
     * in F32 after the exact fp8 -> F32 step (comfy_kitchen's
     * dequantize_per_tensor_fp8 at F32 compute). 0: none (plain fp8 and
     * every other dtype). Set by the loader after upload; views and copies
     * keep it. The matrix ops' low-precision paths receive such a weight
     * already widened to F32 with its scale, as a quantized one. */
    float scale;
} sd_bt;

typedef enum sd_precision { SD_PREC_F32 = 0, SD_PREC_BF16, SD_PREC_F16 } sd_precision;

/* "f32", "bf16", "f16" <-> sd_precision. parse returns 0 on an unknown name
 * (*out untouched). */
int sd_precision_parse(const char *name, sd_precision *out);
const char *sd_precision_name(sd_precision p);

/* ---- creating backends ---------------------------------------------------- */

/* "cpu" or "cuda". n_threads <= 0 picks SDFLOW_THREADS, else the CPUs this
 * process may use (kernels/cpus.h); a bad SDFLOW_THREADS is SD_ERR_INVALID. */
sd_status sd_backend_new(const char *name, int n_threads, sd_backend **out, sd_error *err);
void sd_backend_free(sd_backend *be);
/* Devices the backend `name` can use here: 0 when this build lacks it or
 * (CUDA) no GPU or driver is present, 1 for "cpu". Cheap enough to call once
 * per process; never sets an error. */
int sd_backend_device_count(const char *name);
/* The backend a run uses when none is named: "cuda" when the build has it
 * and a GPU is present, else "cpu". */
const char *sd_backend_default_name(void);
/* Cap the device memory the backend holds (its live tensors plus its cache
 * of freed blocks) at `bytes`; 0 removes the cap. An allocation that would
 * pass it first releases the cache, then fails as out-of-memory naming the
 * cap. SD_ERR_UNSUPPORTED on a backend without device memory (the CPU). */
sd_status sd_backend_set_memory_limit(sd_backend *be, uint64_t bytes, sd_error *err);
const char *sd_backend_name(const sd_backend *be);
void sd_backend_set_precision(sd_backend *be, sd_precision p);
sd_precision sd_backend_precision(const sd_backend *be);
/* 1 when the backend really computes in precision p (F32: always). The CPU
 * backend has a bf16 path only when built with oneDNN (SDFLOW_DNNL); without
 * it, matrix ops run in bf16 mode fail rather than silently compute F32. */
int sd_backend_supports_precision(const sd_backend *be, sd_precision p);
/* 1 when ops accept tensors of dtype dt as inputs: F32 always; F16/BF16 and
 * fp8 (sd_dtype_is_narrow_float) and the quantized types (core/quant.h) on
 * backends that widen them per op (CPU and CUDA), so model loaders can keep
 * weights in their stored dtype
 * instead of widening them all to F32 at load. */
int sd_backend_accepts_dtype(const sd_backend *be, sd_dtype dt);
/* ---- measured algorithm choices ----------------------------------------------
 * A backend that picks algorithms by measuring them (CUDA: cuDNN's
 * convolutions) asks this store before it measures and gives it what it
 * measured, so the next process starts with the choice instead of paying
 * for the measurement again. The front end implements the store (the CLI
 * keeps it in the SQLite cache: cache/algo.h); the kernels never learn
 * where it lives. Key fields are strings the backend composes: device
 * (GPU name and architecture), library and version, op, shape, data type
 * and layout. Without a store the backend uses the library's heuristics
 * (no measuring). Calls come from the thread running the op. */
typedef struct sd_algo_key {
    const char *device, *library, *op, *shape, *dtype, *layout;
} sd_algo_key;
typedef struct sd_algo_choice {
    int64_t algo, math, workspace; /* the library's ids, and scratch bytes */
} sd_algo_choice;
typedef struct sd_algo_store_i {
    void *self;
    /* 1 with *out filled when a choice is stored for k; 0 on a miss or any
     * failure (the backend then measures). */
    int (*get)(void *self, const sd_algo_key *k, sd_algo_choice *out);
    /* Keep v for k; failures are the store's to report (a warning), the op
     * goes on with what it measured. */
    void (*put)(void *self, const sd_algo_key *k, const sd_algo_choice *v);
} sd_algo_store_i;
/* Use *store (copied; NULL detaches). store->self must outlive the backend,
 * or be detached before it goes. */
void sd_backend_set_algo_store(sd_backend *be, const sd_algo_store_i *store);
/* The store, or NULL when none is set. */
const sd_algo_store_i *sd_backend_algo_store(const sd_backend *be);

/* The first error since the last clear (ops return NULL once it is set). */
const sd_error *sd_backend_error(const sd_backend *be);
void sd_backend_clear_error(sd_backend *be);
/* Copy the sticky error into err and return its code (SD_OK when none). */
sd_status sd_backend_take_error(sd_backend *be, sd_error *err);

/* Process-wide allocator policy for programs that run models; call once
 * from main() before any thread starts. Every op result is fresh memory,
 * and with glibc's defaults freed blocks above the (dynamic) mmap threshold
 * and heap tops past the trim threshold go back to the kernel and come back
 * zeroed on the next op: measured ~12 % of a UNet step in clear_page.
 * This keeps freed memory below 32 MiB per block in the process instead
 * (the peak RSS, a high-water mark, moved by < 0.02 GiB). A library never
 * calls it by itself: it changes malloc for the whole process. No-op
 * outside glibc. */
void sd_backend_tune_allocator(void);

/* ---- tensors ---------------------------------------------------------------- */

sd_bt *sd_bt_new(sd_backend *be, sd_dtype dtype, int ndim, const int64_t *shape); /* zeroed */
sd_bt *sd_bt_new4(sd_backend *be, sd_dtype dtype, int ndim, int64_t d0, int64_t d1,
                  int64_t d2, int64_t d3);
/* Upload a host tensor. The CPU backend shares the storage (no copy) when the
 * dtype is kept; `dtype` = the tensor's dtype keeps it, else converts. */
sd_bt *sd_bt_from_host(sd_backend *be, sd_tensor *t, sd_dtype dtype);
/* Download into a new host tensor (F32 unless the bt is an integer type; a
 * quantized bt is widened with its `dequant` rounding, a scaled fp8 one
 * with its `scale`). */
sd_tensor *sd_bt_to_host(const sd_bt *t);
void sd_bt_free(sd_bt *t); /* NULL-safe */
int64_t sd_bt_numel(const sd_bt *t);
/* View with another shape of equal numel; shares storage, free separately
 * (the view does not outlive its source). */
sd_bt *sd_bt_view(sd_bt *t, int ndim, const int64_t *shape);

/* ---- ops (F32 activations; results are new tensors) ------------------------- */

/* y = x @ w^T + b.  x: [..., in], w: [out, in], b: [out] or NULL -> [..., out] */
sd_bt *sd_op_linear(sd_bt *x, sd_bt *w, sd_bt *b);
/* Batched matmul: a [B, M, K] @ b [B, K, N] (trans_b: b is [B, N, K]) -> [B, M, N] */
sd_bt *sd_op_matmul(sd_bt *a, sd_bt *b, int trans_b, float alpha);
/* 2-D convolution. x: [N, C, H, W], w: [O, C/groups... (groups=1)] [O, C, kh, kw],
 * b: [O] or NULL. Zero padding pad_h/pad_w on both sides. */
sd_bt *sd_op_conv2d(sd_bt *x, sd_bt *w, sd_bt *b, int stride, int pad_h, int pad_w);
/* Pad NCHW with zeros: left, right, top, bottom. */
sd_bt *sd_op_pad2d(sd_bt *x, int left, int right, int top, int bottom);
/* GroupNorm over [N, C, ...] with affine gamma/beta [C]; silu != 0 fuses SiLU. */
sd_bt *sd_op_group_norm(sd_bt *x, int groups, sd_bt *gamma, sd_bt *beta, float eps, int silu);
/* LayerNorm over the last dim with gamma/beta [C] (either may be NULL). */
sd_bt *sd_op_layer_norm(sd_bt *x, sd_bt *gamma, sd_bt *beta, float eps);
/* Multi-head attention. q: [N, Lq, H*D], k/v: [N, Lk, H*D] -> [N, Lq, H*D].
 * Scale 1/sqrt(D). causal != 0 masks keys after the query position (CLIP).
 * Never materialises the full [Lq, Lk] matrix for long sequences. */
sd_bt *sd_op_attention(sd_bt *q, sd_bt *k, sd_bt *v, int heads, int causal);
/* Attention with the knobs transformer families need (T5's position bias,
 * grouped-query attention, masks). q: [N, Lq, H*D], k/v: [N, Lk, Hkv*D]
 * -> [N, Lq, H*D]; query head h reads key/value head h / (H / Hkv). */
typedef struct sd_attn_opts {
    float scale;  /* softmax(q k^T * scale); 0 = 1/sqrt(D) */
    int causal;   /* mask keys after the query position */
    int kv_heads; /* heads of k and v (grouped-query attention); 0 = heads */
    /* Additive F32 [Nb, Hb, Lqb, Lk] with Nb in {1, N}, Hb in {1, H}, Lqb in
     * {1, Lq} (a dim of 1 broadcasts), added to the scaled scores before the
     * softmax; -inf masks a key. NULL = none. May be F16/BF16 (widened). */
    sd_bt *bias;
} sd_attn_opts;
/* opts NULL = sd_op_attention's defaults (scale 1/sqrt(D), no mask). A row
 * whose keys are all masked gives zeros. */
sd_bt *sd_op_attention_ex(sd_bt *q, sd_bt *k, sd_bt *v, int heads, const sd_attn_opts *opts);
/* RMSNorm over the last dim (T5's layer norm, the QK norms of DiTs, Qwen3):
 * y = (x * (1 / sqrt(mean(x^2) + eps))) * gamma, the mean in double, each
 * product rounded as torch's unfused formula does; gamma [C] or NULL. */
sd_bt *sd_op_rms_norm(sd_bt *x, sd_bt *gamma, float eps);
/* Rotary position embedding. x: [N, L, H*D]; rot: [L, D/2, 2] (every batch
 * item alike) or [N, L, D/2, 2], F32 (cos, sin) per position and frequency.
 * For each head and i < D/2 the pair (a, b) = interleaved ? (x[2i], x[2i+1])
 * (Flux's apply_rope) : (x[i], x[i + D/2]) (rotate_half: Llama, Qwen)
 * becomes (a*cos - b*sin, a*sin + b*cos), each product rounded before the
 * sum as torch computes it. */
sd_bt *sd_op_rope(sd_bt *x, sd_bt *rot, int heads, int interleaved);

/* Elementwise, with broadcasting of b over leading dims when b has fewer
 * elements and divides a (b's shape a suffix of a's, or [C] against NCHW when
 * bcast_channel). */
sd_bt *sd_op_add(sd_bt *a, sd_bt *b);
sd_bt *sd_op_mul(sd_bt *a, sd_bt *b);
/* x + b[c] for NCHW x and b: [N, C] (time embedding into ResBlocks). */
sd_bt *sd_op_add_channel(sd_bt *x, sd_bt *b);
sd_bt *sd_op_scale(sd_bt *x, float s);
sd_bt *sd_op_silu(sd_bt *x);
sd_bt *sd_op_gelu(sd_bt *x);        /* exact (erf) */
/* tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (torch gelu(approximate="tanh"): T5's gated FFN, the DiT MLPs) */
sd_bt *sd_op_gelu_tanh(sd_bt *x);
sd_bt *sd_op_quick_gelu(sd_bt *x);  /* x * sigmoid(1.702 x) */
sd_bt *sd_op_tanh(sd_bt *x);
sd_bt *sd_op_relu(sd_bt *x);
/* GEGLU: x [..., 2F] -> a * gelu(g) where a, g = x split in halves. */
sd_bt *sd_op_geglu(sd_bt *x);
/* Softmax over the last dim. */
sd_bt *sd_op_softmax(sd_bt *x);
/* Nearest-neighbour x2 upsampling of NCHW. */
sd_bt *sd_op_upsample_nearest2x(sd_bt *x);
/* Concatenate along dim (all other dims equal). */
sd_bt *sd_op_concat(sd_bt *a, sd_bt *b, int dim);
/* Slice [start, end) along dim. */
sd_bt *sd_op_slice(sd_bt *x, int dim, int64_t start, int64_t end);
/* Permute dims (e.g. NCHW -> NHWC with perm {0,2,3,1}). */
sd_bt *sd_op_permute(sd_bt *x, const int *perm);
/* Gather rows: table [V, C], ids (I32/I64) [N, L] -> [N, L, C]. */
sd_bt *sd_op_embedding(sd_bt *table, sd_bt *ids);
/* Copy of x (same backend). */
sd_bt *sd_op_copy(sd_bt *x);

/* ---- ops of the image-to-image models (models/upscale) ---------------------- */

/* LeakyReLU: x >= 0 ? x : slope * x (torch.nn.LeakyReLU). */
sd_bt *sd_op_leaky_relu(sd_bt *x, float slope);
/* The other activations of torch.nn (A1111 hypernetworks' activation_func),
 * each in torch's formula:
 *   elu       x > 0 ? x : alpha * (exp(x) - 1)   (nn.ELU, expm1)
 *   hardswish x * min(max(x + 3, 0), 6) / 6      (nn.Hardswish)
 *   sigmoid   1 / (1 + exp(-x))                  (nn.Sigmoid)
 *   softsign  x / (|x| + 1)                      (nn.Softsign)
 *   mish      x * tanh(log1p(exp(x)))            (nn.Mish) */
sd_bt *sd_op_elu(sd_bt *x, float alpha);
sd_bt *sd_op_hardswish(sd_bt *x);
sd_bt *sd_op_sigmoid(sd_bt *x);
sd_bt *sd_op_softsign(sd_bt *x);
sd_bt *sd_op_mish(sd_bt *x);
/* PReLU with one slope per channel: x >= 0 ? x : w[c] * x for x [N, C, ...]
 * and w [C], or one slope for every channel when w has one element
 * (torch.nn.PReLU(num_parameters)). */
sd_bt *sd_op_prelu(sd_bt *x, sd_bt *w);
/* torch.nn.PixelShuffle(r): [N, C*r*r, H, W] -> [N, C, H*r, W*r], where
 * y[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]. */
sd_bt *sd_op_pixel_shuffle(sd_bt *x, int r);
/* Its inverse, torch.pixel_unshuffle: [N, C, H*r, W*r] -> [N, C*r*r, H, W]
 * (H and W must be multiples of r). */
sd_bt *sd_op_pixel_unshuffle(sd_bt *x, int r);
/* Nearest-neighbour upsampling of NCHW by an integer factor >= 1
 * (F.interpolate(scale_factor=factor, mode="nearest"): y[.., h, w] =
 * x[.., h / factor, w / factor]). */
sd_bt *sd_op_upsample_nearest(sd_bt *x, int factor);

#endif
