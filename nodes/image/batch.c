/* batch.c - GetImageSize, RepeatImageBatch, ImageFromBatch, ImageAddNoise
 * (comfy_extras/nodes_images.py). */
#include <string.h>

#include "image.h"
#include "models/sampling/rng.h"

static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

#define RANGE_INT(n, d, lo, hi) {.name = n, .type = SD_T_INT, .def = d, .min = lo, .max = hi, .has_range = 1}

/* ---- GetImageSize ------------------------------------------------------------------ */

static sd_status size_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    out[0] = sd_value_int(img->shape[2]);
    out[1] = sd_value_int(img->shape[1]);
    out[2] = sd_value_int(img->shape[0]);
    return out[0] && out[1] && out[2] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def image_only[] = {{.name = "image", .type = "IMAGE"}, {0}};
static const sd_output_def size_outputs[] = {{"width", "INT"}, {"height", "INT"}, {"batch_size", "INT"}, {0}};

const sd_node_def sd_node_GetImageSize = {
    .version = 1, .class_type = "GetImageSize", .python_module = "comfy_extras.nodes_images",
    .hidden = SD_STRINGS("unique_id"),
    .description = "Returns width and height of the image, and passes it through unchanged.", .flags = SD_NODE_V3,
    .display_name = "Get Image Size", .category = "image",
    .inputs = image_only, .outputs = size_outputs, .run = size_run};

/* ---- RepeatImageBatch: image.repeat((amount, 1, 1, 1)) ------------------------------- */

static sd_status repeat_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t amount = sd_value_as_int(in[1]);
    if (amount < 1) return sd_nodes_bad_input(err, "amount", "amount %lld is below 1", (long long)amount);
    int64_t shape[4] = {img->shape[0] * amount, img->shape[1], img->shape[2], img->shape[3]};
    if ((rc = sd_nodes_mem_check(ctx, "amount", "the image batch", 4, shape, err))) return rc;
    sd_tensor *o = sd_tensor_new(SD_F32, 4, shape);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < amount; i++) memcpy((char *)o->data + (size_t)i * img->nbytes, img->data, img->nbytes);
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def repeat_inputs[] = {{.name = "image", .type = "IMAGE"}, RANGE_INT("amount", 1, 1, 4096), {0}};

const sd_node_def sd_node_RepeatImageBatch = {
    .version = 1, .class_type = "RepeatImageBatch", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .category = "image/batch",
    .help = "The whole batch repeated amount times.", .inputs = repeat_inputs, .outputs = image_out,
    .run = repeat_run};

/* ---- ImageFromBatch -------------------------------------------------------------------- */

static sd_status from_batch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t n = img->shape[0], index = sd_value_as_int(in[1]), length = sd_value_as_int(in[2]);
    if (index < 0 || length < 1)
        return sd_nodes_bad_input(err, index < 0 ? "batch_index" : "length", "batch_index %lld, length %lld",
                                  (long long)index, (long long)length);
    if (index > n - 1) index = n - 1;
    if (length > n - index) length = n - index;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, length, img->shape[1], img->shape[2], img->shape[3]);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    size_t item = img->nbytes / (size_t)n;
    memcpy(o->data, (char *)img->data + (size_t)index * item, (size_t)length * item);
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def from_batch_inputs[] = {
    {.name = "image", .type = "IMAGE"}, RANGE_INT("batch_index", 0, 0, 4095), RANGE_INT("length", 1, 1, 4096), {0}};

const sd_node_def sd_node_ImageFromBatch = {
    .version = 1, .class_type = "ImageFromBatch", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .category = "image/batch",
    .help = "length images of the batch from batch_index on (both cut to the batch).",
    .inputs = from_batch_inputs, .outputs = image_out, .run = from_batch_run};

/* ---- ImageAddNoise: clip(image + strength * randn(seed), 0, 1) --------------------------- */

static sd_status add_noise_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    uint64_t seed = (uint64_t)sd_value_as_int(in[1]);
    float strength = (float)sd_value_as_float(in[2]);
    sd_tensor *o = sd_tensor_new(SD_F32, 4, img->shape);
    sd_rng *rng = o ? sd_rng_new(seed) : NULL;
    if (!rng) { sd_tensor_unref(o); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    /* torch.randn(image.size(), generator=torch.manual_seed(seed)): one draw of every element */
    int64_t n = sd_tensor_numel(img);
    float *d = sd_tensor_f32(o);
    const float *s = sd_tensor_f32(img);
    sd_rng_randn(rng, d, n);
    sd_rng_free(rng);
    for (int64_t i = 0; i < n; i++) {
        float t = strength * d[i];
        float v = s[i] + t;
        d[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    }
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def add_noise_inputs[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "seed", .type = SD_T_INT, .def = 0, .min = 0, .max = 18446744073709551615.0, .has_range = 1,
     .tooltip = "The random seed used for creating the noise."},
    {.name = "strength", .type = SD_T_FLOAT, .def = 0.5, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ImageAddNoise = {
    .version = 1, .class_type = "ImageAddNoise", .python_module = "comfy_extras.nodes_images", .flags = SD_NODE_V3,
    .category = "image",
    .help = "Adds strength times torch's CPU normal noise for the seed, clipped to 0..1.",
    .inputs = add_noise_inputs, .outputs = image_out, .run = add_noise_run};
