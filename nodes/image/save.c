/* save.c - SaveImage and PreviewImage: one PNG per batch item, ComfyUI file
 * naming, the workflow embedded as text chunks, exclusive atomic creation
 * (core/outfile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "formats/png.h"
#include "image.h"
#include "savepath.h"

/* The batch item views below borrow the input's storage. */
static void keep_storage(void *owner) { (void)owner; }

/* Writes every image of `images` under root/prefix and records them in
 * ctx->ui under "images". */
static sd_status save_images(sd_node_ctx *ctx, const sd_tensor *images, const char *root,
                             const char *prefix, const char *type, int compress,
                             sd_error *err) {
    int64_t n = images->shape[0], h = images->shape[1], w = images->shape[2], c = images->shape[3];
    if (c != 1 && c != 3 && c != 4) {
        sd_error_set(err, SD_ERR_INVALID, "input 'images': cannot save %lld channels as PNG",
                     (long long)c);
        sd_error_at(err, NULL, NULL, "images");
        return SD_ERR_INVALID;
    }
    sd_savepath sp;
    /* get_save_image_path(prefix, dir, images[0].shape[1], images[0].shape[0]) */
    sd_status rc = sd_savepath_begin(root, prefix, w, h, &sp, err);
    if (rc) { sd_error_at(err, NULL, NULL, "filename_prefix"); return rc; }
    sd_savepath_claim_names(&sp, ctx->env, type);
    sd_save_meta meta;
    rc = sd_save_meta_build(ctx, 0, &meta, err);
    if (rc) { sd_savepath_free(&sp); return rc; }
    sd_png_text *texts = meta.n ? calloc(meta.n, sizeof *texts) : NULL;
    if (meta.n && !texts) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < meta.n; i++) texts[i] = (sd_png_text){meta.keys[i], meta.values[i]};

    int64_t shape[3] = {h, w, c};
    size_t item = (size_t)(h * w * c);
    if (!rc && sp.stale_removed)
        sd_node_log(ctx, SD_LOG_WARN, "removed %d unfinished file(s) of killed runs from %s",
                    sp.stale_removed, sp.folder);
    for (int64_t b = 0; !rc && b < n; b++) {
        char file[1024], path[8192];
        sd_tensor *one = sd_tensor_new_borrowed(SD_F32, 3, shape, sd_tensor_f32(images) + b * item,
                                                keep_storage, NULL);
        if (!one) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); break; }
        /* Written under a temporary name, then published under the first
         * free counter: a concurrent run never loses or swaps an image. */
        sd_outfile of;
        rc = sd_outfile_create(&sp.dir, &of, err);
        if (!rc) {
            sd_savepath_file(&sp, b, sp.counter, "png", file, sizeof file);
            snprintf(path, sizeof path, "%s/%s", sp.folder, file);
            rc = sd_png_write_stream(of.f, path, one, texts, meta.n, compress, err);
        }
        if (!rc) rc = sd_savepath_publish(&sp, &of, b, "png", file, sizeof file, err);
        sd_outfile_discard(&of);
        sd_tensor_unref(one);
        if (!rc) snprintf(path, sizeof path, "%s/%s", sp.folder, file);
        if (!rc) rc = sd_save_ui_add(&ctx->ui, "images", file, sp.subfolder, type, path, of.sha256, err);
        if (!rc) rc = sd_node_progress(ctx, b + 1, n, err);
    }
    free(texts);
    sd_save_meta_free(&meta);
    sd_savepath_free(&sp);
    return rc;
}

static sd_status save_image_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                sd_error *err) {
    (void)out;
    sd_tensor *images;
    sd_status rc = sd_nodes_in_tensor(in, 0, "images", 4, &images, err);
    if (rc) return rc;
    const char *prefix = sd_value_as_string(in[1]);
    return save_images(ctx, images, ctx->env->output_dir, prefix ? prefix : "ComfyUI", "output",
                       4, err);
}

static const sd_input_def save_image_inputs[] = {
    {.name = "images", .type = "IMAGE", .tooltip = "The images to save."},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "ComfyUI",
     .tooltip = "The prefix for the file to save. This may include formatting information such as %date:yyyy-MM-dd% "
                "or %Empty Latent Image.width% to include values from nodes."},
    {0}};
static const sd_output_def no_outputs[] = {{0}};

