/* transform.c - ImageScale, ImageScaleBy, ImageInvert, ImageBatch. */
#include <string.h>

#include "image.h"

static const char *const image_methods[] = {"nearest-exact", "bilinear", "area", "bicubic",
                                            "lanczos", NULL};
static const char *const crop_methods[] = {"disabled", "center", NULL};

static sd_status parse_method(const sd_value *v, sd_upscale_method *m, sd_error *err) {
    const char *s = sd_value_as_string(v);
    if (sd_upscale_method_parse(s, m) != 0 || *m == SD_UPSCALE_BISLERP) {
        sd_error_set(err, SD_ERR_INVALID, "unknown upscale_method '%s'", s ? s : "(null)");
        sd_error_at(err, NULL, NULL, "upscale_method");
        return SD_ERR_INVALID;
    }
    return SD_OK;
}

static sd_status set_tensor_out(sd_value **out, sd_tensor *t, sd_error *err) {
    *out = sd_value_tensor(t);
    sd_tensor_unref(t);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

/* ---- ImageScale ------------------------------------------------------------------ */

static sd_status image_scale_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    sd_upscale_method m;
    if ((rc = parse_method(in[1], &m, err))) return rc;
    int64_t width = sd_value_as_int(in[2]), height = sd_value_as_int(in[3]);
    sd_crop_mode crop;
    if (sd_crop_mode_parse(sd_value_as_string(in[4]), &crop) != 0) {
        sd_error_set(err, SD_ERR_INVALID, "unknown crop '%s'", sd_value_as_string(in[4]));
        sd_error_at(err, NULL, NULL, "crop");
        return SD_ERR_INVALID;
    }
    if (width == 0 && height == 0) { out[0] = sd_value_ref(in[0]); return SD_OK; }
    int64_t h = img->shape[1], w = img->shape[2];
    if (width == 0) {
        width = sd_nodes_py_round((double)w * height / h);
        if (width < 1) width = 1;
    } else if (height == 0) {
        height = sd_nodes_py_round((double)h * width / w);
        if (height < 1) height = 1;
    }
    sd_tensor *res = NULL;
    rc = sd_nodes_upscale_batched(ctx, img, 1, width, height, m, crop,
                                  width >= height ? "width" : "height", &res, err);
    if (rc) return rc;
    return set_tensor_out(&out[0], res, err);
}

static const sd_input_def image_scale_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = image_methods, .def_str = "nearest-exact",
     .no_default = 1},
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 0, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 512, .min = 0, .max = SD_MAX_RESOLUTION, .step = 1, .has_range = 1},
    {.name = "crop", .type = SD_T_COMBO, .options = crop_methods, .def_str = "disabled", .no_default = 1},
    {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

const sd_node_def sd_node_ImageScale = {
    .version = 1,
    .class_type = "ImageScale",
    .python_module = "nodes",
    .display_name = "Upscale Image",
    .category = "image/upscaling",
    .help = "Resizes images to width x height (0 keeps the aspect ratio).",
    .inputs = image_scale_inputs,
    .outputs = image_out,
    .run = image_scale_run,
};

/* ---- ImageScaleBy ----------------------------------------------------------------- */

static sd_status image_scale_by_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                    sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    sd_upscale_method m;
    if ((rc = parse_method(in[1], &m, err))) return rc;
    double by = sd_value_as_float(in[2]);
    int64_t width = sd_nodes_py_round((double)img->shape[2] * by);
    int64_t height = sd_nodes_py_round((double)img->shape[1] * by);
    if (width < 1 || height < 1) {
        sd_error_set(err, SD_ERR_INVALID, "scale_by %g gives an empty image (%lldx%lld)", by,
                     (long long)width, (long long)height);
        sd_error_at(err, NULL, NULL, "scale_by");
        return SD_ERR_INVALID;
    }
    sd_tensor *res = NULL;
    rc = sd_nodes_upscale_batched(ctx, img, 1, width, height, m, SD_CROP_DISABLED, "scale_by", &res, err);
    if (rc) return rc;
    return set_tensor_out(&out[0], res, err);
}

