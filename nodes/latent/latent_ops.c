/* latent_ops.c - EmptyLatentImage, EmptySD3LatentImage, LatentUpscale, LatentUpscaleBy,
 * RepeatLatentBatch, LatentComposite, SetLatentNoiseMask. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/membudget.h"
#include "latent.h"
#include "nodes/image/image.h"

static const char *const latent_methods[] = {"nearest-exact", "bilinear", "area", "bicubic",
                                             "bislerp", NULL};
static const char *const crop_methods[] = {"disabled", "center", NULL};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};

static sd_status bad_input(sd_error *err, const char *input, const char *fmt, const char *val) {
    sd_error_set(err, SD_ERR_INVALID, fmt, val ? val : "(null)");
    sd_error_at(err, NULL, NULL, input);
    return SD_ERR_INVALID;
}

/* ---- EmptyLatentImage ---------------------------------------------------------------- */

/* A zero LATENT [batch, channels, height/8, width/8] for `node`. */
static sd_status empty_latent(sd_node_ctx *ctx, sd_value *const *in, int64_t channels,
                              const char *node, sd_value **out, sd_error *err) {
    int64_t w = sd_value_as_int(in[0]), h = sd_value_as_int(in[1]), b = sd_value_as_int(in[2]);
    if (w / 8 < 1 || h / 8 < 1 || b < 1)
        return sd_error_set(err, SD_ERR_INVALID, "%s: bad size %lldx%lld x %lld", node, (long long)w,
                            (long long)h, (long long)b);
    int64_t shape[4] = {b, channels, h / 8, w / 8};
    char what[128];
    snprintf(what, sizeof what, "the latent [%lld, %lld, %lld, %lld] float32", (long long)b,
             (long long)channels, (long long)(h / 8), (long long)(w / 8));
    sd_status rc = sd_mem_check(ctx, b > 1 ? "batch_size" : w >= h ? "width" : "height",
                                sd_mem_tensor_bytes(4, shape, sizeof(float)), what, err);
    if (rc) return rc;
    sd_tensor *t = sd_tensor_new(SD_F32, 4, shape);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", node);
    return sd_nodes_latent_with(NULL, "samples", t, out, err);
}

static sd_status empty_latent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                  sd_error *err) {
    return empty_latent(ctx, in, 4, "EmptyLatentImage", &out[0], err);
}

static const sd_input_def empty_latent_inputs[] = {
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 16, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1,
     .tooltip = "The width of the latent images in pixels."},
    {.name = "height", .type = SD_T_INT, .def = 512, .min = 16, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1,
     .tooltip = "The height of the latent images in pixels."},
    {.name = "batch_size", .type = SD_T_INT, .def = 1, .min = 1, .max = 4096, .has_range = 1,
     .tooltip = "The number of latent images in the batch."},
    {0}};

const sd_node_def sd_node_EmptyLatentImage = {
    .version = 1,
    .class_type = "EmptyLatentImage",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("The empty latent image batch."),
    .description = "Create a new batch of empty latent images to be denoised via sampling.",
    .display_name = "Empty Latent Image",
    .category = "latent",
    .help = "A batch of zero latents [batch_size, 4, height/8, width/8].",
    .inputs = empty_latent_inputs,
    .outputs = latent_out,
    .run = empty_latent_run,
};

/* ---- EmptySD3LatentImage (comfy_extras/nodes_sd3.py) -------------------------------------- */

/* The 16-channel latent of SD3 and Flux (same shape for both; its width and
 * height step by 16 in the editor, the latent is still height/8 x width/8). */
static sd_status empty_sd3_latent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                      sd_error *err) {
    return empty_latent(ctx, in, 16, "EmptySD3LatentImage", &out[0], err);
}

static const sd_input_def empty_sd3_latent_inputs[] = {
    {.name = "width", .type = SD_T_INT, .def = 1024, .min = 16, .max = SD_MAX_RESOLUTION, .step = 16, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 1024, .min = 16, .max = SD_MAX_RESOLUTION, .step = 16, .has_range = 1},
    {.name = "batch_size", .type = SD_T_INT, .def = 1, .min = 1, .max = 4096, .has_range = 1},
    {0}};

const sd_node_def sd_node_EmptySD3LatentImage = {
    .version = 1,
    .class_type = "EmptySD3LatentImage", .python_module = "comfy_extras.nodes_sd3", .flags = SD_NODE_V3,
    .category = "latent/sd3",
    .help = "A batch of zero 16-channel latents [batch_size, 16, height/8, width/8] "
            "(SD3 and Flux).",
    .inputs = empty_sd3_latent_inputs,
    .outputs = latent_out,
    .run = empty_sd3_latent_run,
};

