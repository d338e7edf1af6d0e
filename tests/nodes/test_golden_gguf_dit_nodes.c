/* UnetLoaderGGUF on GGUF files made here from the SD3 and Z-Image sets'
 * tiny diffusion models, laid out as city96's ComfyUI-GGUF tools make them,
 * then through the loaded MODEL's network and model sampling against the
 * sets' ComfyUI goldens (every "dit" case: each group's out and denoised):
 *   - convert.py's file: general.architecture "sd3" (the MMDiT) or
 *     "lumina2" (Z-Image's NextDiT, the arch ComfyUI-GGUF gives every
 *     Lumina 2 style model), the keys as in the safetensors file; BF16
 *     source tensors stay BF16, F16 ones F16, and F32/BF16 tensors that are
 *     1-D or of at most 1024 elements become F32. The SD3 file is F16, the
 *     Z-Image one BF16: the widening is exact, so the GGUF MODEL must give
 *     the goldens of the safetensors one (ComfyUI-GGUF computes with the
 *     widened weights: F16 as torch does, BF16 through dequant.py, exact);
 *   - the same file without general.architecture (stable-diffusion.cpp's,
 *     ComfyUI-GGUF's compat mode: the architecture from the keys) probes as
 *     the same family;
 *   - Q8_0 as llama-quantize with ComfyUI-GGUF's lcpp.patch makes it: only
 *     2-D "*weight" tensors, never the family's input/output layers (SD3:
 *     final_layer., time_text_embed., context_embedder., t_embedder.,
 *     y_embedder., x_embedder., proj_out.weight, pos_embed; lumina2:
 *     t_embedder., x_embedder., final_layer., cap_embedder.,
 *     context_refiner., noise_refiner.), the blocks quantized by sdflow's
 *     quantizer. The loaded model keeps them as Q8_0 with the default
 *     (float16) rounding, and its outputs equal, at the case's tolerance,
 *     those of UNETLoader on a safetensors file holding every tensor
 *     widened as ComfyUI-GGUF widens it (core/quant.c, bit-exact to its
 *     dequant.py by formats.golden_gguf_dequant): its Linear layers compute
 *     with exactly those weights. UnetLoaderGGUFAdvanced with dequant_dtype
 *     float32: the weights kept with float32 rounding, and the outputs of
 *     the file widened in float32.
 * Needs the sd3 and zimage sets (their manifests name the files). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "core/quant.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/model_sampling.h"
#include "models/sd3/sd3.h"
#include "models/zimage/zimage.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

/* One family: its set, the manifest's model, the GGUF arch and
 * lcpp.patch's names never quantized (substrings; "=" prefix: the whole
 * name). */
typedef struct family {
    const char *set, *model, *arch;
    sd_ckpt_family ckpt;
    sd_dmodel_kind kind;
    const char *const *keep;
} family;

static const char *const sd3_keep[] = {"final_layer.", "time_text_embed.", "context_embedder.", "t_embedder.",
                                       "y_embedder.",  "x_embedder.",      "=proj_out.weight",  "=pos_embed",
                                       NULL};
static const char *const lumina2_keep[] = {"t_embedder.",   "x_embedder.",      "final_layer.",
                                           "cap_embedder.", "context_refiner.", "noise_refiner.",
                                           NULL};

static const family families[] = {
    {"sd3", "mmdit", "sd3", SD_CKPT_SD3, SD_DMODEL_MMDIT, sd3_keep},
    {"zimage", "zimage", "lumina2", SD_CKPT_ZIMAGE, SD_DMODEL_ZIMAGE, lumina2_keep},
};

static const char *case_id;

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void mkdir_p(const char *dir) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
}

static const char *model_field(const cJSON *m, const char *key, const char *field) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), key), field));
}

static const char *base_name(const char *p) {
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : p;
}

/* lcpp.patch: is tensor `name` of `shape` quantized for this family? */
static int quantized_by_lcpp(const family *fam, const char *name, int ndim, const int64_t *shape) {
    size_t l = strlen(name);
    if (l < 6 || strcmp(name + l - 6, "weight") != 0) return 0;
    int nd = ndim; /* ggml_n_dims: leading (PyTorch order) 1s do not count */
    for (int i = 0; nd > 1 && shape[i] == 1; i++) nd--;
    if (nd != 2) return 0;
    for (int i = 0; fam->keep[i]; i++) {
        const char *k = fam->keep[i];
        if (k[0] == '=' ? strcmp(name, k + 1) == 0 : strstr(name, k) != NULL) return 0;
    }
    return 1;
}

