/* workflow_file.c - the workflow inside a file (workflow_file.h). */
#include "workflow_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/json_util.h"
#include "png.h"
#include "workflow_ui.h"

/* Beyond this a file is no workflow we could hold (a model, a video). */
#define MAX_WORKFLOW_FILE ((size_t)512 << 20)

/* ---- EXIF ------------------------------------------------------------------------ */

static uint32_t rd16(const unsigned char *p, int be) {
    return be ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0];
}

static uint32_t rd32(const unsigned char *p, int be) {
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

sd_status sd_workflow_exif_text(const unsigned char *data, size_t n, const char *key, char **out,
                                sd_error *err) {
    *out = NULL;
    if (n >= 6 && !memcmp(data, "Exif\0\0", 6)) {
        data += 6;
        n -= 6;
    }
    if (n < 8) return sd_error_set(err, SD_ERR_FORMAT, "EXIF data too short");
    int be;
    if (!memcmp(data, "MM", 2)) be = 1;
    else if (!memcmp(data, "II", 2)) be = 0;
    else return sd_error_set(err, SD_ERR_FORMAT, "EXIF data has no TIFF byte-order mark");
    if (rd16(data + 2, be) != 42) return sd_error_set(err, SD_ERR_FORMAT, "EXIF data has no TIFF header");
    size_t off = rd32(data + 4, be);
    if (off > n - 2) return sd_error_set(err, SD_ERR_FORMAT, "EXIF IFD0 offset %zu beyond the data", off);
    size_t count = rd16(data + off, be);
    if (count * 12 > n - off - 2) return sd_error_set(err, SD_ERR_FORMAT, "EXIF IFD0 runs past the data");
    size_t klen = strlen(key);
    for (size_t i = 0; i < count; i++) {
        const unsigned char *e = data + off + 2 + 12 * i;
        uint32_t type = rd16(e + 2, be), cnt = rd32(e + 4, be);
        if (type != 1 && type != 2 && type != 7) continue; /* BYTE, ASCII, UNDEFINED */
        const unsigned char *val = e + 8;
        if (cnt > 4) {
            size_t voff = rd32(e + 8, be);
            if (voff > n || cnt > n - voff) continue; /* a broken entry: look at the others */
            val = data + voff;
        }
        size_t len = cnt;
        while (len && !val[len - 1]) len--;
        if (len <= klen || memcmp(val, key, klen) || val[klen] != ':') continue;
        size_t tl = len - klen - 1;
        if (memchr(val + klen + 1, 0, tl)) continue;
        char *s = malloc(tl + 1);
        if (!s) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        memcpy(s, val + klen + 1, tl);
        s[tl] = 0;
        *out = s;
        return SD_OK;
    }
    return sd_error_set(err, SD_ERR_NOT_FOUND, "no EXIF entry '%s:'", key);
}

static int is_webp(const unsigned char *d, size_t n) { return n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4); }
static int is_jpeg(const unsigned char *d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }

sd_status sd_workflow_picture_exif(const unsigned char *d, size_t n, const unsigned char **exif, size_t *exif_n,
                                   sd_error *err) {
    *exif = NULL;
    *exif_n = 0;
    if (is_webp(d, n)) {
        size_t pos = 12;
        while (n - pos >= 8) {
            size_t size = rd32(d + pos + 4, 0);
            if (size > n - pos - 8) return sd_error_set(err, SD_ERR_FORMAT, "truncated WebP chunk");
            if (!memcmp(d + pos, "EXIF", 4)) {
                *exif = d + pos + 8;
                *exif_n = size;
                return SD_OK;
            }
            pos += 8 + size;
            if (size & 1) pos++;
            if (pos > n) break;
        }
        return sd_error_set(err, SD_ERR_NOT_FOUND, "no EXIF chunk");
    }
    if (is_jpeg(d, n)) {
        size_t pos = 2;
        while (n - pos >= 4) {
            if (d[pos] != 0xFF) return sd_error_set(err, SD_ERR_FORMAT, "broken JPEG marker at byte %zu", pos);
            unsigned m = d[pos + 1];
            if (m == 0xFF) { pos++; continue; }              /* fill byte */
            if (m == 0xD9 || m == 0xDA) break;               /* end, or the image data */
            if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { pos += 2; continue; }
            size_t len = rd16(d + pos + 2, 1);
            if (len < 2 || len > n - pos - 2) return sd_error_set(err, SD_ERR_FORMAT, "truncated JPEG segment");
            if (m == 0xE1 && len >= 8 && !memcmp(d + pos + 4, "Exif\0\0", 6)) {
                *exif = d + pos + 4;
                *exif_n = len - 2;
                return SD_OK;
            }
            pos += 2 + len;
        }
        return sd_error_set(err, SD_ERR_NOT_FOUND, "no EXIF segment");
    }
    return sd_error_set(err, SD_ERR_FORMAT, "not a WebP or JPEG picture");
}

