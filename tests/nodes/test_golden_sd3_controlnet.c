/* test_golden_sd3_controlnet.c - the SD3 ControlNet against ComfyUI
 * (tests/data/sd3_controlnet: gen/make_sd3_controlnet.py, its manifest and
 * the tensors ComfyUI's own code wrote), on the SD3 set's tiny MMDiT:
 *   fwd.*  the ControlNet forward (ControlNetLoader's file, loaded by
 *          sd_controlnet_load): every entry of ComfyUI's "output" list, and
 *          the list's length from the manifest;
 *   dit.*  the MMDiT forward with that list as its control, and without;
 *   hint   per KSampler case, the latent hint sd_control_mmdit_hint makes
 *          from the case's IMAGE with the single file's VAE;
 *   ks_*   UNETLoader + ModelSamplingSD3 + ControlNetLoader +
 *          ControlNetApplySD3 (the first case) or ControlNetApplyAdvanced
 *          with its vae input (the others: ComfyUI's ControlNetApplySD3 runs
 *          the same code, nodes.py apply_controlnet with a VAE) + KSampler,
 *          compared with latent_out, and KSampler without the ControlNet
 *          with latent_nocontrol (so a control that is not applied cannot
 *          pass where the two differ).
 * Then the refusals, each naming the node's input: an SD1 ControlNet on
 * the SD3 model, the SD3 ControlNet on an SD1 model, the SD3 ControlNet
 * applied without a VAE, and a Flux InstantX ControlNet file at the
 * loader. Cases, sizes and tolerances come from the manifests. */
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
#include "models/sd3/sd3_controlnet.h"
#include "models/vae/vae.h"
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

static sd_bt *up(sd_backend *be, sd_st_file *g, const char *name) {
    sd_tensor *t = ref(g, name);
    sd_bt *b = t ? sd_bt_from_host(be, t, SD_F32) : NULL;
    sd_tensor_unref(t);
    return b;
}

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

/* The manifest's tolerance groups as golden.h's per-tensor entries. */
static void tol_for(cJSON *tensors, cJSON *tol, const char *group, const char *name) {
    cJSON *t = cJSON_AddObjectToObject(tensors, name);
    cJSON *g = cJSON_GetObjectItemCaseSensitive(tol, group);
    CHECK_MSG(g != NULL, "manifest has no tolerance for %s", group);
    if (g) cJSON_AddItemToObject(t, "tolerance", cJSON_Duplicate(g, 1));
}

/* ---- model level: the ControlNet and the MMDiT ---------------------------------- */

