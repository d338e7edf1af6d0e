/* test_golden_ip2p_cond.c - InstructPixToPixConditioning and an 8-channel
 * InstructPix2Pix UNet against ComfyUI (tests/data/ip2p_cond,
 * gen_ip2p_cond_ref.py). The ip2p checkpoint is the shared tiny SD1 with
 * the manifest's key replaced by the stored input convolution, written here
 * into the test's scratch folder. Per case: CLIPTextEncode x2,
 * InstructPixToPixConditioning on the stored image, KSampler
 * (sd_nodes_common_ksampler) on its outputs; compared: the node's outputs,
 * the first model evaluation's positive and negative x0 predictions, and the
 * latent; without the entries' image latent the first prediction must
 * differ. Needs the tiny SD1 checkpoint and a tokenizer: without them, 77. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(item(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }

static sd_tensor *ref_tensor(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s", name);
    return t;
}

/* The shared checkpoint with `key` replaced by the reference's `with`
 * (as stored), saved at path. */
static int derive_checkpoint(const char *src, const char *key, const char *with, const char *path) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    if (!f) return -1;
    sd_st_writer *w = sd_st_writer_new();
    sd_status rc = SD_OK;
    for (size_t i = 0; i < sd_st_count(f) && !rc; i++) {
        const char *name = sd_st_at(f, i)->name;
        sd_tensor *t = strcmp(name, key) ? sd_st_tensor(f, name, &err) : sd_st_tensor(ref, with, &err);
        rc = t ? sd_st_writer_add(w, name, t, &err) : err.code;
        sd_tensor_unref(t);
    }
    if (!rc) rc = sd_st_writer_save(w, path, &err);
    CHECK_OK(rc, &err);
    sd_st_writer_free(w);
    sd_st_close(f);
    return rc ? -1 : 0;
}

typedef struct first_eval {
    sd_tensor *pred[2];
} first_eval;

static void on_model(void *ud, int cond, float sigma, const sd_tensor *den) {
    first_eval *fe = ud;
    (void)sigma;
    if (cond >= 0 && cond < 2 && !fe->pred[cond]) fe->pred[cond] = sd_tensor_clone(den);
}

