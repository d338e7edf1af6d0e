/* test_executor.c - the executor with test-only nodes: what runs, in which
 * order, and what the memo and a fake persistent cache save. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "core/env.h"
#include "core/executor.h"
#include "formats/safetensors.h"
#include "core/sha256.h"
#include "testutil.h"

/* ---- call counters (test-only global state) -------------------------------- */

enum { C_CONST, C_ADD, C_LOAD, C_USE, C_OUT, C_RANDOM, C_SLOW, C_FAIL, C_TENSOR, C_N };
static int calls[C_N];
static char call_log[4096];
static const char *out_dir;
static volatile sig_atomic_t interrupt_flag;

static void reset_calls(void) {
    memset(calls, 0, sizeof calls);
    call_log[0] = 0;
}

static void log_call(const sd_node_ctx *ctx) {
    size_t n = strlen(call_log);
    snprintf(call_log + n, sizeof call_log - n, "%s%s", n ? "," : "", ctx->node_id);
}

/* ---- test nodes ------------------------------------------------------------------ */

static sd_status run_const(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_CONST]++;
    log_call(ctx);
    out[0] = sd_value_int(sd_value_as_int(in[0]));
    return SD_OK;
}

static sd_status run_add(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_ADD]++;
    log_call(ctx);
    out[0] = sd_value_int(sd_value_as_int(in[0]) + sd_value_as_int(in[1]) + sd_value_as_int(in[2]));
    return SD_OK;
}

static const sd_handle_type thing_type = {"THING", free};

static sd_status run_load(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_LOAD]++;
    log_call(ctx);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ctx->env->input_dir, sd_value_as_string(in[0]));
    char *text = sd_test_read_file(path, NULL);
    if (!text) return sd_error_set(err, SD_ERR_IO, "cannot read %s", path);
    int *x = malloc(sizeof *x);
    *x = (int)strlen(text); /* the "model" is the file's length */
    free(text);
    out[0] = sd_value_handle(&thing_type, x);
    return SD_OK;
}

static sd_status run_use(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_USE]++;
    log_call(ctx);
    int *x = sd_value_as_handle(in[0], &thing_type);
    if (!x) return sd_error_set(err, SD_ERR_INTERNAL, "no thing");
    out[0] = sd_value_int(*x * 100 + sd_value_as_int(in[1]));
    return SD_OK;
}

/* Writes a file named after its prefix and reports it in ui.files. */
static sd_status run_out(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_OUT]++;
    log_call(ctx);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.txt", out_dir, sd_value_as_string(in[1]));
    FILE *f = fopen(path, "w");
    if (!f) return sd_error_set(err, SD_ERR_IO, "cannot write %s", path);
    fprintf(f, "%lld\n", (long long)sd_value_as_int(in[0]));
    fclose(f);
    uint8_t h[32];
    char hex[65];
    sd_status rc = sd_sha256_file(path, h, err);
    if (rc) return rc;
    sd_sha256_hex(h, hex);
    sd_value *ui = sd_value_dict(), *files = sd_value_list(), *hashes = sd_value_list();
    sd_value_list_append(files, sd_value_string(path));
    sd_value_list_append(hashes, sd_value_string(hex));
    sd_value_dict_set(ui, "files", files);
    sd_value_dict_set(ui, "sha256", hashes);
    ctx->ui = ui;
    return SD_OK;
}

static sd_status run_random(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_RANDOM]++;
    log_call(ctx);
    out[0] = sd_value_int(calls[C_RANDOM] * 1000);
    return SD_OK;
}

/* Ten progress steps; the test interrupts at step 3 through the callback. */
static sd_status run_slow(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_SLOW]++;
    log_call(ctx);
    for (int i = 0; i < 10; i++) {
        sd_status rc = sd_node_progress(ctx, i + 1, 10, err);
        if (rc) return rc;
    }
    out[0] = sd_value_int(sd_value_as_int(in[0]) + 1);
    return SD_OK;
}

static sd_status run_fail(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_FAIL]++;
    log_call(ctx);
    sd_error_set(err, SD_ERR_INVALID, "this node always fails");
    sd_error_at(err, NULL, NULL, "value");
    return SD_ERR_INVALID;
}

static sd_status run_tensor(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    calls[C_TENSOR]++;
    log_call(ctx);
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, 2, 3, 0, 0);
    for (int i = 0; i < 6; i++) sd_tensor_f32(t)[i] = (float)(i + sd_value_as_int(in[0]));
    sd_value *latent = sd_value_dict();
    sd_value_dict_set(latent, "samples", sd_value_tensor(t));
    sd_value *cond = sd_value_list(), *c0 = sd_value_dict();
    sd_value_dict_set(c0, "cond", sd_value_tensor(t));
    sd_value_list_append(cond, c0);
    out[0] = latent;
    out[1] = cond;
    out[2] = sd_value_tensor(t);
    sd_tensor_unref(t);
    return SD_OK;
}

