/* test_golden_clip_vision_nodes.c - CLIPVisionLoader and CLIPVisionEncode as
 * nodes against ComfyUI's (tests/data/clip_vision, gen_clip_vision.py).
 *
 * The manifest's tiny towers are linked into a models/clip_vision folder;
 * per encode case the loader opens the case's file by name and the encode
 * node runs on the stored image with the case's crop: the three
 * CLIP_VISION_OUTPUT tensors are compared under the case's tolerance and
 * mm_projected must be None. A file that is not a vision tower (the
 * reference file) is refused naming clip_name, as ComfyUI raises.
 * StyleModelLoader + StyleModelApply per style_apply case: the tiny style
 * model on ComfyUI's CLIP vision output of the case's encode case, applied
 * to stored conditionings (one entry with an attention_mask and its
 * attention_mask_img_shape in some cases): each entry's cond and
 * attention_mask (float16, present exactly where ComfyUI sets one) under the
 * case's tolerance; a file that is not a style model is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }

static sd_value *load(sd_env *env, const char *file, sd_error *err, sd_status *rc) {
    sd_node_ctx ctx = {0};
    ctx.env = env;
    ctx.class_type = "CLIPVisionLoader";
    ctx.node_id = "1";
    const char *names[] = {"clip_name"};
    sd_value *v[1] = {sd_value_string(file)}, *out[8] = {0};
    *rc = nt_run_named(&ctx, names, v, 1, out, err);
    sd_value_unref(v[0]);
    return out[0];
}

static void run_case(sd_env *env, const cJSON *manifest, const cJSON *c) {
    const char *id = str(c, "id");
    const cJSON *m = item(item(manifest, "models"), str(c, "model"));
    printf("case %s (%s, crop %s)\n", id, str(m, "file"), str(c, "crop"));
    sd_error err;
    sd_status rc;
    sd_value *cv = load(env, str(m, "file"), &err, &rc);
    CHECK_OK(rc, &err);
    if (!cv) return;
    sd_tensor *u8 = sd_st_tensor_f32(ref, str(c, "image"), &err);
    CHECK_MSG(u8 != NULL, "%s: no image", id);
    if (!u8) {
        sd_value_unref(cv);
        return;
    }
    float *d = u8->data;
    for (int64_t i = 0; i < sd_tensor_numel(u8); i++) d[i] = d[i] / 255.0f;
    sd_node_ctx ctx = {0};
    ctx.env = env;
    ctx.class_type = "CLIPVisionEncode";
    ctx.node_id = "2";
    const char *names[] = {"clip_vision", "image", "crop"};
    sd_value *vals[3] = {cv, nt_tensor_value(u8), sd_value_string(str(c, "crop"))};
    int owned[3] = {1, 1, 1};
    sd_value *o = nt_run1_named(&ctx, names, vals, 3, owned, &err);
    if (!o) return;
    const cJSON *t;
    cJSON_ArrayForEach(t, item(c, "outputs")) {
        const char *key = str(t, "output");
        sd_tensor *a = sd_value_dict_tensor(o, key);
        sd_tensor *e = sd_st_tensor_f32(ref, str(t, "tensor"), &err);
        CHECK_MSG(a && e, "%s: %s missing (computed %p, reference %p)", id, key, (void *)a, (void *)e);
        if (a && e) {
            double max_abs;
            long worst;
            double atol = cJSON_GetNumberValue(item(t, "atol")), rtol = cJSON_GetNumberValue(item(t, "rtol"));
            CHECK_MSG(sd_test_allclose(a, e, atol, rtol, &max_abs, &worst), "%s: %s max |diff| %g at %ld", id,
                      key, max_abs, worst);
            printf("  %-28s max |diff| %.3g\n", key, max_abs);
        }
        sd_tensor_unref(e);
    }
    sd_value *mm = sd_value_dict_get(o, "mm_projected");
    CHECK_MSG(mm && sd_value_kind_of(mm) == SD_VAL_NONE, "%s: mm_projected is not None", id);
    sd_value_unref(o);
}

static sd_value *ref_value(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s", name);
    return t ? nt_tensor_value(t) : NULL;
}

/* ComfyUI's CLIP_VISION_OUTPUT of an encode case, from the reference. */
static sd_value *ref_cvo(const char *case_id) {
    sd_value *d = sd_value_dict();
    const char *keys[] = {"image_embeds", "last_hidden_state", "penultimate_hidden_states"};
    for (int i = 0; i < 3; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s/%s", case_id, keys[i]);
        sd_value *v = ref_value(name);
        if (v) sd_value_dict_set(d, keys[i], v);
    }
    sd_value_dict_set(d, "mm_projected", sd_value_none());
    return d;
}

