/* bench_graph.c - sdflow-bench-graph: how graph work grows with the size of
 * a workflow (never a ctest test; tests/core/test_graph_large.c checks the
 * results on 100,000 nodes without timing them).
 *
 * For each size N it generates a ladder workflow (node i adds nodes i-1 and
 * i-2: two links per node, listed consumers first so the run order is the
 * reverse of the file order) of trivial integer nodes and times:
 *   parse     API-format JSON text -> graph
 *   validate  sd_graph_validate (schema checks, links, cycles)
 *   validate+schedule
 *             sd_exec_run of a graph whose results are all in the memo
 *             (a REPL rerun): validate, order, keys, decide
 *   run       sd_exec_run as `sdflow run` calls it (release_consumed), from
 *             nothing: validate, schedule and execute the trivial nodes, so
 *             this adds the executor's per-node cost
 *   lua       a Lua loop building the same ladder (automatic ids)
 *   export    that graph printed back as a Lua workflow (sdflow export --lua)
 * and prints a markdown table. Usage: sdflow-bench-graph [N ...]
 * (default 1000 10000 20000 100000). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/executor.h"
#include "core/graph.h"
#include "core/node.h"
#include "lua/sdlua.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static sd_status run_const(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    out[0] = sd_value_int(sd_value_as_int(in[0]));
    return SD_OK;
}
static sd_status run_add(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    out[0] = sd_value_int((sd_value_as_int(in[0]) + sd_value_as_int(in[1])) % 1000003);
    return SD_OK;
}
static sd_status run_out(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return SD_OK;
}

static const sd_input_def const_in[] = {{.name = "value", .type = SD_T_INT, .def = 1}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_input_def add_in[] = {{.name = "a", .type = "INT"}, {.name = "b", .type = "INT"}, {NULL}};
static const sd_input_def out_in[] = {{.name = "value", .type = "INT"}, {NULL}};
static const sd_node_def n_const = {1, "BenchConst", NULL, "bench", "", const_in, int_out, 0, run_const};
static const sd_node_def n_add = {1, "BenchAdd", NULL, "bench", "", add_in, int_out, 0, run_add};
static const sd_node_def n_out = {1, "BenchOut", NULL, "bench", "", out_in, NULL, SD_NODE_OUTPUT, run_out};
static const sd_node_def *const table[] = {&n_const, &n_add, &n_out, NULL};

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
        char *s = realloc(t->s, t->cap);
        if (!s) { fprintf(stderr, "out of memory\n"); exit(1); }
        t->s = s;
    }
    memcpy(t->s + t->n, buf, (size_t)len + 1);
    t->n += (size_t)len;
}

static char *ladder_json(int n) {
    text t = {0};
    add(&t, "{\"out\": {\"class_type\": \"BenchOut\", \"inputs\": {\"value\": [\"%d\", 0]}}", n);
    for (int i = n; i >= 1; i--) {
        char a[16] = "c", b[16] = "c";
        if (i - 1 >= 1) snprintf(a, sizeof a, "%d", i - 1);
        if (i - 2 >= 1) snprintf(b, sizeof b, "%d", i - 2);
        add(&t, ",\n\"%d\": {\"class_type\": \"BenchAdd\", \"inputs\": {\"a\": [\"%s\", 0], \"b\": [\"%s\", 0]}}",
            i, a, b);
    }
    add(&t, ",\n\"c\": {\"class_type\": \"BenchConst\", \"inputs\": {\"value\": 1}}}");
    return t.s;
}

static int fail(const char *what, const sd_error *err) {
    char buf[SD_ERR_MSG_MAX + 512];
    fprintf(stderr, "%s failed: %s\n", what, sd_error_format(err, buf, sizeof buf));
    return 1;
}

static int bench(int n) {
    sd_error err;
    sd_error_clear(&err);
    char *json = ladder_json(n);
    sd_graph *g = NULL;
    double t0 = now_s();
    if (sd_graph_from_json(json, "ladder.json", &g, &err)) { free(json); return fail("parse", &err); }
    double t_parse = now_s() - t0;
    free(json);

    sd_graph_problems probs = {0};
    t0 = now_s();
    sd_status rc = sd_graph_validate(g, NULL, &probs, &err);
    double t_validate = now_s() - t0;
    sd_graph_problems_free(&probs);
    if (rc) { sd_graph_free(g); return fail("validate", &err); }

    sd_exec *ex = sd_exec_new();
    sd_exec_opts opts = {.release_consumed = 1};
    sd_exec_report rep;
    t0 = now_s();
    rc = sd_exec_run(ex, g, &opts, &rep, NULL, &err);
    double t_run = now_s() - t0;
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
    if (rc) { sd_graph_free(g); return fail("run", &err); }

    /* Everything in the memo (a REPL rerun): what is left is validating and
     * scheduling (order, keys, the memo lookup of the output node). */
    ex = sd_exec_new();
    opts.release_consumed = 0;
    rc = sd_exec_run(ex, g, &opts, &rep, NULL, &err);
    sd_exec_report_free(&rep);
    double t_sched = 0;
    if (!rc) {
        t0 = now_s();
        rc = sd_exec_run(ex, g, &opts, &rep, NULL, &err);
        t_sched = now_s() - t0;
        sd_exec_report_free(&rep);
    }
    sd_exec_free(ex);
    sd_graph_free(g);
    if (rc) return fail("rerun", &err);

    char script[512];
    snprintf(script, sizeof script,
             "local x, y = BenchConst{value = 1}, BenchConst{value = 1}\n"
             "for i = 1, %d do x, y = y, BenchAdd{a = y, b = x} end\n"
             "BenchOut{value = y}\n", n);
    t0 = now_s();
    rc = sd_lua_load_graph_string(script, "ladder.lua", NULL, &g, &err);
    double t_lua = now_s() - t0;
    if (rc) return fail("lua", &err);
    size_t lua_nodes = sd_graph_count(g);
    t0 = now_s();
    char *text = sd_lua_export(g, "ladder.lua");
    double t_export = now_s() - t0;
    free(text);
    sd_graph_free(g);
    printf("| %7d | %8.3f | %8.3f | %8.3f | %8.3f | %8.3f (%zu nodes) | %8.3f |\n", n, t_parse, t_validate,
           t_sched, t_run, t_lua, lua_nodes, t_export);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    static const int defaults[] = {1000, 10000, 20000, 100000};
    sd_error err;
    sd_error_clear(&err);
    if (sd_registry_add(table, &err)) return fail("register", &err);
    printf("| nodes | parse s | validate s | validate+schedule s | run s | Lua build s | Lua export s |\n");
    printf("|------:|--------:|-----------:|--------------------:|------:|------------:|-------------:|\n");
    int bad = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) bad |= bench(atoi(argv[i]));
    } else {
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) bad |= bench(defaults[i]);
    }
    return bad;
}
