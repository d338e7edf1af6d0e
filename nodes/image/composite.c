/* composite.c - ImageCompositeMasked (comfy_extras/nodes_mask.py): source
 * pasted into destination at (x, y), blended by an optional mask. */
#include <string.h>

#include "image.h"
#include "models/image/maskops.h"

static sd_status composite_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *dst, *src, *mask = NULL;
    sd_status rc = sd_nodes_in_tensor(in, 0, "destination", 4, &dst, err);
    if (!rc) rc = sd_nodes_in_tensor(in, 1, "source", 4, &src, err);
    if (!rc) rc = sd_nodes_in_mask_opt(in, 5, "mask", &mask, err);
    if (rc) return rc;
    int64_t cd = dst->shape[3], cs = src->shape[3];
    /* node_helpers.image_alpha_fix: a source with more channels is cut to
     * the destination's; a destination with more gets one more channel of
     * ones, which no longer matches the source's, so PyTorch refuses it */
    sd_tensor *s = NULL;
    if (cd > cs) {
        sd_tensor_unref(mask);
        return sd_nodes_bad_input(err, "source",
                                  "the destination has %lld channels and the source %lld; ComfyUI "
                                  "cannot composite fewer channels onto more", (long long)cd, (long long)cs);
    }
    if (cd < cs) {
        s = sd_tensor_new4(SD_F32, 4, src->shape[0], src->shape[1], src->shape[2], cd);
        if (s) {
            const float *sp = sd_tensor_f32(src);
            float *d = sd_tensor_f32(s);
            for (int64_t i = 0, n = src->shape[0] * src->shape[1] * src->shape[2]; i < n; i++)
                memcpy(d + i * cd, sp + i * cs, (size_t)cd * sizeof(float));
        }
    } else {
        s = sd_tensor_ref(src);
    }
    sd_tensor *d = s ? sd_imageops_nhwc_to_nchw(dst) : NULL, *o = NULL, *r = NULL;
    if (!s || !d) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    else rc = sd_composite(d, s, 1, sd_value_as_int(in[2]), sd_value_as_int(in[3]), mask, 1,
                           sd_value_as_bool(in[4]), &o, err);
    if (rc && !err->input[0]) sd_error_at(err, NULL, NULL, "source");
    if (!rc && !(r = sd_imageops_nchw_to_nhwc(o))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_tensor_unref(s);
    sd_tensor_unref(d);
    sd_tensor_unref(o);
    sd_tensor_unref(mask);
    (void)ctx;
    if (rc) return rc;
    return sd_nodes_set_tensor(&out[0], r, err);
}

static const sd_input_def composite_inputs[] = {
    {.name = "destination", .type = "IMAGE"},
    {.name = "source", .type = "IMAGE"},
    {.name = "x", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {.name = "y", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {.name = "resize_source", .type = SD_T_BOOLEAN, .def = 0},
    {.name = "mask", .type = "MASK", .optional = 1},
    {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

const sd_node_def sd_node_ImageCompositeMasked = {
    .version = 1, .class_type = "ImageCompositeMasked", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "image",
    .help = "Pastes source into destination at (x, y), blended by mask (resized to the "
            "source; all of it without one); resize_source first scales the source to the "
            "destination's size.",
    .inputs = composite_inputs, .outputs = image_out, .run = composite_run};