static void run_style_apply(sd_env *env, const cJSON *manifest, const cJSON *c) {
    const char *id = str(c, "id");
    printf("case %s (%s, strength %g)\n", id, str(c, "strength_type"),
           cJSON_GetNumberValue(item(c, "strength")));
    sd_error err;
    sd_node_ctx ctx = {0};
    ctx.env = env;
    ctx.class_type = "StyleModelLoader";
    ctx.node_id = "3";
    const char *ln[] = {"style_model_name"};
    sd_value *lv[1] = {sd_value_string(str(item(manifest, "style_model"), "file"))};
    int lo[1] = {1};
    sd_value *sm = nt_run1_named(&ctx, ln, lv, 1, lo, &err);
    if (!sm) return;
    sd_value *conds = sd_value_list();
    const cJSON *e;
    cJSON_ArrayForEach(e, item(c, "conditioning")) {
        sd_value *d = sd_value_dict();
        sd_value_dict_set(d, "cond", ref_value(str(e, "cond")));
        sd_value_dict_set(d, "pooled_output", ref_value(str(e, "pooled_output")));
        if (str(e, "attention_mask")) {
            sd_tensor *m16 = sd_st_tensor(ref, str(e, "attention_mask"), &err);
            CHECK_MSG(m16 && m16->dtype == SD_F16, "%s: stored mask not F16", id);
            sd_value_dict_set(d, "attention_mask", nt_tensor_value(m16));
            sd_value *shape = sd_value_list();
            const cJSON *v;
            cJSON_ArrayForEach(v, item(e, "attention_mask_img_shape"))
                sd_value_list_append(shape, sd_value_int((int64_t)cJSON_GetNumberValue(v)));
            sd_value_dict_set(d, "attention_mask_img_shape", shape);
        }
        sd_value_list_append(conds, d);
    }
    ctx.class_type = "StyleModelApply";
    ctx.node_id = "4";
    const char *an[] = {"conditioning", "style_model", "clip_vision_output", "strength", "strength_type"};
    sd_value *av[5] = {conds, sm, ref_cvo(str(c, "clip_vision_output")),
                       sd_value_float(cJSON_GetNumberValue(item(c, "strength"))),
                       sd_value_string(str(c, "strength_type"))};
    int ao[5] = {1, 1, 1, 1, 1};
    sd_value *o = nt_run1_named(&ctx, an, av, 5, ao, &err);
    if (!o) return;
    const cJSON *tol = item(c, "tolerance");
    double atol = cJSON_GetNumberValue(item(tol, "atol")), rtol = cJSON_GetNumberValue(item(tol, "rtol"));
    CHECK_MSG((int)sd_value_list_len(o) == cJSON_GetArraySize(item(c, "entries")), "%s: %zu entries", id,
              sd_value_list_len(o));
    int k = 0;
    cJSON_ArrayForEach(e, item(c, "entries")) {
        sd_value *d = sd_value_list_get(o, (size_t)k++);
        if (!d) break;
        const char *keys[2] = {"cond", "attention_mask"};
        for (int j = 0; j < 2; j++) {
            const char *rn = str(e, keys[j]);
            sd_tensor *a = sd_value_dict_tensor(d, keys[j]), *a32 = a ? sd_tensor_to_dtype(a, SD_F32) : NULL;
            if (!rn) {
                CHECK_MSG(!a, "%s: entry %d has an %s ComfyUI does not set", id, k - 1, keys[j]);
                sd_tensor_unref(a32);
                continue;
            }
            sd_tensor *x = sd_st_tensor_f32(ref, rn, &err);
            CHECK_MSG(a32 && x, "%s: entry %d: %s missing", id, k - 1, keys[j]);
            if (a32 && x && sd_tensor_numel(a32) == sd_tensor_numel(x)) {
                /* log(0) = -inf in a mask: the same infinities, then the rest */
                float *pa = a32->data, *px = x->data;
                int64_t infs = 0, inf_bad = 0;
                for (int64_t q = 0; q < sd_tensor_numel(x); q++)
                    if (isinf(px[q]) || isinf(pa[q])) {
                        inf_bad += pa[q] != px[q];
                        infs++;
                        pa[q] = px[q] = 0.0f;
                    }
                CHECK_MSG(inf_bad == 0, "%s: entry %d %s: %lld infinities differ", id, k - 1, keys[j],
                          (long long)inf_bad);
                if (infs) printf("  entry %d %-15s %lld infinities equal\n", k - 1, keys[j], (long long)infs);
            }
            if (a32 && x) {
                double max_abs;
                long worst;
                CHECK_MSG(sd_test_allclose(a32, x, atol, rtol, &max_abs, &worst), "%s: entry %d %s max |diff| %g at %ld",
                          id, k - 1, keys[j], max_abs, worst);
                printf("  entry %d %-15s max |diff| %.3g\n", k - 1, keys[j], max_abs);
            }
            if (j == 1 && a) CHECK_MSG(a->dtype == SD_F16, "%s: attention_mask not float16", id);
            sd_tensor_unref(x);
            sd_tensor_unref(a32);
        }
        const cJSON *shape = item(e, "attention_mask_img_shape");
        if (shape) {
            sd_value *sv = sd_value_dict_get(d, "attention_mask_img_shape");
            CHECK_MSG(sv && sd_value_list_len(sv) == 2 &&
                          sd_value_as_int(sd_value_list_get(sv, 0)) == (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(shape, 0)) &&
                          sd_value_as_int(sd_value_list_get(sv, 1)) == (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(shape, 1)),
                      "%s: attention_mask_img_shape", id);
        }
        CHECK_MSG(sd_value_dict_get(d, "pooled_output") != NULL, "%s: pooled_output lost", id);
    }
    sd_value_unref(o);
}

