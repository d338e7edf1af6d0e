/* Golden test: SD3's text encoder against ComfyUI (testdata/sd3, cases of
 * component "text_encoder"), built the way TripleCLIPLoader builds it: the
 * manifest's clip_l, clip_g and t5xxl files opened as checkpoints (parts
 * told by their keys, weights kept as stored, tokenizers resolved from a
 * --tokenizer-dir holding t5_tokenizer/tokenizer.json and the CLIP vocab)
 * and composed by sd_text_encoder_combine in another order than given.
 * Tensors of the case, by name:
 *   p<i>.cond/.pooled: CLIPTextEncode of settings.clip_text_encode_prompts[i];
 *   sd3node*.cond/.pooled: CLIPTextEncodeSD3 of settings.text, each text
 *     listed after "empty" in the tensor's desc replaced by "" and
 *     empty_padding the desc's last word (none / empty_prompt);
 *   parts.*: each encoder alone on the first CLIPTextEncode prompt (what
 *     the reference recorded): CLIP-L / bigG layer -2 without final LN and
 *     their pooled outputs (CLIP-L's unprojected, bigG's projected), the
 *     T5's last hidden state.
 * Every tensor of the case must be checked. Configurations come from the
 * files and must equal settings.clip_l / clip_g / t5; the tiny CLIPs' head
 * counts are settings.*.num_attention_heads, given as ComfyUI's
 * clip_l_model_config / clip_g_model_config were (the manifest's
 * reference.overrides); the context width must equal settings.ctx_width.
 * Beyond the reference: every combination of empty texts and empty_padding
 * is checked against the parts (shapes, where each part lands, zeros), and
 * the set's single-file checkpoint (same_weights_as clip_l, clip_g, t5xxl;
 * T5 in F8_E4M3) loads through sd_text_encoder_load_ex as an SD3 encoder
 * whose CLIP outputs equal the split files' (its fp8 T5 belongs to the
 * end-to-end case). bf16 runs add tests/golden.h's slack with L = 6 matrix
 * ops per layer or block. */
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

static int heads_of(const cJSON *settings, const char *part) {
    int h = json_int(cJSON_GetObjectItemCaseSensitive(settings, part), "num_attention_heads");
    return h < 0 ? 0 : h;
}

/* The deepest encoder of te: L for the bf16 slack (6 matrix ops a layer). */
static int depth_of(const sd_text_encoder *te) {
    int d = 0;
    const sd_clip *cl[2] = {sd_text_encoder_clip_l(te), sd_text_encoder_clip_g(te)};
    for (int i = 0; i < 2; i++)
        if (cl[i] && sd_clip_get_config(cl[i])->layers > d) d = sd_clip_get_config(cl[i])->layers;
    if (sd_text_encoder_t5(te) && sd_t5_get_config(sd_text_encoder_t5(te))->layers > d)
        d = sd_t5_get_config(sd_text_encoder_t5(te))->layers;
    return 6 * d + 1;
}

static void compare_pair(const char *pfx, sd_tensor *cond, sd_tensor *pooled, int depth) {
    char n1[96], n2[96];
    snprintf(n1, sizeof n1, "%s.cond", pfx);
    snprintf(n2, sizeof n2, "%s.pooled", pfx);
    sd_golden_set_depth(depth);
    cmp(n1, cond);
    cmp(n2, pooled);
}

/* ---- configurations ------------------------------------------------------------- */

static void check_clip(const sd_clip *c, const cJSON *s, const char *part, sd_clip_act act) {
    const sd_clip_config *cfg = c ? sd_clip_get_config(c) : NULL;
    CHECK_MSG(cfg && cfg->hidden == json_int(s, "hidden_size") &&
                  cfg->heads == json_int(s, "num_attention_heads") &&
                  cfg->layers == json_int(s, "num_hidden_layers") &&
                  cfg->mlp == json_int(s, "intermediate_size") && cfg->act == act,
              "%s: %s configuration differs from settings.%s", g_case, part, part);
    const char *a = json_str(s, "hidden_act");
    CHECK_MSG(a && strcmp(a, act == SD_CLIP_ACT_GELU ? "gelu" : "quick_gelu") == 0,
              "%s: settings.%s.hidden_act is %s", g_case, part, a ? a : "absent");
}

