/* upscale_internal.h - private to models/upscale and its unit tests. */
#ifndef SD_UPSCALE_INTERNAL_H
#define SD_UPSCALE_INTERNAL_H

#include "models/upscale/upscale.h"

/* One tile's forward, as sd_upscale_forward. */
typedef sd_status (*sd_upscale_forward_fn)(void *user, sd_upscale *m, const sd_tensor *x,
                                           sd_tensor **y, sd_error *err);

/* sd_upscale_image with the forward replaced by fwd(fwd_user, ...): the
 * tests make it run out of memory above a tile size to exercise the
 * back-off, which no real backend lets them provoke cheaply. */
sd_status sd_upscale_image_with(sd_upscale *m, const sd_tensor *image, int tile, int overlap,
                                int min_tile, sd_upscale_forward_fn fwd, void *fwd_user,
                                sd_upscale_progress_fn progress, void *user, sd_tensor **out,
                                int *tile_used, sd_error *err);

#endif
