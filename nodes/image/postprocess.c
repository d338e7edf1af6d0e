/* postprocess.c - ImageBlend, ImageBlur, ImageSharpen
 * (comfy_extras/nodes_post_processing.py) and Morphology
 * (nodes_morphology.py); the arithmetic is in models/image/filters.h. */
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "models/image/filters.h"
#include "models/image/quantize.h"

static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

/* ---- ImageBlend -------------------------------------------------------------------------- */

static sd_status blend_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *a, *b;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image1", 4, &a, err);
    if (!rc) rc = sd_nodes_in_tensor(in, 1, "image2", 4, &b, err);
    if (rc) return rc;
    double factor = sd_value_as_float(in[2]);
    sd_blend_mode mode;
    const char *mname = sd_value_as_string(in[3]);
    if (sd_blend_mode_parse(mname, &mode)) return sd_nodes_bad_input(err, "blend_mode", "unknown blend_mode '%s'", mname ? mname : "");
    int64_t B1 = a->shape[0], H = a->shape[1], W = a->shape[2], C = a->shape[3];
    /* node_helpers.image_alpha_fix, as for ImageCompositeMasked */
    if (C > b->shape[3])
        return sd_nodes_bad_input(err, "image2", "image1 has %lld channels and image2 %lld; ComfyUI cannot blend "
                                  "fewer channels onto more", (long long)C, (long long)b->shape[3]);
    sd_tensor *b2 = NULL;
    if (b->shape[3] > C) {
        b2 = sd_tensor_new4(SD_F32, 4, b->shape[0], b->shape[1], b->shape[2], C);
        if (!b2) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        for (int64_t i = 0, n = b->shape[0] * b->shape[1] * b->shape[2]; i < n; i++)
            memcpy(sd_tensor_f32(b2) + i * C, sd_tensor_f32(b) + i * b->shape[3], (size_t)C * sizeof(float));
    } else {
        b2 = sd_tensor_ref(b);
    }
    if (b2->shape[0] != B1 || b2->shape[1] != H || b2->shape[2] != W) {
        /* image2 resized to image1's size: bicubic, centre crop */
        sd_tensor *r = NULL;
        rc = sd_nodes_upscale_batched(ctx, b2, 1, W, H, SD_UPSCALE_BICUBIC, SD_CROP_CENTER, "image2", &r, err);
        sd_tensor_unref(b2);
        if (rc) return rc;
        b2 = r;
    }
    int64_t B2 = b2->shape[0];
    if (B1 != B2 && B1 != 1 && B2 != 1) {
        sd_tensor_unref(b2);
        return sd_nodes_bad_input(err, "image2", "batches of %lld and %lld images cannot be blended", (long long)B1,
                                  (long long)B2);
    }
    int64_t B = B1 > B2 ? B1 : B2, item = H * W * C;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, H, W, C);
    if (!o) { sd_tensor_unref(b2); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    for (int64_t i = 0; i < B; i++)
        sd_blend(sd_tensor_f32(a) + (B1 == 1 ? 0 : i) * item, sd_tensor_f32(b2) + (B2 == 1 ? 0 : i) * item, item, mode,
                 factor, sd_tensor_f32(o) + i * item);
    sd_tensor_unref(b2);
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def blend_inputs[] = {
    {.name = "image1", .type = "IMAGE"},
    {.name = "image2", .type = "IMAGE"},
    {.name = "blend_factor", .type = SD_T_FLOAT, .def = 0.5, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1},
    {.name = "blend_mode", .type = SD_T_COMBO, .options = sd_blend_mode_names, .def_str = "normal", .no_default = 1},
    {0}};

const sd_node_def sd_node_ImageBlend = {
    .version = 1, .class_type = "ImageBlend", .python_module = "comfy_extras.nodes_post_processing",
    .flags = SD_NODE_V3, .category = "image/postprocessing",
    .help = "image1 mixed with blend_mode(image1, image2) by blend_factor, clamped to 0..1; image2 is "
            "resized (bicubic, centre crop) to image1 when they differ.",
    .inputs = blend_inputs, .outputs = image_out, .run = blend_run};

/* ---- ImageBlur / ImageSharpen ----------------------------------------------------------------- */

/* Reflect-filters img with kernel (radius r); clamps the result when clamp. */
static sd_status filter_image(sd_node_ctx *ctx, sd_tensor *img, const float *kernel, int64_t r, int clamp,
                              const char *radius_input, sd_value **out, sd_error *err) {
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (r >= H || r >= W)
        return sd_nodes_bad_input(err, radius_input, "%s %lld is not below the image's size %lldx%lld (reflect "
                                  "padding needs it)", radius_input, (long long)r, (long long)W, (long long)H);
    sd_tensor *o = sd_tensor_new(SD_F32, 4, img->shape);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = SD_OK;
    for (int64_t b = 0; b < B && !rc; b++) {
        if (sd_filter_reflect(sd_tensor_f32(img) + b * H * W * C, sd_tensor_f32(o) + b * H * W * C, C, H, W, C, kernel, r))
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else
            rc = sd_node_progress(ctx, b + 1, B, err);
    }
    if (rc) { sd_tensor_unref(o); return rc; }
    if (clamp) {
        float *d = sd_tensor_f32(o);
        for (int64_t i = 0, n = sd_tensor_numel(o); i < n; i++) d[i] = d[i] < 0.0f ? 0.0f : d[i] > 1.0f ? 1.0f : d[i];
    }
    return sd_nodes_set_tensor(out, o, err);
}

static sd_status blur_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t r = sd_value_as_int(in[1]);
    if (r == 0) { out[0] = sd_value_ref(in[0]); return SD_OK; }
    if (r < 0) return sd_nodes_bad_input(err, "blur_radius", "negative blur_radius");
    int64_t ks = 2 * r + 1;
    float *k = malloc((size_t)(ks * ks) * sizeof(float));
    if (!k || sd_gaussian_kernel(ks, sd_value_as_float(in[2]), k)) { free(k); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    rc = filter_image(ctx, img, k, r, 0, "blur_radius", &out[0], err);
    free(k);
    return rc;
}

static const sd_input_def blur_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "blur_radius", .type = SD_T_INT, .def = 1, .min = 1, .max = 31, .step = 1, .has_range = 1},
    {.name = "sigma", .type = SD_T_FLOAT, .def = 1.0, .min = 0.1, .max = 10.0, .step = 0.1, .has_range = 1},
    {0}};

