/* SQLite output cache: hit/miss, overwrite, persistence across reopen,
 * corrupt entries (raw SQL edits), a file that is not a database, read-only
 * access, LRU gc order, the size limit on put, the file-hash memo, stats,
 * listing, clear, size parsing and the default path. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "core/sha256.h"
#include "core/value_io.h"
#include "testutil.h"

static char g_dir[2048];

static void mkkey(uint8_t key[SD_KEY_SIZE], int i) {
    memset(key, 0, SD_KEY_SIZE);
    key[0] = (uint8_t)i;
    key[1] = (uint8_t)(i >> 8);
    key[31] = 0x5a;
}

/* A LATENT-like value whose content depends on `seed`; ~n floats. */
static sd_value *latent(int seed, int n) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, 1, n, 0, 0);
    float *f = sd_tensor_f32(t);
    for (int i = 0; i < n; i++) f[i] = (float)(seed * 1000 + i) * 0.5f;
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "samples", sd_value_tensor(t));
    sd_value_dict_set(d, "seed", sd_value_int(seed));
    sd_tensor_unref(t);
    return d;
}

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static sd_sqlite_cache *open_ok(const char *path, unsigned flags) {
    sd_error err;
    sd_error_clear(&err);
    sd_sqlite_cache *c = NULL;
    CHECK_OK(sd_cache_open_ex(path, flags, &c, &err), &err);
    return c;
}

static void test_basic(void) {
    char path[4096];
    path_in(path, sizeof path, "basic.db");
    sd_sqlite_cache *c = open_ok(path, 0);
    if (!c) return;
    CHECK(!sd_cache_is_readonly(c));
    sd_error err;
    sd_error_clear(&err);
    uint8_t k1[32], k2[32];
    mkkey(k1, 1);
    mkkey(k2, 2);
    sd_value *out = NULL;
    CHECK(sd_cache_get(c, k1, &out, &err) == SD_ERR_NOT_FOUND && out == NULL);
    sd_value *v1 = latent(1, 100);
    CHECK_OK(sd_cache_put(c, k1, "KSampler", v1, &err), &err);
    CHECK(sd_cache_contains(c, k1) && !sd_cache_contains(c, k2));
    CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v1));
    sd_value_unref(out);
    CHECK(sd_cache_get(c, k2, &out, &err) == SD_ERR_NOT_FOUND);

    /* overwrite */
    sd_value *v1b = latent(7, 50);
    CHECK_OK(sd_cache_put(c, k1, "VAEEncode", v1b, &err), &err);
    CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v1b) && !sd_value_equal(out, v1));
    sd_value_unref(out);
    sd_cache_listing l;
    CHECK_OK(sd_cache_list(c, &l, &err), &err);
    CHECK(l.n == 1 && strcmp(l.items[0].class_type, "VAEEncode") == 0);
    sd_cache_listing_free(&l);

    /* a value with a handle is refused, nothing stored */
    sd_value *h = sd_value_list();
    static const sd_handle_type T = {"CLIP", NULL};
    sd_value_list_append(h, sd_value_handle(&T, NULL));
    CHECK(sd_cache_put(c, k2, "CLIPLoader", h, &err) == SD_ERR_INVALID);
    CHECK(strstr(err.msg, "CLIP") != NULL);
    CHECK(!sd_cache_contains(c, k2));
    sd_value_unref(h);

    /* through the executor's interface */
    sd_cache_i ci = sd_cache_interface(c);
    CHECK_OK(ci.put(ci.self, k2, "EmptyLatentImage", v1, &err), &err);
    CHECK_OK(ci.get(ci.self, k2, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v1));
    sd_value_unref(out);
    uint8_t fh[32], got[32];
    for (int i = 0; i < 32; i++) fh[i] = (uint8_t)(i * 3);
    CHECK(ci.file_hash_get(ci.self, "/m/a.safetensors", 123, 456, got) == SD_ERR_NOT_FOUND);
    ci.file_hash_put(ci.self, "/m/a.safetensors", 123, 456, fh);
    CHECK(ci.file_hash_get(ci.self, "/m/a.safetensors", 123, 456, got) == SD_OK && memcmp(got, fh, 32) == 0);
    CHECK(ci.file_hash_get(ci.self, "/m/a.safetensors", 123, 457, got) == SD_ERR_NOT_FOUND);
    CHECK(ci.file_hash_get(ci.self, "/m/a.safetensors", 124, 456, got) == SD_ERR_NOT_FOUND);
    fh[0] ^= 1; /* file changed: the memo follows it */
    ci.file_hash_put(ci.self, "/m/a.safetensors", 124, 999, fh);
    CHECK(ci.file_hash_get(ci.self, "/m/a.safetensors", 124, 999, got) == SD_OK && memcmp(got, fh, 32) == 0);
    CHECK(ci.file_hash_get(ci.self, "/m/a.safetensors", 123, 456, got) == SD_ERR_NOT_FOUND);

    sd_cache_stats s;
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    CHECK(s.entries == 2 && s.file_hashes == 1 && s.total_bytes > 600 && s.db_bytes > 0);
    sd_cache_close(c);

    /* persisted: a new connection sees the same entries */
    c = open_ok(path, 0);
    if (!c) return;
    CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v1b));
    sd_value_unref(out);
    CHECK_OK(sd_cache_clear(c, &err), &err);
    CHECK(sd_cache_get(c, k1, &out, &err) == SD_ERR_NOT_FOUND);
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    CHECK(s.entries == 0 && s.total_bytes == 0 && s.file_hashes == 0);
    sd_cache_close(c);
    sd_value_unref(v1);
    sd_value_unref(v1b);
}

