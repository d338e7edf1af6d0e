/* LoraSave (nodes/model/lora_save_node.c, models/lora/lora_extract.c)
 * against what ComfyUI's own LoraSave writes (tests/data/lora_extract,
 * gen_lora_extract_ref.py) for ModelSubtract(tiny-sd1, synth sd1-tiny
 * seed 7): model1 is the shared tiny checkpoint, model2 is synthesized here
 * with the manifest's preset and seed (the generator's bytes), and for every
 * case of the manifest (rank, lora_type, bias_diff, filename_prefix):
 *   - the file is where ComfyUI put it, with ComfyUI's keys, all float16,
 *     of ComfyUI's shapes;
 *   - for the manifest's checked modules, the saved tensors equal
 *     ComfyUI's. The LoRA factors are compared through what does not depend
 *     on the SVD's sign choice: the product up @ down (ComfyUI's factors and
 *     ours each come from a float32 SVD and are rounded to float16); the
 *     singular values of the differences are compared on their own (ours
 *     from sd_lora_extract on ComfyUI's difference). The differences
 *     themselves (.diff, .diff_b) are float16 roundings of the same float32
 *     subtraction: equal within one float16 rounding;
 *   - the saved file loads back (every key matched against model2's UNet,
 *     none left out), and a full_diff file on model2 gives model1 back
 *     within the float16 rounding of the difference. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/lora/lora.h"
#include "models/synth/synth.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;

static sd_value *run_node(const char *type, const char *const *names, sd_value *const *vals, int n,
                          sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "9", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    if (rc) sd_value_unref(out[0]), out[0] = NULL;
    return rc ? NULL : (out[0] ? out[0] : sd_value_none());
}

static sd_unet *unet_of(sd_value *m) {
    sd_error err;
    sd_model_ref *r = m ? sd_value_as_handle(m, &sd_handle_model) : NULL;
    sd_unet *u = NULL;
    if (r) CHECK_OK(sd_nodes_model_unet(r, &u, &err), &err);
    return u;
}

/* A tensor of st as F32 (NULL when absent). */
static sd_tensor *get(sd_st_file *st, const char *name) {
    sd_error err;
    if (!sd_st_find(st, name)) return NULL;
    sd_tensor *t = sd_st_tensor_f32(st, name, &err);
    CHECK_MSG(t != NULL, "%s: %s", name, err.msg);
    return t;
}

static sd_tensor *weight_of(sd_unet *u, const char *key) {
    sd_bt **s = u ? sd_unet_param(u, key) : NULL;
    return s && *s ? sd_bt_to_host(*s) : NULL;
}

/* up [out, r(, 1, 1)] @ down [r, in(, kh, kw)] as [out, in*kh*kw], and
 * |up| @ |down| (the scale of the product's rounding) */
static void product(const sd_tensor *up, const sd_tensor *down, float *p, float *pa) {
    int64_t out = up->shape[0], r = up->shape[1], n = sd_tensor_numel(down) / r;
    const float *U = sd_tensor_f32(up), *D = sd_tensor_f32(down);
    for (int64_t i = 0; i < out; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < r; k++) {
                s += (double)U[i * r + k] * D[k * n + j];
                a += fabs((double)U[i * r + k] * D[k * n + j]);
            }
            p[i * n + j] = (float)s;
            if (pa) pa[i * n + j] = (float)a;
        }
}

/* The LoRA factors of module `mod` in `got` against ComfyUI's (`ref`,
 * "<case>/<key>"). sv: the difference's singular values (ComfyUI's), k of
 * them. Tolerance per element of up @ down:
 *   - float16 rounding of both sides' factors: each factor element within
 *     2^-11 relative, so each product within 2 * 2^-11 * (|up| @ |down|),
 *     twice over (ComfyUI's and ours): 4 * 2^-11 * (|up| @ |down|);
 *   - the float32 SVDs: a backward error of at most c * eps * s1 each
 *     (LAPACK's bound, c = 4 * max(m, n) taken generously), which moves the
 *     rank-r truncation by about s1 * that / (s_r - s_{r+1}) (Davis-Kahan;
 *     no gap term at full rank, where the truncation is the matrix). */