/* src as convert.py writes it (arch NULL: no general.architecture), then,
 * when q, llama-quantize to q by lcpp.patch's rules. wide[0] / wide[1]
 * (when q): every tensor as ComfyUI-GGUF computes with it (F32), widened in
 * float16 arithmetic (its default) / in float32 (dequant_dtype float32).
 * Returns how many tensors were quantized. */
static int convert(const family *fam, const char *src, const char *arch, sd_dtype q, const char *gguf_path,
                   const char *const *wide) {
    const char *widened_path = wide ? wide[0] : NULL;
    sd_error err = {0};
    sd_st_file *f = NULL;
    int nq = 0;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    sd_gguf_writer *w = sd_gguf_writer_new();
    sd_st_writer *sw = widened_path ? sd_st_writer_new() : NULL, *sw32 = widened_path ? sd_st_writer_new() : NULL;
    CHECK(w && (!widened_path || (sw && sw32)));
    if (!f || !w) goto out;
    if (arch) CHECK_OK(sd_gguf_writer_kv_str(w, "general.architecture", arch, &err), &err);
    CHECK_OK(sd_gguf_writer_kv_u32(w, "general.quantization_version", 2, &err), &err);
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        sd_tensor *t = sd_st_tensor(f, e->name, &err), *o = NULL;
        CHECK_OK(t ? SD_OK : err.code, &err);
        if (!t) continue;
        int64_t n = sd_tensor_numel(t);
        /* convert.py */
        sd_dtype cur = t->dtype == SD_BF16 ? SD_BF16 : SD_F16;
        if ((t->dtype == SD_F32 || t->dtype == SD_BF16) && (t->ndim == 1 || n <= 1024)) cur = SD_F32;
        /* llama-quantize: Q8_0 has no row rule of its own (the K types fall
         * back to F16); rows that are no whole blocks cannot be Q8_0 */
        int quant = q && quantized_by_lcpp(fam, e->name, t->ndim, t->shape);
        CHECK_MSG(!quant || t->shape[t->ndim - 1] % sd_dtype_block(q) == 0, "%s: %s rows are no whole %s blocks",
                  fam->set, e->name, sd_dtype_name(q));
        if (quant) {
            sd_tensor *x = sd_tensor_to_dtype(t, SD_F32);
            o = sd_tensor_new(q, t->ndim, t->shape);
            if (o && x) CHECK(sd_quant_quantize(q, sd_tensor_f32(x), o->data, n));
            sd_tensor_unref(x);
            nq++;
        } else {
            o = cur == t->dtype ? sd_tensor_ref(t) : sd_tensor_to_dtype(t, cur);
        }
        CHECK(o != NULL);
        if (o) CHECK_OK(sd_gguf_writer_add(w, e->name, o, &err), &err);
        for (int k = 0; o && sw && sw32 && k < 2; k++) {
            sd_tensor *x = sd_tensor_new(SD_F32, o->ndim, o->shape);
            if (x) sd_quant_dequant(o->dtype, k ? SD_DQ_F32 : SD_DQ_F16, o->data, sd_tensor_f32(x), n);
            if (x) CHECK_OK(sd_st_writer_add(k ? sw32 : sw, e->name, x, &err), &err);
            sd_tensor_unref(x);
        }
        sd_tensor_unref(o);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_gguf_writer_save(w, gguf_path, &err), &err);
    if (sw) CHECK_OK(sd_st_writer_save(sw, widened_path, &err), &err);
    if (sw32) CHECK_OK(sd_st_writer_save(sw32, wide[1], &err), &err);
out:
    sd_gguf_writer_free(w);
    sd_st_writer_free(sw);
    sd_st_writer_free(sw32);
    if (f) sd_st_close(f);
    return nq;
}

/* The MODEL of loader node `type` on file `name`: UNETLoader with
 * weight_dtype default, UnetLoaderGGUFAdvanced with dequant_dtype float32
 * (patch_dtype default, patch_on_device false), UnetLoaderGGUF as is. */
static sd_value *load(const sd_env *env, const char *type, const char *name, sd_error *err) {
    static const char *const unet[] = {"unet_name", "weight_dtype"};
    static const char *const adv[] = {"unet_name", "dequant_dtype", "patch_dtype", "patch_on_device"};
    int is_unet = strcmp(type, "UNETLoader") == 0, is_adv = strcmp(type, "UnetLoaderGGUFAdvanced") == 0;
    sd_value *vals[4] = {sd_value_string(name), sd_value_string(is_adv ? "float32" : "default"),
                         sd_value_string("default"), sd_value_bool(0)};
    sd_value *out[1] = {NULL};
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_status rc = nt_run_named(&ctx, is_adv ? adv : unet, vals, is_adv ? 4 : is_unet ? 2 : 1, out, err);
    nt_free_values(vals, 4);
    return rc ? NULL : out[0];
}

