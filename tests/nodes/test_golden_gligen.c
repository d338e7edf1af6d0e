/* test_golden_gligen.c - GLIGEN (models/gligen, GLIGENLoader,
 * GLIGENTextBoxApply) against ComfyUI (tests/data/gligen, gen_gligen_ref.py),
 * on the manifest's tiny GLIGEN file and the shared tiny SD1 checkpoint:
 *   position_net: sd_gligen_position_net on the stored boxes, masks and
 *     embeddings against PositionNet.forward;
 *   unet_forward: the UNet with the GLIGEN middle_patch of the stored boxes
 *     (sd_gligen_set_position on the input's shape) against ComfyUI's
 *     UNetModel.forward with Gligen.set_position's patch; it must differ
 *     from the forward without GLIGEN by more than the tolerance;
 *   ksampler: CLIPTextEncode, GLIGENLoader, GLIGENTextBoxApply per box and
 *     KSampler through the node functions: the first model evaluation's
 *     positive and negative predictions (the negative gets the positive's
 *     GLIGEN) and the latent against nodes.common_ksampler's; the latent
 *     must differ from the run without boxes.
 * And what is refused: a file without GLIGEN weights at GLIGENLoader
 * (naming gligen_name), a GLIGEN file whose fusers do not fit the UNet at
 * KSampler (naming the file and the positive input).
 * Needs the shared tiny SD1 checkpoint; the ksampler case also a tokenizer
 * (SDFLOW_TOKENIZER_DIR or <shared>/data/clip): without them, exit 77. */
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
#include "models/gligen/gligen.h"
#include "models/unet/unet.h"
#include "nodes/gligen/gligen_nodes.h"
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
    sd_tensor *t = name ? sd_st_tensor_f32(ref, name, &err) : NULL;
    CHECK_MSG(t != NULL, "no reference tensor %s", name ? name : "(unnamed)");
    return t;
}

static int compare(const char *id, const char *what, const sd_tensor *got, const sd_tensor *want, double atol,
                   double rtol) {
    double mx = 0;
    long worst = -1;
    int ok = got && want && sd_test_allclose(got, want, atol, rtol, &mx, &worst);
    CHECK_MSG(ok, "%s %s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", id, what, mx, worst,
              atol, rtol);
    printf("  %s %-12s max |diff| %g (atol %g rtol %g)\n", id, what, mx, atol, rtol);
    return ok;
}

/* A must lie outside the tolerance of b: the feature under test changes it. */
static void differs(const char *id, const sd_tensor *a, const sd_tensor *b, double atol, double rtol) {
    double mx = 0;
    long worst = -1;
    CHECK_MSG(a && b && !sd_test_allclose(a, b, atol, rtol, &mx, &worst),
              "%s: the result without GLIGEN is within the tolerance of the one with it", id);
}

static sd_tensor *bt_host(sd_bt *t) {
    sd_tensor *h = t ? sd_bt_to_host(t) : NULL;
    sd_bt_free(t);
    return h;
}

/* ---- position_net ------------------------------------------------------------------------- */

static void position_net_case(sd_gligen *g, const cJSON *c) {
    const cJSON *in = item(c, "inputs");
    sd_tensor *boxes = ref_tensor(str(in, "boxes")), *masks = ref_tensor(str(in, "masks"));
    sd_tensor *emb = ref_tensor(str(in, "embeddings"));
    sd_error err;
    sd_bt *objs = NULL;
    if (boxes && masks && emb) CHECK_OK(sd_gligen_position_net(g, boxes, masks, emb, &objs, &err), &err);
    sd_tensor *got = bt_host(objs);
    const cJSON *o;
    cJSON_ArrayForEach(o, item(c, "outputs")) {
        sd_tensor *want = ref_tensor(str(o, "tensor"));
        compare(str(c, "id"), "objs", got, want, num(o, "atol"), num(o, "rtol"));
        sd_tensor_unref(want);
    }
    sd_tensor_unref(got);
    sd_tensor_unref(boxes);
    sd_tensor_unref(masks);
    sd_tensor_unref(emb);
}

/* ---- unet_forward ----------------------------------------------------------------------- */

