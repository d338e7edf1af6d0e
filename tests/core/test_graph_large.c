/* test_graph_large.c - generated workflows of 100,000 nodes: parsed,
 * validated, ordered and run correctly (every node after its sources, one
 * report per cycle, fresh ids), which needs graph work linear in the size
 * (these took minutes to hours when lookups were linear scans) and no
 * recursion as deep as the graph. Nothing here is timed: bench/graph
 * prints the curve. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/executor.h"
#include "core/graph.h"
#include "core/node.h"
#include "testutil.h"

enum { N = 100000, MOD = 1000003 };

/* ---- test nodes: integer arithmetic, so the result proves the order ------------ */

static long n_runs;
static int64_t result;

static sd_status run_const(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    n_runs++;
    out[0] = sd_value_int(sd_value_as_int(in[0]));
    return SD_OK;
}

/* A source that has not run yet would reach us as NULL, which reads as 0
 * and gives a different sum: the final value checks the order. */
static sd_status run_add(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    n_runs++;
    if (!in[0] || !in[1]) return sd_error_set(err, SD_ERR_INTERNAL, "ran before its sources");
    out[0] = sd_value_int((sd_value_as_int(in[0]) + sd_value_as_int(in[1])) % MOD);
    return SD_OK;
}

static sd_status run_out(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    n_runs++;
    result = sd_value_as_int(in[0]);
    return SD_OK;
}

static const sd_input_def const_in[] = {{.name = "value", .type = SD_T_INT, .def = 1}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_input_def add_in[] = {{.name = "a", .type = "INT"}, {.name = "b", .type = "INT"}, {NULL}};
static const sd_input_def out_in[] = {{.name = "value", .type = "INT"}, {NULL}};
static const sd_node_def n_const = {1, "LConst", NULL, "test", "", const_in, int_out, 0, run_const};
static const sd_node_def n_add = {1, "LAdd", NULL, "test", "", add_in, int_out, 0, run_add};
static const sd_node_def n_out = {1, "LOut", NULL, "test", "", out_in, NULL, SD_NODE_OUTPUT, run_out};
/* An output node whose COMBO lists "files" computed from the environment
 * (as LoadImage lists the input folder), counting how often it is asked. */
static int n_listings;
static sd_status list_files(const sd_env *env, sd_value **out, sd_error *err) {
    n_listings++;
    *out = sd_value_list();
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "pic_%d.png", i);
        sd_value_list_append(*out, sd_value_string(name));
    }
    return SD_OK;
}
static const sd_input_def pick_in[] = {{.name = "file", .type = SD_T_COMBO, .options_fn = list_files}, {NULL}};
static const sd_node_def n_pick = {1, "LPick", NULL, "test", "", pick_in, NULL, SD_NODE_OUTPUT, run_out};

static const sd_node_def *const table[] = {&n_const, &n_add, &n_out, &n_pick, NULL};

/* ---- JSON text ------------------------------------------------------------------- */

typedef struct text { char *s; size_t n, cap; } text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (t->n + (size_t)len + 1 > t->cap) {
        t->cap = (t->cap + (size_t)len + 1) * 2;
        t->s = realloc(t->s, t->cap);
    }
    memcpy(t->s + t->n, buf, (size_t)len + 1);
    t->n += (size_t)len;
}

/* Node i (1..n) adds nodes i-1 and i-2 ("c" stands for node 0 and -1), a
 * ladder with two links per node; "out" reads node n. Written consumers
 * first, so the run order is the reverse of the file order. */
static char *ladder_json(int n) {
    text t = {0};
    add(&t, "{\"out\": {\"class_type\": \"LOut\", \"inputs\": {\"value\": [\"%d\", 0]}}", n);
    for (int i = n; i >= 1; i--) {
        char a[16] = "c", b[16] = "c";
        if (i - 1 >= 1) snprintf(a, sizeof a, "%d", i - 1);
        if (i - 2 >= 1) snprintf(b, sizeof b, "%d", i - 2);
        add(&t, ",\n\"%d\": {\"class_type\": \"LAdd\", \"inputs\": {\"a\": [\"%s\", 0], \"b\": [\"%s\", 0]}}", i, a, b);
    }
    add(&t, ",\n\"c\": {\"class_type\": \"LConst\", \"inputs\": {\"value\": 1}}}");
    return t.s;
}

