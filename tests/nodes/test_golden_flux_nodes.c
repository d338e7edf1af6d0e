/* The Flux text nodes through the registry, on the Flux set's tiny files
 * placed under their real names in models/text_encoders/ (clip_l.safetensors,
 * t5xxl_fp16.safetensors, from the manifest's comfy_name) with a
 * --tokenizer-dir holding t5_tokenizer/tokenizer.json:
 *   - DualCLIPLoader(type flux, files in either order) -> CLIPTextEncodeFlux:
 *     cond equals the case's flux_node.cond (manifest tolerance), the
 *     conditioning stores "guidance" as given, pooled has CLIP-L's width;
 *     CLIPTextEncode on the same CLIP equals p<i>.cond; CLIPSetLastLayer -1
 *     changes nothing (T5's last block is its last layer);
 *   - refusals, each naming its input: two CLIP-L files for flux, an
 *     unsupported type, a file that is no text encoder, a T5 alone in
 *     CLIPLoader, CLIPTextEncodeFlux on an SD1 CLIP, a T5 file with a wrongly
 *     shaped tensor, a missing T5 tokenizer (the message names the places).
 * The CLIP-L pooled values are checked by models.golden_flux_text, which can
 * give the tiny CLIP-L its head count (not width / 64); here only T5
 * outputs are compared with the reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* The comfy_name's file part ("text_encoders/clip_l.safetensors" -> "clip_l.safetensors"). */
static const char *base_name(const char *p) {
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : p;
}

static sd_tensor *entry_tensor(sd_value *cond, const char *key) {
    sd_value *v = sd_value_dict_get(sd_value_list_get(cond, 0), key);
    return v ? sd_value_as_tensor(v) : NULL;
}

static sd_value *clip_of(const sd_env *env, const char *n1, const char *n2, const char *type,
                         sd_error *err) {
    static const char *const names[] = {"clip_name1", "clip_name2", "type"};
    sd_value *vals[3] = {sd_value_string(n1), sd_value_string(n2), sd_value_string(type)};
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, "DualCLIPLoader", names, vals, 3, out, err);
    nt_free_values(vals, 3);
    return rc ? NULL : out[0];
}

static sd_value *encode_flux(const sd_env *env, sd_value *clip, const char *tl, const char *tt,
                             double guidance, sd_error *err) {
    static const char *const names[] = {"clip", "clip_l", "t5xxl", "guidance"};
    sd_value *vals[4] = {clip, sd_value_string(tl), sd_value_string(tt), sd_value_float(guidance)};
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, "CLIPTextEncodeFlux", names, vals, 4, out, err);
    nt_free_values(vals + 1, 3);
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

static void expect_error(sd_status rc, const sd_error *err, const char *input, const char *says,
                         const char *what) {
    CHECK_MSG(rc != SD_OK && strcmp(err->input, input) == 0 && strstr(err->msg, says),
              "%s: rc %d input '%s' message '%s'", what, rc, err->input, err->msg);
}

