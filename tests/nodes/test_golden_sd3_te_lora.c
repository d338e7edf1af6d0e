/* LoRA on SD3's three text encoders (TripleCLIPLoader: CLIP-L, bigG, T5)
 * through LoraLoader, against ComfyUI's naming rule rather than a recorded
 * run (model_lora_keys_clip at the pinned commit, docs/lora-controlnet.md):
 * with both CLIPs the T5 answers to lora_te3_ only, the bigG to lora_te2_
 * (Kohya layers < 32, text_encoder_2.*, lora_te2_text_projection), CLIP-L to
 * lora_te1_, every weight to text_encoders.<part>.transformer.<key>. A LoRA
 * written here puts one patch on each; the patched encoder's weights must
 * equal base + strength * alpha/rank * up @ down (computed here in double),
 * and the T5 weight named by a lora_te2_ T5 name (Flux's spelling, not
 * SD3's) must stay as it was. Uses the SD3 set's files (skips without). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "golden_tokdir.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *jstr(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* one LoRA module: name, the target's part and HF key, its shape, alpha */
typedef struct mod {
    const char *name;
    char part; /* 'l', 'g', 't' */
    const char *key;
    double alpha;
} mod;

enum { RANK = 2 };
static const double STRENGTH = 0.6;

static sd_bt **slot_of(const sd_text_encoder *te, char part, const char *key) {
    int64_t r0, rn;
    if (part == 'l') return sd_clip_param((sd_clip *)sd_text_encoder_clip_l(te), key, &r0, &rn);
    if (part == 'g') return sd_clip_param((sd_clip *)sd_text_encoder_clip_g(te), key, &r0, &rn);
    return sd_t5_param((sd_t5 *)sd_text_encoder_t5(te), key);
}