static void check_t5(const sd_t5 *m, const cJSON *st) {
    const sd_t5_config *cfg = m ? sd_t5_get_config(m) : NULL;
    CHECK_MSG(cfg && cfg->d_model == json_int(st, "d_model") && cfg->heads == json_int(st, "num_heads") &&
                  cfg->layers == json_int(st, "num_layers") && cfg->d_ff == json_int(st, "d_ff") &&
                  cfg->d_kv == json_int(st, "d_kv") && cfg->vocab == json_int(st, "vocab_size") &&
                  cfg->buckets == json_int(st, "relative_attention_num_buckets") && cfg->gated &&
                  cfg->act == SD_T5_ACT_GELU_TANH,
              "%s: T5 configuration differs from settings.t5", g_case);
}

/* ---- the parts alone -------------------------------------------------------------- */

static sd_prompt_tokens *tokens(const sd_text_encoder *te, const char *text, char which) {
    sd_error e;
    sd_prompt_opts o;
    sd_prompt_tokens *t = NULL;
    if (which == 't') {
        sd_prompt_vocab v;
        sd_prompt_opts_t5xxl_sd3(&o);
        CHECK_OK(sd_t5_tokenizer_prompt_vocab(sd_text_encoder_t5_tokenizer(te), &v, &e), &e);
        CHECK_OK(sd_prompt_tokenize_vocab(&v, text, &o, &t, &e), &e);
    } else {
        if (which == 'g') sd_prompt_opts_clip_g(&o);
        else sd_prompt_opts_clip_l(&o);
        CHECK_OK(sd_prompt_tokenize(sd_text_encoder_tokenizer(te), text, &o, &t, &e), &e);
    }
    return t;
}

static int32_t *ids_of(const sd_prompt_tokens *t) {
    size_t n = (size_t)t->n_chunks * t->chunk_len;
    int32_t *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = t->tokens[i].id;
    return v;
}

/* A CLIP's layer -2 (no final LN) and its pooled output of the first chunk. */
static void clip_part(const sd_clip *c, const sd_prompt_tokens *t, int projected,
                      sd_tensor **hidden, sd_tensor **pooled) {
    sd_error e;
    int32_t *ids = ids_of(t);
    sd_clip_tokens in = {1, t->chunk_len, ids, NULL};
    sd_clip_output out = {0};
    CHECK_OK(sd_clip_forward((sd_clip *)c, &in, (sd_clip_layer){-2, 0}, &out, &e), &e);
    *hidden = out.hidden ? sd_bt_to_host(out.hidden) : NULL;
    sd_bt *p = projected ? out.projected : out.pooled;
    *pooled = p ? sd_bt_to_host(p) : NULL;
    sd_clip_output_free(&out);
    free(ids);
}

/* The five parts of text (parts[]: new host tensors); compare: check them
 * against the case's parts.* tensors. */
static void run_parts(const sd_text_encoder *te, const char *text, sd_tensor *parts[5], int compare) {
    sd_prompt_tokens *tl = tokens(te, text, 'l'), *tg = tokens(te, text, 'g'), *tt = tokens(te, text, 't');
    memset(parts, 0, 5 * sizeof *parts);
    if (tl && tg && tt) {
        clip_part(sd_text_encoder_clip_l(te), tl, 0, &parts[0], &parts[1]);
        clip_part(sd_text_encoder_clip_g(te), tg, 1, &parts[2], &parts[3]);
        sd_error e;
        int32_t *ids = ids_of(tt);
        sd_t5_tokens in = {1, tt->chunk_len, ids, NULL};
        sd_bt *out = NULL;
        CHECK_OK(sd_t5_forward((sd_t5 *)sd_text_encoder_t5(te), &in, 0, &out, &e), &e);
        parts[4] = out ? sd_bt_to_host(out) : NULL;
        sd_bt_free(out);
        free(ids);
    }
    static const char *const names[5] = {"l_hidden", "l_pooled", "g_hidden", "g_pooled", "t5_hidden"};
    for (int i = 0; i < 5; i++) {
        char n[64];
        snprintf(n, sizeof n, "parts.%s", names[i]);
        const sd_clip *c = i < 2 ? sd_text_encoder_clip_l(te) : sd_text_encoder_clip_g(te);
        int L = i < 4 ? sd_clip_get_config(c)->layers : sd_t5_get_config(sd_text_encoder_t5(te))->layers;
        sd_golden_set_depth(6 * L + 1);
        if (compare && cJSON_GetObjectItemCaseSensitive(g_tensors, n)) cmp(n, parts[i]);
    }
    sd_prompt_tokens_free(tl);
    sd_prompt_tokens_free(tg);
    sd_prompt_tokens_free(tt);
}

