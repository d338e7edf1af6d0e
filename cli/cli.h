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
int sd_cli_generate(int argc, char **argv); /* cli/cmd_generate.c */
int sd_cli_nodes(int argc, char **argv);
int sd_cli_cache(int argc, char **argv);
int sd_cli_export(int argc, char **argv); /* cli/cmd_lua.c */
int sd_cli_repl(int argc, char **argv);   /* cli/cmd_lua.c */
int sd_cli_synth(int argc, char **argv);  /* cli/cmd_synth.c */
int sd_cli_serve(int argc, char **argv);  /* cli/cmd_serve.c, server/ */
int sd_cli_worker(int argc, char **argv); /* cli/cmd_worker.c, worker/ */

/* "error: <formatted err>" on stderr. */
void sd_cli_print_error(const sd_error *err);

/* ---- the shared option parser (cli/opts.c) --------------------------------
 * Every command describes itself in an sd_cli_command: its own options in a
 * table, plus the shared option groups it accepts (SD_CLI_G_*), whose values
 * land in one sd_cli_args. sd_cli_parse() then handles, the same way for
 * every command:
 *   --name VALUE, --name=VALUE, an alias ("-o VALUE"), flags, repeatable
 *   options (SD_CLI_LIST), numbers checked as numbers, values checked
 *   against `choices`, `--` (everything after it is positional),
 *   -h/--help (prints the command's help generated from the tables).
 * Usage errors are printed on stderr as "sdflow CMD: ..." (this is the
 * front end: printing is its job). A typical command:
 *
 *     const char *report = NULL;
 *     sd_cli_args a;
 *     const sd_cli_option own[] = {
 *         {"--report", NULL, SD_CLI_STR, &report, "FILE.json", "write what ran", NULL},
 *         {0}};
 *     const sd_cli_command cmd = {"run", "WORKFLOW.json [options]", "Runs ...",
 *                                 SD_CLI_G_ENV | SD_CLI_G_SET, own, 1, 1};
 *     int code = sd_cli_parse(&cmd, argc, argv, &a);
 *     if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
 *     ... a.pos[0], a.models_dir, sd_cli_env_init(&env, &a, &err) ...
 *     sd_cli_args_free(&a);
 */
typedef enum sd_cli_kind {
    SD_CLI_FLAG,  /* int *dst: set to 1 */
    SD_CLI_STR,   /* const char **dst: the value (points into argv; last one wins) */
    SD_CLI_INT,   /* long long *dst: a whole decimal number */
    SD_CLI_FLOAT, /* double *dst: a finite number */
    SD_CLI_LIST,  /* sd_cli_list *dst: repeatable, every value in order */
    SD_CLI_OPTSTR /* const char **dst: --name=VALUE, or --name VALUE when the next
                     argument does not start with '-', else the option's
                     `implicit` value (argparse's nargs="?" with const) */
} sd_cli_kind;

/* Values of a repeatable option. `items` points into argv; the array itself
 * is malloc'd: release with sd_cli_list_free() (whatever the parse returned). */
typedef struct sd_cli_list {
    const char **items;
    int n;
} sd_cli_list;
void sd_cli_list_free(sd_cli_list *l);

typedef struct sd_cli_option {
    const char *name;    /* "--steps" */
    const char *alias;   /* another spelling ("-s"), or NULL */
    sd_cli_kind kind;
    void *dst;           /* see sd_cli_kind */
    const char *arg;     /* the value's name in the help ("N"); NULL for flags */
    const char *help;    /* one line for the help */
    const char *choices; /* "f32|bf16": the only values allowed, or NULL */
    const char *implicit; /* SD_CLI_OPTSTR: the value when none is given */
} sd_cli_option;

/* Shared option groups: their values land in sd_cli_args. */
enum {
    SD_CLI_G_ENV = 1u << 0 | 1u << 5, /* SD_CLI_G_MODELS and --input-dir --output-dir
                                         --temp-dir --precision --vae-precision
                                         --clip-precision --device */
    SD_CLI_G_SET = 1u << 1,      /* --set ID.INPUT=VALUE (repeatable) */
    SD_CLI_G_CACHE = 1u << 2,    /* --cache PATH, --no-cache */
    SD_CLI_G_PROGRESS = 1u << 3, /* --quiet/-q, --progress MODE, --preview PATH.png */
    SD_CLI_G_LUA = 1u << 4,      /* --allow-unsafe-lua --lua-max-instructions --lua-timeout */
    SD_CLI_G_MODELS = 1u << 5    /* --models-dir --comfyui-dir --tokenizer-dir --clip-l-heads --clip-g-heads --qwen3-4b-width only (part of
                                    SD_CLI_G_ENV) */
};

