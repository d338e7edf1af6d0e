/* test_hashmap.c - core/hashmap.h against a plain array doing the same
 * inserts, replacements and removals (a long random sequence, so growth and
 * backward-shift removal over wrapped probe runs are all exercised). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/hashmap.h"
#include "testutil.h"

static void test_basics(void) {
    sd_hashmap *m = sd_hashmap_new();
    CHECK(m != NULL);
    size_t v = 0;
    CHECK(sd_hashmap_count(m) == 0);
    CHECK(!sd_hashmap_get_str(m, "a", &v));
    CHECK(!sd_hashmap_remove_str(m, "a"));
    CHECK(sd_hashmap_put_str(m, "a", 1) == 0);
    CHECK(sd_hashmap_put_str(m, "b", 2) == 0);
    CHECK(sd_hashmap_get_str(m, "a", &v) && v == 1);
    CHECK(sd_hashmap_get_str(m, "b", &v) && v == 2);
    CHECK(sd_hashmap_put_str(m, "a", 7) == 0); /* replace */
    CHECK(sd_hashmap_count(m) == 2);
    CHECK(sd_hashmap_get_str(m, "a", &v) && v == 7);
    CHECK(sd_hashmap_get_str(m, "a", NULL));

    /* Keys are bytes: a NUL inside is part of the key, and "" is a key. */
    CHECK(sd_hashmap_put(m, "x\0y", 3, 10) == 0);
    CHECK(sd_hashmap_put(m, "x\0z", 3, 11) == 0);
    CHECK(sd_hashmap_put(m, "", 0, 12) == 0);
    CHECK(sd_hashmap_get(m, "x\0y", 3, &v) && v == 10);
    CHECK(sd_hashmap_get(m, "x\0z", 3, &v) && v == 11);
    CHECK(!sd_hashmap_get_str(m, "x", &v)); /* a prefix is another key */
    CHECK(sd_hashmap_get_str(m, "", &v) && v == 12);
    CHECK(sd_hashmap_count(m) == 5);
    CHECK(sd_hashmap_remove(m, "x\0y", 3));
    CHECK(!sd_hashmap_get(m, "x\0y", 3, &v));
    CHECK(sd_hashmap_get(m, "x\0z", 3, &v) && v == 11);
    CHECK(sd_hashmap_count(m) == 4);
    sd_hashmap_free(m);
    sd_hashmap_free(NULL);
    CHECK(sd_hashmap_count(NULL) == 0);
    CHECK(!sd_hashmap_get_str(NULL, "a", &v));
}

/* ---- random operations against a reference ------------------------------------ */

enum { N_KEYS = 3000, N_OPS = 200000 };

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static void test_random(void) {
    static char keys[N_KEYS][16];
    static size_t lens[N_KEYS];
    static int present[N_KEYS];
    static size_t values[N_KEYS];
    for (int i = 0; i < N_KEYS; i++) {
        /* short numeric ids like a workflow's, some with a NUL in the middle */
        lens[i] = (size_t)snprintf(keys[i], sizeof keys[i], "%d", i);
        if (i % 7 == 0) { keys[i][lens[i]] = 0; keys[i][lens[i] + 1] = 'n'; lens[i] += 2; }
    }
    sd_hashmap *m = sd_hashmap_new();
    size_t count = 0;
    int bad = 0;
    for (int op = 0; op < N_OPS && !bad; op++) {
        int k = (int)(rnd() % N_KEYS);
        uint32_t what = rnd() % 10;
        size_t v;
        if (what < 5) {
            size_t val = rnd();
            if (sd_hashmap_put(m, keys[k], lens[k], val)) { bad = 1; break; }
            if (!present[k]) count++;
            present[k] = 1;
            values[k] = val;
        } else if (what < 8) {
            int had = sd_hashmap_remove(m, keys[k], lens[k]);
            if (had != present[k]) bad = 2;
            if (present[k]) count--;
            present[k] = 0;
        } else {
            int got = sd_hashmap_get(m, keys[k], lens[k], &v);
            if (got != present[k] || (got && v != values[k])) bad = 3;
        }
        if (sd_hashmap_count(m) != count) bad = 4;
        if (op % 20000 == 0) /* a full sweep now and then: no entry lost by a shift */
            for (int i = 0; i < N_KEYS; i++) {
                int got = sd_hashmap_get(m, keys[i], lens[i], &v);
                if (got != present[i] || (got && v != values[i])) bad = 5;
            }
    }
    CHECK_MSG(!bad, "hash map disagrees with the reference (case %d)", bad);
    /* Empty it completely, then refill: removal leaves a usable table. */
    for (int i = 0; i < N_KEYS; i++) sd_hashmap_remove(m, keys[i], lens[i]);
    CHECK(sd_hashmap_count(m) == 0);
    for (int i = 0; i < N_KEYS; i++) CHECK(!sd_hashmap_get(m, keys[i], lens[i], NULL));
    for (int i = 0; i < N_KEYS; i++) sd_hashmap_put(m, keys[i], lens[i], (size_t)i);
    int all = 1;
    for (int i = 0; i < N_KEYS; i++) {
        size_t v;
        all &= sd_hashmap_get(m, keys[i], lens[i], &v) && v == (size_t)i;
    }
    CHECK(all);
    CHECK(sd_hashmap_count(m) == N_KEYS);
    sd_hashmap_free(m);
}

/* Two maps hash with different random keys; both must still work on the
 * same 100,000 keys (the size of a large generated workflow). */
static void test_large(void) {
    enum { N = 100000 };
    char (*ids)[12] = malloc(sizeof(*ids) * N);
    sd_hashmap *a = sd_hashmap_new(), *b = sd_hashmap_new();
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "%d", i + 1);
        CHECK(sd_hashmap_put_str(a, ids[i], (size_t)i) == 0);
        CHECK(sd_hashmap_put_str(b, ids[i], (size_t)(N - i)) == 0);
    }
    int ok = 1;
    for (int i = 0; i < N; i++) {
        size_t va, vb;
        ok &= sd_hashmap_get_str(a, ids[i], &va) && va == (size_t)i;
        ok &= sd_hashmap_get_str(b, ids[i], &vb) && vb == (size_t)(N - i);
    }
    CHECK(ok);
    CHECK(!sd_hashmap_get_str(a, "0", NULL) && !sd_hashmap_get_str(a, "100001", NULL));
    sd_hashmap_free(a);
    sd_hashmap_free(b);
    free(ids);
}

int main(void) {
    test_basics();
    test_random();
    test_large();
    return sd_test_finish();
}