/* ---- CLIPTextEncodeSD3 ------------------------------------------------------------ */

/* The texts and padding a sd3node* tensor's desc names. */
static void node_inputs(const char *desc, const cJSON *text, const char **tl, const char **tg,
                        const char **tt, int *empty_prompt) {
    *tl = json_str(text, "clip_l");
    *tg = json_str(text, "clip_g");
    *tt = json_str(text, "t5xxl");
    const char *last = strrchr(desc, ',');
    last = last ? last + 1 : desc;
    while (*last == ' ') last++;
    *empty_prompt = strncmp(last, "empty_prompt", 12) == 0;
    const char *em = strstr(desc, "empty ");
    if (!em) return;
    if (strstr(em, "clip_l")) *tl = "";
    if (strstr(em, "clip_g")) *tg = "";
    if (strstr(em, "t5xxl")) *tt = "";
}

static void run_nodes(const sd_text_encoder *te, const cJSON *settings, int depth) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(settings, "text"), *t;
    cJSON_ArrayForEach(t, g_tensors) {
        size_t n = strlen(t->string);
        if (strncmp(t->string, "sd3node", 7) != 0 || n < 5 || strcmp(t->string + n - 5, ".cond") != 0)
            continue;
        const char *desc = json_str(t, "desc");
        const char *tl, *tg, *tt;
        int ep;
        node_inputs(desc ? desc : "", text, &tl, &tg, &tt, &ep);
        CHECK_MSG(tl && tg && tt, "%s: settings.text lacks clip_l / clip_g / t5xxl", g_case);
        if (!tl || !tg || !tt) continue;
        char pfx[64];
        snprintf(pfx, sizeof pfx, "%.*s", (int)(n - 5), t->string);
        printf("  %s: clip_l '%s' clip_g '%s' t5xxl '%s' padding %s\n", pfx, tl, tg, tt,
               ep ? "empty_prompt" : "none");
        sd_tensor *cond = NULL, *pooled = NULL;
        sd_error e;
        CHECK_OK(sd_text_encode_sd3(te, tl, tg, tt, ep, 0, NULL, &cond, &pooled, &e), &e);
        compare_pair(pfx, cond, pooled, depth);
        sd_tensor_unref(cond);
        sd_tensor_unref(pooled);
    }
}

/* max |a[region] - b| over a [1, T, W] tensor a at token offset t0 and
 * channel offset c0, b [1, Tb, Wb]. */
static double region_diff(const sd_tensor *a, int64_t t0, int64_t c0, const sd_tensor *b) {
    double m = 0;
    int64_t W = a->shape[2], Tb = b->shape[1], Wb = b->shape[2];
    for (int64_t i = 0; i < Tb; i++)
        for (int64_t j = 0; j < Wb; j++) {
            double d = fabs((double)sd_tensor_f32(a)[(t0 + i) * W + c0 + j] - sd_tensor_f32(b)[i * Wb + j]);
            if (d > m) m = d;
        }
    return m;
}

static double region_max(const sd_tensor *a, int64_t t0, int64_t t1, int64_t c0, int64_t c1) {
    double m = 0;
    int64_t W = a->shape[a->ndim - 1];
    for (int64_t i = t0; i < t1; i++)
        for (int64_t j = c0; j < c1; j++) m = fmax(m, fabs(sd_tensor_f32(a)[i * W + j]));
    return m;
}

/* Every combination of empty texts and empty_padding on one text, checked
 * against the parts of that text and of "": which tokens each part gives,
 * where it lands, what stays zero. Tolerance: the same computation batched
 * alike (one sequence each), so only GEMM thread splits differ: 1e-4 of the
 * values' scale. */
