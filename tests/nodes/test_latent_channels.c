/* test_latent_channels.c - comfy.sample.fix_empty_latent_channels in the
 * sampling nodes, on random-weight models synthesized here (a tiny SD1
 * checkpoint and a tiny Flux schnell DiT, no shared data needed):
 *   - Flux: KSampler, KSamplerAdvanced and SamplerCustomAdvanced given
 *     EmptyLatentImage's 4-channel zeros sample a 16-channel latent, and it
 *     is the latent the 16-channel zeros of EmptySD3LatentImage give (the
 *     same computation, bit for bit); other keys of the LATENT are kept;
 *     KSampler at denoise 0 (no step) hands the widened zeros back, as
 *     ComfyUI returns its fixed latent;
 *   - SD1: a 16-channel all-zero latent is cut to 4 channels;
 *   - a 4-channel latent that is not all zeros is refused by name
 *     (latent_image), and -0.0 counts as zero (torch.count_nonzero). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/node.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;

static sd_value *run1(const char *type, const char *const *names, sd_value **vals, int n,
                      const int *owned, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run1_named(&ctx, names, vals, n, owned, err);
}

static int bit_equal(const sd_tensor *a, const sd_tensor *b) {
    return a && b && a->ndim == b->ndim && a->nbytes == b->nbytes &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape) == 0 &&
           memcmp(a->data, b->data, a->nbytes) == 0;
}

/* A LATENT of zeros [1, c, h, w] with a batch_index key (kept through sampling). */
static sd_value *zeros(int c, int h, int w, float fill0) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, 1, c, h, w);
    sd_tensor_f32(t)[0] = fill0;
    sd_value *l = nt_latent(t);
    sd_value *bi = sd_value_list();
    sd_value_list_append(bi, sd_value_int(0));
    sd_value_dict_set(l, "batch_index", bi);
    return l;
}

/* A Flux CONDITIONING made by hand: T5-like tokens and a pooled vector. */
static sd_value *flux_cond(int ctx_dim, int pooled_dim, unsigned seed) {
    sd_value *list = sd_value_list(), *d = sd_value_dict();
    sd_tensor *c = sd_tensor_new4(SD_F32, 3, 1, 7, ctx_dim, 0), *p = sd_tensor_new4(SD_F32, 2, 1, pooled_dim, 0, 0);
    nt_fill(c, seed);
    nt_fill(p, seed + 1);
    sd_value_dict_set(d, "cond", nt_tensor_value(c));
    sd_value_dict_set(d, "pooled_output", nt_tensor_value(p));
    sd_value_list_append(list, d);
    return list;
}

/* An SD1 CONDITIONING: 77 tokens of 128 (the tiny checkpoint's context). */
static sd_value *sd1_cond(unsigned seed) {
    sd_value *list = sd_value_list(), *d = sd_value_dict();
    sd_tensor *c = sd_tensor_new4(SD_F32, 3, 1, 77, 128, 0);
    nt_fill(c, seed);
    sd_value_dict_set(d, "cond", nt_tensor_value(c));
    sd_value_list_append(list, d);
    return list;
}

static sd_value *ksampler(sd_value *model, sd_value *pos, sd_value *neg, sd_value *latent, double denoise,
                          sd_error *err) {
    const char *n[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                       "latent_image", "denoise"};
    sd_value *v[] = {model, sd_value_int(5), sd_value_int(2), sd_value_float(1.0), sd_value_string("euler"),
                     sd_value_string("simple"), pos, neg, latent, sd_value_float(denoise)};
    const int own[] = {0, 1, 1, 1, 1, 1, 0, 0, 0, 1};
    return run1("KSampler", n, v, 10, own, err);
}

static sd_value *ksampler_adv(sd_value *model, sd_value *pos, sd_value *neg, sd_value *latent, sd_error *err) {
    const char *n[] = {"model", "add_noise", "noise_seed", "steps", "cfg", "sampler_name", "scheduler",
                       "positive", "negative", "latent_image", "start_at_step", "end_at_step",
                       "return_with_leftover_noise"};
    sd_value *v[] = {model, sd_value_string("enable"), sd_value_int(9), sd_value_int(3), sd_value_float(1.0),
                     sd_value_string("euler"), sd_value_string("simple"), pos, neg, latent, sd_value_int(1),
                     sd_value_int(3), sd_value_string("disable")};
    const int own[] = {0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1};
    return run1("KSamplerAdvanced", n, v, 13, own, err);
}