int main(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("flux"));
    cJSON *m = sd_golden_manifest(dir);
    sd_golden_require_cases_or_skip(m, dir, "text_encoder");
    const char *clipdir = sd_golden_clip_vocab(m);
    const cJSON *c = NULL, *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(m, "cases"))
        if (!c && sd_golden_case_is(it, "text_encoder")) c = it;
    g_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(settings, "text");
    char path[4200];
    sd_error err;
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
    CHECK_OK(sd_st_open(path, &g_file, &err), &err);

    /* models/text_encoders/<real names>, a tokenizer dir, and a bad T5 file */
    const char *tmp = sd_test_tmpdir("golden_flux_nodes");
    char models[2400], te_dir[2600], tokdir[2400], nok[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(te_dir, sizeof te_dir, "%s/text_encoders", models);
    const char *l_name = base_name(model_field(m, "clip_l", "comfy_name"));
    const char *t_name = base_name(model_field(m, "t5xxl", "comfy_name"));
    snprintf(path, sizeof path, "%s/%s", dir, model_field(m, "clip_l", "file"));
    link_to(path, te_dir, l_name);
    link_to(path, te_dir, "other_clip_l.safetensors");
    snprintf(path, sizeof path, "%s/%s", dir, model_field(m, "t5xxl", "file"));
    link_to(path, te_dir, t_name);
    snprintf(path, sizeof path, "%s/%s", dir, model_field(m, "ae", "file"));
    link_to(path, te_dir, "not_a_text_encoder.safetensors");
    snprintf(tokdir, sizeof tokdir, "%s/tok", tmp);
    snprintf(path, sizeof path, "%s/%s", dir,
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "file")));
    link_to(path, tokdir, "t5_tokenizer/tokenizer.json");
    snprintf(nok, sizeof nok, "%s/tok_without_t5", tmp);
    const char *vf[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", clipdir, vf[i]);
        link_to(path, tokdir, vf[i]);
        link_to(path, nok, vf[i]);
    }
    {
        /* the T5 file with its first block's q projection cut to half */
        sd_st_file *t5f = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, model_field(m, "t5xxl", "file"));
        CHECK_OK(sd_st_open(path, &t5f, &err), &err);
        sd_st_writer *w = sd_st_writer_new();
        for (size_t i = 0; t5f && w && i < sd_st_count(t5f); i++) {
            const sd_st_entry *e = sd_st_at(t5f, i);
            sd_tensor *t = sd_st_tensor(t5f, e->name, &err);
            if (t && strcmp(e->name, "encoder.block.0.layer.0.SelfAttention.q.weight") == 0) {
                sd_tensor *h = sd_tensor_new4(t->dtype, 2, t->shape[0] / 2, t->shape[1], 0, 0);
                sd_tensor_unref(t);
                t = h;
            }
            if (t) CHECK_OK(sd_st_writer_add(w, e->name, t, &err), &err);
            sd_tensor_unref(t);
        }
        snprintf(path, sizeof path, "%s/bad_t5.safetensors", te_dir);
        if (w) CHECK_OK(sd_st_writer_save(w, path, &err), &err);
        sd_st_writer_free(w);
        if (t5f) sd_st_close(t5f);
    }

    sd_env env;
    sd_backend *be = NULL;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    const char *tl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "clip_l"));
    const char *tt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "t5xxl"));
    const cJSON *gj = cJSON_GetObjectItemCaseSensitive(text, "guidance");
    double guidance = cJSON_IsNumber(gj) ? gj->valuedouble : 3.5;
    int64_t clip_w = 0;
    {
        sd_ckpt_info info;
        snprintf(path, sizeof path, "%s/%s", te_dir, l_name);
        CHECK_OK(sd_checkpoint_probe(path, &info, &err), &err);
        CHECK(info.te_kind == SD_TE_SD1);
        snprintf(path, sizeof path, "%s/%s", te_dir, t_name);
        CHECK_OK(sd_checkpoint_probe(path, &info, &err), &err);
        CHECK(info.te_kind == SD_TE_T5 && !info.has_unet && !info.has_vae);
        sd_st_file *lf = NULL;
        snprintf(path, sizeof path, "%s/%s", te_dir, l_name);
        if (sd_st_open(path, &lf, &err) == SD_OK) {
            const sd_st_entry *e = sd_st_find(lf, "text_model.final_layer_norm.weight");
            clip_w = e ? e->shape[0] : 0;
            sd_st_close(lf);
        }
    }

    /* DualCLIPLoader -> CLIPTextEncodeFlux, both file orders */
    for (int order = 0; order < 2 && tl && tt; order++) {
        sd_value *clip = order ? clip_of(&env, t_name, l_name, "flux", &err)
                               : clip_of(&env, l_name, t_name, "flux", &err);
        CHECK_MSG(clip != NULL, "DualCLIPLoader flux: %s", err.msg);
        if (!clip) continue;
        sd_value *cond = encode_flux(&env, clip, tl, tt, guidance, &err);
        CHECK_MSG(cond != NULL, "CLIPTextEncodeFlux: %s", err.msg);
        if (cond) {
            sd_golden_compare("flux_nodes", g_tensors, g_file, "flux_node.cond", entry_tensor(cond, "cond"));
            sd_tensor *p = entry_tensor(cond, "pooled_output");
            CHECK(p && p->ndim == 2 && p->shape[0] == 1 && p->shape[1] == clip_w);
            sd_value *g = sd_value_dict_get(sd_value_list_get(cond, 0), "guidance");
            CHECK(g && sd_value_kind_of(g) == SD_VAL_FLOAT && sd_value_as_float(g) == guidance);
        }
        sd_value_unref(cond);
        /* CLIPTextEncode on the Flux CLIP: every prompt the case lists */
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "clip_text_encode_prompts")) {
            if (order) break;
            char name[64];
            snprintf(name, sizeof name, "p%s.cond", p->string);
            sd_value *ce = encode(&env, clip, cJSON_GetStringValue(p), &err);
            CHECK_MSG(ce != NULL, "CLIPTextEncode: %s", err.msg);
            if (ce) {
                sd_golden_compare("flux_nodes", g_tensors, g_file, name, entry_tensor(ce, "cond"));
                CHECK(sd_value_dict_get(sd_value_list_get(ce, 0), "guidance") == NULL);
            }
            sd_value_unref(ce);
        }
        if (order == 0) {
            /* CLIPSetLastLayer -1: T5's last block with its final norm, as before */
            static const char *const names[] = {"clip", "stop_at_clip_layer"};
            sd_value *vals[2] = {clip, sd_value_int(-1)}, *out[1] = {NULL};
            CHECK_OK(run(&env, "CLIPSetLastLayer", names, vals, 2, out, &err), &err);
            sd_value_unref(vals[1]);
            sd_value *c1 = out[0] ? encode_flux(&env, out[0], tl, tt, guidance, &err) : NULL;
            CHECK(c1 != NULL);
            if (c1) sd_golden_compare("flux_nodes", g_tensors, g_file, "flux_node.cond", entry_tensor(c1, "cond"));
            sd_value_unref(c1);
            sd_value_unref(out[0]);
        }
        sd_value_unref(clip);
    }

    /* refusals */
    sd_value *bad = clip_of(&env, l_name, "other_clip_l.safetensors", "flux", &err);
    expect_error(bad ? SD_OK : err.code, &err, "clip_name2", "needs a CLIP-L and a T5-XXL", "two CLIP-L");
    sd_value_unref(bad);
    bad = clip_of(&env, l_name, t_name, "hidream", &err);
    expect_error(bad ? SD_OK : err.code, &err, "type", "hidream", "type hidream");
    sd_value_unref(bad);
    bad = clip_of(&env, "not_a_text_encoder.safetensors", t_name, "flux", &err);
    expect_error(bad ? SD_OK : err.code, &err, "clip_name1", "not a standalone text encoder", "an ae file");
    sd_value_unref(bad);
    {
        static const char *const names[] = {"clip_name", "type"};
        sd_value *vals[2] = {sd_value_string(t_name), sd_value_string("stable_diffusion")}, *out[1] = {NULL};
        sd_status rc = run(&env, "CLIPLoader", names, vals, 2, out, &err);
        expect_error(rc, &err, "type", "DualCLIPLoader type flux", "CLIPLoader T5");
        sd_value_unref(out[0]);
        nt_free_values(vals, 2);
        sd_value *v2[2] = {sd_value_string(l_name), sd_value_string("stable_diffusion")};
        out[0] = NULL;
        CHECK_OK(run(&env, "CLIPLoader", names, v2, 2, out, &err), &err);
        nt_free_values(v2, 2);
        sd_value *cf = out[0] ? encode_flux(&env, out[0], "a", "b", 3.5, &err) : NULL;
        expect_error(cf ? SD_OK : err.code, &err, "clip", "needs a Flux CLIP", "CLIPTextEncodeFlux on SD1");
        sd_value_unref(cf);
        sd_value_unref(out[0]);
    }
    sd_value *bclip = clip_of(&env, l_name, "bad_t5.safetensors", "flux", &err);
    CHECK_MSG(bclip != NULL, "DualCLIPLoader reads names and shapes only: %s", err.msg);
    sd_value *bc = bclip ? encode_flux(&env, bclip, "a", "b", 3.5, &err) : NULL;
    CHECK_MSG(!bc && strstr(err.msg, "bad_t5.safetensors") &&
                  strstr(err.msg, "encoder.block.0.layer.0.SelfAttention.") && strstr(err.msg, "has shape"),
              "wrong shape: %s", err.msg);
    sd_value_unref(bc);
    sd_value_unref(bclip);
    /* no T5 tokenizer anywhere */
    sd_model_store_free(store);
    store = sd_model_store_new();
    env.models = store;
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, nok, &err), &err);
    unsetenv("SDFLOW_TOKENIZER_DIR");
    sd_value *nclip = clip_of(&env, l_name, t_name, "flux", &err);
    sd_value *nc = nclip ? encode_flux(&env, nclip, "a", "b", 3.5, &err) : NULL;
    CHECK_MSG(!nc && strstr(err.msg, "t5_tokenizer/tokenizer.json") && strstr(err.msg, nok) &&
                  strstr(err.msg, "--comfyui-dir"),
              "no tokenizer: %s", err.msg);
    sd_value_unref(nc);
    sd_value_unref(nclip);

    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    if (g_file) sd_st_close(g_file);
    cJSON_Delete(m);
    return sd_test_finish();
}
