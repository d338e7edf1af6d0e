/* hashmap.h - byte-string keys to size_t values, in expected O(1).
 *
 * What the graph and the executor use to find nodes by id and results by
 * key, so that work on a workflow grows linearly with its size (a 100,000
 * node workflow is validated and planned in a fraction of a second).
 *
 * Keys are BORROWED: the map stores the pointer and length it is given and
 * never copies or frees the bytes, so a key must stay valid and unchanged
 * while it is in the map (graph node ids, which the node owns, are). Keys
 * may hold any bytes, NUL included; the *_str helpers use strlen().
 *
 * The hash is SipHash-1-3 with a random key per map (as Redis hashes its
 * dicts), so ids crafted to collide cannot turn lookups quadratic. Open
 * addressing with linear probing, at most half full; removal shifts the
 * following entries back, so there are no tombstones and no rehash storms.
 * Iteration order is not defined (no iteration is offered).
 */
#ifndef SD_HASHMAP_H
#define SD_HASHMAP_H

#include <stddef.h>

typedef struct sd_hashmap sd_hashmap;

/* An empty map; NULL when out of memory. */
sd_hashmap *sd_hashmap_new(void);
void sd_hashmap_free(sd_hashmap *m); /* safe on NULL; the keys are not freed */

/* Insert, or replace the value (and the stored key pointer) of an equal key.
 * Returns 0, or -1 when out of memory (the map is then unchanged); replacing
 * never allocates, so it cannot fail. */
int sd_hashmap_put(sd_hashmap *m, const void *key, size_t len, size_t value);
/* 1 and *value (when value != NULL) if the key is there, else 0. */
int sd_hashmap_get(const sd_hashmap *m, const void *key, size_t len, size_t *value);
/* 1 if the key was there (and is now gone), else 0. */
int sd_hashmap_remove(sd_hashmap *m, const void *key, size_t len);
size_t sd_hashmap_count(const sd_hashmap *m);

/* The same for NUL-terminated keys. */
int sd_hashmap_put_str(sd_hashmap *m, const char *key, size_t value);
int sd_hashmap_get_str(const sd_hashmap *m, const char *key, size_t *value);
int sd_hashmap_remove_str(sd_hashmap *m, const char *key);

#endif
