/* test_golden_custom_sampling.c - SamplerCustomAdvanced (RandomNoise +
 * CFGGuider + KSamplerSelect + BasicScheduler) and SamplerCustom against
 * KSampler and ComfyUI, on the manifest's models.
 *
 * For every "e2e" case without LoRA or ControlNet: the case's own settings
 * (seed, steps, cfg, sampler, scheduler, size, prompts) through the custom
 * nodes give KSampler's latent bit for bit and ComfyUI's latent_out at the
 * case's tolerance. On the first such case the (sampler, scheduler) pairs of
 * golden/manifest_math.json's sampler cases (one per noise source and per
 * scheduler, with that case's steps) and its KSampler denoise cases are run
 * (one per denoise value and per scheduler, at most 4 steps) are run both
 * ways too and must agree bit for bit. Samplers for which KSampler
 * drops the penultimate sigma (dpm_2, dpm_2_ancestral, uni_pc, uni_pc_bh2)
 * are left out: BasicScheduler has no such rule in ComfyUI either, so there
 * the two nodes differ by design.
 * Data: SDFLOW_TESTDATA (default ../shared/testdata); tokenizer:
 * SDFLOW_TOKENIZER_DIR or <shared>/data/clip. Missing data: exit 77.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/schedules.h"
#include "nodes/loaders/loaders.h"
#include "golden.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;

static sd_status run(const char *type, const char *const *names, sd_value *const *vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

/* runs with owned[i] inputs released afterwards; returns output 0 (others dropped) */
static sd_value *run1(const char *type, const char *const *names, sd_value **vals, int n,
                      const int *owned) {
    sd_error err;
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run1_named(&ctx, names, vals, n, owned, &err);
}