/* RandomNoise + BasicGuider + KSamplerSelect + BasicScheduler + SamplerCustomAdvanced:
 * out[0] output, out[1] denoised_output. */
static sd_status custom_adv(sd_value *model, sd_value *pos, sd_value *latent, sd_value **out, sd_error *err) {
    out[0] = out[1] = NULL;
    const char *nn[] = {"noise_seed"};
    sd_value *nv[] = {sd_value_int(11)};
    const int o1[] = {1, 1, 1, 1};
    sd_value *noise = run1("RandomNoise", nn, nv, 1, o1, err);
    const char *gn[] = {"model", "conditioning"};
    sd_value *gv[] = {model, pos};
    const int o0[] = {0, 0};
    sd_value *guider = run1("BasicGuider", gn, gv, 2, o0, err);
    const char *sn[] = {"sampler_name"};
    sd_value *sv[] = {sd_value_string("euler")};
    sd_value *sampler = run1("KSamplerSelect", sn, sv, 1, o1, err);
    const char *bn[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *bv[] = {model, sd_value_string("simple"), sd_value_int(2), sd_value_float(1.0)};
    const int ob[] = {0, 1, 1, 1};
    sd_value *sigmas = run1("BasicScheduler", bn, bv, 4, ob, err);
    sd_status rc = SD_ERR_INVALID;
    if (noise && guider && sampler && sigmas) {
        const char *an[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
        sd_value *av[] = {noise, guider, sampler, sigmas, latent};
        sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = "SamplerCustomAdvanced"};
        rc = nt_run_named(&ctx, an, av, 5, out, err);
    }
    sd_value_unref(noise);
    sd_value_unref(guider);
    sd_value_unref(sampler);
    sd_value_unref(sigmas);
    return rc;
}

static const sd_tensor *samples(const sd_value *l) { return l ? sd_value_dict_tensor(l, "samples") : NULL; }

static int has_shape(const sd_tensor *t, int64_t b, int64_t c, int64_t h, int64_t w) {
    return t && t->ndim == 4 && t->shape[0] == b && t->shape[1] == c && t->shape[2] == h && t->shape[3] == w;
}

static void test_flux(sd_value *model) {
    sd_error err;
    sd_value *pos = flux_cond(64, 128, 3), *neg = flux_cond(64, 128, 7);
    sd_value *l4 = zeros(4, 6, 10, 0.0f), *l16 = zeros(16, 6, 10, 0.0f), *lneg0 = zeros(4, 6, 10, -0.0f);

    sd_value *a = ksampler(model, pos, neg, l4, 1.0, &err), *b = ksampler(model, pos, neg, l16, 1.0, &err);
    sd_value *c = ksampler(model, pos, neg, lneg0, 1.0, &err);
    CHECK_MSG(has_shape(samples(a), 1, 16, 6, 10), "KSampler on a 4-channel empty latent gives 16 channels");
    CHECK_MSG(bit_equal(samples(a), samples(b)), "KSampler: widened zeros sample as EmptySD3LatentImage's");
    CHECK_MSG(bit_equal(samples(c), samples(b)), "KSampler: -0.0 counts as zero");
    CHECK_MSG(a && sd_value_dict_get(a, "batch_index"), "KSampler keeps the LATENT's other keys");
    nt_free_values((sd_value *[]){a, b, c}, 3);

    a = ksampler_adv(model, pos, neg, l4, &err);
    b = ksampler_adv(model, pos, neg, l16, &err);
    CHECK_MSG(has_shape(samples(a), 1, 16, 6, 10) && bit_equal(samples(a), samples(b)),
              "KSamplerAdvanced widens the empty latent");
    nt_free_values((sd_value *[]){a, b}, 2);

    /* no step: ComfyUI hands back its fixed latent, 16 zero channels */
    a = ksampler(model, pos, neg, l4, 0.0, &err);
    const sd_tensor *t = samples(a);
    int nz = 0;
    for (int64_t i = 0; t && i < sd_tensor_numel(t); i++) nz += sd_tensor_f32((sd_tensor *)t)[i] != 0.0f;
    CHECK_MSG(has_shape(t, 1, 16, 6, 10) && nz == 0, "KSampler at denoise 0 returns the widened zeros");
    sd_value_unref(a);

    sd_value *o4[2], *o16[2];
    CHECK_OK(custom_adv(model, pos, l4, o4, &err), &err);
    CHECK_OK(custom_adv(model, pos, l16, o16, &err), &err);
    CHECK_MSG(has_shape(samples(o4[0]), 1, 16, 6, 10) && bit_equal(samples(o4[0]), samples(o16[0])),
              "SamplerCustomAdvanced: output widened as from EmptySD3LatentImage");
    CHECK_MSG(bit_equal(samples(o4[1]), samples(o16[1])), "SamplerCustomAdvanced: denoised_output too");
    nt_free_values(o4, 2);
    nt_free_values(o16, 2);

    /* a latent with content keeps its channels: the sampler names the input */
    sd_value *full = zeros(4, 6, 10, 0.25f);
    const char *n[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                       "latent_image", "denoise"};
    sd_value *v[] = {model, sd_value_int(5), sd_value_int(2), sd_value_float(1.0), sd_value_string("euler"),
                     sd_value_string("simple"), pos, neg, full, sd_value_float(1.0)};
    sd_value *out[1] = {NULL};
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = "KSampler"};
    sd_status rc = nt_run_named(&ctx, n, v, 10, out, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && !out[0] && strcmp(err.input, "latent_image") == 0 &&
                  strstr(err.msg, "4 channels"),
              "a 4-channel latent with content is refused naming latent_image (%s)", err.msg);
    nt_free_values(out, 1);
    nt_free_values((sd_value *[]){v[1], v[2], v[3], v[4], v[5], v[9], full}, 7);
    nt_free_values((sd_value *[]){pos, neg, l4, l16, lneg0}, 5);
}

