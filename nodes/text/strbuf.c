/* strbuf.c - the growable string of nodes/text/strbuf.h. */
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

void sd_nodes_strbuf_put(sd_nodes_strbuf *b, const char *p, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->failed = 1;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

void sd_nodes_strbuf_puts(sd_nodes_strbuf *b, const char *s) { sd_nodes_strbuf_put(b, s, strlen(s)); }

char *sd_nodes_strbuf_finish(sd_nodes_strbuf *b) {
    if (!b->failed && !b->s) sd_nodes_strbuf_put(b, "", 0);
    char *s = b->failed ? NULL : b->s;
    if (!s) free(b->s);
    *b = (sd_nodes_strbuf){0};
    return s;
}
