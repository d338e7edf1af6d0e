/* png.c - libpng-backed reading and writing of images and text chunks.
 *
 * libpng reports errors by longjmp. Every entry point below keeps the
 * resources it must free in a struct that lives outside the setjmp frame
 * (volatile-free design: nothing allocated after setjmp is held only in a
 * local variable that the longjmp could clobber).
 */
#include "png.h"
#include "core/outfile.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- libpng error plumbing and memory limits -------------------------------- */

/* Error text and the memory libpng holds. libpng sizes a chunk's buffer from
 * the length the file declares and (on read) treats "chunk data is too
 * large" as a warning, so a 48-byte file declaring a 2 GB tEXt chunk made it
 * allocate 2 GB. All of libpng's allocations go through png_mem_alloc below,
 * which refuses any one of more than SD_PNG_CHUNK_MAX bytes and more than
 * SD_PNG_MEM_MAX bytes in all (text chunks accumulate in the info struct;
 * zTXt/iTXt inflate). Pixel buffers are ours, bounded by the pixel limit. */
typedef struct png_errctx {
    char msg[256];
    const char *path;
    size_t live;  /* bytes libpng holds now */
    int limit_hit;
    char dropped[200]; /* the first chunk libpng dropped with a warning (a text
                          chunk inflating past the limit is one), or "" */
} png_errctx;

/* A header before each block records its size for png_mem_free. */
typedef union mem_hdr { size_t size; max_align_t align; } mem_hdr;

static png_voidp png_mem_alloc(png_structp png, png_alloc_size_t size) {
    png_errctx *ec = (png_errctx *)png_get_mem_ptr(png);
    if (ec && (size > SD_PNG_CHUNK_MAX || ec->live + size > SD_PNG_MEM_MAX)) {
        ec->limit_hit = 1;
        char buf[200];
        if (size > SD_PNG_CHUNK_MAX)
            snprintf(buf, sizeof buf, "a chunk needs %zu bytes, more than the limit of %u "
                     "(SD_PNG_CHUNK_MAX)", (size_t)size, (unsigned)SD_PNG_CHUNK_MAX);
        else
            snprintf(buf, sizeof buf, "the chunks need more than the limit of %u bytes in all "
                     "(SD_PNG_MEM_MAX)", (unsigned)SD_PNG_MEM_MAX);
        png_error(png, buf); /* longjmps to the reader's setjmp: fail now, not after 2 GB */
    }
    mem_hdr *h = malloc(sizeof *h + size);
    if (!h) return NULL;
    h->size = size;
    if (ec) ec->live += size;
    return h + 1;
}

static void png_mem_free(png_structp png, png_voidp p) {
    if (!p) return;
    mem_hdr *h = (mem_hdr *)p - 1;
    png_errctx *ec = (png_errctx *)png_get_mem_ptr(png);
    if (ec && ec->live >= h->size) ec->live -= h->size;
    free(h);
}

static png_structp new_reader(png_errctx *ec);

static void on_png_error(png_structp png, png_const_charp msg) {
    png_errctx *ec = (png_errctx *)png_get_error_ptr(png);
    if (ec) snprintf(ec->msg, sizeof ec->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg) {
    /* warnings (bad ancillary chunk CRC, ...) are not errors, but a text
     * chunk libpng drops (a compressed one inflating past the chunk limit
     * gives "iTXt: truncated") is remembered, so that "no such chunk" can
     * say why instead of suggesting the file never had it */
    png_errctx *ec = (png_errctx *)png_get_error_ptr(png);
    int text_chunk = msg && (!strncmp(msg, "tEXt", 4) || !strncmp(msg, "zTXt", 4) || !strncmp(msg, "iTXt", 4));
    if (ec && !ec->dropped[0] && text_chunk) snprintf(ec->dropped, sizeof ec->dropped, "%s", msg);
}

static png_structp new_reader(png_errctx *ec) {
    png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, ec, on_png_error,
                                               on_png_warning, ec, png_mem_alloc, png_mem_free);
    if (png) {
        png_set_chunk_malloc_max(png, SD_PNG_CHUNK_MAX);
        png_set_chunk_cache_max(png, 1000); /* ancillary chunks kept (libpng's default) */
    }
    return png;
}

