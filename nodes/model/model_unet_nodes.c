/* model_unet_nodes.c - MODEL patch nodes that change how the UNet computes
 * (issue 24), each a patch appended to the MODEL's UNet patch list
 * (sd_model_patches.unet, models/unet/unet.h) on a clone of the input:
 *   PatchModelAddDownscale (comfy_extras/nodes_model_downscale.py): Kohya's
 *     Deep Shrink, an input block patch that shrinks the features after one
 *     input block inside a sigma window and an output block patch that
 *     brings them back to the skip's size;
 *   HyperTile (comfy_extras/nodes_hypertile.py): self-attention on tiles of
 *     the queries, the tiling drawn from the run's generator;
 *   TomePatchModel (comfy_extras/nodes_tomesd.py): token merging of the
 *     full-resolution self-attention's queries (models/unet/unet_tome.c). */
#include "model_nodes.h"

#include <stdlib.h>
#include <string.h>

#include "models/image/imageops.h"
#include "nodes/loaders/loaders.h"

/* A new MODEL: m with the n patches pts appended to its UNet patches, in
 * order. ComfyUI's UNet patch points exist in openaimodel only: a DiT's
 * MODEL is refused, naming the family's file. */
static sd_status add_unet_patches(const sd_model_ref *m, const sd_unet_patch *pts, int n, const char *node,
                                  sd_value **out, sd_error *err) {
    sd_ckpt_family fam = sd_checkpoint_info(m->ckpt)->family;
    if (fam != SD_CKPT_SD1 && fam != SD_CKPT_SD2 && fam != SD_CKPT_SDXL)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s patches a UNet (SD1, SD2, SDXL); %s has none", node,
                            sd_checkpoint_path(m->ckpt));
    sd_model_patches p = m->patches;
    for (int i = 0; i < n; i++) {
        sd_status rc = sd_unet_patches_add(&p.unet, &pts[i], err);
        if (rc) return rc;
    }
    *out = sd_nodes_model_value_patched(m->ckpt, m->loras, &p);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- PatchModelAddDownscale ------------------------------------------------------------- */

static sd_status method_in(sd_value *const *in, int i, const char *name, sd_upscale_method *m, sd_error *err) {
    const char *s = sd_value_as_string(in[i]);
    if (sd_upscale_method_parse(s ? s : "", m) || *m == SD_UPSCALE_LANCZOS) {
        sd_error_set(err, SD_ERR_INVALID, "unknown %s '%s' (bicubic, nearest-exact, bilinear, area or bislerp)", name,
                     s ? s : "");
        sd_error_at(err, NULL, NULL, name);
        return SD_ERR_INVALID;
    }
    return SD_OK;
}

/* The sigma window comes from the MODEL's sampling as it is at this node
 * (model_sampling.percent_to_sigma), as ComfyUI's execute reads it. */
static sd_status downscale_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    sd_upscale_method down, up;
    if ((rc = method_in(in, 6, "downscale_method", &down, err)) || (rc = method_in(in, 7, "upscale_method", &up, err)))
        return rc;
    double factor = sd_value_as_float(in[2]);
    if (!(factor > 0.0)) {
        sd_error_set(err, SD_ERR_INVALID, "downscale_factor must be above 0");
        sd_error_at(err, NULL, NULL, "downscale_factor");
        return SD_ERR_INVALID;
    }
    sd_model_sampling *ms = malloc(sizeof *ms); /* ~100 KiB: not on the stack */
    if (!ms) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_nodes_model_sampling_of(m->ckpt, &m->patches, ms);
    sd_unet_patch pts[2];
    memset(pts, 0, sizeof pts);
    pts[0].kind = sd_value_as_bool(in[5]) ? SD_UNET_PATCH_DOWNSCALE_AFTER_SKIP : SD_UNET_PATCH_DOWNSCALE;
    pts[0].block = SD_UNET_BLOCK_INPUT;
    pts[0].block_id = (int)sd_value_as_int(in[1]);
    pts[0].index = -1;
    pts[0].p[0] = factor;
    pts[0].p[1] = sd_ms_percent_to_sigma(ms, sd_value_as_float(in[3]));
    pts[0].p[2] = sd_ms_percent_to_sigma(ms, sd_value_as_float(in[4]));
    pts[0].p[3] = (double)down;
    free(ms);
    pts[1].kind = SD_UNET_PATCH_UPSCALE_TO_SKIP;
    pts[1].block = SD_UNET_BLOCK_OUTPUT;
    pts[1].block_id = -1;
    pts[1].index = -1;
    pts[1].p[0] = (double)up;
    return add_unet_patches(m, pts, 2, "PatchModelAddDownscale", &out[0], err);
}

static const char *const scale_methods[] = {"bicubic", "nearest-exact", "bilinear", "area", "bislerp", NULL};

