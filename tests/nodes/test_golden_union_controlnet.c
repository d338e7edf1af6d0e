/* test_golden_union_controlnet.c - the SDXL Union ControlNet (xinsir
 * controlnet-union-sdxl-1.0 / ProMax layout) and SetUnionControlNetType
 * against ComfyUI (tests/data/union_controlnet, gen/make_union_controlnet.py).
 *
 * The ControlNet file is written here in its real (diffusers + Union) key
 * layout from the manifest: every "encoder_keys" name takes the shared tiny
 * SDXL checkpoint's tensor as stored, every tensor of the stored parts file
 * is added as it is; that is the file the generator gave ComfyUI.
 *   - ControlNetLoader finds the manifest's number of control types;
 *   - per forward type (SetUnionControlNetType's setting, "auto" included):
 *     one ControlNet forward on the stored inputs, its outputs and middle;
 *   - the tiny SDXL UNet with one type's residuals times the strength, and
 *     without;
 *   - per ks case: CLIPTextEncode, SetUnionControlNetType,
 *     ControlNetApplyAdvanced and KSampler, the latent with and without it.
 * Error paths and tolerated inputs, no reference needed: a 6-type Union file
 * (the first release) refuses "tile" at sampling as ComfyUI does and runs
 * "segment"; a Union width that is not model_channels is refused at load;
 * a ControlNet without the Union parts ignores the type (the same bytes as
 * without one: the same computation); an unknown type name is refused by
 * the node. Without the shared tiny SDXL or the CLIP vocabulary: 77. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/controlnet/controlnet.h"
#include "nodes/controlnet/controlnet_nodes.h"
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;
static sd_st_file *gold;
static sd_backend *g_be;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(item(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }

static sd_tensor *ref(const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(gold, name, &err);
    CHECK_MSG(t != NULL, "no reference tensor %s: %s", name, err.msg);
    return t;
}

static void compare(const char *name, const sd_tensor *got, const cJSON *tol) {
    sd_tensor *want = ref(name);
    double mx = 0;
    long worst = -1;
    int ok = got && want && sd_golden_allclose(got, want, num(tol, "atol"), num(tol, "rtol"), &mx, &worst);
    CHECK_MSG(ok, "%s differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", name, mx, worst,
              num(tol, "atol"), num(tol, "rtol"));
    printf("  %-28s max |diff| %g\n", name, mx);
    sd_tensor_unref(want);
}

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

/* t's first `keep` entries along its last dim (rows of dim 0 when dim0). */
static sd_tensor *cut(const sd_tensor *t, int dim0, int64_t keep) {
    int64_t shape[SD_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape[0] * (size_t)t->ndim);
    int64_t outer = 1, inner_old, inner_new;
    size_t es = sd_dtype_size(t->dtype);
    if (dim0) {
        shape[0] = keep;
        sd_tensor *r = sd_tensor_new(t->dtype, t->ndim, shape);
        if (r) memcpy(r->data, t->data, r->nbytes);
        return r;
    }
    inner_old = shape[t->ndim - 1];
    inner_new = keep;
    for (int i = 0; i < t->ndim - 1; i++) outer *= shape[i];
    shape[t->ndim - 1] = keep;
    sd_tensor *r = sd_tensor_new(t->dtype, t->ndim, shape);
    for (int64_t o = 0; r && o < outer; o++)
        memcpy((char *)r->data + (size_t)(o * inner_new) * es, (const char *)t->data + (size_t)(o * inner_old) * es,
               (size_t)inner_new * es);
    return r;
}

/* The Union ControlNet file at path from the manifest. variant: 0 as the
 * generator wrote it; 6 = the first release's 6 types (task_embedding and
 * control_add_embedding.linear_1 cut); -1 without the Union parts; -2 with
 * a task_embedding narrower than model_channels. */
