/* test_model_patches.c - MODEL / CLIP patches of nodes/model on the tiny SD1
 * checkpoint of the shared test data (model1) and a second random-weight
 * checkpoint synthesized as `sdflow synth --preset sd1-tiny --seed 7` does
 * (model2):
 *   - ModelMergeSimple at ratio 1 is model1 and at ratio 0 model2, weight for
 *     weight; at 0.5 it equals a checkpoint whose weights this test averages
 *     itself and writes with the safetensors writer (every UNet weight, and a
 *     KSampler run bit for bit); ModelMergeSubtract / ModelMergeAdd follow
 *     W1 * m - m * W2 and W1 + W2; CLIPMergeSimple / CLIPMergeAdd likewise
 *     on the text encoder; a LoRA after a merge equals the LoRA on the
 *     averaged checkpoint, and model2's own LoRA comes along into the merge;
 *     the parameter walk reaches every UNet key of the file exactly once;
 *   - ModelSamplingDiscrete eps leaves KSampler's latent as it was, other
 *     kinds and zsnr change the schedule the sampling nodes see (BasicScheduler
 *     = the schedule of that ModelSamplingDiscrete), LoRA loaders keep the
 *     patch; RescaleCFG reaches KSampler and SamplerCustom alike;
 *   - ComfyUI's own merged weights (tests/data/merge, made by its
 *     ModelMergeSimple / Subtract / Add, CLIPMergeSimple / Subtract and a LoRA
 *     before and inside a merge on the same two checkpoints) come out;
 *   - errors name the input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/rng.h"
#include "models/sampling/schedules.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;

static sd_status run(const char *type, const char *const *names, sd_value *const *vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

/* One output; vals[i] released when owned[i]. */
static sd_value *run1(const char *type, const char *const *names, sd_value **vals, int n,
                      const int *owned) {
    sd_error err;
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run1_named(&ctx, names, vals, n, owned, &err);
}

