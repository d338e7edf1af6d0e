/* test_flux_nodes.c - the small Flux nodes called directly:
 *   - EmptySD3LatentImage: zeros [batch, 16, height/8, width/8] (its inputs
 *     step by 16 in the editor; the latent is still /8);
 *   - FluxGuidance / FluxDisableGuidance: every entry's dict copied with
 *     "guidance" set (FLOAT / none), the input list untouched, other keys kept;
 *   - FluxKontextImageScale: the preferred Kontext size nearest in aspect
 *     ratio, equal to ImageScale(lanczos, center) to that size;
 *   - ModelSamplingFlux (a MODEL patch, on the tiny SD1 checkpoint: ComfyUI
 *     takes any MODEL): the schedule the sampling nodes see is
 *     ModelSamplingFlux at the node's shift, for several resolutions;
 *     ModelSamplingDiscrete after it replaces it (and the other way round),
 *     a MODEL made from it keeps it, SamplingPercentToSigma reads its flow
 *     percent_to_sigma.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/node.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/schedules.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;

static sd_value *run1(const char *type, const char *const *names, sd_value **vals, int n, const int *owned) {
    sd_error err;
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run1_named(&ctx, names, vals, n, owned, &err);
}

/* ---- EmptySD3LatentImage ------------------------------------------------------------------- */

static void test_empty_sd3(void) {
    const sd_node_def *d = def_of("EmptySD3LatentImage");
    CHECK(d->inputs[0].def == 1024 && d->inputs[0].min == 16 && d->inputs[0].step == 16);
    CHECK(d->inputs[1].def == 1024 && d->inputs[1].step == 16);
    const int64_t sizes[][3] = {{1024, 768, 2}, {1000, 520, 1}, {16, 16, 3}};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const char *n[] = {"width", "height", "batch_size"};
        sd_value *v[] = {sd_value_int(sizes[k][0]), sd_value_int(sizes[k][1]), sd_value_int(sizes[k][2])};
        const int own[] = {1, 1, 1};
        sd_value *o = run1("EmptySD3LatentImage", n, v, 3, own);
        sd_tensor *s = o ? sd_value_dict_tensor(o, "samples") : NULL;
        CHECK_MSG(s && s->ndim == 4 && s->shape[0] == sizes[k][2] && s->shape[1] == 16 &&
                      s->shape[2] == sizes[k][1] / 8 && s->shape[3] == sizes[k][0] / 8,
                  "EmptySD3LatentImage %lldx%lld", (long long)sizes[k][0], (long long)sizes[k][1]);
        int nz = 0;
        for (int64_t i = 0; s && i < sd_tensor_numel(s); i++) nz += sd_tensor_f32(s)[i] != 0.0f;
        CHECK(nz == 0);
        CHECK(o && sd_value_dict_len(o) == 1);
        sd_value_unref(o);
    }
}

/* ---- FluxGuidance / FluxDisableGuidance ---------------------------------------------------- */

/* Two entries: {cond, pooled_output} and {cond, guidance: 1.0, strength: 0.5}. */
static sd_value *make_cond(void) {
    sd_value *list = sd_value_list();
    for (int k = 0; k < 2; k++) {
        sd_value *d = sd_value_dict();
        sd_tensor *c = sd_tensor_new4(SD_F32, 3, 1, 4, 8, 0);
        nt_fill(c, (unsigned)k + 1);
        sd_value_dict_set(d, "cond", nt_tensor_value(c));
        if (k == 0) sd_value_dict_set(d, "pooled_output", nt_tensor_value(sd_tensor_new4(SD_F32, 2, 1, 8, 0, 0)));
        if (k == 1) {
            sd_value_dict_set(d, "guidance", sd_value_float(1.0));
            sd_value_dict_set(d, "strength", sd_value_float(0.5));
        }
        sd_value_list_append(list, d);
    }
    return list;
}

