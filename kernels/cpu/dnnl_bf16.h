/* dnnl_bf16.h - the CPU backend's bf16 compute path (internal to kernels/cpu).
 *
 * In bf16 mode (be->precision == SD_PREC_BF16) the three matrix ops - linear,
 * batched matmul, conv2d - round their inputs (activations and weights) to
 * bf16 with round-to-nearest-even, multiply-accumulate in f32 through oneDNN
 * primitives and write f32 results; everything else (norms, softmax,
 * attention, elementwise) stays f32. F16 weights are rounded f16 -> f32 ->
 * bf16 (the f32 step is exact, so this is one rounding).
 *
 * Memory: weights are rounded per op into buffers the backend keeps and
 * reuses (struct sd_dnnl: grow-only, each as large as the largest layer that
 * needed it, freed with the backend), never cached per weight: a bf16 copy
 * of every weight would add 1.7 GB for SD1.5 on top of the F16 checkpoint.
 * Primitives are cached per shape by oneDNN's own primitive cache (1024
 * entries by default, DNNL_PRIMITIVE_CACHE_CAPACITY); we create the cheap
 * descriptors per call.
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
 * sd_dnnl_compiled() is 0 and every sd_dnnl_* op fails with an error saying
 * how to get the path; nothing silently computes in f32.
 */
#ifndef SD_CPU_DNNL_BF16_H
#define SD_CPU_DNNL_BF16_H

#include "cpu.h"

struct sd_dnnl;

/* 1 when this build has the oneDNN bf16 path. */
int sd_dnnl_compiled(void);
/* Name of the instruction set oneDNN dispatches to on this machine
 * ("avx512_core_bf16", "avx512_core_amx", ...), "none" without oneDNN. */
const char *sd_dnnl_isa_name(void);
/* Frees the engine, stream and buffers; NULL-safe. */
void sd_dnnl_free(struct sd_dnnl *d);

/* The bf16 ops with the signatures of backend_impl.h's *_lp slots: inputs
 * F32, F16, BF16 or fp8 as stored, out F32. Errors go through sd_backend_fail. */
sd_status sd_dnnl_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b);
sd_status sd_dnnl_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                         float alpha);
sd_status sd_dnnl_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
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

#endif