static void model_cases(sd_backend *be, sd_st_file *g, cJSON *m, cJSON *tensors, cJSON *tol,
                        const char *cn_path, const char *mmdit_path) {
    sd_error err;
    sd_st_file *f = NULL, *mf = NULL;
    sd_controlnet *cn = NULL;
    sd_sd3 *dit = NULL;
    CHECK_OK(sd_st_open(cn_path, &f, &err), &err);
    if (f) CHECK_OK(sd_controlnet_load(be, f, SD_F32, &cn, &err), &err);
    sd_st_close(f);
    CHECK_OK(sd_st_open(mmdit_path, &mf, &err), &err);
    if (mf) CHECK_OK(sd_sd3_load(be, mf, "", SD_F32, &dit, &err), &err);
    sd_st_close(mf);
    if (!cn || !dit) goto done;
    CHECK(sd_controlnet_kind_of(cn) == SD_CONTROLNET_MMDIT && sd_controlnet_config(cn) == NULL);
    sd_sd3_cn *s = sd_controlnet_mmdit(cn);
    cJSON *fw = cJSON_GetObjectItemCaseSensitive(m, "forward");
    cJSON *mc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), "controlnet");
    case_id = "fwd";
    int n_out = (int)num(fw, "outputs");
    CHECK_MSG(sd_sd3_cn_n_outputs(s) == n_out && sd_controlnet_n_outputs(cn) == n_out,
              "the ControlNet gives %d outputs, ComfyUI's %d", sd_sd3_cn_n_outputs(s), n_out);
    CHECK_MSG(sd_sd3_cn_n_blocks(s) == (int)num(mc, "num_blocks") && sd_sd3_cn_depth(s) == (int)num(mc, "depth"),
              "blocks %d depth %d", sd_sd3_cn_n_blocks(s), sd_sd3_cn_depth(s));
    CHECK_OK(sd_controlnet_check_fit_mmdit(cn, sd_sd3_get_config(dit), &err), &err);

    sd_bt *x = up(be, g, "fwd.x"), *ctx = up(be, g, "fwd.context"), *y = up(be, g, "fwd.y"),
          *hint = up(be, g, "fwd.hint");
    sd_tensor *ts = ref(g, "fwd.timesteps");
    sd_bt *outs[SD_SD3_MAX_DEPTH] = {0}, *list[SD_SD3_MAX_DEPTH] = {0};
    if (x && ctx && y && hint && ts) {
        CHECK_OK(sd_sd3_cn_forward(s, NULL, x, sd_tensor_f32(ts), hint, ctx, NULL, outs, &err), &err);
        for (int j = 0; j < n_out && outs[0]; j++) {
            char name[64];
            snprintf(name, sizeof name, "fwd.output.%d", j);
            tol_for(tensors, tol, "fwd", name);
            list[j] = outs[sd_sd3_cn_output_block(s, j)];
            sd_tensor *got = sd_bt_to_host(list[j]);
            sd_golden_compare("fwd", tensors, g, name, got);
            sd_tensor_unref(got);
        }
        char extra[64];
        snprintf(extra, sizeof extra, "fwd.output.%d", n_out);
        CHECK_MSG(!sd_st_find(g, extra), "the reference has more than %d outputs", n_out);

        case_id = "dit";
        sd_sd3_extra e = {NULL, 0, list, n_out};
        sd_bt *o = NULL;
        tol_for(tensors, tol, "dit", "dit.out");
        tol_for(tensors, tol, "dit", "dit.out_nocontrol");
        if (outs[0]) {
            CHECK_OK(sd_sd3_forward_ex(dit, x, sd_tensor_f32(ts), ctx, y, &e, &o, &err), &err);
            sd_tensor *got = o ? sd_bt_to_host(o) : NULL;
            sd_golden_compare("dit", tensors, g, "dit.out", got);
            sd_tensor_unref(got);
            sd_bt_free(o), o = NULL;
        }
        CHECK_OK(sd_sd3_forward_ex(dit, x, sd_tensor_f32(ts), ctx, y, NULL, &o, &err), &err);
        sd_tensor *got = o ? sd_bt_to_host(o) : NULL;
        sd_golden_compare("dit", tensors, g, "dit.out_nocontrol", got);
        sd_tensor_unref(got);
        sd_bt_free(o);
    }
    for (int i = 0; i < SD_SD3_MAX_DEPTH; i++) sd_bt_free(outs[i]);
    sd_bt_free(x), sd_bt_free(ctx), sd_bt_free(y), sd_bt_free(hint);
    sd_tensor_unref(ts);
done:
    sd_sd3_free(dit);
    sd_controlnet_free(cn);
}

