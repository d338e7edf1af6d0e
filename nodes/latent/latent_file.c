/* latent_file.c - SaveLatent and LoadLatent: ComfyUI ".latent" files, i.e.
 * safetensors with "latent_tensor" and an empty "latent_format_version_0"
 * marker (files without the marker predate it and hold latents scaled by
 * 0.18215). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "formats/safetensors.h"
#include "latent.h"
#include "nodes/image/image.h"
#include "nodes/image/savepath.h"

/* ---- SaveLatent ---------------------------------------------------------------------- */

static sd_status save_latent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    (void)out;
    sd_tensor *x;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &x, err);
    if (rc) return rc;
    const char *prefix = sd_value_as_string(in[1]);
    sd_savepath sp;
    rc = sd_savepath_begin(ctx->env->output_dir, prefix ? prefix : "latents/ComfyUI", 0, 0, &sp, err);
    if (rc) { sd_error_at(err, NULL, NULL, "filename_prefix"); return rc; }
    sd_savepath_claim_names(&sp, ctx->env, "output");
    sd_save_meta meta;
    rc = sd_save_meta_build(ctx, 1, &meta, err);
    if (rc) { sd_savepath_free(&sp); return rc; }

    char file[1024], path[8192];
    int64_t zero = 0;
    sd_tensor *marker = sd_tensor_new(SD_F32, 1, &zero);
    sd_st_writer *w = sd_st_writer_new();
    if (!marker || !w) rc = sd_error_set(err, SD_ERR_NOMEM, "SaveLatent: out of memory");
    if (!rc) rc = sd_st_writer_add(w, "latent_tensor", x, err);
    if (!rc) rc = sd_st_writer_add(w, "latent_format_version_0", marker, err);
    for (size_t i = 0; !rc && i < meta.n; i++) rc = sd_st_writer_meta(w, meta.keys[i], meta.values[i], err);
    /* Exclusive creation, as SaveImage (core/outfile.h). */
    void *bytes = NULL;
    size_t size = 0;
    sd_outfile of;
    memset(&of, 0, sizeof of);
    if (!rc) rc = sd_st_writer_to_memory(w, &bytes, &size, err);
    if (!rc) rc = sd_outfile_create(&sp.dir, &of, err);
    if (!rc && fwrite(bytes, 1, size, of.f) != size)
        rc = sd_error_set(err, SD_ERR_IO, "%s: write failed", sp.folder);
    if (!rc) rc = sd_savepath_publish(&sp, &of, 0, "latent", file, sizeof file, err);
    sd_outfile_discard(&of);
    free(bytes);
    if (!rc) snprintf(path, sizeof path, "%s/%s", sp.folder, file);
    if (!rc) rc = sd_save_ui_add(&ctx->ui, "latents", file, sp.subfolder, "output", path, of.sha256, err);
    sd_st_writer_free(w);
    sd_tensor_unref(marker);
    sd_save_meta_free(&meta);
    sd_savepath_free(&sp);
    return rc;
}

static const sd_input_def save_latent_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "latents/ComfyUI"},
    {0}};
static const sd_output_def no_outputs[] = {{0}};

const sd_node_def sd_node_SaveLatent = {
    .version = 1,
    .class_type = "SaveLatent",
    .python_module = "nodes",
    .hidden = SD_STRINGS("prompt", "extra_pnginfo"),
    .display_name = "SaveLatent",
    .category = "_for_testing",
    .help = "Saves latents to the output directory as <prefix>_<counter:05>_.latent "
            "(safetensors, ComfyUI format, workflow in the metadata).",
    .inputs = save_latent_inputs,
    .outputs = no_outputs,
    .flags = SD_NODE_OUTPUT,
    .run = save_latent_run,
};

/* ---- LoadLatent ----------------------------------------------------------------------- */

static const char *const latent_exts[] = {".latent", NULL};

static sd_status list_input_latents(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_env_list_files(env, "input", latent_exts, out, err);
}

static sd_status load_latent_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    char *path = NULL;
    sd_status rc = sd_env_resolve(ctx->env, "input", name, &path, err);
    if (rc) { sd_error_at(err, NULL, NULL, "latent"); return rc; }
    sd_st_file *f = NULL;
    rc = sd_st_open(path, &f, err);
    if (rc) { free(path); sd_error_at(err, NULL, NULL, "latent"); return rc; }
    sd_tensor *t = sd_st_tensor_f32(f, "latent_tensor", err);
    int versioned = sd_st_find(f, "latent_format_version_0") != NULL;
    sd_st_close(f);
    if (!t) { sd_error_prefix(err, "%s", path); free(path); return err ? err->code : SD_ERR_FORMAT; }
    if (t->ndim != 4) {
        char sh[96];
        sd_error_set(err, SD_ERR_FORMAT, "%s: latent_tensor has shape %s, expected [B, C, H, W]",
                     path, sd_tensor_shape_str(t, sh, sizeof sh));
        sd_tensor_unref(t);
        free(path);
        return SD_ERR_FORMAT;
    }
    free(path);
    /* Own copy: never hand out views of a file that may change on disk. */
    sd_tensor *c = sd_tensor_clone(t);
    sd_tensor_unref(t);
    if (!c) return sd_error_set(err, SD_ERR_NOMEM, "LoadLatent: out of memory");
    if (!versioned) {
        float mul = (float)(1.0 / 0.18215);
        float *d = sd_tensor_f32(c);
        for (int64_t i = 0, n = sd_tensor_numel(c); i < n; i++) d[i] *= mul;
    }
    sd_value *dict = sd_value_dict();
    sd_value *tv = sd_value_tensor(c);
    sd_tensor_unref(c);
    if (!dict || !tv || sd_value_dict_set(dict, "samples", tv)) {
        if (!dict) sd_value_unref(tv);
        sd_value_unref(dict);
        return sd_error_set(err, SD_ERR_NOMEM, "LoadLatent: out of memory");
    }
    out[0] = dict;
    return SD_OK;
}

static const sd_input_def load_latent_inputs[] = {
    {.name = "latent", .type = SD_T_COMBO, .options_fn = list_input_latents, .file_folder = "input"},
    {0}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};

const sd_node_def sd_node_LoadLatent = {
    .version = 1,
    .class_type = "LoadLatent",
    .python_module = "nodes",
    .display_name = "LoadLatent",
    .category = "_for_testing",
    .help = "Loads a .latent file from the input directory.",
    .inputs = load_latent_inputs,
    .outputs = latent_out,
    .run = load_latent_run,
};