/* The error of a failed read: a limit, when one was hit, else libpng's. */
static sd_status read_failed(const png_errctx *ec, const char *path, sd_error *err) {
    if (ec->limit_hit)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: PNG refused: %s", path, ec->msg);
    return sd_error_set(err, SD_ERR_FORMAT, "%s: invalid or truncated PNG: %s", path,
                        ec->msg[0] ? ec->msg : "read error");
}

/* Refuse an image with more than max_pixels pixels (0 = no limit) before
 * anything is decoded. */
static sd_status check_pixels(const char *path, png_uint_32 w, png_uint_32 h, uint64_t max_pixels,
                              sd_error *err) {
    uint64_t n = (uint64_t)w * h;
    if (max_pixels && n > max_pixels)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: image of %ux%u = %llu pixels is larger than "
                            "the limit of %llu pixels (SDFLOW_MAX_IMAGE_PIXELS or --max-image-pixels; "
                            "0 means no limit): refused as a possible decompression bomb", path,
                            (unsigned)w, (unsigned)h, (unsigned long long)n,
                            (unsigned long long)max_pixels);
    return SD_OK;
}

static sd_status open_for_read(const char *path, FILE **out, sd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return sd_error_set(err, e == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO,
                            "%s: cannot open: %s", path, strerror(e));
    }
    unsigned char sig[8];
    size_t n = fread(sig, 1, sizeof sig, f);
    if (n != sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0) {
        fclose(f);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: not a PNG file (bad signature)", path);
    }
    *out = f;
    return SD_OK;
}

/* ---- reading pixels --------------------------------------------------------- */

typedef struct read_state {
    FILE *f;
    png_structp png;
    png_infop info;
    png_bytep pixels;
    png_bytepp rows;
    sd_tensor *t;
} read_state;

static void read_state_free(read_state *s) {
    if (!s) return;
    if (s->png) png_destroy_read_struct(&s->png, s->info ? &s->info : NULL, NULL);
    free(s->rows);
    free(s->pixels);
    if (s->f) fclose(s->f);
    sd_tensor_unref(s->t);
    free(s);
}

/* The file opened and a reader with its info struct made, into *out (heap
 * state: fields set after the caller's setjmp stay valid across the
 * longjmp). ec must outlive the state: libpng frees through it. The setjmp
 * stays in each caller, whose frame must be live when libpng jumps. */
static sd_status read_state_open(const char *path, png_errctx *ec, read_state **out,
                                 sd_error *err) {
    read_state *sp = calloc(1, sizeof *sp);
    if (!sp) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    sd_status rc = open_for_read(path, &sp->f, err);
    if (rc) { free(sp); return rc; }
    sp->png = new_reader(ec);
    if (sp->png) sp->info = png_create_info_struct(sp->png);
    if (!sp->png || !sp->info) {
        read_state_free(sp);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory creating PNG reader", path);
    }
    *out = sp;
    return SD_OK;
}

/* Expand stored channels (cs = 1..4 in PNG order: G, GA, RGB, RGBA) into the
 * requested layout, one pixel at a time. */
static void put_pixel(float *dst, int cd, const float *src, int cs) {
    float r, g, b, a = 1.0f;
    if (cs <= 2) { r = g = b = src[0]; if (cs == 2) a = src[1]; }
    else { r = src[0]; g = src[1]; b = src[2]; if (cs == 4) a = src[3]; }
    if (cd == 3) { dst[0] = r; dst[1] = g; dst[2] = b; }
    else { dst[0] = r; dst[1] = g; dst[2] = b; dst[3] = a; }
}

sd_status sd_png_read_info(const char *path, uint64_t max_pixels, sd_png_info *info_out, sd_error *err) {
    png_errctx ec = {{0}}; /* outlives sp: libpng frees through it */
    read_state *sp = NULL;
    sd_status rc = read_state_open(path, &ec, &sp, err);
    if (rc) return rc;
    if (setjmp(png_jmpbuf(sp->png))) {
        read_state_free(sp);
        return read_failed(&ec, path, err);
    }
    png_init_io(sp->png, sp->f);
    png_set_sig_bytes(sp->png, 8);
    png_read_info(sp->png, sp->info);
    png_uint_32 w = 0, h = 0;
    int depth = 0, ctype = 0;
    png_get_IHDR(sp->png, sp->info, &w, &h, &depth, &ctype, NULL, NULL, NULL);
    rc = check_pixels(path, w, h, max_pixels, err);
    if (!rc)
        *info_out = (sd_png_info){(int)w, (int)h, depth, ctype,
                                  (ctype & PNG_COLOR_MASK_ALPHA) != 0 ||
                                      png_get_valid(sp->png, sp->info, PNG_INFO_tRNS) != 0};
    read_state_free(sp);
    return rc;
}

