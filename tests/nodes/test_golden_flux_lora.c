/* LoRA on Flux (models/lora/lora.h sd_lora_plan_new_flux / sd_lora_flux_view)
 * through the nodes a workflow uses, against ComfyUI's LoraLoaderModelOnly
 * (tests/data/flux_lora, gen/make_flux_lora.py): for every case of the
 * manifest,
 *   - UNETLoader on the Flux set's model (by the case's model key, placed
 *     under its comfy_name), then LoraLoaderModelOnly once per LoRA of the
 *     case, in order, with its strength;
 *   - the MODEL's DiT (sd_nodes_model_dmodel) has exactly the manifest's
 *     patched parameters changed (the others still the base model's
 *     tensors) and every recorded weight.<key> within its tolerance;
 *   - one forward on the recorded inputs: the base model gives base_out, the
 *     patched one out, and out differs from base_out beyond the tolerance
 *     (so the comparison could fail if no patch were applied); every tensor
 *     of the case is checked.
 * Then, on the first case's LoRA and model: LoraLoader with a Flux CLIP
 * (DualCLIPLoader type flux on the set's text encoders) patches the MODEL as
 * LoraLoaderModelOnly does and passes the CLIP value through, as it does
 * with a text-encoder key ComfyUI leaves unloaded (strength_clip 0 and
 * LoraLoaderModelOnly take it too, the key reported unmatched); an SD1 LoRA
 * matches nothing on Flux and is refused; ModelMergeSimple of two Flux
 * models gives a Flux DiT. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/flux/flux.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "golden_tokdir.h"
#include "testutil.h"

static const char *case_id = "setup";

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

static const char *jstr(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* A node's output `idx` (the others released); values borrowed. */
static sd_value *node(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                      int idx, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    for (int i = 0; i < 4; i++)
        if (i != idx) sd_value_unref(out[i]);
    return rc ? NULL : out[idx];
}

static sd_value *unet_loader(const sd_env *env, const char *name, sd_error *err) {
    const char *names[] = {"unet_name", "weight_dtype"};
    sd_value *v[] = {sd_value_string(name), sd_value_string("default")};
    sd_value *m = node(env, "UNETLoader", names, v, 2, 0, err);
    nt_free_values(v, 2);
    return m;
}

static sd_value *lora_model_only(const sd_env *env, sd_value *model, const char *lora, double s, sd_error *err) {
    const char *names[] = {"model", "lora_name", "strength_model"};
    sd_value *v[] = {model, sd_value_string(lora), sd_value_float(s)};
    sd_value *m = node(env, "LoraLoaderModelOnly", names, v, 3, 0, err);
    sd_value_unref(v[1]), sd_value_unref(v[2]);
    return m;
}

static sd_flux *dit_of(sd_value *model, sd_error *err) {
    sd_model_ref *m = NULL;
    sd_dmodel dm;
    sd_value *in[1] = {model};
    if (sd_nodes_in_model(in, 0, "model", &m, err) || sd_nodes_model_dmodel(m, &dm, err)) return NULL;
    CHECK_MSG(dm.info.kind == SD_DMODEL_FLUX, "%s: the MODEL is no Flux DiT", case_id);
    return dm.info.kind == SD_DMODEL_FLUX ? dm.net : NULL;
}

/* forward of m on the case's recorded inputs (host result, caller owns) */
static sd_tensor *forward(sd_flux *m, sd_st_file *g, cJSON *tensors, int *used) {
    sd_error err;
    sd_error_clear(&err);
    sd_tensor *x = sd_st_tensor_f32(g, "input.x", &err), *ctx = sd_st_tensor_f32(g, "input.context", &err);
    sd_tensor *sig = sd_st_tensor_f32(g, "input.sigma", &err), *y = sd_st_tensor_f32(g, "input.y", &err);
    sd_tensor *gd = cJSON_GetObjectItemCaseSensitive(tensors, "input.guidance")
                        ? sd_st_tensor_f32(g, "input.guidance", &err)
                        : NULL;
    sd_golden_mark(tensors, used, "input.x"), sd_golden_mark(tensors, used, "input.context");
    sd_golden_mark(tensors, used, "input.sigma"), sd_golden_mark(tensors, used, "input.y");
    if (gd) sd_golden_mark(tensors, used, "input.guidance");
    sd_tensor *out = NULL;
    CHECK_MSG(x && ctx && sig && y, "%s: inputs: %s", case_id, err.msg);
    if (x && ctx && sig && y) {
        sd_backend *be = sd_flux_backend(m);
        /* timestep = sigma (the flow schedules' timestep(sigma)) */
        sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32);
        sd_bt *by = sd_bt_from_host(be, y, SD_F32), *bo = NULL;
        CHECK_OK(sd_flux_forward(m, bx, sd_tensor_f32(sig), bc, by, gd ? sd_tensor_f32(gd) : NULL, &bo, &err),
                 &err);
        out = bo ? sd_bt_to_host(bo) : NULL;
        sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(by), sd_bt_free(bo);
    }
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(sig), sd_tensor_unref(y), sd_tensor_unref(gd);
    return out;
}