static void unet_forward_case(sd_backend *be, sd_gligen *g, sd_unet *u, const cJSON *c) {
    const char *id = str(c, "id");
    const cJSON *in = item(c, "inputs"), *p;
    sd_tensor *x = ref_tensor(str(in, "x")), *ts = ref_tensor(str(in, "timesteps"));
    sd_tensor *ctx = ref_tensor(str(in, "context"));
    int n = cJSON_GetArraySize(item(in, "position"));
    sd_gligen_box boxes[SD_GLIGEN_MAX_OBJS + 1];
    sd_tensor *pooled[SD_GLIGEN_MAX_OBJS + 1] = {0};
    CHECK(n >= 1 && n <= SD_GLIGEN_MAX_OBJS);
    int k = 0;
    cJSON_ArrayForEach(p, item(in, "position")) {
        if (k > SD_GLIGEN_MAX_OBJS) break;
        pooled[k] = ref_tensor(str(p, "pooled"));
        boxes[k] = (sd_gligen_box){pooled[k], (int64_t)num(p, "height"), (int64_t)num(p, "width"),
                                   (int64_t)num(p, "y"), (int64_t)num(p, "x")};
        k++;
    }
    sd_error err;
    sd_bt *objs = NULL, *bx = NULL, *bc = NULL, *out = NULL;
    sd_tensor *got = NULL;
    if (x && ts && ctx && k == n) {
        CHECK_OK(sd_gligen_set_position(g, boxes, n, x->shape[0], x->shape[2], x->shape[3], &objs, &err), &err);
        bx = sd_bt_from_host(be, x, SD_F32);
        bc = sd_bt_from_host(be, ctx, SD_F32);
    }
    if (objs && bx && bc) {
        sd_gligen_call call = {g, objs};
        sd_unet_middle_patch mid;
        sd_gligen_middle_patch(&call, &mid);
        sd_unet_control control = {.middle_patch = &mid};
        CHECK_OK(sd_unet_forward(u, bx, ts->data, bc, NULL, &control, &out, &err), &err);
        got = bt_host(out);
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, item(c, "outputs")) {
        sd_tensor *want = ref_tensor(str(o, "tensor")), *without = ref_tensor(str(c, "without"));
        compare(id, "out", got, want, num(o, "atol"), num(o, "rtol"));
        differs(id, without, want, num(o, "atol"), num(o, "rtol"));
        sd_tensor_unref(want);
        sd_tensor_unref(without);
    }
    sd_tensor_unref(got);
    sd_bt_free(objs);
    sd_bt_free(bx);
    sd_bt_free(bc);
    for (int i = 0; i <= SD_GLIGEN_MAX_OBJS; i++) sd_tensor_unref(pooled[i]);
    sd_tensor_unref(x);
    sd_tensor_unref(ts);
    sd_tensor_unref(ctx);
}

/* ---- ksampler (through the nodes) --------------------------------------------------------- */

static sd_value *run1(const sd_env *env, const char *type, const char *const *names, sd_value **vals, int n,
                      const int *owned) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_error err;
    return nt_run1_named(&ctx, names, vals, n, owned, &err);
}

static sd_value *encode(const sd_env *env, sd_value *clip, const char *text) {
    const char *n[] = {"clip", "text"};
    sd_value *v[] = {clip, sd_value_string(text)};
    int o[] = {0, 1};
    return run1(env, "CLIPTextEncode", n, v, 2, o);
}

/* GLIGENTextBoxApply of each box in order on cond (consumed). */
static sd_value *apply_boxes(const sd_env *env, sd_value *clip, sd_value *gl, sd_value *cond, const cJSON *boxes) {
    const cJSON *b;
    cJSON_ArrayForEach(b, boxes) {
        if (!cond) break;
        const char *n[] = {"conditioning_to", "clip", "gligen_textbox_model", "text", "width", "height", "x", "y"};
        sd_value *v[] = {cond, clip, gl, sd_value_string(str(b, "text")), sd_value_int((int64_t)num(b, "width")),
                         sd_value_int((int64_t)num(b, "height")), sd_value_int((int64_t)num(b, "x")),
                         sd_value_int((int64_t)num(b, "y"))};
        int o[] = {1, 0, 0, 1, 1, 1, 1, 1};
        cond = run1(env, "GLIGENTextBoxApply", n, v, 8, o);
    }
    return cond;
}

