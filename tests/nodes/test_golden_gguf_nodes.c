/* ComfyUI-GGUF's loader nodes on the tiny GGUF files of tests/data/gguf,
 * placed under their real names (the manifest's comfy_name) next to the
 * Flux set's clip_l.safetensors, with a --tokenizer-dir holding the T5
 * tokenizer.json:
 *   - DualCLIPLoaderGGUF(clip_l.safetensors, T5 .gguf, flux) ->
 *     CLIPTextEncode(positive) of every e2e case: the T5 conditioning equals
 *     ComfyUI's through ComfyUI-GGUF's own node (manifest tolerance), in
 *     both file orders; the files are listed with the folder's other models;
 *   - the T5 .gguf probes as a T5-XXL text encoder (llama.cpp names mapped
 *     back) and loads with its quantized weights kept quantized;
 *   - refusals: CLIPLoaderGGUF with a T5 alone, a GGUF diffusion model as a
 *     text encoder.
 * The pooled CLIP-L is the safetensors file's and is compared by
 * models.golden_flux_text (the tiny CLIP-L's head count is not width / 64,
 * which node-loaded CLIPs assume). */
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

static const char *str_at(const cJSON *o, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    return cJSON_GetStringValue(b ? cJSON_GetObjectItemCaseSensitive(x, b) : x);
}

static const char *base_name(const char *p) {
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : p;
}