static int assemble(const cJSON *man, const char *dir, const char *ckpt, const char *path, int variant) {
    sd_error err;
    const cJSON *cn = item(man, "controlnet");
    char parts[4400];
    snprintf(parts, sizeof parts, "%s/%s", dir, str(cn, "parts"));
    sd_st_file *c = NULL, *p = NULL;
    CHECK_OK(sd_st_open(ckpt, &c, &err), &err);
    CHECK_OK(sd_st_open(parts, &p, &err), &err);
    if (!c || !p) {
        sd_st_close(c), sd_st_close(p);
        return -1;
    }
    sd_st_writer *w = sd_st_writer_new();
    int bad = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, item(cn, "encoder_keys")) {
        sd_tensor *t = sd_st_tensor(c, cJSON_GetStringValue(e), &err);
        bad |= !t || sd_st_writer_add(w, e->string, t, &err);
        sd_tensor_unref(t);
    }
    for (size_t i = 0; i < sd_st_count(p); i++) {
        const char *name = sd_st_at(p, i)->name;
        int unionpart = strncmp(name, "controlnet_", 11) != 0;
        if (variant == -1 && unionpart) continue;
        sd_tensor *t = sd_st_tensor(p, name, &err), *u = NULL;
        if (t && variant == 6 && strcmp(name, "task_embedding") == 0) u = cut(t, 1, 6);
        else if (t && variant == 6 && strcmp(name, "control_add_embedding.linear_1.weight") == 0)
            u = cut(t, 0, 6 * (t->shape[1] / (int64_t)num(cn, "num_control_types"))); /* 6 types x 256 */
        else if (t && variant == -2 && strcmp(name, "task_embedding") == 0) u = cut(t, 0, t->shape[1] / 2);
        bad |= !t || sd_st_writer_add(w, name, u ? u : t, &err);
        sd_tensor_unref(t), sd_tensor_unref(u);
    }
    CHECK_MSG(!bad, "assembling %s: %s", path, err.msg);
    if (!bad) CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(c), sd_st_close(p);
    return bad ? -1 : 0;
}

static sd_value *load_cn(const char *name, sd_error *err) {
    sd_value *nm = sd_value_string(name);
    sd_value *v = run_node("ControlNetLoader", (const char *[]){"control_net_name"}, &nm, 1, 0, err);
    sd_value_unref(nm);
    return v;
}

static sd_value *typed(sd_value *cn, const char *type, sd_error *err) {
    sd_value *v[] = {cn, sd_value_string(type)};
    sd_value *r = run_node("SetUnionControlNetType", (const char *[]){"control_net", "type"}, v, 2, 0, err);
    sd_value_unref(v[1]);
    return r;
}

typedef struct fwd_in {
    sd_bt *x, *hint, *ctx, *y;
    float ts[8];
} fwd_in;

static void fwd_in_load(fwd_in *f) {
    const char *nm[] = {"fwd.x", "fwd.hint", "fwd.context", "fwd.y"};
    sd_bt **dst[] = {&f->x, &f->hint, &f->ctx, &f->y};
    for (int i = 0; i < 4; i++) {
        sd_tensor *t = ref(nm[i]);
        *dst[i] = t ? sd_bt_from_host(g_be, t, SD_F32) : NULL;
        sd_tensor_unref(t);
    }
    sd_tensor *ts = ref("fwd.timesteps");
    for (int64_t i = 0; ts && i < sd_tensor_numel(ts) && i < 8; i++) f->ts[i] = sd_tensor_f32(ts)[i];
    CHECK_MSG(ts && f->x && sd_tensor_numel(ts) == f->x->shape[0], "fwd.timesteps");
    sd_tensor_unref(ts);
}

static void fwd_in_free(fwd_in *f) { sd_bt_free(f->x), sd_bt_free(f->hint), sd_bt_free(f->ctx), sd_bt_free(f->y); }

/* The forward of the ControlNet behind value v with v's type. */
static sd_status forward(sd_value *v, const fwd_in *f, sd_controlnet_result *r, sd_error *err) {
    return sd_controlnet_forward_type(sd_nodes_control_net_of(v), f->x, f->ts, f->hint, f->ctx, f->y,
                                      sd_nodes_control_union_type(v) - 1, r, err);
}

static int same_result(const sd_controlnet_result *a, const sd_controlnet_result *b) {
    if (a->n != b->n || a->n == 0) return 0;
    for (int i = 0; i <= a->n; i++) {
        sd_tensor *x = sd_bt_to_host(i < a->n ? a->output[i] : a->middle);
        sd_tensor *y = sd_bt_to_host(i < b->n ? b->output[i] : b->middle);
        int same = x && y && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
        sd_tensor_unref(x), sd_tensor_unref(y);
        if (!same) return 0;
    }
    return 1;
}

static sd_value *encode(sd_value *clip, const char *text) {
    sd_value *v[] = {clip, sd_value_string(text)};
    sd_error err;
    sd_value *r = run_node("CLIPTextEncode", (const char *[]){"clip", "text"}, v, 2, 0, &err);
    CHECK_MSG(r != NULL, "CLIPTextEncode: %s", err.msg);
    sd_value_unref(v[1]);
    return r;
}

