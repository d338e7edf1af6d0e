/* cache_impl.h - private to cache/: the connection struct and helpers the
 * files of this folder share. Not part of any contract. */
#ifndef SD_CACHE_IMPL_H
#define SD_CACHE_IMPL_H

#include <sqlite3.h>
#include "cache.h"

#define SD_CACHE_SCHEMA_VERSION 1
#define SD_CACHE_BUSY_MS 10000

struct sd_sqlite_cache {
    sqlite3 *db;
    char *path;
    int readonly;
    int64_t limit; /* bytes; 0 = no limit */
    /* Prepared once at open; each is reset after use. */
    sqlite3_stmt *st_get, *st_touch, *st_put, *st_del, *st_has, *st_fh_get, *st_fh_put;
};

/* Unix time in nanoseconds. */
int64_t sd_cache_now_ns(void);

/* Fill err with "<path>: <what>: <sqlite message>" and return code. */
sd_status sd_cache_sql_error(sd_sqlite_cache *c, sd_error *err, sd_status code, const char *what);

/* Run SQL without results; SQLITE_OK or the sqlite error code. */
int sd_cache_exec(sd_sqlite_cache *c, const char *sql);

#endif
