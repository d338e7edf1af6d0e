/* SD2.x checkpoints on the synthesized tiny SD2 models (sd2-tiny: a 768-v
 * style v-prediction file, sd2-tiny-eps: SD2-base style):
 *   - detection: family sd2 (linear proj_in, no label_emb, OpenCLIP under
 *     cond_stage_model.model.), prediction by ComfyUI's guess (population std
 *     of output_blocks.11.1.transformer_blocks.0.norm1.bias > 0.09), checked
 *     on both presets and on that bias rewritten just above / below 0.09;
 *     a 9-channel (inpainting) SD2 UNet is eps;
 *     the SD1 and SDXL tiny presets stay sd1 / sdxl, eps;
 *   - the text encoder: kind sd2, 'h' tokens padded with 0, cond = the
 *     penultimate layer WITH final LN (sd2_clip.py), pooled projected; the
 *     same from the SGM layout (conditioner.embedders.0.model.);
 *   - a UNet evaluation on that conditioning is finite and shaped;
 *   - an SD2 ControlNet (sd2-tiny's encoder as control_model.* with a random
 *     hint block and zero convs) loads as SD2, fits the SD2 UNet, and its
 *     residuals change the UNet's (finite) output;
 *   - V_PREDICTION calculate_denoised against its closed form in double.
 * No reference numbers: structure and consistency only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/controlnet/controlnet.h"
#include "models/lora/lora.h"
#include "models/synth/synth.h"
#include "models/text/prompt.h"
#include "testutil.h"

#define VPRED_BIAS "model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias"

static const char *tmp;

static void synth_sd2(const char *preset, char *path, size_t n) {
    snprintf(path, n, "%s/%s.safetensors", tmp, preset);
    sd_error err = {0};
    CHECK_OK(sd_synth_sd2_write(sd_synth_sd2_preset(preset), 1, path, &err), &err);
}

static sd_checkpoint *open_ckpt(sd_backend *be, const char *path, const char *tok_dir) {
    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    o.tokenizer_dir = tok_dir;
    sd_error err = {0};
    sd_checkpoint *c = NULL;
    CHECK_OK(sd_checkpoint_open(be, path, &o, &c, &err), &err);
    return c;
}

static void expect_family(sd_backend *be, const char *path, sd_ckpt_family fam, sd_prediction pred) {
    sd_checkpoint *c = open_ckpt(be, path, NULL);
    if (!c) return;
    const sd_ckpt_info *i = sd_checkpoint_info(c);
    CHECK_MSG(i->family == fam && i->prediction == pred,
              "%s: family %s prediction %d, want %s %d", path, sd_ckpt_family_name(i->family),
              (int)i->prediction, sd_ckpt_family_name(fam), (int)pred);
    sd_checkpoint_unref(c);
}

/* A copy of src with the v-prediction bias set to alternating +-a
 * (population std a, up to F16 rounding). */
static void with_bias(const char *src, const char *dst, float a) {
    sd_error err = {0};
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    if (!f) return;
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; w && i < sd_st_count(f); i++) {
        const char *name = sd_st_at(f, i)->name;
        sd_tensor *t = sd_st_tensor(f, name, &err);
        if (!t) break;
        if (strcmp(name, VPRED_BIAS) == 0) {
            sd_tensor *c = sd_tensor_to_dtype(t, SD_F16);
            uint16_t *p = c->data;
            for (int64_t k = 0; k < sd_tensor_numel(c); k++) p[k] = sd_f32_to_f16(k % 2 ? -a : a);
            sd_tensor_unref(t);
            t = c;
        }
        CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, dst, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(f);
}

static int all_finite(const sd_tensor *t) {
    const float *p = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++)
        if (!isfinite(p[i])) return 0;
    return 1;
}

