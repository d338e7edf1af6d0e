/* Golden test: Z-Image's text encoder against ComfyUI (testdata/zimage,
 * cases of component "text_encoder"), built the way CLIPLoader(type
 * lumina2) builds it: the manifest's qwen3_4b file opened as a checkpoint
 * (detected by its keys, weights kept as stored, BF16; the Qwen tokenizer
 * resolved from a --tokenizer-dir holding qwen25_tokenizer/). Tensors of the
 * case, by name:
 *   raw.ids (input) -> raw.embeddings, raw.layers.N, raw.last_hidden_normed,
 *     raw.hidden_m2: the Qwen3 forward alone (every layer; the last through
 *     model.norm; layer num_layers-2 without it);
 *   p<i>.ids (input: our tokenization must give it), p<i>.cond,
 *     p<i>.attention_mask: CLIPTextEncode of settings.text_prompts[i].
 * Every tensor of the case must be checked. The configuration read from
 * the file must equal settings.qwen3 / head_dim / rope_theta /
 * rms_norm_eps. A Qwen3 is taken for Qwen3-4B by its width (ComfyUI's
 * detect_te_model: 2560); the tiny model's width is settings.qwen3
 * .hidden_size, given as the reference's detection override did (the
 * manifest's reference.overrides). bf16 runs add tests/golden.h's slack with
 * L = 6 matrix ops (q, QK, PV, o, gate / up, down) per layer. */
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

static double json_num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *json_str(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* ---- the decoder alone ---------------------------------------------------------- */

static void tap(void *user, const char *name, const sd_bt *t) {
    (void)user;
    char ref[64];
    int depth = 0;
    if (strcmp(name, "embeddings") == 0) {
        snprintf(ref, sizeof ref, "raw.embeddings");
    } else if (strncmp(name, "layers.", 7) == 0) {
        snprintf(ref, sizeof ref, "raw.%s", name);
        depth = 6 * (atoi(name + 7) + 1);
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
    sd_qwen3 *m = (sd_qwen3 *)sd_text_encoder_qwen3(te);
    int L = sd_qwen3_get_config(m)->layers;
    sd_qwen3_tokens in = {n, len, v, NULL, NULL};
    sd_bt *out = NULL;
    /* every layer (taps), the last through model.norm */
    sd_qwen3_set_tap(m, tap, NULL);
    CHECK_OK(sd_qwen3_forward(m, &in, -1, 1, &out, &e), &e);
    sd_qwen3_set_tap(m, NULL, NULL);
    sd_golden_set_depth(6 * L);
    sd_tensor *h = out ? sd_bt_to_host(out) : NULL;
    cmp("raw.last_hidden_normed", h);
    sd_tensor_unref(h);
    sd_bt_free(out);
    out = NULL;
    /* layer num_layers-2, no norm: the conditioning */
    CHECK_OK(sd_qwen3_forward(m, &in, -2, 0, &out, &e), &e);
    sd_golden_set_depth(6 * (L - 1));
    h = out ? sd_bt_to_host(out) : NULL;
    cmp("raw.hidden_m2", h);
    sd_tensor_unref(h);
    sd_bt_free(out);
    free(v);
    sd_tensor_unref(ids);
}

/* ---- text through the encoder ----------------------------------------------------- */

static void check_ids(const sd_text_encoder *te, const char *text, const char *name) {
    sd_error e;
    sd_tensor *ref = sd_st_tensor(g_file, name, &e);
    CHECK_MSG(ref != NULL, "%s: no %s", g_case, name);
    if (!ref) return;
    sd_golden_mark(g_tensors, g_used, name);
    sd_prompt_tokens *t = NULL;
    CHECK_OK(sd_text_tokenize_zimage(sd_text_encoder_qwen_tokenizer(te), text, &t, &e), &e);
    int ok = t && ref->dtype == SD_I64 && ref->ndim == 2 && ref->shape[0] == t->n_chunks &&
             ref->shape[1] == t->chunk_len;
    for (int64_t i = 0; ok && i < (int64_t)t->chunk_len; i++) ok = ((const int64_t *)ref->data)[i] == t->tokens[i].id;
    CHECK_MSG(ok, "%s %s: our tokenization differs", g_case, name);
    sd_prompt_tokens_free(t);
    sd_tensor_unref(ref);
}

static void run_texts(const sd_text_encoder *te, const cJSON *settings) {
    int L = sd_qwen3_get_config(sd_text_encoder_qwen3(te))->layers;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "text_prompts")) {
        const char *s = cJSON_GetStringValue(p);
        char name[64];
        snprintf(name, sizeof name, "p%s.ids", p->string);
        check_ids(te, s ? s : "", name);
        sd_tensor *cond = NULL, *pooled = NULL, *mask = NULL;
        sd_error e;
        CHECK_OK(sd_text_encode_masked(te, s ? s : "", 0, NULL, &cond, &pooled, &mask, &e), &e);
        CHECK(pooled == NULL);
        snprintf(name, sizeof name, "p%s.cond", p->string);
        sd_golden_set_depth(6 * (L - 1));
        cmp(name, cond);
        snprintf(name, sizeof name, "p%s.attention_mask", p->string);
        sd_golden_set_depth(0);
        /* an I64 tensor compares exactly as its F32 copy (0 / 1) */
        sd_tensor *mf = mask ? sd_tensor_to_dtype(mask, SD_F32) : NULL;
        cmp(name, mf);
        sd_tensor_unref(mf);
        sd_tensor_unref(cond);
        sd_tensor_unref(mask);
    }
}