/* The hint of each KSampler case, from its IMAGE and the single file's VAE. */
static void hint_cases(sd_backend *be, sd_st_file *g, cJSON *m, cJSON *tensors, cJSON *tol, const char *cn_path,
                       const char *ckpt_path) {
    sd_error err;
    sd_st_file *f = NULL, *cf = NULL;
    sd_controlnet *cn = NULL;
    sd_vae *vae = NULL;
    CHECK_OK(sd_st_open(cn_path, &f, &err), &err);
    if (f) CHECK_OK(sd_controlnet_load(be, f, SD_F32, &cn, &err), &err);
    sd_st_close(f);
    CHECK_OK(sd_st_open(ckpt_path, &cf, &err), &err);
    if (cf) CHECK_OK(sd_vae_load(be, cf, "first_stage_model.", &vae, &err), &err);
    sd_st_close(cf);
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        case_id = str(c, "id");
        char name[96];
        snprintf(name, sizeof name, "%s.image", case_id);
        sd_tensor *img = ref(g, name);
        snprintf(name, sizeof name, "%s.hint", case_id);
        tol_for(tensors, tol, "hint", name);
        if (!cn || !vae || !img) {
            sd_tensor_unref(img);
            continue;
        }
        sd_control_link l = {.cn = cn, .image = img, .strength = 1, .end_percent = 1, .vae = vae};
        sd_tensor *h = NULL;
        CHECK_OK(sd_control_mmdit_hint(&l, NULL, (int64_t)num(c, "height") / 8, (int64_t)num(c, "width") / 8, &h,
                                       &err),
                 &err);
        sd_golden_compare(case_id, tensors, g, name, h);
        sd_tensor_unref(h);
        /* no VAE: ComfyUI's refusal */
        l.vae = NULL;
        sd_status rc = sd_control_mmdit_hint(&l, NULL, 8, 8, &h, &err);
        CHECK_MSG(rc == SD_ERR_INVALID && strstr(err.msg, "needs a VAE"), "no VAE: %d %s", rc, err.msg);
        sd_tensor_unref(img);
    }
    sd_vae_free(vae);
    sd_controlnet_free(cn);
}

/* ---- node level: KSampler with ControlNetApplySD3 / ControlNetApplyAdvanced -------- */

typedef struct graph {
    sd_env *env;
    sd_value *unet, *vae, *cn, *pos, *neg;
} graph;

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

/* ControlNetApplySD3 (sd3 = 1) or ControlNetApplyAdvanced (vae may be NULL):
 * the new positive and negative in pn[]. */
static sd_status apply(graph *G, int sd3, sd_value *cn, sd_value *vae, sd_value *image, cJSON *c, sd_value **pn,
                       sd_error *err) {
    sd_node_ctx ctx = {.env = G->env, .node_id = "6",
                       .class_type = sd3 ? "ControlNetApplySD3" : "ControlNetApplyAdvanced"};
    const char *an[8] = {"positive", "negative", "control_net", "image", "strength", "start_percent",
                         "end_percent", "vae"};
    sd_value *av[8] = {G->pos, G->neg, cn, image, sd_value_float(num(c, "strength")),
                       sd_value_float(num(c, "start_percent")), sd_value_float(num(c, "end_percent")), vae};
    pn[0] = pn[1] = NULL;
    sd_status rc = nt_run_named(&ctx, an, av, vae ? 8 : 7, pn, err);
    for (int i = 4; i < 7; i++) sd_value_unref(av[i]);
    return rc;
}

static sd_value *model_sampling(graph *G, cJSON *c, sd_value *model) {
    sd_error err;
    sd_node_ctx ctx = {.env = G->env, .node_id = "2", .class_type = "ModelSamplingSD3"};
    const char *mn[2] = {"model", "shift"};
    sd_value *mv[2] = {model, sd_value_float(num(c, "shift"))};
    int mo[2] = {0, 1};
    return nt_run1_named(&ctx, mn, mv, 2, mo, &err);
}

