/* cmd_cache.c - `sdflow cache stats|list|clear|gc --max-size SIZE`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cache/cache.h"
#include "cli.h"

sd_status sd_cli_cache_open(const char *path, sd_sqlite_cache **out, sd_error *err) {
    *out = NULL;
    if (path) return sd_cache_open(path, out, err);
    const char *env = getenv("SDFLOW_CACHE");
    if (env && *env) return sd_cache_open(env, out, err);
    char *def = NULL;
    sd_status rc = sd_cache_default_path(&def, err);
    if (!rc) rc = sd_cache_open(def, out, err);
    free(def);
    return rc;
}

static void human(int64_t bytes, char *buf, size_t n) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (u == 0) snprintf(buf, n, "%lld B", (long long)bytes);
    else snprintf(buf, n, "%.1f %s", v, units[u]);
}

static void when(int64_t ns, char *buf, size_t n) {
    time_t t = (time_t)(ns / 1000000000LL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

int sd_cli_cache(int argc, char **argv) {
    const char *path = NULL, *max_size = NULL;
    const sd_cli_option own[] = {
        {"--cache", NULL, SD_CLI_STR, &path, "PATH", "the cache database (env SDFLOW_CACHE; default ~/.cache/sdflow/cache.db)",
         NULL},
        {"--max-size", NULL, SD_CLI_STR, &max_size, "SIZE", "gc: shrink to SIZE (2G, 500M, 100K or bytes)", NULL},
        {0}};
    const sd_cli_command cmd = {
        "cache", "stats|list|clear|gc [--max-size SIZE] [--cache PATH]",
        "stats: size and entry count; list: one line per entry (key, class_type, size, last use);\n"
        "clear: remove every entry; gc --max-size SIZE: drop least recently used entries until\n"
        "the cache holds at most SIZE.",
        0, own, 1, 1};
    sd_cli_args args;
    int code = sd_cli_parse(&cmd, argc, argv, &args);
    sd_cli_args_free(&args); /* pos[] points into argv: still valid */
    if (code != SD_CLI_CONTINUE) return code;
    const char *sub = args.pos[0];
    int is_gc = !strcmp(sub, "gc");
    if (strcmp(sub, "stats") && strcmp(sub, "list") && strcmp(sub, "clear") && !is_gc) {
        fprintf(stderr, "sdflow cache: unknown sub-command '%s' (stats, list, clear, gc)\n", sub);
        return 1;
    }
    if (is_gc != (max_size != NULL)) {
        fprintf(stderr, "sdflow cache: --max-size SIZE goes with gc, and only with gc\n");
        return 1;
    }
    sd_error err;
    sd_error_clear(&err);
    int64_t limit = 0;
    if (is_gc && sd_cache_parse_size(max_size, &limit, &err)) { sd_cli_print_error(&err); return 1; }
    sd_sqlite_cache *c = NULL;
    if (sd_cli_cache_open(path, &c, &err)) { sd_cli_print_error(&err); return 1; }
    sd_status rc = SD_OK;
    char a[64], b[64];
    if (!strcmp(sub, "stats")) {
        sd_cache_stats st;
        rc = sd_cache_get_stats(c, &st, &err);
        if (!rc) {
            human(st.total_bytes, a, sizeof a);
            human(st.db_bytes, b, sizeof b);
            printf("path:        %s\nentries:     %lld\ndata:        %s\non disk:     %s\nfile hashes: %lld\n",
                   sd_cache_path(c), (long long)st.entries, a, b, (long long)st.file_hashes);
        }
    } else if (!strcmp(sub, "list")) {
        sd_cache_listing l = {0};
        rc = sd_cache_list(c, &l, &err);
        for (size_t i = 0; !rc && i < l.n; i++) {
            human(l.items[i].bytes, a, sizeof a);
            when(l.items[i].last_used_ns, b, sizeof b);
            printf("%.16s  %-28s %10s  %s\n", l.items[i].key_hex, l.items[i].class_type ? l.items[i].class_type : "?",
                   a, b);
        }
        sd_cache_listing_free(&l);
    } else if (!strcmp(sub, "clear")) {
        rc = sd_cache_clear(c, &err);
        if (!rc) printf("cleared %s\n", sd_cache_path(c));
    } else {
        int64_t removed = 0, freed = 0;
        rc = sd_cache_gc(c, limit, &removed, &freed, &err);
        if (!rc) {
            human(freed, a, sizeof a);
            printf("removed %lld entries, freed %s\n", (long long)removed, a);
        }
    }
    if (rc) sd_cli_print_error(&err);
    sd_cache_close(c);
    return rc ? 1 : 0;
}
