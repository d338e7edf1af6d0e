/* dnnl_bf16.h - the CPU backend's bf16 compute (internal to kernels/cpu).
 *
 * In bf16 mode (be->precision == SD_PREC_BF16) the three matrix ops - linear,
 * batched matmul, conv2d - round their inputs (activations and weights) to
 * bf16 with round-to-nearest-even, multiply-accumulate in f32 and write f32
 * results; the bias is added in f32; everything else (norms, softmax,
 * attention, elementwise) stays f32. F16 weights are rounded f16 -> f32 ->
 * bf16 (the f32 step is exact, so this is one rounding). Two paths compute
 * this, chosen per backend (sd_cpu.bf16_path, isa.c says which by default):
 *
 *  - oneDNN (dnnl_ops.c): bf16 primitives. Where bf16 arithmetic is native
 *    (AVX512_BF16, AMX) this is the fast path. Linear and conv weights are
 *    packed once into the layout the primitive wants and kept until the
 *    weight tensor is freed, within a memory budget and without growing the
 *    model (dnnl_pack.h); the rest (fp8 weights, past the budget) and the
 *    activations are rounded and reordered per op into buffers the backend
 *    reuses (grow-only, each as large as the largest layer that needed it,
 *    freed with the backend).
 *  - emulation (bf16_emul.c): the same rounding into f32 storage, then our
 *    f32 kernels (OpenBLAS GEMMs, Winograd convolutions). Products of bf16
 *    values are exact in f32 and accumulation is f32 in both paths, so both
 *    meet the same bound (tests/kernels/test_bf16_ops.c); they differ only
 *    in summation order. Without native bf16 this is faster than oneDNN,
 *    which has no bf16 primitives below AVX-512 and emulates them on
 *    AVX-512 (bench/notes/cpu-isa.md).
 *
 * Threads: Debian's oneDNN runs on OpenMP. Primitives are executed on the
 * calling thread with the OpenMP thread count set to the backend's
 * n_threads (1 for small work), while our pool (threadpool.h) sleeps, and
 * the OpenMP threads are released after each op that used them, so the two
 * never run at once. libgomp still spin-waits inside a region's barriers; on
 * a loaded shared machine OMP_WAIT_POLICY=passive (read when libgomp loads,
 * so it must be in the environment) halved the bf16 VAE golden test's time.
 *
 * Built without oneDNN (cmake -DSDFLOW_DNNL=OFF or libdnnl-dev absent),
 * sd_dnnl_compiled() is 0, the backend does not offer bf16 precision and
 * every bf16 op fails with an error saying how to get the path; nothing
 * silently computes in f32.
 */
#ifndef SD_CPU_DNNL_BF16_H
#define SD_CPU_DNNL_BF16_H

#include "cpu.h"

struct sd_dnnl;

/* 1 when this build has the oneDNN bf16 path. */
int sd_dnnl_compiled(void);
/* 1 when oneDNN dispatches to kernels with native bf16 arithmetic here
 * (its effective ISA is avx512_core_bf16 or avx512_core_amx). */
int sd_dnnl_native_bf16(void);
/* 1 when oneDNN has bf16 primitives here at all (AVX-512 and up, emulated
 * without AVX512_BF16). */
int sd_dnnl_has_bf16(void);
/* Name of the instruction set oneDNN dispatches to on this machine
 * ("avx512_core_bf16", "avx512_core_amx", ...), "none" without oneDNN. */
const char *sd_dnnl_isa_name(void);
/* Frees the engine, stream and buffers; NULL-safe. */
void sd_dnnl_free(struct sd_dnnl *d);

/* The bf16 ops with the signatures of backend_impl.h's *_lp slots: inputs
 * F32, F16, BF16 or fp8 as stored, out F32. Errors go through sd_backend_fail.
 * sd_dnnl_*: oneDNN; sd_bf16e_*: emulation on the f32 kernels. */
sd_status sd_dnnl_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b);
sd_status sd_dnnl_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                         float alpha);
sd_status sd_dnnl_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b, int stride, int pad_h, int pad_w);

/* Attention on the oneDNN path (heads == kv_heads): q, k, v rounded to
 * bf16, S = scale Q K^T by a bf16 matmul with f32 accumulation, the bias,
 * mask and softmax in f32 (ours), P rounded to bf16, O = P V by a bf16
 * matmul, f32 out. Query rows in blocks of at most 256 so the [N, H, rows,
 * Lk] scores stay within 64 MiB. Inputs F32 (backend.c widened them). */
sd_status sd_dnnl_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                            const sd_bt *v, const sd_attn_args *a);

sd_status sd_bf16e_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                          const sd_bt *b);
sd_status sd_bf16e_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                          int trans_b, float alpha);
sd_status sd_bf16e_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                          const sd_bt *b, int stride, int pad_h, int pad_w);

/* f32 -> bf16 with round-to-nearest-even (NaN stays a quiet NaN); the
 * rounding every bf16 op applies to its inputs. */
static inline uint16_t sd_bf16_from_f32(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* n values of dtype dt (F32, F16 or BF16) at src rounded to bf16 at dst,
 * split over the pool. */
void sd_bf16_round(sd_pool *pool, sd_dtype dt, const void *src, uint16_t *dst, int64_t n);
/* n F32 values rounded to bf16 on the calling thread. */
void sd_bf16_round_row(const float *src, uint16_t *dst, int64_t n);
/* The same rounding with the result kept as f32 (the low 16 bits zero), on
 * the path sd_cpu_isa() or the given lower one. */
void sd_bf16_round_f32(sd_pool *pool, sd_dtype dt, const void *src, float *dst, int64_t n);
void sd_bf16_round_f32_isa(sd_pool *pool, sd_dtype dt, const void *src, float *dst, int64_t n,
                           int isa);

#endif