static void check_detection(sd_backend *be, const char *v_path, const char *eps_path) {
    sd_checkpoint *c = open_ckpt(be, v_path, NULL);
    if (c) {
        const sd_ckpt_info *i = sd_checkpoint_info(c);
        CHECK(i->family == SD_CKPT_SD2 && strcmp(sd_ckpt_family_name(i->family), "sd2") == 0);
        CHECK(i->prediction == SD_PRED_V && i->has_unet && i->has_vae && i->has_text_encoder);
        CHECK(i->latent_format == &sd_latent_sd1 && !i->inpaint);
        CHECK(i->unet.kind == SD_UNET_SD2 && i->unet.use_linear_in_transformer &&
              i->unet.num_heads == -1 && i->unet.num_head_channels == 64 &&
              i->unet.adm_in_channels == 0 && i->unet.context_dim == 128);
        sd_checkpoint_unref(c);
    }
    expect_family(be, eps_path, SD_CKPT_SD2, SD_PRED_EPS);

    /* the threshold itself: 0.095 is v, 0.085 is eps */
    char p[4200];
    snprintf(p, sizeof p, "%s/bias-095.safetensors", tmp);
    with_bias(eps_path, p, 0.095f);
    expect_family(be, p, SD_CKPT_SD2, SD_PRED_V);
    snprintf(p, sizeof p, "%s/bias-085.safetensors", tmp);
    with_bias(v_path, p, 0.085f);
    expect_family(be, p, SD_CKPT_SD2, SD_PRED_EPS);

    /* a 9-channel (inpainting) SD2 UNet is eps whatever that bias says */
    sd_synth_sd2_config inp = *sd_synth_sd2_preset("sd2-tiny");
    inp.in_channels = 9;
    sd_error e9 = {0};
    snprintf(p, sizeof p, "%s/inpaint.safetensors", tmp);
    CHECK_OK(sd_synth_sd2_write(&inp, 1, p, &e9), &e9);
    sd_checkpoint *ci = open_ckpt(be, p, NULL);
    if (ci) {
        CHECK(sd_checkpoint_info(ci)->family == SD_CKPT_SD2 && sd_checkpoint_info(ci)->inpaint &&
              sd_checkpoint_info(ci)->prediction == SD_PRED_EPS);
        sd_checkpoint_unref(ci);
    }

    /* the other families are not SD2 */
    sd_error err = {0};
    snprintf(p, sizeof p, "%s/sd1.safetensors", tmp);
    CHECK_OK(sd_synth_sd1_write(sd_synth_preset("sd1-tiny"), 1, p, &err), &err);
    expect_family(be, p, SD_CKPT_SD1, SD_PRED_EPS);
    snprintf(p, sizeof p, "%s/sdxl.safetensors", tmp);
    CHECK_OK(sd_synth_sdxl_write(sd_synth_sdxl_preset("sdxl-tiny"), 1, p, &err), &err);
    expect_family(be, p, SD_CKPT_SDXL, SD_PRED_EPS);
}

static uint64_t rs = 7;
static void add_rand(sd_st_writer *w, const char *name, int nd, int64_t a, int64_t b) {
    int64_t shape[4] = {a, b, nd == 4 ? 3 : 0, nd == 4 ? 3 : 0};
    if (nd == 4 && strstr(name, "zero_convs")) shape[2] = shape[3] = 1;
    if (nd == 4 && strstr(name, "middle_block_out")) shape[2] = shape[3] = 1;
    sd_tensor *t = sd_tensor_new(SD_F32, nd, shape);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) {
        rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
        ((float *)t->data)[i] = (float)((double)(rs >> 40) / (double)(1ULL << 24) - 0.5) * 0.2f;
    }
    sd_error err = {0};
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

/* control_model.* from the checkpoint's encoder half, as ControlNet
 * training starts from. 1 on success. */