static const sd_input_def const_in[] = {{.name = "value", .type = SD_T_INT, .def = 7, .min = -1000,
                                         .max = 1000000, .has_range = 1}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_input_def add_in[] = {{.name = "a", .type = "INT"}, {.name = "b", .type = "INT"},
                                      {.name = "bias", .type = SD_T_INT, .def = 0}, {NULL}};
static const sd_input_def load_in[] = {{.name = "file", .type = SD_T_STRING, .file_folder = "input"}, {NULL}};
static const sd_output_def thing_out[] = {{"THING", "THING"}, {NULL}};
static const sd_input_def use_in[] = {{.name = "thing", .type = "THING"}, {.name = "x", .type = "INT"}, {NULL}};
static const sd_input_def out_in[] = {{.name = "value", .type = "*"},
                                      {.name = "prefix", .type = SD_T_STRING, .def_str = "out"}, {NULL}};
static const sd_input_def slow_in[] = {{.name = "x", .type = "INT"}, {NULL}};
static const sd_input_def fail_in[] = {{.name = "x", .type = "INT"}, {NULL}};
static const sd_output_def tensor_out[] = {{"LATENT", "LATENT"}, {"CONDITIONING", "CONDITIONING"},
                                           {"IMAGE", "IMAGE"}, {NULL}};

static const sd_node_def n_const = {1, "TConst", NULL, "test", "", const_in, int_out, 0, run_const};
static const sd_node_def n_add = {1, "TAdd", NULL, "test", "", add_in, int_out, 0, run_add};
/* TAdd declared as a VAE node: its key follows env.vae_precision */
static const sd_node_def n_add_vae = {1, "TAddVae", NULL, "test", "", add_in, int_out, SD_NODE_VAE, run_add};
static const sd_node_def n_load = {1, "TLoad", NULL, "test", "", load_in, thing_out, 0, run_load};
static const sd_node_def n_use = {1, "TUse", NULL, "test", "", use_in, int_out, 0, run_use};
static const sd_node_def n_out = {1, "TOut", NULL, "test", "", out_in, NULL, SD_NODE_OUTPUT, run_out};
static const sd_node_def n_random = {1, "TRandom", NULL, "test", "", NULL, int_out, SD_NODE_NOT_IDEMPOTENT,
                                     run_random};
static const sd_node_def n_slow = {1, "TSlow", NULL, "test", "", slow_in, int_out, 0, run_slow};
static const sd_node_def n_fail = {1, "TFail", NULL, "test", "", fail_in, int_out, 0, run_fail};
static const sd_node_def n_tensor = {1, "TTensor", NULL, "test", "", const_in, tensor_out, 0, run_tensor};
static const sd_node_def *const table[] = {&n_const, &n_add, &n_add_vae, &n_load, &n_use, &n_out, &n_random,
                                           &n_slow, &n_fail, &n_tensor, NULL};

/* ---- a fake persistent cache ------------------------------------------------------ */

typedef struct fake_cache {
    uint8_t keys[256][SD_KEY_SIZE];
    sd_value *values[256];
    char classes[256][16];
    int n, gets, puts, file_gets, file_puts;
} fake_cache;

static sd_status fc_get(void *self, const uint8_t key[SD_KEY_SIZE], sd_value **out, sd_error *err) {
    fake_cache *c = self;
    c->gets++;
    for (int i = 0; i < c->n; i++)
        if (memcmp(c->keys[i], key, SD_KEY_SIZE) == 0) { *out = sd_value_ref(c->values[i]); return SD_OK; }
    return SD_ERR_NOT_FOUND;
}

static sd_status fc_put(void *self, const uint8_t key[SD_KEY_SIZE], const char *class_type,
                        const sd_value *v, sd_error *err) {
    fake_cache *c = self;
    c->puts++;
    if (!sd_value_is_data(v)) return sd_error_set(err, SD_ERR_INVALID, "handle in cache");
    if (c->n == 256) return sd_error_set(err, SD_ERR_NOMEM, "full");
    memcpy(c->keys[c->n], key, SD_KEY_SIZE);
    snprintf(c->classes[c->n], sizeof c->classes[0], "%s", class_type);
    c->values[c->n++] = sd_value_ref((sd_value *)v);
    return SD_OK;
}

/* Evict every entry of one class_type (as gc would). */
static void fc_drop(fake_cache *c, const char *class_type) {
    int j = 0;
    for (int i = 0; i < c->n; i++) {
        if (!strcmp(c->classes[i], class_type)) { sd_value_unref(c->values[i]); continue; }
        memmove(c->keys[j], c->keys[i], SD_KEY_SIZE);
        memmove(c->classes[j], c->classes[i], sizeof c->classes[0]);
        c->values[j++] = c->values[i];
    }
    c->n = j;
}

static struct { char path[4096]; int64_t size, mtime; uint8_t hash[SD_KEY_SIZE]; } fc_files[16];
static int fc_n_files;

static sd_status fc_file_get(void *self, const char *path, int64_t size, int64_t mtime, uint8_t out[SD_KEY_SIZE]) {
    ((fake_cache *)self)->file_gets++;
    for (int i = 0; i < fc_n_files; i++)
        if (!strcmp(fc_files[i].path, path) && fc_files[i].size == size && fc_files[i].mtime == mtime) {
            memcpy(out, fc_files[i].hash, SD_KEY_SIZE);
            return SD_OK;
        }
    return SD_ERR_NOT_FOUND;
}

static void fc_file_put(void *self, const char *path, int64_t size, int64_t mtime, const uint8_t h[SD_KEY_SIZE]) {
    ((fake_cache *)self)->file_puts++;
    if (fc_n_files == 16) return;
    snprintf(fc_files[fc_n_files].path, sizeof fc_files[0].path, "%s", path);
    fc_files[fc_n_files].size = size;
    fc_files[fc_n_files].mtime = mtime;
    memcpy(fc_files[fc_n_files].hash, h, SD_KEY_SIZE);
    fc_n_files++;
}

static void fc_clear(fake_cache *c) {
    for (int i = 0; i < c->n; i++) sd_value_unref(c->values[i]);
    memset(c, 0, sizeof *c);
}

/* ---- helpers ------------------------------------------------------------------------ */

static sd_env env;
static fake_cache fcache;
static sd_cache_i cache_i = {&fcache, fc_get, fc_put, fc_file_get, fc_file_put};

static sd_graph *parse(const char *json) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(json, "test.json", &g, &err), &err);
    return g;
}

