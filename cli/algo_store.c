/* algo_store.c - the backend's store of measured algorithm choices, kept in
 * the run's SQLite cache (cli.h; kernels/backend.h sd_algo_store_i,
 * cache/algo.h). The kernels see only the callback interface. */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include "cache/algo.h"
#include "kernels/backend.h"

static sd_cache_algo_key cache_key(const sd_algo_key *k) {
    return (sd_cache_algo_key){k->device, k->library, k->op, k->shape, k->dtype, k->layout};
}

static int store_get(void *self, const sd_algo_key *k, sd_algo_choice *out) {
    sd_cli_algo_store *s = self;
    sd_cache_algo_key ck = cache_key(k);
    sd_cache_algo v;
    sd_error err;
    sd_error_clear(&err);
    if (sd_cache_algo_get(s->cache, &ck, &v, &err) != SD_OK) {
        /* a corrupt row was deleted: say so once, then measure again */
        if (err.msg[0] && strstr(err.msg, "corrupt") && !s->warned++)
            fprintf(stderr, "warning: %s\n", err.msg);
        return 0;
    }
    *out = (sd_algo_choice){v.algo, v.math, v.workspace};
    return 1;
}

static void store_put(void *self, const sd_algo_key *k, const sd_algo_choice *v) {
    sd_cli_algo_store *s = self;
    sd_cache_algo_key ck = cache_key(k);
    sd_cache_algo cv = {v->algo, v->math, v->workspace};
    sd_error err;
    sd_error_clear(&err);
    if (sd_cache_algo_put(s->cache, &ck, &cv, &err) != SD_OK && !s->warned++)
        fprintf(stderr, "warning: measured algorithm choices are not kept for the next run: %s\n", err.msg);
}

void sd_cli_algo_store_attach(sd_cli_algo_store *s, struct sd_backend *be, struct sd_sqlite_cache *c) {
    s->cache = c;
    s->warned = 0;
    if (!be || !c) return;
    sd_algo_store_i i = {s, store_get, store_put};
    sd_backend_set_algo_store(be, &i);
}

void sd_cli_algo_store_detach(sd_cli_algo_store *s, struct sd_backend *be) {
    if (be && s->cache) sd_backend_set_algo_store(be, NULL);
    s->cache = NULL;
}
