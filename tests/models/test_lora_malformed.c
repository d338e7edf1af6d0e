/* test_lora_malformed.c - a LoRA file is untrusted input: every malformed
 * adapter of issue 14 is built here with the safetensors writer and must be
 * refused with an error naming the file and the offending tensor, before
 * any patch arithmetic runs (under ASan, an out-of-bounds read or write in
 * the patch code fails this test even where the error comes out right).
 *
 * Cases: LoCon lora_mid disagreeing with down (was a heap overflow WRITE),
 * up/down rank mismatch, rank 0 (was SIGFPE), LoHa w1_a/w1_b rank mismatch
 * and a mismatched Tucker core (were out-of-bounds reads), a lone hada_t1,
 * LoKr factors that do not multiply out (out-of-bounds read), a 3-D
 * lokr_w2, a wrong lokr_t2, NaN/Inf in a factor (was an all-black image),
 * a non-finite or non-scalar alpha. A well-formed adapter that does not fit
 * its target (LoKr factors multiplying out to another size, a full diff /
 * diff_b of the wrong shape) is left out of the plan, as ComfyUI leaves it
 * out, and listed with the key and the reason (sd_lora_plan_skipped).
 * The well-formed file of each kind is applied, so the checks are not
 * refusing everything. */
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

static uint64_t rng_state = 99;
static float rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rng_state >> 40) / (double)(1ULL << 24) - 0.5);
}

/* Adds a random F32 tensor of ndim dims (d[] of 4) to w. */
static void put(sd_st_writer *w, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                int64_t d3) {
    int64_t s[4] = {d0, d1, d2, d3};
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, s);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = rnd();
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

/* Same with value v at index 1 (NaN, Inf). */
static void put_bad(sd_st_writer *w, const char *name, int ndim, int64_t d0, int64_t d1, float v) {
    int64_t s[2] = {d0, d1};
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, s);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = rnd();
    sd_tensor_f32(t)[1] = v;
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