sd_status sd_png_read(const char *path, sd_png_layout layout, sd_tensor **out,
                      sd_png_info *info_out, sd_error *err) {
    return sd_png_read_limited(path, layout, SD_PNG_MAX_PIXELS_DEFAULT, out, info_out, err);
}

sd_status sd_png_read_limited(const char *path, sd_png_layout layout, uint64_t max_pixels,
                              sd_tensor **out, sd_png_info *info_out, sd_error *err) {
    *out = NULL;
    png_errctx ec = {{0}}; /* outlives sp: libpng frees through it */
    read_state *sp = NULL;
    sd_status rc = read_state_open(path, &ec, &sp, err);
    if (rc) return rc;
    if (setjmp(png_jmpbuf(sp->png))) {
        read_state_free(sp);
        return read_failed(&ec, path, err);
    }
    png_init_io(sp->png, sp->f);
    png_set_sig_bytes(sp->png, 8);
    png_read_info(sp->png, sp->info);

    png_uint_32 w = 0, h = 0;
    int depth = 0, ctype = 0, interlace = 0;
    png_get_IHDR(sp->png, sp->info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    rc = check_pixels(path, w, h, max_pixels, err);
    if (rc) {
        read_state_free(sp);
        return rc;
    }
    int has_trns = png_get_valid(sp->png, sp->info, PNG_INFO_tRNS) != 0;
    sd_png_info pi = {(int)w, (int)h, depth, ctype,
                      (ctype & PNG_COLOR_MASK_ALPHA) != 0 || has_trns};

    /* Normalise to 8 or 16 bit G/GA/RGB/RGBA samples. */
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(sp->png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(sp->png);
    if (has_trns) png_set_tRNS_to_alpha(sp->png);
    png_set_interlace_handling(sp->png);
    png_read_update_info(sp->png, sp->info);

    int cs = png_get_channels(sp->png, sp->info);
    int bd = png_get_bit_depth(sp->png, sp->info);
    size_t rowbytes = png_get_rowbytes(sp->png, sp->info);
    if (cs < 1 || cs > 4 || (bd != 8 && bd != 16) || w == 0 || h == 0 ||
        rowbytes != (size_t)w * cs * (bd / 8)) {
        read_state_free(sp);
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: unsupported PNG layout "
                            "(%d channels, %d bits)", path, cs, bd);
    }
    if ((uint64_t)h * rowbytes > (uint64_t)SIZE_MAX / 2) {
        read_state_free(sp);
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: image too large (%ux%u)", path,
                            (unsigned)w, (unsigned)h);
    }
    sp->pixels = malloc((size_t)h * rowbytes);
    sp->rows = malloc((size_t)h * sizeof *sp->rows);
    int cd = layout == SD_PNG_RGB ? 3 : layout == SD_PNG_RGBA ? 4 : cs;
    sp->t = sd_tensor_new4(SD_F32, 3, h, w, cd, 0);
    if (!sp->pixels || !sp->rows || !sp->t) {
        read_state_free(sp);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory for %ux%u image", path,
                            (unsigned)w, (unsigned)h);
    }
    for (png_uint_32 y = 0; y < h; y++) sp->rows[y] = sp->pixels + (size_t)y * rowbytes;
    png_read_image(sp->png, sp->rows);
    png_read_end(sp->png, NULL);

    float *dst = sd_tensor_f32(sp->t);
    size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++) {
        float px[4];
        for (int c = 0; c < cs; c++) {
            if (bd == 8) {
                px[c] = (float)sp->pixels[i * cs + c] / 255.0f;
            } else {
                const png_byte *p = sp->pixels + (i * cs + c) * 2;
                px[c] = (float)((p[0] << 8) | p[1]) / 65535.0f;
            }
        }
        if (cd == cs) memcpy(dst + i * cd, px, sizeof(float) * cd);
        else put_pixel(dst + i * cd, cd, px, cs);
    }
    *out = sp->t;
    sp->t = NULL;
    if (info_out) *info_out = pi;
    read_state_free(sp);
    return SD_OK;
}

/* ---- text chunks --------------------------------------------------------------- */

