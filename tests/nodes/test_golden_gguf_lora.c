/* LoRA on a GGUF-quantized Flux DiT (models/lora/lora.h sd_lora_dit_view on a
 * model from UnetLoaderGGUF): the LoRA on the GGUF file equals the same LoRA
 * on the file's widened weights, as ComfyUI-GGUF computes it (get_weight:
 * dequantize_tensor with the dequant_dtype, then comfy.lora.calculate_weight
 * in float32; an F16 tensor patched in float32 and cast back to F16 by
 * GGUFModelPatcher).
 *
 * Data: the GGUF files of tests/data/gguf (each made from a Flux set model,
 * manifest source.model) and the LoRA goldens of tests/data/flux_lora. For
 * every GGUF diffusion model and every flux_lora case of one LoRA on the
 * same source model:
 *   - UnetLoaderGGUF, then LoraLoaderModelOnly with the case's LoRA and
 *     strength; UNETLoader on the source safetensors for the reference;
 *   - the parameters that changed are exactly the case's patched_params (the
 *     others keep the GGUF model's tensors, dtype included);
 *   - every recorded weight.<key> (ComfyUI's patched value on the safetensors
 *     model, W_st + d) gives the patch d = weight - W_st; the GGUF weight
 *     must be widen(W_gguf) + d in F32 for a quantized (or BF16) tensor, and
 *     f16(f32(W_gguf) + d) stored F16 for an F16 one.
 * Tolerance: d recovered by a float32 subtraction is off by at most half an
 * ulp of the golden weight and of W_st, and our own d by the flux_lora
 * golden's (1e-6 abs + 1e-6 rel, the summation order of up @ down); adding
 * it to widen(W_gguf) rounds once more: |err| <= 1e-6 + 1e-6 |exp| +
 * 2^-23 (|weight| + |W_st| + |exp|). An F16 result may also land on the
 * other side of an F16 rounding boundary: one F16 ulp of |exp| more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/flux/flux.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *case_id = "setup";

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void link_as(const char *target, const char *models, const char *rel) {
    char src[4200], dst[4200], cmd[8600];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", models, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static const char *jstr(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static const char *base_name(const char *comfy) {
    return strchr(comfy, '/') ? strchr(comfy, '/') + 1 : comfy;
}

static sd_value *node1(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                       sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    return rc ? NULL : out[0];
}

static sd_value *loader(const sd_env *env, const char *type, const char *name, sd_error *err) {
    const char *names[] = {"unet_name", "weight_dtype"};
    sd_value *v[] = {sd_value_string(name), sd_value_string("default")};
    sd_value *m = node1(env, type, names, v, strcmp(type, "UNETLoader") == 0 ? 2 : 1, err);
    nt_free_values(v, 2);
    return m;
}

static sd_flux *flux_of(sd_value *model, sd_error *err) {
    sd_model_ref *m = NULL;
    sd_dmodel dm;
    sd_value *in[1] = {model};
    if (!model || sd_nodes_in_model(in, 0, "model", &m, err) || sd_nodes_model_dmodel(m, &dm, err)) return NULL;
    CHECK_MSG(dm.info.kind == SD_DMODEL_FLUX, "%s: the MODEL is no Flux DiT", case_id);
    return dm.info.kind == SD_DMODEL_FLUX ? dm.net : NULL;
}

static int listed(cJSON *arr, const char *key) {
    cJSON *it;
    cJSON_ArrayForEach(it, arr) if (strcmp(cJSON_GetStringValue(it), key) == 0) return 1;
    return 0;
}

typedef struct walk {
    sd_flux *base;
    cJSON *patched;
    int n_changed, bad;
} walk;

/* An untouched parameter is the GGUF model's tensor (same dtype and bytes);
 * a patched one is new: F32 for a quantized or BF16 tensor, F16 for F16. */
