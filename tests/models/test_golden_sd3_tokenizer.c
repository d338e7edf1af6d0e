/* Golden test: SD3's tokenizers against ComfyUI (testdata/sd3, cases of
 * component "tokenizer"): for every prompt of the case's settings,
 *   p<i>.g.ids/weights      SDXLClipGTokenizer (77-token chunks, pad 0)
 *   p<i>.l.ids/weights      SDTokenizer (CLIP-L, pad with the end token)
 *   p<i>.t5xxl.ids/weights  T5XXLTokenizer as SD3Tokenizer makes it (no
 *                           start token, </s>, padded with 0 to 77, never cut)
 * through the prompt options the SD3 encoder uses (prompt.h). Ids are
 * exact, weights exactly as float (the manifest's tolerance is 0). The T5
 * vocabulary is the file the manifest's tokenizer.t5 names (a path under
 * shared/, or relative to the set); the CLIP one shared/data/clip. */
#include "golden.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/prompt.h"
#include "models/text/t5_tokenizer.h"
#include "models/text/tokenizer.h"

static const char *g_case = "";

static void check_tokens(const char *name, const sd_prompt_tokens *t, const sd_tensor *ref,
                         int ids) {
    int ok = ref && ref->ndim == 2 && ref->shape[0] == t->n_chunks && ref->shape[1] == t->chunk_len &&
             ref->dtype == (ids ? SD_I64 : SD_F32);
    int64_t total = (int64_t)t->n_chunks * t->chunk_len, bad = -1;
    double want = 0, got = 0;
    for (int64_t i = 0; ok && i < total; i++) {
        want = ids ? (double)((const int64_t *)ref->data)[i] : ((const float *)ref->data)[i];
        got = ids ? t->tokens[i].id : (float)t->tokens[i].weight;
        ok = want == got;
        if (!ok) bad = i;
    }
    CHECK_MSG(ok, "%s %s: differs (ours %d x %d; slot %lld: %.9g, expected %.9g)", g_case, name,
              t->n_chunks, t->chunk_len, (long long)bad, got, want);
}

static void run_case(const char *dir, const cJSON *c, const sd_t5_tokenizer *t5,
                     const sd_tokenizer *clip) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(c, "file"));
    const cJSON *prompts = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "settings"), "prompts");
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    sd_st_file *g = NULL;
    sd_error e;
    CHECK_OK(sd_st_open(path, &g, &e), &e);
    if (!g) return;
    sd_prompt_vocab v5;
    CHECK_OK(sd_t5_tokenizer_prompt_vocab(t5, &v5, &e), &e);
    int n = 0;
    const cJSON *tn;
    cJSON_ArrayForEach(tn, cJSON_GetObjectItem(c, "tensors")) {
        int pi;
        char enc[32] = "", kind[32] = "";
        if (sscanf(tn->string, "p%d.%31[^.].%31s", &pi, enc, kind) != 3 ||
            (strcmp(kind, "ids") != 0 && strcmp(kind, "weights") != 0)) {
            CHECK_MSG(0, "%s: unexpected tensor name %s", g_case, tn->string);
            continue;
        }
        const char *text = cJSON_GetStringValue(cJSON_GetArrayItem(prompts, pi));
        sd_tensor *ref = sd_st_tensor(g, tn->string, &e);
        CHECK_MSG(text && ref, "%s %s: no prompt %d or no tensor", g_case, tn->string, pi);
        sd_prompt_opts o;
        int known = 1;
        if (strcmp(enc, "g") == 0) sd_prompt_opts_clip_g(&o);
        else if (strcmp(enc, "l") == 0) sd_prompt_opts_clip_l(&o);
        else if (strcmp(enc, "t5xxl") == 0) sd_prompt_opts_t5xxl_sd3(&o);
        else known = 0;
        CHECK_MSG(known, "%s: unexpected encoder in %s", g_case, tn->string);
        if (text && ref && known) {
            sd_prompt_tokens *t = NULL;
            if (enc[0] == 't') CHECK_OK(sd_prompt_tokenize_vocab(&v5, text, &o, &t, &e), &e);
            else CHECK_OK(sd_prompt_tokenize(clip, text, &o, &t, &e), &e);
            if (t) check_tokens(tn->string, t, ref, strcmp(kind, "ids") == 0);
            sd_prompt_tokens_free(t);
            n++;
        }
        sd_tensor_unref(ref);
    }
    printf("%s: %d tensors compared\n", g_case, n);
    CHECK_MSG(n > 0, "%s: no tensors", g_case);
    sd_st_close(g);
}

int main(void) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("sd3"));
    cJSON *m = sd_golden_manifest(dir);
    sd_golden_require_cases_or_skip(m, dir, "tokenizer");
    char tokpath[2400], clipdir[2400];
    const char *t5f = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "tokenizer"), "t5"));
    CHECK_MSG(sd_golden_resolve_path(dir, t5f, tokpath, sizeof tokpath),
              "manifest tokenizer.t5 names no file (%s)", t5f ? t5f : "absent");
    snprintf(clipdir, sizeof clipdir, "%s", sd_golden_clip_vocab(m));
    sd_error e;
    sd_t5_tokenizer *t5 = NULL;
    sd_tokenizer *clip = NULL;
    CHECK_OK(sd_t5_tokenizer_load(tokpath, &t5, &e), &e);
    CHECK_OK(sd_tokenizer_load_dir(clipdir, &clip, &e), &e);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "cases")) {
        if (!t5 || !clip || !sd_golden_case_is(c, "tokenizer")) continue;
        g_case = cJSON_GetStringValue(cJSON_GetObjectItem(c, "id"));
        if (!g_case) g_case = "?";
        run_case(dir, c, t5, clip);
    }
    sd_t5_tokenizer_free(t5);
    sd_tokenizer_free(clip);
    cJSON_Delete(m);
    return sd_test_finish();
}
