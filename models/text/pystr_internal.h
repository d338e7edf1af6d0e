/* pystr_internal.h - the generated tables of pystr.c (pystr_tables.c,
 * scripts/gen_pystr_tables.py). Private to models/text. */
#ifndef SD_PYSTR_INTERNAL_H
#define SD_PYSTR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "models/text/unicode.h"

/* A full case mapping: cp becomes to[0..3) (trailing zeros unused). */
typedef struct sd_pystr_map {
    uint32_t cp;
    uint32_t to[3];
} sd_pystr_map;

extern const sd_pystr_map sd_pystr_upper_map[]; /* str.upper() of one code point, sorted */
extern const size_t sd_pystr_upper_map_count;
extern const sd_pystr_map sd_pystr_title_map[]; /* str.title() of one code point, sorted */
extern const size_t sd_pystr_title_map_count;
extern const sd_uc_range sd_pystr_cased[];  /* _PyUnicode_IsCased */
extern const size_t sd_pystr_cased_count;

#endif