typedef struct walk {
    sd_flux *base;
    cJSON *patched;
    int n_changed, n_same, bad;
} walk;

static int listed(cJSON *arr, const char *key) {
    cJSON *it;
    cJSON_ArrayForEach(it, arr) if (strcmp(cJSON_GetStringValue(it), key) == 0) return 1;
    return 0;
}

/* A parameter the LoRAs do not touch stays base's tensor (a view of it:
 * same storage); a listed one is a new tensor. */
static void check_param(void *ud, const char *key, sd_bt **slot) {
    walk *w = ud;
    sd_bt **b = sd_flux_param(w->base, key);
    if (!b || !*b || !*slot) {
        w->bad++;
        return;
    }
    sd_tensor *tv = sd_bt_to_host(*slot), *tb = sd_bt_to_host(*b);
    int same = tv && tb && sd_tensor_numel(tv) == sd_tensor_numel(tb) &&
               memcmp(sd_tensor_f32(tv), sd_tensor_f32(tb), (size_t)sd_tensor_numel(tv) * sizeof(float)) == 0;
    int want = listed(w->patched, key);
    CHECK_MSG(same != want, "%s: parameter %s is %s, the manifest says %s", case_id, key,
              same ? "unchanged" : "changed", want ? "patched" : "untouched");
    if (same) w->n_same++;
    else w->n_changed++;
    sd_tensor_unref(tv), sd_tensor_unref(tb);
}

static void run_case(const sd_env *env, const char *dir, cJSON *flux_man, cJSON *c) {
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    char path[4400];
    sd_error err;
    sd_error_clear(&err);
    snprintf(path, sizeof path, "%s/%s", dir, jstr(c, "file"));
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(flux_man, "models"),
                                                    jstr(c, "model"));
    const char *comfy = jstr(model, "comfy_name");
    CHECK_MSG(comfy && g && tensors, "%s: the Flux set has no model %s", case_id, jstr(c, "model"));
    if (!comfy || !g || !tensors) {
        if (g) sd_st_close(g);
        return;
    }
    const char *unet = strchr(comfy, '/') ? strchr(comfy, '/') + 1 : comfy;
    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);
    sd_value *base = unet_loader(env, unet, &err);
    CHECK_MSG(base != NULL, "%s: UNETLoader: %s", case_id, err.msg);
    sd_value *m = base ? sd_value_ref(base) : NULL;
    cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "loras")) {
        char name[300];
        snprintf(name, sizeof name, "%s.safetensors", jstr(l, "lora"));
        double s = cJSON_GetObjectItemCaseSensitive(l, "strength")->valuedouble;
        sd_value *next = m ? lora_model_only(env, m, name, s, &err) : NULL;
        CHECK_MSG(next != NULL, "%s: LoraLoaderModelOnly %s %g: %s", case_id, name, s, err.msg);
        sd_value_unref(m);
        m = next;
    }
    sd_flux *fb = base ? dit_of(base, &err) : NULL, *fp = m ? dit_of(m, &err) : NULL;
    CHECK_MSG(fb && fp, "%s: %s", case_id, err.msg);
    if (fb && fp) {
        CHECK_MSG(fb != fp, "%s: the patched MODEL is the base DiT", case_id);
        walk w = {fb, cJSON_GetObjectItemCaseSensitive(c, "patched_params"), 0, 0, 0};
        sd_flux_param_each(fp, check_param, &w);
        CHECK_MSG(!w.bad && w.n_changed == cJSON_GetArraySize(w.patched),
                  "%s: %d parameters changed, the manifest lists %d", case_id, w.n_changed,
                  cJSON_GetArraySize(w.patched));
        printf("  %d parameters patched, %d untouched\n", w.n_changed, w.n_same);
        cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            if (strncmp(t->string, "weight.", 7) != 0) continue;
            sd_bt **slot = sd_flux_param(fp, t->string + 7);
            sd_tensor *got = slot && *slot ? sd_bt_to_host(*slot) : NULL;
            sd_golden_compare(case_id, tensors, g, t->string, got);
            sd_golden_mark(tensors, used, t->string);
            sd_tensor_unref(got);
        }
        sd_tensor *bo = forward(fb, g, tensors, used), *po = forward(fp, g, tensors, used);
        sd_golden_compare(case_id, tensors, g, "base_out", bo);
        sd_golden_compare(case_id, tensors, g, "out", po);
        sd_golden_mark(tensors, used, "base_out"), sd_golden_mark(tensors, used, "out");
        if (bo && po) {
            /* the LoRAs move the output well past the tolerance */
            cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tensors, "out"),
                                                          "tolerance");
            double atol = cJSON_GetObjectItemCaseSensitive(tol, "atol")->valuedouble, moved = 0;
            for (int64_t i = 0; i < sd_tensor_numel(po); i++)
                moved = fmax(moved, fabs(sd_tensor_f32(po)[i] - sd_tensor_f32(bo)[i]));
            CHECK_MSG(moved > 100 * atol, "%s: the LoRAs moved the output by %g only", case_id, moved);
        }
        sd_tensor_unref(bo), sd_tensor_unref(po);
    }
    int i = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        CHECK_MSG(used[i], "%s: tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
    free(used);
    sd_value_unref(m), sd_value_unref(base);
    sd_st_close(g);
}

