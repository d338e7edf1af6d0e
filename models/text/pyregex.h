/* pyregex.h - Python `re` on UTF-8 text, for ComfyUI's regex nodes
 * (RegexMatch, RegexExtract, RegexReplace in comfy_extras/nodes_string.py),
 * built on PCRE2 (Debian libpcre2-dev; why PCRE2: docs/nodes.md).
 *
 * What follows Python:
 *   - flags IGNORECASE, MULTILINE, DOTALL; Unicode \d \w \s \b (PCRE2_UCP);
 *     "." and "$" know only "\n" as a newline; "^" with MULTILINE also
 *     matches after a final "\n" (PCRE2_ALT_CIRCUMFLEX);
 *   - pattern syntax PCRE2 spells differently is rewritten first: \Z (end
 *     of text only) becomes \z, {,n} becomes {0,n}, \uXXXX and \UXXXXXXXX
 *     become \x{...};
 *   - the scan of re.finditer / findall / sub since Python 3.7: after an
 *     empty match the next match may not be empty at the same place
 *     (PCRE2_NOTEMPTY_ATSTART), an empty match right after a non-empty one
 *     counts;
 *   - re.sub's replacement templates: \1..\99, \g<n>, \g<name>, octal
 *     escapes, \n \t and the other escapes re accepts; an unknown escape of
 *     an ASCII letter or a reference to a group the pattern lacks is an
 *     error, any other unknown escape keeps its backslash; a group that did
 *     not take part in the match is replaced by nothing. An octal escape
 *     for the NUL character is refused (sdflow strings hold no NUL).
 * Where PCRE2 and Python's re still differ (docs/nodes.md lists them): a
 * few patterns one accepts and the other refuses (PCRE2-only syntax such as
 * POSIX classes [[:alpha:]] or \e is accepted here; \N{NAME} is refused),
 * \s on the control characters U+001C..U+001F and U+0085 (Python counts
 * them as space), and case-insensitive matching of the few characters whose
 * case folding the two libraries treat differently. A match that needs more
 * than PCRE2's default match limit (10 million backtracking steps) is an
 * error instead of running for ever.
 *
 * Offsets are byte offsets into the UTF-8 subject.
 */
#ifndef SD_PYREGEX_H
#define SD_PYREGEX_H

#include <stddef.h>
#include "core/error.h"

typedef struct sd_pyregex sd_pyregex;

enum { SD_RE_IGNORECASE = 1, SD_RE_MULTILINE = 2, SD_RE_DOTALL = 4 };

/* re.compile(pattern, flags). A pattern that does not compile is
 * SD_ERR_INVALID with PCRE2's message and offset (Python's re.error). */
sd_status sd_pyregex_compile(const char *pattern, int flags, sd_pyregex **out, sd_error *err);
void sd_pyregex_free(sd_pyregex *re); /* NULL-safe */

/* The pattern's number of capture groups (len(match.groups())). */
int sd_pyregex_groups(const sd_pyregex *re);

/* One match: spans of group 0 (the whole match) .. groups; a group that did
 * not take part has start == end == (size_t)-1. Holds up to 101 groups'
 * spans (RegexExtract's group_index goes to 100); n_groups says how many. */
#define SD_PYREGEX_MAX_SPANS 101
typedef struct sd_pymatch {
    int n_groups;
    size_t start[SD_PYREGEX_MAX_SPANS], end[SD_PYREGEX_MAX_SPANS];
} sd_pymatch;

/* A scan over a subject as re.finditer makes it: set *scan to zero, then
 * call sd_pyregex_next until *found is 0. */
typedef struct sd_pyscan {
    size_t pos;
    int must_advance;
} sd_pyscan;

sd_status sd_pyregex_next(const sd_pyregex *re, const char *s, size_t len, sd_pyscan *scan, sd_pymatch *m,
                          int *found, sd_error *err);

/* re.sub(pattern, template, s, count) (count 0: every match) into a new
 * malloc'd string *out. A bad template is SD_ERR_INVALID (re.error). */
sd_status sd_pyregex_sub(const sd_pyregex *re, const char *s, const char *template_, int count, char **out,
                         sd_error *err);

#endif