/* A loaded MODEL's network and model sampling. */
typedef struct net {
    sd_value *model;
    sd_model_ref *ref;
    sd_dmodel dm;
    sd_model_sampling ms;
} net;

static int open_net(const sd_env *env, const family *fam, const char *type, const char *name, net *n) {
    sd_error err;
    sd_error_clear(&err);
    memset(n, 0, sizeof *n);
    n->model = load(env, type, name, &err);
    CHECK_MSG(n->model != NULL, "%s %s: %s", type, name, err.msg);
    if (!n->model) return 0;
    CHECK_OK(sd_nodes_in_model(&n->model, 0, "model", &n->ref, &err), &err);
    if (!n->ref) return 0;
    CHECK_OK(sd_nodes_model_dmodel(n->ref, &n->dm, &err), &err);
    if (err.code) return 0;
    CHECK_MSG(n->dm.info.kind == fam->kind, "%s: %s loads as %s", fam->set, name, sd_dmodel_kind_name(n->dm.info.kind));
    sd_nodes_model_sampling_of(n->ref->ckpt, &n->ref->patches, &n->ms);
    return n->dm.info.kind == fam->kind;
}

/* out and denoised of group g ("a.") through network n: timesteps from the
 * MODEL's sampling, denoised its calculate_denoised per batch entry. */
static void forward(const net *n, sd_st_file *gf, const char *g, sd_tensor **out, sd_tensor **den) {
    sd_error err;
    sd_error_clear(&err);
    char k[64];
    *out = *den = NULL;
    snprintf(k, sizeof k, "%sx", g);
    sd_tensor *x = sd_st_tensor_f32(gf, k, &err);
    snprintf(k, sizeof k, "%ssigma", g);
    sd_tensor *sig = sd_st_tensor_f32(gf, k, &err);
    snprintf(k, sizeof k, "%scontext", g);
    sd_tensor *ctx = sd_st_tensor_f32(gf, k, &err);
    snprintf(k, sizeof k, "%sy", g);
    sd_tensor *y = sd_st_find(gf, k) ? sd_st_tensor_f32(gf, k, &err) : NULL;
    CHECK_MSG(x && sig && ctx && sd_tensor_numel(sig) == x->shape[0], "%s: group %s inputs", case_id, g);
    if (!x || !sig || !ctx || sd_tensor_numel(sig) != x->shape[0]) goto done;
    int64_t b = x->shape[0];
    float ts[16];
    CHECK(b <= 16);
    for (int64_t i = 0; i < b && i < 16; i++) ts[i] = sd_ms_timestep(&n->ms, sd_tensor_f32(sig)[i]);
    sd_backend *be = n->dm.be;
    sd_dmodel_input in = {.x = sd_bt_from_host(be, x, SD_F32), .timesteps = ts,
                          .context = sd_bt_from_host(be, ctx, SD_F32),
                          .y = y ? sd_bt_from_host(be, y, SD_F32) : NULL};
    sd_bt *o = NULL;
    CHECK_OK(sd_dmodel_forward(&n->dm, &in, &o, &err), &err);
    if (o) *out = sd_bt_to_host(o);
    sd_bt_free(o);
    sd_bt_free(in.x), sd_bt_free(in.context), sd_bt_free(in.y);
    if (*out && sd_tensor_numel(*out) == sd_tensor_numel(x)) {
        *den = sd_tensor_new(SD_F32, x->ndim, x->shape);
        size_t per = (size_t)(sd_tensor_numel(x) / b);
        for (int64_t i = 0; *den && i < b; i++)
            sd_ms_calculate_denoised(&n->ms, sd_tensor_f32(sig)[i], sd_tensor_f32(*out) + i * per,
                                     sd_tensor_f32(x) + i * per, sd_tensor_f32(*den) + i * per, per);
    }
done:
    sd_tensor_unref(x), sd_tensor_unref(sig), sd_tensor_unref(ctx), sd_tensor_unref(y);
}

static void close_net(net *n) { sd_value_unref(n->model); }

