/* generate.c - EmptyImage and ImagePadForOutpaint. */
#include <stdio.h>
#include <string.h>

#include "core/membudget.h"

#include "image.h"

/* ---- EmptyImage --------------------------------------------------------------------- */

static sd_status empty_image_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    int64_t w = sd_value_as_int(in[0]), h = sd_value_as_int(in[1]), b = sd_value_as_int(in[2]);
    int64_t color = sd_value_as_int(in[3]);
    if (w < 1 || h < 1 || b < 1)
        return sd_error_set(err, SD_ERR_INVALID, "EmptyImage: bad size %lldx%lld x %lld",
                            (long long)w, (long long)h, (long long)b);
    int64_t shape[4] = {b, h, w, 3};
    char what[128];
    snprintf(what, sizeof what, "the image [%lld, %lld, %lld, 3] float32", (long long)b, (long long)h,
             (long long)w);
    sd_status rc = sd_mem_check(ctx, b > 1 ? "batch_size" : w >= h ? "width" : "height",
                                sd_mem_tensor_bytes(4, shape, sizeof(float)), what, err);
    if (rc) return rc;
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, b, h, w, 3);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "EmptyImage: out of memory");
    /* torch.full(..., ((color >> k) & 0xFF) / 0xFF): a Python float stored as F32 */
    float rgb[3] = {(float)(((color >> 16) & 0xFF) / 255.0), (float)(((color >> 8) & 0xFF) / 255.0),
                    (float)((color & 0xFF) / 255.0)};
    float *d = sd_tensor_f32(t);
    for (int64_t i = 0, n = b * h * w; i < n; i++) memcpy(d + i * 3, rgb, sizeof rgb);
    out[0] = sd_value_tensor(t);
    sd_tensor_unref(t);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "EmptyImage: out of memory");
}

static const sd_input_def empty_image_inputs[] = {
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 1, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 512, .min = 1, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {.name = "batch_size", .type = SD_T_INT, .def = 1, .min = 1, .max = 4096, .has_range = 1},
    {.name = "color", .type = SD_T_INT, .def = 0, .min = 0, .max = 0xFFFFFF, .step = 1, .has_range = 1,
     .display = "color"},
    {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

const sd_node_def sd_node_EmptyImage = {
    .version = 1,
    .class_type = "EmptyImage",
    .python_module = "nodes",
    .display_name = "EmptyImage",
    .category = "image",
    .help = "A batch of images filled with one colour (0xRRGGBB).",
    .inputs = empty_image_inputs,
    .outputs = image_out,
    .run = empty_image_run,
};

/* ---- ImagePadForOutpaint ------------------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static sd_status pad_outpaint_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t left = sd_value_as_int(in[1]), top = sd_value_as_int(in[2]);
    int64_t right = sd_value_as_int(in[3]), bottom = sd_value_as_int(in[4]);
    int64_t feathering = sd_value_as_int(in[5]);
    if (left < 0 || top < 0 || right < 0 || bottom < 0 || feathering < 0)
        return sd_error_set(err, SD_ERR_INVALID, "ImagePadForOutpaint: negative padding");
    int64_t b = img->shape[0], h = img->shape[1], w = img->shape[2], c = img->shape[3];
    int64_t nh = h + top + bottom, nw = w + left + right;
    {
        /* the padded image and its mask; the input named is the largest padding */
        int64_t shape[4] = {b, nh, nw, c + 1}; /* + 1: the [nh, nw] mask, per image at most */
        static const char *const names[] = {"left", "top", "right", "bottom"};
        int64_t pads[] = {left, top, right, bottom};
        int big = 0;
        for (int i = 1; i < 4; i++) if (pads[i] > pads[big]) big = i;
        char what[160];
        snprintf(what, sizeof what, "the padded image [%lld, %lld, %lld, %lld] float32 and its mask",
                 (long long)b, (long long)nh, (long long)nw, (long long)c);
        rc = sd_mem_check(ctx, names[big], sd_mem_tensor_bytes(4, shape, sizeof(float)), what, err);
        if (rc) return rc;
    }
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, b, nh, nw, c);
    /* ComfyUI returns a 2-D [H, W] mask; we keep MASK's [B, H, W] form with B = 1. */
    sd_tensor *m = sd_tensor_new4(SD_F32, 3, 1, nh, nw, 0);
    if (!o || !m) {
        sd_tensor_unref(o); sd_tensor_unref(m);
        return sd_error_set(err, SD_ERR_NOMEM, "ImagePadForOutpaint: out of memory");
    }
    float *d = sd_tensor_f32(o), *mk = sd_tensor_f32(m);
    const float *s = sd_tensor_f32(img);
    for (int64_t i = 0, n = b * nh * nw * c; i < n; i++) d[i] = 0.5f;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t y = 0; y < h; y++)
            memcpy(d + ((bi * nh + y + top) * nw + left) * c, s + (bi * h + y) * w * c,
                   sizeof(float) * (size_t)(w * c));
    for (int64_t i = 0; i < nh * nw; i++) mk[i] = 1.0f;
    int feather = feathering > 0 && feathering * 2 < h && feathering * 2 < w;
    for (int64_t i = 0; i < h; i++)
        for (int64_t j = 0; j < w; j++) {
            float v = 0.0f;
            if (feather) {
                int64_t dt = top ? i : h, db = bottom ? h - i : h;
                int64_t dl = left ? j : w, dr = right ? w - j : w;
                int64_t dd = min64(min64(dt, db), min64(dl, dr));
                if (dd < feathering) {
                    double f = (double)(feathering - dd) / (double)feathering;
                    v = (float)(f * f);
                }
            }
            mk[(i + top) * nw + j + left] = v;
        }
    out[0] = sd_value_tensor(o);
    out[1] = sd_value_tensor(m);
    sd_tensor_unref(o);
    sd_tensor_unref(m);
    if (!out[0] || !out[1]) return sd_error_set(err, SD_ERR_NOMEM, "ImagePadForOutpaint: out of memory");
    return SD_OK;
}

static const sd_input_def pad_outpaint_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "left", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "top", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "right", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "bottom", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "feathering", .type = SD_T_INT, .def = 40, .min = 0, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {0}};
static const sd_output_def pad_outputs[] = {{"IMAGE", "IMAGE"}, {"MASK", "MASK"}, {0}};

const sd_node_def sd_node_ImagePadForOutpaint = {
    .version = 1,
    .class_type = "ImagePadForOutpaint",
    .python_module = "nodes",
    .display_name = "Pad Image for Outpainting",
    .category = "image",
    .help = "Pads images with grey (0.5) and returns a mask that is 1 on the padding and "
            "fades quadratically over `feathering` pixels inside the original edges.",
    .inputs = pad_outpaint_inputs,
    .outputs = pad_outputs,
    .run = pad_outpaint_run,
};