typedef struct first_eval {
    sd_tensor *pred[2];
} first_eval;

static void on_model(void *ud, int cond, float sigma, const sd_tensor *den) {
    first_eval *f = ud;
    (void)sigma;
    if (cond >= 0 && cond < 2 && !f->pred[cond]) f->pred[cond] = sd_tensor_clone(den);
}

/* KSampler on an EmptyLatentImage of the settings' size: the latent (NULL
 * on failure, rc and err say why). */
static sd_tensor *ksample(const sd_env *env, sd_value *model, const cJSON *s, sd_value *pos, sd_value *neg,
                          first_eval *fe, sd_status *rc, sd_error *err) {
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[] = {sd_value_int((int64_t)num(s, "width")), sd_value_int((int64_t)num(s, "height")),
                      sd_value_int(1)};
    int own[] = {1, 1, 1};
    sd_value *latent = run1(env, "EmptyLatentImage", ln, lv, 3, own);
    if (!latent) return NULL;
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
    a.hooks = fe ? &hooks : NULL;
    sd_node_ctx ctx = {.env = env, .node_id = "3", .class_type = "KSampler"};
    sd_value *res = NULL;
    *rc = sd_nodes_common_ksampler(&ctx, &a, &res, err);
    sd_value_unref(latent);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    return t;
}

static sd_value *load_gligen(const sd_env *env, const char *name, sd_status *rc, sd_error *err) {
    const char *n[] = {"gligen_name"};
    sd_value *v[] = {sd_value_string(name)}, *out[8] = {0};
    sd_node_ctx ctx = {.env = env, .node_id = "9", .class_type = "GLIGENLoader"};
    *rc = nt_run_named(&ctx, n, v, 1, out, err);
    sd_value_unref(v[0]);
    for (int i = 1; i < 8; i++) sd_value_unref(out[i]);
    return out[0];
}

static void ksampler_case(const sd_env *env, sd_value *const ck[3], const char *gligen_name, const cJSON *c) {
    const char *id = str(c, "id");
    const cJSON *s = item(c, "settings");
    sd_status rc;
    sd_error err;
    sd_value *gl = load_gligen(env, gligen_name, &rc, &err);
    CHECK_OK(rc, &err);
    sd_value *pos = encode(env, ck[1], str(c, "positive")), *neg = encode(env, ck[1], str(c, "negative"));
    sd_value *plain = encode(env, ck[1], str(c, "positive"));
    if (gl && pos) pos = apply_boxes(env, ck[1], gl, pos, item(c, "boxes"));
    /* the node leaves its input as it was */
    CHECK_MSG(plain && !sd_value_dict_get(sd_value_list_get(plain, 0), "gligen"), "%s: the encode has a gligen", id);
    CHECK_MSG(pos && sd_value_list_len(pos) == 1, "%s: GLIGENTextBoxApply returned no entry", id);
    first_eval fe = {{NULL, NULL}};
    sd_tensor *lat = pos && neg ? ksample(env, ck[0], s, pos, neg, &fe, &rc, &err) : NULL;
    CHECK_OK(rc, &err);
    sd_tensor *lat_plain = plain && neg ? ksample(env, ck[0], s, plain, neg, NULL, &rc, &err) : NULL;
    CHECK_OK(rc, &err);
    const cJSON *o;
    cJSON_ArrayForEach(o, item(c, "outputs")) {
        const char *what = str(o, "what");
        const sd_tensor *got = !strcmp(what, "step0 cond")     ? fe.pred[0]
                               : !strcmp(what, "step0 uncond") ? fe.pred[1]
                                                               : lat;
        sd_tensor *want = ref_tensor(str(o, "tensor"));
        compare(id, what, got, want, num(o, "atol"), num(o, "rtol"));
        if (!strcmp(what, "latent")) {
            sd_tensor *without = ref_tensor(str(c, "without"));
            compare(id, "no boxes", lat_plain, without, num(o, "atol"), num(o, "rtol"));
            differs(id, without, want, num(o, "atol"), num(o, "rtol"));
            sd_tensor_unref(without);
        }
        sd_tensor_unref(want);
    }
    for (int i = 0; i < 2; i++) sd_tensor_unref(fe.pred[i]);
    sd_tensor_unref(lat);
    sd_tensor_unref(lat_plain);
    sd_value_unref(pos);
    sd_value_unref(neg);
    sd_value_unref(plain);
    sd_value_unref(gl);
}

