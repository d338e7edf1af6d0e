/* test_latent_nodes.c - the latent node family called directly: shapes and
 * values of EmptyLatentImage, LatentUpscale(By), RepeatLatentBatch,
 * LatentComposite (with feathering), SetLatentNoiseMask, the SaveLatent /
 * LoadLatent round trip in ComfyUI's .latent format, and LatentFromBatch,
 * LatentBlend, LatentCrop, LatentFlip, LatentRotate. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "models/image/imageops.h"
#include "nodes/latent/latent.h"
#include "nodes_ctx.h"
#include "testutil.h"

/* Runs a one-output latent node; returns the output value (owned). */
static sd_value *run1(nt_env *e, const char *cls, sd_value **in, sd_status want) {
    sd_error err = {0};
    sd_node_ctx ctx = nt_ctx(e, cls);
    sd_value *out[1] = {0};
    sd_status rc = nt_run(def_of(cls), &ctx, in, out, &err);
    CHECK_MSG(rc == want, "%s: rc %d (%s)", cls, rc, err.msg);
    sd_value_unref(ctx.ui);
    return out[0];
}

static sd_tensor *samples_of(const sd_value *v) { return v ? sd_value_dict_tensor(v, "samples") : NULL; }

static int shape_is(const sd_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return t && t->ndim == 4 && t->shape[0] == a && t->shape[1] == b && t->shape[2] == c && t->shape[3] == d;
}

static void test_empty(nt_env *e) {
    const sd_node_def *d = def_of("EmptyLatentImage");
    CHECK(d->inputs[0].def == 512 && d->inputs[0].min == 16 && d->inputs[0].step == 8);
    CHECK(d->inputs[2].def == 1 && d->inputs[2].min == 1 && d->inputs[2].max == 4096);
    sd_value *in[3] = {sd_value_int(512), sd_value_int(256), sd_value_int(2)};
    sd_value *o = run1(e, "EmptyLatentImage", in, SD_OK);
    sd_tensor *s = samples_of(o);
    CHECK(shape_is(s, 2, 4, 32, 64));
    CHECK(o && sd_value_dict_len(o) == 1);
    if (s) {
        int nz = 0;
        for (int64_t i = 0; i < sd_tensor_numel(s); i++) nz += sd_tensor_f32(s)[i] != 0;
        CHECK(nz == 0);
    }
    sd_value_unref(o);
    nt_free_values(in, 3);
}

