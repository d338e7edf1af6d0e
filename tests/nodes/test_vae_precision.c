/* test_vae_precision.c - --vae-precision on the VAE nodes (nodes/vae,
 * models/vae/vae.h) with a generated tiny SD1 checkpoint:
 *   - a bf16 VAE decode really computes in bf16 and leaves the backend in
 *     the run's precision afterwards;
 *   - a decode whose output holds NaN (forced through the VAE's debug tap,
 *     a hook only this test installs) is redone in f32: the image equals
 *     the f32 decode bit for bit, a warning names the node and the count,
 *     and the node's ui result says so (the report carries it);
 *   - the tiled decode redoes only the tiles that failed;
 *   - a precision the backend cannot compute (f16 on the CPU) fails the
 *     node naming it, rather than decoding in f32.
 * The bf16 part needs the CPU bf16 path (oneDNN); without it the test skips
 * after the f32 and f16 checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "models/vae/vae.h"
#include "nodes/loaders/loaders.h"
#include "testutil.h"

static char logbuf[8192];
static void on_log(void *user, int level, const char *msg) {
    (void)user;
    if (level <= SD_LOG_WARN) {
        strncat(logbuf, msg, sizeof logbuf - strlen(logbuf) - 2);
        strcat(logbuf, "\n");
    }
}

/* Runs one node; *ui (may be NULL) receives its ui result. */
static sd_status run_node(const sd_env *env, const char *type, sd_value *const *in, sd_value **out,
                          sd_value **ui, sd_error *err) {
    const sd_node_def *def = sd_registry_find(type);
    if (!def) return sd_error_set(err, SD_ERR_NOT_FOUND, "node %s not registered", type);
    sd_node_ctx ctx = {.env = env, .node_id = "8", .class_type = type};
    for (int i = 0; i < sd_node_output_count(def); i++) out[i] = NULL;
    sd_status rc = def->run(&ctx, in, out, err);
    if (ui) *ui = ctx.ui;
    else sd_value_unref(ctx.ui);
    return rc;
}

/* The forced-NaN hook: poisons the decoder's last conv output while the
 * backend computes in bf16 (the CPU backend's tensors are host memory). */
static int poison_calls;
static void poison(void *user, const char *name, const sd_bt *t) {
    sd_backend *be = user;
    if (strcmp(name, "dec.act.decoder.conv_out") != 0 || sd_backend_precision(be) != SD_PREC_BF16) return;
    ((float *)t->data)[sd_bt_numel(t) / 2] = NAN;
    poison_calls++;
}

static sd_value *latent(int64_t h, int64_t w) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, 1, 4, h, w);
    float *v = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) v[i] = 0.8f * sinf(0.37f * (float)i);
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "samples", sd_value_tensor(t));
    sd_tensor_unref(t);
    return d;
}

static const sd_tensor *image_of(const sd_value *v) { return v ? sd_value_as_tensor(v) : NULL; }

static int bit_equal(const sd_value *a, const sd_value *b) {
    const sd_tensor *x = image_of(a), *y = image_of(b);
    return x && y && sd_tensor_same_shape(x, y) && memcmp(x->data, y->data, x->nbytes) == 0;
}

static double max_diff(const sd_value *a, const sd_value *b) {
    const sd_tensor *x = image_of(a), *y = image_of(b);
    if (!x || !y || sd_tensor_numel(x) != sd_tensor_numel(y)) return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < sd_tensor_numel(x); i++)
        m = fmax(m, fabs((double)((const float *)x->data)[i] - ((const float *)y->data)[i]));
    return m;
}