int main(void) {
    char fdir[4096], path[4400];
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir("sd3"));
    cJSON *fm = sd_golden_manifest(fdir); /* skips without the set */
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(fm, "models");
    const char *tmp = sd_test_tmpdir("golden_sd3_te_lora");
    char mdir[2400], tokdir[2600];
    snprintf(mdir, sizeof mdir, "%s/models", tmp);
    snprintf(tokdir, sizeof tokdir, "%s/tok", tmp);
    const char *keys[] = {"clip_l", "clip_g", "t5xxl", "mmdit"};
    const char *names[4];
    for (int i = 0; i < 4; i++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(models, keys[i]);
        CHECK_MSG(jstr(m, "file") && jstr(m, "comfy_name"), "the SD3 set lacks %s", keys[i]);
        if (!jstr(m, "file") || !jstr(m, "comfy_name")) return sd_test_finish();
        snprintf(path, sizeof path, "%s/%s", fdir, jstr(m, "file"));
        gt_link(path, mdir, jstr(m, "comfy_name"));
        names[i] = strrchr(jstr(m, "comfy_name"), '/') + 1;
    }
    gt_tokenizer_dir(tokdir);
    sd_env env;
    sd_error err;
    sd_backend *be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    gt_model_defaults(fm, &mo);
    sd_model_store_set_defaults(store, &mo);
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, mdir, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    /* TripleCLIPLoader + UNETLoader */
    sd_node_ctx ctx = {.env = &env, .node_id = "1"};
    sd_value *out[4] = {NULL};
    const char *tn[] = {"clip_name1", "clip_name2", "clip_name3"};
    sd_value *tv[] = {sd_value_string(names[0]), sd_value_string(names[1]), sd_value_string(names[2])};
    ctx.class_type = "TripleCLIPLoader";
    CHECK_OK(nt_run_named(&ctx, tn, tv, 3, out, &err), &err);
    nt_free_values(tv, 3);
    sd_value *clip = out[0];
    const char *un[] = {"unet_name", "weight_dtype"};
    sd_value *uv[] = {sd_value_string(names[3]), sd_value_string("default")};
    ctx.class_type = "UNETLoader";
    memset(out, 0, sizeof out);
    CHECK_OK(nt_run_named(&ctx, un, uv, 2, out, &err), &err);
    nt_free_values(uv, 2);
    sd_value *model = out[0];
    sd_text_encoder *base = NULL;
    if (clip) CHECK_OK(sd_nodes_clip_encoder(sd_value_as_handle(clip, &sd_handle_clip), &base, &err), &err);
    if (!clip || !model || !base) {
        sd_value_unref(clip), sd_value_unref(model);
        return sd_test_finish();
    }
    int gl = sd_clip_get_config(sd_text_encoder_clip_g(base))->layers;
    char g_name[200], g_key[200], g2_name[200];
    snprintf(g_name, sizeof g_name, "lora_te2_text_model_encoder_layers_%d_mlp_fc1", gl < 32 ? gl - 1 : 31);
    snprintf(g_key, sizeof g_key, "text_model.encoder.layers.%d.mlp.fc1.weight", gl < 32 ? gl - 1 : 31);
    snprintf(g2_name, sizeof g2_name, "text_encoder_2.text_model.encoder.layers.0.self_attn.q_proj");
    const mod mods[] = {
        {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj", 'l', "text_model.encoder.layers.0.self_attn.q_proj.weight", 1.0},
        {g_name, 'g', g_key, 2.0},
        {g2_name, 'g', "text_model.encoder.layers.0.self_attn.q_proj.weight", 0.0},
        {"lora_te2_text_projection", 'g', "text_projection.weight", 1.0},
        {"lora_te3_encoder_block_0_layer_0_SelfAttention_q", 't', "encoder.block.0.layer.0.SelfAttention.q.weight", 4.0},
        {"text_encoders.t5xxl.transformer.encoder.block.1.layer.1.DenseReluDense.wo", 't',
         "encoder.block.1.layer.1.DenseReluDense.wo.weight", 0.0},
        {"text_encoders.clip_g.transformer.text_model.encoder.layers.1.self_attn.out_proj", 'g',
         "text_model.encoder.layers.1.self_attn.out_proj.weight", 0.0},
        /* Flux's spelling of a T5 weight: not an SD3 name (with both CLIPs) */
        {"lora_te2_encoder_block_0_layer_0_SelfAttention_k", 't', NULL, 1.0},
    };
    enum { NM = sizeof mods / sizeof *mods };
    /* the LoRA: up [rows, RANK], down [RANK, cols] from an LCG */
    sd_st_writer *w = sd_st_writer_new();
    sd_tensor *ups[NM] = {0}, *downs[NM] = {0};
    uint32_t x = 12345;
    for (int i = 0; i < NM; i++) {
        const char *key = mods[i].key ? mods[i].key : "encoder.block.0.layer.0.SelfAttention.k.weight";
        sd_bt **s = slot_of(base, mods[i].part, key);
        CHECK_MSG(s && *s && (*s)->ndim == 2, "%s: no 2-D target %s", mods[i].name, key);
        if (!s || !*s) continue;
        int64_t rows = (*s)->shape[0], cols = (*s)->shape[1];
        ups[i] = sd_tensor_new4(SD_F32, 2, rows, RANK, 0, 0);
        downs[i] = sd_tensor_new4(SD_F32, 2, RANK, cols, 0, 0);
        for (int64_t k = 0; k < rows * RANK; k++) x = x * 1664525u + 1013904223u, sd_tensor_f32(ups[i])[k] = (float)(x >> 8) / 16777216.0f - 0.5f;
        for (int64_t k = 0; k < cols * RANK; k++) x = x * 1664525u + 1013904223u, sd_tensor_f32(downs[i])[k] = (float)(x >> 8) / 16777216.0f - 0.5f;
        char n[300];
        snprintf(n, sizeof n, "%s.lora_up.weight", mods[i].name);
        CHECK_OK(sd_st_writer_add(w, n, ups[i], &err), &err);
        snprintf(n, sizeof n, "%s.lora_down.weight", mods[i].name);
        CHECK_OK(sd_st_writer_add(w, n, downs[i], &err), &err);
        if (mods[i].alpha != 0.0) {
            sd_tensor *a = sd_tensor_new4(SD_F32, 0, 0, 0, 0, 0);
            sd_tensor_f32(a)[0] = (float)mods[i].alpha;
            snprintf(n, sizeof n, "%s.alpha", mods[i].name);
            CHECK_OK(sd_st_writer_add(w, n, a, &err), &err);
            sd_tensor_unref(a);
        }
    }
    snprintf(path, sizeof path, "%s/loras/sd3_te.safetensors", mdir);
    {
        char cmd[4600];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/loras'", mdir);
        CHECK(system(cmd) == 0);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);

    /* LoraLoader */
    const char *ln[] = {"model", "clip", "lora_name", "strength_model", "strength_clip"};
    sd_value *lv[] = {model, clip, sd_value_string("sd3_te.safetensors"), sd_value_float(1.0),
                      sd_value_float(STRENGTH)};
    ctx.class_type = "LoraLoader";
    memset(out, 0, sizeof out);
    CHECK_OK(nt_run_named(&ctx, ln, lv, 5, out, &err), &err);
    nt_free_values(lv + 2, 3);
    sd_text_encoder *pt = NULL;
    if (out[1]) CHECK_OK(sd_nodes_clip_encoder(sd_value_as_handle(out[1], &sd_handle_clip), &pt, &err), &err);
    for (int i = 0; pt && i < NM; i++) {
        if (!ups[i]) continue;
        const char *key = mods[i].key ? mods[i].key : "encoder.block.0.layer.0.SelfAttention.k.weight";
        sd_tensor *b = sd_bt_to_host(*slot_of(base, mods[i].part, key));
        sd_tensor *p = sd_bt_to_host(*slot_of(pt, mods[i].part, key));
        int64_t rows = b->shape[0], cols = b->shape[1];
        double scale = mods[i].key ? STRENGTH * (mods[i].alpha != 0.0 ? mods[i].alpha / RANK : 1.0) : 0.0;
        /* float32 arithmetic of ComfyUI (a rank-2 product, scaled, added):
         * a few roundings of values up to |W| + |delta|; 1e-5 relative of that
         * bounds them with a wide margin and is far below any patch here */
        double worst = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                double d = 0;
                for (int k = 0; k < RANK; k++)
                    d += (double)sd_tensor_f32(ups[i])[r * RANK + k] * sd_tensor_f32(downs[i])[k * cols + c];
                double want = sd_tensor_f32(b)[r * cols + c] + scale * d;
                double got = sd_tensor_f32(p)[r * cols + c];
                double bound = 1e-5 * (fabs(sd_tensor_f32(b)[r * cols + c]) + fabs(scale * d)) + 1e-7;
                double e = fabs(got - want) / bound;
                if (e > worst) worst = e;
            }
        CHECK_MSG(worst <= 1.0, "%s -> %c %s: patched weight off by %.3g of its bound", mods[i].name, mods[i].part,
                  key, worst);
        printf("  %-70s %s: %.3g of bound\n", mods[i].name, mods[i].key ? "patched" : "unchanged (not an SD3 name)",
               worst);
        sd_tensor_unref(b), sd_tensor_unref(p);
    }
    CHECK_MSG(pt != NULL, "no patched encoder: %s", err.msg);
    for (int i = 0; i < NM; i++) sd_tensor_unref(ups[i]), sd_tensor_unref(downs[i]);
    for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
    sd_value_unref(clip), sd_value_unref(model);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(fm);
    return sd_test_finish();
}