static void test_upscale(nt_env *e) {
    sd_error err = {0};
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 2, 4, 8, 8);
    nt_fill(x, 1);
    sd_value *lat = nt_latent(sd_tensor_ref(x));
    sd_tensor *nm = sd_tensor_new4(SD_F32, 4, 1, 1, 8, 8);
    sd_value_dict_set(lat, "noise_mask", nt_tensor_value(nm));
    sd_value *bi = sd_value_list();
    sd_value_list_append(bi, sd_value_int(0));
    sd_value_list_append(bi, sd_value_int(1));
    sd_value_dict_set(lat, "batch_index", bi);

    sd_value *in[5] = {sd_value_ref(lat), sd_value_string("nearest-exact"), sd_value_int(128),
                       sd_value_int(96), sd_value_string("disabled")};
    sd_value *o = run1(e, "LatentUpscale", in, SD_OK);
    sd_tensor *s = samples_of(o);
    CHECK(shape_is(s, 2, 4, 12, 16));
    sd_tensor *ref = NULL;
    CHECK_OK(sd_imageops_upscale(x, 16, 12, SD_UPSCALE_NEAREST_EXACT, SD_CROP_DISABLED, &ref, &err), &err);
    double ma;
    long w;
    CHECK(s && ref && sd_test_allclose(s, ref, 0, 0, &ma, &w));
    sd_tensor_unref(ref);
    /* other keys survive (samples.copy()) */
    CHECK(o && sd_value_dict_get(o, "noise_mask") && sd_value_dict_get(o, "batch_index"));
    sd_value_unref(o);
    /* width 0 keeps the aspect; sizes below 64 px are raised to 64 */
    sd_value_unref(in[2]); sd_value_unref(in[3]);
    in[2] = sd_value_int(0);
    in[3] = sd_value_int(32);
    o = run1(e, "LatentUpscale", in, SD_OK);
    CHECK(shape_is(samples_of(o), 2, 4, 8, 8));
    sd_value_unref(o);
    /* 0 x 0: unchanged (same value) */
    sd_value_unref(in[3]);
    in[3] = sd_value_int(0);
    o = run1(e, "LatentUpscale", in, SD_OK);
    CHECK(o == lat);
    sd_value_unref(o);
    /* lanczos is image-only */
    sd_value_unref(in[1]); sd_value_unref(in[2]);
    in[1] = sd_value_string("lanczos");
    in[2] = sd_value_int(128);
    o = run1(e, "LatentUpscale", in, SD_ERR_INVALID);
    sd_value_unref(o);
    nt_free_values(in, 5);

    /* LatentUpscaleBy 1.5 with bislerp: 8 -> 12 */
    sd_value *bin[3] = {sd_value_ref(lat), sd_value_string("bislerp"), sd_value_float(1.5)};
    o = run1(e, "LatentUpscaleBy", bin, SD_OK);
    s = samples_of(o);
    CHECK(shape_is(s, 2, 4, 12, 12));
    CHECK_OK(sd_imageops_upscale(x, 12, 12, SD_UPSCALE_BISLERP, SD_CROP_DISABLED, &ref, &err), &err);
    CHECK(s && ref && sd_test_allclose(s, ref, 0, 0, &ma, &w));
    sd_tensor_unref(ref);
    sd_value_unref(o);
    /* 1.0625 * 8 = 8.5 -> 8 (half to even) */
    sd_value_unref(bin[2]);
    bin[2] = sd_value_float(1.0625);
    o = run1(e, "LatentUpscaleBy", bin, SD_OK);
    CHECK(shape_is(samples_of(o), 2, 4, 8, 8));
    sd_value_unref(o);
    nt_free_values(bin, 3);
    sd_value_unref(lat);
    sd_tensor_unref(x);
}

static void test_repeat(nt_env *e) {
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 2, 4, 3, 3);
    nt_fill(x, 7);
    sd_value *lat = nt_latent(sd_tensor_ref(x));
    sd_tensor *nm = sd_tensor_new4(SD_F32, 4, 2, 1, 3, 3);
    nt_fill(nm, 8);
    sd_value_dict_set(lat, "noise_mask", nt_tensor_value(sd_tensor_ref(nm)));
    sd_value *bi = sd_value_list();
    sd_value_list_append(bi, sd_value_int(2));
    sd_value_list_append(bi, sd_value_int(3));
    sd_value_dict_set(lat, "batch_index", bi);
    sd_value *in[2] = {lat, sd_value_int(3)};
    sd_value *o = run1(e, "RepeatLatentBatch", in, SD_OK);
    sd_tensor *s = samples_of(o);
    CHECK(shape_is(s, 6, 4, 3, 3));
    if (s) for (int r = 0; r < 3; r++) CHECK(memcmp((char *)s->data + r * x->nbytes, x->data, x->nbytes) == 0);
    sd_tensor *m = o ? sd_value_dict_tensor(o, "noise_mask") : NULL;
    CHECK(shape_is(m, 6, 1, 3, 3));
    if (m) CHECK(memcmp((char *)m->data + 2 * nm->nbytes, nm->data, nm->nbytes) == 0);
    sd_value *nb = o ? sd_value_dict_get(o, "batch_index") : NULL;
    CHECK(nb && sd_value_list_len(nb) == 6);
    static const int64_t want[6] = {2, 3, 4, 5, 6, 7};
    for (size_t i = 0; nb && i < 6 && i < sd_value_list_len(nb); i++)
        CHECK(sd_value_as_int(sd_value_list_get(nb, i)) == want[i]);
    sd_value_unref(o);
    /* a single mask is not repeated (it broadcasts) */
    sd_tensor *one = sd_tensor_new4(SD_F32, 4, 1, 1, 3, 3);
    sd_value_dict_set(lat, "noise_mask", nt_tensor_value(one));
    o = run1(e, "RepeatLatentBatch", in, SD_OK);
    CHECK(shape_is(o ? sd_value_dict_tensor(o, "noise_mask") : NULL, 1, 1, 3, 3));
    sd_value_unref(o);
    nt_free_values(in, 2);
    sd_tensor_unref(nm);
    sd_tensor_unref(x);
}