/* The mask rule and CLIPSetLastLayer beyond the reference: a typed
 * <|endoftext|> (the pad token) masks itself and all after it; -1 gives the
 * last layer without norm, a clip skip deeper than the model the
 * final-normed last layer. Checked against the decoder run directly. */
static void run_rules(const sd_text_encoder *te) {
    if (sd_golden_precision() != SD_PREC_F32) return;
    sd_error e;
    sd_prompt_tokens *t = NULL;
    CHECK_OK(sd_text_tokenize_zimage(sd_text_encoder_qwen_tokenizer(te), "a cat<|endoftext|>and a dog", &t, &e), &e);
    sd_tensor *cond = NULL, *mask = NULL;
    if (t) CHECK_OK(sd_text_encode_zimage_tokens(te, t, 0, NULL, &cond, &mask, &e), &e);
    if (t && mask) {
        int first = -1, ok = 1;
        for (int j = 0; j < t->chunk_len; j++)
            if (first < 0 && t->tokens[j].id == SD_TE_QWEN3_PAD) first = j;
        for (int j = 0; j < t->chunk_len; j++) ok &= ((int64_t *)mask->data)[j] == (first < 0 || j < first);
        CHECK_MSG(first > 0 && ok, "the mask is not 1 before the first <|endoftext|> (%d) and 0 after", first);
    }
    sd_qwen3 *m = (sd_qwen3 *)sd_text_encoder_qwen3(te);
    int L = sd_qwen3_get_config(m)->layers;
    static const int skips[2] = {-1, -100};
    for (int k = 0; t && k < 2; k++) {
        sd_tensor *c2 = NULL, *m2 = NULL;
        CHECK_OK(sd_text_encode_zimage_tokens(te, t, skips[k], NULL, &c2, &m2, &e), &e);
        int32_t *ids = malloc((size_t)t->chunk_len * sizeof *ids);
        uint8_t *mk = malloc((size_t)t->chunk_len);
        for (int j = 0; j < t->chunk_len; j++) {
            ids[j] = t->tokens[j].id;
            mk[j] = m2 ? (uint8_t)((int64_t *)m2->data)[j] : 1;
        }
        sd_qwen3_tokens in = {1, t->chunk_len, ids, NULL, mk};
        sd_bt *out = NULL;
        CHECK_OK(sd_qwen3_forward(m, &in, -1, -skips[k] > L, &out, &e), &e);
        sd_tensor *want = out ? sd_bt_to_host(out) : NULL;
        double ma = 0;
        long w = 0;
        CHECK_MSG(c2 && want && sd_test_allclose(c2, want, 0, 0, &ma, &w),
                  "clip skip %d: differs from the decoder's layer by %g", skips[k], ma);
        sd_tensor_unref(want);
        sd_bt_free(out);
        free(ids);
        free(mk);
        sd_tensor_unref(c2);
        sd_tensor_unref(m2);
    }
    sd_tensor_unref(cond);
    sd_tensor_unref(mask);
    sd_prompt_tokens_free(t);
}

