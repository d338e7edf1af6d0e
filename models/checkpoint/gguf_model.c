/* gguf_model.c - architecture and tensor names of GGUF model files, as
 * ComfyUI-GGUF's loader.py decides them (gguf_model.h). */
#include "models/checkpoint/gguf_model.h"

#include <stdio.h>
#include <string.h>

#define DM_PREFIX "model.diffusion_model."

static const char *const img_archs[] = {"flux", "sd1", "sdxl", "sd3", "aura", "hidream", "cosmos",
                                        "ltxv", "hyvid", "wan", "lumina2", "qwen_image", NULL};
static const char *const txt_archs[] = {"t5", "t5encoder", "llama", "qwen2vl", "qwen3", "qwen3vl", NULL};
static const char *const vis_types[] = {"clip-vision", "mmproj", NULL};

static int in_list(const char *s, const char *const *l) {
    for (int i = 0; s && l[i]; i++)
        if (strcmp(s, l[i]) == 0) return 1;
    return 0;
}

/* loader.py's T5_SD_MAP and LLAMA_SD_MAP, in their order. */
static const char *const t5_map[][2] = {
    {"enc.", "encoder."},
    {".blk.", ".block."},
    {"token_embd", "shared"},
    {"output_norm", "final_layer_norm"},
    {"attn_q", "layer.0.SelfAttention.q"},
    {"attn_k", "layer.0.SelfAttention.k"},
    {"attn_v", "layer.0.SelfAttention.v"},
    {"attn_o", "layer.0.SelfAttention.o"},
    {"attn_norm", "layer.0.layer_norm"},
    {"attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"},
    {"ffn_up", "layer.1.DenseReluDense.wi_1"},
    {"ffn_down", "layer.1.DenseReluDense.wo"},
    {"ffn_gate", "layer.1.DenseReluDense.wi_0"},
    {"ffn_norm", "layer.1.layer_norm"},
    {NULL, NULL},
};

static const char *const llama_map[][2] = {
    {"blk.", "model.layers."},
    {"attn_norm", "input_layernorm"},
    {"attn_q_norm.", "self_attn.q_norm."},
    {"attn_k_norm.", "self_attn.k_norm."},
    {"attn_v_norm.", "self_attn.v_norm."},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_norm", "post_attention_layernorm"},
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output.weight", "lm_head.weight"},
    {NULL, NULL},
};

/* tools/convert.py's model templates: any key set of keys_detect present
 * selects the architecture (in this order), a present keys_banned key
 * refuses the file (diffusers layouts). At most 6 keys per set. */
typedef struct arch_rule {
    const char *arch;
    const char *detect[3][7];
    const char *banned;
} arch_rule;

static const arch_rule rules[] = {
    {"flux", {{"transformer_blocks.0.attn.norm_added_k.weight"}, {"double_blocks.0.img_attn.proj.weight"}},
     "transformer_blocks.0.attn.norm_added_k.weight"},
    {"sd3", {{"transformer_blocks.0.attn.add_q_proj.weight"}, {"joint_blocks.0.x_block.attn.qkv.weight"}},
     "transformer_blocks.0.attn.add_q_proj.weight"},
    {"aura", {{"double_layers.3.modX.1.weight"}, {"joint_transformer_blocks.3.ff_context.out_projection.weight"}},
     "joint_transformer_blocks.3.ff_context.out_projection.weight"},
    {"hidream",
     {{"caption_projection.0.linear.weight", "double_stream_blocks.0.block.ff_i.shared_experts.w3.weight"}},
     NULL},
    {"cosmos", {{"blocks.0.mlp.layer1.weight", "blocks.0.adaln_modulation_cross_attn.1.weight"}}, NULL},
    {"ltxv",
     {{"adaln_single.emb.timestep_embedder.linear_2.weight", "transformer_blocks.27.scale_shift_table",
       "caption_projection.linear_2.weight"}},
     NULL},
    {"hyvid",
     {{"double_blocks.0.img_attn_proj.weight", "txt_in.individual_token_refiner.blocks.1.self_attn_qkv.weight"}},
     NULL},
    {"wan", {{"blocks.0.self_attn.norm_q.weight", "text_embedding.2.weight", "head.modulation"}}, NULL},
    {"sdxl",
     {{"down_blocks.0.downsamplers.0.conv.weight", "add_embedding.linear_1.weight"},
      {"input_blocks.3.0.op.weight", "input_blocks.6.0.op.weight", "output_blocks.2.2.conv.weight",
       "output_blocks.5.2.conv.weight"},
      {"label_emb.0.0.weight"}},
     NULL},
    {"sd1",
     {{"down_blocks.0.downsamplers.0.conv.weight"},
      {"input_blocks.3.0.op.weight", "input_blocks.6.0.op.weight", "input_blocks.9.0.op.weight",
       "output_blocks.2.1.conv.weight", "output_blocks.5.2.conv.weight", "output_blocks.8.2.conv.weight"}},
     NULL},
    {"lumina2", {{"cap_embedder.1.weight", "context_refiner.0.attention.qkv.weight"}}, NULL},
};

