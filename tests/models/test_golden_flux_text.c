/* Golden test: the Flux text encoder against ComfyUI (testdata/flux, cases
 * of component "text_encoder"), built the way DualCLIPLoader(type=flux)
 * builds it: the manifest's standalone t5xxl and clip_l files opened as
 * checkpoints (detection by keys, weights kept as stored, tokenizers
 * resolved from a --tokenizer-dir holding t5_tokenizer/tokenizer.json) and
 * composed by sd_text_encoder_combine. Tensors of the case, by name:
 *   raw.ids (input) -> raw.embeddings, raw.block.N, raw.last_hidden: the T5
 *     forward alone;
 *   flux_node.*: CLIPTextEncodeFlux's text part (settings.text.clip_l and
 *     .t5xxl; our tokenization must give flux_node.clip_l_ids / .t5_ids) and
 *     the guidance it stores (settings.text.guidance);
 *   p<i>.*: CLIPTextEncode of settings.clip_text_encode_prompts[i] (its T5
 *     ids p<i>.t5_ids), cond and pooled.
 * Every tensor of the case must be checked. Sizes and configs come from the
 * manifest and files: the T5 configuration read from the file must equal
 * settings.t5; the CLIP-L head count is settings.clip_l.num_attention_heads
 * (ComfyUI's clip_l_model_config, as the oracle passed it). bf16 runs add
 * tests/golden.h's slack with L = 6 matrix ops (q, QK, PV, o, wi, wo /
 * fc1, fc2) per block or layer.
 * A single-file checkpoint of the set holding the same text encoders
 * (config.same_weights_as naming t5xxl and clip_l: flux1-dev-fp8, its T5
 * matrices in F8_E4M3) is loaded by sd_text_encoder_load_ex, the loader
 * CheckpointLoaderSimple uses: a FLUX encoder whose CLIP-L (F16, the same
 * weights) gives flux_node.pooled, and whose fp8 T5 gives a finite cond of
 * the reference's shape (its values belong to the end-to-end fp8 case). */
#include "golden.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/checkpoint/checkpoint.h"
#include "models/text/text_encode.h"

static const char *g_case = "";
static cJSON *g_tensors;
static int *g_used;
static sd_st_file *g_file;

static void cmp(const char *name, sd_tensor *t) {
    CHECK_MSG(sd_golden_mark(g_tensors, g_used, name), "%s: no tensor %s in the manifest", g_case,
              name);
    sd_golden_compare(g_case, g_tensors, g_file, name, t);
}

