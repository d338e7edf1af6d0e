/* gligen_nodes.h - GLIGENLoader and GLIGENTextBoxApply (nodes.py), and how
 * the sampler reads what they attach to CONDITIONING.
 *
 * GLIGEN is a handle over a loaded GLIGEN model (models/gligen/gligen.h)
 * and the file name it came from (errors name it). GLIGENTextBoxApply
 * gives every entry of its CONDITIONING (a new dict; the input is not
 * modified) ComfyUI's tuple
 *   "gligen"  SD_VAL_LIST ["position", GLIGEN, boxes], boxes a list of
 *             [pooled F32 [1, P], height // 8, width // 8, y // 8, x // 8]
 *             (latent pixels), the entry's earlier boxes first.
 * The sampler (nodes/sampling) turns an entry's "gligen" into the position
 * net's objects for each model call (sd_nodes_gligen_of) and runs the UNet
 * with the fusers as its middle_patch; process_conds gives the negative
 * entries without one the positive's (apply_empty_x_to_equal_area). */
#ifndef SD_NODES_GLIGEN_H
#define SD_NODES_GLIGEN_H

#include "core/node.h"
#include "models/gligen/gligen.h"

typedef struct sd_gligen_ref {
    sd_gligen *g;
    char *name; /* the gligen_name it was loaded as */
} sd_gligen_ref;

extern const sd_handle_type sd_handle_gligen; /* "GLIGEN" */
extern const sd_node_def *const sd_nodes_gligen[];

/* An entry's "gligen" (absent or none: *ref = NULL). Otherwise *ref
 * borrows the entry's model, *boxes a malloc'd array (free() it) of *n
 * boxes borrowing the entry's tensors; kind "position" (ComfyUI's other
 * kind is set_empty: *n = 0). SD_ERR_INVALID when malformed. */
sd_status sd_nodes_gligen_of(const sd_value *entry, const sd_gligen_ref **ref, sd_gligen_box **boxes, int *n,
                             sd_error *err);

#endif
