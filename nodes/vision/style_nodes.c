/* style_nodes.c - StyleModelLoader and StyleModelApply (nodes.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"
#include "models/vision/style_model.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/loaders/loaders.h"
#include "nodes/vision/vision_nodes.h"

static void free_style(void *p) { sd_style_model_free(p); }

const sd_handle_type sd_handle_style_model = {"STYLE_MODEL", free_style};

/* ---- StyleModelLoader ------------------------------------------------------------- */

static sd_status list_style_models(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_STYLE_MODELS, out, err);
}

static sd_status loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                            sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    char *path = NULL;
    sd_style_model *m = NULL;
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_STYLE_MODELS, name ? name : "",
                                          &path, err);
    if (!rc && !ctx->env->backend)
        rc = sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
    if (!rc) rc = sd_style_model_load_file((sd_backend *)ctx->env->backend, path, &m, err);
    free(path);
    if (rc) {
        sd_error_at(err, NULL, NULL, "style_model_name");
        return rc;
    }
    const sd_style_model_config *c = sd_style_model_get_config(m);
    sd_node_log(ctx, SD_LOG_INFO, "style model %s: T2I style adapter, width %d, %d layers, %d "
                "tokens of width %d", name, c->width, c->layers, c->tokens, c->context);
    out[0] = sd_value_handle(&sd_handle_style_model, m);
    if (!out[0]) {
        sd_style_model_free(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

static const sd_input_def loader_inputs[] = {
    {.name = "style_model_name", .type = SD_T_COMBO, .options_fn = list_style_models,
     .file_folder = SD_FOLDER_STYLE_MODELS, .file_probe = sd_style_model_probe_file},
    {0}};
static const sd_output_def loader_outputs[] = {{"STYLE_MODEL", "STYLE_MODEL"}, {0}};

static const sd_node_def node_loader = {
    .version = 1,
    .class_type = "StyleModelLoader",
    .python_module = "nodes",
    .display_name = "Load Style Model",
    .category = "loaders",
    .help = "Loads a T2I-Adapter style model (t2iadapter_style_sd14v1, coadapter-style) from "
            "models/style_models. Flux Redux files are refused (they need a SigLIP vision "
            "encoder).",
    .inputs = loader_inputs,
    .outputs = loader_outputs,
    .run = loader_run,
};

/* ---- StyleModelApply -------------------------------------------------------------- */

/* The entry's new attention_mask (ComfyUI builds it in float16): the old
 * mask's quadrants around n new columns/rows, the new tokens' columns set
 * to bias for the text and reference rows. mask NULL = zeros. */
static sd_status grow_mask(const sd_tensor *mask, int64_t B, int64_t n_txt, int64_t n_ref,
                           int64_t n, float bias, sd_tensor **out, sd_error *err) {
    int64_t old = n_txt + n_ref, size = old + n;
    if (mask && (mask->ndim != 3 || mask->shape[0] != B || mask->shape[1] < old ||
                 mask->shape[2] < old))
        return sd_error_set(err, SD_ERR_INVALID,
                            "the conditioning's attention_mask is not [%lld, >= %lld, >= %lld]",
                            (long long)B, (long long)old, (long long)old);
    sd_tensor *m32 = mask ? sd_tensor_to_dtype(mask, SD_F32) : NULL;
    sd_tensor *g = sd_tensor_new4(SD_F32, 3, B, size, size, 0);
    if ((mask && !m32) || !g) {
        sd_tensor_unref(m32);
        sd_tensor_unref(g);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    float *d = g->data; /* zeroed */
    const float *s = m32 ? m32->data : NULL;
    int64_t sh = mask ? mask->shape[1] : 0, sw = mask ? mask->shape[2] : 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < size; i++) {
            if (i >= n_txt && i < n_txt + n) continue; /* the new tokens' rows stay 0 */
            int64_t si = i < n_txt ? i : i - n;
            for (int64_t j = 0; j < size; j++) {
                float v;
                if (j >= n_txt && j < n_txt + n) v = bias;
                else if (!s) v = 0.0f;
                else v = s[(b * sh + si) * sw + (j < n_txt ? j : j - n)];
                d[(b * size + i) * size + j] = v;
            }
        }
    sd_tensor_unref(m32);
    *out = sd_tensor_to_dtype(g, SD_F16);
    sd_tensor_unref(g);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status apply_entry(sd_value *d, const sd_tensor *style, double strength,
                             int attn_bias, sd_error *err) {
    sd_tensor *txt = sd_value_dict_tensor(d, "cond");
    if (txt->shape[0] != 1 || txt->shape[2] != style->shape[2])
        return sd_error_set(err, SD_ERR_INVALID,
                            "the style model's tokens [1, %lld, %lld] cannot be appended to a "
                            "conditioning of shape [%lld, %lld, %lld]",
                            (long long)style->shape[1], (long long)style->shape[2],
                            (long long)txt->shape[0], (long long)txt->shape[1],
                            (long long)txt->shape[2]);
    int64_t n_txt = txt->shape[1], n = style->shape[1], W = txt->shape[2];
    sd_tensor *cat = sd_tensor_new4(SD_F32, 3, 1, n_txt + n, W, 0);
    if (!cat) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy(cat->data, txt->data, (size_t)(n_txt * W) * sizeof(float));
    memcpy((float *)cat->data + n_txt * W, style->data, (size_t)(n * W) * sizeof(float));
    sd_value *cv = sd_value_tensor(cat);
    sd_tensor_unref(cat);
    if (!cv || sd_value_dict_set(d, "cond", cv))
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");

    sd_tensor *mask = sd_value_dict_tensor(d, "attention_mask");
    if (!mask && !(attn_bias && strength != 1.0)) return SD_OK;
    float bias = logf((float)(attn_bias ? strength : 1.0)); /* torch.log(Tensor([s])): -inf at 0 */
    int64_t ref_h = 1, ref_w = 1;
    sd_value *shape = sd_value_dict_get(d, "attention_mask_img_shape");
    if (shape && sd_value_list_len(shape) == 2) {
        ref_h = sd_value_as_int(sd_value_list_get(shape, 0));
        ref_w = sd_value_as_int(sd_value_list_get(shape, 1));
    }
    sd_tensor *grown = NULL;
    sd_status rc = grow_mask(mask, txt->shape[0], n_txt, ref_h * ref_w, n, bias, &grown, err);
    if (rc) return rc;
    sd_value *mv = sd_value_tensor(grown), *sv = sd_value_list();
    sd_tensor_unref(grown);
    if (sv) {
        sd_value *a = sd_value_int(ref_h), *b = sd_value_int(ref_w);
        if (!a || !b || sd_value_list_append(sv, a) || sd_value_list_append(sv, b)) {
            sd_value_unref(sv);
            sv = NULL;
        }
    }
    if (!mv || !sv || sd_value_dict_set(d, "attention_mask", mv) ||
        sd_value_dict_set(d, "attention_mask_img_shape", sv))
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

static const char *const strength_types[] = {"multiply", "attn_bias", NULL};

static sd_status apply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_value *conds;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &conds, err);
    if (rc) return rc;
    sd_style_model *m = sd_value_as_handle(in[1], &sd_handle_style_model);
    if (!m) {
        sd_error_set(err, SD_ERR_INVALID, "not a STYLE_MODEL");
        sd_error_at(err, NULL, NULL, "style_model");
        return SD_ERR_INVALID;
    }
    sd_tensor *hidden;
    if ((rc = sd_nodes_in_clip_vision_output(in, 2, "clip_vision_output", "last_hidden_state",
                                             &hidden, err)))
        return rc;
    double strength = sd_value_as_float(in[3]);
    const char *stype = sd_value_as_string(in[4]);
    int attn_bias = stype && strcmp(stype, "attn_bias") == 0;

    sd_tensor *style = NULL;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err))) {
        rc = sd_style_model_forward(m, hidden, &style, err);
        sd_nodes_precision_end(ctx, prev);
    }
    if (rc) {
        sd_error_at(err, NULL, NULL, "clip_vision_output");
        return rc;
    }
    /* get_cond(...).flatten(0, 1).unsqueeze(0): [1, N * tokens, C] */
    int64_t flat[3] = {1, style->shape[0] * style->shape[1], style->shape[2]};
    sd_tensor *cond = sd_tensor_reshape(style, 3, flat);
    sd_tensor_unref(style);
    if (!cond) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!attn_bias) { /* cond *= strength, in float32 */
        float s = (float)strength, *p = cond->data;
        for (int64_t i = 0; i < sd_tensor_numel(cond); i++) p[i] *= s;
    }
    sd_value *list = sd_value_list();
    rc = list ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t k = 0; !rc && k < sd_value_list_len(conds); k++) {
        sd_value *d = sd_value_shallow_copy(sd_value_list_get(conds, k));
        rc = d ? apply_entry(d, cond, strength, attn_bias, err)
               : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        if (!rc && sd_value_list_append(list, d)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        else if (rc) sd_value_unref(d);
    }
    sd_tensor_unref(cond);
    if (rc) {
        sd_value_unref(list);
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "conditioning");
        return rc;
    }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def apply_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "style_model", .type = "STYLE_MODEL"},
    {.name = "clip_vision_output", .type = "CLIP_VISION_OUTPUT"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.001,
     .has_range = 1},
    {.name = "strength_type", .type = SD_T_COMBO, .options = strength_types,
     .def_str = "multiply", .no_default = 1},
    {0}};
static const sd_output_def apply_outputs[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

static const sd_node_def node_apply = {
    .version = 1,
    .class_type = "StyleModelApply",
    .python_module = "nodes",
    .display_name = "Apply Style Model",
    .category = "conditioning/style_model",
    .help = "Appends the style model's tokens for a CLIP vision output (every image's, in "
            "batch order) to each conditioning entry; multiply scales them by strength, "
            "attn_bias adds log(strength) as an attention bias on them in the entry's "
            "attention_mask (float16, as ComfyUI builds it; read by the families whose "
            "ComfyUI model reads it: the SD UNets ignore it there and here).",
    .inputs = apply_inputs,
    .outputs = apply_outputs,
    .flags = SD_NODE_TEXT_ENCODER,
    .run = apply_run,
};

const sd_node_def *const sd_nodes_style[] = {&node_loader, &node_apply, NULL};