static const sd_exec_record *rec_of(const sd_exec_report *r, const char *id) {
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].node_id, id) == 0) return &r->items[i];
    return NULL;
}

static int status_of(const sd_exec_report *r, const char *id) {
    const sd_exec_record *rec = rec_of(r, id);
    return rec ? (int)rec->status : -1;
}

/* Runs g once; returns the status code and leaves the report in *rep. */
static sd_status run_graph(sd_exec *ex, const sd_graph *g, const sd_cache_i *cache, sd_exec_report *rep,
                           sd_error *err) {
    sd_exec_opts o = {.env = &env, .cache = cache, .interrupt = &interrupt_flag};
    reset_calls();
    sd_error_clear(err);
    return sd_exec_run(ex, g, &o, rep, NULL, err);
}

static sd_status run_json(sd_exec *ex, const char *json, const sd_cache_i *cache, sd_exec_report *rep,
                          sd_error *err) {
    sd_graph *g = parse(json);
    if (!g) return SD_ERR_INVALID;
    sd_status rc = run_graph(ex, g, cache, rep, err);
    sd_graph_free(g);
    return rc;
}

/* A diamond (1 feeds 2 and 3, both feed 4), a dangling node 6 and an output 5. */
static const char *DIAMOND =
    "{\"1\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 2}},"
    " \"6\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 99}},"
    " \"2\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"1\", 0], \"b\": [\"1\", 0], \"bias\": 0}},"
    " \"3\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"1\", 0], \"b\": [\"1\", 0], \"bias\": 1}},"
    " \"4\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"2\", 0], \"b\": [\"3\", 0], \"bias\": 0}},"
    " \"5\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"4\", 0], \"prefix\": \"diamond\"}}}";

