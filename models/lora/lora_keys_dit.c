/* lora_keys_dit.c - the LoRA names of the SD3 MMDiT and Z-Image's NextDiT,
 * as ComfyUI's comfy.lora.model_lora_keys_unet builds them:
 *   - every parameter of the state dict (both families): weights as
 *     "lora_unet_<path with _>" (Kohya / sd-scripts) and
 *     "diffusion_model.<path>" (ComfyUI's own), other parameters as
 *     "diffusion_model.<key>";
 *   - SD3 (comfy.utils.mmdit_to_diffusers): each diffusers weight name d as
 *     "transformer.<d>", "base_model.model.<d>", "lora_transformer_<d with
 *     _>" (OneTrainer) and "lycoris_<d with _>" (SimpleTuner); attn.to_q/k/v,
 *     attn.add_q/k/v_proj and attn2.to_q/k/v are row slices of the fused
 *     qkv, each (hidden / 64) * 64 rows (ComfyUI's depth * 64); norm_out.linear
 *     and the norm1_context.linear of block hidden / 64 - 1 (ComfyUI's
 *     "last" block) have their shift and scale halves swapped;
 *   - Z-Image (comfy.utils.z_image_to_diffusers): each diffusers weight name
 *     d as "diffusion_model.<d>", "transformer.<d>" and "lycoris_<d with _>";
 *     attention.to_q/k/v are dim-row slices of attention.qkv, to_out.0 is
 *     attention.out, all_x_embedder.2-1 / all_final_layer.2-1 the patch-2
 *     embedder and final layer; two noise and two context refiner blocks
 *     (ComfyUI's default n_refiner_layers).
 * ComfyUI maps names of blocks by its config's counts whether or not the
 * model has them and drops their patches silently; only names whose target
 * this model has (and whose slice fits) are added here, so the others stay
 * unmatched and are reported. */
#include "models/lora/lora_internal.h"

#include <stdio.h>
#include <string.h>

typedef sd_bt **(*param_fn)(void *net, const char *key);

typedef struct dk {
    void *net;
    param_fn param;
    lora_key_add_fn add;
    void *ud;
    int sd3; /* 1: SD3's four spellings, 0: Z-Image's three */
} dk;

static void underscores(char *s) {
    for (; *s; s++)
        if (*s == '.') *s = '_';
}

static void state_dict_key(void *ud, const char *key, sd_bt **slot) {
    dk *k = ud;
    if (!*slot) return;
    char name[300];
    size_t n = strlen(key);
    if (n > 7 && strcmp(key + n - 7, ".weight") == 0) {
        snprintf(name, sizeof name, "lora_unet_%.*s", (int)(n - 7), key);
        underscores(name + 10);
        k->add(k->ud, name, key, 0, 0, 0);
        snprintf(name, sizeof name, "diffusion_model.%.*s", (int)(n - 7), key);
        k->add(k->ud, name, key, 0, 0, 0);
    } else {
        snprintf(name, sizeof name, "diffusion_model.%s", key);
        k->add(k->ud, name, key, 0, 0, 0);
    }
}

/* The spellings of diffusers module d (no ".weight") -> target. */
static void diffusers(dk *k, const char *d, const char *target, int64_t row0, int64_t rows, int swap) {
    sd_bt **slot = k->param(k->net, target);
    if (!slot || !*slot) return;
    if (rows > 0 && row0 + rows > (*slot)->shape[0]) return; /* torch.narrow would fail */
    char name[300];
    if (k->sd3) {
        snprintf(name, sizeof name, "transformer.%s", d);
        k->add(k->ud, name, target, row0, rows, swap);
        snprintf(name, sizeof name, "base_model.model.%s", d);
        k->add(k->ud, name, target, row0, rows, swap);
        snprintf(name, sizeof name, "lora_transformer_%s", d);
        underscores(name + 17);
        k->add(k->ud, name, target, row0, rows, swap);
    } else {
        snprintf(name, sizeof name, "diffusion_model.%s", d);
        k->add(k->ud, name, target, row0, rows, swap);
        snprintf(name, sizeof name, "transformer.%s", d);
        k->add(k->ud, name, target, row0, rows, swap);
    }
    snprintf(name, sizeof name, "lycoris_%s", d);
    underscores(name + 8);
    k->add(k->ud, name, target, row0, rows, swap);
}

