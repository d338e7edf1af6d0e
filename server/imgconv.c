/* imgconv.c - /view's preview= and channel=: a PNG re-encoded on the way
 * out, as ComfyUI's server.py view_image does it with Pillow.
 *
 *   preview=FMT[;...;Q]  FMT webp or jpeg (anything else, or a channel
 *                        holding an 'a', is webp); Q the quality when the
 *                        last ';' part is all digits (else 90). jpeg, or
 *                        channel=rgb, drops the alpha; webp keeps it.
 *   channel=rgb          the colours as an RGB PNG (alpha dropped)
 *   channel=a            an RGBA PNG with black colours and the alpha
 *                        (255 where the picture has none)
 *   anything else        the file as it is (/view's plain answer)
 *
 * Only PNG files are converted (the pictures sdflow writes and LoadImage
 * reads); a file of another format is answered as it is. The PNG is read
 * through formats/png.h with the environment's pixel limit; 8-bit samples
 * read as k/255 write back as k exactly, so channel=rgb keeps every value
 * (a 16-bit file's samples are truncated to 8 bits, where Pillow keeps the
 * high byte: they may differ by one level). */
#define _GNU_SOURCE /* open_memstream */
#include <civetweb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formats/png.h"
#include "internal.h"

#ifdef SDFLOW_HAVE_IMGCONV
#include <jpeglib.h>
#include <setjmp.h>
#include <webp/encode.h>
#endif

#ifdef SDFLOW_HAVE_IMGCONV
/* ---- 8-bit pixels from a [H, W, C] tensor ---------------------------------- */

/* As formats/png.c writes: clip, scale in float32, truncate (exact for the
 * k/255 values an 8-bit PNG reads as). */
static unsigned char to_u8(float x) {
    float v = 255.0f * x;
    if (!(v > 0.0f)) return 0;
    if (v >= 255.0f) return 255;
    return (unsigned char)v;
}

static unsigned char *pixels_u8(const sd_tensor *t) {
    size_t n = (size_t)(t->shape[0] * t->shape[1] * t->shape[2]);
    unsigned char *p = malloc(n ? n : 1);
    if (!p) return NULL;
    const float *s = sd_tensor_f32(t);
    for (size_t i = 0; i < n; i++) p[i] = to_u8(s[i]);
    return p;
}

/* ---- JPEG (libjpeg): Pillow's defaults at a quality, 4:2:0, baseline ---- */

typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} jerr;

static void on_jpeg_error(j_common_ptr c) { longjmp(((jerr *)c->err)->jb, 1); }

/* RGB [H, W, 3] to JPEG bytes (*out malloc'd, libjpeg's buffer). */
static sd_status encode_jpeg(const sd_tensor *t, int quality, unsigned char **out, size_t *n, sd_error *err) {
    unsigned char *px = pixels_u8(t);
    if (!px) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    struct jpeg_compress_struct c;
    jerr je;
    unsigned char *volatile buf = NULL;
    unsigned long len = 0;
    c.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = on_jpeg_error;
    if (setjmp(je.jb)) {
        jpeg_destroy_compress(&c);
        free(px);
        free(buf);
        return sd_error_set(err, SD_ERR_IO, "encoding JPEG failed");
    }
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, (unsigned char **)&buf, &len);
    c.image_width = (JDIMENSION)t->shape[1];
    c.image_height = (JDIMENSION)t->shape[0];
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    size_t stride = (size_t)t->shape[1] * 3;
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = px + (size_t)c.next_scanline * stride;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(px);
    *out = buf;
    *n = len;
    return SD_OK;
}

/* RGB or RGBA [H, W, 3|4] to lossy WebP at a quality (libwebp's simple
 * encoder: Pillow's method 4 and default preset; the alpha plane lossless,
 * as Pillow's alpha_quality 100). *out is freed with WebPFree. */