/* ---- refusals ------------------------------------------------------------------------------- */

/* A copy of the GLIGEN file with the fusers of input blocks 1 and 4 (32 and
 * 64 wide) swapped: a valid GLIGEN file that fits no tiny SD1 UNet. */
static int write_swapped(const char *src, const char *dst) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    if (!f) return 0;
    sd_st_writer *w = sd_st_writer_new();
    int ok = w != NULL;
    for (size_t i = 0; ok && i < sd_st_count(f); i++) {
        const char *name = sd_st_at(f, i)->name;
        char nn[512];
        if (!strncmp(name, "input_blocks.1.", 15)) snprintf(nn, sizeof nn, "input_blocks.4.%s", name + 15);
        else if (!strncmp(name, "input_blocks.4.", 15)) snprintf(nn, sizeof nn, "input_blocks.1.%s", name + 15);
        else snprintf(nn, sizeof nn, "%s", name);
        sd_tensor *t = sd_st_tensor(f, name, &err);
        ok = t && sd_st_writer_add(w, nn, t, &err) == SD_OK;
        sd_tensor_unref(t);
    }
    ok = ok && sd_st_writer_save(w, dst, &err) == SD_OK;
    CHECK_MSG(ok, "writing %s: %s", dst, err.msg);
    sd_st_writer_free(w);
    sd_st_close(f);
    return ok;
}