const sd_node_def sd_node_SaveImage = {
    .version = 1,
    .class_type = "SaveImage",
    .python_module = "nodes",
    .hidden = SD_STRINGS("prompt", "extra_pnginfo"),
    .description = "Saves the input images to your ComfyUI output directory.",
    .display_name = "Save Image",
    .category = "image",
    .help = "Saves the input images to the output directory as "
            "<prefix>_<counter:05>_.png with the workflow embedded.",
    .inputs = save_image_inputs,
    .outputs = no_outputs,
    .flags = SD_NODE_OUTPUT,
    .run = save_image_run,
};

/* PreviewImage: "ComfyUI_temp_<5 random letters>" in the temp directory,
 * compress level 1, type "temp". */
sd_status sd_nodes_preview_images(sd_node_ctx *ctx, const sd_tensor *images, sd_error *err) {
    static const char letters[] = "abcdefghijklmnopqrstupvxyz"; /* ComfyUI's alphabet */
    unsigned char rnd[5];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        unsigned long long seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 16);
        for (int i = 0; i < 5; i++) { seed = seed * 6364136223846793005ULL + 1; rnd[i] = (unsigned char)(seed >> 33); }
    }
    char prefix[64] = "ComfyUI_temp_";
    size_t l = strlen(prefix);
    for (int i = 0; i < 5; i++) prefix[l + i] = letters[rnd[i] % 26];
    prefix[l + 5] = 0;
    return save_images(ctx, images, ctx->env->temp_dir, prefix, "temp", 1, err);
}

static sd_status preview_image_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                   sd_error *err) {
    (void)out;
    sd_tensor *images;
    sd_status rc = sd_nodes_in_tensor(in, 0, "images", 4, &images, err);
    if (rc) return rc;
    return sd_nodes_preview_images(ctx, images, err);
}

static const sd_input_def preview_image_inputs[] = {{.name = "images", .type = "IMAGE"}, {0}};

/* SaveImageWebsocket (ComfyUI's custom_nodes/websocket_image_save.py): each
 * image of the batch goes to the front end as it is (a server sends it as a
 * PNG preview frame to the prompt's client), nothing is written. Progress
 * i of N before image i, as its ProgressBar.update_absolute(i, N, image). */
static sd_status save_image_ws_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_tensor *images;
    sd_status rc = sd_nodes_in_tensor(in, 0, "images", 4, &images, err);
    if (rc) return rc;
    int64_t n = images->shape[0], h = images->shape[1], w = images->shape[2], c = images->shape[3];
    size_t per = (size_t)(h * w * c);
    for (int64_t i = 0; i < n; i++) {
        if ((rc = sd_node_progress(ctx, i, n, err))) return rc;
        int64_t shape[3] = {h, w, c};
        sd_tensor *one = sd_tensor_new(SD_F32, 3, shape);
        if (!one) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        memcpy(one->data, (const float *)images->data + (size_t)i * per, per * sizeof(float));
        sd_node_image(ctx, i, n, one);
        sd_tensor_unref(one);
    }
    return SD_OK;
}

const sd_node_def sd_node_SaveImageWebsocket = {
    .version = 1,
    .class_type = "SaveImageWebsocket",
    .python_module = "custom_nodes.websocket_image_save",
    .display_name = "SaveImageWebsocket",
    .category = "api/image",
    .help = "Sends the images to the client over the server's WebSocket as PNG preview frames, "
            "without writing files (no metadata).",
    .inputs = preview_image_inputs,
    .outputs = no_outputs,
    .flags = SD_NODE_OUTPUT | SD_NODE_NOT_IDEMPOTENT, /* ComfyUI: IS_CHANGED = time() */
    .run = save_image_ws_run,
};

const sd_node_def sd_node_PreviewImage = {
    .version = 1,
    .class_type = "PreviewImage",
    .python_module = "nodes",
    .hidden = SD_STRINGS("prompt", "extra_pnginfo"),
    .description = "Saves the input images to your ComfyUI output directory.",
    .display_name = "Preview Image",
    .category = "image",
    .help = "Saves the input images to the temporary directory (fast compression).",
    .inputs = preview_image_inputs,
    .outputs = no_outputs,
    .flags = SD_NODE_OUTPUT,
    .run = preview_image_run,
};