static void test_guidance(void) {
    sd_value *cond = make_cond();
    const char *n[] = {"conditioning", "guidance"};
    sd_value *v[] = {cond, sd_value_float(4.25)};
    const int own[] = {0, 1};
    sd_value *g = run1("FluxGuidance", n, v, 2, own);
    CHECK(g && sd_value_list_len(g) == 2);
    for (size_t k = 0; g && k < 2; k++) {
        sd_value *e = sd_value_list_get(g, k), *src = sd_value_list_get(cond, k);
        sd_value *gv = sd_value_dict_get(e, "guidance");
        CHECK(gv && sd_value_kind_of(gv) == SD_VAL_FLOAT && sd_value_as_float(gv) == 4.25);
        CHECK(sd_value_dict_tensor(e, "cond") == sd_value_dict_tensor(src, "cond")); /* shared, not copied */
        CHECK(sd_value_dict_len(e) == sd_value_dict_len(src) + (k == 0));
    }
    CHECK(g && sd_value_dict_get(sd_value_list_get(g, 1), "strength") != NULL);
    /* the input is not changed */
    CHECK(!sd_value_dict_get(sd_value_list_get(cond, 0), "guidance"));
    CHECK(sd_value_as_float(sd_value_dict_get(sd_value_list_get(cond, 1), "guidance")) == 1.0);

    const char *dn[] = {"conditioning"};
    sd_value *dv[] = {g};
    const int down[] = {0};
    sd_value *off = run1("FluxDisableGuidance", dn, dv, 1, down);
    CHECK(off && sd_value_list_len(off) == 2);
    for (size_t k = 0; off && k < 2; k++) {
        sd_value *gv = sd_value_dict_get(sd_value_list_get(off, k), "guidance");
        CHECK(gv && sd_value_kind_of(gv) == SD_VAL_NONE); /* present, none: the embedding is left out */
    }
    /* a non-conditioning input names the input */
    sd_error err;
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = "FluxGuidance"};
    sd_value *bad[] = {sd_value_int(3), sd_value_float(1.0)}, *o[1] = {0};
    CHECK(nt_run_named(&ctx, n, bad, 2, o, &err) == SD_ERR_INVALID && !strcmp(err.input, "conditioning"));
    nt_free_values(bad, 2);
    sd_value_unref(off);
    sd_value_unref(g);
    sd_value_unref(cond);
}

/* ---- FluxKontextImageScale ------------------------------------------------------------------- */

static void test_kontext_scale(void) {
    /* (w, h) of the input -> expected size: equal aspect, then the extremes */
    const int64_t cases[][4] = {{64, 64, 1024, 1024}, {300, 100, 1568, 672}, {30, 100, 672, 1568},
                                {96, 64, 1248, 832}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, cases[k][1], cases[k][0], 3);
        nt_fill(img, (unsigned)k + 3);
        sd_value *iv = nt_tensor_value(img);
        const char *n[] = {"image"};
        sd_value *v[] = {iv};
        const int own[] = {0};
        sd_value *o = run1("FluxKontextImageScale", n, v, 1, own);
        sd_tensor *t = o ? sd_value_as_tensor(o) : NULL;
        CHECK_MSG(t && t->shape[1] == cases[k][3] && t->shape[2] == cases[k][2], "%lldx%lld -> %lldx%lld",
                  (long long)cases[k][0], (long long)cases[k][1], t ? (long long)t->shape[2] : -1LL,
                  t ? (long long)t->shape[1] : -1LL);
        const char *sn[] = {"image", "upscale_method", "width", "height", "crop"};
        sd_value *sv[] = {iv, sd_value_string("lanczos"), sd_value_int(cases[k][2]), sd_value_int(cases[k][3]),
                          sd_value_string("center")};
        const int sown[] = {0, 1, 1, 1, 1};
        sd_value *ref = run1("ImageScale", sn, sv, 5, sown);
        sd_tensor *r = ref ? sd_value_as_tensor(ref) : NULL;
        CHECK(t && r && sd_tensor_numel(t) == sd_tensor_numel(r) &&
              memcmp(t->data, r->data, (size_t)sd_tensor_numel(r) * sizeof(float)) == 0);
        sd_value_unref(ref);
        sd_value_unref(o);
        sd_value_unref(iv);
    }
}

/* ---- ModelSamplingFlux ------------------------------------------------------------------------ */

static sd_value *flux_patch(sd_value *model, double max_shift, double base_shift, int w, int h) {
    const char *n[] = {"model", "max_shift", "base_shift", "width", "height"};
    sd_value *v[] = {model, sd_value_float(max_shift), sd_value_float(base_shift), sd_value_int(w), sd_value_int(h)};
    const int own[] = {0, 1, 1, 1, 1};
    return run1("ModelSamplingFlux", n, v, 5, own);
}