static int make_controlnet(const char *ckpt, const char *out) {
    sd_error err = {0};
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(ckpt, &f, &err), &err);
    if (!f) return 0;
    sd_st_writer *w = sd_st_writer_new();
    const char *pre = "model.diffusion_model.";
    size_t pl = strlen(pre);
    int64_t widths[64] = {0};
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const char *k = sd_st_at(f, i)->name, *r = k + pl;
        if (strncmp(k, pre, pl) != 0 || (strncmp(r, "time_embed.", 11) && strncmp(r, "input_blocks.", 13) &&
                                         strncmp(r, "middle_block.", 13)))
            continue;
        sd_tensor *t = sd_st_tensor_f32(f, k, &err);
        char nk[512], rest[256];
        snprintf(nk, sizeof nk, "control_model.%s", r);
        CHECK_OK(sd_st_writer_add(w, nk, t, &err), &err);
        int b;
        if (sscanf(r, "input_blocks.%d.%255s", &b, rest) == 2 && b < 64 &&
            (strstr(rest, "out_layers.3.weight") || strcmp(rest, "0.weight") == 0 ||
             strcmp(rest, "0.op.weight") == 0))
            widths[b] = t->shape[0];
        sd_tensor_unref(t);
    }
    int64_t hint[8] = {16, 16, 32, 32, 96, 96, 256, widths[0]}, cin = 3;
    char nm[128];
    for (int k = 0; k < 8; k++) {
        snprintf(nm, sizeof nm, "control_model.input_hint_block.%d.weight", 2 * k);
        add_rand(w, nm, 4, hint[k], cin);
        snprintf(nm, sizeof nm, "control_model.input_hint_block.%d.bias", 2 * k);
        add_rand(w, nm, 1, hint[k], 0);
        cin = hint[k];
    }
    int n = 0;
    while (n < 64 && widths[n]) n++;
    for (int i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "control_model.zero_convs.%d.0.weight", i);
        add_rand(w, nm, 4, widths[i], widths[i]);
        snprintf(nm, sizeof nm, "control_model.zero_convs.%d.0.bias", i);
        add_rand(w, nm, 1, widths[i], 0);
    }
    add_rand(w, "control_model.middle_block_out.0.weight", 4, widths[n - 1], widths[n - 1]);
    add_rand(w, "control_model.middle_block_out.0.bias", 1, widths[n - 1], 0);
    CHECK_OK(sd_st_writer_save(w, out, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(f);
    return n == 12;
}

static void check_controlnet(sd_backend *be, sd_unet *u, const char *ckpt, sd_bt *x, sd_bt *ctx,
                             const sd_tensor *plain) {
    char path[4200];
    snprintf(path, sizeof path, "%s/cn-sd2.safetensors", tmp);
    CHECK(make_controlnet(ckpt, path));
    sd_error err = {0};
    sd_st_file *f = NULL;
    sd_controlnet *cn = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (f) CHECK_OK(sd_controlnet_load(be, f, SD_F32, &cn, &err), &err);
    sd_st_close(f);
    if (!cn) return;
    const sd_unet_config *cc = sd_controlnet_config(cn);
    CHECK(cc->kind == SD_UNET_SD2 && cc->num_head_channels == 64 && cc->context_dim == 128 &&
          sd_controlnet_n_outputs(cn) == 12);
    CHECK_OK(sd_controlnet_check_fit(cn, sd_unet_get_config(u), &err), &err);
    int64_t hs[4] = {1, 3, 64, 64};
    sd_tensor *hh = sd_tensor_new(SD_F32, 4, hs);
    for (int64_t i = 0; i < sd_tensor_numel(hh); i++) ((float *)hh->data)[i] = (float)(i % 7) / 7.0f;
    sd_bt *hint = sd_bt_from_host(be, hh, SD_F32);
    float ts = 999.0f;
    sd_controlnet_result r = {0};
    CHECK_OK(sd_controlnet_forward(cn, x, &ts, hint, ctx, NULL, &r, &err), &err);
    if (r.n == 12 && r.middle) {
        sd_unet_control control = {0, NULL, r.middle, r.n, r.output};
        sd_bt *out = NULL;
        CHECK_OK(sd_unet_forward(u, x, &ts, ctx, NULL, &control, &out, &err), &err);
        sd_tensor *ho = out ? sd_bt_to_host(out) : NULL;
        CHECK(ho && all_finite(ho) && plain && ho->nbytes == plain->nbytes &&
              memcmp(ho->data, plain->data, ho->nbytes) != 0);
        sd_tensor_unref(ho);
        sd_bt_free(out);
    }
    sd_controlnet_result_free(&r);
    sd_bt_free(hint);
    sd_tensor_unref(hh);
    sd_controlnet_free(cn);
}

/* LoRA names that reach SD2's ViT-H, as ComfyUI's model_lora_keys_clip maps
 * clip_h: lora_te_, lora_te1_, text_encoder. and text_encoders.clip_h.*; the
 * bigG-only names (lora_prior_te_, lora_te2_text_projection) do not. */
static void check_lora_names(const sd_text_encoder *te) {
    static const char *const hit[] = {
        "lora_te_text_model_encoder_layers_0_self_attn_q_proj",
        "lora_te1_text_model_encoder_layers_1_mlp_fc1",
        "text_encoder.text_model.encoder.layers.2.self_attn.out_proj",
        "text_encoders.clip_h.transformer.text_model.encoder.layers.3.mlp.fc2",
    };
    static const char *const miss[] = {
        "lora_prior_te_text_model_encoder_layers_0_mlp_fc2",
        "text_encoders.clip_g.transformer.text_model.encoder.layers.0.mlp.fc2",
    };
    sd_st_writer *w = sd_st_writer_new();
    sd_error err = {0};
    char nm[256];
    for (int m = 0; m < 2; m++) {
        const char *const *list = m ? miss : hit;
        int n = m ? 2 : 4;
        for (int i = 0; i < n; i++) {
            /* every module touched is 128 wide on both sides except mlp.fc1 (512 out) and fc2 (512 in) */
            int out = strstr(list[i], "fc1") ? 512 : 128, in = strstr(list[i], "fc2") ? 512 : 128;
            snprintf(nm, sizeof nm, "%s.lora_up.weight", list[i]);
            add_rand(w, nm, 2, out, 4);
            snprintf(nm, sizeof nm, "%s.lora_down.weight", list[i]);
            add_rand(w, nm, 2, 4, in);
        }
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/lora-sd2.safetensors", tmp);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_lora *lora = NULL;
    sd_lora_plan *plan = NULL;
    CHECK_OK(sd_lora_open(path, &lora, &err), &err);
    if (lora) CHECK_OK(sd_lora_plan_new(lora, NULL, te, &plan, &err), &err);
    if (plan) {
        char buf[1024];
        CHECK_MSG(sd_lora_plan_count(plan, SD_LORA_CLIP_G) == 4 &&
                      sd_lora_plan_unmatched_count(plan) == 4, /* 2 tensors each */
                  "SD2 LoRA names: %d matched, %d unmatched (%s)",
                  (int)sd_lora_plan_count(plan, SD_LORA_CLIP_G), (int)sd_lora_plan_unmatched_count(plan),
                  sd_lora_plan_unmatched_summary(plan, 4, buf, sizeof buf));
    }
    sd_lora_plan_unref(plan);
    sd_lora_unref(lora);
}

/* SD2 in the SGM layout: the ViT-H under conditioner.embedders.0.model.
 * (the prefix of an SDXL refiner's bigG) next to a label_emb-less UNet is
 * SD2's encoder and gives the same conditioning. */
static void check_sgm(sd_backend *be, const char *v_path, const char *tok_dir, const sd_tensor *cond) {
    char path[4200];
    snprintf(path, sizeof path, "%s/sgm.safetensors", tmp);
    sd_error err = {0};
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(v_path, &f, &err), &err);
    if (!f) return;
    sd_st_writer *w = sd_st_writer_new();
    const char *old = "cond_stage_model.model.";
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const char *k = sd_st_at(f, i)->name;
        char nk[512];
        if (strncmp(k, old, strlen(old)) == 0) snprintf(nk, sizeof nk, "conditioner.embedders.0.model.%s", k + strlen(old));
        else snprintf(nk, sizeof nk, "%s", k);
        sd_tensor *t = sd_st_tensor(f, k, &err);
        CHECK_OK(sd_st_writer_add(w, nk, t, &err), &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(f);
    sd_checkpoint *c = open_ckpt(be, path, tok_dir);
    sd_text_encoder *te = NULL;
    if (c) CHECK_OK(sd_checkpoint_text_encoder(c, &te, &err), &err);
    if (te) {
        CHECK(sd_checkpoint_info(c)->family == SD_CKPT_SD2 && sd_text_encoder_kind(te) == SD_TE_SD2);
        sd_tensor *c2 = NULL, *p2 = NULL;
        CHECK_OK(sd_text_encode(te, "a photo of a cat", 0, NULL, &c2, &p2, &err), &err);
        CHECK(c2 && cond && c2->nbytes == cond->nbytes && memcmp(c2->data, cond->data, c2->nbytes) == 0);
        sd_tensor_unref(c2);
        sd_tensor_unref(p2);
    }
    sd_checkpoint_unref(c);
}

/* The text encoder and one UNet evaluation on its output. */
static void check_run(sd_backend *be, const char *v_path, const char *tok_dir) {
    sd_checkpoint *c = open_ckpt(be, v_path, tok_dir);
    if (!c) return;
    sd_error err = {0};
    sd_text_encoder *te = NULL;
    CHECK_OK(sd_checkpoint_text_encoder(c, &te, &err), &err);
    if (!te) {
        sd_checkpoint_unref(c);
        return;
    }
    CHECK(sd_text_encoder_kind(te) == SD_TE_SD2 && !sd_text_encoder_clip_l(te));
    CHECK(strcmp(sd_te_kind_name(SD_TE_SD2), "sd2") == 0);
    CHECK(sd_text_encoder_cond_dim(te) == 128 && sd_text_encoder_pooled_dim(te) == 128);
    const sd_clip_config *cc = sd_clip_get_config(sd_text_encoder_clip_g(te));
    CHECK(cc->layout == SD_CLIP_LAYOUT_OPENCLIP && cc->layers == 4 && cc->act == SD_CLIP_ACT_GELU &&
          cc->proj_dim == 128);
    check_lora_names(te);

    const char *text = "a photo of a cat";
    sd_tensor *cond = NULL, *pooled = NULL;
    CHECK_OK(sd_text_encode(te, text, 0, NULL, &cond, &pooled, &err), &err);
    CHECK(cond && cond->ndim == 3 && cond->shape[0] == 1 && cond->shape[1] == 77 &&
          cond->shape[2] == 128 && all_finite(cond));
    CHECK(pooled && pooled->ndim == 2 && pooled->shape[1] == 128 && all_finite(pooled));

    /* the same tokens through the transformer directly: the default layer is
     * the penultimate with final LN; pads are 0 */
    sd_prompt_opts po;
    sd_prompt_opts_clip_h(&po);
    CHECK(po.pad_token == 0 && strcmp(po.embedding_key, "clip_h") == 0);
    sd_prompt_tokens *t = NULL;
    CHECK_OK(sd_prompt_tokenize(sd_text_encoder_tokenizer(te), text, &po, &t, &err), &err);
    if (t && cond) {
        int32_t ids[77];
        for (int j = 0; j < 77; j++) ids[j] = t->tokens[j].id;
        CHECK(ids[0] == SD_CLIP_BOS && ids[76] == 0);
        sd_clip *clip = (sd_clip *)sd_text_encoder_clip_g(te);
        sd_clip_tokens in = {1, 77, ids, NULL};
        sd_clip_output o1 = {0}, o2 = {0};
        CHECK_OK(sd_clip_forward(clip, &in, (sd_clip_layer){-2, 1}, &o1, &err), &err);
        CHECK_OK(sd_clip_forward(clip, &in, (sd_clip_layer){-2, 0}, &o2, &err), &err);
        sd_tensor *h1 = o1.hidden ? sd_bt_to_host(o1.hidden) : NULL;
        sd_tensor *h2 = o2.hidden ? sd_bt_to_host(o2.hidden) : NULL;
        sd_tensor *pr = o1.projected ? sd_bt_to_host(o1.projected) : NULL;
        CHECK(h1 && h2 && pr);
        if (h1 && h2 && pr && pooled) {
            CHECK_MSG(memcmp(h1->data, cond->data, cond->nbytes) == 0,
                      "cond is not the penultimate layer with final LN");
            CHECK(memcmp(h2->data, cond->data, cond->nbytes) != 0);
            CHECK_MSG(memcmp(pr->data, pooled->data, pooled->nbytes) == 0,
                      "pooled is not the projected final-LN state");
        }
        sd_tensor_unref(h1);
        sd_tensor_unref(h2);
        sd_tensor_unref(pr);
        sd_clip_output_free(&o1);
        sd_clip_output_free(&o2);
    }
    sd_prompt_tokens_free(t);
    check_sgm(be, v_path, tok_dir, cond);

    sd_unet *u = NULL;
    CHECK_OK(sd_checkpoint_unet(c, &u, &err), &err);
    if (u && cond) {
        int64_t xs[4] = {1, 4, 8, 8};
        sd_tensor *hx = sd_tensor_new(SD_F32, 4, xs);
        float *px = hx->data;
        for (int64_t i = 0; i < sd_tensor_numel(hx); i++) px[i] = (float)sin((double)i * 0.37);
        sd_bt *x = sd_bt_from_host(be, hx, SD_F32);
        sd_bt *ctx = sd_bt_from_host(be, cond, SD_F32);
        float ts = 999.0f;
        sd_bt *out = NULL;
        CHECK_OK(sd_unet_forward(u, x, &ts, ctx, NULL, NULL, &out, &err), &err);
        sd_tensor *ho = out ? sd_bt_to_host(out) : NULL;
        CHECK(ho && ho->ndim == 4 && ho->shape[1] == 4 && ho->shape[2] == 8 && all_finite(ho));
        check_controlnet(be, u, v_path, x, ctx, ho);
        sd_tensor_unref(ho);
        sd_bt_free(out);
        sd_bt_free(x);
        sd_bt_free(ctx);
        sd_tensor_unref(hx);
    }
    sd_tensor_unref(cond);
    sd_tensor_unref(pooled);
    sd_checkpoint_unref(c);
}

/* calculate_denoised for V_PREDICTION (sigma_data 1) against
 * x / (s^2 + 1) - v * s / sqrt(s^2 + 1) in double. */
static void check_vpred_formula(void) {
    static sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_V);
    const float sigmas[] = {ms.sigma_max, 7.5f, 1.0f, 0.25f, ms.sigma_min};
    float x[16], v[16], d[16];
    for (int i = 0; i < 16; i++) {
        x[i] = (float)(i - 7) * 0.731f;
        v[i] = (float)cos(i * 1.3) * 1.7f;
    }
    for (size_t k = 0; k < sizeof sigmas / sizeof *sigmas; k++) {
        double s = sigmas[k];
        sd_ms_calculate_denoised(&ms, sigmas[k], v, x, d, 16);
        for (int i = 0; i < 16; i++) {
            double want = x[i] / (s * s + 1.0) - v[i] * s / sqrt(s * s + 1.0);
            CHECK_MSG(fabs(d[i] - want) <= 1e-5 * (1.0 + fabs(want)),
                      "sigma %g: denoised %g, closed form %g", s, d[i], want);
        }
        /* at sigma -> 0 the v model's x0 is x; large sigma: -v scaled */
    }
    /* denoised may alias its inputs */
    float y[16];
    memcpy(y, x, sizeof y);
    sd_ms_calculate_denoised(&ms, 2.0f, v, y, y, 16);
    sd_ms_calculate_denoised(&ms, 2.0f, v, x, d, 16);
    CHECK(memcmp(y, d, sizeof d) == 0);
}

/* The full-size "sd2" preset names the shapes of SD2.1 768-v's keys. */
typedef struct {
    int found, bad, label_emb, resblock24;
} full_ctx;

static void full_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    (void)dtype;
    full_ctx *c = user;
    static const struct {
        const char *name;
        int ndim;
        int64_t d0, d1;
    } want[] = {
        {"model.diffusion_model.input_blocks.1.1.proj_in.weight", 2, 320, 320},
        {"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", 2, 320, 1024},
        {"model.diffusion_model.middle_block.1.transformer_blocks.0.attn2.to_k.weight", 2, 1280, 1024},
        {"model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias", 1, 320, 0},
        {"cond_stage_model.model.token_embedding.weight", 2, 49408, 1024},
        {"cond_stage_model.model.positional_embedding", 2, 77, 1024},
        {"cond_stage_model.model.transformer.resblocks.23.attn.in_proj_weight", 2, 3072, 1024},
        {"cond_stage_model.model.transformer.resblocks.23.mlp.c_fc.weight", 2, 4096, 1024},
        {"cond_stage_model.model.text_projection", 2, 1024, 1024},
        {"first_stage_model.decoder.conv_in.weight", 4, 512, 4},
    };
    if (strstr(name, "label_emb")) c->label_emb++;
    if (strstr(name, "resblocks.24.")) c->resblock24++;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        if (strcmp(name, want[i].name) != 0) continue;
        c->found++;
        if (ndim != want[i].ndim || shape[0] != want[i].d0 || (ndim > 1 && shape[1] != want[i].d1)) {
            c->bad++;
            printf("  %s: shape differs\n", name);
        }
    }
}