static sd_tensor *ksample(sd_value *model, const cJSON *c, sd_value *pos, sd_value *neg) {
    sd_ksample_args a;
    sd_ksample_args_init(&a);
    sd_model_ref *mr = sd_value_as_handle(model, &sd_handle_model);
    a.ckpt = mr->ckpt;
    a.loras = mr->loras;
    a.patches = &mr->patches;
    a.seed = (uint64_t)num(c, "seed");
    a.steps = (int)num(c, "steps");
    a.cfg = num(c, "cfg");
    a.sampler_name = str(c, "sampler");
    a.scheduler = str(c, "scheduler");
    a.positive = pos;
    a.negative = neg;
    sd_tensor *z = sd_tensor_new4(SD_F32, 4, 1, 4, (int64_t)num(c, "height") / 8, (int64_t)num(c, "width") / 8);
    sd_value *lat = nt_latent(z);
    a.latent = lat;
    sd_node_ctx ctx = {.env = g_env, .node_id = "3", .class_type = "KSampler"};
    sd_value *res = NULL;
    sd_error err;
    CHECK_OK(sd_nodes_common_ksampler(&ctx, &a, &res, &err), &err);
    sd_tensor *t = res ? sd_tensor_ref(sd_value_dict_tensor(res, "samples")) : NULL;
    sd_value_unref(res);
    sd_value_unref(lat);
    return t;
}

