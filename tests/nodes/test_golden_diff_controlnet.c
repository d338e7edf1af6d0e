/* DiffControlNetLoader (nodes/controlnet/controlnet_nodes.c) against
 * ComfyUI's (tests/data/diff_controlnet, make_diff_controlnet.py):
 *   - the diff ControlNet is made from the shared tiny SD1 ControlNet and
 *     the tiny SD1 checkpoint's UNet by the manifest's diff_rule (the same
 *     float32 subtraction rounded to the stored dtype the generator did);
 *     the number of differenced keys is the manifest's;
 *   - DiffControlNetLoader with the checkpoint's MODEL loads it, and the
 *     merge it runs (sd_controlnet_diff_merge) gives every weight ComfyUI's
 *     loaded ControlNet holds, bit for bit (SHA-256 of the float32 bytes: the
 *     same roundings of the same values, so equality is exact on any CPU),
 *     and no other;
 *   - a normal ControlNet through DiffControlNetLoader is the ControlNet
 *     ControlNetLoader loads: one forward of each on the same inputs gives
 *     the same bytes (the same computation twice). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "core/env.h"
#include "core/node.h"
#include "core/sha256.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/controlnet/controlnet.h"
#include "nodes/controlnet/controlnet_nodes.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;

static sd_value *run_node(const char *type, const char *const *names, sd_value *const *vals, int n, int idx,
                          sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "5", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    sd_value *r = rc ? NULL : out[idx];
    for (int i = 0; i < 4; i++)
        if (i != idx || rc) sd_value_unref(out[i]);
    return r;
}

/* The diff file by the manifest's rule; returns the number of differenced keys. */
static int make_diff(const char *cnet, const char *ckpt, const char *out) {
    sd_error err;
    sd_st_file *c = NULL, *b = NULL;
    CHECK_OK(sd_st_open(cnet, &c, &err), &err);
    CHECK_OK(sd_st_open(ckpt, &b, &err), &err);
    if (!c || !b) return -1;
    sd_st_writer *w = sd_st_writer_new();
    int merged = 0;
    for (size_t i = 0; i < sd_st_count(c); i++) {
        const sd_st_entry *e = sd_st_at(c, i);
        char uk[512];
        snprintf(uk, sizeof uk, "model.diffusion_model.%s", e->name + (strncmp(e->name, "control_model.", 14) ? 0 : 14));
        const sd_st_entry *u = strncmp(e->name, "control_model.", 14) == 0 ? sd_st_find(b, uk) : NULL;
        int same = u && u->ndim == e->ndim && memcmp(u->shape, e->shape, (size_t)e->ndim * sizeof e->shape[0]) == 0;
        sd_tensor *t;
        if (same) {
            sd_tensor *x = sd_st_tensor_f32(c, e->name, &err), *y = sd_st_tensor_f32(b, uk, &err);
            sd_tensor *d = sd_tensor_clone(x);
            for (int64_t k = 0; d && y && k < sd_tensor_numel(d); k++) sd_tensor_f32(d)[k] -= sd_tensor_f32(y)[k];
            t = d ? sd_tensor_to_dtype(d, e->dtype) : NULL;
            sd_tensor_unref(x), sd_tensor_unref(y), sd_tensor_unref(d);
            merged++;
        } else {
            t = sd_st_tensor(c, e->name, &err);
        }
        CHECK_MSG(t != NULL, "diff of %s", e->name);
        if (t) CHECK_OK(sd_st_writer_add(w, e->name, t, &err), &err);
        sd_tensor_unref(t);
    }
    int64_t one = 1;
    sd_tensor *mark = sd_tensor_new(SD_F32, 1, &one);
    sd_tensor_f32(mark)[0] = 1.0f;
    CHECK_OK(sd_st_writer_add(w, "difference", mark, &err), &err);
    sd_tensor_unref(mark);
    CHECK_OK(sd_st_writer_save(w, out, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(c), sd_st_close(b);
    return merged;
}

/* One forward of a ControlNet on fixed inputs, as host tensors. */
static void forward(sd_controlnet *cn, sd_backend *be, sd_tensor **outs, int *n) {
    sd_error err;
    const sd_unet_config *c = sd_controlnet_config(cn);
    int64_t h = 8, w = 8;
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, c->in_channels, h, w);
    sd_tensor *hint = sd_tensor_new4(SD_F32, 4, 1, sd_controlnet_hint_channels(cn), 8 * h, 8 * w);
    sd_tensor *ctx = sd_tensor_new4(SD_F32, 3, 1, 77, c->context_dim, 0);
    nt_fill(x, 1), nt_fill(hint, 2), nt_fill(ctx, 3);
    for (int64_t i = 0; i < sd_tensor_numel(hint); i++) sd_tensor_f32(hint)[i] = 0.5f + 0.5f * sd_tensor_f32(hint)[i];
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bh = sd_bt_from_host(be, hint, SD_F32),
          *bc = sd_bt_from_host(be, ctx, SD_F32);
    float ts = 500.0f;
    sd_controlnet_result r;
    memset(&r, 0, sizeof r);
    CHECK_OK(sd_controlnet_forward(cn, bx, &ts, bh, bc, NULL, &r, &err), &err);
    *n = 0;
    for (int i = 0; i < r.n; i++) outs[(*n)++] = sd_bt_to_host(r.output[i]);
    if (r.middle) outs[(*n)++] = sd_bt_to_host(r.middle);
    sd_controlnet_result_free(&r);
    sd_bt_free(bx), sd_bt_free(bh), sd_bt_free(bc);
    sd_tensor_unref(x), sd_tensor_unref(hint), sd_tensor_unref(ctx);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("diff_controlnet");
    cJSON *man = sd_golden_manifest(dir);
    const char *td = sd_test_testdata_dir();
    const char *ck = cJSON_GetStringValue(cJSON_GetObjectItem(man, "checkpoint"));
    const char *cn = cJSON_GetStringValue(cJSON_GetObjectItem(man, "controlnet"));
    cJSON *weights = cJSON_GetObjectItem(man, "weights");
    CHECK_MSG(ck && cn && cJSON_GetArraySize(weights) > 0, "manifest");
    if (!ck || !cn) return sd_test_finish();
    char ckpt[4400], cnet[4400];
    snprintf(ckpt, sizeof ckpt, "%s/%s", td, strncmp(ck, "testdata/", 9) == 0 ? ck + 9 : ck);
    snprintf(cnet, sizeof cnet, "%s/%s", td, strncmp(cn, "testdata/", 9) == 0 ? cn + 9 : cn);
    if (access(ckpt, R_OK) || access(cnet, R_OK)) sd_test_skip("no %s or %s", ckpt, cnet);

    const char *tmp = sd_test_tmpdir("nodes_golden_diff_controlnet");
    char models[4200], cmd[9000], diff[4400], link[4400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/checkpoints' '%s/controlnet'", models, models, models);
    CHECK(system(cmd) == 0);
    snprintf(diff, sizeof diff, "%s/controlnet/tiny-diff.safetensors", models);
    int merged = make_diff(cnet, ckpt, diff);
    CHECK_MSG(merged == (int)cJSON_GetNumberValue(cJSON_GetObjectItem(man, "merged_keys")),
              "%d keys differenced, the generator %d", merged,
              (int)cJSON_GetNumberValue(cJSON_GetObjectItem(man, "merged_keys")));
    snprintf(link, sizeof link, "%s/checkpoints/tiny.safetensors", models);
    CHECK(symlink(ckpt, link) == 0);
    snprintf(link, sizeof link, "%s/controlnet/tiny-cn.safetensors", models);
    CHECK(symlink(cnet, link) == 0);

    sd_error err;
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_value *nm = sd_value_string("tiny.safetensors");
    sd_value *model = run_node("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &nm, 1, 0, &err);
    sd_value_unref(nm);
    CHECK_MSG(model != NULL, "load: %s", err.msg);
    sd_model_ref *m = model ? sd_value_as_handle(model, &sd_handle_model) : NULL;
    sd_unet *u = NULL;
    if (m) CHECK_OK(sd_nodes_model_unet(m, &u, &err), &err);

    /* the node loads the diff file with the MODEL */
    sd_value *dv[] = {model, sd_value_string("tiny-diff.safetensors")};
    sd_value *dcn = model ? run_node("DiffControlNetLoader", (const char *[]){"model", "control_net_name"}, dv, 2, 0,
                                     &err)
                          : NULL;
    CHECK_MSG(dcn != NULL, "DiffControlNetLoader on the diff file: %s", err.msg);
    sd_value_unref(dcn);
    sd_value_unref(dv[1]);

    /* its merge, weight by weight, against ComfyUI's loaded ControlNet */
    sd_st_file *f = NULL, *mf = NULL;
    CHECK_OK(sd_st_open(diff, &f, &err), &err);
    CHECK_MSG(f && sd_controlnet_is_diff(f), "the diff file is not seen as one");
    if (f && u) CHECK_OK(sd_controlnet_diff_merge(f, u, &mf, &err), &err);
    if (mf) {
        int bad = 0, n = 0;
        cJSON *wt;
        cJSON_ArrayForEach(wt, weights) {
            sd_tensor *t = sd_st_tensor_f32(mf, wt->string, &err);
            char hex[65] = "";
            if (t) {
                uint8_t h[32];
                sd_sha256(t->data, t->nbytes, h);
                sd_sha256_hex(h, hex);
            }
            const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(wt, "sha256_f32"));
            if ((!t || !want || strcmp(hex, want) != 0) && bad++ < 3)
                CHECK_MSG(0, "%s: merged weight differs from ComfyUI's", wt->string);
            sd_tensor_unref(t);
            n++;
        }
        CHECK_MSG(bad == 0, "%d of %d merged weights differ from ComfyUI's", bad, n);
        /* ComfyUI's ControlNet holds exactly these; the file adds the marker */
        CHECK_MSG(sd_st_count(mf) == (size_t)n + 1 && sd_st_find(mf, "difference"), "%zu tensors merged, ComfyUI %d + marker",
                  sd_st_count(mf), n);
    }
    sd_st_close(mf), sd_st_close(f);

    /* a normal ControlNet: DiffControlNetLoader == ControlNetLoader */
    sd_value *nv[] = {model, sd_value_string("tiny-cn.safetensors")};
    sd_value *a = model ? run_node("DiffControlNetLoader", (const char *[]){"model", "control_net_name"}, nv, 2, 0, &err)
                        : NULL;
    CHECK_MSG(a != NULL, "DiffControlNetLoader on a normal ControlNet: %s", err.msg);
    sd_value *b = run_node("ControlNetLoader", (const char *[]){"control_net_name"}, &nv[1], 1, 0, &err);
    CHECK_MSG(b != NULL, "ControlNetLoader: %s", err.msg);
    if (a && b) {
        sd_tensor *oa[SD_UNET_MAX_BLOCKS + 1], *ob[SD_UNET_MAX_BLOCKS + 1];
        int na = 0, nb = 0;
        forward(sd_nodes_control_net_of(a), be, oa, &na);
        forward(sd_nodes_control_net_of(b), be, ob, &nb);
        CHECK_MSG(na > 0 && na == nb, "%d and %d outputs", na, nb);
        for (int i = 0; i < na && i < nb; i++) {
            CHECK_MSG(oa[i] && ob[i] && oa[i]->nbytes == ob[i]->nbytes &&
                          memcmp(oa[i]->data, ob[i]->data, oa[i]->nbytes) == 0,
                      "output %d differs between the two loaders", i);
        }
        for (int i = 0; i < na; i++) sd_tensor_unref(oa[i]);
        for (int i = 0; i < nb; i++) sd_tensor_unref(ob[i]);
    }
    sd_value_unref(a), sd_value_unref(b), sd_value_unref(nv[1]);
    sd_value_unref(model);
    cJSON_Delete(man);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
