/* cpu.h - internals of the CPU backend shared by its kernel files.
 *
 * Every kernel entry point has the signature of its sd_backend_i slot (see
 * backend_impl.h): inputs are validated F32 tensors, `out` is allocated
 * with undefined contents (the op writes every element). Parallel work goes
 * through the backend's one pool; BLAS runs single-threaded inside pool
 * tasks. Measured on the 2-core dev machine
 * (OpenBLAS 0.3.21, SkylakeX kernels) for conv/linear/attention GEMM shapes
 * (128x65536x1152, 4096x320x320, 256x4096x40, 4096x1280x320): splitting
 * over our pool and OpenBLAS's own 2 threads are within run-to-run noise
 * of each other, so we keep one pool: it also lets attention and conv run
 * one GEMM per task without nested threading.
 */
#ifndef SD_CPU_H
#define SD_CPU_H

#include "kernels/backend_impl.h"
#include "threadpool.h"

typedef struct sd_cpu {
    sd_pool *pool;
    /* One reusable buffer for widened F16/BF16/fp8 weights (convert.c): a
     * widened weight lives only for its op, so reusing one buffer spares a
     * fresh mmap, page faults and zeroing per layer (a 1280x1280x3x3 conv:
     * 59 MB). widen_busy guards it; a second widening at once (the bias
     * next to its weight) gets ordinary memory. */
    void *widen_buf;
    size_t widen_cap;
    int widen_busy; /* atomic */
    /* The bf16 path's oneDNN engine, stream, reused buffers and packed
     * weights (dnnl_bf16.h), made on the first oneDNN op; NULL until then
     * and in f32-only use. */
    struct sd_dnnl *dnnl;
    /* How bf16 precision computes on this backend (SD_BF16_PATH_ONEDNN or
     * _EMULATE): sd_cpu_bf16_default_path() at creation; tests switch it
     * to check both paths in one process. */
    int bf16_path;
} sd_cpu;

static inline sd_pool *sd_cpu_pool(sd_backend *be) { return ((sd_cpu *)be->impl)->pool; }
static inline float *sd_cpu_f32(const sd_bt *t) { return (float *)t->data; }

/* Scratch and result memory: 64-byte aligned, on transparent huge pages from
 * 2 MiB (cpu_backend.c). Release with free(). */
void *sd_cpu_alloc(size_t nbytes);

/* Row-major C = alpha * op(A) @ op(B) + beta * C on the calling thread. */
void sd_cpu_gemm1(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc);
/* The GEMM libraries sd_cpu_gemm1 can call (gemm.c): oneDNN's sgemm when the
 * build has oneDNN (faster on the UNet's shapes), else OpenBLAS. Tests run
 * each engine the build has (sd_cpu_gemm_has_engine) against a reference. */
enum { SD_GEMM_OPENBLAS = 0, SD_GEMM_ONEDNN };
int sd_cpu_gemm_has_engine(int engine);
/* Reads SDFLOW_CPU_GEMM (auto, onednn or openblas; once per process) for
 * sd_cpu_gemm1's engine: SD_ERR_INVALID naming the variable for a value it
 * cannot honour, which then leaves the default engine in place. */
sd_status sd_cpu_gemm_setup(sd_error *err);
/* The engine sd_cpu_gemm1 calls (SD_GEMM_*). */
int sd_cpu_gemm_engine(void);
void sd_cpu_gemm1_engine(int engine, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc);
/* sd_cpu_gemm with C first set to a bias, per column (bias_n [N]) or per
 * row (bias_m [M]; at most one of them non-NULL), by the task computing
 * each part (beta is then 1); both NULL: sd_cpu_gemm. */
void sd_cpu_gemm_bias(sd_pool *pool, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc, const float *bias_n,
                      const float *bias_m);
/* A [cols][rows] copy of the row-major [rows][cols] matrix src, from
 * sd_cpu_alloc (the caller frees it); NULL when out of memory. For the
 * weights a GEMM runs faster as the other operand form (gemm.c, conv2d.c). */
float *sd_cpu_transposed(const float *src, int64_t rows, int64_t cols);
/* Same, split over the pool along M or N. */
void sd_cpu_gemm(sd_pool *pool, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float beta, float *C, int64_t ldc);