static void refusals(const sd_env *env, sd_value *const ck[3], const cJSON *c) {
    sd_status rc;
    sd_error err;
    /* a checkpoint in the gligen folder */
    sd_value *bad = load_gligen(env, "not_gligen.safetensors", &rc, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !strcmp(err.input, "gligen_name") && strstr(err.msg, "not a GLIGEN model"),
              "a checkpoint as GLIGEN: %d %s (input %s)", rc, err.msg, err.input);
    sd_value_unref(bad);
    /* fusers that do not fit the UNet: refused by KSampler, naming the file */
    sd_value *gl = load_gligen(env, "swapped.safetensors", &rc, &err);
    CHECK_OK(rc, &err);
    sd_value *pos = encode(env, ck[1], str(c, "positive")), *neg = encode(env, ck[1], str(c, "negative"));
    if (gl && pos) pos = apply_boxes(env, ck[1], gl, pos, item(c, "boxes"));
    sd_tensor *lat = pos && neg ? ksample(env, ck[0], item(c, "settings"), pos, neg, NULL, &rc, &err) : NULL;
    CHECK_MSG(!lat && rc == SD_ERR_INVALID && !strcmp(err.input, "positive") &&
                  strstr(err.msg, "swapped.safetensors") && strstr(err.msg, "wide"),
              "a GLIGEN of other widths: %d %s (input %s)", rc, err.msg, err.input);
    printf("  refused: %s\n", err.msg);
    sd_tensor_unref(lat);
    sd_value_unref(pos);
    sd_value_unref(neg);
    sd_value_unref(gl);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(void) {
    char path[4300], gpath[4300], tokdir[4096], ckpt[4300];
    const char *dir = sd_golden_topic_dir("gligen");
    cJSON *man = sd_golden_manifest(dir);
    int n_pos = sd_golden_require_cases(man, dir, "position_net");
    int n_unet = sd_golden_require_cases(man, dir, "unet_forward");
    int n_ks = sd_golden_require_cases(man, dir, "ksampler");
    CHECK(n_pos > 0 && n_unet > 0 && n_ks > 0);
    snprintf(path, sizeof path, "%s/%s", dir, str(man, "file"));
    snprintf(gpath, sizeof gpath, "%s/%s", dir, str(man, "gligen"));
    CHECK_MSG(nt_file_exists(gpath), "the manifest's GLIGEN file %s is absent", gpath);
    sd_error err;
    CHECK_OK(sd_st_open(path, &ref, &err), &err);
    sd_backend *be = sd_golden_backend();
    sd_gligen *g = NULL;
    if (be) CHECK_OK(sd_gligen_load_file(be, gpath, &g, &err), &err);
    if (!ref || !g) {
        sd_gligen_free(g);
        sd_backend_free(be);
        sd_st_close(ref);
        cJSON_Delete(man);
        return sd_test_finish();
    }
    const cJSON *lay = item(man, "gligen_layout");
    const sd_gligen_config *gc = sd_gligen_get_config(g);
    CHECK_MSG(gc->n_fusers == (int)num(lay, "fusers") && gc->key_dim == (int)num(lay, "key_dim") &&
                  gc->in_dim == (int)num(lay, "pooled") && gc->heads[0] == (int)num(lay, "heads"),
              "layout: %d fusers, key %d, in %d, %d heads", gc->n_fusers, gc->key_dim, gc->in_dim, gc->heads[0]);
    const cJSON *c;
    cJSON_ArrayForEach(c, item(man, "cases")) if (sd_golden_case_is(c, "position_net")) position_net_case(g, c);

    snprintf(ckpt, sizeof ckpt, "%s/models/tiny-sd1.safetensors", sd_golden_dir());
    if (!nt_file_exists(ckpt)) {
        sd_gligen_free(g);
        sd_backend_free(be);
        sd_st_close(ref);
        cJSON_Delete(man);
        if (sd_test_finish()) return 1;
        sd_test_skip("no %s: the UNet cases did not run", ckpt);
    }
    sd_st_file *cf = NULL;
    sd_unet *u = NULL;
    CHECK_OK(sd_st_open(ckpt, &cf, &err), &err);
    if (cf) CHECK_OK(sd_unet_load(be, cf, NULL, SD_F32, &u, &err), &err);
    sd_st_close(cf);
    cJSON_ArrayForEach(c, item(man, "cases")) if (u && sd_golden_case_is(c, "unet_forward")) unet_forward_case(be, g, u, c);
    sd_unet_free(u);
    sd_gligen_free(g);

    snprintf(tokdir, sizeof tokdir, "%s", sd_golden_tokenizer_dir());
    if (!is_dir(tokdir)) {
        sd_backend_free(be);
        sd_st_close(ref);
        cJSON_Delete(man);
        if (sd_test_finish()) return 1;
        sd_test_skip("no tokenizer (%s): the ksampler cases did not run", tokdir);
    }
    /* a models folder: gligen/<the file>, a checkpoint and a swapped copy beside it */
    const char *models = sd_test_tmpdir("golden_gligen");
    char gdir[4300], cmd[13000], swapped[4400];
    snprintf(gdir, sizeof gdir, "%s/gligen", models);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -sf '%s' '%s/%s' && ln -sf '%s' '%s/not_gligen.safetensors'", gdir,
             gpath, gdir, str(man, "gligen"), ckpt, gdir);
    CHECK(system(cmd) == 0);
    snprintf(swapped, sizeof swapped, "%s/swapped.safetensors", gdir);
    int have_swapped = write_swapped(gpath, swapped);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *cn[] = {"ckpt_name"};
    sd_value *cv[] = {sd_value_string(ckpt)}, *ck[3] = {0};
    sd_node_ctx ctx = {.env = &env, .node_id = "4", .class_type = "CheckpointLoaderSimple"};
    CHECK_OK(nt_run_named(&ctx, cn, cv, 1, ck, &err), &err);
    sd_value_unref(cv[0]);
    const cJSON *last = NULL;
    cJSON_ArrayForEach(c, item(man, "cases")) {
        if (!sd_golden_case_is(c, "ksampler") || !ck[0]) continue;
        ksampler_case(&env, ck, str(man, "gligen"), c);
        last = c;
    }
    if (last && have_swapped) refusals(&env, ck, last);
    nt_free_values(ck, 3);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