static const sd_input_def image_scale_by_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = image_methods, .def_str = "nearest-exact",
     .no_default = 1},
    {.name = "scale_by", .type = SD_T_FLOAT, .def = 1.0, .min = 0.01, .max = 8.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ImageScaleBy = {
    .version = 1,
    .class_type = "ImageScaleBy",
    .python_module = "nodes",
    .display_name = "Upscale Image By",
    .category = "image/upscaling",
    .help = "Resizes images by a factor (sizes rounded half to even).",
    .inputs = image_scale_by_inputs,
    .outputs = image_out,
    .run = image_scale_by_run,
};

/* ---- ImageInvert ------------------------------------------------------------------- */

static sd_status image_invert_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 0, &img, err);
    if (rc) return rc;
    sd_tensor *res = sd_tensor_new(SD_F32, img->ndim, img->shape);
    if (!res) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(res);
    for (int64_t i = 0, n = sd_tensor_numel(img); i < n; i++) d[i] = 1.0f - s[i];
    return set_tensor_out(&out[0], res, err);
}

static const sd_input_def image_only_input[] = {{.name = "image", .type = "IMAGE"}, {0}};

const sd_node_def sd_node_ImageInvert = {
    .version = 1,
    .class_type = "ImageInvert",
    .python_module = "nodes",
    .display_name = "Invert Image",
    .category = "image",
    .help = "1 - image.",
    .inputs = image_only_input,
    .outputs = image_out,
    .run = image_invert_run,
};

/* ---- ImageBatch ---------------------------------------------------------------------- */

static sd_status image_batch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    sd_tensor *a, *b;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image1", 4, &a, err);
    if (!rc) rc = sd_nodes_in_tensor(in, 1, "image2", 4, &b, err);
    if (rc) return rc;
    sd_tensor *b2 = sd_tensor_ref(b);
    if (a->shape[1] != b->shape[1] || a->shape[2] != b->shape[2] || a->shape[3] != b->shape[3]) {
        /* second image resized to the first (bilinear, center crop) */
        sd_tensor_unref(b2);
        b2 = NULL;
        rc = sd_nodes_upscale_batched(ctx, b, 1, a->shape[2], a->shape[1], SD_UPSCALE_BILINEAR,
                                      SD_CROP_CENTER, "image2", &b2, err);
        if (rc) return rc;
    }
    if (b2->shape[3] != a->shape[3]) {
        sd_tensor_unref(b2);
        sd_error_set(err, SD_ERR_INVALID, "ImageBatch: images have %lld and %lld channels",
                     (long long)a->shape[3], (long long)b->shape[3]);
        sd_error_at(err, NULL, NULL, "image2");
        return SD_ERR_INVALID;
    }
    int64_t shape[4] = {a->shape[0] + b2->shape[0], a->shape[1], a->shape[2], a->shape[3]};
    sd_tensor *res = sd_tensor_new(SD_F32, 4, shape);
    if (!res) { sd_tensor_unref(b2); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    memcpy(res->data, a->data, a->nbytes);
    memcpy((char *)res->data + a->nbytes, b2->data, b2->nbytes);
    sd_tensor_unref(b2);
    return set_tensor_out(&out[0], res, err);
}

static const sd_input_def image_batch_inputs[] = {
    {.name = "image1", .type = "IMAGE"}, {.name = "image2", .type = "IMAGE"}, {0}};

const sd_node_def sd_node_ImageBatch = {
    .version = 1,
    .class_type = "ImageBatch",
    .python_module = "nodes",
    .display_name = "Batch Images",
    .category = "image",
    .help = "Concatenates two image batches; the second is resized (bilinear, center "
            "crop) to the first's size when they differ.",
    .inputs = image_batch_inputs,
    .outputs = image_out,
    .flags = SD_NODE_DEPRECATED,
    .run = image_batch_run,
};
