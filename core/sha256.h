/* sha256.h - SHA-256 (FIPS 180-4), incremental and one-shot.
 *
 * Used for cache keys (executor), file content hashes of models and the
 * integrity checksum of cached blobs. No allocation; the context lives on
 * the caller's stack. On x86-64 CPUs with the SHA extensions the block
 * function uses them (about 10x faster; multi-GB checkpoints are hashed),
 * chosen per context at init; results are identical either way.
 */
#ifndef SD_SHA256_H
#define SD_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

typedef struct sd_sha256_ctx {
    uint32_t state[8];
    uint64_t nbytes;    /* total message length so far */
    uint8_t buf[64];    /* partial block */
    size_t nbuf;        /* bytes used in buf */
    int accel;          /* set by init: 1 = use the CPU's SHA instructions */
} sd_sha256_ctx;

void sd_sha256_init(sd_sha256_ctx *ctx);
void sd_sha256_update(sd_sha256_ctx *ctx, const void *data, size_t n);
/* Writes the digest; ctx must be re-initialised before reuse. */
void sd_sha256_final(sd_sha256_ctx *ctx, uint8_t out[32]);
/* One-shot digest of a buffer. */
void sd_sha256(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of a digest, NUL-terminated (65 bytes). */
void sd_sha256_hex(const uint8_t h[32], char out[65]);
/* Digest of a whole file, read in chunks. SD_ERR_NOT_FOUND when the file
 * does not exist, SD_ERR_IO on any other read failure (err names the path). */
sd_status sd_sha256_file(const char *path, uint8_t out[32], sd_error *err);

#endif