static long read_number(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.txt", out_dir, name);
    char *s = sd_test_read_file(path, NULL);
    long v = s ? atol(s) : -1;
    free(s);
    return v;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_order_and_memo(void) {
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    sd_error err;
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK(calls[C_CONST] == 1 && calls[C_ADD] == 3 && calls[C_OUT] == 1); /* 6 never ran */
    CHECK_MSG(strcmp(call_log, "1,2,3,4,5") == 0, "order %s", call_log);
    CHECK(rep.n == 5 && rep.n_executed == 5 && rep.n_cached == 0);
    CHECK(!rec_of(&rep, "6"));
    CHECK(read_number("diamond") == (2 + 2) + (2 + 2 + 1));
    const sd_exec_record *r5 = rec_of(&rep, "5");
    CHECK(r5 && sd_value_list_len(sd_value_dict_get(r5->ui, "files")) == 1);
    const sd_exec_record *r4 = rec_of(&rep, "4");
    CHECK(r4 && r4->n_outputs == 1 && strstr(r4->output_desc[0], "INT 9"));
    char *json = sd_exec_report_json(&rep);
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    CHECK(j && cJSON_GetObjectItem(j, "executed")->valueint == 5);
    const cJSON *n5 = j ? cJSON_GetObjectItem(cJSON_GetObjectItem(j, "nodes"), "5") : NULL;
    CHECK(n5 && strcmp(cJSON_GetObjectItem(n5, "status")->valuestring, "executed") == 0 &&
          strcmp(cJSON_GetObjectItem(n5, "class_type")->valuestring, "TOut") == 0);
    const cJSON *ui = n5 ? cJSON_GetObjectItem(n5, "ui") : NULL;
    CHECK(ui && cJSON_GetArraySize(cJSON_GetObjectItem(ui, "files")) == 1);
    cJSON_Delete(j);
    free(json);
    sd_exec_report_free(&rep);

    /* Same sd_exec: everything comes from the memo. */
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK(rep.n_executed == 0 && call_log[0] == 0);
    CHECK(status_of(&rep, "5") == SD_NODE_MEMO);
    CHECK(rec_of(&rep, "5") && rec_of(&rep, "5")->ui); /* the cached ui is reported too */
    CHECK(!rec_of(&rep, "1")); /* not even visited: its consumers hit */
    sd_exec_report_free(&rep);

    /* The output's file is gone: only the output node runs again, on its
     * cached input, and says its result came from the cache. */
    char path[4096];
    snprintf(path, sizeof path, "%s/diamond.txt", out_dir);
    unlink(path);
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "5") == 0, "ran %s", call_log);
    CHECK(status_of(&rep, "4") == SD_NODE_MEMO && read_number("diamond") == 9);
    CHECK(status_of(&rep, "5") == SD_NODE_MEMO && rec_of(&rep, "5")->delivered);
    CHECK(rep.n_executed == 0 && rep.n_cached == 2);
    char *rj = sd_exec_report_json(&rep);
    cJSON *rjj = rj ? cJSON_Parse(rj) : NULL;
    const cJSON *d5 = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(rjj, "nodes"), "5"), "delivered");
    CHECK(cJSON_IsTrue(d5));
    cJSON_Delete(rjj);
    free(rj);
    sd_exec_report_free(&rep);

    /* Someone else's bytes under the recorded name: not taken for ours. */
    reset_calls();
    FILE *f = fopen(path, "w");
    if (f) { fputs("8\n", f); fclose(f); } /* same length, other bytes */
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "5") == 0, "ran %s", call_log);
    CHECK(rec_of(&rep, "5") && rec_of(&rep, "5")->delivered);
    sd_exec_report_free(&rep);
    reset_calls();
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err); /* now it is ours again */
    CHECK_MSG(call_log[0] == 0, "ran %s", call_log);
    sd_exec_report_free(&rep);

    /* Another output folder: the file in the old one does not count. */
    char other[4096];
    snprintf(other, sizeof other, "%s/elsewhere", out_dir);
    mkdir(other, 0777);
    CHECK_OK(sd_env_set(&env, &env.output_dir, other, &err), &err);
    reset_calls();
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK(rec_of(&rep, "5") && rec_of(&rep, "5")->delivered);
    sd_exec_report_free(&rep);
    CHECK_OK(sd_env_set(&env, &env.output_dir, out_dir, &err), &err);

    /* A link in place of the file is not ours either. */
    char moved[4200];
    snprintf(moved, sizeof moved, "%s.moved", path);
    CHECK(rename(path, moved) == 0 && symlink(moved, path) == 0);
    reset_calls();
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK(rec_of(&rep, "5") && rec_of(&rep, "5")->delivered);
    sd_exec_report_free(&rep);
    unlink(path); /* the test node wrote through it */
    unlink(moved);

    sd_exec_forget(ex);
    CHECK_OK(run_json(ex, DIAMOND, NULL, &rep, &err), &err);
    CHECK(rep.n_executed == 5);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
}

