/* test_golden_clip.c - the CLIP text encoders against ComfyUI goldens.
 *
 * Walks manifest.json ($SDFLOW_TESTDATA, default sd_test_testdata_dir()) and
 * runs every case whose component is "clip". The model of a case is the
 * manifest "models" entry whose key is one of the '_'-separated words of the
 * case id; its text encoder is detected and loaded (sd_text_encoder_load)
 * and its configuration checked against the case settings. Tensors are
 * grouped by the prefix before the first '.':
 *   raw       "<raw>[.<enc>].ids" inputs go straight through the transformer
 *             (enc l/g, or the only encoder); outputs embeddings, hidden_all
 *             (residual after every layer), last_hidden, penultimate_ln,
 *             penultimate_noln, pooled / pooled_unprojected,
 *             pooled_projected;
 *   sdxlnode  settings.sdxlnode text_g / text_l through CLIPTextEncodeSDXL;
 *   others    "<g>[.<enc>].ids" + ".weights" inputs (token ids and weights
 *             per chunk) through sd_text_encode_tokens; outputs
 *             cond[_<variant>] / pooled[_<variant>] with variant "last" (no
 *             CLIPSetLastLayer) or "skipK" (CLIPSetLastLayer(-K)). When the
 *             case settings hold the group's prompt text ("p3" -> prompts
 *             "3") and the CLIP vocabulary is present ($SDFLOW_SHARED/data/
 *             clip, default sd_test_shared_dir()), the text is also encoded
 *             from scratch (sd_text_encode) and compared the same way.
 * Every expected/intermediate tensor is compared at its own tolerance and
 * its worst error printed; an expected tensor nothing produces is a failure.
 * Every file the manifest lists must be present (an absent one fails).
 * Without the manifest the test exits 77; without the CLIP vocabulary it
 * runs what it can and then exits 77 (a partial run is not a pass). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/text_encode.h"
#include "testutil.h"
#include "golden.h"

#define MAX_OUT 24

typedef struct {
    char name[64]; /* suffix the manifest uses */
    sd_tensor *t;
} output;

typedef struct {
    int n;
    output o[MAX_OUT];
} outputs;

static sd_backend *be;
static sd_tokenizer *tok;
static int n_untokenized; /* groups whose text path did not run (no vocabulary) */

static void outs_add(outputs *os, const char *name, sd_tensor *t) {
    if (os->n == MAX_OUT) {
        sd_tensor_unref(t);
        return;
    }
    snprintf(os->o[os->n].name, sizeof os->o[os->n].name, "%s", name);
    os->o[os->n++].t = t;
}

static void outs_free(outputs *os) {
    for (int i = 0; i < os->n; i++) sd_tensor_unref(os->o[i].t);
    os->n = 0;
}

static const output *outs_find(const outputs *os, const char *name) {
    for (int i = 0; i < os->n; i++)
        if (strcmp(os->o[i].name, name) == 0) return &os->o[i];
    return NULL;
}

static const char *role_of(cJSON *spec) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "role"));
}

static void tol_of(cJSON *tensor, cJSON *case_tol, double *atol, double *rtol) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(tensor, "tolerance");
    if (!t) t = case_tol;
    cJSON *a = cJSON_GetObjectItemCaseSensitive(t, "atol"), *r = cJSON_GetObjectItemCaseSensitive(t, "rtol");
    *atol = cJSON_IsNumber(a) ? a->valuedouble : 0;
    *rtol = cJSON_IsNumber(r) ? r->valuedouble : 0;
}

