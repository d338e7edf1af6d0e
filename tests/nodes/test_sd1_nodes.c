/* test_sd1_nodes.c - the SD1 pipeline nodes on random-weight checkpoints
 * synthesized in the real key layout (models/synth/synth.h), so the test needs no
 * shared data: loader errors and the model store, KSampler determinism,
 * batches, progress and Ctrl-C, ConditioningCombine / SetArea / ZeroOut
 * identities, KSamplerAdvanced step splits, img2img (VAEEncode + denoise
 * 0.6), inpainting (VAEEncodeForInpaint, SetLatentNoiseMask: the kept region
 * is unchanged in latent space), a 9-channel inpainting UNet, tiled VAE. */
#include <math.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/node.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/rng.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes/vae/vae_nodes.h"
#include "testutil.h"

static volatile sig_atomic_t interrupted;
static int progress_calls;

static void on_progress(void *user, const char *node_id, int64_t value, int64_t max) {
    (void)user;
    (void)node_id;
    (void)value;
    (void)max;
    progress_calls++;
}

static sd_status run_node(const sd_env *env, const char *type, sd_value *const *in, sd_value **out,
                          sd_error *err) {
    const sd_node_def *def = sd_registry_find(type);
    if (!def) return sd_error_set(err, SD_ERR_NOT_FOUND, "node %s not registered", type);
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type, .interrupt = &interrupted,
                       .progress = on_progress};
    for (int i = 0; i < sd_node_output_count(def); i++) out[i] = NULL;
    sd_status rc = def->run(&ctx, in, out, err);
    sd_value_unref(ctx.ui);
    if (rc)
        for (int i = 0; i < sd_node_output_count(def); i++) {
            sd_value_unref(out[i]);
            out[i] = NULL;
        }
    return rc;
}

/* a CONDITIONING of one random entry [1, 77, dim] (+ pooled [1, dim]) */
static sd_value *random_cond(uint64_t seed, int dim) {
    int64_t cs[3] = {1, 77, dim}, ps[2] = {1, dim};
    sd_tensor *c = sd_noise_prepare(seed, 3, cs, NULL, 0);
    sd_tensor *p = sd_noise_prepare(seed + 100, 2, ps, NULL, 0);
    sd_value *d = sd_value_dict(), *l = sd_value_list();
    sd_value_dict_set(d, "cond", sd_value_tensor(c));
    sd_value_dict_set(d, "pooled_output", sd_value_tensor(p));
    sd_value_list_append(l, d);
    sd_tensor_unref(c);
    sd_tensor_unref(p);
    return l;
}

/* an IMAGE [1, h, w, 3] with smooth values in [0, 1] */
static sd_value *test_image(int h, int w) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, 1, h, w, 3);
    float *v = t->data;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                v[(y * w + x) * 3 + c] = 0.5f + 0.4f * sinf(0.2f * x + 0.13f * y + (float)c);
    sd_value *r = sd_value_tensor(t);
    sd_tensor_unref(t);
    return r;
}

/* a MASK [1, h, w]: 1 where x < edge */
static sd_value *left_mask(int h, int w, int edge) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 3, 1, h, w, 0);
    float *v = t->data;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) v[y * w + x] = x < edge ? 1.0f : 0.0f;
    sd_value *r = sd_value_tensor(t);
    sd_tensor_unref(t);
    return r;
}

static sd_tensor *samples(const sd_value *latent) { return sd_value_dict_tensor(latent, "samples"); }

static int bit_equal(const sd_tensor *a, const sd_tensor *b) {
    return a && b && sd_tensor_same_shape(a, b) && memcmp(a->data, b->data, a->nbytes) == 0;
}

static double max_diff(const sd_tensor *a, const sd_tensor *b) {
    if (!a || !b || sd_tensor_numel(a) != sd_tensor_numel(b)) return INFINITY;
    double m = 0;
    const float *x = a->data, *y = b->data;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) m = fmax(m, fabs((double)x[i] - y[i]));
    return m;
}

typedef struct fixture fixture;
static int setup(fixture *f, sd_env *env, const char *file);
static void teardown(fixture *f);

struct fixture {
    sd_env *env;
    sd_value *model, *clip, *vae;
    sd_value *pos, *neg;
    int ctx_dim;
};

/* KSampler with the fixture's model and the given inputs. */
static sd_value *ksample(fixture *f, sd_value *pos, sd_value *neg, sd_value *latent, int64_t seed,
                         int steps, double denoise, const char *sampler, sd_error *err) {
    sd_value *in[10] = {f->model, sd_value_int(seed), sd_value_int(steps), sd_value_float(5.0),
                        sd_value_string(sampler), sd_value_string("normal"), pos, neg, latent,
                        sd_value_float(denoise)};
    sd_value *out = NULL;
    sd_status rc = run_node(f->env, "KSampler", in, &out, err);
    int idx[] = {1, 2, 3, 4, 5, 9};
    for (int i = 0; i < 6; i++) sd_value_unref(in[idx[i]]);
    if (rc) { /* callers check the result; expected failures print too */
        char b[4096];
        fprintf(stderr, "KSampler: %s\n", sd_error_format(err, b, sizeof b));
    }
    return out;
}