static int json_int(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static const char *json_str(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* ---- the T5 alone ------------------------------------------------------------- */

static void t5_tap(void *user, const char *name, const sd_bt *t) {
    (void)user;
    char ref[64];
    int depth = 0;
    if (strcmp(name, "embeddings") == 0) {
        snprintf(ref, sizeof ref, "raw.embeddings");
    } else if (strncmp(name, "block.", 6) == 0) {
        snprintf(ref, sizeof ref, "raw.%s", name);
        depth = 6 * (atoi(name + 6) + 1);
    } else {
        return;
    }
    if (!cJSON_GetObjectItemCaseSensitive(g_tensors, ref)) return; /* a set may record fewer */
    sd_golden_set_depth(depth);
    sd_tensor *h = sd_bt_to_host(t);
    cmp(ref, h);
    sd_tensor_unref(h);
}

static void run_raw(const sd_text_encoder *te) {
    sd_error e;
    sd_tensor *ids = sd_st_tensor(g_file, "raw.ids", &e);
    if (!ids) return; /* a set without the raw forward */
    CHECK_MSG(ids->dtype == SD_I64 && ids->ndim == 2 && sd_golden_mark(g_tensors, g_used, "raw.ids"),
              "%s: raw.ids is not an I64 [n, L] input", g_case);
    int n = (int)ids->shape[0], len = (int)ids->shape[1];
    int32_t *v = malloc((size_t)n * len * sizeof *v);
    for (int64_t i = 0; i < (int64_t)n * len; i++) v[i] = (int32_t)((const int64_t *)ids->data)[i];
    sd_t5 *m = (sd_t5 *)sd_text_encoder_t5(te);
    sd_t5_set_tap(m, t5_tap, NULL);
    sd_t5_tokens in = {n, len, v, NULL};
    sd_bt *out = NULL;
    CHECK_OK(sd_t5_forward(m, &in, 0, &out, &e), &e);
    sd_t5_set_tap(m, NULL, NULL);
    sd_golden_set_depth(6 * sd_t5_get_config(m)->layers);
    sd_tensor *h = out ? sd_bt_to_host(out) : NULL;
    cmp("raw.last_hidden", h);
    sd_tensor_unref(h);
    sd_bt_free(out);
    free(v);
    sd_tensor_unref(ids);
}

/* ---- text through the encoder ----------------------------------------------------- */

/* Our tokenization of text (T5 or CLIP-L) against the input tensor `name`. */
static void check_ids(const sd_text_encoder *te, const char *text, int t5, const char *name) {
    sd_error e;
    sd_tensor *ref = sd_st_tensor(g_file, name, &e);
    if (!ref) return; /* not recorded (CLIP ids exist for ASCII prompts only) */
    sd_golden_mark(g_tensors, g_used, name);
    sd_prompt_tokens *t = NULL;
    sd_prompt_opts o;
    if (t5) {
        sd_prompt_vocab v;
        sd_prompt_opts_t5xxl(&o);
        CHECK_OK(sd_t5_tokenizer_prompt_vocab(sd_text_encoder_t5_tokenizer(te), &v, &e), &e);
        CHECK_OK(sd_prompt_tokenize_vocab(&v, text, &o, &t, &e), &e);
    } else {
        sd_prompt_opts_clip_l(&o);
        CHECK_OK(sd_prompt_tokenize(sd_text_encoder_tokenizer(te), text, &o, &t, &e), &e);
    }
    int ok = t && ref->dtype == SD_I64 && ref->ndim == 2 && ref->shape[0] == t->n_chunks &&
             ref->shape[1] == t->chunk_len;
    for (int64_t i = 0; ok && i < (int64_t)t->n_chunks * t->chunk_len; i++)
        ok = ((const int64_t *)ref->data)[i] == t->tokens[i].id;
    CHECK_MSG(ok, "%s %s: our tokenization differs", g_case, name);
    sd_prompt_tokens_free(t);
    sd_tensor_unref(ref);
}

static void compare_pair(const char *pfx, sd_tensor *cond, sd_tensor *pooled, int t5_layers,
                         int clip_layers) {
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s.cond", pfx);
    snprintf(n2, sizeof n2, "%s.pooled", pfx);
    sd_golden_set_depth(6 * t5_layers);
    cmp(n1, cond);
    sd_golden_set_depth(6 * clip_layers);
    cmp(n2, pooled);
}

static void run_texts(const sd_text_encoder *te, const cJSON *settings) {
    sd_error e;
    int t5_layers = sd_t5_get_config(sd_text_encoder_t5(te))->layers;
    int clip_layers = sd_clip_get_config(sd_text_encoder_clip_l(te))->layers;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(settings, "text");
    if (text && cJSON_GetObjectItemCaseSensitive(g_tensors, "flux_node.cond")) {
        const char *tl = json_str(text, "clip_l"), *tt = json_str(text, "t5xxl");
        CHECK_MSG(tl && tt, "%s: settings.text lacks clip_l / t5xxl", g_case);
        check_ids(te, tl ? tl : "", 0, "flux_node.clip_l_ids");
        check_ids(te, tt ? tt : "", 1, "flux_node.t5_ids");
        sd_tensor *cond = NULL, *pooled = NULL;
        CHECK_OK(sd_text_encode_flux(te, tl ? tl : "", tt ? tt : "", 0, NULL, &cond, &pooled, &e), &e);
        compare_pair("flux_node", cond, pooled, t5_layers, clip_layers);
        sd_tensor_unref(cond);
        sd_tensor_unref(pooled);
        /* the node stores settings.text.guidance in the conditioning as given */
        const cJSON *gd = cJSON_GetObjectItemCaseSensitive(text, "guidance");
        if (cJSON_GetObjectItemCaseSensitive(g_tensors, "flux_node.guidance")) {
            sd_tensor *g = sd_tensor_new4(SD_F32, 1, 1, 0, 0, 0);
            if (g && cJSON_IsNumber(gd)) ((float *)g->data)[0] = (float)gd->valuedouble;
            sd_golden_set_depth(0);
            cmp("flux_node.guidance", g);
            sd_tensor_unref(g);
        }
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "clip_text_encode_prompts")) {
        const char *s = cJSON_GetStringValue(p);
        char name[64];
        snprintf(name, sizeof name, "p%s.t5_ids", p->string);
        check_ids(te, s ? s : "", 1, name);
        snprintf(name, sizeof name, "p%s.clip_l_ids", p->string);
        check_ids(te, s ? s : "", 0, name);
        sd_tensor *cond = NULL, *pooled = NULL;
        CHECK_OK(sd_text_encode(te, s ? s : "", 0, NULL, &cond, &pooled, &e), &e);
        snprintf(name, sizeof name, "p%s", p->string);
        compare_pair(name, cond, pooled, t5_layers, clip_layers);
        sd_tensor_unref(cond);
        sd_tensor_unref(pooled);
    }
}

/* ---- token weights on the T5 ---------------------------------------------------------- */

/* ComfyUI's ClipTokenWeightEncoder on the T5: with a weight != 1 the empty
 * prompt [</s>, <pad>...] of the same length is encoded too and each
 * weighted token becomes (z - e) * w + e. Checked against two separate
 * forwards (batched or not, so up to GEMM rounding: 1e-4 of the values). */
static void run_weights(const sd_text_encoder *te) {
    const char *text = "an (astronaut:1.5) riding a ((horse))";
    sd_error e;
    sd_prompt_vocab v;
    sd_prompt_opts o5, ol;
    sd_prompt_tokens *t5 = NULL, *tl = NULL;
    sd_prompt_opts_t5xxl(&o5);
    sd_prompt_opts_clip_l(&ol);
    CHECK_OK(sd_t5_tokenizer_prompt_vocab(sd_text_encoder_t5_tokenizer(te), &v, &e), &e);
    CHECK_OK(sd_prompt_tokenize_vocab(&v, text, &o5, &t5, &e), &e);
    CHECK_OK(sd_prompt_tokenize(sd_text_encoder_tokenizer(te), text, &ol, &tl, &e), &e);
    if (!t5 || !tl) goto done;
    CHECK(sd_prompt_tokens_has_weights(t5));
    sd_tensor *cond = NULL, *pooled = NULL;
    CHECK_OK(sd_text_encode_flux_tokens(te, tl, t5, 0, NULL, &cond, &pooled, &e), &e);
    int L = t5->chunk_len;
    int32_t *ids = malloc((size_t)2 * L * sizeof *ids);
    for (int j = 0; j < L; j++) {
        ids[j] = t5->tokens[j].id;
        ids[L + j] = j == 0 ? v.end : 0;
    }
    sd_t5 *m = (sd_t5 *)sd_text_encoder_t5(te);
    sd_bt *z = NULL, *em = NULL;
    sd_t5_tokens a = {1, L, ids, NULL}, b = {1, L, ids + L, NULL};
    CHECK_OK(sd_t5_forward(m, &a, 0, &z, &e), &e);
    CHECK_OK(sd_t5_forward(m, &b, 0, &em, &e), &e);
    sd_tensor *hz = z ? sd_bt_to_host(z) : NULL, *he = em ? sd_bt_to_host(em) : NULL;
    if (cond && hz && he && cond->shape[1] == L) {
        int64_t D = cond->shape[2];
        double worst = 0, scale = 0;
        for (int j = 0; j < L; j++) {
            float w = (float)t5->tokens[j].weight;
            for (int64_t k = 0; k < D; k++) {
                float zv = sd_tensor_f32(hz)[j * D + k], ev = sd_tensor_f32(he)[j * D + k];
                float want = w != 1.0f ? (zv - ev) * w + ev : zv;
                double d = fabs((double)sd_tensor_f32(cond)[j * D + k] - want);
                if (d > worst) worst = d;
                if (fabs(want) > scale) scale = fabs(want);
            }
        }
        printf("  T5 token weights: max |err| %.3g of max %.3g\n", worst, scale);
        CHECK_MSG(worst <= 1e-4 * scale, "weighted T5 cond differs from (z - e) * w + e by %g", worst);
    } else {
        CHECK_MSG(0, "weighted T5 encode: no output of length %d", L);
    }
    sd_tensor_unref(hz);
    sd_tensor_unref(he);
    sd_bt_free(z);
    sd_bt_free(em);
    free(ids);
    sd_tensor_unref(cond);
    sd_tensor_unref(pooled);
done:
    sd_prompt_tokens_free(t5);
    sd_prompt_tokens_free(tl);
}

/* ---- the single-file checkpoint ------------------------------------------------------- */

static int names(const cJSON *list, const char *want) {
    const cJSON *v;
    cJSON_ArrayForEach(v, list) if (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0) return 1;
    return 0;
}

static void run_single_files(sd_backend *be, const char *dir, const cJSON *m, const cJSON *settings,
                             const sd_text_encoder *parts) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(settings, "text"), *mod;
    const char *tl = json_str(text, "clip_l"), *tt = json_str(text, "t5xxl");
    if (!tl || !tt || !cJSON_GetObjectItemCaseSensitive(g_tensors, "flux_node.pooled")) return;
    cJSON_ArrayForEach(mod, cJSON_GetObjectItemCaseSensitive(m, "models")) {
        const cJSON *same = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(mod, "config"), "same_weights_as");
        if (!names(same, "t5xxl") || !names(same, "clip_l")) continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, json_str(mod, "file"));
        printf("single file %s\n", path);
        sd_error e;
        sd_st_file *f = NULL;
        sd_text_encoder *te = NULL;
        CHECK_OK(sd_st_open(path, &f, &e), &e);
        if (!f) continue;
        CHECK(sd_text_encoder_detect(f) == SD_TE_FLUX);
        sd_te_load_opts o = {.tok = sd_text_encoder_tokenizer(parts),
                             .t5tok = sd_text_encoder_t5_tokenizer(parts),
                             .clip_l_heads = json_int(cJSON_GetObjectItemCaseSensitive(settings, "clip_l"),
                                                      "num_attention_heads")};
        if (o.clip_l_heads < 0) o.clip_l_heads = 0;
        CHECK_OK(sd_text_encoder_load_ex(be, f, &o, &te, &e), &e);
        sd_st_close(f); /* the weights keep the mapping */
        if (!te) continue;
        CHECK(sd_text_encoder_kind(te) == SD_TE_FLUX);
        CHECK(memcmp(sd_t5_get_config(sd_text_encoder_t5(te)), sd_t5_get_config(sd_text_encoder_t5(parts)),
                     sizeof(sd_t5_config)) == 0);
        sd_tensor *cond = NULL, *pooled = NULL;
        CHECK_OK(sd_text_encode_flux(te, tl, tt, 0, NULL, &cond, &pooled, &e), &e);
        sd_golden_set_depth(6 * sd_clip_get_config(sd_text_encoder_clip_l(te))->layers);
        sd_golden_compare(g_case, g_tensors, g_file, "flux_node.pooled", pooled);
        sd_tensor *ref = sd_st_tensor_f32(g_file, "flux_node.cond", &e);
        int ok = cond && ref && cond->ndim == ref->ndim;
        for (int i = 0; ok && i < ref->ndim; i++) ok = cond->shape[i] == ref->shape[i];
        for (int64_t i = 0; ok && i < sd_tensor_numel(cond); i++) ok = isfinite(sd_tensor_f32(cond)[i]);
        CHECK_MSG(ok, "%s: the single file's cond is not a finite tensor of flux_node.cond's shape", path);
        sd_tensor_unref(ref);
        sd_tensor_unref(cond);
        sd_tensor_unref(pooled);
        sd_text_encoder_free(te);
    }
}