#define SD_CLI_MAX_POS 8

typedef struct sd_cli_args {
    /* SD_CLI_G_ENV: NULL when not given (sd_cli_env_init fills defaults) */
    const char *models_dir, *comfyui_dir, *tokenizer_dir, *input_dir, *output_dir, *temp_dir;
    const char *precision, *vae_precision, *clip_precision, *device;
    const char *clip_l_heads;     /* --clip-l-heads N (sd_env.clip_l_heads) */
    const char *clip_g_heads;     /* --clip-g-heads N (sd_env.clip_g_heads) */
    const char *qwen3_4b_width;   /* --qwen3-4b-width N (sd_env.qwen3_4b_width) */
    const char *max_image_pixels; /* decimal, "0" = no limit */
    const char *max_memory;       /* "16G", bytes, "0" = no limit */
    const char *gpu_memory;       /* --gpu-memory "10G": cap on the CUDA backend's memory */
    int lora_strict;              /* --lora-strict (sd_env.lora_strict) */
    sd_cli_list sets;           /* SD_CLI_G_SET */
    const char *cache;          /* SD_CLI_G_CACHE */
    int no_cache;
    int quiet;                  /* SD_CLI_G_PROGRESS */
    const char *progress;       /* "auto" (NULL), "bar", "plain", "json", "none" */
    const char *preview;        /* --preview PATH.png */
    int unsafe_lua;             /* SD_CLI_G_LUA */
    const char *lua_max_instructions, *lua_timeout; /* NULL when not given (sd_cli_lua_opts) */
    const char *pos[SD_CLI_MAX_POS]; /* positional arguments, in order */
    int n_pos;
} sd_cli_args;

typedef struct sd_cli_command {
    const char *name;     /* "run" */
    const char *synopsis; /* what follows the name in the usage line */
    const char *about;    /* a paragraph for --help (may hold newlines), or NULL */
    unsigned groups;      /* SD_CLI_G_* accepted */
    const sd_cli_option *options; /* own options, ended by an entry with name NULL; may be NULL */
    int min_pos, max_pos; /* positional arguments accepted (max_pos <= SD_CLI_MAX_POS) */
} sd_cli_command;

#define SD_CLI_CONTINUE (-1)
/* Zeroes *a, then parses argv (the arguments after the command name).
 * Returns SD_CLI_CONTINUE when the command should go on; otherwise the exit
 * code to return at once: 0 after printing the help on stdout, 1 after a
 * usage error printed on stderr. Call sd_cli_args_free(a) in every case. */
int sd_cli_parse(const sd_cli_command *cmd, int argc, char **argv, sd_cli_args *a);
void sd_cli_args_free(sd_cli_args *a);
/* The help of one command (usage, about, own then shared options). */
void sd_cli_help(const sd_cli_command *cmd, FILE *f);

/* sd_env_init() (defaults and SDFLOW_* environment variables) with the
 * SD_CLI_G_ENV options given on top. Clean up with sd_env_cleanup(). */
struct sd_env;
sd_status sd_cli_env_init(struct sd_env *env, const sd_cli_args *a, sd_error *err);
/* The Lua workflow settings of the SD_CLI_G_LUA options, falling back to
 * SDFLOW_LUA_MAX_INSTRUCTIONS / SDFLOW_LUA_TIMEOUT, with `interrupt` (the
 * Ctrl-C flag, may be NULL) stopping a script. A bad number is
 * SD_ERR_INVALID naming the option or variable. */
struct sd_lua_opts;
sd_status sd_cli_lua_opts(const sd_cli_args *a, volatile sig_atomic_t *interrupt, struct sd_lua_opts *lo,
                          sd_error *err);
/* Applies every --set to g, in order (sd_graph_apply_set). */
struct sd_graph;
sd_status sd_cli_apply_sets(struct sd_graph *g, const sd_cli_args *a, sd_error *err);

/* `--name VALUE` or `--name=VALUE` at argv[*i]: returns VALUE and advances
 * *i past it, NULL when argv[*i] is not that option. Sets *missing when the
 * option is there without a value. (Older, single-option helper; new code
 * uses sd_cli_parse.) */