static void compare(const char *name, const char *tag, const sd_tensor *got, sd_st_file *g,
                    cJSON *spec, cJSON *case_tol) {
    sd_error err;
    sd_tensor *want = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(want != NULL, "golden tensor %s missing from %s", name, sd_st_path(g));
    if (!want) return;
    double atol, rtol, worst = 0;
    long wi = -1;
    tol_of(spec, case_tol, &atol, &rtol);
    int same = got && got->ndim == want->ndim;
    for (int i = 0; same && i < got->ndim; i++) same = got->shape[i] == want->shape[i];
    char b1[96], b2[96];
    CHECK_MSG(same, "%s%s: got %s, want %s", name, tag,
              got ? sd_tensor_shape_str(got, b1, sizeof b1) : "NULL",
              sd_tensor_shape_str(want, b2, sizeof b2));
    if (same) {
        /* bf16 slack (golden.h) for the encoder's outputs, none for the
         * tokenizer's ids and prompt weights */
        size_t n = strlen(name);
        int host = (n >= 4 && strcmp(name + n - 4, ".ids") == 0) ||
                   (n >= 8 && strcmp(name + n - 8, ".weights") == 0);
        sd_golden_set_depth(host ? 0 : SD_GOLDEN_DEPTH_CLIP);
        int ok = sd_golden_allclose(got, want, atol, rtol, &worst, &wi);
        printf("    %-28s%-7s worst |d| %.3g (atol %.3g rtol %.3g slack %.3g*rms; %.2f of bound)%s\n",
               name, tag, worst, atol, rtol, sd_golden_slack(), sd_golden_used(), ok ? "" : "  FAIL");
        CHECK_MSG(ok, "%s%s: worst |d| %.3g at %ld exceeds atol %g rtol %g", name, tag, worst, wi,
                  atol, rtol);
    }
    sd_tensor_unref(want);
}

/* Compare every expected/intermediate tensor "<group>[.<enc>].<suffix>"
 * (enc NULL: exactly two parts) against the outputs produced for it. */
static void compare_group(sd_st_file *g, cJSON *tensors, cJSON *case_tol, const char *group,
                          const char *enc, const outputs *os, const char *tag) {
    char prefix[128];
    if (enc) snprintf(prefix, sizeof prefix, "%s.%s.", group, enc);
    else snprintf(prefix, sizeof prefix, "%s.", group);
    size_t pl = strlen(prefix);
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *r = role_of(t);
        if (strncmp(t->string, prefix, pl) != 0 || !r || strcmp(r, "input") == 0) continue;
        const char *suffix = t->string + pl;
        if (strchr(suffix, '.')) continue; /* another encoder's */
        const output *o = outs_find(os, suffix);
        if (o) compare(t->string, tag, o->t, g, t, case_tol);
        else CHECK_MSG(strcmp(r, "expected") != 0, "%s%s: expected tensor not produced",
                       t->string, tag);
    }
}

/* ---- raw transformer runs ------------------------------------------------------ */

typedef struct {
    sd_tensor *emb;
    sd_tensor *layer[64];
    int n_layers;
} taps;

static void on_tap(void *user, const char *name, const sd_bt *t) {
    taps *tp = user;
    if (strcmp(name, "embeddings") == 0) {
        sd_tensor_unref(tp->emb);
        tp->emb = sd_bt_to_host(t);
    } else if (strncmp(name, "layers.", 7) == 0) {
        int i = atoi(name + 7);
        if (i >= 0 && i < 64) {
            sd_tensor_unref(tp->layer[i]);
            tp->layer[i] = sd_bt_to_host(t);
            if (i + 1 > tp->n_layers) tp->n_layers = i + 1;
        }
    }
}

/* ids tensor (I64 [n, len]) -> int32 array. */
static int32_t *ids_of(const sd_tensor *t) {
    int64_t n = sd_tensor_numel(t);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    sd_dtype_convert(ids, SD_I32, t->data, t->dtype, (size_t)n);
    return ids;
}

static sd_tensor *host(sd_bt *t) { return t ? sd_bt_to_host(t) : NULL; }

/* [n, len, W] per layer -> [n, layers, len, W] */
static sd_tensor *stack_layers(const taps *tp) {
    if (tp->n_layers == 0 || !tp->layer[0]) return NULL;
    const sd_tensor *l0 = tp->layer[0];
    int64_t n = l0->shape[0], per = l0->shape[1] * l0->shape[2];
    sd_tensor *s = sd_tensor_new4(SD_F32, 4, n, tp->n_layers, l0->shape[1], l0->shape[2]);
    for (int64_t b = 0; b < n; b++)
        for (int i = 0; i < tp->n_layers; i++)
            memcpy((float *)s->data + (b * tp->n_layers + i) * per,
                   (const float *)tp->layer[i]->data + b * per, (size_t)per * sizeof(float));
    return s;
}