static sd_value *ksample_adv(fixture *f, sd_value *latent, int add_noise, int steps, int start,
                             int end, int leftover, sd_error *err) {
    sd_value *in[13] = {f->model, sd_value_string(add_noise ? "enable" : "disable"),
                        sd_value_int(3), sd_value_int(steps), sd_value_float(5.0),
                        sd_value_string("euler"), sd_value_string("normal"), f->pos, f->neg,
                        latent, sd_value_int(start), sd_value_int(end),
                        sd_value_string(leftover ? "enable" : "disable")};
    sd_value *out = NULL;
    sd_status rc = run_node(f->env, "KSamplerAdvanced", in, &out, err);
    int idx[] = {1, 2, 3, 4, 5, 6, 10, 11, 12};
    for (int i = 0; i < 9; i++) sd_value_unref(in[idx[i]]);
    CHECK_OK(rc, err);
    return out;
}

static sd_value *empty_latent(fixture *f, int w, int h, int b, sd_error *err) {
    sd_value *in[3] = {sd_value_int(w), sd_value_int(h), sd_value_int(b)}, *out = NULL;
    CHECK_OK(run_node(f->env, "EmptyLatentImage", in, &out, err), err);
    for (int i = 0; i < 3; i++) sd_value_unref(in[i]);
    return out;
}

static void test_loaders(sd_env *env, const char *dir) {
    sd_error err;
    sd_error_clear(&err);
    sd_value *name = sd_value_string("missing.safetensors"), *out[3];
    CHECK(run_node(env, "CheckpointLoaderSimple", &name, out, &err) == SD_ERR_NOT_FOUND);
    CHECK(strcmp(err.input, "ckpt_name") == 0);
    sd_value_unref(name);

    char path[4096];
    snprintf(path, sizeof path, "%s/models/checkpoints/old.ckpt", dir);
    FILE *fp = fopen(path, "wb");
    fputs("PK\x03\x04 not really a pickle", fp);
    fclose(fp);
    name = sd_value_string("old.ckpt");
    sd_error_clear(&err);
    CHECK(run_node(env, "LoadCheckpoint", &name, out, &err) == SD_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "old.ckpt") && strstr(err.msg, "PyTorch checkpoint"), "%s", err.msg);
    sd_value_unref(name);

    /* the combo lists the folder, pickle files included */
    const sd_node_def *def = sd_registry_find("CheckpointLoaderSimple");
    sd_value *list = NULL;
    CHECK_OK(def->inputs[0].options_fn(env, &list, &err), &err);
    int has_ckpt = 0;
    for (size_t i = 0; list && i < sd_value_list_len(list); i++)
        has_ckpt |= strcmp(sd_value_as_string(sd_value_list_get(list, i)), "old.ckpt") == 0;
    CHECK(list && sd_value_list_len(list) == 3 && has_ckpt);
    sd_value_unref(list);

    /* a file that is no checkpoint */
    snprintf(path, sizeof path, "%s/models/checkpoints/other.safetensors", dir);
    sd_st_writer *w = sd_st_writer_new();
    sd_tensor *t = sd_tensor_new4(SD_F32, 1, 4, 0, 0, 0);
    sd_st_writer_add(w, "some.weight", t, &err);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_tensor_unref(t);
    name = sd_value_string("other.safetensors");
    sd_error_clear(&err);
    CHECK(run_node(env, "CheckpointLoaderSimple", &name, out, &err) == SD_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "some.weight") != NULL, "%s", err.msg);
    sd_value_unref(name);

    /* a damaged torch zip renamed to .safetensors: read (by content) as a torch file */
    snprintf(path, sizeof path, "%s/models/checkpoints/renamed.safetensors", dir);
    fp = fopen(path, "wb");
    fputs("PK\x03\x04 archive/data.pkl and friends, padded past a header", fp);
    fclose(fp);
    name = sd_value_string("renamed.safetensors");
    sd_error_clear(&err);
    CHECK(run_node(env, "CheckpointLoaderSimple", &name, out, &err) == SD_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "PyTorch checkpoint") && strcmp(err.input, "ckpt_name") == 0, "%s", err.msg);
    sd_value_unref(name);
}

static sd_checkpoint *ckpt_of(fixture *f) {
    return ((sd_model_ref *)sd_value_as_handle(f->model, &sd_handle_model))->ckpt;
}

