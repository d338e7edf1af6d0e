/* lora_node_defs.c - LoraLoader (alias LoRA) and LoraLoaderModelOnly: the
 * node table over sd_nodes_lora_load (lora_stack.c). Each run makes new
 * MODEL / CLIP values over the same checkpoint with one more LoRA on their
 * stacks; the inputs keep theirs, so changing a strength never reloads the
 * checkpoint. */
#include "lora_nodes.h"
#include "models/checkpoint/model_paths.h"
#include "nodes/loaders/loaders.h"

static sd_status list_loras(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_LORAS, out, err);
}

/* Shared by both nodes: in = model, [clip,] lora_name, strength_model
 * [, strength_clip]. */
static sd_status lora_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, int with_clip,
                          sd_error *err) {
    sd_model_ref *model;
    sd_clip_ref *clip = NULL;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &model, err);
    if (!rc && with_clip) rc = sd_nodes_in_clip(in, 1, "clip", &clip, err);
    if (rc) return rc;
    int k = with_clip ? 2 : 1;
    const char *name = sd_value_as_string(in[k]);
    double sm = sd_value_as_float(in[k + 1]);
    double sc = with_clip ? sd_value_as_float(in[k + 2]) : 0.0;
    /* ComfyUI returns its inputs untouched when both strengths are 0 (it
     * does not even open the file). */
    if (sm == 0.0 && sc == 0.0) {
        out[0] = sd_value_ref(in[0]);
        if (with_clip) out[1] = sd_value_ref(in[1]);
        return SD_OK;
    }
    /* MODEL and CLIP may come from different loaders: the LoRA's diffusion
     * keys are matched against the MODEL's network, its text-encoder keys
     * against the CLIP's encoder (one file's, or the one a CLIP of several
     * files is composed of: DualCLIPLoader, TripleCLIPLoader) */
    sd_lora_stack *ms = NULL, *cs = NULL;
    rc = sd_nodes_lora_load_clip(ctx, model->ckpt, clip, name ? name : "", model->loras,
                                 with_clip ? clip->loras : NULL, sm, sc, with_clip, &ms,
                                 with_clip ? &cs : NULL, err);
    if (rc) return rc;
    out[0] = sd_nodes_model_value_patched(model->ckpt, ms, &model->patches);
    /* no text-encoder patch (a DiT LoRA without text keys): the CLIP as it came */
    if (with_clip) out[1] = cs ? sd_nodes_clip_value_like(clip, clip->clip_skip, cs) : sd_value_ref(in[1]);
    sd_lora_stack_unref(ms);
    sd_lora_stack_unref(cs);
    if (!out[0] || (with_clip && !out[1])) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

static sd_status lora_loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                 sd_error *err) {
    return lora_run(ctx, in, out, 1, err);
}

static sd_status lora_model_only_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                                     sd_error *err) {
    return lora_run(ctx, in, out, 0, err);
}

/* tip: ComfyUI's tooltip (LoraLoader has them, LoraLoaderModelOnly not) */
#define STRENGTH(n, tip) \
    {.name = n, .type = SD_T_FLOAT, .def = 1.0, .min = -100.0, .max = 100.0, .step = 0.01, \
     .has_range = 1, .tooltip = tip}
#define LORA_NAME(tip) \
    {.name = "lora_name", .type = SD_T_COMBO, .options_fn = list_loras, \
     .file_folder = SD_FOLDER_LORAS, .tooltip = tip}

static const sd_input_def lora_loader_inputs[] = {
    {.name = "model", .type = "MODEL", .tooltip = "The diffusion model the LoRA will be applied to."},
    {.name = "clip", .type = "CLIP", .tooltip = "The CLIP model the LoRA will be applied to."},
    LORA_NAME("The name of the LoRA."),
    STRENGTH("strength_model", "How strongly to modify the diffusion model. This value can be negative."),
    STRENGTH("strength_clip", "How strongly to modify the CLIP model. This value can be negative."), {0}};
static const sd_output_def lora_loader_outputs[] = {{"MODEL", "MODEL"}, {"CLIP", "CLIP"}, {0}};

static const sd_node_def node_lora_loader = {
    .version = 1,
    .class_type = "LoraLoader",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("The modified diffusion model.", "The modified CLIP model."),
    .description = "LoRAs are used to modify diffusion and CLIP models, altering the way in which latents are "
                   "denoised such as applying styles. Multiple LoRA nodes can be linked together.",
    .display_name = "Load LoRA",
    .category = "loaders",
    .help = "Applies a LoRA/LyCORIS file (Kohya, diffusers/PEFT names) to the diffusion "
            "model and the text encoder. Keys that match nothing are logged.",
    .inputs = lora_loader_inputs,
    .outputs = lora_loader_outputs,
    .run = lora_loader_run,
};

static const sd_input_def lora_model_only_inputs[] = {
    {.name = "model", .type = "MODEL"}, LORA_NAME(NULL), STRENGTH("strength_model", NULL), {0}};
static const sd_output_def lora_model_only_outputs[] = {{"MODEL", "MODEL"}, {0}};

static const sd_node_def node_lora_model_only = {
    .version = 1,
    .class_type = "LoraLoaderModelOnly",
    .python_module = "nodes",
    .output_tooltips = SD_STRINGS("The modified diffusion model.", "The modified CLIP model."),
    .description = "LoRAs are used to modify diffusion and CLIP models, altering the way in which latents are "
                   "denoised such as applying styles. Multiple LoRA nodes can be linked together.",
    .display_name = "LoraLoaderModelOnly",
    .category = "loaders",
    .help = "Applies a LoRA to the diffusion model only (its text-encoder keys count as "
            "unmatched).",
    .inputs = lora_model_only_inputs,
    .outputs = lora_model_only_outputs,
    .run = lora_model_only_run,
};

static const sd_node_def *const lora_table[] = {&node_lora_loader, &node_lora_model_only, NULL};

sd_status sd_nodes_lora_register(sd_error *err) {
    sd_status rc = sd_registry_add(lora_table, err);
    if (!rc) rc = sd_registry_alias("LoRA", "LoraLoader", err);
    return rc;
}
