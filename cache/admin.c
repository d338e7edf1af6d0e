/* admin.c - stats, listing, clear and LRU garbage collection. */
#include "cache_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/sha256.h"

static int64_t file_size(const char *path, const char *suffix) {
    char p[4096];
    snprintf(p, sizeof p, "%s%s", path, suffix);
    struct stat sb;
    return stat(p, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

/* One int64 from a query with no parameters; -1 on error. */
static int64_t query_i64(sd_sqlite_cache *c, const char *sql) {
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

sd_status sd_cache_get_stats(sd_sqlite_cache *c, sd_cache_stats *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db, "SELECT count(*), coalesce(sum(bytes), 0) FROM entries", -1, &st, NULL) !=
            SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        sd_status s = sd_cache_sql_error(c, err, SD_ERR_IO, "cannot read statistics");
        sqlite3_finalize(st);
        return s;
    }
    out->entries = sqlite3_column_int64(st, 0);
    out->total_bytes = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    int64_t fh = query_i64(c, "SELECT count(*) FROM file_hashes");
    out->file_hashes = fh < 0 ? 0 : fh;
    out->db_bytes = file_size(c->path, "") + file_size(c->path, "-wal");
    return SD_OK;
}

void sd_cache_listing_free(sd_cache_listing *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) free(l->items[i].class_type);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

sd_status sd_cache_list(sd_sqlite_cache *c, sd_cache_listing *out, sd_error *err) {
    out->items = NULL;
    out->n = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT key, class_type, bytes, created, last_used FROM entries"
                           " ORDER BY last_used DESC, rowid DESC",
                           -1, &st, NULL) != SQLITE_OK)
        return sd_cache_sql_error(c, err, SD_ERR_IO, "cannot list entries");
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            sd_cache_item *ni = realloc(out->items, nc * sizeof *ni);
            if (!ni) goto nomem;
            out->items = ni;
            cap = nc;
        }
        sd_cache_item *it = &out->items[out->n];
        memset(it, 0, sizeof *it);
        uint8_t key[SD_KEY_SIZE] = {0};
        int kn = sqlite3_column_bytes(st, 0);
        const void *kb = sqlite3_column_blob(st, 0);
        if (kb) memcpy(key, kb, kn < SD_KEY_SIZE ? (size_t)kn : SD_KEY_SIZE);
        sd_sha256_hex(key, it->key_hex);
        const unsigned char *ct = sqlite3_column_text(st, 1);
        it->class_type = strdup(ct ? (const char *)ct : "");
        if (!it->class_type) goto nomem;
        it->bytes = sqlite3_column_int64(st, 2);
        it->created_ns = sqlite3_column_int64(st, 3);
        it->last_used_ns = sqlite3_column_int64(st, 4);
        out->n++;
    }
    if (rc != SQLITE_DONE) {
        sd_status s = sd_cache_sql_error(c, err, SD_ERR_IO, "cannot list entries");
        sqlite3_finalize(st);
        sd_cache_listing_free(out);
        return s;
    }
    sqlite3_finalize(st);
    return SD_OK;
nomem:
    sqlite3_finalize(st);
    sd_cache_listing_free(out);
    return sd_error_set(err, SD_ERR_NOMEM, "cache %s: out of memory listing entries", c->path);
}

/* Give freed pages back to the file system and fold the WAL into the main
 * file. Both are best effort: another process reading may hold them. */
static void shrink(sd_sqlite_cache *c) {
    sd_cache_exec(c, "PRAGMA incremental_vacuum");
    sd_cache_exec(c, "PRAGMA wal_checkpoint(TRUNCATE)");
}

sd_status sd_cache_clear(sd_sqlite_cache *c, sd_error *err) {
    if (c->readonly) return sd_error_set(err, SD_ERR_IO, "cache %s is read-only; cannot clear it", c->path);
    if (sd_cache_exec(c, "BEGIN IMMEDIATE; DELETE FROM entries; DELETE FROM file_hashes; COMMIT") != SQLITE_OK) {
        sd_status s = sd_cache_sql_error(c, err, SD_ERR_IO, "cannot clear");
        sd_cache_exec(c, "ROLLBACK");
        return s;
    }
    shrink(c);
    return SD_OK;
}

void sd_cache_set_limit(sd_sqlite_cache *c, int64_t max_bytes) { c->limit = max_bytes > 0 ? max_bytes : 0; }

sd_status sd_cache_gc(sd_sqlite_cache *c, int64_t max_bytes, int64_t *removed, int64_t *freed, sd_error *err) {
    if (removed) *removed = 0;
    if (freed) *freed = 0;
    if (max_bytes < 0) return sd_error_set(err, SD_ERR_INVALID, "cache gc: negative size limit");
    if (c->readonly) return sd_error_set(err, SD_ERR_IO, "cache %s is read-only; cannot evict", c->path);
    if (sd_cache_exec(c, "BEGIN IMMEDIATE") != SQLITE_OK)
        return sd_cache_sql_error(c, err, SD_ERR_IO, "gc cannot lock the database");
    sd_status s = SD_OK;
    sqlite3_stmt *sel = NULL, *del = NULL;
    int64_t total = query_i64(c, "SELECT coalesce(sum(bytes), 0) FROM entries");
    int64_t n_rm = 0, n_freed = 0;
    if (total < 0) {
        s = sd_cache_sql_error(c, err, SD_ERR_IO, "gc cannot sum entry sizes");
        goto done;
    }
    if (total <= max_bytes) goto done;
    /* Collect the rowids to evict first: deleting rows from a table while a
     * SELECT walks it is not something to rely on. */
    if (sqlite3_prepare_v2(c->db, "SELECT rowid, bytes FROM entries ORDER BY last_used ASC, rowid ASC", -1, &sel,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(c->db, "DELETE FROM entries WHERE rowid = ?1", -1, &del, NULL) != SQLITE_OK) {
        s = sd_cache_sql_error(c, err, SD_ERR_IO, "gc cannot prepare");
        goto done;
    }
    int64_t *ids = NULL;
    size_t nids = 0, cap = 0;
    int rc;
    while (total - n_freed > max_bytes && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
        if (nids == cap) {
            size_t nc = cap ? cap * 2 : 64;
            int64_t *ni = realloc(ids, nc * sizeof *ni);
            if (!ni) {
                free(ids);
                s = sd_error_set(err, SD_ERR_NOMEM, "cache %s: out of memory in gc", c->path);
                goto done;
            }
            ids = ni;
            cap = nc;
        }
        ids[nids++] = sqlite3_column_int64(sel, 0);
        n_freed += sqlite3_column_int64(sel, 1);
    }
    sqlite3_reset(sel);
    for (size_t i = 0; i < nids && s == SD_OK; i++) {
        sqlite3_bind_int64(del, 1, ids[i]);
        if (sqlite3_step(del) != SQLITE_DONE) s = sd_cache_sql_error(c, err, SD_ERR_IO, "gc cannot delete");
        sqlite3_reset(del);
        n_rm++;
    }
    free(ids);
done:
    sqlite3_finalize(sel);
    sqlite3_finalize(del);
    if (s == SD_OK && sd_cache_exec(c, "COMMIT") != SQLITE_OK)
        s = sd_cache_sql_error(c, err, SD_ERR_IO, "gc cannot commit");
    if (s != SD_OK) {
        sd_cache_exec(c, "ROLLBACK");
        return s;
    }
    if (n_rm) shrink(c);
    if (removed) *removed = n_rm;
    if (freed) *freed = n_freed;
    return SD_OK;
}