static void check_param(void *ud, const char *key, sd_bt **slot) {
    walk *w = ud;
    sd_bt **b = sd_flux_param(w->base, key);
    if (!b || !*b || !*slot) {
        w->bad++;
        return;
    }
    int want = listed(w->patched, key);
    if (!want) {
        CHECK_MSG((*slot)->dtype == (*b)->dtype && (*slot)->nbytes == (*b)->nbytes &&
                      memcmp((*slot)->data, (*b)->data, (*b)->nbytes) == 0,
                  "%s: parameter %s is not patched but differs from the GGUF model's", case_id, key);
        return;
    }
    w->n_changed++;
    sd_dtype exp = (*b)->dtype == SD_F16 ? SD_F16 : SD_F32;
    CHECK_MSG((*slot)->dtype == exp, "%s: patched %s (%s in the file) is %s, ComfyUI-GGUF keeps it %s", case_id,
              key, sd_dtype_name((*b)->dtype), sd_dtype_name((*slot)->dtype), sd_dtype_name(exp));
}

static float round_f16(float x) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
    sd_tensor_f32(t)[0] = x;
    sd_tensor *h = sd_tensor_to_dtype(t, SD_F16), *back = h ? sd_tensor_to_dtype(h, SD_F32) : NULL;
    float r = back ? sd_tensor_f32(back)[0] : NAN;
    sd_tensor_unref(t), sd_tensor_unref(h), sd_tensor_unref(back);
    return r;
}

static void run_pair(const sd_env *env, const char *ldir, cJSON *gm, cJSON *fmodel, cJSON *c) {
    sd_error err;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", ldir, jstr(c, "file"));
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "loras"), 0);
    char lora[300];
    snprintf(lora, sizeof lora, "%s.safetensors", jstr(l, "lora"));
    double strength = cJSON_GetObjectItemCaseSensitive(l, "strength")->valuedouble;
    sd_value *st = loader(env, "UNETLoader", base_name(jstr(fmodel, "comfy_name")), &err);
    CHECK_MSG(st != NULL, "%s: UNETLoader: %s", case_id, err.msg);
    sd_value *gg = loader(env, "UnetLoaderGGUF", base_name(jstr(gm, "comfy_name")), &err);
    CHECK_MSG(gg != NULL, "%s: UnetLoaderGGUF: %s", case_id, err.msg);
    sd_value *pg = NULL;
    if (gg) {
        const char *names[] = {"model", "lora_name", "strength_model"};
        sd_value *v[] = {gg, sd_value_string(lora), sd_value_float(strength)};
        pg = node1(env, "LoraLoaderModelOnly", names, v, 3, &err);
        sd_value_unref(v[1]), sd_value_unref(v[2]);
        CHECK_MSG(pg != NULL, "%s: LoraLoaderModelOnly %s on the GGUF model: %s", case_id, lora, err.msg);
    }
    sd_flux *fs = flux_of(st, &err), *fg = flux_of(gg, &err), *fp = flux_of(pg, &err);
    CHECK_MSG(g && fs && fg && fp, "%s: %s", case_id, err.msg);
    if (g && fs && fg && fp) {
        walk w = {fg, cJSON_GetObjectItemCaseSensitive(c, "patched_params"), 0, 0};
        sd_flux_param_each(fp, check_param, &w);
        CHECK_MSG(!w.bad && w.n_changed == cJSON_GetArraySize(w.patched),
                  "%s: %d parameters patched, the flux_lora case lists %d", case_id, w.n_changed,
                  cJSON_GetArraySize(w.patched));
        int n_w = 0;
        cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(c, "tensors")) {
            if (strncmp(t->string, "weight.", 7) != 0) continue;
            const char *key = t->string + 7;
            sd_bt **ss = sd_flux_param(fs, key), **sg = sd_flux_param(fg, key), **sp = sd_flux_param(fp, key);
            sd_tensor *gold = sd_st_tensor_f32(g, t->string, &err);
            sd_tensor *wst = ss ? sd_bt_to_host(*ss) : NULL, *wg = sg ? sd_bt_to_host(*sg) : NULL;
            sd_tensor *got = sp ? sd_bt_to_host(*sp) : NULL;
            int ok = gold && wst && wg && got && sd_tensor_numel(gold) == sd_tensor_numel(wg) &&
                     sd_tensor_numel(got) == sd_tensor_numel(wg) && sd_tensor_numel(wst) == sd_tensor_numel(wg);
            CHECK_MSG(ok, "%s: weight %s: missing or of another size", case_id, key);
            int f16 = sg && (*sg)->dtype == SD_F16;
            double worst = 0;
            int64_t bad = 0;
            for (int64_t i = 0; ok && i < sd_tensor_numel(got); i++) {
                float gw = sd_tensor_f32(gold)[i], ws = sd_tensor_f32(wst)[i], wq = sd_tensor_f32(wg)[i];
                float d = gw - ws, exp = wq + d;
                if (f16) exp = round_f16(exp);
                double tol = 1e-6 + 1e-6 * fabs(exp) + ldexp(fabs(gw) + fabs(ws) + fabs(exp), -23);
                if (f16) tol += ldexp(fabs(exp), -10) + ldexp(1.0, -24);
                double e = fabs((double)sd_tensor_f32(got)[i] - exp);
                if (e > tol) bad++;
                worst = fmax(worst, e / tol);
            }
            CHECK_MSG(ok && bad == 0, "%s: %s (%s in the file): %lld values off, worst %.2f of the bound", case_id,
                      key, sg ? sd_dtype_name((*sg)->dtype) : "?", (long long)bad, worst);
            printf("  %-44s %-5s max err %.2f of bound\n", key, sg ? sd_dtype_name((*sg)->dtype) : "?", worst);
            sd_tensor_unref(gold), sd_tensor_unref(wst), sd_tensor_unref(wg), sd_tensor_unref(got);
            n_w++;
        }
        CHECK_MSG(n_w > 0, "%s: the flux_lora case records no weight", case_id);
    }
    sd_value_unref(pg), sd_value_unref(gg), sd_value_unref(st);
    if (g) sd_st_close(g);
}