static void test_sd1(sd_value *model) {
    sd_error err;
    sd_value *pos = sd1_cond(1), *neg = sd1_cond(2);
    sd_value *l16 = zeros(16, 4, 6, 0.0f), *l4 = zeros(4, 4, 6, 0.0f);
    sd_value *a = ksampler(model, pos, neg, l16, 1.0, &err), *b = ksampler(model, pos, neg, l4, 1.0, &err);
    CHECK_MSG(has_shape(samples(a), 1, 4, 4, 6) && bit_equal(samples(a), samples(b)),
              "SD1: a 16-channel empty latent is cut to the UNet's 4 channels");
    nt_free_values((sd_value *[]){a, b, pos, neg, l16, l4}, 6);
}

int main(void) {
    nt_tiny_sd1 t;
    nt_tiny_sd1_init(&t, "nodes_latent_channels");
    g_env = &t.env;
    sd_error err;
    char dir[4300], path[4400];
    snprintf(dir, sizeof dir, "%s/diffusion_models", t.models);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/flux-schnell-tiny.safetensors", dir);
    CHECK_OK(sd_synth_flux_write(sd_synth_flux_preset("flux-schnell-tiny"), SD_SYNTH_FLUX_DIT, 4, path, &err), &err);

    const char *un[] = {"unet_name", "weight_dtype"};
    sd_value *uv[] = {sd_value_string("flux-schnell-tiny.safetensors"), sd_value_string("default")};
    const int own[] = {1, 1};
    sd_value *flux = run1("UNETLoader", un, uv, 2, own, &err);
    CHECK_MSG(flux != NULL, "UNETLoader: %s", err.msg);
    if (flux) test_flux(flux);
    sd_value_unref(flux);

    const char *cn[] = {"ckpt_name"};
    sd_value *cv[] = {sd_value_string("tiny.safetensors")};
    sd_value *ck = NULL;
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = "CheckpointLoaderSimple"};
    sd_value *outs[3] = {0};
    CHECK_OK(nt_run_named(&ctx, cn, cv, 1, outs, &err), &err);
    ck = outs[0];
    if (ck) test_sd1(ck);
    nt_free_values(outs, 3);
    sd_value_unref(cv[0]);
    nt_tiny_sd1_free(&t);
    return sd_test_finish();
}
