/* cmd_worker.c - `sdflow worker`: the options, the environment and the
 * backend, then worker/worker.h does the rest (docs/scaling.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#ifdef SDFLOW_HAVE_SERVER
#include "worker/worker.h"

int sd_cli_worker(int argc, char **argv) {
    sd_worker_opts wo;
    memset(&wo, 0, sizeof wo);
    const char *budget = NULL, *shared = "1M";
    long long max_attempts = 3, ttl = 86400;
    double claim_timeout = 60, preview_interval = 0.5, oom_retry = 30;
    int no_previews = 0;
    const sd_cli_option own[] = {
        {"--redis", NULL, SD_CLI_STR, &wo.redis_url, "URL",
         "the Redis `sdflow serve --redis` queues on (redis://[[user]:password@]host[:port][/db] or unix:///path)",
         NULL},
        {"--redis-prefix", NULL, SD_CLI_STR, &wo.prefix, "PREFIX", "key prefix in Redis (default sdflow)", NULL},
        {"--name", NULL, SD_CLI_STR, &wo.name, "NAME", "this worker's name in the consumer group (default host:pid)",
         NULL},
        {"--claim-timeout", NULL, SD_CLI_FLOAT, &claim_timeout, "SECONDS",
         "a prompt whose worker went silent this long is run again by another (default 60)", NULL},
        {"--max-attempts", NULL, SD_CLI_INT, &max_attempts, "N",
         "runs of one prompt before it is recorded as failed (default 3)", NULL},
        {"--ttl", NULL, SD_CLI_INT, &ttl, "SECONDS", "how long output files stay in Redis (default 86400)", NULL},
        {"--oom-retry", NULL, SD_CLI_FLOAT, &oom_retry, "SECONDS",
         "how long a prompt waits for room when Redis is full (maxmemory) before it fails saying so "
         "(default 30)", NULL},
        {"--memory-budget", NULL, SD_CLI_STR, &budget, "SIZE",
         "resident memory above which results and models are released between prompts (default 4G)", NULL},
        {"--shared-cache", NULL, SD_CLI_STR, &shared, "SIZE",
         "share node outputs up to SIZE (serialized: conditioning, latents) with every worker through Redis "
         "(default 1M; 0 = off; --no-cache turns it off too)", NULL},
        {"--no-previews", NULL, SD_CLI_FLAG, &no_previews, NULL, "send no latent previews", NULL},
        {"--preview-interval", NULL, SD_CLI_FLOAT, &preview_interval, "SECONDS",
         "least time between two previews of a node (default 0.5)", NULL},
        {0}};
    const sd_cli_command cmd = {
        "worker", "--redis URL [options]",
        "Runs the prompts `sdflow serve --redis URL` queued: one prompt at a time, models kept loaded\n"
        "between prompts, progress and outputs sent back through Redis. Start one per GPU\n"
        "(--device cuda:N), on any machine that reaches Redis (docs/scaling.md).",
        SD_CLI_G_ENV | SD_CLI_G_CACHE, own, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    const char *bad = !wo.redis_url ? "--redis URL is required"
                      : claim_timeout <= 0 ? "--claim-timeout must be positive"
                      : max_attempts < 1 ? "--max-attempts must be at least 1"
                      : ttl < 1 ? "--ttl must be positive"
                      : !(oom_retry >= 0 && oom_retry <= 86400) ? "--oom-retry must be 0 to 86400 seconds"
                      : preview_interval < 0 ? "--preview-interval must not be negative" : NULL;
    if (bad) {
        fprintf(stderr, "sdflow worker: %s\n", bad);
        sd_cli_args_free(&a);
        return 2;
    }
    wo.claim_timeout = claim_timeout;
    wo.max_attempts = (int)max_attempts;
    wo.ttl = (long)ttl;
    wo.oom_retry = oom_retry > 0 ? oom_retry : 0.001; /* 0: no waiting (0 in the options means the default) */
    wo.preview_interval = preview_interval;
    if (sd_cli_size_opt("worker", "--memory-budget", budget, &wo.memo_budget) ||
        (strcmp(shared, "0") && !a.no_cache && /* --no-cache: every node computes */
         sd_cli_size_opt("worker", "--shared-cache", shared, &wo.shared_cache_max))) {
        sd_cli_args_free(&a);
        return 2;
    }

    sd_cli_engine e;
    code = sd_cli_engine_open(&e, &a, !no_previews);
    if (code) goto done;
    wo.env = &e.env;
    wo.cache = sd_cli_engine_cache(&e);
    wo.preview = e.preview ? sd_cli_engine_preview : NULL;
    wo.preview_user = e.preview;
    wo.stop = sd_cli_stop_on_signals();
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_worker_run(&wo, &err);
    if (rc) sd_cli_print_error(&err);
    code = rc ? 1 : 0;
done:
    sd_cli_engine_close(&e);
    sd_cli_args_free(&a);
    return code;
}

#else

int sd_cli_worker(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "sdflow worker: this build has no server (libcivetweb-dev or libhiredis-dev was not found at "
                    "build time; scripts/setup.sh installs them)\n");
    return 1;
}

#endif
