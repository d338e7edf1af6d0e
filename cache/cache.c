/* cache.c - opening the database, get/put of values, the file-hash memo and
 * the sd_cache_i view. Administration (stats, list, gc) is in admin.c. */
#include "cache_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/sha256.h"
#include "core/value_io.h"

int64_t sd_cache_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

sd_status sd_cache_sql_error(sd_sqlite_cache *c, sd_error *err, sd_status code, const char *what) {
    return sd_error_set(err, code, "cache %s: %s: %s", c->path, what, sqlite3_errmsg(c->db));
}

int sd_cache_exec(sd_sqlite_cache *c, const char *sql) {
    return sqlite3_exec(c->db, sql, NULL, NULL, NULL);
}

/* ---- open / close ----------------------------------------------------------- */

static const char *SCHEMA =
    "CREATE TABLE IF NOT EXISTS entries ("
    " key BLOB PRIMARY KEY, class_type TEXT NOT NULL, value BLOB NOT NULL,"
    " checksum BLOB NOT NULL, bytes INTEGER NOT NULL, created INTEGER NOT NULL,"
    " last_used INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS entries_lru ON entries(last_used);"
    "CREATE TABLE IF NOT EXISTS file_hashes ("
    " path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"
    " hash BLOB NOT NULL);";

/* Last-used stamps are strictly increasing across the database (a clock
 * that ticks coarsely or goes back must not scramble the LRU order). */
#define NEXT_STAMP "max(?2, (SELECT coalesce(max(last_used), 0) + 1 FROM entries))"

static const char *SQL_GET = "SELECT value, checksum FROM entries WHERE key = ?1";
static const char *SQL_TOUCH = "UPDATE entries SET last_used = " NEXT_STAMP " WHERE key = ?1";
static const char *SQL_PUT =
    "INSERT OR REPLACE INTO entries (key, class_type, value, checksum, bytes, created, last_used)"
    " VALUES (?1, ?3, ?4, ?5, ?6, ?2, " NEXT_STAMP ")";
static const char *SQL_DEL = "DELETE FROM entries WHERE key = ?1";
static const char *SQL_HAS = "SELECT 1 FROM entries WHERE key = ?1";
static const char *SQL_FH_GET =
    "SELECT hash FROM file_hashes WHERE path = ?1 AND size = ?2 AND mtime_ns = ?3";
static const char *SQL_FH_PUT =
    "INSERT OR REPLACE INTO file_hashes (path, size, mtime_ns, hash) VALUES (?1, ?2, ?3, ?4)";

void sd_cache_close(sd_sqlite_cache *c) {
    if (!c) return;
    sqlite3_stmt *all[] = {c->st_get, c->st_touch, c->st_put, c->st_del,
                           c->st_has, c->st_fh_get, c->st_fh_put};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sqlite3_finalize(all[i]);
    if (c->db) sqlite3_close_v2(c->db);
    free(c->path);
    free(c);
}

/* Schema check/creation. On a writable file this runs in an immediate
 * transaction so two processes creating the same new cache do not race. */
static sd_status setup_schema(sd_sqlite_cache *c, sd_error *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    if (!c->readonly) {
        rc = sd_cache_exec(c, "BEGIN IMMEDIATE");
        if (rc != SQLITE_OK) return sd_cache_sql_error(c, err, SD_ERR_IO, "cannot lock the database");
    }
    rc = sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL);
    int version = -1;
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sd_status res = SD_OK;
    if (version < 0) {
        res = sd_cache_sql_error(c, err, SD_ERR_IO, "cannot read the schema version");
    } else if (version > SD_CACHE_SCHEMA_VERSION) {
        res = sd_error_set(err, SD_ERR_UNSUPPORTED,
                           "cache %s: schema version %d was written by a newer sdflow (this one reads %d)",
                           c->path, version, SD_CACHE_SCHEMA_VERSION);
    } else if (version == 0 && c->readonly) {
        res = sd_error_set(err, SD_ERR_FORMAT, "cache %s: read-only and not an sdflow cache (no schema)",
                           c->path);
    } else if (version == 0) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SD_CACHE_SCHEMA_VERSION);
        if (sd_cache_exec(c, SCHEMA) != SQLITE_OK || sd_cache_exec(c, sql) != SQLITE_OK)
            res = sd_cache_sql_error(c, err, SD_ERR_FORMAT, "cannot create the cache tables");
    }
    if (!c->readonly) {
        if (res == SD_OK && sd_cache_exec(c, "COMMIT") != SQLITE_OK)
            res = sd_cache_sql_error(c, err, SD_ERR_IO, "cannot commit the schema");
        if (res != SD_OK) sd_cache_exec(c, "ROLLBACK");
    }
    return res;
}

