/* load.c - LoadImage and LoadImageMask: PNG files from the input directory,
 * converted the way ComfyUI's Pillow code converts them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "formats/png.h"
#include "image.h"

static const char *const png_exts[] = {".png", NULL};

static sd_status list_input_images(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_env_list_files(env, "input", png_exts, out, err);
}

/* Pillow decodes 16-bit RGB(A)/LA PNGs to 8 bits by keeping the high byte;
 * ComfyUI then divides by 255. We do the same for every 16-bit file so
 * that results do not depend on the bit depth. */
static float to_pil8(float v, int bit_depth) {
    if (bit_depth != 16) return v;
    unsigned s = (unsigned)lrintf(v * 65535.0f);
    return (float)(s >> 8) / 255.0f;
}

static sd_status read_input_png(const sd_node_ctx *ctx, const char *name, sd_png_layout layout,
                                sd_tensor **img, sd_png_info *info, sd_error *err) {
    char *path = NULL;
    sd_status rc = sd_env_resolve(ctx->env, "input", name, &path, err);
    if (rc) { sd_error_at(err, NULL, NULL, "image"); return rc; }
    rc = sd_png_read_limited(path, layout, ctx->env->max_image_pixels, img, info, err);
    free(path);
    if (rc) sd_error_at(err, NULL, NULL, "image");
    return rc;
}

/* ---- LoadImage -------------------------------------------------------------------- */

static sd_status load_image_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    sd_tensor *raw = NULL;
    sd_png_info info;
    sd_status rc = read_input_png(ctx, name, SD_PNG_KEEP, &raw, &info, err);
    if (rc) return rc;
    int64_t h = raw->shape[0], w = raw->shape[1], cs = raw->shape[2];
    /* ComfyUI takes the mask from Pillow's 'A' band (LA and RGBA files) or,
     * for palette files with tRNS, from convert('RGBA'); gray or RGB files
     * with a tRNS colour key get no mask. */
    int has_alpha_band = info.color_type == 4 || info.color_type == 6 ||
                         (info.color_type == 3 && info.has_alpha);
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, h, w, 3);
    sd_tensor *mask = has_alpha_band ? sd_tensor_new4(SD_F32, 3, 1, h, w, 0)
                                     : sd_tensor_new4(SD_F32, 3, 1, 64, 64, 0);
    if (!img || !mask) {
        sd_tensor_unref(raw); sd_tensor_unref(img); sd_tensor_unref(mask);
        return sd_error_set(err, SD_ERR_NOMEM, "LoadImage: out of memory");
    }
    const float *s = sd_tensor_f32(raw);
    float *d = sd_tensor_f32(img), *m = sd_tensor_f32(mask);
    for (int64_t i = 0; i < h * w; i++) {
        const float *px = s + i * cs;
        for (int c = 0; c < 3; c++) {
            float v = cs <= 2 ? px[0] : px[c]; /* gray replicated; alpha/tRNS dropped */
            d[i * 3 + c] = to_pil8(v, info.bit_depth);
        }
        if (has_alpha_band) m[i] = 1.0f - to_pil8(px[cs - 1], info.bit_depth);
    }
    sd_tensor_unref(raw);
    out[0] = sd_value_tensor(img);
    out[1] = sd_value_tensor(mask);
    sd_tensor_unref(img);
    sd_tensor_unref(mask);
    if (!out[0] || !out[1]) return sd_error_set(err, SD_ERR_NOMEM, "LoadImage: out of memory");
    return SD_OK;
}

static const sd_input_def load_image_inputs[] = {
    {.name = "image", .type = SD_T_COMBO, .options_fn = list_input_images, .file_folder = "input",
     .image_upload = 1},
    {0}};
static const sd_output_def load_image_outputs[] = {{"IMAGE", "IMAGE"}, {"MASK", "MASK"}, {0}};

const sd_node_def sd_node_LoadImage = {
    .version = 1,
    .class_type = "LoadImage",
    .python_module = "nodes",
    .display_name = "Load Image",
    .category = "image",
    .help = "Loads a PNG from the input directory as an IMAGE and its alpha as a MASK "
            "(1 - alpha; 64x64 zeros when the file has no alpha channel).",
    .inputs = load_image_inputs,
    .outputs = load_image_outputs,
    .run = load_image_run,
};

/* ---- LoadImageMask -------------------------------------------------------------------- */

static const char *const mask_channels[] = {"alpha", "red", "green", "blue", NULL};

static sd_status load_image_mask_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                     sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    const char *channel = sd_value_as_string(in[1]);
    int ch = -1;
    if (channel && strcmp(channel, "alpha") == 0) ch = 3;
    else if (channel && strcmp(channel, "red") == 0) ch = 0;
    else if (channel && strcmp(channel, "green") == 0) ch = 1;
    else if (channel && strcmp(channel, "blue") == 0) ch = 2;
    if (ch < 0) {
        sd_error_set(err, SD_ERR_INVALID, "LoadImageMask: unknown channel '%s'",
                     channel ? channel : "(null)");
        sd_error_at(err, NULL, NULL, "channel");
        return SD_ERR_INVALID;
    }
    /* Pillow's convert("RGBA") turns tRNS transparency into alpha, as the
     * RGBA layout of our reader does. */
    sd_tensor *raw = NULL;
    sd_png_info info;
    sd_status rc = read_input_png(ctx, name, SD_PNG_RGBA, &raw, &info, err);
    if (rc) return rc;
    int64_t h = raw->shape[0], w = raw->shape[1];
    sd_tensor *mask = sd_tensor_new4(SD_F32, 3, 1, h, w, 0);
    if (!mask) { sd_tensor_unref(raw); return sd_error_set(err, SD_ERR_NOMEM, "LoadImageMask: out of memory"); }
    const float *s = sd_tensor_f32(raw);
    float *m = sd_tensor_f32(mask);
    for (int64_t i = 0; i < h * w; i++) {
        float v = to_pil8(s[i * 4 + ch], info.bit_depth);
        m[i] = ch == 3 ? 1.0f - v : v;
    }
    sd_tensor_unref(raw);
    out[0] = sd_value_tensor(mask);
    sd_tensor_unref(mask);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "LoadImageMask: out of memory");
}

static const sd_input_def load_image_mask_inputs[] = {
    {.name = "image", .type = SD_T_COMBO, .options_fn = list_input_images, .file_folder = "input",
     .image_upload = 1},
    {.name = "channel", .type = SD_T_COMBO, .options = mask_channels, .def_str = "alpha", .no_default = 1},
    {0}};
static const sd_output_def load_image_mask_outputs[] = {{"MASK", "MASK"}, {0}};

const sd_node_def sd_node_LoadImageMask = {
    .version = 1,
    .class_type = "LoadImageMask",
    .python_module = "nodes",
    .display_name = "Load Image (as Mask)",
    .category = "mask",
    .help = "Loads one channel of a PNG from the input directory as a MASK "
            "(alpha is inverted: 1 - alpha).",
    .inputs = load_image_mask_inputs,
    .outputs = load_image_mask_outputs,
    .run = load_image_mask_run,
};
