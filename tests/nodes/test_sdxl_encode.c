/* test_sdxl_encode.c - CLIPTextEncodeSDXL / CLIPTextEncodeSDXLRefiner on the
 * tiny SDXL checkpoint, and the adm vectors the sampler builds from what
 * they store:
 *   - the SDXL node stores its six sizes as INT under ComfyUI's names, and
 *     with text_g = text_l encodes exactly as CLIPTextEncode;
 *   - the refiner node stores aesthetic_score / width / height, encodes as
 *     CLIPTextEncode;
 *   - base adm: y = [pooled, emb(height), emb(width), emb(crop_h),
 *     emb(crop_w), emb(target_height), emb(target_width)] from the entry;
 *   - refiner adm (a UNet whose label_emb takes pooled + 5*256): y =
 *     [pooled, emb(h), emb(w), emb(crop_h), emb(crop_w), emb(aesthetic)],
 *     the score defaulting to 6 for positive and 2.5 for negative entries,
 *     sizes to the latent's.
 * Embeddings are recomputed here (cos half first) from float32 arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "core/node.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/guider.h"
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_status run_named(const sd_env *env, const char *type, const char *const *names,
                           sd_value *const *vals, int n, sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static double dict_num(const sd_value *list, const char *key, int want_int) {
    sd_value *v = sd_value_dict_get(sd_value_list_get(list, 0), key);
    if (!v) return NAN;
    sd_value_kind k = sd_value_kind_of(v);
    if (want_int ? k != SD_VAL_INT : k != SD_VAL_FLOAT) return NAN;
    return sd_value_as_float(v);
}

static double max_diff(const sd_tensor *a, const sd_tensor *b) {
    if (!a || !b || sd_tensor_numel(a) != sd_tensor_numel(b)) return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) {
        double d = fabs((double)sd_tensor_f32(a)[i] - (double)sd_tensor_f32(b)[i]);
        if (d > m) m = d;
    }
    return m;
}

/* |y - [pooled, emb(vals)...]| */
static double adm_error(const sd_tensor *y, const sd_tensor *pooled, const double *vals, int nv) {
    int64_t p = pooled->shape[1];
    if (y->ndim != 2 || y->shape[1] != p + 256 * nv) return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < p; i++) m = fmax(m, fabs(sd_tensor_f32(y)[i] - sd_tensor_f32(pooled)[i]));
    for (int v = 0; v < nv; v++)
        for (int j = 0; j < 128; j++) {
            /* the float32 operation order of timestep_embedding (the
             * golden unet_sdxl case checks it against PyTorch); cos/sin of
             * the rounded argument in double */
            float f = expf(((float)-log(10000.0) * (float)j) / 128.0f);
            double arg = (double)((float)vals[v] * f);
            const float *e = sd_tensor_f32(y) + p + 256 * v;
            m = fmax(m, fabs(e[j] - cos(arg)));
            m = fmax(m, fabs(e[128 + j] - sin(arg)));
        }
    return m;
}

typedef struct {
    sd_tensor *y[2];
} adm_log;

static void on_adm(void *ud, int cond_index, const sd_tensor *y) {
    adm_log *l = ud;
    if (cond_index < 0 || cond_index > 1) return;
    sd_tensor_unref(l->y[cond_index]);
    l->y[cond_index] = sd_tensor_clone(y);
}

/* One model call on an 8x8 latent (64x64 image) with positive / negative;
 * the adm vectors land in l. Returns the eval status. */
static sd_status eval_once(sd_backend *be, sd_unet *unet, const sd_unet_config *cfg, const sd_value *pos,
                           const sd_value *neg, adm_log *l, sd_error *err) {
    static sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_EPS);
    sd_cond_model m = {.be = be, .cfg = cfg, .ms = &ms, .conds = {pos, neg},
                       .image_w = 64, .image_h = 64, .adm_tap = on_adm, .tap_ud = l};
    sd_unet_as_dmodel(unet, &m.dm);
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, 4, 8, 8);
    for (int64_t i = 0; i < sd_tensor_numel(x); i++) sd_tensor_f32(x)[i] = (float)((i % 7) - 3) * 0.1f;
    int conds[2] = {SD_COND_POSITIVE, SD_COND_NEGATIVE};
    /* the caller owns the outputs (same shape as x) */
    sd_tensor *outs[2] = {sd_tensor_new4(SD_F32, 4, 1, 4, 8, 8), sd_tensor_new4(SD_F32, 4, 1, 4, 8, 8)};
    sd_status rc = sd_cond_model_eval(&m, x, 5.0f, conds, 2, outs, err);
    sd_tensor_unref(outs[0]);
    sd_tensor_unref(outs[1]);
    sd_tensor_unref(x);
    return rc;
}