/* Edit a stored blob behind the cache's back. */
static void raw_sql(const char *path, const char *sql, const void *blob, int n) {
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt *st = NULL;
    CHECK(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
    if (blob) sqlite3_bind_blob(st, 1, blob, n, SQLITE_TRANSIENT);
    CHECK(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void test_corrupt(void) {
    char path[4096];
    path_in(path, sizeof path, "corrupt.db");
    sd_sqlite_cache *c = open_ok(path, 0);
    if (!c) return;
    sd_error err;
    sd_error_clear(&err);
    uint8_t k[32];
    sd_value *v = latent(3, 64), *out = NULL;

    /* flipped bytes inside the blob: the checksum catches it */
    mkkey(k, 10);
    CHECK_OK(sd_cache_put(c, k, "A", v, &err), &err);
    raw_sql(path, "UPDATE entries SET value = substr(value, 1, 40) || x'FFFF' || substr(value, 43)", NULL, 0);
    CHECK(sd_cache_get(c, k, &out, &err) == SD_ERR_NOT_FOUND && out == NULL);
    CHECK(strstr(err.msg, "checksum") != NULL);
    CHECK(!sd_cache_contains(c, k)); /* deleted */
    /* the next put rewrites it and it hits again */
    CHECK_OK(sd_cache_put(c, k, "A", v, &err), &err);
    CHECK_OK(sd_cache_get(c, k, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v));
    sd_value_unref(out);

    /* a blob that matches its checksum but does not decode */
    const uint8_t junk[] = {'S', 'D', 'F', 'V', 1, 0, 0, 0, 6, 0xff, 0xff};
    uint8_t h[32];
    sd_sha256(junk, sizeof junk, h);
    raw_sql(path, "UPDATE entries SET value = ?1", junk, (int)sizeof junk);
    sqlite3 *db = NULL;
    sqlite3_open(path, &db);
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(db, "UPDATE entries SET checksum = ?1", -1, &st, NULL);
    sqlite3_bind_blob(st, 1, h, 32, SQLITE_STATIC);
    CHECK(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
    CHECK(sd_cache_get(c, k, &out, &err) == SD_ERR_NOT_FOUND && out == NULL);
    CHECK(strstr(err.msg, "corrupt") != NULL);
    CHECK(!sd_cache_contains(c, k));

    /* a truncated checksum column */
    CHECK_OK(sd_cache_put(c, k, "A", v, &err), &err);
    raw_sql(path, "UPDATE entries SET checksum = x'00'", NULL, 0);
    CHECK(sd_cache_get(c, k, &out, &err) == SD_ERR_NOT_FOUND);
    sd_cache_close(c);
    sd_value_unref(v);
}

static void test_not_a_database(void) {
    char path[4096];
    sd_error err;
    sd_error_clear(&err);
    sd_sqlite_cache *c = NULL;
    path_in(path, sizeof path, "garbage.db");
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 4096; i++) fputc("not a database "[i % 15], f);
    fclose(f);
    CHECK(sd_cache_open(path, &c, &err) == SD_ERR_FORMAT && c == NULL);
    CHECK(strstr(err.msg, "garbage.db") && strstr(err.msg, "not a SQLite database"));
    /* the file is left as it was */
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size == 4096);

    /* a SQLite database of some other program */
    path_in(path, sizeof path, "other.db");
    raw_sql(path, "CREATE TABLE entries (x INTEGER)", NULL, 0);
    CHECK(sd_cache_open(path, &c, &err) != SD_OK && c == NULL);
    CHECK(strstr(err.msg, "other.db") != NULL);

    /* a newer schema */
    path_in(path, sizeof path, "newer.db");
    raw_sql(path, "PRAGMA user_version = 99", NULL, 0);
    CHECK(sd_cache_open(path, &c, &err) == SD_ERR_UNSUPPORTED && c == NULL);

    /* a directory, and a path whose parent is missing */
    CHECK(sd_cache_open(g_dir, &c, &err) != SD_OK && c == NULL);
    path_in(path, sizeof path, "no/such/dir/x.db");
    CHECK(sd_cache_open(path, &c, &err) != SD_OK && c == NULL);
    CHECK(strstr(err.msg, "x.db") != NULL);
}

static void test_readonly(void) {
    char path[4096];
    path_in(path, sizeof path, "ro.db");
    sd_error err;
    sd_error_clear(&err);
    uint8_t k1[32], k2[32];
    mkkey(k1, 1);
    mkkey(k2, 2);
    sd_value *v = latent(5, 20), *out = NULL;
    sd_sqlite_cache *c = open_ok(path, 0);
    if (!c) return;
    CHECK_OK(sd_cache_put(c, k1, "X", v, &err), &err);
    sd_cache_close(c);

    /* opened read-only: hits work, puts fail softly with an error */
    c = open_ok(path, SD_CACHE_READONLY);
    if (!c) return;
    CHECK(sd_cache_is_readonly(c));
    CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v));
    sd_value_unref(out);
    CHECK(sd_cache_put(c, k2, "X", v, &err) == SD_ERR_IO);
    CHECK(strstr(err.msg, "read-only") != NULL);
    CHECK(sd_cache_gc(c, 0, NULL, NULL, &err) == SD_ERR_IO);
    CHECK(sd_cache_clear(c, &err) == SD_ERR_IO);
    sd_cache_close(c);

    /* a 0444 file (only meaningful when not root: root writes anyway) */
    if (geteuid() != 0) {
        chmod(path, 0444);
        char wal[4200];
        snprintf(wal, sizeof wal, "%s-wal", path);
        c = open_ok(path, 0);
        if (c) {
            CHECK(sd_cache_is_readonly(c));
            CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
            sd_value_unref(out);
            CHECK(sd_cache_put(c, k2, "X", v, &err) == SD_ERR_IO);
            sd_cache_close(c);
        }
        chmod(path, 0644);
    } else {
        printf("note: running as root: chmod 0444 does not apply; the immutable-attribute case covers it\n");
    }

    /* Root ignores file modes; the immutable attribute stops even root, so
     * where chattr works, check a file and a directory that cannot be
     * written. The attribute is removed right after (and at start-up). */
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "chattr +i '%s' 2>/dev/null", path);
    if (system(cmd) == 0) {
        c = NULL;
        sd_status st = sd_cache_open(path, &c, &err);
        CHECK_OK(st, &err);
        if (c) {
            CHECK(sd_cache_is_readonly(c));
            CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
            CHECK(out && sd_value_equal(out, v));
            sd_value_unref(out);
            CHECK(sd_cache_put(c, k2, "X", v, &err) == SD_ERR_IO);
            sd_cache_close(c);
        }
        snprintf(cmd, sizeof cmd, "chattr -i '%s'", path);
        CHECK(system(cmd) == 0);
        /* writable file, unwritable directory */
        char sub[4096], p2[4200];
        path_in(sub, sizeof sub, "rodir");
        mkdir(sub, 0755);
        snprintf(p2, sizeof p2, "%s/c.db", sub);
        c = open_ok(p2, 0);
        if (c) {
            CHECK_OK(sd_cache_put(c, k1, "X", v, &err), &err);
            sd_cache_close(c);
        }
        snprintf(cmd, sizeof cmd, "chattr +i '%s'", sub);
        CHECK(system(cmd) == 0);
        c = NULL;
        st = sd_cache_open(p2, &c, &err);
        CHECK_OK(st, &err);
        if (c) {
            CHECK(sd_cache_is_readonly(c));
            out = NULL;
            CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
            CHECK(out && sd_value_equal(out, v));
            sd_value_unref(out);
            CHECK(sd_cache_put(c, k2, "X", v, &err) != SD_OK);
            sd_cache_close(c);
        }
        snprintf(cmd, sizeof cmd, "chattr -i '%s'", sub);
        CHECK(system(cmd) == 0);
    } else {
        printf("note: chattr not available; immutable-file case not run\n");
    }

    /* read-only open of a file that does not exist fails */
    path_in(path, sizeof path, "ro-missing.db");
    c = NULL;
    CHECK(sd_cache_open_ex(path, SD_CACHE_READONLY, &c, &err) != SD_OK && c == NULL);
    sd_value_unref(v);
}