/* Latin-1 bytes -> malloc'ed UTF-8. */
static char *latin1_to_utf8(const char *s, size_t n) {
    char *o = malloc(n * 2 + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) o[j++] = (char)c;
        else { o[j++] = (char)(0xC0 | (c >> 6)); o[j++] = (char)(0x80 | (c & 0x3F)); }
    }
    o[j] = 0;
    return o;
}

/* UTF-8 -> malloc'ed Latin-1 when every code point is <= U+00FF and there is
 * no NUL; NULL otherwise (the caller then uses iTXt). */
static char *utf8_to_latin1(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) { o[j++] = (char)c; i++; }
        else if ((c == 0xC2 || c == 0xC3) && i + 1 < n &&
                 ((unsigned char)s[i + 1] & 0xC0) == 0x80) {
            o[j++] = (char)(((c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F));
            i += 2;
        } else { free(o); return NULL; }
    }
    o[j] = 0;
    return o;
}

static const png_text *find_text(png_structp png, png_infop info, const char *key) {
    png_textp texts = NULL;
    int n = png_get_text(png, info, &texts, NULL);
    for (int i = 0; i < n; i++)
        if (texts[i].key && strcmp(texts[i].key, key) == 0) return &texts[i];
    return NULL;
}

static char *text_value_utf8(const png_text *t) {
    if (t->compression == PNG_ITXT_COMPRESSION_NONE || t->compression == PNG_ITXT_COMPRESSION_zTXt) {
        size_t n = t->itxt_length;
        char *o = malloc(n + 1);
        if (o) { memcpy(o, t->text ? t->text : "", n); o[n] = 0; }
        return o;
    }
    return latin1_to_utf8(t->text ? t->text : "", t->text_length);
}

/* Decodes the image's rows and drops them, to reach the chunks after IDAT
 * (text may follow the image data), within the same pixel limit as
 * sd_png_read: decoding is time even when the rows are dropped. Runs under
 * the caller's setjmp; sp->pixels holds one row. */
static sd_status skip_image_data(read_state *sp, const char *path, sd_error *err) {
    sd_status rc = check_pixels(path, png_get_image_width(sp->png, sp->info),
                                png_get_image_height(sp->png, sp->info), SD_PNG_MAX_PIXELS_DEFAULT, err);
    if (rc) return rc;
    int passes = png_set_interlace_handling(sp->png);
    png_read_update_info(sp->png, sp->info);
    png_uint_32 h = png_get_image_height(sp->png, sp->info);
    sp->pixels = malloc(png_get_rowbytes(sp->png, sp->info));
    if (!sp->pixels) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    for (int p = 0; p < passes; p++)
        for (png_uint_32 y = 0; y < h; y++) png_read_row(sp->png, sp->pixels, NULL);
    png_read_end(sp->png, sp->info);
    return SD_OK;
}

sd_status sd_png_read_text(const char *path, const char *key, char **out, sd_error *err) {
    *out = NULL;
    png_errctx ec = {{0}}; /* outlives sp: libpng frees through it */
    read_state *sp = NULL;
    sd_status rc = read_state_open(path, &ec, &sp, err);
    if (rc) return rc;
    if (setjmp(png_jmpbuf(sp->png))) {
        read_state_free(sp);
        return read_failed(&ec, path, err);
    }
    png_init_io(sp->png, sp->f);
    png_set_sig_bytes(sp->png, 8);
    png_read_info(sp->png, sp->info);
    const png_text *t = find_text(sp->png, sp->info, key);
    if (!t) { /* it may follow the image data */
        rc = skip_image_data(sp, path, err);
        if (rc) {
            read_state_free(sp);
            return rc;
        }
        t = find_text(sp->png, sp->info, key);
    }
    if (!t) {
        read_state_free(sp);
        if (ec.dropped[0])
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: no text chunk '%s' could be read: libpng dropped one (%s; a compressed "
                                "text chunk may inflate to at most %u MiB, SD_PNG_CHUNK_MAX)",
                                path, key, ec.dropped, (unsigned)(SD_PNG_CHUNK_MAX >> 20));
        return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: no text chunk '%s'", path, key);
    }
    *out = text_value_utf8(t);
    read_state_free(sp);
    if (!*out) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    return SD_OK;
}

