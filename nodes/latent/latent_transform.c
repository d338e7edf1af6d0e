/* latent_transform.c - LatentFromBatch, LatentBlend, LatentCrop, LatentFlip,
 * LatentRotate (ComfyUI core nodes that only move or mix latent values). */
#include <string.h>

#include "latent.h"
#include "nodes/image/image.h"

static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};

static sd_status oom(sd_error *err, const char *who) {
    return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", who);
}

/* dict copy with one key replaced by a tensor (taken) or a value (taken). */
static sd_status put(sd_value *d, const char *key, sd_tensor *t) {
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    return (!v || sd_value_dict_set(d, key, v)) ? SD_ERR_NOMEM : SD_OK;
}

/* Python slice bounds [a, b) of [start:stop] on a dim of length len. */
static void py_slice(int64_t len, int64_t start, int64_t stop, int64_t *a, int64_t *b) {
    if (start < 0) { start += len; if (start < 0) start = 0; }
    if (stop < 0) { stop += len; if (stop < 0) stop = 0; }
    if (start > len) start = len;
    if (stop > len) stop = len;
    *a = start;
    *b = stop > start ? stop : start;
}

/* x[b0:b0+nb, :, y0:y0+nh, x0:x0+nw] of a 4-D tensor (bounds already valid). */
static sd_tensor *slice4(const sd_tensor *x, int64_t b0, int64_t nb, int64_t y0, int64_t nh,
                         int64_t x0, int64_t nw) {
    int64_t C = x->shape[1], H = x->shape[2], W = x->shape[3];
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, nb, C, nh, nw);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t y = 0; y < nh; y++)
                memcpy(d + ((b * C + c) * nh + y) * nw, s + (((b0 + b) * C + c) * H + y0 + y) * W + x0,
                       sizeof(float) * (size_t)nw);
    return o;
}

/* ---- LatentFromBatch ------------------------------------------------------------------ */

static sd_status from_batch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    (void)ctx;
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    int64_t n = x->shape[0];
    int64_t bi = sd_value_as_int(in[1]), len = sd_value_as_int(in[2]);
    if (bi > n - 1) bi = n - 1;
    if (bi < 0) bi = 0;
    if (len > n - bi) len = n - bi;
    if (len < 1) len = 1;
    sd_value *d = sd_value_shallow_copy(in[0]);
    if (!d) return oom(err, "LatentFromBatch");
    sd_tensor *s = slice4(x, bi, len, 0, x->shape[2], 0, x->shape[3]);
    if (!s || put(d, "samples", s)) goto fail;
    sd_tensor *masks = sd_value_dict_tensor(in[0], "noise_mask");
    if (masks && masks->ndim == 4) {
        sd_tensor *m;
        if (masks->shape[0] == 1) {
            m = sd_tensor_clone(masks);
        } else {
            /* masks repeated (ceil) to the latent batch, then sliced */
            int64_t mb = masks->shape[0];
            sd_tensor *rep = masks;
            sd_tensor *tmp = NULL;
            if (mb < n) {
                int64_t shape[4] = {n, masks->shape[1], masks->shape[2], masks->shape[3]};
                tmp = sd_tensor_new(SD_F32, 4, shape);
                if (!tmp) goto fail;
                size_t item = masks->nbytes / (size_t)mb;
                for (int64_t k = 0; k < n; k++)
                    memcpy((char *)tmp->data + k * item, (char *)masks->data + (k % mb) * item, item);
                rep = tmp;
            }
            int64_t a, b;
            py_slice(rep->shape[0], bi, bi + len, &a, &b);
            m = slice4(rep, a, b - a, 0, rep->shape[2], 0, rep->shape[3]);
            sd_tensor_unref(tmp);
        }
        if (!m || put(d, "noise_mask", m)) goto fail;
    }
    sd_value *old = sd_value_dict_get(in[0], "batch_index");
    sd_value *nl = sd_value_list();
    if (!nl) goto fail;
    if (!old) {
        for (int64_t k = bi; k < bi + len; k++)
            if (sd_value_list_append(nl, sd_value_int(k))) { sd_value_unref(nl); goto fail; }
    } else {
        int64_t a, b;
        py_slice((int64_t)sd_value_list_len(old), bi, bi + len, &a, &b);
        for (int64_t k = a; k < b; k++)
            if (sd_value_list_append(nl, sd_value_ref(sd_value_list_get(old, (size_t)k)))) {
                sd_value_unref(nl);
                goto fail;
            }
    }
    if (sd_value_dict_set(d, "batch_index", nl)) goto fail;
    out[0] = d;
    return SD_OK;