static sd_tensor *ksample(const sd_env *env, sd_value *model, const cJSON *s, sd_value *pos, sd_value *neg,
                          sd_value *latent, first_eval *fe) {
    sd_ksample_hooks hooks = {.on_model = on_model, .ud = fe};
    sd_ksample_args a;
    sd_ksample_args_init(&a);
    sd_model_ref *mr = sd_value_as_handle(model, &sd_handle_model);
    a.ckpt = mr->ckpt;
    a.loras = mr->loras;
    a.patches = &mr->patches;
    a.seed = (uint64_t)num(s, "seed");
    a.steps = (int)num(s, "steps");
    a.cfg = num(s, "cfg");
    a.sampler_name = str(s, "sampler_name");
    a.scheduler = str(s, "scheduler");
    a.positive = pos;
    a.negative = neg;
    a.latent = latent;
    a.hooks = &hooks;
    sd_node_ctx ctx = {.env = env, .node_id = "3", .class_type = "KSampler"};
    sd_value *res = NULL;
    sd_error err;
    CHECK_OK(sd_nodes_common_ksampler(&ctx, &a, &res, &err), &err);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

static sd_value *encode(const sd_env *env, sd_value *clip, const char *text) {
    const char *n[] = {"clip", "text"};
    sd_value *v[] = {clip, sd_value_string(text)};
    int own[] = {0, 1};
    sd_node_ctx ctx = {.env = env, .node_id = "6", .class_type = "CLIPTextEncode"};
    sd_error err;
    return nt_run1_named(&ctx, n, v, 2, own, &err);
}

static void run_case(const sd_env *env, sd_value *const ck[3], const cJSON *man, const cJSON *c) {
    const char *id = str(c, "id");
    const cJSON *s = item(man, "settings");
    sd_value *pos = encode(env, ck[1], str(s, "positive")), *neg = encode(env, ck[1], str(s, "negative"));
    sd_tensor *img = ref_tensor(str(man, "image"));
    if (!pos || !neg || !img) {
        sd_value_unref(pos), sd_value_unref(neg), sd_tensor_unref(img);
        return;
    }
    const char *n[] = {"positive", "negative", "vae", "pixels"};
    sd_value *v[] = {pos, neg, ck[2], nt_tensor_value(img)}, *out[8] = {0};
    sd_node_ctx ctx = {.env = env, .node_id = "7", .class_type = "InstructPixToPixConditioning"};
    sd_error err;
    sd_status rc = nt_run_named(&ctx, n, v, 4, out, &err);
    CHECK_OK(rc, &err);
    sd_value_unref(v[3]);
    first_eval fe = {{NULL, NULL}};
    sd_tensor *lat = NULL;
    if (!rc) {
        lat = ksample(env, ck[0], s, out[0], out[1], out[2], &fe);
        /* the entries' image latent must matter: without it (zeros) the
         * first prediction is another */
        first_eval bare = {{NULL, NULL}};
        sd_tensor *bl = ksample(env, ck[0], s, pos, neg, out[2], &bare);
        const cJSON *o;
        cJSON_ArrayForEach(o, item(c, "outputs")) {
            if (strcmp(str(o, "what"), "step0 cond")) continue;
            sd_tensor *want = ref_tensor(str(o, "tensor"));
            double mx = 0;
            long worst = -1;
            CHECK_MSG(bare.pred[0] && want && !sd_test_allclose(bare.pred[0], want, num(o, "atol"), num(o, "rtol"), &mx, &worst),
                      "%s: sampling without the entries' concat keys is within the tolerance too", id);
            sd_tensor_unref(want);
        }
        sd_tensor_unref(bl);
        sd_tensor_unref(bare.pred[0]), sd_tensor_unref(bare.pred[1]);
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, item(c, "outputs")) {
        const char *what = str(o, "what");
        const sd_tensor *got = NULL;
        sd_value *e0 = out[0] && sd_value_list_len(out[0]) ? sd_value_list_get(out[0], 0) : NULL;
        sd_value *n0 = out[1] && sd_value_list_len(out[1]) ? sd_value_list_get(out[1], 0) : NULL;
        if (!strcmp(what, "latent samples")) got = out[2] ? sd_value_dict_tensor(out[2], "samples") : NULL;
        else if (!strcmp(what, "latent noise_mask")) got = out[2] ? sd_value_dict_tensor(out[2], "noise_mask") : NULL;
        else if (!strcmp(what, "concat_latent_image")) got = e0 ? sd_value_dict_tensor(e0, "concat_latent_image") : NULL;
        else if (!strcmp(what, "concat_mask")) got = e0 ? sd_value_dict_tensor(e0, "concat_mask") : NULL;
        else if (!strcmp(what, "step0 cond")) got = fe.pred[0];
        else if (!strcmp(what, "step0 uncond")) got = fe.pred[1];
        else if (!strcmp(what, "latent")) got = lat;
        else CHECK_MSG(0, "%s: unknown output %s", id, what);
        if (!strcmp(what, "concat_mask") || !strcmp(what, "concat_latent_image")) /* the same on both */
            CHECK_MSG(n0 && got && sd_value_dict_tensor(n0, what) == got, "%s: negative's %s is not positive's", id, what);
        sd_tensor *want = ref_tensor(str(o, "tensor"));
        double mx = 0;
        long worst = -1;
        int ok = got && want && sd_test_allclose(got, want, num(o, "atol"), num(o, "rtol"), &mx, &worst);
        CHECK_MSG(ok, "%s %s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", id, what, mx, worst,
                  num(o, "atol"), num(o, "rtol"));
        printf("  %s %-20s max |diff| %g (atol %g rtol %g)\n", id, what, mx, num(o, "atol"), num(o, "rtol"));
        sd_tensor_unref(want);
    }
    sd_tensor_unref(lat);
    sd_tensor_unref(fe.pred[0]), sd_tensor_unref(fe.pred[1]);
    nt_free_values(out, 8);
    sd_value_unref(pos), sd_value_unref(neg);
}

int main(void) {
    char derived[4300];
    const char *dir = sd_golden_topic_dir("ip2p_cond");
    cJSON *man = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const char *tokdir = sd_golden_tokenizer_dir();
    const char *ckpt = sd_golden_tiny_sd1(NULL);
    snprintf(derived, sizeof derived, "%s/tiny-sd1-ip2p.safetensors", sd_test_tmpdir("golden_ip2p_cond"));
    if (derive_checkpoint(ckpt, str(man, "replaced_key"), str(man, "input_conv"), derived)) {
        sd_st_close(ref);
        cJSON_Delete(man);
        return sd_test_finish();
    }
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    sd_backend *be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *cn[] = {"ckpt_name"};
    sd_value *cv[] = {sd_value_string(derived)}, *ck[3] = {0};
    sd_node_ctx ctx = {.env = &env, .node_id = "4", .class_type = "CheckpointLoaderSimple"};
    CHECK_OK(nt_run_named(&ctx, cn, cv, 1, ck, &err), &err);
    sd_value_unref(cv[0]);
    if (ck[0]) {
        sd_model_ref *mr = sd_value_as_handle(ck[0], &sd_handle_model);
        CHECK_MSG(sd_checkpoint_info(mr->ckpt)->ip2p, "the derived checkpoint is not read as an InstructPix2Pix one");
    }
    const cJSON *c;
    int ran = 0;
    cJSON_ArrayForEach(c, item(man, "cases")) if (ck[0]) run_case(&env, ck, man, c), ran++;
    CHECK_MSG(ran > 0, "no case ran");
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
