/* hashmap.c - open addressing with linear probing and backward-shift
 * deletion (see hashmap.h). Each slot keeps the key's full hash, so a probe
 * compares bytes only when the hashes agree and growing never rehashes. */
#include "hashmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct slot {
    const void *key; /* NULL: empty */
    size_t len;
    size_t value;
    uint64_t hash;
} slot;

struct sd_hashmap {
    slot *slots;
    size_t cap, count; /* cap is 0 or a power of two */
    uint64_t k0, k1;   /* SipHash key */
};

/* ---- SipHash-1-3 (Aumasson and Bernstein; the variant Redis and Rust use) ---- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                       \
    do {                                                                               \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                     \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                         \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                         \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                     \
    } while (0)

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t siphash13(const void *data, size_t len, uint64_t k0, uint64_t k1) {
    const unsigned char *p = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    size_t full = len & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = load_le64(p + i);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++) b |= (uint64_t)p[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* splitmix64: spreads a weak fallback seed over all bits. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A random key per map. Without getrandom (a sandbox that forbids it) the
 * clock and the map's address still make the key unknown to whoever wrote
 * the workflow, which is all that flooding protection needs. */
static void seed(sd_hashmap *m) {
    uint64_t k[2];
    if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k[0] = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32));
        k[1] = mix64(k[0] ^ (uint64_t)(uintptr_t)m);
    }
    m->k0 = k[0];
    m->k1 = k[1];
}

/* ---- the table ---------------------------------------------------------------- */

sd_hashmap *sd_hashmap_new(void) {
    sd_hashmap *m = calloc(1, sizeof *m);
    if (m) seed(m);
    return m;
}

void sd_hashmap_free(sd_hashmap *m) {
    if (!m) return;
    free(m->slots);
    free(m);
}

size_t sd_hashmap_count(const sd_hashmap *m) { return m ? m->count : 0; }

/* Index of the slot holding key, or of the empty slot where it would go. */
static size_t find(const sd_hashmap *m, const void *key, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        const slot *s = &m->slots[i];
        if (!s->key) return i;
        if (s->hash == h && s->len == len && (len == 0 || memcmp(s->key, key, len) == 0)) return i;
    }
}

static int grow(sd_hashmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 16;
    if (cap < m->cap || cap > SIZE_MAX / sizeof(slot)) return -1;
    slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = (size_t)m->slots[i].hash & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int sd_hashmap_put(sd_hashmap *m, const void *key, size_t len, size_t value) {
    if (!key) key = ""; /* an empty slot is a NULL key: store the empty key as "" */
    uint64_t h = siphash13(key, len, m->k0, m->k1);
    slot *s = m->cap ? &m->slots[find(m, key, len, h)] : NULL;
    if (!s || !s->key) { /* a new key; replacing one never allocates */
        if ((m->count + 1) * 2 > m->cap) {
            if (grow(m)) return -1;
            s = &m->slots[find(m, key, len, h)];
        }
        m->count++;
    }
    *s = (slot){key, len, value, h};
    return 0;
}

int sd_hashmap_get(const sd_hashmap *m, const void *key, size_t len, size_t *value) {
    if (!m || !m->count) return 0;
    if (!key) key = "";
    const slot *s = &m->slots[find(m, key, len, siphash13(key, len, m->k0, m->k1))];
    if (!s->key) return 0;
    if (value) *value = s->value;
    return 1;
}

int sd_hashmap_remove(sd_hashmap *m, const void *key, size_t len) {
    if (!m || !m->count) return 0;
    if (!key) key = "";
    size_t mask = m->cap - 1;
    size_t gap = find(m, key, len, siphash13(key, len, m->k0, m->k1));
    if (!m->slots[gap].key) return 0;
    /* Backward shift: an entry after the gap moves into it when the gap lies
     * on its probe path (between its home slot and where it sits). */
    for (size_t j = (gap + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = (size_t)m->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - gap) & mask)) {
            m->slots[gap] = m->slots[j];
            gap = j;
        }
    }
    m->slots[gap] = (slot){0};
    m->count--;
    return 1;
}

int sd_hashmap_put_str(sd_hashmap *m, const char *key, size_t value) {
    return sd_hashmap_put(m, key, key ? strlen(key) : 0, value);
}

int sd_hashmap_get_str(const sd_hashmap *m, const char *key, size_t *value) {
    return sd_hashmap_get(m, key, key ? strlen(key) : 0, value);
}

int sd_hashmap_remove_str(sd_hashmap *m, const char *key) {
    return sd_hashmap_remove(m, key, key ? strlen(key) : 0);
}