sd_status sd_png_read_texts(const char *path, sd_png_text **out, size_t *n, sd_error *err) {
    *out = NULL;
    *n = 0;
    png_errctx ec = {{0}}; /* outlives sp: libpng frees through it */
    read_state *sp = NULL;
    sd_status rc = read_state_open(path, &ec, &sp, err);
    if (rc) return rc;
    if (setjmp(png_jmpbuf(sp->png))) {
        read_state_free(sp);
        return read_failed(&ec, path, err);
    }
    png_init_io(sp->png, sp->f);
    png_set_sig_bytes(sp->png, 8);
    png_read_info(sp->png, sp->info);
    rc = skip_image_data(sp, path, err); /* every chunk, after IDAT too */
    if (rc) {
        read_state_free(sp);
        return rc;
    }
    png_textp texts = NULL;
    int count = png_get_text(sp->png, sp->info, &texts, NULL);
    sd_png_text *t = count > 0 ? calloc((size_t)count, sizeof *t) : NULL;
    size_t k = 0;
    for (int i = 0; t && i < count; i++) {
        char *key = texts[i].key ? strdup(texts[i].key) : NULL, *value = key ? text_value_utf8(&texts[i]) : NULL;
        if (!key || !value) {
            free(key);
            free(value);
            sd_png_texts_free(t, k);
            t = NULL;
            break;
        }
        t[k].key = key;
        t[k++].value = value;
    }
    read_state_free(sp);
    if (count > 0 && !t) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    *out = t;
    *n = k;
    return SD_OK;
}

void sd_png_texts_free(sd_png_text *t, size_t n) {
    for (size_t i = 0; t && i < n; i++) {
        free((char *)t[i].key);
        free((char *)t[i].value);
    }
    free(t);
}

/* ---- writing ------------------------------------------------------------------ */

typedef struct write_state {
    png_structp png;
    png_infop info;
    png_bytep pixels;
    png_bytepp rows;
    png_textp texts;
    char **strs; /* converted keys/values owned here */
    size_t nstrs;
} write_state;

static void write_state_free(write_state *s) {
    if (s->png) png_destroy_write_struct(&s->png, s->info ? &s->info : NULL);
    free(s->pixels);
    free(s->rows);
    free(s->texts);
    for (size_t i = 0; i < s->nstrs; i++) free(s->strs[i]);
    free(s->strs);
}

static unsigned char to_u8(float x) {
    /* np.clip(255 * x, 0, 255).astype(uint8): scale in float32, clip, truncate */
    float v = 255.0f * x;
    if (!(v > 0.0f)) return 0; /* also NaN */
    if (v >= 255.0f) return 255;
    return (unsigned char)v;
}

static int valid_key(const char *k) {
    size_t n = strlen(k);
    if (n < 1 || n > 79) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c < 32 || (c > 126 && c < 161)) return 0;
    }
    return 1;
}

static sd_status check_write_args(const char *path, const sd_tensor *img, const sd_png_text *texts,
                                  size_t n_texts, int compress_level, sd_error *err) {
    if (!img || img->dtype != SD_F32 || (img->ndim != 3 && !(img->ndim == 4 && img->shape[0] == 1)))
        return sd_error_set(err, SD_ERR_INVALID, "%s: image to write must be F32 [H, W, C] "
                            "or [1, H, W, C]", path);
    int o = img->ndim - 3;
    int64_t h = img->shape[o], w = img->shape[o + 1], c = img->shape[o + 2];
    if (c != 1 && c != 2 && c != 3 && c != 4)
        return sd_error_set(err, SD_ERR_INVALID, "%s: cannot write %lld channels as PNG",
                            path, (long long)c);
    if (h < 1 || w < 1 || h > 0x7fffffff || w > 0x7fffffff)
        return sd_error_set(err, SD_ERR_INVALID, "%s: bad image size %lldx%lld", path,
                            (long long)w, (long long)h);
    if (compress_level < 0 || compress_level > 9)
        return sd_error_set(err, SD_ERR_INVALID, "%s: compress level %d outside 0..9", path,
                            compress_level);
    for (size_t i = 0; i < n_texts; i++)
        if (!texts[i].key || !texts[i].value || !valid_key(texts[i].key))
            return sd_error_set(err, SD_ERR_INVALID, "%s: invalid PNG text key '%s'", path,
                                texts[i].key ? texts[i].key : "(null)");
    return SD_OK;
}