static void test_persistent_cache(void) {
    fc_clear(&fcache);
    sd_exec_report rep;
    sd_error err;
    sd_exec *ex = sd_exec_new();
    CHECK_OK(run_json(ex, DIAMOND, &cache_i, &rep, &err), &err);
    CHECK(rep.n_executed == 5 && fcache.puts == 5);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);

    /* A new process (fresh sd_exec): nothing executes. */
    ex = sd_exec_new();
    CHECK_OK(run_json(ex, DIAMOND, &cache_i, &rep, &err), &err);
    CHECK_MSG(rep.n_executed == 0 && call_log[0] == 0, "ran %s", call_log);
    CHECK(status_of(&rep, "5") == SD_NODE_CACHED && rep.n == 1);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);

    /* The output file is gone and so are the sums it came from (evicted):
     * the sums run again, and the output node, written from them, counts as
     * executed, not as delivered from the cache. */
    char out_path[4096];
    snprintf(out_path, sizeof out_path, "%s/diamond.txt", out_dir);
    unlink(out_path);
    fc_drop(&fcache, "TAdd");
    ex = sd_exec_new();
    CHECK_OK(run_json(ex, DIAMOND, &cache_i, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "2,3,4,5") == 0, "ran %s", call_log);
    CHECK(status_of(&rep, "5") == SD_NODE_EXECUTED && !rec_of(&rep, "5")->delivered);
    CHECK(status_of(&rep, "1") == SD_NODE_CACHED && read_number("diamond") == 9);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);

    /* Changing one literal re-executes exactly its downstream cone (3, 4, 5). */
    ex = sd_exec_new();
    sd_graph *g = parse(DIAMOND);
    CHECK_OK(sd_graph_apply_set(g, "3.bias=5", &err), &err);
    CHECK_OK(run_graph(ex, g, &cache_i, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "3,4,5") == 0, "ran %s", call_log);
    CHECK(status_of(&rep, "1") == SD_NODE_CACHED && status_of(&rep, "2") == SD_NODE_CACHED);
    CHECK(read_number("diamond") == 4 + 9);
    sd_exec_report_free(&rep);
    /* An explicit default hashes like an omitted input: bias=0 on node 2 hits. */
    CHECK_OK(sd_graph_apply_set(g, "2.bias=0", &err), &err);
    CHECK_OK(sd_graph_apply_set(g, "1.value=2.0", &err), &err); /* integral float for INT */
    sd_exec_forget(ex);
    CHECK_OK(run_graph(ex, g, &cache_i, &rep, &err), &err);
    CHECK_MSG(rep.n_executed == 0, "ran %s", call_log);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);

    /* Renumbered ids (and a different insertion order) hit the same entries. */
    ex = sd_exec_new();
    CHECK_OK(run_json(ex,
        "{\"50\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"40\", 0], \"prefix\": \"diamond\"}},"
        " \"40\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"20\", 0], \"b\": [\"30\", 0], \"bias\": 0}},"
        " \"30\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"10\", 0], \"b\": [\"10\", 0], \"bias\": 1}},"
        " \"20\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"10\", 0], \"b\": [\"10\", 0], \"bias\": 0}},"
        " \"10\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 2}}}",
        &cache_i, &rep, &err), &err);
    CHECK_MSG(rep.n_executed == 0, "ran %s", call_log);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);

    /* Another device or precision never reuses these results (kernels round
     * differently); switching back hits again. */
    const char *dev0 = env.device, *prec0 = env.precision;
    const char *variants[][2] = {{"cuda", NULL}, {NULL, "bf16"}};
    for (int v = 0; v < 2; v++) {
        if (variants[v][0]) env.device = variants[v][0];
        if (variants[v][1]) env.precision = variants[v][1];
        ex = sd_exec_new();
        CHECK_OK(run_json(ex, DIAMOND, &cache_i, &rep, &err), &err);
        CHECK_MSG(rep.n_executed == 5, "%s/%s: ran %s", env.device, env.precision, call_log);
        sd_exec_report_free(&rep);
        sd_exec_free(ex);
        env.device = dev0;
        env.precision = prec0;
    }
    ex = sd_exec_new();
    CHECK_OK(run_json(ex, DIAMOND, &cache_i, &rep, &err), &err);
    CHECK_MSG(rep.n_executed == 0, "back on cpu/f32: ran %s", call_log);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);

    /* --vae-precision / --clip-precision: only a VAE node's key (and what
     * reads it) follows vae_precision; the same precision as --precision
     * written out keeps the keys. */
    static const char vae_graph[] =
        "{\"1\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 21}},"
        " \"2\": {\"class_type\": \"TAddVae\", \"inputs\": {\"a\": [\"1\", 0], \"b\": [\"1\", 0], \"bias\": 0}},"
        " \"3\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"2\", 0], \"prefix\": \"vae_prec\"}}}";
    const struct { const char *vae, *clip; size_t executed; } pv[] = {
        {NULL, NULL, 3}, {"bf16", NULL, 2}, {NULL, "bf16", 0}, {"f32", NULL, 0}, {"bf16", "f16", 0}};
    for (size_t v = 0; v < sizeof pv / sizeof pv[0]; v++) {
        env.vae_precision = pv[v].vae;
        env.clip_precision = pv[v].clip;
        ex = sd_exec_new();
        CHECK_OK(run_json(ex, vae_graph, &cache_i, &rep, &err), &err);
        CHECK_MSG(rep.n_executed == pv[v].executed, "vae %s clip %s: ran %zu (%s), expected %zu",
                  pv[v].vae ? pv[v].vae : "-", pv[v].clip ? pv[v].clip : "-", rep.n_executed, call_log,
                  pv[v].executed);
        sd_exec_report_free(&rep);
        sd_exec_free(ex);
    }
    env.vae_precision = env.clip_precision = NULL;
    fc_clear(&fcache);
}