static void ks_case(graph *G, sd_st_file *g, cJSON *tensors, cJSON *tol, cJSON *c, int sd3) {
    sd_error err;
    sd_error_clear(&err);
    char name[96];
    snprintf(name, sizeof name, "%s.image", case_id);
    sd_value *image = nt_tensor_value(ref(g, name));
    sd_value *m = model_sampling(G, c, G->unet);
    sd_value *pn[2] = {NULL, NULL};
    if (m && image) CHECK_OK(apply(G, sd3, G->cn, G->vae, image, c, pn, &err), &err);
    printf("case %s: %s, strength %g, %g..%g\n", case_id, sd3 ? "ControlNetApplySD3" : "ControlNetApplyAdvanced",
           num(c, "strength"), num(c, "start_percent"), num(c, "end_percent"));
    snprintf(name, sizeof name, "%s.latent_out", case_id);
    tol_for(tensors, tol, "ks", name);
    if (pn[0] && pn[1]) {
        sd_tensor *got = ksample(G, m, c, pn[0], pn[1], &err);
        CHECK_MSG(got != NULL, "KSampler: %s (input %s)", err.msg, err.input);
        sd_golden_compare(case_id, tensors, g, name, got);
        sd_tensor_unref(got);
    }
    snprintf(name, sizeof name, "%s.latent_nocontrol", case_id);
    tol_for(tensors, tol, "ks", name);
    if (m) {
        sd_tensor *plain = ksample(G, m, c, G->pos, G->neg, &err);
        CHECK_MSG(plain != NULL, "KSampler: %s", err.msg);
        sd_golden_compare(case_id, tensors, g, name, plain);
        sd_tensor_unref(plain);
    }
    nt_free_values(pn, 2);
    sd_value_unref(m);
    sd_value_unref(image);
}

/* A KSampler that must refuse before sampling, naming `input`. */
static void expect_refusal(graph *G, sd_value *model, cJSON *c, sd_value *pos, sd_value *neg, const char *input,
                           const char *what) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = ksample(G, model, c, pos, neg, &err);
    CHECK_MSG(t == NULL && err.code == SD_ERR_INVALID && strcmp(err.input, input) == 0 && strstr(err.msg, what),
              "expected a refusal at input '%s' saying '%s', got %d '%s' at '%s'", input, what, err.code,
              err.msg, err.input);
    sd_tensor_unref(t);
}

static sd_value *load_controlnet(graph *G, const char *name) {
    sd_error err;
    sd_node_ctx ctx = {.env = G->env, .node_id = "3", .class_type = "ControlNetLoader"};
    const char *cn_n[1] = {"control_net_name"};
    sd_value *cv[1] = {sd_value_string(name)};
    int co[1] = {1};
    return nt_run1_named(&ctx, cn_n, cv, 1, co, &err);
}