sd_status sd_cpu_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b);
sd_status sd_cpu_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                        float alpha);
sd_status sd_cpu_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b,
                        int stride, int pad_h, int pad_w);
sd_status sd_cpu_group_norm(sd_backend *be, sd_bt *out, const sd_bt *x, int groups,
                            const sd_bt *gamma, const sd_bt *beta, float eps, int silu);
sd_status sd_cpu_layer_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                            const sd_bt *beta, float eps);
sd_status sd_cpu_softmax(sd_backend *be, sd_bt *out, const sd_bt *x);
sd_status sd_cpu_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                           const sd_bt *v, const sd_attn_args *a);
/* The same on the given instruction-set path (sd_cpu_isa() or lower): the
 * fused kernel (attn_fused.c) for f32 on AVX2 / AVX-512, the GEMM kernel
 * for the scalar path and for bf16 precision. Tests call it per path. */
sd_status sd_cpu_attention_isa(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                               const sd_bt *v, const sd_attn_args *a, int isa);
/* f32 attention's operands: q, o [N, Lq, heads * D] (row stride HD), k, v
 * [N, Lk, heads / group * D] (row stride KD); bias and its strides as
 * sd_attn_args, NULL for none. */
typedef struct {
    const float *q, *k, *v, *bias;
    float *o;
    int64_t N, Lq, Lk, D, HD, KD;
    int heads, group, causal;
    int64_t bst[3];
    float scale;
} sd_cpu_attn;
/* attn_fused.c: the fused f32 kernel on path isa, split over the pool: 1
 * done, 0 when the path has no fused kernel (scalar, non-x86), -1 out of
 * memory. Lq, Lk and D at least 1. */
int sd_cpu_attention_fused(sd_pool *pool, const sd_cpu_attn *a, int isa);
sd_status sd_cpu_rms_norm(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *gamma,
                          float eps);
/* rope.c */
sd_status sd_cpu_rope(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *rot, int heads,
                      int interleaved);
sd_status sd_cpu_binary(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                        const int64_t *b_strides, int op);
sd_status sd_cpu_add_channel(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *b);
sd_status sd_cpu_unary(sd_backend *be, sd_bt *out, const sd_bt *x, int op, float s);
sd_status sd_cpu_geglu(sd_backend *be, sd_bt *out, const sd_bt *x);
sd_status sd_cpu_pad2d(sd_backend *be, sd_bt *out, const sd_bt *x, int left, int top);
sd_status sd_cpu_upsample2x(sd_backend *be, sd_bt *out, const sd_bt *x);
sd_status sd_cpu_concat(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int dim);
sd_status sd_cpu_slice(sd_backend *be, sd_bt *out, const sd_bt *x, int dim, int64_t start);
sd_status sd_cpu_permute(sd_backend *be, sd_bt *out, const sd_bt *x, const int *perm);
sd_status sd_cpu_embedding(sd_backend *be, sd_bt *out, const sd_bt *table, const sd_bt *ids);
sd_status sd_cpu_copy(sd_backend *be, sd_bt *out, const sd_bt *x);
/* pixel.c */
sd_status sd_cpu_prelu(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w);
sd_status sd_cpu_pixel_shuffle(sd_backend *be, sd_bt *out, const sd_bt *x, int r, int inverse);
sd_status sd_cpu_upsample_nearest(sd_backend *be, sd_bt *out, const sd_bt *x, int factor);
/* out (F32, shape set, no storage yet) = x (F16/BF16/F32/F64) widened,
 * split over the pool; storage may be the backend's reusable widen buffer
 * (convert.c). */
sd_status sd_cpu_to_f32(sd_backend *be, sd_bt *out, const sd_bt *x);
/* Scratch of at least `bytes` for one op's widened or rounded weight: the
 * backend's reusable buffer when no other op holds it (*reused = 1), else
 * fresh memory. NULL when out of memory. Give it back with
 * sd_cpu_weight_scratch_done once the op is done with it. */
void *sd_cpu_weight_scratch(sd_backend *be, size_t bytes, int *reused);
void sd_cpu_weight_scratch_done(sd_backend *be, void *p, int reused);
/* n elements of dtype dt at src widened to F32 on the calling thread, with
 * the given instruction-set path (sd_cpu_isa() or lower). */
void sd_cpu_widen(sd_dtype dt, const void *src, float *dst, int64_t n, int isa);