const sd_node_def sd_node_ImageBlur = {
    .version = 1, .class_type = "ImageBlur", .python_module = "comfy_extras.nodes_post_processing",
    .flags = SD_NODE_V3, .category = "image/postprocessing",
    .help = "Gaussian blur over (2 blur_radius + 1)^2 pixels (sigma relative to the radius, as in "
            "ComfyUI), reflecting at the edges.",
    .inputs = blur_inputs, .outputs = image_out, .run = blur_run};

static sd_status sharpen_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t r = sd_value_as_int(in[1]);
    if (r == 0) { out[0] = sd_value_ref(in[0]); return SD_OK; }
    if (r < 0) return sd_nodes_bad_input(err, "sharpen_radius", "negative sharpen_radius");
    int64_t ks = 2 * r + 1;
    float *k = malloc((size_t)(ks * ks) * sizeof(float));
    if (!k || sd_sharpen_kernel(ks, sd_value_as_float(in[2]), sd_value_as_float(in[3]), k)) {
        free(k);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    rc = filter_image(ctx, img, k, r, 1, "sharpen_radius", &out[0], err);
    free(k);
    return rc;
}

static const sd_input_def sharpen_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "sharpen_radius", .type = SD_T_INT, .def = 1, .min = 1, .max = 31, .step = 1, .has_range = 1},
    {.name = "sigma", .type = SD_T_FLOAT, .def = 1.0, .min = 0.1, .max = 10.0, .step = 0.01, .has_range = 1},
    {.name = "alpha", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 5.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ImageSharpen = {
    .version = 1, .class_type = "ImageSharpen", .python_module = "comfy_extras.nodes_post_processing",
    .flags = SD_NODE_V3, .category = "image/postprocessing",
    .help = "Unsharp-mask sharpening with ComfyUI's kernel (alpha * 10 times the gaussian taken "
            "off around the centre), reflecting at the edges, clamped to 0..1.",
    .inputs = sharpen_inputs, .outputs = image_out, .run = sharpen_run};

/* ---- Morphology --------------------------------------------------------------------------------- */

static const char *const morph_ops[] = {"erode", "dilate", "open", "close", "gradient", "bottom_hat", "top_hat", NULL};

static sd_status morph_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    const char *op = sd_value_as_string(in[1]);
    int k = -1;
    for (int i = 0; op && morph_ops[i]; i++) if (!strcmp(op, morph_ops[i])) k = i;
    if (k < 0) return sd_nodes_bad_input(err, "operation", "unknown operation '%s'", op ? op : "");
    int64_t ks = sd_value_as_int(in[2]);
    if (ks < 1) return sd_nodes_bad_input(err, "kernel_size", "kernel_size below 1");
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3], n = B * C;
    sd_tensor *o = sd_tensor_new(SD_F32, 4, img->shape), *t = sd_tensor_new(SD_F32, 4, img->shape);
    if (!o || !t) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = rc ? NULL : sd_tensor_f32(img);
    float *d = rc ? NULL : sd_tensor_f32(o), *tv = rc ? NULL : sd_tensor_f32(t);
    int fail = 0;
    if (!rc) switch (k) {
    case 0: fail = sd_morph_flat(s, d, n, H, W, C, ks, 0); break;
    case 1: fail = sd_morph_flat(s, d, n, H, W, C, ks, 1); break;
    case 2: /* opening: dilation of the erosion */
    case 6: /* top hat: image - opening */
        fail = sd_morph_flat(s, tv, n, H, W, C, ks, 0) || sd_morph_flat(tv, d, n, H, W, C, ks, 1);
        if (!fail && k == 6) for (int64_t i = 0, m = sd_tensor_numel(o); i < m; i++) d[i] = s[i] - d[i];
        break;
    case 3: /* closing: erosion of the dilation */
    case 5: /* bottom hat: closing - image */
        fail = sd_morph_flat(s, tv, n, H, W, C, ks, 1) || sd_morph_flat(tv, d, n, H, W, C, ks, 0);
        if (!fail && k == 5) for (int64_t i = 0, m = sd_tensor_numel(o); i < m; i++) d[i] = d[i] - s[i];
        break;
    case 4: /* gradient: dilation - erosion */
        fail = sd_morph_flat(s, d, n, H, W, C, ks, 1) || sd_morph_flat(s, tv, n, H, W, C, ks, 0);
        if (!fail) for (int64_t i = 0, m = sd_tensor_numel(o); i < m; i++) d[i] = d[i] - tv[i];
        break;
    }
    if (!rc && fail) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    (void)ctx;
    sd_tensor_unref(t);
    if (rc) { sd_tensor_unref(o); return rc; }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def morph_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "operation", .type = SD_T_COMBO, .options = morph_ops, .def_str = "erode", .no_default = 1},
    {.name = "kernel_size", .type = SD_T_INT, .def = 3, .min = 3, .max = 999, .step = 1, .has_range = 1},
    {0}};