int main(void) {
    const char *data = getenv("SDFLOW_TESTDATA");
    if (!data || !*data) data = sd_test_testdata_dir();
    char ckpt[4096], tokdir[4096];
    snprintf(ckpt, sizeof ckpt, "%s/models/tiny-sdxl.safetensors", data);
    struct stat st;
    if (stat(ckpt, &st) != 0) sd_test_skip("no %s", ckpt);
    const char *tk = getenv("SDFLOW_TOKENIZER_DIR");
    if (tk && *tk) snprintf(tokdir, sizeof tokdir, "%s", tk);
    else snprintf(tokdir, sizeof tokdir, "%s/data/clip", sd_test_shared_dir());
    if (stat(tokdir, &st) != 0) sd_test_skip("no tokenizer directory %s", tokdir);

    sd_error err;
    sd_error_clear(&err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_value *name = sd_value_string(ckpt), *ck[3] = {0};
    const char *ln[] = {"ckpt_name"};
    CHECK_OK(run_named(&env, "CheckpointLoaderSimple", ln, &name, 1, ck, &err), &err);
    if (!ck[1]) return sd_test_finish();

    /* CLIPTextEncodeSDXL: sizes stored, text_g = text_l = CLIPTextEncode */
    const char *text = "a cozy cabin in the snowy woods";
    const char *sn[] = {"clip", "width", "height", "crop_w", "crop_h", "target_width",
                        "target_height", "text_g", "text_l"};
    sd_value *sv[] = {ck[1], sd_value_int(800), sd_value_int(600), sd_value_int(16),
                      sd_value_int(8), sd_value_int(1024), sd_value_int(768),
                      sd_value_string(text), sd_value_string(text)};
    sd_value *xl = NULL, *plain = NULL, *ref = NULL;
    CHECK_OK(run_named(&env, "CLIPTextEncodeSDXL", sn, sv, 9, &xl, &err), &err);
    const char *pn[] = {"text", "clip"};
    sd_value *pv[] = {sv[7], ck[1]};
    CHECK_OK(run_named(&env, "CLIPTextEncode", pn, pv, 2, &plain, &err), &err);
    const char *rn[] = {"ascore", "width", "height", "text", "clip"};
    sd_value *rv[] = {sd_value_float(3.5), sd_value_int(640), sd_value_int(480), sv[7], ck[1]};
    CHECK_OK(run_named(&env, "CLIPTextEncodeSDXLRefiner", rn, rv, 5, &ref, &err), &err);
    if (!xl || !plain || !ref) return sd_test_finish();

    static const char *const keys[] = {"width", "height", "crop_w", "crop_h", "target_width",
                                       "target_height"};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(dict_num(xl, keys[i], 1) == (double)sd_value_as_int(sv[1 + i]),
                  "CLIPTextEncodeSDXL %s", keys[i]);
    const sd_value *e_xl = sd_value_list_get(xl, 0), *e_plain = sd_value_list_get(plain, 0),
                   *e_ref = sd_value_list_get(ref, 0);
    CHECK(max_diff(sd_value_dict_tensor(e_xl, "cond"), sd_value_dict_tensor(e_plain, "cond")) == 0);
    CHECK(max_diff(sd_value_dict_tensor(e_xl, "pooled_output"),
                   sd_value_dict_tensor(e_plain, "pooled_output")) == 0);
    CHECK(dict_num(ref, "aesthetic_score", 0) == 3.5);
    CHECK(dict_num(ref, "width", 1) == 640 && dict_num(ref, "height", 1) == 480);
    CHECK(sd_value_dict_get(e_ref, "crop_w") == NULL);
    CHECK(max_diff(sd_value_dict_tensor(e_ref, "cond"), sd_value_dict_tensor(e_plain, "cond")) == 0);

    /* base adm from the SDXL entry (positive) and from defaults (negative) */
    sd_model_ref *mr = sd_value_as_handle(ck[0], &sd_handle_model);
    sd_unet *unet = NULL;
    CHECK_OK(sd_checkpoint_unet(mr->ckpt, &unet, &err), &err);
    if (unet) {
        const sd_tensor *pooled = sd_value_dict_tensor(e_xl, "pooled_output");
        adm_log l = {{0}};
        CHECK_OK(eval_once(be, unet, sd_unet_get_config(unet), xl, plain, &l, &err), &err);
        double want_pos[6] = {600, 800, 8, 16, 768, 1024}, want_neg[6] = {64, 64, 0, 0, 64, 64};
        CHECK(l.y[0] && adm_error(l.y[0], pooled, want_pos, 6) < 2e-6);
        CHECK(l.y[1] && adm_error(l.y[1], pooled, want_neg, 6) < 2e-6);
        for (int i = 0; i < 2; i++) sd_tensor_unref(l.y[i]);

        /* refiner adm: a UNet config with label_emb over pooled + 5 * 256
         * (the tiny base UNet then rejects y, after the tap saw it) */
        sd_unet_config rcfg = *sd_unet_get_config(unet);
        rcfg.adm_in_channels = (int)pooled->shape[1] + 5 * 256;
        adm_log r = {{0}};
        sd_error e2;
        sd_error_clear(&e2);
        (void)eval_once(be, unet, &rcfg, ref, plain, &r, &e2);
        double rpos[5] = {480, 640, 0, 0, 3.5}, rneg[5] = {64, 64, 0, 0, 2.5};
        CHECK_MSG(r.y[0] && adm_error(r.y[0], pooled, rpos, 5) < 2e-6, "refiner positive adm");
        CHECK_MSG(r.y[1] && adm_error(r.y[1], pooled, rneg, 5) < 2e-6, "refiner negative adm");
        /* positive without a score: 6 */
        sd_tensor_unref(r.y[0]);
        sd_tensor_unref(r.y[1]);
        r = (adm_log){{0}};
        sd_error_clear(&e2);
        (void)eval_once(be, unet, &rcfg, plain, ref, &r, &e2);
        double rpos6[5] = {64, 64, 0, 0, 6.0};
        CHECK_MSG(r.y[0] && adm_error(r.y[0], pooled, rpos6, 5) < 2e-6, "refiner default score");
        for (int i = 0; i < 2; i++) sd_tensor_unref(r.y[i]);
    }

    /* CLIPTextEncodeSDXL needs an SDXL CLIP: the SD1 one is refused, naming clip */
    char sd1[4096];
    snprintf(sd1, sizeof sd1, "%s/models/tiny-sd1.safetensors", data);
    sd_value *n1 = sd_value_string(sd1), *c1[3] = {0}, *bad = NULL;
    if (stat(sd1, &st) == 0 &&
        run_named(&env, "CheckpointLoaderSimple", ln, &n1, 1, c1, &err) == SD_OK) {
        sv[0] = c1[1];
        sd_error_clear(&err);
        CHECK(run_named(&env, "CLIPTextEncodeSDXL", sn, sv, 9, &bad, &err) == SD_ERR_INVALID);
        CHECK(strcmp(err.input, "clip") == 0);
        sd_value_unref(bad);
    }
    for (int i = 0; i < 3; i++) sd_value_unref(c1[i]);
    sd_value_unref(n1);

    for (int i = 1; i < 9; i++) sd_value_unref(sv[i]);
    for (int i = 0; i < 3; i++) sd_value_unref(rv[i]);
    sd_value_unref(xl);
    sd_value_unref(plain);
    sd_value_unref(ref);
    for (int i = 0; i < 3; i++) sd_value_unref(ck[i]);
    sd_value_unref(name);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
