/* Golden test: Z-Image's tokenizer against ComfyUI (testdata/zimage, cases
 * of component "tokenizer"): for every prompt of the case's settings,
 *   p<i>.raw_ids   Qwen2Tokenizer(prompt) alone (sd_qwen_tokenizer_encode)
 *   p<i>.ids       ZImageTokenizer: the chat template, one sequence, no
 *                  weights syntax (sd_text_tokenize_zimage)
 *   p<i>.weights   its weights (all 1.0)
 * Ids exact, weights exactly as float (the manifest's tolerance is 0). The
 * tokenizer folder is the one the manifest's tokenizer.files name. */
#include "golden.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/qwen_tokenizer.h"
#include "models/text/text_encode.h"

static const char *g_case = "";

static void check_ids(const char *name, const int32_t *ids, size_t n, const sd_tensor *ref, int ndim) {
    int ok = ref && ref->dtype == SD_I64 && ref->ndim == ndim && ref->shape[ndim - 1] == (int64_t)n &&
             (ndim == 1 || ref->shape[0] == 1);
    size_t bad = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (((const int64_t *)ref->data)[i] != ids[i]) ok = 0, bad = i;
    CHECK_MSG(ok, "%s %s: differs (ours %zu ids; first difference at %zu)", g_case, name, n, bad);
}

static void run_case(const char *dir, const cJSON *c, const sd_qwen_tokenizer *tok) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(c, "file"));
    const cJSON *prompts = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "settings"), "prompts");
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    sd_st_file *g = NULL;
    sd_error e;
    CHECK_OK(sd_st_open(path, &g, &e), &e);
    if (!g) return;
    int n = 0;
    const cJSON *tn;
    cJSON_ArrayForEach(tn, cJSON_GetObjectItem(c, "tensors")) {
        int pi;
        char kind[32] = "";
        if (sscanf(tn->string, "p%d.%31s", &pi, kind) != 2) {
            CHECK_MSG(0, "%s: unexpected tensor name %s", g_case, tn->string);
            continue;
        }
        const char *text = cJSON_GetStringValue(cJSON_GetArrayItem(prompts, pi));
        sd_tensor *ref = sd_st_tensor(g, tn->string, &e);
        CHECK_MSG(text && ref, "%s %s: no prompt %d or no tensor", g_case, tn->string, pi);
        if (!text || !ref) {
            sd_tensor_unref(ref);
            continue;
        }
        if (strcmp(kind, "raw_ids") == 0) {
            int32_t *ids = NULL;
            size_t k = 0;
            CHECK_OK(sd_qwen_tokenizer_encode(tok, text, strlen(text), &ids, &k, &e), &e);
            if (ids) check_ids(tn->string, ids, k, ref, 1);
            free(ids);
        } else if (strcmp(kind, "ids") == 0 || strcmp(kind, "weights") == 0) {
            sd_prompt_tokens *t = NULL;
            CHECK_OK(sd_text_tokenize_zimage(tok, text, &t, &e), &e);
            if (t && t->n_chunks == 1) {
                size_t k = (size_t)t->chunk_len;
                int32_t *ids = malloc(k * sizeof *ids);
                int wok = ref->dtype == SD_F32 && ref->ndim == 2 && ref->shape[1] == (int64_t)k;
                for (size_t i = 0; i < k; i++) {
                    ids[i] = t->tokens[i].id;
                    if (wok && kind[0] == 'w') wok = ((const float *)ref->data)[i] == (float)t->tokens[i].weight;
                }
                if (kind[0] == 'i') check_ids(tn->string, ids, k, ref, 2);
                else CHECK_MSG(wok, "%s %s: weights differ", g_case, tn->string);
                free(ids);
            } else {
                CHECK_MSG(0, "%s %s: not one sequence", g_case, tn->string);
            }
            sd_prompt_tokens_free(t);
        } else {
            CHECK_MSG(0, "%s: unexpected tensor name %s", g_case, tn->string);
        }
        sd_tensor_unref(ref);
        n++;
    }
    printf("%s: %d tensors compared\n", g_case, n);
    CHECK_MSG(n > 0, "%s: no tensors", g_case);
    sd_st_close(g);
}

int main(void) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("zimage"));
    cJSON *m = sd_golden_manifest(dir);
    sd_golden_require_cases_or_skip(m, dir, "tokenizer");
    /* the folder holding the manifest's tokenizer files */
    char tokdir[2400];
    const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "tokenizer"), "files");
    CHECK_MSG(sd_golden_resolve_path(dir, cJSON_GetStringValue(cJSON_GetArrayItem(files, 0)), tokdir,
                                     sizeof tokdir),
              "manifest tokenizer.files names no file");
    char *slash = strrchr(tokdir, '/');
    if (slash) *slash = 0;
    sd_error e;
    sd_qwen_tokenizer *tok = NULL;
    CHECK_OK(sd_qwen_tokenizer_load_dir(tokdir, &tok, &e), &e);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "cases")) {
        if (!tok || !sd_golden_case_is(c, "tokenizer")) continue;
        g_case = cJSON_GetStringValue(cJSON_GetObjectItem(c, "id"));
        if (!g_case) g_case = "?";
        run_case(dir, c, tok);
    }
    sd_qwen_tokenizer_free(tok);
    cJSON_Delete(m);
    return sd_test_finish();
}
