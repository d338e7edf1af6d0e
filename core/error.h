/* error.h - status codes and the error value every fallible call fills.
 *
 * Convention (SQLite/ggml style): a fallible function returns sd_status
 * (SD_OK == 0) and takes an `sd_error *err` as its last argument. On failure
 * it fills *err with a message and, when known, the node id, class_type and
 * input name the failure concerns. `err` may be NULL when the caller only
 * wants the code. Library code never prints an error and never exits.
 */
#ifndef SD_ERROR_H
#define SD_ERROR_H

#include <stddef.h>

typedef enum sd_status {
    SD_OK = 0,
    SD_ERR_INVALID,     /* bad argument or bad user input */
    SD_ERR_IO,          /* file system or OS call failed */
    SD_ERR_FORMAT,      /* malformed file contents (safetensors, JSON, PNG) */
    SD_ERR_NOMEM,       /* allocation failed */
    SD_ERR_UNSUPPORTED, /* well-formed but not something we handle */
    SD_ERR_VALIDATION,  /* workflow failed validation */
    SD_ERR_CANCELLED,   /* user interrupt (Ctrl-C) */
    SD_ERR_NOT_FOUND,   /* missing file, key or entry */
    SD_ERR_INTERNAL     /* a bug in sdflow */
} sd_status;

#define SD_ERR_MSG_MAX 2048
#define SD_ERR_ID_MAX 128

typedef struct sd_error {
    sd_status code;
    char msg[SD_ERR_MSG_MAX];
    char node_id[SD_ERR_ID_MAX];    /* "" when not about a node */
    char class_type[SD_ERR_ID_MAX]; /* "" when not about a node */
    char input[SD_ERR_ID_MAX];      /* "" when not about one input */
} sd_error;

/* Reset to SD_OK with empty strings. Safe on NULL. */
void sd_error_clear(sd_error *err);

/* Set code and a printf-style message; keeps node/input fields as they are.
 * Returns `code` so callers can write `return sd_error_set(err, ...)`.
 * Safe on NULL err. */
sd_status sd_error_set(sd_error *err, sd_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Attach the node and input an error concerns (any argument may be NULL,
 * which leaves that field unchanged). Safe on NULL err. */
void sd_error_at(sd_error *err, const char *node_id, const char *class_type,
                 const char *input);

/* Prefix the existing message with "<prefix>: " (for adding context such as
 * a file name while an error travels up). Safe on NULL err. */
void sd_error_prefix(sd_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Human-readable one-line rendering: "node 3 (KSampler) input 'cfg': msg".
 * Writes into buf (always NUL-terminated) and returns buf. */
const char *sd_error_format(const sd_error *err, char *buf, size_t n);

/* Stable short name of a status code ("invalid", "io", ...). */
const char *sd_status_name(sd_status code);

#endif
