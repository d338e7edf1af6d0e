/* strbuf.h - a growable NUL-terminated string for the nodes that build text
 * piece by piece (PreviewAny's printout, RegexExtract's matches, the
 * save-path and pyjson helpers of nodes/image/savepath.c).
 *
 * Start from a zeroed struct (`sd_nodes_strbuf b = {0};`). The first
 * failed allocation is sticky: later appends do nothing, and
 * sd_nodes_strbuf_finish frees what was built and returns NULL, so a
 * builder appends straight through and checks once at the end. */
#ifndef SD_NODES_STRBUF_H
#define SD_NODES_STRBUF_H

#include <stddef.h>

typedef struct sd_nodes_strbuf {
    char *s;  /* NUL-terminated once anything was put; NULL before */
    size_t n, cap;
    int failed;
} sd_nodes_strbuf;

/* Appends the n bytes at p. */
void sd_nodes_strbuf_put(sd_nodes_strbuf *b, const char *p, size_t n);
/* Appends the string s. */
void sd_nodes_strbuf_puts(sd_nodes_strbuf *b, const char *s);
/* The built string, owned by the caller ("" when nothing was put), or NULL
 * after a failed allocation (the buffer is freed either way: b is spent). */
char *sd_nodes_strbuf_finish(sd_nodes_strbuf *b);

#endif
