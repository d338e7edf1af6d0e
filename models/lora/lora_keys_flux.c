/* lora_keys_flux.c - the LoRA names of a Flux DiT, as ComfyUI's
 * comfy.lora.model_lora_keys_unet builds them for a Flux model:
 *   - every parameter of the state dict: "lora_unet_<path with _>" (Kohya /
 *     sd-scripts) and "diffusion_model.<path>" (ComfyUI's and BFL's own) for
 *     weights, "diffusion_model.<key>" for the others (biases, norm scales);
 *   - comfy.utils.flux_to_diffusers' diffusers names, each as
 *     "transformer.<name>", "lycoris_<name with _>" and
 *     "lora_transformer_<name with _>" (OneTrainer): q, k and v are row
 *     slices of the fused qkv (and of a single block's linear1, whose
 *     proj_mlp slice is 4 * hidden rows after them), norm_out.linear is the
 *     final modulation with its shift and scale halves swapped;
 *   - "diffusion_model.single_blocks.N.linear1_qkv": the first 3 * hidden
 *     rows of linear1.
 * Only names whose target the model has are added (ComfyUI also maps names
 * of absent parameters, e.g. guidance_in on schnell, and then drops their
 * patches silently; here such LoRA keys stay unmatched and are reported). */
#include "models/lora/lora_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct fk {
    sd_flux *f;
    lora_key_add_fn add;
    void *ud;
    int64_t hidden;
} fk;

static void underscores(char *s) {
    for (; *s; s++)
        if (*s == '.') *s = '_';
}

/* The three diffusers spellings of module d (no ".weight") -> target. */
static void diffusers(fk *k, const char *d, const char *target, int64_t row0, int64_t rows, int swap) {
    sd_bt **slot = sd_flux_param(k->f, target);
    if (!slot || !*slot) return;
    if (rows > 0 && row0 + rows > (*slot)->shape[0]) return; /* torch.narrow would fail */
    char name[300];
    snprintf(name, sizeof name, "transformer.%s", d);
    k->add(k->ud, name, target, row0, rows, swap);
    snprintf(name, sizeof name, "lycoris_%s", d);
    underscores(name + 8);
    k->add(k->ud, name, target, row0, rows, swap);
    snprintf(name, sizeof name, "lora_transformer_%s", d);
    underscores(name + 17);
    k->add(k->ud, name, target, row0, rows, swap);
}

static void state_dict_key(void *ud, const char *key, sd_bt **slot) {
    fk *k = ud;
    if (!*slot) return;
    char name[300];
    size_t n = strlen(key);
    if (n > 7 && strcmp(key + n - 7, ".weight") == 0) {
        snprintf(name, sizeof name, "lora_unet_%.*s", (int)(n - 7), key);
        underscores(name + 10);
        k->add(k->ud, name, key, 0, 0, 0);
        snprintf(name, sizeof name, "diffusion_model.%.*s", (int)(n - 7), key);
        k->add(k->ud, name, key, 0, 0, 0);
        const char *l1 = strstr(key, ".linear1.weight");
        if (l1 && l1[15] == '\0' && 3 * k->hidden <= (*slot)->shape[0]) {
            snprintf(name, sizeof name, "diffusion_model.%.*s.linear1_qkv", (int)(l1 - key), key);
            k->add(k->ud, name, key, 0, 3 * k->hidden, 0);
        }
    } else {
        snprintf(name, sizeof name, "diffusion_model.%s", key);
        k->add(k->ud, name, key, 0, 0, 0);
    }
}

