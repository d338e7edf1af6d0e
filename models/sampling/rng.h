/* rng.h - bit-exact port of the torch CPU generator (torch.manual_seed /
 * torch.randn, float32) and of ComfyUI's comfy.sample.prepare_noise.
 *
 * The torch CPU generator is a 32-bit MT19937 seeded with the LOW 32 bits of
 * the 64-bit seed (negative python seeds arrive as their two's complement
 * uint64, so -1, 2^64-1 and 2^32-1 all give the same stream), plus a one-value
 * cache of the scalar normal path. torch.randn(n) has two paths:
 *   n >= 16: float32 Box-Muller in blocks of 16 (element j paired with j+8),
 *            with a regenerated tail when n % 16 != 0 (consumes n+16 draws);
 *   n <  16: double Box-Muller, one value per call kept in the cache, which
 *            survives across later scalar calls (not touched by the n >= 16
 *            path, cleared by sd_rng_seed).
 * See docs/sampling.md "Noise" for the details this file reproduces.
 *
 * Which float32 log/sin/cos the n >= 16 path uses depends on the ATen CPU
 * capability of the torch that produced the reference: on x86-64 Linux
 * (AVX2/AVX512, what ComfyUI users run) it is the Cephes polynomials of
 * avx_mathfun.h with GCC's FMA contraction -- SD_RNG_PATH_AVX2, our default.
 * SD_RNG_PATH_DEFAULT reproduces ATEN_CPU_CAPABILITY=default (ARM, Apple),
 * which calls libm logf/sinf/cosf (glibc), about 1 ulp apart on some values.
 *
 * Ownership: sd_rng_new returns a generator the caller frees with
 * sd_rng_free. A generator is not thread-safe; use one per thread.
 */
#ifndef SD_RNG_H
#define SD_RNG_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

typedef struct sd_rng sd_rng; /* torch CPU generator: mt19937 + normal cache */

typedef enum sd_rng_path {
    SD_RNG_PATH_AVX2 = 0,   /* x86 torch: avx_mathfun polynomials + FMA (default) */
    SD_RNG_PATH_DEFAULT = 1 /* ATen capability DEFAULT: libm logf/cosf/sinf */
} sd_rng_path;

/* New generator in the state torch.manual_seed(seed) leaves (path AVX2).
 * Returns NULL only when allocation fails. */
sd_rng *sd_rng_new(uint64_t seed);
void sd_rng_free(sd_rng *r); /* NULL-safe */

/* torch.manual_seed(seed) on this generator: reseeds the twister and clears
 * the scalar normal cache. Keeps the path setting. */
void sd_rng_seed(sd_rng *r, uint64_t seed);

/* Select the float32 math of the n >= 16 path (see above). */
void sd_rng_set_path(sd_rng *r, sd_rng_path path);
sd_rng_path sd_rng_get_path(const sd_rng *r);

/* torch.randn(n) on this generator: writes n float32 normals to out and
 * advances the state exactly as torch does (one call == one torch.randn call;
 * splitting a draw into two calls gives different numbers, as in torch).
 * n <= 0 writes nothing and draws nothing. */
void sd_rng_randn(sd_rng *r, float *out, int64_t n);

/* torch's normal_ on a float32 tensor it does not fill as a block (one
 * that is not contiguous, e.g. channels-last strides): one
 * at::normal_distribution<double> per element, in the tensor's memory
 * order, with the generator's cached second value -- the n < 16 path of
 * sd_rng_randn for any n. */
void sd_rng_randn_serial(sd_rng *r, float *out, int64_t n);

/* Lower-level draws, exposed for tests and for other torch ops built on the
 * same generator. */
uint32_t sd_rng_next_u32(sd_rng *r);          /* one raw MT19937 output */
float sd_rng_uniform_float(sd_rng *r);        /* (r & 0xFFFFFF) * 2^-24, 1 draw */
double sd_rng_uniform_double(sd_rng *r);      /* 53 bits from 2 draws, high first */

/* torch's float32 elementwise exp / log / tan as an x86 AVX2 build computes
 * them for every element of a float tensor (Sleef's 1-ulp expf/logf/tanf
 * with FMA), bit for bit; glibc differs by 1 ulp on a few percent of inputs.
 * Used where ComfyUI applies these ops to float32 tensors (sigma(t),
 * timestep(sigma), the exponential and kl_optimal schedules). tanf keeps
 * Sleef's reduction for |x| < 125 only (falls back to double tan beyond). */
float sd_torch_expf(float x);
float sd_torch_logf(float x);
float sd_torch_tanf(float x);

/* ComfyUI comfy.sample.prepare_noise(latent, seed, batch_index): a new F32
 * tensor of `shape` (ndim 1..SD_MAX_DIMS, shape[0] = batch).
 *   batch_index == NULL (or n_batch_index == 0): one torch.randn(shape) call
 *     on a generator seeded with `seed`.
 *   otherwise: for i in 0..max(batch_index) one torch.randn([1, rest...]) call
 *     each; output item k = draw number batch_index[k]. n_batch_index must
 *     equal shape[0] and every index must be >= 0.
 * Returns NULL on a bad shape, bad batch_index or allocation failure.
 * Caller owns the result (sd_tensor_unref). Uses SD_RNG_PATH_AVX2. */
sd_tensor *sd_noise_prepare(uint64_t seed, int ndim, const int64_t *shape,
                            const int64_t *batch_index, size_t n_batch_index);

/* Same with an explicit path and an error report (names the bad argument).
 * *out receives the new tensor on success. */
sd_status sd_noise_prepare_ex(uint64_t seed, sd_rng_path path, int ndim,
                              const int64_t *shape, const int64_t *batch_index,
                              size_t n_batch_index, sd_tensor **out,
                              sd_error *err);
/* The same, also handing back (in *rng_after, a new generator the caller
 * frees) the generator in the state prepare_noise leaves torch's default
 * one: ComfyUI seeds the process-wide generator (torch.manual_seed), and
 * what draws from it later in the sampling run (HyperTile's randint)
 * continues that stream. */
sd_status sd_noise_prepare_rng(uint64_t seed, sd_rng_path path, int ndim,
                               const int64_t *shape, const int64_t *batch_index,
                               size_t n_batch_index, sd_tensor **out,
                               sd_rng **rng_after, sd_error *err);

#endif
