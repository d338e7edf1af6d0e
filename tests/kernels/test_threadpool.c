/* test_threadpool.c - the CPU pool runs every task exactly once, reports
 * valid thread ids, and serialises jobs submitted from several threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/threadpool.h"
#include "testutil.h"

typedef struct {
    int *hits;
    int n_threads;
    int bad_thread;
} job;

static void task(void *ctx, int64_t t, int thread) {
    job *j = ctx;
    __atomic_add_fetch(&j->hits[t], 1, __ATOMIC_RELAXED);
    if (thread < 0 || thread >= j->n_threads) __atomic_store_n(&j->bad_thread, 1, __ATOMIC_RELAXED);
}

static int run_and_check(sd_pool *p, int64_t n) {
    job j = {calloc((size_t)n + 1, sizeof(int)), sd_pool_threads(p), 0};
    sd_pool_run(p, n, task, &j);
    int ok = !j.bad_thread;
    for (int64_t i = 0; i < n; i++) ok &= j.hits[i] == 1;
    free(j.hits);
    return ok;
}

typedef struct {
    sd_pool *p;
    int ok;
} caller;

static void *submit(void *arg) {
    caller *c = arg;
    c->ok = 1;
    for (int r = 0; r < 200; r++) c->ok &= run_and_check(c->p, 1 + r % 37);
    return NULL;
}

int main(void) {
    for (int nt = 1; nt <= 4; nt++) {
        sd_pool *p = sd_pool_new(nt);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(sd_pool_threads(p) == nt);
        CHECK(run_and_check(p, 0));
        CHECK(run_and_check(p, 1));
        CHECK(run_and_check(p, 7));
        CHECK(run_and_check(p, 10007));
        for (int r = 0; r < 500; r++) CHECK(run_and_check(p, 1 + r % 5)); /* many short jobs */
        caller a = {p, 0}, b = {p, 0};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, submit, &a);
        pthread_create(&tb, NULL, submit, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(a.ok && b.ok);
        sd_pool_free(p);
    }
    sd_pool_free(NULL);
    return sd_test_finish();
}
