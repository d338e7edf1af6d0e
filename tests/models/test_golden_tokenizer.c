/* Golden test: the CLIP tokenizer and ComfyUI prompt tokenization against
 * the references in testdata/golden:
 *   - manifest_math.json section "tokenizer" -> tok_prompts.json: raw BPE ids
 *     (primary variant: transformers' slow CLIPTokenizer without ftfy), token
 *     strings, parsed weights, chunks for SD1 'l', SDXL 'l' and 'g' (with an
 *     embeddings directory holding the listed embedding file), word ids;
 *   - manifest.json cases with component "tokenizer": [chunks, 77] ids and
 *     weights per prompt and encoder.
 * Ids are exact; weights compare with rel 1e-12 (JSON doubles) or exactly
 * (F32 tensors, as the manifest's tolerance says). */
#include "testutil.h"
#include "formats/safetensors.h"
#include "models/text/prompt.h"
#include "models/text/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static cJSON *load_json(const char *path)
{
    char *s = sd_test_read_file(path, NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

static int weight_eq(double a, double e) { return fabs(a - e) <= 1e-12 * fabs(e); }

/* ---- tok_prompts.json --------------------------------------------------------- */

typedef struct emb_ref {
    sd_st_file *file; /* the golden embedding file */
} emb_ref;

/* Compares our chunks with a JSON list of chunks of [id|{embedding}, weight(, word)]. */
static void check_chunks(const sd_prompt_tokens *t, const cJSON *exp, const char *what,
                         int pidx, int with_words, const char *key, emb_ref *er)
{
    int nch = cJSON_GetArraySize(exp);
    CHECK_MSG(t->n_chunks == nch, "prompt %d %s: %d chunks, expected %d", pidx, what,
              t->n_chunks, nch);
    if (t->n_chunks != nch)
        return;
    int bad = 0;
    for (int c = 0; c < nch && !bad; c++) {
        const cJSON *chunk = cJSON_GetArrayItem(exp, c);
        int len = cJSON_GetArraySize(chunk);
        CHECK_MSG(len == t->chunk_len, "prompt %d %s chunk %d: len %d", pidx, what, c, len);
        if (len != t->chunk_len)
            return;
        for (int k = 0; k < len && !bad; k++) {
            const cJSON *ent = cJSON_GetArrayItem(chunk, k);
            const cJSON *tokv = cJSON_GetArrayItem(ent, 0);
            double w = cJSON_GetArrayItem(ent, 1)->valuedouble;
            const sd_prompt_token *tk = &t->tokens[(size_t)c * t->chunk_len + k];
            if (cJSON_IsNumber(tokv)) {
                if (tk->id != tokv->valueint || tk->embed != -1)
                    bad = 1;
            } else {
                const char *ename = cJSON_GetStringValue(cJSON_GetObjectItem(tokv, "embedding"));
                const char *ekey = cJSON_GetStringValue(cJSON_GetObjectItem(tokv, "key"));
                int row = cJSON_GetObjectItem(tokv, "row")->valueint;
                int dim = cJSON_GetObjectItem(tokv, "dim")->valueint;
                int64_t got_dim = 0;
                const float *vec = sd_prompt_token_vector(t, tk, &got_dim);
                if (!vec || tk->id != -1 || tk->row != row || got_dim != dim ||
                    strcmp(t->embeds[tk->embed].name, ename) != 0 || strcmp(ekey, key) != 0) {
                    bad = 1;
                } else if (er->file) {
                    sd_error e;
                    sd_tensor *ref = sd_st_tensor_f32(er->file, ekey, &e);
                    if (!ref || ref->shape[1] != dim ||
                        memcmp(vec, sd_tensor_f32(ref) + (size_t)row * dim, dim * sizeof *vec))
                        bad = 1;
                    sd_tensor_unref(ref);
                }
            }
            if (!weight_eq(tk->weight, w))
                bad = 1;
            if (with_words && tk->word != cJSON_GetArrayItem(ent, 2)->valueint)
                bad = 1;
            if (bad)
                fprintf(stderr, "prompt %d %s: chunk %d pos %d differs (got id %d embed %d w %.17g word %d)\n",
                        pidx, what, c, k, tk->id, tk->embed, tk->weight, tk->word);
        }
    }
    CHECK_MSG(!bad, "prompt %d %s", pidx, what);
}

static void run_prompts(const sd_tokenizer *tok, const char *json_path, const char *emb_path,
                        int *n_prompts, int *n_disagree)
{
    cJSON *root = load_json(json_path);
    CHECK_MSG(root != NULL, "%s does not parse", json_path);
    if (!root)
        return;
    /* embeddings dir with <name>.safetensors -> the golden embedding file */
    char embdir[4096] = "";
    emb_ref er = {0};
    if (emb_path) {
        const char *base = strrchr(emb_path, '/') ? strrchr(emb_path, '/') + 1 : emb_path;
        const char *pfx = "tok_embedding_";
        const char *name = strncmp(base, pfx, strlen(pfx)) == 0 ? base + strlen(pfx) : base;
        char link[8300], abs[4096];
        snprintf(embdir, sizeof embdir, "%s/embeddings", sd_test_tmpdir("golden_tokenizer"));
        mkdir(embdir, 0777);
        snprintf(link, sizeof link, "%s/%s", embdir, name);
        if (emb_path[0] != '/' && getcwd(abs, sizeof abs)) {
            char full[8300];
            snprintf(full, sizeof full, "%s/%s", abs, emb_path);
            CHECK(symlink(full, link) == 0);
        } else {
            CHECK(symlink(emb_path, link) == 0);
        }
        sd_error e;
        CHECK_OK(sd_st_open(emb_path, &er.file, &e), &e);
    }
    const char *dirs[1] = {embdir};
    sd_prompt_opts ol, og;
    sd_prompt_opts_clip_l(&ol);
    sd_prompt_opts_clip_g(&og);
    if (emb_path) {
        ol.embedding_dirs = og.embedding_dirs = dirs;
        ol.n_embedding_dirs = og.n_embedding_dirs = 1;
    }
    const cJSON *p;
    int idx = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "prompts"))
    {
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(p, "text"));
        const cJSON *agree = cJSON_GetObjectItem(p, "variants_agree");
        sd_error e;
        if (agree && cJSON_IsFalse(agree))
            (*n_disagree)++;
        /* raw ids and token strings (primary variant) */
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(sd_tokenizer_encode(tok, text, strlen(text), &ids, &n, &e), &e);
        const cJSON *exp = cJSON_GetObjectItem(p, "bpe_ids_hf_noftfy");
        const cJSON *strs = cJSON_GetObjectItem(p, "bpe_tokens_hf_noftfy");
        int ok = (int)n == cJSON_GetArraySize(exp);
        for (size_t i = 0; ok && i < n; i++) {
            const char *ts = sd_tokenizer_token_str(tok, ids[i]);
            ok = ids[i] == cJSON_GetArrayItem(exp, (int)i)->valueint && ts &&
                 strcmp(ts, cJSON_GetArrayItem(strs, (int)i)->valuestring) == 0;
        }
        CHECK_MSG(ok, "prompt %d: raw BPE ids differ from bpe_ids_hf_noftfy", idx);
        free(ids);
        /* parsed weights */
        sd_prompt_segment *segs = NULL;
        size_t ns = 0;
        CHECK_OK(sd_prompt_parse_weights(text, &segs, &ns, &e), &e);
        const cJSON *pw = cJSON_GetObjectItem(p, "parsed_weights");
        ok = (int)ns == cJSON_GetArraySize(pw);
        for (size_t i = 0; ok && i < ns; i++) {
            const cJSON *s = cJSON_GetArrayItem(pw, (int)i);
            ok = strcmp(segs[i].text, cJSON_GetArrayItem(s, 0)->valuestring) == 0 &&
                 weight_eq(segs[i].weight, cJSON_GetArrayItem(s, 1)->valuedouble);
        }
        CHECK_MSG(ok, "prompt %d: parsed weights differ", idx);
        sd_prompt_segments_free(segs, ns);
        /* chunks */
        static const struct { const char *field; int g, words; } encs[] = {
            {"sd1_l", 0, 0}, {"sdxl_l", 0, 0}, {"sdxl_g", 1, 0}, {"sd1_l_word_ids", 0, 1}};
        for (size_t k = 0; k < sizeof encs / sizeof *encs; k++) {
            const cJSON *ch = cJSON_GetObjectItem(p, encs[k].field);
            if (!ch)
                continue;
            const sd_prompt_opts *o = encs[k].g ? &og : &ol;
            sd_prompt_tokens *t = NULL;
            CHECK_OK(sd_prompt_tokenize(tok, text, o, &t, &e), &e);
            if (t)
                check_chunks(t, ch, encs[k].field, idx, encs[k].words, o->embedding_key, &er);
            sd_prompt_tokens_free(t);
        }
        idx++;
    }
    *n_prompts = idx;
    if (er.file)
        sd_st_close(er.file);
    cJSON_Delete(root);
}