/* ---- LoraLoader, refusals ----------------------------------------------------- */

/* lora with one more tensor: a CLIP-L key of Kohya's text-encoder spelling */
static void write_with_te_key(const char *src, const char *dst) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    if (!f) return;
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; i < sd_st_count(f); i++) {
        sd_tensor *t = sd_st_tensor(f, sd_st_at(f, i)->name, &err);
        sd_st_writer_add(w, sd_st_at(f, i)->name, t, &err);
        sd_tensor_unref(t);
    }
    sd_tensor *te = sd_tensor_new4(SD_F32, 2, 4, 8, 0, 0);
    memset(te->data, 0, 32 * sizeof(float));
    CHECK_OK(sd_st_writer_add(w, "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", te, &err),
             &err);
    sd_tensor_unref(te);
    CHECK_OK(sd_st_writer_save(w, dst, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(f);
}

static void run_loaders(const sd_env *env, const char *models, cJSON *c) {
    case_id = "loaders";
    printf("case loaders\n");
    sd_error err;
    cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "loras"), 0);
    char lora[300];
    snprintf(lora, sizeof lora, "%s.safetensors", jstr(first, "lora"));
    sd_value *base = unet_loader(env, "flux1-dev.safetensors", &err);
    const char *cn[] = {"clip_name1", "clip_name2", "type"};
    sd_value *cv[] = {sd_value_string("t5xxl_fp16.safetensors"), sd_value_string("clip_l.safetensors"),
                      sd_value_string("flux")};
    sd_value *clip = node(env, "DualCLIPLoader", cn, cv, 3, 0, &err);
    CHECK_MSG(base && clip, "loaders: %s", err.msg);
    nt_free_values(cv, 3);
    if (!base || !clip) goto done;
    /* LoraLoader: the MODEL as LoraLoaderModelOnly makes it, the CLIP as it came */
    const char *ln[] = {"model", "clip", "lora_name", "strength_model", "strength_clip"};
    sd_value *lv[] = {base, clip, sd_value_string(lora), sd_value_float(0.8), sd_value_float(1.0)};
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = "LoraLoader"};
    sd_value *out[4] = {NULL};
    sd_error_clear(&err);
    CHECK_OK(nt_run_named(&ctx, ln, lv, 5, out, &err), &err);
    CHECK_MSG(out[1] == clip, "LoraLoader on Flux: the CLIP is not passed through");
    sd_value *only = lora_model_only(env, base, lora, 0.8, &err);
    sd_flux *a = out[0] ? dit_of(out[0], &err) : NULL, *b = only ? dit_of(only, &err) : NULL;
    CHECK_MSG(a && b, "loaders: %s", err.msg);
    if (a && b) {
        sd_bt **pa = sd_flux_param(a, "img_in.weight"), **pb = sd_flux_param(b, "img_in.weight");
        sd_tensor *ta = sd_bt_to_host(*pa), *tb = sd_bt_to_host(*pb);
        CHECK_MSG(memcmp(ta->data, tb->data, (size_t)sd_tensor_numel(ta) * sizeof(float)) == 0,
                  "LoraLoader and LoraLoaderModelOnly patch img_in differently");
        sd_tensor_unref(ta), sd_tensor_unref(tb);
    }
    for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
    sd_value_unref(only);
    sd_value_unref(lv[2]);

    /* a LoRA with a text-encoder key */
    char src[4400], dst[4400];
    snprintf(src, sizeof src, "%s/loras/%s", models, lora);
    snprintf(dst, sizeof dst, "%s/loras/with_te.safetensors", models);
    write_with_te_key(src, dst);
    lv[2] = sd_value_string("with_te.safetensors");
    memset(out, 0, sizeof out);
    sd_error_clear(&err);
    /* (an up without its down: ComfyUI leaves it unloaded; the CLIP comes
     * out as it went in; LoRAs of the Flux text encoders: nodes.golden_te_lora) */
    sd_status rc = nt_run_named(&ctx, ln, lv, 5, out, &err);
    CHECK_MSG(rc == SD_OK && out[0] && out[1] == clip,
              "LoraLoader with an unloaded text-encoder key on a Flux CLIP: rc %d: %s", rc, err.msg);
    for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
    sd_value_unref(lv[4]);
    lv[4] = sd_value_float(0.0);
    memset(out, 0, sizeof out);
    sd_error_clear(&err);
    CHECK_OK(nt_run_named(&ctx, ln, lv, 5, out, &err), &err);
    for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
    sd_value *te_only = lora_model_only(env, base, "with_te.safetensors", 1.0, &err);
    CHECK_MSG(te_only && dit_of(te_only, &err), "LoraLoaderModelOnly with a text-encoder key: %s", err.msg);
    sd_value_unref(te_only);
    sd_value_unref(lv[2]), sd_value_unref(lv[3]), sd_value_unref(lv[4]);

    /* an SD1 LoRA matches nothing on Flux */
    char sd1[4400];
    snprintf(sd1, sizeof sd1, "%s/models/tiny-lora-sd1.safetensors", sd_golden_dir());
    if (access(sd1, R_OK) == 0) {
        link_as(sd1, models, "loras/tiny-lora-sd1.safetensors");
        sd_value *x = lora_model_only(env, base, "tiny-lora-sd1.safetensors", 1.0, &err);
        CHECK_MSG(!x && strstr(err.msg, "no key of this LoRA matches"), "an SD1 LoRA on Flux: %s", err.msg);
        printf("  refused: %s\n", err.msg);
        sd_value_unref(x);
    }
    /* a model merge on Flux gives a Flux DiT (its numbers against ComfyUI:
     * nodes.golden_model_merge_blocks) */
    {
        const char *mn[] = {"model1", "model2", "ratio"};
        sd_value *mv[] = {base, base, sd_value_float(0.5)};
        sd_value *merged = node(env, "ModelMergeSimple", mn, mv, 3, 0, &err);
        sd_value_unref(mv[2]);
        sd_flux *f = merged ? dit_of(merged, &err) : NULL;
        CHECK_MSG(f != NULL, "a merge of Flux models: %s", err.msg);
        sd_value_unref(merged);
    }