static void run_raw(sd_clip *clip, sd_st_file *g, cJSON *tensors, cJSON *case_tol,
                    const char *group, const char *enc) {
    char name[128];
    if (enc) snprintf(name, sizeof name, "%s.%s.ids", group, enc);
    else snprintf(name, sizeof name, "%s.ids", group);
    sd_error err;
    sd_tensor *idt = sd_st_tensor(g, name, &err);
    CHECK_MSG(idt && idt->ndim == 2, "%s: missing or not [n, len]", name);
    if (!idt || idt->ndim != 2) {
        sd_tensor_unref(idt);
        return;
    }
    int32_t *ids = ids_of(idt);
    sd_clip_tokens in = {(int)idt->shape[0], (int)idt->shape[1], ids, NULL};
    outputs os = {0};
    taps tp = {0};
    static const struct {
        const char *name;
        sd_clip_layer layer;
    } sel[] = {{"last_hidden", {-1, 1}}, {"penultimate_ln", {-2, 1}}, {"penultimate_noln", {-2, 0}}};
    for (size_t s = 0; s < sizeof sel / sizeof sel[0]; s++) {
        sd_clip_output out;
        sd_clip_set_tap(clip, s == 0 ? on_tap : NULL, &tp);
        CHECK_OK(sd_clip_forward(clip, &in, sel[s].layer, &out, &err), &err);
        sd_clip_set_tap(clip, NULL, NULL);
        outs_add(&os, sel[s].name, host(out.hidden));
        if (s == 0) {
            outs_add(&os, "pooled", host(out.pooled));
            outs_add(&os, "pooled_unprojected", host(out.pooled));
            if (out.projected) outs_add(&os, "pooled_projected", host(out.projected));
        }
        sd_clip_output_free(&out);
    }
    if (tp.emb) outs_add(&os, "embeddings", sd_tensor_ref(tp.emb));
    sd_tensor *all = stack_layers(&tp);
    if (all) outs_add(&os, "hidden_all", all);
    CHECK(tp.n_layers == sd_clip_get_config(clip)->layers);
    compare_group(g, tensors, case_tol, group, enc, &os, "");
    outs_free(&os);
    sd_tensor_unref(tp.emb);
    for (int i = 0; i < tp.n_layers; i++) sd_tensor_unref(tp.layer[i]);
    free(ids);
    sd_tensor_unref(idt);
}

/* ---- conditioning from tokens or text ------------------------------------------ */

/* sd_prompt_tokens from "<base>.ids" / "<base>.weights" (no embeddings). */
static sd_prompt_tokens *tokens_from(sd_st_file *g, const char *base) {
    char n1[128], n2[128];
    snprintf(n1, sizeof n1, "%s.ids", base);
    snprintf(n2, sizeof n2, "%s.weights", base);
    if (!sd_st_find(g, n1)) return NULL;
    sd_error err;
    sd_tensor *it = sd_st_tensor(g, n1, &err), *wt = sd_st_tensor_f32(g, n2, &err);
    CHECK_MSG(it && wt && it->ndim == 2 && sd_tensor_numel(it) == sd_tensor_numel(wt),
              "%s: ids/weights missing or of different sizes", base);
    sd_prompt_tokens *t = NULL;
    if (it && wt && it->ndim == 2 && sd_tensor_numel(it) == sd_tensor_numel(wt)) {
        int32_t *ids = ids_of(it);
        const float *w = wt->data;
        t = calloc(1, sizeof *t);
        t->n_chunks = (int)it->shape[0];
        t->chunk_len = (int)it->shape[1];
        t->tokens = calloc((size_t)sd_tensor_numel(it), sizeof *t->tokens);
        for (int64_t i = 0; i < sd_tensor_numel(it); i++)
            t->tokens[i] = (sd_prompt_token){ids[i], -1, 0, 0, w[i]};
        free(ids);
    }
    sd_tensor_unref(it);
    sd_tensor_unref(wt);
    return t;
}

/* "cond_skip2" -> base "cond", clip_skip -2; "pooled" -> "pooled", 0.
 * 0 when the variant is not understood. */
static int parse_output(const char *suffix, char *base, size_t n, int *clip_skip) {
    const char *us = strchr(suffix, '_');
    size_t bl = us ? (size_t)(us - suffix) : strlen(suffix);
    snprintf(base, n, "%.*s", (int)bl, suffix);
    *clip_skip = 0;
    if (!us || strcmp(us + 1, "last") == 0) return 1;
    if (strncmp(us + 1, "skip", 4) == 0 && atoi(us + 5) > 0) {
        *clip_skip = -atoi(us + 5);
        return 1;
    }
    return 0;
}

typedef sd_status (*encode_fn)(void *ctx, int clip_skip, sd_tensor **cond, sd_tensor **pooled,
                               sd_error *err);