static void test_txt2img(fixture *f) {
    sd_error err;
    sd_error_clear(&err);
    int lu = -1, lt = -1, lv = -1;
    sd_checkpoint_loaded(ckpt_of(f), &lu, &lt, &lv);
    CHECK(lu == 0 && lt == 0 && lv == 0); /* opening loads nothing */
    sd_value *lat = empty_latent(f, 64, 64, 2, &err);
    progress_calls = 0;
    sd_value *a = ksample(f, f->pos, f->neg, lat, 1, 3, 1.0, "euler", &err);
    CHECK(progress_calls == 3);
    sd_checkpoint_loaded(ckpt_of(f), &lu, &lt, &lv);
    CHECK(lu == 1 && lt == 0 && lv == 0); /* KSampler loads the UNet only */
    sd_value *b = ksample(f, f->pos, f->neg, lat, 1, 3, 1.0, "euler", &err);
    sd_value *c = ksample(f, f->pos, f->neg, lat, 2, 3, 1.0, "euler", &err);
    {
        /* a latent the model cannot take is an error naming latent_image
         * (not all zeros: an empty one is widened to the model's channels,
         * as ComfyUI's fix_empty_latent_channels; nodes.latent_channels) */
        sd_tensor *t3 = sd_tensor_new4(SD_F32, 4, 1, 3, 8, 8);
        if (t3) sd_tensor_f32(t3)[5] = 0.5f;
        sd_value *l3 = sd_value_dict();
        CHECK(t3 && l3 && sd_value_dict_set(l3, "samples", sd_value_tensor(t3)) == 0);
        sd_tensor_unref(t3);
        sd_error_clear(&err);
        sd_value *bad = ksample(f, f->pos, f->neg, l3, 1, 1, 1.0, "euler", &err);
        CHECK_MSG(!bad && err.code == SD_ERR_INVALID && strcmp(err.input, "latent_image") == 0 &&
                      strstr(err.msg, "3 channels"),
                  "input '%s': %s", err.input, err.msg);
        sd_value_unref(bad);
        sd_value_unref(l3);
        sd_error_clear(&err);
    }
    sd_tensor *ta = samples(a), *tb = samples(b), *tc = samples(c);
    CHECK(ta && ta->shape[0] == 2 && ta->shape[1] == 4 && ta->shape[2] == 8 && ta->shape[3] == 8);
    CHECK(bit_equal(ta, tb));
    CHECK(max_diff(ta, tc) > 1e-3);
    if (ta) {
        const float *v = ta->data;
        int64_t half = sd_tensor_numel(ta) / 2, same = 0;
        for (int64_t i = 0; i < half; i++) same += v[i] == v[i + half];
        CHECK(same < half / 2); /* batch items get different noise */
        for (int64_t i = 0; i < sd_tensor_numel(ta); i++)
            if (!isfinite(v[i])) {
                CHECK(!"non-finite latent");
                break;
            }
    }

    /* latent magnitude, for tolerances that allow batch-size dependent float
     * rounding in the UNet (the entries run as a batch of 4 instead of 2) */
    double scale = 0;
    for (int64_t i = 0; ta && i < sd_tensor_numel(ta); i++)
        scale = fmax(scale, fabs(((float *)ta->data)[i]));
    printf("txt2img latent max |v| %g\n", scale);
    /* ConditioningCombine(pos, pos) averages two equal predictions: pos */
    sd_value *in2[2] = {f->pos, f->pos}, *comb = NULL, *d = NULL;
    CHECK_OK(run_node(f->env, "ConditioningCombine", in2, &comb, &err), &err);
    CHECK(sd_value_list_len(comb) == 2);
    d = ksample(f, comb, f->neg, lat, 1, 3, 1.0, "euler", &err);
    CHECK_MSG(max_diff(samples(d), ta) < 1e-5 * scale, "combine: %g (scale %g)",
              max_diff(samples(d), ta), scale);
    sd_value_unref(d);
    sd_value_unref(comb);

    /* ConditioningSetArea over the whole latent at strength 1 changes nothing */
    sd_value *ain[6] = {f->pos, sd_value_int(64), sd_value_int(64), sd_value_int(0),
                        sd_value_int(0), sd_value_float(1.0)};
    sd_value *area = NULL;
    CHECK_OK(run_node(f->env, "ConditioningSetArea", ain, &area, &err), &err);
    d = ksample(f, area, f->neg, lat, 1, 3, 1.0, "euler", &err);
    CHECK_MSG(max_diff(samples(d), ta) < 1e-5 * scale, "full area: %g", max_diff(samples(d), ta));
    sd_value_unref(d);
    sd_value_unref(area);
    for (int i = 1; i < 6; i++) sd_value_unref(ain[i]);
    /* a partial area combined with the plain prompt: runs, and differs */
    sd_value *pin[6] = {random_cond(77, f->ctx_dim), sd_value_int(64), sd_value_int(64),
                        sd_value_int(16), sd_value_int(8), sd_value_float(2.0)};
    CHECK_OK(run_node(f->env, "ConditioningSetArea", pin, &area, &err), &err);
    sd_value *lst = sd_value_list_get(area, 0);
    sd_value *av = sd_value_dict_get(lst, "area");
    CHECK(av && sd_value_list_len(av) == 4 && sd_value_as_int(sd_value_list_get(av, 0)) == 8 &&
          sd_value_as_int(sd_value_list_get(av, 2)) == 1 &&
          sd_value_as_int(sd_value_list_get(av, 3)) == 2);
    /* an area entry alone: the negative gets an opposite entry of the same
     * area (process_conds), exactly as if the workflow had made it */
    {
        sd_value *nin[6] = {f->neg, pin[1], pin[2], pin[3], pin[4], pin[5]}, *narea = NULL,
                 *nc = NULL;
        CHECK_OK(run_node(f->env, "ConditioningSetArea", nin, &narea, &err), &err);
        sd_value *cin[2] = {f->neg, narea};
        CHECK_OK(run_node(f->env, "ConditioningCombine", cin, &nc, &err), &err);
        sd_value *auto_ = ksample(f, area, f->neg, lat, 1, 2, 1.0, "euler", &err);
        sd_value *expl = ksample(f, area, nc, lat, 1, 2, 1.0, "euler", &err);
        sd_value *plain = ksample(f, f->pos, f->neg, lat, 1, 2, 1.0, "euler", &err);
        CHECK(auto_ && expl && bit_equal(samples(auto_), samples(expl)));
        CHECK(auto_ && plain && max_diff(samples(auto_), samples(plain)) > 1e-4);
        sd_value_unref(auto_);
        sd_value_unref(expl);
        sd_value_unref(plain);
        sd_value_unref(narea);
        sd_value_unref(nc);
    }
    in2[0] = f->pos;
    in2[1] = area;
    CHECK_OK(run_node(f->env, "ConditioningCombine", in2, &comb, &err), &err);
    d = ksample(f, comb, f->neg, lat, 1, 3, 1.0, "euler", &err);
    CHECK(samples(d) && max_diff(samples(d), ta) > 1e-4);
    sd_value_unref(d);
    sd_value_unref(comb);
    sd_value_unref(area);
    for (int i = 0; i < 6; i++) sd_value_unref(pin[i]);

    /* ConditioningZeroOut */
    sd_value *z = NULL;
    CHECK_OK(run_node(f->env, "ConditioningZeroOut", &f->pos, &z, &err), &err);
    sd_tensor *zc = sd_value_dict_tensor(sd_value_list_get(z, 0), "cond");
    sd_tensor *zp = sd_value_dict_tensor(sd_value_list_get(z, 0), "pooled_output");
    CHECK(zc && zp && zc->shape[1] == 77);
    int nz = 0;
    for (int64_t i = 0; zc && i < sd_tensor_numel(zc); i++) nz += ((float *)zc->data)[i] != 0;
    for (int64_t i = 0; zp && i < sd_tensor_numel(zp); i++) nz += ((float *)zp->data)[i] != 0;
    CHECK(nz == 0);
    sd_value_unref(z);

    /* KSamplerAdvanced: 0 -> 2 with leftover noise, then 2 -> end without new
     * noise, is the full 3-step run */
    sd_value *l1 = empty_latent(f, 64, 64, 1, &err);
    sd_value *full = ksample_adv(f, l1, 1, 3, 0, 10000, 0, &err);
    sd_value *part = ksample_adv(f, l1, 1, 3, 0, 2, 1, &err);
    sd_value *rest = part ? ksample_adv(f, part, 0, 3, 2, 10000, 0, &err) : NULL;
    CHECK_MSG(max_diff(samples(full), samples(rest)) < 1e-3, "split: %g",
              max_diff(samples(full), samples(rest)));
    CHECK(max_diff(samples(full), samples(part)) > 1e-3);
    /* start_at_step past the end: the input latent comes back */
    sd_value *same = ksample_adv(f, part, 1, 3, 5, 10000, 0, &err);
    CHECK(same && samples(same) == samples(part));
    /* KSampler with the same seed equals KSamplerAdvanced's full run */
    sd_value *ks = ksample(f, f->pos, f->neg, l1, 3, 3, 1.0, "euler", &err);
    CHECK(bit_equal(samples(ks), samples(full)));
    sd_value_unref(ks);
    sd_value_unref(same);
    sd_value_unref(full);
    sd_value_unref(part);
    sd_value_unref(rest);

    /* errors and Ctrl-C */
    sd_value *bad = ksample(f, f->pos, f->neg, l1, 1, 3, 1.0, "no_such_sampler", &err);
    CHECK(!bad && err.code == SD_ERR_INVALID && strcmp(err.input, "sampler_name") == 0);
    sd_error_clear(&err);
    interrupted = 1;
    bad = ksample(f, f->pos, f->neg, l1, 1, 3, 1.0, "euler", &err);
    interrupted = 0;
    CHECK(!bad && err.code == SD_ERR_CANCELLED);
    sd_error_clear(&err);
    sd_value_unref(l1);

    /* VAEDecode vs VAEDecodeTiled on the same latent: same shape, close */
    sd_value *din[2] = {a, f->vae}, *img = NULL, *timg = NULL;
    CHECK_OK(run_node(f->env, "VAEDecode", din, &img, &err), &err);
    sd_value *tin[6] = {a, f->vae, sd_value_int(64), sd_value_int(16), sd_value_int(64),
                        sd_value_int(8)};
    CHECK_OK(run_node(f->env, "VAEDecodeTiled", tin, &timg, &err), &err);
    sd_tensor *ti = sd_value_as_tensor(img), *tt = sd_value_as_tensor(timg);
    CHECK(ti && ti->ndim == 4 && ti->shape[0] == 2 && ti->shape[1] == 64 && ti->shape[3] == 3);
    CHECK(tt && ti && sd_tensor_same_shape(ti, tt));
    for (int i = 2; i < 6; i++) sd_value_unref(tin[i]);
    sd_value_unref(img);
    sd_value_unref(timg);

    sd_value_unref(a);
    sd_value_unref(b);
    sd_value_unref(c);
    sd_value_unref(lat);
}

