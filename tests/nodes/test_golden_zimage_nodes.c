/* The Z-Image text nodes through the registry, on the Z-Image set's tiny
 * Qwen3 placed under its real name (the manifest's comfy_name:
 * text_encoders/qwen_3_4b.safetensors) with a --tokenizer-dir holding
 * qwen25_tokenizer/, and the tiny width given to the model store as the
 * reference's detection override did (settings.qwen3.hidden_size):
 *   - CLIPLoader type lumina2 (and another type: ComfyUI decides by the
 *     file) -> CLIPTextEncode equals every p<i>.cond and stores
 *     p<i>.attention_mask, no pooled_output; ConditioningZeroOut zeroes the
 *     cond and keeps the mask;
 *   - one-shot runs free the Qwen3 once the CLIP is gone;
 *   - refusals naming their inputs and files: a Qwen3 of another width, a
 *     tensor of the wrong shape, CLIPTextEncodeSD3 on it, no Qwen tokenizer
 *     anywhere (the places searched), a tokenizer folder missing a file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes_ctx.h"
#include "testutil.h"

static cJSON *g_tensors;
static sd_st_file *g_file;

static sd_status run(const sd_env *env, const char *type, const char *const *names,
                     sd_value *const *vals, int n, sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void link_to(const char *target, const char *dir, const char *name) {
    char src[4200], dst[4200], cmd[8600];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static const char *model_field(const cJSON *m, const char *key, const char *field) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), key), field));
}

static const char *base_name(const char *p) {
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : p;
}

static sd_tensor *entry_tensor(sd_value *cond, const char *key) {
    sd_value *v = sd_value_dict_get(sd_value_list_get(cond, 0), key);
    return v ? sd_value_as_tensor(v) : NULL;
}

static sd_value *clip_loader(const sd_env *env, const char *file, const char *type, sd_error *err) {
    static const char *const names[] = {"clip_name", "type"};
    sd_value *vals[2] = {sd_value_string(file), sd_value_string(type)}, *out[1] = {NULL};
    sd_status rc = run(env, "CLIPLoader", names, vals, 2, out, err);
    nt_free_values(vals, 2);
    return rc ? NULL : out[0];
}

static sd_value *encode(const sd_env *env, sd_value *clip, const char *text, sd_error *err) {
    static const char *const names[] = {"text", "clip"};
    sd_value *vals[2] = {sd_value_string(text), clip};
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, "CLIPTextEncode", names, vals, 2, out, err);
    sd_value_unref(vals[0]);
    return rc ? NULL : out[0];
}

/* A copy of the model file with one tensor changed (shape halved) or every
 * row count of the hidden width doubled (another width): bad shapes. */
static void write_variant(const char *src, const char *dst, const char *halve) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    sd_st_writer *w = sd_st_writer_new();
    for (size_t i = 0; f && w && i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        sd_tensor *t = sd_st_tensor(f, e->name, &err);
        if (t && strcmp(e->name, halve) == 0) {
            sd_tensor *h = sd_tensor_new4(t->dtype, t->ndim, t->shape[0] / 2, t->ndim > 1 ? t->shape[1] : 0, 0, 0);
            sd_tensor_unref(t);
            t = h;
        }
        if (t) CHECK_OK(sd_st_writer_add(w, e->name, t, &err), &err);
        sd_tensor_unref(t);
    }
    if (w) CHECK_OK(sd_st_writer_save(w, dst, &err), &err);
    sd_st_writer_free(w);
    if (f) sd_st_close(f);
}