static int64_t redo_note(const sd_value *ui) {
    const sd_value *l = ui ? sd_value_dict_get(ui, "vae_f32_redo") : NULL;
    return l && sd_value_list_len(l) == 1 ? sd_value_as_int(sd_value_list_get(l, 0)) : -1;
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    const char *root = sd_test_tmpdir("vae_precision");
    char models[1024], dir[1100], path[1200];
    snprintf(models, sizeof models, "%s/models", root);
    mkdir(models, 0777);
    snprintf(dir, sizeof dir, "%s/checkpoints", models);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/tiny.safetensors", dir);
    CHECK_OK(sd_synth_sd1_write(sd_synth_preset("sd1-tiny"), 5, path, &err), &err);
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    env.log = on_log;
    sd_model_store *store = sd_model_store_new();
    env.models = store;

    sd_value *name = sd_value_string("tiny.safetensors"), *ck[3] = {0};
    CHECK_OK(run_node(&env, "CheckpointLoaderSimple", &name, ck, NULL, &err), &err);
    sd_value_unref(name);
    sd_vae_ref *ref = NULL;
    sd_vae *vae = NULL;
    if (ck[2]) CHECK_OK(sd_nodes_in_vae(&ck[2], 0, "vae", &ref, &err), &err);
    if (ref) CHECK_OK(sd_checkpoint_vae(ref->ckpt, &vae, &err), &err);
    if (!vae) return sd_test_finish();
    sd_vae_set_tap(vae, poison, be);

    /* f32: the tap never fires, no redo, no note */
    sd_value *lat = latent(8, 8), *in[2] = {lat, ck[2]}, *img32 = NULL, *ui = NULL;
    CHECK_OK(run_node(&env, "VAEDecode", in, &img32, &ui, &err), &err);
    CHECK_MSG(poison_calls == 0 && sd_vae_f32_redos(vae) == 0 && !ui && !strstr(logbuf, "NaN"), "log: %s",
              logbuf);

    /* f16 on the CPU: refused naming the precision, backend untouched */
    CHECK_OK(sd_env_set(&env, &env.vae_precision, "f16", &err), &err);
    sd_value *bad = NULL;
    sd_status rc = run_node(&env, "VAEDecode", in, &bad, NULL, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && strstr(err.msg, "cannot compute in f16"), "rc %d: %s", rc, err.msg);
    CHECK(!bad && sd_backend_precision(be) == SD_PREC_F32);
    sd_error_clear(&err);

    if (!sd_backend_supports_precision(be, SD_PREC_BF16)) {
        sd_value_unref(img32);
        sd_value_unref(lat);
        for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
        sd_model_store_free(store);
        sd_env_cleanup(&env);
        sd_backend_free(be);
        sd_test_skip_unsupported("this build's CPU backend has no bf16 path (oneDNN)");
    }

    /* bf16 without the hook: computed in bf16 (close to f32, not equal),
     * nothing redone, the backend back in f32 afterwards */
    CHECK_OK(sd_env_set(&env, &env.vae_precision, "bf16", &err), &err);
    sd_vae_set_tap(vae, NULL, NULL);
    sd_value *img16 = NULL;
    CHECK_OK(run_node(&env, "VAEDecode", in, &img16, &ui, &err), &err);
    double d = max_diff(img16, img32);
    CHECK_MSG(d > 0 && d < 0.1, "bf16 vs f32 decode: max diff %g", d);
    CHECK_MSG(!ui && sd_vae_f32_redos(vae) == 0 && !strstr(logbuf, "NaN"), "log: %s", logbuf);
    CHECK(sd_backend_precision(be) == SD_PREC_F32);

    /* bf16 giving NaN: redone in f32, equal to the f32 decode, reported */
    sd_vae_set_tap(vae, poison, be);
    sd_value *redo = NULL;
    CHECK_OK(run_node(&env, "VAEDecode", in, &redo, &ui, &err), &err);
    CHECK_MSG(poison_calls == 1 && sd_vae_f32_redos(vae) == 1, "poisoned %d, redos %u", poison_calls,
              sd_vae_f32_redos(vae));
    CHECK_MSG(bit_equal(redo, img32), "redone decode differs from f32 by %g", max_diff(redo, img32));
    CHECK_MSG(strstr(logbuf, "VAEDecode: the bf16 decode gave NaN/Inf values; decoded again in f32 (1 time)"),
              "log: %s", logbuf);
    CHECK(redo_note(ui) == 1);
    CHECK(sd_backend_precision(be) == SD_PREC_F32);
    sd_value_unref(ui);
    sd_value_unref(redo);

    /* tiled: every poisoned tile is redone, the result equals the f32 tiled decode */
    sd_value *big = latent(16, 16);
    sd_value *tin[6] = {big, ck[2], sd_value_int(64), sd_value_int(16), sd_value_int(64), sd_value_int(8)};
    sd_value *t32 = NULL, *tredo = NULL;
    CHECK_OK(sd_env_set(&env, &env.vae_precision, NULL, &err), &err);
    CHECK_OK(run_node(&env, "VAEDecodeTiled", tin, &t32, NULL, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.vae_precision, "bf16", &err), &err);
    logbuf[0] = '\0';
    int before = poison_calls;
    CHECK_OK(run_node(&env, "VAEDecodeTiled", tin, &tredo, &ui, &err), &err);
    int tiles = poison_calls - before;
    CHECK_MSG(tiles > 1 && sd_vae_f32_redos(vae) == 1u + (unsigned)tiles, "tiles %d, redos %u", tiles,
              sd_vae_f32_redos(vae));
    CHECK_MSG(bit_equal(tredo, t32), "redone tiled decode differs from f32 by %g", max_diff(tredo, t32));
    CHECK(redo_note(ui) == tiles && strstr(logbuf, "VAEDecodeTiled: the bf16 decode gave NaN/Inf"));
    CHECK(sd_backend_precision(be) == SD_PREC_F32);
    sd_value_unref(ui);

    sd_vae_set_tap(vae, NULL, NULL);
    for (int i = 2; i < 6; i++) sd_value_unref(tin[i]);
    sd_value_unref(big);
    sd_value_unref(t32);
    sd_value_unref(tredo);
    sd_value_unref(img16);
    sd_value_unref(img32);
    sd_value_unref(lat);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_model_store_free(store);
    sd_env_cleanup(&env);
    sd_backend_free(be);
    return sd_test_finish();
}
