/* test_exec_lru.c - what a long-lived front end (`sdflow serve`) relies on
 * in the executor: on_plan announces the cache hits before anything runs,
 * and sd_exec_drop_lru releases the memo entry stored or hit longest ago,
 * so the results of a recently used graph survive a trim and an old one's
 * do not. */
#include <stdio.h>
#include <string.h>
#include "core/executor.h"
#include "core/graph.h"
#include "testutil.h"

static int runs; /* node function calls */

static sd_status run_const(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    runs++;
    out[0] = sd_value_int(sd_value_as_int(in[0]));
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}
static sd_status run_sink(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    runs++;
    return SD_OK;
}

static const sd_input_def const_in[] = {{.name = "value", .type = SD_T_INT, .def = 0, .min = -1000, .max = 1000,
                                         .has_range = 1}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_input_def sink_in[] = {{.name = "x", .type = "INT"}, {NULL}};
static const sd_node_def n_const = {1, "LruConst", NULL, "test", "", const_in, int_out, 0, run_const};
static const sd_node_def n_sink = {1, "LruSink", NULL, "test", "", sink_in, NULL, SD_NODE_OUTPUT, run_sink};
static const sd_node_def *const table[] = {&n_const, &n_sink, NULL};

typedef struct plan_seen { int calls; size_t hits, to_run; } plan_seen;

static void on_plan(void *user, const sd_exec_report *rep) {
    plan_seen *p = user;
    p->calls++;
    p->hits = p->to_run = 0;
    for (size_t i = 0; i < rep->n; i++) {
        if (rep->items[i].planned == SD_NODE_EXECUTED) p->to_run++;
        else p->hits++;
        CHECK(rep->items[i].status == SD_NODE_SKIPPED); /* nothing has run yet */
    }
}

/* Runs {"1": LruConst value, "2": LruSink <- 1}; returns node calls made. */
static int run_graph(sd_exec *ex, int value, plan_seen *seen) {
    char json[256];
    snprintf(json, sizeof json,
             "{\"1\": {\"class_type\": \"LruConst\", \"inputs\": {\"value\": %d}},"
             " \"2\": {\"class_type\": \"LruSink\", \"inputs\": {\"x\": [\"1\", 0]}}}", value);
    sd_error err;
    sd_error_clear(&err);
    sd_graph *g = NULL;
    CHECK_OK(sd_graph_from_json(json, "lru.json", &g, &err), &err);
    sd_exec_opts o = {.on_plan = on_plan, .on_plan_user = seen};
    sd_exec_report rep = {0};
    int before = runs;
    CHECK_OK(sd_exec_run(ex, g, &o, &rep, NULL, &err), &err);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    return runs - before;
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    sd_exec *ex = sd_exec_new();
    plan_seen seen = {0};

    CHECK(run_graph(ex, 1, &seen) == 2);            /* A */
    CHECK(seen.calls == 1 && seen.to_run == 2 && seen.hits == 0);
    CHECK(run_graph(ex, 2, &seen) == 2);            /* B */
    CHECK(sd_exec_memo_count(ex) == 4);
    /* A again: its output node is a hit, announced before anything runs (its
     * source is not even visited, so only the sink's entry is touched) */
    CHECK(run_graph(ex, 1, &seen) == 0);
    CHECK(seen.calls == 3 && seen.hits == 1 && seen.to_run == 0);

    /* Use order now: const A, const B, sink B, sink A (just hit). Three
     * drops leave only sink A: the recently used graph survives the trim. */
    for (int i = 0; i < 3; i++) CHECK(sd_exec_drop_lru(ex) == 1);
    CHECK(sd_exec_memo_count(ex) == 1);
    CHECK(run_graph(ex, 1, &seen) == 0);            /* A still served from the memo */
    CHECK(run_graph(ex, 2, &seen) == 2);            /* B runs again */
    CHECK(seen.to_run == 2);

    while (sd_exec_drop_lru(ex)) {}
    CHECK(sd_exec_memo_count(ex) == 0);
    CHECK(sd_exec_drop_lru(ex) == 0);               /* empty: nothing to drop */
    CHECK(run_graph(ex, 1, &seen) == 2);
    sd_exec_free(ex);
    return sd_test_finish();
}