/* ---- LatentUpscale / LatentUpscaleBy ----------------------------------------------------- */

static sd_status latent_method(const sd_value *v, sd_upscale_method *m, sd_error *err) {
    const char *s = sd_value_as_string(v);
    if (sd_upscale_method_parse(s, m) != 0 || *m == SD_UPSCALE_LANCZOS)
        return bad_input(err, "upscale_method", "unknown upscale_method '%s'", s);
    return SD_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static sd_status latent_upscale_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                    sd_error *err) {
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    sd_upscale_method m;
    if ((rc = latent_method(in[1], &m, err))) return rc;
    int64_t width = sd_value_as_int(in[2]), height = sd_value_as_int(in[3]);
    sd_crop_mode crop;
    if (sd_crop_mode_parse(sd_value_as_string(in[4]), &crop) != 0)
        return bad_input(err, "crop", "unknown crop '%s'", sd_value_as_string(in[4]));
    if (width == 0 && height == 0) { out[0] = sd_value_ref(in[0]); return SD_OK; }
    int64_t lh = x->shape[2], lw = x->shape[3];
    if (width == 0) {
        height = max64(64, height);
        width = max64(64, sd_nodes_py_round((double)lw * height / lh));
    } else if (height == 0) {
        width = max64(64, width);
        height = max64(64, sd_nodes_py_round((double)lh * width / lw));
    } else {
        width = max64(64, width);
        height = max64(64, height);
    }
    sd_tensor *res = NULL;
    rc = sd_nodes_upscale_batched(ctx, x, 0, width / 8, height / 8, m, crop,
                                  width >= height ? "width" : "height", &res, err);
    if (rc) return rc;
    return sd_nodes_latent_with(in[0], "samples", res, &out[0], err);
}

static const sd_input_def latent_upscale_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = latent_methods, .def_str = "nearest-exact",
     .no_default = 1},
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 512, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "crop", .type = SD_T_COMBO, .options = crop_methods, .def_str = "disabled", .no_default = 1},
    {0}};

const sd_node_def sd_node_LatentUpscale = {
    .version = 1,
    .class_type = "LatentUpscale",
    .python_module = "nodes",
    .display_name = "Upscale Latent",
    .category = "latent",
    .help = "Resizes latents to width/8 x height/8 (sizes in pixels, at least 64; "
            "0 keeps the aspect ratio).",
    .inputs = latent_upscale_inputs,
    .outputs = latent_out,
    .run = latent_upscale_run,
};

static sd_status latent_upscale_by_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                       sd_error *err) {
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    sd_upscale_method m;
    if ((rc = latent_method(in[1], &m, err))) return rc;
    double by = sd_value_as_float(in[2]);
    int64_t width = sd_nodes_py_round((double)x->shape[3] * by);
    int64_t height = sd_nodes_py_round((double)x->shape[2] * by);
    if (width < 1 || height < 1) {
        sd_error_set(err, SD_ERR_INVALID, "scale_by %g gives an empty latent", by);
        sd_error_at(err, NULL, NULL, "scale_by");
        return SD_ERR_INVALID;
    }
    sd_tensor *res = NULL;
    rc = sd_nodes_upscale_batched(ctx, x, 0, width, height, m, SD_CROP_DISABLED, "scale_by", &res, err);
    if (rc) return rc;
    return sd_nodes_latent_with(in[0], "samples", res, &out[0], err);
}

static const sd_input_def latent_upscale_by_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "upscale_method", .type = SD_T_COMBO, .options = latent_methods, .def_str = "nearest-exact",
     .no_default = 1},
    {.name = "scale_by", .type = SD_T_FLOAT, .def = 1.5, .min = 0.01, .max = 8.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentUpscaleBy = {
    .version = 1,
    .class_type = "LatentUpscaleBy",
    .python_module = "nodes",
    .display_name = "Upscale Latent By",
    .category = "latent",
    .help = "Resizes latents by a factor (sizes rounded half to even).",
    .inputs = latent_upscale_by_inputs,
    .outputs = latent_out,
    .run = latent_upscale_by_run,
};

/* ---- RepeatLatentBatch ------------------------------------------------------------------- */

static sd_tensor *repeat_batch(const sd_tensor *t, int64_t amount) {
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] *= amount;
    sd_tensor *r = sd_tensor_new(t->dtype, t->ndim, shape);
    if (!r) return NULL;
    for (int64_t i = 0; i < amount; i++) memcpy((char *)r->data + i * t->nbytes, t->data, t->nbytes);
    return r;
}