/* ---- what a file is -------------------------------------------------------------- */

/* A name for binary data that is not a workflow, or NULL for text. */
static const char *binary_kind(const unsigned char *d, size_t n) {
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) return "a GIF picture";
    if (n >= 4 && !memcmp(d, "PK\3\4", 4)) return "a zip archive (a PyTorch .ckpt/.pt/.pth model?)";
    if (n >= 2 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5) return "a Python pickle (a model file?)";
    if (n >= 2 && d[0] == 0x1f && d[1] == 0x8b) return "gzip-compressed data";
    if (n >= 4 && !memcmp(d, "GGUF", 4)) return "a GGUF model file";
    if (n >= 10 && d[8] == '{' && d[9] == '"') {
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--) h = h << 8 | d[i];
        if (h >= 2 && h < ((uint64_t)1 << 32)) return "a safetensors model file";
    }
    if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) return "a TIFF picture";
    if (n >= 12 && !memcmp(d + 4, "ftyp", 4)) return "an MP4/MOV/AVIF/HEIC file";
    return NULL;
}

/* Up to cap bytes of the pipe or terminal fd: 0 at its end, -1 on an error,
 * -2 once *interrupt is set. Waits in poll() and looks at the flag in
 * between, so a writer that never delivers cannot keep Ctrl-C waiting. */
static ssize_t read_interruptible(int fd, unsigned char *buf, size_t cap, volatile sig_atomic_t *interrupt) {
    for (;;) {
        if (*interrupt) return -2;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 100);
        if (r < 0 && errno != EINTR) return -1;
        if (r <= 0) continue;
        ssize_t k = read(fd, buf, cap);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        return k;
    }
}

/* With `interrupt` (standard input only: nothing has read from its FILE
 * buffer), the reads go around stdio through read_interruptible. */
static sd_status read_all(FILE *f, const char *path, volatile sig_atomic_t *interrupt, unsigned char **out,
                          size_t *len, sd_error *err) {
    int bad = 0;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= MAX_WORKFLOW_FILE) {
                free(buf);
                return sd_error_set(err, SD_ERR_FORMAT, "'%s' is larger than %zu MiB: not a workflow", path,
                                    MAX_WORKFLOW_FILE >> 20);
            }
            unsigned char *b = realloc(buf, cap * 2);
            if (!b) { free(buf); buf = NULL; break; }
            buf = b;
            cap *= 2;
        }
        size_t k;
        if (interrupt) {
            ssize_t r = read_interruptible(fileno(f), buf + n, cap - n - 1, interrupt);
            if (r == -2) {
                free(buf);
                return sd_error_set(err, SD_ERR_CANCELLED, "interrupted while reading '%s'", path);
            }
            if (r < 0) { bad = 1; break; }
            k = (size_t)r;
        } else {
            k = fread(buf + n, 1, cap - n - 1, f);
        }
        n += k;
        if (k == 0) break;
    }
    if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "out of memory reading '%s'", path);
    if (bad || ferror(f)) { free(buf); return sd_error_set(err, SD_ERR_IO, "cannot read '%s'", path); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return SD_OK;
}

static sd_status from_png(const char *path, sd_workflow_file *out, sd_error *err) {
    char *prompt = NULL, *workflow = NULL;
    sd_status rc = sd_png_read_text(path, "prompt", &prompt, err);
    if (rc && rc != SD_ERR_NOT_FOUND) return rc;
    sd_error werr;
    sd_status rw = sd_png_read_text(path, "workflow", &workflow, &werr);
    if (rw && rw != SD_ERR_NOT_FOUND && !prompt) {
        if (err) *err = werr;
        return rw;
    }
    if (!prompt && !workflow)
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "'%s' has no 'prompt' or 'workflow' text chunk (not saved by ComfyUI/sdflow SaveImage?)",
                            path);
    sd_error_clear(err);
    out->text = prompt ? prompt : strdup(workflow);
    out->ui_workflow = workflow;
    out->from = prompt ? "PNG prompt chunk" : "PNG workflow chunk";
    if (!out->text) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

