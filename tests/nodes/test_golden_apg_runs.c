/* test_golden_apg_runs.c - APG's momentum across sampler runs of one patched
 * MODEL, through the executor, against ComfyUI (tests/data/apg_runs,
 * gen_apg_runs_ref.py). Each case is a sequence of prompts run by one
 * sd_exec kept across them, as the server queue and the Lua REPL keep it:
 * CheckpointLoaderSimple (the shared tiny SD1) -> APG (the case's inputs)
 * -> KSamplerAdvanced runs (the case's "runs": a schedule's first half, its
 * second half on the first's latent in a later prompt, the second half with
 * another cfg in a third), each with a PreviewAny so that the prompt needs
 * it. Per prompt: the runs it "executes" execute and the others are memo
 * hits (the APG MODEL then is the one object the earlier prompts used), and
 * every executed run's latent (--dump) matches ComfyUI's, run in the same
 * order on one APG-patched model, and lies outside the tolerance of the
 * case's "differs_from" tensor (the same run with the state a wrong
 * implementation keeps: a fresh one per run, or one never reset), so that
 * the check can fail. Needs the shared tiny SD1 checkpoint and a tokenizer
 * (SDFLOW_TOKENIZER_DIR or <shared>/data/clip): without them, exit 77. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/executor.h"
#include "core/graph.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "testutil.h"

static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static int has(const cJSON *list, const char *s) {
    const cJSON *e;
    cJSON_ArrayForEach(e, list) if (cJSON_IsString(e) && !strcmp(e->valuestring, s)) return 1;
    return 0;
}

/* The node id of run rid: 10 + its index among the case's runs ("" when absent). */
static const char *run_node(const cJSON *c, const char *rid, char *buf, size_t n) {
    int i = 0;
    const cJSON *r;
    buf[0] = 0;
    cJSON_ArrayForEach(r, item(c, "runs")) {
        if (!strcmp(str(r, "id"), rid)) {
            snprintf(buf, n, "%d", 10 + i);
            break;
        }
        i++;
    }
    return buf;
}

static const cJSON *run_def(const cJSON *c, const char *rid) {
    const cJSON *r;
    cJSON_ArrayForEach(r, item(c, "runs")) if (!strcmp(str(r, "id"), rid)) return r;
    return NULL;
}

static cJSON *add_node(cJSON *g, const char *id, const char *cls) {
    cJSON *n = cJSON_AddObjectToObject(g, id);
    cJSON_AddStringToObject(n, "class_type", cls);
    return cJSON_AddObjectToObject(n, "inputs");
}

static void link_to(cJSON *in, const char *name, const char *id, int slot) {
    cJSON *a = cJSON_AddArrayToObject(in, name);
    cJSON_AddItemToArray(a, cJSON_CreateString(id));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(slot));
}

/* The API workflow of one prompt: the loader, APG, the prompts, the empty
 * latent and the prompt's runs (each with a PreviewAny). */
