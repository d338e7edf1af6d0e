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
    int to_lua = -1;
    sd_lua_opts lo = {0};
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--lua")) to_lua = 1;
        else if (!strcmp(argv[i], "--json")) to_lua = 0;
        else if (!strcmp(argv[i], "--allow-unsafe-lua")) lo.allow_unsafe = 1;
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "sdflow export: unknown option '%s'\n", argv[i]); return 1; }
        else if (path) { fprintf(stderr, "sdflow export: more than one workflow given ('%s')\n", argv[i]); return 1; }
        else path = argv[i];
    }
    if (to_lua < 0 || !path) {
        fprintf(stderr, "usage: sdflow export --lua|--json WORKFLOW.json|.lua|.png\n");
        return 1;
    }
    sd_error err;
    sd_error_clear(&err);
    sd_graph *g = NULL;
    sd_status rc = sd_nodes_register_all(&err);
    if (!rc) rc = sd_lua_load_any(path, &lo, &g, &err);
    if (rc) { sd_cli_print_error(&err); return 1; }
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
    const char *cache_path = NULL, *history = NULL;
    int no_cache = 0, no_history = 0;
    const char *dirs[8] = {0};
    static const char *const dir_opts[8] = {"--output-dir", "--input-dir", "--temp-dir", "--models-dir",
                                            "--comfyui-dir", "--tokenizer-dir", "--precision", "--device"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0, matched = 0;
        if (!strcmp(a, "--no-cache")) { no_cache = 1; continue; }
        if (!strcmp(a, "--no-history")) { no_history = 1; continue; }
        if (!strcmp(a, "--allow-unsafe-lua")) { cfg.lua.allow_unsafe = 1; continue; }
        if ((v = sd_cli_opt(argc, argv, &i, "--cache", &missing))) { cache_path = v; continue; }
        if (!missing && (v = sd_cli_opt(argc, argv, &i, "--history", &missing))) { history = v; continue; }
        for (int k = 0; !missing && k < 8; k++)
            if ((v = sd_cli_opt(argc, argv, &i, dir_opts[k], &missing))) { dirs[k] = v; matched = 1; break; }
        if (missing) { fprintf(stderr, "sdflow repl: option '%s' needs a value\n", a); return 1; }
        if (matched) continue;
        if (a[0] == '-' && a[1]) { fprintf(stderr, "sdflow repl: unknown option '%s'\n", a); return 1; }
        if (cfg.workflow) { fprintf(stderr, "sdflow repl: more than one workflow given ('%s')\n", a); return 1; }
        cfg.workflow = a;
    }
    sd_error err;
    sd_error_clear(&err);
    sd_env env;
    sd_backend *backend = NULL;
    sd_sqlite_cache *cache_handle = NULL;
    sd_cache_i cache = {0};
    char *hist_default = NULL;
    int code = 1;
    sd_status rc = sd_env_init(&env, &err);
    const char **fields[8] = {&env.output_dir, &env.input_dir, &env.temp_dir, &env.models_dir,
                              &env.comfyui_dir, &env.tokenizer_dir, &env.precision, &env.device};
    for (int k = 0; !rc && k < 8; k++)
        if (dirs[k]) rc = sd_env_set(&env, fields[k], dirs[k], &err);
    env.log = repl_log;
    if (!rc) rc = sd_nodes_register_all(&err);
    if (!rc) rc = sd_cli_backend_open(&env, &backend, &err);
    if (!rc) env.backend = backend;
    if (rc) { sd_cli_print_error(&err); goto done; }
    if (!no_cache) {
        sd_error cerr;
        sd_error_clear(&cerr);
        if (sd_cli_cache_open(cache_path, &cache_handle, &cerr) == SD_OK) {
            cache = sd_cache_interface(cache_handle);
        } else {
            char buf[SD_ERR_MSG_MAX + 512];
            fprintf(stderr, "warning: cache unusable, running without it: %s\n", sd_error_format(&cerr, buf, sizeof buf));
        }
    } else if (sd_cli_cache_open(NULL, &cache_handle, NULL) == SD_OK) {
        /* --no-cache: only the file-hash memo, as in `sdflow run` (docs/cli.md) */
        cache = sd_cache_interface(cache_handle);
        cache.get = NULL;
        cache.put = NULL;
    }
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
    sd_cache_close(cache_handle);
    sd_backend_free(backend);
    sd_env_cleanup(&env);
    free(hist_default);
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
