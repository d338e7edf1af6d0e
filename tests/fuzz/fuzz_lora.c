/* libFuzzer target: LoRA files (models/lora). The input is a safetensors
 * file, matched against a generated tiny SD1 UNet and text encoder
 * (sd_lora_plan_new) and, when that succeeds, applied to both
 * (sd_lora_unet_view, sd_lora_text_encoder_view), so every adapter kind's
 * shape checks and patch arithmetic run on whatever the planner accepts.
 * The same input is then matched against and applied to tiny DiTs
 * (sd_lora_plan_new_dit, sd_lora_dit_view): a Flux DiT (BF16), the same as
 * a Q8_0 GGUF file (the quantized-weight patching), an SD3 MMDiT-X and a
 * Z-Image NextDiT (zero weights in their real key layouts), so the Flux,
 * SD3 and Z-Image key maps (row slices, swapped halves, root parameters)
 * run too. With Flux and Z-Image the input is also matched against and
 * applied to a text encoder of the family (sd_lora_plan_new_dit_te,
 * sd_lora_text_encoder_view): the Flux CLIP composed of the SD1 CLIP-L and
 * a tiny T5, and a tiny Qwen3, so the text-encoder key maps (the T5's
 * lora_te<i>_ names, text_encoders.*) and the T5 / Qwen3 parameter tables
 * run on whatever the planner accepts.
 * Errors are fine; a crash, an ASan report, UB or a leak is a finding.
 * The seeds (fuzz_seeds.c) are valid files of every kind with the tiny
 * model's key names: Kohya LoRA, LoCon, LoHa (plain and Tucker), LoKr
 * (plain, factored, Tucker), diffusers/PEFT and full diffs. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/flux/flux.h"
#include "models/lora/lora.h"
#include "models/sd3/sd3.h"
#include "models/synth/synth.h"
#include "models/zimage/zimage.h"

static sd_backend *be;
static int verbose; /* FUZZ_LORA_VERBOSE=1: print why an input was refused (seed triage) */
static sd_unet *unet;
static sd_text_encoder *te;
static void die(const char *what, sd_error *err);
enum { N_DIT = 4 };
static sd_dmodel dits[N_DIT];
static int n_dits;

/* ---- tiny DiT files -------------------------------------------------------------- */

/* Adds a zero F32 tensor name [d0, d1, d2, d3] (ndim of them). */
static void zeros(sd_st_writer *w, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3, const char *name) {
    sd_error err;
    sd_tensor *t = sd_tensor_new4(SD_F32, ndim, d0, d1, d2, d3);
    if (!t) abort();
    memset(t->data, 0, (size_t)sd_tensor_numel(t) * sizeof(float));
    if (sd_st_writer_add(w, name, t, &err)) die("writing a DiT", &err);
    sd_tensor_unref(t);
}

static void lin(sd_st_writer *w, int64_t out, int64_t in, const char *fmt, int i, const char *which) {
    char n[160], k[200];
    snprintf(n, sizeof n, fmt, i, which);
    snprintf(k, sizeof k, "%s.weight", n);
    zeros(w, 2, out, in, 0, 0, k);
    snprintf(k, sizeof k, "%s.bias", n);
    zeros(w, 1, out, 0, 0, 0, k);
}

/* SD3.5 Medium's layout: 2 joint blocks (block 0 MMDiT-X), hidden 64 (one
 * head of 64, ComfyUI's depth 1), patch 2, 4 channels, qk RMSNorm, y. */
