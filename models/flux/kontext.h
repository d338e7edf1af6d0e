/* kontext.h - the picture size Flux Kontext dev works at.
 *
 * ComfyUI's FluxKontextImageScale (comfy_extras/nodes_flux.py) resizes the
 * picture to edit to the entry of PREFERED_KONTEXT_RESOLUTIONS (672x1568 ..
 * 1568x672, every side a multiple of 16) nearest in aspect ratio. The node
 * scales with it, and `sdflow generate --reference` sizes its latent with it
 * before anything runs (the size the node will give), so both share this one
 * table. */
#ifndef SD_FLUX_KONTEXT_H
#define SD_FLUX_KONTEXT_H

#include <stdint.h>

/* The Kontext size for a picture of width x height (both > 0): ComfyUI's
 * min((|w/h - rw/rh|, rw, rh)) over the table, ties going to the smaller
 * width then height, as Python compares the tuples. */
void sd_flux_kontext_size(int64_t width, int64_t height, int64_t *out_w, int64_t *out_h);

#endif