static sd_status run(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static sd_value *clip_of(const sd_env *env, const char *node, const char *n1, const char *n2, const char *type,
                         sd_error *err) {
    static const char *const dual[] = {"clip_name1", "clip_name2", "type"};
    static const char *const single[] = {"clip_name", "type"};
    sd_value *vals[3] = {sd_value_string(n1), n2 ? sd_value_string(n2) : NULL, sd_value_string(type)};
    sd_value *out[1] = {NULL};
    sd_status rc = n2 ? run(env, node, dual, vals, 3, out, err)
                      : run(env, node, single, (sd_value *const[]){vals[0], vals[2]}, 2, out, err);
    for (int i = 0; i < 3; i++) sd_value_unref(vals[i]);
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

static int listed(const sd_env *env, const char *node, const char *name) {
    const sd_node_def *d = sd_registry_find(node);
    sd_value *l = NULL;
    sd_error err;
    if (!d || !d->inputs[0].options_fn || d->inputs[0].options_fn(env, &l, &err) != SD_OK) return 0;
    int found = 0;
    for (size_t i = 0; i < sd_value_list_len(l); i++)
        found |= strcmp(sd_value_as_string(sd_value_list_get(l, i)), name) == 0;
    sd_value_unref(l);
    return found;
}

int main(void) {
    char fdir[4096], path[4400];
    const char *gdir = sd_golden_topic_dir("gguf");
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir("flux"));
    cJSON *gm = sd_golden_manifest(gdir);
    cJSON *fm = sd_golden_manifest(fdir);
    char clipdir[2400];
    snprintf(clipdir, sizeof clipdir, "%s/data/clip", sd_test_shared_dir());
    if (!sd_tokenizer_dir_has_files(clipdir)) sd_test_skip("no CLIP vocabulary in %s", clipdir);

    /* models/<comfy_name> for every GGUF file, the Flux set's CLIP-L, a tokenizer dir */
    const char *tmp = sd_test_tmpdir("golden_gguf_nodes");
    char models[2400], tokdir[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    const cJSON *mm, *t5_model = NULL, *unet_model = NULL;
    cJSON_ArrayForEach(mm, cJSON_GetObjectItemCaseSensitive(gm, "models")) {
        snprintf(path, sizeof path, "%s/%s", gdir, str_at(mm, "file", NULL));
        link_to(path, models, str_at(mm, "comfy_name", NULL));
        if (strcmp(str_at(mm, "kind", NULL), "text_encoder") == 0) t5_model = mm;
        else unet_model = mm;
    }
    CHECK(t5_model && unet_model);
    const char *clip_l_name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(gm, "reference"), "clip_l"), "comfy_name"));
    snprintf(path, sizeof path, "%s/%s", fdir, str_at(cJSON_GetObjectItemCaseSensitive(fm, "models"), "clip_l", "file"));
    link_to(path, models, clip_l_name);
    snprintf(tokdir, sizeof tokdir, "%s/tok", tmp);
    snprintf(path, sizeof path, "%s/%s", fdir, str_at(fm, "tokenizer", "file"));
    link_to(path, tokdir, "t5_tokenizer/tokenizer.json");
    const char *vf[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", clipdir, vf[i]);
        link_to(path, tokdir, vf[i]);
    }

    sd_env env;
    sd_backend *be = NULL;
    sd_error err;
    sd_model_store *store = sd_model_store_new();
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    const char *t5_name = base_name(str_at(t5_model, "comfy_name", NULL));
    const char *l_name = base_name(clip_l_name);
    CHECK(listed(&env, "DualCLIPLoaderGGUF", t5_name) && listed(&env, "DualCLIPLoaderGGUF", l_name));
    CHECK(listed(&env, "CLIPLoaderGGUF", t5_name) && !listed(&env, "DualCLIPLoader", t5_name));

    /* the T5 GGUF as the checkpoint layer sees it */
    sd_ckpt_info info;
    snprintf(path, sizeof path, "%s/%s", models, str_at(t5_model, "comfy_name", NULL));
    CHECK_OK(sd_checkpoint_probe(path, &info, &err), &err);
    CHECK(info.te_kind == SD_TE_T5 && !info.has_unet && !info.has_vae);

    /* every e2e case's prompt, through ComfyUI-GGUF's CLIP loader */
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(gm, "e2e")) {
        const char *id = str_at(c, "id", NULL);
        const cJSON *ci = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "clip_loader"), "inputs");
        const char *n1 = str_at(ci, "clip_name1", NULL), *n2 = str_at(ci, "clip_name2", NULL);
        const char *type = str_at(ci, "type", NULL), *text = str_at(c, "settings", "positive");
        sd_st_file *g = NULL;
        snprintf(path, sizeof path, "%s/%s", gdir, str_at(c, "file", NULL));
        CHECK_OK(sd_st_open(path, &g, &err), &err);
        for (int order = 0; order < 2 && g; order++) {
            sd_value *clip = clip_of(&env, "DualCLIPLoaderGGUF", order ? n2 : n1, order ? n1 : n2, type, &err);
            CHECK_MSG(clip != NULL, "%s: DualCLIPLoaderGGUF: %s", id, err.msg);
            sd_value *cond = clip ? encode(&env, clip, text, &err) : NULL;
            CHECK_MSG(!clip || cond, "%s: CLIPTextEncode: %s", id, err.msg);
            if (cond) {
                sd_value *v = sd_value_dict_get(sd_value_list_get(cond, 0), "cond");
                sd_golden_compare(id, cJSON_GetObjectItemCaseSensitive(c, "tensors"), g, "positive.cond",
                                  v ? sd_value_as_tensor(v) : NULL);
                n++;
            }
            sd_value_unref(cond);
            sd_value_unref(clip);
        }
        if (g) sd_st_close(g);
    }
    CHECK_MSG(n > 0, "no e2e case in %s", gdir);

    /* refusals */
    sd_value *v = clip_of(&env, "CLIPLoaderGGUF", t5_name, NULL, "stable_diffusion", &err);
    CHECK_MSG(!v && strstr(err.msg, "T5"), "CLIPLoaderGGUF with a lone T5: %s", err.msg);
    sd_value_unref(v);
    snprintf(path, sizeof path, "%s/%s", models, str_at(unet_model, "comfy_name", NULL));
    link_to(path, models, "text_encoders/a_flux_model.gguf");
    v = clip_of(&env, "DualCLIPLoaderGGUF", l_name, "a_flux_model.gguf", "flux", &err);
    CHECK_MSG(!v && strstr(err.msg, "a_flux_model.gguf") && strcmp(err.input, "clip_name2") == 0,
              "a GGUF diffusion model as a text encoder: input '%s': %s", err.input, err.msg);
    sd_value_unref(v);

    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    cJSON_Delete(gm);
    cJSON_Delete(fm);
    return sd_test_finish();
}
