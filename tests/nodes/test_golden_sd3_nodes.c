/* The SD3 text nodes through the registry, on the SD3 set's tiny files
 * placed under their real names in models/text_encoders/ (the manifest's
 * comfy_name: clip_l.safetensors, clip_g.safetensors,
 * t5xxl_fp16.safetensors) with a --tokenizer-dir holding
 * t5_tokenizer/tokenizer.json and the CLIP vocabulary, and the tiny CLIPs'
 * head counts given to the model store as ComfyUI's clip_l_model_config /
 * clip_g_model_config were (settings.clip_l / clip_g.num_attention_heads):
 *   - TripleCLIPLoader (two file orders) -> CLIPTextEncodeSD3 equals every
 *     sd3node* tensor (texts and padding from the tensor's desc, as
 *     models.golden_sd3_text reads them) and CLIPTextEncode every p<i>;
 *   - DualCLIPLoader type sd3 (CLIP-L + CLIP-G, no T5): cond is the lg part
 *     of sd3node_no_t5 padded with zeros to 4096 (ComfyUI's literal when no
 *     T5 gives the width); CLIPLoader type sd3 with the T5 alone: cond is
 *     the T5 part of sd3node, pooled zeros of 768 + 1280; with the CLIP-G
 *     alone: the bigG hidden after 768 zero channels;
 *   - refusals naming their inputs: a part twice, a file that is no text
 *     encoder, CLIPTextEncodeSD3 on a CLIP-L-only SD1 CLIP, a T5 file with
 *     a wrongly shaped tensor. */
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

static sd_tensor *ref(const char *name) {
    sd_error e;
    return sd_st_tensor_f32(g_file, name, &e);
}

static sd_value *loader(const sd_env *env, const char *type_name, const char *const *files, int n,
                        const char *type, sd_error *err) {
    static const char *const names3[] = {"clip_name1", "clip_name2", "clip_name3"};
    static const char *const dual[] = {"clip_name1", "clip_name2", "type"};
    static const char *const single[] = {"clip_name", "type"};
    sd_value *vals[4] = {NULL};
    for (int i = 0; i < n; i++) vals[i] = sd_value_string(files[i]);
    if (type) vals[n] = sd_value_string(type);
    const char *const *names = n == 3 ? names3 : n == 2 ? dual : single;
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, type_name, names, vals, n + (type != NULL), out, err);
    nt_free_values(vals, 4);
    return rc ? NULL : out[0];
}

static sd_value *encode_sd3(const sd_env *env, sd_value *clip, const char *tl, const char *tg,
                            const char *tt, const char *padding, sd_error *err) {
    static const char *const names[] = {"clip", "clip_l", "clip_g", "t5xxl", "empty_padding"};
    sd_value *vals[5] = {clip, sd_value_string(tl), sd_value_string(tg), sd_value_string(tt),
                         sd_value_string(padding)};
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, "CLIPTextEncodeSD3", names, vals, 5, out, err);
    nt_free_values(vals + 1, 4);
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

/* max |a[t, c0 + j] - b[t, j]| over b's tokens and channels, and the
 * largest |a| outside that block. */
static void block_diff(const sd_tensor *a, int64_t c0, const sd_tensor *b, int64_t bt0,
                       double *in_block, double *outside) {
    *in_block = *outside = INFINITY;
    if (!a || !b || a->ndim != 3 || b->ndim != 3) return;
    int64_t T = a->shape[1], W = a->shape[2], Wb = b->shape[2];
    if (T > b->shape[1] - bt0 || c0 + Wb > W) return;
    *in_block = *outside = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < W; c++) {
            double v = sd_tensor_f32(a)[t * W + c];
            if (c >= c0 && c < c0 + Wb)
                *in_block = fmax(*in_block, fabs(v - sd_tensor_f32(b)[(bt0 + t) * Wb + c - c0]));
            else
                *outside = fmax(*outside, fabs(v));
        }
}