/* a and b allclose under the tolerance of golden tensor tol_of. */
static void same(const char *what, const cJSON *tensors, const char *tol_of, const sd_tensor *a, const sd_tensor *b) {
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tensors, tol_of), "tolerance");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(tol, "atol"), *rt = cJSON_GetObjectItemCaseSensitive(tol, "rtol");
    CHECK_MSG(cJSON_IsNumber(at) && cJSON_IsNumber(rt), "%s: no tolerance for %s", what, tol_of);
    CHECK_MSG(a && b && sd_tensor_numel(a) == sd_tensor_numel(b), "%s: missing or differently shaped", what);
    if (!a || !b || !cJSON_IsNumber(at) || !cJSON_IsNumber(rt) || sd_tensor_numel(a) != sd_tensor_numel(b)) return;
    double worst = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) {
        double x = sd_tensor_f32(a)[i], y = sd_tensor_f32(b)[i], d = fabs(x - y);
        if (!(d <= at->valuedouble + rt->valuedouble * fabs(y))) bad++;
        worst = fmax(worst, d);
    }
    printf("%s: max |diff| %.3g (atol %g rtol %g)\n", what, worst, at->valuedouble, rt->valuedouble);
    CHECK_MSG(bad == 0, "%s: %lld values differ beyond the tolerance (max %.3g)", what, (long long)bad, worst);
}

/* The groups of a dit case ("a.", "b.", ...: the prefixes of its "x"s). */
static int groups(const cJSON *tensors, char out[][16], int max) {
    int n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *dot = strchr(t->string, '.');
        if (!dot || strcmp(dot, ".x") != 0 || n == max || dot - t->string > 8) continue;
        snprintf(out[n++], 16, "%.*s", (int)(dot - t->string + 1), t->string);
    }
    return n;
}

/* Every quantized weight of the network is kept as q with rounding dq;
 * returns how many there are. */
typedef struct kept {
    sd_dtype q;
    sd_dequant_math dq;
    int n, wrong;
} kept;

static void count_kept(void *ud, const char *key, sd_bt **slot) {
    kept *k = ud;
    if (!*slot || !sd_dtype_is_quantized((*slot)->dtype)) return;
    k->n++;
    if ((*slot)->dtype != k->q || (*slot)->dequant != k->dq) {
        k->wrong++;
        printf("  %s: %s, rounding %d\n", key, sd_dtype_name((*slot)->dtype), (int)(*slot)->dequant);
    }
}

static int quantized_params(const family *fam, net *n, sd_dtype q, sd_dequant_math dq) {
    kept k = {q, dq, 0, 0};
    if (fam->kind == SD_DMODEL_MMDIT) sd_sd3_param_each(n->dm.net, count_kept, &k);
    else sd_zimage_param_each(n->dm.net, count_kept, &k);
    CHECK_MSG(k.wrong == 0, "%s: %d quantized weights not kept as %s with rounding %d", fam->set, k.wrong,
              sd_dtype_name(q), (int)dq);
    return k.n;
}