static sd_status repeat_latent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    (void)ctx;
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    int64_t amount = sd_value_as_int(in[1]);
    if (amount < 1) return bad_input(err, "amount", "amount must be >= 1%s", "");
    sd_value *d = sd_value_shallow_copy(in[0]);
    sd_tensor *rs = repeat_batch(x, amount);
    if (!d || !rs || sd_value_dict_set(d, "samples", sd_value_tensor(rs))) goto oom;
    sd_tensor_unref(rs);
    rs = NULL;
    /* ComfyUI repeats the noise mask only when it has more than one entry
     * (a single mask broadcasts over the batch). */
    sd_tensor *mask = sd_value_dict_tensor(in[0], "noise_mask");
    if (mask && mask->ndim >= 1 && mask->shape[0] > 1) {
        sd_tensor *rm = repeat_batch(mask, amount);
        if (!rm || sd_value_dict_set(d, "noise_mask", sd_value_tensor(rm))) { sd_tensor_unref(rm); goto oom; }
        sd_tensor_unref(rm);
    }
    sd_value *bi = sd_value_dict_get(in[0], "batch_index");
    if (bi && sd_value_kind_of(bi) == SD_VAL_LIST && sd_value_list_len(bi) > 0) {
        size_t n = sd_value_list_len(bi);
        int64_t mn = sd_value_as_int(sd_value_list_get(bi, 0)), mx = mn;
        for (size_t i = 1; i < n; i++) {
            int64_t v = sd_value_as_int(sd_value_list_get(bi, i));
            if (v < mn) mn = v;
            if (v > mx) mx = v;
        }
        int64_t offset = mx - mn + 1;
        sd_value *nl = sd_value_list();
        if (!nl) goto oom;
        for (int64_t r = 0; r < amount; r++)
            for (size_t i = 0; i < n; i++)
                if (sd_value_list_append(nl, sd_value_int(sd_value_as_int(sd_value_list_get(bi, i)) +
                                                          r * offset))) {
                    sd_value_unref(nl);
                    goto oom;
                }
        if (sd_value_dict_set(d, "batch_index", nl)) goto oom;
    }
    out[0] = d;
    return SD_OK;
oom:
    sd_tensor_unref(rs);
    sd_value_unref(d);
    return sd_error_set(err, SD_ERR_NOMEM, "RepeatLatentBatch: out of memory");
}

static const sd_input_def repeat_latent_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "amount", .type = SD_T_INT, .def = 1, .min = 1, .max = 64, .has_range = 1},
    {0}};

const sd_node_def sd_node_RepeatLatentBatch = {
    .version = 1,
    .class_type = "RepeatLatentBatch",
    .python_module = "nodes",
    .display_name = "Repeat Latent Batch",
    .category = "latent/batch",
    .help = "Repeats the batch `amount` times (noise masks and batch_index follow).",
    .inputs = repeat_latent_inputs,
    .outputs = latent_out,
    .run = repeat_latent_run,
};

/* ---- LatentComposite --------------------------------------------------------------------- */

/* Python slice [start:stop] over `len` normalised to a range (negative
 * indices count from the end), as the feather loop's slices behave. */
static void py_slice(int64_t len, int64_t start, int64_t stop, int64_t *a, int64_t *b) {
    if (start < 0) { start += len; if (start < 0) start = 0; }
    if (stop < 0) { stop += len; if (stop < 0) stop = 0; }
    if (start > len) start = len;
    if (stop > len) stop = len;
    *a = start;
    *b = stop > start ? stop : start;
}