static void put_alpha(sd_st_writer *w, const char *name, int n, float v) {
    int64_t s[1] = {n};
    sd_tensor *t = sd_tensor_new(SD_F32, n == 1 ? 0 : 1, s);
    for (int i = 0; i < n; i++) sd_tensor_f32(t)[i] = v;
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

/* Module names on the tiny SD1 UNet. */
#define MQ "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q" /* [32, 32] */
#define MC "lora_unet_down_blocks_0_resnets_0_conv1"                              /* [32, 32, 3, 3] */
#define MF "diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2"     /* [32, 128] */
#define MO "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_out.0"

typedef struct tcase {
    const char *name;
    void (*build)(sd_st_writer *w);
    const char *key; /* the tensor the error must name; NULL: a valid file */
    const char *what; /* and a word of the reason */
} tcase;

/* ---- well-formed files of every kind ---- */
static void ok_lora(sd_st_writer *w) {
    put(w, MQ ".lora_up.weight", 2, 32, 4, 0, 0);
    put(w, MQ ".lora_down.weight", 2, 4, 32, 0, 0);
    put_alpha(w, MQ ".alpha", 1, 2.0f);
}
static void ok_locon(sd_st_writer *w) {
    put(w, MC ".lora_up.weight", 4, 32, 2, 1, 1);
    put(w, MC ".lora_down.weight", 4, 2, 32, 1, 1);
    put(w, MC ".lora_mid.weight", 4, 2, 2, 3, 3);
}
static void ok_loha_tucker(sd_st_writer *w) {
    put(w, MC ".hada_w1_a", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w1_b", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w2_a", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w2_b", 2, 2, 32, 0, 0);
    put(w, MC ".hada_t1", 4, 2, 2, 3, 3);
    put(w, MC ".hada_t2", 4, 2, 2, 3, 3);
}
static void ok_lokr(sd_st_writer *w) {
    put(w, MF ".lokr_w1_a", 2, 4, 2, 0, 0);
    put(w, MF ".lokr_w1_b", 2, 2, 8, 0, 0);
    put(w, MF ".lokr_w2", 2, 8, 16, 0, 0);
}
static void ok_lokr_tucker(sd_st_writer *w) {
    put(w, MC ".lokr_w1", 2, 4, 4, 0, 0);
    put(w, MC ".lokr_w2_a", 2, 2, 8, 0, 0);
    put(w, MC ".lokr_w2_b", 2, 2, 8, 0, 0);
    put(w, MC ".lokr_t2", 4, 2, 2, 3, 3);
}
static void ok_diff(sd_st_writer *w) {
    put(w, MO ".diff", 2, 32, 32, 0, 0);
    put(w, MO ".diff_b", 1, 32, 0, 0, 0);
}

/* ---- malformed ---- */
static void locon_mid(sd_st_writer *w) { /* down [2, 32, 3, 3] with mid: down' overflows */
    put(w, MC ".lora_up.weight", 4, 32, 2, 1, 1);
    put(w, MC ".lora_down.weight", 4, 2, 32, 3, 3);
    put(w, MC ".lora_mid.weight", 4, 2, 2, 3, 3);
}
static void locon_mid_rank(sd_st_writer *w) {
    put(w, MC ".lora_up.weight", 4, 32, 2, 1, 1);
    put(w, MC ".lora_down.weight", 4, 2, 32, 1, 1);
    put(w, MC ".lora_mid.weight", 4, 3, 2, 3, 3);
}
static void lora_rank_mismatch(sd_st_writer *w) {
    put(w, MQ ".lora_up.weight", 2, 32, 4, 0, 0);
    put(w, MQ ".lora_down.weight", 2, 2, 64, 0, 0);
}
static void lora_rank0(sd_st_writer *w) {
    put(w, MQ ".lora_up.weight", 2, 32, 0, 0, 0);
    put(w, MQ ".lora_down.weight", 2, 0, 32, 0, 0);
    put_alpha(w, MQ ".alpha", 1, 1.0f);
}
static void loha_rank(sd_st_writer *w) { /* w1_a [32, 2] @ w1_b [3, 32] */
    put(w, MQ ".hada_w1_a", 2, 32, 2, 0, 0);
    put(w, MQ ".hada_w1_b", 2, 3, 32, 0, 0);
    put(w, MQ ".hada_w2_a", 2, 32, 2, 0, 0);
    put(w, MQ ".hada_w2_b", 2, 2, 32, 0, 0);
}
static void loha_tucker(sd_st_writer *w) { /* t1 [3, 3, 3, 3] with factors of rank 2 */
    put(w, MC ".hada_w1_a", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w1_b", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w2_a", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w2_b", 2, 2, 32, 0, 0);
    put(w, MC ".hada_t1", 4, 3, 3, 3, 3);
    put(w, MC ".hada_t2", 4, 2, 2, 3, 3);
}
static void loha_t1_only(sd_st_writer *w) {
    put(w, MC ".hada_w1_a", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w1_b", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w2_a", 2, 2, 32, 0, 0);
    put(w, MC ".hada_w2_b", 2, 2, 32, 0, 0);
    put(w, MC ".hada_t1", 4, 2, 2, 3, 3);
}
static void loha_shapes(sd_st_writer *w) { /* w1 [32, 32], w2 [16, 64]: same size, not same shape */
    put(w, MQ ".hada_w1_a", 2, 32, 2, 0, 0);
    put(w, MQ ".hada_w1_b", 2, 2, 32, 0, 0);
    put(w, MQ ".hada_w2_a", 2, 16, 2, 0, 0);
    put(w, MQ ".hada_w2_b", 2, 2, 64, 0, 0);
}
static void lokr_factors(sd_st_writer *w) { /* w1_a [4, 2] @ w1_b [3, 8] */
    put(w, MF ".lokr_w1_a", 2, 4, 2, 0, 0);
    put(w, MF ".lokr_w1_b", 2, 3, 8, 0, 0);
    put(w, MF ".lokr_w2", 2, 8, 16, 0, 0);
}
static void lokr_w2_3d(sd_st_writer *w) {
    put(w, MF ".lokr_w1", 2, 4, 8, 0, 0);
    put(w, MF ".lokr_w2", 3, 8, 4, 4, 0);
}
static void lokr_t2(sd_st_writer *w) {
    put(w, MC ".lokr_w1", 2, 4, 4, 0, 0);
    put(w, MC ".lokr_w2_a", 2, 2, 8, 0, 0);
    put(w, MC ".lokr_w2_b", 2, 2, 8, 0, 0);
    put(w, MC ".lokr_t2", 4, 2, 5, 3, 3);
}
static void lokr_kron(sd_st_writer *w) { /* kron [4, 8] x [8, 8]: half the weight */
    put(w, MF ".lokr_w1", 2, 4, 8, 0, 0);
    put(w, MF ".lokr_w2", 2, 8, 8, 0, 0);
}
static void nan_up(sd_st_writer *w) {
    put_bad(w, MQ ".lora_up.weight", 2, 32, 4, NAN);
    put(w, MQ ".lora_down.weight", 2, 4, 32, 0, 0);
}
static void inf_hada(sd_st_writer *w) {
    put(w, MQ ".hada_w1_a", 2, 32, 2, 0, 0);
    put(w, MQ ".hada_w1_b", 2, 2, 32, 0, 0);
    put(w, MQ ".hada_w2_a", 2, 32, 2, 0, 0);
    put_bad(w, MQ ".hada_w2_b", 2, 2, 32, -INFINITY);
}
static void nan_diff(sd_st_writer *w) { put_bad(w, MO ".diff_b", 1, 32, 0, NAN); }
static void alpha_inf(sd_st_writer *w) {
    put(w, MQ ".lora_up.weight", 2, 32, 4, 0, 0);
    put(w, MQ ".lora_down.weight", 2, 4, 32, 0, 0);
    put_alpha(w, MQ ".alpha", 1, INFINITY);
}
static void alpha_vector(sd_st_writer *w) {
    put(w, MQ ".lora_up.weight", 2, 32, 4, 0, 0);
    put(w, MQ ".lora_down.weight", 2, 4, 32, 0, 0);
    put_alpha(w, MQ ".alpha", 4, 1.0f);
}
static void diff_shape(sd_st_writer *w) { put(w, MF ".diff", 2, 128, 32, 0, 0); } /* [32, 128] */
static void diff_b_size(sd_st_writer *w) { put(w, MO ".diff_b", 1, 33, 0, 0, 0); }

static const tcase cases[] = {
    {"lora", ok_lora, NULL, NULL},
    {"locon", ok_locon, NULL, NULL},
    {"loha_tucker", ok_loha_tucker, NULL, NULL},
    {"lokr", ok_lokr, NULL, NULL},
    {"lokr_tucker", ok_lokr_tucker, NULL, NULL},
    {"diff", ok_diff, NULL, NULL},
    {"locon_mid", locon_mid, MC ".lora_down.weight", "lora_mid"},
    {"locon_mid_rank", locon_mid_rank, MC ".lora_mid.weight", "rank"},
    {"lora_rank_mismatch", lora_rank_mismatch, MQ ".lora_up.weight", "rank"},
    {"lora_rank0", lora_rank0, MQ ".lora_up.weight", "empty dimension"},
    {"loha_rank", loha_rank, MQ ".hada_w1_b", "rank"},
    {"loha_tucker_core", loha_tucker, MC ".hada_t1", "Tucker core"},
    {"loha_t1_only", loha_t1_only, MC ".hada_t1", "together"},
    {"loha_shapes", loha_shapes, MQ ".hada_w2_a", "differ in shape"},
    {"lokr_factors", lokr_factors, MF ".lokr_w1_b", "rank"},
    {"lokr_w2_3d", lokr_w2_3d, MF ".lokr_w2", "2-D or 4-D"},
    {"lokr_t2", lokr_t2, MC ".lokr_t2", "Tucker core"},
    {"lokr_kron", lokr_kron, MF "'", "does not fit"},
    {"nan_up", nan_up, MQ ".lora_up.weight", "NaN or Inf"},
    {"inf_hada", inf_hada, MQ ".hada_w2_b", "NaN or Inf"},
    {"nan_diff_b", nan_diff, MO ".diff_b", "NaN or Inf"},
    {"alpha_inf", alpha_inf, MQ ".alpha", "NaN or Inf"},
    {"alpha_vector", alpha_vector, MQ ".alpha", "not a scalar"},
    {"diff_shape", diff_shape, MF "'", "does not fit"},
    {"diff_b_size", diff_b_size, MO "'", "does not fit"},
};

/* Plans and applies one file: a valid one must patch, a bad one must be
 * refused at plan or view time with the file, the key and the reason. */
static void run_case(const tcase *c, const char *dir, sd_unet *u, sd_text_encoder *te) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
    sd_error err;
    sd_error_clear(&err);
    sd_st_writer *w = sd_st_writer_new();
    c->build(w);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_lora *l = NULL;
    CHECK_OK(sd_lora_open(path, &l, &err), &err);
    if (!l) return;
    sd_lora_plan *plan = NULL;
    sd_unet *view = NULL;
    sd_status rc = sd_lora_plan_new(l, u, te, &plan, &err);
    int misfit = c->what && !strcmp(c->what, "does not fit");
    if (misfit) {
        /* left out, not refused: nothing planned, the patch listed with its key */
        const char *why = rc == SD_OK ? sd_lora_plan_skipped(plan, 0) : NULL;
        CHECK_MSG(rc == SD_OK && sd_lora_plan_count(plan, SD_LORA_UNET) == 0 && sd_lora_plan_skipped_count(plan) == 1 &&
                      why && strstr(why, c->key) && strstr(why, c->what),
                  "%s: a misfit patch not left out with its key and reason: %s", c->name, rc ? err.msg : why ? why : "");
        if (why) printf("  %-18s left out: %s\n", c->name, why);
        sd_lora_plan_unref(plan);
        sd_lora_unref(l);
        return;
    }
    if (rc == SD_OK) {
        CHECK_MSG((sd_lora_plan_count(plan, SD_LORA_UNET) == 1 && sd_lora_plan_unmatched_count(plan) == 0) ||
                      !strcmp(c->name, "diff"),
                  "%s: %zu targets, %zu unmatched", c->name, sd_lora_plan_count(plan, SD_LORA_UNET),
                  sd_lora_plan_unmatched_count(plan));
        sd_lora_use use = {plan, 0.7};
        rc = sd_lora_unet_view(u, &use, 1, &view, &err);
    }
    if (!c->key) {
        CHECK_MSG(rc == SD_OK && view, "%s: a valid file was refused: %s", c->name, err.msg);
    } else {
        CHECK_MSG(rc != SD_OK && !view, "%s: a malformed LoRA was accepted", c->name);
        CHECK_MSG(rc == SD_OK || (strstr(err.msg, path) && strstr(err.msg, c->key) && strstr(err.msg, c->what)),
                  "%s: error lacks file, '%s' or '%s': %s", c->name, c->key, c->what, err.msg);
        if (rc) printf("  %-18s %s\n", c->name, err.msg + strlen(dir) + 1);
    }
    sd_unet_free(view);
    sd_lora_plan_unref(plan);
    sd_lora_unref(l);
}

int main(void) {
    const char *dir = sd_test_tmpdir("lora_malformed");
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
    if (u && te)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], dir, u, te);
    sd_unet_free(u);
    sd_text_encoder_free(te);
    sd_st_close(f);
    sd_backend_free(be);
    return sd_test_finish();
}