static const char *sstr(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}
static double snum(const cJSON *o, const char *k) {
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

typedef struct setup {
    sd_value *model, *pos, *neg, *latent;
} setup;

static sd_tensor *samples(const sd_value *l) { return l ? sd_value_dict_tensor(l, "samples") : NULL; }

static int bit_equal(const sd_tensor *a, const sd_tensor *b) {
    return a && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

/* KSampler, SamplerCustomAdvanced and SamplerCustom with one setting; the
 * custom-advanced latent is returned (new reference). */
static sd_value *compare(const char *id, setup *s, int64_t seed, int steps, double cfg,
                         const char *sampler, const char *sched, double denoise) {
    const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                        "positive", "negative", "latent_image", "denoise"};
    sd_value *kv[] = {s->model, sd_value_int(seed), sd_value_int(steps), sd_value_float(cfg),
                      sd_value_string(sampler), sd_value_string(sched), s->pos, s->neg, s->latent,
                      sd_value_float(denoise)};
    const int ko[] = {0, 1, 1, 1, 1, 1, 0, 0, 0, 1};
    sd_value *ref = run1("KSampler", kn, kv, 10, ko);

    const char *nn[] = {"noise_seed"}, *gn[] = {"model", "positive", "negative", "cfg"},
               *sn[] = {"sampler_name"}, *bn[] = {"model", "scheduler", "steps", "denoise"};
    sd_value *nv[] = {sd_value_int(seed)}, *gv[] = {s->model, s->pos, s->neg, sd_value_float(cfg)},
             *sv[] = {sd_value_string(sampler)},
             *bv[] = {s->model, sd_value_string(sched), sd_value_int(steps), sd_value_float(denoise)};
    const int o1[] = {1}, go[] = {0, 0, 0, 1}, bo[] = {0, 1, 1, 1};
    sd_value *noise = run1("RandomNoise", nn, nv, 1, o1), *guider = run1("CFGGuider", gn, gv, 4, go),
             *smp = run1("KSamplerSelect", sn, sv, 1, o1), *sig = run1("BasicScheduler", bn, bv, 4, bo);
    sd_error err;
    sd_value *adv[2] = {0}, *cus[2] = {0};
    const char *an[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
    sd_value *av[] = {noise, guider, smp, sig, s->latent};
    CHECK_OK(run("SamplerCustomAdvanced", an, av, 5, adv, &err), &err);
    const char *cn[] = {"model", "add_noise", "noise_seed", "cfg", "positive", "negative",
                        "sampler", "sigmas", "latent_image"};
    sd_value *cv[] = {s->model, sd_value_bool(1), sd_value_int(seed), sd_value_float(cfg), s->pos,
                      s->neg, smp, sig, s->latent};
    CHECK_OK(run("SamplerCustom", cn, cv, 9, cus, &err), &err);
    for (int i = 1; i < 4; i++) sd_value_unref(cv[i]);
    int same_adv = bit_equal(samples(ref), samples(adv[0]));
    int same_cus = bit_equal(samples(ref), samples(cus[0]));
    CHECK_MSG(same_adv, "%s %s/%s steps %d denoise %g: SamplerCustomAdvanced differs from KSampler",
              id, sampler, sched, steps, denoise);
    CHECK_MSG(same_cus, "%s %s/%s steps %d denoise %g: SamplerCustom differs from KSampler", id,
              sampler, sched, steps, denoise);
    printf("  %s %-24s %-12s steps %d denoise %-4g: %s\n", id, sampler, sched, steps, denoise,
           same_adv && same_cus ? "KSampler = SamplerCustomAdvanced = SamplerCustom, bit for bit"
                                : "DIFFERENT");
    sd_value_unref(adv[1]);
    for (int i = 0; i < 2; i++) sd_value_unref(cus[i]);
    sd_value_unref(ref), sd_value_unref(noise), sd_value_unref(guider), sd_value_unref(smp),
        sd_value_unref(sig);
    return adv[0];
}

/* The sampler cases to cross-check: manifest order, one per noise source and
 * per scheduler not yet covered. */
static void sampler_pairs(const char *id, setup *s, const cJSON *settings, const cJSON *math) {
    const cJSON *smp = cJSON_GetObjectItemCaseSensitive(math, "samplers");
    const cJSON *c;
    char seen_noise[16][64], seen_sched[16][64];
    int nn = 0, ns = 0, ran = 0;
    int64_t seed = (int64_t)snum(settings, "seed");
    int steps = (int)snum(settings, "steps");
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(smp, "cases")) {
        const char *sampler = sstr(c, "sampler"), *sched = sstr(c, "scheduler");
        const char *noise = sstr(c, "noise_source");
        if (!sampler || !sched || sd_sampler_discards_penultimate(sampler)) continue;
        if (!noise) noise = "none";
        int new_noise = 1, new_sched = 1;
        for (int i = 0; i < nn; i++) new_noise &= strcmp(seen_noise[i], noise) != 0;
        for (int i = 0; i < ns; i++) new_sched &= strcmp(seen_sched[i], sched) != 0;
        if ((!new_noise && !new_sched) || ran >= 5) continue;
        if (new_noise && nn < 16) snprintf(seen_noise[nn++], 64, "%s", noise);
        if (new_sched && ns < 16) snprintf(seen_sched[ns++], 64, "%s", sched);
        sd_value_unref(compare(id, s, seed, steps, snum(c, "cfg"), sampler, sched, 1.0));
        ran++;
    }
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(math, "schedules"),
                                                       "ksampler_cases");
    double seen_denoise[16];
    int nd = 0;
    ns = 0;
    cJSON_ArrayForEach(c, ks) { /* one per denoise and per scheduler, at most 4 steps */
        const char *sampler = sstr(c, "sampler"), *sched = sstr(c, "scheduler");
        double dn = snum(c, "denoise");
        if (!sampler || !sched || sd_sampler_discards_penultimate(sampler) || snum(c, "steps") > 4)
            continue;
        int new_d = 1, new_sched = 1;
        for (int i = 0; i < nd; i++) new_d &= seen_denoise[i] != dn;
        for (int i = 0; i < ns; i++) new_sched &= strcmp(seen_sched[i], sched) != 0;
        if (!new_d && !new_sched) continue;
        if (new_d && nd < 16) seen_denoise[nd++] = dn;
        if (new_sched && ns < 16) snprintf(seen_sched[ns++], 64, "%s", sched);
        sd_value_unref(compare(id, s, seed, (int)snum(c, "steps"), snum(settings, "cfg"), sampler,
                               sched, snum(c, "denoise")));
        ran++;
    }
    CHECK_MSG(ran >= 3, "only %d sampler settings cross-checked", ran);
}

static const cJSON *pick_model(const cJSON *models, int want_g) {
    const cJSON *m;
    cJSON_ArrayForEach(m, models) {
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        if (!cJSON_GetObjectItemCaseSensitive(cfg, "unet_config")) continue;
        if (!cJSON_GetObjectItemCaseSensitive(cfg, "clip_l")) continue;
        if (!!cJSON_GetObjectItemCaseSensitive(cfg, "clip_g") == want_g) return m;
    }
    return NULL;
}