static void test_duplicates(void) {
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    sd_error err;
    /* Two identical branches 1->2 and 3->4 feeding two outputs. */
    CHECK_OK(run_json(ex,
        "{\"1\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 5}},"
        " \"2\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"1\", 0], \"b\": [\"1\", 0], \"bias\": 0}},"
        " \"3\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 5}},"
        " \"4\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"3\", 0], \"b\": [\"3\", 0], \"bias\": 0}},"
        " \"5\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"2\", 0], \"prefix\": \"dup_a\"}},"
        " \"6\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"4\", 0], \"prefix\": \"dup_b\"}}}",
        NULL, &rep, &err), &err);
    CHECK_MSG(calls[C_CONST] == 1 && calls[C_ADD] == 1 && calls[C_OUT] == 2, "ran %s", call_log);
    CHECK(status_of(&rep, "3") == SD_NODE_MEMO && status_of(&rep, "4") == SD_NODE_MEMO);
    CHECK(read_number("dup_a") == 10 && read_number("dup_b") == 10);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
}

static void write_file(const char *name, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", env.input_dir, name);
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

static const char *LOADER =
    "{\"1\": {\"class_type\": \"TLoad\", \"inputs\": {\"file\": \"model.bin\"}},"
    " \"2\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 3}},"
    " \"3\": {\"class_type\": \"TUse\", \"inputs\": {\"thing\": [\"1\", 0], \"x\": [\"2\", 0]}},"
    " \"4\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"3\", 0], \"prefix\": \"loader\"}}}";

static void test_loader_not_run(void) {
    fc_clear(&fcache);
    fc_n_files = 0;
    write_file("model.bin", "weights-v1");
    sd_exec_report rep;
    sd_error err;
    sd_exec *ex = sd_exec_new();
    CHECK_OK(run_json(ex, LOADER, &cache_i, &rep, &err), &err);
    CHECK(calls[C_LOAD] == 1 && rep.n_executed == 4);
    CHECK(fcache.puts == 3); /* the handle-valued loader is never persisted */
    CHECK(fcache.file_puts == 1 && read_number("loader") == 10 * 100 + 3);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);

    /* New process, outputs cached: the loader is not run at all. */
    ex = sd_exec_new();
    int file_gets = fcache.file_gets;
    CHECK_OK(run_json(ex, LOADER, &cache_i, &rep, &err), &err);
    CHECK_MSG(rep.n_executed == 0 && calls[C_LOAD] == 0, "ran %s", call_log);
    CHECK(!rec_of(&rep, "1"));
    CHECK(fcache.file_gets == file_gets + 1 && fcache.file_puts == 1); /* hash memo hit */
    sd_exec_report_free(&rep);

    /* A consumer that misses needs the loader: it runs. */
    sd_graph *g = parse(LOADER);
    CHECK_OK(sd_graph_apply_set(g, "2.value=4", &err), &err);
    CHECK_OK(run_graph(ex, g, &cache_i, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "1,2,3,4") == 0, "ran %s", call_log);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);

    /* Same file content under another name: same key, hits. */
    write_file("copy.bin", "weights-v1");
    ex = sd_exec_new();
    g = parse(LOADER);
    CHECK_OK(sd_graph_apply_set(g, "1.file=copy.bin", &err), &err);
    CHECK_OK(run_graph(ex, g, &cache_i, &rep, &err), &err);
    CHECK_MSG(rep.n_executed == 0, "ran %s", call_log);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);

    /* Changed content (even with a mismatching mtime memo) re-runs the cone. */
    write_file("model.bin", "weights-v2-longer");
    ex = sd_exec_new();
    CHECK_OK(run_json(ex, LOADER, &cache_i, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "1,3,4") == 0, "ran %s", call_log);
    CHECK(read_number("loader") == 17 * 100 + 3);
    sd_exec_report_free(&rep);

    /* A missing file is an error naming the node and input; nothing runs. */
    g = parse(LOADER);
    CHECK_OK(sd_graph_apply_set(g, "1.file=nope.bin", &err), &err);
    CHECK(run_graph(ex, g, &cache_i, &rep, &err) == SD_ERR_NOT_FOUND);
    CHECK(strcmp(err.node_id, "1") == 0 && strcmp(err.input, "file") == 0 && call_log[0] == 0);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);
    fc_clear(&fcache);
}