/* Architecture from the keys (the view has the prefix cut already). */
static sd_status detect_arch(const char *path, sd_st_file *f, char *arch, size_t n, sd_error *err) {
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        for (int s = 0; s < 3 && rules[r].detect[s][0]; s++) {
            int all = 1;
            for (int k = 0; k < 7 && rules[r].detect[s][k] && all; k++)
                all = sd_st_find(f, rules[r].detect[s][k]) != NULL;
            if (!all) continue;
            if (rules[r].banned && sd_st_find(f, rules[r].banned))
                return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                    "%s: this model is not supported: a %s model in the diffusers layout "
                                    "('%s'); use the reference key format",
                                    path, rules[r].arch, rules[r].banned);
            snprintf(arch, n, "%s", rules[r].arch);
            return SD_OK;
        }
    }
    return sd_error_set(err, SD_ERR_UNSUPPORTED,
                        "%s: this model is not supported: the GGUF file names no architecture "
                        "(general.architecture) and its keys match none ComfyUI-GGUF knows",
                        path);
}

static int any_prefixed(sd_st_file *f) {
    for (size_t i = 0; i < sd_st_count(f); i++)
        if (strncmp(sd_st_at(f, i)->name, DM_PREFIX, strlen(DM_PREFIX)) == 0) return 1;
    return 0;
}

/* Where the file's bytes are: a path, or a buffer (data) named path. */
typedef struct source {
    const char *path;
    const void *data;
    size_t size;
} source;

static sd_status open_view(const source *src, const sd_gguf_view_opts *o, sd_st_file **f, sd_error *err) {
    if (src->data)
        return o ? sd_gguf_open_memory_ex(src->data, src->size, src->path, o, f, err)
                 : sd_gguf_open_memory(src->data, src->size, src->path, f, err);
    return o ? sd_gguf_open_ex(src->path, o, f, err) : sd_gguf_open(src->path, f, err);
}

static sd_status model_open(const source *src, sd_gguf_use use, sd_st_file **out, char *arch, size_t n,
                            sd_error *err) {
    const char *path = src->path;
    *out = NULL;
    if (n) arch[0] = 0;
    sd_st_file *f = NULL;
    sd_status rc = open_view(src, NULL, &f, err);
    if (rc) return rc;
    /* copies: the view may be reopened below */
    char abuf[64], tbuf[64];
    const char *a = sd_st_metadata(f, "general.architecture"), *type = sd_st_metadata(f, "general.type");
    if (a) a = (snprintf(abuf, sizeof abuf, "%s", a), abuf);
    if (type) type = (snprintf(tbuf, sizeof tbuf, "%s", type), tbuf);
    int text_arch = in_list(a, txt_archs);
    int text = use == SD_GGUF_TEXT_ENCODER || (use == SD_GGUF_ANY && text_arch);
    int compat = !a || strcmp(a, "pig") == 0 || strcmp(a, "cow") == 0;
    if (text && compat) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                          "%s: this GGUF file is incompatible with llama.cpp (architecture '%s'): "
                          "a text encoder must be a llama.cpp GGUF; consider a safetensors file",
                          path, a ? a : "none");
    } else if (text && !text_arch && !in_list(type, vis_types)) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: unexpected text model architecture '%s' in the GGUF file",
                          path, a);
    } else if (!text && !compat && !in_list(a, img_archs)) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: unexpected architecture type '%s' in the GGUF file%s", path,
                          a, text_arch ? " (a text encoder: load it with a CLIP loader)" : "");
    } else if (text && a && strcmp(a, "llama") == 0) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                          "%s: a llama text encoder (HiDream's Llama 3.1): sdflow does not run that family", path);
    } else if (text && a && strcmp(a, "qwen2vl") == 0) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                          "%s: a qwen2vl text encoder (Qwen-Image, with its mmproj file): sdflow does not run "
                          "that family",
                          path);
    }
    if (rc) {
        sd_st_close(f);
        return rc;
    }
    const char *const(*map)[2] = !text ? NULL : (strcmp(a, "t5") == 0 || strcmp(a, "t5encoder") == 0) ? t5_map
                                                                                                         : llama_map;
    if (in_list(type, vis_types) && !text_arch) map = NULL;
    if (map || any_prefixed(f)) {
        sd_gguf_view_opts o = {DM_PREFIX, map};
        sd_st_close(f);
        f = NULL;
        if ((rc = open_view(src, &o, &f, err))) return rc;
    }
    if (compat && (rc = detect_arch(path, f, arch, n, err))) {
        sd_st_close(f);
        return rc;
    }
    if (!compat) snprintf(arch, n, "%s", a);
    if (text && map == t5_map) {
        const sd_st_entry *e = sd_st_find(f, "shared.weight");
        if (e && e->ndim == 2 && e->shape[0] == 256384) {
            sd_st_close(f);
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: a UMT5 encoder (256384-token vocabulary, its tokenizer in the file): "
                                "sdflow does not run the families that use it",
                                path);
        }
    }
    *out = f;
    return SD_OK;
}

sd_status sd_gguf_model_open(const char *path, sd_gguf_use use, sd_st_file **out, char *arch, size_t n,
                             sd_error *err) {
    source src = {path, NULL, 0};
    return model_open(&src, use, out, arch, n, err);
}

sd_status sd_gguf_model_open_memory(const void *data, size_t size, const char *name, sd_gguf_use use,
                                    sd_st_file **out, char *arch, size_t n, sd_error *err) {
    source src = {name, data, size};
    return model_open(&src, use, out, arch, n, err);
}
