/* convert.c - InvertMask, SolidMask, ThresholdMask, CropMask, ImageToMask,
 * MaskToImage, ImageColorToMask: element-wise and slicing nodes. */
#include <math.h>
#include <string.h>

#include "mask.h"
#include "nodes/image/image.h"

static const sd_output_def mask_out[] = {{"MASK", "MASK"}, {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};
static const sd_input_def mask_only[] = {{.name = "mask", .type = "MASK"}, {0}};

#define RANGE_INT(n, d, lo, hi) \
    {.name = n, .type = SD_T_INT, .def = d, .min = lo, .max = hi, .step = 1, .has_range = 1}

/* A new tensor with t's shape; NULL when out of memory. */
static sd_tensor *like(const sd_tensor *t) { return sd_tensor_new(SD_F32, t->ndim, t->shape); }

/* ---- InvertMask: 1.0 - mask (the input's own shape) ------------------------------ */

static sd_status invert_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    sd_tensor_unref(m);
    const sd_tensor *t = sd_value_as_tensor(in[0]);
    sd_tensor *o = like(t);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(t);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = sd_tensor_numel(t); i < n; i++) d[i] = 1.0f - s[i];
    return sd_nodes_set_tensor(&out[0], o, err);
}

const sd_node_def sd_node_InvertMask = {
    .version = 1, .class_type = "InvertMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "1 - mask.", .inputs = mask_only, .outputs = mask_out, .run = invert_run};

/* ---- SolidMask ---------------------------------------------------------------------- */

static sd_status solid_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    float v = (float)sd_value_as_float(in[0]);
    int64_t shape[3] = {1, sd_value_as_int(in[2]), sd_value_as_int(in[1])};
    if (shape[1] < 1 || shape[2] < 1)
        return sd_nodes_bad_input(err, shape[2] < 1 ? "width" : "height", "bad size %lldx%lld",
                                  (long long)shape[2], (long long)shape[1]);
    sd_status rc = sd_nodes_mem_check(ctx, shape[2] >= shape[1] ? "width" : "height", "the mask", 3, shape, err);
    if (rc) return rc;
    sd_tensor *o = sd_tensor_new(SD_F32, 3, shape);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = shape[1] * shape[2]; i < n; i++) d[i] = v;
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def solid_inputs[] = {
    {.name = "value", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1},
    RANGE_INT("width", 512, 1, SD_MAX_RESOLUTION), RANGE_INT("height", 512, 1, SD_MAX_RESOLUTION), {0}};

const sd_node_def sd_node_SolidMask = {
    .version = 1, .class_type = "SolidMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "One mask [1, height, width] filled with value.", .inputs = solid_inputs,
    .outputs = mask_out, .run = solid_run};

/* ---- ThresholdMask: (mask > value) as 0/1, the input's shape ------------------------- */

static sd_status threshold_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    sd_tensor_unref(m);
    const sd_tensor *t = sd_value_as_tensor(in[0]);
    float v = (float)sd_value_as_float(in[1]); /* the scalar compares as float32 */
    sd_tensor *o = like(t);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(t);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = sd_tensor_numel(t); i < n; i++) d[i] = s[i] > v ? 1.0f : 0.0f;
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def threshold_inputs[] = {
    {.name = "mask", .type = "MASK"},
    {.name = "value", .type = SD_T_FLOAT, .def = 0.5, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ThresholdMask = {
    .version = 1, .class_type = "ThresholdMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "1 where mask > value, else 0.", .inputs = threshold_inputs, .outputs = mask_out,
    .run = threshold_run};

/* ---- CropMask: mask[:, y:y+height, x:x+width] (Python slicing: may be empty) ------- */

static int64_t clip_len(int64_t n, int64_t start, int64_t len) {
    if (start >= n) return 0;
    return start + len < n ? len : n - start;
}

static sd_status crop_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    int64_t x = sd_value_as_int(in[1]), y = sd_value_as_int(in[2]);
    int64_t w = sd_value_as_int(in[3]), h = sd_value_as_int(in[4]);
    if (x < 0 || y < 0 || w < 0 || h < 0) {
        sd_tensor_unref(m);
        return sd_nodes_bad_input(err, x < 0 ? "x" : y < 0 ? "y" : w < 0 ? "width" : "height",
                                  "negative crop value");
    }
    int64_t B = m->shape[0], H = m->shape[1], W = m->shape[2];
    int64_t oh = clip_len(H, y, h), ow = clip_len(W, x, w);
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, B, oh, ow, 0);
    if (!o) { sd_tensor_unref(m); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    const float *s = sd_tensor_f32(m);
    float *d = sd_tensor_f32(o);
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < oh; r++)
            if (ow) memcpy(d + (b * oh + r) * ow, s + (b * H + y + r) * W + x, (size_t)ow * sizeof(float));
    sd_tensor_unref(m);
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def crop_inputs[] = {
    {.name = "mask", .type = "MASK"},
    RANGE_INT("x", 0, 0, SD_MAX_RESOLUTION), RANGE_INT("y", 0, 0, SD_MAX_RESOLUTION),
    RANGE_INT("width", 512, 1, SD_MAX_RESOLUTION), RANGE_INT("height", 512, 1, SD_MAX_RESOLUTION), {0}};

const sd_node_def sd_node_CropMask = {
    .version = 1, .class_type = "CropMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "The part [y, y + height) x [x, x + width) of each mask (cut at the edges; "
            "empty when x or y lies outside, as in ComfyUI).",
    .inputs = crop_inputs, .outputs = mask_out, .run = crop_run};

/* ---- ImageToMask: one channel of the image ------------------------------------------ */

static const char *const channels[] = {"red", "green", "blue", "alpha", NULL};

static sd_status image_to_mask_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    const char *ch = sd_value_as_string(in[1]);
    int k = -1;
    for (int i = 0; ch && channels[i]; i++)
        if (!strcmp(ch, channels[i])) k = i;
    if (k < 0) return sd_nodes_bad_input(err, "channel", "unknown channel '%s'", ch ? ch : "");
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (k >= C)
        return sd_nodes_bad_input(err, "channel", "the image has %lld channels, no %s channel", (long long)C, ch);
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, B, H, W, 0);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = B * H * W; i < n; i++) d[i] = s[i * C + k];
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def image_to_mask_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "channel", .type = SD_T_COMBO, .options = channels, .def_str = "red", .no_default = 1}, {0}};

