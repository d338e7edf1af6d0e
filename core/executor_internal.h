/* executor_internal.h - pieces of the executor shared between its files
 * (not a public contract).
 *
 * A node result ("entry") is one SD_VAL_DICT {"outputs": LIST aligned with
 * def->outputs, "ui"?: DICT}; the same shape goes into the in-process memo
 * and the persistent cache. */
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

/* 1 when every path in ui["files"] exists (or there are none). */
int sd_exec_ui_files_exist(const sd_value *ui);

#endif
