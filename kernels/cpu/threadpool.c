#include "threadpool.h"

#include <pthread.h>
#include <stdlib.h>

struct sd_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t run_mu; /* one job at a time: concurrent callers queue */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait for a new generation */
    pthread_cond_t done; /* caller waits for workers to leave the job */
    /* current job */
    sd_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    int64_t next; /* next task index, taken with an atomic add */
    unsigned generation;
    int active; /* workers still inside the current job */
    int quit;
};

typedef struct {
    sd_pool *p;
    int id;
} worker_arg;

static void drain(sd_pool *p, sd_pool_fn fn, void *ctx, int64_t n, int thread) {
    for (;;) {
        int64_t t = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (t >= n) break;
        fn(ctx, t, thread);
    }
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    sd_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        sd_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        drain(p, fn, ctx, n, id);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

sd_pool *sd_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    sd_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) { sd_pool_free(p); return NULL; }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            int ok = wa != NULL;
            if (ok) {
                wa->p = p;
                wa->id = i;
                ok = pthread_create(&p->threads[i - 1], NULL, worker, wa) == 0;
            }
            if (!ok) {
                free(wa);
                p->n_threads = i; /* only i-1 workers exist; free joins those */
                sd_pool_free(p);
                return NULL;
            }
        }
    }
    return p;
}

void sd_pool_free(sd_pool *p) {
    if (!p) return;
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->threads[i], NULL);
        free(p->threads);
    }
    pthread_mutex_destroy(&p->run_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int sd_pool_threads(const sd_pool *p) { return p ? p->n_threads : 1; }

void sd_pool_run(sd_pool *p, int64_t n_tasks, sd_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    p->next = 0;
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p, fn, ctx, n_tasks, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->run_mu);
}
