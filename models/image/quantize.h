/* quantize.h - ImageQuantize's colour reduction (ComfyUI's
 * comfy_extras/nodes_post_processing.py Quantize), which goes through Pillow:
 *
 *   palette: Image.quantize(colors) of the 8-bit picture, Pillow's median cut
 *     (libImaging/Quant.c, Pillow 9.4 as Debian ships it): distinct colours
 *     counted in Pillow's own hash table (colours whose hash values collide
 *     count as one, as there; above 65536 distinct colours the low bits are
 *     dropped), lists sorted per channel, the most populous box split at
 *     the median of its widest (luminance-weighted) channel until `colors`
 *     boxes, each box's mean colour rounded;
 *   mapping: Image.quantize(palette=...) (libImaging/Convert.c topalette and
 *     Palette.c): every colour goes to the palette entry nearest to its
 *     6-bit cell's corner (r & ~3, g & ~3, b & ~3), the lowest index on a
 *     tie; "floyd-steinberg" diffuses the error with Pillow's integer
 *     arithmetic (including where it carries the last pixel's error of a row
 *     into the next row); the Bayer orders add ComfyUI's ordered-dither
 *     matrix (float32) to the picture first and then map without dithering.
 *
 * Everything is integer arithmetic on 8-bit values (the Bayer matrix in
 * float32 as numpy computes it), so results match ComfyUI exactly.
 *
 * Ownership: the caller owns every buffer. Errors: -1 when out of memory.
 */
#ifndef SD_QUANTIZE_H
#define SD_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/* Pillow's median-cut palette of n RGB pixels (rgb: 3 bytes each) with at
 * most `colors` (1..256) entries into palette (3 bytes each); *n_entries
 * receives the count. Returns 0, or -1 when out of memory. */
int sd_quantize_palette(const uint8_t *rgb, size_t n, int colors, uint8_t palette[256 * 3], int *n_entries);

typedef enum sd_dither {
    SD_DITHER_NONE = 0,
    SD_DITHER_FLOYD_STEINBERG,
    SD_DITHER_BAYER /* with an order 2, 4, 8 or 16 */
} sd_dither;

/* The w x h RGB picture mapped to the palette (n_entries colours) and
 * written back as the palette's colours into out (3 bytes per pixel; may
 * alias rgb). bayer_order: the Bayer matrix size for SD_DITHER_BAYER.
 * Returns 0, or -1 when out of memory. */
int sd_quantize_map(const uint8_t *rgb, int64_t w, int64_t h, const uint8_t *palette, int n_entries,
                    sd_dither dither, int bayer_order, uint8_t *out);

#endif