/* columns [c0, c1) of every channel of latent a vs b: max |diff| */
static double region_diff(const sd_tensor *a, const sd_tensor *b, int c0, int c1) {
    double m = 0;
    int64_t C = a->shape[1], H = a->shape[2], W = a->shape[3];
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = c0; x < c1; x++) {
                int64_t i = (c * H + y) * W + x;
                m = fmax(m, fabs((double)((float *)a->data)[i] - ((float *)b->data)[i]));
            }
    return m;
}

static void test_img2img_inpaint(fixture *f) {
    sd_error err;
    sd_error_clear(&err);
    sd_value *img = test_image(64, 64), *enc = NULL;
    sd_value *ein[2] = {img, f->vae};
    CHECK_OK(run_node(f->env, "VAEEncode", ein, &enc, &err), &err);
    sd_tensor *el = samples(enc);
    CHECK(el && el->shape[0] == 1 && el->shape[1] == 4 && el->shape[2] == 8 && el->shape[3] == 8);
    sd_value *tenc = NULL;
    sd_value *tin[6] = {img, f->vae, sd_value_int(64), sd_value_int(0), sd_value_int(64),
                        sd_value_int(8)};
    CHECK_OK(run_node(f->env, "VAEEncodeTiled", tin, &tenc, &err), &err);
    CHECK(samples(tenc) && el && sd_tensor_same_shape(samples(tenc), el));
    for (int i = 2; i < 6; i++) sd_value_unref(tin[i]);
    sd_value_unref(tenc);

    /* img2img: denoise 0.6 changes the latent, deterministically */
    sd_value *a = ksample(f, f->pos, f->neg, enc, 5, 4, 0.6, "euler", &err);
    sd_value *b = ksample(f, f->pos, f->neg, enc, 5, 4, 0.6, "euler", &err);
    CHECK(samples(a) && el && sd_tensor_same_shape(samples(a), el));
    CHECK(bit_equal(samples(a), samples(b)));
    CHECK(max_diff(samples(a), el) > 1e-3);
    sd_value_unref(a);
    sd_value_unref(b);
    /* denoise 0: the latent unchanged */
    a = ksample(f, f->pos, f->neg, enc, 5, 4, 0.0, "euler", &err);
    CHECK(a && samples(a) == el);
    sd_value_unref(a);

    /* VAEEncodeForInpaint: masked pixels grey, mask grown by 6 (pad 3) */
    sd_value *mask = left_mask(64, 64, 32);
    sd_tensor *px = NULL, *nm = NULL;
    CHECK_OK(sd_nodes_inpaint_prepare(sd_value_as_tensor(img), sd_value_as_tensor(mask), 6, &px,
                                      &nm, &err),
             &err);
    if (px && nm) {
        const float *pv = px->data, *src = sd_value_as_tensor(img)->data, *mv = nm->data;
        CHECK(pv[(10 * 64 + 5) * 3] == 0.5f && pv[(10 * 64 + 31) * 3 + 2] == 0.5f);
        CHECK(fabsf(pv[(10 * 64 + 40) * 3 + 1] - src[(10 * 64 + 40) * 3 + 1]) < 1e-6f);
        CHECK(nm->shape[1] == 1 && nm->shape[2] == 64 && nm->shape[3] == 64);
        CHECK(mv[20 * 64 + 34] == 1.0f && mv[20 * 64 + 35] == 0.0f && mv[20 * 64 + 0] == 1.0f);
    }
    sd_tensor_unref(px);
    sd_tensor_unref(nm);

    sd_value *iin[4] = {img, f->vae, mask, sd_value_int(6)}, *ilat = NULL;
    CHECK_OK(run_node(f->env, "VAEEncodeForInpaint", iin, &ilat, &err), &err);
    sd_value_unref(iin[3]);
    CHECK(ilat && sd_value_dict_tensor(ilat, "noise_mask") != NULL);
    /* denoise 1: latent columns whose resized mask is 0 (x >= 4) stay */
    a = ksample(f, f->pos, f->neg, ilat, 9, 4, 1.0, "euler", &err);
    b = ksample(f, f->pos, f->neg, ilat, 9, 4, 1.0, "euler", &err);
    CHECK(bit_equal(samples(a), samples(b)));
    if (a && ilat) {
        double kept = region_diff(samples(a), samples(ilat), 4, 8);
        double changed = region_diff(samples(a), samples(ilat), 0, 3);
        CHECK_MSG(kept < 1e-5, "inpaint: kept region moved by %g", kept);
        CHECK_MSG(changed > 1e-2, "inpaint: repainted region moved by %g only", changed);
        CHECK(sd_value_dict_tensor(a, "noise_mask") != NULL); /* the LATENT keeps its keys */
    }
    sd_value_unref(a);
    sd_value_unref(b);
    /* ddim takes the kept region's noise from seed + 1: still kept */
    a = ksample(f, f->pos, f->neg, ilat, 9, 4, 1.0, "ddim", &err);
    if (a && ilat) CHECK(region_diff(samples(a), samples(ilat), 4, 8) < 1e-5);
    sd_value_unref(a);

    /* SetLatentNoiseMask on a plain encode, denoise 0.6 */
    sd_value *sin[2] = {enc, mask}, *mlat = NULL;
    CHECK_OK(run_node(f->env, "SetLatentNoiseMask", sin, &mlat, &err), &err);
    a = ksample(f, f->pos, f->neg, mlat, 11, 4, 0.6, "euler", &err);
    if (a && el) {
        double kept = region_diff(samples(a), el, 4, 8);
        CHECK_MSG(kept < 1e-5, "noise mask: kept region moved by %g", kept);
        CHECK(region_diff(samples(a), el, 0, 3) > 1e-3);
    }
    sd_value_unref(a);
    sd_value_unref(mlat);
    sd_value_unref(ilat);
    sd_value_unref(mask);
    sd_value_unref(enc);
    sd_value_unref(img);
}

