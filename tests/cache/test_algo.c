/* Measured algorithm choices in the cache database (cache/algo.h), with
 * made-up keys: a miss before anything is stored (also on a database that
 * has no algo_choices table yet), put then get, replace, every key field
 * telling choices apart, persistence across reopen, corrupt rows (a value
 * edited in place, a value of the wrong type) read as a miss and deleted,
 * bad arguments refused, and a read-only connection that reads but cannot
 * write. */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/algo.h"
#include "cache/cache.h"
#include "testutil.h"

static sd_cache_algo_key key(const char *shape) {
    return (sd_cache_algo_key){"Made-up GPU 24GB sm_89", "cudnn 91300", "conv2d_fwd", shape, "bf16", "nchw"};
}

static void raw_sql(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    CHECK_MSG(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
    sqlite3_close(db);
}

int main(void) {
    char path[2048];
    snprintf(path, sizeof path, "%s/algo.db", sd_test_tmpdir("cache_algo"));
    remove(path);
    sd_error err;
    sd_error_clear(&err);
    sd_sqlite_cache *c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    if (!c) return sd_test_finish();

    sd_cache_algo_key k = key("x[2,320,64,64] w[320,320,3,3] s1 p1,1");
    sd_cache_algo v = {-1, -1, -1};
    /* no table yet: a miss, not an error */
    CHECK(sd_cache_algo_get(c, &k, &v, &err) == SD_ERR_NOT_FOUND);
    CHECK(sd_cache_algo_count(c) == 0);

    sd_cache_algo a = {6, 1, 1 << 20};
    CHECK_OK(sd_cache_algo_put(c, &k, &a, &err), &err);
    CHECK_OK(sd_cache_algo_get(c, &k, &v, &err), &err);
    CHECK(v.algo == 6 && v.math == 1 && v.workspace == 1 << 20);
    /* replace */
    sd_cache_algo b = {1, 2, 0};
    CHECK_OK(sd_cache_algo_put(c, &k, &b, &err), &err);
    CHECK_OK(sd_cache_algo_get(c, &k, &v, &err), &err);
    CHECK(v.algo == 1 && v.math == 2 && v.workspace == 0 && sd_cache_algo_count(c) == 1);

    /* every field of the key is part of it */
    for (int f = 0; f < 6; f++) {
        sd_cache_algo_key o = k;
        const char **field[6] = {&o.device, &o.library, &o.op, &o.shape, &o.dtype, &o.layout};
        *field[f] = "other";
        CHECK_MSG(sd_cache_algo_get(c, &o, &v, &err) == SD_ERR_NOT_FOUND, "field %d ignored", f);
    }
    sd_cache_algo_key k2 = key("x[1,4,64,64] w[320,4,3,3] s1 p1,1");
    sd_cache_algo d = {0, 0, 4096};
    CHECK_OK(sd_cache_algo_put(c, &k2, &d, &err), &err);
    CHECK(sd_cache_algo_count(c) == 2);

    /* bad arguments */
    sd_cache_algo neg = {-3, 0, 0};
    CHECK(sd_cache_algo_put(c, &k2, &neg, &err) == SD_ERR_INVALID);
    sd_cache_algo_key hole = k;
    hole.layout = NULL;
    CHECK(sd_cache_algo_put(c, &hole, &a, &err) == SD_ERR_INVALID);
    CHECK(sd_cache_algo_get(c, &hole, &v, &err) == SD_ERR_INVALID);
    sd_cache_close(c);

    /* persistence; then corrupt rows, edited behind the cache's back */
    c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    if (!c) return sd_test_finish();
    CHECK_OK(sd_cache_algo_get(c, &k2, &v, &err), &err);
    CHECK(v.algo == 0 && v.workspace == 4096);
    sd_cache_close(c);
    raw_sql(path, "UPDATE algo_choices SET algo = 7 WHERE shape LIKE 'x[2,%'");      /* checksum no longer fits */
    raw_sql(path, "UPDATE algo_choices SET workspace = 'lots' WHERE shape LIKE 'x[1,%'"); /* not an integer */
    c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    if (!c) return sd_test_finish();
    sd_error_clear(&err);
    CHECK(sd_cache_algo_get(c, &k, &v, &err) == SD_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err.msg, "corrupt algorithm choice") && strstr(err.msg, "deleted"), "%s", err.msg);
    CHECK(sd_cache_algo_get(c, &k2, &v, &err) == SD_ERR_NOT_FOUND);
    CHECK(sd_cache_algo_count(c) == 0); /* both deleted */
    /* measured again and stored again */
    CHECK_OK(sd_cache_algo_put(c, &k, &a, &err), &err);
    CHECK_OK(sd_cache_algo_get(c, &k, &v, &err), &err);
    CHECK(v.algo == 6);
    sd_cache_close(c);

    /* read-only: reads, refuses to write */
    c = NULL;
    CHECK_OK(sd_cache_open_ex(path, SD_CACHE_READONLY, &c, &err), &err);
    if (c) {
        CHECK_OK(sd_cache_algo_get(c, &k, &v, &err), &err);
        CHECK(sd_cache_algo_put(c, &k2, &d, &err) == SD_ERR_IO);
        sd_cache_close(c);
    }
    return sd_test_finish();
}
