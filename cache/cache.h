/* cache.h - persistent output cache in SQLite (the sd_cache_i of executor.h).
 *
 * One sd_sqlite_cache is one connection to one database file (schema and
 * value format: docs/cache.md). The database is in WAL mode with a 10 s busy
 * timeout, so several processes may use one file at once. A connection is
 * for one thread at a time; open one per process (never share across fork).
 *
 * Errors: opening fails (SD_ERR_IO / SD_ERR_FORMAT / SD_ERR_UNSUPPORTED,
 * message naming the path) when the file cannot be opened or is not an
 * sdflow cache; callers then run uncached. After a successful open every
 * failure is soft: a get that cannot read is a miss, a put that cannot write
 * returns an error the executor turns into a warning. A corrupt entry (bad
 * checksum, undecodable blob) is a miss and is deleted.
 *
 * Ownership: sd_cache_open gives the caller the cache; sd_cache_close frees
 * it. Values returned by get are new references owned by the caller.
 */
#ifndef SD_CACHE_H
#define SD_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/executor.h"
#include "core/value.h"

typedef struct sd_sqlite_cache sd_sqlite_cache;

/* Open flags for sd_cache_open_ex. */
#define SD_CACHE_READONLY 1u  /* never write; get works, put fails softly */

/* Open (creating file and schema when missing) the cache at `path`. A file
 * the process cannot write is opened read-only. */
sd_status sd_cache_open(const char *path, sd_sqlite_cache **out, sd_error *err);
sd_status sd_cache_open_ex(const char *path, unsigned flags, sd_sqlite_cache **out,
                           sd_error *err);
void sd_cache_close(sd_sqlite_cache *c); /* NULL-safe */

const char *sd_cache_path(const sd_sqlite_cache *c);
int sd_cache_is_readonly(const sd_sqlite_cache *c);

/* Default database path: $XDG_CACHE_HOME/sdflow/cache.db, else
 * $HOME/.cache/sdflow/cache.db; the directories are created. *out is
 * malloc'd (caller frees). SD_ERR_IO when no location can be made. */
sd_status sd_cache_default_path(char **out, sd_error *err);

/* The executor's view of this cache (self = c; valid while c is open). */
sd_cache_i sd_cache_interface(sd_sqlite_cache *c);

/* Same as the interface functions. get: SD_OK with *out on a hit,
 * SD_ERR_NOT_FOUND on a miss (including a corrupt entry, which is deleted;
 * err then says so). Every hit updates the entry's last-used time. put
 * replaces an existing entry; SD_ERR_INVALID for a value with handles,
 * SD_ERR_IO when the database cannot be written. When a size limit is set
 * (sd_cache_set_limit) put evicts least-recently-used entries after writing. */
sd_status sd_cache_get(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE], sd_value **out,
                       sd_error *err);
sd_status sd_cache_put(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE],
                       const char *class_type, const sd_value *v, sd_error *err);
/* 1 when an entry with this key exists (does not touch last-used). */
int sd_cache_contains(sd_sqlite_cache *c, const uint8_t key[SD_KEY_SIZE]);

/* File-hash memo keyed by (path, size, mtime_ns): SD_OK + hash on a hit,
 * SD_ERR_NOT_FOUND on a miss. put ignores failures (it is only a memo). */
sd_status sd_cache_file_hash_get(sd_sqlite_cache *c, const char *path, int64_t size,
                                 int64_t mtime_ns, uint8_t out[SD_KEY_SIZE]);
void sd_cache_file_hash_put(sd_sqlite_cache *c, const char *path, int64_t size,
                            int64_t mtime_ns, const uint8_t hash[SD_KEY_SIZE]);

/* ---- administration ------------------------------------------------------ */

typedef struct sd_cache_stats {
    int64_t entries;      /* number of cached outputs */
    int64_t total_bytes;  /* sum of their blob sizes */
    int64_t db_bytes;     /* size of the database file on disk (+ its WAL) */
    int64_t file_hashes;  /* entries in the file-hash memo */
} sd_cache_stats;

sd_status sd_cache_get_stats(sd_sqlite_cache *c, sd_cache_stats *out, sd_error *err);

typedef struct sd_cache_item {
    char key_hex[2 * SD_KEY_SIZE + 1];
    char *class_type;
    int64_t bytes;
    int64_t created_ns;   /* unix time in nanoseconds */
    int64_t last_used_ns; /* unix time in nanoseconds */
} sd_cache_item;

typedef struct sd_cache_listing {
    sd_cache_item *items; /* most recently used first */
    size_t n;
} sd_cache_listing;

sd_status sd_cache_list(sd_sqlite_cache *c, sd_cache_listing *out, sd_error *err);
void sd_cache_listing_free(sd_cache_listing *l);

/* Delete every entry and file hash and give the space back to the OS. */
sd_status sd_cache_clear(sd_sqlite_cache *c, sd_error *err);

/* Evict least-recently-used entries until the total blob size is at most
 * max_bytes. removed/freed (may be NULL) report what went. */
sd_status sd_cache_gc(sd_sqlite_cache *c, int64_t max_bytes, int64_t *removed, int64_t *freed,
                      sd_error *err);

/* Size limit applied after each put (0 = none, the default). */
void sd_cache_set_limit(sd_sqlite_cache *c, int64_t max_bytes);

/* Parse "2G", "500M", "1.5GiB", "4096", "10k" (K/M/G/T = powers of 1024,
 * optional "B" or "iB", case-insensitive). SD_ERR_INVALID on anything else,
 * negative or overflowing values. */
sd_status sd_cache_parse_size(const char *s, int64_t *out, sd_error *err);

#endif
