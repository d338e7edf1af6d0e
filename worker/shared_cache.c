/* shared_cache.c - the Redis tier of the node-output cache (shared_cache.h). */
#include "shared_cache.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/sha256.h"
#include "core/value_io.h"
#include "server/redis.h"

static void cache_key(char *buf, size_t n, const sd_shared_cache *sc, const uint8_t key[SD_KEY_SIZE]) {
    char hex[2 * SD_KEY_SIZE + 1];
    for (int i = 0; i < SD_KEY_SIZE; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
    snprintf(buf, n, "%s:cache:%s", sc->prefix, hex);
}

static sd_status sc_get(void *self, const uint8_t key[SD_KEY_SIZE], sd_value **out, sd_error *err) {
    sd_shared_cache *sc = self;
    *out = NULL;
    if (sc->local && sc->local->get) {
        sd_status rc = sc->local->get(sc->local->self, key, out, err);
        if (rc != SD_ERR_NOT_FOUND) return rc;
        sd_error_clear(err);
    }
    redisContext *c = *sc->conn;
    if (!c) return SD_ERR_NOT_FOUND;
    char k[600];
    cache_key(k, sizeof k, sc, key);
    redisReply *r = srv_redis_cmdl(c, err, "GET", k, SRV_REDIS_END);
    if (!r) return err->code; /* the executor warns and treats it as a miss */
    sd_status rc = SD_ERR_NOT_FOUND;
    if (r->type == REDIS_REPLY_STRING && r->len > 32) {
        uint8_t h[32];
        sd_sha256(r->str + 32, r->len - 32, h);
        if (!memcmp(h, r->str, 32)) rc = sd_value_deserialize(r->str + 32, r->len - 32, out, err);
        else rc = sd_error_set(err, SD_ERR_FORMAT, "redis %s: the stored value does not match its hash", k);
    }
    freeReplyObject(r);
    if (rc == SD_OK) {
        sc->hits++;
        if (sc->local && sc->local->put) { /* next time from the disk */
            sd_error e;
            sd_error_clear(&e);
            sc->local->put(sc->local->self, key, NULL, *out, &e);
        }
    }
    return rc;
}

static sd_status sc_put(void *self, const uint8_t key[SD_KEY_SIZE], const char *class_type, const sd_value *v,
                        sd_error *err) {
    sd_shared_cache *sc = self;
    sd_status local_rc = SD_OK;
    if (sc->local && sc->local->put) local_rc = sc->local->put(sc->local->self, key, class_type, v, err);
    redisContext *c = *sc->conn;
    if (!c || !sc->max_bytes) return local_rc;
    void *blob = NULL;
    size_t n = 0;
    sd_error e;
    sd_error_clear(&e);
    if (sd_value_serialize(v, &blob, &n, &e)) return local_rc; /* not data: the local cache said why */
    if (n > sc->max_bytes) {
        free(blob);
        return local_rc;
    }
    char *buf = malloc(32 + n);
    if (!buf) {
        free(blob);
        return local_rc ? local_rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    sd_sha256(blob, n, (uint8_t *)buf);
    memcpy(buf + 32, blob, n);
    free(blob);
    char k[600], ttl[32];
    cache_key(k, sizeof k, sc, key);
    snprintf(ttl, sizeof ttl, "%ld", sc->ttl_s > 0 ? sc->ttl_s : 86400);
    const char *argv[] = {"SET", k, buf, "EX", ttl};
    const size_t lens[] = {3, strlen(k), 32 + n, 2, strlen(ttl)};
    redisReply *r = srv_redis_cmd(c, &e, 5, argv, lens);
    free(buf);
    if (r) {
        freeReplyObject(r);
        sc->stores++;
        return local_rc;
    }
    if (local_rc) return local_rc;
    *err = e;
    sd_error_prefix(err, "shared cache: %s output", class_type ? class_type : "node");
    return e.code;
}

static sd_status sc_file_hash_get(void *self, const char *path, int64_t size, int64_t mtime_ns,
                                  uint8_t out[SD_KEY_SIZE]) {
    sd_shared_cache *sc = self;
    if (!sc->local || !sc->local->file_hash_get) return SD_ERR_NOT_FOUND;
    return sc->local->file_hash_get(sc->local->self, path, size, mtime_ns, out);
}

static void sc_file_hash_put(void *self, const char *path, int64_t size, int64_t mtime_ns,
                             const uint8_t hash[SD_KEY_SIZE]) {
    sd_shared_cache *sc = self;
    if (sc->local && sc->local->file_hash_put) sc->local->file_hash_put(sc->local->self, path, size, mtime_ns, hash);
}

sd_cache_i sd_shared_cache_iface(sd_shared_cache *sc) {
    sd_cache_i i = {sc, sc_get, sc_put, sc_file_hash_get, sc_file_hash_put};
    return i;
}