/* Private open flag: read through a "file:...?immutable=1" URI. */
#define OPEN_IMMUTABLE 0x100u

/* SQLite URI for an immutable read-only open; percent-encodes what URIs
 * reserve. malloc'd. */
static char *immutable_uri(const char *path) {
    size_t n = strlen(path);
    char *u = malloc(3 * n + 32);
    if (!u) return NULL;
    char *o = u;
    o += sprintf(o, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x21 || *p >= 0x7f) o += sprintf(o, "%%%02X", *p);
        else *o++ = (char)*p;
    }
    strcpy(o, "?immutable=1");
    return u;
}

sd_status sd_cache_open_ex(const char *path, unsigned flags, sd_sqlite_cache **out, sd_error *err) {
    *out = NULL;
    if (!path || !*path) return sd_error_set(err, SD_ERR_INVALID, "cache: empty database path");
    sd_sqlite_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return sd_error_set(err, SD_ERR_NOMEM, "cache %s: out of memory", path);
    }
    c->readonly = (flags & SD_CACHE_READONLY) != 0;
    if (!c->readonly && access(path, F_OK) == 0 && access(path, W_OK) != 0) c->readonly = 1;
    int oflags = c->readonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    char *uri = NULL;
    if (flags & OPEN_IMMUTABLE) {
        uri = immutable_uri(path);
        if (!uri) {
            sd_cache_close(c);
            return sd_error_set(err, SD_ERR_NOMEM, "cache %s: out of memory", path);
        }
        oflags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    }
    int rc = sqlite3_open_v2(uri ? uri : path, &c->db, oflags, NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        sd_status st = c->db ? sd_cache_sql_error(c, err, SD_ERR_IO, "cannot open")
                             : sd_error_set(err, SD_ERR_NOMEM, "cache %s: out of memory", path);
        sd_cache_close(c);
        return st;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, SD_CACHE_BUSY_MS);

    /* SQLite opens lazily: the first read tells whether this is a database. */
    sqlite3_stmt *st = NULL;
    int pages = -1;
    rc = sqlite3_prepare_v2(c->db, "PRAGMA page_count", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) pages = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    if (pages < 0 && !c->readonly) {
        /* A WAL database in a directory we cannot write fails on its first
         * read (no -shm can be made); try again read-only. */
        int ec = sqlite3_errcode(c->db) & 0xff;
        if (ec == SQLITE_READONLY || ec == SQLITE_CANTOPEN || ec == SQLITE_PERM) {
            if (access(path, F_OK) == 0) {
                sd_cache_close(c);
                return sd_cache_open_ex(path, flags | SD_CACHE_READONLY, out, err);
            }
        }
    }
    int ec0 = sqlite3_errcode(c->db) & 0xff;
    if (pages < 0 && c->readonly && !(flags & OPEN_IMMUTABLE) && (ec0 == SQLITE_CANTOPEN || ec0 == SQLITE_READONLY) &&
        access(path, R_OK) == 0) {
        /* A WAL database whose directory we cannot write has no -shm for a
         * reader to map: SQLite says CANTOPEN, or READONLY_DIRECTORY when
         * the directory's mode (not an immutable attribute) forbids it,
         * which is the common case of a user reading a shared cache. Open
         * it as immutable: nobody who could change it can be less
         * privileged than us, and a blob changed under us still fails its
         * checksum. */
        sd_cache_close(c);
        return sd_cache_open_ex(path, flags | OPEN_IMMUTABLE, out, err);
    }
    if (pages < 0) {
        sd_status code = (rc & 0xff) == SQLITE_NOTADB ? SD_ERR_FORMAT : SD_ERR_IO;
        sd_status s = code == SD_ERR_FORMAT
                          ? sd_error_set(err, code, "cache %s: file is not a SQLite database (not an sdflow cache)",
                                         path)
                          : sd_cache_sql_error(c, err, code, "cannot read");
        sd_cache_close(c);
        return s;
    }
    if (!c->readonly) {
        /* auto_vacuum only takes effect before the first table exists; it
         * lets gc/clear hand freed pages back to the file system. */
        if (pages == 0) sd_cache_exec(c, "PRAGMA auto_vacuum = INCREMENTAL");
        /* WAL: readers never block a writer. A file system without shared
         * memory support keeps the rollback journal, which still works. */
        sd_cache_exec(c, "PRAGMA journal_mode = WAL");
        sd_cache_exec(c, "PRAGMA synchronous = NORMAL");
    }
    sd_status s = setup_schema(c, err);
    if (s != SD_OK) {
        /* A writable-looking file in a read-only directory or file system
         * only fails once we try to write: serve it read-only instead. */
        int ec = sqlite3_errcode(c->db) & 0xff;
        int retry = !c->readonly && s == SD_ERR_IO &&
                    (ec == SQLITE_READONLY || ec == SQLITE_CANTOPEN || ec == SQLITE_PERM || ec == SQLITE_AUTH);
        sd_cache_close(c);
        if (retry) return sd_cache_open_ex(path, flags | SD_CACHE_READONLY, out, err);
        return s;
    }
    struct { sqlite3_stmt **st; const char *sql; } prep[] = {
        {&c->st_get, SQL_GET}, {&c->st_touch, SQL_TOUCH}, {&c->st_put, SQL_PUT},
        {&c->st_del, SQL_DEL}, {&c->st_has, SQL_HAS},     {&c->st_fh_get, SQL_FH_GET},
        {&c->st_fh_put, SQL_FH_PUT},
    };
    for (size_t i = 0; i < sizeof prep / sizeof prep[0]; i++) {
        if (sqlite3_prepare_v3(c->db, prep[i].sql, -1, SQLITE_PREPARE_PERSISTENT, prep[i].st, NULL) !=
            SQLITE_OK) {
            s = sd_cache_sql_error(c, err, SD_ERR_FORMAT, "not an sdflow cache (unexpected tables)");
            sd_cache_close(c);
            return s;
        }
    }
    *out = c;
    return SD_OK;
}