/* Runs fn once per clip-skip variant the group's expected tensors name. */
static void run_variants(sd_st_file *g, cJSON *tensors, cJSON *case_tol, const char *group,
                         encode_fn fn, void *ctx, const char *tag) {
    outputs os = {0};
    int done_skips[16], n_done = 0;
    size_t gl = strlen(group);
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *r = role_of(t);
        if (strncmp(t->string, group, gl) != 0 || t->string[gl] != '.' || !r ||
            strcmp(r, "input") == 0 || strchr(t->string + gl + 1, '.'))
            continue;
        char base[64];
        int skip, seen = 0;
        if (!parse_output(t->string + gl + 1, base, sizeof base, &skip)) continue;
        for (int i = 0; i < n_done; i++) seen |= done_skips[i] == skip;
        if (seen || n_done == 16) continue;
        done_skips[n_done++] = skip;
        sd_tensor *cond = NULL, *pooled = NULL;
        sd_error err;
        CHECK_OK(fn(ctx, skip, &cond, &pooled, &err), &err);
        char nm[64];
        const char *suffix = t->string + gl + 1, *us = strchr(suffix, '_');
        snprintf(nm, sizeof nm, "cond%s", us ? us : "");
        outs_add(&os, nm, cond);
        snprintf(nm, sizeof nm, "pooled%s", us ? us : "");
        outs_add(&os, nm, pooled);
    }
    compare_group(g, tensors, case_tol, group, NULL, &os, tag);
    outs_free(&os);
}

typedef struct {
    const sd_text_encoder *te;
    const sd_prompt_tokens *l, *g;
    const char *text, *text_g, *text_l;
} enc_ctx;

static sd_status by_tokens(void *ctx, int skip, sd_tensor **c, sd_tensor **p, sd_error *err) {
    enc_ctx *e = ctx;
    return sd_text_encode_tokens(e->te, e->l, e->g, skip, NULL, c, p, err);
}

static sd_status by_text(void *ctx, int skip, sd_tensor **c, sd_tensor **p, sd_error *err) {
    enc_ctx *e = ctx;
    return sd_text_encode(e->te, e->text, skip, NULL, c, p, err);
}

static sd_status by_sdxl_node(void *ctx, int skip, sd_tensor **c, sd_tensor **p, sd_error *err) {
    enc_ctx *e = ctx;
    return sd_text_encode_sdxl(e->te, e->text_g, e->text_l, skip, NULL, c, p, err);
}

static void free_tokens(sd_prompt_tokens *t) {
    if (!t) return;
    free(t->tokens);
    free(t);
}

/* Our tokenization of text equals the golden input ids/weights. */
static void check_tokenization(const sd_prompt_tokens *want, const char *text, int is_g,
                               const char *what) {
    sd_prompt_opts po;
    if (is_g) sd_prompt_opts_clip_g(&po);
    else sd_prompt_opts_clip_l(&po);
    sd_prompt_tokens *got = NULL;
    sd_error err;
    CHECK_OK(sd_prompt_tokenize(tok, text, &po, &got, &err), &err);
    if (!got) return;
    int same = got->n_chunks == want->n_chunks && got->chunk_len == want->chunk_len;
    for (int64_t i = 0; same && i < (int64_t)got->n_chunks * got->chunk_len; i++)
        same = got->tokens[i].id == want->tokens[i].id &&
               (float)got->tokens[i].weight == (float)want->tokens[i].weight;
    CHECK_MSG(same, "%s: tokenizing the prompt text does not give the golden input ids/weights",
              what);
    sd_prompt_tokens_free(got);
}