static sd_status encode_webp(const sd_tensor *t, int quality, unsigned char **out, size_t *n, sd_error *err) {
    unsigned char *px = pixels_u8(t);
    if (!px) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int w = (int)t->shape[1], h = (int)t->shape[0], c = (int)t->shape[2];
    uint8_t *o = NULL;
    size_t len = c == 4 ? WebPEncodeRGBA(px, w, h, w * 4, (float)quality, &o)
                        : WebPEncodeRGB(px, w, h, w * 3, (float)quality, &o);
    free(px);
    if (!len) return sd_error_set(err, SD_ERR_IO, "encoding WebP failed (%dx%d)", w, h);
    /* copied so that the caller frees every answer with free() */
    *out = malloc(len);
    if (*out) memcpy(*out, o, len);
    WebPFree(o);
    if (!*out) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    *n = len;
    return SD_OK;
}
#endif

static sd_status encode_png(const sd_tensor *t, unsigned char **out, size_t *n, sd_error *err) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* Pillow's PNG default: zlib level 6 */
    sd_status rc = sd_png_write_stream(f, "view", t, NULL, 0, 6, err);
    if (fclose(f) != 0 && !rc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (rc) { free(buf); return rc; }
    *out = (unsigned char *)buf;
    *n = len;
    return SD_OK;
}

/* ---- pixel layouts ---------------------------------------------------------- */

/* [H, W, C] (C 1..4 as the PNG holds it) to RGB: gray replicated, alpha
 * dropped (Pillow's convert("RGB"), and split+merge for RGBA). */
static sd_tensor *to_rgb(const sd_tensor *t) {
    int64_t h = t->shape[0], w = t->shape[1], c = t->shape[2];
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, h, w, 3, 0);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(t);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0; i < h * w; i++) {
        const float *p = s + i * c;
        for (int k = 0; k < 3; k++) d[i * 3 + k] = c >= 3 ? p[k] : p[0];
    }
    return o;
}

/* Pillow's mode of a PNG decides what it keeps: only an RGBA file is mode
 * RGBA (gray+alpha is LA, a palette with tRNS is P, RGB with tRNS is RGB);
 * libpng's colour types (formats/png.h sd_png_info.color_type). */
enum { CT_PALETTE = 3, CT_GRAY_ALPHA = 4, CT_RGBA = 6 };

/* [H, W, C] to RGBA with black colours and the alpha of an RGBA file (1 for
 * any other): Image.new('RGBA', size) (all zeros) with putalpha(a). */
static sd_tensor *to_alpha(const sd_tensor *t, int rgba_file) {
    int64_t h = t->shape[0], w = t->shape[1], c = t->shape[2];
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, h, w, 4, 0);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(t);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0; i < h * w; i++) {
        d[i * 4] = d[i * 4 + 1] = d[i * 4 + 2] = 0.0f;
        d[i * 4 + 3] = rgba_file && c == 4 ? s[i * c + 3] : 1.0f;
    }
    return o;
}

/* [H, W, C] to what Pillow's WebP writer takes of it: RGBA for an RGBA,
 * gray+alpha or palette-with-transparency file, else RGB (an RGB or gray
 * file's tRNS is not kept). */
static sd_tensor *to_webp_mode(const sd_tensor *t, const sd_png_info *pi) {
    int64_t c = t->shape[2];
    int alpha = pi->color_type == CT_RGBA || pi->color_type == CT_GRAY_ALPHA ||
                (pi->color_type == CT_PALETTE && pi->has_alpha);
    if (!alpha || (c != 2 && c != 4)) return c == 3 ? sd_tensor_ref((sd_tensor *)t) : to_rgb(t);
    int64_t h = t->shape[0], w = t->shape[1];
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, h, w, 4, 0);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(t);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0; i < h * w; i++) {
        const float *p = s + i * c;
        for (int k = 0; k < 3; k++) d[i * 4 + k] = c == 4 ? p[k] : p[0];
        d[i * 4 + 3] = p[c - 1];
    }
    return o;
}

/* ---- the query ---------------------------------------------------------------- */