int main(void) {
    tmp = sd_test_tmpdir("sd2");
    sd_error err = {0};
    CHECK(sd_synth_sd2_preset("sd2-tiny") && sd_synth_sd2_preset("sd2-tiny-eps") &&
          sd_synth_sd2_preset("sd2") && !sd_synth_sd2_preset("sd2-nope"));
    char v_path[4200], eps_path[4200], tok[4200];
    synth_sd2("sd2-tiny", v_path, sizeof v_path);
    synth_sd2("sd2-tiny-eps", eps_path, sizeof eps_path);
    snprintf(tok, sizeof tok, "%s/tok", tmp);
    CHECK_OK(sd_synth_vocab_write(tok, &err), &err);

    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &err), &err);
    if (be) {
        check_detection(be, v_path, eps_path);
        check_run(be, v_path, tok);
        sd_backend_free(be);
    }
    full_ctx fc = {0};
    sd_synth_sd2_keys(sd_synth_sd2_preset("sd2"), full_key, &fc);
    CHECK_MSG(fc.found == 10 && fc.bad == 0 && fc.label_emb == 0 && fc.resblock24 == 0,
              "full-size sd2 preset: %d of 10 keys found, %d misshaped", fc.found, fc.bad);
    check_vpred_formula();
    return sd_test_finish();
}
