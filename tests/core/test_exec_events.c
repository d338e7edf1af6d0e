/* test_exec_events.c - the executor's event API (core/executor.h): the
 * order of events for a run that executes, one served from the memo, one
 * that fails, one that fails validation; steps and previews carry the
 * node's place in the run; previews only when asked; the older progress
 * callback still sees every step. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/env.h"
#include "core/executor.h"
#include "testutil.h"

/* ---- test nodes ------------------------------------------------------------------ */

static sd_status run_const(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx, (void)err;
    out[0] = sd_value_int(sd_value_as_int(in[0]));
    return SD_OK;
}

/* Three steps, each with a preview of a [1, 4, 2, 3] latent holding the step. */
static sd_status run_steps(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *lat = sd_tensor_new4(SD_F32, 4, 1, 4, 2, 3);
    if (!lat) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 3; i++) {
        float *x = lat->data;
        for (int k = 0; k < 24; k++) x[k] = (float)(i + 1);
        sd_node_preview(ctx, i + 1, 3, lat, "sd1");
        sd_status rc = sd_node_progress(ctx, i + 1, 3, err);
        if (rc) { sd_tensor_unref(lat); return rc; }
    }
    sd_tensor_unref(lat);
    out[0] = sd_value_int(sd_value_as_int(in[0]) + 1);
    return SD_OK;
}

static sd_status run_fail(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx, (void)in, (void)out;
    sd_error_set(err, SD_ERR_INVALID, "this node always fails");
    return SD_ERR_INVALID;
}

static sd_status run_out(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx, (void)in, (void)out, (void)err;
    return SD_OK;
}

static const sd_input_def const_in[] = {{.name = "value", .type = SD_T_INT, .def = 1, .min = 0, .max = 100,
                                         .has_range = 1}, {NULL}};
static const sd_input_def x_in[] = {{.name = "x", .type = "INT"}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_node_def n_const = {1, "EConst", NULL, "test", "", const_in, int_out, 0, run_const};
static const sd_node_def n_steps = {1, "ESteps", NULL, "test", "", x_in, int_out, 0, run_steps};
static const sd_node_def n_fail = {1, "EFail", NULL, "test", "", x_in, int_out, 0, run_fail};
static const sd_node_def n_out = {1, "EOut", NULL, "test", "", x_in, NULL, SD_NODE_OUTPUT, run_out};
static const sd_node_def *const table[] = {&n_const, &n_steps, &n_fail, &n_out, NULL};

/* ---- the recorder ------------------------------------------------------------------ */

static char trace[4096];
static int old_progress_calls;

static void add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void add(const char *fmt, ...) {
    size_t n = strlen(trace);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trace + n, sizeof trace - n, fmt, ap);
    va_end(ap);
}

static void on_event(void *user, const sd_exec_event *ev) {
    CHECK(user == (void *)trace);
    const char *k = ev->kind == SD_EXEC_RUN_START ? "start" : ev->kind == SD_EXEC_NODE_START ? "ns"
                    : ev->kind == SD_EXEC_NODE_STEP ? "st" : ev->kind == SD_EXEC_NODE_PREVIEW ? "pv"
                    : ev->kind == SD_EXEC_NODE_DONE ? "nd" : ev->kind == SD_EXEC_NODE_CACHED ? "ca"
                    : ev->kind == SD_EXEC_NODE_ERROR ? "err" : "done";
    add("%s%s", trace[0] ? " " : "", k);
    if (ev->node_id) {
        add(":%s/%s@%zu/%zu", ev->node_id, ev->class_type, ev->index, ev->count);
        CHECK(ev->record && !strcmp(ev->record->node_id, ev->node_id));
    } else {
        CHECK(ev->record == NULL);
        add("(%zu)", ev->count);
    }
    if (ev->kind == SD_EXEC_NODE_STEP || ev->kind == SD_EXEC_NODE_PREVIEW) add(" %lld/%lld", (long long)ev->step,
                                                                               (long long)ev->steps);
    if (ev->kind == SD_EXEC_NODE_PREVIEW) {
        CHECK(ev->latent && ev->latent->ndim == 4 && ev->latent->shape[1] == 4);
        CHECK(((const float *)ev->latent->data)[0] == (float)ev->step);
        CHECK(ev->latent_format && !strcmp(ev->latent_format, "sd1"));
    }
    if (ev->kind == SD_EXEC_NODE_ERROR) {
        CHECK(ev->status == SD_ERR_INVALID && ev->error && strstr(ev->error->msg, "always fails"));
    }
    if (ev->kind == SD_EXEC_RUN_DONE) add(" %s e%zu c%zu", sd_status_name(ev->status), ev->n_executed, ev->n_cached);
}