/* VAELoader on a standalone VAE file (the checkpoint's first_stage_model.*
 * keys without the prefix) decodes exactly as the checkpoint's VAE. */
static void test_vae_loader(fixture *f, const char *models, const char *ckpt_path) {
    sd_error err;
    sd_error_clear(&err);
    char dir[4096], path[4200], cmd[4300];
    snprintf(dir, sizeof dir, "%s/vae", models);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/standalone.safetensors", dir);
    sd_st_file *src = NULL;
    CHECK_OK(sd_st_open(ckpt_path, &src, &err), &err);
    if (!src) return;
    sd_st_writer *w = sd_st_writer_new();
    const char *pre = "first_stage_model.";
    for (size_t i = 0; i < sd_st_count(src); i++) {
        const char *name = sd_st_at(src, i)->name;
        if (strncmp(name, pre, strlen(pre)) != 0) continue;
        sd_tensor *t = sd_st_tensor(src, name, &err);
        sd_st_writer_add(w, name + strlen(pre), t, &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(src);
    sd_value *name = sd_value_string("standalone.safetensors"), *vae = NULL;
    CHECK_OK(run_node(f->env, "VAELoader", &name, &vae, &err), &err);
    sd_value_unref(name);
    sd_value *lat = empty_latent(f, 64, 64, 1, &err), *a = NULL, *b = NULL;
    sd_value *in[2] = {lat, f->vae};
    CHECK_OK(run_node(f->env, "VAEDecode", in, &a, &err), &err);
    in[1] = vae;
    if (vae) CHECK_OK(run_node(f->env, "VAEDecode", in, &b, &err), &err);
    CHECK(a && b && bit_equal(sd_value_as_tensor(a), sd_value_as_tensor(b)));
    sd_value_unref(a);
    sd_value_unref(b);
    sd_value_unref(lat);
    sd_value_unref(vae);
}

/* A copy of the checkpoint without one UNet tensor and with a NaN and an Inf
 * in the VAE: the loader still opens it (detection does not need them);
 * KSampler and VAEDecode fail naming the tensors. */
static void test_broken_checkpoint(sd_env *env, const char *models, const char *ckpt_path) {
    sd_error err;
    sd_error_clear(&err);
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoints/broken.safetensors", models);
    sd_st_file *src = NULL;
    CHECK_OK(sd_st_open(ckpt_path, &src, &err), &err);
    if (!src) return;
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; i < sd_st_count(src); i++) {
        const char *name = sd_st_at(src, i)->name;
        if (strcmp(name, "model.diffusion_model.input_blocks.1.0.emb_layers.1.bias") == 0) continue;
        sd_tensor *t = sd_st_tensor(src, name, &err);
        int in_b = strcmp(name, "first_stage_model.decoder.conv_in.bias") == 0;
        if (in_b || strcmp(name, "first_stage_model.decoder.conv_out.bias") == 0) {
            sd_tensor *c = sd_tensor_to_dtype(t, SD_F32);
            sd_tensor_f32(c)[1] = in_b ? NAN : INFINITY;
            sd_tensor_unref(t);
            t = c;
        }
        sd_st_writer_add(w, name, t, &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(src);
    fixture f;
    if (setup(&f, env, "broken.safetensors") != 0) return;
    sd_value *lat = empty_latent(&f, 64, 64, 1, &err);
    sd_error_clear(&err);
    sd_value *r = ksample(&f, f.pos, f.neg, lat, 1, 2, 1.0, "euler", &err);
    CHECK(!r && err.code != SD_OK);
    CHECK_MSG(strstr(err.msg, "input_blocks.1.0.emb_layers.1.bias") && strstr(err.msg, "broken.safetensors"), "%s",
              err.msg);
    sd_value *in[2] = {lat, f.vae}, *img = NULL;
    sd_error_clear(&err);
    CHECK(run_node(env, "VAEDecode", in, &img, &err) != SD_OK);
    CHECK_MSG(strstr(err.msg, "decoder.conv_in.bias") && strstr(err.msg, "NaN"), "%s", err.msg);
    /* every offending tensor is named, not only the first the loader met */
    CHECK_MSG(strstr(err.msg, "2 tensors of the VAE contain NaN or Inf") &&
                  strstr(err.msg, "'first_stage_model.decoder.conv_out.bias'"),
              "%s", err.msg);
    sd_value_unref(r);
    sd_value_unref(lat);
    teardown(&f);
}

static int setup(fixture *f, sd_env *env, const char *file) {
    sd_error err;
    sd_error_clear(&err);
    memset(f, 0, sizeof *f);
    f->env = env;
    sd_value *name = sd_value_string(file), *out[3] = {0};
    sd_status rc = run_node(env, "CheckpointLoaderSimple", &name, out, &err);
    CHECK_OK(rc, &err);
    sd_value_unref(name);
    if (rc) return -1;
    f->model = out[0];
    f->clip = out[1];
    f->vae = out[2];
    sd_model_ref *m = sd_value_as_handle(f->model, &sd_handle_model);
    f->ctx_dim = sd_checkpoint_info(m->ckpt)->unet.context_dim;
    f->pos = random_cond(1, f->ctx_dim);
    f->neg = random_cond(2, f->ctx_dim);
    return 0;
}

static void teardown(fixture *f) {
    sd_value_unref(f->model);
    sd_value_unref(f->clip);
    sd_value_unref(f->vae);
    sd_value_unref(f->pos);
    sd_value_unref(f->neg);
}

/* The KSampler / KSamplerAdvanced combos offer exactly ComfyUI's names, in
 * its order: the manifest's ksampler_names + ddim, uni_pc, uni_pc_bh2
 * (KSampler.SAMPLERS) and the nine SCHEDULER_NAMES. */
static void test_ksampler_combos(sd_env *env) {
    static const char *const schedulers[] = {"simple", "sgm_uniform", "karras", "exponential",
                                             "ddim_uniform", "beta", "normal",
                                             "linear_quadratic", "kl_optimal"};
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/manifest_math.json",
             getenv("SDFLOW_TESTDATA") ? getenv("SDFLOW_TESTDATA") : sd_test_testdata_dir());
    FILE *fp = fopen(path, "rb");
    cJSON *m = NULL;
    if (fp) {
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        char *buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, fp) == (size_t)n) {
            buf[n] = '\0';
            m = cJSON_Parse(buf);
        }
        free(buf);
        fclose(fp);
    }
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(m, "samplers"), "ksampler_names");
    if (!cJSON_IsArray(names)) {
        printf("  (no %s: KSampler combo names not checked against it)\n", path);
        cJSON_Delete(m);
        return;
    }
    const char *types[] = {"KSampler", "KSamplerAdvanced"};
    for (int t = 0; t < 2; t++) {
        const sd_node_def *def = sd_registry_find(types[t]);
        CHECK(def != NULL);
        if (!def) continue;
        for (const sd_input_def *in = def->inputs; in->name; in++) {
            int is_s = strcmp(in->name, "sampler_name") == 0, is_k = strcmp(in->name, "scheduler") == 0;
            if (!is_s && !is_k) continue;
            sd_value *list = NULL;
            sd_error err;
            CHECK_OK(in->options_fn(env, &list, &err), &err);
            size_t want = is_s ? (size_t)cJSON_GetArraySize(names) + 3 : 9;
            CHECK_MSG(list && sd_value_list_len(list) == want, "%s.%s: %zu names", types[t], in->name,
                      list ? sd_value_list_len(list) : 0);
            for (size_t i = 0; list && i < sd_value_list_len(list) && i < want; i++) {
                const char *got = sd_value_as_string(sd_value_list_get(list, i)), *exp;
                if (is_k) exp = schedulers[i];
                else if (i < (size_t)cJSON_GetArraySize(names))
                    exp = cJSON_GetArrayItem(names, (int)i)->valuestring;
                else exp = (const char *[]){"ddim", "uni_pc", "uni_pc_bh2"}[i - (size_t)cJSON_GetArraySize(names)];
                CHECK_MSG(got && exp && strcmp(got, exp) == 0, "%s.%s[%zu]: %s, ComfyUI has %s",
                          types[t], in->name, i, got ? got : "?", exp ? exp : "?");
            }
            sd_value_unref(list);
        }
    }
    cJSON_Delete(m);
}