static void cmp_factors(const char *cid, const char *mod, sd_st_file *got, sd_st_file *ref, const float *sv,
                        int64_t k) {
    char gu[512], gd[512], ru[512], rd[512];
    snprintf(gu, sizeof gu, "diffusion_model.%s.lora_up.weight", mod);
    snprintf(gd, sizeof gd, "diffusion_model.%s.lora_down.weight", mod);
    snprintf(ru, sizeof ru, "%s/%s", cid, gu);
    snprintf(rd, sizeof rd, "%s/%s", cid, gd);
    sd_tensor *a = get(got, gu), *b = get(got, gd), *c = get(ref, ru), *d = get(ref, rd);
    CHECK_MSG(a && b && c && d, "%s %s: factors missing (ours %d %d, ComfyUI's %d %d)", cid, mod, !!a, !!b, !!c, !!d);
    if (a && b && c && d) {
        CHECK_MSG(sd_tensor_same_shape(a, c) && sd_tensor_same_shape(b, d), "%s %s: factor shapes differ", cid, mod);
        if (sd_tensor_same_shape(a, c) && sd_tensor_same_shape(b, d)) {
            int64_t out = a->shape[0], r = a->shape[1], n = sd_tensor_numel(b) / r;
            float *p = malloc((size_t)(out * n) * sizeof *p), *q = malloc((size_t)(out * n) * sizeof *q);
            float *pa = malloc((size_t)(out * n) * sizeof *pa);
            CHECK(p && q && pa);
            if (p && q && pa) {
                product(a, b, p, pa);
                product(c, d, q, NULL);
                double s1 = sv[0], gap = r < k ? sv[r - 1] - sv[r] : INFINITY;
                double svd = 2 * 4.0 * (double)(out > n ? out : n) * FLT_EPSILON * s1;
                double sub = isinf(gap) ? svd : svd * s1 / gap;
                int bad = 0;
                double worst = 0;
                for (int64_t i = 0; i < out * n; i++) {
                    double tol = 4 * ldexp(1, -11) * pa[i] + sub, e = fabs((double)p[i] - q[i]);
                    if (e > tol) bad++;
                    if (e / tol > worst) worst = e / tol;
                }
                CHECK_MSG(bad == 0, "%s %s: up @ down differs from ComfyUI's at %d of %lld (worst %.3g of tol)", cid,
                          mod, bad, (long long)(out * n), worst);
                printf("  %s %s: rank %lld, up @ down within %.3g of the tolerance\n", cid, mod, (long long)r, worst);
            }
            free(p), free(q), free(pa);
        }
    }
    sd_tensor_unref(a), sd_tensor_unref(b), sd_tensor_unref(c), sd_tensor_unref(d);
}

/* got within one float16 rounding (2^-11 relative, or half the smallest
 * subnormal step) of ComfyUI's, both roundings of one float32 value. */
