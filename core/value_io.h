/* value_io.h - binary serialization of data values (no handles).
 *
 * The blob is self-describing and little-endian on every host, so a cache
 * file can move between machines. Layout (full description in
 * docs/cache.md):
 *
 *   "SDFV" magic, u16 format version (1), u16 flags (0)
 *   one encoded value, then nothing
 *
 * Decoding never trusts the blob: every length is checked against the bytes
 * left, nesting depth is capped, and any inconsistency (unknown kind or
 * dtype, byte length != numel * dtype size, duplicate dict key, trailing
 * bytes, ...) is SD_ERR_FORMAT with the byte offset in the message. Integrity
 * of the bytes themselves (bit flips inside tensor data) is the caller's
 * business: the cache stores a SHA-256 next to each blob.
 */
#ifndef SD_VALUE_IO_H
#define SD_VALUE_IO_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "value.h"

#define SD_VALUE_IO_VERSION 1
/* Lists/dicts nested deeper than this are refused both ways. */
#define SD_VALUE_IO_MAX_DEPTH 64

/* Serialize `v` into a malloc'd blob (*out, *size); the caller frees *out.
 * SD_ERR_INVALID when the tree holds a handle (err names where), or nests
 * deeper than SD_VALUE_IO_MAX_DEPTH; SD_ERR_NOMEM on allocation failure. */
sd_status sd_value_serialize(const sd_value *v, void **out, size_t *size, sd_error *err);

/* Rebuild a value from a blob. On success *out is a new value (one
 * reference, owned by the caller; tensors own copies of their bytes, so the
 * blob may be freed). On failure *out is NULL and the code is SD_ERR_FORMAT
 * (malformed), SD_ERR_UNSUPPORTED (newer format version) or SD_ERR_NOMEM. */
sd_status sd_value_deserialize(const void *data, size_t size, sd_value **out, sd_error *err);

/* 1 when the two data trees are equal: same kinds, scalars, strings, dict
 * keys in the same order, tensors with equal dtype, shape and bytes. For
 * tests and for checking a round trip. */
int sd_value_equal(const sd_value *a, const sd_value *b);

#endif