static void load(const char *file, sd_value *ck[3]) {
    sd_error err;
    sd_value *name = sd_value_string(file);
    CHECK_OK(run("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &name, 1, ck, &err), &err);
    sd_value_unref(name);
}

static sd_value *merge2(const char *type, const char *a, const char *b, sd_value *x, sd_value *y,
                        const char *arg, double v) {
    const char *n[] = {a, b, arg};
    sd_value *vals[] = {x, y, arg ? sd_value_float(v) : NULL};
    const int own[] = {0, 0, 1};
    return run1(type, n, vals, arg ? 3 : 2, own);
}

static sd_unet *unet_of(const sd_value *m) {
    sd_error err;
    sd_model_ref *r = m ? sd_value_as_handle(m, &sd_handle_model) : NULL;
    sd_unet *u = NULL;
    if (r) CHECK_OK(sd_nodes_model_unet(r, &u, &err), &err);
    CHECK(u != NULL);
    return u;
}

static sd_text_encoder *te_of(const sd_value *c) {
    sd_error err;
    sd_clip_ref *r = c ? sd_value_as_handle(c, &sd_handle_clip) : NULL;
    sd_text_encoder *t = NULL;
    if (r) CHECK_OK(sd_nodes_clip_encoder(r, &t, &err), &err);
    CHECK(t != NULL);
    return t;
}

/* ---- weight comparisons ------------------------------------------------------------------- */

/* expected(w1, w2) for one weight; NULL = equal to the reference model's */
typedef float (*expect_fn)(float w1, float w2);

typedef struct cmp {
    void *ref1, *ref2; /* sd_unet or sd_clip: model1 / model2 (or the expected model) */
    int clip;
    expect_fn fn;
    const char *what;
    long visited, differ;
} cmp;

static sd_tensor *host(sd_bt **slot) { return slot && *slot ? sd_bt_to_host(*slot) : NULL; }

static sd_bt **find(void *m, int clip, const char *key) {
    return clip ? sd_clip_param(m, key, NULL, NULL) : sd_unet_param(m, key);
}

static void cmp_one(void *ud, const char *key, sd_bt **slot) {
    cmp *c = ud;
    c->visited++;
    sd_tensor *got = host(slot), *a = host(find(c->ref1, c->clip, key));
    sd_tensor *b = c->fn ? host(find(c->ref2, c->clip, key)) : NULL;
    int ok = got && a && (!c->fn || b) && sd_tensor_numel(got) == sd_tensor_numel(a);
    for (int64_t i = 0; ok && i < sd_tensor_numel(got); i++) {
        float want = c->fn ? c->fn(sd_tensor_f32(a)[i], sd_tensor_f32(b)[i]) : sd_tensor_f32(a)[i];
        ok = sd_tensor_f32(got)[i] == want;
    }
    if (!ok && c->differ++ < 3) fprintf(stderr, "%s: weight %s differs\n", c->what, key);
    sd_tensor_unref(got), sd_tensor_unref(a), sd_tensor_unref(b);
}

static long check_unet(const char *what, sd_unet *got, sd_unet *r1, sd_unet *r2, expect_fn fn) {
    cmp c = {r1, r2, 0, fn, what, 0, 0};
    sd_unet_param_each(got, cmp_one, &c);
    CHECK_MSG(c.differ == 0 && c.visited > 0, "%s: %ld of %ld UNet weights differ", what, c.differ,
              c.visited);
    return c.visited;
}

static void check_te(const char *what, const sd_text_encoder *got, const sd_text_encoder *r1,
                     const sd_text_encoder *r2, expect_fn fn) {
    cmp c = {(void *)sd_text_encoder_clip_l(r1), r2 ? (void *)sd_text_encoder_clip_l(r2) : NULL, 1,
             fn, what, 0, 0};
    sd_clip_param_each((sd_clip *)sd_text_encoder_clip_l(got), cmp_one, &c);
    CHECK_MSG(c.differ == 0 && c.visited > 0, "%s: %ld of %ld CLIP weights differ", what, c.differ,
              c.visited);
}

/* ComfyUI's float32 order: W1 * strength_model, then + strength * W2 */
static float half_half(float a, float b) { return a * 0.5f + 0.5f * b; }
static float sub07(float a, float b) { return a * 0.7f + (float)-0.7 * b; }
static float add11(float a, float b) { return a + b; }

/* ---- the averaged checkpoint --------------------------------------------------------------- */

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* UNet and CLIP weights (float32) averaged as ComfyUI's ratio 0.5 merge
 * computes them; the VAE and the rest from a. */
static void write_average(const char *pa, const char *pb, const char *out) {
    sd_error err;
    sd_st_file *a = NULL, *b = NULL;
    CHECK_OK(sd_st_open(pa, &a, &err), &err);
    CHECK_OK(sd_st_open(pb, &b, &err), &err);
    if (!a || !b) return;
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; i < sd_st_count(a); i++) {
        const sd_st_entry *e = sd_st_at(a, i);
        int merge = (starts(e->name, "model.diffusion_model.") ||
                     starts(e->name, "cond_stage_model.transformer.")) &&
                    !strstr(e->name, "position_ids") && sd_st_find(b, e->name);
        sd_tensor *t;
        if (merge) {
            t = sd_st_tensor_f32(a, e->name, &err);
            sd_tensor *tb = sd_st_tensor_f32(b, e->name, &err);
            CHECK(t && tb && sd_tensor_numel(t) == sd_tensor_numel(tb));
            for (int64_t k = 0; t && tb && k < sd_tensor_numel(t); k++)
                sd_tensor_f32(t)[k] = half_half(sd_tensor_f32(t)[k], sd_tensor_f32(tb)[k]);
            sd_tensor_unref(tb);
        } else {
            t = sd_st_tensor(a, e->name, &err);
        }
        CHECK_OK(sd_st_writer_add(w, e->name, t, &err), &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, out, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(a);
    sd_st_close(b);
}

/* ---- sampling ------------------------------------------------------------------------------ */

typedef struct fixture {
    sd_value *pos, *neg, *latent;
} fixture;

static sd_value *ksampler(fixture *f, sd_value *model, double cfg) {
    const char *n[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                       "positive", "negative", "latent_image", "denoise"};
    sd_value *v[] = {model, sd_value_int(5), sd_value_int(2), sd_value_float(cfg),
                     sd_value_string("euler"), sd_value_string("normal"), f->pos, f->neg,
                     f->latent, sd_value_float(1.0)};
    const int own[] = {0, 1, 1, 1, 1, 1, 0, 0, 0, 1};
    return run1("KSampler", n, v, 10, own);
}

static sd_tensor *samples(const sd_value *l) { return l ? sd_value_dict_tensor(l, "samples") : NULL; }

static int bit_equal(const sd_tensor *a, const sd_tensor *b) {
    return a && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static sd_value *random_cond(uint64_t seed, int dim) {
    int64_t cs[3] = {1, 77, dim};
    sd_tensor *c = sd_noise_prepare(seed, 3, cs, NULL, 0);
    sd_value *d = sd_value_dict(), *l = sd_value_list();
    sd_value_dict_set(d, "cond", sd_value_tensor(c));
    sd_value_list_append(l, d);
    sd_tensor_unref(c);
    return l;
}

static sd_value *model_sampling(sd_value *model, const char *kind, int zsnr) {
    const char *n[] = {"model", "sampling", "zsnr"};
    sd_value *v[] = {model, sd_value_string(kind), sd_value_bool(zsnr)};
    const int own[] = {0, 1, 1};
    return run1("ModelSamplingDiscrete", n, v, 3, own);
}

static sd_value *lora_model_only(sd_value *model, double strength) {
    const char *n[] = {"model", "lora_name", "strength_model"};
    sd_value *v[] = {model, sd_value_string("tiny.safetensors"), sd_value_float(strength)};
    const int own[] = {0, 1, 1};
    return run1("LoraLoaderModelOnly", n, v, 3, own);
}

static void test_sampling_patches(fixture *f, sd_value *model) {
    sd_error err;
    sd_value *plain = ksampler(f, model, 6.0);
    /* eps without zsnr is the checkpoint's own sampling: the same latent */
    sd_value *eps = model_sampling(model, "eps", 0);
    sd_value *l_eps = ksampler(f, eps, 6.0);
    CHECK_MSG(bit_equal(samples(plain), samples(l_eps)), "ModelSamplingDiscrete eps = the model");
    /* v_prediction + zsnr: another latent, and the schedule the nodes see */
    sd_value *vz = model_sampling(model, "v_prediction", 1);
    sd_value *l_vz = ksampler(f, vz, 6.0);
    CHECK(samples(l_vz) && !bit_equal(samples(plain), samples(l_vz)));
    const char *kinds[] = {"v_prediction", "lcm", "x0", "eps"};
    const int zs[] = {1, 0, 0, 1};
    for (int k = 0; k < 4; k++) {
        sd_value *m = model_sampling(model, kinds[k], zs[k]);
        const char *n[] = {"model", "scheduler", "steps", "denoise"};
        sd_value *v[] = {m, sd_value_string("simple"), sd_value_int(4), sd_value_float(1.0)};
        const int own[] = {0, 1, 1, 1};
        sd_value *sig = run1("BasicScheduler", n, v, 4, own);
        sd_model_sampling ms;
        sd_model_sampling_init_ex(&ms, (sd_prediction)sd_prediction_parse(kinds[k]), zs[k]);
        float want[8];
        int nw = 0;
        CHECK_OK(sd_schedule_sigmas(&ms, "simple", 4, want, &nw, &err), &err);
        sd_tensor *t = sig ? sd_value_as_tensor(sig) : NULL;
        CHECK_MSG(t && t->shape[0] == nw && memcmp(t->data, want, (size_t)nw * 4) == 0,
                  "BasicScheduler on ModelSamplingDiscrete %s zsnr %d", kinds[k], zs[k]);
        if (zs[k]) CHECK(t && sd_tensor_f32(t)[0] > 4000.0f); /* zero terminal SNR: sigma_max ~4518 */
        sd_value_unref(sig);
        sd_value_unref(m);
    }
    /* a LoRA loader keeps the patch */
    sd_value *vzl = lora_model_only(vz, 0.5);
    sd_model_ref *r = vzl ? sd_value_as_handle(vzl, &sd_handle_model) : NULL;
    CHECK(r && r->patches.sampling_set && r->patches.sampling == SD_PRED_V && r->patches.zsnr);

    /* RescaleCFG: KSampler and SamplerCustom (CFGGuider) both run it */
    const char *rn[] = {"model", "multiplier"};
    sd_value *rv[] = {model, sd_value_float(0.7)};
    const int rown[] = {0, 1};
    sd_value *rm = run1("RescaleCFG", rn, rv, 2, rown);
    sd_value *l_r = ksampler(f, rm, 6.0);
    CHECK(samples(l_r) && !bit_equal(samples(plain), samples(l_r)));
    {
        const char *bn[] = {"model", "scheduler", "steps", "denoise"};
        sd_value *bv[] = {rm, sd_value_string("normal"), sd_value_int(2), sd_value_float(1.0)};
        const int bown[] = {0, 1, 1, 1};
        sd_value *sig = run1("BasicScheduler", bn, bv, 4, bown);
        const char *sn[] = {"sampler_name"};
        sd_value *sv[] = {sd_value_string("euler")};
        const int sown[] = {1};
        sd_value *smp = run1("KSamplerSelect", sn, sv, 1, sown);
        const char *n[] = {"model", "add_noise", "noise_seed", "cfg", "positive", "negative",
                           "sampler", "sigmas", "latent_image"};
        sd_value *v[] = {rm, sd_value_bool(1), sd_value_int(5), sd_value_float(6.0), f->pos, f->neg,
                         smp, sig, f->latent};
        sd_value *o[2] = {0};
        CHECK_OK(run("SamplerCustom", n, v, 9, o, &err), &err);
        CHECK_MSG(bit_equal(samples(l_r), samples(o[0])), "RescaleCFG: SamplerCustom = KSampler");
        sd_value_unref(v[1]), sd_value_unref(v[2]), sd_value_unref(v[3]);
        sd_value_unref(o[0]), sd_value_unref(o[1]), sd_value_unref(sig), sd_value_unref(smp);
    }
    sd_value *all[] = {plain, eps, l_eps, vz, l_vz, vzl, rm, l_r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_value_unref(all[i]);
}

/* ---- merges ---------------------------------------------------------------------------------- */

static void test_merges(fixture *f, sd_value *ck1[3], sd_value *ck2[3], sd_value *cka[3],
                        long file_unet_keys) {
    sd_unet *u1 = unet_of(ck1[0]), *u2 = unet_of(ck2[0]), *ua = unet_of(cka[0]);
    sd_text_encoder *t1 = te_of(ck1[1]), *t2 = te_of(ck2[1]), *ta = te_of(cka[1]);
    if (!u1 || !u2 || !ua || !t1 || !t2 || !ta) return;

    sd_value *m1 = merge2("ModelMergeSimple", "model1", "model2", ck1[0], ck2[0], "ratio", 1.0);
    long n = check_unet("ratio 1 = model1", unet_of(m1), u1, NULL, NULL);
    CHECK_MSG(n == file_unet_keys, "the walk visits %ld UNet weights, the file has %ld", n,
              file_unet_keys);
    sd_value *m0 = merge2("ModelMergeSimple", "model1", "model2", ck1[0], ck2[0], "ratio", 0.0);
    check_unet("ratio 0 = model2", unet_of(m0), u2, NULL, NULL);
    sd_value *mh = merge2("ModelMergeSimple", "model1", "model2", ck1[0], ck2[0], "ratio", 0.5);
    check_unet("ratio 0.5 = the averaged checkpoint", unet_of(mh), ua, NULL, NULL);
    check_unet("ratio 0.5 = W1 * 0.5 + 0.5 * W2", unet_of(mh), u1, u2, half_half);
    sd_value *ms = merge2("ModelMergeSubtract", "model1", "model2", ck1[0], ck2[0], "multiplier", 0.7);
    check_unet("subtract 0.7", unet_of(ms), u1, u2, sub07);
    sd_value *madd = merge2("ModelMergeAdd", "model1", "model2", ck1[0], ck2[0], NULL, 0);
    check_unet("add", unet_of(madd), u1, u2, add11);

    /* sampling with the merge = sampling with the averaged checkpoint */
    sd_value *la = ksampler(f, cka[0], 5.0), *lh = ksampler(f, mh, 5.0), *l1 = ksampler(f, ck1[0], 5.0),
             *lm1 = ksampler(f, m1, 5.0);
    CHECK_MSG(bit_equal(samples(la), samples(lh)), "KSampler: merge 0.5 = averaged checkpoint");
    CHECK_MSG(bit_equal(samples(l1), samples(lm1)), "KSampler: merge 1 = model1");
    CHECK(!bit_equal(samples(l1), samples(lh)));

    /* a LoRA after the merge = the LoRA on the averaged checkpoint */
    sd_value *lh_l = lora_model_only(mh, 0.8), *la_l = lora_model_only(cka[0], 0.8);
    check_unet("LoRA after merge", unet_of(lh_l), unet_of(la_l), NULL, NULL);
    /* model2's own LoRA comes along: ratio 0 over LoRA(model2) = LoRA(model2) */
    sd_value *l2 = lora_model_only(ck2[0], 0.8);
    sd_value *m0l = merge2("ModelMergeSimple", "model1", "model2", ck1[0], l2, "ratio", 0.0);
    check_unet("model2's LoRA inside the merge", unet_of(m0l), unet_of(l2), NULL, NULL);
    /* model1's LoRA comes first: merge(LoRA(model1), model2, 1) = LoRA(model1) */
    sd_value *l1l = lora_model_only(ck1[0], 0.8);
    sd_value *m1l = merge2("ModelMergeSimple", "model1", "model2", l1l, ck2[0], "ratio", 1.0);
    check_unet("model1's LoRA before the merge", unet_of(m1l), unet_of(l1l), NULL, NULL);
    /* a merged model keeps model1's sampling patch */
    sd_value *v1 = model_sampling(ck1[0], "v_prediction", 0);
    sd_value *mv = merge2("ModelMergeSimple", "model1", "model2", v1, ck2[0], "ratio", 0.5);
    sd_model_ref *mr = mv ? sd_value_as_handle(mv, &sd_handle_model) : NULL;
    CHECK(mr && mr->patches.sampling_set && mr->patches.sampling == SD_PRED_V);

    /* CLIP */
    sd_value *c0 = merge2("CLIPMergeSimple", "clip1", "clip2", ck1[1], ck2[1], "ratio", 0.0);
    check_te("CLIP ratio 0 = clip2", te_of(c0), t2, NULL, NULL);
    sd_value *ch = merge2("CLIPMergeSimple", "clip1", "clip2", ck1[1], ck2[1], "ratio", 0.5);
    check_te("CLIP ratio 0.5 = the averaged checkpoint", te_of(ch), ta, NULL, NULL);
    sd_value *ca = merge2("CLIPMergeAdd", "clip1", "clip2", ck1[1], ck2[1], NULL, 0);
    check_te("CLIP add", te_of(ca), t1, t2, add11);
    sd_value *cs = merge2("CLIPMergeSubtract", "clip1", "clip2", ck1[1], ck2[1], "multiplier", 0.7);
    check_te("CLIP subtract 0.7", te_of(cs), t1, t2, sub07);

    /* errors name the input */
    sd_error err;
    sd_value *o[1] = {0};
    const char *en[] = {"model1", "model2", "ratio"};
    sd_value *ev[] = {ck1[0], ck2[1], sd_value_float(0.5)};
    CHECK(run("ModelMergeSimple", en, ev, 3, o, &err) == SD_ERR_INVALID && !o[0]);
    CHECK_MSG(strcmp(err.input, "model2") == 0 && strstr(err.msg, "MODEL"), "error: %s (%s)",
              err.msg, err.input);
    sd_value_unref(ev[2]);

    sd_value *all[] = {m1, m0, mh, ms, madd, la, lh, l1, lm1, lh_l, la_l, l2, m0l, l1l, m1l,
                       v1, mv, c0, ch, ca, cs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_value_unref(all[i]);
}

/* ---- against ComfyUI's own merges ----------------------------------------------------------
 * tests/data/merge/merge_ref.safetensors: weights of ComfyUI's merged models
 * (make_merge_ref.py, same two checkpoints), after ModelPatcher.patch_model.
 * Pure merges must agree bit for bit (the same float32 operations); with a
 * LoRA in the chain the LoRA product's summation order differs, so those get
 * a float tolerance. */

static const char *const ref_unet_keys[] = {
    "time_embed.0.weight", "input_blocks.1.1.proj_in.weight",
    "middle_block.1.transformer_blocks.0.attn2.to_k.weight", "output_blocks.5.0.in_layers.2.bias",
    "out.2.weight", NULL};
static const char *const ref_clip_keys[] = {
    "text_model.embeddings.position_embedding.weight", "text_model.encoder.layers.0.mlp.fc1.bias",
    "text_model.encoder.layers.3.self_attn.q_proj.bias", "text_model.final_layer_norm.weight", NULL};

static void against_ref(sd_st_file *ref, const char *tag, const sd_value *v, int clip, int exact) {
    const char *const *keys = clip ? ref_clip_keys : ref_unet_keys;
    void *m = clip ? (void *)sd_text_encoder_clip_l(te_of(v)) : (void *)unet_of(v);
    if (!m) return;
    for (int i = 0; keys[i]; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s.%s", tag, keys[i]);
        sd_error err;
        sd_tensor *want = sd_st_tensor_f32(ref, name, &err);
        sd_tensor *got = host(find(m, clip, keys[i]));
        CHECK_MSG(want && got && sd_tensor_numel(want) == sd_tensor_numel(got), "%s: missing or wrong size", name);
        if (want && got && sd_tensor_numel(want) == sd_tensor_numel(got)) {
            double mx = 0;
            long worst = 0;
            sd_tensor *g2 = sd_tensor_new(SD_F32, want->ndim, want->shape);
            memcpy(g2->data, got->data, want->nbytes);
            int ok = exact ? memcmp(g2->data, want->data, want->nbytes) == 0
                           : sd_test_allclose(g2, want, 1e-6, 1e-5, &mx, &worst);
            if (exact && !ok) sd_test_allclose(g2, want, 0, 0, &mx, &worst);
            CHECK_MSG(ok, "%s: ComfyUI's merged weight differs (max abs %g at %ld)", name, mx, worst);
            sd_tensor_unref(g2);
        }
        sd_tensor_unref(want), sd_tensor_unref(got);
    }
}

static void test_comfy_ref(sd_value *ck1[3], sd_value *ck2[3]) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/merge/merge_ref.safetensors", src ? src : "..");
    sd_st_file *ref = NULL;
    sd_error err;
    CHECK_OK(sd_st_open(path, &ref, &err), &err);
    if (!ref) return;
    sd_value *a = merge2("ModelMergeSimple", "model1", "model2", ck1[0], ck2[0], "ratio", 0.5);
    sd_value *b = merge2("ModelMergeSimple", "model1", "model2", ck1[0], ck2[0], "ratio", 0.25);
    sd_value *c = merge2("ModelMergeSubtract", "model1", "model2", ck1[0], ck2[0], "multiplier", 0.7);
    sd_value *d = merge2("ModelMergeAdd", "model1", "model2", ck1[0], ck2[0], NULL, 0);
    sd_value *e = lora_model_only(b, 0.8);
    sd_value *l2 = lora_model_only(ck2[0], 0.8);
    sd_value *f = merge2("ModelMergeSimple", "model1", "model2", ck1[0], l2, "ratio", 0.25);
    sd_value *g = merge2("CLIPMergeSimple", "clip1", "clip2", ck1[1], ck2[1], "ratio", 0.3);
    sd_value *h = merge2("CLIPMergeSubtract", "clip1", "clip2", ck1[1], ck2[1], "multiplier", 1.5);
    against_ref(ref, "simple_0.5", a, 0, 1);
    against_ref(ref, "simple_0.25", b, 0, 1);
    against_ref(ref, "subtract_0.7", c, 0, 1);
    against_ref(ref, "add", d, 0, 1);
    against_ref(ref, "simple_0.25_lora_0.8", e, 0, 0);
    against_ref(ref, "simple_0.25_over_lora2", f, 0, 0);
    against_ref(ref, "clip_simple_0.3", g, 1, 1);
    against_ref(ref, "clip_subtract_1.5", h, 1, 1);
    sd_value *all[] = {a, b, c, d, e, l2, f, g, h};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sd_value_unref(all[i]);
    sd_st_close(ref);
}

static long count_unet_keys(const char *path) {
    sd_error err;
    sd_st_file *f = NULL;
    long n = 0;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    for (size_t i = 0; f && i < sd_st_count(f); i++)
        n += starts(sd_st_at(f, i)->name, "model.diffusion_model.");
    sd_st_close(f);
    return n;
}

int main(void) {
    char src[4096], lora_src[4096];
    snprintf(src, sizeof src, "%s/models/tiny-sd1.safetensors", sd_test_testdata_dir());
    snprintf(lora_src, sizeof lora_src, "%s/models/tiny-lora-sd1.safetensors", sd_test_testdata_dir());
    if (access(src, R_OK) != 0 || access(lora_src, R_OK) != 0) sd_test_skip("no %s", src);
    const char *dir = sd_test_tmpdir("nodes_model_patches");
    char models[4096], p1[4200], p2[4200], pa[4200], pl[4200], cmd[9000];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints' '%s/loras'", models, models);
    CHECK(system(cmd) == 0);
    snprintf(p1, sizeof p1, "%s/checkpoints/model1.safetensors", models);
    snprintf(p2, sizeof p2, "%s/checkpoints/model2.safetensors", models);
    snprintf(pa, sizeof pa, "%s/checkpoints/average.safetensors", models);
    snprintf(pl, sizeof pl, "%s/loras/tiny.safetensors", models);
    CHECK(symlink(src, p1) == 0 && symlink(lora_src, pl) == 0);
    sd_error err;
    sd_error_clear(&err);
    sd_synth_config cfg = *sd_synth_preset("sd1-tiny");
    CHECK_OK(sd_synth_sd1_write(&cfg, 7, p2, &err), &err);
    write_average(p1, p2, pa);
    /* the text encoders need a vocabulary to load: the synthetic one */
    char tok[4200];
    snprintf(tok, sizeof tok, "%s/tokenizer", dir);
    CHECK_OK(sd_synth_vocab_write(tok, &err), &err);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_value *ck1[3] = {0}, *ck2[3] = {0}, *cka[3] = {0};
    load("model1.safetensors", ck1);
    load("model2.safetensors", ck2);
    load("average.safetensors", cka);
    fixture f = {0};
    if (ck1[0] && ck2[0] && cka[0]) {
        f.pos = random_cond(1, cfg.context_dim);
        f.neg = random_cond(2, cfg.context_dim);
        const char *ln[] = {"width", "height", "batch_size"};
        sd_value *lv[] = {sd_value_int(64), sd_value_int(64), sd_value_int(1)};
        const int lo[] = {1, 1, 1};
        f.latent = run1("EmptyLatentImage", ln, lv, 3, lo);
        test_sampling_patches(&f, ck1[0]);
        test_merges(&f, ck1, ck2, cka, count_unet_keys(p1));
        test_comfy_ref(ck1, ck2);
    }
    sd_value_unref(f.pos), sd_value_unref(f.neg), sd_value_unref(f.latent);
    for (int i = 0; i < 3; i++) sd_value_unref(ck1[i]), sd_value_unref(ck2[i]), sd_value_unref(cka[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
