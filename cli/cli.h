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
int sd_cli_export(int argc, char **argv); /* cli/cmd_lua.c */
int sd_cli_repl(int argc, char **argv);   /* cli/cmd_lua.c */
int sd_cli_synth(int argc, char **argv);  /* cli/cmd_synth.c */

/* "error: <formatted err>" on stderr. */
void sd_cli_print_error(const sd_error *err);

/* `--name VALUE` or `--name=VALUE` at argv[*i]: returns VALUE and advances
 * *i past it, NULL when argv[*i] is not that option. Sets *missing when the
 * option is there without a value. */
const char *sd_cli_opt(int argc, char **argv, int *i, const char *name, int *missing);

/* The backend named by env->device, computing in env->precision ("f32" or
 * "bf16"). A precision the backend cannot compute is an error here, before
 * any node runs, rather than a silent f32 run (cli/backend_open.c). */
struct sd_env;
struct sd_backend;
sd_status sd_cli_backend_open(const struct sd_env *env, struct sd_backend **out, sd_error *err);

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

/* Recipes around `sdflow run` (cli/cmd_lua.c, lua/recipe.h). before(): when
 * the workflow carries a recipe (JSON key or PNG chunk) verify its file
 * hashes unless --relock; with a recipe, --lock or --relock hash the files,
 * keep the meta and add it to *extra (PNG chunks). after(): write the recipe
 * (--lock FILE, or the input recipe with --relock). */
typedef struct sd_cli_recipe {
    const char *lock;    /* --lock FILE */
    int relock;          /* --relock */
    char *meta;          /* the recipe meta of this run, or NULL */
    const char *rewrite; /* recipe file to write after a successful run */
} sd_cli_recipe;
sd_status sd_cli_recipe_before(sd_cli_recipe *r, const char *workflow, const char *text,
                               const struct sd_graph *g, const struct sd_env *env,
                               const sd_cache_i *memo, char **extra, sd_error *err);
sd_status sd_cli_recipe_after(const sd_cli_recipe *r, const struct sd_graph *g, sd_error *err);
void sd_cli_recipe_free(sd_cli_recipe *r);

void sd_cli_progress_on_node(void *user, const sd_exec_record *rec, int finished);
void sd_cli_progress_on_step(void *user, const char *node_id, int64_t value, int64_t max);

#endif