static int64_t ladder_expected(int n) {
    int64_t x = 1, y = 1; /* nodes -1 and 0 are both the constant */
    for (int i = 1; i <= n; i++) {
        int64_t z = (y + x) % MOD;
        x = y;
        y = z;
    }
    return y;
}

static void test_ladder(int n, int release) {
    char *json = ladder_json(n);
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(json, "ladder.json", &g, &err), &err);
    free(json);
    if (!g) return;
    CHECK(sd_graph_count(g) == n + 2);
    CHECK(sd_graph_index_of(g, "out") == 0 && sd_graph_index_of(g, "c") == n + 1);
    CHECK(sd_graph_index_of(g, "1") == (size_t)n && sd_graph_index_of(g, "missing") == (size_t)-1);

    sd_exec *ex = sd_exec_new();
    sd_exec_opts opts = {.release_consumed = release};
    sd_exec_report rep;
    sd_graph_problems probs = {0};
    n_runs = 0;
    result = -1;
    CHECK_OK(sd_exec_run(ex, g, &opts, &rep, &probs, &err), &err);
    CHECK_MSG(probs.n == 0, "%zu problems", probs.n);
    CHECK_MSG(n_runs == n + 2, "%ld nodes ran", n_runs);
    CHECK_MSG(result == ladder_expected(n), "result %lld, expected %lld", (long long)result,
              (long long)ladder_expected(n));
    CHECK(rep.n == (size_t)n + 2 && rep.n_executed == (size_t)n + 2);
    /* consumers come first in the file, so the run order is the reverse */
    CHECK(rep.n == (size_t)n + 2 && !strcmp(rep.items[0].node_id, "c") && !strcmp(rep.items[1].node_id, "1") &&
          rep.items[n].node_id && atoi(rep.items[n].node_id) == n && !strcmp(rep.items[n + 1].node_id, "out"));
    sd_exec_report_free(&rep);
    sd_graph_problems_free(&probs);

    /* the same graph again: all from the memo when it was kept */
    if (!release) {
        n_runs = 0;
        CHECK_OK(sd_exec_run(ex, g, &opts, &rep, NULL, &err), &err);
        CHECK_MSG(n_runs <= 1 && rep.n_executed == (size_t)n_runs, "%ld nodes ran again", n_runs);
        sd_exec_report_free(&rep);
    }
    sd_exec_free(ex);
    sd_graph_free(g);
}

/* One cycle through all N nodes: exactly one report, on its first node. */
static void test_big_cycle(void) {
    sd_graph *g = sd_graph_new();
    sd_error err;
    sd_error_clear(&err);
    sd_graph_node *n;
    char id[16], next[16];
    CHECK_OK(sd_graph_add_node(g, "c", "LConst", &n, &err), &err);
    CHECK_OK(sd_graph_set_literal(n, "value", sd_value_int(1), &err), &err);
    for (int i = 1; i <= N; i++) {
        snprintf(id, sizeof id, "%d", i);
        snprintf(next, sizeof next, "%d", i % N + 1);
        sd_graph_add_node(g, id, "LAdd", &n, &err);
        sd_graph_set_link(n, "a", next, 0, &err);
        sd_graph_set_link(n, "b", "c", 0, &err);
    }
    sd_graph_add_node(g, "out", "LOut", &n, &err);
    sd_graph_set_link(n, "value", "1", 0, &err);
    sd_graph_problems probs = {0};
    CHECK(sd_graph_validate(g, NULL, &probs, &err) == SD_ERR_VALIDATION);
    size_t cycles = 0;
    for (size_t i = 0; i < probs.n; i++) cycles += !strcmp(probs.items[i].kind, "dependency_cycle");
    CHECK_MSG(probs.n == 1 && cycles == 1, "%zu problems, %zu cycles", probs.n, cycles);
    CHECK(probs.n == 1 && !strcmp(probs.items[0].node_id, "1") && !strcmp(probs.items[0].input, "a"));
    sd_graph_problems_free(&probs);

    /* 50,000 two-node cycles: reported, but not one line each */
    sd_graph_free(g);
    g = sd_graph_new();
    sd_graph_add_node(g, "c", "LConst", &n, &err);
    sd_graph_set_literal(n, "value", sd_value_int(1), &err);
    for (int i = 1; i <= N; i++) {
        snprintf(id, sizeof id, "%d", i);
        snprintf(next, sizeof next, "%d", i % 2 ? i + 1 : i - 1);
        sd_graph_add_node(g, id, "LAdd", &n, &err);
        sd_graph_set_link(n, "a", next, 0, &err);
        sd_graph_set_link(n, "b", "c", 0, &err);
    }
    sd_graph_add_node(g, "out", "LOut", &n, &err);
    sd_graph_set_link(n, "value", "1", 0, &err);
    CHECK(sd_graph_validate(g, NULL, &probs, &err) == SD_ERR_VALIDATION);
    CHECK_MSG(probs.n >= 1 && probs.n <= 100, "%zu problems for 50000 cycles", probs.n);
    CHECK(probs.n >= 1 && !strcmp(probs.items[0].kind, "dependency_cycle"));
    sd_graph_problems_free(&probs);
    sd_graph_free(g);
}

