/* LoRA on the text encoders of the transformer families (Flux: CLIP-L + T5,
 * Z-Image: Qwen3; the families the manifest's cases name) through the nodes a
 * workflow uses, against ComfyUI's LoraLoader + CLIPTextEncode
 * (tests/data/te_lora, gen/make_te_lora.py): for every case of the manifest,
 *   - the case's CLIP loader (class and inputs from the manifest; the set's
 *     files placed under their comfy_names) and UNETLoader on its model;
 *   - CLIPTextEncode of the case's text on the CLIP as loaded gives base.cond
 *     / base.pooled;
 *   - LoraLoader once per LoRA of the case (strength_model, strength_clip),
 *     then CLIPTextEncode gives cond / pooled; the patched cond differs from
 *     the base one beyond the tolerance (so the comparison could fail if no
 *     patch were applied);
 *   - LoraLoader with strength_clip 0 encodes as the base CLIP.
 * Every tensor of the case is checked. */
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
#include "models/checkpoint/checkpoint.h"
#include "models/text/tokenizer.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "golden_tokdir.h"
#include "testutil.h"

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void link_as(const char *target, const char *dir, const char *rel) {
    char src[4200], dst[4200], cmd[8600];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static const char *jstr(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* A node's outputs into out[0..3] (all owned by the caller); the status. */
static sd_status run(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    for (int i = 0; i < 4; i++) out[i] = NULL;
    sd_error_clear(err);
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static void drop(sd_value **out, int from) {
    for (int i = from; i < 4; i++) sd_value_unref(out[i]), out[i] = NULL;
}

/* CLIPTextEncode -> the conditioning's first entry's tensor and pooled_output
 * (new references; NULL on failure, err set) */
static int encode(const sd_env *env, sd_value *clip, const char *text, sd_tensor **cond, sd_tensor **pooled,
                  sd_error *err) {
    const char *names[] = {"text", "clip"};
    sd_value *vals[] = {sd_value_string(text), clip}, *out[4];
    *cond = *pooled = NULL;
    sd_status rc = run(env, "CLIPTextEncode", names, vals, 2, out, err);
    sd_value_unref(vals[0]);
    if (!rc) {
        sd_value *d = sd_value_list_get(out[0], 0);
        sd_value *e = d ? sd_value_dict_get(d, "cond") : NULL, *p = d ? sd_value_dict_get(d, "pooled_output") : NULL;
        *cond = e ? sd_tensor_ref(sd_value_as_tensor(e)) : NULL;
        *pooled = p ? sd_tensor_ref(sd_value_as_tensor(p)) : NULL;
    }
    drop(out, 0);
    return *cond != NULL;
}

/* The CLIP loader of the case (its class_type and inputs). */
static sd_value *load_clip(const sd_env *env, const cJSON *loader, sd_error *err) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(loader, "inputs"), *it;
    const char *names[8];
    sd_value *vals[8], *out[4];
    int n = 0;
    cJSON_ArrayForEach(it, in) {
        if (n == 8 || !cJSON_IsString(it)) continue;
        names[n] = it->string;
        vals[n++] = sd_value_string(it->valuestring);
    }
    sd_status rc = run(env, jstr(loader, "class_type"), names, vals, n, out, err);
    nt_free_values(vals, n);
    drop(out, 1);
    return rc ? NULL : out[0];
}

static sd_value *unet_loader(const sd_env *env, const char *name, sd_error *err) {
    const char *names[] = {"unet_name", "weight_dtype"};
    sd_value *v[] = {sd_value_string(name), sd_value_string("default")}, *out[4];
    sd_status rc = run(env, "UNETLoader", names, v, 2, out, err);
    nt_free_values(v, 2);
    drop(out, 1);
    return rc ? NULL : out[0];
}

/* LoraLoader (with_clip) or LoraLoaderModelOnly over the case's LoRAs;
 * *model / *clip replaced (references moved). clip_scale multiplies every
 * strength_clip. 0 on failure. */
static int apply_loras(const sd_env *env, const cJSON *c, int with_clip, double clip_scale, sd_value **model,
                       sd_value **clip, sd_error *err) {
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "loras")) {
        char name[300];
        snprintf(name, sizeof name, "%s.safetensors", jstr(l, "lora"));
        double sm = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(l, "strength_model"));
        double sc = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(l, "strength_clip")) * clip_scale;
        sd_value *out[4];
        sd_status rc;
        if (with_clip) {
            const char *names[] = {"model", "clip", "lora_name", "strength_model", "strength_clip"};
            sd_value *v[] = {*model, *clip, sd_value_string(name), sd_value_float(sm), sd_value_float(sc)};
            rc = run(env, "LoraLoader", names, v, 5, out, err);
            nt_free_values(v + 2, 3);
        } else {
            rc = sd_error_set(err, SD_ERR_INVALID, "no CLIP");
        }
        if (rc) {
            drop(out, 0);
            return 0;
        }
        sd_value_unref(*model);
        *model = out[0];
        if (with_clip) {
            sd_value_unref(*clip);
            *clip = out[1];
        }
        drop(out, with_clip ? 2 : 1);
    }
    return 1;
}

