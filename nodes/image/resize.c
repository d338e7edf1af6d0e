/* resize.c - ImageScaleToTotalPixels (nodes_post_processing.py),
 * ImageScaleToMaxDimension and ResizeAndPadImage (nodes_images.py): sizes
 * computed as ComfyUI computes them, then common_upscale
 * (models/image/imageops.h). */
#include <math.h>
#include <string.h>

#include "image.h"

static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

static sd_status method_of(const sd_value *v, const char *input, sd_upscale_method *m, sd_error *err) {
    const char *s = sd_value_as_string(v);
    if (sd_upscale_method_parse(s, m) != 0 || *m == SD_UPSCALE_BISLERP)
        return sd_nodes_bad_input(err, input, "unknown %s '%s'", input, s ? s : "");
    return SD_OK;
}

static sd_status resized(sd_node_ctx *ctx, sd_tensor *img, int64_t w, int64_t h, sd_upscale_method m,
                         const char *input, sd_value **out, sd_error *err) {
    if (w < 1 || h < 1)
        return sd_nodes_bad_input(err, input, "the image would be resized to %lldx%lld", (long long)w, (long long)h);
    sd_tensor *r = NULL;
    sd_status rc = sd_nodes_upscale_batched(ctx, img, 1, w, h, m, SD_CROP_DISABLED, input, &r, err);
    if (rc) return rc;
    return sd_nodes_set_tensor(out, r, err);
}

/* ---- ImageScaleToTotalPixels ------------------------------------------------------------- */

static const char *const total_methods[] = {"nearest-exact", "bilinear", "area", "bicubic", "lanczos", NULL};

static sd_status total_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    sd_upscale_method m;
    if ((rc = method_of(in[1], "upscale_method", &m, err))) return rc;
    double mp = sd_value_as_float(in[2]);
    int64_t steps = sd_value_as_int(in[3]);
    if (steps < 1) return sd_nodes_bad_input(err, "resolution_steps", "resolution_steps below 1");
    double total = mp * 1024 * 1024;
    double W = (double)img->shape[2], H = (double)img->shape[1];
    double by = sqrt(total / (W * H));
    int64_t w = sd_nodes_py_round(W * by / (double)steps) * steps;
    int64_t h = sd_nodes_py_round(H * by / (double)steps) * steps;
    return resized(ctx, img, w, h, m, "megapixels", &out[0], err);
}

static const sd_input_def total_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = total_methods, .def_str = "nearest-exact",
     .no_default = 1},
    {.name = "megapixels", .type = SD_T_FLOAT, .def = 1.0, .min = 0.01, .max = 16.0, .step = 0.01, .has_range = 1},
    {.name = "resolution_steps", .type = SD_T_INT, .def = 1, .min = 1, .max = 256, .has_range = 1},
    {0}};

const sd_node_def sd_node_ImageScaleToTotalPixels = {
    .version = 1, .class_type = "ImageScaleToTotalPixels", .python_module = "comfy_extras.nodes_post_processing",
    .flags = SD_NODE_V3,
    .category = "image/upscaling",
    .help = "Resizes to about megapixels * 2^20 pixels, keeping the aspect ratio; each side "
            "rounded (half to even) to a multiple of resolution_steps.",
    .inputs = total_inputs, .outputs = image_out, .run = total_run};

/* ---- ImageScaleToMaxDimension ------------------------------------------------------------- */

/* ComfyUI's list, "bilinear" twice included */
static const char *const max_methods[] = {"area", "lanczos", "bilinear", "nearest-exact", "bilinear", "bicubic", NULL};

static sd_status max_dim_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    sd_upscale_method m;
    if ((rc = method_of(in[1], "upscale_method", &m, err))) return rc;
    int64_t largest = sd_value_as_int(in[2]), h = img->shape[1], w = img->shape[2];
    if (h > w) {
        w = sd_nodes_py_round((double)w / (double)h * (double)largest);
        h = largest;
    } else if (w > h) {
        h = sd_nodes_py_round((double)h / (double)w * (double)largest);
        w = largest;
    } else {
        w = h = largest;
    }
    return resized(ctx, img, w, h, m, "largest_size", &out[0], err);
}