fail:
    sd_value_unref(d);
    return oom(err, "LatentFromBatch");
}

static const sd_input_def from_batch_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "batch_index", .type = SD_T_INT, .def = 0, .min = 0, .max = 63, .has_range = 1},
    {.name = "length", .type = SD_T_INT, .def = 1, .min = 1, .max = 64, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentFromBatch = {
    .version = 1,
    .class_type = "LatentFromBatch",
    .python_module = "nodes",
    .display_name = "Latent From Batch",
    .category = "latent/batch",
    .help = "Takes `length` latents starting at batch_index (noise masks and "
            "batch_index follow, so the noise matches the full batch).",
    .inputs = from_batch_inputs,
    .outputs = latent_out,
    .run = from_batch_run,
};

/* ---- LatentBlend ------------------------------------------------------------------------ */

static sd_status blend_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *a, *b;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples1", &a, err);
    if (!rc) rc = sd_nodes_in_latent(in, 1, "samples2", &b, err);
    if (rc) return rc;
    double bf = sd_value_as_float(in[2]);
    sd_tensor *b2 = sd_tensor_ref(b);
    if (!sd_tensor_same_shape(a, b)) {
        sd_tensor_unref(b2);
        b2 = NULL;
        rc = sd_nodes_upscale_batched(ctx, b, 0, a->shape[3], a->shape[2], SD_UPSCALE_BICUBIC,
                                      SD_CROP_CENTER, "samples2", &b2, err);
        if (rc) return rc;
    }
    if (b2->shape[1] != a->shape[1] || (b2->shape[0] != a->shape[0] && b2->shape[0] != 1)) {
        sd_tensor_unref(b2);
        sd_error_set(err, SD_ERR_INVALID, "LatentBlend: samples2 does not match samples1");
        sd_error_at(err, NULL, NULL, "samples2");
        return SD_ERR_INVALID;
    }
    sd_tensor *r = sd_tensor_new(SD_F32, 4, a->shape);
    if (!r) { sd_tensor_unref(b2); return oom(err, "LatentBlend"); }
    float f1 = (float)bf, f2 = (float)(1.0 - bf);
    const float *x = sd_tensor_f32(a), *y = sd_tensor_f32(b2);
    float *d = sd_tensor_f32(r);
    int64_t item = a->shape[1] * a->shape[2] * a->shape[3];
    for (int64_t i = 0, n = sd_tensor_numel(a); i < n; i++) {
        int64_t j = b2->shape[0] == 1 ? i % item : i;
        d[i] = x[i] * f1 + y[j] * f2;
    }
    sd_tensor_unref(b2);
    sd_value *dd = sd_value_shallow_copy(in[0]);
    if (!dd || put(dd, "samples", r)) { sd_value_unref(dd); return oom(err, "LatentBlend"); }
    out[0] = dd;
    return SD_OK;
}