static void write_sd3(sd_st_writer *w) {
    const int64_t h = 64, C = 4, M = 4;
    zeros(w, 4, h, C, 2, 2, "x_embedder.proj.weight");
    zeros(w, 1, h, 0, 0, 0, "x_embedder.proj.bias");
    zeros(w, 3, 1, M * M, h, 0, "pos_embed");
    lin(w, h, 256, "t_embedder.mlp.%d%s", 0, "");
    lin(w, h, h, "t_embedder.mlp.%d%s", 2, "");
    lin(w, h, 8, "y_embedder.mlp.%d%s", 0, "");
    lin(w, h, h, "y_embedder.mlp.%d%s", 2, "");
    lin(w, h, 16, "context_embedder%.0d%s", 0, "");
    for (int i = 0; i < 2; i++) {
        static const char *const which[2] = {"x_block", "context_block"};
        for (int b = 0; b < 2; b++) {
            int pre = b == 1 && i == 1, sa = b == 0 && i == 0;
            char n[160];
            lin(w, (sa ? 9 : pre ? 2 : 6) * h, h, "joint_blocks.%d.%s.adaLN_modulation.1", i, which[b]);
            lin(w, 3 * h, h, "joint_blocks.%d.%s.attn.qkv", i, which[b]);
            snprintf(n, sizeof n, "joint_blocks.%d.%s.attn.ln_q.weight", i, which[b]);
            zeros(w, 1, h, 0, 0, 0, n);
            snprintf(n, sizeof n, "joint_blocks.%d.%s.attn.ln_k.weight", i, which[b]);
            zeros(w, 1, h, 0, 0, 0, n);
            if (!pre) {
                lin(w, h, h, "joint_blocks.%d.%s.attn.proj", i, which[b]);
                lin(w, 4 * h, h, "joint_blocks.%d.%s.mlp.fc1", i, which[b]);
                lin(w, h, 4 * h, "joint_blocks.%d.%s.mlp.fc2", i, which[b]);
            }
            if (sa) {
                lin(w, 3 * h, h, "joint_blocks.%d.%s.attn2.qkv", i, which[b]);
                lin(w, h, h, "joint_blocks.%d.%s.attn2.proj", i, which[b]);
                snprintf(n, sizeof n, "joint_blocks.%d.%s.attn2.ln_q.weight", i, which[b]);
                zeros(w, 1, h, 0, 0, 0, n);
                snprintf(n, sizeof n, "joint_blocks.%d.%s.attn2.ln_k.weight", i, which[b]);
                zeros(w, 1, h, 0, 0, 0, n);
            }
        }
    }
    lin(w, 2 * h, h, "final_layer.adaLN_modulation.%d%s", 1, "");
    lin(w, 4 * C, h, "final_layer.linear%.0d%s", 0, "");
}

/* Z-Image's layout: dim 64 (two heads of 32), one layer, two refiners of
 * each kind, pad tokens, 4 channels, caption features 8. */