static void test_gc(void) {
    char path[4096];
    path_in(path, sizeof path, "gc.db");
    sd_sqlite_cache *c = open_ok(path, 0);
    if (!c) return;
    sd_error err;
    sd_error_clear(&err);
    uint8_t k[32];
    sd_value *out;
    int64_t sz[6];
    /* 6 entries put in order 0..5, then 1 and 3 are read: LRU order is
     * 0, 2, 4, 5, 1, 3 */
    for (int i = 0; i < 6; i++) {
        mkkey(k, i);
        sd_value *v = latent(i, 200 + 10 * i);
        CHECK_OK(sd_cache_put(c, k, "N", v, &err), &err);
        void *b;
        size_t n;
        sd_value_serialize(v, &b, &n, &err);
        sz[i] = (int64_t)n;
        free(b);
        sd_value_unref(v);
    }
    int reads[2] = {1, 3};
    for (int r = 0; r < 2; r++) {
        mkkey(k, reads[r]);
        CHECK_OK(sd_cache_get(c, k, &out, &err), &err);
        sd_value_unref(out);
    }
    sd_cache_listing l;
    CHECK_OK(sd_cache_list(c, &l, &err), &err);
    CHECK(l.n == 6);
    if (l.n == 6) {
        uint8_t k3[32];
        char hex[65];
        mkkey(k3, 3);
        sd_sha256_hex(k3, hex);
        CHECK(strcmp(l.items[0].key_hex, hex) == 0); /* most recent first */
        CHECK(l.items[0].bytes == sz[3] && strcmp(l.items[0].class_type, "N") == 0);
        for (size_t i = 1; i < l.n; i++) CHECK(l.items[i - 1].last_used_ns > l.items[i].last_used_ns);
        CHECK(l.items[5].created_ns > 0 && l.items[5].created_ns <= l.items[5].last_used_ns);
    }
    sd_cache_listing_free(&l);

    int64_t total = 0;
    for (int i = 0; i < 6; i++) total += sz[i];
    /* limit that forces exactly 0 and 2 out */
    int64_t limit = total - sz[0] - sz[2];
    int64_t removed = 0, freed = 0;
    CHECK_OK(sd_cache_gc(c, limit, &removed, &freed, &err), &err);
    CHECK(removed == 2 && freed == sz[0] + sz[2]);
    int expect_present[6] = {0, 1, 0, 1, 1, 1};
    for (int i = 0; i < 6; i++) {
        mkkey(k, i);
        CHECK_MSG(sd_cache_contains(c, k) == expect_present[i], "entry %d", i);
    }
    /* one byte less evicts the next oldest (4) */
    CHECK_OK(sd_cache_gc(c, limit - 1, &removed, &freed, &err), &err);
    CHECK(removed == 1 && freed == sz[4]);
    mkkey(k, 4);
    CHECK(!sd_cache_contains(c, k));
    /* already under the limit: nothing */
    CHECK_OK(sd_cache_gc(c, total, &removed, &freed, &err), &err);
    CHECK(removed == 0 && freed == 0);
    CHECK(sd_cache_gc(c, -1, NULL, NULL, &err) == SD_ERR_INVALID);

    /* the limit applies on put: the new entry stays, the oldest go */
    sd_cache_stats s;
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    sd_cache_set_limit(c, s.total_bytes);
    mkkey(k, 40);
    sd_value *v = latent(40, 200);
    CHECK_OK(sd_cache_put(c, k, "N", v, &err), &err);
    sd_value_unref(v);
    CHECK(sd_cache_contains(c, k));
    mkkey(k, 5); /* oldest remaining (5 was put last of 0..5 but never read) */
    CHECK(!sd_cache_contains(c, k));
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    CHECK(s.entries == 3);

    /* gc to zero empties it and the file shrinks back */
    CHECK_OK(sd_cache_gc(c, 0, &removed, NULL, &err), &err);
    CHECK(removed == 3);
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    CHECK(s.entries == 0 && s.total_bytes == 0);
    sd_cache_close(c);
}