static void old_progress(void *user, const char *node_id, int64_t value, int64_t max) {
    (void)user, (void)node_id, (void)value, (void)max;
    old_progress_calls++;
}

static sd_env env;

static sd_status run(sd_exec *ex, const char *json, int previews) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(json, "test", &g, &err), &err);
    trace[0] = 0;
    old_progress_calls = 0;
    sd_exec_opts o = {.env = &env, .on_event = on_event, .on_event_user = trace, .previews = previews,
                      .progress = old_progress};
    sd_exec_report rep = {0};
    sd_status rc = sd_exec_run(ex, g, &o, &rep, NULL, &err);
    sd_exec_report_free(&rep);
    sd_graph_free(g);
    return rc;
}

static const char *CHAIN = "{\"1\": {\"class_type\": \"EConst\", \"inputs\": {\"value\": 4}},"
                           " \"2\": {\"class_type\": \"ESteps\", \"inputs\": {\"x\": [\"1\", 0]}},"
                           " \"3\": {\"class_type\": \"EOut\", \"inputs\": {\"x\": [\"2\", 0]}}}";

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    CHECK_OK(sd_env_init(&env, &err), &err);
    sd_exec *ex = sd_exec_new();
    CHECK(ex != NULL);

    /* executed, with previews */
    CHECK(run(ex, CHAIN, 1) == SD_OK);
    CHECK_MSG(strcmp(trace, "start(3) ns:1/EConst@1/3 nd:1/EConst@1/3 ns:2/ESteps@2/3 pv:2/ESteps@2/3 1/3 "
                     "st:2/ESteps@2/3 1/3 pv:2/ESteps@2/3 2/3 st:2/ESteps@2/3 2/3 pv:2/ESteps@2/3 3/3 "
                     "st:2/ESteps@2/3 3/3 nd:2/ESteps@2/3 ns:3/EOut@3/3 nd:3/EOut@3/3 done(3) ok e3 c0") == 0, "trace: %s", trace);
    CHECK(old_progress_calls == 3); /* the older callback is still served */

    /* a rerun: the output node's result comes from the memo, nothing above it is visited */
    CHECK(run(ex, CHAIN, 1) == SD_OK);
    CHECK_MSG(strcmp(trace, "start(1) ca:3/EOut@1/1 done(1) ok e0 c1") == 0, "trace: %s", trace);

    /* without previews asked for: steps only */
    sd_exec_forget(ex);
    CHECK(run(ex, CHAIN, 0) == SD_OK);
    CHECK(strstr(trace, "pv:") == NULL && strstr(trace, "st:2/ESteps@2/3 3/3") != NULL);

    /* a failure: error event, then done; the node after it has no event */
    CHECK(run(ex, "{\"1\": {\"class_type\": \"EConst\", \"inputs\": {\"value\": 5}},"
                  " \"2\": {\"class_type\": \"EFail\", \"inputs\": {\"x\": [\"1\", 0]}},"
                  " \"3\": {\"class_type\": \"EOut\", \"inputs\": {\"x\": [\"2\", 0]}}}",
              0) == SD_ERR_INVALID);
    CHECK_MSG(strcmp(trace, "start(3) ns:1/EConst@1/3 nd:1/EConst@1/3 ns:2/EFail@2/3 err:2/EFail@2/3 done(3) invalid e1 c0") == 0, "trace: %s", trace);

    /* validation failure: only done */
    CHECK(run(ex, "{\"1\": {\"class_type\": \"EConst\", \"inputs\": {\"value\": 500}},"
                  " \"3\": {\"class_type\": \"EOut\", \"inputs\": {\"x\": [\"1\", 0]}}}",
              0) == SD_ERR_VALIDATION);
    CHECK_MSG(strcmp(trace, "done(0) validation e0 c0") == 0, "trace: %s", trace);

    sd_exec_free(ex);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