/* N nodes choosing among 5,000 listed files: the list is made once per
 * validation (it was once per node, each looked up by a scan), and a name
 * that is not there is still reported, on its node. */
static void test_combo_lists(void) {
    sd_graph *g = sd_graph_new();
    sd_error err;
    sd_error_clear(&err);
    char id[16], file[32];
    for (int i = 1; i <= N; i++) {
        sd_graph_node *n;
        snprintf(id, sizeof id, "%d", i);
        snprintf(file, sizeof file, "pic_%d.png", i == N / 2 ? 99999 : i % 5000);
        sd_graph_add_node(g, id, "LPick", &n, &err);
        sd_graph_set_literal(n, "file", sd_value_string(file), &err);
    }
    sd_graph_problems probs = {0};
    n_listings = 0;
    CHECK(sd_graph_validate(g, NULL, &probs, &err) == SD_ERR_VALIDATION);
    CHECK_MSG(n_listings == 1, "the list was made %d times", n_listings);
    CHECK_MSG(probs.n == 1 && !strcmp(probs.items[0].kind, "value_not_in_list") &&
              !strcmp(probs.items[0].node_id, "50000") && strstr(probs.items[0].message, "pic_99999.png"),
              "%zu problems", probs.n);
    sd_graph_problems_free(&probs);
    sd_graph_free(g);
}

/* sd_graph_new_id over a growing graph, and after removals. */
static void test_new_ids(void) {
    sd_graph *g = sd_graph_new();
    sd_error err;
    sd_error_clear(&err);
    int ok = 1;
    char want[16];
    CHECK_OK(sd_graph_add_node(g, "3", "LConst", NULL, &err), &err); /* taken ahead of time */
    for (int i = 1; i <= N; i++) {
        char *id = sd_graph_new_id(g);
        snprintf(want, sizeof want, "%d", i >= 3 ? i + 1 : i);
        if (!id || strcmp(id, want)) ok = 0;
        if (id) sd_graph_add_node(g, id, "LConst", NULL, &err);
        free(id);
    }
    CHECK(ok);
    CHECK(sd_graph_count(g) == N + 1);
    /* a removed id is the smallest free one again; positions stay right */
    CHECK_OK(sd_graph_remove_node(g, "500", &err), &err);
    CHECK_OK(sd_graph_remove_node(g, "70000", &err), &err);
    CHECK(sd_graph_find(g, "500") == NULL);
    CHECK(sd_graph_index_of(g, "501") == 499 && !strcmp(sd_graph_at(g, 499)->id, "501"));
    CHECK(sd_graph_index_of(g, "100001") == N - 2);
    char *id = sd_graph_new_id(g);
    CHECK(id && !strcmp(id, "500"));
    if (id) sd_graph_add_node(g, id, "LConst", NULL, &err);
    free(id);
    id = sd_graph_new_id(g);
    CHECK(id && !strcmp(id, "70000"));
    free(id);
    /* "0007" is not the integer id 7: removing it frees nothing */
    CHECK_OK(sd_graph_add_node(g, "0007", "LConst", NULL, &err), &err);
    CHECK_OK(sd_graph_remove_node(g, "0007", &err), &err);
    id = sd_graph_new_id(g);
    CHECK(id && !strcmp(id, "70000"));
    free(id);
    /* a clone finds its nodes too */
    sd_graph *c = sd_graph_clone(g);
    CHECK(c && sd_graph_count(c) == sd_graph_count(g) && sd_graph_index_of(c, "100001") == N - 2);
    sd_graph_free(c);
    sd_graph_free(g);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    test_ladder(N, 1);      /* as sdflow run: values dropped after their last use */
    test_ladder(N / 5, 0);  /* as the REPL: all kept, then a rerun from the memo */
    test_big_cycle();
    test_combo_lists();
    test_new_ids();
    return sd_test_finish();
}
