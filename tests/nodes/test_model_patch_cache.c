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
 *     again;
 *   - APG with momentum (its running average lives with the MODEL across
 *     runs, SD_NODE_PROCESS_STATE): with a persistent cache in the options
 *     (a recording one), neither the KSampler after it nor its output node
 *     is looked up in it or stored there, while the memo serves a rerun;
 *     APG at momentum 0 keeps no state and its KSampler is stored. */
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

/* A persistent cache that stores nothing and records the keys looked up
 * and the class_types stored. */
typedef struct rec_cache {
    uint8_t gets[64][SD_KEY_SIZE];
    int n_gets;
    char puts[4096];
} rec_cache;

static int looked_up(const rec_cache *c, const uint8_t *key) {
    for (int i = 0; i < c->n_gets && i < 64; i++)
        if (!memcmp(c->gets[i], key, SD_KEY_SIZE)) return 1;
    return 0;
}

static void note(char *buf, const char *what) {
    size_t n = strlen(buf);
    snprintf(buf + n, 4096 - n, "%s,", what);
}

static sd_status rc_get(void *self, const uint8_t key[SD_KEY_SIZE], sd_value **out, sd_error *err) {
    (void)err;
    rec_cache *c = self;
    if (c->n_gets < 64) memcpy(c->gets[c->n_gets], key, SD_KEY_SIZE);
    c->n_gets++;
    *out = NULL;
    return SD_ERR_NOT_FOUND;
}

static sd_status rc_put(void *self, const uint8_t key[SD_KEY_SIZE], const char *class_type, const sd_value *v,
                        sd_error *err) {
    (void)key, (void)v, (void)err;
    note(((rec_cache *)self)->puts, class_type);
    return SD_OK;
}

static char *apg_workflow(double momentum) {
    char *s = malloc(4096);
    snprintf(s, 4096,
             "{\"4\": {\"class_type\": \"CheckpointLoaderSimple\", \"inputs\": {\"ckpt_name\": \"tiny.safetensors\"}},"
             " \"5\": {\"class_type\": \"EmptyLatentImage\", \"inputs\": {\"width\": 64, \"height\": 64, \"batch_size\": 1}},"
             " \"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"a red house\", \"clip\": [\"4\", 1]}},"
             " \"7\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"blurry\", \"clip\": [\"4\", 1]}},"
             " \"10\": {\"class_type\": \"APG\", \"inputs\": {\"model\": [\"4\", 0], \"eta\": 1.0,"
             "   \"norm_threshold\": 5.0, \"momentum\": %.17g}},"
             " \"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 2, \"cfg\": 7.5,"
             "   \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"10\", 0],"
             "   \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
             " \"20\": {\"class_type\": \"PreviewAny\", \"inputs\": {\"source\": [\"3\", 0]}}}",
             momentum);
    return s;
}

static sd_exec_report run_apg(sd_exec *ex, const sd_env *env, const sd_cache_i *cache, double momentum) {
    sd_error err;
    sd_error_clear(&err);
    char *js = apg_workflow(momentum);
    sd_graph *g = NULL;
    CHECK_OK(sd_graph_from_json(js, "apg_cache.json", &g, &err), &err);
    free(js);
    sd_exec_opts xo = {.env = env, .cache = cache};
    sd_exec_report rep = {0};
    if (g) CHECK_OK(sd_exec_run(ex, g, &xo, &rep, NULL, &err), &err);
    sd_graph_free(g);
    return rep;
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

    /* APG with momentum: nothing after it reaches the persistent cache */
    rec_cache rc0;
    memset(&rc0, 0, sizeof rc0);
    sd_cache_i cache = {.self = &rc0, .get = rc_get, .put = rc_put};
    sd_exec *ex2 = sd_exec_new(); /* (a fresh memo: every node is looked up) */
    sd_exec_report r5 = run_apg(ex2, &env, &cache, 0.5);
    expect(&r5, "3", SD_NODE_EXECUTED, "APG momentum 0.5");
    CHECK_MSG(!strstr(rc0.puts, "KSampler") && !strstr(rc0.puts, "PreviewAny"),
              "APG with momentum: the sampler's result was stored in the persistent cache (puts: %s)", rc0.puts);
    const sd_exec_record *k5 = find(&r5, "3"), *p5 = find(&r5, "20"), *t5 = find(&r5, "6");
    CHECK_MSG(k5 && p5 && !looked_up(&rc0, k5->key) && !looked_up(&rc0, p5->key),
              "APG with momentum: the sampler or its output node was looked up in the persistent cache");
    CHECK_MSG(t5 && looked_up(&rc0, t5->key), "the text encode was not looked up: the check above proves nothing");
    CHECK_MSG(strstr(rc0.puts, "CLIPTextEncode") != NULL,
              "the recording cache saw no put at all (puts: %s): the check above proves nothing", rc0.puts);
    sd_exec_report r6 = run_apg(ex2, &env, &cache, 0.5);
    CHECK_MSG(r6.n_executed == 0, "APG momentum rerun: %zu nodes executed, expected memo hits only", r6.n_executed);
    /* momentum 0: no state, the sampler's result is stored as any other */
    rc0.puts[0] = 0;
    sd_exec_report r7 = run_apg(ex2, &env, &cache, 0.0);
    expect(&r7, "3", SD_NODE_EXECUTED, "APG momentum 0");
    CHECK_MSG(strstr(rc0.puts, "KSampler") != NULL, "APG momentum 0: the sampler's result was not stored (puts: %s)",
              rc0.puts);

    sd_exec_report_free(&r5);
    sd_exec_report_free(&r6);
    sd_exec_report_free(&r7);
    sd_exec_free(ex2);
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
