/* test_exec_release.c - sd_exec_opts.release_consumed: a one-shot run drops
 * each output value once its last reader in the run has finished (values
 * count their destructions in an event log), and a run without the option
 * keeps everything in the memo for reruns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/env.h"
#include "core/executor.h"
#include "testutil.h"

/* ---- an event log: node runs and handle destructions, in order ----------- */

static char events[4096];
static int frees_a, frees_b;

static void event(const char *fmt, const char *what) {
    size_t n = strlen(events);
    snprintf(events + n, sizeof events - n, "%s", n ? "," : "");
    n = strlen(events);
    snprintf(events + n, sizeof events - n, fmt, what);
}

static void reset_events(void) {
    events[0] = 0;
    frees_a = frees_b = 0;
}

static void free_a(void *p) { frees_a++; event("free:%s", "A"); free(p); }
static void free_b(void *p) { frees_b++; event("free:%s", "B"); free(p); }
static const sd_handle_type type_a = {"RA", free_a};
static const sd_handle_type type_b = {"RB", free_b};

static long last_output;

/* ---- the toy registry --------------------------------------------------------- */

/* A "checkpoint loader": two handles, one per output, like MODEL and CLIP. */
static sd_status run_load(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)in, (void)err;
    event("run:%s", ctx->node_id);
    int *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    *a = 10;
    *b = 20;
    out[0] = sd_value_handle(&type_a, a);
    out[1] = sd_value_handle(&type_b, b);
    return SD_OK;
}

static sd_status run_use_a(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    event("run:%s", ctx->node_id);
    int *a = sd_value_as_handle(in[0], &type_a);
    if (!a) return sd_error_set(err, SD_ERR_INTERNAL, "A is gone");
    out[0] = sd_value_int(*a + sd_value_as_int(in[1]));
    return SD_OK;
}

static sd_status run_use_b(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    event("run:%s", ctx->node_id);
    int *b = sd_value_as_handle(in[0], &type_b);
    if (!b) return sd_error_set(err, SD_ERR_INTERNAL, "B is gone");
    out[0] = sd_value_int(*b);
    return SD_OK;
}

static sd_status run_sum(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)err;
    event("run:%s", ctx->node_id);
    out[0] = sd_value_int(sd_value_as_int(in[0]) + sd_value_as_int(in[1]));
    return SD_OK;
}

static sd_status run_out(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out, (void)err;
    event("run:%s", ctx->node_id);
    last_output = (long)sd_value_as_int(in[0]);
    sd_value *ui = sd_value_dict();
    sd_value_dict_set(ui, "value", sd_value_int(last_output));
    ctx->ui = ui;
    return SD_OK;
}