static void refusals(graph *G, cJSON *c, const char *models) {
    sd_error err;
    case_id = "refusals";
    sd_value *image = NULL;
    {
        sd_tensor *t = sd_tensor_new4(SD_F32, 4, 1, 64, 64, 3);
        nt_fill(t, 3);
        image = nt_tensor_value(t);
    }
    sd_value *m = model_sampling(G, c, G->unet);
    sd_value *pn[2] = {NULL, NULL};
    /* the SD3 ControlNet without a VAE (ControlNetApplyAdvanced's is optional) */
    CHECK_OK(apply(G, 0, G->cn, NULL, image, c, pn, &err), &err);
    if (m && pn[0]) expect_refusal(G, m, c, pn[0], pn[1], "positive", "needs a VAE");
    nt_free_values(pn, 2);
    /* ControlNetApplySD3 requires its VAE */
    sd_status rc = apply(G, 1, G->cn, NULL, image, c, pn, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && strcmp(err.input, "vae") == 0, "ControlNetApplySD3 without vae: %d %s", rc,
              err.input);
    nt_free_values(pn, 2);

    /* an SD1 ControlNet on the SD3 model */
    char path[4200];
    snprintf(path, sizeof path, "%s/models/tiny-controlnet-sd1.safetensors", sd_golden_dir());
    if (nt_file_exists(path)) {
        link_as(path, models, "controlnet/sd1_cn.safetensors");
        sd_value *sd1cn = load_controlnet(G, "sd1_cn.safetensors");
        if (sd1cn && apply(G, 1, sd1cn, G->vae, image, c, pn, &err) == SD_OK && m)
            expect_refusal(G, m, c, pn[0], pn[1], "positive", "SD1/SD2/SDXL ControlNet does not fit an SD3 model");
        CHECK(sd1cn != NULL);
        nt_free_values(pn, 2);
        sd_value_unref(sd1cn);
    } else {
        CHECK_MSG(0, "%s missing", path);
    }
    /* the SD3 ControlNet on an SD1 model */
    snprintf(path, sizeof path, "%s/models/tiny-sd1.safetensors", sd_golden_dir());
    if (nt_file_exists(path)) {
        link_as(path, models, "checkpoints/tiny-sd1.safetensors");
        sd_node_ctx ctx = {.env = G->env, .node_id = "8", .class_type = "CheckpointLoaderSimple"};
        const char *n1[1] = {"ckpt_name"};
        sd_value *v1[1] = {sd_value_string("tiny-sd1.safetensors")};
        int o1[1] = {1};
        sd_value *sd1 = nt_run1_named(&ctx, n1, v1, 1, o1, &err);
        if (sd1 && apply(G, 1, G->cn, G->vae, image, c, pn, &err) == SD_OK)
            expect_refusal(G, sd1, c, pn[0], pn[1], "positive", "SD3 ControlNet does not fit an SD UNet model");
        nt_free_values(pn, 2);
        sd_value_unref(sd1);
    } else {
        CHECK_MSG(0, "%s missing", path);
    }
    /* another DiT's ControlNet (Flux InstantX) at the loader: refused by
     * name (Stability's SD3.5 ones load: test_golden_sd35_controlnet.c) */
    snprintf(path, sizeof path, "%s/controlnet/flux_instantx.safetensors", models);
    sd_st_writer *w = sd_st_writer_new();
    static const char *const keys[] = {"controlnet_blocks.0.weight", "controlnet_x_embedder.weight"};
    for (int k = 0; k < 2; k++) {
        sd_tensor *t = sd_tensor_new4(SD_F32, 1, 4, 0, 0, 0);
        CHECK_OK(sd_st_writer_add(w, keys[k], t, &err), &err);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    CHECK_MSG(sd_controlnet_probe_file(path, &err) == SD_ERR_UNSUPPORTED && strstr(err.msg, "Flux InstantX"),
              "a Flux InstantX ControlNet file: %s", err.msg);
    sd_value_unref(m);
    sd_value_unref(image);
}

int main(void) {
    char path[4400], mmdit_path[4400], ckpt_path[4400], cn_path[4400];
    const char *dir = sd_golden_topic_dir("sd3_controlnet");
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

    snprintf(path, sizeof path, "%s/golden/sd3_controlnet.safetensors", dir);
    sd_st_file *g = NULL;
    sd_error err;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    cJSON *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    cJSON *tensors = cJSON_CreateObject();
    if (g && tol) {
        model_cases(be, g, m, tensors, tol, cn_path, mmdit_path);
        hint_cases(be, g, m, tensors, tol, cn_path, ckpt_path);
    }

    /* the nodes */
    sd_env env;
    char models[4200];
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("sd3_controlnet"));
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
        G.cn = load_controlnet(&G, strchr(nname, '/') + 1);
    }
    G.pos = g ? conditioning(g, "positive") : NULL;
    G.neg = g ? conditioning(g, "negative") : NULL;
    cJSON *cases = cJSON_GetObjectItemCaseSensitive(m, "cases"), *c;
    CHECK_MSG(cJSON_GetArraySize(cases) > 0, "manifest lists no case");
    if (G.unet && G.vae && G.cn && G.pos && G.neg) {
        int k = 0;
        cJSON_ArrayForEach(c, cases) {
            case_id = str(c, "id");
            ks_case(&G, g, tensors, tol, c, k++ == 0);
        }
        refusals(&G, cJSON_GetArrayItem(cases, 0), models);
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