/* ---- manifest.json tokenizer cases ---------------------------------------------- */

static int run_cases(const sd_tokenizer *tok, const char *testdata)
{
    char path[4096];
    int n_tensors = 0;
    snprintf(path, sizeof path, "%s/manifest.json", testdata);
    cJSON *m = load_json(path);
    if (!m)
        return 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "cases"))
    {
        const char *comp = cJSON_GetStringValue(cJSON_GetObjectItem(c, "component"));
        if (!comp || strcmp(comp, "tokenizer") != 0)
            continue;
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(c, "file"));
        const cJSON *prompts = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "settings"), "prompts");
        char fp[8300];
        snprintf(fp, sizeof fp, "%s/%s", testdata, file);
        sd_st_file *f = NULL;
        sd_error e;
        CHECK_OK(sd_st_open(fp, &f, &e), &e);
        if (!f)
            continue;
        const cJSON *tn;
        cJSON_ArrayForEach(tn, cJSON_GetObjectItem(c, "tensors"))
        {
            int pi;
            char model[32], enc[32], kind[32];
            if (sscanf(tn->string, "p%d.%31[^.].%31[^.].%31s", &pi, model, enc, kind) != 4) {
                CHECK_MSG(0, "unexpected tensor name %s", tn->string);
                continue;
            }
            const char *text = cJSON_GetStringValue(cJSON_GetArrayItem(prompts, pi));
            CHECK_MSG(text != NULL, "%s: no prompt %d", tn->string, pi);
            if (!text)
                continue;
            sd_prompt_opts o;
            if (strcmp(enc, "g") == 0)
                sd_prompt_opts_clip_g(&o);
            else
                sd_prompt_opts_clip_l(&o);
            sd_prompt_tokens *t = NULL;
            sd_tensor *ref = sd_st_tensor(f, tn->string, &e);
            CHECK_OK(sd_prompt_tokenize(tok, text, &o, &t, &e), &e);
            CHECK_MSG(ref != NULL, "%s missing from %s", tn->string, file);
            if (t && ref) {
                int64_t total = (int64_t)t->n_chunks * t->chunk_len;
                int ok = ref->ndim == 2 && ref->shape[0] == t->n_chunks &&
                         ref->shape[1] == t->chunk_len;
                for (int64_t i = 0; ok && i < total; i++) {
                    if (strcmp(kind, "ids") == 0)
                        ok = ref->dtype == SD_I64 &&
                             ((const int64_t *)ref->data)[i] == t->tokens[i].id;
                    else
                        ok = ref->dtype == SD_F32 &&
                             ((const float *)ref->data)[i] == (float)t->tokens[i].weight;
                }
                CHECK_MSG(ok, "%s differs (%d chunks)", tn->string, t->n_chunks);
                n_tensors++;
            }
            sd_tensor_unref(ref);
            sd_prompt_tokens_free(t);
        }
        sd_st_close(f);
    }
    cJSON_Delete(m);
    return n_tensors;
}

