/* test_model_patch_cache.c - a patched MODEL in the executor's cache: one
 * graph samples with a FreeU-patched MODEL and with the unpatched one side by
 * side (a random-weight SD1 checkpoint synthesized in the real layout: no
 * shared data needed), through one sd_exec kept across runs as the REPL and
 * the server keep it:
 *   - the two KSamplers get different keys and both execute (the patched
 *     one never hits the unpatched one's entry; that the latents differ is
 *     nodes.golden_model_patch's check);
 *   - rerun with another b1: only FreeU, the KSampler after it and its
 *     output node run again; the loader, the text encodes, the empty latent
 *     and the unpatched KSampler come from the memo;
 *   - rerun with the first b1 again: FreeU and its KSampler come from the
 *     memo too (the entry of that parameter value is still there);
 *   - FreeU stacked on FreeU (the same parameters twice) is another key
 *     again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/executor.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "testutil.h"

static char *workflow(double b1, int stacked) {
    char *s = malloc(4096);
    snprintf(s, 4096,
             "{\"4\": {\"class_type\": \"CheckpointLoaderSimple\", \"inputs\": {\"ckpt_name\": \"tiny.safetensors\"}},"
             " \"5\": {\"class_type\": \"EmptyLatentImage\", \"inputs\": {\"width\": 64, \"height\": 64, \"batch_size\": 1}},"
             " \"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"a red house\", \"clip\": [\"4\", 1]}},"
             " \"7\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"blurry\", \"clip\": [\"4\", 1]}},"
             " \"10\": {\"class_type\": \"FreeU\", \"inputs\": {\"model\": [\"4\", 0], \"b1\": %.17g, \"b2\": 1.2,"
             "   \"s1\": 0.9, \"s2\": 0.2}},"
             " \"11\": {\"class_type\": \"FreeU\", \"inputs\": {\"model\": [\"10\", 0], \"b1\": %.17g, \"b2\": 1.2,"
             "   \"s1\": 0.9, \"s2\": 0.2}},"
             " \"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 2, \"cfg\": 7.5,"
             "   \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"%s\", 0],"
             "   \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
             " \"13\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 2, \"cfg\": 7.5,"
             "   \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
             "   \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
             " \"20\": {\"class_type\": \"PreviewAny\", \"inputs\": {\"source\": [\"3\", 0]}},"
             " \"21\": {\"class_type\": \"PreviewAny\", \"inputs\": {\"source\": [\"13\", 0]}}}",
             b1, b1, stacked ? "11" : "10");
    return s;
}

static const sd_exec_record *find(const sd_exec_report *r, const char *id) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->items[i].node_id, id)) return &r->items[i];
    return NULL;
}

/* 1 when node id was visited with status st (absent counts as a memo hit
 * when st is SD_NODE_MEMO: a node above cached results is not visited). */
static void expect(const sd_exec_report *r, const char *id, sd_node_status st, const char *when) {
    const sd_exec_record *rec = find(r, id);
    if (!rec && st == SD_NODE_MEMO) return;
    CHECK_MSG(rec && rec->status == st, "%s: node %s is %s, expected %s", when, id,
              rec ? sd_node_status_name(rec->status) : "not visited", sd_node_status_name(st));
}

static sd_exec_report run(sd_exec *ex, const sd_env *env, double b1, int stacked) {
    sd_error err;
    sd_error_clear(&err);
    char *js = workflow(b1, stacked);
    sd_graph *g = NULL;
    CHECK_OK(sd_graph_from_json(js, "patch_cache.json", &g, &err), &err);
    free(js);
    sd_exec_opts xo = {.env = env};
    sd_exec_report rep = {0};
    if (g) CHECK_OK(sd_exec_run(ex, g, &xo, &rep, NULL, &err), &err);
    sd_graph_free(g);
    return rep;
}

int main(void) {
    const char *dir = sd_test_tmpdir("model_patch_cache");
    char models[4096], path[4200], cmd[8400];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints'", models);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    sd_synth_config cfg = *sd_synth_preset("sd1-tiny");
    CHECK_OK(sd_synth_sd1_write(&cfg, 7, path, &err), &err);
    CHECK_OK(sd_synth_vocab_write(dir, &err), &err);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, dir, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    sd_model_store *store = sd_model_store_new();
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    sd_exec *ex = sd_exec_new();

    sd_exec_report r1 = run(ex, &env, 1.1, 0);
    const sd_exec_record *a = find(&r1, "3"), *b = find(&r1, "13");
    CHECK_MSG(a && b && a->status == SD_NODE_EXECUTED && b->status == SD_NODE_EXECUTED,
              "first run: both KSamplers execute");
    CHECK_MSG(a && b && memcmp(a->key, b->key, SD_KEY_SIZE) != 0, "the patched KSampler has the unpatched one's key");

    sd_exec_report r2 = run(ex, &env, 1.5, 0);
    expect(&r2, "10", SD_NODE_EXECUTED, "b1 changed");
    expect(&r2, "3", SD_NODE_EXECUTED, "b1 changed");
    expect(&r2, "20", SD_NODE_EXECUTED, "b1 changed");
    for (const char *const *id = (const char *const[]){"4", "5", "6", "7", "13", "21", NULL}; *id; id++)
        expect(&r2, *id, SD_NODE_MEMO, "b1 changed");
    CHECK_MSG(r2.n_executed == 3, "b1 changed: %zu nodes executed, expected 3", r2.n_executed);
    const sd_exec_record *a2 = find(&r2, "3");
    CHECK_MSG(a && a2 && memcmp(a->key, a2->key, SD_KEY_SIZE) != 0, "b1 changed, the KSampler's key did not");

    sd_exec_report r3 = run(ex, &env, 1.1, 0);
    CHECK_MSG(r3.n_executed == 0, "b1 back to 1.1: %zu nodes executed, expected none", r3.n_executed);

    sd_exec_report r4 = run(ex, &env, 1.1, 1);
    expect(&r4, "11", SD_NODE_EXECUTED, "FreeU stacked");
    expect(&r4, "3", SD_NODE_EXECUTED, "FreeU stacked");
    expect(&r4, "10", SD_NODE_MEMO, "FreeU stacked");
    const sd_exec_record *a4 = find(&r4, "3");
    CHECK_MSG(a && a4 && memcmp(a->key, a4->key, SD_KEY_SIZE) != 0, "a stacked FreeU has the single one's key");

    sd_exec_report_free(&r1);
    sd_exec_report_free(&r2);
    sd_exec_report_free(&r3);
    sd_exec_report_free(&r4);
    sd_exec_free(ex);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