static void run_case(const cJSON *cs, const cJSON *models, const char *data, const cJSON *math,
                     int cross_check) {
    const char *id = sstr(cs, "id");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cs, "settings");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(cs, "tensors");
    const cJSON *model = pick_model(models, cJSON_GetObjectItemCaseSensitive(tensors, "pos.g.ids") != NULL);
    CHECK_MSG(model != NULL, "%s: no manifest model fits", id);
    if (!model) return;
    char ckpt[4096], gpath[4096];
    snprintf(ckpt, sizeof ckpt, "%s/%s", data, sstr(model, "file"));
    snprintf(gpath, sizeof gpath, "%s/%s", data, sstr(cs, "file"));
    sd_error err;
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(gpath, &g, &err), &err);
    if (!g) return;

    setup s = {0};
    sd_value *name = sd_value_string(ckpt), *ck[3] = {0};
    CHECK_OK(run("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &name, 1, ck, &err), &err);
    sd_value_unref(name);
    s.model = ck[0];
    if (s.model) {
        const char *tn[] = {"text", "clip"};
        sd_value *pv[] = {sd_value_string(sstr(st, "positive")), ck[1]};
        sd_value *nv[] = {sd_value_string(sstr(st, "negative")), ck[1]};
        const int to[] = {1, 0};
        s.pos = run1("CLIPTextEncode", tn, pv, 2, to);
        s.neg = run1("CLIPTextEncode", tn, nv, 2, to);
        const char *ln[] = {"width", "height", "batch_size"};
        sd_value *lv[] = {sd_value_int((int64_t)snum(st, "width")), sd_value_int((int64_t)snum(st, "height")),
                          sd_value_int(1)};
        const int lo[] = {1, 1, 1};
        s.latent = run1("EmptyLatentImage", ln, lv, 3, lo);
    }
    if (s.pos && s.neg && s.latent) {
        /* the case's own settings, against ComfyUI's KSampler latent */
        sd_value *adv = compare(id, &s, (int64_t)snum(st, "seed"), (int)snum(st, "steps"),
                                snum(st, "cfg"), sstr(st, "sampler"), sstr(st, "scheduler"), 1.0);
        sd_tensor *exp = sd_st_tensor_f32(g, "latent_out", &err);
        CHECK_OK(exp ? SD_OK : err.code, &err);
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tensors, "latent_out"),
                                                            "tolerance");
        if (!tol) tol = cJSON_GetObjectItemCaseSensitive(cs, "tolerance");
        sd_tensor *act = samples(adv);
        if (exp && act && sd_tensor_numel(exp) == sd_tensor_numel(act)) {
            sd_tensor *a2 = sd_tensor_reshape(act, exp->ndim, exp->shape);
            double max_abs = 0;
            long worst = 0;
            int ok = sd_golden_allclose(a2, exp, snum(tol, "atol"), snum(tol, "rtol"), &max_abs, &worst);
            CHECK_MSG(ok, "%s SamplerCustomAdvanced latent vs ComfyUI: max |diff| %.3g at %ld", id, max_abs, worst);
            printf("  %s SamplerCustomAdvanced latent vs ComfyUI KSampler: max|diff| %.3g (atol %g, rtol %g)\n",
                   id, max_abs, snum(tol, "atol"), snum(tol, "rtol"));
            sd_tensor_unref(a2);
        } else {
            CHECK_MSG(0, "%s: latent_out missing or of another size", id);
        }
        sd_tensor_unref(exp);
        sd_value_unref(adv);
        if (cross_check) sampler_pairs(id, &s, st, math);
    }
    sd_value_unref(s.pos), sd_value_unref(s.neg), sd_value_unref(s.latent);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_st_close(g);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(void) {
    const char *data = sd_golden_dir();
    char tokdir[4096], mpath[4096];
    snprintf(tokdir, sizeof tokdir, "%s", sd_golden_tokenizer_dir());
    if (!is_dir(tokdir)) sd_test_skip("no tokenizer directory %s", tokdir);
    cJSON *man = sd_golden_manifest(data);
    snprintf(mpath, sizeof mpath, "%s/golden/manifest_math.json", data);
    FILE *fp = fopen(mpath, "rb");
    if (!fp) {
        cJSON_Delete(man);
        sd_test_skip("no %s", mpath);
    }
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *txt = malloc((size_t)len + 1);
    size_t got = fread(txt, 1, (size_t)len, fp);
    txt[got] = 0;
    fclose(fp);
    cJSON *math = cJSON_Parse(txt);
    free(txt);
    CHECK_MSG(math != NULL, "%s is not valid JSON", mpath);

    sd_error err;
    sd_error_clear(&err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    if (!sd_golden_e2e_comparable())
        sd_test_skip_unsupported("end-to-end sampling is not compared in bf16 (tests/golden.h)");
    sd_backend *be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    const cJSON *cs;
    int ran = 0;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(cs, "settings");
        if (!sd_golden_case_is(cs, "e2e") || cJSON_GetObjectItemCaseSensitive(st, "lora") ||
            cJSON_GetObjectItemCaseSensitive(st, "controlnet"))
            continue;
        if (!sd_golden_case_present(data, cs)) {
            CHECK_MSG(0, "%s: the manifest lists its golden file, which is absent", sstr(cs, "id"));
            continue;
        }
        run_case(cs, cJSON_GetObjectItemCaseSensitive(man, "models"), data, math, ran == 0 && math);
        ran++;
    }
    if (!sd_golden_require_cases(man, data, "e2e")) sd_test_skip("the manifest under %s lists no e2e case", data);
    CHECK_MSG(ran > 0, "no e2e case without lora/controlnet in the manifest");
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    cJSON_Delete(math);
    cJSON_Delete(man);
    return sd_test_finish();
}
