/* test_golden_sd3_controlnet_inpaint.c - ControlNetInpaintingAliMamaApply
 * against ComfyUI (tests/data/sd3_controlnet_inpaint: its generator, its
 * manifest and what ComfyUI's own code wrote), with a tiny 17-channel SD3
 * ControlNet on the SD3 set's tiny MMDiT. Per case of the manifest:
 *   cond_hint_original  the masked image sd_controlnet_inpaint_inputs makes
 *                       (image * round(bilinear(1 - mask))), NCHW
 *   extra_concat        1 - mask as [B, 1, H, W]
 *   hint                sd_control_mmdit_hint of the link at the case's
 *                       latent size (17 channels: the mask channel last)
 *   control.N           the chain's "output" list for the case's x and sigma
 *                       with cond and uncond batched (sd_control_chain_run)
 *   latent_out          UNETLoader + ModelSamplingSD3 + ControlNetLoader +
 *                       ControlNetInpaintingAliMamaApply + KSampler, and
 *   latent_nocontrol    KSampler without the ControlNet.
 * Then: a mask whose batch fits neither the image's nor 1 (named 'mask'), a
 * missing VAE ('vae'), a 16-channel SD3 ControlNet (applied as by
 * ControlNetApplyAdvanced with the VAE: the image as given, no mask
 * channel), and a Flux inpainting ControlNet refused by ControlNetLoader.
 * Cases, sizes, settings and tolerances come from the manifest. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/controlnet/controlnet.h"
#include "models/image/imageops.h"
#include "models/sampling/model_sampling.h"
#include "models/vae/vae.h"
#include "nodes/controlnet/controlnet_nodes.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *case_id = "";

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

static double num(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    CHECK_MSG(cJSON_IsNumber(v), "%s: setting %s missing", case_id, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(cJSON *o, const char *k) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    CHECK_MSG(s != NULL, "%s: setting %s missing", case_id, k);
    return s ? s : "";
}

static sd_tensor *ref(sd_st_file *g, const char *name) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", name);
    return t;
}

static sd_tensor *case_ref(sd_st_file *g, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", case_id, what);
    return ref(g, name);
}

static void tol_for(cJSON *tensors, cJSON *tol, const char *group, const char *name) {
    cJSON *t = cJSON_AddObjectToObject(tensors, name);
    cJSON *g = cJSON_GetObjectItemCaseSensitive(tol, group);
    CHECK_MSG(g != NULL, "manifest has no tolerance for %s", group);
    if (g) cJSON_AddItemToObject(t, "tolerance", cJSON_Duplicate(g, 1));
}

static void compare(sd_st_file *g, cJSON *tensors, cJSON *tol, const char *group, const char *what,
                    sd_tensor *got) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", case_id, what);
    tol_for(tensors, tol, group, name);
    sd_golden_compare(case_id, tensors, g, name, got);
}

/* n copies of t along a new leading batch: [n, ...t's dims after the first] */
static sd_tensor *repeat_batch(const sd_tensor *t, int64_t n) {
    int64_t shape[SD_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    shape[0] = t->shape[0] * n;
    sd_tensor *o = sd_tensor_new(SD_F32, t->ndim, shape);
    for (int64_t i = 0; o && i < n; i++) memcpy((char *)o->data + (size_t)i * t->nbytes, t->data, t->nbytes);
    return o;
}

static sd_bt *upload(sd_backend *be, sd_tensor *t) {
    sd_bt *b = t ? sd_bt_from_host(be, t, SD_F32) : NULL;
    sd_tensor_unref(t);
    return b;
}

/* ---- model level: the node's arithmetic, the hint, the ControlNet's outputs ------------ */

static void model_case(sd_backend *be, sd_st_file *g, cJSON *c, cJSON *tensors, cJSON *tol, sd_controlnet *cn,
                       sd_vae *vae) {
    sd_error err;
    sd_tensor *img = case_ref(g, "image"), *mask = case_ref(g, "mask");
    sd_tensor *masked = NULL, *extra = NULL;
    if (img && mask) CHECK_OK(sd_controlnet_inpaint_inputs(img, mask, &masked, &extra, &err), &err);
    sd_tensor *nchw = masked ? sd_imageops_nhwc_to_nchw(masked) : NULL;
    compare(g, tensors, tol, "image", "cond_hint_original", nchw);
    compare(g, tensors, tol, "image", "extra_concat", extra);
    sd_tensor_unref(nchw);

    int64_t lh = (int64_t)num(c, "height") / 8, lw = (int64_t)num(c, "width") / 8;
    sd_control_link l = {.cn = cn, .image = masked, .strength = num(c, "strength"),
                         .start_percent = num(c, "start_percent"), .end_percent = num(c, "end_percent"),
                         .vae = vae, .extra_concat = extra};
    sd_tensor *h = NULL;
    if (masked) CHECK_OK(sd_control_mmdit_hint(&l, NULL, lh, lw, &h, &err), &err);
    compare(g, tensors, tol, "hint", "hint", h);
    sd_tensor_unref(h);

    /* get_control on cond + uncond in one batch at the case's sigma */
    sd_model_sampling ms;
    sd_model_sampling_init_flow(&ms, num(c, "shift"), 1000.0);
    float sigma = (float)num(c, "sigma");
    float ts[2] = {sd_ms_timestep(&ms, sigma), sd_ms_timestep(&ms, sigma)};
    sd_tensor *pc = ref(g, "positive.cond"), *pp = ref(g, "positive.pooled");
    sd_bt *x = upload(be, case_ref(g, "x"));
    sd_bt *ctx = pc ? upload(be, repeat_batch(pc, 2)) : NULL, *y = pp ? upload(be, repeat_batch(pp, 2)) : NULL;
    sd_tensor_unref(pc), sd_tensor_unref(pp);
    int n_out = (int)num(c, "control_outputs");
    if (masked && x && ctx && y) {
        sd_control_call call = {.ms = &ms, .sigma = sigma, .x_in = x, .batched = 2, .timesteps = ts,
                                .context = ctx, .y = y};
        sd_control_residuals r;
        sd_status rc = sd_control_chain_run(&l, 1, &call, &r, &err);
        CHECK_OK(rc, &err);
        if (!rc) {
            CHECK_MSG(r.active == 1 && r.n_dit == n_out, "%s: %d active, %d outputs (ComfyUI's %d)", case_id,
                      r.active, r.n_dit, n_out);
            for (int j = 0; j < n_out && j < r.n_dit; j++) {
                char what[32];
                snprintf(what, sizeof what, "control.%d", j);
                sd_tensor *got = sd_bt_to_host(r.dit[j]);
                compare(g, tensors, tol, "control", what, got);
                sd_tensor_unref(got);
            }
            sd_control_residuals_free(&r);
        }
    }
    sd_bt_free(x), sd_bt_free(ctx), sd_bt_free(y);
    sd_tensor_unref(masked), sd_tensor_unref(extra), sd_tensor_unref(img), sd_tensor_unref(mask);
}

/* ---- node level ------------------------------------------------------------------- */

typedef struct graph {
    sd_env *env;
    sd_value *unet, *vae, *cn, *pos, *neg;
} graph;

static sd_value *conditioning(sd_st_file *g, const char *which) {
    char k1[64], k2[64];
    snprintf(k1, sizeof k1, "%s.cond", which);
    snprintf(k2, sizeof k2, "%s.pooled", which);
    sd_tensor *c = ref(g, k1), *p = ref(g, k2);
    if (!c || !p) {
        sd_tensor_unref(c), sd_tensor_unref(p);
        return NULL;
    }
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "cond", nt_tensor_value(c));
    sd_value_dict_set(d, "pooled_output", nt_tensor_value(p));
    sd_value *l = sd_value_list();
    sd_value_list_append(l, d);
    return l;
}