/* BasicScheduler(model, scheduler, steps) equals the schedule of ms. */
static void check_schedule(sd_value *model, const sd_model_sampling *ms, const char *sched, int steps,
                           const char *what) {
    const char *n[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *v[] = {model, sd_value_string(sched), sd_value_int(steps), sd_value_float(1.0)};
    const int own[] = {0, 1, 1, 1};
    sd_value *sig = run1("BasicScheduler", n, v, 4, own);
    float *want = malloc((size_t)sd_schedule_capacity(steps) * sizeof *want);
    int nw = 0;
    sd_error err;
    CHECK_OK(sd_schedule_sigmas(ms, sched, steps, want, &nw, &err), &err);
    sd_tensor *t = sig ? sd_value_as_tensor(sig) : NULL;
    CHECK_MSG(t && t->shape[0] == nw && memcmp(t->data, want, (size_t)nw * sizeof *want) == 0,
              "BasicScheduler %s %d on %s", sched, steps, what);
    free(want);
    sd_value_unref(sig);
}

static void test_model_sampling_flux(sd_value *model) {
    const sd_node_def *d = def_of("ModelSamplingFlux");
    CHECK(d->inputs[1].def == 1.15 && d->inputs[2].def == 0.5 && d->inputs[3].def == 1024 && d->inputs[3].step == 8);
    sd_model_sampling *ms = malloc(sizeof *ms);
    const struct {
        double max, base;
        int w, h;
    } cases[] = {{1.15, 0.5, 1024, 1024}, {1.15, 0.5, 512, 768}, {2.0, 0.3, 1344, 768}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        sd_value *m = flux_patch(model, cases[k].max, cases[k].base, cases[k].w, cases[k].h);
        /* the line through (256, base) and (4096, max) at w*h/256 patches */
        double mu = cases[k].base + (cases[k].max - cases[k].base) * ((double)cases[k].w * cases[k].h / 256.0 - 256.0) / 3840.0;
        sd_model_ref *r = m ? sd_value_as_handle(m, &sd_handle_model) : NULL;
        CHECK(r && r->patches.sampling_set && r->patches.sampling_base == SD_MS_FLUX &&
              fabs(r->patches.shift - mu) < 1e-12);
        sd_model_sampling_init_flux(ms, sd_ms_flux_shift(cases[k].max, cases[k].base, cases[k].w, cases[k].h));
        CHECK(ms->n == 10000 && ms->kind == SD_MS_FLUX && ms->prediction == SD_PRED_CONST);
        check_schedule(m, ms, "simple", 4, "ModelSamplingFlux");
        check_schedule(m, ms, "normal", 7, "ModelSamplingFlux");
        check_schedule(m, ms, "beta", 10, "ModelSamplingFlux");
        sd_value_unref(m);
    }
    /* SamplingPercentToSigma: the flow percent_to_sigma (1 at 0, the shift function between) */
    sd_value *m = flux_patch(model, 1.15, 0.5, 1024, 1024);
    sd_model_sampling_init_flux(ms, sd_ms_flux_shift(1.15, 0.5, 1024, 1024));
    const double ps[] = {0.0, 0.25, 1.0};
    for (int i = 0; i < 3; i++) {
        const char *n[] = {"model", "sampling_percent", "return_actual_sigma"};
        sd_value *v[] = {m, sd_value_float(ps[i]), sd_value_bool(0)};
        const int own[] = {0, 1, 1};
        sd_value *o = run1("SamplingPercentToSigma", n, v, 3, own);
        double e = exp(ms->shift), t = 1.0 - ps[i];
        double want = ps[i] <= 0.0 ? 1.0 : ps[i] >= 1.0 ? 0.0 : e / (e + (1.0 / t - 1.0));
        CHECK_MSG(o && sd_value_as_float(o) == want, "PercentToSigma(%g) %g, want %g", ps[i],
                  o ? sd_value_as_float(o) : NAN, want);
        sd_value_unref(o);
    }
    /* ModelSamplingDiscrete after it replaces the whole object, and back */
    const char *dn[] = {"model", "sampling", "zsnr"};
    sd_value *dv[] = {m, sd_value_string("eps"), sd_value_bool(0)};
    const int down[] = {0, 1, 1};
    sd_value *disc = run1("ModelSamplingDiscrete", dn, dv, 3, down);
    sd_model_sampling_init_ex(ms, SD_PRED_EPS, 0);
    check_schedule(disc, ms, "simple", 4, "ModelSamplingDiscrete after ModelSamplingFlux");
    sd_value *back = flux_patch(disc, 1.15, 0.5, 512, 512);
    sd_model_sampling_init_flux(ms, sd_ms_flux_shift(1.15, 0.5, 512, 512));
    check_schedule(back, ms, "simple", 4, "ModelSamplingFlux after ModelSamplingDiscrete");
    /* a MODEL made from the patched one as the LoRA loaders make theirs
     * (sd_nodes_model_value_patched with its patches) keeps the patch */
    sd_model_ref *r = back ? sd_value_as_handle(back, &sd_handle_model) : NULL;
    sd_value *copy = r ? sd_nodes_model_value_patched(r->ckpt, r->loras, &r->patches) : NULL;
    check_schedule(copy, ms, "sgm_uniform", 5, "a copy of the patched MODEL");
    sd_value_unref(copy);
    sd_value_unref(back);
    sd_value_unref(disc);
    sd_value_unref(m);
    free(ms);
}

int main(void) {
    nt_tiny_sd1 t;
    nt_tiny_sd1_init(&t, "nodes_flux_nodes");
    g_env = &t.env;
    test_empty_sd3();
    test_guidance();
    test_kontext_scale();
    sd_value *ck[3] = {0};
    sd_error err;
    const sd_node_def *loader = sd_registry_find("CheckpointLoaderSimple");
    sd_value *name[1] = {sd_value_string("tiny.safetensors")};
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = "CheckpointLoaderSimple"};
    CHECK_OK(loader->run(&ctx, name, ck, &err), &err);
    sd_value_unref(name[0]);
    if (ck[0]) test_model_sampling_flux(ck[0]);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    nt_tiny_sd1_free(&t);
    return sd_test_finish();
}
