/* test_file_probe.c - sd_input_def.file_probe at validation: a file named by
 * many nodes is probed once per validation, with its resolved path; a refusal
 * is an invalid_model_file problem on every node naming the file (node,
 * class_type and input set, the probe's reason in the message); a name not
 * in the list is value_not_in_list and never probed; a valid graph passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/env.h"
#include "core/graph.h"
#include "core/node.h"
#include "testutil.h"

static int n_probes, n_good_probes;

/* Refuses files whose name ends in "bad.bin", as a loader refuses an
 * architecture it does not know. */
static sd_status probe(const char *path, sd_error *err) {
    n_probes++;
    size_t n = strlen(path);
    FILE *f = fopen(path, "rb"); /* the path is resolved: the file exists */
    if (!f) return sd_error_set(err, SD_ERR_NOT_FOUND, "probe got '%s', which does not open", path);
    fclose(f);
    if (n >= 7 && strcmp(path + n - 7, "bad.bin") == 0)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: unknown test architecture", path);
    n_good_probes++;
    return SD_OK;
}

static sd_status list_inputs(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_env_list_files(env, "input", NULL, out, err);
}

static sd_status run_none(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return SD_OK;
}

static const sd_input_def load_in[] = {
    {.name = "file", .type = SD_T_COMBO, .options_fn = list_inputs, .file_folder = "input", .file_probe = probe},
    {NULL}};
static const sd_node_def n_load = {1, "PLoad", NULL, "test", "", load_in, NULL, SD_NODE_OUTPUT, run_none};
static const sd_node_def *const table[] = {&n_load, NULL};

static void write_file(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) fclose(f);
}

/* A graph of `count` PLoad nodes, node i naming names[i % n_names]. */
static sd_graph *graph_of(const char *const *names, int n_names, int count) {
    size_t cap = (size_t)count * 96 + 16;
    char *json = malloc(cap);
    size_t off = (size_t)snprintf(json, cap, "{");
    for (int i = 0; i < count; i++)
        off += (size_t)snprintf(json + off, cap - off, "%s\"%d\": {\"class_type\": \"PLoad\", \"inputs\": {\"file\": \"%s\"}}",
                                i ? ", " : "", i + 1, names[i % n_names]);
    snprintf(json + off, cap - off, "}");
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(json, "probe.json", &g, &err), &err);
    free(json);
    return g;
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    const char *dir = sd_test_tmpdir("file_probe");
    write_file(dir, "good.bin");
    write_file(dir, "bad.bin");
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.input_dir, dir, &err), &err);

    /* 40 nodes over two files, and one name that is not there */
    static const char *const names[] = {"good.bin", "bad.bin", "good.bin", "missing.bin"};
    sd_graph *g = graph_of(names, 4, 40);
    sd_graph_problems p = {0};
    if (g) {
        CHECK(sd_graph_validate(g, &env, &p, &err) == SD_ERR_VALIDATION);
        CHECK_MSG(n_probes == 2, "probed %d times, expected once per file (2)", n_probes);
        CHECK(n_good_probes == 1);
        int bad = 0, missing = 0;
        for (size_t i = 0; i < p.n; i++) {
            const sd_graph_problem *q = &p.items[i];
            if (strcmp(q->kind, "invalid_model_file") == 0) {
                bad++;
                CHECK(q->input && strcmp(q->input, "file") == 0);
                CHECK(q->class_type && strcmp(q->class_type, "PLoad") == 0);
                CHECK_MSG(strstr(q->message, "'bad.bin'") && strstr(q->message, "unknown test architecture"),
                          "message: %s", q->message);
                CHECK(q->node_id && (atoi(q->node_id) - 1) % 4 == 1); /* the nodes naming bad.bin */
            } else if (strcmp(q->kind, "value_not_in_list") == 0) {
                missing++;
            } else {
                CHECK_MSG(0, "unexpected problem %s: %s", q->kind, q->message);
            }
        }
        CHECK_MSG(bad == 10, "%d invalid_model_file problems, expected 10", bad);
        CHECK_MSG(missing == 10, "%d value_not_in_list problems, expected 10", missing);
        sd_graph_problems_free(&p);
        sd_graph_free(g);
    }

    /* the good file alone passes; a second validation probes afresh (the
     * file may have changed between runs) */
    static const char *const good[] = {"good.bin"};
    n_probes = 0;
    g = graph_of(good, 1, 5);
    if (g) {
        CHECK_OK(sd_graph_validate(g, &env, &p, &err), &err);
        CHECK(n_probes == 1);
        sd_graph_problems_free(&p);
        sd_graph_free(g);
    }
    sd_env_cleanup(&env);
    return sd_test_finish();
}