static const sd_input_def max_dim_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = max_methods, .def_str = "area", .no_default = 1},
    {.name = "largest_size", .type = SD_T_INT, .def = 512, .min = 0, .max = SD_MAX_RESOLUTION, .step = 1,
     .has_range = 1},
    {0}};

const sd_node_def sd_node_ImageScaleToMaxDimension = {
    .version = 1, .class_type = "ImageScaleToMaxDimension", .python_module = "comfy_extras.nodes_images",
    .flags = SD_NODE_V3,
    .category = "image/upscaling",
    .help = "Resizes so that the longer side is largest_size, keeping the aspect ratio.",
    .inputs = max_dim_inputs, .outputs = image_out, .run = max_dim_run};

/* ---- ResizeAndPadImage --------------------------------------------------------------------- */

static const char *const pad_colors[] = {"white", "black", NULL};
static const char *const pad_methods[] = {"area", "bicubic", "nearest-exact", "bilinear", "lanczos", NULL};

static sd_status resize_pad_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t tw = sd_value_as_int(in[1]), th = sd_value_as_int(in[2]);
    const char *pc = sd_value_as_string(in[3]);
    if (!pc || (strcmp(pc, "white") && strcmp(pc, "black")))
        return sd_nodes_bad_input(err, "padding_color", "unknown padding_color '%s'", pc ? pc : "");
    sd_upscale_method m;
    if ((rc = method_of(in[4], "interpolation", &m, err))) return rc;
    if (tw < 1 || th < 1) return sd_nodes_bad_input(err, tw < 1 ? "target_width" : "target_height", "below 1");
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    double sw = (double)tw / (double)W, sh = (double)th / (double)H, s = sw < sh ? sw : sh;
    int64_t nw = (int64_t)((double)W * s), nh = (int64_t)((double)H * s);
    if (nw < 1 || nh < 1)
        return sd_nodes_bad_input(err, nw < 1 ? "target_width" : "target_height",
                                  "the image would be resized to %lldx%lld", (long long)nw, (long long)nh);
    int64_t shape[4] = {B, th, tw, C};
    if ((rc = sd_nodes_mem_check(ctx, tw >= th ? "target_width" : "target_height", "the padded image", 4, shape, err)))
        return rc;
    sd_tensor *r = NULL;
    rc = sd_nodes_upscale_batched(ctx, img, 1, nw, nh, m, SD_CROP_DISABLED, "target_width", &r, err);
    if (rc) return rc;
    sd_tensor *o = sd_tensor_new(SD_F32, 4, shape);
    if (!o) { sd_tensor_unref(r); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    float pv = !strcmp(pc, "black") ? 0.0f : 1.0f, *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = sd_tensor_numel(o); i < n; i++) d[i] = pv;
    int64_t y0 = (th - nh) / 2, x0 = (tw - nw) / 2;
    const float *s2 = sd_tensor_f32(r);
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < nh; y++)
            memcpy(d + ((b * th + y0 + y) * tw + x0) * C, s2 + ((b * nh + y) * nw) * C, (size_t)(nw * C) * sizeof(float));
    sd_tensor_unref(r);
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def resize_pad_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "target_width", .type = SD_T_INT, .def = 512, .min = 1, .max = SD_MAX_RESOLUTION, .step = 1,
     .has_range = 1},
    {.name = "target_height", .type = SD_T_INT, .def = 512, .min = 1, .max = SD_MAX_RESOLUTION, .step = 1,
     .has_range = 1},
    {.name = "padding_color", .type = SD_T_COMBO, .options = pad_colors, .def_str = "white", .no_default = 1},
    {.name = "interpolation", .type = SD_T_COMBO, .options = pad_methods, .def_str = "area", .no_default = 1},
    {0}};

const sd_node_def sd_node_ResizeAndPadImage = {
    .version = 1, .class_type = "ResizeAndPadImage", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .category = "image/transform",
    .help = "Resizes to fit target_width x target_height keeping the aspect ratio, then pads "
            "(centred) with white or black.",
    .inputs = resize_pad_inputs, .outputs = image_out, .run = resize_pad_run};
