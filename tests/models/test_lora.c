/* test_lora.c - LoRA patching on a generated tiny SD1 checkpoint with
 * hand-made LoRA files: each adapter kind (LoRA with and without alpha,
 * LoCon mid, LoHa, LoKr, full diffs) against an independent double
 * computation, the name spellings (Kohya diffusers/ldm paths, generic
 * diffusion_model., PEFT processor and plain spellings), stacking and
 * strength changes without touching the base, unmatched-key reporting,
 * LoraLoaderModelOnly (no text encoder), misfit and unsupported errors. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/lora/lora.h"
#include "models/synth/synth.h"
#include "models/text/text_encode.h"
#include "models/unet/unet.h"

static uint64_t rng_state = 12345;
static float rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rng_state >> 40) / (double)(1ULL << 24) - 0.5);
}

/* A random F32 tensor added to the writer; returns it (caller unrefs). */
static sd_tensor *put(sd_st_writer *w, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                      int64_t d3) {
    sd_tensor *t = sd_tensor_new4(SD_F32, ndim, d0, d1, d2, d3);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = rnd();
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    return t;
}

static void put_scalar(sd_st_writer *w, const char *name, float v) {
    sd_tensor *t = sd_tensor_new(SD_F32, 0, NULL);
    sd_tensor_f32(t)[0] = v;
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

static sd_lora *write_lora(sd_st_writer *w, const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    sd_error err;
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_lora *l = NULL;
    CHECK_OK(sd_lora_open(path, &l, &err), &err);
    return l;
}

static sd_tensor *host_param(sd_unet *u, const char *key) {
    sd_bt **s = sd_unet_param(u, key);
    CHECK_MSG(s && *s, "no UNet parameter %s", key);
    return s && *s ? sd_bt_to_host(*s) : NULL;
}

/* max |a - (base + delta)| */
static double diff_to(const sd_tensor *a, const sd_tensor *base, const double *delta) {
    double worst = 0;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) {
        double d = fabs((double)sd_tensor_f32(a)[i] - ((double)sd_tensor_f32(base)[i] + delta[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

static int bit_equal(const sd_tensor *a, const sd_tensor *b) {
    return a && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

/* d[i, j] = sum_k up[i, k] * down[k, j] */
static double *mmd(const sd_tensor *up, const sd_tensor *down) {
    int64_t M = up->shape[0], K = down->shape[0], N = sd_tensor_numel(down) / K;
    double *d = calloc((size_t)(M * N), sizeof *d);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                d[i * N + j] += (double)sd_tensor_f32(up)[i * K + k] * sd_tensor_f32(down)[k * N + j];
    return d;
}

static void scale(double *d, int64_t n, double s) {
    for (int64_t i = 0; i < n; i++) d[i] *= s;
}

#define Q "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight" /* [32, 32] */
#define K "input_blocks.1.1.transformer_blocks.0.attn1.to_k.weight"
#define V "input_blocks.1.1.transformer_blocks.0.attn1.to_v.weight"
#define O "input_blocks.1.1.transformer_blocks.0.attn1.to_out.0.weight"
#define OB "input_blocks.1.1.transformer_blocks.0.attn1.to_out.0.bias"
#define CONV "input_blocks.1.0.in_layers.2.weight" /* [32, 32, 3, 3] */
#define FF "input_blocks.1.1.transformer_blocks.0.ff.net.2.weight" /* [32, 128] */

static void run(sd_backend *be, const char *dir, sd_unet *u, sd_text_encoder *te) {
    sd_error err;
    sd_error_clear(&err);

    /* ---- one file with every adapter kind and spelling ---- */
    sd_st_writer *w = sd_st_writer_new();
    /* LoRA via the Kohya diffusers path, alpha 2 rank 4 */
    sd_tensor *q_up = put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", 2, 32, 4, 0, 0);
    sd_tensor *q_dn = put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", 2, 4, 32, 0, 0);
    put_scalar(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.alpha", 2.0f);
    /* LoRA via the Kohya ldm path, no alpha */
    sd_tensor *k_up = put(w, "lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_k.lora_up.weight", 2, 32, 2, 0, 0);
    sd_tensor *k_dn = put(w, "lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_k.lora_down.weight", 2, 2, 32, 0, 0);
    /* LoCon: 1x1 down, 3x3 mid, 1x1 up on a conv; alpha 1 rank 2 */
    sd_tensor *c_up = put(w, "lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", 4, 32, 2, 1, 1);
    sd_tensor *c_dn = put(w, "lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", 4, 2, 32, 1, 1);
    sd_tensor *c_mid = put(w, "lora_unet_down_blocks_0_resnets_0_conv1.lora_mid.weight", 4, 2, 2, 3, 3);
    put_scalar(w, "lora_unet_down_blocks_0_resnets_0_conv1.alpha", 1.0f);
    /* LoHa on to_v (alpha 4, rank 2) */
    sd_tensor *h1a = put(w, "lycoris_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v.hada_w1_a", 2, 32, 2, 0, 0);
    sd_tensor *h1b = put(w, "lycoris_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v.hada_w1_b", 2, 2, 32, 0, 0);
    sd_tensor *h2a = put(w, "lycoris_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v.hada_w2_a", 2, 32, 2, 0, 0);
    sd_tensor *h2b = put(w, "lycoris_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v.hada_w2_b", 2, 2, 32, 0, 0);
    put_scalar(w, "lycoris_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v.alpha", 4.0f);
    /* LoKr on ff.net.2 [32, 128] = kron([4, 8], [8, 16]), full factors: alpha ignored */
    sd_tensor *kr1 = put(w, "diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2.lokr_w1", 2, 4, 8, 0, 0);
    sd_tensor *kr2 = put(w, "diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2.lokr_w2", 2, 8, 16, 0, 0);
    put_scalar(w, "diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2.alpha", 3.0f);
    /* PEFT processor spelling on to_out + a bias diff */
    sd_tensor *o_b = put(w, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out.lora_B.weight", 2, 32, 4, 0, 0);
    sd_tensor *o_a = put(w, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out.lora_A.weight", 2, 4, 32, 0, 0);
    sd_tensor *ob = put(w, "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_out.0.diff_b", 1, 32, 0, 0, 0);
    /* text encoder */
    sd_tensor *t_up = put(w, "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", 2, 128, 4, 0, 0);
    sd_tensor *t_dn = put(w, "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", 2, 4, 128, 0, 0);
    /* ComfyUI does not map plain PEFT attention names, nor unknown modules */
    sd_tensor *x1 = put(w, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight", 2, 4, 32, 0, 0);
    sd_tensor *x2 = put(w, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_B.weight", 2, 32, 4, 0, 0);
    sd_tensor *x3 = put(w, "lora_unet_no_such_block.lora_up.weight", 2, 8, 4, 0, 0);
    sd_lora *lora = write_lora(w, dir, "all.safetensors");
    if (!lora) return;

    sd_lora_plan *plan = NULL, *plan_m = NULL;
    CHECK_OK(sd_lora_plan_new(lora, u, te, &plan, &err), &err);
    CHECK_OK(sd_lora_plan_new(lora, u, NULL, &plan_m, &err), &err);
    if (plan && plan_m) {
        CHECK_MSG(sd_lora_plan_count(plan, SD_LORA_UNET) == 7, "UNet targets %zu",
                  sd_lora_plan_count(plan, SD_LORA_UNET));
        CHECK(sd_lora_plan_count(plan, SD_LORA_CLIP_L) == 1);
        CHECK(sd_lora_plan_unmatched_count(plan) == 3);
        char buf[512];
        sd_lora_plan_unmatched_summary(plan, 2, buf, sizeof buf);
        CHECK_MSG(strstr(buf, "3 LoRA keys matched nothing") && strstr(buf, "lora_unet_no_such_block") &&
                      strstr(buf, "..."),
                  "summary: %s", buf);
        int peft = 0;
        for (size_t i = 0; i < sd_lora_plan_unmatched_count(plan); i++)
            peft += strstr(sd_lora_plan_unmatched(plan, i), ".attn1.to_q.lora_") != NULL;
        CHECK_MSG(peft == 2, "plain PEFT to_q keys must stay unmatched (%d)", peft);
        /* model only: the text-encoder pair is unmatched too */
        CHECK(sd_lora_plan_count(plan_m, SD_LORA_CLIP_L) == 0);
        CHECK(sd_lora_plan_unmatched_count(plan_m) == 5);
    }

    sd_tensor *bq = host_param(u, Q), *bk = host_param(u, K), *bv = host_param(u, V), *bo = host_param(u, O),
              *bob = host_param(u, OB), *bc = host_param(u, CONV), *bff = host_param(u, FF);
    sd_unet *view = NULL, *view2 = NULL, *view0 = NULL;
    double s = 0.8;
    sd_lora_use use = {plan, s};
    CHECK_OK(sd_lora_unet_view(u, &use, 1, &view, &err), &err);
    if (view && bq) {
        double tol = 2e-6;
        double *d = mmd(q_up, q_dn);
        scale(d, 32 * 32, s * 2.0 / 4.0);
        sd_tensor *a = host_param(view, Q);
        CHECK_MSG(diff_to(a, bq, d) < tol, "LoRA (alpha) to_q: %g", diff_to(a, bq, d));
        sd_tensor_unref(a);
        free(d);

        d = mmd(k_up, k_dn);
        scale(d, 32 * 32, s);
        a = host_param(view, K);
        CHECK_MSG(diff_to(a, bk, d) < tol, "LoRA (no alpha, ldm name) to_k: %g", diff_to(a, bk, d));
        sd_tensor_unref(a);
        free(d);

        /* LoCon: down'[j, i, q] = sum_k down[k, i] mid[j, k, q] */
        sd_tensor *nd = sd_tensor_new4(SD_F32, 4, 2, 32, 3, 3);
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 32; i++)
                for (int q = 0; q < 9; q++) {
                    double acc = 0;
                    for (int k = 0; k < 2; k++)
                        acc += (double)sd_tensor_f32(c_dn)[k * 32 + i] * sd_tensor_f32(c_mid)[(j * 2 + k) * 9 + q];
                    sd_tensor_f32(nd)[(j * 32 + i) * 9 + q] = (float)acc;
                }
        d = mmd(c_up, nd);
        scale(d, 32 * 32 * 9, s * 1.0 / 2.0);
        a = host_param(view, CONV);
        CHECK_MSG(diff_to(a, bc, d) < tol, "LoCon conv: %g", diff_to(a, bc, d));
        sd_tensor_unref(a);
        sd_tensor_unref(nd);
        free(d);

        double *m1 = mmd(h1a, h1b), *m2 = mmd(h2a, h2b);
        for (int i = 0; i < 32 * 32; i++) m1[i] *= m2[i] * s * 4.0 / 2.0;
        a = host_param(view, V);
        CHECK_MSG(diff_to(a, bv, m1) < tol, "LoHa to_v: %g", diff_to(a, bv, m1));
        sd_tensor_unref(a);
        free(m1);
        free(m2);

        d = calloc(32 * 128, sizeof *d);
        for (int i1 = 0; i1 < 4; i1++)
            for (int i2 = 0; i2 < 8; i2++)
                for (int j1 = 0; j1 < 8; j1++)
                    for (int j2 = 0; j2 < 16; j2++)
                        d[(i1 * 8 + i2) * 128 + j1 * 16 + j2] =
                            s * sd_tensor_f32(kr1)[i1 * 8 + j1] * sd_tensor_f32(kr2)[i2 * 16 + j2];
        a = host_param(view, FF);
        CHECK_MSG(diff_to(a, bff, d) < tol, "LoKr ff.net.2: %g", diff_to(a, bff, d));
        sd_tensor_unref(a);
        free(d);

        d = mmd(o_b, o_a);
        scale(d, 32 * 32, s);
        a = host_param(view, O);
        CHECK_MSG(diff_to(a, bo, d) < tol, "PEFT processor to_out: %g", diff_to(a, bo, d));
        sd_tensor_unref(a);
        free(d);
        d = calloc(32, sizeof *d);
        for (int i = 0; i < 32; i++) d[i] = s * sd_tensor_f32(ob)[i];
        a = host_param(view, OB);
        CHECK_MSG(diff_to(a, bob, d) < tol, "bias diff: %g", diff_to(a, bob, d));
        sd_tensor_unref(a);
        free(d);

        /* untouched parameters are shared, not copied */
        sd_bt **vs = sd_unet_param(view, "out.2.weight"), **bs = sd_unet_param(u, "out.2.weight");
        CHECK(vs && bs && (*vs)->data == (*bs)->data);
        vs = sd_unet_param(view, Q);
        bs = sd_unet_param(u, Q);
        CHECK(vs && bs && (*vs)->data != (*bs)->data);
    }

    /* stacking: the same LoRA twice = strengths added; strength 0 = base */
    sd_lora_use two[2] = {{plan, 0.5}, {plan, 0.3}};
    CHECK_OK(sd_lora_unet_view(u, two, 2, &view2, &err), &err);
    if (view2 && bk) {
        double *d = mmd(k_up, k_dn);
        scale(d, 32 * 32, 0.8);
        sd_tensor *a = host_param(view2, K);
        CHECK_MSG(diff_to(a, bk, d) < 2e-6, "stacked to_k: %g", diff_to(a, bk, d));
        sd_tensor_unref(a);
        free(d);
    }
    sd_lora_use zero = {plan, 0.0};
    CHECK_OK(sd_lora_unet_view(u, &zero, 1, &view0, &err), &err);
    if (view0) {
        sd_tensor *a = host_param(view0, Q);
        CHECK_MSG(bit_equal(a, bq), "strength 0 changed to_q");
        sd_tensor_unref(a);
    }
    sd_unet_free(view);
    sd_unet_free(view2);
    sd_unet_free(view0);
    {
        sd_tensor *a = host_param(u, Q);
        CHECK_MSG(bit_equal(a, bq), "the base to_q changed");
        sd_tensor_unref(a);
    }

    /* text encoder view */
    sd_text_encoder *tv = NULL;
    sd_lora_use tuse = {plan, 0.6};
    CHECK_OK(sd_lora_text_encoder_view(te, &tuse, 1, &tv, &err), &err);
    if (tv) {
        const char *key = "text_model.encoder.layers.0.self_attn.q_proj.weight";
        sd_bt **bs = sd_clip_param((sd_clip *)sd_text_encoder_clip_l(te), key, NULL, NULL);
        sd_bt **vs = sd_clip_param((sd_clip *)sd_text_encoder_clip_l(tv), key, NULL, NULL);
        sd_tensor *b = bs ? sd_bt_to_host(*bs) : NULL, *a = vs ? sd_bt_to_host(*vs) : NULL;
        double *d = mmd(t_up, t_dn);
        scale(d, 128 * 128, 0.6);
        CHECK_MSG(a && b && diff_to(a, b, d) < 2e-6, "text encoder q_proj");
        free(d);
        sd_tensor_unref(a);
        sd_tensor_unref(b);
        CHECK(sd_text_encoder_tokenizer(tv) == sd_text_encoder_tokenizer(te));
        sd_text_encoder_free(tv);
    }

    sd_tensor *all[] = {q_up, q_dn, k_up, k_dn, c_up, c_dn, c_mid, h1a, h1b, h2a, h2b, kr1, kr2,
                        o_b, o_a, ob, t_up, t_dn, x1, x2, x3, bq, bk, bv, bo, bob, bc, bff};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_tensor_unref(all[i]);
    sd_lora_plan_unref(plan);
    sd_lora_plan_unref(plan_m);
    sd_lora_unref(lora);

    /* a LoRA made for another shape: left out of the plan (as ComfyUI), listed
     * with the key, the target and both shapes */
    w = sd_st_writer_new();
    sd_tensor_unref(put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", 2, 320, 4, 0, 0));
    sd_tensor_unref(put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", 2, 4, 320, 0, 0));
    lora = write_lora(w, dir, "misfit.safetensors");
    plan = NULL;
    if (lora) {
        sd_status rc = sd_lora_plan_new(lora, u, te, &plan, &err);
        const char *why = rc == SD_OK ? sd_lora_plan_skipped(plan, 0) : NULL;
        CHECK_MSG(rc == SD_OK && sd_lora_plan_count(plan, SD_LORA_UNET) == 0 && sd_lora_plan_skipped_count(plan) == 1 &&
                      why && strstr(why, "does not fit") && strstr(why, "attn1_to_q") && strstr(why, "attn1.to_q.weight' is ["),
                  "misfit: %s", rc ? err.msg : why ? why : "(none left out)");
        char sum[512];
        CHECK(strstr(sd_lora_plan_skipped_summary(plan, 3, sum, sizeof sum), "1 LoRA patch did not fit") != NULL);
        sd_lora_plan_unref(plan);
        plan = NULL;
    }
    sd_lora_unref(lora);

    /* an SDXL-only LoRA on SD1: nothing matches, every key reported */
    w = sd_st_writer_new();
    sd_tensor_unref(put(w, "lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_up.weight", 2, 8, 4, 0, 0));
    sd_tensor_unref(put(w, "lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", 2, 4, 8, 0, 0));
    lora = write_lora(w, dir, "sdxl.safetensors");
    if (lora) {
        CHECK_OK(sd_lora_plan_new(lora, u, te, &plan, &err), &err);
        if (plan) {
            CHECK(sd_lora_plan_count(plan, SD_LORA_UNET) + sd_lora_plan_count(plan, SD_LORA_CLIP_L) == 0);
            CHECK(sd_lora_plan_unmatched_count(plan) == 2);
        }
        sd_lora_plan_unref(plan);
    }
    sd_lora_unref(lora);

    /* DoRA is refused, not applied wrongly */
    w = sd_st_writer_new();
    sd_tensor_unref(put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", 2, 32, 4, 0, 0));
    sd_tensor_unref(put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", 2, 4, 32, 0, 0));
    sd_tensor_unref(put(w, "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.dora_scale", 2, 32, 1, 0, 0));
    lora = write_lora(w, dir, "dora.safetensors");
    plan = NULL;
    if (lora) {
        sd_status rc = sd_lora_plan_new(lora, u, te, &plan, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && strstr(err.msg, "dora_scale"), "DoRA: %s", err.msg);
    }
    sd_lora_unref(lora);

    /* not a safetensors file */
    char path[1024];
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    lora = NULL;
    CHECK(sd_lora_open(path, &lora, &err) != SD_OK && lora == NULL);
    (void)be;
}

/* SDXL names on the tiny SDXL checkpoint of the reference data (when
 * present): lora_te1_ -> CLIP-L, lora_te2_ -> bigG, whose k_proj is the
 * middle third of the fused in_proj rows. */
static void run_sdxl(sd_backend *be, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tiny-sdxl.safetensors", sd_test_testdata_dir());
    sd_st_file *f = NULL;
    if (sd_st_open(path, &f, NULL) != SD_OK) {
        printf("  (no %s: SDXL names not checked)\n", path);
        return;
    }
    sd_error err;
    sd_error_clear(&err);
    sd_text_encoder *te = NULL, *tv = NULL;
    CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    sd_st_writer *w = sd_st_writer_new();
    sd_tensor *gu = put(w, "lora_te2_text_model_encoder_layers_1_self_attn_k_proj.lora_up.weight", 2, 192, 4, 0, 0);
    sd_tensor *gd = put(w, "lora_te2_text_model_encoder_layers_1_self_attn_k_proj.lora_down.weight", 2, 4, 192, 0, 0);
    sd_tensor *lu = put(w, "lora_te1_text_model_encoder_layers_1_mlp_fc2.lora_up.weight", 2, 128, 4, 0, 0);
    sd_tensor *ld = put(w, "lora_te1_text_model_encoder_layers_1_mlp_fc2.lora_down.weight", 2, 4, 512, 0, 0);
    sd_lora *lora = write_lora(w, dir, "sdxl_te.safetensors");
    sd_lora_plan *plan = NULL;
    if (te && lora) CHECK_OK(sd_lora_plan_new(lora, NULL, te, &plan, &err), &err);
    if (plan) {
        CHECK(sd_lora_plan_count(plan, SD_LORA_CLIP_G) == 1 && sd_lora_plan_count(plan, SD_LORA_CLIP_L) == 1);
        CHECK(sd_lora_plan_unmatched_count(plan) == 0);
        sd_lora_use use = {plan, 0.5};
        CHECK_OK(sd_lora_text_encoder_view(te, &use, 1, &tv, &err), &err);
    }
    if (tv) {
        int64_t r0 = -1, rows = -1;
        const char *k = "text_model.encoder.layers.1.self_attn.k_proj.weight";
        sd_bt **bs = sd_clip_param((sd_clip *)sd_text_encoder_clip_g(te), k, &r0, &rows);
        sd_bt **vs = sd_clip_param((sd_clip *)sd_text_encoder_clip_g(tv), k, NULL, NULL);
        CHECK(bs && vs && r0 == 192 && rows == 192 && (*bs)->shape[0] == 576);
        if (bs && vs) {
            sd_tensor *b = sd_bt_to_host(*bs), *a = sd_bt_to_host(*vs);
            double *d = mmd(gu, gd);
            scale(d, 192 * 192, 0.5);
            double worst = 0, other = 0;
            for (int64_t i = 0; i < 576 * 192; i++) {
                double want = sd_tensor_f32(b)[i] + (i >= 192 * 192 && i < 384 * 192 ? d[i - 192 * 192] : 0.0);
                double e = fabs(sd_tensor_f32(a)[i] - want);
                if (i >= 192 * 192 && i < 384 * 192) worst = fmax(worst, e);
                else other = fmax(other, e);
            }
            CHECK_MSG(worst < 2e-6 && other == 0.0, "bigG fused k rows: %g, other rows %g", worst, other);
            free(d);
            sd_tensor_unref(a);
            sd_tensor_unref(b);
        }
        const char *f2 = "text_model.encoder.layers.1.mlp.fc2.weight";
        bs = sd_clip_param((sd_clip *)sd_text_encoder_clip_l(te), f2, NULL, NULL);
        vs = sd_clip_param((sd_clip *)sd_text_encoder_clip_l(tv), f2, NULL, NULL);
        if (bs && vs) {
            sd_tensor *b = sd_bt_to_host(*bs), *a = sd_bt_to_host(*vs);
            double *d = mmd(lu, ld);
            scale(d, 128 * 512, 0.5);
            CHECK_MSG(diff_to(a, b, d) < 2e-6, "CLIP-L fc2 via lora_te1_");
            free(d);
            sd_tensor_unref(a);
            sd_tensor_unref(b);
        }
    }
    sd_tensor_unref(gu);
    sd_tensor_unref(gd);
    sd_tensor_unref(lu);
    sd_tensor_unref(ld);
    sd_text_encoder_free(tv);
    sd_lora_plan_unref(plan);
    sd_lora_unref(lora);
    sd_text_encoder_free(te);
    sd_st_close(f);
}

int main(void) {
    const char *dir = sd_test_tmpdir("lora");
    char ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/tiny-sd1.safetensors", dir);
    sd_error err;
    sd_error_clear(&err);
    const sd_synth_config *cfg = sd_synth_preset("sd1-tiny");
    CHECK(cfg != NULL);
    if (!cfg) return sd_test_finish();
    CHECK_OK(sd_synth_sd1_write(cfg, 7, ckpt, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(ckpt, &f, &err), &err);
    sd_unet *u = NULL;
    sd_text_encoder *te = NULL;
    if (be && f) {
        CHECK_OK(sd_unet_load(be, f, NULL, SD_F32, &u, &err), &err);
        CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    }
    if (u && te) run(be, dir, u, te);
    if (be) run_sdxl(be, dir);
    sd_unet_free(u);
    sd_text_encoder_free(te);
    sd_st_close(f);
    sd_backend_free(be);
    return sd_test_finish();
}