static const sd_input_def blend_inputs[] = {
    {.name = "samples1", .type = "LATENT"},
    {.name = "samples2", .type = "LATENT"},
    {.name = "blend_factor", .type = SD_T_FLOAT, .def = 0.5, .min = 0, .max = 1, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentBlend = {
    .version = 1,
    .class_type = "LatentBlend",
    .python_module = "nodes",
    .display_name = "Latent Blend",
    .category = "_for_testing",
    .help = "samples1 * blend_factor + samples2 * (1 - blend_factor); samples2 is "
            "resized (bicubic, center crop) when the shapes differ.",
    .inputs = blend_inputs,
    .outputs = latent_out,
    .run = blend_run,
};

/* ---- LatentCrop ------------------------------------------------------------------------ */

static sd_status crop_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    int64_t H = x->shape[2], W = x->shape[3];
    int64_t cx = sd_value_as_int(in[3]) / 8, cy = sd_value_as_int(in[4]) / 8;
    if (cx > W - 8) cx = W - 8; /* ComfyUI keeps at least 8 latent pixels */
    if (cy > H - 8) cy = H - 8;
    int64_t nw = sd_value_as_int(in[1]) / 8, nh = sd_value_as_int(in[2]) / 8;
    int64_t x0, x1, y0, y1;
    py_slice(W, cx, cx + nw, &x0, &x1);
    py_slice(H, cy, cy + nh, &y0, &y1);
    if (x1 <= x0 || y1 <= y0) {
        sd_error_set(err, SD_ERR_INVALID, "LatentCrop: the crop is empty");
        return SD_ERR_INVALID;
    }
    sd_tensor *s = slice4(x, 0, x->shape[0], y0, y1 - y0, x0, x1 - x0);
    sd_value *d = sd_value_shallow_copy(in[0]);
    if (!s || !d || put(d, "samples", s)) { if (!d) sd_tensor_unref(s); sd_value_unref(d); return oom(err, "LatentCrop"); }
    out[0] = d;
    return SD_OK;
}

static const sd_input_def crop_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 64, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 512, .min = 64, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "x", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "y", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentCrop = {
    .version = 1,
    .class_type = "LatentCrop",
    .python_module = "nodes",
    .display_name = "Crop Latent",
    .category = "latent/transform",
    .help = "Crops latents to width/8 x height/8 at (x/8, y/8).",
    .inputs = crop_inputs,
    .outputs = latent_out,
    .run = crop_run,
};

/* ---- LatentFlip / LatentRotate ------------------------------------------------------------ */

static const char *const flip_methods[] = {"x-axis: vertically", "y-axis: horizontally", NULL};
static const char *const rotations[] = {"none", "90 degrees", "180 degrees", "270 degrees", NULL};

/* mode: 'v' flip H, 'h' flip W, 1/2/3 = torch.rot90(x, k, dims=[3, 2]). */
static sd_tensor *remap(const sd_tensor *x, int mode) {
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int swap = mode == 1 || mode == 3;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, N, C, swap ? W : H, swap ? H : W);
    if (!o) return NULL;
    const float *s = sd_tensor_f32(x);
    float *d = sd_tensor_f32(o);
    int64_t oh = o->shape[2], ow = o->shape[3];
    for (int64_t p = 0; p < N * C; p++) {
        const float *sp = s + p * H * W;
        float *dp = d + p * oh * ow;
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                int64_t y, xx;
                switch (mode) {
                case 'v': y = H - 1 - i; xx = j; break;
                case 'h': y = i; xx = W - 1 - j; break;
                case 1: y = H - 1 - j; xx = i; break;     /* x.flip(2).transpose(3, 2) */
                case 2: y = H - 1 - i; xx = W - 1 - j; break;
                case 3: y = j; xx = W - 1 - i; break;     /* x.flip(3).transpose(3, 2) */
                default: y = i; xx = j; break;
                }
                dp[i * ow + j] = sp[y * W + xx];
            }
    }
    return o;
}

static sd_status remap_run(sd_value *const *in, sd_value **out, int mode, const char *who,
                           sd_error *err) {
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    sd_tensor *r = mode ? remap(x, mode) : sd_tensor_ref(x);
    sd_value *d = sd_value_shallow_copy(in[0]);
    if (!r || !d || put(d, "samples", r)) { if (!d) sd_tensor_unref(r); sd_value_unref(d); return oom(err, who); }
    out[0] = d;
    return SD_OK;
}

static sd_status flip_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *m = sd_value_as_string(in[1]);
    int mode = m && m[0] == 'x' ? 'v' : m && m[0] == 'y' ? 'h' : 0;
    return remap_run(in, out, mode, "LatentFlip", err);
}

static sd_status rotate_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *r = sd_value_as_string(in[1]);
    int k = 0;
    if (r && strncmp(r, "90", 2) == 0) k = 1;
    else if (r && strncmp(r, "180", 3) == 0) k = 2;
    else if (r && strncmp(r, "270", 3) == 0) k = 3;
    return remap_run(in, out, k, "LatentRotate", err);
}

static const sd_input_def flip_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "flip_method", .type = SD_T_COMBO, .options = flip_methods, .def_str = "x-axis: vertically",
     .no_default = 1},
    {0}};
static const sd_input_def rotate_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "rotation", .type = SD_T_COMBO, .options = rotations, .def_str = "none", .no_default = 1},
    {0}};

const sd_node_def sd_node_LatentFlip = {
    .version = 1,
    .class_type = "LatentFlip",
    .python_module = "nodes",
    .display_name = "Flip Latent",
    .category = "latent/transform",
    .help = "Flips latents vertically (x-axis) or horizontally (y-axis).",
    .inputs = flip_inputs,
    .outputs = latent_out,
    .run = flip_run,
};

const sd_node_def sd_node_LatentRotate = {
    .version = 1,
    .class_type = "LatentRotate",
    .python_module = "nodes",
    .display_name = "Rotate Latent",
    .category = "latent/transform",
    .help = "Rotates latents by 90, 180 or 270 degrees (torch.rot90 over dims [3, 2]).",
    .inputs = rotate_inputs,
    .outputs = latent_out,
    .run = rotate_run,
};