/* ---- the case ------------------------------------------------------------------------ */

/* <dir>/models/... path of the manifest model `key`. */
static void model_path(const cJSON *m, const char *dir, const char *key, char *out, size_t n) {
    const char *f = json_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), key), "file");
    snprintf(out, n, "%s/%s", dir, f ? f : "(none)");
}

/* A --tokenizer-dir for the run: t5_tokenizer/tokenizer.json -> the set's
 * tokenizer file, CLIP's vocab.json / merges.txt -> shared/data/clip. */
static void tokenizer_dir(const cJSON *m, const char *dir, char *out, size_t n) {
    snprintf(out, n, "%s", sd_test_tmpdir("golden_flux_text"));
    char d[2400], src[2400], dst[2400];
    snprintf(d, sizeof d, "%s/t5_tokenizer", out);
    mkdir(d, 0777);
    const char *tf = json_str(cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "file");
    snprintf(src, sizeof src, "%s/%s", dir, tf ? tf : "tokenizer/tokenizer.json");
    if (src[0] != '/') {
        char cwd[1024];
        if (getcwd(cwd, sizeof cwd)) {
            char abs[3500];
            snprintf(abs, sizeof abs, "%s/%s", cwd, src);
            snprintf(src, sizeof src, "%s", abs);
        }
    }
    snprintf(dst, sizeof dst, "%s/tokenizer.json", d);
    CHECK(symlink(src, dst) == 0);
    const char *names[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/data/clip/%s", sd_test_shared_dir(), names[i]);
        if (src[0] != '/') {
            char cwd[1024];
            if (getcwd(cwd, sizeof cwd)) {
                char abs[3500];
                snprintf(abs, sizeof abs, "%s/%s", cwd, src);
                snprintf(src, sizeof src, "%s", abs);
            }
        }
        snprintf(dst, sizeof dst, "%s/%s", out, names[i]);
        CHECK(symlink(src, dst) == 0);
    }
}

