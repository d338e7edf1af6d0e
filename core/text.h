/* text.h - untrusted text: what sdflow accepts as a string, and how it is
 * shown on a terminal.
 *
 * Strings travel from workflows (JSON, Lua, a PNG's prompt chunk) into
 * prompts, file names and node ids, and back out into saved workflows. A NUL
 * byte would silently cut such a string where C reads it ("water\u0000mark"
 * prompting "water"), and bytes that are not UTF-8 cannot be written back
 * into JSON unchanged; both are refused where the string comes in, naming
 * the byte offset (sd_text_check). Control characters are valid text (a
 * prompt may hold newlines) but must not reach a terminal raw: an id holding
 * ESC sequences could rewrite the screen. Whatever prints names or messages
 * that came from a workflow goes through sd_text_escape once, at the point
 * where it is written.
 */
#ifndef SD_TEXT_H
#define SD_TEXT_H

#include <stddef.h>

typedef enum sd_text_problem {
    SD_TEXT_OK = 0,
    SD_TEXT_NUL,      /* a NUL character */
    SD_TEXT_BAD_UTF8  /* bytes that are not UTF-8 (RFC 3629: no overlong forms,
                         surrogates or code points past U+10FFFF) */
} sd_text_problem;

/* Checks the n bytes at s. Returns SD_TEXT_OK, or the first problem with
 * *offset (when offset != NULL) set to its byte offset from s. */
sd_text_problem sd_text_check(const char *s, size_t n, size_t *offset);

/* Length of the UTF-8 sequence at p (1..4), 0 when the bytes there are not
 * one (the NUL byte counts as a valid 1-byte sequence here). `avail` is how
 * many bytes may be read. */
size_t sd_text_utf8_len(const unsigned char *p, size_t avail);

/* "a NUL character" / "bytes that are not valid UTF-8". */
const char *sd_text_problem_describe(sd_text_problem p);

/* The NUL-terminated s made safe to print, into buf (always terminated,
 * truncated to n - 1 bytes; returns buf): control characters (C0, DEL and
 * the C1 range U+0080..U+009F) become \n, \t, \r, \e or \xHH / \u00HH, and
 * bytes that are not UTF-8 become \xHH; everything else is kept. With
 * keep_newlines, '\n' and '\t' are kept (multi-line messages). */
char *sd_text_escape(const char *s, int keep_newlines, char *buf, size_t n);

#endif
