/* png.h - PNG reading and writing (libpng) for images, masks and metadata.
 *
 * Pixels travel as F32 tensors in [0, 1], layout [H, W, C] (HWC, no batch
 * dimension; nodes add it). Reading accepts every PNG colour type
 * (gray, gray+alpha, RGB, RGBA, palette with or without tRNS) at any bit
 * depth, and expands them so that:
 *   - gray images become C = 1 (gray+alpha C = 2) with SD_PNG_KEEP, or are
 *     expanded to RGB / RGBA with SD_PNG_RGB / SD_PNG_RGBA;
 *   - 16-bit samples keep their full precision (value / 65535).
 * Writing produces 8-bit gray, gray+alpha, RGB or RGBA (C = 1, 2, 3, 4)
 * with ComfyUI's quantisation (truncation, see sd_png_write).
 *
 * Errors: every function returns sd_status and fills err with a message that
 * names the file. Nothing is printed.
 */
#ifndef SD_PNG_H
#define SD_PNG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"
#include "core/tensor.h"

/* Channel layout requested from sd_png_read. */
typedef enum sd_png_layout {
    SD_PNG_KEEP = 0, /* C = 1 (gray), 2 (gray+alpha), 3 (RGB), 4 (RGBA) as in
                        the file; palette becomes RGB, or RGBA if it has tRNS */
    SD_PNG_RGB,      /* always C = 3 (alpha dropped, gray replicated) */
    SD_PNG_RGBA      /* always C = 4 (alpha = 1 where the file has none) */
} sd_png_layout;

/* Information about a PNG file, filled by sd_png_read. */
typedef struct sd_png_info {
    int width, height;
    int bit_depth;   /* as stored in the file (1, 2, 4, 8 or 16) */
    int color_type;  /* libpng PNG_COLOR_TYPE_* value */
    int has_alpha;   /* alpha channel or tRNS present */
} sd_png_info;

/* One text chunk, key must be 1..79 Latin-1 characters (PNG rule). */
typedef struct sd_png_text {
    const char *key;
    const char *value; /* UTF-8; written as tEXt when it is pure ASCII/Latin-1
                          representable, else as iTXt */
} sd_png_text;

/* Limits against decompression bombs (a small file that declares a huge
 * image or huge metadata):
 *  - an image of more than max_pixels pixels is refused before any pixel is
 *    decoded. The default is Pillow's (so ComfyUI's) DecompressionBombError
 *    threshold, 2 * MAX_IMAGE_PIXELS = 178956970; the env's
 *    max_image_pixels (SDFLOW_MAX_IMAGE_PIXELS, --max-image-pixels) sets it
 *    for LoadImage; 0 means no limit.
 *  - libpng may hold no single block over SD_PNG_CHUNK_MAX bytes (a text or
 *    other ancillary chunk, compressed text after inflating) and no more than
 *    SD_PNG_MEM_MAX bytes in all; beyond that the read fails at once.
 * Both failures are SD_ERR_UNSUPPORTED with the file and the limit named. */
#define SD_PNG_MAX_PIXELS_DEFAULT 178956970ULL
#define SD_PNG_CHUNK_MAX (64u << 20)
#define SD_PNG_MEM_MAX (256u << 20)

/* Read `path` into a new F32 tensor [H, W, C] with values in [0, 1].
 * *out receives one reference owned by the caller. info may be NULL.
 * SD_ERR_NOT_FOUND/SD_ERR_IO when the file cannot be opened,
 * SD_ERR_FORMAT when it is not a valid (or is a truncated) PNG,
 * SD_ERR_UNSUPPORTED beyond a limit (SD_PNG_MAX_PIXELS_DEFAULT pixels). */
sd_status sd_png_read(const char *path, sd_png_layout layout, sd_tensor **out,
                      sd_png_info *info, sd_error *err);
/* The same with another pixel limit (0 = none). */
sd_status sd_png_read_limited(const char *path, sd_png_layout layout, uint64_t max_pixels,
                              sd_tensor **out, sd_png_info *info, sd_error *err);

/* The header of `path` alone (size, depth, colour type, alpha): the chunks
 * before the image data are read and checked as sd_png_read does, no pixel is
 * decoded (an error in the image data is found only by a full read). The same
 * errors as sd_png_read_limited for a file that cannot be opened, is no PNG,
 * or declares more than max_pixels pixels (0 = no limit). */
sd_status sd_png_read_info(const char *path, uint64_t max_pixels, sd_png_info *info, sd_error *err);

/* Write `img` (F32 [H, W, C], C in {1, 2, 3, 4}; a leading batch dimension of 1
 * is also accepted) as an 8-bit PNG. Samples are clamped to [0, 1] and
 * converted as (uint8)(x * 255) after clipping, i.e. truncation like
 * ComfyUI's np.clip(i * 255, 0, 255).astype(np.uint8).
 * texts: n_texts key/value chunks written before the image data (may be NULL
 * when n_texts == 0). compress_level: 0..9 (zlib level; ComfyUI uses 4 for
 * SaveImage and 1 for PreviewImage).
 * Atomic: the data goes to a temporary file in the same directory
 * (core/outfile.h naming), which is fsync'd and renamed over `path` only when
 * complete; on failure no temporary file is left behind and `path` is
 * untouched; temporaries that killed writers left in that directory are
 * removed. Replaces `path` (for a path the user named, such as a preview);
 * output nodes create files exclusively instead (nodes/image/savepath.h). */
sd_status sd_png_write(const char *path, const sd_tensor *img,
                       const sd_png_text *texts, size_t n_texts,
                       int compress_level, sd_error *err);

/* The same encoding into an open stream (nothing else: no temporary, no
 * rename, the stream is flushed but not closed). `path` only names the file
 * in errors. Output nodes use this with core/outfile.h. */
sd_status sd_png_write_stream(FILE *f, const char *path, const sd_tensor *img,
                              const sd_png_text *texts, size_t n_texts, int compress_level,
                              sd_error *err);

/* Read the value of the text chunk `key` (tEXt, zTXt or iTXt) of `path`.
 * *out receives a malloc'ed NUL-terminated UTF-8 string the caller frees.
 * SD_ERR_NOT_FOUND when the file has no such chunk (*out = NULL). The
 * chunk limits above apply; the pixel limit too when the text follows the
 * image data (the rows are decoded to reach it). */
sd_status sd_png_read_text(const char *path, const char *key, char **out,
                           sd_error *err);

/* Every text chunk of `path` (before and after the image data), in file
 * order: *out (malloc'd, keys and values too; free with sd_png_texts_free)
 * and *n (0 and NULL when there is none). Same limits as sd_png_read_text. */
sd_status sd_png_read_texts(const char *path, sd_png_text **out, size_t *n, sd_error *err);
void sd_png_texts_free(sd_png_text *t, size_t n);

#endif
