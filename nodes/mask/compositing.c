/* compositing.c - JoinImageWithAlpha, SplitImageWithAlpha and
 * PorterDuffImageComposite (comfy_extras/nodes_compositing.py). */
#include <string.h>

#include "mask.h"
#include "models/image/maskops.h"
#include "nodes/image/image.h"

/* ---- JoinImageWithAlpha -------------------------------------------------------------- */

static sd_status join_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *img, *m;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    if ((rc = sd_nodes_in_mask(in, 1, "alpha", &m, err))) return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    /* resize_mask: every alpha bilinearly to the image's size */
    int64_t s4[4] = {m->shape[0], 1, m->shape[1], m->shape[2]};
    sd_tensor *m4 = sd_tensor_reshape(m, 4, s4), *a = NULL;
    sd_tensor_unref(m);
    if (!m4) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    rc = sd_imageops_upscale(m4, W, H, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &a, err);
    int64_t na = m4->shape[0];
    sd_tensor_unref(m4);
    if (rc) { sd_error_at(err, NULL, NULL, "alpha"); return rc; }
    int64_t n = B < na ? B : na, keep = C < 3 ? C : 3;
    int64_t shape[4] = {n, H, W, keep + 1};
    rc = sd_nodes_mem_check(ctx, "image", "the image", 4, shape, err);
    sd_tensor *o = rc ? NULL : sd_tensor_new(SD_F32, 4, shape);
    if (!rc && !o) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (rc) { sd_tensor_unref(a); return rc; }
    const float *s = sd_tensor_f32(img), *av = sd_tensor_f32(a);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0; i < n * H * W; i++) {
        for (int64_t k = 0; k < keep; k++) d[i * (keep + 1) + k] = s[i * C + k];
        d[i * (keep + 1) + keep] = 1.0f - av[i];
    }
    sd_tensor_unref(a);
    return sd_nodes_set_tensor(&out[0], o, err);
}

static const sd_input_def join_inputs[] = {{.name = "image", .type = "IMAGE"}, {.name = "alpha", .type = "MASK"}, {0}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {0}};

const sd_node_def sd_node_JoinImageWithAlpha = {
    .version = 1, .class_type = "JoinImageWithAlpha", .python_module = "comfy_extras.nodes_compositing",
    .flags = SD_NODE_V3, .display_name = "Join Image with Alpha",
    .category = "mask/compositing",
    .help = "The image's first three channels plus 1 - alpha (resized to the image) as a fourth.",
    .inputs = join_inputs, .outputs = image_out, .run = join_run};

/* ---- SplitImageWithAlpha --------------------------------------------------------------- */

static sd_status split_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *img;
    sd_status rc = sd_nodes_in_tensor(in, 0, "image", 4, &img, err);
    if (rc) return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t keep = C < 3 ? C : 3;
    sd_tensor *o = sd_tensor_new4(SD_F32, 4, B, H, W, keep), *m = sd_tensor_new4(SD_F32, 3, B, H, W, 0);
    if (!o || !m) { sd_tensor_unref(o); sd_tensor_unref(m); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    const float *s = sd_tensor_f32(img);
    float *d = sd_tensor_f32(o), *mv = sd_tensor_f32(m);
    for (int64_t i = 0; i < B * H * W; i++) {
        for (int64_t k = 0; k < keep; k++) d[i * keep + k] = s[i * C + k];
        mv[i] = 1.0f - (C > 3 ? s[i * C + 3] : 1.0f);
    }
    rc = sd_nodes_set_tensor(&out[0], o, err);
    if (rc) { sd_tensor_unref(m); return rc; }
    return sd_nodes_set_tensor(&out[1], m, err);
}

static const sd_input_def split_inputs[] = {{.name = "image", .type = "IMAGE"}, {0}};
static const sd_output_def image_mask_out[] = {{"IMAGE", "IMAGE"}, {"MASK", "MASK"}, {0}};

const sd_node_def sd_node_SplitImageWithAlpha = {
    .version = 1, .class_type = "SplitImageWithAlpha", .python_module = "comfy_extras.nodes_compositing",
    .flags = SD_NODE_V3, .display_name = "Split Image with Alpha",
    .category = "mask/compositing",
    .help = "The first three channels, and 1 - the fourth as a mask (0 without one).",
    .inputs = split_inputs, .outputs = image_mask_out, .run = split_run};

/* ---- PorterDuffImageComposite ------------------------------------------------------------ */

/* common_upscale(item, W, H, "bicubic", "center") of one [h, w, C] plane
 * (nhwc) or one [h, w] mask into a new tensor with the same layout. */
static sd_status bicubic_item(const float *p, int64_t h, int64_t w, int64_t c, int nhwc, int64_t W, int64_t H,
                              sd_tensor **out, sd_error *err) {
    int64_t s[4] = {1, nhwc ? h : 1, nhwc ? w : h, nhwc ? c : w};
    sd_tensor *t = sd_tensor_new(SD_F32, 4, s);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy(t->data, p, t->nbytes);
    sd_status rc = nhwc ? sd_imageops_upscale_nhwc(t, W, H, SD_UPSCALE_BICUBIC, SD_CROP_CENTER, out, err)
                        : sd_imageops_upscale(t, W, H, SD_UPSCALE_BICUBIC, SD_CROP_CENTER, out, err);
    sd_tensor_unref(t);
    return rc;
}

