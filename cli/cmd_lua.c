/* cmd_lua.c - the Lua side of the command line (owned by the lua/ work):
 * `sdflow export`, `sdflow repl`, and the recipe steps of `sdflow run`
 * (--lock, --relock, verifying a recipe or a PNG that carries one). The
 * logic lives in lua/; this file only parses options and wires it up. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "cache/cache.h"
#include "cli.h"
#include "core/env.h"
#include "kernels/backend.h"
#include "lua/recipe.h"
#include "lua/repl.h"
#include "lua/sdlua.h"

#ifndef SDFLOW_VERSION
#define SDFLOW_VERSION "dev"
#endif
#ifndef SDFLOW_BUILD_OPTIONS
#define SDFLOW_BUILD_OPTIONS ""
#endif

/* ---- sdflow export ------------------------------------------------------------ */

int sd_cli_export(int argc, char **argv) {
    int lua = 0, json = 0;
    const sd_cli_option own[] = {
        {"--lua", NULL, SD_CLI_FLAG, &lua, NULL, "print a Lua workflow (docs/lua.md)", NULL},
        {"--json", NULL, SD_CLI_FLAG, &json, NULL, "print ComfyUI API-format JSON", NULL},
        {0}};
    const sd_cli_command cmd = {
        "export", "--lua|--json WORKFLOW.json|.lua|.png|.webp [--set ID.INPUT=VALUE]... [options]",
        "Prints a workflow (API or UI JSON, Lua, a recipe or a PNG/WebP's workflow) as Lua or as API-format\n"
        "JSON, after the --set edits, so that `sdflow export --json X --set ...` shows what\n"
        "`sdflow run X --set ...` would run.",
        SD_CLI_G_ENV | SD_CLI_G_SET | SD_CLI_G_LUA, own, 1, 1};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    if (lua == json) {
        fprintf(stderr, "sdflow export: give exactly one of --lua and --json\n");
        sd_cli_args_free(&a);
        return 1;
    }
    int to_lua = lua;
    const char *path = a.pos[0];
    sd_lua_opts lo;
    sd_error err;
    sd_error_clear(&err);
    sd_graph *g = NULL;
    sd_env env;
    /* The env is not needed to print, but its options are checked (and a
     * bad one reported) exactly as `sdflow run` checks them. */
    sd_status rc = sd_cli_lua_opts(&a, NULL, &lo, &err); /* Ctrl-C: the default action ends export */
    if (!rc) rc = sd_cli_env_init(&env, &a, &err);
    sd_env_cleanup(&env);
    if (!rc) rc = sd_nodes_register_all(&err);
    if (!rc) rc = sd_lua_load_any(path, &lo, &g, &err);
    if (!rc) rc = sd_cli_apply_sets(g, &a, &err);
    sd_cli_args_free(&a);
    if (rc) { sd_cli_print_error(&err); sd_graph_free(g); return 1; }
    char *text = to_lua ? sd_lua_export(g, path) : sd_graph_to_json(g, 1);
    sd_graph_free(g);
    if (!text) { fprintf(stderr, "error: out of memory\n"); return 1; }
    fputs(text, stdout);
    if (!to_lua) fputc('\n', stdout);
    free(text);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- sdflow repl ----------------------------------------------------------------- */

/* What the SIGINT handler touches (the only process-wide mutable state). */
static volatile sig_atomic_t repl_interrupted;

static void repl_on_sigint(int sig) {
    (void)sig;
    repl_interrupted = 1;
}

static void repl_log(void *user, int level, const char *msg) {
    (void)user;
    if (level <= SD_LOG_WARN) fprintf(stderr, "%s: %s\n", level == SD_LOG_ERROR ? "error" : "warning", msg);
    else if (level == SD_LOG_INFO) fprintf(stderr, "%s\n", msg);
    else if (getenv("SDFLOW_DEBUG")) fprintf(stderr, "debug: %s\n", msg);
}

int sd_cli_repl(int argc, char **argv) {
    sd_repl_config cfg = {0};
    const char *history = NULL;
    int no_history = 0;
    const sd_cli_option own[] = {
        {"--history", NULL, SD_CLI_STR, &history, "FILE", "line history file (default ~/.sdflow_history)", NULL},
        {"--no-history", NULL, SD_CLI_FLAG, &no_history, NULL, "keep no history file", NULL},
        {0}};
    const sd_cli_command cmd = {
        "repl", "[WORKFLOW] [options]",
        "An interactive Lua prompt on one graph kept in memory, with the loaded models: after a change\n"
        "run() executes only what is downstream of it. help() lists the commands (docs/lua.md).\n"
        "WORKFLOW (.json, .lua, .png) is loaded first. Without a terminal it reads plain lines.",
        SD_CLI_G_ENV | SD_CLI_G_CACHE | SD_CLI_G_PROGRESS | SD_CLI_G_LUA, own, 0, 1};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    cfg.workflow = a.pos[0];
    sd_error err;
    sd_error_clear(&err);
    /* a .lua file loaded by the session stops on Ctrl-C and at its budget */
    if (sd_cli_lua_opts(&a, &repl_interrupted, &cfg.lua, &err)) {
        sd_cli_print_error(&err);
        sd_cli_args_free(&a);
        return 1;
    }
    sd_env env;
    sd_backend *backend = NULL;
    sd_sqlite_cache *cache_handle = NULL;
    sd_cli_algo_store algos = {0};
    sd_cache_i cache = {0};
    char *hist_default = NULL;
    sd_cli_preview *preview = NULL;
    code = 1;
    sd_status rc = sd_cli_env_init(&env, &a, &err);
    env.log = repl_log;
    if (!rc) rc = sd_nodes_register_all(&err);
    if (!rc) rc = sd_cli_backend_open(&env, &backend, &err);
    if (!rc) env.backend = backend;
    if (rc) { sd_cli_print_error(&err); goto done; }
    sd_cli_cache_setup(&a, &cache_handle, &cache);
    sd_cli_algo_store_attach(&algos, backend, cache_handle);
    /* run() shows its progress with the session's output (stdout), as a bar
     * on a terminal; the "executed:/done:" summary is the REPL's own. */
    sd_cli_progress prog;
    sd_cli_progress_init(&prog, &a, STDOUT_FILENO);
    prog.interrupt = &repl_interrupted;
    if (a.preview) {
        if (!(preview = sd_cli_preview_new(a.preview, &env))) {
            fprintf(stderr, "error: out of memory\n");
            goto done;
        }
        prog.preview = preview;
        prog.preview_path = a.preview;
    }
    cfg.on_event = sd_cli_progress_event;
    cfg.on_event_user = &prog;
    cfg.previews = preview != NULL;
    if (!no_history && !history) {
        const char *home = getenv("HOME");
        if (home && *home) {
            size_t n = strlen(home) + 32;
            hist_default = malloc(n);
            if (hist_default) snprintf(hist_default, n, "%s/.sdflow_history", home);
        }
        history = hist_default;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = repl_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    cfg.env = &env;
    cfg.cache = cache_handle ? &cache : NULL;
    cfg.interrupt = &repl_interrupted;
    cfg.history = no_history ? NULL : history;
    code = sd_repl_main(&cfg);
done:
    sd_cli_algo_store_detach(&algos, backend);
    sd_cache_close(cache_handle);
    sd_cli_preview_free(preview);
    sd_backend_free(backend);
    sd_env_cleanup(&env);
    free(hist_default);
    sd_cli_args_free(&a);
    return code;
}

/* ---- recipes around sdflow run ------------------------------------------------------- */

static int is_png_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char sig[8] = {0};
    size_t n = fread(sig, 1, 8, f);
    fclose(f);
    return n == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8);
}