int main(void) {
    const char *dir = sd_test_tmpdir("nodes_sd1");
    char models[4096], path[4096];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(path, sizeof path, "%s/checkpoints", models);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    CHECK(system(cmd) == 0);

    sd_error err;
    sd_error_clear(&err);
    /* small but complete SD1 layouts: regular and 9-channel inpainting */
    sd_synth_config cfg = *sd_synth_preset("sd1-tiny");
    cfg.clip_vocab = 1000;
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    CHECK_OK(sd_synth_sd1_write(&cfg, 1, path, &err), &err);
    cfg.in_channels = 9;
    snprintf(path, sizeof path, "%s/checkpoints/sub/tiny-inpaint.safetensors", models);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints/sub'", models);
    CHECK(system(cmd) == 0);
    CHECK_OK(sd_synth_sd1_write(&cfg, 2, path, &err), &err);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    CHECK(sd_registry_find("LoadCheckpoint") == sd_registry_find("CheckpointLoaderSimple"));
    CHECK(sd_registry_find("CLIPEncode") == sd_registry_find("CLIPTextEncode"));
    test_ksampler_combos(&env);

    fixture f;
    if (setup(&f, &env, "tiny.safetensors") == 0) {
        /* a second load reuses the store's checkpoint */
        fixture g;
        if (setup(&g, &env, "tiny.safetensors") == 0) {
            sd_model_ref *a = sd_value_as_handle(f.model, &sd_handle_model);
            sd_model_ref *b = sd_value_as_handle(g.model, &sd_handle_model);
            CHECK(a->ckpt == b->ckpt);
            CHECK(sd_model_store_count(store) == 1);
            teardown(&g);
        }
        /* CLIPSetLastLayer keeps the checkpoint and records the layer */
        sd_value *in[2] = {f.clip, sd_value_int(-2)}, *c2 = NULL;
        CHECK_OK(run_node(&env, "CLIPSetLastLayer", in, &c2, &err), &err);
        sd_clip_ref *cr = c2 ? sd_value_as_handle(c2, &sd_handle_clip) : NULL;
        CHECK(cr && cr->clip_skip == -2);
        sd_value_unref(c2);
        sd_value_unref(in[1]);
        test_txt2img(&f);
        test_img2img_inpaint(&f);
        snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
        test_vae_loader(&f, models, path);
        teardown(&f);
    }
    test_loaders(&env, dir);
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    test_broken_checkpoint(&env, models, path);
    if (setup(&f, &env, "sub/tiny-inpaint.safetensors") == 0) {
        sd_model_ref *m = sd_value_as_handle(f.model, &sd_handle_model);
        CHECK(sd_checkpoint_info(m->ckpt)->inpaint == 1);
        test_img2img_inpaint(&f);
        /* without a mask the UNet sees ones | a grey image's latent */
        sd_value *lat = empty_latent(&f, 64, 64, 1, &err);
        sd_value *a = ksample(&f, f.pos, f.neg, lat, 1, 2, 1.0, "euler", &err);
        CHECK(samples(a) && samples(a)->shape[1] == 4);
        sd_value_unref(a);
        sd_value_unref(lat);
        teardown(&f);
    }
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