static sd_tensor *ksample(graph *G, sd_value *model, cJSON *c, sd_value *pos, sd_value *neg, sd_error *err) {
    sd_node_ctx ctx = {.env = G->env, .node_id = "4", .class_type = "EmptySD3LatentImage"};
    const char *ln[3] = {"width", "height", "batch_size"};
    sd_value *lv[3] = {sd_value_int((int64_t)num(c, "width")), sd_value_int((int64_t)num(c, "height")),
                       sd_value_int(1)};
    int own3[3] = {1, 1, 1};
    sd_value *latent = nt_run1_named(&ctx, ln, lv, 3, own3, err);
    if (!latent) return NULL;
    ctx.node_id = "5", ctx.class_type = "KSampler";
    const char *kn[10] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                          "positive", "negative", "latent_image", "denoise"};
    sd_value *kv[10] = {model, sd_value_int((int64_t)num(c, "seed")), sd_value_int((int64_t)num(c, "steps")),
                        sd_value_float(num(c, "cfg")), sd_value_string(str(c, "sampler")),
                        sd_value_string(str(c, "scheduler")), pos, neg, latent, sd_value_float(1.0)};
    sd_value *out[1] = {NULL};
    sd_status rc = nt_run_named(&ctx, kn, kv, 10, out, err);
    for (int i = 1; i < 10; i++)
        if (i != 6 && i != 7) sd_value_unref(kv[i]);
    if (rc) return NULL;
    sd_tensor *s = sd_value_dict_tensor(out[0], "samples");
    s = s ? sd_tensor_ref(s) : NULL;
    sd_value_unref(out[0]);
    return s;
}