/* A REPL keeps one sd_exec: a loaded handle stays in the memo, so a changed
 * consumer reuses it instead of loading again. */
static void test_memo_keeps_handles(void) {
    write_file("model.bin", "weights-v1");
    sd_exec_report rep;
    sd_error err;
    sd_exec *ex = sd_exec_new();
    CHECK_OK(run_json(ex, LOADER, NULL, &rep, &err), &err);
    CHECK(calls[C_LOAD] == 1);
    sd_exec_report_free(&rep);
    sd_graph *g = parse(LOADER);
    CHECK_OK(sd_graph_apply_set(g, "2.value=9", &err), &err);
    CHECK_OK(run_graph(ex, g, NULL, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "2,3,4") == 0, "ran %s", call_log);
    CHECK(status_of(&rep, "1") == SD_NODE_MEMO);
    CHECK(read_number("loader") == 10 * 100 + 9);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);
}

static void test_not_idempotent(void) {
    fc_clear(&fcache);
    const char *wf =
        "{\"1\": {\"class_type\": \"TRandom\", \"inputs\": {}},"
        " \"2\": {\"class_type\": \"TRandom\", \"inputs\": {}},"
        " \"3\": {\"class_type\": \"TAdd\", \"inputs\": {\"a\": [\"1\", 0], \"b\": [\"2\", 0], \"bias\": 0}},"
        " \"4\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"3\", 0], \"prefix\": \"rand\"}}}";
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    sd_error err;
    CHECK_OK(run_json(ex, wf, &cache_i, &rep, &err), &err);
    CHECK(calls[C_RANDOM] == 2 && calls[C_ADD] == 1); /* identical copies both run */
    CHECK(fcache.puts == 0); /* neither they nor their downstream are stored */
    CHECK(read_number("rand") == 1000 + 2000);
    const sd_exec_record *a = rec_of(&rep, "1"), *b = rec_of(&rep, "2");
    CHECK(a && b && memcmp(a->key, b->key, SD_KEY_SIZE) != 0);
    sd_exec_report_free(&rep);
    CHECK_OK(run_json(ex, wf, &cache_i, &rep, &err), &err);
    CHECK_MSG(strcmp(call_log, "1,2,3,4") == 0, "ran %s", call_log);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
    fc_clear(&fcache);
}

static void on_progress(void *user, const char *node_id, int64_t value, int64_t max) {
    int *seen = user;
    (*seen)++;
    if (value == 3) interrupt_flag = 1;
}

static int node_events;
static void on_node(void *user, const sd_exec_record *rec, int finished) { node_events++; }

static void test_cancel_and_failure(void) {
    fc_clear(&fcache);
    const char *wf =
        "{\"1\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 1}},"
        " \"2\": {\"class_type\": \"TSlow\", \"inputs\": {\"x\": [\"1\", 0]}},"
        " \"3\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"2\", 0], \"prefix\": \"slow\"}}}";
    sd_graph *g = parse(wf);
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    sd_error err;
    int seen = 0;
    sd_exec_opts o = {.env = &env, .cache = &cache_i, .interrupt = &interrupt_flag,
                      .progress = on_progress, .progress_user = &seen, .on_node = on_node};
    reset_calls();
    interrupt_flag = 0;
    node_events = 0;
    sd_error_clear(&err);
    CHECK(sd_exec_run(ex, g, &o, &rep, NULL, &err) == SD_ERR_CANCELLED);
    CHECK(seen == 3 && calls[C_SLOW] == 1 && calls[C_OUT] == 0);
    CHECK(status_of(&rep, "1") == SD_NODE_EXECUTED && status_of(&rep, "2") == SD_NODE_FAILED &&
          status_of(&rep, "3") == SD_NODE_SKIPPED);
    CHECK(node_events == 4); /* before/after for 1 and 2, nothing for the skipped node */
    CHECK(fcache.puts == 1); /* only the complete result */
    sd_exec_report_free(&rep);

    /* Interrupt already set: nothing runs. */
    reset_calls();
    sd_error_clear(&err);
    CHECK(sd_exec_run(ex, g, &o, &rep, NULL, &err) == SD_ERR_CANCELLED && call_log[0] == 0);
    sd_exec_report_free(&rep);

    /* Resumed: node 1 hits, the rest runs. */
    interrupt_flag = 0;
    o.progress = NULL;
    sd_exec_free(ex);
    ex = sd_exec_new();
    reset_calls();
    CHECK_OK(sd_exec_run(ex, g, &o, &rep, NULL, &err), &err);
    CHECK_MSG(strcmp(call_log, "2,3") == 0, "ran %s", call_log);
    CHECK(read_number("slow") == 2);
    sd_exec_report_free(&rep);
    sd_graph_free(g);

    /* A failing node: the error names it; later nodes are skipped. */
    g = parse("{\"1\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": 7}},"
              " \"2\": {\"class_type\": \"TFail\", \"inputs\": {\"x\": [\"1\", 0]}},"
              " \"3\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"2\", 0], \"prefix\": \"out\"}}}");
    CHECK(run_graph(ex, g, NULL, &rep, &err) == SD_ERR_INVALID);
    CHECK(strcmp(err.node_id, "2") == 0 && strcmp(err.class_type, "TFail") == 0 &&
          strcmp(err.input, "value") == 0 && strstr(err.msg, "always fails"));
    CHECK(status_of(&rep, "2") == SD_NODE_FAILED && status_of(&rep, "3") == SD_NODE_SKIPPED);
    sd_exec_report_free(&rep);
    sd_graph_free(g);

    /* Validation failure: nothing runs, problems returned. */
    g = parse("{\"1\": {\"class_type\": \"TConst\", \"inputs\": {\"value\": \"x\"}},"
              " \"3\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"1\", 0], \"prefix\": \"out\"}}}");
    sd_graph_problems probs = {0};
    reset_calls();
    CHECK(sd_exec_run(ex, g, &o, &rep, &probs, &err) == SD_ERR_VALIDATION);
    CHECK(probs.n == 1 && call_log[0] == 0 && rep.n == 0);
    sd_graph_problems_free(&probs);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);
    fc_clear(&fcache);
}