done:
    sd_value_unref(base);
    sd_value_unref(clip);
}

int main(void) {
    char path[4400];
    const char *dir = sd_golden_topic_dir("flux_lora");
    cJSON *man = sd_golden_manifest(dir);
    const char *fdir0 = sd_golden_family_dir("flux");
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s", fdir0);
    cJSON *fman = sd_golden_manifest(fdir); /* skips without the Flux set */
    sd_golden_require_cases(man, dir, "flux_lora");
    const char *tmp = sd_test_tmpdir("golden_flux_lora");
    char models[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    const cJSON *mm;
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(fman, "models")) {
        const char *file = jstr(mm, "file"), *comfy = jstr(mm, "comfy_name");
        if (!file || !comfy) continue;
        snprintf(path, sizeof path, "%s/%s", fdir, file);
        link_as(path, models, comfy);
    }
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(man, "loras")) {
        snprintf(path, sizeof path, "%s/%s", dir, jstr(mm, "file"));
        link_as(path, models, jstr(mm, "comfy_name"));
    }
    sd_env env;
    sd_backend *be = sd_golden_backend();
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    /* the text encoders a LoRA with text-encoder names loads need their vocabularies */
    char tokdir[2600];
    snprintf(tokdir, sizeof tokdir, "%s/tok", models);
    gt_tokenizer_dir(tokdir);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!sd_golden_case_is(c, "flux_lora")) continue;
        case_id = jstr(c, "id");
        printf("case %s\n", case_id);
        run_case(&env, dir, fman, c);
        n++;
    }
    CHECK_MSG(n > 0, "no flux_lora case in %s", dir);
    c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(man, "cases"), 0);
    if (c) run_loaders(&env, models, c);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(fman);
    cJSON_Delete(man);
    return sd_test_finish();
}