sd_status sd_cache_open(const char *path, sd_sqlite_cache **out, sd_error *err) {
    return sd_cache_open_ex(path, 0, out, err);
}

const char *sd_cache_path(const sd_sqlite_cache *c) { return c->path; }
int sd_cache_is_readonly(const sd_sqlite_cache *c) { return c->readonly; }

/* ---- values ---------------------------------------------------------------- */

static void delete_key(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE]) {
    if (c->readonly) return;
    sqlite3_bind_blob(c->st_del, 1, key, SD_KEY_SIZE, SQLITE_STATIC);
    sqlite3_step(c->st_del); /* failure leaves the entry; it stays a miss */
    sqlite3_reset(c->st_del);
    sqlite3_clear_bindings(c->st_del);
}

sd_status sd_cache_get(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE], sd_value **out, sd_error *err) {
    *out = NULL;
    sqlite3_stmt *st = c->st_get;
    sqlite3_bind_blob(st, 1, key, SD_KEY_SIZE, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return SD_ERR_NOT_FOUND;
    }
    if (rc != SQLITE_ROW) {
        sd_status s = sd_cache_sql_error(c, err, SD_ERR_IO, "lookup failed");
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return s;
    }
    const void *blob = sqlite3_column_blob(st, 0);
    size_t n = (size_t)sqlite3_column_bytes(st, 0);
    const void *sum = sqlite3_column_blob(st, 1);
    int sum_n = sqlite3_column_bytes(st, 1);
    uint8_t h[32];
    sd_sha256(blob, n, h);
    sd_status s;
    const char *why = NULL;
    sd_error derr;
    sd_error_clear(&derr);
    if (sum_n != 32 || !sum || memcmp(h, sum, 32) != 0) {
        why = "checksum mismatch";
        s = SD_ERR_FORMAT;
    } else {
        s = sd_value_deserialize(blob, n, out, &derr);
        if (s != SD_OK) why = derr.msg;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SD_OK) {
        char hex[65];
        sd_sha256_hex(key, hex);
        if (s == SD_ERR_NOMEM) return sd_error_set(err, s, "cache %s: entry %.16s: %s", c->path, hex, derr.msg);
        delete_key(c, key);
        sd_error_set(err, SD_ERR_NOT_FOUND, "cache %s: entry %.16s was corrupt (%s)%s", c->path, hex, why,
                     c->readonly ? "" : " and was deleted");
        return SD_ERR_NOT_FOUND;
    }
    if (!c->readonly) {
        sqlite3_bind_blob(c->st_touch, 1, key, SD_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(c->st_touch, 2, sd_cache_now_ns());
        sqlite3_step(c->st_touch); /* a failed touch only ages the entry */
        sqlite3_reset(c->st_touch);
        sqlite3_clear_bindings(c->st_touch);
    }
    return SD_OK;
}

int sd_cache_contains(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE]) {
    sqlite3_bind_blob(c->st_has, 1, key, SD_KEY_SIZE, SQLITE_STATIC);
    int found = sqlite3_step(c->st_has) == SQLITE_ROW;
    sqlite3_reset(c->st_has);
    sqlite3_clear_bindings(c->st_has);
    return found;
}