static void test_dump(void) {
    const char *dir = sd_test_tmpdir("executor_dump");
    sd_graph *g = parse("{\"1\": {\"class_type\": \"TTensor\", \"inputs\": {\"value\": 1}},"
                        " \"2\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"1\", 1], \"prefix\": \"t\"}},"
                        " \"3\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"1\", 2], \"prefix\": \"u\"}},"
                        " \"4\": {\"class_type\": \"TOut\", \"inputs\": {\"value\": [\"1\", 0], \"prefix\": \"v\"}}}");
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    sd_error err;
    sd_exec_opts o = {.env = &env, .dump_dir = dir};
    sd_error_clear(&err);
    CHECK_OK(sd_exec_run(ex, g, &o, &rep, NULL, &err), &err);
    const sd_exec_record *r1 = rec_of(&rep, "1");
    CHECK(r1 && r1->n_outputs == 3 && strstr(r1->output_desc[0], "LATENT samples=[2, 3] F32"));
    const char *names[3] = {"samples", "0.cond", "IMAGE"};
    for (int k = 0; k < 3; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/1_%d.safetensors", dir, k);
        sd_st_file *f = NULL;
        sd_error_clear(&err);
        CHECK_OK(sd_st_open(path, &f, &err), &err);
        if (!f) continue;
        const sd_st_entry *e = sd_st_find(f, names[k]);
        CHECK_MSG(e && e->ndim == 2 && e->shape[1] == 3, "tensor %s in %s", names[k], path);
        sd_st_close(f);
    }
    sd_exec_report_free(&rep);

    /* Rerun with everything cached: the dump still covers node 1, which is
     * looked up (not run) although its consumers hit. */
    char path[4096];
    snprintf(path, sizeof path, "%s/1_0.safetensors", dir);
    unlink(path);
    reset_calls();
    CHECK_OK(sd_exec_run(ex, g, &o, &rep, NULL, &err), &err);
    CHECK(rep.n_executed == 0 && status_of(&rep, "1") == SD_NODE_MEMO);
    CHECK(access(path, F_OK) == 0);
    sd_exec_report_free(&rep);
    o.dump_dir = NULL;
    CHECK_OK(sd_exec_run(ex, g, &o, &rep, NULL, &err), &err);
    CHECK(!rec_of(&rep, "1")); /* without --dump it is not visited */
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    sd_exec_free(ex);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    CHECK_OK(sd_env_init(&env, &err), &err);
    static char outbuf[4096], inbuf[4096];
    snprintf(outbuf, sizeof outbuf, "%s", sd_test_tmpdir("executor_out"));
    snprintf(inbuf, sizeof inbuf, "%s", sd_test_tmpdir("executor_in"));
    out_dir = outbuf;
    CHECK_OK(sd_env_set(&env, &env.input_dir, inbuf, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, outbuf, &err), &err);
    test_order_and_memo();
    test_persistent_cache();
    test_duplicates();
    test_loader_not_run();
    test_memo_keeps_handles();
    test_not_idempotent();
    test_cancel_and_failure();
    test_dump();
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