/* diffusers module (within a block) -> BFL parameter (within the block) */
static const char *const double_map[][2] = {
    {"attn.to_out.0", "img_attn.proj.weight"},
    {"norm1.linear", "img_mod.lin.weight"},
    {"norm1_context.linear", "txt_mod.lin.weight"},
    {"attn.to_add_out", "txt_attn.proj.weight"},
    {"ff.net.0.proj", "img_mlp.0.weight"},
    {"ff.net.2", "img_mlp.2.weight"},
    {"ff_context.net.0.proj", "txt_mlp.0.weight"},
    {"ff_context.net.2", "txt_mlp.2.weight"},
    {"attn.norm_q", "img_attn.norm.query_norm.scale"},
    {"attn.norm_k", "img_attn.norm.key_norm.scale"},
    {"attn.norm_added_q", "txt_attn.norm.query_norm.scale"},
    {"attn.norm_added_k", "txt_attn.norm.key_norm.scale"},
};
static const char *const single_map[][2] = {
    {"norm.linear", "modulation.lin.weight"},
    {"proj_out", "linear2.weight"},
    {"attn.norm_q", "norm.query_norm.scale"},
    {"attn.norm_k", "norm.key_norm.scale"},
};
static const char *const basic_map[][2] = {
    {"proj_out", "final_layer.linear.weight"},
    {"x_embedder", "img_in.weight"},
    {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer.weight"},
    {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer.weight"},
    {"context_embedder", "txt_in.weight"},
    {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer.weight"},
    {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer.weight"},
    {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer.weight"},
    {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer.weight"},
};

void sd_lora_flux_keys(sd_flux *f, lora_key_add_fn add, void *ud) {
    const sd_flux_config *c = sd_flux_get_config(f);
    fk k = {f, add, ud, c->hidden_size};
    int64_t h = c->hidden_size;
    sd_flux_param_each(f, state_dict_key, &k);
    char d[200], t[200];
    static const char *const qkv[3] = {"q", "k", "v"};
    for (int i = 0; i < c->depth; i++) {
        for (int j = 0; j < 3; j++) {
            snprintf(d, sizeof d, "transformer_blocks.%d.attn.to_%s", i, qkv[j]);
            snprintf(t, sizeof t, "double_blocks.%d.img_attn.qkv.weight", i);
            diffusers(&k, d, t, j * h, h, 0);
            snprintf(d, sizeof d, "transformer_blocks.%d.attn.add_%s_proj", i, qkv[j]);
            snprintf(t, sizeof t, "double_blocks.%d.txt_attn.qkv.weight", i);
            diffusers(&k, d, t, j * h, h, 0);
        }
        for (size_t m = 0; m < sizeof double_map / sizeof *double_map; m++) {
            snprintf(d, sizeof d, "transformer_blocks.%d.%s", i, double_map[m][0]);
            snprintf(t, sizeof t, "double_blocks.%d.%s", i, double_map[m][1]);
            diffusers(&k, d, t, 0, 0, 0);
        }
    }
    for (int i = 0; i < c->depth_single_blocks; i++) {
        snprintf(t, sizeof t, "single_blocks.%d.linear1.weight", i);
        for (int j = 0; j < 3; j++) {
            snprintf(d, sizeof d, "single_transformer_blocks.%d.attn.to_%s", i, qkv[j]);
            diffusers(&k, d, t, j * h, h, 0);
        }
        /* (0, 3h, 4h) whatever the MLP width, as ComfyUI writes it */
        snprintf(d, sizeof d, "single_transformer_blocks.%d.proj_mlp", i);
        diffusers(&k, d, t, 3 * h, 4 * h, 0);
        for (size_t m = 0; m < sizeof single_map / sizeof *single_map; m++) {
            snprintf(d, sizeof d, "single_transformer_blocks.%d.%s", i, single_map[m][0]);
            snprintf(t, sizeof t, "single_blocks.%d.%s", i, single_map[m][1]);
            diffusers(&k, d, t, 0, 0, 0);
        }
    }
    for (size_t m = 0; m < sizeof basic_map / sizeof *basic_map; m++)
        diffusers(&k, basic_map[m][0], basic_map[m][1], 0, 0, 0);
    diffusers(&k, "norm_out.linear", "final_layer.adaLN_modulation.1.weight", 0, 0, 1);
}