static void run_prompt_group(const sd_text_encoder *te, sd_st_file *g, cJSON *tensors,
                             cJSON *case_tol, cJSON *settings, const char *group) {
    char base[128];
    snprintf(base, sizeof base, "%s", group);
    sd_prompt_tokens *l = NULL, *gt = NULL;
    if (sd_text_encoder_kind(te) == SD_TE_SD1) {
        l = tokens_from(g, base);
    } else {
        snprintf(base, sizeof base, "%s.l", group);
        l = sd_text_encoder_clip_l(te) ? tokens_from(g, base) : NULL;
        snprintf(base, sizeof base, "%s.g", group);
        gt = tokens_from(g, base);
    }
    CHECK_MSG(l || gt, "group %s: no token inputs this test understands", group);
    if (!l && !gt) return;
    enc_ctx ctx = {te, l, gt, NULL, NULL, NULL};
    run_variants(g, tensors, case_tol, group, by_tokens, &ctx, "");

    /* the same from the prompt text, when the case stores it */
    const char *idx = group;
    while (*idx && (*idx < '0' || *idx > '9')) idx++;
    cJSON *prompts = cJSON_GetObjectItemCaseSensitive(settings, "prompts");
    const char *text = *idx ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(prompts, idx)) : NULL;
    if (text && tok) {
        char what[64];
        snprintf(what, sizeof what, "%s 'l'", group);
        if (l) check_tokenization(l, text, 0, what);
        snprintf(what, sizeof what, "%s 'g'", group);
        if (gt) check_tokenization(gt, text, 1, what);
        ctx.text = text;
        run_variants(g, tensors, case_tol, group, by_text, &ctx, " [text]");
    } else if (text) {
        printf("    group %s: no CLIP vocabulary, prompt text not encoded\n", group);
        n_untokenized++;
    }
    free_tokens(l);
    free_tokens(gt);
}

/* ---- cases ------------------------------------------------------------------------ */

/* The clip config of the manifest matches what was detected. */
static void check_config(const sd_clip *clip, cJSON *want, const char *what) {
    if (!clip || !want) return;
    const sd_clip_config *c = sd_clip_get_config(clip);
    cJSON *h = cJSON_GetObjectItemCaseSensitive(want, "hidden_size");
    cJSON *nh = cJSON_GetObjectItemCaseSensitive(want, "num_attention_heads");
    cJSON *nl = cJSON_GetObjectItemCaseSensitive(want, "num_hidden_layers");
    cJSON *mi = cJSON_GetObjectItemCaseSensitive(want, "intermediate_size");
    const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(want, "hidden_act"));
    CHECK_MSG(cJSON_IsNumber(h) && c->hidden == h->valueint, "%s: width %d", what, c->hidden);
    CHECK_MSG(cJSON_IsNumber(nh) && c->heads == nh->valueint, "%s: heads %d", what, c->heads);
    CHECK_MSG(cJSON_IsNumber(nl) && c->layers == nl->valueint, "%s: layers %d", what, c->layers);
    CHECK_MSG(cJSON_IsNumber(mi) && c->mlp == mi->valueint, "%s: mlp %d", what, c->mlp);
    CHECK_MSG(act && (strcmp(act, "quick_gelu") == 0) == (c->act == SD_CLIP_ACT_QUICK_GELU),
              "%s: activation %d, manifest %s", what, (int)c->act, act ? act : "?");
}

static cJSON *model_for(cJSON *manifest, const char *id) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        char words[128], key[64];
        snprintf(words, sizeof words, "_%s_", id);
        snprintf(key, sizeof key, "_%s_", m->string);
        if (strstr(words, key)) return m;
    }
    return NULL;
}

/* 1 when the manifest lists "<grp>.<suffix>". */
static int has(cJSON *tensors, const char *grp, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", grp, suffix);
    return cJSON_GetObjectItemCaseSensitive(tensors, name) != NULL;
}