static sd_status from_exif(const char *path, const char *kind, const unsigned char *d, size_t n,
                           sd_workflow_file *out, sd_error *err) {
    const unsigned char *exif;
    size_t en;
    sd_status rc = sd_workflow_picture_exif(d, n, &exif, &en, err);
    char *prompt = NULL, *workflow = NULL;
    if (!rc) {
        sd_error e2;
        rc = sd_workflow_exif_text(exif, en, "prompt", &prompt, &e2);
        if (rc == SD_OK || rc == SD_ERR_NOT_FOUND) rc = sd_workflow_exif_text(exif, en, "workflow", &workflow, &e2);
        if (rc == SD_ERR_NOT_FOUND && prompt) rc = SD_OK;
        if (rc == SD_ERR_FORMAT) sd_error_set(err, rc, "%s", e2.msg);
        if (rc == SD_ERR_NOMEM) { free(prompt); return sd_error_set(err, rc, "out of memory"); }
    }
    if (rc == SD_ERR_FORMAT) {
        free(prompt);
        sd_error_prefix(err, "'%s' is a %s picture with broken metadata", path, kind);
        return SD_ERR_FORMAT;
    }
    if (!prompt && !workflow)
        return sd_error_set(err, SD_ERR_NOT_FOUND,
                            "'%s' is a %s picture without an embedded ComfyUI workflow (no EXIF 'prompt:' or "
                            "'workflow:' entry)", path, kind);
    sd_error_clear(err);
    out->text = prompt ? prompt : strdup(workflow);
    out->ui_workflow = workflow;
    out->from = prompt ? "EXIF prompt" : "EXIF workflow";
    if (!out->text) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

void sd_workflow_file_free(sd_workflow_file *f) {
    if (!f) return;
    free(f->text);
    free(f->ui_workflow);
    memset(f, 0, sizeof *f);
}

sd_status sd_workflow_file_read(const char *path, sd_workflow_file *out, sd_error *err) {
    return sd_workflow_file_read_ex(path, NULL, out, err);
}

sd_status sd_workflow_file_read_ex(const char *path, volatile sig_atomic_t *interrupt, sd_workflow_file *out,
                                   sd_error *err) {
    memset(out, 0, sizeof *out);
    int from_stdin = !strcmp(path, "-");
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return sd_error_set(err, errno == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO, "cannot open '%s': %s", path,
                            strerror(errno));
    unsigned char head[16] = {0};
    size_t hn = 0;
    if (!from_stdin) {
        hn = fread(head, 1, sizeof head, f);
        if (hn >= 8 && !memcmp(head, "\x89PNG\r\n\x1a\n", 8)) {
            fclose(f);
            return from_png(path, out, err);
        }
        const char *kind = binary_kind(head, hn);
        if (kind) { /* known at a glance: do not read a multi-GB model */
            fclose(f);
            return sd_error_set(err, SD_ERR_FORMAT, "'%s' is %s, not a workflow (JSON, or a PNG/WebP saved by ComfyUI)",
                                path, kind);
        }
        rewind(f);
    }
    unsigned char *d = NULL;
    size_t n = 0;
    sd_status rc = read_all(f, from_stdin ? "<stdin>" : path, from_stdin ? interrupt : NULL, &d, &n, err);
    if (!from_stdin) fclose(f);
    if (rc) return rc;
    const char *name = from_stdin ? "<stdin>" : path;
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "a PNG on standard input: give its file name instead");
    } else if (is_webp(d, n) || is_jpeg(d, n)) {
        rc = from_exif(name, is_webp(d, n) ? "WebP" : "JPEG", d, n, out, err);
    } else {
        const char *kind = binary_kind(d, n);
        const unsigned char *nul = kind ? NULL : memchr(d, 0, n); /* C would read the text as ending there */
        if (kind) {
            rc = sd_error_set(err, SD_ERR_FORMAT, "'%s' is %s, not a workflow (JSON, or a PNG/WebP saved by ComfyUI)",
                              name, kind);
        } else if (nul) {
            rc = sd_error_set(err, SD_ERR_FORMAT, "'%s' holds a NUL byte at byte %zu: a workflow is text", name,
                              (size_t)(nul - d));
        } else {
            out->text = (char *)d;
            out->from = "JSON";
            d = NULL;
            cJSON *root = NULL; /* a UI-form file is also what saved pictures carry along */
            if (sd_json_parse(out->text, name, &root, NULL) == SD_OK && sd_workflow_ui_detect(root)) {
                out->ui_workflow = strdup(out->text);
                if (!out->ui_workflow) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            }
            cJSON_Delete(root);
        }
    }
    free(d);
    if (rc) sd_workflow_file_free(out);
    return rc;
}
