/* geometry.c - ImageCrop, ImageFlip, ImageRotate, ImageStitch
 * (comfy_extras/nodes_images.py): pixels moved, never recomputed (except
 * ImageStitch's Lanczos resize, models/image/imageops.h). */
#include <string.h>

#include "image.h"

static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

#define RANGE_INT(n, d, lo, hi) \
    {.name = n, .type = SD_T_INT, .def = d, .min = lo, .max = hi, .step = 1, .has_range = 1}

/* ---- ImageCrop -------------------------------------------------------------------------- */

static sd_status crop_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t w = sd_value_as_int(in[1]), h = sd_value_as_int(in[2]), x = sd_value_as_int(in[3]), y = sd_value_as_int(in[4]);
    if (w < 1 || h < 1 || x < 0 || y < 0)
        return sd_nodes_bad_input(err, w < 1 ? "width" : h < 1 ? "height" : x < 0 ? "x" : "y", "out of range");
    /* x = min(x, W - 1), y likewise: the crop always keeps a pixel */
    if (x > W - 1) x = W - 1;
    if (y > H - 1) y = H - 1;
    int64_t ow = x + w < W ? w : W - x, oh = y + h < H ? h : H - y;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, oh, ow, C);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(o);
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < oh; r++)
            memcpy(d + ((b * oh + r) * ow) * C, s + ((b * H + y + r) * W + x) * C, (size_t)(ow * C) * sizeof(float));
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def crop_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    RANGE_INT("width", 512, 1, SD_MAX_RESOLUTION), RANGE_INT("height", 512, 1, SD_MAX_RESOLUTION),
    RANGE_INT("x", 0, 0, SD_MAX_RESOLUTION), RANGE_INT("y", 0, 0, SD_MAX_RESOLUTION), {0}};

const sd_node_def sd_node_ImageCrop = {
    .version = 1, .class_type = "ImageCrop", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .display_name = "Image Crop", .category = "image/transform",
    .help = "The part width x height at (x, y), cut at the edges (x and y are first moved "
            "inside the image).",
    .inputs = crop_inputs, .outputs = image_out, .run = crop_run};

/* ---- ImageFlip / ImageRotate ------------------------------------------------------------ */

static const char *const flips[] = {"x-axis: vertically", "y-axis: horizontally", NULL};

static sd_status flip_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    const char *m = sd_value_as_string(in[1]);
    int rows = m && m[0] == 'x', cols = m && m[0] == 'y';
    if (!rows && !cols) return sd_nodes_bad_input(err, "flip_method", "unknown flip_method '%s'", m ? m : "");
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    sd_tensor *o = sd_tensor_new(SD_F32, 4, img->shape);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(o);
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                int64_t sy = rows ? H - 1 - y : y, sx = cols ? W - 1 - x : x;
                memcpy(d + ((b * H + y) * W + x) * C, s + ((b * H + sy) * W + sx) * C, (size_t)C * sizeof(float));
            }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def flip_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "flip_method", .type = SD_T_COMBO, .options = flips, .def_str = "x-axis: vertically", .no_default = 1},
    {0}};

const sd_node_def sd_node_ImageFlip = {
    .version = 1, .class_type = "ImageFlip", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .category = "image/transform",
    .help = "Flips the images top to bottom (x-axis) or left to right (y-axis).",
    .inputs = flip_inputs, .outputs = image_out, .run = flip_run};

static const char *const rotations[] = {"none", "90 degrees", "180 degrees", "270 degrees", NULL};

static sd_status rotate_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    const char *m = sd_value_as_string(in[1]);
    /* rotation.startswith("90") etc.; anything else is no rotation */
    int k = !m ? 0 : !strncmp(m, "90", 2) ? 1 : !strncmp(m, "180", 3) ? 2 : !strncmp(m, "270", 3) ? 3 : 0;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t oh = k % 2 ? W : H, ow = k % 2 ? H : W;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, oh, ow, C);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(o);
    /* torch.rot90(image, k, dims=[2, 1]): clockwise quarter turns */
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < oh; r++)
            for (int64_t c = 0; c < ow; c++) {
                int64_t sy, sx;
                switch (k) {
                case 1: sy = H - 1 - c, sx = r; break;
                case 2: sy = H - 1 - r, sx = W - 1 - c; break;
                case 3: sy = c, sx = W - 1 - r; break;
                default: sy = r, sx = c;
                }
                memcpy(d + ((b * oh + r) * ow + c) * C, s + ((b * H + sy) * W + sx) * C, (size_t)C * sizeof(float));
            }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def rotate_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "rotation", .type = SD_T_COMBO, .options = rotations, .def_str = "none", .no_default = 1}, {0}};

const sd_node_def sd_node_ImageRotate = {
    .version = 1, .class_type = "ImageRotate", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .category = "image/transform",
    .help = "Rotates the images clockwise by quarter turns.", .inputs = rotate_inputs,
    .outputs = image_out, .run = rotate_run};