static sd_status porter_duff_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *src, *dst, *sm = NULL, *dm = NULL;
    sd_status rc = sd_nodes_in_tensor(in, 0, "source", 4, &src, err);
    if (!rc) rc = sd_nodes_in_tensor(in, 2, "destination", 4, &dst, err);
    if (!rc) rc = sd_nodes_in_mask(in, 1, "source_alpha", &sm, err);
    if (!rc) rc = sd_nodes_in_mask(in, 3, "destination_alpha", &dm, err);
    sd_porter_duff mode = SD_PD_DST;
    const char *mname = sd_value_as_string(in[4]);
    if (!rc && sd_porter_duff_parse(mname, &mode))
        rc = sd_nodes_bad_input(err, "mode", "unknown mode '%s'", mname ? mname : "");
    if (!rc && src->shape[3] != dst->shape[3])
        rc = sd_nodes_bad_input(err, "source", "the source has %lld channels, the destination %lld",
                                (long long)src->shape[3], (long long)dst->shape[3]);
    int64_t n = src->shape[0];
    if (!rc) {
        if (dst->shape[0] < n) n = dst->shape[0];
        if (sm->shape[0] < n) n = sm->shape[0];
        if (dm->shape[0] < n) n = dm->shape[0];
    }
    int64_t H = rc ? 0 : dst->shape[1], W = rc ? 0 : dst->shape[2], C = rc ? 0 : dst->shape[3];
    sd_tensor *oi = NULL, *om = NULL;
    if (!rc) {
        int64_t shape[4] = {n, H, W, C};
        rc = sd_nodes_mem_check(ctx, "destination", "the image", 4, shape, err);
        if (!rc) {
            oi = sd_tensor_new(SD_F32, 4, shape);
            om = sd_tensor_new4(SD_F32, 3, n, H, W, 0);
            if (!oi || !om) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        int64_t sh = src->shape[1], sw = src->shape[2], ah = sm->shape[1], aw = sm->shape[2];
        int64_t dh = dm->shape[1], dw = dm->shape[2];
        const float *sp = sd_tensor_f32(src) + i * sh * sw * C, *dp = sd_tensor_f32(dst) + i * H * W * C;
        const float *sap = sd_tensor_f32(sm) + i * ah * aw, *dap = sd_tensor_f32(dm) + i * dh * dw;
        sd_tensor *da = NULL, *si = NULL, *sa = NULL;
        if (dh != H || dw != W) {
            rc = bicubic_item(dap, dh, dw, 1, 0, W, H, &da, err);
            if (!rc) dap = sd_tensor_f32(da), dh = H, dw = W;
        }
        if (!rc && (sh != H || sw != W)) {
            rc = bicubic_item(sp, sh, sw, C, 1, W, H, &si, err);
            if (!rc) sp = sd_tensor_f32(si);
        }
        if (!rc && (ah != dh || aw != dw)) {
            rc = bicubic_item(sap, ah, aw, 1, 0, dw, dh, &sa, err);
            if (!rc) sap = sd_tensor_f32(sa);
        }
        if (!rc)
            sd_porter_duff_composite(sp, sap, dp, dap, H * W, C, mode, sd_tensor_f32(oi) + i * H * W * C,
                                     sd_tensor_f32(om) + i * H * W);
        sd_tensor_unref(da);
        sd_tensor_unref(si);
        sd_tensor_unref(sa);
        if (!rc) rc = sd_node_progress(ctx, i + 1, n, err);
    }
    sd_tensor_unref(sm);
    sd_tensor_unref(dm);
    if (!rc) rc = sd_nodes_set_tensor(&out[0], oi, err), oi = NULL;
    if (!rc) rc = sd_nodes_set_tensor(&out[1], om, err), om = NULL;
    sd_tensor_unref(oi);
    sd_tensor_unref(om);
    return rc;
}

static const sd_input_def porter_duff_inputs[] = {
    {.name = "source", .type = "IMAGE"},
    {.name = "source_alpha", .type = "MASK"},
    {.name = "destination", .type = "IMAGE"},
    {.name = "destination_alpha", .type = "MASK"},
    {.name = "mode", .type = SD_T_COMBO, .options = sd_porter_duff_names, .def_str = "DST"},
    {0}};

const sd_node_def sd_node_PorterDuffImageComposite = {
    .version = 1, .class_type = "PorterDuffImageComposite", .python_module = "comfy_extras.nodes_compositing",
    .flags = SD_NODE_V3, .display_name = "Porter-Duff Image Composite",
    .category = "mask/compositing",
    .help = "Composites source over destination with one of the Porter-Duff operators; the "
            "alphas are ComfyUI masks (1 - alpha). Mismatched sizes are resized to the "
            "destination (bicubic, centre crop).",
    .inputs = porter_duff_inputs, .outputs = image_mask_out, .run = porter_duff_run};