/* The quality of "fmt;...;Q": Q when the last part is all digits (Python's
 * str.isdigit), else 90; clamped to 0..100 (libjpeg clamps a bigger one;
 * Pillow's WebP writer fails on it, where sdflow clamps too). */
static int preview_quality(const char *preview) {
    const char *last = strrchr(preview, ';');
    last = last ? last + 1 : preview;
    if (!*last) return 90;
    long q = 0;
    for (const char *p = last; *p; p++) {
        if (*p < '0' || *p > '9') return 90;
        if (q <= 100) q = q * 10 + (*p - '0');
    }
    return q > 100 ? 100 : (int)q;
}

static int is_png_file(const char *path) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char b[8];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t k = fread(b, 1, 8, f);
    fclose(f);
    return k == 8 && !memcmp(b, sig, 8);
}

int srv_view_wants_conversion(const char *preview, const char *channel) {
    return preview || (channel && (!strcmp(channel, "rgb") || !strcmp(channel, "a")));
}

int srv_view_convert(srv *s, struct mg_connection *c, const char *path, const char *filename, const char *preview,
                     const char *channel) {
    if (!srv_view_wants_conversion(preview, channel) || !is_png_file(path)) return 0;
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = NULL, *conv = NULL;
    sd_png_info pi;
    sd_status rc = sd_png_read_limited(path, SD_PNG_KEEP, s->env->max_image_pixels, &t, &pi, &err);
    if (rc == SD_ERR_FORMAT || rc == SD_ERR_UNSUPPORTED) {
        /* Pillow fails too: ComfyUI answers 500 */
        return srv_reply_error(c, rc == SD_ERR_UNSUPPORTED ? 413 : 500, "bad_image", "the picture cannot be read");
    }
    if (rc) return srv_reply_error(c, 500, "view_failed", "the picture cannot be read");
    unsigned char *body = NULL;
    size_t n = 0;
    const char *ctype = "image/png";
    if (preview) {
        char fmt[8] = "";
        size_t fl = strcspn(preview, ";");
        if (fl < sizeof fmt) memcpy(fmt, preview, fl), fmt[fl] = 0;
        int jpeg = !strcmp(fmt, "jpeg") && !(channel && strchr(channel, 'a'));
        int quality = preview_quality(preview);
        conv = jpeg || (channel && !strcmp(channel, "rgb")) ? to_rgb(t) : to_webp_mode(t, &pi);
        ctype = jpeg ? "image/jpeg" : "image/webp";
#ifdef SDFLOW_HAVE_IMGCONV
        if (!conv) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        else rc = jpeg ? encode_jpeg(conv, quality, &body, &n, &err) : encode_webp(conv, quality, &body, &n, &err);
#else
        (void)quality;
        rc = sd_error_set(&err, SD_ERR_UNSUPPORTED, "this sdflow was built without libjpeg and libwebp");
#endif
    } else {
        conv = !strcmp(channel, "rgb") ? to_rgb(t) : to_alpha(t, pi.color_type == CT_RGBA);
        rc = conv ? encode_png(conv, &body, &n, &err) : sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
    }
    sd_tensor_unref(t);
    sd_tensor_unref(conv);
    if (rc == SD_ERR_UNSUPPORTED) return srv_reply_error(c, 501, "not_built", "%s", err.msg);
    if (rc) {
        srv_log(s, "error: /view: %s", err.msg);
        return srv_reply_error(c, 500, "view_failed", "converting the picture failed");
    }
    /* The name is checked before (no '/'); quotes would end the value. */
    char safe[256], extra[400];
    size_t k = 0;
    for (const char *p = filename; *p && k < sizeof safe - 1; p++) safe[k++] = (*p == '"' || *p < 0x20) ? '_' : *p;
    safe[k] = 0;
    snprintf(extra, sizeof extra, "Content-Disposition: filename=\"%s\"\r\n", safe);
    int st = srv_reply(c, 200, ctype, body, n, extra);
    free(body);
    return st;
}