sd_status sd_png_write_stream(FILE *f, const char *path, const sd_tensor *img,
                              const sd_png_text *texts, size_t n_texts, int compress_level,
                              sd_error *err) {
    sd_status rc = check_write_args(path, img, texts, n_texts, compress_level, err);
    if (rc) return rc;
    int o = img->ndim - 3;
    int64_t h = img->shape[o], w = img->shape[o + 1], c = img->shape[o + 2];
    write_state s = {0};
    png_errctx ec = {{0}};

    size_t rowbytes = (size_t)w * (size_t)c;
    s.pixels = malloc(rowbytes * (size_t)h);
    s.rows = malloc(sizeof *s.rows * (size_t)h);
    s.texts = n_texts ? calloc(n_texts, sizeof *s.texts) : NULL;
    s.strs = n_texts ? calloc(n_texts * 2, sizeof *s.strs) : NULL;
    if (!s.pixels || !s.rows || (n_texts && (!s.texts || !s.strs))) {
        write_state_free(&s);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    }
    const float *src = sd_tensor_f32(img);
    size_t n = rowbytes * (size_t)h;
    for (size_t i = 0; i < n; i++) s.pixels[i] = to_u8(src[i]);
    for (int64_t y = 0; y < h; y++) s.rows[y] = s.pixels + (size_t)y * rowbytes;

    for (size_t i = 0; i < n_texts; i++) {
        char *key = utf8_to_latin1(texts[i].key);
        char *lat = utf8_to_latin1(texts[i].value);
        s.strs[s.nstrs++] = key;
        if (lat) s.strs[s.nstrs++] = lat;
        if (!key) {
            write_state_free(&s);
            return sd_error_set(err, SD_ERR_INVALID, "%s: text key '%s' is not Latin-1",
                                path, texts[i].key);
        }
        png_text *t = &s.texts[i];
        t->key = key;
        if (lat) { /* Pillow's add_text: tEXt when Latin-1 encodable */
            t->compression = PNG_TEXT_COMPRESSION_NONE;
            t->text = lat;
            t->text_length = strlen(lat);
        } else {
            t->compression = PNG_ITXT_COMPRESSION_NONE;
            t->text = (char *)texts[i].value;
            t->itxt_length = strlen(texts[i].value);
            t->lang = (char *)"";
            t->lang_key = (char *)"";
        }
    }

    s.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ec, on_png_error, on_png_warning);
    if (s.png) s.info = png_create_info_struct(s.png);
    if (!s.png || !s.info) {
        write_state_free(&s);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory creating PNG writer", path);
    }
    if (setjmp(png_jmpbuf(s.png))) {
        write_state_free(&s);
        return sd_error_set(err, SD_ERR_IO, "%s: writing PNG failed: %s", path,
                            ec.msg[0] ? ec.msg : "write error");
    }
    png_init_io(s.png, f);
    png_set_compression_level(s.png, compress_level);
    static const int ctypes[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                  PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
    png_set_IHDR(s.png, s.info, (png_uint_32)w, (png_uint_32)h, 8, ctypes[c],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (n_texts) png_set_text(s.png, s.info, s.texts, (int)n_texts);
    png_write_info(s.png, s.info);
    png_write_image(s.png, s.rows);
    png_write_end(s.png, NULL);
    write_state_free(&s);
    if (fflush(f) != 0 || ferror(f)) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return SD_OK;
}

sd_status sd_png_write(const char *path, const sd_tensor *img, const sd_png_text *texts,
                       size_t n_texts, int compress_level, sd_error *err) {
    sd_status rc = check_write_args(path, img, texts, n_texts, compress_level, err);
    if (rc) return rc;
    /* A temporary file in the destination folder (named after our pid, so
     * that one a killed writer left is removed by the next write there),
     * then rename() onto the path: readers never see half a file. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    sd_outdir d;
    rc = sd_outdir_open_existing(dir, &d, err);
    free(dir);
    if (rc) {
        sd_error_prefix(err, "%s", path);
        return rc;
    }
    rc = sd_outdir_scan(&d, NULL, NULL, NULL, err);
    sd_outfile of;
    memset(&of, 0, sizeof of);
    if (!rc) rc = sd_outfile_create(&d, &of, err);
    if (!rc) rc = sd_png_write_stream(of.f, path, img, texts, n_texts, compress_level, err);
    else sd_error_prefix(err, "%s", path);
    if (!rc) {
        rc = sd_outfile_replace(&of, base, err);
        if (rc) sd_error_prefix(err, "%s", path);
    }
    sd_outfile_discard(&of);
    sd_outdir_close(&d);
    return rc;
}