/* ---- the case ------------------------------------------------------------------------ */

static void abs_link(const char *src, const char *dst) {
    char abs[3500];
    if (src[0] != '/') {
        char cwd[1024];
        if (getcwd(cwd, sizeof cwd)) snprintf(abs, sizeof abs, "%s/%s", cwd, src);
        else snprintf(abs, sizeof abs, "%s", src);
    } else {
        snprintf(abs, sizeof abs, "%s", src);
    }
    CHECK_MSG(symlink(abs, dst) == 0, "symlink %s", dst);
}

/* A --tokenizer-dir whose qwen25_tokenizer/ is the manifest's tokenizer folder. */
static void tokenizer_dir(const cJSON *m, const char *dir, char *out, size_t n) {
    snprintf(out, n, "%s", sd_test_tmpdir("golden_zimage_text"));
    char src[2400], dst[2400];
    const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "tokenizer"), "files");
    CHECK_MSG(sd_golden_resolve_path(dir, cJSON_GetStringValue(cJSON_GetArrayItem(files, 0)), src, sizeof src),
              "manifest tokenizer.files names no file");
    char *slash = strrchr(src, '/');
    if (slash) *slash = 0;
    snprintf(dst, sizeof dst, "%s/" SD_QWEN_TOKENIZER_SUBDIR, out);
    abs_link(src, dst);
}

static void run_case(sd_backend *be, const char *dir, const cJSON *m, const cJSON *c) {
    g_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    int nt = cJSON_GetArraySize(g_tensors);
    g_used = calloc((size_t)nt + 1, sizeof *g_used);
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    const cJSON *sq = cJSON_GetObjectItemCaseSensitive(settings, "qwen3");
    char path[2400], model[2400], tokdir[1200];
    snprintf(path, sizeof path, "%s/%s", dir, json_str(c, "file"));
    sd_error e;
    CHECK_OK(sd_st_open(path, &g_file, &e), &e);
    const char *f = json_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), "qwen3_4b"), "file");
    snprintf(model, sizeof model, "%s/%s", dir, f ? f : "(none)");
    tokenizer_dir(m, dir, tokdir, sizeof tokdir);
    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    o.tokenizer_dir = tokdir;
    o.qwen3_4b_width = json_int(sq, "hidden_size") > 0 ? json_int(sq, "hidden_size") : 0;
    sd_checkpoint *ck = NULL;
    sd_text_encoder *te = NULL;
    CHECK_OK(sd_checkpoint_open(be, model, &o, &ck, &e), &e);
    if (ck) {
        CHECK(sd_checkpoint_info(ck)->te_kind == SD_TE_ZIMAGE && !sd_checkpoint_info(ck)->has_unet);
        CHECK_OK(sd_checkpoint_text_encoder(ck, &te, &e), &e);
    }
    if (te && g_file) {
        const sd_qwen3_config *cfg = sd_qwen3_get_config(sd_text_encoder_qwen3(te));
        CHECK_MSG(cfg->hidden == json_int(sq, "hidden_size") && cfg->intermediate == json_int(sq, "intermediate_size") &&
                      cfg->layers == json_int(sq, "num_hidden_layers") &&
                      cfg->heads == json_int(sq, "num_attention_heads") &&
                      cfg->kv_heads == json_int(sq, "num_key_value_heads") &&
                      cfg->head_dim == json_int(settings, "head_dim") &&
                      cfg->rope_theta == json_num(settings, "rope_theta") &&
                      cfg->eps == (float)json_num(settings, "rms_norm_eps"),
                  "%s: Qwen3 configuration read from %s differs from the settings", g_case, model);
        CHECK(sd_text_encoder_cond_dim(te) == cfg->hidden && sd_text_encoder_pooled_dim(te) == 0);
        run_raw(te);
        run_texts(te, settings);
        run_rules(te);
    }
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, g_tensors) {
        CHECK_MSG(g_used[i], "%s: tensor %s was not checked", g_case, t->string);
        i++;
    }
    sd_checkpoint_unref(ck);
    if (g_file) sd_st_close(g_file);
    g_file = NULL;
    free(g_used);
}

int main(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("zimage"));
    cJSON *m = sd_golden_manifest(dir);
    sd_golden_require_cases_or_skip(m, dir, "text_encoder");
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
