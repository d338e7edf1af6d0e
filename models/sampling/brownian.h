/* brownian.h - the Brownian tree ComfyUI's SDE samplers draw their noise from.
 *
 * A port of what k_diffusion.sampling.BrownianTreeNoiseSampler does on CPU:
 * torchsde 0.2.6 BrownianTree(t0=sigma_min, w0=zeros(shape), t1=sigma_max,
 * entropy=seed), which is a BrownianInterval with halfway_tree=True,
 * tol=1e-6 (times rounded to 6 decimals), pool_size=24, no Levy area.
 *   - Each tree node [s, e] splits at round((s + e) / 2, 6); the increment
 *     of a query [ta, tb] is the sum of the increments of the maximal dyadic
 *     nodes covering it (so it depends only on the seed, not on query order).
 *   - Node seeds come from numpy.random.SeedSequence(entropy,
 *     spawn_key=(path, depth), pool_size=24).generate_state(4)[0]; the root
 *     from SeedSequence(entropy, pool_size=24).generate_state(3)[0].
 *   - Each seed feeds a fresh torch CPU generator (models/sampling/rng.h) drawing
 *     torch.randn(shape); bridge arithmetic is float32 with the Python-float
 *     coefficients rounded to float32 as torch does.
 *
 * Ownership: sd_brownian_new returns a tree the caller frees with
 * sd_brownian_free. Not thread-safe (it keeps a small cache).
 */
#ifndef SD_BROWNIAN_H
#define SD_BROWNIAN_H

#include <stdint.h>
#include "core/error.h"

typedef struct sd_brownian sd_brownian;

/* Tree over [sigma_min, sigma_max] (0 < sigma_min <= sigma_max) for
 * samples of the given shape. SD_ERR_INVALID on a bad interval or shape,
 * SD_ERR_NOMEM on allocation failure. */
sd_status sd_brownian_new(uint64_t seed, float sigma_min, float sigma_max, int ndim,
                          const int64_t *shape, sd_brownian **out, sd_error *err);
void sd_brownian_free(sd_brownian *b); /* NULL-safe */

/* torchsde W(ta, tb) for ta <= tb (clamped into [t0, t1] as torchsde does),
 * n floats (must equal the tree's numel). */
sd_status sd_brownian_increment(sd_brownian *b, double ta, double tb, float *out, int64_t n,
                                sd_error *err);

/* BrownianTreeNoiseSampler(sigma, sigma_next): the increment between the two
 * (sign-corrected) divided by sqrt(|sigma_next - sigma|) in float32. */
sd_status sd_brownian_noise(sd_brownian *b, float sigma, float sigma_next, float *out,
                            int64_t n, sd_error *err);

/* Worker threads used to draw a query's node noise ahead (default: the
 * compute backends' default count, SDFLOW_THREADS or the CPUs this process
 * may use (kernels/cpus.h), at most 16; 1 = everything on the calling
 * thread). The values do not depend on it. sd_brownian_new fails
 * SD_ERR_INVALID on a bad SDFLOW_THREADS, as a backend would. */
void sd_brownian_set_threads(sd_brownian *b, int threads);

/* numpy.random.SeedSequence(entropy, spawn_key, pool_size).generate_state
 * (uint32 words). entropy is a Python int (split into 32-bit words, low
 * first); spawn_key may be NULL with n_spawn 0. Exposed for tests. */
void sd_seed_sequence_state(uint64_t entropy, const uint64_t *spawn_key, int n_spawn,
                            int pool_size, uint32_t *out, int n_words);

#endif