static void run_combinations(const sd_text_encoder *te, const char *text) {
    sd_tensor *full[5], *empty[5];
    run_parts(te, text, full, 0);
    run_parts(te, "", empty, 0);
    int ok_parts = 1;
    for (int i = 0; i < 5; i++) ok_parts &= full[i] && empty[i];
    if (!ok_parts) goto done;
    int64_t Lw = full[0]->shape[2], Gw = full[2]->shape[2], Lp = full[1]->shape[1],
            Gp = full[3]->shape[1], ctx = sd_text_encoder_cond_dim(te);
    for (int mask = 0; mask < 16; mask++) {
        int el = mask & 1, eg = mask & 2, et = mask & 4, ep = (mask & 8) != 0;
        sd_tensor *cond = NULL, *pooled = NULL;
        sd_error e;
        CHECK_OK(sd_text_encode_sd3(te, el ? "" : text, eg ? "" : text, et ? "" : text, ep, 0, NULL,
                                    &cond, &pooled, &e),
                 &e);
        if (!cond || !pooled) continue;
        /* none: an empty text contributes no tokens; l and g are refilled
         * with the empty prompt when the other has some */
        int no_l = el && !ep, no_g = eg && !ep, no_t = et && !ep;
        int lg = !(no_l && no_g);
        const sd_tensor *pl = lg ? (el ? empty : full)[0] : NULL, *pg = lg ? (eg ? empty : full)[2] : NULL;
        int64_t want_t = (lg ? 77 : 0) + (no_t ? 1 : 77);
        double scale = 1e-3, worst = 0;
        int shape_ok = cond->ndim == 3 && cond->shape[1] == want_t && cond->shape[2] == ctx &&
                       pooled->ndim == 2 && pooled->shape[1] == Lp + Gp;
        CHECK_MSG(shape_ok, "combination %d: cond [%lld, %lld], pooled %lld (want %lld tokens)", mask,
                  (long long)cond->shape[1], (long long)cond->shape[2], (long long)pooled->shape[1],
                  (long long)want_t);
        if (!shape_ok) goto next;
        if (lg) {
            worst = fmax(worst, region_diff(cond, 0, 0, pl));
            worst = fmax(worst, region_diff(cond, 0, Lw, pg));
            worst = fmax(worst, region_max(cond, 0, 77, Lw + Gw, ctx));
            sd_tensor *pp[2] = {(el ? empty : full)[1], (eg ? empty : full)[3]};
            for (int k = 0; k < 2; k++)
                for (int64_t j = 0; j < pp[k]->shape[1]; j++)
                    worst = fmax(worst, fabs((double)sd_tensor_f32(pooled)[(k ? Lp : 0) + j] -
                                             sd_tensor_f32(pp[k])[j]));
        } else {
            worst = fmax(worst, region_max(pooled, 0, 1, 0, Lp + Gp));
        }
        if (!no_t) worst = fmax(worst, region_diff(cond, lg ? 77 : 0, 0, (et ? empty : full)[4]));
        CHECK_MSG(worst <= scale, "combination %d (empty l %d g %d t5 %d, %s): off by %g", mask, !!el,
                  !!eg, !!et, ep ? "empty_prompt" : "none", worst);
    next:
        sd_tensor_unref(cond);
        sd_tensor_unref(pooled);
    }
    /* an empty t5xxl under "none" is the T5 of [</s>] alone: one token,
     * equal to the first token of T5("") only in shape, so checked apart */
    sd_tensor *c1 = NULL, *p1 = NULL;
    sd_error e;
    CHECK_OK(sd_text_encode_sd3(te, "", "", "", 0, 0, NULL, &c1, &p1, &e), &e);
    CHECK(c1 && c1->ndim == 3 && c1->shape[1] == 1 && c1->shape[2] == ctx);
    sd_tensor_unref(c1);
    sd_tensor_unref(p1);
done:
    for (int i = 0; i < 5; i++) {
        sd_tensor_unref(full[i]);
        sd_tensor_unref(empty[i]);
    }
}

/* ---- the single-file checkpoint ------------------------------------------------------- */

static int names(const cJSON *list, const char *want) {
    const cJSON *v;
    cJSON_ArrayForEach(v, list) if (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0) return 1;
    return 0;
}

