/* json_util.h - cJSON parsing with errors that say where (line and column).
 *
 * cJSON reports a parse failure through a global pointer; this wrapper turns
 * it into an sd_error naming the source, line and column instead, so callers
 * never touch cJSON's global error state.
 */
#ifndef SD_JSON_UTIL_H
#define SD_JSON_UTIL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include "error.h"
#include "node.h"

/* Parse `text` (NUL-terminated). On success *out owns the tree (cJSON_Delete).
 * On failure returns SD_ERR_FORMAT with "<source>:<line>:<col>: ..." in err. */
sd_status sd_json_parse(const char *text, const char *source, cJSON **out, sd_error *err);

/* sd_json_parse, then every integer of magnitude >= 2^53 (a double would
 * round it: seeds) becomes a cJSON_Raw item holding its digits, which
 * cJSON_Print writes back verbatim; cJSON_IsNumber is false for those.
 * Use it wherever JSON that may hold seeds is read and written again. */
sd_status sd_json_parse_exact(const char *text, const char *source, cJSON **out, sd_error *err);

/* Line and column (1-based) of byte offset `pos` in text. */
void sd_json_position(const char *text, size_t pos, int *line, int *col);

/* ---- unsigned 64-bit INT inputs (seeds) -------------------------------------
 * ComfyUI's seed/noise_seed go up to 0xffffffffffffffff, past int64. An INT
 * input whose declared max is at least 2^63 holds an unsigned value, stored
 * in the INT value's int64 as its two's complement bit pattern (2^64-1 is
 * kept as -1), so (uint64_t)sd_value_as_int() is exactly the seed torch
 * receives, and the cache key hashes the same 64 bits. Everything that
 * prints or range-checks such a value reads it through these helpers; JSON
 * parsing keeps a negative number for such an input as a FLOAT so that it
 * still fails the min check instead of wrapping. */
int sd_json_input_is_u64(const sd_input_def *d);
/* Same, by class_type and input name (registry lookup; 0 when unknown). */
int sd_json_input_is_u64_named(const char *class_type, const char *input);
/* Decimal text of an INT value (unsigned when u64). buf has 32 bytes. */
void sd_json_format_int(int64_t v, int u64, char buf[32]);
/* Strict decimal digits (no sign, no space) up to 2^64-1: 0 on success. */
int sd_json_parse_u64(const char *digits, uint64_t *out);

#endif