int main(void) {
    char ldir[4096], gdir[4096], path[4400];
    snprintf(ldir, sizeof ldir, "%s", sd_golden_topic_dir("flux_lora"));
    snprintf(gdir, sizeof gdir, "%s", sd_golden_topic_dir("gguf"));
    cJSON *lman = sd_golden_manifest(ldir), *gman = sd_golden_manifest(gdir);
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir("flux"));
    cJSON *fman = sd_golden_manifest(fdir); /* skips without the Flux set */
    sd_golden_require_cases(lman, ldir, "flux_lora");
    const char *tmp = sd_test_tmpdir("golden_gguf_lora");
    char models[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    const cJSON *mm;
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(fman, "models")) {
        if (!jstr(mm, "file") || !jstr(mm, "comfy_name")) continue;
        snprintf(path, sizeof path, "%s/%s", fdir, jstr(mm, "file"));
        link_as(path, models, jstr(mm, "comfy_name"));
    }
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(gman, "models")) {
        snprintf(path, sizeof path, "%s/%s", gdir, jstr(mm, "file"));
        CHECK_MSG(access(path, R_OK) == 0, "%s is missing", path);
        link_as(path, models, jstr(mm, "comfy_name"));
    }
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(lman, "loras")) {
        snprintf(path, sizeof path, "%s/%s", ldir, jstr(mm, "file"));
        link_as(path, models, jstr(mm, "comfy_name"));
    }
    sd_env env;
    sd_backend *be = sd_golden_backend();
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    int n = 0;
    cJSON *gm;
    cJSON_ArrayForEach(gm, cJSON_GetObjectItemCaseSensitive(gman, "models")) {
        if (!jstr(gm, "kind") || strcmp(jstr(gm, "kind"), "diffusion_model") != 0) continue;
        const char *src_model = jstr(cJSON_GetObjectItemCaseSensitive(gm, "source"), "model");
        cJSON *fmodel = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fman, "models"),
                                                         src_model ? src_model : "");
        CHECK_MSG(fmodel != NULL, "GGUF model %s: no source model in the Flux set", gm->string);
        cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(lman, "cases")) {
            if (!sd_golden_case_is(c, "flux_lora") || !fmodel) continue;
            if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "loras")) != 1) continue;
            if (strcmp(jstr(c, "model"), src_model) != 0) continue;
            char id[400];
            snprintf(id, sizeof id, "%s+%s", gm->string, jstr(c, "id"));
            case_id = id;
            printf("case %s\n", id);
            run_pair(&env, ldir, gm, fmodel, c);
            n++;
        }
    }
    CHECK_MSG(n > 0, "no GGUF model and LoRA case on the same Flux model");
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(fman), cJSON_Delete(gman), cJSON_Delete(lman);
    return sd_test_finish();
}