/* In-place softmax of one row (double-accumulated sum). A row that is all
 * -inf becomes zeros. */
void sd_cpu_softmax_row(float *row, int64_t n);
/* The softmax without its last pass: row[i] = exp(row[i] - m), returning
 * the (double-accumulated) sum; m = max(*max, max of the row), and *max is
 * set to m (online softmax: pass the running max of earlier key blocks,
 * -INFINITY for none). An all -inf row with *max = -inf gives zeros and 0.
 * Attention divides its output rows by the sum instead: D values per row
 * rather than Lk. */
double sd_cpu_exp_row(float *row, int64_t n, float *max);
/* y = x * sigmoid(beta * x) over n floats (SiLU: beta 1, quick_gelu:
 * 1.702); y may equal x. */
void sd_cpu_silu(const float *x, float *y, int64_t n, float beta);
/* y = exact (erf) GELU of x; y may equal x. */
void sd_cpu_gelu(const float *x, float *y, int64_t n);
/* y = tanh-approximated GELU of x (torch's formula and order); y may equal x. */
void sd_cpu_gelu_tanh(const float *x, float *y, int64_t n);

/* Instruction-set paths of our f32 kernels (vmath.c, norm.c, winograd.c,
 * convert.c, ...): sd_cpu_isa() is the best one this CPU runs under
 * SDFLOW_MAX_CPU_ISA (isa.c); a path it cannot run must not be requested. */
enum { SD_ISA_SCALAR = 0, SD_ISA_AVX2, SD_ISA_AVX512 };
int sd_cpu_isa(void);
/* The CPU's level including its bf16 arithmetic, under SDFLOW_MAX_CPU_ISA
 * (isa.c); the first three equal the SD_ISA_* paths. */
enum { SD_LEVEL_SCALAR = 0, SD_LEVEL_AVX2, SD_LEVEL_AVX512, SD_LEVEL_AVX512_BF16, SD_LEVEL_AMX };
int sd_cpu_level(void);
const char *sd_cpu_level_name(int level);
/* Reads SDFLOW_MAX_CPU_ISA / SDFLOW_CPU_BF16 and applies the cap to OpenBLAS
 * and oneDNN (once per process); SD_ERR_INVALID naming the variable when a
 * value is not one the backend knows. */
sd_status sd_cpu_isa_setup(sd_error *err);
/* How bf16 precision computes (dnnl_bf16.h): oneDNN's bf16 primitives, or
 * inputs rounded to bf16 on our f32 kernels. AUTO is only SDFLOW_CPU_BF16's
 * default; sd_cpu_bf16_default_path() resolves it. */
enum { SD_BF16_PATH_AUTO = 0, SD_BF16_PATH_ONEDNN, SD_BF16_PATH_EMULATE };
int sd_cpu_bf16_default_path(void);
void sd_cpu_softmax_row_isa(float *row, int64_t n, int isa);
double sd_cpu_exp_row_isa(float *row, int64_t n, float *max, int isa);
void sd_cpu_silu_isa(const float *x, float *y, int64_t n, float beta, int isa);
void sd_cpu_gelu_isa(const float *x, float *y, int64_t n, int isa);
void sd_cpu_gelu_tanh_isa(const float *x, float *y, int64_t n, int isa);
/* GroupNorm statistics of n floats: mean, then the mean squared deviation
 * from it, both accumulated in double (norm.c), on the given path. */
void sd_cpu_group_stats_isa(const float *x, int64_t n, double *mean, double *var, int isa);
/* One RMSNorm row of C floats (norm.c: the sum of squares over double
 * lanes, then (x * r) * gamma in float; gamma may be NULL), on the given
 * path. */
void sd_cpu_rms_row_isa(const float *x, float *y, const float *gamma, int64_t C, float eps,
                        int isa);
/* RoPE of one token's `heads` heads of D floats with its (cos, sin) table
 * cs [D/2][2] (rope.c), on the given path; every path rounds as torch. */
void sd_cpu_rope_row_isa(const float *x, float *y, const float *cs, int heads, int64_t D,
                         int interleaved, int isa);

/* Splits [0, n) into chunks of about `grain` for pool tasks. */
static inline int64_t sd_cpu_chunks(int64_t n, int64_t grain) {
    return n <= 0 ? 0 : (n + grain - 1) / grain;
}

#endif