/* ControlNetInpaintingAliMamaApply: the new positive and negative in pn[]. */
static sd_status alimama(graph *G, sd_value *cn, sd_value *vae, sd_value *image, sd_value *mask, double strength,
                         double start, double end, sd_value **pn, sd_error *err) {
    sd_node_ctx ctx = {.env = G->env, .node_id = "6", .class_type = "ControlNetInpaintingAliMamaApply"};
    const char *an[9] = {"positive", "negative", "control_net", "vae", "image", "mask", "strength",
                         "start_percent", "end_percent"};
    sd_value *av[9] = {G->pos, G->neg, cn, vae, image, mask, sd_value_float(strength), sd_value_float(start),
                       sd_value_float(end)};
    pn[0] = pn[1] = NULL;
    sd_status rc = nt_run_named(&ctx, an, av, 9, pn, err);
    for (int i = 6; i < 9; i++) sd_value_unref(av[i]);
    return rc;
}

static sd_value *model_sampling(graph *G, double shift) {
    sd_error err;
    sd_node_ctx ctx = {.env = G->env, .node_id = "2", .class_type = "ModelSamplingSD3"};
    const char *mn[2] = {"model", "shift"};
    sd_value *mv[2] = {G->unet, sd_value_float(shift)};
    int mo[2] = {0, 1};
    return nt_run1_named(&ctx, mn, mv, 2, mo, &err);
}

static void ks_case(graph *G, sd_st_file *g, cJSON *tensors, cJSON *tol, cJSON *c) {
    sd_error err;
    sd_error_clear(&err);
    sd_value *image = nt_tensor_value(case_ref(g, "image")), *mask = nt_tensor_value(case_ref(g, "mask"));
    sd_value *m = model_sampling(G, num(c, "shift"));
    sd_value *pn[2] = {NULL, NULL};
    if (m && image && mask)
        CHECK_OK(alimama(G, G->cn, G->vae, image, mask, num(c, "strength"), num(c, "start_percent"),
                         num(c, "end_percent"), pn, &err),
                 &err);
    printf("case %s: strength %g, %g..%g\n", case_id, num(c, "strength"), num(c, "start_percent"),
           num(c, "end_percent"));
    sd_tensor *got = NULL;
    if (pn[0] && pn[1]) {
        got = ksample(G, m, c, pn[0], pn[1], &err);
        CHECK_MSG(got != NULL, "KSampler: %s (input %s)", err.msg, err.input);
    }
    compare(g, tensors, tol, "ks", "latent_out", got);
    sd_tensor_unref(got);
    got = m ? ksample(G, m, c, G->pos, G->neg, &err) : NULL;
    CHECK_MSG(got != NULL, "KSampler without the ControlNet: %s", err.msg);
    compare(g, tensors, tol, "ks", "latent_nocontrol", got);
    sd_tensor_unref(got);
    nt_free_values(pn, 2);
    sd_value_unref(m), sd_value_unref(image), sd_value_unref(mask);
}