/* The slot of a CLIP state-dict key ("clip_l.transformer.<HF key>",
 * "t5xxl.transformer.<HF key>", ...) in te; *row0 / *rows the rows of a
 * fused OpenCLIP projection (0, 0: the whole tensor). */
static sd_bt **te_param(const sd_text_encoder *te, const char *key, int64_t *row0, int64_t *rows) {
    *row0 = *rows = 0;
    static const char *const pre[] = {"clip_l.transformer.", "clip_g.transformer.", "clip_h.transformer.",
                                      "t5xxl.transformer.", "qwen3_4b.transformer."};
    for (int i = 0; i < 5; i++) {
        size_t n = strlen(pre[i]);
        if (strncmp(key, pre[i], n) != 0) continue;
        const char *k = key + n;
        if (i == 0) return sd_text_encoder_clip_l(te) ? sd_clip_param((sd_clip *)sd_text_encoder_clip_l(te), k, row0, rows) : NULL;
        if (i <= 2) return sd_text_encoder_clip_g(te) ? sd_clip_param((sd_clip *)sd_text_encoder_clip_g(te), k, row0, rows) : NULL;
        if (i == 3) return sd_t5_param((sd_t5 *)sd_text_encoder_t5(te), k);
        return sd_qwen3_param((sd_qwen3 *)sd_text_encoder_qwen3(te), k);
    }
    return NULL;
}

/* Every weight.<key> of the case against the patched CLIP's parameter. */
static void check_weights(const char *id, cJSON *tensors, sd_st_file *g, sd_value *clip) {
    sd_clip_ref *ref = sd_value_as_handle(clip, &sd_handle_clip);
    sd_text_encoder *te = NULL;
    sd_error err;
    CHECK_MSG(ref && sd_nodes_clip_encoder(ref, &te, &err) == SD_OK, "%s: the patched encoder: %s", id,
              ref ? err.msg : "not a CLIP");
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        if (strncmp(t->string, "weight.", 7) != 0 || !te) continue;
        int64_t r0, rn;
        sd_bt **slot = te_param(te, t->string + 7, &r0, &rn);
        sd_tensor *w = slot ? sd_bt_to_host(*slot) : NULL;
        if (w && rn > 0) { /* the rows of a fused projection */
            int64_t per = sd_tensor_numel(w) / w->shape[0];
            sd_tensor *r = sd_tensor_new4(SD_F32, w->ndim, rn, w->ndim > 1 ? w->shape[1] : 0, 0, 0);
            if (r) memcpy(r->data, sd_tensor_f32(w) + r0 * per, (size_t)(rn * per) * sizeof(float));
            sd_tensor_unref(w);
            w = r;
        }
        CHECK_MSG(w != NULL, "%s: %s: no such parameter", id, t->string);
        sd_golden_compare(id, tensors, g, t->string, w);
        sd_tensor_unref(w);
    }
}