static sd_status latent_composite_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                      sd_error *err) {
    (void)ctx;
    sd_tensor *to, *from;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples_to", &to, err);
    if (!rc) rc = sd_nodes_in_latent(in, 1, "samples_from", &from, err);
    if (rc) return rc;
    int64_t x = sd_value_as_int(in[2]) / 8, y = sd_value_as_int(in[3]) / 8;
    int64_t feather = sd_value_as_int(in[4]) / 8;
    int64_t B = to->shape[0], C = to->shape[1], th = to->shape[2], tw = to->shape[3];
    int64_t fb = from->shape[0], fc = from->shape[1];
    /* torch broadcasting of the pasted block over batch and channels */
    if ((fb != B && fb != 1) || (fc != C && fc != 1)) {
        sd_error_set(err, SD_ERR_INVALID, "LatentComposite: samples_from [%lld, %lld, ...] does "
                     "not broadcast to samples_to [%lld, %lld, ...]", (long long)fb, (long long)fc,
                     (long long)B, (long long)C);
        sd_error_at(err, NULL, NULL, "samples_from");
        return SD_ERR_INVALID;
    }
    /* region: rows y .. y+rh, cols x .. x+rw, the part of `from` that fits */
    int64_t rh = from->shape[2] < th - y ? from->shape[2] : th - y;
    int64_t rw = from->shape[3] < tw - x ? from->shape[3] : tw - x;
    if (rh < 0) rh = 0;
    if (rw < 0) rw = 0;
    sd_tensor *s = sd_tensor_clone(to);
    float *mask = rh > 0 && rw > 0 ? malloc(sizeof *mask * (size_t)(rh * rw)) : NULL;
    if (!s || (rh > 0 && rw > 0 && !mask)) {
        sd_tensor_unref(s);
        free(mask);
        return sd_error_set(err, SD_ERR_NOMEM, "LatentComposite: out of memory");
    }
    for (int64_t i = 0; i < rh * rw; i++) mask[i] = 1.0f;
    if (feather > 0) {
        for (int64_t t = 0; t < feather; t++) {
            float f = (float)((1.0 / feather) * (t + 1));
            int64_t a, b;
            if (y != 0) {
                py_slice(rh, t, t + 1, &a, &b);
                for (int64_t r = a; r < b; r++) for (int64_t c = 0; c < rw; c++) mask[r * rw + c] *= f;
            }
            if (y + rh < th) {
                py_slice(rh, rh - 1 - t, rh - t, &a, &b);
                for (int64_t r = a; r < b; r++) for (int64_t c = 0; c < rw; c++) mask[r * rw + c] *= f;
            }
            if (x != 0) {
                py_slice(rw, t, t + 1, &a, &b);
                for (int64_t r = 0; r < rh; r++) for (int64_t c = a; c < b; c++) mask[r * rw + c] *= f;
            }
            if (x + rw < tw) {
                py_slice(rw, rw - 1 - t, rw - t, &a, &b);
                for (int64_t r = 0; r < rh; r++) for (int64_t c = a; c < b; c++) mask[r * rw + c] *= f;
            }
        }
    }
    float *d = sd_tensor_f32(s);
    const float *src = sd_tensor_f32(from);
    int64_t fh = from->shape[2], fw = from->shape[3];
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t ci = 0; ci < C; ci++) {
            const float *fp = src + ((fb == 1 ? 0 : bi) * fc + (fc == 1 ? 0 : ci)) * fh * fw;
            float *tp = d + (bi * C + ci) * th * tw;
            for (int64_t r = 0; r < rh; r++)
                for (int64_t c = 0; c < rw; c++) {
                    float v = fp[r * fw + c];
                    float *o = &tp[(y + r) * tw + x + c];
                    if (feather == 0) *o = v;
                    else {
                        float mk = mask[r * rw + c];
                        *o = v * mk + *o * (1.0f - mk);
                    }
                }
        }
    free(mask);
    return sd_nodes_latent_with(in[0], "samples", s, &out[0], err);
}

static const sd_input_def latent_composite_inputs[] = {
    {.name = "samples_to", .type = "LATENT"},
    {.name = "samples_from", .type = "LATENT"},
    {.name = "x", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "y", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "feather", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentComposite = {
    .version = 1,
    .class_type = "LatentComposite",
    .python_module = "nodes",
    .display_name = "Latent Composite",
    .category = "latent",
    .help = "Pastes samples_from into samples_to at (x/8, y/8), optionally feathering "
            "the inner edges over feather/8 latent pixels.",
    .inputs = latent_composite_inputs,
    .outputs = latent_out,
    .run = latent_composite_run,
};

/* ---- SetLatentNoiseMask ------------------------------------------------------------------- */

static sd_status set_noise_mask_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                    sd_error *err) {
    (void)ctx;
    sd_tensor *x, *mask;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (!rc) rc = sd_nodes_in_tensor(in, 1, "mask", 0, &mask, err);
    if (rc) return rc;
    if (mask->ndim < 2) return bad_input(err, "mask", "mask must have at least 2 dims%s", "");
    int64_t h = mask->shape[mask->ndim - 2], w = mask->shape[mask->ndim - 1];
    int64_t shape[4] = {sd_tensor_numel(mask) / (h * w), 1, h, w};
    sd_tensor *m = sd_tensor_reshape(mask, 4, shape); /* reshape((-1, 1, H, W)) shares storage */
    if (!m) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return sd_nodes_latent_with(in[0], "noise_mask", m, &out[0], err);
}

static const sd_input_def set_noise_mask_inputs[] = {
    {.name = "samples", .type = "LATENT"}, {.name = "mask", .type = "MASK"}, {0}};

const sd_node_def sd_node_SetLatentNoiseMask = {
    .version = 1,
    .class_type = "SetLatentNoiseMask",
    .python_module = "nodes",
    .display_name = "Set Latent Noise Mask",
    .category = "latent/inpaint",
    .help = "Attaches a mask (reshaped to [B, 1, H, W]) limiting where sampling changes "
            "the latent.",
    .inputs = set_noise_mask_inputs,
    .outputs = latent_out,
    .run = set_noise_mask_run,
};
