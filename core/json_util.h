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
#include "text.h"

/* Parse `text` (NUL-terminated). On success *out owns the tree (cJSON_Delete).
 * On failure returns SD_ERR_FORMAT with "<source>:<line>:<col>: ..." in err. */
sd_status sd_json_parse(const char *text, const char *source, cJSON **out, sd_error *err);

/* sd_json_parse, then every integer of magnitude >= 2^53 (a double would
 * round it: seeds) becomes a cJSON_Raw item holding its digits, which
 * cJSON_Print writes back verbatim; cJSON_IsNumber is false for those.
 * Use it wherever JSON that may hold seeds is read and written again. */
sd_status sd_json_parse_exact(const char *text, const char *source, cJSON **out, sd_error *err);

/* cJSON_Print (formatted = 1) / cJSON_PrintUnformatted with numbers that
 * read back exactly (core/json_print.c): whole numbers below 2^53 as
 * digits, any other double as the shortest of %.15g, %.16g, %.17g that
 * strtod returns to the same bits (cJSON's own printer rounds to 15 digits
 * when that is "close enough"). Use it wherever JSON is written. malloc'd;
 * NULL without memory. */
char *sd_json_print(const cJSON *j, int formatted);
/* One double as sd_json_print writes it ("null" when not finite). */
void sd_json_format_double(double d, char out[32]);

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

/* ---- strings that cannot pass (core/json_check.c) ----------------------------
 * cJSON decodes "\u0000" into a NUL byte that silently ends the string where
 * C reads it ("water\u0000mark" becomes "water"), and keeps bytes that are not
 * UTF-8, which cannot be written back into JSON unchanged. sd_json_parse
 * refuses both, naming where; sd_graph_from_json says which node and input. */
#define SD_JSON_PATH_MAX 4

typedef struct sd_json_bad_string {
    sd_text_problem problem;
    size_t text_offset;   /* of the offending byte or escape in the JSON text */
    size_t string_offset; /* byte offset in the decoded string */
    int in_key;           /* the string is an object key (the last path entry) */
    int depth;            /* entries of the path to the string; the first
                             SD_JSON_PATH_MAX are kept */
    char path[SD_JSON_PATH_MAX][SD_ERR_ID_MAX]; /* decoded keys ("6", "inputs",
                             "text") or array positions ("[2]"), truncated */
} sd_json_bad_string;

/* 1 and *bad when a string (value or key) of `text` holds a NUL or bytes that
 * are not UTF-8, else 0. Only strings are looked at: run it on text cJSON
 * accepts (it does not crash on any other). */
int sd_json_find_bad_string(const char *text, sd_json_bad_string *bad);
/* "/6/inputs/text" (escaped for printing) into buf. */
const char *sd_json_bad_path(const sd_json_bad_string *bad, char *buf, size_t n);

#endif