static void run_case(sd_backend *be, const char *dir, const cJSON *m, const cJSON *c) {
    g_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    int nt = cJSON_GetArraySize(g_tensors);
    g_used = calloc((size_t)nt + 1, sizeof *g_used);
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[2400], t5p[2400], clp[2400], tokdir[1200];
    snprintf(path, sizeof path, "%s/%s", dir, json_str(c, "file"));
    sd_error e;
    CHECK_OK(sd_st_open(path, &g_file, &e), &e);
    model_path(m, dir, "t5xxl", t5p, sizeof t5p);
    model_path(m, dir, "clip_l", clp, sizeof clp);
    tokenizer_dir(m, dir, tokdir, sizeof tokdir);
    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    o.tokenizer_dir = tokdir;
    o.clip_l_heads = json_int(cJSON_GetObjectItemCaseSensitive(settings, "clip_l"), "num_attention_heads");
    if (o.clip_l_heads < 0) o.clip_l_heads = 0;
    sd_checkpoint *ct5 = NULL, *ccl = NULL;
    sd_text_encoder *parts[2] = {NULL, NULL}, *te = NULL;
    CHECK_OK(sd_checkpoint_open(be, t5p, &o, &ct5, &e), &e);
    CHECK_OK(sd_checkpoint_open(be, clp, &o, &ccl, &e), &e);
    if (ct5) CHECK_OK(sd_checkpoint_text_encoder(ct5, &parts[0], &e), &e);
    if (ccl) CHECK_OK(sd_checkpoint_text_encoder(ccl, &parts[1], &e), &e);
    if (parts[0] && parts[1]) {
        CHECK(sd_text_encoder_kind(parts[0]) == SD_TE_T5 && sd_text_encoder_kind(parts[1]) == SD_TE_SD1);
        /* DualCLIPLoader takes the files in either order */
        const sd_text_encoder *order[2] = {parts[1], parts[0]};
        CHECK_OK(sd_text_encoder_combine(SD_TE_FLUX, order, 2, &te, &e), &e);
    }
    if (te && g_file) {
        const sd_t5_config *cfg = sd_t5_get_config(sd_text_encoder_t5(te));
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(settings, "t5");
        CHECK_MSG(cfg->d_model == json_int(st, "d_model") && cfg->heads == json_int(st, "num_heads") &&
                      cfg->layers == json_int(st, "num_layers") && cfg->d_ff == json_int(st, "d_ff") &&
                      cfg->d_kv == json_int(st, "d_kv") && cfg->vocab == json_int(st, "vocab_size") &&
                      cfg->buckets == json_int(st, "relative_attention_num_buckets") && cfg->gated &&
                      cfg->act == SD_T5_ACT_GELU_TANH,
                  "%s: T5 configuration read from %s differs from settings.t5", g_case, t5p);
        CHECK(sd_text_encoder_cond_dim(te) == cfg->d_model);
        run_raw(te);
        run_texts(te, settings);
        run_single_files(be, dir, m, settings, te);
        if (sd_golden_precision() == SD_PREC_F32) run_weights(te);
    }
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, g_tensors) {
        CHECK_MSG(g_used[i], "%s: tensor %s was not checked", g_case, t->string);
        i++;
    }
    sd_text_encoder_free(te);
    sd_checkpoint_unref(ct5);
    sd_checkpoint_unref(ccl);
    if (g_file) sd_st_close(g_file);
    g_file = NULL;
    free(g_used);
}

int main(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("flux"));
    cJSON *m = sd_golden_manifest(dir);
    sd_golden_require_cases_or_skip(m, dir, "text_encoder");
    sd_golden_clip_vocab(m);
    sd_backend *be = sd_golden_backend();
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        if (!be || !sd_golden_case_is(c, "text_encoder")) continue;
        g_case = json_str(c, "id") ? json_str(c, "id") : "?";
        printf("case %s\n", g_case);
        run_case(be, dir, m, c);
    }
    sd_backend_free(be);
    cJSON_Delete(m);
    return sd_test_finish();
}