static const sd_output_def load_out[] = {{"A", "RA"}, {"B", "RB"}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_input_def use_a_in[] = {{.name = "a", .type = "RA"},
                                        {.name = "x", .type = SD_T_INT, .def = 0}, {NULL}};
static const sd_input_def use_b_in[] = {{.name = "b", .type = "RB"}, {NULL}};
static const sd_input_def sum_in[] = {{.name = "p", .type = "INT"}, {.name = "q", .type = "INT"}, {NULL}};
static const sd_input_def out_in[] = {{.name = "value", .type = "INT"},
                                      {.name = "tag", .type = SD_T_STRING, .def_str = ""}, {NULL}};

static const sd_node_def n_load = {1, "RLoad", NULL, "test", "", NULL, load_out, 0, run_load};
static const sd_node_def n_use_a = {1, "RUseA", NULL, "test", "", use_a_in, int_out, 0, run_use_a};
static const sd_node_def n_use_b = {1, "RUseB", NULL, "test", "", use_b_in, int_out, 0, run_use_b};
static const sd_node_def n_sum = {1, "RSum", NULL, "test", "", sum_in, int_out, 0, run_sum};
static const sd_node_def n_out = {1, "ROut", NULL, "test", "", out_in, NULL, SD_NODE_OUTPUT, run_out};
static const sd_node_def *const table[] = {&n_load, &n_use_a, &n_use_b, &n_sum, &n_out, NULL};

/* ---- a counting persistent cache (puts only; gets always miss) ------------------ */

static int puts_seen;
static sd_status fc_get(void *self, const uint8_t key[SD_KEY_SIZE], sd_value **out, sd_error *err) {
    (void)self, (void)key, (void)out, (void)err;
    return SD_ERR_NOT_FOUND;
}
static sd_status fc_put(void *self, const uint8_t key[SD_KEY_SIZE], const char *class_type,
                        const sd_value *v, sd_error *err) {
    (void)self, (void)key, (void)class_type, (void)err;
    /* The value must still be whole when the cache sees it. */
    const sd_value *outs = sd_value_dict_get(v, "outputs");
    for (size_t k = 0; k < sd_value_list_len(outs); k++)
        CHECK(sd_value_kind_of(sd_value_list_get(outs, k)) == SD_VAL_INT);
    puts_seen++;
    return SD_OK;
}
static const sd_cache_i counting_cache = {NULL, fc_get, fc_put, NULL, NULL};

/* ---- helpers ------------------------------------------------------------------------ */

static sd_env env;

/* 1 loads A and B; 2 reads A, 3 reads B; 4 sums; 5 is the output. */
static const char *PIPE =
    "{\"1\": {\"class_type\": \"RLoad\", \"inputs\": {}},"
    " \"2\": {\"class_type\": \"RUseA\", \"inputs\": {\"a\": [\"1\", 0], \"x\": 1}},"
    " \"3\": {\"class_type\": \"RUseB\", \"inputs\": {\"b\": [\"1\", 1]}},"
    " \"4\": {\"class_type\": \"RSum\", \"inputs\": {\"p\": [\"2\", 0], \"q\": [\"3\", 0]}},"
    " \"5\": {\"class_type\": \"ROut\", \"inputs\": {\"value\": [\"4\", 0], \"tag\": \"\"}}}";

/* Same, plus 6: a duplicate of 2 (same key) read by 7 after 4. */
static const char *DUP =
    "{\"1\": {\"class_type\": \"RLoad\", \"inputs\": {}},"
    " \"2\": {\"class_type\": \"RUseA\", \"inputs\": {\"a\": [\"1\", 0], \"x\": 1}},"
    " \"3\": {\"class_type\": \"RUseB\", \"inputs\": {\"b\": [\"1\", 1]}},"
    " \"4\": {\"class_type\": \"RSum\", \"inputs\": {\"p\": [\"2\", 0], \"q\": [\"3\", 0]}},"
    " \"6\": {\"class_type\": \"RUseA\", \"inputs\": {\"a\": [\"1\", 0], \"x\": 1}},"
    " \"7\": {\"class_type\": \"RSum\", \"inputs\": {\"p\": [\"4\", 0], \"q\": [\"6\", 0]}},"
    " \"5\": {\"class_type\": \"ROut\", \"inputs\": {\"value\": [\"7\", 0], \"tag\": \"\"}}}";

static sd_status run(sd_exec *ex, const char *json, const char *set, int release,
                     const sd_cache_i *cache, sd_exec_report *rep) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(json, "release.json", &g, &err), &err);
    if (!g) return SD_ERR_INVALID;
    if (set) CHECK_OK(sd_graph_apply_set(g, set, &err), &err);
    sd_exec_opts o = {.env = &env, .cache = cache, .release_consumed = release};
    reset_events();
    sd_status rc = sd_exec_run(ex, g, &o, rep, NULL, &err);
    if (rc) {
        char buf[4096];
        fprintf(stderr, "run failed: %s\n", sd_error_format(&err, buf, sizeof buf));
    }
    sd_graph_free(g);
    return rc;
}

