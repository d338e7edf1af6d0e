/* upscale_nodes.c - UpscaleModelLoader and ImageUpscaleWithModel. */
#include "nodes/upscale/upscale_nodes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/membudget.h"
#include "models/checkpoint/model_paths.h"

static void free_upscale(void *p) { sd_upscale_free(p); }

const sd_handle_type sd_handle_upscale_model = {"UPSCALE_MODEL", free_upscale};

/* ---- UpscaleModelLoader --------------------------------------------------------- */

static sd_status list_upscale_models(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_UPSCALE_MODELS, out, err);
}

static sd_status loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                            sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    char *path = NULL;
    sd_upscale *m = NULL;
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_UPSCALE_MODELS, name ? name : "",
                                          &path, err);
    if (!rc && !ctx->env->backend)
        rc = sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
    if (!rc) rc = sd_upscale_load_file((sd_backend *)ctx->env->backend, path, &m, err);
    free(path);
    if (rc) {
        sd_error_at(err, NULL, NULL, "model_name");
        return rc;
    }
    const sd_upscale_config *c = sd_upscale_get_config(m);
    sd_node_log(ctx, SD_LOG_INFO, "upscale model %s: %s x%d, %d features, %d %s, %lld parameters",
                name, c->layout, c->scale, c->num_feat, c->num_block,
                c->arch == SD_UPSCALE_ESRGAN ? "RRDB blocks" : "body convs",
                (long long)c->n_params);
    out[0] = sd_value_handle(&sd_handle_upscale_model, m);
    if (!out[0]) {
        sd_upscale_free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

static const sd_input_def loader_inputs[] = {
    {.name = "model_name", .type = SD_T_COMBO, .options_fn = list_upscale_models,
     .file_folder = SD_FOLDER_UPSCALE_MODELS, .file_probe = sd_upscale_probe_file},
    {0}};
static const sd_output_def loader_outputs[] = {{"UPSCALE_MODEL", "UPSCALE_MODEL"}, {0}};

static const sd_node_def node_loader = {
    .version = 1,
    .class_type = "UpscaleModelLoader", .python_module = "comfy_extras.nodes_upscale_model", .flags = SD_NODE_V3,
    .display_name = "Load Upscale Model",
    .category = "loaders",
    .help = "Loads an image upscale model from models/upscale_models (.safetensors or "
            ".pth): ESRGAN/RRDBNet in its old and new key layouts, Real-ESRGAN "
            "pixel-unshuffle variants, and the compact SRVGGNet. Other architectures are "
            "refused.",
    .inputs = loader_inputs,
    .outputs = loader_outputs,
    .run = loader_run,
};

/* ---- ImageUpscaleWithModel ---------------------------------------------------------- */

static sd_status tile_progress(void *user, int64_t done, int64_t total, sd_error *err) {
    return sd_node_progress(user, done, total, err);
}

static sd_status upscale_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                             sd_error *err) {
    sd_upscale *m = sd_value_as_handle(in[0], &sd_handle_upscale_model);
    if (!m) {
        sd_error_set(err, SD_ERR_INVALID, "not an UPSCALE_MODEL");
        sd_error_at(err, NULL, NULL, "upscale_model");
        return SD_ERR_INVALID;
    }
    sd_tensor *image = sd_value_as_tensor(in[1]);
    const sd_upscale_config *c = sd_upscale_get_config(m);
    if (!image || image->dtype != SD_F32 || image->ndim != 4 || image->shape[3] < c->in_ch) {
        sd_error_set(err, SD_ERR_INVALID, "image must be an IMAGE [B, H, W, C] with at least %d "
                     "channels for this model", c->in_ch);
        sd_error_at(err, NULL, NULL, "image");
        return SD_ERR_INVALID;
    }
    /* the result twice (NCHW, then IMAGE) and the two blending buffers */
    int64_t N = image->shape[0], OH = image->shape[1] * c->scale, OW = image->shape[2] * c->scale;
    int64_t shape[4] = {N + 1, OH, OW, c->out_ch};
    uint64_t bytes = sd_mem_tensor_bytes(4, shape, sizeof(float));
    char what[160];
    snprintf(what, sizeof what, "the upscaled image [%lld, %lld, %lld, %d] float32 (x2) and its "
             "blending buffers", (long long)N, (long long)OH, (long long)OW, c->out_ch);
    sd_status rc = sd_mem_check(ctx, "image", bytes == UINT64_MAX ? bytes : bytes * 2, what, err);
    if (rc) return rc;
    /* The tile's activations under the budget: halve it first, as the
     * out-of-memory back-off would (on Linux an over-large allocation is
     * rarely refused: the process is killed later instead). */
    int tile = SD_UPSCALE_TILE;
    uint64_t limit = ctx->env ? ctx->env->max_memory : 0, need = 0;
    for (;;) {
        int64_t th = image->shape[1] < tile ? image->shape[1] : tile;
        int64_t tw = image->shape[2] < tile ? image->shape[2] : tile;
        need = sd_upscale_forward_bytes(m, th, tw);
        if (!limit || need <= limit || tile / 2 < SD_UPSCALE_MIN_TILE) break;
        tile /= 2;
    }
    snprintf(what, sizeof what, "the model's activations for one %dx%d tile (an estimate)",
             tile, tile);
    rc = sd_mem_check(ctx, "image", need, what, err);
    if (rc) return rc;
    if (tile != SD_UPSCALE_TILE)
        sd_node_log(ctx, SD_LOG_INFO, "upscaling in %d-pixel tiles to stay within --max-memory",
                    tile);
    sd_tensor *res = NULL;
    int used = 0;
    rc = sd_upscale_image(m, image, tile, SD_UPSCALE_OVERLAP, SD_UPSCALE_MIN_TILE, tile_progress,
                          ctx, &res, &used, err);
    if (rc) {
        if (rc == SD_ERR_NOMEM)
            sd_error_prefix(err, "out of memory even with %d-pixel tiles", SD_UPSCALE_MIN_TILE);
        if (rc != SD_ERR_CANCELLED) sd_error_at(err, NULL, NULL, "image");
        return rc;
    }
    if (used != tile)
        sd_node_log(ctx, SD_LOG_WARN, "out of memory with %d-pixel tiles: upscaled with %d", tile,
                    used);
    out[0] = sd_value_tensor(res);
    sd_tensor_unref(res);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def upscale_inputs[] = {
    {.name = "upscale_model", .type = "UPSCALE_MODEL"},
    {.name = "image", .type = "IMAGE"},
    {0}};
static const sd_output_def upscale_outputs[] = {{"IMAGE", "IMAGE"}, {0}};

static const sd_node_def node_upscale = {
    .version = 1,
    .class_type = "ImageUpscaleWithModel", .python_module = "comfy_extras.nodes_upscale_model", .flags = SD_NODE_V3,
    .display_name = "Upscale Image (using Model)",
    .category = "image/upscaling",
    .help = "Upscales an image with an upscale model, in 512-pixel tiles overlapping by "
            "32 blended linearly (halved down to 128 when memory runs out); the result is "
            "clamped to [0, 1].",
    .inputs = upscale_inputs,
    .outputs = upscale_outputs,
    .run = upscale_run,
};

const sd_node_def *const sd_nodes_upscale[] = {&node_loader, &node_upscale, NULL};