static void node_inputs(const char *desc, const cJSON *text, const char **tl, const char **tg,
                        const char **tt, const char **pad) {
    *tl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "clip_l"));
    *tg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "clip_g"));
    *tt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "t5xxl"));
    const char *last = strrchr(desc, ',');
    last = last ? last + 1 : desc;
    while (*last == ' ') last++;
    *pad = strncmp(last, "empty_prompt", 12) == 0 ? "empty_prompt" : "none";
    const char *em = strstr(desc, "empty ");
    if (!em) return;
    if (strstr(em, "clip_l")) *tl = "";
    if (strstr(em, "clip_g")) *tg = "";
    if (strstr(em, "t5xxl")) *tt = "";
}

int main(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("sd3"));
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

    const char *tmp = sd_test_tmpdir("golden_sd3_nodes");
    char models[2400], te_dir[2600], tokdir[2400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(te_dir, sizeof te_dir, "%s/text_encoders", models);
    static const char *const keys[3] = {"clip_l", "clip_g", "t5xxl"};
    const char *nm[3];
    for (int i = 0; i < 3; i++) {
        nm[i] = base_name(model_field(m, keys[i], "comfy_name"));
        snprintf(path, sizeof path, "%s/%s", dir, model_field(m, keys[i], "file"));
        link_to(path, te_dir, nm[i]);
    }
    snprintf(path, sizeof path, "%s/%s", dir, model_field(m, "clip_l", "file"));
    link_to(path, te_dir, "other_clip_l.safetensors");
    snprintf(path, sizeof path, "%s/%s", dir, model_field(m, "mmdit", "file"));
    link_to(path, te_dir, "not_a_text_encoder.safetensors");
    snprintf(tokdir, sizeof tokdir, "%s/tok", tmp);
    CHECK(sd_golden_resolve_path(dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                          cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "t5")),
                                 path, sizeof path));
    link_to(path, tokdir, "t5_tokenizer/tokenizer.json");
    const char *vf[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", clipdir, vf[i]);
        link_to(path, tokdir, vf[i]);
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
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(settings, "clip_l"),
                *sg = cJSON_GetObjectItemCaseSensitive(settings, "clip_g");
    mo.clip_l_heads = cJSON_GetObjectItemCaseSensitive(sl, "num_attention_heads")
                          ? cJSON_GetObjectItemCaseSensitive(sl, "num_attention_heads")->valueint : 0;
    mo.clip_g_heads = cJSON_GetObjectItemCaseSensitive(sg, "num_attention_heads")
                          ? cJSON_GetObjectItemCaseSensitive(sg, "num_attention_heads")->valueint : 0;
    sd_model_store_set_defaults(store, &mo);
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    /* TripleCLIPLoader -> CLIPTextEncodeSD3 / CLIPTextEncode */
    for (int order = 0; order < 2; order++) {
        const char *files[3] = {nm[order ? 2 : 0], nm[1], nm[order ? 0 : 2]};
        sd_value *clip = loader(&env, "TripleCLIPLoader", files, 3, NULL, &err);
        CHECK_MSG(clip != NULL, "TripleCLIPLoader: %s", err.msg);
        if (!clip) continue;
        const cJSON *t;
        cJSON_ArrayForEach(t, g_tensors) {
            size_t n = strlen(t->string);
            if (strncmp(t->string, "sd3node", 7) != 0 || strcmp(t->string + n - 5, ".cond") != 0) continue;
            const char *tl, *tg, *tt, *pad;
            const char *desc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "desc"));
            node_inputs(desc ? desc : "", text, &tl, &tg, &tt, &pad);
            if (!tl || !tg || !tt) continue;
            sd_value *cond = encode_sd3(&env, clip, tl, tg, tt, pad, &err);
            CHECK_MSG(cond != NULL, "CLIPTextEncodeSD3: %s", err.msg);
            char pn[96];
            snprintf(pn, sizeof pn, "%.*s.pooled", (int)(n - 5), t->string);
            if (cond) {
                sd_golden_compare("sd3_nodes", g_tensors, g_file, t->string, entry_tensor(cond, "cond"));
                sd_golden_compare("sd3_nodes", g_tensors, g_file, pn, entry_tensor(cond, "pooled_output"));
            }
            sd_value_unref(cond);
        }
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "clip_text_encode_prompts")) {
            if (order) break;
            char name[64];
            sd_value *ce = encode(&env, clip, cJSON_GetStringValue(p), &err);
            CHECK_MSG(ce != NULL, "CLIPTextEncode: %s", err.msg);
            if (ce) {
                snprintf(name, sizeof name, "p%s.cond", p->string);
                sd_golden_compare("sd3_nodes", g_tensors, g_file, name, entry_tensor(ce, "cond"));
                snprintf(name, sizeof name, "p%s.pooled", p->string);
                sd_golden_compare("sd3_nodes", g_tensors, g_file, name, entry_tensor(ce, "pooled_output"));
            }
            sd_value_unref(ce);
        }
        sd_value_unref(clip);
    }

    const char *tl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "clip_l"));
    const char *tg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "clip_g"));
    const char *tt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(text, "t5xxl"));
    sd_tensor *no_t5 = ref("sd3node_no_t5.cond"), *full = ref("sd3node.cond"), *pooled_ref = ref("sd3node.pooled");
    int64_t lw = cJSON_GetObjectItemCaseSensitive(sl, "hidden_size") ? cJSON_GetObjectItemCaseSensitive(sl, "hidden_size")->valueint : 0;
    int64_t gw = cJSON_GetObjectItemCaseSensitive(sg, "hidden_size") ? cJSON_GetObjectItemCaseSensitive(sg, "hidden_size")->valueint : 0;
    /* both refs hold the same 77 lg tokens; 1e-4 covers the batch-free
     * recomputation of the same values (GEMM splits) */
    const double tol = 1e-4;
    if (tl && tg && tt && no_t5 && full && pooled_ref) {
        /* DualCLIPLoader sd3: CLIP-L + CLIP-G, no T5: lg padded to 4096 */
        const char *lg[2] = {nm[1], nm[0]};
        sd_value *clip = loader(&env, "DualCLIPLoader", lg, 2, "sd3", &err);
        CHECK_MSG(clip != NULL, "DualCLIPLoader sd3: %s", err.msg);
        sd_value *cond = clip ? encode_sd3(&env, clip, tl, tg, "", "none", &err) : NULL;
        CHECK_MSG(cond != NULL, "CLIPTextEncodeSD3 (l + g): %s", err.msg);
        if (cond) {
            sd_tensor *ct = entry_tensor(cond, "cond"), *pt = entry_tensor(cond, "pooled_output");
            sd_tensor *lgref = sd_tensor_new4(SD_F32, 3, 1, 77, no_t5->shape[2], 0);
            memcpy(lgref->data, no_t5->data, (size_t)77 * no_t5->shape[2] * sizeof(float));
            double in_b, out_b;
            block_diff(ct, 0, lgref, 0, &in_b, &out_b);
            CHECK_MSG(ct && ct->shape[1] == 77 && ct->shape[2] == SD_TE_SD3_CONTEXT && in_b <= tol && out_b == 0,
                      "l + g: cond [%lld, %lld], lg off by %g, %g outside", ct ? (long long)ct->shape[1] : -1,
                      ct ? (long long)ct->shape[2] : -1, in_b, out_b);
            double ma = 0;
            long w = 0;
            CHECK(pt && sd_test_allclose(pt, pooled_ref, tol, 0, &ma, &w));
            sd_tensor_unref(lgref);
        }
        sd_value_unref(cond);
        sd_value_unref(clip);

        /* CLIPLoader sd3 with the T5 alone: the T5 part, zero pooled 768 + 1280 */
        clip = loader(&env, "CLIPLoader", &nm[2], 1, "sd3", &err);
        CHECK_MSG(clip != NULL, "CLIPLoader sd3 (T5): %s", err.msg);
        cond = clip ? encode_sd3(&env, clip, tl, tg, tt, "none", &err) : NULL;
        CHECK_MSG(cond != NULL, "CLIPTextEncodeSD3 (T5): %s", err.msg);
        if (cond) {
            sd_tensor *ct = entry_tensor(cond, "cond"), *pt = entry_tensor(cond, "pooled_output");
            double in_b, out_b;
            block_diff(ct, 0, full, 77, &in_b, &out_b);
            CHECK_MSG(ct && ct->shape[1] == full->shape[1] - 77 && in_b <= tol,
                      "T5 alone: cond off by %g", in_b);
            int zero = pt && pt->ndim == 2 && pt->shape[1] == SD_TE_SD3_L_WIDTH + SD_TE_SD3_G_WIDTH;
            for (int64_t i = 0; zero && i < sd_tensor_numel(pt); i++) zero = sd_tensor_f32(pt)[i] == 0;
            CHECK_MSG(zero, "T5 alone: pooled is not zeros of %d", SD_TE_SD3_L_WIDTH + SD_TE_SD3_G_WIDTH);
        }
        sd_value_unref(cond);
        sd_value_unref(clip);

        /* CLIPLoader sd3 with the CLIP-G alone: bigG after 768 zero channels */
        clip = loader(&env, "CLIPLoader", &nm[1], 1, "sd3", &err);
        CHECK_MSG(clip != NULL, "CLIPLoader sd3 (G): %s", err.msg);
        cond = clip ? encode_sd3(&env, clip, tl, tg, tt, "none", &err) : NULL;
        CHECK_MSG(cond != NULL, "CLIPTextEncodeSD3 (G): %s", err.msg);
        if (cond && lw > 0 && gw > 0) {
            sd_tensor *ct = entry_tensor(cond, "cond"), *pt = entry_tensor(cond, "pooled_output");
            sd_tensor *gref = sd_tensor_new4(SD_F32, 3, 1, 77, gw, 0);
            for (int64_t t = 0; t < 77; t++)
                for (int64_t j = 0; j < gw; j++)
                    sd_tensor_f32(gref)[t * gw + j] = sd_tensor_f32(full)[t * full->shape[2] + lw + j];
            double in_b, out_b;
            block_diff(ct, SD_TE_SD3_L_WIDTH, gref, 0, &in_b, &out_b);
            CHECK_MSG(ct && ct->shape[1] == 77 && ct->shape[2] == SD_TE_SD3_CONTEXT && in_b <= tol && out_b == 0,
                      "G alone: g off by %g, %g outside", in_b, out_b);
            int ok = pt && pt->shape[1] == SD_TE_SD3_L_WIDTH + pooled_ref->shape[1] - lw;
            for (int64_t i = 0; ok && i < pt->shape[1]; i++) {
                float want = i < SD_TE_SD3_L_WIDTH ? 0 : sd_tensor_f32(pooled_ref)[lw + i - SD_TE_SD3_L_WIDTH];
                ok = fabs(sd_tensor_f32(pt)[i] - want) <= tol;
            }
            CHECK_MSG(ok, "G alone: pooled is not 768 zeros + bigG's pooled");
            sd_tensor_unref(gref);
        }
        sd_value_unref(cond);
        sd_value_unref(clip);
    }
    sd_tensor_unref(no_t5);
    sd_tensor_unref(full);
    sd_tensor_unref(pooled_ref);

    /* one-shot runs free the text encoder once no CLIP can use it: every
     * file of a TripleCLIPLoader CLIP gives its part back */
    {
        sd_model_store_free_unused(store, 1);
        const char *files[3] = {nm[0], nm[1], nm[2]};
        sd_value *clip = loader(&env, "TripleCLIPLoader", files, 3, NULL, &err);
        sd_value *cond = clip ? encode_sd3(&env, clip, "a", "b", "c", "none", &err) : NULL;
        CHECK_MSG(cond != NULL, "TripleCLIPLoader -> CLIPTextEncodeSD3: %s", err.msg);
        sd_checkpoint *ck[3] = {NULL, NULL, NULL};
        sd_checkpoint_opts o;
        sd_checkpoint_opts_default(&o);
        o.tokenizer_dir = tokdir;
        int loaded[3] = {0, 0, 0};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", te_dir, nm[i]);
            CHECK_OK(sd_model_store_open(store, be, path, &o, &ck[i], &err), &err);
            if (ck[i]) sd_checkpoint_loaded(ck[i], NULL, &loaded[i], NULL);
        }
        CHECK_MSG(loaded[0] && loaded[1] && loaded[2], "the CLIP's parts are loaded while it lives");
        sd_value_unref(clip);
        for (int i = 0; i < 3; i++) {
            if (ck[i]) sd_checkpoint_loaded(ck[i], NULL, &loaded[i], NULL);
            CHECK_MSG(ck[i] && !loaded[i], "%s: its text encoder is still loaded after the CLIP went",
                      nm[i]);
            sd_checkpoint_unref(ck[i]);
        }
        /* the conditioning outlives the weights */
        sd_tensor *ct = cond ? entry_tensor(cond, "cond") : NULL;
        CHECK(ct && ct->ndim == 3);
        sd_value_unref(cond);
        sd_model_store_free_unused(store, 0);
    }

    /* refusals */
    const char *two_l[3] = {nm[0], "other_clip_l.safetensors", nm[2]};
    sd_value *bad = loader(&env, "TripleCLIPLoader", two_l, 3, NULL, &err);
    expect_error(bad ? SD_OK : err.code, &err, "clip_name2", "a second CLIP-L", "two CLIP-L");
    sd_value_unref(bad);
    const char *not_te[3] = {nm[0], nm[1], "not_a_text_encoder.safetensors"};
    bad = loader(&env, "TripleCLIPLoader", not_te, 3, NULL, &err);
    expect_error(bad ? SD_OK : err.code, &err, "clip_name3", "not_a_text_encoder.safetensors", "an MMDiT file");
    sd_value_unref(bad);
    bad = loader(&env, "DualCLIPLoader", two_l, 2, "sd3", &err);
    expect_error(bad ? SD_OK : err.code, &err, "clip_name2", "a second CLIP-L", "DualCLIPLoader sd3 two CLIP-L");
    sd_value_unref(bad);
    {
        sd_value *sd1 = loader(&env, "CLIPLoader", &nm[0], 1, "stable_diffusion", &err);
        CHECK_MSG(sd1 != NULL, "CLIPLoader stable_diffusion: %s", err.msg);
        sd_value *cf = sd1 ? encode_sd3(&env, sd1, "a", "b", "c", "none", &err) : NULL;
        expect_error(cf ? SD_OK : err.code, &err, "clip", "needs an SD3 CLIP", "CLIPTextEncodeSD3 on SD1");
        sd_value_unref(cf);
        sd_value_unref(sd1);
    }
    const char *bad_t5[3] = {nm[0], nm[1], "bad_t5.safetensors"};
    sd_value *bclip = loader(&env, "TripleCLIPLoader", bad_t5, 3, NULL, &err);
    CHECK_MSG(bclip != NULL, "TripleCLIPLoader reads names and shapes only: %s", err.msg);
    sd_value *bc = bclip ? encode_sd3(&env, bclip, "a", "b", "c", "none", &err) : NULL;
    CHECK_MSG(!bc && strstr(err.msg, "bad_t5.safetensors") &&
                  strstr(err.msg, "encoder.block.0.layer.0.SelfAttention.") && strstr(err.msg, "has shape") &&
                  strcmp(err.input, "clip") == 0,
              "wrong shape: %s (input %s)", err.msg, err.input);
    sd_value_unref(bc);
    sd_value_unref(bclip);

    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    if (g_file) sd_st_close(g_file);
    cJSON_Delete(m);
    return sd_test_finish();
}
