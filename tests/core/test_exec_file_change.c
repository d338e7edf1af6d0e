/* test_exec_file_change.c - the executor turns a model file changed under a
 * node into that node's error (formats/mapguard.h, sd_st_check_all): a node
 * that reads a mapped file after it was truncated gets zeros instead of
 * SIGBUS, and although it returns success the run fails naming the node
 * and the file; the change is reported once, so the next run of other
 * nodes in the same process succeeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/executor.h"
#include "formats/safetensors.h"
#include "testutil.h"

static sd_st_file *file;
static char path[1024];
static volatile sig_atomic_t interrupt_flag;

/* Truncates the file it reads from, then sums the tensor's mapped bytes. */
static sd_status run_read(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx, (void)in;
    if (truncate(path, 4096) != 0) return sd_error_set(err, SD_ERR_IO, "truncate failed");
    sd_tensor *t = sd_st_tensor(file, "w", err);
    if (!t) return err->code;
    double s = 0;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) s += sd_tensor_f32(t)[i];
    sd_tensor_unref(t);
    out[0] = sd_value_int((int64_t)s);
    return SD_OK;
}

static sd_status run_const(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx, (void)err;
    out[0] = sd_value_int(sd_value_as_int(in[0]));
    return SD_OK;
}

static const sd_input_def const_in[] = {{.name = "value", .type = SD_T_INT, .def = 7, .min = -1000,
                                         .max = 1000000, .has_range = 1}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_node_def n_read = {1, "TReadMapped", NULL, "test", "", const_in, int_out, SD_NODE_OUTPUT,
                                   run_read};
static const sd_node_def n_const = {1, "TConstOut", NULL, "test", "", const_in, int_out, SD_NODE_OUTPUT,
                                    run_const};
static const sd_node_def *const table[] = {&n_read, &n_const, NULL};

static sd_status run_json(sd_exec *ex, sd_env *env, const char *json, sd_error *err) {
    sd_graph *g = NULL;
    sd_status rc = sd_graph_from_json(json, "test.json", &g, err);
    if (rc) return rc;
    sd_exec_opts o = {.env = env, .interrupt = &interrupt_flag};
    sd_exec_report rep;
    rc = sd_exec_run(ex, g, &o, &rep, NULL, err);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    return rc;
}

int main(void) {
    const char *dir = sd_test_tmpdir("exec_file_change");
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    sd_st_writer *w = sd_st_writer_new();
    int64_t n = 128 * 1024;
    sd_tensor *t = sd_tensor_new(SD_F32, 1, &n);
    for (int64_t i = 0; i < n; i++) sd_tensor_f32(t)[i] = 1.0f;
    CHECK_OK(sd_st_writer_add(w, "w", t, &err), &err);
    sd_tensor_unref(t);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    CHECK_OK(sd_st_open(path, &file, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    sd_exec *ex = sd_exec_new();
    if (file && ex) {
        sd_error_clear(&err);
        sd_status rc = run_json(ex, &env, "{\"9\": {\"class_type\": \"TReadMapped\", \"inputs\": {\"value\": 7}}}", &err);
        CHECK_MSG(rc == SD_ERR_IO && !strcmp(err.node_id, "9") && !strcmp(err.class_type, "TReadMapped") &&
                      strstr(err.msg, path) && strstr(err.msg, "truncated"),
                  "run over a truncated mapping: rc %d, node '%s': %s", rc, err.node_id, err.msg);
        /* reported once: an unrelated run in the same process goes on */
        sd_error_clear(&err);
        CHECK_OK(run_json(ex, &env, "{\"1\": {\"class_type\": \"TConstOut\", \"inputs\": {\"value\": 3}}}", &err),
                 &err);
    }
    sd_exec_free(ex);
    sd_st_close(file);
    sd_env_cleanup(&env);
    return sd_test_finish();
}
