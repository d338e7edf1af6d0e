/* preview.c - MaskPreview: the masks previewed as grey images. */
#include "mask.h"
#include "nodes/image/image.h"

static sd_status mask_preview_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_tensor *m;
    sd_status rc = sd_nodes_in_mask(in, 0, "mask", &m, err);
    if (rc) return rc;
    /* reshape((-1, 1, H, W)).movedim(1, -1).expand(-1, -1, -1, 3) */
    int64_t shape[4] = {m->shape[0], m->shape[1], m->shape[2], 3};
    rc = sd_nodes_mem_check(ctx, "mask", "the preview image", 4, shape, err);
    sd_tensor *img = rc ? NULL : sd_tensor_new(SD_F32, 4, shape);
    if (!rc && !img) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc) {
        const float *s = sd_tensor_f32(m);
        float *d = sd_tensor_f32(img);
        for (int64_t i = 0, n = shape[0] * shape[1] * shape[2]; i < n; i++) d[i * 3] = d[i * 3 + 1] = d[i * 3 + 2] = s[i];
        rc = sd_nodes_preview_images(ctx, img, err);
    }
    /* UI.PreviewImage's result also says the images are not an animation */
    if (!rc) {
        sd_value *anim = sd_value_list();
        if (!anim || sd_value_list_append(anim, sd_value_bool(0))) {
            sd_value_unref(anim);
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        } else if (sd_value_dict_set(ctx->ui, "animated", anim)) {
            rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    sd_tensor_unref(img);
    sd_tensor_unref(m);
    return rc;
}

static const sd_input_def mask_preview_inputs[] = {{.name = "mask", .type = "MASK"}, {0}};
static const sd_output_def no_outputs[] = {{0}};

const sd_node_def sd_node_MaskPreview = {
    .version = 1, .class_type = "MaskPreview", .python_module = "comfy_extras.nodes_mask",
    .hidden = SD_STRINGS("prompt", "extra_pnginfo"),
    .description = "Saves the input images to your ComfyUI output directory.", .display_name = "Preview Mask",
    .category = "mask",
    .help = "Previews the masks as grey images (PNGs in the temporary directory).",
    .inputs = mask_preview_inputs, .outputs = no_outputs, .flags = SD_NODE_OUTPUT | SD_NODE_V3,
    .run = mask_preview_run};