const char *sd_cli_opt(int argc, char **argv, int *i, const char *name, int *missing);

/* The backend named by env->device, computing in env->precision ("f32",
 * "bf16" or "f16"). A precision (also env->vae_precision, clip_precision)
 * the backend cannot compute is an error here, before any node runs, rather
 * than a silent f32 run (cli/backend_open.c). */
struct sd_env;
struct sd_backend;
sd_status sd_cli_backend_open(const struct sd_env *env, struct sd_backend **out, sd_error *err);
/* The same with n_threads compute threads (<= 0: every core, as above). */
sd_status sd_cli_backend_open_threads(const struct sd_env *env, int n_threads, struct sd_backend **out,
                                      sd_error *err);

/* The backend's store of measured algorithm choices (cuDNN convolution
 * algorithms) on the run's cache (cache/algo.h), so a second process skips
 * the measuring (cli/algo_store.c). Attach after the cache is open (nothing
 * happens when either is NULL); detach before the cache closes. A failure
 * to store gives one warning; the run goes on. */
struct sd_sqlite_cache;
typedef struct sd_cli_algo_store {
    struct sd_sqlite_cache *cache;
    int warned;
} sd_cli_algo_store;
void sd_cli_algo_store_attach(sd_cli_algo_store *s, struct sd_backend *be, struct sd_sqlite_cache *c);
void sd_cli_algo_store_detach(sd_cli_algo_store *s, struct sd_backend *be);

/* Opens the persistent cache at `path`, or at the default place ($SDFLOW_CACHE,
 * else sd_cache_default_path()) when path is NULL (cli/cmd_cache.c). */
struct sd_sqlite_cache;
sd_status sd_cli_cache_open(const char *path, struct sd_sqlite_cache **out, sd_error *err);
/* The cache a run uses after the SD_CLI_G_CACHE options (cli/opts.c):
 * *handle (close with sd_cache_close; NULL when none) and *iface for
 * sd_exec_opts.cache (use it only when *handle is set). --no-cache keeps
 * only the file-hash memo of the default database; a cache that cannot be
 * opened is a warning on stderr and a run without it. */
void sd_cli_cache_setup(const sd_cli_args *a, struct sd_sqlite_cache **handle, sd_cache_i *iface);

/* ---- one run, as `sdflow run` does it (cli/cmd_run.c) ---------------------
 * Loads the workflow (a file, or API JSON in memory), applies --set, opens
 * backend and cache, runs with progress, prints problems/errors and the
 * summary, writes the report; returns the exit code (0, 1, 130). */
struct sd_value;
typedef struct sd_cli_run_job {
    const char *workflow;   /* file (.json/.png/.lua/recipe, "-" = stdin), or NULL: */
    const char *json;       /* API-format workflow text, used when workflow is NULL */
    const char *json_name;  /* what errors call that text */
    const char *report, *dump, *lock; /* --report, --dump, --lock (files only) */
    int relock;
    const char *output_dir; /* overrides a->output_dir, or NULL */
    const char *input_dir;  /* overrides a->input_dir, or NULL */
    int quiet_files;        /* do not print the written files on stdout */
    struct sd_value **files; /* optional out: a new SD_VAL_LIST of the written files
                                (strings), NULL on failure before the run */
    /* What sdflow-bench's workflow phase adds to a plain `sdflow run`
     * (bench/bench_workflow.c); zero for the commands. */
    int threads;            /* compute threads; <= 0: every core */
    sd_exec_event_fn observe; /* also sees every executor event, after the
                                 progress printer; may be NULL */
    void *observe_user;
    /* becomes env.on_model_file / model_file_user (core/node.h) */
    void (*on_model_file)(void *user, const char *folder, const char *path);
    void *model_file_user;
} sd_cli_run_job;
int sd_cli_run_job_exec(const sd_cli_args *a, const sd_cli_run_job *job);

/* ---- progress (cli/progress.c) and previews (cli/preview.c) ----------------
 * A consumer of the executor's events (core/executor.h): give
 * sd_cli_progress_event as sd_exec_opts.on_event with the sd_cli_progress
 * as its user pointer. */
typedef struct sd_cli_preview sd_cli_preview;

enum { SD_CLI_PROGRESS_NONE, SD_CLI_PROGRESS_BAR, SD_CLI_PROGRESS_PLAIN, SD_CLI_PROGRESS_JSON };