static void test_composite(nt_env *e) {
    /* plain paste at (16, 8) px = (2, 1) latent */
    sd_tensor *to = sd_tensor_new4(SD_F32, 4, 1, 4, 8, 8);
    sd_tensor *from = sd_tensor_new4(SD_F32, 4, 1, 4, 2, 2);
    for (int64_t i = 0; i < sd_tensor_numel(from); i++) sd_tensor_f32(from)[i] = 1.0f;
    sd_value *in[5] = {nt_latent(sd_tensor_ref(to)), nt_latent(sd_tensor_ref(from)), sd_value_int(16),
                       sd_value_int(8), sd_value_int(0)};
    sd_value *o = run1(e, "LatentComposite", in, SD_OK);
    sd_tensor *s = samples_of(o);
    CHECK(shape_is(s, 1, 4, 8, 8));
    if (s) {
        int bad = 0;
        for (int c = 0; c < 4; c++)
            for (int y = 0; y < 8; y++)
                for (int x = 0; x < 8; x++) {
                    float want = (y >= 1 && y < 3 && x >= 2 && x < 4) ? 1.0f : 0.0f;
                    if (sd_tensor_f32(s)[(c * 8 + y) * 8 + x] != want) bad++;
                }
        CHECK_MSG(bad == 0, "composite paste: %d wrong", bad);
    }
    sd_value_unref(o);
    /* the input is untouched */
    int nz = 0;
    for (int64_t i = 0; i < sd_tensor_numel(to); i++) nz += sd_tensor_f32(to)[i] != 0;
    CHECK(nz == 0);
    nt_free_values(in, 5);
    sd_tensor_unref(from);

    /* feathered paste: 4x4 ones at (1, 1), feather 2 -> edge weights .5, 1 */
    from = sd_tensor_new4(SD_F32, 4, 1, 1, 4, 4);
    for (int64_t i = 0; i < 16; i++) sd_tensor_f32(from)[i] = 1.0f;
    sd_tensor *to1 = sd_tensor_new4(SD_F32, 4, 1, 1, 8, 8);
    sd_value *fin[5] = {nt_latent(to1), nt_latent(from), sd_value_int(8), sd_value_int(8), sd_value_int(16)};
    o = run1(e, "LatentComposite", fin, SD_OK);
    s = samples_of(o);
    static const float r[4] = {0.5f, 1, 1, 0.5f};
    if (s) {
        int bad = 0;
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
                float want = (y >= 1 && y < 5 && x >= 1 && x < 5) ? r[y - 1] * r[x - 1] : 0.0f;
                if (fabsf(sd_tensor_f32(s)[y * 8 + x] - want) > 1e-7f) bad++;
            }
        CHECK_MSG(bad == 0, "feathered composite: %d wrong", bad);
    } else CHECK(!"no output");
    sd_value_unref(o);
    /* pasted past the right edge: only the part that fits, no feather on
     * the clipped side */
    sd_value_unref(fin[2]);
    fin[2] = sd_value_int(48);
    o = run1(e, "LatentComposite", fin, SD_OK);
    s = samples_of(o);
    if (s) {
        CHECK(sd_tensor_f32(s)[2 * 8 + 7] == 1.0f && sd_tensor_f32(s)[2 * 8 + 6] == 0.5f &&
              sd_tensor_f32(s)[2 * 8 + 5] == 0.0f);
    } else CHECK(!"no output");
    sd_value_unref(o);
    nt_free_values(fin, 5);
    sd_tensor_unref(to);
}

static void test_noise_mask(nt_env *e) {
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 2, 4, 3, 3);
    sd_tensor *mask = sd_tensor_new4(SD_F32, 3, 2, 3, 3, 0);
    nt_fill(mask, 4);
    sd_value *in[2] = {nt_latent(sd_tensor_ref(x)), nt_tensor_value(sd_tensor_ref(mask))};
    sd_value *o = run1(e, "SetLatentNoiseMask", in, SD_OK);
    sd_tensor *m = o ? sd_value_dict_tensor(o, "noise_mask") : NULL;
    CHECK(shape_is(m, 2, 1, 3, 3));
    if (m) CHECK(memcmp(m->data, mask->data, mask->nbytes) == 0);
    CHECK(samples_of(o) == x);
    CHECK(sd_value_dict_get(in[0], "noise_mask") == NULL); /* input dict unchanged */
    sd_value_unref(o);
    nt_free_values(in, 2);
    sd_tensor_unref(mask);
    sd_tensor_unref(x);
}

