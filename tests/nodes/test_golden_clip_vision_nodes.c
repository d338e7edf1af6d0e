/* test_golden_clip_vision_nodes.c - CLIPVisionLoader and CLIPVisionEncode as
 * nodes against ComfyUI's (tests/data/clip_vision, gen_clip_vision.py).
 *
 * The manifest's tiny towers are linked into a models/clip_vision folder;
 * per encode case the loader opens the case's file by name and the encode
 * node runs on the stored image with the case's crop: the three
 * CLIP_VISION_OUTPUT tensors are compared under the case's tolerance and
 * mm_projected must be None. A file that is not a vision tower (the
 * reference file) is refused naming clip_name, as ComfyUI raises. */
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

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char dir[4096], path[4200], models[4200], cmd[13000];
    snprintf(dir, sizeof dir, "%s/tests/data/clip_vision", src ? src : "..");
    cJSON *manifest = sd_golden_manifest(dir);
    if (!manifest) return sd_test_finish();
    snprintf(path, sizeof path, "%s/%s", dir, str(manifest, "file"));
    sd_error err;
    CHECK_OK(sd_st_open(path, &ref, &err), &err);
    if (!ref) {
        cJSON_Delete(manifest);
        return sd_test_finish();
    }
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
    }
    CHECK(n > 0);

    sd_status rc;
    sd_value *bad = load(&env, "not_a_vision_model.safetensors", &err, &rc);
    CHECK_MSG(rc != SD_OK && !bad, "a file without a vision tower was loaded");
    CHECK_MSG(rc != SD_OK && strcmp(err.input, "clip_name") == 0, "refusal names input '%s'", err.input);
    printf("refused: %s\n", err.msg);
    sd_value_unref(bad);

    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_backend_free(be);
    sd_st_close(ref);
    cJSON_Delete(manifest);
    return sd_test_finish();
}