sd_status sd_cli_recipe_before(sd_cli_recipe *r, const char *workflow, const char *text, const sd_graph *g,
                               const sd_env *env, const sd_cache_i *memo, char **extra, sd_error *err) {
    char *locked = NULL;
    int png = is_png_file(workflow);
    sd_status rc = png ? sd_recipe_meta_of_png(workflow, &locked, err)
                       : text ? sd_recipe_meta_of_text(text, &locked, err) : SD_OK;
    if (rc) return rc;
    if (!locked && !r->lock && !r->relock) return SD_OK; /* no recipe involved */
    if (r->relock && !r->lock && (!locked || png)) {
        free(locked);
        return sd_error_set(err, SD_ERR_INVALID, "--relock rewrites a recipe .json and '%s' is not one; "
                            "use --lock FILE to write a new recipe", workflow);
    }
    if (locked && !r->relock) {
        rc = sd_recipe_verify(g, env, locked, err);
        if (rc) {
            sd_error_prefix(err, "%s", workflow);
            free(locked);
            return rc;
        }
    }
    free(locked);
    rc = sd_recipe_describe(g, env, memo, SDFLOW_VERSION, SDFLOW_BUILD_OPTIONS, &r->meta, err);
    if (rc) return rc;
    char *merged = sd_recipe_merge_pnginfo(*extra, r->meta);
    if (!merged) return sd_error_set(err, SD_ERR_NOMEM, "out of memory adding the recipe to the PNG metadata");
    free(*extra);
    *extra = merged;
    r->rewrite = r->lock ? r->lock : workflow;
    /* a plain verified run leaves its recipe alone */
    if (!r->lock && !r->relock) r->rewrite = NULL;
    return SD_OK;
}

sd_status sd_cli_recipe_after(const sd_cli_recipe *r, const sd_graph *g, sd_error *err) {
    if (!r->rewrite || !r->meta) return SD_OK;
    return sd_recipe_write(r->rewrite, g, r->meta, err);
}

void sd_cli_recipe_free(sd_cli_recipe *r) {
    free(r->meta);
    r->meta = NULL;
}