static void run_family(const family *fam, const char *tmp, sd_backend *be) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir(fam->set));
    cJSON *m = sd_golden_manifest(dir);
    const cJSON *c = NULL, *it;
    if (sd_golden_require_cases(m, dir, "dit"))
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(m, "cases")) if (!c && sd_golden_case_is(it, "dit")) c = it;
    CHECK_MSG(c != NULL, "the %s set has no dit case", fam->set);
    const char *src_rel = model_field(m, fam->model, "file");
    CHECK_MSG(src_rel != NULL, "the %s manifest has no model %s", fam->set, fam->model);
    if (!c || !src_rel) {
        cJSON_Delete(m);
        return;
    }
    case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
    printf("case %s (%s GGUF)\n", case_id, fam->arch);
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    char path[4200], src[4200], models[2400], dm[2600];
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    snprintf(models, sizeof models, "%s/%s/models", tmp, fam->set);
    snprintf(dm, sizeof dm, "%s/diffusion_models", models);
    mkdir_p(dm);
    snprintf(path, sizeof path, "%s/%s", dir, src_rel);
    abs_path(path, src, sizeof src);
    /* the file names city96's conversions use */
    char stem[256], plain[2800], compat[2800], q8[2800], wide[2800], wide32[2800];
    snprintf(stem, sizeof stem, "%s", base_name(src));
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    sd_st_file *sf = NULL;
    CHECK_OK(sd_st_open(src, &sf, &err), &err);
    int bf16 = 0;
    for (size_t i = 0; sf && i < sd_st_count(sf); i++) bf16 += sd_st_at(sf, i)->dtype == SD_BF16;
    if (sf) sd_st_close(sf);
    snprintf(plain, sizeof plain, "%s/%s-%s.gguf", dm, stem, bf16 ? "BF16" : "F16");
    snprintf(compat, sizeof compat, "%s/%s-%s-compat.gguf", dm, stem, bf16 ? "BF16" : "F16");
    snprintf(q8, sizeof q8, "%s/%s-Q8_0.gguf", dm, stem);
    snprintf(wide, sizeof wide, "%s/%s-Q8_0-widened.safetensors", dm, stem);
    snprintf(wide32, sizeof wide32, "%s/%s-Q8_0-widened-f32.safetensors", dm, stem);
    const char *wides[2] = {wide, wide32};
    convert(fam, src, fam->arch, 0, plain, NULL);
    convert(fam, src, NULL, 0, compat, NULL);
    int nq = convert(fam, src, fam->arch, SD_Q8_0, q8, wides);
    CHECK_MSG(nq > 0, "%s: the Q8_0 file quantizes nothing", fam->set);

    sd_env env;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    env.models = store;

    /* both files probe as the family: by their arch, and by the keys */
    const char *probe[2] = {plain, compat};
    for (int i = 0; i < 2; i++) {
        sd_ckpt_info info;
        CHECK_OK(sd_checkpoint_probe(probe[i], &info, &err), &err);
        CHECK_MSG(info.has_unet && info.family == fam->ckpt, "%s probes as %s", base_name(probe[i]),
                  sd_ckpt_family_name(info.family));
    }

    char gs[8][16];
    int ng = groups(tensors, gs, 8);
    CHECK_MSG(ng > 0, "%s: no input groups", case_id);
    net a, q, w;
    /* 1. the F16 / BF16 GGUF against ComfyUI */
    if (open_net(&env, fam, "UnetLoaderGGUF", base_name(plain), &a)) {
        CHECK_MSG(quantized_params(fam, &a, SD_Q8_0, SD_DQ_F16) == 0, "%s: quantized weights in %s", fam->set, base_name(plain));
        for (int i = 0; i < ng; i++) {
            sd_tensor *out, *den;
            char name[32];
            forward(&a, g, gs[i], &out, &den);
            snprintf(name, sizeof name, "%sout", gs[i]);
            sd_golden_compare(case_id, tensors, g, name, out);
            snprintf(name, sizeof name, "%sdenoised", gs[i]);
            sd_golden_compare(case_id, tensors, g, name, den);
            sd_tensor_unref(out), sd_tensor_unref(den);
        }
    }
    close_net(&a);
    /* 2. Q8_0 against its widened weights: UnetLoaderGGUF (float16
     * arithmetic) and UnetLoaderGGUFAdvanced with dequant_dtype float32 */
    static const char *const loaders[2] = {"UnetLoaderGGUF", "UnetLoaderGGUFAdvanced"};
    for (int l = 0; l < 2; l++) {
        int oq = open_net(&env, fam, loaders[l], base_name(q8), &q);
        int ow = open_net(&env, fam, "UNETLoader", base_name(wides[l]), &w);
        if (oq) {
            int kept_n = quantized_params(fam, &q, SD_Q8_0, l ? SD_DQ_F32 : SD_DQ_F16);
            CHECK_MSG(kept_n == nq, "%s: %d weights kept quantized, the file has %d", fam->set, kept_n, nq);
        }
        for (int i = 0; oq && ow && i < ng; i++) {
            sd_tensor *o1, *d1, *o2, *d2;
            char name[32], what[128];
            forward(&q, g, gs[i], &o1, &d1);
            forward(&w, g, gs[i], &o2, &d2);
            snprintf(name, sizeof name, "%sout", gs[i]);
            snprintf(what, sizeof what, "%s Q8_0 %s %s", fam->set, loaders[l], name);
            same(what, tensors, name, o1, o2);
            snprintf(name, sizeof name, "%sdenoised", gs[i]);
            snprintf(what, sizeof what, "%s Q8_0 %s %s", fam->set, loaders[l], name);
            same(what, tensors, name, d1, d2);
            sd_tensor_unref(o1), sd_tensor_unref(d1), sd_tensor_unref(o2), sd_tensor_unref(d2);
        }
        close_net(&q);
        close_net(&w);
    }
    sd_model_store_free(store);
    sd_env_cleanup(&env);
    if (g) sd_st_close(g);
    cJSON_Delete(m);
}

int main(void) {
    const char *tmp = sd_test_tmpdir("golden_gguf_dit_nodes");
    char t[2048];
    snprintf(t, sizeof t, "%s", tmp);
    sd_error err;
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    CHECK_OK(sd_nodes_register_all(&err), &err);
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) run_family(&families[i], t, be);
    sd_backend_free(be);
    sd_registry_reset();
    return sd_test_finish();
}