const sd_node_def sd_node_ImageToMask = {
    .version = 1, .class_type = "ImageToMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .display_name = "Convert Image to Mask", .category = "mask",
    .help = "One channel of the image as a mask.", .inputs = image_to_mask_inputs,
    .outputs = mask_out, .run = image_to_mask_run};

/* ---- MaskToImage: the mask in three channels ---------------------------------------- */

static sd_status mask_to_image_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    int64_t shape[4] = {m->shape[0], m->shape[1], m->shape[2], 3};
    rc = sd_nodes_mem_check(ctx, "mask", "the image", 4, shape, err);
    sd_tensor *o = rc ? NULL : sd_tensor_new(SD_F32, 4, shape);
    if (!rc && !o) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (rc) { sd_tensor_unref(m); return rc; }
    const float *s = sd_tensor_f32(m);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = shape[0] * shape[1] * shape[2]; i < n; i++) d[i * 3] = d[i * 3 + 1] = d[i * 3 + 2] = s[i];
    sd_tensor_unref(m);
    return sd_nodes_set_tensor(&out[0], o, err);
}

const sd_node_def sd_node_MaskToImage = {
    .version = 1, .class_type = "MaskToImage", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .display_name = "Convert Mask to Image", .category = "mask",
    .help = "The mask as a grey RGB image.", .inputs = mask_only, .outputs = image_out,
    .run = mask_to_image_run};

/* ---- ImageColorToMask: 1 where round(clamp(rgb) * 255) is the colour ----------------- */

static int32_t to_u8ish(float v) {
    float c = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    return (int32_t)nearbyintf(c * 255.0f);
}

static sd_status color_to_mask_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (C < 3) return sd_nodes_bad_input(err, "image", "the image has %lld channels, not RGB", (long long)C);
    int64_t color = sd_value_as_int(in[1]);
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, B, H, W, 0);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = B * H * W; i < n; i++) {
        /* int32 arithmetic as torch's .to(torch.int) and bitwise shifts */
        uint32_t r = (uint32_t)to_u8ish(s[i * C]), g = (uint32_t)to_u8ish(s[i * C + 1]),
                 b = (uint32_t)to_u8ish(s[i * C + 2]);
        int32_t v = (int32_t)((r << 16) + (g << 8) + b);
        d[i] = (int64_t)v == color ? 1.0f : 0.0f;
    }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def color_to_mask_inputs[] = {
    {.name = "image", .type = "IMAGE"}, {.name = "color", .type = SD_T_INT, .def = 0, .min = 0, .max = 0xFFFFFF,
     .step = 1, .has_range = 1,
     .display = "number"}, {0}};

const sd_node_def sd_node_ImageColorToMask = {
    .version = 1, .class_type = "ImageColorToMask", .python_module = "comfy_extras.nodes_mask", .flags = SD_NODE_V3,
    .category = "mask",
    .help = "1 where the pixel's colour, rounded to 8 bits per channel, is color (0xRRGGBB).",
    .inputs = color_to_mask_inputs, .outputs = mask_out, .run = color_to_mask_run};