/* ---- SD3 ---------------------------------------------------------------------- */

/* comfy.utils.MMDIT_MAP_BLOCK's weights: diffusers (within the block) ->
 * ComfyUI (within joint_blocks.N) */
static const char *const mmdit_block[][2] = {
    {"norm1_context.linear", "context_block.adaLN_modulation.1.weight"},
    {"attn.to_add_out", "context_block.attn.proj.weight"},
    {"ff_context.net.0.proj", "context_block.mlp.fc1.weight"},
    {"ff_context.net.2", "context_block.mlp.fc2.weight"},
    {"attn.norm_added_q", "context_block.attn.ln_q.weight"},
    {"attn.norm_added_k", "context_block.attn.ln_k.weight"},
    {"norm1.linear", "x_block.adaLN_modulation.1.weight"},
    {"attn.to_out.0", "x_block.attn.proj.weight"},
    {"attn.norm_q", "x_block.attn.ln_q.weight"},
    {"attn.norm_k", "x_block.attn.ln_k.weight"},
    {"attn2.to_out.0", "x_block.attn2.proj.weight"},
    {"attn2.norm_q", "x_block.attn2.ln_q.weight"},
    {"attn2.norm_k", "x_block.attn2.ln_k.weight"},
    {"ff.net.0.proj", "x_block.mlp.fc1.weight"},
    {"ff.net.2", "x_block.mlp.fc2.weight"},
};
/* comfy.utils.MMDIT_MAP_BASIC's weights (norm_out.linear: below, swapped) */
static const char *const mmdit_basic[][2] = {
    {"context_embedder", "context_embedder.weight"},
    {"time_text_embed.timestep_embedder.linear_1", "t_embedder.mlp.0.weight"},
    {"time_text_embed.timestep_embedder.linear_2", "t_embedder.mlp.2.weight"},
    {"pos_embed.proj", "x_embedder.proj.weight"},
    {"time_text_embed.text_embedder.linear_1", "y_embedder.mlp.0.weight"},
    {"time_text_embed.text_embedder.linear_2", "y_embedder.mlp.2.weight"},
    {"proj_out", "final_layer.linear.weight"},
};

static sd_bt **sd3_param(void *net, const char *key) { return sd_sd3_param(net, key); }

void sd_lora_sd3_keys(sd_sd3 *m, lora_key_add_fn add, void *ud) {
    dk k = {m, sd3_param, add, ud, 1};
    sd_sd3_param_each(m, state_dict_key, &k);
    /* ComfyUI's unet_config["depth"] is x_embedder's width // 64: the
     * block count it maps and the q/k/v slice height (depth * 64) */
    int depth = sd_sd3_get_config(m)->hidden_size / 64;
    int64_t off = (int64_t)depth * 64;
    char d[200], t[200];
    static const char *const qkv[3] = {"q", "k", "v"};
    for (int i = 0; i < depth; i++) {
        for (int j = 0; j < 3; j++) {
            snprintf(d, sizeof d, "transformer_blocks.%d.attn.to_%s", i, qkv[j]);
            snprintf(t, sizeof t, "joint_blocks.%d.x_block.attn.qkv.weight", i);
            diffusers(&k, d, t, j * off, off, 0);
            snprintf(d, sizeof d, "transformer_blocks.%d.attn.add_%s_proj", i, qkv[j]);
            snprintf(t, sizeof t, "joint_blocks.%d.context_block.attn.qkv.weight", i);
            diffusers(&k, d, t, j * off, off, 0);
            snprintf(d, sizeof d, "transformer_blocks.%d.attn2.to_%s", i, qkv[j]);
            snprintf(t, sizeof t, "joint_blocks.%d.x_block.attn2.qkv.weight", i);
            diffusers(&k, d, t, j * off, off, 0);
        }
        for (size_t b = 0; b < sizeof mmdit_block / sizeof *mmdit_block; b++) {
            snprintf(d, sizeof d, "transformer_blocks.%d.%s", i, mmdit_block[b][0]);
            snprintf(t, sizeof t, "joint_blocks.%d.%s", i, mmdit_block[b][1]);
            diffusers(&k, d, t, 0, 0, 0);
        }
    }
    for (size_t b = 0; b < sizeof mmdit_basic / sizeof *mmdit_basic; b++)
        diffusers(&k, mmdit_basic[b][0], mmdit_basic[b][1], 0, 0, 0);
    diffusers(&k, "norm_out.linear", "final_layer.adaLN_modulation.1.weight", 0, 0, 1);
    /* the last context block's 2-chunk modulation (after the block loop: the
     * later dict assignment wins) */
    snprintf(d, sizeof d, "transformer_blocks.%d.norm1_context.linear", depth - 1);
    snprintf(t, sizeof t, "joint_blocks.%d.context_block.adaLN_modulation.1.weight", depth - 1);
    diffusers(&k, d, t, 0, 0, 1);
}