static void cmp_half(const char *cid, const char *name, const sd_tensor *got, const sd_tensor *want) {
    CHECK_MSG(got && want && sd_tensor_same_shape(got, want), "%s %s: missing or of another shape", cid, name);
    if (!got || !want || !sd_tensor_same_shape(got, want)) return;
    int bad = 0;
    const float *g = sd_tensor_f32(got), *w = sd_tensor_f32(want);
    for (int64_t i = 0; i < sd_tensor_numel(got); i++)
        if (fabsf(g[i] - w[i]) > ldexp(1, -11) * fabsf(w[i]) + ldexp(1, -24)) bad++;
    CHECK_MSG(bad == 0, "%s %s: %d values differ from ComfyUI's by more than a float16 rounding", cid, name, bad);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("lora_extract");
    cJSON *man = sd_golden_manifest(dir);
    const char *td = sd_test_testdata_dir();
    const char *m1rel = cJSON_GetStringValue(cJSON_GetObjectItem(man, "model1"));
    char m1path[4400];
    snprintf(m1path, sizeof m1path, "%s/%s", td, m1rel && !strncmp(m1rel, "testdata/", 9) ? m1rel + 9 : "");
    if (!m1rel || access(m1path, R_OK)) sd_test_skip("no %s", m1path);
    char refpath[4400];
    snprintf(refpath, sizeof refpath, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(man, "file")));
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *ref = NULL;
    CHECK_MSG(sd_st_open(refpath, &ref, &err) == SD_OK, "the manifest's reference file: %s", err.msg);

    const char *tmp = sd_test_tmpdir("nodes_golden_lora_extract");
    char models[4200], output[4200], tok[4200], cmd[9000], m2path[4400], link[4400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(output, sizeof output, "%s/output", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s/checkpoints' '%s/loras' '%s'", output, models, models,
             models, output);
    CHECK(system(cmd) == 0);
    snprintf(link, sizeof link, "%s/checkpoints/m1.safetensors", models);
    CHECK(symlink(m1path, link) == 0);
    cJSON *m2 = cJSON_GetObjectItem(man, "model2");
    const sd_synth_config *sc = sd_synth_preset(cJSON_GetStringValue(cJSON_GetObjectItem(m2, "synth")));
    CHECK_MSG(sc != NULL, "model2's synth preset");
    snprintf(m2path, sizeof m2path, "%s/checkpoints/m2.safetensors", models);
    if (sc)
        CHECK_OK(sd_synth_sd1_write(sc, (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m2, "seed")), m2path, &err),
                 &err);
    snprintf(tok, sizeof tok, "%s/tokenizer", tmp);
    CHECK_OK(sd_synth_vocab_write(tok, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, output, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_value *nm = sd_value_string("m1.safetensors");
    sd_value *model1 = run_node("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &nm, 1, &err);
    sd_value_unref(nm);
    CHECK_MSG(model1 != NULL, "load model1: %s", err.msg);
    nm = sd_value_string("m2.safetensors");
    sd_value *model2 = run_node("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &nm, 1, &err);
    sd_value_unref(nm);
    CHECK_MSG(model2 != NULL, "load model2: %s", err.msg);
    sd_value *sv[] = {model1, model2,
                      sd_value_float(cJSON_GetNumberValue(cJSON_GetObjectItem(man, "multiplier")))};
    sd_value *diff = model1 && model2 ? run_node("ModelMergeSubtract", (const char *[]){"model1", "model2", "multiplier"},
                                                 sv, 3, &err)
                                      : NULL;
    sd_value_unref(sv[2]);
    CHECK_MSG(diff != NULL, "ModelMergeSubtract: %s", err.msg);
    if (!ref || !diff) goto out;
    sd_unet *u1 = unet_of(model1), *u2 = unet_of(model2), *ud = unet_of(diff);
    cJSON *checked = cJSON_GetObjectItem(man, "checked");
    CHECK_MSG(cJSON_GetArraySize(checked) > 0, "the manifest checks no module");

    /* the differences and their singular values (sign-free) */
    float svs[64][512];
    int64_t nsv[64] = {0};
    int mi = 0;
    cJSON *mod;
    cJSON_ArrayForEach(mod, checked) {
        const char *m = cJSON_GetStringValue(mod);
        if (mi >= 64) break;
        char name[512], key[512];
        for (int part = 0; part < 2; part++) {
            snprintf(key, sizeof key, "%s.%s", m, part ? "bias" : "weight");
            snprintf(name, sizeof name, "diff/%s", key);
            sd_tensor *want = get(ref, name), *got = weight_of(ud, key);
            if (want || got) cmp_half("model_diff", key, got, want);
            sd_tensor_unref(want), sd_tensor_unref(got);
        }
        snprintf(name, sizeof name, "svd/%s", m);
        sd_tensor *s = get(ref, name);
        snprintf(name, sizeof name, "diff/%s.weight", m);
        sd_tensor *d = get(ref, name);
        if (s && d && d->ndim >= 2 && sd_tensor_numel(s) <= 512) {
            int64_t k = sd_tensor_numel(s);
            int64_t n = sd_tensor_numel(d) / d->shape[0], big = d->shape[0] > n ? d->shape[0] : n;
            float *u = malloc((size_t)(d->shape[0] * k) * sizeof *u), *vt = malloc((size_t)(k * n) * sizeof *vt);
            CHECK(u && vt);
            if (u && vt) CHECK_OK(sd_lora_svd(sd_tensor_f32(d), (int)d->shape[0], (int)n, svs[mi], u, vt, &err), &err);
            free(u), free(vt);
            const float *w = sd_tensor_f32(s);
            int bad = 0;
            /* Weyl: each singular value moves at most by the backward error
             * of either float32 SVD (c * eps * s1, c as in cmp_factors) */
            for (int64_t i = 0; i < k; i++)
                if (fabs(svs[mi][i] - w[i]) > 2 * 4.0 * (double)big * FLT_EPSILON * w[0]) bad++;
            CHECK_MSG(bad == 0, "%s: %d of %lld singular values differ from torch's", m, bad, (long long)k);
            memcpy(svs[mi], w, (size_t)k * sizeof *w); /* the tolerances use ComfyUI's */
            nsv[mi] = k;
        }
        sd_tensor_unref(s), sd_tensor_unref(d);
        mi++;
    }

    int ran = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(man, "cases")) {
        const char *cid = cJSON_GetStringValue(cJSON_GetObjectItem(c, "id"));
        const char *prefix = cJSON_GetStringValue(cJSON_GetObjectItem(c, "filename_prefix"));
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(c, "lora_type"));
        const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(c, "file"));
        cJSON *keys = cJSON_GetObjectItem(c, "keys");
        CHECK_MSG(cid && prefix && type && rel && keys, "manifest case");
        if (!cid || !prefix || !type || !rel || !keys) continue;
        printf("case %s\n", cid);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", output);
        CHECK(system(cmd) == 0);
        const char *names[] = {"filename_prefix", "rank", "lora_type", "bias_diff", "model_diff"};
        sd_value *v[] = {sd_value_string(prefix), sd_value_int((int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "rank"))),
                         sd_value_string(type), sd_value_bool(cJSON_IsTrue(cJSON_GetObjectItem(c, "bias_diff"))),
                         sd_value_ref(diff)};
        sd_value *r = run_node("LoraSave", names, v, 5, &err);
        CHECK_MSG(r != NULL, "%s: LoraSave: %s", cid, err.msg);
        sd_value_unref(r);
        nt_free_values(v, 5);
        char saved[4400];
        snprintf(saved, sizeof saved, "%s/%s", output, rel);
        sd_st_file *f = NULL;
        CHECK_MSG(sd_st_open(saved, &f, &err) == SD_OK, "%s: LoraSave wrote no %s: %s", cid, rel, err.msg);
        if (!f) continue;
        /* ComfyUI's keys, float16, ComfyUI's shapes */
        CHECK_MSG((int)sd_st_count(f) == cJSON_GetArraySize(keys), "%s: %zu tensors, ComfyUI wrote %d", cid,
                  sd_st_count(f), cJSON_GetArraySize(keys));
        int bad = 0;
        cJSON *t;
        cJSON_ArrayForEach(t, keys) {
            const sd_st_entry *st = sd_st_find(f, t->string);
            cJSON *shape = cJSON_GetArrayItem(t, 1);
            int ok = st && st->dtype == SD_F16 && !strcmp(cJSON_GetStringValue(cJSON_GetArrayItem(t, 0)), "F16") &&
                     st->ndim == cJSON_GetArraySize(shape);
            for (int d = 0; ok && d < st->ndim; d++)
                ok = st->shape[d] == (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(shape, d));
            if (!ok && bad++ < 3) CHECK_MSG(0, "%s: key %s missing or of another dtype / shape", cid, t->string);
        }
        CHECK_MSG(bad == 0, "%s: %d keys differ from ComfyUI's", cid, bad);
        /* the checked modules' tensors */
        mi = 0;
        cJSON_ArrayForEach(mod, checked) {
            const char *m = cJSON_GetStringValue(mod);
            char name[512], rname[600];
            static const char *const sfx[] = {".lora_up.weight", ".diff", ".diff_b"};
            for (int s = 0; s < 3; s++) {
                snprintf(name, sizeof name, "diffusion_model.%s%s", m, sfx[s]);
                if (!cJSON_GetObjectItem(keys, name)) continue;
                if (s == 0) {
                    CHECK_MSG(mi < 64 && nsv[mi] > 0, "%s %s: no singular values in the reference", cid, m);
                    if (mi < 64 && nsv[mi] > 0) cmp_factors(cid, m, f, ref, svs[mi], nsv[mi]);
                } else {
                    snprintf(rname, sizeof rname, "%s/%s", cid, name);
                    sd_tensor *g = get(f, name), *w = get(ref, rname);
                    cmp_half(cid, name, g, w);
                    sd_tensor_unref(g), sd_tensor_unref(w);
                }
            }
            mi++;
        }
        /* loads back: every key matched, none left out */
        sd_lora *lora = NULL;
        sd_lora_plan *plan = NULL;
        CHECK_OK(sd_lora_open(saved, &lora, &err), &err);
        if (lora) CHECK_OK(sd_lora_plan_new(lora, u2, NULL, &plan, &err), &err);
        if (plan) {
            char buf[512];
            CHECK_MSG(sd_lora_plan_unmatched_count(plan) == 0, "%s: %s", cid, sd_lora_plan_unmatched_summary(plan, 3, buf, sizeof buf));
            CHECK_MSG(sd_lora_plan_skipped_count(plan) == 0, "%s: %s", cid, sd_lora_plan_skipped_summary(plan, 3, buf, sizeof buf));
            CHECK_MSG(sd_lora_plan_count(plan, SD_LORA_UNET) > 0, "%s: the saved LoRA patches nothing", cid);
        }
        sd_lora_plan_unref(plan);
        sd_lora_unref(lora);
        /* a full difference on model2 gives model1 back */
        if (!strcmp(type, "full_diff")) {
            snprintf(link, sizeof link, "%s/loras/%s.safetensors", models, cid);
            unlink(link);
            CHECK(symlink(saved, link) == 0);
            char lname[256];
            snprintf(lname, sizeof lname, "%s.safetensors", cid);
            const char *ln[] = {"model", "lora_name", "strength_model"};
            sd_value *lv[] = {sd_value_ref(model2), sd_value_string(lname), sd_value_float(1.0)};
            sd_value *back = run_node("LoraLoaderModelOnly", ln, lv, 3, &err);
            nt_free_values(lv, 3);
            CHECK_MSG(back != NULL, "%s: LoraLoaderModelOnly: %s", cid, err.msg);
            sd_unet *ub = unet_of(back);
            int n = 0;
            cJSON_ArrayForEach(mod, checked) {
                for (int part = 0; part < 2; part++) {
                    char key[512];
                    snprintf(key, sizeof key, "%s.%s", cJSON_GetStringValue(mod), part ? "bias" : "weight");
                    sd_tensor *a = weight_of(ub, key), *w1 = weight_of(u1, key), *w2 = weight_of(u2, key);
                    if (a && w1 && w2 && sd_tensor_same_shape(a, w1)) {
                        /* model2 + f16(model1 - model2): off by the
                         * difference's float16 rounding and one float32
                         * rounding of each sum */
                        const float *A = sd_tensor_f32(a), *B = sd_tensor_f32(w1), *C = sd_tensor_f32(w2);
                        int off = 0;
                        for (int64_t i = 0; i < sd_tensor_numel(a); i++) {
                            double dd = fabs((double)B[i] - C[i]);
                            double tol = ldexp(1, -11) * dd + ldexp(1, -24) + 2 * FLT_EPSILON * (fabs(B[i]) + fabs(C[i]) + dd);
                            if (fabs((double)A[i] - B[i]) > tol) off++;
                        }
                        CHECK_MSG(off == 0, "%s: %s reloaded differs from model1's at %d", cid, key, off);
                        n++;
                    } else if (w1) {
                        CHECK_MSG(0, "%s: %s missing after the reload", cid, key);
                    }
                    sd_tensor_unref(a), sd_tensor_unref(w1), sd_tensor_unref(w2);
                }
            }
            CHECK_MSG(n > 0, "%s: no weight compared after the reload", cid);
            sd_value_unref(back);
        }
        sd_st_close(f);
        ran++;
    }
    CHECK_MSG(ran == cJSON_GetArraySize(cJSON_GetObjectItem(man, "cases")), "%d of %d cases ran", ran,
              cJSON_GetArraySize(cJSON_GetObjectItem(man, "cases")));
out:
    sd_value_unref(diff);
    sd_value_unref(model1);
    sd_value_unref(model2);
    if (ref) sd_st_close(ref);
    cJSON_Delete(man);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