static void test_big_value_shrinks(void) {
    char path[4096];
    path_in(path, sizeof path, "shrink.db");
    sd_sqlite_cache *c = open_ok(path, 0);
    if (!c) return;
    sd_error err;
    uint8_t k[32];
    mkkey(k, 1);
    sd_value *v = latent(1, 1 << 20); /* 4 MiB */
    CHECK_OK(sd_cache_put(c, k, "Big", v, &err), &err);
    sd_value *out = NULL;
    CHECK_OK(sd_cache_get(c, k, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v));
    sd_value_unref(out);
    sd_cache_stats s;
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    CHECK(s.db_bytes > (4 << 20));
    CHECK_OK(sd_cache_clear(c, &err), &err);
    CHECK_OK(sd_cache_get_stats(c, &s, &err), &err);
    CHECK_MSG(s.db_bytes < (1 << 20), "db is %lld bytes after clear", (long long)s.db_bytes);
    sd_cache_close(c);
    sd_value_unref(v);
}

static void test_parse_size(void) {
    struct { const char *s; int64_t v; } ok[] = {
        {"0", 0},          {"4096", 4096},           {"10k", 10240},         {"10K", 10240},
        {"2G", 2LL << 30}, {"2GB", 2LL << 30},       {"2GiB", 2LL << 30},    {"500M", 500LL << 20},
        {"1.5G", 3LL << 29}, {" 3 T ", 3LL << 40},   {"7b", 7},
    };
    sd_error err;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t v = -5;
        CHECK_OK(sd_cache_parse_size(ok[i].s, &v, &err), &err);
        CHECK_MSG(v == ok[i].v, "'%s' -> %lld", ok[i].s, (long long)v);
    }
    const char *bad[] = {"", "G", "-1G", "2X", "2Gx", "1e30G", "nan", "inf", "2 G B x", "2Gi", NULL};
    for (int i = 0; bad[i]; i++) {
        int64_t v;
        CHECK_MSG(sd_cache_parse_size(bad[i], &v, &err) == SD_ERR_INVALID, "'%s' accepted", bad[i]);
    }
    int64_t v;
    CHECK(sd_cache_parse_size(NULL, &v, &err) == SD_ERR_INVALID);
}