static void zi_block(sd_st_writer *w, const char *what, int i, int modulated) {
    const int64_t d = 64, f = 128;
    char n[160];
    snprintf(n, sizeof n, "%s.%d.attention.qkv.weight", what, i);
    zeros(w, 2, 3 * d, d, 0, 0, n);
    snprintf(n, sizeof n, "%s.%d.attention.out.weight", what, i);
    zeros(w, 2, d, d, 0, 0, n);
    static const char *const vecs[] = {"attention.q_norm", "attention.k_norm"};
    for (int v = 0; v < 2; v++) {
        snprintf(n, sizeof n, "%s.%d.%s.weight", what, i, vecs[v]);
        zeros(w, 1, 32, 0, 0, 0, n);
    }
    static const char *const norms[] = {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"};
    for (int v = 0; v < 4; v++) {
        snprintf(n, sizeof n, "%s.%d.%s.weight", what, i, norms[v]);
        zeros(w, 1, d, 0, 0, 0, n);
    }
    snprintf(n, sizeof n, "%s.%d.feed_forward.w1.weight", what, i);
    zeros(w, 2, f, d, 0, 0, n);
    snprintf(n, sizeof n, "%s.%d.feed_forward.w2.weight", what, i);
    zeros(w, 2, d, f, 0, 0, n);
    snprintf(n, sizeof n, "%s.%d.feed_forward.w3.weight", what, i);
    zeros(w, 2, f, d, 0, 0, n);
    if (modulated) {
        snprintf(n, sizeof n, "%s.%d.adaLN_modulation.0.weight", what, i);
        zeros(w, 2, 4 * d, 64, 0, 0, n);
        snprintf(n, sizeof n, "%s.%d.adaLN_modulation.0.bias", what, i);
        zeros(w, 1, 4 * d, 0, 0, 0, n);
    }
}

static void write_zimage(sd_st_writer *w) {
    const int64_t d = 64;
    zeros(w, 1, 8, 0, 0, 0, "cap_embedder.0.weight");
    lin(w, d, 8, "cap_embedder.%d%s", 1, "");
    lin(w, d, 16, "x_embedder%.0d%s", 0, "");
    lin(w, 64, 256, "t_embedder.mlp.%d%s", 0, "");
    lin(w, 64, 64, "t_embedder.mlp.%d%s", 2, "");
    zeros(w, 2, 1, d, 0, 0, "x_pad_token");
    zeros(w, 2, 1, d, 0, 0, "cap_pad_token");
    zi_block(w, "layers", 0, 1);
    for (int i = 0; i < 2; i++) {
        zi_block(w, "noise_refiner", i, 1);
        zi_block(w, "context_refiner", i, 0);
    }
    lin(w, d, 64, "final_layer.adaLN_modulation.%d%s", 1, "");
    lin(w, 16, d, "final_layer.linear%.0d%s", 0, "");
}

static void die(const char *what, sd_error *err) {
    fprintf(stderr, "fuzz_lora: %s: %s\n", what, err->msg);
    abort();
}

/* ---- tiny text encoders ------------------------------------------------------------ */

/* A T5 v1.1 encoder: vocab 32, d_model 16, 2 heads of 8, d_ff 32, 8 buckets, 2 blocks. */
static void write_t5(sd_st_writer *w) {
    char n[160];
    zeros(w, 2, 32, 16, 0, 0, "shared.weight");
    for (int i = 0; i < 2; i++) {
        static const char *const mats[][2] = {{"layer.0.SelfAttention.q", "16"}, {"layer.0.SelfAttention.k", "16"},
                                              {"layer.0.SelfAttention.v", "16"}, {"layer.0.SelfAttention.o", "16"}};
        for (int m = 0; m < 4; m++) {
            snprintf(n, sizeof n, "encoder.block.%d.%s.weight", i, mats[m][0]);
            zeros(w, 2, 16, 16, 0, 0, n);
        }
        snprintf(n, sizeof n, "encoder.block.%d.layer.0.layer_norm.weight", i);
        zeros(w, 1, 16, 0, 0, 0, n);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.layer_norm.weight", i);
        zeros(w, 1, 16, 0, 0, 0, n);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.wi_0.weight", i);
        zeros(w, 2, 32, 16, 0, 0, n);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.wi_1.weight", i);
        zeros(w, 2, 32, 16, 0, 0, n);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.wo.weight", i);
        zeros(w, 2, 16, 32, 0, 0, n);
    }
    zeros(w, 2, 8, 2, 0, 0, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    zeros(w, 1, 16, 0, 0, 0, "encoder.final_layer_norm.weight");
}

/* A Qwen3 decoder: vocab 32, hidden 8, 2 heads of 4, 1 key/value head, MLP 16, 2 layers. */
static void write_qwen3(sd_st_writer *w) {
    char n[160];
    zeros(w, 2, 32, 8, 0, 0, "model.embed_tokens.weight");
    for (int i = 0; i < 2; i++) {
        static const struct {
            const char *name;
            int ndim;
            int64_t d0, d1;
        } t[] = {{"input_layernorm", 1, 8, 0},        {"self_attn.q_proj", 2, 8, 8},   {"self_attn.k_proj", 2, 4, 8},
                 {"self_attn.v_proj", 2, 4, 8},       {"self_attn.o_proj", 2, 8, 8},   {"self_attn.q_norm", 1, 4, 0},
                 {"self_attn.k_norm", 1, 4, 0},       {"post_attention_layernorm", 1, 8, 0},
                 {"mlp.gate_proj", 2, 16, 8},         {"mlp.up_proj", 2, 16, 8},       {"mlp.down_proj", 2, 8, 16}};
        for (size_t j = 0; j < sizeof t / sizeof *t; j++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", i, t[j].name);
            zeros(w, t[j].ndim, t[j].d0, t[j].d1, 0, 0, n);
        }
    }
    zeros(w, 1, 8, 0, 0, 0, "model.norm.weight");
}

static sd_text_encoder *t5_part, *flux_te, *qwen_te;

/* A text encoder loaded from what write fills (a temporary file, unlinked). */
static sd_text_encoder *load_te(void (*write)(sd_st_writer *), const sd_te_load_opts *o) {
    sd_error err;
    char p[] = "/tmp/fuzz_lora_te_XXXXXX";
    int d = mkstemp(p);
    if (d < 0) abort();
    close(d);
    sd_st_writer *w = sd_st_writer_new();
    if (!w) abort();
    write(w);
    if (sd_st_writer_save(w, p, &err)) die("writing a text encoder", &err);
    sd_st_writer_free(w);
    sd_st_file *f = NULL;
    if (sd_st_open(p, &f, &err)) die("opening a text encoder", &err);
    unlink(p);
    sd_text_encoder *te_out = NULL;
    if (sd_text_encoder_load_ex(be, f, o, &te_out, &err)) die("a text encoder", &err);
    sd_st_close(f);
    return te_out;
}

/* The tiny model, written to a temporary file that is unlinked at once
 * (the mapping stays) and loaded once for all inputs. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    verbose = getenv("FUZZ_LORA_VERBOSE") != NULL;
    sd_error err;
    sd_error_clear(&err);
    char path[] = "/tmp/fuzz_lora_model_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    const sd_synth_config *cfg = sd_synth_preset("sd1-tiny");
    if (!cfg) abort();
    if (sd_synth_sd1_write(cfg, 7, path, &err)) die("writing the model", &err);
    sd_st_file *f = NULL;
    if (sd_st_open(path, &f, &err)) die("opening the model", &err);
    unlink(path);
    if (sd_backend_new("cpu", 1, &be, &err)) die("backend", &err);
    if (sd_unet_load(be, f, NULL, SD_F32, &unet, &err)) die("UNet", &err);
    if (sd_text_encoder_load(be, f, NULL, &te, &err)) die("text encoder", &err);
    sd_st_close(f); /* the models keep what they borrow */
    t5_part = load_te(write_t5, NULL);
    const sd_text_encoder *parts[2] = {te, t5_part};
    if (sd_text_encoder_combine(SD_TE_FLUX, parts, 2, &flux_te, &err)) die("the Flux CLIP", &err);
    sd_te_load_opts qo = {.qwen3_4b_width = 8};
    qwen_te = load_te(write_qwen3, &qo);

    /* the DiTs: a temporary file each, unlinked once mapped */
    const sd_synth_flux_config *fc = sd_synth_flux_preset("flux-dev-tiny");
    if (!fc) abort();
    for (int k = 0; k < N_DIT; k++) {
        char p[] = "/tmp/fuzz_lora_dit_XXXXXX";
        int d = mkstemp(p);
        if (d < 0) abort();
        close(d);
        sd_st_file *df = NULL;
        if (k == 0 && sd_synth_flux_write(fc, SD_SYNTH_FLUX_DIT, 7, p, &err)) die("writing Flux", &err);
        if (k == 1 && sd_synth_flux_gguf_write(fc, SD_SYNTH_FLUX_DIT, "Q8_0", 7, 1, p, &err)) die("writing GGUF", &err);
        if (k >= 2) {
            sd_st_writer *w = sd_st_writer_new();
            if (!w) abort();
            if (k == 2) write_sd3(w);
            else write_zimage(w);
            if (sd_st_writer_save(w, p, &err)) die("writing a DiT", &err);
            sd_st_writer_free(w);
        }
        if ((k == 1 ? sd_gguf_open(p, &df, &err) : sd_st_open(p, &df, &err))) die("opening a DiT", &err);
        unlink(p);
        sd_dmodel *dm = &dits[n_dits];
        if (k <= 1) {
            sd_flux *m = NULL;
            if (sd_flux_load(be, df, "", SD_F32, &m, &err)) die("Flux", &err);
            sd_flux_as_dmodel(m, dm);
        } else if (k == 2) {
            sd_sd3 *m = NULL;
            if (sd_sd3_load(be, df, "", SD_F32, &m, &err)) die("SD3", &err);
            sd_sd3_as_dmodel(m, dm);
        } else {
            sd_zimage *m = NULL;
            if (sd_zimage_load(be, df, "", SD_F32, &m, &err)) die("Z-Image", &err);
            sd_zimage_as_dmodel(m, dm);
        }
        n_dits++;
        sd_st_close(df);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_st_file *f = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (sd_st_open_memory(data, size, "fuzz.safetensors", &f, &err) != SD_OK) return 0;
    sd_lora *l = NULL;
    sd_lora_plan *plan = NULL;
    if (sd_lora_from_file(f, &l, &err) == SD_OK && sd_lora_plan_new(l, unet, te, &plan, &err) == SD_OK) {
        sd_lora_use use = {plan, 0.75};
        sd_unet *uv = NULL;
        sd_text_encoder *tv = NULL;
        if (sd_lora_unet_view(unet, &use, 1, &uv, &err) == SD_OK && !uv) abort();
        if (sd_lora_text_encoder_view(te, &use, 1, &tv, &err) == SD_OK && !tv) abort();
        sd_unet_free(uv);
        sd_text_encoder_free(tv);
    }
    if (verbose)
        fprintf(stderr, "fuzz_lora: %s\n", err.code ? err.msg : plan ? "applied" : "not a LoRA");
    for (int k = 0; l && k < n_dits; k++) {
        sd_lora_plan *dp = NULL;
        sd_error_clear(&err);
        /* the family's text encoder with Flux (BF16) and Z-Image */
        const sd_text_encoder *dte = k == 0 ? flux_te : dits[k].info.kind == SD_DMODEL_ZIMAGE ? qwen_te : NULL;
        if (sd_lora_plan_new_dit_te(l, &dits[k], dte, &dp, &err) == SD_OK) {
            sd_lora_use use = {dp, -1.5};
            sd_dmodel v;
            if (sd_lora_dit_view(&dits[k], &use, 1, &v, &err) == SD_OK && !v.net) abort();
            sd_lora_dit_free(&v);
            sd_text_encoder *tv = NULL;
            if (dte && sd_lora_text_encoder_view(dte, &use, 1, &tv, &err) == SD_OK && !tv) abort();
            sd_text_encoder_free(tv);
        }
        if (verbose) {
            size_t nte = 0;
            for (int part = SD_LORA_CLIP_L; part < SD_LORA_PARTS; part++)
                nte += sd_lora_plan_count(dp, (sd_lora_part)part);
            fprintf(stderr, "fuzz_lora: %s: %s (%zu DiT, %zu text-encoder patches)\n",
                    sd_dmodel_kind_name(dits[k].info.kind), err.code ? err.msg : "planned",
                    sd_lora_plan_count(dp, SD_LORA_UNET), nte);
        }
        sd_lora_plan_unref(dp);
    }
    sd_lora_plan_unref(plan);
    sd_lora_unref(l);
    sd_st_close(f);
    return 0;
}
