/* executor_internal.h - pieces of the executor shared between its files
 * (not a public contract).
 *
 * A node result ("entry") is one SD_VAL_DICT {"outputs": LIST aligned with
 * def->outputs, "ui"?: DICT, "list_outputs"?: LIST of BOOL aligned with the
 * outputs, present when one is a list of items (executor.h, "Lists")}; the
 * same shape goes into the in-process memo and the persistent cache. */
#ifndef SD_EXECUTOR_INTERNAL_H
#define SD_EXECUTOR_INTERNAL_H

#include "executor.h"

/* "LATENT samples=[1, 4, 64, 64] F32" for output `type` holding v (malloc'd). */
char *sd_exec_describe_output(const char *type, const sd_value *v);

/* Write every tensor of every output of `entry` to DIR/<id>_<k>.safetensors,
 * tensors named by their path inside the value ("samples", "0.cond"); a bare
 * tensor output is named after the output ("IMAGE"). */
sd_status sd_exec_dump_node(const char *dir, const char *node_id, const sd_node_def *def,
                            const sd_value *entry, sd_error *err);

/* 1 when the files an output node recorded in ui["files"] are still this
 * run's (or there are none): each lies in env's output or temp folder (so a
 * run with another --output-dir does not count a file elsewhere as its own),
 * is a regular file (not a link), and its bytes still hash to the recorded
 * ui["sha256"] (so a file that someone else wrote under that name is not
 * taken for ours). env may be NULL (no folder check). */
int sd_exec_ui_files_ok(const sd_env *env, const sd_value *ui);

/* Runs def on in[] (aligned with def->inputs; in_is_list[k]: in[k] is an
 * SD_VAL_LIST of items from a list output) with ComfyUI's list semantics
 * (executor.h, "Lists"): once, once per item, or once with every input
 * wrapped in a list (SD_NODE_INPUT_IS_LIST). Stores one new reference per
 * output in out[] and sets out_is_list[k]; *ui receives the (merged) ui
 * result or NULL. ctx->ui must be NULL on entry. On failure nothing is left
 * in out[] and *ui is NULL. */
sd_status sd_exec_map_node(const sd_node_def *def, sd_node_ctx *ctx, sd_value *const *in,
                           const int *in_is_list, sd_value **out, int *out_is_list, sd_value **ui,
                           sd_error *err);

#endif