static const sd_input_def downscale_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "block_number", .type = SD_T_INT, .def = 3, .min = 1, .max = 32, .step = 1, .has_range = 1},
    {.name = "downscale_factor", .type = SD_T_FLOAT, .def = 2.0, .min = 0.1, .max = 9.0, .step = 0.001,
     .has_range = 1},
    {.name = "start_percent", .type = SD_T_FLOAT, .def = 0.0, .min = 0.0, .max = 1.0, .step = 0.001, .has_range = 1},
    {.name = "end_percent", .type = SD_T_FLOAT, .def = 0.35, .min = 0.0, .max = 1.0, .step = 0.001, .has_range = 1},
    {.name = "downscale_after_skip", .type = SD_T_BOOLEAN, .def = 1},
    {.name = "downscale_method", .type = SD_T_COMBO, .options = scale_methods, .def_str = "bicubic", .no_default = 1},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = scale_methods, .def_str = "bicubic", .no_default = 1},
    {0}};
static const sd_output_def model_out[] = {{"MODEL", "MODEL"}, {0}};

static const sd_node_def node_downscale = {
    .version = 1,
    .class_type = "PatchModelAddDownscale",
    .python_module = "comfy_extras.nodes_model_downscale",
    .display_name = "PatchModelAddDownscale (Kohya Deep Shrink)",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "Kohya's Deep Shrink: while the sigma is between start_percent's and end_percent's, the UNet's "
            "features after input block block_number are shrunk by downscale_factor (downscale_method; "
            "after the skip is saved when downscale_after_skip), and scaled back to the skip's size "
            "(upscale_method) where the output blocks meet a skip of another size. SD1, SD2, SDXL.",
    .inputs = downscale_inputs,
    .outputs = model_out,
    .run = downscale_run,
};

/* ---- HyperTile ------------------------------------------------------------------------ */

static sd_status hypertile_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    int64_t tile = sd_value_as_int(in[1]);
    sd_unet_patch pt;
    memset(&pt, 0, sizeof pt);
    pt.kind = SD_UNET_PATCH_HYPERTILE;
    pt.block_id = -1;
    pt.index = -1;
    pt.p[0] = (double)((tile > 32 ? tile : 32) / 8); /* latent_tile_size = max(32, tile_size) // 8 */
    pt.p[1] = (double)sd_value_as_int(in[2]);
    pt.p[2] = (double)sd_value_as_int(in[3]);
    pt.p[3] = sd_value_as_bool(in[4]) ? 1.0 : 0.0;
    if (pt.p[1] < 1) {
        sd_error_set(err, SD_ERR_INVALID, "swap_size must be at least 1");
        sd_error_at(err, NULL, NULL, "swap_size");
        return SD_ERR_INVALID;
    }
    return add_unet_patches(m, &pt, 1, "HyperTile", &out[0], err);
}

static const sd_input_def hypertile_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "tile_size", .type = SD_T_INT, .def = 256, .min = 1, .max = 2048, .has_range = 1},
    {.name = "swap_size", .type = SD_T_INT, .def = 2, .min = 1, .max = 128, .has_range = 1},
    {.name = "max_depth", .type = SD_T_INT, .def = 0, .min = 0, .max = 10, .has_range = 1},
    {.name = "scale_depth", .type = SD_T_BOOLEAN, .def = 0},
    {0}};

static const sd_node_def node_hypertile = {
    .version = 1,
    .class_type = "HyperTile",
    .python_module = "comfy_extras.nodes_hypertile",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "Self-attention on tiles: at the levels whose token count is the latent's, halved up to "
            "max_depth times, the queries are split into a grid of tiles of about tile_size / 8 latent "
            "pixels (one of the swap_size largest divisors, drawn from the sampler's seeded generator as "
            "ComfyUI's torch.randint; scale_depth doubles the size per level). SD1, SD2, SDXL.",
    .inputs = hypertile_inputs,
    .outputs = model_out,
    .run = hypertile_run,
};

/* ---- TomePatchModel -------------------------------------------------------------------- */

static sd_status tome_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    double ratio = sd_value_as_float(in[1]);
    if (!(ratio >= 0.0 && ratio <= 1.0)) {
        sd_error_set(err, SD_ERR_INVALID, "ratio must be 0..1");
        sd_error_at(err, NULL, NULL, "ratio");
        return SD_ERR_INVALID;
    }
    sd_unet_patch pt;
    memset(&pt, 0, sizeof pt);
    pt.kind = SD_UNET_PATCH_TOME;
    pt.block_id = -1;
    pt.index = -1;
    pt.p[0] = ratio;
    return add_unet_patches(m, &pt, 1, "TomePatchModel", &out[0], err);
}

static const sd_input_def tome_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "ratio", .type = SD_T_FLOAT, .def = 0.3, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1},
    {0}};

static const sd_node_def node_tome = {
    .version = 1,
    .class_type = "TomePatchModel",
    .python_module = "comfy_extras.nodes_tomesd",
    .category = "model_patches/unet",
    .flags = SD_NODE_V3,
    .help = "Token merging (ToMe): in the full-resolution self-attentions, ratio of the tokens are merged "
            "into the most similar token of their 2x2 cell's randomly drawn destination (from the sampler's "
            "seeded generator, as ComfyUI's torch.randint) before the queries and spread back after; fewer "
            "queries, an approximation of the unpatched image. SD1, SD2, SDXL.",
    .inputs = tome_inputs,
    .outputs = model_out,
    .run = tome_run,
};

const sd_node_def *const sd_nodes_model_unet_patch[] = {&node_downscale, &node_hypertile, &node_tome, NULL};