int main(void) {
    char path[4200], models[4200], cmd[13000];
    const char *dir = sd_golden_topic_dir("clip_vision");
    cJSON *manifest = sd_golden_manifest(dir);
    snprintf(path, sizeof path, "%s/%s", dir, str(manifest, "file"));
    ref = sd_golden_open_ref(dir, manifest, "file");
    sd_error err;
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("golden_clip_vision_nodes"));
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/clip_vision' && ln -sf '%s' '%s/clip_vision/not_a_vision_model.safetensors'",
             models, path, models);
    CHECK(system(cmd) == 0);
    const cJSON *m;
    cJSON_ArrayForEach(m, item(manifest, "models")) {
        char file[4200];
        snprintf(file, sizeof file, "%s/%s", dir, str(m, "file"));
        CHECK_MSG(nt_file_exists(file), "model file %s missing", file);
        snprintf(cmd, sizeof cmd, "ln -sf '%s' '%s/clip_vision/%s'", file, models, str(m, "file"));
        CHECK(system(cmd) == 0);
    }
    {
        const char *sf = str(item(manifest, "style_model"), "file");
        char file[4200];
        snprintf(file, sizeof file, "%s/%s", dir, sf ? sf : "?");
        CHECK_MSG(sf && nt_file_exists(file), "style model file %s missing", file);
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/style_models' && ln -sf '%s' '%s/style_models/%s' && "
                 "ln -sf '%s' '%s/style_models/not_a_style_model.safetensors'",
                 models, file, models, sf ? sf : "?", path, models);
        CHECK(system(cmd) == 0);
    }
    sd_env env;
    sd_backend *be = sd_golden_backend();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, item(manifest, "cases")) {
        const char *comp = str(c, "component");
        if (comp && !strcmp(comp, "encode")) run_case(&env, manifest, c), n++;
        if (comp && !strcmp(comp, "style_apply")) run_style_apply(&env, manifest, c), n++;
    }
    CHECK(n > 0);

    sd_status rc;
    sd_value *bad = load(&env, "not_a_vision_model.safetensors", &err, &rc);
    CHECK_MSG(rc != SD_OK && !bad, "a file without a vision tower was loaded");
    CHECK_MSG(rc != SD_OK && strcmp(err.input, "clip_name") == 0, "refusal names input '%s'", err.input);
    printf("refused: %s\n", err.msg);
    sd_value_unref(bad);

    {
        sd_node_ctx ctx = {0};
        ctx.env = &env;
        ctx.class_type = "StyleModelLoader";
        ctx.node_id = "5";
        const char *ln[] = {"style_model_name"};
        sd_value *lv[1] = {sd_value_string("not_a_style_model.safetensors")}, *o[8] = {0};
        rc = nt_run_named(&ctx, ln, lv, 1, o, &err);
        CHECK_MSG(rc != SD_OK && !o[0] && strcmp(err.input, "style_model_name") == 0,
                  "a file without a style model was loaded or the refusal names '%s'", err.input);
        printf("refused: %s\n", err.msg);
        sd_value_unref(lv[0]);
        nt_free_values(o, 8);
    }
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_backend_free(be);
    sd_st_close(ref);
    cJSON_Delete(manifest);
    return sd_test_finish();
}
