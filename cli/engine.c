/* engine.c - what `sdflow serve` and `sdflow worker` keep from prompt to
 * prompt (cli.h). */
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "core/env.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"

int sd_cli_engine_open(sd_cli_engine *e, const sd_cli_args *a, int previews) {
    memset(e, 0, sizeof *e);
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_cli_env_init(&e->env, a, &err);
    e->env_ready = 1;
    if (!rc) rc = sd_nodes_register_all(&err);
    if (!rc) rc = sd_cli_backend_open(&e->env, &e->backend, &err);
    if (!rc) {
        e->env.backend = e->backend;
        /* a model part goes when the last result holding it is released
         * (results are released over the memory budget) */
        if (!(e->models = sd_model_store_new())) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        else sd_model_store_free_unused(e->models, 1);
        e->env.models = e->models;
    }
    if (!rc) {
        sd_cli_cache_setup(a, &e->cache_handle, &e->cache);
        /* one thread runs ops and uses the cache connection, so the
         * backend's algorithm store may share it */
        sd_cli_algo_store_attach(&e->algos, e->backend, e->cache_handle);
        if (previews && !(e->preview = sd_cli_preview_new("-", &e->env)))
            rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
    }
    if (rc) sd_cli_print_error(&err);
    return rc ? 1 : 0;
}

sd_status sd_cli_engine_preview(void *user, const sd_tensor *latent, const char *latent_format, FILE *f,
                                sd_error *err) {
    return sd_cli_preview_encode(user, latent, latent_format, f, err);
}

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

volatile sig_atomic_t *sd_cli_stop_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return &stop_requested;
}

int sd_cli_size_opt(const char *cmd, const char *option, const char *value, size_t *out) {
    if (!value) return 0;
    sd_error err;
    sd_error_clear(&err);
    int64_t n = 0;
    if (sd_cache_parse_size(value, &n, &err) || n <= 0) {
        fprintf(stderr, "sdflow %s: %s: '%s' is not a size (e.g. 16M, 2G)\n", cmd, option, value);
        return 1;
    }
    *out = (size_t)n;
    return 0;
}

const sd_cache_i *sd_cli_engine_cache(const sd_cli_engine *e) {
    return e->cache_handle ? &e->cache : NULL;
}

void sd_cli_engine_close(sd_cli_engine *e) {
    sd_cli_preview_free(e->preview); /* before the backend its TAESD decoder lives on */
    sd_cli_algo_store_detach(&e->algos, e->backend);
    sd_cache_close(e->cache_handle);
    sd_model_store_free(e->models);
    sd_backend_free(e->backend);
    if (e->env_ready) sd_env_cleanup(&e->env);
    memset(e, 0, sizeof *e);
}
