/* cli.h - the sdflow command-line front end: one file per sub-command.
 *
 * Each command takes the arguments after its name and returns the process
 * exit code: 0 success, 1 failure (validation, run, usage), 130 cancelled.
 * Errors go to stderr, formatted with sd_error_format(). */
#ifndef SDFLOW_CLI_H
#define SDFLOW_CLI_H

#include <signal.h>
#include <stdio.h>
#include "core/error.h"
#include "core/executor.h"

int sd_cli_run(int argc, char **argv);
int sd_cli_nodes(int argc, char **argv);
int sd_cli_cache(int argc, char **argv);

/* "error: <formatted err>" on stderr. */
void sd_cli_print_error(const sd_error *err);

/* `--name VALUE` or `--name=VALUE` at argv[*i]: returns VALUE and advances
 * *i past it, NULL when argv[*i] is not that option. Sets *missing when the
 * option is there without a value. */
const char *sd_cli_opt(int argc, char **argv, int *i, const char *name, int *missing);

/* Opens the persistent cache at `path`, or at the default place ($SDFLOW_CACHE,
 * else sd_cache_default_path()) when path is NULL (cli/cmd_cache.c). */
struct sd_sqlite_cache;
sd_status sd_cli_cache_open(const char *path, struct sd_sqlite_cache **out, sd_error *err);

/* Progress display (cli/progress.c). */
typedef struct sd_cli_progress {
    FILE *out;
    int tty, quiet;
    const sd_exec_report *report; /* the run's report: records are counted from it */
    volatile sig_atomic_t *interrupt; /* a node that fails once this is set was interrupted */
    double node_start;
    int line_open;
} sd_cli_progress;

void sd_cli_progress_on_node(void *user, const sd_exec_record *rec, int finished);
void sd_cli_progress_on_step(void *user, const char *node_id, int64_t value, int64_t max);

#endif