/* ---- ImageStitch ------------------------------------------------------------------------- */

static const char *const directions[] = {"right", "down", "left", "up", NULL};
static const char *const colors[] = {"white", "black", "red", "green", "blue", NULL};

/* The batch padded to n items by repeating its last one (a new reference). */
static sd_tensor *pad_batch(sd_tensor *t, int64_t n) {
    if (t->shape[0] >= n) return sd_tensor_ref(t);
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, n, t->shape[1], t->shape[2], t->shape[3]);
    if (!o) return NULL;
    size_t item = t->nbytes / (size_t)t->shape[0];
    memcpy(o->data, t->data, t->nbytes);
    for (int64_t i = t->shape[0]; i < n; i++)
        memcpy((char *)o->data + (size_t)i * item, (char *)t->data + t->nbytes - item, item);
    return o;
}

/* t padded with `value`: top/bottom rows and left/right columns. */
static sd_tensor *pad_hw(sd_tensor *t, int64_t top, int64_t bottom, int64_t left, int64_t right, float value) {
    int64_t B = t->shape[0], H = t->shape[1], W = t->shape[2], C = t->shape[3];
    int64_t oh = H + top + bottom, ow = W + left + right;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, oh, ow, C);
    if (!o) return NULL;
    float *d = sd_tensor_f32(o);
    const float *s = sd_tensor_f32(t);
    for (int64_t i = 0, n = B * oh * ow * C; i < n; i++) d[i] = value;
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            memcpy(d + ((b * oh + y + top) * ow + left) * C, s + ((b * H + y) * W) * C, (size_t)(W * C) * sizeof(float));
    return o;
}

/* t with channels added (filled with ones) up to c. */
static sd_tensor *pad_channels(sd_tensor *t, int64_t c) {
    int64_t n = t->shape[0] * t->shape[1] * t->shape[2], tc = t->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, t->shape[0], t->shape[1], t->shape[2], c);
    if (!o) return NULL;
    float *d = sd_tensor_f32(o);
    const float *s = sd_tensor_f32(t);
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < c; k++) d[i * c + k] = k < tc ? s[i * tc + k] : 1.0f;
    return o;
}

static void replace(sd_tensor **slot, sd_tensor *t) {
    sd_tensor_unref(*slot);
    *slot = t;
}