static void run_single_files(sd_backend *be, const char *dir, const cJSON *m, const cJSON *settings,
                             const sd_text_encoder *parts, const char *prompt) {
    const cJSON *mod;
    cJSON_ArrayForEach(mod, cJSON_GetObjectItemCaseSensitive(m, "models")) {
        const cJSON *same = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(mod, "config"), "same_weights_as");
        if (!names(same, "clip_l") || !names(same, "clip_g") || !names(same, "t5xxl")) continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, json_str(mod, "file"));
        printf("single file %s\n", path);
        sd_error e;
        sd_st_file *f = NULL;
        sd_text_encoder *te = NULL;
        CHECK_OK(sd_st_open(path, &f, &e), &e);
        if (!f) continue;
        CHECK(sd_text_encoder_detect(f) == SD_TE_SD3);
        CHECK(sd_text_encoder_file_vocabs(f) == (SD_TE_VOCAB_CLIP | SD_TE_VOCAB_T5));
        sd_te_load_opts o = {.tok = sd_text_encoder_tokenizer(parts),
                             .t5tok = sd_text_encoder_t5_tokenizer(parts),
                             .clip_l_heads = heads_of(settings, "clip_l"),
                             .clip_g_heads = heads_of(settings, "clip_g")};
        CHECK_OK(sd_text_encoder_load_ex(be, f, &o, &te, &e), &e);
        sd_st_close(f); /* the weights keep the mapping */
        if (!te) continue;
        CHECK(sd_text_encoder_kind(te) == SD_TE_SD3 && sd_text_encoder_clip_l(te) &&
              sd_text_encoder_clip_g(te) && sd_text_encoder_t5(te));
        CHECK(memcmp(sd_t5_get_config(sd_text_encoder_t5(te)), sd_t5_get_config(sd_text_encoder_t5(parts)),
                     sizeof(sd_t5_config)) == 0);
        /* the CLIPs hold the same F16 weights: the same cond / pooled where
         * the CLIPs decide them (tolerance: the manifest's for p<i>) */
        sd_tensor *c1 = NULL, *p1 = NULL, *c2 = NULL, *p2 = NULL;
        CHECK_OK(sd_text_encode_sd3(te, prompt, prompt, "", 0, 0, NULL, &c1, &p1, &e), &e);
        CHECK_OK(sd_text_encode_sd3(parts, prompt, prompt, "", 0, 0, NULL, &c2, &p2, &e), &e);
        double ma = 0, worst = 0;
        long w = 0;
        CHECK(p1 && p2 && sd_test_allclose(p1, p2, 1e-5, 1e-5, &ma, &w));
        int ok = c1 && c2 && c1->ndim == 3 && c2->ndim == 3 && c1->shape[1] == c2->shape[1] &&
                 c1->shape[2] == c2->shape[2] && c1->shape[1] > 77;
        for (int64_t i = 0; ok && i < 77 * c1->shape[2]; i++)
            worst = fmax(worst, fabs((double)sd_tensor_f32(c1)[i] - sd_tensor_f32(c2)[i]));
        CHECK_MSG(ok && worst <= 1e-5, "%s: the single file's CLIP conditioning differs from the split "
                  "files' (by %g)", path, worst);
        /* its fp8 T5 gives a finite cond of the split files' shape */
        sd_tensor_unref(c1);
        sd_tensor_unref(p1);
        c1 = p1 = NULL;
        CHECK_OK(sd_text_encode(te, prompt, 0, NULL, &c1, &p1, &e), &e);
        sd_tensor_unref(c2);
        sd_tensor_unref(p2);
        c2 = p2 = NULL;
        CHECK_OK(sd_text_encode(parts, prompt, 0, NULL, &c2, &p2, &e), &e);
        ok = c1 && c2 && c1->ndim == c2->ndim && sd_tensor_numel(c1) == sd_tensor_numel(c2);
        for (int64_t i = 0; ok && i < sd_tensor_numel(c1); i++) ok = isfinite(sd_tensor_f32(c1)[i]);
        CHECK_MSG(ok, "%s: the single file's cond is not finite or not of the split files' shape", path);
        sd_tensor_unref(c1);
        sd_tensor_unref(p1);
        sd_tensor_unref(c2);
        sd_tensor_unref(p2);
        sd_text_encoder_free(te);
    }
}

/* ---- the case ------------------------------------------------------------------------ */

static void model_path(const cJSON *m, const char *dir, const char *key, char *out, size_t n) {
    const char *f = json_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), key), "file");
    snprintf(out, n, "%s/%s", dir, f ? f : "(none)");
}

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

/* A --tokenizer-dir: t5_tokenizer/tokenizer.json -> manifest tokenizer.t5,
 * vocab.json / merges.txt -> shared/data/clip. */
static void tokenizer_dir(const cJSON *m, const char *dir, char *out, size_t n) {
    snprintf(out, n, "%s", sd_test_tmpdir("golden_sd3_text"));
    char d[2400], src[2400], dst[2400];
    snprintf(d, sizeof d, "%s/t5_tokenizer", out);
    mkdir(d, 0777);
    const char *t5 = json_str(cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "t5");
    CHECK_MSG(sd_golden_resolve_path(dir, t5, src, sizeof src), "manifest tokenizer.t5 names no file");
    snprintf(dst, sizeof dst, "%s/tokenizer.json", d);
    abs_link(src, dst);
    const char *files[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/data/clip/%s", sd_test_shared_dir(), files[i]);
        snprintf(dst, sizeof dst, "%s/%s", out, files[i]);
        abs_link(src, dst);
    }
}