int main(void) {
    char path[4300], ckpt[4300], tokdir[4300];
    const char *dir = sd_golden_topic_dir("union_controlnet");
    cJSON *man = sd_golden_manifest(dir);
    const char *ck = str(man, "checkpoint");
    CHECK_MSG(ck && item(man, "controlnet") && item(man, "forward"), "manifest");
    if (!ck) return sd_test_finish();
    snprintf(ckpt, sizeof ckpt, "%s/%s", sd_golden_dir(), strncmp(ck, "testdata/", 9) == 0 ? ck + 9 : ck);
    snprintf(tokdir, sizeof tokdir, "%s", sd_golden_tokenizer_dir());
    snprintf(path, sizeof path, "%s/vocab.json", tokdir);
    if (access(ckpt, R_OK) || access(path, R_OK)) sd_test_skip("no %s or no CLIP vocabulary in %s", ckpt, tokdir);
    snprintf(path, sizeof path, "%s/golden/union_controlnet.safetensors", dir);
    sd_error err;
    CHECK_OK(sd_st_open(path, &gold, &err), &err);
    if (!gold) return sd_test_finish();

    const char *tmp = sd_test_tmpdir("nodes_golden_union_controlnet");
    char models[4200], cmd[9000], file[4400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/checkpoints' '%s/controlnet'", models, models, models);
    CHECK(system(cmd) == 0);
    static const struct { const char *name; int variant; } files[] = {
        {"union.safetensors", 0}, {"union6.safetensors", 6}, {"plain.safetensors", -1}, {"narrow.safetensors", -2}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(file, sizeof file, "%s/controlnet/%s", models, files[i].name);
        assemble(man, dir, ckpt, file, files[i].variant);
    }
    snprintf(file, sizeof file, "%s/checkpoints/tiny-sdxl.safetensors", models);
    CHECK(symlink(ckpt, file) == 0);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    g_be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    env.backend = g_be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const cJSON *tol = item(man, "tolerance"), *fw = item(man, "forward");

    /* ---- the ControlNet forward per type ---- */
    sd_value *cn = load_cn("union.safetensors", &err);
    CHECK_MSG(cn != NULL, "ControlNetLoader: %s", err.msg);
    CHECK_MSG(cn && sd_controlnet_union_n_types(sd_nodes_control_net_of(cn)) ==
                        (int)num(item(man, "controlnet"), "num_control_types"),
              "the loaded ControlNet has %d control types, the manifest %d",
              cn ? sd_controlnet_union_n_types(sd_nodes_control_net_of(cn)) : -1,
              (int)num(item(man, "controlnet"), "num_control_types"));
    fwd_in f = {0};
    fwd_in_load(&f);
    sd_golden_set_depth(SD_GOLDEN_DEPTH_CONTROLNET);
    const cJSON *ty;
    sd_controlnet_result keep = {0};
    const char *unet_type = str(item(fw, "unet"), "type");
    cJSON_ArrayForEach(ty, item(fw, "types")) {
        const char *type = cJSON_GetStringValue(ty);
        sd_value *tv = cn ? typed(cn, type, &err) : NULL;
        CHECK_MSG(tv != NULL, "SetUnionControlNetType %s: %s", type, err.msg);
        if (!tv) continue;
        CHECK_MSG(sd_nodes_control_union_type(tv) == sd_controlnet_union_type(type) + 1 &&
                      sd_nodes_control_net_of(tv) == sd_nodes_control_net_of(cn),
                  "%s: the typed CONTROL_NET", type);
        sd_controlnet_result r;
        CHECK_OK(forward(tv, &f, &r, &err), &err);
        CHECK_MSG(r.n == (int)num(fw, "outputs"), "%s: %d outputs, ComfyUI %d", type, r.n, (int)num(fw, "outputs"));
        char name[128];
        for (int i = 0; i < r.n; i++) {
            snprintf(name, sizeof name, "fwd_%s.output.%d", type, i);
            sd_tensor *h = sd_bt_to_host(r.output[i]);
            compare(name, h, item(tol, "fwd"));
            sd_tensor_unref(h);
        }
        snprintf(name, sizeof name, "fwd_%s.middle", type);
        sd_tensor *h = r.middle ? sd_bt_to_host(r.middle) : NULL;
        compare(name, h, item(tol, "fwd"));
        sd_tensor_unref(h);
        if (unet_type && strcmp(type, unet_type) == 0) keep = r;
        else sd_controlnet_result_free(&r);
        sd_value_unref(tv);
    }

    /* ---- the UNet with those residuals ---- */
    sd_value *nm = sd_value_string("tiny-sdxl.safetensors");
    sd_value *ckv[3] = {NULL, NULL, NULL};
    sd_node_ctx lctx = {.env = g_env, .node_id = "4", .class_type = "CheckpointLoaderSimple"};
    CHECK_OK(nt_run_named(&lctx, (const char *[]){"ckpt_name"}, &nm, 1, ckv, &err), &err);
    sd_value_unref(nm);
    sd_unet *u = NULL;
    sd_model_ref *m = ckv[0] ? sd_value_as_handle(ckv[0], &sd_handle_model) : NULL;
    if (m) CHECK_OK(sd_nodes_model_unet(m, &u, &err), &err);
    CHECK_MSG(keep.n > 0, "no forward of the UNet case's type %s", unet_type ? unet_type : "(none)");
    if (u && keep.n > 0) {
        float s = (float)num(item(fw, "unet"), "strength");
        sd_bt *skip[SD_UNET_MAX_BLOCKS] = {0};
        for (int i = 0; i < keep.n; i++) skip[i] = sd_op_scale(keep.output[i], s);
        sd_bt *mid = sd_op_scale(keep.middle, s);
        sd_unet_control c = {.n_skip = keep.n, .skip = skip, .middle = mid};
        sd_bt *o = NULL;
        sd_golden_set_depth(SD_GOLDEN_DEPTH_UNET + SD_GOLDEN_DEPTH_CONTROLNET);
        CHECK_OK(sd_unet_forward(u, f.x, f.ts, f.ctx, f.y, &c, &o, &err), &err);
        sd_tensor *h = o ? sd_bt_to_host(o) : NULL;
        compare("unet.out_control", h, item(tol, "unet"));
        sd_tensor_unref(h), sd_bt_free(o);
        o = NULL;
        sd_golden_set_depth(SD_GOLDEN_DEPTH_UNET);
        CHECK_OK(sd_unet_forward(u, f.x, f.ts, f.ctx, f.y, NULL, &o, &err), &err);
        h = o ? sd_bt_to_host(o) : NULL;
        compare("unet.out_base", h, item(tol, "unet"));
        sd_tensor_unref(h), sd_bt_free(o);
        for (int i = 0; i < keep.n; i++) sd_bt_free(skip[i]);
        sd_bt_free(mid);
    }
    sd_controlnet_result_free(&keep);

    /* ---- KSampler with ControlNetApplyAdvanced ---- */
    const cJSON *c;
    sd_value *pos = ckv[1] ? encode(ckv[1], str(item(man, "prompts"), "positive")) : NULL;
    sd_value *neg = ckv[1] ? encode(ckv[1], str(item(man, "prompts"), "negative")) : NULL;
    cJSON_ArrayForEach(c, item(man, "cases")) {
        const char *id = str(c, "id");
        char name[128];
        if (!sd_golden_e2e_comparable() || !pos || !neg || !cn) break;
        snprintf(name, sizeof name, "%s.image", id);
        sd_tensor *img = ref(name);
        sd_value *tv = typed(cn, str(c, "type"), &err);
        CHECK_MSG(tv != NULL, "%s: SetUnionControlNetType: %s", id, err.msg);
        sd_value *in[] = {pos, neg, tv, nt_tensor_value(img), sd_value_float(num(c, "strength")),
                          sd_value_float(num(c, "start_percent")), sd_value_float(num(c, "end_percent"))};
        const char *names[] = {"positive", "negative", "control_net", "image", "strength", "start_percent",
                               "end_percent"};
        sd_value *out[4] = {0};
        sd_node_ctx actx = {.env = g_env, .node_id = "8", .class_type = "ControlNetApplyAdvanced"};
        CHECK_OK(nt_run_named(&actx, names, in, 7, out, &err), &err);
        for (int i = 2; i < 7; i++) sd_value_unref(in[i]);
        sd_golden_set_depth(0);
        if (out[0] && out[1]) {
            sd_tensor *lat = ksample(ckv[0], c, out[0], out[1]);
            snprintf(name, sizeof name, "%s.latent_out", id);
            compare(name, lat, item(tol, "ks"));
            sd_tensor_unref(lat);
        }
        sd_tensor *lat0 = ksample(ckv[0], c, pos, neg);
        snprintf(name, sizeof name, "%s.latent_nocontrol", id);
        compare(name, lat0, item(tol, "ks"));
        sd_tensor_unref(lat0);
        nt_free_values(out, 4);
    }
    sd_value_unref(pos), sd_value_unref(neg);

    /* ---- error paths and what is tolerated ---- */
    sd_value *cn6 = load_cn("union6.safetensors", &err);
    CHECK_MSG(cn6 && sd_controlnet_union_n_types(sd_nodes_control_net_of(cn6)) == 6, "6-type Union: %s", err.msg);
    if (cn6) {
        sd_value *tile = typed(cn6, "tile", &err), *seg = typed(cn6, "segment", &err);
        sd_controlnet_result r;
        sd_status rc = tile ? forward(tile, &f, &r, &err) : SD_ERR_INTERNAL;
        CHECK_MSG(rc == SD_ERR_INVALID && strstr(err.msg, "tile(6)") && strstr(err.msg, "out of range"),
                  "tile on a 6-type Union ControlNet: rc %d, %s", (int)rc, err.msg);
        if (!rc) sd_controlnet_result_free(&r);
        CHECK_OK(seg ? forward(seg, &f, &r, &err) : SD_ERR_INTERNAL, &err);
        if (seg) sd_controlnet_result_free(&r);
        sd_value_unref(tile), sd_value_unref(seg);
    }
    sd_value_unref(cn6);
    sd_value *nw = load_cn("narrow.safetensors", &err);
    CHECK_MSG(!nw && err.code == SD_ERR_FORMAT && strstr(err.msg, "task_embedding") &&
                  strcmp(err.input, "control_net_name") == 0,
              "a Union width other than model_channels: %s", err.msg);
    sd_value_unref(nw);
    sd_value *plain = load_cn("plain.safetensors", &err);
    CHECK_MSG(plain && sd_controlnet_union_n_types(sd_nodes_control_net_of(plain)) == 0, "plain: %s", err.msg);
    if (plain) {
        sd_value *tv = typed(plain, "depth", &err);
        sd_controlnet_result a, b;
        memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
        CHECK_OK(tv ? forward(tv, &f, &a, &err) : SD_ERR_INTERNAL, &err);
        CHECK_OK(forward(plain, &f, &b, &err), &err);
        CHECK_MSG(same_result(&a, &b), "a type changed a ControlNet without the Union parts");
        sd_controlnet_result_free(&a), sd_controlnet_result_free(&b);
        sd_value_unref(tv);
    }
    sd_value_unref(plain);
    if (cn) {
        sd_value *bad = typed(cn, "sketch", &err);
        CHECK_MSG(!bad && strcmp(err.input, "type") == 0, "an unknown type: %s", err.msg);
        sd_value_unref(bad);
    }

    fwd_in_free(&f);
    sd_value_unref(cn);
    nt_free_values(ckv, 3);
    sd_st_close(gold);
    cJSON_Delete(man);
    sd_model_store_free(store);
    sd_backend_free(g_be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