static sd_status stitch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *i1, *i2;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image1", 4, &i1, err);
    if (rc) return rc;
    if (!in[5] || sd_value_kind_of(in[5]) == SD_VAL_NONE) { out[0] = sd_value_ref(in[0]); return SD_OK; }
    if ((rc = sd_nodes_in_tensor(in, 5, "image2", 4, &i2, err))) return rc;
    const char *dir = sd_value_as_string(in[1]), *color = sd_value_as_string(in[4]);
    int d = -1, col = -1;
    for (int i = 0; dir && directions[i]; i++) if (!strcmp(dir, directions[i])) d = i;
    for (int i = 0; color && colors[i]; i++) if (!strcmp(color, colors[i])) col = i;
    if (d < 0) return sd_nodes_bad_input(err, "direction", "unknown direction '%s'", dir ? dir : "");
    if (col < 0) return sd_nodes_bad_input(err, "spacing_color", "unknown spacing_color '%s'", color ? color : "");
    int horizontal = d == 0 || d == 2, first2 = d == 2 || d == 3;
    int match = sd_value_as_bool(in[2]);
    int64_t spacing = sd_value_as_int(in[3]);
    int64_t n = i1->shape[0] > i2->shape[0] ? i1->shape[0] : i2->shape[0];
    sd_tensor *a = pad_batch(i1, n), *b = pad_batch(i2, n);
    if (!a || !b) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); goto done; }
    if (match) {
        int64_t h1 = a->shape[1], w1 = a->shape[2], h2 = b->shape[1], w2 = b->shape[2];
        double aspect = (double)w2 / (double)h2;
        int64_t tw, th;
        if (horizontal) th = h1, tw = (int64_t)((double)h1 * aspect);
        else tw = w1, th = (int64_t)((double)w1 / aspect);
        if (tw < 1 || th < 1) {
            rc = sd_nodes_bad_input(err, "image2", "image2 resized to %lldx%lld to match image1: empty",
                                    (long long)tw, (long long)th);
            goto done;
        }
        sd_tensor *r = NULL;
        rc = sd_nodes_upscale_batched(ctx, b, 1, tw, th, SD_UPSCALE_LANCZOS, SD_CROP_DISABLED, "image2", &r, err);
        if (rc) goto done;
        replace(&b, r);
    } else {
        /* pad the other dimension to the larger, centred, with the colour's value (0 for a colour) */
        float pv = col == 0 ? 1.0f : 0.0f;
        int64_t h1 = a->shape[1], w1 = a->shape[2], h2 = b->shape[1], w2 = b->shape[2];
        if (horizontal && h1 != h2) {
            int64_t t = h1 > h2 ? h1 : h2;
            if (h1 < t) replace(&a, pad_hw(a, (t - h1) / 2, t - h1 - (t - h1) / 2, 0, 0, pv));
            if (h2 < t) replace(&b, pad_hw(b, (t - h2) / 2, t - h2 - (t - h2) / 2, 0, 0, pv));
        } else if (!horizontal && w1 != w2) {
            int64_t t = w1 > w2 ? w1 : w2;
            if (w1 < t) replace(&a, pad_hw(a, 0, 0, (t - w1) / 2, t - w1 - (t - w1) / 2, pv));
            if (w2 < t) replace(&b, pad_hw(b, 0, 0, (t - w2) / 2, t - w2 - (t - w2) / 2, pv));
        }
        if (!a || !b) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); goto done; }
    }
    if (a->shape[3] != b->shape[3]) {
        int64_t c = a->shape[3] > b->shape[3] ? a->shape[3] : b->shape[3];
        if (a->shape[3] < c) replace(&a, pad_channels(a, c));
        if (b->shape[3] < c) replace(&b, pad_channels(b, c));
        if (!a || !b) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); goto done; }
    }
    if (spacing > 0) spacing += spacing % 2;
    {
        int64_t C = a->shape[3];
        /* the parts must agree in the dimension they are not joined along */
        int64_t along_a = horizontal ? a->shape[2] : a->shape[1], along_b = horizontal ? b->shape[2] : b->shape[1];
        int64_t other = horizontal ? a->shape[1] : a->shape[2], other_b = horizontal ? b->shape[1] : b->shape[2];
        if (other != other_b) {
            rc = sd_nodes_bad_input(err, "image2", "the images are %lld and %lld pixels %s: they cannot be joined",
                                    (long long)other, (long long)other_b, horizontal ? "high" : "wide");
            goto done;
        }
        int64_t total = along_a + along_b + spacing;
        int64_t oh = horizontal ? other : total, ow = horizontal ? total : other;
        int64_t shape[4] = {n, oh, ow, C};
        if ((rc = sd_nodes_mem_check(ctx, "image2", "the stitched image", 4, shape, err))) goto done;
        sd_tensor *o = sd_tensor_new(SD_F32, 4, shape);
        if (!o) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); goto done; }
        /* spacing colour: 1.0 for white, 0 for black, else one channel set; alpha (4th) is 1 */
        float sp[4] = {0, 0, 0, 0};
        if (col <= 1) for (int k = 0; k < 3; k++) sp[k] = col == 0 ? 1.0f : 0.0f;
        else sp[col - 2] = 1.0f;
        sd_tensor *parts[2] = {first2 ? b : a, first2 ? a : b};
        float *dp = sd_tensor_f32(o);
        for (int64_t bi = 0; bi < n; bi++)
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++) {
                    int64_t pos = horizontal ? x : y, len0 = horizontal ? parts[0]->shape[2] : parts[0]->shape[1];
                    float *px = dp + ((bi * oh + y) * ow + x) * C;
                    const sd_tensor *p = NULL;
                    int64_t py = y, pxx = x;
                    if (pos < len0) p = parts[0];
                    else if (pos < len0 + spacing) p = NULL;
                    else {
                        p = parts[1];
                        if (horizontal) pxx = x - len0 - spacing;
                        else py = y - len0 - spacing;
                    }
                    if (p) {
                        memcpy(px, sd_tensor_f32(p) + ((bi * p->shape[1] + py) * p->shape[2] + pxx) * C,
                               (size_t)C * sizeof(float));
                    } else {
                        for (int64_t k = 0; k < C; k++) px[k] = k < 3 ? sp[k] : (k == 3 && C == 4 ? 1.0f : 0.0f);
                    }
                }
        rc = sd_nodes_set_tensor(&out[0], o, err);
    }
done:
    sd_tensor_unref(a);
    sd_tensor_unref(b);
    return rc;
}

static const sd_input_def stitch_inputs[] = {
    {.name = "image1", .type = "IMAGE"},
    {.name = "direction", .type = SD_T_COMBO, .options = directions, .def_str = "right"},
    {.name = "match_image_size", .type = SD_T_BOOLEAN, .def = 1},
    {.name = "spacing_width", .type = SD_T_INT, .def = 0, .min = 0, .max = 1024, .step = 2, .has_range = 1},
    {.name = "spacing_color", .type = SD_T_COMBO, .options = colors, .def_str = "white"},
    {.name = "image2", .type = "IMAGE", .optional = 1},
    {0}};

const sd_node_def sd_node_ImageStitch = {
    .version = 1, .class_type = "ImageStitch", .python_module = "comfy_extras.nodes_images",
    .description = "Stitches image2 to image1 in the specified direction.\nIf image2 is not provided, "
                   "returns image1 unchanged.\nOptional spacing can be added between images.",
    .flags = SD_NODE_V3, .display_name = "Image Stitch", .category = "image/transform",
    .inputs = stitch_inputs, .outputs = image_out, .run = stitch_run};
