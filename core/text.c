/* text.c - UTF-8 validation and terminal-safe escaping (text.h). */
#include "text.h"

#include <stdio.h>
#include <string.h>

size_t sd_text_utf8_len(const unsigned char *p, size_t avail) {
    if (avail == 0) return 0;
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;               /* no overlong forms */
    else if (c == 0xED) len = 3, hi = 0x9F;               /* no UTF-16 surrogates */
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;               /* nothing past U+10FFFF */
    else return 0;                                        /* 80..C1, F5..FF */
    if (avail < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return len;
}

sd_text_problem sd_text_check(const char *s, size_t n, size_t *offset) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] == 0) {
            if (offset) *offset = i;
            return SD_TEXT_NUL;
        }
        if (p[i] < 0x80) { i++; continue; }
        size_t len = sd_text_utf8_len(p + i, n - i);
        if (!len) {
            if (offset) *offset = i;
            return SD_TEXT_BAD_UTF8;
        }
        i += len;
    }
    return SD_TEXT_OK;
}

const char *sd_text_problem_describe(sd_text_problem p) {
    switch (p) {
    case SD_TEXT_NUL: return "a NUL character";
    case SD_TEXT_BAD_UTF8: return "bytes that are not valid UTF-8";
    default: return "nothing wrong";
    }
}

char *sd_text_escape(const char *s, int keep_newlines, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t o = 0;
    char tmp[8];
    while (*p) {
        const char *piece;
        size_t plen, adv;
        unsigned char c = *p;
        size_t len = c < 0x80 ? 1 : sd_text_utf8_len(p, strnlen((const char *)p, 4));
        if (c < 0x20 || c == 0x7F) {
            adv = 1;
            if (keep_newlines && (c == '\n' || c == '\t')) piece = (const char *)p, plen = 1;
            else {
                switch (c) {
                case '\n': piece = "\\n"; break;
                case '\t': piece = "\\t"; break;
                case '\r': piece = "\\r"; break;
                case 0x1B: piece = "\\e"; break;
                default: snprintf(tmp, sizeof tmp, "\\x%02x", c); piece = tmp; break;
                }
                plen = strlen(piece);
            }
        } else if (len == 0) { /* not UTF-8: show the byte */
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
            piece = tmp, plen = 4, adv = 1;
        } else if (len == 2 && c == 0xC2 && p[1] < 0xA0) { /* C1 controls, e.g. U+009B (CSI) */
            snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)p[1]);
            piece = tmp, plen = 6, adv = 2;
        } else {
            piece = (const char *)p, plen = len, adv = len;
        }
        if (o + plen >= n) break; /* never cut a piece in two */
        memcpy(buf + o, piece, plen);
        o += plen;
        p += adv;
    }
    buf[o] = 0;
    return buf;
}