const sd_node_def sd_node_Morphology = {
    .version = 1, .class_type = "Morphology", .python_module = "comfy_extras.nodes_morphology", .flags = SD_NODE_V3,
    .display_name = "ImageMorphology", .category = "image/postprocessing",
    .help = "Erosion, dilation, opening, closing, gradient, top hat or bottom hat with a square "
            "kernel_size window (kornia's flat morphology; the image's outside never counts).",
    .inputs = morph_inputs, .outputs = image_out, .run = morph_run};

/* ---- ImageQuantize -------------------------------------------------------------------------- */

static const char *const dithers[] = {"none", "floyd-steinberg", "bayer-2", "bayer-4", "bayer-8", "bayer-16", NULL};

static sd_status quantize_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t colors = sd_value_as_int(in[1]);
    const char *d = sd_value_as_string(in[2]);
    int k = -1;
    for (int i = 0; d && dithers[i]; i++) if (!strcmp(d, dithers[i])) k = i;
    if (k < 0) return sd_nodes_bad_input(err, "dither", "unknown dither '%s'", d ? d : "");
    if (colors < 1 || colors > 256) return sd_nodes_bad_input(err, "colors", "colors %lld is not within 1..256", (long long)colors);
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (C != 3)
        return sd_nodes_bad_input(err, "image", "ComfyUI quantizes RGB pictures (Image.fromarray(mode='RGB')), "
                                  "not %lld channels", (long long)C);
    sd_dither dither = k == 0 ? SD_DITHER_NONE : k == 1 ? SD_DITHER_FLOYD_STEINBERG : SD_DITHER_BAYER;
    int order = k >= 2 ? 1 << (k - 1) : 0;
    sd_tensor *o = sd_tensor_new(SD_F32, 4, img->shape);
    uint8_t *px = malloc((size_t)(H * W * 3)), *q = malloc((size_t)(H * W * 3));
    if (!o || !px || !q) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < B && !rc; b++) {
        const float *s = sd_tensor_f32(img) + b * H * W * 3;
        /* (image * 255).to(torch.uint8): float32 product, truncated, wrapped to 8 bits */
        for (int64_t i = 0; i < H * W * 3; i++) {
            float v = s[i] * 255.0f;
            px[i] = (uint8_t)(int)v;
        }
        uint8_t pal[256 * 3];
        int n_pal = 0;
        if (sd_quantize_palette(px, (size_t)(H * W), (int)colors, pal, &n_pal) ||
            sd_quantize_map(px, W, H, pal, n_pal, dither, order, q)) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            break;
        }
        float *dst = sd_tensor_f32(o) + b * H * W * 3;
        for (int64_t i = 0; i < H * W * 3; i++) dst[i] = (float)q[i] / 255.0f;
        rc = sd_node_progress(ctx, b + 1, B, err);
    }
    free(px);
    free(q);
    if (rc) { sd_tensor_unref(o); return rc; }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def quantize_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "colors", .type = SD_T_INT, .def = 256, .min = 1, .max = 256, .step = 1, .has_range = 1},
    {.name = "dither", .type = SD_T_COMBO, .options = dithers, .def_str = "none", .no_default = 1},
    {0}};

const sd_node_def sd_node_ImageQuantize = {
    .version = 1, .class_type = "ImageQuantize", .python_module = "comfy_extras.nodes_post_processing",
    .flags = SD_NODE_V3, .category = "image/postprocessing",
    .help = "Reduces each image to at most `colors` colours (Pillow's median cut, as ComfyUI), mapped "
            "without dithering, with Floyd-Steinberg, or with an ordered Bayer matrix.",
    .inputs = quantize_inputs, .outputs = image_out, .run = quantize_run};
