/* pystr.h - Python str semantics on UTF-8 text: what ComfyUI's string nodes
 * (comfy_extras/nodes_string.py) compute with str methods.
 *
 * A Python str is a sequence of code points, so lengths, indices and slices
 * here count code points, not bytes. Case mappings are Python's full
 * mappings (str.upper("ß") is "SS"; str.lower("İ") is "i̇"; final sigma),
 * whitespace is str.isspace(); the tables come from Python 3.11's Unicode
 * 14.0 (scripts/gen_pystr_tables.py, models/text/unicode.h), which other
 * Python versions differ from only for code points added since.
 *
 * Text that is not valid UTF-8 is read with U+FFFD in place of each bad byte
 * (sd_uc_decode_utf8), as no Python str can hold such bytes.
 *
 * Ownership: functions returning char * return a new NUL-terminated UTF-8
 * string the caller frees, or NULL when out of memory.
 */
#ifndef SD_PYSTR_H
#define SD_PYSTR_H

#include <stddef.h>
#include <stdint.h>

/* len(s): code points. */
size_t sd_pystr_len(const char *s);

/* s[start:end] with Python's rules for negative and out-of-range indices. */
char *sd_pystr_slice(const char *s, int64_t start, int64_t end);

/* s.replace(find, rep): every non-overlapping occurrence from the left; an
 * empty find inserts rep before every code point and at the end. */
char *sd_pystr_replace(const char *s, const char *find, const char *rep);

/* str.upper(), str.lower(), str.capitalize() (first code point titlecased,
 * the rest lowercased), str.title() (titlecase after a non-cased code
 * point, lowercase after a cased one). */
char *sd_pystr_upper(const char *s);
char *sd_pystr_lower(const char *s);
char *sd_pystr_capitalize(const char *s);
char *sd_pystr_title(const char *s);

/* str.strip() (left and right), lstrip() (left), rstrip() (right). */
char *sd_pystr_strip(const char *s, int left, int right);

/* `sub in s`, s.startswith(sub), s.endswith(sub) (valid UTF-8 matches
 * code point for code point when it matches byte for byte). */
int sd_pystr_contains(const char *s, const char *sub);
int sd_pystr_startswith(const char *s, const char *prefix);
int sd_pystr_endswith(const char *s, const char *suffix);

#endif
