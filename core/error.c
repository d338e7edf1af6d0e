#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "text.h"

void sd_error_clear(sd_error *err) {
    if (!err) return;
    memset(err, 0, sizeof *err);
}

sd_status sd_error_set(sd_error *err, sd_status code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

static void copy_field(char *dst, const char *src) {
    if (src) snprintf(dst, SD_ERR_ID_MAX, "%s", src);
}

void sd_error_at(sd_error *err, const char *node_id, const char *class_type,
                 const char *input) {
    if (!err) return;
    copy_field(err->node_id, node_id);
    copy_field(err->class_type, class_type);
    copy_field(err->input, input);
}

void sd_error_prefix(sd_error *err, const char *fmt, ...) {
    if (!err) return;
    char pre[SD_ERR_MSG_MAX], old[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
}

/* Names and messages can carry text from a workflow (ids, class types, file
 * names, prompts): they are escaped here, where every error line is made
 * (core/text.h), so that no control sequence reaches a terminal. Newlines
 * and tabs of the message are kept. */
const char *sd_error_format(const sd_error *err, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    if (!err) { snprintf(buf, n, "(no error)"); return buf; }
    char id[SD_ERR_ID_MAX * 4], ct[SD_ERR_ID_MAX * 4], in[SD_ERR_ID_MAX * 4];
    sd_text_escape(err->node_id, 0, id, sizeof id);
    sd_text_escape(err->class_type, 0, ct, sizeof ct);
    sd_text_escape(err->input, 0, in, sizeof in);
    size_t off = 0;
    buf[0] = 0;
    if (err->node_id[0]) {
        off += (size_t)snprintf(buf + off, n - off, "node %s", id);
        if (off < n && err->class_type[0])
            off += (size_t)snprintf(buf + off, n - off, " (%s)", ct);
        if (off < n && err->input[0])
            off += (size_t)snprintf(buf + off, n - off, " input '%s'", in);
        if (off < n) off += (size_t)snprintf(buf + off, n - off, ": ");
    } else if (err->input[0]) {
        off += (size_t)snprintf(buf + off, n - off, "input '%s': ", in);
    }
    if (off < n) sd_text_escape(err->msg[0] ? err->msg : sd_status_name(err->code), 1, buf + off, n - off);
    return buf;
}

const char *sd_status_name(sd_status code) {
    switch (code) {
    case SD_OK: return "ok";
    case SD_ERR_INVALID: return "invalid";
    case SD_ERR_IO: return "io";
    case SD_ERR_FORMAT: return "format";
    case SD_ERR_NOMEM: return "out of memory";
    case SD_ERR_UNSUPPORTED: return "unsupported";
    case SD_ERR_VALIDATION: return "validation";
    case SD_ERR_CANCELLED: return "cancelled";
    case SD_ERR_NOT_FOUND: return "not found";
    case SD_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}
