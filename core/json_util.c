/* json_util.c - JSON parsing with positions in errors. */
#include "json_util.h"

#include <string.h>

void sd_json_position(const char *text, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && text[i]; i++) {
        if (text[i] == '\n') { l++; c = 1; }
        else c++;
    }
    *line = l;
    *col = c;
}

sd_status sd_json_parse(const char *text, const char *source, cJSON **out, sd_error *err) {
    *out = NULL;
    if (!source) source = "<json>";
    if (!text) return sd_error_set(err, SD_ERR_INVALID, "%s: no text", source);
    const char *end = NULL;
    /* require_null_terminated: trailing garbage after the value is an error too */
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t pos = end && end >= text ? (size_t)(end - text) : 0;
        int line, col;
        sd_json_position(text, pos, &line, &col);
        char near[24];
        size_t k = 0;
        for (const char *p = text + pos; *p && *p != '\n' && k < sizeof near - 1; p++) near[k++] = *p;
        near[k] = 0;
        if (!text[pos])
            return sd_error_set(err, SD_ERR_FORMAT, "%s:%d:%d: invalid JSON (unexpected end of text)",
                                source, line, col);
        return sd_error_set(err, SD_ERR_FORMAT, "%s:%d:%d: invalid JSON near '%s'", source, line, col, near);
    }
    *out = root;
    return SD_OK;
}
