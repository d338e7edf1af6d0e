/* json_util.h - cJSON parsing with errors that say where (line and column).
 *
 * cJSON reports a parse failure through a global pointer; this wrapper turns
 * it into an sd_error naming the source, line and column instead, so callers
 * never touch cJSON's global error state.
 */
#ifndef SD_JSON_UTIL_H
#define SD_JSON_UTIL_H

#include <cjson/cJSON.h>
#include "error.h"

/* Parse `text` (NUL-terminated). On success *out owns the tree (cJSON_Delete).
 * On failure returns SD_ERR_FORMAT with "<source>:<line>:<col>: ..." in err. */
sd_status sd_json_parse(const char *text, const char *source, cJSON **out, sd_error *err);

/* Line and column (1-based) of byte offset `pos` in text. */
void sd_json_position(const char *text, size_t pos, int *line, int *col);

#endif
