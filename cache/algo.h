/* algo.h - measured algorithm choices kept in the cache database.
 *
 * A GPU backend that measures which algorithm is fastest for an op and
 * shape (cuDNN's convolution algorithms) stores the winner here, so the next
 * process starts with it instead of measuring again. A choice is keyed by
 * strings the backend composes: the device ("NVIDIA H100 80GB HBM3 sm_90"),
 * the library and its version ("cudnn 91300"), the op ("conv2d_fwd"), the
 * shape, the data type and the layout; any of them changing (another card,
 * a cuDNN upgrade) is another key, so a stale choice is never used.
 *
 * Table algo_choices, created on first use (docs/cache.md), so databases
 * written before it existed, and older sdflow versions reading newer ones,
 * keep working. Rows carry a checksum of key and value: a row that fails it
 * (or holds something other than integers) is a miss and is deleted.
 *
 * Errors are soft, as for the output cache: get answers SD_ERR_NOT_FOUND on
 * a miss, a corrupt row (err says so) or an unreadable database; put
 * answers SD_ERR_IO when it cannot write (read-only file, locked too long).
 */
#ifndef SD_CACHE_ALGO_H
#define SD_CACHE_ALGO_H

#include <stdint.h>
#include "cache.h"

typedef struct sd_cache_algo_key {
    const char *device, *library, *op, *shape, *dtype, *layout; /* none NULL */
} sd_cache_algo_key;

typedef struct sd_cache_algo {
    int64_t algo;      /* the library's algorithm id (>= 0) */
    int64_t math;      /* the library's math mode it was measured with (>= 0) */
    int64_t workspace; /* scratch bytes it needs (>= 0) */
} sd_cache_algo;

sd_status sd_cache_algo_get(sd_sqlite_cache *c, const sd_cache_algo_key *k, sd_cache_algo *out,
                            sd_error *err);
/* Insert or replace the choice for k. SD_ERR_INVALID for negative values. */
sd_status sd_cache_algo_put(sd_sqlite_cache *c, const sd_cache_algo_key *k, const sd_cache_algo *v,
                            sd_error *err);
/* Rows in the table (0 when it does not exist yet), for `sdflow cache stats`
 * and tests. */
int64_t sd_cache_algo_count(sd_sqlite_cache *c);

#endif