/* ---- Z-Image -------------------------------------------------------------------- */

/* z_image_to_diffusers' block map (weights): diffusers -> ComfyUI, within the block */
static const char *const zi_block[][2] = {
    {"attention.norm_q", "attention.q_norm.weight"},
    {"attention.norm_k", "attention.k_norm.weight"},
    {"attention.to_out.0", "attention.out.weight"},
    {"attention_norm1", "attention_norm1.weight"},
    {"attention_norm2", "attention_norm2.weight"},
    {"feed_forward.w1", "feed_forward.w1.weight"},
    {"feed_forward.w2", "feed_forward.w2.weight"},
    {"feed_forward.w3", "feed_forward.w3.weight"},
    {"ffn_norm1", "ffn_norm1.weight"},
    {"ffn_norm2", "ffn_norm2.weight"},
    {"adaLN_modulation.0", "adaLN_modulation.0.weight"},
};
static const char *const zi_basic[][2] = {
    {"all_final_layer.2-1.linear", "final_layer.linear.weight"},
    {"all_final_layer.2-1.adaLN_modulation.1", "final_layer.adaLN_modulation.1.weight"},
    {"all_x_embedder.2-1", "x_embedder.weight"},
    {"cap_embedder.0", "cap_embedder.0.weight"},
    {"cap_embedder.1", "cap_embedder.1.weight"},
    {"t_embedder.mlp.0", "t_embedder.mlp.0.weight"},
    {"t_embedder.mlp.2", "t_embedder.mlp.2.weight"},
};

static sd_bt **zi_param(void *net, const char *key) { return sd_zimage_param(net, key); }

static void zi_blocks(dk *k, const char *what, int n, int64_t dim) {
    char d[200], t[200];
    static const char *const qkv[3] = {"q", "k", "v"};
    for (int i = 0; i < n; i++) {
        snprintf(t, sizeof t, "%s.%d.attention.qkv.weight", what, i);
        for (int j = 0; j < 3; j++) {
            snprintf(d, sizeof d, "%s.%d.attention.to_%s", what, i, qkv[j]);
            diffusers(k, d, t, j * dim, dim, 0);
        }
        for (size_t b = 0; b < sizeof zi_block / sizeof *zi_block; b++) {
            snprintf(d, sizeof d, "%s.%d.%s", what, i, zi_block[b][0]);
            snprintf(t, sizeof t, "%s.%d.%s", what, i, zi_block[b][1]);
            diffusers(k, d, t, 0, 0, 0);
        }
    }
}

void sd_lora_zimage_keys(sd_zimage *m, lora_key_add_fn add, void *ud) {
    dk k = {m, zi_param, add, ud, 0};
    sd_zimage_param_each(m, state_dict_key, &k);
    const sd_zimage_config *c = sd_zimage_get_config(m);
    zi_blocks(&k, "layers", c->n_layers, c->dim);
    zi_blocks(&k, "context_refiner", 2, c->dim); /* ComfyUI's default count */
    zi_blocks(&k, "noise_refiner", 2, c->dim);
    for (size_t b = 0; b < sizeof zi_basic / sizeof *zi_basic; b++)
        diffusers(&k, zi_basic[b][0], zi_basic[b][1], 0, 0, 0);
}