int main(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("zimage"));
    cJSON *m = sd_golden_manifest(dir);
    sd_golden_require_cases_or_skip(m, dir, "text_encoder");
    const cJSON *c = NULL, *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(m, "cases"))
        if (!c && sd_golden_case_is(it, "text_encoder")) c = it;
    g_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[4200], src[4200];
    sd_error err;
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
    CHECK_OK(sd_st_open(path, &g_file, &err), &err);

    const char *tmp = sd_test_tmpdir("golden_zimage_nodes");
    char models[2400], te_dir[2600], tokdir[2400], nok[2400], partial[2600];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(te_dir, sizeof te_dir, "%s/text_encoders", models);
    const char *q_name = base_name(model_field(m, "qwen3_4b", "comfy_name"));
    snprintf(src, sizeof src, "%s/%s", dir, model_field(m, "qwen3_4b", "file"));
    link_to(src, te_dir, q_name);
    snprintf(path, sizeof path, "%s/bad_shape.safetensors", te_dir);
    write_variant(src, path, "model.layers.0.mlp.down_proj.weight");
    /* the tokenizer folder the manifest names, as DIR/qwen25_tokenizer */
    const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "tokenizer"), "files");
    char tsrc[2400];
    CHECK(sd_golden_resolve_path(dir, cJSON_GetStringValue(cJSON_GetArrayItem(files, 0)), tsrc, sizeof tsrc));
    char *slash = strrchr(tsrc, '/');
    if (slash) *slash = 0;
    snprintf(tokdir, sizeof tokdir, "%s/tok", tmp);
    link_to(tsrc, tokdir, SD_QWEN_TOKENIZER_SUBDIR);
    snprintf(nok, sizeof nok, "%s/tok_none", tmp);
    snprintf(partial, sizeof partial, "%s/tok_partial/" SD_QWEN_TOKENIZER_SUBDIR, tmp);
    snprintf(path, sizeof path, "%s/" SD_QWEN_VOCAB_FILE, tsrc);
    link_to(path, partial, SD_QWEN_VOCAB_FILE);
    snprintf(path, sizeof path, "%s/" SD_QWEN_CONFIG_FILE, tsrc);
    link_to(path, partial, SD_QWEN_CONFIG_FILE);
    CHECK(system("true") == 0);
    snprintf(path, sizeof path, "mkdir -p '%s'", nok);
    CHECK(system(path) == 0);

    sd_env env;
    sd_backend *be = NULL;
    sd_model_store *store = sd_model_store_new();
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(settings, "qwen3"), "hidden_size");
    mo.qwen3_4b_width = cJSON_IsNumber(hs) ? hs->valueint : 0;
    sd_model_store_set_defaults(store, &mo);
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    unsetenv("SDFLOW_TOKENIZER_DIR");

    /* CLIPLoader -> CLIPTextEncode -> ConditioningZeroOut */
    static const char *const types[2] = {"lumina2", "stable_diffusion"};
    for (int k = 0; k < 2; k++) {
        sd_value *clip = clip_loader(&env, q_name, types[k], &err);
        CHECK_MSG(clip != NULL, "CLIPLoader %s: %s", types[k], err.msg);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "text_prompts")) {
            if (!clip || (k && p != cJSON_GetObjectItemCaseSensitive(settings, "text_prompts")->child)) break;
            sd_value *ce = encode(&env, clip, cJSON_GetStringValue(p), &err);
            CHECK_MSG(ce != NULL, "CLIPTextEncode: %s", err.msg);
            if (!ce) continue;
            char name[64];
            snprintf(name, sizeof name, "p%s.cond", p->string);
            sd_golden_compare("zimage_nodes", g_tensors, g_file, name, entry_tensor(ce, "cond"));
            snprintf(name, sizeof name, "p%s.attention_mask", p->string);
            sd_tensor *mk = entry_tensor(ce, "attention_mask");
            CHECK(mk && mk->dtype == SD_I64);
            sd_tensor *mf = mk ? sd_tensor_to_dtype(mk, SD_F32) : NULL;
            sd_golden_compare("zimage_nodes", g_tensors, g_file, name, mf);
            sd_tensor_unref(mf);
            CHECK(sd_value_dict_get(sd_value_list_get(ce, 0), "pooled_output") == NULL);
            /* ConditioningZeroOut: zeros of the cond's shape, the mask kept */
            static const char *const zn[] = {"conditioning"};
            sd_value *zv[1] = {ce}, *zo[1] = {NULL};
            CHECK_OK(run(&env, "ConditioningZeroOut", zn, zv, 1, zo, &err), &err);
            sd_tensor *zc = zo[0] ? entry_tensor(zo[0], "cond") : NULL, *cc = entry_tensor(ce, "cond");
            int zero = zc && cc && zc->ndim == cc->ndim && sd_tensor_numel(zc) == sd_tensor_numel(cc);
            for (int64_t i = 0; zero && i < sd_tensor_numel(zc); i++) zero = sd_tensor_f32(zc)[i] == 0;
            CHECK_MSG(zero, "ConditioningZeroOut: cond is not zeros of the cond's shape");
            CHECK(zo[0] && entry_tensor(zo[0], "attention_mask") == mk);
            sd_value_unref(zo[0]);
            sd_value_unref(ce);
        }
        sd_value_unref(clip);
    }

    /* one-shot runs free the Qwen3 once no CLIP uses it */
    {
        sd_model_store_free_unused(store, 1);
        sd_value *clip = clip_loader(&env, q_name, "lumina2", &err);
        sd_value *ce = clip ? encode(&env, clip, "a cat", &err) : NULL;
        CHECK_MSG(ce != NULL, "encode: %s", err.msg);
        sd_checkpoint_opts o;
        sd_checkpoint_opts_default(&o);
        o.tokenizer_dir = tokdir;
        snprintf(path, sizeof path, "%s/%s", te_dir, q_name);
        sd_checkpoint *ck = NULL;
        CHECK_OK(sd_model_store_open(store, be, path, &o, &ck, &err), &err);
        int loaded = 0;
        if (ck) sd_checkpoint_loaded(ck, NULL, &loaded, NULL);
        CHECK(loaded);
        sd_value_unref(clip);
        if (ck) sd_checkpoint_loaded(ck, NULL, &loaded, NULL);
        CHECK_MSG(ck && !loaded, "the Qwen3 is still loaded after its CLIP went");
        sd_checkpoint_unref(ck);
        sd_value_unref(ce);
        sd_model_store_free_unused(store, 0);
    }

    /* refusals */
    {
        sd_value *clip = clip_loader(&env, "bad_shape.safetensors", "lumina2", &err);
        CHECK_MSG(clip != NULL, "CLIPLoader reads names and shapes only: %s", err.msg);
        sd_value *ce = clip ? encode(&env, clip, "a", &err) : NULL;
        CHECK_MSG(!ce && strstr(err.msg, "bad_shape.safetensors") && strstr(err.msg, "model.layers.0.mlp.down_proj") &&
                      strcmp(err.input, "clip") == 0,
                  "wrong shape: %s (input %s)", err.msg, err.input);
        sd_value_unref(ce);
        sd_value_unref(clip);
        clip = clip_loader(&env, q_name, "lumina2", &err);
        static const char *const names[] = {"clip", "clip_l", "clip_g", "t5xxl", "empty_padding"};
        sd_value *vals[5] = {clip, sd_value_string("a"), sd_value_string("b"), sd_value_string("c"),
                             sd_value_string("none")}, *out[1] = {NULL};
        sd_status rc = clip ? run(&env, "CLIPTextEncodeSD3", names, vals, 5, out, &err) : SD_ERR_INVALID;
        CHECK_MSG(rc != SD_OK && strcmp(err.input, "clip") == 0 && strstr(err.msg, "zimage"),
                  "CLIPTextEncodeSD3 on a Qwen3: %s", err.msg);
        nt_free_values(vals + 1, 4);
        sd_value_unref(out[0]);
        sd_value_unref(clip);
    }
    {
        /* another width: the real Qwen3-4B width is asked for */
        sd_model_store *s2 = sd_model_store_new();
        env.models = s2;
        sd_value *clip = clip_loader(&env, q_name, "lumina2", &err);
        sd_value *ce = clip ? encode(&env, clip, "a", &err) : NULL;
        char want[64];
        snprintf(want, sizeof want, "%d wide", mo.qwen3_4b_width);
        CHECK_MSG(!ce && strstr(err.msg, q_name) && strstr(err.msg, "not Qwen3-4B") && strstr(err.msg, want),
                  "another width: %s", err.msg);
        sd_value_unref(ce);
        sd_value_unref(clip);
        sd_model_store_free(s2);
    }
    {
        /* no Qwen tokenizer anywhere, then a folder missing merges.txt */
        const char *dirs[2] = {nok, NULL};
        char pdir[2600];
        snprintf(pdir, sizeof pdir, "%s/tok_partial", tmp);
        dirs[1] = pdir;
        for (int k = 0; k < 2; k++) {
            sd_model_store *s2 = sd_model_store_new();
            sd_model_store_set_defaults(s2, &mo);
            env.models = s2;
            CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, dirs[k], &err), &err);
            sd_value *clip = clip_loader(&env, q_name, "lumina2", &err);
            sd_value *ce = clip ? encode(&env, clip, "a", &err) : NULL;
            CHECK_MSG(!ce && strstr(err.msg, dirs[k]) && strstr(err.msg, SD_QWEN_TOKENIZER_SUBDIR) &&
                          strstr(err.msg, "--comfyui-dir") && (k == 0 || strstr(err.msg, "(no merges.txt)")),
                      "tokenizer %d: %s", k, err.msg);
            sd_value_unref(ce);
            sd_value_unref(clip);
            sd_model_store_free(s2);
        }
        env.models = store;
    }

    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    if (g_file) sd_st_close(g_file);
    cJSON_Delete(m);
    return sd_test_finish();
}
