/* cmd_serve.c - `sdflow serve`: the options, the environment and the
 * backend, then server/server.h does the rest (docs/server.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#ifdef SDFLOW_HAVE_SERVER
#include "server/server.h"

#ifndef SDFLOW_VERSION
#define SDFLOW_VERSION "dev"
#endif

static int count_opt(const char *what, long long v, size_t *out) {
    if (v < 0) return 0; /* not given */
    if (v == 0) {
        fprintf(stderr, "sdflow serve: %s must be at least 1\n", what);
        return 1;
    }
    *out = (size_t)v;
    return 0;
}

int sd_cli_serve(int argc, char **argv) {
    sd_server_opts so;
    memset(&so, 0, sizeof so);
    const char *max_body = NULL, *max_upload = NULL, *budget = NULL, *ws_queued = NULL;
    long long port = 8188, history = -1, max_queue = -1, redis_ttl = 0, client_conns = -1;
    double request_timeout = 10;
    int no_previews = 0;
    double preview_interval = 0.5, max_upload_mb = -1;
    const sd_cli_option own[] = {
        {"--listen", NULL, SD_CLI_STR, &so.listen, "ADDR", "address to listen on (default 127.0.0.1)", NULL},
        {"--port", NULL, SD_CLI_INT, &port, "N", "port (default 8188; 0 = any free port, named in the log)", NULL},
        {"--token", NULL, SD_CLI_STR, &so.token, "TOKEN",
         "require 'Authorization: Bearer TOKEN' (default $SDFLOW_SERVER_TOKEN)", NULL},
        {"--insecure", NULL, SD_CLI_FLAG, &so.insecure, NULL, "allow a non-local --listen without a token", NULL},
        {"--enable-cors-header", NULL, SD_CLI_OPTSTR, &so.cors_origin, "ORIGIN",
         "let pages of other origins call the server: ORIGIN only, or any (no value: '*'); without it and "
         "without a token only the server's own pages may (docs/server.md)", NULL, "*"},
        {"--max-client-connections", NULL, SD_CLI_INT, &client_conns, "N",
         "connections at once from one client address; more are refused with 503 (default 32)", NULL},
        {"--request-timeout", NULL, SD_CLI_FLOAT, &request_timeout, "SECONDS",
         "time a client has to send its request headers, and the longest wait for each later read or "
         "write (default 10)", NULL},
        {"--max-body", NULL, SD_CLI_STR, &max_body, "SIZE", "largest JSON request (default 16M)", NULL},
        {"--max-upload-size", NULL, SD_CLI_FLOAT, &max_upload_mb, "MB",
         "largest upload in MiB, as ComfyUI's option (default 100)", NULL},
        {"--max-upload", NULL, SD_CLI_STR, &max_upload, "SIZE", "largest upload, with a unit (e.g. 256K; the same "
         "limit as --max-upload-size)", NULL},
        {"--ws-max-queued", NULL, SD_CLI_STR, &ws_queued, "SIZE",
         "messages waiting for one WebSocket client before it is dropped as not reading (default 8M)", NULL},
        {"--history", NULL, SD_CLI_INT, &history, "N", "prompts kept in /history (default 1000)", NULL},
        {"--max-queue", NULL, SD_CLI_INT, &max_queue, "N", "pending prompts accepted (default 1000)", NULL},
        {"--memory-budget", NULL, SD_CLI_STR, &budget, "SIZE",
         "resident memory above which results and models are released between prompts, least recently used "
         "first (default 4G)", NULL},
        {"--www", NULL, SD_CLI_STR, &so.www_dir, "DIR", "serve the page from DIR (index.html at /, and the files "
         "beside it) instead of the built-in page", NULL},
        {"--front-end-root", NULL, SD_CLI_STR, &so.front_end_root, "DIR",
         "host a built web frontend (ComfyUI's, e.g. its comfyui_frontend_package/static folder) at / instead of the "
         "built-in page", NULL},
        {"--user-directory", NULL, SD_CLI_STR, &so.user_dir, "DIR",
         "where saved workflows and settings are kept (default: 'user' beside the output folder)", NULL},
        {"--no-previews", NULL, SD_CLI_FLAG, &no_previews, NULL, "send no latent previews over the WebSocket", NULL},
        {"--preview-interval", NULL, SD_CLI_FLOAT, &preview_interval, "SECONDS",
         "least time between two previews of a node (default 0.5; the last step always goes)", NULL},
        {"--redis", NULL, SD_CLI_STR, &so.redis_url, "URL",
         "queue prompts on Redis for `sdflow worker` processes instead of running them here "
         "(redis://[[user]:password@]host[:port][/db] or unix:///path; docs/scaling.md)", NULL},
        {"--redis-prefix", NULL, SD_CLI_STR, &so.redis_prefix, "PREFIX", "key prefix in Redis (default sdflow)", NULL},
        {"--redis-ttl", NULL, SD_CLI_INT, &redis_ttl, "SECONDS", "how long uploads stay in Redis (default 86400)", NULL},
        {0}};
    const sd_cli_command cmd = {
        "serve", "[options]",
        "Serves ComfyUI's HTTP and WebSocket API (POST /prompt, /queue, /history, /view, /upload/image,\n"
        "/object_info, /ws, ...) and a page at /. Prompts run one at a time; models stay loaded between\n"
        "prompts. Listens on 127.0.0.1 unless told otherwise (docs/server.md).",
        SD_CLI_G_ENV | SD_CLI_G_CACHE, own, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    if (port < 0 || port > 65535) {
        fprintf(stderr, "sdflow serve: --port must be 0-65535\n");
        sd_cli_args_free(&a);
        return 1;
    }
    so.port = (int)port;
    if (redis_ttl < 0) {
        fprintf(stderr, "sdflow serve: --redis-ttl must be positive\n");
        sd_cli_args_free(&a);
        return 1;
    }
    so.redis_ttl = (long)redis_ttl;
    if (!(request_timeout > 0) || request_timeout > 86400) {
        fprintf(stderr, "sdflow serve: --request-timeout must be more than 0 and at most 86400 seconds\n");
        sd_cli_args_free(&a);
        return 1;
    }
    so.request_timeout = request_timeout;
    if (preview_interval < 0) {
        fprintf(stderr, "sdflow serve: --preview-interval must not be negative\n");
        sd_cli_args_free(&a);
        return 1;
    }
    if (max_upload_mb >= 0) {
        if (!(max_upload_mb > 0) || max_upload_mb > 1024.0 * 1024.0) {
            fprintf(stderr, "sdflow serve: --max-upload-size must be above 0 and at most 1048576 (MiB)\n");
            sd_cli_args_free(&a);
            return 1;
        }
        so.max_upload = (size_t)(max_upload_mb * 1024.0 * 1024.0 + 0.5);
        if (!so.max_upload) so.max_upload = 1;
    }
    if (!so.token && getenv("SDFLOW_SERVER_TOKEN") && *getenv("SDFLOW_SERVER_TOKEN")) so.token = getenv("SDFLOW_SERVER_TOKEN");
    if (sd_cli_size_opt("serve", "--max-body", max_body, &so.max_body) ||
        (max_upload && sd_cli_size_opt("serve", "--max-upload", max_upload, &so.max_upload)) ||
        sd_cli_size_opt("serve", "--memory-budget", budget, &so.memo_budget) ||
        sd_cli_size_opt("serve", "--ws-max-queued", ws_queued, &so.max_ws_queued) || count_opt("--history", history, &so.max_history) ||
        count_opt("--max-queue", max_queue, &so.max_queue) ||
        count_opt("--max-client-connections", client_conns, &so.max_client_conns)) {
        sd_cli_args_free(&a);
        return 1;
    }

    sd_error err;
    sd_error_clear(&err);
    sd_cli_engine e;
    code = sd_cli_engine_open(&e, &a, !no_previews);
    if (code) goto done;
    so.env = &e.env;
    so.cache = sd_cli_engine_cache(&e);
    so.argv = (const char *const *)argv;
    so.version = "sdflow " SDFLOW_VERSION;
    so.stop = sd_cli_stop_on_signals();
    so.preview = e.preview ? sd_cli_engine_preview : NULL;
    so.preview_user = e.preview;
    so.preview_interval = preview_interval;
    sd_status rc = sd_server_run(&so, &err);
    if (rc) sd_cli_print_error(&err);
    code = rc ? 1 : 0;
done:
    sd_cli_engine_close(&e);
    sd_cli_args_free(&a);
    return code;
}

#else

int sd_cli_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "sdflow serve: this build has no server (libcivetweb-dev or libhiredis-dev was not found at build time; "
                    "scripts/setup.sh installs them)\n");
    return 1;
}

#endif
