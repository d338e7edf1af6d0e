/* test_golden_step_schedulers.c - GITSScheduler and OptimalStepsScheduler
 * against ComfyUI's own nodes.
 *
 * Data: tests/data/step_schedulers (gen_step_schedulers_ref.py ran the nodes'
 * execute()). Every case of the manifest runs the node it names with its
 * inputs; its SIGMAS must equal ComfyUI's value for value (the tables are
 * double literals and the interpolation double arithmetic rounded once to
 * float32, as sdflow computes them), lengths included (empty and one-value
 * results too). A case where ComfyUI raised must be refused here, the
 * error naming an input. Cases and settings all come from the manifest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;
static nt_env env;

static sd_value *literal(const sd_input_def *d, const cJSON *v) {
    if (!strcmp(d->type, SD_T_INT)) return sd_value_int((int64_t)v->valuedouble);
    if (!strcmp(d->type, SD_T_FLOAT)) return sd_value_float(v->valuedouble);
    return sd_value_string(v->valuestring);
}

static void run_case(const cJSON *c) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *node = cJSON_GetStringValue(cJSON_GetObjectItem(c, "node"));
    const sd_node_def *def = sd_registry_find(node);
    CHECK_MSG(def != NULL, "%s: node %s is not registered", name, node);
    if (!def) return;
    sd_value *in[8] = {0};
    int n_in = sd_node_input_count(def);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "inputs")) {
        int k = sd_node_input_index(def, it->string);
        CHECK_MSG(k >= 0 && k < 8, "%s: %s has no input %s", name, node, it->string);
        if (k >= 0 && k < 8) in[k] = literal(&def->inputs[k], it);
    }
    for (int k = 0; k < n_in && k < 8; k++) CHECK_MSG(in[k] != NULL, "%s: the manifest gives no %s", name, def->inputs[k].name);
    sd_node_ctx ctx = nt_ctx(&env, node);
    sd_value *out[4] = {0};
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = def->run(&ctx, in, out, &err);
    const cJSON *error = cJSON_GetObjectItem(c, "error");
    if (error) {
        CHECK_MSG(rc != SD_OK, "%s: ComfyUI raised %s, sdflow accepted it", name, error->valuestring);
        CHECK_MSG(rc == SD_OK || err.input[0], "%s: the error names no input: %s", name, err.msg);
    } else {
        CHECK_MSG(rc == SD_OK, "%s: %s", name, err.msg);
        sd_tensor *got = rc == SD_OK ? sd_value_as_tensor(out[0]) : NULL;
        sd_tensor *want = sd_st_tensor_f32(ref, name, &err);
        CHECK_MSG(want != NULL, "%s: no tensor in the reference file", name);
        if (got && want) {
            int64_t len = (int64_t)cJSON_GetObjectItem(c, "length")->valuedouble;
            CHECK_MSG(got->ndim == 1 && got->shape[0] == len && want->shape[0] == len,
                      "%s: %lld sigmas, ComfyUI %lld", name, (long long)got->shape[0], (long long)len);
            for (int64_t i = 0; got->shape[0] == len && i < len; i++)
                CHECK_MSG(sd_tensor_f32(got)[i] == sd_tensor_f32(want)[i], "%s[%lld]: %.9g vs ComfyUI %.9g", name,
                          (long long)i, sd_tensor_f32(got)[i], sd_tensor_f32(want)[i]);
        }
        sd_tensor_unref(want);
    }
    sd_value_unref(ctx.ui);
    for (int k = 0; k < 4; k++) sd_value_unref(out[k]);
    for (int k = 0; k < 8; k++) sd_value_unref(in[k]);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("step_schedulers");
    cJSON *manifest = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, manifest, "file");
    sd_error err;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    nt_env_init(&env, "golden_step_schedulers");
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(manifest, "cases")) { run_case(c); n++; }
    printf("%d cases of ComfyUI %s\n", n, cJSON_GetObjectItem(manifest, "comfyui_commit")->valuestring);
    CHECK(n > 0);
    sd_st_close(ref);
    cJSON_Delete(manifest);
    sd_env_cleanup(&env.env);
    sd_registry_reset();
    return sd_test_finish();
}