static void test_default_path(void) {
    char xdg[4096];
    path_in(xdg, sizeof xdg, "xdg");
    char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    sd_error err;
    char *p = NULL;
    setenv("XDG_CACHE_HOME", xdg, 1);
    CHECK_OK(sd_cache_default_path(&p, &err), &err);
    char want[4300];
    snprintf(want, sizeof want, "%s/sdflow/cache.db", xdg);
    CHECK(p && strcmp(p, want) == 0);
    struct stat sb;
    snprintf(want, sizeof want, "%s/sdflow", xdg);
    CHECK(stat(want, &sb) == 0 && S_ISDIR(sb.st_mode));
    free(p);
    unsetenv("XDG_CACHE_HOME");
    char home[4096];
    path_in(home, sizeof home, "home");
    setenv("HOME", home, 1);
    CHECK_OK(sd_cache_default_path(&p, &err), &err);
    snprintf(want, sizeof want, "%s/.cache/sdflow/cache.db", home);
    CHECK(p && strcmp(p, want) == 0);
    /* and the cache opens there */
    sd_sqlite_cache *c = NULL;
    CHECK_OK(sd_cache_open(p, &c, &err), &err);
    sd_cache_close(c);
    free(p);
    setenv("XDG_CACHE_HOME", "relative/dir", 1); /* ignored per XDG */
    CHECK_OK(sd_cache_default_path(&p, &err), &err);
    CHECK(p && strcmp(p, want) == 0);
    free(p);
    if (old_xdg) setenv("XDG_CACHE_HOME", old_xdg, 1);
    else unsetenv("XDG_CACHE_HOME");
    if (old_home) setenv("HOME", old_home, 1);
    else unsetenv("HOME");
    free(old_xdg);
    free(old_home);
}

int main(void) {
    /* a run killed mid-test may have left immutable files behind */
    const char *base = getenv("SDFLOW_TEST_TMP");
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "chattr -R -i '%s/cache' 2>/dev/null", base && *base ? base : "/tmp/sdflow-test");
    if (system(cmd) != 0) { /* nothing there, or no chattr: fine */ }
    snprintf(g_dir, sizeof g_dir, "%s", sd_test_tmpdir("cache"));
    test_basic();
    test_corrupt();
    test_not_a_database();
    test_readonly();
    test_gc();
    test_big_value_shrinks();
    test_parse_size();
    test_default_path();
    return sd_test_finish();
}