typedef struct sd_cli_progress {
    int mode;                         /* SD_CLI_PROGRESS_* */
    FILE *out;                        /* where lines go (json: stdout) */
    volatile sig_atomic_t *interrupt; /* a node that fails once this is set was interrupted */
    double interval;                  /* plain: least seconds between step lines of a node
                                         (SDFLOW_PROGRESS_INTERVAL, default 1; 0 = every step) */
    sd_cli_preview *preview;          /* --preview, or NULL (not owned) */
    const char *preview_path;
    double preview_interval;          /* least seconds between two previews (the last step is
                                         always written) */
    int n_previews;                   /* pictures written */
    /* state */
    double node_start, first_step_t, last_line_t, last_preview_t;
    int64_t first_step;
    int line_open, preview_failed, preview_written;
} sd_cli_progress;

/* Zeroes *p and picks the mode from --quiet/--progress: auto is a bar when
 * `fd` is a terminal and plain lines otherwise; bar and plain lines go to
 * fd's stream (stderr or stdout), json to stdout. */
void sd_cli_progress_init(sd_cli_progress *p, const sd_cli_args *a, int fd);
/* sd_exec_event_fn. */
void sd_cli_progress_event(void *user, const sd_exec_event *ev);
/* Clears an open bar line before something else is printed on its stream. */
void sd_cli_progress_break(sd_cli_progress *p);

/* A preview writer for PATH (.png). env (not copied) gives the models folder
 * (vae_approx/ TAESD decoders) and the backend. NULL when out of memory. */
sd_cli_preview *sd_cli_preview_new(const char *path, const struct sd_env *env);
void sd_cli_preview_free(sd_cli_preview *pv);
/* Writes the first image of `latent` (the sampler's, executor.h NODE_PREVIEW)
 * to the path, atomically. */
sd_status sd_cli_preview_write(sd_cli_preview *pv, const sd_tensor *latent, const char *latent_format,
                               sd_error *err);
/* The same picture as PNG bytes written to `f` (`sdflow serve` sends them as
 * WebSocket preview frames); the writer's path is not used. */
sd_status sd_cli_preview_encode(sd_cli_preview *pv, const sd_tensor *latent, const char *latent_format, FILE *f,
                                sd_error *err);
/* "taesd" or "latent2rgb": how the last picture was made (NULL before one). */
const char *sd_cli_preview_method(const sd_cli_preview *pv);

/* ---- a long-lived engine: `sdflow serve` and `sdflow worker` (cli/engine.c) --
 * What runs prompt after prompt: the env from the options, every node
 * registered, the backend, a model store that frees a model part once no
 * result holds it (results are released over a memory budget), the cache
 * (with the backend's algorithm store on it) and, unless `previews` is 0, a
 * preview encoder. Open prints the error itself and returns non-zero; close
 * releases everything in the right order (also after a failed open). */
struct sd_model_store;
typedef struct sd_cli_engine {
    sd_env env;
    struct sd_backend *backend;
    struct sd_model_store *models;
    struct sd_sqlite_cache *cache_handle;
    sd_cache_i cache;          /* use only when cache_handle is set */
    sd_cli_algo_store algos;
    sd_cli_preview *preview;   /* NULL without previews */
    int env_ready;
} sd_cli_engine;
int sd_cli_engine_open(sd_cli_engine *e, const sd_cli_args *a, int previews);
void sd_cli_engine_close(sd_cli_engine *e);
/* engine.cache when a cache is open, else NULL (sd_exec_opts.cache). */
const sd_cache_i *sd_cli_engine_cache(const sd_cli_engine *e);
/* The previews of serve and worker (server/job.h's srv_preview_fn): `user`
 * is engine.preview; the pictures of `sdflow run --preview` (TAESD when its
 * decoder is in models/vae_approx, else latent2rgb) as PNG bytes. */
sd_status sd_cli_engine_preview(void *user, const sd_tensor *latent, const char *latent_format, FILE *f,
                                sd_error *err);
/* SIGINT and SIGTERM set the returned flag (the long-lived commands stop
 * when it is set); SIGPIPE is ignored (a client that goes away mid-reply is
 * no reason to die). */
volatile sig_atomic_t *sd_cli_stop_on_signals(void);
/* A positive size option ("16M", "2G") into *out; NULL leaves *out. Prints
 * "sdflow CMD: OPTION: 'V' is not a size" and returns 1 otherwise. */
int sd_cli_size_opt(const char *cmd, const char *option, const char *value, size_t *out);

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


#endif
