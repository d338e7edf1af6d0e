/* Several processes (fork) writing and reading one cache file at once: no
 * call may fail (other than a miss), no value may come back torn, and the
 * database must pass SQLite's integrity check afterwards. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "core/value_io.h"
#include "testutil.h"

#define N_PROC 4
#define N_ITER 120
#define N_SHARED 8

static void mkkey(uint8_t key[SD_KEY_SIZE], int owner, int i) {
    memset(key, 0, SD_KEY_SIZE);
    key[0] = (uint8_t)owner;
    key[1] = (uint8_t)i;
    key[2] = (uint8_t)(i >> 8);
}

/* The content is a function of `tag`, so any reader can check it. */
static sd_value *make_value(int tag) {
    int n = 64 + (tag % 7) * 300;
    sd_tensor *t = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0);
    float *f = sd_tensor_f32(t);
    for (int i = 0; i < n; i++) f[i] = (float)(tag * 31 + i);
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "tag", sd_value_int(tag));
    sd_value_dict_set(d, "samples", sd_value_tensor(t));
    sd_tensor_unref(t);
    return d;
}

static int check_value(const sd_value *v) {
    sd_value *tag = sd_value_dict_get(v, "tag");
    if (!tag) return 0;
    sd_value *want = make_value((int)sd_value_as_int(tag));
    int ok = sd_value_equal(v, want);
    sd_value_unref(want);
    return ok;
}

static int child(const char *path, int id) {
    sd_error err;
    sd_error_clear(&err);
    sd_sqlite_cache *c = NULL;
    if (sd_cache_open(path, &c, &err) != SD_OK) {
        fprintf(stderr, "child %d: open: %s\n", id, err.msg);
        return 1;
    }
    int bad = 0;
    for (int i = 0; i < N_ITER && !bad; i++) {
        uint8_t k[32];
        sd_value *v = make_value(id * 1000 + i);
        mkkey(k, id, i);
        if (sd_cache_put(c, k, "Own", v, &err) != SD_OK) {
            fprintf(stderr, "child %d: put own %d: %s\n", id, i, err.msg);
            bad = 1;
        }
        sd_value_unref(v);
        /* everyone writes the shared keys, each time a whole valid value */
        mkkey(k, 255, i % N_SHARED);
        v = make_value(id * 1000 + i);
        if (sd_cache_put(c, k, "Shared", v, &err) != SD_OK) {
            fprintf(stderr, "child %d: put shared: %s\n", id, err.msg);
            bad = 1;
        }
        sd_value_unref(v);
        /* read own, shared and other processes' keys */
        for (int r = 0; r < 3 && !bad; r++) {
            int owner = r == 0 ? id : r == 1 ? 255 : (id + 1 + i) % N_PROC;
            int idx = r == 1 ? (i * 5) % N_SHARED : i;
            mkkey(k, owner, idx);
            sd_value *out = NULL;
            sd_status st = sd_cache_get(c, k, &out, &err);
            if (st == SD_OK) {
                if (!check_value(out)) {
                    fprintf(stderr, "child %d: torn value for owner %d idx %d\n", id, owner, idx);
                    bad = 1;
                }
                sd_value_unref(out);
            } else if (st != SD_ERR_NOT_FOUND || (r == 0)) {
                fprintf(stderr, "child %d: get owner %d idx %d: %s (%s)\n", id, owner, idx,
                        sd_status_name(st), err.msg);
                bad = 1;
            }
        }
        if (i % 40 == 39) {
            uint8_t h[32];
            memset(h, id, 32);
            sd_cache_file_hash_put(c, "/shared/model.safetensors", 1, id, h);
            sd_cache_stats s;
            if (sd_cache_get_stats(c, &s, &err) != SD_OK) {
                fprintf(stderr, "child %d: stats: %s\n", id, err.msg);
                bad = 1;
            }
        }
    }
    sd_cache_close(c);
    return bad;
}

int main(void) {
    const char *dir = sd_test_tmpdir("cache_concurrent");
    char path[4096];
    snprintf(path, sizeof path, "%s/cache.db", dir);
    /* no pre-creation: the children race to create the schema too */
    pid_t pids[N_PROC];
    for (int p = 0; p < N_PROC; p++) {
        pids[p] = fork();
        if (pids[p] == 0) _exit(child(path, p));
        CHECK(pids[p] > 0);
    }
    for (int p = 0; p < N_PROC; p++) {
        int status = 0;
        if (pids[p] <= 0) continue;
        CHECK(waitpid(pids[p], &status, 0) == pids[p]);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status %d)", p, status);
    }

    sd_error err;
    sd_error_clear(&err);
    sd_sqlite_cache *c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    if (c) {
        int all = 1;
        for (int p = 0; p < N_PROC; p++) {
            for (int i = 0; i < N_ITER; i++) {
                uint8_t k[32];
                mkkey(k, p, i);
                sd_value *out = NULL;
                if (sd_cache_get(c, k, &out, &err) != SD_OK || !check_value(out)) all = 0;
                sd_value_unref(out);
            }
        }
        CHECK(all);
        sd_cache_stats s;
        CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
        CHECK(s.entries == N_PROC * N_ITER + N_SHARED);
        CHECK(s.file_hashes == 1);
        sd_cache_close(c);
    }
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    CHECK(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(st) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return sd_test_finish();
}