static const sd_exec_record *rec_of(const sd_exec_report *r, const char *id) {
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].node_id, id) == 0) return &r->items[i];
    return NULL;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_release_on(void) {
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    CHECK(run(ex, PIPE, NULL, 1, NULL, &rep) == SD_OK);
    /* A goes as soon as 2 (its only reader) is done, before 3 runs; B after 3. */
    CHECK_MSG(strcmp(events, "run:1,run:2,free:A,run:3,free:B,run:4,run:5") == 0, "events %s", events);
    CHECK(last_output == 11 + 20);
    /* The report was filled before anything was dropped. */
    const sd_exec_record *r2 = rec_of(&rep, "2"), *r5 = rec_of(&rep, "5");
    CHECK(r2 && r2->n_outputs == 1 && strstr(r2->output_desc[0], "INT 11"));
    CHECK(r5 && sd_value_as_int(sd_value_dict_get(r5->ui, "value")) == 31);
    sd_exec_report_free(&rep);

    /* The output node's result stays in the memo: a rerun hits it. */
    CHECK(run(ex, PIPE, NULL, 1, NULL, &rep) == SD_OK);
    CHECK_MSG(events[0] == 0, "events %s", events);
    CHECK(rec_of(&rep, "5") && rec_of(&rep, "5")->status == SD_NODE_MEMO);
    sd_exec_report_free(&rep);

    /* Everything upstream of it was dropped from the memo: a new output
     * needs the whole chain again. */
    CHECK(run(ex, PIPE, "5.tag=\"again\"", 1, NULL, &rep) == SD_OK);
    CHECK_MSG(strcmp(events, "run:1,run:2,free:A,run:3,free:B,run:4,run:5") == 0, "events %s", events);
    CHECK(rep.n_executed == 5);
    sd_exec_report_free(&rep);
    reset_events();
    sd_exec_free(ex);
    CHECK(frees_a == 0 && frees_b == 0); /* nothing was left to free */
}

static void test_release_off(void) {
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    CHECK(run(ex, PIPE, NULL, 0, NULL, &rep) == SD_OK);
    CHECK_MSG(strcmp(events, "run:1,run:2,run:3,run:4,run:5") == 0, "events %s", events);
    CHECK(frees_a == 0 && frees_b == 0);
    sd_exec_report_free(&rep);

    /* A new output: its producers are memo hits, nothing upstream reruns. */
    CHECK(run(ex, PIPE, "5.tag=\"again\"", 0, NULL, &rep) == SD_OK);
    CHECK_MSG(strcmp(events, "run:5") == 0, "events %s", events);
    CHECK(rec_of(&rep, "4") && rec_of(&rep, "4")->status == SD_NODE_MEMO);
    CHECK(rep.n_executed == 1 && rep.n_cached == 1);
    sd_exec_report_free(&rep);

    /* A change under the loader's readers reruns 2 only; A is still in the memo. */
    CHECK(run(ex, PIPE, "2.x=2", 0, NULL, &rep) == SD_OK);
    CHECK_MSG(strcmp(events, "run:2,run:4,run:5") == 0, "events %s", events);
    CHECK(rec_of(&rep, "1") && rec_of(&rep, "1")->status == SD_NODE_MEMO);
    CHECK(last_output == 12 + 20);
    sd_exec_report_free(&rep);
    reset_events();
    sd_exec_free(ex); /* the memo goes, and the handles with it */
    CHECK(frees_a == 1 && frees_b == 1);
}

static void test_duplicate_branch(void) {
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    CHECK(run(ex, DUP, NULL, 1, NULL, &rep) == SD_OK);
    /* 6 has 2's key: it takes 2's result from the memo instead of running,
     * but A (which 6 would read) is kept until 6's turn; B goes after 3. */
    CHECK_MSG(strcmp(events, "run:1,run:2,run:3,free:B,run:4,free:A,run:7,run:5") == 0,
              "events %s", events);
    CHECK(rec_of(&rep, "6") && rec_of(&rep, "6")->status == SD_NODE_MEMO);
    CHECK(last_output == (11 + 20) + 11);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
}

static void test_cache_sees_whole_values(void) {
    int puts_off, puts_on;
    sd_exec *ex = sd_exec_new();
    sd_exec_report rep;
    puts_seen = 0;
    CHECK(run(ex, PIPE, NULL, 0, &counting_cache, &rep) == SD_OK);
    puts_off = puts_seen;
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
    ex = sd_exec_new();
    puts_seen = 0;
    CHECK(run(ex, PIPE, NULL, 1, &counting_cache, &rep) == SD_OK);
    puts_on = puts_seen;
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
    CHECK_MSG(puts_on == puts_off && puts_on == 4, "puts %d vs %d", puts_on, puts_off);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    CHECK_OK(sd_env_init(&env, &err), &err);
    test_release_on();
    test_release_off();
    test_duplicate_branch();
    test_cache_sees_whole_values();
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