static void run_case(sd_backend *be, const char *dir, const cJSON *m, const cJSON *c) {
    g_tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    int nt = cJSON_GetArraySize(g_tensors);
    g_used = calloc((size_t)nt + 1, sizeof *g_used);
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[2400], files[3][2400], tokdir[1200];
    static const char *const keys[3] = {"clip_l", "clip_g", "t5xxl"};
    snprintf(path, sizeof path, "%s/%s", dir, json_str(c, "file"));
    sd_error e;
    CHECK_OK(sd_st_open(path, &g_file, &e), &e);
    for (int i = 0; i < 3; i++) model_path(m, dir, keys[i], files[i], sizeof files[i]);
    tokenizer_dir(m, dir, tokdir, sizeof tokdir);
    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    o.tokenizer_dir = tokdir;
    o.clip_l_heads = heads_of(settings, "clip_l");
    o.clip_g_heads = heads_of(settings, "clip_g");
    sd_checkpoint *ck[3] = {NULL, NULL, NULL};
    sd_text_encoder *parts[3] = {NULL, NULL, NULL}, *te = NULL;
    static const sd_te_kind want[3] = {SD_TE_SD1, SD_TE_SDXL_REFINER, SD_TE_T5};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(sd_checkpoint_open(be, files[i], &o, &ck[i], &e), &e);
        if (ck[i]) CHECK_OK(sd_checkpoint_text_encoder(ck[i], &parts[i], &e), &e);
        CHECK_MSG(parts[i] && sd_text_encoder_kind(parts[i]) == want[i], "%s: %s is not a %s part",
                  g_case, files[i], sd_te_kind_name(want[i]));
    }
    if (parts[0] && parts[1] && parts[2]) {
        /* TripleCLIPLoader takes the files in any order */
        const sd_text_encoder *order[3] = {parts[2], parts[0], parts[1]};
        CHECK_OK(sd_text_encoder_combine(SD_TE_SD3, order, 3, &te, &e), &e);
    }
    if (te && g_file) {
        check_clip(sd_text_encoder_clip_l(te), cJSON_GetObjectItemCaseSensitive(settings, "clip_l"),
                   "clip_l", SD_CLIP_ACT_QUICK_GELU);
        check_clip(sd_text_encoder_clip_g(te), cJSON_GetObjectItemCaseSensitive(settings, "clip_g"),
                   "clip_g", SD_CLIP_ACT_GELU);
        check_t5(sd_text_encoder_t5(te), cJSON_GetObjectItemCaseSensitive(settings, "t5"));
        CHECK_MSG(sd_text_encoder_cond_dim(te) == json_int(settings, "ctx_width"),
                  "%s: context width %d, settings.ctx_width %d", g_case, sd_text_encoder_cond_dim(te),
                  json_int(settings, "ctx_width"));
        int depth = depth_of(te);
        const cJSON *p, *prompts = cJSON_GetObjectItemCaseSensitive(settings, "clip_text_encode_prompts");
        const char *first = NULL;
        cJSON_ArrayForEach(p, prompts) {
            const char *s = cJSON_GetStringValue(p);
            if (!first) first = s;
            sd_tensor *cond = NULL, *pooled = NULL;
            CHECK_OK(sd_text_encode(te, s ? s : "", 0, NULL, &cond, &pooled, &e), &e);
            char pfx[64];
            snprintf(pfx, sizeof pfx, "p%s", p->string);
            compare_pair(pfx, cond, pooled, depth);
            sd_tensor_unref(cond);
            sd_tensor_unref(pooled);
        }
        CHECK_MSG(first != NULL, "%s: no clip_text_encode_prompts", g_case);
        run_nodes(te, settings, depth);
        if (first) {
            sd_tensor *pt[5];
            run_parts(te, first, pt, 1);
            for (int i = 0; i < 5; i++) sd_tensor_unref(pt[i]);
            if (sd_golden_precision() == SD_PREC_F32) run_combinations(te, first);
            run_single_files(be, dir, m, settings, te, first);
        }
    }
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, g_tensors) {
        CHECK_MSG(g_used[i], "%s: tensor %s was not checked", g_case, t->string);
        i++;
    }
    sd_text_encoder_free(te);
    for (int k = 0; k < 3; k++) sd_checkpoint_unref(ck[k]);
    if (g_file) sd_st_close(g_file);
    g_file = NULL;
    free(g_used);
}

int main(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("sd3"));
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