static void test_save_load(nt_env *e) {
    sd_error err = {0};
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, 4, 5, 6);
    nt_fill(x, 99);
    const sd_node_def *sl = def_of("SaveLatent");
    CHECK(sl->flags & SD_NODE_OUTPUT && strcmp(sl->inputs[1].def_str, "latents/ComfyUI") == 0);
    sd_node_ctx ctx = nt_ctx(e, "SaveLatent");
    ctx.prompt_json = "{\"1\": {\"class_type\": \"SaveLatent\", \"inputs\": {}}}";
    ctx.extra_pnginfo_json = "{\"workflow\": {\"a\": 1}}";
    sd_value *in[2] = {nt_latent(sd_tensor_ref(x)), sd_value_string("latents/ComfyUI")};
    CHECK_OK(nt_run(sl, &ctx, in, NULL, &err), &err);
    char path[8192];
    snprintf(path, sizeof path, "%s/latents/ComfyUI_00001_.latent", e->output);
    CHECK(nt_file_exists(path));
    sd_value *lat = ctx.ui ? sd_value_dict_get(ctx.ui, "latents") : NULL;
    CHECK(lat && sd_value_list_len(lat) == 1);
    if (lat && sd_value_list_len(lat) == 1) {
        sd_value *r = sd_value_list_get(lat, 0);
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(r, "filename")), "ComfyUI_00001_.latent") == 0);
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(r, "subfolder")), "latents") == 0);
    }
    CHECK(ctx.ui && sd_value_list_len(sd_value_dict_get(ctx.ui, "files")) == 1);
    sd_value_unref(ctx.ui);
    ctx.ui = NULL;
    /* file layout: tensor, empty version marker, prompt + workflow metadata */
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (f) {
        const sd_st_entry *t = sd_st_find(f, "latent_tensor");
        const sd_st_entry *v = sd_st_find(f, "latent_format_version_0");
        CHECK(t && t->dtype == SD_F32 && t->ndim == 4 && t->shape[3] == 6);
        CHECK(v && v->ndim == 1 && v->shape[0] == 0 && v->nbytes == 0);
        const char *pm = sd_st_metadata(f, "prompt");
        CHECK(pm && strcmp(pm, ctx.prompt_json) == 0);
        const char *wm = sd_st_metadata(f, "workflow");
        CHECK(wm && strcmp(wm, "{\"a\": 1}") == 0);
        sd_st_close(f);
    }
    /* a second save counts on */
    CHECK_OK(nt_run(sl, &ctx, in, NULL, &err), &err);
    snprintf(path, sizeof path, "%s/latents/ComfyUI_00002_.latent", e->output);
    CHECK(nt_file_exists(path));
    sd_value_unref(ctx.ui);
    nt_free_values(in, 2);

    /* LoadLatent from the input folder gives the same samples */
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/saved.latent'", path, e->input);
    CHECK(system(cmd) == 0);
    const sd_node_def *ll = def_of("LoadLatent");
    CHECK(strcmp(ll->inputs[0].file_folder, "input") == 0);
    sd_value *opts = NULL;
    CHECK_OK(ll->inputs[0].options_fn(&e->env, &opts, &err), &err);
    CHECK(opts && sd_value_list_len(opts) == 1);
    sd_value_unref(opts);
    sd_value *lin[1] = {sd_value_string("saved.latent")};
    sd_value *o = run1(e, "LoadLatent", lin, SD_OK);
    sd_tensor *s = samples_of(o);
    double ma;
    long w;
    CHECK(s && sd_test_allclose(s, x, 0, 0, &ma, &w));
    sd_value_unref(o);
    nt_free_values(lin, 1);

    /* a pre-marker file holds 0.18215-scaled latents: multiplied back */
    sd_st_writer *wr = sd_st_writer_new();
    CHECK_OK(sd_st_writer_add(wr, "latent_tensor", x, &err), &err);
    snprintf(path, sizeof path, "%s/old.latent", e->input);
    CHECK_OK(sd_st_writer_save(wr, path, &err), &err);
    sd_st_writer_free(wr);
    lin[0] = sd_value_string("old.latent");
    o = run1(e, "LoadLatent", lin, SD_OK);
    s = samples_of(o);
    if (s && sd_tensor_same_shape(s, x)) {
        int bad = 0;
        float mul = (float)(1.0 / 0.18215);
        for (int64_t i = 0; i < sd_tensor_numel(x); i++)
            if (sd_tensor_f32(s)[i] != sd_tensor_f32(x)[i] * mul) bad++;
        CHECK(bad == 0);
    } else CHECK(!"LoadLatent old format");
    sd_value_unref(o);
    nt_free_values(lin, 1);
    /* a missing file names the input */
    lin[0] = sd_value_string("missing.latent");
    o = run1(e, "LoadLatent", lin, SD_ERR_NOT_FOUND);
    sd_value_unref(o);
    nt_free_values(lin, 1);
    sd_tensor_unref(x);
}