static void run_case(const sd_env *env, const char *dir, const cJSON *c) {
    const char *id = jstr(c, "id");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive((cJSON *)c, "tensors");
    char path[4400];
    sd_error err;
    snprintf(path, sizeof path, "%s/%s", dir, jstr(c, "file"));
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!g) return;
    sd_value *clip = load_clip(env, cJSON_GetObjectItemCaseSensitive((cJSON *)c, "clip_loader"), &err);
    sd_value *model = clip ? unet_loader(env, jstr(c, "unet_name"), &err) : NULL;
    CHECK_MSG(clip && model, "%s: loaders: %s", id, err.msg);
    const char *text = jstr(c, "text");
    sd_tensor *bc = NULL, *bp = NULL, *pc = NULL, *pp = NULL;
    if (clip && model) {
        CHECK_MSG(encode(env, clip, text, &bc, &bp, &err), "%s: base encode: %s", id, err.msg);
        sd_golden_compare(id, tensors, g, "base.cond", bc);
        if (cJSON_GetObjectItemCaseSensitive(tensors, "base.pooled")) /* Z-Image: no pooled output */
            sd_golden_compare(id, tensors, g, "base.pooled", bp);
        sd_value *m2, *c2;
        /* strength_clip 0: encodes as the base CLIP (the same computation) */
        m2 = sd_value_ref(model), c2 = sd_value_ref(clip);
        sd_tensor *zc = NULL, *zp = NULL;
        CHECK_MSG(apply_loras(env, c, 1, 0.0, &m2, &c2, &err) && encode(env, c2, text, &zc, &zp, &err),
                  "%s: strength_clip 0: %s", id, err.msg);
        CHECK_MSG(zc && bc && sd_tensor_numel(zc) == sd_tensor_numel(bc) &&
                      memcmp(zc->data, bc->data, (size_t)sd_tensor_numel(bc) * sizeof(float)) == 0,
                  "%s: LoraLoader with strength_clip 0 changed the conditioning", id);
        sd_tensor_unref(zc), sd_tensor_unref(zp);
        sd_value_unref(m2), sd_value_unref(c2);
        /* the case */
        CHECK_MSG(apply_loras(env, c, 1, 1.0, &model, &clip, &err), "%s: LoraLoader: %s", id, err.msg);
        CHECK_MSG(encode(env, clip, text, &pc, &pp, &err), "%s: encode: %s", id, err.msg);
        sd_golden_compare(id, tensors, g, "cond", pc);
        if (cJSON_GetObjectItemCaseSensitive(tensors, "pooled")) /* Z-Image: no pooled output */
            sd_golden_compare(id, tensors, g, "pooled", pp);
        check_weights(id, tensors, g, clip);
        /* the LoRAs must move the result past the tolerance */
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tensors, "cond"),
                                                            "tolerance");
        double atol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tol, "atol"));
        double rtol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tol, "rtol"));
        double max_abs = 0;
        long worst = 0;
        CHECK_MSG(pc && bc && !sd_test_allclose(pc, bc, atol, rtol, &max_abs, &worst),
                  "%s: the LoRAs did not change the conditioning", id);
    }
    sd_tensor_unref(bc), sd_tensor_unref(bp), sd_tensor_unref(pc), sd_tensor_unref(pp);
    sd_value_unref(clip);
    sd_value_unref(model);
    sd_st_close(g);
}

int main(void) {
    char path[4400];
    const char *dir = sd_golden_topic_dir("te_lora");
    cJSON *man = sd_golden_manifest(dir);
    sd_golden_clip_vocab(man);
    sd_golden_require_cases(man, dir, "te_lora");
    const char *tmp = sd_test_tmpdir("golden_te_lora");
    char models[2400], tokdir[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(tokdir, sizeof tokdir, "%s/tok", tmp);
    gt_tokenizer_dir(tokdir);
    /* every family set a case names: its models under their comfy_names, its
     * tokenizer files */
    cJSON *fams[4] = {NULL};
    int nf = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!sd_golden_case_is(c, "te_lora")) continue;
        const char *family = jstr(c, "family");
        int seen = 0;
        for (int i = 0; i < nf; i++) seen |= strcmp(jstr(fams[i], "family"), family) == 0;
        if (seen || nf == 4) continue;
        char fdir[4096];
        snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir(family));
        cJSON *fm = sd_golden_manifest(fdir); /* skips without the set */
        cJSON_AddStringToObject(fm, "family", family);
        fams[nf++] = fm;
        const cJSON *mm;
        cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(fm, "models")) {
            const char *file = jstr(mm, "file"), *comfy = jstr(mm, "comfy_name");
            if (!file || !comfy) continue;
            snprintf(path, sizeof path, "%s/%s", fdir, file);
            link_as(path, models, comfy);
        }
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "loras")) {
        snprintf(path, sizeof path, "%s/%s", dir, jstr(c, "file"));
        link_as(path, models, jstr(c, "comfy_name"));
    }
    sd_env env;
    sd_backend *be = sd_golden_backend();
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    /* the tiny text encoders' settings, as ComfyUI's model_options gave them */
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    for (int i = 0; i < nf; i++) gt_model_defaults(fams[i], &mo);
    sd_model_store_set_defaults(store, &mo);
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(man, "cases")) {
        if (!sd_golden_case_is(c, "te_lora")) continue;
        printf("case %s\n", jstr(c, "id"));
        run_case(&env, dir, c);
        n++;
    }
    CHECK_MSG(n > 0, "no te_lora case in %s", dir);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    for (int i = 0; i < nf; i++) cJSON_Delete(fams[i]);
    cJSON_Delete(man);
    return sd_test_finish();
}
