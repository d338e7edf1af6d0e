/* algo.c - measured algorithm choices in the cache database (algo.h). */
#include "algo.h"

#include "cache_impl.h"

static const char *TABLE =
    "CREATE TABLE IF NOT EXISTS algo_choices ("
    " device TEXT NOT NULL, library TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL,"
    " dtype TEXT NOT NULL, layout TEXT NOT NULL, algo INTEGER NOT NULL, math INTEGER NOT NULL,"
    " workspace INTEGER NOT NULL, checksum INTEGER NOT NULL,"
    " PRIMARY KEY (device, library, op, shape, dtype, layout))";

#define WHERE " WHERE device = ?1 AND library = ?2 AND op = ?3 AND shape = ?4 AND dtype = ?5 AND layout = ?6"

/* FNV-1a over the key strings (each with its terminating NUL, so field
 * boundaries count) and the three values: catches a row edited or damaged
 * in place. Not a defence against a deliberate forger (who can recompute
 * it); a wrong algorithm id then only fails the op with cuDNN's error. */
static int64_t checksum(const sd_cache_algo_key *k, const sd_cache_algo *v) {
    uint64_t h = 1469598103934665603ULL;
    const char *f[6] = {k->device, k->library, k->op, k->shape, k->dtype, k->layout};
    for (int i = 0; i < 6; i++) {
        const char *s = f[i];
        do {
            h ^= (unsigned char)*s;
            h *= 1099511628211ULL;
        } while (*s++);
    }
    const int64_t vals[3] = {v->algo, v->math, v->workspace};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 8; b++) {
            h ^= (uint64_t)vals[i] >> (8 * b) & 0xff;
            h *= 1099511628211ULL;
        }
    return (int64_t)(h >> 1); /* positive: SQLite keeps it an exact INTEGER */
}

static int prepare(sd_sqlite_cache *c, const char *sql, const sd_cache_algo_key *k, sqlite3_stmt **st) {
    if (sqlite3_prepare_v2(c->db, sql, -1, st, NULL) != SQLITE_OK) return 0;
    const char *f[6] = {k->device, k->library, k->op, k->shape, k->dtype, k->layout};
    for (int i = 0; i < 6; i++) sqlite3_bind_text(*st, i + 1, f[i], -1, SQLITE_STATIC);
    return 1;
}

static int valid_key(const sd_cache_algo_key *k) {
    return k && k->device && k->library && k->op && k->shape && k->dtype && k->layout;
}

sd_status sd_cache_algo_get(sd_sqlite_cache *c, const sd_cache_algo_key *k, sd_cache_algo *out,
                            sd_error *err) {
    if (!valid_key(k)) return sd_error_set(err, SD_ERR_INVALID, "algorithm choice: incomplete key");
    sqlite3_stmt *st = NULL;
    if (!prepare(c, "SELECT algo, math, workspace, checksum FROM algo_choices" WHERE, k, &st)) {
        sqlite3_finalize(st); /* no table yet (or unreadable): a miss */
        return sd_error_set(err, SD_ERR_NOT_FOUND, "no stored algorithm choice");
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        return sd_error_set(err, SD_ERR_NOT_FOUND, "no stored algorithm choice");
    }
    int ints = 1;
    for (int i = 0; i < 4; i++) ints &= sqlite3_column_type(st, i) == SQLITE_INTEGER;
    sd_cache_algo v = {sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2)};
    int64_t sum = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    if (ints && v.algo >= 0 && v.math >= 0 && v.workspace >= 0 && sum == checksum(k, &v)) {
        *out = v;
        return SD_OK;
    }
    if (!c->readonly && prepare(c, "DELETE FROM algo_choices" WHERE, k, &st)) sqlite3_step(st);
    sqlite3_finalize(st);
    return sd_error_set(err, SD_ERR_NOT_FOUND, "cache %s: corrupt algorithm choice for %s %s %s %s (%s, %s)%s",
                        c->path, k->op, k->shape, k->dtype, k->layout, k->device, k->library,
                        c->readonly ? "" : "; deleted");
}

sd_status sd_cache_algo_put(sd_sqlite_cache *c, const sd_cache_algo_key *k, const sd_cache_algo *v,
                            sd_error *err) {
    if (!valid_key(k) || !v || v->algo < 0 || v->math < 0 || v->workspace < 0)
        return sd_error_set(err, SD_ERR_INVALID, "algorithm choice: incomplete key or negative value");
    if (c->readonly) return sd_error_set(err, SD_ERR_IO, "cache %s is read-only", c->path);
    if (sd_cache_exec(c, TABLE) != SQLITE_OK) return sd_cache_sql_error(c, err, SD_ERR_IO, "cannot create algo_choices");
    sqlite3_stmt *st = NULL;
    int ok = prepare(c, "INSERT OR REPLACE INTO algo_choices (device, library, op, shape, dtype, layout,"
                        " algo, math, workspace, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                     k, &st);
    if (ok) {
        sqlite3_bind_int64(st, 7, v->algo);
        sqlite3_bind_int64(st, 8, v->math);
        sqlite3_bind_int64(st, 9, v->workspace);
        sqlite3_bind_int64(st, 10, checksum(k, v));
        ok = sqlite3_step(st) == SQLITE_DONE;
    }
    sd_status s = ok ? SD_OK : sd_cache_sql_error(c, err, SD_ERR_IO, "cannot store an algorithm choice");
    sqlite3_finalize(st);
    return s;
}

int64_t sd_cache_algo_count(sd_sqlite_cache *c) {
    sqlite3_stmt *st = NULL;
    int64_t n = 0;
    if (sqlite3_prepare_v2(c->db, "SELECT count(*) FROM algo_choices", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}