static void test_transforms(nt_env *e) {
    /* LatentFromBatch: items 1..2 of 4, masks tiled from 2, batch_index set */
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 4, 2, 2, 2);
    for (int64_t i = 0; i < sd_tensor_numel(x); i++) sd_tensor_f32(x)[i] = (float)(i / 8); /* item id */
    sd_value *lat = nt_latent(sd_tensor_ref(x));
    sd_tensor *nm = sd_tensor_new4(SD_F32, 4, 2, 1, 2, 2);
    for (int64_t i = 0; i < 8; i++) sd_tensor_f32(nm)[i] = (float)(10 + i / 4);
    sd_value_dict_set(lat, "noise_mask", nt_tensor_value(nm));
    sd_value *in[3] = {lat, sd_value_int(1), sd_value_int(2)};
    sd_value *o = run1(e, "LatentFromBatch", in, SD_OK);
    sd_tensor *s = samples_of(o);
    CHECK(shape_is(s, 2, 2, 2, 2));
    if (s) CHECK(sd_tensor_f32(s)[0] == 1 && sd_tensor_f32(s)[8] == 2);
    sd_tensor *m = o ? sd_value_dict_tensor(o, "noise_mask") : NULL;
    CHECK(shape_is(m, 2, 1, 2, 2));
    if (m) CHECK(sd_tensor_f32(m)[0] == 11 && sd_tensor_f32(m)[4] == 10);
    sd_value *bi = o ? sd_value_dict_get(o, "batch_index") : NULL;
    CHECK(bi && sd_value_list_len(bi) == 2 && sd_value_as_int(sd_value_list_get(bi, 0)) == 1 &&
          sd_value_as_int(sd_value_list_get(bi, 1)) == 2);
    /* from the result again: batch_index is sliced, not renumbered */
    sd_value *in2[3] = {o, sd_value_int(1), sd_value_int(5)};
    sd_value *o2 = run1(e, "LatentFromBatch", in2, SD_OK);
    bi = o2 ? sd_value_dict_get(o2, "batch_index") : NULL;
    CHECK(shape_is(samples_of(o2), 1, 2, 2, 2));
    CHECK(bi && sd_value_list_len(bi) == 1 && sd_value_as_int(sd_value_list_get(bi, 0)) == 2);
    sd_value_unref(o2);
    nt_free_values(in2, 3);
    nt_free_values(in, 3);
    sd_tensor_unref(x);

    /* LatentBlend */
    sd_tensor *a = sd_tensor_new4(SD_F32, 4, 1, 1, 2, 2), *b = sd_tensor_new4(SD_F32, 4, 1, 1, 2, 2);
    for (int i = 0; i < 4; i++) { sd_tensor_f32(a)[i] = 4.0f; sd_tensor_f32(b)[i] = 8.0f; }
    sd_value *bin[3] = {nt_latent(a), nt_latent(b), sd_value_float(0.25)};
    o = run1(e, "LatentBlend", bin, SD_OK);
    s = samples_of(o);
    if (s) CHECK(sd_tensor_f32(s)[3] == 7.0f); /* 4 * .25 + 8 * .75 */
    else CHECK(!"LatentBlend output");
    sd_value_unref(o);
    sd_value_unref(bin[1]);
    sd_tensor *big = sd_tensor_new4(SD_F32, 4, 1, 1, 4, 6);
    bin[1] = nt_latent(big);
    o = run1(e, "LatentBlend", bin, SD_OK); /* resized to samples1 */
    CHECK(shape_is(samples_of(o), 1, 1, 2, 2));
    sd_value_unref(o);
    nt_free_values(bin, 3);

    /* LatentCrop: (x, y) = (8, 16) px -> (1, 2); 64 px -> 8 latent */
    x = sd_tensor_new4(SD_F32, 4, 1, 1, 16, 16);
    for (int i = 0; i < 256; i++) sd_tensor_f32(x)[i] = (float)i;
    sd_value *cin[5] = {nt_latent(sd_tensor_ref(x)), sd_value_int(64), sd_value_int(64), sd_value_int(8),
                        sd_value_int(16)};
    o = run1(e, "LatentCrop", cin, SD_OK);
    s = samples_of(o);
    CHECK(shape_is(s, 1, 1, 8, 8));
    if (s) CHECK(sd_tensor_f32(s)[0] == 2 * 16 + 1 && sd_tensor_f32(s)[63] == 9 * 16 + 8);
    sd_value_unref(o);
    sd_value_unref(cin[3]);
    cin[3] = sd_value_int(120); /* 15 > 16 - 8: clamped to 8 */
    o = run1(e, "LatentCrop", cin, SD_OK);
    s = samples_of(o);
    if (s) CHECK(sd_tensor_f32(s)[0] == 2 * 16 + 8);
    else CHECK(!"LatentCrop output");
    sd_value_unref(o);
    nt_free_values(cin, 5);
    sd_tensor_unref(x);

    /* LatentFlip / LatentRotate on [[0 1 2] [3 4 5]] */
    x = sd_tensor_new4(SD_F32, 4, 1, 1, 2, 3);
    for (int i = 0; i < 6; i++) sd_tensor_f32(x)[i] = (float)i;
    static const struct { const char *cls, *arg; int h, w; float v[6]; } cases[] = {
        {"LatentFlip", "x-axis: vertically", 2, 3, {3, 4, 5, 0, 1, 2}},
        {"LatentFlip", "y-axis: horizontally", 2, 3, {2, 1, 0, 5, 4, 3}},
        {"LatentRotate", "none", 2, 3, {0, 1, 2, 3, 4, 5}},
        {"LatentRotate", "90 degrees", 3, 2, {3, 0, 4, 1, 5, 2}},
        {"LatentRotate", "180 degrees", 2, 3, {5, 4, 3, 2, 1, 0}},
        {"LatentRotate", "270 degrees", 3, 2, {2, 5, 1, 4, 0, 3}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sd_value *rin[2] = {nt_latent(sd_tensor_ref(x)), sd_value_string(cases[k].arg)};
        o = run1(e, cases[k].cls, rin, SD_OK);
        s = samples_of(o);
        CHECK_MSG(shape_is(s, 1, 1, cases[k].h, cases[k].w), "%s %s shape", cases[k].cls, cases[k].arg);
        if (s && s->shape[2] == cases[k].h)
            for (int i = 0; i < 6; i++)
                CHECK_MSG(sd_tensor_f32(s)[i] == cases[k].v[i], "%s %s [%d] = %g", cases[k].cls,
                          cases[k].arg, i, sd_tensor_f32(s)[i]);
        sd_value_unref(o);
        nt_free_values(rin, 2);
    }
    sd_tensor_unref(x);
}

int main(void) {
    sd_error err = {0};
    sd_registry_reset();
    CHECK_OK(sd_registry_add(sd_nodes_latent, &err), &err);
    nt_env e;
    nt_env_init(&e, "nodes_latent");
    test_empty(&e);
    test_upscale(&e);
    test_repeat(&e);
    test_composite(&e);
    test_noise_mask(&e);
    test_save_load(&e);
    test_transforms(&e);
    sd_env_cleanup(&e.env);
    sd_registry_reset();
    return sd_test_finish();
}