int main(void)
{
    const char *testdata = sd_test_testdata_dir();
    char clipdir[4096], path[4096];
    snprintf(clipdir, sizeof clipdir, "%s/data/clip", sd_test_shared_dir());
    if (!sd_tokenizer_dir_has_files(clipdir))
        sd_test_skip("no CLIP vocabulary in %s", clipdir);
    snprintf(path, sizeof path, "%s/golden/manifest_math.json", testdata);
    cJSON *mm = load_json(path);
    snprintf(path, sizeof path, "%s/manifest.json", testdata);
    if (!mm && !file_exists(path))
        sd_test_skip("no tokenizer references under %s", testdata);

    sd_tokenizer *tok = NULL;
    sd_error e;
    CHECK_OK(sd_tokenizer_load_dir(clipdir, &tok, &e), &e);
    if (!tok)
        return sd_test_finish();

    int n_prompts = 0, n_disagree = 0, n_tensors;
    const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(mm, "tokenizer"), "files");
    char json_path[4096] = "", emb_path[4096] = "";
    const cJSON *fn;
    cJSON_ArrayForEach(fn, files)
    {
        const char *s = cJSON_GetStringValue(fn);
        size_t l = s ? strlen(s) : 0;
        if (l > 5 && strcmp(s + l - 5, ".json") == 0)
            snprintf(json_path, sizeof json_path, "%s/golden/%s", testdata, s);
        else if (l > 12 && strcmp(s + l - 12, ".safetensors") == 0)
            snprintf(emb_path, sizeof emb_path, "%s/golden/%s", testdata, s);
    }
    if (json_path[0]) {
        run_prompts(tok, json_path, emb_path[0] ? emb_path : NULL, &n_prompts, &n_disagree);
        int expect = cJSON_GetObjectItem(cJSON_GetObjectItem(mm, "tokenizer"), "n_prompts")
                         ? cJSON_GetObjectItem(cJSON_GetObjectItem(mm, "tokenizer"), "n_prompts")->valueint
                         : n_prompts;
        CHECK_MSG(n_prompts == expect, "%d prompts, manifest says %d", n_prompts, expect);
    }
    n_tensors = run_cases(tok, testdata);
    printf("tok_prompts: %d prompts (%d where reference variants disagree: primary used), "
           "manifest tokenizer tensors: %d\n", n_prompts, n_disagree, n_tensors);
    if (n_prompts == 0 && n_tensors == 0) {
        sd_tokenizer_free(tok);
        cJSON_Delete(mm);
        sd_test_skip("no tokenizer reference data found under %s", testdata);
    }
    /* The gz vocabulary must give the same ids as vocab.json + merges.txt. */
    snprintf(path, sizeof path, "%s/bpe_simple_vocab_16e6.txt.gz", clipdir);
    if (file_exists(path) && json_path[0]) {
        sd_tokenizer *tg = NULL;
        CHECK_OK(sd_tokenizer_load_bpe_gz(path, &tg, &e), &e);
        cJSON *root = load_json(json_path);
        const cJSON *p;
        int bad = 0;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "prompts"))
        {
            const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(p, "text"));
            int32_t *a = NULL, *b = NULL;
            size_t na = 0, nb = 0;
            if (tg && sd_tokenizer_encode(tok, text, strlen(text), &a, &na, &e) == SD_OK &&
                sd_tokenizer_encode(tg, text, strlen(text), &b, &nb, &e) == SD_OK)
                bad += na != nb || memcmp(a, b, na * sizeof *a) != 0;
            free(a);
            free(b);
        }
        CHECK_MSG(tg && bad == 0, "gz vocabulary differs on %d prompts", bad);
        if (tg)
            CHECK(sd_tokenizer_vocab_size(tg) == sd_tokenizer_vocab_size(tok));
        cJSON_Delete(root);
        sd_tokenizer_free(tg);
    }
    sd_tokenizer_free(tok);
    cJSON_Delete(mm);
    return sd_test_finish();
}