static char *workflow(const cJSON *c, const cJSON *prompt) {
    const cJSON *s = item(c, "settings");
    cJSON *g = cJSON_CreateObject(), *in;
    in = add_node(g, "1", "CheckpointLoaderSimple");
    cJSON_AddStringToObject(in, "ckpt_name", "tiny-sd1.safetensors");
    in = add_node(g, "2", "APG");
    link_to(in, "model", "1", 0);
    const cJSON *a;
    cJSON_ArrayForEach(a, item(c, "apg")) cJSON_AddNumberToObject(in, str(a, "name"), num(a, "value"));
    in = add_node(g, "3", "CLIPTextEncode");
    cJSON_AddStringToObject(in, "text", str(s, "positive"));
    link_to(in, "clip", "1", 1);
    in = add_node(g, "4", "CLIPTextEncode");
    cJSON_AddStringToObject(in, "text", str(s, "negative"));
    link_to(in, "clip", "1", 1);
    in = add_node(g, "5", "EmptyLatentImage");
    cJSON_AddNumberToObject(in, "width", num(s, "width"));
    cJSON_AddNumberToObject(in, "height", num(s, "height"));
    cJSON_AddNumberToObject(in, "batch_size", 1);
    const cJSON *rid;
    cJSON_ArrayForEach(rid, item(prompt, "runs")) {
        const cJSON *r = run_def(c, rid->valuestring);
        char id[16], src[16], pv[24];
        CHECK_MSG(r != NULL, "%s: prompt names an unknown run %s", str(c, "id"), rid->valuestring);
        if (!r) continue;
        run_node(c, rid->valuestring, id, sizeof id);
        in = add_node(g, id, "KSamplerAdvanced");
        link_to(in, "model", "2", 0);
        cJSON_AddStringToObject(in, "add_noise", str(r, "add_noise"));
        cJSON_AddNumberToObject(in, "noise_seed", num(s, "seed"));
        cJSON_AddNumberToObject(in, "steps", num(s, "steps"));
        cJSON_AddNumberToObject(in, "cfg", num(r, "cfg"));
        cJSON_AddStringToObject(in, "sampler_name", str(s, "sampler_name"));
        cJSON_AddStringToObject(in, "scheduler", str(s, "scheduler"));
        link_to(in, "positive", "3", 0);
        link_to(in, "negative", "4", 0);
        const char *from = str(r, "latent");
        link_to(in, "latent_image", from ? run_node(c, from, src, sizeof src) : "5", 0);
        cJSON_AddNumberToObject(in, "start_at_step", num(r, "start_at_step"));
        cJSON_AddNumberToObject(in, "end_at_step", num(r, "end_at_step"));
        cJSON_AddStringToObject(in, "return_with_leftover_noise", str(r, "return_with_leftover_noise"));
        snprintf(pv, sizeof pv, "p%s", id);
        in = add_node(g, pv, "PreviewAny");
        link_to(in, "source", id, 0);
    }
    char *js = cJSON_PrintUnformatted(g);
    cJSON_Delete(g);
    return js;
}

static const sd_exec_record *find(const sd_exec_report *r, const char *id) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->items[i].node_id, id)) return &r->items[i];
    return NULL;
}

static sd_tensor *dumped(const char *dump, const char *id) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s_0.safetensors", dump, id);
    sd_st_file *f = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (sd_st_open(path, &f, &err)) {
        CHECK_MSG(0, "no dump of node %s: %s", id, err.msg);
        return NULL;
    }
    sd_tensor *t = sd_st_tensor_f32(f, "samples", &err);
    CHECK_MSG(t != NULL, "node %s's dump has no samples", id);
    sd_st_close(f);
    return t;
}

