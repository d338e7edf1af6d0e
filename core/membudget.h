/* membudget.h - the memory estimate a node makes before a large allocation.
 *
 * A node about to allocate something whose size comes from its inputs (a
 * latent of width x height x batch, a padded or resized image, a VAE's
 * activations) first asks sd_mem_check() with the bytes it will need. Over
 * the budget, the node fails at once with an error naming the node, the
 * input that set the size and the bytes needed, instead of growing until
 * the allocator (or the kernel's OOM killer) stops the process.
 *
 * The budget is the env's max_memory (core/node.h): --max-memory or
 * SDFLOW_MAX_MEMORY ("16G", "512MiB", "2000000000"; "0" = no limit),
 * default the machine's physical RAM. It bounds one estimate at a time, not
 * the sum of everything alive (the models, the cache and other nodes'
 * outputs come on top): it catches the requests that cannot possibly fit,
 * and a smaller --max-memory makes it stricter.
 */
#ifndef SD_MEMBUDGET_H
#define SD_MEMBUDGET_H

#include <stdint.h>

#include "error.h"
#include "node.h"

/* Physical RAM in bytes (0 when unknown). */
uint64_t sd_mem_physical(void);

/* "0", "123456", "512K", "64M", "16G", "1T" (powers of 1024; an optional
 * "iB" or "B" after the letter; case-insensitive) into *out. SD_ERR_INVALID
 * naming the text otherwise. */
sd_status sd_mem_parse(const char *text, uint64_t *out, sd_error *err);

/* Bytes of a tensor: the product of shape[0..ndim) times elem_size, or
 * UINT64_MAX when negative or too large to count. */
uint64_t sd_mem_tensor_bytes(int ndim, const int64_t *shape, uint64_t elem_size);

/* "1.5 GiB" into buf; returns buf. */
const char *sd_mem_format(uint64_t bytes, char *buf, size_t n);

/* Fails with SD_ERR_NOMEM when `bytes` (what: "the latent [64, 4, 2048,
 * 2048] float32") exceed ctx's budget; the error names ctx's node, `input`
 * (the input that set the size; may be NULL), the bytes and the limit.
 * SD_OK when within it, when there is no limit, or when ctx or its env is
 * NULL. */
sd_status sd_mem_check(const sd_node_ctx *ctx, const char *input, uint64_t bytes, const char *what,
                       sd_error *err);

#endif