static int run_case(cJSON *manifest, cJSON *c, const char *dir) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    cJSON *case_tol = cJSON_GetObjectItemCaseSensitive(c, "tolerance");
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    sd_error err;
    sd_st_file *g = NULL;
    if (!file || sd_st_open(path, &g, &err) != SD_OK) {
        CHECK_MSG(0, "case %s: the manifest lists golden file %s: %s", id ? id : "?", path,
                  file ? err.msg : "no file named");
        return 0;
    }
    cJSON *m = model_for(manifest, id);
    CHECK_MSG(m != NULL, "case %s: no model in the manifest matches", id);
    const char *mfile = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file"));
    snprintf(path, sizeof path, "%s/%s", dir, mfile ? mfile : "");
    sd_st_file *f = NULL;
    sd_text_encoder *te = NULL;
    if (!m || sd_st_open(path, &f, &err) != SD_OK) {
        CHECK_MSG(!m, "case %s: the manifest lists model %s: %s", id, path, err.msg);
        sd_st_close(g);
        return 0;
    }
    printf("case %s (%s)\n", id, mfile);
    CHECK_OK(sd_text_encoder_load(be, f, tok, &te, &err), &err);
    sd_st_close(f);
    if (!te) {
        sd_st_close(g);
        return 1;
    }
    const sd_clip *cl = sd_text_encoder_clip_l(te), *cg = sd_text_encoder_clip_g(te);
    cJSON *cfg_l = cJSON_GetObjectItemCaseSensitive(settings, "clip_l");
    if (!cfg_l) cfg_l = cJSON_GetObjectItemCaseSensitive(settings, "clip_config");
    check_config(cl, cfg_l, "clip_l");
    check_config(cg, cJSON_GetObjectItemCaseSensitive(settings, "clip_g"), "clip_g");
    CHECK_MSG(!cJSON_GetObjectItemCaseSensitive(settings, "clip_g") || cg,
              "case %s: no bigG encoder detected", id);

    /* groups in manifest order */
    char groups[32][32];
    int n_groups = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        char grp[32];
        const char *dot = strchr(t->string, '.');
        snprintf(grp, sizeof grp, "%.*s", dot ? (int)(dot - t->string) : (int)strlen(t->string),
                 t->string);
        int seen = 0;
        for (int i = 0; i < n_groups; i++) seen |= strcmp(groups[i], grp) == 0;
        if (!seen && n_groups < 32) snprintf(groups[n_groups++], sizeof groups[0], "%s", grp);
    }
    for (int i = 0; i < n_groups; i++) {
        const char *grp = groups[i];
        /* ids without weights feed the bare transformer */
        int raw_single = has(tensors, grp, "ids") && !has(tensors, grp, "weights");
        int raw_l = has(tensors, grp, "l.ids") && !has(tensors, grp, "l.weights");
        int raw_g = has(tensors, grp, "g.ids") && !has(tensors, grp, "g.weights");
        cJSON *node = cJSON_GetObjectItemCaseSensitive(settings, grp);
        if (raw_single || raw_l || raw_g) {
            printf("  %s (transformer)\n", grp);
            if (raw_single) run_raw((sd_clip *)(cl ? cl : cg), g, tensors, case_tol, grp, NULL);
            if (raw_l) run_raw((sd_clip *)cl, g, tensors, case_tol, grp, "l");
            if (raw_g) run_raw((sd_clip *)cg, g, tensors, case_tol, grp, "g");
        } else if (cJSON_IsObject(node) && cJSON_GetObjectItemCaseSensitive(node, "text_g")) {
            printf("  %s (CLIPTextEncodeSDXL)\n", grp);
            if (!tok) {
                printf("    no CLIP vocabulary, not run\n");
                n_untokenized++;
                continue;
            }
            enc_ctx ctx = {te, NULL, NULL, NULL,
                           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "text_g")),
                           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "text_l"))};
            run_variants(g, tensors, case_tol, grp, by_sdxl_node, &ctx, " [text]");
        } else {
            printf("  %s (CLIPTextEncode)\n", grp);
            run_prompt_group(te, g, tensors, case_tol, settings, grp);
        }
    }
    sd_text_encoder_free(te);
    sd_st_close(g);
    return 1;
}

int main(void) {
    const char *dir = sd_golden_dir();
    cJSON *manifest = sd_golden_manifest(dir);
    char path[1200];

    sd_error err;
    be = sd_golden_backend();
    if (!be) return sd_test_finish();
    const char *shared = getenv("SDFLOW_SHARED");
    if (!shared || !*shared) shared = sd_test_shared_dir();
    snprintf(path, sizeof path, "%s/data/clip", shared);
    if (sd_tokenizer_load_dir(path, &tok, &err) != SD_OK) {
        printf("no CLIP vocabulary in %s: prompt-text paths are not run\n", path);
        tok = NULL;
    }

    /* what the manifest lists must be there */
    int listed = sd_golden_require_cases(manifest, dir, "clip");
    int ran = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (sd_golden_case_is(c, "clip")) ran += run_case(manifest, c, dir);
    }
    cJSON_Delete(manifest);
    sd_tokenizer_free(tok);
    sd_backend_free(be);
    if (!listed) sd_test_skip("the manifest under %s lists no clip case", dir);
    CHECK_MSG(ran > 0, "no clip case ran");
    /* a partial run is not a pass: the text paths need the vocabulary */
    if (n_untokenized) sd_test_skip("%d text group(s) not run: no CLIP vocabulary under %s/data/clip",
                                    n_untokenized, shared);
    return sd_test_finish();
}