static sd_value *load_controlnet(graph *G, const char *name, sd_error *err) {
    sd_node_ctx ctx = {.env = G->env, .node_id = "3", .class_type = "ControlNetLoader"};
    const char *n[1] = {"control_net_name"};
    sd_value *v[1] = {sd_value_string(name)};
    sd_value *out[1] = {NULL};
    nt_run_named(&ctx, n, v, 1, out, err);
    sd_value_unref(v[0]);
    return out[0];
}

static sd_value *ramp(int64_t b, int64_t h, int64_t w, int64_t c, unsigned seed) {
    sd_tensor *t = c ? sd_tensor_new4(SD_F32, 4, b, h, w, c) : sd_tensor_new4(SD_F32, 3, b, h, w, 0);
    nt_fill(t, seed);
    return nt_tensor_value(t);
}

static void other_inputs(graph *G, const char *dir, const char *models) {
    sd_error err;
    case_id = "refusals";
    sd_value *pn[2] = {NULL, NULL};
    sd_value *image = ramp(2, 32, 40, 3, 1), *mask3 = ramp(3, 32, 40, 0, 2);
    /* the batches do not broadcast: PyTorch's error, at 'mask' */
    sd_status rc = alimama(G, G->cn, G->vae, image, mask3, 1.0, 0.0, 1.0, pn, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && strcmp(err.input, "mask") == 0 && strstr(err.msg, "batch"),
              "mask batch 3 on image batch 2: %d '%s' at '%s'", rc, err.msg, err.input);
    nt_free_values(pn, 2);
    /* no VAE */
    sd_value *none = sd_value_none();
    rc = alimama(G, G->cn, none, image, mask3, 1.0, 0.0, 1.0, pn, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && strcmp(err.input, "vae") == 0, "no VAE: %d '%s' at '%s'", rc, err.msg,
              err.input);
    nt_free_values(pn, 2);
    sd_value_unref(none);

    /* a 16-channel SD3 ControlNet: ControlNetApplyAdvanced with the VAE, the mask unused */
    char path[4400];
    snprintf(path, sizeof path, "%s/../sd3_controlnet/models/tiny-sd3-controlnet-instantx.safetensors", dir);
    CHECK_MSG(nt_file_exists(path), "%s missing", path);
    if (nt_file_exists(path)) {
        link_as(path, models, "controlnet/sd3_cn16.safetensors");
        sd_value *cn16 = load_controlnet(G, "sd3_cn16.safetensors", &err);
        CHECK_MSG(cn16 != NULL, "loading the 16-channel ControlNet: %s", err.msg);
        CHECK(!sd_controlnet_concat_mask(sd_nodes_control_net_of(cn16)) &&
              sd_controlnet_concat_mask(sd_nodes_control_net_of(G->cn)));
        if (cn16) CHECK_OK(alimama(G, cn16, G->vae, image, mask3, 0.5, 0.0, 1.0, pn, &err), &err);
        const sd_value *e = pn[0] ? sd_value_list_get(pn[0], 0) : NULL;
        const sd_value *chain = e ? sd_value_dict_get(e, "control") : NULL;
        const sd_value *lk = chain ? sd_value_list_get(chain, 0) : NULL;
        CHECK_MSG(lk && sd_value_dict_tensor(lk, "image") == sd_value_as_tensor(image) &&
                      !sd_value_dict_get(lk, "extra_concat") && sd_value_dict_get(lk, "vae"),
                  "a 16-channel ControlNet gets the image as given, no mask channel, the VAE");
        nt_free_values(pn, 2);
        sd_value_unref(cn16);
    }
    /* the inpainting one: the masked image and the mask channel in the link */
    sd_value *mask1 = ramp(1, 20, 24, 0, 3);
    CHECK_OK(alimama(G, G->cn, G->vae, image, mask1, 0.5, 0.0, 1.0, pn, &err), &err);
    {
        const sd_value *e = pn[0] ? sd_value_list_get(pn[0], 0) : NULL;
        const sd_value *chain = e ? sd_value_dict_get(e, "control") : NULL;
        const sd_value *lk = chain ? sd_value_list_get(chain, 0) : NULL;
        sd_tensor *li = lk ? sd_value_dict_tensor(lk, "image") : NULL, *lx = lk ? sd_value_dict_tensor(lk, "extra_concat") : NULL;
        CHECK_MSG(li && li != sd_value_as_tensor(image) && li->shape[0] == 2 && lx && lx->ndim == 4 &&
                      lx->shape[0] == 1 && lx->shape[1] == 1 && lx->shape[2] == 20 && lx->shape[3] == 24,
                  "the inpainting ControlNet's link holds the masked image and 1 - mask");
    }
    nt_free_values(pn, 2);
    sd_value_unref(mask1);

    /* a Flux inpainting ControlNet (InstantX layout, 17 x 4 input features) at the loader */
    snprintf(path, sizeof path, "%s/controlnet/flux_inpaint.safetensors", models);
    sd_st_writer *w = sd_st_writer_new();
    static const char *const keys[] = {"controlnet_blocks.0.weight", "controlnet_x_embedder.weight"};
    for (int k = 0; k < 2; k++) {
        sd_tensor *t = sd_tensor_new4(SD_F32, 2, 4, k ? 68 : 4, 0, 0);
        memset(t->data, 0, t->nbytes);
        CHECK_OK(sd_st_writer_add(w, keys[k], t, &err), &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    CHECK_MSG(sd_controlnet_probe_file(path, &err) == SD_ERR_UNSUPPORTED && strstr(err.msg, "Flux inpainting"),
              "a Flux inpainting ControlNet file: %s", err.msg);
    sd_value *fx = load_controlnet(G, "flux_inpaint.safetensors", &err);
    CHECK_MSG(!fx && err.code == SD_ERR_UNSUPPORTED && strcmp(err.input, "control_net_name") == 0 &&
                  strstr(err.msg, "Flux inpainting"),
              "ControlNetLoader on a Flux inpainting ControlNet: %d '%s' at '%s'", err.code, err.msg, err.input);
    sd_value_unref(fx);
    sd_value_unref(image), sd_value_unref(mask3);
}

int main(void) {
    char path[4400], mmdit_path[4400], ckpt_path[4400], cn_path[4400];
    const char *dir = sd_golden_topic_dir("sd3_controlnet_inpaint");
    cJSON *m = sd_golden_manifest(dir);
    const char *sd3dir = sd_golden_family_dir("sd3");
    cJSON *sd3 = sd_golden_manifest(sd3dir);
    sd_backend *be = sd_golden_sampling_backend();
    if (!be) return sd_test_finish();

    cJSON *models_m = cJSON_GetObjectItemCaseSensitive(sd3, "models");
    cJSON *mm = cJSON_GetObjectItemCaseSensitive(models_m, "mmdit");
    cJSON *ck = cJSON_GetObjectItemCaseSensitive(models_m, "sd35_ckpt");
    cJSON *mc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), "controlnet");
    const char *mfile = str(mm, "file"), *mname = str(mm, "comfy_name");
    const char *cfile = str(ck, "file"), *cname = str(ck, "comfy_name");
    const char *nfile = str(mc, "file"), *nname = str(mc, "comfy_name");
    snprintf(mmdit_path, sizeof mmdit_path, "%s/%s", sd3dir, mfile);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/%s", sd3dir, cfile);
    snprintf(cn_path, sizeof cn_path, "%s/%s", dir, nfile);
    CHECK_MSG(strchr(mname, '/') && strchr(cname, '/') && strchr(nname, '/'), "manifests lack comfy names");
    CHECK_MSG(nt_file_exists(mmdit_path) && nt_file_exists(ckpt_path) && nt_file_exists(cn_path),
              "model files missing (%s, %s, %s)", mmdit_path, ckpt_path, cn_path);

    snprintf(path, sizeof path, "%s/golden/sd3_controlnet_inpaint.safetensors", dir);
    sd_st_file *g = NULL;
    sd_error err;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    cJSON *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    cJSON *tensors = cJSON_CreateObject();
    cJSON *cases = cJSON_GetObjectItemCaseSensitive(m, "cases"), *c;
    CHECK_MSG(cJSON_GetArraySize(cases) > 0, "manifest lists no case");

    /* model level */
    {
        sd_st_file *f = NULL, *cf = NULL;
        sd_controlnet *cn = NULL;
        sd_vae *vae = NULL;
        CHECK_OK(sd_st_open(cn_path, &f, &err), &err);
        if (f) CHECK_OK(sd_controlnet_load(be, f, SD_F32, &cn, &err), &err);
        sd_st_close(f);
        CHECK_OK(sd_st_open(ckpt_path, &cf, &err), &err);
        if (cf) CHECK_OK(sd_vae_load(be, cf, "first_stage_model.", &vae, &err), &err);
        sd_st_close(cf);
        if (cn)
            CHECK_MSG(sd_controlnet_concat_mask(cn) &&
                          sd_controlnet_hint_channels(cn) == 3,
                      "the 17-channel ControlNet takes a mask channel");
        cJSON_ArrayForEach(c, cases) {
            case_id = str(c, "id");
            if (g && tol && cn && vae) model_case(be, g, c, tensors, tol, cn, vae);
        }
        sd_vae_free(vae);
        sd_controlnet_free(cn);
    }

    /* the nodes */
    sd_env env;
    char models[4200];
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("sd3_controlnet_inpaint"));
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    link_as(mmdit_path, models, mname);
    link_as(ckpt_path, models, cname);
    link_as(cn_path, models, nname);
    graph G = {.env = &env};
    {
        sd_node_ctx ctx = {.env = &env, .node_id = "1", .class_type = "UNETLoader"};
        const char *un[2] = {"unet_name", "weight_dtype"};
        sd_value *uv[2] = {sd_value_string(strchr(mname, '/') + 1), sd_value_string("default")};
        int uo[2] = {1, 1};
        G.unet = nt_run1_named(&ctx, un, uv, 2, uo, &err);
        ctx.node_id = "9", ctx.class_type = "CheckpointLoaderSimple";
        const char *cn_[1] = {"ckpt_name"};
        sd_value *cv[1] = {sd_value_string(strchr(cname, '/') + 1)};
        sd_value *outs[3] = {NULL, NULL, NULL};
        CHECK_OK(nt_run_named(&ctx, cn_, cv, 1, outs, &err), &err);
        sd_value_unref(cv[0]);
        G.vae = outs[2];
        outs[2] = NULL;
        nt_free_values(outs, 3);
        G.cn = load_controlnet(&G, strchr(nname, '/') + 1, &err);
        CHECK_MSG(G.cn != NULL, "ControlNetLoader: %s", err.msg);
    }
    G.pos = g ? conditioning(g, "positive") : NULL;
    G.neg = g ? conditioning(g, "negative") : NULL;
    if (G.unet && G.vae && G.cn && G.pos && G.neg) {
        cJSON_ArrayForEach(c, cases) {
            case_id = str(c, "id");
            ks_case(&G, g, tensors, tol, c);
        }
        other_inputs(&G, dir, models);
    }
    cJSON_Delete(tensors);
    sd_value_unref(G.pos), sd_value_unref(G.neg), sd_value_unref(G.unet), sd_value_unref(G.vae),
        sd_value_unref(G.cn);
    if (g) sd_st_close(g);
    sd_model_store_free(store);
    sd_backend_free(be);
    env.backend = NULL;
    env.models = NULL;
    sd_env_cleanup(&env);
    sd_registry_reset();
    cJSON_Delete(sd3);
    cJSON_Delete(m);
    return sd_test_finish();
}