static void run_case(const sd_env *env, sd_st_file *ref, const cJSON *c) {
    const char *cid = str(c, "id");
    const double atol = num(c, "atol"), rtol = num(c, "rtol");
    sd_exec *ex = sd_exec_new();
    int pi = 0;
    const cJSON *prompt;
    cJSON_ArrayForEach(prompt, item(c, "prompts")) {
        char dump[4300];
        snprintf(dump, sizeof dump, "%s/%s-%d", sd_test_tmpdir("golden_apg_runs_dump"), cid, pi);
        char *js = workflow(c, prompt);
        sd_error err;
        sd_error_clear(&err);
        sd_graph *g = NULL;
        CHECK_OK(sd_graph_from_json(js, "apg_runs.json", &g, &err), &err);
        free(js);
        sd_exec_opts xo = {.env = env, .dump_dir = dump};
        sd_exec_report rep = {0};
        if (g) {
            sd_status rc = sd_exec_run(ex, g, &xo, &rep, NULL, &err);
            char msg[4096];
            CHECK_MSG(rc == SD_OK, "%s prompt %d failed: %s", cid, pi, sd_error_format(&err, msg, sizeof msg));
        }
        const cJSON *rid;
        cJSON_ArrayForEach(rid, item(prompt, "runs")) {
            char id[16];
            run_node(c, rid->valuestring, id, sizeof id);
            const sd_exec_record *rec = find(&rep, id);
            int exec = has(item(prompt, "executes"), rid->valuestring);
            /* (a memo hit above another hit is not even visited) */
            CHECK_MSG(exec ? rec && rec->status == SD_NODE_EXECUTED : !rec || rec->status == SD_NODE_MEMO,
                      "%s prompt %d: run %s is %s, expected %s", cid, pi, rid->valuestring,
                      rec ? sd_node_status_name(rec->status) : "not visited", exec ? "executed" : "a memo hit");
            if (!exec) continue;
            const cJSON *r = run_def(c, rid->valuestring);
            sd_tensor *got = dumped(dump, id), *want = sd_st_tensor_f32(ref, str(r, "latent_out"), &err);
            CHECK_MSG(want != NULL, "%s: no reference tensor %s", cid, str(r, "latent_out"));
            double mx = 0;
            long worst = -1;
            int ok = got && want && sd_test_allclose(got, want, atol, rtol, &mx, &worst);
            CHECK_MSG(ok, "%s prompt %d run %s: differs from ComfyUI's: max |diff| %g at %ld (atol %g rtol %g)", cid,
                      pi, rid->valuestring, mx, worst, atol, rtol);
            printf("  %s prompt %d run %s: max |diff| %g (atol %g rtol %g)\n", cid, pi, rid->valuestring, mx, atol,
                   rtol);
            const char *wrong_name = str(r, "differs_from");
            if (wrong_name && got && want) {
                sd_tensor *wrong = sd_st_tensor_f32(ref, wrong_name, &err);
                CHECK_MSG(wrong != NULL, "%s: no reference tensor %s", cid, wrong_name);
                /* the case tells: ComfyUI's result with the wrong state, and ours, lie outside the tolerance */
                CHECK_MSG(wrong && !sd_test_allclose(wrong, want, atol, rtol, &mx, &worst),
                          "%s run %s: %s (%s) is within the tolerance of the expected latent", cid, rid->valuestring,
                          wrong_name, str(r, "differs_note"));
                CHECK_MSG(wrong && !sd_test_allclose(got, wrong, atol, rtol, &mx, &worst),
                          "%s run %s: ours matches %s (%s)", cid, rid->valuestring, wrong_name,
                          str(r, "differs_note"));
                sd_tensor_unref(wrong);
            }
            sd_tensor_unref(got), sd_tensor_unref(want);
        }
        sd_exec_report_free(&rep);
        sd_graph_free(g);
        pi++;
    }
    CHECK_MSG(pi >= 2, "%s: fewer than two prompts", cid);
    sd_exec_free(ex);
}

int main(void) {
    char models[4200], link[4400], cmd[8800];
    const char *dir = sd_golden_topic_dir("apg_runs");
    cJSON *man = sd_golden_manifest(dir);
    sd_st_file *ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    sd_error_clear(&err);
    const char *tokdir = sd_golden_tokenizer_dir();
    const char *ckpt = sd_golden_tiny_sd1(NULL);
    if (!sd_golden_e2e_comparable()) {
        sd_st_close(ref);
        cJSON_Delete(man);
        sd_test_skip_unsupported("end-to-end cases are compared in f32 only (golden.h)");
    }
    sd_backend *be = sd_golden_backend();
    if (!be) {
        sd_st_close(ref);
        cJSON_Delete(man);
        return sd_test_finish();
    }
    snprintf(models, sizeof models, "%s/models", sd_test_tmpdir("golden_apg_runs"));
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints'", models);
    CHECK(system(cmd) == 0);
    snprintf(link, sizeof link, "%s/checkpoints/tiny-sd1.safetensors", models);
    unlink(link);
    CHECK_MSG(symlink(ckpt, link) == 0, "symlink %s", link);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tokdir, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, item(man, "cases")) {
        if (strcmp(str(c, "kind"), "apg_runs")) continue;
        printf("case %s\n", str(c, "id"));
        run_case(&env, ref, c);
        n++;
    }
    CHECK_MSG(n > 0, "the manifest lists no apg_runs case");
    sd_model_store_free(store);
    sd_backend_free(be);
    env.backend = NULL;
    env.models = NULL;
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