sd_status sd_cache_put(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE], const char *class_type,
                       const sd_value *v, sd_error *err) {
    if (c->readonly)
        return sd_error_set(err, SD_ERR_IO, "cache %s is read-only; %s output not stored", c->path,
                            class_type ? class_type : "node");
    void *blob = NULL;
    size_t n = 0;
    sd_status s = sd_value_serialize(v, &blob, &n, err);
    if (s != SD_OK) {
        sd_error_prefix(err, "cache: %s output", class_type ? class_type : "node");
        return s;
    }
    uint8_t h[32];
    sd_sha256(blob, n, h);
    int64_t now = sd_cache_now_ns();
    sqlite3_stmt *st = c->st_put;
    sqlite3_bind_blob(st, 1, key, SD_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_text(st, 3, class_type ? class_type : "", -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 4, blob, n, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, h, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, (int64_t)n);
    int rc = sqlite3_step(st);
    s = SD_OK;
    if (rc != SQLITE_DONE) {
        s = sd_cache_sql_error(c, err, SD_ERR_IO, "cannot store an entry");
        if ((rc & 0xff) == SQLITE_READONLY) c->readonly = 1; /* stop trying */
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    free(blob);
    if (s == SD_OK && c->limit > 0) s = sd_cache_gc(c, c->limit, NULL, NULL, err);
    return s;
}

/* ---- file-hash memo ---------------------------------------------------------- */

sd_status sd_cache_file_hash_get(sd_sqlite_cache *c, const char *path, int64_t size, int64_t mtime_ns,
                                 uint8_t out[SD_KEY_SIZE]) {
    sqlite3_stmt *st = c->st_fh_get;
    sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, size);
    sqlite3_bind_int64(st, 3, mtime_ns);
    sd_status s = SD_ERR_NOT_FOUND;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) == SD_KEY_SIZE) {
        memcpy(out, sqlite3_column_blob(st, 0), SD_KEY_SIZE);
        s = SD_OK;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return s;
}

void sd_cache_file_hash_put(sd_sqlite_cache *c, const char *path, int64_t size, int64_t mtime_ns,
                            const uint8_t hash[SD_KEY_SIZE]) {
    if (c->readonly) return;
    sqlite3_stmt *st = c->st_fh_put;
    sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, size);
    sqlite3_bind_int64(st, 3, mtime_ns);
    sqlite3_bind_blob(st, 4, hash, SD_KEY_SIZE, SQLITE_STATIC);
    sqlite3_step(st); /* only a memo: a failed write costs a rehash later */
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* ---- sd_cache_i ---------------------------------------------------------- */

static sd_status if_get(void *self, const uint8_t key[SD_KEY_SIZE], sd_value **out, sd_error *err) {
    return sd_cache_get(self, key, out, err);
}

static sd_status if_put(void *self, const uint8_t key[SD_KEY_SIZE], const char *class_type, const sd_value *v,
                        sd_error *err) {
    return sd_cache_put(self, key, class_type, v, err);
}

static sd_status if_fh_get(void *self, const char *path, int64_t size, int64_t mtime_ns,
                           uint8_t out[SD_KEY_SIZE]) {
    return sd_cache_file_hash_get(self, path, size, mtime_ns, out);
}

static void if_fh_put(void *self, const char *path, int64_t size, int64_t mtime_ns,
                      const uint8_t hash[SD_KEY_SIZE]) {
    sd_cache_file_hash_put(self, path, size, mtime_ns, hash);
}

sd_cache_i sd_cache_interface(sd_sqlite_cache *c) {
    sd_cache_i i = {c, if_get, if_put, if_fh_get, if_fh_put};
    return i;
}
